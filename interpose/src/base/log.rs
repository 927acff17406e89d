//! The library's only output: `gputrace:` lines on stderr, written with one write(2)
//! each so they never interleave with the program's own output mid-line.

use std::sync::atomic::{AtomicBool, Ordering};

static DEBUG: AtomicBool = AtomicBool::new(false);

pub fn set_debug(on: bool) {
    DEBUG.store(on, Ordering::Relaxed);
}

#[cfg(test)]
fn emit(msg: &str) {
    // Unit tests provoke warnings on purpose: through the test harness's captured
    // stderr, they show only with a failing test.
    eprintln!("gputrace: {msg}");
}

#[cfg(not(test))]
fn emit(msg: &str) {
    let line = format!("gputrace: {msg}\n");
    // SAFETY: writes a valid buffer to fd 2; errors are ignored on purpose (stderr closed).
    unsafe { libc::write(2, line.as_ptr() as *const libc::c_void, line.len()) };
}

/// Something the user should know (tracing off, a bad setting).
pub fn warn(msg: &str) {
    // Loaded into a running program by `gputrace attach`, the library keeps off the
    // program's stderr (its windows' errors go back over the control socket).
    if crate::base::state::loaded_late() && !DEBUG.load(Ordering::Relaxed) {
        return;
    }
    emit(msg);
}

/// Whether GPUTRACE_DEBUG=1 is on (to skip work done only for a debug line).
pub fn debugging() -> bool {
    DEBUG.load(Ordering::Relaxed)
}

/// Details printed only with GPUTRACE_DEBUG=1.
pub fn debug(msg: &str) {
    if DEBUG.load(Ordering::Relaxed) {
        emit(msg);
    }
}
