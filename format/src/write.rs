//! Writing chunks to a trace file.

use crate::{file_header, ChunkKind, Meta, CHUNK_MAGIC};
use std::io::{self, Write};

/// Frames payloads as chunks and writes them, whole, to `W`.
///
/// Each chunk goes out in a single `write_all` of a buffer built in memory, so a process
/// killed between two chunks leaves only whole chunks behind (a kill in the middle of
/// one leaves a torn tail, which readers drop).
pub struct ChunkWriter<W: Write> {
    out: W,
    frame: Vec<u8>,
    /// Bytes written so far, headers included.
    pub bytes_written: u64,
}

impl<W: Write> ChunkWriter<W> {
    /// Writes the file header and the metadata chunk.
    pub fn new(mut out: W, meta: &Meta) -> io::Result<ChunkWriter<W>> {
        out.write_all(&file_header())?;
        let mut w = ChunkWriter {
            out,
            frame: Vec::new(),
            bytes_written: crate::HEADER_LEN as u64,
        };
        let json = serde_json::to_vec(meta).map_err(io::Error::other)?;
        w.write_chunk(ChunkKind::Meta, &json, 0)?;
        Ok(w)
    }

    /// Writes one chunk holding `count` events (0 for metadata).
    pub fn write_chunk(&mut self, kind: ChunkKind, payload: &[u8], count: u32) -> io::Result<()> {
        self.frame.clear();
        self.frame.extend_from_slice(CHUNK_MAGIC);
        self.frame
            .extend_from_slice(&(payload.len() as u32).to_le_bytes());
        self.frame
            .extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
        self.frame.extend_from_slice(&[kind as u8, 0, 0, 0]);
        self.frame.extend_from_slice(&count.to_le_bytes());
        self.frame.extend_from_slice(payload);
        self.out.write_all(&self.frame)?;
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
