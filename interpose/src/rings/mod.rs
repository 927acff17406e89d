//! The host rings layer: per-thread single-producer rings of host-side records (from
//! the symbol hooks and the CUPTI API callback), drained by the writer thread through
//! [`source::RingSource`]; [`record`] says how each kind of record is laid out.
//!
//! Each thread that records anything gets its own ring the first time it records
//! (the only allocation, once per thread). Rings hang off one global, push-only list;
//! the writer walks the list and drains every ring. A full ring never blocks: the record
//! is dropped and counted, and the count reaches the trace. When a thread exits, its ring
//! is marked orphaned; the writer drains what is left and then frees it for reuse by a
//! new thread, so thread churn does not grow memory.

pub mod record;
pub mod source;

use crate::base::{local, tsc};
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};

/// One host-side record: 64 bytes, plain data. `kind` says how to read the rest.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostRecord {
    pub kind: u16,
    pub a: u16,
    pub b: u32,
    pub tid: u32,
    pub corr: u32,
    pub t0: u64,
    pub t1: u64,
    pub x: [u64; 4],
}

/// `HostRecord::kind` values.
pub const REC_API: u16 = 1;
/// Symbol hooks (record.rs says how each is laid out).
pub const REC_COPY: u16 = 2;
pub const REC_CALL: u16 = 3;
pub const REC_HOST_ALLOC: u16 = 4;
pub const REC_NCCL: u16 = 5;
pub const REC_NCCL_COMM: u16 = 6;
pub const REC_NVTX: u16 = 7;
/// Part of the Python stack of the call whose record follows (session/pystack).
pub const REC_PYSTACK: u16 = 8;

const _: () = assert!(std::mem::size_of::<HostRecord>() == 64);

/// Slots per ring (a power of two). 16 Ki x 64 B = 1 MiB per recording thread; the
/// writer drains every few milliseconds, so a thread would have to record more than a
/// few million events per second to fill it.
pub const RING_SLOTS: usize = 1 << 14;

const FREE: u8 = 0;
const OWNED: u8 = 1;
const ORPHANED: u8 = 2;

#[repr(align(64))]
struct Padded<T>(T);

pub struct Ring {
    /// Next slot the producer writes (producer stores, consumer loads).
    head: Padded<AtomicUsize>,
    /// Next slot the consumer reads (consumer stores, producer loads).
    tail: Padded<AtomicUsize>,
    /// The producer's last view of `tail`, so a push needs no shared load while there is room.
    cached_tail: Padded<UnsafeCell<usize>>,
    dropped: AtomicU64,
    /// The owning thread's time inside our CUPTI callbacks (stamp ticks) and how many
    /// callbacks: running totals, written by the producer alone (load and store, no
    /// read-modify-write on the launch path), read by the consumer.
    own_ticks: AtomicU64,
    own_calls: AtomicU64,
    owner: AtomicU8,
    tid: AtomicUsize,
    next: AtomicPtr<Ring>,
    slots: Box<[UnsafeCell<MaybeUninit<HostRecord>>]>,
}

// SAFETY: slots are written only by the owning thread (between its load of `tail` and
// its release store of `head`) and read only by the single consumer (between its
// acquire load of `head` and its release store of `tail`); the indices never overlap.
unsafe impl Sync for Ring {}
// SAFETY: as above; a ring moves between threads only through the global list.
unsafe impl Send for Ring {}

static RINGS: AtomicPtr<Ring> = AtomicPtr::new(ptr::null_mut());
/// Records lost because a ring could not be had at all.
static LOST_NO_RING: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static RELEASE: ReleaseOnExit = const { ReleaseOnExit };
}

/// This thread's ring (null: none yet), kept in `base::local`.
#[inline]
fn mine(l: &local::Local) -> *const Ring {
    l.ring.get() as *const Ring
}

/// Marks the thread's ring orphaned when the thread exits.
struct ReleaseOnExit;

impl Drop for ReleaseOnExit {
    fn drop(&mut self) {
        let r = local::with(|l| l.ring.replace(ptr::null())) as *const Ring;
        if !r.is_null() {
            // SAFETY: rings are never deallocated while on the list (they are reused).
            unsafe { (*r).owner.store(ORPHANED, Ordering::Release) };
        }
    }
}

impl Ring {
    fn new(tid: u32) -> Ring {
        let slots = (0..RING_SLOTS)
            .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
            .collect::<Vec<_>>()
            .into_boxed_slice();
        Ring {
            head: Padded(AtomicUsize::new(0)),
            tail: Padded(AtomicUsize::new(0)),
            cached_tail: Padded(UnsafeCell::new(0)),
            dropped: AtomicU64::new(0),
            own_ticks: AtomicU64::new(0),
            own_calls: AtomicU64::new(0),
            owner: AtomicU8::new(OWNED),
            tid: AtomicUsize::new(tid as usize),
            next: AtomicPtr::new(ptr::null_mut()),
            slots,
        }
    }

    /// Writes one record; returns false (and counts it) when the ring is full.
    ///
    /// # Safety
    /// Only the ring's owning thread may call this.
    #[inline]
    unsafe fn push(&self, rec: &HostRecord) -> bool {
        let head = self.head.0.load(Ordering::Relaxed);
        // SAFETY: cached_tail is only touched by the owning producer (caller's contract).
        let cached = unsafe { &mut *self.cached_tail.0.get() };
        if head.wrapping_sub(*cached) >= RING_SLOTS {
            *cached = self.tail.0.load(Ordering::Acquire);
            if head.wrapping_sub(*cached) >= RING_SLOTS {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return false;
            }
        }
        // SAFETY: slot `head` is outside [tail, head), so the consumer is not reading it.
        unsafe { (*self.slots[head & (RING_SLOTS - 1)].get()).write(*rec) };
        self.head.0.store(head.wrapping_add(1), Ordering::Release);
        true
    }

    /// Reads every record published so far into `f`; returns how many.
    fn drain(&self, f: &mut impl FnMut(u32, &HostRecord)) -> usize {
        let tail = self.tail.0.load(Ordering::Relaxed);
        let head = self.head.0.load(Ordering::Acquire);
        let tid = self.tid.load(Ordering::Relaxed) as u32;
        let mut i = tail;
        while i != head {
            // SAFETY: slots in [tail, head) were fully written before the release store
            // of `head` we acquired, and the producer does not touch them until `tail` moves.
            let rec = unsafe { (*self.slots[i & (RING_SLOTS - 1)].get()).assume_init_ref() };
            f(tid, rec);
            i = i.wrapping_add(1);
        }
        self.tail.0.store(head, Ordering::Release);
        head.wrapping_sub(tail)
    }
}

fn claim_ring(tid: u32) -> *const Ring {
    // Reuse a ring an exited thread left behind, once the writer has drained it.
    let mut p = RINGS.load(Ordering::Acquire);
    while !p.is_null() {
        // SAFETY: list nodes are leaked boxes, valid for the life of the process.
        let r = unsafe { &*p };
        if r.owner
            .compare_exchange(FREE, OWNED, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            r.tid.store(tid as usize, Ordering::Relaxed);
            // SAFETY: we own the ring now; cached_tail belongs to its producer.
            unsafe { *r.cached_tail.0.get() = r.tail.0.load(Ordering::Acquire) };
            return p;
        }
        p = r.next.load(Ordering::Acquire);
    }
    let node = Box::into_raw(Box::new(Ring::new(tid)));
    let mut head = RINGS.load(Ordering::Acquire);
    loop {
        // SAFETY: `node` is ours until published by the CAS below.
        unsafe { (*node).next.store(head, Ordering::Relaxed) };
        match RINGS.compare_exchange_weak(head, node, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return node,
            Err(h) => head = h,
        }
    }
}

/// Records `rec` in the calling thread's ring. Never blocks; on a full ring the record is
/// counted as dropped.
#[inline]
pub fn push(rec: &HostRecord) -> bool {
    let r = local::with(|l| {
        let mut r = mine(l);
        if r.is_null() {
            r = claim_ring(rec.tid);
            l.ring.set(r as *const ());
            // Arm the exit hook; if TLS is being torn down, the ring simply stays owned.
            let _ = RELEASE.try_with(|_| ());
        }
        r
    });
    match r {
        // SAFETY: this thread owns the ring stored in its own TLS slot.
        r if !r.is_null() => unsafe { (*r).push(rec) },
        _ => {
            LOST_NO_RING.fetch_add(1, Ordering::Relaxed);
            false
        }
    }
}

/// One in this many callbacks is timed (odd, so ENTERs and EXITs take turns); each
/// timed one counts for this many. Two clock reads per callback were a fifth of its
/// cost.
pub const OWN_COST_EVERY: u32 = 7;

/// One callback that began at `start` (a [`crate::base::tsc::stamp`]) ends: counted in
/// the calling thread's totals, and one in [`OWN_COST_EVERY`] timed. Nothing when the
/// thread has no ring yet (it gets one at its first record, so at most its first
/// callback goes uncounted).
#[inline]
pub fn note_own_call(start: u64) {
    local::with(|l| {
        let r = mine(l);
        if r.is_null() {
            return;
        }
        // SAFETY: rings live for the life of the process; this thread owns this one, so
        // it is the only writer of these two counters.
        let r = unsafe { &*r };
        r.own_calls.store(
            r.own_calls.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Relaxed,
        );
        let n = l.untimed.get() + 1;
        if n < OWN_COST_EVERY {
            l.untimed.set(n);
            return;
        }
        l.untimed.set(0);
        let ticks = tsc::stamp().wrapping_sub(start) * OWN_COST_EVERY as u64;
        r.own_ticks.store(
            r.own_ticks.load(Ordering::Relaxed).wrapping_add(ticks),
            Ordering::Relaxed,
        );
    })
}

/// The rings are process-global: tests that drain them must not overlap.
#[cfg(test)]
pub(crate) static TEST_SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Each ring's running cost totals: `f(ring, tid, calls, ticks)`, `ring` a stable key.
pub fn own_costs(mut f: impl FnMut(usize, u32, u64, u64)) {
    let mut p = RINGS.load(Ordering::Acquire);
    while !p.is_null() {
        // SAFETY: list nodes live for the life of the process.
        let r = unsafe { &*p };
        f(
            p as usize,
            r.tid.load(Ordering::Relaxed) as u32,
            r.own_calls.load(Ordering::Relaxed),
            r.own_ticks.load(Ordering::Relaxed),
        );
        p = r.next.load(Ordering::Acquire);
    }
}

/// Drains every ring. `f` gets each record with its thread id. Returns
/// (records drained, records dropped since the last call). Single consumer only.
pub fn drain_all(mut f: impl FnMut(u32, &HostRecord)) -> (usize, u64) {
    let mut n = 0;
    let mut dropped = LOST_NO_RING.swap(0, Ordering::Relaxed);
    let mut p = RINGS.load(Ordering::Acquire);
    while !p.is_null() {
        // SAFETY: list nodes live for the life of the process.
        let r = unsafe { &*p };
        let orphaned = r.owner.load(Ordering::Acquire) == ORPHANED;
        n += r.drain(&mut f);
        dropped += r.dropped.swap(0, Ordering::Relaxed);
        if orphaned {
            // Everything the dead thread published is drained: hand the ring out again.
            let _ = r
                .owner
                .compare_exchange(ORPHANED, FREE, Ordering::AcqRel, Ordering::Relaxed);
        }
        p = r.next.load(Ordering::Acquire);
    }
    (n, dropped)
}

/// In a forked child: forget every ring (their threads do not exist there) and the
/// caller's own. The old rings are leaked: a child must not free memory another
/// thread of the parent was in the middle of using.
pub fn reset_after_fork() {
    RINGS.store(ptr::null_mut(), Ordering::Release);
    LOST_NO_RING.store(0, Ordering::Relaxed);
    local::with(|l| l.ring.set(ptr::null()));
}

/// Appends the thread id of every ring a live thread owns: the threads that record
/// (CUDA calls, hooks), for the host sampler.
pub fn owner_tids(out: &mut Vec<u32>) {
    let mut p = RINGS.load(Ordering::Acquire);
    while !p.is_null() {
        // SAFETY: list nodes live for the life of the process.
        let r = unsafe { &*p };
        if r.owner.load(Ordering::Acquire) == OWNED {
            out.push(r.tid.load(Ordering::Relaxed) as u32);
        }
        p = r.next.load(Ordering::Acquire);
    }
}

/// Number of rings on the list (for tests and debug output).
pub fn ring_count() -> usize {
    let mut n = 0;
    let mut p = RINGS.load(Ordering::Acquire);
    while !p.is_null() {
        n += 1;
        // SAFETY: list nodes live for the life of the process.
        p = unsafe { (*p).next.load(Ordering::Acquire) };
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::TEST_SERIAL as SERIAL;

    fn rec(tid: u32, i: u64) -> HostRecord {
        HostRecord {
            kind: REC_API,
            tid,
            t0: i,
            ..Default::default()
        }
    }

    #[test]
    fn every_record_is_drained_or_counted() {
        let _g = SERIAL.lock().unwrap();
        drain_all(|_, _| {});
        let threads = 8;
        let per = 50_000u64;
        let seen = std::sync::Arc::new(AtomicU64::new(0));
        let done = std::sync::Arc::new(AtomicU8::new(0));
        let consumer = {
            let seen = seen.clone();
            let done = done.clone();
            std::thread::spawn(move || {
                let mut dropped = 0;
                loop {
                    let finished = done.load(Ordering::Acquire) == 1;
                    let (n, d) = drain_all(|_, _| {});
                    seen.fetch_add(n as u64, Ordering::Relaxed);
                    dropped += d;
                    if finished {
                        let (n, d) = drain_all(|_, _| {});
                        seen.fetch_add(n as u64, Ordering::Relaxed);
                        return dropped + d;
                    }
                    std::thread::yield_now();
                }
            })
        };
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                std::thread::spawn(move || {
                    let mut ok = 0u64;
                    for i in 0..per {
                        if push(&rec(t, i)) {
                            ok += 1;
                        }
                    }
                    ok
                })
            })
            .collect();
        let pushed: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
        done.store(1, Ordering::Release);
        let dropped = consumer.join().unwrap();
        assert_eq!(pushed + dropped, threads as u64 * per);
        assert_eq!(seen.load(Ordering::Relaxed), pushed);
    }

    #[test]
    fn a_full_ring_drops_and_counts() {
        let _g = SERIAL.lock().unwrap();
        drain_all(|_, _| {});
        let h = std::thread::spawn(|| {
            let mut ok = 0;
            for i in 0..(RING_SLOTS as u64 + 10) {
                if push(&rec(7, i)) {
                    ok += 1;
                }
            }
            ok
        });
        let ok = h.join().unwrap();
        assert_eq!(ok, RING_SLOTS);
        let mut order = vec![];
        let (n, dropped) = drain_all(|_, r| order.push(r.t0));
        assert_eq!(n, RING_SLOTS);
        assert_eq!(dropped, 10);
        assert!(order.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn exited_threads_leave_their_records_and_their_ring_is_reused() {
        let _g = SERIAL.lock().unwrap();
        drain_all(|_, _| {});
        std::thread::spawn(|| {
            for i in 0..100 {
                push(&rec(9, i));
            }
        })
        .join()
        .unwrap();
        let before = ring_count();
        let mut got = 0;
        drain_all(|tid, _| {
            assert_eq!(tid, 9);
            got += 1
        });
        assert_eq!(got, 100);
        std::thread::spawn(|| {
            push(&rec(10, 0));
        })
        .join()
        .unwrap();
        assert_eq!(ring_count(), before, "the orphaned ring was reused");
        let mut tids = vec![];
        drain_all(|tid, _| tids.push(tid));
        assert_eq!(tids, vec![10]);
    }
}
