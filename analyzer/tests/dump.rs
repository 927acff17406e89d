//! `gputrace dump` streamed from the file: the same bytes as the previous dump (which
//! built every event as a JSON value and sorted them all), whatever the order of the
//! file's chunks and however small the reorder buffer.

#[path = "common/legacy_dump.rs"]
mod legacy_dump;

use gputrace_analyzer::export::jsonl::Jsonl;
use gputrace_analyzer::export::stream::{EventStream, StreamStats, DEFAULT_MAX_PENDING};
use gputrace_analyzer::Trace;
use gputrace_format::{self as fmt, CopyKind, Event, MemKind, Meta};
use legacy_dump::legacy_dump;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// xorshift64: a fixed sequence per seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
}

/// An environment value: one NVML did not give (`ENV_NA`) now and then, else up to `max`.
fn na(r: &mut Rng, max: u32) -> u32 {
    if r.chance(20) {
        fmt::ENV_NA
    } else {
        r.below(max as u64 + 1) as u32
    }
}

fn na64(r: &mut Rng, max: u64) -> u64 {
    if r.chance(20) {
        fmt::ENV_NA64
    } else {
        r.below(max + 1)
    }
}

/// A trace with every kind of event: timestamps from a narrow range (so many tie),
/// untimed GPU records, strings and devices defined twice, a window when `window`.
fn random_events(seed: u64, n: usize, window: bool) -> (Meta, Vec<Event>) {
    let mut r = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    const T0: u64 = 1_796_225_776_000_000_000;
    let meta = Meta {
        pid: 4242,
        host: "node0".into(),
        started_by: if window { "attach" } else { "injection" }.into(),
        ..Default::default()
    };
    let mut ev = Vec::new();
    for i in 0..n {
        let corr = i as u32 + 1;
        let ts = T0 + r.below(2_000) * 1_000;
        let end = ts + r.below(4) * 1_000;
        let (start, end) = if r.chance(3) {
            // Still running when collection stopped: no timestamps.
            if r.chance(50) {
                (0, end)
            } else {
                (ts, 0)
            }
        } else {
            (ts, end)
        };
        let e = match r.below(30) {
            0 => Event::Str {
                id: r.below(12) as u32,
                text: format!("_Z6kernel{}Pfi \"quoted\" \\ {}", r.below(5), i),
            },
            1 => Event::Device(fmt::Device {
                id: r.below(3) as u32,
                name: r.below(12) as u32,
                sm_count: 132,
                cc_major: 9,
                global_memory: i as u64,
                ..Default::default()
            }),
            2 => Event::Thread {
                tid: r.below(4) as u32,
                name: r.below(12) as u32,
            },
            3 => Event::State {
                ts,
                state: r.below(5) as u8,
                reason: r.below(12) as u32,
            },
            4 => Event::Dropped {
                ts,
                source: r.below(5) as u8,
                count: r.below(100),
            },
            5 => Event::Clock {
                cupti_ns: ts,
                mono_ns: r.below(1_000_000),
                real_ns: ts + r.below(3),
            },
            6..=8 => Event::Kernel(fmt::Kernel {
                start,
                end,
                device: r.below(2) as u32,
                stream: r.below(3) as u32,
                corr,
                name: r.below(12) as u32,
                grid: [1 + r.below(100) as u32, 1, 1],
                block: [128, 1, 1],
                registers: 32,
                ..Default::default()
            }),
            9 => Event::Memcpy(fmt::Memcpy {
                start,
                end,
                stream: r.below(3) as u32,
                corr,
                bytes: r.below(1 << 20),
                copy_kind: r.below(5) as u8,
                src_kind: r.below(4) as u8,
                dst_kind: r.below(4) as u8,
                flags: r.below(2) as u8,
                ..Default::default()
            }),
            10 => Event::Memset(fmt::Memset {
                start,
                end,
                corr,
                bytes: r.below(4096),
                value: r.below(3) as u32,
                ..Default::default()
            }),
            11 => Event::Sync(fmt::Sync {
                start: ts,
                end,
                stream: if r.chance(50) { u32::MAX } else { 7 },
                corr,
                kind: r.below(5) as u8,
                ..Default::default()
            }),
            12 => Event::Memory(fmt::Memory {
                ts,
                corr,
                address: r.next(),
                bytes: r.below(1 << 30),
                op: 1 + r.below(2) as u8,
                ..Default::default()
            }),
            13..=14 => Event::Api(fmt::Api {
                start: ts,
                end,
                tid: r.below(4) as u32,
                corr,
                domain: 1 + r.below(2) as u8,
                cbid: r.below(300) as u32,
                name: r.below(12) as u32,
                ..Default::default()
            }),
            15 => Event::HostCopy(fmt::HostCopy {
                start: ts,
                end,
                api: 1 + r.below(6) as u8,
                copy_kind: CopyKind::HtoD as u8,
                host_kind: MemKind::Pinned as u8,
                flags: r.below(4) as u8,
                dst_device: if r.chance(50) { u32::MAX } else { 1 },
                src_device: u32::MAX,
                ..Default::default()
            }),
            16 => Event::HostCall(fmt::HostCall {
                start: ts,
                end,
                call: r.below(14) as u16,
                arg0: r.below(10),
                arg1: r.below(10),
                arg2: r.below(10),
                ..Default::default()
            }),
            17 => Event::HostAlloc(fmt::HostAlloc {
                start: ts,
                end,
                op: 1 + r.below(5) as u8,
                bytes: 4096,
                ..Default::default()
            }),
            18 => Event::Nccl(fmt::Nccl {
                start: ts,
                end,
                op: 1 + r.below(9) as u8,
                datatype: r.below(10) as u8,
                peer_or_root: r.below(4) as i32 - 1,
                comm_id: r.next(),
                rank: r.below(4) as i32,
                nranks: 4,
                ..Default::default()
            }),
            19 => Event::NcclComm(fmt::NcclComm {
                start: ts,
                end,
                op: 1 + r.below(7) as u8,
                comm: r.next(),
                rank: -1,
                ..Default::default()
            }),
            20..=21 => Event::Nvtx(fmt::Nvtx {
                ts,
                tid: r.below(3) as u32,
                kind: 1 + r.below(5) as u8,
                flags: r.below(2) as u8,
                id: r.below(4),
                text: r.below(12) as u32,
            }),
            // The environment: values NVML did not give (`ENV_NA`) now and then.
            22 => Event::Fact(fmt::Fact {
                ts,
                device: if r.chance(50) {
                    fmt::FACT_HOST
                } else {
                    r.below(2) as u32
                },
                key: r.below(12) as u32,
                value: r.below(12) as u32,
            }),
            23 => Event::GpuSample(fmt::GpuSample {
                ts,
                device: r.below(2) as u32,
                sm_clock_mhz: na(&mut r, 1_980),
                mem_clock_mhz: na(&mut r, 2_619),
                power_mw: na(&mut r, 300_000),
                temperature_c: na(&mut r, 60),
                gpu_util_pct: na(&mut r, 97),
                pcie_gen: na(&mut r, 5),
                pcie_rx_kbs: na(&mut r, 1_000),
                clock_reasons: na64(&mut r, 1 << 9),
                mem_used: na64(&mut r, 1 << 40),
                ..Default::default()
            }),
            24 => Event::GpuProcess(fmt::GpuProcess {
                ts,
                device: r.below(2) as u32,
                pid: r.below(3) as u32 + 4241,
                name: r.below(12) as u32,
                used_memory: na64(&mut r, 1 << 34),
                sm_pct: na(&mut r, 100),
                flags: r.below(8) as u8,
                ..Default::default()
            }),
            25 => Event::GpuEvent(fmt::GpuEvent {
                ts,
                device: r.below(2) as u32,
                kind: 1 + r.below(3) as u8,
                data: r.below(100),
            }),
            // Host samples: several at one timestamp (a tree pass stamps them alike).
            26 => Event::ThreadCpu(fmt::ThreadCpu {
                ts,
                tid: r.below(3) as u32 + 4242,
                cpu_ns: r.below(1 << 40),
                wait_ns: r.below(1 << 30),
                slices: r.below(1000),
                state: [0, b'R', b'S', b'D'][r.below(4) as usize],
            }),
            27 => Event::ProcSample(fmt::ProcSample {
                ts: T0 + r.below(20) * 100_000,
                pid: r.below(4) as u32 + 5000,
                ppid: 4242,
                comm: r.below(12) as u32,
                flags: r.below(8) as u8,
                state: [0, b'R', b'S', b'D'][r.below(4) as usize],
                threads: r.below(8) as u32,
                cpu_ns: r.below(1 << 40),
                rchar: r.below(1 << 40),
                read_bytes: r.below(1 << 30),
                write_bytes: r.below(1 << 20),
            }),
            28 => Event::MachineSample(fmt::MachineSample {
                ts,
                busy_ns: r.below(1 << 50),
                idle_ns: r.below(1 << 50),
                iowait_ns: r.below(1 << 40),
                steal_ns: r.below(1 << 30),
                flags: r.below(4) as u8,
                psi_cpu_some_us: r.below(1 << 40),
                psi_io_some_us: r.below(1 << 40),
                psi_io_full_us: r.below(1 << 40),
                cgroup_usage_us: r.below(1 << 40),
                cgroup_throttled_us: r.below(1 << 30),
            }),
            _ => Event::CpuLimits(fmt::CpuLimits {
                ts,
                online_cpus: 16,
                affinity_cpus: r.below(17) as u32,
                quota_us: r.below(2) * 200_000,
                period_us: 100_000,
                memory_limit: r.below(2) << 34,
                thread_period_us: 3000,
                tree_period_us: 100_000,
            }),
        };
        ev.push(e);
    }
    if window {
        // The window opens in the middle of the range: some work began before it.
        ev.push(Event::State {
            ts: T0 + 900_000,
            state: fmt::CollectorState::Tracing as u8,
            reason: 1,
        });
        ev.push(Event::State {
            ts: T0 + 1_800_000,
            state: fmt::CollectorState::Stopped as u8,
            reason: 1,
        });
    }
    (meta, ev)
}

/// Encodes events into chunks of random sizes, compressed or not.
fn encode(meta: &Meta, events: &[Event], seed: u64, compress: bool) -> Vec<u8> {
    let mut r = Rng(seed | 1);
    let w = fmt::ChunkWriter::new(Vec::new(), meta).unwrap();
    let mut w = if compress { w } else { w.without_compression() };
    let mut enc = fmt::Encoder::new();
    let mut left = 1 + r.below(300);
    for e in events {
        enc.push(e);
        left -= 1;
        if left == 0 {
            w.write_events(&mut enc).unwrap();
            left = 1 + r.below(300);
        }
    }
    w.write_events(&mut enc).unwrap();
    w.into_inner()
}

/// Blocks of the event list moved around: the file far from time order.
fn shuffle_blocks(events: Vec<Event>, seed: u64) -> Vec<Event> {
    let mut r = Rng(seed | 1);
    let mut blocks: Vec<Vec<Event>> = Vec::new();
    let mut it = events.into_iter().peekable();
    while it.peek().is_some() {
        let n = 1 + r.below(200) as usize;
        blocks.push(it.by_ref().take(n).collect());
    }
    for i in (1..blocks.len()).rev() {
        blocks.swap(i, r.below(i as u64 + 1) as usize);
    }
    blocks.into_iter().flatten().collect()
}

fn streamed(path: &Path, bytes: &[u8], max_pending: usize) -> (Vec<u8>, StreamStats) {
    let s = EventStream::from_bytes(path, bytes).unwrap();
    let mut out = Vec::new();
    let st = s
        .write(max_pending, &mut Jsonl::default(), &mut out)
        .unwrap();
    (out, st)
}

fn legacy(path: &Path, bytes: &[u8]) -> Vec<u8> {
    legacy_dump(&Trace::from_bytes(path, bytes).unwrap())
}

#[test]
fn streamed_dump_is_the_previous_dump_byte_for_byte() {
    let path = PathBuf::from("random.gtrace");
    for seed in 1..=8u64 {
        let window = seed % 3 == 0;
        let (meta, ev) = random_events(seed, if seed == 1 { 400 } else { 2_000 }, window);
        let ev = if seed % 2 == 0 {
            shuffle_blocks(ev, seed)
        } else {
            ev
        };
        let bytes = encode(&meta, &ev, seed, seed % 4 < 2);
        let want = legacy(&path, &bytes);
        assert!(want.len() > 30_000, "{}", want.len());
        // A small trace also with buffers of one and two records (a pass per record).
        let sizes: &[usize] = if seed == 1 {
            &[DEFAULT_MAX_PENDING, 37, 2, 1]
        } else {
            &[DEFAULT_MAX_PENDING, 211]
        };
        for &max_pending in sizes {
            let (got, st) = streamed(&path, &bytes, max_pending);
            if got != want {
                let line = got
                    .split(|b| *b == b'\n')
                    .zip(want.split(|b| *b == b'\n'))
                    .position(|(a, b)| a != b);
                panic!(
                    "seed {seed} max_pending {max_pending}: first differing line {line:?}\n{:?}",
                    st
                );
            }
            assert!(
                st.peak_pending <= 2 * max_pending,
                "seed {seed}: {st:?} over {max_pending}"
            );
            if max_pending < 1_000 {
                assert!(st.passes > 1, "seed {seed}: {st:?}");
            }
        }
    }
}

#[test]
fn a_file_in_time_order_goes_through_in_one_pass_holding_little() {
    // Events in time order, chunks of 100: the buffer holds about a chunk.
    let (meta, mut ev) = random_events(99, 10_000, false);
    let ts = |e: &Event| match e {
        Event::Kernel(k) => k.start,
        Event::Api(a) => a.start,
        Event::Memcpy(c) => c.start,
        Event::Memset(s) => s.start,
        Event::Sync(s) => s.start,
        Event::Memory(m) => m.ts,
        Event::HostCopy(c) => c.start,
        Event::HostCall(c) => c.start,
        Event::HostAlloc(a) => a.start,
        Event::Nccl(n) => n.start,
        Event::NcclComm(n) => n.start,
        Event::Nvtx(n) => n.ts,
        Event::Fact(f) => f.ts,
        Event::GpuSample(g) => g.ts,
        Event::GpuProcess(p) => p.ts,
        Event::GpuEvent(e) => e.ts,
        Event::ThreadCpu(x) => x.ts,
        Event::ProcSample(x) => x.ts,
        Event::MachineSample(x) => x.ts,
        Event::CpuLimits(x) => x.ts,
        _ => 0,
    };
    ev.sort_by_key(ts);
    let mut w = fmt::ChunkWriter::new(Vec::new(), &meta).unwrap();
    let mut enc = fmt::Encoder::new();
    for c in ev.chunks(100) {
        for e in c {
            enc.push(e);
        }
        w.write_events(&mut enc).unwrap();
    }
    let bytes = w.into_inner();
    let path = PathBuf::from("ordered.gtrace");
    let (got, st) = streamed(&path, &bytes, DEFAULT_MAX_PENDING);
    assert_eq!(got, legacy(&path, &bytes));
    assert_eq!(st.passes, 1);
    // Records equal in time to the next chunk's first one wait for it: about two
    // chunks at most, never the whole trace.
    assert!(st.peak_pending <= 300, "{st:?}");
    assert!(st.events > 7_000, "{st:?}");
}

#[test]
fn streamed_dump_of_the_recorded_examples() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
    for name in ["nccl_single_rank.gtrace"] {
        let p = dir.join(name);
        let Ok(bytes) = std::fs::read(&p) else {
            continue;
        };
        let want = legacy(&p, &bytes);
        for max_pending in [DEFAULT_MAX_PENDING, 1000] {
            assert!(streamed(&p, &bytes, max_pending).0 == want, "{name}");
        }
    }
}

/// Moved from the previous dump module: each hook event gets its line, with its fields.
#[test]
fn every_hook_event_gets_one_line() {
    let meta = fmt::Meta::default();
    let events = vec![
        fmt::Event::Str {
            id: 1,
            text: "step".into(),
        },
        fmt::Event::HostCopy(fmt::HostCopy {
            start: 1,
            end: 2,
            api: fmt::HOSTCOPY_MEMCPY_ASYNC,
            copy_kind: CopyKind::HtoD as u8,
            host_kind: MemKind::Pinned as u8,
            source: fmt::CLASS_SOURCE_REGISTRY,
            dst_device: u32::MAX,
            src_device: u32::MAX,
            ..Default::default()
        }),
        fmt::Event::HostCall(fmt::HostCall {
            start: 3,
            end: 4,
            call: fmt::HOSTCALL_LAUNCH_KERNEL_STUB,
            arg1: 132,
            ..Default::default()
        }),
        fmt::Event::HostAlloc(fmt::HostAlloc {
            start: 5,
            end: 6,
            op: fmt::HOSTALLOC_HOST_ALLOC,
            bytes: 4096,
            ..Default::default()
        }),
        fmt::Event::Nccl(fmt::Nccl {
            start: 7,
            end: 8,
            op: fmt::NCCL_SEND,
            datatype: 7,
            peer_or_root: 3,
            comm_id: 0xabc,
            ..Default::default()
        }),
        fmt::Event::NcclComm(fmt::NcclComm {
            start: 9,
            end: 10,
            op: fmt::NCCL_COMM_INIT_RANK,
            ..Default::default()
        }),
        fmt::Event::Nvtx(fmt::Nvtx {
            ts: 11,
            kind: fmt::NVTX_PUSH,
            text: 1,
            ..Default::default()
        }),
    ];
    let bytes = encode(&meta, &events, 1, false);
    let (out, _) = streamed(Path::new("hooks.gtrace"), &bytes, DEFAULT_MAX_PENDING);
    let v: Vec<Value> = out
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    let ty: Vec<_> = v.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        ty,
        [
            "host_copy",
            "host_call",
            "host_alloc",
            "nccl",
            "nccl_comm",
            "nvtx"
        ]
    );
    assert_eq!(v[0]["host_memory"], "pinned");
    assert_eq!(v[0]["host_memory_source"], "registry");
    assert_eq!(v[0]["api"], "cudaMemcpyAsync");
    assert_eq!(v[1]["class"], "launch");
    assert_eq!(v[1]["grid_blocks"], 132);
    assert_eq!(v[3]["peer"], 3);
    assert_eq!(v[3]["datatype"], "float32");
    assert_eq!(v[3]["comm_id"], "0x0000000000000abc");
    assert_eq!(v[5]["text"], "step");
}

/// Moved from the previous dump module: each environment event gets its line, without
/// the values NVML did not give.
#[test]
fn every_env_event_gets_one_line_without_unavailable_fields() {
    let meta = fmt::Meta::default();
    let events = vec![
        fmt::Event::Str {
            id: 1,
            text: "driver_version".into(),
        },
        fmt::Event::Str {
            id: 2,
            text: "580.159.04".into(),
        },
        fmt::Event::Fact(fmt::Fact {
            ts: 5,
            device: fmt::FACT_HOST,
            key: 1,
            value: 2,
        }),
        fmt::Event::GpuSample(fmt::GpuSample {
            ts: 10,
            device: 0,
            sm_clock_mhz: 1200,
            clock_reasons: fmt::CLOCK_REASON_SW_POWER_CAP,
            ..Default::default()
        }),
        fmt::Event::GpuProcess(fmt::GpuProcess {
            ts: 10,
            device: 0,
            pid: 77,
            sm_pct: 40,
            flags: fmt::GPU_PROC_LISTED,
            ..Default::default()
        }),
        fmt::Event::GpuEvent(fmt::GpuEvent {
            ts: 11,
            device: 0,
            kind: fmt::GPU_EVENT_XID,
            data: 79,
        }),
    ];
    let bytes = encode(&meta, &events, 1, false);
    let path = Path::new("env.gtrace");
    let (out, _) = streamed(path, &bytes, DEFAULT_MAX_PENDING);
    assert_eq!(out, legacy(path, &bytes));
    let lines: Vec<Value> = out
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[0]["type"], "fact");
    assert_eq!(lines[0]["value"], "580.159.04");
    assert!(lines[0].get("device").is_none());
    assert_eq!(lines[1]["type"], "gpu_sample");
    assert_eq!(lines[1]["sm_clock_mhz"], 1200);
    assert_eq!(
        lines[1]["clock_reasons"],
        serde_json::json!(["sw_power_cap"])
    );
    assert!(lines[1].get("power_mw").is_none());
    assert_eq!(lines[2]["pid"], 77);
    assert_eq!(lines[2]["self"], false);
    assert_eq!(lines[3]["xid"], 79);
}

/// Each host sample gets its line; the streamed dump and the previous one agree, also on
/// the order of the process samples of one tree pass (one timestamp).
#[test]
fn every_host_sample_gets_one_line() {
    let meta = fmt::Meta {
        pid: 10,
        ..Default::default()
    };
    let events = vec![
        fmt::Event::Str {
            id: 1,
            text: "pt_data_worker".into(),
        },
        fmt::Event::CpuLimits(fmt::CpuLimits {
            ts: 1,
            online_cpus: 8,
            affinity_cpus: 4,
            thread_period_us: 3000,
            tree_period_us: 100_000,
            ..Default::default()
        }),
        fmt::Event::ThreadCpu(fmt::ThreadCpu {
            ts: 2,
            tid: 10,
            cpu_ns: 5,
            wait_ns: 6,
            slices: 7,
            state: b'R',
        }),
        fmt::Event::ProcSample(fmt::ProcSample {
            ts: 3,
            pid: 12,
            ppid: 10,
            flags: fmt::PROC_FLAG_THREAD | fmt::PROC_FLAG_NO_IO,
            ..Default::default()
        }),
        fmt::Event::ProcSample(fmt::ProcSample {
            ts: 3,
            pid: 11,
            ppid: 10,
            comm: 1,
            state: b'D',
            threads: 1,
            cpu_ns: 9,
            read_bytes: 4096,
            ..Default::default()
        }),
        fmt::Event::MachineSample(fmt::MachineSample {
            ts: 4,
            busy_ns: 100,
            flags: fmt::MACHINE_FLAG_PSI,
            psi_io_some_us: 3,
            ..Default::default()
        }),
    ];
    let bytes = encode(&meta, &events, 1, false);
    let path = Path::new("host.gtrace");
    let (out, _) = streamed(path, &bytes, DEFAULT_MAX_PENDING);
    assert_eq!(out, legacy(path, &bytes));
    let v: Vec<Value> = out
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    let ty: Vec<_> = v.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        ty,
        [
            "cpu_limits",
            "thread_cpu",
            "proc_sample",
            "proc_sample",
            "machine_sample"
        ]
    );
    assert_eq!(v[0]["cpus_available"], 4.0);
    assert_eq!(v[1]["state"], "R");
    // Same timestamp: by pid, as the analysis sorts them.
    assert_eq!(v[2]["sample_pid"], 11);
    assert_eq!(v[2]["comm"], "pt_data_worker");
    assert_eq!(v[2]["role"], "child");
    assert_eq!(v[2]["read_bytes"], 4096);
    assert_eq!(v[3]["role"], "thread");
    assert_eq!(v[3]["tid"], 12);
    assert!(v[3].get("rchar").is_none());
    assert!(v[3]["state"].is_null());
    assert_eq!(v[4]["psi_io_some_us"], 3);
    assert!(v[4].get("cgroup_usage_us").is_none());
}

/// A GPU counter sample gets one line, its percentages in percent and the metrics the
/// GPU did not give left out.
#[test]
fn a_counter_sample_gets_one_line() {
    let meta = fmt::Meta::default();
    let events = vec![fmt::Event::CounterSample(fmt::CounterSample {
        start: 1_000,
        end: 1_001_000,
        device: 0,
        sm_active: 9_871,
        dram: 9_250,
        tensor_active: 0,
        pcie_read_bytes: 4096,
        ..Default::default()
    })];
    let bytes = encode(&meta, &events, 1, false);
    let (out, _) = streamed(Path::new("pm.gtrace"), &bytes, DEFAULT_MAX_PENDING);
    let lines: Vec<Value> = out
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{}", String::from_utf8_lossy(&out));
    let l = &lines[0];
    assert_eq!(l["type"], "counter_sample");
    assert_eq!(
        (l["ts_ns"].as_u64(), l["dur_ns"].as_u64()),
        (Some(1_000), Some(1_000_000))
    );
    assert_eq!(l["sm_active_pct"], 98.71);
    assert_eq!(l["dram_pct"], 92.5);
    assert_eq!(l["tensor_active_pct"], 0.0);
    assert_eq!(l["pcie_read_bytes"], 4096);
    assert!(l.get("occupancy_pct").is_none() && l.get("nvlink_rx_bytes").is_none());
}

#[test]
fn streamed_summary_is_the_summary_of_the_loaded_trace() {
    use gputrace_analyzer::export::summary::summarize as streamed_summary;
    use gputrace_analyzer::model::trace::union_len;
    use gputrace_analyzer::report::summary::summarize;
    let path = PathBuf::from("random.gtrace");
    for seed in 1..=8u64 {
        let window = seed % 3 == 0;
        let (meta, ev) = random_events(seed, 2_000, window);
        let ev = if seed % 2 == 0 {
            shuffle_blocks(ev, seed)
        } else {
            ev
        };
        let bytes = encode(&meta, &ev, seed, seed % 4 < 2);
        let t = Trace::from_bytes(&path, &bytes).unwrap();
        let want = summarize(&t);
        let got = streamed_summary(&EventStream::from_bytes(&path, &bytes).unwrap()).unwrap();
        assert_eq!(
            serde_json::to_value(&got).unwrap(),
            serde_json::to_value(&want).unwrap(),
            "seed {seed}"
        );
        assert!(want.devices.iter().any(|d| d.kernels > 0), "seed {seed}");
        if window {
            assert!(want.window.is_some(), "seed {seed}");
            assert!(want.incomplete > 0, "seed {seed}: {want:?}");
        }
        // Busy time, summed as the work comes, is the union of every interval.
        for d in &want.devices {
            let mut iv: Vec<(u64, u64)> = t
                .kernels
                .iter()
                .filter(|k| k.device == d.device)
                .map(|k| (k.start, k.end))
                .chain(
                    t.memcpys
                        .iter()
                        .filter(|m| m.device == d.device)
                        .map(|m| (m.start, m.end)),
                )
                .chain(
                    t.memsets
                        .iter()
                        .filter(|m| m.device == d.device)
                        .map(|m| (m.start, m.end)),
                )
                .collect();
            assert_eq!(
                d.busy_ns,
                union_len(&mut iv),
                "seed {seed} device {}",
                d.device
            );
        }
    }
}
