//! `gputrace run --hang-timeout` on the fake app stuck in a kernel (the fake runtime's
//! FAKE_CUDA_STUCK; the app then waits in cudaDeviceSynchronize forever): the hang report
//! comes on stderr while the app still runs, the app is left running, and after the test
//! ends it with SIGTERM (passed on by gputrace) the report says the same.

use gputrace_tests::*;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

const STUCK: &str = "_Z5stuckv";

#[test]
fn run_reports_the_stuck_kernel_while_the_app_still_runs() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let traces = w.dir.path().join("run-traces");
    let marker = w.dir.path().join("stuck");
    let (traces_s, marker_s) = (
        traces.to_string_lossy().into_owned(),
        marker.to_string_lossy().into_owned(),
    );
    let app = w.app.to_string_lossy().into_owned();
    // untraced(): gputrace itself runs without the library, and every GPUTRACE_* setting
    // of the harness is cleared: `run` sets the job's GPUTRACE_STALL_MS (half of 1 s).
    let mut running = w
        .program(
            gputrace_bin(),
            &[
                "run",
                "--hang-timeout",
                "1s",
                "-o",
                &traces_s,
                "--",
                &app,
                "hang",
                "20",
                "sync",
                &marker_s,
            ],
        )
        .untraced()
        .unset("GPUTRACE_DIR")
        .env("GPUTRACE_LIB", libgputrace().to_string_lossy())
        .env("FAKE_CUDA_STUCK", STUCK)
        .spawn();
    let stderr = running.child().stderr.take().unwrap();
    let mut stdout = running.child().stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let err_reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            all.push_str(&line);
            all.push('\n');
            let _ = tx.send(line);
        }
        all
    });
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    // Until the report's last line (a guard against a hung test, not a measure).
    let mut got: Vec<String> = Vec::new();
    while !got.iter().any(|l| l.contains("gputrace leaves it be")) {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(l) => got.push(l),
            Err(_) => panic!("no hang report; stderr so far:\n{}", got.join("\n")),
        }
    }
    let report = got.join("\n");
    let heading = got
        .iter()
        .find(|l| l.starts_with("gputrace: ======== HANG in pid "))
        .unwrap_or_else(|| panic!("no heading:\n{report}"));
    assert!(report.contains("kernel `stuck`"), "{report}");
    assert!(report.contains("it has not completed"), "{report}");
    assert!(report.contains("cudaDeviceSynchronize"), "{report}");
    assert!(report.contains("grid 7x1x1, block 128x1x1"), "{report}");
    // The app it names is the one still running: not ended, not a zombie.
    let pid: i32 = heading["gputrace: ======== HANG in pid ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(marker.exists(), "the app never reached its wait");
    // SAFETY: signal 0 only checks that the process exists.
    assert_eq!(unsafe { libc::kill(pid, 0) }, 0, "the app is gone");
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let state = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap();
    assert_ne!(state, "Z", "the app ended: {stat}");
    assert!(
        running.child().try_wait().unwrap().is_none(),
        "gputrace ended"
    );
    // Now end it through gputrace, which passes SIGTERM on.
    // SAFETY: a signal to the gputrace we started.
    unsafe { libc::kill(running.id() as i32, libc::SIGTERM) };
    let status = running.into_inner().wait().unwrap();
    let err = err_reader.join().unwrap();
    let out = out_reader.join().unwrap();
    if std::env::var_os("HANG_SHOW").is_some() {
        eprintln!("{err}\n{out}");
    }
    assert_eq!(
        status.code(),
        Some(128 + libc::SIGTERM),
        "{status:?}\n{err}"
    );
    assert!(status.signal().is_none());
    assert_eq!(
        err.matches("======== HANG").count(),
        1,
        "once per stall:\n{err}"
    );
    // The report afterwards: the hang leads, the end by SIGTERM named.
    let verdict = out
        .lines()
        .find(|l| l.starts_with("VERDICT: "))
        .unwrap_or_else(|| panic!("no report:\n{out}\n{err}"));
    assert!(verdict.starts_with("VERDICT: HANG: "), "{verdict}");
    assert!(verdict.contains("kernel `stuck`"), "{verdict}");
    assert!(verdict.contains("the job ended by SIGTERM"), "{verdict}");
}
