//! What the writer drains: each [`Source`] (the host rings, a session's buffers) turns
//! its records into trace events on the writer thread, through a [`Sink`].

use super::intern::Interner;
use gputrace_format::Event;

/// Where a source puts the events of one drain: the trace's string table (interned
/// strings are written once, before their first use) and the event list.
pub struct Sink<'a> {
    pub names: &'a mut Interner,
    pub events: &'a mut Vec<Event>,
}

impl Sink<'_> {
    pub fn push(&mut self, e: Event) {
        self.events.push(e);
    }

    /// The id of `text` in the trace's string table.
    pub fn intern(&mut self, text: &str) -> u32 {
        self.names.intern(text, self.events)
    }
}

/// Records waiting to become trace events, drained by the writer thread.
pub trait Source: Send {
    /// Moves everything waiting into `out` (records, and counts of records lost).
    fn drain(&mut self, out: &mut Sink<'_>);

    /// Called when the trace starts, before each chunk is written, and at the end: the
    /// place for what lets a reader line up this source's clock (a clock pair).
    fn checkpoint(&mut self, _out: &mut Sink<'_>) {}
}
