//! `launch_bound`: kernels shorter than the time to launch them; the host issued work back
//! to back and still could not keep the GPU fed.

use super::common::{dur, push_examples_line, share};
use super::cx::FindingCx;
use super::id::FindingId;
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
    match cx.graphs() {
        // Launched through calls that were not recorded (driver API).
        Some(g) if l.launch_calls == 0 => x.evidence.push(format!(
            "{} CUDA graph replays ({} kernels) in {}, median kernel {}; their launch calls were not recorded (driver-API launches: GPUTRACE_DRIVER_API=1 records them)",
            g.replays,
            g.kernels,
            dur(cx.report.steady.wall_ns),
            dur(k.p50_ns)
        )),
        // A graph launch is one host call for all its kernels: count calls, not kernels.
        Some(g) => x.evidence.push(format!(
            "{} launch calls in {}, {} of them CUDA graph replays ({} kernels, {:.0}% of the kernels); the host made a launch call every {} (median call {}), median kernel {}",
            l.launch_calls,
            dur(cx.report.steady.wall_ns),
            g.launch_calls.max(g.replays),
            g.kernels,
            g.kernel_pct,
            dur(l.launch_interval_p50_ns),
            dur(l.launch_call_p50_ns),
            dur(k.p50_ns)
        )),
        None => x.evidence.push(format!(
            "{} kernels in {} ({:.0}/s); median kernel {}, while the host launched one every {} (median call {})",
            k.count,
            dur(cx.report.steady.wall_ns),
            k.per_second,
            dur(k.p50_ns),
            dur(l.launch_interval_p50_ns),
            dur(l.launch_call_p50_ns)
        )),
    }
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
    if let Some(g) = cx.graphs() {
        x.metrics
            .insert("launch_calls".into(), l.launch_calls as f64);
        x.metrics.insert("graph_replays".into(), g.replays as f64);
        x.summary = format!(
            "The host issued graph replays and launches back to back but could not keep up: the GPU finished each replay before the host submitted the next, idle {} of the steady state.",
            share(ns, cx.wall)
        );
        x.fix = "The job already replays CUDA graphs, and the host still falls behind between replays: give each replay more work (a larger batch, more of the step inside one graph, several iterations per replay), and move host work between replays (Python, logging, .item(), data preparation) off the loop or make it asynchronous.".into();
        return Some(x);
    }
    x.fix = "Cut the per-kernel host cost: capture the step in a CUDA graph (torch.compile(mode=\"reduce-overhead\") or torch.cuda.CUDAGraph), fuse small ops with torch.compile, and give each kernel more work (a larger batch).".into();
    Some(x)
}
