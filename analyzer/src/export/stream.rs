//! A trace's events in time order, read from its file in bounded memory, for the
//! event exporters.
//!
//! The order (the one `gputrace dump` has always written): by [`TraceEvent::ts`];
//! equal timestamps by kind (the order of [`TraceEvent`]'s variants), then as the
//! analysis sorts its tables (kernels by start, end, correlation id, stream, name and
//! device; copies and memsets by start, end, correlation id, stream and bytes; API calls
//! by start, end, thread, correlation id and callback id; the others by start and end),
//! then in file order.
//!
//! The file is not in that order: API calls and GPU records come from different
//! buffers, flushed at different times. So the events are read twice:
//! 1. An index: the small tables (strings, devices, thread names, collector states,
//!    drops, clock pairs) are kept, and for each chunk the earliest timestamp of its
//!    records.
//! 2. The records, into a reorder buffer: when a chunk begins, every buffered record
//!    earlier than the earliest timestamp of all the chunks still to come (none of
//!    them can hold anything before it) is written. A file written in time order
//!    (within the collector's flush period) goes through in one pass holding a few
//!    chunks' worth of records.
//!
//! A file far out of order would fill the buffer: at `2 x max_pending` records it
//! keeps the `max_pending` earliest and drops the rest, and another pass over the file
//! picks up from the earliest record dropped. Memory stays within `2 x max_pending`
//! records (about 104 bytes each; an NVML GPU sample, rare, another 96 on the heap)
//! besides the index, whatever the file; only the number of passes grows.

use super::api::{EventExporter, TraceContext, TraceEvent};
use crate::model::trace::{clip_start, untimed, window_of};
use gputrace_format::{self as fmt, ChunkReader, Event, Meta, ReadError, ReadStats};
use std::cell::Cell;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Records the reorder buffer keeps (it holds up to twice as many before dropping
/// the latest): 2^18 records, so at most 52 MiB.
pub const DEFAULT_MAX_PENDING: usize = 1 << 18;

/// Why streaming stopped.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// The trace could not be opened again for a later pass.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The output could not be written (a closed pipe, a full disk).
    #[error("cannot write the output: {0}")]
    Write(#[source] io::Error),
}

/// What a stream did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Passes over the file after the index (1 for a file in time order).
    pub passes: u32,
    /// Events handed to the exporter.
    pub events: u64,
    /// Most records held in the reorder buffer at once.
    pub peak_pending: usize,
    /// GPU records that began before a trace window opened: handed over with their
    /// start clipped to it.
    pub clipped: u64,
    /// GPU records without timestamps (still running when collection stopped): left out.
    pub incomplete: u64,
}

/// Where the chunks come from, opened once per pass.
enum Source<'a> {
    File(PathBuf),
    Mem(&'a Path, &'a [u8]),
}

impl<'a> Source<'a> {
    fn open(&self) -> Result<ChunkReader<'a>, ReadError> {
        match self {
            Source::File(p) => fmt::open_file(p),
            Source::Mem(p, d) => fmt::open(p, d),
        }
    }
}

/// A trace file indexed for streaming its events in time order.
pub struct EventStream<'a> {
    src: Source<'a>,
    path: PathBuf,
    meta: Meta,
    stats: ReadStats,
    strings: HashMap<u32, String>,
    /// Sorted by id; the first record of each id.
    devices: Vec<fmt::Device>,
    /// (tid, name) by tid; the last name recorded.
    threads: Vec<(u32, u32)>,
    /// Python stacks by id; the first definition of each.
    py_stacks: Vec<fmt::PyStack>,
    /// Time-sorted (stable).
    states: Vec<(u64, u8, u32)>,
    drops: Vec<(u64, u8, u64)>,
    clocks: Vec<(u64, u64, u64)>,
    window: Option<(u64, u64)>,
    /// `floor[i]`: no record in chunk i or after it starts before this.
    floor: Vec<u64>,
    /// Events in the file when it was indexed (a file still being written is read
    /// only that far).
    events: u64,
}

/// Calls `f(chunk, seq, event)` for every event of the reader: `chunk` counts the
/// reader's chunk boundaries, `seq` the events. Both are the same on every pass.
fn each_event(mut r: ChunkReader<'_>, mut f: impl FnMut(usize, u64, Event)) -> ReadStats {
    let chunk = Cell::new(0usize);
    let mut seq = 0u64;
    r.for_each_event_with(
        |e| {
            f(chunk.get(), seq, e);
            seq += 1;
        },
        |_, _| chunk.set(chunk.get() + 1),
    );
    r.stats
}

impl EventStream<'static> {
    /// Opens and indexes a trace file (one pass over it).
    pub fn open(path: &Path) -> Result<EventStream<'static>, ReadError> {
        EventStream::index(Source::File(path.to_path_buf()))
    }
}

impl<'a> EventStream<'a> {
    /// Indexes a trace held in memory.
    pub fn from_bytes(path: &'a Path, data: &'a [u8]) -> Result<EventStream<'a>, ReadError> {
        EventStream::index(Source::Mem(path, data))
    }

    fn index(src: Source<'a>) -> Result<EventStream<'a>, ReadError> {
        let r = src.open()?;
        let mut s = EventStream {
            path: r.path().to_path_buf(),
            meta: r.meta.clone(),
            src,
            stats: ReadStats::default(),
            strings: HashMap::new(),
            devices: Vec::new(),
            threads: Vec::new(),
            py_stacks: Vec::new(),
            states: Vec::new(),
            drops: Vec::new(),
            clocks: Vec::new(),
            window: None,
            floor: Vec::new(),
            events: 0,
        };
        let mut threads = HashMap::new();
        let mut n = 0;
        s.stats = each_event(r, |chunk, _, e| {
            n += 1;
            if s.floor.len() <= chunk {
                s.floor.resize(chunk + 1, u64::MAX);
            }
            let ts = match e {
                Event::Str { id, text } => {
                    // As the analysis does: a corrupt id is ignored, not stored.
                    if id < (1 << 24) {
                        s.strings.insert(id, text);
                    }
                    return;
                }
                Event::Device(d) => {
                    if !s.devices.iter().any(|x| x.id == d.id) {
                        s.devices.push(d);
                    }
                    return;
                }
                Event::Thread { tid, name } => {
                    threads.insert(tid, name);
                    return;
                }
                Event::PyStack(st) => {
                    s.py_stacks.push(st);
                    return;
                }
                Event::State { ts, state, reason } => {
                    s.states.push((ts, state, reason));
                    return;
                }
                Event::Dropped { ts, source, count } => {
                    s.drops.push((ts, source, count));
                    return;
                }
                Event::Clock {
                    cupti_ns,
                    mono_ns,
                    real_ns,
                } => {
                    s.clocks.push((cupti_ns, mono_ns, real_ns));
                    return;
                }
                e => match Rec::of(e) {
                    // A window only ever moves a start later: the raw start bounds it.
                    Some(r) => r.raw_ts(),
                    None => return,
                },
            };
            s.floor[chunk] = s.floor[chunk].min(ts);
        });
        s.events = n;
        s.devices.sort_by_key(|d| d.id);
        s.threads = threads.into_iter().collect();
        s.threads.sort_unstable();
        s.py_stacks.sort_by_key(|x| x.id);
        s.py_stacks.dedup_by_key(|x| x.id);
        s.states.sort_by_key(|x| x.0);
        s.drops.sort_by_key(|x| x.0);
        s.clocks.sort_by_key(|x| x.2);
        s.window = window_of(&s.meta, &s.states);
        // Chunk i's floor becomes the least start in chunks i.. (one past the last: none).
        s.floor.push(u64::MAX);
        for i in (0..s.floor.len() - 1).rev() {
            s.floor[i] = s.floor[i].min(s.floor[i + 1]);
        }
        Ok(s)
    }

    /// Events in the file when it was indexed (what [`EventStream::write`] goes through).
    pub fn events(&self) -> u64 {
        self.events
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    /// What reading the file found (truncation, corruption), as [`crate::Trace`] has it.
    pub fn read_stats(&self) -> &ReadStats {
        &self.stats
    }

    /// The trace window's bounds, for a window trace (as [`crate::Trace`] has them).
    pub fn window(&self) -> Option<(u64, u64)> {
        self.window
    }

    /// An interned string by id ("" for an id never defined).
    pub fn str(&self, id: u32) -> &str {
        self.strings.get(&id).map_or("", |s| s.as_str())
    }

    /// Hands every event to `exporter` (between its `begin_trace` and `end_trace`), in
    /// time order, holding at most `2 x max_pending` records (at least 1) at a time.
    pub fn write(
        &self,
        max_pending: usize,
        exporter: &mut dyn EventExporter,
        out: &mut dyn Write,
    ) -> Result<StreamStats, StreamError> {
        let max_pending = max_pending.max(1);
        let cx = TraceContext::new(&self.path, &self.meta, &self.strings);
        let mut w = Writer {
            cx: &cx,
            exporter,
            out,
            small: self.small_events(),
            next_small: 0,
            stats: StreamStats::default(),
            failed: None,
        };
        w.exporter
            .begin_trace(&cx, w.out)
            .map_err(StreamError::Write)?;
        let lo = self.window.map(|w| w.0);
        // Records below `from` were written by an earlier pass.
        let mut from: Option<Key> = None;
        loop {
            w.stats.passes += 1;
            let mut pending: Vec<Entry> = Vec::new();
            // The earliest record this pass left for a later one.
            let mut cutoff: Option<Key> = None;
            let mut at_chunk = 0;
            each_event(self.src.open()?, |chunk, seq, e| {
                if w.failed.is_some() || seq >= self.events {
                    return;
                }
                if chunk != at_chunk {
                    at_chunk = chunk;
                    let floor = self.floor.get(chunk).copied().unwrap_or(u64::MAX);
                    w.flush(&mut pending, lo, |k| k.ts < floor);
                }
                let Some(rec) = Rec::of(e) else { return };
                let Some(entry) = Entry::new(rec, seq, lo) else {
                    if w.stats.passes == 1 {
                        w.stats.incomplete += 1;
                    }
                    return;
                };
                let key = entry.key(lo);
                if from.is_some_and(|f| key < f) || cutoff.is_some_and(|c| key >= c) {
                    return;
                }
                pending.push(entry);
                w.stats.peak_pending = w.stats.peak_pending.max(pending.len());
                if pending.len() >= 2 * max_pending {
                    sort(&mut pending, lo);
                    let first_left = pending[max_pending].key(lo);
                    cutoff = Some(cutoff.map_or(first_left, |c| c.min(first_left)));
                    pending.truncate(max_pending);
                }
            });
            // Everything below the cutoff has been seen: all of it can go.
            w.flush(&mut pending, lo, |_| true);
            if let Some(e) = w.failed.take() {
                return Err(StreamError::Write(e));
            }
            match cutoff {
                Some(c) => from = Some(c),
                None => break,
            }
        }
        w.small_until(None).map_err(StreamError::Write)?;
        w.exporter
            .end_trace(&cx, w.out)
            .map_err(StreamError::Write)?;
        Ok(w.stats)
    }

    /// The events of the small tables, in output order.
    fn small_events(&self) -> Vec<(Key, TraceEvent<'_>)> {
        let mut v = Vec::new();
        let key = |ts, kind, i: usize| Key {
            ts,
            kind,
            tie: [0; 4],
            seq: i as u64,
        };
        for (i, d) in self.devices.iter().enumerate() {
            v.push((key(0, Kind::Device, i), TraceEvent::Device(d)));
        }
        for (i, &(ts, state, reason)) in self.states.iter().enumerate() {
            let e = TraceEvent::State { ts, state, reason };
            v.push((key(ts, Kind::State, i), e));
        }
        for (i, &(ts, source, count)) in self.drops.iter().enumerate() {
            let e = TraceEvent::Dropped { ts, source, count };
            v.push((key(ts, Kind::Dropped, i), e));
        }
        for (i, &(cupti_ns, mono_ns, real_ns)) in self.clocks.iter().enumerate() {
            let e = TraceEvent::Clock {
                cupti_ns,
                mono_ns,
                real_ns,
            };
            v.push((key(real_ns, Kind::Clock, i), e));
        }
        for (i, &(tid, name)) in self.threads.iter().enumerate() {
            v.push((key(0, Kind::Thread, i), TraceEvent::Thread { tid, name }));
        }
        for (i, st) in self.py_stacks.iter().enumerate() {
            v.push((key(0, Kind::PyStack, i), TraceEvent::PyStack(st)));
        }
        v.sort_by_key(|x| x.0);
        v
    }
}

/// The output side of a stream: the small tables' events merged in as records go out.
struct Writer<'s, 'c> {
    cx: &'c TraceContext<'c>,
    exporter: &'s mut dyn EventExporter,
    out: &'s mut dyn Write,
    small: Vec<(Key, TraceEvent<'c>)>,
    next_small: usize,
    stats: StreamStats,
    /// The first write error: the rest of the pass is skipped.
    failed: Option<io::Error>,
}

impl Writer<'_, '_> {
    /// Writes the small tables' events that come before `key` (all of them: `None`).
    fn small_until(&mut self, key: Option<&Key>) -> io::Result<()> {
        while let Some((k, e)) = self.small.get(self.next_small) {
            if key.is_some_and(|key| k >= key) {
                break;
            }
            self.exporter.event(self.cx, e, self.out)?;
            self.stats.events += 1;
            self.next_small += 1;
        }
        Ok(())
    }

    /// Sorts the buffer and writes its records that `ready` lets go, in order.
    fn flush(&mut self, pending: &mut Vec<Entry>, lo: Option<u64>, ready: impl Fn(&Key) -> bool) {
        if self.failed.is_some() || pending.is_empty() {
            return;
        }
        sort(pending, lo);
        let n = pending.partition_point(|e| ready(&e.key(lo)));
        for e in &pending[..n] {
            let key = e.key(lo);
            if e.rec.gpu_span().is_some_and(|(s, _)| s != key.ts) {
                self.stats.clipped += 1;
            }
            let r = self.small_until(Some(&key)).and_then(|_| {
                self.stats.events += 1;
                e.rec
                    .with_event(key.ts, |ev| self.exporter.event(self.cx, ev, self.out))
            });
            if let Err(err) = r {
                self.failed = Some(err);
                pending.clear();
                return;
            }
        }
        pending.drain(..n);
    }
}

/// Sorts records by their key: in place (keys are unique, so any sort gives the one
/// order), taking no memory besides the buffer's.
fn sort(v: &mut [Entry], lo: Option<u64>) {
    v.sort_unstable_by(|a, b| a.cmp_key(b, lo));
}

/// Kinds of events, in the order equal timestamps are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Device,
    Kernel,
    Memcpy,
    Memset,
    Sync,
    Memory,
    Api,
    State,
    Dropped,
    Clock,
    HostCopy,
    HostCall,
    HostAlloc,
    Nccl,
    NcclComm,
    Nvtx,
    Fact,
    GpuSample,
    GpuProcess,
    GpuEvent,
    ThreadCpu,
    ProcSample,
    MachineSample,
    CpuLimits,
    CounterSample,
    Thread,
    CallSite,
    PyStack,
    PySample,
    /// Kinds without a variant of their own ([`TraceEvent::Other`]).
    Other,
}

/// Where an event goes in the output: timestamp, kind, its table's sort key, then its
/// place in the file (unique, so keys never tie).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    ts: u64,
    kind: Kind,
    tie: [u64; 4],
    seq: u64,
}

/// A record of one of the large tables, as read.
#[derive(Clone, Debug)]
enum Rec {
    Kernel(fmt::Kernel),
    Memcpy(fmt::Memcpy),
    Memset(fmt::Memset),
    Sync(fmt::Sync),
    Memory(fmt::Memory),
    Api(fmt::Api),
    HostCopy(fmt::HostCopy),
    HostCall(fmt::HostCall),
    HostAlloc(fmt::HostAlloc),
    Nccl(fmt::Nccl),
    NcclComm(fmt::NcclComm),
    Nvtx(fmt::Nvtx),
    Fact(fmt::Fact),
    /// Boxed: as large as two other records (NVML samples are few: one per GPU per
    /// sampling period).
    GpuSample(Box<fmt::GpuSample>),
    GpuProcess(fmt::GpuProcess),
    GpuEvent(fmt::GpuEvent),
    ThreadCpu(fmt::ThreadCpu),
    ProcSample(fmt::ProcSample),
    /// Boxed, as GPU samples (one every 100 ms).
    MachineSample(Box<fmt::MachineSample>),
    CpuLimits(Box<fmt::CpuLimits>),
    CallSite(fmt::CallSite),
    /// Boxed, as GPU samples.
    CounterSample(Box<fmt::CounterSample>),
    PySample(fmt::PySample),
    /// A kind without a variant of its own.
    Other(Box<Event>),
}

fn pair(hi: u32, lo: u32) -> u64 {
    (hi as u64) << 32 | lo as u64
}

impl Rec {
    fn of(e: Event) -> Option<Rec> {
        Some(match e {
            Event::Kernel(k) => Rec::Kernel(k),
            Event::Memcpy(c) => Rec::Memcpy(c),
            Event::Memset(s) => Rec::Memset(s),
            Event::Sync(s) => Rec::Sync(s),
            Event::Memory(m) => Rec::Memory(m),
            Event::Api(a) => Rec::Api(a),
            Event::HostCopy(c) => Rec::HostCopy(c),
            Event::HostCall(c) => Rec::HostCall(c),
            Event::HostAlloc(a) => Rec::HostAlloc(a),
            Event::Nccl(n) => Rec::Nccl(n),
            Event::NcclComm(n) => Rec::NcclComm(n),
            Event::Nvtx(n) => Rec::Nvtx(n),
            Event::Fact(f) => Rec::Fact(f),
            Event::GpuSample(g) => Rec::GpuSample(Box::new(g)),
            Event::GpuProcess(p) => Rec::GpuProcess(p),
            Event::GpuEvent(e) => Rec::GpuEvent(e),
            Event::ThreadCpu(x) => Rec::ThreadCpu(x),
            Event::ProcSample(x) => Rec::ProcSample(x),
            Event::MachineSample(x) => Rec::MachineSample(Box::new(x)),
            Event::CpuLimits(x) => Rec::CpuLimits(Box::new(x)),
            Event::CallSite(c) => Rec::CallSite(c),
            Event::CounterSample(x) => Rec::CounterSample(Box::new(x)),
            Event::PySample(x) => Rec::PySample(x),
            Event::Str { .. }
            | Event::PyStack(_)
            | Event::Clock { .. }
            | Event::Device(_)
            | Event::Dropped { .. }
            | Event::State { .. }
            | Event::Thread { .. } => return None,
            #[allow(unreachable_patterns)]
            e => Rec::Other(Box::new(e)),
        })
    }

    /// The GPU work's (start, end), for the records a window clips.
    fn gpu_span(&self) -> Option<(u64, u64)> {
        match self {
            Rec::Kernel(k) => Some((k.start, k.end)),
            Rec::Memcpy(c) => Some((c.start, c.end)),
            Rec::Memset(s) => Some((s.start, s.end)),
            _ => None,
        }
    }

    /// The timestamp as recorded (before any window clipping).
    fn raw_ts(&self) -> u64 {
        match self {
            Rec::Kernel(k) => k.start,
            Rec::Memcpy(c) => c.start,
            Rec::Memset(s) => s.start,
            Rec::Sync(s) => s.start,
            Rec::Memory(m) => m.ts,
            Rec::Api(a) => a.start,
            Rec::HostCopy(c) => c.start,
            Rec::HostCall(c) => c.start,
            Rec::HostAlloc(a) => a.start,
            Rec::Nccl(n) => n.start,
            Rec::NcclComm(n) => n.start,
            Rec::Nvtx(n) => n.ts,
            Rec::Fact(f) => f.ts,
            Rec::GpuSample(g) => g.ts,
            Rec::GpuProcess(p) => p.ts,
            Rec::GpuEvent(e) => e.ts,
            Rec::ThreadCpu(x) => x.ts,
            Rec::ProcSample(x) => x.ts,
            Rec::MachineSample(x) => x.ts,
            Rec::CpuLimits(x) => x.ts,
            Rec::CallSite(c) => c.ts,
            Rec::CounterSample(x) => x.start,
            Rec::PySample(x) => x.ts,
            Rec::Other(e) => e.ts().unwrap_or(0),
        }
    }

    /// The kind, and the key the analysis sorts this record's table by (on the
    /// recorded start).
    fn kind_tie(&self) -> (Kind, [u64; 4]) {
        match self {
            Rec::Kernel(k) => (
                Kind::Kernel,
                [
                    k.start,
                    k.end,
                    pair(k.corr, k.stream),
                    pair(k.name, k.device),
                ],
            ),
            Rec::Memcpy(c) => (
                Kind::Memcpy,
                [c.start, c.end, pair(c.corr, c.stream), c.bytes],
            ),
            Rec::Memset(s) => (
                Kind::Memset,
                [s.start, s.end, pair(s.corr, s.stream), s.bytes],
            ),
            Rec::Sync(s) => (Kind::Sync, [s.start, s.end, 0, 0]),
            Rec::Memory(m) => (Kind::Memory, [m.ts, 0, 0, 0]),
            Rec::Api(a) => (
                Kind::Api,
                [a.start, a.end, pair(a.tid, a.corr), a.cbid as u64],
            ),
            Rec::HostCopy(c) => (Kind::HostCopy, [c.start, c.end, 0, 0]),
            Rec::HostCall(c) => (Kind::HostCall, [c.start, c.end, 0, 0]),
            Rec::HostAlloc(a) => (Kind::HostAlloc, [a.start, a.end, 0, 0]),
            Rec::Nccl(n) => (Kind::Nccl, [n.start, n.end, 0, 0]),
            Rec::NcclComm(n) => (Kind::NcclComm, [n.start, n.end, 0, 0]),
            Rec::Nvtx(n) => (Kind::Nvtx, [n.ts, 0, 0, 0]),
            Rec::Fact(f) => (Kind::Fact, [f.ts, 0, 0, 0]),
            Rec::GpuSample(g) => (Kind::GpuSample, [g.ts, g.device as u64, 0, 0]),
            Rec::GpuProcess(p) => (Kind::GpuProcess, [p.ts, p.device as u64, p.pid as u64, 0]),
            Rec::GpuEvent(e) => (Kind::GpuEvent, [e.ts, e.device as u64, 0, 0]),
            Rec::ThreadCpu(x) => (Kind::ThreadCpu, [x.ts, x.tid as u64, 0, 0]),
            Rec::ProcSample(x) => (Kind::ProcSample, [x.ts, x.pid as u64, x.flags as u64, 0]),
            Rec::MachineSample(x) => (Kind::MachineSample, [x.ts, 0, 0, 0]),
            Rec::CpuLimits(x) => (Kind::CpuLimits, [x.ts, 0, 0, 0]),
            Rec::CallSite(c) => (Kind::CallSite, [c.ts, c.tid as u64, c.stack as u64, 0]),
            Rec::CounterSample(x) => (Kind::CounterSample, [x.start, x.end, x.device as u64, 0]),
            Rec::PySample(x) => (Kind::PySample, [x.tid as u64, x.ts, x.stack as u64, 0]),
            Rec::Other(e) => {
                let (start, end) = e.span().unwrap_or_default();
                (Kind::Other, [e.tag() as u64, start, end.unwrap_or(0), 0])
            }
        }
    }

    /// Calls `f` with the record as exporters see it: GPU work started at `ts` (its
    /// start clipped to the window).
    fn with_event<R>(&self, ts: u64, f: impl FnOnce(&TraceEvent<'_>) -> R) -> R {
        match self {
            Rec::Kernel(k) => f(&TraceEvent::Kernel(&fmt::Kernel { start: ts, ..*k })),
            Rec::Memcpy(c) => f(&TraceEvent::Memcpy(&fmt::Memcpy { start: ts, ..*c })),
            Rec::Memset(s) => f(&TraceEvent::Memset(&fmt::Memset { start: ts, ..*s })),
            Rec::Sync(s) => f(&TraceEvent::Sync(s)),
            Rec::Memory(m) => f(&TraceEvent::Memory(m)),
            Rec::Api(a) => f(&TraceEvent::Api(a)),
            Rec::HostCopy(c) => f(&TraceEvent::HostCopy(c)),
            Rec::HostCall(c) => f(&TraceEvent::HostCall(c)),
            Rec::HostAlloc(a) => f(&TraceEvent::HostAlloc(a)),
            Rec::Nccl(n) => f(&TraceEvent::Nccl(n)),
            Rec::NcclComm(n) => f(&TraceEvent::NcclComm(n)),
            Rec::Nvtx(n) => f(&TraceEvent::Nvtx(n)),
            Rec::Fact(x) => f(&TraceEvent::Fact(x)),
            Rec::GpuSample(g) => f(&TraceEvent::GpuSample(g)),
            Rec::GpuProcess(p) => f(&TraceEvent::GpuProcess(p)),
            Rec::GpuEvent(e) => f(&TraceEvent::GpuEvent(e)),
            Rec::ThreadCpu(x) => f(&TraceEvent::ThreadCpu(x)),
            Rec::ProcSample(x) => f(&TraceEvent::ProcSample(x)),
            Rec::MachineSample(x) => f(&TraceEvent::MachineSample(x)),
            Rec::CpuLimits(x) => f(&TraceEvent::CpuLimits(x)),
            Rec::CallSite(c) => f(&TraceEvent::CallSite(c)),
            Rec::CounterSample(x) => f(&TraceEvent::CounterSample(x)),
            Rec::PySample(x) => f(&TraceEvent::PySample(x)),
            Rec::Other(e) => f(&TraceEvent::Other(e)),
        }
    }
}

/// A record in the reorder buffer, its place in the file, and where it sorts (kept:
/// the buffer is sorted at every chunk, and computing it is a match on the record).
struct Entry {
    at: u64,
    seq: u64,
    rec: Rec,
}

impl Entry {
    /// `None` for GPU work without timestamps (left out, as in the analysis). `lo`: the
    /// start of the trace's window, if any.
    fn new(rec: Rec, seq: u64, lo: Option<u64>) -> Option<Entry> {
        let at = match (rec.gpu_span(), lo) {
            (Some((s, e)), _) if untimed(s, e) => return None,
            (Some((s, e)), Some(lo)) => clip_start(s, e, lo),
            _ => rec.raw_ts(),
        };
        Some(Entry { at, seq, rec })
    }

    /// Where it sorts: its start, for GPU work clipped to a window opened at `lo`.
    fn ts(&self, _lo: Option<u64>) -> u64 {
        self.at
    }

    fn key(&self, lo: Option<u64>) -> Key {
        let (kind, tie) = self.rec.kind_tie();
        Key {
            ts: self.ts(lo),
            kind,
            tie,
            seq: self.seq,
        }
    }

    fn cmp_key(&self, other: &Entry, lo: Option<u64>) -> Ordering {
        // Most records differ in time: compare the rest only when they do not.
        self.ts(lo)
            .cmp(&other.ts(lo))
            .then_with(|| self.key(lo).cmp(&other.key(lo)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffered_record_is_small() {
        // The memory bound in the docs assumes this.
        assert!(
            std::mem::size_of::<Entry>() <= 104,
            "{}",
            std::mem::size_of::<Entry>()
        );
    }
}
