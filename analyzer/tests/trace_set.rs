//! Several traces analysed together: ranks of one job get the cross-rank analysis;
//! traces that cannot be one job's ranks are said to be so and reported side by side.

mod common;

use common::*;
use gputrace_analyzer::report::{analyze, FindingId};

#[test]
fn ranks_without_a_recorded_rank_are_tied_by_their_collectives() {
    // Three hosts, no RANK setting: inconclusive until the all-reduces match.
    let mut ranks = straggler_ranks(20);
    for t in &mut ranks {
        t.meta.options.clear();
    }
    let r = analyze(&ranks);
    assert!(r.cluster.is_some());
    assert_eq!(r.trace_set, None);
}

#[test]
fn the_same_rank_twice_is_not_one_job() {
    let mut ranks = straggler_ranks(20);
    ranks[1].meta.options = vec![("RANK".into(), "0".into())];
    let r = analyze(&ranks);
    let set = r.trace_set.as_ref().expect("a trace_set");
    assert!(!set.one_job);
    assert_eq!(set.reasons[0].id, "duplicate_rank");
    // No cross-rank analysis: no clock alignment, no straggler.
    assert!(r.cluster.is_none());
    assert!(r.findings.iter().all(|f| f.id != FindingId::CommStraggler));
    let text = gputrace_analyzer::render_text(&r);
    assert!(
        text.lines()
            .nth(2)
            .unwrap()
            .starts_with("NOTE: these 3 traces do not look like the ranks of one job"),
        "{text}"
    );
}

#[test]
fn a_job_passes_unremarked() {
    let r = analyze(&straggler_ranks(20));
    assert!(r.cluster.is_some());
    assert_eq!(r.trace_set, None);
    let r = analyze(&straggler_ranks_with_nccl(20));
    assert!(r.cluster.is_some());
    assert_eq!(r.trace_set, None);
}

/// A process trace with nothing in it: a compile worker that never used CUDA.
fn no_cuda_child(pid: u32) -> gputrace_analyzer::Trace {
    let mut b = B::bare();
    b.meta.pid = pid;
    b.meta.cmdline = vec!["python".into(), "-m".into(), "compile_worker".into()];
    b.build()
}

#[test]
fn children_that_never_used_cuda_are_counted_not_listed() {
    let traces = vec![
        no_cuda_child(2001),
        healthy(20).build(),
        no_cuda_child(2002),
    ];
    let r = analyze(&traces);
    assert_eq!(r.processes.len(), 1, "{:?}", r.processes);
    assert_eq!(r.processes[0].pid, 1000);
    assert_eq!(r.processes_without_cuda, 2);
    assert!(r.cluster.is_none() && r.trace_set.is_none());
    let text = gputrace_analyzer::render_text(&r);
    assert!(text.starts_with("gputrace report: 1 trace\n"), "{text}");
    assert!(
        text.contains("NOTE: 2 more processes did no GPU work"),
        "{text}"
    );
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["processes_without_cuda"], 2);

    // A child that made one CUDA call is listed; so is a damaged child (it may have lost
    // exactly its CUDA records); a lone trace without CUDA is still reported.
    let mut called = B::bare();
    called.meta.pid = 2003;
    called.api(TID, T0, 5 * US, MALLOC, "cudaMalloc", 1 << 20, 0);
    let mut damaged = no_cuda_child(2004);
    damaged.stats.truncated_tail = true;
    let r = analyze(&[healthy(20).build(), called.build(), damaged]);
    assert_eq!(r.processes.len(), 3);
    assert_eq!(r.processes_without_cuda, 0);
    let json = serde_json::to_value(&r).unwrap();
    assert!(json.get("processes_without_cuda").is_none());
    let r = analyze(&[no_cuda_child(2005)]);
    assert_eq!((r.processes.len(), r.processes_without_cuda), (1, 0));
}

#[test]
fn a_launcher_does_not_break_its_ranks_into_unrelated_processes() {
    // torchrun looks the GPUs up (a device record) and does nothing else with CUDA; its
    // trace has no activity to say when it ran. Its ranks are still one job.
    let mut launcher = B::new();
    launcher.meta.pid = 900;
    launcher.meta.cmdline = vec!["python".into(), "-m".into(), "torch.distributed.run".into()];
    let mut traces = straggler_ranks(20);
    traces.insert(0, launcher.build());
    let r = analyze(&traces);
    assert_eq!(r.trace_set, None, "{}", r.verdict);
    assert!(r.cluster.is_some(), "{}", r.verdict);
    assert_eq!(r.processes_without_cuda, 1);
    assert!(r.processes.iter().all(|p| p.pid != 900));
}
