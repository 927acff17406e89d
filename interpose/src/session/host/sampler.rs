//! One reading of the host: [`Sampler::thread_pass`] (the threads that issue CUDA work,
//! and the main thread: schedstat, and the state letter while mostly off the CPU),
//! [`Sampler::tree_pass`] (this process, its threads, its children and theirs, the
//! machine's CPU, I/O-wait, PSI and cgroup counters) and [`Sampler::limits`] (the CPUs
//! and memory the job may use). Files stay open and are read again with `pread` into
//! one buffer, directories are listed with `getdents64`: nothing is allocated per
//! sample once the set of threads and processes is known.

use super::procfs::{self, ProcDir, ProcFile};
use super::queue::{self, Comm, Sample};
use crate::base::clock;
use crate::base::opts::HostSettings;
use crate::rings;
use gputrace_format::{
    self as fmt, CpuLimits, GilSample, MachineSample, ProcSample, TaskWait, ThreadCpu,
};
use std::io::Write;

/// A CUDA-issuing thread (or the main thread), read every thread period.
struct Fed {
    tid: u32,
    schedstat: ProcFile,
    stat: Option<ProcFile>,
    last_cpu: u64,
    last_ts: u64,
    /// Passes since its state letter was last read.
    since_state: u8,
    syscall: Option<ProcFile>,
    /// Passes since its system call was last read.
    since_wait: u8,
    seen: bool,
}

/// A thread's `stat` (for its state letter) costs several times its `schedstat` (4-13 us
/// against 1.1-1.3 us measured here, the more when the thread is running): read it at
/// most every this many passes, and only while the thread spends most of its time off
/// the CPU (the letter tells I/O waits from sleeps). The analyzer carries a letter over
/// the passes in between (host.rs).
const STATE_EVERY: u8 = 8;

/// A thread of this process, read every tree period (and every thread period while a
/// CUDA-issuing thread is blocked, [`Sampler::others_pass`]).
struct Own {
    tid: u32,
    schedstat: ProcFile,
    children: Option<ProcFile>,
    comm: Comm,
    /// Its `comm`, read again while the thread is young (a thread names itself just
    /// after it starts: `pt_autograd_0`, a runtime's workers).
    comm_file: Option<ProcFile>,
    passes: u8,
    syscall: Option<ProcFile>,
    last_cpu: u64,
    last_ts: u64,
    since_wait: u8,
    /// One of the library's own threads (`gputrace-*`): not sampled finely.
    ours: bool,
    seen: bool,
}

/// While a CUDA-issuing thread is blocked: the system call of another thread off the CPU
/// is read at most every this many passes (of a CUDA-issuing thread, every
/// [`FED_WAIT_EVERY`]).
const WAIT_EVERY: u8 = 8;
const FED_WAIT_EVERY: u8 = 2;

/// The system call of a thread or process blocked in one (`/proc/.../syscall`: its
/// number, or `running`).
fn read_syscall(f: &ProcFile, buf: &mut [u8]) -> u32 {
    f.read(buf)
        .and_then(procfs::parse_syscall)
        .unwrap_or(fmt::ENV_NA)
}

/// The system call a thread (or child process) off the CPU is in, as a wait sample with
/// its state letter and flags; none while it runs or when unreadable.
fn wait_sample(
    sc: &ProcFile,
    buf: &mut [u8],
    tid: u32,
    ts: u64,
    state: u8,
    flags: u8,
) -> Option<Sample> {
    let nr = read_syscall(sc, buf);
    (nr != fmt::ENV_NA).then_some(Sample::Wait(TaskWait {
        ts,
        tid,
        syscall: nr,
        state,
        flags,
    }))
}

/// A process in this process's tree.
struct Proc {
    pid: u32,
    depth: u8,
    stat: ProcFile,
    io: Option<ProcFile>,
    children: Option<ProcFile>,
    syscall: Option<ProcFile>,
    seen: bool,
}

/// Most threads of this process and processes of its tree followed (a bound on the
/// files kept open and the work per pass).
const MAX_OWN: usize = 256;
const MAX_PROCS: usize = 256;
/// Generations of children followed (workers of a forkserver are grandchildren).
const MAX_DEPTH: u8 = 4;

/// The sampler's state: open files, reused buffers, the batch for the writer.
pub struct Sampler {
    s: HostSettings,
    pid: u32,
    tick_ns: u64,
    buf: Box<[u8]>,
    dirbuf: Box<[u8]>,
    path: Vec<u8>,
    tids: Vec<u32>,
    kids: Vec<(u32, u8)>,
    fed: Vec<Fed>,
    own: Vec<Own>,
    procs: Vec<Proc>,
    task_dir: Option<ProcDir>,
    self_stat: Option<ProcFile>,
    self_io: Option<ProcFile>,
    proc_stat: Option<ProcFile>,
    /// A CUDA-issuing thread was mostly off the CPU in the last thread pass.
    blocked: bool,
    psi_cpu: Option<ProcFile>,
    psi_io: Option<ProcFile>,
    cg_cpu_stat: Option<ProcFile>,
    batch: Vec<Sample>,
}

impl Sampler {
    pub fn new(s: HostSettings) -> Sampler {
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let hz = if hz > 0 { hz as u64 } else { 100 };
        let mut path = Vec::with_capacity(128);
        let cg = cgroup_dir(&mut path);
        let cg_cpu_stat = cg.as_ref().and_then(|d| {
            let mut p = d.clone();
            p.extend_from_slice(b"/cpu.stat");
            ProcFile::open_fmt(&mut path, |v| v.extend_from_slice(&p))
        });
        Sampler {
            s,
            pid: std::process::id(),
            tick_ns: 1_000_000_000 / hz,
            buf: vec![0u8; 4096].into_boxed_slice(),
            dirbuf: vec![0u8; 8192].into_boxed_slice(),
            path,
            tids: Vec::with_capacity(64),
            kids: Vec::with_capacity(64),
            fed: Vec::with_capacity(8),
            own: Vec::with_capacity(64),
            procs: Vec::with_capacity(32),
            task_dir: ProcDir::open(c"/proc/self/task"),
            self_stat: ProcFile::open(c"/proc/self/stat"),
            self_io: ProcFile::open(c"/proc/self/io"),
            proc_stat: ProcFile::open(c"/proc/stat"),
            blocked: false,
            psi_cpu: ProcFile::open(c"/proc/pressure/cpu"),
            psi_io: ProcFile::open(c"/proc/pressure/io"),
            cg_cpu_stat,
            batch: Vec::with_capacity(1024),
        }
    }

    /// Queues the batch for the writer.
    pub fn flush(&mut self) {
        queue::put(&mut self.batch);
    }

    /// Takes the batch (benchmarks and tests, instead of [`Sampler::flush`]).
    pub fn take_batch(&mut self, out: &mut Vec<Sample>) {
        out.append(&mut self.batch);
    }

    /// The CPU limits, once.
    pub fn limits(&mut self) {
        // SAFETY: sysconf has no preconditions.
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(0) as u32;
        let affinity = affinity_count();
        let (quota, period, mem) = cgroup_limits(&mut self.path, &mut self.buf);
        self.batch.push(Sample::Limits(CpuLimits {
            ts: clock::now_ns(),
            online_cpus: online,
            affinity_cpus: affinity,
            quota_us: quota,
            period_us: period,
            memory_limit: mem,
            thread_period_us: self.s.thread_period.as_micros() as u32,
            tree_period_us: self.s.tree_period.as_micros() as u32,
        }));
    }

    /// One reading of the CUDA-issuing threads and the main thread; while one of them is
    /// blocked, of every other thread of the process and of the GIL too.
    pub fn thread_pass(&mut self) {
        self.fed_pass();
        if self.s.all_threads && self.blocked {
            self.others_pass();
            self.gil_sample();
        }
    }

    /// Was a CUDA-issuing thread mostly off the CPU in the last pass?
    pub fn blocked(&self) -> bool {
        self.blocked
    }

    fn fed_pass(&mut self) {
        let Sampler {
            pid,
            buf,
            path,
            tids,
            fed,
            batch,
            blocked,
            ..
        } = self;
        *blocked = false;
        tids.clear();
        tids.push(*pid);
        rings::owner_tids(tids);
        tids.sort_unstable();
        tids.dedup();
        for f in fed.iter_mut() {
            f.seen = tids.binary_search(&f.tid).is_ok();
        }
        for &tid in tids.iter() {
            if fed.iter().any(|f| f.tid == tid) || fed.len() >= 64 {
                continue;
            }
            let Some(schedstat) = ProcFile::open_fmt(path, |v| {
                let _ = write!(v, "/proc/self/task/{tid}/schedstat");
            }) else {
                continue;
            };
            let stat = ProcFile::open_fmt(path, |v| {
                let _ = write!(v, "/proc/self/task/{tid}/stat");
            });
            let syscall = ProcFile::open_fmt(path, |v| {
                let _ = write!(v, "/proc/self/task/{tid}/syscall");
            });
            fed.push(Fed {
                tid,
                schedstat,
                stat,
                last_cpu: 0,
                last_ts: 0,
                since_state: STATE_EVERY,
                syscall,
                since_wait: FED_WAIT_EVERY,
                seen: true,
            });
        }
        fed.retain_mut(|f| {
            if !f.seen {
                return false;
            }
            let Some((stale_cpu, wait, slices)) =
                f.schedstat.read(buf).and_then(procfs::parse_schedstat)
            else {
                return false;
            };
            // schedstat's CPU time is only brought up to date at the scheduler's tick (4 ms
            // at HZ=250) while the thread runs: read at 3 ms, a running thread looked
            // blocked one pass in four. The thread's CPU clock is exact.
            let cpu = procfs::thread_cpu_ns(f.tid).unwrap_or(stale_cpu);
            let ts = clock::now_ns();
            // The state letter matters when the thread was mostly off the CPU.
            let off = f.last_ts == 0
                || cpu.saturating_sub(f.last_cpu).saturating_mul(4) < ts.saturating_sub(f.last_ts);
            if off && f.last_ts != 0 {
                *blocked = true;
            }
            f.since_wait = f.since_wait.saturating_add(1);
            if off && f.since_wait >= FED_WAIT_EVERY {
                if let Some(sc) = &f.syscall {
                    f.since_wait = 0;
                    batch.extend(wait_sample(sc, buf, f.tid, ts, fmt::STATE_UNKNOWN, 0));
                }
            }
            f.since_state = f.since_state.saturating_add(1);
            let state = match (&f.stat, off && f.since_state >= STATE_EVERY) {
                (Some(st), true) => {
                    f.since_state = 0;
                    st.read(buf)
                        .and_then(procfs::stat_state)
                        .unwrap_or(fmt::STATE_UNKNOWN)
                }
                _ => fmt::STATE_UNKNOWN,
            };
            f.last_cpu = cpu;
            f.last_ts = ts;
            batch.push(Sample::Thread(ThreadCpu {
                ts,
                tid: f.tid,
                cpu_ns: cpu,
                wait_ns: wait,
                slices,
                state,
            }));
            true
        });
    }

    /// Every other thread of the process (those the last tree pass listed, the library's
    /// own left out): its `schedstat` (one `pread`), and every [`WAIT_EVERY`] passes the
    /// system call of one that stayed off the CPU.
    fn others_pass(&mut self) {
        let Sampler {
            buf,
            fed,
            own,
            batch,
            ..
        } = self;
        let ts = clock::now_ns();
        for o in own.iter_mut() {
            if o.ours || fed.iter().any(|f| f.tid == o.tid) {
                continue;
            }
            // schedstat: CPU time and run-queue wait in one read (its CPU time is
            // brought up to date at the scheduler's tick: rates over a stretch of several
            // samples are what the analysis takes of it).
            let Some((cpu, wait, slices)) = o.schedstat.read(buf).and_then(procfs::parse_schedstat)
            else {
                continue;
            };
            let off = o.last_ts != 0
                && cpu.saturating_sub(o.last_cpu).saturating_mul(4) < ts.saturating_sub(o.last_ts);
            // A gap since the last fine reading (the pass was not run): not "off".
            let fresh = ts.saturating_sub(o.last_ts) < 50_000_000;
            o.last_cpu = cpu;
            o.last_ts = ts;
            batch.push(Sample::Thread(ThreadCpu {
                ts,
                tid: o.tid,
                cpu_ns: cpu,
                wait_ns: wait,
                slices,
                state: fmt::STATE_UNKNOWN,
            }));
            o.since_wait = o.since_wait.saturating_add(1);
            if off && fresh && o.since_wait >= WAIT_EVERY {
                if let Some(sc) = &o.syscall {
                    o.since_wait = 0;
                    batch.extend(wait_sample(sc, buf, o.tid, ts, fmt::STATE_UNKNOWN, 0));
                }
            }
        }
    }

    /// The GIL's holder (a Python process with stacks on).
    fn gil_sample(&mut self) {
        if let Some((holder, locked, switches)) = crate::session::pystack::gil::now() {
            self.batch.push(Sample::Gil(GilSample {
                ts: clock::now_ns(),
                holder,
                locked: locked as u8,
                switches,
            }));
        }
    }

    /// One reading of the process tree and the machine.
    pub fn tree_pass(&mut self) {
        let ts = clock::now_ns();
        self.self_sample(ts);
        self.own_threads(ts);
        self.children(ts);
        self.machine(ts);
    }

    fn self_sample(&mut self, ts: u64) {
        let Some(st) = &self.self_stat else { return };
        let Some(s) = st.read(&mut self.buf).and_then(procfs::parse_stat) else {
            return;
        };
        let comm = Comm::new(s.comm);
        let mut p = ProcSample {
            ts,
            pid: self.pid,
            ppid: s.ppid,
            comm: 0,
            flags: fmt::PROC_FLAG_SELF,
            state: s.state,
            threads: s.threads,
            cpu_ns: s.cpu_ticks.saturating_mul(self.tick_ns),
            ..Default::default()
        };
        read_io(self.self_io.as_ref(), &mut self.buf, &mut p);
        self.batch.push(Sample::Proc(p, comm));
    }

    fn own_threads(&mut self, ts: u64) {
        let Sampler {
            pid,
            buf,
            dirbuf,
            path,
            tids,
            kids,
            own,
            task_dir,
            batch,
            ..
        } = self;
        let Some(dir) = task_dir else { return };
        tids.clear();
        if !dir.numeric_entries(dirbuf, |t| tids.push(t)) {
            return;
        }
        tids.sort_unstable();
        for o in own.iter_mut() {
            o.seen = tids.binary_search(&o.tid).is_ok();
        }
        own.retain(|o| o.seen);
        for &tid in tids.iter() {
            if own.len() >= MAX_OWN {
                break;
            }
            if own.iter().any(|o| o.tid == tid) {
                continue;
            }
            let Some(schedstat) = ProcFile::open_fmt(path, |v| {
                let _ = write!(v, "/proc/self/task/{tid}/schedstat");
            }) else {
                continue;
            };
            let children = ProcFile::open_fmt(path, |v| {
                let _ = write!(v, "/proc/self/task/{tid}/children");
            });
            let comm_file = ProcFile::open_fmt(path, |v| {
                let _ = write!(v, "/proc/self/task/{tid}/comm");
            });
            let comm = comm_file
                .as_ref()
                .and_then(|f| f.read(buf).map(Comm::new))
                .unwrap_or_default();
            let ours = comm.as_bytes().starts_with(b"gputrace-");
            let syscall = if ours {
                None
            } else {
                ProcFile::open_fmt(path, |v| {
                    let _ = write!(v, "/proc/self/task/{tid}/syscall");
                })
            };
            own.push(Own {
                tid,
                schedstat,
                children,
                comm,
                comm_file,
                passes: 0,
                syscall,
                last_cpu: 0,
                last_ts: 0,
                since_wait: WAIT_EVERY,
                ours,
                seen: true,
            });
        }
        kids.clear();
        for o in own.iter_mut() {
            // A name given after the first reading: read again for the first few passes.
            if o.passes < 8 {
                o.passes += 1;
                if let Some(c) = o.comm_file.as_ref().and_then(|f| f.read(buf)) {
                    o.comm = Comm::new(c);
                }
                if o.passes == 8 {
                    o.comm_file = None;
                }
            }
            let Some((cpu, _, _)) = o.schedstat.read(buf).and_then(procfs::parse_schedstat) else {
                continue;
            };
            batch.push(Sample::Proc(
                ProcSample {
                    ts,
                    pid: o.tid,
                    ppid: *pid,
                    comm: 0,
                    flags: fmt::PROC_FLAG_THREAD | fmt::PROC_FLAG_NO_IO,
                    state: fmt::STATE_UNKNOWN,
                    threads: 1,
                    cpu_ns: cpu,
                    ..Default::default()
                },
                o.comm,
            ));
            if let Some(c) = &o.children {
                if let Some(b) = c.read(buf) {
                    procfs::parse_children(b, |p| kids.push((p, 1)));
                }
            }
        }
    }

    fn children(&mut self, ts: u64) {
        let Sampler {
            buf,
            path,
            kids,
            procs,
            batch,
            tick_ns,
            ..
        } = self;
        for p in procs.iter_mut() {
            p.seen = false;
        }
        // Breadth first: `kids` grows with each generation's children.
        let mut i = 0;
        while i < kids.len() {
            let (pid, depth) = kids[i];
            i += 1;
            let at = match procs.iter().position(|p| p.pid == pid) {
                Some(at) => at,
                None if procs.len() < MAX_PROCS => {
                    let Some(stat) = ProcFile::open_fmt(path, |v| {
                        let _ = write!(v, "/proc/{pid}/stat");
                    }) else {
                        continue;
                    };
                    let io = ProcFile::open_fmt(path, |v| {
                        let _ = write!(v, "/proc/{pid}/io");
                    });
                    let children = ProcFile::open_fmt(path, |v| {
                        let _ = write!(v, "/proc/{pid}/task/{pid}/children");
                    });
                    let syscall = ProcFile::open_fmt(path, |v| {
                        let _ = write!(v, "/proc/{pid}/syscall");
                    });
                    procs.push(Proc {
                        pid,
                        depth,
                        stat,
                        io,
                        children,
                        syscall,
                        seen: false,
                    });
                    procs.len() - 1
                }
                None => continue,
            };
            let p = &mut procs[at];
            if p.seen {
                continue;
            }
            let Some(s) = p.stat.read(buf).and_then(procfs::parse_stat) else {
                continue;
            };
            p.seen = true;
            p.depth = depth;
            let comm = Comm::new(s.comm);
            let mut x = ProcSample {
                ts,
                pid,
                ppid: s.ppid,
                comm: 0,
                flags: 0,
                state: s.state,
                threads: s.threads,
                cpu_ns: s.cpu_ticks.saturating_mul(*tick_ns),
                ..Default::default()
            };
            let state = s.state;
            read_io(p.io.as_ref(), buf, &mut x);
            batch.push(Sample::Proc(x, comm));
            // What a child off the CPU is blocked in (a DataLoader worker waiting for
            // indices polls its queue; one blocked inside the dataset reads or sleeps).
            if state != b'R' {
                if let Some(sc) = &p.syscall {
                    batch.extend(wait_sample(sc, buf, pid, ts, state, fmt::TASK_WAIT_CHILD));
                }
            }
            if depth < MAX_DEPTH {
                if let Some(c) = &p.children {
                    if let Some(b) = c.read(buf) {
                        procfs::parse_children(b, |c| kids.push((c, depth + 1)));
                    }
                }
            }
        }
        // Gone (exited, or no longer a descendant): close their files.
        procs.retain(|p| p.seen);
    }

    fn machine(&mut self, ts: u64) {
        let mut m = MachineSample {
            ts,
            ..Default::default()
        };
        let mut any = false;
        if let Some((busy, idle, iow, steal)) = self
            .proc_stat
            .as_ref()
            .and_then(|f| f.read(&mut self.buf))
            .and_then(procfs::parse_proc_stat)
        {
            let t = self.tick_ns;
            m.busy_ns = busy.saturating_mul(t);
            m.idle_ns = idle.saturating_mul(t);
            m.iowait_ns = iow.saturating_mul(t);
            m.steal_ns = steal.saturating_mul(t);
            any = true;
        }
        let cpu = self
            .psi_cpu
            .as_ref()
            .and_then(|f| f.read(&mut self.buf))
            .and_then(procfs::parse_psi);
        let io = self
            .psi_io
            .as_ref()
            .and_then(|f| f.read(&mut self.buf))
            .and_then(procfs::parse_psi);
        if let (Some(c), Some(i)) = (cpu, io) {
            m.flags |= fmt::MACHINE_FLAG_PSI;
            m.psi_cpu_some_us = c.0;
            m.psi_io_some_us = i.0;
            m.psi_io_full_us = i.1;
            any = true;
        }
        if let Some((usage, thr)) = self
            .cg_cpu_stat
            .as_ref()
            .and_then(|f| f.read(&mut self.buf))
            .and_then(procfs::parse_cpu_stat)
        {
            m.flags |= fmt::MACHINE_FLAG_CGROUP;
            m.cgroup_usage_us = usage;
            m.cgroup_throttled_us = thr;
            any = true;
        }
        if any {
            self.batch.push(Sample::Machine(m));
        }
    }

    /// Threads and processes currently followed (tests, benchmarks).
    pub fn followed(&self) -> (usize, usize, usize) {
        (self.fed.len(), self.own.len(), self.procs.len())
    }
}

fn read_io(f: Option<&ProcFile>, buf: &mut [u8], p: &mut ProcSample) {
    match f.and_then(|f| f.read(buf)).and_then(procfs::parse_io) {
        Some((r, rb, wb)) => {
            p.rchar = r;
            p.read_bytes = rb;
            p.write_bytes = wb;
        }
        None => p.flags |= fmt::PROC_FLAG_NO_IO,
    }
}

fn affinity_count() -> u32 {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return 0;
        }
        libc::CPU_COUNT(&set) as u32
    }
}

/// This process's cgroup v2 directory under /sys/fs/cgroup, if it has one.
fn cgroup_dir(scratch: &mut Vec<u8>) -> Option<Vec<u8>> {
    let f = ProcFile::open(c"/proc/self/cgroup")?;
    let mut buf = [0u8; 2048];
    let rel = procfs::parse_cgroup_v2_path(f.read(&mut buf)?)?.to_vec();
    let mut d = b"/sys/fs/cgroup".to_vec();
    if rel != b"/" {
        d.extend_from_slice(&rel);
    }
    // The directory must be visible here (it is not inside some containers).
    let mut probe = d.clone();
    probe.extend_from_slice(b"/cpu.stat");
    ProcFile::open_fmt(scratch, |v| v.extend_from_slice(&probe))?;
    Some(d)
}

fn read_small(scratch: &mut Vec<u8>, buf: &mut [u8], path: &[u8]) -> Option<Vec<u8>> {
    let f = ProcFile::open_fmt(scratch, |v| v.extend_from_slice(path))?;
    f.read(buf).map(|b| b.to_vec())
}

/// (quota us, period us, memory limit bytes) of the cgroup: the tightest along the
/// path up to the root (cgroup v2), else the v1 controllers' files; 0 where none.
fn cgroup_limits(scratch: &mut Vec<u8>, buf: &mut [u8]) -> (u64, u64, u64) {
    let mut cpu: Option<(u64, u64)> = None;
    let mut mem: Option<u64> = None;
    if let Some(mut d) = cgroup_dir(scratch) {
        loop {
            let mut p = d.clone();
            p.extend_from_slice(b"/cpu.max");
            if let Some((q, per)) =
                read_small(scratch, buf, &p).and_then(|b| procfs::parse_cpu_max(&b))
            {
                if q > 0 && per > 0 {
                    let tighter = match cpu {
                        Some((cq, cp)) => (q as f64 / per as f64) < (cq as f64 / cp as f64),
                        None => true,
                    };
                    if tighter {
                        cpu = Some((q, per));
                    }
                }
            }
            let mut p = d.clone();
            p.extend_from_slice(b"/memory.max");
            if let Some(m) = read_small(scratch, buf, &p).and_then(|b| procfs::parse_limit(&b)) {
                mem = Some(mem.map_or(m, |x| x.min(m)));
            }
            if d.len() <= b"/sys/fs/cgroup".len() {
                break;
            }
            match d.iter().rposition(|c| *c == b'/') {
                Some(i) if i >= b"/sys/fs/cgroup".len() => d.truncate(i),
                _ => break,
            }
        }
    } else {
        for base in [&b"/sys/fs/cgroup/cpu"[..], b"/sys/fs/cgroup/cpu,cpuacct"] {
            let q = read_small(scratch, buf, &[base, b"/cpu.cfs_quota_us"].concat())
                .and_then(|b| procfs::parse_limit(&b));
            let per = read_small(scratch, buf, &[base, b"/cpu.cfs_period_us"].concat())
                .and_then(|b| procfs::parse_limit(&b));
            if let (Some(q), Some(per)) = (q, per) {
                if q > 0 && per > 0 {
                    cpu = Some((q, per));
                    break;
                }
            }
        }
        mem = read_small(scratch, buf, b"/sys/fs/cgroup/memory/memory.limit_in_bytes")
            .and_then(|b| procfs::parse_limit(&b));
    }
    let (q, p) = cpu.unwrap_or((0, 0));
    (q, p, mem.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_pass_reads_this_process_and_a_child() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let mut s = Sampler::new(HostSettings::default());
        s.limits();
        s.thread_pass();
        s.tree_pass();
        let mut out = Vec::new();
        s.take_batch(&mut out);
        let _ = child.kill();
        let _ = child.wait();
        let me = std::process::id();
        assert!(out
            .iter()
            .any(|x| matches!(x, Sample::Limits(l) if l.online_cpus >= 1)));
        assert!(out
            .iter()
            .any(|x| matches!(x, Sample::Thread(t) if t.tid == me)));
        assert!(out.iter().any(|x| matches!(x, Sample::Proc(p, _)
            if p.flags & fmt::PROC_FLAG_SELF != 0 && p.pid == me)));
        let kid = out.iter().find_map(|x| match x {
            Sample::Proc(p, c) if p.pid == child.id() => Some((p.clone(), *c)),
            _ => None,
        });
        let (p, c) = kid.expect("the child was sampled");
        assert_eq!(p.ppid, me);
        assert_eq!(c.as_bytes(), b"sleep");
        assert!(p.flags & fmt::PROC_FLAG_THREAD == 0);
    }

    /// The cost of the fine pass over every thread (run by hand: `cargo test -p
    /// gputrace-interpose --release others_pass_cost -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn others_pass_cost() {
        for n in [8usize, 32, 64] {
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let hs: Vec<_> = (0..n)
                .map(|_| {
                    let stop = stop.clone();
                    std::thread::spawn(move || {
                        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                            std::thread::sleep(std::time::Duration::from_millis(1));
                        }
                    })
                })
                .collect();
            let mut s = Sampler::new(HostSettings::default());
            s.tree_pass();
            let mut out = Vec::new();
            let rounds = 400;
            let t = std::time::Instant::now();
            for _ in 0..rounds {
                s.others_pass();
                s.take_batch(&mut out);
                out.clear();
            }
            let per = t.elapsed().as_secs_f64() * 1e6 / rounds as f64;
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            hs.into_iter().for_each(|h| h.join().unwrap());
            println!(
                "{n} threads: {per:.1} us per pass ({:.2} us per thread)",
                per / n as f64
            );
        }
    }
}
