use gputrace_format::*;
use std::path::Path;

fn meta() -> Meta {
    Meta {
        writer: "test".into(),
        pid: 42,
        host: "h".into(),
        ..Default::default()
    }
}

fn events(n: u32) -> Vec<Event> {
    (0..n)
        .map(|i| {
            Event::Kernel(Kernel {
                start: 1_000 + i as u64 * 100,
                end: 1_050 + i as u64 * 100,
                corr: i,
                name: 1,
                grid: [1, 1, 1],
                block: [32, 1, 1],
                ..Default::default()
            })
        })
        .collect()
}

/// A file of `chunks` event chunks of `per` kernels each.
fn build(chunks: u32, per: u32) -> Vec<u8> {
    build_with_ends(chunks, per).0
}

/// The file, and its length after the metadata and after each chunk.
fn build_with_ends(chunks: u32, per: u32) -> (Vec<u8>, usize, Vec<usize>) {
    let mut w = ChunkWriter::new(Vec::new(), &meta()).unwrap();
    let head = w.get_ref().len();
    let mut ends = Vec::new();
    let mut enc = Encoder::new();
    for _ in 0..chunks {
        for e in events(per) {
            enc.push(&e);
        }
        let (buf, n) = enc.take();
        w.write_chunk(ChunkKind::Events, &buf, n).unwrap();
        ends.push(w.get_ref().len());
    }
    (w.into_inner(), head, ends)
}

fn read(data: &[u8]) -> Result<(Vec<Event>, ReadStats), ReadError> {
    let mut r = open(Path::new("t.gtrace"), data)?;
    let mut out = vec![];
    r.for_each_event(|e| out.push(e));
    Ok((out, r.stats.clone()))
}

#[test]
fn whole_file_round_trips() {
    let data = build(3, 10);
    let (evs, st) = read(&data).unwrap();
    assert_eq!(evs.len(), 30);
    assert_eq!(evs[..10], events(10)[..]);
    assert!(st.warning().is_none());
    let r = open(Path::new("t"), &data).unwrap();
    assert_eq!(r.meta, meta());
}

#[test]
fn truncation_anywhere_reads_whole_chunks_only() {
    // Later chunks use kernel shapes the first one defined: they still read.
    let (data, header_and_meta, ends) = build_with_ends(4, 25);
    assert!(
        ends[1] - ends[0] < ends[0] - header_and_meta,
        "shapes are defined once"
    );
    for cut in 0..data.len() {
        match read(&data[..cut]) {
            Ok((evs, st)) => {
                assert!(cut >= header_and_meta);
                let whole = ends.iter().filter(|e| **e <= cut).count();
                assert_eq!(evs.len(), whole * 25, "cut at {cut}");
                assert_eq!(
                    st.truncated_tail,
                    cut != header_and_meta && !ends.contains(&cut)
                );
                let want: Vec<Event> = (0..whole).flat_map(|_| events(25)).collect();
                assert_eq!(evs, want);
            }
            Err(e) => {
                assert!(cut < header_and_meta, "cut at {cut}: {e}");
            }
        }
    }
}

#[test]
fn corruption_stops_at_the_bad_chunk() {
    let mut data = build(3, 10);
    let n = data.len();
    // Flip a byte inside the second of three event chunks.
    let at = n - (n - 200) / 2;
    let at = at.min(n - 100);
    data[at] ^= 0xff;
    let (evs, st) = read(&data).unwrap();
    assert!(evs.len() < 30);
    assert!(st.corrupt_at.is_some() || st.truncated_tail);
    assert!(st.warning().is_some());
}

#[test]
fn newer_major_version_is_refused_clearly() {
    let mut data = build(1, 1);
    data[8] = 99;
    let err = read(&data).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("newer"), "{msg}");
}

#[test]
fn not_a_trace() {
    assert!(matches!(
        read(b"hello world, this is not a trace"),
        Err(ReadError::NotATrace(_))
    ));
    assert!(matches!(read(b""), Err(ReadError::NotATrace(_))));
}

#[test]
fn flipping_any_byte_never_panics() {
    let data = build(2, 5);
    for i in 0..data.len() {
        let mut d = data.clone();
        d[i] = d[i].wrapping_add(0x5a);
        let _ = read(&d);
    }
}
