//! CUDA graph replays: each `cudaGraphLaunch` / `cuGraphLaunch` linked to the kernels it
//! ran (by correlation id; graph and node ids from the kernel records), a summary per
//! graph (replays, kernels and GPU time per replay, the idle gaps inside a replay), the
//! set-up calls (instantiate, upload), and the replays as step boundaries when the job
//! replays one graph per step.
//!
//! A replay is the set of kernels of one graph with one correlation id (kernels from
//! a device-side graph launch, or from a trace without ids, have correlation id 0: their
//! replays are split where the first node comes round again). Its span runs from its
//! first kernel's start to its last kernel's end; its gaps are the time in that span
//! with none of its kernels running: the device's node-to-node latency, which the host
//! cannot cause (the whole graph was submitted by one call).

use super::ctx::Ctx;
use super::units::pct;
use serde::Serialize;
use std::collections::{HashMap, HashSet};

/// Graphs listed in the report (the most replayed first); the totals cover all.
pub const MAX_GRAPHS: usize = 8;

/// One replay of a graph on one device.
#[derive(Clone, Debug)]
pub struct Replay {
    pub graph_id: u32,
    pub device: u32,
    /// The stream of its first kernel.
    pub stream: u32,
    /// Correlation id of the launch call (0: not known).
    pub corr: u32,
    pub start: u64,
    pub end: u64,
    pub kernels: u32,
    /// Time with at least one of its kernels running.
    pub busy_ns: u64,
    first_node: u64,
    /// The union of its kernels so far: the interval being extended.
    cur: (u64, u64),
}

impl Replay {
    /// Time inside the replay's span with none of its kernels running.
    pub fn gap_ns(&self) -> u64 {
        (self.end - self.start).saturating_sub(self.busy_ns)
    }
}

/// Every graph replay in the trace, in the order their first kernels started, and the
/// distinct node ids seen per (device, graph).
pub fn replays(ctx: &Ctx) -> (Vec<Replay>, HashMap<(u32, u32), usize>) {
    let t = ctx.t;
    let mut out: Vec<Replay> = Vec::new();
    // (device, graph, corr) -> replay index; for corr 0, the replay still open.
    let mut open: HashMap<(u32, u32, u32), usize> = HashMap::new();
    let mut nodes: HashMap<(u32, u32), HashSet<u64>> = HashMap::new();
    for k in &t.kernels {
        if k.graph_id == 0 {
            continue;
        }
        let Some((s, e)) = ctx.sane(k.start, k.end) else {
            continue;
        };
        if k.graph_node_id != gputrace_format::ENV_NA64 {
            nodes
                .entry((k.device, k.graph_id))
                .or_default()
                .insert(k.graph_node_id);
        }
        let key = (k.device, k.graph_id, k.corr);
        let again = |r: &Replay| {
            k.corr == 0
                && k.graph_node_id != gputrace_format::ENV_NA64
                && k.graph_node_id == r.first_node
        };
        let i = match open.get(&key) {
            Some(&i) if !again(&out[i]) => i,
            _ => {
                out.push(Replay {
                    graph_id: k.graph_id,
                    device: k.device,
                    stream: k.stream,
                    corr: k.corr,
                    start: s,
                    end: e,
                    kernels: 0,
                    busy_ns: 0,
                    first_node: k.graph_node_id,
                    cur: (s, s),
                });
                open.insert(key, out.len() - 1);
                out.len() - 1
            }
        };
        let r = &mut out[i];
        r.kernels += 1;
        r.start = r.start.min(s);
        r.end = r.end.max(e);
        if s > r.cur.1 {
            r.busy_ns += r.cur.1 - r.cur.0;
            r.cur = (s, e);
        } else {
            r.cur.1 = r.cur.1.max(e);
        }
    }
    for r in &mut out {
        r.busy_ns += r.cur.1 - r.cur.0;
        r.cur = (r.end, r.end);
    }
    out.sort_by_key(|r| (r.start, r.device, r.graph_id));
    let nodes = nodes.into_iter().map(|(k, v)| (k, v.len())).collect();
    (out, nodes)
}

/// One graph's replays in the steady state.
#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct GraphReport {
    pub graph_id: u32,
    pub device: u32,
    /// Replays whose first kernel started in the steady state.
    pub replays: u64,
    /// Replays in the whole trace.
    pub replays_total: u64,
    /// Distinct nodes seen running kernels (0 when the trace has no node ids).
    pub nodes: u64,
    /// Medians over the steady state's replays.
    pub kernels_per_replay: u64,
    pub gpu_ns_per_replay: u64,
    pub span_ns_per_replay: u64,
    pub gap_ns_per_replay: u64,
    /// Sums over the steady state's replays.
    pub gpu_ns: u64,
    pub gap_ns: u64,
    /// Gaps as a share of the replays' spans.
    pub gap_pct: f64,
    /// The call that launched it (`cudaGraphLaunch`, `cuGraphLaunch`), when recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub launch_call: Option<String>,
    /// Median host time inside that call, and from its entry to the first kernel.
    pub launch_call_ns_p50: u64,
    pub launch_latency_ns_p50: u64,
    /// Where the graph was captured: the Python call site (`train.py:42 in step`) of the
    /// last graph instantiation that returned before the graph's first replay was
    /// launched (traces of CPython processes with call sites; absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instantiated_at: Option<String>,
}

/// The job's CUDA graphs: present when any kernel ran in a graph.
#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct GraphsReport {
    /// Replays (all graphs) in the steady state.
    pub replays: u64,
    /// Kernels run by replays in the steady state, and their share of its kernels.
    pub kernels: u64,
    pub kernel_pct: f64,
    /// Idle gaps inside replays in the steady state (all graphs).
    pub gap_ns: u64,
    /// Host calls in the steady state that launched a graph, and all launch calls.
    pub launch_calls: u64,
    pub all_launch_calls: u64,
    /// Graph set-up calls over the whole trace (`cudaGraphInstantiate*`,
    /// `cudaGraphUpload`, and driver forms): count and host time.
    pub instantiate_calls: u64,
    pub instantiate_ns: u64,
    pub upload_calls: u64,
    pub upload_ns: u64,
    /// The most replayed graphs first (at most [`MAX_GRAPHS`]).
    pub graphs: Vec<GraphReport>,
    /// Recorded by CUPTI's graph-level tracing (one record per replay, no kernel per
    /// node): a replay counts as one kernel, and its gaps are not seen.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub graph_level: bool,
}

impl GraphsReport {
    /// Whether the job replays graphs in its steady state.
    pub fn replays_graphs(&self) -> bool {
        self.replays > 0
    }
}

fn median(v: &mut [u64]) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[(v.len() - 1) / 2]
}

/// What a recorded call is to a graph: 1 instantiate, 2 upload, 3 launch, 0 other.
fn graph_call(domain: u8, cbid: u32, name: &str) -> u8 {
    let driver = domain == gputrace_format::DOMAIN_DRIVER;
    match (driver, cbid) {
        (false, 310 | 418 | 436 | 437 | 443) | (true, 513 | 578 | 643 | 656 | 657) => 1,
        (false, 348 | 349) | (true, 580 | 581) => 2,
        (false, 311 | 312) | (true, 514 | 515) => 3,
        _ if name.contains("GraphInstantiate") => 1,
        _ if name.contains("GraphUpload") => 2,
        _ if name.contains("GraphLaunch") => 3,
        _ => 0,
    }
}

/// The graphs summary over the steady state `steady`; `None` when no kernel ran in a
/// graph.
pub fn report(ctx: &Ctx, steady: (u64, u64), steady_kernels: u64) -> Option<GraphsReport> {
    let t = ctx.t;
    if !t.kernels.iter().any(|k| k.graph_id != 0) {
        return None;
    }
    let (all, nodes) = replays(ctx);
    // Instantiation calls with a Python call site: (end, place), in end order.
    let mut made: Vec<(u64, String)> = Vec::new();
    if super::callsites::Tally::possible(t) {
        for a in &t.apis {
            if graph_call(a.domain, a.cbid, t.str(a.name)) != 1 {
                continue;
            }
            // The user's innermost frame, as findings name their call sites.
            let mut tally = super::callsites::Tally::new(t);
            tally.add(a.tid, a.start, a.end, t.str(a.name));
            if let Some(site) = tally.finish().first() {
                made.push((a.end, site.place()));
            }
        }
        made.sort();
    }
    // The first replay of each graph: when its launch call began (else its first kernel).
    let mut first: HashMap<(u32, u32), u64> = HashMap::new();
    for r in &all {
        let at = (r.corr != 0)
            .then(|| ctx.api_for(r.corr))
            .flatten()
            .map_or(r.start, |a| a.start.min(r.start));
        let e = first.entry((r.device, r.graph_id)).or_insert(at);
        *e = (*e).min(at);
    }
    let site_of = |key: &(u32, u32)| -> Option<String> {
        let at = *first.get(key)?;
        let i = made.partition_point(|m| m.0 <= at);
        i.checked_sub(1).map(|i| made[i].1.clone())
    };
    let mut out = GraphsReport {
        graph_level: t
            .kernels
            .iter()
            .any(|k| k.graph_id != 0 && t.str(k.name) == crate::model::trace::GRAPH_REPLAY_TEXT),
        ..Default::default()
    };
    for a in &t.apis {
        let Some((s, e)) = ctx.sane(a.start, a.end) else {
            continue;
        };
        match graph_call(a.domain, a.cbid, t.str(a.name)) {
            1 => {
                out.instantiate_calls += 1;
                out.instantiate_ns += e - s;
            }
            2 => {
                out.upload_calls += 1;
                out.upload_ns += e - s;
            }
            3 if s >= steady.0 && s < steady.1 => out.launch_calls += 1,
            _ => {}
        }
    }
    out.all_launch_calls = t
        .apis
        .iter()
        .enumerate()
        .filter(|(i, a)| {
            a.start >= steady.0
                && a.start < steady.1
                && ctx.api.kind(*i) == Some(super::classify::ApiKind::Launch)
        })
        .count() as u64;
    // Per (device, graph): the steady state's replays.
    let mut by: HashMap<(u32, u32), Vec<&Replay>> = HashMap::new();
    let mut total: HashMap<(u32, u32), u64> = HashMap::new();
    for r in &all {
        *total.entry((r.device, r.graph_id)).or_default() += 1;
        if r.start >= steady.0 && r.start < steady.1 {
            by.entry((r.device, r.graph_id)).or_default().push(r);
        }
    }
    let mut graphs: Vec<GraphReport> = Vec::new();
    for (key, rs) in &by {
        let mut kernels: Vec<u64> = rs.iter().map(|r| r.kernels as u64).collect();
        let mut busy: Vec<u64> = rs.iter().map(|r| r.busy_ns).collect();
        let mut span: Vec<u64> = rs.iter().map(|r| r.end - r.start).collect();
        let mut gap: Vec<u64> = rs.iter().map(|r| r.gap_ns()).collect();
        let gpu_ns: u64 = busy.iter().sum();
        let gap_ns: u64 = gap.iter().sum();
        let span_ns: u64 = span.iter().sum();
        let mut call_ns = Vec::new();
        let mut latency = Vec::new();
        let mut call = None;
        for r in rs {
            if let Some(a) = (r.corr != 0).then(|| ctx.api_for(r.corr)).flatten() {
                call.get_or_insert(a.name);
                call_ns.push(a.end.saturating_sub(a.start));
                latency.push(r.start.saturating_sub(a.start));
            }
        }
        out.kernels += kernels.iter().sum::<u64>();
        out.gap_ns += gap_ns;
        out.replays += rs.len() as u64;
        graphs.push(GraphReport {
            graph_id: key.1,
            device: key.0,
            replays: rs.len() as u64,
            replays_total: total.get(key).copied().unwrap_or(0),
            nodes: nodes.get(key).copied().unwrap_or(0) as u64,
            kernels_per_replay: median(&mut kernels),
            gpu_ns_per_replay: median(&mut busy),
            span_ns_per_replay: median(&mut span),
            gap_ns_per_replay: median(&mut gap),
            gpu_ns,
            gap_ns,
            gap_pct: pct(gap_ns, span_ns),
            launch_call: call.map(|n| t.str(n).to_string()),
            launch_call_ns_p50: median(&mut call_ns),
            launch_latency_ns_p50: median(&mut latency),
            instantiated_at: site_of(key),
        });
    }
    // Graphs replayed only outside the steady state are still listed (0 replays).
    for (key, n) in &total {
        if !by.contains_key(key) {
            graphs.push(GraphReport {
                graph_id: key.1,
                device: key.0,
                replays_total: *n,
                nodes: nodes.get(key).copied().unwrap_or(0) as u64,
                instantiated_at: site_of(key),
                ..Default::default()
            });
        }
    }
    graphs.sort_by(|a, b| {
        (b.replays, b.replays_total, b.gpu_ns)
            .cmp(&(a.replays, a.replays_total, a.gpu_ns))
            .then((a.device, a.graph_id).cmp(&(b.device, b.graph_id)))
    });
    graphs.truncate(MAX_GRAPHS);
    out.graphs = graphs;
    out.kernel_pct = pct(out.kernels, steady_kernels);
    Some(out)
}

/// Step boundaries from graph replays, when the job replays a graph per step: the
/// starts of the replays of the graph that repeats most on `dev` (of those replayed
/// within 10% as often, the one whose replays began first: a forward pass before its
/// backward pass), when replays run at least half of the device's kernels.
/// Returns (graph id, replay starts).
pub fn replay_steps(ctx: &Ctx, dev: u32, min_steps: usize) -> Option<(u32, Vec<u64>)> {
    let t = ctx.t;
    let (mut in_graph, mut kernels) = (0usize, 0usize);
    for k in t.kernels.iter().filter(|k| k.device == dev) {
        kernels += 1;
        in_graph += (k.graph_id != 0) as usize;
    }
    if in_graph == 0 || in_graph * 2 < kernels {
        return None;
    }
    let (all, _) = replays(ctx);
    let mut per: HashMap<u32, (usize, u64)> = HashMap::new();
    for r in all.iter().filter(|r| r.device == dev) {
        let e = per.entry(r.graph_id).or_insert((0, r.start));
        e.0 += 1;
    }
    let most = per.values().map(|v| v.0).max()?;
    let (&graph, _) = per
        .iter()
        .filter(|(_, v)| v.0 * 10 >= most * 9)
        .min_by_key(|(g, v)| (v.1, **g))?;
    let mut bounds: Vec<u64> = all
        .iter()
        .filter(|r| r.device == dev && r.graph_id == graph)
        .map(|r| r.start)
        .collect();
    bounds.dedup();
    (bounds.len() > min_steps).then_some((graph, bounds))
}
