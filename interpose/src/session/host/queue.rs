//! The host sampler's samples on their way to the writer: plain data (no heap) in a
//! vector behind a spin lock held for a copy or a swap, never across a system call. The
//! writer swaps it with a vector of its own, so both keep their capacity; a forked
//! child resets it (the lock may have been held by a thread that does not exist there).

use gputrace_format::{CpuLimits, GilSample, MachineSample, ProcSample, TaskWait, ThreadCpu};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Comm {
    len: u8,
    bytes: [u8; 16],
}

impl Comm {
    pub fn new(s: &[u8]) -> Comm {
        let s = s.strip_suffix(b"\n").unwrap_or(s);
        let n = s.len().min(16);
        let mut bytes = [0u8; 16];
        bytes[..n].copy_from_slice(&s[..n]);
        Comm {
            len: n as u8,
            bytes,
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// One sample on its way to the writer (plain data: no heap).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sample {
    Thread(ThreadCpu),
    /// A process or thread sample; its `comm` field is filled in by the writer, which
    /// interns the name.
    Proc(ProcSample, Comm),
    Machine(MachineSample),
    Limits(CpuLimits),
    Gil(GilSample),
    Wait(TaskWait),
}

/// Most samples held for the writer; past it new ones are dropped and counted (the
/// writer is gone or stuck).
const QUEUE_CAP: usize = 1 << 16;

/// The samples waiting for the writer: a vector behind a spin lock held for a copy or
/// a swap, never across a system call.
pub struct Queue {
    busy: AtomicBool,
    items: UnsafeCell<Vec<Sample>>,
}

// SAFETY: `items` is only touched while `busy` is held (acquire on taking it, release
// on giving it back).
unsafe impl Sync for Queue {}

impl Queue {
    pub const fn new() -> Queue {
        Queue {
            busy: AtomicBool::new(false),
            items: UnsafeCell::new(Vec::new()),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Vec<Sample>) -> R) -> R {
        while self
            .busy
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        // SAFETY: we hold `busy`, so no one else is using the vector.
        let r = f(unsafe { &mut *self.items.get() });
        self.busy.store(false, Ordering::Release);
        r
    }

    /// Moves `batch` into the queue (emptying it); returns how many were dropped.
    pub fn put(&self, batch: &mut Vec<Sample>) -> usize {
        self.with(|q| {
            let room = QUEUE_CAP.saturating_sub(q.len());
            let dropped = batch.len().saturating_sub(room);
            batch.truncate(room);
            q.append(batch);
            dropped
        })
    }

    /// Swaps the queue's contents with `out` (which should be empty).
    pub fn swap(&self, out: &mut Vec<Sample>) {
        self.with(|q| std::mem::swap(q, out));
    }

    /// In a forked child: the lock may have been held by a thread that does not exist
    /// there. The vector is leaked (it may be half-updated), and the lock freed.
    pub fn reset_after_fork(&self) {
        // SAFETY: the child has one thread; nobody else can touch the vector.
        let old = unsafe { std::ptr::replace(self.items.get(), Vec::new()) };
        std::mem::forget(old);
        self.busy.store(false, Ordering::Release);
    }
}

impl Default for Queue {
    fn default() -> Self {
        Queue::new()
    }
}

static QUEUE: Queue = Queue::new();
/// Samples dropped because the queue was full.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// The sampler's side: moves `batch` into the queue (emptying it).
pub fn put(batch: &mut Vec<Sample>) {
    let dropped = QUEUE.put(batch);
    if dropped > 0 {
        DROPPED.fetch_add(dropped as u64, Ordering::Relaxed);
    }
}

/// The writer's side: takes every waiting sample (swapping vectors, no copy), and the
/// count of samples dropped since the last call.
pub fn drain(out: &mut Vec<Sample>) -> u64 {
    out.clear();
    QUEUE.swap(out);
    DROPPED.swap(0, Ordering::Relaxed)
}

/// In a forked child.
pub fn reset_after_fork() {
    QUEUE.reset_after_fork();
    DROPPED.store(0, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_drops_past_its_cap_and_swaps() {
        let q = Queue::new();
        let mut batch: Vec<Sample> = (0..10)
            .map(|i| {
                Sample::Thread(ThreadCpu {
                    tid: i,
                    ..Default::default()
                })
            })
            .collect();
        assert_eq!(q.put(&mut batch), 0);
        assert!(batch.is_empty());
        let mut out = Vec::new();
        q.swap(&mut out);
        assert_eq!(out.len(), 10);
        let mut big: Vec<Sample> = (0..QUEUE_CAP + 5)
            .map(|_| Sample::Thread(ThreadCpu::default()))
            .collect();
        assert_eq!(q.put(&mut big), 5);
        q.reset_after_fork();
        let mut out = Vec::new();
        q.swap(&mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn comm_is_cut_and_trimmed() {
        assert_eq!(Comm::new(b"python\n").as_bytes(), b"python");
        assert_eq!(Comm::new(&[b'x'; 40]).as_bytes().len(), 16);
    }
}
