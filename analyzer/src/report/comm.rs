//! Communication: NCCL kernel time not hidden behind compute, and, across the traces of
//! several ranks, who arrives last at collectives and how long the others wait.
//!
//! Collectives are matched across ranks by kernel name and order of occurrence (the k-th
//! `ncclDevKernel_AllReduce_...` of every rank is one collective), or, when the symbol
//! hooks recorded the NCCL calls, by the communicator id and sequence number of the call
//! that launched each kernel (its launch call falls inside the NCCL call on the same
//! thread), which is exact. Ranks with no NCCL kernel (gloo on CUDA tensors) meet in
//! collectives through host memory, told from their copies ([`host_collectives`]).

use super::ctx::Ctx;
use super::intervals::{busy, intersect_len, len_in, Select};
use gputrace_format as fmt;
use std::collections::HashMap;

#[derive(Clone, Debug, Default)]
pub struct CommStats {
    pub kernels: u64,
    /// Union of NCCL kernel time, summed over devices.
    pub comm_ns: u64,
    /// Part of it with no compute kernel on the same device.
    pub exposed_ns: u64,
    /// Longest exposed NCCL kernels: (start, duration, name id).
    pub examples: Vec<(u64, u64, u32)>,
    pub names: Vec<(u32, u64, u64)>,
}

pub fn stats(ctx: &Ctx, window: (u64, u64)) -> CommStats {
    let (w0, w1) = window;
    let mut s = CommStats::default();
    if !ctx.comm_name.iter().any(|&c| c) {
        return s;
    }
    let mut names: HashMap<u32, (u64, u64)> = HashMap::new();
    for k in &ctx.t.kernels {
        if k.start >= w1 {
            break;
        }
        if k.start < w0 || !ctx.is_comm(&k) {
            continue;
        }
        if let Some((a, b)) = ctx.sane(k.start, k.end) {
            s.kernels += 1;
            let e = names.entry(k.name).or_default();
            e.0 += 1;
            e.1 += b - a;
            if s.examples.len() < 3 || s.examples.iter().any(|x| x.1 < b - a) {
                s.examples.push((a, b - a, k.name));
                s.examples.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
                s.examples.truncate(3);
            }
        }
    }
    if s.kernels == 0 {
        return s;
    }
    for &dev in &ctx.devices {
        let comm = len_in(
            busy(ctx, Some(dev), Select::COMM).map(|b| (b.start, b.end)),
            w0,
            w1,
        );
        if comm == 0 {
            continue;
        }
        let both = intersect_len(
            busy(ctx, Some(dev), Select::COMM).map(|b| (b.start, b.end)),
            busy(ctx, Some(dev), Select::COMPUTE).map(|b| (b.start, b.end)),
            w0,
            w1,
        );
        s.comm_ns += comm;
        s.exposed_ns += comm.saturating_sub(both);
    }
    let mut v: Vec<(u32, u64, u64)> = names.into_iter().map(|(n, (c, t))| (n, c, t)).collect();
    v.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
    s.names = v;
    s
}

/// One rank's part in a collective.
#[derive(Clone, Debug)]
pub struct Collective {
    pub name: String,
    /// Occurrence number among this rank's kernels of the same name.
    pub seq: u32,
    pub start: u64,
    pub end: u64,
    /// (communicator id, sequence number) of the NCCL call that launched the kernel, when
    /// the symbol hooks recorded it: the same on every rank.
    pub call: Option<(u64, u64)>,
    /// Reached and never left (a collective through host memory whose result never came
    /// back): `end` is the end of the trace.
    pub pending: bool,
}

/// What identifies one collective across ranks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CollKey {
    /// The NCCL call's communicator and sequence number.
    Call { comm: u64, seq: u64 },
    /// Kernel name and order of occurrence.
    Order { name: String, seq: u32 },
}

impl Collective {
    pub fn key(&self, by_call: bool) -> CollKey {
        match (by_call, self.call) {
            (true, Some((comm, seq))) => CollKey::Call { comm, seq },
            _ => CollKey::Order {
                name: self.name.clone(),
                seq: self.seq,
            },
        }
    }
}

/// This rank's NCCL kernels in start order (on its primary device); with no NCCL
/// kernel, its collectives through host memory ([`host_collectives`]).
pub fn collectives(ctx: &Ctx) -> Vec<Collective> {
    let mut seqs: HashMap<u32, u32> = HashMap::new();
    let mut out = Vec::new();
    if !ctx.comm_name.iter().any(|&c| c) {
        return host_collectives(ctx);
    }
    // NCCL calls by thread, to find the call whose launch made each kernel.
    let mut calls: HashMap<u32, Vec<(u64, u64, u64, u64)>> = HashMap::new();
    for n in &ctx.t.nccl {
        let group = matches!(n.op, fmt::NCCL_GROUP_START | fmt::NCCL_GROUP_END);
        if !group && n.comm_id != 0 && n.seq > 0 {
            calls
                .entry(n.tid)
                .or_default()
                .push((n.start, n.end, n.comm_id, n.seq));
        }
    }
    for v in calls.values_mut() {
        v.sort_unstable();
    }
    let call_of = |k: &fmt::Kernel| -> Option<(u64, u64)> {
        let api = ctx.api_for(k.corr)?;
        let v = calls.get(&api.tid)?;
        let i = v.partition_point(|c| c.0 <= api.start);
        let c = v.get(i.checked_sub(1)?)?;
        (api.start <= c.1).then_some((c.2, c.3))
    };
    for k in &ctx.t.kernels {
        if !ctx.is_comm(&k) || Some(k.device) != ctx.primary {
            continue;
        }
        if let Some((s, e)) = ctx.sane(k.start, k.end) {
            let q = seqs.entry(k.name).or_default();
            out.push(Collective {
                name: ctx.t.str(k.name).to_string(),
                seq: *q,
                start: s,
                end: e,
                call: if calls.is_empty() { None } else { call_of(&k) },
                pending: false,
            });
            *q += 1;
        }
    }
    out
}

/// The name of a collective through host memory of `bytes`: its key across ranks, with
/// its order of occurrence.
pub const HOST_COLLECTIVE: &str = "collective through host memory";

/// Collectives that reduce in host memory: gloo on CUDA tensors copies each tensor to pinned host memory on a stream of its own, reduces on the CPU
/// with the other ranks, and copies the result back on the same stream. On a stream that
/// runs no kernel, a device-to-pinned copy followed by a pinned-to-device copy of the same
/// size is one such collective: it starts when this rank's GPU began handing its data
/// over (its arrival) and ends when the result was back. Matched across ranks by size and
/// order of occurrence, as NCCL kernels are by name. Only the cluster analysis of several
/// ranks uses them; a lone process that stages tensors through host memory the same way
/// has no other rank to match.
pub fn host_collectives(ctx: &Ctx) -> Vec<Collective> {
    host_copies(ctx).0
}

/// A rank's collectives through host memory ([`host_collectives`]), and those it
/// reached but never left: on a stream of no kernel, a last copy to pinned host memory
/// with no copy back after it (the rank handed its data over and the result never came:
/// the others never all arrived, or the process ended first). A pending one's `end` is
/// `until`, the end of the trace; its `seq` continues its size's numbering.
pub fn host_copies(ctx: &Ctx) -> (Vec<Collective>, Vec<Collective>) {
    host_copies_until(ctx, ctx.t1)
}

/// [`host_copies`], pending collectives ending at `until`.
pub fn host_copies_until(ctx: &Ctx, until: u64) -> (Vec<Collective>, Vec<Collective>) {
    let Some(dev) = ctx.primary.filter(|_| uses_gloo(ctx.t)) else {
        return (Vec::new(), Vec::new());
    };
    let with_kernels: std::collections::HashSet<u32> = ctx
        .t
        .kernels
        .iter()
        .filter(|k| k.device == dev)
        .map(|k| k.stream)
        .collect();
    let mut streams: HashMap<u32, Vec<&fmt::Memcpy>> = HashMap::new();
    for m in &ctx.t.memcpys {
        if m.device == dev && !with_kernels.contains(&m.stream) {
            streams.entry(m.stream).or_default().push(m);
        }
    }
    let pinned = fmt::MemKind::Pinned as u8;
    let to_pinned =
        |m: &fmt::Memcpy| m.copy_kind == fmt::CopyKind::DtoH as u8 && m.dst_kind == pinned;
    let mut out = Vec::new();
    let mut pending = Vec::new();
    for v in streams.values_mut() {
        v.sort_by_key(|m| (m.start, m.end));
        if let Some(last) = v.last().filter(|m| to_pinned(m)) {
            if let Some((s, _)) = ctx.sane(last.start, last.end) {
                pending.push(Collective {
                    name: format!("{HOST_COLLECTIVE} ({} B)", last.bytes),
                    seq: 0,
                    start: s,
                    end: until.max(s),
                    call: None,
                    pending: true,
                });
            }
        }
        for w in v.windows(2) {
            let (to_host, back) = (w[0], w[1]);
            let pair = to_pinned(to_host)
                && back.copy_kind == fmt::CopyKind::HtoD as u8
                && back.src_kind == pinned
                && to_host.bytes == back.bytes;
            if !pair {
                continue;
            }
            if let (Some((s, _)), Some((_, e))) = (
                ctx.sane(to_host.start, to_host.end),
                ctx.sane(back.start, back.end),
            ) {
                out.push(Collective {
                    name: format!("{HOST_COLLECTIVE} ({} B)", to_host.bytes),
                    seq: 0,
                    start: s,
                    end: e.max(s),
                    call: None,
                    pending: false,
                });
            }
        }
    }
    let order =
        |a: &Collective, b: &Collective| (a.start, a.end, &a.name).cmp(&(b.start, b.end, &b.name));
    out.sort_by(order);
    pending.sort_by(order);
    let mut seqs: HashMap<String, u32> = HashMap::new();
    for c in out.iter_mut().chain(pending.iter_mut()) {
        let q = seqs.entry(c.name.clone()).or_default();
        c.seq = *q;
        *q += 1;
    }
    (out, pending)
}

/// Whether the process ran gloo's threads (PyTorch names them `pt_gloo_runloop`): the
/// copies of [`host_copies`] are collectives only there (JAX, for one, stages tensors
/// through pinned memory the same way in a process of its own).
fn uses_gloo(t: &crate::model::trace::Trace) -> bool {
    t.threads.values().any(|&n| t.str(n).contains("gloo"))
}

/// What one rank contributes to the cluster analysis.
pub struct RankInput {
    pub host: String,
    /// (cupti, mono, real) clock pairs.
    pub clocks: Vec<(u64, u64, u64)>,
    pub colls: Vec<Collective>,
    /// Collectives through host memory it reached and never left ([`host_copies`]).
    pub pending: Vec<Collective>,
    pub steady: (u64, u64),
    /// Its last recorded GPU work or CUDA call, and the end of its trace (its process's
    /// end, or the last thing recorded).
    pub last_activity: u64,
    pub end: u64,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct RankSkew {
    pub process: usize,
    /// Added to this rank's timestamps to put them on the common time base.
    pub clock_offset_ns: i64,
    pub collectives: u64,
    pub last_arrivals: u64,
    /// Time this rank's collectives waited for the last rank to arrive (collectives in
    /// flight together wait once).
    pub wait_ns: u64,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct ClusterComm {
    pub ranks: Vec<RankSkew>,
    /// `same_host_clock` or `collective_ends`.
    pub alignment: String,
    /// How collectives were matched: `nccl_calls` (communicator and sequence number of
    /// the NCCL call), `kernel_order` (kernel name and order of occurrence) or
    /// `host_copies` (collectives through host memory, gloo's: size and order).
    pub matching: String,
    /// Median spread of collective end times after alignment.
    pub residual_ns: u64,
    /// Collectives found on every rank (in steady state).
    pub matched: u64,
    /// Collectives whose kernel names differ between ranks' sequences (by name and order).
    pub unmatched: u64,
    pub straggler: Option<usize>,
    /// Share of matched collectives at which the straggler arrived last.
    pub straggler_last_pct: f64,
    /// Mean, over the other ranks, of the time they waited for the straggler.
    pub others_wait_ns: u64,
    /// Largest waits caused by the straggler: (start on the straggler's time base, wait).
    #[serde(skip)]
    pub examples: Vec<(u64, u64)>,
}

fn median_i64(v: &mut [i64]) -> Option<i64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    Some(v[v.len() / 2])
}

/// Aligns the ranks' clocks and measures arrival skew at collectives.
pub fn cluster(ranks: &[RankInput]) -> Option<ClusterComm> {
    let n = ranks.len();
    if n < 2 || ranks.iter().any(|r| r.colls.is_empty()) {
        return None;
    }
    // 1. Each trace's CUPTI time onto CLOCK_REALTIME through its own clock pairs.
    let mut off = realtime_offsets(ranks);
    // Index collectives by key on every rank: by NCCL call when every collective of
    // every rank is tied to one, else by kernel name and order.
    let by_call = ranks
        .iter()
        .all(|r| r.colls.iter().all(|c| c.call.is_some()));
    let (maps, keys) = index_collectives(ranks, by_call);
    let unmatched = ranks[0].colls.len() as u64 - keys.len() as u64;
    if keys.is_empty() {
        return None;
    }
    let through_host = ranks
        .iter()
        .all(|r| r.colls.iter().all(|c| c.name.starts_with(HOST_COLLECTIVE)));
    let matching = if by_call {
        "nccl_calls"
    } else if through_host {
        "host_copies"
    } else {
        "kernel_order"
    };
    // 2. Different hosts: their real-time clocks disagree; collectives end together on
    //    every rank, so align the median end.
    let same_host = ranks.iter().all(|r| r.host == ranks[0].host);
    let alignment = if same_host {
        "same_host_clock"
    } else {
        align_collective_ends(ranks, &maps, &keys, &mut off);
        "collective_ends"
    };
    // 3. Arrivals, in steady state only (start-up collectives are rendezvous, not skew).
    let Arrivals {
        skews,
        caused,
        wait_for,
        mut spreads,
        matched,
        mut examples,
    } = arrivals(ranks, &maps, &keys, &off);
    if matched == 0 {
        return Some(ClusterComm {
            ranks: skews,
            alignment: alignment.into(),
            matching: matching.into(),
            residual_ns: 0,
            matched: 0,
            unmatched,
            straggler: None,
            straggler_last_pct: 0.0,
            others_wait_ns: 0,
            examples: Vec::new(),
        });
    }
    let straggler = (0..n).max_by(|&a, &b| caused[a].cmp(&caused[b]).then(b.cmp(&a)));
    let (last_pct, others, ex) = match straggler {
        Some(s) if caused[s] > 0 => {
            let total: u64 = (0..n).filter(|&r| r != s).map(|r| wait_for[s][r]).sum();
            (
                100.0 * skews[s].last_arrivals as f64 / matched as f64,
                total / (n as u64 - 1),
                std::mem::take(&mut examples[s]),
            )
        }
        _ => (0.0, 0, Vec::new()),
    };
    Some(ClusterComm {
        ranks: skews,
        alignment: alignment.into(),
        matching: matching.into(),
        residual_ns: median_i64(&mut spreads).unwrap_or(0).max(0) as u64,
        matched,
        unmatched,
        straggler: straggler.filter(|&s| caused[s] > 0),
        straggler_last_pct: last_pct,
        others_wait_ns: others,
        examples: ex,
    })
}

/// Each rank's offset from CUPTI time to CLOCK_REALTIME: the median over its clock pairs.
fn realtime_offsets(ranks: &[RankInput]) -> Vec<i64> {
    ranks
        .iter()
        .map(|r| {
            let mut d: Vec<i64> = r
                .clocks
                .iter()
                .filter(|c| c.0 > 0 && c.2 > 0)
                .map(|c| c.2 as i128 - c.0 as i128)
                .map(|x| x.clamp(i64::MIN as i128, i64::MAX as i128) as i64)
                .collect();
            median_i64(&mut d).unwrap_or(0)
        })
        .collect()
}

/// Each rank's collectives by key, and the first rank's keys that every rank has.
fn index_collectives(
    ranks: &[RankInput],
    by_call: bool,
) -> (Vec<HashMap<CollKey, usize>>, Vec<CollKey>) {
    let maps: Vec<HashMap<CollKey, usize>> = ranks
        .iter()
        .map(|r| {
            let mut m = HashMap::new();
            for (i, c) in r.colls.iter().enumerate() {
                m.entry(c.key(by_call)).or_insert(i);
            }
            m
        })
        .collect();
    let keys: Vec<CollKey> = ranks[0]
        .colls
        .iter()
        .map(|c| c.key(by_call))
        .filter(|k| maps.iter().all(|m| m.contains_key(k)))
        .collect();
    (maps, keys)
}

/// Shifts the offsets of ranks 1.. so that their collectives' median end meets rank 0's.
fn align_collective_ends(
    ranks: &[RankInput],
    maps: &[HashMap<CollKey, usize>],
    keys: &[CollKey],
    off: &mut [i64],
) {
    let at = |r: usize, k: &CollKey| &ranks[r].colls[maps[r][k]];
    for r in 1..ranks.len() {
        let mut d: Vec<i64> = keys
            .iter()
            .map(|k| {
                let e0 = at(0, k).end as i128 + off[0] as i128;
                let er = at(r, k).end as i128 + off[r] as i128;
                (e0 - er).clamp(i64::MIN as i128, i64::MAX as i128) as i64
            })
            .collect();
        if let Some(m) = median_i64(&mut d) {
            off[r] = off[r].saturating_add(m);
        }
    }
}

/// Arrival skew at the collectives matched on every rank in steady state.
struct Arrivals {
    skews: Vec<RankSkew>,
    /// Time each rank made the others wait, summed over them (each one's overlapping
    /// waits once).
    caused: Vec<u64>,
    /// Time each rank made each other rank wait: `wait_for[late][waiter]`.
    wait_for: Vec<Vec<u64>>,
    /// Spread of each collective's end times.
    spreads: Vec<i64>,
    matched: u64,
    /// Each rank's largest waits caused: (start on its time base, wait), at most 3.
    examples: Vec<Vec<(u64, u64)>>,
}

/// Who arrived last at each steady-state collective of `keys`, and who waited how long.
fn arrivals(
    ranks: &[RankInput],
    maps: &[HashMap<CollKey, usize>],
    keys: &[CollKey],
    off: &[i64],
) -> Arrivals {
    let n = ranks.len();
    let at = |r: usize, k: &CollKey| &ranks[r].colls[maps[r][k]];
    let abs = |r: usize, ts: u64| ts as i128 + off[r] as i128;
    let mut skews: Vec<RankSkew> = (0..n)
        .map(|r| RankSkew {
            process: r,
            clock_offset_ns: off[r],
            collectives: 0,
            last_arrivals: 0,
            wait_ns: 0,
        })
        .collect();
    // Waits as intervals on the common time base, per (late, waiter): collectives in
    // flight together (gradient buckets on streams of their own) wait at the same time,
    // and that time counts once.
    let mut waits: HashMap<(usize, usize), Vec<(i128, i128)>> = HashMap::new();
    let mut spreads: Vec<i64> = Vec::new();
    let mut matched = 0u64;
    let mut examples: Vec<Vec<(u64, u64)>> = vec![Vec::new(); n];
    for k in keys {
        let steady = (0..n).all(|r| {
            let c = at(r, k);
            c.start >= ranks[r].steady.0 && c.start < ranks[r].steady.1.max(ranks[r].steady.0 + 1)
        });
        if !steady {
            continue;
        }
        matched += 1;
        let starts: Vec<i128> = (0..n).map(|r| abs(r, at(r, k).start)).collect();
        let ends: Vec<i128> = (0..n).map(|r| abs(r, at(r, k).end)).collect();
        let emax = ends.iter().max().copied().unwrap_or(0);
        let emin = ends.iter().min().copied().unwrap_or(0);
        spreads.push((emax - emin).clamp(0, i64::MAX as i128) as i64);
        let (last, &smax) = starts
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(&a.0)))
            .unwrap();
        skews[last].last_arrivals += 1;
        let mut worst = 0u64;
        for r in 0..n {
            skews[r].collectives += 1;
            let w = (smax - starts[r]).clamp(0, u64::MAX as i128) as u64;
            // A rank cannot wait longer than its kernel ran.
            let w = w.min(at(r, k).end - at(r, k).start);
            if r != last && w > 0 {
                waits
                    .entry((last, r))
                    .or_default()
                    .push((starts[r], starts[r] + w as i128));
                worst = worst.max(w);
            }
        }
        let ex = &mut examples[last];
        ex.push((at(last, k).start, worst));
        ex.sort_by_key(|e| std::cmp::Reverse(e.1));
        ex.truncate(3);
    }
    let mut caused = vec![0u64; n];
    let mut wait_for = vec![vec![0u64; n]; n]; // wait_for[late][waiter]
    let mut by_waiter: Vec<Vec<(i128, i128)>> = vec![Vec::new(); n];
    for ((late, r), v) in waits {
        by_waiter[r].extend_from_slice(&v);
        let w = union_len(v);
        caused[late] += w;
        wait_for[late][r] += w;
    }
    for (r, v) in by_waiter.into_iter().enumerate() {
        skews[r].wait_ns = union_len(v);
    }
    Arrivals {
        skews,
        caused,
        wait_for,
        spreads,
        matched,
        examples,
    }
}

/// Total length of a set of intervals, overlaps counted once.
fn union_len(mut v: Vec<(i128, i128)>) -> u64 {
    v.sort_unstable();
    let mut total: i128 = 0;
    let mut cur: Option<(i128, i128)> = None;
    for (a, b) in v {
        match cur {
            Some((s, e)) if a <= e => cur = Some((s, e.max(b))),
            _ => {
                if let Some((s, e)) = cur {
                    total += e - s;
                }
                cur = Some((a, b));
            }
        }
    }
    if let Some((s, e)) = cur {
        total += e - s;
    }
    total.clamp(0, u64::MAX as i128) as u64
}
