//! One lifecycle for every session: the [`Session`] trait, each session's adapter onto
//! its own start, stop and fork functions (their internals stay in their modules), and
//! [`SESSIONS`], the list the runtime iterates over.
//!
//! The runtime, for a trace (or a window):
//! 1. [`Session::open`] on each session in list order, before the writer starts: a
//!    session gets ready and says what the writer drains of it; the writer drains the
//!    sources in that order (the CUPTI session's buffers first, then the host rings, so
//!    a stall report sees the records a forced flush just delivered);
//! 2. [`Session::start`] in reverse list order, after the writer started: the samplers
//!    run before the CUPTI session, started last, opens the window (the process state
//!    becomes tracing, or blind where CUPTI cannot be had);
//! 3. [`Session::flush`] on each when a report or an abnormal end needs what the
//!    sessions hold now (`runtime::watchdog`);
//! 4. [`Session::stop`] in list order at the end of the trace or the window;
//! 5. [`Session::fork_child`] on each in a forked child.

use super::cupti::{self, buffers, foreign, Collector};
use super::{env, host, pystack, stall};
use crate::base::opts::Opts;
use crate::base::{clock, log, state};
use crate::rings::source::RingSource;
use crate::writer::{self, Source};
use gputrace_format::CollectorState;
use std::sync::OnceLock;
use std::time::Duration;

/// What a session is told when the trace starts.
pub struct Opening<'a> {
    pub opts: &'a Opts,
    /// What started the trace (`injection`, a window's reason), as the trace says it.
    pub started_by: &'a str,
}

/// What a session is told when the trace (or the window) ends.
pub struct Closing {
    /// The process was tracing (not blind) when the end began.
    pub was_tracing: bool,
    /// The end of a window of a dormant process (CUPTI is released), not of the trace
    /// at exit.
    pub end_of_window: bool,
    /// The longest a session waits for its last sample.
    pub wait: Duration,
}

/// A sampler or collector that records while a trace is open.
pub trait Session: Sync {
    /// Its name (the debug log's).
    fn name(&self) -> &'static str;
    /// A trace is opening and the writer is not running yet: get ready, and give the
    /// writer what it drains of this session (if anything).
    fn open(&self, _o: &Opts) -> Option<Box<dyn Source>> {
        None
    }
    /// Starts recording (the writer is running).
    fn start(&self, _o: &Opening<'_>) {}
    /// Hands over what it holds now (a stall report or an abnormal end wants it).
    fn flush(&self) {}
    /// Stops recording; waits at most `c.wait` for a last sample.
    fn stop(&self, _c: &Closing) {}
    /// In a forked child: forgets the parent's threads, queues and handles.
    fn fork_child(&self) {}
    /// What it records in this process, in a few words (the debug log's).
    fn describe(&self, o: &Opts) -> String;
}

/// Every session, in the order the writer drains them (see the module's doc).
pub static SESSIONS: [&dyn Session; 5] = [&Cupti, &Pystack, &Stall, &Env, &Host];

/// One line naming every session and what it records.
pub fn describe_all(o: &Opts) -> String {
    let parts: Vec<String> = SESSIONS
        .iter()
        .map(|s| format!("{}: {}", s.name(), s.describe(o)))
        .collect();
    parts.join("; ")
}

/// Every session hands over what it holds now (a stall report, an abnormal end): a
/// forced CUPTI flush while tracing, then the Python stacks.
pub fn flush_all() {
    for s in SESSIONS.iter() {
        s.flush();
    }
}

/// Ends every session, in list order (CUPTI first: it stops collecting).
pub fn stop_all(c: &Closing) {
    for s in SESSIONS.iter() {
        s.stop(c);
    }
}

/// In a forked child: every session forgets the parent's.
pub fn fork_child_all() {
    for s in SESSIONS.iter() {
        s.fork_child();
    }
}

// ---------------------------------------------------------------------------------
// CUPTI: GPU activity and the API callbacks.

static CUPTI_ERROR: OnceLock<cupti::Error> = OnceLock::new();

/// The collector, loaded on first use; `Err` (remembered) when CUPTI is unusable.
pub fn collector(o: &Opts) -> Result<&'static Collector, cupti::Error> {
    if let Some(c) = cupti::active() {
        return Ok(c);
    }
    if let Some(e) = CUPTI_ERROR.get() {
        return Err(e.clone());
    }
    match Collector::load(o) {
        Ok(c) => {
            buffers::configure(o.buffer_bytes(), o.pool_bytes());
            Ok(cupti::install(c))
        }
        Err(e) => {
            let _ = CUPTI_ERROR.set(e.clone());
            Err(e)
        }
    }
}

struct Cupti;

impl Session for Cupti {
    fn name(&self) -> &'static str {
        "cupti"
    }

    fn open(&self, _o: &Opts) -> Option<Box<dyn Source>> {
        cupti::active().map(|c| Box::new(cupti::source::CuptiSource::new(c)) as Box<dyn Source>)
    }

    /// Opens the window: collection is switched on, then CUPTI starts recording.
    /// Without CUPTI we still trace what the symbol hooks see (copies, NCCL, NVTX), and
    /// the trace says GPU activity was not recorded.
    fn start(&self, w: &Opening<'_>) {
        let (c, cupti_err) = match collector(w.opts) {
            Ok(c) => (Some(c), None),
            Err(e) => (None, Some(e)),
        };
        // The window opens when collection is switched on, before CUPTI starts recording.
        let opened = clock::now_ns();
        state::set(state::TRACING);
        let blind = match (c, cupti_err) {
            // The program started a CUPTI session of its own before CUDA initialised (a
            // profiler started first): leave it alone; we take CUPTI when it is done.
            (Some(_), _) if foreign::holds_cupti() => {
                state::set(state::BLIND);
                writer::note_state(
                    CollectorState::Blind,
                    "the program was using CUPTI itself when CUDA started",
                );
                return;
            }
            (Some(c), _) => c.start().err(),
            (None, e) => e,
        };
        if let Some(e) = blind {
            // Keep the host-side hooks; GPU activity is not seen.
            if let Some(c) = c {
                c.stop();
            }
            writer::note_state(CollectorState::Blind, &format!("no GPU activity: {e}"));
            log::warn(&format!(
                "{e}; GPU activity is not recorded (the program runs on unchanged)"
            ));
        } else {
            writer::note_state_at(opened, CollectorState::Tracing, w.started_by);
        }
    }

    /// A forced flush: CUPTI hands over every completed record, and an incomplete one.
    fn flush(&self) {
        if let Some(c) = cupti::active().filter(|_| state::is_tracing()) {
            c.flush(true);
        }
    }

    fn stop(&self, e: &Closing) {
        if let Some(c) = cupti::active() {
            if e.was_tracing {
                c.stop();
            }
            if e.end_of_window {
                writer::note_state(CollectorState::Stopped, "end of window");
                c.finalize();
            }
        }
    }

    fn fork_child(&self) {
        cupti::forget_after_fork();
    }

    fn describe(&self, _o: &Opts) -> String {
        match cupti::active() {
            Some(c) => format!(
                "{} ({}, CUPTI API {})",
                c.path.display(),
                c.source,
                c.api_version
            ),
            None => "not loaded".into(),
        }
    }
}

// ---------------------------------------------------------------------------------
// Python stacks, taken on the program's threads into the host rings.

struct Pystack;

impl Session for Pystack {
    fn name(&self) -> &'static str {
        "pystack"
    }

    /// Python call sites: the interpreter is looked for (once) before the rings' source
    /// is made, so the trace says from its first drain whether it has them. The rings'
    /// source resolves the stacks.
    fn open(&self, o: &Opts) -> Option<Box<dyn Source>> {
        pystack::start(o.pystack);
        Some(Box::new(RingSource::with_stacks(Box::new(
            pystack::resolve::Resolver::new(o.pystack),
        ))))
    }

    /// The latest Python stacks of the CUDA-issuing threads.
    fn flush(&self) {
        pystack::sample::take(false);
    }

    fn stop(&self, _c: &Closing) {
        pystack::stop();
    }

    fn fork_child(&self) {
        pystack::after_fork();
        pystack::sample::reset_after_fork();
    }

    fn describe(&self, o: &Opts) -> String {
        match pystack::status(o.pystack) {
            Ok(s) => s,
            Err(why) => why,
        }
    }
}

// ---------------------------------------------------------------------------------
// Stall reports: outstanding launches and the calls threads are in.

struct Stall;

impl Session for Stall {
    fn name(&self) -> &'static str {
        "stall"
    }

    /// After the CUPTI session and the rings: a report sees the records a forced flush
    /// just delivered and the Python stacks sampled for it.
    fn open(&self, _o: &Opts) -> Option<Box<dyn Source>> {
        Some(Box::new(stall::source::StallSource::new()))
    }

    fn fork_child(&self) {
        stall::forget_after_fork();
    }

    fn describe(&self, o: &Opts) -> String {
        format!("stall reports after {} ms without progress", o.stall_ms)
    }
}

// ---------------------------------------------------------------------------------
// The environment: facts and NVML samples.

struct Env;

impl Session for Env {
    fn name(&self) -> &'static str {
        "env"
    }

    fn open(&self, _o: &Opts) -> Option<Box<dyn Source>> {
        Some(Box::new(env::EnvSource))
    }

    fn start(&self, w: &Opening<'_>) {
        env::start(w.opts);
    }

    fn stop(&self, c: &Closing) {
        env::stop(c.wait);
    }

    fn fork_child(&self) {
        env::forget_after_fork();
    }

    fn describe(&self, o: &Opts) -> String {
        format!("facts, NVML {:?} every {} ms", o.nvml_lib(), o.nvml_ms)
    }
}

// ---------------------------------------------------------------------------------
// The host side from /proc: threads' CPU time, the process tree, the machine.

struct Host;

impl Session for Host {
    fn name(&self) -> &'static str {
        "host"
    }

    fn open(&self, _o: &Opts) -> Option<Box<dyn Source>> {
        Some(Box::new(host::HostSource::new()))
    }

    fn start(&self, w: &Opening<'_>) {
        host::start(w.opts.host_settings());
    }

    fn stop(&self, c: &Closing) {
        host::stop(c.wait);
    }

    fn fork_child(&self) {
        host::forget_after_fork();
    }

    fn describe(&self, o: &Opts) -> String {
        let h = &o.host_settings();
        if h.on {
            format!(
                "/proc every {:?} (threads), {:?} (tree)",
                h.thread_period, h.tree_period
            )
        } else {
            "off".into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drain_order() {
        // The writer drains CUPTI's buffers first, then the rings (with the Python
        // stacks), then the stall reports that read both.
        let names: Vec<&str> = SESSIONS.iter().map(|s| s.name()).collect();
        assert_eq!(names, ["cupti", "pystack", "stall", "env", "host"]);
    }

    #[test]
    fn every_session_describes_itself() {
        let o = Opts::default();
        let line = describe_all(&o);
        for s in SESSIONS.iter() {
            assert!(line.contains(&format!("{}: ", s.name())), "{line}");
        }
        // Not loaded in the unit tests (no CUPTI here).
        assert!(line.starts_with("cupti: not loaded; "), "{line}");
    }
}
