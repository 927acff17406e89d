//! The event vocabulary of a trace. Append-only: a tag, once given, never changes.

use crate::table::{Arr, Corr, Dev, End, Frames, Na, Opt, Sid, Text, Trail, Ts, Zz, U8, V};
pub use crate::wire::PyFrame;
use serde::{Deserialize, Serialize};

/// A field's coded values, each a constant with its name, from one list: the constants
/// and the function that names a value (`other` for a value not in the list).
macro_rules! codes {
    (
        $(#[$m:meta])*
        fn $name:ident, other $other:literal {
            $( $(#[$cm:meta])* $C:ident = $v:literal => $text:literal, )*
        }
    ) => {
        $( $(#[$cm])* pub const $C: u8 = $v; )*
        $(#[$m])*
        pub fn $name(code: u8) -> &'static str {
            match code {
                $( $C => $text, )*
                _ => $other,
            }
        }
    };
}

/// Metadata written once, in the first chunk, as JSON.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Meta {
    /// Version of the library that wrote the trace.
    pub writer: String,
    pub pid: u32,
    pub ppid: u32,
    pub host: String,
    pub exe: String,
    pub cmdline: Vec<String>,
    /// Pointer width of the traced process, in bits.
    pub pointer_bits: u32,
    /// CLOCK_MONOTONIC and CLOCK_REALTIME read together when the file was opened.
    pub start_mono_ns: u64,
    pub start_real_ns: u64,
    /// The CUPTI library used, and how it was chosen.
    pub cupti_path: String,
    pub cupti_source: String,
    /// `cuptiGetVersion`.
    pub cupti_api_version: u32,
    /// Major version of the CUDA runtime the process loaded (0 when none was seen).
    pub cuda_runtime_major: u32,
    /// Path of the CUDA runtime library the process loaded, if any.
    pub cuda_runtime_path: String,
    /// How the collector was started (`injection`, `constructor`, ...).
    pub started_by: String,
    /// `GPUTRACE_*` settings in force.
    pub options: Vec<(String, String)>,
    /// What the file holds: empty for a process's trace, [`META_KIND_ENVIRONMENT`] for an
    /// environment file. Left out of the JSON when empty (so a process trace's metadata
    /// reads as before); readers that predate it ignore it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
}

/// [`Meta::kind`] of an environment file: the facts and NVML samples (tags 25-28) that
/// `gputrace run` or `gputrace attach` recorded from their own process while the job
/// ran, written beside the job's traces. Its `pid` and `host` are the `gputrace`
/// command's; it has no GPU activity of its own. Readers give its events to the process
/// traces of the same host and time (the analyzer: `env_merge`).
pub const META_KIND_ENVIRONMENT: &str = "environment";

impl Meta {
    /// Whether this is an environment file rather than a process's trace.
    pub fn is_environment(&self) -> bool {
        self.kind == META_KIND_ENVIRONMENT
    }
}

/// Where a memory copy's host side lives, as CUPTI reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[repr(u8)]
pub enum MemKind {
    Unknown = 0,
    Pageable = 1,
    Pinned = 2,
    Device = 3,
    Array = 4,
    Managed = 5,
    DeviceStatic = 6,
    ManagedStatic = 7,
}

impl MemKind {
    pub fn from_u8(v: u8) -> MemKind {
        match v {
            1 => MemKind::Pageable,
            2 => MemKind::Pinned,
            3 => MemKind::Device,
            4 => MemKind::Array,
            5 => MemKind::Managed,
            6 => MemKind::DeviceStatic,
            7 => MemKind::ManagedStatic,
            _ => MemKind::Unknown,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            MemKind::Unknown => "unknown",
            MemKind::Pageable => "pageable",
            MemKind::Pinned => "pinned",
            MemKind::Device => "device",
            MemKind::Array => "array",
            MemKind::Managed => "managed",
            MemKind::DeviceStatic => "device_static",
            MemKind::ManagedStatic => "managed_static",
        }
    }
}

/// Direction of a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[repr(u8)]
pub enum CopyKind {
    Unknown = 0,
    HtoD = 1,
    DtoH = 2,
    HtoA = 3,
    AtoH = 4,
    AtoA = 5,
    AtoD = 6,
    DtoA = 7,
    DtoD = 8,
    HtoH = 9,
    PtoP = 10,
}

impl CopyKind {
    pub fn from_u8(v: u8) -> CopyKind {
        use CopyKind::*;
        match v {
            1 => HtoD,
            2 => DtoH,
            3 => HtoA,
            4 => AtoH,
            5 => AtoA,
            6 => AtoD,
            7 => DtoA,
            8 => DtoD,
            9 => HtoH,
            10 => PtoP,
            _ => Unknown,
        }
    }
    pub fn name(self) -> &'static str {
        use CopyKind::*;
        match self {
            Unknown => "unknown",
            HtoD => "HtoD",
            DtoH => "DtoH",
            HtoA => "HtoA",
            AtoH => "AtoH",
            AtoA => "AtoA",
            AtoD => "AtoD",
            DtoA => "DtoA",
            DtoD => "DtoD",
            HtoH => "HtoH",
            PtoP => "PtoP",
        }
    }
}

pub const MEMCPY_FLAG_ASYNC: u8 = 1;

/// What a host-side synchronisation waited for (CUPTI SYNCHRONIZATION record).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum SyncKind {
    Unknown = 0,
    EventSynchronize = 1,
    StreamWaitEvent = 2,
    StreamSynchronize = 3,
    ContextSynchronize = 4,
}

impl SyncKind {
    pub fn from_u8(v: u8) -> SyncKind {
        match v {
            1 => SyncKind::EventSynchronize,
            2 => SyncKind::StreamWaitEvent,
            3 => SyncKind::StreamSynchronize,
            4 => SyncKind::ContextSynchronize,
            _ => SyncKind::Unknown,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            SyncKind::Unknown => "unknown",
            SyncKind::EventSynchronize => "event_synchronize",
            SyncKind::StreamWaitEvent => "stream_wait_event",
            SyncKind::StreamSynchronize => "stream_synchronize",
            SyncKind::ContextSynchronize => "context_synchronize",
        }
    }
}

pub const MEMORY_OP_ALLOC: u8 = 1;
pub const MEMORY_OP_FREE: u8 = 2;

/// API domain of a host call.
pub const DOMAIN_RUNTIME: u8 = 1;
pub const DOMAIN_DRIVER: u8 = 2;

/// Collector states, for [`Event::State`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum CollectorState {
    /// Recording GPU activity.
    Tracing = 1,
    /// Not seeing GPU activity (another CUPTI user, CUPTI failed, ...): a blind window.
    Blind = 2,
    /// Collection stopped (end of trace or of a window).
    Stopped = 3,
    /// Preloaded, recording nothing.
    Dormant = 4,
}

impl CollectorState {
    pub fn from_u8(v: u8) -> Option<CollectorState> {
        match v {
            1 => Some(CollectorState::Tracing),
            2 => Some(CollectorState::Blind),
            3 => Some(CollectorState::Stopped),
            4 => Some(CollectorState::Dormant),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            CollectorState::Tracing => "tracing",
            CollectorState::Blind => "blind",
            CollectorState::Stopped => "stopped",
            CollectorState::Dormant => "dormant",
        }
    }
}

codes! {
    /// Where dropped records were lost ([`Event::Dropped`]'s `source`), by name.
    fn drop_source_name, other "unknown" {
        DROP_CUPTI = 1 => "cupti",
        DROP_RING = 2 => "ring",
        DROP_BUFFER_POOL = 3 => "buffer_pool",
        /// Host samples the writer did not take in time (format 2.1).
        DROP_HOST_SAMPLES = 4 => "host_samples",
    }
}

// ---------------------------------------------------------------------------------
// Host-side events from the symbol hooks (libgputrace's own exports of CUDA runtime,
// NCCL and NVTX entry points). They carry what CUPTI does not see, or everything when
// CUPTI is blind.

/// How a copy's host memory was classified: the pinned-memory registry the hooks keep
/// from cudaHostAlloc / cudaMallocHost / cudaHostRegister and their frees.
pub const CLASS_SOURCE_REGISTRY: u8 = 1;

/// [`HostCopy::flags`]: CUPTI's runtime callbacks recorded this same call as an
/// [`Api`] event (same thread, its interval inside this one); the `HostCopy` then only
/// adds the host memory classification and must not be counted as a second call.
pub const HOSTCOPY_FLAG_CUPTI_API: u8 = 1;
/// [`HostCopy::flags`]: an asynchronous API (`cudaMemcpyAsync`, ...).
pub const HOSTCOPY_FLAG_ASYNC: u8 = 2;

/// [`HostCopy::api`] values.
pub const HOSTCOPY_MEMCPY: u8 = 1;
pub const HOSTCOPY_MEMCPY_ASYNC: u8 = 2;
pub const HOSTCOPY_MEMCPY_2D: u8 = 3;
pub const HOSTCOPY_MEMCPY_2D_ASYNC: u8 = 4;
pub const HOSTCOPY_MEMCPY_PEER: u8 = 5;
pub const HOSTCOPY_MEMCPY_PEER_ASYNC: u8 = 6;

/// The CUDA runtime function a [`HostCopy::api`] value names.
pub fn hostcopy_api_name(api: u8) -> &'static str {
    match api {
        HOSTCOPY_MEMCPY => "cudaMemcpy",
        HOSTCOPY_MEMCPY_ASYNC => "cudaMemcpyAsync",
        HOSTCOPY_MEMCPY_2D => "cudaMemcpy2D",
        HOSTCOPY_MEMCPY_2D_ASYNC => "cudaMemcpy2DAsync",
        HOSTCOPY_MEMCPY_PEER => "cudaMemcpyPeer",
        HOSTCOPY_MEMCPY_PEER_ASYNC => "cudaMemcpyPeerAsync",
        _ => "unknown",
    }
}

/// [`HostCall::call`] values: runtime calls recorded by the symbol hooks while CUPTI's
/// callbacks are not recording them (CUPTI off, failed, or blind).
pub const HOSTCALL_STREAM_SYNCHRONIZE: u16 = 1;
pub const HOSTCALL_DEVICE_SYNCHRONIZE: u16 = 2;
pub const HOSTCALL_EVENT_SYNCHRONIZE: u16 = 3;
pub const HOSTCALL_STREAM_WAIT_EVENT: u16 = 4;
pub const HOSTCALL_MEMSET: u16 = 5;
pub const HOSTCALL_MEMSET_ASYNC: u16 = 6;
pub const HOSTCALL_LAUNCH_KERNEL_STUB: u16 = 7;
pub const HOSTCALL_LAUNCH_KERNEL: u16 = 8;
pub const HOSTCALL_LAUNCH_KERNEL_EXC: u16 = 9;
pub const HOSTCALL_GRAPH_LAUNCH: u16 = 10;

/// What a [`HostCall`] does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostCallClass {
    Sync,
    Memset,
    Launch,
    Unknown,
}

/// Name and class of a [`HostCall::call`] value.
pub fn hostcall_info(call: u16) -> (&'static str, HostCallClass) {
    use HostCallClass::*;
    match call {
        HOSTCALL_STREAM_SYNCHRONIZE => ("cudaStreamSynchronize", Sync),
        HOSTCALL_DEVICE_SYNCHRONIZE => ("cudaDeviceSynchronize", Sync),
        HOSTCALL_EVENT_SYNCHRONIZE => ("cudaEventSynchronize", Sync),
        HOSTCALL_STREAM_WAIT_EVENT => ("cudaStreamWaitEvent", Sync),
        HOSTCALL_MEMSET => ("cudaMemset", Memset),
        HOSTCALL_MEMSET_ASYNC => ("cudaMemsetAsync", Memset),
        HOSTCALL_LAUNCH_KERNEL_STUB => ("__cudaLaunchKernel", Launch),
        HOSTCALL_LAUNCH_KERNEL => ("cudaLaunchKernel", Launch),
        HOSTCALL_LAUNCH_KERNEL_EXC => ("cudaLaunchKernelExC", Launch),
        HOSTCALL_GRAPH_LAUNCH => ("cudaGraphLaunch", Launch),
        _ => ("unknown", Unknown),
    }
}

codes! {
    /// The CUDA runtime function a [`HostAlloc::op`] value names (the pinned host memory
    /// calls).
    fn hostalloc_op_name, other "unknown" {
        HOSTALLOC_HOST_ALLOC = 1 => "cudaHostAlloc",
        HOSTALLOC_MALLOC_HOST = 2 => "cudaMallocHost",
        HOSTALLOC_HOST_REGISTER = 3 => "cudaHostRegister",
        HOSTALLOC_FREE_HOST = 4 => "cudaFreeHost",
        HOSTALLOC_HOST_UNREGISTER = 5 => "cudaHostUnregister",
    }
}

codes! {
    /// The NCCL function a [`Nccl::op`] value names.
    fn nccl_op_name, other "unknown" {
        NCCL_ALL_REDUCE = 1 => "ncclAllReduce",
        NCCL_REDUCE = 2 => "ncclReduce",
        NCCL_BROADCAST = 3 => "ncclBroadcast",
        NCCL_ALL_GATHER = 4 => "ncclAllGather",
        NCCL_REDUCE_SCATTER = 5 => "ncclReduceScatter",
        NCCL_SEND = 6 => "ncclSend",
        NCCL_RECV = 7 => "ncclRecv",
        NCCL_GROUP_START = 8 => "ncclGroupStart",
        NCCL_GROUP_END = 9 => "ncclGroupEnd",
    }
}

/// [`Nccl::datatype`] for calls without one (group start/end).
pub const NCCL_NO_DATATYPE: u8 = 0xFF;

/// Size in bytes and name of an `ncclDataType_t` (0 bytes when unknown).
pub fn nccl_datatype(dt: u8) -> (u64, &'static str) {
    match dt {
        0 => (1, "int8"),
        1 => (1, "uint8"),
        2 => (4, "int32"),
        3 => (4, "uint32"),
        4 => (8, "int64"),
        5 => (8, "uint64"),
        6 => (2, "float16"),
        7 => (4, "float32"),
        8 => (8, "float64"),
        9 => (2, "bfloat16"),
        10 => (1, "float8e4m3"),
        11 => (1, "float8e5m2"),
        NCCL_NO_DATATYPE => (0, ""),
        _ => (0, "unknown"),
    }
}

/// [`Nccl::redop`]: no reduction (broadcast, gathers, send/recv, groups).
pub const NCCL_NO_REDOP: u8 = 0xFF;
/// [`Nccl::redop`]: a reduction made with ncclRedOpCreatePreMulSum (a dynamic op id).
pub const NCCL_CUSTOM_REDOP: u8 = 0xFE;

/// Name of an [`Nccl::redop`] value.
pub fn nccl_redop_name(op: u8) -> &'static str {
    match op {
        0 => "sum",
        1 => "prod",
        2 => "max",
        3 => "min",
        4 => "avg",
        NCCL_CUSTOM_REDOP => "custom",
        NCCL_NO_REDOP => "",
        _ => "unknown",
    }
}

codes! {
    /// The NCCL function an [`NcclComm::op`] value names.
    fn nccl_comm_op_name, other "unknown" {
        NCCL_COMM_INIT_RANK = 1 => "ncclCommInitRank",
        NCCL_COMM_INIT_RANK_CONFIG = 2 => "ncclCommInitRankConfig",
        NCCL_COMM_INIT_ALL = 3 => "ncclCommInitAll",
        NCCL_COMM_SPLIT = 4 => "ncclCommSplit",
        NCCL_COMM_DESTROY = 5 => "ncclCommDestroy",
        NCCL_COMM_ABORT = 6 => "ncclCommAbort",
        NCCL_COMM_INIT_RANK_SCALABLE = 7 => "ncclCommInitRankScalable",
    }
}

codes! {
    /// Name of an [`Nvtx::kind`] value.
    fn nvtx_kind_name, other "unknown" {
        NVTX_PUSH = 1 => "push",
        NVTX_POP = 2 => "pop",
        NVTX_START = 3 => "start",
        NVTX_END = 4 => "end",
        NVTX_MARK = 5 => "mark",
    }
}

/// [`Nvtx::flags`]: the text was cut (only its first bytes are kept).
pub const NVTX_FLAG_TRUNCATED: u8 = 1;

// ---------------------------------------------------------------------------------
// Host samples: what the CPU side of the job was doing, read from /proc by the
// library's sampler while a trace window is open (never in dormant mode).

/// [`ThreadCpu::state`] when the state was not read.
pub const STATE_UNKNOWN: u8 = 0;

/// [`TaskWait::syscall`] of a task blocked outside any system call (`/proc/.../syscall`
/// reads `-1`): in a page fault, paging in code or a memory-mapped file, as a rule.
pub const SYSCALL_NONE: u32 = u32::MAX - 1;

/// [`TaskWait::flags`]: `tid` is a child process (a DataLoader worker), not a thread.
pub const TASK_WAIT_CHILD: u8 = 1;
/// [`TaskWait::flags`]: the thread is a Python thread (its stack is sampled).
pub const TASK_WAIT_PYTHON: u8 = 2;

/// [`ProcSample::flags`]: the sample is a thread of the traced process (`pid` is its
/// tid, `ppid` the traced process); CPU time from its schedstat, no I/O counters.
pub const PROC_FLAG_THREAD: u8 = 1;
/// [`ProcSample::flags`]: the traced process itself.
pub const PROC_FLAG_SELF: u8 = 2;
/// [`ProcSample::flags`]: `/proc/PID/io` could not be read (the I/O fields are 0).
pub const PROC_FLAG_NO_IO: u8 = 4;

/// [`MachineSample::flags`]: the PSI fields were read (`/proc/pressure/*`).
pub const MACHINE_FLAG_PSI: u8 = 1;
/// [`MachineSample::flags`]: the cgroup fields were read (`cpu.stat` of cgroup v2).
pub const MACHINE_FLAG_CGROUP: u8 = 2;

impl CpuLimits {
    /// CPUs the job can use at once: the affinity mask, capped by the cgroup quota
    /// (rounded up), as a fraction where the quota is one.
    pub fn cpus_available(&self) -> f64 {
        let mut n = if self.affinity_cpus > 0 {
            self.affinity_cpus
        } else {
            self.online_cpus
        } as f64;
        if self.quota_us > 0 && self.period_us > 0 {
            n = n.min(self.quota_us as f64 / self.period_us as f64);
        }
        n
    }
}

// The environment: facts read once per trace, and NVML samples taken while a trace
// window is open (tags 25-28). Numbers NVML could not give are [`ENV_NA`] (or
// [`ENV_NA64`]); the codec stores every such field as value + 1, so "not available"
// costs one byte.

/// A 32-bit environment value NVML did not give (unsupported, not permitted).
pub const ENV_NA: u32 = u32::MAX;
/// A 64-bit environment value NVML did not give.
pub const ENV_NA64: u64 = u64::MAX;
/// [`Fact::device`] of a fact about the process or the host rather than one GPU.
pub const FACT_HOST: u32 = u32::MAX;

/// `nvmlClocksEventReasons` bits (the "throttle reasons" of older NVML versions).
pub const CLOCK_REASON_GPU_IDLE: u64 = 0x1;
pub const CLOCK_REASON_APP_SETTING: u64 = 0x2;
pub const CLOCK_REASON_SW_POWER_CAP: u64 = 0x4;
pub const CLOCK_REASON_HW_SLOWDOWN: u64 = 0x8;
pub const CLOCK_REASON_SYNC_BOOST: u64 = 0x10;
pub const CLOCK_REASON_SW_THERMAL: u64 = 0x20;
pub const CLOCK_REASON_HW_THERMAL: u64 = 0x40;
pub const CLOCK_REASON_HW_POWER_BRAKE: u64 = 0x80;
pub const CLOCK_REASON_DISPLAY_CLOCKS: u64 = 0x100;

/// Reasons that mean the clocks were held down against the work's will (power,
/// heat, hardware slowdown): idle, application settings and display clocks are not.
pub const CLOCK_REASONS_THROTTLE: u64 = CLOCK_REASON_SW_POWER_CAP
    | CLOCK_REASON_HW_SLOWDOWN
    | CLOCK_REASON_SW_THERMAL
    | CLOCK_REASON_HW_THERMAL
    | CLOCK_REASON_HW_POWER_BRAKE;

/// Names of the bits set in a clock event reasons mask, lowest bit first.
pub fn clock_reason_names(mask: u64) -> Vec<&'static str> {
    const NAMES: [(u64, &str); 9] = [
        (CLOCK_REASON_GPU_IDLE, "gpu_idle"),
        (CLOCK_REASON_APP_SETTING, "applications_clocks_setting"),
        (CLOCK_REASON_SW_POWER_CAP, "sw_power_cap"),
        (CLOCK_REASON_HW_SLOWDOWN, "hw_slowdown"),
        (CLOCK_REASON_SYNC_BOOST, "sync_boost"),
        (CLOCK_REASON_SW_THERMAL, "sw_thermal_slowdown"),
        (CLOCK_REASON_HW_THERMAL, "hw_thermal_slowdown"),
        (CLOCK_REASON_HW_POWER_BRAKE, "hw_power_brake_slowdown"),
        (CLOCK_REASON_DISPLAY_CLOCKS, "display_clock_setting"),
    ];
    if mask == ENV_NA64 {
        return Vec::new();
    }
    NAMES
        .iter()
        .filter(|(bit, _)| mask & bit != 0)
        .map(|(_, n)| *n)
        .collect()
}

/// [`GpuProcess::flags`]: NVML listed the process as a compute process on the GPU.
pub const GPU_PROC_LISTED: u8 = 1;
/// [`GpuProcess::flags`]: NVML had utilisation samples of the process since the last
/// sample (`sm_pct`, `mem_pct` are their mean).
pub const GPU_PROC_UTIL: u8 = 2;
/// [`GpuProcess::flags`]: the process is the traced process itself.
pub const GPU_PROC_SELF: u8 = 4;

/// [`GpuEvent::kind`] values.
pub const GPU_EVENT_XID: u8 = 1;
/// Corrected (single-bit) ECC errors: `data` is how many more since the last sample.
pub const GPU_EVENT_ECC_CORRECTED: u8 = 2;
/// Uncorrected (double-bit) ECC errors: `data` is how many more since the last sample.
pub const GPU_EVENT_ECC_UNCORRECTED: u8 = 3;

/// Name of a [`GpuEvent::kind`] value.
pub fn gpu_event_name(kind: u8) -> &'static str {
    match kind {
        GPU_EVENT_XID => "xid",
        GPU_EVENT_ECC_CORRECTED => "ecc_corrected",
        GPU_EVENT_ECC_UNCORRECTED => "ecc_uncorrected",
        _ => "unknown",
    }
}

// Python call sites (format 2.2): the Python stack of the thread that made a host call
// that matters (a synchronising call, a copy, an allocation, an NCCL call), interned.

/// The most frames a [`PyStack`] holds (`GPUTRACE_PYSTACK`'s largest setting).
pub const PYSTACK_MAX_FRAMES: u32 = 16;

/// A kernel's launch shape (name, grid, block, shared memory, registers, graph), defined
/// once per file; compact kernel records refer to it by id. Internal to the codec:
/// readers see only [`Event::Kernel`].
pub const TAG_KERNEL_SHAPE: u8 = 19;
/// A kernel record that refers to a [`TAG_KERNEL_SHAPE`] (what writers emit).
pub const TAG_KERNEL_COMPACT: u8 = 20;

// The event table: every kind of event, once. Fields are listed in the order they are
// written; a field appended to an existing kind goes last, as `Opt<codec>` (older
// bodies end before it). Codecs: see `table.rs`. Docs: docs/adding-an-event-kind.md.
/// [`CounterSample::source`]: CUPTI PM sampling inside the process (older traces).
pub const COUNTER_SOURCE_PM: u8 = 0;
/// [`CounterSample::source`]: NVML GPM, read from outside the job.
pub const COUNTER_SOURCE_GPM: u8 = 1;

impl CounterSample {
    /// Its percentages (hundredths, [`ENV_NA`] where not given), in this order: SM
    /// active, occupancy, tensor (any), DRAM, FP64, FP32, FP16, integer, tensor DFMA,
    /// HMMA, IMMA.
    pub fn percentages(&self) -> [u32; 11] {
        [
            self.sm_active,
            self.occupancy,
            self.tensor_active,
            self.dram,
            self.fp64_active,
            self.fp32_active,
            self.fp16_active,
            self.integer_active,
            self.tensor_dfma,
            self.tensor_hmma,
            self.tensor_imma,
        ]
    }

    /// The source as a word: `pm`, `gpm`.
    pub fn source_name(&self) -> &'static str {
        match self.source {
            COUNTER_SOURCE_PM => "pm",
            COUNTER_SOURCE_GPM => "gpm",
            _ => "unknown",
        }
    }
}

/// The report was made as the process ended (a signal, an abort, an exit) rather than
/// by the watchdog's threshold: `outstanding` operations never completed.
pub const STALL_END: u8 = 1;
/// The stall is over: GPU work completed again at `ts` (no ops or threads follow).
pub const STALL_RESOLVED: u8 = 2;
/// A forced CUPTI flush was made for this report (incomplete records were asked for).
pub const STALL_FORCED_FLUSH: u8 = 4;

codes! {
    /// What kind of GPU operation a [`StallOp`] is, by name.
    fn stall_op_name, other "other" {
        STALL_OP_OTHER = 0 => "other",
        STALL_OP_KERNEL = 1 => "kernel",
        STALL_OP_MEMCPY = 2 => "memcpy",
        STALL_OP_MEMSET = 3 => "memset",
    }
}

/// The operation was seen at its launch (the API callback).
pub const STALL_OP_FLAG_LAUNCH: u8 = 1;
/// CUPTI handed over an incomplete record of it on a forced flush (its `start` is from
/// that record when non-zero).
pub const STALL_OP_FLAG_INCOMPLETE: u8 = 2;

// ---------------------------------------------------------------------------------
// How a process ended: the `reason` of the last `Stopped` [`Event::State`].

/// The process exited (`exit`, a return from `main`, the library unloaded).
pub const END_EXIT: &str = "exit";

/// The end reason for a process that ended through `call` (`_exit`, `_Exit`,
/// `quick_exit`: no exit handlers run) with `status`: `_exit 3`. The library finished
/// the trace in the call, before the process went.
pub fn end_reason_call(call: &str, status: i32) -> String {
    format!("{call} {status}")
}

/// The end reason for a process ended by signal `sig`: `signal SIGTERM 15`. Written
/// when a terminating signal with its default action (or a crash, or `abort`) ended the
/// process after the library flushed what it had.
pub fn end_reason_signal(sig: i32) -> String {
    format!("signal {} {}", signal_name(sig), sig)
}

/// The signal (name, number) of an end reason written by [`end_reason_signal`].
pub fn end_signal(reason: &str) -> Option<(&str, i32)> {
    let mut w = reason.strip_prefix("signal ")?.split(' ');
    let name = w.next()?;
    let sig = w.next()?.parse().ok()?;
    Some((name, sig))
}

/// The conventional name of a Linux signal (`SIG?` when not one of the common ones).
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        _ => "SIG?",
    }
}

/// Minor version: additions that old readers can skip (new event tags). Kept beside the
/// event table: a new kind bumps it with a line saying what it added.
/// 1.1: symbol-hook events (HostCopy, HostCall, HostAlloc, Nccl, NcclComm, Nvtx).
/// 2.1: host samples (ThreadCpu, ProcSample, MachineSample, CpuLimits: tags 21-24) and
/// environment events (Fact, GpuSample, GpuProcess, GpuEvent: tags 25-28).
/// 2.2: Python call sites (PyStack, CallSite: tags 29-30).
/// 2.3: GPU hardware counter samples (CounterSample: tag 31) and Python stack samples
/// (PySample: tag 32).
/// 2.4: stall reports (Stall, StallOp, StallThread: tags 33-35); the last `Stopped`
/// state's reason names the signal that ended the process (`signal SIGTERM 15`).
/// 2.5: an `Api` event's `ptr`: the pointer an allocation returned or a free was given
/// (appended, left off the other calls' bodies).
/// 2.6: chunks numbered and the last one marked (the chunk header's `flags` and `seq`,
/// zeros before): readers of 2.6 set aside replayed, reordered, foreign and trailing
/// chunks; older readers do not read those bytes.
pub const VERSION_MINOR: u16 = 6;

crate::define_events! {
    structs {
        /// Properties of a device, written once per device.
        Device(TAG_DEVICE = 3, "device") {
            id: u32 => V,
            /// Interned name.
            name: u32 => Sid,
            sm_count: u32 => V,
            max_blocks_per_sm: u32 => V,
            max_threads_per_sm: u32 => V,
            max_warps_per_sm: u32 => V,
            global_memory: u64 => V,
            cc_major: u32 => V,
            cc_minor: u32 => V,
            max_regs_per_sm: u32 => V,
            max_smem_per_sm: u32 => V,
        }
        /// A kernel execution (CUPTI CONCURRENT_KERNEL record). The table gives the
        /// self-contained form of format 1.0 ([`TAG_KERNEL`]), which readers still
        /// read; writers intern the launch shape instead ([`TAG_KERNEL_SHAPE`],
        /// [`TAG_KERNEL_COMPACT`], in the codec).
        Kernel(TAG_KERNEL = 4, "kernel") {
            start: u64 => Ts,
            end: u64 => End,
            device: u32 => V,
            stream: u32 => V,
            corr: u32 => Corr,
            /// Interned mangled name, see [`Event::Str`].
            name: u32 => Sid,
            grid: [u32; 3] => Arr,
            block: [u32; 3] => Arr,
            static_smem: u32 => V,
            dynamic_smem: u32 => V,
            registers: u32 => V,
            /// Non-zero when the kernel ran as part of a CUDA graph.
            graph_id: u32 => V,
            /// The CUDA graph node that launched it (CUPTI `graphNodeId`, the same node
            /// in every replay); [`ENV_NA64`] when it did not run in a graph. Added in
            /// 2.x for graph replays; written in the kernel's shape.
            graph_node_id: u64 => Opt<Na> = ENV_NA64,
        }
        /// A memory copy (CUPTI MEMCPY record).
        Memcpy(TAG_MEMCPY = 5, "memcpy") {
            start: u64 => Ts,
            end: u64 => End,
            device: u32 => V,
            stream: u32 => V,
            corr: u32 => Corr,
            bytes: u64 => V,
            /// [`CopyKind`] as u8.
            copy_kind: u8 => U8,
            /// [`MemKind`] as u8.
            src_kind: u8 => U8,
            dst_kind: u8 => U8,
            /// Bit 0: the copy was issued by an asynchronous API call.
            flags: u8 => U8,
        }
        /// A memset on the device (CUPTI MEMSET record).
        Memset(TAG_MEMSET = 6, "memset") {
            start: u64 => Ts,
            end: u64 => End,
            device: u32 => V,
            stream: u32 => V,
            corr: u32 => Corr,
            bytes: u64 => V,
            value: u32 => V,
            mem_kind: u8 => U8,
            flags: u8 => U8,
        }
        /// A synchronisation (CUPTI SYNCHRONIZATION record): host time spent waiting.
        Sync(TAG_SYNC = 7, "sync") {
            start: u64 => Ts,
            end: u64 => End,
            device: u32 => V,
            /// u32::MAX when the sync is not tied to a stream.
            stream: u32 => V,
            corr: u32 => Corr,
            /// [`SyncKind`] as u8.
            kind: u8 => U8,
        }
        /// A device memory allocation or free (CUPTI MEMORY2 record).
        Memory(TAG_MEMORY = 8, "memory") {
            ts: u64 => Ts,
            device: u32 => V,
            corr: u32 => Corr,
            address: u64 => V,
            bytes: u64 => V,
            /// 1 = allocation, 2 = release.
            op: u8 => U8,
            mem_kind: u8 => U8,
        }
        /// Host side of a CUDA API call, from a CUPTI callback: who called, when, and
        /// the correlation id that links the call to the GPU work it produced.
        Api(TAG_API = 9, "api") {
            start: u64 => Ts,
            end: u64 => End,
            tid: u32 => V,
            corr: u32 => Corr,
            /// [`DOMAIN_RUNTIME`] or [`DOMAIN_DRIVER`].
            domain: u8 => U8,
            /// The CUPTI callback id (`CUPTI_RUNTIME_TRACE_CBID_*` /
            /// `CUPTI_DRIVER_TRACE_CBID_*`).
            cbid: u32 => V,
            /// Interned API function name.
            name: u32 => Sid,
            /// Bytes moved, for copies and memsets; 0 otherwise.
            bytes: u64 => V,
            /// Copy direction for copies (cudaMemcpyKind), 0 otherwise.
            arg: u32 => V,
            /// Return code of the call.
            result: u32 => V,
            /// The pointer an allocation returned (`cudaMalloc`, `cudaMallocHost`,
            /// `cudaHostAlloc`, when it succeeded) or a free was given (`cudaFree`,
            /// `cudaFreeHost`); [`ENV_NA64`] for other calls, a NULL pointer, and in
            /// traces before 2.5. Added in 2.5; left off the body when not set, so the
            /// other calls are written as before.
            ptr: u64 => Trail<Na> = ENV_NA64,
        }
        /// A host-side copy call seen by the symbol hooks, with its host memory
        /// classified.
        HostCopy(TAG_HOST_COPY = 13, "host_copy") {
            start: u64 => Ts,
            end: u64 => End,
            tid: u32 => V,
            /// `HOSTCOPY_MEMCPY*`.
            api: u8 => U8,
            /// [`CopyKind`] as u8 (from the call's cudaMemcpyKind; `PtoP` for peer
            /// copies, `Unknown` for cudaMemcpyDefault).
            copy_kind: u8 => U8,
            /// [`MemKind`] as u8 of the host side: `Pinned`, `Pageable`, `Device` (no
            /// host side) or `Unknown` (cudaMemcpyDefault with no registered pointer).
            host_kind: u8 => U8,
            /// `CLASS_SOURCE_*`: where `host_kind` comes from.
            source: u8 => U8,
            /// `HOSTCOPY_FLAG_*`.
            flags: u8 => U8,
            /// Bytes moved (width x height for 2D copies).
            bytes: u64 => V,
            /// The `cudaStream_t` handle (0 = legacy default stream, or a synchronous
            /// call).
            stream: u64 => V,
            dst: u64 => V,
            src: u64 => V,
            /// Peer copies: the devices; `u32::MAX` otherwise.
            dst_device: u32 => Dev,
            src_device: u32 => Dev,
            /// The call's return code (cudaError_t).
            result: u32 => V,
        }
        /// A CUDA runtime call (sync, memset, launch) seen by the symbol hooks.
        ///
        /// Arguments by call: syncs: `stream` (StreamSynchronize, StreamWaitEvent),
        /// `arg0` = event (EventSynchronize, StreamWaitEvent), `arg1` = flags
        /// (StreamWaitEvent). Memsets: `arg0` = bytes, `arg1` = device pointer, `arg2`
        /// = value. Launches: `arg0` = kernel / function handle (graph exec for
        /// cudaGraphLaunch), `arg1` = blocks in the grid, `arg2` = threads per block.
        HostCall(TAG_HOST_CALL = 14, "host_call") {
            start: u64 => Ts,
            end: u64 => End,
            tid: u32 => V,
            /// `HOSTCALL_*`.
            call: u16 => V,
            stream: u64 => V,
            arg0: u64 => V,
            arg1: u64 => V,
            arg2: u64 => V,
            /// The call's return code (cudaError_t).
            result: u32 => V,
        }
        /// Pinned host memory made, registered, freed or unregistered.
        HostAlloc(TAG_HOST_ALLOC = 15, "host_alloc") {
            start: u64 => Ts,
            end: u64 => End,
            tid: u32 => V,
            /// `HOSTALLOC_*`.
            op: u8 => U8,
            ptr: u64 => V,
            /// Size asked for; for frees and unregisters, the size the registry had for
            /// `ptr` (0 if it had none).
            bytes: u64 => V,
            /// The call's flags argument (cudaHostAlloc, cudaHostRegister), else 0.
            flags: u32 => V,
            /// The call's return code (cudaError_t).
            result: u32 => V,
        }
        /// One NCCL call (a collective, point-to-point, or group bracket), from the
        /// host side.
        Nccl(TAG_NCCL = 16, "nccl") {
            start: u64 => Ts,
            end: u64 => End,
            tid: u32 => V,
            /// `NCCL_*` op.
            op: u8 => U8,
            /// `ncclDataType_t` ([`NCCL_NO_DATATYPE`] for groups).
            datatype: u8 => U8,
            /// `ncclRedOp_t` (0-4), [`NCCL_CUSTOM_REDOP`], or [`NCCL_NO_REDOP`].
            redop: u8 => U8,
            /// The `cudaStream_t` handle the operation was queued on.
            stream: u64 => V,
            /// Element count as passed (sendcount for AllGather, recvcount for
            /// ReduceScatter).
            count: u64 => V,
            /// `count` x the datatype's size.
            bytes: u64 => V,
            /// Root (Reduce, Broadcast) or peer (Send, Recv); -1 otherwise.
            peer_or_root: i32 => Zz,
            /// Communicator id, the same on every rank (0 = not known, e.g. made before
            /// tracing started or by a call the hooks do not see).
            comm_id: u64 => V,
            /// This process's rank in the communicator and its size (-1 when not known).
            rank: i32 => Zz,
            nranks: i32 => Zz,
            /// Per-communicator sequence number of this call, from 1: the n-th
            /// collective of a communicator on one rank matches the n-th on every other
            /// rank.
            seq: u64 => V,
            /// The call's return code (ncclResult_t).
            result: u32 => V,
        }
        /// A communicator made or ended. `ncclCommInitAll` gives one event per device.
        NcclComm(TAG_NCCL_COMM = 17, "nccl_comm") {
            start: u64 => Ts,
            end: u64 => End,
            tid: u32 => V,
            /// `NCCL_COMM_*`.
            op: u8 => U8,
            /// The `ncclComm_t` handle (process-local).
            comm: u64 => V,
            /// Communicator id, the same on every rank: a hash of the ncclUniqueId; for
            /// a split, of the parent's id and the color. 0 when not known.
            comm_id: u64 => V,
            /// Splits: the parent communicator's id; 0 otherwise.
            parent_id: u64 => V,
            rank: i32 => Zz,
            nranks: i32 => Zz,
            /// Splits: the color (and 0 otherwise).
            color: i32 => Zz,
            /// The call's return code (ncclResult_t).
            result: u32 => V,
        }
        /// One NVTX call (libgputrace is the NVTX injection library).
        Nvtx(TAG_NVTX = 18, "nvtx") {
            ts: u64 => Ts,
            tid: u32 => V,
            /// `NVTX_*` kind.
            kind: u8 => U8,
            /// `NVTX_FLAG_*`.
            flags: u8 => U8,
            /// Start / end: the range id (the same on both, which may be on different
            /// threads). Push: the nesting level of the new range (0 = outermost); pop:
            /// the level of the range it ends. Mark: 0.
            id: u64 => V,
            /// Interned text (0 = none: pops, ends, marks without a message).
            text: u32 => Sid,
        }
        /// One thread's scheduler counters (`/proc/self/task/TID/schedstat`, and the
        /// state letter of its `stat`), sampled every few ms for the threads that
        /// issue CUDA work and the main thread, and, while one of them is blocked, for
        /// every other thread of the process. Counters are cumulative since the
        /// thread started: the difference between two samples of a thread is what it
        /// did in between.
        ThreadCpu(TAG_THREAD_CPU = 21, "thread_cpu") {
            ts: u64 => Ts,
            tid: u32 => V,
            /// Time on a CPU, ns (schedstat field 1).
            cpu_ns: u64 => V,
            /// Time runnable but waiting for a CPU (run queue), ns (schedstat field 2).
            wait_ns: u64 => V,
            /// Times the thread was switched onto a CPU (schedstat field 3): voluntary
            /// and involuntary context switches together.
            slices: u64 => V,
            /// Scheduler state letter (`R`, `S`, `D`, ...) as a byte; [`STATE_UNKNOWN`]
            /// if not read.
            state: u8 => U8,
        }
        /// One process of the traced process's tree (itself, its children such as
        /// DataLoader workers, and theirs) or one of its own threads, sampled every
        /// 50-100 ms from `/proc/PID/stat` and `/proc/PID/io`. Counters are cumulative.
        ProcSample(TAG_PROC_SAMPLE = 22, "proc_sample") {
            ts: u64 => Ts,
            pid: u32 => V,
            ppid: u32 => V,
            /// Interned `comm` (the kernel's 15-byte name).
            comm: u32 => Sid,
            /// `PROC_FLAG_*`.
            flags: u8 => U8,
            /// Scheduler state letter as a byte ([`STATE_UNKNOWN`] if not read).
            state: u8 => U8,
            /// Threads in the process (1 for a thread sample).
            threads: u32 => V,
            /// User + system CPU time, ns (whole process: all its threads; from clock
            /// ticks, so to 10 ms at USER_HZ 100).
            cpu_ns: u64 => V,
            /// Bytes passed to read()-like calls (`rchar`: files, pipes, sockets, page
            /// cache).
            rchar: u64 => V,
            /// Bytes fetched from storage (`read_bytes`) and sent to it (`write_bytes`).
            read_bytes: u64 => V,
            write_bytes: u64 => V,
        }
        /// The machine's CPU and I/O-wait counters, sampled with the process tree. All
        /// cumulative: `/proc/stat`'s aggregate line in ns summed over the CPUs, PSI
        /// stall totals in us, the job's cgroup CPU usage and throttled time in us.
        MachineSample(TAG_MACHINE_SAMPLE = 23, "machine_sample") {
            ts: u64 => Ts,
            /// user + nice + system + irq + softirq.
            busy_ns: u64 => V,
            idle_ns: u64 => V,
            iowait_ns: u64 => V,
            steal_ns: u64 => V,
            /// `MACHINE_FLAG_*`.
            flags: u8 => U8,
            /// `some` totals of /proc/pressure/cpu and /proc/pressure/io, `full` of io.
            psi_cpu_some_us: u64 => V,
            psi_io_some_us: u64 => V,
            psi_io_full_us: u64 => V,
            /// cgroup v2 `cpu.stat`: `usage_usec` and `throttled_usec`.
            cgroup_usage_us: u64 => V,
            cgroup_throttled_us: u64 => V,
        }
        /// The CPU resources the job may use, written once per trace when sampling
        /// starts.
        CpuLimits(TAG_CPU_LIMITS = 24, "cpu_limits") {
            ts: u64 => Ts,
            /// CPUs online on the machine.
            online_cpus: u32 => V,
            /// CPUs in the traced process's affinity mask.
            affinity_cpus: u32 => V,
            /// cgroup CPU quota per period (`cpu.max`, or v1 `cfs_quota_us`), us; 0 =
            /// no quota.
            quota_us: u64 => V,
            period_us: u64 => V,
            /// cgroup memory limit, bytes; 0 = none found.
            memory_limit: u64 => V,
            /// The sampler's periods, us: CUDA threads, and process tree / machine.
            thread_period_us: u32 => V,
            tree_period_us: u32 => V,
        }
        /// One fact about the environment, written once per trace: a key and a value,
        /// both interned (`driver_version` = `580.159.04`, `cuda_runtime_version` =
        /// `13.0.96`, `persistence_mode` = `on` for GPU 0, ...). The keys are listed in
        /// the `gputrace-env` crate (`facts.rs`).
        Fact(TAG_FACT = 25, "fact") {
            ts: u64 => Ts,
            /// The GPU (NVML index) the fact is about, or [`FACT_HOST`].
            device: u32 => Na = 0,
            key: u32 => Sid,
            value: u32 => Sid,
        }
        /// One NVML sample of one GPU. Fields NVML did not give are [`ENV_NA`] /
        /// [`ENV_NA64`].
        GpuSample(TAG_GPU_SAMPLE = 26, "gpu_sample") {
            ts: u64 => Ts,
            /// NVML device index.
            device: u32 => V,
            sm_clock_mhz: u32 => Na = ENV_NA,
            sm_clock_max_mhz: u32 => Na = ENV_NA,
            mem_clock_mhz: u32 => Na = ENV_NA,
            mem_clock_max_mhz: u32 => Na = ENV_NA,
            /// `CLOCK_REASON_*` bits in force when sampled.
            clock_reasons: u64 => Na = ENV_NA64,
            power_mw: u32 => Na = ENV_NA,
            /// The enforced power limit.
            power_limit_mw: u32 => Na = ENV_NA,
            temperature_c: u32 => Na = ENV_NA,
            /// nvidia-smi's GPU-Util and memory-util: share of the last sample period
            /// in which a kernel ran / device memory was read or written, in percent.
            gpu_util_pct: u32 => Na = ENV_NA,
            mem_util_pct: u32 => Na = ENV_NA,
            mem_used: u64 => Na = ENV_NA64,
            mem_total: u64 => Na = ENV_NA64,
            pcie_gen: u32 => Na = ENV_NA,
            pcie_gen_max: u32 => Na = ENV_NA,
            pcie_width: u32 => Na = ENV_NA,
            pcie_width_max: u32 => Na = ENV_NA,
            /// PCIe throughput in KB/s (NVML samples it over 20 ms; not every sample
            /// has it).
            pcie_tx_kbs: u32 => Na = ENV_NA,
            pcie_rx_kbs: u32 => Na = ENV_NA,
        }
        /// One process using a GPU, as NVML saw it at one sample.
        GpuProcess(TAG_GPU_PROCESS = 27, "gpu_process") {
            ts: u64 => Ts,
            device: u32 => V,
            /// As NVML reports it (the host's pid namespace).
            pid: u32 => V,
            /// Interned command name (`/proc/PID/comm`; 0 when not readable from here).
            name: u32 => Sid,
            /// Device memory the process holds ([`ENV_NA64`] when not known).
            used_memory: u64 => Na = ENV_NA64,
            /// Its share of the time SMs were busy / memory was accessed since the last
            /// sample, in percent ([`ENV_NA`] without `GPU_PROC_UTIL`).
            sm_pct: u32 => Na = ENV_NA,
            mem_pct: u32 => Na = ENV_NA,
            /// `GPU_PROC_*`.
            flags: u8 => U8,
        }
        /// An error the driver reported on a GPU: an Xid (`data` = the Xid number) or
        /// new ECC errors (`data` = how many).
        GpuEvent(TAG_GPU_EVENT = 28, "gpu_event") {
            ts: u64 => Ts,
            device: u32 => V,
            /// `GPU_EVENT_*`.
            kind: u8 => U8,
            data: u64 => V,
        }
        /// A Python stack, defined once per file before its first use: the innermost
        /// frames of the calling thread, innermost first (at most the library's depth
        /// setting).
        PyStack(TAG_PY_STACK = 29, "py_stack") {
            id: u32 => V,
            frames: Vec<PyFrame> => Frames,
        }
        /// Where a host call was made from: the host event of thread `tid` whose start
        /// is `ts` (an [`Api`], [`HostCall`], [`HostCopy`] or [`Nccl`] event, written
        /// just before this one) was called from Python stack `stack`.
        CallSite(TAG_CALL_SITE = 30, "call_site") {
            ts: u64 => Ts,
            tid: u32 => V,
            stack: u32 => V,
        }
        /// One sample of the GPU's performance counters over `start..end` (trace
        /// clock): NVML GPM read by the environment sampler of `gputrace run` /
        /// `attach`, or (older traces) CUPTI PM sampling inside the process.
        /// Percentages are in hundredths of a percent of the unit's peak, bytes are
        /// totals over the sample; a metric the GPU could not give is [`ENV_NA`] /
        /// [`ENV_NA64`]. The fields from `fp64_active` on were appended later: a
        /// shorter (older) body decodes with them "not available", its source
        /// [`COUNTER_SOURCE_PM`] and its instance the whole GPU.
        CounterSample(TAG_COUNTER_SAMPLE = 31, "counter_sample") {
            start: u64 => Ts,
            end: u64 => End,
            /// The device: a CUDA ordinal in a process trace (PM samples, and GPM
            /// samples once given to the trace); an NVML index in an environment file.
            device: u32 => V,
            /// SMs with at least one warp resident (`sm__cycles_active`; GPM SM
            /// util), of elapsed cycles.
            sm_active: u32 => Na = ENV_NA,
            /// Warps resident per SM of the maximum, over active cycles (achieved
            /// occupancy).
            occupancy: u32 => Na = ENV_NA,
            /// Tensor pipe busy (any precision), of elapsed cycles.
            tensor_active: u32 => Na = ENV_NA,
            /// DRAM throughput, of peak.
            dram: u32 => Na = ENV_NA,
            pcie_read_bytes: u64 => Na = ENV_NA64,
            pcie_write_bytes: u64 => Na = ENV_NA64,
            nvlink_rx_bytes: u64 => Na = ENV_NA64,
            nvlink_tx_bytes: u64 => Na = ENV_NA64,
            /// Non-tensor FP64 / FP32 / FP16 pipes busy, of elapsed cycles.
            fp64_active: u32 => Opt<Na> = ENV_NA,
            fp32_active: u32 => Opt<Na> = ENV_NA,
            fp16_active: u32 => Opt<Na> = ENV_NA,
            /// Integer pipe busy, of elapsed cycles.
            integer_active: u32 => Opt<Na> = ENV_NA,
            /// Tensor pipes by precision (NVML GPM's DFMA: FP64, HMMA:
            /// FP16/BF16/TF32/FP8, IMMA: integer), of elapsed cycles.
            tensor_dfma: u32 => Opt<Na> = ENV_NA,
            tensor_hmma: u32 => Opt<Na> = ENV_NA,
            tensor_imma: u32 => Opt<Na> = ENV_NA,
            /// Who measured it: [`COUNTER_SOURCE_PM`] or [`COUNTER_SOURCE_GPM`].
            source: u8 => Opt<V> = COUNTER_SOURCE_PM,
            /// The MIG GPU instance sampled; [`ENV_NA`] for the whole GPU.
            instance: u32 => Opt<Na> = ENV_NA,
        }
        /// A periodic sample of a CUDA-issuing thread's Python stack during a trace
        /// window (format 2.3): thread `tid` was running Python stack `stack` (a
        /// [`PyStack`] id) at `ts`.
        PySample(TAG_PY_SAMPLE = 32, "py_sample") {
            ts: u64 => Ts,
            tid: u32 => V,
            stack: u32 => V,
        }
        /// A stall report (format 2.4): launched GPU work that made no progress for a
        /// while, as the library's progress watchdog saw it. One report is a `Stall`,
        /// then one [`StallOp`] per outstanding operation, then one [`StallThread`] per
        /// thread, all with the same `stall` id and `seq`; a stall is reported again
        /// (the next `seq`) while it lasts, so a process killed later still leaves it.
        /// `id` numbers the stalls of one trace from 1; `seq` the reports of one stall
        /// from 0.
        Stall(TAG_STALL = 33, "stall") {
            /// When the report was made (trace clock).
            ts: u64 => Ts,
            /// The last GPU progress seen: the latest end of a completed GPU record, or
            /// the earliest outstanding launch when no record completed since it.
            since: u64 => Ts,
            id: u32 => V,
            seq: u32 => V,
            /// GPU operations launched and not seen complete.
            outstanding: u32 => V,
            /// `STALL_*` flags.
            flags: u8 => U8,
        }
        /// One outstanding GPU operation of a stall report: launched, not complete.
        StallOp(TAG_STALL_OP = 34, "stall_op") {
            /// The report's time (its [`Stall`]'s `ts`).
            ts: u64 => Ts,
            /// The [`Stall`] id and report.
            stall: u32 => V,
            seq: u32 => V,
            /// `STALL_OP_*`.
            kind: u8 => U8,
            /// `STALL_OP_FLAG_*`.
            flags: u8 => U8,
            /// CUDA device ordinal (`u32::MAX` when not known).
            device: u32 => Dev,
            /// CUPTI stream id (0 when not known).
            stream: u32 => V,
            /// CUPTI correlation id of the launch.
            corr: u32 => Corr,
            /// Interned name (the kernel's mangled name), 0 when not known.
            name: u32 => Sid,
            /// The launching thread.
            tid: u32 => V,
            /// When the launch call was made (host, trace clock; 0 when not known).
            launch_ts: u64 => Ts,
            /// When the operation started on the GPU (trace clock), 0 when not known.
            start: u64 => Ts,
            /// Bytes of a copy or memset (0 for kernels or when not known).
            bytes: u64 => V,
            grid: [u32; 3] => Arr,
            block: [u32; 3] => Arr,
        }
        /// One thread of the process at a stall report.
        StallThread(TAG_STALL_THREAD = 35, "stall_thread") {
            /// The report's time (its [`Stall`]'s `ts`).
            ts: u64 => Ts,
            /// The [`Stall`] id and report.
            stall: u32 => V,
            seq: u32 => V,
            tid: u32 => V,
            /// Interned name of the CUDA / NCCL call the thread is inside, 0 when none.
            call: u32 => Sid,
            /// When that call began (trace clock), 0 when none.
            call_start: u64 => Ts,
            /// The thread's Python stack (a [`PyStack`] id), 0 when none was read.
            stack: u32 => V,
            /// Scheduler state letter as a byte ([`STATE_UNKNOWN`] if not read).
            state: u8 => U8,
        }
        /// One replay of a CUDA graph as CUPTI's graph-level tracing records it
        /// (`GRAPH_TRACE`, with `GPUTRACE_ACTIVITY=...,graph`): the replay's span on the
        /// device, in place of a kernel record per node.
        GraphTrace(TAG_GRAPH_TRACE = 36, "graph_trace") {
            start: u64 => Ts,
            end: u64 => End,
            device: u32 => V,
            stream: u32 => V,
            /// The launch call's correlation id.
            corr: u32 => Corr,
            graph_id: u32 => V,
        }
        /// The GIL of the traced Python process, read from CPython's own state (its
        /// `_gil_runtime_state`) by the host sampler: whether it was held and by which
        /// thread (the last thread to take it: the holder while `locked`).
        GilSample(TAG_GIL_SAMPLE = 40, "gil_sample") {
            ts: u64 => Ts,
            /// Native thread id of the last holder; 0 when none or not known.
            holder: u32 => V,
            /// 1 while the GIL was held.
            locked: u8 => U8,
            /// The GIL's switch counter (cumulative): hand-overs between threads.
            switches: u64 => V,
        }
        /// What a thread of the traced process (or a child process) was blocked in,
        /// read by the host sampler while it was off a CPU: the system call it was in
        /// (`/proc/.../syscall`) and its state letter.
        TaskWait(TAG_TASK_WAIT = 41, "task_wait") {
            ts: u64 => Ts,
            /// Thread id, or a child's pid.
            tid: u32 => V,
            /// The system call number (x86-64), [`SYSCALL_NONE`] when blocked outside
            /// any (a page fault), [`ENV_NA`] when not read or running.
            syscall: u32 => Na,
            /// Scheduler state letter as a byte ([`STATE_UNKNOWN`] if not read).
            state: u8 => U8,
            /// `TASK_WAIT_*` flags.
            flags: u8 => U8,
        }
        /// The tracer's own cost on one thread since that thread's previous such event:
        /// the time spent inside gputrace's CUPTI API callbacks (ENTER and EXIT), measured
        /// in the process at the callback's entry and exit. Written with each chunk.
        TracerCost(TAG_TRACER_COST = 38, "tracer_cost") {
            /// When it was written (the end of the period it covers).
            ts: u64 => Ts,
            tid: u32 => V,
            /// Callbacks run (an API call makes two: ENTER and EXIT).
            calls: u64 => V,
            /// Nanoseconds spent in them.
            ns: u64 => V,
        }
    }
    inline {
        /// An interned string: `id` is used by later events in this file.
        Str(TAG_STR = 1, "str") { id: u32 => V, text: String => Text }
        /// A clock pair: CUPTI's timestamp, CLOCK_MONOTONIC and CLOCK_REALTIME, read
        /// together.
        Clock(TAG_CLOCK = 2, "clock") { cupti_ns: u64 => V, mono_ns: u64 => V, real_ns: u64 => V }
        /// Records lost at `source` (a `DROP_*` constant) since the previous such event.
        Dropped(TAG_DROPPED = 10, "dropped") { ts: u64 => Ts, source: u8 => U8, count: u64 => V }
        /// The collector changed state at `ts`; `reason` is an interned string (0 =
        /// none).
        State(TAG_STATE = 11, "state") { ts: u64 => Ts, state: u8 => U8, reason: u32 => Sid }
        /// A thread's name, interned.
        Thread(TAG_THREAD = 12, "thread") { tid: u32 => V, name: u32 => Sid }
    }
}

impl Event {
    /// The event's primary timestamp, if it has one: its first time field (a clock
    /// pair: its CLOCK_MONOTONIC reading).
    pub fn ts(&self) -> Option<u64> {
        match self {
            Event::Clock { mono_ns, .. } => Some(*mono_ns),
            e => e.span().map(|s| s.0),
        }
    }

    /// True for records of work done on the GPU.
    pub fn is_gpu(&self) -> bool {
        matches!(self, Event::Kernel(_) | Event::Memcpy(_) | Event::Memset(_))
    }
}
