//! A trace event as a timeline shows it: on which track, from when to when, under what
//! name, with which arguments, and the correlation id that links a launch to its GPU
//! work. One description serves every timeline format (Perfetto, Chrome JSON), so they
//! show the same things under the same names.

use super::api::{TraceContext, TraceEvent};
use gputrace_format::{self as fmt, CopyKind, MemKind, SyncKind};

/// Where a slice goes, within its process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Track {
    /// GPU work of one stream of one device (kernels, copies, memsets).
    Stream {
        device: u32,
        stream: u32,
    },
    /// A host thread: its CUDA API calls and the calls the symbol hooks saw.
    Thread(u32),
    /// A thread's NVTX push/pop ranges and marks.
    Nvtx(u32),
    /// A thread's NCCL calls.
    Nccl(u32),
    /// Where a thread's Python stack samples put it (see [`super::overlay::python_spans`]).
    Python(u32),
    /// Host waits recorded by CUPTI's synchronisation records.
    Sync,
    /// The collector's state changes and drops.
    Collector,
    /// A GPU as the NVML sampler saw it (NVML's index): its events (Xid, ECC).
    Nvml(u32),
    /// A device's idle gaps, named by cause.
    Idle(u32),
    Steps,
    Phases,
    Findings,
}

/// What a slice is, for formats that keep categories (Chrome's `cat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cat {
    Kernel,
    Memcpy,
    Memset,
    Runtime,
    Driver,
    Host,
    Nccl,
    Nvtx,
    Sync,
    Collector,
    Idle,
    Step,
    Finding,
    Python,
    /// A CUDA graph replay (its kernels lie inside it on their stream's track).
    Graph,
}

impl Cat {
    /// Kineto's category names where there is one (Holistic Trace Analysis reads them).
    pub fn name(self) -> &'static str {
        match self {
            Cat::Kernel => "kernel",
            Cat::Memcpy => "gpu_memcpy",
            Cat::Memset => "gpu_memset",
            Cat::Runtime => "cuda_runtime",
            Cat::Driver => "cuda_driver",
            Cat::Host => "cuda_host_hooks",
            Cat::Nccl => "nccl",
            Cat::Nvtx => "user_annotation",
            Cat::Sync => "cuda_sync",
            Cat::Collector => "gputrace",
            Cat::Idle => "gpu_idle",
            Cat::Step => "step",
            Cat::Finding => "finding",
            Cat::Python => "python_sample",
            Cat::Graph => "cuda_graph",
        }
    }
}

/// A slice's name.
#[derive(Clone, Copy, Debug)]
pub enum Name<'a> {
    /// A kernel's name (an interned string id, shown demangled).
    Kernel(u32),
    /// An interned string id, shown as it is.
    Str(u32),
    Static(&'static str),
    Text(&'a str),
}

/// One argument of a slice.
#[derive(Clone, Copy, Debug)]
pub enum Arg<'a> {
    U(&'static str, u64),
    I(&'static str, i64),
    S(&'static str, &'a str),
    /// Shown in hex (handles, ids).
    Hex(&'static str, u64),
    /// Three numbers (grid and block sizes).
    Dim3(&'static str, [u32; 3]),
}

impl Arg<'_> {
    pub fn key(&self) -> &'static str {
        match *self {
            Arg::U(k, _) | Arg::I(k, _) | Arg::S(k, _) | Arg::Hex(k, _) | Arg::Dim3(k, _) => k,
        }
    }
}

/// Arguments, without allocating.
#[derive(Clone, Copy, Debug)]
pub struct Args<'a> {
    n: usize,
    v: [Arg<'a>; 12],
}

impl<'a> Args<'a> {
    pub fn new() -> Self {
        Args {
            n: 0,
            v: [Arg::U("", 0); 12],
        }
    }
    pub fn push(&mut self, a: Arg<'a>) {
        if self.n < self.v.len() {
            self.v[self.n] = a;
            self.n += 1;
        }
    }
    pub fn as_slice(&self) -> &[Arg<'a>] {
        &self.v[..self.n]
    }
}

impl Default for Args<'_> {
    fn default() -> Self {
        Self::new()
    }
}

/// How a slice is linked to others by correlation id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    None,
    /// A launch, copy or memset call: the start of an arrow to its GPU work.
    Launch(u32),
    /// GPU work: the end of the arrow from the call that launched it.
    Work(u32),
}

/// One slice (a zero-length one is an instant for formats that have those).
#[derive(Clone, Copy, Debug)]
pub struct Slice<'a> {
    pub track: Track,
    pub start: u64,
    pub end: u64,
    pub name: Name<'a>,
    pub cat: Cat,
    pub args: Args<'a>,
    pub flow: Flow,
}

/// An NVTX call, which opens or closes ranges rather than being one.
#[derive(Clone, Copy, Debug)]
pub enum Nvtx<'a> {
    /// A range pushed at nesting level `level` on the thread.
    Push {
        tid: u32,
        ts: u64,
        level: u32,
        name: Name<'a>,
    },
    /// Closes the thread's ranges from `level` inward.
    Pop {
        tid: u32,
        ts: u64,
        level: u32,
    },
    /// A range started with id `id` (it may end on another thread).
    Start {
        ts: u64,
        id: u64,
        name: Name<'a>,
    },
    End {
        ts: u64,
        id: u64,
    },
    Mark {
        tid: u32,
        ts: u64,
        name: Name<'a>,
    },
}

/// What an event shows on a timeline.
// Made and taken apart once per event on the stack: boxing the slice would allocate
// per event.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug)]
pub enum Shown<'a> {
    Slice(Slice<'a>),
    Nvtx(Nvtx<'a>),
    /// A device's description (its name for the device's tracks).
    Device(&'a fmt::Device),
    /// A thread's name.
    Thread {
        tid: u32,
        name: u32,
    },
    Nothing,
}

fn slice<'a>(track: Track, start: u64, end: u64, name: Name<'a>, cat: Cat) -> Slice<'a> {
    Slice {
        track,
        start,
        end: end.max(start),
        name,
        cat,
        args: Args::new(),
        flow: Flow::None,
    }
}

fn copy_name(kind: u8) -> &'static str {
    match CopyKind::from_u8(kind) {
        CopyKind::HtoD => "Memcpy HtoD",
        CopyKind::DtoH => "Memcpy DtoH",
        CopyKind::DtoD => "Memcpy DtoD",
        CopyKind::HtoH => "Memcpy HtoH",
        CopyKind::PtoP => "Memcpy PtoP",
        _ => "Memcpy",
    }
}

/// Whether an API call submits GPU work (the start of a launch arrow).
pub fn submits(a: &fmt::Api, name: &str) -> bool {
    crate::report::view::submits_gpu_work(a, name)
}

/// An event of a kind without a variant of its own, as its definition in the event
/// table has it: named by its kind, over its span (an instant for a point in time), on
/// its thread's track if it has a `tid` field (else the collector's), with its other
/// fields as arguments.
fn generic<'a>(cx: &TraceContext<'a>, e: &fmt::Event) -> Shown<'a> {
    let Some((start, end)) = e.span() else {
        return Shown::Nothing;
    };
    let mut s = slice(
        Track::Collector,
        start,
        end.unwrap_or(start),
        Name::Static(e.name()),
        Cat::Collector,
    );
    e.fields(&mut |k, v| match v {
        fmt::Value::U(x) if k == "tid" => (s.track, s.cat) = (Track::Thread(x as u32), Cat::Host),
        fmt::Value::U(x) => s.args.push(Arg::U(k, x)),
        fmt::Value::I(x) => s.args.push(Arg::I(k, x)),
        fmt::Value::Str(id) => s.args.push(Arg::S(k, cx.str(id))),
        fmt::Value::Array(&[a, b, c]) => s.args.push(Arg::Dim3(k, [a, b, c])),
        _ => {}
    });
    Shown::Slice(s)
}

/// How `ev` shows on a timeline.
pub fn describe<'a>(cx: &TraceContext<'a>, ev: &TraceEvent<'a>) -> Shown<'a> {
    use Arg::*;
    match *ev {
        TraceEvent::Device(d) => Shown::Device(d),
        TraceEvent::Thread { tid, name } => Shown::Thread { tid, name },
        TraceEvent::Kernel(_)
        | TraceEvent::Memcpy(_)
        | TraceEvent::Memset(_)
        | TraceEvent::Sync(_) => gpu_work(ev),
        TraceEvent::Memory(_) | TraceEvent::Clock { .. } => Shown::Nothing,
        TraceEvent::GpuEvent(e) => {
            let mut s = slice(
                Track::Nvml(e.device),
                e.ts,
                e.ts,
                Name::Static(fmt::gpu_event_name(e.kind)),
                Cat::Collector,
            );
            s.args.push(U("data", e.data));
            Shown::Slice(s)
        }
        // Facts are in the report.
        TraceEvent::Fact(_) => Shown::Nothing,
        // The samplers' readings (NVML's, the host CPU sampler's) are counters, written
        // from the loaded trace's tables with the process (`overlay::nvml_counters`,
        // `overlay::sampled_counters`): there they include what an environment file
        // gave the trace. The CPU limits are in the report's host section.
        TraceEvent::GpuSample(_)
        | TraceEvent::GpuProcess(_)
        | TraceEvent::ThreadCpu(_)
        | TraceEvent::ProcSample(_)
        | TraceEvent::MachineSample(_)
        | TraceEvent::CpuLimits(_) => Shown::Nothing,
        // GPU counter samples are counter tracks (overlay::sampled_counters).
        TraceEvent::CounterSample(_) => Shown::Nothing,
        // Python call sites are in the report's findings.
        TraceEvent::PyStack(_) | TraceEvent::CallSite(_) | TraceEvent::PySample(_) => {
            Shown::Nothing
        }
        TraceEvent::Other(e) => generic(cx, e),
        TraceEvent::Api(_)
        | TraceEvent::HostCopy(_)
        | TraceEvent::HostCall(_)
        | TraceEvent::HostAlloc(_) => host_call(cx, ev),
        TraceEvent::State { .. } | TraceEvent::Dropped { .. } => collector_record(cx, ev),
        TraceEvent::Nccl(_) | TraceEvent::NcclComm(_) => nccl_call(ev),
        TraceEvent::Nvtx(n) => nvtx_call(n),
    }
}

/// How GPU work (a kernel, copy or memset) or a CUDA sync record shows on a timeline.
fn gpu_work<'a>(ev: &TraceEvent<'a>) -> Shown<'a> {
    use Arg::*;
    match *ev {
        TraceEvent::Kernel(k) => {
            let mut s = slice(
                Track::Stream {
                    device: k.device,
                    stream: k.stream,
                },
                k.start,
                k.end,
                Name::Kernel(k.name),
                Cat::Kernel,
            );
            s.args.push(U("device", k.device as u64));
            s.args.push(U("stream", k.stream as u64));
            s.args.push(U("correlation", k.corr as u64));
            s.args.push(Dim3("grid", k.grid));
            s.args.push(Dim3("block", k.block));
            s.args.push(U("registers per thread", k.registers as u64));
            s.args.push(U(
                "shared memory",
                k.static_smem as u64 + k.dynamic_smem as u64,
            ));
            if k.graph_id != 0 {
                s.args.push(U("graph", k.graph_id as u64));
            }
            if k.corr != 0 {
                s.flow = Flow::Work(k.corr);
            }
            Shown::Slice(s)
        }
        TraceEvent::Memcpy(c) => {
            let mut s = slice(
                Track::Stream {
                    device: c.device,
                    stream: c.stream,
                },
                c.start,
                c.end,
                Name::Static(copy_name(c.copy_kind)),
                Cat::Memcpy,
            );
            s.args.push(U("device", c.device as u64));
            s.args.push(U("stream", c.stream as u64));
            s.args.push(U("correlation", c.corr as u64));
            s.args.push(U("bytes", c.bytes));
            s.args.push(S("src", MemKind::from_u8(c.src_kind).name()));
            s.args.push(S("dst", MemKind::from_u8(c.dst_kind).name()));
            s.args
                .push(U("async", (c.flags & fmt::MEMCPY_FLAG_ASYNC != 0) as u64));
            if c.corr != 0 {
                s.flow = Flow::Work(c.corr);
            }
            Shown::Slice(s)
        }
        TraceEvent::Memset(m) => {
            let mut s = slice(
                Track::Stream {
                    device: m.device,
                    stream: m.stream,
                },
                m.start,
                m.end,
                Name::Static("Memset"),
                Cat::Memset,
            );
            s.args.push(U("device", m.device as u64));
            s.args.push(U("stream", m.stream as u64));
            s.args.push(U("correlation", m.corr as u64));
            s.args.push(U("bytes", m.bytes));
            s.args.push(U("value", m.value as u64));
            if m.corr != 0 {
                s.flow = Flow::Work(m.corr);
            }
            Shown::Slice(s)
        }
        TraceEvent::Sync(y) => {
            let mut s = slice(
                Track::Sync,
                y.start,
                y.end,
                Name::Static(SyncKind::from_u8(y.kind).name()),
                Cat::Sync,
            );
            s.args.push(U("device", y.device as u64));
            if y.stream != u32::MAX {
                s.args.push(U("stream", y.stream as u64));
            }
            s.args.push(U("correlation", y.corr as u64));
            Shown::Slice(s)
        }
        _ => unreachable!("not GPU work or a sync record"),
    }
}

/// How a CUDA API call, or a call only the symbol hooks saw, shows on a timeline.
fn host_call<'a>(cx: &TraceContext<'a>, ev: &TraceEvent<'a>) -> Shown<'a> {
    use Arg::*;
    match *ev {
        TraceEvent::Api(a) => {
            let cat = if a.domain == fmt::DOMAIN_DRIVER {
                Cat::Driver
            } else {
                Cat::Runtime
            };
            let mut s = slice(Track::Thread(a.tid), a.start, a.end, Name::Str(a.name), cat);
            s.args.push(U("correlation", a.corr as u64));
            s.args.push(U("cbid", a.cbid as u64));
            if a.bytes > 0 {
                s.args.push(U("bytes", a.bytes));
            }
            if a.result != 0 {
                s.args.push(U("result", a.result as u64));
            }
            if a.corr != 0 && submits(a, cx.str(a.name)) {
                s.flow = Flow::Launch(a.corr);
            }
            Shown::Slice(s)
        }
        TraceEvent::HostCopy(c) => {
            // A call CUPTI recorded too: its API slice is already there.
            if c.flags & fmt::HOSTCOPY_FLAG_CUPTI_API != 0 {
                return Shown::Nothing;
            }
            let mut s = slice(
                Track::Thread(c.tid),
                c.start,
                c.end,
                Name::Static(fmt::hostcopy_api_name(c.api)),
                Cat::Host,
            );
            s.args.push(U("bytes", c.bytes));
            s.args
                .push(S("kind", CopyKind::from_u8(c.copy_kind).name()));
            s.args
                .push(S("host_memory", MemKind::from_u8(c.host_kind).name()));
            s.args.push(Hex("stream", c.stream));
            if c.result != 0 {
                s.args.push(U("result", c.result as u64));
            }
            Shown::Slice(s)
        }
        TraceEvent::HostCall(c) => {
            let (name, _) = fmt::hostcall_info(c.call);
            let mut s = slice(
                Track::Thread(c.tid),
                c.start,
                c.end,
                Name::Static(name),
                Cat::Host,
            );
            s.args.push(Hex("stream", c.stream));
            if c.result != 0 {
                s.args.push(U("result", c.result as u64));
            }
            Shown::Slice(s)
        }
        TraceEvent::HostAlloc(a) => {
            let mut s = slice(
                Track::Thread(a.tid),
                a.start,
                a.end,
                Name::Static(fmt::hostalloc_op_name(a.op)),
                Cat::Host,
            );
            s.args.push(U("bytes", a.bytes));
            s.args.push(Hex("ptr", a.ptr));
            if a.result != 0 {
                s.args.push(U("result", a.result as u64));
            }
            Shown::Slice(s)
        }
        _ => unreachable!("not a host call"),
    }
}

/// How an NCCL call or communicator call shows on a timeline.
fn nccl_call<'a>(ev: &TraceEvent<'a>) -> Shown<'a> {
    use Arg::*;
    match *ev {
        TraceEvent::Nccl(n) => {
            let mut s = slice(
                Track::Nccl(n.tid),
                n.start,
                n.end,
                Name::Static(fmt::nccl_op_name(n.op)),
                Cat::Nccl,
            );
            if n.datatype != fmt::NCCL_NO_DATATYPE {
                s.args.push(U("count", n.count));
                s.args.push(U("bytes", n.bytes));
                s.args.push(S("datatype", fmt::nccl_datatype(n.datatype).1));
            }
            if n.redop != fmt::NCCL_NO_REDOP {
                s.args.push(S("redop", fmt::nccl_redop_name(n.redop)));
            }
            if n.peer_or_root >= 0 {
                let key = if matches!(n.op, fmt::NCCL_SEND | fmt::NCCL_RECV) {
                    "peer"
                } else {
                    "root"
                };
                s.args.push(I(key, n.peer_or_root as i64));
            }
            if n.comm_id != 0 {
                s.args.push(Hex("comm_id", n.comm_id));
            }
            s.args.push(I("rank", n.rank as i64));
            s.args.push(I("nranks", n.nranks as i64));
            s.args.push(U("seq", n.seq));
            s.args.push(Hex("stream", n.stream));
            if n.result != 0 {
                s.args.push(U("result", n.result as u64));
            }
            Shown::Slice(s)
        }
        TraceEvent::NcclComm(n) => {
            let mut s = slice(
                Track::Nccl(n.tid),
                n.start,
                n.end,
                Name::Static(fmt::nccl_comm_op_name(n.op)),
                Cat::Nccl,
            );
            s.args.push(Hex("comm_id", n.comm_id));
            if n.parent_id != 0 {
                s.args.push(Hex("parent_id", n.parent_id));
                s.args.push(I("color", n.color as i64));
            }
            s.args.push(I("rank", n.rank as i64));
            s.args.push(I("nranks", n.nranks as i64));
            if n.result != 0 {
                s.args.push(U("result", n.result as u64));
            }
            Shown::Slice(s)
        }
        _ => unreachable!("not an NCCL call"),
    }
}

/// How the collector's state changes and drops show on a timeline.
fn collector_record<'a>(cx: &TraceContext<'a>, ev: &TraceEvent<'a>) -> Shown<'a> {
    use Arg::*;
    match *ev {
        TraceEvent::State { ts, state, reason } => {
            let name = fmt::CollectorState::from_u8(state).map_or("state", |s| s.name());
            let mut s = slice(Track::Collector, ts, ts, Name::Static(name), Cat::Collector);
            if reason != 0 {
                s.args.push(S("reason", cx.str(reason)));
            }
            Shown::Slice(s)
        }
        TraceEvent::Dropped { ts, source, count } => {
            let mut s = slice(
                Track::Collector,
                ts,
                ts,
                Name::Static("records dropped"),
                Cat::Collector,
            );
            s.args.push(U("count", count));
            s.args.push(U("source", source as u64));
            Shown::Slice(s)
        }
        _ => unreachable!("not a collector record"),
    }
}

/// The range an NVTX call opens or closes, or its mark (nothing for an unknown kind).
fn nvtx_call<'a>(n: &fmt::Nvtx) -> Shown<'a> {
    let name = Name::Str(n.text);
    Shown::Nvtx(match n.kind {
        fmt::NVTX_PUSH => Nvtx::Push {
            tid: n.tid,
            ts: n.ts,
            level: n.id as u32,
            name,
        },
        fmt::NVTX_POP => Nvtx::Pop {
            tid: n.tid,
            ts: n.ts,
            level: n.id as u32,
        },
        fmt::NVTX_START => Nvtx::Start {
            ts: n.ts,
            id: n.id,
            name,
        },
        fmt::NVTX_END => Nvtx::End { ts: n.ts, id: n.id },
        fmt::NVTX_MARK => Nvtx::Mark {
            tid: n.tid,
            ts: n.ts,
            name,
        },
        _ => return Shown::Nothing,
    })
}

/// The slice of a span of Python stack samples: named by the place, with the innermost
/// frame and the first sample's whole stack as arguments.
pub fn python_slice<'a>(p: &'a super::overlay::PySpan) -> Slice<'a> {
    let mut args = Args::new();
    args.push(Arg::U("samples", p.samples as u64));
    args.push(Arg::S("innermost", &p.innermost));
    args.push(Arg::S(
        "code",
        if p.user_code {
            "user"
        } else {
            "library (the stack kept ends before the user's code)"
        },
    ));
    args.push(Arg::S("first_sample_stack", &p.stack));
    Slice {
        track: Track::Python(p.tid),
        start: p.start,
        end: p.end.max(p.start),
        name: Name::Text(&p.place),
        cat: Cat::Python,
        args,
        flow: Flow::None,
    }
}

/// A track's name on a timeline (devices and threads are named by their own
/// descriptors).
pub fn track_name(t: Track) -> String {
    match t {
        Track::Stream { stream, .. } => format!("stream {stream}"),
        Track::Thread(tid) => format!("thread {tid}"),
        Track::Nvtx(_) => "NVTX".into(),
        Track::Nccl(_) => "NCCL".into(),
        Track::Python(tid) => format!("Python (sampled), thread {tid}"),
        Track::Sync => "CUDA synchronisation".into(),
        Track::Collector => "gputrace collector".into(),
        Track::Nvml(_) => "NVML events".into(),
        Track::Idle(_) => "why idle".into(),
        Track::Steps => "steps".into(),
        Track::Phases => "phases".into(),
        Track::Findings => "findings".into(),
    }
}

/// Keeps only the arrows with both ends: GPU work gets the end of an arrow when the
/// call that launched it was seen (calls come before their work in the stream); work
/// launched by calls that were not recorded (driver-API launches, graphs) gets none.
#[derive(Default)]
pub struct Flows {
    launched:
        std::collections::HashSet<u32, std::hash::BuildHasherDefault<crate::report::view::Fx>>,
}

impl Flows {
    /// Launches whose work never came are forgotten past this many.
    const MAX_OPEN: usize = 1 << 20;

    pub fn filter(&mut self, f: Flow) -> Flow {
        match f {
            Flow::Launch(c) => {
                if self.launched.len() >= Self::MAX_OPEN {
                    self.launched.clear();
                }
                self.launched.insert(c);
                f
            }
            Flow::Work(c) if self.launched.remove(&c) => f,
            Flow::Work(_) | Flow::None => Flow::None,
        }
    }
}

/// A CUDA graph replay as a slice on its stream's track, around its kernels: it starts
/// 1 ns before its first kernel and ends 1 ns after its last, so that every viewer nests
/// the kernels inside it whatever order it sorts equal times in.
pub fn replay_slice<'a>(r: &crate::report::view::Replay, name: &'a str) -> Slice<'a> {
    let mut s = slice(
        Track::Stream {
            device: r.device,
            stream: r.stream,
        },
        r.start.saturating_sub(1),
        r.end.saturating_add(1),
        Name::Text(name),
        Cat::Graph,
    );
    s.args.push(Arg::U("graph", r.graph_id as u64));
    s.args.push(Arg::U("kernels", r.kernels as u64));
    s.args.push(Arg::U("correlation", r.corr as u64));
    s.args.push(Arg::U("gaps inside (ns)", r.gap_ns()));
    s
}
