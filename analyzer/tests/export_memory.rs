//! `gputrace export` holds no more than the analysis it shares with `report` and its own
//! timeline tracks: its peak heap, counted by the allocator (not timed), stays within what
//! loading and analysing the trace takes plus 32 bytes per event of the trace (the tracks:
//! an idle piece of 24 bytes per gap for the "why idle" track and two queue-depth points
//! per GPU operation, in vectors grown by doubling; holding the events themselves would
//! take several times that), and the events are streamed after the trace is dropped (the
//! stream's own bound is tested in `dump_memory.rs`). (One test in this binary: the
//! counter is process-wide.)

use gputrace_analyzer::commands::app::{self, Options};
use gputrace_analyzer::export::Format;
use gputrace_analyzer::model::load::LoadOptions;
use gputrace_analyzer::Trace;
use gputrace_format::{self as fmt, Event, Meta};
use std::path::PathBuf;

#[path = "common/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::peak_of;

#[global_allocator]
static A: counting_alloc::Counting = counting_alloc::Counting;

/// A training-like trace: `steps` steps of 100 kernels launched by calls, an input copy
/// and a synchronisation each, with host gaps between steps; chunks of about 2000
/// events.
fn trace(steps: u64) -> Vec<u8> {
    let meta = Meta {
        pid: 7,
        ..Default::default()
    };
    let names = [
        (1, "_ZN2at6native18elementwise_kernelEv"),
        (2, "cudaLaunchKernel"),
        (3, "cudaMemcpyAsync"),
        (4, "cudaStreamSynchronize"),
    ];
    let mut chunks: Vec<Vec<Event>> = vec![names
        .iter()
        .map(|&(id, text)| Event::Str {
            id,
            text: text.into(),
        })
        .collect()];
    // Jitter as real traces have (a fixed pattern compresses unrealistically well).
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut jit = move |range: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % range
    };
    let mut t = 1_796_225_776_000_000_000u64;
    let mut corr = 0;
    for step in 0..steps {
        let mut c = Vec::new();
        corr += 1;
        c.push(Event::Api(fmt::Api {
            start: t,
            end: t + 20_000,
            tid: 1,
            corr,
            cbid: 41,
            name: 3,
            ..Default::default()
        }));
        c.push(Event::Memcpy(fmt::Memcpy {
            start: t + 5_000,
            end: t + 15_000,
            corr,
            bytes: 1 << 20,
            copy_kind: 1,
            ..Default::default()
        }));
        t += 20_000;
        for i in 0..100u64 {
            corr += 1;
            c.push(Event::Api(fmt::Api {
                start: t,
                end: t + 2_000 + jit(2_000),
                tid: 1,
                corr,
                cbid: 211,
                name: 2,
                ..Default::default()
            }));
            c.push(Event::Kernel(fmt::Kernel {
                start: t + 5_000 + jit(300),
                end: t + 9_000 + jit(300),
                corr,
                name: 1,
                grid: [132, 1, 1],
                block: [256, 1, 1],
                ..Default::default()
            }));
            t += 4_000 + i % 2 * jit(1_000);
        }
        corr += 1;
        c.push(Event::Api(fmt::Api {
            start: t,
            end: t + 10_000,
            tid: 1,
            corr,
            cbid: 131,
            name: 4,
            ..Default::default()
        }));
        // The host away between steps, now and then longer.
        t += 200_000 + (step % 5) * 100_000 + jit(50_000);
        chunks.push(c);
    }
    let mut w = fmt::ChunkWriter::new(Vec::new(), &meta).unwrap();
    let mut enc = fmt::Encoder::new();
    for c in chunks.chunks(10) {
        for e in c.iter().flatten() {
            enc.push(e);
        }
        w.write_events(&mut enc).unwrap();
    }
    w.into_inner()
}

fn tmpdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("gputrace-export-memory-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn export_holds_no_more_than_the_analysis() {
    let dir = tmpdir();
    let path = dir.join("mid.gtrace");
    // 2000 steps: about 400 k events, a 2.5 MB file.
    let bytes = trace(2000);
    std::fs::write(&path, &bytes).unwrap();
    drop(bytes);
    let size = std::fs::metadata(&path).unwrap().len() as usize;
    let opts = Options {
        load: LoadOptions {
            progress: false,
            workers: 1,
        },
        exiting: false,
        colour: false,
        html: None,
        force: false,
    };
    // What `report` holds: the loaded trace and the analysis.
    let (analysis, _) = peak_of(|| {
        let t = Trace::load(&path).unwrap();
        let tables = t.kernels.len() + t.apis.len();
        let r = gputrace_analyzer::report::analyze(std::slice::from_ref(&t));
        (tables, r.findings.len())
    });
    eprintln!("trace {size} bytes; load + analysis peak {analysis} bytes");
    for format in [Format::Perfetto, Format::Chrome] {
        let out = dir.join(format!("out.{}", format.name()));
        let (peak, done) = peak_of(|| {
            app::export(
                std::slice::from_ref(&path),
                format,
                Some(&out),
                true,
                &opts,
                &|_| {},
            )
        });
        let done = done.unwrap();
        assert!(done.events > 400_000, "{}", done.events);
        eprintln!(
            "{}: peak {peak} bytes, {:.2} x the analysis, {:.1} x the file",
            format.name(),
            peak as f64 / analysis as f64,
            peak as f64 / size as f64
        );
        assert!(
            peak < analysis + 32 * done.events as usize,
            "{}: export peaked at {peak} bytes; loading and analysing takes {analysis}, \
             for {} events",
            format.name(),
            done.events
        );
        // The same bound against the file (its events compress to about 4 bytes each
        // here; a real trace to 6).
        assert!(peak < size * 40, "{}: {peak} bytes", format.name());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
