//! What the GPU has been asked to do and has not done yet, and what every thread is
//! doing, for stall reports (format 2.4 `Stall`, `StallOp`, `StallThread`).
//!
//! * Launches: the API callback notes every successful launch at its EXIT in a fixed
//!   table of slots indexed by correlation id ([`note_launch`]): relaxed atomic stores,
//!   no lock, no allocation. The writer marks a slot done when it decodes the launch's
//!   completed GPU record ([`note_completed`]); a slot not done is an outstanding
//!   operation. A record CUPTI handed over incomplete (a forced flush while the
//!   operation ran) is kept aside with what it said ([`note_incomplete`]) and never
//!   becomes a kernel with a made-up end.
//! * Calls: every thread that makes a CUDA call through the callbacks has a slot saying
//!   which call it is inside and since when ([`call_enter`] / [`call_exit`]).
//! * Reports: the runtime's watchdog (`runtime::watchdog`) decides when; it queues a
//!   [`Request`], and [`StallSource`] (a writer source, drained after the CUPTI
//!   session's and the rings') builds the events on the writer thread, from the slots,
//!   the incomplete records, `/proc/self/task` and the latest Python stack samples.

pub mod source;

use crate::base::worker::lock;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Launch slots: more than the launches a GPU ever holds queued at once.
const SLOTS: usize = 8192;

struct Slot {
    /// The launch's correlation id (0: empty); written last.
    corr: AtomicU32,
    /// Equal to `corr` once its GPU record completed.
    done: AtomicU32,
    tid: AtomicU32,
    /// The launch call's entry stamp (`tsc::stamp`).
    stamp: AtomicU64,
    /// The kernel's name as the callback gave it (a `const char *` CUDA keeps).
    name: AtomicUsize,
    /// grid x, y, z, block x, y, z (0 when the call's parameters do not give them).
    dims: [AtomicU32; 6],
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            corr: AtomicU32::new(0),
            done: AtomicU32::new(0),
            tid: AtomicU32::new(0),
            stamp: AtomicU64::new(0),
            name: AtomicUsize::new(0),
            dims: [const { AtomicU32::new(0) }; 6],
        }
    }
}

static TABLE: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];

/// When the writer last decoded a completed GPU record (trace clock, 0: never), and
/// the latest end among them.
static LAST_COMPLETION: AtomicU64 = AtomicU64::new(0);
static LAST_END: AtomicU64 = AtomicU64::new(0);

/// A launch that returned successfully (API callback, at EXIT).
#[inline]
pub fn note_launch(corr: u32, tid: u32, stamp: u64, name: *const libc::c_char, dims: [u32; 6]) {
    if corr == 0 {
        return;
    }
    let s = &TABLE[corr as usize % SLOTS];
    s.corr.store(0, Ordering::Relaxed);
    s.tid.store(tid, Ordering::Relaxed);
    s.stamp.store(stamp, Ordering::Relaxed);
    s.name.store(name as usize, Ordering::Relaxed);
    for (d, v) in s.dims.iter().zip(dims) {
        d.store(v, Ordering::Relaxed);
    }
    s.done.store(0, Ordering::Relaxed);
    s.corr.store(corr, Ordering::Release);
}

/// A completed GPU record of launch `corr` that ended at `end` (writer thread).
pub fn note_completed(corr: u32, end: u64) {
    let s = &TABLE[corr as usize % SLOTS];
    if s.corr.load(Ordering::Acquire) == corr {
        s.done.store(corr, Ordering::Release);
    }
    // A record handed over incomplete earlier, complete now after all.
    if HAS_INCOMPLETE.load(Ordering::Acquire) {
        let mut v = lock(&INCOMPLETE);
        v.retain(|o| o.corr != corr);
        HAS_INCOMPLETE.store(!v.is_empty(), Ordering::Release);
    }
    LAST_END.fetch_max(end, Ordering::AcqRel);
    LAST_COMPLETION.store(crate::base::clock::now_ns(), Ordering::Release);
}

/// When a completed GPU record was last decoded (trace clock; 0: never).
pub fn last_completion() -> u64 {
    LAST_COMPLETION.load(Ordering::Acquire)
}

/// An operation CUPTI handed over incomplete, as its record said.
#[derive(Clone, Debug, Default)]
pub struct Incomplete {
    pub kind: u8,
    pub device: u32,
    pub stream: u32,
    pub corr: u32,
    /// Interned name (in this trace's string table), 0 when none.
    pub name: u32,
    pub start: u64,
    pub bytes: u64,
    pub grid: [u32; 3],
    pub block: [u32; 3],
}

static INCOMPLETE: Mutex<Vec<Incomplete>> = Mutex::new(Vec::new());
/// Whether INCOMPLETE has anything (so a completion need not take its lock).
static HAS_INCOMPLETE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// The most incomplete records kept (the newest are dropped beyond it).
const MAX_INCOMPLETE: usize = 4096;

/// A record CUPTI handed over before the operation completed (writer thread).
pub fn note_incomplete(op: Incomplete) {
    let mut v = lock(&INCOMPLETE);
    if v.iter().any(|o| o.corr == op.corr && o.kind == op.kind) || v.len() >= MAX_INCOMPLETE {
        return;
    }
    v.push(op);
    HAS_INCOMPLETE.store(true, Ordering::Release);
}

/// One outstanding operation, as the slots and the incomplete records say.
#[derive(Clone, Debug, Default)]
pub struct Outstanding {
    pub corr: u32,
    pub tid: u32,
    /// Launch stamp (`tsc::stamp`), 0 when not seen at launch.
    pub stamp: u64,
    pub name: usize,
    pub dims: [u32; 6],
    /// From an incomplete record, when CUPTI handed one over.
    pub record: Option<Incomplete>,
    pub at_launch: bool,
}

/// Every outstanding operation, oldest launch first.
pub fn outstanding() -> Vec<Outstanding> {
    let mut v = Vec::new();
    for s in TABLE.iter() {
        let corr = s.corr.load(Ordering::Acquire);
        if corr == 0 || s.done.load(Ordering::Acquire) == corr {
            continue;
        }
        let mut dims = [0u32; 6];
        for (d, a) in dims.iter_mut().zip(&s.dims) {
            *d = a.load(Ordering::Relaxed);
        }
        let o = Outstanding {
            corr,
            tid: s.tid.load(Ordering::Relaxed),
            stamp: s.stamp.load(Ordering::Relaxed),
            name: s.name.load(Ordering::Relaxed),
            dims,
            record: None,
            at_launch: true,
        };
        // Re-checked: the slot may have been reused while it was read.
        if s.corr.load(Ordering::Acquire) == corr {
            v.push(o);
        }
    }
    for r in lock(&INCOMPLETE).iter() {
        match v.iter_mut().find(|o| o.corr == r.corr) {
            Some(o) => o.record = Some(r.clone()),
            None => v.push(Outstanding {
                corr: r.corr,
                record: Some(r.clone()),
                ..Default::default()
            }),
        }
    }
    v.sort_by_key(|o| (o.stamp == 0, o.stamp, o.corr));
    v
}

/// From the slots only (the watchdog's cheap check): the outstanding launches' count,
/// the earliest launch stamp among them (0 when none), and the latest launch stamp of
/// all (0 when none).
pub fn outstanding_launches() -> (usize, u64, u64) {
    let mut n = 0;
    let mut oldest = u64::MAX;
    let mut newest = 0;
    for s in TABLE.iter() {
        let corr = s.corr.load(Ordering::Acquire);
        if corr == 0 {
            continue;
        }
        let stamp = s.stamp.load(Ordering::Relaxed);
        newest = newest.max(stamp);
        if s.done.load(Ordering::Acquire) == corr {
            continue;
        }
        n += 1;
        oldest = oldest.min(stamp);
    }
    (n, if n == 0 { 0 } else { oldest }, newest)
}

/// The stall is over: the operations outstanding now are taken as done (the GPU moved
/// past them; CUPTI does not hand over again a record it handed over incomplete).
pub fn forget_outstanding() {
    for s in TABLE.iter() {
        let corr = s.corr.load(Ordering::Acquire);
        if corr != 0 {
            s.done.store(corr, Ordering::Release);
        }
    }
    lock(&INCOMPLETE).clear();
    HAS_INCOMPLETE.store(false, Ordering::Release);
}

// ---------------------------------------------------------------------------------
// The call each thread is in.

/// Threads with a call slot at most (the rest are reported without their call).
const MAX_THREADS: usize = 1024;

struct CallSlot {
    tid: AtomicU32,
    /// (domain << 16 | cbid) + 1 of the CUDA call the thread is inside; 0: none.
    call: AtomicU32,
    /// The call's entry stamp (`tsc::stamp`).
    since: AtomicU64,
    /// The NCCL call the thread is inside ([`NCCL_CALLS`] index + 1; 0: none), and its
    /// entry stamp: the outer call when NCCL makes CUDA calls of its own.
    nccl: AtomicU32,
    nccl_since: AtomicU64,
}

/// The domain [`calls_in_flight`] gives NCCL calls (its cbid: an [`NCCL_CALLS`] index).
pub const DOMAIN_NCCL: u8 = 0xff;

/// The NCCL calls the symbol hooks mark ([`in_nccl_call`]).
pub const NCCL_CALLS: &[&str] = &[
    "ncclAllReduce",
    "ncclReduce",
    "ncclBroadcast",
    "ncclBcast",
    "ncclAllGather",
    "ncclReduceScatter",
    "ncclSend",
    "ncclRecv",
    "ncclGroupStart",
    "ncclGroupEnd",
    "ncclCommInitRank",
    "ncclCommInitRankConfig",
    "ncclCommInitRankScalable",
    "ncclCommInitAll",
    "ncclCommSplit",
    "ncclCommDestroy",
    "ncclCommAbort",
];

/// Runs NCCL call `name` (one of [`NCCL_CALLS`]) with the calling thread marked as
/// inside it while a trace records.
#[inline]
pub fn in_nccl_call<R>(name: &str, call: impl FnOnce() -> R) -> R {
    if !crate::base::state::is_tracing() {
        return call();
    }
    // A few short compares, only while tracing, on a call that costs microseconds.
    match NCCL_CALLS.iter().position(|n| *n == name) {
        Some(idx) => marked_nccl(idx, call),
        None => call(),
    }
}

/// Runs `call` with the calling thread marked as inside NCCL call `idx`.
fn marked_nccl<R>(idx: usize, call: impl FnOnce() -> R) -> R {
    let Some(s) = my_slot() else {
        return call();
    };
    let prev = s.nccl.load(Ordering::Relaxed);
    let prev_since = s.nccl_since.load(Ordering::Relaxed);
    s.nccl_since
        .store(crate::base::tsc::stamp(), Ordering::Relaxed);
    s.nccl.store(idx as u32 + 1, Ordering::Release);
    let r = call();
    s.nccl_since.store(prev_since, Ordering::Relaxed);
    s.nccl.store(prev, Ordering::Release);
    r
}

static CALLS: [CallSlot; MAX_THREADS] = [const {
    CallSlot {
        tid: AtomicU32::new(0),
        call: AtomicU32::new(0),
        since: AtomicU64::new(0),
        nccl: AtomicU32::new(0),
        nccl_since: AtomicU64::new(0),
    }
}; MAX_THREADS];
static CALLS_USED: AtomicUsize = AtomicUsize::new(0);

/// A free slot in CALLS for the calling thread: its index plus 1 (usize::MAX: none).
#[cold]
fn take_slot() -> usize {
    let i = CALLS_USED.fetch_add(1, Ordering::AcqRel);
    if i < MAX_THREADS {
        CALLS[i]
            .tid
            .store(crate::base::clock::tid(), Ordering::Release);
        i + 1
    } else {
        usize::MAX
    }
}

/// This thread's slot in CALLS (its index plus 1 is kept in `base::local`).
#[inline]
fn my_slot() -> Option<&'static CallSlot> {
    let i = crate::base::local::with(|l| {
        let c = &l.call_slot;
        let v = c.get();
        if v != 0 {
            return v;
        }
        let v = take_slot();
        c.set(v);
        v
    });
    match i {
        v if v != 0 && v != usize::MAX => Some(&CALLS[v - 1]),
        _ => None,
    }
}

/// The calling thread enters CUDA call (`domain`, `cbid`) at `stamp`.
#[inline]
pub fn call_enter(domain: u8, cbid: u32, stamp: u64) {
    if let Some(s) = my_slot() {
        s.since.store(stamp, Ordering::Relaxed);
        s.call.store(
            ((domain as u32) << 16 | (cbid & 0xffff)) + 1,
            Ordering::Release,
        );
    }
}

/// The calling thread left its CUDA call.
#[inline]
pub fn call_exit() {
    if let Some(s) = my_slot() {
        s.call.store(0, Ordering::Release);
    }
}

/// (tid, domain, cbid, entry stamp) of every thread inside a call now: its CUDA call,
/// else its NCCL call (domain [`DOMAIN_NCCL`]).
pub fn calls_in_flight() -> Vec<(u32, u8, u32, u64)> {
    let n = CALLS_USED.load(Ordering::Acquire).min(MAX_THREADS);
    let mut v = Vec::new();
    for s in &CALLS[..n] {
        let tid = s.tid.load(Ordering::Relaxed);
        let c = s.call.load(Ordering::Acquire);
        if c != 0 {
            let c = c - 1;
            v.push((
                tid,
                (c >> 16) as u8,
                c & 0xffff,
                s.since.load(Ordering::Relaxed),
            ));
            continue;
        }
        let k = s.nccl.load(Ordering::Acquire);
        if k != 0 {
            v.push((
                tid,
                DOMAIN_NCCL,
                k - 1,
                s.nccl_since.load(Ordering::Relaxed),
            ));
        }
    }
    v
}

// ---------------------------------------------------------------------------------
// Report requests, from the watchdog to the writer.

/// What the writer is asked to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// Report `id`'s `seq`th time (a forced flush was made just before when `forced`).
    Report { id: u32, seq: u32, forced: bool },
    /// The process is ending: report what is still outstanding (if anything) as
    /// stall `id`, report `seq`.
    End { id: u32, seq: u32 },
    /// Stall `id` is over.
    Resolved { id: u32 },
}

static REQUESTS: Mutex<Vec<(u64, Request)>> = Mutex::new(Vec::new());

/// Queues a request made at `ts` (trace clock) and wakes the writer.
pub fn request(ts: u64, r: Request) {
    lock(&REQUESTS).push((ts, r));
    crate::writer::write_soon();
}

pub(crate) fn take_requests() -> Vec<(u64, Request)> {
    std::mem::take(&mut *lock(&REQUESTS))
}

/// Puts requests taken back ahead of any queued since, for the writer's next pass.
pub(crate) fn put_back(mut reqs: Vec<(u64, Request)>) {
    let mut q = lock(&REQUESTS);
    reqs.append(&mut q);
    *q = reqs;
}

/// In a forked child: the parent's launches and threads are not the child's.
pub fn forget_after_fork() {
    for s in TABLE.iter() {
        s.corr.store(0, Ordering::Relaxed);
        s.done.store(0, Ordering::Relaxed);
    }
    for s in CALLS.iter() {
        s.tid.store(0, Ordering::Relaxed);
        s.call.store(0, Ordering::Relaxed);
        s.nccl.store(0, Ordering::Relaxed);
    }
    CALLS_USED.store(0, Ordering::Release);
    crate::base::local::with(|l| l.call_slot.set(0));
    LAST_COMPLETION.store(0, Ordering::Relaxed);
    LAST_END.store(0, Ordering::Relaxed);
    if let Ok(mut v) = INCOMPLETE.try_lock() {
        v.clear();
    }
    HAS_INCOMPLETE.store(false, Ordering::Relaxed);
    if let Ok(mut v) = REQUESTS.try_lock() {
        v.clear();
    }
}

/// The latest end of a completed GPU record (trace clock; 0: none).
pub fn last_end() -> u64 {
    LAST_END.load(Ordering::Acquire)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_is_outstanding_until_its_record_completes() {
        note_launch(9_000_001, 7, 100, std::ptr::null(), [1, 2, 3, 4, 5, 6]);
        let o = outstanding();
        let me = o.iter().find(|o| o.corr == 9_000_001).expect("outstanding");
        assert_eq!(me.tid, 7);
        assert_eq!(me.dims, [1, 2, 3, 4, 5, 6]);
        note_completed(9_000_001, 500);
        assert!(outstanding().iter().all(|o| o.corr != 9_000_001));
        assert!(last_end() >= 500);
        assert!(last_completion() > 0);
    }

    #[test]
    fn an_incomplete_record_is_outstanding_until_a_complete_one_comes() {
        note_incomplete(Incomplete {
            kind: gputrace_format::STALL_OP_KERNEL,
            corr: 9_100_001,
            start: 5,
            ..Default::default()
        });
        let o = outstanding();
        let me = o.iter().find(|o| o.corr == 9_100_001).expect("outstanding");
        assert!(!me.at_launch && me.record.as_ref().is_some_and(|r| r.start == 5));
        note_completed(9_100_001, 10);
        assert!(outstanding().iter().all(|o| o.corr != 9_100_001));
    }

    #[test]
    fn a_thread_in_a_call_is_seen_until_it_leaves() {
        let tid = crate::base::clock::tid();
        call_enter(1, 165, 42);
        let c = calls_in_flight();
        assert!(c.contains(&(tid, 1, 165, 42)), "{c:?}");
        call_exit();
        assert!(calls_in_flight().iter().all(|c| c.0 != tid));
    }

    #[test]
    fn an_nccl_call_is_seen_around_the_cuda_calls_it_makes() {
        let tid = crate::base::clock::tid();
        let nccl = NCCL_CALLS
            .iter()
            .position(|n| *n == "ncclGroupEnd")
            .unwrap();
        let seen = marked_nccl(nccl, || {
            let outer = calls_in_flight();
            call_enter(1, 131, 7);
            let inner = calls_in_flight();
            call_exit();
            (outer, inner, calls_in_flight())
        });
        let nccl = nccl as u32;
        let of_me =
            |v: &Vec<(u32, u8, u32, u64)>| v.iter().find(|c| c.0 == tid).map(|c| (c.1, c.2));
        assert_eq!(of_me(&seen.0), Some((DOMAIN_NCCL, nccl)));
        assert_eq!(of_me(&seen.1), Some((1, 131)));
        assert_eq!(of_me(&seen.2), Some((DOMAIN_NCCL, nccl)));
        assert_eq!(of_me(&calls_in_flight()), None);
    }
}
