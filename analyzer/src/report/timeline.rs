//! The host side of the timeline: each launch or copy call linked to its GPU work by
//! correlation id (launch latency), queue depth per stream at each submission, and what
//! each host thread spent its time in.

use super::classify::ApiKind;
use super::ctx::Ctx;
use super::intervals::GpuWork;
use super::intervals::Select;
use hdrhistogram::Histogram;
use std::collections::{BTreeMap, HashMap, VecDeque};

pub const SERIES_BUCKETS: usize = 20;
/// CUDA queues hold about a thousand entries; deeper means lost completions.
const MAX_TRACKED_DEPTH: usize = 4096;

#[derive(Clone, Debug, Default)]
pub struct StreamQueue {
    pub device: u32,
    pub stream: u32,
    pub works: u64,
    /// Works linked to the call that submitted them.
    pub submits: u64,
    pub depth_sum: u64,
    pub max_depth: u32,
    /// Submissions that found nothing queued or running on the stream.
    pub empty: u64,
    /// Sum of GPU time of this stream's work.
    pub gpu_ns: u64,
}

#[derive(Clone, Debug, Default)]
pub struct ThreadUse {
    pub tid: u32,
    pub calls: u64,
    pub launch_ns: u64,
    pub copy_ns: u64,
    pub sync_ns: u64,
    pub other_ns: u64,
}

pub struct LaunchStats {
    pub linked: u64,
    pub unlinked: u64,
    /// Kernel start minus launch call entry, over linked kernels.
    pub latency: Histogram<u64>,
    /// Time between consecutive launch calls of one thread.
    pub interval: Histogram<u64>,
    /// Launch calls and the host time spent inside them.
    pub launch_calls: u64,
    pub launch_call_ns: u64,
    pub streams: Vec<StreamQueue>,
    /// Mean queue depth at submission over SERIES_BUCKETS slices of the window.
    pub series: Vec<f64>,
    pub threads: Vec<ThreadUse>,
    /// Calls by API name: (count, total ns, longest: (start, dur)).
    pub calls: BTreeMap<String, (u64, u64, (u64, u64))>,
}

impl LaunchStats {
    pub fn empty_pct(&self) -> f64 {
        let (e, s): (u64, u64) = self
            .streams
            .iter()
            .fold((0, 0), |acc, q| (acc.0 + q.empty, acc.1 + q.submits));
        if s == 0 {
            0.0
        } else {
            100.0 * e as f64 / s as f64
        }
    }
    pub fn mean_depth(&self) -> f64 {
        let (d, s): (u64, u64) = self
            .streams
            .iter()
            .fold((0, 0), |acc, q| (acc.0 + q.depth_sum, acc.1 + q.submits));
        if s == 0 {
            0.0
        } else {
            d as f64 / s as f64
        }
    }
}

fn hist() -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1, 1 << 42, 2).expect("valid histogram bounds")
}

pub fn stats(ctx: &Ctx, window: (u64, u64)) -> LaunchStats {
    let (w0, w1) = window;
    let t = ctx.t;
    let mut out = LaunchStats {
        linked: 0,
        unlinked: 0,
        latency: hist(),
        interval: hist(),
        launch_calls: 0,
        launch_call_ns: 0,
        streams: Vec::new(),
        series: vec![0.0; SERIES_BUCKETS],
        threads: Vec::new(),
        calls: BTreeMap::new(),
    };
    let span = w1.saturating_sub(w0).max(1);
    let mut series_n = [0u64; SERIES_BUCKETS];
    let mut series_d = [0u64; SERIES_BUCKETS];
    let mut queues: HashMap<(u32, u32), (StreamQueue, VecDeque<u64>)> = HashMap::new();
    for w in GpuWork::new(ctx, None, Select::ALL) {
        if w.start >= w1 {
            break;
        }
        let dev = match w.kind {
            super::intervals::WorkKind::Kernel => t.kernels[w.index].device,
            super::intervals::WorkKind::Memcpy => t.memcpys[w.index].device,
            super::intervals::WorkKind::Memset => t.memsets[w.index].device,
        };
        let (q, pending) = queues.entry((dev, w.stream)).or_insert_with(|| {
            (
                StreamQueue {
                    device: dev,
                    stream: w.stream,
                    ..Default::default()
                },
                VecDeque::new(),
            )
        });
        let in_window = w.start >= w0;
        let api = ctx.api_by_corr.get(w.corr);
        if let (true, Some(ai)) = (in_window, api) {
            let a = &t.apis[ai];
            while pending.front().is_some_and(|&e| e <= a.end) {
                pending.pop_front();
            }
            let depth = pending.len() as u64;
            q.submits += 1;
            q.depth_sum += depth;
            q.max_depth = q.max_depth.max(depth as u32);
            if depth == 0 {
                q.empty += 1;
            }
            if a.end >= w0 && a.end < w1 {
                let b = ((a.end - w0) as u128 * SERIES_BUCKETS as u128 / span as u128) as usize;
                let b = b.min(SERIES_BUCKETS - 1);
                series_n[b] += 1;
                series_d[b] += depth;
            }
            out.linked += 1;
            if w.kind == super::intervals::WorkKind::Kernel && ctx.api_kind[ai] == ApiKind::Launch {
                out.latency
                    .saturating_record(w.start.saturating_sub(a.start).max(1));
            }
        } else if in_window {
            out.unlinked += 1;
        }
        if in_window {
            q.works += 1;
            q.gpu_ns += w.end - w.start;
        }
        pending.push_back(w.end);
        if pending.len() > MAX_TRACKED_DEPTH {
            pending.pop_front();
        }
    }
    for i in 0..SERIES_BUCKETS {
        out.series[i] = if series_n[i] > 0 {
            series_d[i] as f64 / series_n[i] as f64
        } else {
            0.0
        };
    }
    let mut streams: Vec<StreamQueue> = queues
        .into_values()
        .map(|v| v.0)
        .filter(|q| q.works > 0)
        .collect();
    streams.sort_by_key(|q| (q.device, q.stream));
    out.streams = streams;

    // Host threads and calls.
    let mut threads: HashMap<u32, ThreadUse> = HashMap::new();
    let mut last_launch: HashMap<u32, u64> = HashMap::new();
    let mut calls: HashMap<u32, (u64, u64, (u64, u64))> = HashMap::new();
    let first = t.apis.partition_point(|a| a.start < w0);
    for (i, a) in t.apis.iter().enumerate().skip(first) {
        if a.start >= w1 {
            break;
        }
        let Some((s, e)) = ctx.sane(a.start, a.end) else {
            continue;
        };
        let d = e - s;
        let th = threads.entry(a.tid).or_insert_with(|| ThreadUse {
            tid: a.tid,
            ..Default::default()
        });
        th.calls += 1;
        match ctx.api_kind[i] {
            ApiKind::Launch | ApiKind::Memset | ApiKind::StreamWait => th.launch_ns += d,
            ApiKind::CopyAsync | ApiKind::CopySync => th.copy_ns += d,
            ApiKind::Sync | ApiKind::Free => th.sync_ns += d,
            ApiKind::Alloc | ApiKind::Other => th.other_ns += d,
        }
        if ctx.api_kind[i] == ApiKind::Launch {
            out.launch_calls += 1;
            out.launch_call_ns += d;
            if let Some(prev) = last_launch.insert(a.tid, s) {
                out.interval
                    .saturating_record(s.saturating_sub(prev).max(1));
            }
        }
        let c = calls.entry(a.name).or_insert((0, 0, (s, 0)));
        c.0 += 1;
        c.1 += d;
        if d > c.2 .1 {
            c.2 = (s, d);
        }
    }
    for (name, v) in calls {
        let e = out
            .calls
            .entry(t.str(name).to_string())
            .or_insert((0, 0, (0, 0)));
        e.0 += v.0;
        e.1 += v.1;
        if v.2 .1 >= e.2 .1 {
            e.2 = v.2;
        }
    }
    let mut th: Vec<ThreadUse> = threads.into_values().collect();
    th.sort_by_key(|x| x.tid);
    out.threads = th;
    out
}
