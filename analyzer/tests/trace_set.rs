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
