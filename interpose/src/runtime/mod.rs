//! The runtime layer: the process's tracing life. Start-up, CUDA initialisation, trace
//! windows, stepping aside for the program's own CUPTI use, fork, exec and exit. It is
//! called by the entry points (`exports`) and drives the sessions and the writer.
//!
//! The constructor reads the settings and makes sure the CUDA driver will call us back
//! when the process initialises CUDA (`CUDA_INJECTION64_PATH` names this library; the
//! driver loads it and calls `InitializeInjection` inside `cuInit`, before any context
//! exists). Nothing else happens until then, so a process that never uses CUDA (a
//! shell, nvidia-smi, a DataLoader worker) writes no trace at all.
//!
//! * `settings.rs`: the settings, read once;
//! * `trace.rs`: opening a trace (file, writer, sessions) and finishing it;
//! * `window.rs`: a trace window of a dormant process, and NVTX step counting;
//! * `control.rs`: what opens windows (the control socket, a signal, a timer);
//! * `blind.rs`: stepping aside while the program uses CUPTI itself;
//! * `watchdog.rs`: the progress watchdog (stall reports) and the flush at an abnormal end
//!   (a terminating signal, an abort, a crash).

pub mod blind;
pub mod control;
pub mod settings;
pub mod trace;
pub mod watchdog;
pub mod window;

use crate::base::cupti::discover;
use crate::base::opts::Mode;
use crate::base::{clock, ffi::entry, internal, log, state, tsc};
use crate::{rings, writer};
use gputrace_format::protocol;
use settings::opts;
use std::sync::atomic::{AtomicBool, Ordering};

/// Runs from the library constructor. Returns whether the library is on at all (the
/// fork handler is wanted).
pub fn on_load() -> bool {
    if crate::base::secure::secure_execution() {
        // A setuid, setgid or file-capability program: its environment is chosen by a
        // user it does not trust. Nothing is read, loaded, created or set; the hooks
        // pass every call straight through.
        state::set(state::DISABLED);
        return false;
    }
    let late = loaded_late();
    if late {
        settings::set_loaded_late();
        state::set_loaded_late();
    }
    let o = opts();
    log::set_debug(o.debug);
    // One line, however many settings are wrong: it is printed by every process.
    if let Some(w) = o.warning() {
        log::warn(&w);
    }
    if let Some(n) = o.note() {
        log::warn(n);
    }
    if o.mode == Mode::Off {
        state::set(state::DISABLED);
        return false;
    }
    log::debug(&format!("loaded into pid {}: {:?}", std::process::id(), o));
    if !o.hooks {
        state::disable_hooks();
    }
    if late {
        // Loaded by `gputrace attach` into a running program: CUDA is up already, so no
        // injection variable to set (and the environment is not ours to change while
        // other threads run); dormant at once, with the control socket made now.
        log::debug("loaded into a running process by `gputrace attach`: dormant");
        if state::advance(state::IDLE, state::DORMANT) {
            register_exit_handler();
            control::start_dormant(o);
        }
        return true;
    }
    ensure_injection_path();
    if o.hooks {
        // The hooks' clock is chosen now, while the process has one thread.
        tsc::init();
        ensure_nvtx_injection_path();
    }
    true
}

/// Whether `gputrace attach` loaded this library into a running process: it loads it
/// under a name of its own (`protocol::LATE_LOAD_FILE`), never used otherwise.
fn loaded_late() -> bool {
    discover::object_path_as_loaded(on_load as *const libc::c_void).is_some_and(|p| {
        p.file_name()
            .is_some_and(|n| n == std::ffi::OsStr::new(protocol::LATE_LOAD_FILE))
    })
}

/// This library's own file.
fn own_path() -> Option<std::path::PathBuf> {
    discover::object_path_of(on_load as *const libc::c_void)
}

/// Points CUDA_INJECTION64_PATH at this library unless something else already owns it.
fn ensure_injection_path() {
    let me = own_path();
    match std::env::var_os(protocol::CUDA_INJECTION_VAR) {
        Some(v) => {
            let same = me
                .as_ref()
                .map(|m| std::fs::canonicalize(&v).ok().as_ref() == Some(m))
                .unwrap_or(false);
            if !same {
                log::warn(&format!(
                    "{} is already set to {v:?} (another tool?): not tracing this process",
                    protocol::CUDA_INJECTION_VAR
                ));
                state::set(state::DISABLED);
            }
        }
        None => match me {
            // The constructor runs before the program's main, while the process has one
            // thread, so changing the environment here races with nobody.
            Some(p) => std::env::set_var(protocol::CUDA_INJECTION_VAR, p),
            None => {
                log::warn("cannot find this library's own path: not tracing");
                state::set(state::DISABLED);
            }
        },
    }
}

/// Points NVTX_INJECTION64_PATH at this library (the NVTX hooks, exports/hooks/nvtx.rs)
/// unless a tool (Nsight Systems, say) already owns it.
fn ensure_nvtx_injection_path() {
    if std::env::var_os(protocol::NVTX_INJECTION_VAR).is_some() {
        log::debug(&format!(
            "{} is set already: NVTX ranges go to that tool",
            protocol::NVTX_INJECTION_VAR
        ));
        return;
    }
    if let Some(p) = own_path() {
        // The constructor runs while the process has one thread: nobody reads the
        // environment concurrently.
        std::env::set_var(protocol::NVTX_INJECTION_VAR, p);
    }
}

/// Called by the CUDA driver inside cuInit (through CUDA_INJECTION64_PATH).
pub fn on_cuda_init() -> bool {
    let o = opts();
    if o.mode == Mode::Dormant || o.start_after.is_some() || o.duration.is_some() {
        if state::advance(state::IDLE, state::DORMANT) {
            register_exit_handler();
            control::start_dormant(o);
            log::debug("dormant: waiting for `gputrace attach`, a signal or a timer");
        }
        return true;
    }
    if !state::advance(state::IDLE, state::STOPPED) {
        // Already started (a second cuInit) or disabled: nothing to do.
        return true;
    }
    let _g = internal::Internal::enter();
    match trace::start_tracing("injection", None) {
        Ok(_) => {
            register_exit_handler();
            true
        }
        Err(e) => {
            state::set(state::DISABLED);
            log::warn(&format!("{e}; this process runs on untraced"));
            false
        }
    }
}

/// Registered at CUDA initialisation, after the CUDA runtime registered its own
/// teardown, so ours runs first at exit, while CUDA is still up.
fn register_exit_handler() {
    static DONE: AtomicBool = AtomicBool::new(false);
    if !DONE.swap(true, Ordering::AcqRel) {
        // SAFETY: a plain function pointer.
        unsafe { libc::atexit(at_exit) };
    }
}

extern "C" fn at_exit() {
    entry!({
        trace::finish();
        control::remove_socket();
    })
}

/// Before the process replaces its image (the exec hooks): the new image runs no exit
/// handler of ours, so the trace is finished now, and the control socket's file goes.
pub fn before_exec() {
    // The socket's file goes with the image (a vfork child, another pid, leaves its
    // parent's alone).
    control::before_exec();
    // A vfork child (Python's subprocess uses vfork) shares our memory and has run no
    // fork handler: finishing "its" trace would switch the parent's tracing off. Only
    // the traced process itself finishes its trace.
    // SAFETY: getpid has no preconditions (glibc does not cache it).
    if unsafe { libc::getpid() } as u32 == trace::traced_pid() {
        trace::finish();
    }
}

/// The process ends through `call` (`_exit`, `_Exit`, `quick_exit`), which runs no exit
/// handler of ours: the trace is finished now, as at exit, its end record naming the call
/// and `status`, and the control socket's file goes. Only the traced process itself
/// finishes its trace: a vfork child (Python's subprocess, whose failed exec ends in
/// `_exit`) shares our memory, and a forked child's trace is its own.
pub fn before_exit_now(call: &str, status: i32) {
    // SAFETY: getpid has no preconditions (glibc does not cache it).
    if unsafe { libc::getpid() } as u32 == trace::traced_pid() {
        writer::note_end_call(gputrace_format::end_reason_call(call, status));
        trace::finish();
    }
    control::remove_socket();
}

/// The process calls `exit(status)` with a status other than 0: the exit handler's end
/// record will say `exit N`. Only the traced process's own (a vfork child shares our
/// memory).
pub fn note_exit_status(status: i32) {
    // SAFETY: getpid has no preconditions (glibc does not cache it).
    if unsafe { libc::getpid() } as u32 == trace::traced_pid() {
        writer::note_end_call(gputrace_format::end_reason_call("exit", status));
    }
}

/// The exec returned: it failed, and this image runs on.
pub fn after_failed_exec() {
    control::after_failed_exec();
}

/// In a forked child: it has one thread and none of the parent's: no writer, no rings
/// worth draining, no usable CUPTI session, no control socket. It starts clean; if it
/// initialises CUDA itself, the driver calls us again and it gets a trace of its own.
pub fn after_fork() {
    clock::reset_tid_after_fork();
    state::note_cupti_callbacks(false);
    rings::reset_after_fork();
    writer::forget_after_fork();
    crate::session::lifecycle::fork_child_all();
    watchdog::forget_after_fork();
    control::forget_after_fork();
    let s = state::get();
    if s != state::DISABLED {
        state::set(state::IDLE);
    }
}
