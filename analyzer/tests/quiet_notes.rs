//! Notes that carry information (issue 38, item 6): no "no progress" note for a stall
//! shorter than the watchdog's threshold (down to "0 ns") or in start-up; measured GPU
//! counters per kernel name only where they are its own (exact), else one line saying why.

mod common;

use common::*;
use gputrace_analyzer::report::{analyze, Report};
use gputrace_format::{self as fmt, Event};

fn notes(r: &Report) -> Vec<String> {
    r.processes[0].notes.clone()
}

/// A stall report with one outstanding op (kernel `corr`) and no threads.
fn stall(b: &mut B, ts: u64, since: u64, id: u32, seq: u32, corr: u32, launch_ts: u64) {
    b.ev.push(Event::Stall(fmt::Stall {
        ts,
        since,
        id,
        seq,
        outstanding: 1,
        flags: 0,
    }));
    let name = b.s("late_kernel");
    b.ev.push(Event::StallOp(fmt::StallOp {
        ts,
        stall: id,
        seq,
        kind: fmt::STALL_OP_KERNEL,
        device: 0,
        stream: 7,
        corr,
        name,
        tid: TID,
        launch_ts,
        ..Default::default()
    }));
}

fn resolved(b: &mut B, ts: u64, since: u64, id: u32) {
    b.ev.push(Event::Stall(fmt::Stall {
        ts,
        since,
        id,
        seq: 1,
        outstanding: 0,
        flags: fmt::STALL_RESOLVED,
    }));
}

fn end(b: &mut B, ts: u64) {
    let r = b.s(fmt::END_EXIT);
    b.ev.push(Event::State {
        ts,
        state: fmt::CollectorState::Stopped as u8,
        reason: r,
    });
}

#[test]
fn a_stall_shorter_than_the_threshold_gets_no_note() {
    // The watchdog reported a stall, but by the time it wrote the report the records had
    // come (its last progress is the report's own time): 0 ns without progress.
    let mut b = B::new();
    let t = startup(&mut b, 40 * GIB);
    let last = healthy_steps(&mut b, t, 40);
    let corr = b.api(TID, last, 5 * US, LAUNCH, "cudaLaunchKernel", 0, 0);
    b.kernel_shape(last + 10 * US, 2 * MS, "late_kernel", corr, BIG);
    stall(&mut b, last + 5 * S, last + 5 * S, 1, 0, corr, last);
    resolved(&mut b, last + 5 * S, last + 5 * S, 1);
    let after = healthy_steps(&mut b, last + 5 * S + MS, 10);
    end(&mut b, after + MS);
    let r = analyze(&[b.build()]);
    let n = notes(&r);
    assert!(!n.iter().any(|x| x.contains("no progress")), "{n:?}");
    assert!(!gputrace_analyzer::render_text(&r).contains("at least 0 ns"));
}

#[test]
fn a_stall_in_start_up_gets_no_note() {
    // Compilation: a first step's kernels at +8 ms, then 6.7 s of host work (compiling)
    // with the last kernel's record late: the watchdog saw no progress from its launch
    // until it resolved. Then the training.
    let mut b = B::new();
    b.alloc(T0, 40 * GIB);
    healthy_steps(&mut b, T0 + 8 * MS, 1);
    let (corr, at) = b
        .events()
        .iter()
        .rev()
        .find_map(|e| match e {
            Event::Kernel(k) => Some((k.corr, k.start)),
            _ => None,
        })
        .unwrap();
    stall(&mut b, at + 5 * S, at, 1, 0, corr, at);
    resolved(&mut b, at + 6662 * MS, at + 6662 * MS, 1);
    let last = healthy_steps(&mut b, T0 + 6700 * MS, 40);
    end(&mut b, last + MS);
    let r = analyze(&[b.build()]);
    let p = &r.processes[0];
    assert!(
        p.steady.start_ns >= 6 * S,
        "steady from {}",
        p.steady.start_ns
    );
    let n = notes(&r);
    assert!(!n.iter().any(|x| x.contains("no progress")), "{n:?}");
}

/// `b` with NVML GPM samples of `period` over its kernels' span.
fn with_gpm(mut b: B, period: u64) -> B {
    let end = b
        .events()
        .iter()
        .filter_map(|e| match e {
            Event::Kernel(k) => Some(k.end),
            _ => None,
        })
        .max()
        .unwrap_or(T0);
    let mut ts = T0;
    while ts < end {
        b.ev.push(Event::CounterSample(fmt::CounterSample {
            start: ts,
            end: ts + period,
            device: 0,
            sm_active: 9_000,
            occupancy: 5_000,
            tensor_active: 100,
            tensor_hmma: 100,
            dram: 3_000,
            fp32_active: 1_000,
            fp64_active: 0,
            fp16_active: 0,
            source: fmt::COUNTER_SOURCE_GPM,
            ..Default::default()
        }));
        ts += period;
    }
    b
}

#[test]
fn per_kernel_counter_rows_only_where_exact() {
    // 100 ms samples over steps of four 2.5 ms kernels: every sample holds all four
    // names, so no name has values of its own: one line says so, no row repeats the mix.
    let r = analyze(&[with_gpm(healthy(30), 100 * MS).build()]);
    let p = &r.processes[0];
    assert!(p.measured_kernels.iter().all(|k| k.attribution == "mixed"));
    let text = gputrace_analyzer::render_text(&r);
    assert!(!text.contains("(mixed)"), "{text}");
    assert!(
        text.contains("per kernel: the 4 busiest kernel names never had a sample to themselves"),
        "{text}"
    );
    // 1 ms samples: each 2.5 ms kernel fills samples alone, so every name has exact rows.
    let r = analyze(&[with_gpm(healthy(30), MS).build()]);
    let p = &r.processes[0];
    assert!(p.measured_kernels.iter().all(|k| k.attribution == "exact"));
    let text = gputrace_analyzer::render_text(&r);
    assert!(text.contains("fwd_gemm x29 (exact)"), "{text}");
    assert!(!text.contains("never had a sample"), "{text}");
}
