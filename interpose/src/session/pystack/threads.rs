//! The threads the Python sampler follows: a small table of (tid, `PyThreadState`)
//! slots, written with atomics by each thread itself at its first call site (the capture
//! path knows the thread's state from `PyGILState_GetThisThreadState`), cleared by a
//! thread-local guard when the thread ends, read by the sampler (sample.rs). Between
//! the interpreter freeing a thread's state and the guard running, a slot points at
//! freed memory: the sampler's reads are crash-safe and its results checked, so that
//! costs at most a dropped sample.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Threads followed at most.
pub const SLOTS: usize = 64;

static TIDS: [AtomicU32; SLOTS] = [const { AtomicU32::new(0) }; SLOTS];
static TSTATES: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

/// The calling thread's slot in the table, cleared when the thread ends.
struct Noted {
    slot: Cell<usize>,
    ts: Cell<u64>,
}

impl Drop for Noted {
    fn drop(&mut self) {
        let s = self.slot.get();
        if s < SLOTS {
            TSTATES[s].store(0, Ordering::Release);
            TIDS[s].store(0, Ordering::Release);
        }
    }
}

thread_local! {
    static NOTED: Noted = const {
        Noted {
            slot: Cell::new(usize::MAX),
            ts: Cell::new(0),
        }
    };
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// The calling thread's thread state is `ts`: keeps it for the sampler. A thread
/// already noted with the same state costs a thread-local read.
#[inline]
pub fn note(ts: u64) {
    let _ = NOTED.try_with(|n| {
        if n.ts.get() == ts {
            return;
        }
        let mut slot = n.slot.get();
        if slot >= SLOTS {
            let tid = gettid();
            slot = (0..SLOTS)
                .find(|&i| {
                    TIDS[i]
                        .compare_exchange(0, tid, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                })
                .unwrap_or(usize::MAX);
            if slot >= SLOTS {
                // The table is full: this thread is not sampled (remembered, so the
                // search is not made again).
                n.ts.set(ts);
                return;
            }
            n.slot.set(slot);
        }
        TSTATES[slot].store(ts, Ordering::Release);
        n.ts.set(ts);
    });
}

/// The noted threads, as (tid, thread state).
pub fn each(mut f: impl FnMut(u32, u64)) {
    for i in 0..SLOTS {
        let tid = TIDS[i].load(Ordering::Acquire);
        let ts = TSTATES[i].load(Ordering::Acquire);
        if tid != 0 && ts != 0 {
            f(tid, ts);
        }
    }
}

/// In a forked child: only the forking thread lives on, and the slots are the parent's.
pub fn reset_after_fork() {
    for i in 0..SLOTS {
        TSTATES[i].store(0, Ordering::Relaxed);
        TIDS[i].store(0, Ordering::Relaxed);
    }
    let _ = NOTED.try_with(|n| {
        n.slot.set(usize::MAX);
        n.ts.set(0);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_is_noted_once_and_forgotten_when_it_ends() {
        let tid = std::thread::spawn(|| {
            note(0x1000);
            note(0x1000);
            let me = gettid();
            let mut mine = 0;
            each(|t, ts| {
                if t == me {
                    assert_eq!(ts, 0x1000);
                    mine += 1;
                }
            });
            assert_eq!(mine, 1);
            me
        })
        .join()
        .unwrap();
        each(|t, _| assert_ne!(t, tid));
    }
}
