//! The one background thread that turns CUPTI buffers and ring records into trace
//! chunks and writes them. It wakes every few milliseconds to drain the rings and
//! writes a chunk at least every `flush_ms`, so a killed process leaves a trace that
//! reads up to its last second or so.

use crate::collector::{self, Collector};
use crate::intern::Interner;
use crate::ring::{self, HostRecord, REC_API};
use crate::sampler::{self, Sample};
use crate::{apis, guard, log, records, state};
use gputrace_format::{self as fmt, ChunkWriter, CollectorState, Encoder, Event, Meta};
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How often the writer drains the rings.
const DRAIN_EVERY: Duration = Duration::from_millis(5);
/// A chunk is written once this much is encoded, whatever the time.
const CHUNK_BYTES: usize = 1 << 20;

static WAKE: Condvar = Condvar::new();
static WAKE_LOCK: Mutex<bool> = Mutex::new(false);
static STOP: AtomicBool = AtomicBool::new(false);
static DONE: Mutex<bool> = Mutex::new(false);
static DONE_CV: Condvar = Condvar::new();
static RUNNING: AtomicBool = AtomicBool::new(false);
static PENDING: Mutex<Vec<(u64, CollectorState, String)>> = Mutex::new(Vec::new());
static DEVICES: Mutex<Vec<(fmt::Device, String)>> = Mutex::new(Vec::new());

/// Queues a device's properties for the trace (the name is interned by the writer).
pub fn push_device(d: fmt::Device, name: String) {
    collector::lock(&DEVICES).push((d, name));
}

/// Wakes the writer early (a CUPTI buffer completed).
pub fn wake() {
    *collector::lock(&WAKE_LOCK) = true;
    WAKE.notify_one();
}

/// Queues a collector state change for the trace.
pub fn push_state(ts: u64, s: CollectorState, reason: &str) {
    collector::lock(&PENDING).push((ts, s, reason.to_string()));
    wake();
}

pub fn is_running() -> bool {
    RUNNING.load(Ordering::Acquire)
}

/// Creates `dir` (mode 0700) and a new trace file in it (mode 0600).
pub fn create_trace_file(dir: &Path, host: &str, pid: u32) -> io::Result<(File, PathBuf)> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    for n in 0..1000 {
        let name = if n == 0 {
            format!("gputrace-{host}-{pid}.gtrace")
        } else {
            format!("gputrace-{host}-{pid}-{n}.gtrace")
        };
        let path = dir.join(name);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(&path)
        {
            Ok(f) => return Ok((f, path)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("too many trace files for this pid"))
}

/// Starts the writer thread on an open trace file.
pub fn start(
    file: File,
    meta: Meta,
    collector: Option<&'static Collector>,
    flush_ms: u64,
    compress: bool,
) -> io::Result<()> {
    let mut out = ChunkWriter::new(file, &meta)?;
    if !compress {
        out = out.without_compression();
    }
    STOP.store(false, Ordering::Release);
    *collector::lock(&DONE) = false;
    RUNNING.store(true, Ordering::Release);
    let spawned = std::thread::Builder::new()
        .name("gputrace-writer".into())
        .spawn(move || {
            guard::mark_thread_internal();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                Writer::new(out, collector, flush_ms).run()
            }));
            match r {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    state::set(state::DISABLED);
                    log::warn(&format!("writing the trace failed ({e}); tracing off"));
                }
                Err(_) => {
                    state::set(state::DISABLED);
                    log::warn("internal error in the trace writer; tracing off");
                }
            }
            RUNNING.store(false, Ordering::Release);
            *collector::lock(&DONE) = true;
            DONE_CV.notify_all();
        });
    match spawned {
        Ok(_) => Ok(()),
        Err(e) => {
            RUNNING.store(false, Ordering::Release);
            Err(e)
        }
    }
}

/// Asks the writer to write everything and stop; waits at most `wait`.
/// Returns false if it did not finish in time.
pub fn finish(wait: Duration) -> bool {
    if !is_running() {
        return true;
    }
    STOP.store(true, Ordering::Release);
    wake();
    let deadline = Instant::now() + wait;
    let mut done = collector::lock(&DONE);
    while !*done {
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        done = DONE_CV
            .wait_timeout(done, deadline - now)
            .map(|(g, _)| g)
            .unwrap_or_else(|e| e.into_inner().0);
    }
    true
}

/// In a forked child: the parent's writer thread does not exist here.
pub fn forget_after_fork() {
    RUNNING.store(false, Ordering::Release);
    STOP.store(false, Ordering::Release);
    if let Ok(mut p) = PENDING.try_lock() {
        p.clear();
    }
    if let Ok(mut d) = DONE.try_lock() {
        *d = false;
    }
}

struct Writer {
    out: ChunkWriter<File>,
    collector: Option<&'static Collector>,
    layout: Option<&'static records::Layout>,
    enc: Encoder,
    names: Interner,
    api_names: HashMap<(u8, u32), u32>,
    threads: HashMap<u32, ()>,
    evs: Vec<Event>,
    flush_every: Duration,
    last_write: Instant,
    /// CUPTI timestamp minus host REALTIME, when CUPTI uses another clock altogether
    /// (they differ by more than a second); 0 when both are CLOCK_REALTIME.
    gpu_offset: i64,
    /// The host sampler's samples, swapped out of its queue (capacity kept).
    samples: Vec<Sample>,
}

impl Writer {
    fn new(out: ChunkWriter<File>, collector: Option<&'static Collector>, flush_ms: u64) -> Self {
        Writer {
            out,
            collector,
            layout: collector.map(|c| c.layout),
            enc: Encoder::new(),
            names: Interner::new(),
            api_names: HashMap::new(),
            threads: HashMap::new(),
            evs: Vec::with_capacity(4096),
            flush_every: Duration::from_millis(flush_ms),
            last_write: Instant::now(),
            gpu_offset: 0,
            samples: Vec::with_capacity(1024),
        }
    }

    fn run(mut self) -> io::Result<()> {
        self.clock_pair();
        loop {
            {
                let g = collector::lock(&WAKE_LOCK);
                let (mut g, _) = WAKE
                    .wait_timeout_while(g, DRAIN_EVERY, |woken| !*woken)
                    .unwrap_or_else(|e| e.into_inner());
                *g = false;
            }
            let stopping = STOP.load(Ordering::Acquire);
            self.collect();
            if stopping
                || self.enc.len() >= CHUNK_BYTES
                || self.last_write.elapsed() >= self.flush_every
            {
                if !stopping {
                    self.clock_pair();
                }
                self.write_chunk()?;
            }
            if stopping {
                // One more pass for anything that arrived while we wrote.
                self.collect();
                self.clock_pair();
                let ts = crate::clock::now_ns();
                let reason = self.names.intern("exit", &mut self.evs);
                self.evs.push(Event::State {
                    ts,
                    state: CollectorState::Stopped as u8,
                    reason,
                });
                self.encode_pending();
                self.write_chunk()?;
                return Ok(());
            }
        }
    }

    fn clock_pair(&mut self) {
        if let Some(c) = self.collector {
            let (cupti_ns, mono_ns, real_ns) = c.clock_pair();
            let off = cupti_ns as i64 - real_ns as i64;
            self.gpu_offset = if off.abs() > 1_000_000_000 { off } else { 0 };
            self.evs.push(Event::Clock {
                cupti_ns,
                mono_ns,
                real_ns,
            });
        }
    }

    /// Gathers everything waiting: CUPTI buffers, ring records, drops, state changes.
    fn collect(&mut self) {
        let bufs = std::mem::take(&mut *collector::lock(&collector::COMPLETED));
        for (addr, valid) in bufs {
            self.decode_buffer(addr, valid);
            collector::recycle(addr, valid);
        }
        let mut recs: Vec<(u32, HostRecord)> = Vec::new();
        let (_, dropped) = ring::drain_all(|tid, r| recs.push((tid, *r)));
        for (tid, r) in recs {
            self.host_record(tid, &r);
        }
        let ts = crate::clock::now_ns();
        for (source, n) in [
            (fmt::DROP_RING, dropped),
            (
                fmt::DROP_CUPTI,
                collector::CUPTI_DROPPED.swap(0, Ordering::Relaxed),
            ),
            (
                fmt::DROP_BUFFER_POOL,
                collector::POOL_EXHAUSTED.swap(0, Ordering::Relaxed),
            ),
            (
                fmt::DROP_HOST_SAMPLES,
                sampler::DROPPED.swap(0, Ordering::Relaxed),
            ),
        ] {
            if n > 0 {
                self.evs.push(Event::Dropped {
                    ts,
                    source,
                    count: n,
                });
            }
        }
        self.host_samples();
        let devices = std::mem::take(&mut *collector::lock(&DEVICES));
        for (mut d, name) in devices {
            d.name = self.names.intern(&name, &mut self.evs);
            self.evs.push(Event::Device(d));
        }
        let names = &mut self.names;
        crate::envsession::drain(&mut |t, out| names.intern(t, out), &mut self.evs);
        let pending = std::mem::take(&mut *collector::lock(&PENDING));
        for (ts, s, reason) in pending {
            let reason = self.names.intern(&reason, &mut self.evs);
            self.evs.push(Event::State {
                ts,
                state: s as u8,
                reason,
            });
        }
        self.encode_pending();
    }

    /// The host sampler's readings, as events (process names interned).
    fn host_samples(&mut self) {
        sampler::drain(&mut self.samples);
        for s in self.samples.drain(..) {
            let e = match s {
                Sample::Thread(x) => Event::ThreadCpu(x),
                Sample::Proc(mut x, comm) => {
                    let name = String::from_utf8_lossy(comm.as_bytes());
                    x.comm = self.names.intern(&name, &mut self.evs);
                    Event::ProcSample(x)
                }
                Sample::Machine(x) => Event::MachineSample(x),
                Sample::Limits(x) => Event::CpuLimits(x),
            };
            self.evs.push(e);
        }
    }

    fn encode_pending(&mut self) {
        for e in self.evs.drain(..) {
            self.enc.push(&e);
        }
    }

    fn decode_buffer(&mut self, addr: usize, valid: usize) {
        let (Some(c), Some(layout)) = (self.collector, self.layout) else {
            return;
        };
        let mut rec: *mut cupti_sys::CUpti_Activity = std::ptr::null_mut();
        let first = self.evs.len();
        loop {
            let r = collector::call!(
                c.cupti,
                cuptiActivityGetNextRecord(addr as *mut u8, valid, &mut rec)
            );
            if r != cupti_sys::CUptiResult_CUPTI_SUCCESS || rec.is_null() {
                break;
            }
            // SAFETY: CUPTI returned a pointer to a whole record inside our buffer; its
            // first field is the activity kind.
            let kind = unsafe { (*rec).kind };
            if kind == cupti_sys::CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_RUNTIME {
                // SAFETY: a RUNTIME record is a CUpti_ActivityAPI, the same struct in
                // every CUPTI version we support.
                let a = unsafe { (rec as *const cupti_sys::CUpti_ActivityAPI).read_unaligned() };
                let fix = |t: u64| (t as i64 - self.gpu_offset) as u64;
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
                self.push_api(&r);
                continue;
            }
            // SAFETY: `rec` is a record of `kind` in the layout of this CUPTI version.
            unsafe {
                records::decode(
                    layout,
                    kind,
                    rec as *const u8,
                    &mut self.names,
                    &mut self.evs,
                )
            };
        }
        if self.gpu_offset != 0 {
            let off = self.gpu_offset;
            let fix = |t: &mut u64| *t = (*t as i64 - off) as u64;
            for e in &mut self.evs[first..] {
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
                    _ => {}
                }
            }
        }
    }

    fn host_record(&mut self, tid: u32, r: &HostRecord) {
        if self.threads.insert(tid, ()).is_none() {
            if let Ok(name) = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")) {
                let name = self.names.intern(name.trim_end(), &mut self.evs);
                self.evs.push(Event::Thread { tid, name });
            }
        }
        if r.kind == REC_API {
            let mut r = *r;
            (r.t0, r.t1) = crate::sym::rec::span_to_real(r.t0, r.t1);
            self.push_api(&r);
        } else {
            // The symbol hooks' records (copies, calls, NCCL, NVTX, pinned memory).
            crate::sym::rec::decode(r, &mut self.names, &mut self.evs);
        }
    }

    /// A host API call, from our CUPTI callback or from a RUNTIME activity record.
    fn push_api(&mut self, r: &HostRecord) {
        {
            let domain = r.a as u8;
            let name = match self.api_names.get(&(domain, r.b)) {
                Some(id) => *id,
                None => {
                    let text = apis::find(domain, r.b)
                        .map(|a| a.name.to_string())
                        .unwrap_or_else(|| format!("cbid_{}", r.b));
                    let id = self.names.intern(&text, &mut self.evs);
                    self.api_names.insert((domain, r.b), id);
                    id
                }
            };
            self.evs.push(Event::Api(fmt::Api {
                start: r.t0,
                end: r.t1,
                tid: r.tid,
                corr: r.corr,
                domain,
                cbid: r.b,
                name,
                bytes: r.x[0],
                arg: r.x[1] as u32,
                result: r.x[2] as u32,
            }));
        }
    }

    fn write_chunk(&mut self) -> io::Result<()> {
        self.last_write = Instant::now();
        if self.enc.is_empty() {
            return Ok(());
        }
        self.out.write_events(&mut self.enc)
    }
}
