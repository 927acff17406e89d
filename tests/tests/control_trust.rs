//! `gputrace attach` proves who answers before it believes a reply: a control socket
//! (or its directory) that is not the process user's own and private, a socket served
//! by another process, and a reply naming a file outside the trace directory are each
//! refused with their reason and their own exit status.

use gputrace_analyzer::commands::attach::{
    REPLY_OUTSIDE_EXIT, UNTRUSTED_SOCKET_EXIT, WRONG_PEER_EXIT,
};
use gputrace_format::protocol::{self, SocketKey};
use gputrace_tests::{gputrace_bin, TempDir};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A process killed and reaped on drop.
struct Target(Child);

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `sleep` whose runtime directory is `xdg`: where attach looks for its socket. Returned
/// once it runs `sleep`: until the child has exec'd, its /proc environment is still this
/// test's, and attach would look elsewhere (seen on a loaded machine).
fn sleeper(xdg: &Path) -> Target {
    let t = Target(
        Command::new("sleep")
            .arg("30")
            .env(protocol::RUNTIME_DIR_VAR, xdg)
            .spawn()
            .expect("start sleep"),
    );
    let cmdline = format!("/proc/{}/cmdline", t.0.id());
    for _ in 0..2000 {
        if std::fs::read(&cmdline).is_ok_and(|c| c.starts_with(b"sleep\0")) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    t
}

/// The socket path attach will look at first for `pid` with runtime directory `xdg`.
fn socket_for(pid: u32, xdg: &Path) -> PathBuf {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let key = SocketKey::of(Path::new(&format!("/proc/{pid}")), pid);
    protocol::socket_path(&protocol::socket_dir(Some(xdg), uid), &key)
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A socket at `path`, in a directory of `dir_mode`, listening in this test process.
fn squat(path: &Path, dir_mode: u32) -> UnixListener {
    let dir = path.parent().unwrap();
    std::fs::create_dir_all(dir).unwrap();
    chmod(dir, dir_mode);
    let l = UnixListener::bind(path).unwrap();
    chmod(path, 0o600);
    l
}

fn attach(pid: u32) -> (Option<i32>, String) {
    let o = Command::new(gputrace_bin())
        .args(["attach", &pid.to_string(), "--no-load", "--duration", "1s"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn a_socket_directory_open_to_others_is_refused() {
    let t = TempDir::new("trust-mode");
    let xdg = t.path().join("xdg");
    let target = sleeper(&xdg);
    let sock = socket_for(target.0.id(), &xdg);
    let _l = squat(&sock, 0o777);
    let (code, err) = attach(target.0.id());
    assert_eq!(code, Some(UNTRUSTED_SOCKET_EXIT), "{err}");
    assert!(err.contains("open to other users"), "{err}");
}

#[test]
fn a_socket_directory_of_another_user_is_refused() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to give a directory to another user");
        return;
    }
    let t = TempDir::new("trust-owner");
    let xdg = t.path().join("xdg");
    let target = sleeper(&xdg);
    let sock = socket_for(target.0.id(), &xdg);
    let _l = squat(&sock, 0o700);
    for p in [sock.parent().unwrap(), sock.as_path()] {
        std::os::unix::fs::lchown(p, Some(65534), Some(65534)).unwrap();
    }
    let (code, err) = attach(target.0.id());
    assert_eq!(code, Some(UNTRUSTED_SOCKET_EXIT), "{err}");
    assert!(err.contains("belongs to uid 65534"), "{err}");
}

#[test]
fn a_socket_served_by_another_process_is_refused() {
    let t = TempDir::new("trust-peer");
    let xdg = t.path().join("xdg");
    let target = sleeper(&xdg);
    let sock = socket_for(target.0.id(), &xdg);
    // Private and ours, but this test process listens, not the target.
    let l = squat(&sock, 0o700);
    let server = std::thread::spawn(move || {
        // Whatever the client does, it must not get a reply it acts on.
        if let Ok((mut s, _)) = l.accept() {
            let _ = s.write_all(b"done /etc/shadow\n");
        }
    });
    let (code, err) = attach(target.0.id());
    assert_eq!(code, Some(WRONG_PEER_EXIT), "{err}");
    assert!(
        err.contains(&format!("pid {}", std::process::id())),
        "the refusal names who answered: {err}"
    );
    drop(server);
}

#[test]
fn a_reply_outside_the_trace_directory_is_refused() {
    let Some(py) = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
    else {
        eprintln!("skipped: no python3 to play a process that answers for itself");
        return;
    };
    let t = TempDir::new("trust-reply");
    let xdg = t.path().join("xdg");
    // The target serves its own socket (so SO_PEERCRED names it) and answers a window
    // with a file that is not its trace.
    let script = "import socket,sys\n\
        path=sys.stdin.readline().strip()\n\
        s=socket.socket(socket.AF_UNIX)\n\
        s.bind(path)\n\
        s.listen(1)\n\
        print('ready', flush=True)\n\
        c,_=s.accept()\n\
        c.recv(4096)\n\
        c.sendall(b'started /etc/shadow\\n')\n\
        c.recv(1)\n";
    let mut child = Command::new(py)
        .arg("-c")
        .arg(script)
        .env(protocol::RUNTIME_DIR_VAR, &xdg)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let sock = socket_for(pid, &xdg);
    std::fs::create_dir_all(sock.parent().unwrap()).unwrap();
    chmod(sock.parent().unwrap(), 0o700);
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{}", sock.display()).unwrap();
    let mut ready = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    let target = Target(child);
    assert_eq!(ready.trim(), "ready");
    chmod(&sock, 0o600);
    let (code, err) = attach(pid);
    assert_eq!(code, Some(REPLY_OUTSIDE_EXIT), "{err}");
    assert!(err.contains("/etc/shadow"), "{err}");
    drop(target);
}
