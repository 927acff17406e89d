//! Production mode's triggers: preloaded but dormant, traced for a window on request.
//!
//! In dormant mode nothing is recorded and no CUPTI activity is enabled: hooks cost one
//! relaxed atomic load. A window is opened by any of:
//! * `gputrace attach PID`: a command over a Unix socket this library creates at
//!   `$XDG_RUNTIME_DIR/gputrace/<pid>-<pidns>-<start>.sock` (else under
//!   `/tmp/gputrace-<uid>/`; `protocol::SocketKey`),
//!   mode 0600 in a 0700 directory; only the same uid (or root) may talk to it, checked
//!   with SO_PEERCRED;
//! * a signal, opt-in with `GPUTRACE_SIGNAL=SIGUSR1|SIGUSR2` (off by default so the
//!   program's own handlers stay untouched);
//! * a timer: `GPUTRACE_START_AFTER=30s` with `GPUTRACE_DURATION=10s`.
//!
//! Every trigger ends in the same window logic (`window::run_window`): enable CUPTI,
//! write a new, complete trace file, then flush, disable and finalize CUPTI so the job
//! returns to its dormant speed.
//!
//! The socket's place and its line protocol are `gputrace_format::protocol`'s
//! (`socket_dir`, `Request`, `Reply`), shared with `gputrace attach`.

use super::window;
use crate::base::ffi::entry;
use crate::base::opts::Opts;
use crate::base::worker::{Spec, Worker, POLICY};
use crate::base::{clock, log, state};
use gputrace_format::protocol::{self, settings, Reply, Request};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SIGNALLED: AtomicBool = AtomicBool::new(false);
/// The control thread of a dormant process.
static CONTROL: Worker = Worker::new();

extern "C" fn on_signal(_: libc::c_int) {
    entry!({ SIGNALLED.store(true, Ordering::Relaxed) })
}

fn signal_number(name: &str) -> Option<libc::c_int> {
    match name.trim().trim_start_matches("SIG") {
        "USR1" => Some(libc::SIGUSR1),
        "USR2" => Some(libc::SIGUSR2),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------
// The socket file. It is removed by its own process at exit and before an exec (the
// new image may be no dormant gputrace process), never by a forked child; a process
// killed outright leaves it behind, and the next dormant process of the user removes
// it (`remove_stale`).

/// The socket file this process listens on.
static SOCKET: Mutex<Option<PathBuf>> = Mutex::new(None);
/// The pid that bound it (a forked child inherits the statics, not the socket).
static OWNER: AtomicU32 = AtomicU32::new(0);
/// The listening descriptor (-1 when none), closed in a forked child.
static LISTEN_FD: AtomicI32 = AtomicI32::new(-1);
/// The file was removed for an exec that then failed: the control thread binds again.
static REBIND: AtomicBool = AtomicBool::new(false);
static UNLINKED_FOR_EXEC: AtomicBool = AtomicBool::new(false);

fn is_owner() -> bool {
    let owner = OWNER.load(Ordering::Acquire);
    owner != 0 && owner == std::process::id()
}

/// Removes this process's socket file (at exit).
pub fn remove_socket() {
    if !is_owner() {
        return;
    }
    if let Ok(mut g) = SOCKET.try_lock() {
        if let Some(p) = g.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Before the process replaces its image: the socket file goes (the listening socket
/// itself is close-on-exec). Not in a vfork child, which is another pid.
pub fn before_exec() {
    if !is_owner() {
        return;
    }
    if let Ok(g) = SOCKET.lock() {
        if let Some(p) = g.as_ref() {
            if std::fs::remove_file(p).is_ok() {
                UNLINKED_FOR_EXEC.store(true, Ordering::Release);
            }
        }
    }
}

/// The exec failed and the process runs on: its control thread makes the file again.
pub fn after_failed_exec() {
    if UNLINKED_FOR_EXEC.swap(false, Ordering::AcqRel) {
        REBIND.store(true, Ordering::Release);
    }
}

/// In a forked child: the parent's socket is not the child's. The inherited copy of the
/// listening descriptor is closed, so a child that outlives its parent does not keep a
/// dead process's socket answering.
pub fn forget_after_fork() {
    CONTROL.forget_after_fork();
    let fd = LISTEN_FD.swap(-1, Ordering::AcqRel);
    if fd >= 0 {
        // SAFETY: `fd` is the listening socket the parent's control thread owns; in the
        // child that thread does not exist and nothing else uses this descriptor.
        unsafe { libc::close(fd) };
    }
    REBIND.store(false, Ordering::Relaxed);
    UNLINKED_FOR_EXEC.store(false, Ordering::Relaxed);
    // Only try_lock: another parent thread may have held it at the fork.
    if let Ok(mut g) = SOCKET.try_lock() {
        *g = None;
    }
}

/// Is process `pid` alive (in our pid namespace)?
fn alive(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if p <= 0 {
        return true; // never a process of its own: leave it alone
    }
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    unsafe { libc::kill(p, 0) == 0 || *libc::__errno_location() == libc::EPERM }
}

/// This process's key in socket names (`protocol::SocketKey`).
fn own_key() -> protocol::SocketKey {
    protocol::SocketKey::of(Path::new("/proc/self"), std::process::id())
}

/// Removes the socket files of processes that died without removing their own: nothing
/// listens on the file, and its process, when it is of this pid namespace, is gone.
/// (A process of another pid namespace sharing this directory cannot be looked up by
/// its pid here; its socket still answers while it lives, and stays.)
fn remove_stale(dir: &Path, me: &protocol::SocketKey) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Some(key) = e.file_name().to_str().and_then(protocol::SocketKey::parse) else {
            continue;
        };
        if key == *me {
            continue;
        }
        let same_ns = key.pidns == me.pidns || key.pidns == 0;
        if same_ns && key.pid == me.pid {
            continue;
        }
        // A socket under its temporary name is between bind and rename, when a connect
        // may be refused though its process lives: only a dead process's one is stale.
        let half_made = e
            .file_name()
            .to_str()
            .is_some_and(|n| !n.ends_with(protocol::SOCKET_SUFFIX));
        if half_made && (!same_ns || alive(key.pid)) {
            continue;
        }
        if same_ns && alive(key.pid) {
            // Alive, unless the pid was reused by a process started later.
            let now = protocol::SocketKey::of(Path::new(&format!("/proc/{}", key.pid)), key.pid);
            if key.start == 0 || now.start == 0 || now.start == key.start {
                continue;
            }
        }
        let path = e.path();
        let refused = matches!(
            UnixStream::connect(&path),
            Err(err) if err.raw_os_error() == Some(libc::ECONNREFUSED)
        );
        if refused && std::fs::remove_file(&path).is_ok() {
            log::debug(&format!("removed {} (its process is gone)", path.display()));
        }
    }
}

/// The directory of this process's control socket (by its user and runtime directory).
pub fn own_socket_dir() -> PathBuf {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let xdg = crate::base::secure::path_var(protocol::RUNTIME_DIR_VAR);
    protocol::socket_dir(xdg.as_deref(), uid)
}

fn bind() -> Option<UnixListener> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    use std::os::unix::io::AsRawFd;
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let dir = own_socket_dir();
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
    let key = own_key();
    remove_stale(&dir, &key);
    let pid = std::process::id();
    let path = protocol::socket_path(&dir, &key);
    // Held until the file is in place and recorded, so an exec in between waits for it.
    let mut socket = SOCKET.lock().unwrap_or_else(|e| e.into_inner());
    // Bound and listening under a temporary name, then renamed: a client never finds the
    // path before the socket accepts connections.
    let tmp = protocol::socket_tmp_path(&dir, &key);
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
            *socket = Some(path);
            OWNER.store(pid, Ordering::Release);
            LISTEN_FD.store(l.as_raw_fd(), Ordering::Release);
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
pub fn start_dormant(o: &Opts) {
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
    let start_after = o.start_after;
    let duration = o.duration.unwrap_or(protocol::DEFAULT_WINDOW);
    // The socket is made on the control thread, off the program's cuInit.
    let spec = Spec::new(
        "gputrace-control",
        "internal error in the control thread; it stops here (the program runs on)",
    );
    if let Err(e) = CONTROL.start(&POLICY, spec, move || control_loop(start_after, duration)) {
        log::warn(&format!("cannot start the control thread: {e}"));
    }
}

fn control_loop(start_after: Option<Duration>, duration: Duration) {
    let born = Instant::now();
    let mut listener = bind();
    let mut timer_pending = start_after.is_some();
    loop {
        if state::get() == state::DISABLED || state::get() == state::STOPPED {
            LISTEN_FD.store(-1, Ordering::Release);
            return;
        }
        if REBIND.swap(false, Ordering::AcqRel) {
            LISTEN_FD.store(-1, Ordering::Release);
            drop(listener.take());
            listener = bind();
        }
        if timer_pending && born.elapsed() >= start_after.unwrap_or_default() {
            timer_pending = false;
            report(window::run_window(
                &format!("timer ({})", settings::START_AFTER),
                duration,
                None,
                None,
                |_| {},
            ));
        }
        if SIGNALLED.swap(false, Ordering::Relaxed) {
            report(window::run_window(
                &format!("signal ({})", settings::SIGNAL),
                duration,
                None,
                None,
                |_| {},
            ));
        }
        match listener.as_ref().map(|l| l.accept()) {
            Some(Ok((s, _))) => serve(s),
            _ => {
                CONTROL.wait_stop(Duration::from_millis(50));
            }
        }
    }
}

fn report(r: Result<PathBuf, super::trace::TraceError>) {
    match r {
        Ok(p) => log::warn(&format!("trace window written to {}", p.display())),
        Err(e) => log::warn(&format!("trace window failed: {e}")),
    }
}

fn serve(mut s: UnixStream) {
    let _ = s.set_nonblocking(false);
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    match protocol::peer_credentials(&s) {
        Some((_, uid)) if uid == me || uid == 0 => {}
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
                let now_ms = clock::now_ns() / 1_000_000;
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
            let done = window::run_window(
                "attach",
                req.duration,
                req.steps,
                req.dir.as_deref(),
                |path| reply(&mut s, Reply::Started(path.to_path_buf())),
            );
            // The window ran whether or not the client is still there.
            match done {
                Ok(p) => reply(&mut s, Reply::Done(p)),
                Err(e) => reply(&mut s, Reply::Error(e.to_string())),
            }
        }
        Err(e) => reply(&mut s, Reply::Error(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("gputrace-control-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn only_the_owner_removes_the_socket_file_at_exit_and_exec() {
        let dir = temp_dir("owner");
        let f = dir.join("1.sock");
        std::fs::write(&f, b"").unwrap();
        *SOCKET.lock().unwrap() = Some(f.clone());
        // A forked child: the statics say another pid bound it.
        OWNER.store(std::process::id() + 1, Ordering::Release);
        before_exec();
        remove_socket();
        assert!(f.exists(), "a child removed its parent's socket");
        OWNER.store(std::process::id(), Ordering::Release);
        before_exec();
        assert!(!f.exists(), "the file outlived the exec");
        // The exec failed: the control thread is asked to bind again, once.
        after_failed_exec();
        assert!(REBIND.swap(false, Ordering::AcqRel));
        after_failed_exec();
        assert!(!REBIND.load(Ordering::Acquire));
        std::fs::write(&f, b"").unwrap();
        remove_socket();
        assert!(!f.exists());
        assert!(SOCKET.lock().unwrap().is_none());
        OWNER.store(0, Ordering::Release);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn only_dead_processes_silent_sockets_are_swept() {
        let dir = temp_dir("stale");
        // pid_max is at most 2^22: these pids are never alive.
        let me = own_key();
        let dead = dir.join("999999901.sock");
        let dead_tmp = dir.join("999999902.sock.new");
        let answering = dir.join("999999903.sock");
        let live = dir.join("1.sock");
        let mine = protocol::socket_path(&dir, &me);
        let other = dir.join("notes.txt");
        // A live pid of this namespace whose socket names another start time: the pid
        // was reused, its socket's process is gone.
        let reused = protocol::socket_path(
            &dir,
            &protocol::SocketKey {
                pid: 1,
                start: 1,
                ..me
            },
        );
        // Pid 1 of another namespace: not looked up here, and silent: removed.
        let other_ns_dead = protocol::socket_path(
            &dir,
            &protocol::SocketKey {
                pid: 1,
                pidns: me.pidns + 1,
                start: 5,
            },
        );
        for f in [
            &dead,
            &dead_tmp,
            &live,
            &mine,
            &other,
            &reused,
            &other_ns_dead,
        ] {
            std::fs::write(f, b"").unwrap();
        }
        // A listening socket whose pid looks gone (another pid namespace): kept.
        let _l = UnixListener::bind(&answering).unwrap();
        remove_stale(&dir, &me);
        assert!(!dead.exists() && !dead_tmp.exists());
        assert!(!reused.exists() && !other_ns_dead.exists());
        for kept in [&answering, &live, &mine, &other] {
            assert!(kept.exists(), "{} was removed", kept.display());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
