//! The gputrace trace file format, shared by the writer (the preload library) and
//! the reader (the analyzer).
//!
//! A file is a fixed 16-byte header followed by chunks:
//!
//! ```text
//! header:  b"GPUTRACE" | major u16 | minor u16 | header_len u32        (little endian)
//! chunk:   b"GTCK" | payload_len u32 | crc32(payload) u32 | kind u8 | flags u8 | seq u16
//!          | event_count u32 | payload
//! ```
//!
//! The first chunk is a `Meta` chunk (JSON, see [`Meta`]). Every other chunk is an
//! events chunk: a sequence of events, each a tag byte followed by LEB128 varints,
//! stored as is (kind 2) or zstd-compressed (kind 3, from version 2.0: `raw_len u32 |
//! tags u8 | (tag u8, count u32) x tags | zstd frame`, the census of tags letting a
//! reader size its tables without expanding anything).
//! Timestamps are deltas (zigzag) against the previous timestamp in the same chunk, so
//! every chunk decodes on its own: a file cut anywhere reads up to its last whole chunk,
//! and a damaged chunk costs only itself (the reader resynchronises on the next chunk
//! marker whose header is sane and whose checksum holds). Kernel launch shapes are the
//! one exception: defined once per file, a kernel whose shape was defined in a lost
//! chunk is lost with it. Compressed chunks carry zstd's own checksum of the events
//! they expand to, a second check behind the chunk's. Every collector ends its file
//! with a `Stopped` state: a file without one was cut short.
//! From version 2.6 the writer numbers its chunks (`seq`, from 0, the metadata) and marks
//! the chunk holding its end record (a `flags` bit, with check bits over both: see
//! `seq.rs`): a reader takes no replayed copy, no chunk out of place or after the end,
//! and names a gap in the numbers (see [`LossKind`]).
//! Timestamps are nanoseconds in CUPTI's time base: CLOCK_REALTIME on Linux.
//!
//! Compatibility: tags are append-only, a new event kind gets a new tag; a reader of
//! major version N refuses files of a newer major version and skips unknown tags of a
//! newer minor version (every event after the tag byte starts with its own length).

mod codec;
mod damage;
mod event;
pub mod protocol;
mod read;
pub mod redact;
mod seq;
pub mod settings;
mod table;
mod wire;
mod write;

#[doc(hidden)]
pub use codec::{Body, Delta};
pub use codec::{DecodeError, Decoder, Encoder, ShapeOp, Shapes};
pub use damage::{human_bytes, Loss, LossKind, ReadStats};
pub use event::*;
pub use read::{
    open, open_file, read_all, Census, ChunkReader, ChunkSink, NotATrace, ReadError, TraceData,
};
pub use table::{Fields, Value};
pub use write::ChunkWriter;

/// File magic, the first 8 bytes of every trace.
pub const MAGIC: &[u8; 8] = b"GPUTRACE";
/// Magic at the start of every chunk (lets a reader tell a torn write from garbage).
pub const CHUNK_MAGIC: &[u8; 4] = b"GTCK";
/// Major version: a reader refuses files with a larger major version.
/// 2: compressed events chunks (kind 3), which a 1.x reader would skip unseen.
/// Readers of 2.x read 1.x files.
pub const VERSION_MAJOR: u16 = 2;
/// Size of the fixed file header.
pub const HEADER_LEN: usize = 16;
/// Size of a chunk header.
pub const CHUNK_HEADER_LEN: usize = 20;
/// Largest chunk payload a reader accepts (guards against a corrupt length field).
pub const MAX_CHUNK_PAYLOAD: usize = 64 << 20;

/// Chunk kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ChunkKind {
    Meta = 1,
    Events = 2,
    /// Events, zstd-compressed (read back as `Events`).
    EventsZstd = 3,
}

/// Builds the fixed file header.
pub fn file_header() -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..10].copy_from_slice(&VERSION_MAJOR.to_le_bytes());
    h[10..12].copy_from_slice(&VERSION_MINOR.to_le_bytes());
    h[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
    h
}
