//! The steady state is the repeating loop, whatever comes before or after it.

mod common;

use common::*;
use gputrace_analyzer::report::analyze;

/// Steps of `kernels` kernels of `dur` each (launched ahead, back to back on the GPU),
/// then `gap` of host time before the next step's launches.
fn steps(b: &mut B, mut h: u64, n: usize, kernels: usize, dur: u64, gap: u64) -> u64 {
    for _ in 0..n {
        let mut gpu = h + 10 * US;
        for j in 0..kernels {
            let name = format!("layer_{j}");
            b.launch(h + j as u64 * 10 * US, 5 * US, gpu, dur, &name, BIG);
            gpu += dur + US;
        }
        h = gpu + gap;
    }
    h
}

#[test]
fn a_long_pause_before_the_loop_is_start_up() {
    let mut b = B::new();
    let t = startup(&mut b, 2 * GIB);
    // Three warm-up iterations, an 8 s pause on the host, then the loop.
    let h = steps(&mut b, t, 3, 20, 2 * MS, 3 * MS);
    let loop_start = h + 8 * S;
    let end = steps(&mut b, loop_start, 300, 20, 2 * MS, 3 * MS);
    let r = analyze(&[b.build()]);
    let p = &r.processes[0];
    let text = gputrace_analyzer::render_text(&r);
    assert!(p.steps.count >= 290, "{}\n{text}", p.steps.count);
    assert!(p.steps.spread_pct < 20.0, "{text}");
    assert!(
        p.startup.end_ns + p.steps.step_ns_median >= loop_start - T0 - 10 * MS,
        "{text}"
    );
    assert!(
        p.steady.end_ns + 2 * p.steps.step_ns_median >= end - T0 - 10 * MS,
        "{text}"
    );
}

#[test]
fn a_long_pause_after_the_loop_is_not_steady_state() {
    let mut b = B::new();
    let t = startup(&mut b, 2 * GIB);
    let h = steps(&mut b, t, 200, 20, 2 * MS, 3 * MS);
    // Evaluation and checkpointing after a pause: a few more of the same steps.
    steps(&mut b, h + 6 * S, 3, 20, 2 * MS, 3 * MS);
    let r = analyze(&[b.build()]);
    let p = &r.processes[0];
    let text = gputrace_analyzer::render_text(&r);
    assert!(p.steps.spread_pct < 20.0, "{text}");
    assert!(p.steady.end_ns <= h - T0 + 10 * MS, "{text}");
    assert!(p.steps.count >= 190, "{text}");
}

#[test]
fn long_steps_of_hundreds_of_ms_are_found() {
    let mut b = B::new();
    let t = startup(&mut b, 2 * GIB);
    // 300 ms steps: 60 kernels of 4 ms and a 60 ms host gap; 2 s pause before.
    let h = steps(&mut b, t, 2, 60, 4 * MS, 60 * MS);
    steps(&mut b, h + 5 * S, 30, 60, 4 * MS, 60 * MS);
    let r = analyze(&[b.build()]);
    let p = &r.processes[0];
    let text = gputrace_analyzer::render_text(&r);
    assert!(p.steps.count >= 28, "{text}");
    assert!(p.steps.spread_pct < 20.0, "{text}");
    let d = p.steps.step_ns_median;
    assert!(d > 290 * MS && d < 320 * MS, "{text}");
}

#[test]
fn a_step_of_one_kernel_repeated_is_told_by_its_gaps() {
    // Each step launches the same kernel four times, back to back, then waits 40 ms:
    // the name sequence repeats every kernel, the GPU's gaps every four.
    let mut b = B::new();
    let mut h = startup(&mut b, 2 * GIB);
    for _ in 0..30 {
        let mut gpu = h + 10 * US;
        for j in 0..4u64 {
            b.launch(h + j * 2 * US, US, gpu, 50 * US, "_Z7forwardPf", BIG);
            gpu += 51 * US;
        }
        h = gpu + 40 * MS;
    }
    let r = analyze(&[b.build()]);
    let p = &r.processes[0];
    let text = gputrace_analyzer::render_text(&r);
    assert!(
        (27..=30).contains(&p.steps.count),
        "{} steps\n{text}",
        p.steps.count
    );
    assert!(p.steady.wall_ns > 1_000 * MS, "{text}");
    assert!(p.breakdown.idle_pct > 90.0, "{text}");
    assert!(!r.verdict.starts_with("Healthy"), "{}", r.verdict);
}
