//! A deterministic mutation campaign over the trace reader: the reading entry points the
//! commands use (`Trace::load`, the one of `report`, `summary` and `export`; the event
//! stream of `dump`; both on `gputrace_format`'s `ChunkReader`), fed damaged and hostile
//! variants ("mutants") of a few traces.
//!
//! Seeds: three small bundled traces (two process traces and an environment file, all
//! with compressed chunks) and a synthetic one, the events of `pageable_memcpy` written
//! again through the writer API (`ChunkWriter`) in uncompressed chunks of 40 events, so
//! that forged payloads reach the event decoder directly.
//!
//! Mutations, from a fixed-seed xorshift generator (mutant `i` is the same on every run,
//! and a longer campaign runs the same mutants first): bit flips; bytes overwritten with
//! random values, 0x00 or 0xff; truncation; insertion (random bytes, zeros, 0xff, or a
//! fake chunk header) and deletion of byte runs; a byte range duplicated elsewhere, two
//! ranges swapped (sometimes two whole chunks); length fields (a chunk's payload length
//! and event count, the header length, a compressed chunk's expanded length and census
//! counts) overwritten with huge or off-by-one values. A fifth of the mutants stack
//! two or three of these. A quarter are *forged*: one chunk's payload mutated and its
//! length and checksum recomputed, as a hostile file would be (a flipped, inserted,
//! deleted or duplicated byte, an event length or field made a huge varint, a compressed
//! chunk's census or expanded length changed, the metadata's JSON changed).
//!
//! What the format checks, and so what each mutant must give:
//! * The file header: its magic, its major version (1..=2 known, a newer one is refused
//!   unless the metadata shows this reader's writer made it) and its length field are
//!   checked; the minor version is not (see below).
//! * Every chunk: its marker, a payload length within `MAX_CHUNK_PAYLOAD`, the CRC-32 of
//!   its payload, and a chunk kind the file's version knows (metadata only first). The
//!   event count bytes of a chunk header are outside the checksum and are not used to
//!   decode (the count only sizes a loss): changing them changes no event.
//! * Chunk numbers (format 2.6; the synthetic seed has them, the bundled traces are
//!   older): the flags and number bytes of a chunk header, with their check bits; a
//!   chunk replayed, out of place, unnumbered or after the end record is not read, a
//!   gap in the numbers is named. In an older file those bytes are not read.
//! * Compressed chunks: the expanded length must be what the chunk says and zstd's own
//!   checksum of the expansion must hold; the census of tags (sizing only) is not checked.
//! * The file's end: a trace (or environment file) without its final `Stopped` state was
//!   cut short.
//!
//! So for every mutant: reading must not panic (each mutant runs under `catch_unwind`;
//! a panic fails the test naming the seed, the mutant number and its mutations) and must
//! finish (a watchdog fails the test when no mutant finishes for a minute, naming those
//! in flight). A mutant whose bytes differ from the seed's must be reported (a read
//! error, damage: exit status 3, or a trace cut short) or read exactly as the seed
//! (metadata and every event equal). `Trace::load` from a file, decoding in order or on
//! two threads, must find what the in-memory reader found (same loss account), and so
//! must the dump's event stream (every eighth mutant). The census that sizes the tables
//! before decoding must claim no more events of a tag than the file has bytes (a forged
//! census could otherwise have `gputrace report` reserve hundreds of gigabytes and abort).
//!
//! Excluded from "reported or identical", counted apart:
//! * Forged mutants: a chunk whose checksum was recomputed is by construction a valid
//!   chunk; nothing in the format can tell its events from the writer's. Only the first
//!   properties (no panic, it ends, every entry point agrees) hold for them.
//! * In a seed older than format 2.6 (the bundled traces), whole chunks duplicated,
//!   dropped or reordered (the seed's header followed by whole chunks of the seed that
//!   are not simply its first chunks): every chunk is intact and decodes on its own, so
//!   without a number in the chunk header the reader cannot see a replayed or missing
//!   chunk. A file cut at a chunk boundary is not excluded (its missing `Stopped` state
//!   says so). In the synthetic seed, whose chunks are numbered, they must be reported.
//! * A minor version raised above this reader's, which the file header does not
//!   protect (older readers must read newer minor versions, and skip chunk kinds they
//!   do not know): a mutant that also changes a chunk's kind byte then loses that chunk
//!   silently. The minor version alone changes no event.
//!
//! Printed (past the test harness's capture, so `cargo test` shows it): the counts of
//! the campaign by mutation. `GPUTRACE_FUZZ_MUTANTS=N` runs N mutants instead of the
//! default (`scripts/fuzz-reader.sh` runs a longer campaign in the release profile).
//! `cargo test -p gputrace-analyzer --test fuzz_reader` runs it alone.

use gputrace_analyzer::export::jsonl::Jsonl;
use gputrace_analyzer::export::stream::{EventStream, DEFAULT_MAX_PENDING};
use gputrace_analyzer::Trace;
use gputrace_format::{self as fmt, ChunkKind, ChunkWriter, Encoder, Event, Meta, ReadStats};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Mutants run by `cargo test` (a few seconds in the debug profile on two cores).
const DEFAULT_MUTANTS: usize = 3000;
/// A mutant still running after this is hung (one takes milliseconds).
const WATCHDOG: Duration = Duration::from_secs(60);
/// The campaign's seed: mutant `i` draws from `Rng::new(CAMPAIGN ^ i)`.
const CAMPAIGN: u64 = 0x6770_7574_7261_6365;
/// Events per chunk of the synthetic seed.
const SYNTHETIC_CHUNK: u32 = 40;

fn mutant_count() -> usize {
    match std::env::var("GPUTRACE_FUZZ_MUTANTS") {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("GPUTRACE_FUZZ_MUTANTS={v:?}: not a number")),
        Err(_) => DEFAULT_MUTANTS,
    }
}

/// xorshift64*, seeded through splitmix64 (so nearby seeds give unrelated streams).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn chance(&mut self, num: usize, den: usize) -> bool {
        self.below(den) < num
    }
    fn byte(&mut self) -> u8 {
        self.next() as u8
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.byte()).collect()
    }
    fn pick<T: Copy>(&mut self, of: &[T]) -> T {
        of[self.below(of.len())]
    }
}

/// One chunk of a seed: where it lies and its kind.
#[derive(Clone, Copy)]
struct Chunk {
    start: usize,
    end: usize,
    kind: u8,
}

impl Chunk {
    fn payload(&self) -> usize {
        self.start + fmt::CHUNK_HEADER_LEN
    }
}

struct Seed {
    name: String,
    data: Vec<u8>,
    /// Every chunk, the metadata first.
    chunks: Vec<Chunk>,
    meta: Meta,
    events: Vec<Event>,
}

/// What the in-memory reader gave.
struct Read {
    meta: Meta,
    events: Vec<Event>,
    stats: ReadStats,
}

const MUTANT_PATH: &str = "mutant.gtrace";

fn read(data: &[u8]) -> Result<Read, String> {
    let mut r = fmt::open(Path::new(MUTANT_PATH), data).map_err(|e| e.to_string())?;
    let mut events = Vec::new();
    r.for_each_event(|e| events.push(e));
    Ok(Read {
        meta: r.meta.clone(),
        events,
        stats: r.stats.clone(),
    })
}

fn seed(name: &str, data: Vec<u8>) -> Seed {
    let r = read(&data).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(!r.stats.lost_records(), "{name}: {:?}", r.stats);
    assert!(!r.events.is_empty(), "{name}: no events");
    let mut chunks = Vec::new();
    let mut at = fmt::HEADER_LEN;
    while at < data.len() {
        let len = u32::from_le_bytes(data[at + 4..at + 8].try_into().unwrap()) as usize;
        let end = at + fmt::CHUNK_HEADER_LEN + len;
        chunks.push(Chunk {
            start: at,
            end,
            kind: data[at + 12],
        });
        at = end;
    }
    assert_eq!(at, data.len(), "{name}: chunks do not tile the file");
    Seed {
        name: name.into(),
        data,
        chunks,
        meta: r.meta,
        events: r.events,
    }
}

fn example(path: &str) -> Seed {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(path);
    seed(path, std::fs::read(&p).unwrap())
}

/// `base`'s events written again, uncompressed, in chunks of `SYNTHETIC_CHUNK` events,
/// numbered, the last written as the end.
fn synthetic(base: &Seed) -> Seed {
    let mut w = ChunkWriter::new(Vec::new(), &base.meta)
        .unwrap()
        .without_compression();
    let mut enc = Encoder::new();
    for e in &base.events {
        // A full chunk is written once more events follow it: the last is the end's.
        if enc.count() == SYNTHETIC_CHUNK {
            w.write_events(&mut enc).unwrap();
        }
        enc.push(e);
    }
    w.write_end(&mut enc).unwrap();
    let s = seed(
        &format!("synthetic ({}, plain chunks)", base.name),
        w.into_inner(),
    );
    assert!(s.events == base.events, "{}: events differ", s.name);
    assert!(s.chunks[1..]
        .iter()
        .all(|c| c.kind == ChunkKind::Events as u8));
    s
}

fn seeds() -> Vec<Seed> {
    let mut s = vec![
        example("pageable_memcpy.gtrace"),
        example("healthy.gtrace"),
        example("implicit_sync/gputrace-env-vm-1023.gtrace"),
    ];
    let plain = synthetic(&s[0]);
    s.push(plain);
    s
}

/// The mutations, as counted.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    Flip,
    Set,
    Truncate,
    Insert,
    Delete,
    Duplicate,
    Swap,
    HugeLen,
    Forged,
}

const OPS: [Op; 9] = [
    Op::Flip,
    Op::Set,
    Op::Truncate,
    Op::Insert,
    Op::Delete,
    Op::Duplicate,
    Op::Swap,
    Op::HugeLen,
    Op::Forged,
];

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Flip => "bit flip",
            Op::Set => "byte set",
            Op::Truncate => "truncation",
            Op::Insert => "insertion",
            Op::Delete => "deletion",
            Op::Duplicate => "duplication",
            Op::Swap => "swap",
            Op::HugeLen => "length field",
            Op::Forged => "forged chunk",
        }
    }
}

struct Mutant {
    data: Vec<u8>,
    /// The row it is counted in: its one mutation, or `None` for stacked ones.
    op: Option<Op>,
    forged: bool,
    what: Vec<String>,
}

/// A place to mutate: a third of them in the file header or a chunk header, where the
/// framing lives.
fn place(rng: &mut Rng, s: &Seed, len: usize) -> usize {
    let at = if rng.chance(1, 3) {
        if rng.chance(1, 4) {
            rng.below(fmt::HEADER_LEN)
        } else {
            let c = s.chunks[rng.below(s.chunks.len())];
            c.start + rng.below(fmt::CHUNK_HEADER_LEN)
        }
    } else {
        rng.below(len)
    };
    at.min(len.saturating_sub(1))
}

/// A chunk boundary of the seed (or the end of the file), or any place.
fn boundary(rng: &mut Rng, s: &Seed, len: usize) -> usize {
    let at = if rng.chance(1, 2) {
        let c = s.chunks[rng.below(s.chunks.len())];
        let at = if rng.chance(1, 2) { c.start } else { c.end };
        (at + rng.pick(&[0, 0, 0, 1])).saturating_sub(rng.pick(&[0, 0, 0, 1]))
    } else {
        rng.below(len + 1)
    };
    at.min(len)
}

/// A run's length: mostly short, sometimes up to a few KiB.
fn run_len(rng: &mut Rng) -> usize {
    if rng.chance(1, 5) {
        1 + rng.below(4096)
    } else {
        1 + rng.below(64)
    }
}

fn put32(d: &mut [u8], at: usize, v: u32) -> bool {
    match d.get_mut(at..at + 4) {
        Some(w) => {
            w.copy_from_slice(&v.to_le_bytes());
            true
        }
        None => false,
    }
}

/// A LEB128 varint of `v`.
fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

/// Huge and edge values for a length field holding `len`.
fn huge(rng: &mut Rng, len: u32) -> u32 {
    let max = fmt::MAX_CHUNK_PAYLOAD as u32;
    {
        let r = rng.next() as u32;
        rng.pick(&[
            u32::MAX,
            u32::MAX - 1,
            max,
            max + 1,
            max - 1,
            len.wrapping_add(1),
            len.wrapping_sub(1),
            len.wrapping_mul(2),
            0,
            1 << 31,
            r,
        ])
    }
}

/// Applies one unforged mutation to `d` (the seed's bytes, perhaps already mutated);
/// says what it did.
fn mutate(rng: &mut Rng, s: &Seed, d: &mut Vec<u8>, op: Op) -> String {
    let n = d.len();
    if n == 0 {
        d.push(rng.byte());
        return "one byte written to an empty file".into();
    }
    match op {
        Op::Flip => {
            let (at, bit) = (place(rng, s, n), rng.below(8));
            d[at] ^= 1 << bit;
            format!("flip bit {bit} of byte {at}")
        }
        Op::Set => {
            let at = place(rng, s, n);
            let v = {
                let r = rng.byte();
                rng.pick(&[r, 0, 0xff])
            };
            d[at] = v;
            format!("byte {at} set to {v:#04x}")
        }
        Op::Truncate => {
            let at = boundary(rng, s, n).min(n - 1);
            d.truncate(at);
            format!("cut at byte {at} of {n}")
        }
        Op::Insert => {
            let at = boundary(rng, s, n);
            let k = run_len(rng);
            let (run, what) = match rng.below(4) {
                0 => (rng.bytes(k), "random bytes"),
                1 => (vec![0; k], "zeros"),
                2 => (vec![0xff; k], "0xff bytes"),
                _ => {
                    // A fake chunk header: marker, any length and checksum.
                    let mut h = fmt::CHUNK_MAGIC.to_vec();
                    h.extend_from_slice(&(rng.below(k + 64) as u32).to_le_bytes());
                    h.extend(rng.bytes(8));
                    h.extend_from_slice(&(rng.below(9) as u32).to_le_bytes());
                    let tail = rng.below(k);
                    h.extend(rng.bytes(tail));
                    (h, "a fake chunk header and random bytes")
                }
            };
            let len = run.len();
            d.splice(at..at, run);
            format!("{len} bytes ({what}) inserted at byte {at}")
        }
        Op::Delete => {
            if rng.chance(1, 5) && s.chunks.len() > 1 {
                // Whole chunks: excluded from the "reported" check unless the end goes.
                let a = 1 + rng.below(s.chunks.len() - 1);
                let b = a + rng.below((s.chunks.len() - a).min(2));
                let (from, to) = (s.chunks[a].start, s.chunks[b].end);
                if to <= n {
                    d.drain(from..to);
                    return format!("chunks {a}..={b} (bytes {from}..{to}) deleted");
                }
            }
            let at = place(rng, s, n);
            let to = (at + run_len(rng)).min(n);
            d.drain(at..to);
            format!("bytes {at}..{to} deleted")
        }
        Op::Duplicate => {
            let (from, to) = if rng.chance(1, 4) && s.chunks.len() > 1 {
                let c = s.chunks[1 + rng.below(s.chunks.len() - 1)];
                (c.start.min(n), c.end.min(n))
            } else {
                let a = rng.below(n);
                (a, (a + run_len(rng)).min(n))
            };
            let at = boundary(rng, s, n);
            let run = d[from..to].to_vec();
            d.splice(at..at, run);
            format!("bytes {from}..{to} copied to byte {at}")
        }
        Op::Swap => {
            if rng.chance(1, 3) && s.chunks.len() > 2 {
                let a = 1 + rng.below(s.chunks.len() - 1);
                let b = 1 + rng.below(s.chunks.len() - 1);
                let (a, b) = (a.min(b), a.max(b));
                let (ca, cb) = (s.chunks[a], s.chunks[b]);
                if a != b && cb.end <= n {
                    let mut out = d[..ca.start].to_vec();
                    out.extend_from_slice(&d[cb.start..cb.end]);
                    out.extend_from_slice(&d[ca.end..cb.start]);
                    out.extend_from_slice(&d[ca.start..ca.end]);
                    out.extend_from_slice(&d[cb.end..]);
                    *d = out;
                    return format!("chunks {a} and {b} swapped");
                }
            }
            let k = run_len(rng).min(n / 2).max(1);
            let a = rng.below(n - k + 1);
            let b = rng.below(n - k + 1);
            if a.abs_diff(b) < k {
                d[a..a + k].reverse();
                return format!("bytes {a}..{} reversed", a + k);
            }
            let run = d[a..a + k].to_vec();
            d.copy_within(b..b + k, a);
            d[b..b + k].copy_from_slice(&run);
            format!("bytes {a}..{} and {b}..{} swapped", a + k, b + k)
        }
        Op::HugeLen => {
            let c = s.chunks[rng.below(s.chunks.len())];
            let len = (c.end - c.payload()) as u32;
            let (at, field, v) = match rng.below(5) {
                0 | 1 => (c.start + 4, "payload length", huge(rng, len)),
                2 => (c.start + 16, "event count", huge(rng, len)),
                3 => (12, "header length", huge(rng, fmt::HEADER_LEN as u32)),
                _ if c.kind == ChunkKind::EventsZstd as u8 => {
                    let raw = u32::from_le_bytes(
                        s.data[c.payload()..c.payload() + 4].try_into().unwrap(),
                    );
                    (c.payload(), "expanded length", huge(rng, raw))
                }
                _ => (c.start + 4, "payload length", huge(rng, len)),
            };
            if put32(d, at, v) {
                format!("{field} at byte {at} set to {v:#x}")
            } else {
                "a length field past the end (no change)".into()
            }
        }
        Op::Forged => unreachable!(),
    }
}

/// Mutates one chunk's payload and writes its length and checksum to match.
fn forge(rng: &mut Rng, s: &Seed, d: &mut Vec<u8>) -> String {
    let i = rng.below(s.chunks.len());
    let c = s.chunks[i];
    let mut p = s.data[c.payload()..c.end].to_vec();
    let what = match c.kind {
        k if k == ChunkKind::EventsZstd as u8 => {
            // The census and expanded length are outside zstd's checksum.
            let tags = p[4] as usize;
            match rng.below(6) {
                0 => {
                    let v = huge(rng, u32::from_le_bytes(p[..4].try_into().unwrap()));
                    put32(&mut p, 0, v);
                    format!("expanded length set to {v:#x}")
                }
                1 => {
                    let v = {
                        let r = rng.byte();
                        rng.pick(&[0, 255, r])
                    };
                    p[4] = v;
                    format!("census tag count set to {v}")
                }
                2 if tags > 0 => {
                    let e = 5 + 5 * rng.below(tags);
                    let v = {
                        let r = rng.next() as u32;
                        rng.pick(&[u32::MAX, 1 << 24, r])
                    };
                    put32(&mut p, e + 1, v);
                    format!("census count of tag {} set to {v:#x}", p[e])
                }
                3 if tags > 0 => {
                    let e = 5 + 5 * rng.below(tags);
                    let v = rng.byte();
                    p[e] = v;
                    format!("census tag {} made {v}", e)
                }
                4 if tags > 0 => {
                    // The most a census could claim: checked by nothing but the checksum.
                    let e = 5 + 5 * rng.below(tags);
                    put32(&mut p, 0, fmt::MAX_CHUNK_PAYLOAD as u32);
                    put32(&mut p, e + 1, u32::MAX);
                    format!(
                        "expanded length made the largest, census count of tag {} 2^32-1",
                        p[e]
                    )
                }
                _ => {
                    let at = 5 + tags * 5 + rng.below(p.len() - 5 - tags * 5);
                    p[at] ^= 1 << rng.below(8);
                    format!("zstd frame byte {at} flipped")
                }
            }
        }
        k if k == ChunkKind::Events as u8 => forge_events(rng, &mut p),
        _ => {
            let at = rng.below(p.len());
            match rng.below(3) {
                0 => {
                    p[at] ^= 1 << rng.below(8);
                    format!("metadata byte {at} flipped")
                }
                1 => {
                    p[at] = {
                        let r = rng.byte();
                        rng.pick(&[b'0', b'9', b'"', b'{', b'}', b',', b'-', r])
                    };
                    format!("metadata byte {at} set to {:#04x}", p[at])
                }
                _ => {
                    p.truncate(at);
                    format!("metadata cut at byte {at}")
                }
            }
        }
    };
    let mut chunk = s.data[c.start..c.payload()].to_vec();
    put32(&mut chunk, 4, p.len() as u32);
    put32(&mut chunk, 8, crc32fast::hash(&p));
    chunk.extend_from_slice(&p);
    // The seed's chunk, where the mutant still has it.
    let (from, to) = (c.start.min(d.len()), c.end.min(d.len()));
    d.splice(from..to, chunk);
    format!("chunk {i} forged: {what}, checksum recomputed")
}

/// Where each event of a plain payload starts: (tag offset, length varint offset,
/// body offset, body end).
fn events_of(p: &[u8]) -> Vec<(usize, usize, usize, usize)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < p.len() {
        let (mut len, mut shift, mut pos) = (0u64, 0, at + 1);
        while let Some(b) = p.get(pos) {
            pos += 1;
            len |= ((b & 0x7f) as u64) << shift.min(63);
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
        let end = pos.saturating_add(len as usize);
        if end > p.len() {
            break;
        }
        out.push((at, at + 1, pos, end));
        at = end;
    }
    out
}

fn forge_events(rng: &mut Rng, p: &mut Vec<u8>) -> String {
    let evs = events_of(p);
    let (tag_at, len_at, body, end) = evs[rng.below(evs.len())];
    match rng.below(8) {
        0 => {
            // The event's length: huge (it runs past the chunk) or off by one.
            let v = rng.pick(&[
                u64::MAX,
                u32::MAX as u64,
                (end - body + 1) as u64,
                (end - body).saturating_sub(1) as u64,
            ]);
            p.splice(len_at..body, varint(v));
            format!("event at {tag_at} (tag {}): length made {v:#x}", p[tag_at])
        }
        1 if end > body => {
            // One field made a huge varint (a count, an id, a length, a time).
            let at = body + rng.below(end - body);
            let v = rng.pick(&[u64::MAX, u32::MAX as u64, 1 << 40, (u32::MAX as u64) + 1]);
            let mut new = varint(v);
            if rng.chance(1, 3) {
                // Overlong: more than ten bytes of continuation.
                new = vec![0xff; 11];
                new.push(0x01);
            }
            let grown = new.len();
            let old_end = (at + 1).min(end);
            p.splice(at..old_end, new);
            // Keep the event's length right so the huge value is read as a field.
            let body_len = end - body - (old_end - at) + grown;
            p.splice(len_at..body, varint(body_len as u64));
            format!(
                "event at {tag_at} (tag {}): byte {at} made the varint {v:#x} ({grown} bytes)",
                p[tag_at]
            )
        }
        2 => {
            let v = rng.byte();
            p[tag_at] = v;
            format!("event at {tag_at}: tag made {v}")
        }
        3 => {
            let at = rng.below(p.len());
            p[at] ^= 1 << rng.below(8);
            format!("payload byte {at} flipped")
        }
        4 => {
            let at = rng.below(p.len());
            let v = {
                let r = rng.byte();
                rng.pick(&[0, 0xff, r])
            };
            p[at] = v;
            format!("payload byte {at} set to {v:#04x}")
        }
        5 => {
            // A whole event repeated, or dropped (shape definitions included).
            let ev = p[tag_at..end].to_vec();
            if rng.chance(1, 2) {
                p.splice(end..end, ev);
                format!("event at {tag_at} (tag {}) repeated", p[tag_at])
            } else {
                p.drain(tag_at..end);
                format!("event at {tag_at} dropped")
            }
        }
        6 => {
            let at = rng.below(p.len() + 1);
            let k = run_len(rng).min(256);
            let run = rng.bytes(k);
            p.splice(at..at, run);
            format!("{k} random bytes inserted at payload byte {at}")
        }
        _ => {
            let at = rng.below(p.len());
            let to = (at + run_len(rng)).min(p.len());
            p.drain(at..to);
            format!("payload bytes {at}..{to} deleted")
        }
    }
}

fn mutant(s: &Seed, n: u64) -> Mutant {
    let mut rng = Rng::new(CAMPAIGN ^ n);
    let mut d = s.data.clone();
    if rng.chance(1, 4) {
        let what = forge(&mut rng, s, &mut d);
        return Mutant {
            data: d,
            op: Some(Op::Forged),
            forged: true,
            what: vec![what],
        };
    }
    let stacked = if rng.chance(1, 5) {
        2 + rng.below(2)
    } else {
        1
    };
    let mut what = Vec::new();
    let mut op = None;
    for _ in 0..stacked {
        let o = OPS[rng.below(OPS.len() - 1)];
        op = Some(o);
        what.push(mutate(&mut rng, s, &mut d, o));
    }
    Mutant {
        data: d,
        op: if stacked == 1 { op } else { None },
        forged: false,
        what,
    }
}

/// Whether `data` is the seed's header followed by whole chunks of the seed, repeated,
/// dropped or reordered, and not simply its first chunks (see the module's comment).
fn rearranged(s: &Seed, data: &[u8]) -> bool {
    let h = fmt::HEADER_LEN;
    // The version fields (bytes 8..12) may differ: a clean read accepted them, and every
    // version the reader knows reads the same.
    // A seed whose chunks are numbered (format 2.6: its metadata chunk's flags and number
    // are not the zeros of an older writer) shows any rearrangement.
    let numbered = s.data[h + 13..h + 16] != [0, 0, 0];
    if numbered
        || data.len() < h
        || data[..8] != s.data[..8]
        || data[12..h] != s.data[12..h]
        || s.data.starts_with(data)
    {
        return false;
    }
    // In an older file a chunk header's flags, padding and event count (bytes 13..20)
    // are not read.
    let same = |at: usize, c: &Chunk| {
        let (head, len) = (13, c.end - c.start);
        data.len() - at >= len
            && data[at..at + head] == s.data[c.start..c.start + head]
            && data[at + fmt::CHUNK_HEADER_LEN..at + len] == s.data[c.payload()..c.end]
    };
    let mut at = h;
    while at < data.len() {
        match s.chunks.iter().find(|c| same(at, c)) {
            Some(c) => at += c.end - c.start,
            None => return false,
        }
    }
    true
}

/// A long message cut for a failure list.
fn short(s: String) -> String {
    match s.char_indices().nth(400) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s,
    }
}

/// How a mutant read.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Verdict {
    /// The mutations cancelled out: the seed's bytes.
    Unchanged,
    /// Read clean, every event and the metadata as the seed's.
    Identical,
    Damaged,
    CutShort,
    /// Refused with an error (not a trace, damaged beyond reading, cut before its first
    /// chunk).
    Error,
    /// Read clean but different, where the format cannot tell (see the module's
    /// comment): forged chunks, whole chunks rearranged, a newer minor version.
    Undetectable,
    /// Read clean but different: a failure.
    Silent,
}

struct Outcome {
    verdict: Verdict,
    /// Entry points that disagreed, or a panic; empty when all is well.
    problems: Vec<String>,
}

fn check(s: &Seed, m: &Mutant, n: u64, file: &Path) -> Outcome {
    let mut problems = Vec::new();
    let r = read(&m.data);
    // The census sizes the tables before anything is decoded: no more events than the
    // file has bytes, whatever its chunks claim.
    if let Ok(mut c) = fmt::open(Path::new(MUTANT_PATH), &m.data) {
        let census = c.census();
        if let Some(t) = (0..256).find(|t| census.0[*t] > m.data.len() as u64) {
            problems.push(format!(
                "census claims {} events of tag {t} in a file of {} bytes",
                census.0[t],
                m.data.len()
            ));
        }
    }
    // `Trace::load`, as the commands read a file: in order or on two threads.
    std::fs::write(file, &m.data).unwrap();
    let workers = 1 + (n % 2) as usize;
    let t = Trace::load_with(file, workers, |_, _| {});
    match (&r, &t) {
        (Ok(r), Ok(t)) => {
            if t.stats != r.stats || t.meta != r.meta {
                problems.push(short(format!(
                    "Trace::load ({workers} workers) read other than the reader: {:?} against {:?}",
                    t.stats.lost, r.stats.lost
                )));
            }
        }
        (Err(_), Err(_)) => {}
        (r, t) => problems.push(short(format!(
            "Trace::load and the reader disagree: {:?} against {:?}",
            t.as_ref().map(|t| &t.stats),
            r.as_ref().map(|r| &r.stats)
        ))),
    }
    // The dump's event stream.
    if n.is_multiple_of(8) {
        match (EventStream::from_bytes(Path::new(MUTANT_PATH), &m.data), &r) {
            (Ok(es), Ok(r)) => {
                if *es.read_stats() != r.stats {
                    problems.push(short(format!(
                        "the dump's stream read other than the reader: {:?} against {:?}",
                        es.read_stats(),
                        r.stats
                    )));
                }
                let mut out = Vec::new();
                if let Err(e) = es.write(DEFAULT_MAX_PENDING, &mut Jsonl::default(), &mut out) {
                    problems.push(format!("the dump's stream failed: {e}"));
                }
            }
            (Err(_), Err(_)) => {}
            (es, _) => problems.push(format!(
                "the dump's stream and the reader disagree (stream {})",
                if es.is_ok() { "read it" } else { "refused it" }
            )),
        }
    }
    let verdict = match r {
        _ if m.data == s.data => Verdict::Unchanged,
        Err(_) => Verdict::Error,
        Ok(r) if r.stats.damaged() => Verdict::Damaged,
        Ok(r) if r.stats.cut_short() => Verdict::CutShort,
        Ok(r) if r.meta == s.meta && r.events == s.events => Verdict::Identical,
        Ok(r) => {
            let newer_minor =
                r.stats.major == fmt::VERSION_MAJOR && r.stats.minor > fmt::VERSION_MINOR;
            if m.forged || rearranged(s, &m.data) || newer_minor {
                Verdict::Undetectable
            } else {
                Verdict::Silent
            }
        }
    };
    Outcome { verdict, problems }
}

#[derive(Default, Clone, Copy)]
struct Counts {
    mutants: u64,
    identical: u64,
    damaged: u64,
    cut_short: u64,
    errors: u64,
    undetectable: u64,
    failures: u64,
}

impl Counts {
    fn add(&mut self, o: &Outcome, panicked: bool) {
        self.mutants += 1;
        match o.verdict {
            Verdict::Unchanged | Verdict::Identical => self.identical += 1,
            Verdict::Damaged => self.damaged += 1,
            Verdict::CutShort => self.cut_short += 1,
            Verdict::Error => self.errors += 1,
            Verdict::Undetectable => self.undetectable += 1,
            Verdict::Silent => {}
        }
        self.failures +=
            (panicked || o.verdict == Verdict::Silent || !o.problems.is_empty()) as u64;
    }
    fn merge(&mut self, c: &Counts) {
        self.mutants += c.mutants;
        self.identical += c.identical;
        self.damaged += c.damaged;
        self.cut_short += c.cut_short;
        self.errors += c.errors;
        self.undetectable += c.undetectable;
        self.failures += c.failures;
    }
    fn row(&self, name: &str) -> String {
        format!(
            "{name:<14}{:>9}{:>11}{:>9}{:>10}{:>8}{:>14}{:>10}\n",
            self.mutants,
            self.identical,
            self.damaged,
            self.cut_short,
            self.errors,
            self.undetectable,
            self.failures
        )
    }
}

#[test]
fn fuzz_reader() {
    let seeds = Arc::new(seeds());
    let total = mutant_count();
    let began = Instant::now();
    let dir = std::env::temp_dir().join(format!("gputrace-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(1, 8);
    let next = Arc::new(AtomicUsize::new(0));
    // The mutant each worker is on (usize::MAX: none), for the watchdog's message.
    let current: Arc<Vec<AtomicUsize>> =
        Arc::new((0..workers).map(|_| AtomicUsize::new(usize::MAX)).collect());
    let (tx, rx) = mpsc::channel::<(usize, Outcome, bool)>();
    // Plain threads, not scoped ones: a hung mutant's thread is left behind when the
    // watchdog fails the test.
    for w in 0..workers {
        let (tx, next, current, seeds) = (tx.clone(), next.clone(), current.clone(), seeds.clone());
        let file = dir.join(format!("w{w}.gtrace"));
        std::thread::spawn(move || loop {
            let n = next.fetch_add(1, Ordering::Relaxed);
            if n >= total {
                break;
            }
            current[w].store(n, Ordering::Relaxed);
            let s = &seeds[n % seeds.len()];
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                check(s, &mutant(s, n as u64), n as u64, &file)
            }));
            let (out, panicked) = match run {
                Ok(o) => (o, false),
                Err(e) => {
                    let why = e
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    let o = Outcome {
                        verdict: Verdict::Error,
                        problems: vec![format!("panicked: {why}")],
                    };
                    (o, true)
                }
            };
            current[w].store(usize::MAX, Ordering::Relaxed);
            if tx.send((n, out, panicked)).is_err() {
                break;
            }
        });
    }
    drop(tx);
    let mut rows: Vec<Counts> = vec![Counts::default(); OPS.len() + 1];
    let mut failures = Vec::new();
    for _ in 0..total {
        let (n, out, panicked) = match rx.recv_timeout(WATCHDOG) {
            Ok(r) => r,
            Err(_) => {
                let stuck: Vec<String> = current
                    .iter()
                    .map(|c| c.load(Ordering::Relaxed))
                    .filter(|n| *n != usize::MAX)
                    .map(|n| {
                        let s = &seeds[n % seeds.len()];
                        format!(
                            "{} mutant {n} ({})",
                            s.name,
                            mutant(s, n as u64).what.join("; ")
                        )
                    })
                    .collect();
                panic!(
                    "fuzz_reader: no mutant finished for {} s; in flight: {}",
                    WATCHDOG.as_secs(),
                    stuck.join(", ")
                );
            }
        };
        let s = &seeds[n % seeds.len()];
        let m = mutant(s, n as u64);
        let row =
            m.op.map_or(OPS.len(), |o| OPS.iter().position(|x| *x == o).unwrap());
        rows[row].add(&out, panicked);
        let mut why = out.problems.clone();
        if out.verdict == Verdict::Silent {
            why.push("read clean, but not as the seed (silent damage)".into());
        }
        if !why.is_empty() && failures.len() < 20 {
            failures.push(format!(
                "{} mutant {n} ({}): {}",
                s.name,
                m.what.join("; "),
                why.join("; ")
            ));
        }
    }
    std::fs::remove_dir_all(&dir).ok();

    let mut all = Counts::default();
    let names: Vec<&str> = seeds.iter().map(|s| s.name.as_str()).collect();
    let mut table = format!(
        "fuzz_reader: {total} mutants of {} seeds ({}) in {:.1} s\n",
        seeds.len(),
        names.join(", "),
        began.elapsed().as_secs_f64()
    );
    table += &format!(
        "{:<14}{:>9}{:>11}{:>9}{:>10}{:>8}{:>14}{:>10}\n",
        "mutation",
        "mutants",
        "identical",
        "damaged",
        "cut short",
        "errors",
        "undetectable",
        "failures"
    );
    for (i, c) in rows.iter().enumerate() {
        let name = OPS.get(i).map_or("stacked", |o| o.name());
        table += &c.row(name);
        all.merge(c);
    }
    table += &all.row("all");
    table += "identical: read clean as the seed; damaged: reported damaged (exit 3); \
              cut short: reported cut short; errors: refused\n";
    table += "undetectable: read clean but different where the format cannot tell \
              (forged chunks, whole chunks rearranged, a newer minor version)\n";
    table += "failures: a panic, a silent change, or entry points disagreeing (must be 0)\n";
    // Past the harness's capture: these counts are what the campaign did.
    let _ = std::io::stderr().write_all(table.as_bytes());
    assert!(
        failures.is_empty(),
        "fuzz_reader failures (first {}):\n{}\n{table}",
        failures.len(),
        failures.join("\n")
    );
}
