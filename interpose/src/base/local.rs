//! The tracer's per-thread state, in one thread-local block. In a shared object every
//! thread-local variable is reached through a call (`__tls_get_addr`), and the CUPTI
//! callback on a program's launch path needs most of these: as separate variables that
//! was four or five calls per callback; as fields of one block, the compiler reaches it
//! once per inlined path. Each field belongs to the module named beside it, which alone
//! reads and writes it.

use std::cell::Cell;

pub struct Local {
    /// `base::internal`: depth of the tracer's own scopes on this thread.
    pub internal: Cell<u32>,
    /// `base::clock`: the kernel thread id (0: not read yet).
    pub tid: Cell<u32>,
    /// `session::cupti::callback`: inside a recorded runtime call.
    pub in_runtime: Cell<bool>,
    /// `session::cupti::callback`: the correlation id of the call whose ENTER was
    /// recorded last (0: none).
    pub entered: Cell<u32>,
    /// `rings`: callbacks since the last one whose cost was timed.
    pub untimed: Cell<u32>,
    /// `rings`: this thread's ring (null: none yet).
    pub ring: Cell<*const ()>,
    /// `session::stall`: this thread's call slot, plus 1 (0: none yet; usize::MAX: none
    /// free).
    pub call_slot: Cell<usize>,
}

thread_local! {
    static LOCAL: Local = const {
        Local {
            internal: Cell::new(0),
            tid: Cell::new(0),
            in_runtime: Cell::new(false),
            entered: Cell::new(0),
            untimed: Cell::new(0),
            ring: Cell::new(std::ptr::null()),
            call_slot: Cell::new(0),
        }
    };
}

/// Runs `f` on this thread's block. The block needs no destructor, so it can be reached
/// for the whole life of the thread, its thread-local destructors included.
///
/// Through `try_with`, not `LocalKey::with`: std marks only `try_with` `#[inline]`, so
/// every codegen unit has its own copy to inline. `with` is an ordinary generic function
/// that the partitioner may put in another codegen unit than its caller; then it stays
/// an out-of-line call with its own `__tls_get_addr` (three of them on the callback's
/// path once happened: 585 instead of 426 instructions per launch in
/// scripts/bench-callbacks.sh).
#[inline(always)]
pub fn with<R>(f: impl FnOnce(&Local) -> R) -> R {
    match LOCAL.try_with(f) {
        Ok(r) => r,
        // A block without a destructor is never torn down: try_with cannot fail.
        Err(_) => unreachable!("the thread-local block has no destructor"),
    }
}
