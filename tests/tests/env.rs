//! The environment layer end to end: the fake libnvidia-ml.so.1 plays a GPU in a given
//! state, the app runs under LD_PRELOAD, and the trace must hold the facts and samples
//! that state implies, and the analyzer must find what it is about. A missing or
//! refusing NVML never fails anything: one fact says why.

use gputrace_analyzer::env;
use gputrace_format::{self as fmt, Event};
use gputrace_tests::*;
use std::process::{Command, Stdio};

/// Runs the basic app with the fake NVML in `scenario`; returns the run and its trace.
fn run_with(scenario: &str, extra: &[(&str, &str)]) -> (Wheel, Output) {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let mut r = w
        .app(&["basic"])
        .env("GPUTRACE_NVML", fake_nvml().to_string_lossy())
        .env("FAKE_NVML_SCENARIO", scenario);
    for (k, v) in extra {
        r = r.env(k, v);
    }
    let o = r.run();
    o.assert_ok();
    (w, o)
}

fn analyzed(o: &Output) -> gputrace_analyzer::Trace {
    assert_eq!(o.traces.len(), 1, "stderr:\n{}", o.stderr);
    gputrace_analyzer::Trace::load(&o.traces[0]).expect("read the trace")
}

fn full_range(t: &gputrace_analyzer::Trace) -> (u64, u64) {
    env::sample_range(t).expect("NVML samples in the trace")
}

#[test]
fn a_healthy_gpu_gives_facts_samples_and_no_complaint() {
    let log = TempDir::new("nvml-log");
    let log_file = log.path().join("calls");
    let (_w, o) = run_with("healthy", &[("FAKE_NVML_LOG", log_file.to_str().unwrap())]);
    assert!(o.gputrace_lines().is_empty(), "{}", o.stderr);
    let raw = o.only_trace();
    let t = analyzed(&o);
    assert_eq!(env::fact(&t, fmt::FACT_HOST, "nvml"), Some("ok"));
    assert_eq!(
        env::fact(&t, fmt::FACT_HOST, "driver_version"),
        Some("580.159.04")
    );
    assert_eq!(
        env::fact(&t, fmt::FACT_HOST, "cuda_driver_version"),
        Some("13.0")
    );
    assert_eq!(env::fact(&t, 0, "name"), Some("Fake NVIDIA H200"));
    assert_eq!(env::fact(&t, 0, "persistence_mode"), Some("on"));
    assert_eq!(env::fact(&t, 0, "pci_bus_id"), Some("00000000:17:00.0"));
    // The app's own runtime, read from the library it loaded.
    assert_eq!(
        env::fact(&t, fmt::FACT_HOST, "cuda_runtime_version"),
        Some("13")
    );
    // A first sample when the trace opened and a last one when it closed.
    assert!(t.gpu_samples.len() >= 2, "{:?}", t.gpu_samples);
    let g = &t.gpu_samples[0];
    assert_eq!((g.sm_clock_mhz, g.sm_clock_max_mhz), (1980, 1980));
    assert_eq!((g.pcie_gen, g.pcie_width), (5, 16));
    assert_eq!(g.power_limit_mw, 700_000);
    // The app itself is on the GPU, and recognised as itself.
    let me: Vec<_> = t.gpu_processes.iter().filter(|p| p.pid == o.pid).collect();
    assert!(!me.is_empty());
    assert!(me.iter().all(|p| p.flags & fmt::GPU_PROC_SELF != 0));
    let (lo, hi) = full_range(&t);
    assert!(env::shared_gpu(&t, lo, hi).is_empty());
    assert!(env::throttled(&t, lo, hi).is_empty());
    assert!(env::pcie_degraded(&t, lo, hi).is_empty());
    assert!(env::gpu_errors(&t, lo, hi + 1).is_empty());
    // Every string the environment events use was interned before its use.
    assert!(raw
        .events()
        .iter()
        .any(|e| matches!(e, Event::Fact(f) if raw.str(f.key) == "driver_version")));
    // NVML was initialised once for the trace and shut down when it closed.
    let calls = std::fs::read_to_string(&log_file).expect("the fake NVML's log");
    assert_eq!(calls.lines().collect::<Vec<_>>(), vec!["init", "shutdown"]);
}

#[test]
fn throttled_clocks_are_found_with_their_reasons() {
    let (_w, o) = run_with("throttled", &[]);
    let t = analyzed(&o);
    let (lo, hi) = full_range(&t);
    let th = env::throttled(&t, lo, hi);
    assert_eq!(th.len(), 1, "{th:?}");
    assert_eq!(th[0].reasons, vec!["sw_power_cap", "hw_slowdown"]);
    assert_eq!((th[0].sm_clock_mhz, th[0].sm_clock_max_mhz), (1200, 1980));
    assert!(th[0].throttled_ns > 0);
    assert_eq!(th[0].max_temperature_c, Some(87));
}

#[test]
fn another_process_on_the_gpu_is_named_with_its_share() {
    // A real process for the other pid, so its name is read from /proc.
    let mut other = Command::new("sleep")
        .arg("60")
        .stdout(Stdio::null())
        .spawn()
        .expect("start sleep");
    let pid = other.id().to_string();
    let (_w, o) = run_with("shared", &[("FAKE_NVML_OTHER_PID", &pid)]);
    let _ = other.kill();
    let _ = other.wait();
    let t = analyzed(&o);
    let (lo, hi) = full_range(&t);
    let sh = env::shared_gpu(&t, lo, hi);
    assert_eq!(sh.len(), 1, "{sh:?}");
    assert_eq!(sh[0].pid.to_string(), pid);
    assert_eq!(sh[0].name, "sleep");
    assert_eq!(sh[0].sm_share_pct, 40.0);
    assert_eq!(sh[0].our_sm_share_pct, Some(60.0));
    assert_eq!(sh[0].memory_bytes, Some(12 << 30));
    assert!(sh[0].active_ns > 0);
}

#[test]
fn a_degraded_pcie_link_is_found_where_copies_ran() {
    let (_w, o) = run_with("pcie", &[]);
    let t = analyzed(&o);
    let (lo, hi) = full_range(&t);
    let p = env::pcie_degraded(&t, lo, hi);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(
        (p[0].gen, p[0].gen_max, p[0].width, p[0].width_max),
        (3, 5, 8, 16)
    );
    assert!(p[0].copy_ns_degraded > 0);
}

#[test]
fn xid_and_ecc_errors_reach_the_trace() {
    let (_w, o) = run_with("xid", &[]);
    let t = analyzed(&o);
    let kinds: Vec<(u8, u64)> = t.gpu_events.iter().map(|e| (e.kind, e.data)).collect();
    assert!(kinds.contains(&(fmt::GPU_EVENT_XID, 79)), "{kinds:?}");
    assert!(
        kinds.contains(&(fmt::GPU_EVENT_ECC_UNCORRECTED, 2)),
        "{kinds:?}"
    );
}

#[test]
fn a_missing_nvml_is_one_fact_and_nothing_else() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let o = w
        .app(&["basic"])
        .env("GPUTRACE_NVML", "/nonexistent/libnvidia-ml.so.1")
        .run();
    o.assert_ok();
    assert!(o.gputrace_lines().is_empty(), "{}", o.stderr);
    assert!(o.stdout.contains("basic: 8 launches"));
    let t = analyzed(&o);
    let why = env::nvml_unavailable(&t).expect("an nvml fact");
    assert!(why.starts_with("missing: "), "{why}");
    assert!(why.contains("/nonexistent/libnvidia-ml.so.1"), "{why}");
    assert!(t.gpu_samples.is_empty());
    // The host facts are still there, and the GPU work too.
    assert!(env::fact(&t, fmt::FACT_HOST, "kernel_release").is_some());
    assert_eq!(t.kernels.len(), 8);
}

#[test]
fn nvml_refusing_access_is_one_fact() {
    let (_w, o) = run_with("noperm", &[]);
    assert!(o.gputrace_lines().is_empty(), "{}", o.stderr);
    let t = analyzed(&o);
    let why = env::nvml_unavailable(&t).expect("an nvml fact");
    assert!(why.starts_with("no_permission: "), "{why}");
    assert!(t.gpu_samples.is_empty());
    assert_eq!(t.kernels.len(), 8);
}

#[test]
fn nvml_off_and_sampling_off_are_honoured() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let o = w.app(&["basic"]).env("GPUTRACE_NVML", "0").run();
    o.assert_ok();
    let t = analyzed(&o);
    assert!(env::nvml_unavailable(&t).unwrap().starts_with("off"));
    let (_w, o) = run_with("healthy", &[("GPUTRACE_NVML_MS", "0")]);
    let t = analyzed(&o);
    assert_eq!(env::fact(&t, fmt::FACT_HOST, "nvml"), Some("ok"));
    assert!(t.gpu_samples.is_empty());
}

#[test]
fn a_dormant_process_never_touches_nvml() {
    let log = TempDir::new("nvml-dormant");
    let log_file = log.path().join("calls");
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let o = w
        .app(&["basic"])
        .env("GPUTRACE_MODE", "dormant")
        .env("GPUTRACE_NVML", fake_nvml().to_string_lossy())
        .env("FAKE_NVML_LOG", log_file.to_string_lossy())
        .run();
    o.assert_ok();
    assert!(o.traces.is_empty());
    assert!(!log_file.exists(), "NVML was initialised while dormant");
}
