//! What one pass of the host sampler costs on this machine's CPU: the CUDA-thread pass
//! (schedstat of each recording thread and the main thread; `stat` too when a thread was
//! mostly off the CPU) and the tree pass (this process and its threads, its children,
//! the machine's counters), with 2 recording threads, 8 other threads and 4 children.
//! CPU time of the sampling thread per pass (its own CPU clock, so a busy machine does not
//! inflate it), medians over rounds (min in brackets), then what that is per second of
//! trace at the default periods (3 ms and 100 ms), as a share of one core.
//!
//! Run: `cargo bench -p gputrace-interpose --bench sampler`.

use gputrace::base::opts::HostSettings;
use gputrace::rings::{self, HostRecord};
use gputrace::session::host::sampler::Sampler;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// This thread's CPU time, s: what a pass costs, without the time other processes of a
/// busy machine took from it.
fn cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let stop = Arc::new(AtomicBool::new(false));
    // Two threads that "issue CUDA work" (own a record ring) and keep computing, and
    // eight that sleep, like a framework's thread pools.
    let mut hs = Vec::new();
    for i in 0..2 {
        let stop = stop.clone();
        hs.push(std::thread::spawn(move || {
            rings::push(&HostRecord {
                kind: rings::REC_API,
                tid: gputrace::base::clock::tid(),
                t0: i,
                ..Default::default()
            });
            let mut x = 1u64;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..10_000 {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                }
                std::hint::black_box(x);
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        }));
    }
    for _ in 0..8 {
        let stop = stop.clone();
        hs.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }));
    }
    let mut kids: Vec<_> = (0..4)
        .map(|_| {
            Command::new("sleep")
                .arg("60")
                .spawn()
                .expect("spawn sleep")
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(50));
    let mut s = Sampler::new(HostSettings::default());
    s.limits();
    s.thread_pass();
    s.tree_pass();
    let mut sink = Vec::new();
    s.take_batch(&mut sink);
    let (fed, own, procs) = s.followed();
    println!(
        "following {fed} CUDA/main threads, {own} threads of this process, {procs} child processes"
    );
    let (mut tp, mut rp) = (Vec::new(), Vec::new());
    for _round in 0..15 {
        let n = 2000;
        let t = cpu_s();
        for _ in 0..n {
            s.thread_pass();
        }
        tp.push((cpu_s() - t) * 1e6 / n as f64);
        sink.clear();
        s.take_batch(&mut sink);
        let n = 200;
        let t = cpu_s();
        for _ in 0..n {
            s.tree_pass();
        }
        rp.push((cpu_s() - t) * 1e6 / n as f64);
        sink.clear();
        s.take_batch(&mut sink);
    }
    let (tmin, rmin) = (
        tp.iter().cloned().fold(f64::MAX, f64::min),
        rp.iter().cloned().fold(f64::MAX, f64::min),
    );
    let (t, r) = (median(&mut tp), median(&mut rp));
    let per_s = t * (1000.0 / 3.0) + r * 10.0;
    println!("thread pass: {t:.2} us ({tmin:.2})");
    println!("tree pass:   {r:.2} us ({rmin:.2})");
    println!(
        "per second of trace at 3 ms / 100 ms: {per_s:.0} us = {:.3}% of one core",
        per_s / 1e4
    );
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        let _ = h.join();
    }
    for k in &mut kids {
        let _ = k.kill();
        let _ = k.wait();
    }
}
