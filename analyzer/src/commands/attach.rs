//! `gputrace attach PID`: asks a dormant process for a trace window over its control
//! socket (where it is and what is said over it: `gputrace_format::protocol`).

use crate::recording::nvml as recorder;
use gputrace_format::protocol::{self, Reply, Request, WindowReq};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("no process with pid {0}")]
    NoProcess(u32),
    #[error("pid {0} does not have libgputrace.so loaded, and --no-load says not to load it")]
    NotPreloaded(u32),
    #[error("cannot tell whether pid {pid} has libgputrace.so loaded: cannot read /proc/{pid}/maps: {}", crate::error::io_message(.error))]
    CannotInspect { pid: u32, error: std::io::Error },
    #[error("pid {pid} has libgputrace.so loaded but was not started dormant ({setting}): it has no control socket (a process traced from its start writes its trace when it exits)")]
    NotDormant {
        pid: u32,
        /// The mode setting as the process has it (`GPUTRACE_MODE=trace`, `GPUTRACE_MODE
        /// not set`).
        setting: String,
    },
    #[error("pid {pid} has libgputrace.so loaded but no control socket yet (looked at: {looked})")]
    NoSocket { pid: u32, looked: String },
    #[error("cannot talk to pid {0}: {1}")]
    Io(u32, std::io::Error),
    #[error("pid {0} refused: {1}")]
    Refused(u32, String),
    #[error("pid {0} closed the connection before the window ended (did it exit?)")]
    Closed(u32),
    #[error("cannot load libgputrace.so into pid {pid}: {error}")]
    Load {
        pid: u32,
        error: crate::commands::inject::InjectError,
    },
    #[error("pid {pid}: libgputrace.so was loaded (thread {tid}) but made no control socket within {secs} s")]
    LoadedNoSocket { pid: u32, tid: u32, secs: u64 },
    #[error("refusing {} for pid {pid}: {why}", .path.display())]
    UntrustedSocket {
        pid: u32,
        path: PathBuf,
        why: String,
    },
    #[error("refusing {} for pid {pid}: the process listening on it is {peer}, not pid {pid}", .path.display())]
    WrongPeer {
        pid: u32,
        path: PathBuf,
        /// Who answered ("pid 123 (uid 1000)", or that it could not be told).
        peer: String,
    },
    #[error("refusing the reply of pid {pid}: it named {}, which is not a trace file in {}", .path.display(), .expected.display())]
    ReplyOutside {
        pid: u32,
        path: PathBuf,
        expected: PathBuf,
    },
}

/// Exit status of `gputrace attach` when the control socket or its directory is not
/// the target process user's own and private.
pub const UNTRUSTED_SOCKET_EXIT: i32 = 4;
/// ... when the process listening on the socket is not the one asked for.
pub const WRONG_PEER_EXIT: i32 = 5;
/// ... when a reply named a file outside the directory the trace was to go to.
pub const REPLY_OUTSIDE_EXIT: i32 = 6;

impl AttachError {
    /// What to do about it, when there is something to say.
    pub fn hint(&self) -> Option<String> {
        let start = || {
            let lib = own_library()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| "/path/to/libgputrace.so".into());
            format!(
                "start the program with `gputrace run --dormant -- CMD` or `LD_PRELOAD={lib} {}=dormant CMD`, then attach to it",
                protocol::settings::MODE
            )
        };
        match self {
            AttachError::NoProcess(_) => {
                Some("check the PID: `ps -ef` or `pgrep -f NAME` lists the running ones".into())
            }
            AttachError::NotPreloaded(_) => Some(start()),
            AttachError::Load { error, .. } => error.hint().or_else(|| Some(start())),
            AttachError::LoadedNoSocket { .. } => Some(
                "run again with GPUTRACE_DEBUG=1 in the job's environment to see the library's messages, or start the job with `gputrace run --dormant`".into(),
            ),
            AttachError::NotDormant { .. } => Some(start()),
            AttachError::CannotInspect { .. } => Some(
                "attach as the user the process runs as (its socket answers that user only)"
                    .into(),
            ),
            AttachError::NoSocket { .. } => Some(
                "a dormant process makes its socket when it initialises CUDA (its first CUDA call): retry once the program has done so".into(),
            ),
            AttachError::UntrustedSocket { .. } | AttachError::WrongPeer { .. } => Some(
                "another user may have made this file to stand in for the process: remove it (and its directory if that is not the process user's own), then restart the job or attach again".into(),
            ),
            _ => None,
        }
    }

    /// The exit status of `gputrace attach` for this error: a refusal for safety has
    /// its own, anything else is 1.
    pub fn exit_code(&self) -> i32 {
        match self {
            AttachError::UntrustedSocket { .. } => UNTRUSTED_SOCKET_EXIT,
            AttachError::WrongPeer { .. } => WRONG_PEER_EXIT,
            AttachError::ReplyOutside { .. } => REPLY_OUTSIDE_EXIT,
            _ => 1,
        }
    }
}

/// The libgputrace.so this command would preload: `GPUTRACE_LIB`, else the one beside it.
fn own_library() -> Result<PathBuf, crate::commands::run::RunError> {
    crate::commands::run::find_library(
        gputrace_format::settings::Values::from_env().0.lib,
        std::env::current_exe().ok(),
    )
}

/// Whether the process's memory maps name the preload library (an error: the maps could
/// not be read, as for another user's process).
fn has_library(pid: u32) -> Result<bool, std::io::Error> {
    let maps = std::fs::read(format!("/proc/{pid}/maps"))?;
    Ok(maps.split(|b| *b == b'\n').any(|line| {
        let path = line.rsplit(|b| *b == b' ').next().unwrap_or_default();
        let name = path.rsplit(|b| *b == b'/').next().unwrap_or_default();
        name.starts_with(b"libgputrace") && name.windows(3).any(|w| w == b".so")
    }))
}

/// The value of `var` in the process's environment as it started, where readable.
fn env_of(pid: u32, var: &str) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|b| *b == 0).find_map(|kv| {
        let s = std::str::from_utf8(kv).ok()?;
        let (k, v) = s.split_once('=')?;
        (k == var).then(|| v.to_string())
    })
}

/// Why there is no control socket for `pid`: no such process, no library in it, a
/// library tracing from the start, or a dormant one that has not made its socket yet.
fn why_no_socket(pid: u32, looked: String) -> AttachError {
    if !Path::new(&format!("/proc/{pid}")).exists() {
        return AttachError::NoProcess(pid);
    }
    match has_library(pid) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => AttachError::NoProcess(pid),
        Err(error) => AttachError::CannotInspect { pid, error },
        Ok(false) => AttachError::NotPreloaded(pid),
        Ok(true) => {
            use protocol::settings::{DURATION, MODE, START_AFTER};
            // The library is dormant (and makes a socket) with GPUTRACE_MODE=dormant,
            // or with a timer set; an environment that cannot be read says nothing.
            let readable = std::fs::read(format!("/proc/{pid}/environ")).is_ok();
            let mode = env_of(pid, MODE);
            let timer = env_of(pid, START_AFTER).is_some() || env_of(pid, DURATION).is_some();
            let dormant = mode
                .as_deref()
                .is_some_and(|m| m.trim().eq_ignore_ascii_case("dormant"));
            if readable && !dormant && !timer {
                let setting = match mode {
                    Some(m) => format!("{MODE}={m}"),
                    None => format!("{MODE} not set"),
                };
                AttachError::NotDormant { pid, setting }
            } else {
                AttachError::NoSocket { pid, looked }
            }
        }
    }
}

fn uid_of(pid: u32) -> Option<u32> {
    // The real uid: the first of the line's four.
    crate::commands::inject::status_field(pid, "Uid:")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn xdg_of(pid: u32) -> Option<PathBuf> {
    env_of(pid, protocol::RUNTIME_DIR_VAR).map(PathBuf::from)
}

/// The process `pid` as its control socket's name gives it: its pid in its own pid
/// namespace (the last of `/proc/PID/status`'s NSpid), that namespace and its start
/// time (`protocol::SocketKey`).
fn target_key(pid: u32) -> protocol::SocketKey {
    let own_pid = crate::commands::inject::status_field(pid, "NSpid:")
        .and_then(|l| l.split_whitespace().last()?.parse().ok())
        .unwrap_or(pid);
    protocol::SocketKey::of(Path::new(&format!("/proc/{pid}")), own_pid)
}

/// Whether `pid` sees another file system tree than this process (a container): its
/// paths are then reached through `/proc/PID/root`.
fn other_mount_ns(pid: u32) -> bool {
    let ns = |p: String| std::fs::read_link(p).ok();
    match (
        ns("/proc/self/ns/mnt".into()),
        ns(format!("/proc/{pid}/ns/mnt")),
    ) {
        (Some(a), Some(b)) => a != b,
        _ => false,
    }
}

/// Where the process's control socket may be, most likely first: its keyed name in
/// each directory it may use (its runtime directory, ours, `/tmp/gputrace-<uid>`),
/// through its root when it lives in another mount namespace, then the pid-only name
/// a library before the key used.
pub fn candidate_sockets(pid: u32) -> Vec<PathBuf> {
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    let uid = uid_of(pid).unwrap_or(me);
    let mut dirs = Vec::new();
    if let Some(x) = xdg_of(pid) {
        dirs.push(protocol::socket_dir(Some(&x), uid));
    }
    if let Some(x) = std::env::var_os(protocol::RUNTIME_DIR_VAR) {
        dirs.push(protocol::socket_dir(Some(Path::new(&x)), me));
    }
    for uid in [uid_of(pid), Some(me)].into_iter().flatten() {
        dirs.push(protocol::socket_dir(None, uid));
    }
    if other_mount_ns(pid) {
        let root = PathBuf::from(format!("/proc/{pid}/root"));
        let inside: Vec<PathBuf> = dirs
            .iter()
            .map(|d| root.join(d.strip_prefix("/").unwrap_or(d)))
            .collect();
        dirs.splice(0..0, inside);
    }
    let key = target_key(pid);
    let mut v: Vec<PathBuf> = dirs
        .iter()
        .map(|d| protocol::socket_path(d, &key))
        .chain(
            dirs.iter()
                .map(|d| protocol::legacy_socket_path(d, key.pid)),
        )
        .collect();
    let mut seen = std::collections::HashSet::new();
    v.retain(|p| seen.insert(p.clone()));
    v
}

/// The socket file at `sock` and its directory are the process user's (or root's)
/// and private: otherwise another user may have put them there to stand in for it.
fn check_socket_file(pid: u32, sock: &Path) -> Result<(), AttachError> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let owner = uid_of(pid).ok_or(AttachError::NoProcess(pid))?;
    let refuse = |why: String| AttachError::UntrustedSocket {
        pid,
        path: sock.to_path_buf(),
        why,
    };
    let trusted = |uid: u32| uid == owner || uid == 0;
    let dir = sock.parent().unwrap_or(Path::new("/"));
    let d = std::fs::symlink_metadata(dir).map_err(|e| AttachError::Io(pid, e))?;
    if !d.file_type().is_dir() {
        return Err(refuse(format!("{} is not a directory", dir.display())));
    }
    if !trusted(d.uid()) {
        return Err(refuse(format!(
            "its directory {} belongs to uid {}, not to the process's user (uid {owner}) or root",
            dir.display(),
            d.uid()
        )));
    }
    if d.mode() & 0o077 != 0 {
        return Err(refuse(format!(
            "its directory {} is open to other users (mode {:o})",
            dir.display(),
            d.mode() & 0o7777
        )));
    }
    let f = std::fs::symlink_metadata(sock).map_err(|e| AttachError::Io(pid, e))?;
    if !f.file_type().is_socket() {
        return Err(refuse("it is not a socket".into()));
    }
    if !trusted(f.uid()) {
        return Err(refuse(format!(
            "it belongs to uid {}, not to the process's user (uid {owner}) or root",
            f.uid()
        )));
    }
    if f.mode() & 0o077 != 0 {
        return Err(refuse(format!(
            "it is open to other users (mode {:o})",
            f.mode() & 0o7777
        )));
    }
    Ok(())
}

/// The process listening on `s` is `pid` (or a thread of it) and runs as its user.
fn check_peer(pid: u32, sock: &Path, s: &UnixStream) -> Result<(), AttachError> {
    let wrong = |peer: String| AttachError::WrongPeer {
        pid,
        path: sock.to_path_buf(),
        peer,
    };
    let Some((peer, peer_uid)) = protocol::peer_credentials(s) else {
        return Err(wrong("a process whose credentials cannot be read".into()));
    };
    let owner = uid_of(pid).ok_or(AttachError::NoProcess(pid))?;
    let same_process = u32::try_from(peer).is_ok_and(|p| {
        p == pid
            || crate::commands::inject::status_field(p, "Tgid:")
                .is_some_and(|t| t.trim() == pid.to_string())
    });
    if !same_process || peer_uid != owner {
        let who = if peer <= 0 {
            "a process outside this pid namespace".to_string()
        } else {
            format!("pid {peer} (uid {peer_uid})")
        };
        return Err(wrong(who));
    }
    Ok(())
}

/// Makes sure `pid` has the library and its control socket: a process started without
/// it gets it loaded now (`crate::commands::inject`) unless `allow` is false. Returns
/// what the load did, when there was one.
pub fn load_if_needed(
    pid: u32,
    allow: bool,
) -> Result<Option<crate::commands::inject::Injected>, AttachError> {
    use crate::commands::inject;
    let cands = candidate_sockets(pid);
    if cands.iter().any(|p| p.exists()) {
        return Ok(None);
    }
    match why_no_socket(pid, String::new()) {
        AttachError::NotPreloaded(_) if allow => {}
        AttachError::NoSocket { .. } => return Ok(None),
        e => return Err(e),
    }
    let lib = own_library().map_err(|e| AttachError::Load {
        pid,
        error: inject::InjectError::DlopenFailed {
            pid,
            why: e.to_string(),
        },
    })?;
    let done = inject::inject(pid, &lib).map_err(|error| AttachError::Load { pid, error })?;
    let limit = Duration::from_secs(5);
    let t0 = std::time::Instant::now();
    while t0.elapsed() < limit {
        if candidate_sockets(pid).iter().any(|p| p.exists()) {
            return Ok(Some(done));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(AttachError::LoadedNoSocket {
        pid,
        tid: done.tid,
        secs: limit.as_secs(),
    })
}

fn connect(pid: u32) -> Result<UnixStream, AttachError> {
    let cands = candidate_sockets(pid);
    let sock = cands
        .iter()
        .find(|p| p.symlink_metadata().is_ok())
        .ok_or_else(|| {
            why_no_socket(
                pid,
                cands
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            )
        })?;
    check_socket_file(pid, sock)?;
    let s = UnixStream::connect(sock).map_err(|e| AttachError::Io(pid, e))?;
    check_peer(pid, sock, &s)?;
    Ok(s)
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
    let dir = dir.map(|d| std::fs::canonicalize(d).unwrap_or(d.to_path_buf()));
    let expected = expected_trace_dir(pid, dir.as_deref());
    let req = Request::Window(WindowReq {
        duration,
        steps,
        at_ms,
        dir,
    });
    s.write_all(req.line().as_bytes())
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
        match Reply::parse(&line) {
            Some(Reply::Started(p)) => {
                check_trace_path(pid, expected.as_deref(), &p)?;
                if let Some(f) = started.take() {
                    f(&p);
                }
            }
            Some(Reply::Done(trace)) => {
                check_trace_path(pid, expected.as_deref(), &trace)?;
                return Ok(Window { trace });
            }
            Some(Reply::Error(e)) => return Err(AttachError::Refused(pid, e)),
            _ => {
                return Err(AttachError::Refused(
                    pid,
                    format!("unexpected reply {:?}", line.trim_end()),
                ))
            }
        }
    }
}

/// [`attach`], with NVML sampled from this process while the window is open (as `nvml`
/// says, see `crate::recording::nvml`) into an environment file beside the window's trace.
/// Returns the window and that file (`None` when sampling here is off); a file that
/// could not be made is said through `warn` and the window goes on without it.
pub fn attach_sampled(
    pid: u32,
    req: &WindowReq,
    nvml: &recorder::Settings,
    warn: &dyn Fn(&str),
    started: impl FnOnce(&Path),
) -> Result<(Window, Option<PathBuf>), AttachError> {
    attach_watched(pid, req, nvml, warn, Duration::ZERO, started)
}

/// [`attach_sampled`], with the window's trace watched for a hang while it is open
/// (`crate::commands::hangwatch`): once a stall shows no GPU progress for `hang_timeout`, its
/// report goes to stderr; the process is left as it is. Zero: no watching.
pub fn attach_watched(
    pid: u32,
    req: &WindowReq,
    nvml: &recorder::Settings,
    warn: &dyn Fn(&str),
    hang_timeout: Duration,
    started: impl FnOnce(&Path),
) -> Result<(Window, Option<PathBuf>), AttachError> {
    let mut recorder = None;
    let mut watcher = None;
    let (duration, steps, at_ms, dir) = (req.duration, req.steps, req.at_ms, req.dir.as_deref());
    let window = attach(pid, duration, steps, at_ms, dir, |trace| {
        let dir = trace_dir(pid, trace);
        if let Some(name) = trace.file_name() {
            watcher = crate::commands::hangwatch::Watcher::start(
                crate::commands::hangwatch::Watch::File(dir.join(name)),
                hang_timeout,
                crate::commands::run::say_hang,
            );
        }
        let job = recorder::Job {
            pid,
            cmdline: cmdline_of(pid),
            started_by: "gputrace attach",
        };
        match recorder::Recorder::start(&dir, job, nvml) {
            Ok(r) => recorder = r,
            Err(e) => warn(&format!(
                "no NVML samples: cannot write the environment file in {}: {e}",
                dir.display()
            )),
        }
        started(trace)
    });
    if let Some(w) = watcher {
        w.stop();
    }
    let env_file = recorder.map(|r| r.finish(recorder::LAST_TICK_WAIT));
    match window {
        Ok(w) => Ok((w, env_file)),
        Err(e) => {
            if let Some(p) = env_file {
                let _ = std::fs::remove_file(p);
            }
            Err(e)
        }
    }
}

/// `p` with `.` and `..` resolved by name (no link is followed: the path may be one the
/// process sees, inside another mount namespace).
fn lexical(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

/// Where the process will write the window's trace, as it sees paths: the directory
/// asked for, else its own `GPUTRACE_DIR` (or the default) under its working
/// directory. `None` when that cannot be read (then only the file's name is checked).
fn expected_trace_dir(pid: u32, asked: Option<&Path>) -> Option<PathBuf> {
    if let Some(d) = asked {
        return Some(lexical(d));
    }
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
    let dir = env_of(pid, protocol::settings::DIR)
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| protocol::DEFAULT_TRACE_DIR.to_string());
    Some(lexical(&cwd.join(dir)))
}

/// A path in a reply is a trace file (by its name) in the directory the trace was to
/// go to: a process, or something standing in for it, never makes this command read
/// or write elsewhere.
fn check_trace_path(pid: u32, expected: Option<&Path>, p: &Path) -> Result<(), AttachError> {
    let outside = || AttachError::ReplyOutside {
        pid,
        path: p.to_path_buf(),
        expected: expected.map(Path::to_path_buf).unwrap_or_default(),
    };
    let named_as_trace = p
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| !protocol::TraceFileName::parse(n).is_empty());
    if !named_as_trace {
        return Err(outside());
    }
    let Some(expected) = expected else {
        return Ok(());
    };
    let full = if p.is_absolute() {
        lexical(p)
    } else {
        match std::fs::read_link(format!("/proc/{pid}/cwd")) {
            Ok(cwd) => lexical(&cwd.join(p)),
            Err(_) => return Err(outside()),
        }
    };
    if full.parent() != Some(expected) {
        return Err(outside());
    }
    Ok(())
}

/// The directory of the trace the process named: a relative path is its own working
/// directory's.
fn trace_dir(pid: u32, trace: &Path) -> PathBuf {
    let dir = trace.parent().unwrap_or(Path::new(""));
    if dir.is_absolute() {
        return dir.to_path_buf();
    }
    std::fs::read_link(format!("/proc/{pid}/cwd"))
        .map(|cwd| cwd.join(dir))
        .unwrap_or_else(|_| dir.to_path_buf())
}

/// The process's command line, where this process may read it.
fn cmdline_of(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Asks the process for its collector state.
pub fn status(pid: u32) -> Result<String, AttachError> {
    let mut s = connect(pid)?;
    s.write_all(Request::Status.line().as_bytes())
        .map_err(|e| AttachError::Io(pid, e))?;
    let mut line = String::new();
    BufReader::new(s)
        .read_line(&mut line)
        .map_err(|e| AttachError::Io(pid, e))?;
    match Reply::parse(&line) {
        Some(Reply::Error(e)) => Err(AttachError::Refused(pid, e)),
        _ => Ok(line.trim_end().to_string()),
    }
}
