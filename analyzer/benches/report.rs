//! Throughput and memory of `gputrace report` on a synthetic trace of ten million events.
//!
//!   cargo bench -p gputrace-analyzer --bench report            (10 M events)
//!   GPUTRACE_BENCH_EVENTS=1000000 cargo bench -p gputrace-analyzer --bench report
//!
//! Prints events per second for decoding the file into a `Trace` and for the analysis,
//! and bytes per event: the Trace's tables, the peak heap while analysing (on top of the
//! loaded trace), and the peak of the whole load + analysis (file buffer included).
//! Decode and analysis run on one thread: their events per second are per core. The
//! decode is then timed again on the workers `gputrace report` uses for one trace (up to
//! four, fewer with fewer cores; `GPUTRACE_THREADS` sets the cores), for the wall time and
//! the load peak of that path. GPUTRACE_BENCH_WRITE=FILE also writes the synthetic trace
//! to FILE (to try `gputrace report` on it).

use gputrace_analyzer::report;
use gputrace_analyzer::Trace;
use gputrace_format::protocol::settings;
use gputrace_format::{self as fmt, Event, Meta};
use std::sync::atomic::Ordering;
use std::time::Instant;

#[path = "../tests/common/counting_alloc.rs"]
#[allow(dead_code)]
mod counting_alloc;
use counting_alloc::{CUR, PEAK};

#[global_allocator]
static A: counting_alloc::Counting = counting_alloc::Counting;

fn reset_peak() -> usize {
    let c = CUR.load(Ordering::Relaxed);
    PEAK.store(c, Ordering::Relaxed);
    c
}

/// A training-like trace: steps of 200 kernels, each launched by a call; per step a
/// pinned input copy, a memset and a sync; allocations now and then. With `sampled`,
/// also what the samplers record at their default rates: the launching thread's CPU
/// every 3 ms, the process tree (itself and two workers) and the machine every 100 ms,
/// a Python stack sample every 10 ms (one of 16 stacks), a call site at each sync.
fn synthesize(target: u64, sampled: bool, gap: u64) -> (Vec<u8>, u64) {
    let meta = Meta {
        pid: 1,
        host: "bench".into(),
        ..Default::default()
    };
    let mut w = fmt::ChunkWriter::new(Vec::new(), &meta).unwrap();
    let mut enc = fmt::Encoder::new();
    let n = std::cell::Cell::new(0u64);
    let push = |e: Event, enc: &mut fmt::Encoder, w: &mut fmt::ChunkWriter<Vec<u8>>| {
        enc.push(&e);
        n.set(n.get() + 1);
        if enc.len() >= 1 << 20 {
            w.write_events(enc).unwrap();
        }
    };
    push(
        Event::Str {
            id: 211,
            text: "NVIDIA H200".into(),
        },
        &mut enc,
        &mut w,
    );
    for id in 1..=210u32 {
        push(
            Event::Str {
                id,
                text: format!("_ZN2at6native18elementwise_kernel_{id}EPfS0_i"),
            },
            &mut enc,
            &mut w,
        );
    }
    // Interned strings given by (id, text).
    let strings =
        |list: &[(u32, &str)], enc: &mut fmt::Encoder, w: &mut fmt::ChunkWriter<Vec<u8>>| {
            for &(id, text) in list {
                push(
                    Event::Str {
                        id,
                        text: text.into(),
                    },
                    enc,
                    w,
                );
            }
        };
    // The calls' names (ids above the kernels').
    strings(
        &[
            (221, "cudaLaunchKernel"),
            (223, "cudaMemcpyAsync"),
            (224, "cudaMemsetAsync"),
            (225, "cudaStreamSynchronize"),
            (226, "cudaMalloc"),
        ],
        &mut enc,
        &mut w,
    );
    push(
        Event::Device(fmt::Device {
            id: 0,
            name: 211,
            sm_count: 132,
            max_blocks_per_sm: 32,
            max_threads_per_sm: 2048,
            max_warps_per_sm: 64,
            global_memory: 141 << 30,
            cc_major: 9,
            cc_minor: 0,
            max_regs_per_sm: 65536,
            max_smem_per_sm: 233472,
        }),
        &mut enc,
        &mut w,
    );
    // Timing jitter as real traces have (a fixed pattern would compress unrealistically
    // well): xorshift, fixed seed.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut jit = move |range: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % range
    };
    let mut t = 1_796_225_776_000_000_000u64;
    // Samplers: string ids from 300, stacks 1-16 of 12 frames, each ending in train.py.
    let (mut next_cpu, mut next_tree, mut next_py) = (t, t, t);
    let mut cpu_ns = 0u64;
    if sampled {
        strings(
            &[
                (300, "/job/train.py"),
                (
                    301,
                    "/venv/lib/python3.12/site-packages/torch/nn/modules/module.py",
                ),
                (302, "main"),
                (303, "forward"),
                (304, "pt_data_worker"),
                (305, "python3"),
            ],
            &mut enc,
            &mut w,
        );
        for id in 1..=16u32 {
            let mut frames: Vec<fmt::PyFrame> = (0..11)
                .map(|i| fmt::PyFrame {
                    file: 301,
                    function: 303,
                    line: 1000 + id * 16 + i,
                })
                .collect();
            frames.push(fmt::PyFrame {
                file: 300,
                function: 302,
                line: 40 + id,
            });
            push(
                Event::PyStack(fmt::PyStack { id, frames }),
                &mut enc,
                &mut w,
            );
        }
        push(
            Event::CpuLimits(fmt::CpuLimits {
                ts: t,
                online_cpus: 16,
                affinity_cpus: 16,
                thread_period_us: 3_000,
                tree_period_us: 100_000,
                ..Default::default()
            }),
            &mut enc,
            &mut w,
        );
    }
    let mut gpu = t;
    let mut corr = 1u32;
    let mut step = 0u64;
    'outer: loop {
        // Input copy and its call.
        corr += 1;
        push(api(t, 8_000, corr, 41, 223, 4 << 20, 1), &mut enc, &mut w);
        let cs = gpu.max(t + 10_000);
        push(
            Event::Memcpy(fmt::Memcpy {
                start: cs,
                end: cs + 80_000,
                device: 0,
                stream: 7,
                corr,
                bytes: 4 << 20,
                copy_kind: fmt::CopyKind::HtoD as u8,
                src_kind: fmt::MemKind::Pinned as u8,
                dst_kind: fmt::MemKind::Device as u8,
                flags: fmt::MEMCPY_FLAG_ASYNC,
            }),
            &mut enc,
            &mut w,
        );
        gpu = cs + 81_000;
        t += 12_000;
        for j in 0..200u32 {
            corr += 1;
            push(
                api(t, 3_000 + jit(2_000), corr, 211, 221, 0, 0),
                &mut enc,
                &mut w,
            );
            let ks = gpu.max(t + 6_000 + jit(500));
            let d = 2_000 + (j as u64 * 37 % 40) * 1_000 + jit(1_000);
            push(
                Event::Kernel(fmt::Kernel {
                    start: ks,
                    end: ks + d,
                    device: 0,
                    stream: 7,
                    corr,
                    name: 2 + j % 200,
                    grid: [1 + j * 7, 1, 1],
                    block: [256, 1, 1],
                    static_smem: 0,
                    dynamic_smem: (j % 4) * 16384,
                    registers: 32 + j % 64,
                    graph_id: 0,
                    graph_node_id: fmt::ENV_NA64,
                }),
                &mut enc,
                &mut w,
            );
            gpu = ks + d + 1_000 + jit(300);
            t += 6_000 + jit(2_000);
            if j == 100 {
                corr += 1;
                push(api(t, 3_000, corr, 51, 224, 4096, 0), &mut enc, &mut w);
                let ms = gpu.max(t + 5_000);
                push(
                    Event::Memset(fmt::Memset {
                        start: ms,
                        end: ms + 1_000,
                        device: 0,
                        stream: 7,
                        corr,
                        bytes: 4096,
                        value: 0,
                        mem_kind: 3,
                        flags: 0,
                    }),
                    &mut enc,
                    &mut w,
                );
                gpu = ms + 2_000;
                t += 4_000;
            }
        }
        // The step ends with a sync.
        corr += 1;
        let end = gpu.max(t) + 3_000;
        push(api(t, end - t, corr, 131, 225, 0, 0), &mut enc, &mut w);
        push(
            Event::Sync(fmt::Sync {
                start: t,
                end,
                device: 0,
                stream: 7,
                corr,
                kind: fmt::SyncKind::StreamSynchronize as u8,
            }),
            &mut enc,
            &mut w,
        );
        if sampled {
            push(
                Event::CallSite(fmt::CallSite {
                    ts: t,
                    tid: 77,
                    stack: 1 + (step % 16) as u32,
                }),
                &mut enc,
                &mut w,
            );
            while next_cpu <= end {
                cpu_ns += 2_400_000 + jit(600_000);
                push(
                    Event::ThreadCpu(fmt::ThreadCpu {
                        ts: next_cpu,
                        tid: 77,
                        cpu_ns,
                        wait_ns: 0,
                        slices: step,
                        state: b'R',
                    }),
                    &mut enc,
                    &mut w,
                );
                next_cpu += 3_000_000;
            }
            while next_py <= end {
                push(
                    Event::PySample(fmt::PySample {
                        ts: next_py,
                        tid: 77,
                        stack: 1 + jit(16) as u32,
                    }),
                    &mut enc,
                    &mut w,
                );
                next_py += 10_000_000;
            }
            while next_tree <= end {
                let k = (next_tree - 1_796_225_776_000_000_000) / 100_000_000;
                for (pid, comm, share) in [(1, 305, 90), (2, 304, 60), (3, 304, 60)] {
                    push(
                        Event::ProcSample(fmt::ProcSample {
                            ts: next_tree,
                            pid,
                            ppid: if pid == 1 { 0 } else { 1 },
                            comm,
                            flags: 0,
                            state: b'R',
                            threads: 4,
                            cpu_ns: k * share * 1_000_000,
                            rchar: k << 20,
                            read_bytes: 0,
                            write_bytes: 0,
                        }),
                        &mut enc,
                        &mut w,
                    );
                }
                push(
                    Event::MachineSample(fmt::MachineSample {
                        ts: next_tree,
                        busy_ns: k * 300_000_000,
                        idle_ns: k * 1_300_000_000,
                        ..Default::default()
                    }),
                    &mut enc,
                    &mut w,
                );
                next_tree += 100_000_000;
            }
        }
        t = end + gap;
        if step.is_multiple_of(100) {
            corr += 1;
            push(api(t, 20_000, corr, 20, 226, 1 << 26, 0), &mut enc, &mut w);
            push(
                Event::Memory(fmt::Memory {
                    ts: t + 10_000,
                    device: 0,
                    corr,
                    address: 0x7f00_0000_0000 + step,
                    bytes: 1 << 26,
                    op: fmt::MEMORY_OP_ALLOC,
                    mem_kind: fmt::MemKind::Device as u8,
                }),
                &mut enc,
                &mut w,
            );
            t += 25_000;
        }
        step += 1;
        if n.get() >= target {
            break 'outer;
        }
    }
    w.write_events(&mut enc).unwrap();
    (w.into_inner(), n.get())
}

fn api(start: u64, dur: u64, corr: u32, cbid: u32, name: u32, bytes: u64, arg: u32) -> Event {
    Event::Api(fmt::Api {
        start,
        end: start + dur,
        tid: 77,
        corr,
        domain: fmt::DOMAIN_RUNTIME,
        cbid,
        name,
        bytes,
        arg,
        result: 0,
        ptr: fmt::ENV_NA64,
    })
}

fn table_bytes(t: &Trace) -> usize {
    use std::mem::size_of;
    t.kernels.heap_bytes()
        + t.apis.heap_bytes()
        + t.memcpys.capacity() * size_of::<fmt::Memcpy>()
        + t.memsets.capacity() * size_of::<fmt::Memset>()
        + t.syncs.capacity() * size_of::<fmt::Sync>()
        + t.memory.capacity() * size_of::<fmt::Memory>()
}

fn main() {
    let target: u64 = std::env::var(settings::BENCH_EVENTS)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let t0 = Instant::now();
    let mode = std::env::var(settings::BENCH_SAMPLED).unwrap_or_default();
    // "2": the host also waits 5 ms after each step (a GPU gap per step to explain).
    let gap = if mode == "2" { 5_000_000 } else { 50_000 };
    let (bytes, n) = synthesize(target, mode == "1" || mode == "2", gap);
    eprintln!(
        "synthesised {n} events, {:.1} MB file ({:.1} B/event) in {:.2?}",
        bytes.len() as f64 / 1e6,
        bytes.len() as f64 / n as f64,
        t0.elapsed()
    );

    // Decoded the way `gputrace report` does: from the file, one chunk at a time.
    let file = std::env::var_os(settings::BENCH_WRITE)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::env::temp_dir().join(format!("gtbench-{}.gtrace", std::process::id()))
        });
    std::fs::write(&file, &bytes).expect("write the synthetic trace");
    let file_bytes = bytes.len();
    drop(bytes);
    // Repeated (GPUTRACE_BENCH_REPS, default 5) on a noisy machine: the times below
    // are medians, memory is from the first repetition.
    let reps: usize = std::env::var(settings::BENCH_REPS)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
        .max(1);
    let workers = gputrace_analyzer::model::trace::decode_workers(1);
    let load1 = |f: &std::path::Path| Trace::load_with(f, 1, |_, _| {}).unwrap();
    let (mut loads, mut analyses, mut par_loads) = (Vec::new(), Vec::new(), Vec::new());
    let mut par_peak = 0;
    for rep in 0..reps {
        if workers > 1 {
            let base = reset_peak();
            let t = Instant::now();
            let tr = Trace::load_with(&file, workers, |_, _| {}).unwrap();
            par_loads.push(t.elapsed());
            if rep == 0 {
                par_peak = PEAK.load(Ordering::Relaxed) - base;
            }
            drop(tr);
        }
        if rep + 1 == reps {
            break;
        }
        let t = Instant::now();
        let tr = load1(&file);
        loads.push(t.elapsed());
        let t = Instant::now();
        let r = report::analyze(std::slice::from_ref(&tr));
        analyses.push(t.elapsed());
        drop((r, tr));
    }
    let base = reset_peak();
    let t1 = Instant::now();
    let trace = load1(&file);
    let load = t1.elapsed();
    let load_peak = PEAK.load(Ordering::Relaxed) - base;
    let held = CUR.load(Ordering::Relaxed) - base;
    let tables = table_bytes(&trace);
    if std::env::var_os(settings::BENCH_WRITE).is_none() {
        let _ = std::fs::remove_file(&file);
    } else {
        eprintln!("wrote {}", file.display());
    }

    let base2 = reset_peak();
    let t2 = Instant::now();
    let r = report::analyze(std::slice::from_ref(&trace));
    let analysis = t2.elapsed();
    let analysis_peak = PEAK.load(Ordering::Relaxed) - base2;
    let text = report::render_text(&r);
    assert!(text.contains("VERDICT"));
    loads.push(load);
    analyses.push(analysis);
    let median = |v: &mut Vec<std::time::Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let mut both: Vec<_> = loads.iter().zip(&analyses).map(|(a, b)| *a + *b).collect();
    let (load, analysis, both) = (median(&mut loads), median(&mut analyses), median(&mut both));
    println!(
        "file                     {:.1} B/event, {} repetitions (medians)",
        file_bytes as f64 / n as f64,
        reps
    );

    let per = |b: usize| b as f64 / n as f64;
    let rate = |d: std::time::Duration| n as f64 / d.as_secs_f64() / 1e6;
    println!("events                   {n}");
    println!(
        "kernels / api calls      {} / {}",
        trace.kernels.len(),
        trace.apis.len()
    );
    println!(
        "decode into Trace        {:>8.2?}  {:>6.1} M events/s",
        load,
        rate(load)
    );
    if workers > 1 {
        let par = median(&mut par_loads);
        println!(
            "decode, {workers} workers         {:>8.2?}  {:>6.1} M events/s  (load peak {:.1} B/event)",
            par,
            rate(par),
            per(par_peak)
        );
    }
    println!(
        "analysis                 {:>8.2?}  {:>6.1} M events/s",
        analysis,
        rate(analysis)
    );
    println!(
        "decode + analysis        {:>8.2?}  {:>6.1} M events/s",
        both,
        rate(both)
    );
    println!("Trace tables             {:>6.1} B/event", per(tables));
    println!("Trace held after load    {:>6.1} B/event", per(held));
    println!(
        "analysis peak (extra)    {:>6.1} B/event",
        per(analysis_peak)
    );
    println!(
        "trace + analysis peak    {:>6.1} B/event",
        per(held + analysis_peak)
    );
    println!(
        "load peak (tables + chunk buffers while decoding) {:.1} B/event",
        per(load_peak)
    );
    println!(
        "held per record: kernels {:.1} B, calls {:.1} B; Memcpy {} B, Memset {} B, Sync {} B, Memory {} B",
        trace.kernels.heap_bytes() as f64 / trace.kernels.len().max(1) as f64,
        trace.apis.heap_bytes() as f64 / trace.apis.len().max(1) as f64,
        std::mem::size_of::<fmt::Memcpy>(),
        std::mem::size_of::<fmt::Memset>(),
        std::mem::size_of::<fmt::Sync>(),
        std::mem::size_of::<fmt::Memory>()
    );
    println!(
        "table bytes / length: kernels {} / {}, apis {} / {}",
        trace.kernels.heap_bytes(),
        trace.kernels.len(),
        trace.apis.heap_bytes(),
        trace.apis.len()
    );
    println!("verdict: {}", r.verdict);
    println!("steps: {}", r.processes[0].steps.count);
}
