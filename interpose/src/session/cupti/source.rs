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

/// How CUPTI's timestamps become CLOCK_REALTIME ns when CUPTI keeps another clock (they
/// differ by more than a second): from an anchor pair, at CUPTI's rate. Another tool in
/// the process can change CUPTI's clock while we trace: torch.profiler (Kineto) registers
/// a timestamp callback that counts TSC ticks, about 2 per ns, so a conversion by the
/// offset alone would make every kernel twice as long and put it seconds off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GpuClock {
    cupti0: u64,
    real0: u64,
    /// CUPTI units per ns (exactly 1.0 for a clock that only has another origin).
    rate: f64,
}

/// Pairs at least this far apart (ns) to measure a rate from.
const RATE_SPAN_NS: u64 = 5_000_000;

impl GpuClock {
    /// From two clock pairs (cupti, real) of one base, `b` the later one; a rate within
    /// 1e-4 of 1 is taken as 1 (a clock of ns with another origin).
    pub fn of(a: (u64, u64), b: (u64, u64)) -> GpuClock {
        let dr = b.1.saturating_sub(a.1);
        let dc = b.0 as i128 - a.0 as i128;
        let mut rate = if dr > 0 && dc > 0 {
            dc as f64 / dr as f64
        } else {
            1.0
        };
        if (rate - 1.0).abs() < 1e-4 {
            rate = 1.0;
        }
        GpuClock {
            cupti0: b.0,
            real0: b.1,
            rate,
        }
    }

    /// A CUPTI timestamp as CLOCK_REALTIME ns.
    pub fn real(&self, t: u64) -> u64 {
        if self.rate == 1.0 {
            (t as i64 - (self.cupti0 as i64 - self.real0 as i64)) as u64
        } else {
            let d = (t as i128 - self.cupti0 as i128) as f64 / self.rate;
            (self.real0 as i128 + d.round() as i128).max(0) as u64
        }
    }

    /// The pair (cupti, real) is of this clock's base: it converts to within 100 ms.
    fn same_base(&self, (cupti, real): (u64, u64)) -> bool {
        self.real(cupti).abs_diff(real) < 100_000_000
    }
}

pub struct CuptiSource {
    c: &'static Collector,
    /// How CUPTI's times become the host's, when CUPTI keeps another clock; `None` when
    /// it is CLOCK_REALTIME.
    gpu_clock: Option<GpuClock>,
    /// The last clock pair of the current base (cupti, real), to refine the rate with.
    last_pair: (u64, u64),
    api_names: ApiNames,
    /// Kernels decoded while `base::cupti::claims` watches (reused).
    kernels: Vec<u32>,
}

impl CuptiSource {
    pub fn new(c: &'static Collector) -> CuptiSource {
        CuptiSource {
            c,
            gpu_clock: None,
            last_pair: (0, 0),
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
                let clock = self.gpu_clock;
                let fix = |t: u64| clock.map_or(t, |c| c.real(t));
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
        if let Some(c) = self.gpu_clock {
            if crate::base::log::debugging() {
                if let Some(Event::Kernel(k)) = out.events[first..]
                    .iter()
                    .find(|e| matches!(e, Event::Kernel(_)))
                {
                    let (now, _, real) = self.c.clock_pair();
                    crate::base::log::debug(&format!(
                        "cupti clock: buffer's first kernel raw {}..{} ({} ns), cupti now {now} at real {real}, read as {}..{} with {c:?}",
                        k.start,
                        k.end,
                        k.end.saturating_sub(k.start),
                        c.real(k.start),
                        c.real(k.end)
                    ));
                }
            }
            let fix = |t: &mut u64| *t = c.real(*t);
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

    /// A clock pair, which also sets how GPU times are corrected: not at all while CUPTI
    /// keeps CLOCK_REALTIME; else by its offset and rate, measured over 5 ms when its
    /// clock is new to us (another base: the first foreign pair, or a tool that changed
    /// CUPTI's clock), refined from one checkpoint to the next.
    fn checkpoint(&mut self, out: &mut Sink<'_>) {
        let (mut cupti_ns, mut mono_ns, mut real_ns) = self.c.clock_pair();
        let off = cupti_ns as i64 - real_ns as i64;
        if off.abs() <= 1_000_000_000 {
            self.gpu_clock = None;
        } else {
            let pair = (cupti_ns, real_ns);
            self.gpu_clock = Some(match self.gpu_clock {
                Some(c) if c.same_base(pair) && real_ns >= self.last_pair.1 + RATE_SPAN_NS => {
                    GpuClock::of(self.last_pair, pair)
                }
                Some(c) if c.same_base(pair) => c,
                _ => {
                    // A new base: its rate, from a second pair 5 ms on (the writer
                    // thread waits; once per change of CUPTI's clock).
                    std::thread::sleep(std::time::Duration::from_nanos(RATE_SPAN_NS));
                    (cupti_ns, mono_ns, real_ns) = self.c.clock_pair();
                    GpuClock::of(pair, (cupti_ns, real_ns))
                }
            });
            self.last_pair = (cupti_ns, real_ns);
            crate::base::log::debug(&format!(
                "cupti clock: pair ({cupti_ns}, {real_ns}), {:?}",
                self.gpu_clock
            ));
        }
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

#[cfg(test)]
mod tests {
    use super::GpuClock;

    const REAL: u64 = 1_796_600_000_000_000_000;

    #[test]
    fn a_clock_of_another_origin_is_moved_by_its_offset_exactly() {
        // CUPTI's ns since boot: the same rate, another origin.
        let boot = 5_000_000_000_000;
        let c = GpuClock::of((boot, REAL), (boot + 5_000_000, REAL + 5_000_000));
        assert_eq!(c.rate, 1.0);
        assert_eq!(c.real(boot + 123_456_789), REAL + 123_456_789);
    }

    #[test]
    fn a_tick_clock_is_converted_at_its_rate() {
        // TSC ticks at 2.1 per ns (torch.profiler's timestamp callback): a 60 us kernel
        // 1 s after the anchor is 126 000 ticks long, and must read 60 us, 1 s on.
        let (tsc0, ghz) = (900_000_000_000_000u64, 2.1);
        let at = |ns: u64| tsc0 + (ns as f64 * ghz) as u64;
        let c = GpuClock::of((at(0), REAL), (at(5_000_000), REAL + 5_000_000));
        assert!((c.rate - ghz).abs() < 1e-6, "{}", c.rate);
        let (s, e) = (c.real(at(1_000_000_000)), c.real(at(1_000_060_000)));
        assert!(
            s.abs_diff(REAL + 1_000_000_000) <= 2,
            "{}",
            s as i64 - REAL as i64
        );
        assert!((e - s).abs_diff(60_000) <= 2, "{}", e - s);
        // A pair of another base is told apart.
        assert!(c.same_base((at(2_000_000_000), REAL + 2_000_000_000)));
        assert!(!c.same_base((REAL + 3_000_000_000, REAL + 3_000_000_000)));
    }
}
