//! A trace loaded into typed, time-sorted tables.

use super::table::Table;
use gputrace_format::{self as fmt, Event, Meta, ReadError, ReadStats};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The name id a replay from a graph-level record has until `finish` names it.
const GRAPH_REPLAY_NAME: u32 = u32::MAX - 1;
/// The name a replay from a graph-level record (`GRAPH_TRACE`) has as a kernel.
pub const GRAPH_REPLAY_TEXT: &str = "CUDA graph replay (graph-level record)";

/// [`Trace`] from one list: its own fields as written, then one table per event kind
/// that is kept as it was recorded (`Vec<fmt::Kind>`, one record per `Event::Kind`). Each
/// table's line says its kind, how it is sorted once loaded, and its flags: `span` (its
/// records' `start`..`end` count in [`Trace::span`]) and `work` (a record of it means the
/// process used CUDA, see `job::did_no_gpu_work`). From the line follow the field, the
/// arm of [`Trace::add`], the census-sized reservation, the merge of a chunk decoded on
/// a worker, the sort, the span and the check for GPU work: adding such a table is one
/// line here.
macro_rules! trace_tables {
    (
        $(#[$m:meta])*
        pub struct $T:ident {
            $( $(#[$fm:meta])* pub $f:ident : $fty:ty, )*
        }
        tables {
            $( $(#[$tm:meta])* $t:ident : $V:ident, $sort:ident($key:expr) $(, $flag:ident)* ; )*
        }
    ) => {
        $(#[$m])*
        pub struct $T {
            $( $(#[$fm])* pub $f: $fty, )*
            $( $(#[$tm])* pub $t: Vec<fmt::$V>, )*
        }

        impl $T {
            /// Keeps a record of a kind with a table of its own (anything else: ignored).
            fn push_record(&mut self, e: Event) {
                match e {
                    $( Event::$V(x) => self.$t.push(x), )*
                    _ => {}
                }
            }

            /// Sizes each table for the kind's count in the file.
            fn reserve_records(&mut self, c: &fmt::Census) {
                $( self.$t.reserve_exact(c.of(&[fmt::$V::TAG])); )*
            }

            /// Appends a chunk's tables, in the order their records were read.
            fn append_records(&mut self, p: &mut $T) {
                $( self.$t.append(&mut p.$t); )*
            }

            /// Sorts every table by its key, and gives back what reading left unused.
            fn sort_records(&mut self) {
                $(
                    self.$t.$sort($key);
                    self.$t.shrink_to_fit();
                )*
            }

            /// Extends `b` with the tables flagged `span`.
            fn records_span(&self, b: &mut Bounds) {
                $( $( trace_tables!(@$flag span self.$t, b); )* )*
            }

            /// True when a table flagged `work` has a record.
            pub fn has_work_records(&self) -> bool {
                false $( $( || trace_tables!(@$flag work self.$t) )* )*
            }
        }
    };
    (@span span $v:expr, $b:ident) => { for x in &$v { $b.see(x.start, x.end) } };
    (@work span $v:expr, $b:ident) => {};
    (@span work $v:expr) => { false };
    (@work work $v:expr) => { !$v.is_empty() };
}

trace_tables! {
    /// One process's trace, decoded.
    #[derive(Debug, Default, Clone)]
    pub struct Trace {
        pub path: PathBuf,
        pub meta: Meta,
        pub stats: ReadStats,
        /// For a trace window of a dormant process (`gputrace attach`, a signal, a timer):
        /// its bounds, from the collector's state events.
        pub window: Option<(u64, u64)>,
        /// GPU records that began before the window opened: their start is clipped to it.
        pub clipped: u64,
        /// GPU records without timestamps (still running when collection stopped): dropped.
        pub incomplete: u64,
        /// [`Trace::span`], once computed (a walk over every table of intervals). Public
        /// only so that a trace can be built field by field with `..Default::default()`;
        /// code that changes a table after asking the span resets it (`OnceLock::new()`).
        pub span_cache: OnceLock<Option<(u64, u64)>>,
        /// Interned strings by id (index 0 is the empty string).
        pub strings: Vec<String>,
        pub devices: Vec<fmt::Device>,
        /// Kernels and API calls, the bulk of a trace, in compact rows (see
        /// [`super::table`]): read them by value (`iter`, `get`, `at`).
        pub kernels: Table<fmt::Kernel>,
        pub apis: Table<fmt::Api>,
        /// (ts, state, reason)
        pub states: Vec<(u64, u8, u32)>,
        /// (ts, source, count)
        pub drops: Vec<(u64, u8, u64)>,
        pub threads: HashMap<u32, u32>,
        /// (cupti, mono, real)
        pub clocks: Vec<(u64, u64, u64)>,
        /// NVTX ranges paired from the `nvtx` records.
        pub nvtx_ranges: Vec<NvtxRange>,
        /// How the process ended as its parent saw it (`exit 1`, `signal SIGKILL 9`), when
        /// `gputrace run` started it and wrote so in its environment file.
        pub parent_saw: Option<String>,
    }
    tables {
        // In place where stable order is not needed (a stable sort takes half a table
        // more memory), on keys that leave only records alike in every field we use in
        // arrival-independent order.
        memcpys: Memcpy, sort_unstable_by_key(|k| (k.start, k.end, k.corr, k.stream, k.bytes)), span, work;
        memsets: Memset, sort_unstable_by_key(|k| (k.start, k.end, k.corr, k.stream, k.bytes)), span, work;
        syncs: Sync, sort_by_key(|k| (k.start, k.end)), span, work;
        memory: Memory, sort_by_key(|k| k.ts), work;
        /// Symbol hooks: copies with their host memory classified by the pinned-memory
        /// registry. Those flagged `HOSTCOPY_FLAG_CUPTI_API` are calls CUPTI recorded as
        /// `Api` events too (see [`Trace::api_of_host_copy`]).
        host_copies: HostCopy, sort_by_key(|k| (k.start, k.end)), span, work;
        /// Symbol hooks: syncs, memsets and launches recorded while CUPTI's callbacks were
        /// not recording them (so never a second record of an `Api` event).
        host_calls: HostCall, sort_by_key(|k| (k.start, k.end)), span, work;
        /// Pinned host memory made and released.
        host_allocs: HostAlloc, sort_by_key(|k| (k.start, k.end)), work;
        /// NCCL calls and communicators.
        nccl: Nccl, sort_by_key(|k| (k.start, k.end)), span, work;
        nccl_comms: NcclComm, sort_by_key(|k| (k.start, k.end)), work;
        /// NVTX calls as recorded (stable: events of one thread with one timestamp keep
        /// their recorded order); the ranges they make are `nvtx_ranges`.
        nvtx: Nvtx, sort_by_key(|k| k.ts);
        /// Host samples (format 2.1), time-sorted: CUDA-issuing threads' CPU counters,
        /// the process tree and the traced process's threads, the machine, and the CPU
        /// limits (one per trace window).
        thread_cpu: ThreadCpu, sort_by_key(|x| (x.ts, x.tid));
        proc_samples: ProcSample, sort_by_key(|x| (x.ts, x.pid, x.flags));
        machine: MachineSample, sort_by_key(|x| x.ts);
        cpu_limits: CpuLimits, sort_by_key(|x| x.ts);
        /// The environment (see `crate::report::environment`): facts read once, NVML samples of each GPU
        /// and of the processes on it, driver-reported errors.
        facts: Fact, sort_by_key(|f| f.ts);
        gpu_samples: GpuSample, sort_by_key(|g| (g.ts, g.device));
        gpu_processes: GpuProcess, sort_by_key(|p| (p.ts, p.device, p.pid));
        gpu_events: GpuEvent, sort_by_key(|e| (e.ts, e.device));
        /// Python call sites (format 2.2): the stacks, by id (one definition per id, the
        /// first), and which host call each site is (sorted by thread, then start; see
        /// [`Trace::call_site`]).
        py_stacks: PyStack, sort_by_key(|s| s.id);
        call_sites: CallSite, sort_unstable_by_key(|c| (c.tid, c.ts, c.stack));
        /// GPU hardware counter samples (CUPTI PM sampling), by start time.
        counter_samples: CounterSample, sort_by_key(|c| (c.start, c.end, c.device));
        /// Periodic samples of the CUDA-issuing threads' Python stacks (format 2.3),
        /// sorted by thread, then time (see [`Trace::py_samples_in`]).
        py_samples: PySample, sort_unstable_by_key(|x| (x.tid, x.ts, x.stack));
        /// Stall reports (format 2.4), in time order: each `Stall`, its outstanding
        /// operations and the process's threads at that report (see `report::stalls`).
        stalls: Stall, sort_by_key(|x| (x.ts, x.id, x.seq)), work;
        stall_ops: StallOp, sort_by_key(|x| (x.stall, x.seq, x.ts)), work;
        stall_threads: StallThread, sort_by_key(|x| (x.stall, x.seq, x.ts));
        /// The GIL's holder over time, and what blocked threads and child processes were
        /// blocked in (tags 40, 41), time-sorted.
        gil: GilSample, sort_by_key(|x| x.ts);
        task_waits: TaskWait, sort_by_key(|x| (x.ts, x.tid));
        /// The tracer's own cost per thread and period (time in its CUPTI callbacks), by time.
        tracer_costs: TracerCost, sort_by_key(|x| (x.ts, x.tid));
    }
}

/// One NVTX range: a push/pop pair (same thread) or a start/end pair (same id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvtxRange {
    pub start: u64,
    /// The matching pop or end; for a range still open when the trace ends, the end of
    /// the trace, with `open` set.
    pub end: u64,
    pub open: bool,
    /// Thread that pushed or started it.
    pub tid: u32,
    /// Interned text.
    pub text: u32,
    /// Push/pop: nesting level from 0. Start/end ranges: `None`.
    pub level: Option<u32>,
    /// Start/end ranges: their id.
    pub id: Option<u64>,
    /// The text was cut at the collector's limit.
    pub truncated: bool,
}

/// NVTX records paired into ranges as they come in time order: pushes with pops per
/// thread (a pop of level L closes the open push of level L, and any deeper ones left
/// open by lost records), starts with ends by id. Pops and ends with nothing open (their
/// push came before the trace) are dropped. Holds only the ranges still open.
#[derive(Default)]
pub struct NvtxPairing {
    stacks: HashMap<u32, Vec<NvtxRange>>,
    started: HashMap<u64, NvtxRange>,
}

impl NvtxPairing {
    /// Takes the next record; the ranges it closes go to `closed`.
    pub fn add(&mut self, n: &fmt::Nvtx, closed: &mut Vec<NvtxRange>) {
        let r = NvtxRange {
            start: n.ts,
            end: n.ts,
            open: true,
            tid: n.tid,
            text: n.text,
            level: None,
            id: None,
            truncated: n.flags & fmt::NVTX_FLAG_TRUNCATED != 0,
        };
        match n.kind {
            fmt::NVTX_PUSH => self.stacks.entry(n.tid).or_default().push(NvtxRange {
                level: Some(n.id as u32),
                ..r
            }),
            fmt::NVTX_POP => {
                let st = self.stacks.entry(n.tid).or_default();
                if let Some(i) = st.iter().rposition(|x| x.level == Some(n.id as u32)) {
                    for mut x in st.drain(i..) {
                        x.end = n.ts;
                        x.open = false;
                        closed.push(x);
                    }
                }
            }
            fmt::NVTX_START => {
                self.started.insert(
                    n.id,
                    NvtxRange {
                        id: Some(n.id),
                        ..r
                    },
                );
            }
            fmt::NVTX_END => {
                if let Some(mut x) = self.started.remove(&n.id) {
                    x.end = n.ts;
                    x.open = false;
                    closed.push(x);
                }
            }
            _ => {}
        }
    }

    /// The ranges still open (their end is left at their start).
    pub fn into_open(self) -> impl Iterator<Item = NvtxRange> {
        self.stacks
            .into_values()
            .flatten()
            .chain(self.started.into_values())
    }
}

/// Most decode workers one trace uses: past a few, the reading thread (checksums, the
/// merge into the tables) is the limit.
pub const MAX_DECODE_WORKERS: usize = 4;

/// Decode workers for one trace when `files` are read at once: the cores shared out.
pub fn decode_workers(files: usize) -> usize {
    (crate::par::workers() / files.max(1)).clamp(1, MAX_DECODE_WORKERS)
}

impl Trace {
    /// Reads and decodes a trace file, its chunks decoded on [`decode_workers`] threads.
    pub fn load(path: &Path) -> Result<Trace, ReadError> {
        Self::load_with_progress(path, |_, _| {})
    }

    /// [`Trace::load`], calling `progress(bytes_read, bytes_total)` as it goes.
    pub fn load_with_progress(
        path: &Path,
        progress: impl FnMut(u64, u64),
    ) -> Result<Trace, ReadError> {
        Self::load_with(path, decode_workers(1), progress)
    }

    /// [`Trace::load_with_progress`] on `workers` decode threads (1: all on this one).
    /// The result is the same for any number.
    pub fn load_with(
        path: &Path,
        workers: usize,
        progress: impl FnMut(u64, u64),
    ) -> Result<Trace, ReadError> {
        Ok(Self::read(fmt::open_file(path)?, workers, progress))
    }

    /// Decodes a trace held in memory.
    pub fn from_bytes(path: &Path, data: &[u8]) -> Result<Trace, ReadError> {
        Self::from_bytes_with(path, data, decode_workers(1))
    }

    /// [`Trace::from_bytes`] on `workers` decode threads.
    pub fn from_bytes_with(path: &Path, data: &[u8], workers: usize) -> Result<Trace, ReadError> {
        Ok(Self::read(fmt::open(path, data)?, workers, |_, _| {}))
    }

    fn read(mut r: fmt::ChunkReader, workers: usize, progress: impl FnMut(u64, u64)) -> Trace {
        let mut t = Trace {
            path: r.path().to_path_buf(),
            meta: r.meta.clone(),
            strings: vec![String::new()],
            ..Default::default()
        };
        // A first pass over the chunk headers (and the tags of uncompressed chunks)
        // sizes every table exactly: no growth by doubling, no copy to shrink.
        t.reserve(&r.census(), workers);
        if workers <= 1 {
            r.for_each_event_with(|e| t.add(e), progress);
        } else {
            // Parts are reused: a fresh one per chunk would page-fault its tables in
            // again every time (they are megabytes, so freshly mapped).
            let pool: std::sync::Mutex<Vec<Part>> = Default::default();
            let parts = || pool.lock().unwrap_or_else(|e| e.into_inner());
            r.for_each_chunk_par(
                workers,
                || parts().pop().unwrap_or_default(),
                |mut p| {
                    t.absorb(&mut p);
                    parts().push(p);
                },
                progress,
            );
        }
        t.stats = r.stats.clone();
        t.finish();
        t
    }

    /// Sizes the tables for the census; their pages are mapped on `workers` threads.
    fn reserve(&mut self, c: &fmt::Census, workers: usize) {
        use fmt::*;
        self.kernels
            .reserve_exact(c.of(&[TAG_KERNEL, TAG_KERNEL_COMPACT]));
        self.apis.reserve_exact(c.of(&[TAG_API]));
        self.reserve_records(c);
        let spans = [
            page_span_of(self.kernels.allocations()[0]),
            page_span_of(self.kernels.allocations()[1]),
            page_span_of(self.apis.allocations()[0]),
            page_span_of(self.apis.allocations()[1]),
            page_span(&self.memcpys),
            page_span(&self.host_calls),
        ];
        prefault(&spans, workers);
    }

    /// Builds a trace from events (tests, synthetic traces).
    pub fn from_events(meta: Meta, events: impl IntoIterator<Item = Event>) -> Trace {
        let mut t = Trace {
            meta,
            strings: vec![String::new()],
            ..Default::default()
        };
        for e in events {
            t.add(e);
        }
        t.finish();
        t
    }

    fn add(&mut self, e: Event) {
        match e {
            Event::Str { id, text } => {
                let i = id as usize;
                // Ids come from the file: bound them so a corrupt id cannot exhaust memory.
                if i < (1 << 24) {
                    if self.strings.len() <= i {
                        self.strings.resize(i + 1, String::new());
                    }
                    self.strings[i] = text;
                }
            }
            Event::Clock {
                cupti_ns,
                mono_ns,
                real_ns,
            } => self.clocks.push((cupti_ns, mono_ns, real_ns)),
            // The first record of each device (a repeat falls to the last arm).
            Event::Device(d) if !self.devices.iter().any(|x| x.id == d.id) => self.devices.push(d),
            Event::Kernel(k) => self.kernels.push(k),
            Event::Api(a) => self.apis.push(a),
            Event::Dropped { ts, source, count } => self.drops.push((ts, source, count)),
            Event::State { ts, state, reason } => self.states.push((ts, state, reason)),
            Event::Thread { tid, name } => {
                self.threads.insert(tid, name);
            }
            // Graph-level tracing: a replay stands as one kernel of its graph, named in
            // `finish` (once the file's strings are all read).
            Event::GraphTrace(g) => self.kernels.push(fmt::Kernel {
                start: g.start,
                end: g.end,
                device: g.device,
                stream: g.stream,
                corr: g.corr,
                name: GRAPH_REPLAY_NAME,
                graph_id: g.graph_id,
                ..Default::default()
            }),
            // A kind kept as recorded goes to its table; one the analysis has no table
            // for is not kept (dump and the exports read it from the file, see
            // `export::stream`).
            e => self.push_record(e),
        }
    }

    /// Appends one chunk's events decoded on a worker, as [`Trace::add`] would have
    /// added them one by one.
    fn absorb(&mut self, p: &mut Part) {
        self.kernels.append(&mut p.tables.kernels);
        self.apis.append(&mut p.tables.apis);
        self.append_records(&mut p.tables);
        for e in p.rest.drain(..) {
            self.add(e);
        }
    }

    fn finish(&mut self) {
        // Replays from graph-level records get their name, after the file's strings.
        if self.kernels.iter().any(|k| k.name == GRAPH_REPLAY_NAME) {
            let id = self.strings.len() as u32;
            self.strings.push(GRAPH_REPLAY_TEXT.to_string());
            // (No kernel names itself with this id: it is past the file's strings.)
            self.kernels.map_shapes(|s| {
                if s.name() == GRAPH_REPLAY_NAME {
                    s.set_name(id)
                }
            });
        }
        // Calls by (start, end, tid, corr, cbid), kernels by (start, end, corr, stream,
        // name, device): only records alike in every field we use keep arrival order.
        self.kernels.sort();
        self.apis.sort();
        self.states.sort_by_key(|s| s.0);
        self.devices.sort_by_key(|d| d.id);
        self.sort_records();
        self.py_stacks.dedup_by_key(|s| s.id);
        self.nvtx_ranges = self.pair_nvtx();
        self.apply_window();
        // The tables grew by doubling while reading: give the slack back (up to half of
        // each table) so a large trace is held at its real size.
        self.kernels.seal();
        self.apis.seal();
        // Tables were sorted and clipped: the span is computed again when asked.
        self.span_cache = OnceLock::new();
    }

    /// A window trace covers [first Tracing, last Stopped]. GPU work that started
    /// before it is clipped to its start (and counted), never silently mis-timed; work
    /// CUPTI handed over without timestamps is dropped (and counted).
    fn apply_window(&mut self) {
        let before = self.kernels.len() + self.memcpys.len() + self.memsets.len();
        self.kernels.retain(|k| !untimed(k.start, k.end));
        self.memcpys.retain(|k| !untimed(k.start, k.end));
        self.memsets.retain(|k| !untimed(k.start, k.end));
        self.incomplete =
            (before - self.kernels.len() - self.memcpys.len() - self.memsets.len()) as u64;
        self.window = window_of(&self.meta, &self.states);
        let Some((lo, _)) = self.window else {
            return;
        };
        let mut clipped = 0;
        let mut clip = |start: &mut u64, end: u64| {
            let s = clip_start(*start, end, lo);
            if s != *start {
                *start = s;
                clipped += 1;
            }
        };
        for i in 0..self.kernels.len() {
            let (start, end) = (self.kernels.start(i), self.kernels.end(i));
            if clip_start(start, end, lo) != start {
                self.kernels.update(i, |k| clip(&mut k.start, k.end));
            }
        }
        for m in &mut self.memcpys {
            clip(&mut m.start, m.end);
        }
        for m in &mut self.memsets {
            clip(&mut m.start, m.end);
        }
        self.clipped = clipped;
    }

    /// Pairs pushes with pops per thread (a pop of level L closes the open push of
    /// level L, and any deeper ones left open by lost records) and starts with ends by
    /// id. Pops and ends with nothing open (their push came before the trace) are
    /// dropped; ranges open at the end run to the end of the trace.
    fn pair_nvtx(&self) -> Vec<NvtxRange> {
        let mut out = Vec::new();
        let mut pairing = NvtxPairing::default();
        for n in &self.nvtx {
            pairing.add(n, &mut out);
        }
        let mut left = pairing.into_open().peekable();
        if left.peek().is_some() {
            // (A walk over every table: only when some range is left open.)
            let last = self.nvtx.last().map(|n| n.ts).unwrap_or(0);
            let end = self.span().map(|s| s.1).unwrap_or(0).max(last);
            out.extend(left.map(|x| NvtxRange { end, ..x }));
        }
        out.sort_by_key(|r| (r.start, r.tid, r.level, r.id));
        out
    }

    /// True when the trace holds host samples (a 2.1 writer with its sampler on).
    pub fn has_host_samples(&self) -> bool {
        !self.thread_cpu.is_empty()
    }

    /// NVTX marks (instants), time-sorted.
    pub fn nvtx_marks(&self) -> impl Iterator<Item = &fmt::Nvtx> {
        self.nvtx.iter().filter(|n| n.kind == fmt::NVTX_MARK)
    }

    /// The CUPTI `Api` event a flagged `HostCopy` classifies: the same thread's call
    /// that overlaps it most. (CUPTI's callbacks run inside the hooked call, so its
    /// interval lies inside the copy's; overlap rather than containment tolerates the
    /// few tens of ns by which the hooks' TSC stamps, converted, may differ.)
    pub fn api_of_host_copy(&self, c: &fmt::HostCopy) -> Option<fmt::Api> {
        if c.flags & fmt::HOSTCOPY_FLAG_CUPTI_API == 0 {
            return None;
        }
        let overlap = |a: &fmt::Api| a.end.min(c.end).saturating_sub(a.start.max(c.start));
        // Calls of one thread do not overlap, so the one we want starts after the
        // previous call on this thread ended: within a short reach before our start.
        const REACH: u64 = 1_000_000;
        let from = self.apis.first_starting_at(c.start.saturating_sub(REACH));
        self.apis
            .iter_from(from)
            .take_while(|a| a.start < c.end)
            .filter(|a| a.tid == c.tid && overlap(a) > 0)
            .max_by_key(|a| (overlap(a), std::cmp::Reverse(a.start)))
    }

    pub fn str(&self, id: u32) -> &str {
        self.strings
            .get(id as usize)
            .map(|s| s.as_str())
            .unwrap_or("")
    }

    /// The Python stack the host call of thread `tid` that started at `start` was made
    /// from, if the trace has one.
    pub fn call_site(&self, tid: u32, start: u64) -> Option<&fmt::PyStack> {
        let i = self
            .call_sites
            .partition_point(|c| (c.tid, c.ts) < (tid, start));
        let c = self.call_sites.get(i)?;
        if (c.tid, c.ts) != (tid, start) {
            return None;
        }
        self.py_stack(c.stack)
    }

    /// The Python samples of thread `tid` taken in `[start, end)`.
    pub fn py_samples_in(&self, tid: u32, start: u64, end: u64) -> &[fmt::PySample] {
        let lo = self
            .py_samples
            .partition_point(|x| (x.tid, x.ts) < (tid, start));
        let hi = self
            .py_samples
            .partition_point(|x| (x.tid, x.ts) < (tid, end));
        &self.py_samples[lo..hi.max(lo)]
    }

    /// A Python stack by id.
    pub fn py_stack(&self, id: u32) -> Option<&fmt::PyStack> {
        let i = self.py_stacks.partition_point(|s| s.id < id);
        self.py_stacks.get(i).filter(|s| s.id == id)
    }

    pub fn thread_name(&self, tid: u32) -> &str {
        self.threads.get(&tid).map(|n| self.str(*n)).unwrap_or("")
    }

    /// Total records lost, by source.
    pub fn dropped(&self, source: u8) -> u64 {
        self.drops
            .iter()
            .filter(|d| d.1 == source)
            .map(|d| d.2)
            .sum()
    }

    /// First and last timestamps of any recorded interval.
    pub fn span(&self) -> Option<(u64, u64)> {
        *self.span_cache.get_or_init(|| self.compute_span())
    }

    fn compute_span(&self) -> Option<(u64, u64)> {
        let mut b = Bounds::default();
        for k in &self.kernels {
            b.see(k.start, k.end)
        }
        for a in &self.apis {
            b.see(a.start, a.end)
        }
        // With the other GPU records, the symbol hooks' host-side events (all a trace
        // has when CUPTI is blind) and NCCL's calls.
        self.records_span(&mut b);
        b.get()
    }

    /// Intervals in which the collector did not see GPU activity (another CUPTI user).
    /// An open window at the end runs to the end of the trace.
    pub fn blind_windows(&self) -> Vec<(u64, u64, String)> {
        blind_windows(
            &self.states,
            || self.span().map(|s| s.1).unwrap_or(0),
            |r| self.str(r),
        )
    }
}

/// A GPU record CUPTI handed over without timestamps (still running when collection
/// stopped): left out of the tables.
pub(crate) fn untimed(start: u64, end: u64) -> bool {
    start == 0 || end == 0
}

/// The bounds of a window trace (`gputrace attach`, a signal, a timer): from its first
/// Tracing state to its last Stopped one (`u64::MAX` while still open). `states` are
/// time-sorted. `None` for a trace of the whole run.
pub(crate) fn window_of(meta: &Meta, states: &[(u64, u8, u32)]) -> Option<(u64, u64)> {
    let is_window = meta.started_by.starts_with("attach")
        || meta.started_by.starts_with("signal")
        || meta.started_by.starts_with("timer");
    if !is_window {
        return None;
    }
    let tracing = fmt::CollectorState::Tracing as u8;
    let stopped = fmt::CollectorState::Stopped as u8;
    let lo = states.iter().find(|s| s.1 == tracing).map(|s| s.0)?;
    let hi = states
        .iter()
        .rev()
        .find(|s| s.1 == stopped && s.0 >= lo)
        .map(|s| s.0)
        .unwrap_or(u64::MAX);
    Some((lo, hi))
}

/// The start of GPU work in a window opened at `lo`: work running when it opened starts
/// at `lo`.
pub(crate) fn clip_start(start: u64, end: u64, lo: u64) -> u64 {
    if start < lo && end >= lo {
        lo
    } else {
        start
    }
}

/// One events chunk decoded on a worker thread: the record tables as a [`Trace`] holds
/// them, and the few events whose effect depends on their order across chunks (strings,
/// devices, threads, clocks, states, drops) kept in order for [`Trace::add`].
#[derive(Default)]
struct Part {
    tables: Trace,
    rest: Vec<Event>,
}

impl fmt::ChunkSink for Part {
    fn add(&mut self, e: Event) {
        match e {
            Event::Str { .. }
            | Event::Clock { .. }
            | Event::Device(_)
            | Event::Dropped { .. }
            | Event::State { .. }
            | Event::Thread { .. }
            // Kept out of the chunk's kernel table (deferred shapes index it).
            | Event::GraphTrace(_) => self.rest.push(e),
            e => self.tables.add(e),
        }
    }

    fn fill_kernel(&mut self, nth: usize, f: &mut dyn FnMut(&mut fmt::Kernel) -> bool) -> bool {
        let mut ok = false;
        if nth < self.tables.kernels.len() {
            self.tables.kernels.update(nth, |k| ok = f(k));
        }
        ok
    }
}

/// The whole pages of a large table's allocation, as an address range (empty for a
/// small table).
fn page_span<T>(v: &Vec<T>) -> (usize, usize) {
    page_span_of((v.as_ptr() as usize, v.capacity() * std::mem::size_of::<T>()))
}

/// [`page_span`] of an allocation given as (address, bytes).
fn page_span_of((start, bytes): (usize, usize)) -> (usize, usize) {
    const PAGE: usize = 4096;
    if bytes < 256 * PAGE {
        return (0, 0);
    }
    let lo = start.next_multiple_of(PAGE);
    let hi = (start + bytes) & !(PAGE - 1);
    (lo, hi.max(lo))
}

/// Maps the tables' pages before they are filled (`MADV_POPULATE_WRITE`, Linux 5.14):
/// the same zeroed pages without a page fault per 4 KiB while decoding. The kernel
/// zeroing them is most of the cost, so the ranges are shared among `workers` threads.
/// A hint: where the kernel refuses it, pages fault in as usual.
fn prefault(spans: &[(usize, usize)], workers: usize) {
    const MADV_POPULATE_WRITE: libc::c_int = 23;
    const PIECE: usize = 2 << 20;
    let populate = |(lo, hi): (usize, usize)| {
        if hi > lo {
            // SAFETY: [lo, hi) lies inside a table's allocation, mapped while the table
            // lives (the caller's borrow); populating pages for writing leaves their
            // contents as they are.
            unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, MADV_POPULATE_WRITE) };
        }
    };
    let total: usize = spans.iter().map(|(lo, hi)| hi - lo).sum();
    if workers <= 1 || total < 2 * PIECE {
        spans.iter().copied().for_each(populate);
        return;
    }
    // Cut into pieces of whole 2 MiB, dealt out round robin.
    let mut pieces = Vec::new();
    for &(lo, hi) in spans {
        let mut at = lo;
        while at < hi {
            let end = (at + PIECE).min(hi);
            pieces.push((at, end));
            at = end;
        }
    }
    std::thread::scope(|s| {
        for w in 0..workers {
            let pieces = &pieces;
            s.spawn(move || {
                pieces
                    .iter()
                    .skip(w)
                    .step_by(workers)
                    .copied()
                    .for_each(populate)
            });
        }
    });
}

/// Demangles a C++ kernel name; returns the input unchanged if it is not mangled.
pub fn demangle(name: &str) -> String {
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            let opts = cpp_demangle::DemangleOptions::new()
                .no_params()
                .no_return_type();
            if let Ok(s) = sym.demangle(&opts) {
                return s;
            }
        }
    }
    name.to_string()
}

/// The first and last timestamps of recorded intervals, as they come (what
/// [`Trace::span`] is over a trace's tables); an interval without a start (0) is left out.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    lo: u64,
    hi: u64,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            lo: u64::MAX,
            hi: 0,
        }
    }
}

impl Bounds {
    /// Takes the interval `[s, e]` (an end before its start counts as the start).
    pub fn see(&mut self, s: u64, e: u64) {
        if s > 0 {
            self.lo = self.lo.min(s);
            self.hi = self.hi.max(e.max(s));
        }
    }

    /// (first, last), or None when no interval was seen.
    pub fn get(&self) -> Option<(u64, u64)> {
        (self.lo <= self.hi).then_some((self.lo, self.hi))
    }
}

/// Intervals in which the collector did not see GPU activity, from its state changes
/// `(ts, state, reason)` in time order: (start, end, why). One still open at the end
/// runs to `end_of_trace()`.
pub fn blind_windows<'a>(
    states: &[(u64, u8, u32)],
    end_of_trace: impl FnOnce() -> u64,
    text: impl Fn(u32) -> &'a str,
) -> Vec<(u64, u64, String)> {
    let mut out = Vec::new();
    let mut open: Option<(u64, u32)> = None;
    for &(ts, st, reason) in states {
        match fmt::CollectorState::from_u8(st) {
            Some(fmt::CollectorState::Blind) if open.is_none() => open = Some((ts, reason)),
            Some(fmt::CollectorState::Blind) => {}
            Some(_) => {
                if let Some((s, r)) = open.take() {
                    out.push((s, ts, text(r).to_string()));
                }
            }
            None => {}
        }
    }
    if let Some((s, r)) = open {
        out.push((s, end_of_trace().max(s), text(r).to_string()));
    }
    out
}

/// Length of the union of intervals (need not be sorted).
pub fn union_len(iv: &mut [(u64, u64)]) -> u64 {
    iv.sort_unstable();
    let mut total = 0;
    let mut cur: Option<(u64, u64)> = None;
    for &(s, e) in iv.iter() {
        if e <= s {
            continue;
        }
        match cur {
            Some((cs, ce)) if s <= ce => cur = Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                cur = Some((s, e));
            }
            None => cur = Some((s, e)),
        }
    }
    if let Some((cs, ce)) = cur {
        total += ce - cs;
    }
    total
}

/// The value of an environment fact of the trace (`device`: an NVML index or
/// `gputrace_format::FACT_HOST`).
pub fn fact<'t>(t: &'t Trace, device: u32, key: &str) -> Option<&'t str> {
    t.facts
        .iter()
        .find(|f| f.device == device && t.str(f.key) == key)
        .map(|f| t.str(f.value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn union_merges_overlaps() {
        let mut v = vec![(10, 20), (15, 30), (40, 50), (0, 5), (50, 50)];
        assert_eq!(union_len(&mut v), 5 + 20 + 10);
        assert_eq!(union_len(&mut []), 0);
    }

    #[test]
    fn demangles_cpp_and_keeps_plain_names() {
        assert_eq!(demangle("_Z6kernelPfi"), "kernel");
        assert_eq!(demangle("my_triton_kernel"), "my_triton_kernel");
        assert_eq!(demangle("_Zgarbage"), "_Zgarbage");
    }

    fn nvtx(ts: u64, tid: u32, kind: u8, id: u64, text: u32) -> Event {
        Event::Nvtx(fmt::Nvtx {
            ts,
            tid,
            kind,
            flags: 0,
            id,
            text,
        })
    }

    #[test]
    fn nvtx_ranges_pair_per_thread_and_by_id() {
        let t = Trace::from_events(
            Meta::default(),
            vec![
                nvtx(10, 1, fmt::NVTX_PUSH, 0, 1),
                nvtx(11, 2, fmt::NVTX_PUSH, 0, 2),
                nvtx(12, 1, fmt::NVTX_PUSH, 1, 3),
                nvtx(13, 1, fmt::NVTX_POP, 1, 0),
                nvtx(14, 2, fmt::NVTX_POP, 0, 0),
                nvtx(15, 1, fmt::NVTX_START, 7, 4),
                // Ended on another thread.
                nvtx(16, 2, fmt::NVTX_END, 7, 0),
                // A pop whose push came before the trace: dropped.
                nvtx(17, 3, fmt::NVTX_POP, 0, 0),
                nvtx(18, 1, fmt::NVTX_POP, 0, 0),
                nvtx(19, 1, fmt::NVTX_PUSH, 0, 5),
                nvtx(20, 1, fmt::NVTX_MARK, 0, 6),
            ],
        );
        let got: Vec<_> = t
            .nvtx_ranges
            .iter()
            .map(|r| (r.start, r.end, r.tid, r.text, r.level, r.id, r.open))
            .collect();
        assert_eq!(
            got,
            vec![
                (10, 18, 1, 1, Some(0), None, false),
                (11, 14, 2, 2, Some(0), None, false),
                (12, 13, 1, 3, Some(1), None, false),
                (15, 16, 1, 4, None, Some(7), false),
                (19, 20, 1, 5, Some(0), None, true),
            ]
        );
        assert_eq!(t.nvtx_marks().count(), 1);
    }

    #[test]
    fn a_flagged_host_copy_finds_its_cupti_api_call() {
        let api = |start, end, tid| {
            Event::Api(fmt::Api {
                start,
                end,
                tid,
                cbid: 41,
                ..Default::default()
            })
        };
        let copy = |start, end, tid, flags| {
            Event::HostCopy(fmt::HostCopy {
                start,
                end,
                tid,
                flags,
                ..Default::default()
            })
        };
        let t = Trace::from_events(
            Meta::default(),
            vec![
                api(105, 190, 2),
                api(110, 180, 1),
                copy(100, 200, 1, fmt::HOSTCOPY_FLAG_CUPTI_API),
                copy(300, 400, 1, fmt::HOSTCOPY_FLAG_CUPTI_API),
                copy(100, 200, 1, 0),
            ],
        );
        assert_eq!(
            t.api_of_host_copy(&t.host_copies[0]).map(|a| a.start),
            Some(110)
        );
        // Stamps a little off still find the call.
        let t2 = Trace::from_events(
            Meta::default(),
            vec![
                api(1000, 2000, 1),
                api(3000, 4000, 1),
                copy(1010, 1990, 1, fmt::HOSTCOPY_FLAG_CUPTI_API),
            ],
        );
        assert_eq!(
            t2.api_of_host_copy(&t2.host_copies[0]).map(|a| a.start),
            Some(1000)
        );
        assert!(t.api_of_host_copy(&t.host_copies[1]).is_none());
        assert!(t.api_of_host_copy(&t.host_copies[2]).is_none());
        assert_eq!(t.span(), Some((100, 400)));
    }

    #[test]
    fn window_traces_clip_early_work_and_drop_untimed_records() {
        let k = |start, end| {
            Event::Kernel(fmt::Kernel {
                start,
                end,
                ..Default::default()
            })
        };
        let meta = Meta {
            started_by: "attach".into(),
            ..Default::default()
        };
        let t = Trace::from_events(
            meta,
            vec![
                Event::State {
                    ts: 1_000,
                    state: fmt::CollectorState::Tracing as u8,
                    reason: 0,
                },
                k(900, 1_200),
                k(1_300, 1_400),
                k(0, 0),
                Event::State {
                    ts: 2_000,
                    state: fmt::CollectorState::Stopped as u8,
                    reason: 0,
                },
            ],
        );
        assert_eq!(t.window, Some((1_000, 2_000)));
        assert_eq!(t.clipped, 1);
        assert_eq!(t.incomplete, 1);
        assert_eq!(t.kernels.len(), 2);
        assert_eq!(t.kernels.at(0).start, 1_000);
    }

    #[test]
    fn blind_windows_pair_up() {
        let t = Trace::from_events(
            Meta::default(),
            vec![
                Event::Str {
                    id: 1,
                    text: "profiler".into(),
                },
                Event::State {
                    ts: 100,
                    state: fmt::CollectorState::Blind as u8,
                    reason: 1,
                },
                Event::State {
                    ts: 300,
                    state: fmt::CollectorState::Tracing as u8,
                    reason: 0,
                },
            ],
        );
        assert_eq!(t.blind_windows(), vec![(100, 300, "profiler".to_string())]);
    }
}
