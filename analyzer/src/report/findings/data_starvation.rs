//! `data_starvation`: GPU idle while no host thread was in a CUDA call.

use super::common::{dur, push_examples_line, share};
use super::{FindingCx, FindingId};
use crate::report::idle::Cause;
use crate::report::Finding;

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let ns = cx.idle(Cause::DataStarvation);
    if !cx.reportable(ns) {
        return None;
    }
    let mut x = cx.finding(
        FindingId::DataStarvation,
        "GPU idle while the host issued no CUDA work",
        ns,
        false,
    );
    x.summary = format!(
        "For {} of the steady state no host thread was in a CUDA call while the GPU sat idle: the loop was waiting for its next input or doing host-side work.",
        share(ns, cx.wall)
    );
    let gaps = cx.gaps(Cause::DataStarvation);
    x.evidence.push(format!(
        "{gaps} idle gaps charged mostly here, {} in total",
        dur(ns)
    ));
    if let Some(l) = cx.step_line() {
        x.evidence.push(format!(
            "{l}; GPU busy {:.0}% of a median step",
            cx.report.steps.busy_pct_median
        ));
    }
    x.examples = cx.idle_examples(Cause::DataStarvation);
    push_examples_line(&mut x);
    cx.heuristic_note(&mut x);
    x.metrics.insert("gaps".into(), gaps as f64);
    x.fix = "Feed the GPU ahead of time: DataLoader(num_workers=N, pin_memory=True, persistent_workers=True, prefetch_factor=2 or more), with N up to the CPU cores you can give each GPU; move heavy per-sample transforms to the GPU or precompute them; keep host-side work (logging, metrics, checkpoint I/O) out of the step or make it asynchronous.".into();
    Some(x)
}
