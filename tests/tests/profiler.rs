//! The program takes CUPTI for itself (as torch.profiler does) and gives it back:
//! its own session must work, and the trace must show the blind window and nothing
//! from inside it.

use gputrace_format::CollectorState;
use gputrace_tests::{Cuda, Layout, Output, Trace, Wheel};

fn run(cuda: Cuda) -> (Output, Trace) {
    let w = Wheel::new(cuda, Layout::Flat);
    let base = w.app(&["profiler"]).untraced().run();
    base.assert_ok();
    let out = w.app(&["profiler"]).run();
    // The app checks that its own session saw exactly its records and callbacks.
    out.assert_ok();
    assert_eq!(out.stdout, base.stdout);
    let t = out.only_trace();
    (out, t)
}

fn check(t: &Trace) {
    t.assert_complete();
    let states = t.states();
    let blind = states
        .iter()
        .position(|s| s.1 == CollectorState::Blind)
        .unwrap_or_else(|| panic!("no Blind state: {states:?}"));
    let resumed = states[blind..]
        .iter()
        .position(|s| s.1 == CollectorState::Tracing)
        .map(|i| i + blind)
        .unwrap_or_else(|| panic!("no Tracing state after the Blind one: {states:?}"));
    let (blind_ts, resumed_ts) = (states[blind].0, states[resumed].0);
    assert!(blind_ts <= resumed_ts, "{states:?}");
    assert_eq!(
        states
            .iter()
            .filter(|s| s.1 == CollectorState::Blind)
            .count(),
        1,
        "one blind window: {states:?}"
    );

    let before = t.kernels_named("_Z6beforev");
    let after = t.kernels_named("_Z5afterv");
    assert_eq!(before.len(), 5, "kernels before the window");
    assert_eq!(after.len(), 4, "kernels after the window");
    assert!(
        t.kernels_named("_Z6duringv").is_empty(),
        "kernels launched while the program held CUPTI reached our trace"
    );
    assert_eq!(t.kernels().len(), 9);
    for k in &before {
        assert!(
            k.end <= blind_ts,
            "{k:?} ends after the window opened at {blind_ts}"
        );
    }
    for k in &after {
        assert!(
            k.start >= resumed_ts,
            "{k:?} starts before tracing resumed at {resumed_ts}"
        );
    }
    assert!(
        !t.memcpys().iter().any(|c| c.bytes == 256),
        "the copy made inside the window reached our trace"
    );
    // Host calls before the window were recorded; none from inside it.
    assert_eq!(
        t.apis_named("cudaLaunchKernel")
            .iter()
            .filter(|a| a.end <= blind_ts)
            .count(),
        5
    );
    assert!(
        !t.apis()
            .iter()
            .any(|a| a.start > blind_ts && a.end < resumed_ts),
        "API calls inside the blind window reached our trace"
    );
    assert!(t.dropped().is_empty(), "{:?}", t.dropped());
}

#[test]
fn program_cupti_session_gets_a_blind_window() {
    let (_out, t) = run(Cuda::V13);
    check(&t);
}

#[test]
fn program_cupti_session_gets_a_blind_window_cuda12() {
    let (_out, t) = run(Cuda::V12);
    check(&t);
}

/// After the program unsubscribed, the launches it makes are host calls like any
/// other: the trace should have their API events too.
#[test]
fn api_calls_are_recorded_again_after_the_window() {
    let (out, t) = run(Cuda::V13);
    let after: Vec<u32> = t
        .kernels_named("_Z5afterv")
        .iter()
        .map(|k| k.corr)
        .collect();
    let by_corr = t.api_by_corr();
    let missing: Vec<u32> = after
        .iter()
        .copied()
        .filter(|c| !by_corr.contains_key(c))
        .collect();
    assert!(
        missing.is_empty(),
        "launches after the program's CUPTI session have no API events (corr {missing:?}); \
         gputrace's stderr:\n{}",
        out.stderr
    );
}

/// torch.profiler started before the model touched the GPU: the program's session
/// exists before CUDA initialises, so gputrace must not take CUPTI from it then.
#[test]
fn program_session_started_before_cuda_init_keeps_its_records() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let base = w.app(&["profiler-early"]).untraced().run();
    base.assert_ok();
    let out = w.app(&["profiler-early"]).run();
    assert!(
        out.status.success(),
        "the program's own CUPTI session lost its records under gputrace:\n{}",
        out.stderr
    );
    assert_eq!(out.stdout, base.stdout);
    for t in out.traces.iter().map(|p| Trace::read(p)) {
        assert!(
            t.kernels_named("_Z6duringv").is_empty(),
            "the program's kernels reached our trace"
        );
        assert_eq!(
            t.kernels_named("_Z5afterv").len(),
            4,
            "kernels after the program's session"
        );
    }
}

/// The exported CUPTI hooks forward faithfully even when gputrace is not tracing.
#[test]
fn program_session_works_when_tracing_is_off() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let base = w.app(&["profiler"]).untraced().run();
    base.assert_ok();
    let out = w.app(&["profiler"]).env("GPUTRACE_MODE", "off").run();
    out.assert_ok();
    assert_eq!(out.stdout, base.stdout);
    assert_eq!(out.stderr, "");
    assert!(out.traces.is_empty());
}

/// gputrace tells CUPTI its buffers come zeroed (ZEROED_OUT_ACTIVITY_BUFFER). That is a
/// promise about gputrace's buffers only: while the program has CUPTI, CUPTI must clear
/// the program's buffers again. (The fake libcupti checks the promise on every buffer
/// it is given and says so on stderr when a buffer promised zeroed is not.)
#[test]
fn our_cupti_settings_do_not_leak_into_the_program_session() {
    for scenario in ["profiler", "profiler-early"] {
        let w = Wheel::new(Cuda::V13, Layout::Flat);
        let out = w.app(&[scenario]).run();
        let complaints: Vec<&str> = out
            .stderr
            .lines()
            .filter(|l| l.starts_with("fake_cupti:"))
            .collect();
        assert!(
            complaints.is_empty(),
            "{scenario}: CUPTI was left promised zeroed buffers while the program \
             used its own (non-zeroed) ones: {complaints:?}"
        );
    }
}
