//! Who held the host: synthetic traces with known answers for the attribution of quiet
//! GPU gaps to the right thread of the process (the thread that spent the CPU time,
//! named by what it is, with shares when several did).

mod common;

use common::*;
use gputrace_analyzer::report::{analyze, Finding, Report};
use gputrace_format::{self as fmt, Event};

const PID: u32 = 1000;
const AUTOGRAD: u32 = 1001;
const OTHER: u32 = 1002;
const THREAD_PERIOD: u64 = 3 * MS;
const STEPS: usize = 100;

fn find<'r>(r: &'r Report, id: &str) -> Option<&'r Finding> {
    r.findings.iter().find(|f| f.id.as_str() == id)
}

fn get<'r>(r: &'r Report, id: &str) -> &'r Finding {
    find(r, id).unwrap_or_else(|| {
        panic!(
            "no {id} finding; have {:?}\n{}",
            r.findings
                .iter()
                .map(|f| (&f.id, f.severity, f.at_stake_ns))
                .collect::<Vec<_>>(),
            gputrace_analyzer::render_text(r)
        )
    })
}

/// One thread's rates while the loop is quiet: share of a CPU, state letter.
#[derive(Clone, Copy)]
struct Rate {
    tid: u32,
    cpu: f64,
    state: u8,
}

/// A loop quiet for 8 ms a step, then 4 kernels of 500 us: the first launched by the
/// main thread, the other three by the autograd thread (so it has most launches).
/// `rates`: the threads sampled every 3 ms, at constant rates.
fn job(rates: &[Rate]) -> B {
    let mut b = B::new();
    b.meta.pid = PID;
    let main = b.s("python");
    let ag = b.s("pt_autograd_0");
    let other = b.s("metrics");
    b.ev.push(Event::Thread {
        tid: PID,
        name: main,
    });
    b.ev.push(Event::Thread {
        tid: AUTOGRAD,
        name: ag,
    });
    b.ev.push(Event::Thread {
        tid: OTHER,
        name: other,
    });
    let mut h = startup(&mut b, 2 * GIB);
    let from = h;
    for _ in 0..STEPS {
        let mut prev_end = 0;
        for (j, name) in STEP_KERNELS.iter().enumerate() {
            let at = h + j as u64 * 10 * US;
            let start = (at + 10 * US).max(prev_end + US);
            let tid = if j == 0 { PID } else { AUTOGRAD };
            let c = b.api(tid, at, 5 * US, LAUNCH, "cudaLaunchKernel", 0, 0);
            b.kernel_shape(start, 500 * US, name, c, BIG);
            prev_end = start + 500 * US;
        }
        h += 35 * US + 8 * MS;
    }
    b.ev.push(Event::CpuLimits(fmt::CpuLimits {
        ts: from,
        online_cpus: 8,
        affinity_cpus: 8,
        thread_period_us: (THREAD_PERIOD / 1000) as u32,
        tree_period_us: 50_000,
        ..Default::default()
    }));
    let mut t = from.saturating_sub(10 * MS);
    let to = h + 50 * MS;
    let t0 = t;
    while t <= to {
        let el = (t - t0) as f64;
        for r in rates {
            b.ev.push(Event::ThreadCpu(fmt::ThreadCpu {
                ts: t,
                tid: r.tid,
                cpu_ns: (el * r.cpu) as u64,
                wait_ns: 0,
                slices: 0,
                state: if r.cpu >= 0.5 { 0 } else { r.state },
            }));
        }
        t += THREAD_PERIOD;
    }
    b
}

fn report(rates: &[Rate]) -> Report {
    let b = job(rates);
    let mut evs = b.ev.clone();
    evs.sort_by_key(|e| e.ts().unwrap_or(0));
    let mut b2 = b;
    b2.ev = evs;
    analyze(&[b2.build()])
}

#[test]
fn cpu_time_is_named_after_the_thread_that_spent_it() {
    // The main thread computes (a heavy __getitem__); the autograd thread, which has
    // most launches, sleeps.
    let r = report(&[
        Rate {
            tid: PID,
            cpu: 1.0,
            state: 0,
        },
        Rate {
            tid: AUTOGRAD,
            cpu: 0.0,
            state: b'S',
        },
    ]);
    let f = get(&r, "cpu_bound");
    let h = r.processes[0].host_cpu.as_ref().unwrap();
    assert_eq!(h.feeding_thread, Some(AUTOGRAD));
    assert_eq!(h.computing_threads.len(), 1, "{:?}", h.computing_threads);
    assert_eq!(h.computing_threads[0].tid, PID);
    assert_eq!(h.computing_threads[0].label, "main thread (tid 1000)");
    assert!(
        f.summary.contains("main thread (tid 1000)"),
        "{}",
        f.summary
    );
    assert!(!f.summary.contains("autograd"), "{}", f.summary);
    assert!(
        f.evidence
            .iter()
            .any(|e| e.starts_with("main thread (tid 1000) was on a CPU")),
        "{:?}",
        f.evidence
    );
}

#[test]
fn several_computing_threads_get_their_shares() {
    let r = report(&[
        Rate {
            tid: PID,
            cpu: 0.6,
            state: 0,
        },
        Rate {
            tid: AUTOGRAD,
            cpu: 0.4,
            state: b'S',
        },
    ]);
    let f = get(&r, "cpu_bound");
    let h = r.processes[0].host_cpu.as_ref().unwrap();
    let shares: Vec<(u32, i64)> = h
        .computing_threads
        .iter()
        .map(|x| (x.tid, x.pct.round() as i64))
        .collect();
    assert_eq!(shares, vec![(PID, 60), (AUTOGRAD, 40)]);
    assert!(
        f.summary
            .contains("main thread (tid 1000) 60%, autograd thread (tid 1001, pt_autograd_0) 40%"),
        "{}",
        f.summary
    );
}

#[test]
fn a_blocked_feeding_thread_is_named_by_its_role() {
    let r = report(&[
        Rate {
            tid: PID,
            cpu: 0.0,
            state: b'S',
        },
        Rate {
            tid: AUTOGRAD,
            cpu: 0.0,
            state: b'S',
        },
    ]);
    let f = get(&r, "data_starvation");
    assert!(
        f.summary
            .contains("autograd thread (tid 1001, pt_autograd_0)"),
        "{}",
        f.summary
    );
    let text = gputrace_analyzer::render_text(&r);
    assert!(
        text.contains("host       autograd thread (tid 1001"),
        "{text}"
    );
}
