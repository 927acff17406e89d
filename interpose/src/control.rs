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
//! The socket's place and its line protocol are `gputrace_format::protocol`'s
//! (`socket_dir`, `Request`, `Reply`), shared with `gputrace attach`.

use crate::{guard, lifecycle, log, state};
use gputrace_format::protocol::{self, settings, Reply, Request};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

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
    let xdg = std::env::var_os(protocol::RUNTIME_DIR_VAR).map(PathBuf::from);
    let dir = protocol::socket_dir(xdg.as_deref(), uid);
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
    let pid = std::process::id();
    let path = protocol::socket_path(&dir, pid);
    // Bound and listening under a temporary name, then renamed: a client never finds the
    // path before the socket accepts connections.
    let tmp = protocol::socket_tmp_path(&dir, pid);
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
                "{}={sig:?} is not SIGUSR1 or SIGUSR2; no signal trigger",
                settings::SIGNAL
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
                &format!("timer ({})", settings::START_AFTER),
                duration,
                None,
                None,
                |_| {},
            ));
        }
        if SIGNALLED.swap(false, Ordering::Relaxed) {
            report(lifecycle::run_window(
                &format!("signal ({})", settings::SIGNAL),
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
            let _ = s.write_all(Reply::Error("permission denied".into()).line().as_bytes());
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
        let mut limited = (&mut r).take(protocol::MAX_REQUEST_LINE);
        if limited.read_line(&mut line).is_err() || line.is_empty() {
            return;
        }
    }
    let reply = |s: &mut UnixStream, r: Reply| {
        // The client may have gone away: nothing else to do.
        let _ = s.write_all(r.line().as_bytes());
    };
    match Request::parse(&line) {
        Ok(Request::Status) => {
            let name = match state::get() {
                state::DORMANT => "dormant",
                state::TRACING => "tracing",
                state::BLIND => "blind",
                _ => "other",
            };
            reply(&mut s, Reply::State(name.into()));
        }
        Ok(Request::Window(req)) => {
            if let Some(at) = req.at_ms {
                let now_ms = crate::clock::now_ns() / 1_000_000;
                if at > now_ms {
                    let wait = Duration::from_millis(at - now_ms);
                    if wait > protocol::MAX_DURATION {
                        reply(
                            &mut s,
                            Reply::Error("start time more than a day ahead".into()),
                        );
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
                |path| reply(&mut s, Reply::Started(path.to_path_buf())),
            );
            // The window ran whether or not the client is still there.
            match done {
                Ok(p) => reply(&mut s, Reply::Done(p)),
                Err(e) => reply(&mut s, Reply::Error(e)),
            }
        }
        Err(e) => reply(&mut s, Reply::Error(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_names() {
        assert!(is_step_name(b"train step 12"));
        assert!(is_step_name(b"ProfilerStep#3"));
        assert!(!is_step_name(b"forward"));
        assert!(!is_step_name(b"ste"));
    }
}
