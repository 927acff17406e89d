//! The lifecycle, one atomic state advanced by compare-exchange:
//!
//! ```text
//! IDLE --CUDA initialises--> TRACING <--> BLIND (the program uses CUPTI itself)
//!   |                           |
//!   +--> DORMANT <--------------+           any --failure--> DISABLED (for good)
//!                               +--exit--> STOPPED
//! ```
//! Hooks read it with one relaxed load. Two switches sit next to it: the symbol hooks
//! on or off (`GPUTRACE_HOOKS`), and whether CUPTI's runtime API callbacks are recording
//! (the hooks then leave those calls to CUPTI).

use std::sync::atomic::{AtomicU8, Ordering};

pub const IDLE: u8 = 0;
pub const TRACING: u8 = 1;
pub const BLIND: u8 = 2;
pub const DORMANT: u8 = 3;
pub const STOPPED: u8 = 4;
pub const DISABLED: u8 = 5;

static STATE: AtomicU8 = AtomicU8::new(IDLE);

#[inline]
pub fn get() -> u8 {
    STATE.load(Ordering::Relaxed)
}

#[inline]
pub fn is_tracing() -> bool {
    get() == TRACING
}

/// Moves from `from` to `to`; false if the state was something else.
pub fn advance(from: u8, to: u8) -> bool {
    STATE
        .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
}

/// Sets the state unconditionally (fork child, failure).
pub fn set(to: u8) {
    STATE.store(to, Ordering::Release);
}

static HOOKS_OFF: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

static LOADED_LATE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The library was loaded into the running program by `gputrace attach` (not preloaded).
pub fn set_loaded_late() {
    LOADED_LATE.store(true, Ordering::Relaxed);
}

/// Whether `gputrace attach` loaded the library into the running program.
pub fn loaded_late() -> bool {
    LOADED_LATE.load(Ordering::Relaxed)
}

/// Switches the symbol hooks off for good (`GPUTRACE_HOOKS=0`, the CUPTI floor mode).
pub fn disable_hooks() {
    HOOKS_OFF.store(true, Ordering::Relaxed);
}

/// False once `GPUTRACE_HOOKS=0` switched the symbol hooks off.
#[inline]
pub fn hooks_enabled() -> bool {
    !HOOKS_OFF.load(Ordering::Relaxed)
}

/// Should a symbol hook record this call? One relaxed load when not tracing.
#[inline]
pub fn hooks_tracing() -> bool {
    get() == TRACING && !HOOKS_OFF.load(Ordering::Relaxed)
}

static CUPTI_CALLBACKS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Told by the CUPTI session when its runtime API callbacks start (subscribed with
/// `GPUTRACE_API` on) and stop recording.
pub fn note_cupti_callbacks(on: bool) {
    CUPTI_CALLBACKS.store(on, Ordering::Relaxed);
}

/// Do CUPTI's runtime callbacks record calls made now, given the state `s`?
#[inline]
pub fn cupti_sees_runtime_calls(s: u8) -> bool {
    s == TRACING && CUPTI_CALLBACKS.load(Ordering::Relaxed)
}
