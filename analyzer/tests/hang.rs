//! The `hang` finding on synthetic traces with known answers: a stuck kernel with the
//! host waiting and a SIGTERM end; a long kernel that completed; a job whose ranks are
//! stuck in a collective one rank never reached; a trace without stall records that
//! ended abnormally. And no bundled example hangs.

mod common;

use common::*;
use gputrace_analyzer::report::{analyze, Finding, FindingId, Report, Severity};
use gputrace_analyzer::Trace;
use gputrace_format::{self as fmt, Event};
use std::path::{Path, PathBuf};

fn hang(r: &Report) -> Option<&Finding> {
    r.findings.iter().find(|f| f.id == FindingId::Hang)
}

fn text(r: &Report) -> String {
    gputrace_analyzer::render_text(r)
}

/// A Python stack of one frame, defined as `id`.
fn stack(b: &mut B, id: u32, file: &str, function: &str, line: u32) {
    let (file, function) = (b.s(file), b.s(function));
    b.ev.push(Event::PyStack(fmt::PyStack {
        id,
        frames: vec![fmt::PyFrame {
            file,
            function,
            line,
        }],
    }));
}

fn end(b: &mut B, ts: u64, reason: &str) {
    let r = b.s(reason);
    b.ev.push(Event::State {
        ts,
        state: fmt::CollectorState::Stopped as u8,
        reason: r,
    });
}

/// One stall report: the stall, its one outstanding op, its threads (tid, call, call
/// start, stack, state).
#[allow(clippy::too_many_arguments)]
fn stall_report(
    b: &mut B,
    ts: u64,
    since: u64,
    id: u32,
    seq: u32,
    op: fmt::StallOp,
    threads: &[(u32, &str, u64, u32, u8)],
) {
    b.ev.push(Event::Stall(fmt::Stall {
        ts,
        since,
        id,
        seq,
        outstanding: 1,
        flags: 0,
    }));
    b.ev.push(Event::StallOp(fmt::StallOp {
        ts,
        stall: id,
        seq,
        ..op
    }));
    for &(tid, call, call_start, stack, state) in threads {
        let call = if call.is_empty() { 0 } else { b.s(call) };
        b.ev.push(Event::StallThread(fmt::StallThread {
            ts,
            stall: id,
            seq,
            tid,
            call,
            call_start,
            stack,
            state,
        }));
    }
}

/// The times of [`stuck_kernel`], relative to T0.
pub const LAUNCH_AT: u64 = 9 * S;
pub const SPIN_START: u64 = 9 * S + 20 * MS;
pub const SIGTERM_AT: u64 = 34 * S + 700 * MS;

/// A job that trains, then launches `spin_kernel` from train.py:48, which never
/// completes; the main thread waits in cudaDeviceSynchronize at train.py:52 from +9.1 s;
/// a data worker sleeps. The library reports the stall every 5 s from 5 s after the last
/// progress; SIGTERM ends it at +34.7 s. `end_reason`: None leaves the end record out.
pub fn stuck_kernel(end_reason: Option<&str>) -> B {
    let mut b = B::new();
    b.meta.pid = TID;
    let t = startup(&mut b, 40 * GIB);
    let last = healthy_steps(&mut b, t, 40);
    assert!(last < T0 + LAUNCH_AT);
    let threads_name = b.s("pt_data_worker");
    b.ev.push(Event::Thread {
        tid: TID + 1,
        name: threads_name,
    });
    stack(&mut b, 1, "/home/u/train.py", "train_step", 48);
    stack(&mut b, 2, "/home/u/train.py", "main", 52);
    stack(&mut b, 3, "/home/u/data.py", "next_batch", 17);
    let corr = b.api(
        TID,
        T0 + LAUNCH_AT,
        5 * US,
        LAUNCH,
        "cudaLaunchKernel",
        0,
        0,
    );
    b.ev.push(Event::CallSite(fmt::CallSite {
        ts: T0 + LAUNCH_AT,
        tid: TID,
        stack: 1,
    }));
    let name = b.s("_Z11spin_kernelPVi");
    let op = fmt::StallOp {
        kind: fmt::STALL_OP_KERNEL,
        flags: fmt::STALL_OP_FLAG_LAUNCH | fmt::STALL_OP_FLAG_INCOMPLETE,
        device: 0,
        stream: 7,
        corr,
        name,
        tid: TID,
        launch_ts: T0 + LAUNCH_AT,
        start: T0 + SPIN_START,
        grid: [132, 1, 1],
        block: [256, 1, 1],
        ..Default::default()
    };
    let sync_at = T0 + 9 * S + 100 * MS;
    let since = last;
    let mut seq = 0;
    let mut at = since + 5 * S;
    while at < T0 + SIGTERM_AT {
        stall_report(
            &mut b,
            at,
            since,
            1,
            seq,
            op.clone(),
            &[
                (TID, "cudaDeviceSynchronize", sync_at, 2, b'R'),
                (TID + 1, "", 0, 3, b'S'),
            ],
        );
        seq += 1;
        at += 5 * S;
    }
    if let Some(r) = end_reason {
        end(&mut b, T0 + SIGTERM_AT, r);
    }
    b
}

#[test]
fn a_stuck_kernel_with_the_host_waiting_and_a_sigterm_end_is_the_verdict() {
    let b = stuck_kernel(Some(&fmt::end_reason_signal(15)));
    let r = analyze(&[b.build()]);
    let f = hang(&r).unwrap_or_else(|| panic!("no hang finding\n{}", text(&r)));
    assert_eq!(f.severity, Severity::Critical);
    assert_eq!(r.findings[0].id, FindingId::Hang, "{}", text(&r));
    assert_eq!(r.top_finding, Some(FindingId::Hang));
    assert!(r.verdict.starts_with("HANG: "), "{}", r.verdict);
    let s = &f.summary;
    for want in [
        "The GPU ran kernel `spin_kernel` for 25.680 s and it never completed",
        "never completed",
        "the main thread waited in `cudaDeviceSynchronize` at `train.py:52` from +9.1 s",
        "the job ended by SIGTERM at +34.7 s",
    ] {
        assert!(s.contains(want), "{want:?} not in {s:?}");
    }
    let h = f.hang.as_deref().expect("hang object");
    // The kernel ran from its start to the SIGTERM.
    assert_eq!(h.stuck_for_ns, SIGTERM_AT - SPIN_START);
    assert!(s.contains("for 25.680 s"), "{s}");
    assert_eq!(h.source, "stall_records");
    assert_eq!(h.op.kind, "kernel");
    assert_eq!(h.op.device, Some(0));
    assert_eq!(h.op.stream, Some(7));
    assert_eq!(h.op.launched_at_ns, Some(LAUNCH_AT));
    assert_eq!(h.op.started_at_ns, Some(SPIN_START));
    assert_eq!(h.reports, 6);
    let end = h.end.as_ref().unwrap();
    assert_eq!(
        (end.how.as_str(), end.signal.as_deref(), end.at_ns),
        ("signal", Some("SIGTERM"), SIGTERM_AT)
    );
    assert_eq!(h.threads.len(), 2);
    let worker = h.threads.iter().find(|t| t.tid == TID + 1).unwrap();
    assert_eq!(worker.name, "pt_data_worker");
    assert_eq!(worker.call, None);
    assert_eq!(worker.place.as_ref().map(|p| p.line), Some(17));
    assert_eq!(worker.state.as_deref(), Some("S"));
    // The time at stake is the stall: from the last progress to the end.
    assert_eq!(f.at_stake_ns, h.until_ns - h.last_progress_ns);
    assert!(f.fix.contains("compute-sanitizer"), "{}", f.fix);
    // The JSON carries the object.
    let j: serde_json::Value = serde_json::to_value(&r).unwrap();
    let jh = &j["findings"][0]["hang"];
    assert_eq!(jh["op"]["name"], "spin_kernel");
    assert_eq!(jh["op"]["launch_site"]["line"], 48);
    assert_eq!(jh["end"]["signal"], "SIGTERM");
    assert_eq!(jh["threads"][0]["call"], "cudaDeviceSynchronize");
    assert!(j["findings"][1].get("hang").is_none());
    // And the text report leads with it.
    let txt = text(&r);
    assert!(txt.contains("VERDICT: HANG: "), "{txt}");
    assert!(txt.contains(" 1. CRITICAL hang"), "{txt}");
    if std::env::var_os("HANG_SHOW").is_some() {
        eprintln!("{txt}");
    }
}

#[test]
fn killed_with_no_end_record_the_hang_says_so() {
    let r = analyze(&[stuck_kernel(None).build()]);
    let f = hang(&r).expect("hang");
    assert!(f.summary.contains("no end record"), "{}", f.summary);
    assert_eq!(
        f.hang.as_ref().unwrap().end.as_ref().unwrap().how,
        "cut_short"
    );
}

#[test]
fn a_long_kernel_that_completed_is_no_hang() {
    let mut b = B::new();
    let t = startup(&mut b, 40 * GIB);
    let last = healthy_steps(&mut b, t, 40);
    // A 12 s kernel: the library reports a stall at 5 and 10 s, then it completes.
    let corr = b.api(TID, last, 5 * US, LAUNCH, "cudaLaunchKernel", 0, 0);
    b.kernel_shape(last + 10 * US, 12 * S, "long_reduce", corr, BIG);
    let name = b.s("long_reduce");
    let op = fmt::StallOp {
        kind: fmt::STALL_OP_KERNEL,
        device: 0,
        stream: 7,
        corr,
        name,
        tid: TID,
        launch_ts: last,
        start: last + 10 * US,
        ..Default::default()
    };
    for seq in 0..2 {
        stall_report(
            &mut b,
            last + (5 + 5 * seq as u64) * S,
            last,
            1,
            seq,
            op.clone(),
            &[(TID, "cudaStreamSynchronize", last + 20 * US, 0, b'S')],
        );
    }
    let after = healthy_steps(&mut b, last + 12 * S + MS, 10);
    end(&mut b, after + MS, fmt::END_EXIT);
    let r = analyze(&[b.build()]);
    assert!(hang(&r).is_none(), "{}", text(&r));
    assert!(!r.verdict.starts_with("HANG"), "{}", r.verdict);
    let notes = &r.processes[0].notes;
    assert!(
        notes
            .iter()
            .any(|n| n.contains("long operation, not a hang") && n.contains("long_reduce")),
        "{notes:?}"
    );
    // A stall the library saw resolve is no hang either, even without the record.
    let mut b2 = B::new();
    let t = startup(&mut b2, 40 * GIB);
    let last = healthy_steps(&mut b2, t, 40);
    let corr = b2.api(TID, last, 5 * US, LAUNCH, "cudaLaunchKernel", 0, 0);
    let op = fmt::StallOp {
        kind: fmt::STALL_OP_KERNEL,
        corr,
        tid: TID,
        launch_ts: last,
        ..Default::default()
    };
    stall_report(&mut b2, last + 5 * S, last, 1, 0, op, &[]);
    b2.ev.push(Event::Stall(fmt::Stall {
        ts: last + 7 * S,
        since: last,
        id: 1,
        seq: 1,
        outstanding: 0,
        flags: fmt::STALL_RESOLVED,
    }));
    end(&mut b2, last + 8 * S, fmt::END_EXIT);
    let r = analyze(&[b2.build()]);
    assert!(hang(&r).is_none(), "{}", text(&r));
}

/// A long kernel whose record a forced flush lost (CUPTI hands an incomplete record over
/// once and never again: seen on the H200 with a 3 s kernel and a 1 s threshold): the
/// library reported it outstanding until the end, but work launched after it on its
/// stream ran and the job exited normally. Stream order says it completed: no hang.
#[test]
fn a_long_kernel_whose_record_a_forced_flush_lost_is_no_hang() {
    let mut b = B::new();
    let t = startup(&mut b, 40 * GIB);
    let last = healthy_steps(&mut b, t, 40);
    let corr = b.api(TID, last, 5 * US, LAUNCH, "cudaLaunchKernel", 0, 0);
    let name = b.s("spin_kernel");
    let op = fmt::StallOp {
        kind: fmt::STALL_OP_KERNEL,
        flags: fmt::STALL_OP_FLAG_LAUNCH | fmt::STALL_OP_FLAG_INCOMPLETE,
        device: 0,
        stream: 7,
        corr,
        name,
        tid: TID,
        launch_ts: last,
        ..Default::default()
    };
    for seq in 0..3 {
        let at = last + (1 + seq as u64) * S;
        let th = [(TID, "cudaDeviceSynchronize", last + 20 * US, 0, b'S')];
        stall_report(&mut b, at, last, 1, seq, op.clone(), &th);
    }
    // The kernel ended at +3 s; ten steps ran on the same stream after it.
    let after = healthy_steps(&mut b, last + 3 * S, 10);
    // The report made at exit still lists it (its record never came).
    b.ev.push(Event::Stall(fmt::Stall {
        ts: after + MS,
        since: after,
        id: 1,
        seq: 3,
        outstanding: 1,
        flags: fmt::STALL_END,
    }));
    b.ev.push(Event::StallOp(fmt::StallOp {
        ts: after + MS,
        seq: 3,
        stall: 1,
        ..op
    }));
    end(&mut b, after + 2 * MS, fmt::END_EXIT);
    let r = analyze(&[b.build()]);
    assert!(hang(&r).is_none(), "{}", text(&r));
    assert!(!r.verdict.starts_with("HANG"), "{}", r.verdict);
}

/// A job killed mid-step: the library's report at the end lists the kernel in flight.
/// Not a hang when its GPU made progress within the watchdog's threshold; a hang when it
/// made none for longer (the watchdog off: the end report is all there is).
#[test]
fn work_in_flight_at_a_kill_is_a_hang_only_after_the_stall_threshold() {
    let build = |gap: u64| {
        let mut b = B::new();
        let t = startup(&mut b, 40 * GIB);
        let last = healthy_steps(&mut b, t, 40);
        let corr = b.api(TID, last, 5 * US, LAUNCH, "cudaLaunchKernel", 0, 0);
        let name = b.s("fwd_gemm");
        let op = fmt::StallOp {
            kind: fmt::STALL_OP_KERNEL,
            device: 0,
            stream: 7,
            corr,
            name,
            tid: TID,
            launch_ts: last,
            start: last + 10 * US,
            ..Default::default()
        };
        let at = last + gap;
        b.ev.push(Event::Stall(fmt::Stall {
            ts: at,
            since: last,
            id: 1,
            seq: 0,
            outstanding: 1,
            flags: fmt::STALL_END | fmt::STALL_FORCED_FLUSH,
        }));
        b.ev.push(Event::StallOp(fmt::StallOp {
            ts: at,
            stall: 1,
            seq: 0,
            ..op
        }));
        end(&mut b, at, &fmt::end_reason_signal(15));
        b.build()
    };
    let r = analyze(&[build(3 * MS)]);
    assert!(hang(&r).is_none(), "{}", text(&r));
    let r = analyze(&[build(20 * S)]);
    let f = hang(&r).unwrap_or_else(|| panic!("no hang\n{}", text(&r)));
    assert!(f.summary.contains("kernel `fwd_gemm`"), "{}", f.summary);
    assert!(f.summary.contains("SIGTERM"), "{}", f.summary);
}

const COMM: u64 = 0xC0FFEE;
const GOOD_STEPS: u64 = 20;

/// Three ranks in one all-reduce communicator. Each step: compute, then all_reduce
/// number k. After step 20, ranks 0 and 2 call all_reduce #21 and their NCCL kernels
/// spin for the rank that never comes; rank 1 is in its data loader (data.py:77) and
/// never calls it. SIGTERM ends all three at +40 s.
fn nccl_job() -> Vec<Trace> {
    nccl_job_events(true).into_iter().map(B::build).collect()
}

/// [`nccl_job`]'s traces, with the end records when `ended` (else still being written).
fn nccl_job_events(ended: bool) -> Vec<B> {
    (0..3u32)
        .map(|r| {
            let mut b = B::new();
            b.meta.pid = 5000 + r;
            b.meta.host = format!("node{r}");
            b.meta.options = vec![("RANK".into(), r.to_string())];
            let t = startup(&mut b, 40 * GIB);
            let period = 10 * MS;
            let mut last_end = t;
            for k in 0..GOOD_STEPS {
                let s = t + k * period;
                b.launch(s, 5 * US, s + 20 * US, 6 * MS, "fwd_bwd", BIG);
                let c_at = s + 30 * US;
                b.ev.push(Event::Nccl(fmt::Nccl {
                    start: c_at,
                    end: c_at + 10 * US,
                    tid: TID,
                    op: fmt::NCCL_ALL_REDUCE,
                    bytes: 4 << 20,
                    comm_id: COMM,
                    rank: r as i32,
                    nranks: 3,
                    seq: k + 1,
                    ..Default::default()
                }));
                b.launch(
                    c_at + 2 * US,
                    5 * US,
                    s + 6 * MS + 30 * US,
                    2 * MS,
                    ALLREDUCE,
                    BIG,
                );
                last_end = s + 8 * MS + 30 * US;
            }
            let s = t + GOOD_STEPS * period;
            stack(&mut b, 1, "/home/u/train.py", "train_step", 61);
            stack(&mut b, 2, "/home/u/train.py", "main", 64);
            stack(&mut b, 3, "/home/u/data.py", "load", 77);
            if r != 1 {
                let c_at = s + 30 * US;
                b.ev.push(Event::Nccl(fmt::Nccl {
                    start: c_at,
                    end: c_at + 10 * US,
                    tid: TID,
                    op: fmt::NCCL_ALL_REDUCE,
                    bytes: 4 << 20,
                    comm_id: COMM,
                    rank: r as i32,
                    nranks: 3,
                    seq: GOOD_STEPS + 1,
                    ..Default::default()
                }));
                let corr = b.api(TID, c_at + 2 * US, 5 * US, LAUNCH, "cudaLaunchKernel", 0, 0);
                let name = b.s(ALLREDUCE);
                let op = fmt::StallOp {
                    kind: fmt::STALL_OP_KERNEL,
                    device: 0,
                    stream: 13,
                    corr,
                    name,
                    tid: TID,
                    launch_ts: c_at + 2 * US,
                    start: c_at + 20 * US,
                    grid: [2, 1, 1],
                    block: [512, 1, 1],
                    ..Default::default()
                };
                let mut seq = 0;
                let mut at = last_end + 5 * S;
                while at < T0 + 40 * S {
                    stall_report(
                        &mut b,
                        at,
                        last_end,
                        1,
                        seq,
                        op.clone(),
                        &[(TID, "cudaStreamSynchronize", c_at + 50 * US, 2, b'R')],
                    );
                    seq += 1;
                    at += 5 * S;
                }
            } else {
                // Rank 1 is loading data: its samples say where.
                for i in 0..300 {
                    b.ev.push(Event::PySample(fmt::PySample {
                        ts: s + i * 100 * MS,
                        tid: TID,
                        stack: 3,
                    }));
                }
            }
            if ended {
                end(&mut b, T0 + 40 * S, &fmt::end_reason_signal(15));
            }
            b
        })
        .collect()
}

#[test]
fn the_rank_that_never_arrived_at_a_stuck_collective_is_named() {
    let r = analyze(&nccl_job());
    let hangs: Vec<&Finding> = r
        .findings
        .iter()
        .filter(|f| f.id == FindingId::Hang)
        .collect();
    let ranks: Vec<&str> = hangs.iter().map(|f| f.rank.as_str()).collect();
    assert_eq!(ranks.len(), 2, "{ranks:?}\n{}", text(&r));
    assert!(
        ranks.contains(&"rank 0") && ranks.contains(&"rank 2"),
        "{ranks:?}"
    );
    for f in &hangs {
        let n = f.hang.as_ref().unwrap().nccl.as_ref().expect("nccl state");
        assert_eq!(n.comm_id, "0xc0ffee");
        assert_eq!(n.op, "ncclAllReduce");
        assert_eq!(n.seq, GOOD_STEPS + 1);
        assert_eq!(n.bytes, 4 << 20);
        assert_eq!(n.never_arrived, vec!["rank 1".to_string()]);
        assert!(n.untraced_ranks.is_empty());
        let r1 = n.ranks.iter().find(|x| x.rank == 1).unwrap();
        assert_eq!((r1.last_seq, r1.arrived), (GOOD_STEPS, false));
        assert_eq!(
            (r1.last_op.as_str(), r1.last_bytes),
            ("ncclAllReduce", 4 << 20)
        );
        let h1 = r1.host.as_deref().unwrap_or("");
        assert!(h1.contains("data.py:77"), "{h1}");
        assert!(n.ranks.iter().filter(|x| x.arrived).count() == 2);
        assert!(f.summary.contains("rank 1 never arrived"), "{}", f.summary);
        assert!(
            f.summary
                .contains("`ncclAllReduce` #21 (4.0 MiB) on communicator 0xc0ffee (rank "),
            "{}",
            f.summary
        );
        assert!(f.fix.contains("NCCL_DEBUG=INFO"), "{}", f.fix);
        assert!(
            f.evidence
                .iter()
                .any(|e| e.contains("rank 1: last call") && e.contains("never arrived")),
            "{:?}",
            f.evidence
        );
    }
    assert!(r.verdict.starts_with("HANG on rank "), "{}", r.verdict);
    assert!(r.verdict.contains("rank 1 never arrived"), "{}", r.verdict);
    // Given one stuck rank alone, the finding says which ranks it has no trace of.
    let mut job = nccl_job();
    let one = analyze(&[job.remove(0)]);
    let n = hang(&one)
        .unwrap()
        .hang
        .as_ref()
        .unwrap()
        .nccl
        .clone()
        .unwrap();
    assert!(n.never_arrived.is_empty());
    assert_eq!(n.seq, GOOD_STEPS + 1);
}

/// A job with no stall records (an older library): it trains, launches 3 kernels after
/// the last GPU record, none of which has a record, and the host is silent until
/// `reason` ends it at +30 s.
fn ended_after_launches(reason: Option<&str>) -> B {
    let mut b = B::new();
    b.meta.pid = TID;
    let t = startup(&mut b, 40 * GIB);
    let last = healthy_steps(&mut b, t, 40);
    stack(&mut b, 1, "/home/u/train.py", "main", 52);
    for i in 0..3 {
        b.api(
            TID,
            last + 100 * US + i * 20 * US,
            5 * US,
            LAUNCH,
            "cudaLaunchKernel",
            0,
            0,
        );
    }
    for i in 0..20 {
        b.ev.push(Event::PySample(fmt::PySample {
            ts: last + S + i * S,
            tid: TID,
            stack: 1,
        }));
    }
    if let Some(r) = reason {
        end(&mut b, T0 + 30 * S, r);
    }
    b
}

#[test]
fn without_stall_records_an_abnormal_end_after_unanswered_launches_is_a_hang() {
    let r = analyze(&[ended_after_launches(Some(&fmt::end_reason_signal(15))).build()]);
    let f = hang(&r).unwrap_or_else(|| panic!("no hang\n{}", text(&r)));
    assert!(f.estimated);
    assert_eq!(f.severity, Severity::Critical);
    let h = f.hang.as_ref().unwrap();
    assert_eq!(h.source, "end_of_trace");
    assert_eq!(h.op.kind, "launch");
    assert_eq!(h.outstanding, 3);
    assert!(f.summary.contains("cudaLaunchKernel"), "{}", f.summary);
    assert!(f.summary.contains("SIGTERM"), "{}", f.summary);
    assert!(f.summary.contains("train.py:52"), "{}", f.summary);
    assert!(r.verdict.starts_with("HANG (inferred"), "{}", r.verdict);
    // Cut short (SIGKILL): still a hang.
    let r = analyze(&[ended_after_launches(None).build()]);
    assert!(hang(&r).is_some(), "{}", text(&r));
    // No GPU record at all (an older library lost them on SIGTERM): the host's last
    // launch, and its silence after, still tell it.
    let mut b = B::new();
    b.meta.pid = TID;
    let mut at = T0 + S;
    for _ in 0..200 {
        b.api(TID, at, 5 * US, LAUNCH, "cudaLaunchKernel", 0, 0);
        at += 10 * MS;
    }
    end(&mut b, at + 25 * S, &fmt::end_reason_signal(15));
    let r = analyze(&[b.build()]);
    let f = hang(&r).unwrap_or_else(|| panic!("no hang\n{}", text(&r)));
    let h = f.hang.as_ref().unwrap();
    assert_eq!(h.outstanding, 200);
    // Times from the trace's first record, the first launch.
    assert_eq!(h.op.launched_at_ns, Some(199 * 10 * MS));
    assert!(
        f.summary.contains("no host call after +2.0 s"),
        "{}",
        f.summary
    );
    // The same trace ended by a normal exit: no hang.
    let r = analyze(&[ended_after_launches(Some(fmt::END_EXIT)).build()]);
    assert!(hang(&r).is_none(), "{}", text(&r));
}

#[test]
fn a_normal_trace_cut_short_is_no_hang() {
    // Killed while it ran normally: the host called until the end.
    let mut b = B::new();
    let t = startup(&mut b, 40 * GIB);
    let last = healthy_steps(&mut b, t, 40);
    b.api(
        TID,
        last + 10 * US,
        5 * US,
        LAUNCH,
        "cudaLaunchKernel",
        0,
        0,
    );
    let r = analyze(&[b.build()]);
    assert!(hang(&r).is_none(), "{}", text(&r));
    // Ended by SIGTERM in the middle of work: the host was calling until then.
    let mut b = healthy(40);
    let last = b
        .events()
        .iter()
        .filter_map(|e| match e {
            Event::Api(a) => Some(a.end),
            _ => None,
        })
        .max()
        .unwrap();
    end(&mut b, last + 50 * MS, &fmt::end_reason_signal(15));
    let r = analyze(&[b.build()]);
    assert!(hang(&r).is_none(), "{}", text(&r));
}

fn traces_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            traces_under(&p, out);
        } else if p.extension().is_some_and(|x| x == "gtrace") {
            out.push(p);
        }
    }
}

/// Every bundled example but the one recorded stuck on purpose (examples/stuck, checked
/// in h200_examples.rs) reads without a hang.
#[test]
fn no_bundled_example_hangs() {
    let mut files = Vec::new();
    traces_under(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples"),
        &mut files,
    );
    let mut seen = 0;
    for p in files {
        let t = Trace::load(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        if t.meta.is_environment() || p.parent().is_some_and(|d| d.ends_with("stuck")) {
            continue;
        }
        seen += 1;
        let r = analyze(&[t]);
        assert!(hang(&r).is_none(), "{}: {}", p.display(), r.verdict);
        assert!(!r.verdict.starts_with("HANG"), "{}", r.verdict);
    }
    assert!(seen >= 8, "only {seen} example traces");
}

/// The file this process's libc was loaded from: a real shared library that changes
/// nothing when preloaded, standing in for libgputrace.so.
fn libc_path() -> PathBuf {
    // SAFETY: dladdr only reads the loader's tables; info is an out-parameter.
    let name = unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        let found = libc::dladdr(libc::getpid as *const libc::c_void, &mut info);
        assert!(
            found != 0 && !info.dli_fname.is_null(),
            "dladdr found no libc"
        );
        std::ffi::CStr::from_ptr(info.dli_fname)
            .to_string_lossy()
            .into_owned()
    };
    std::fs::canonicalize(&name).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A trace file's bytes in compressed chunks of about 8 KiB, as the library writes them
/// (their headers carry a tag census).
fn compressed(b: &B) -> Vec<u8> {
    let mut w = fmt::ChunkWriter::new(Vec::new(), &b.meta).unwrap();
    let mut enc = fmt::Encoder::new();
    for e in b.events() {
        enc.push(e);
        if enc.len() > 8192 {
            w.write_events(&mut enc).unwrap();
        }
    }
    w.write_events(&mut enc).unwrap();
    w.into_inner()
}

/// What a `gputrace run --hang-timeout 2s` of a job that writes the given traces saw.
struct Live {
    /// gputrace's stderr up to the end of the `reports`-th live report.
    live: String,
    /// The job was running after them (not ended, not a zombie).
    job_alive: bool,
    /// The GPUTRACE_STALL_MS the job was started with.
    stall_ms: String,
    /// After the test ended the job with SIGTERM through gputrace.
    status: std::process::ExitStatus,
    stderr: String,
    stdout: String,
}

/// Runs `gputrace run --hang-timeout 2s` on a job that copies `files` into its trace
/// directory and then sleeps (what matters is what gputrace does while it runs); waits
/// for `reports` hang reports, checks the job is still running, then ends it.
fn run_live(files: &[(&str, &B)], reports: usize) -> Live {
    use std::io::{BufRead, BufReader, Read};
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "gputrace-hangrun-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut copies = String::new();
    for (name, b) in files {
        let prepared = dir.join(format!("{name}.bin"));
        std::fs::write(&prepared, compressed(b)).unwrap();
        copies.push_str(&format!(
            "cp '{}' \"$GPUTRACE_DIR/{name}.gtrace\"; ",
            prepared.display()
        ));
    }
    let out = dir.join("traces");
    let pidfile = dir.join("job.pid");
    let stallms = dir.join("stall_ms");
    let script = format!(
        "echo \"$GPUTRACE_STALL_MS\" > '{}'; echo $$ > '{}'; {copies}exec sleep 120",
        stallms.display(),
        pidfile.display(),
    );
    let mut c = Command::new(env!("CARGO_BIN_EXE_gputrace"));
    c.args(["run", "--hang-timeout", "2s", "-o"])
        .arg(&out)
        .args(["--", "sh", "-c", &script])
        .env("GPUTRACE_LIB", libc_path())
        .env_remove("LD_PRELOAD")
        .env_remove("GPUTRACE_STALL_MS")
        .env("GPUTRACE_NVML", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe calls (signal) between fork and exec.
    unsafe {
        c.pre_exec(|| {
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = c.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            all.push_str(&line);
            all.push('\n');
            let _ = tx.send(line);
        }
        all
    });
    let mut stdout = child.stdout.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    // Until the reports' last lines (a guard against a hung test, not a measure: a
    // report comes once the watcher has read the files).
    let mut got: Vec<String> = Vec::new();
    while got
        .iter()
        .filter(|l| l.contains("gputrace leaves it be"))
        .count()
        < reports
    {
        match rx.recv_timeout(std::time::Duration::from_secs(120)) {
            Ok(l) => got.push(l),
            Err(_) => {
                let _ = child.kill();
                panic!("no hang report; stderr so far: {got:#?}");
            }
        }
    }
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: signal 0 only checks that the process exists.
    let exists = unsafe { libc::kill(pid, 0) } == 0;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit(')')
        .next()
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or("");
    let job_alive = exists && state != "Z" && child.try_wait().unwrap().is_none();
    // Now end it (gputrace passes SIGTERM on); the report afterwards follows.
    // SAFETY: a signal to the child we started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    let live = Live {
        live: got.join("\n"),
        job_alive,
        stall_ms: std::fs::read_to_string(&stallms)
            .unwrap_or_default()
            .trim()
            .to_string(),
        status,
        stderr: reader.join().unwrap(),
        stdout: out_reader.join().unwrap(),
    };
    let _ = std::fs::remove_dir_all(&dir);
    live
}

/// `gputrace run --hang-timeout 2s` on a job whose trace shows a stuck kernel: the hang
/// report comes on stderr while the job runs, once, and the job is still running after
/// it (this test ends it).
#[test]
fn run_reports_a_hang_while_the_job_still_runs_and_leaves_it_running() {
    let l = run_live(&[("stuck", &stuck_kernel(None))], 1);
    let all = &l.live;
    assert!(all.contains("gputrace: ======== HANG in pid"), "{all}");
    assert!(
        all.contains("The GPU has run kernel `spin_kernel` for")
            && all.contains("it has not completed"),
        "{all}"
    );
    assert!(all.contains("cudaDeviceSynchronize"), "{all}");
    assert!(l.job_alive, "the job ended after the report");
    // The job was told to report stalls at half the timeout.
    assert_eq!(l.stall_ms, "1000");
    assert_eq!(l.status.code(), Some(143), "{}", l.stderr);
    assert_eq!(
        l.stderr.matches("======== HANG").count(),
        1,
        "one report per stall: {}",
        l.stderr
    );
    assert!(
        l.stdout.contains("VERDICT: HANG: "),
        "{}\n{}",
        l.stdout,
        l.stderr
    );
}

/// Ranks stuck in a collective, run together: each live report says which rank never
/// arrived, from the other ranks' traces.
#[test]
fn run_says_live_which_rank_never_arrived() {
    let ranks = nccl_job_events(false);
    let files: Vec<(String, &B)> = ranks
        .iter()
        .enumerate()
        .map(|(i, b)| (format!("rank{i}"), b))
        .collect();
    let files: Vec<(&str, &B)> = files.iter().map(|(n, b)| (n.as_str(), *b)).collect();
    let l = run_live(&files, 2);
    assert!(l.job_alive);
    let heads = l.live.matches("======== HANG in pid").count();
    assert_eq!(heads, 2, "ranks 0 and 2: {}", l.live);
    assert_eq!(
        l.live.matches("rank 1 never arrived at it").count(),
        2,
        "{}",
        l.live
    );
    assert!(l.live.contains("`ncclAllReduce` #21"), "{}", l.live);
}
