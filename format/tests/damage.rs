//! Damaged and cut-short files: the reader keeps every intact chunk, says what was lost
//! and where, and tells a trace cut short from a damaged one.

use gputrace_format::*;
use std::path::Path;

fn meta(writer: &str) -> Meta {
    Meta {
        writer: writer.into(),
        pid: 7,
        ..Default::default()
    }
}

const T: u64 = 1_000_000_000;
const US: u64 = 1_000;
const MS: u64 = 1_000_000;

/// Chunk `c` of a test file: a state at T + c ms, then kernels a microsecond apart.
fn chunk_events(c: u64, per: u64, last: bool) -> Vec<Event> {
    let mut v = vec![Event::State {
        ts: T + c * MS,
        state: CollectorState::Tracing as u8,
        reason: 0,
    }];
    v.extend((0..per).map(|i| {
        let t = T + c * MS + i * US;
        Event::Kernel(Kernel {
            start: t,
            end: t + 1,
            corr: (c * per + i) as u32,
            // A shape per chunk: no chunk depends on another's definitions.
            name: c as u32,
            grid: [1, 1, 1],
            block: [32, 1, 1],
            ..Default::default()
        })
    }));
    if last {
        v.push(Event::State {
            ts: T + c * MS + 999 * US,
            state: CollectorState::Stopped as u8,
            reason: 0,
        });
    }
    v
}

/// A finished file of `n` events chunks; also the (start, end) of every chunk, the
/// metadata chunk first.
fn file(n: u64, zstd: bool, writer: &str) -> (Vec<u8>, Vec<(usize, usize)>) {
    let mut w = ChunkWriter::new(Vec::new(), &meta(writer)).unwrap();
    if !zstd {
        w = w.without_compression();
    }
    let mut bounds = vec![(HEADER_LEN, w.get_ref().len())];
    let mut enc = Encoder::new();
    for c in 0..n {
        for e in chunk_events(c, 20, c + 1 == n) {
            enc.push(&e);
        }
        let start = w.get_ref().len();
        w.write_events(&mut enc).unwrap();
        bounds.push((start, w.get_ref().len()));
    }
    (w.into_inner(), bounds)
}

fn read(data: &[u8]) -> Result<(Vec<Event>, ReadStats), ReadError> {
    let mut r = open(Path::new("t.gtrace"), data)?;
    let mut out = vec![];
    r.for_each_event(|e| out.push(e));
    Ok((out, r.stats.clone()))
}

fn kernels_of_chunk(evs: &[Event], c: u32) -> usize {
    evs.iter()
        .filter(|e| matches!(e, Event::Kernel(k) if k.name == c))
        .count()
}

#[test]
fn a_whole_file_reports_nothing_lost() {
    for zstd in [false, true] {
        let (d, _) = file(4, zstd, "test");
        let (evs, st) = read(&d).unwrap();
        assert_eq!(evs.len(), 4 * 21 + 1);
        assert!(!st.lost_records(), "{st:?}");
        assert!(st.warning().is_none() && st.brief().is_none());
        assert_eq!(st.first_ns, Some(T));
        assert_eq!(st.last_ns, Some(T + 3 * MS + 999 * US));
    }
}

#[test]
fn reading_resumes_after_a_damaged_chunk() {
    for zstd in [false, true] {
        let (d, b) = file(5, zstd, "test");
        // Damage in the payload, the header's marker, its length field and its checksum
        // field of chunk 2 (the events chunks are 1..=5).
        for at in [b[2].1 - 3, b[2].0, b[2].0 + 5, b[2].0 + 9] {
            let mut m = d.clone();
            m[at] ^= 0x41;
            let (evs, st) = read(&m).unwrap();
            for c in [0, 2, 3, 4] {
                assert_eq!(kernels_of_chunk(&evs, c), 20, "chunk {c}, byte {at}");
            }
            assert_eq!(kernels_of_chunk(&evs, 1), 0);
            assert!(st.damaged() && !st.cut_short(), "{st:?}");
            assert_eq!(st.corrupt_at, Some(b[2].0 as u64));
            let [l] = &st.lost[..] else {
                panic!("{:?}", st.lost)
            };
            assert_eq!(l.kind, LossKind::Damaged);
            assert_eq!(
                (l.offset, l.bytes),
                (b[2].0 as u64, (b[2].1 - b[2].0) as u64)
            );
            assert_eq!(l.chunks, 1);
            // The header's event count is read where the header is sane.
            if at != b[2].0 && at != b[2].0 + 5 {
                assert_eq!(l.events, 21);
            }
            // Written after chunk 1's last event and before chunk 3's.
            assert_eq!(
                (l.after_ns, l.before_ns),
                (Some(T + 19 * US), Some(T + 2 * MS + 19 * US))
            );
            let w = st.warning().unwrap();
            assert!(w.contains(&format!("at byte {}", b[2].0)), "{w}");
            assert!(w.contains("written between 0.000 s and 0.002 s"), "{w}");
            // Decoded in parallel: the same.
            let mut r = open(Path::new("t"), &m).unwrap();
            let mut par = vec![];
            r.for_each_chunk_par(3, Vec::new, |v: Vec<Event>| par.extend(v), |_, _| {});
            assert_eq!((par, r.stats.clone()), (evs, st));
        }
    }
}

#[test]
fn a_torn_last_write_is_a_cut_not_damage() {
    let (d, b) = file(3, true, "test");
    let last = b[3];
    for cut in [last.0 + 2, last.0 + 19, last.0 + 25, last.1 - 1] {
        let (evs, st) = read(&d[..cut]).unwrap();
        assert_eq!(kernels_of_chunk(&evs, 1), 20);
        assert_eq!(kernels_of_chunk(&evs, 2), 0);
        assert!(st.cut_short() && !st.damaged(), "cut {cut}: {st:?}");
        assert!(st.truncated_tail && st.no_end && st.corrupt_at.is_none());
        assert_eq!(st.lost[0].kind, LossKind::TornTail);
        assert_eq!(st.lost[0].offset, last.0 as u64);
        let w = st.warning().unwrap();
        assert!(w.contains("cut short") && w.contains("truncated"), "{w}");
        assert!(w.contains("nothing recorded after 0.001 s"), "{w}");
        assert_eq!(
            st.brief().unwrap(),
            "trace cut short after 0.001 s (no end record)"
        );
    }
    // Cut between two chunks: no torn write, but no end record either.
    let (_, st) = read(&d[..last.0]).unwrap();
    assert!(st.no_end && !st.truncated_tail && st.lost.is_empty());
    assert!(st.warning().unwrap().contains("no end record"));
    // Only the metadata: nothing was ever written after it.
    let (_, st) = read(&d[..b[0].1]).unwrap();
    assert!(st.no_end, "{st:?}");
    // A last chunk damaged in place (full length, bad checksum) is damage, and its lost
    // end record is not called a cut.
    let mut m = d.clone();
    m[last.1 - 2] ^= 1;
    let (_, st) = read(&m).unwrap();
    assert!(st.damaged() && !st.cut_short(), "{st:?}");
}

#[test]
fn the_start_of_a_file_cut_or_damaged_says_which() {
    let (d, b) = file(2, true, "test");
    let msg = |data: &[u8]| read(data).unwrap_err().to_string();
    assert!(msg(&d[..10]).contains("cut short"), "{}", msg(&d[..10]));
    assert!(msg(&d[..HEADER_LEN]).contains("cut short"));
    assert!(msg(&d[..b[0].1 - 1]).contains("cut short"));
    assert!(msg(b"").contains("empty"));
    // Nothing intact after the header.
    let mut g = d[..HEADER_LEN].to_vec();
    g.extend([0x5a; 200]);
    assert!(msg(&g).contains("damaged beyond reading"), "{}", msg(&g));
}

#[test]
fn a_lost_metadata_chunk_keeps_the_events() {
    let (mut d, b) = file(3, true, "test");
    d[b[0].0 + 30] ^= 0xff;
    let (evs, st) = read(&d).unwrap();
    assert_eq!(evs.len(), 3 * 21 + 1);
    assert!(st.meta_lost && st.damaged());
    assert!(st.warning().unwrap().contains("metadata chunk lost"));
}

#[test]
fn a_damaged_version_field_is_not_a_newer_version() {
    let (d, _) = file(
        2,
        true,
        &format!("libgputrace {}", env!("CARGO_PKG_VERSION")),
    );
    // High byte of the major version, the low byte to a small newer-looking value, the
    // header length: read as this version, the header said damaged.
    for (at, x) in [(9, 0x40), (8, 0x01), (8, 0x5a), (12, 0x07)] {
        let mut m = d.clone();
        m[at] ^= x;
        let (evs, st) = read(&m).unwrap_or_else(|e| panic!("byte {at}: {e}"));
        assert_eq!(evs.len(), 2 * 21 + 1);
        let h = st.header_damage.clone().unwrap();
        assert!(!h.contains("upgrade"), "{h}");
        assert!(st.warning().unwrap().contains("header damaged"));
    }
    // The magic with a byte changed: still ours.
    let mut m = d.clone();
    m[3] ^= 0x20;
    assert!(read(&m).unwrap().1.header_damage.unwrap().contains("magic"));
    // A newer writer's file is refused with the upgrade hint.
    let (mut n, _) = file(1, true, "libgputrace 99.0.0");
    n[8] = 3;
    assert!(matches!(read(&n), Err(ReadError::TooNew { major: 3, .. })));
}

#[test]
fn a_changed_chunk_kind_is_damage_in_a_file_of_this_version() {
    let (mut d, b) = file(3, true, "test");
    d[b[2].0 + 12] = 77;
    let (evs, st) = read(&d).unwrap();
    assert_eq!(kernels_of_chunk(&evs, 1), 0);
    assert_eq!(kernels_of_chunk(&evs, 2), 20);
    assert_eq!(st.lost[0].kind, LossKind::Undecodable);
    assert_eq!(st.lost[0].events, 21);
    // Between the kinds this reader knows: raw events read as compressed, and back.
    for (k, zstd) in [(3u8, false), (2u8, true)] {
        let (mut d, b) = file(3, zstd, "test");
        d[b[2].0 + 12] = k;
        let (evs, st) = read(&d).unwrap();
        assert_eq!(kernels_of_chunk(&evs, 1), 0, "kind {k}");
        assert!(evs.iter().all(|e| match e {
            Event::Kernel(k) => k.name != 1,
            _ => true,
        }));
        assert!(st.damaged() && st.bad_events >= 21, "{st:?}");
    }
}

#[test]
fn damage_the_chunk_checksum_missed_is_caught_by_the_frame_checksum() {
    let (d, b) = file(3, true, "test");
    let (start, end) = b[2];
    let payload = start + CHUNK_HEADER_LEN;
    let mut missed = 0;
    // Every byte of the zstd frame (after its raw length and census), resealed.
    for at in payload + 5 + 2 * 5..end {
        let mut m = d.clone();
        m[at] ^= 0x10;
        let crc = crc32fast::hash(&m[payload..end]);
        m[start + 8..start + 12].copy_from_slice(&crc.to_le_bytes());
        let (evs, st) = read(&m).unwrap();
        let (want, _) = read(&d).unwrap();
        if evs != want && !st.damaged() {
            missed += 1;
        }
        assert_eq!(kernels_of_chunk(&evs, 0), 20);
        assert_eq!(kernels_of_chunk(&evs, 2), 20);
    }
    assert_eq!(missed, 0);
}

#[test]
fn a_directory_is_called_a_directory() {
    let dir = std::env::temp_dir().join(format!("gtfmt-dir-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let e = open_file(&dir).err().unwrap();
    assert!(matches!(e, ReadError::IsDir(_)));
    assert!(e.to_string().contains("is a directory"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_file_resynchronises_like_memory() {
    let dir = std::env::temp_dir().join(format!("gtfmt-resync-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (mut d, b) = file(6, true, "test");
    d[b[2].0 + 40] ^= 1;
    d[b[4].0] ^= 1;
    let p = dir.join("r.gtrace");
    std::fs::write(&p, &d[..d.len() - 3]).unwrap();
    let f = read_all(&p).unwrap();
    let (m, st) = read(&d[..d.len() - 3]).unwrap();
    assert_eq!((f.events, f.stats.clone()), (m, st));
    assert_eq!(f.stats.lost.len(), 3);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_census_changed_with_its_checksum_cannot_ask_for_huge_tables() {
    let (d, b) = file(2, true, "test");
    let (start, end) = b[2];
    let payload = start + CHUNK_HEADER_LEN;
    for (at, bytes) in [(0, u32::MAX), (6, u32::MAX), (0, 60 << 20)] {
        let mut m = d.clone();
        m[payload + at..payload + at + 4].copy_from_slice(&bytes.to_le_bytes());
        let crc = crc32fast::hash(&m[payload..end]);
        m[start + 8..start + 12].copy_from_slice(&crc.to_le_bytes());
        let mut r = open(Path::new("t"), &m).unwrap();
        let c = r.census();
        let total: u64 = c.0.iter().sum();
        // At most what the intact chunk holds, plus half the stated expansion limit.
        assert!(total <= 21 + (MAX_CHUNK_PAYLOAD as u64) / 2, "{total}");
        if at == 0 && bytes == u32::MAX {
            assert_eq!(total, 22, "the first chunk's 21 events and its shape");
        }
    }
}
