//! `implicit_sync`: the host waited for the GPU (a sync, a blocking read-back), then the GPU
//! waited for the host.

use super::common::{bytes, dur, push_examples_line, share};
use super::inputs::Calls;
use super::inputs::FindingCx;
use crate::report::classify::ApiKind;
use crate::report::ctx::HostClass;
use crate::report::idle::Cause;
use crate::report::out::id::FindingId;
use crate::report::out::Finding;
use crate::report::syncfix::{self, SyncCause};

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
    let (syncs, with_copies) = implicit_calls(cx);
    let mut top = syncs
        .iter()
        .take(3)
        .map(|s| format!("{} x{} (blocked {})", s.0, s.1, dur(s.2)))
        .collect::<Vec<_>>();
    if with_copies > 0 {
        // Counted once: those are the copies' (pageable_memcpy, sync_memcpy).
        top.push(format!(
            "{with_copies} more finished a copy (counted with the copies)"
        ));
    }
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
    cx.add_call_sites(&mut x, Calls::Implicit);
    x.examples = cx.idle_examples(Cause::ImplicitSync);
    push_examples_line(&mut x);
    cx.heuristic_note(&mut x);
    let calls: u64 = syncs.iter().map(|s| s.1).sum();
    let blocked = syncs.iter().fold(0u64, |a, s| a.saturating_add(s.2));
    x.metrics.insert("sync_calls".into(), calls as f64);
    x.metrics.insert("sync_blocked_ns".into(), blocked as f64);
    x.fix = "Stop reading GPU results every step: keep running losses/metrics as GPU tensors and call .item() (or .cpu(), print) every N steps; remove torch.cuda.synchronize() from the loop (time with torch.cuda.Event instead); avoid Python control flow that depends on GPU values; make host<->device copies non_blocking=True.".into();
    follow_the_call(&mut x, cx);
    Some(x)
}

/// The steady state's synchronising calls (syncs, frees) whose wait is this finding's,
/// by name: (name, calls, ns in them), most time first; and how many syncs finished a
/// copy instead (their wait belongs to the copy's finding).
fn implicit_calls(cx: &FindingCx) -> (Vec<(String, u64, u64)>, u64) {
    let (ctx, w) = (cx.ctx, cx.steps.steady);
    let mut by: std::collections::BTreeMap<&str, (u64, u64)> = Default::default();
    let mut with_copies = 0;
    for (i, a) in ctx.t.apis.iter().enumerate() {
        if a.start < w.0 || a.start >= w.1 {
            continue;
        }
        let kind = ctx.api.kind(i).unwrap_or(ApiKind::Other);
        if !matches!(kind, ApiKind::Sync | ApiKind::Free) {
            continue;
        }
        if ctx.api.class(i) != Some(HostClass::Implicit) {
            with_copies += 1;
            continue;
        }
        let e = by.entry(ctx.t.str(a.name)).or_default();
        e.0 += 1;
        e.1 = e.1.saturating_add(a.end.saturating_sub(a.start));
    }
    let mut v: Vec<(String, u64, u64)> = by
        .into_iter()
        .map(|(n, (c, ns))| (n.to_string(), c, ns))
        .collect();
    v.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
    (v, with_copies)
}

/// Picks the fix by the call that synchronised most (host time blocked in it), and says
/// which.
fn follow_the_call(x: &mut Finding, cx: &FindingCx) {
    let by = syncfix::sync_calls(cx.ctx, cx.steps.steady);
    let Some(&(cause, n, ns)) = by.first() else {
        return;
    };
    let total: u64 = by.iter().fold(0u64, |a, b| a.saturating_add(b.2));
    let allocs = syncfix::alloc_calls(cx.ctx, cx.steps.steady);
    x.subcause = Some(cause.id().to_string());
    x.evidence.push(format!(
        "the fix follows the call that synchronised most: {} ({} calls, {:.0}% of the {} the host was blocked in synchronising calls){}",
        cause.id(),
        n,
        crate::report::units::pct(ns, total),
        dur(total),
        if cause == SyncCause::Allocator && allocs > 0 {
            format!("; {allocs} cudaMalloc-like calls beside them")
        } else {
            String::new()
        }
    ));
    x.metrics
        .insert(format!("sync_{}_calls", cause.id()), n as f64);
    x.fix = fix_for(cause).to_string();
}

/// What the user changes for each kind of synchronising call, in their terms.
fn fix_for(c: SyncCause) -> &'static str {
    match c {
        SyncCause::Allocator => "The synchronising calls are cudaFree (and cudaMalloc): PyTorch's caching allocator is handing device memory back and taking it again inside the loop, and every cudaFree waits for the GPU to drain. Remove torch.cuda.empty_cache() from the step (call it, if at all, between phases); keep tensor shapes stable so cached blocks are reused (pad or bucket variable lengths, preallocate buffers); set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to fight fragmentation instead of emptying the cache.",
        SyncCause::D2hRead | SyncCause::Other => "Stop reading GPU results every step: keep running losses/metrics as GPU tensors and call .item() (or .cpu(), print) every N steps; remove torch.cuda.synchronize() from the loop (time with torch.cuda.Event instead); avoid Python control flow that depends on GPU values; make host<->device copies non_blocking=True.",
        SyncCause::DeviceSync => "The loop calls cudaDeviceSynchronize (torch.cuda.synchronize()): take it out of the step; time with torch.cuda.Event(enable_timing=True) and read the times every N steps; synchronize only where the host must read a result, and only every N steps.",
        SyncCause::StreamSync => "The loop waits for whole streams (cudaStreamSynchronize: stream.synchronize(), or a library waiting for its stream): order GPU work with events instead (stream.wait_event / wait_stream), which does not block the host, and synchronize only where the host must read a result, every N steps.",
        SyncCause::EventSync => "The loop waits on CUDA events (cudaEventSynchronize: event.synchronize(), or elapsed_time() right after recording): read event timings every N steps, poll with event.query(), or order GPU work with stream.wait_event() so the host never blocks.",
    }
}
