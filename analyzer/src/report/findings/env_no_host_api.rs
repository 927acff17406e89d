//! `env_no_host_api`: GPU records without host API callbacks, so idle causes are GPU-only
//! heuristics.

use super::inputs::FindingCx;
use crate::report::out::id::FindingId;
use crate::report::out::{Finding, Severity};

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    if cx.ctx.has_api() || cx.ctx.devices.is_empty() {
        return None;
    }
    let mut x = cx.finding(FindingId::EnvNoHostApi, "No host API events", 0, false);
    x.severity = Severity::Info;
    x.summary = "The trace has GPU records but no host API callbacks (another profiler may hold the CUPTI subscriber, or callbacks were off): idle causes are GPU-only heuristics.".into();
    x.fix = "Trace without another profiler attached to get host-side causes.".into();
    Some(x)
}
