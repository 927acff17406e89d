//! The fault matrix: thousands of damaged variants ("mutants") of the bundled format-2
//! example traces, read and reported as a user would read and report them.
//!
//! Mutants: the file cut at many offsets (every chunk boundary and the bytes around it,
//! and random places); one byte changed anywhere (a fifth of them in the file header and
//! chunk headers); a run of bytes zeroed (a bad sector); and a byte of an events chunk's
//! payload changed with the chunk's checksum recomputed (damage no checksum sees).
//!
//! Printed: counts per kind of mutant, and events recovered against the original. The
//! test fails if any of these is not 0: panics; hangs (a generous watchdog: a mutant
//! still running after a minute); a plain "No GPU activity recorded" verdict (every
//! original has GPU activity, so a mutant that reports none must say the trace lost
//! records); an intact chunk dropped (every chunk the mutation did not touch must be
//! read); a silent change (events that differ from the original with no loss reported:
//! for checksum-valid damage it is the zstd frame's own checksum that sees it); decoding
//! in parallel reading other than in order; a file reading other than the same bytes in
//! memory; the streamed `gputrace dump` reading other than the analysis (its loss
//! account, and for the small traces its bytes against the previous dump's).
//!
//! `cargo test -p gputrace-analyzer --test fault_matrix` runs it alone.

#[path = "common/legacy_dump.rs"]
mod legacy_dump;

use gputrace_analyzer::export::jsonl::Jsonl;
use gputrace_analyzer::export::stream::{EventStream, DEFAULT_MAX_PENDING};
use gputrace_analyzer::report::{analyze, render_text};
use gputrace_analyzer::{report::summary, Trace};
use gputrace_format::{self as fmt, Event};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

const CUTS: usize = 130;
const FLIPS: usize = 150;
const ZEROED: usize = 20;
const RESEALED: usize = 60;
const PER_TRACE: usize = CUTS + FLIPS + ZEROED + RESEALED;
/// A mutant taking longer than this is hung (one takes well under a second).
const WATCHDOG: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Cut,
    Flip,
    Zeroed,
    Resealed,
}

const KINDS: [Kind; 4] = [Kind::Cut, Kind::Flip, Kind::Zeroed, Kind::Resealed];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Cut => "truncations",
            Kind::Flip => "byte flips",
            Kind::Zeroed => "zeroed runs",
            Kind::Resealed => "checksum-valid",
        }
    }
}

/// A bundled trace and what reading it whole gives.
struct Original {
    name: String,
    data: Vec<u8>,
    /// Every chunk (the metadata first): (offset, end, events).
    chunks: Vec<(usize, usize, u64)>,
    events: Vec<Event>,
}

fn originals() -> Vec<Original> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "gtrace"))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|p| {
            let data = std::fs::read(&p).unwrap();
            let (events, stats) = events_of(&data, 1).unwrap();
            assert_eq!(
                stats.major,
                fmt::VERSION_MAJOR,
                "{}: not format 2",
                p.display()
            );
            assert!(!stats.lost_records(), "{}: {stats:?}", p.display());
            let mut chunks = Vec::new();
            let mut at = fmt::HEADER_LEN;
            while at < data.len() {
                let word = |i: usize| u32::from_le_bytes(data[i..i + 4].try_into().unwrap());
                let end = at + fmt::CHUNK_HEADER_LEN + word(at + 4) as usize;
                chunks.push((at, end, word(at + 16) as u64));
                at = end;
            }
            assert_eq!(at, data.len());
            let verdict = analyze(&[Trace::from_bytes(&p, &data).unwrap()]).verdict;
            assert!(!verdict.starts_with("No GPU"), "{}: {verdict}", p.display());
            Original {
                name: p.file_name().unwrap().to_string_lossy().into_owned(),
                data,
                chunks,
                events,
            }
        })
        .collect()
}

/// The events of a trace in memory and the read's stats: read in order (1 worker) or
/// decoded on `workers` threads.
fn events_of(data: &[u8], workers: usize) -> Result<(Vec<Event>, fmt::ReadStats), String> {
    let mut r = fmt::open(Path::new("m.gtrace"), data).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    if workers == 1 {
        r.for_each_event(|e| out.push(e));
    } else {
        r.for_each_chunk_par(workers, Vec::new, |v: Vec<Event>| out.extend(v), |_, _| {});
    }
    Ok((out, r.stats.clone()))
}

/// A hash of decoded events: their kinds, times and the fields the report reads most.
fn fingerprint(events: &[Event]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut mix = |v: u64| h = (h ^ v).wrapping_mul(0x0100_0000_01b3).rotate_left(5);
    for e in events {
        mix(e.ts().unwrap_or(u64::MAX));
        match e {
            Event::Kernel(k) => {
                mix(k.end);
                mix(((k.name as u64) << 32) | k.device as u64);
                mix(((k.grid[0] as u64) << 32) | k.block[0] as u64);
                mix(((k.stream as u64) << 32) | k.corr as u64);
                mix(((k.registers as u64) << 32) | k.dynamic_smem as u64);
            }
            Event::Memcpy(m) => {
                mix(m.end);
                mix(m.bytes);
                mix(u32::from_le_bytes([m.copy_kind, m.src_kind, m.dst_kind, m.flags]) as u64);
            }
            Event::Api(a) => {
                mix(a.end);
                mix(((a.cbid as u64) << 32) | a.corr as u64);
                mix(((a.tid as u64) << 32) | a.name as u64);
            }
            Event::Str { id, text } => {
                mix(*id as u64);
                text.bytes().for_each(|b| mix(b as u64));
            }
            Event::Device(d) => {
                mix(d.id as u64);
                mix(d.sm_count as u64);
                mix(d.global_memory);
            }
            Event::State { state, reason, .. } => mix(((*state as u64) << 32) | *reason as u64),
            Event::Memset(m) => {
                mix(m.end);
                mix(m.bytes);
            }
            Event::Sync(s) => mix(s.end),
            // Others: their time only.
            _ => mix(0x5bd1_e995),
        }
    }
    h
}

/// The metadata a mutant's reader found.
fn o_meta(data: &[u8]) -> fmt::Meta {
    fmt::open(Path::new("m.gtrace"), data)
        .map(|r| r.meta)
        .unwrap_or_default()
}

/// What the report said of a decoded content: (plain no-GPU verdict, no-GPU verdict
/// stating the loss, the verdict). Mutants that decode to the same events with the same
/// loss flag get the same report, so each such content is analysed once.
type Memo = std::sync::Mutex<std::collections::HashMap<(usize, u64, bool), (bool, bool, String)>>;

/// splitmix64: a fixed sequence per mutant, so every run tests the same mutants.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    /// A byte to XOR with: never 0.
    fn flip(&mut self) -> u8 {
        1 + self.below(255) as u8
    }
}

struct Mutant {
    kind: Kind,
    data: Vec<u8>,
    /// Chunks (indices into `Original::chunks`) the mutation left as they were.
    untouched: Vec<usize>,
    what: String,
}

/// The chunk holding byte `at`, if any.
fn chunk_at(o: &Original, at: usize) -> Option<usize> {
    o.chunks.iter().position(|c| c.0 <= at && at < c.1)
}

fn mutant(o: &Original, i: usize, seed: u64) -> Mutant {
    let mut rng = Rng(seed);
    let n = o.data.len();
    let all = |except: &[Option<usize>]| -> Vec<usize> {
        (0..o.chunks.len())
            .filter(|c| !except.contains(&Some(*c)))
            .collect()
    };
    if i < CUTS {
        // Chunk boundaries and the bytes just around them first, then anywhere.
        let near: Vec<usize> = o
            .chunks
            .iter()
            .flat_map(|c| [c.0, c.0 + 1, c.0 + 19, c.0 + 21, c.1 - 1])
            .chain([0, 1, 8, 15])
            .filter(|c| *c < n)
            .collect();
        let cut = near.get(i).copied().unwrap_or_else(|| rng.below(n));
        let untouched = (0..o.chunks.len())
            .filter(|c| o.chunks[*c].1 <= cut)
            .collect();
        return Mutant {
            kind: Kind::Cut,
            data: o.data[..cut].to_vec(),
            untouched,
            what: format!("cut at byte {cut} of {n}"),
        };
    }
    let i = i - CUTS;
    let mut data = o.data.clone();
    if i < FLIPS {
        // A fifth in the file header and chunk headers, where the framing lives.
        let at = if i.is_multiple_of(5) {
            let c = o.chunks[rng.below(o.chunks.len())].0;
            if rng.below(3) == 0 {
                rng.below(fmt::HEADER_LEN)
            } else {
                c + rng.below(fmt::CHUNK_HEADER_LEN)
            }
        } else {
            rng.below(n)
        };
        let x = rng.flip();
        data[at] ^= x;
        return Mutant {
            kind: Kind::Flip,
            data,
            untouched: all(&[chunk_at(o, at)]),
            what: format!("byte {at} of {n} xor {x:#04x}"),
        };
    }
    let i = i - FLIPS;
    if i < ZEROED {
        let at = rng.below(n);
        let end = (at + 64).min(n);
        data[at..end].iter_mut().for_each(|b| *b = 0);
        return Mutant {
            kind: Kind::Zeroed,
            data,
            untouched: all(&[chunk_at(o, at), chunk_at(o, end - 1)]),
            what: format!("bytes {at}..{end} of {n} zeroed"),
        };
    }
    // An events chunk's payload changed, its checksum made to match.
    let c = 1 + rng.below(o.chunks.len() - 1);
    let (start, end, _) = o.chunks[c];
    let payload = start + fmt::CHUNK_HEADER_LEN;
    let at = payload + rng.below(end - payload);
    let x = rng.flip();
    data[at] ^= x;
    let crc = crc32fast::hash(&data[payload..end]);
    data[start + 8..start + 12].copy_from_slice(&crc.to_le_bytes());
    Mutant {
        kind: Kind::Resealed,
        data,
        untouched: all(&[Some(c)]),
        what: format!("chunk {c}: payload byte {at} xor {x:#04x}, checksum resealed"),
    }
}

/// What one mutant did.
#[derive(Default, Clone)]
struct Outcome {
    panicked: bool,
    unreadable: bool,
    no_gpu_plain: bool,
    no_gpu_said_lost: bool,
    intact_dropped: bool,
    silent: bool,
    par_mismatch: bool,
    file_mismatch: bool,
    dump_mismatch: bool,
    detected: bool,
    events: u64,
    events_untouched: u64,
    /// Events read, up to the number in untouched chunks.
    events_kept: u64,
    note: String,
}

fn run(o: &Original, which: usize, m: &Mutant, n: usize, memo: &Memo, file: &Path) -> Outcome {
    let mut out = Outcome {
        events_untouched: m.untouched.iter().map(|c| o.chunks[*c].2).sum(),
        ..Default::default()
    };
    let path = Path::new("mutant.gtrace");
    let seq = events_of(&m.data, 1);
    // Every fourth mutant is also decoded in parallel, every tenth read from a file.
    if n.is_multiple_of(4) {
        out.par_mismatch = seq != events_of(&m.data, 2);
    }
    let (events, stats) = match seq {
        Ok(r) => r,
        Err(e) => {
            out.unreadable = true;
            // Unreadable is right only when no events chunk was left whole.
            out.intact_dropped = m.untouched.iter().any(|c| *c > 0);
            out.note = e;
            return out;
        }
    };
    out.detected = stats.lost_records();
    out.events = stats.events;
    out.events_kept = stats.events.min(out.events_untouched);
    // Every chunk the mutation left alone was read (the metadata chunk is not counted
    // among the chunks read when it was lost).
    let untouched_events_chunks = m.untouched.iter().filter(|c| **c > 0).count() as u64;
    let read_events_chunks = stats.chunks - (!stats.meta_lost) as u64;
    out.intact_dropped = read_events_chunks < untouched_events_chunks;
    out.silent = events != o.events && !stats.lost_records();
    let _ = (stats.warning(), stats.brief());
    let key = (which, fingerprint(&events), stats.lost_records());
    let known = memo.lock().unwrap().get(&key).cloned();
    let (plain, said, verdict) = match known {
        Some(v) if !n.is_multiple_of(10) => v,
        _ => {
            // Built from the events just read (a second decode only where a file is).
            let mut t = Trace::from_events(o_meta(&m.data), events.iter().cloned());
            t.stats = stats.clone();
            if n.is_multiple_of(10) {
                t = Trace::from_bytes_with(path, &m.data, 1 + n % 20 / 10).unwrap();
                std::fs::write(file, &m.data).unwrap();
                let f = Trace::load(file).map(|f| (f.stats, f.kernels, f.apis));
                out.file_mismatch =
                    f.ok() != Some((t.stats.clone(), t.kernels.clone(), t.apis.clone()));
                // The streamed dump reads the same (the previous dump, the oracle, is
                // slow: compared on the small traces only).
                let s = EventStream::from_bytes(path, &m.data).unwrap();
                out.dump_mismatch = *s.read_stats() != t.stats;
                let mut dumped = Vec::new();
                s.write(DEFAULT_MAX_PENDING, &mut Jsonl::default(), &mut dumped)
                    .unwrap();
                if events.len() < 2000 {
                    out.dump_mismatch |= dumped != legacy_dump::legacy_dump(&t);
                }
            }
            let r = analyze(std::slice::from_ref(&t));
            let _ = render_text(&r);
            let _ = serde_json::to_string(&r).unwrap();
            let _ = summary::render(&summary::summarize(&t));
            let v = (
                r.verdict == "No GPU activity recorded",
                r.verdict
                    .starts_with("No GPU activity in what could be read"),
                r.verdict,
            );
            memo.lock().unwrap().insert(key, v.clone());
            v
        }
    };
    out.no_gpu_plain = plain;
    out.no_gpu_said_lost = said;
    out.note = verdict;
    out
}

#[derive(Default)]
struct Counts {
    mutants: u64,
    panics: u64,
    unreadable: u64,
    detected: u64,
    no_gpu_plain: u64,
    no_gpu_said_lost: u64,
    intact_dropped: u64,
    silent: u64,
    par_mismatch: u64,
    file_mismatch: u64,
    dump_mismatch: u64,
    events: u64,
    events_untouched: u64,
    events_kept: u64,
    events_original: u64,
}

impl Counts {
    fn add(&mut self, o: &Outcome, original: u64) {
        self.mutants += 1;
        self.panics += o.panicked as u64;
        self.unreadable += o.unreadable as u64;
        self.detected += o.detected as u64;
        self.no_gpu_plain += o.no_gpu_plain as u64;
        self.no_gpu_said_lost += o.no_gpu_said_lost as u64;
        self.intact_dropped += o.intact_dropped as u64;
        self.silent += o.silent as u64;
        self.par_mismatch += o.par_mismatch as u64;
        self.file_mismatch += o.file_mismatch as u64;
        self.dump_mismatch += o.dump_mismatch as u64;
        self.events += o.events;
        self.events_untouched += o.events_untouched;
        self.events_kept += o.events_kept;
        self.events_original += original;
    }
}

fn pct(a: u64, b: u64) -> f64 {
    100.0 * a as f64 / b.max(1) as f64
}

#[test]
fn fault_matrix() {
    let originals = originals();
    let total = originals.len() * PER_TRACE;
    let dir = std::env::temp_dir().join(format!("gputrace-faults-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<(usize, Outcome)>();
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(2, 4);
    let mut counts: Vec<Counts> = KINDS.iter().map(|_| Counts::default()).collect();
    let mut failures: Vec<String> = Vec::new();
    let memo = Memo::default();
    std::thread::scope(|s| {
        for w in 0..workers {
            let (tx, next, originals, dir, memo) = (tx.clone(), &next, &originals, &dir, &memo);
            s.spawn(move || loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total {
                    break;
                }
                let (o, i) = (&originals[n / PER_TRACE], n % PER_TRACE);
                let file = dir.join(format!("w{w}.gtrace"));
                let out = std::panic::catch_unwind(|| {
                    let m = mutant(o, i, n as u64);
                    run(o, n / PER_TRACE, &m, n, memo, &file)
                })
                .unwrap_or_else(|_| Outcome {
                    panicked: true,
                    ..Default::default()
                });
                if tx.send((n, out)).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        for _ in 0..total {
            // The watchdog: a hang fails the test (the stuck thread is left behind).
            let (n, out) = match rx.recv_timeout(WATCHDOG) {
                Ok(r) => r,
                Err(_) => panic!(
                    "fault matrix: no mutant finished for {} s: one hangs",
                    WATCHDOG.as_secs()
                ),
            };
            let (o, i) = (&originals[n / PER_TRACE], n % PER_TRACE);
            let m = mutant(o, i, n as u64);
            let k = KINDS.iter().position(|k| *k == m.kind).unwrap();
            counts[k].add(&out, o.events.len() as u64);
            let bad = out.panicked
                || out.no_gpu_plain
                || out.intact_dropped
                || out.par_mismatch
                || out.file_mismatch
                || out.dump_mismatch
                || out.silent;
            if bad && failures.len() < 20 {
                let mut why = Vec::new();
                for (b, w) in [
                    (out.panicked, "panicked"),
                    (out.no_gpu_plain, "plain no-GPU verdict"),
                    (out.intact_dropped, "intact chunk dropped"),
                    (out.par_mismatch, "parallel decode differs"),
                    (out.file_mismatch, "file read differs"),
                    (out.dump_mismatch, "streamed dump differs"),
                    (out.silent, "silent change"),
                ] {
                    if b {
                        why.push(w);
                    }
                }
                failures.push(format!(
                    "{} mutant {n} ({}): {}: {}",
                    o.name,
                    m.what,
                    why.join(", "),
                    out.note
                ));
            }
        }
    });
    std::fs::remove_dir_all(&dir).ok();

    let mut all = Counts::default();
    let mut table = String::new();
    table += &format!(
        "fault matrix: {total} mutants of {} format-2 example traces\n",
        originals.len()
    );
    table += &format!(
        "{:<15}{:>8}{:>8}{:>8}{:>10}{:>9}{:>9}{:>9}{:>8}{:>8}{:>10}{:>10}\n",
        "kind",
        "mutants",
        "panics",
        "no-GPU",
        "no-GPU*",
        "dropped",
        "silent",
        "par/file",
        "unread",
        "warned",
        "events%",
        "intact%"
    );
    for (k, c) in KINDS.iter().zip(&counts) {
        table += &row(k.name(), c);
        all.mutants += c.mutants;
        all.panics += c.panics;
        all.unreadable += c.unreadable;
        all.detected += c.detected;
        all.no_gpu_plain += c.no_gpu_plain;
        all.no_gpu_said_lost += c.no_gpu_said_lost;
        all.intact_dropped += c.intact_dropped;
        all.silent += c.silent;
        all.par_mismatch += c.par_mismatch;
        all.file_mismatch += c.file_mismatch;
        all.dump_mismatch += c.dump_mismatch;
        all.events += c.events;
        all.events_untouched += c.events_untouched;
        all.events_kept += c.events_kept;
        all.events_original += c.events_original;
    }
    table += &row("all", &all);
    table += "no-GPU: plain \"No GPU activity recorded\" verdicts (must be 0); no-GPU*: \"No GPU activity in what could be read: <the loss>\"\n";
    table += "dropped: an untouched chunk not read (must be 0); silent: events changed, no loss reported (must be 0)\n";
    table += "par/file: parallel decode, a file read or the streamed dump differing (must be 0); unread: unreadable (cut before the first events chunk); warned: loss reported\n";
    table += "events%: events read of the original's; intact%: of the events in untouched chunks, read (a kernel whose launch shape was defined in a lost chunk is not)\n";
    // Written past the test harness's capture: the counts are this test's output.
    use std::io::Write;
    let _ = std::io::stderr().write_all(table.as_bytes());

    assert!(total >= 2000);
    assert!(
        all.panics == 0
            && all.no_gpu_plain == 0
            && all.intact_dropped == 0
            && all.par_mismatch == 0
            && all.file_mismatch == 0
            && all.dump_mismatch == 0
            && all.silent == 0,
        "fault matrix failures (first {}):\n{}\n{table}",
        failures.len(),
        failures.join("\n")
    );
}

fn row(name: &str, c: &Counts) -> String {
    format!(
        "{:<15}{:>8}{:>8}{:>8}{:>10}{:>9}{:>9}{:>9}{:>8}{:>8}{:>9.1}%{:>9.1}%\n",
        name,
        c.mutants,
        c.panics,
        c.no_gpu_plain,
        c.no_gpu_said_lost,
        c.intact_dropped,
        c.silent,
        c.par_mismatch + c.file_mismatch + c.dump_mismatch,
        c.unreadable,
        c.detected,
        pct(c.events, c.events_original),
        pct(c.events_kept, c.events_untouched),
    )
}
