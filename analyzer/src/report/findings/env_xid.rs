//! `env_xid`: the driver reported Xid errors or new uncorrected ECC errors on a GPU while
//! the trace was open.

use super::inputs::FindingCx;
use crate::report::environment;
use crate::report::out::id::FindingId;
use crate::report::out::{Example, Finding, Severity};
use gputrace_format as fmt;

/// Distinct Xid codes named in the summary.
const MAX_XIDS: usize = 5;

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let errs = environment::gpu_errors(cx.ctx.t, 0, u64::MAX);
    let first = errs.first()?;
    let mut x = cx.finding(
        FindingId::EnvXid,
        "GPU errors reported by the driver",
        0,
        false,
    );
    x.severity = Severity::Warn;
    // Each distinct (Xid, GPU) once, in the order first seen, at most MAX_XIDS named.
    let mut seen: Vec<(u64, u32, usize)> = Vec::new();
    for e in errs.iter().filter(|e| e.kind == fmt::GPU_EVENT_XID) {
        match seen.iter_mut().find(|s| s.0 == e.data && s.1 == e.device) {
            Some(s) => s.2 += 1,
            None => seen.push((e.data, e.device, 1)),
        }
    }
    let mut xids: Vec<String> = seen
        .iter()
        .take(MAX_XIDS)
        .map(|&(xid, gpu, n)| match n {
            1 => format!("Xid {xid} on GPU {gpu}"),
            n => format!("Xid {xid} on GPU {gpu} x{n}"),
        })
        .collect();
    if seen.len() > MAX_XIDS {
        xids.push(format!(
            "{} more Xid code and GPU pairs",
            seen.len() - MAX_XIDS
        ));
    }
    let ecc: u64 = errs
        .iter()
        .filter(|e| e.kind == fmt::GPU_EVENT_ECC_UNCORRECTED)
        .fold(0u64, |a, e| a.saturating_add(e.data));
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
