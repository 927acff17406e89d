//! Findings that hold up against measurement: an estimate is bounded by the GPU's
//! counters where they were sampled, and says what it assumed where not; an unchecked
//! estimate does not outrank a measured cause of similar size; memory_headroom only for
//! training, with the time of one finding it overlaps, never their sum; a consequence
//! (launch gaps after every wait for the GPU) linked to its cause and ranked after it.

mod common;

use common::*;
use gputrace_analyzer::report::{analyze, render_text, FindingId, Report, Severity};
use gputrace_analyzer::Trace;
use gputrace_format::{self as fmt, Event};

fn report(t: Trace) -> Report {
    analyze(&[t])
}

/// `b` with SM activity samples of 1 ms over its whole span, each reading `sm_pct`.
fn with_sm_activity(mut b: B, sm_pct: u32) -> Trace {
    let end = b
        .events()
        .iter()
        .filter_map(|e| match e {
            Event::Kernel(k) => Some(k.end),
            _ => None,
        })
        .max()
        .unwrap();
    let mut ts = T0;
    while ts < end {
        b.ev.push(Event::CounterSample(fmt::CounterSample {
            start: ts,
            end: ts + MS,
            device: 0,
            sm_active: sm_pct * 100,
            occupancy: 1_000,
            ..Default::default()
        }));
        ts += MS;
    }
    b.build()
}

/// A training job's mark: a Python frame of the optimizer among the trace's strings.
fn training(mut b: B) -> B {
    b.s("torch/optim/adam.py");
    b
}

#[test]
fn small_grid_is_bounded_by_the_sm_activity_measured() {
    // Unchecked: the estimate, saying what it assumed.
    let r = report(small_grid(20, GIB).build());
    let f = r
        .findings
        .iter()
        .find(|f| f.id == FindingId::SmallGrid)
        .unwrap();
    assert!(f.estimated);
    assert!(
        f.evidence
            .iter()
            .any(|e| e.contains("assuming every resident-block slot")),
        "{:?}",
        f.evidence
    );
    let est = f.at_stake_ns;
    // GPM read the SMs 60% active while kernels ran nearly all the time: at most ~40%
    // of the steady state can be SMs with no warp, whatever the grid sizes say (~99%).
    let r = report(with_sm_activity(small_grid(20, GIB), 60));
    let g = r
        .findings
        .iter()
        .find(|f| f.id == FindingId::SmallGrid)
        .unwrap();
    assert!(!g.estimated, "bounded by a measurement");
    let bound = g.metrics["measured_bound_ns"] as u64;
    assert_eq!(g.at_stake_ns, bound);
    assert!(
        bound < est * 45 / 100 && bound > est * 35 / 100,
        "{bound} vs {est}"
    );
    assert_eq!(g.metrics["estimate_ns"] as u64, est);
    assert!(
        g.evidence
            .iter()
            .any(|e| e.starts_with("measured: SMs active 60%") && e.contains("capped at it")),
        "{:?}",
        g.evidence
    );
    // A measurement that leaves more room than the estimate keeps the estimate.
    let r = report(with_sm_activity(small_grid(20, GIB), 0));
    let h = r
        .findings
        .iter()
        .find(|f| f.id == FindingId::SmallGrid)
        .unwrap();
    assert_eq!(h.at_stake_ns, est);
    assert!(h.evidence.iter().any(|e| e.contains("within it")));
}

#[test]
fn memory_headroom_only_for_training_and_never_a_sum() {
    // Inference or a job with no sign of training: a larger batch is not the caller's.
    let r = report(small_grid(20, GIB).build());
    assert!(r.findings.iter().all(|f| f.id != FindingId::MemoryHeadroom));
    // Training, the small-grid time only an estimate: info.
    let r = report(training(small_grid(20, GIB)).build());
    let m = r
        .findings
        .iter()
        .find(|f| f.id == FindingId::MemoryHeadroom)
        .unwrap();
    let g = r
        .findings
        .iter()
        .find(|f| f.id == FindingId::SmallGrid)
        .unwrap();
    assert_eq!(m.severity, Severity::Info);
    assert_eq!(m.at_stake_ns, g.at_stake_ns, "the same time, not a sum");
    assert!(m.estimated);
    // Measured (bounded by GPM): a warning, ranked right after small_grid.
    let r = report(with_sm_activity(training(small_grid(20, GIB)), 10));
    let m = r
        .findings
        .iter()
        .find(|f| f.id == FindingId::MemoryHeadroom)
        .unwrap();
    let g = r
        .findings
        .iter()
        .find(|f| f.id == FindingId::SmallGrid)
        .unwrap();
    assert_eq!(m.severity, Severity::Warn);
    assert_eq!(m.at_stake_ns, g.at_stake_ns);
    assert!(!m.estimated);
    let pos = |id: FindingId| r.findings.iter().position(|f| f.id == id).unwrap();
    assert_eq!(
        pos(FindingId::MemoryHeadroom),
        pos(FindingId::SmallGrid) + 1
    );
    // A training job launch-bound: the launch-bound time, not it plus small_grid's.
    let r = report(training(launch_bound(40)).build());
    if let Some(m) = r
        .findings
        .iter()
        .find(|f| f.id == FindingId::MemoryHeadroom)
    {
        let lb = r
            .findings
            .iter()
            .find(|f| f.id == FindingId::LaunchBound)
            .unwrap();
        assert!(
            m.at_stake_ns <= lb.at_stake_ns,
            "{} > {}",
            m.at_stake_ns,
            lb.at_stake_ns
        );
    }
}

/// A wait after every layer: per layer a launch call of 5 us whose kernel of 3 us starts
/// 1 us after it returns, 5 us later a second launch call of 5 us (the GPU has finished
/// the first kernel: a launch gap) whose kernel of `kernel_us` starts 1 us after it returns, and a
/// cudaStreamSynchronize until 2 us after that kernel ends; the next layer right after.
fn sync_per_layer(layers: usize, kernel_us: u64) -> B {
    let mut b = B::new();
    let mut h = startup(&mut b, 2 * GIB);
    for j in 0..layers {
        let name = |k: usize| format!("layer_{}_{k}", j % 24);
        b.launch(h, 5 * US, h + 6 * US, 3 * US, &name(0), BIG);
        let start = h + 16 * US;
        b.launch(h + 10 * US, 5 * US, start, kernel_us * US, &name(1), BIG);
        let done = start + kernel_us * US + 2 * US;
        b.sync(h + 15 * US, done);
        h = done;
    }
    b
}

#[test]
fn launch_gaps_after_every_wait_follow_from_the_wait() {
    let r = report(sync_per_layer(2400, 40).build());
    let text = render_text(&r);
    let sync = r
        .findings
        .iter()
        .position(|f| f.id == FindingId::ImplicitSync);
    let lb = r
        .findings
        .iter()
        .position(|f| f.id == FindingId::LaunchBound);
    let (Some(sync), Some(lb)) = (sync, lb) else {
        panic!("both fire:\n{text}");
    };
    assert_eq!(
        r.findings[lb].caused_by,
        Some(FindingId::ImplicitSync),
        "{text}"
    );
    assert_eq!(
        lb,
        sync + 1,
        "the consequence right after its cause:\n{text}"
    );
    assert!(r.findings[lb].evidence[0].starts_with("a consequence of implicit_sync"));
    assert!(r.findings[lb].fix.starts_with("First remove the waits"));
    assert!(r.findings[sync].severity >= r.findings[lb].severity);
    assert_eq!(
        r.top_finding,
        Some(FindingId::ImplicitSync),
        "{}",
        r.verdict
    );
    assert!(r.verdict.contains("launch_bound ("), "{}", r.verdict);
    assert!(r.verdict.contains("follows from it"), "{}", r.verdict);
    // Kernels shorter than a launch call are launch-bound with or without the waits; the
    // waits still come first (a step that reads the GPU per layer cannot be captured or
    // compiled), and the evidence says the launches stay slower than the GPU.
    let r = report(sync_per_layer(2400, 2).build());
    let text = render_text(&r);
    let f = r
        .findings
        .iter()
        .find(|f| f.id == FindingId::LaunchBound)
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(f.caused_by, Some(FindingId::ImplicitSync), "{text}");
    assert!(
        f.evidence[0].contains("the launches stay slower than the GPU"),
        "{text}"
    );
    assert!(f.fix.contains("captured or compiled"), "{}", f.fix);
    assert_eq!(
        r.top_finding,
        Some(FindingId::ImplicitSync),
        "{}",
        r.verdict
    );
    // Waits rarer than one per 20 launches: no chain.
    let mut b = B::new();
    let mut h = startup(&mut b, 2 * GIB);
    for j in 0..400 {
        for k in 0..30 {
            let name = format!("layer_{}_{k}", j % 24);
            b.launch(h, 5 * US, h + 16 * US, 2 * US, &name, BIG);
            h += 10 * US;
        }
        let done = h + 20 * US;
        b.sync(h, done);
        h = done;
    }
    let r = report(b.build());
    let text = render_text(&r);
    let f = r
        .findings
        .iter()
        .find(|f| f.id == FindingId::LaunchBound)
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(f.caused_by, None, "{text}");
    assert!(!r.verdict.contains("follows from it"), "{}", r.verdict);
}
