//! Opening a trace (a file, the writer draining the sessions' and rings' records, the
//! CUPTI session started) and finishing it.

use super::settings::opts;
use crate::base::{clock, discover, log, state};
use crate::rings::source::RingSource;
use crate::session::cupti::source::CuptiSource;
use crate::session::cupti::{self, buffers, foreign, Collector};
use crate::session::{env, host, pystack, stall};
use crate::writer::{self, Source};
use gputrace_format::protocol::TraceFileName;
use gputrace_format::{CollectorState, Meta};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// Why a trace (or a window) could not be had.
#[derive(Debug)]
pub enum TraceError {
    /// The trace file could not be created in `dir`.
    File { dir: PathBuf, err: std::io::Error },
    /// The writer thread could not start.
    Writer(std::io::Error),
    /// A window is running already, or the process is exiting.
    Busy,
    /// The writer did not finish the window's trace in time.
    Unfinished(PathBuf),
    /// The program holds a CUPTI subscription of its own (a late-loaded library only).
    CuptiTaken,
}

impl std::fmt::Display for TraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TraceError::File { dir, err } => {
                write!(f, "cannot create a trace file in {}: {err}", dir.display())
            }
            TraceError::Writer(e) => write!(f, "cannot start the trace writer: {e}"),
            TraceError::Busy => {
                write!(f, "a window is already running (or the process is exiting)")
            }
            TraceError::CuptiTaken => write!(
                f,
                "the program holds a CUPTI subscription of its own (torch.profiler running, or run before in this process, Kineto on demand, another tool): no window while it does, so its records stay its own; start the job with `gputrace run --dormant` to trace it beside its profiler"
            ),
            TraceError::Unfinished(p) => {
                write!(f, "the trace writer did not finish {}", p.display())
            }
        }
    }
}

/// The process whose trace is open (0 when none).
static TRACED_PID: AtomicU32 = AtomicU32::new(0);

pub fn traced_pid() -> u32 {
    TRACED_PID.load(Ordering::Acquire)
}

/// The host's name as trace files carry it (in their name and their metadata).
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length.
    if unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) } != 0 {
        return "unknown".into();
    }
    let n = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    TraceFileName::host_part(&String::from_utf8_lossy(&buf[..n]))
}

static CUPTI_ERROR: OnceLock<cupti::Error> = OnceLock::new();

/// The collector, loaded on first use; `Err` (remembered) when CUPTI is unusable.
fn collector_once() -> Result<&'static Collector, cupti::Error> {
    if let Some(c) = cupti::active() {
        return Ok(c);
    }
    if let Some(e) = CUPTI_ERROR.get() {
        return Err(e.clone());
    }
    let o = opts();
    match Collector::load(o) {
        Ok(c) => {
            buffers::configure(o.buffer_bytes, o.pool_bytes);
            Ok(cupti::install(c))
        }
        Err(e) => {
            let _ = CUPTI_ERROR.set(e.clone());
            Err(e)
        }
    }
}

/// Opens a trace file and starts recording; returns the file's path.
pub fn start_tracing(started_by: &str, dir: Option<&Path>) -> Result<PathBuf, TraceError> {
    let o = opts();
    // Without CUPTI we still trace what the symbol hooks see (copies, NCCL, NVTX), and
    // the trace says GPU activity was not recorded.
    let (c, cupti_err) = match collector_once() {
        Ok(c) => (Some(c), None),
        Err(e) => (None, Some(e)),
    };
    if let Some(c) = c.filter(|_| state::loaded_late()) {
        // Loaded into a running program: a CUPTI subscriber of its own (torch.profiler)
        // cannot be seen coming, only found here; its records stay its own.
        if !c.can_subscribe() {
            return Err(TraceError::CuptiTaken);
        }
    }
    let pid = std::process::id();
    TRACED_PID.store(pid, Ordering::Release);
    let host = hostname();
    let dir = dir.unwrap_or(&o.dir);
    let (file, path) =
        writer::create_trace_file(dir, &host, pid).map_err(|err| TraceError::File {
            dir: dir.to_path_buf(),
            err,
        })?;
    let objs = discover::loaded_objects();
    let rt = discover::loaded_cudart(&objs);
    let meta = Meta {
        writer: format!("libgputrace {}", env!("CARGO_PKG_VERSION")),
        pid,
        // SAFETY: getppid has no preconditions.
        ppid: unsafe { libc::getppid() } as u32,
        host,
        exe: std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        cmdline: std::env::args().collect(),
        pointer_bits: usize::BITS,
        start_mono_ns: clock::mono_ns(),
        start_real_ns: clock::now_ns(),
        cupti_path: c.map(|c| c.path.display().to_string()).unwrap_or_default(),
        cupti_source: c.map(|c| c.source.to_string()).unwrap_or_default(),
        cupti_api_version: c.map(|c| c.api_version).unwrap_or(0),
        cuda_runtime_major: rt.as_ref().map(|r| r.1).unwrap_or(0),
        cuda_runtime_path: rt.map(|r| r.0.display().to_string()).unwrap_or_default(),
        started_by: started_by.to_string(),
        options: o.raw.clone(),
        kind: String::new(),
    };
    // Python call sites: the interpreter is looked for (once) before the rings' source
    // is made, so the trace says from its first drain whether it has them.
    pystack::start(o.pystack);
    // What the writer drains: the CUPTI session's buffers, then the host rings.
    let mut sources: Vec<Box<dyn Source>> = Vec::new();
    if let Some(c) = c {
        sources.push(Box::new(CuptiSource::new(c)));
    }
    sources.push(Box::new(RingSource::with_stacks(Box::new(
        pystack::resolve::Resolver::new(o.pystack),
    ))));
    // After the CUPTI session and the rings: a report sees the records a forced flush
    // just delivered and the Python stacks sampled for it.
    sources.push(Box::new(stall::source::StallSource::new()));
    sources.push(Box::new(env::EnvSource));
    sources.push(Box::new(host::HostSource::new()));
    writer::start(file, meta, sources, o.flush_ms, o.compress).map_err(TraceError::Writer)?;
    super::hang::start();
    env::start(o);
    host::start(o.host);
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
            return Ok(path);
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
        writer::note_state_at(opened, CollectorState::Tracing, started_by);
    }
    log::debug(&format!(
        "tracing to {}{}",
        path.display(),
        c.map(|c| format!(
            " with {} ({}, CUPTI API {})",
            c.path.display(),
            c.source,
            c.api_version
        ))
        .unwrap_or_default()
    ));
    Ok(path)
}

/// Flushes everything and stops, waiting at most GPUTRACE_EXIT_WAIT_MS.
pub fn finish() {
    let s = state::get();
    if s != state::TRACING && s != state::BLIND {
        return;
    }
    if let Some(c) = cupti::active() {
        if s == state::TRACING {
            c.stop();
        }
    }
    state::set(state::STOPPED);
    stop_env();
    // What never completed (a kernel still running at exit), after the last flush.
    super::hang::end_report();
    let wait = Duration::from_millis(opts().exit_wait_ms);
    if !writer::finish(wait) {
        log::warn(
            "the trace writer did not finish in time at exit; the trace may miss its last events",
        );
    }
}

/// Ends the sampling sessions (host, environment), waiting at most a second (or
/// GPUTRACE_EXIT_WAIT_MS if shorter) for each one's last sample, so the writer's last
/// pass has it.
pub(super) fn stop_env() {
    let wait = Duration::from_millis(opts().exit_wait_ms.min(1000));
    pystack::stop();
    host::stop(wait);
    env::stop(wait);
}
