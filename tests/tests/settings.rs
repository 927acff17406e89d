//! Bad GPUTRACE_* settings: one warning each, the program unchanged, still traced.

use gputrace_analyzer::{report, Trace as Loaded};
use gputrace_format::{protocol, redact::REDACTED};
use gputrace_tests::{trace_files_in, Cuda, Layout, Trace, Wheel};

const BAD: &[(&str, &str)] = &[
    ("GPUTRACE_BUFFER_KB", "banana"),
    ("GPUTRACE_BUFFER_KB", "16"),
    ("GPUTRACE_BUFFER_POOL_MB", "0"),
    ("GPUTRACE_FLUSH_MS", "-3"),
    ("GPUTRACE_EXIT_WAIT_MS", "forever"),
    ("GPUTRACE_MODE", "sometimes"),
    ("GPUTRACE_API", "perhaps"),
    ("GPUTRACE_DRIVER_API", "2"),
    ("GPUTRACE_DEBUG", "maybe"),
    ("GPUTRACE_FROBNICATE", "1"),
];

#[test]
fn each_bad_setting_gives_one_warning_and_changes_nothing_else() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let base = w.app(&["basic"]).untraced().run();
    base.assert_ok();
    for (k, v) in BAD {
        let _ = std::fs::remove_dir_all(&w.traces);
        let out = w.app(&["basic"]).env(k, v).run();
        assert_eq!(out.status.code(), Some(0), "{k}={v}: {}", out.stderr);
        assert_eq!(out.stdout, base.stdout, "{k}={v} changed stdout");
        let lines = out.gputrace_lines();
        assert_eq!(
            lines.len(),
            1,
            "{k}={v}: want one warning, got:\n{}",
            out.stderr
        );
        assert_eq!(
            out.stderr.lines().count(),
            1,
            "{k}={v}: stderr:\n{}",
            out.stderr
        );
        assert!(
            lines[0].contains(k),
            "{k}={v}: the warning does not name it: {}",
            lines[0]
        );
        let t = out.only_trace();
        t.assert_complete();
        assert_eq!(t.kernels().len(), 8, "{k}={v}");
        // An unknown name is recorded without its value, which may hold anything.
        let want = match protocol::setting(k) {
            Some(_) => *v,
            None => REDACTED,
        };
        assert!(
            t.data.meta.options.iter().any(|(a, b)| a == k && b == want),
            "{k}={want} missing from the trace's options: {:?}",
            t.data.meta.options
        );
    }
}

#[test]
fn all_bad_settings_together_give_one_line() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let mut run = w.app(&["basic"]);
    let mut seen = Vec::new();
    for (k, v) in BAD {
        if !seen.contains(k) {
            seen.push(*k);
            run = run.env(k, v);
        }
    }
    let out = run.run();
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    let lines = out.gputrace_lines();
    assert_eq!(lines.len(), 1, "want one line, got:\n{}", out.stderr);
    for k in seen {
        assert!(lines[0].contains(k), "{k} not named in: {}", lines[0]);
    }
    let t = out.only_trace();
    t.assert_complete();
    assert_eq!(t.kernels().len(), 8);
}

#[test]
fn documented_settings_of_the_command_and_rank_are_quiet() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let out = w
        .app(&["basic"])
        .env("GPUTRACE_RANK", "3")
        .env("GPUTRACE_THREADS", "2")
        .env("GPUTRACE_LIB", "/x/libgputrace.so")
        .run();
    out.assert_ok();
    assert_eq!(out.stderr, "");
    let r = report::analyze(&[Loaded::load(&out.traces[0]).unwrap()]);
    assert_eq!(r.processes[0].rank, Some(3));
    assert_eq!(r.processes[0].rank_source, "option GPUTRACE_RANK");
}

#[test]
fn the_launchers_rank_is_recorded() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let rank_of = |env: &[(&str, &str)]| {
        let _ = std::fs::remove_dir_all(&w.traces);
        let mut run = w.app(&["basic"]);
        for (k, v) in env {
            run = run.env(k, v);
        }
        let out = run.run();
        out.assert_ok();
        assert_eq!(out.stderr, "", "{env:?}");
        let t = out.only_trace();
        for (k, v) in env {
            assert!(
                t.data.meta.options.iter().any(|(a, b)| a == k && b == v),
                "{k}={v} not in the trace's options: {:?}",
                t.data.meta.options
            );
        }
        let r = report::analyze(&[Loaded::load(&out.traces[0]).unwrap()]);
        (r.processes[0].rank, r.processes[0].rank_source.clone())
    };
    assert_eq!(rank_of(&[("RANK", "5")]), (Some(5), "option RANK".into()));
    assert_eq!(
        rank_of(&[("SLURM_PROCID", "6"), ("SLURM_LOCALID", "2")]),
        (Some(6), "option SLURM_PROCID".into())
    );
    assert_eq!(
        rank_of(&[("OMPI_COMM_WORLD_RANK", "7"), ("RANK", "1")]),
        (Some(1), "option RANK".into())
    );
    assert_eq!(
        rank_of(&[("PMI_RANK", "4"), ("GPUTRACE_RANK", "0")]),
        (Some(0), "option GPUTRACE_RANK".into())
    );
    // A node-local rank alone is no job rank.
    assert_eq!(rank_of(&[("LOCAL_RANK", "1")]), (None, "none".into()));
}

#[test]
fn empty_trace_directory_setting_falls_back_to_the_default() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let out = w.app(&["basic"]).env("GPUTRACE_DIR", "").run();
    out.assert_ok();
    let lines = out.gputrace_lines();
    assert_eq!(lines.len(), 1, "{}", out.stderr);
    assert!(lines[0].contains("GPUTRACE_DIR"), "{}", lines[0]);
    let files = trace_files_in(&w.dir.path().join("gputrace-traces"));
    assert_eq!(files.len(), 1, "{files:?}");
    let t = Trace::read(&files[0]);
    t.assert_complete();
    assert_eq!(t.kernels().len(), 8);
}

#[test]
fn good_settings_are_quiet_and_take_effect() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    // The smallest buffers CUPTI may get, flushed often: same records, no loss.
    let out = w
        .app(&["basic"])
        .env("GPUTRACE_BUFFER_KB", "64")
        .env("GPUTRACE_BUFFER_POOL_MB", "1")
        .env("GPUTRACE_FLUSH_MS", "10")
        .run();
    out.assert_ok();
    assert_eq!(out.stderr, "");
    let t = out.only_trace();
    t.assert_complete();
    assert_eq!(t.kernels().len(), 8);
    assert_eq!(t.memcpys().len(), 7);
    assert!(t.dropped().is_empty(), "{:?}", t.dropped());

    // No API callbacks: GPU records only.
    let _ = std::fs::remove_dir_all(&w.traces);
    let out = w.app(&["basic"]).env("GPUTRACE_API", "0").run();
    out.assert_ok();
    assert_eq!(out.stderr, "");
    let t = out.only_trace();
    assert_eq!(t.kernels().len(), 8);
    assert!(
        t.apis().is_empty(),
        "GPUTRACE_API=0 still recorded API calls"
    );
}

#[test]
fn the_removed_pm_setting_is_one_note_and_the_job_runs_as_untraced() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let base = w.app(&["pm"]).untraced().run();
    base.assert_ok();
    for v in ["1", "on"] {
        let _ = std::fs::remove_dir_all(&w.traces);
        let out = w
            .app(&["pm"])
            .env("GPUTRACE_PM", v)
            .env("GPUTRACE_PM_US", "100")
            .run();
        assert_eq!(
            out.status.code(),
            Some(0),
            "GPUTRACE_PM={v}: {}",
            out.stderr
        );
        assert_eq!(out.stdout, base.stdout);
        let lines = out.gputrace_lines();
        assert_eq!(lines.len(), 1, "GPUTRACE_PM={v}:\n{}", out.stderr);
        assert!(
            lines[0].contains("removed") && lines[0].contains("NVML GPM"),
            "{}",
            lines[0]
        );
        let t = out.only_trace();
        t.assert_complete();
        assert_eq!(t.kernels().len(), 5, "GPUTRACE_PM={v}");
    }
    // Off says nothing.
    let _ = std::fs::remove_dir_all(&w.traces);
    let out = w.app(&["pm"]).env("GPUTRACE_PM", "0").run();
    out.assert_ok();
    assert!(out.gputrace_lines().is_empty(), "{}", out.stderr);
}
