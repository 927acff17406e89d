//! The event vocabulary of a trace. Append-only: a tag, once given, never changes.

use serde::{Deserialize, Serialize};

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

/// A kernel execution (CUPTI CONCURRENT_KERNEL record).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Kernel {
    pub start: u64,
    pub end: u64,
    pub device: u32,
    pub stream: u32,
    pub corr: u32,
    /// Interned mangled name, see [`Event::Str`].
    pub name: u32,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub static_smem: u32,
    pub dynamic_smem: u32,
    pub registers: u32,
    /// Non-zero when the kernel ran as part of a CUDA graph.
    pub graph_id: u32,
}

/// A memory copy (CUPTI MEMCPY record).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Memcpy {
    pub start: u64,
    pub end: u64,
    pub device: u32,
    pub stream: u32,
    pub corr: u32,
    pub bytes: u64,
    /// [`CopyKind`] as u8.
    pub copy_kind: u8,
    /// [`MemKind`] as u8.
    pub src_kind: u8,
    pub dst_kind: u8,
    /// Bit 0: the copy was issued by an asynchronous API call.
    pub flags: u8,
}

pub const MEMCPY_FLAG_ASYNC: u8 = 1;

/// A memset on the device (CUPTI MEMSET record).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Memset {
    pub start: u64,
    pub end: u64,
    pub device: u32,
    pub stream: u32,
    pub corr: u32,
    pub bytes: u64,
    pub value: u32,
    pub mem_kind: u8,
    pub flags: u8,
}

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

/// A synchronisation (CUPTI SYNCHRONIZATION record): host time spent waiting.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sync {
    pub start: u64,
    pub end: u64,
    pub device: u32,
    /// u32::MAX when the sync is not tied to a stream.
    pub stream: u32,
    pub corr: u32,
    /// [`SyncKind`] as u8.
    pub kind: u8,
}

/// A device memory allocation or free (CUPTI MEMORY2 record).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    pub ts: u64,
    pub device: u32,
    pub corr: u32,
    pub address: u64,
    pub bytes: u64,
    /// 1 = allocation, 2 = release.
    pub op: u8,
    pub mem_kind: u8,
}

pub const MEMORY_OP_ALLOC: u8 = 1;
pub const MEMORY_OP_FREE: u8 = 2;

/// API domain of a host call.
pub const DOMAIN_RUNTIME: u8 = 1;
pub const DOMAIN_DRIVER: u8 = 2;

/// Host side of a CUDA API call, from a CUPTI callback: who called, when, and the
/// correlation id that links the call to the GPU work it produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Api {
    pub start: u64,
    pub end: u64,
    pub tid: u32,
    pub corr: u32,
    /// [`DOMAIN_RUNTIME`] or [`DOMAIN_DRIVER`].
    pub domain: u8,
    /// The CUPTI callback id (`CUPTI_RUNTIME_TRACE_CBID_*` / `CUPTI_DRIVER_TRACE_CBID_*`).
    pub cbid: u32,
    /// Interned API function name.
    pub name: u32,
    /// Bytes moved, for copies and memsets; 0 otherwise.
    pub bytes: u64,
    /// Copy direction for copies (cudaMemcpyKind), 0 otherwise.
    pub arg: u32,
    /// Return code of the call.
    pub result: u32,
}

/// Properties of a device, written once per device.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Device {
    pub id: u32,
    /// Interned name.
    pub name: u32,
    pub sm_count: u32,
    pub max_blocks_per_sm: u32,
    pub max_threads_per_sm: u32,
    pub max_warps_per_sm: u32,
    pub global_memory: u64,
    pub cc_major: u32,
    pub cc_minor: u32,
    pub max_regs_per_sm: u32,
    pub max_smem_per_sm: u32,
}

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

/// Where dropped records were lost.
pub const DROP_CUPTI: u8 = 1;
pub const DROP_RING: u8 = 2;
pub const DROP_BUFFER_POOL: u8 = 3;
/// Host samples the writer did not take in time (format 2.1).
pub const DROP_HOST_SAMPLES: u8 = 4;

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

/// A host-side copy call seen by the symbol hooks, with its host memory classified.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostCopy {
    pub start: u64,
    pub end: u64,
    pub tid: u32,
    /// `HOSTCOPY_MEMCPY*`.
    pub api: u8,
    /// [`CopyKind`] as u8 (from the call's cudaMemcpyKind; `PtoP` for peer copies,
    /// `Unknown` for cudaMemcpyDefault).
    pub copy_kind: u8,
    /// [`MemKind`] as u8 of the host side: `Pinned`, `Pageable`, `Device` (no host side)
    /// or `Unknown` (cudaMemcpyDefault with no registered pointer).
    pub host_kind: u8,
    /// `CLASS_SOURCE_*`: where `host_kind` comes from.
    pub source: u8,
    /// `HOSTCOPY_FLAG_*`.
    pub flags: u8,
    /// Bytes moved (width x height for 2D copies).
    pub bytes: u64,
    /// The `cudaStream_t` handle (0 = legacy default stream, or a synchronous call).
    pub stream: u64,
    pub dst: u64,
    pub src: u64,
    /// Peer copies: the devices; `u32::MAX` otherwise.
    pub dst_device: u32,
    pub src_device: u32,
    /// The call's return code (cudaError_t).
    pub result: u32,
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

/// A CUDA runtime call (sync, memset, launch) seen by the symbol hooks.
///
/// Arguments by call: syncs: `stream` (StreamSynchronize, StreamWaitEvent), `arg0` =
/// event (EventSynchronize, StreamWaitEvent), `arg1` = flags (StreamWaitEvent).
/// Memsets: `arg0` = bytes, `arg1` = device pointer, `arg2` = value. Launches: `arg0`
/// = kernel / function handle (graph exec for cudaGraphLaunch), `arg1` = blocks in the
/// grid, `arg2` = threads per block.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostCall {
    pub start: u64,
    pub end: u64,
    pub tid: u32,
    /// `HOSTCALL_*`.
    pub call: u16,
    pub stream: u64,
    pub arg0: u64,
    pub arg1: u64,
    pub arg2: u64,
    /// The call's return code (cudaError_t).
    pub result: u32,
}

/// [`HostAlloc::op`] values: the pinned host memory calls.
pub const HOSTALLOC_HOST_ALLOC: u8 = 1;
pub const HOSTALLOC_MALLOC_HOST: u8 = 2;
pub const HOSTALLOC_HOST_REGISTER: u8 = 3;
pub const HOSTALLOC_FREE_HOST: u8 = 4;
pub const HOSTALLOC_HOST_UNREGISTER: u8 = 5;

/// The CUDA runtime function a [`HostAlloc::op`] value names.
pub fn hostalloc_op_name(op: u8) -> &'static str {
    match op {
        HOSTALLOC_HOST_ALLOC => "cudaHostAlloc",
        HOSTALLOC_MALLOC_HOST => "cudaMallocHost",
        HOSTALLOC_HOST_REGISTER => "cudaHostRegister",
        HOSTALLOC_FREE_HOST => "cudaFreeHost",
        HOSTALLOC_HOST_UNREGISTER => "cudaHostUnregister",
        _ => "unknown",
    }
}

/// Pinned host memory made, registered, freed or unregistered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostAlloc {
    pub start: u64,
    pub end: u64,
    pub tid: u32,
    /// `HOSTALLOC_*`.
    pub op: u8,
    pub ptr: u64,
    /// Size asked for; for frees and unregisters, the size the registry had for `ptr`
    /// (0 if it had none).
    pub bytes: u64,
    /// The call's flags argument (cudaHostAlloc, cudaHostRegister), else 0.
    pub flags: u32,
    /// The call's return code (cudaError_t).
    pub result: u32,
}

/// [`Nccl::op`] values.
pub const NCCL_ALL_REDUCE: u8 = 1;
pub const NCCL_REDUCE: u8 = 2;
pub const NCCL_BROADCAST: u8 = 3;
pub const NCCL_ALL_GATHER: u8 = 4;
pub const NCCL_REDUCE_SCATTER: u8 = 5;
pub const NCCL_SEND: u8 = 6;
pub const NCCL_RECV: u8 = 7;
pub const NCCL_GROUP_START: u8 = 8;
pub const NCCL_GROUP_END: u8 = 9;

/// The NCCL function a [`Nccl::op`] value names.
pub fn nccl_op_name(op: u8) -> &'static str {
    match op {
        NCCL_ALL_REDUCE => "ncclAllReduce",
        NCCL_REDUCE => "ncclReduce",
        NCCL_BROADCAST => "ncclBroadcast",
        NCCL_ALL_GATHER => "ncclAllGather",
        NCCL_REDUCE_SCATTER => "ncclReduceScatter",
        NCCL_SEND => "ncclSend",
        NCCL_RECV => "ncclRecv",
        NCCL_GROUP_START => "ncclGroupStart",
        NCCL_GROUP_END => "ncclGroupEnd",
        _ => "unknown",
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

/// One NCCL call (a collective, point-to-point, or group bracket), from the host side.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Nccl {
    pub start: u64,
    pub end: u64,
    pub tid: u32,
    /// `NCCL_*` op.
    pub op: u8,
    /// The `cudaStream_t` handle the operation was queued on.
    pub stream: u64,
    /// Element count as passed (sendcount for AllGather, recvcount for ReduceScatter).
    pub count: u64,
    /// `count` x the datatype's size.
    pub bytes: u64,
    /// `ncclDataType_t` ([`NCCL_NO_DATATYPE`] for groups).
    pub datatype: u8,
    /// `ncclRedOp_t` (0-4), [`NCCL_CUSTOM_REDOP`], or [`NCCL_NO_REDOP`].
    pub redop: u8,
    /// Root (Reduce, Broadcast) or peer (Send, Recv); -1 otherwise.
    pub peer_or_root: i32,
    /// Communicator id, the same on every rank (0 = not known, e.g. made before
    /// tracing started or by a call the hooks do not see).
    pub comm_id: u64,
    /// This process's rank in the communicator and its size (-1 when not known).
    pub rank: i32,
    pub nranks: i32,
    /// Per-communicator sequence number of this call, from 1: the n-th collective of a
    /// communicator on one rank matches the n-th on every other rank.
    pub seq: u64,
    /// The call's return code (ncclResult_t).
    pub result: u32,
}

/// [`NcclComm::op`] values.
pub const NCCL_COMM_INIT_RANK: u8 = 1;
pub const NCCL_COMM_INIT_RANK_CONFIG: u8 = 2;
pub const NCCL_COMM_INIT_ALL: u8 = 3;
pub const NCCL_COMM_SPLIT: u8 = 4;
pub const NCCL_COMM_DESTROY: u8 = 5;
pub const NCCL_COMM_ABORT: u8 = 6;
pub const NCCL_COMM_INIT_RANK_SCALABLE: u8 = 7;

/// The NCCL function an [`NcclComm::op`] value names.
pub fn nccl_comm_op_name(op: u8) -> &'static str {
    match op {
        NCCL_COMM_INIT_RANK => "ncclCommInitRank",
        NCCL_COMM_INIT_RANK_CONFIG => "ncclCommInitRankConfig",
        NCCL_COMM_INIT_ALL => "ncclCommInitAll",
        NCCL_COMM_SPLIT => "ncclCommSplit",
        NCCL_COMM_DESTROY => "ncclCommDestroy",
        NCCL_COMM_ABORT => "ncclCommAbort",
        NCCL_COMM_INIT_RANK_SCALABLE => "ncclCommInitRankScalable",
        _ => "unknown",
    }
}

/// A communicator made or ended. `ncclCommInitAll` gives one event per device.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NcclComm {
    pub start: u64,
    pub end: u64,
    pub tid: u32,
    /// `NCCL_COMM_*`.
    pub op: u8,
    /// The `ncclComm_t` handle (process-local).
    pub comm: u64,
    /// Communicator id, the same on every rank: a hash of the ncclUniqueId; for a split,
    /// of the parent's id and the color. 0 when not known.
    pub comm_id: u64,
    /// Splits: the parent communicator's id; 0 otherwise.
    pub parent_id: u64,
    pub rank: i32,
    pub nranks: i32,
    /// Splits: the color (and 0 otherwise).
    pub color: i32,
    /// The call's return code (ncclResult_t).
    pub result: u32,
}

/// [`Nvtx::kind`] values.
pub const NVTX_PUSH: u8 = 1;
pub const NVTX_POP: u8 = 2;
pub const NVTX_START: u8 = 3;
pub const NVTX_END: u8 = 4;
pub const NVTX_MARK: u8 = 5;

/// Name of an [`Nvtx::kind`] value.
pub fn nvtx_kind_name(kind: u8) -> &'static str {
    match kind {
        NVTX_PUSH => "push",
        NVTX_POP => "pop",
        NVTX_START => "start",
        NVTX_END => "end",
        NVTX_MARK => "mark",
        _ => "unknown",
    }
}

/// [`Nvtx::flags`]: the text was cut (only its first bytes are kept).
pub const NVTX_FLAG_TRUNCATED: u8 = 1;

/// One NVTX call (libgputrace is the NVTX injection library).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Nvtx {
    pub ts: u64,
    pub tid: u32,
    /// `NVTX_*` kind.
    pub kind: u8,
    /// `NVTX_FLAG_*`.
    pub flags: u8,
    /// Start / end: the range id (the same on both, which may be on different threads).
    /// Push: the nesting level of the new range (0 = outermost); pop: the level of the
    /// range it ends. Mark: 0.
    pub id: u64,
    /// Interned text (0 = none: pops, ends, marks without a message).
    pub text: u32,
}

// ---------------------------------------------------------------------------------
// Host samples: what the CPU side of the job was doing, read from /proc by the
// library's sampler while a trace window is open (never in dormant mode).

/// [`ThreadCpu::state`] when the state was not read.
pub const STATE_UNKNOWN: u8 = 0;

/// One thread's scheduler counters (`/proc/self/task/TID/schedstat`, and the state
/// letter of its `stat`), sampled every few ms for the threads that issue CUDA work
/// and the main thread. Counters are cumulative since the thread started: the
/// difference between two samples of a thread is what it did in between.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadCpu {
    pub ts: u64,
    pub tid: u32,
    /// Time on a CPU, ns (schedstat field 1).
    pub cpu_ns: u64,
    /// Time runnable but waiting for a CPU (run queue), ns (schedstat field 2).
    pub wait_ns: u64,
    /// Times the thread was switched onto a CPU (schedstat field 3): voluntary and
    /// involuntary context switches together.
    pub slices: u64,
    /// Scheduler state letter (`R`, `S`, `D`, ...) as a byte; [`STATE_UNKNOWN`] if not read.
    pub state: u8,
}

/// [`ProcSample::flags`]: the sample is a thread of the traced process (`pid` is its
/// tid, `ppid` the traced process); CPU time from its schedstat, no I/O counters.
pub const PROC_FLAG_THREAD: u8 = 1;
/// [`ProcSample::flags`]: the traced process itself.
pub const PROC_FLAG_SELF: u8 = 2;
/// [`ProcSample::flags`]: `/proc/PID/io` could not be read (the I/O fields are 0).
pub const PROC_FLAG_NO_IO: u8 = 4;

/// One process of the traced process's tree (itself, its children such as DataLoader
/// workers, and theirs) or one of its own threads, sampled every 50-100 ms from
/// `/proc/PID/stat` and `/proc/PID/io`. Counters are cumulative.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcSample {
    pub ts: u64,
    pub pid: u32,
    pub ppid: u32,
    /// Interned `comm` (the kernel's 15-byte name).
    pub comm: u32,
    /// `PROC_FLAG_*`.
    pub flags: u8,
    /// Scheduler state letter as a byte ([`STATE_UNKNOWN`] if not read).
    pub state: u8,
    /// Threads in the process (1 for a thread sample).
    pub threads: u32,
    /// User + system CPU time, ns (whole process: all its threads; from clock ticks, so
    /// to 10 ms at USER_HZ 100).
    pub cpu_ns: u64,
    /// Bytes passed to read()-like calls (`rchar`: files, pipes, sockets, page cache).
    pub rchar: u64,
    /// Bytes fetched from storage (`read_bytes`) and sent to it (`write_bytes`).
    pub read_bytes: u64,
    pub write_bytes: u64,
}

/// [`MachineSample::flags`]: the PSI fields were read (`/proc/pressure/*`).
pub const MACHINE_FLAG_PSI: u8 = 1;
/// [`MachineSample::flags`]: the cgroup fields were read (`cpu.stat` of cgroup v2).
pub const MACHINE_FLAG_CGROUP: u8 = 2;

/// The machine's CPU and I/O-wait counters, sampled with the process tree. All
/// cumulative: `/proc/stat`'s aggregate line in ns summed over the CPUs, PSI stall
/// totals in us, the job's cgroup CPU usage and throttled time in us.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachineSample {
    pub ts: u64,
    /// user + nice + system + irq + softirq.
    pub busy_ns: u64,
    pub idle_ns: u64,
    pub iowait_ns: u64,
    pub steal_ns: u64,
    /// `MACHINE_FLAG_*`.
    pub flags: u8,
    /// `some` totals of /proc/pressure/cpu and /proc/pressure/io, `full` of io.
    pub psi_cpu_some_us: u64,
    pub psi_io_some_us: u64,
    pub psi_io_full_us: u64,
    /// cgroup v2 `cpu.stat`: `usage_usec` and `throttled_usec`.
    pub cgroup_usage_us: u64,
    pub cgroup_throttled_us: u64,
}

/// The CPU resources the job may use, written once per trace when sampling starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuLimits {
    pub ts: u64,
    /// CPUs online on the machine.
    pub online_cpus: u32,
    /// CPUs in the traced process's affinity mask.
    pub affinity_cpus: u32,
    /// cgroup CPU quota per period (`cpu.max`, or v1 `cfs_quota_us`), us; 0 = no quota.
    pub quota_us: u64,
    pub period_us: u64,
    /// cgroup memory limit, bytes; 0 = none found.
    pub memory_limit: u64,
    /// The sampler's periods, us: CUDA threads, and process tree / machine.
    pub thread_period_us: u32,
    pub tree_period_us: u32,
}

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

/// One fact about the environment, written once per trace: a key and a value, both
/// interned (`driver_version` = `580.159.04`, `cuda_runtime_version` = `13.0.96`,
/// `persistence_mode` = `on` for GPU 0, ...). The keys are listed in the
/// `gputrace-env` crate (`facts.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fact {
    pub ts: u64,
    /// The GPU (NVML index) the fact is about, or [`FACT_HOST`].
    pub device: u32,
    pub key: u32,
    pub value: u32,
}

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

/// One NVML sample of one GPU. Fields NVML did not give are [`ENV_NA`] / [`ENV_NA64`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuSample {
    pub ts: u64,
    /// NVML device index.
    pub device: u32,
    pub sm_clock_mhz: u32,
    pub sm_clock_max_mhz: u32,
    pub mem_clock_mhz: u32,
    pub mem_clock_max_mhz: u32,
    /// `CLOCK_REASON_*` bits in force when sampled.
    pub clock_reasons: u64,
    pub power_mw: u32,
    /// The enforced power limit.
    pub power_limit_mw: u32,
    pub temperature_c: u32,
    /// nvidia-smi's GPU-Util and memory-util: share of the last sample period in which
    /// a kernel ran / device memory was read or written, in percent.
    pub gpu_util_pct: u32,
    pub mem_util_pct: u32,
    pub mem_used: u64,
    pub mem_total: u64,
    pub pcie_gen: u32,
    pub pcie_gen_max: u32,
    pub pcie_width: u32,
    pub pcie_width_max: u32,
    /// PCIe throughput in KB/s (NVML samples it over 20 ms; not every sample has it).
    pub pcie_tx_kbs: u32,
    pub pcie_rx_kbs: u32,
}

impl Default for GpuSample {
    fn default() -> GpuSample {
        GpuSample {
            ts: 0,
            device: 0,
            sm_clock_mhz: ENV_NA,
            sm_clock_max_mhz: ENV_NA,
            mem_clock_mhz: ENV_NA,
            mem_clock_max_mhz: ENV_NA,
            clock_reasons: ENV_NA64,
            power_mw: ENV_NA,
            power_limit_mw: ENV_NA,
            temperature_c: ENV_NA,
            gpu_util_pct: ENV_NA,
            mem_util_pct: ENV_NA,
            mem_used: ENV_NA64,
            mem_total: ENV_NA64,
            pcie_gen: ENV_NA,
            pcie_gen_max: ENV_NA,
            pcie_width: ENV_NA,
            pcie_width_max: ENV_NA,
            pcie_tx_kbs: ENV_NA,
            pcie_rx_kbs: ENV_NA,
        }
    }
}

/// [`GpuProcess::flags`]: NVML listed the process as a compute process on the GPU.
pub const GPU_PROC_LISTED: u8 = 1;
/// [`GpuProcess::flags`]: NVML had utilisation samples of the process since the last
/// sample (`sm_pct`, `mem_pct` are their mean).
pub const GPU_PROC_UTIL: u8 = 2;
/// [`GpuProcess::flags`]: the process is the traced process itself.
pub const GPU_PROC_SELF: u8 = 4;

/// One process using a GPU, as NVML saw it at one sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuProcess {
    pub ts: u64,
    pub device: u32,
    /// As NVML reports it (the host's pid namespace).
    pub pid: u32,
    /// Interned command name (`/proc/PID/comm`; 0 when not readable from here).
    pub name: u32,
    /// Device memory the process holds ([`ENV_NA64`] when not known).
    pub used_memory: u64,
    /// Its share of the time SMs were busy / memory was accessed since the last
    /// sample, in percent ([`ENV_NA`] without `GPU_PROC_UTIL`).
    pub sm_pct: u32,
    pub mem_pct: u32,
    /// `GPU_PROC_*`.
    pub flags: u8,
}

impl Default for GpuProcess {
    fn default() -> GpuProcess {
        GpuProcess {
            ts: 0,
            device: 0,
            pid: 0,
            name: 0,
            used_memory: ENV_NA64,
            sm_pct: ENV_NA,
            mem_pct: ENV_NA,
            flags: 0,
        }
    }
}

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

/// An error the driver reported on a GPU: an Xid (`data` = the Xid number) or new
/// ECC errors (`data` = how many).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuEvent {
    pub ts: u64,
    pub device: u32,
    /// `GPU_EVENT_*`.
    pub kind: u8,
    pub data: u64,
}

// Python call sites (format 2.2): the Python stack of the thread that made a host call
// that matters (a synchronising call, a copy, an allocation, an NCCL call), interned.

/// One frame of a [`PyStack`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PyFrame {
    /// Interned file name, as the code object has it (`co_filename`).
    pub file: u32,
    /// Interned function name (`co_name`).
    pub function: u32,
    /// Line being run in that frame (0 when not known).
    pub line: u32,
}

/// The most frames a [`PyStack`] holds (`GPUTRACE_PYSTACK`'s largest setting).
pub const PYSTACK_MAX_FRAMES: u32 = 16;

/// A Python stack, defined once per file before its first use: the innermost frames
/// of the calling thread, innermost first (at most the library's depth setting).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PyStack {
    pub id: u32,
    pub frames: Vec<PyFrame>,
}

/// Where a host call was made from: the host event of thread `tid` whose start is `ts`
/// (an [`Api`], [`HostCall`], [`HostCopy`] or [`Nccl`] event, written just before
/// this one) was called from Python stack `stack`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallSite {
    pub ts: u64,
    pub tid: u32,
    pub stack: u32,
}

/// One sample of the GPU's hardware counters (CUPTI PM sampling) over `start..end`
/// (trace clock). Percentages are in hundredths of a percent of the unit's peak, bytes
/// are totals over the sample; a metric the GPU or CUPTI could not give is
/// [`ENV_NA`] / [`ENV_NA64`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterSample {
    pub start: u64,
    pub end: u64,
    /// CUDA device ordinal.
    pub device: u32,
    /// SMs with at least one warp resident (`sm__cycles_active`), of elapsed cycles.
    pub sm_active: u32,
    /// Warps resident per SM of the maximum, over active cycles (achieved occupancy).
    pub occupancy: u32,
    /// Tensor pipe busy, of elapsed cycles.
    pub tensor_active: u32,
    /// DRAM throughput, of peak.
    pub dram: u32,
    pub pcie_read_bytes: u64,
    pub pcie_write_bytes: u64,
    pub nvlink_rx_bytes: u64,
    pub nvlink_tx_bytes: u64,
}

impl Default for CounterSample {
    fn default() -> CounterSample {
        CounterSample {
            start: 0,
            end: 0,
            device: 0,
            sm_active: ENV_NA,
            occupancy: ENV_NA,
            tensor_active: ENV_NA,
            dram: ENV_NA,
            pcie_read_bytes: ENV_NA64,
            pcie_write_bytes: ENV_NA64,
            nvlink_rx_bytes: ENV_NA64,
            nvlink_tx_bytes: ENV_NA64,
        }
    }
}

/// A periodic sample of a CUDA-issuing thread's Python stack during a trace window
/// (format 2.3): thread `tid` was running Python stack `stack` (a [`PyStack`] id) at `ts`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PySample {
    pub ts: u64,
    pub tid: u32,
    pub stack: u32,
}

// ---------------------------------------------------------------------------------
// Stalls (format 2.4): launched GPU work that made no progress for a while, as the
// library's progress watchdog saw it, and what every thread of the process was doing.
// One report is a `Stall`, then one `StallOp` per outstanding operation, then one
// `StallThread` per thread, all with the same `stall` id and `seq`. A stall is reported
// again (the next `seq`) while it lasts, so that a process killed later still leaves it.

/// A stall report. `id` numbers the stalls of one trace from 1; `seq` numbers the
/// reports of one stall from 0.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stall {
    /// When the report was made (trace clock).
    pub ts: u64,
    /// The last GPU progress seen: the latest end of a completed GPU record, or the
    /// earliest outstanding launch when no record completed since it (trace clock).
    pub since: u64,
    pub id: u32,
    pub seq: u32,
    /// GPU operations launched and not seen complete.
    pub outstanding: u32,
    /// `STALL_*` flags.
    pub flags: u8,
}

/// The report was made as the process ended (a signal, an abort, an exit) rather than
/// by the watchdog's threshold: `outstanding` operations never completed.
pub const STALL_END: u8 = 1;
/// The stall is over: GPU work completed again at `ts` (no ops or threads follow).
pub const STALL_RESOLVED: u8 = 2;
/// A forced CUPTI flush was made for this report (incomplete records were asked for).
pub const STALL_FORCED_FLUSH: u8 = 4;

/// What kind of GPU operation a [`StallOp`] is.
pub const STALL_OP_OTHER: u8 = 0;
pub const STALL_OP_KERNEL: u8 = 1;
pub const STALL_OP_MEMCPY: u8 = 2;
pub const STALL_OP_MEMSET: u8 = 3;

/// One outstanding GPU operation of a stall report: launched, not complete.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StallOp {
    /// The report's time (its [`Stall`]'s `ts`).
    pub ts: u64,
    /// The [`Stall`] id and report.
    pub stall: u32,
    pub seq: u32,
    /// `STALL_OP_*`.
    pub kind: u8,
    /// `STALL_OP_FLAG_*`.
    pub flags: u8,
    /// CUDA device ordinal (`u32::MAX` when not known).
    pub device: u32,
    /// CUPTI stream id (0 when not known).
    pub stream: u32,
    /// CUPTI correlation id of the launch.
    pub corr: u32,
    /// Interned name (the kernel's mangled name), 0 when not known.
    pub name: u32,
    /// The launching thread.
    pub tid: u32,
    /// When the launch call was made (host, trace clock; 0 when not known).
    pub launch_ts: u64,
    /// When the operation started on the GPU (trace clock), 0 when not known.
    pub start: u64,
    /// Bytes of a copy or memset (0 for kernels or when not known).
    pub bytes: u64,
    pub grid: [u32; 3],
    pub block: [u32; 3],
}

/// The operation was seen at its launch (the API callback).
pub const STALL_OP_FLAG_LAUNCH: u8 = 1;
/// CUPTI handed over an incomplete record of it on a forced flush (its `start` is from
/// that record when non-zero).
pub const STALL_OP_FLAG_INCOMPLETE: u8 = 2;

/// One thread of the process at a stall report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StallThread {
    /// The report's time (its [`Stall`]'s `ts`).
    pub ts: u64,
    /// The [`Stall`] id and report.
    pub stall: u32,
    pub seq: u32,
    pub tid: u32,
    /// Interned name of the CUDA / NCCL call the thread is inside, 0 when none.
    pub call: u32,
    /// When that call began (trace clock), 0 when none.
    pub call_start: u64,
    /// The thread's Python stack (a [`PyStack`] id), 0 when none was read.
    pub stack: u32,
    /// Scheduler state letter as a byte ([`STATE_UNKNOWN`] if not read).
    pub state: u8,
}

// ---------------------------------------------------------------------------------
// How a process ended: the `reason` of the last `Stopped` [`Event::State`].

/// The process exited (`exit`, a return from `main`, the library unloaded).
pub const END_EXIT: &str = "exit";

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

/// One trace event. Tags (the `TAG_*` constants) are append-only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// An interned string: `id` is used by later events in this file.
    Str {
        id: u32,
        text: String,
    },
    /// A clock pair: CUPTI's timestamp, CLOCK_MONOTONIC and CLOCK_REALTIME, read together.
    Clock {
        cupti_ns: u64,
        mono_ns: u64,
        real_ns: u64,
    },
    Device(Device),
    Kernel(Kernel),
    Memcpy(Memcpy),
    Memset(Memset),
    Sync(Sync),
    Memory(Memory),
    Api(Api),
    /// Records lost at `source` (a `DROP_*` constant) since the previous such event.
    Dropped {
        ts: u64,
        source: u8,
        count: u64,
    },
    /// The collector changed state at `ts`; `reason` is an interned string (0 = none).
    State {
        ts: u64,
        state: u8,
        reason: u32,
    },
    /// A thread's name, interned.
    Thread {
        tid: u32,
        name: u32,
    },
    /// A copy call seen by the symbol hooks, with its host memory classified.
    HostCopy(HostCopy),
    /// A runtime sync / memset / launch call seen by the symbol hooks.
    HostCall(HostCall),
    /// Pinned host memory made or released.
    HostAlloc(HostAlloc),
    /// An NCCL collective, point-to-point call or group bracket.
    Nccl(Nccl),
    /// An NCCL communicator made or ended.
    NcclComm(NcclComm),
    /// An NVTX push, pop, range start or end, or mark.
    Nvtx(Nvtx),
    /// A CUDA-issuing thread's CPU counters (host sampler).
    ThreadCpu(ThreadCpu),
    /// A process of the traced process's tree, or one of its threads (host sampler).
    ProcSample(ProcSample),
    /// The machine's CPU and I/O-wait counters (host sampler).
    MachineSample(MachineSample),
    /// The CPUs and memory the job may use (host sampler, once).
    CpuLimits(CpuLimits),
    /// A fact about the environment (versions, modes, limits), once per trace.
    Fact(Fact),
    /// An NVML sample of one GPU.
    GpuSample(GpuSample),
    /// A process on a GPU, at one NVML sample.
    GpuProcess(GpuProcess),
    /// An Xid or ECC error reported by the driver.
    GpuEvent(GpuEvent),
    /// A Python stack, defined once (format 2.2).
    PyStack(PyStack),
    /// The Python stack a host call was made from (format 2.2).
    CallSite(CallSite),
    /// GPU hardware counters over a short interval (CUPTI PM sampling).
    CounterSample(CounterSample),
    /// A periodic sample of a thread's Python stack (format 2.3).
    PySample(PySample),
    /// A stall report (format 2.4).
    Stall(Stall),
    /// An outstanding GPU operation of a stall report (format 2.4).
    StallOp(StallOp),
    /// A thread of the process at a stall report (format 2.4).
    StallThread(StallThread),
}

pub const TAG_STR: u8 = 1;
pub const TAG_CLOCK: u8 = 2;
pub const TAG_DEVICE: u8 = 3;
pub const TAG_KERNEL: u8 = 4;
pub const TAG_MEMCPY: u8 = 5;
pub const TAG_MEMSET: u8 = 6;
pub const TAG_SYNC: u8 = 7;
pub const TAG_MEMORY: u8 = 8;
pub const TAG_API: u8 = 9;
pub const TAG_DROPPED: u8 = 10;
pub const TAG_STATE: u8 = 11;
pub const TAG_THREAD: u8 = 12;
pub const TAG_HOST_COPY: u8 = 13;
pub const TAG_HOST_CALL: u8 = 14;
pub const TAG_HOST_ALLOC: u8 = 15;
pub const TAG_NCCL: u8 = 16;
pub const TAG_NCCL_COMM: u8 = 17;
pub const TAG_NVTX: u8 = 18;
/// A kernel's launch shape (name, grid, block, shared memory, registers, graph), defined
/// once per file; compact kernel records refer to it by id. Internal to the codec:
/// readers see only [`Event::Kernel`].
pub const TAG_KERNEL_SHAPE: u8 = 19;
/// A kernel record that refers to a [`TAG_KERNEL_SHAPE`] (what writers emit).
pub const TAG_KERNEL_COMPACT: u8 = 20;
/// Host samples (format 2.1).
pub const TAG_THREAD_CPU: u8 = 21;
pub const TAG_PROC_SAMPLE: u8 = 22;
pub const TAG_MACHINE_SAMPLE: u8 = 23;
pub const TAG_CPU_LIMITS: u8 = 24;
pub const TAG_FACT: u8 = 25;
pub const TAG_GPU_SAMPLE: u8 = 26;
pub const TAG_GPU_PROCESS: u8 = 27;
pub const TAG_GPU_EVENT: u8 = 28;
/// Python call sites (format 2.2).
pub const TAG_PY_STACK: u8 = 29;
pub const TAG_CALL_SITE: u8 = 30;
/// GPU hardware counter samples (format 2.3, PM sampling).
pub const TAG_COUNTER_SAMPLE: u8 = 31;
/// Python stack samples (format 2.3).
pub const TAG_PY_SAMPLE: u8 = 32;
/// Stall reports (format 2.4).
pub const TAG_STALL: u8 = 33;
pub const TAG_STALL_OP: u8 = 34;
pub const TAG_STALL_THREAD: u8 = 35;

impl Event {
    /// The event's primary timestamp, if it has one.
    pub fn ts(&self) -> Option<u64> {
        match self {
            Event::Str { .. } | Event::Device(_) | Event::Thread { .. } | Event::PyStack(_) => None,
            Event::Clock { mono_ns, .. } => Some(*mono_ns),
            Event::Kernel(k) => Some(k.start),
            Event::Memcpy(m) => Some(m.start),
            Event::Memset(m) => Some(m.start),
            Event::Sync(s) => Some(s.start),
            Event::Memory(m) => Some(m.ts),
            Event::Api(a) => Some(a.start),
            Event::Dropped { ts, .. } => Some(*ts),
            Event::State { ts, .. } => Some(*ts),
            Event::HostCopy(c) => Some(c.start),
            Event::HostCall(c) => Some(c.start),
            Event::HostAlloc(a) => Some(a.start),
            Event::Nccl(n) => Some(n.start),
            Event::NcclComm(n) => Some(n.start),
            Event::Nvtx(n) => Some(n.ts),
            Event::ThreadCpu(x) => Some(x.ts),
            Event::ProcSample(x) => Some(x.ts),
            Event::MachineSample(x) => Some(x.ts),
            Event::CpuLimits(x) => Some(x.ts),
            Event::Fact(f) => Some(f.ts),
            Event::GpuSample(g) => Some(g.ts),
            Event::GpuProcess(p) => Some(p.ts),
            Event::GpuEvent(e) => Some(e.ts),
            Event::CallSite(c) => Some(c.ts),
            Event::CounterSample(c) => Some(c.start),
            Event::PySample(x) => Some(x.ts),
            Event::Stall(x) => Some(x.ts),
            Event::StallOp(x) => Some(x.ts),
            Event::StallThread(x) => Some(x.ts),
        }
    }

    /// True for records of work done on the GPU.
    pub fn is_gpu(&self) -> bool {
        matches!(self, Event::Kernel(_) | Event::Memcpy(_) | Event::Memset(_))
    }
}
