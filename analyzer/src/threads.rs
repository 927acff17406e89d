//! The command's own threads (the NVML and GPM recorders, the hang watcher) are workers
//! (`gputrace_env::worker`, as the library's are), run under this policy: a panic in one
//! is said on the command's stderr, and the command goes on.

pub use gputrace_env::worker::{lock, Spec, Worker};

/// How the command runs its threads.
pub static POLICY: gputrace_env::worker::Policy = gputrace_env::worker::Policy {
    on_start: || {},
    warn: |m| eprintln!("gputrace: {m}"),
};
