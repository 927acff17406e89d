//! Loading a trace while telling a callback how far it got (for a progress bar).
//! Produces the same [`Trace`] as [`Trace::load`]: the format crate's own reader decodes
//! the events, on a helper thread, and hands them over in batches, so this module knows
//! nothing of the encoding.

use crate::trace::Trace;
use gputrace_format::{self as fmt, ChunkKind, Event, ReadError, ReadStats};
use std::path::Path;

const BATCH: usize = 4096;

/// Reads a trace held in memory, calling `progress(bytes_done)` as events arrive
/// (bytes_done is estimated from the share of the file's events decoded so far).
pub fn from_bytes_with_progress(
    path: &Path,
    data: &[u8],
    mut progress: impl FnMut(u64),
) -> Result<Trace, ReadError> {
    // Chunk headers give the number of events to expect.
    let mut total = 0u64;
    {
        let mut scan = fmt::open(path, data)?;
        while let Some((kind, _, count)) = scan.next_chunk() {
            if kind == ChunkKind::Events {
                total += count as u64;
            }
        }
    }
    let mut reader = fmt::open(path, data)?;
    let meta = reader.meta.clone();
    let len = data.len() as u64;
    let (t, stats) = std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Event>>(8);
        let decoder = s.spawn(move || {
            let mut batch = Vec::with_capacity(BATCH);
            reader.for_each_event(|e| {
                batch.push(e);
                if batch.len() == BATCH {
                    let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                    let _ = tx.send(full);
                }
            });
            if !batch.is_empty() {
                let _ = tx.send(batch);
            }
            reader.stats
        });
        let mut done = 0u64;
        let events = rx.into_iter().flat_map(|b| {
            done += b.len() as u64;
            if total > 0 {
                progress((done.min(total) as u128 * len as u128 / total as u128) as u64);
            }
            b
        });
        let t = Trace::from_events(meta, events);
        (t, decoder.join().unwrap_or_else(|_| ReadStats::default()))
    });
    let mut t = t;
    t.path = path.to_path_buf();
    t.stats = stats;
    Ok(t)
}

/// Reads a trace file, calling `progress(bytes_done, bytes_total)` as it goes.
pub fn load_with_progress(
    path: &Path,
    mut progress: impl FnMut(u64, u64),
) -> Result<Trace, ReadError> {
    let data = std::fs::read(path).map_err(|e| ReadError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    let total = data.len() as u64;
    progress(0, total);
    let t = from_bytes_with_progress(path, &data, |d| progress(d, total))?;
    progress(total, total);
    Ok(t)
}
