//! What `report` produces: the report's output types (the `--json` layout) and each
//! process's timeline for the exporters. The passes write these; views only read them.

use super::ctx::Ctx;
use super::damage::TraceDamage;
pub mod id;

use super::{
    callsites, comm, counters, endings, failures, graphs, host_causes, idle, memuse, phases,
    pysamples, stalls,
};
use id::FindingId;
use serde::Serialize;
use std::collections::BTreeMap;

/// Version of the `--json` layout. Fields are only added within a version.
pub const SCHEMA_VERSION: u32 = 1;
/// Step rows listed in the JSON (the statistics cover all steps).
pub const MAX_STEP_ROWS: usize = 200;

#[derive(Serialize, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warn,
    Critical,
}

impl Severity {
    pub fn name(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warn => "warn",
            Severity::Critical => "critical",
        }
    }
}

/// A moment in the trace that shows a finding.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Example {
    /// Nanoseconds after the start of the process's trace.
    pub at_ns: u64,
    pub dur_ns: u64,
    pub what: String,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Finding {
    /// Stable id from the findings vocabulary.
    pub id: FindingId,
    pub severity: Severity,
    /// Index into `processes`; None for findings about the whole job.
    pub process: Option<usize>,
    /// The process's label (`pid 123`, `rank 2`).
    pub rank: String,
    pub title: String,
    /// GPU time this cause cost in the steady state (device-time).
    pub at_stake_ns: u64,
    /// `at_stake_ns` as a share of the steady-state wall time (x devices).
    pub at_stake_pct: f64,
    /// Part of `at_stake_ns` is an estimate (see `evidence`).
    pub estimated: bool,
    pub summary: String,
    pub evidence: Vec<String>,
    pub examples: Vec<Example>,
    /// Machine-readable numbers behind the evidence.
    pub metrics: BTreeMap<String, f64>,
    pub fix: String,
    /// Ids of findings whose time this one's overlaps (not to be added up).
    pub overlaps: Vec<FindingId>,
    /// The finding on the same process this one is a consequence of (`launch_bound`
    /// caused by `implicit_sync`): ranked right after it, fixed by fixing it first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caused_by: Option<FindingId>,
    /// What the measurements say caused it, for findings with measured sub-causes
    /// (`data_starvation`, `cpu_bound`, `implicit_sync`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subcause: Option<String>,
    /// Where in the program's Python code the calls behind it were made, most host
    /// time first (traces of CPython processes; absent otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub call_sites: Vec<callsites::CallSite>,
    /// Where the host's Python code was during the gaps this finding is about, from
    /// the periodic stack samples (format 2.3; absent without them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub host_was_in: Vec<pysamples::HostPlace>,
    /// The `hang` finding's details: the stuck operation, each thread's call and line,
    /// how the job ended, the collective per rank (absent for other findings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hang: Option<Box<stalls::Hang>>,
}

#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct Phase {
    /// Relative to the process's trace start.
    pub start_ns: u64,
    pub end_ns: u64,
    pub wall_ns: u64,
    pub busy_ns: u64,
    pub busy_pct: f64,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct CauseShare {
    pub cause: String,
    pub ns: u64,
    /// Share of the breakdown's device time.
    pub pct: f64,
    /// Idle intervals whose largest share went to this cause.
    pub gaps: u64,
}

#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct Breakdown {
    /// `host_api` or `gpu_only_heuristic`.
    pub method: String,
    /// Window length x devices with work.
    pub wall_ns: u64,
    pub busy_ns: u64,
    pub busy_pct: f64,
    pub idle_ns: u64,
    pub idle_pct: f64,
    pub attributed_ns: u64,
    /// Share of the idle time with a named cause.
    pub attributed_pct: f64,
    /// Named causes, largest first.
    pub causes: Vec<CauseShare>,
    pub unattributed_ns: u64,
    /// queued_work_waiting, other_cuda_call, not_observed.
    pub unattributed: Vec<CauseShare>,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct StepRow {
    pub index: usize,
    pub start_ns: u64,
    pub dur_ns: u64,
    pub busy_pct: f64,
}

#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct StepsReport {
    pub detected: bool,
    /// `kernel_period` or `none` (`nvtx` once NVTX ranges are recorded).
    pub source: String,
    pub anchor_kernel: Option<String>,
    /// Text of the NVTX range that marks steps (source `nvtx`).
    pub nvtx_range: Option<String>,
    /// GPU operations (kernels, copies, memsets) per step, for `kernel_period` steps.
    pub ops_per_step: Option<u32>,
    pub count: usize,
    pub warmup_steps: usize,
    pub irregular_boundaries: usize,
    pub step_ns_median: u64,
    pub step_ns_mean: u64,
    pub step_ns_min: u64,
    pub step_ns_max: u64,
    pub step_ns_p90: u64,
    /// (max - min) / median.
    pub spread_pct: f64,
    /// Standard deviation / mean.
    pub cv_pct: f64,
    pub busy_pct_median: f64,
    pub busy_pct_min: f64,
    pub busy_pct_max: f64,
    pub list: Vec<StepRow>,
    /// The CUDA graph whose replays mark the steps (source `graph_replay`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graph_id: Option<u32>,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct TopKernel {
    pub name: String,
    pub count: u64,
    pub total_ns: u64,
    pub mean_ns: u64,
    pub blocks_min: u64,
    pub blocks_max: u64,
    pub threads_per_block: u64,
    pub resident_blocks_per_sm: Option<u32>,
    /// Time-weighted share of resident-block slots the grids filled (estimate).
    pub fill_pct: Option<f64>,
    pub comm: bool,
}

#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct KernelsReport {
    pub count: u64,
    pub total_ns: u64,
    pub per_second: f64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    pub under_10us_count_pct: f64,
    pub under_10us_time_pct: f64,
    pub top: Vec<TopKernel>,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct StreamReport {
    pub device: u32,
    pub stream: u32,
    pub works: u64,
    pub gpu_ns: u64,
    pub mean_depth: f64,
    pub max_depth: u32,
    pub empty_pct: f64,
}

#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct LaunchReport {
    /// GPU work linked to the call that submitted it.
    pub linked: u64,
    pub unlinked: u64,
    pub latency_p50_ns: u64,
    pub latency_p90_ns: u64,
    pub latency_p99_ns: u64,
    pub latency_max_ns: u64,
    pub launch_calls: u64,
    pub launch_call_p50_ns: u64,
    pub launch_interval_p50_ns: u64,
    pub empty_queue_pct: f64,
    pub mean_queue_depth: f64,
    pub queue_depth_series: Vec<f64>,
    pub streams: Vec<StreamReport>,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct CopyReport {
    pub host_memory: String,
    pub direction: String,
    #[serde(rename = "async")]
    pub is_async: bool,
    pub count: u64,
    pub bytes: u64,
    pub time_ns: u64,
    pub exposed_ns: u64,
    pub gbps: Option<f64>,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct MemoryReport {
    pub device: u32,
    pub peak_bytes: u64,
    pub capacity_bytes: u64,
    pub peak_pct: Option<f64>,
    pub lower_bound: bool,
    pub events: u64,
}

#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct CommReport {
    pub kernels: u64,
    pub time_ns: u64,
    pub exposed_ns: u64,
    pub exposed_pct: f64,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct ThreadReport {
    pub tid: u32,
    pub name: String,
    pub calls: u64,
    pub launch_ns: u64,
    pub copy_ns: u64,
    pub sync_ns: u64,
    pub other_ns: u64,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct DeviceReport {
    pub id: u32,
    pub name: String,
    pub sm_count: u32,
    pub memory_bytes: u64,
    pub compute_capability: String,
    pub steady_busy_pct: f64,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct ProcessReport {
    pub index: usize,
    pub label: String,
    pub path: String,
    pub pid: u32,
    pub host: String,
    pub rank: Option<u32>,
    /// Where `rank` came from: `option NAME` (a recorded setting such as RANK), `nccl`
    /// (the process's rank in its largest NCCL communicator), or `none`.
    pub rank_source: String,
    pub command: Vec<String>,
    /// First timestamp of the trace (CUPTI clock, ns); all `*_ns` times are relative to it.
    pub trace_start_ns: u64,
    pub span_ns: u64,
    pub host_api_events: u64,
    /// How the process (or its trace window) ended.
    pub ended: endings::Ended,
    /// `host_api` or `gpu_only_heuristic`.
    pub attribution: String,
    pub devices: Vec<DeviceReport>,
    pub startup: Phase,
    pub steady: Phase,
    pub tail: Phase,
    pub steps: StepsReport,
    pub breakdown: Breakdown,
    pub startup_breakdown: Breakdown,
    /// What nvidia-smi's GPU-Util would show: time with any kernel running.
    pub gpu_util_pct: f64,
    /// Time-weighted share of the GPU's resident-block slots kernels filled (estimate).
    pub sm_fill_pct: Option<f64>,
    /// GPU performance counters measured over the steady state (NVML GPM from `gputrace
    /// run`/`attach`, or CUPTI PM sampling in older traces); absent without counter samples.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured: Option<counters::Measured>,
    /// The same for the busiest kernel names of the steady state.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub measured_kernels: Vec<counters::MeasuredKernel>,
    pub kernels: KernelsReport,
    pub launches: LaunchReport,
    pub copies: Vec<CopyReport>,
    pub memory: Vec<MemoryReport>,
    /// Device memory allocated through `cudaMalloc` and in use, from each `cudaFree`
    /// paired with its allocation by pointer (traces of format 2.5); absent without them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_in_use: Option<MemoryInUse>,
    pub comm: CommReport,
    pub threads: Vec<ThreadReport>,
    pub notes: Vec<String>,
    /// What the trace file lost (damage, or an end cut short); absent when whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub damage: Option<TraceDamage>,
    /// The host side (threads' CPU, process tree, machine), from the host samples;
    /// absent when the trace has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_cpu: Option<host_causes::HostReport>,
    /// Versions and the GPUs' clocks, power, temperature and link over the steady
    /// state, from the environment facts and NVML samples; absent without them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment: Option<crate::report::environment::EnvSummary>,
    /// CUDA graph replays: per graph, replays, kernels, GPU time and gaps per replay, and
    /// the set-up calls; absent when no kernel ran in a graph.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graphs: Option<graphs::GraphsReport>,
    /// Calls that returned an error, by call and code, first failure first; absent when
    /// none did.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed_calls: Vec<failures::FailedCall>,
    /// The whole traced time, phase by phase ([`phases`]): start-up, compilation, the
    /// loop, checkpoints, evaluation, pauses; absent for a trace with no time span.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<phases::Run>,
    /// The failed call after which the process ran no more GPU work, when it is one that
    /// ends processes (out of memory, an error that corrupts the CUDA context, an NCCL
    /// error): what the process most likely died of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fatal_call: Option<failures::FatalCall>,
    /// This process's own verdict and top finding, when the traces given together are not
    /// one job's ranks (the report's verdict then only lists them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_finding: Option<FindingId>,
}

/// Device memory allocated through `cudaMalloc` and in use ([`memuse`]).
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct MemoryInUse {
    pub source: memuse::Source,
    pub allocations: u64,
    pub frees: u64,
    /// Frees of memory allocated before the trace began: the figures are lower bounds.
    pub unknown_frees: u64,
    pub peak_bytes: u64,
    pub peak_at_ns: u64,
    /// In use when the trace ended.
    pub end_bytes: u64,
    /// From step to step over the steady state (absent without steps).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub growth: Option<memuse::Growth>,
}

impl MemoryInUse {
    pub(crate) fn of(ctx: &Ctx, steps: &[u64]) -> Option<MemoryInUse> {
        let u = memuse::InUse::of(ctx.t).filter(|u| u.source == memuse::Source::CudaMalloc)?;
        Some(MemoryInUse {
            source: u.source,
            allocations: u.allocs,
            frees: u.frees.len() as u64,
            unknown_frees: u.unknown_frees,
            peak_bytes: u.peak_bytes,
            peak_at_ns: ctx.rel(u.peak_at),
            end_bytes: u.series.last().map_or(0, |p| p.1),
            growth: u.growth(steps),
        })
    }
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct ClusterRank {
    pub process: usize,
    pub label: String,
    pub clock_offset_ns: i64,
    pub collectives: u64,
    pub last_arrivals: u64,
    pub wait_ns: u64,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct ClusterReport {
    pub ranks: Vec<ClusterRank>,
    pub alignment: String,
    /// `nccl_calls` or `kernel_order`.
    pub matching: String,
    pub residual_ns: u64,
    pub matched_collectives: u64,
    pub unmatched_collectives: u64,
    pub straggler: Option<usize>,
    pub straggler_last_pct: f64,
    pub others_wait_ns: u64,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Report {
    pub schema_version: u32,
    pub generator: String,
    /// One line: the state of the steady state and its biggest cause.
    pub verdict: String,
    /// Id of the finding the verdict names, if any.
    pub top_finding: Option<FindingId>,
    /// Present only when several traces were given that do not look like the ranks of
    /// one job: why not (they are then reported side by side, without `cluster`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_set: Option<crate::model::job::TraceSetCheck>,
    pub processes: Vec<ProcessReport>,
    /// Traces given of processes that did no GPU work (no kernel, copy or CUDA call:
    /// launchers such as torchrun, compile workers, tokenizers), beside processes that
    /// did: counted, not listed.
    #[serde(skip_serializing_if = "is_zero")]
    pub processes_without_cuda: usize,
    pub cluster: Option<ClusterReport>,
    /// All findings, ranked by GPU time at stake.
    pub findings: Vec<Finding>,
}

impl Report {
    /// The highest severity among findings.
    pub fn worst(&self) -> Option<Severity> {
        self.findings.iter().map(|f| f.severity).max()
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

pub(crate) use super::units::pct;

/// What the analysis placed on one process's timeline, for the timeline and table
/// exporters: the steps, the phases, and every idle piece with its cause. Times are the
/// trace's own (not relative).
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    /// Index of the trace among those given.
    pub trace: usize,
    /// Index of its process in the report's `processes` (traces of processes that did no
    /// GPU work are left out there, and the rest are ordered by rank).
    pub process: usize,
    /// Step start times; step i is [steps[i], steps[i+1]).
    pub steps: Vec<u64>,
    pub startup: (u64, u64),
    pub steady: (u64, u64),
    pub tail: (u64, u64),
    /// Every idle piece of every analysed device, in time order per device.
    pub idle: Vec<idle::IdlePiece>,
    /// Every CUDA graph replay, in start order.
    pub replays: Vec<graphs::Replay>,
    /// This rank's collectives (NCCL kernels on its primary device), in start order.
    pub collectives: Vec<comm::Collective>,
}
