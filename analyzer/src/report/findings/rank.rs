//! The order of the findings and the one-line verdict that names the top one.

use super::common::dur;
use super::id::FindingId;
use crate::report::{pct, Finding, ProcessReport, Severity};

/// Ranks findings by GPU time at stake. A finding that overlaps others (its id's
/// `overlaps`) is ranked right after the largest of them on the same process.
pub(crate) fn rank(all: &mut [Finding]) {
    let key: Vec<(u64, u8)> = all
        .iter()
        .map(|f| {
            if f.overlaps.is_empty() {
                return (f.at_stake_ns, 1);
            }
            let under = all
                .iter()
                .filter(|g| g.process == f.process && f.overlaps.contains(&g.id))
                .map(|g| g.at_stake_ns)
                .max();
            match under {
                Some(u) => (u.min(f.at_stake_ns), 0),
                None => (f.at_stake_ns, 1),
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
        format!(
            "GPU busy {busy:.0}% of {scope}, but the top finding is {}{who}: {} ({:.0}% of wall time, {}{est}){at}",
            f.id,
            lower_first(&f.title),
            f.at_stake_pct,
            dur(f.at_stake_ns)
        )
    };
    (line, Some(f.id))
}

/// What the verdict adds about its finding in the program's own terms, where measured:
/// `: workers_saturated, host at train.py:43 in main` (the measured sub-cause; the line
/// of the user's code that made most of the calls behind it, or else where the host's
/// Python samples put it most during the gaps, when that is a quarter of them or more).
/// Empty when neither is known.
fn in_user_terms(f: &Finding) -> String {
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
