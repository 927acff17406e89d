//! Start-up, CUDA initialisation, fork and exit.
//!
//! The constructor reads the settings and makes sure the CUDA driver will call us back
//! when the process initialises CUDA (`CUDA_INJECTION64_PATH` names this library; the
//! driver loads it and calls `InitializeInjection` inside `cuInit`, before any context
//! exists). Nothing else happens until then, so a process that never uses CUDA (a
//! shell, nvidia-smi, a DataLoader worker) writes no trace at all.

use crate::collector::{self, Collector};
use crate::opts::{Mode, Opts};
use crate::{clock, discover, guard, log, ring, sampler, state, writer};
use gputrace_format::{CollectorState, Meta};
use std::sync::OnceLock;
use std::time::Duration;

static OPTS: OnceLock<Opts> = OnceLock::new();
/// Longest wait for the host sampler's last pass when a trace ends (one pass takes
/// well under a millisecond; its sleep ends at the next thread period).
const SAMPLER_WAIT: Duration = Duration::from_millis(200);
/// The process whose trace is open (0 when none).
static TRACED_PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

pub fn traced_pid() -> u32 {
    TRACED_PID.load(std::sync::atomic::Ordering::Acquire)
}

pub fn opts() -> &'static Opts {
    OPTS.get_or_init(Opts::from_env)
}

/// Runs from the library constructor.
pub fn on_load() {
    let o = opts();
    log::set_debug(o.debug);
    for w in &o.warnings {
        log::warn(w);
    }
    if o.mode == Mode::Off {
        state::set(state::DISABLED);
        return;
    }
    log::debug(&format!("loaded into pid {}: {:?}", std::process::id(), o));
    if !o.hooks {
        state::disable_hooks();
    }
    // SAFETY: registering a handler with plain function pointers.
    unsafe { libc::pthread_atfork(None, None, Some(after_fork_child)) };
    ensure_injection_path();
}

/// Points CUDA_INJECTION64_PATH at this library unless something else already owns it.
fn ensure_injection_path() {
    let me = discover::object_path_of(on_load as *const libc::c_void);
    match std::env::var_os("CUDA_INJECTION64_PATH") {
        Some(v) => {
            let same = me
                .as_ref()
                .map(|m| std::fs::canonicalize(&v).ok().as_ref() == Some(m))
                .unwrap_or(false);
            if !same {
                log::warn(&format!(
                    "CUDA_INJECTION64_PATH is already set to {:?} (another tool?): not tracing this process",
                    v
                ));
                state::set(state::DISABLED);
            }
        }
        None => match me {
            // The constructor runs before the program's main, while the process has one
            // thread, so changing the environment here races with nobody.
            Some(p) => std::env::set_var("CUDA_INJECTION64_PATH", p),
            None => {
                log::warn("cannot find this library's own path: not tracing");
                state::set(state::DISABLED);
            }
        },
    }
}

/// Called by the CUDA driver inside cuInit (through CUDA_INJECTION64_PATH).
pub fn on_cuda_init() -> bool {
    let o = opts();
    if o.mode == Mode::Dormant || o.start_after.is_some() || o.duration.is_some() {
        if state::advance(state::IDLE, state::DORMANT) {
            register_exit_handler();
            crate::control::start_dormant();
            log::debug("dormant: waiting for `gputrace attach`, a signal or a timer");
        }
        return true;
    }
    if !state::advance(state::IDLE, state::STOPPED) {
        // Already started (a second cuInit) or disabled: nothing to do.
        return true;
    }
    let _g = guard::Internal::enter();
    match start_tracing("injection", None) {
        Ok(_) => true,
        Err(e) => {
            state::set(state::DISABLED);
            log::warn(&format!("{e}; this process runs on untraced"));
            false
        }
    }
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length.
    if unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) } != 0 {
        return "unknown".into();
    }
    let n = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..n])
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

static CUPTI_ERROR: OnceLock<String> = OnceLock::new();

/// The collector, loaded on first use; `Err` (remembered) when CUPTI is unusable.
fn collector_once() -> Result<&'static Collector, String> {
    if let Some(c) = collector::active() {
        return Ok(c);
    }
    if let Some(e) = CUPTI_ERROR.get() {
        return Err(e.clone());
    }
    let o = opts();
    match Collector::load(o) {
        Ok(c) => {
            collector::configure_pool(o.buffer_bytes, o.pool_bytes);
            Ok(collector::install(c))
        }
        Err(e) => {
            let _ = CUPTI_ERROR.set(e.clone());
            Err(e)
        }
    }
}

/// Opens a trace file and starts recording; returns the file's path.
fn start_tracing(
    started_by: &str,
    dir: Option<&std::path::Path>,
) -> Result<std::path::PathBuf, String> {
    let o = opts();
    // Without CUPTI we still trace what the symbol hooks see (copies, NCCL, NVTX), and
    // the trace says GPU activity was not recorded.
    let (c, cupti_err) = match collector_once() {
        Ok(c) => (Some(c), None),
        Err(e) => (None, Some(e)),
    };
    let pid = std::process::id();
    TRACED_PID.store(pid, std::sync::atomic::Ordering::Release);
    let host = hostname();
    let dir = dir.unwrap_or(&o.dir);
    let (file, path) = writer::create_trace_file(dir, &host, pid)
        .map_err(|e| format!("cannot create a trace file in {}: {e}", dir.display()))?;
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
    };
    writer::start(file, meta, c, o.flush_ms, o.compress)
        .map_err(|e| format!("cannot start the trace writer: {e}"))?;
    // Host samples for as long as this trace is open (stopped before the writer finishes).
    sampler::start(o.host);
    crate::envsession::start(o);
    // The window opens when collection is switched on, before CUPTI starts recording.
    let opened = crate::clock::now_ns();
    state::set(state::TRACING);
    let blind = match (c, cupti_err) {
        // The program started a CUPTI session of its own before CUDA initialised (a
        // profiler started first): leave it alone; we take CUPTI when it is done.
        (Some(_), _) if crate::hooks::program_holds_cupti() => {
            state::set(state::BLIND);
            collector::note_state(
                CollectorState::Blind,
                "the program was using CUPTI itself when CUDA started",
            );
            register_exit_handler();
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
        collector::note_state(CollectorState::Blind, &format!("no GPU activity: {e}"));
        log::warn(&format!(
            "{e}; GPU activity is not recorded (the program runs on unchanged)"
        ));
    } else {
        collector::note_state_at(opened, CollectorState::Tracing, started_by);
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
    register_exit_handler();
    Ok(path)
}

/// Registered at CUDA initialisation, after the CUDA runtime registered its own
/// teardown, so ours runs first at exit, while CUDA is still up.
fn register_exit_handler() {
    static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !DONE.swap(true, std::sync::atomic::Ordering::AcqRel) {
        // SAFETY: a plain function pointer.
        unsafe { libc::atexit(at_exit) };
    }
}

/// One trace window of a dormant process: record for `duration` (or until `steps` NVTX
/// step ranges have begun and the next begins, whichever comes first) into a new trace file,
/// then switch CUPTI off and release it, back to dormant. `on_started` gets the path as
/// soon as recording begins. Returns the path of the finished trace.
pub fn run_window(
    reason: &str,
    duration: Duration,
    steps: Option<u64>,
    dir: Option<&std::path::Path>,
    on_started: impl FnOnce(&std::path::Path),
) -> Result<std::path::PathBuf, String> {
    // DORMANT -> STOPPED marks "a window is starting": a second request is refused.
    if !state::advance(state::DORMANT, state::STOPPED) {
        return Err("a window is already running (or the process is exiting)".into());
    }
    let _g = guard::Internal::enter();
    let path = match start_tracing(reason, dir) {
        Ok(p) => p,
        Err(e) => {
            state::set(state::DORMANT);
            return Err(e);
        }
    };
    if let Some(c) = collector::active() {
        c.emit_device_properties();
    }
    on_started(&path);
    let end = std::time::Instant::now() + duration;
    let steps_at_start = crate::control::steps_seen();
    while std::time::Instant::now() < end {
        // With a step count: close when the step after the last wanted one begins.
        if steps.is_some_and(|n| crate::control::steps_seen() - steps_at_start > n) {
            break;
        }
        let s = state::get();
        if s != state::TRACING && s != state::BLIND {
            // The process is exiting: its exit handler finishes the trace.
            return Ok(path);
        }
        std::thread::sleep(Duration::from_millis(20).min(end - std::time::Instant::now()));
    }
    let s = state::get();
    if !state::advance(s, state::STOPPED) || (s != state::TRACING && s != state::BLIND) {
        return Ok(path);
    }
    if let Some(c) = collector::active() {
        if s == state::TRACING {
            c.stop();
        }
        collector::note_state(CollectorState::Stopped, "end of window");
        c.finalize();
    }
    sampler::stop(SAMPLER_WAIT);
    crate::envsession::stop(env_wait());
    let done = writer::finish(Duration::from_millis(opts().exit_wait_ms));
    state::set(state::DORMANT);
    if !done {
        return Err(format!(
            "the trace writer did not finish {}",
            path.display()
        ));
    }
    Ok(path)
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        finish();
        crate::control::remove_socket();
    });
}

/// Flushes everything and stops, waiting at most GPUTRACE_EXIT_WAIT_MS.
pub fn finish() {
    let s = state::get();
    if s != state::TRACING && s != state::BLIND {
        return;
    }
    if let Some(c) = collector::active() {
        if s == state::TRACING {
            c.stop();
        }
    }
    state::set(state::STOPPED);
    sampler::stop(SAMPLER_WAIT);
    crate::envsession::stop(env_wait());
    let wait = Duration::from_millis(opts().exit_wait_ms);
    if !writer::finish(wait) {
        log::warn(
            "the trace writer did not finish in time at exit; the trace may miss its last events",
        );
    }
}

/// How long closing a trace waits for the environment sampler's last sample.
fn env_wait() -> Duration {
    Duration::from_millis(opts().exit_wait_ms.min(1000))
}

extern "C" fn after_fork_child() {
    // The child has one thread and none of the parent's: no writer, no rings worth
    // draining, no usable CUPTI session. It starts clean; if it initialises CUDA itself,
    // the driver calls us again and it gets a trace of its own.
    clock::reset_tid_after_fork();
    ring::reset_after_fork();
    sampler::forget_after_fork();
    collector::forget_after_fork();
    writer::forget_after_fork();
    crate::envsession::forget_after_fork();
    let s = state::get();
    if s != state::DISABLED {
        state::set(state::IDLE);
    }
}
