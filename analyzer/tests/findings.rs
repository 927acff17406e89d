//! Every finding id on a synthetic trace whose answer is known.

mod common;

use common::*;
use gputrace_analyzer::report::{analyze, Finding, FindingId, Report, Severity};
use gputrace_analyzer::Trace;
use gputrace_format::{self as fmt, Event};

fn report(t: Trace) -> Report {
    analyze(&[t])
}

use common::{find, get};

fn near(got: u64, want: u64, tol_pct: f64) -> bool {
    let d = (got as f64 - want as f64).abs();
    d <= want as f64 * tol_pct / 100.0
}

fn assert_near(what: &str, got: u64, want: u64, tol_pct: f64) {
    assert!(
        near(got, want, tol_pct),
        "{what}: got {got}, want {want} (±{tol_pct}%)"
    );
}

fn warn_ids(r: &Report) -> Vec<&str> {
    r.findings
        .iter()
        .filter(|f| f.severity >= Severity::Warn)
        .map(|f| f.id.as_str())
        .collect()
}

#[test]
fn healthy_gets_no_warning() {
    let r = report(healthy(30).build());
    assert!(
        warn_ids(&r).is_empty(),
        "{:?}\n{}",
        warn_ids(&r),
        gputrace_analyzer::render_text(&r)
    );
    assert!(r.verdict.starts_with("Healthy"), "{}", r.verdict);
    let p = &r.processes[0];
    assert_eq!(p.steps.count, 29);
    assert_eq!(p.steps.ops_per_step, Some(4));
    assert!(p.breakdown.busy_pct > 99.0, "{}", p.breakdown.busy_pct);
    // The two seconds of imports are start-up, not steady state.
    assert!(p.startup.wall_ns >= 2 * S);
    assert!(p.gpu_util_pct > 99.0);
    assert!(p.sm_fill_pct.unwrap() > 99.0);
}

#[test]
fn data_starvation_is_measured() {
    let r = report(data_starved(20).build());
    let f = get(&r, FindingId::DataStarvation);
    assert_eq!(r.findings[0].id, FindingId::DataStarvation);
    assert_eq!(f.severity, Severity::Critical);
    assert!(!f.estimated);
    // 19 steady steps, 6022 us each with no host call.
    assert_near("data_starvation", f.at_stake_ns, 19 * 6022 * US, 0.5);
    assert_near(
        "pct",
        (f.at_stake_pct * 100.0) as u64,
        (6022.0 / 8035.0 * 10000.0) as u64,
        0.5,
    );
    let p = &r.processes[0];
    assert_eq!(p.steps.count, 19);
    assert_near("step", p.steps.step_ns_median, 8035 * US, 0.1);
    assert_near("idle", p.breakdown.idle_ns, 19 * 6032 * US, 0.2);
    assert!(p.breakdown.attributed_pct > 99.9);
    assert!(
        r.verdict.contains("biggest cause: data_starvation"),
        "{}",
        r.verdict
    );
    // Examples are relative to the trace start, in the steady state.
    assert!(f
        .examples
        .iter()
        .all(|e| e.at_ns > 2 * S && e.at_ns < 3 * S));
    // The start-up gap is on its own line, never a finding.
    assert!(p.startup.wall_ns >= 2 * S);
}

#[test]
fn item_every_step_is_implicit_sync() {
    let r = report(item_every_step(20).build());
    let f = get(&r, FindingId::ImplicitSync);
    assert_eq!(r.findings[0].id, FindingId::ImplicitSync);
    assert_eq!(f.severity, Severity::Warn);
    assert_near("implicit_sync", f.at_stake_ns, 19 * 214 * US, 1.0);
    assert!(find(&r, FindingId::DataStarvation).is_none());
    assert!(
        f.evidence
            .iter()
            .any(|e| e.contains("cudaStreamSynchronize x")),
        "{:?}",
        f.evidence
    );
    assert!(
        f.evidence.iter().any(|e| e.contains("device-to-host")),
        "{:?}",
        f.evidence
    );
}

#[test]
fn pinned_copy_without_non_blocking_is_sync_memcpy() {
    let r = report(pinned_blocking(20).build());
    let f = get(&r, FindingId::SyncMemcpy);
    assert_eq!(r.findings[0].id, FindingId::SyncMemcpy);
    assert!(f.severity >= Severity::Warn);
    assert_near("sync_memcpy", f.at_stake_ns, 19 * 114 * US, 1.0);
    assert!(
        f.evidence
            .iter()
            .any(|e| e.contains("blocking copies from pinned memory")),
        "{:?}",
        f.evidence
    );
    assert!(find(&r, FindingId::ImplicitSync).is_none_or(|g| g.severity == Severity::Info));
    assert!(f.fix.contains("non_blocking=True"));
}

#[test]
fn pageable_copies_with_estimated_bandwidth() {
    let r = report(pageable(20, false).build());
    let f = get(&r, FindingId::PageableMemcpy);
    assert_eq!(r.findings[0].id, FindingId::PageableMemcpy);
    assert_eq!(f.severity, Severity::Critical);
    assert!(
        f.estimated,
        "the excess over the typical pinned rate is an estimate"
    );
    // 227 us of staging before each DMA, and the 15 us from the DMA's end to the first
    // kernel, which the host spent finishing the blocking copy call and launching.
    assert_near("idle part", f.metrics["idle_ns"] as u64, 19 * 242 * US, 1.0);
    // DMA 3.2 ms of 32 MiB vs 50 GB/s: 3.2 ms - 0.671 ms per step.
    let ideal = (32u64 << 20) as f64 / 50.0;
    let excess = 19.0 * (3200.0 * US as f64 - ideal);
    assert_near("excess", f.metrics["excess_ns"] as u64, excess as u64, 1.0);
    assert!((f.metrics["achieved_gbps"] - (32u64 << 20) as f64 / 3.2e6).abs() < 0.01);
    assert_eq!(f.metrics["reference_gbps"], 50.0);
    assert!(f
        .evidence
        .iter()
        .any(|e| e.contains("typical") && e.contains("estimate")));
    assert!(f.fix.contains("pin_memory=True") && f.fix.contains("non_blocking=True"));
}

#[test]
fn pageable_reference_measured_from_pinned_copies() {
    let r = report(pageable(20, true).build());
    let f = get(&r, FindingId::PageableMemcpy);
    let want = (64u64 << 20) as f64 / 1.28e6;
    assert!(
        (f.metrics["reference_gbps"] - want).abs() < 0.01,
        "{:?}",
        f.metrics
    );
    assert!(f
        .evidence
        .iter()
        .any(|e| e.contains("measured on this trace's pinned copies")));
}

#[test]
fn tiny_kernels_launched_one_by_one_are_launch_bound() {
    let r = report(launch_bound(20).build());
    let f = get(&r, FindingId::LaunchBound);
    assert_eq!(r.findings[0].id, FindingId::LaunchBound);
    assert_eq!(f.severity, Severity::Critical);
    assert_near(
        "launch_bound pct",
        (f.at_stake_pct * 100.0) as u64,
        7500,
        0.5,
    );
    let p = &r.processes[0];
    assert_eq!(p.steps.ops_per_step, Some(50));
    assert_near(
        "launch interval",
        p.launches.launch_interval_p50_ns,
        8 * US,
        2.0,
    );
    assert!(p.launches.empty_queue_pct > 99.0);
    assert!(find(&r, FindingId::DataStarvation).is_none());
}

/// With the tracer's own cost recorded (1 us of callbacks per launch: two of 500 ns),
/// launch_bound says how much of the idle time it measured could be ours.
#[test]
fn launch_bound_says_how_much_of_the_idle_time_could_be_the_tracers() {
    let mut b = launch_bound(20);
    let (lo, hi) = b
        .events()
        .iter()
        .filter_map(|e| match e {
            Event::Kernel(k) => Some((k.start, k.end)),
            _ => None,
        })
        .fold((u64::MAX, 0), |(lo, hi), (s, e)| (lo.min(s), hi.max(e)));
    // Written every 400 us (50 launches: 100 callbacks, 50 us), as chunks would be.
    let mut ts = lo;
    while ts < hi + 400 * US {
        ts += 400 * US;
        b.ev.push(Event::TracerCost(fmt::TracerCost {
            ts,
            tid: 1,
            calls: 100,
            ns: 50 * US,
        }));
    }
    let r = report(b.build());
    let f = get(&r, FindingId::LaunchBound);
    let line = f
        .evidence
        .iter()
        .find(|e| e.contains("gputrace's own launch cost"))
        .unwrap_or_else(|| panic!("{:?}", f.evidence));
    assert!(line.starts_with("of "), "{line}");
    assert_near(
        "per callback",
        f.metrics["tracer_cost_per_callback_ns"] as u64,
        500,
        1.0,
    );
    // 1 us of every 8 us launch interval: about an eighth of the steady wall time.
    let own = f.metrics["tracer_cost_ns"];
    let wall = r.processes[0].steady.wall_ns as f64;
    assert!((own / wall - 0.125).abs() < 0.02, "{own} of {wall}");
    assert!(f.metrics["tracer_cost_at_most_ns"] <= own);
    // Without the events the line is not there.
    let plain = report(launch_bound(20).build());
    assert!(!get(&plain, FindingId::LaunchBound)
        .evidence
        .iter()
        .any(|e| e.contains("gputrace")));
}

#[test]
fn graph_of_tiny_kernels_is_fragmentation_not_launch_bound() {
    let r = report(graphs(40).build());
    let f = get(&r, FindingId::KernelFragmentation);
    assert_eq!(f.severity, Severity::Critical);
    assert_near(
        "fragmentation pct",
        (f.at_stake_pct * 100.0) as u64,
        4000,
        1.0,
    );
    assert!(find(&r, FindingId::LaunchBound).is_none_or(|g| g.severity == Severity::Info));
    let p = &r.processes[0];
    assert!(p.kernels.under_10us_count_pct > 99.0);
    assert!(
        p.kernels.p50_ns >= 2900 && p.kernels.p50_ns <= 3100,
        "{}",
        p.kernels.p50_ns
    );
}

#[test]
fn few_block_kernels_are_small_grid_and_memory_headroom() {
    // A training job (the optimizer's frame among its strings): memory_headroom applies.
    let mut b = small_grid(20, GIB);
    b.s("torch/optim/adam.py");
    let r = report(b.build());
    let f = get(&r, FindingId::SmallGrid);
    assert_eq!(f.severity, Severity::Critical);
    assert!(f.estimated);
    // 4 blocks of 128 threads: 16 resident per SM, 132 SMs.
    let fill = 4.0 / (132.0 * 16.0);
    let p = &r.processes[0];
    assert!(
        (p.sm_fill_pct.unwrap() - 100.0 * fill).abs() < 0.05,
        "{:?}",
        p.sm_fill_pct
    );
    assert!(p.gpu_util_pct > 99.0, "nvidia-smi would say busy");
    assert!(
        f.evidence
            .iter()
            .any(|e| e.contains("nvidia-smi GPU-Util would read 100%")),
        "{:?}",
        f.evidence
    );
    assert!(
        f.evidence
            .iter()
            .any(|e| e.contains("4 blocks of 128 threads vs 132 SMs x 16 resident")),
        "{:?}",
        f.evidence
    );
    let m = get(&r, FindingId::MemoryHeadroom);
    // Its time is small_grid's estimate, which no counter checked: info, not a warning.
    assert_eq!(m.severity, Severity::Info);
    assert_eq!(m.at_stake_ns, f.at_stake_ns);
    assert!(m.overlaps.contains(&FindingId::SmallGrid));
    // Ranked right after the finding it overlaps.
    let pos = |id: FindingId| r.findings.iter().position(|f| f.id == id).unwrap();
    assert_eq!(
        pos(FindingId::MemoryHeadroom),
        pos(FindingId::SmallGrid) + 1
    );
    assert!(m.fix.contains("batch size"));
}

#[test]
fn full_memory_has_no_headroom_finding() {
    let r = report(small_grid(20, 130 * GIB).build());
    assert!(find(&r, FindingId::SmallGrid).is_some());
    assert!(find(&r, FindingId::MemoryHeadroom).is_none());
}

#[test]
fn exposed_allreduce_is_comm_exposed() {
    let r = report(comm_exposed(20).build());
    let f = get(&r, FindingId::CommExposed);
    assert_eq!(r.findings[0].id, FindingId::CommExposed);
    assert_eq!(f.severity, Severity::Critical);
    assert_near("exposed", f.at_stake_ns, 19 * 1500 * US, 0.5);
    let p = &r.processes[0];
    assert_eq!(p.comm.kernels, 38);
    assert_near("comm", p.comm.time_ns, 19 * 2000 * US, 0.5);
}

#[test]
fn late_rank_is_comm_straggler() {
    let traces = straggler_ranks(20);
    let r = analyze(&traces);
    let c = r.cluster.as_ref().expect("cluster section");
    assert_eq!(c.alignment, "collective_ends");
    assert_eq!(c.matched_collectives, 19);
    // Rank 1's clock is 7 ms ahead: aligned back.
    let off1 = c
        .ranks
        .iter()
        .find(|k| k.label == "rank 1")
        .unwrap()
        .clock_offset_ns;
    assert!((off1 + 7_000_000).abs() < 1_000, "{off1}");
    assert!(c.residual_ns < 1_000);
    let f = get(&r, FindingId::CommStraggler);
    assert_eq!(f.rank, "rank 2");
    assert_eq!(r.processes[f.process.unwrap()].rank, Some(2));
    assert_eq!(c.straggler_last_pct, 100.0);
    // Ranks 0 and 1 wait 2 ms at each of 19 collectives.
    assert_near("others wait", f.at_stake_ns, 19 * 2 * MS, 0.1);
    assert_eq!(
        r.findings[0].id,
        FindingId::CommStraggler,
        "{:?}",
        r.findings
            .iter()
            .map(|f| (&f.id, f.at_stake_ns))
            .collect::<Vec<_>>()
    );
    assert!(f.severity >= Severity::Warn);
    // The waiting ranks' exposed communication no longer counts the wait twice.
    let ce: Vec<&Finding> = r
        .findings
        .iter()
        .filter(|f| f.id == FindingId::CommExposed && f.rank != "rank 2")
        .collect();
    assert_eq!(ce.len(), 2);
    for x in ce {
        assert_near("exposed minus wait", x.at_stake_ns, 19 * MS, 1.0);
    }
    assert!(r.verdict.contains("comm_straggler"), "{}", r.verdict);
}

#[test]
fn same_host_ranks_use_the_clock() {
    let mut traces = straggler_ranks(10);
    for t in &mut traces {
        t.meta.host = "node0".into();
    }
    let r = analyze(&traces);
    let c = r.cluster.as_ref().unwrap();
    assert_eq!(c.alignment, "same_host_clock");
    // Without end alignment rank 1's 7 ms skew stays: it now looks late, not rank 2.
    assert!(c.residual_ns > 6 * MS);
}

#[test]
fn blind_window_is_not_observed() {
    let mut b = data_starved(20);
    let reason = b.s("torch.profiler took the CUPTI subscriber");
    // Blind from the start of step 5 to step 8 (no GPU records in between).
    let step = 8035 * US;
    let first = T0 + 2 * S + 10 * US;
    let (bs, be) = (first + 5 * step - 20 * US, first + 8 * step - 20 * US);
    b.ev.retain(|e| match e {
        Event::Kernel(k) => k.start < bs || k.start >= be,
        _ => true,
    });
    b.ev.push(Event::State {
        ts: bs,
        state: fmt::CollectorState::Blind as u8,
        reason,
    });
    b.ev.push(Event::State {
        ts: be,
        state: fmt::CollectorState::Tracing as u8,
        reason: 0,
    });
    let r = report(b.build());
    let f = get(&r, FindingId::EnvBlindWindow);
    assert_eq!(f.severity, Severity::Info);
    assert_near("blind", f.at_stake_ns, 3 * step, 0.5);
    assert!(f.examples[0].what.contains("torch.profiler"));
    let un = &r.processes[0].breakdown.unattributed;
    let not_observed = un.iter().find(|c| c.cause == "not_observed").unwrap();
    assert!(not_observed.ns > 2 * step, "{}", not_observed.ns);
}

#[test]
fn dropped_records_are_reported() {
    // A healthy loop with `count` records lost (`count(kept)` of the kept events).
    let with_drops = |source: u8, count: &dyn Fn(u64) -> u64| {
        let mut b = healthy(30);
        let count = count(b.ev.len() as u64);
        b.ev.push(Event::Dropped {
            ts: T0 + 2 * S + MS,
            source,
            count,
        });
        report(b.build())
    };
    let r = with_drops(fmt::DROP_RING, &|_| 2);
    let f = get(&r, FindingId::EnvDroppedRecords);
    assert_eq!(f.severity, Severity::Info);
    assert!(f.summary.contains("2 records"));
    assert!(warn_ids(&r).is_empty());
    // Losing a large share is a warning: the numbers undercount.
    let r = with_drops(fmt::DROP_CUPTI, &|kept| kept / 10);
    assert_eq!(
        get(&r, FindingId::EnvDroppedRecords).severity,
        Severity::Warn
    );
    assert!(!r.verdict.contains("lost"), "{}", r.verdict);
    // Losing a quarter or more is critical, and the verdict says so first: whatever
    // follows was read from a fraction of what ran.
    let r = with_drops(fmt::DROP_BUFFER_POOL, &|kept| kept);
    assert_eq!(
        get(&r, FindingId::EnvDroppedRecords).severity,
        Severity::Critical
    );
    assert!(
        r.verdict.starts_with("The trace lost ") && r.verdict.contains("not to be trusted"),
        "{}",
        r.verdict
    );
}

#[test]
fn without_host_api_the_gpu_only_heuristic_is_labelled() {
    let mut b = data_starved(20);
    b.ev.retain(|e| !matches!(e, Event::Api(_)));
    let r = report(b.build());
    let p = &r.processes[0];
    assert_eq!(p.attribution, "gpu_only_heuristic");
    assert_eq!(p.breakdown.method, "gpu_only_heuristic");
    assert!(p.notes.iter().any(|n| n.contains("GPU-only heuristics")));
    let f = get(&r, FindingId::DataStarvation);
    assert!(f.estimated);
    assert!(f.evidence.iter().any(|e| e.contains("GPU-only heuristic")));
    assert_near(
        "heuristic data_starvation",
        f.at_stake_ns,
        19 * 6032 * US,
        0.5,
    );
    assert!(find(&r, FindingId::EnvNoHostApi).is_some());
}

#[test]
fn nvtx_ranges_define_steps() {
    let mut b = data_starved(12);
    let text = b.s("train_step");
    let first = T0 + 2 * S;
    for i in 0..12u64 {
        let s = first + i * 8035 * US;
        b.ev.push(Event::Nvtx(fmt::Nvtx {
            ts: s,
            tid: TID,
            kind: fmt::NVTX_PUSH,
            flags: 0,
            id: 0,
            text,
        }));
        b.ev.push(Event::Nvtx(fmt::Nvtx {
            ts: s + 8 * MS,
            tid: TID,
            kind: fmt::NVTX_POP,
            flags: 0,
            id: 0,
            text: 0,
        }));
    }
    let r = report(b.build());
    let p = &r.processes[0];
    assert_eq!(p.steps.source, "nvtx");
    assert_eq!(p.steps.nvtx_range.as_deref(), Some("train_step"));
    assert_eq!(p.steps.count, 12);
    assert_eq!(p.steady.start_ns, 2 * S);
}

#[test]
fn startup_never_outranks_the_steady_state() {
    // A healthy loop after 6 s of start-up with the GPU idle: still healthy.
    let mut b = B::new();
    b.alloc(T0, 100 * GIB);
    let t = T0 + 6 * S;
    let mut gpu = t;
    for i in 0..80u64 {
        let name = STEP_KERNELS[(i % 4) as usize];
        b.launch(t - 100 * US + i * 20 * US, 5 * US, gpu, 2 * MS, name, BIG);
        gpu += 2 * MS + US;
    }
    let r = report(b.build());
    assert!(warn_ids(&r).is_empty(), "{:?}", warn_ids(&r));
    let p = &r.processes[0];
    assert!(p.startup.wall_ns >= 6 * S - MS);
    assert!(p.startup_breakdown.idle_pct > 99.0);
}

#[test]
fn symbol_hook_calls_stand_in_for_missing_api_events() {
    // The .item() loop as the symbol hooks would record it with CUPTI's callbacks gone.
    let b = item_every_step(20);
    let ev: Vec<Event> =
        b.ev.into_iter()
            .map(|e| match e {
                Event::Api(a) if a.cbid == MEMCPY_ASYNC => Event::HostCopy(fmt::HostCopy {
                    start: a.start,
                    end: a.end,
                    tid: a.tid,
                    api: fmt::HOSTCOPY_MEMCPY_ASYNC,
                    copy_kind: fmt::CopyKind::DtoH as u8,
                    host_kind: fmt::MemKind::Pageable as u8,
                    source: fmt::CLASS_SOURCE_REGISTRY,
                    flags: fmt::HOSTCOPY_FLAG_ASYNC,
                    bytes: a.bytes,
                    ..Default::default()
                }),
                Event::Api(a) => Event::HostCall(fmt::HostCall {
                    start: a.start,
                    end: a.end,
                    tid: a.tid,
                    call: match a.cbid {
                        STREAM_SYNC => fmt::HOSTCALL_STREAM_SYNCHRONIZE,
                        LAUNCH => fmt::HOSTCALL_LAUNCH_KERNEL,
                        _ => 0,
                    },
                    ..Default::default()
                }),
                other => other,
            })
            .collect();
    let r = report(Trace::from_events(b.meta, ev));
    let p = &r.processes[0];
    assert_eq!(p.attribution, "host_hooks");
    assert!(p.notes.iter().any(|n| n.contains("symbol hooks")));
    let f = get(&r, FindingId::ImplicitSync);
    assert_eq!(r.findings[0].id, FindingId::ImplicitSync);
    // Without correlation ids the 1 us gaps between queued kernels, during which the host
    // sat in the sync, are charged to the sync too: 214 + 4 us per step.
    assert_near(
        "implicit_sync from hooks",
        f.at_stake_ns,
        19 * 218 * US,
        0.5,
    );
    assert!(f.evidence.iter().any(|e| e.contains("symbol hooks")));
}

#[test]
fn nccl_calls_match_collectives_and_name_ranks() {
    let r = analyze(&straggler_ranks_with_nccl(20));
    let c = r.cluster.as_ref().expect("cluster section");
    assert_eq!(c.matching, "nccl_calls");
    assert_eq!(c.matched_collectives, 19);
    for (i, p) in r.processes.iter().enumerate() {
        assert_eq!(p.rank, Some(i as u32));
        assert_eq!(p.rank_source, "nccl");
    }
    let f = get(&r, FindingId::CommStraggler);
    assert_eq!(f.rank, "rank 2");
    assert_near("others wait", f.at_stake_ns, 19 * 2 * MS, 0.1);
}

#[test]
fn a_step_is_told_from_its_repeated_block_by_its_copy() {
    // Each step: an input copy, then 8 x (gemm, tanh). By kernels alone the period is 2.
    let mut b = B::new();
    let mut gpu = startup(&mut b, 2 * GIB);
    for _ in 0..20 {
        let c = b.api(
            TID,
            gpu - 50 * US,
            10 * US,
            MEMCPY_ASYNC,
            "cudaMemcpyAsync",
            1 << 20,
            1,
        );
        b.memcpy(
            gpu,
            40 * US,
            1 << 20,
            fmt::CopyKind::HtoD,
            fmt::MemKind::Pinned,
            fmt::MemKind::Device,
            true,
            c,
        );
        gpu += 41 * US;
        for _ in 0..8 {
            b.launch(gpu - 30 * US, 5 * US, gpu, 200 * US, "gemm", BIG);
            gpu += 201 * US;
            b.launch(gpu - 30 * US, 5 * US, gpu, 20 * US, "tanh", BIG);
            gpu += 21 * US;
        }
        gpu += 500 * US;
    }
    let r = report(b.build());
    let p = &r.processes[0];
    assert_eq!(p.steps.ops_per_step, Some(17), "{:?}", p.steps);
    assert_eq!(p.steps.count, 19);
    assert_eq!(p.steps.anchor_kernel.as_deref(), Some("memcpy HtoD"));
}

#[test]
fn graph_kernels_of_one_launch_are_queued_even_without_host_events() {
    let mut b = graphs(40);
    b.ev.retain(|e| !matches!(e, Event::Api(_)));
    // Mark the kernels as graph nodes, as CUPTI does.
    for e in b.ev.iter_mut() {
        if let Event::Kernel(k) = e {
            k.graph_id = 7;
        }
    }
    let r = report(b.build());
    assert_eq!(r.processes[0].attribution, "gpu_only_heuristic");
    let f = get(&r, FindingId::KernelFragmentation);
    // 99 of every 100 gaps are inside one graph run.
    assert_near(
        "fragmentation pct",
        (f.at_stake_pct * 100.0) as u64,
        3960,
        1.0,
    );
    assert!(find(&r, FindingId::LaunchBound).is_none_or(|g| g.severity == Severity::Info));
}

/// NVML samples every 100 ms over the whole trace, with this process (pid 1000) on the
/// GPU and, if `other_sm` is set, pid 4242 (`python3`) holding that share of it.
fn with_nvml(mut b: common::B, other_sm: Option<u32>, reasons: u64, sm_clock: u32) -> Trace {
    let other = b.s("python3");
    let end = b
        .events()
        .iter()
        .filter_map(|e| match e {
            Event::Kernel(k) => Some(k.end),
            _ => None,
        })
        .max()
        .unwrap_or(T0);
    let mut ts = T0;
    while ts <= end + 100 * MS {
        b.ev.push(Event::GpuSample(fmt::GpuSample {
            ts,
            device: 0,
            sm_clock_mhz: sm_clock,
            sm_clock_max_mhz: 1980,
            clock_reasons: reasons,
            pcie_gen: 5,
            pcie_gen_max: 5,
            pcie_width: 16,
            pcie_width_max: 16,
            ..Default::default()
        }));
        let share = other_sm.unwrap_or(0);
        b.ev.push(Event::GpuProcess(fmt::GpuProcess {
            ts,
            device: 0,
            pid: 1000,
            name: 0,
            used_memory: 2 * GIB,
            sm_pct: 100 - share,
            mem_pct: 10,
            flags: fmt::GPU_PROC_LISTED | fmt::GPU_PROC_UTIL | fmt::GPU_PROC_SELF,
        }));
        if let Some(sm) = other_sm {
            b.ev.push(Event::GpuProcess(fmt::GpuProcess {
                ts,
                device: 0,
                pid: 4242,
                name: other,
                used_memory: 30 * GIB,
                sm_pct: sm,
                mem_pct: 40,
                flags: fmt::GPU_PROC_LISTED | fmt::GPU_PROC_UTIL,
            }));
        }
        ts += 100 * MS;
    }
    b.build()
}

#[test]
fn a_shared_gpu_outranks_the_starvation_it_looks_like() {
    let r = report(with_nvml(data_starved(20), Some(40), 0, 1980));
    let f = get(&r, FindingId::EnvSharedGpu);
    assert_eq!(
        r.findings[0].id,
        FindingId::EnvSharedGpu,
        "{}",
        gputrace_analyzer::render_text(&r)
    );
    assert!(f.severity >= Severity::Warn);
    assert!(f.summary.contains("pid 4242 (python3)"), "{}", f.summary);
    assert!(f.estimated, "active throughout: the busy part is estimated");
    // The idle time while it ran is all the starvation's time, and more.
    let ds = get(&r, FindingId::DataStarvation);
    assert!(f.at_stake_ns > ds.at_stake_ns);
    assert!(r.verdict.contains("env_shared_gpu"), "{}", r.verdict);
    assert_eq!(f.metrics["sm_share_pct"], 40.0);
}

#[test]
fn a_gpu_of_its_own_has_no_environment_finding() {
    let r = report(with_nvml(healthy(30), None, 0, 1980));
    let env: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.id.as_str().starts_with("env_"))
        .map(|f| f.id)
        .collect();
    assert!(env.is_empty(), "{env:?}");
    assert!(r.verdict.starts_with("Healthy"), "{}", r.verdict);
}

#[test]
fn throttled_clocks_are_env_throttled() {
    let r = report(with_nvml(
        healthy(30),
        None,
        fmt::CLOCK_REASON_HW_SLOWDOWN,
        1200,
    ));
    let f = get(&r, FindingId::EnvThrottled);
    assert!(f.severity >= Severity::Warn);
    assert!(f.estimated);
    assert!(
        f.summary.contains("1200 MHz instead of 1980 MHz"),
        "{}",
        f.summary
    );
    assert!(f.summary.contains("hw_slowdown"), "{}", f.summary);
    assert!(f.at_stake_ns > 0);
}

/// `healthy` at 1500 MHz capped by power, with the power limit `limit_w` (default 700 W).
fn power_capped(limit_w: u64) -> Trace {
    let mut b = healthy(30);
    for (k, v) in [
        ("power_limit_mw", limit_w * 1000),
        ("power_default_limit_mw", 700_000),
    ] {
        let (key, value) = (b.s(k), b.s(&v.to_string()));
        b.ev.push(Event::Fact(fmt::Fact {
            ts: T0,
            device: 0,
            key,
            value,
        }));
    }
    with_nvml(b, None, fmt::CLOCK_REASON_SW_POWER_CAP, 1500)
}

#[test]
fn power_capping_at_the_default_limit_is_info_and_a_lowered_limit_warns() {
    let r = report(power_capped(700));
    let f = get(&r, FindingId::EnvThrottled);
    assert_eq!(f.severity, Severity::Info, "{}", f.summary);
    assert!(f
        .evidence
        .iter()
        .any(|e| e.contains("at its default (700 W)")));
    let r = report(power_capped(450));
    let f = get(&r, FindingId::EnvThrottled);
    assert!(f.severity >= Severity::Warn, "{}", f.summary);
    assert!(f.fix.contains("nvidia-smi -pl"), "{}", f.fix);
}

#[test]
fn a_blocked_nvml_is_one_info_line() {
    let mut b = healthy(30);
    let k = b.s("nvml");
    let v = b.s("no_permission: NVML refused access (nvmlInit_v2: NVML_ERROR_NO_PERMISSION)");
    b.ev.push(Event::Fact(fmt::Fact {
        ts: T0,
        device: fmt::FACT_HOST,
        key: k,
        value: v,
    }));
    let r = report(b.build());
    let env: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.id.as_str().starts_with("env_"))
        .collect();
    assert_eq!(env.len(), 1, "{env:?}");
    assert_eq!(env[0].id, FindingId::EnvNvmlUnavailable);
    assert_eq!(env[0].severity, Severity::Info);
    assert!(r.verdict.starts_with("Healthy"), "{}", r.verdict);
}

/// `item_every_step`, with the Python stack of every sync: the user's `train.py:57 in
/// train_step` under torch and the standard library, except every fifth step, which
/// syncs from `log.py:12 in log_loss`.
fn item_every_step_with_call_sites(steps: usize) -> B {
    let mut b = item_every_step(steps);
    let torch = b.s("/opt/venv/lib/python3.12/site-packages/torch/_tensor.py");
    let stdlib = b.s("/usr/lib/python3.12/contextlib.py");
    let train = b.s("/home/u/train.py");
    let log = b.s("/home/u/log.py");
    let item = b.s("item");
    let inner = b.s("__exit__");
    let step = b.s("train_step");
    let log_loss = b.s("log_loss");
    let main = b.s("<module>");
    let frame = |file, function, line| fmt::PyFrame {
        file,
        function,
        line,
    };
    b.ev.push(Event::PyStack(fmt::PyStack {
        id: 1,
        frames: vec![
            frame(torch, item, 1000),
            frame(stdlib, inner, 144),
            frame(train, step, 57),
            frame(train, main, 90),
        ],
    }));
    b.ev.push(Event::PyStack(fmt::PyStack {
        id: 2,
        frames: vec![frame(log, log_loss, 12), frame(train, main, 91)],
    }));
    let syncs: Vec<(u32, u64)> = b
        .ev
        .iter()
        .filter_map(|e| match e {
            Event::Api(a) if a.name == b.s_get("cudaStreamSynchronize") => Some((a.tid, a.start)),
            _ => None,
        })
        .collect();
    for (i, (tid, ts)) in syncs.into_iter().enumerate() {
        let stack = if i % 5 == 4 { 2 } else { 1 };
        b.ev.push(Event::CallSite(fmt::CallSite { ts, tid, stack }));
    }
    b
}

#[test]
fn findings_about_calls_name_the_users_lines() {
    let r = report(item_every_step_with_call_sites(20).build());
    let f = get(&r, FindingId::ImplicitSync);
    let top = &f.call_sites[0];
    assert_eq!(
        (top.file.as_str(), top.line, top.function.as_str()),
        ("/home/u/train.py", 57, "train_step"),
        "the innermost frame of the user's code, under torch and contextlib"
    );
    assert!(top.user_code);
    assert_eq!(top.apis, vec!["cudaStreamSynchronize".to_string()]);
    assert_eq!(top.stacks[0].len(), 4, "the full stack stays in --json");
    assert_eq!(top.stacks[0][0].function, "item");
    let second = &f.call_sites[1];
    assert_eq!((second.line, second.function.as_str()), (12, "log_loss"));
    // Every steady sync is counted once, at one site.
    let steady: u64 = f.call_sites.iter().map(|s| s.calls).sum();
    assert_eq!(steady, f.metrics["sync_calls"] as u64);
    assert!(top.calls > second.calls && top.host_ns > second.host_ns);
    let line = f
        .evidence
        .iter()
        .find(|e| e.starts_with("called from"))
        .expect("the evidence names the call sites");
    assert!(
        line.starts_with("called from train.py:57 in train_step (cudaStreamSynchronize x"),
        "{line}"
    );
    assert!(line.contains("; log.py:12 in log_loss"), "{line}");
    let json = serde_json::to_value(f).unwrap();
    assert_eq!(json["call_sites"][0]["line"], 57);
    // Without call sites the finding and its JSON are as they always were.
    let plain = report(item_every_step(20).build());
    let g = get(&plain, FindingId::ImplicitSync);
    assert!(g.call_sites.is_empty());
    assert!(serde_json::to_value(g).unwrap().get("call_sites").is_none());
    assert!(!g.evidence.iter().any(|e| e.starts_with("called from")));
}

/// `b` with GPU counter samples of 1 ms over its whole span, every one reading `dram`
/// and `tensor` (percent of peak).
fn with_counters(b: common::B, dram: u32, tensor: u32) -> Trace {
    let mut b = b;
    let end = b
        .events()
        .iter()
        .filter_map(|e| match e {
            Event::Kernel(k) => Some(k.end),
            _ => None,
        })
        .max()
        .unwrap_or(T0);
    let mut ts = T0;
    while ts < end {
        b.ev.push(Event::CounterSample(fmt::CounterSample {
            start: ts,
            end: ts + MS,
            device: 0,
            sm_active: 9_800,
            occupancy: 6_000,
            tensor_active: tensor * 100,
            dram: dram * 100,
            ..Default::default()
        }));
        ts += MS;
    }
    b.build()
}

#[test]
fn dram_bound_kernels_are_memory_bound_with_measured_header() {
    let r = report(with_counters(healthy(30), 92, 1));
    let f = get(&r, FindingId::MemoryBound);
    assert!(f.severity >= Severity::Warn, "{f:?}");
    assert_eq!(r.findings[0].id, FindingId::MemoryBound);
    assert!(!f.estimated);
    assert!(f.at_stake_pct > 90.0, "{}", f.at_stake_pct);
    assert!(
        f.evidence.iter().any(|e| e.contains("DRAM 92%")),
        "{:?}",
        f.evidence
    );
    assert!(f.fix.contains("torch.compile"));
    let p = &r.processes[0];
    let m = p.measured.as_ref().expect("measured counters");
    assert_eq!(m.m.dram_pct, Some(92.0));
    assert_eq!(m.m.sm_active_pct, Some(98.0));
    let text = gputrace_analyzer::render_text(&r);
    assert!(
        text.contains("SMs actually active 98%, occupancy 60% (measured"),
        "{text}"
    );
    assert!(!text.contains("estimated from grid sizes"), "{text}");
}

#[test]
fn tensor_heavy_kernels_are_not_memory_bound() {
    let r = report(with_counters(healthy(30), 65, 80));
    assert!(
        find(&r, FindingId::MemoryBound).is_none(),
        "{:?}",
        warn_ids(&r)
    );
    assert!(r.processes[0].measured.is_some());
    let r = report(with_counters(healthy(30), 30, 0));
    assert!(find(&r, FindingId::MemoryBound).is_none());
}

/// `b` with NVML GPM samples of 100 ms over its span, as the environment sampler gives them.
fn with_gpm(b: common::B, dram: u32, tensor: u32, fp32: u32) -> Trace {
    let mut b = b;
    let end = b
        .events()
        .iter()
        .filter_map(|e| match e {
            Event::Kernel(k) => Some(k.end),
            _ => None,
        })
        .max()
        .unwrap_or(T0);
    let mut ts = T0;
    while ts < end {
        b.ev.push(Event::CounterSample(fmt::CounterSample {
            start: ts,
            end: ts + 100 * MS,
            device: 0,
            sm_active: 9_980,
            occupancy: if tensor > 50 { 1_400 } else { 9_000 },
            tensor_active: tensor * 100,
            tensor_hmma: tensor * 100,
            dram: dram * 100,
            fp32_active: fp32 * 100,
            fp64_active: 0,
            fp16_active: 0,
            source: fmt::COUNTER_SOURCE_GPM,
            ..Default::default()
        }));
        ts += 100 * MS;
    }
    b.build()
}

#[test]
fn gpm_on_an_elementwise_chain_is_memory_bound_with_its_dram_share() {
    // The H200's reading of elementwise chains on 2 GiB tensors.
    let r = report(with_gpm(healthy(30), 58, 0, 10));
    let f = get(&r, FindingId::MemoryBound);
    assert!(f.severity >= Severity::Warn, "{f:?}");
    assert_eq!(r.findings[0].id, FindingId::MemoryBound);
    assert!(f.title.contains("DRAM 58% of peak"), "{}", f.title);
    assert_eq!(f.metrics["dram_pct"], 58.0);
    assert!(f.summary.contains("NVML GPM"), "{}", f.summary);
    for word in ["torch.compile", "bf16", "intermediate", "in-place"] {
        assert!(f.fix.contains(word), "{word}: {}", f.fix);
    }
    let p = &r.processes[0];
    assert_eq!(p.measured.as_ref().unwrap().source, "gpm");
    let k = &p.measured_kernels[0];
    assert_eq!((k.verdict, k.m.dram_pct), ("memory_bound", Some(58.0)));
    let text = gputrace_analyzer::render_text(&r);
    assert!(text.contains("(measured by NVML GPM"), "{text}");
    // The kernel names share every 100 ms sample: no per-kernel row repeats the mix.
    assert!(text.contains("tensor 0%, DRAM 58% of peak"), "{text}");
    assert!(text.contains("never had a sample to themselves"), "{text}");
    // A busy FP32 pipe is compute, not bandwidth.
    let r = report(with_gpm(healthy(30), 58, 0, 60));
    assert!(
        find(&r, FindingId::MemoryBound).is_none(),
        "{:?}",
        warn_ids(&r)
    );
}

#[test]
fn gpm_on_a_bf16_matmul_is_compute_bound_and_healthy() {
    // The H200's reading of 8192^3 bf16 matmuls.
    let r = report(with_gpm(healthy(30), 17, 93, 1));
    assert!(
        find(&r, FindingId::MemoryBound).is_none(),
        "{:?}",
        warn_ids(&r)
    );
    let p = &r.processes[0];
    let k = &p.measured_kernels[0];
    assert_eq!(k.verdict, "tensor_bound");
    assert_eq!(k.m.tensor_active_pct, Some(93.0));
    let text = gputrace_analyzer::render_text(&r);
    assert!(text.contains("tensor 93%, DRAM 17% of peak"), "{text}");
    assert!(!text.contains("(mixed)"), "{text}");
    assert!(
        text.contains("SMs actually active 100%, occupancy 14% (measured by NVML GPM"),
        "{text}"
    );
    assert!(!text.contains("estimated from grid sizes"), "{text}");
}

#[test]
fn without_counter_samples_the_header_stays_an_estimate() {
    let r = report(healthy(30).build());
    assert!(r.processes[0].measured.is_none());
    assert!(find(&r, FindingId::MemoryBound).is_none());
    let text = gputrace_analyzer::render_text(&r);
    assert!(text.contains("(estimated from grid sizes)"), "{text}");
}

#[test]
fn refused_counters_are_one_info_line_with_the_fix() {
    let mut b = healthy(30);
    let key = b.s("pm_sampling");
    let value = b.s("refused: not permitted (cuptiPmSamplingEnable: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES); set NVreg_RestrictProfilingToAdminUsers=0 or run as root");
    b.ev.push(Event::Fact(fmt::Fact {
        ts: T0,
        device: 0,
        key,
        value,
    }));
    let r = report(b.build());
    let f = get(&r, FindingId::EnvPmUnavailable);
    assert_eq!(f.severity, Severity::Info);
    assert!(
        f.fix.contains("NVreg_RestrictProfilingToAdminUsers=0"),
        "{}",
        f.fix
    );
    assert!(warn_ids(&r).is_empty(), "{:?}", warn_ids(&r));
}

/// A cudaMalloc (20) or cudaFree (22) call with its pointer (format 2.5) and result.
fn alloc_call(b: &mut B, ts: u64, cbid: u32, bytes: u64, result: u32, ptr: u64) {
    let name = if cbid == MALLOC {
        "cudaMalloc"
    } else {
        "cudaFree"
    };
    b.api(TID, ts, 20 * US, cbid, name, bytes, 0);
    if let Some(Event::Api(a)) = b.ev.last_mut() {
        a.result = result;
        a.ptr = ptr;
    }
}

/// A job whose allocator cache holds still (12 GiB from the start), then asks for 16 GiB
/// once: it fails, the allocator frees a 4 GiB block and asks again, which succeeds, and
/// the steps go on. Out of memory, not fatal: a warning; memory did not grow from step to
/// step, so the fix is the peak's, not a leak's.
#[test]
fn an_allocation_the_job_survived_is_warned_and_the_fix_is_for_its_peak() {
    let mut b = B::new();
    let t = startup(&mut b, GIB);
    alloc_call(&mut b, t, MALLOC, 8 * GIB, 0, 0x7f00_0000_0000);
    alloc_call(&mut b, t + 100 * US, MALLOC, 4 * GIB, 0, 0x7f02_0000_0000);
    let e = healthy_steps(&mut b, t + MS, 10);
    alloc_call(&mut b, e + 100 * US, MALLOC, 16 * GIB, 2, fmt::ENV_NA64);
    alloc_call(&mut b, e + 200 * US, 22, 0, 0, 0x7f02_0000_0000);
    alloc_call(&mut b, e + 300 * US, MALLOC, 16 * GIB, 0, 0x7f04_0000_0000);
    alloc_call(&mut b, e + 400 * US, 22, 0, 0, 0x7f04_0000_0000);
    healthy_steps(&mut b, e + MS, 10);
    let r = report(b.build());
    let text = gputrace_analyzer::render_text(&r);
    let f = get(&r, FindingId::OutOfMemory);
    assert_eq!(f.severity, Severity::Warn, "{text}");
    assert_eq!(f.title, "Allocations failed: device memory ran out");
    assert_eq!(f.at_stake_ns, 0);
    assert!(
        f.summary.starts_with(
            "cudaMalloc of 16.0 GiB failed with cudaErrorMemoryAllocation at +2.1"
        ) && f
            .summary
            .contains(", and the job went on: 12.0 GiB allocated through cudaMalloc was in use then, and it did not grow from step to step"),
        "{}",
        f.summary
    );
    let ev = f.evidence.join("\n");
    assert!(
        ev.contains("1 earlier failure was recovered after the allocator freed its cache"),
        "{ev}"
    );
    assert!(ev.contains("peak 24.0 GiB"), "{ev}");
    assert!(
        f.fix.starts_with("Memory did not grow from step to step"),
        "{}",
        f.fix
    );
    assert!(f.fix.contains("expandable_segments:True"));
    assert!(find(&r, FindingId::MemoryGrowth).is_none(), "{text}");
    // Rendered without time at stake, and with the failed-calls section.
    assert!(text.contains(" WARN     out_of_memory\n"), "{text}");
    assert!(
        text.contains(
            "\nFAILED CALLS\n   cudaMalloc returned cudaErrorMemoryAllocation (2) x1 at +"
        ),
        "{text}"
    );
    assert!(r.processes[0].fatal_call.is_none(), "the job went on");
}

#[test]
fn gpu_times_that_contradict_device_syncs_lead_the_verdict() {
    // A device sync returns only when every kernel launched before it has ended: syncs
    // that return after a step's last kernel are consistent; syncs that return in the
    // middle of recorded kernels mean the GPU times were read wrong (a changed CUPTI clock).
    let sync_at = |b: &mut B, end: u64| {
        b.ev.push(Event::HostCall(fmt::HostCall {
            start: end - 200 * US,
            end,
            tid: 1,
            call: fmt::HOSTCALL_DEVICE_SYNCHRONIZE,
            ..Default::default()
        }))
    };
    let kernels = |b: &B| -> Vec<(u64, u64)> {
        b.ev.iter()
            .filter_map(|e| match e {
                Event::Kernel(k) => Some((k.start, k.end)),
                _ => None,
            })
            .collect()
    };
    let mut b = healthy(30);
    let ks = kernels(&b);
    for k in ks.iter().skip(3).step_by(4) {
        sync_at(&mut b, k.1 + 2 * US);
    }
    let r = report(b.build());
    assert!(find(&r, FindingId::EnvBadRecords).is_none());
    assert!(!r.verdict.contains("contradict"), "{}", r.verdict);

    let mut b = healthy(30);
    let ks = kernels(&b);
    for k in ks.iter().skip(3).step_by(4) {
        sync_at(&mut b, (k.0 + k.1) / 2);
    }
    let r = report(b.build());
    let f = get(&r, FindingId::EnvBadRecords);
    assert_eq!(f.severity, Severity::Critical);
    assert_eq!(f.metrics["syncs_contradicted"], f.metrics["syncs"]);
    assert!(
        r.verdict.starts_with("The trace's GPU times contradict"),
        "{}",
        r.verdict
    );
}
