//! Errors of the commands that read traces, each said once: one line naming the file
//! and what is wrong with it, and where it helps a second line saying what to do.

use gputrace_format::ReadError;
use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: is a directory, not a trace file", .0.display())]
    IsDir(PathBuf),
    #[error("{}", read_message(.0))]
    Read(ReadError),
    /// The output could not be written (other than to a closed pipe, which is not an
    /// error: `gputrace dump x | head`).
    #[error("cannot write the output: {}", io_message(.0))]
    Output(io::Error),
}

impl Error {
    /// What to do about it, when there is something to say.
    pub fn hint(&self) -> Option<String> {
        match self {
            Error::IsDir(p) => Some(format!(
                "give the trace files in it, e.g. {}",
                p.join("*.gtrace").display()
            )),
            Error::Read(ReadError::Io { source, .. })
                if source.kind() == io::ErrorKind::PermissionDenied =>
            {
                Some("traces are written readable by their owner only (0600)".into())
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

fn read_message(e: &ReadError) -> String {
    match e {
        ReadError::Io { path, source } => format!("{}: {}", path.display(), io_message(source)),
        // The reader's messages name the file once already.
        e => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_message_names_the_file_once_on_one_line() {
        let missing = Error::Read(ReadError::Io {
            path: "/x/run.gtrace".into(),
            source: io::Error::from(io::ErrorKind::NotFound),
        });
        assert_eq!(missing.to_string(), "/x/run.gtrace: no such file");
        assert!(missing.hint().is_none());
        let dir = Error::IsDir("traces".into());
        assert_eq!(dir.to_string(), "traces: is a directory, not a trace file");
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
