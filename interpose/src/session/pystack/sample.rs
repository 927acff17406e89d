//! Periodic samples of the Python stacks of the threads that issue CUDA work, during a
//! trace window: what the host was running while the GPU waited (the DataLoader's
//! `__next__`, a transform, logging), not only at the calls that matter.
//!
//! * Which threads: those whose stack was taken at a call site (threads.rs: the
//!   capture path knows the thread's `PyThreadState` from
//!   `PyGILState_GetThisThreadState` and notes it once).
//! * Who samples: the host sampler's thread ("gputrace-sample"), every
//!   `GPUTRACE_PYSAMPLE_MS`, only while stacks are being taken (a trace window).
//! * Racing the sampled thread: its frames change while they are read. Every read goes
//!   through `process_vm_readv` ([`super::mem`]), so a freed frame or thread state is a
//!   failed read, never a fault; the walk is bounded (depth, and four times that many
//!   frames looked at), so a chain that loops under the reader cannot hang it; on the
//!   writer thread each code object is checked against `PyCode_Type` (and its names
//!   against `PyUnicode_Type`) before it is used, so a torn read that yields a wrong
//!   pointer drops the frame, and a stack with no readable frame is dropped whole.
//! * Samples wait for the writer in a bounded vector behind a spin lock that only the
//!   sampler and the writer take (no program thread ever does); a forked child resets
//!   it, since the lock may have been held by a thread that does not exist there.

use super::{threads, walk_from, Python, Stack, ACTIVE, DEPTH, MAX_DEPTH};
use crate::base::clock;
use crate::rings::record::RawFrame;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};

/// Samples waiting for the writer at most (the writer drains every flush period).
const MAX_QUEUED: usize = 16_384;

/// One sample on its way to the writer.
#[derive(Clone, Copy)]
pub struct Sampled {
    pub ts: u64,
    pub tid: u32,
    pub stack: Stack,
}

struct Queue {
    items: Vec<Sampled>,
    dropped: u64,
}

struct Locked {
    busy: AtomicBool,
    q: UnsafeCell<Queue>,
}

// SAFETY: `q` is only touched while `busy` is held (acquire on taking it, release on
// giving it back), or in a forked child before any other thread exists.
unsafe impl Sync for Locked {}

static QUEUE: Locked = Locked {
    busy: AtomicBool::new(false),
    q: UnsafeCell::new(Queue {
        items: Vec::new(),
        dropped: 0,
    }),
};

fn with_queue<R>(f: impl FnOnce(&mut Queue) -> R) -> R {
    while QUEUE
        .busy
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::hint::spin_loop();
    }
    // SAFETY: we hold `busy`.
    let r = f(unsafe { &mut *QUEUE.q.get() });
    QUEUE.busy.store(false, Ordering::Release);
    r
}

/// One sample of every noted thread, if stacks are being taken; with `all`, of every
/// other Python thread of the process too (gil.rs finds them; at most
/// [`super::gil::MAX_THREADS`]). On the sampler thread.
pub fn take(all: bool) {
    let p = ACTIVE.load(Ordering::Acquire);
    if p.is_null() {
        return;
    }
    // SAFETY: ACTIVE only ever holds a leaked `Python`, valid for the process's life.
    let py: &Python = unsafe { &*p };
    let depth = DEPTH.load(Ordering::Relaxed).min(MAX_DEPTH);
    let mut fresh = false;
    let mut got: [Option<Sampled>; 8] = [None; 8];
    let mut n_got = 0;
    let mut noted = [0u32; threads::SLOTS];
    let mut n_noted = 0;
    let mut one = |tid: u32, ts: u64| {
        let mut s = Sampled {
            ts: clock::now_ns(),
            tid,
            stack: Stack::EMPTY,
        };
        s.stack.n = walk_from(py, ts, depth, &mut s.stack.frames);
        if s.stack.n == 0 {
            return;
        }
        fresh |= super::met_anew(s.stack.frames());
        got[n_got] = Some(s);
        n_got += 1;
        if n_got == got.len() {
            put(&got[..n_got]);
            n_got = 0;
        }
    };
    threads::each(|tid, ts| {
        if n_noted < noted.len() {
            noted[n_noted] = tid;
            n_noted += 1;
        }
        one(tid, ts)
    });
    if all {
        super::gil::each_thread(py, |tid, ts| {
            if tid != 0 && !noted[..n_noted].contains(&tid) {
                one(tid, ts);
            }
        });
    }
    put(&got[..n_got]);
    if fresh {
        // A code object not met lately: read it while it surely exists.
        crate::writer::wake();
    }
}

fn put(got: &[Option<Sampled>]) {
    if got.is_empty() {
        return;
    }
    with_queue(|q| {
        for s in got.iter().flatten() {
            if q.items.len() >= MAX_QUEUED {
                q.dropped += 1;
            } else {
                q.items.push(*s);
            }
        }
    });
}

/// Takes the queued samples into `out`, which must be empty (on the writer thread);
/// returns how many were dropped since the last call.
pub fn drain(out: &mut Vec<Sampled>) -> u64 {
    with_queue(|q| {
        // Swapped, so both vectors keep their capacity.
        std::mem::swap(out, &mut q.items);
        std::mem::take(&mut q.dropped)
    })
}

/// The raw frames of a sample.
pub fn frames(s: &Sampled) -> &[RawFrame] {
    s.stack.frames()
}

/// In a forked child: the samples queued are the parent's.
pub fn reset_after_fork() {
    // SAFETY: only the forking thread exists in the child; whoever held the lock in
    // the parent is gone, so the queue is taken over without it.
    unsafe {
        let q = &mut *QUEUE.q.get();
        q.items.clear();
        q.dropped = 0;
    }
    QUEUE.busy.store(false, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_a_python_process_nothing_is_sampled() {
        threads::note(0x1000);
        take(true);
        let mut v = Vec::new();
        drain(&mut v);
        assert!(v.is_empty());
    }
}
