//! Driver-API calls (cuLaunchKernel, cuMemcpy*Async, cuStreamSynchronize) made by the
//! program itself, as JAX/XLA and Triton make them, are recorded and linked to their GPU
//! work like runtime calls; the driver call a runtime call makes underneath is not
//! recorded a second time. By default every one is recorded from the start; with
//! `GPUTRACE_DRIVER_API=auto` the driver's launch callbacks go on only once kernels no
//! runtime call launched are seen, so a program that launches through the runtime alone
//! pays nothing for them.

use gputrace_format as fmt;
use gputrace_tests::{gputrace_bin, Cuda, Layout, Trace, Wheel};

const RUNTIME_K: &str = "_Z7runtimev";
const DRIVER_K: &str = "_Z6driverv";

fn driver_run(w: &Wheel, args: &[&str], env: &[(&str, &str)]) -> gputrace_tests::Output {
    let mut run = w.app(args);
    for (k, v) in env {
        run = run.env(k, v);
    }
    let out = run.run();
    out.assert_ok();
    out
}

/// The fake's count of nested driver callbacks that reached a subscriber.
fn nested_delivered(stdout: &str) -> u64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("nested driver callbacks delivered: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no count in {stdout}"))
}

fn checked_driver_trace(w: &Wheel, env: &[(&str, &str)]) -> Trace {
    let out = driver_run(w, &["driver"], env);
    assert!(out.stdout.contains("6 driver launches"), "{}", out.stdout);
    let t = out.only_trace();
    t.assert_complete();
    t
}

#[test]
fn driver_launches_are_recorded_once_and_linked_to_their_kernels() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    // The default: the driver's launches from the start.
    let t = checked_driver_trace(&w, &[]);

    // Each launch once: the runtime's own cuLaunchKernel underneath cudaLaunchKernel
    // (delivered by the fake as CUPTI does) is skipped.
    let rt = t.apis_named("cudaLaunchKernel");
    let drv = t.apis_named("cuLaunchKernel");
    assert_eq!(rt.len(), 4, "runtime launches");
    assert_eq!(drv.len(), 6, "driver launches, none doubled: {drv:?}");
    assert!(rt.iter().all(|a| a.domain == fmt::DOMAIN_RUNTIME));
    assert!(drv
        .iter()
        .all(|a| a.domain == fmt::DOMAIN_DRIVER && a.cbid == 307 && a.result == 0));
    // The nested calls took ids from their own range; none of them may appear.
    assert!(
        t.apis().iter().all(|a| a.corr < 1 << 30),
        "a nested driver call was recorded"
    );
    assert!(t.apis_named("cuMemcpyAsync").is_empty());

    // Every kernel is linked to the call that launched it, through its correlation id.
    let by_corr = t.api_by_corr();
    for (kernel, call, n) in [
        (RUNTIME_K, "cudaLaunchKernel", 4),
        (DRIVER_K, "cuLaunchKernel", 6),
    ] {
        let ks = t.kernels_named(kernel);
        assert_eq!(ks.len(), n, "{kernel}");
        for k in ks {
            let a = by_corr
                .get(&k.corr)
                .unwrap_or_else(|| panic!("{k:?} unlinked"));
            assert_eq!(t.str(a.name), call, "{k:?}");
            assert!(a.start <= k.start, "{k:?} started before its launch {a:?}");
        }
    }

    // The driver copy carries its bytes and direction; the driver sync is a sync call.
    let cp = t.apis_named("cuMemcpyHtoDAsync_v2");
    assert_eq!(cp.len(), 1);
    assert_eq!((cp[0].bytes, cp[0].arg, cp[0].cbid), (4096, 1, 277));
    let sy = t.apis_named("cuStreamSynchronize");
    assert_eq!(sy.len(), 1);
    assert_eq!(sy[0].domain, fmt::DOMAIN_DRIVER);

    // The tracer's own cost: every callback of a recorded call on the calling thread
    // counted (two per call, ENTER and EXIT; the thread's very first callback comes
    // before its ring), with a time spent in them.
    let tid = rt[0].tid;
    let (mut calls, mut ns) = (0, 0);
    for e in t.events() {
        if let fmt::Event::TracerCost(c) = e {
            assert_eq!(c.tid, tid, "{c:?}");
            calls += c.calls;
            ns += c.ns;
        }
    }
    let recorded = t.apis().len() as u64;
    assert!(
        calls >= 2 * recorded - 1,
        "{calls} callbacks for {recorded} calls"
    );
    assert!(ns > 0 && ns < 10_000_000_000, "{ns} ns in our callbacks");

    // The report links them like runtime launches: the ten kernels and the copy linked,
    // none left over, and each launch call counted once (the report's window opens at
    // the first GPU work, so the first call may fall before it; doubled would be 16).
    let path = t.data.path.to_string_lossy().into_owned();
    let r = w
        .program(gputrace_bin(), &["report", "--json", &path])
        .untraced()
        .run();
    r.assert_ok();
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("JSON");
    let l = &v["processes"][0]["launches"];
    assert_eq!(l["linked"].as_u64(), Some(11), "{l}");
    assert_eq!(l["unlinked"].as_u64(), Some(0), "{l}");
    let calls = l["launch_calls"].as_u64().unwrap_or(0);
    assert!((9..=10).contains(&calls), "{l}");
    assert!(l["latency_p50_ns"].as_u64().is_some(), "{l}");
}

#[test]
fn driver_api_0_leaves_the_driver_calls_out() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let t = checked_driver_trace(&w, &[("GPUTRACE_DRIVER_API", "0")]);
    assert_eq!(t.apis_named("cudaLaunchKernel").len(), 4);
    assert!(
        t.apis().iter().all(|a| a.domain == fmt::DOMAIN_RUNTIME),
        "driver calls recorded with GPUTRACE_DRIVER_API=0"
    );
    // The GPU records are there all the same.
    assert_eq!(t.kernels_named(DRIVER_K).len(), 6);
}

#[test]
fn in_auto_mode_driver_launches_are_recorded_once_the_program_is_seen_making_them() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    // Two rounds of the ten launches; the app waits between them until the driver's
    // launch callbacks are on (it fails if they never come on).
    let out = driver_run(
        &w,
        &["driver", "2"],
        &[
            ("GPUTRACE_DRIVER_API", "auto"),
            ("GPUTRACE_CUPTI_FLUSH_MS", "20"),
        ],
    );
    assert!(out.stdout.contains("12 driver launches"), "{}", out.stdout);
    let t = out.only_trace();
    t.assert_complete();
    // The first round's driver launches went by before any of their kernels was seen;
    // the second round's are all recorded, once each, and linked to their kernels.
    let drv = t.apis_named("cuLaunchKernel");
    assert_eq!(drv.len(), 6, "{drv:?}");
    assert_eq!(t.kernels_named(DRIVER_K).len(), 12);
    let by_corr = t.api_by_corr();
    let linked = t
        .kernels_named(DRIVER_K)
        .iter()
        .filter(|k| {
            by_corr
                .get(&k.corr)
                .is_some_and(|a| t.str(a.name) == "cuLaunchKernel")
        })
        .count();
    assert_eq!(linked, 6);
    // Copies and syncs were on from the start.
    assert_eq!(t.apis_named("cuMemcpyHtoDAsync_v2").len(), 1);
    assert_eq!(t.apis_named("cuStreamSynchronize").len(), 1);
    assert!(
        t.apis().iter().all(|a| a.corr < 1 << 30),
        "a nested call was recorded"
    );
}

#[test]
fn in_auto_mode_a_runtime_only_program_gets_no_driver_launch_callbacks() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    // The fake counts the driver callbacks CUPTI would make underneath each runtime
    // launch: none reach us in auto mode, two per launch by default.
    let auto = driver_run(
        &w,
        &["launchloop", "2000"],
        &[("GPUTRACE_DRIVER_API", "auto")],
    );
    assert_eq!(nested_delivered(&auto.stdout), 0, "{}", auto.stdout);
    assert!(auto.only_trace().apis_named("cudaLaunchKernel").len() >= 3000);
    let on = driver_run(&w, &["launchloop", "2000"], &[]);
    assert_eq!(nested_delivered(&on.stdout), 2 * 3000, "{}", on.stdout);
}
