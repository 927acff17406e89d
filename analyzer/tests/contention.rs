//! Who held the host: synthetic traces with known answers for the attribution of quiet
//! GPU gaps to the right thread of the process (the thread that spent the CPU time,
//! named by what it is, with shares when several did).

mod common;

use common::*;
use gputrace_analyzer::report::{analyze, Report};
use gputrace_format::{self as fmt, Event};

const PID: u32 = 1000;
const AUTOGRAD: u32 = 1001;
const OTHER: u32 = 1002;
const THREAD_PERIOD: u64 = 3 * MS;
const STEPS: usize = 100;

use common::{find, get};

/// One thread's rates while the loop is quiet: share of a CPU, state letter.
#[derive(Clone, Copy)]
struct Rate {
    tid: u32,
    cpu: f64,
    state: u8,
}

/// What else the synthetic job records.
#[derive(Default)]
struct Extra {
    /// Every launch from the autograd thread (none from the main thread).
    all_from_autograd: bool,
    /// GIL samples every 3 ms: (holder, locked).
    gil: Option<(u32, u8)>,
    /// DataLoader workers (children) at 5% of a CPU, blocked in this system call,
    /// sampled every 50 ms.
    workers: Option<u32>,
    /// The launching threads wait in futexes while the other thread's Python stack is
    /// sampled at producer.py:12 every 9 ms.
    producer: bool,
}

/// A loop quiet for 8 ms a step, then 4 kernels of 500 us: the first launched by the
/// main thread, the other three by the autograd thread (so it has most launches).
/// `rates`: the threads sampled every 3 ms, at constant rates.
fn job_with(rates: &[Rate], x: &Extra) -> B {
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
    if x.producer {
        let file = b.s("/home/u/producer.py");
        let func = b.s("produce");
        b.ev.push(Event::PyStack(fmt::PyStack {
            id: 1,
            frames: vec![fmt::PyFrame {
                file,
                function: func,
                line: 12,
            }],
        }));
    }
    let mut h = startup(&mut b, 2 * GIB);
    let from = h;
    for _ in 0..STEPS {
        let mut prev_end = 0;
        for (j, name) in STEP_KERNELS.iter().enumerate() {
            let at = h + j as u64 * 10 * US;
            let start = (at + 10 * US).max(prev_end + US);
            let tid = if j == 0 && !x.all_from_autograd {
                PID
            } else {
                AUTOGRAD
            };
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
        if x.producer {
            for tid in [PID, AUTOGRAD] {
                b.ev.push(Event::TaskWait(fmt::TaskWait {
                    ts: t,
                    tid,
                    syscall: 202,
                    state: b'S',
                    flags: 0,
                }));
            }
            if (t - t0).is_multiple_of(THREAD_PERIOD * 3) {
                b.ev.push(Event::PySample(fmt::PySample {
                    ts: t,
                    tid: OTHER,
                    stack: 1,
                }));
            }
        }
        if let Some((holder, locked)) = x.gil {
            b.ev.push(Event::GilSample(fmt::GilSample {
                ts: t + 1000,
                holder,
                locked,
                switches: 0,
            }));
        }
        if let Some(nr) = x.workers {
            if (t - t0).is_multiple_of(THREAD_PERIOD * 16) {
                let name = b.s("pt_data_worker");
                for i in 0..4u32 {
                    b.ev.push(Event::ProcSample(fmt::ProcSample {
                        ts: t,
                        pid: 5000 + i,
                        ppid: PID,
                        comm: name,
                        flags: 0,
                        state: b'S',
                        threads: 1,
                        cpu_ns: (el * 0.05) as u64,
                        ..Default::default()
                    }));
                    b.ev.push(Event::TaskWait(fmt::TaskWait {
                        ts: t,
                        tid: 5000 + i,
                        syscall: nr,
                        state: b'S',
                        flags: fmt::TASK_WAIT_CHILD,
                    }));
                }
            }
        }
        t += THREAD_PERIOD;
    }
    b
}

fn report(rates: &[Rate]) -> Report {
    report_with(rates, &Extra::default())
}

fn report_with(rates: &[Rate], x: &Extra) -> Report {
    let b = job_with(rates, x);
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
            .contains("the launching threads (main thread (tid 1000) 60%, autograd thread (tid 1001, pt_autograd_0) 40%) were busy"),
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

fn blocked(tid: u32) -> Rate {
    Rate {
        tid,
        cpu: 0.0,
        state: b'S',
    }
}

fn busy(tid: u32) -> Rate {
    Rate {
        tid,
        cpu: 1.0,
        state: 0,
    }
}

#[test]
fn a_thread_holding_the_gil_is_contention_not_data_starvation() {
    let r = report_with(
        &[blocked(PID), blocked(AUTOGRAD), busy(OTHER)],
        &Extra {
            gil: Some((OTHER, 1)),
            ..Default::default()
        },
    );
    let f = get(&r, "cpu_bound");
    assert_eq!(f.subcause.as_deref(), Some("gil_contention"));
    assert!(
        f.summary.contains("thread 1002 (metrics) held it"),
        "{}",
        f.summary
    );
    assert!(f.fix.contains("release the GIL"), "{}", f.fix);
    assert!(find(&r, "data_starvation").is_none(), "{:?}", r.findings);
    let h = r.processes[0].host_cpu.as_ref().unwrap();
    assert_eq!(h.gil_holders.len(), 1);
    assert_eq!(h.gil_holders[0].tid, OTHER);
    assert!(h.contention_ns * 10 >= h.quiet_ns * 9, "{h:?}");
}

#[test]
fn the_gil_free_or_held_by_a_launching_thread_is_not_contention() {
    // Nobody computes: the GIL is free. True starvation.
    let r = report_with(
        &[blocked(PID), blocked(AUTOGRAD), blocked(OTHER)],
        &Extra {
            gil: Some((OTHER, 0)),
            ..Default::default()
        },
    );
    assert!(find(&r, "data_starvation").is_some());
    assert!(find(&r, "cpu_bound").is_none(), "{:?}", r.findings);
}

#[test]
fn another_thread_on_a_cpu_without_gil_samples_is_thread_contention() {
    let r = report(&[blocked(PID), blocked(AUTOGRAD), busy(OTHER)]);
    let f = get(&r, "cpu_bound");
    assert_eq!(f.subcause.as_deref(), Some("thread_contention"));
    assert!(f.summary.contains("thread 1002 (metrics) was on a CPU"));
    assert!(find(&r, "data_starvation").is_none(), "{:?}", r.findings);
}

#[test]
fn a_runtime_launching_while_the_main_thread_dispatches_is_dispatch_bound() {
    // JAX-like: every launch from a runtime thread, which blocks while the main
    // (Python) thread computes.
    let r = report_with(
        &[busy(PID), blocked(AUTOGRAD)],
        &Extra {
            all_from_autograd: true,
            ..Default::default()
        },
    );
    let f = get(&r, "cpu_bound");
    assert_eq!(f.subcause.as_deref(), Some("dispatch_thread"));
    assert!(
        f.summary.contains("main thread (tid 1000)"),
        "{}",
        f.summary
    );
    assert!(find(&r, "data_starvation").is_none(), "{:?}", r.findings);
}

#[test]
fn workers_blocked_inside_the_dataset_are_latency_bound() {
    // clock_nanosleep (230): a sleep inside __getitem__.
    let r = report_with(
        &[blocked(PID), blocked(AUTOGRAD)],
        &Extra {
            workers: Some(230),
            ..Default::default()
        },
    );
    let f = get(&r, "data_starvation");
    assert_eq!(f.subcause.as_deref(), Some("workers_latency_bound"));
    assert!(f.fix.contains("prefetch_factor"), "{}", f.fix);
    // Polling their index queue (7): idle, the wait is elsewhere.
    let r = report_with(
        &[blocked(PID), blocked(AUTOGRAD)],
        &Extra {
            workers: Some(7),
            ..Default::default()
        },
    );
    let f = get(&r, "data_starvation");
    assert_eq!(f.subcause.as_deref(), Some("workers_idle"));
}

#[test]
fn a_loop_fed_by_a_slow_producer_thread_is_starved_through_that_thread() {
    let r = report_with(
        &[blocked(PID), blocked(AUTOGRAD), blocked(OTHER)],
        &Extra {
            producer: true,
            gil: Some((0, 0)),
            ..Default::default()
        },
    );
    let f = get(&r, "data_starvation");
    assert_eq!(f.subcause.as_deref(), Some("producer_thread"));
    assert!(find(&r, "cpu_bound").is_none(), "{:?}", r.findings);
    assert!(
        f.fix
            .contains("thread 1002 (metrics) (at producer.py:12 in produce)"),
        "{}",
        f.fix
    );
    assert!(
        f.evidence
            .iter()
            .any(|e| e.contains("waited in a lock or queue (futex)")),
        "{:?}",
        f.evidence
    );
    // Without the futex waits it is the old no_workers.
    let r = report_with(
        &[blocked(PID), blocked(AUTOGRAD), blocked(OTHER)],
        &Extra::default(),
    );
    assert_eq!(
        get(&r, "data_starvation").subcause.as_deref(),
        Some("no_workers")
    );
}

#[test]
fn a_thread_on_a_cpu_while_the_loop_waits_on_a_pipe_is_not_contention() {
    // The launching threads wait in read() (a worker's pipe): another process feeds them.
    let mut b = job_with(
        &[blocked(PID), blocked(AUTOGRAD), busy(OTHER)],
        &Extra::default(),
    );
    let ts: Vec<u64> =
        b.ev.iter()
            .filter_map(|e| match e {
                Event::ThreadCpu(x) if x.tid == PID => Some(x.ts),
                _ => None,
            })
            .collect();
    for t in ts {
        b.ev.push(Event::TaskWait(fmt::TaskWait {
            ts: t,
            tid: PID,
            syscall: 0,
            state: b'S',
            flags: 0,
        }));
    }
    b.ev.sort_by_key(|e| e.ts().unwrap_or(0));
    let r = analyze(&[b.build()]);
    assert!(find(&r, "data_starvation").is_some(), "{:?}", r.findings);
    assert!(find(&r, "cpu_bound").is_none(), "{:?}", r.findings);
}
