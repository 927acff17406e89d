//! The symbol hooks, end to end: a fake "Python extension" loaded RTLD_LOCAL calls
//! every hooked CUDA runtime, NCCL and NVTX function of fake libraries; the trace must
//! hold each call with its arguments, and the program must see exactly the results
//! and errno the fakes gave (hook_ext.c checks every call and the app's exit status
//! says whether all matched). No CUPTI: the trace is blind, the hooks still record.

use gputrace_format::{self as fmt, *};
use gputrace_tests::hooks::{fnv, run_scenario, split_id, unique_id, HookRun};
use std::collections::HashMap;

const DEV: u64 = 0xD000_0000;
const STREAM: u64 = 0x5000;
const EVENT: u64 = 0x6000;

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("not hex: {s}"))
}

fn pointers(r: &HookRun, key: &str) -> Vec<u64> {
    r.value(key)
        .unwrap_or_else(|| panic!("no `{key}` line in:\n{}", r.stdout))
        .split_whitespace()
        .map(hex)
        .collect()
}

#[test]
fn every_hooked_call_is_traced_with_its_arguments() {
    let r = run_scenario("all", &[], &[]);
    r.assert_ok();
    let tid = r.tid();
    let tr = r.trace();
    let t = &tr.t;
    assert!(
        tr.states().contains(&CollectorState::Blind),
        "no CUPTI: the trace says GPU activity was not seen"
    );
    assert!(
        r.gputrace_lines()
            .iter()
            .any(|l| l.contains("no usable CUPTI")),
        "{}",
        r.stderr
    );
    let p = pointers(&r, "pinned");
    let (p1, p2, buf) = (p[0], p[1], p[2]);
    // Hook stamps (the TSC, where the kernel trusts it) land in the trace's time base:
    // every call of the scenario lies between the trace's start and its final state,
    // both read from CLOCK_REALTIME (and the tables, sorted by time, list the calls in
    // the order they were made: checked against `want` below).
    let begin = tr.data.meta.start_real_ns;
    let end = t.states.last().map(|s| s.0).unwrap();
    let mut stamps: Vec<(u64, u64)> = t.host_copies.iter().map(|c| (c.start, c.end)).collect();
    stamps.extend(t.host_allocs.iter().map(|c| (c.start, c.end)));
    stamps.extend(t.host_calls.iter().map(|c| (c.start, c.end)));
    stamps.extend(t.nccl.iter().map(|c| (c.start, c.end)));
    stamps.extend(t.nvtx.iter().map(|n| (n.ts, n.ts)));
    for (s, e) in &stamps {
        assert!(
            begin <= *s && s <= e && *e <= end,
            "{begin} <= {s} <= {e} <= {end}"
        );
    }

    // Copies, named by their byte counts: api, direction, host memory, result.
    use fmt::{
        HOSTCOPY_MEMCPY as M, HOSTCOPY_MEMCPY_2D as M2, HOSTCOPY_MEMCPY_2D_ASYNC as M2A,
        HOSTCOPY_MEMCPY_ASYNC as MA, HOSTCOPY_MEMCPY_PEER as MP, HOSTCOPY_MEMCPY_PEER_ASYNC as MPA,
    };
    use CopyKind::*;
    use MemKind::{Device, Pageable, Pinned, Unknown as Unk};
    let want: &[(u64, u8, CopyKind, MemKind, u32)] = &[
        (1001, M, HtoD, Pinned, 0),
        (1002, M, HtoD, Pageable, 0),
        (1003, MA, DtoH, Pinned, 0),
        (1004, MA, DtoH, Pageable, 0),
        (1005, MA, HtoD, Pinned, 0),
        (1006, M, DtoD, Device, 0),
        (1007, MA, Unknown, Pinned, 0),
        (1008, MA, Unknown, Unk, 0),
        (1009, M2, HtoD, Pinned, 0),
        (1010, M2A, DtoH, Pageable, 0),
        (1011, MP, PtoP, Device, 0),
        (1012, MPA, PtoP, Device, 0),
        (1013, MA, HtoD, Pinned, 102),
        (1014, MA, HtoD, Pageable, 0),
        (1015, MA, HtoD, Pinned, 0),
        (1016, M, HtoD, Pageable, 0),
    ];
    assert_eq!(t.host_copies.len(), want.len(), "{:#?}", t.host_copies);
    for (c, (bytes, api, kind, host, result)) in t.host_copies.iter().zip(want) {
        let what = format!("copy of {bytes} bytes: {c:?}");
        assert_eq!(c.bytes, *bytes, "{what}");
        assert_eq!(c.api, *api, "{what}");
        assert_eq!(CopyKind::from_u8(c.copy_kind), *kind, "{what}");
        assert_eq!(MemKind::from_u8(c.host_kind), *host, "{what}");
        assert_eq!(c.result, *result, "{what}");
        assert_eq!(c.source, fmt::CLASS_SOURCE_REGISTRY, "{what}");
        assert_eq!(c.tid, tid, "{what}");
        assert_eq!(
            c.flags & fmt::HOSTCOPY_FLAG_CUPTI_API,
            0,
            "no CUPTI: {what}"
        );
        let is_async = matches!(*api, MA | M2A | MPA);
        assert_eq!(c.flags & fmt::HOSTCOPY_FLAG_ASYNC != 0, is_async, "{what}");
        assert_eq!(c.stream, if is_async { STREAM } else { 0 }, "{what}");
        assert!(c.start <= c.end, "{what}");
    }
    let by: HashMap<u64, &fmt::HostCopy> = t.host_copies.iter().map(|c| (c.bytes, c)).collect();
    assert_eq!((by[&1001].dst, by[&1001].src), (DEV, p1 + 16));
    assert_eq!(by[&1003].dst, p2);
    assert_eq!(by[&1005].src, buf + 100);
    assert_eq!((by[&1011].dst_device, by[&1011].src_device), (1, 0));
    assert_eq!((by[&1012].dst_device, by[&1012].src_device), (0, 1));
    assert_eq!(by[&1001].dst_device, u32::MAX);

    // Pinned memory as the registry saw it made and released.
    use fmt::{
        HOSTALLOC_FREE_HOST as FREE, HOSTALLOC_HOST_ALLOC as ALLOC, HOSTALLOC_HOST_REGISTER as REG,
        HOSTALLOC_HOST_UNREGISTER as UNREG, HOSTALLOC_MALLOC_HOST as MALLOC,
    };
    let allocs: Vec<_> = t
        .host_allocs
        .iter()
        .map(|a| (a.op, a.ptr, a.bytes, a.flags, a.result))
        .collect();
    assert_eq!(
        allocs,
        vec![
            (ALLOC, p1, 8192, 2, 0),
            (MALLOC, p2, 4096, 0, 0),
            (REG, buf, 65536, 1, 0),
            (UNREG, buf, 65536, 0, 0),
            (FREE, p2, 4096, 0, 121), // failed: p2 stays pinned (copy 1015)
            (FREE, p2, 4096, 0, 0),
            (FREE, p1, 8192, 0, 0),
        ]
    );

    // Syncs, memsets and launches: CUPTI is off, so the hooks record them.
    let calls: Vec<_> = t
        .host_calls
        .iter()
        .map(|c| (c.call, c.stream, [c.arg0, c.arg1, c.arg2], c.result))
        .collect();
    assert_eq!(
        calls,
        vec![
            (HOSTCALL_MEMSET, 0, [2001, DEV, 7], 0),
            (HOSTCALL_MEMSET_ASYNC, STREAM, [2002, DEV, 8], 0),
            (HOSTCALL_STREAM_SYNCHRONIZE, STREAM, [0; 3], 0),
            (HOSTCALL_DEVICE_SYNCHRONIZE, 0, [0; 3], 0),
            (HOSTCALL_EVENT_SYNCHRONIZE, 0, [EVENT, 0, 0], 0),
            (HOSTCALL_STREAM_WAIT_EVENT, STREAM, [EVENT, 1, 0], 0),
            (HOSTCALL_LAUNCH_KERNEL_STUB, STREAM, [0x7000, 24, 64], 0),
            (HOSTCALL_LAUNCH_KERNEL, STREAM, [0x7100, 5, 128], 0),
            (HOSTCALL_LAUNCH_KERNEL_EXC, STREAM, [0x7200, 7, 64], 0),
            (HOSTCALL_GRAPH_LAUNCH, STREAM, [0x8000, 0, 0], 0),
            (HOSTCALL_STREAM_SYNCHRONIZE, STREAM, [0; 3], 109),
        ]
    );
    assert!(t.host_calls.iter().all(|c| c.tid == tid));

    // NCCL: ids the same on every rank (hash of the unique id; splits from the parent).
    let h1 = fnv(&[&unique_id(1)]);
    let h2 = fnv(&[&unique_id(2)]);
    let h34 = fnv(&[&unique_id(3), &unique_id(4)]);
    let hs = split_id(h1, 1, 5);
    let comms: Vec<_> = t
        .nccl_comms
        .iter()
        .map(|c| {
            (
                c.op,
                c.comm_id,
                c.parent_id,
                c.rank,
                c.nranks,
                c.color,
                c.result,
            )
        })
        .collect();
    let hall = t.nccl_comms[5].comm_id;
    assert_ne!(hall, 0);
    assert_eq!(
        comms,
        vec![
            (NCCL_COMM_INIT_RANK, h1, 0, 2, 4, 0, 0),
            (NCCL_COMM_SPLIT, hs, h1, 1, 2, 5, 0),
            (NCCL_COMM_SPLIT, 0, h1, -1, -1, -1, 0),
            (NCCL_COMM_INIT_RANK_CONFIG, h2, 0, 5, 8, 0, 0),
            (NCCL_COMM_INIT_RANK_SCALABLE, h34, 0, 9, 16, 0, 0),
            (NCCL_COMM_INIT_ALL, hall, 0, 0, 2, 0, 0),
            (NCCL_COMM_INIT_ALL, hall, 0, 1, 2, 0, 0),
            (NCCL_COMM_DESTROY, hs, 0, 1, 2, 0, 0),
            (NCCL_COMM_ABORT, h2, 0, 5, 8, 0, 0),
            (NCCL_COMM_DESTROY, h34, 0, 9, 16, 0, 0),
            (NCCL_COMM_DESTROY, hall, 0, 0, 2, 0, 0),
            (NCCL_COMM_DESTROY, hall, 0, 1, 2, 0, 0),
            (NCCL_COMM_DESTROY, h1, 0, 2, 4, 0, 0),
        ]
    );
    assert_eq!(t.nccl_comms[2].comm, 0, "NOCOLOR: no communicator");
    let ops: Vec<_> = t
        .nccl
        .iter()
        .map(|n| {
            (
                n.op,
                n.count,
                n.datatype,
                n.redop,
                n.peer_or_root,
                n.comm_id,
                n.rank,
                n.nranks,
                n.seq,
                n.result,
            )
        })
        .collect();
    let (no_dt, no_op, custom) = (NCCL_NO_DATATYPE, NCCL_NO_REDOP, NCCL_CUSTOM_REDOP);
    assert_eq!(
        ops,
        vec![
            (NCCL_ALL_REDUCE, 1000, 7, 0, -1, h1, 2, 4, 1, 0),
            (NCCL_REDUCE, 1001, 9, 2, 1, h1, 2, 4, 2, 0),
            (NCCL_BROADCAST, 1002, 0, no_op, 0, h1, 2, 4, 3, 0),
            (NCCL_BROADCAST, 1003, 8, no_op, 3, h1, 2, 4, 4, 0),
            (NCCL_GROUP_START, 0, no_dt, no_op, -1, 0, -1, -1, 0, 0),
            (NCCL_SEND, 1004, 1, no_op, 3, h1, 2, 4, 1, 0),
            (NCCL_RECV, 1005, 2, no_op, 1, h1, 2, 4, 2, 0),
            (NCCL_GROUP_END, 0, no_dt, no_op, -1, 0, -1, -1, 0, 0),
            (NCCL_ALL_GATHER, 1006, 6, no_op, -1, h1, 2, 4, 5, 0),
            (NCCL_REDUCE_SCATTER, 1007, 4, 4, -1, h1, 2, 4, 6, 0),
            (NCCL_ALL_REDUCE, 1008, 7, 0, -1, h1, 2, 4, 7, 140),
            (NCCL_ALL_REDUCE, 1009, 7, custom, -1, h1, 2, 4, 8, 0),
            (NCCL_ALL_REDUCE, 1010, 7, 0, -1, hs, 1, 2, 1, 0),
            // ncclCommInitAll's own group calls are not recorded (a hook inside a hook).
            (NCCL_ALL_REDUCE, 1011, 7, 0, -1, hall, 1, 2, 1, 0),
            // A communicator the hooks never saw made: rank and size asked of NCCL.
            (NCCL_ALL_REDUCE, 1012, 7, 0, -1, 0, 3, 7, 1, 0),
            (NCCL_ALL_REDUCE, 1013, 7, 0, -1, 0, 3, 7, 2, 0),
        ]
    );
    for n in &t.nccl {
        assert_eq!(n.bytes, n.count * nccl_datatype(n.datatype).0, "{n:?}");
        assert_eq!(
            (n.tid, n.stream),
            (tid, if n.count > 0 { STREAM } else { 0 })
        );
    }

    // NVTX, through the extension's own copy of NVTX, with the path our constructor set.
    let range: u64 = r.value("range").unwrap().parse().unwrap();
    let nvtx: Vec<_> = t
        .nvtx
        .iter()
        .map(|n| {
            (
                n.kind,
                n.id,
                t.str(n.text).to_string(),
                n.flags,
                n.tid == tid,
            )
        })
        .collect();
    let s = |x: &str| x.to_string();
    let cut = s("0123456789012345678901234567890123456789");
    assert_eq!(
        nvtx,
        vec![
            (NVTX_PUSH, 0, s("outer"), 0, true),
            (NVTX_PUSH, 1, s("inner"), 0, true),
            (NVTX_MARK, 0, s("tick"), 0, true),
            (NVTX_POP, 1, s(""), 0, true),
            (NVTX_POP, 0, s(""), 0, true),
            (NVTX_START, range, s("async"), 0, true),
            (NVTX_END, range, s(""), 0, false),
            (NVTX_PUSH, 0, s("wide \u{2603}"), 0, true),
            (NVTX_POP, 0, s(""), 0, true),
            (NVTX_PUSH, 0, cut.clone(), NVTX_FLAG_TRUNCATED, true),
            (NVTX_POP, 0, s(""), 0, true),
            (NVTX_MARK, 0, s("uni"), 0, true),
        ]
    );
    let ranges: Vec<_> = t.nvtx_ranges.iter().map(|r| t.str(r.text)).collect();
    assert_eq!(
        ranges,
        ["outer", "inner", "async", "wide \u{2603}", &cut[..]],
        "{:?}",
        t.nvtx_ranges
    );
    assert!(t.nvtx_ranges.iter().all(|r| !r.open));

    // The summary counts them.
    let sum = gputrace_analyzer::report::summary::summarize(t);
    let pinned = sum
        .host_copies
        .iter()
        .find(|c| c.class == "pinned")
        .unwrap();
    assert_eq!((pinned.calls, pinned.source.as_str()), (7, "registry"));
    assert_eq!(sum.nvtx_ranges, 5);
    assert_eq!(sum.nvtx_marks, 2);
    assert_eq!(sum.host_calls, 11);
}

#[test]
fn with_hooks_off_calls_pass_through_unrecorded() {
    let r = run_scenario(
        "all",
        &[],
        &[("GPUTRACE_HOOKS", "0"), ("HOOK_EXPECT_NVTX", "0")],
    );
    r.assert_ok();
    let t = r.trace().t;
    assert!(t.host_copies.is_empty() && t.host_calls.is_empty() && t.host_allocs.is_empty());
    assert!(t.nccl.is_empty() && t.nccl_comms.is_empty() && t.nvtx.is_empty());
}

#[test]
fn stress_every_call_is_in_the_trace_or_counted_dropped() {
    let (threads, calls) = (64u64, 100_000u64);
    let r = run_scenario("stress", &[&threads.to_string(), &calls.to_string()], &[]);
    r.assert_ok();
    let tr = r.trace();
    let t = &tr.t;
    let copies = t.host_copies.iter().filter(|c| c.bytes == 64).count() as u64;
    let nccl = t.nccl.iter().filter(|n| n.count == 64).count() as u64;
    let dropped = tr.ring_drops();
    assert_eq!(
        copies + nccl + dropped,
        threads * calls,
        "{copies} copies + {nccl} NCCL calls in the trace, {dropped} dropped"
    );
    // Half of each thread's calls are copies; what was kept is consistent with that.
    assert!(copies <= threads * calls / 2 && nccl <= threads * calls / 2);
    // Every NCCL call names the one communicator, with one sequence per call.
    let mut seqs: Vec<u64> = t
        .nccl
        .iter()
        .filter(|n| n.count == 64)
        .map(|n| n.seq)
        .collect();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len() as u64, nccl, "sequence numbers are unique");
}

#[test]
fn a_fork_while_tracing_leaves_the_parent_trace_whole_and_the_child_working() {
    let r = run_scenario("fork", &["20"], &[]);
    // Every child checked its own results and errno and exited 0.
    r.assert_ok();
    let t = r.trace().t;
    let n = |b: u64| t.host_copies.iter().filter(|c| c.bytes == b).count();
    assert_eq!(
        (n(3001), n(3002), n(3003)),
        (50, 0, 50),
        "children do not trace"
    );
    assert!(t.nccl.iter().all(|c| c.count != 3002));
    assert!(t.host_copies.iter().all(|c| c.tid == r.tid()));
}

#[test]
fn a_thread_that_exits_with_a_full_ring_loses_nothing() {
    let r = run_scenario("thread_exit", &[], &[]);
    r.assert_ok();
    let tr = r.trace();
    let t = &tr.t;
    let mine: Vec<_> = t.host_copies.iter().filter(|c| c.bytes == 4001).collect();
    assert_eq!(mine.len(), 1000);
    assert_eq!(tr.ring_drops(), 0);
    let tid = mine[0].tid;
    assert_ne!(tid, r.tid(), "made on the exiting thread");
    assert!(mine.iter().all(|c| c.tid == tid && c.result == 0));
}

#[test]
fn a_library_loaded_later_is_found_and_missing_ones_fail_like_the_real_api() {
    let r = run_scenario("late", &[], &[]);
    r.assert_ok();
    let early: Vec<_> = r
        .stdout
        .lines()
        .filter(|l| l.starts_with("early"))
        .collect();
    // Before any runtime is loaded: cudaErrorInitializationError / ncclSystemError,
    // errno untouched.
    assert_eq!(
        early,
        [
            "early cudaMemcpy 3 77",
            "early cudaMemcpy 3 77",
            "early ncclAllReduce 2 78"
        ]
    );
    assert_eq!(r.value("late"), Some("cudaMemcpy 0 5001"));
    let said = |name: &str| {
        r.gputrace_lines()
            .iter()
            .filter(|l| l.contains(name) && l.contains("not found"))
            .count()
    };
    assert_eq!(
        (said("cudaMemcpy"), said("ncclAllReduce")),
        (1, 1),
        "{}",
        r.stderr
    );
    // The call that initialised CUDA (and so started the trace) is in it, as is the
    // retry through the early pointer; the failed early calls are not.
    let t = r.trace().t;
    let bytes: Vec<u64> = t.host_copies.iter().map(|c| c.bytes).collect();
    assert_eq!(bytes, [5001, 5002]);
}

#[test]
fn with_cupti_callbacks_on_the_hooks_leave_the_calls_to_cupti() {
    // The CUPTI collector tests' fake libcupti: our collector subscribes to its runtime
    // callbacks, so the hooks switch to "classification only".
    let cupti = &gputrace_tests::fakes(gputrace_tests::Cuda::V13).cupti;
    let r = run_scenario("all", &[], &[("GPUTRACE_CUPTI", cupti.to_str().unwrap())]);
    r.assert_ok();
    let tr = r.trace();
    let t = &tr.t;
    assert!(
        !tr.states().contains(&CollectorState::Blind),
        "{:?}",
        tr.states()
    );
    assert_eq!(t.host_copies.len(), 16);
    assert!(t
        .host_copies
        .iter()
        .all(|c| c.flags & HOSTCOPY_FLAG_CUPTI_API != 0 && c.source == CLASS_SOURCE_REGISTRY));
    assert!(t.host_calls.is_empty(), "syncs, memsets, launches: CUPTI's");
    // What CUPTI cannot see is recorded as before.
    assert_eq!(t.host_allocs.len(), 7);
    assert_eq!(t.nccl.len(), 16);
    assert_eq!(t.nvtx.len(), 12);
}
