//! Lost records are counted, never hidden: with a buffer pool too small to keep up,
//! every launch is either in the trace or in a Dropped count.

use gputrace_format as fmt;
use gputrace_tests::{Cuda, Layout, Wheel};

#[test]
fn exhausted_buffer_pool_is_accounted_for() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    // One 1 MiB buffer in all: when it fills, CUPTI hands it over and at once asks for
    // the next one, which cannot exist before the writer has read the first; the
    // records that find no buffer are dropped (at least one per full buffer).
    let out = w
        .app(&["spin", "0.5"])
        .env("GPUTRACE_BUFFER_KB", "1024")
        .env("GPUTRACE_BUFFER_POOL_MB", "1")
        .env("GPUTRACE_FLUSH_MS", "1000")
        .run();
    out.assert_ok();
    assert_eq!(out.stderr, "");
    let t = out.only_trace();
    t.assert_complete();
    let launches = t.apis_named("cudaLaunchKernel").len() as u64;
    let kernels = t.kernels().len() as u64;
    let dropped = t.dropped();
    let cupti = dropped.get(&fmt::DROP_CUPTI).copied().unwrap_or(0);
    let pool = dropped.get(&fmt::DROP_BUFFER_POOL).copied().unwrap_or(0);
    assert!(
        launches > 2 * (1 << 20) / 216,
        "the run filled the buffer at least twice ({launches} launches)"
    );
    assert!(cupti > 0, "no CUPTI drops reported: {dropped:?}");
    assert!(pool > 0, "no buffer-pool refusals reported: {dropped:?}");
    assert_eq!(
        kernels + cupti,
        launches,
        "launches {launches} = kernels in the trace {kernels} + dropped {cupti}"
    );
    assert_eq!(
        dropped.get(&fmt::DROP_RING).copied().unwrap_or(0),
        0,
        "host API records are not lost: {dropped:?}"
    );
}
