//! `gputrace run -- APP` on the fake CUDA app: the command finds libgputrace.so by itself
//! (beside it, with no GPUTRACE_LIB), preloads it, and reports on the trace it wrote.
//!
//! The command is `$GPUTRACE_BIN` when set: `scripts/wheel.sh test` points it at the copy
//! a wheel installed, whose library is the installed one beside it. Otherwise it is the
//! target directory's `gputrace`, beside the target directory's libgputrace.so.

use gputrace_tests::*;

#[test]
fn run_finds_its_library_and_reports() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let base = w.app(&["basic"]).untraced().run();
    base.assert_ok();
    let traces = w.traces.to_string_lossy().into_owned();
    let app = w.app.to_string_lossy().into_owned();
    // untraced(): no LD_PRELOAD from the harness, which also clears every GPUTRACE_*
    // variable (GPUTRACE_LIB among them); only `-o` says where the trace goes.
    let out = w
        .program(gputrace_bin(), &["run", "-o", &traces, "--", &app, "basic"])
        .untraced()
        .unset("GPUTRACE_DIR")
        .run();
    out.assert_ok();
    assert!(
        out.stdout.starts_with(&base.stdout),
        "the app's output changed under gputrace run:\n{}\nwithout it:\n{}",
        out.stdout,
        base.stdout
    );
    let report = &out.stdout[base.stdout.len()..];
    assert!(
        report.starts_with("gputrace report: 1 trace\nVERDICT: "),
        "no report after the app's output:\n{report}\nstderr:\n{}",
        out.stderr
    );
    let t = out.only_trace();
    t.assert_complete();
    // Beside it, gputrace's own NVML samples (or the one fact saying why there are none).
    assert_eq!(out.traces.len(), 2, "{:?}", out.traces);
    assert!(out
        .traces
        .iter()
        .any(|p| Trace::read(p).data.meta.is_environment()));
    assert_eq!(t.data.meta.started_by, "injection");
    assert!(
        t.data.meta.cmdline.iter().any(|a| a == "basic"),
        "cmdline {:?}",
        t.data.meta.cmdline
    );
    // The basic scenario launches 8 kernels (tests/basic.rs checks them one by one).
    assert_eq!(t.kernels().len(), 8, "kernels: {:?}", t.kernels());
}

/// `gputrace report --json` of the traces `gputrace run` wrote.
fn report_json(w: &Wheel) -> serde_json::Value {
    let traces = w.traces.to_string_lossy().into_owned();
    let r = w
        .program(gputrace_bin(), &["report", "--json", &traces])
        .untraced()
        .run();
    serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("report --json: {e}\n{}\n{}", r.stdout, r.stderr))
}

#[test]
fn run_says_how_its_job_ended_in_the_report() {
    // The app leaks device memory until cudaMalloc fails, then exit(1)s, as a PyTorch job
    // dies of torch.cuda.OutOfMemoryError (tests/memory.rs has the whole story).
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let traces = w.traces.to_string_lossy().into_owned();
    let app = w.app.to_string_lossy().into_owned();
    let limit = (256u64 << 20) + (4u64 << 30) + (1u64 << 29);
    let out = w
        .program(
            gputrace_bin(),
            &["run", "-o", &traces, "--", &app, "grow", "1024", "100"],
        )
        .env("FAKE_CUDA_MEMORY_LIMIT", limit.to_string())
        .untraced()
        .unset("GPUTRACE_DIR")
        .run();
    assert_eq!(out.status.code(), Some(1), "{}\n{}", out.stdout, out.stderr);
    let verdict = out
        .stdout
        .lines()
        .find(|l| l.starts_with("VERDICT: "))
        .unwrap_or_else(|| panic!("no verdict:\n{}\n{}", out.stdout, out.stderr));
    assert!(
        verdict.starts_with(
            "VERDICT: The process exited with status 1 after cudaMalloc of 1.0 GiB failed \
             with cudaErrorMemoryAllocation at +"
        ),
        "{verdict}"
    );
    let r = report_json(&w);
    let ended = &r["processes"][0]["ended"];
    assert_eq!(ended["status"], 1, "{ended}");
    assert_eq!(ended["parent_saw"], "exit 1", "{ended}");
    assert_eq!(ended["normal"], false, "{ended}");
    assert_eq!(r["top_finding"], "out_of_memory", "{}", r["verdict"]);

    // A crash: the parent saw the signal, and the end record agrees.
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let traces = w.traces.to_string_lossy().into_owned();
    let marker = w.traces.join("stuck-marker");
    let marker = marker.to_string_lossy().into_owned();
    let out = w
        .program(
            gputrace_bin(),
            &[
                "run", "-o", &traces, "--", &app, "hang", "5", "segv", &marker,
            ],
        )
        .untraced()
        .unset("GPUTRACE_DIR")
        .run();
    assert_eq!(out.status.code(), Some(128 + 11), "{}", out.stderr);
    let r = report_json(&w);
    let ended = &r["processes"][0]["ended"];
    assert_eq!(ended["signal"], "SIGSEGV", "{ended}");
    assert!(
        ended["parent_saw"]
            .as_str()
            .is_some_and(|p| p.starts_with("signal SIGSEGV 11")),
        "{ended}"
    );
    assert!(
        r["verdict"]
            .as_str()
            .is_some_and(|v| v.starts_with("The process was killed by SIGSEGV")),
        "{}",
        r["verdict"]
    );
}

#[test]
fn run_adds_its_traces_to_a_dataset() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let traces = w.traces.to_string_lossy().into_owned();
    let app = w.app.to_string_lossy().into_owned();
    let ds = w.traces.with_extension("dataset");
    let ds_s = ds.to_string_lossy().into_owned();
    let out = w
        .program(
            gputrace_bin(),
            &[
                "run",
                "-o",
                &traces,
                "--dataset",
                &ds_s,
                "--job",
                "nightly",
                "--",
                &app,
                "basic",
            ],
        )
        .untraced()
        .unset("GPUTRACE_DIR")
        .run();
    out.assert_ok();
    assert!(
        out.stderr
            .contains("added 1 process of job nightly to the dataset"),
        "{}",
        out.stderr
    );
    let t = out.only_trace();
    // One partition: the process's tables under job=nightly, its host and rank -1; the
    // environment file gave its samples and is not a process of its own.
    let part = ds
        .join("kernels/job=nightly")
        .join(format!(
            "host={}",
            gputrace_analyzer::export::parquet::escape(&t.data.meta.host)
        ))
        .join("rank=-1/window=0")
        .join(format!("part-{}.parquet", t.data.meta.pid));
    assert!(part.exists(), "{} missing", part.display());
    let procs: Vec<_> = std::fs::read_dir(ds.join("processes/job=nightly"))
        .unwrap()
        .collect();
    assert_eq!(procs.len(), 1);
    let _ = std::fs::remove_dir_all(&ds);
}
