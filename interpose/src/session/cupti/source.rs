//! The CUPTI session as the writer's [`Source`]: completed buffers, taken from their
//! queue and decoded on the writer thread, then given back to the pool; CUPTI's losses;
//! and clock pairs, which also tell whether CUPTI's clock is the host's.

use super::buffers::{self, Completed};
use super::{call, records, Collector};
use crate::base::clock;
use crate::base::cupti::claims;
use crate::rings::record::ApiNames;
use crate::rings::{HostRecord, REC_API};
use crate::writer::{Sink, Source};
use cupti_sys as sys;
use gputrace_format::{self as fmt, Event};

pub struct CuptiSource {
    c: &'static Collector,
    /// CUPTI timestamp minus host REALTIME, when CUPTI uses another clock altogether
    /// (they differ by more than a second); 0 when both are CLOCK_REALTIME.
    gpu_offset: i64,
    api_names: ApiNames,
    /// Kernels decoded while `base::cupti::claims` watches (reused).
    kernels: Vec<u32>,
}

impl CuptiSource {
    pub fn new(c: &'static Collector) -> CuptiSource {
        CuptiSource {
            c,
            gpu_offset: 0,
            api_names: ApiNames::default(),
            kernels: Vec::new(),
        }
    }

    fn decode(&mut self, buf: &Completed, out: &mut Sink<'_>) {
        let (addr, valid) = buf.records();
        let layout = self.c.layout;
        let mut rec: *mut sys::CUpti_Activity = std::ptr::null_mut();
        let first = out.events.len();
        loop {
            let next = call!(
                self.c.cupti,
                cuptiActivityGetNextRecord(addr, valid, &mut rec)
            );
            if next.is_err() || rec.is_null() {
                break;
            }
            // SAFETY: CUPTI returned a pointer to a whole record inside our buffer; its
            // first field is the activity kind.
            let kind = unsafe { (*rec).kind };
            if kind == sys::CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_RUNTIME {
                // SAFETY: a RUNTIME record is a CUpti_ActivityAPI, the same struct in
                // every CUPTI version we support.
                let a = unsafe { (rec as *const sys::CUpti_ActivityAPI).read_unaligned() };
                let fix = |t: u64| (t as i64 - self.gpu_offset) as u64;
                // An API record, as the callbacks would have made it (no parameters).
                let r = HostRecord {
                    kind: REC_API,
                    a: fmt::DOMAIN_RUNTIME as u16,
                    b: a.cbid,
                    tid: a.threadId,
                    corr: a.correlationId,
                    t0: fix(a.start),
                    t1: fix(a.end),
                    x: [0, 0, a.returnValue as u64, 0],
                };
                let e = self.api_names.event(&r, out);
                out.push(e);
                continue;
            }
            // SAFETY: `rec` is a record of `kind` in the layout of this CUPTI version.
            unsafe { records::decode(layout, kind, rec as *const u8, out.names, out.events) };
        }
        if self.gpu_offset != 0 {
            let off = self.gpu_offset;
            let fix = |t: &mut u64| *t = (*t as i64 - off) as u64;
            for e in &mut out.events[first..] {
                match e {
                    Event::Kernel(k) => {
                        fix(&mut k.start);
                        fix(&mut k.end)
                    }
                    Event::Memcpy(m) => {
                        fix(&mut m.start);
                        fix(&mut m.end)
                    }
                    Event::Memset(m) => {
                        fix(&mut m.start);
                        fix(&mut m.end)
                    }
                    Event::Sync(s) => {
                        fix(&mut s.start);
                        fix(&mut s.end)
                    }
                    Event::Memory(m) => fix(&mut m.ts),
                    // API records were fixed as they were read.
                    _ => {}
                }
            }
        }
        if claims::watching() {
            self.kernels
                .extend(out.events[first..].iter().filter_map(|e| match e {
                    Event::Kernel(k) if k.graph_id == 0 => Some(k.corr),
                    _ => None,
                }));
            if claims::note_kernels(&mut self.kernels) {
                self.c.enable_driver_launches();
            }
        }
        note_progress(out.events, first);
    }
}

impl Source for CuptiSource {
    fn drain(&mut self, out: &mut Sink<'_>) {
        if claims::resolve() {
            self.c.enable_driver_launches();
        }
        for buf in buffers::take_completed() {
            self.decode(&buf, out);
            buf.recycle();
        }
        let (dropped, refused) = buffers::take_losses();
        let ts = clock::now_ns();
        for (source, count) in [(fmt::DROP_CUPTI, dropped), (fmt::DROP_BUFFER_POOL, refused)] {
            if count > 0 {
                out.push(Event::Dropped { ts, source, count });
            }
        }
    }

    /// A clock pair, which also sets the offset GPU times are corrected by.
    fn checkpoint(&mut self, out: &mut Sink<'_>) {
        let (cupti_ns, mono_ns, real_ns) = self.c.clock_pair();
        let off = cupti_ns as i64 - real_ns as i64;
        self.gpu_offset = if off.abs() > 1_000_000_000 { off } else { 0 };
        out.push(Event::Clock {
            cupti_ns,
            mono_ns,
            real_ns,
        });
    }
}

/// Tells the stall tracker about the GPU records just decoded (`events[first..]`): a
/// completed one marks its launch done; one CUPTI handed over before it completed (a
/// forced flush: no end, or an end before its start) is taken out of the events and
/// kept as an outstanding operation, never written with a made-up end.
fn note_progress(events: &mut Vec<Event>, first: usize) {
    use crate::session::stall::{self, Incomplete};
    let incomplete = |start: u64, end: u64| end == 0 || end < start;
    let mut i = first;
    while i < events.len() {
        let op = match &events[i] {
            Event::Kernel(k) if incomplete(k.start, k.end) => Some(Incomplete {
                kind: fmt::STALL_OP_KERNEL,
                device: k.device,
                stream: k.stream,
                corr: k.corr,
                name: k.name,
                start: k.start,
                bytes: 0,
                grid: k.grid,
                block: k.block,
            }),
            Event::Memcpy(c) if incomplete(c.start, c.end) => Some(Incomplete {
                kind: fmt::STALL_OP_MEMCPY,
                device: c.device,
                stream: c.stream,
                corr: c.corr,
                start: c.start,
                bytes: c.bytes,
                ..Default::default()
            }),
            Event::Memset(s) if incomplete(s.start, s.end) => Some(Incomplete {
                kind: fmt::STALL_OP_MEMSET,
                device: s.device,
                stream: s.stream,
                corr: s.corr,
                start: s.start,
                bytes: s.bytes,
                ..Default::default()
            }),
            Event::Kernel(k) => {
                stall::note_completed(k.corr, k.end);
                None
            }
            Event::Memcpy(c) => {
                stall::note_completed(c.corr, c.end);
                None
            }
            Event::Memset(s) => {
                stall::note_completed(s.corr, s.end);
                None
            }
            // A graph-level record stands for the replay's kernels (graph tracing).
            Event::GraphTrace(g) if g.end != 0 => {
                stall::note_completed(g.corr, g.end);
                None
            }
            _ => None,
        };
        match op {
            Some(op) => {
                stall::note_incomplete(op);
                events.remove(i);
            }
            None => i += 1,
        }
    }
}
