//! Opening a trace (a file, the writer draining the sessions' and rings' records, the
//! CUPTI session started) and finishing it.

use super::settings::opts;
use crate::base::cupti::discover;
use crate::base::opts::Opts;
use crate::base::{clock, log, state};
use crate::session::lifecycle::{self, Closing, Opening, SESSIONS};
use crate::writer::{self, Source};
use gputrace_format::protocol::TraceFileName;
use gputrace_format::redact::redact_cmdline;
use gputrace_format::Meta;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
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

/// The process's command line as the trace keeps it: values that look like secrets
/// (`--password=X`, `HF_TOKEN=X`, a URL's password) redacted unless
/// `GPUTRACE_KEEP_SECRETS` asks for it as it is.
fn recorded_cmdline(o: &Opts) -> Vec<String> {
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if o.keep_secrets {
        args
    } else {
        redact_cmdline(&args)
    }
}

/// Opens a trace file and starts recording; returns the file's path.
pub fn start_tracing(started_by: &str, dir: Option<&Path>) -> Result<PathBuf, TraceError> {
    let o = opts();
    // Loaded before the file is made: the trace's metadata names it.
    let c = lifecycle::collector(o).ok();
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
        cmdline: recorded_cmdline(o),
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
    // What the writer drains: each session's source, in the sessions' order.
    let sources: Vec<Box<dyn Source>> = SESSIONS.iter().filter_map(|s| s.open(o)).collect();
    writer::start(file, meta, sources, o.flush_ms, o.compress).map_err(TraceError::Writer)?;
    super::watchdog::start();
    // The samplers first; the CUPTI session, started last, opens the window.
    let opening = Opening {
        opts: o,
        started_by,
    };
    for s in SESSIONS.iter().rev() {
        s.start(&opening);
    }
    if o.debug {
        // Made only when it is printed.
        log::debug(&format!("sessions: {}", lifecycle::describe_all(o)));
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
    state::set(state::STOPPED);
    stop_sessions(s == state::TRACING, false);
    // What never completed (a kernel still running at exit), after the last flush.
    super::watchdog::end_report();
    let wait = Duration::from_millis(opts().exit_wait_ms);
    if !writer::finish(wait) {
        log::warn(
            "the trace writer did not finish in time at exit; the trace may miss its last events",
        );
    }
}

/// Ends every session (CUPTI first: it stops collecting; at the end of a window it is
/// released), giving the samplers at most a second (or GPUTRACE_EXIT_WAIT_MS if
/// shorter) each for their last sample, so the writer's last pass has it.
pub(super) fn stop_sessions(was_tracing: bool, end_of_window: bool) {
    let closing = Closing {
        was_tracing,
        end_of_window,
        wait: Duration::from_millis(opts().exit_wait_ms.min(1000)),
    };
    lifecycle::stop_all(&closing);
}
