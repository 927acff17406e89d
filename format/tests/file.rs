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

/// A file of `chunks` event chunks of `per` kernels each, uncompressed.
fn build(chunks: u32, per: u32) -> Vec<u8> {
    build_with_ends(chunks, per, false).0
}

/// The file, and its length after the metadata and after each chunk.
fn build_with_ends(chunks: u32, per: u32, zstd: bool) -> (Vec<u8>, usize, Vec<usize>) {
    let mut w = ChunkWriter::new(Vec::new(), &meta()).unwrap();
    if !zstd {
        w = w.without_compression();
    }
    let head = w.get_ref().len();
    let mut ends = Vec::new();
    let mut enc = Encoder::new();
    for _ in 0..chunks {
        for e in events(per) {
            enc.push(&e);
        }
        w.write_events(&mut enc).unwrap();
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
    truncation_anywhere(false);
    truncation_anywhere(true);
}

fn truncation_anywhere(zstd: bool) {
    // Later chunks use kernel shapes the first one defined: they still read.
    let (data, header_and_meta, ends) = build_with_ends(4, 25, zstd);
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
fn compressed_chunks_read_back_the_same_events() {
    let (raw, _, _) = build_with_ends(5, 400, false);
    let (z, _, _) = build_with_ends(5, 400, true);
    assert!(z.len() * 3 < raw.len(), "{} vs {}", z.len(), raw.len());
    let (a, sa) = read(&raw).unwrap();
    let (b, sb) = read(&z).unwrap();
    assert_eq!(a.len(), 2000);
    assert_eq!(a, b);
    assert_eq!((sa.events, sa.chunks), (sb.events, sb.chunks));
}

#[test]
fn a_file_reads_like_the_same_bytes_in_memory() {
    let (z, _, _) = build_with_ends(3, 50, true);
    let dir = std::env::temp_dir().join(format!("gtfmt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("z.gtrace");
    std::fs::write(&p, &z[..z.len() - 7]).unwrap();
    let f = read_all(&p).unwrap();
    let (m, st) = read(&z[..z.len() - 7]).unwrap();
    assert_eq!(f.events, m);
    assert_eq!(f.stats, st);
    assert!(st.truncated_tail && m.len() == 100);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_census_counts_events_by_tag_without_reading_them() {
    for zstd in [false, true] {
        let (d, _, _) = build_with_ends(3, 40, zstd);
        let mut r = open(Path::new("t"), &d).unwrap();
        let c = r.census();
        // The first chunk defines the one launch shape.
        assert_eq!(c.of(&[TAG_KERNEL_COMPACT]), 120);
        assert_eq!(c.of(&[TAG_KERNEL_SHAPE]), 1);
        assert_eq!(c.of(&[TAG_API]), 0);
        // The reader is where it was: every event still comes.
        let mut n = 0;
        r.for_each_event(|_| n += 1);
        assert_eq!(n, 120);
    }
}

#[test]
fn flipping_any_byte_never_panics() {
    for data in [build(2, 5), build_with_ends(2, 5, true).0] {
        flip_every_byte(data);
    }
}

fn flip_every_byte(data: Vec<u8>) {
    for i in 0..data.len() {
        let mut d = data.clone();
        d[i] = d[i].wrapping_add(0x5a);
        let _ = read(&d);
    }
}

fn read_par(data: &[u8], workers: usize) -> Result<(Vec<Event>, ReadStats), ReadError> {
    let mut r = open(Path::new("t.gtrace"), data)?;
    let mut out = vec![];
    r.for_each_chunk_par(workers, Vec::new, |v: Vec<Event>| out.extend(v), |_, _| {});
    Ok((out, r.stats.clone()))
}

/// Kernels of several launch shapes, new ones appearing in later chunks (`chunk` picks
/// which), mixed with host API records.
fn varied(chunk: u32, per: u32) -> Vec<Event> {
    (0..per)
        .map(|i| {
            let t = (chunk * per + i) as u64 * 100;
            if i % 4 == 3 {
                return Event::Api(Api {
                    start: t,
                    end: t + 5,
                    tid: 7,
                    corr: chunk * per + i,
                    cbid: 211,
                    ..Default::default()
                });
            }
            Event::Kernel(Kernel {
                start: t,
                end: t + 50,
                corr: chunk * per + i,
                name: 1 + (i + chunk) % (2 + chunk),
                grid: [1 + chunk, 1, 1],
                block: [32 * (1 + i % 2), 1, 1],
                ..Default::default()
            })
        })
        .collect()
}

/// `chunks` chunks of [`varied`] events; with `fresh_encoder_at`, the encoder is
/// replaced there, so the file defines shape ids again (a redefinition).
fn build_varied(chunks: u32, per: u32, zstd: bool, fresh_encoder_at: Option<u32>) -> Vec<u8> {
    let mut w = ChunkWriter::new(Vec::new(), &meta()).unwrap();
    if !zstd {
        w = w.without_compression();
    }
    let mut enc = Encoder::new();
    for c in 0..chunks {
        if fresh_encoder_at == Some(c) {
            enc = Encoder::new();
        }
        for e in varied(c, per) {
            enc.push(&e);
        }
        w.write_events(&mut enc).unwrap();
    }
    w.into_inner()
}

fn same_in_parallel(data: &[u8], what: &str) {
    let want = read(data).map_err(|e| e.to_string());
    for workers in [1, 2, 3] {
        let got = read_par(data, workers).map_err(|e| e.to_string());
        assert_eq!(got, want, "{what}, {workers} workers");
    }
}

#[test]
fn parallel_decoding_reads_what_reading_in_order_reads() {
    for zstd in [false, true] {
        let data = build_varied(6, 30, zstd, None);
        let (evs, st) = read(&data).unwrap();
        assert_eq!(evs.len(), 180);
        assert!(st.warning().is_none());
        same_in_parallel(&data, "whole");
        // Shapes defined in one chunk and used in later ones, cut anywhere.
        for cut in (0..data.len()).step_by(7) {
            same_in_parallel(&data[..cut], &format!("cut at {cut}"));
        }
    }
}

#[test]
fn a_redefined_shape_reads_the_same_in_parallel() {
    for zstd in [false, true] {
        let data = build_varied(6, 30, zstd, Some(3));
        let (evs, _) = read(&data).unwrap();
        // Chunks 3.. define ids 0.. again for their own shapes: read in order, those
        // kernels take the new shapes.
        assert_eq!(evs, (0..6).flat_map(|c| varied(c, 30)).collect::<Vec<_>>());
        same_in_parallel(&data, "redefined");
    }
}

#[test]
fn parallel_decoding_of_damaged_files_matches_and_never_panics() {
    for zstd in [false, true] {
        let data = build_varied(3, 6, zstd, None);
        for i in 0..data.len() {
            let mut d = data.clone();
            d[i] = d[i].wrapping_add(0x5a);
            same_in_parallel(&d, &format!("byte {i} changed"));
        }
    }
}

#[test]
fn a_file_decoded_in_parallel_reads_like_the_same_bytes_in_memory() {
    let dir = std::env::temp_dir().join(format!("gtfmt-par-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for zstd in [false, true] {
        let data = build_varied(7, 40, zstd, None);
        // Whole, and torn in the last chunk.
        for cut in [data.len(), data.len() - 5] {
            let p = dir.join("v.gtrace");
            std::fs::write(&p, &data[..cut]).unwrap();
            let want = read(&data[..cut]).unwrap();
            for workers in [1, 3] {
                let mut r = open_file(&p).unwrap();
                let mut out = vec![];
                r.for_each_chunk_par(workers, Vec::new, |v: Vec<Event>| out.extend(v), |_, _| {});
                assert_eq!((out, r.stats.clone()), want, "cut {cut}, {workers} workers");
            }
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
