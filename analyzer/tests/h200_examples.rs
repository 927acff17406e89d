//! The bundled traces recorded on the H200 with the host samples, the environment file
//! `gputrace run` writes and Python call sites: what their reports must say.

use serde_json::Value;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `gputrace ARGS`, which must succeed: its stdout.
fn gputrace_ok(args: impl IntoIterator<Item = impl AsRef<OsStr>>) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn example(dir: &str) -> Vec<PathBuf> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(dir);
    let mut v: Vec<PathBuf> = std::fs::read_dir(&d)
        .unwrap_or_else(|e| panic!("{}: {e}", d.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "gtrace"))
        .collect();
    v.sort();
    assert_eq!(
        v.len(),
        2,
        "{dir}: a process trace and its environment file"
    );
    v
}

fn report(dir: &str) -> Value {
    let mut args: Vec<PathBuf> = vec!["report".into(), "--json".into()];
    args.extend(example(dir));
    serde_json::from_slice(&gputrace_ok(args)).unwrap()
}

fn finding<'a>(r: &'a Value, id: &str) -> &'a Value {
    r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
        .unwrap_or_else(|| panic!("no {id} in {}", r["findings"]))
}

#[test]
fn implicit_sync_names_the_line_that_read_the_loss() {
    let r = report("implicit_sync");
    assert_eq!(r["top_finding"], "implicit_sync");
    let site = &finding(&r, "implicit_sync")["call_sites"][0];
    assert!(
        site["file"].as_str().unwrap().ends_with("implicit_sync.py"),
        "{site}"
    );
    assert_eq!(site["line"], 18);
    // The verdict says it in the program's terms: what synchronised, and where.
    assert!(
        r["verdict"]
            .as_str()
            .unwrap()
            .contains("implicit_sync (34% of wall time, 59.4 ms): d2h_read, called from implicit_sync.py:18 in <module> (the loop is 26% of the 678.6 ms run: shutdown 42% (282.9 ms)"),
        "{}",
        r["verdict"]
    );
    // The environment file was merged: the process has its GPU's clocks.
    let env = &r["processes"][0]["environment"];
    assert_eq!(env["gpus"][0]["other_processes"], 0, "{env}");
    assert!(env["gpus"][0]["sm_clock_mhz_median"].as_u64().unwrap() > 0);
}

#[test]
fn shared_gpu_names_the_other_process_first() {
    let r = report("shared_gpu");
    assert_eq!(r["top_finding"], "env_shared_gpu");
    assert_eq!(
        r["processes"][0]["environment"]["gpus"][0]["other_processes"],
        1
    );
}

#[test]
fn workers_saturated_is_data_starvation_by_busy_workers() {
    let r = report("workers_saturated");
    assert_eq!(r["top_finding"], "data_starvation");
    assert_eq!(
        finding(&r, "data_starvation")["subcause"],
        "workers_saturated"
    );
}

#[test]
fn the_main_jobs_example_names_the_workers_and_the_lines() {
    let r = report("train");
    assert_eq!(r["top_finding"], "data_starvation");
    let ds = finding(&r, "data_starvation");
    assert_eq!(ds["subcause"], "workers_saturated");
    // The verdict names the sub-cause and the user's line the host waited at: the
    // DataLoader's `for` line (16-frame stacks reach it through the loader's frames).
    assert!(
        r["verdict"].as_str().unwrap().contains(
            "data_starvation (65% of wall time, 2.173 s): workers_saturated, host at train.py:42 in main"
        ),
        "{}",
        r["verdict"]
    );
    // The loop began with its first iteration (waiting at that line for the workers'
    // first batches), before the steady steps: most of the run, so the verdict has no
    // clause on the rest.
    let run = &r["processes"][0]["run"];
    let looped = run["by_kind"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kind"] == "loop")
        .unwrap();
    let pct = looped["pct"].as_f64().unwrap();
    assert!((50.0..60.0).contains(&pct), "{run}");
    assert!(!r["verdict"].as_str().unwrap().contains("the loop is"));
    let top = &ds["host_was_in"][0];
    assert!(top["file"].as_str().unwrap().ends_with("train.py"), "{top}");
    assert_eq!(top["line"], 42, "{top}");
    // GPU metrics from NVML GPM, read by `gputrace run` outside the job: measured, not
    // estimated, and nothing memory-bound in this input-starved job.
    assert!(r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["id"] != "memory_bound"));
    let line = |id: &str| finding(&r, id)["call_sites"][0]["line"].clone();
    assert_eq!(
        line("pageable_memcpy"),
        43,
        "x.to(dev) from pageable memory"
    );
    assert_eq!(line("implicit_sync"), 45, "loss.item()");
}

#[test]
fn the_environment_file_alone_is_refused() {
    let env = example("implicit_sync")
        .into_iter()
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("gputrace-env-")
        })
        .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .arg("report")
        .arg(env)
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn a_directory_stands_for_the_traces_in_it() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/train");
    let mut files: Vec<std::ffi::OsString> = vec!["report".into(), "--json".into()];
    files.extend(example("train").into_iter().map(Into::into));
    let by_dir = gputrace_ok([OsStr::new("report"), OsStr::new("--json"), dir.as_os_str()]);
    assert_eq!(by_dir, gputrace_ok(files));
}

#[test]
fn diff_and_summary_take_run_directories() {
    let ex = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let out = gputrace_ok([
        OsStr::new("diff"),
        ex.join("diff-pageable-memcpy/before").as_os_str(),
        ex.join("diff-pageable-memcpy/after").as_os_str(),
    ]);
    let text = String::from_utf8_lossy(&out);
    assert!(text.contains("pageable_memcpy gone"), "{text}");
    let out = gputrace_ok([OsStr::new("summary"), ex.join("train").as_os_str()]);
    let text = String::from_utf8_lossy(&out);
    // One summary: the process trace's (the environment file is no process).
    assert_eq!(
        text.matches("\ntrace ").count() + text.starts_with("trace ") as usize,
        1,
        "{text}"
    );
}

/// A PyTorch job stuck in a kernel that never ends, under `gputrace run`, ended with
/// SIGTERM after about 22 s (recorded on the H200): the hang leads, with the kernel, the
/// line the main thread waited at and how the job ended.
#[test]
fn the_stuck_job_names_the_kernel_the_wait_and_the_signal() {
    let r = report("stuck");
    assert_eq!(r["top_finding"], "hang");
    let v = r["verdict"].as_str().unwrap();
    assert!(v.starts_with("HANG: "), "{v}");
    for want in [
        "spin_kernel",
        "never completed",
        "`cudaDeviceSynchronize` at `hang_job.py:55`",
        "ended by SIGTERM",
    ] {
        assert!(v.contains(want), "{want:?} not in {v}");
    }
    let h = &finding(&r, "hang")["hang"];
    assert_eq!(h["source"], "stall_records", "{h}");
    assert_eq!(h["end"]["signal"], "SIGTERM", "{h}");
}

#[test]
fn page_faults_of_a_cold_start_are_not_waiting_for_input() {
    // generation_loop.py, the first CUDA job on a fresh machine: its main thread was in
    // `D` state outside any system call for 109.5 ms while kernels were paged in from
    // disk on first use. That is the thread running its own code (cpu_bound), never
    // data_starvation's "waiting for input" with a DataLoader fix. Since the token steps
    // are found (a name twice a step at uneven spacings counts), the cold first tokens
    // are start-up: 190 steps of 244 operations follow them, and the page faults are in
    // the start-up's idle time, charged to cpu_bound.
    let r = report("generation_loop_cold");
    assert_eq!(r["top_finding"], "launch_bound");
    let p = &r["processes"][0];
    assert_eq!(p["steps"]["count"], 190, "{}", p["steps"]);
    assert_eq!(p["steps"]["ops_per_step"], 244, "{}", p["steps"]);
    let causes = p["startup_breakdown"]["causes"].as_array().unwrap();
    assert_eq!(causes[0]["cause"], "cpu_bound", "{causes:?}");
    assert!(causes[0]["pct"].as_f64().unwrap() > 80.0, "{causes:?}");
    let starved: f64 = causes
        .iter()
        .filter(|c| c["cause"] == "data_starvation")
        .map(|c| c["pct"].as_f64().unwrap())
        .sum();
    assert!(starved < 5.0, "{causes:?}");
    let starving = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["id"] == "data_starvation" && f["severity"] != "info");
    assert!(!starving, "{}", r["findings"]);
}

/// `gputrace report --json DIR`: every trace of a run directory.
fn report_dir(dir: &str) -> Value {
    let d = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(dir);
    serde_json::from_slice(&gputrace_ok([
        OsStr::new("report"),
        OsStr::new("--json"),
        d.as_os_str(),
    ]))
    .unwrap()
}

#[test]
fn four_gloo_ranks_name_the_straggler_and_what_made_it_late() {
    // torchrun, 4 ranks sharing the H200 with gloo; rank 1 does 15 ms of host work before
    // every step. The launcher's trace is counted, not a rank.
    let r = report_dir("ranks_straggler");
    assert_eq!(r["processes"].as_array().unwrap().len(), 4);
    assert_eq!(r["processes_without_cuda"], 1);
    assert!(
        r.get("trace_set").is_none_or(|t| t.is_null()),
        "{}",
        r["trace_set"]
    );
    let c = &r["cluster"];
    assert_eq!(c["matching"], "host_copies");
    let s = c["straggler"].as_u64().unwrap() as usize;
    assert_eq!(r["processes"][s]["label"], "rank 1");
    assert!(c["straggler_last_pct"].as_f64().unwrap() > 90.0);
    let f = finding(&r, "comm_straggler");
    assert_eq!(f["rank"], "rank 1");
    assert_eq!(f["caused_by"], "cpu_bound");
    // 15 ms a step over 78 steps: what the others waited, each.
    let waited = f["metrics"]["others_wait_ns"].as_f64().unwrap() / 1e9;
    assert!((waited - 78.0 * 0.015).abs() < 0.15, "{waited}");
    let v = r["verdict"].as_str().unwrap();
    assert!(
        v.contains("on rank 1") && v.contains("ddp.py:51 in host_work"),
        "{v}"
    );
    // The others' own CPU time is gloo reducing on the CPU, with the fix for that.
    let theirs: Vec<&Value> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"] == "cpu_bound" && f["rank"] != "rank 1")
        .collect();
    assert_eq!(theirs.len(), 3);
    for f in theirs {
        assert_eq!(f["subcause"], "collective_on_cpu", "{}", f["summary"]);
        assert!(f["fix"].as_str().unwrap().contains("NCCL"));
    }
}

#[test]
fn four_gloo_ranks_name_the_rank_that_never_arrived() {
    // Rank 1 sleeps at ddp.py:63 after step 30; the others wait in the all-reduce until
    // the job is interrupted a minute later.
    let r = report_dir("ranks_hang");
    assert_eq!(r["top_finding"], "hang");
    let f = finding(&r, "hang");
    assert_eq!(f["rank"], "rank 1");
    let s = f["summary"].as_str().unwrap();
    assert!(s.contains("rank 0, rank 2, rank 3 reached"), "{s}");
    assert!(s.contains("rank 1 never arrived"), "{s}");
    assert!(s.contains("ddp.py:63"), "{s}");
    assert!(f["at_stake_ns"].as_f64().unwrap() > 55e9);
    // Each rank's header says how long it lived on after its last activity.
    for p in r["processes"].as_array().unwrap() {
        let q = p["ended"]["quiet_ns"].as_f64().unwrap_or(0.0);
        assert!(q > 55e9, "{}", p["ended"]);
    }
    // A stuck kernel's process was inside a call that never returned: not quiet.
    let r = report("stuck");
    assert!(r["processes"][0]["ended"].get("quiet_ns").is_none());
}

/// The pathology workloads recorded on an H100, each named by its own cause and line.
#[test]
fn the_h100_pathology_examples_name_their_cause() {
    let r = report("small_grid");
    assert_eq!(r["top_finding"], "small_grid");
    let f = finding(&r, "small_grid");
    assert!(f["metrics"]["gpu_util_pct"].as_f64().unwrap() > 99.0);
    assert!(f["metrics"]["sm_fill_pct"].as_f64().unwrap() < 1.0);
    // Copies from pinned memory without non_blocking, at the line that makes them.
    let r = report("sync_memcpy");
    assert_eq!(r["top_finding"], "sync_memcpy");
    let f = finding(&r, "sync_memcpy");
    assert_eq!(f["call_sites"][0]["line"], 11);
    assert_eq!(f["metrics"]["copies"], 59.0);
    // empty_cache() every step: implicit syncs of the allocator, at its line.
    let r = report("empty_cache_loop");
    assert_eq!(r["top_finding"], "implicit_sync");
    let f = finding(&r, "implicit_sync");
    assert_eq!(f["subcause"], "allocator");
    assert_eq!(f["call_sites"][0]["line"], 19);
    // Workers in disk waits: data starvation on storage, not on the workers' CPU.
    let r = report("io_bound_loader");
    assert_eq!(r["top_finding"], "data_starvation");
    let f = finding(&r, "data_starvation");
    assert_eq!(f["subcause"], "io_wait");
    assert!(f["metrics"]["worker_d_state_pct"].as_f64().unwrap() > 50.0);
    assert!(f["summary"]
        .as_str()
        .unwrap()
        .contains("io_bound_loader.py:64"));
}

#[test]
fn the_gallery_examples_say_what_each_workload_is() {
    let r = report("memory_bound");
    assert_eq!(r["top_finding"], "memory_bound");
    // The GIL holder: the thread and its line; optimizer.step's dynamo wrapper is not
    // compilation.
    let r = report("gil_holder");
    assert_eq!(r["top_finding"], "cpu_bound");
    let f = finding(&r, "cpu_bound");
    assert_eq!(f["subcause"], "gil_contention");
    assert!(f["summary"].as_str().unwrap().contains("gil_holder.py:12"));
    assert!(r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["id"] != "recompilation"));
    // A training step captured in a CUDA graph: its replays are the steps.
    let r = report("graph_train_step");
    assert_eq!(r["processes"][0]["steps"]["source"], "graph_replay");
    assert_eq!(
        finding(&r, "kernel_fragmentation")["subcause"],
        "graph_gaps"
    );
    // A window taken by attaching to a job started without the library.
    let r = report("attach_window");
    assert_eq!(r["processes"][0]["ended"]["how"], "window");
    assert_eq!(r["top_finding"], "implicit_sync");
}

#[test]
fn epochs_with_new_workers_each_time_are_told_apart_from_the_loop() {
    // Three epochs, 4 DataLoader workers started anew each time (0.6 s of set-up each),
    // gradient accumulation over two micro-batches: the script ran 180 optimizer steps and
    // timed its two boundaries at 0.661 and 0.660 s.
    let r = report("epochs");
    let run = &r["processes"][0]["run"];
    let eb: Vec<&Value> = run["phases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "epoch_boundary")
        .collect();
    assert_eq!(eb.len(), 2, "{}", run["phases"]);
    for p in eb {
        let s = (p["end_ns"].as_f64().unwrap() - p["start_ns"].as_f64().unwrap()) / 1e9;
        assert!((s - 0.66).abs() < 0.1, "{s}");
    }
    let steps = r["processes"][0]["steps"]["count"].as_f64().unwrap();
    assert!((steps - 180.0).abs() <= 5.0, "{steps}");
    let f = finding(&r, "data_starvation");
    assert_eq!(f["subcause"], "epoch_boundary");
    assert!(f["fix"]
        .as_str()
        .unwrap()
        .contains("persistent_workers=True"));
}
