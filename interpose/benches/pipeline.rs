//! Throughput of the recording pipeline on the CPU:
//! * ring push/drain with 1, 8 and 64 producer threads and one draining thread (the
//!   writer's role), in records per second;
//! * the writer's encode + chunk + write to a file, in events per second and bytes per
//!   event, on kernel records shaped like a launch-bound loop's.
//!
//! Run: `cargo bench -p gputrace-interpose --bench pipeline` (prints one JSON line;
//! results recorded in bench/cpu.json). `GPUTRACE_BENCH_WRITER_FILE=F` only writes the
//! writer's trace (5.4 M kernel events) to F.

use gputrace::rings::{self as ring, HostRecord, REC_API};
use gputrace_format::{ChunkWriter, Encoder, Event, Kernel, Meta};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

fn rings(producers: usize, per: u64) -> (f64, u64, u64) {
    ring::drain_all(|_, _| {});
    let stop = Arc::new(AtomicBool::new(false));
    let drained = Arc::new(AtomicU64::new(0));
    let consumer = {
        let stop = stop.clone();
        let drained = drained.clone();
        std::thread::spawn(move || {
            let mut dropped = 0;
            loop {
                let done = stop.load(Ordering::Acquire);
                let (n, d) = ring::drain_all(|_, r| {
                    std::hint::black_box(r);
                });
                drained.fetch_add(n as u64, Ordering::Relaxed);
                dropped += d;
                if done {
                    let (n, d) = ring::drain_all(|_, _| {});
                    drained.fetch_add(n as u64, Ordering::Relaxed);
                    return dropped + d;
                }
                std::thread::yield_now();
            }
        })
    };
    let t0 = Instant::now();
    let hs: Vec<_> = (0..producers)
        .map(|t| {
            std::thread::spawn(move || {
                let mut rec = HostRecord {
                    kind: REC_API,
                    tid: t as u32,
                    ..Default::default()
                };
                for i in 0..per {
                    rec.t0 = i;
                    ring::push(&rec);
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let secs = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Release);
    let dropped = consumer.join().unwrap();
    let total = producers as u64 * per;
    (
        total as f64 / secs,
        drained.load(Ordering::Relaxed),
        dropped,
    )
}

/// Kernel events written to a file through the writer's encoder and chunk writer,
/// compressed or not: (events/s, bytes per event). Timestamps jitter as real ones do.
fn writer(n: u64, compress: bool) -> (f64, f64) {
    let path = std::env::temp_dir().join(format!("gputrace-bench-{}.gtrace", std::process::id()));
    let r = write_trace(&path, n, compress);
    let _ = std::fs::remove_file(&path);
    r
}

/// [`writer`] into `path`, kept.
fn write_trace(path: &std::path::Path, n: u64, compress: bool) -> (f64, f64) {
    let f = std::fs::File::create(path).unwrap();
    let mut w = ChunkWriter::new(std::io::BufWriter::new(f), &Meta::default()).unwrap();
    if !compress {
        w = w.without_compression();
    }
    let mut enc = Encoder::new();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut jit = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % 700
    };
    let mut t = 1_700_000_000_000_000_000u64;
    let t0 = Instant::now();
    for i in 0..n {
        t += 7_000 + jit();
        enc.push(&Event::Kernel(Kernel {
            start: t,
            end: t + 2_000 + jit(),
            device: 0,
            stream: 7,
            corr: 3 + i as u32 * 3,
            name: 1 + (i % 4) as u32,
            grid: [1, 1, 1],
            block: [128, 1, 1],
            registers: 16,
            ..Default::default()
        }));
        if enc.len() >= 1 << 20 {
            w.write_events(&mut enc).unwrap();
        }
    }
    w.write_events(&mut enc).unwrap();
    w.flush().unwrap();
    let secs = t0.elapsed().as_secs_f64();
    let bytes = std::fs::metadata(path).unwrap().len();
    (n as f64 / secs, bytes as f64 / n as f64)
}

fn main() {
    // GPUTRACE_BENCH_WRITER_FILE=F: only write the writer's trace of 5.4 M kernel events
    // to F (the analyzer's benchmark of a real writer's file, scripts/bench-analyzer.sh).
    if let Some(p) = std::env::var_os("GPUTRACE_BENCH_WRITER_FILE") {
        let (_, bpe) = write_trace(std::path::Path::new(&p), 5_400_000, true);
        println!("wrote 5400000 kernel events, {bpe:.2} bytes each");
        return;
    }
    let mut out = Vec::new();
    for (p, per) in [(1usize, 4_000_000u64), (8, 1_000_000), (64, 150_000)] {
        // Best of three: the machine is shared and has 2 cores.
        let mut best = (0.0f64, 0u64, 0u64);
        for _ in 0..3 {
            let r = rings(p, per);
            assert_eq!(r.1 + r.2, p as u64 * per, "every record drained or counted");
            if r.0 > best.0 {
                best = r;
            }
        }
        out.push(format!(
            "\"ring_{p}_producers\": {{\"records_per_s\": {:.0}, \"dropped\": {}}}",
            best.0, best.2
        ));
    }
    for (name, z) in [("writer", true), ("writer_uncompressed", false)] {
        let (eps, bpe) = (0..3)
            .map(|_| writer(5_000_000, z))
            .fold((0.0, 0.0), |a, b| if b.0 > a.0 { b } else { a });
        out.push(format!(
            "\"{name}\": {{\"events_per_s\": {eps:.0}, \"bytes_per_kernel_event\": {bpe:.2}}}"
        ));
    }
    println!("{{{}}}", out.join(", "));
}
