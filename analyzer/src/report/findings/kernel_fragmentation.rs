//! `kernel_fragmentation`: GPU time spread over very many tiny kernels; the device-side gaps
//! between already-queued kernels are the time at stake.

use super::common::{dur, share};
use super::inputs::FindingCx;
use crate::report::idle::Cause;
use crate::report::out::id::FindingId;
use crate::report::out::{Finding, Severity};

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let ns = cx.idle(Cause::KernelFragmentation);
    let k = &cx.report.kernels;
    let many_tiny = k.count >= 1000 && k.under_10us_time_pct >= 50.0;
    if !cx.reportable(ns) && !many_tiny {
        return None;
    }
    let mut x = cx.finding(
        FindingId::KernelFragmentation,
        "GPU time spread over very many tiny kernels",
        ns,
        false,
    );
    // Mostly long kernels with a few tiny ones: worth knowing, not worth a warning.
    if k.under_10us_count_pct < 50.0 && x.severity > Severity::Info {
        x.severity = Severity::Info;
    }
    x.summary = format!(
        "{:.0}% of kernels run under 10 µs ({:.0}% of kernel time); the gaps between queued kernels alone cost {} of the steady state.",
        k.under_10us_count_pct,
        k.under_10us_time_pct,
        share(ns, cx.wall)
    );
    x.evidence.push(format!(
        "{} kernels, {:.0}/s; duration p50 {}, p90 {}, p99 {}",
        k.count,
        k.per_second,
        dur(k.p50_ns),
        dur(k.p90_ns),
        dur(k.p99_ns)
    ));
    let tiny: Vec<String> = cx
        .kstats
        .by_name
        .iter()
        .filter(|a| a.tiny * 2 > a.count)
        .take(3)
        .map(|a| format!("{} x{}", cx.kernel_name(a.name), a.count))
        .collect();
    if !tiny.is_empty() {
        x.evidence
            .push(format!("most frequent tiny kernels: {}", tiny.join("; ")));
    }
    x.evidence.push(format!(
        "device-side gaps between already-queued kernels: {} over {} gaps",
        dur(ns),
        cx.gaps(Cause::KernelFragmentation)
    ));
    x.examples = cx.idle_examples(Cause::KernelFragmentation);
    x.metrics.insert("kernels".into(), k.count as f64);
    x.metrics
        .insert("under_10us_count_pct".into(), k.under_10us_count_pct);
    x.metrics
        .insert("under_10us_time_pct".into(), k.under_10us_time_pct);
    x.metrics.insert("p50_ns".into(), k.p50_ns as f64);
    if let Some(g) = cx.graphs() {
        // How much of the device-side gap time lies inside graph replays.
        let inside = g.gap_ns.min(ns);
        x.metrics.insert("graph_gap_ns".into(), g.gap_ns as f64);
        x.metrics.insert("graph_replays".into(), g.replays as f64);
        if let Some(top) = g.graphs.first() {
            x.evidence.push(format!(
                "inside CUDA graph replays: {} idle between nodes over {} replays; graph {} runs {} kernels per replay in {} of GPU time, with {} of gaps per replay ({:.0}% of its span)",
                dur(g.gap_ns),
                g.replays,
                top.graph_id,
                top.kernels_per_replay,
                dur(top.gpu_ns_per_replay),
                dur(top.gap_ns_per_replay),
                top.gap_pct
            ));
        }
        if inside * 2 >= ns && ns > 0 {
            x.subcause = Some("graph_gaps".into());
            x.summary = format!(
                "The job replays CUDA graphs of tiny kernels: the device's node-to-node latency inside the replays costs {} of the steady state ({:.0}% of kernels run under 10 us).",
                share(ns, cx.wall),
                k.under_10us_count_pct
            );
        }
        x.fix = "The gaps lie between the nodes of the job's CUDA graphs, on the device: a graph removes the host's launch cost but not the time from one node to the next. Make fewer, larger kernels: fuse (torch.compile's default or max-autotune mode, fused optimizers such as torch.optim.AdamW(fused=True)), grow each kernel's work (a larger batch), and batch many small tensor ops into few large ones.".into();
        return Some(x);
    }
    x.fix = "Fuse: torch.compile the model, use fused optimizers (torch.optim.AdamW(fused=True)), batch many small tensor ops into few large ones; CUDA graphs remove the launch cost but not the per-kernel gaps.".into();
    Some(x)
}
