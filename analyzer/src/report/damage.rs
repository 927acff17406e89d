//! A damaged or cut-short trace in the report: what was lost and where, and a verdict
//! that says so wherever the loss could change the answer (it never claims "no GPU
//! activity" of a trace that lost records).

use crate::model::trace::Trace;
use gputrace_format::LossKind;
use serde::Serialize;

/// The verdict of a job with no GPU records, none lost.
pub(crate) const NO_GPU: &str = "No GPU activity recorded";

/// What a trace lost (`processes[i].damage` in the JSON; absent for a whole trace).
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct TraceDamage {
    /// Something inside the file is not what the writer wrote: records may be missing
    /// from anywhere in it.
    pub damaged: bool,
    /// The file ends early (no end record: killed, disk full, or still being written):
    /// the records of its last moments are missing.
    pub cut_short: bool,
    pub bytes_lost: u64,
    /// Chunks lost whose headers could be read, or missing from the numbers (a lower
    /// bound; chunks set aside as no records of this trace are not counted).
    pub chunks_lost: u64,
    /// Events known lost (a lower bound where chunk headers were unreadable).
    pub events_lost: u64,
    pub places: Vec<LostPlace>,
    /// The whole account in one line.
    pub summary: String,
    /// A few words for the verdict.
    pub brief: String,
}

/// One place in the file where records were lost.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct LostPlace {
    /// `damaged`, `torn_tail`, `undecodable`, or, where the file's chunks are numbered
    /// (format 2.6): `replayed` and `after_end` (chunks set aside, nothing lost),
    /// `out_of_order`, `unnumbered` (chunks not read) and `missing` (a skip in the numbers).
    pub kind: String,
    pub offset: u64,
    pub bytes: u64,
    pub events: u64,
    /// The lost records were written after this and before `before_ns` (relative to
    /// the trace start; absent where no intact chunk lies on that side).
    pub after_ns: Option<u64>,
    pub before_ns: Option<u64>,
}

impl TraceDamage {
    /// What `t` lost, times relative to `t0`; `None` for a whole trace.
    pub fn of(t: &Trace, t0: u64) -> Option<TraceDamage> {
        let mut s = t.stats.clone();
        if !s.lost_records() {
            return None;
        }
        // Seconds in the messages count from the report's own trace start.
        if t0 > 0 {
            s.first_ns = Some(t0);
        }
        let rel = |ns: Option<u64>| ns.map(|v| v.saturating_sub(t0));
        let (damaged_bytes, chunks, events) = s.damage_totals();
        let torn = s.lost.iter().filter(|l| l.kind == LossKind::TornTail);
        Some(TraceDamage {
            damaged: s.damaged(),
            cut_short: s.cut_short(),
            bytes_lost: damaged_bytes + torn.clone().map(|l| l.bytes).sum::<u64>(),
            chunks_lost: chunks + torn.clone().map(|l| l.chunks).sum::<u64>(),
            events_lost: events + torn.map(|l| l.events).sum::<u64>(),
            places: s
                .lost
                .iter()
                .map(|l| LostPlace {
                    kind: l.kind.name().into(),
                    offset: l.offset,
                    bytes: l.bytes,
                    events: l.events,
                    after_ns: rel(l.after_ns),
                    before_ns: rel(l.before_ns),
                })
                .collect(),
            summary: s.warning().unwrap_or_default(),
            brief: s.brief().unwrap_or_default(),
        })
    }
}
