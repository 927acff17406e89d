//! What the host samples say about the steady state: the `host_cpu` section of a process's
//! report, with the measured kinds of the findings they shape: `cpu_bound` (the feeding
//! thread was computing through GPU gaps: `cpu_contention`, `main_process_work`,
//! `framework_overhead`) and `data_starvation`'s sub-cause (the thread was blocked:
//! `workers_saturated`, `cpu_saturated`, `io_wait`, `sleeping`, `workers_idle`, `no_workers`). The
//! findings' words are in `findings/cpu_bound.rs` and `findings/data_starvation.rs`.

use super::host::{self, HostCpu, HostSplit, Tree};
use super::pysamples::{self, HostPlace};
use super::units::pct;
use serde::Serialize;

/// A worker that used at least this share of a CPU while the feeding thread was
/// blocked is saturated.
pub const BUSY_WORKER_PCT: f64 = 60.0;
/// The job's CPUs are saturated from this share of the CPUs available to it (or of
/// the machine's CPU time).
pub const SATURATED_PCT: f64 = 85.0;
/// Blocked time in `D` state (the feeding thread's, or the workers') from which the
/// wait is storage.
pub const IO_PCT: f64 = 25.0;

/// One child process while the feeding thread was blocked.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct WorkerReport {
    pub pid: u32,
    pub comm: String,
    /// Share of one CPU it used, %.
    pub cpu_pct: f64,
    /// Share of its time in uninterruptible sleep (I/O), %.
    pub d_state_pct: f64,
    /// Bytes it read from storage (`read_bytes`) and through read calls (`rchar`).
    pub read_bytes: u64,
    pub rchar: u64,
}

/// The process tree and the machine during some GPU gaps.
#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct TreeReport {
    /// Length of the gaps.
    pub span_ns: u64,
    /// Children that look like input workers (DataLoader workers by name, else every
    /// child that used the CPU), busiest first (at most 16 listed).
    pub workers: Vec<WorkerReport>,
    pub worker_count: usize,
    pub worker_cpu_pct_mean: f64,
    /// Workers at or above [`BUSY_WORKER_PCT`].
    pub workers_busy: usize,
    /// CPUs the job (the traced process and its children) used, on average.
    pub job_cpus: f64,
    pub machine_busy_pct: Option<f64>,
    pub machine_iowait_pct: Option<f64>,
    /// PSI: share of the time some task waited for a CPU / for I/O.
    pub psi_cpu_pct: Option<f64>,
    pub psi_io_pct: Option<f64>,
    /// Workers' time in `D` state (I/O), and in `R` state (running or waiting for a
    /// CPU), %.
    pub worker_d_state_pct: f64,
    pub worker_r_state_pct: f64,
    /// Storage reads by the job per second of gap.
    pub read_bytes_per_s: f64,
}

/// One thread's share of some host time.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct ThreadShare {
    pub tid: u32,
    /// Its recorded name ("" when unknown).
    pub name: String,
    /// What it is, in words: "main thread (tid N)", "autograd thread (tid N, ...)".
    pub label: String,
    pub ns: u64,
    /// Share of the time shared out, %.
    pub pct: f64,
}

/// Shares of `by` (tid -> ns), largest first; threads under 1% left out.
pub(crate) fn shares(
    t: &crate::model::trace::Trace,
    h: &HostCpu,
    by: &std::collections::BTreeMap<u32, u64>,
) -> Vec<ThreadShare> {
    let total: u64 = by.values().fold(0u64, |a, v| a.saturating_add(*v));
    let mut v: Vec<ThreadShare> = by
        .iter()
        .filter(|(_, &ns)| ns > 0 && pct(ns, total) >= 1.0)
        .map(|(&tid, &ns)| ThreadShare {
            tid,
            name: host::thread_name(t, Some(h), tid).to_string(),
            label: host::thread_label(t, Some(h), tid),
            ns,
            pct: pct(ns, total),
        })
        .collect();
    v.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.tid.cmp(&b.tid)));
    v
}

/// The host side of the steady state, from the host samples.
#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct HostReport {
    pub thread_period_us: u32,
    pub tree_period_us: u32,
    pub threads_sampled: usize,
    /// The thread that issued most launches.
    pub feeding_thread: Option<u32>,
    pub feeding_thread_name: String,
    /// What the feeding thread is, in words ("main thread (tid N)").
    pub feeding_thread_label: String,
    pub online_cpus: u32,
    pub affinity_cpus: u32,
    /// CPUs the job may use (affinity, capped by a cgroup quota).
    pub cpus_available: Option<f64>,
    pub memory_limit_bytes: u64,
    /// GPU idle time with no CUDA call on any thread, and how the feeding thread spent it.
    pub quiet_ns: u64,
    pub measured_ns: u64,
    pub on_cpu_ns: u64,
    pub runq_ns: u64,
    /// On a CPU in short stretches between launches (charged to launch_bound).
    pub launch_overhead_ns: u64,
    pub blocked_ns: u64,
    pub io_blocked_ns: u64,
    /// Off the CPU in page faults (`D` state outside any system call), charged to
    /// `cpu_bound`.
    #[serde(skip_serializing_if = "is_zero")]
    pub page_fault_ns: u64,
    pub unmeasured_ns: u64,
    /// While the feeding thread was blocked / computing.
    pub while_blocked: TreeReport,
    pub while_computing: TreeReport,
    /// Children seen in the steady state (all, not only workers).
    pub children: usize,
    /// `data_starvation`'s measured sub-cause (see README): `workers_saturated`,
    /// `cpu_saturated`, `io_wait`, `workers_idle`, `no_workers`; None without blocked time.
    pub data_starvation_cause: Option<String>,
    /// `cpu_bound`'s kind: `cpu_contention`, `main_process_work`, `framework_overhead`,
    /// `collective_on_cpu` (gloo's threads reducing on the CPU), ...
    pub cpu_bound_cause: Option<String>,
    /// The threads whose CPU time makes up `on_cpu_ns + runq_ns`, largest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub computing_threads: Vec<ThreadShare>,
    /// Time the launching threads were blocked waiting for another thread of the
    /// process (charged to `cpu_bound`): the GIL's holders, and other threads on a CPU
    /// (when the GIL was not read or not held by another thread), largest first.
    #[serde(skip_serializing_if = "is_zero")]
    pub contention_ns: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gil_holders: Vec<ThreadShare>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub other_threads: Vec<ThreadShare>,
    /// Where the thread the launching threads waited for most was in its Python code.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub python_of_contender: Vec<HostPlace>,
    /// What the DataLoader workers were doing while the feeding thread was blocked,
    /// from the system calls they were blocked in (samples): inside the dataset
    /// (sleeping, reading, fetching), and idle waiting for indices (polling their queue).
    #[serde(skip_serializing_if = "is_zero")]
    pub worker_waits_in_dataset: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub worker_waits_for_indices: u64,
    /// Another Python thread of the process that issues no launches, seen most in the
    /// Python samples while the feeding thread was blocked in a lock or queue wait (a
    /// futex), and where it was: the thread that feeds the loop through its own queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub producer_thread: Option<ThreadShare>,
    /// Share of the feeding threads' wait samples (while blocked) inside a sleep
    /// (`nanosleep`, `clock_nanosleep`): the program waited on a timer, not for input.
    #[serde(skip_serializing_if = "is_zero_f")]
    pub sleeping_pct: f64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub python_of_producer: Vec<HostPlace>,
    /// Where the feeding thread's Python code was while it was blocked / computing
    /// (from the periodic stack samples; empty without them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub python_while_blocked: Vec<HostPlace>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub python_while_computing: Vec<HostPlace>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

fn is_zero_f(v: &f64) -> bool {
    *v == 0.0
}

/// x86-64 system calls a worker blocked inside a dataset is in: sleeps, reads, network.
const DATASET_CALLS: [u32; 12] = [0, 17, 19, 295, 45, 47, 35, 230, 257, 42, 43, 61];
/// ... and those a worker waiting for its next indices is in: poll, select, epoll.
const INDEX_CALLS: [u32; 7] = [7, 23, 270, 271, 232, 281, 441];

/// Worker wait samples inside `spans` (sorted, disjoint): (in the dataset, for indices).
fn worker_waits(t: &crate::model::trace::Trace, spans: &[(u64, u64)]) -> (u64, u64) {
    let (mut ds, mut idx) = (0, 0);
    for &(s, e) in spans {
        let lo = t.task_waits.partition_point(|w| w.ts < s);
        for w in t.task_waits[lo..].iter().take_while(|w| w.ts < e) {
            if w.flags & gputrace_format::TASK_WAIT_CHILD == 0 {
                continue;
            }
            if w.state == b'D' || DATASET_CALLS.contains(&w.syscall) {
                ds += 1;
            } else if INDEX_CALLS.contains(&w.syscall) {
                idx += 1;
            }
        }
    }
    (ds, idx)
}

/// x86-64 `futex`: a lock, a condition variable, a queue's get (and the GIL).
const FUTEX: u32 = 202;

/// x86-64 `nanosleep` and `clock_nanosleep`: `time.sleep`, a timed wait.
const SLEEPS: [u32; 2] = [35, 230];

/// Share of the feeding threads' wait samples inside `spans` that were in a sleep.
fn sleeping_pct(t: &crate::model::trace::Trace, h: &HostCpu, spans: &[(u64, u64)]) -> f64 {
    let (sleeping, all) = feeder_waits(t, h, spans, &SLEEPS);
    pct(sleeping, all)
}

/// The feeding threads' wait samples inside `spans` (sorted, disjoint): those in one of
/// `calls`, and all.
fn feeder_waits(
    t: &crate::model::trace::Trace,
    h: &HostCpu,
    spans: &[(u64, u64)],
    calls: &[u32],
) -> (u64, u64) {
    let (mut matching, mut all) = (0u64, 0u64);
    for &(s, e) in spans {
        let lo = t.task_waits.partition_point(|w| w.ts < s);
        for w in t.task_waits[lo..].iter().take_while(|w| w.ts < e) {
            if w.flags & gputrace_format::TASK_WAIT_CHILD == 0 && h.is_feeder(w.tid) {
                all += 1;
                matching += calls.contains(&w.syscall) as u64;
            }
        }
    }
    (matching, all)
}

/// The thread feeding the loop through the program's own queue, if the blocked
/// launching threads waited in futexes (at least half of their wait samples) while
/// another Python thread that issues no launches was sampled.
fn producer(
    t: &crate::model::trace::Trace,
    h: &HostCpu,
    spans: &[(u64, u64)],
) -> Option<ThreadShare> {
    let (futex, all) = feeder_waits(t, h, spans, &[FUTEX]);
    if all == 0 || futex * 2 < all {
        return None;
    }
    let mut by: std::collections::BTreeMap<u32, u64> = Default::default();
    for x in &t.py_samples {
        if h.is_feeder(x.tid) || x.tid == h.pid {
            continue;
        }
        let i = spans.partition_point(|sp| sp.1 <= x.ts);
        if spans.get(i).is_some_and(|sp| sp.0 <= x.ts) {
            *by.entry(x.tid).or_default() += 1;
        }
    }
    shares(t, h, &by).into_iter().next()
}

fn tree_report(h: &HostCpu, t: &Tree) -> TreeReport {
    let ws = host::workers(t);
    let n = ws.len();
    let mean = if n > 0 {
        ws.iter().map(|w| w.cpu_pct()).sum::<f64>() / n as f64
    } else {
        0.0
    };
    let r_state: u64 = ws.iter().fold(0u64, |a, w| a.saturating_add(w.r_state_ns));
    let (d, cov): (u64, u64) = ws.iter().fold((0u64, 0u64), |a, w| {
        (
            a.0.saturating_add(w.d_state_ns),
            a.1.saturating_add(w.covered_ns),
        )
    });
    let child_cpu: f64 = t.children.iter().map(|c| c.cpu_ns as f64).sum();
    let reads: f64 = t.children.iter().map(|c| c.read_bytes as f64).sum();
    let _ = h;
    TreeReport {
        span_ns: t.span_ns,
        workers: ws
            .iter()
            .take(16)
            .map(|w| WorkerReport {
                pid: w.pid,
                comm: w.comm.clone(),
                cpu_pct: w.cpu_pct(),
                d_state_pct: pct(w.d_state_ns, w.covered_ns),
                read_bytes: w.read_bytes,
                rchar: w.rchar,
            })
            .collect(),
        worker_count: n,
        worker_cpu_pct_mean: mean,
        workers_busy: ws.iter().filter(|w| w.cpu_pct() >= BUSY_WORKER_PCT).count(),
        job_cpus: if t.span_ns > 0 {
            (child_cpu + t.main_cpu_ns as f64) / t.span_ns as f64
        } else {
            0.0
        },
        machine_busy_pct: t.machine_busy_pct,
        machine_iowait_pct: t.machine_iowait_pct,
        psi_cpu_pct: t.psi_cpu_pct,
        psi_io_pct: t.psi_io_pct,
        worker_d_state_pct: pct(d, cov),
        worker_r_state_pct: pct(r_state, cov),
        read_bytes_per_s: if t.span_ns > 0 {
            reads * 1e9 / t.span_ns as f64
        } else {
            0.0
        },
    }
}

/// Is the job's CPU saturated during these gaps?
fn saturated(t: &TreeReport, cpus: Option<f64>) -> bool {
    let by_job = cpus.is_some_and(|m| m > 0.0 && t.job_cpus >= m * SATURATED_PCT / 100.0);
    let by_machine = t.machine_busy_pct.is_some_and(|b| b >= 95.0);
    by_job || by_machine
}

/// The `host` section of a process's report (None without host samples).
pub(crate) fn report(
    ctx: &super::ctx::Ctx,
    att: &super::idle::Attribution,
    steady: (u64, u64),
) -> Option<HostReport> {
    let h = ctx.host.as_ref()?;
    let t = ctx.t;
    let s: &HostSplit = &att.host;
    let blocked = HostSplit::merged(&s.blocked_spans);
    let computing = HostSplit::merged(&s.cpu_spans);
    let tb = h.tree(t, &blocked);
    let tc = h.tree(t, &computing);
    let steady_tree = h.tree(t, &[steady]);
    let cpus = h.cpus_available();
    let l = h.limits.clone().unwrap_or_default();
    let mut r = HostReport {
        thread_period_us: l.thread_period_us,
        tree_period_us: l.tree_period_us,
        threads_sampled: h.threads_sampled(),
        feeding_thread: h.feeder,
        feeding_thread_name: h
            .feeder
            .map(|f| host::thread_name(t, Some(h), f).to_string())
            .unwrap_or_default(),
        feeding_thread_label: h
            .feeder
            .map(|f| host::thread_label(t, Some(h), f))
            .unwrap_or_default(),
        online_cpus: l.online_cpus,
        affinity_cpus: l.affinity_cpus,
        cpus_available: cpus,
        memory_limit_bytes: l.memory_limit,
        quiet_ns: s.measured_ns.saturating_add(s.unmeasured_ns),
        measured_ns: s.measured_ns,
        on_cpu_ns: s.on_cpu_ns,
        runq_ns: s.runq_ns,
        launch_overhead_ns: s.short_ns,
        blocked_ns: s.blocked_ns,
        io_blocked_ns: s.io_ns,
        page_fault_ns: s.fault_ns,
        unmeasured_ns: s.unmeasured_ns,
        while_blocked: tree_report(h, &tb),
        while_computing: tree_report(h, &tc),
        children: steady_tree.children.len(),
        data_starvation_cause: None,
        cpu_bound_cause: None,
        computing_threads: shares(t, h, &s.cpu_by_thread),
        contention_ns: s.contention_ns(),
        gil_holders: shares(t, h, &s.gil_by_thread),
        other_threads: shares(t, h, &s.other_by_thread),
        python_of_contender: Vec::new(),
        worker_waits_in_dataset: 0,
        worker_waits_for_indices: 0,
        producer_thread: None,
        sleeping_pct: 0.0,
        python_of_producer: Vec::new(),
        python_while_blocked: pysamples::tally(t, h.feeder, &blocked),
        python_while_computing: Vec::new(),
    };
    (r.worker_waits_in_dataset, r.worker_waits_for_indices) = worker_waits(t, &blocked);
    r.sleeping_pct = sleeping_pct(t, h, &blocked);
    if let Some(p) = producer(t, h, &blocked) {
        r.python_of_producer = pysamples::tally_only(t, p.tid, &blocked);
        r.producer_thread = Some(p);
    }
    let contender = r
        .gil_holders
        .first()
        .or(r.other_threads.first())
        .map(|x| x.tid);
    if let Some(c) = contender {
        let spans = HostSplit::merged(&s.contention_spans);
        r.python_of_contender = pysamples::tally_only(t, c, &spans);
    }
    // Python places of the thread that spent most of the CPU time.
    let busiest = r.computing_threads.first().map(|x| x.tid).or(h.feeder);
    r.python_while_computing = pysamples::tally(t, busiest, &computing);
    r.data_starvation_cause = starvation_cause(&r).map(str::to_string);
    r.cpu_bound_cause = cpu_cause(&r, s).map(str::to_string);
    Some(r)
}

/// A kind is named only for time that is at least this share of the quiet idle time.
const KIND_MIN_PCT: f64 = 1.0;

fn starvation_cause(r: &HostReport) -> Option<&'static str> {
    if r.blocked_ns == 0 || pct(r.blocked_ns, r.quiet_ns) < KIND_MIN_PCT {
        return None;
    }
    let w = &r.while_blocked;
    let main_io = pct(r.io_blocked_ns, r.blocked_ns);
    Some(
        if main_io >= IO_PCT || (w.worker_count > 0 && w.worker_d_state_pct >= IO_PCT) {
            "io_wait"
        } else if w.worker_count == 0 && r.producer_thread.is_some() {
            "producer_thread"
        } else if w.worker_count == 0 && r.sleeping_pct >= 50.0 {
            // No input workers, the thread on a timer (a polling loop waiting on
            // workers sleeps too: with workers, what they did decides).
            "sleeping"
        } else if w.worker_count == 0 {
            "no_workers"
        } else if w.worker_cpu_pct_mean >= BUSY_WORKER_PCT {
            if saturated(w, r.cpus_available) {
                "cpu_saturated"
            } else {
                "workers_saturated"
            }
        } else if w.worker_r_state_pct >= 50.0 {
            // Runnable most of the time yet getting little CPU: no core free for them.
            "cpu_saturated"
        } else if r.worker_waits_in_dataset > r.worker_waits_for_indices {
            // Off the CPU inside __getitem__ (a sleep, a read, a fetch): each sample
            // costs waiting, not computing.
            "workers_latency_bound"
        } else {
            "workers_idle"
        },
    )
}

fn cpu_cause(r: &HostReport, s: &HostSplit) -> Option<&'static str> {
    let own = r.on_cpu_ns.saturating_add(r.runq_ns);
    let cpu = own
        .saturating_add(r.contention_ns)
        .saturating_add(r.page_fault_ns);
    if cpu == 0 || pct(cpu, r.quiet_ns) < KIND_MIN_PCT {
        return None;
    }
    // Waiting for another thread outweighs the launching threads' own computing and
    // their run-queue wait (a waiter woken on a busy machine also queues for a CPU).
    if r.contention_ns >= r.on_cpu_ns.max(r.runq_ns).max(r.page_fault_ns) {
        let gil: u64 = r.gil_holders.iter().map(|x| x.ns).sum();
        let main_dispatching = r
            .other_threads
            .first()
            .is_some_and(|x| Some(x.tid) != r.feeding_thread && x.label.starts_with("main thread"));
        return Some(if gil * 2 >= r.contention_ns {
            "gil_contention"
        } else if main_dispatching {
            "dispatch_thread"
        } else {
            "thread_contention"
        });
    }
    // gloo's threads reducing a collective on the CPU (CUDA tensors copied to host memory
    // and summed there) are most of the computing.
    let gloo: u64 = r
        .computing_threads
        .iter()
        .filter(|x| x.name.contains("gloo"))
        .map(|x| x.ns)
        .sum();
    Some(if r.page_fault_ns >= own {
        "page_faults"
    } else if gloo * 2 >= own {
        "collective_on_cpu"
    } else if r.runq_ns as f64 >= cpu as f64 * 0.3 {
        "cpu_contention"
    } else if s.long_cpu_ns as f64 >= cpu as f64 * 0.5 {
        "main_process_work"
    } else {
        "framework_overhead"
    })
}

pub(crate) fn cpus_line(r: &HostReport) -> String {
    let mut s = match r.cpus_available {
        Some(c) if (c - c.round()).abs() < 0.01 => {
            format!("{} CPUs available to the job", c.round())
        }
        Some(c) => format!("{c:.1} CPUs available to the job"),
        None => "CPUs available unknown".to_string(),
    };
    if r.online_cpus > 0 {
        s.push_str(&format!(
            " ({} online, {} in its affinity mask{})",
            r.online_cpus,
            r.affinity_cpus,
            match r.cpus_available {
                Some(c) if c + 0.01 < r.affinity_cpus as f64 => ", capped by a cgroup CPU quota",
                _ => "",
            }
        ));
    }
    s
}

pub(crate) fn workers_line(w: &TreeReport) -> Option<String> {
    if w.worker_count == 0 {
        return None;
    }
    let names: Vec<&str> = {
        let mut v: Vec<&str> = w.workers.iter().map(|x| x.comm.as_str()).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let each: Vec<String> = w
        .workers
        .iter()
        .take(8)
        .map(|x| format!("{:.0}%", x.cpu_pct))
        .collect();
    Some(format!(
        "{} worker process{} ({}) at {} of a CPU each (mean {:.0}%)",
        w.worker_count,
        if w.worker_count == 1 { "" } else { "es" },
        names.join(", "),
        each.join(", "),
        w.worker_cpu_pct_mean
    ))
}

pub(crate) fn machine_line(w: &TreeReport) -> Option<String> {
    let mut parts = vec![format!("the job used {:.1} CPUs", w.job_cpus)];
    if let Some(b) = w.machine_busy_pct {
        parts.push(format!("the machine was {b:.0}% busy"));
    }
    if let Some(i) = w.machine_iowait_pct {
        if i >= 0.5 {
            parts.push(format!("{i:.1}% in I/O wait"));
        }
    }
    if let Some(p) = w.psi_io_pct {
        if p >= 1.0 {
            parts.push(format!("PSI io some {p:.0}%"));
        }
    }
    if let Some(p) = w.psi_cpu_pct {
        if p >= 1.0 {
            parts.push(format!("PSI cpu some {p:.0}%"));
        }
    }
    Some(parts.join(", "))
}

/// "main thread (tid 4242)": the feeding thread as evidence names it.
pub(crate) fn who(r: &HostReport) -> String {
    if !r.feeding_thread_label.is_empty() {
        return r.feeding_thread_label.clone();
    }
    match (r.feeding_thread, r.feeding_thread_name.as_str()) {
        (Some(t), "") => format!("thread {t}"),
        (Some(t), n) => format!("thread {t} ({n})"),
        _ => "the feeding thread".to_string(),
    }
}

/// Whether the CPU time counted over the GPU's idle gaps (`on_cpu_ns`, `runq_ns`) is
/// several threads', not the feeding thread's alone: its words then say so.
pub(crate) fn cpu_of_several(r: &HostReport) -> bool {
    match r.computing_threads.as_slice() {
        [] => false,
        [one] => Some(one.tid) != r.feeding_thread,
        _ => true,
    }
}

/// The threads that spent the `cpu_bound` time: "main thread (tid 12)", or with shares
/// when several did ("main thread (tid 12) 80%, autograd thread (tid 13, ...) 20%").
pub(crate) fn who_computing(r: &HostReport) -> String {
    match r.computing_threads.as_slice() {
        [] => who(r),
        [one] => one.label.clone(),
        many => format!(
            "the launching threads ({})",
            many.iter()
                .take(3)
                .map(|x| format!("{} {:.0}%", x.label, x.pct))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The CPUs the job may use, rounded down to whole cores for advice ("3", or "the CPU
/// cores" when unknown).
pub(crate) fn cores_word(r: &HostReport) -> String {
    r.cpus_available
        .map(|c| format!("{}", c.floor().max(1.0)))
        .unwrap_or_else(|| "the CPU cores".into())
}

/// The note a process gets when its trace has no host samples and `data_starvation`
/// is reported (the finding the samples would split).
pub(crate) const NOT_MEASURED_NOTE: &str = "no host CPU samples in this trace: data_starvation counts idle time with no CUDA call whether the feeding thread was computing (cpu_bound) or blocked";
