//! Decode throughput of the reader on a synthetic trace held in memory (kernels of a few
//! launch shapes and host API records, 1 MiB chunks, zstd):
//! `cargo run --release -p gputrace-format --example decode_bench -- [MILLION_EVENTS]`.
//! Prints the median of 5 reads, in order and on 4 workers.

use gputrace_format::*;
use std::path::Path;
use std::time::Instant;

/// A chunk's events with an index of its kernels (`Vec<Event>` finds the nth kernel by
/// a walk: quadratic on chunks whose shapes are resolved afterwards).
#[derive(Default)]
struct Sink {
    events: Vec<Event>,
    kernels: Vec<usize>,
}

impl ChunkSink for Sink {
    fn add(&mut self, e: Event) {
        if matches!(e, Event::Kernel(_)) {
            self.kernels.push(self.events.len());
        }
        self.events.push(e);
    }
    fn fill_kernel(&mut self, nth: usize, f: &mut dyn FnMut(&mut Kernel) -> bool) -> bool {
        let Some(&i) = self.kernels.get(nth) else {
            return false;
        };
        match self.events.get_mut(i) {
            Some(Event::Kernel(k)) => f(k),
            _ => false,
        }
    }
}

fn main() {
    let millions: f64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2.0);
    let n = (millions * 1e6) as u64;
    let mut w = ChunkWriter::new(Vec::new(), &Meta::default()).unwrap();
    let mut enc = Encoder::new();
    for i in 0..n {
        let t = 1_000_000_000 + i * 700;
        let e = if i % 2 == 0 {
            Event::Kernel(Kernel {
                start: t,
                end: t + 500,
                corr: i as u32,
                stream: 7,
                name: 1 + (i % 13) as u32,
                grid: [1 + (i % 5) as u32, 1, 1],
                block: [256, 1, 1],
                registers: 32,
                ..Default::default()
            })
        } else {
            Event::Api(Api {
                start: t,
                end: t + 300,
                tid: 42,
                corr: i as u32,
                cbid: 211,
                name: 2,
                ..Default::default()
            })
        };
        enc.push(&e);
        if enc.len() >= 1 << 20 {
            w.write_events(&mut enc).unwrap();
        }
    }
    w.write_events(&mut enc).unwrap();
    let data = w.into_inner();
    for workers in [1, 4] {
        let mut times = Vec::new();
        let mut count = 0;
        for _ in 0..5 {
            let t0 = Instant::now();
            let mut r = open(Path::new("b"), &data).unwrap();
            let mut k = 0u64;
            r.for_each_chunk_par(
                workers,
                Sink::default,
                |s| k += s.events.len() as u64,
                |_, _| {},
            );
            times.push(t0.elapsed().as_secs_f64());
            count = k;
        }
        times.sort_by(f64::total_cmp);
        eprintln!(
            "{} events, {} bytes, {workers} worker(s): median {:.3} s ({:.1} M events/s)",
            count,
            data.len(),
            times[2],
            count as f64 / times[2] / 1e6
        );
    }
}
