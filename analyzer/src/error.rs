//! Errors of the commands that read traces, each said once: one line naming the file
//! and what is wrong with it, and where it helps a second line saying what to do.

use gputrace_format::ReadError;
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read trace {}: it is a directory", .0.display())]
    IsDir(PathBuf),
    /// A directory given for a set of traces held none.
    #[error("cannot read traces in {}: no trace files (*.gtrace) there", .0.display())]
    NoTraces(PathBuf),
    #[error("cannot read trace {}: {}", .path.display(), read_reason(.path, .error))]
    // Not a `source`: the message says all of it, a chain would repeat it.
    Read { path: PathBuf, error: ReadError },
    /// Only environment files were given (`gputrace run`'s NVML samples): nothing to
    /// report on without the process traces they belong to.
    #[error("{} is an environment file (NVML samples `gputrace run` took beside the job), not a process's trace: nothing to report on without the job's traces", .0.display())]
    EnvironmentOnly(PathBuf),
    /// The output could not be written (other than to a closed pipe, which is not an
    /// error: `gputrace dump x | head`).
    #[error("cannot write the output: {}", io_message(.0))]
    Output(io::Error),
    /// The output an export would write exists already (a file, or a directory with
    /// files in it): left as it is.
    #[error("{} exists already: not overwritten", .0.display())]
    OutputExists(PathBuf),
}

impl Error {
    /// What to do about it, when there is something to say.
    pub fn hint(&self) -> Option<String> {
        match self {
            Error::IsDir(p) => Some(format!(
                "give the trace files in it, e.g. {}",
                p.join("*.gtrace").display()
            )),
            Error::NoTraces(_) => Some(
                "`gputrace run -o DIR` and GPUTRACE_DIR write their traces there as *.gtrace".into(),
            ),
            Error::EnvironmentOnly(p) => Some(format!(
                "give it with the traces of the same run, e.g. {}; `gputrace dump` shows its samples",
                p.with_file_name("*.gtrace").display()
            )),
            Error::Read {
                error: ReadError::Io { source, .. },
                ..
            } if source.kind() == io::ErrorKind::PermissionDenied => {
                Some("traces are written readable by their owner only (0600)".into())
            }
            Error::OutputExists(_) => {
                Some("add --force to replace it, or name another output with -o".into())
            }
            _ => None,
        }
    }
}

/// An I/O error in a few words, without the "(os error N)" tail.
pub fn io_message(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "no such file".into(),
        io::ErrorKind::PermissionDenied => "permission denied".into(),
        io::ErrorKind::IsADirectory => "is a directory, not a trace file".into(),
        _ => {
            let s = e.to_string();
            match s.find(" (os error") {
                Some(i) => s[..i].to_string(),
                None => s,
            }
        }
    }
}

/// Exit status of a command that would have overwritten an existing output (an export
/// without `--force`): nothing was written.
pub const OUTPUT_EXISTS_EXIT: i32 = 7;

impl Error {
    /// The command's exit status for this error: [`OUTPUT_EXISTS_EXIT`], else 1.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::OutputExists(_) => OUTPUT_EXISTS_EXIT,
            _ => 1,
        }
    }

    /// A trace at `path` could not be read.
    pub fn read(path: &Path, source: ReadError) -> Error {
        Error::Read {
            path: path.to_path_buf(),
            error: source,
        }
    }
}

/// What is wrong with the file, without its name (the reader's messages start with it).
fn read_reason(path: &Path, e: &ReadError) -> String {
    if let ReadError::Io { source, .. } = e {
        return io_message(source);
    }
    let s = e.to_string();
    match s.strip_prefix(&format!("{}: ", path.display())) {
        Some(rest) => rest.to_string(),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_message_names_the_file_once_on_one_line() {
        let p = Path::new("/x/run.gtrace");
        let io = |kind| ReadError::Io {
            path: p.into(),
            source: io::Error::from(kind),
        };
        let missing = Error::read(p, io(io::ErrorKind::NotFound));
        assert_eq!(
            missing.to_string(),
            "cannot read trace /x/run.gtrace: no such file"
        );
        assert!(missing.hint().is_none());
        let denied = Error::read(p, io(io::ErrorKind::PermissionDenied));
        assert!(denied.hint().is_some());
        let junk = Error::read(
            p,
            ReadError::NotATrace(gputrace_format::NotATrace {
                path: p.into(),
                why: "not a gputrace trace (it does not start with a gputrace header)",
            }),
        );
        assert_eq!(
            junk.to_string(),
            "cannot read trace /x/run.gtrace: not a gputrace trace (it does not start with a gputrace header)"
        );
        let dir = Error::IsDir("traces".into());
        assert_eq!(
            dir.to_string(),
            "cannot read trace traces: it is a directory"
        );
        assert_eq!(
            dir.hint().as_deref(),
            Some("give the trace files in it, e.g. traces/*.gtrace")
        );
        let os = io::Error::from_raw_os_error(libc::ENOSPC);
        assert_eq!(
            Error::Output(os).to_string(),
            "cannot write the output: No space left on device"
        );
        for e in [missing, dir] {
            assert!(!e.to_string().contains('\n'));
        }
    }
}
