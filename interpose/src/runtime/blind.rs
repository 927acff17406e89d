//! Stepping aside for the program's own CUPTI use (torch.profiler, say): when the
//! program starts using CUPTI, we flush our records, switch ours off and let it have
//! CUPTI to itself; the trace records that blind window. When the program has switched
//! all its activity kinds off again and flushed, we take CUPTI back. The CUPTI hooks
//! (exports/cupti.rs) see the program's calls and call in here.

use crate::base::{log, state};
use crate::session::cupti::{self, foreign};
use crate::writer;
use gputrace_format::CollectorState;

/// TRACING -> BLIND: our CUPTI session off, the trace told why.
pub fn step_aside(reason: &str) {
    if !state::advance(state::TRACING, state::BLIND) {
        return;
    }
    if let Some(c) = cupti::active() {
        c.stop();
    }
    writer::note_state(CollectorState::Blind, reason);
    log::warn(&format!(
        "{reason}: gputrace steps aside (its trace records this blind window)"
    ));
}

/// Takes CUPTI back once the program has nothing enabled any more.
pub fn maybe_resume() {
    if state::get() != state::BLIND || foreign::holds_cupti() {
        return;
    }
    let Some(c) = cupti::active() else { return };
    if !state::advance(state::BLIND, state::TRACING) {
        return;
    }
    match c.start() {
        Ok(()) => {
            writer::note_state(
                CollectorState::Tracing,
                "resumed after the program's own CUPTI use",
            );
            log::warn("the program's CUPTI session ended: gputrace resumes tracing");
        }
        Err(e) => {
            state::set(state::BLIND);
            log::warn(&format!("cannot resume tracing: {e}"));
        }
    }
}

/// The program let go of its subscriber: if we resumed while it held the only
/// subscriber slot, subscribe for our API callbacks now.
pub fn resubscribe() {
    if state::is_tracing() {
        if let Some(c) = cupti::active() {
            c.ensure_subscribed();
        }
    }
}
