//! Driver-API calls (cuLaunchKernel, cuMemcpy*Async, cuStreamSynchronize) made by the
//! program itself, as JAX/XLA and cuBLAS make them, are recorded by default and linked
//! to their GPU work like runtime calls; the driver call a runtime call makes underneath
//! is not recorded a second time.

use gputrace_format as fmt;
use gputrace_tests::{gputrace_bin, Cuda, Layout, Trace, Wheel};

const RUNTIME_K: &str = "_Z7runtimev";
const DRIVER_K: &str = "_Z6driverv";

fn driver_trace(w: &Wheel, env: &[(&str, &str)]) -> Trace {
    let mut run = w.app(&["driver"]);
    for (k, v) in env {
        run = run.env(k, v);
    }
    let out = run.run();
    out.assert_ok();
    assert!(out.stdout.contains("6 driver launches"), "{}", out.stdout);
    let t = out.only_trace();
    t.assert_complete();
    t
}

#[test]
fn driver_launches_are_recorded_once_and_linked_to_their_kernels() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let t = driver_trace(&w, &[]);

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
    let t = driver_trace(&w, &[("GPUTRACE_DRIVER_API", "0")]);
    assert_eq!(t.apis_named("cudaLaunchKernel").len(), 4);
    assert!(
        t.apis().iter().all(|a| a.domain == fmt::DOMAIN_RUNTIME),
        "driver calls recorded with GPUTRACE_DRIVER_API=0"
    );
    // The GPU records are there all the same.
    assert_eq!(t.kernels_named(DRIVER_K).len(), 6);
}
