//! `env_cpu_affinity`: the process may run only (or mostly) on CPUs far from its GPU
//! (another NUMA node than the GPU's local CPUs).

use super::inputs::FindingCx;
use crate::report::environment;
use crate::report::out::id::FindingId;
use crate::report::out::{Finding, Severity};

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let all = environment::cpu_affinity(cx.ctx.t);
    let a = all.first()?;
    let mut x = cx.finding(FindingId::EnvCpuAffinity, "CPUs far from the GPU", 0, false);
    x.severity = if a.local_pct == 0.0 {
        Severity::Warn
    } else {
        Severity::Info
    };
    x.summary = format!(
        "The process may run on CPUs {}, of which {:.0}% are close to GPU {} (its local CPUs are {}): host-side work and copies cross the socket interconnect.",
        a.process_cpus, a.local_pct, a.device, a.local_cpus
    );
    x.fix = "Bind the job to the GPU's NUMA node: numactl --cpunodebind=N --membind=N, or the launcher's CPU binding (torchrun/srun --cpu-bind); gputrace doctor shows each GPU's local CPUs.".into();
    Some(x)
}
