//! CUDA graph replays on synthetic traces with known answers: replays linked to their
//! launch calls, steps taken from replays, the gaps between a replay's nodes charged to
//! the device (kernel_fragmentation, subcause graph_gaps) even while the host is still
//! inside the launch call, launch_bound kept where the host really was behind, and no
//! finding advising CUDA graphs to a job that already replays them.

mod common;

use common::*;
use gputrace_analyzer::report::{analyze, FindingId, Report, Severity};
use gputrace_format::{self as fmt, Event};

const GRAPH: u32 = 5;
const INSTANTIATE: u32 = 443;
const UPLOAD: u32 = 348;

use common::{find, get};

/// One replay: a `cudaGraphLaunch` at `at` lasting `call`, its `nodes` kernels from
/// `start`, each `dur` long and `gap` apart, with the graph's id and each node's id.
/// Returns the end of the last node.
#[allow(clippy::too_many_arguments)]
fn replay(
    b: &mut B,
    at: u64,
    call: u64,
    start: u64,
    nodes: u32,
    dur: u64,
    gap: u64,
    sh: Shape,
) -> u64 {
    let c = b.api(TID, at, call, GRAPH_LAUNCH, "cudaGraphLaunch", 0, 0);
    let mut s = start;
    for j in 0..nodes {
        let name = b.s(&format!("node_{j}"));
        b.ev.push(Event::Kernel(fmt::Kernel {
            start: s,
            end: s + dur,
            device: 0,
            stream: 7,
            corr: c,
            name,
            grid: [sh.grid, 1, 1],
            block: [sh.block, 1, 1],
            registers: sh.regs,
            graph_id: GRAPH,
            graph_node_id: 1000 + j as u64,
            ..Default::default()
        }));
        s += dur + gap;
    }
    s - gap
}

/// Start-up: memory, and the graph instantiated (3 ms) and uploaded (0.5 ms).
fn setup(b: &mut B, mem: u64) -> u64 {
    let t = startup(b, mem);
    b.api(
        TID,
        t - 10 * MS,
        3 * MS,
        INSTANTIATE,
        "cudaGraphInstantiate",
        0,
        0,
    );
    b.api(TID, t - 5 * MS, 500 * US, UPLOAD, "cudaGraphUpload", 0, 0);
    t
}

/// The instantiation's Python stack (setup's cudaGraphInstantiate): torch's capture_end
/// under `train.py:42 in capture`.
fn instantiate_site(b: &mut B) {
    let t = T0 + 2 * S;
    let (torch, train) = (
        b.s("/venv/lib/python3.12/site-packages/torch/cuda/graphs.py"),
        b.s("/work/train.py"),
    );
    let (exit, capture, main) = (b.s("__exit__"), b.s("capture"), b.s("<module>"));
    let f = |file, function, line| fmt::PyFrame {
        file,
        function,
        line,
    };
    b.ev.push(Event::PyStack(fmt::PyStack {
        id: 1,
        frames: vec![
            f(torch, exit, 186),
            f(train, capture, 42),
            f(train, main, 80),
        ],
    }));
    b.ev.push(Event::CallSite(fmt::CallSite {
        ts: t - 10 * MS,
        tid: TID,
        stack: 1,
    }));
}

/// torch.compile(mode="reduce-overhead") on a small MLP: every step replays a graph of
/// 30 tiny kernels (3 us, 2 us apart on the device). The host issues a replay every
/// 150 us and each cudaGraphLaunch call lasts 120 us: the replay's nodes run while the
/// host is still inside the call, so the host is never what the GPU waits for inside a
/// replay. 58 us of gaps per 150 us replay period: 38.7% of the steady state.
fn reduce_overhead(steps: u64) -> B {
    let mut b = B::new();
    let t = setup(&mut b, 2 * GIB);
    for i in 0..steps {
        let at = t + i * 150 * US;
        replay(&mut b, at, 120 * US, at + 10 * US, 30, 3 * US, 2 * US, BIG);
    }
    b
}

/// A manual torch.cuda.CUDAGraph capture of a training step: 8 large kernels of 1 ms
/// per replay, 2 us apart, the host far ahead (a 10 us call per replay).
fn manual_step(steps: u64) -> B {
    let mut b = B::new();
    let t = setup(&mut b, 120 * GIB);
    let mut gpu = t + 100 * US;
    for i in 0..steps {
        let at = t + i * 50 * US;
        gpu = replay(
            &mut b,
            at,
            10 * US,
            gpu.max(at + 15 * US),
            8,
            MS,
            2 * US,
            BIG,
        ) + 2 * US;
    }
    b
}

/// Small graphs with host work between replays: 5 nodes of 3 us (1 us apart) per replay,
/// a 10 us launch call every 60 us, the host busy in Python between calls (no CUDA
/// call, a quiet stretch under 100 us): the GPU idles about 40 us per replay waiting
/// for the host.
fn host_behind(steps: u64) -> B {
    let mut b = B::new();
    let t = setup(&mut b, 2 * GIB);
    for i in 0..steps {
        let at = t + i * 60 * US;
        replay(&mut b, at, 10 * US, at + 8 * US, 5, 3 * US, US, BIG);
    }
    b
}

/// No fix advises capturing CUDA graphs.
fn assert_no_graph_advice(r: &Report) {
    for f in &r.findings {
        for bad in [
            "reduce-overhead",
            "CUDAGraph",
            "capture the step",
            "CUDA graphs remove",
        ] {
            assert!(
                !f.fix.contains(bad) && !f.summary.contains(bad),
                "{} advises graphs ({bad}): {}",
                f.id,
                f.fix
            );
        }
    }
}

#[test]
fn reduce_overhead_replays_are_fragmentation_inside_the_graph_not_launch_bound() {
    let r = analyze(&[reduce_overhead(400).build()]);
    let p = &r.processes[0];
    assert_eq!(p.steps.source, "graph_replay", "{:?}", p.steps);
    assert_eq!(p.steps.graph_id, Some(GRAPH));
    assert!(p.steps.count >= 390, "{} steps", p.steps.count);
    assert_eq!(p.steps.step_ns_median, 150 * US);

    let g = p.graphs.as_ref().expect("a graphs summary");
    assert_eq!(g.graphs.len(), 1);
    let x = &g.graphs[0];
    assert_eq!((x.graph_id, x.device, x.replays_total), (GRAPH, 0, 400));
    assert_eq!(x.nodes, 30);
    assert_eq!(x.kernels_per_replay, 30);
    assert_eq!(x.gpu_ns_per_replay, 90 * US);
    assert_eq!(x.gap_ns_per_replay, 58 * US);
    assert_eq!(x.span_ns_per_replay, 148 * US);
    assert_eq!(x.launch_call.as_deref(), Some("cudaGraphLaunch"));
    assert_eq!(x.launch_call_ns_p50, 120 * US);
    assert_eq!(x.launch_latency_ns_p50, 10 * US);
    assert_eq!(g.gap_ns, x.gap_ns);
    assert_eq!(g.replays, x.replays);
    assert!((g.kernel_pct - 100.0).abs() < 0.01, "{}", g.kernel_pct);
    assert_eq!((g.instantiate_calls, g.instantiate_ns), (1, 3 * MS));
    assert_eq!((g.upload_calls, g.upload_ns), (1, 500 * US));
    assert_eq!(g.launch_calls, g.replays);
    // A replay is one submission: the later nodes of a replay are not queue entries.
    assert!(p.launches.mean_queue_depth < 2.0, "{:?}", p.launches);

    let f = get(&r, FindingId::KernelFragmentation);
    assert_eq!(f.subcause.as_deref(), Some("graph_gaps"));
    assert!(f.severity >= Severity::Warn, "{:?}", f.severity);
    assert!(
        (f.at_stake_pct - 38.7).abs() < 1.5,
        "fragmentation {:.1}%",
        f.at_stake_pct
    );
    assert!(
        find(&r, FindingId::LaunchBound).is_none_or(|l| l.severity == Severity::Info),
        "{:?}",
        find(&r, FindingId::LaunchBound)
    );
    assert_no_graph_advice(&r);
    let text = gputrace_analyzer::render_text(&r);
    assert!(
        text.contains("CUDA graph replays in the steady state"),
        "{text}"
    );
    assert!(text.contains("replays of CUDA graph 5"), "{text}");
    let json = serde_json::to_value(&r).unwrap();
    let jg = &json["processes"][0]["graphs"];
    assert_eq!(jg["graphs"][0]["kernels_per_replay"], 30);
    assert_eq!(jg["graphs"][0]["gap_ns_per_replay"], 58_000);
}

#[test]
fn a_manually_captured_training_step_replayed_with_the_host_ahead_is_healthy() {
    let r = analyze(&[manual_step(60).build()]);
    let p = &r.processes[0];
    assert_eq!(p.steps.source, "graph_replay");
    assert!(p.steps.count >= 55, "{}", p.steps.count);
    let x = &p.graphs.as_ref().unwrap().graphs[0];
    assert_eq!((x.kernels_per_replay, x.gap_ns_per_replay), (8, 14 * US));
    assert!(
        r.findings.iter().all(|f| f.severity == Severity::Info),
        "{:?}",
        r.findings
            .iter()
            .map(|f| (f.id, f.severity))
            .collect::<Vec<_>>()
    );
    assert_no_graph_advice(&r);
}

#[test]
fn small_graphs_with_the_host_behind_keep_launch_bound_counting_calls() {
    let r = analyze(&[host_behind(2000).build()]);
    let p = &r.processes[0];
    assert_eq!(p.steps.source, "graph_replay");
    let f = get(&r, FindingId::LaunchBound);
    assert!(f.severity >= Severity::Warn, "{:?}", f.severity);
    // 60 us per replay, 19 us of it the replay: about 41 us waiting for the host.
    assert!(
        (f.at_stake_pct - 68.0).abs() < 3.0,
        "launch_bound {:.1}%",
        f.at_stake_pct
    );
    // Calls, not kernels: one launch call per replay.
    assert_eq!(f.metrics["graph_replays"], f.metrics["launch_calls"]);
    assert!(
        f.evidence[0].contains("CUDA graph replays"),
        "{:?}",
        f.evidence
    );
    assert!(
        f.evidence[0].contains("a launch call every 60"),
        "{:?}",
        f.evidence
    );
    // Each replay found its stream empty: the host was behind.
    assert!(p.launches.empty_queue_pct > 95.0, "{:?}", p.launches);
    assert_no_graph_advice(&r);
}

#[test]
fn without_graphs_launch_bound_still_advises_them() {
    // The same loop launched eagerly: one cudaLaunchKernel per kernel.
    let mut b = B::new();
    let t = startup(&mut b, 2 * GIB);
    for i in 0..2000u64 {
        let at = t + i * 60 * US;
        b.launch(at, 10 * US, at + 8 * US, 3 * US, "tiny", BIG);
    }
    let r = analyze(&[b.build()]);
    assert!(r.processes[0].graphs.is_none());
    let f = get(&r, FindingId::LaunchBound);
    assert!(f.fix.contains("CUDA graph"), "{}", f.fix);
}

#[test]
fn replays_are_slices_around_their_kernels_on_the_timelines() {
    let d = std::env::temp_dir().join(format!("gputrace-graphs-export-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let t = write(&d, "graphs.gtrace", &reduce_overhead(20));
    let chrome = d.join("graphs.json");
    let (code, _, err) = gputrace(&[
        "export",
        "--format",
        "chrome",
        "-o",
        chrome.to_str().unwrap(),
        t.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&chrome).unwrap()).unwrap();
    let ev = v["traceEvents"].as_array().unwrap();
    let x = |cat: &str| -> Vec<&serde_json::Value> {
        ev.iter()
            .filter(|e| e["cat"] == cat && e["ph"] == "X")
            .collect()
    };
    let (replays, kernels) = (x("cuda_graph"), x("kernel"));
    assert_eq!(replays.len(), 20);
    assert_eq!(kernels.len(), 20 * 30);
    for r in &replays {
        assert_eq!(r["name"], "graph 5 replay");
        assert_eq!(r["args"]["kernels"], 30);
        let (s, e) = (
            r["ts"].as_f64().unwrap(),
            r["ts"].as_f64().unwrap() + r["dur"].as_f64().unwrap(),
        );
        let inside = kernels
            .iter()
            .filter(|k| k["tid"] == r["tid"] && k["pid"] == r["pid"])
            .filter(|k| {
                let ks = k["ts"].as_f64().unwrap();
                ks >= s && ks + k["dur"].as_f64().unwrap() <= e
            })
            .count();
        assert_eq!(inside, 30, "{r}");
    }
    let perfetto = d.join("graphs.perfetto-trace");
    let (code, _, err) = gputrace(&[
        "export",
        "--format",
        "perfetto",
        "-o",
        perfetto.to_str().unwrap(),
        t.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let bytes = std::fs::read(&perfetto).unwrap();
    assert!(bytes.windows(14).any(|w| w == b"graph 5 replay"));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn graph_level_records_are_replays_of_one_kernel_each() {
    // The reduce-overhead loop recorded with graph-level tracing: one GraphTrace per
    // replay (its 148 us span), no node kernels.
    let mut b = B::new();
    let t = setup(&mut b, 2 * GIB);
    for i in 0..400u64 {
        let at = t + i * 150 * US;
        let c = b.api(TID, at, 120 * US, GRAPH_LAUNCH, "cudaGraphLaunch", 0, 0);
        b.ev.push(Event::GraphTrace(fmt::GraphTrace {
            start: at + 10 * US,
            end: at + 158 * US,
            device: 0,
            stream: 7,
            corr: c,
            graph_id: GRAPH,
        }));
    }
    // Read from a file too (chunks decoded on workers).
    let d = std::env::temp_dir().join(format!("gputrace-graph-level-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let f = write(&d, "level.gtrace", &b);
    let (code, json, err) = gputrace(&["report", "--json", f.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["processes"][0]["graphs"]["graph_level"], true);
    assert_eq!(
        v["processes"][0]["graphs"]["graphs"][0]["replays_total"],
        400
    );
    let _ = std::fs::remove_dir_all(&d);
    let r = analyze(&[b.build()]);
    let p = &r.processes[0];
    assert_eq!(p.steps.source, "graph_replay");
    let g = p.graphs.as_ref().unwrap();
    assert!(g.graph_level);
    let x = &g.graphs[0];
    assert_eq!(
        (x.replays_total, x.kernels_per_replay, x.gap_ns_per_replay),
        (400, 1, 0)
    );
    assert_eq!(x.gpu_ns_per_replay, 148 * US);
    assert_eq!(x.launch_latency_ns_p50, 10 * US);
    assert!(find(&r, FindingId::LaunchBound).is_none_or(|l| l.severity == Severity::Info));
    assert_no_graph_advice(&r);
    let text = gputrace_analyzer::render_text(&r);
    assert!(text.contains("graph-level tracing"), "{text}");
}

#[test]
fn a_graph_names_the_python_line_where_it_was_captured() {
    let r = analyze(&[manual_step(20).build()]);
    let x = &r.processes[0].graphs.as_ref().unwrap().graphs[0];
    assert_eq!(x.instantiated_at, None, "no call sites in the trace");
    let mut b = manual_step(20);
    instantiate_site(&mut b);
    let r = analyze(&[b.build()]);
    let x = &r.processes[0].graphs.as_ref().unwrap().graphs[0];
    assert_eq!(x.instantiated_at.as_deref(), Some("train.py:42 in capture"));
    let text = gputrace_analyzer::render_text(&r);
    assert!(
        text.contains("captured at train.py:42 in capture"),
        "{text}"
    );
}
