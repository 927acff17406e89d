//! `hang`: GPU work that never completed. What the trace shows is read in
//! `crate::report::stalls` (stall records, or an abnormal end with launches that never
//! produced a GPU record); this turns it into the finding. Always critical: a job whose
//! GPU is stuck makes no progress at all. The time at stake is the stall's length, from
//! the last GPU progress to the end of the trace.

use super::inputs::FindingCx;
use crate::report::out::id::FindingId;
use crate::report::out::{Finding, Severity};
use crate::report::stalls::{evidence, fix, sentence};
use crate::report::units::pct;

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let h = cx.hang.as_ref()?;
    let ns = h.stake_ns();
    let title = match h.op.kind.as_str() {
        _ if h.op.nccl_kernel || h.nccl.is_some() => "A collective never completed",
        "kernel" => "A kernel never completed",
        "memcpy" | "memset" => "A copy never completed",
        _ => "GPU work never completed",
    };
    let mut f = cx.finding(FindingId::Hang, title, ns, h.source == "end_of_trace");
    f.severity = Severity::Critical;
    // A share of the whole trace: a hung job may have no steady state at all.
    let span = cx.ctx.t1.saturating_sub(cx.ctx.t0).max(h.until_ns);
    f.at_stake_pct = pct(ns, span.max(1)).min(100.0);
    f.summary = sentence(h, false);
    f.evidence = evidence(h, false);
    f.fix = fix(h);
    f.metrics
        .insert("stuck_for_ns".into(), h.stuck_for_ns as f64);
    f.metrics.insert("outstanding".into(), h.outstanding as f64);
    f.metrics
        .insert("last_progress_ns".into(), h.last_progress_ns as f64);
    f.hang = Some(Box::new(h.clone()));
    Some(f)
}
