//! Host samples on synthetic traces with known answers: the split of quiet GPU gaps
//! into the feeding thread's CPU time (`cpu_bound`, or `launch_bound` when short) and
//! blocked time (`data_starvation`), and the blocked time's measured sub-cause.

mod common;

use common::*;
use gputrace_analyzer::report::{analyze, Report, Severity};
use gputrace_format::{self as fmt, Event};

const THREAD_PERIOD: u64 = 3 * MS;
const TREE_PERIOD: u64 = 50 * MS;
const STEPS: usize = 100;

use common::{find, get};

fn severity(r: &Report, id: &str) -> Option<Severity> {
    find(r, id).map(|f| f.severity)
}

/// What the host was doing in the synthetic job.
struct Host {
    /// The feeding thread's share of a CPU while quiet (between its launch bursts),
    /// and of the run queue.
    on_cpu: f64,
    runq: f64,
    /// Its state letter while off the CPU.
    state: u8,
    /// Children: (name, share of a CPU, state letter, storage reads per second).
    children: Vec<(&'static str, f64, u8, u64)>,
    cpus: u32,
    /// The machine's busy share of all its CPUs, and its I/O-wait share.
    machine_busy: f64,
    machine_iowait: f64,
}

impl Default for Host {
    fn default() -> Self {
        Host {
            on_cpu: 0.0,
            runq: 0.0,
            state: b'S',
            children: Vec::new(),
            cpus: 8,
            machine_busy: 0.2,
            machine_iowait: 0.0,
        }
    }
}

/// Host samples for [from, to): the feeding thread every 3 ms, the tree and the machine
/// every 50 ms, rates constant.
fn add_samples(b: &mut B, from: u64, to: u64, h: &Host) {
    b.ev.push(Event::CpuLimits(fmt::CpuLimits {
        ts: from,
        online_cpus: h.cpus,
        affinity_cpus: h.cpus,
        thread_period_us: (THREAD_PERIOD / 1000) as u32,
        tree_period_us: (TREE_PERIOD / 1000) as u32,
        ..Default::default()
    }));
    let mut t = from;
    while t <= to {
        let el = (t - from) as f64;
        b.ev.push(Event::ThreadCpu(fmt::ThreadCpu {
            ts: t,
            tid: TID,
            cpu_ns: (el * h.on_cpu) as u64,
            wait_ns: (el * h.runq) as u64,
            slices: 0,
            state: if h.on_cpu >= 0.5 { 0 } else { h.state },
        }));
        t += THREAD_PERIOD;
    }
    let names: Vec<u32> = h.children.iter().map(|c| b.s(c.0)).collect();
    let python = b.s("python");
    let mut t = from;
    while t <= to {
        let el = (t - from) as f64;
        b.ev.push(Event::ProcSample(fmt::ProcSample {
            ts: t,
            pid: b.meta.pid,
            ppid: 1,
            comm: python,
            flags: fmt::PROC_FLAG_SELF,
            state: b'S',
            threads: 20,
            cpu_ns: (el * (h.on_cpu + 0.05)) as u64,
            ..Default::default()
        }));
        for (i, c) in h.children.iter().enumerate() {
            b.ev.push(Event::ProcSample(fmt::ProcSample {
                ts: t,
                pid: 5000 + i as u32,
                ppid: b.meta.pid,
                comm: names[i],
                flags: 0,
                state: c.2,
                threads: 1,
                cpu_ns: (el * c.1) as u64,
                rchar: (el * c.3 as f64 / 1e9) as u64,
                read_bytes: (el * c.3 as f64 / 1e9) as u64,
                write_bytes: 0,
            }));
        }
        let all = el * h.cpus as f64;
        b.ev.push(Event::MachineSample(fmt::MachineSample {
            ts: t,
            busy_ns: (all * h.machine_busy) as u64,
            idle_ns: (all * (1.0 - h.machine_busy - h.machine_iowait)) as u64,
            iowait_ns: (all * h.machine_iowait) as u64,
            ..Default::default()
        }));
        t += TREE_PERIOD;
    }
}

/// The data-starved loop (8 ms quiet per step) with host samples over all of it.
fn starved_with(h: Host) -> Report {
    let mut b = data_starved(STEPS);
    let from = T0 + 2 * S - 10 * MS;
    let to = from + STEPS as u64 * 8100 * US + 50 * MS;
    add_samples(&mut b, from, to, &h);
    analyze(&[b.build()])
}

fn quiet_total(r: &Report) -> u64 {
    let h = r.processes[0].host_cpu.as_ref().unwrap();
    h.quiet_ns
}

#[test]
fn main_process_computing_is_cpu_bound_not_data_starvation() {
    let r = starved_with(Host {
        on_cpu: 1.0,
        ..Default::default()
    });
    let f = get(&r, "cpu_bound");
    assert_eq!(f.severity, Severity::Critical);
    assert_eq!(f.subcause.as_deref(), Some("main_process_work"));
    assert!(find(&r, "data_starvation").is_none());
    assert_eq!(r.findings[0].id.as_str(), "cpu_bound");
    // The same idle time as data_starvation had without samples: 6022 us a step.
    let steady = r.processes[0].steps.count as u64;
    let want = steady * 6022 * US;
    assert!(
        f.at_stake_ns.abs_diff(want) * 100 <= want,
        "{} vs {want}",
        f.at_stake_ns
    );
    assert!(f.fix.contains("DataLoader workers"), "{}", f.fix);
    assert!(r.verdict.contains("cpu_bound"), "{}", r.verdict);
    let h = r.processes[0].host_cpu.as_ref().unwrap();
    assert_eq!(h.cpu_bound_cause.as_deref(), Some("main_process_work"));
    assert!(h.blocked_ns * 100 <= quiet_total(&r));
    let text = gputrace_analyzer::render_text(&r);
    assert!(text.contains("host       thread 4242"), "{text}");
}

#[test]
fn a_thread_waiting_for_a_core_is_cpu_contention() {
    let r = starved_with(Host {
        on_cpu: 0.4,
        runq: 0.6,
        children: vec![
            ("pt_data_worker", 1.0, b'R', 0),
            ("pt_data_worker", 1.0, b'R', 0),
        ],
        cpus: 2,
        machine_busy: 1.0,
        ..Default::default()
    });
    let f = get(&r, "cpu_bound");
    assert_eq!(f.subcause.as_deref(), Some("cpu_contention"));
    assert!(f.fix.contains("fewer DataLoader workers"), "{}", f.fix);
}

#[test]
fn blocked_with_busy_workers_is_workers_saturated() {
    let r = starved_with(Host {
        children: vec![
            ("pt_data_worker", 0.97, b'R', 0),
            ("pt_data_worker", 0.95, b'R', 0),
        ],
        cpus: 16,
        machine_busy: 0.15,
        ..Default::default()
    });
    let f = get(&r, "data_starvation");
    assert_eq!(f.severity, Severity::Critical);
    assert_eq!(f.subcause.as_deref(), Some("workers_saturated"));
    assert!(find(&r, "cpu_bound").is_none());
    assert!(
        f.fix.contains("Raise DataLoader(num_workers=...) above 2"),
        "{}",
        f.fix
    );
    assert!(
        f.evidence
            .iter()
            .any(|e| e.contains("2 worker processes") && e.contains("97%") && e.contains("95%")),
        "{:?}",
        f.evidence
    );
    assert!(
        f.evidence.iter().any(|e| e.contains("16 CPUs available")),
        "{:?}",
        f.evidence
    );
    assert_eq!(f.metrics["workers"], 2.0);
    assert!((f.metrics["worker_cpu_pct_mean"] - 96.0).abs() < 1.0);
    assert!(f.title.contains("blocked"));
}

#[test]
fn more_workers_than_cores_all_busy_is_cpu_saturated() {
    let workers = (0..8).map(|_| ("pt_data_worker", 0.9, b'R', 0)).collect();
    let r = starved_with(Host {
        children: workers,
        cpus: 4,
        machine_busy: 1.0,
        ..Default::default()
    });
    let f = get(&r, "data_starvation");
    assert_eq!(f.subcause.as_deref(), Some("cpu_saturated"));
    assert!(
        f.fix.contains("num_workers is not the more the better"),
        "{}",
        f.fix
    );
    assert!(
        f.fix.contains("at most 4 minus one workers (now 8)"),
        "{}",
        f.fix
    );
}

#[test]
fn workers_in_d_state_reading_storage_is_io_wait() {
    let r = starved_with(Host {
        children: vec![
            ("pt_data_worker", 0.1, b'D', 200 << 20),
            ("pt_data_worker", 0.1, b'D', 200 << 20),
        ],
        machine_iowait: 0.3,
        ..Default::default()
    });
    let f = get(&r, "data_starvation");
    assert_eq!(f.subcause.as_deref(), Some("io_wait"));
    assert!(f.fix.contains("storage"), "{}", f.fix);
    assert!(
        f.evidence.iter().any(|e| e.contains("storage reads")),
        "{:?}",
        f.evidence
    );
}

#[test]
fn the_main_thread_reading_files_is_io_wait() {
    let r = starved_with(Host {
        state: b'D',
        ..Default::default()
    });
    let f = get(&r, "data_starvation");
    assert_eq!(f.subcause.as_deref(), Some("io_wait"));
    let h = r.processes[0].host_cpu.as_ref().unwrap();
    assert!(h.io_blocked_ns * 10 >= h.blocked_ns * 9);
}

#[test]
fn idle_workers_mean_the_wait_is_elsewhere() {
    let r = starved_with(Host {
        children: vec![
            ("pt_data_worker", 0.03, b'S', 0),
            ("pt_data_worker", 0.02, b'S', 0),
        ],
        ..Default::default()
    });
    let f = get(&r, "data_starvation");
    assert_eq!(f.subcause.as_deref(), Some("workers_idle"));
    assert!(f.fix.contains("the wait is elsewhere"), "{}", f.fix);
}

#[test]
fn blocked_without_children_is_no_workers() {
    let r = starved_with(Host::default());
    let f = get(&r, "data_starvation");
    assert_eq!(f.subcause.as_deref(), Some("no_workers"));
    assert!(
        f.evidence
            .iter()
            .any(|e| e.contains("no DataLoader workers")),
        "{:?}",
        f.evidence
    );
}

/// A batch-1 loop: 50 tiny kernels per step (a launch every 8 us), then `python` of
/// Python on the CPU before the next step's first launch. No data loading at all.
fn batch1_loop(python: u64) -> gputrace_analyzer::report::Report {
    let mut b = B::new();
    let mut h = startup(&mut b, 2 * GIB);
    let from = h - 10 * MS;
    for _ in 0..300 {
        for j in 0..50 {
            b.launch(
                h,
                3 * US,
                h + 5 * US,
                2 * US,
                &format!("elementwise_{j}"),
                BIG,
            );
            h += 8 * US;
        }
        h += python;
    }
    add_samples(
        &mut b,
        from,
        h + 20 * MS,
        &Host {
            on_cpu: 1.0,
            ..Default::default()
        },
    );
    analyze(&[b.build()])
}

#[test]
fn short_on_cpu_gaps_between_launches_stay_launch_bound() {
    // 60 us of Python between steps: of the order of a launch (under the 100 us floor
    // of idle::LaunchGap), so launch overhead.
    let r = batch1_loop(60 * US);
    let text = gputrace_analyzer::render_text(&r);
    assert!(
        severity(&r, "data_starvation").is_none_or(|s| s < Severity::Warn),
        "{text}"
    );
    assert!(
        severity(&r, "cpu_bound").is_none_or(|s| s < Severity::Warn),
        "{text}"
    );
    let lb = get(&r, "launch_bound");
    assert_eq!(lb.severity, Severity::Critical);
    // Per step 50 gaps of ~6 us and the 60 us one (~66 us with its launch), all of it.
    assert!(lb.at_stake_ns >= 299 * 360 * US, "{text}");
    // 400 us of Python (50 launches' worth, issue 38 item 5): host work, cpu_bound, never
    // data_starvation; the gaps between the tiny kernels stay launch_bound.
    let r = batch1_loop(400 * US);
    let text = gputrace_analyzer::render_text(&r);
    assert!(
        severity(&r, "data_starvation").is_none_or(|s| s < Severity::Warn),
        "{text}"
    );
    assert!(get(&r, "cpu_bound").severity >= Severity::Warn, "{text}");
    assert_eq!(get(&r, "launch_bound").severity, Severity::Critical);
}

#[test]
fn without_host_samples_the_report_says_the_split_was_not_measured() {
    let plain = analyze(&[data_starved(STEPS).build()]);
    let f = get(&plain, "data_starvation");
    assert!(f.subcause.is_none());
    assert!(plain.processes[0].host_cpu.is_none());
    assert!(plain.processes[0]
        .notes
        .iter()
        .any(|n| n.contains("no host CPU samples")));
    let json = serde_json::to_value(&plain).unwrap();
    assert!(json["processes"][0].get("host_cpu").is_none());
    assert!(json["findings"][0].get("subcause").is_none());
    // A healthy job gets no note: nothing it would change.
    let healthy = analyze(&[healthy(30).build()]);
    assert!(healthy.processes[0].notes.is_empty());
}

#[test]
fn gaps_the_samples_do_not_cover_stay_data_starvation() {
    let mut b = data_starved(STEPS);
    let from = T0 + 2 * S - 10 * MS;
    // Samples over the first half of the loop only.
    let to = from + STEPS as u64 / 2 * 8035 * US;
    add_samples(
        &mut b,
        from,
        to,
        &Host {
            on_cpu: 1.0,
            ..Default::default()
        },
    );
    let r = analyze(&[b.build()]);
    let cpu = get(&r, "cpu_bound").at_stake_ns;
    let ds = get(&r, "data_starvation").at_stake_ns;
    let h = r.processes[0].host_cpu.as_ref().unwrap();
    assert!(h.unmeasured_ns > 0);
    assert_eq!(ds, h.unmeasured_ns + h.blocked_ns);
    assert!(cpu.abs_diff(ds) * 5 <= cpu + ds, "cpu {cpu} vs ds {ds}");
}

#[test]
fn random_host_samples_never_panic() {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..60 {
        let mut b = data_starved(20);
        let base = T0 + 2 * S;
        let pick = |v: u64, r: u64| match r % 6 {
            0 => u64::MAX,
            1 => 0,
            2 => v,
            _ => v % (10 * S),
        };
        for _ in 0..(next() % 300) {
            let ts = match next() % 4 {
                0 => next(),
                _ => base + next() % (300 * MS),
            };
            let e = match next() % 4 {
                0 => Event::ThreadCpu(fmt::ThreadCpu {
                    ts,
                    tid: [TID, 1000, 7][(next() % 3) as usize],
                    cpu_ns: pick(next(), next()),
                    wait_ns: pick(next(), next()),
                    slices: next(),
                    state: (next() % 128) as u8,
                }),
                1 => Event::ProcSample(fmt::ProcSample {
                    ts,
                    pid: (next() % 5) as u32,
                    ppid: 1000,
                    comm: (next() % 20) as u32,
                    flags: (next() % 8) as u8,
                    state: b"RSDZ"[(next() % 4) as usize],
                    threads: next() as u32,
                    cpu_ns: pick(next(), next()),
                    rchar: pick(next(), next()),
                    read_bytes: pick(next(), next()),
                    write_bytes: next(),
                }),
                2 => Event::MachineSample(fmt::MachineSample {
                    ts,
                    busy_ns: pick(next(), next()),
                    idle_ns: pick(next(), next()),
                    iowait_ns: pick(next(), next()),
                    steal_ns: pick(next(), next()),
                    flags: (next() % 4) as u8,
                    psi_cpu_some_us: pick(next(), next()),
                    psi_io_some_us: pick(next(), next()),
                    psi_io_full_us: next(),
                    cgroup_usage_us: next(),
                    cgroup_throttled_us: next(),
                }),
                _ => Event::CpuLimits(fmt::CpuLimits {
                    ts,
                    online_cpus: next() as u32,
                    affinity_cpus: (next() % 3) as u32,
                    quota_us: pick(next(), next()),
                    period_us: pick(next(), next()),
                    memory_limit: next(),
                    thread_period_us: next() as u32,
                    tree_period_us: next() as u32,
                }),
            };
            b.ev.push(e);
        }
        let r = analyze(&[b.build()]);
        let _ = gputrace_analyzer::render_text(&r);
        let _ = serde_json::to_string(&r).unwrap();
        assert!(!r.processes.is_empty(), "round {round}");
    }
}

/// Python samples of the feeding thread in every step of the data-starved loop: at 1 ms
/// (the GPU busy: in `forward`), at 3 and 5 ms (in `load_batch`, inside the
/// DataLoader's `__next__`) and at 7 ms (in `log_metrics`) of its 8 ms quiet stretch.
fn add_py_samples(b: &mut B) {
    let train = b.s("/home/u/train.py");
    let dl = b.s("/usr/lib/python3.12/site-packages/torch/utils/data/dataloader.py");
    let (fwd, load, next, log) = (
        b.s("forward"),
        b.s("load_batch"),
        b.s("__next__"),
        b.s("log_metrics"),
    );
    let frame = |file, function, line| fmt::PyFrame {
        file,
        function,
        line,
    };
    for (id, frames) in [
        (1, vec![frame(train, fwd, 12)]),
        (2, vec![frame(dl, next, 630), frame(train, load, 41)]),
        (3, vec![frame(train, log, 77)]),
    ] {
        b.ev.push(Event::PyStack(fmt::PyStack { id, frames }));
    }
    let mut h = T0 + 2 * S;
    for _ in 0..STEPS {
        for (at, stack) in [(MS, 1), (3 * MS, 2), (5 * MS, 2), (7 * MS, 3)] {
            b.ev.push(Event::PySample(fmt::PySample {
                ts: h + at,
                tid: TID,
                stack,
            }));
        }
        h += 35 * US + 8 * MS;
    }
}

fn starved_with_py(h: Host) -> Report {
    let mut b = data_starved(STEPS);
    let from = T0 + 2 * S - 10 * MS;
    let to = from + STEPS as u64 * 8100 * US + 50 * MS;
    add_samples(&mut b, from, to, &h);
    add_py_samples(&mut b);
    analyze(&[b.build()])
}

const IN_THE_GAPS: &str = "the host was in train.py:41 in load_batch (67% of the Python samples in these gaps; innermost dataloader.py:__next__); train.py:77 in log_metrics (33% of the Python samples in these gaps)";

#[test]
fn python_samples_in_blocked_gaps_name_where_the_host_waited() {
    let r = starved_with_py(Host::default());
    let f = get(&r, "data_starvation");
    assert!(
        f.evidence.iter().any(|l| l == IN_THE_GAPS),
        "{:#?}",
        f.evidence
    );
    let places: Vec<(&str, u32, bool)> = f
        .host_was_in
        .iter()
        .map(|p| (p.function.as_str(), p.line, p.user_code))
        .collect();
    assert_eq!(
        places,
        vec![("load_batch", 41, true), ("log_metrics", 77, true)]
    );
    assert_eq!(f.host_was_in[0].samples, 2 * f.host_was_in[1].samples);
    assert_eq!(f.host_was_in[0].innermost.function, "__next__");
    // The samples taken while the GPU was busy are in no gap.
    assert!(!f.host_was_in.iter().any(|p| p.function == "forward"));
    let json = serde_json::to_string(&r).unwrap();
    assert!(json.contains("\"host_was_in\""), "{json}");
    assert!(json.contains("\"python_while_blocked\""));
    let text = gputrace_analyzer::render_text(&r);
    assert!(text.contains("load_batch"), "{text}");
}

#[test]
fn python_samples_in_computing_gaps_name_what_the_host_computed() {
    let r = starved_with_py(Host {
        on_cpu: 1.0,
        ..Default::default()
    });
    let f = get(&r, "cpu_bound");
    assert!(
        f.evidence.iter().any(|l| l == IN_THE_GAPS),
        "{:#?}",
        f.evidence
    );
    assert_eq!(f.host_was_in.len(), 2);
}

#[test]
fn without_python_samples_nothing_is_added() {
    let r = starved_with(Host::default());
    let f = get(&r, "data_starvation");
    assert!(f.host_was_in.is_empty());
    assert!(!f.evidence.iter().any(|l| l.starts_with("the host was in")));
    let json = serde_json::to_string(&r).unwrap();
    assert!(!json.contains("host_was_in") && !json.contains("python_while"));
}

#[test]
fn computing_after_a_sync_counts_every_gap_it_is_in() {
    // Each step: 4 kernels of 1 ms, a stream sync from 100 us in until the GPU drains
    // (~3.9 ms blocked), then 5.5 ms of host computing before the next launch. The sync's
    // lost run-ahead (as long as it blocked) is implicit_sync, the rest of each gap
    // (~1.6 ms, longer than a pause between launches) cpu_bound: cpu_bound holds part
    // of every gap and the largest part of none.
    let mut b = B::new();
    let mut h = startup(&mut b, 2 * GIB);
    let from = h - 10 * MS;
    for _ in 0..STEPS {
        let end = b.step_kernels(h, 1000 * US);
        b.sync(h + 100 * US, end + 5 * US);
        h = end + 5 * US + 5500 * US;
    }
    add_samples(
        &mut b,
        from,
        h + 50 * MS,
        &Host {
            on_cpu: 1.0,
            ..Default::default()
        },
    );
    let r = analyze(&[b.build()]);
    let f = get(&r, "cpu_bound");
    let gaps = r.processes[0].steps.count as u64;
    let line = f
        .evidence
        .iter()
        .find(|l| l.contains("runnable but waiting"))
        .expect("the CPU line");
    assert!(
        line.contains(" idle gaps (0 of them charged mostly to cpu_bound, as the time breakdown counts them; mean "),
        "{line}\n{}",
        gputrace_analyzer::render_text(&r)
    );
    let n: u64 = line
        .split(" in ")
        .nth(1)
        .and_then(|x| x.split(' ').next())
        .and_then(|x| x.parse().ok())
        .expect("a count");
    assert!(
        n + 2 >= gaps && n <= gaps + 2,
        "{n} gaps of {gaps} steps: {line}"
    );
    assert!(find(&r, "implicit_sync").is_some());
}
