//! Which rank never arrived at a stuck collective: once every process is analysed,
//! each traced rank's last NCCL calls are added to the hang findings.

use super::out::id::FindingId;
use super::out::{Finding, ProcessReport};
use super::stalls::{evidence, fix, sentence, NcclTail, RankNccl};
use gputrace_format as fmt;
use std::collections::HashSet;

/// Adds what every traced rank's NCCL calls say to the hang findings of a stuck
/// collective: which ranks reached it, which never arrived, and ranks with no trace.
/// `tails[i]` belongs to `procs[i]`.
pub(crate) fn add(procs: &[ProcessReport], tails: &[NcclTail], all: &mut [Finding]) {
    for f in all.iter_mut().filter(|f| f.id == FindingId::Hang) {
        let Some(h) = f.hang.as_deref_mut() else {
            continue;
        };
        let Some(n) = h.nccl.as_mut() else { continue };
        let Ok(comm) = u64::from_str_radix(n.comm_id.trim_start_matches("0x"), 16) else {
            continue;
        };
        let mut ranks = Vec::new();
        let mut seen = HashSet::new();
        for (p, tail) in procs.iter().zip(tails) {
            let Some(&(rank, _)) = tail.rank_by_comm.get(&comm) else {
                continue;
            };
            seen.insert(rank);
            let Some(&(seq, op, start, bytes)) = tail.last.get(&comm) else {
                continue;
            };
            ranks.push(RankNccl {
                process: p.index,
                label: p.label.clone(),
                rank,
                last_seq: seq,
                last_op: fmt::nccl_op_name(op).to_string(),
                last_bytes: bytes,
                last_call_ns: start.saturating_sub(p.trace_start_ns),
                arrived: seq >= n.seq,
                host: tail.host.clone(),
            });
        }
        if ranks.len() < 2 {
            continue;
        }
        ranks.sort_by_key(|r| r.rank);
        n.never_arrived = ranks
            .iter()
            .filter(|r| !r.arrived)
            .map(|r| r.label.clone())
            .collect();
        n.untraced_ranks = (0..n.nranks.max(0)).filter(|r| !seen.contains(r)).collect();
        n.ranks = ranks;
        f.summary = sentence(h, false);
        f.evidence = evidence(h, false);
        f.fix = fix(h);
    }
}
