//! The FFI guard: every function C calls into us through (an exported symbol, a callback
//! handed to CUDA, CUPTI, NVTX, the loader or libc) runs its whole body inside
//! [`entry!`], so a panic of ours never unwinds into C. A caught panic turns tracing off
//! for good, says so once, and the function returns the value it names for that case.
//! `interpose/tests/layers.rs` fails on any `extern "C" fn` whose body is anything else.
//!
//! The guard is `catch_unwind`, which costs nothing until something unwinds: the hot
//! paths (the CUPTI API callback, the symbol hooks) run through it unchanged. It does
//! not save errno (that would cost every hooked call a libc call): after a caught
//! panic errno is whatever the panic left; entry points that must hand errno back
//! untouched save it themselves on their normal path.
//!
//! Also here: errno, which every entry point hands back to the program as it found it.

use super::{log, state};
use std::sync::atomic::{AtomicBool, Ordering};

/// Runs the body of a function called from C: `entry!(on_panic, { body })`, or
/// `entry!({ body })` for a function returning nothing. The body's value is returned;
/// if it panics, tracing is switched off ([`caught`]) and `on_panic` is returned.
macro_rules! entry {
    ($on_panic:expr, $body:block) => {
        match ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(|| $body)) {
            Ok(r) => r,
            Err(_) => {
                $crate::base::ffi::caught();
                $on_panic
            }
        }
    };
    ($body:block) => {
        $crate::base::ffi::entry!((), $body)
    };
}
pub(crate) use entry;

/// A panic reached an entry point (or a hook's own logic): tracing off for good, one
/// line said. The program runs on.
#[cold]
#[inline(never)]
pub fn caught() {
    static SAID: AtomicBool = AtomicBool::new(false);
    let saved = errno();
    state::set(state::DISABLED);
    if !SAID.swap(true, Ordering::Relaxed) {
        log::warn("internal error in gputrace; tracing off (the program runs on)");
    }
    set_errno(saved);
}

/// Runs our own logic inside an entry point that must go on whatever happens (a hook
/// that still has to hand the real call's result back): a panic in `f` is [`caught`].
#[inline]
pub fn guarded(f: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        caught();
    }
}

/// Runs our own logic whose value an entry point needs, inside an entry point that must
/// go on whatever happens: a panic in `f` is [`caught`] (tracing off, said once) and
/// gives `None`, as a missing value would.
#[inline]
pub fn guarded_value<T>(f: impl FnOnce() -> Option<T>) -> Option<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => {
            caught();
            None
        }
    }
}

/// The calling thread's errno.
#[inline(always)]
pub fn errno() -> i32 {
    // SAFETY: __errno_location always returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() }
}

/// Sets the calling thread's errno.
#[inline(always)]
pub fn set_errno(v: i32) {
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = v };
}

/// The signals whose default action ends the process and that the library flushes the
/// trace for before that action (`runtime::watchdog`).
pub const END_SIGNALS: [libc::c_int; 7] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGABRT,
    libc::SIGSEGV,
    libc::SIGBUS,
];

/// Blocks [`END_SIGNALS`] in the calling thread (the library's own threads that the
/// handlers wait for), so the kernel delivers them to another thread.
pub fn block_end_signals() {
    // SAFETY: a zeroed sigset_t is a valid argument to sigemptyset, which initialises
    // it; pthread_sigmask only changes the calling thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in END_SIGNALS {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" fn unit(fail: bool) {
        entry!({
            if fail {
                panic!("test panic");
            }
        })
    }

    extern "C" fn value(fail: bool) -> i32 {
        entry!(-7, {
            if fail {
                panic!("test panic");
            }
            if errno() == 0 {
                return 1;
            }
            2
        })
    }

    #[test]
    fn a_panic_stops_at_the_entry_and_turns_tracing_off() {
        set_errno(0);
        assert_eq!(value(false), 1, "the body's own return");
        set_errno(5);
        assert_eq!(value(false), 2);
        unit(false);
        let before = state::get();
        assert_eq!(value(true), -7);
        unit(true);
        assert_eq!(state::get(), state::DISABLED);
        state::set(before);
    }
}
