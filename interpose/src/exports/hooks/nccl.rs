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
use super::{keep_registries, recording, run, run_at, Entry, Scope, Site};
use crate::base::ffi::{entry, errno, guarded, guarded_value, set_errno};
use crate::base::tsc;
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
// Collectives and point-to-point.

/// # Safety
/// Called by C code with the arguments of the NCCL function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclAllReduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: c_int,
    op: c_int,
    comm: Comm,
    stream: Stream,
) -> NcclResult {
    entry!(NCCL.missing.0, {
        type F = unsafe extern "C" fn(
            *const c_void,
            *mut c_void,
            usize,
            c_int,
            c_int,
            Comm,
            Stream,
        ) -> NcclResult;
        let f = match real!(NCCL, c"ncclAllReduce", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        run_at(
            Site::Always,
            false,
            || {
                stall::in_nccl_call("ncclAllReduce", || {
                    // SAFETY: forwarding the caller's arguments unchanged.
                    unsafe { f(send, recv, count, datatype, op, comm, stream) }
                })
            },
            |e, t1, r| {
                let o = Op {
                    op: fmt::NCCL_ALL_REDUCE,
                    comm,
                    stream,
                    count,
                    datatype,
                    redop: redop8(op),
                    peer_or_root: -1,
                };
                record_op(e, t1, r, o)
            },
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the NCCL function of the same name.
#[cfg_attr(not(test), no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ncclReduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: c_int,
    op: c_int,
    root: c_int,
    comm: Comm,
    stream: Stream,
) -> NcclResult {
    entry!(NCCL.missing.0, {
        type F = unsafe extern "C" fn(
            *const c_void,
            *mut c_void,
            usize,
            c_int,
            c_int,
            c_int,
            Comm,
            Stream,
        ) -> NcclResult;
        let f = match real!(NCCL, c"ncclReduce", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        run_at(
            Site::Always,
            false,
            || {
                stall::in_nccl_call("ncclReduce", || {
                    // SAFETY: forwarding the caller's arguments unchanged.
                    unsafe { f(send, recv, count, datatype, op, root, comm, stream) }
                })
            },
            |e, t1, r| {
                let o = Op {
                    op: fmt::NCCL_REDUCE,
                    comm,
                    stream,
                    count,
                    datatype,
                    redop: redop8(op),
                    peer_or_root: root,
                };
                record_op(e, t1, r, o)
            },
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the NCCL function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclBroadcast(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: Comm,
    stream: Stream,
) -> NcclResult {
    entry!(NCCL.missing.0, {
        type F = unsafe extern "C" fn(
            *const c_void,
            *mut c_void,
            usize,
            c_int,
            c_int,
            Comm,
            Stream,
        ) -> NcclResult;
        let f = match real!(NCCL, c"ncclBroadcast", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        run_at(
            Site::Always,
            false,
            || {
                stall::in_nccl_call("ncclBroadcast", || {
                    // SAFETY: forwarding the caller's arguments unchanged.
                    unsafe { f(send, recv, count, datatype, root, comm, stream) }
                })
            },
            |e, t1, r| {
                let o = Op {
                    op: fmt::NCCL_BROADCAST,
                    comm,
                    stream,
                    count,
                    datatype,
                    redop: fmt::NCCL_NO_REDOP,
                    peer_or_root: root,
                };
                record_op(e, t1, r, o)
            },
        )
    })
}

/// The legacy in-place broadcast (PyTorch's ProcessGroupNCCL uses it).
///
/// # Safety
/// Called by C code with the arguments of the NCCL function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclBcast(
    buff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: Comm,
    stream: Stream,
) -> NcclResult {
    entry!(NCCL.missing.0, {
        type F = unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, Comm, Stream) -> NcclResult;
        let f = match real!(NCCL, c"ncclBcast", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        run_at(
            Site::Always,
            false,
            || {
                stall::in_nccl_call("ncclBcast", || {
                    // SAFETY: forwarding the caller's arguments unchanged.
                    unsafe { f(buff, count, datatype, root, comm, stream) }
                })
            },
            |e, t1, r| {
                let o = Op {
                    op: fmt::NCCL_BROADCAST,
                    comm,
                    stream,
                    count,
                    datatype,
                    redop: fmt::NCCL_NO_REDOP,
                    peer_or_root: root,
                };
                record_op(e, t1, r, o)
            },
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the NCCL function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclAllGather(
    send: *const c_void,
    recv: *mut c_void,
    sendcount: usize,
    datatype: c_int,
    comm: Comm,
    stream: Stream,
) -> NcclResult {
    entry!(NCCL.missing.0, {
        type F = unsafe extern "C" fn(
            *const c_void,
            *mut c_void,
            usize,
            c_int,
            Comm,
            Stream,
        ) -> NcclResult;
        let f = match real!(NCCL, c"ncclAllGather", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        run_at(
            Site::Always,
            false,
            || {
                stall::in_nccl_call("ncclAllGather", || {
                    // SAFETY: forwarding the caller's arguments unchanged.
                    unsafe { f(send, recv, sendcount, datatype, comm, stream) }
                })
            },
            |e, t1, r| {
                let o = Op {
                    op: fmt::NCCL_ALL_GATHER,
                    comm,
                    stream,
                    count: sendcount,
                    datatype,
                    redop: fmt::NCCL_NO_REDOP,
                    peer_or_root: -1,
                };
                record_op(e, t1, r, o)
            },
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the NCCL function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclReduceScatter(
    send: *const c_void,
    recv: *mut c_void,
    recvcount: usize,
    datatype: c_int,
    op: c_int,
    comm: Comm,
    stream: Stream,
) -> NcclResult {
    entry!(NCCL.missing.0, {
        type F = unsafe extern "C" fn(
            *const c_void,
            *mut c_void,
            usize,
            c_int,
            c_int,
            Comm,
            Stream,
        ) -> NcclResult;
        let f = match real!(NCCL, c"ncclReduceScatter", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        run_at(
            Site::Always,
            false,
            || {
                stall::in_nccl_call("ncclReduceScatter", || {
                    // SAFETY: forwarding the caller's arguments unchanged.
                    unsafe { f(send, recv, recvcount, datatype, op, comm, stream) }
                })
            },
            |e, t1, r| {
                let o = Op {
                    op: fmt::NCCL_REDUCE_SCATTER,
                    comm,
                    stream,
                    count: recvcount,
                    datatype,
                    redop: redop8(op),
                    peer_or_root: -1,
                };
                record_op(e, t1, r, o)
            },
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the NCCL function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclSend(
    send: *const c_void,
    count: usize,
    datatype: c_int,
    peer: c_int,
    comm: Comm,
    stream: Stream,
) -> NcclResult {
    entry!(NCCL.missing.0, {
        type F =
            unsafe extern "C" fn(*const c_void, usize, c_int, c_int, Comm, Stream) -> NcclResult;
        let f = match real!(NCCL, c"ncclSend", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        run_at(
            Site::Always,
            false,
            || {
                stall::in_nccl_call("ncclSend", || {
                    // SAFETY: forwarding the caller's arguments unchanged.
                    unsafe { f(send, count, datatype, peer, comm, stream) }
                })
            },
            |e, t1, r| {
                let o = Op {
                    op: fmt::NCCL_SEND,
                    comm,
                    stream,
                    count,
                    datatype,
                    redop: fmt::NCCL_NO_REDOP,
                    peer_or_root: peer,
                };
                record_op(e, t1, r, o)
            },
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the NCCL function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclRecv(
    recv: *mut c_void,
    count: usize,
    datatype: c_int,
    peer: c_int,
    comm: Comm,
    stream: Stream,
) -> NcclResult {
    entry!(NCCL.missing.0, {
        type F = unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, Comm, Stream) -> NcclResult;
        let f = match real!(NCCL, c"ncclRecv", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        run_at(
            Site::Always,
            false,
            || {
                stall::in_nccl_call("ncclRecv", || {
                    // SAFETY: forwarding the caller's arguments unchanged.
                    unsafe { f(recv, count, datatype, peer, comm, stream) }
                })
            },
            |e, t1, r| {
                let o = Op {
                    op: fmt::NCCL_RECV,
                    comm,
                    stream,
                    count,
                    datatype,
                    redop: fmt::NCCL_NO_REDOP,
                    peer_or_root: peer,
                };
                record_op(e, t1, r, o)
            },
        )
    })
}

fn group(op: u8) -> Op {
    Op {
        op,
        comm: std::ptr::null_mut(),
        stream: std::ptr::null_mut(),
        count: 0,
        datatype: fmt::NCCL_NO_DATATYPE as c_int,
        redop: fmt::NCCL_NO_REDOP,
        peer_or_root: -1,
    }
}

/// # Safety
/// Called by C code (no arguments).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclGroupStart() -> NcclResult {
    entry!(NCCL.missing.0, {
        type F = unsafe extern "C" fn() -> NcclResult;
        let f = match real!(NCCL, c"ncclGroupStart", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        run(
            false,
            || {
                stall::in_nccl_call("ncclGroupStart", || {
                    // SAFETY: no arguments.
                    unsafe { f() }
                })
            },
            |e, t1, r| record_op(e, t1, r, group(fmt::NCCL_GROUP_START)),
        )
    })
}

/// # Safety
/// Called by C code (no arguments).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclGroupEnd() -> NcclResult {
    entry!(NCCL.missing.0, {
        type F = unsafe extern "C" fn() -> NcclResult;
        let f = match real!(NCCL, c"ncclGroupEnd", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        run(
            false,
            || {
                stall::in_nccl_call("ncclGroupEnd", || {
                    // SAFETY: no arguments.
                    unsafe { f() }
                })
            },
            |e, t1, r| record_op(e, t1, r, group(fmt::NCCL_GROUP_END)),
        )
    })
}

// ---------------------------------------------------------------------------------
// Communicator life cycle. The table is kept in every state but DISABLED, so a trace
// window opened later still knows the communicators made before it.

/// A communicator a call made.
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

/// Runs a call that makes communicators; `made` (given the result) lists them.
#[inline]
fn comm_made(
    op: u8,
    call: impl FnOnce() -> NcclResult,
    made: impl FnOnce(NcclResult) -> Vec<Made>,
) -> NcclResult {
    if !keep_registries() {
        return call();
    }
    let Some(scope) = Scope::enter() else {
        return call();
    };
    let t0 = tsc::stamp();
    let r = call();
    let t1 = tsc::stamp();
    let saved = errno();
    guarded(|| {
        let mut list = made(r);
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
        let tid = scope.tid();
        for m in list {
            ring::push(&rec::nccl_comm(&fmt::NcclComm {
                start: t0,
                end: t1,
                tid,
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
    });
    drop(scope);
    set_errno(saved);
    r
}

/// Runs a call that ends a communicator: forgotten before the call (an address reused
/// at once by another thread's new communicator is not lost), put back if it fails.
#[inline]
fn comm_ended(op: u8, comm: Comm, call: impl FnOnce() -> NcclResult) -> NcclResult {
    if !keep_registries() {
        return call();
    }
    let Some(scope) = Scope::enter() else {
        return call();
    };
    let t0 = tsc::stamp();
    let had = guarded_value(|| comms::remove(comm as usize));
    let r = call();
    let t1 = tsc::stamp();
    let saved = errno();
    guarded(|| {
        let (id, rank, nranks) = had.unwrap_or((0, UNKNOWN, UNKNOWN));
        if r != 0 && had.is_some() {
            comms::insert(comm as usize, id, rank, nranks);
        }
        if recording() {
            ring::push(&rec::nccl_comm(&fmt::NcclComm {
                start: t0,
                end: t1,
                tid: scope.tid(),
                op,
                comm: comm as u64,
                comm_id: id,
                parent_id: 0,
                rank: rank_i32(rank),
                nranks: rank_i32(nranks),
                color: 0,
                result: r as u32,
            }));
        }
    });
    drop(scope);
    set_errno(saved);
    r
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

/// # Safety
/// Called by C code with the arguments of the NCCL function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclCommInitRank(
    comm: *mut Comm,
    nranks: c_int,
    comm_id: UniqueId,
    rank: c_int,
) -> NcclResult {
    entry!(NCCL.missing.0, {
        type F = unsafe extern "C" fn(*mut Comm, c_int, UniqueId, c_int) -> NcclResult;
        let f = match real!(NCCL, c"ncclCommInitRank", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        comm_made(
            fmt::NCCL_COMM_INIT_RANK,
            || {
                stall::in_nccl_call("ncclCommInitRank", || {
                    // SAFETY: forwarding the caller's arguments unchanged.
                    unsafe { f(comm, nranks, comm_id, rank) }
                })
            },
            |r| {
                vec![Made {
                    // SAFETY: `comm` is the caller's out-pointer.
                    comm: unsafe { handle(comm, r) },
                    id: comms::hash(&[&comm_id.internal]),
                    rank: rank32(rank),
                    nranks: rank32(nranks),
                    parent_id: 0,
                    color: 0,
                }]
            },
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the NCCL function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclCommInitRankConfig(
    comm: *mut Comm,
    nranks: c_int,
    comm_id: UniqueId,
    rank: c_int,
    config: *mut c_void,
) -> NcclResult {
    entry!(NCCL.missing.0, {
        type F = unsafe extern "C" fn(*mut Comm, c_int, UniqueId, c_int, *mut c_void) -> NcclResult;
        let f = match real!(NCCL, c"ncclCommInitRankConfig", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        comm_made(
            fmt::NCCL_COMM_INIT_RANK_CONFIG,
            || {
                stall::in_nccl_call("ncclCommInitRankConfig", || {
                    // SAFETY: forwarding the caller's arguments unchanged.
                    unsafe { f(comm, nranks, comm_id, rank, config) }
                })
            },
            |r| {
                vec![Made {
                    // SAFETY: `comm` is the caller's out-pointer.
                    comm: unsafe { handle(comm, r) },
                    id: comms::hash(&[&comm_id.internal]),
                    rank: rank32(rank),
                    nranks: rank32(nranks),
                    parent_id: 0,
                    color: 0,
                }]
            },
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the NCCL function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclCommInitRankScalable(
    comm: *mut Comm,
    nranks: c_int,
    rank: c_int,
    n_ids: c_int,
    comm_ids: *const UniqueId,
    config: *mut c_void,
) -> NcclResult {
    entry!(NCCL.missing.0, {
        type F = unsafe extern "C" fn(
            *mut Comm,
            c_int,
            c_int,
            c_int,
            *const UniqueId,
            *mut c_void,
        ) -> NcclResult;
        let f = match real!(NCCL, c"ncclCommInitRankScalable", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        comm_made(
            fmt::NCCL_COMM_INIT_RANK_SCALABLE,
            || {
                stall::in_nccl_call("ncclCommInitRankScalable", || {
                    // SAFETY: forwarding the caller's arguments unchanged.
                    unsafe { f(comm, nranks, rank, n_ids, comm_ids, config) }
                })
            },
            |r| {
                // Read only after NCCL accepted them (garbage is refused, not read here).
                let id = if !usable(r) || comm_ids.is_null() || n_ids <= 0 {
                    0
                } else {
                    // SAFETY: the caller passed n_ids unique ids, which NCCL read too.
                    let ids = unsafe { std::slice::from_raw_parts(comm_ids, n_ids as usize) };
                    let parts: Vec<&[u8]> = ids.iter().map(|u| &u.internal[..]).collect();
                    comms::hash(&parts)
                };
                vec![Made {
                    // SAFETY: `comm` is the caller's out-pointer.
                    comm: unsafe { handle(comm, r) },
                    id,
                    rank: rank32(rank),
                    nranks: rank32(nranks),
                    parent_id: 0,
                    color: 0,
                }]
            },
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the NCCL function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclCommInitAll(
    comms_out: *mut Comm,
    ndev: c_int,
    devlist: *const c_int,
) -> NcclResult {
    entry!(NCCL.missing.0, {
        type F = unsafe extern "C" fn(*mut Comm, c_int, *const c_int) -> NcclResult;
        let f = match real!(NCCL, c"ncclCommInitAll", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        static CALLS: AtomicU64 = AtomicU64::new(0);
        comm_made(
            fmt::NCCL_COMM_INIT_ALL,
            || {
                stall::in_nccl_call("ncclCommInitAll", || {
                    // SAFETY: forwarding the caller's arguments unchanged.
                    unsafe { f(comms_out, ndev, devlist) }
                })
            },
            |r| {
                if !usable(r) || comms_out.is_null() || ndev <= 0 {
                    return Vec::new();
                }
                let n = CALLS.fetch_add(1, Ordering::Relaxed);
                let id = comms::hash(&[
                    b"init_all",
                    &std::process::id().to_le_bytes(),
                    &n.to_le_bytes(),
                ]);
                // SAFETY: on success NCCL wrote ndev handles to the caller's array.
                let handles = unsafe { std::slice::from_raw_parts(comms_out, ndev as usize) };
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
            },
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the NCCL function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclCommSplit(
    comm: Comm,
    color: c_int,
    key: c_int,
    newcomm: *mut Comm,
    config: *mut c_void,
) -> NcclResult {
    entry!(NCCL.missing.0, {
        type F = unsafe extern "C" fn(Comm, c_int, c_int, *mut Comm, *mut c_void) -> NcclResult;
        let f = match real!(NCCL, c"ncclCommSplit", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        comm_made(
            fmt::NCCL_COMM_SPLIT,
            || {
                stall::in_nccl_call("ncclCommSplit", || {
                    // SAFETY: forwarding the caller's arguments unchanged.
                    unsafe { f(comm, color, key, newcomm, config) }
                })
            },
            |r| {
                // Every rank of the parent splits, in the same order, whatever its color.
                let (parent_id, id) = match comms::lookup(comm as usize) {
                    Some(p) if p.id() != 0 => {
                        let n = p.next_split();
                        (p.id(), comms::split_id(p.id(), n, color))
                    }
                    _ => (0, 0),
                };
                // SAFETY: `newcomm` is the caller's out-pointer.
                let c = unsafe { handle(newcomm, r) };
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
            },
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the NCCL function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclCommDestroy(comm: Comm) -> NcclResult {
    entry!(NCCL.missing.0, {
        type F = unsafe extern "C" fn(Comm) -> NcclResult;
        let f = match real!(NCCL, c"ncclCommDestroy", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        comm_ended(fmt::NCCL_COMM_DESTROY, comm, || {
            stall::in_nccl_call("ncclCommDestroy", || {
                // SAFETY: forwarding the caller's argument unchanged.
                unsafe { f(comm) }
            })
        })
    })
}

/// # Safety
/// Called by C code with the arguments of the NCCL function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclCommAbort(comm: Comm) -> NcclResult {
    entry!(NCCL.missing.0, {
        type F = unsafe extern "C" fn(Comm) -> NcclResult;
        let f = match real!(NCCL, c"ncclCommAbort", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        comm_ended(fmt::NCCL_COMM_ABORT, comm, || {
            stall::in_nccl_call("ncclCommAbort", || {
                // SAFETY: forwarding the caller's argument unchanged.
                unsafe { f(comm) }
            })
        })
    })
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
    fn missing_nccl_gives_system_error() {
        // SAFETY: no libnccl in the unit-test process: nothing is called.
        let r = unsafe { ncclGroupStart() };
        assert_eq!(r, 2);
    }
}
