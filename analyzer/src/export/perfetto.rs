//! Perfetto's native trace (a `Trace` protobuf: one `TracePacket` after another), for
//! ui.perfetto.dev and trace_processor. Written with the hand encoder in [`super::proto`]
//! for the handful of fields used (field numbers from Perfetto's `trace_packet.proto`,
//! `track_descriptor.proto`, `track_event.proto`, `debug_annotation.proto`,
//! `interned_data.proto`, `counter_descriptor.proto`).
//!
//! Layout: one process track per traced process (a rank), on the job's time base
//! ([`super::overlay`]); under it a group per device ("GPU 0: NVIDIA H200") holding a
//! track per stream (kernels, copies, memsets), the "why idle" track (every idle piece
//! named by its cause), and counters (queue depth per stream, device memory); a group
//! per GPU as NVML numbers it ("GPU 0 (NVML)") with its readings and other processes'
//! SM shares as counters; a thread track per host thread (CUDA API calls, calls seen
//! by the symbol hooks) with its NVTX and NCCL tracks and, for a sampled thread, its
//! "CPU %" counter under it; counters of the process tree's and the machine's CPU
//! shares (double values); process tracks for steps, phases, findings (their example
//! moments), CUDA synchronisation records and the collector's state. Arrows go from each
//! launch, copy or memset call to its GPU work (correlation id). Slices that overlap
//! others on one track without nesting in them go to an extra lane ("stream 7 (2)").
//!
//! Each process writes on its own packet sequence, whose names (event names and
//! argument names) are interned. Timestamps are absolute nanoseconds; a slice's end is
//! written right after its beginning (trace_processor orders events by time).

use super::api::{EventExporter, TraceContext, TraceEvent};
use super::overlay::{self, ProcessView, Sampled, Series, TimelineExporter};
use super::proto::{double, fixed64, int, message, string, uint, varint};
use super::slices::{self, Arg, Args, Cat, Flow, Name, Nvtx, Shown, Slice, Track};
use crate::model::trace::demangle;
use crate::report::view::FxMap;
use crate::report::Cause;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// Field numbers and enum values.
mod f {
    pub const TRACE_PACKET: u32 = 1;
    // TracePacket
    pub const TIMESTAMP: u32 = 8;
    pub const TRACK_EVENT: u32 = 11;
    pub const INTERNED_DATA: u32 = 12;
    pub const SEQUENCE_ID: u32 = 10;
    pub const SEQUENCE_FLAGS: u32 = 13;
    pub const TRACK_DESCRIPTOR: u32 = 60;
    pub const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
    pub const SEQ_NEEDS_INCREMENTAL_STATE: u64 = 2;
    // TrackDescriptor
    pub const TD_UUID: u32 = 1;
    pub const TD_NAME: u32 = 2;
    pub const TD_PROCESS: u32 = 3;
    pub const TD_THREAD: u32 = 4;
    pub const TD_PARENT_UUID: u32 = 5;
    pub const TD_COUNTER: u32 = 8;
    pub const TD_SIBLING_ORDER_RANK: u32 = 12;
    pub const TD_CHILD_ORDERING: u32 = 11;
    pub const CHILD_ORDERING_EXPLICIT: u64 = 3;
    // ProcessDescriptor
    pub const PD_PID: u32 = 1;
    pub const PD_CMDLINE: u32 = 2;
    pub const PD_NAME: u32 = 6;
    // ThreadDescriptor
    pub const THD_PID: u32 = 1;
    pub const THD_TID: u32 = 2;
    pub const THD_NAME: u32 = 5;
    // CounterDescriptor
    pub const CD_UNIT: u32 = 3;
    pub const UNIT_COUNT: u64 = 2;
    pub const UNIT_SIZE_BYTES: u64 = 3;
    pub const CD_UNIT_NAME: u32 = 6;
    // TrackEvent
    pub const TE_DEBUG_ANNOTATIONS: u32 = 4;
    pub const TE_TYPE: u32 = 9;
    pub const TE_NAME_IID: u32 = 10;
    pub const TE_TRACK_UUID: u32 = 11;
    pub const TE_NAME: u32 = 23;
    pub const TE_COUNTER_VALUE: u32 = 30;
    pub const TE_DOUBLE_COUNTER_VALUE: u32 = 44;
    pub const TE_FLOW_IDS: u32 = 47;
    pub const TE_TERMINATING_FLOW_IDS: u32 = 48;
    pub const TYPE_SLICE_BEGIN: u64 = 1;
    pub const TYPE_SLICE_END: u64 = 2;
    pub const TYPE_INSTANT: u64 = 3;
    pub const TYPE_COUNTER: u64 = 4;
    // DebugAnnotation
    pub const DA_NAME_IID: u32 = 1;
    pub const DA_UINT: u32 = 3;
    pub const DA_INT: u32 = 4;
    pub const DA_STRING: u32 = 6;
    pub const DA_ARRAY: u32 = 12;
    // InternedData
    pub const ID_EVENT_NAMES: u32 = 2;
    pub const ID_DEBUG_ANNOTATION_NAMES: u32 = 3;
    // EventName / DebugAnnotationName
    pub const IN_IID: u32 = 1;
    pub const IN_NAME: u32 = 2;
}

/// What a track of a process is keyed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Key {
    Slices(Track),
    Device(u32),
    /// A GPU as the NVML sampler names it (its index need not be CUDA's).
    NvmlGpu(u32),
    Counter(Series),
    /// A sampler's percentage counter.
    Sampled(Sampled),
}

/// A track of slices and its extra lanes: each lane's uuid and the ends of the slices
/// open on it (innermost last).
struct Lanes {
    uuids: Vec<u64>,
    open: Vec<Vec<u64>>,
    name: String,
    parent: u64,
}

/// Interned names of one sequence.
#[derive(Default)]
struct Names {
    kernels: FxMap<u32, u64>,
    strs: FxMap<u32, u64>,
    /// Static names and argument names by address (each literal has one).
    statics: FxMap<usize, u64>,
    args: FxMap<usize, u64>,
    next: u64,
    next_arg: u64,
    /// Defined by the packet being written.
    new_names: Vec<(u64, String)>,
    new_args: Vec<(u64, &'static str)>,
}

/// One process's state while its packets are written.
struct Proc {
    seq: u64,
    pid: u32,
    offset: i64,
    uuid: u64,
    flow_base: u64,
    tracks: FxMap<Key, Lanes>,
    names: Names,
    devices: FxMap<u32, String>,
    /// Per thread: the NVTX levels open.
    nvtx: FxMap<u32, Vec<u32>>,
    /// NVTX start/end ranges open, by id.
    ranges: FxMap<u64, u64>,
    last_ts: u64,
    order: i64,
    flows: slices::Flows,
}

/// What was written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PerfettoStats {
    pub packets: u64,
    pub slices: u64,
    pub counters: u64,
    pub tracks: u64,
    pub bytes: u64,
}

/// The Perfetto exporter: one file for the whole job.
pub struct Perfetto {
    out: Box<dyn Write>,
    path: PathBuf,
    next_uuid: u64,
    /// By process index.
    procs: Vec<Option<Proc>>,
    cur: usize,
    pkt: Vec<u8>,
    ev: Vec<u8>,
    pub stats: PerfettoStats,
}

impl Perfetto {
    /// Writes to `path` (created).
    pub fn create(path: &Path) -> io::Result<Perfetto> {
        let file = super::api::create_private(path)?;
        Ok(Self::to_writer(
            Box::new(BufWriter::with_capacity(1 << 20, file)),
            path,
        ))
    }

    /// Writes to `out`; `path` names it in messages.
    pub fn to_writer(out: Box<dyn Write>, path: &Path) -> Perfetto {
        Perfetto {
            out,
            path: path.to_path_buf(),
            next_uuid: 1,
            procs: Vec::new(),
            cur: 0,
            pkt: Vec::with_capacity(1 << 10),
            ev: Vec::with_capacity(1 << 10),
            stats: PerfettoStats::default(),
        }
    }

    /// Writes the packet in `self.pkt` as a field of the `Trace` message.
    fn flush_packet(&mut self) -> io::Result<()> {
        let mut head = [0u8; 11];
        head[0] = ((f::TRACE_PACKET << 3) | 2) as u8;
        let mut n = 1;
        let mut len = self.pkt.len() as u64;
        loop {
            let b = (len & 0x7f) as u8;
            len >>= 7;
            if len == 0 {
                head[n] = b;
                n += 1;
                break;
            }
            head[n] = b | 0x80;
            n += 1;
        }
        self.out.write_all(&head[..n])?;
        self.out.write_all(&self.pkt)?;
        self.stats.packets += 1;
        self.stats.bytes += (n + self.pkt.len()) as u64;
        self.pkt.clear();
        Ok(())
    }

    fn uuid(&mut self) -> u64 {
        let u = self.next_uuid;
        self.next_uuid += 1;
        u
    }

    /// A track descriptor packet.
    fn descriptor(
        &mut self,
        uuid: u64,
        parent: Option<u64>,
        name: &str,
        rank: Option<i64>,
        extra: impl FnOnce(&mut Vec<u8>),
    ) -> io::Result<()> {
        self.stats.tracks += 1;
        message(&mut self.pkt, f::TRACK_DESCRIPTOR, |m| {
            uint(m, f::TD_UUID, uuid);
            if let Some(p) = parent {
                uint(m, f::TD_PARENT_UUID, p);
            }
            if !name.is_empty() {
                string(m, f::TD_NAME, name);
            }
            if let Some(r) = rank {
                int(m, f::TD_SIBLING_ORDER_RANK, r);
            }
            extra(m);
        });
        self.flush_packet()
    }

    fn proc(&mut self) -> &mut Proc {
        self.procs[self.cur]
            .as_mut()
            .expect("a process is selected")
    }

    /// The uuid of a process's track for `key` (lane 0), described when first used.
    fn track(&mut self, key: Key) -> io::Result<u64> {
        if let Some(l) = self.proc().tracks.get(&key) {
            return Ok(l.uuids[0]);
        }
        let p = self.proc();
        let (pid, puuid) = (p.pid, p.uuid);
        let order = p.order;
        p.order += 1;
        let uuid = self.uuid();
        let (parent, name) = match key {
            Key::Device(d) => {
                let name = match self.proc().devices.get(&d) {
                    Some(n) if !n.is_empty() => format!("GPU {d}: {n}"),
                    _ => format!("GPU {d}"),
                };
                self.descriptor(uuid, Some(puuid), &name, Some(order), |m| {
                    uint(m, f::TD_CHILD_ORDERING, f::CHILD_ORDERING_EXPLICIT)
                })?;
                (puuid, name)
            }
            Key::NvmlGpu(d) => {
                let name = format!("GPU {d} (NVML)");
                self.descriptor(uuid, Some(puuid), &name, Some(order), |_| {})?;
                (puuid, name)
            }
            Key::Slices(Track::Thread(tid)) => {
                // A thread without a recorded name (those with one were described when
                // their name came).
                let name = format!("thread {tid}");
                self.thread_descriptor(uuid, puuid, pid, tid, &name)?;
                (puuid, name)
            }
            Key::Slices(t) => {
                let parent = match t {
                    Track::Stream { device, .. } | Track::Idle(device) => {
                        self.track(Key::Device(device))?
                    }
                    Track::Nvtx(tid) | Track::Nccl(tid) | Track::Python(tid) => {
                        self.track(Key::Slices(Track::Thread(tid)))?
                    }
                    Track::Nvml(d) => self.track(Key::NvmlGpu(d))?,
                    _ => puuid,
                };
                let name = slices::track_name(t);
                // Under a device: why idle first, then the streams.
                let rank = match t {
                    Track::Idle(_) => -1,
                    Track::Steps => -3,
                    Track::Phases => -2,
                    _ => order,
                };
                self.descriptor(uuid, Some(parent), &name, Some(rank), |_| {})?;
                (parent, name)
            }
            Key::Counter(s) => {
                let parent = if s.is_sampled() {
                    self.track(Key::NvmlGpu(s.device()))?
                } else {
                    self.track(Key::Device(s.device()))?
                };
                let name = s.name();
                let unit = if s.is_bytes() {
                    f::UNIT_SIZE_BYTES
                } else {
                    f::UNIT_COUNT
                };
                self.descriptor(uuid, Some(parent), &name, Some(order), |m| {
                    message(m, f::TD_COUNTER, |c| uint(c, f::CD_UNIT, unit))
                })?;
                (parent, name)
            }
            // Described by `sampled`, which knows their names; a plain one if not.
            Key::Sampled(_) => {
                self.descriptor(uuid, Some(puuid), "", Some(order), |m| {
                    message(m, f::TD_COUNTER, |c| string(c, f::CD_UNIT_NAME, "%"))
                })?;
                (puuid, String::new())
            }
        };
        self.proc().tracks.insert(
            key,
            Lanes {
                uuids: vec![uuid],
                open: vec![Vec::new()],
                name,
                parent,
            },
        );
        Ok(uuid)
    }

    /// The lane of `key` a slice [start, end) nests in (a new one if it nests in none).
    fn lane(&mut self, key: Key, start: u64, end: u64) -> io::Result<u64> {
        self.track(key)?;
        let l = self.proc().tracks.get_mut(&key).expect("track made above");
        for (i, open) in l.open.iter_mut().enumerate() {
            while open.last().is_some_and(|&e| e <= start) {
                open.pop();
            }
            if open.last().is_none_or(|&e| e >= end) {
                open.push(end);
                return Ok(l.uuids[i]);
            }
        }
        let n = l.uuids.len();
        let name = format!("{} ({})", l.name, n + 1);
        let parent = l.parent;
        let uuid = self.uuid();
        self.descriptor(uuid, Some(parent), &name, None, |_| {})?;
        let l = self.proc().tracks.get_mut(&key).expect("track made above");
        l.uuids.push(uuid);
        l.open.push(vec![end]);
        Ok(uuid)
    }

    /// Writes a track event packet: `ts`, the event in `self.ev`, and the names it
    /// interned. `interned`: the event uses interned names (an end does not).
    fn event_packet(&mut self, ts: u64, interned: bool) -> io::Result<()> {
        let p = self.procs[self.cur]
            .as_mut()
            .expect("a process is selected");
        let pkt = &mut self.pkt;
        uint(pkt, f::TIMESTAMP, ts);
        uint(pkt, f::SEQUENCE_ID, p.seq);
        if interned {
            uint(pkt, f::SEQUENCE_FLAGS, f::SEQ_NEEDS_INCREMENTAL_STATE);
        }
        let names = &mut p.names;
        if !names.new_names.is_empty() || !names.new_args.is_empty() {
            message(pkt, f::INTERNED_DATA, |m| {
                for (iid, name) in names.new_names.drain(..) {
                    message(m, f::ID_EVENT_NAMES, |e| {
                        uint(e, f::IN_IID, iid);
                        string(e, f::IN_NAME, &name);
                    });
                }
                for (iid, name) in names.new_args.drain(..) {
                    message(m, f::ID_DEBUG_ANNOTATION_NAMES, |e| {
                        uint(e, f::IN_IID, iid);
                        string(e, f::IN_NAME, name);
                    });
                }
            });
        }
        // The TrackEvent, already written: its key (one byte: field 11, length-delimited)
        // and length.
        pkt.push(((f::TRACK_EVENT << 3) | 2) as u8);
        varint(pkt, self.ev.len() as u64);
        pkt.extend_from_slice(&self.ev);
        self.ev.clear();
        self.flush_packet()
    }

    /// The interned id of a name, defined in the packet being written if new.
    fn name_iid(&mut self, cx: Option<&TraceContext<'_>>, name: Name<'_>) -> Option<u64> {
        let names = &mut self.procs.get_mut(self.cur)?.as_mut()?.names;
        let (map_hit, text): (Option<u64>, Option<String>) = match name {
            Name::Kernel(id) => match names.kernels.get(&id) {
                Some(&i) => (Some(i), None),
                None => (None, Some(demangle(cx.map_or("", |c| c.str(id))))),
            },
            Name::Str(id) => match names.strs.get(&id) {
                Some(&i) => (Some(i), None),
                None => (None, Some(cx.map_or("", |c| c.str(id)).to_string())),
            },
            Name::Static(s) => match names.statics.get(&(s.as_ptr() as usize)) {
                Some(&i) => (Some(i), None),
                None => (None, Some(s.to_string())),
            },
            Name::Text(_) => return None,
        };
        if let Some(i) = map_hit {
            return Some(i);
        }
        names.next += 1;
        let iid = names.next;
        match name {
            Name::Kernel(id) => {
                names.kernels.insert(id, iid);
            }
            Name::Str(id) => {
                names.strs.insert(id, iid);
            }
            Name::Static(s) => {
                names.statics.insert(s.as_ptr() as usize, iid);
            }
            Name::Text(_) => {}
        }
        names.new_names.push((iid, text.unwrap_or_default()));
        Some(iid)
    }

    fn arg_iid(&mut self, key: &'static str) -> u64 {
        let names = &mut self.proc().names;
        if let Some(&i) = names.args.get(&(key.as_ptr() as usize)) {
            return i;
        }
        names.next_arg += 1;
        let iid = names.next_arg;
        names.args.insert(key.as_ptr() as usize, iid);
        names.new_args.push((iid, key));
        iid
    }

    /// Writes the name (interned or inline) and arguments of the event in `self.ev`.
    fn name_and_args(
        &mut self,
        cx: Option<&TraceContext<'_>>,
        name: Name<'_>,
        cat: Cat,
        args: &[Arg<'_>],
    ) {
        match self.name_iid(cx, name) {
            Some(iid) => uint(&mut self.ev, f::TE_NAME_IID, iid),
            None => {
                if let Name::Text(t) = name {
                    string(&mut self.ev, f::TE_NAME, t)
                }
            }
        }
        // The device and stream of GPU work are its track's.
        let gpu = matches!(cat, Cat::Kernel | Cat::Memcpy | Cat::Memset);
        for a in args {
            if gpu && matches!(a.key(), "device" | "stream") {
                continue;
            }
            let iid = self.arg_iid(a.key());
            message(&mut self.ev, f::TE_DEBUG_ANNOTATIONS, |m| {
                uint(m, f::DA_NAME_IID, iid);
                match *a {
                    Arg::U(_, v) => uint(m, f::DA_UINT, v),
                    Arg::I(_, v) => int(m, f::DA_INT, v),
                    Arg::S(_, s) => string(m, f::DA_STRING, s),
                    Arg::Hex(_, v) => string(m, f::DA_STRING, &format!("{v:#x}")),
                    // A one-dimensional grid or block as one number.
                    Arg::Dim3(_, [x, 1, 1]) => uint(m, f::DA_UINT, x as u64),
                    Arg::Dim3(_, d) => {
                        for x in d {
                            message(m, f::DA_ARRAY, |e| uint(e, f::DA_UINT, x as u64));
                        }
                    }
                }
            });
        }
    }

    /// A slice (begin and end) or, for zero length on a track of instants, an instant.
    fn slice(&mut self, cx: Option<&TraceContext<'_>>, s: &Slice<'_>) -> io::Result<()> {
        let (offset, flow_base) = {
            let p = self.proc();
            (p.offset, p.flow_base)
        };
        let start = overlay::shift(s.start, offset);
        let end = overlay::shift(s.end, offset).max(start);
        let key = match s.track {
            Track::Nvtx(tid) => Key::Slices(Track::Nvtx(tid)),
            t => Key::Slices(t),
        };
        let instant =
            start == end && matches!(s.track, Track::Collector | Track::Findings | Track::Nvml(_));
        let uuid = if instant {
            self.track(key)?
        } else {
            self.lane(key, start, end)?
        };
        let ty = if instant {
            f::TYPE_INSTANT
        } else {
            f::TYPE_SLICE_BEGIN
        };
        uint(&mut self.ev, f::TE_TYPE, ty);
        uint(&mut self.ev, f::TE_TRACK_UUID, uuid);
        self.name_and_args(cx, s.name, s.cat, s.args.as_slice());
        match s.flow {
            Flow::Launch(c) => fixed64(&mut self.ev, f::TE_FLOW_IDS, flow_base | c as u64),
            Flow::Work(c) => fixed64(
                &mut self.ev,
                f::TE_TERMINATING_FLOW_IDS,
                flow_base | c as u64,
            ),
            Flow::None => {}
        }
        self.event_packet(start, true)?;
        self.stats.slices += 1;
        if !instant {
            uint(&mut self.ev, f::TE_TYPE, f::TYPE_SLICE_END);
            uint(&mut self.ev, f::TE_TRACK_UUID, uuid);
            self.event_packet(end, false)?;
        }
        self.proc().last_ts = self.proc().last_ts.max(end);
        Ok(())
    }

    /// A counter's value at `ts` (trace time).
    fn counter(&mut self, s: Series, ts: u64, v: i64) -> io::Result<()> {
        let uuid = self.track(Key::Counter(s))?;
        let ts = overlay::shift(ts, self.proc().offset);
        uint(&mut self.ev, f::TE_TYPE, f::TYPE_COUNTER);
        uint(&mut self.ev, f::TE_TRACK_UUID, uuid);
        int(&mut self.ev, f::TE_COUNTER_VALUE, v);
        self.stats.counters += 1;
        self.event_packet(ts, false)
    }

    /// A sampler's percentage at `ts` (trace time) on its counter track, described
    /// with `name` when first used: under the thread, the GPU as NVML names it, or the
    /// process.
    fn sampled(&mut self, s: Sampled, name: &str, ts: u64, v: f64) -> io::Result<()> {
        let key = Key::Sampled(s);
        let uuid = match self.proc().tracks.get(&key) {
            Some(l) => l.uuids[0],
            None => {
                let parent = match s {
                    Sampled::ThreadCpu { tid } => self.track(Key::Slices(Track::Thread(tid)))?,
                    Sampled::GpuProcessSm { device, .. } | Sampled::GpuCounter { device, .. } => {
                        self.track(Key::NvmlGpu(device))?
                    }
                    Sampled::ProcessCpu { .. } | Sampled::MachineBusy | Sampled::MachineIowait => {
                        self.proc().uuid
                    }
                };
                let order = self.proc().order;
                self.proc().order += 1;
                let uuid = self.uuid();
                self.descriptor(uuid, Some(parent), name, Some(order), |m| {
                    message(m, f::TD_COUNTER, |c| string(c, f::CD_UNIT_NAME, "%"))
                })?;
                self.proc().tracks.insert(
                    key,
                    Lanes {
                        uuids: vec![uuid],
                        open: vec![Vec::new()],
                        name: name.to_string(),
                        parent,
                    },
                );
                uuid
            }
        };
        let ts = overlay::shift(ts, self.proc().offset);
        uint(&mut self.ev, f::TE_TYPE, f::TYPE_COUNTER);
        uint(&mut self.ev, f::TE_TRACK_UUID, uuid);
        double(&mut self.ev, f::TE_DOUBLE_COUNTER_VALUE, v);
        self.stats.counters += 1;
        self.event_packet(ts, false)
    }

    /// Writes the descriptor of thread `tid`'s track `uuid` under its process's track.
    fn thread_descriptor(
        &mut self,
        uuid: u64,
        puuid: u64,
        pid: u32,
        tid: u32,
        name: &str,
    ) -> io::Result<()> {
        message(&mut self.pkt, f::TRACK_DESCRIPTOR, |m| {
            uint(m, f::TD_UUID, uuid);
            uint(m, f::TD_PARENT_UUID, puuid);
            message(m, f::TD_THREAD, |t| {
                uint(t, f::THD_PID, pid as u64);
                uint(t, f::THD_TID, tid as u64);
                string(t, f::THD_NAME, name);
            });
        });
        self.stats.tracks += 1;
        self.flush_packet()
    }

    /// A thread's track, described with its name (a thread's first description).
    fn describe_thread(&mut self, tid: u32, tname: String) -> io::Result<()> {
        let uuid = self.uuid();
        let (pid, puuid) = (self.proc().pid, self.proc().uuid);
        self.thread_descriptor(uuid, puuid, pid, tid, &tname)?;
        self.proc().tracks.insert(
            Key::Slices(Track::Thread(tid)),
            Lanes {
                uuids: vec![uuid],
                open: vec![Vec::new()],
                name: tname,
                parent: puuid,
            },
        );
        Ok(())
    }

    /// An NVTX begin or end on `uuid` at trace time `ts`.
    fn nvtx_edge(
        &mut self,
        cx: &TraceContext<'_>,
        uuid: u64,
        ts: u64,
        name: Option<Name<'_>>,
    ) -> io::Result<()> {
        let ts = overlay::shift(ts, self.proc().offset);
        let ty = match name {
            Some(_) => f::TYPE_SLICE_BEGIN,
            None => f::TYPE_SLICE_END,
        };
        uint(&mut self.ev, f::TE_TYPE, ty);
        uint(&mut self.ev, f::TE_TRACK_UUID, uuid);
        if let Some(n) = name {
            self.name_and_args(Some(cx), n, Cat::Nvtx, &[]);
            self.stats.slices += 1;
        }
        self.proc().last_ts = self.proc().last_ts.max(ts);
        self.event_packet(ts, name.is_some())
    }

    fn nvtx(&mut self, cx: &TraceContext<'_>, n: Nvtx<'_>) -> io::Result<()> {
        match n {
            Nvtx::Push {
                tid,
                ts,
                level,
                name,
            } => {
                let uuid = self.track(Key::Slices(Track::Nvtx(tid)))?;
                // A push at a level already open: the pops between were lost.
                self.nvtx_pop(cx, tid, ts, level)?;
                self.proc().nvtx.entry(tid).or_default().push(level);
                self.nvtx_edge(cx, uuid, ts, Some(name))
            }
            Nvtx::Pop { tid, ts, level } => self.nvtx_pop(cx, tid, ts, level),
            Nvtx::Start { ts, id, name } => {
                let uuid = self.uuid();
                let parent = self.proc().uuid;
                self.descriptor(uuid, Some(parent), "NVTX ranges", None, |_| {})?;
                self.proc().ranges.insert(id, uuid);
                self.nvtx_edge(cx, uuid, ts, Some(name))
            }
            Nvtx::End { ts, id } => match self.proc().ranges.remove(&id) {
                Some(uuid) => self.nvtx_edge(cx, uuid, ts, None),
                None => Ok(()),
            },
            Nvtx::Mark { tid, ts, name } => {
                let uuid = self.track(Key::Slices(Track::Nvtx(tid)))?;
                let ts = overlay::shift(ts, self.proc().offset);
                uint(&mut self.ev, f::TE_TYPE, f::TYPE_INSTANT);
                uint(&mut self.ev, f::TE_TRACK_UUID, uuid);
                self.name_and_args(Some(cx), name, Cat::Nvtx, &[]);
                self.stats.slices += 1;
                self.event_packet(ts, true)
            }
        }
    }

    /// Ends the thread's NVTX ranges at `level` and deeper.
    fn nvtx_pop(&mut self, cx: &TraceContext<'_>, tid: u32, ts: u64, level: u32) -> io::Result<()> {
        let closing = match self.proc().nvtx.get_mut(&tid) {
            Some(st) => match st.iter().position(|&l| l >= level) {
                Some(i) => st.split_off(i).len(),
                None => 0,
            },
            None => 0,
        };
        if closing == 0 {
            return Ok(());
        }
        let uuid = self.track(Key::Slices(Track::Nvtx(tid)))?;
        for _ in 0..closing {
            self.nvtx_edge(cx, uuid, ts, None)?;
        }
        Ok(())
    }

    /// Starts a process's packet sequence and writes its process track's descriptor.
    fn begin_process(&mut self, v: &ProcessView<'_>) -> io::Result<()> {
        let uuid = self.uuid();
        let p = Proc {
            seq: v.index as u64 + 1,
            pid: v.pid,
            offset: v.offset_ns,
            uuid,
            flow_base: (v.index as u64 + 1) << 32,
            tracks: FxMap::default(),
            names: Names::default(),
            devices: v
                .trace
                .devices
                .iter()
                .map(|d| (d.id, v.trace.str(d.name).to_string()))
                .collect(),
            nvtx: FxMap::default(),
            ranges: FxMap::default(),
            last_ts: 0,
            order: 0,
            flows: slices::Flows::default(),
        };
        if self.procs.len() <= v.index {
            self.procs.resize_with(v.index + 1, || None);
        }
        self.procs[v.index] = Some(p);
        self.cur = v.index;
        // The first packet of the sequence: it clears the interning state.
        let name = v.display_name();
        uint(&mut self.pkt, f::SEQUENCE_ID, v.index as u64 + 1);
        uint(
            &mut self.pkt,
            f::SEQUENCE_FLAGS,
            f::SEQ_INCREMENTAL_STATE_CLEARED,
        );
        let cmd = crate::secrets::cmdline(&v.trace.meta.cmdline).join(" ");
        let pid = v.pid;
        self.descriptor(uuid, None, "", Some(v.index as i64), |m| {
            message(m, f::TD_PROCESS, |p| {
                uint(p, f::PD_PID, pid as u64);
                if !cmd.is_empty() {
                    string(p, f::PD_CMDLINE, &cmd);
                }
                string(p, f::PD_NAME, &name);
            })
        })
    }

    /// Writes the analysis's slices: phases, steps, graph replays, idle pieces, findings.
    fn analysis_slices(&mut self, v: &ProcessView<'_>) -> io::Result<()> {
        let tl = v.timeline;
        let phases = [
            ("start-up", tl.startup),
            ("steady state", tl.steady),
            ("tail", tl.tail),
        ];
        for (name, (s, e)) in phases {
            if e > s {
                self.slice(
                    None,
                    &Slice {
                        track: Track::Phases,
                        start: s,
                        end: e,
                        name: Name::Static(name),
                        cat: Cat::Step,
                        args: Args::new(),
                        flow: Flow::None,
                    },
                )?;
            }
        }
        for (i, w) in tl.steps.windows(2).enumerate() {
            let name = format!("step {i}");
            let mut args = Args::new();
            args.push(Arg::U("step", i as u64));
            self.slice(
                None,
                &Slice {
                    track: Track::Steps,
                    start: w[0],
                    end: w[1],
                    name: Name::Text(&name),
                    cat: Cat::Step,
                    args,
                    flow: Flow::None,
                },
            )?;
        }
        for r in &tl.replays {
            let name = format!("graph {} replay", r.graph_id);
            self.slice(None, &slices::replay_slice(r, &name))?;
        }
        for piece in &tl.idle {
            self.slice(
                None,
                &Slice {
                    track: Track::Idle(piece.device),
                    start: piece.start,
                    end: piece.end,
                    name: Name::Static(cause_name(piece.cause)),
                    cat: Cat::Idle,
                    args: Args::new(),
                    flow: Flow::None,
                },
            )?;
        }
        let t0 = v.process.trace_start_ns;
        for fnd in &v.findings {
            for ex in &fnd.examples {
                let mut args = Args::new();
                args.push(Arg::S("severity", fnd.severity.name()));
                args.push(Arg::S("what", &ex.what));
                args.push(Arg::S("finding", &fnd.title));
                self.slice(
                    None,
                    &Slice {
                        track: Track::Findings,
                        start: t0 + ex.at_ns,
                        end: t0 + ex.at_ns + ex.dur_ns,
                        name: Name::Static(fnd.id.as_str()),
                        cat: Cat::Finding,
                        args,
                        flow: Flow::None,
                    },
                )?;
            }
        }
        Ok(())
    }

    /// Writes a process's counters, its sampled threads' tracks and its Python samples.
    fn sampled_tracks(&mut self, v: &ProcessView<'_>) -> io::Result<()> {
        let mut res = Ok(());
        overlay::counters(v.trace, |s, ts, val| {
            if res.is_ok() {
                res = self.counter(s, ts, val);
            }
        });
        std::mem::replace(&mut res, Ok(()))?;
        overlay::nvml_counters(v.trace, &v.nvml_samples, |s, ts, val| {
            if res.is_ok() {
                res = self.counter(s, ts, val);
            }
        });
        std::mem::replace(&mut res, Ok(()))?;
        // The sampled threads' tracks, with their names (their CPU counters and Python
        // samples go under them; the thread records streamed later find them described).
        let mut tids: Vec<u32> = v
            .trace
            .thread_cpu
            .iter()
            .map(|s| s.tid)
            .chain(v.trace.py_samples.iter().map(|s| s.tid))
            .collect();
        tids.sort_unstable();
        tids.dedup();
        for tid in tids {
            if let Some(&name) = v.trace.threads.get(&tid) {
                self.describe_thread(tid, v.trace.str(name).to_string())?;
            }
        }
        overlay::python_spans(v.trace, |p| {
            if res.is_ok() {
                res = self.slice(None, &slices::python_slice(p));
            }
        });
        std::mem::replace(&mut res, Ok(()))?;
        overlay::sampled_counters(v.trace, &v.nvml_processes, |s, name, ts, val| {
            if res.is_ok() {
                res = self.sampled(s, name, ts, val);
            }
        });
        res
    }
}

impl TimelineExporter for Perfetto {
    fn process(&mut self, v: &ProcessView<'_>) -> io::Result<()> {
        self.begin_process(v)?;
        // What the analysis placed on the timeline.
        self.analysis_slices(v)?;
        self.sampled_tracks(v)
    }

    fn as_events(&mut self) -> &mut dyn EventExporter {
        self
    }

    fn select(&mut self, index: usize) -> io::Result<()> {
        if self.procs.get(index).is_none_or(|p| p.is_none()) {
            return Err(io::Error::other(format!(
                "no process {index} was described"
            )));
        }
        self.cur = index;
        Ok(())
    }

    fn close(&mut self) -> io::Result<Vec<PathBuf>> {
        self.out.flush()?;
        Ok(vec![self.path.clone()])
    }
}

/// The name an idle piece is shown under: its cause's id.
pub fn cause_name(c: Cause) -> &'static str {
    c.id()
}

impl EventExporter for Perfetto {
    fn event(
        &mut self,
        cx: &TraceContext<'_>,
        ev: &TraceEvent<'_>,
        _out: &mut dyn Write,
    ) -> io::Result<()> {
        match slices::describe(cx, ev) {
            Shown::Slice(mut s) => {
                s.flow = self.proc().flows.filter(s.flow);
                self.slice(Some(cx), &s)
            }
            Shown::Nvtx(n) => self.nvtx(cx, n),
            Shown::Device(d) => {
                let name = cx.str(d.name).to_string();
                self.proc().devices.insert(d.id, name);
                Ok(())
            }
            Shown::Thread { tid, name } => {
                // Described now, with its name (threads come before other events),
                // unless its CPU counter described it already (with the same name).
                if self
                    .proc()
                    .tracks
                    .contains_key(&Key::Slices(Track::Thread(tid)))
                {
                    return Ok(());
                }
                self.describe_thread(tid, cx.str(name).to_string())
            }
            Shown::Nothing => Ok(()),
        }
    }

    fn end_trace(&mut self, cx: &TraceContext<'_>, _out: &mut dyn Write) -> io::Result<()> {
        // Ranges still open end with the last event.
        let last = self.proc().last_ts;
        let raw_last = overlay::shift(last, -self.proc().offset);
        let tids: Vec<u32> = self.proc().nvtx.keys().copied().collect();
        for tid in tids {
            self.nvtx_pop(cx, tid, raw_last, 0)?;
        }
        let open: Vec<u64> = self.proc().ranges.drain().map(|(_, u)| u).collect();
        for uuid in open {
            self.nvtx_edge(cx, uuid, raw_last, None)?;
        }
        self.out.flush()
    }
}
