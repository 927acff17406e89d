//! Writing chunks to a trace file.

use crate::{file_header, seq, ChunkKind, Encoder, Meta, CHUNK_MAGIC};
use std::io::{self, Write};

/// zstd level for events chunks: the fastest; higher levels gained under 2% on traces.
const ZSTD_LEVEL: i32 = 1;

/// Frames payloads as chunks and writes them, whole, to `W`, numbered in the order
/// written (see `crate::seq`); [`ChunkWriter::write_end`] writes the last.
///
/// Each chunk goes out in a single `write_all` of a buffer built in memory, so a process
/// killed between two chunks leaves only whole chunks behind (a kill in the middle of
/// one leaves a torn tail, which readers drop).
pub struct ChunkWriter<W: Write> {
    out: W,
    frame: Vec<u8>,
    /// Events chunks are zstd-compressed (kind 3) unless switched off.
    zip: Option<zstd::bulk::Compressor<'static>>,
    stored: Vec<u8>,
    /// Bytes written so far, headers included.
    pub bytes_written: u64,
    /// The next chunk's number (the metadata's is 0; see `crate::seq`).
    seq: u16,
    /// The chunk holding the end record is written: nothing may follow it.
    ended: bool,
}

impl<W: Write> ChunkWriter<W> {
    /// Writes the file header and the metadata chunk.
    pub fn new(mut out: W, meta: &Meta) -> io::Result<ChunkWriter<W>> {
        out.write_all(&file_header())?;
        let mut w = ChunkWriter {
            out,
            frame: Vec::new(),
            zip: zstd::bulk::Compressor::new(ZSTD_LEVEL).ok().map(|mut z| {
                // The frame carries a checksum of the events it expands to (4 bytes):
                // a second check, behind the chunk's, that what a reader expands is
                // what was written. Readers verify it where present.
                let _ = z.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true));
                z
            }),
            stored: Vec::new(),
            bytes_written: crate::HEADER_LEN as u64,
            seq: 0,
            ended: false,
        };
        let json = serde_json::to_vec(meta).map_err(io::Error::other)?;
        w.write_chunk(ChunkKind::Meta, &json, 0)?;
        Ok(w)
    }

    /// Writes events chunks uncompressed (kind 2) from now on.
    pub fn without_compression(mut self) -> Self {
        self.zip = None;
        self
    }

    /// Writes the events `enc` holds as one chunk (compressed unless switched off) and
    /// resets it for the next chunk. Nothing is written for an empty encoder.
    pub fn write_events(&mut self, enc: &mut Encoder) -> io::Result<()> {
        self.events(enc, false)
    }

    /// [`ChunkWriter::write_events`] for the file's last chunk, the one holding its end
    /// record (the collector's last `Stopped` state): marked so in its header, a reader
    /// takes no chunk after it. Any write after it fails.
    pub fn write_end(&mut self, enc: &mut Encoder) -> io::Result<()> {
        self.events(enc, true)
    }

    fn events(&mut self, enc: &mut Encoder, end: bool) -> io::Result<()> {
        if enc.is_empty() {
            return Ok(());
        }
        let census = enc.census();
        let (raw, n) = enc.take();
        let Some(zip) = &mut self.zip else {
            return self.chunk(ChunkKind::Events, &raw, n, end);
        };
        let mut stored = std::mem::take(&mut self.stored);
        stored.clear();
        stored.extend_from_slice(&(raw.len() as u32).to_le_bytes());
        stored.push(census.len() as u8);
        for (tag, count) in &census {
            stored.push(*tag);
            stored.extend_from_slice(&count.to_le_bytes());
        }
        let head = stored.len();
        stored.resize(head + zstd::zstd_safe::compress_bound(raw.len()), 0);
        let r = match zip.compress_to_buffer(&raw, &mut stored[head..]) {
            Ok(z) => {
                stored.truncate(head + z);
                self.chunk(ChunkKind::EventsZstd, &stored, n, end)
            }
            // Not expected (the buffer is large enough); the events still go out.
            Err(_) => self.chunk(ChunkKind::Events, &raw, n, end),
        };
        self.stored = stored;
        r
    }

    /// Writes one chunk holding `count` events (0 for metadata) as `payload` is.
    pub fn write_chunk(&mut self, kind: ChunkKind, payload: &[u8], count: u32) -> io::Result<()> {
        self.chunk(kind, payload, count, false)
    }

    /// Every chunk goes out here, numbered: the one place the chunks are counted.
    fn chunk(&mut self, kind: ChunkKind, payload: &[u8], count: u32, end: bool) -> io::Result<()> {
        if self.ended {
            return Err(io::Error::other(
                "the trace's end record is written: a chunk after it would be read as damage",
            ));
        }
        self.frame.clear();
        self.frame.extend_from_slice(CHUNK_MAGIC);
        self.frame
            .extend_from_slice(&(payload.len() as u32).to_le_bytes());
        self.frame
            .extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
        self.frame
            .extend_from_slice(&[kind as u8, seq::flags(self.seq, end)]);
        self.frame.extend_from_slice(&self.seq.to_le_bytes());
        self.frame.extend_from_slice(&count.to_le_bytes());
        self.frame.extend_from_slice(payload);
        self.out.write_all(&self.frame)?;
        // A chunk that was not written takes no number (a failed write leaves at most a
        // torn chunk, which readers step over).
        self.seq = self.seq.wrapping_add(1);
        self.ended = end;
        self.bytes_written += self.frame.len() as u64;
        Ok(())
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    pub fn get_ref(&self) -> &W {
        &self.out
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}
