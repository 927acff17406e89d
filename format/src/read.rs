//! Reading a trace file: header, metadata, then events chunk by chunk.
//!
//! A damaged file is read around its damage: where a chunk fails its checks, the reader
//! looks for the next chunk marker whose header is sane and whose checksum holds, goes
//! on from there, and records what lay between (see [`ReadStats`]). A file cut short
//! (a torn last write, or no end record) reads up to its last whole chunk. In a file
//! whose chunks are numbered (format 2.6), only the writer's chunks in the writer's order
//! are read (see [`Frames::in_sequence`]).

pub use crate::codec::Census;
use crate::damage::{Loss, LossKind};
use crate::{
    seq, ChunkKind, CollectorState, Decoder, Event, Kernel, Meta, ReadStats, ShapeOp, Shapes,
    CHUNK_HEADER_LEN, CHUNK_MAGIC, HEADER_LEN, MAGIC, MAX_CHUNK_PAYLOAD, VERSION_MAJOR,
    VERSION_MINOR,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Why a trace cannot be read at all.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}: is a directory, not a trace file (give the .gtrace files in it)")]
    IsDir(PathBuf),
    #[error("{0}: not a regular file")]
    NotAFile(PathBuf),
    #[error("{}: {}", .0.path.display(), .0.why)]
    NotATrace(NotATrace),
    #[error("{path}: trace format version {major}.{minor} is newer than this reader ({VERSION_MAJOR}.x); upgrade gputrace")]
    TooNew {
        path: PathBuf,
        major: u16,
        minor: u16,
    },
    /// The file ends before its first whole chunk.
    #[error("{path}: the trace is cut short: it ends {len} bytes in, before its first whole chunk (the process stopped while tracing started: killed, or the disk full)")]
    CutShort { path: PathBuf, len: u64 },
    #[error("{path}: the trace is damaged beyond reading: {why}")]
    Damaged { path: PathBuf, why: String },
}

/// A file that is not a trace: where, and what it is instead.
#[derive(Debug)]
pub struct NotATrace {
    pub path: PathBuf,
    pub why: &'static str,
}

impl NotATrace {
    fn error(path: PathBuf, empty: bool) -> ReadError {
        ReadError::NotATrace(NotATrace {
            path,
            why: if empty {
                "the file is empty (nothing was ever written to it)"
            } else {
                "not a gputrace trace (it does not start with a gputrace header)"
            },
        })
    }
}

/// Where the chunks come from: a trace held in memory, or a file read chunk by chunk
/// (so a large trace is never held whole).
enum Source<'a> {
    Mem(&'a [u8]),
    File(std::fs::File),
}

/// The framing layer: finds and checks one chunk at a time, and steps over damage.
struct Frames<'a> {
    src: Source<'a>,
    pos: u64,
    len: u64,
    /// A file chunk's stored payload.
    buf: Vec<u8>,
    /// A file's bytes searched for the next chunk marker.
    scan: Vec<u8>,
    /// A compressed chunk's events, expanded.
    raw: Vec<u8>,
    unzip: Option<zstd::bulk::Decompressor<'static>>,
    /// Intact chunks found so far.
    good: u64,
    /// No writer of this file's version writes chunk kinds this reader does not know,
    /// so one is damage (a changed kind byte) rather than a newer addition.
    strict_kinds: bool,
    /// What the chunk numbers said so far.
    seq: Sequence,
}

/// What the chunk numbers (format 2.6, see `crate::seq`) say of the chunks taken so far.
#[derive(Clone, Default)]
struct Sequence {
    /// Whether this file's chunks are numbered: `None` until its first intact chunk
    /// says (a file of an older version is never read as numbered).
    on: Option<bool>,
    /// The file header says the chunks are numbered (version 2.6 or later).
    claimed: bool,
    /// The number of the last chunk taken (`u16::MAX` before the first: the metadata's
    /// is 0).
    last: u16,
    /// Every number taken, with its chunk's checksum: a chunk repeating both is a copy.
    taken: HashMap<u16, u32>,
    /// Bytes stepped over as damage, or a chunk without a valid number, since the last
    /// chunk taken: a skip in the numbers is that loss, already recorded.
    after_loss: bool,
    /// The chunk holding the end record was taken: nothing after it is read.
    ended: bool,
}

/// Chunk headers read ahead of a chunk numbered past the next number, to see whether the
/// file goes on behind it (then it is the one out of place).
const LOOKAHEAD: usize = 8;

const META: u8 = ChunkKind::Meta as u8;
const EVENTS: u8 = ChunkKind::Events as u8;
const EVENTS_ZSTD: u8 = ChunkKind::EventsZstd as u8;

/// Where the payload of the chunk just read lies.
enum At {
    Mem(usize, usize),
    Buf,
}

/// A chunk header's fields.
#[derive(Clone, Copy)]
struct Head {
    len: usize,
    crc: u32,
    kind: u8,
    /// The end mark and the check of `seq` (see `crate::seq`; 0 before 2.6).
    flags: u8,
    seq: u16,
    count: u32,
}

impl Head {
    /// A header that could be a chunk's: its marker, and a length a writer could give.
    fn parse(h: &[u8]) -> Option<Head> {
        if h.len() < CHUNK_HEADER_LEN || &h[..4] != CHUNK_MAGIC {
            return None;
        }
        let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let len = word(4) as usize;
        (len <= MAX_CHUNK_PAYLOAD).then_some(Head {
            len,
            crc: word(8),
            kind: h[12],
            flags: h[13],
            seq: u16::from_le_bytes([h[14], h[15]]),
            count: word(16),
        })
    }

    /// Events the header declares, as far as its payload could hold them (its count
    /// field is outside the checksum).
    fn events(&self) -> u64 {
        let most = match self.kind {
            META => 0,
            // Compressed: bounded by the largest expansion a reader accepts.
            EVENTS_ZSTD => MAX_CHUNK_PAYLOAD / 2,
            // Every event takes at least two bytes.
            _ => self.len / 2,
        };
        (self.count as u64).min(most as u64)
    }
}

/// One intact chunk.
struct Frame {
    kind: u8,
    at: At,
    count: u32,
    /// File offset of its header.
    offset: u64,
    /// Stored payload length.
    len: usize,
    /// Its place among the file's intact chunks (from 0, the metadata).
    index: u64,
}

impl<'a> Frames<'a> {
    fn read(&mut self, at: u64, n: usize) -> Option<At> {
        if at.checked_add(n as u64)? > self.len {
            return None;
        }
        match &self.src {
            Source::Mem(d) => {
                let a = at as usize;
                (a + n <= d.len()).then_some(At::Mem(a, a + n))
            }
            Source::File(f) => {
                use std::os::unix::fs::FileExt;
                self.buf.resize(n, 0);
                f.read_exact_at(&mut self.buf, at).ok().map(|_| At::Buf)
            }
        }
    }

    fn bytes(&self, at: &At) -> &[u8] {
        stored(&self.src, &self.buf, at)
    }

    /// The chunk header at `pos`, if one could be there (a payload read before stays
    /// where it was).
    fn head(&mut self, pos: u64) -> Option<Head> {
        if pos.checked_add(CHUNK_HEADER_LEN as u64)? > self.len {
            return None;
        }
        let mut h = [0u8; CHUNK_HEADER_LEN];
        match &self.src {
            Source::Mem(d) => {
                let a = usize::try_from(pos).ok()?;
                h.copy_from_slice(d.get(a..a + CHUNK_HEADER_LEN)?);
            }
            Source::File(f) => {
                use std::os::unix::fs::FileExt;
                f.read_exact_at(&mut h, pos).ok()?;
            }
        }
        Head::parse(&h)
    }

    /// Up to `n` bytes at `pos`, copied.
    fn peek(&mut self, pos: u64, n: usize) -> Vec<u8> {
        let n = n.min(self.len.saturating_sub(pos) as usize);
        match self.read(pos, n) {
            Some(at) => self.bytes(&at).to_vec(),
            None => Vec::new(),
        }
    }

    /// The whole chunk at `pos`, if it is intact: a sane header and a payload that
    /// matches its checksum.
    fn intact(&mut self, pos: u64) -> Option<(Head, At)> {
        let h = self.head(pos)?;
        let at = self.read(pos + CHUNK_HEADER_LEN as u64, h.len)?;
        (crc32fast::hash(self.bytes(&at)) == h.crc).then_some((h, at))
    }

    /// The next intact chunk of a kind this reader knows; `None` at the end. Damage
    /// met on the way is stepped over and recorded in `stats`.
    fn next_frame(&mut self, stats: &mut ReadStats) -> Option<Frame> {
        loop {
            if self.pos >= self.len {
                return None;
            }
            let offset = self.pos;
            let Some((h, at)) = self.intact(offset) else {
                self.skip_damage(stats);
                continue;
            };
            let whole = (CHUNK_HEADER_LEN + h.len) as u64;
            self.pos += whole;
            if !self.in_sequence(offset, &h, stats) {
                continue;
            }
            // Only a file's first chunk is metadata: a later one is an events chunk whose
            // kind byte (outside the checksum) was changed.
            let stray_meta = h.kind == META && self.good > 0;
            if stray_meta || !matches!(h.kind, META | EVENTS | EVENTS_ZSTD) {
                // A kind from a newer minor version is skipped; in a file whose version
                // has no other kinds, the kind byte was changed: its events are lost.
                if self.strict_kinds || stray_meta {
                    let events = if stray_meta {
                        // Its count, as far as any events chunk could hold.
                        Head {
                            kind: EVENTS_ZSTD,
                            ..h
                        }
                        .events()
                    } else {
                        h.events()
                    };
                    record(
                        stats,
                        Loss {
                            kind: LossKind::Undecodable,
                            offset,
                            bytes: whole,
                            chunks: 1,
                            events,
                            after_ns: None,
                            before_ns: None,
                            frame: self.good,
                        },
                    );
                }
                continue;
            }
            let index = self.good;
            self.good += 1;
            stats.chunks += 1;
            return Some(Frame {
                kind: h.kind,
                at,
                count: h.count,
                offset,
                len: h.len,
                index,
            });
        }
    }

    /// At `pos` is no intact chunk: goes on to the next one (or the end) and records
    /// what lay between, as damage or, where the file ends inside a chunk, a torn tail.
    fn skip_damage(&mut self, stats: &mut ReadStats) {
        let start = self.pos;
        self.seq.after_loss = true;
        if self.second_header_at(start) {
            // Another trace's events would be read as this one's (its clocks, strings
            // and shapes mixed with ours): stop at its header.
            stats.joined_at = Some(start);
            self.pos = self.len;
            return;
        }
        // Chunk headers still readable in the stretch; the last place in it a chunk may
        // start, and the headers counted before that place.
        let (mut chunks, mut events) = (0u64, 0u64);
        let (mut last, mut before_last) = (start, (0u64, 0u64));
        let mut at = start;
        let next = loop {
            if let Some(h) = self.head(at) {
                chunks += 1;
                events += h.events();
            }
            match self.find_marker(at + 1) {
                Some(m) if self.intact(m).is_some() => break Some(m),
                Some(m) => {
                    before_last = (chunks, events);
                    last = m;
                    at = m;
                }
                None => break None,
            }
        };
        let end = next.unwrap_or(self.len);
        // Reaching the end: a last chunk longer than what is left of the file is a write
        // cut off (the file is whole up to it), unless the writer had ended it.
        let torn = next.is_none() && !self.seq.ended && self.torn_at(last);
        let damaged_end = if torn { last } else { end };
        if damaged_end > start {
            let (c, e) = if torn { before_last } else { (chunks, events) };
            stats.corrupt_at.get_or_insert(start);
            record(
                stats,
                Loss {
                    kind: LossKind::Damaged,
                    offset: start,
                    bytes: damaged_end - start,
                    // Something stood between two intact chunks: at least one chunk.
                    chunks: c.max(1),
                    events: e,
                    after_ns: None,
                    before_ns: None,
                    frame: self.good,
                },
            );
        }
        if torn {
            stats.truncated_tail = true;
            let h = self.head(last);
            record(
                stats,
                Loss {
                    kind: LossKind::TornTail,
                    offset: last,
                    bytes: self.len - last,
                    chunks: h.is_some() as u64,
                    events: h.map(|h| h.events()).unwrap_or(0),
                    after_ns: None,
                    before_ns: None,
                    frame: self.good,
                },
            );
        }
        self.pos = end;
    }

    /// Whether the intact chunk at `offset` (header `h`) is taken as the file's next
    /// chunk, by its number (files of 2.6 on; every chunk of an older file is). If not,
    /// records why, its events not read:
    /// * after the chunk holding the end record: [`LossKind::AfterEnd`] (consecutive
    ///   such chunks are one place);
    /// * without a valid number: [`LossKind::Unnumbered`];
    /// * numbered as the last chunk taken, or behind it: a copy of a chunk taken
    ///   ([`LossKind::Replayed`]: same number and checksum), or else
    ///   [`LossKind::OutOfOrder`];
    /// * numbered past the next number while a chunk header among the next few goes on
    ///   behind it (a chunk of another file, or moved ahead): [`LossKind::OutOfOrder`].
    ///   Otherwise the chunk is taken, and the numbers it skips are
    ///   [`LossKind::Missing`], unless damage stepped over since the last chunk taken
    ///   already accounts for them.
    ///
    /// So a chunk is never read twice, chunks are read in the order written, and one
    /// stray chunk, whatever its number, costs only itself. Whether the file's chunks are
    /// numbered is settled by the file header (older versions: not) and its first intact
    /// chunk: a file claiming 2.6 whose first chunk carries no valid number is read
    /// without numbers, its header noted as damaged.
    fn in_sequence(&mut self, offset: u64, h: &Head, stats: &mut ReadStats) -> bool {
        let number = seq::read(h.flags, h.seq);
        let on = *self.seq.on.get_or_insert(number.is_some());
        if !on {
            if self.seq.claimed {
                self.seq.claimed = false;
                let note = format!(
                    "its version field reads {}.{}, but its first chunk carries no valid \
                     sequence number (read without sequence checks)",
                    stats.major, stats.minor
                );
                stats.header_damage = Some(match stats.header_damage.take() {
                    Some(d) => format!("{d}, {note}"),
                    None => note,
                });
            }
            return true;
        }
        let (whole, frame) = ((CHUNK_HEADER_LEN + h.len) as u64, self.good);
        let aside = |kind| Loss {
            kind,
            offset,
            bytes: whole,
            chunks: 1,
            events: h.events(),
            after_ns: None,
            before_ns: None,
            frame,
        };
        if self.seq.ended {
            match stats.lost.last_mut() {
                Some(l) if l.kind == LossKind::AfterEnd && l.offset + l.bytes == offset => {
                    l.bytes += whole;
                    l.chunks += 1;
                    l.events += h.events();
                    stats.bytes_lost += whole;
                }
                _ => record(stats, aside(LossKind::AfterEnd)),
            }
            return false;
        }
        let Some(end) = number else {
            self.seq.after_loss = true;
            record(stats, aside(LossKind::Unnumbered));
            return false;
        };
        let last = self.seq.last;
        let step = h.seq.wrapping_sub(last);
        if step == 0 || step >= 0x8000 {
            let kind = if self.seq.taken.get(&h.seq) == Some(&h.crc) {
                LossKind::Replayed { seq: h.seq }
            } else {
                LossKind::OutOfOrder { seq: h.seq, last }
            };
            record(stats, aside(kind));
            return false;
        }
        if step > 1 {
            if self.goes_on_behind(offset + whole, last, step) {
                record(stats, aside(LossKind::OutOfOrder { seq: h.seq, last }));
                return false;
            }
            if !self.seq.after_loss {
                record(
                    stats,
                    Loss {
                        kind: LossKind::Missing {
                            from: last.wrapping_add(1),
                            to: h.seq.wrapping_sub(1),
                        },
                        offset,
                        bytes: 0,
                        chunks: step as u64 - 1,
                        events: 0,
                        after_ns: None,
                        before_ns: None,
                        frame: self.good,
                    },
                );
            }
        }
        let s = &mut self.seq;
        s.last = h.seq;
        s.taken.insert(h.seq, h.crc);
        s.after_loss = false;
        s.ended = end;
        true
    }

    /// Whether one of the next few chunk headers from `pos` (sane, validly numbered; their
    /// payloads unchecked) is numbered between `last` and `last + step`: the file goes on
    /// behind a chunk numbered `last + step`.
    fn goes_on_behind(&mut self, mut pos: u64, last: u16, step: u16) -> bool {
        for _ in 0..LOOKAHEAD {
            let Some(h) = self.head(pos) else {
                return false;
            };
            if seq::read(h.flags, h.seq).is_none() {
                return false;
            }
            if (1..step).contains(&h.seq.wrapping_sub(last)) {
                return true;
            }
            pos += (CHUNK_HEADER_LEN + h.len) as u64;
        }
        false
    }

    /// Whether a whole trace file's header starts at `pos`, with a chunk after it: a
    /// second trace appended to this one.
    fn second_header_at(&mut self, pos: u64) -> bool {
        pos > 0
            && self.peek(pos, MAGIC.len()) == MAGIC
            && self.peek(pos + HEADER_LEN as u64, CHUNK_MAGIC.len()) == CHUNK_MAGIC
    }

    /// Whether a chunk write cut off by the end of the file starts at `pos`: the start
    /// of a chunk header with too little file left for it, or a sane header whose
    /// payload runs past the end.
    fn torn_at(&mut self, pos: u64) -> bool {
        let rest = self.len - pos;
        let lead = self.peek(pos, 4);
        if lead[..] != CHUNK_MAGIC[..lead.len()] {
            return false;
        }
        if rest < CHUNK_HEADER_LEN as u64 {
            return true;
        }
        self.head(pos)
            .is_some_and(|h| (CHUNK_HEADER_LEN + h.len) as u64 > rest)
    }

    /// The offset of the next chunk marker at or after `from`.
    fn find_marker(&mut self, from: u64) -> Option<u64> {
        const BLOCK: usize = 1 << 16;
        let find = |hay: &[u8]| hay.windows(4).position(|w| w == CHUNK_MAGIC);
        match &self.src {
            Source::Mem(d) => {
                let from = usize::try_from(from).ok()?;
                find(d.get(from..)?).map(|i| (from + i) as u64)
            }
            Source::File(f) => {
                use std::os::unix::fs::FileExt;
                let mut at = from;
                while at + 4 <= self.len {
                    let n = ((self.len - at) as usize).min(BLOCK);
                    self.scan.resize(n, 0);
                    f.read_exact_at(&mut self.scan, at).ok()?;
                    if let Some(i) = find(&self.scan) {
                        return Some(at + i as u64);
                    }
                    if at + n as u64 >= self.len {
                        return None;
                    }
                    // Blocks overlap so a marker across their boundary is found.
                    at += (n - 3) as u64;
                }
                None
            }
        }
    }
}

/// Adds a loss to the stats.
fn record(stats: &mut ReadStats, l: Loss) {
    stats.bytes_lost += l.bytes;
    stats.lost.push(l);
}

/// Expands the stored payload of a compressed events chunk into `raw`; `None` if it
/// will not expand to the length it states.
fn expand(
    stored: &[u8],
    unzip: &mut Option<zstd::bulk::Decompressor<'static>>,
    raw: &mut Vec<u8>,
) -> Option<()> {
    let z = ZChunk::parse(stored)?;
    if z.raw_len > MAX_CHUNK_PAYLOAD {
        return None;
    }
    let u = match unzip {
        Some(u) => u,
        None => unzip.insert(zstd::bulk::Decompressor::new().ok()?),
    };
    raw.clear();
    raw.reserve(z.raw_len);
    let n = u.decompress_to_buffer(z.frame, raw).ok()?;
    (n == z.raw_len).then_some(())
}

/// An events chunk's events, expanded if compressed; `None` if they would not expand,
/// or are not exactly a sequence of whole events (a chunk whose kind byte was changed,
/// or whose payload was changed along with its checksum): nothing of it is used then.
fn payload<'p>(
    kind: u8,
    stored: &'p [u8],
    unzip: &mut Option<zstd::bulk::Decompressor<'static>>,
    raw: &'p mut Vec<u8>,
) -> Option<&'p [u8]> {
    let p = if kind == EVENTS_ZSTD {
        expand(stored, unzip, raw)?;
        &raw[..]
    } else {
        stored
    };
    crate::codec::walk_tags(p, |_| {}).then_some(p)
}

/// The bytes a chunk's payload occupies, in memory or in the file chunk buffer.
fn stored<'s>(src: &'s Source, buf: &'s [u8], at: &At) -> &'s [u8] {
    match (at, src) {
        (At::Mem(a, b), Source::Mem(d)) => &d[*a..*b],
        (At::Mem(..), Source::File(_)) => &[],
        (At::Buf, _) => buf,
    }
}

/// The stored payload of a compressed events chunk (kind 3):
/// `raw_len u32 | tags u8 | (tag u8, count u32) x tags | zstd frame`, little endian. The
/// census of tags lets a reader size its tables before expanding anything.
pub(crate) struct ZChunk<'p> {
    pub raw_len: usize,
    pub census: &'p [u8],
    pub frame: &'p [u8],
}

impl<'p> ZChunk<'p> {
    pub(crate) fn parse(p: &'p [u8]) -> Option<ZChunk<'p>> {
        let raw_len = u32::from_le_bytes(p.get(..4)?.try_into().ok()?) as usize;
        let tags = *p.get(4)? as usize;
        let census = p.get(5..5 + tags * 5)?;
        Some(ZChunk {
            raw_len,
            census,
            frame: &p[5 + tags * 5..],
        })
    }

    fn add_census(&self, out: &mut Census) {
        // A chunk that will not expand adds nothing (it is not read either).
        if self.raw_len > MAX_CHUNK_PAYLOAD {
            return;
        }
        // Every event takes at least two bytes: counts beyond that are not believed.
        let mut room = self.raw_len as u64 / 2;
        for e in self.census.chunks_exact(5) {
            let n = (u32::from_le_bytes([e[1], e[2], e[3], e[4]]) as u64).min(room);
            room -= n;
            out.0[e[0] as usize] += n;
        }
    }
}

/// Iterates over the event chunks of a trace.
pub struct ChunkReader<'a> {
    frames: Frames<'a>,
    path: PathBuf,
    pub meta: Meta,
    pub stats: ReadStats,
    /// Kernel launch shapes defined by the chunks read so far.
    shapes: Shapes,
    /// (chunk index, first interval start, latest event time) of every events chunk
    /// decoded, in file order: places losses in time.
    times: Vec<(u64, Option<u64>, u64)>,
    /// The last collector state read, in file order.
    last_state: Option<u8>,
    /// Events chunks decoded (some of their events at least).
    decoded: u64,
}

/// Parses the header and metadata of a trace held in memory.
pub fn open<'a>(path: &Path, data: &'a [u8]) -> Result<ChunkReader<'a>, ReadError> {
    ChunkReader::start(path, Source::Mem(data), data.len() as u64)
}

/// Opens a trace file, to be read one chunk at a time.
pub fn open_file(path: &Path) -> Result<ChunkReader<'static>, ReadError> {
    let io = |e| ReadError::Io {
        path: path.to_path_buf(),
        source: e,
    };
    let md = std::fs::metadata(path).map_err(io)?;
    if md.is_dir() {
        return Err(ReadError::IsDir(path.to_path_buf()));
    }
    if !md.is_file() {
        return Err(ReadError::NotAFile(path.to_path_buf()));
    }
    let f = std::fs::File::open(path).map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    ChunkReader::start(path, Source::File(f), len)
}

/// Newest major version a trace can plausibly have (versions go up one at a time; a
/// version field whose high byte is set was changed).
const PLAUSIBLE_MAJOR: u16 = 255;

/// Whether a `libgputrace X.Y.Z` writer string names a version no newer than this
/// reader (which therefore wrote a format this reader knows).
fn written_by_us_or_older(writer: &str) -> bool {
    let parse = |s: &str| -> Option<Vec<u64>> {
        let v = s.split(['-', '+']).next()?;
        v.split('.').map(|p| p.parse().ok()).collect()
    };
    let Some(theirs) = writer.strip_prefix("libgputrace ").and_then(parse) else {
        return false;
    };
    parse(env!("CARGO_PKG_VERSION")).is_some_and(|ours| theirs <= ours)
}

impl<'a> ChunkReader<'a> {
    fn start(path: &Path, src: Source<'a>, len: u64) -> Result<ChunkReader<'a>, ReadError> {
        let p = || path.to_path_buf();
        let mut frames = Frames {
            src,
            pos: 0,
            len,
            buf: Vec::new(),
            scan: Vec::new(),
            raw: Vec::new(),
            unzip: None,
            good: 0,
            strict_kinds: true,
            seq: Sequence {
                last: u16::MAX,
                ..Default::default()
            },
        };
        if len == 0 {
            return Err(NotATrace::error(p(), true));
        }
        let head = frames.peek(0, HEADER_LEN);
        if len < HEADER_LEN as u64 {
            let n = head.len().min(MAGIC.len());
            return Err(if head[..n] == MAGIC[..n] {
                ReadError::CutShort { path: p(), len }
            } else {
                NotATrace::error(p(), false)
            });
        }
        let magic_ok = &head[..8] == MAGIC;
        let near = head[..8].iter().zip(MAGIC).filter(|(a, b)| a == b).count() >= 6;
        let chunk_follows = frames.peek(HEADER_LEN as u64, 4) == CHUNK_MAGIC;
        if !magic_ok && !near && !chunk_follows {
            return Err(NotATrace::error(p(), false));
        }
        let major = u16::from_le_bytes([head[8], head[9]]);
        let minor = u16::from_le_bytes([head[10], head[11]]);
        let hlen = u32::from_le_bytes([head[12], head[13], head[14], head[15]]) as u64;
        let mut damage = Vec::new();
        if !magic_ok {
            damage.push("its magic bytes".to_string());
        }
        let known = (1..=VERSION_MAJOR).contains(&major);
        if !known {
            let newer = magic_ok
                && major > VERSION_MAJOR
                && major <= PLAUSIBLE_MAJOR
                && (HEADER_LEN as u64..=4096).contains(&hlen)
                && hlen <= len;
            // A newer writer's file, unless its metadata shows this reader's writer (or
            // an older one) made it: then the version field was changed.
            let ours = newer && {
                match frames.intact(HEADER_LEN as u64) {
                    Some((h, at)) if h.kind == META => {
                        serde_json::from_slice::<Meta>(frames.bytes(&at))
                            .is_ok_and(|m| written_by_us_or_older(&m.writer))
                    }
                    _ => false,
                }
            };
            if newer && !ours {
                return Err(ReadError::TooNew {
                    path: p(),
                    major,
                    minor,
                });
            }
            damage.push(if ours {
                format!("its version field reads {major}.{minor}, but its metadata was written by a gputrace no newer than this reader")
            } else {
                format!("its version field reads {major}.{minor}, a version no gputrace writes")
            });
        } else if hlen != HEADER_LEN as u64 {
            damage.push(format!("its header length field reads {hlen}"));
        }
        // Every version this reader knows has the same header, so it is read as this
        // version whatever the damaged fields said.
        frames.pos = HEADER_LEN as u64;
        frames.strict_kinds = !known || (major, minor) <= (VERSION_MAJOR, VERSION_MINOR);
        // A file of an older version is read as before; one of 2.6 on (or whose version
        // field is damaged) is numbered if its first intact chunk is.
        let numbered = (major, minor) >= (2, seq::SINCE_MINOR);
        if known && !numbered {
            frames.seq.on = Some(false);
        }
        frames.seq.claimed = known && numbered;
        let mut r = ChunkReader {
            frames,
            path: p(),
            meta: Meta::default(),
            shapes: Shapes::default(),
            stats: ReadStats {
                major,
                minor,
                header_damage: (!damage.is_empty()).then(|| damage.join(", ")),
                ..Default::default()
            },
            times: Vec::new(),
            last_state: None,
            decoded: 0,
        };
        let unread = r.frames.seq.clone();
        match r.frames.next_frame(&mut r.stats) {
            Some(f) if f.kind == META => {
                match serde_json::from_slice(r.frames.bytes(&f.at)) {
                    Ok(m) => r.meta = m,
                    // It passed its checksum, so it was changed along with it.
                    Err(_) => r.stats.meta_lost = true,
                }
            }
            Some(f) => {
                // The metadata chunk was lost: this is the first events chunk, read
                // again with the others.
                r.stats.meta_lost = true;
                r.frames.pos = f.offset;
                r.frames.good -= 1;
                r.stats.chunks -= 1;
                // It is judged again by its number: as it was (a skip before it is
                // recorded already).
                r.frames.seq = Sequence {
                    on: r.frames.seq.on,
                    claimed: r.frames.seq.claimed,
                    after_loss: true,
                    ..unread
                };
            }
            None => {
                let s = &r.stats;
                return Err(if !s.damaged() {
                    ReadError::CutShort { path: p(), len }
                } else {
                    let mut why = format!(
                        "none of its {} bytes after the header is an intact chunk",
                        len - HEADER_LEN as u64
                    );
                    if let Some(h) = &s.header_damage {
                        why = format!("its header is damaged ({h}) and {why}");
                    }
                    ReadError::Damaged { path: p(), why }
                });
            }
        }
        Ok(r)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Counts the events of each tag in the chunks not yet read, checking checksums
    /// but expanding nothing; the reader stays where it was. A compressed chunk's counts
    /// are checked by nothing but its checksum, which a forged file recomputes: each
    /// tag's count is believed up to one event per byte of the file (real traces hold
    /// about one GPU event per 9 bytes), so a few forged chunks cannot have a reader
    /// reserve more memory than there is.
    pub fn census(&mut self) -> Census {
        let mut out = Census::default();
        let (pos, good, stats) = (self.frames.pos, self.frames.good, self.stats.clone());
        let seq = self.frames.seq.clone();
        while let Some(f) = self.frames.next_frame(&mut self.stats) {
            let stored = self.frames.bytes(&f.at);
            match f.kind {
                EVENTS => crate::codec::count_tags(stored, &mut out),
                EVENTS_ZSTD => {
                    if let Some(z) = ZChunk::parse(stored) {
                        z.add_census(&mut out)
                    }
                }
                _ => {}
            }
        }
        self.frames.pos = pos;
        self.frames.good = good;
        self.stats = stats;
        self.frames.seq = seq;
        let most = self.frames.len;
        out.0.iter_mut().for_each(|n| *n = (*n).min(most));
        out
    }

    /// Calls `f` for every event of every remaining chunk.
    pub fn for_each_event(&mut self, f: impl FnMut(Event)) {
        self.for_each_event_with(f, |_, _| {})
    }

    /// [`ChunkReader::for_each_event`], calling `done(bytes_read, bytes_total)` after
    /// each chunk and once at the end.
    pub fn for_each_event_with(
        &mut self,
        mut f: impl FnMut(Event),
        mut done: impl FnMut(u64, u64),
    ) {
        while let Some(fr) = self.frames.next_frame(&mut self.stats) {
            if fr.kind != EVENTS && fr.kind != EVENTS_ZSTD {
                continue;
            }
            let Frames {
                src,
                buf,
                raw,
                unzip,
                ..
            } = &mut self.frames;
            let stored = stored(src, buf, &fr.at);
            match payload(fr.kind, stored, unzip, raw) {
                Some(p) => {
                    let t = decode_events(p, ShapesIn::Resolve(&mut self.shapes), &mut f);
                    self.tally(fr.index, fr.offset, t);
                }
                None => self.chunk_lost(&fr),
            }
            done(self.frames.pos, self.frames.len);
        }
        self.finish();
        done(self.frames.pos, self.frames.len);
    }

    /// Counts one decoded chunk.
    fn tally(&mut self, index: u64, offset: u64, t: Tally) {
        self.decoded += 1;
        self.stats.events += t.events;
        self.stats.unknown_events += t.skipped;
        if t.bad > 0 {
            self.stats.bad_events += t.bad;
            record(
                &mut self.stats,
                Loss {
                    kind: LossKind::Undecodable,
                    offset,
                    bytes: 0,
                    chunks: 0,
                    events: t.bad,
                    after_ns: None,
                    before_ns: None,
                    frame: index,
                },
            );
        }
        if t.state.is_some() {
            self.last_state = t.state;
        }
        if let Some(last) = t.last {
            self.times.push((index, t.first, last));
        }
    }

    /// Counts an events chunk that passed its checksum but could not be used at all.
    fn chunk_lost(&mut self, f: &Frame) {
        let h = Head {
            len: f.len,
            crc: 0,
            kind: f.kind,
            flags: 0,
            seq: 0,
            count: f.count,
        };
        self.stats.bad_events += h.events();
        record(
            &mut self.stats,
            Loss {
                kind: LossKind::Undecodable,
                offset: f.offset,
                bytes: (CHUNK_HEADER_LEN + f.len) as u64,
                chunks: 1,
                events: h.events(),
                after_ns: None,
                before_ns: None,
                frame: f.index,
            },
        );
    }

    /// Once every chunk is read: places the losses in time and tells whether the trace
    /// was finished.
    fn finish(&mut self) {
        // In file order: decoding on several threads records a chunk's undecodable
        // events after the framing has met damage further on.
        self.stats.lost.sort_by_key(|l| l.offset);
        let times = &self.times;
        for l in &mut self.stats.lost {
            let i = times.partition_point(|t| t.0 < l.frame);
            l.after_ns = i.checked_sub(1).map(|i| times[i].2);
            l.before_ns = times.get(i).map(|t| t.2);
        }
        let s = &mut self.stats;
        s.first_ns = times.iter().filter_map(|t| t.1).min();
        s.last_ns = times.iter().map(|t| t.2).max();
        // Every collector ends its file with a Stopped state. Without one the trace was
        // cut short, unless damage at its end may have taken the end record with it. A
        // file with no state at all is cut short only when nothing was decoded, except an
        // environment file: its one state is the Stopped that ends it (written by every
        // version), so its absence is a cut even after events.
        let last_decoded = times.last().map(|t| t.0);
        let end_damaged = s
            .lost
            .iter()
            .any(|l| l.kind != LossKind::TornTail && last_decoded.is_none_or(|d| l.frame >= d));
        let stopped = self.last_state == Some(CollectorState::Stopped as u8);
        s.no_end = !stopped
            && (self.last_state.is_some() || self.decoded == 0 || self.meta.is_environment())
            && (s.truncated_tail || !end_damaged);
    }
}

/// Where a chunk decoded on its own puts its events (see
/// [`ChunkReader::for_each_chunk_par`]).
pub trait ChunkSink: Send {
    fn add(&mut self, e: Event);
    /// Calls `f` on the `nth` kernel event added to this sink (from 0), keeping what it
    /// changed; `f`'s answer, or false when there is no such kernel.
    fn fill_kernel(&mut self, nth: usize, f: &mut dyn FnMut(&mut Kernel) -> bool) -> bool;
}

/// Events of one chunk, in order: the simplest [`ChunkSink`].
impl ChunkSink for Vec<Event> {
    fn add(&mut self, e: Event) {
        self.push(e)
    }
    fn fill_kernel(&mut self, nth: usize, f: &mut dyn FnMut(&mut Kernel) -> bool) -> bool {
        self.iter_mut()
            .filter_map(|e| match e {
                Event::Kernel(k) => Some(k),
                _ => None,
            })
            .nth(nth)
            .is_some_and(f)
    }
}

/// One events chunk handed to a worker: its order in the file, kind, stored payload
/// and event count.
struct Job<'a> {
    seq: u64,
    frame: Frame,
    stored: std::borrow::Cow<'a, [u8]>,
    /// The shapes known when it was handed out (see [`Decoder::deferred`]).
    known: Shapes,
}

/// How a chunk's kernel shapes are resolved.
enum ShapesIn<'s> {
    /// In file order: the shapes of every earlier chunk, updated by this one.
    Resolve(&'s mut Shapes),
    /// Apart: some earlier chunks' shapes; the rest recorded (see [`Decoder::deferred`]).
    Defer(Shapes),
}

/// A chunk as a worker decoded it, before the shapes of earlier chunks are applied.
struct Done<'a, S> {
    job: Job<'a>,
    /// `None`: a chunk that passed its checksum but could not be used.
    out: Option<(S, Tally)>,
}

/// What decoding one chunk found besides its events.
#[derive(Default)]
struct Tally {
    events: u64,
    /// Events that failed to decode (skipped: each records its own length).
    bad: u64,
    skipped: u64,
    /// Shape operations of a deferred decode.
    ops: Vec<ShapeOp>,
    /// First start of a recorded interval, and latest event time.
    first: Option<u64>,
    last: Option<u64>,
    /// The last collector state.
    state: Option<u8>,
}

/// Decodes one chunk's (well-framed) events into `add`: shapes deferred, or, given
/// `shapes`, resolved as it goes (the sequential reading of a chunk).
fn decode_events(payload: &[u8], shapes: ShapesIn, mut add: impl FnMut(Event)) -> Tally {
    let (mut dec, resolve) = match shapes {
        ShapesIn::Resolve(s) => (Decoder::with_shapes(payload, std::mem::take(s)), Some(s)),
        ShapesIn::Defer(known) => (Decoder::deferred(payload, known), None),
    };
    let mut t = Tally::default();
    while let Some(r) = dec.next() {
        match r {
            Ok(ev) => {
                t.events += 1;
                if let Some(ts) = ev.ts().filter(|ts| *ts != 0) {
                    match &ev {
                        Event::Clock { .. } => {}
                        Event::State { state, .. } => {
                            t.state = Some(*state);
                            t.last = t.last.max(Some(ts));
                        }
                        Event::Kernel(_)
                        | Event::Memcpy(_)
                        | Event::Memset(_)
                        | Event::Sync(_)
                        | Event::Api(_)
                        | Event::HostCopy(_)
                        | Event::HostCall(_)
                        | Event::Nccl(_) => {
                            t.first = Some(t.first.map_or(ts, |f| f.min(ts)));
                            t.last = t.last.max(Some(ts));
                        }
                        _ => t.last = t.last.max(Some(ts)),
                    }
                }
                add(ev)
            }
            // The decoder has stepped over the event (every event records its length).
            Err(_) => t.bad += 1,
        }
    }
    t.skipped = dec.skipped;
    match resolve {
        Some(s) => *s = dec.into_shapes(),
        None => t.ops = dec.into_shape_ops(),
    }
    t
}

/// Applies a deferred chunk's shape operations in order. False, with the shapes as they
/// were, if one fails or redefines a known shape (never done by our writer: the kernels
/// a worker resolved against that shape may then be wrong, so the chunk is decoded again).
fn apply_shape_ops<S: ChunkSink>(shapes: &mut Shapes, sink: &mut S, ops: &[ShapeOp]) -> bool {
    let before = shapes.len();
    // Ids defined below `before` (in a gap left by a lost chunk), to undo on failure.
    let mut filled = Vec::new();
    let ok = ops.iter().all(|op| match op {
        ShapeOp::Define(id, k) => {
            if shapes.get(*id).is_some() {
                return false;
            }
            if (*id as usize) < before {
                filled.push(*id);
            }
            shapes.define(*id, k.clone()).is_ok()
        }
        ShapeOp::Use { nth, id } => sink.fill_kernel(*nth, &mut |k| shapes.fill(*id, k).is_ok()),
    });
    if !ok {
        shapes.truncate(before);
        filled.into_iter().for_each(|id| shapes.undefine(id));
    }
    ok
}

impl<'a> ChunkReader<'a> {
    /// Decodes the remaining events chunks on up to `workers` threads (1: on this one),
    /// each into a sink made by `new`; hands the sinks to `merge` in file order, with
    /// every kernel's launch shape filled in, as [`ChunkReader::for_each_event`] would
    /// have produced their events. `done(bytes_read, bytes_total)` is called as chunks
    /// are merged and once at the end.
    pub fn for_each_chunk_par<S: ChunkSink>(
        &mut self,
        workers: usize,
        new: impl Fn() -> S + Sync,
        mut merge: impl FnMut(S),
        mut done: impl FnMut(u64, u64),
    ) {
        let workers = workers.max(1);
        let mut next_seq = 0u64;
        let mut finished: std::collections::BTreeMap<u64, Done<'a, S>> = Default::default();
        // In order: apply shapes, count, merge. A chunk whose deferred shapes do not
        // resolve (a shape defined in a lost chunk, a corrupt file that still passed its
        // checksums, or one that redefines a shape) is decoded again here, in sequence,
        // which reads it as the sequential reader does; so is every chunk after it,
        // whose workers may have resolved shapes that no longer hold.
        let mut in_order = false;
        let mut settle = |me: &mut Self, d: Done<'a, S>| {
            let Done { job, out } = d;
            let out = match out {
                // Unusable: counted as lost below, as in order.
                None => None,
                Some((mut sink, t)) => {
                    if !in_order && apply_shape_ops(&mut me.shapes, &mut sink, &t.ops) {
                        Some((sink, t))
                    } else {
                        in_order = true;
                        let (mut unzip, mut raw) = (None, Vec::new());
                        payload(job.frame.kind, &job.stored, &mut unzip, &mut raw).map(|p| {
                            let mut sink = new();
                            let shapes = ShapesIn::Resolve(&mut me.shapes);
                            let t = decode_events(p, shapes, |e| sink.add(e));
                            (sink, t)
                        })
                    }
                }
            };
            match out {
                Some((sink, t)) => {
                    me.tally(job.frame.index, job.frame.offset, t);
                    merge(sink);
                }
                None => me.chunk_lost(&job.frame),
            }
            done(me.frames.pos, me.frames.len);
        };
        let work = |mut job: Job<'a>, unzip: &mut Option<_>, raw: &mut Vec<u8>| {
            let known = ShapesIn::Defer(std::mem::take(&mut job.known));
            let out = payload(job.frame.kind, &job.stored, unzip, raw).map(|p| {
                let mut sink = new();
                let t = decode_events(p, known, |e| sink.add(e));
                (sink, t)
            });
            Done { job, out }
        };
        if workers == 1 {
            let (mut unzip, mut raw) = (None, Vec::new());
            while let Some(job) = self.next_job(next_seq) {
                next_seq += 1;
                let d = work(job, &mut unzip, &mut raw);
                settle(self, d);
            }
        } else {
            let (job_tx, job_rx) = std::sync::mpsc::channel::<Job<'a>>();
            let job_rx = std::sync::Mutex::new(job_rx);
            let (done_tx, done_rx) = std::sync::mpsc::channel::<Done<'a, S>>();
            std::thread::scope(|scope| {
                for _ in 0..workers {
                    let (job_rx, done_tx, work) = (&job_rx, done_tx.clone(), &work);
                    scope.spawn(move || {
                        let (mut unzip, mut raw) = (None, Vec::new());
                        loop {
                            let job = match job_rx.lock() {
                                Ok(rx) => rx.recv(),
                                Err(_) => break,
                            };
                            let Ok(job) = job else { break };
                            let (seq, frame) = (job.seq, job.frame.meta_copy());
                            // A panic must not leave the reader waiting for this chunk:
                            // it is counted as lost instead.
                            let d = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                work(job, &mut unzip, &mut raw)
                            }))
                            .unwrap_or_else(|_| Done {
                                job: Job {
                                    seq,
                                    frame,
                                    stored: std::borrow::Cow::Borrowed(&[]),
                                    known: Shapes::default(),
                                },
                                out: None,
                            });
                            if done_tx.send(d).is_err() {
                                break;
                            }
                        }
                    });
                }
                drop(done_tx);
                // Chunks in flight at most: enough to keep every worker busy, few
                // enough that their decoded events stay a small part of the tables.
                let limit = workers as u64 + 1;
                let mut sent = 0u64;
                let mut settled = 0u64;
                let mut more = true;
                loop {
                    while more && sent - settled < limit {
                        match self.next_job(sent) {
                            Some(job) => {
                                if job_tx.send(job).is_err() {
                                    more = false;
                                }
                                sent += 1;
                            }
                            None => more = false,
                        }
                    }
                    if settled == sent {
                        break;
                    }
                    let Ok(d) = done_rx.recv() else { break };
                    finished.insert(d.job.seq, d);
                    while let Some(d) = finished.remove(&next_seq) {
                        settle(self, d);
                        next_seq += 1;
                        settled += 1;
                    }
                }
                drop(job_tx);
            });
        }
        self.finish();
        done(self.frames.pos, self.frames.len);
    }

    /// The next events chunk (checksummed, not expanded) as a job.
    fn next_job(&mut self, seq: u64) -> Option<Job<'a>> {
        loop {
            let frame = self.frames.next_frame(&mut self.stats)?;
            if frame.kind != EVENTS && frame.kind != EVENTS_ZSTD {
                continue;
            }
            let stored = match (&self.frames.src, &frame.at) {
                (Source::Mem(d), At::Mem(a, b)) => std::borrow::Cow::Borrowed(&d[*a..*b]),
                _ => std::borrow::Cow::Owned(std::mem::take(&mut self.frames.buf)),
            };
            return Some(Job {
                seq,
                frame,
                stored,
                known: self.shapes.clone(),
            });
        }
    }
}

impl Frame {
    /// The frame's facts without its payload's place (for a chunk whose worker failed).
    fn meta_copy(&self) -> Frame {
        Frame {
            kind: self.kind,
            at: At::Buf,
            count: self.count,
            offset: self.offset,
            len: self.len,
            index: self.index,
        }
    }
}

/// A whole trace read into memory.
#[derive(Debug, Clone)]
pub struct TraceData {
    pub path: PathBuf,
    pub meta: Meta,
    pub events: Vec<Event>,
    pub stats: ReadStats,
}

/// Reads a whole trace file.
pub fn read_all(path: &Path) -> Result<TraceData, ReadError> {
    let mut r = open_file(path)?;
    let mut events = Vec::new();
    r.for_each_event(|e| events.push(e));
    Ok(TraceData {
        path: path.to_path_buf(),
        meta: r.meta.clone(),
        events,
        stats: r.stats.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ChunkWriter, Encoder, GpuSample, TAG_KERNEL_COMPACT};

    const T: u64 = 1_000_000_000;

    fn state(ts: u64, s: CollectorState) -> Event {
        Event::State {
            ts,
            state: s as u8,
            reason: 0,
        }
    }

    /// A file of one events chunk per entry of `chunks` (plain), and each chunk's
    /// (start, end), the metadata first.
    fn file(meta: &Meta, chunks: &[Vec<Event>]) -> (Vec<u8>, Vec<(usize, usize)>) {
        let mut w = ChunkWriter::new(Vec::new(), meta)
            .unwrap()
            .without_compression();
        let mut at = vec![(HEADER_LEN, w.get_ref().len())];
        let mut enc = Encoder::new();
        for c in chunks {
            c.iter().for_each(|e| enc.push(e));
            let start = w.get_ref().len();
            w.write_events(&mut enc).unwrap();
            at.push((start, w.get_ref().len()));
        }
        (w.into_inner(), at)
    }

    fn read(data: &[u8], workers: usize) -> (Vec<Event>, ReadStats) {
        let mut r = open(Path::new("t.gtrace"), data).unwrap();
        let mut out = Vec::new();
        if workers == 1 {
            r.for_each_event(|e| out.push(e));
        } else {
            r.for_each_chunk_par(workers, Vec::new, |v: Vec<Event>| out.extend(v), |_, _| {});
        }
        (out, r.stats)
    }

    /// An events chunk whose kind byte was changed to the metadata's is lost, not
    /// skipped as if it were a second metadata chunk.
    #[test]
    fn a_later_metadata_chunk_is_damage() {
        let chunks = [
            vec![state(T, CollectorState::Tracing)],
            vec![state(T + 1, CollectorState::Tracing)],
            vec![state(T + 2, CollectorState::Stopped)],
        ];
        let (mut data, at) = file(&Meta::default(), &chunks);
        data[at[2].0 + 12] = ChunkKind::Meta as u8;
        let (events, stats) = read(&data, 1);
        assert_eq!(events.len(), 2);
        assert!(stats.damaged(), "{stats:?}");
        assert_eq!(stats.lost.len(), 1);
        let l = &stats.lost[0];
        assert_eq!(
            (l.kind, l.offset, l.chunks, l.events),
            (LossKind::Undecodable, at[2].0 as u64, 1, 1)
        );
        assert_eq!(read(&data, 2).1, stats);
    }

    /// Decoding on several threads lists the losses in file order, as in order: a
    /// chunk's undecodable events before damage met further on.
    #[test]
    fn losses_in_file_order_when_decoded_in_parallel() {
        let chunks: Vec<Vec<Event>> = (0..6)
            .map(|i| {
                let s = if i == 5 {
                    CollectorState::Stopped
                } else {
                    CollectorState::Tracing
                };
                vec![state(T + i, s)]
            })
            .collect();
        // Before the events chunks: a chunk holding a kernel of a shape never defined,
        // checksum intact. The second events chunk: its checksum broken (met by the
        // framing while the first chunks are still being decoded).
        let mut w = ChunkWriter::new(Vec::new(), &Meta::default())
            .unwrap()
            .without_compression();
        let bad = w.get_ref().len();
        let body = [TAG_KERNEL_COMPACT, 6, 0, 0, 0, 0, 0, 5];
        w.write_chunk(ChunkKind::Events, &body, 1).unwrap();
        let mut at = Vec::new();
        let mut enc = Encoder::new();
        for c in &chunks {
            at.push(w.get_ref().len());
            c.iter().for_each(|e| enc.push(e));
            w.write_events(&mut enc).unwrap();
        }
        let mut out = w.into_inner();
        let broken = at[1];
        out[broken + 8] ^= 0xff;
        let (_, seq) = read(&out, 1);
        let kinds: Vec<(LossKind, u64)> = seq.lost.iter().map(|l| (l.kind, l.offset)).collect();
        assert_eq!(
            kinds,
            [
                (LossKind::Undecodable, bad as u64),
                (LossKind::Damaged, broken as u64)
            ],
            "{seq:?}"
        );
        for workers in [2, 3] {
            assert_eq!(read(&out, workers).1, seq, "{workers} workers");
        }
    }

    /// Compressed chunks that claim the largest expansion and 2^32 kernels each: the
    /// census believes no more events than the file has bytes.
    #[test]
    fn a_forged_census_is_bounded_by_the_file() {
        let (mut data, _) = file(&Meta::default(), &[vec![state(T, CollectorState::Stopped)]]);
        for i in 0..100u16 {
            let mut p = (MAX_CHUNK_PAYLOAD as u32 - 1).to_le_bytes().to_vec();
            p.extend_from_slice(&[1, TAG_KERNEL_COMPACT]);
            p.extend_from_slice(&u32::MAX.to_le_bytes());
            p.extend_from_slice(&[0; 4]);
            data.extend_from_slice(CHUNK_MAGIC);
            data.extend_from_slice(&(p.len() as u32).to_le_bytes());
            data.extend_from_slice(&crc32fast::hash(&p).to_le_bytes());
            // Numbered after the metadata and the one events chunk.
            let n = i + 2;
            data.extend_from_slice(&[ChunkKind::EventsZstd as u8, seq::flags(n, false)]);
            data.extend_from_slice(&n.to_le_bytes());
            data.extend_from_slice(&[0; 4]);
            data.extend_from_slice(&p);
        }
        let mut r = open(Path::new("t.gtrace"), &data).unwrap();
        let c = r.census();
        assert_eq!(c.of(&[TAG_KERNEL_COMPACT]), data.len());
        assert_eq!(c.of(&[crate::TAG_STATE]), 1);
        let (events, stats) = read(&data, 1);
        assert_eq!(events.len(), 1);
        assert_eq!(stats.lost.len(), 100);
    }

    /// A finished file of `n` events chunks (numbered 1..=n, the metadata 0), each one
    /// state at `T + i` (the last the `Stopped` end record, in a chunk written as the
    /// end), and each chunk's (start, end), the metadata first.
    fn ended(n: u64) -> (Vec<u8>, Vec<(usize, usize)>) {
        let mut w = ChunkWriter::new(Vec::new(), &Meta::default())
            .unwrap()
            .without_compression();
        let mut at = vec![(HEADER_LEN, w.get_ref().len())];
        let mut enc = Encoder::new();
        for i in 0..n {
            let last = i + 1 == n;
            let s = if last {
                CollectorState::Stopped
            } else {
                CollectorState::Tracing
            };
            enc.push(&state(T + i, s));
            let start = w.get_ref().len();
            if last {
                w.write_end(&mut enc).unwrap();
            } else {
                w.write_events(&mut enc).unwrap();
            }
            at.push((start, w.get_ref().len()));
        }
        (w.into_inner(), at)
    }

    /// The file header of `data`, then the byte ranges `parts` in order; and where each
    /// part starts in the result.
    fn parts(data: &[u8], parts: &[(usize, usize)]) -> (Vec<u8>, Vec<usize>) {
        let mut out = data[..HEADER_LEN].to_vec();
        let mut starts = Vec::new();
        for (a, b) in parts {
            starts.push(out.len());
            out.extend_from_slice(&data[*a..*b]);
        }
        (out, starts)
    }

    /// The chunks of an [`ended`] file read, by the index of their state (`ts - T`), in
    /// the order read; decoding on threads reads the same.
    fn chunks_read(data: &[u8]) -> (Vec<u64>, ReadStats) {
        let (events, stats) = read(data, 1);
        for workers in [2, 3] {
            let (e, s) = read(data, workers);
            assert!(e == events && s == stats, "{workers} workers: {s:?}");
        }
        let ids = events
            .iter()
            .filter_map(|e| e.ts())
            .map(|t| t - T)
            .collect();
        (ids, stats)
    }

    fn losses(st: &ReadStats) -> Vec<(LossKind, u64)> {
        st.lost.iter().map(|l| (l.kind, l.offset)).collect()
    }

    /// A chunk written twice in a row is read once, and said to be a copy: nothing is
    /// lost, so nothing is counted lost. So is one replayed further on.
    #[test]
    fn a_replayed_chunk_is_read_once() {
        let (data, at) = ended(4);
        let (whole, _) = chunks_read(&data);
        assert_eq!(whole, [0, 1, 2, 3]);
        // The chunk numbered 2 twice; the one numbered 1 again after 3.
        let (twice, p) = parts(&data, &[at[0], at[1], at[2], at[2], at[3], at[4]]);
        let (later, q) = parts(&data, &[at[0], at[1], at[2], at[3], at[1], at[4]]);
        for (out, copy, n) in [(twice, p[3], 2), (later, q[4], 1)] {
            let (ids, st) = chunks_read(&out);
            assert_eq!(ids, whole);
            assert!(st.damaged() && !st.cut_short(), "{st:?}");
            assert_eq!(losses(&st), [(LossKind::Replayed { seq: n }, copy as u64)]);
            let l = &st.lost[0];
            let len = at[n as usize].1 - at[n as usize].0;
            assert_eq!((l.bytes, l.chunks, l.events), (len as u64, 1, 1));
            assert_eq!(st.damage_totals(), (0, 0, 0));
            let w = st.warning().unwrap();
            assert!(
                w.contains(&format!("chunk at byte {copy} is a copy of chunk {n}")),
                "{w}"
            );
            let b = st.brief().unwrap();
            assert_eq!(b, "trace damaged: 1 replayed chunk set aside");
        }
    }

    /// Two chunks swapped: the one ahead of its place is not read (its followers go on
    /// behind it), the other is, and the first's absence from the sequence is named.
    #[test]
    fn a_reordered_chunk_is_not_read_out_of_place() {
        let (data, at) = ended(5);
        let (out, p) = parts(&data, &[at[0], at[1], at[3], at[2], at[4], at[5]]);
        let (ids, st) = chunks_read(&out);
        assert_eq!(ids, [0, 1, 3, 4]);
        assert_eq!(
            losses(&st),
            [
                (LossKind::OutOfOrder { seq: 3, last: 1 }, p[2] as u64),
                (LossKind::Missing { from: 3, to: 3 }, p[4] as u64),
            ]
        );
        assert!(st.damaged() && !st.cut_short(), "{st:?}");
        let w = st.warning().unwrap();
        assert!(
            w.contains(&format!(
                "chunk at byte {} is numbered 3, out of sequence after chunk 1",
                p[2]
            )),
            "{w}"
        );
        assert!(w.contains(&format!(
            "chunk 3 missing before the chunk at byte {}",
            p[4]
        )));
    }

    /// Another file's chunk, numbered far ahead, between two of this file's: it alone is
    /// set aside, whatever its number, and the file reads on.
    #[test]
    fn a_foreign_chunk_costs_only_itself() {
        let (data, at) = ended(5);
        let (other, oat) = ended(40);
        let mut out = data[..at[3].0].to_vec();
        let at_foreign = out.len();
        out.extend_from_slice(&other[oat[30].0..oat[30].1]);
        out.extend_from_slice(&data[at[3].0..]);
        let (ids, st) = chunks_read(&out);
        assert_eq!(ids, [0, 1, 2, 3, 4]);
        assert_eq!(
            losses(&st),
            [(LossKind::OutOfOrder { seq: 30, last: 2 }, at_foreign as u64)]
        );
        // Numbered behind (and unlike this file's chunk of that number): the same.
        let mut w = ChunkWriter::new(Vec::new(), &Meta::default()).unwrap();
        let mut enc = Encoder::new();
        enc.push(&state(T + 100, CollectorState::Tracing));
        let from = w.get_ref().len();
        w.write_events(&mut enc).unwrap();
        let mut out = data[..at[3].0].to_vec();
        out.extend_from_slice(&w.get_ref()[from..]);
        out.extend_from_slice(&data[at[3].0..]);
        let (ids, st) = chunks_read(&out);
        assert_eq!(ids, [0, 1, 2, 3, 4]);
        assert_eq!(
            losses(&st),
            [(LossKind::OutOfOrder { seq: 1, last: 2 }, at_foreign as u64)]
        );
    }

    /// Chunks after the end record are not read (one place, however many), and a chunk
    /// cut short there is damage, not a trace cut short.
    #[test]
    fn nothing_after_the_end_record_is_read() {
        let (data, at) = ended(3);
        let (other, oat) = ended(3);
        let mut out = data.clone();
        out.extend_from_slice(&data[at[1].0..at[1].1]);
        out.extend_from_slice(&other[oat[3].0..oat[3].1]);
        let (ids, st) = chunks_read(&out);
        assert_eq!(ids, [0, 1, 2]);
        assert!(st.damaged() && !st.cut_short(), "{st:?}");
        assert_eq!(losses(&st), [(LossKind::AfterEnd, data.len() as u64)]);
        let l = &st.lost[0];
        assert_eq!((l.bytes, l.chunks), ((out.len() - data.len()) as u64, 2));
        assert_eq!(st.damage_totals(), (0, 0, 0));
        let w = st.warning().unwrap();
        assert!(
            w.contains(&format!(
                "2 chunks after the end record, from byte {}: not read",
                data.len()
            )),
            "{w}"
        );
        assert!(st
            .brief()
            .unwrap()
            .contains("2 chunks after its end record set aside"));
        // Part of a chunk after the end.
        let mut torn = data.clone();
        torn.extend_from_slice(&data[at[1].0..at[1].1 - 1]);
        let (ids, st) = chunks_read(&torn);
        assert_eq!(ids, [0, 1, 2]);
        assert!(st.damaged() && !st.cut_short(), "{st:?}");
        assert_eq!(losses(&st), [(LossKind::Damaged, data.len() as u64)]);
        // The writer writes nothing after the end.
        let mut w = ChunkWriter::new(Vec::new(), &Meta::default()).unwrap();
        let mut enc = Encoder::new();
        enc.push(&state(T, CollectorState::Stopped));
        w.write_end(&mut enc).unwrap();
        assert!(w.write_chunk(ChunkKind::Events, &[], 0).is_err());
    }

    /// A chunk gone (nothing in its place): named, and the chunks after it read.
    #[test]
    fn a_missing_chunk_is_named_and_the_next_read() {
        let (data, at) = ended(5);
        let (out, p) = parts(&data, &[at[0], at[1], at[4], at[5]]);
        let (ids, st) = chunks_read(&out);
        assert_eq!(ids, [0, 3, 4]);
        assert!(st.damaged() && !st.cut_short(), "{st:?}");
        assert_eq!(
            losses(&st),
            [(LossKind::Missing { from: 2, to: 3 }, p[2] as u64)]
        );
        assert_eq!(st.damage_totals(), (0, 2, 0));
        let w = st.warning().unwrap();
        assert!(
            w.contains(&format!(
                "2 chunks missing; chunks 2 to 3 missing before the chunk at byte {}, \
                 written between 0.000 s and 0.000 s",
                p[2]
            )),
            "{w}"
        );
        assert_eq!(
            st.brief().unwrap(),
            "trace damaged: 2 chunks lost (written between 0.000 s and 0.000 s)"
        );
        // Damage where the chunk was: that damage is the loss, no gap besides.
        let mut broken = data.clone();
        broken[at[2].1 - 1] ^= 1;
        let (ids, st) = chunks_read(&broken);
        assert_eq!(ids, [0, 2, 3, 4]);
        assert_eq!(losses(&st), [(LossKind::Damaged, at[2].0 as u64)]);
        // The metadata chunk gone.
        let (out, _) = parts(&data, &at[1..]);
        let (ids, st) = chunks_read(&out);
        assert_eq!(ids, [0, 1, 2, 3, 4]);
        assert!(st.meta_lost);
        let first = HEADER_LEN as u64;
        assert_eq!(losses(&st), [(LossKind::Missing { from: 0, to: 0 }, first)]);
    }

    /// A chunk whose number or end mark was changed (any one bit) is set aside alone: it
    /// cannot be told from another file's; no gap is named for it.
    #[test]
    fn a_changed_number_costs_its_chunk_only() {
        let (data, at) = ended(4);
        for (byte, bit) in [(13, 0), (13, 7), (14, 0), (15, 7)] {
            let mut m = data.clone();
            m[at[2].0 + byte] ^= 1 << bit;
            let (ids, st) = chunks_read(&m);
            assert_eq!(ids, [0, 2, 3], "byte {byte} bit {bit}");
            assert_eq!(losses(&st), [(LossKind::Unnumbered, at[2].0 as u64)]);
            assert_eq!(st.damage_totals().1, 1);
        }
    }

    /// Numbers go on from 65535 to 0; a copy and a gap across the wrap are still seen.
    #[test]
    fn numbers_wrap_after_65535() {
        let n = 65_537u64;
        let (data, at) = ended(n);
        let (events, st) = read(&data, 1);
        assert_eq!(events.len() as u64, n);
        assert!(!st.lost_records(), "{:?}", &st.lost[..st.lost.len().min(3)]);
        // at[65535] is numbered 65535, at[65536] 0 (the second time).
        let (a, b, c) = (at[65535], at[65536], at[65537]);
        let mut out = data[..b.1].to_vec();
        let copy = out.len();
        out.extend_from_slice(&data[b.0..b.1]);
        out.extend_from_slice(&data[c.0..]);
        let (events, st) = read(&out, 2);
        assert_eq!(events.len() as u64, n);
        assert_eq!(losses(&st), [(LossKind::Replayed { seq: 0 }, copy as u64)]);
        let mut out = data[..a.1].to_vec();
        out.extend_from_slice(&data[c.0..]);
        let (events, st) = read(&out, 1);
        assert_eq!(events.len() as u64, n - 1);
        assert_eq!(
            losses(&st),
            [(LossKind::Missing { from: 0, to: 0 }, a.1 as u64)]
        );
    }

    /// `data` as a writer of version 2.`minor` without numbers wrote it: the header says
    /// so, and every chunk's flags and number are zeros.
    fn unnumbered(data: &[u8], at: &[(usize, usize)], minor: u16) -> Vec<u8> {
        let mut d = data.to_vec();
        d[10..12].copy_from_slice(&minor.to_le_bytes());
        for (a, _) in at {
            d[a + 13..a + 16].fill(0);
        }
        d
    }

    /// A file of a version before numbers reads as before: no check, so a copy reads
    /// twice, as it always did. One claiming numbers without them is read whole, its
    /// header said to be damaged.
    #[test]
    fn an_older_file_is_read_without_numbers() {
        let (data, at) = ended(3);
        let old = unnumbered(&data, &at, seq::SINCE_MINOR - 1);
        let (ids, st) = chunks_read(&old);
        assert_eq!(ids, [0, 1, 2]);
        assert!(!st.lost_records(), "{st:?}");
        let (twice, _) = parts(&old, &[at[0], at[1], at[2], at[2], at[3]]);
        let (ids, st) = chunks_read(&twice);
        assert_eq!(ids, [0, 1, 1, 2]);
        assert!(!st.lost_records(), "{st:?}");
        let claimed = unnumbered(&data, &at, seq::SINCE_MINOR);
        let (ids, st) = chunks_read(&claimed);
        assert_eq!(ids, [0, 1, 2]);
        assert!(st.damaged() && st.lost.is_empty(), "{st:?}");
        let h = st.header_damage.unwrap();
        assert!(h.contains("carries no valid sequence number"), "{h}");
        // An older writer's chunk in a numbered file: another file's.
        let mut out = data[..at[2].0].to_vec();
        out.extend_from_slice(&old[at[2].0..at[2].1]);
        out.extend_from_slice(&data[at[3].0..]);
        let (ids, st) = chunks_read(&out);
        assert_eq!(ids, [0, 2]);
        assert_eq!(losses(&st), [(LossKind::Unnumbered, at[2].0 as u64)]);
    }

    /// An environment file records no state but the Stopped that ends it: one cut at
    /// a chunk boundary, after events, was cut short.
    #[test]
    fn an_environment_file_without_its_end_was_cut_short() {
        let meta = Meta {
            kind: crate::META_KIND_ENVIRONMENT.into(),
            ..Default::default()
        };
        let sample = |i: u64| {
            Event::GpuSample(GpuSample {
                ts: T + i,
                ..Default::default()
            })
        };
        let chunks = [
            vec![sample(0)],
            vec![sample(1)],
            vec![sample(2), state(T + 3, CollectorState::Stopped)],
        ];
        let (data, at) = file(&meta, &chunks);
        let (_, whole) = read(&data, 1);
        assert!(!whole.lost_records(), "{whole:?}");
        let (events, cut) = read(&data[..at[2].1], 1);
        assert_eq!(events.len(), 2);
        assert!(cut.cut_short() && !cut.damaged(), "{cut:?}");
        // A process trace of an older writer, with no state at all, is not.
        let (data, at) = file(&Meta::default(), &chunks);
        assert!(!read(&data[..at[2].1], 1).1.lost_records());
    }
}
