//! `env_trace_damaged`: the trace file was damaged or cut short; the report covers what was
//! read.

use super::{FindingCx, FindingId};
use crate::report::{Finding, Severity};

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let w = cx.ctx.t.stats.warning()?;
    let mut x = cx.finding(
        FindingId::EnvTraceDamaged,
        "The trace file is damaged",
        0,
        false,
    );
    x.severity = Severity::Info;
    x.summary = format!("{w}; the report covers what was read.");
    x.fix = "Let the traced process exit normally (or stop tracing) so the collector can flush its last chunk.".into();
    Some(x)
}
