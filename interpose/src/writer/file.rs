//! Creating a trace file.

use gputrace_format::protocol::TraceFileName;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// Creates `dir` (mode 0700) and a new trace file in it (mode 0600), named for `host`
/// and `pid` (`protocol::TraceFileName`; the next free one when the process has more).
pub fn create_trace_file(dir: &Path, host: &str, pid: u32) -> io::Result<(File, PathBuf)> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    for seq in 0..1000 {
        let name = TraceFileName {
            host: host.to_string(),
            pid,
            seq,
        };
        let path = dir.join(name.name());
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(&path)
        {
            Ok(f) => return Ok((f, path)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("too many trace files for this pid"))
}
