//! `launch_bound` is launch latency (issue 38, item 5): only a GPU gap of the order of one
//! launch (at most 4x the trace's median launch interval, within 100 us to 1 ms) is
//! charged to it; in a longer gap the host was doing something else, and the gap goes to
//! that (`data_starvation` / `cpu_bound`, `other_cuda_call` for a launch call that took
//! milliseconds).

mod common;

use common::*;
use gputrace_analyzer::report::{analyze, FindingId, Report};

/// Idle time charged to `cause` (a finding's id or an unattributed cause's name).
fn idle(r: &Report, cause: &str) -> u64 {
    let b = &r.processes[0].breakdown;
    b.causes
        .iter()
        .chain(&b.unattributed)
        .filter(|c| c.cause == cause)
        .map(|c| c.ns)
        .sum()
}

/// A torch.compile(mode="reduce-overhead") loop: the host replays a graph every 96 us
/// (130 us of GPU work each, so the GPU runs behind the host), and every 20 replays it
/// spends 7 ms in Python, making a cheap non-launch CUDA call every 60 us. In step
/// `slow_launch` the first replay's launch call takes 3 ms (a module loaded on first
/// use). The GPU idles ~5.6 ms a step: the 7 ms less the work still queued.
fn reduce_overhead(steps: usize, slow_launch: usize) -> B {
    let mut b = B::new();
    let mut h = startup(&mut b, 2 * GIB);
    let mut gpu = h;
    for step in 0..steps {
        for r in 0..20 {
            let call = if step == slow_launch && r == 0 {
                3 * MS
            } else {
                10 * US
            };
            let c = b.api(TID, h, call, GRAPH_LAUNCH, "cudaGraphLaunch", 0, 0);
            let start = gpu.max(h + call);
            b.kernel_shape(start, 130 * US, "graph_replay", c, BIG);
            gpu = start + 130 * US;
            h += call.max(96 * US);
        }
        // 7 ms of host work between replays, with a small CUDA call every 60 us.
        let end = h + 7 * MS;
        while h < end {
            b.api(TID, h, 5 * US, 9999, "cudaStreamIsCapturing", 0, 0);
            h += 60 * US;
        }
    }
    b
}

#[test]
fn long_host_gaps_between_replays_are_not_launch_bound() {
    let r = analyze(&[reduce_overhead(30, 10).build()]);
    let text = gputrace_analyzer::render_text(&r);
    let lb = idle(&r, "launch_bound");
    let ds = idle(&r, "data_starvation");
    let other = idle(&r, "other_cuda_call");
    // Each step's ~5.6 ms gap is host work: its quiet stretches between the small calls
    // (55 us each: "back to back" calls) are not launch latency in a gap this long.
    assert!(ds > 100 * MS, "data_starvation {ds}\n{text}");
    assert!(lb < ds / 100, "launch_bound {lb} vs {ds}\n{text}");
    assert!(
        r.findings
            .iter()
            .all(|f| f.id != FindingId::LaunchBound || f.at_stake_ns < ds / 100),
        "{text}"
    );
    // The 3 ms launch call inside a gap is a CUDA call that took long, not launch latency.
    assert!(other >= 3 * MS, "other_cuda_call {other}\n{text}");
}

#[test]
fn short_gaps_between_back_to_back_launches_are_still_launch_bound() {
    // Eager PyTorch on tiny kernels: a launch every 8 us, 2 us kernels; every 10 launches
    // 60 us of Python between layers (still of the order of a launch: under the 100 us
    // floor), and once a step 150 us with no call at all (over it).
    let mut b = B::new();
    let mut h = startup(&mut b, 2 * GIB);
    for _ in 0..20 {
        for j in 0..50 {
            b.launch(
                h,
                3 * US,
                h + 5 * US,
                2 * US,
                &format!("elementwise_{j}"),
                BIG,
            );
            h += 8 * US;
            if j % 10 == 9 {
                h += 60 * US;
            }
        }
        h += 150 * US;
    }
    let r = analyze(&[b.build()]);
    let text = gputrace_analyzer::render_text(&r);
    assert_eq!(r.findings[0].id, FindingId::LaunchBound, "{text}");
    let lb = idle(&r, "launch_bound");
    let ds = idle(&r, "data_starvation");
    let p = &r.processes[0].breakdown;
    // Per step: 50 gaps of ~6 us plus 4 of ~66 us are launch latency; the 150 us one
    // (plus its launch's 6 us) is not.
    assert!(lb * 100 >= p.idle_ns * 60, "{lb} of {}\n{text}", p.idle_ns);
    assert!(ds >= 19 * 150 * US, "data_starvation {ds}\n{text}");
}
