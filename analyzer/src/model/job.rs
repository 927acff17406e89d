//! Do several traces look like the ranks of one job?
//!
//! `gputrace report a.gtrace b.gtrace` analyses its traces as the ranks of one job:
//! clocks aligned on their collectives, stragglers looked for. Given traces of
//! unrelated runs, that analysis would compare things that never met. What tells them
//! apart, from what a trace records:
//! * `duplicate_rank`: two traces claim the same rank (a global rank, or the same
//!   `LOCAL_RANK` on one host).
//! * `different_job_ids`: a scheduler's job id (`SLURM_JOB_ID`, `TORCHELASTIC_RUN_ID`,
//!   ...) recorded with different values.
//! * `hosts_without_ranks`: the traces come from several hosts and none records its
//!   rank, so nothing ties them into one job. Inconclusive on its own (a multi-node job
//!   whose ranks were not recorded looks the same): it stands only if the cross-rank
//!   analysis then matches no collective across the traces.
//! * `not_concurrent`: the traces' activity does not overlap in time (more than
//!   [`MAX_GAP_NS`] apart): ranks of a job run together, collectives wait for each
//!   other.
//!
//! The decision: such a set is still reported, each trace on its own (no cross-rank
//! section, no straggler finding), with one note line under the verdict and the
//! reasons in the JSON (`trace_set`). Grouping the traces into jobs would need an
//! identity the traces do not reliably record yet; the note says what was found so
//! the user can give each job's traces separately.

use serde::Serialize;
use std::collections::BTreeMap;

/// Traces further apart in time than this did not run together (allowing for clocks
/// of different hosts that disagree a little).
pub const MAX_GAP_NS: u64 = 2_000_000_000;

/// Recorded settings that name a job: differing values mean different jobs.
const JOB_ID_KEYS: [&str; 6] = [
    "SLURM_JOB_ID",
    "TORCHELASTIC_RUN_ID",
    "PBS_JOBID",
    "LSB_JOBID",
    "FLUX_JOB_ID",
    "JOB_ID",
];

/// What the check needs to know of one trace.
#[derive(Clone, Debug, Default)]
pub struct Member<'a> {
    /// How to name it (its file name).
    pub name: String,
    pub host: &'a str,
    pub rank: Option<u32>,
    /// Where the rank came from (`option NAME`, `nccl`, `none`).
    pub rank_source: &'a str,
    /// First and last timestamp of its activity, when it has any.
    pub span: Option<(u64, u64)>,
    /// Its recorded settings.
    pub options: &'a [(String, String)],
}

/// Why a set of traces is not taken for the ranks of one job.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Reason {
    /// `duplicate_rank`, `different_job_ids`, `hosts_without_ranks`, `not_concurrent`.
    pub id: String,
    pub detail: String,
}

/// The `trace_set` of a report: present only when several traces were given and they
/// do not look like the ranks of one job.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct TraceSetCheck {
    /// Always false when present.
    pub one_job: bool,
    pub reasons: Vec<Reason>,
}

/// The one reason that does not rule one job out by itself.
const INCONCLUSIVE: &str = "hosts_without_ranks";

impl TraceSetCheck {
    /// Whether the traces cannot be one job's ranks (else the cross-rank analysis is
    /// worth trying: if it matches collectives, they are).
    pub fn rules_out_one_job(&self) -> bool {
        self.reasons.iter().any(|r| r.id != INCONCLUSIVE)
    }

    /// What is left once collectives matched across the traces: the reasons that
    /// still stand (`None`: none).
    pub fn linked_by_collectives(mut self) -> Option<TraceSetCheck> {
        self.reasons.retain(|r| r.id != INCONCLUSIVE);
        (!self.reasons.is_empty()).then_some(self)
    }

    /// The note under the verdict.
    pub fn note(&self, traces: usize) -> String {
        let why: Vec<&str> = self.reasons.iter().map(|r| r.detail.as_str()).collect();
        format!(
            "these {traces} traces do not look like the ranks of one job ({}); each is reported on its own, without cross-rank analysis",
            why.join("; ")
        )
    }
}

fn reason(id: &str, detail: String) -> Reason {
    Reason {
        id: id.into(),
        detail,
    }
}

fn seconds(ns: u64) -> String {
    let s = ns as f64 / 1e9;
    if s < 120.0 {
        format!("{s:.1} s")
    } else if s < 7200.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

/// `None` when the traces may well be the ranks of one job (or there is one).
pub fn check(members: &[Member<'_>]) -> Option<TraceSetCheck> {
    if members.len() < 2 {
        return None;
    }
    let mut reasons = Vec::new();

    // The same rank twice. LOCAL_RANK repeats across hosts: it counts per host.
    let mut by_rank: BTreeMap<(u32, &str), Vec<&str>> = BTreeMap::new();
    for m in members {
        if let Some(r) = m.rank {
            let local = m.rank_source.eq_ignore_ascii_case("option LOCAL_RANK");
            let host = if local { m.host } else { "" };
            by_rank.entry((r, host)).or_default().push(&m.name);
        }
    }
    let twice: Vec<String> = by_rank
        .iter()
        .filter(|(_, v)| v.len() > 1)
        .map(|((r, _), v)| format!("rank {r} in {}", v.join(", ")))
        .collect();
    if !twice.is_empty() {
        reasons.push(reason(
            "duplicate_rank",
            format!("the same rank twice: {}", twice.join("; ")),
        ));
    }

    // Different job ids.
    for key in JOB_ID_KEYS {
        let mut values: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for m in members {
            if let Some((_, v)) = m.options.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)) {
                values.entry(v.trim()).or_default().push(&m.name);
            }
        }
        if values.len() > 1 {
            let list: Vec<String> = values
                .iter()
                .map(|(v, names)| format!("{v} ({})", names.join(", ")))
                .collect();
            reasons.push(reason(
                "different_job_ids",
                format!("different {key}: {}", list.join(", ")),
            ));
        }
    }

    // Several hosts and no ranks.
    let mut hosts: Vec<&str> = members.iter().map(|m| m.host).collect();
    hosts.sort_unstable();
    hosts.dedup();
    if hosts.len() > 1 && members.iter().all(|m| m.rank.is_none()) {
        reasons.push(reason(
            "hosts_without_ranks",
            format!(
                "they come from {} hosts ({}) and none records its rank",
                hosts.len(),
                hosts.join(", ")
            ),
        ));
    }

    // Not at the same time: a gap in the union of their spans.
    let mut spans: Vec<(u64, u64, &str)> = members
        .iter()
        .filter_map(|m| m.span.map(|(s, e)| (s, e.max(s), m.name.as_str())))
        .collect();
    spans.sort_unstable();
    let mut gaps = Vec::new();
    if let Some(&(_, first_end, first)) = spans.first() {
        let (mut end, mut last) = (first_end, first);
        for &(s, e, name) in &spans[1..] {
            if s > end.saturating_add(MAX_GAP_NS) {
                gaps.push((last, name, s - end));
            }
            if e >= end {
                end = e;
                last = name;
            }
        }
    }
    if let Some((before, after, gap)) = gaps.first() {
        let more = match gaps.len() {
            1 => String::new(),
            n => format!(", and {} more such gaps", n - 1),
        };
        reasons.push(reason(
            "not_concurrent",
            format!(
                "they did not run at the same time: {before} ended {} before {after} began{more}",
                seconds(*gap)
            ),
        ));
    }

    (!reasons.is_empty()).then_some(TraceSetCheck {
        one_job: false,
        reasons,
    })
}

/// Whether a process trace shows no GPU work: no kernel, copy, memset or allocation, no
/// CUDA or NCCL call, no stall report, and nothing lost from the file (a damaged trace
/// could have lost exactly that). It may know the GPUs (a device record): a launcher
/// such as torchrun looks them up to start one rank per GPU and does nothing else with
/// CUDA. A launcher, compile worker or tokenizer started under the preload leaves such a
/// trace; a job of several processes counts them on one line, not as processes (nor as
/// ranks: a launcher's trace has no activity to tell when it ran).
pub fn did_no_gpu_work(t: &crate::model::trace::Trace) -> bool {
    t.kernels.is_empty() && t.apis.is_empty() && !t.has_work_records() && !t.stats.lost_records()
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn m<'a>(name: &str, host: &'a str, rank: Option<u32>, span: (u64, u64)) -> Member<'a> {
        Member {
            name: name.into(),
            host,
            rank,
            rank_source: if rank.is_some() {
                "option RANK"
            } else {
                "none"
            },
            span: Some(span),
            options: &[],
        }
    }

    fn ids(c: &Option<TraceSetCheck>) -> Vec<&str> {
        c.iter()
            .flat_map(|c| c.reasons.iter().map(|r| r.id.as_str()))
            .collect()
    }

    #[test]
    fn the_ranks_of_one_job_pass() {
        let job = [
            m("r0", "a", Some(0), (100 * S, 200 * S)),
            m("r1", "b", Some(1), (101 * S, 199 * S)),
        ];
        assert_eq!(check(&job), None);
        // One host, no ranks recorded, running together: a single-node job.
        let node = [
            m("p1", "a", None, (100 * S, 200 * S)),
            m("p2", "a", None, (100 * S, 150 * S)),
        ];
        assert_eq!(check(&node), None);
        assert_eq!(check(&node[..1]), None);
        // LOCAL_RANK 0 on each of two hosts is no duplicate.
        let mut local = job.clone();
        for x in &mut local {
            x.rank = Some(0);
            x.rank_source = "option LOCAL_RANK";
        }
        assert_eq!(check(&local), None);
    }

    #[test]
    fn unrelated_traces_are_told_apart() {
        let twice = [
            m("x", "a", Some(0), (100 * S, 200 * S)),
            m("y", "b", Some(0), (100 * S, 200 * S)),
        ];
        let c = check(&twice);
        assert_eq!(ids(&c), ["duplicate_rank"]);
        assert_eq!(
            c.unwrap().reasons[0].detail,
            "the same rank twice: rank 0 in x, y"
        );

        let apart = [
            m("early", "a", None, (100 * S, 110 * S)),
            m("late", "a", None, (4000 * S, 4010 * S)),
            m("later", "a", None, (4010 * S + 1, 4020 * S)),
        ];
        let c = check(&apart).unwrap();
        assert_eq!(c.reasons.len(), 1);
        assert_eq!(
            c.reasons[0].detail,
            "they did not run at the same time: early ended 65 min before late began"
        );
        assert!(c.note(3).starts_with("these 3 traces do not look like"));

        let hosts = [
            m("p", "a", None, (100 * S, 200 * S)),
            m("q", "b", None, (100 * S, 200 * S)),
        ];
        let c = check(&hosts);
        assert_eq!(ids(&c), ["hosts_without_ranks"]);
        let c = c.unwrap();
        assert!(!c.rules_out_one_job());
        assert_eq!(c.linked_by_collectives(), None);
        let mut both = twice.clone();
        both[1].rank = None;
        both[1].span = Some((5000 * S, 5001 * S));
        let c = check(&both).unwrap();
        assert!(c.rules_out_one_job());
        assert_eq!(ids(&c.clone().linked_by_collectives()), ["not_concurrent"]);

        let opts_a = [("SLURM_JOB_ID".to_string(), "11".to_string())];
        let opts_b = [("slurm_job_id".to_string(), "12".to_string())];
        let mut jobs = [
            m("p", "a", Some(0), (100 * S, 200 * S)),
            m("q", "a", Some(1), (100 * S, 200 * S)),
        ];
        jobs[0].options = &opts_a;
        jobs[1].options = &opts_b;
        assert_eq!(ids(&check(&jobs)), ["different_job_ids"]);
    }
}
