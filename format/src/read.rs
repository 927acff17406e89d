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

/// Iterates over the event chunks of a trace held in memory.
pub struct ChunkReader<'a> {
    data: &'a [u8],
    pos: usize,
    path: PathBuf,
    pub meta: Meta,
    pub stats: ReadStats,
    /// Kernel launch shapes defined by the chunks read so far.
    shapes: Vec<crate::Kernel>,
}

/// Parses the header and metadata of a trace held in memory.
pub fn open<'a>(path: &Path, data: &'a [u8]) -> Result<ChunkReader<'a>, ReadError> {
    let p = || path.to_path_buf();
    if data.len() < HEADER_LEN || &data[..8] != MAGIC {
        return Err(ReadError::NotATrace(p()));
    }
    let major = u16::from_le_bytes([data[8], data[9]]);
    let minor = u16::from_le_bytes([data[10], data[11]]);
    if major > VERSION_MAJOR {
        return Err(ReadError::TooNew {
            path: p(),
            major,
            minor,
        });
    }
    let hlen = u32::from_le_bytes([data[12], data[13], data[14], data[15]]) as usize;
    if hlen < HEADER_LEN || hlen > data.len() {
        return Err(ReadError::NotATrace(p()));
    }
    let mut r = ChunkReader {
        data,
        pos: hlen,
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

impl<'a> ChunkReader<'a> {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The next whole, checksummed chunk; `None` at the end, at a torn tail, or at
    /// corruption (recorded in `stats`).
    pub fn next_chunk(&mut self) -> Option<(ChunkKind, &'a [u8], u32)> {
        loop {
            let rest = &self.data[self.pos..];
            if rest.is_empty() {
                return None;
            }
            if rest.len() < CHUNK_HEADER_LEN {
                return self.stop_truncated();
            }
            if &rest[..4] != CHUNK_MAGIC {
                return self.stop_corrupt();
            }
            let len = u32::from_le_bytes(rest[4..8].try_into().unwrap()) as usize;
            let crc = u32::from_le_bytes(rest[8..12].try_into().unwrap());
            let kind = rest[12];
            let count = u32::from_le_bytes(rest[16..20].try_into().unwrap());
            if len > MAX_CHUNK_PAYLOAD {
                return self.stop_corrupt();
            }
            if rest.len() < CHUNK_HEADER_LEN + len {
                return self.stop_truncated();
            }
            let payload = &rest[CHUNK_HEADER_LEN..CHUNK_HEADER_LEN + len];
            if crc32fast::hash(payload) != crc {
                // A bad checksum on the very last chunk is a torn write; elsewhere corruption.
                if rest.len() == CHUNK_HEADER_LEN + len {
                    return self.stop_truncated();
                }
                return self.stop_corrupt();
            }
            self.pos += CHUNK_HEADER_LEN + len;
            self.stats.chunks += 1;
            match kind {
                1 => return Some((ChunkKind::Meta, payload, count)),
                2 => return Some((ChunkKind::Events, payload, count)),
                _ => continue, // a chunk kind from a newer minor version
            }
        }
    }

    fn stop_truncated(&mut self) -> Option<(ChunkKind, &'a [u8], u32)> {
        self.stats.truncated_tail = true;
        self.stats.bytes_lost = (self.data.len() - self.pos) as u64;
        self.pos = self.data.len();
        None
    }

    fn stop_corrupt(&mut self) -> Option<(ChunkKind, &'a [u8], u32)> {
        self.stats.corrupt_at = Some(self.pos as u64);
        self.stats.bytes_lost = (self.data.len() - self.pos) as u64;
        self.pos = self.data.len();
        None
    }

    /// Calls `f` for every event of every remaining chunk.
    pub fn for_each_event(&mut self, mut f: impl FnMut(Event)) {
        while let Some((kind, payload, _)) = self.next_chunk() {
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
    let data = std::fs::read(path).map_err(|e| ReadError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    let mut r = open(path, &data)?;
    let mut events = Vec::new();
    r.for_each_event(|e| events.push(e));
    Ok(TraceData {
        path: path.to_path_buf(),
        meta: r.meta.clone(),
        events,
        stats: r.stats.clone(),
    })
}
