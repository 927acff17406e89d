//! `env_pm_unavailable`: GPU hardware counters were asked for (`GPUTRACE_PM=1`) but CUPTI
//! refused or could not sample them; the trace's `pm_sampling` fact says why. One info
//! line with the fix, never a failure.

use super::inputs::FindingCx;
use crate::report::out::id::FindingId;
use crate::report::out::{Finding, Severity};
use gputrace_env::facts::keys;

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let t = cx.ctx.t;
    let why = t
        .facts
        .iter()
        .find(|f| {
            // Not "on: ...", nor "not started" (no kernel ran in the window), nor the
            // clock note: a refusal or a failure.
            let v = t.str(f.value);
            t.str(f.key) == keys::PM_SAMPLING
                && ["refused", "not supported", "failed", "stopped"]
                    .iter()
                    .any(|p| v.starts_with(p))
        })
        .map(|f| t.str(f.value))?;
    let mut x = cx.finding(
        FindingId::EnvPmUnavailable,
        "GPU hardware counters not sampled",
        0,
        false,
    );
    x.severity = Severity::Info;
    x.summary = format!(
        "GPU hardware counters (GPUTRACE_PM=1) were not sampled: {why}. The report's SM activity is an estimate from grid sizes, and memory-bandwidth limits are not checked."
    );
    x.fix = if why.contains("not permitted") {
        "Allow profiling for non-admin users (the nvidia kernel module option NVreg_RestrictProfilingToAdminUsers=0, then reload the driver) or run the job as root.".into()
    } else if why.contains("hardware busy") {
        "Stop the other counter user for the run (DCGM profiling metrics: `dcgmi profile --pause`; ncu or Nsight), then trace again.".into()
    } else {
        "PM sampling needs CUPTI 12.6 or newer and an Ampere GA10x or newer GPU (not MIG slices or vGPU without profiling).".into()
    };
    Some(x)
}
