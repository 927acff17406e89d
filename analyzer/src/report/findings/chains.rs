//! Causes before their consequences. Some findings are what another one does to the
//! GPU: a host that waits for the GPU after every layer (`implicit_sync`) drains the
//! queue, so every launch after a wait finds an empty GPU and the kernels run shorter
//! than their launches (`launch_bound`). Removing the waits lets the host run ahead and
//! hides the launches behind the queue when the GPU has more to run than the host
//! spends launching it (kernel time at least the host's time outside the waits). When
//! it has less, the launches stay the bottleneck without the waits, yet the waits still
//! come first: a step that reads the GPU after every layer cannot be captured in a CUDA
//! graph nor compiled whole, the fixes for launch overhead (measured on an H100: removing
//! a check per layer gained 21% of the step, and only then can the step be captured).
//! Such a consequence is linked to its cause (`caused_by`), ranked right after it,
//! and the cause takes the consequence's severity when that is higher; the times stay
//! apart (each is idle time charged to one cause, never added twice). Likewise the idle
//! time of a host that was compiling again (`recompilation`) reads as `data_starvation`
//! or `cpu_bound`: those follow from it.

use super::inputs::FindingCx;
use crate::report::out::id::FindingId;
use crate::report::out::Finding;

/// A launch call on average at most this many launches after a wait for the GPU: the
/// queue is drained so often that launch latency cannot hide behind it.
const LAUNCHES_PER_WAIT: f64 = 20.0;

/// Links the consequences among one process's findings to their causes.
pub(super) fn link(cx: &FindingCx, found: &mut [Finding]) {
    sync_then_launches(cx, found);
    compiling_host(found);
}

/// A host compiling (torch.compile again for new shapes) issues no work: the GPU idles
/// with no CUDA call and the idle attribution charges it to data_starvation or cpu_bound.
/// Where the recompilation's time is at least half of such a finding's, that finding
/// follows from it.
fn compiling_host(found: &mut [Finding]) {
    let Some(rec) = found.iter().position(|f| f.id == FindingId::Recompilation) else {
        return;
    };
    let (rec_ns, rec_sev) = (found[rec].at_stake_ns, found[rec].severity);
    let mut sev = rec_sev;
    for f in found
        .iter_mut()
        .filter(|f| matches!(f.id, FindingId::DataStarvation | FindingId::CpuBound))
    {
        if rec_ns * 2 < f.at_stake_ns {
            continue;
        }
        f.caused_by = Some(FindingId::Recompilation);
        f.evidence.insert(
            0,
            format!(
                "a consequence of recompilation: the host spent {} compiling after the GPU work began, time it issued no work; this idle time is mostly that",
                crate::report::units::dur(rec_ns)
            ),
        );
        f.fix = format!(
            "First stop the recompilations (recompilation, the cause). Then, if the GPU still waits here: {}",
            f.fix
        );
        sev = sev.max(f.severity);
    }
    found[rec].severity = sev;
}

/// `launch_bound` after every wait for the GPU follows from the waits.
fn sync_then_launches(cx: &FindingCx, found: &mut [Finding]) {
    let Some(sync) = found.iter().position(|f| f.id == FindingId::ImplicitSync) else {
        return;
    };
    let Some(lb) = found.iter().position(|f| f.id == FindingId::LaunchBound) else {
        return;
    };
    let waits = found[sync]
        .metrics
        .get("sync_calls")
        .copied()
        .unwrap_or(0.0);
    let launches = cx.report.launches.launch_calls as f64;
    if waits < 1.0 || launches / waits > LAUNCHES_PER_WAIT {
        return;
    }
    // Without the waits a queue builds only if the GPU has more to run than the host
    // spends launching it: the kernels' time at least the host's time outside the
    // waits. Otherwise the launches stay the bottleneck once the waits are gone, but
    // the waits still come first: a step that reads the GPU this often cannot be
    // captured in a CUDA graph nor compiled whole (the fixes for launch overhead), and
    // each read brings launches of its own (the check, the copy back).
    let blocked = found[sync]
        .metrics
        .get("sync_blocked_ns")
        .copied()
        .unwrap_or(0.0) as u64;
    let steady = &cx.report.steady;
    let queue_builds = steady.busy_ns >= steady.wall_ns.saturating_sub(blocked);
    let every = launches / waits;
    let cause_sev = found[sync].severity.max(found[lb].severity);
    found[sync].severity = cause_sev;
    let at = found[sync]
        .call_sites
        .first()
        .map(|c| format!(" at {}", c.place()))
        .unwrap_or_default();
    let f = &mut found[lb];
    f.caused_by = Some(FindingId::ImplicitSync);
    let head = format!(
        "a consequence of implicit_sync: the host waited for the GPU{at} {} times in the steady state, once every {every:.1} launches, so the launches after each wait found an empty GPU",
        waits as u64
    );
    if queue_builds {
        f.evidence.insert(
            0,
            format!("{head}; with the waits gone the host runs ahead and their latency hides behind the queue"),
        );
        f.fix = format!(
            "First remove the waits (implicit_sync, the cause): the launch gaps shrink with them. Then, if launches still outrun the kernels: {}",
            f.fix
        );
    } else {
        f.evidence.insert(
            0,
            format!("{head}; the kernels ran {} against the host's {} outside the waits, so the launches stay slower than the GPU once the waits are gone, but a step that reads the GPU this often can be neither captured in a CUDA graph nor compiled whole, and each read adds launches of its own", crate::report::units::dur(steady.busy_ns), crate::report::units::dur(steady.wall_ns.saturating_sub(blocked))),
        );
        f.fix = format!(
            "First remove the waits (implicit_sync, the cause): they and the launches of each read go, and the step can then be captured or compiled. Then: {}",
            f.fix
        );
    }
    f.metrics.insert("launches_per_wait".into(), every);
}
