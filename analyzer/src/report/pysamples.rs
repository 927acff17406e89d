//! What the host was running during idle gaps: the periodic samples of the CUDA-issuing
//! threads' Python stacks (format 2.3 `PySample`) that fall inside the gaps a finding
//! puts at stake (`data_starvation`'s blocked stretches, `cpu_bound`'s computing ones),
//! tallied by the innermost frame of the user's code (the same skipping rules as call
//! sites: standard library, installed packages, torch), each with the innermost frame
//! overall that it was seen under most (`dataloader.py:__next__` says "waiting for the
//! DataLoader"). Traces without samples give nothing, and reports do not change.

use super::callsites::{is_library, short_file, Frame};
use crate::model::trace::Trace;
use gputrace_format as fmt;
use serde::Serialize;
use std::collections::HashMap;

/// Places kept in `--json`.
pub const MAX_PLACES: usize = 5;
/// Places shown in the text report.
pub const SHOWN_PLACES: usize = 2;

/// Where the host was during some gaps.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct HostPlace {
    /// The innermost frame of the user's code (or, when every frame kept is library
    /// code, the outermost frame kept: the nearest to the user's code).
    pub file: String,
    pub line: u32,
    pub function: String,
    pub user_code: bool,
    /// Samples in the gaps with this frame, and their share of all samples there.
    pub samples: u64,
    pub pct: f64,
    /// The innermost frame overall, the one most often seen with this place.
    pub innermost: Frame,
}

impl HostPlace {
    /// "file.py:12 in f".
    pub fn place(&self) -> String {
        format!(
            "{}:{} in {}",
            short_file(&self.file),
            self.line,
            self.function
        )
    }
}

/// The samples of thread `tid` only (nothing when it has none) inside `spans`.
pub fn tally_only(t: &Trace, tid: u32, spans: &[(u64, u64)]) -> Vec<HostPlace> {
    if !t.py_samples.iter().any(|s| s.tid == tid) {
        return Vec::new();
    }
    tally(t, Some(tid), spans)
}

/// Whose Python samples stand for thread `tid`: its own; without any (a native
/// launcher such as the autograd thread), the main thread's, where the user's loop runs;
/// without those either, None: every sampled thread's (the others are sampled for
/// contention, mostly waiting in library code).
pub fn stand_in(t: &Trace, tid: Option<u32>) -> Option<u32> {
    let sampled = |x: u32| t.py_samples.iter().any(|s| s.tid == x);
    match tid {
        Some(x) if sampled(x) => Some(x),
        _ if sampled(t.meta.pid) => Some(t.meta.pid),
        _ => None,
    }
}

/// The samples of thread `tid` (see [`stand_in`] when it has none, or for None) taken
/// inside `spans` (sorted, disjoint), tallied by place, most first.
pub fn tally(t: &Trace, tid: Option<u32>, spans: &[(u64, u64)]) -> Vec<HostPlace> {
    if t.py_samples.is_empty() || spans.is_empty() {
        return Vec::new();
    }
    let mut tids: Vec<u32> = match stand_in(t, tid) {
        Some(x) => vec![x],
        None => t.py_samples.iter().map(|s| s.tid).collect(),
    };
    tids.dedup();
    // (file, line, function) of the chosen frame -> (user, samples, innermost -> n).
    type Acc = (bool, u64, HashMap<(u32, u32, u32), u64>);
    let mut acc: HashMap<(u32, u32, u32), Acc> = HashMap::new();
    let mut total = 0u64;
    for &tid in &tids {
        for &(s, e) in spans {
            for x in t.py_samples_in(tid, s, e) {
                let Some(st) = t.py_stack(x.stack) else {
                    continue;
                };
                let Some((f, user, inner)) = place_of(t, st) else {
                    continue;
                };
                total += 1;
                let a = acc.entry((f.file, f.line, f.function)).or_default();
                a.0 = user;
                a.1 += 1;
                *a.2.entry((inner.file, inner.line, inner.function))
                    .or_default() += 1;
            }
        }
    }
    let mut v: Vec<HostPlace> = acc
        .into_iter()
        .map(|((file, line, function), (user, n, inners))| {
            let ((ifile, iline, ifun), _) = inners
                .into_iter()
                .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
                .unwrap_or(((file, line, function), 0));
            HostPlace {
                file: t.str(file).to_string(),
                line,
                function: t.str(function).to_string(),
                user_code: user,
                samples: n,
                pct: if total > 0 {
                    n as f64 * 100.0 / total as f64
                } else {
                    0.0
                },
                innermost: Frame {
                    file: t.str(ifile).to_string(),
                    function: t.str(ifun).to_string(),
                    line: iline,
                },
            }
        })
        .collect();
    v.sort_by(|a, b| {
        b.samples
            .cmp(&a.samples)
            .then(a.file.cmp(&b.file))
            .then(a.line.cmp(&b.line))
            .then(a.function.cmp(&b.function))
    });
    v.truncate(MAX_PLACES);
    v
}

/// When the top place is library code because the stacks were kept shorter than they
/// can be (the `python_call_sites` fact says `..., N frames`): the line that says so
/// and how to reach the program's own code next time.
pub fn cut_short_note(t: &Trace, places: &[HostPlace]) -> Option<String> {
    let top = places.first().filter(|p| !p.user_code)?;
    // The depth from whichever `python_call_sites` fact says it ("CPython 3.12.3, 8
    // frames"; others say why there were none).
    let n: u32 = crate::report::environment::facts(t)
        .into_iter()
        .filter(|(_, k, _)| *k == gputrace_env::facts::keys::PYTHON_CALL_SITES)
        .find_map(|(_, _, v)| v.rsplit(", ").next()?.strip_suffix(" frames")?.parse().ok())?;
    // Only when stacks did reach that depth (so the cut is what hid the user's code).
    let cut = t.py_stacks.iter().any(|st| st.frames.len() as u32 >= n);
    let most = fmt::PYSTACK_MAX_FRAMES;
    (cut && n < most).then(|| {
        format!(
            "the stacks kept {n} frames and end inside library code ({}) before reaching the program's own; record with GPUTRACE_PYSTACK={most} to name its line",
            short_file(&top.file)
        )
    })
}

/// Where a stack says the host was: the innermost frame of the user's code, whether
/// it is the user's (false when every frame kept is library code: then the outermost
/// kept, the nearest to the user's code, e.g. a DataLoader's `_next_data` rather than
/// `selectors.select`), and the innermost frame. None for an empty stack.
pub fn place_of<'s>(
    t: &Trace,
    st: &'s fmt::PyStack,
) -> Option<(&'s fmt::PyFrame, bool, &'s fmt::PyFrame)> {
    let inner = st.frames.first()?;
    let (f, user) = st
        .frames
        .iter()
        .find(|f| !is_library(t.str(f.file)))
        .map(|f| (f, true))
        .unwrap_or((st.frames.last().unwrap_or(inner), false));
    Some((f, user, inner))
}

/// The evidence line: `the host was in train.py:41 in load_batch (62% of the Python
/// samples in these gaps; innermost dataloader.py:__next__); ...`.
/// "file.py:12 in f": the first place, for a sentence.
pub fn first_place(places: &[HostPlace]) -> Option<String> {
    places.first().map(|p| p.place())
}

pub fn evidence(places: &[HostPlace]) -> Option<String> {
    if places.is_empty() {
        return None;
    }
    let shown: Vec<String> = places
        .iter()
        .take(SHOWN_PLACES)
        .map(|p| {
            let inner = &p.innermost;
            let same = inner.file == p.file && inner.function == p.function;
            format!(
                "{}{} ({:.0}% of the Python samples in these gaps{})",
                p.place(),
                if p.user_code { "" } else { " [library]" },
                p.pct,
                if same {
                    String::new()
                } else {
                    format!("; innermost {}:{}", short_file(&inner.file), inner.function)
                }
            )
        })
        .collect();
    Some(format!("the host was in {}", shown.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputrace_format::{Event, Meta, PyFrame, PySample, PyStack};

    const MS: u64 = 1_000_000;

    fn trace() -> Trace {
        let mut evs = vec![];
        for (id, text) in [
            (1, "/home/u/train.py"),
            (2, "load_batch"),
            (
                3,
                "/usr/lib/python3.12/site-packages/torch/utils/data/dataloader.py",
            ),
            (4, "__next__"),
            (5, "log_metrics"),
        ] {
            evs.push(Event::Str {
                id,
                text: text.into(),
            });
        }
        let frame = |file, function, line| PyFrame {
            file,
            function,
            line,
        };
        evs.push(Event::PyStack(PyStack {
            id: 1,
            frames: vec![frame(3, 4, 630), frame(1, 2, 41)],
        }));
        evs.push(Event::PyStack(PyStack {
            id: 2,
            frames: vec![frame(1, 5, 77)],
        }));
        // Thread 7: 6 samples in load_batch, 4 in log_metrics inside [0, 100 ms);
        // more outside it; thread 8 samples the same stretch, elsewhere.
        for i in 0..10u64 {
            let stack = if i < 6 { 1 } else { 2 };
            evs.push(Event::PySample(PySample {
                ts: i * 10 * MS,
                tid: 7,
                stack,
            }));
        }
        for i in 10..30u64 {
            evs.push(Event::PySample(PySample {
                ts: i * 10 * MS,
                tid: 7,
                stack: 2,
            }));
            evs.push(Event::PySample(PySample {
                ts: i * 10 * MS,
                tid: 8,
                stack: 1,
            }));
        }
        Trace::from_events(
            Meta {
                pid: 7,
                ..Default::default()
            },
            evs,
        )
    }

    #[test]
    fn samples_in_the_gaps_are_tallied_by_the_users_frame() {
        let t = trace();
        let v = tally(&t, Some(7), &[(0, 100 * MS)]);
        assert_eq!(v.len(), 2);
        assert_eq!((v[0].function.as_str(), v[0].line), ("load_batch", 41));
        assert_eq!(v[0].samples, 6);
        assert!((v[0].pct - 60.0).abs() < 1e-9);
        assert!(v[0].user_code);
        assert_eq!(v[0].innermost.function, "__next__");
        assert_eq!((v[1].function.as_str(), v[1].samples), ("log_metrics", 4));
        assert_eq!(
            evidence(&v).unwrap(),
            "the host was in train.py:41 in load_batch (60% of the Python samples in these gaps; innermost dataloader.py:__next__); train.py:77 in log_metrics (40% of the Python samples in these gaps)"
        );
        // Outside every span, or without samples: nothing.
        assert!(tally(&t, Some(7), &[(500 * MS, 600 * MS)]).is_empty());
        assert!(tally(&t, Some(7), &[]).is_empty());
        assert_eq!(evidence(&[]), None);
        // A thread without samples (a native launcher): the main thread's (pid 7), not
        // thread 8's, which is sampled for contention only.
        let main = tally(&t, Some(99), &[(100 * MS, 120 * MS)]);
        assert_eq!(main.iter().map(|p| p.samples).sum::<u64>(), 2);
        // Without samples of the main thread either: every thread's.
        let mut t2 = t.clone();
        t2.meta.pid = 1;
        let all = tally(&t2, Some(99), &[(100 * MS, 120 * MS)]);
        assert_eq!(all.iter().map(|p| p.samples).sum::<u64>(), 4);
    }
}
