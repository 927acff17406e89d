//! `launch_bound`: kernels shorter than the time to launch them; the host issued work back
//! to back and still could not keep the GPU fed. Which code issued those launches (the
//! Python samples and kernel families of the launch-bound stretches) and the fix for that
//! code come from [`crate::report::launch_source`].

use super::common::{dur, push_examples_line, share};
use super::inputs::FindingCx;
use crate::report::idle::Cause;
use crate::report::launch_source::{self, LaunchSource};
use crate::report::out::id::FindingId;
use crate::report::out::{Finding, KernelsReport, LaunchReport};
use gputrace_format as fmt;
use std::collections::HashMap;

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
    if let Some((own, calls)) = tracer_cost(&cx.ctx.t.tracer_costs, cx.steps.steady) {
        // Our callbacks run on the launching threads, inside the calls whose gaps this
        // finding measures: at most that much of the idle time can be ours.
        let at_most = own.min(ns);
        x.evidence.push(format!(
            "of {} idle, at most {} is gputrace's own launch cost ({} in {} of its CUPTI callbacks, {} each)",
            dur(ns),
            dur(at_most),
            dur(own),
            calls,
            dur(own / calls.max(1))
        ));
        x.metrics.insert("tracer_cost_ns".into(), own as f64);
        x.metrics
            .insert("tracer_cost_at_most_ns".into(), at_most as f64);
        x.metrics.insert(
            "tracer_cost_per_callback_ns".into(),
            own as f64 / calls.max(1) as f64,
        );
    }
    x.examples = cx.idle_examples(Cause::LaunchBound);
    push_examples_line(&mut x);
    let fix = add_source(&mut x, &launch_source::find(cx.ctx, cx.steps.steady));
    cx.heuristic_note(&mut x);
    add_metrics(&mut x, k, l);
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
    x.fix = fix.unwrap_or_else(|| GENERIC_FIX.into());
    Some(x)
}

/// The fix when no source of the launches was named.
const GENERIC_FIX: &str = "Cut the per-kernel host cost: capture the step in a CUDA graph (torch.compile(mode=\"reduce-overhead\") or torch.cuda.CUDAGraph), fuse small ops with torch.compile, and give each kernel more work (a larger batch).";

/// The kernel and launch rates behind the finding.
fn add_metrics(x: &mut Finding, k: &KernelsReport, l: &LaunchReport) {
    x.metrics.insert("kernels_per_s".into(), k.per_second);
    x.metrics.insert("kernel_p50_ns".into(), k.p50_ns as f64);
    x.metrics.insert(
        "launch_interval_p50_ns".into(),
        l.launch_interval_p50_ns as f64,
    );
    x.metrics
        .insert("empty_queue_pct".into(), l.empty_queue_pct);
}

/// The evidence of where the launches came from: the samples in the launch-bound
/// stretches (also the finding's `host_was_in`), the kernel families started there, the
/// source named (also its `subcause`), and their numbers as metrics; the fix for that
/// source, if one was named (a job that replays CUDA graphs keeps its own).
fn add_source(x: &mut Finding, src: &LaunchSource) -> Option<String> {
    x.evidence.extend(src.samples_line());
    x.evidence.extend(src.families_line());
    x.evidence.extend(src.source_line());
    x.host_was_in = src.places.clone();
    if let Some((s, pct)) = src.source {
        x.subcause = Some(s.id().to_string());
        x.metrics.insert("source_samples_pct".into(), pct);
    }
    if src.kernels > 0 {
        x.metrics
            .insert("stretch_kernels".into(), src.kernels as f64);
        for f in &src.families {
            x.metrics.insert(format!("family_{}_pct", f.id), f.pct);
        }
    }
    if src.samples > 0 {
        x.metrics
            .insert("stretch_samples".into(), src.samples as f64);
    }
    src.fix()
}

/// The tracer's own cost inside `window` (ns, callbacks), from its `TracerCost` events
/// (sorted by time): each covers the time since its thread's previous one and is
/// pro-rated by its overlap with the window (a thread's first one counts whole when
/// written inside it). `None` for traces without them.
pub(crate) fn tracer_cost(costs: &[fmt::TracerCost], window: (u64, u64)) -> Option<(u64, u64)> {
    if costs.is_empty() {
        return None;
    }
    let (lo, hi) = window;
    let mut prev: HashMap<u32, u64> = HashMap::new();
    let (mut ns, mut calls) = (0f64, 0f64);
    for c in costs {
        let a = prev.insert(c.tid, c.ts).unwrap_or(c.ts);
        let b = c.ts;
        let frac = if b > a {
            b.min(hi).saturating_sub(a.max(lo)) as f64 / (b - a) as f64
        } else if b >= lo && b <= hi {
            1.0
        } else {
            0.0
        };
        ns += c.ns as f64 * frac;
        calls += c.calls as f64 * frac;
    }
    (calls >= 1.0).then(|| (ns.round() as u64, calls.round() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(ts: u64, tid: u32, calls: u64, ns: u64) -> fmt::TracerCost {
        fmt::TracerCost { ts, tid, calls, ns }
    }

    #[test]
    fn tracer_cost_is_pro_rated_to_the_window() {
        assert_eq!(tracer_cost(&[], (0, 100)), None);
        // Thread 1: first event at 100 (counted whole), then 200 and 300 covering
        // (100, 200] and (200, 300]; thread 2 once at 250.
        let v = [
            c(100, 1, 10, 1000),
            c(200, 1, 20, 2000),
            c(250, 2, 4, 400),
            c(300, 1, 40, 4000),
        ];
        // Window (150, 250): half of thread 1's second and third periods, and thread
        // 2's one.
        assert_eq!(
            tracer_cost(&v, (150, 250)),
            Some((1000 + 2000 + 400, 10 + 20 + 4))
        );
        // Everything.
        assert_eq!(tracer_cost(&v, (0, 1000)), Some((7400, 74)));
        // Nothing inside.
        assert_eq!(tracer_cost(&v, (400, 500)), None);
    }
}
