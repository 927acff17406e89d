//! Processes that end without their exit handlers: `_exit`, `_Exit`, `quick_exit` (what
//! Python's `os._exit` and multiprocessing's children do) finish the trace in the call,
//! keep everything recorded, say how the process ended, and leave the exit status as
//! the program set it. `exit(7)` (whose handlers run) is in the loop too: the end record
//! and the report name its status as well.

use gputrace_tests::*;

fn report(path: &std::path::Path) -> gputrace_analyzer::report::Report {
    let t = gputrace_analyzer::Trace::load(path).expect("read the trace");
    gputrace_analyzer::report::analyze(&[t])
}

/// The reason of the trace's last state (the end record).
fn end_reason(t: &Trace) -> String {
    t.states().last().map(|s| s.2.clone()).unwrap_or_default()
}

#[test]
fn exits_without_handlers_keep_the_trace_and_say_how() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    for call in ["_exit", "_Exit", "quick_exit", "exit"] {
        let base = w.app(&["exit-now", call]).untraced().run();
        assert_eq!(
            base.status.code(),
            Some(7),
            "untraced {call}: {}",
            base.stderr
        );
        let out = w.app(&["exit-now", call]).run();
        assert_eq!(out.status.code(), Some(7), "{call}: {}", out.stderr);
        assert_eq!(
            out.stdout, base.stdout,
            "{call}: the program's output changed"
        );
        let t = out.only_trace();
        t.assert_complete();
        assert_eq!(t.kernels_named("_Z6parentv").len(), 3, "{call}");
        assert_eq!(end_reason(&t), format!("{call} 7"));
        // The report says it: the trace line, --json's ended, and the verdict's lead.
        let r = report(&out.traces[0]);
        let text = gputrace_analyzer::render_text(&r);
        assert!(text.contains(&format!("; ended: {call} 7\n")), "{text}");
        let e = &r.processes[0].ended;
        assert_eq!((e.status, e.normal), (Some(7), false), "{e:?}");
        let lead = if call == "exit" {
            "The process exited with status 7. ".to_string()
        } else {
            format!("The process ended through {call} with status 7 (no exit handler ran). ")
        };
        assert!(r.verdict.starts_with(&lead), "{}", r.verdict);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["processes"][0]["ended"]["status"], 7, "{call}");
        std::fs::remove_dir_all(&w.traces).unwrap();
    }
}

#[test]
fn a_forked_child_ending_in_exit_keeps_its_trace() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let out = w.app(&["fork-cuda-exit"]).run();
    out.assert_ok();
    assert!(out.stdout.contains("child exited with 5"), "{}", out.stdout);
    assert_eq!(out.traces.len(), 2, "{:?}\n{}", out.traces, out.stderr);
    let ts: Vec<Trace> = out.traces.iter().map(|p| Trace::read(p)).collect();
    let parent = ts.iter().find(|t| t.data.meta.pid == out.pid).unwrap();
    let child = ts.iter().find(|t| t.data.meta.pid != out.pid).unwrap();
    for (t, name, n, reason) in [
        (parent, "_Z6parentv", 3, "exit"),
        (child, "_Z5childv", 2, "_exit 5"),
    ] {
        t.assert_complete();
        assert_eq!(t.kernels_named(name).len(), n, "pid {}", t.data.meta.pid);
        assert_eq!(end_reason(t), reason, "pid {}", t.data.meta.pid);
    }
}

#[test]
fn a_trace_removed_while_the_job_runs_is_said_once() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let run = w.app(&["spin", "1.5"]).spawn();
    poll(std::time::Duration::from_secs(20), || {
        (!w.trace_files().is_empty()).then_some(())
    })
    .expect("the trace file appears");
    std::fs::remove_dir_all(&w.traces).unwrap();
    let out = run.into_inner().wait_with_output().unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let said: Vec<&str> = gputrace_lines(&err)
        .into_iter()
        .filter(|l| l.contains("trace file was removed"))
        .collect();
    assert_eq!(said.len(), 1, "{err}");
}
