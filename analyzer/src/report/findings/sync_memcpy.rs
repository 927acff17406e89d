//! `sync_memcpy`: copies from pinned memory made with a blocking call.

use super::common::{bytes, dur, push_examples_line, share};
use super::inputs::Calls;
use super::inputs::FindingCx;
use crate::report::idle::Cause;
use crate::report::out::id::FindingId;
use crate::report::out::Finding;

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let ns = cx.idle(Cause::SyncMemcpy);
    let sp = &cx.copies.sync_pinned;
    // Any blocking copy from pinned memory that cost idle time is worth saying.
    let blocking = sp.count > 0 && ns > 0;
    if !cx.reportable(ns) && !blocking {
        return None;
    }
    let mut x = cx.finding(
        FindingId::SyncMemcpy,
        "Pinned copies made with a blocking call",
        ns,
        false,
    );
    x.summary = format!(
        "Copies from pinned memory were made synchronously (pin_memory without non_blocking), so the host waited for them and the GPU then waited for the host: {} of the steady state.",
        share(ns, cx.wall)
    );
    if sp.count > 0 {
        let calls = cx
            .copies
            .sync_calls
            .iter()
            .map(|(k, v)| format!("{k} x{v}"))
            .collect::<Vec<_>>()
            .join(", ");
        x.evidence.push(format!(
            "{} blocking copies from pinned memory, {}, {} on the GPU; calls: {calls}",
            sp.count,
            bytes(sp.bytes),
            dur(sp.time_ns),
        ));
        x.metrics.insert("copies".into(), sp.count as f64);
        x.metrics.insert("bytes".into(), sp.bytes as f64);
    }
    cx.add_call_sites(&mut x, Calls::SyncMemcpy);
    x.examples = cx.idle_examples(Cause::SyncMemcpy);
    push_examples_line(&mut x);
    x.fix = "The buffers are already pinned: add non_blocking=True to .to(device) / .cuda() so the copy overlaps compute; keep pin_memory=True in the DataLoader.".into();
    Some(x)
}
