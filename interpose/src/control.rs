//! Production mode: preloaded but dormant, traced for a window on request.
//!
//! In dormant mode nothing is recorded and no CUPTI activity is enabled: hooks cost one
//! relaxed atomic load. A window is opened by any of:
//! * `gputrace attach PID`: a command over a Unix socket this library creates at
//!   `$XDG_RUNTIME_DIR/gputrace/<pid>.sock` (else `/tmp/gputrace-<uid>/<pid>.sock`),
//!   mode 0600 in a 0700 directory; only the same uid (or root) may talk to it, checked
//!   with SO_PEERCRED;
//! * a signal, opt-in with `GPUTRACE_SIGNAL=SIGUSR1|SIGUSR2` (off by default so the
//!   program's own handlers stay untouched);
//! * a timer: `GPUTRACE_START_AFTER=30s` with `GPUTRACE_DURATION=10s`.
//!
//! Every trigger ends in the same window logic (`lifecycle::run_window`): enable CUPTI,
//! write a new, complete trace file, then flush, disable and finalize CUPTI so the job
//! returns to its dormant speed.
//!
//! Protocol (one line each way, then the server may send a second line):
//! ```text
//! client: window ms=<duration> [steps=<n>] [at=<epoch ms>] [dir=<path to end of line>]
//! server: started <trace path>      ... the window runs ...     done <trace path>
//! client: status                    server: <state name>
//! ```
//! Errors come back as `error <text>`.

use crate::{guard, lifecycle, log, state};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Where a process's control socket lives.
pub fn socket_dir(xdg_runtime_dir: Option<&Path>, uid: u32) -> PathBuf {
    match xdg_runtime_dir {
        Some(d) if !d.as_os_str().is_empty() => d.join("gputrace"),
        _ => PathBuf::from(format!("/tmp/gputrace-{uid}")),
    }
}

pub fn socket_path(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("{pid}.sock"))
}

/// Parses `500ms`, `10s`, `2m` (a bare number is seconds).
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, mult) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60e3)
    } else {
        (s, 1e3)
    };
    let v: f64 = num.trim().parse().ok()?;
    (0.0..1e9)
        .contains(&v)
        .then(|| Duration::from_micros((v * mult * 1e3) as u64))
}

static STEPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Called by the NVTX hooks while tracing when a range named like a training step
/// begins (the same rule the report uses for NVTX steps: the text contains "step").
pub fn note_step() {
    STEPS.fetch_add(1, Ordering::Relaxed);
}

/// Step ranges begun while tracing, since the process started.
pub fn steps_seen() -> u64 {
    STEPS.load(Ordering::Relaxed)
}

/// Is an NVTX range text a training step's (contains "step", any case)?
pub fn is_step_name(text: &[u8]) -> bool {
    text.windows(4).any(|w| w.eq_ignore_ascii_case(b"step"))
}

/// A window request, as parsed from a command line.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowReq {
    /// Longest the window lasts (with `steps`, a cap).
    pub duration: Duration,
    /// End the window when this many NVTX step ranges have begun in it and the next begins.
    pub steps: Option<u64>,
    /// Wall-clock start (CLOCK_REALTIME ms since the epoch), so all ranks trace the same window.
    pub at_ms: Option<u64>,
    pub dir: Option<PathBuf>,
}

#[derive(Debug, PartialEq)]
pub enum Command {
    Window(WindowReq),
    Status,
}

pub fn parse_command(line: &str) -> Result<Command, String> {
    let line = line.trim_end_matches(['\r', '\n']);
    let (verb, rest) = line.split_once(' ').unwrap_or((line, ""));
    match verb {
        "status" => Ok(Command::Status),
        "window" => {
            let mut req = WindowReq {
                duration: Duration::from_secs(10),
                steps: None,
                at_ms: None,
                dir: None,
            };
            let mut rest = rest.trim_start();
            while !rest.is_empty() {
                if let Some(d) = rest.strip_prefix("dir=") {
                    if d.is_empty() {
                        return Err("empty dir".into());
                    }
                    req.dir = Some(PathBuf::from(d));
                    break;
                }
                let (tok, more) = rest.split_once(' ').unwrap_or((rest, ""));
                rest = more.trim_start();
                if let Some(v) = tok.strip_prefix("ms=") {
                    let ms: u64 = v.parse().map_err(|_| format!("bad duration {v:?}"))?;
                    if ms == 0 || ms > 24 * 3600 * 1000 {
                        return Err("duration must be between 1 ms and 24 h".into());
                    }
                    req.duration = Duration::from_millis(ms);
                } else if let Some(v) = tok.strip_prefix("steps=") {
                    let n: u64 = v.parse().map_err(|_| format!("bad step count {v:?}"))?;
                    if n == 0 {
                        return Err("steps must be at least 1".into());
                    }
                    req.steps = Some(n);
                } else if let Some(v) = tok.strip_prefix("at=") {
                    req.at_ms = Some(v.parse().map_err(|_| format!("bad start time {v:?}"))?);
                } else {
                    return Err(format!("unknown argument {tok:?}"));
                }
            }
            Ok(Command::Window(req))
        }
        "" => Err("empty command".into()),
        other => Err(format!("unknown command {other:?}")),
    }
}

static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    SIGNALLED.store(true, Ordering::Relaxed);
}

fn signal_number(name: &str) -> Option<libc::c_int> {
    match name.trim().trim_start_matches("SIG") {
        "USR1" => Some(libc::SIGUSR1),
        "USR2" => Some(libc::SIGUSR2),
        _ => None,
    }
}

/// The user id of the peer of a Unix socket.
fn peer_uid(s: &UnixStream) -> Option<u32> {
    use std::os::unix::io::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: u32::MAX,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    (r == 0).then_some(cred.uid)
}

static SOCKET: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

/// Removes the control socket (at exit).
pub fn remove_socket() {
    if let Ok(mut g) = SOCKET.try_lock() {
        if let Some(p) = g.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn bind() -> Option<UnixListener> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let xdg = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from);
    let dir = socket_dir(xdg.as_deref(), uid);
    if let Err(e) = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
    {
        log::warn(&format!(
            "cannot create {}: {e}; `gputrace attach` is unavailable",
            dir.display()
        ));
        return None;
    }
    // The directory must be ours and private: otherwise another user could stand in.
    match std::fs::metadata(&dir) {
        Ok(m) => {
            use std::os::unix::fs::MetadataExt;
            if m.uid() != uid || m.permissions().mode() & 0o077 != 0 {
                log::warn(&format!(
                    "{} is not a private directory of this user; `gputrace attach` is unavailable",
                    dir.display()
                ));
                return None;
            }
        }
        Err(_) => return None,
    }
    let path = socket_path(&dir, std::process::id());
    // Bound and listening under a temporary name, then renamed: a client never finds the
    // path before the socket accepts connections.
    let tmp = path.with_extension("sock.new");
    let _ = std::fs::remove_file(&tmp);
    let bound = UnixListener::bind(&tmp).and_then(|l| {
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
        std::fs::rename(&tmp, &path)?;
        Ok(l)
    });
    if bound.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    match bound {
        Ok(l) => {
            let _ = l.set_nonblocking(true);
            *SOCKET.lock().unwrap_or_else(|e| e.into_inner()) = Some(path);
            Some(l)
        }
        Err(e) => {
            log::warn(&format!(
                "cannot listen on {}: {e}; `gputrace attach` is unavailable",
                path.display()
            ));
            None
        }
    }
}

/// Starts the control thread of a dormant process.
pub fn start_dormant() {
    let o = lifecycle::opts();
    if let Some(sig) = &o.signal {
        match signal_number(sig) {
            Some(n) => {
                // SAFETY: installs a handler that only stores to an atomic.
                unsafe {
                    let mut sa: libc::sigaction = std::mem::zeroed();
                    sa.sa_sigaction = on_signal as *const () as usize;
                    sa.sa_flags = libc::SA_RESTART;
                    libc::sigemptyset(&mut sa.sa_mask);
                    libc::sigaction(n, &sa, std::ptr::null_mut());
                }
            }
            None => log::warn(&format!(
                "GPUTRACE_SIGNAL={sig:?} is not SIGUSR1 or SIGUSR2; no signal trigger"
            )),
        }
    }
    let listener = bind();
    let start_after = o.start_after;
    let duration = o.duration.unwrap_or(Duration::from_secs(10));
    let r = std::thread::Builder::new()
        .name("gputrace-control".into())
        .spawn(move || {
            guard::mark_thread_internal();
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                control_loop(listener, start_after, duration)
            }));
        });
    if let Err(e) = r {
        log::warn(&format!("cannot start the control thread: {e}"));
    }
}

fn control_loop(listener: Option<UnixListener>, start_after: Option<Duration>, duration: Duration) {
    let born = Instant::now();
    let mut timer_pending = start_after.is_some();
    loop {
        if state::get() == state::DISABLED || state::get() == state::STOPPED {
            return;
        }
        if timer_pending && born.elapsed() >= start_after.unwrap_or_default() {
            timer_pending = false;
            report(lifecycle::run_window(
                "timer (GPUTRACE_START_AFTER)",
                duration,
                None,
                None,
                |_| {},
            ));
        }
        if SIGNALLED.swap(false, Ordering::Relaxed) {
            report(lifecycle::run_window(
                "signal (GPUTRACE_SIGNAL)",
                duration,
                None,
                None,
                |_| {},
            ));
        }
        match listener.as_ref().map(|l| l.accept()) {
            Some(Ok((s, _))) => serve(s),
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn report(r: Result<PathBuf, String>) {
    match r {
        Ok(p) => log::warn(&format!("trace window written to {}", p.display())),
        Err(e) => log::warn(&format!("trace window failed: {e}")),
    }
}

fn serve(mut s: UnixStream) {
    let _ = s.set_nonblocking(false);
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    match peer_uid(&s) {
        Some(uid) if uid == me || uid == 0 => {}
        _ => {
            let _ = s.write_all(b"error permission denied\n");
            return;
        }
    }
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut line = String::new();
    {
        let mut r = BufReader::new(match s.try_clone() {
            Ok(c) => c,
            Err(_) => return,
        });
        let mut limited = (&mut r).take(4096);
        if limited.read_line(&mut line).is_err() || line.is_empty() {
            return;
        }
    }
    match parse_command(&line) {
        Ok(Command::Status) => {
            let name = match state::get() {
                state::DORMANT => "dormant",
                state::TRACING => "tracing",
                state::BLIND => "blind",
                _ => "other",
            };
            let _ = s.write_all(format!("{name}\n").as_bytes());
        }
        Ok(Command::Window(req)) => {
            if let Some(at) = req.at_ms {
                let now_ms = crate::clock::now_ns() / 1_000_000;
                if at > now_ms {
                    let wait = Duration::from_millis(at - now_ms);
                    if wait > Duration::from_secs(24 * 3600) {
                        let _ = s.write_all(b"error start time more than a day ahead\n");
                        return;
                    }
                    std::thread::sleep(wait);
                }
            }
            let done = lifecycle::run_window(
                "attach",
                req.duration,
                req.steps,
                req.dir.as_deref(),
                |path| {
                    let _ = s.write_all(format!("started {}\n", path.display()).as_bytes());
                },
            );
            let msg = match done {
                Ok(p) => format!("done {}\n", p.display()),
                Err(e) => format!("error {e}\n"),
            };
            // The client may have gone away: the window still ran; nothing else to do.
            let _ = s.write_all(msg.as_bytes());
        }
        Err(e) => {
            let _ = s.write_all(format!("error {e}\n").as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Some(Duration::from_secs(3)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("-1s"), None);
        assert_eq!(parse_duration("soon"), None);
    }

    #[test]
    fn commands() {
        assert_eq!(parse_command("status\n"), Ok(Command::Status));
        assert_eq!(
            parse_command("window ms=5000 at=1700000000000 dir=/tmp/my traces\n"),
            Ok(Command::Window(WindowReq {
                duration: Duration::from_millis(5000),
                steps: None,
                at_ms: Some(1_700_000_000_000),
                dir: Some(PathBuf::from("/tmp/my traces")),
            }))
        );
        match parse_command("window ms=60000 steps=20") {
            Ok(Command::Window(w)) => assert_eq!(w.steps, Some(20)),
            other => panic!("{other:?}"),
        }
        assert!(parse_command("window steps=0").is_err());
        assert!(parse_command("window ms=abc").is_err());
        assert!(parse_command("window ms=0").is_err());
        assert!(parse_command("window frob=1").is_err());
        assert!(parse_command("rm -rf /").is_err());
        assert!(parse_command("").is_err());
    }

    #[test]
    fn step_names() {
        assert!(is_step_name(b"train step 12"));
        assert!(is_step_name(b"ProfilerStep#3"));
        assert!(!is_step_name(b"forward"));
        assert!(!is_step_name(b"ste"));
    }

    #[test]
    fn socket_locations() {
        assert_eq!(
            socket_dir(Some(Path::new("/run/user/1000")), 1000),
            PathBuf::from("/run/user/1000/gputrace")
        );
        assert_eq!(socket_dir(None, 7), PathBuf::from("/tmp/gputrace-7"));
        assert_eq!(
            socket_path(Path::new("/tmp/gputrace-7"), 42),
            PathBuf::from("/tmp/gputrace-7/42.sock")
        );
    }
}
