//! The host side of the timeline, from the library's host samples (format 2.1): what
//! the thread that feeds the GPU was doing in each idle gap with no CUDA call, and what
//! the rest of the job (its threads, its children such as DataLoader workers) and the
//! machine were doing meanwhile.
//!
//! Counters are cumulative and sampled (a CUDA thread every few ms, the process tree
//! every 50-100 ms): the time a thread spent on a CPU inside [s, e) is the counter's
//! growth between the samples around it, spread evenly over each sampling interval
//! (exact for gaps that span whole intervals, an average for shorter ones). A stretch
//! not bracketed by samples close enough together is left unmeasured.
//!
//! A quiet stretch (no CUDA call on any thread while the GPU is idle) is split into:
//! * on a CPU, or runnable and waiting for one (run queue): `cpu_bound`, or
//!   `launch_bound` when the stretch is short ([`CPU_LAUNCH_NS`]: host overhead
//!   between back-to-back launches);
//! * off the CPU (sleeping, waiting on a queue, a lock or I/O): `data_starvation`,
//!   with the state letter telling I/O waits (`D`) apart.

use super::cause::Cause;
use crate::model::trace::Trace;
use gputrace_format::{self as fmt, CpuLimits};

/// A quiet stretch this short whose feeding thread was on a CPU is the host's cost of
/// issuing the next launch (Python and framework overhead between back-to-back
/// launches): `launch_bound`, not `cpu_bound`.
pub const CPU_LAUNCH_NS: u64 = 1_000_000;
/// Samples further apart than this (and 20 thread periods) leave the time between them
/// unmeasured (the sampler was stopped or starved).
const MAX_SAMPLE_GAP_NS: u64 = 100_000_000;
/// A process's samples further apart than this (and 5 tree periods) are not joined.
const MAX_TREE_GAP_NS: u64 = 2_000_000_000;

#[derive(Clone, Copy, Debug, Default)]
struct Pt {
    ts: u64,
    cpu: u64,
    wait: u64,
    state: u8,
    /// Run-queue wait placed in the interval that ends at this sample (see [`place_runq`]).
    rq: u64,
}

/// The sampler reads a thread's state letter only every few samples while it is off the
/// CPU: a letter stands for the following samples of the same off-CPU stretch (up to
/// [`STATE_CARRY`] of them), until the thread runs most of an interval again.
fn carry_states(pts: &mut [Pt]) {
    let mut last: Option<(u8, usize)> = None;
    for j in 1..pts.len() {
        let dt = pts[j].ts.saturating_sub(pts[j - 1].ts);
        let dc = pts[j].cpu.saturating_sub(pts[j - 1].cpu);
        if dc.saturating_mul(2) >= dt {
            last = None;
            continue;
        }
        if pts[j].state != fmt::STATE_UNKNOWN {
            last = Some((pts[j].state, j));
        } else if let Some((st, at)) = last {
            if j - at <= STATE_CARRY {
                pts[j].state = st;
            }
        }
    }
}

/// Samples a state letter stands for after it was read (the sampler reads one at most
/// every 8 thread periods).
const STATE_CARRY: usize = 8;

/// Places each thread's run-queue wait in time. The kernel adds a wait to the counter
/// only when the thread gets a CPU back, so a sample can show more waiting than its
/// interval had off-CPU time, the rest having happened in the intervals before. Each
/// interval's wait is given to its own off-CPU time first, then to the off-CPU time of
/// the intervals before it (at most 64 back, not across a break in the samples).
fn place_runq(pts: &mut [Pt], max_gap: u64) {
    let n = pts.len();
    let valid = |a: &Pt, b: &Pt| {
        let dt = b.ts.saturating_sub(a.ts);
        dt > 0 && dt <= max_gap && b.cpu >= a.cpu && b.wait >= a.wait
    };
    let mut room: Vec<u64> = vec![0; n];
    for j in 1..n {
        if valid(&pts[j - 1], &pts[j]) {
            let dt = pts[j].ts - pts[j - 1].ts;
            room[j] = dt - (pts[j].cpu - pts[j - 1].cpu).min(dt);
        }
    }
    for j in 1..n {
        if !valid(&pts[j - 1], &pts[j]) {
            continue;
        }
        let mut w = pts[j].wait - pts[j - 1].wait;
        let mut k = j;
        while w > 0 && k >= 1 && j - k < 64 {
            if k < j && !valid(&pts[k - 1], &pts[k]) {
                break;
            }
            let take = w.min(room[k]);
            room[k] -= take;
            pts[k].rq = pts[k].rq.saturating_add(take);
            w -= take;
            k -= 1;
        }
    }
}

#[derive(Clone, Debug)]
struct ThreadSeries {
    tid: u32,
    pts: Vec<Pt>,
}

#[derive(Clone, Copy, Debug, Default)]
struct PPt {
    ts: u64,
    cpu: u64,
    state: u8,
    rchar: u64,
    read_bytes: u64,
    io: bool,
}

/// One process (or thread of the traced process) over time.
#[derive(Clone, Debug)]
pub struct ProcSeries {
    pub pid: u32,
    pub ppid: u32,
    pub comm: u32,
    pts: Vec<PPt>,
}

#[derive(Clone, Copy, Debug, Default)]
struct MPt {
    ts: u64,
    busy: u64,
    idle: u64,
    iowait: u64,
    steal: u64,
    psi: bool,
    psi_cpu: u64,
    psi_io: u64,
}

/// How a stretch of time went for one thread.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Split {
    /// Time bracketed by samples.
    pub covered: u64,
    pub on_cpu: u64,
    /// Runnable, waiting for a CPU.
    pub runq: u64,
    /// Off the CPU in uninterruptible sleep (`D`: I/O, mostly).
    pub io: u64,
}

impl Split {
    pub fn off_cpu(&self) -> u64 {
        self.covered
            .saturating_sub(self.on_cpu.saturating_add(self.runq))
    }
}

/// The host samples of one trace, indexed for the idle analysis.
#[derive(Clone, Debug)]
pub struct HostCpu {
    threads: Vec<ThreadSeries>,
    /// The thread that issued most launches (the feeding thread when the work after a
    /// gap has no recorded call).
    pub feeder: Option<u32>,
    /// Every sampled thread that issued launches (the feeding thread first): PyTorch's
    /// backward runs on its own thread (`pt_autograd_0`), which launches while the main
    /// thread waits for it.
    pub feeders: Vec<u32>,
    pub pid: u32,
    /// Children and further descendants.
    pub procs: Vec<ProcSeries>,
    /// Threads of the traced process (the tracer's own left out).
    pub own: Vec<ProcSeries>,
    pub me: Option<ProcSeries>,
    machine: Vec<MPt>,
    pub limits: Option<CpuLimits>,
    max_gap: u64,
    /// The threads' sampling period (0 when not recorded).
    period_ns: u64,
    /// The GIL over time: (ts, holder tid, locked), time-sorted (format tag 40).
    gil: Vec<(u64, u32, bool)>,
    /// The system calls threads of the process were blocked in: (ts, tid, number),
    /// time-sorted (format tag 41, children left out).
    waits: Vec<(u64, u32, u32)>,
}

/// x86-64 system calls of a thread waiting on a pipe, socket or poll set: what a
/// process waiting for its DataLoader workers (or any other process) is in.
const PIPE_WAITS: [u32; 10] = [0, 7, 23, 270, 271, 232, 281, 441, 45, 47];

/// A blocked launching thread waited for another thread of the process from this share
/// of its blocked time on (the GIL held by another thread in this share of the samples,
/// or another thread on a CPU this share of the time).
pub const CONTENTION_SHARE: f64 = 0.5;
/// Another thread on a CPU for at least this share of a stretch is counted beside the
/// busiest one.
const OTHER_MIN_SHARE: f64 = 0.2;

fn gputrace_thread(t: &Trace, comm: u32) -> bool {
    t.str(comm).starts_with("gputrace-")
}

/// Each sampled thread's CPU samples, in time order, the threads sorted by tid.
fn thread_series(t: &Trace) -> Vec<ThreadSeries> {
    let mut threads: Vec<ThreadSeries> = Vec::new();
    // Samples are time-sorted: group by tid keeping the order.
    let mut tids: Vec<u32> = t.thread_cpu.iter().map(|x| x.tid).collect();
    tids.sort_unstable();
    tids.dedup();
    for tid in tids {
        threads.push(ThreadSeries {
            tid,
            pts: Vec::new(),
        });
    }
    for x in &t.thread_cpu {
        if let Ok(i) = threads.binary_search_by_key(&x.tid, |s| s.tid) {
            threads[i].pts.push(Pt {
                ts: x.ts,
                cpu: x.cpu_ns,
                wait: x.wait_ns,
                state: x.state,
                rq: 0,
            });
        }
    }
    threads
}

/// The process samples as series: descendants, own threads (not the tracer's), itself.
fn proc_series(t: &Trace) -> (Vec<ProcSeries>, Vec<ProcSeries>, Option<ProcSeries>) {
    let mut procs: Vec<ProcSeries> = Vec::new();
    let mut own: Vec<ProcSeries> = Vec::new();
    let mut me: Option<ProcSeries> = None;
    for x in &t.proc_samples {
        let thread = x.flags & fmt::PROC_FLAG_THREAD != 0;
        let is_self = x.flags & fmt::PROC_FLAG_SELF != 0;
        let pt = PPt {
            ts: x.ts,
            cpu: x.cpu_ns,
            state: x.state,
            rchar: x.rchar,
            read_bytes: x.read_bytes,
            io: x.flags & fmt::PROC_FLAG_NO_IO == 0,
        };
        let list = if is_self {
            let m = me.get_or_insert_with(|| ProcSeries {
                pid: x.pid,
                ppid: x.ppid,
                comm: x.comm,
                pts: Vec::new(),
            });
            m.pts.push(pt);
            continue;
        } else if thread {
            if gputrace_thread(t, x.comm) {
                continue;
            }
            &mut own
        } else {
            &mut procs
        };
        match list.iter_mut().find(|p| p.pid == x.pid) {
            Some(p) => {
                p.comm = x.comm;
                p.pts.push(pt)
            }
            None => list.push(ProcSeries {
                pid: x.pid,
                ppid: x.ppid,
                comm: x.comm,
                pts: vec![pt],
            }),
        }
    }
    (procs, own, me)
}

/// The sampled threads with 2% or more of the launches (most first), and the feeder.
fn feeding_threads(t: &Trace, threads: &[ThreadSeries]) -> (Vec<u32>, Option<u32>) {
    // The feeding thread: most launch calls (API events, else hook calls).
    let mut count: std::collections::HashMap<u32, u64> = Default::default();
    for a in &t.apis {
        if matches!(
            super::classify::api_kind(&a, t.str(a.name)),
            super::classify::ApiKind::Launch
        ) {
            *count.entry(a.tid).or_default() += 1;
        }
    }
    if count.is_empty() {
        for c in &t.host_calls {
            *count.entry(c.tid).or_default() += 1;
        }
    }
    let mut ranked: Vec<(u32, u64)> = count.into_iter().collect();
    ranked.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let total: u64 = ranked.iter().map(|x| x.1).sum();
    // Threads with at least 2% of the launches (a stray call from a helper thread
    // does not make it a feeding thread).
    let feeders: Vec<u32> = ranked
        .iter()
        .filter(|x| x.1.saturating_mul(50) >= total)
        .map(|x| x.0)
        .filter(|tid| threads.binary_search_by_key(tid, |s| s.tid).is_ok())
        .collect();
    let feeder = ranked
        .first()
        .map(|x| x.0)
        .or_else(|| threads.iter().find(|s| s.tid == t.meta.pid).map(|s| s.tid))
        .or_else(|| threads.first().map(|s| s.tid));
    (feeders, feeder)
}

impl HostCpu {
    /// `None` for a trace without host samples.
    pub fn new(t: &Trace) -> Option<HostCpu> {
        if !t.has_host_samples() {
            return None;
        }
        let mut threads = thread_series(t);
        let (procs, own, me) = proc_series(t);
        let machine = t
            .machine
            .iter()
            .map(|m| MPt {
                ts: m.ts,
                busy: m.busy_ns,
                idle: m.idle_ns,
                iowait: m.iowait_ns,
                steal: m.steal_ns,
                psi: m.flags & fmt::MACHINE_FLAG_PSI != 0,
                psi_cpu: m.psi_cpu_some_us,
                psi_io: m.psi_io_some_us,
            })
            .collect();
        let limits = t.cpu_limits.first().cloned();
        let period = limits
            .as_ref()
            .map(|l| l.thread_period_us as u64 * 1000)
            .unwrap_or(0);
        let (feeders, feeder) = feeding_threads(t, &threads);
        let max_gap = MAX_SAMPLE_GAP_NS.max(period.saturating_mul(20));
        for th in &mut threads {
            place_runq(&mut th.pts, max_gap);
            carry_states(&mut th.pts);
        }
        let gil = t
            .gil
            .iter()
            .map(|g| (g.ts, g.holder, g.locked != 0))
            .collect();
        let waits = t
            .task_waits
            .iter()
            .filter(|w| w.flags & fmt::TASK_WAIT_CHILD == 0)
            .map(|w| (w.ts, w.tid, w.syscall))
            .collect();
        Some(HostCpu {
            waits,
            threads,
            feeder,
            feeders,
            pid: t.meta.pid,
            procs,
            own,
            me,
            machine,
            limits,
            max_gap,
            period_ns: period,
            gil,
        })
    }

    /// Threads with CPU samples.
    pub fn threads_sampled(&self) -> usize {
        self.threads.len()
    }

    /// The sampled thread to read for `tid` (the feeding thread when `tid` has no samples).
    pub fn thread_for(&self, tid: Option<u32>) -> Option<u32> {
        match tid {
            Some(t) if self.threads.binary_search_by_key(&t, |s| s.tid).is_ok() => Some(t),
            _ => self
                .feeder
                .filter(|f| self.threads.binary_search_by_key(f, |s| s.tid).is_ok()),
        }
    }

    /// The wait samples of the process's threads taken in [s, e).
    fn waits_in(&self, s: u64, e: u64) -> impl Iterator<Item = &(u64, u32, u32)> {
        let lo = self.waits.partition_point(|w| w.0 < s);
        self.waits[lo..].iter().take_while(move |w| w.0 < e)
    }

    /// Was thread `tid`, off the CPU in `D` state over [s, e), in page faults rather
    /// than a system call? Its wait samples say so: more of them outside any system
    /// call (`SYSCALL_NONE`) than in one. A trace from before that mark has no wait
    /// sample at all then (a `-1` was not written): none over a stretch of several
    /// sampling periods, in which the sampler read the thread's system call twice at
    /// least, reads the same.
    pub fn in_page_faults(&self, tid: u32, s: u64, e: u64) -> bool {
        let (mut none, mut sys) = (0u32, 0u32);
        for w in self.waits_in(s, e) {
            if w.1 == tid {
                match w.2 {
                    fmt::SYSCALL_NONE => none += 1,
                    fmt::ENV_NA => {}
                    _ => sys += 1,
                }
            }
        }
        if none + sys > 0 {
            return none > sys;
        }
        self.period_ns > 0 && e.saturating_sub(s) >= self.period_ns.saturating_mul(6)
    }

    /// How thread `tid` spent [s, e).
    pub fn split(&self, tid: u32, s: u64, e: u64) -> Split {
        let mut out = Split::default();
        let Ok(i) = self.threads.binary_search_by_key(&tid, |x| x.tid) else {
            return out;
        };
        let pts = &self.threads[i].pts;
        if e <= s || pts.len() < 2 {
            return out;
        }
        // The interval [pts[j], pts[j+1]) holding s.
        let mut j = pts.partition_point(|p| p.ts <= s).saturating_sub(1);
        while j + 1 < pts.len() && pts[j].ts < e {
            let (a, b) = (pts[j], pts[j + 1]);
            j += 1;
            let dt = b.ts.saturating_sub(a.ts);
            if dt == 0 || dt > self.max_gap || b.cpu < a.cpu || b.wait < a.wait {
                continue;
            }
            let o = s.max(a.ts);
            let oe = e.min(b.ts);
            if oe <= o {
                continue;
            }
            let ov = oe - o;
            // Rates, capped at one CPU (a thread runs on one at a time).
            let dc = (b.cpu - a.cpu).min(dt);
            let dw = b.rq.min(dt - dc);
            let on = mul_div(dc, ov, dt);
            let rq = mul_div(dw, ov, dt);
            out.covered = out.covered.saturating_add(ov);
            out.on_cpu = out.on_cpu.saturating_add(on);
            out.runq = out.runq.saturating_add(rq);
            if b.state == b'D' {
                out.io = out
                    .io
                    .saturating_add(ov.saturating_sub(on.saturating_add(rq)));
            }
        }
        out
    }

    /// What the process tree and the machine did during `spans` (time-sorted,
    /// non-overlapping).
    pub fn tree(&self, t: &Trace, spans: &[(u64, u64)]) -> Tree {
        let total: u64 = spans
            .iter()
            .fold(0u64, |a, s| a.saturating_add(s.1.saturating_sub(s.0)));
        let mut out = Tree {
            span_ns: total,
            ..Default::default()
        };
        if total == 0 {
            return out;
        }
        for p in &self.procs {
            let u = usage(&p.pts, spans);
            if u.covered == 0 {
                continue;
            }
            out.children.push(ChildUse {
                pid: p.pid,
                ppid: p.ppid,
                comm: t.str(p.comm).to_string(),
                covered_ns: u.covered,
                cpu_ns: u.cpu,
                d_state_ns: u.d,
                r_state_ns: u.r,
                read_bytes: u.read_bytes,
                rchar: u.rchar,
            });
        }
        out.children
            .sort_by(|a, b| b.cpu_ns.cmp(&a.cpu_ns).then(a.pid.cmp(&b.pid)));
        if let Some(m) = &self.me {
            let u = usage(&m.pts, spans);
            out.main_cpu_ns = u.cpu;
            out.main_covered_ns = u.covered;
        }
        // The machine: shares of its CPU time.
        let (mut busy, mut all, mut iow, mut covered) = (0f64, 0f64, 0f64, 0u64);
        let (mut psi_cpu, mut psi_io, mut psi_cov) = (0f64, 0f64, 0u64);
        for &(s, e) in spans {
            for w in self.machine.windows(2) {
                let (a, b) = (w[0], w[1]);
                let dt = b.ts.saturating_sub(a.ts);
                if dt == 0 || dt > MAX_TREE_GAP_NS || b.busy < a.busy || b.idle < a.idle {
                    continue;
                }
                let ov = e.min(b.ts).saturating_sub(s.max(a.ts));
                if ov == 0 {
                    continue;
                }
                let f = ov as f64 / dt as f64;
                let db = (b.busy - a.busy) as f64;
                let di = (b.idle - a.idle) as f64;
                let dio = b.iowait.saturating_sub(a.iowait) as f64;
                let ds = b.steal.saturating_sub(a.steal) as f64;
                busy += db * f;
                iow += dio * f;
                all += (db + di + dio + ds) * f;
                covered = covered.saturating_add(ov);
                if a.psi && b.psi {
                    psi_cpu += b.psi_cpu.saturating_sub(a.psi_cpu) as f64 * 1e3 * f;
                    psi_io += b.psi_io.saturating_sub(a.psi_io) as f64 * 1e3 * f;
                    psi_cov = psi_cov.saturating_add(ov);
                }
            }
        }
        if covered > 0 && all > 0.0 {
            out.machine_busy_pct = Some(100.0 * busy / all);
            out.machine_iowait_pct = Some(100.0 * iow / all);
        }
        if psi_cov > 0 {
            out.psi_cpu_pct = Some((100.0 * psi_cpu / psi_cov as f64).min(100.0));
            out.psi_io_pct = Some((100.0 * psi_io / psi_cov as f64).min(100.0));
        }
        out
    }

    /// What else in the process held the host while the launching threads `feeding`
    /// were blocked for `blocked` ns of [s, e): when another thread held the GIL in at
    /// least [`CONTENTION_SHARE`] of the GIL samples of the stretch, its holders (shared by
    /// samples held); else, when another thread was on a CPU (or runnable) at least that
    /// share of the stretch, the threads busy at least [`OTHER_MIN_SHARE`] of it (shared by
    /// how busy each was). Each thread's ns is its part of `blocked`, all of it.
    pub fn contention(&self, feeding: &[u32], s: u64, e: u64, blocked: u64) -> Contention {
        let mut out = Contention::default();
        if blocked == 0 || e <= s {
            return out;
        }
        let lo = self.gil.partition_point(|g| g.0 < s);
        let hi = self.gil.partition_point(|g| g.0 < e);
        let samples = &self.gil[lo..hi];
        if !samples.is_empty() {
            let n = samples.len() as u64;
            let mut by: Vec<(u32, u64)> = Vec::new();
            for &(_, holder, locked) in samples {
                if !locked || holder == 0 || feeding.contains(&holder) {
                    continue;
                }
                match by.iter_mut().find(|x| x.0 == holder) {
                    Some(x) => x.1 += 1,
                    None => by.push((holder, 1)),
                }
            }
            let held: u64 = by.iter().map(|x| x.1).sum();
            if held as f64 >= n as f64 * CONTENTION_SHARE {
                // The stretch's blocked time is the wait for the GIL, shared by holder.
                out.gil = by
                    .into_iter()
                    .map(|(tid, k)| (tid, mul_div(blocked, k, held)))
                    .collect();
                return out;
            }
        }
        // Launching threads waiting on a pipe or poll set wait for another process (the
        // workers), whatever the threads of this one do meanwhile.
        let (mut pipe, mut all) = (0u32, 0u32);
        for w in self.waits_in(s, e) {
            if feeding.contains(&w.1) {
                all += 1;
                pipe += PIPE_WAITS.contains(&w.2) as u32;
            }
        }
        if all > 0 && pipe * 2 > all {
            return out;
        }
        let len = e - s;
        let mut others: Vec<(u32, f64)> = self
            .threads
            .iter()
            .filter(|x| !feeding.contains(&x.tid))
            .filter_map(|x| {
                let sp = self.split(x.tid, s, e);
                // On a CPU, or runnable and waiting for one: computing.
                (sp.covered * 2 >= len && sp.covered > 0).then(|| {
                    let busy = sp.on_cpu.saturating_add(sp.runq).min(sp.covered);
                    (x.tid, busy as f64 / sp.covered as f64)
                })
            })
            .filter(|x| x.1 >= OTHER_MIN_SHARE)
            .collect();
        others.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        if others.first().is_some_and(|x| x.1 >= CONTENTION_SHARE) {
            // The stretch's blocked time is the wait for them, shared by how busy each was
            // (a thread runnable but not on a CPU on a loaded machine still computes).
            let sum: f64 = others.iter().map(|x| x.1).sum();
            let mut left = blocked;
            for (tid, f) in others {
                let ns = ((blocked as f64 * f / sum) as u64).min(left);
                left -= ns;
                if ns > 0 {
                    out.cpu.push((tid, ns));
                }
            }
        }
        out
    }

    /// The thread ids with CPU samples that issued no launches.
    pub fn is_feeder(&self, tid: u32) -> bool {
        self.feeders.contains(&tid) || self.feeder == Some(tid)
    }

    pub fn cpus_available(&self) -> Option<f64> {
        self.limits
            .as_ref()
            .map(|l| l.cpus_available())
            .filter(|n| *n > 0.0)
    }
}

/// A thread's name as recorded (the library's thread names, else the `comm` of its
/// process-tree samples); "" when unknown.
pub fn thread_name<'a>(t: &'a Trace, h: Option<&HostCpu>, tid: u32) -> &'a str {
    let n = t.thread_name(tid);
    if !n.is_empty() {
        return n;
    }
    h.and_then(|h| h.own.iter().find(|p| p.pid == tid))
        .map(|p| t.str(p.comm))
        .unwrap_or("")
}

/// A thread of the traced process named by what it is: "main thread (tid N)",
/// "autograd thread (tid N)" (PyTorch's backward, `pt_autograd_*`), "DataLoader
/// pin-memory thread", else "thread N (name)".
pub fn thread_label(t: &Trace, h: Option<&HostCpu>, tid: u32) -> String {
    let name = thread_name(t, h, tid);
    let pid = h.map_or(t.meta.pid, |h| h.pid);
    role_label(tid, pid, name)
}

/// [`thread_label`] from its parts.
pub fn role_label(tid: u32, pid: u32, name: &str) -> String {
    if tid == pid && pid != 0 {
        return format!("main thread (tid {tid})");
    }
    if name.starts_with("pt_autograd") {
        return format!("autograd thread (tid {tid}, {name})");
    }
    if name.starts_with("pt_data_worker") {
        return format!("DataLoader worker (pid {tid})");
    }
    if name.is_empty() {
        format!("thread {tid}")
    } else {
        format!("thread {tid} ({name})")
    }
}

fn mul_div(a: u64, b: u64, c: u64) -> u64 {
    if c == 0 {
        0
    } else {
        ((a as u128 * b as u128) / c as u128) as u64
    }
}

#[derive(Default)]
struct Usage {
    covered: u64,
    cpu: u64,
    d: u64,
    r: u64,
    read_bytes: u64,
    rchar: u64,
}

/// A process's CPU time, D-state time and reads inside `spans`.
fn usage(pts: &[PPt], spans: &[(u64, u64)]) -> Usage {
    let mut u = Usage::default();
    if pts.len() < 2 {
        return u;
    }
    for &(s, e) in spans {
        let mut j = pts.partition_point(|p| p.ts <= s).saturating_sub(1);
        while j + 1 < pts.len() && pts[j].ts < e {
            let (a, b) = (pts[j], pts[j + 1]);
            j += 1;
            let dt = b.ts.saturating_sub(a.ts);
            if dt == 0 || dt > MAX_TREE_GAP_NS || b.cpu < a.cpu {
                continue;
            }
            let ov = e.min(b.ts).saturating_sub(s.max(a.ts));
            if ov == 0 {
                continue;
            }
            u.covered = u.covered.saturating_add(ov);
            u.cpu = u.cpu.saturating_add(mul_div(b.cpu - a.cpu, ov, dt));
            // A state letter seen at one end of the interval counts for half of it.
            let w = (a.state == b'D') as u64 + (b.state == b'D') as u64;
            u.d = u.d.saturating_add(ov / 2 * w);
            let w = (a.state == b'R') as u64 + (b.state == b'R') as u64;
            u.r = u.r.saturating_add(ov / 2 * w);
            if a.io && b.io {
                u.read_bytes = u.read_bytes.saturating_add(mul_div(
                    b.read_bytes.saturating_sub(a.read_bytes),
                    ov,
                    dt,
                ));
                u.rchar = u
                    .rchar
                    .saturating_add(mul_div(b.rchar.saturating_sub(a.rchar), ov, dt));
            }
        }
    }
    u
}

/// What held the host while the launching threads were blocked (see
/// [`HostCpu::contention`]): (tid, ns of the blocked time) for the GIL's holders, or
/// for the other threads on a CPU.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Contention {
    pub gil: Vec<(u32, u64)>,
    pub cpu: Vec<(u32, u64)>,
}

impl Contention {
    pub fn total(&self) -> u64 {
        self.gil
            .iter()
            .chain(self.cpu.iter())
            .fold(0u64, |a, x| a.saturating_add(x.1))
    }
}

/// One child process during some spans.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChildUse {
    pub pid: u32,
    pub ppid: u32,
    pub comm: String,
    /// Time inside the spans that its samples cover (it was alive and sampled).
    pub covered_ns: u64,
    pub cpu_ns: u64,
    pub d_state_ns: u64,
    /// Time in `R` state (running, or runnable and waiting for a CPU).
    pub r_state_ns: u64,
    pub read_bytes: u64,
    pub rchar: u64,
}

impl ChildUse {
    /// Share of one CPU it used while alive in the spans, %.
    pub fn cpu_pct(&self) -> f64 {
        super::units::pct(self.cpu_ns, self.covered_ns)
    }
}

/// The process tree and the machine during some spans.
#[derive(Clone, Debug, Default)]
pub struct Tree {
    pub span_ns: u64,
    pub children: Vec<ChildUse>,
    pub main_cpu_ns: u64,
    pub main_covered_ns: u64,
    pub machine_busy_pct: Option<f64>,
    pub machine_iowait_pct: Option<f64>,
    pub psi_cpu_pct: Option<f64>,
    pub psi_io_pct: Option<f64>,
}

/// Children that stand for input workers: DataLoader workers by name when there are
/// any (PyTorch names them `pt_data_worker`), else every child alive in the spans.
pub fn workers(tree: &Tree) -> Vec<&ChildUse> {
    let named: Vec<&ChildUse> = tree
        .children
        .iter()
        .filter(|c| c.comm.starts_with("pt_data_worker"))
        .collect();
    if !named.is_empty() {
        return named;
    }
    tree.children.iter().collect()
}

// ---------------------------------------------------------------------------------
// The split of quiet idle time, accumulated by the idle pass.

/// Idle time with no CUDA call, as the feeding thread spent it (one device's window).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostSplit {
    /// Quiet idle time the samples measured, and that they did not.
    pub measured_ns: u64,
    pub unmeasured_ns: u64,
    /// On a CPU, and runnable waiting for one, in long stretches (`cpu_bound`).
    pub on_cpu_ns: u64,
    pub runq_ns: u64,
    /// On a CPU (or waiting for one) in short stretches between launches (`launch_bound`).
    pub short_ns: u64,
    /// Off the CPU (`data_starvation`), of which in `D` state.
    pub blocked_ns: u64,
    pub io_ns: u64,
    /// Off the CPU in `D` state outside any system call: page faults, paging in code or
    /// a mapped file (`cpu_bound`: the thread was running its own code).
    pub fault_ns: u64,
    /// Quiet stretches charged mostly to blocked time, and to CPU time (for the
    /// process tree's picture; time-sorted within one device).
    pub blocked_spans: Vec<(u64, u64)>,
    pub cpu_spans: Vec<(u64, u64)>,
    /// CPU time in long stretches: gaps over 5 ms, and their number.
    pub long_cpu_ns: u64,
    pub cpu_gaps: u64,
    /// The `cpu_bound` time (on a CPU and runnable, long stretches) by the thread that
    /// spent it: each launching thread's own share, never one thread's name on the
    /// others' time.
    pub cpu_by_thread: std::collections::BTreeMap<u32, u64>,
    /// Blocked time the launching threads spent waiting for another thread of the
    /// process (charged to `cpu_bound`: the process was computing): for the GIL, by
    /// its holder; for another thread on a CPU, by that thread.
    pub gil_by_thread: std::collections::BTreeMap<u32, u64>,
    pub other_by_thread: std::collections::BTreeMap<u32, u64>,
    /// The stretches charged mostly to such waits.
    pub contention_spans: Vec<(u64, u64)>,
}

impl HostSplit {
    /// Blocked time charged to other threads of the process.
    pub fn contention_ns(&self) -> u64 {
        self.gil_by_thread
            .values()
            .chain(self.other_by_thread.values())
            .fold(0u64, |a, v| a.saturating_add(*v))
    }

    pub fn merge(&mut self, o: &HostSplit) {
        self.measured_ns = self.measured_ns.saturating_add(o.measured_ns);
        self.unmeasured_ns = self.unmeasured_ns.saturating_add(o.unmeasured_ns);
        self.on_cpu_ns = self.on_cpu_ns.saturating_add(o.on_cpu_ns);
        self.runq_ns = self.runq_ns.saturating_add(o.runq_ns);
        self.short_ns = self.short_ns.saturating_add(o.short_ns);
        self.blocked_ns = self.blocked_ns.saturating_add(o.blocked_ns);
        self.io_ns = self.io_ns.saturating_add(o.io_ns);
        self.fault_ns = self.fault_ns.saturating_add(o.fault_ns);
        self.long_cpu_ns = self.long_cpu_ns.saturating_add(o.long_cpu_ns);
        self.cpu_gaps = self.cpu_gaps.saturating_add(o.cpu_gaps);
        for (mine, theirs) in [
            (&mut self.cpu_by_thread, &o.cpu_by_thread),
            (&mut self.gil_by_thread, &o.gil_by_thread),
            (&mut self.other_by_thread, &o.other_by_thread),
        ] {
            for (&tid, &ns) in theirs {
                let v = mine.entry(tid).or_default();
                *v = v.saturating_add(ns);
            }
        }
        self.contention_spans.extend_from_slice(&o.contention_spans);
        self.blocked_spans.extend_from_slice(&o.blocked_spans);
        self.cpu_spans.extend_from_slice(&o.cpu_spans);
    }

    /// Spans sorted and merged (several devices' passes overlap).
    pub fn merged(spans: &[(u64, u64)]) -> Vec<(u64, u64)> {
        let mut v = spans.to_vec();
        v.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
        for (s, e) in v {
            match out.last_mut() {
                Some(l) if s <= l.1 => l.1 = l.1.max(e),
                _ => out.push((s, e)),
            }
        }
        out
    }
}

/// Splits a quiet stretch [s, e) of a gap (no CUDA call on any thread; charged to
/// `data_starvation` before this) by what thread `tid` was doing. `quiet_ns`: the length
/// of the whole quiet stretch on the host. `launch_gap`: the GPU's gap is short enough
/// to be launch overhead ([`super::idle::LaunchGap`]); when it is not, CPU time is
/// `cpu_bound` however short the quiet stretch. Pushes the pieces (contiguous: CPU time
/// first) and adds to `acc`.
pub fn split_quiet(
    h: &HostCpu,
    tid: Option<u32>,
    (s, e): (u64, u64),
    quiet_ns: u64,
    launch_gap: bool,
    out: &mut Vec<(u64, u64, Cause)>,
    acc: &mut HostSplit,
) {
    let len = e.saturating_sub(s);
    // Host overhead between back-to-back launches, not host work.
    let short = launch_gap && quiet_ns <= CPU_LAUNCH_NS;
    let first = h.thread_for(tid);
    // Each launching thread's own split: a thread blocked while another launching
    // thread runs (the main thread waiting for the autograd thread) is the host
    // computing, not waiting for input, and the CPU time is the running thread's.
    let mut parts: Vec<(u32, Split)> = Vec::with_capacity(1 + h.feeders.len());
    if let Some(t) = first {
        parts.push((t, h.split(t, s, e)));
    }
    for &f in h.feeders.iter().filter(|&&f| Some(f) != first) {
        parts.push((f, h.split(f, s, e)));
    }
    let mut sp = Split::default();
    for (_, o) in &parts {
        sp.covered = sp.covered.max(o.covered);
        sp.on_cpu = sp.on_cpu.saturating_add(o.on_cpu);
        sp.runq = sp.runq.saturating_add(o.runq);
    }
    // I/O is read off the thread the stretch is charged to.
    sp.io = parts.first().map_or(0, |p| p.1.io);
    let covered = sp.covered.min(len);
    let cpu = sp.on_cpu.saturating_add(sp.runq).min(covered);
    let blocked = covered - cpu;
    acc.measured_ns = acc.measured_ns.saturating_add(covered);
    acc.unmeasured_ns = acc.unmeasured_ns.saturating_add(len - covered);
    let mut p = s;
    if cpu > 0 {
        if short {
            acc.short_ns = acc.short_ns.saturating_add(cpu);
            out.push((p, p + cpu, Cause::LaunchBound));
        } else {
            let runq = sp.runq.min(cpu);
            acc.on_cpu_ns = acc.on_cpu_ns.saturating_add(cpu - runq);
            acc.runq_ns = acc.runq_ns.saturating_add(runq);
            if len >= 5_000_000 {
                acc.long_cpu_ns = acc.long_cpu_ns.saturating_add(cpu);
            }
            // Shared out by each thread's own time (the sum is capped at the stretch).
            let raw = sp.on_cpu.saturating_add(sp.runq);
            for (t, o) in &parts {
                let mine = mul_div(o.on_cpu.saturating_add(o.runq), cpu, raw);
                if mine > 0 {
                    let v = acc.cpu_by_thread.entry(*t).or_default();
                    *v = v.saturating_add(mine);
                }
            }
            out.push((p, p + cpu, Cause::CpuBound));
        }
        p += cpu;
    }
    // Blocked, waiting for another thread of the process (the GIL, a thread on a
    // CPU): the process was computing, so `cpu_bound`, never `data_starvation`.
    let mut waited = 0;
    if blocked > 0 && !short {
        let mut feeding: Vec<u32> = parts.iter().map(|x| x.0).collect();
        feeding.extend(h.feeders.iter().copied());
        let c = h.contention(&feeding, s, e, blocked);
        waited = c.total().min(blocked).min(e.saturating_sub(p));
        if waited > 0 {
            for (map, list) in [
                (&mut acc.gil_by_thread, &c.gil),
                (&mut acc.other_by_thread, &c.cpu),
            ] {
                for &(tid, ns) in list {
                    let v = map.entry(tid).or_default();
                    *v = v.saturating_add(ns);
                }
            }
            out.push((p, p + waited, Cause::CpuBound));
            p += waited;
            if waited * 2 >= blocked {
                acc.contention_spans.push((s, e));
            }
        }
    }
    // Blocked in `D` state outside any system call: page faults (code or a mapped file
    // read from disk on first use). The thread was running its own code, not waiting
    // for input: `cpu_bound`.
    let mut io = sp.io.min(blocked - waited);
    let mut fault = 0;
    if io > 0 && !short {
        if let Some(&(t, _)) = parts.first() {
            if h.in_page_faults(t, s, e) {
                fault = io.min(e.saturating_sub(p));
                io -= fault;
                acc.fault_ns = acc.fault_ns.saturating_add(fault);
                let v = acc.cpu_by_thread.entry(t).or_default();
                *v = v.saturating_add(fault);
                out.push((p, p + fault, Cause::CpuBound));
                p += fault;
            }
        }
    }
    if e > p {
        out.push((p, e, Cause::DataStarvation));
    }
    let blocked = blocked - waited - fault;
    acc.blocked_ns = acc.blocked_ns.saturating_add(blocked);
    acc.io_ns = acc.io_ns.saturating_add(io.min(blocked));
    if covered > 0 {
        if blocked >= covered - blocked {
            acc.blocked_spans.push((s, e));
        } else if !short {
            acc.cpu_spans.push((s, e));
            acc.cpu_gaps += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputrace_format::{Event, Meta, ThreadCpu};

    const MS: u64 = 1_000_000;

    fn thread_trace(samples: &[(u64, u64, u64, u8)]) -> Trace {
        let evs = samples.iter().map(|&(ts, cpu, wait, state)| {
            Event::ThreadCpu(ThreadCpu {
                ts,
                tid: 7,
                cpu_ns: cpu,
                wait_ns: wait,
                slices: 0,
                state,
            })
        });
        Trace::from_events(
            Meta {
                pid: 7,
                ..Default::default()
            },
            evs,
        )
    }

    #[test]
    fn split_interpolates_between_samples() {
        // 0-10 ms on a CPU all the time; 10-20 ms off it (sleeping); 20-30 ms half and half.
        let t = thread_trace(&[
            (0, 0, 0, 0),
            (10 * MS, 10 * MS, 0, 0),
            (20 * MS, 10 * MS, 0, b'S'),
            (30 * MS, 15 * MS, 2 * MS, 0),
        ]);
        let h = HostCpu::new(&t).unwrap();
        assert_eq!(h.feeder, Some(7));
        let sp = h.split(7, 5 * MS, 25 * MS);
        assert_eq!(sp.covered, 20 * MS);
        assert_eq!(sp.on_cpu, 5 * MS + 5 * MS / 2);
        assert_eq!(sp.runq, MS);
        assert_eq!(sp.io, 0);
        // Outside the samples: nothing measured.
        assert_eq!(h.split(7, 40 * MS, 50 * MS).covered, 0);
        assert_eq!(h.split(8, 0, 10 * MS), Split::default());
    }

    #[test]
    fn run_queue_wait_reported_late_is_placed_where_it_happened() {
        // 0-10 ms waiting for a CPU (the counter does not move), 10-12 ms running (the
        // 10 ms of waiting appear now), 12-20 ms asleep.
        let t = thread_trace(&[
            (0, 0, 0, 0),
            (10 * MS, 0, 0, b'R'),
            (12 * MS, 2 * MS, 10 * MS, 0),
            (20 * MS, 2 * MS, 10 * MS, b'S'),
        ]);
        let h = HostCpu::new(&t).unwrap();
        let sp = h.split(7, 0, 10 * MS);
        assert_eq!((sp.on_cpu, sp.runq), (0, 10 * MS));
        let sp = h.split(7, 10 * MS, 20 * MS);
        assert_eq!((sp.on_cpu, sp.runq), (2 * MS, 0));
    }

    #[test]
    fn a_state_letter_carries_over_the_samples_that_did_not_read_one() {
        let t = thread_trace(&[
            (0, 0, 0, 0),
            (3 * MS, 0, 0, b'D'),
            (6 * MS, 0, 0, 0),
            (9 * MS, 0, 0, 0),
            // Ran: the letter no longer holds.
            (12 * MS, 3 * MS, 0, 0),
            (15 * MS, 3 * MS, 0, 0),
        ]);
        let h = HostCpu::new(&t).unwrap();
        assert_eq!(h.split(7, 0, 9 * MS).io, 9 * MS);
        assert_eq!(h.split(7, 12 * MS, 15 * MS).io, 0);
    }

    #[test]
    fn d_state_marks_io_and_long_sample_gaps_are_unmeasured() {
        let t = thread_trace(&[
            (0, 0, 0, 0),
            (10 * MS, MS, 0, b'D'),
            (500 * MS, 2 * MS, 0, b'S'),
        ]);
        let h = HostCpu::new(&t).unwrap();
        let sp = h.split(7, 0, 500 * MS);
        assert_eq!(sp.covered, 10 * MS);
        assert_eq!(sp.on_cpu, MS);
        assert_eq!(sp.io, 9 * MS);
    }

    /// Thread 7 in `D` state through 0-40 ms, with these wait samples (ts, system call)
    /// and the sampler's thread period (us).
    fn faulting_trace(waits: &[(u64, u32)], period_us: u32) -> Trace {
        let mut evs = vec![
            Event::CpuLimits(gputrace_format::CpuLimits {
                thread_period_us: period_us,
                ..Default::default()
            }),
            Event::ThreadCpu(ThreadCpu {
                tid: 7,
                ..Default::default()
            }),
            Event::ThreadCpu(ThreadCpu {
                ts: 40 * MS,
                tid: 7,
                state: b'D',
                ..Default::default()
            }),
        ];
        evs.extend(waits.iter().map(|&(ts, syscall)| {
            Event::TaskWait(gputrace_format::TaskWait {
                ts,
                tid: 7,
                syscall,
                state: 0,
                flags: 0,
            })
        }));
        Trace::from_events(
            Meta {
                pid: 7,
                ..Default::default()
            },
            evs,
        )
    }

    /// The causes `split_quiet` gives the quiet stretch 0-40 ms of `t`, and the split.
    fn quiet_0_40(t: &Trace) -> (Vec<(u64, u64, Cause)>, HostSplit) {
        let h = HostCpu::new(t).unwrap();
        let mut out = vec![];
        let mut acc = HostSplit::default();
        split_quiet(&h, Some(7), (0, 40 * MS), 40 * MS, true, &mut out, &mut acc);
        (out, acc)
    }

    #[test]
    fn page_faults_are_the_thread_computing_and_reads_are_waiting_for_input() {
        const NONE: u32 = gputrace_format::SYSCALL_NONE;
        // Blocked outside any system call: page faults, charged to cpu_bound.
        let (out, acc) = quiet_0_40(&faulting_trace(
            &[(6 * MS, NONE), (12 * MS, NONE), (18 * MS, 0)],
            3000,
        ));
        assert_eq!(out, vec![(0, 40 * MS, Cause::CpuBound)]);
        assert_eq!((acc.fault_ns, acc.blocked_ns, acc.io_ns), (40 * MS, 0, 0));
        assert_eq!(acc.cpu_by_thread.get(&7), Some(&(40 * MS)));
        // Blocked in read(2) mostly: storage, waiting for input.
        let (out, acc) = quiet_0_40(&faulting_trace(
            &[(6 * MS, 0), (12 * MS, 0), (18 * MS, NONE)],
            3000,
        ));
        assert_eq!(out, vec![(0, 40 * MS, Cause::DataStarvation)]);
        assert_eq!(
            (acc.fault_ns, acc.blocked_ns, acc.io_ns),
            (0, 40 * MS, 40 * MS)
        );
        // A trace from before the mark: no wait sample over 13 periods reads as page
        // faults; with a period too long to have read the system call twice, not.
        let (out, _) = quiet_0_40(&faulting_trace(&[], 3000));
        assert_eq!(out[0].2, Cause::CpuBound);
        let (out, acc) = quiet_0_40(&faulting_trace(&[], 10_000));
        assert_eq!(out, vec![(0, 40 * MS, Cause::DataStarvation)]);
        assert_eq!(acc.fault_ns, 0);
    }

    #[test]
    fn quiet_stretches_split_into_cpu_and_blocked_pieces() {
        let t = thread_trace(&[(0, 0, 0, 0), (100 * MS, 25 * MS, 5 * MS, b'S')]);
        let h = HostCpu::new(&t).unwrap();
        let mut out = vec![];
        let mut acc = HostSplit::default();
        split_quiet(
            &h,
            Some(7),
            (10 * MS, 50 * MS),
            40 * MS,
            true,
            &mut out,
            &mut acc,
        );
        // 25% on a CPU, 5% waiting for one: 12 ms of 40.
        assert_eq!(
            out,
            vec![
                (10 * MS, 22 * MS, Cause::CpuBound),
                (22 * MS, 50 * MS, Cause::DataStarvation)
            ]
        );
        assert_eq!(acc.on_cpu_ns, 10 * MS);
        assert_eq!(acc.runq_ns, 2 * MS);
        assert_eq!(acc.blocked_ns, 28 * MS);
        assert_eq!(acc.blocked_spans, vec![(10 * MS, 50 * MS)]);
        // A short quiet stretch: its CPU time is launch overhead.
        out.clear();
        split_quiet(
            &h,
            Some(7),
            (60 * MS, 60 * MS + 400_000),
            400_000,
            true,
            &mut out,
            &mut acc,
        );
        assert_eq!(out[0].2, Cause::LaunchBound);
        assert_eq!(acc.short_ns, 120_000);
        // The same stretch in a GPU gap too long to be a launch's: host work.
        out.clear();
        let mut acc2 = HostSplit::default();
        split_quiet(
            &h,
            Some(7),
            (60 * MS, 60 * MS + 400_000),
            400_000,
            false,
            &mut out,
            &mut acc2,
        );
        assert_eq!(out[0], (60 * MS, 60 * MS + 120_000, Cause::CpuBound));
        assert_eq!((acc2.short_ns, acc2.on_cpu_ns), (0, 100_000));
        // Not sampled there: all stays data_starvation, unmeasured.
        out.clear();
        split_quiet(
            &h,
            Some(7),
            (200 * MS, 210 * MS),
            10 * MS,
            true,
            &mut out,
            &mut acc,
        );
        assert_eq!(out, vec![(200 * MS, 210 * MS, Cause::DataStarvation)]);
        assert_eq!(acc.unmeasured_ns, 10 * MS);
    }
}
