//! `comm_straggler`: across the ranks of a job, one rank reaches collectives last and the
//! others' NCCL kernels spin waiting for it. The time they waited moves out of their
//! `comm_exposed` findings into this one.

use super::common::{self, dur, severity_for, share, REPORT_PCT};
use super::inputs::JobCx;
use crate::report::out::id::FindingId;
use crate::report::out::{Example, Finding, ProcessReport, Severity};
use crate::report::units::pct;

/// Arriving last at fewer than this share of collectives caps the finding at a warning.
const CRITICAL_LAST_PCT: f64 = 50.0;

pub(super) fn detect(cx: &JobCx, all: &mut Vec<Finding>) {
    if let Some(f) = straggler(cx) {
        all.push(f);
        take_over_waits(cx, all);
    }
}

fn straggler(cx: &JobCx) -> Option<Finding> {
    let (c, procs) = (cx.comm, cx.procs);
    let s = c.straggler?;
    let others: Vec<&ProcessReport> = procs.iter().filter(|p| p.index != s).collect();
    let wall =
        others.iter().map(|p| p.breakdown.wall_ns).sum::<u64>() / (others.len().max(1) as u64);
    let ns = c.others_wait_ns;
    let label = procs[s].label.clone();
    let mut x = common::finding(
        FindingId::CommStraggler,
        "A rank arrives late at collectives",
        ns,
        wall,
    );
    x.process = Some(s);
    x.rank = label.clone();
    if c.straggler_last_pct < CRITICAL_LAST_PCT && x.severity > Severity::Warn {
        x.severity = Severity::Warn;
    }
    x.summary = format!(
        "{label} reached collectives last; every other rank's NCCL kernels spun waiting for it, {} of their steady state.",
        share(ns, wall)
    );
    x.evidence = evidence(cx, s);
    x.examples = c
        .examples
        .iter()
        .map(|&(st, w)| Example {
            at_ns: st.saturating_sub(procs[s].trace_start_ns),
            dur_ns: w,
            what: format!("others waited {} for {label}", dur(w)),
        })
        .collect();
    x.metrics
        .insert("straggler_last_pct".into(), c.straggler_last_pct);
    x.metrics
        .insert("matched_collectives".into(), c.matched as f64);
    x.metrics.insert("others_wait_ns".into(), ns as f64);
    x.fix = format!(
        "Find what makes {label} slow before each collective: its input pipeline (num_workers, storage), uneven batch or sequence sizes across ranks (DistributedSampler, length bucketing), extra host work only it does (logging, evaluation, checkpointing on rank 0), or a throttled or shared GPU; gradient accumulation with no_sync() makes ranks meet less often."
    );
    Some(x)
}

fn evidence(cx: &JobCx, s: usize) -> Vec<String> {
    let (c, procs) = (cx.comm, cx.procs);
    let worst = c
        .ranks
        .iter()
        .filter(|r| r.process != s)
        .max_by(|a, b| a.wait_ns.cmp(&b.wait_ns).then(b.process.cmp(&a.process)));
    let mut evidence = vec![format!(
        "{} arrived last at {:.0}% of {} matched collectives ({} ranks)",
        procs[s].label,
        c.straggler_last_pct,
        c.matched,
        procs.len()
    )];
    if let Some(w) = worst {
        evidence.push(format!(
            "the other ranks waited {} each on average for it (most: {} waited {} in all collectives)",
            dur(c.others_wait_ns),
            procs[w.process].label,
            dur(w.wait_ns)
        ));
    }
    evidence.push(format!(
        "clocks aligned by {}; collective end times agree within {} (median)",
        c.alignment.replace('_', " "),
        dur(c.residual_ns)
    ));
    if c.unmatched > 0 {
        evidence.push(format!(
            "{} collectives of the first rank had no counterpart on every rank and were left out",
            c.unmatched
        ));
    }
    evidence
}

/// Moves the time each waiting rank spent waiting for the straggler out of its
/// `comm_exposed` finding (it is counted here) and says so.
fn take_over_waits(cx: &JobCx, all: &mut Vec<Finding>) {
    let (c, procs) = (cx.comm, cx.procs);
    let Some(s) = c.straggler else { return };
    for f in all.iter_mut().filter(|f| f.id == FindingId::CommExposed) {
        let Some(p) = f.process else { continue };
        if p == s {
            continue;
        }
        let Some(r) = c.ranks.iter().find(|r| r.process == p) else {
            continue;
        };
        let wall = procs[p].breakdown.wall_ns;
        let moved = r.wait_ns.min(f.at_stake_ns);
        f.at_stake_ns -= moved;
        f.at_stake_pct = pct(f.at_stake_ns, wall);
        f.severity = severity_for(f.at_stake_pct, f.at_stake_ns);
        f.evidence.push(format!(
            "{} of it was waiting for {} to arrive: counted under {}, not here",
            dur(moved),
            procs[s].label,
            FindingId::CommStraggler
        ));
        f.metrics.insert("straggler_wait_ns".into(), moved as f64);
    }
    all.retain(|f| f.id != FindingId::CommExposed || f.at_stake_pct >= REPORT_PCT);
}
