//! The analysis itself: every process through its passes (steps and phases, idle
//! attribution, kernels, launches, copies, memory, communication, host, counters,
//! findings), then the job across processes, into a [`Report`].

use super::ctx::{self, Ctx};
use super::damage::TraceDamage;
use super::findings::{self, FindingId};
use super::idle::{self, Cause};
use super::out::*;
use super::{
    comm, copies, counters, endings, failures, graphs, hang_ranks, host_causes, host_hang, kernels,
    links, phases, stalls, steps, verdict,
};
use crate::model::trace::{demangle, Trace};

/// Rank from the process's recorded settings, if it has one.
fn rank_of(t: &Trace) -> (Option<u32>, String) {
    let ranks = gputrace_format::protocol::RANK_VARS;
    if let Some((r, k)) = gputrace_format::protocol::rank_from(&t.meta.options, ranks) {
        return (Some(r), format!("option {k}"));
    }
    // The rank in the largest communicator the process's NCCL calls used.
    if let Some(n) = t
        .nccl
        .iter()
        .filter(|n| n.rank >= 0 && n.nranks > 0)
        .max_by_key(|n| (n.nranks, std::cmp::Reverse(n.start)))
    {
        return (Some(n.rank as u32), "nccl".into());
    }
    if let Some(c) = t
        .nccl_comms
        .iter()
        .filter(|c| c.rank >= 0 && c.nranks > 0)
        .max_by_key(|c| (c.nranks, std::cmp::Reverse(c.start)))
    {
        return (Some(c.rank as u32), "nccl".into());
    }
    (None, "none".into())
}

/// Analyses one trace per process. Several traces are treated as the ranks of one job,
/// unless they do not look like one ([`crate::model::job`]).
pub fn analyze(traces: &[Trace]) -> Report {
    analyze_with(traces, false).0
}

/// [`analyze`], and each process's [`Timeline`] (in the order of `processes`).
pub fn analyze_timelines(traces: &[Trace]) -> (Report, Vec<Timeline>) {
    let (r, t) = analyze_with(traces, true);
    (r, t.into_iter().flatten().collect())
}

fn analyze_with(traces: &[Trace], timelines: bool) -> (Report, Vec<Option<Timeline>>) {
    // Stable order: by rank when known, else by host and pid, else input order.
    let mut order: Vec<usize> = (0..traces.len()).collect();
    // Processes that did no GPU work are left out when others did.
    let without_cuda: Vec<bool> = traces
        .iter()
        .map(crate::model::job::did_no_gpu_work)
        .collect();
    let mut processes_without_cuda = 0;
    if without_cuda.iter().any(|n| !n) {
        order.retain(|&i| !without_cuda[i]);
        processes_without_cuda = traces.len() - order.len();
    }
    order.sort_by_key(|&i| {
        let (r, _) = rank_of(&traces[i]);
        (
            r.unwrap_or(u32::MAX),
            traces[i].meta.host.clone(),
            traces[i].meta.pid,
            i,
        )
    });
    let multi = order.len() > 1;
    let mut processes = Vec::new();
    let mut all = Vec::new();
    let mut inputs = Vec::new();
    // Processes are analysed independently: one worker per core.
    let each = crate::par::map(&order, crate::par::workers(), |index, &i| {
        let (p, f, r, mut tl) = analyze_process(&traces[i], index, multi, timelines);
        if let Some(tl) = tl.as_mut() {
            tl.trace = i;
        }
        (p, f, r, tl)
    });
    let mut lines = Vec::new();
    for (p, f, r, tl) in each {
        processes.push(p);
        all.extend(f);
        inputs.push(r);
        lines.push(tl);
    }
    let mut trace_set = job_check(traces, &order, &processes);
    let mut cluster = None;
    if multi && !trace_set.as_ref().is_some_and(|s| s.rules_out_one_job()) {
        if let Some(c) = comm::cluster(&inputs) {
            let job = findings::JobCx {
                procs: &processes,
                comm: &c,
            };
            findings::job(&job, &mut all);
            cluster = Some(ClusterReport {
                ranks: c
                    .ranks
                    .iter()
                    .map(|r| ClusterRank {
                        process: r.process,
                        label: processes[r.process].label.clone(),
                        clock_offset_ns: r.clock_offset_ns,
                        collectives: r.collectives,
                        last_arrivals: r.last_arrivals,
                        wait_ns: r.wait_ns,
                    })
                    .collect(),
                alignment: c.alignment.clone(),
                matching: c.matching.clone(),
                residual_ns: c.residual_ns,
                matched_collectives: c.matched,
                unmatched_collectives: c.unmatched,
                straggler: c.straggler,
                straggler_last_pct: c.straggler_last_pct,
                others_wait_ns: c.others_wait_ns,
            });
            trace_set = trace_set.and_then(|s| s.linked_by_collectives());
        }
    }
    if multi && !trace_set.as_ref().is_some_and(|s| s.rules_out_one_job()) {
        // Which rank never arrived at a stuck collective: every rank's NCCL calls.
        let tails: Vec<stalls::NcclTail> = order
            .iter()
            .enumerate()
            .map(|(p, &i)| {
                let h = all
                    .iter()
                    .find(|f| f.id == FindingId::Hang && f.process == Some(p))
                    .and_then(|f| f.hang.as_deref());
                stalls::nccl_tail(&traces[i], h)
            })
            .collect();
        hang_ranks::add(&processes, &tails, &mut all);
        // A hang in collectives through host memory leaves no GPU work outstanding.
        if !all.iter().any(|f| f.id == FindingId::Hang) {
            if let Some(f) = host_hang::detect(traces, &order, &inputs, &processes) {
                all.push(f);
            }
        }
    }
    findings::rank(&mut all);
    let unrelated = multi && trace_set.as_ref().is_some_and(|s| !s.one_job);
    let (verdict, top) = if unrelated {
        // Not one job: a verdict per process, and a list of them for the report's.
        for i in 0..processes.len() {
            let mine: Vec<Finding> = all
                .iter()
                .filter(|f| f.process == Some(i))
                .cloned()
                .collect();
            let (v, top) = one_verdict(&processes[i..=i], &mine);
            processes[i].verdict = Some(v);
            processes[i].top_finding = top;
        }
        (verdict::unrelated(&processes), None)
    } else {
        one_verdict(&processes, &all)
    };
    let report = Report {
        schema_version: SCHEMA_VERSION,
        generator: format!("gputrace {}", env!("CARGO_PKG_VERSION")),
        verdict,
        top_finding: top,
        trace_set,
        processes,
        processes_without_cuda,
        cluster,
        findings: all,
    };
    (report, lines)
}

/// The verdict over `processes` from their ranked findings, qualified by what must be
/// said first (damage, the run's phases, how a process ended).
fn one_verdict(processes: &[ProcessReport], all: &[Finding]) -> (String, Option<FindingId>) {
    let (v, top) = findings::verdict(processes, all);
    let v = verdict::damage(v, processes);
    let v = verdict::phases(v, top, processes);
    let v = verdict::untrusted(v, top, processes, all);
    (verdict::endings(v, top, processes), top)
}

/// Whether the traces look like the ranks of one job (`order[i]`: the trace of
/// `processes[i]`).
fn job_check(
    traces: &[Trace],
    order: &[usize],
    processes: &[ProcessReport],
) -> Option<crate::model::job::TraceSetCheck> {
    let members: Vec<crate::model::job::Member> = order
        .iter()
        .zip(processes)
        .map(|(&i, p)| {
            let t = &traces[i];
            let span = if p.trace_start_ns > 0 {
                Some((p.trace_start_ns, p.trace_start_ns + p.span_ns))
            } else {
                (t.meta.start_real_ns > 0).then_some((t.meta.start_real_ns, t.meta.start_real_ns))
            };
            crate::model::job::Member {
                name: t
                    .path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| p.label.clone()),
                host: &t.meta.host,
                rank: p.rank,
                rank_source: &p.rank_source,
                span,
                options: &t.meta.options,
            }
        })
        .collect();
    crate::model::job::check(&members)
}

fn breakdown(att: &idle::Attribution, wall: u64) -> Breakdown {
    let share = |c: Cause| CauseShare {
        cause: c.id().to_string(),
        ns: att.get(c),
        pct: pct(att.get(c), wall),
        gaps: att.gaps[c as usize],
    };
    let mut causes: Vec<CauseShare> = Cause::ALL
        .iter()
        .filter(|c| c.attributed() && att.get(**c) > 0)
        .map(|&c| share(c))
        .collect();
    causes.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.cause.cmp(&b.cause)));
    let unattributed: Vec<CauseShare> = Cause::ALL
        .iter()
        .filter(|c| !c.attributed() && att.get(**c) > 0)
        .map(|&c| share(c))
        .collect();
    let attributed = att.attributed_ns();
    Breakdown {
        method: att.method.name().into(),
        wall_ns: wall,
        busy_ns: att.busy_ns,
        busy_pct: pct(att.busy_ns, wall),
        idle_ns: att.idle_ns,
        idle_pct: pct(att.idle_ns, wall),
        attributed_ns: attributed,
        attributed_pct: pct(attributed, att.idle_ns),
        causes,
        unattributed_ns: att.idle_ns.saturating_sub(attributed),
        unattributed,
    }
}

/// One pass per device over start-up, steady state and tail, cut at the run's phase
/// edges so that each phase kind gets its own share too.
struct Passes {
    startup: idle::Attribution,
    steady: idle::Attribution,
    tail: idle::Attribution,
    /// Devices with work in the steady state (at least one).
    steady_devices: u64,
    startup_devices: u64,
    /// Kernel busy time in the steady state, summed over devices.
    kernel_busy: u64,
    per_dev: Vec<(u32, f64)>,
    /// Busy time per step on the primary device.
    step_busy: Vec<u64>,
    /// Queue depth and launch latency in the steady state.
    queues: links::QueueTracker,
    /// (memcpy index, ns with no kernel alongside) for steady-state copies, by index.
    exposure: Vec<(u32, u64)>,
    /// Every idle piece, when a timeline was asked for.
    idle: Option<Vec<idle::IdlePiece>>,
    /// Per phase kind, in the order of the run's `by_kind`: its time summed over the
    /// devices counted for it, and how many they were.
    kinds: Vec<(idle::Attribution, u64)>,
}

/// The windows of the passes: start-up, steady state and tail, each cut at the edges of
/// the run's phases inside it.
struct Windows {
    bounds: Vec<u64>,
    /// Per window: the start-up (0), the steady state (1) or the tail (2) it lies in.
    part: Vec<usize>,
    /// Per window: the phase kind it lies in (an index into the run's `by_kind`).
    kind: Vec<Option<usize>>,
}

impl Windows {
    fn of(ctx: &Ctx, st: &steps::Steps, run: &phases::Run) -> Windows {
        let parts = [
            st.startup.0,
            st.steady.0,
            st.steady.1,
            st.tail.1.max(st.steady.1),
        ];
        // A window's part: the part that held its start before the cuts (an empty part
        // holds nothing).
        let part_of = |t: u64| parts[1..3].partition_point(|&b| b <= t);
        if parts.windows(2).any(|w| w[0] > w[1]) {
            // Out of order: the three parts as they are, no cuts.
            return Windows {
                bounds: parts.to_vec(),
                part: vec![0, 1, 2],
                kind: vec![None; 3],
            };
        }
        let mut bounds = parts.to_vec();
        for p in &run.phases {
            for e in [p.start_ns, p.end_ns] {
                bounds.push(ctx.t0.saturating_add(e).clamp(parts[0], parts[3]));
            }
        }
        bounds.sort_unstable();
        bounds.dedup();
        let kind_index = |k: phases::Kind| run.by_kind.iter().position(|x| x.kind == k);
        let n = bounds.len().saturating_sub(1);
        let part = bounds[..n].iter().map(|&s| part_of(s)).collect();
        let kind = bounds[..n]
            .iter()
            .map(|&s| {
                // The phase holding the window's start holds all of it (its edges are cuts).
                let rel = s.checked_sub(ctx.t0)?;
                let i = run.phases.partition_point(|p| p.start_ns <= rel);
                let p = &run.phases[i.checked_sub(1)?];
                if rel >= p.end_ns {
                    return None;
                }
                kind_index(p.kind)
            })
            .collect();
        Windows { bounds, part, kind }
    }
}

fn passes(ctx: &Ctx, st: &steps::Steps, run: &phases::Run, timeline: bool) -> Passes {
    let method = idle::Method::of(ctx);
    let win = Windows::of(ctx, st, run);
    let parts = [
        st.startup,
        st.steady,
        (st.tail.0, st.tail.1.max(st.steady.1)),
    ];
    let mut out = Passes {
        startup: idle::Attribution::empty(st.startup, method),
        steady: idle::Attribution::empty(st.steady, method),
        tail: idle::Attribution::empty(st.tail, method),
        steady_devices: 0,
        startup_devices: 0,
        kernel_busy: 0,
        per_dev: Vec::new(),
        step_busy: Vec::new(),
        queues: links::QueueTracker::new(st.steady),
        exposure: Vec::new(),
        idle: None,
        kinds: vec![(idle::Attribution::empty((0, 0), method), 0); run.by_kind.len()],
    };
    let mut extras = idle::Extras {
        queues: Some(links::QueueTracker::new(st.steady)),
        exposure_window: Some(st.steady),
        exposure: Vec::new(),
        idle: timeline.then(Vec::new),
        idle_only: None,
    };
    let wlen = st.steady.1.saturating_sub(st.steady.0);
    for &d in &ctx.devices {
        let steps = (Some(d) == ctx.primary && st.bounds.len() > 1).then_some(st.bounds.as_slice());
        let mut p = idle::attribute_windows(ctx, d, &win.bounds, steps, &mut extras);
        if steps.is_some() {
            out.step_busy = std::mem::take(&mut p.step_busy);
        }
        // The cut windows back into their parts, and into their phase kinds.
        let mut whole = parts.map(|w| idle::Attribution::empty(w, method));
        let mut kernel_busy = [0u64; 3];
        let mut kinds = vec![idle::Attribution::empty((0, 0), method); out.kinds.len()];
        for (i, w) in p.windows.iter().enumerate() {
            whole[win.part[i]].merge(w);
            kernel_busy[win.part[i]] += p.kernel_busy[i];
            if let Some(k) = win.kind[i] {
                kinds[k].merge(w);
            }
        }
        let [su, sd, tl] = whole;
        out.per_dev.push((d, pct(sd.busy_ns, wlen)));
        let primary = Some(d) == ctx.primary;
        if sd.busy_ns > 0 || primary {
            out.steady_devices += 1;
            out.steady.merge(&sd);
            out.kernel_busy += kernel_busy[1];
            out.tail.merge(&tl);
        }
        if su.busy_ns > 0 || primary {
            out.startup_devices += 1;
            out.startup.merge(&su);
        }
        // As the steady state counts them: devices with work in the kind, and the
        // primary one.
        for ((all, devices), mine) in out.kinds.iter_mut().zip(&kinds) {
            if mine.busy_ns > 0 || primary {
                *devices += 1;
                all.merge(mine);
            }
        }
    }
    out.steady_devices = out.steady_devices.max(1);
    out.startup_devices = out.startup_devices.max(1);
    if let Some(q) = extras.queues.take() {
        out.queues = q;
    }
    extras.exposure.sort_unstable();
    out.exposure = extras.exposure;
    out.idle = extras.idle.take();
    out
}

fn phase(ctx: &Ctx, w: (u64, u64), busy_ns: u64, devices: u64) -> Phase {
    let wall = w.1.saturating_sub(w.0);
    Phase {
        start_ns: ctx.rel(w.0),
        end_ns: ctx.rel(w.1),
        wall_ns: wall,
        busy_ns,
        busy_pct: pct(busy_ns, wall * devices.max(1)),
    }
}

fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn steps_report(ctx: &Ctx, s: &steps::Steps, step_busy: &[u64]) -> StepsReport {
    let mut r = StepsReport {
        detected: s.source != steps::StepSource::None,
        source: match s.source {
            steps::StepSource::KernelPeriod => "kernel_period".into(),
            steps::StepSource::Nvtx => "nvtx".into(),
            steps::StepSource::GraphReplay => "graph_replay".into(),
            steps::StepSource::None => "none".into(),
        },
        anchor_kernel: s.anchor.map(|n| steps::anchor_label(ctx.t, n)),
        nvtx_range: s.nvtx_text.map(|n| ctx.t.str(n).to_string()),
        ops_per_step: s.period,
        count: s.count(),
        warmup_steps: s.warmup_steps,
        irregular_boundaries: s.irregular,
        graph_id: s.graph_id,
        ..Default::default()
    };
    if s.count() == 0 {
        return r;
    }
    // Busy time per step on the device the steps were found on.
    let n = s.count();
    let mut busy = step_busy.to_vec();
    busy.resize(n, 0);
    let durs: Vec<u64> = s.bounds.windows(2).map(|w| w[1] - w[0]).collect();
    let busy_pct: Vec<f64> = durs.iter().zip(&busy).map(|(&d, &b)| pct(b, d)).collect();
    let mut sd = durs.clone();
    sd.sort_unstable();
    let mean = sd.iter().map(|&x| x as f64).sum::<f64>() / n as f64;
    let var = sd.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n as f64;
    let mut bp = busy_pct.clone();
    bp.sort_by(|a, b| a.total_cmp(b));
    r.step_ns_median = percentile(&sd, 0.5);
    r.step_ns_mean = mean as u64;
    r.step_ns_min = sd[0];
    r.step_ns_max = sd[n - 1];
    r.step_ns_p90 = percentile(&sd, 0.9);
    r.spread_pct = pct(r.step_ns_max - r.step_ns_min, r.step_ns_median);
    r.cv_pct = if mean > 0.0 {
        100.0 * var.sqrt() / mean
    } else {
        0.0
    };
    r.busy_pct_median = bp[bp.len() / 2];
    r.busy_pct_min = bp[0];
    r.busy_pct_max = bp[bp.len() - 1];
    r.list = (0..n.min(MAX_STEP_ROWS))
        .map(|i| StepRow {
            index: i,
            start_ns: ctx.rel(s.bounds[i]),
            dur_ns: durs[i],
            busy_pct: busy_pct[i],
        })
        .collect();
    r
}

/// Notes on how the trace was collected and what it lacks: the attribution method, a
/// late load, the trace window, records without or with impossible timestamps, and
/// devices left out.
fn trace_notes(t: &Trace, ctx: &Ctx, no_device_info: bool) -> Vec<String> {
    let mut notes = Vec::new();
    match idle::Method::of(ctx) {
        idle::Method::HostApi => {}
        idle::Method::HostHooks => notes.push(
            "no host API events in this trace (CUPTI callbacks unavailable): host activity comes from the symbol hooks' sync, launch and copy calls, without correlation ids".to_string(),
        ),
        idle::Method::GpuOnly => notes.push(
            "no host API events in this trace (host callbacks unavailable): idle causes come from GPU-only heuristics".to_string(),
        ),
    }
    if t.meta
        .started_by
        .ends_with(gputrace_format::protocol::LOADED_LATE)
    {
        notes.push(
            "libgputrace.so was loaded into the running program by `gputrace attach`: kernels already running at the load, NVTX ranges (so steps come from the GPU's rhythm), NCCL call arguments and pinned host memory allocated before the load are not in this trace".to_string(),
        );
    }
    if let Some((lo, hi)) = t.window {
        notes.push(format!(
            "trace window on request ({}): {:.3} s; {} GPU records began before it (clipped to its start), {} were still running when it closed (no timestamps: left out)",
            t.meta.started_by,
            hi.saturating_sub(lo) as f64 / 1e9,
            t.clipped,
            t.incomplete
        ));
    } else if t.incomplete > 0 {
        notes.push(format!(
            "{} GPU records had no timestamps (still running when collection stopped) and were left out",
            t.incomplete
        ));
    }
    if ctx.bad_records > 0 {
        notes.push(format!(
            "{} records with impossible timestamps (end before start, or far outside the trace) were clipped or ignored",
            ctx.bad_records
        ));
    }
    if ctx.devices_dropped > 0 {
        notes.push(format!(
            "{} more device ids had work; only the {} busiest were analysed",
            ctx.devices_dropped,
            ctx::MAX_DEVICES
        ));
    }
    if no_device_info {
        notes.push("some kernels ran on devices without a device record: their grid fill (small_grid) is not computed".into());
    }
    notes
}

/// One report per analysed device: its name, SM count, memory, compute capability and
/// steady-state busy share.
fn device_reports(t: &Trace, ctx: &Ctx, per_dev: &[(u32, f64)]) -> Vec<DeviceReport> {
    ctx.devices
        .iter()
        .map(|&d| {
            let info = ctx.device_info(d);
            DeviceReport {
                id: d,
                name: info.map(|i| t.str(i.name).to_string()).unwrap_or_default(),
                sm_count: info.map(|i| i.sm_count).unwrap_or(0),
                memory_bytes: info.map(|i| i.global_memory).unwrap_or(0),
                compute_capability: info
                    .map(|i| format!("{}.{}", i.cc_major, i.cc_minor))
                    .unwrap_or_default(),
                steady_busy_pct: per_dev
                    .iter()
                    .find(|p| p.0 == d)
                    .map(|p| p.1)
                    .unwrap_or(0.0),
            }
        })
        .collect()
}

/// The steady-state kernel report: rate, duration quantiles, share of kernels under
/// 10 µs and the ten kernels with the most time.
fn kernels_report(t: &Trace, kstats: &kernels::KernelStats, swin: u64) -> KernelsReport {
    let h = &kstats.hist;
    KernelsReport {
        count: kstats.count,
        total_ns: kstats.total_ns,
        per_second: if swin > 0 {
            kstats.count as f64 * 1e9 / swin as f64
        } else {
            0.0
        },
        p50_ns: if kstats.count > 0 {
            h.value_at_quantile(0.5)
        } else {
            0
        },
        p90_ns: if kstats.count > 0 {
            h.value_at_quantile(0.9)
        } else {
            0
        },
        p99_ns: if kstats.count > 0 {
            h.value_at_quantile(0.99)
        } else {
            0
        },
        max_ns: if kstats.count > 0 { h.max() } else { 0 },
        under_10us_count_pct: pct(kstats.tiny_count, kstats.count),
        under_10us_time_pct: pct(kstats.tiny_ns, kstats.total_ns),
        top: kstats
            .by_name
            .iter()
            .take(10)
            .map(|a| TopKernel {
                name: demangle(t.str(a.name)),
                count: a.count,
                total_ns: a.total_ns,
                mean_ns: a.total_ns / a.count.max(1),
                blocks_min: if a.blocks_min == u64::MAX {
                    0
                } else {
                    a.blocks_min
                },
                blocks_max: a.blocks_max,
                threads_per_block: a.threads,
                resident_blocks_per_sm: (a.fill_known_ns > 0).then_some(a.resident),
                fill_pct: (a.fill_known_ns > 0).then(|| 100.0 * a.fill_ns / a.fill_known_ns as f64),
                comm: a.comm,
            })
            .collect(),
    }
}

/// The steady-state launch report: launch latency and interval quantiles, launch call
/// time, queue depth and one row per stream.
fn launch_report(launches: &links::LaunchStats) -> LaunchReport {
    let q = |hh: &hdrhistogram::Histogram<u64>, x: f64| {
        if hh.is_empty() {
            0
        } else {
            hh.value_at_quantile(x)
        }
    };
    LaunchReport {
        linked: launches.linked,
        unlinked: launches.unlinked,
        latency_p50_ns: q(&launches.latency, 0.5),
        latency_p90_ns: q(&launches.latency, 0.9),
        latency_p99_ns: q(&launches.latency, 0.99),
        latency_max_ns: if launches.latency.is_empty() {
            0
        } else {
            launches.latency.max()
        },
        launch_calls: launches.launch_calls,
        launch_call_p50_ns: launches.launch_call_ns / launches.launch_calls.max(1),
        launch_interval_p50_ns: q(&launches.interval, 0.5),
        empty_queue_pct: launches.empty_pct(),
        mean_queue_depth: launches.mean_depth(),
        queue_depth_series: launches.series.clone(),
        streams: launches
            .streams
            .iter()
            .map(|s| StreamReport {
                device: s.device,
                stream: s.stream,
                works: s.works,
                gpu_ns: s.gpu_ns,
                mean_depth: if s.submits > 0 {
                    s.depth_sum as f64 / s.submits as f64
                } else {
                    0.0
                },
                max_depth: s.max_depth,
                empty_pct: pct(s.empty, s.submits),
            })
            .collect(),
    }
}

/// One row per group of steady-state copies (host memory kind, direction, async or
/// not): count, bytes, time, time exposed and throughput.
fn copy_reports(cstats: &copies::CopyStats) -> Vec<CopyReport> {
    cstats
        .groups
        .iter()
        .map(|g| CopyReport {
            host_memory: g.host_memory.to_string(),
            direction: g.direction.to_string(),
            is_async: g.is_async,
            count: g.count,
            bytes: g.bytes,
            time_ns: g.time_ns,
            exposed_ns: g.exposed_ns,
            gbps: g.gbps(),
        })
        .collect()
}

/// One row per device's memory use: peak bytes, capacity and peak share of it.
fn memory_reports(memory: &[kernels::MemoryUse]) -> Vec<MemoryReport> {
    memory
        .iter()
        .map(|m| MemoryReport {
            device: m.device,
            peak_bytes: m.peak_bytes,
            capacity_bytes: m.capacity_bytes,
            peak_pct: (m.capacity_bytes > 0).then(|| pct(m.peak_bytes, m.capacity_bytes)),
            lower_bound: m.lower_bound,
            events: m.events,
        })
        .collect()
}

/// One row per host thread that called the CUDA API: its name, calls and time in
/// launches, copies, syncs and other calls.
fn thread_reports(t: &Trace, launches: &links::LaunchStats) -> Vec<ThreadReport> {
    launches
        .threads
        .iter()
        .map(|th| ThreadReport {
            tid: th.tid,
            name: t.thread_name(th.tid).to_string(),
            calls: th.calls,
            launch_ns: th.launch_ns,
            copy_ns: th.copy_ns,
            sync_ns: th.sync_ns,
            other_ns: th.other_ns,
        })
        .collect()
}

/// The process's timeline: its steps and phases, every idle piece, its collectives and
/// its CUDA graph replays.
fn process_timeline(
    t: &Trace,
    ctx: &Ctx,
    index: usize,
    st: &steps::Steps,
    idle: Vec<idle::IdlePiece>,
    collectives: &[comm::Collective],
) -> Timeline {
    Timeline {
        collectives: collectives.to_vec(),
        trace: index,
        process: index,
        steps: st.bounds.clone(),
        startup: st.startup,
        steady: st.steady,
        tail: st.tail,
        idle,
        replays: if t.kernels.iter().any(|k| k.graph_id != 0) {
            graphs::replays(ctx).0
        } else {
            Vec::new()
        },
    }
}

/// What this process contributes to the cluster analysis: its collectives (NCCL kernels,
/// or collectives through host memory and those it never left), its clocks, its steady
/// state, its last activity and its end.
fn rank_input(t: &Trace, ctx: &Ctx, steady: (u64, u64)) -> comm::RankInput {
    let end = stalls::end_of(t).1.max(ctx.t1);
    // Without NCCL kernels, the copies give both (read once).
    let (colls, pending) = if ctx.comm_name.iter().any(|&c| c) {
        (comm::collectives(ctx), Vec::new())
    } else {
        comm::host_copies_until(ctx, end)
    };
    comm::RankInput {
        host: t.meta.host.clone(),
        clocks: t.clocks.clone(),
        colls,
        pending,
        steady,
        last_activity: ctx.t1,
        end,
    }
}

fn analyze_process(
    t: &Trace,
    index: usize,
    multi: bool,
    timeline: bool,
) -> (
    ProcessReport,
    Vec<Finding>,
    comm::RankInput,
    Option<Timeline>,
) {
    let ctx = Ctx::new(t);
    let (rank, rank_source) = rank_of(t);
    let label = match rank {
        Some(r) => format!("rank {r}"),
        None if multi => format!("#{index} pid {}@{}", t.meta.pid, t.meta.host),
        None => format!("pid {}", t.meta.pid),
    };
    let st = steps::detect(&ctx);
    // The run's phases first: their edges cut the passes' windows.
    let ended = endings::ended(t);
    let mut run = phases::run(&ctx, &st, ended.normal);
    let mut ps = passes(&ctx, &st, &run, timeline);
    let after: Vec<u64> = run
        .by_kind
        .iter()
        .map(|k| run.after_gpu_work(k.kind))
        .collect();
    for ((k, (a, devices)), after) in run.by_kind.iter_mut().zip(&ps.kinds).zip(after) {
        k.set_idle(a.busy_ns, &a.by_cause, *devices, after);
    }
    let devs_active = ps.steady_devices;
    let wall = st.steady.1.saturating_sub(st.steady.0) * devs_active;
    let swall = st.startup.1.saturating_sub(st.startup.0) * ps.startup_devices;
    let per_dev = ps.per_dev.clone();
    let kstats = kernels::stats(&ctx, st.steady, ps.kernel_busy);
    let launches = links::stats(&ctx, st.steady, ps.queues);
    let cstats = copies::stats(&ctx, st.steady, &ps.exposure);
    let memory = kernels::memory(&ctx, st.steady);
    let cm = comm::stats(&ctx, st.steady);
    let tail_busy = ps.tail.busy_ns;
    let satt = ps.startup;
    let att = ps.steady;

    let mut notes = trace_notes(t, &ctx, kstats.no_device_info);
    let hung = stalls::detect(t, ctx.t0, st.steady.0);
    notes.extend(hung.notes);
    let damage = TraceDamage::of(t, ctx.t0);
    if let Some(d) = &damage {
        notes.push(d.summary.clone());
    }
    let host_cpu = host_causes::report(&ctx, &att, st.steady);
    // Said where it qualifies a finding: when data_starvation is reported.
    if host_cpu.is_none() && pct(att.get(Cause::DataStarvation), wall) >= findings::REPORT_PCT {
        notes.push(host_causes::NOT_MEASURED_NOTE.to_string());
    }
    if st.source == steps::StepSource::None && !ctx.devices.is_empty() {
        notes.push("no repeating step found: the steady state is taken from the end of the first long idle stretch (or the first GPU work) to the last GPU work".into());
    }

    let dev_reports = device_reports(t, &ctx, &per_dev);

    let swin = st.steady.1.saturating_sub(st.steady.0);
    let kreport = kernels_report(t, &kstats, swin);
    let lreport = launch_report(&launches);
    let counters = counter_stats(t, st.steady);
    let sm_fill = (kstats.fill_known_ns > 0 && swin > 0)
        .then(|| (100.0 * kstats.fill_ns / (swin * devs_active) as f64).min(100.0));
    let mut report = ProcessReport {
        index,
        label: label.clone(),
        path: t.path.display().to_string(),
        pid: t.meta.pid,
        host: t.meta.host.clone(),
        rank,
        rank_source,
        command: crate::secrets::cmdline(&t.meta.cmdline),
        trace_start_ns: ctx.t0,
        span_ns: ctx.t1 - ctx.t0,
        host_api_events: t.apis.len() as u64,
        ended,
        attribution: idle::Method::of(&ctx).name().into(),
        devices: dev_reports,
        startup: phase(&ctx, st.startup, satt.busy_ns, ps.startup_devices),
        steady: phase(&ctx, st.steady, att.busy_ns, devs_active),
        tail: phase(&ctx, st.tail, tail_busy, devs_active),
        steps: steps_report(&ctx, &st, &ps.step_busy),
        breakdown: breakdown(&att, wall),
        startup_breakdown: breakdown(&satt, swall),
        gpu_util_pct: pct(ps.kernel_busy, wall),
        sm_fill_pct: sm_fill,
        measured: counters.measured.clone(),
        measured_kernels: counters::top_kernels(&counters, 5, |n| {
            findings::kernel_name_of(t.str(n))
        }),
        kernels: kreport,
        launches: lreport,
        copies: copy_reports(&cstats),
        memory: memory_reports(&memory),
        memory_in_use: MemoryInUse::of(&ctx, &st.bounds),
        comm: CommReport {
            kernels: cm.kernels,
            time_ns: cm.comm_ns,
            exposed_ns: cm.exposed_ns,
            exposed_pct: pct(cm.exposed_ns, cm.comm_ns),
        },
        threads: thread_reports(t, &launches),
        notes,
        damage,
        host_cpu,
        environment: crate::report::environment::summary(t, st.steady.0, st.steady.1),
        graphs: graphs::report(&ctx, st.steady, kstats.count),
        run: Some(run).filter(|r| r.span_ns > 0),
        failed_calls: failures::failed_calls(t, ctx.t0),
        fatal_call: failures::fatal(t, ctx.t0),
        verdict: None,
        top_finding: None,
    };
    if let Some(r) = report.run.as_mut() {
        let step_ns = if report.steps.detected {
            report.steps.step_ns_median
        } else {
            0
        };
        phases::name_periods(r, step_ns);
    }
    let rank_input = rank_input(t, &ctx, st.steady);
    let tl = ps.idle.take().map(|idle| {
        let mut all = rank_input.colls.clone();
        all.extend(rank_input.pending.iter().cloned());
        process_timeline(t, &ctx, index, &st, idle, &all)
    });
    let cx = findings::FindingCx {
        ctx: &ctx,
        index,
        label,
        steps: st,
        att,
        wall,
        kstats,
        copies: cstats,
        memory,
        comm: cm,
        counters,
        report: &report,
        hang: hung.hang,
    };
    let f = findings::process(&cx);
    (report, f, rank_input, tl)
}

/// The counter picture of the steady state: its kernels are decoded from the compact
/// table only when there are samples to set them against.
fn counter_stats(t: &Trace, steady: (u64, u64)) -> counters::CounterStats {
    if t.counter_samples.is_empty() {
        return counters::CounterStats::default();
    }
    let kernels: Vec<gputrace_format::Kernel> = (t.kernels.iter())
        .filter(|k| k.end > steady.0 && k.start < steady.1)
        .collect();
    counters::stats(&t.counter_samples, &kernels, steady)
}
