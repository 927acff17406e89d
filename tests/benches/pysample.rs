//! What the periodic Python stack samples cost: a Python program spins in a busy loop
//! `depth` frames down for a while after one CUDA call (so the sampler knows its
//! thread), traced with `GPUTRACE_PYSAMPLE_MS=0` (no samples) and `=1` (1000 a second,
//! ten times the default rate), in interleaved rounds. Per sample: the extra CPU time of
//! the library's sampler thread ("gputrace-sample", from its schedstat) over the
//! samples in the trace; and the loop's iterations, to show what the sampled thread
//! loses (nothing is stopped: the walk reads its memory from another thread).
//!
//! Run: `cargo bench -p gputrace-tests --bench pysample` (prints medians over rounds).
//! Uses `python3`; skipped without it.

use gputrace_format::Event;
use gputrace_tests::{fakes_src, have_program, median, Cuda, Layout, Wheel};

struct Run {
    iters: f64,
    sampler_cpu_ns: f64,
    samples: f64,
}

fn run(w: &Wheel, period: &str, ms: u32, depth: u32) -> Run {
    let script = fakes_src().join("pystack_app.py");
    let out = w
        .program(
            "python3",
            &[
                script.to_str().unwrap(),
                "sampled",
                &ms.to_string(),
                &depth.to_string(),
            ],
        )
        .env("GPUTRACE_PYSAMPLE_MS", period)
        .run();
    out.assert_ok();
    let get = |k: &str| -> f64 {
        out.stdout
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {k} in {:?}", out.stdout))
    };
    let t = out.only_trace();
    for p in &out.traces {
        let _ = std::fs::remove_file(p);
    }
    let samples = t
        .events()
        .iter()
        .filter(|e| matches!(e, Event::PySample(_)))
        .count() as f64;
    Run {
        iters: get("iters "),
        sampler_cpu_ns: get("sampler_cpu_ns "),
        samples,
    }
}

fn main() {
    if !have_program("python3") {
        eprintln!("skipped: no python3");
        return;
    }
    let rounds = 7;
    let ms = 2000;
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    for depth in [5u32, 40] {
        let (mut off, mut on) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            off.push(run(&w, "0", ms, depth));
            on.push(run(&w, "1", ms, depth));
        }
        let samples = median(&mut on.iter().map(|r| r.samples).collect::<Vec<_>>());
        let cpu_off = median(&mut off.iter().map(|r| r.sampler_cpu_ns).collect::<Vec<_>>());
        let cpu_on = median(&mut on.iter().map(|r| r.sampler_cpu_ns).collect::<Vec<_>>());
        let it_off = median(&mut off.iter().map(|r| r.iters).collect::<Vec<_>>());
        let it_on = median(&mut on.iter().map(|r| r.iters).collect::<Vec<_>>());
        println!("busy loop {depth} frames deep, {ms} ms x {rounds} rounds (medians):");
        println!(
            "  sampler thread CPU: {:.2} ms without samples, {:.2} ms with {samples:.0} samples: {:.2} us per sample",
            cpu_off / 1e6,
            cpu_on / 1e6,
            (cpu_on - cpu_off) / samples.max(1.0) / 1e3
        );
        println!(
            "  loop iterations: {it_off:.0} without, {it_on:.0} with ({:+.2}%)",
            (it_on - it_off) * 100.0 / it_off
        );
    }
}
