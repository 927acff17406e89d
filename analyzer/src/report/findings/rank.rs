//! The order of the findings and the one-line verdict that names the top one.

use super::common::dur;
use crate::report::out::id::{FindingId, Layer, Stake};
use crate::report::out::{Finding, ProcessReport, Severity};
use crate::report::units::pct;

/// The time a finding ranks by: its time at stake, half of it when that is a model's
/// estimate of poorly used busy time that no measurement checked (small_grid's estimate
/// from grid sizes read 23.5% of a job whose measured SM activity left room for 8%: an
/// unchecked estimate must not outrank a measured cause of similar size). Findings whose
/// stake is measured time with an estimated part (a shared GPU) rank by their time.
fn rank_ns(f: &Finding) -> u64 {
    let model = f.id.stake() == Stake::Busy && f.id.layer() != Layer::Environment;
    if model && f.estimated && !f.metrics.contains_key("measured_bound_ns") {
        f.at_stake_ns / 2
    } else {
        f.at_stake_ns
    }
}

/// Ranks findings by GPU time at stake ([`rank_ns`]). A cause ranks by its time and its
/// consequences' together (fixing it recovers both), each consequence right after it
/// (`caused_by`). A finding that overlaps others (its id's `overlaps`) is ranked right
/// after the largest of them on the same process.
pub(crate) fn rank(all: &mut [Finding]) {
    let base: Vec<u64> = all.iter().map(rank_ns).collect();
    let root_of = |f: &Finding| {
        let c = f.caused_by?;
        all.iter().position(|g| g.process == f.process && g.id == c)
    };
    let total: Vec<u64> = (0..all.len())
        .map(|i| {
            base[i]
                + (0..all.len())
                    .filter(|&j| {
                        all[j].process == all[i].process && all[j].caused_by == Some(all[i].id)
                    })
                    .map(|j| base[j])
                    .sum::<u64>()
        })
        .collect();
    let key: Vec<(u64, u8)> = all
        .iter()
        .enumerate()
        .map(|(i, f)| {
            if let Some(r) = root_of(f) {
                return (total[r], 0);
            }
            if f.overlaps.is_empty() {
                return (total[i], 1);
            }
            let under = (0..all.len())
                .filter(|&j| all[j].process == f.process && f.overlaps.contains(&all[j].id))
                .map(|j| total[j])
                .max();
            match under {
                Some(u) => (u.min(base[i]), 0),
                None => (base[i], 1),
            }
        })
        .collect();
    let mut idx: Vec<usize> = (0..all.len()).collect();
    // A hang leads whatever its time: the job makes no progress at all.
    let hang = |i: usize| all[i].id == FindingId::Hang;
    idx.sort_by(|&a, &b| {
        hang(b)
            .cmp(&hang(a))
            .then(key[b].cmp(&key[a]))
            .then(all[b].severity.cmp(&all[a].severity))
            .then(all[a].id.as_str().cmp(all[b].id.as_str()))
            .then(all[a].process.cmp(&all[b].process))
    });
    let sorted: Vec<Finding> = idx.iter().map(|&i| all[i].clone()).collect();
    all.clone_from_slice(&sorted);
}

/// The one-line verdict and the id it names.
pub(crate) fn verdict(procs: &[ProcessReport], all: &[Finding]) -> (String, Option<FindingId>) {
    // A hang leads, whether or not any GPU work was recorded.
    if let Some(f) = all.iter().find(|f| f.id == FindingId::Hang) {
        let who = if procs.len() > 1 {
            format!(" on {}", f.rank)
        } else {
            String::new()
        };
        let est = if f.estimated {
            " (inferred from the end of the trace)"
        } else {
            ""
        };
        return (format!("HANG{who}{est}: {}", f.summary), Some(f.id));
    }
    let with_gpu: Vec<&ProcessReport> = procs.iter().filter(|p| !p.devices.is_empty()).collect();
    if with_gpu.is_empty() {
        return (crate::report::damage::NO_GPU.into(), None);
    }
    let (idle, busy) = {
        let w: u64 = with_gpu.iter().map(|p| p.breakdown.wall_ns).sum();
        let i: u64 = with_gpu.iter().map(|p| p.breakdown.idle_ns).sum();
        let b: u64 = with_gpu.iter().map(|p| p.breakdown.busy_ns).sum();
        (pct(i, w), pct(b, w))
    };
    let scope = scope(&with_gpu);
    let Some(f) = all.iter().find(|f| f.severity >= Severity::Warn) else {
        return (
            format!("Healthy: GPU busy {busy:.0}% of {scope}; no warn-level finding"),
            None,
        );
    };
    let who = if procs.len() > 1 {
        format!(" on {}", f.rank)
    } else {
        String::new()
    };
    let est = if f.estimated { ", estimated" } else { "" };
    let at = in_user_terms(f);
    // The idle form only when the time at stake is idle time (a pageable copy's excess, for
    // one, is busy copy-engine time).
    let line = if f.id.is_idle_time() && f.at_stake_pct <= idle + 0.5 {
        format!(
            "GPU idle {idle:.0}% of {scope}; biggest cause: {}{who} ({:.0}% of wall time, {}{est}){at}",
            f.id,
            f.at_stake_pct,
            dur(f.at_stake_ns)
        )
    } else {
        // A failure's or a recompilation's share is of the whole trace.
        let of = if matches!(f.id.stake(), Stake::Failure | Stake::Run) {
            "the trace"
        } else {
            "wall time"
        };
        format!(
            "GPU busy {busy:.0}% of {scope}, but the top finding is {}{who}: {} ({:.0}% of {of}, {}{est}){at}",
            f.id,
            lower_first(&f.title),
            f.at_stake_pct,
            dur(f.at_stake_ns)
        )
    };
    let follows: Vec<String> = all
        .iter()
        .filter(|g| g.process == f.process && g.caused_by == Some(f.id))
        .map(|g| format!("{} ({:.0}% of wall time)", g.id, g.at_stake_pct))
        .collect();
    let line = if follows.is_empty() {
        line
    } else {
        format!("{line}; {} follows from it", follows.join(", "))
    };
    (line, Some(f.id))
}

/// What the verdict adds about its finding in the program's own terms, where measured:
/// `: workers_saturated, host at train.py:43 in main` (the measured sub-cause; the line
/// of the user's code that made most of the calls behind it, or else where the host's
/// Python samples put it most during the gaps, when that is a quarter of them or more).
/// Empty when neither is known.
pub(super) fn in_user_terms(f: &Finding) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(s) = &f.subcause {
        parts.push(s.clone());
    }
    // The top place only, and only when it is the user's code (a minor place of the
    // user's under a library's top one would mislead).
    if let Some(c) = f.call_sites.first().filter(|c| c.user_code) {
        parts.push(format!("called from {}", c.place()));
    } else if let Some(p) = f
        .host_was_in
        .first()
        .filter(|p| p.user_code && p.pct >= 25.0)
    {
        parts.push(format!(
            "host at {}:{} in {}",
            crate::report::callsites::short_file(&p.file),
            p.line,
            p.function
        ));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(": {}", parts.join(", "))
    }
}

/// What the verdict is about: the steady state of one process, or of several.
fn scope(with_gpu: &[&ProcessReport]) -> String {
    if let [p] = with_gpu {
        return if p.steps.count > 0 {
            format!(
                "steady state ({} steps, {})",
                p.steps.count,
                dur(p.steady.wall_ns)
            )
        } else {
            format!("steady state ({})", dur(p.steady.wall_ns))
        };
    }
    let Some(worst) = with_gpu
        .iter()
        .max_by(|a, b| a.breakdown.idle_pct.total_cmp(&b.breakdown.idle_pct))
    else {
        return "steady state".into();
    };
    format!(
        "steady state across {} processes (worst: {}, {:.0}% idle)",
        with_gpu.len(),
        worst.label,
        worst.breakdown.idle_pct
    )
}

/// A title in running text: its first letter lowered, unless it begins an acronym
/// ("GPU idle ...").
fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) if !c.clone().next().is_some_and(char::is_uppercase) => {
            f.to_lowercase().chain(c).collect()
        }
        _ => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::findings::common;

    fn f(id: FindingId, ms: u64, estimated: bool) -> Finding {
        let mut x = common::finding(id, "t", ms * 1_000_000, 100_000_000);
        x.process = Some(0);
        x.estimated = estimated;
        x
    }

    #[test]
    fn a_title_in_running_text_keeps_an_acronym() {
        assert_eq!(
            lower_first("GPU idle while the feeding thread"),
            "GPU idle while the feeding thread"
        );
        assert_eq!(
            lower_first("Copies from pageable memory"),
            "copies from pageable memory"
        );
        assert_eq!(lower_first("A"), "a");
        assert_eq!(lower_first(""), "");
    }

    fn order(all: &mut [Finding]) -> Vec<FindingId> {
        rank(all);
        all.iter().map(|f| f.id).collect()
    }

    #[test]
    fn an_unchecked_estimate_counts_half_and_a_cause_leads_its_consequence() {
        use FindingId::*;
        // 10 ms estimated by grid sizes, unchecked, against 7 ms measured.
        let mut all = [f(SmallGrid, 10, true), f(ImplicitSync, 7, false)];
        assert_eq!(order(&mut all), [ImplicitSync, SmallGrid]);
        // Checked against the GPU's counters, the estimate ranks by its time.
        let mut checked = f(SmallGrid, 10, true);
        checked.metrics.insert("measured_bound_ns".into(), 2e7);
        let mut all = [checked, f(ImplicitSync, 7, false)];
        assert_eq!(order(&mut all), [SmallGrid, ImplicitSync]);
        // A consequence larger than its cause ranks right after it; the cause leads
        // an unrelated finding larger than either alone.
        let mut lb = f(LaunchBound, 30, false);
        lb.caused_by = Some(ImplicitSync);
        let mut all = [f(CpuBound, 35, false), lb, f(ImplicitSync, 10, false)];
        assert_eq!(order(&mut all), [ImplicitSync, LaunchBound, CpuBound]);
    }
}
