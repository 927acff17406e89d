//! A job that hangs or dies still tells its story. The app launches N kernels, one that
//! never completes (the fake runtime's FAKE_CUDA_STUCK: its record stays incomplete, so
//! the fake CUPTI holds back the buffer it is in, with the N kernels launched after it),
//! N more, then waits in cudaDeviceSynchronize forever (or aborts). Every kernel that
//! completed must reach the trace however the process ends, the stuck one must be named
//! in a stall report, the end reason must be recorded, and the process must end exactly
//! as it would have without the tracer.

use gputrace_format::{self as fmt, CollectorState, Event};
use gputrace_tests::{poll, Cuda, Layout, Running, Trace, Wheel};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::Duration;

/// Kernels launched on each side of the stuck one.
const N: usize = 40;
const STUCK: &str = "_Z5stuckv";

/// Starts `app hang N MODE FILE` with the stuck kernel, and waits until it has launched
/// everything (FILE written).
fn start(w: &Wheel, mode: &str, stall_ms: &str, marker: &Path) -> Running {
    let child = w
        .app(&["hang", &N.to_string(), mode, marker.to_str().unwrap()])
        .env("FAKE_CUDA_STUCK", STUCK)
        .env("GPUTRACE_STALL_MS", stall_ms)
        .spawn();
    let ready = poll(Duration::from_secs(60), || marker.exists().then_some(()));
    assert!(ready.is_some(), "the app never reached its wait");
    child
}

fn signal(child: &Running, sig: i32) {
    // SAFETY: kill on our own child's pid.
    let r = unsafe { libc::kill(child.id() as libc::pid_t, sig) };
    assert_eq!(r, 0);
}

fn wait(child: Running) -> (std::process::ExitStatus, String, String) {
    let o = child.into_inner().wait_with_output().expect("wait");
    (
        o.status,
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn only_trace(w: &Wheel) -> Trace {
    let files = w.trace_files();
    assert_eq!(files.len(), 1, "{files:?}");
    Trace::read(&files[0])
}

/// Every kernel launched around the stuck one is in the trace, as a completed kernel;
/// the stuck one is not written as a kernel.
fn assert_all_kernels(t: &Trace) {
    let steps = t.kernels_named("_Z4stepv");
    assert_eq!(steps.len(), 2 * N, "kernels recorded vs launched");
    assert!(steps.iter().all(|k| k.end >= k.start && k.start > 0));
    assert!(
        t.kernels_named(STUCK).is_empty(),
        "the stuck kernel got a made-up end"
    );
}

/// The stall operations that name the stuck kernel, with its launch shape.
fn stuck_ops(t: &Trace) -> Vec<&fmt::StallOp> {
    t.events()
        .iter()
        .filter_map(|e| match e {
            Event::StallOp(o) if t.str(o.name) == STUCK => Some(o),
            _ => None,
        })
        .collect()
}

fn stalls(t: &Trace) -> Vec<&fmt::Stall> {
    t.events()
        .iter()
        .filter_map(|e| match e {
            Event::Stall(s) => Some(s),
            _ => None,
        })
        .collect()
}

fn end_reason(t: &Trace) -> Option<String> {
    t.states()
        .into_iter()
        .rfind(|s| s.1 == CollectorState::Stopped)
        .map(|s| s.2)
}

/// A terminating signal with its default action: flushed, named, then the same death.
fn ended_by(sig: i32, name: &str) {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let marker = w.dir.path().join("stuck");
    // The watchdog is far off: what saves the kernels here is the flush at the signal.
    let child = start(&w, "sync", "600000", &marker);
    signal(&child, sig);
    let (status, out, err) = wait(child);
    assert_eq!(status.signal(), Some(sig), "{status:?}; stderr:\n{err}");
    assert_eq!(out, format!("hang: launched {}\n", 2 * N));
    let t = only_trace(&w);
    assert_all_kernels(&t);
    assert_eq!(
        end_reason(&t).as_deref(),
        Some(format!("signal {name} {sig}").as_str())
    );
    let ops = stuck_ops(&t);
    assert_eq!(ops.len(), 1, "{ops:?}");
    let op = ops[0];
    assert_eq!(op.kind, fmt::STALL_OP_KERNEL);
    assert_eq!((op.grid, op.block), ([7, 1, 1], [128, 1, 1]));
    assert!(op.flags & fmt::STALL_OP_FLAG_LAUNCH != 0);
    assert!(op.flags & fmt::STALL_OP_FLAG_INCOMPLETE != 0, "{op:?}");
    assert!(op.start > 0 && op.launch_ts > 0);
    let s = stalls(&t);
    assert!(
        s.iter()
            .any(|s| s.flags & fmt::STALL_END != 0 && s.outstanding == 1),
        "{s:?}"
    );
}

#[test]
fn sigterm_keeps_every_completed_kernel_and_names_the_stuck_one() {
    ended_by(libc::SIGTERM, "SIGTERM");
}

#[test]
fn sigint_with_the_default_action_does_the_same() {
    ended_by(libc::SIGINT, "SIGINT");
}

#[test]
fn the_programs_own_sigint_handler_runs_and_the_trace_is_finished_at_exit() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let marker = w.dir.path().join("stuck");
    let child = start(&w, "handler", "600000", &marker);
    signal(&child, libc::SIGINT);
    let (status, _out, err) = wait(child);
    // The program's handler called exit(42): its status, not a death by signal.
    assert_eq!(status.code(), Some(42), "{status:?}; stderr:\n{err}");
    let t = only_trace(&w);
    assert_all_kernels(&t);
    // The status it gave exit() is in the end record (the exit hook noted it).
    assert_eq!(end_reason(&t).as_deref(), Some("exit 42"));
    assert_eq!(stuck_ops(&t).len(), 1);
}

#[test]
fn abort_keeps_every_completed_kernel() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let marker = w.dir.path().join("stuck");
    let child = start(&w, "abort", "600000", &marker);
    let (status, _out, err) = wait(child);
    assert_eq!(
        status.signal(),
        Some(libc::SIGABRT),
        "{status:?}; stderr:\n{err}"
    );
    let t = only_trace(&w);
    assert_all_kernels(&t);
    assert_eq!(end_reason(&t).as_deref(), Some("signal SIGABRT 6"));
    assert_eq!(stuck_ops(&t).len(), 1);
}

#[test]
fn sighup_with_the_default_action_does_the_same() {
    ended_by(libc::SIGHUP, "SIGHUP");
}

#[test]
fn a_crash_keeps_every_completed_kernel_and_still_crashes() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let marker = w.dir.path().join("stuck");
    let child = start(&w, "segv", "600000", &marker);
    let (status, _out, err) = wait(child);
    assert_eq!(
        status.signal(),
        Some(libc::SIGSEGV),
        "{status:?}; stderr:\n{err}"
    );
    let t = only_trace(&w);
    assert_all_kernels(&t);
    assert_eq!(end_reason(&t).as_deref(), Some("signal SIGSEGV 11"));
    assert_eq!(stuck_ops(&t).len(), 1);
}

#[test]
fn a_sigkill_after_the_stall_was_reported_keeps_the_evidence() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let marker = w.dir.path().join("stuck");
    let child = start(&w, "sync", "300", &marker);
    // Until a stall report with its threads is in the file (written at once).
    let seen = poll(Duration::from_secs(60), || {
        let f = w.trace_files().into_iter().next()?;
        let d = fmt::read_all(&f).ok()?;
        d.events
            .iter()
            .any(|e| matches!(e, Event::StallThread(_)))
            .then_some(())
    });
    let (status, _out, err) = child.kill();
    assert!(seen.is_some(), "no stall report; stderr:\n{err}");
    assert_eq!(status.signal(), Some(9));
    let t = only_trace(&w);
    assert!(
        end_reason(&t).is_none(),
        "a killed process wrote an end record"
    );
    assert_all_kernels(&t);
    let s = stalls(&t);
    let first = s.first().expect("a stall");
    assert_eq!((first.id, first.seq), (1, 0));
    assert!(first.flags & fmt::STALL_FORCED_FLUSH != 0);
    assert!(first.flags & (fmt::STALL_END | fmt::STALL_RESOLVED) == 0);
    assert!(first.outstanding >= 1 && first.since > 0 && first.since <= first.ts);
    assert!(!stuck_ops(&t).is_empty());
    // The main thread is reported inside its cudaDeviceSynchronize.
    let waiting: Vec<_> = t
        .events()
        .iter()
        .filter_map(|e| match e {
            Event::StallThread(x) if t.str(x.call) == "cudaDeviceSynchronize" => Some(x),
            _ => None,
        })
        .collect();
    assert!(!waiting.is_empty(), "no thread in cudaDeviceSynchronize");
    assert!(waiting
        .iter()
        .all(|x| x.call_start > 0 && x.call_start <= x.ts));
    assert!(waiting
        .iter()
        .all(|x| x.tid == t.apis_named("cudaLaunchKernel")[0].tid));
}

#[test]
fn without_the_flush_the_fake_holds_the_kernels_back() {
    // The control: a SIGKILL before any stall report loses the kernels launched after
    // the stuck one (they sit in the buffer CUPTI holds back), so the tests above
    // measure the flush, not the fake.
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let marker = w.dir.path().join("stuck");
    let child = start(&w, "sync", "600000", &marker);
    // Until the trace has the API records of every launch (the rings are drained
    // independently of CUPTI's buffers).
    let seen = poll(Duration::from_secs(60), || {
        let f = w.trace_files().into_iter().next()?;
        let t = Trace::from_data(fmt::read_all(&f).ok()?);
        (t.apis_named("cudaLaunchKernel").len() > 2 * N).then_some(())
    });
    let (status, _out, _err) = child.kill();
    assert!(seen.is_some());
    assert_eq!(status.signal(), Some(9));
    let t = only_trace(&w);
    assert!(
        t.kernels_named("_Z4stepv").len() <= N,
        "the buffer was handed over"
    );
}

#[test]
fn a_healthy_run_has_no_stall() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let o = w
        .app(&["spin", "1.5"])
        .env("GPUTRACE_STALL_MS", "100")
        .run();
    o.assert_ok();
    let t = o.only_trace();
    assert!(!t.kernels().is_empty());
    assert!(stalls(&t).is_empty(), "{:?}", stalls(&t));
    assert!(!t
        .events()
        .iter()
        .any(|e| matches!(e, Event::StallOp(_) | Event::StallThread(_))));
    assert_eq!(end_reason(&t).as_deref(), Some("exit"));
}
