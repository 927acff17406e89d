//! The host sampler end to end: a program (tests/fakes/host_app.c) whose CUDA-issuing
//! main thread computes or sleeps between steps while forked children burn CPU, sleep or
//! read a file, run under the library; the trace's host samples and the report's split
//! of the GPU gaps must say which.
//!
//! The machine running the tests may be loaded: what is asserted does not depend on
//! how much CPU anything got. A thread that computes is on a CPU or waiting for one
//! (both `cpu_bound`); a sleeping one is off the CPU whatever the load; a busy child is
//! running or runnable at every sample (workers saturated, or CPUs saturated); a child
//! in pause() is asleep. Byte counts are lower bounds a few reads reach.

use gputrace_analyzer::report::{analyze, Finding, Report};
use gputrace_analyzer::Trace;
use gputrace_format as fmt;
use gputrace_tests::host::host_app;
use gputrace_tests::{Cuda, Layout, Wheel};

const STEPS: &str = "20";

fn run(args: &[&str]) -> (Report, Trace, u32) {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let out = w.program(host_app(), args).run();
    out.assert_ok();
    assert!(
        out.gputrace_lines().is_empty(),
        "the library spoke: {:?}",
        out.gputrace_lines()
    );
    assert_eq!(out.traces.len(), 1, "{:?}\n{}", out.traces, out.stderr);
    let t = Trace::load(&out.traces[0]).expect("read the trace");
    let r = analyze(std::slice::from_ref(&t));
    (r, t, out.pid)
}

fn find<'r>(r: &'r Report, id: &str) -> Option<&'r Finding> {
    r.findings.iter().find(|f| f.id.as_str() == id)
}

fn get<'r>(r: &'r Report, id: &str) -> &'r Finding {
    find(r, id).unwrap_or_else(|| panic!("no {id} finding\n{}", gputrace_analyzer::render_text(r)))
}

fn stake(r: &Report, id: &str) -> u64 {
    find(r, id).map_or(0, |f| f.at_stake_ns)
}

#[test]
fn a_computing_main_thread_is_cpu_bound() {
    let (r, t, pid) = run(&["compute", STEPS]);
    let text = gputrace_analyzer::render_text(&r);
    // What the sampler recorded: the main thread (it issues the CUDA calls) every few
    // ms, once the CPU limits, and the process itself.
    let main: Vec<&fmt::ThreadCpu> = t.thread_cpu.iter().filter(|x| x.tid == pid).collect();
    assert!(
        main.len() >= 20,
        "{} samples of the main thread",
        main.len()
    );
    assert!(main
        .windows(2)
        .all(|w| w[0].ts <= w[1].ts && w[0].cpu_ns <= w[1].cpu_ns));
    assert_eq!(t.cpu_limits.len(), 1);
    assert!(t.cpu_limits[0].online_cpus >= 1);
    assert!(t
        .proc_samples
        .iter()
        .any(|p| p.pid == pid && p.flags & fmt::PROC_FLAG_SELF != 0));
    // 20 x 30 ms of the main thread's own CPU time between launches.
    // (Measured blocked time: stretches the samples did not cover, if the sampler
    // starved, stay data_starvation, unmeasured.)
    let cpu = stake(&r, "cpu_bound");
    let h = r.processes[0].host_cpu.as_ref().expect("a host section");
    assert!(
        cpu > 4 * h.blocked_ns,
        "cpu_bound {cpu} vs blocked {}\n{text}",
        h.blocked_ns
    );
    assert_eq!(r.processes[0].steps.ops_per_step, Some(3), "{text}");
    let f = get(&r, "cpu_bound");
    assert!(
        matches!(
            f.subcause.as_deref(),
            Some("main_process_work" | "cpu_contention")
        ),
        "{:?}\n{text}",
        f.subcause
    );
    assert_eq!(h.feeding_thread, Some(pid));
    assert_eq!(h.children, 0);
}

#[test]
fn a_sleeping_main_thread_without_children_is_data_starvation_sleeping() {
    // host_app's main thread waits in nanosleep between steps, with no workers: the GPU
    // waited on the program's timer.
    let (r, _, _) = run(&["sleep", STEPS]);
    let text = gputrace_analyzer::render_text(&r);
    let f = get(&r, "data_starvation");
    assert_eq!(f.subcause.as_deref(), Some("sleeping"), "{text}");
    assert!(f.metrics["sleeping_pct"] >= 50.0, "{text}");
    assert!(f.at_stake_ns > 4 * stake(&r, "cpu_bound"), "{text}");
}

#[test]
fn busy_children_are_saturated_workers() {
    let (r, t, pid) = run(&["busy", STEPS, "2"]);
    let text = gputrace_analyzer::render_text(&r);
    let kids: Vec<&fmt::ProcSample> = t
        .proc_samples
        .iter()
        .filter(|p| p.ppid == pid && p.flags & fmt::PROC_FLAG_THREAD == 0)
        .collect();
    let pids: std::collections::BTreeSet<u32> = kids.iter().map(|p| p.pid).collect();
    assert_eq!(pids.len(), 2, "{pids:?}");
    // Named once they have run their prctl (a sample right after the fork may be earlier).
    for pid in &pids {
        let last = kids.iter().rev().find(|p| p.pid == *pid).unwrap();
        assert_eq!(t.str(last.comm), "busy_worker");
    }
    let f = get(&r, "data_starvation");
    assert!(
        matches!(
            f.subcause.as_deref(),
            Some("workers_saturated" | "cpu_saturated")
        ),
        "{:?}\n{text}",
        f.subcause
    );
    assert_eq!(f.metrics["workers"], 2.0, "{text}");
}

#[test]
fn sleeping_children_are_idle_workers() {
    let (r, _, _) = run(&["idle", STEPS, "2"]);
    let text = gputrace_analyzer::render_text(&r);
    let f = get(&r, "data_starvation");
    assert_eq!(f.subcause.as_deref(), Some("workers_idle"), "{text}");
    assert_eq!(f.metrics["workers"], 2.0, "{text}");
    assert!(f.metrics["worker_cpu_pct_mean"] < 10.0, "{text}");
}

#[test]
fn reading_children_show_their_reads() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let file = w.dir.path().join("data.bin");
    std::fs::write(&file, vec![7u8; 1 << 20]).unwrap();
    let out = w
        .program(host_app(), &["read", STEPS, "1", file.to_str().unwrap()])
        .run();
    out.assert_ok();
    let t = Trace::load(&out.traces[0]).expect("read the trace");
    let reads: Vec<&fmt::ProcSample> = t
        .proc_samples
        .iter()
        .filter(|p| p.ppid == out.pid && t.str(p.comm) == "read_worker")
        .collect();
    assert!(reads.len() >= 2, "{} samples of the reader", reads.len());
    assert!(reads.iter().all(|p| p.flags & fmt::PROC_FLAG_NO_IO == 0));
    let grew = reads.last().unwrap().rchar - reads.first().unwrap().rchar;
    // At least four whole reads of the 1 MiB file between the first and last sample.
    assert!(grew >= 4 << 20, "rchar grew by {grew}");
}

#[test]
fn without_the_sampler_nothing_is_sampled() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let out = w
        .program(host_app(), &["sleep", "3"])
        .env("GPUTRACE_HOST", "0")
        .run();
    out.assert_ok();
    let t = Trace::load(&out.traces[0]).expect("read the trace");
    assert!(t.thread_cpu.is_empty() && t.proc_samples.is_empty() && t.cpu_limits.is_empty());
    let r = analyze(std::slice::from_ref(&t));
    assert!(r.processes[0].host_cpu.is_none());
}

/// The thread named `name` in the trace's process-tree samples.
fn tid_named(t: &Trace, name: &str) -> u32 {
    t.proc_samples
        .iter()
        .find(|p| t.str(p.comm) == name)
        .map(|p| p.pid)
        .unwrap_or_else(|| panic!("no thread named {name}"))
}

#[test]
fn launches_from_a_second_thread_while_the_main_thread_computes_are_dispatch_bound() {
    let (r, t, pid) = run(&["launcher", STEPS]);
    let text = gputrace_analyzer::render_text(&r);
    let f = get(&r, "cpu_bound");
    assert_eq!(f.subcause.as_deref(), Some("dispatch_thread"), "{text}");
    assert!(
        f.summary.contains(&format!("main thread (tid {pid})")),
        "{text}"
    );
    assert!(stake(&r, "data_starvation") * 5 < f.at_stake_ns, "{text}");
    // The launching thread was seen waiting in a futex (its condition variable).
    let launcher = tid_named(&t, "launcher");
    assert!(
        t.task_waits
            .iter()
            .any(|w| w.tid == launcher && w.syscall == 202),
        "{text}"
    );
}

#[test]
fn a_helper_thread_computing_while_the_launching_thread_waits_is_thread_contention() {
    let (r, t, _) = run(&["helper", STEPS]);
    let text = gputrace_analyzer::render_text(&r);
    let f = get(&r, "cpu_bound");
    assert_eq!(f.subcause.as_deref(), Some("thread_contention"), "{text}");
    let crunch = tid_named(&t, "crunch");
    assert!(
        f.summary
            .contains(&format!("thread {crunch} (crunch) was on a CPU")),
        "{text}"
    );
    assert!(stake(&r, "data_starvation") * 5 < f.at_stake_ns, "{text}");
}

#[test]
fn a_sleeping_producer_thread_is_data_starvation_not_contention() {
    let (r, _, _) = run(&["feed", STEPS]);
    let text = gputrace_analyzer::render_text(&r);
    get(&r, "data_starvation");
    assert!(
        stake(&r, "cpu_bound") * 5 < stake(&r, "data_starvation"),
        "{text}"
    );
}
