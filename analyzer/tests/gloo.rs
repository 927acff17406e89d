//! Ranks that meet in collectives through host memory (gloo on CUDA tensors): no NCCL
//! kernel, each all-reduce a copy of the gradients to pinned host memory and, once every
//! rank's has arrived, a copy back, on a stream of its own. The straggler and the rank
//! that never arrived are named from those copies.

mod common;

use common::*;
use gputrace_analyzer::report::{analyze, render_text, FindingId};
use gputrace_format::{self as fmt, Event};

const COPY_STREAM: u32 = 50;
const BUCKET: u64 = 4 << 20;
/// Each step: 5 ms of compute, the all-reduce, 1 ms after the last arrival the copy back;
/// steps start 9 ms apart plus the slow rank's delay.
const STEP: u64 = 9 * MS;

/// A 100 us copy on `b`'s stream: to pinned host memory (`out`) or back to the device.
fn copy(b: &mut B, start: u64, bytes: u64, out: bool) {
    let (kind, src, dst) = if out {
        (
            fmt::CopyKind::DtoH,
            fmt::MemKind::Device,
            fmt::MemKind::Pinned,
        )
    } else {
        (
            fmt::CopyKind::HtoD,
            fmt::MemKind::Pinned,
            fmt::MemKind::Device,
        )
    };
    b.memcpy(start, 100 * US, bytes, kind, src, dst, true, 0);
}

struct Job {
    ranks: u32,
    steps: usize,
    /// (rank, extra host time before every step's compute)
    slow: Option<(u32, u64)>,
    /// (rank, steps it completes before it stops arriving)
    hang: Option<(u32, usize)>,
}

/// The ranks' traces: one host, RANK set, main thread = pid, a Python stack per rank
/// (1: the training line, 2: the line a hung rank sleeps at).
fn job(j: &Job) -> Vec<gputrace_analyzer::Trace> {
    let delay = j.slow.map_or(0, |s| s.1);
    let period = STEP + delay;
    (0..j.ranks)
        .map(|r| {
            let mut b = B::new();
            b.meta.pid = TID;
            b.meta.options = vec![("RANK".into(), r.to_string())];
            b.meta.cmdline = vec!["python".into(), "ddp.py".into()];
            let train = vec![fmt::PyFrame {
                file: b.s("/work/ddp.py"),
                function: b.s("<module>"),
                line: 68,
            }];
            let sleep = vec![fmt::PyFrame {
                file: b.s("/work/ddp.py"),
                function: b.s("<module>"),
                line: 63,
            }];
            b.ev.push(Event::PyStack(fmt::PyStack {
                id: 1,
                frames: train,
            }));
            b.ev.push(Event::PyStack(fmt::PyStack {
                id: 2,
                frames: sleep,
            }));
            let gloo = b.s("pt_gloo_runloop");
            b.ev.push(Event::Thread {
                tid: TID + 1,
                name: gloo,
            });
            let t = startup(&mut b, 40 * GIB);
            let mine = if j.slow.is_some_and(|s| s.0 == r) {
                delay
            } else {
                0
            };
            let done = match j.hang {
                Some((h, k)) if h == r => k,
                Some((_, k)) => k + 1,
                None => j.steps,
            };
            let mut last = t;
            for k in 0..done as u64 {
                let s = t + k * period;
                b.stream = 7;
                let compute = s + mine;
                b.launch(compute - 20 * US, 5 * US, compute, 5 * MS, "fwd_bwd", BIG);
                // Arrival: the copy to host memory; the others' result comes back 1 ms
                // after the last arrival (the slow rank's, or everyone's at once).
                b.stream = COPY_STREAM;
                let arrive = compute + 5 * MS + 10 * US;
                copy(&mut b, arrive, BUCKET, true);
                // A second bucket in flight with the first, on a stream of its own.
                b.stream = COPY_STREAM + 1;
                copy(&mut b, arrive + 50 * US, 5 * BUCKET, true);
                let hung = j.hang.is_some() && k as usize == done - 1 && j.hang.unwrap().0 != r;
                if !hung {
                    let back = s + delay + 5 * MS + 10 * US + MS;
                    b.stream = COPY_STREAM;
                    copy(&mut b, back, BUCKET, false);
                    b.stream = COPY_STREAM + 1;
                    copy(&mut b, back + 200 * US, 5 * BUCKET, false);
                }
                last = arrive;
            }
            // Python samples every 10 ms from the last activity to the end: the hung rank
            // sleeps at line 63, the others block at line 68.
            let end = if j.hang.is_some() {
                last + 20 * S
            } else {
                last + 10 * MS
            };
            let stack = if j.hang.is_some_and(|h| h.0 == r) {
                2
            } else {
                1
            };
            let mut ts = last + MS;
            while ts < end {
                b.ev.push(Event::PySample(fmt::PySample {
                    ts,
                    tid: TID,
                    stack,
                }));
                ts += 10 * MS;
            }
            let reason = b.s("exit");
            b.ev.push(Event::State {
                ts: end,
                state: fmt::CollectorState::Stopped as u8,
                reason,
            });
            b.build()
        })
        .collect()
}

#[test]
fn the_straggler_is_named_from_the_copies() {
    let r = analyze(&job(&Job {
        ranks: 3,
        steps: 200,
        slow: Some((1, 3 * MS)),
        hang: None,
    }));
    let text = render_text(&r);
    let c = r.cluster.as_ref().unwrap_or_else(|| panic!("{text}"));
    assert_eq!(c.matching, "host_copies", "{text}");
    assert_eq!(c.straggler, Some(1), "{text}");
    assert!(c.straggler_last_pct > 90.0, "{text}");
    let f = r
        .findings
        .iter()
        .find(|f| f.id == FindingId::CommStraggler)
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(f.rank, "rank 1");
    assert!(f.summary.contains("through host memory"), "{}", f.summary);
    // The others wait 3 ms of each 12 ms step for it: 25% of their wall time, once per
    // step although two collectives (buckets) wait at the same time.
    assert!((f.at_stake_pct - 25.0).abs() < 3.0, "{text}");
    // No hang: every collective came back.
    assert!(r.findings.iter().all(|f| f.id != FindingId::Hang), "{text}");
}

#[test]
fn balanced_ranks_have_no_straggler_worth_a_warning() {
    let r = analyze(&job(&Job {
        ranks: 3,
        steps: 200,
        slow: None,
        hang: None,
    }));
    let text = render_text(&r);
    assert!(r.cluster.is_some(), "{text}");
    assert!(
        r.findings.iter().all(|f| f.id != FindingId::CommStraggler
            || f.severity < gputrace_analyzer::report::Severity::Warn),
        "{text}"
    );
}

#[test]
fn the_rank_that_never_arrived_is_named_with_where_it_was() {
    let r = analyze(&job(&Job {
        ranks: 3,
        steps: 0,
        slow: None,
        hang: Some((2, 50)),
    }));
    let text = render_text(&r);
    let f = &r.findings[0];
    assert_eq!(f.id, FindingId::Hang, "{text}");
    assert_eq!(f.rank, "rank 2", "{text}");
    assert!(r.verdict.starts_with("HANG on rank 2"), "{}", r.verdict);
    assert!(
        f.summary.contains("rank 0, rank 1 reached"),
        "{}",
        f.summary
    );
    assert!(f.summary.contains("rank 2 never arrived"), "{}", f.summary);
    assert!(f.summary.contains("ddp.py:63"), "{}", f.summary);
    assert!(f.at_stake_ns > 19 * S, "{}", f.at_stake_ns);
    assert_eq!(f.metrics["never_arrived"], 1.0);
}

#[test]
fn the_same_copies_without_gloo_are_no_collectives() {
    // JAX stages tensors through pinned memory the same way: without gloo's threads the
    // copies are copies, and the ranks have nothing to meet in.
    let mut traces = job(&Job {
        ranks: 3,
        steps: 50,
        slow: Some((1, 3 * MS)),
        hang: None,
    });
    for t in &mut traces {
        t.threads.clear();
    }
    let r = analyze(&traces);
    assert!(r.cluster.is_none(), "{}", render_text(&r));
}

#[test]
fn a_short_wait_at_the_end_is_no_hang() {
    // The last collective's copy back is missing but the processes ended 10 ms later:
    // a job stopped mid-step, not a hang.
    let mut traces = job(&Job {
        ranks: 2,
        steps: 0,
        slow: None,
        hang: Some((1, 30)),
    });
    for t in &mut traces {
        for s in t.states.iter_mut() {
            s.0 = t.kernels.last().map_or(s.0, |k| k.end + 10 * MS);
        }
    }
    let r = analyze(&traces);
    assert!(
        r.findings.iter().all(|f| f.id != FindingId::Hang),
        "{}",
        render_text(&r)
    );
}
