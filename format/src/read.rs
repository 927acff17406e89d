//! Reading a trace file: header, metadata, then events chunk by chunk.

use crate::{
    ChunkKind, Decoder, Event, Meta, CHUNK_HEADER_LEN, CHUNK_MAGIC, HEADER_LEN, MAGIC,
    MAX_CHUNK_PAYLOAD, VERSION_MAJOR,
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
        // Borrowed field by field: `raw` and `unzip` change below.
        let z = ZChunk::parse(stored(&self.src, &self.buf, at))?;
        if z.raw_len > MAX_CHUNK_PAYLOAD {
            return None;
        }
        let unzip = match &mut self.unzip {
            Some(u) => u,
            None => self.unzip.insert(zstd::bulk::Decompressor::new().ok()?),
        };
        self.raw.clear();
        self.raw.reserve(z.raw_len);
        let n = unzip.decompress_to_buffer(z.frame, &mut self.raw).ok()?;
        (n == z.raw_len).then_some(())
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
    shapes: Vec<crate::Kernel>,
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
            shapes: Vec::new(),
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
