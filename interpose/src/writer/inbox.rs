//! Things the other layers tell the writer for the trace, typed and queued: collector
//! state changes and device properties (pushed through `writer::note_state` and
//! `writer::push_device`). The writer turns them into events after its sources'
//! records.

use crate::base::worker::lock;
use gputrace_format::{self as fmt, CollectorState};
use std::sync::Mutex;

static STATES: Mutex<Vec<(u64, CollectorState, String)>> = Mutex::new(Vec::new());
static DEVICES: Mutex<Vec<(fmt::Device, String)>> = Mutex::new(Vec::new());

pub(super) fn push_state(ts: u64, state: CollectorState, reason: &str) {
    lock(&STATES).push((ts, state, reason.to_string()));
}

pub(super) fn push_device(d: fmt::Device, name: String) {
    lock(&DEVICES).push((d, name));
}

pub(super) fn take_states() -> Vec<(u64, CollectorState, String)> {
    std::mem::take(&mut *lock(&STATES))
}

pub(super) fn take_devices() -> Vec<(fmt::Device, String)> {
    std::mem::take(&mut *lock(&DEVICES))
}

/// In a forked child: only try_lock (a parent thread may have held the lock).
pub(super) fn forget_after_fork() {
    if let Ok(mut p) = STATES.try_lock() {
        p.clear();
    }
}
