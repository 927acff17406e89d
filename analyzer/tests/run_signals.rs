//! `gputrace run` and signals, exit codes and its trace directory, through the binary.
//!
//! No GPU is needed: the "preload library" is this system's libc (a real shared library
//! that changes nothing when preloaded) and the commands are small shell scripts. A
//! terminal's Ctrl-C is a real one: gputrace runs in a new session whose controlling
//! terminal is a pseudo-terminal, and the test types ^C into it. Every step waits for
//! something the other side wrote (a "ready" line, the terminal's echo of ^C), never for
//! time to pass.

use std::ffi::CStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;

/// A fresh directory under the system's temporary directory, removed on drop.
struct Tmp(PathBuf);

impl Tmp {
    fn new(name: &str) -> Tmp {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "gputrace-runsig-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Tmp(d)
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The file this process's libc was loaded from.
fn libc_path() -> PathBuf {
    // SAFETY: dladdr only reads the loader's tables; info is an out-parameter.
    let name = unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        let found = libc::dladdr(libc::getpid as *const libc::c_void, &mut info);
        assert!(
            found != 0 && !info.dli_fname.is_null(),
            "dladdr found no libc"
        );
        CStr::from_ptr(info.dli_fname)
            .to_string_lossy()
            .into_owned()
    };
    std::fs::canonicalize(&name).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// Starts `c` with the signals these tests send at their default action, whatever the
/// test harness inherited (a CI job run in the background or under nohup starts with
/// SIGINT, SIGQUIT or SIGHUP ignored, and gputrace rightly passes that on).
fn default_signals(c: &mut Command) {
    // SAFETY: only async-signal-safe calls (signal) between fork and exec.
    unsafe {
        c.pre_exec(|| {
            for s in [
                libc::SIGINT,
                libc::SIGQUIT,
                libc::SIGHUP,
                libc::SIGTERM,
                libc::SIGUSR1,
                libc::SIGUSR2,
            ] {
                libc::signal(s, libc::SIG_DFL);
            }
            Ok(())
        });
    }
}

/// `gputrace run -o OUT -- sh -c SCRIPT`, with a good library and pipes on all three fds.
fn gputrace_sh(out: &Path, script: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gputrace"));
    c.args(["run", "-o"])
        .arg(out)
        .args(["--", "sh", "-c", script])
        .env("GPUTRACE_LIB", libc_path())
        .env_remove("LD_PRELOAD")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// A running gputrace whose stdout lines arrive on a channel while it runs.
struct Running {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    stdout: JoinHandle<String>,
    stderr: JoinHandle<String>,
}

struct Ended {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Running {
    fn start(mut c: Command) -> Running {
        default_signals(&mut c);
        let mut child = c.spawn().expect("start gputrace");
        let stdin = child.stdin.take();
        let out = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        let stdout = std::thread::spawn(move || {
            let mut all = String::new();
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                all.push_str(&l);
                all.push('\n');
                let _ = tx.send(l);
            }
            all
        });
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        Running {
            child,
            stdin,
            lines,
            stdout,
            stderr,
        }
    }

    /// Waits for the command to print `line` (it prints it once it is set up).
    fn wait_for(&self, line: &str) {
        loop {
            match self.lines.recv() {
                Ok(l) if l == line => return,
                Ok(_) => {}
                Err(_) => panic!("stdout ended before {line:?}"),
            }
        }
    }

    fn pid(&self) -> libc::pid_t {
        self.child.id() as libc::pid_t
    }

    /// Closes the command's stdin (a `cat` still waiting on it ends), then waits. Only
    /// once what should end the command has surely reached it.
    fn end(mut self) -> Ended {
        drop(self.stdin.take());
        self.wait()
    }

    /// Waits for gputrace with the command's stdin still open, so the command can only
    /// end by what was sent to gputrace (a gputrace that failed to forward it would leave
    /// this waiting; one that died at once is seen here).
    fn wait(mut self) -> Ended {
        let status = self.child.wait().unwrap();
        drop(self.stdin.take());
        Ended {
            status,
            stdout: self.stdout.join().unwrap(),
            stderr: self.stderr.join().unwrap(),
        }
    }
}

fn kill(pid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill({pid}, {sig})");
}

const NO_TRACE: &str = "wrote no trace";

/// A pseudo-terminal: the master side stays here, the slave becomes gputrace's
/// controlling terminal. The slave stays open here too: with no slave open, reading the
/// master fails (EIO).
struct Pty {
    master: std::fs::File,
    slave: OwnedFd,
}

impl Pty {
    fn open() -> Pty {
        // SAFETY: the standard sequence to open a pseudo-terminal pair; each fd is owned
        // from here on; ptsname_r writes into a buffer of the given size.
        unsafe {
            let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
            assert!(m >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
            let master = std::fs::File::from(OwnedFd::from_raw_fd(m));
            assert_eq!(libc::grantpt(m), 0);
            assert_eq!(libc::unlockpt(m), 0);
            let mut buf = [0 as libc::c_char; 128];
            assert_eq!(libc::ptsname_r(m, buf.as_mut_ptr(), buf.len()), 0);
            let s = libc::open(
                buf.as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            );
            assert!(s >= 0, "open slave: {}", std::io::Error::last_os_error());
            Pty {
                master,
                slave: OwnedFd::from_raw_fd(s),
            }
        }
    }

    /// Makes `c` start in a new session with this terminal as its controlling terminal,
    /// its process group in the terminal's foreground (what a shell does for a job).
    fn control(&self, c: &mut Command) {
        let slave = self.slave.as_raw_fd();
        // SAFETY: only async-signal-safe calls between fork and exec; the slave fd is
        // open in this process until the Pty is dropped, after the child has started.
        unsafe {
            c.pre_exec(move || {
                if libc::setsid() < 0 || libc::ioctl(slave, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }

    /// Types Ctrl-C and waits for the terminal's echo of it, which it writes after it has
    /// sent SIGINT to the foreground process group.
    fn ctrl_c(&mut self) {
        self.master.write_all(b"\x03").unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 64];
        while !seen.windows(2).any(|w| w == b"^C") {
            let n = self.master.read(&mut buf).unwrap();
            assert!(n > 0, "the terminal closed before echoing ^C");
            seen.extend_from_slice(&buf[..n]);
        }
    }
}

/// SigIgn and SigBlk of the process that printed `/proc/self/status` lines into `text`.
fn masks(text: &str) -> (u64, u64) {
    let field = |name: &str| {
        let l = text
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in:\n{text}"));
        u64::from_str_radix(l.trim(), 16).unwrap()
    };
    (field("SigIgn:"), field("SigBlk:"))
}

fn bit(sig: libc::c_int) -> u64 {
    1 << (sig - 1)
}

const RELAYED: [libc::c_int; 6] = [
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

#[test]
fn the_command_starts_with_default_signal_handling() {
    let t = Tmp::new("dispositions");
    let o = Running::start(gputrace_sh(
        &t.0,
        "exec grep -E '^Sig(Ign|Blk):' /proc/self/status",
    ))
    .end();
    assert_eq!(o.status.code(), Some(0), "{}", o.stderr);
    let (ign, blk) = masks(&o.stdout);
    for s in RELAYED {
        assert_eq!(
            ign & bit(s),
            0,
            "signal {s} ignored in the command: {ign:x}"
        );
    }
    assert_eq!(blk, 0, "signals blocked in the command");
}

#[test]
fn signals_ignored_when_gputrace_starts_stay_ignored_in_the_command() {
    // As `nohup` or `&` in a script leave them: the bare command would inherit that.
    let t = Tmp::new("nohup");
    let mut c = Command::new("sh");
    c.args(["-c", "trap '' INT HUP; exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_gputrace"))
        .args(["run", "-o"])
        .arg(&t.0)
        .args(["--", "grep", "-E", "^Sig(Ign|Blk):", "/proc/self/status"])
        .env("GPUTRACE_LIB", libc_path())
        .env_remove("LD_PRELOAD")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let o = Running::start(c).end();
    assert_eq!(o.status.code(), Some(0), "{}", o.stderr);
    let (ign, _) = masks(&o.stdout);
    assert_ne!(ign & bit(libc::SIGINT), 0, "{ign:x}");
    assert_ne!(ign & bit(libc::SIGHUP), 0, "{ign:x}");
    assert_eq!(ign & bit(libc::SIGTERM), 0, "{ign:x}");
}

#[test]
fn ctrl_c_in_the_terminal_ends_the_command_then_gputrace_reports_and_ends_by_sigint() {
    let t = Tmp::new("ctrl-c");
    let mut pty = Pty::open();
    let mut c = gputrace_sh(&t.0.join("traces"), "echo ready; exec cat");
    pty.control(&mut c);
    let r = Running::start(c);
    r.wait_for("ready");
    pty.ctrl_c();
    // Were the command not in the terminal's foreground group, or SIGINT ignored in it,
    // `cat` would now see the end of its input and exit 0.
    let o = r.end();
    assert!(o.stderr.contains(NO_TRACE), "{}", o.stderr);
    // Like a shell: the command died of SIGINT and gputrace got it too, so it ends by it
    // (a calling shell's $? is 130), after its message.
    assert_eq!(o.status.signal(), Some(libc::SIGINT), "{:?}", o.status);
    assert!(
        !t.0.join("traces").exists(),
        "an empty trace directory stayed"
    );
}

#[test]
fn ctrl_c_runs_the_commands_own_handler_and_its_exit_code_is_kept() {
    let t = Tmp::new("trap");
    let mut pty = Pty::open();
    let mut c = gputrace_sh(
        &t.0,
        "trap 'echo trapped; exit 5' INT; echo ready; cat; echo cat ended",
    );
    pty.control(&mut c);
    let r = Running::start(c);
    r.wait_for("ready");
    pty.ctrl_c();
    let o = r.end();
    assert!(o.stdout.contains("trapped"), "{}", o.stdout);
    assert!(!o.stdout.contains("cat ended"), "{}", o.stdout);
    assert_eq!(o.status.code(), Some(5), "{:?} {}", o.status, o.stderr);
    assert!(o.stderr.contains(NO_TRACE), "{}", o.stderr);
}

#[test]
fn signals_sent_to_gputrace_reach_the_command_and_give_128_plus_n() {
    for sig in [
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGUSR2,
    ] {
        let t = Tmp::new("forward");
        let r = Running::start(gputrace_sh(&t.0, "echo ready; exec cat"));
        r.wait_for("ready");
        kill(r.pid(), sig);
        let o = r.wait();
        assert_eq!(
            o.status.code(),
            Some(128 + sig),
            "signal {sig}: {:?}",
            o.status
        );
        assert!(o.stderr.contains(NO_TRACE), "signal {sig}: {}", o.stderr);
        // The signal is named, by name and number.
        let named = format!(
            "the command was killed by {} (signal {sig}) and wrote no trace",
            gputrace_format::signal_name(sig)
        );
        assert!(o.stderr.contains(&named), "signal {sig}: {}", o.stderr);
    }
}

#[test]
fn sigint_sent_by_a_process_reaches_the_command() {
    // To gputrace alone (it forwards), and to its whole process group (the command gets
    // it directly as well): either way the command ends by it and so does gputrace.
    for group in [false, true] {
        let t = Tmp::new("sigint");
        let mut c = gputrace_sh(&t.0, "echo ready; exec cat");
        c.process_group(0);
        let r = Running::start(c);
        r.wait_for("ready");
        kill(if group { -r.pid() } else { r.pid() }, libc::SIGINT);
        let o = r.wait();
        assert_eq!(
            o.status.signal(),
            Some(libc::SIGINT),
            "group {group}: {:?}",
            o.status
        );
        assert!(o.stderr.contains(NO_TRACE), "{}", o.stderr);
    }
}

#[test]
fn sigterm_lets_the_command_finish_its_trace_and_gputrace_reports_it() {
    let t = Tmp::new("report");
    let dir = t.0.join("traces");
    // The command's handler writes a trace and exits, as the library flushes at exit.
    let script = format!(
        "trap 'kill $!; cp \"{}\" \"$GPUTRACE_DIR/t.gtrace\"; exit 3' TERM; \
         exec 3<&0; cat <&3 >/dev/null & echo ready; wait",
        examples().join("healthy.gtrace").display()
    );
    let r = Running::start(gputrace_sh(&dir, &script));
    r.wait_for("ready");
    kill(r.pid(), libc::SIGTERM);
    let o = r.wait();
    assert_eq!(o.status.code(), Some(3), "{:?} {}", o.status, o.stderr);
    assert!(o.stdout.contains("VERDICT"), "no report:\n{}", o.stdout);
    assert!(!o.stderr.contains(NO_TRACE), "{}", o.stderr);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");
}

#[test]
fn exit_codes_are_a_shells() {
    use std::os::unix::fs::PermissionsExt;
    let t = Tmp::new("codes");
    let run = |cmd: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_gputrace"));
        c.args(["run", "-o"])
            .arg(t.0.join("traces"))
            .arg("--")
            .args(cmd)
            .env("GPUTRACE_LIB", libc_path())
            .env_remove("LD_PRELOAD")
            .stdin(Stdio::null());
        default_signals(&mut c);
        let o = c.output().unwrap();
        (
            o.status,
            String::from_utf8_lossy(&o.stderr).into_owned(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    let (st, err, _) = run(&["sh", "-c", "exit 7"]);
    assert_eq!(st.code(), Some(7), "{err}");
    let (st, err, _) = run(&["sh", "-c", "kill -KILL $$"]);
    assert_eq!(st.code(), Some(137), "{err}");
    // gputrace did not get the signal itself: an exit code, not a death by SIGINT.
    let (st, err, _) = run(&["sh", "-c", "kill -INT $$"]);
    assert_eq!(st.code(), Some(130), "{err}");

    let (st, err, _) = run(&["gputrace-no-such-command"]);
    assert_eq!(st.code(), Some(127));
    assert_eq!(
        err,
        "gputrace: gputrace-no-such-command: command not found\n"
    );
    let missing = t.0.join("missing");
    let (st, err, _) = run(&[missing.to_str().unwrap()]);
    assert_eq!(st.code(), Some(127), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let script = t.0.join("script");
    std::fs::write(&script, "#!/nonexistent/interpreter\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (st, err, _) = run(&[script.to_str().unwrap()]);
    assert_eq!(st.code(), Some(127), "{err}");
    assert!(err.contains("interpreter"), "{err}");
    let plain = t.0.join("plain");
    std::fs::write(&plain, "echo hi\n").unwrap();
    let (st, err, _) = run(&[plain.to_str().unwrap()]);
    assert_eq!(st.code(), Some(126), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        !t.0.join("traces").exists(),
        "an empty trace directory stayed"
    );
}

#[test]
fn a_bad_gputrace_lib_is_one_line_and_exit_125_without_running_anything() {
    let t = Tmp::new("badlib");
    let text = t.0.join("text.so");
    std::fs::write(&text, "hello\n").unwrap();
    let marker = t.0.join("ran");
    for lib in [t.0.join("nope.so"), text, PathBuf::from("/")] {
        let o = Command::new(env!("CARGO_BIN_EXE_gputrace"))
            .args(["run", "-o"])
            .arg(t.0.join("traces"))
            .arg("--")
            .arg("touch")
            .arg(&marker)
            .env("GPUTRACE_LIB", &lib)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(125), "{lib:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{lib:?}: {err}");
        assert!(
            err.starts_with(&format!("gputrace: GPUTRACE_LIB={}: ", lib.display())),
            "{err}"
        );
        assert!(
            !marker.exists(),
            "the command ran with GPUTRACE_LIB={lib:?}"
        );
        assert!(!t.0.join("traces").exists());
    }
}
