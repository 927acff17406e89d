//! From measurements to findings: each with its stable id, severity, the GPU time at stake
//! in the steady state, the evidence, and the fix in the user's terms.
//!
//! - `id.rs`: the [`FindingId`] vocabulary and, in [`FindingId::about`], what is declared
//!   about each id (layer, kind of time at stake, overlaps).
//! - `cx.rs`: [`FindingCx`], what a detector reads about one process; [`JobCx`], about a job.
//! - `common.rs`: the severity rule, the finding skeleton, evidence formatting.
//! - one file per finding, named after its id, with its detector.
//! - `rank.rs`: the order of the findings and the verdict.
//!
//! To add a finding: a variant (and its name) in the `ids!` list of `id.rs`, a file here with
//! its `detect`, and its `mod` line below; the compiler then asks for its line in
//! [`FindingId::about`] and in [`detector`]. New input data is a field of [`FindingCx`].

mod common;

mod inputs;
mod rank;

mod chains;
mod checkpoint_stall;
mod comm_exposed;
mod comm_straggler;
mod cpu_bound;
mod data_starvation;
mod env_bad_records;
mod env_blind_window;
mod env_cpu_affinity;
mod env_cuda_compat;
mod env_dropped_records;
mod env_no_host_api;
mod env_nvml_unavailable;
mod env_pcie_degraded;
mod env_pm_unavailable;
mod env_shared_gpu;
mod env_throttled;
mod env_trace_damaged;
mod env_xid;
mod hang;
mod implicit_sync;
mod kernel_fragmentation;
mod launch_bound;
mod memory_bound;
mod memory_growth;
mod memory_headroom;
mod out_of_memory;
mod pageable_memcpy;
mod recompilation;
mod slow_shutdown;
mod small_grid;
mod sync_memcpy;

pub use super::out::id::{About, FindingId, Layer, Stake, UnknownFindingId};
pub(crate) use common::finding as new_finding;
pub(crate) use common::kernel_name as kernel_name_of;
pub(crate) use common::REPORT_PCT;
pub(crate) use env_dropped_records::CRITICAL_PCT as DROPPED_CRITICAL_PCT;
pub(crate) use inputs::{FindingCx, JobCx};
pub(crate) use rank::{rank, verdict};

use super::out::Finding;

/// A detector, by when it runs. Each returns its finding when the trace shows it.
#[derive(Clone, Copy)]
enum Detector {
    /// Once per process that ran GPU work in a steady state.
    Steady(fn(&FindingCx) -> Option<Finding>),
    /// Once per process, whatever it recorded: what the trace says about its own coverage.
    Always(fn(&FindingCx) -> Option<Finding>),
    /// Once per job of several ranks, after every process's findings: adds its finding to
    /// them and may take over time they counted.
    Job(fn(&JobCx, &mut Vec<Finding>)),
}

/// The detector of each id: the one list of them.
fn detector(id: FindingId) -> Detector {
    use Detector::{Always, Job, Steady};
    use FindingId::*;
    match id {
        Hang => Always(hang::detect),
        DataStarvation => Steady(data_starvation::detect),
        CpuBound => Steady(cpu_bound::detect),
        PageableMemcpy => Steady(pageable_memcpy::detect),
        SyncMemcpy => Steady(sync_memcpy::detect),
        ImplicitSync => Steady(implicit_sync::detect),
        LaunchBound => Steady(launch_bound::detect),
        KernelFragmentation => Steady(kernel_fragmentation::detect),
        SmallGrid => Steady(small_grid::detect),
        MemoryBound => Steady(memory_bound::detect),
        MemoryHeadroom => Steady(memory_headroom::detect),
        OutOfMemory => Always(out_of_memory::detect),
        MemoryGrowth => Steady(memory_growth::detect),
        Recompilation => Always(recompilation::detect),
        CheckpointStall => Always(checkpoint_stall::detect),
        SlowShutdown => Always(slow_shutdown::detect),
        CommExposed => Steady(comm_exposed::detect),
        CommStraggler => Job(comm_straggler::detect),
        EnvBlindWindow => Always(env_blind_window::detect),
        EnvDroppedRecords => Always(env_dropped_records::detect),
        EnvNoHostApi => Always(env_no_host_api::detect),
        EnvTraceDamaged => Always(env_trace_damaged::detect),
        EnvBadRecords => Always(env_bad_records::detect),
        EnvSharedGpu => Steady(env_shared_gpu::detect),
        EnvThrottled => Steady(env_throttled::detect),
        EnvPcieDegraded => Steady(env_pcie_degraded::detect),
        EnvCudaCompat => Always(env_cuda_compat::detect),
        EnvCpuAffinity => Always(env_cpu_affinity::detect),
        EnvXid => Always(env_xid::detect),
        EnvNvmlUnavailable => Always(env_nvml_unavailable::detect),
        EnvPmUnavailable => Always(env_pm_unavailable::detect),
    }
}

/// Findings about one process, in the order of [`FindingId::ALL`] (the rank orders them).
pub(crate) fn process(cx: &FindingCx) -> Vec<Finding> {
    let steady = cx.has_steady_gpu();
    let mut found: Vec<Finding> = FindingId::ALL
        .iter()
        .filter_map(|&id| match detector(id) {
            Detector::Steady(d) if steady => d(cx),
            Detector::Always(d) => d(cx),
            Detector::Steady(_) | Detector::Job(_) => None,
        })
        .collect();
    chains::link(cx, &mut found);
    found
}

/// Findings about a job of several ranks, added to (and adjusting) the processes' findings.
pub(crate) fn job(cx: &JobCx, all: &mut Vec<Finding>) {
    for &id in FindingId::ALL {
        if let Detector::Job(d) = detector(id) {
            d(cx, all);
        }
    }
}
