//! `env_cuda_compat`: the CUDA runtime the process loaded, the driver and the framework's
//! build do not fit (from the trace's facts).

use super::inputs::FindingCx;
use crate::report::environment;
use crate::report::out::id::FindingId;
use crate::report::out::{Finding, Severity};

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let issues = environment::cuda_compat(cx.ctx.t);
    let first = issues.first()?;
    let mut x = cx.finding(
        FindingId::EnvCudaCompat,
        "CUDA versions do not fit",
        0,
        false,
    );
    let serious = issues.iter().any(|c| c.serious);
    x.severity = if serious {
        Severity::Warn
    } else {
        Severity::Info
    };
    x.summary = format!("{}.", first.detail);
    for c in &issues[1..] {
        x.evidence.push(c.detail.clone());
    }
    x.fix = "Match them: upgrade the driver to one that supports the runtime's CUDA, or install the framework build for the driver's CUDA (for torch, the wheel index of that cuXYZ).".into();
    Some(x)
}
