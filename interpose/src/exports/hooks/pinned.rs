//! The pinned host memory registry: every interval made by cudaHostAlloc /
//! cudaMallocHost or registered by cudaHostRegister, until cudaFreeHost /
//! cudaHostUnregister. A copy's host pointer inside one is pinned; outside all of them,
//! pageable.
//!
//! Intervals are disjoint (CUDA refuses to register memory twice), kept sorted by start
//! in a fixed array. Changes (rare: allocations) take a small spin lock; lookups (every
//! copy) take no lock: they read under a sequence counter and retry if a change ran
//! meanwhile, giving up with "unknown" after a few tries rather than ever waiting on a
//! writer that was preempted mid-change.
//!
//! If more intervals are live than the array holds, or a fork left it half-changed, the
//! registry is marked incomplete and a pointer it does not hold is "unknown", not
//! "pageable".

use gputrace_format::MemKind;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Intervals held at once (256 KiB of address pairs). PyTorch's caching host allocator
/// keeps one interval per cached block: hundreds, rarely thousands.
pub const CAPACITY: usize = 1 << 14;
const READ_TRIES: usize = 64;

struct Registry {
    seq: AtomicU64,
    len: AtomicUsize,
    start: [AtomicU64; CAPACITY],
    end: [AtomicU64; CAPACITY],
    incomplete: AtomicBool,
    lock: AtomicBool,
}

static REG: Registry = Registry {
    seq: AtomicU64::new(0),
    len: AtomicUsize::new(0),
    start: [const { AtomicU64::new(0) }; CAPACITY],
    end: [const { AtomicU64::new(0) }; CAPACITY],
    incomplete: AtomicBool::new(false),
    lock: AtomicBool::new(false),
};

/// What the registry knows about one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Inside the pinned interval [start, end).
    Pinned { start: u64, end: u64 },
    /// In no interval; `complete`: the registry holds every live interval.
    NotPinned { complete: bool },
    /// Changes kept running while we read.
    Busy,
}

struct Locked;

impl Locked {
    fn take() -> Locked {
        while REG
            .lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
            std::thread::yield_now();
        }
        Locked
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        REG.lock.store(false, Ordering::Release);
    }
}

/// Index of the first interval whose start is > `addr`, reading with relaxed loads.
fn upper_bound(n: usize, addr: u64) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if REG.start[mid].load(Ordering::Relaxed) <= addr {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Runs `f` between the two halves of a sequence-counter write.
fn write(_l: &Locked, f: impl FnOnce()) {
    let s = REG.seq.load(Ordering::Relaxed);
    REG.seq.store(s.wrapping_add(1), Ordering::Relaxed);
    fence(Ordering::Release);
    f();
    REG.seq.store(s.wrapping_add(2), Ordering::Release);
}

/// Adds [ptr, ptr + bytes) (replacing an interval that starts at `ptr`).
pub fn insert(ptr: u64, bytes: u64) {
    if ptr == 0 || bytes == 0 {
        return;
    }
    let l = Locked::take();
    let n = REG.len.load(Ordering::Relaxed);
    let i = upper_bound(n, ptr);
    if i > 0 && REG.start[i - 1].load(Ordering::Relaxed) == ptr {
        write(&l, || {
            REG.end[i - 1].store(ptr.saturating_add(bytes), Ordering::Relaxed)
        });
        return;
    }
    if n == CAPACITY {
        REG.incomplete.store(true, Ordering::Relaxed);
        return;
    }
    write(&l, || {
        for j in (i..n).rev() {
            let (s, e) = (
                REG.start[j].load(Ordering::Relaxed),
                REG.end[j].load(Ordering::Relaxed),
            );
            REG.start[j + 1].store(s, Ordering::Relaxed);
            REG.end[j + 1].store(e, Ordering::Relaxed);
        }
        REG.start[i].store(ptr, Ordering::Relaxed);
        REG.end[i].store(ptr.saturating_add(bytes), Ordering::Relaxed);
        REG.len.store(n + 1, Ordering::Relaxed);
    });
}

/// Removes the interval that starts at `ptr`; returns its size.
pub fn remove(ptr: u64) -> Option<u64> {
    let l = Locked::take();
    let n = REG.len.load(Ordering::Relaxed);
    let i = upper_bound(n, ptr);
    if i == 0 || REG.start[i - 1].load(Ordering::Relaxed) != ptr {
        return None;
    }
    let i = i - 1;
    let size = REG.end[i].load(Ordering::Relaxed) - ptr;
    write(&l, || {
        for j in i..n - 1 {
            let (s, e) = (
                REG.start[j + 1].load(Ordering::Relaxed),
                REG.end[j + 1].load(Ordering::Relaxed),
            );
            REG.start[j].store(s, Ordering::Relaxed);
            REG.end[j].store(e, Ordering::Relaxed);
        }
        REG.len.store(n - 1, Ordering::Relaxed);
    });
    Some(size)
}

/// Is `addr` pinned? Never blocks, never allocates.
#[inline]
pub fn lookup(addr: u64) -> Lookup {
    for _ in 0..READ_TRIES {
        let s1 = REG.seq.load(Ordering::Acquire);
        if s1 & 1 == 1 {
            std::hint::spin_loop();
            continue;
        }
        let n = REG.len.load(Ordering::Relaxed).min(CAPACITY);
        let i = upper_bound(n, addr);
        let hit = if i > 0 {
            let (s, e) = (
                REG.start[i - 1].load(Ordering::Relaxed),
                REG.end[i - 1].load(Ordering::Relaxed),
            );
            (addr < e).then_some((s, e))
        } else {
            None
        };
        let complete = !REG.incomplete.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        if REG.seq.load(Ordering::Relaxed) == s1 {
            return match hit {
                Some((start, end)) => Lookup::Pinned { start, end },
                None => Lookup::NotPinned { complete },
            };
        }
    }
    Lookup::Busy
}

/// The host memory kind of one host pointer.
#[inline]
pub fn host_kind_of(addr: u64) -> MemKind {
    match lookup(addr) {
        Lookup::Pinned { .. } => MemKind::Pinned,
        Lookup::NotPinned { complete: true } => MemKind::Pageable,
        _ => MemKind::Unknown,
    }
}

/// `cudaMemcpyKind` values.
pub const HOST_TO_HOST: i32 = 0;
pub const HOST_TO_DEVICE: i32 = 1;
pub const DEVICE_TO_HOST: i32 = 2;
pub const DEVICE_TO_DEVICE: i32 = 3;

/// Classifies a copy's host side from its cudaMemcpyKind and pointers.
/// cudaMemcpyDefault (unified addressing) says nothing about which side is the host:
/// a registered pointer on either side makes it pinned, else it is unknown.
#[inline]
pub fn classify(kind: i32, dst: u64, src: u64) -> MemKind {
    match kind {
        HOST_TO_DEVICE | HOST_TO_HOST => host_kind_of(src),
        DEVICE_TO_HOST => host_kind_of(dst),
        DEVICE_TO_DEVICE => MemKind::Device,
        _ => {
            if matches!(lookup(src), Lookup::Pinned { .. })
                || matches!(lookup(dst), Lookup::Pinned { .. })
            {
                MemKind::Pinned
            } else {
                MemKind::Unknown
            }
        }
    }
}

/// Live intervals (tests, debug output).
pub fn len() -> usize {
    REG.len.load(Ordering::Relaxed)
}

/// In a forked child: the lock may have been held by a parent thread that does not
/// exist here; a change caught half-done leaves the registry untrustworthy.
pub fn after_fork() {
    REG.lock.store(false, Ordering::Relaxed);
    let s = REG.seq.load(Ordering::Relaxed);
    if s & 1 == 1 {
        REG.len.store(0, Ordering::Relaxed);
        REG.incomplete.store(true, Ordering::Relaxed);
        REG.seq.store(s.wrapping_add(1), Ordering::Release);
    }
}

#[cfg(test)]
pub(crate) fn reset_for_tests() {
    let l = Locked::take();
    write(&l, || REG.len.store(0, Ordering::Relaxed));
    REG.incomplete.store(false, Ordering::Relaxed);
}

#[cfg(test)]
pub(crate) static TEST_SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        let g = TEST_SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        reset_for_tests();
        g
    }

    #[test]
    fn intervals_classify_their_inside_only() {
        let _g = serial();
        insert(0x1000, 0x100);
        insert(0x5000, 0x1000);
        insert(0x3000, 0x10);
        assert_eq!(len(), 3);
        assert_eq!(
            lookup(0x1000),
            Lookup::Pinned {
                start: 0x1000,
                end: 0x1100
            }
        );
        assert_eq!(host_kind_of(0x10ff), MemKind::Pinned);
        assert_eq!(host_kind_of(0x1100), MemKind::Pageable);
        assert_eq!(host_kind_of(0xfff), MemKind::Pageable);
        assert_eq!(host_kind_of(0x5fff), MemKind::Pinned);
        assert_eq!(host_kind_of(0x300f), MemKind::Pinned);
        assert_eq!(remove(0x3000), Some(0x10));
        assert_eq!(remove(0x3000), None);
        assert_eq!(host_kind_of(0x3000), MemKind::Pageable);
        assert_eq!(len(), 2);
    }

    #[test]
    fn copies_are_classified_by_direction() {
        let _g = serial();
        insert(0x10_0000, 4096);
        let pinned = 0x10_0010;
        let other = 0x90_0000;
        assert_eq!(classify(HOST_TO_DEVICE, other, pinned), MemKind::Pinned);
        assert_eq!(classify(HOST_TO_DEVICE, pinned, other), MemKind::Pageable);
        assert_eq!(classify(DEVICE_TO_HOST, pinned, other), MemKind::Pinned);
        assert_eq!(classify(DEVICE_TO_HOST, other, pinned), MemKind::Pageable);
        assert_eq!(classify(DEVICE_TO_DEVICE, pinned, pinned), MemKind::Device);
        assert_eq!(classify(4, other, pinned), MemKind::Pinned);
        assert_eq!(classify(4, other, other), MemKind::Unknown);
    }

    #[test]
    fn a_full_registry_says_unknown_not_pageable() {
        let _g = serial();
        for i in 0..CAPACITY as u64 {
            insert(0x1_0000_0000 + i * 0x100, 0x10);
        }
        assert_eq!(host_kind_of(0x10), MemKind::Pageable);
        insert(0x9_0000_0000, 0x10);
        assert_eq!(len(), CAPACITY);
        assert_eq!(host_kind_of(0x9_0000_0000), MemKind::Unknown);
        assert_eq!(host_kind_of(0x1_0000_0105), MemKind::Pinned);
        reset_for_tests();
    }

    #[test]
    fn readers_never_see_a_torn_registry() {
        let _g = serial();
        // A fixed interval readers look for while a writer churns others around it.
        insert(0x8000_0000, 0x1000);
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let writer = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let p = 0x1000 + (i % 512) * 0x10_0000;
                    insert(p, 0x100);
                    insert(0x9000_0000 + (i % 512) * 0x1000, 0x100);
                    remove(p);
                    remove(0x9000_0000 + (i % 512) * 0x1000);
                    i += 1;
                }
            })
        };
        let mut busy = 0;
        for _ in 0..200_000 {
            match lookup(0x8000_0800) {
                Lookup::Pinned { start, end } => {
                    assert_eq!((start, end), (0x8000_0000, 0x8000_1000))
                }
                Lookup::Busy => busy += 1,
                other => panic!("torn read: {other:?}"),
            }
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        assert!(busy < 200_000, "every read gave up");
    }
}
