//! How each process ended: its end record (`exit`, `_exit 7`, `signal SIGTERM 15`), what
//! its parent saw when `gputrace run` started it (`exit 1`, `signal SIGKILL 9`), and, for
//! an end that was not a normal exit 0, a clause in the verdict.

use super::stalls::{end_of, last_stop, EndIn};
use crate::model::trace::Trace;
use gputrace_format as fmt;
use serde::Serialize;

/// How a process (or its trace window) ended: in every report's header and in `--json`.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Ended {
    /// `exit`, `exit_call` (`_exit`, `_Exit`, `quick_exit`: no exit handler ran),
    /// `signal`, `abort`, `no_end_record` (killed, SIGKILL say, or the file cut short),
    /// `window` (a trace window closed; the process went on) or `unknown` (the trace
    /// records no state).
    pub how: &'static str,
    /// The end record's words (`exit`, `_exit 7`, `signal SIGTERM 15`), or what its
    /// absence means.
    pub detail: String,
    /// The exit status when known (from `_exit N`, or the parent's wait).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<i32>,
    /// The signal that ended it when known (`SIGKILL`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// What `gputrace run` saw as the parent (`exit 1`, `signal SIGKILL 9, core dumped`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_saw: Option<String>,
    /// A normal end: exit status 0 (or not known and no sign of trouble), or a closed
    /// window.
    pub normal: bool,
    /// How long the process lived on after its last GPU work or CUDA call, when that is
    /// [`QUIET_SHOWN_NS`] or more (a process that went quiet: a hang off the GPU, host work
    /// at the end, a long teardown); 0 otherwise. Its analysis covers its activity only.
    #[serde(skip_serializing_if = "is_zero")]
    pub quiet_ns: u64,
}

/// A quiet end shorter than this is not mentioned.
pub const QUIET_SHOWN_NS: u64 = 5_000_000_000;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The status in `exit 3` / `_exit 3` / `quick_exit 3`.
fn status_in(words: &str) -> Option<i32> {
    let (call, n) = words.trim().rsplit_once(' ')?;
    ["exit", "_exit", "_Exit", "quick_exit"]
        .contains(&call)
        .then(|| n.parse().ok())?
}

/// The signal name in `signal SIGKILL 9` (the end records' and the parent's words).
fn signal_in(words: &str) -> Option<String> {
    let (name, _) = fmt::end_signal(words.split(',').next()?.trim())?;
    Some(name.to_string())
}

/// How the trace `t` ended.
pub fn ended(t: &Trace) -> Ended {
    let (end, end_ts) = end_of(t);
    let reason = last_stop(t)
        .map(|s| t.str(s.2).trim().to_string())
        .unwrap_or_default();
    let parent = t.parent_saw.clone();
    let exit_call = ["_exit ", "_Exit ", "quick_exit "]
        .iter()
        .any(|c| reason.starts_with(c));
    // A trace with no state at all that its reader did not find cut short (one built in
    // memory, or written before states were) does not say how its process ended.
    let untold = end == EndIn::CutShort && !t.stats.no_end && !t.stats.truncated_tail;
    let status = status_in(&reason).or_else(|| parent.as_deref().and_then(status_in));
    let signal = match &end {
        EndIn::Signal(_) | EndIn::Abort => signal_in(&reason),
        _ => None,
    }
    .or_else(|| parent.as_deref().and_then(signal_in));
    if untold && parent.is_none() {
        return Ended {
            how: "unknown",
            detail: "not recorded".into(),
            status: None,
            signal: None,
            parent_saw: None,
            normal: true,
            quiet_ns: 0,
        };
    }
    let how = match end {
        EndIn::CutShort => "no_end_record",
        EndIn::Window => "window",
        EndIn::Abort => "abort",
        EndIn::Signal(_) => "signal",
        EndIn::Exit if exit_call => "exit_call",
        EndIn::Exit => "exit",
    };
    let detail = match (&end, &parent) {
        (EndIn::CutShort, Some(p)) => format!("no end record; {p} (seen by gputrace run)"),
        (EndIn::CutShort, None) => {
            "no end record: killed (SIGKILL, an out-of-memory kill) or the file cut short".into()
        }
        (EndIn::Exit, Some(p)) if !exit_call => p.clone(),
        _ if reason.is_empty() => "exit".into(),
        _ => reason,
    };
    let normal = match end {
        EndIn::Window => true,
        EndIn::Exit => status.unwrap_or(0) == 0 && signal.is_none(),
        _ => false,
    };
    // A stall report says the host was inside a call that never returned: not quiet.
    let quiet_ns = match end {
        _ if !t.stalls.is_empty() => 0,
        EndIn::Exit | EndIn::Signal(_) | EndIn::Abort => {
            t.span().map_or(0, |(_, last)| end_ts.saturating_sub(last))
        }
        _ => 0,
    };
    Ended {
        how,
        detail,
        status,
        signal,
        parent_saw: parent,
        normal,
        quiet_ns: if quiet_ns >= QUIET_SHOWN_NS {
            quiet_ns
        } else {
            0
        },
    }
}

/// How an end that was not normal reads in a sentence: "exited with status 1", "was
/// killed by SIGKILL (no end record: what CUPTI still held is lost)".
pub fn phrase(e: &Ended) -> Option<String> {
    if e.normal {
        return None;
    }
    let core = e
        .parent_saw
        .as_deref()
        .is_some_and(|p| p.contains("core dumped"));
    let by = |sig: &str| {
        format!(
            "was killed by {sig}{}",
            if core { " (core dumped)" } else { "" }
        )
    };
    Some(match e.how {
        "abort" => "aborted (SIGABRT)".to_string(),
        "signal" => by(e.signal.as_deref().unwrap_or("a signal")),
        "no_end_record" => match &e.signal {
            Some(s) => format!("{} with no end record", by(s)),
            None => return None, // said by the damage clause ("cut short")
        },
        "exit_call" => format!(
            "ended through {}{} (no exit handler ran)",
            e.detail.split(' ').next().unwrap_or("_exit"),
            e.status
                .map(|n| format!(" with status {n}"))
                .unwrap_or_default()
        ),
        _ => match (e.status, &e.signal) {
            (_, Some(s)) => by(s),
            (Some(n), None) => format!("exited with status {n}"),
            (None, None) => return None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(reason: Option<&str>, parent: Option<&str>) -> Trace {
        let mut t = Trace {
            strings: vec![String::new()],
            ..Default::default()
        };
        if let Some(r) = reason {
            t.strings.push(r.to_string());
            t.states.push((
                10,
                fmt::CollectorState::Stopped as u8,
                t.strings.len() as u32 - 1,
            ));
        } else {
            t.stats.no_end = true;
        }
        t.parent_saw = parent.map(str::to_string);
        t
    }

    #[test]
    fn each_ending_reads_as_it_was() {
        let e = ended(&trace(Some("exit"), None));
        assert!(e.normal && e.status.is_none(), "{e:?}");
        assert_eq!(phrase(&e), None);
        let e = ended(&trace(Some("exit"), Some("exit 1")));
        assert_eq!((e.how, e.status, e.normal), ("exit", Some(1), false));
        assert_eq!(e.detail, "exit 1");
        assert_eq!(phrase(&e).unwrap(), "exited with status 1");
        let e = ended(&trace(Some("exit"), Some("exit 0")));
        assert!(e.normal);
        let e = ended(&trace(Some("_exit 0"), None));
        assert_eq!((e.how, e.status, e.normal), ("exit_call", Some(0), true));
        let e = ended(&trace(Some("_exit 7"), None));
        assert_eq!(
            phrase(&e).unwrap(),
            "ended through _exit with status 7 (no exit handler ran)"
        );
        let e = ended(&trace(Some("signal SIGTERM 15"), Some("signal SIGTERM 15")));
        assert_eq!(e.signal.as_deref(), Some("SIGTERM"));
        assert_eq!(phrase(&e).unwrap(), "was killed by SIGTERM");
        let e = ended(&trace(None, Some("signal SIGKILL 9")));
        assert_eq!(e.how, "no_end_record");
        assert_eq!(
            phrase(&e).unwrap(),
            "was killed by SIGKILL with no end record"
        );
        // Without the parent's word a missing end record is the damage clause's to say.
        let e = ended(&trace(None, None));
        assert_eq!((e.how, phrase(&e)), ("no_end_record", None));
        let e = ended(&trace(
            Some("signal SIGSEGV 11"),
            Some("signal SIGSEGV 11, core dumped"),
        ));
        assert_eq!(phrase(&e).unwrap(), "was killed by SIGSEGV (core dumped)");
        let e = ended(&trace(Some("signal SIGABRT 6"), None));
        assert_eq!(phrase(&e).unwrap(), "aborted (SIGABRT)");
    }
}
