//! What detectors share: the severity rule, the finding skeleton, and evidence formatting.

use crate::model::trace::demangle;
use crate::report::out::id::FindingId;
use crate::report::out::{Example, Finding, Severity};
use crate::report::units::pct;
use std::collections::BTreeMap;

pub(super) use crate::report::units::{bytes, dur, pct_str, share, ts};

/// Share of the steady-state wall time from which a cause is worth a warning.
pub const WARN_PCT: f64 = 5.0;
/// ... and from which it is the problem.
pub const CRITICAL_PCT: f64 = 25.0;
/// Below this, a cause is not a warning whatever its share (very short traces).
pub const MIN_WARN_NS: u64 = 100_000;
/// Findings smaller than this share are left out.
pub const REPORT_PCT: f64 = 1.0;

/// Share of the whole run from which a run-wide cost (compiling again, checkpoints) is
/// worth a note, a warning, and is the problem.
pub const RUN_NOTE_PCT: f64 = 3.0;
const RUN_WARN_PCT: f64 = 10.0;
const RUN_CRITICAL_PCT: f64 = 30.0;

/// Severity of a run-wide cost from its share of the whole run.
pub(super) fn run_severity(pct_of_run: f64) -> Severity {
    if pct_of_run >= RUN_CRITICAL_PCT {
        Severity::Critical
    } else if pct_of_run >= RUN_WARN_PCT {
        Severity::Warn
    } else {
        Severity::Info
    }
}

/// Severity from the time at stake and its share of the wall time.
pub(super) fn severity_for(pct_: f64, ns: u64) -> Severity {
    if ns >= MIN_WARN_NS && pct_ >= CRITICAL_PCT {
        Severity::Critical
    } else if ns >= MIN_WARN_NS && pct_ >= WARN_PCT {
        Severity::Warn
    } else {
        Severity::Info
    }
}

/// A finding with `ns` at stake out of `wall`, its severity from those and its overlaps from
/// the id's declaration; the caller fills in the process and the words.
pub(crate) fn finding(id: FindingId, title: &str, ns: u64, wall: u64) -> Finding {
    let p = pct(ns, wall);
    Finding {
        id,
        severity: severity_for(p, ns),
        process: None,
        rank: String::new(),
        title: title.to_string(),
        at_stake_ns: ns,
        at_stake_pct: p,
        estimated: false,
        summary: String::new(),
        evidence: Vec::new(),
        examples: Vec::new(),
        metrics: BTreeMap::new(),
        fix: String::new(),
        overlaps: id.overlaps().to_vec(),
        caused_by: None,
        subcause: None,
        call_sites: Vec::new(),
        host_was_in: Vec::new(),
        hang: None,
    }
}

/// `s` cut to `n` characters, with an ellipsis when cut.
pub(super) fn trunc(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// A kernel's name as evidence shows it: demangled, at most 60 characters.
pub(crate) fn kernel_name(raw: &str) -> String {
    trunc(&demangle(raw), 60)
}

/// "e.g. at +1.2 s (3 ms), ..." for a finding's examples; None without examples.
pub(super) fn examples_line(ex: &[Example]) -> Option<String> {
    if ex.is_empty() {
        return None;
    }
    Some(format!(
        "e.g. at {}",
        ex.iter()
            .map(|e| format!("+{} ({})", ts(e.at_ns), dur(e.dur_ns)))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// Pushes the examples line, if any, onto the evidence.
pub(super) fn push_examples_line(f: &mut Finding) {
    if let Some(l) = examples_line(&f.examples) {
        f.evidence.push(l);
    }
}
