//! `memory_headroom`: small or short kernels while most device memory is unused; its time at
//! stake is that of the findings a larger batch would shrink (it overlaps them).

use super::common::{bytes, dur, pct_str, share};
use super::id::FindingId;
use super::inputs::FindingCx;
use crate::report::idle::Cause;
use crate::report::kernels::MemoryUse;
use crate::report::{pct, Finding, Severity};

/// Peak device memory below this share of capacity is headroom.
const USED_BELOW_PCT: f64 = 30.0;
/// The overlapped findings' time must reach this share to report...
const FIXABLE_PCT: f64 = 3.0;
/// ... and this share to warn.
const FIXABLE_WARN_PCT: f64 = 10.0;

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
    // The time of the findings it overlaps (`FindingId::about`).
    let fixable = cx.kstats.small_grid_ns as u64
        + cx.idle(Cause::LaunchBound)
        + cx.idle(Cause::KernelFragmentation);
    let fp = pct(fixable, cx.wall);
    if !(used < USED_BELOW_PCT && fp >= FIXABLE_PCT) {
        return None;
    }
    let mut x = cx.finding(
        FindingId::MemoryHeadroom,
        "Small batches while most device memory is unused",
        fixable,
        true,
    );
    if fp < FIXABLE_WARN_PCT {
        x.severity = Severity::Info;
    } else if x.severity == Severity::Critical {
        x.severity = Severity::Warn;
    }
    x.summary = format!(
        "Peak device memory was {:.0}% of capacity while small or short kernels cost {} of the steady state: a larger batch would use the idle memory and SMs.",
        used,
        share(fixable, cx.wall)
    );
    evidence(cx, m, used, &mut x);
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
        "median kernel {}, SM fill (block slots occupied) ~{}; time at stake is that of {}",
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
