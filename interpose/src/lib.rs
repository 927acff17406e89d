//! libgputrace.so: preloaded into a CUDA process, it records what the GPU did (CUPTI
//! activity records) and the host side of the calls that fed it (CUPTI callbacks on a
//! few API ids, through lock-free per-thread rings), into one trace file per process.
//!
//! It never blocks the program, never changes a return value or errno, and never takes
//! the process down: every failure turns tracing off with one `gputrace:` line.

pub mod apis;
pub mod clock;
pub mod collector;
pub mod control;
pub mod discover;
pub mod envsession;
pub mod guard;
pub mod hooks;
pub mod intern;
pub mod lifecycle;
pub mod log;
pub mod opts;
pub mod procfs;
pub mod records;
mod records12;
pub mod ring;
pub mod sampler;
pub mod state;
pub mod sym;
pub mod writer;

pub use hooks::*;

/// The library constructor: reads settings and arranges to be called at cuInit.
#[cfg_attr(test, allow(dead_code))]
extern "C" fn gputrace_init() {
    // errno is the program's: keep it as we found it.
    // SAFETY: __errno_location always returns the calling thread's errno slot.
    let saved = unsafe { *libc::__errno_location() };
    let _ = std::panic::catch_unwind(lifecycle::on_load);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved };
}

#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = gputrace_init;
