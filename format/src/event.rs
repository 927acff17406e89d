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

impl Event {
    /// The event's primary timestamp, if it has one.
    pub fn ts(&self) -> Option<u64> {
        match self {
            Event::Str { .. } | Event::Device(_) | Event::Thread { .. } => None,
            Event::Clock { mono_ns, .. } => Some(*mono_ns),
            Event::Kernel(k) => Some(k.start),
            Event::Memcpy(m) => Some(m.start),
            Event::Memset(m) => Some(m.start),
            Event::Sync(s) => Some(s.start),
            Event::Memory(m) => Some(m.ts),
            Event::Api(a) => Some(a.start),
            Event::Dropped { ts, .. } => Some(*ts),
            Event::State { ts, .. } => Some(*ts),
        }
    }

    /// True for records of work done on the GPU.
    pub fn is_gpu(&self) -> bool {
        matches!(self, Event::Kernel(_) | Event::Memcpy(_) | Event::Memset(_))
    }
}
