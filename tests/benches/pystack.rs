//! What taking the caller's Python stack costs a call: a Python program makes N
//! `cudaStreamSynchronize` calls through ctypes (into the fake libcudart, which
//! returns at once and makes CUPTI's ENTER/EXIT callbacks into the library, as the
//! real runtime does) from `depth` frames down, traced with `GPUTRACE_PYSTACK=0`
//! (no stacks) and with stacks of 8 and 16 frames, in interleaved rounds. The
//! difference per call is the stack's cost: the walk on the calling thread, its ring
//! records, and the writer's share of the machine (it resolves on another thread).
//!
//! Run: `cargo bench -p gputrace-tests --bench pystack` (prints medians over rounds;
//! results go to bench/cpu-hooks.md). Uses `python3`; skipped without it.

use gputrace_tests::{fakes_src, have_program, median, Cuda, Layout, Wheel};

fn ns_per_call(w: &Wheel, pystack: &str, calls: u32, depth: u32) -> f64 {
    let script = fakes_src().join("pystack_app.py");
    let out = w
        .program(
            "python3",
            &[
                script.to_str().unwrap(),
                "bench",
                &calls.to_string(),
                &depth.to_string(),
            ],
        )
        .env("GPUTRACE_PYSTACK", pystack)
        .run();
    out.assert_ok();
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix("ns_per_call "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no timing in {:?}", out.stdout))
}

fn main() {
    if !have_program("python3") {
        eprintln!("skipped: no python3");
        return;
    }
    let rounds = 7;
    let calls = 200_000;
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    for depth in [5u32, 40] {
        let settings = ["0", "8", "16"];
        let mut t: Vec<Vec<f64>> = vec![Vec::new(); settings.len()];
        for _ in 0..rounds {
            for (i, s) in settings.iter().enumerate() {
                t[i].push(ns_per_call(&w, s, calls, depth));
            }
        }
        let base = median(&mut t[0]);
        println!(
            "stack {depth} frames deep, {calls} calls x {rounds} rounds (median ns per call):"
        );
        println!("  GPUTRACE_PYSTACK=0   {base:8.1}");
        for (i, s) in settings.iter().enumerate().skip(1) {
            let m = median(&mut t[i]);
            println!(
                "  GPUTRACE_PYSTACK={s:<3} {m:8.1}  (+{:.1} ns for the stack)",
                m - base
            );
        }
    }
}
