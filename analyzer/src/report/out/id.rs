//! The findings vocabulary: every finding id, and what is known about each (its layer, what
//! kind of time it puts at stake, which findings' time it overlaps), declared once here.
//!
//! A new variant goes in the `ids!` list with its name; the compiler then points at
//! [`FindingId::about`] (its layer and time) and at the detector list in `findings/mod.rs`.

use crate::report::cause::Cause;
use serde::{Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// Declares the enum, its names and the list of all ids from one list.
macro_rules! ids {
    ($($(#[$doc:meta])* $v:ident = $name:literal,)*) => {
        /// A stable finding id, as written in `--json` and the text report.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum FindingId {
            $($(#[$doc])* $v,)*
        }

        impl FindingId {
            /// Every id, in the order the detectors run.
            pub const ALL: &'static [FindingId] = &[$(FindingId::$v,)*];

            /// The id as written in reports.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(FindingId::$v => $name,)*
                }
            }
        }
    };
}

ids! {
    /// GPU work that never completed: the GPU stuck in a kernel, a collective or a copy
    /// (from the library's stall records, or inferred at an abnormal end).
    Hang = "hang",
    /// GPU idle while no host thread was issuing CUDA work (with host samples: while the
    /// feeding thread was blocked).
    DataStarvation = "data_starvation",
    /// GPU idle while the feeding thread was computing on the CPU (host samples).
    CpuBound = "cpu_bound",
    /// Copies from pageable host memory.
    PageableMemcpy = "pageable_memcpy",
    /// Pinned copies made with a blocking call.
    SyncMemcpy = "sync_memcpy",
    /// The host waited for the GPU, then the GPU waited for the host.
    ImplicitSync = "implicit_sync",
    /// Kernels shorter than the time to launch them.
    LaunchBound = "launch_bound",
    /// GPU time spread over very many tiny kernels.
    KernelFragmentation = "kernel_fragmentation",
    /// Kernels with far fewer blocks than the GPU holds.
    SmallGrid = "small_grid",
    /// Kernels that hold DRAM near its peak bandwidth while the math pipes idle
    /// (measured: GPU counter samples).
    MemoryBound = "memory_bound",
    /// Small batches while most device memory is unused.
    MemoryHeadroom = "memory_headroom",
    /// Allocations failed for want of device memory: the process died of it, or nearly.
    OutOfMemory = "out_of_memory",
    /// Device memory in use grew step after step in a job that did not (yet) run out.
    MemoryGrowth = "memory_growth",
    /// Compilation again after the GPU work began (torch.compile recompiling for new
    /// shapes, JAX re-jitting): time the run spent compiling instead of running.
    Recompilation = "recompilation",
    /// Saving or loading checkpoints took a large part of the run, the GPU mostly
    /// waiting (`torch.save` copying each tensor to host memory, then writing it).
    CheckpointStall = "checkpoint_stall",
    /// The process took long to exit after its last CUDA work: exit handlers waiting on
    /// DataLoader workers or a compile pool.
    SlowShutdown = "slow_shutdown",
    /// Collective time not hidden behind compute.
    CommExposed = "comm_exposed",
    /// A rank that arrives late at collectives (a finding about the whole job).
    CommStraggler = "comm_straggler",
    /// The collector was blind part of the time.
    EnvBlindWindow = "env_blind_window",
    /// Records were dropped.
    EnvDroppedRecords = "env_dropped_records",
    /// No host API events: idle causes are GPU-only heuristics.
    EnvNoHostApi = "env_no_host_api",
    /// The trace file is damaged.
    EnvTraceDamaged = "env_trace_damaged",
    /// Records with impossible timestamps.
    EnvBadRecords = "env_bad_records",
    /// Another process used the job's GPU.
    EnvSharedGpu = "env_shared_gpu",
    /// Clocks held down by power, heat or a hardware slowdown.
    EnvThrottled = "env_throttled",
    /// The PCIe link ran below its maximum while copies mattered.
    EnvPcieDegraded = "env_pcie_degraded",
    /// CUDA runtime, driver and framework versions that do not fit.
    EnvCudaCompat = "env_cuda_compat",
    /// The process runs on CPUs far from its GPU.
    EnvCpuAffinity = "env_cpu_affinity",
    /// The driver reported Xid or uncorrected ECC errors.
    EnvXid = "env_xid",
    /// NVML could not be used: the environment checks were skipped.
    EnvNvmlUnavailable = "env_nvml_unavailable",
    /// GPU hardware counters were asked for but could not be sampled.
    EnvPmUnavailable = "env_pm_unavailable",
}

/// The layers a slow job is checked in, from the outside in (the design brief's seed layers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layer {
    DataSupply,
    CpuPreprocessing,
    MemoryAndBatchSize,
    CommunicationAndSync,
    KernelEfficiency,
    /// Environment and driver, and the trace's own coverage. Their ids start with `env_`.
    Environment,
}

/// What kind of time a finding's `at_stake_ns` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stake {
    /// GPU idle time the idle attribution charged to this cause: the breakdown's row of the
    /// same name. (A pageable copy's stake adds its busy excess over the pinned rate.)
    Idle(Cause),
    /// GPU time lost to collectives, measured outside the idle attribution.
    Collective,
    /// GPU time busy but poorly used (estimated, or the time of a finding it overlaps).
    Busy,
    /// GPU time with no progress: from the last progress to the end of the trace.
    Stuck,
    /// Not lost time: what the trace says about its own coverage.
    Coverage,
    /// A run that failed or is heading for failure: the traced time up to the failure
    /// when the process died of it (the work it lost), none otherwise.
    Failure,
    /// Time of the whole run outside the loop's GPU time (compiling): a share of the
    /// trace, not of the steady state.
    Run,
}

/// Everything declared about one finding id.
#[derive(Clone, Copy, Debug)]
pub struct About {
    pub layer: Layer,
    pub stake: Stake,
    /// Findings whose time this one's overlaps: not to be added up; ranked right after the
    /// largest of them.
    pub overlaps: &'static [FindingId],
}

impl FindingId {
    /// The one table of what is known about each id.
    pub const fn about(self) -> About {
        use FindingId::*;
        use Layer::*;
        use Stake::*;
        let (layer, stake, overlaps): (Layer, Stake, &'static [FindingId]) = match self {
            Hang => (CommunicationAndSync, Stuck, &[]),
            DataStarvation => (DataSupply, Idle(Cause::DataStarvation), &[]),
            CpuBound => (CpuPreprocessing, Idle(Cause::CpuBound), &[]),
            PageableMemcpy => (DataSupply, Idle(Cause::PageableMemcpy), &[]),
            SyncMemcpy => (DataSupply, Idle(Cause::SyncMemcpy), &[]),
            ImplicitSync => (CommunicationAndSync, Idle(Cause::ImplicitSync), &[]),
            LaunchBound => (KernelEfficiency, Idle(Cause::LaunchBound), &[]),
            KernelFragmentation => (KernelEfficiency, Idle(Cause::KernelFragmentation), &[]),
            SmallGrid => (MemoryAndBatchSize, Busy, &[]),
            MemoryBound => (KernelEfficiency, Busy, &[]),
            MemoryHeadroom => (
                MemoryAndBatchSize,
                Busy,
                &[SmallGrid, LaunchBound, KernelFragmentation],
            ),
            OutOfMemory | MemoryGrowth => (MemoryAndBatchSize, Failure, &[]),
            Recompilation => (CpuPreprocessing, Run, &[]),
            CheckpointStall => (DataSupply, Run, &[]),
            SlowShutdown => (CpuPreprocessing, Run, &[]),
            CommExposed => (CommunicationAndSync, Collective, &[]),
            CommStraggler => (CommunicationAndSync, Collective, &[]),
            EnvBlindWindow | EnvDroppedRecords | EnvNoHostApi | EnvTraceDamaged | EnvBadRecords => {
                (Environment, Coverage, &[])
            }
            // GPU time another process, the clocks or the link took from the job (its
            // idle and busy time while that happened).
            EnvSharedGpu | EnvThrottled | EnvPcieDegraded => (Environment, Busy, &[]),
            EnvCudaCompat | EnvCpuAffinity | EnvXid | EnvNvmlUnavailable | EnvPmUnavailable => {
                (Environment, Coverage, &[])
            }
        };
        About {
            layer,
            stake,
            overlaps,
        }
    }

    pub const fn layer(self) -> Layer {
        self.about().layer
    }

    pub const fn stake(self) -> Stake {
        self.about().stake
    }

    pub const fn overlaps(self) -> &'static [FindingId] {
        self.about().overlaps
    }

    /// The idle-attribution cause whose time this finding reports, if any.
    pub const fn idle_cause(self) -> Option<Cause> {
        match self.stake() {
            Stake::Idle(c) => Some(c),
            _ => None,
        }
    }

    /// Whether the time at stake is GPU idle time, so the verdict may name it as the cause of
    /// the idle share.
    pub const fn is_idle_time(self) -> bool {
        matches!(self.stake(), Stake::Idle(_) | Stake::Collective)
    }
}

impl fmt::Display for FindingId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for FindingId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A string that is no finding id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown finding id `{0}`")]
pub struct UnknownFindingId(pub String);

impl FromStr for FindingId {
    type Err = UnknownFindingId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FindingId::ALL
            .iter()
            .copied()
            .find(|id| id.as_str() == s)
            .ok_or_else(|| UnknownFindingId(s.to_string()))
    }
}

impl Cause {
    /// The finding that reports this cause's idle time; None for the unattributed causes.
    pub fn finding(self) -> Option<FindingId> {
        FindingId::ALL
            .iter()
            .copied()
            .find(|id| id.idle_cause() == Some(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn names_round_trip_and_are_unique() {
        let mut seen = HashSet::new();
        for &id in FindingId::ALL {
            assert!(seen.insert(id.as_str()), "{id} twice");
            assert_eq!(id.as_str().parse::<FindingId>(), Ok(id));
            assert_eq!(
                serde_json::to_string(&id).unwrap(),
                format!("\"{}\"", id.as_str())
            );
            assert!(id
                .as_str()
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == '_'));
        }
        assert!("healthy".parse::<FindingId>().is_err());
        assert!("Data_Starvation".parse::<FindingId>().is_err());
    }

    #[test]
    fn environment_layer_is_the_env_prefix() {
        for &id in FindingId::ALL {
            assert_eq!(
                id.layer() == Layer::Environment,
                id.as_str().starts_with("env_"),
                "{id}"
            );
        }
    }

    #[test]
    fn every_attributed_cause_has_one_finding_of_its_name() {
        for c in Cause::ALL {
            let reporting: Vec<_> = FindingId::ALL
                .iter()
                .filter(|id| id.idle_cause() == Some(c))
                .collect();
            assert!(reporting.len() <= 1, "{c:?} reported by {reporting:?}");
            if let Some(id) = c.finding() {
                assert_eq!(id.as_str(), c.id());
                assert!(id.is_idle_time());
            }
        }
    }

    #[test]
    fn every_cause_has_a_name_and_the_unattributed_are_three() {
        let names: HashSet<_> = Cause::ALL.iter().map(|c| c.id()).collect();
        assert_eq!(names.len(), Cause::ALL.len());
        assert!(!names.contains(""));
        for c in Cause::ALL {
            let unattributed =
                matches!(c, Cause::QueuedWait | Cause::OtherCall | Cause::NotObserved);
            assert_eq!(c.attributed(), !unattributed, "{c:?}");
        }
    }

    /// The rank puts a finding right after the largest it overlaps, which holds only if the
    /// overlapped ones are ranked by their own time.
    #[test]
    fn overlaps_name_other_findings_of_one_process() {
        for &id in FindingId::ALL {
            for o in id.overlaps() {
                assert_ne!(*o, id);
                assert!(
                    o.overlaps().is_empty(),
                    "{id} overlaps {o}, which overlaps too"
                );
            }
        }
    }
}
