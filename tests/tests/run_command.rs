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
