//! `env_nvml_unavailable`: NVML was missing or refused access while tracing, so the
//! environment checks (other processes, clocks, PCIe) could not be made. One info line,
//! never a failure.

use super::inputs::FindingCx;
use crate::report::environment;
use crate::report::out::id::FindingId;
use crate::report::out::{Finding, Severity};

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let why = environment::nvml_unavailable(cx.ctx.t)?;
    if why.starts_with("off") {
        return None;
    }
    let mut x = cx.finding(
        FindingId::EnvNvmlUnavailable,
        "NVML unavailable: environment not checked",
        0,
        false,
    );
    x.severity = Severity::Info;
    x.summary = format!(
        "NVML could not be used ({why}): other processes on the GPU, clocks and the PCIe link were not recorded."
    );
    x.fix = "Make libnvidia-ml.so.1 loadable by the job (in a container: the utility driver capability), or name it with GPUTRACE_NVML.".into();
    Some(x)
}
