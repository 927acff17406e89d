//! The library's threads: every one of them (the samplers, the writer, the stall
//! watchdog, the control thread) is a `gputrace_env::worker::Worker` run under
//! [`POLICY`]: marked internal first (the hooks ignore it), a panic said as one
//! `gputrace:` line.

pub use gputrace_env::worker::{lock, Policy, Spec, Worker};

/// How the library runs its threads.
pub static POLICY: Policy = Policy {
    on_start: super::internal::mark_thread_internal,
    warn: super::log::warn,
};
