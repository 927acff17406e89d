//! NCCL communicators: `ncclComm_t` -> (cross-rank id, rank, size, sequence numbers).
//!
//! Filled when a communicator is made (rare; a small spin lock orders writers), read by
//! every collective with no lock: a fixed open-addressing table of atomics, linear
//! probing, deleted slots left as tombstones so probes run past them.
//!
//! Ids are the same on every rank of a communicator, so traces of different ranks can
//! be joined: FNV-1a of the `ncclUniqueId` all ranks passed to ncclCommInitRank; for a
//! split, of (parent id, the parent's split count, color), since every rank of the
//! parent makes the same splits in the same order. ncclCommInitAll makes all of its
//! communicators in one process: their id is unique within the process only.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

pub const SLOTS: usize = 4096;
const EMPTY: usize = 0;
const TOMBSTONE: usize = 1;
/// rank / nranks not known.
pub const UNKNOWN: u32 = u32::MAX;

pub struct Slot {
    key: AtomicUsize,
    id: AtomicU64,
    /// rank (low 32 bits) and nranks (high 32 bits), `UNKNOWN` each when not known.
    ranks: AtomicU64,
    /// Collectives issued on this communicator by this process.
    coll_seq: AtomicU64,
    /// Point-to-point calls issued.
    p2p_seq: AtomicU64,
    /// Splits made from it.
    splits: AtomicU64,
    /// Rank and size were asked of NCCL already (asked once: a getter that fails once
    /// is not called on every collective).
    asked: AtomicBool,
}

impl Slot {
    pub fn id(&self) -> u64 {
        self.id.load(Ordering::Relaxed)
    }
    pub fn ranks(&self) -> (u32, u32) {
        let v = self.ranks.load(Ordering::Relaxed);
        (v as u32, (v >> 32) as u32)
    }
    pub fn set_ranks(&self, rank: u32, nranks: u32) {
        self.ranks
            .store(rank as u64 | (nranks as u64) << 32, Ordering::Relaxed);
    }
    /// The next collective (or point-to-point) sequence number, from 1. An atomic add
    /// (about 4 ns, bench/cpu-hooks.md): numbers stay unique even in a program that
    /// breaks NCCL's rule of one thread per communicator at a time.
    #[inline]
    pub fn next_seq(&self, p2p: bool) -> u64 {
        let c = if p2p { &self.p2p_seq } else { &self.coll_seq };
        c.fetch_add(1, Ordering::Relaxed) + 1
    }
    /// The next split number, from 1.
    pub fn next_split(&self) -> u64 {
        self.splits.fetch_add(1, Ordering::Relaxed) + 1
    }
    /// True the first time only: may the hooks ask NCCL for rank and size?
    pub fn may_ask(&self) -> bool {
        !self.asked.swap(true, Ordering::Relaxed)
    }
}

#[allow(clippy::declare_interior_mutable_const)]
const SLOT: Slot = Slot {
    key: AtomicUsize::new(EMPTY),
    id: AtomicU64::new(0),
    ranks: AtomicU64::new(u64::MAX),
    coll_seq: AtomicU64::new(0),
    p2p_seq: AtomicU64::new(0),
    splits: AtomicU64::new(0),
    asked: AtomicBool::new(false),
};

static TABLE: [Slot; SLOTS] = [SLOT; SLOTS];
static LOCK: AtomicBool = AtomicBool::new(false);
/// Communicators not recorded because the table was full.
pub static FULL: AtomicU64 = AtomicU64::new(0);

#[inline]
fn home(comm: usize) -> usize {
    // Fibonacci hashing of the pointer (allocations are 16-byte aligned).
    ((comm as u64 >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize & (SLOTS - 1)
}

/// The slot of `comm`, if it is known. Lock-free.
#[inline]
pub fn lookup(comm: usize) -> Option<&'static Slot> {
    if comm <= TOMBSTONE {
        return None;
    }
    let mut i = home(comm);
    for _ in 0..SLOTS {
        let s = &TABLE[i];
        let k = s.key.load(Ordering::Acquire);
        if k == comm {
            return Some(s);
        }
        if k == EMPTY {
            return None;
        }
        i = (i + 1) & (SLOTS - 1);
    }
    None
}

struct Locked;

impl Locked {
    fn take() -> Locked {
        while LOCK
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
            std::thread::yield_now();
        }
        Locked
    }
    fn try_take() -> Option<Locked> {
        LOCK.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            .then_some(Locked)
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        LOCK.store(false, Ordering::Release);
    }
}

fn insert_locked(
    _l: &Locked,
    comm: usize,
    id: u64,
    rank: u32,
    nranks: u32,
) -> Option<&'static Slot> {
    if let Some(s) = lookup(comm) {
        s.id.store(id, Ordering::Relaxed);
        s.set_ranks(rank, nranks);
        return Some(s);
    }
    let mut i = home(comm);
    for _ in 0..SLOTS {
        let s = &TABLE[i];
        let k = s.key.load(Ordering::Relaxed);
        if k == EMPTY || k == TOMBSTONE {
            s.id.store(id, Ordering::Relaxed);
            s.set_ranks(rank, nranks);
            s.coll_seq.store(0, Ordering::Relaxed);
            s.p2p_seq.store(0, Ordering::Relaxed);
            s.splits.store(0, Ordering::Relaxed);
            s.asked.store(false, Ordering::Relaxed);
            // Published last: a reader that sees the key sees the values.
            s.key.store(comm, Ordering::Release);
            return Some(s);
        }
        i = (i + 1) & (SLOTS - 1);
    }
    FULL.fetch_add(1, Ordering::Relaxed);
    None
}

/// Records a new communicator (or updates a known one).
pub fn insert(comm: usize, id: u64, rank: u32, nranks: u32) -> Option<&'static Slot> {
    if comm <= TOMBSTONE {
        return None;
    }
    let l = Locked::take();
    insert_locked(&l, comm, id, rank, nranks)
}

/// Records a communicator first seen in a collective, unless another thread is
/// changing the table right now (the hot path never waits).
pub fn insert_if_free(comm: usize, id: u64, rank: u32, nranks: u32) -> Option<&'static Slot> {
    if comm <= TOMBSTONE {
        return None;
    }
    let l = Locked::try_take()?;
    insert_locked(&l, comm, id, rank, nranks)
}

/// Forgets a destroyed communicator; returns what was known of it.
pub fn remove(comm: usize) -> Option<(u64, u32, u32)> {
    if comm <= TOMBSTONE {
        return None;
    }
    let _l = Locked::take();
    let s = lookup(comm)?;
    let (r, n) = s.ranks();
    let out = (s.id(), r, n);
    s.key.store(TOMBSTONE, Ordering::Release);
    Some(out)
}

/// FNV-1a, 64 bits, over several byte strings; never 0 (0 means "not known").
pub fn hash(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in *p {
            h ^= *b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h.max(1)
}

/// The id of a communicator split from `parent_id` with `color`, as the `n`-th split.
pub fn split_id(parent_id: u64, n: u64, color: i32) -> u64 {
    hash(&[
        b"split",
        &parent_id.to_le_bytes(),
        &n.to_le_bytes(),
        &color.to_le_bytes(),
    ])
}

/// In a forked child: a parent thread may have held the lock.
pub fn after_fork() {
    LOCK.store(false, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_lookup_remove() {
        let a = 0x7000_1000usize;
        let b = 0x7000_2000usize;
        assert!(lookup(a).is_none());
        insert(a, 11, 0, 4).unwrap();
        insert(b, 22, 3, 8).unwrap();
        assert_eq!(lookup(a).unwrap().id(), 11);
        assert_eq!(lookup(b).unwrap().ranks(), (3, 8));
        let s = lookup(a).unwrap();
        assert_eq!(
            (s.next_seq(false), s.next_seq(false), s.next_seq(true)),
            (1, 2, 1)
        );
        assert_eq!(remove(a), Some((11, 0, 4)));
        assert!(lookup(a).is_none());
        assert_eq!(lookup(b).unwrap().id(), 22, "found past the tombstone");
        // A comm at the same address again starts afresh.
        insert(a, 33, 1, 2).unwrap();
        assert_eq!(lookup(a).unwrap().next_seq(false), 1);
        remove(a);
        remove(b);
    }

    #[test]
    fn colliding_pointers_probe_past_each_other() {
        // Enough pointers that home slots collide: every one must still be found.
        let base = 0x5500_0000_0000usize;
        let ptrs: Vec<usize> = (0..3000).map(|i| base + i * 4096).collect();
        for (i, p) in ptrs.iter().enumerate() {
            insert(*p, i as u64 + 1, i as u32, 3000).unwrap();
        }
        for (i, p) in ptrs.iter().enumerate() {
            assert_eq!(lookup(*p).unwrap().id(), i as u64 + 1);
        }
        for p in &ptrs {
            remove(*p);
        }
        assert!(ptrs.iter().all(|p| lookup(*p).is_none()));
    }

    #[test]
    fn ids_are_stable_and_distinct() {
        let uid = [7u8; 128];
        assert_eq!(hash(&[&uid]), hash(&[&uid]));
        assert_ne!(hash(&[&uid]), hash(&[&[8u8; 128]]));
        let p = hash(&[&uid]);
        assert_ne!(split_id(p, 1, 0), split_id(p, 1, 1));
        assert_ne!(split_id(p, 1, 0), split_id(p, 2, 0));
        assert_ne!(hash(&[]), 0);
    }
}
