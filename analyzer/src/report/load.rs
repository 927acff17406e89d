//! Loading a trace while telling a callback how far it got (for a progress bar).

use crate::model::trace::Trace;
use gputrace_format::ReadError;
use std::path::Path;

/// Reads a trace file, calling `progress(bytes_done, bytes_total)` after each chunk and
/// at the end.
pub fn load_with_progress(path: &Path, progress: impl FnMut(u64, u64)) -> Result<Trace, ReadError> {
    Trace::load_with_progress(path, progress)
}
