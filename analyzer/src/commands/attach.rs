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
}

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
            _ => None,
        }
    }
}

/// The libgputrace.so this command would preload: `GPUTRACE_LIB`, else the one beside it.
fn own_library() -> Result<PathBuf, crate::commands::run::RunError> {
    crate::commands::run::find_library(
        std::env::var_os(protocol::settings::LIB)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from),
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

/// Where the process's control socket may be, most likely first.
pub fn candidate_sockets(pid: u32) -> Vec<PathBuf> {
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    let uid = uid_of(pid).unwrap_or(me);
    let mut v = Vec::new();
    if let Some(x) = xdg_of(pid) {
        v.push(protocol::socket_path(
            &protocol::socket_dir(Some(&x), uid),
            pid,
        ));
    }
    if let Some(x) = std::env::var_os(protocol::RUNTIME_DIR_VAR) {
        let dir = protocol::socket_dir(Some(Path::new(&x)), me);
        v.push(protocol::socket_path(&dir, pid));
    }
    for uid in [uid_of(pid), Some(me)].into_iter().flatten() {
        v.push(protocol::socket_path(&protocol::socket_dir(None, uid), pid));
    }
    v.dedup();
    v
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
    let sock = cands.iter().find(|p| p.exists()).ok_or_else(|| {
        why_no_socket(
            pid,
            cands
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        )
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
    let dir = dir.map(|d| std::fs::canonicalize(d).unwrap_or(d.to_path_buf()));
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
                if let Some(f) = started.take() {
                    f(&p);
                }
            }
            Some(Reply::Done(trace)) => return Ok(Window { trace }),
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
