//! `gputrace attach PID`: asks a dormant process for a trace window over its control
//! socket (see the library's `control` module for the protocol).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("no gputrace control socket for pid {pid} (looked at: {looked}); was it started with GPUTRACE_MODE=dormant (or `gputrace run --dormant`) and has it initialised CUDA?")]
    NoSocket { pid: u32, looked: String },
    #[error("cannot talk to pid {0}: {1}")]
    Io(u32, std::io::Error),
    #[error("pid {0} refused: {1}")]
    Refused(u32, String),
    #[error("pid {0} closed the connection before the window ended (did it exit?)")]
    Closed(u32),
}

fn uid_of(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn xdg_of(pid: u32) -> Option<PathBuf> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|b| *b == 0).find_map(|kv| {
        let s = std::str::from_utf8(kv).ok()?;
        s.strip_prefix("XDG_RUNTIME_DIR=").map(PathBuf::from)
    })
}

/// Where the process's control socket may be, most likely first.
pub fn candidate_sockets(pid: u32) -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(x) = xdg_of(pid) {
        v.push(x.join("gputrace").join(format!("{pid}.sock")));
    }
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR") {
        v.push(Path::new(&x).join("gputrace").join(format!("{pid}.sock")));
    }
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    for uid in [uid_of(pid), Some(me)].into_iter().flatten() {
        v.push(PathBuf::from(format!("/tmp/gputrace-{uid}/{pid}.sock")));
    }
    v.dedup();
    v
}

fn connect(pid: u32) -> Result<UnixStream, AttachError> {
    let cands = candidate_sockets(pid);
    let sock = cands
        .iter()
        .find(|p| p.exists())
        .ok_or_else(|| AttachError::NoSocket {
            pid,
            looked: cands
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    UnixStream::connect(sock).map_err(|e| AttachError::Io(pid, e))
}

/// The outcome of a window.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    pub trace: PathBuf,
}

/// Opens a window of `duration` in process `pid` and waits for it to end. With `steps`,
/// the window ends once that many NVTX step ranges have begun in it and the next begins
/// (`duration` is then the longest it may last). `started` is called with the trace path
/// as soon as recording begins.
pub fn attach(
    pid: u32,
    duration: Duration,
    steps: Option<u64>,
    at_ms: Option<u64>,
    dir: Option<&Path>,
    started: impl FnOnce(&Path),
) -> Result<Window, AttachError> {
    let mut s = connect(pid)?;
    let mut cmd = format!("window ms={}", duration.as_millis().max(1));
    if let Some(n) = steps {
        cmd.push_str(&format!(" steps={n}"));
    }
    if let Some(at) = at_ms {
        cmd.push_str(&format!(" at={at}"));
    }
    if let Some(d) = dir {
        let d = std::fs::canonicalize(d).unwrap_or(d.to_path_buf());
        cmd.push_str(&format!(" dir={}", d.display()));
    }
    cmd.push('\n');
    s.write_all(cmd.as_bytes())
        .map_err(|e| AttachError::Io(pid, e))?;
    let mut r = BufReader::new(s);
    let mut started = Some(started);
    loop {
        let mut line = String::new();
        let n = r
            .read_line(&mut line)
            .map_err(|e| AttachError::Io(pid, e))?;
        if n == 0 {
            return Err(AttachError::Closed(pid));
        }
        let line = line.trim_end();
        if let Some(p) = line.strip_prefix("started ") {
            if let Some(f) = started.take() {
                f(Path::new(p));
            }
        } else if let Some(p) = line.strip_prefix("done ") {
            return Ok(Window {
                trace: PathBuf::from(p),
            });
        } else if let Some(e) = line.strip_prefix("error ") {
            return Err(AttachError::Refused(pid, e.to_string()));
        } else {
            return Err(AttachError::Refused(
                pid,
                format!("unexpected reply {line:?}"),
            ));
        }
    }
}

/// Asks the process for its collector state.
pub fn status(pid: u32) -> Result<String, AttachError> {
    let mut s = connect(pid)?;
    s.write_all(b"status\n")
        .map_err(|e| AttachError::Io(pid, e))?;
    let mut line = String::new();
    BufReader::new(s)
        .read_line(&mut line)
        .map_err(|e| AttachError::Io(pid, e))?;
    Ok(line.trim_end().to_string())
}
