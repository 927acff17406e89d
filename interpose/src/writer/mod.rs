//! The bottom layer above `base`: the one background thread that writes the trace. It
//! wakes every few milliseconds, drains its [`Source`]s (the host rings, the CUPTI
//! session's completed buffers) into events, adds what the other layers queued in its
//! [`inbox`], and writes a chunk at least every `flush_ms`, so a killed process leaves
//! a trace that reads up to its last second or so.
//!
//! The writer knows no CUPTI and no hook: every record reaches it through a `Source`
//! it was handed at start.

pub mod file;
pub mod inbox;
pub mod intern;
pub mod source;

pub use file::create_trace_file;
pub use source::{Sink, Source};

use crate::base::worker::lock;
use crate::base::{clock, internal, log, state};
use gputrace_format::{ChunkWriter, CollectorState, Encoder, Event, Meta};
use intern::Interner;
use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How often the writer drains its sources.
const DRAIN_EVERY: Duration = Duration::from_millis(5);
/// A chunk is written once this much is encoded, whatever the time.
const CHUNK_BYTES: usize = 1 << 20;

static WAKE: Condvar = Condvar::new();
static WAKE_LOCK: Mutex<bool> = Mutex::new(false);
static STOP: AtomicBool = AtomicBool::new(false);
static DONE: Mutex<bool> = Mutex::new(false);
static DONE_CV: Condvar = Condvar::new();
static RUNNING: AtomicBool = AtomicBool::new(false);
/// A chunk is wanted now (a stall report): written at the next pass, whatever the time.
static WRITE_NOW: AtomicBool = AtomicBool::new(false);
/// The signal that is ending the process (0: none), for the end record's reason.
static END_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// Asks the writer to write what it has at its next pass (a stall report, which a
/// SIGKILL may follow), and wakes it.
pub fn write_soon() {
    WRITE_NOW.store(true, Ordering::Release);
    wake();
}

/// The process is ending by signal `sig`: the end record says so.
pub fn note_end_signal(sig: i32) {
    END_SIGNAL.store(sig, Ordering::Release);
}

/// Wakes the writer early (a CUPTI buffer completed, a state changed).
pub fn wake() {
    *lock(&WAKE_LOCK) = true;
    WAKE.notify_one();
}

/// Records a state change for the trace.
pub fn note_state(state: CollectorState, reason: &str) {
    note_state_at(clock::now_ns(), state, reason);
}

/// Records a state change that happened at `ts` (CLOCK_REALTIME ns).
pub fn note_state_at(ts: u64, state: CollectorState, reason: &str) {
    inbox::push_state(ts, state, reason);
    wake();
}

/// Queues a device's properties for the trace (the name is interned by the writer).
pub fn push_device(d: gputrace_format::Device, name: String) {
    inbox::push_device(d, name);
}

pub fn is_running() -> bool {
    RUNNING.load(Ordering::Acquire)
}

/// Starts the writer thread on an open trace file, draining `sources`.
pub fn start(
    file: File,
    meta: Meta,
    sources: Vec<Box<dyn Source>>,
    flush_ms: u64,
    compress: bool,
) -> io::Result<()> {
    let mut out = ChunkWriter::new(file, &meta)?;
    if !compress {
        out = out.without_compression();
    }
    STOP.store(false, Ordering::Release);
    *lock(&DONE) = false;
    RUNNING.store(true, Ordering::Release);
    let spawned = std::thread::Builder::new()
        .name("gputrace-writer".into())
        .spawn(move || {
            internal::mark_thread_internal();
            // The end-of-process handlers wait for this thread: they never run on it.
            crate::base::ffi::block_end_signals();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                Writer::new(out, sources, flush_ms).run()
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
            *lock(&DONE) = true;
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
    let mut done = lock(&DONE);
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
    WRITE_NOW.store(false, Ordering::Release);
    END_SIGNAL.store(0, Ordering::Release);
    STOP.store(false, Ordering::Release);
    inbox::forget_after_fork();
    if let Ok(mut d) = DONE.try_lock() {
        *d = false;
    }
}

struct Writer {
    out: ChunkWriter<File>,
    sources: Vec<Box<dyn Source>>,
    enc: Encoder,
    names: Interner,
    evs: Vec<Event>,
    flush_every: Duration,
    last_write: Instant,
}

impl Writer {
    fn new(out: ChunkWriter<File>, sources: Vec<Box<dyn Source>>, flush_ms: u64) -> Self {
        Writer {
            out,
            sources,
            enc: Encoder::new(),
            names: Interner::new(),
            evs: Vec::with_capacity(4096),
            flush_every: Duration::from_millis(flush_ms),
            last_write: Instant::now(),
        }
    }

    fn run(mut self) -> io::Result<()> {
        self.checkpoint();
        loop {
            {
                let g = lock(&WAKE_LOCK);
                let (mut g, _) = WAKE
                    .wait_timeout_while(g, DRAIN_EVERY, |woken| !*woken)
                    .unwrap_or_else(|e| e.into_inner());
                *g = false;
            }
            let stopping = STOP.load(Ordering::Acquire);
            self.collect();
            if stopping
                || WRITE_NOW.swap(false, Ordering::AcqRel)
                || self.enc.len() >= CHUNK_BYTES
                || self.last_write.elapsed() >= self.flush_every
            {
                if !stopping {
                    self.checkpoint();
                }
                self.write_chunk()?;
            }
            if stopping {
                // One more pass for anything that arrived while we wrote.
                self.collect();
                self.checkpoint();
                let ts = clock::now_ns();
                let sig = END_SIGNAL.load(Ordering::Acquire);
                let reason = if sig > 0 {
                    gputrace_format::end_reason_signal(sig)
                } else {
                    gputrace_format::END_EXIT.to_string()
                };
                let reason = self.names.intern(&reason, &mut self.evs);
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

    fn sink(&mut self) -> (Sink<'_>, &mut Vec<Box<dyn Source>>) {
        (
            Sink {
                names: &mut self.names,
                events: &mut self.evs,
            },
            &mut self.sources,
        )
    }

    /// Every source's checkpoint (clock pairs), into the next chunk.
    fn checkpoint(&mut self) {
        let (mut sink, sources) = self.sink();
        for s in sources.iter_mut() {
            s.checkpoint(&mut sink);
        }
    }

    /// Gathers everything waiting: the sources' records, then queued devices and state
    /// changes.
    fn collect(&mut self) {
        let (mut sink, sources) = self.sink();
        for s in sources.iter_mut() {
            s.drain(&mut sink);
        }
        for (mut d, name) in inbox::take_devices() {
            d.name = self.names.intern(&name, &mut self.evs);
            self.evs.push(Event::Device(d));
        }
        for (ts, s, reason) in inbox::take_states() {
            let reason = self.names.intern(&reason, &mut self.evs);
            self.evs.push(Event::State {
                ts,
                state: s as u8,
                reason,
            });
        }
        self.encode_pending();
    }

    fn encode_pending(&mut self) {
        for e in self.evs.drain(..) {
            self.enc.push(&e);
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
