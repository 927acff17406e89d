//! Loading a trace while telling a callback how far it got (for a progress bar).

use crate::trace::Trace;
use gputrace_format::ReadError;
use std::path::Path;

/// Reads a trace file, calling `progress(bytes_done, bytes_total)` as it goes.
pub fn load_with_progress(
    path: &Path,
    mut progress: impl FnMut(u64, u64),
) -> Result<Trace, ReadError> {
    let t = Trace::load_with_progress(path, &mut progress)?;
    let total = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    progress(total, total);
    Ok(t)
}
