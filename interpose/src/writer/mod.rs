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

use crate::base::worker::{lock, Spec, Worker, POLICY};
use crate::base::{clock, log, state};
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
static WORKER: Worker = Worker::new();
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

/// The process is ending through a call that runs no exit handler (`_exit 3`): the
/// end record says so.
static END_CALL: Mutex<Option<String>> = Mutex::new(None);

pub fn note_end_call(reason: String) {
    *lock(&END_CALL) = Some(reason);
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
    WORKER.is_running()
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
    fn trace_off() {
        state::set(state::DISABLED);
    }
    let spec = Spec {
        // The end-of-process handlers wait for this thread: they never run on it.
        first: crate::base::ffi::block_end_signals,
        on_panic_also: trace_off,
        ..Spec::new(
            "gputrace-writer",
            "internal error in the trace writer; tracing off",
        )
    };
    let started = WORKER.start(&POLICY, spec, move || {
        if let Err(e) = Writer::new(out, sources, flush_ms).run() {
            state::set(state::DISABLED);
            log::warn(&format!("writing the trace failed ({e}); tracing off"));
        }
    })?;
    if !started {
        return Err(io::Error::other("the last trace's writer is still running"));
    }
    Ok(())
}

/// Asks the writer to write everything and stop; waits at most `wait`.
/// Returns false if it did not finish in time.
pub fn finish(wait: Duration) -> bool {
    if !is_running() {
        return true;
    }
    WORKER.request_stop();
    wake();
    WORKER.wait_done(wait)
}

/// In a forked child: the parent's writer thread does not exist here.
pub fn forget_after_fork() {
    WORKER.forget_after_fork();
    WRITE_NOW.store(false, Ordering::Release);
    END_SIGNAL.store(0, Ordering::Release);
    if let Ok(mut c) = END_CALL.try_lock() {
        *c = None;
    }
    inbox::forget_after_fork();
}

struct Writer {
    out: ChunkWriter<File>,
    sources: Vec<Box<dyn Source>>,
    enc: Encoder,
    names: Interner,
    evs: Vec<Event>,
    flush_every: Duration,
    last_write: Instant,
    /// The file's removal was said.
    removed_said: bool,
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
            removed_said: false,
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
            let stopping = WORKER.stop_requested();
            self.collect();
            if stopping
                || WRITE_NOW.swap(false, Ordering::AcqRel)
                || self.enc.len() >= CHUNK_BYTES
                || self.last_write.elapsed() >= self.flush_every
            {
                if !stopping {
                    self.checkpoint();
                }
                self.write_chunk(false)?;
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
                    lock(&END_CALL)
                        .take()
                        .unwrap_or_else(|| gputrace_format::END_EXIT.to_string())
                };
                let reason = self.names.intern(&reason, &mut self.evs);
                self.evs.push(Event::State {
                    ts,
                    state: CollectorState::Stopped as u8,
                    reason,
                });
                self.encode_pending();
                // The end record's chunk, marked as the last: readers take nothing after it.
                self.write_chunk(true)?;
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

    /// Writes what is encoded as one chunk; `end`: the file's last, holding the end record.
    fn write_chunk(&mut self, end: bool) -> io::Result<()> {
        self.last_write = Instant::now();
        if self.enc.is_empty() {
            return Ok(());
        }
        if end {
            self.out.write_end(&mut self.enc)?;
        } else {
            self.out.write_events(&mut self.enc)?;
        }
        self.say_if_removed();
        Ok(())
    }

    /// The file was unlinked (its directory removed, a clean-up job): writes still
    /// succeed into a file nobody can open, so the user is told once, on stderr.
    fn say_if_removed(&mut self) {
        use std::os::unix::fs::MetadataExt;
        if self.removed_said {
            return;
        }
        if self.out.get_ref().metadata().is_ok_and(|m| m.nlink() == 0) {
            self.removed_said = true;
            log::warn(
                "the trace file was removed while the job runs (its directory deleted?): this process's trace is lost",
            );
        }
    }
}
