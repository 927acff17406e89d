//! `env_shared_gpu`: another process used the job's GPU during the steady state (NVML's
//! compute-process list and per-process utilisation samples). Time-sliced with it, the
//! job's kernels ran longer and its GPU sat "idle" while the other process held it, so
//! this finding's time includes what the idle causes would otherwise be blamed for.

use super::common::{bytes, dur};
use super::inputs::FindingCx;
use crate::report::environment;
use crate::report::out::id::FindingId;
use crate::report::out::{Finding, Severity};
use crate::report::units::pct;

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let t = cx.ctx.t;
    let (s0, s1) = cx.steps.steady;
    let all = environment::shared_gpu(t, s0, s1);
    let o = all.iter().find(|o| !o.idle)?;
    // The job's idle time while the other process ran was the other's GPU time; of its
    // busy time, the measured slowdown where same-name kernels ran both with and
    // without it, else the other's share of the SM time (an estimate).
    let (lost_busy, estimated) = match &o.slowdown {
        Some(s) => (s.extra_ns, false),
        None => {
            let share = o.sm_share_pct / 100.0;
            ((o.busy_while_active_ns as f64 * share) as u64, true)
        }
    };
    let ns = o.idle_while_active_ns + lost_busy;
    let who = if o.name.is_empty() {
        format!("pid {}", o.pid)
    } else {
        format!("pid {} ({})", o.pid, o.name)
    };
    let mut x = cx.finding(
        FindingId::EnvSharedGpu,
        "Another process used this GPU",
        ns,
        estimated,
    );
    // Any measurable share is worth a warning: the fix is outside the program.
    if x.severity < Severity::Warn && o.active_pct >= 5.0 && o.sm_share_pct >= 5.0 {
        x.severity = Severity::Warn;
    }
    x.summary = format!(
        "{who} ran on GPU {} for {} of the steady state ({:.0}%), taking {:.0}% of the SM time while it did{}; this job's GPU time then went to it, so the idle time below is not this job's own.",
        o.device,
        dur(o.active_ns),
        o.active_pct,
        o.sm_share_pct,
        o.our_sm_share_pct
            .map(|v| format!(" (this job {v:.0}%)"))
            .unwrap_or_default()
    );
    x.evidence.push(format!(
        "NVML listed {who} as a compute process{}",
        o.memory_bytes
            .map(|m| format!(" holding {}", bytes(m)))
            .unwrap_or_default()
    ));
    match &o.slowdown {
        Some(s) => x.evidence.push(format!(
            "{} kernels of {} names took {:.2}x their median time without it ({} more)",
            s.kernels,
            s.names,
            s.ratio,
            dur(s.extra_ns)
        )),
        None => x.evidence.push(
            "it was active the whole time: no same-kernel baseline without it; the busy time lost is estimated from its SM share".into(),
        ),
    }
    x.evidence.push(format!(
        "GPU idle for this job while it ran: {} ({:.0}% of the steady state)",
        dur(o.idle_while_active_ns),
        pct(o.idle_while_active_ns, cx.wall.max(1))
    ));
    for other in all.iter().filter(|p| p.pid != o.pid).take(3) {
        x.evidence.push(format!(
            "also on GPU {}: pid {}{}{}",
            other.device,
            other.pid,
            if other.name.is_empty() {
                String::new()
            } else {
                format!(" ({})", other.name)
            },
            if other.idle { ", listed but idle" } else { "" }
        ));
    }
    x.metrics.insert("pid".into(), o.pid as f64);
    x.metrics.insert("active_pct".into(), o.active_pct);
    x.metrics.insert("sm_share_pct".into(), o.sm_share_pct);
    x.metrics
        .insert("idle_while_active_ns".into(), o.idle_while_active_ns as f64);
    if let Some(s) = &o.slowdown {
        x.metrics.insert("kernel_slowdown".into(), s.ratio);
        x.metrics
            .insert("kernel_extra_ns".into(), s.extra_ns as f64);
    }
    x.fix = format!(
        "Run on a GPU of its own: pick a free one (nvidia-smi, or gputrace doctor, lists the processes on each; CUDA_VISIBLE_DEVICES), ask the scheduler for exclusive GPUs, or stop {who}. Fix this before tuning the input pipeline: the idle time will change."
    );
    Some(x)
}
