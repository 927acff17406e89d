//! Return values and errno pass through the traced calls untouched, and the trace
//! records the failures as the program saw them.

use gputrace_tests::{Cuda, Layout, Wheel};

#[test]
fn return_values_and_errno_pass_through() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let base = w.app(&["retcodes"]).untraced().run();
    base.assert_ok();
    assert!(base.stdout.contains("checks passed"), "{}", base.stdout);
    let out = w.app(&["retcodes"]).run();
    assert!(
        out.status.success(),
        "the app saw different return values or errno under the tracer:\n{}",
        out.stderr
    );
    assert_eq!(out.stdout, base.stdout);
    assert_eq!(out.stderr, "");
}

#[test]
fn failed_calls_are_recorded_with_their_codes() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let out = w.app(&["retcodes"]).run();
    // Whether or not errno survived (the other test), the calls were made.
    let t = out.only_trace();
    t.assert_complete();
    let results = |name: &str| -> Vec<(u32, u64)> {
        let mut v: Vec<_> = t
            .apis_named(name)
            .iter()
            .map(|a| (a.corr, (a.result, a.bytes)))
            .collect();
        v.sort();
        v.into_iter().map(|(_, r)| r).collect()
    };
    assert_eq!(results("cudaMemcpy"), [(11, 0xDEAD), (0, 16)]);
    assert_eq!(results("cudaMemcpyAsync"), [(11, 0xDEAD)]);
    assert_eq!(results("cudaMemset"), [(1, 0xDEAD)]);
    assert_eq!(results("cudaMemsetAsync"), [(1, 0xDEAD)]);
    assert_eq!(results("cudaMalloc"), [(0, 64), (2, 0xDEAD)]);
    assert_eq!(results("cudaLaunchKernel"), [(9, 0), (0, 0)]);
    assert_eq!(results("cudaStreamSynchronize"), [(400, 0)]);
    assert_eq!(results("cudaDeviceSynchronize"), [(0, 0)]);
    // Failed calls did no GPU work.
    let ks = t.kernels();
    assert_eq!(ks.len(), 1);
    assert_eq!(t.str(ks[0].name), "_Z4goodv");
    assert_eq!(t.memcpys().len(), 1);
    assert_eq!(t.memcpys()[0].bytes, 16);
    assert!(t.memsets().is_empty());
    assert_eq!(t.memories().len(), 2, "one allocation and its free");
}
