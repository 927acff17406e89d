//! `env_trace_damaged`: the trace file was damaged or cut short; the report covers what was
//! read.

use super::inputs::FindingCx;
use crate::report::out::id::FindingId;
use crate::report::out::{Finding, Severity};

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
    let st = &cx.ctx.t.stats;
    x.fix = if let Some(at) = st.joined_at.filter(|_| st.lost.is_empty() && st.bad_events == 0) {
        return Some(Finding {
            title: "The file holds two traces".into(),
            fix: format!(
                "Give each trace as its own file: split this one at byte {at}. Traces of \
                 several processes are given side by side (`gputrace report DIR` or \
                 several files), never joined."
            ),
            ..x
        });
    } else if st.damaged() {
        "The file changed after it was written (a storage, transfer or copy error): read the original if there is one, or record again."
    } else {
        "Let the traced process exit normally (or stop tracing) so the collector can flush its last chunk."
    }
    .into();
    Some(x)
}
