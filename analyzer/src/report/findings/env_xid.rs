//! `env_xid`: the driver reported Xid errors or new uncorrected ECC errors on a GPU while
//! the trace was open.

use super::{FindingCx, FindingId};
use crate::env;
use crate::report::{Example, Finding, Severity};
use gputrace_format as fmt;

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let errs = env::gpu_errors(cx.ctx.t, 0, u64::MAX);
    let first = errs.first()?;
    let mut x = cx.finding(
        FindingId::EnvXid,
        "GPU errors reported by the driver",
        0,
        false,
    );
    x.severity = Severity::Warn;
    let xids: Vec<String> = errs
        .iter()
        .filter(|e| e.kind == fmt::GPU_EVENT_XID)
        .map(|e| format!("Xid {} on GPU {}", e.data, e.device))
        .collect();
    let ecc: u64 = errs
        .iter()
        .filter(|e| e.kind == fmt::GPU_EVENT_ECC_UNCORRECTED)
        .map(|e| e.data)
        .sum();
    x.summary = format!(
        "{}{}{}.",
        xids.join(", "),
        if !xids.is_empty() && ecc > 0 {
            "; "
        } else {
            ""
        },
        if ecc > 0 {
            format!("{ecc} new uncorrected ECC errors")
        } else {
            String::new()
        }
    );
    for e in errs.iter().take(5) {
        x.examples.push(Example {
            at_ns: cx.rel(e.ts),
            dur_ns: 0,
            what: format!(
                "{} {} on GPU {}",
                fmt::gpu_event_name(e.kind),
                e.data,
                e.device
            ),
        });
    }
    x.metrics
        .insert("first_at_ns".into(), cx.rel(first.ts) as f64);
    x.fix = "Look the Xid up in NVIDIA's Xid catalogue and in the kernel log (dmesg | grep -i xid); a GPU that keeps reporting them (79: fallen off the bus, 48/94/95: ECC) needs a reset or replacement, and the results of the run may be wrong.".into();
    Some(x)
}
