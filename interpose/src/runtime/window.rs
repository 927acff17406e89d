//! One trace window of a dormant process, whatever opened it (`gputrace attach`, a
//! signal, a timer): record into a new, complete trace file, then switch CUPTI off and
//! release it, back to dormant. Also the count of NVTX step ranges, for windows that
//! last a number of training steps.

use super::settings::opts;
use super::trace::{start_tracing, TraceError};
use crate::base::{internal, state};
use crate::session::cupti;
use crate::writer;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

static STEPS: AtomicU64 = AtomicU64::new(0);

/// Called by the NVTX hooks while tracing when a range named like a training step
/// begins (the same rule the report uses for NVTX steps: the text contains "step").
pub fn note_step() {
    STEPS.fetch_add(1, Ordering::Relaxed);
}

/// Step ranges begun while tracing, since the process started.
pub fn steps_seen() -> u64 {
    STEPS.load(Ordering::Relaxed)
}

/// Is an NVTX range text a training step's (contains "step", any case)?
pub fn is_step_name(text: &[u8]) -> bool {
    text.windows(4).any(|w| w.eq_ignore_ascii_case(b"step"))
}

/// How a window's trace names what opened it: "attach, loaded late" when the library
/// came in through `gputrace attach` (the analyzer says what such a trace cannot hold).
pub fn window_reason(reason: &str) -> String {
    if state::loaded_late() && reason == "attach" {
        format!("{reason}, {}", gputrace_format::protocol::LOADED_LATE)
    } else {
        reason.to_string()
    }
}

/// Records for `duration` (or until `steps` NVTX step ranges have begun and the next
/// begins, whichever comes first) into a new trace file, then switches CUPTI off and
/// releases it, back to dormant. `on_started` gets the path as soon as recording
/// begins. Returns the path of the finished trace.
pub fn run_window(
    reason: &str,
    duration: Duration,
    steps: Option<u64>,
    dir: Option<&Path>,
    on_started: impl FnOnce(&Path),
) -> Result<PathBuf, TraceError> {
    // DORMANT -> STOPPED marks "a window is starting": a second request is refused.
    if !state::advance(state::DORMANT, state::STOPPED) {
        return Err(TraceError::Busy);
    }
    let _g = internal::Internal::enter();
    let path = match start_tracing(&window_reason(reason), dir) {
        Ok(p) => p,
        Err(e) => {
            state::set(state::DORMANT);
            return Err(e);
        }
    };
    if let Some(c) = cupti::active() {
        c.emit_device_properties();
    }
    on_started(&path);
    let end = Instant::now() + duration;
    let steps_at_start = steps_seen();
    while Instant::now() < end {
        // With a step count: close when the step after the last wanted one begins.
        if steps.is_some_and(|n| steps_seen() - steps_at_start > n) {
            break;
        }
        let s = state::get();
        if s != state::TRACING && s != state::BLIND {
            // The process is exiting: its exit handler finishes the trace.
            return Ok(path);
        }
        std::thread::sleep(Duration::from_millis(20).min(end - Instant::now()));
    }
    let s = state::get();
    if !state::advance(s, state::STOPPED) || (s != state::TRACING && s != state::BLIND) {
        return Ok(path);
    }
    // A stall report's flush in progress ends before CUPTI is finalized.
    super::watchdog::wait_idle();
    // CUPTI stops and is released; the samplers end.
    super::trace::stop_sessions(s == state::TRACING, true);
    let done = writer::finish(Duration::from_millis(opts().exit_wait_ms));
    state::set(state::DORMANT);
    if !done {
        return Err(TraceError::Unfinished(path));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_names() {
        assert!(is_step_name(b"train step 12"));
        assert!(is_step_name(b"ProfilerStep#3"));
        assert!(!is_step_name(b"forward"));
        assert!(!is_step_name(b"ste"));
    }
}
