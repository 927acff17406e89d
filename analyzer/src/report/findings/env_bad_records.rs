//! `env_bad_records`: records with impossible timestamps, clipped or ignored; and GPU
//! times the host's own synchronisations contradict (a kernel still running when a
//! `cudaDeviceSynchronize` returned, which waits for every kernel launched before it): the
//! GPU clock was read wrong, as when another tool (torch.profiler) changed CUPTI's clock.

use super::inputs::FindingCx;
use crate::model::trace::Trace;
use crate::report::out::id::FindingId;
use crate::report::out::{Finding, Severity};
use gputrace_format as fmt;

/// A kernel must run this far on both sides of a device sync's return to contradict it
/// (clock pairs and call stamps are good to a few µs).
const SLACK_NS: u64 = 20_000;
/// Contradicted syncs, at least this many and this share of them, make the GPU's times
/// untrustworthy (a kernel launched by another thread during the sync may rightly run
/// across its return; a few such are no sign).
const MIN_CONTRADICTED: usize = 5;
const MIN_CONTRADICTED_PCT: f64 = 10.0;

/// The host's device-wide syncs the GPU's kernels contradict: (syncs checked,
/// contradicted, the first contradicted one's return). Processes whose kernels ran on one
/// device only (a device sync waits for its current device alone).
pub(crate) fn sync_contradictions(t: &Trace) -> (usize, usize, Option<u64>) {
    let mut devices = t.kernels.iter().map(|k| k.device);
    let Some(first) = devices.next() else {
        return (0, 0, None);
    };
    if devices.any(|d| d != first) {
        return (0, 0, None);
    }
    // Returns of device syncs: the symbol hooks' calls, else CUPTI's API records.
    let mut ends: Vec<u64> = t
        .host_calls
        .iter()
        .filter(|c| c.call == fmt::HOSTCALL_DEVICE_SYNCHRONIZE)
        .map(|c| c.end)
        .collect();
    if ends.is_empty() {
        ends = t
            .apis
            .iter()
            .filter(|a| {
                let n = t.str(a.name);
                n == "cudaDeviceSynchronize" || n == "cuCtxSynchronize"
            })
            .map(|a| a.end)
            .collect();
    }
    ends.sort_unstable();
    // Kernels by start, with the latest end among those started so far.
    let mut spans: Vec<(u64, u64)> = t.kernels.iter().map(|k| (k.start, k.end)).collect();
    spans.sort_unstable();
    let mut latest = Vec::with_capacity(spans.len());
    let mut m = 0u64;
    for s in &spans {
        m = m.max(s.1);
        latest.push(m);
    }
    let (mut bad, mut first_bad) = (0, None);
    for &e in &ends {
        let n = spans.partition_point(|s| s.0 + SLACK_NS < e);
        if n > 0 && latest[n - 1] > e + SLACK_NS {
            bad += 1;
            first_bad.get_or_insert(e);
        }
    }
    (ends.len(), bad, first_bad)
}

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let n = cx.ctx.bad_records;
    let (syncs, contradicted, first) = sync_contradictions(cx.ctx.t);
    let clock_wrong = contradicted >= MIN_CONTRADICTED
        && 100.0 * contradicted as f64 >= MIN_CONTRADICTED_PCT * syncs as f64;
    if n == 0 && !clock_wrong {
        return None;
    }
    let mut x = cx.finding(
        FindingId::EnvBadRecords,
        "Records with impossible timestamps",
        0,
        false,
    );
    x.severity = Severity::Info;
    let mut said = Vec::new();
    if n > 0 {
        said.push(format!(
            "{n} records had an end before their start or times far outside the trace; they were clipped or ignored."
        ));
        x.metrics.insert("records".into(), n as f64);
    }
    x.fix =
        "Usually a driver or CUPTI timestamp glitch; if frequent, report it with the trace.".into();
    if clock_wrong {
        // Every GPU time, and every share read from them, may be off: the verdict leads
        // with it (verdict::losses).
        x.severity = Severity::Critical;
        x.title = "GPU times the host's synchronisations contradict".into();
        let from = first.map_or(String::new(), |f| {
            format!(", the first at +{:.3} s", cx.ctx.rel(f) as f64 / 1e9)
        });
        said.insert(0, format!(
            "{contradicted} of {syncs} cudaDeviceSynchronize calls returned while a recorded kernel still ran{from}: the GPU's times are read wrong (CUPTI's clock changed under the collector, as torch.profiler's TSC clock does), so kernel durations and idle time after that are not to be trusted."
        ));
        x.metrics.insert("syncs".into(), syncs as f64);
        x.metrics
            .insert("syncs_contradicted".into(), contradicted as f64);
        x.fix = "Trace outside torch.profiler's steps (or without it in the process), and report the trace: the collector converts CUPTI's clock at its measured rate, and this trace shows a case it got wrong.".into();
    }
    x.summary = said.join(" ");
    Some(x)
}
