//! NCCL hooks: collectives and point-to-point calls (with their communicator's
//! cross-rank id, rank, size and sequence number), group brackets, and the
//! communicator life cycle that fills the table in `comms.rs`.
//!
//! CUPTI never sees NCCL's API, so these record whenever the hooks trace. A
//! communicator the table does not know (made by a call not hooked here, such as
//! ncclCommShrink) is added at its first collective with id 0 and the rank and size
//! NCCL reports for it.

#![allow(non_snake_case)] // the exported names are the C API's

use super::comms::{self, UNKNOWN};
use super::resolve::{real, NCCL};
use super::{hook_table, recording, run, run_at, run_keeping, Action, Entry, Ran, Site};
use crate::base::ffi::guarded_value;
use crate::rings::{self as ring, record as rec};
use crate::session::stall;
use gputrace_format as fmt;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};

pub type NcclResult = c_int;
pub type Comm = *mut c_void;
pub type Stream = *mut c_void;

/// `ncclInProgress`: a nonblocking call returned before finishing; its communicator
/// handle is valid already.
const IN_PROGRESS: NcclResult = 7;

/// `ncclUniqueId`, passed by value (128 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    pub internal: [u8; 128],
}

fn rank32(r: c_int) -> u32 {
    if r < 0 {
        UNKNOWN
    } else {
        r as u32
    }
}

fn rank_i32(r: u32) -> i32 {
    if r == UNKNOWN {
        -1
    } else {
        r as i32
    }
}

/// The reduction as the trace stores it (dynamic PreMulSum ops are "custom").
pub fn redop8(op: c_int) -> u8 {
    if (0..=4).contains(&op) {
        op as u8
    } else {
        fmt::NCCL_CUSTOM_REDOP
    }
}

/// Rank and size NCCL reports for `comm` (`UNKNOWN` where it cannot say yet).
fn query_ranks(comm: Comm) -> (u32, u32) {
    type F = unsafe extern "C" fn(Comm, *mut c_int) -> NcclResult;
    let ask = |f: Result<F, i32>| {
        let mut v: c_int = -1;
        match f {
            // SAFETY: a getter with a valid out-pointer, on the caller's communicator.
            Ok(f) if unsafe { f(comm, &mut v) } == 0 => rank32(v),
            _ => UNKNOWN,
        }
    };
    (
        ask(real!(NCCL, c"ncclCommUserRank", F)),
        ask(real!(NCCL, c"ncclCommCount", F)),
    )
}

/// (id, rank, nranks, seq) of `comm` for one call. No lock unless the communicator is
/// new to the table, and then only if the table is free this instant.
#[inline]
fn comm_info(comm: Comm, p2p: bool) -> (u64, i32, i32, u64) {
    if comm.is_null() {
        return (0, -1, -1, 0);
    }
    let slot = match comms::lookup(comm as usize) {
        Some(s) => Some(s),
        None => {
            let (r, n) = query_ranks(comm);
            let s = comms::insert_if_free(comm as usize, 0, r, n);
            if let Some(s) = s {
                s.may_ask();
            }
            s
        }
    };
    let Some(s) = slot else {
        let (r, n) = query_ranks(comm);
        return (0, rank_i32(r), rank_i32(n), 0);
    };
    let (mut r, mut n) = s.ranks();
    if (r == UNKNOWN || n == UNKNOWN) && s.may_ask() {
        // Made nonblocking, or split while in progress: NCCL can say by now.
        (r, n) = query_ranks(comm);
        if r != UNKNOWN && n != UNKNOWN {
            s.set_ranks(r, n);
        }
    }
    (s.id(), rank_i32(r), rank_i32(n), s.next_seq(p2p))
}

struct Op {
    op: u8,
    comm: Comm,
    stream: Stream,
    count: usize,
    datatype: c_int,
    redop: u8,
    peer_or_root: c_int,
}

#[inline(always)]
fn record_op(e: &Entry, t1: u64, r: NcclResult, o: Op) {
    let p2p = matches!(o.op, fmt::NCCL_SEND | fmt::NCCL_RECV);
    let (comm_id, rank, nranks, seq) = comm_info(o.comm, p2p);
    ring::push(&rec::nccl(&fmt::Nccl {
        start: e.t0,
        end: t1,
        tid: e.tid,
        op: o.op,
        stream: o.stream as u64,
        count: o.count as u64,
        bytes: 0,
        datatype: o.datatype as u8,
        redop: o.redop,
        peer_or_root: o.peer_or_root,
        comm_id,
        rank,
        nranks,
        seq,
        result: r as u32,
    }));
}

// ---------------------------------------------------------------------------------
// The hooks. Every real call runs inside `stall::in_nccl_call`, which names the NCCL
// call a thread is in for the stall report (its names: `stall::NCCL_CALLS`).

hook_table! {
    NCCL, inside stall::in_nccl_call;

    extern "C" fn ncclAllReduce(
        send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, op: c_int,
        comm: Comm, stream: Stream,
    ) -> NcclResult;
        => Op { op: fmt::NCCL_ALL_REDUCE, comm, stream, count, datatype,
                redop: redop8(op), peer_or_root: -1 };

    extern "C" fn ncclReduce(
        send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, op: c_int,
        root: c_int, comm: Comm, stream: Stream,
    ) -> NcclResult;
        => Op { op: fmt::NCCL_REDUCE, comm, stream, count, datatype,
                redop: redop8(op), peer_or_root: root };

    extern "C" fn ncclBroadcast(
        send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int, root: c_int,
        comm: Comm, stream: Stream,
    ) -> NcclResult;
        => Op { op: fmt::NCCL_BROADCAST, comm, stream, count, datatype,
                redop: fmt::NCCL_NO_REDOP, peer_or_root: root };

    /// The legacy in-place broadcast (PyTorch's ProcessGroupNCCL uses it).
    extern "C" fn ncclBcast(
        buff: *mut c_void, count: usize, datatype: c_int, root: c_int, comm: Comm,
        stream: Stream,
    ) -> NcclResult;
        => Op { op: fmt::NCCL_BROADCAST, comm, stream, count, datatype,
                redop: fmt::NCCL_NO_REDOP, peer_or_root: root };

    extern "C" fn ncclAllGather(
        send: *const c_void, recv: *mut c_void, sendcount: usize, datatype: c_int, comm: Comm,
        stream: Stream,
    ) -> NcclResult;
        => Op { op: fmt::NCCL_ALL_GATHER, comm, stream, count: sendcount, datatype,
                redop: fmt::NCCL_NO_REDOP, peer_or_root: -1 };

    extern "C" fn ncclReduceScatter(
        send: *const c_void, recv: *mut c_void, recvcount: usize, datatype: c_int, op: c_int,
        comm: Comm, stream: Stream,
    ) -> NcclResult;
        => Op { op: fmt::NCCL_REDUCE_SCATTER, comm, stream, count: recvcount, datatype,
                redop: redop8(op), peer_or_root: -1 };

    extern "C" fn ncclSend(
        send: *const c_void, count: usize, datatype: c_int, peer: c_int, comm: Comm,
        stream: Stream,
    ) -> NcclResult;
        => Op { op: fmt::NCCL_SEND, comm, stream, count, datatype,
                redop: fmt::NCCL_NO_REDOP, peer_or_root: peer };

    extern "C" fn ncclRecv(
        recv: *mut c_void, count: usize, datatype: c_int, peer: c_int, comm: Comm,
        stream: Stream,
    ) -> NcclResult;
        => Op { op: fmt::NCCL_RECV, comm, stream, count, datatype,
                redop: fmt::NCCL_NO_REDOP, peer_or_root: peer };

    extern "C" fn ncclGroupStart() -> NcclResult;
        => Group(fmt::NCCL_GROUP_START);

    extern "C" fn ncclGroupEnd() -> NcclResult;
        => Group(fmt::NCCL_GROUP_END);

    extern "C" fn ncclCommInitRank(
        comm: *mut Comm, nranks: c_int, comm_id: UniqueId, rank: c_int,
    ) -> NcclResult;
        => CommMade(fmt::NCCL_COMM_INIT_RANK,
                Makes::Rank { out: comm, ids: Ids::One(comm_id), rank, nranks });

    extern "C" fn ncclCommInitRankConfig(
        comm: *mut Comm, nranks: c_int, comm_id: UniqueId, rank: c_int, config: *mut c_void,
    ) -> NcclResult;
        => CommMade(fmt::NCCL_COMM_INIT_RANK_CONFIG,
                Makes::Rank { out: comm, ids: Ids::One(comm_id), rank, nranks });

    extern "C" fn ncclCommInitRankScalable(
        comm: *mut Comm, nranks: c_int, rank: c_int, n_ids: c_int, comm_ids: *const UniqueId,
        config: *mut c_void,
    ) -> NcclResult;
        => CommMade(fmt::NCCL_COMM_INIT_RANK_SCALABLE,
                Makes::Rank { out: comm, ids: Ids::Many(comm_ids, n_ids), rank, nranks });

    extern "C" fn ncclCommInitAll(
        comms_out: *mut Comm, ndev: c_int, devlist: *const c_int,
    ) -> NcclResult;
        => CommMade(fmt::NCCL_COMM_INIT_ALL, Makes::All { out: comms_out, ndev });

    extern "C" fn ncclCommSplit(
        comm: Comm, color: c_int, key: c_int, newcomm: *mut Comm, config: *mut c_void,
    ) -> NcclResult;
        => CommMade(fmt::NCCL_COMM_SPLIT, Makes::Split { parent: comm, color, out: newcomm });

    extern "C" fn ncclCommDestroy(comm: Comm) -> NcclResult;
        => CommEnded(fmt::NCCL_COMM_DESTROY, comm);

    extern "C" fn ncclCommAbort(comm: Comm) -> NcclResult;
        => CommEnded(fmt::NCCL_COMM_ABORT, comm);
}

// ---------------------------------------------------------------------------------
// What the rows record. The values hold the hook's own arguments (pointers included,
// read as the NCCL API defines them).

/// A collective or point-to-point call, with the caller's Python stack.
impl Action<NcclResult> for Op {
    #[inline(always)]
    fn run(self, call: impl FnOnce() -> NcclResult) -> NcclResult {
        run_at(Site::Always, false, call, |e, t1, r| {
            record_op(e, t1, r, self)
        })
    }
}

/// A group bracket (`ncclGroupStart` / `End`): no communicator, no call site.
struct Group(u8);

impl Action<NcclResult> for Group {
    #[inline(always)]
    fn run(self, call: impl FnOnce() -> NcclResult) -> NcclResult {
        let o = Op {
            op: self.0,
            comm: std::ptr::null_mut(),
            stream: std::ptr::null_mut(),
            count: 0,
            datatype: fmt::NCCL_NO_DATATYPE as c_int,
            redop: fmt::NCCL_NO_REDOP,
            peer_or_root: -1,
        };
        run(false, call, |e, t1, r| record_op(e, t1, r, o))
    }
}

// Communicator life cycle. The table is kept in every state but DISABLED, so a trace
// window opened later still knows the communicators made before it.

/// A call that makes communicators (op, what it makes): they go into the table and
/// each is recorded.
struct CommMade(u8, Makes);

/// The communicators a call makes, read once it has returned.
enum Makes {
    /// One, stored through `out`; its id hashed from the unique id(s) every rank passed.
    Rank {
        out: *mut Comm,
        ids: Ids,
        rank: c_int,
        nranks: c_int,
    },
    /// `ndev` of them in this process, stored through the array `out`.
    All { out: *mut Comm, ndev: c_int },
    /// One split from `parent`, stored through `out`; its id from the parent's.
    Split {
        parent: Comm,
        color: c_int,
        out: *mut Comm,
    },
}

/// The unique id(s) a communicator is made from.
enum Ids {
    One(UniqueId),
    /// The caller's array of ids and its length.
    Many(*const UniqueId, c_int),
}

/// One communicator a call made.
struct Made {
    comm: usize,
    id: u64,
    rank: u32,
    nranks: u32,
    parent_id: u64,
    color: i32,
}

/// Did the call hand back a usable communicator handle?
fn usable(r: NcclResult) -> bool {
    r == 0 || r == IN_PROGRESS
}

/// The handle a successful call stored through `out`.
///
/// # Safety
/// `out` is NULL or the caller's out-pointer, written by NCCL when `r` is usable.
unsafe fn handle(out: *mut Comm, r: NcclResult) -> usize {
    if !usable(r) || out.is_null() {
        return 0;
    }
    // SAFETY: per the caller's contract.
    unsafe { *out as usize }
}

impl Makes {
    /// What the call that returned `r` made.
    fn list(self, r: NcclResult) -> Vec<Made> {
        match self {
            Makes::Rank {
                out,
                ids,
                rank,
                nranks,
            } => {
                let id = match ids {
                    Ids::One(u) => comms::hash(&[&u.internal]),
                    // Read only after NCCL accepted them (garbage is refused, not read here).
                    Ids::Many(p, n) if usable(r) && !p.is_null() && n > 0 => {
                        // SAFETY: the caller passed n unique ids, which NCCL read too.
                        let ids = unsafe { std::slice::from_raw_parts(p, n as usize) };
                        let parts: Vec<&[u8]> = ids.iter().map(|u| &u.internal[..]).collect();
                        comms::hash(&parts)
                    }
                    Ids::Many(..) => 0,
                };
                vec![Made {
                    // SAFETY: `out` is the caller's out-pointer.
                    comm: unsafe { handle(out, r) },
                    id,
                    rank: rank32(rank),
                    nranks: rank32(nranks),
                    parent_id: 0,
                    color: 0,
                }]
            }
            Makes::All { out, ndev } => {
                static CALLS: AtomicU64 = AtomicU64::new(0);
                if !usable(r) || out.is_null() || ndev <= 0 {
                    return Vec::new();
                }
                let n = CALLS.fetch_add(1, Ordering::Relaxed);
                let id = comms::hash(&[
                    b"init_all",
                    &std::process::id().to_le_bytes(),
                    &n.to_le_bytes(),
                ]);
                // SAFETY: on success NCCL wrote ndev handles to the caller's array.
                let handles = unsafe { std::slice::from_raw_parts(out, ndev as usize) };
                handles
                    .iter()
                    .enumerate()
                    .map(|(i, c)| Made {
                        comm: *c as usize,
                        id,
                        rank: i as u32,
                        nranks: ndev as u32,
                        parent_id: 0,
                        color: 0,
                    })
                    .collect()
            }
            Makes::Split { parent, color, out } => {
                // Every rank of the parent splits, in the same order, whatever its color.
                let (parent_id, id) = match comms::lookup(parent as usize) {
                    Some(p) if p.id() != 0 => {
                        let n = p.next_split();
                        (p.id(), comms::split_id(p.id(), n, color))
                    }
                    _ => (0, 0),
                };
                // SAFETY: `out` is the caller's out-pointer.
                let c = unsafe { handle(out, r) };
                let (rank, nranks) = if c == 0 {
                    (UNKNOWN, UNKNOWN)
                } else {
                    query_ranks(c as Comm)
                };
                vec![Made {
                    comm: c,
                    id: if c == 0 { 0 } else { id },
                    rank,
                    nranks,
                    parent_id,
                    color,
                }]
            }
        }
    }
}

impl Action<NcclResult> for CommMade {
    #[inline]
    fn run(self, call: impl FnOnce() -> NcclResult) -> NcclResult {
        let CommMade(op, makes) = self;
        run_keeping(
            call,
            || (),
            |ran, (), r| {
                let mut list = makes.list(r);
                for m in &list {
                    if m.comm != 0 {
                        comms::insert(m.comm, m.id, m.rank, m.nranks);
                    }
                }
                if !recording() {
                    return;
                }
                if list.is_empty() {
                    list.push(Made {
                        comm: 0,
                        id: 0,
                        rank: UNKNOWN,
                        nranks: UNKNOWN,
                        parent_id: 0,
                        color: 0,
                    });
                }
                for m in list {
                    record_comm(ran, op, m, r);
                }
            },
        )
    }
}

/// A call that ends a communicator (op, the communicator): forgotten before the call
/// (an address reused at once by another thread's new communicator is not lost), put
/// back if it fails.
struct CommEnded(u8, Comm);

impl Action<NcclResult> for CommEnded {
    #[inline]
    fn run(self, call: impl FnOnce() -> NcclResult) -> NcclResult {
        let CommEnded(op, comm) = self;
        let remove = || guarded_value(|| comms::remove(comm as usize));
        run_keeping(call, remove, |ran, had, r| {
            let (id, rank, nranks) = had.unwrap_or((0, UNKNOWN, UNKNOWN));
            if r != 0 && had.is_some() {
                comms::insert(comm as usize, id, rank, nranks);
            }
            if recording() {
                let m = Made {
                    comm: comm as usize,
                    id,
                    rank,
                    nranks,
                    parent_id: 0,
                    color: 0,
                };
                record_comm(ran, op, m, r);
            }
        })
    }
}

fn record_comm(ran: &Ran, op: u8, m: Made, r: NcclResult) {
    ring::push(&rec::nccl_comm(&fmt::NcclComm {
        start: ran.t0,
        end: ran.t1,
        tid: ran.tid(),
        op,
        comm: m.comm as u64,
        comm_id: m.id,
        parent_id: m.parent_id,
        rank: rank_i32(m.rank),
        nranks: rank_i32(m.nranks),
        color: m.color,
        result: r as u32,
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reductions_map_to_trace_values() {
        assert_eq!(redop8(0), 0);
        assert_eq!(redop8(4), 4);
        assert_eq!(redop8(5), fmt::NCCL_CUSTOM_REDOP);
        assert_eq!(redop8(0x7fff_ffff), fmt::NCCL_CUSTOM_REDOP);
        assert_eq!(redop8(-1), fmt::NCCL_CUSTOM_REDOP);
    }

    #[test]
    fn unique_id_is_passed_as_128_bytes() {
        assert_eq!(std::mem::size_of::<UniqueId>(), 128);
    }

    #[test]
    fn the_stall_report_can_name_every_hooked_call() {
        let mut hooked = HOOKED.to_vec();
        let mut named = stall::NCCL_CALLS.to_vec();
        hooked.sort();
        named.sort();
        assert_eq!(
            hooked, named,
            "a hooked NCCL call goes into stall::NCCL_CALLS too"
        );
    }

    #[test]
    fn missing_nccl_gives_system_error() {
        // SAFETY: no libnccl in the unit-test process: nothing is called.
        let r = unsafe { ncclGroupStart() };
        assert_eq!(r, 2);
    }
}
