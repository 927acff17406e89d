//! The rings as the writer's [`Source`]: every thread's records, decoded on the writer
//! thread, with the stamps converted to CLOCK_REALTIME ns and each recording thread
//! named once.
//!
//! Python stacks (PYSTACK records) are gathered until the record of their call
//! arrives, then handed to the [`Stacks`] the source was given, which turns raw frames
//! into an interned stack; a `CallSite` event then ties the call's event to it.

use super::record::{self, ApiNames, RawFrame};
use super::{drain_all, HostRecord, REC_API, REC_PYSTACK};
use crate::base::cupti::{apis, claims};
use crate::base::tsc::Converter;
use crate::writer::{Sink, Source};
use gputrace_format::{self as fmt, Event};
use std::collections::{HashMap, HashSet};

/// The stamp converter is re-anchored after this many records.
const TICK_EVERY: u32 = 1024;

/// Turns the raw frames of Python stacks into interned stacks, on the writer thread
/// (session/pystack implements it; the rings only carry the frames).
pub trait Stacks: Send {
    /// Once per drain, before its records: a place to say what the trace should know
    /// (whether stacks are recorded, and why not) and to age caches.
    fn pass(&mut self, out: &mut Sink<'_>);

    /// The id of the stack made of `frames` (innermost first), its definition put into
    /// `out` the first time; `None` when none of it can be read any more.
    fn intern(&mut self, frames: &[RawFrame], out: &mut Sink<'_>) -> Option<u32>;
}

/// A stack whose call record has not been read yet (it may come in the next drain:
/// the writer can read a ring between the two pushes).
struct PendingStack {
    /// The call's entry stamp, low 32 bits.
    key: u32,
    total: usize,
    frames: Vec<RawFrame>,
}

pub struct RingSource {
    conv: Option<Converter>,
    uses: u32,
    api_names: ApiNames,
    threads: HashSet<u32>,
    /// Reused between drains.
    batch: Vec<(u32, HostRecord)>,
    stacks: Option<Box<dyn Stacks>>,
    /// By thread.
    pending: HashMap<u32, PendingStack>,
    /// Each ring's cost totals (calls, ticks) when last written, by ring.
    costs: HashMap<usize, (u64, u64)>,
    /// For `base::cupti::claims`, while it watches: what this drain held.
    drained: claims::Drained,
}

impl RingSource {
    pub fn new() -> RingSource {
        RingSource {
            conv: None,
            uses: 0,
            api_names: ApiNames::default(),
            threads: HashSet::new(),
            batch: Vec::new(),
            stacks: None,
            pending: HashMap::new(),
            costs: HashMap::new(),
            drained: claims::Drained::default(),
        }
    }

    /// One `TracerCost` event per thread whose callbacks ran since the last one.
    fn costs(&mut self, out: &mut Sink<'_>) {
        let mut grew: Vec<(u32, u64, u64)> = Vec::new();
        let seen = &mut self.costs;
        super::own_costs(|ring, tid, calls, ticks| {
            let last = seen.insert(ring, (calls, ticks)).unwrap_or((0, 0));
            let dc = calls.wrapping_sub(last.0);
            if dc > 0 {
                grew.push((tid, dc, ticks.wrapping_sub(last.1)));
            }
        });
        if grew.is_empty() {
            return;
        }
        let ts = crate::base::clock::now_ns();
        let conv = *self.conv();
        for (tid, calls, ticks) in grew {
            out.push(Event::TracerCost(fmt::TracerCost {
                ts,
                tid,
                calls,
                ns: conv.ns(ticks),
            }));
        }
    }

    /// A source that turns Python stacks into `CallSite`s through `stacks`.
    pub fn with_stacks(stacks: Box<dyn Stacks>) -> RingSource {
        RingSource {
            stacks: Some(stacks),
            ..RingSource::new()
        }
    }

    /// Gathers one PYSTACK record into the pending stack.
    fn stack_part(&mut self, tid: u32, r: &HostRecord) {
        let (first, total, key, part) = record::pystack_part(r);
        if first == 0 {
            self.pending.insert(
                tid,
                PendingStack {
                    key,
                    total,
                    frames: Vec::with_capacity(total),
                },
            );
        }
        match self.pending.get_mut(&tid) {
            Some(p) if p.key == key && p.frames.len() == first => p.frames.extend(part),
            // A part without its beginning (dropped from a full ring).
            _ => {
                self.pending.remove(&tid);
            }
        }
    }

    /// The call record `r` (raw stamps) just became the last event of `out`: ties it to
    /// the pending stack if that stack is its own.
    fn link(&mut self, tid: u32, r: &HostRecord, out: &mut Sink<'_>) {
        let Some(p) = self.pending.remove(&tid) else {
            return;
        };
        if p.key != r.t0 as u32 || p.frames.len() != p.total {
            return;
        }
        let Some(ts) = out.events.last().and_then(|e| e.ts()) else {
            return;
        };
        if let Some(stacks) = self.stacks.as_mut() {
            if let Some(stack) = stacks.intern(&p.frames, out) {
                out.push(Event::CallSite(fmt::CallSite { ts, tid, stack }));
            }
        }
    }

    /// The converter, made on first use (on the writer thread: making it may wait for
    /// a good TSC baseline) and re-anchored every [`TICK_EVERY`] records.
    fn conv(&mut self) -> &Converter {
        self.uses = self.uses.wrapping_add(1);
        let tick = self.uses.is_multiple_of(TICK_EVERY);
        let conv = self.conv.get_or_insert_with(Converter::new);
        if tick {
            conv.tick();
        }
        conv
    }

    /// An API record, for `base::cupti::claims`: a successful runtime kernel launch claims
    /// its kernel; every call's id may lower the fence; a driver call (recorded only
    /// when the program made it itself) says the program uses the driver API.
    fn note_claim(&mut self, r: &HostRecord) {
        self.drained.call(r.corr);
        if r.a == fmt::DOMAIN_DRIVER as u16 {
            self.drained.driver_call = true;
        }
        let launch = r.a == fmt::DOMAIN_RUNTIME as u16
            && apis::find(fmt::DOMAIN_RUNTIME, r.b).is_some_and(|i| i.launches_kernel());
        if launch && r.x[2] == 0 && r.corr != 0 {
            self.drained.launches.push(r.corr);
        }
    }

    fn record(&mut self, tid: u32, r: &HostRecord, out: &mut Sink<'_>) {
        if self.threads.insert(tid) {
            if let Ok(name) = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")) {
                let name = out.intern(name.trim_end());
                out.push(Event::Thread { tid, name });
            }
        }
        if r.kind == REC_PYSTACK {
            self.stack_part(tid, r);
            return;
        }
        let pushed = if r.kind == REC_API {
            if claims::watching() {
                self.note_claim(r);
            }
            let mut c = *r;
            let conv = self.conv();
            (c.t0, c.t1) = (conv.to_real(c.t0), conv.to_real(c.t1));
            let e = self.api_names.event(&c, out);
            out.push(e);
            true
        } else {
            // The symbol hooks' records (copies, calls, NCCL, NVTX, pinned memory).
            let conv = *self.conv();
            record::decode(r, &conv, out.names, out.events)
        };
        if !self.pending.is_empty() {
            if pushed {
                self.link(tid, r, out);
            } else {
                self.pending.remove(&tid);
            }
        }
    }
}

impl Default for RingSource {
    fn default() -> Self {
        RingSource::new()
    }
}

impl Source for RingSource {
    fn checkpoint(&mut self, out: &mut Sink<'_>) {
        self.costs(out);
    }

    fn drain(&mut self, out: &mut Sink<'_>) {
        if let Some(s) = self.stacks.as_mut() {
            s.pass(out);
        }
        let mut batch = std::mem::take(&mut self.batch);
        let (_, dropped) = drain_all(|tid, r| batch.push((tid, *r)));
        for (tid, r) in batch.drain(..) {
            self.record(tid, &r, out);
        }
        self.batch = batch;
        if claims::watching() {
            self.drained.dropped = dropped > 0;
            claims::note_calls(&mut self.drained);
        }
        if dropped > 0 {
            out.push(Event::Dropped {
                ts: crate::base::clock::now_ns(),
                source: fmt::DROP_RING,
                count: dropped,
            });
        }
    }
}
