//! `comm_straggler`: across the ranks of a job, one rank reaches collectives last and the
//! others wait for it: their NCCL kernels spin, or (collectives through host memory,
//! gloo's) their hosts block with the GPU idle. The time they waited moves out of their
//! `comm_exposed` findings (NCCL), or out of the `data_starvation` and `cpu_bound` it
//! reads as (host memory), into this one. The straggler's own top idle cause, when it
//! covers at least half of that wait, is what makes it late: this finding follows from
//! it (`caused_by`), ranked right after it.

use super::common::{self, dur, severity_for, share, REPORT_PCT};
use super::inputs::JobCx;
use crate::report::out::id::FindingId;
use crate::report::out::{Example, Finding, ProcessReport, Severity};
use crate::report::units::pct;

/// Arriving last at fewer than this share of collectives caps the finding at a warning.
const CRITICAL_LAST_PCT: f64 = 50.0;

pub(super) fn detect(cx: &JobCx, all: &mut Vec<Finding>) {
    if let Some(mut f) = straggler(cx) {
        take_over_waits(cx, all);
        own_cause(cx, &mut f, all);
        all.push(f);
    }
}

/// Whether the ranks met in collectives through host memory (gloo), not NCCL kernels.
fn through_host(cx: &JobCx) -> bool {
    cx.comm.matching == "host_copies"
}

/// The straggler's own largest idle cause: said in the evidence, and the cause this
/// finding follows from when it covers at least half of the others' wait.
fn own_cause(cx: &JobCx, f: &mut Finding, all: &[Finding]) {
    let Some(s) = cx.comm.straggler else { return };
    let Some(own) = all
        .iter()
        .filter(|g| g.process == Some(s) && g.id.is_idle_time())
        .filter(|g| !matches!(g.id, FindingId::CommStraggler | FindingId::CommExposed))
        .max_by(|a, b| {
            a.at_stake_ns
                .cmp(&b.at_stake_ns)
                .then(b.id.as_str().cmp(a.id.as_str()))
        })
    else {
        return;
    };
    f.evidence.push(format!(
        "meanwhile {} itself: {} {} of its steady state{}",
        cx.procs[s].label,
        own.id,
        share(own.at_stake_ns, cx.procs[s].breakdown.wall_ns),
        super::rank::in_user_terms(own)
    ));
    if own.at_stake_ns * 2 >= f.at_stake_ns {
        f.caused_by = Some(own.id);
        f.fix = format!(
            "Fix what makes {} late ({}, the cause), and the others stop waiting. {}",
            cx.procs[s].label, own.id, f.fix
        );
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
    x.summary = if through_host(cx) {
        format!(
            "{label} reached collectives last; every other rank waited for it in collectives through host memory (gloo), their GPUs idle, {} of their steady state.",
            share(ns, wall)
        )
    } else {
        format!(
            "{label} reached collectives last; every other rank's NCCL kernels spun waiting for it, {} of their steady state.",
            share(ns, wall)
        )
    };
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
    let how = if through_host(cx) {
        "; collectives through host memory, told from each rank's copies of a tensor to pinned host memory and back on a stream of their own"
    } else {
        ""
    };
    let mut evidence = vec![format!(
        "{} arrived last at {:.0}% of {} matched collectives ({} ranks{how})",
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

/// Moves the time each waiting rank spent waiting for the straggler out of the findings
/// it was counted in (it is counted here) and says so: `comm_exposed` (NCCL kernels
/// spinning), or `data_starvation` then `cpu_bound` (a host blocked in a collective
/// through host memory, the GPU idle).
fn take_over_waits(cx: &JobCx, all: &mut Vec<Finding>) {
    let (c, procs) = (cx.comm, cx.procs);
    let Some(s) = c.straggler else { return };
    let from: &[FindingId] = if through_host(cx) {
        &[FindingId::DataStarvation, FindingId::CpuBound]
    } else {
        &[FindingId::CommExposed]
    };
    let mut left: Vec<u64> = (0..procs.len())
        .map(|p| {
            c.ranks
                .iter()
                .find(|r| r.process == p)
                .map_or(0, |r| r.wait_ns)
        })
        .collect();
    for id in from {
        for f in all.iter_mut().filter(|f| f.id == *id) {
            let Some(p) = f.process else { continue };
            if p == s || p >= left.len() || left[p] == 0 {
                continue;
            }
            let wall = procs[p].breakdown.wall_ns;
            let moved = left[p].min(f.at_stake_ns);
            left[p] -= moved;
            f.at_stake_ns -= moved;
            f.at_stake_pct = pct(f.at_stake_ns, wall);
            f.severity = severity_for(f.at_stake_pct, f.at_stake_ns);
            f.evidence.push(format!(
                "{} of it was waiting for {} to arrive at collectives: counted under {}, not here",
                dur(moved),
                procs[s].label,
                FindingId::CommStraggler
            ));
            f.metrics.insert("straggler_wait_ns".into(), moved as f64);
        }
    }
    all.retain(|f| !from.contains(&f.id) || f.at_stake_pct >= REPORT_PCT);
}
