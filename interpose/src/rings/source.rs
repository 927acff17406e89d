//! The rings as the writer's [`Source`]: every thread's records, decoded on the writer
//! thread, with the stamps converted to CLOCK_REALTIME ns and each recording thread
//! named once.

use super::record::{self, ApiNames};
use super::{drain_all, HostRecord, REC_API};
use crate::base::tsc::Converter;
use crate::writer::{Sink, Source};
use gputrace_format::{self as fmt, Event};
use std::collections::HashSet;

/// The stamp converter is re-anchored after this many records.
const TICK_EVERY: u32 = 1024;

pub struct RingSource {
    conv: Option<Converter>,
    uses: u32,
    api_names: ApiNames,
    threads: HashSet<u32>,
    /// Reused between drains.
    batch: Vec<(u32, HostRecord)>,
}

impl RingSource {
    pub fn new() -> RingSource {
        RingSource {
            conv: None,
            uses: 0,
            api_names: ApiNames::default(),
            threads: HashSet::new(),
            batch: Vec::new(),
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

    fn record(&mut self, tid: u32, r: &HostRecord, out: &mut Sink<'_>) {
        if self.threads.insert(tid) {
            if let Ok(name) = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")) {
                let name = out.intern(name.trim_end());
                out.push(Event::Thread { tid, name });
            }
        }
        if r.kind == REC_API {
            let mut r = *r;
            let conv = self.conv();
            (r.t0, r.t1) = (conv.to_real(r.t0), conv.to_real(r.t1));
            let e = self.api_names.event(&r, out);
            out.push(e);
        } else {
            // The symbol hooks' records (copies, calls, NCCL, NVTX, pinned memory).
            let conv = *self.conv();
            record::decode(r, &conv, out.names, out.events);
        }
    }
}

impl Default for RingSource {
    fn default() -> Self {
        RingSource::new()
    }
}

impl Source for RingSource {
    fn drain(&mut self, out: &mut Sink<'_>) {
        let mut batch = std::mem::take(&mut self.batch);
        let (_, dropped) = drain_all(|tid, r| batch.push((tid, *r)));
        for (tid, r) in batch.drain(..) {
            self.record(tid, &r, out);
        }
        self.batch = batch;
        if dropped > 0 {
            out.push(Event::Dropped {
                ts: crate::base::clock::now_ns(),
                source: fmt::DROP_RING,
                count: dropped,
            });
        }
    }
}
