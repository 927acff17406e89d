//! `env_throttled`: the GPU's clocks were held down by its power limit, heat or a hardware
//! slowdown (NVML's clock event reasons) during the steady state.

use super::common::dur;
use super::inputs::FindingCx;
use crate::report::environment;
use crate::report::out::id::FindingId;
use crate::report::out::{Finding, Severity};

/// Clocks this much below their maximum make a throttled period count.
const MIN_DROP_PCT: f64 = 5.0;

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let (s0, s1) = cx.steps.steady;
    let th = environment::throttled(cx.ctx.t, s0, s1);
    let w = th.iter().max_by_key(|t| t.throttled_ns)?;
    if w.clock_drop_pct < MIN_DROP_PCT {
        return None;
    }
    // Compute time scales with the SM clock, about: the busy time while throttled, times
    // the clock's drop, is what full clocks would have saved (an estimate).
    let busy_share = cx.report.breakdown.busy_ns as f64 / cx.report.breakdown.wall_ns.max(1) as f64;
    let ns = (w.throttled_ns as f64 * busy_share.min(1.0) * w.clock_drop_pct / 100.0) as u64;
    let mut x = cx.finding(FindingId::EnvThrottled, "Clocks throttled", ns, true);
    let hot = w.reasons.iter().any(|r| r.contains("thermal"));
    // The rule `gputrace doctor` applies too: capping at the default power limit under a
    // full load is how the GPU's boost works; a lowered limit, heat or a hardware
    // slowdown is a fault.
    let power = environment::rules::power_limit(cx.ctx.t, w.device);
    let lowered = power.is_some_and(|p| p.lowered());
    let normal = !environment::rules::ThrottleKind::of(w.reason_bits, power).is_fault();
    if x.severity < Severity::Warn && w.throttled_pct >= 10.0 && !normal {
        x.severity = Severity::Warn;
    }
    if normal {
        x.severity = x.severity.min(Severity::Info);
    }
    x.summary = format!(
        "GPU {} ran at {} MHz instead of {} MHz ({:.0}% lower) for {} of the steady state ({:.0}%): {}.",
        w.device,
        w.sm_clock_mhz,
        w.sm_clock_max_mhz,
        w.clock_drop_pct,
        dur(w.throttled_ns),
        w.throttled_pct,
        w.reasons.join(", ")
    );
    if let Some(t) = w.max_temperature_c {
        x.evidence.push(format!("temperature up to {t} C"));
    }
    if let (Some(p), Some(l)) = (w.max_power_mw, w.power_limit_mw) {
        x.evidence.push(format!(
            "power up to {} W of a {} W limit",
            p / 1000,
            l / 1000
        ));
    }
    x.evidence
        .push("time at stake estimated: busy time while throttled x the clock drop".into());
    x.metrics.insert("throttled_pct".into(), w.throttled_pct);
    x.metrics.insert("clock_drop_pct".into(), w.clock_drop_pct);
    if let Some(environment::rules::PowerLimit {
        limit_mw: l,
        default_mw: d,
    }) = power
    {
        x.evidence.push(if lowered {
            format!(
                "power limit lowered: {} W, the default is {} W",
                l / 1000,
                d / 1000
            )
        } else {
            format!(
                "power limit at its default ({} W): capping under a full load is normal",
                d / 1000
            )
        });
    }
    x.fix = if hot {
        "The GPU is too hot: check cooling and airflow; nvidia-smi -q -d TEMPERATURE,PERFORMANCE shows the slowdown temperatures.".into()
    } else if w.reasons.iter().any(|r| r.starts_with("hw_")) {
        "Hardware slowdown: check the machine's power supply and cooling (nvidia-smi -q -d PERFORMANCE); report it to the administrator if it persists.".into()
    } else if lowered {
        "The power limit was lowered: restore the default (nvidia-smi -pl <watts>, or ask the administrator); until then kernels run at the lower clock.".into()
    } else {
        "Held at the power limit: check it is the default (gputrace doctor; nvidia-smi -q -d POWER). Under a full load some power capping is normal; a lowered limit is not.".into()
    };
    Some(x)
}
