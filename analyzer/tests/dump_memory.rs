//! `gputrace dump` does not hold the trace: its peak heap, counted by the allocator,
//! stays far below what the trace's tables take once loaded, in order or not. (One
//! test in this binary: the counter is process-wide.)

use gputrace_analyzer::export::jsonl::Jsonl;
use gputrace_analyzer::export::stream::{EventStream, DEFAULT_MAX_PENDING};
use gputrace_analyzer::Trace;
use gputrace_format::{self as fmt, Event, Meta};
use std::path::Path;

#[path = "common/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::peak_of;

#[global_allocator]
static A: counting_alloc::Counting = counting_alloc::Counting;

/// A training-like trace of `steps` x 100 kernels and their launch calls, in chunks
/// of about 2000 events; `reverse`: the chunks written last to first.
fn trace(steps: u64, reverse: bool) -> Vec<u8> {
    let meta = Meta {
        pid: 7,
        ..Default::default()
    };
    let mut chunks: Vec<Vec<Event>> = vec![vec![Event::Str {
        id: 1,
        text: "gemm".into(),
    }]];
    let mut t = 1_796_225_776_000_000_000u64;
    let mut corr = 0;
    for _ in 0..steps {
        let mut c = Vec::new();
        for _ in 0..100 {
            corr += 1;
            c.push(Event::Api(fmt::Api {
                start: t,
                end: t + 3_000,
                tid: 1,
                corr,
                cbid: 211,
                name: 1,
                ..Default::default()
            }));
            c.push(Event::Kernel(fmt::Kernel {
                start: t + 5_000,
                end: t + 9_000,
                corr,
                name: 1,
                grid: [132, 1, 1],
                block: [256, 1, 1],
                ..Default::default()
            }));
            t += 4_000;
        }
        chunks.push(c);
    }
    if reverse {
        chunks[1..].reverse();
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

#[test]
fn dump_memory_stays_bounded_whatever_the_trace_size() {
    let path = Path::new("mem.gtrace");
    // 100 k events.
    let ordered = trace(500, false);
    let (loaded, t) = peak_of(|| Trace::from_bytes(path, &ordered).unwrap());
    // What holding the trace's records decoded costs: the bound below must be well
    // under it to mean anything. (The loaded trace holds them in compact rows.)
    let tables = t.kernels.len() * std::mem::size_of::<fmt::Kernel>()
        + t.apis.len() * std::mem::size_of::<fmt::Api>();
    let held = t.kernels.heap_bytes() + t.apis.heap_bytes();
    drop(t);
    assert!(tables > 6 << 20, "{tables}");
    assert!(loaded >= held, "{loaded} {held}");

    let dump = |bytes: &[u8], max_pending| {
        peak_of(|| {
            let s = EventStream::from_bytes(path, bytes).unwrap();
            let mut sink = std::io::sink();
            s.write(max_pending, &mut Jsonl::default(), &mut sink)
                .unwrap()
        })
    };
    // In time order: about two chunks buffered.
    let (peak, st) = dump(&ordered, DEFAULT_MAX_PENDING);
    assert_eq!(st.events, 100_000);
    assert_eq!(st.passes, 1);
    assert!(st.peak_pending <= 8_000, "{st:?}");
    assert!(
        peak < tables / 8,
        "dump peaked at {peak} bytes; the loaded tables are {tables}"
    );

    // Chunks in reverse order, a buffer of 3000 records: more passes, same bound.
    let reversed = trace(100, true);
    let (peak, st) = dump(&reversed, 3_000);
    assert_eq!(st.events, 20_000);
    assert!(st.passes > 1, "{st:?}");
    assert!(st.peak_pending <= 6_000, "{st:?}");
    // The buffer (6000 records of at most 96 bytes) and the reader's chunk buffers.
    assert!(
        peak < 6_000 * 96 + (512 << 10),
        "dump peaked at {peak} bytes"
    );
}
