//! `launch_bound`: kernels shorter than the time to launch them; the host issued work back
//! to back and still could not keep the GPU fed.

use super::common::{dur, push_examples_line, share};
use super::{FindingCx, FindingId};
use crate::report::idle::Cause;
use crate::report::Finding;

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let ns = cx.idle(Cause::LaunchBound);
    if !cx.reportable(ns) {
        return None;
    }
    let mut x = cx.finding(
        FindingId::LaunchBound,
        "Kernels shorter than the time to launch them",
        ns,
        false,
    );
    let (k, l) = (&cx.report.kernels, &cx.report.launches);
    x.summary = format!(
        "The host issued work back to back but could not keep up: the GPU finished each kernel before the next was launched, idle {} of the steady state.",
        share(ns, cx.wall)
    );
    x.evidence.push(format!(
        "{} kernels in {} ({:.0}/s); median kernel {}, while the host launched one every {} (median call {})",
        k.count,
        dur(cx.report.steady.wall_ns),
        k.per_second,
        dur(k.p50_ns),
        dur(l.launch_interval_p50_ns),
        dur(l.launch_call_p50_ns)
    ));
    if l.linked > 0 {
        x.evidence.push(format!(
            "{:.0}% of submissions found their stream's queue empty (mean depth {:.1}); launch latency median {}",
            l.empty_queue_pct,
            l.mean_queue_depth,
            dur(l.latency_p50_ns)
        ));
    }
    x.examples = cx.idle_examples(Cause::LaunchBound);
    push_examples_line(&mut x);
    cx.heuristic_note(&mut x);
    x.metrics.insert("kernels_per_s".into(), k.per_second);
    x.metrics.insert("kernel_p50_ns".into(), k.p50_ns as f64);
    x.metrics.insert(
        "launch_interval_p50_ns".into(),
        l.launch_interval_p50_ns as f64,
    );
    x.metrics
        .insert("empty_queue_pct".into(), l.empty_queue_pct);
    x.fix = "Cut the per-kernel host cost: capture the step in a CUDA graph (torch.compile(mode=\"reduce-overhead\") or torch.cuda.CUDAGraph), fuse small ops with torch.compile, and give each kernel more work (a larger batch).".into();
    Some(x)
}
