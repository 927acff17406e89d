//! `env_bad_records`: records with impossible timestamps, clipped or ignored.

use super::inputs::FindingCx;
use crate::report::out::id::FindingId;
use crate::report::out::{Finding, Severity};

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let n = cx.ctx.bad_records;
    if n == 0 {
        return None;
    }
    let mut x = cx.finding(
        FindingId::EnvBadRecords,
        "Records with impossible timestamps",
        0,
        false,
    );
    x.severity = Severity::Info;
    x.summary = format!(
        "{n} records had an end before their start or times far outside the trace; they were clipped or ignored."
    );
    x.metrics.insert("records".into(), n as f64);
    x.fix =
        "Usually a driver or CUPTI timestamp glitch; if frequent, report it with the trace.".into();
    Some(x)
}
