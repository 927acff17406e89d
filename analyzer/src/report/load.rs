//! Loading a trace chunk by chunk, telling a callback how far it got (for a progress
//! bar). Produces the same [`Trace`] as [`Trace::load`].

use crate::trace::Trace;
use gputrace_format::{self as fmt, ChunkKind, ChunkReader, Decoder, Event, ReadError};
use std::path::Path;

struct Events<'a, F: FnMut(u64)> {
    base: usize,
    r: ChunkReader<'a>,
    dec: Option<Decoder<'a>>,
    progress: F,
}

impl<F: FnMut(u64)> Events<'_, F> {
    fn finish_chunk(&mut self) {
        if let Some(d) = self.dec.take() {
            self.r.stats.unknown_events += d.skipped;
        }
    }
}

impl<F: FnMut(u64)> Iterator for Events<'_, F> {
    type Item = Event;
    fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(d) = self.dec.as_mut() {
                match d.next() {
                    Some(Ok(e)) => {
                        self.r.stats.events += 1;
                        return Some(e);
                    }
                    Some(Err(_)) => {
                        self.r.stats.bad_events += 1;
                        self.finish_chunk();
                    }
                    None => self.finish_chunk(),
                }
            }
            match self.r.next_chunk() {
                Some((ChunkKind::Events, payload, _)) => {
                    let at = (payload.as_ptr() as usize).saturating_sub(self.base) + payload.len();
                    (self.progress)(at as u64);
                    self.dec = Some(Decoder::new(payload));
                }
                Some(_) => continue,
                None => return None,
            }
        }
    }
}

/// Reads a trace held in memory, calling `progress(bytes_done)` after each chunk.
pub fn from_bytes_with_progress(
    path: &Path,
    data: &[u8],
    progress: impl FnMut(u64),
) -> Result<Trace, ReadError> {
    let r = fmt::open(path, data)?;
    let meta = r.meta.clone();
    let mut ev = Events {
        base: data.as_ptr() as usize,
        r,
        dec: None,
        progress,
    };
    let mut t = Trace::from_events(meta, ev.by_ref());
    t.path = path.to_path_buf();
    t.stats = ev.r.stats.clone();
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
