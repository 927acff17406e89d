//! The environment layer end to end: the fake libnvidia-ml.so.1 plays a GPU in a given
//! state, the app runs under LD_PRELOAD, and the trace must hold the facts and samples
//! that state implies, and the analyzer must find what it is about. A missing or
//! refusing NVML never fails anything: one fact says why.

use gputrace_analyzer::report::environment;
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
    environment::sample_range(t).expect("NVML samples in the trace")
}

#[test]
fn a_healthy_gpu_gives_facts_samples_and_no_complaint() {
    let log = TempDir::new("nvml-log");
    let log_file = log.path().join("calls");
    let (_w, o) = run_with("healthy", &[("FAKE_NVML_LOG", log_file.to_str().unwrap())]);
    assert!(o.gputrace_lines().is_empty(), "{}", o.stderr);
    let raw = o.only_trace();
    let t = analyzed(&o);
    assert_eq!(environment::fact(&t, fmt::FACT_HOST, "nvml"), Some("ok"));
    assert_eq!(
        environment::fact(&t, fmt::FACT_HOST, "driver_version"),
        Some("580.159.04")
    );
    assert_eq!(
        environment::fact(&t, fmt::FACT_HOST, "cuda_driver_version"),
        Some("13.0")
    );
    assert_eq!(environment::fact(&t, 0, "name"), Some("Fake NVIDIA H200"));
    assert_eq!(environment::fact(&t, 0, "persistence_mode"), Some("on"));
    assert_eq!(
        environment::fact(&t, 0, "pci_bus_id"),
        Some("00000000:17:00.0")
    );
    // The app's own runtime, read from the library it loaded.
    assert_eq!(
        environment::fact(&t, fmt::FACT_HOST, "cuda_runtime_version"),
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
    assert!(environment::shared_gpu(&t, lo, hi).is_empty());
    assert!(environment::throttled(&t, lo, hi).is_empty());
    assert!(environment::pcie_degraded(&t, lo, hi).is_empty());
    assert!(environment::gpu_errors(&t, lo, hi + 1).is_empty());
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
    let th = environment::throttled(&t, lo, hi);
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
    let sh = environment::shared_gpu(&t, lo, hi);
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
    let p = environment::pcie_degraded(&t, lo, hi);
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
    let why = environment::nvml_unavailable(&t).expect("an nvml fact");
    assert!(why.starts_with("missing: "), "{why}");
    assert!(why.contains("/nonexistent/libnvidia-ml.so.1"), "{why}");
    assert!(t.gpu_samples.is_empty());
    // The host facts are still there, and the GPU work too.
    assert!(environment::fact(&t, fmt::FACT_HOST, "kernel_release").is_some());
    assert_eq!(t.kernels.len(), 8);
}

#[test]
fn nvml_refusing_access_is_one_fact() {
    let (_w, o) = run_with("noperm", &[]);
    assert!(o.gputrace_lines().is_empty(), "{}", o.stderr);
    let t = analyzed(&o);
    let why = environment::nvml_unavailable(&t).expect("an nvml fact");
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
    assert!(environment::nvml_unavailable(&t)
        .unwrap()
        .starts_with("off"));
    let (_w, o) = run_with("healthy", &[("GPUTRACE_NVML_MS", "0")]);
    let t = analyzed(&o);
    assert_eq!(environment::fact(&t, fmt::FACT_HOST, "nvml"), Some("ok"));
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

// ---------------------------------------------------------------------------------
// `gputrace run`: NVML sampled from the command's own process into an environment file
// beside the job's traces, the job told not to sample it.

/// `gputrace run --json -- APP basic` with `GPUTRACE_NVML` set to `nvml` (unset: None)
/// and the fake's job taken to be gputrace's child.
fn gputrace_run(w: &Wheel, nvml: Option<&str>, extra: &[(&str, &str)]) -> Output {
    let traces = w.traces.to_string_lossy().into_owned();
    let app = w.app.to_string_lossy().into_owned();
    let mut r = w
        .program(
            gputrace_bin(),
            &["run", "--json", "-o", &traces, "--", &app, "basic"],
        )
        .untraced()
        .unset("GPUTRACE_DIR")
        .env("FAKE_NVML_JOB", "child");
    if let Some(v) = nvml {
        r = r.env("GPUTRACE_NVML", v);
    }
    for (k, v) in extra {
        r = r.env(k, v);
    }
    let o = r.run();
    o.assert_ok();
    o
}

/// The report `gputrace run --json` printed after the app's output.
fn report_json(o: &Output) -> serde_json::Value {
    let at = o.stdout.find("\n{").expect("a JSON report on stdout") + 1;
    serde_json::from_str(&o.stdout[at..]).expect("the report is JSON")
}

/// The run's files: (process traces, environment files), by their metadata.
fn split_files(o: &Output) -> (Vec<gputrace_analyzer::Trace>, Vec<gputrace_analyzer::Trace>) {
    o.traces
        .iter()
        .map(|p| gputrace_analyzer::Trace::load(p).expect("read a file of the run"))
        .partition(|t| !t.meta.is_environment())
}

#[test]
fn gputrace_run_samples_nvml_beside_the_job_and_reports_another_process() {
    let mut other = Command::new("sleep")
        .arg("60")
        .stdout(Stdio::null())
        .spawn()
        .expect("start sleep");
    let other_pid = other.id().to_string();
    let log = TempDir::new("nvml-run-log");
    let log_file = log.path().join("calls");
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let fake = fake_nvml().to_string_lossy().into_owned();
    let o = gputrace_run(
        &w,
        Some(&fake),
        &[
            ("FAKE_NVML_SCENARIO", "shared"),
            ("FAKE_NVML_OTHER_PID", &other_pid),
            ("FAKE_NVML_LOG", log_file.to_str().unwrap()),
        ],
    );
    let _ = other.kill();
    let _ = other.wait();
    let (procs, envs) = split_files(&o);
    assert_eq!((procs.len(), envs.len()), (1, 1), "{:?}", o.traces);
    let (p, e) = (&procs[0], &envs[0]);
    let job = p.meta.pid;
    // Every string it uses defined once, before its first use.
    Trace::read(&e.path);
    // The environment file: gputrace's, named for it, with the job's process as itself.
    let name = e.path.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("gputrace-env-"), "{name}");
    assert!(e.path.starts_with(&w.traces));
    assert_ne!(e.meta.pid, job);
    assert_eq!(environment::fact(e, fmt::FACT_HOST, "nvml"), Some("ok"));
    assert!(e.gpu_samples.len() >= 2, "a first and a last tick");
    let mine: Vec<_> = e.gpu_processes.iter().filter(|x| x.pid == job).collect();
    assert!(!mine.is_empty(), "the job's process never listed");
    assert!(mine.iter().all(|x| x.flags & fmt::GPU_PROC_SELF != 0));
    // The job did not sample NVML itself: one NVML session in all, gputrace's.
    assert!(p.gpu_samples.is_empty() && p.gpu_processes.is_empty());
    assert!(environment::nvml_unavailable(p).unwrap().starts_with("off"));
    let calls = std::fs::read_to_string(&log_file).expect("the fake NVML's log");
    assert_eq!(calls.lines().collect::<Vec<_>>(), vec!["init", "shutdown"]);
    // Read as a set, the process trace has the samples, its own process as itself.
    let set = gputrace_analyzer::model::load::load_set(&o.traces, &Default::default(), &|_| {})
        .expect("read the set");
    assert_eq!(set.len(), 1, "the environment file is no process");
    let t = &set[0];
    assert!(!t.gpu_samples.is_empty());
    let (lo, hi) = gputrace_analyzer::model::env_files::time_range(t).unwrap();
    let shared = environment::shared_gpu(t, lo, hi);
    assert_eq!(shared.len(), 1, "{shared:?}");
    assert_eq!(shared[0].pid.to_string(), other_pid);
    assert_eq!(shared[0].name, "sleep");
    // And the report says so.
    let r = report_json(&o);
    assert_eq!(r["processes"].as_array().map(|a| a.len()), Some(1), "{r}");
    let findings = r["findings"].as_array().expect("findings");
    let f = findings
        .iter()
        .find(|f| f["id"] == "env_shared_gpu")
        .unwrap_or_else(|| panic!("no env_shared_gpu in {findings:#?}"));
    assert_eq!(f["metrics"]["pid"].as_f64(), Some(other.id() as f64), "{f}");
    // The job's own process is named nowhere as another.
    for part in ["summary", "evidence", "fix"] {
        assert!(!f[part].to_string().contains(&job.to_string()), "{f}");
    }
}

#[test]
fn gputrace_run_reports_throttled_clocks_from_its_samples() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let fake = fake_nvml().to_string_lossy().into_owned();
    let o = gputrace_run(&w, Some(&fake), &[("FAKE_NVML_SCENARIO", "throttled")]);
    let r = report_json(&o);
    let ids: Vec<&str> = r["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["id"].as_str())
        .collect();
    assert!(ids.contains(&"env_throttled"), "{ids:?}");
    assert!(!ids.contains(&"env_shared_gpu"), "{ids:?}");
}

#[test]
fn a_stuck_nvml_never_holds_the_job_or_its_report_up() {
    // Every clock read blocks for good: no tick ever ends. gputrace waits a bounded time
    // for the last one, then reports with what the file holds (the facts).
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let fake = fake_nvml().to_string_lossy().into_owned();
    let o = gputrace_run(&w, Some(&fake), &[("FAKE_NVML_SCENARIO", "hang")]);
    assert!(o.stdout.contains("basic: 8 launches"), "{}", o.stdout);
    let (procs, envs) = split_files(&o);
    assert_eq!((procs.len(), envs.len()), (1, 1), "{:?}", o.traces);
    assert_eq!(
        environment::fact(&envs[0], fmt::FACT_HOST, "nvml"),
        Some("ok")
    );
    assert!(envs[0].gpu_samples.is_empty());
    let r = report_json(&o);
    assert_eq!(r["processes"].as_array().map(|a| a.len()), Some(1), "{r}");
}

#[test]
fn gputrace_run_with_nvml_off_writes_no_environment_file() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let o = gputrace_run(&w, Some("0"), &[]);
    let (procs, envs) = split_files(&o);
    assert_eq!((procs.len(), envs.len()), (1, 0), "{:?}", o.traces);
    assert!(environment::nvml_unavailable(&procs[0])
        .unwrap()
        .starts_with("off"));
    let ids = report_json(&o)["findings"].to_string();
    assert!(!ids.contains("env_nvml_unavailable"), "{ids}");
}

#[test]
fn gputrace_run_with_nvml_missing_says_so_once_and_runs_on() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let o = gputrace_run(&w, Some("/nonexistent/libnvidia-ml.so.1"), &[]);
    assert!(o.stdout.contains("basic: 8 launches"), "{}", o.stdout);
    assert!(
        o.gputrace_lines().is_empty(),
        "nothing on stderr: {}",
        o.stderr
    );
    let (procs, envs) = split_files(&o);
    assert_eq!((procs.len(), envs.len()), (1, 1), "{:?}", o.traces);
    let why = environment::nvml_unavailable(&envs[0]).expect("the nvml fact");
    assert!(why.starts_with("missing: "), "{why}");
    let findings = report_json(&o)["findings"].clone();
    let nvml: Vec<_> = findings
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["id"] == "env_nvml_unavailable")
        .collect();
    assert_eq!(nvml.len(), 1, "{findings:#}");
    assert_eq!(nvml[0]["severity"], "info", "{:#}", nvml[0]);
}

#[test]
fn inprocess_leaves_nvml_to_the_job() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let o = gputrace_run(
        &w,
        Some("inprocess"),
        &[
            ("FAKE_NVML_SCENARIO", "healthy"),
            // The library loads the default name: the fake, found first.
            (
                "LD_LIBRARY_PATH",
                fake_nvml().parent().unwrap().to_str().unwrap(),
            ),
        ],
    );
    let (procs, envs) = split_files(&o);
    assert_eq!((procs.len(), envs.len()), (1, 0), "{:?}", o.traces);
    assert_eq!(
        environment::fact(&procs[0], fmt::FACT_HOST, "nvml"),
        Some("ok")
    );
    assert!(!procs[0].gpu_samples.is_empty());
}

#[test]
fn an_environment_file_alone_is_an_error_and_dumps() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let fake = fake_nvml().to_string_lossy().into_owned();
    let o = gputrace_run(&w, Some(&fake), &[]);
    let (_, envs) = split_files(&o);
    let env_file = envs[0].path.to_string_lossy().into_owned();
    for cmd in ["report", "summary"] {
        let r = w
            .program(gputrace_bin(), &[cmd, &env_file])
            .untraced()
            .run();
        assert_eq!(r.status.code(), Some(1), "{cmd}: {}", r.stderr);
        assert_eq!(r.stdout, "", "{cmd}");
        assert!(r.stderr.contains("is an environment file"), "{}", r.stderr);
        assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    }
    let d = w
        .program(gputrace_bin(), &["dump", &env_file])
        .untraced()
        .run();
    d.assert_ok();
    assert!(d.stdout.contains("\"type\":\"gpu_sample\""), "{}", d.stdout);
    assert!(d.stdout.contains("\"driver_version\""), "{}", d.stdout);
    // Given with the trace, the report covers one process.
    let mut args = vec!["report".to_string(), "--json".to_string()];
    args.extend(o.traces.iter().map(|p| p.to_string_lossy().into_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = w.program(gputrace_bin(), &args).untraced().run();
    r.assert_ok();
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("JSON");
    assert_eq!(v["processes"].as_array().map(|a| a.len()), Some(1), "{v}");
}

// NVML GPM: read by `gputrace run` beside the job, as the fake's FAKE_NVML_GPM profile says.

/// `gputrace run --json -- APP busy 0.6` (kernels of 2 ms back to back) with the fake
/// NVML's GPM in `gpm`, sampled every 20 ms.
fn gputrace_run_gpm(w: &Wheel, gpm: &str) -> Output {
    let traces = w.traces.to_string_lossy().into_owned();
    let app = w.app.to_string_lossy().into_owned();
    let o = w
        .program(
            gputrace_bin(),
            &["run", "--json", "-o", &traces, "--", &app, "busy", "0.6"],
        )
        .untraced()
        .unset("GPUTRACE_DIR")
        .env("FAKE_NVML_JOB", "child")
        .env("GPUTRACE_NVML", fake_nvml().to_string_lossy())
        .env("FAKE_NVML_GPM", gpm)
        .env("GPUTRACE_GPM_MS", "20")
        .env("FAKE_KERNEL_US", "2000")
        .run();
    o.assert_ok();
    assert!(o.stdout.contains("busy: done"), "{}", o.stdout);
    o
}

#[test]
fn a_cupti_clock_of_ticks_is_converted_at_its_rate() {
    // CUPTI counting 2.1 ticks a ns from another origin (torch.profiler's TSC callback):
    // kernels of 2 ms back to back must read 2 ms, where the launches made them.
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let traces = w.traces.to_string_lossy().into_owned();
    let app = w.app.to_string_lossy().into_owned();
    let o = w
        .program(
            gputrace_bin(),
            &["run", "-o", &traces, "--", &app, "busy", "0.4"],
        )
        .untraced()
        .unset("GPUTRACE_DIR")
        .env("FAKE_KERNEL_US", "2000")
        .env("FAKE_CUPTI_TICKS_PER_NS", "2.1")
        .run();
    o.assert_ok();
    let (procs, _) = split_files(&o);
    let t = &procs[0];
    let mut durs: Vec<u64> = t.kernels.iter().map(|k| k.end - k.start).collect();
    assert!(durs.len() >= 20, "{} kernels\n{}", durs.len(), o.stderr);
    durs.sort_unstable();
    let median = durs[durs.len() / 2];
    // 2 ms asleep in the launch, give or take the scheduler (2.1 times that if the
    // ticks were read as ns).
    assert!(
        (1_900_000..3_000_000).contains(&median),
        "median {median} ns"
    );
    // Each kernel inside the span of the calls (within the first pair's 5 ms).
    let (lo, hi) = (
        t.apis.iter().map(|a| a.start).min().unwrap(),
        t.apis.iter().map(|a| a.end).max().unwrap(),
    );
    for k in t.kernels.iter() {
        assert!(
            k.start + 10_000_000 >= lo && k.end <= hi + 10_000_000,
            "kernel {}..{} outside the calls {lo}..{hi}",
            k.start,
            k.end
        );
    }
}

fn finding<'a>(r: &'a serde_json::Value, id: &str) -> Option<&'a serde_json::Value> {
    r["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["id"] == id)
}

#[test]
fn gpm_samples_reach_the_environment_file_and_make_a_memory_bound_job_memory_bound() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let o = gputrace_run_gpm(&w, "memory");
    let (procs, envs) = split_files(&o);
    assert_eq!((procs.len(), envs.len()), (1, 1), "{:?}", o.traces);
    let e = &envs[0];
    assert_eq!(environment::fact(e, 0, "gpm"), Some("ok"));
    let c = &e.counter_samples;
    assert!(c.len() >= 3, "{c:?}\n{}", o.stderr);
    for s in c {
        assert_eq!(s.source, fmt::COUNTER_SOURCE_GPM);
        assert_eq!((s.device, s.instance), (0, fmt::ENV_NA));
        assert_eq!((s.sm_active, s.occupancy, s.dram), (9_980, 9_000, 5_850));
        assert_eq!(
            (s.tensor_active, s.tensor_hmma, s.fp32_active),
            (0, 0, 1_200)
        );
        assert_eq!(s.nvlink_rx_bytes, fmt::ENV_NA64, "the fake has no NVLink");
        assert!(s.end > s.start);
    }
    // Pairs follow one another.
    for p in c.windows(2) {
        assert_eq!(p[1].start, p[0].end, "{p:?}");
    }
    // Nothing was loaded into the job for it: the process trace has no samples itself.
    assert!(procs[0].counter_samples.is_empty());
    let r = report_json(&o);
    let p = &r["processes"][0];
    assert_eq!(p["measured"]["source"], "gpm", "{p}");
    assert_eq!(p["measured"]["dram_pct"].as_f64(), Some(58.5), "{p}");
    let f = finding(&r, "memory_bound").unwrap_or_else(|| panic!("no memory_bound: {r:#}"));
    assert_eq!(f["metrics"]["dram_pct"].as_f64(), Some(58.5), "{f}");
    assert!(f["title"].as_str().unwrap().contains("DRAM 58%"), "{f}");
    assert!(f["fix"].as_str().unwrap().contains("torch.compile"), "{f}");
    assert_eq!(r["findings"][0]["id"], "memory_bound", "{r:#}");
    let k = &p["measured_kernels"][0];
    assert_eq!(
        (k["verdict"].as_str(), k["attribution"].as_str()),
        (Some("memory_bound"), Some("exact")),
        "{k}"
    );
}

#[test]
fn a_tensor_bound_job_is_not_memory_bound_and_its_tensor_share_is_reported() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let o = gputrace_run_gpm(&w, "tensor");
    let r = report_json(&o);
    assert!(finding(&r, "memory_bound").is_none(), "{r:#}");
    let p = &r["processes"][0];
    assert_eq!(
        p["measured"]["tensor_active_pct"].as_f64(),
        Some(93.0),
        "{p}"
    );
    assert_eq!(p["measured"]["occupancy_pct"].as_f64(), Some(14.0), "{p}");
    assert_eq!(p["measured_kernels"][0]["verdict"], "tensor_bound", "{p}");
}

#[test]
fn a_gpu_without_gpm_or_refusing_it_costs_nothing_and_says_why() {
    for (gpm, why) in [
        ("unsupported", "unsupported_device: "),
        ("noperm", "no_permission: "),
    ] {
        let w = Wheel::new(Cuda::V13, Layout::Flat);
        let o = gputrace_run_gpm(&w, gpm);
        let (procs, envs) = split_files(&o);
        assert_eq!((procs.len(), envs.len()), (1, 1), "{gpm}: {:?}", o.traces);
        let e = &envs[0];
        let fact = environment::fact(e, 0, "gpm").unwrap_or_default();
        assert!(fact.starts_with(why), "{gpm}: {fact}");
        assert!(e.counter_samples.is_empty(), "{gpm}");
        assert!(
            !e.gpu_samples.is_empty(),
            "{gpm}: the other NVML samples go on"
        );
        let r = report_json(&o);
        assert!(r["processes"][0].get("measured").is_none(), "{gpm}");
        assert!(finding(&r, "memory_bound").is_none(), "{gpm}");
    }
}

#[test]
fn a_hung_gpm_call_never_holds_the_job_or_the_other_samples() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let o = gputrace_run_gpm(&w, "hang");
    let (procs, envs) = split_files(&o);
    assert_eq!((procs.len(), envs.len()), (1, 1), "{:?}", o.traces);
    assert!(envs[0].counter_samples.is_empty());
    assert!(
        envs[0].gpu_samples.len() >= 2,
        "the NVML ticks go on beside it"
    );
    assert!(!envs[0].stats.cut_short(), "{:?}", envs[0].stats);
    let r = report_json(&o);
    assert_eq!(r["processes"].as_array().map(|a| a.len()), Some(1), "{r}");
}
