//! The host side of the timeline: each launch or copy call linked to its GPU work by
//! correlation id (launch latency), queue depth per stream at each submission, and what
//! each host thread spent its time in.

use super::classify::ApiKind;
use super::ctx::Ctx;
use super::intervals::{Work, WorkKind};
use super::keymap::{KeyMap, NameMap};
use hdrhistogram::Histogram;
use std::collections::{BTreeMap, VecDeque};

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

/// Queue depth and launch latency, fed the GPU work of each device in start order by
/// the idle pass (one walk over the work serves both).
pub struct QueueTracker {
    window: (u64, u64),
    /// Per stream: its queue, the ends of work still pending, and the correlation id
    /// of the last CUDA graph kernel (the later nodes of a replay are not submissions).
    queues: KeyMap<(StreamQueue, VecDeque<u64>, u32)>,
    pub linked: u64,
    pub unlinked: u64,
    pub latency: Histogram<u64>,
    series_n: [u64; SERIES_BUCKETS],
    series_d: [u64; SERIES_BUCKETS],
}

impl QueueTracker {
    pub fn new(window: (u64, u64)) -> Self {
        QueueTracker {
            window,
            queues: KeyMap::new(),
            linked: 0,
            unlinked: 0,
            latency: hist(),
            series_n: [0; SERIES_BUCKETS],
            series_d: [0; SERIES_BUCKETS],
        }
    }

    /// One piece of work on `dev`; works of a device arrive in start order.
    #[inline]
    pub fn observe(&mut self, ctx: &Ctx, dev: u32, w: &Work) {
        let (w0, w1) = self.window;
        if w.start >= w1 {
            return;
        }
        let t = ctx.t;
        let (q, pending, graph_corr) =
            self.queues
                .entry(((dev as u64) << 32) | w.stream as u64, || {
                    (
                        StreamQueue {
                            device: dev,
                            stream: w.stream,
                            ..Default::default()
                        },
                        VecDeque::new(),
                        0,
                    )
                });
        let in_window = w.start >= w0;
        // A CUDA graph replay is one submission (its launch call), not one per node.
        let graph = w.kind == WorkKind::Kernel
            && w.corr != 0
            && t.kernels.get(w.index).is_some_and(|k| k.graph_id != 0);
        let later_node = graph && *graph_corr == w.corr;
        *graph_corr = if graph { w.corr } else { 0 };
        if in_window && later_node {
            match ctx.api_by_corr.get(w.corr) {
                Some(_) => self.linked += 1,
                None => self.unlinked += 1,
            }
            q.works += 1;
            q.gpu_ns += w.end - w.start;
        } else if in_window {
            match ctx.api_by_corr.get(w.corr) {
                Some(ai) => {
                    let a = t.apis.at(ai);
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
                        let span = (w1 - w0).max(1);
                        let b =
                            ((a.end - w0) as u128 * SERIES_BUCKETS as u128 / span as u128) as usize;
                        let b = b.min(SERIES_BUCKETS - 1);
                        self.series_n[b] += 1;
                        self.series_d[b] += depth;
                    }
                    self.linked += 1;
                    if w.kind == WorkKind::Kernel && ctx.api.kind(ai) == Some(ApiKind::Launch) {
                        self.latency
                            .saturating_record(w.start.saturating_sub(a.start).max(1));
                    }
                }
                None => self.unlinked += 1,
            }
            q.works += 1;
            q.gpu_ns += w.end - w.start;
        }
        pending.push_back(w.end);
        if pending.len() > MAX_TRACKED_DEPTH {
            pending.pop_front();
        }
    }
}

/// Launch and host-thread statistics in the window; `queues` is what the idle pass
/// gathered about GPU work.
pub fn stats(ctx: &Ctx, window: (u64, u64), queues: QueueTracker) -> LaunchStats {
    let (w0, w1) = window;
    let t = ctx.t;
    let mut out = LaunchStats {
        linked: queues.linked,
        unlinked: queues.unlinked,
        latency: queues.latency,
        interval: hist(),
        launch_calls: 0,
        launch_call_ns: 0,
        streams: Vec::new(),
        series: vec![0.0; SERIES_BUCKETS],
        threads: Vec::new(),
        calls: BTreeMap::new(),
    };
    let (series_n, series_d) = (queues.series_n, queues.series_d);
    let queues = queues.queues;
    for i in 0..SERIES_BUCKETS {
        out.series[i] = if series_n[i] > 0 {
            series_d[i] as f64 / series_n[i] as f64
        } else {
            0.0
        };
    }
    let mut streams: Vec<StreamQueue> = queues
        .into_pairs()
        .map(|(_, v)| v.0)
        .filter(|q| q.works > 0)
        .collect();
    streams.sort_by_key(|q| (q.device, q.stream));
    out.streams = streams;

    // Host threads and calls.
    let mut threads: KeyMap<(ThreadUse, u64)> = KeyMap::new();
    let mut calls: NameMap<(u64, u64, (u64, u64))> = NameMap::new(t.strings.len());
    let first = t.apis.partition_point(|a| a.start < w0);
    for (i, a) in t.apis.iter().enumerate().skip(first) {
        if a.start >= w1 {
            break;
        }
        let Some((s, e)) = ctx.sane(a.start, a.end) else {
            continue;
        };
        let d = e - s;
        let (th, last_launch) = threads.entry(a.tid as u64, || {
            (
                ThreadUse {
                    tid: a.tid,
                    ..Default::default()
                },
                u64::MAX,
            )
        });
        th.calls += 1;
        match ctx.api.kind(i).unwrap_or(ApiKind::Other) {
            ApiKind::Launch | ApiKind::Memset | ApiKind::StreamWait => th.launch_ns += d,
            ApiKind::CopyAsync | ApiKind::CopySync => th.copy_ns += d,
            ApiKind::Sync | ApiKind::Free => th.sync_ns += d,
            ApiKind::Alloc | ApiKind::Other => th.other_ns += d,
        }
        if ctx.api.kind(i) == Some(ApiKind::Launch) {
            out.launch_calls += 1;
            out.launch_call_ns += d;
            if *last_launch != u64::MAX {
                out.interval
                    .saturating_record(s.saturating_sub(*last_launch).max(1));
            }
            *last_launch = s;
        }
        let c = calls.entry(a.name, || (0, 0, (s, 0)));
        c.0 += 1;
        c.1 += d;
        if d > c.2 .1 {
            c.2 = (s, d);
        }
    }
    for (name, v) in calls.into_pairs() {
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
    let mut th: Vec<ThreadUse> = threads.into_pairs().map(|(_, v)| v.0).collect();
    th.sort_by_key(|x| x.tid);
    out.threads = th;
    out
}
