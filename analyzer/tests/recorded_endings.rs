//! Jobs recorded on an H100 (`scripts/gpu/batch.sh`, PARTS=phases,endings; results in
//! bench/results/2026-12-06-run19-endings-phases-judgement-h100) and bundled under
//! examples/: how each ended, a run that compiles again and again, and a first step
//! slowed by imports.

mod common;

use common::gputrace;
use serde_json::Value;
use std::path::PathBuf;

fn report(dir: &str) -> (i32, Value) {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(dir);
    let (code, out, err) = gputrace(&["report", "--json", p.to_str().unwrap()]);
    let v = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{dir}: {e}: {err}"));
    (code, v)
}

/// torch.cuda.OutOfMemoryError ended it with status 1: the verdict leads with the
/// status and the failed allocation, and the top finding is the death, not "Healthy".
#[test]
fn a_job_that_died_of_cuda_oom_says_so() {
    let (code, r) = report("oom");
    assert_eq!(code, 0);
    assert_eq!(r["top_finding"], "out_of_memory");
    let v = r["verdict"].as_str().unwrap();
    assert!(
        v.starts_with("The process exited with status 1 after cudaMalloc of 1.0 GiB failed with cudaErrorMemoryAllocation"),
        "{v}"
    );
    assert!(v.contains("oom.py:15"), "{v}");
    let p = &r["processes"][0];
    assert_eq!(p["ended"]["status"], 1);
    assert_eq!(p["ended"]["normal"], false);
    assert_eq!(
        p["fatal_call"]["kind"], "out_of_memory",
        "{}",
        p["fatal_call"]
    );
}

/// A GPU-bound job SIGKILLed after about 5 s (3120 kernels completed by its own count):
/// the periodic handover kept 2799 steps' kernels, where the trace used to hold none.
#[test]
fn a_busy_job_killed_keeps_its_kernels_and_says_how_it_ended() {
    let (code, r) = report("sigkill");
    // Cut short (no end record), not damaged: exit 0.
    assert_eq!(code, 0);
    let v = r["verdict"].as_str().unwrap();
    assert!(v.starts_with("The process was killed by SIGKILL"), "{v}");
    let p = &r["processes"][0];
    assert_eq!(p["ended"]["signal"], "SIGKILL");
    assert!(
        p["steps"]["count"].as_u64().unwrap() > 2000,
        "{}",
        p["steps"]
    );
    assert!(!v.contains("No GPU activity"), "{v}");
}

/// torch.compile with a batch size that changes every step (dynamic shapes off): most
/// of the run is compilation, and that is the verdict, not a launch-bound "steady state".
#[test]
fn a_run_that_recompiles_every_step_is_told_so() {
    let (_, r) = report("recompile");
    assert_eq!(r["top_finding"], "recompilation");
    let p = &r["processes"][0];
    let run = &p["run"];
    let span = run["span_ns"].as_f64().unwrap();
    let compiling: f64 = run["by_kind"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["kind"] == "compilation")
        .map(|k| k["ns"].as_f64().unwrap())
        .sum();
    // The script's own marks: 21.0 s compiling; the run is 28.4 s to the last host
    // sample (2.9 s of it the compile pool shutting down after the last CUDA work): 74%.
    assert!(
        compiling / span > 0.7 && compiling / span < 0.85,
        "{}",
        compiling / span
    );
    // 8 batch sizes, each compiling a forward and (in the autograd thread) a backward
    // graph: 7 sizes after the first loop, 14 graphs. Autotuning's kernels between the
    // samples of one compilation do not split it.
    let n = run["recompiles"].as_u64().unwrap();
    assert!((7..=24).contains(&n), "{n}: {run}");
    assert_eq!(run["compiler"], "torch");
}

/// `sync_per_layer.py` (scripts/workloads/judgement): its first optimizer step imported
/// modules for 5.7 s with the GPU idle, before 150 regular steps. The steps are those
/// 150 and more, not three around the import (the step anchor used to be the copies of
/// the weights before the first step: every step after the import was lost).
#[test]
fn a_slow_first_step_does_not_hide_the_loop() {
    let (_, r) = report("lazy_import");
    let p = &r["processes"][0];
    assert!(
        p["steps"]["count"].as_u64().unwrap() >= 150,
        "{}",
        p["steps"]
    );
    // The steady state is the loop (about 1.1 s), not the 6 s import stretch.
    assert!(
        p["steady"]["wall_ns"].as_u64().unwrap() < 2_000_000_000,
        "{}",
        p["steady"]
    );
    assert_ne!(r["top_finding"], "cpu_bound", "{}", r["verdict"]);
}

/// After its last CUDA work a process that exits normally goes on: its exit handlers are
/// the run's shutdown (io_bound_loader's DataLoader workers, stuck in slow reads, made each
/// join wait out its timeout: 20.6 s), the program's own code still running is host work
/// (ranks_hang's rank waiting at its line for 60 s), and a process ended by a signal
/// (stuck, SIGTERM after its hang) has no shutdown: its run ends with its CUDA work.
#[test]
fn the_time_after_the_last_cuda_work_is_the_shutdown_only_when_it_was_one() {
    let kinds = |r: &Value| -> Vec<(String, u64)> {
        r["processes"][0]["run"]["by_kind"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| {
                (
                    k["kind"].as_str().unwrap().to_string(),
                    k["ns"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let (_, r) = report("io_bound_loader");
    let run = &r["processes"][0]["run"];
    let shutdown = run["by_kind"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kind"] == "shutdown")
        .unwrap_or_else(|| panic!("{:?}", kinds(&r)));
    assert!(
        shutdown["ns"].as_u64().unwrap() > 15_000_000_000,
        "{shutdown}"
    );
    assert_eq!(
        shutdown["host_at"]["function"], "_clean_up_worker",
        "{shutdown}"
    );
    assert!(
        run["span_ns"].as_u64() > run["gpu_end_ns"].as_u64(),
        "{run}"
    );
    // Listed with its fix, never the verdict (a one-time cost, as start-up is).
    let f = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "slow_shutdown")
        .unwrap_or_else(|| panic!("{}", r["findings"]));
    assert_eq!(f["severity"], "info", "{f}");
    assert!(f["fix"].as_str().unwrap().contains("DataLoader"), "{f}");
    assert_eq!(r["top_finding"], "data_starvation");

    let (_, r) = report("ranks_hang");
    let k = kinds(&r);
    let host = k.iter().find(|x| x.0 == "host_work").map_or(0, |x| x.1);
    assert!(host > 50_000_000_000, "{k:?}");

    let (_, r) = report("stuck");
    let run = &r["processes"][0]["run"];
    assert!(
        !kinds(&r).iter().any(|x| x.0 == "shutdown"),
        "{:?}",
        kinds(&r)
    );
    assert_eq!(run["span_ns"], run["gpu_end_ns"], "{run}");
}
