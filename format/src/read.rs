//! Reading a trace file: header, metadata, then events chunk by chunk.

use crate::{
    ChunkKind, Decoder, Event, Kernel, Meta, ShapeOp, Shapes, CHUNK_HEADER_LEN, CHUNK_MAGIC,
    HEADER_LEN, MAGIC, MAX_CHUNK_PAYLOAD, VERSION_MAJOR,
};
use std::path::{Path, PathBuf};

/// Why a trace cannot be read at all.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}: not a gputrace trace (bad magic)")]
    NotATrace(PathBuf),
    #[error("{path}: trace format version {major}.{minor} is newer than this reader ({VERSION_MAJOR}.x); upgrade gputrace")]
    TooNew {
        path: PathBuf,
        major: u16,
        minor: u16,
    },
    #[error("{0}: trace ends before its metadata chunk (the process died at start-up?)")]
    NoMeta(PathBuf),
    #[error("{path}: metadata chunk is corrupt: {why}")]
    BadMeta { path: PathBuf, why: String },
}

/// What was found while reading, beyond the events.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReadStats {
    pub chunks: u64,
    pub events: u64,
    /// The file ended inside a chunk (process killed mid-write): the tail was dropped.
    pub truncated_tail: bool,
    /// A chunk failed its checksum or framing: reading stopped there.
    pub corrupt_at: Option<u64>,
    /// Bytes not read because of truncation or corruption.
    pub bytes_lost: u64,
    /// Events skipped because their tag is newer than this reader.
    pub unknown_events: u64,
    /// Events that failed to decode inside a chunk that passed its checksum.
    pub bad_events: u64,
    /// Minor version of the file.
    pub minor: u16,
}

impl ReadStats {
    /// One line describing data loss, if any.
    pub fn warning(&self) -> Option<String> {
        if let Some(at) = self.corrupt_at {
            Some(format!(
                "corrupt chunk at byte {at}: read {} chunks, {} bytes after it skipped",
                self.chunks, self.bytes_lost
            ))
        } else if self.truncated_tail {
            Some(format!(
                "trace is truncated (process killed?): read {} whole chunks, dropped a torn tail of {} bytes",
                self.chunks, self.bytes_lost
            ))
        } else {
            None
        }
    }
}

/// Where the chunks come from: a trace held in memory, or a file read chunk by chunk
/// (so a large trace is never held whole).
enum Source<'a> {
    Mem(&'a [u8]),
    File(std::fs::File),
}

/// The framing layer: finds, checks and (for compressed chunks) expands one chunk at a
/// time.
struct Frames<'a> {
    src: Source<'a>,
    pos: u64,
    len: u64,
    /// A file chunk's stored payload.
    buf: Vec<u8>,
    /// A compressed chunk's events, expanded.
    raw: Vec<u8>,
    unzip: Option<zstd::bulk::Decompressor<'static>>,
}

const META: u8 = ChunkKind::Meta as u8;
const EVENTS: u8 = ChunkKind::Events as u8;
const EVENTS_ZSTD: u8 = ChunkKind::EventsZstd as u8;

/// Where the payload of the chunk just read lies.
enum At {
    Mem(usize, usize),
    Buf,
}

impl<'a> Frames<'a> {
    fn read(&mut self, at: u64, n: usize) -> Option<At> {
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

    /// The next whole chunk that passes its checksum, as (kind byte, where its stored
    /// payload is, event count); `None` at the end, at a torn tail or at corruption
    /// (recorded in `stats`).
    fn next_frame(&mut self, stats: &mut ReadStats) -> Option<(u8, At, u32)> {
        let rest = self.len - self.pos;
        if rest == 0 {
            return None;
        }
        if rest < CHUNK_HEADER_LEN as u64 {
            return self.stop(stats, false);
        }
        let Some(h) = self.read(self.pos, CHUNK_HEADER_LEN) else {
            return self.stop(stats, false);
        };
        let h: [u8; CHUNK_HEADER_LEN] = self.bytes(&h).try_into().unwrap_or([0; CHUNK_HEADER_LEN]);
        if &h[..4] != CHUNK_MAGIC {
            return self.stop(stats, true);
        }
        let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let (len, crc, kind, count) = (word(4) as usize, word(8), h[12], word(16));
        if len > MAX_CHUNK_PAYLOAD {
            return self.stop(stats, true);
        }
        let whole = (CHUNK_HEADER_LEN + len) as u64;
        if rest < whole {
            return self.stop(stats, false);
        }
        let Some(at) = self.read(self.pos + CHUNK_HEADER_LEN as u64, len) else {
            return self.stop(stats, false);
        };
        if crc32fast::hash(self.bytes(&at)) != crc {
            // A bad checksum on the very last chunk is a torn write; elsewhere corruption.
            return self.stop(stats, rest != whole);
        }
        self.pos += whole;
        stats.chunks += 1;
        Some((kind, at, count))
    }

    /// The next chunk of a kind this reader knows, compressed ones expanded.
    fn next(&mut self, stats: &mut ReadStats) -> Option<(ChunkKind, &[u8], u32)> {
        loop {
            let (kind, at, count) = self.next_frame(stats)?;
            match kind {
                META => return Some((ChunkKind::Meta, self.bytes(&at), count)),
                EVENTS => return Some((ChunkKind::Events, self.bytes(&at), count)),
                EVENTS_ZSTD => {
                    if self.expand(&at).is_none() {
                        // It passed its checksum, so the writer made it so: count its
                        // events as lost and go on with the next chunk.
                        stats.bad_events += count as u64;
                        continue;
                    }
                    return Some((ChunkKind::Events, &self.raw, count));
                }
                _ => continue, // a chunk kind from a newer minor version
            }
        }
    }

    /// Expands a compressed events chunk into `raw`.
    fn expand(&mut self, at: &At) -> Option<()> {
        // Borrowed field by field: `raw` and `unzip` change.
        expand(
            stored(&self.src, &self.buf, at),
            &mut self.unzip,
            &mut self.raw,
        )
    }

    fn stop(&mut self, stats: &mut ReadStats, corrupt: bool) -> Option<(u8, At, u32)> {
        if corrupt {
            stats.corrupt_at = Some(self.pos);
        } else {
            stats.truncated_tail = true;
        }
        stats.bytes_lost = self.len - self.pos;
        self.pos = self.len;
        None
    }
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
        for e in self.census.chunks_exact(5) {
            let n = u32::from_le_bytes([e[1], e[2], e[3], e[4]]) as u64;
            // Every event takes at least two bytes: a count beyond that is not believed.
            out.0[e[0] as usize] += n.min(self.raw_len as u64 / 2);
        }
    }
}

/// Events of each tag in a trace (indexed by tag), from a pass over its chunks that
/// expands nothing: for sizing tables before decoding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Census(pub [u64; 256]);

impl Default for Census {
    fn default() -> Census {
        Census([0; 256])
    }
}

impl Census {
    pub fn of(&self, tags: &[u8]) -> usize {
        tags.iter().map(|t| self.0[*t as usize]).sum::<u64>() as usize
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
    let f = std::fs::File::open(path).map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    ChunkReader::start(path, Source::File(f), len)
}

impl<'a> ChunkReader<'a> {
    fn start(path: &Path, src: Source<'a>, len: u64) -> Result<ChunkReader<'a>, ReadError> {
        let p = || path.to_path_buf();
        let mut frames = Frames {
            src,
            pos: 0,
            len,
            buf: Vec::new(),
            raw: Vec::new(),
            unzip: None,
        };
        let head = match frames.read(0, HEADER_LEN) {
            Some(at) if len >= HEADER_LEN as u64 => frames.bytes(&at).to_vec(),
            _ => return Err(ReadError::NotATrace(p())),
        };
        if &head[..8] != MAGIC {
            return Err(ReadError::NotATrace(p()));
        }
        let major = u16::from_le_bytes([head[8], head[9]]);
        let minor = u16::from_le_bytes([head[10], head[11]]);
        if major > VERSION_MAJOR {
            return Err(ReadError::TooNew {
                path: p(),
                major,
                minor,
            });
        }
        let hlen = u32::from_le_bytes([head[12], head[13], head[14], head[15]]) as u64;
        if hlen < HEADER_LEN as u64 || hlen > len {
            return Err(ReadError::NotATrace(p()));
        }
        frames.pos = hlen;
        let mut r = ChunkReader {
            frames,
            path: p(),
            meta: Meta::default(),
            shapes: Shapes::default(),
            stats: ReadStats {
                minor,
                ..Default::default()
            },
        };
        match r.next_chunk() {
            Some((ChunkKind::Meta, payload, _)) => {
                r.meta = serde_json::from_slice(payload).map_err(|e| ReadError::BadMeta {
                    path: p(),
                    why: e.to_string(),
                })?;
            }
            Some(_) => {
                return Err(ReadError::BadMeta {
                    path: p(),
                    why: "first chunk is not metadata".into(),
                })
            }
            None => return Err(ReadError::NoMeta(p())),
        }
        Ok(r)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The next whole, checksummed chunk (compressed chunks come expanded); `None` at
    /// the end, at a torn tail, or at corruption (recorded in `stats`).
    pub fn next_chunk(&mut self) -> Option<(ChunkKind, &[u8], u32)> {
        self.frames.next(&mut self.stats)
    }

    /// Counts the events of each tag in the chunks not yet read, checking checksums
    /// but expanding nothing; the reader stays where it was.
    pub fn census(&mut self) -> Census {
        let mut out = Census::default();
        let (pos, stats) = (self.frames.pos, self.stats.clone());
        while let Some((kind, at, _)) = self.frames.next_frame(&mut self.stats) {
            let stored = self.frames.bytes(&at);
            match kind {
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
        self.stats = stats;
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
        while let Some((kind, payload, _)) = self.frames.next(&mut self.stats) {
            if kind != ChunkKind::Events {
                continue;
            }
            let mut dec = Decoder::with_shapes(payload, std::mem::take(&mut self.shapes));
            while let Some(r) = dec.next() {
                match r {
                    Ok(ev) => {
                        self.stats.events += 1;
                        f(ev)
                    }
                    Err(_) => {
                        self.stats.bad_events += 1;
                        break;
                    }
                }
            }
            self.stats.unknown_events += dec.skipped;
            self.shapes = dec.into_shapes();
            done(self.frames.pos, self.frames.len);
        }
        done(self.frames.pos, self.frames.len);
    }
}

/// Where a chunk decoded on its own puts its events (see
/// [`ChunkReader::for_each_chunk_par`]).
pub trait ChunkSink: Send {
    fn add(&mut self, e: Event);
    /// The `nth` kernel event added to this sink (from 0).
    fn kernel_mut(&mut self, nth: usize) -> Option<&mut Kernel>;
}

/// Events of one chunk, in order: the simplest [`ChunkSink`].
impl ChunkSink for Vec<Event> {
    fn add(&mut self, e: Event) {
        self.push(e)
    }
    fn kernel_mut(&mut self, nth: usize) -> Option<&mut Kernel> {
        self.iter_mut()
            .filter_map(|e| match e {
                Event::Kernel(k) => Some(k),
                _ => None,
            })
            .nth(nth)
    }
}

/// One events chunk handed to a worker: its order in the file, kind, stored payload
/// and event count.
struct Job<'a> {
    seq: u64,
    kind: u8,
    stored: std::borrow::Cow<'a, [u8]>,
    count: u32,
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
    /// `None`: a compressed chunk that passed its checksum but would not expand.
    out: Option<Decoded<S>>,
}

struct Decoded<S> {
    sink: S,
    ops: Vec<ShapeOp>,
    events: u64,
    bad: bool,
    skipped: u64,
}

/// Expands (if compressed) and decodes one chunk on its own: shapes deferred, or, given
/// `shapes`, resolved as it goes (the sequential reading of a chunk).
fn decode_chunk<S: ChunkSink>(
    kind: u8,
    stored: &[u8],
    unzip: &mut Option<zstd::bulk::Decompressor<'static>>,
    raw: &mut Vec<u8>,
    shapes: ShapesIn,
    mut sink: S,
) -> Option<Decoded<S>> {
    let payload = if kind == EVENTS_ZSTD {
        expand(stored, unzip, raw)?;
        &raw[..]
    } else {
        stored
    };
    let (mut dec, resolve) = match shapes {
        ShapesIn::Resolve(s) => (Decoder::with_shapes(payload, s.clone()), Some(s)),
        ShapesIn::Defer(known) => (Decoder::deferred(payload, known), None),
    };
    let (mut events, mut bad) = (0, false);
    while let Some(r) = dec.next() {
        match r {
            Ok(ev) => {
                events += 1;
                sink.add(ev)
            }
            Err(_) => {
                bad = true;
                break;
            }
        }
    }
    let skipped = dec.skipped;
    let ops = match resolve {
        Some(s) => {
            *s = dec.into_shapes();
            Vec::new()
        }
        None => dec.into_shape_ops(),
    };
    Some(Decoded {
        sink,
        ops,
        events,
        bad,
        skipped,
    })
}

/// Applies a deferred chunk's shape operations in order. False, with the shapes as they
/// were, if one fails or redefines a known shape (never done by our writer: the kernels
/// a worker resolved against that shape may then be wrong, so the chunk is decoded again).
fn apply_shape_ops<S: ChunkSink>(shapes: &mut Shapes, d: &mut Decoded<S>) -> bool {
    let before = shapes.len();
    let ok = d.ops.iter().all(|op| match op {
        ShapeOp::Define(id, k) => {
            (*id as usize) >= shapes.len() && shapes.define(*id, k.clone()).is_ok()
        }
        ShapeOp::Use { nth, id } => d
            .sink
            .kernel_mut(*nth)
            .is_some_and(|k| shapes.fill(*id, k).is_ok()),
    });
    if !ok {
        shapes.truncate(before);
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
        // resolve (a corrupt file that still passed its checksums, or one that redefines
        // a shape) is decoded again here, in sequence, which stops it where the
        // sequential reader stops; so is every chunk after it, whose workers may have
        // resolved shapes that no longer hold.
        let mut in_order = false;
        let mut settle = |me: &mut Self, d: Done<'a, S>| {
            let Done { job, out } = d;
            let out = match out {
                // It would not expand: counted as lost below, as in order.
                None => None,
                Some(mut o) => {
                    if !in_order && apply_shape_ops(&mut me.shapes, &mut o) {
                        Some(o)
                    } else {
                        in_order = true;
                        let (mut unzip, mut raw) = (None, Vec::new());
                        let shapes = ShapesIn::Resolve(&mut me.shapes);
                        decode_chunk(job.kind, &job.stored, &mut unzip, &mut raw, shapes, new())
                    }
                }
            };
            match out {
                Some(o) => {
                    me.stats.events += o.events;
                    me.stats.bad_events += o.bad as u64;
                    me.stats.unknown_events += o.skipped;
                    merge(o.sink);
                }
                None => me.stats.bad_events += job.count as u64,
            }
            done(me.frames.pos, me.frames.len);
        };
        let work = |mut job: Job<'a>, unzip: &mut Option<_>, raw: &mut Vec<u8>| {
            let known = ShapesIn::Defer(std::mem::take(&mut job.known));
            let out = decode_chunk(job.kind, &job.stored, unzip, raw, known, new());
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
                            let (seq, kind, count) = (job.seq, job.kind, job.count);
                            // A panic must not leave the reader waiting for this chunk:
                            // it is counted as lost instead.
                            let d = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                work(job, &mut unzip, &mut raw)
                            }))
                            .unwrap_or_else(|_| Done {
                                job: Job {
                                    seq,
                                    kind,
                                    stored: std::borrow::Cow::Borrowed(&[]),
                                    count,
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
        done(self.frames.pos, self.frames.len);
    }

    /// The next events chunk (checksummed, not expanded) as a job.
    fn next_job(&mut self, seq: u64) -> Option<Job<'a>> {
        loop {
            let (kind, at, count) = self.frames.next_frame(&mut self.stats)?;
            if kind != EVENTS && kind != EVENTS_ZSTD {
                continue;
            }
            let stored = match (&self.frames.src, at) {
                (Source::Mem(d), At::Mem(a, b)) => std::borrow::Cow::Borrowed(&d[a..b]),
                _ => std::borrow::Cow::Owned(std::mem::take(&mut self.frames.buf)),
            };
            return Some(Job {
                seq,
                kind,
                stored,
                count,
                known: self.shapes.clone(),
            });
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
