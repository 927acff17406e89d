//! The host sampler: what the CPU side of the job was doing while a trace window is
//! open, so the analyzer can tell a GPU gap in which the feeding thread was computing
//! from one in which it was blocked, and what the DataLoader workers were doing then.
//!
//! One thread, started with tracing and stopped before the trace is finished (nothing
//! runs in dormant mode). Every `thread_period` (GPUTRACE_HOST_THREAD_MS, 3 ms) it reads
//! the scheduler counters of the threads that issue CUDA work (those with a record ring)
//! and of the main thread; every `tree_period` (GPUTRACE_HOST_TREE_MS, 100 ms) the
//! process tree (this process, its threads, its children and theirs: DataLoader workers
//! are forked children, not traced themselves), and the machine's CPU, I/O-wait, PSI and
//! cgroup counters. Once, the CPUs and memory the job may use. Every `py_period`
//! (GPUTRACE_PYSAMPLE_MS, 10 ms) the Python stacks of the threads that issue CUDA work
//! (pystack/sample.rs). While one of those threads is blocked (GPUTRACE_HOST_ALL_THREADS),
//! every other thread of the process too (its schedstat, the system call of a blocked
//! one), the GIL's holder (pystack/gil.rs) and every Python thread's stack; the system
//! call of each child off the CPU at the tree period.
//!
//! Cost: files stay open and are read again with `pread` into one buffer, directories
//! are listed with `getdents64`; nothing is allocated per sample once the set of
//! threads and processes is known. A thread's `stat` (for its state letter) is read only
//! while it spends most of its time off the CPU, at most every 8 passes. Samples go to the writer through
//! a spin-locked vector swapped with the writer's own (queue.rs), drained on
//! the writer thread by [`HostSource`].
//!
//! The sampler never waits for or signals a child, blocks every signal on its own
//! thread, and gives up quietly on any file it cannot read.
//!
//! Files: `sampler.rs` (the passes), `procfs.rs` (reading /proc without allocating),
//! `queue.rs` (samples on their way to the writer).

pub mod procfs;
pub mod queue;
pub mod sampler;

use crate::base::log;
use crate::base::opts::HostSettings;
use crate::base::state;
use crate::base::worker::{Spec, Worker, POLICY};
use crate::session::pystack;
use crate::writer::{Sink, Source};
use gputrace_format::{self as fmt, Event};
use queue::Sample;
use sampler::Sampler;
use std::time::Duration;

static WORKER: Worker = Worker::new();

/// Starts the sampler thread (with tracing). Does nothing when switched off or running.
pub fn start(s: HostSettings) {
    if !s.on {
        return;
    }
    let spec = Spec {
        stack: 256 << 10,
        first: block_signals,
        ..Spec::new(
            "gputrace-sample",
            "internal error in the host sampler; it stops here (the program runs on)",
        )
    };
    if let Err(e) = WORKER.start(&POLICY, spec, move || run(s)) {
        log::debug(&format!("host sampler not started: {e}"));
    }
}

/// Stops the sampler and waits at most `wait` for its last samples to be queued.
/// Returns false if it was still running then.
pub fn stop(wait: Duration) -> bool {
    WORKER.stop(wait)
}

/// In a forked child: the sampler thread is the parent's.
pub fn forget_after_fork() {
    WORKER.forget_after_fork();
    queue::reset_after_fork();
}

fn block_signals() {
    // SAFETY: a zeroed sigset_t filled by sigfillset, applied to this thread only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

fn mono() -> libc::timespec {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts
}

fn ts_ns(t: &libc::timespec) -> u64 {
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn sleep_until(ns: u64) {
    let t = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: a valid timespec; absolute sleep on CLOCK_MONOTONIC. An interruption
    // just ends the sleep early (the loop checks the time).
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &t,
            std::ptr::null_mut(),
        )
    };
}

fn run(s: HostSettings) {
    let mut sp = Sampler::new(s);
    sp.limits();
    sp.thread_pass();
    sp.tree_pass();
    sp.flush();
    let tp = s.thread_period.as_nanos() as u64;
    let rp = s.tree_period.as_nanos() as u64;
    let pp = s.py_period.as_nanos() as u64;
    let mut next = ts_ns(&mono()) + tp;
    let mut next_tree = ts_ns(&mono()) + rp;
    let mut next_py = if pp > 0 {
        ts_ns(&mono()) + pp
    } else {
        u64::MAX
    };
    loop {
        sleep_until(next.min(next_py));
        if WORKER.stop_requested() {
            break;
        }
        let st = state::get();
        if st == state::DISABLED {
            break;
        }
        let now = ts_ns(&mono());
        if now >= next_py {
            // Python stacks of the CUDA-issuing threads (nothing while stacks are off).
            // With every Python thread's while a CUDA-issuing thread is blocked.
            pystack::sample::take(s.all_threads && sp.blocked());
            next_py = if now > next_py + pp {
                now + pp
            } else {
                next_py + pp
            };
        }
        if now < next {
            continue;
        }
        // Behind by more than a period (the machine is overloaded): skip, do not catch up.
        next = if now > next + tp { now + tp } else { next + tp };
        sp.thread_pass();
        if now >= next_tree {
            sp.tree_pass();
            next_tree = if now > next_tree + rp {
                now + rp
            } else {
                next_tree + rp
            };
        }
        sp.flush();
    }
    // A last reading, so the samples bracket the end of the window.
    sp.thread_pass();
    sp.tree_pass();
    sp.flush();
}

/// The samples as the writer drains them: process names interned, losses counted.
#[derive(Default)]
pub struct HostSource {
    /// Swapped with the queue's vector (both keep their capacity).
    samples: Vec<Sample>,
}

impl HostSource {
    pub fn new() -> HostSource {
        HostSource {
            samples: Vec::with_capacity(1024),
        }
    }
}

impl Source for HostSource {
    fn drain(&mut self, out: &mut Sink<'_>) {
        let dropped = queue::drain(&mut self.samples);
        for s in self.samples.drain(..) {
            let e = match s {
                Sample::Thread(x) => Event::ThreadCpu(x),
                Sample::Proc(mut x, comm) => {
                    x.comm = out.intern(&String::from_utf8_lossy(comm.as_bytes()));
                    Event::ProcSample(x)
                }
                Sample::Machine(x) => Event::MachineSample(x),
                Sample::Limits(x) => Event::CpuLimits(x),
                Sample::Gil(x) => Event::GilSample(x),
                Sample::Wait(x) => Event::TaskWait(x),
            };
            out.push(e);
        }
        if dropped > 0 {
            out.push(Event::Dropped {
                ts: crate::base::clock::now_ns(),
                source: fmt::DROP_HOST_SAMPLES,
                count: dropped,
            });
        }
    }
}
