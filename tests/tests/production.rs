//! Production mode: a dormant process records nothing until `gputrace attach` opens a
//! window; each window is its own complete trace; strangers are refused.

use gputrace_analyzer::commands::attach;
use gputrace_format::{protocol, CollectorState, Event};
use gputrace_tests::*;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// Waits until the dormant process has created its control socket.
fn socket_of(pid: u32) -> PathBuf {
    poll(Duration::from_secs(20), || {
        attach::candidate_sockets(pid)
            .into_iter()
            .find(|p| p.exists())
    })
    .unwrap_or_else(|| {
        let dirs: std::collections::BTreeSet<_> = attach::candidate_sockets(pid)
            .iter()
            .filter_map(|p| p.parent().map(|d| d.to_path_buf()))
            .collect();
        let listing: Vec<String> = dirs
            .iter()
            .map(|d| {
                let names: Vec<String> = std::fs::read_dir(d)
                    .map(|rd| {
                        rd.flatten()
                            .map(|e| e.file_name().to_string_lossy().into_owned())
                            .collect()
                    })
                    .unwrap_or_default();
                format!("{}: {names:?}", d.display())
            })
            .collect();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let status: Vec<&str> = status
            .lines()
            .filter(|l| l.starts_with("State:") || l.starts_with("NSpid:"))
            .collect();
        panic!(
            "pid {pid} never created its control socket; looked for {:?}; found {listing:?}; {status:?}",
            attach::candidate_sockets(pid)
        )
    })
}

/// Starts the app spinning for `secs` seconds in dormant mode and waits for its control
/// socket: (the process, its pid, the socket).
fn start_dormant(w: &Wheel, secs: &str) -> (Running, u32, PathBuf) {
    let run = w
        .app(&["spin", secs])
        .env("GPUTRACE_MODE", "dormant")
        .spawn();
    let pid = run.id();
    let sock = socket_of(pid);
    (run, pid, sock)
}

/// (window start, window end) from the trace's state events.
fn window_bounds(t: &Trace) -> (u64, u64) {
    let mut start = None;
    let mut end = None;
    for e in t.events() {
        if let Event::State { ts, state, .. } = e {
            match CollectorState::from_u8(*state) {
                Some(CollectorState::Tracing) if start.is_none() => start = Some(*ts),
                Some(CollectorState::Stopped) => end = Some(*ts),
                _ => {}
            }
        }
    }
    (
        start.expect("a Tracing state event"),
        end.expect("a Stopped state event"),
    )
}

fn send(pid: u32, line: &[u8]) -> String {
    let mut s = UnixStream::connect(socket_of(pid)).expect("connect");
    s.write_all(line).unwrap();
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[test]
fn dormant_process_writes_nothing_without_a_window() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let out = w
        .app(&["spin", "0.3"])
        .env("GPUTRACE_MODE", "dormant")
        .run();
    out.assert_ok();
    assert!(out.traces.is_empty(), "dormant run wrote {:?}", out.traces);
    assert!(out.gputrace_lines().is_empty(), "{}", out.stderr);
}

#[test]
fn attach_opens_windows_and_only_their_calls_are_traced() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let (run, pid, _) = start_dormant(&w, "30");
    assert_eq!(attach::status(pid).unwrap(), "dormant");
    let mut traces = Vec::new();
    for _ in 0..2 {
        let mut started = None;
        let win = attach::attach(pid, Duration::from_millis(300), None, None, None, |p| {
            started = Some(p.to_path_buf())
        })
        .expect("window");
        assert_eq!(started.as_ref(), Some(&win.trace));
        traces.push(win.trace);
        assert_eq!(attach::status(pid).unwrap(), "dormant");
    }
    let (_st, _o, _e) = run.kill();
    assert_ne!(traces[0], traces[1], "each window has its own file");
    assert_eq!(w.trace_files().len(), 2, "{:?}", w.trace_files());
    for p in &traces {
        let t = Trace::read(p);
        let (lo, hi) = window_bounds(&t);
        let ks = t.kernels();
        assert!(!ks.is_empty(), "no kernels in window {}", p.display());
        for k in ks {
            assert!(
                k.start >= lo && k.start <= hi,
                "kernel at {} outside the window [{lo}, {hi}]",
                k.start
            );
        }
        assert!(hi - lo >= 300_000_000, "window shorter than asked");
    }
}

#[test]
fn attach_samples_nvml_beside_the_window_it_opens() {
    use gputrace_analyzer::recording::nvml::{NvmlChoice, Settings};
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let (run, pid, _) = start_dormant(&w, "30");
    let nvml = Settings {
        nvml: NvmlChoice::Command(Some(fake_nvml().to_path_buf())),
        period: Duration::from_millis(100),
        gpm_period: Duration::from_millis(100),
    };
    let req = protocol::WindowReq {
        duration: Duration::from_millis(300),
        steps: None,
        at_ms: None,
        dir: None,
    };
    let (win, env_file) = attach::attach_sampled(
        pid,
        &req,
        &nvml,
        &|m: &str| panic!("unexpected warning: {m}"),
        |_| {},
    )
    .expect("window");
    drop(run);
    let env_file = env_file.expect("an environment file");
    assert_eq!(env_file.parent(), win.trace.parent());
    let set = gputrace_analyzer::model::load::load_set(
        &[win.trace.clone(), env_file],
        &Default::default(),
        &|_| {},
    )
    .expect("read the window with its samples");
    assert_eq!(set.len(), 1);
    assert!(
        !set[0].gpu_samples.is_empty(),
        "no samples given to the window"
    );
    assert_eq!(
        gputrace_analyzer::report::environment::fact(&set[0], gputrace_format::FACT_HOST, "nvml"),
        Some("ok")
    );
}

#[test]
fn bad_clients_do_no_harm() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let (run, pid, sock) = start_dormant(&w, "30");
    assert!(
        send(pid, b"rm -rf /\n").starts_with("error"),
        "garbage refused"
    );
    assert!(send(pid, b"window ms=banana\n").starts_with("error"));
    // A client that connects and leaves without a word.
    drop(UnixStream::connect(&sock).unwrap());
    // A client that leaves in the middle of a window: the window still completes.
    {
        let mut s = UnixStream::connect(&sock).unwrap();
        s.write_all(b"window ms=200\n").unwrap();
        let mut buf = [0u8; 8];
        let _ = s.read(&mut buf);
    }
    poll(Duration::from_secs(20), || {
        (attach::status(pid).ok()?.as_str() == "dormant").then_some(())
    })
    .expect("back to dormant");
    let win = attach::attach(pid, Duration::from_millis(100), None, None, None, |_| {}).unwrap();
    let t = Trace::read(&win.trace);
    assert!(!t.kernels().is_empty());
    drop(run);
    assert_eq!(w.trace_files().len(), 2);
}

#[test]
fn another_user_is_refused() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc_geteuid() } != 0 {
        eprintln!("skipped: needs root to run a client as another user");
        return;
    }
    let Some(py) = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
    else {
        eprintln!("skipped: no python3 to play the other user's client");
        return;
    };
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let (run, _pid, sock) = start_dormant(&w, "30");
    let script = format!(
        "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect({:?})\nexcept OSError as e:\n print('refused', e.errno); sys.exit(0)\ns.sendall(b'window ms=100\\n')\nprint(s.recv(100).decode().strip())",
        sock.display().to_string()
    );
    use std::os::unix::process::CommandExt;
    let out = std::process::Command::new(py)
        .arg("-c")
        .arg(script)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.starts_with("refused") || said.contains("permission denied"),
        "a client of another uid got: {said:?} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(run);
    assert!(w.trace_files().is_empty(), "the stranger opened a window");
}

#[test]
fn exiting_during_a_window_leaves_a_readable_trace() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let (run, pid, _) = start_dormant(&w, "1.5");
    // The process exits during the window: the client gets the trace path or sees the
    // connection close, whichever the exit allows; the trace must be whole either way.
    let _ = attach::attach(pid, Duration::from_secs(60), None, None, None, |_| {});
    let mut child = run.into_inner();
    assert!(child.wait().unwrap().success());
    let files = w.trace_files();
    assert_eq!(files.len(), 1, "{files:?}");
    let t = Trace::read(&files[0]);
    assert!(!t.kernels().is_empty());
    assert!(t.data.stats.warning().is_none(), "{:?}", t.data.stats);
}

#[test]
fn a_dormant_process_removes_its_socket_at_exit() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let (run, pid, sock) = start_dormant(&w, "0.5");
    assert_eq!(w.sockets(), vec![sock], "pid {pid}");
    let mut child = run.into_inner();
    assert!(child.wait().unwrap().success());
    assert_eq!(w.sockets(), Vec::<PathBuf>::new());
}

#[test]
fn a_killed_process_socket_is_removed_by_the_next_dormant_process() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let (run, _pid, stale) = start_dormant(&w, "30");
    let _ = run.kill();
    // SIGKILL runs no exit handler: the file stays behind, with nobody listening.
    assert_eq!(w.sockets(), vec![stale.clone()]);
    // The next process clears it before it makes its own.
    let (run, _pid, sock) = start_dormant(&w, "30");
    assert_eq!(w.sockets(), vec![sock], "{} still there", stale.display());
    drop(run);
}

#[test]
fn timer_opens_one_window() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let out = w
        .app(&["spin", "1.2"])
        .env("GPUTRACE_START_AFTER", "200ms")
        .env("GPUTRACE_DURATION", "300ms")
        .run();
    out.assert_ok();
    assert_eq!(out.traces.len(), 1, "{}", out.stderr);
    let t = out.only_trace();
    let (lo, hi) = window_bounds(&t);
    assert!(hi - lo >= 300_000_000);
    assert!(!t.kernels().is_empty());
}

/// `gputrace attach PID` on a process whose control socket is not there: (exit code,
/// stderr), once the process has the library mapped.
fn attach_without_socket(pid: u32) -> (Option<i32>, String) {
    poll(Duration::from_secs(20), || {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
        maps.contains("libgputrace").then_some(())
    })
    .unwrap_or_else(|| panic!("pid {pid} never mapped libgputrace.so"));
    let o = std::process::Command::new(gputrace_bin())
        .args(["attach", &pid.to_string()])
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn attach_says_why_a_process_with_the_library_has_no_socket() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    // Dormant, but no CUDA yet: the socket comes at cuInit.
    let run = w
        .program("sleep", &["30"])
        .env("GPUTRACE_MODE", "dormant")
        .spawn();
    let pid = run.id();
    let (code, err) = attach_without_socket(pid);
    drop(run);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "pid {pid} has libgputrace.so loaded but no control socket yet"
        )),
        "{err}"
    );
    assert!(
        err.contains("makes its socket when it initialises CUDA")
            && err.contains("retry once the program has done so"),
        "{err}"
    );
    // Traced from the start (no GPUTRACE_MODE): it never makes one.
    let run = w.program("sleep", &["30"]).spawn();
    let pid = run.id();
    let (code, err) = attach_without_socket(pid);
    drop(run);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "pid {pid} has libgputrace.so loaded but was not started dormant (GPUTRACE_MODE not set)"
        )),
        "{err}"
    );
    assert!(err.contains("gputrace run --dormant"), "{err}");
}

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

/// The process `unshare --fork` started (its only child), once it exists.
fn only_child(pid: u32) -> u32 {
    poll(Duration::from_secs(20), || {
        let c = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
        c.split_whitespace().next()?.parse().ok()
    })
    .unwrap_or_else(|| panic!("pid {pid} started no child"))
}

#[test]
fn pid_1_of_two_namespaces_sharing_a_directory_are_both_reachable() {
    let probe = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "true"])
        .output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: cannot make a pid namespace here (unshare --pid needs root or user namespaces)");
        return;
    }
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let app = w.app.display().to_string();
    // Two containers' pid 1, one socket directory and one trace directory between them.
    let runs: Vec<Running> = (0..2)
        .map(|_| {
            w.program(
                "unshare",
                &["--pid", "--fork", "--kill-child", &app, "spin", "30"],
            )
            .env("GPUTRACE_MODE", "dormant")
            .spawn()
        })
        .collect();
    let pids: Vec<u32> = runs.iter().map(|r| only_child(r.id())).collect();
    for &pid in &pids {
        let sock = socket_of(pid);
        let name = sock.file_name().unwrap().to_str().unwrap().to_string();
        let key = protocol::SocketKey::parse(&name).expect("a keyed socket name");
        assert_eq!(key.pid, 1, "{name}: the process is pid 1 in its namespace");
    }
    assert_eq!(w.sockets().len(), 2, "{:?}", w.sockets());
    let mut traces = Vec::new();
    for &pid in &pids {
        let win = attach::attach(pid, Duration::from_millis(300), None, None, None, |_| {})
            .unwrap_or_else(|e| panic!("attach to pid {pid}: {e}"));
        let t = Trace::read(&win.trace);
        assert_eq!(t.data.meta.pid, 1, "{}", win.trace.display());
        assert!(
            !t.kernels().is_empty(),
            "{}: no kernels",
            win.trace.display()
        );
        traces.push(win.trace);
    }
    assert_ne!(traces[0], traces[1], "two processes wrote one file");
    drop(runs);
}
