//! `memory_headroom`: small or short kernels while most device memory is unused, in a job
//! where a larger batch is plausible: training (backward or optimizer work seen in its
//! kernels or its Python stacks), not inference at a batch the caller chose. Its time at
//! stake is that of the largest finding a larger batch would shrink (small_grid,
//! bounded by the SM activity measured where GPM sampled; launch_bound;
//! kernel_fragmentation): the same time, never their sum. It warns only when that time
//! was measured, not estimated, and is large.

use super::common::{bytes, dur, pct_str, share};
use super::inputs::FindingCx;
use crate::report::idle::Cause;
use crate::report::kernels::MemoryUse;
use crate::report::out::id::FindingId;
use crate::report::out::{Finding, Severity};
use crate::report::units::pct;

/// Peak device memory below this share of capacity is headroom.
const USED_BELOW_PCT: f64 = 30.0;
/// The overlapped finding's time must reach this share to report...
const FIXABLE_PCT: f64 = 3.0;
/// ... and this share, measured, to warn.
const FIXABLE_WARN_PCT: f64 = 10.0;

/// Names (kernels, Python files and functions, any string of the trace) that say the job
/// trains: backward passes and optimizers. Lower case; matched as substrings.
const TRAINING_MARKS: &[&str] = &[
    "backward",
    "_bwd",
    "bwd_",
    "torch/optim/",
    "torch/autograd/",
    "optimizer",
    "multi_tensor_apply",
    "adam",
    "sgd",
];

/// Whether the trace shows training: any of its strings (kernel names, Python frames)
/// carries a [`TRAINING_MARKS`] mark.
fn trains(cx: &FindingCx) -> bool {
    cx.ctx.t.strings.iter().any(|s| {
        let s = s.to_ascii_lowercase();
        TRAINING_MARKS.iter().any(|m| s.contains(m))
    })
}

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    // The device with the most headroom.
    let m = cx
        .memory
        .iter()
        .filter(|m| m.capacity_bytes > 0)
        .min_by(|a, b| {
            pct(a.peak_bytes, a.capacity_bytes).total_cmp(&pct(b.peak_bytes, b.capacity_bytes))
        })?;
    let used = pct(m.peak_bytes, m.capacity_bytes);
    if used >= USED_BELOW_PCT || !trains(cx) {
        return None;
    }
    // The largest of the findings it overlaps (`FindingId::about`), and whether its time
    // is an estimate.
    let (grid_ns, grid_est, _) = super::small_grid::stake(cx);
    let (under, fixable, estimated) = [
        (FindingId::SmallGrid, grid_ns, grid_est),
        (FindingId::LaunchBound, cx.idle(Cause::LaunchBound), false),
        (
            FindingId::KernelFragmentation,
            cx.idle(Cause::KernelFragmentation),
            false,
        ),
    ]
    .into_iter()
    .max_by_key(|&(_, ns, _)| ns)?;
    let fp = pct(fixable, cx.wall);
    if fp < FIXABLE_PCT {
        return None;
    }
    let mut x = cx.finding(
        FindingId::MemoryHeadroom,
        "Small batches while most device memory is unused",
        fixable,
        estimated,
    );
    x.severity = if fp >= FIXABLE_WARN_PCT && !estimated {
        Severity::Warn
    } else {
        Severity::Info
    };
    x.summary = format!(
        "Peak device memory was {:.0}% of capacity in a training job while {} cost {} of the steady state: a larger batch would use the idle memory and give each launch more work.",
        used,
        under,
        share(fixable, cx.wall)
    );
    evidence(cx, m, used, &mut x);
    x.evidence.push(format!(
        "time at stake: {}'s {}{}, the same time as that finding's, not in addition",
        under,
        dur(fixable),
        if estimated {
            " (an estimate from grid sizes, no GPU counters to bound it: info, not a warning)"
        } else {
            ""
        }
    ));
    x.metrics.insert("peak_bytes".into(), m.peak_bytes as f64);
    x.metrics
        .insert("capacity_bytes".into(), m.capacity_bytes as f64);
    x.metrics.insert("peak_pct".into(), used);
    x.fix = if cx.graphs().is_some() {
        "Increase the batch size until device memory is ~80-90% used (scale the learning rate with it), and let the job's CUDA graphs be made again at that size: each replay then runs fewer, larger kernels; gradient accumulation would keep every kernel small.".into()
    } else {
        "Increase the batch size until device memory is ~80-90% used (scale the learning rate with it); if the optimiser needs the small batch, keep it as the effective batch but run fewer, larger steps per launch (CUDA graphs, torch.compile) rather than gradient accumulation, which keeps every kernel small.".into()
    };
    Some(x)
}

fn evidence(cx: &FindingCx, m: &MemoryUse, used: f64, x: &mut Finding) {
    x.evidence.push(format!(
        "peak device memory in steady state {} of {} ({:.1}%), from {} allocation records{}",
        bytes(m.peak_bytes),
        bytes(m.capacity_bytes),
        used,
        m.events,
        if m.lower_bound {
            " (a lower bound: the trace began after some allocations)"
        } else {
            ""
        }
    ));
    x.evidence.push(format!(
        "median kernel {}, SM fill (block slots occupied) ~{}; it overlaps {}",
        dur(cx.report.kernels.p50_ns),
        cx.report
            .sm_fill_pct
            .map(pct_str)
            .unwrap_or_else(|| "?".into()),
        x.overlaps
            .iter()
            .map(|id| id.as_str())
            .collect::<Vec<_>>()
            .join(" + ")
    ));
}
