//! A hang across ranks that meet in collectives through host memory (gloo on CUDA
//! tensors). No GPU work is outstanding when such a job hangs: each rank that arrived
//! handed its tensor to host memory and blocks on the CPU for the others, its GPU idle,
//! so neither the stall reports nor the stuck-kernel reading of the end of the trace see
//! it. What the traces do show: ranks whose last collective never came back
//! ([`comm::host_copies`]) and that then lived on with nothing recorded, and ranks that
//! never reached that collective. Named here, with where each one's main thread was
//! (its Python samples after its last activity).

use super::comm::{Collective, RankInput};
use super::findings::{self, FindingId};
use super::out::{Finding, ProcessReport, Severity};
use super::pysamples;
use super::units::{dur, pct};
use crate::model::trace::Trace;

/// A rank counts as stuck once it lived this long after reaching a collective that never
/// came back, with nothing recorded since.
pub const STUCK_NS: u64 = 5_000_000_000;

/// One rank's part in the hang.
struct Part<'a> {
    p: usize,
    /// The collective it is stuck in (None: it never reached it).
    waiting: Option<&'a Collective>,
    /// From when it went quiet to the end of its trace.
    quiet: (u64, u64),
    /// Its last collective of that size, when it never reached the stuck one.
    last_seq: Option<u32>,
}

/// The hang finding, when some rank is stuck in a collective through host memory.
/// `inputs[i]` and `traces[order[i]]` belong to `procs[i]`.
pub(crate) fn detect(
    traces: &[Trace],
    order: &[usize],
    inputs: &[RankInput],
    procs: &[ProcessReport],
) -> Option<Finding> {
    // The earliest stuck collective of every stuck rank; the job's: the lowest number.
    let stuck: Vec<(usize, &Collective)> = inputs
        .iter()
        .enumerate()
        .filter_map(|(p, r)| {
            let c = r.pending.iter().min_by_key(|c| (c.seq, c.start))?;
            let quiet_from = c.start.max(r.last_activity);
            (r.end.saturating_sub(quiet_from) >= STUCK_NS).then_some((p, c))
        })
        .collect();
    let &(_, key) = stuck.iter().min_by_key(|(p, c)| (c.seq, *p))?;
    let mut parts: Vec<Part> = Vec::new();
    for (p, r) in inputs.iter().enumerate() {
        let waiting = r
            .pending
            .iter()
            .find(|c| c.name == key.name && c.seq == key.seq);
        let done = r
            .colls
            .iter()
            .filter(|c| c.name == key.name)
            .map(|c| c.seq)
            .max();
        if let Some(c) = waiting {
            parts.push(Part {
                p,
                waiting: Some(c),
                quiet: (c.start.max(r.last_activity), r.end),
                last_seq: done,
            });
        } else if done.is_none_or(|d| d < key.seq) {
            parts.push(Part {
                p,
                waiting: None,
                quiet: (r.last_activity, r.end),
                last_seq: done,
            });
        }
    }
    let waiting: Vec<&Part> = parts.iter().filter(|x| x.waiting.is_some()).collect();
    let missing: Vec<&Part> = parts.iter().filter(|x| x.waiting.is_none()).collect();
    let names = |v: &[&Part]| -> String {
        let l: Vec<&str> = v.iter().map(|x| procs[x.p].label.as_str()).collect();
        l.join(", ")
    };
    let longest = waiting
        .iter()
        .map(|x| x.quiet.1.saturating_sub(x.quiet.0))
        .max()
        .unwrap_or(0);
    // The size in the key, `... (4198400 B)`.
    let size = key
        .name
        .rsplit_once('(')
        .and_then(|(_, b)| b.trim_end_matches(" B)").parse::<u64>().ok())
        .map(|b| format!(" of {}", super::units::bytes(b)))
        .unwrap_or_default();
    let what = format!(
        "collective #{}{size} through host memory (gloo)",
        key.seq + 1
    );
    let lead = missing.first().or(waiting.first()).map(|x| x.p)?;
    let mut f = findings::new_finding(FindingId::Hang, "A collective never completed", longest, 1);
    f.severity = Severity::Critical;
    f.process = Some(lead);
    f.rank = procs[lead].label.clone();
    f.estimated = true;
    let span = procs[lead]
        .span_ns
        .max(inputs[lead].end.saturating_sub(procs[lead].trace_start_ns));
    f.at_stake_pct = pct(longest, span.max(1)).min(100.0);
    let waited = format!(
        "{} reached {what} and waited {} for the others, with nothing recorded since, until {} ended",
        names(&waiting),
        dur(longest),
        if waiting.len() == 1 { "it" } else { "they" }
    );
    f.summary = if missing.is_empty() {
        format!(
            "{waited}; every traced rank reached it: the ranks it waits for have no trace here."
        )
    } else {
        let at = missing
            .iter()
            .filter_map(|x| place(&traces[order[x.p]], x.quiet))
            .next()
            .map(|w| format!(": its main thread was at {w}"))
            .unwrap_or_default();
        format!("{waited}; {} never arrived{at}.", names(&missing))
    };
    for x in &parts {
        let t = &traces[order[x.p]];
        let label = &procs[x.p].label;
        let rel = |ts: u64| dur(ts.saturating_sub(procs[x.p].trace_start_ns));
        let at = place(t, x.quiet)
            .map(|w| format!("; its main thread then at {w}"))
            .unwrap_or_else(|| "; no Python samples of its main thread then".into());
        f.evidence.push(match x.waiting {
            Some(c) => format!(
                "{label}: reached it at +{} (its copy to host memory), waited {} until its trace ended{at}",
                rel(c.start),
                dur(x.quiet.1.saturating_sub(x.quiet.0))
            ),
            None => format!(
                "{label}: never reached it; {}, then {} with no GPU work nor CUDA call until its trace ended{at}",
                match x.last_seq {
                    Some(s) => format!("its last was collective #{} of that size", s + 1),
                    None => "no collective of that size at all".into(),
                },
                dur(x.quiet.1.saturating_sub(x.quiet.0))
            ),
        });
    }
    f.evidence.push(
        "told from the copies: each rank hands a collective's tensor to pinned host memory and gets the result back on a stream of its own (gloo on CUDA tensors); the copy back never came"
            .into(),
    );
    f.metrics.insert("stuck_for_ns".into(), longest as f64);
    f.metrics
        .insert("collective_seq".into(), (key.seq + 1) as f64);
    f.metrics
        .insert("never_arrived".into(), missing.len() as f64);
    f.fix = if missing.is_empty() {
        "Trace every rank (gputrace run around the launcher traces all its processes): the rank that never arrived is among those not traced here. Give the process group a timeout (init_process_group(timeout=...)) so a missing rank fails the job instead of hanging it.".into()
    } else {
        format!(
            "Find why {} stopped before {what}: the place above is where it was. A rank that skips a collective (a condition true on one rank only, an exception caught on one rank, a rank that runs out of data first) or blocks outside it (I/O, a lock, a sleep) leaves the others waiting. Give the process group a timeout (init_process_group(timeout=...)) so that the job fails with an error instead of hanging.",
            names(&missing)
        )
    };
    Some(f)
}

/// Where thread `pid` (the main thread) was in `span`: `ddp.py:60 in <module>` and the
/// innermost frame when it differs, with the share of its samples there.
fn place(t: &Trace, span: (u64, u64)) -> Option<String> {
    let places = pysamples::tally_only(t, t.meta.pid, &[span]);
    let p = places.first()?;
    let inner = &p.innermost;
    let inner = if inner.file == p.file && inner.line == p.line {
        String::new()
    } else {
        format!(
            ", innermost {}:{} in {}",
            super::callsites::short_file(&inner.file),
            inner.line,
            inner.function
        )
    };
    Some(format!(
        "{}:{} in {} ({:.0}% of its samples{inner})",
        super::callsites::short_file(&p.file),
        p.line,
        p.function,
        p.pct
    ))
}
