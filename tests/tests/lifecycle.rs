//! The process lifecycle under the preload: killed mid-run, forks, processes that never
//! use CUDA, tracing switched off, no CUPTI to be found, another tool's injection.

use gputrace_format::{self as fmt, CollectorState, Event};
use gputrace_tests::{have_program, poll, trace_files_in, Cuda, Layout, Trace, Wheel};
use std::time::Duration;

/// Sorted ids are exactly first..first+n.
fn assert_gapless(mut ids: Vec<u32>, first: u32, what: &str) {
    ids.sort();
    let want: Vec<u32> = (first..first + ids.len() as u32).collect();
    assert!(
        ids == want,
        "{what}: not a gapless run from {first}: {ids:?}"
    );
}

#[test]
fn sigkilled_process_leaves_a_readable_prefix() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let run = w.app(&["spin", "0"]).env("GPUTRACE_FLUSH_MS", "50");
    let child = run.spawn();
    // Wait (with a generous deadline, not a fixed sleep) until the writer has put
    // several event chunks with kernels in the file.
    let seen = poll(Duration::from_secs(120), || {
        let f = w.trace_files().into_iter().next()?;
        let d = fmt::read_all(&f).ok()?;
        let k = d
            .events
            .iter()
            .filter(|e| matches!(e, Event::Kernel(_)))
            .count();
        (d.stats.chunks >= 4 && k >= 200).then_some(k)
    });
    let (status, _out, err) = child.kill();
    let seen = seen.unwrap_or_else(|| panic!("the trace never grew; stderr:\n{err}"));
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "the app was killed"
    );

    let files = w.trace_files();
    assert_eq!(files.len(), 1, "{files:?}");
    let t = Trace::read(&files[0]);
    let s = &t.data.stats;
    assert_eq!(s.corrupt_at, None, "a kill leaves no corruption: {s:?}");
    assert_eq!(s.bad_events, 0, "{s:?}");
    let ks = t.kernels();
    assert!(
        ks.len() >= seen,
        "{} kernels now, {seen} before the kill",
        ks.len()
    );
    assert!(ks.iter().all(|k| t.str(k.name) == "_Z4spinv"));
    // spin calls nothing but cudaLaunchKernel, so launch n has correlation id n, and
    // what reached the file is every launch up to some point.
    assert_gapless(ks.iter().map(|k| k.corr).collect(), 1, "kernel corr ids");
    let apis = t.apis();
    assert!(!apis.is_empty());
    assert_gapless(apis.iter().map(|a| a.corr).collect(), 1, "API corr ids");
    assert!(
        !t.states().iter().any(|s| s.1 == CollectorState::Stopped),
        "a killed process cannot have written its Stopped state"
    );
    assert!(t.dropped().is_empty(), "{:?}", t.dropped());
}

#[test]
fn fork_child_without_cuda_writes_no_trace() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let base = w.app(&["fork"]).untraced().run();
    base.assert_ok();
    let out = w.app(&["fork"]).run();
    out.assert_ok();
    assert_eq!(out.stdout, base.stdout);
    assert!(out.stdout.contains("child exited with 0"), "{}", out.stdout);
    assert!(out.stderr.is_empty(), "stderr: {}", out.stderr);
    let t = out.only_trace();
    assert_eq!(t.data.meta.pid, out.pid, "the one trace is the parent's");
    t.assert_complete();
    assert_eq!(t.kernels_named("_Z6parentv").len(), 5);
    assert_eq!(t.kernels().len(), 5);
    assert_eq!(t.apis_named("cudaLaunchKernel").len(), 5);
    assert_eq!(t.apis_named("cudaDeviceSynchronize").len(), 2);
}

/// Python's subprocess (Triton compiling a kernel, say) vforks and execs: the child
/// shares the parent's memory, and its exec must not finish the parent's trace.
#[test]
fn vfork_and_exec_leave_the_parent_tracing() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let out = w.app(&["vfork-exec"]).run();
    out.assert_ok();
    assert!(out.stdout.contains("child exited with 0"), "{}", out.stdout);
    let t = out.only_trace();
    t.assert_complete();
    assert_eq!(
        t.kernels_named("_Z6parentv").len(),
        5,
        "launches after the vfork were lost"
    );
}

#[test]
fn fork_child_with_cuda_gets_its_own_trace() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let out = w.app(&["fork-cuda"]).run();
    out.assert_ok();
    assert!(out.stdout.contains("child exited with 0"), "{}", out.stdout);
    assert_eq!(out.traces.len(), 2, "{:?}\n{}", out.traces, out.stderr);
    let ts: Vec<Trace> = out.traces.iter().map(|p| Trace::read(p)).collect();
    let parent = ts
        .iter()
        .find(|t| t.data.meta.pid == out.pid)
        .expect("a trace of the parent");
    let child = ts
        .iter()
        .find(|t| t.data.meta.pid != out.pid)
        .expect("a trace of the child");
    assert_eq!(
        child.data.meta.ppid, out.pid,
        "the child's trace names its parent"
    );
    for (t, name, n) in [(parent, "_Z6parentv", 3), (child, "_Z5childv", 2)] {
        t.assert_complete();
        assert_eq!(t.kernels().len(), n, "pid {}", t.data.meta.pid);
        assert_eq!(t.kernels_named(name).len(), n);
        assert_eq!(t.apis_named("cudaLaunchKernel").len(), n);
        assert_eq!(t.devices().len(), 1);
    }
}

#[test]
fn processes_without_cuda_are_untouched() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    for scenario in ["nocuda", "idle"] {
        let base = w.app(&[scenario]).untraced().run();
        base.assert_ok();
        let out = w.app(&[scenario]).run();
        out.assert_ok();
        assert_eq!(out.stdout, base.stdout, "{scenario}");
        assert_eq!(out.stderr, "", "{scenario}");
        assert!(out.traces.is_empty(), "{scenario} wrote {:?}", out.traces);
    }

    let echo = w.program("/bin/echo", &["hi"]).run();
    echo.assert_ok();
    assert_eq!((echo.stdout.as_str(), echo.stderr.as_str()), ("hi\n", ""));
    assert!(echo.traces.is_empty());

    // With no GPUTRACE_DIR, nothing appears in the working directory either.
    let echo = w.program("/bin/echo", &["hi"]).unset("GPUTRACE_DIR").run();
    echo.assert_ok();
    assert_eq!(echo.stdout, "hi\n");
    assert!(
        !w.dir.path().join("gputrace-traces").exists(),
        "a process that never used CUDA created ./gputrace-traces"
    );

    if have_program("python3") {
        let py = w.program("python3", &["-c", "print(1)"]).run();
        py.assert_ok();
        assert_eq!((py.stdout.as_str(), py.stderr.as_str()), ("1\n", ""));
        assert!(py.traces.is_empty());
    } else {
        eprintln!("python3 not found: skipped that part");
    }
}

#[test]
fn mode_off_does_nothing() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let base = w.app(&["basic"]).untraced().run();
    base.assert_ok();
    let out = w.app(&["basic"]).env("GPUTRACE_MODE", "off").run();
    out.assert_ok();
    assert_eq!(out.stdout, base.stdout);
    assert_eq!(out.stderr, "");
    assert!(out.traces.is_empty(), "{:?}", out.traces);
    assert!(!w.traces.exists(), "the trace directory was created");
}

#[test]
fn missing_cupti_leaves_the_process_alone() {
    let w = Wheel::new(Cuda::V13, Layout::NoCupti);
    let base = w.app(&["basic"]).untraced().run();
    base.assert_ok();
    let nowhere = w.dir.path().join("nowhere/libcupti.so.13");
    let out = w
        .app(&["basic"])
        .env("GPUTRACE_CUPTI", nowhere.to_str().unwrap())
        .run();
    out.assert_ok();
    assert_eq!(out.stdout, base.stdout);
    let lines = out.gputrace_lines();
    assert_eq!(lines.len(), 1, "one gputrace line, got:\n{}", out.stderr);
    assert_eq!(
        out.stderr.lines().count(),
        1,
        "nothing else on stderr:\n{}",
        out.stderr
    );
    assert!(lines[0].contains("nowhere/libcupti.so.13"), "{}", lines[0]);
    for p in &out.traces {
        let t = Trace::read(p);
        assert!(t.kernels().is_empty(), "a trace without CUPTI has kernels?");
    }
}

#[test]
fn another_tools_injection_is_respected() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let base = w.app(&["basic"]).untraced().run();
    let other = w.dir.path().join("other-tool/libinject.so");
    let out = w
        .app(&["basic"])
        .env("CUDA_INJECTION64_PATH", other.to_str().unwrap())
        .run();
    out.assert_ok();
    assert_eq!(out.stdout, base.stdout);
    let lines = out.gputrace_lines();
    assert_eq!(lines.len(), 1, "{}", out.stderr);
    assert!(lines[0].contains("CUDA_INJECTION64_PATH"), "{}", lines[0]);
    assert!(out.traces.is_empty(), "{:?}", out.traces);
}

#[test]
fn injection_path_already_naming_libgputrace_traces() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let lib = gputrace_tests::libgputrace();
    let out = w
        .app(&["basic"])
        .env("CUDA_INJECTION64_PATH", lib.to_str().unwrap())
        .run();
    out.assert_ok();
    assert_eq!(out.stderr, "");
    let t = out.only_trace();
    t.assert_complete();
    assert_eq!(t.kernels().len(), 8);
}

#[test]
fn default_trace_directory_is_relative_to_the_working_directory() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let out = w.app(&["basic"]).unset("GPUTRACE_DIR").run();
    out.assert_ok();
    assert!(out.traces.is_empty());
    let files = trace_files_in(&w.dir.path().join("gputrace-traces"));
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(Trace::read(&files[0]).kernels().len(), 8);
}

#[test]
fn exec_after_cuda_gives_the_new_image_its_own_trace() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let base = w.app(&["exec"]).untraced().run();
    base.assert_ok();
    let out = w.app(&["exec"]).run();
    out.assert_ok();
    assert_eq!(out.stdout, base.stdout);
    assert_eq!(out.traces.len(), 2, "one trace per image: {:?}", out.traces);
    let ts: Vec<Trace> = out.traces.iter().map(|p| Trace::read(p)).collect();
    assert!(
        ts.iter().all(|t| t.data.meta.pid == out.pid),
        "same pid before and after exec"
    );
    let after = ts
        .iter()
        .find(|t| t.kernels().len() == 8)
        .expect("the exec'd image traced its basic run");
    after.assert_complete();
    assert!(after
        .data
        .path
        .to_string_lossy()
        .ends_with(&format!("-{}-1.gtrace", out.pid)));
    let before = ts
        .iter()
        .find(|t| {
            t.data
                .path
                .to_string_lossy()
                .ends_with(&format!("-{}.gtrace", out.pid))
        })
        .expect("the first image's trace keeps the plain name");
    assert_eq!(before.data.stats.corrupt_at, None);
    assert!(
        before.kernels_named("_Z6beforev").len() == 2,
        "launches made before exec() were lost: the first image's trace has {} of 2 \
         kernels and ends with states {:?}",
        before.kernels().len(),
        before.states()
    );
}

#[test]
fn unusable_trace_directory_leaves_the_process_alone() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let base = w.app(&["basic"]).untraced().run();
    let not_a_dir = w.dir.path().join("plain-file");
    std::fs::write(&not_a_dir, b"x").unwrap();
    let out = w
        .app(&["basic"])
        .env("GPUTRACE_DIR", not_a_dir.to_str().unwrap())
        .run();
    out.assert_ok();
    assert_eq!(out.stdout, base.stdout);
    let lines = out.gputrace_lines();
    assert_eq!(lines.len(), 1, "{}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(lines[0].contains("plain-file"), "{}", lines[0]);
}

#[test]
fn cupti_already_loaded_by_the_program_is_used() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let out = w.app(&["basic"]).env("APP_LOAD_CUPTI", "1").run();
    out.assert_ok();
    let t = out.only_trace();
    t.assert_complete();
    assert_eq!(t.data.meta.cupti_source, "already loaded by the process");
    assert_eq!(
        std::fs::canonicalize(&t.data.meta.cupti_path).unwrap(),
        std::fs::canonicalize(w.cupti.as_ref().unwrap()).unwrap()
    );
    assert_eq!(t.kernels().len(), 8);
}

#[test]
fn explicit_cupti_path_is_used() {
    let w = Wheel::new(Cuda::V13, Layout::NoCupti);
    let custom = w.dir.path().join("custom");
    std::fs::create_dir_all(&custom).unwrap();
    let cupti = custom.join("libcupti.so.13");
    std::fs::copy(&gputrace_tests::fakes(Cuda::V13).cupti, &cupti).unwrap();
    let out = w
        .app(&["basic"])
        .env("GPUTRACE_CUPTI", cupti.to_str().unwrap())
        .run();
    out.assert_ok();
    assert_eq!(out.stderr, "");
    let t = out.only_trace();
    t.assert_complete();
    assert_eq!(t.data.meta.cupti_source, "GPUTRACE_CUPTI");
    assert_eq!(
        std::fs::canonicalize(&t.data.meta.cupti_path).unwrap(),
        std::fs::canonicalize(&cupti).unwrap()
    );
    assert_eq!(t.kernels().len(), 8);
}
