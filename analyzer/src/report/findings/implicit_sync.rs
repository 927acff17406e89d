//! `implicit_sync`: the host waited for the GPU (a sync, a blocking read-back), then the GPU
//! waited for the host.

use super::common::{bytes, dur, push_examples_line, share};
use super::{FindingCx, FindingId};
use crate::report::classify::ApiKind;
use crate::report::idle::Cause;
use crate::report::Finding;

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let ns = cx.idle(Cause::ImplicitSync);
    if !cx.reportable(ns) {
        return None;
    }
    let mut x = cx.finding(
        FindingId::ImplicitSync,
        "The host waited for the GPU, then the GPU waited for the host",
        ns,
        false,
    );
    let syncs = cx.calls_of(&[ApiKind::Sync, ApiKind::Free]);
    let top = syncs
        .iter()
        .take(3)
        .map(|s| format!("{} x{} (blocked {})", s.0, s.1, dur(s.2)))
        .collect::<Vec<_>>();
    x.summary = format!(
        "Synchronising calls drained the GPU's queue; the idle time after each, until the host had issued new work, cost {} of the steady state.",
        share(ns, cx.wall)
    );
    if !top.is_empty() {
        x.evidence
            .push(format!("in steady state: {}", top.join(", ")));
    }
    let (dtoh, dtoh_bytes) = cx
        .copies
        .groups
        .iter()
        .filter(|g| g.direction == "DtoH")
        .fold((0u64, 0u64), |a, g| {
            (a.0 + g.count, a.1.saturating_add(g.bytes))
        });
    if dtoh > 0 {
        x.evidence.push(format!(
            "{dtoh} device-to-host copies ({} in all): reading values back, as .item(), .cpu(), .tolist() or print(tensor) do",
            bytes(dtoh_bytes)
        ));
    }
    x.evidence.push(format!(
        "{} idle gaps charged mostly here",
        cx.gaps(Cause::ImplicitSync)
    ));
    x.examples = cx.idle_examples(Cause::ImplicitSync);
    push_examples_line(&mut x);
    cx.heuristic_note(&mut x);
    let calls: u64 = syncs.iter().map(|s| s.1).sum();
    let blocked: u64 = syncs.iter().map(|s| s.2).sum();
    x.metrics.insert("sync_calls".into(), calls as f64);
    x.metrics.insert("sync_blocked_ns".into(), blocked as f64);
    x.fix = "Stop reading GPU results every step: keep running losses/metrics as GPU tensors and call .item() (or .cpu(), print) every N steps; remove torch.cuda.synchronize() from the loop (time with torch.cuda.Event instead); avoid Python control flow that depends on GPU values; make host<->device copies non_blocking=True.".into();
    Some(x)
}
