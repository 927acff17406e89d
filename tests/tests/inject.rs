//! `gputrace attach` on a process started without libgputrace.so: the library is loaded
//! through ptrace, traces windows, stays dormant between them, and the program's output
//! and exit status are those of an untraced run.

use gputrace_analyzer::commands::attach;
use gputrace_tests::*;
use std::time::{Duration, Instant};

/// Whether the process maps a file named like `name`.
fn maps_contain(pid: u32, name: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map(|m| m.contains(name))
        .unwrap_or(false)
}

#[test]
fn attach_loads_the_library_into_a_process_started_without_it() {
    // The command loads the library beside it: built and fresh.
    let _ = libgputrace();
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let secs = "28";
    let base = w.app(&["waiters", secs]).untraced().run();
    base.assert_ok();
    assert!(
        base.stdout.contains(
            "waiters: SIGSEGV handler intact\nwaiters: blocked mask intact\nwaiters: 0 EINTR"
        ),
        "{}",
        base.stdout
    );

    let run = w.app(&["waiters", secs]).untraced().spawn();
    let started = Instant::now();
    let pid = run.id();
    // The fake runtime is loaded at the program's start; attach once it is.
    poll(Duration::from_secs(10), || {
        maps_contain(pid, "libcudart").then_some(())
    })
    .expect("the app loaded its CUDA runtime");
    assert!(!maps_contain(pid, "libgputrace"));

    // First window: through the command, which loads the library, and adds the window
    // to a dataset.
    let ds = std::env::temp_dir().join(format!("gputrace-inject-ds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&ds);
    let o = std::process::Command::new(gputrace_bin())
        .args([
            "attach",
            &pid.to_string(),
            "--duration",
            "300ms",
            "--no-report",
            "--dataset",
            ds.to_str().unwrap(),
            "--job",
            "inject",
        ])
        .env("XDG_RUNTIME_DIR", w.runtime_dir())
        .output()
        .expect("run gputrace attach");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!("loaded libgputrace.so into pid {pid}")),
        "{err}"
    );
    assert!(maps_contain(pid, "libgputrace"));
    assert!(
        err.contains("added 1 process of job inject to the dataset"),
        "{err}"
    );
    // The window is a partition of its own: kernels/job=inject/host=H/rank=R/window=W/.
    let kernels = ds.join("kernels").join("job=inject");
    let parts: Vec<String> = walk(&kernels)
        .into_iter()
        .map(|p| p.to_string_lossy().into_owned())
        .filter(|p| p.ends_with(".parquet"))
        .collect();
    assert_eq!(parts.len(), 1, "{parts:?}");
    assert!(parts[0].contains("/window="), "{}", parts[0]);
    let _ = std::fs::remove_dir_all(&ds);
    eprintln!("{}", err.lines().next().unwrap_or(""));
    let first = String::from_utf8_lossy(&o.stdout);
    let path = first.trim().strip_prefix("trace: ").expect("trace path");
    let t = Trace::read(std::path::Path::new(path));
    assert!(!t.kernels().is_empty(), "no kernels in the first window");
    let rep =
        gputrace_analyzer::analyze(&[
            gputrace_analyzer::Trace::load(std::path::Path::new(path)).expect("load")
        ]);
    let text = gputrace_analyzer::render_text(&rep);
    assert!(
        text.contains("loaded into the running program by `gputrace attach`"),
        "{text}"
    );

    // Then windows over the control socket, the library reused, until the program has
    // a few seconds left.
    let t0 = Instant::now();
    let mut counts = Vec::new();
    // Never past the program's end less a margin (a window it exits in is cut off):
    // the loading may take long on a loaded machine.
    let until = Duration::from_secs(secs.parse::<u64>().unwrap() - 6);
    while counts.len() < 200 && t0.elapsed() < Duration::from_secs(20) && started.elapsed() < until
    {
        let win = attach::attach(pid, Duration::from_millis(10), None, None, None, |_| {})
            .expect("window");
        let t = Trace::read(&win.trace);
        counts.push(t.kernels().len());
        let _ = std::fs::remove_file(&win.trace);
        assert_eq!(attach::status(pid).unwrap(), "dormant");
    }
    eprintln!(
        "{} windows after the load; kernels per window {:?}",
        counts.len(),
        counts
    );
    assert!(counts.len() >= 10, "only {} windows", counts.len());
    assert!(
        counts.iter().filter(|n| **n > 0).count() * 2 >= counts.len(),
        "{counts:?}"
    );

    // The program ends as it would have: same output, same status.
    let out = run.into_inner().wait_with_output().expect("wait");
    assert_eq!(out.status.code(), base.status.code());
    assert_eq!(String::from_utf8_lossy(&out.stdout), base.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(gputrace_lines(&err).is_empty(), "{err}");
}

/// Every file under `dir`, depth first.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
