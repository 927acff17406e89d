//! The analyzer never panics on corrupt input, and says what it could not use.

mod common;

use common::*;
use gputrace_analyzer::report::{analyze, render_text, FindingId};
use gputrace_analyzer::Trace;
use gputrace_format::{self as fmt, Event, Meta};

fn full(t: Trace) -> gputrace_analyzer::Report {
    let r = analyze(&[t]);
    let _ = render_text(&r);
    let _ = serde_json::to_string(&r).expect("report serialises");
    r
}

#[test]
fn empty_and_metadata_only_traces() {
    let r = full(Trace::from_events(Meta::default(), Vec::new()));
    assert_eq!(r.verdict, "No GPU activity recorded");
    assert!(r.findings.is_empty());
    // Strings, a device, clocks and states but no work.
    let mut b = B::new();
    b.ev.push(Event::Clock {
        cupti_ns: 1,
        mono_ns: 2,
        real_ns: 3,
    });
    b.ev.push(Event::State {
        ts: T0,
        state: fmt::CollectorState::Blind as u8,
        reason: 999,
    });
    full(b.build());
    // Only host calls.
    let mut b = B::new();
    b.api(TID, T0, 10, LAUNCH, "cudaLaunchKernel", 0, 0);
    b.sync(T0 + 100, T0 + 200);
    full(b.build());
    // Nothing but several empty ranks.
    let r = analyze(&[
        Trace::from_events(Meta::default(), Vec::new()),
        Trace::from_events(Meta::default(), Vec::new()),
    ]);
    let _ = render_text(&r);
}

#[test]
fn kernels_ending_before_they_start() {
    let mut b = B::new();
    for i in 0..100u64 {
        let s = T0 + i * MS;
        b.ev.push(Event::Kernel(fmt::Kernel {
            start: s,
            end: s - 500 * US,
            name: 999_999,
            ..Default::default()
        }));
        b.kernel(s + 10 * US, 200 * US, "ok");
    }
    let r = full(b.build());
    let p = &r.processes[0];
    assert!(
        p.notes.iter().any(|n| n.contains("impossible timestamps")),
        "{:?}",
        p.notes
    );
    assert!(r.findings.iter().any(|f| f.id == FindingId::EnvBadRecords));
}

#[test]
fn missing_device_records() {
    let mut b = B::bare();
    b.alloc(T0, GIB);
    let mut gpu = T0 + S;
    for i in 0..200u64 {
        b.launch(
            T0 + S - MS + i * 10 * US,
            5 * US,
            gpu,
            MS,
            STEP_KERNELS[(i % 4) as usize],
            BIG,
        );
        gpu += MS + US;
    }
    let r = full(b.build());
    let p = &r.processes[0];
    assert!(p.sm_fill_pct.is_none());
    assert!(p.notes.iter().any(|n| n.contains("device record")));
    assert!(!r.findings.iter().any(|f| f.id == FindingId::SmallGrid));
}

#[test]
fn absurd_ids_and_values() {
    let mut b = B::new();
    for i in 0..300u64 {
        let s = T0 + i * 100 * US;
        b.ev.push(Event::Kernel(fmt::Kernel {
            start: s,
            end: s + 50 * US,
            device: if i % 3 == 0 { u32::MAX } else { i as u32 % 200 },
            stream: u32::MAX,
            corr: u32::MAX - (i as u32 % 2),
            name: u32::MAX,
            grid: [u32::MAX, u32::MAX, u32::MAX],
            block: [0, u32::MAX, 0],
            static_smem: u32::MAX,
            dynamic_smem: u32::MAX,
            registers: u32::MAX,
            graph_id: u32::MAX,
            graph_node_id: u64::MAX - 1,
        }));
        b.ev.push(Event::Api(fmt::Api {
            start: s,
            end: u64::MAX,
            tid: u32::MAX,
            corr: u32::MAX,
            domain: 77,
            cbid: u32::MAX,
            name: u32::MAX,
            bytes: u64::MAX,
            arg: u32::MAX,
            result: u32::MAX,
            ptr: u64::MAX - 1,
        }));
        b.ev.push(Event::Memcpy(fmt::Memcpy {
            start: s,
            end: s + 1,
            device: 5,
            bytes: u64::MAX,
            copy_kind: 255,
            src_kind: 255,
            dst_kind: 255,
            flags: 255,
            ..Default::default()
        }));
        b.ev.push(Event::Memory(fmt::Memory {
            ts: s,
            device: 5,
            bytes: u64::MAX,
            op: if i % 2 == 0 { fmt::MEMORY_OP_FREE } else { 7 },
            ..Default::default()
        }));
        b.ev.push(Event::Sync(fmt::Sync {
            start: s,
            end: 0,
            device: u32::MAX,
            stream: u32::MAX,
            corr: 0,
            kind: 200,
        }));
        b.ev.push(Event::State {
            ts: s,
            state: (i % 5) as u8,
            reason: u32::MAX,
        });
        b.ev.push(Event::Dropped {
            ts: s,
            source: 200,
            count: u64::MAX / 1000,
        });
    }
    b.ev.push(Event::Device(fmt::Device {
        id: u32::MAX,
        sm_count: u32::MAX,
        max_blocks_per_sm: 1,
        max_warps_per_sm: 1,
        max_regs_per_sm: 1,
        max_smem_per_sm: 1,
        global_memory: 1,
        ..Default::default()
    }));
    // Far-away timestamps: zero, and the end of time.
    b.kernel(0, 10, "zero");
    b.kernel(u64::MAX - 5, 100, "end_of_time");
    b.ev.push(Event::Kernel(fmt::Kernel {
        start: u64::MAX,
        end: u64::MAX,
        ..Default::default()
    }));
    let r = full(b.build());
    assert!(r.processes[0].devices.len() <= 64);
}

#[test]
fn more_devices_than_analysed() {
    let mut b = B::new();
    for d in 0..100u32 {
        b.device = d;
        b.kernel(T0 + d as u64 * US, US, "k");
    }
    let r = full(b.build());
    assert_eq!(r.processes[0].devices.len(), 64);
    assert!(r.processes[0]
        .notes
        .iter()
        .any(|n| n.contains("only the 64 busiest")));
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn ts(&mut self) -> u64 {
        match self.below(20) {
            0 => 0,
            1 => u64::MAX - self.below(1000),
            2 => self.next(),
            _ => T0 + self.below(50 * MS),
        }
    }
}

fn random_event(r: &mut Rng) -> Event {
    let ts = r.ts();
    let end = match r.below(10) {
        0 => ts.wrapping_sub(r.below(MS)),
        1 => r.next(),
        _ => ts.saturating_add(r.below(2 * MS)),
    };
    let small = |r: &mut Rng, n: u64| r.below(n) as u32;
    match r.below(12) {
        0..=3 => Event::Kernel(fmt::Kernel {
            start: ts,
            end,
            device: small(r, 3),
            stream: small(r, 4),
            corr: small(r, 400),
            name: small(r, 12),
            grid: [small(r, 5000), small(r, 3), small(r, 2)],
            block: [small(r, 1025), 1, 1],
            static_smem: small(r, 50_000),
            dynamic_smem: small(r, 250_000),
            registers: small(r, 256),
            graph_id: small(r, 2),
            graph_node_id: small(r, 3) as u64,
        }),
        4..=6 => Event::Api(fmt::Api {
            start: ts,
            end,
            tid: small(r, 3),
            corr: small(r, 400),
            domain: small(r, 3) as u8,
            cbid: [211, 41, 31, 131, 165, 20, 22, 147, 311, 307, 9999][r.below(11) as usize],
            name: small(r, 12),
            bytes: r.below(1 << 30),
            arg: small(r, 5),
            result: [0, 0, 0, 2, 700][r.below(5) as usize],
            ptr: [fmt::ENV_NA64, 0x7e00_0000_0000 + small(r, 8) as u64 * 512][r.below(2) as usize],
        }),
        7 => Event::Memcpy(fmt::Memcpy {
            start: ts,
            end,
            device: small(r, 3),
            stream: small(r, 4),
            corr: small(r, 400),
            bytes: r.below(1 << 28),
            copy_kind: small(r, 12) as u8,
            src_kind: small(r, 9) as u8,
            dst_kind: small(r, 9) as u8,
            flags: small(r, 2) as u8,
        }),
        8 => Event::Sync(fmt::Sync {
            start: ts,
            end,
            device: small(r, 3),
            stream: small(r, 4),
            corr: small(r, 400),
            kind: small(r, 6) as u8,
        }),
        9 => Event::Memory(fmt::Memory {
            ts,
            device: small(r, 3),
            corr: small(r, 400),
            address: r.next(),
            bytes: r.below(1 << 34),
            op: small(r, 4) as u8,
            mem_kind: small(r, 8) as u8,
        }),
        10 => Event::State {
            ts,
            state: small(r, 6) as u8,
            reason: small(r, 14),
        },
        _ => Event::Memset(fmt::Memset {
            start: ts,
            end,
            device: small(r, 3),
            stream: small(r, 4),
            corr: small(r, 400),
            bytes: r.below(1 << 20),
            value: 0,
            mem_kind: 3,
            flags: 0,
        }),
    }
}

#[test]
fn random_traces_never_panic() {
    let mut r = Rng(0x9E37_79B9_7F4A_7C15);
    for round in 0..150 {
        let mut b = if round % 5 == 0 { B::bare() } else { B::new() };
        for i in 0..12 {
            b.s(&format!("kernel_{i}"));
        }
        b.s(ALLREDUCE);
        let n = r.below(400) as usize;
        for _ in 0..n {
            let e = random_event(&mut r);
            b.ev.push(e);
        }
        let t = b.build();
        full(t.clone());
        if round % 10 == 0 {
            let r2 = analyze(&[t.clone(), t]);
            let _ = render_text(&r2);
        }
    }
}

#[test]
fn random_bytes_and_truncated_files() {
    let t = data_starved(5);
    let bytes = encode(t.events(), &t.meta);
    let mut r = Rng(42);
    for cut in [
        0usize,
        10,
        16,
        40,
        bytes.len() / 3,
        bytes.len() / 2,
        bytes.len() - 1,
    ] {
        if let Ok(t) = Trace::from_bytes(std::path::Path::new("cut.gtrace"), &bytes[..cut]) {
            full(t);
        }
    }
    for _ in 0..40 {
        let mut b = bytes.clone();
        for _ in 0..8 {
            let i = r.below(b.len() as u64) as usize;
            b[i] = r.next() as u8;
        }
        if let Ok(t) = Trace::from_bytes(std::path::Path::new("flipped.gtrace"), &b) {
            full(t);
        }
    }
}

/// A trace file's bytes, in small chunks (many chunk boundaries to cut or decode).
pub fn encode(events: &[Event], meta: &Meta) -> Vec<u8> {
    encode_chunks(events, meta, 4096)
}

#[test]
fn a_trace_decoded_on_several_threads_is_the_same_trace() {
    // Many small chunks: strings, devices and states between the records.
    let t = data_starved(300);
    let bytes = encode(t.events(), &t.meta);
    assert!(
        bytes.len() > 6 * 4096,
        "{} bytes: a few chunks",
        bytes.len()
    );
    let p = std::path::Path::new("par.gtrace");
    let one = |b: &[u8]| Trace::from_bytes_with(p, b, 1).map(|t| format!("{t:?}"));
    let mut r = Rng(7);
    for cut in [bytes.len(), bytes.len() / 2, bytes.len() - 3] {
        let want = one(&bytes[..cut]).unwrap();
        for w in [2, 4] {
            let got = Trace::from_bytes_with(p, &bytes[..cut], w).map(|t| format!("{t:?}"));
            assert_eq!(got.unwrap(), want, "cut at {cut}, {w} workers");
        }
    }
    for _ in 0..20 {
        let mut b = bytes.clone();
        let i = r.below(b.len() as u64) as usize;
        b[i] ^= 1 + r.next() as u8 % 255;
        let want = one(&b).map_err(|e| e.to_string());
        let got = Trace::from_bytes_with(p, &b, 3).map(|t| format!("{t:?}"));
        assert_eq!(got.map_err(|e| e.to_string()), want, "byte {i} changed");
    }
}

/// A random event of the sampled kinds: host samples, environment, Python stacks and
/// call sites, hardware counters. Ids (threads, stacks, strings, devices) are drawn
/// from small ranges, so some refer to what exists and some to nothing.
fn random_sampled_event(r: &mut Rng) -> Event {
    let ts = r.ts();
    let small = |r: &mut Rng, n: u64| r.below(n) as u32;
    let big = |r: &mut Rng| match r.below(4) {
        0 => u64::MAX - r.below(10),
        1 => 0,
        _ => r.below(1 << 40),
    };
    match r.below(13) {
        0 | 1 => Event::ThreadCpu(fmt::ThreadCpu {
            ts,
            tid: small(r, 3),
            cpu_ns: big(r),
            wait_ns: big(r),
            slices: big(r),
            state: [b'R', b'S', b'D', b'Z', 0, 255][r.below(6) as usize],
        }),
        2 => Event::ProcSample(fmt::ProcSample {
            ts,
            pid: small(r, 5),
            ppid: small(r, 5),
            comm: small(r, 14),
            flags: small(r, 256) as u8,
            state: [b'R', b'S', b'D', 0][r.below(4) as usize],
            threads: small(r, 100),
            cpu_ns: big(r),
            rchar: big(r),
            read_bytes: big(r),
            write_bytes: big(r),
        }),
        3 => Event::MachineSample(fmt::MachineSample {
            ts,
            busy_ns: big(r),
            idle_ns: big(r),
            iowait_ns: big(r),
            steal_ns: big(r),
            flags: small(r, 256) as u8,
            psi_cpu_some_us: big(r),
            psi_io_some_us: big(r),
            psi_io_full_us: big(r),
            cgroup_usage_us: big(r),
            cgroup_throttled_us: big(r),
        }),
        4 => Event::CpuLimits(fmt::CpuLimits {
            ts,
            online_cpus: small(r, 300),
            affinity_cpus: small(r, 300),
            quota_us: big(r),
            period_us: big(r),
            memory_limit: big(r),
            thread_period_us: small(r, 1 << 20),
            tree_period_us: small(r, 1 << 20),
        }),
        5 => Event::Fact(fmt::Fact {
            ts,
            device: [0, 1, fmt::FACT_HOST][r.below(3) as usize],
            key: small(r, 24),
            value: small(r, 24),
        }),
        6 => Event::GpuSample(fmt::GpuSample {
            ts,
            device: small(r, 3),
            sm_clock_mhz: small(r, 3000),
            sm_clock_max_mhz: small(r, 3000),
            mem_clock_mhz: small(r, 4000),
            mem_clock_max_mhz: small(r, 4000),
            clock_reasons: big(r),
            power_mw: r.next() as u32,
            power_limit_mw: r.next() as u32,
            temperature_c: small(r, 200),
            gpu_util_pct: small(r, 150),
            mem_util_pct: small(r, 150),
            mem_used: big(r),
            mem_total: big(r),
            pcie_gen: small(r, 8),
            pcie_gen_max: small(r, 8),
            pcie_width: small(r, 40),
            pcie_width_max: small(r, 40),
            pcie_tx_kbs: r.next() as u32,
            pcie_rx_kbs: r.next() as u32,
        }),
        7 => Event::GpuProcess(fmt::GpuProcess {
            ts,
            device: small(r, 3),
            pid: small(r, 5),
            name: small(r, 14),
            used_memory: big(r),
            sm_pct: small(r, 150),
            mem_pct: small(r, 150),
            flags: small(r, 256) as u8,
        }),
        8 => Event::GpuEvent(fmt::GpuEvent {
            ts,
            device: small(r, 3),
            kind: small(r, 8) as u8,
            data: big(r),
        }),
        9 => Event::PyStack(fmt::PyStack {
            id: small(r, 6),
            frames: (0..r.below(20))
                .map(|_| fmt::PyFrame {
                    file: small(r, 14),
                    function: small(r, 14),
                    line: small(r, 2000),
                })
                .collect(),
        }),
        10 => Event::CallSite(fmt::CallSite {
            ts,
            tid: small(r, 3),
            stack: small(r, 8),
        }),
        11 => Event::PySample(fmt::PySample {
            ts,
            tid: small(r, 3),
            stack: small(r, 8),
        }),
        _ => {
            let end = match r.below(5) {
                0 => ts.wrapping_sub(r.below(MS)),
                _ => ts.saturating_add(r.below(2 * MS)),
            };
            let pct = |r: &mut Rng| match r.below(5) {
                0 => fmt::ENV_NA,
                1 => r.next() as u32,
                _ => small(r, 10_001),
            };
            Event::CounterSample(fmt::CounterSample {
                start: ts,
                end,
                device: small(r, 3),
                sm_active: pct(r),
                occupancy: pct(r),
                tensor_active: pct(r),
                dram: pct(r),
                pcie_read_bytes: big(r),
                pcie_write_bytes: big(r),
                nvlink_rx_bytes: big(r),
                nvlink_tx_bytes: big(r),
                fp64_active: pct(r),
                fp32_active: pct(r),
                fp16_active: pct(r),
                integer_active: pct(r),
                tensor_dfma: pct(r),
                tensor_hmma: pct(r),
                tensor_imma: pct(r),
                source: small(r, 3) as u8,
                instance: if r.below(4) == 0 {
                    small(r, 8)
                } else {
                    fmt::ENV_NA
                },
            })
        }
    }
}

/// A trace of random GPU work and random sampled data (strings for both); one in three
/// starts from a well-formed data-starved loop, so the samples meet real steps and gaps.
fn random_sampled_trace(r: &mut Rng, round: usize) -> B {
    let mut b = match round % 5 {
        0 => B::bare(),
        1 | 3 => data_starved(1 + r.below(30) as usize),
        _ => B::new(),
    };
    for i in 0..12 {
        b.s(&format!("kernel_{i}"));
    }
    b.s("/usr/lib/python3.12/threading.py");
    b.s("train.py");
    // Fact keys and values the analysis parses.
    for text in [
        "python_call_sites",
        "pm_sampling",
        "CPython 3.12.3, 99999999999 frames",
        "CPython 3.12.3, 8 frames",
        ", frames",
        "none: not started",
        "refused: not permitted",
    ] {
        b.s(text);
    }
    let work = r.below(300) as usize;
    let sampled = r.below(400) as usize;
    for _ in 0..work {
        let e = random_event(r);
        b.ev.push(e);
    }
    for _ in 0..sampled {
        let e = random_sampled_event(r);
        b.ev.push(e);
    }
    b
}

#[test]
fn random_sampled_data_never_panics() {
    let mut r = Rng(0xD1B5_4A32_D192_ED03);
    for round in 0..150 {
        let t = random_sampled_trace(&mut r, round).build();
        full(t.clone());
        if round % 10 == 0 {
            let r2 = analyze(&[t.clone(), t]);
            let _ = render_text(&r2);
        }
    }
}

#[test]
fn random_sampled_data_exports_or_says_why() {
    // Through the command line: every report and export format, on random traces with
    // a random environment file beside them.
    let dir = std::env::temp_dir().join(format!("gputrace-robust-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut r = Rng(0x94D0_49BB_1331_11EB);
    const ROUNDS: usize = 8;
    let mut ok: std::collections::BTreeMap<String, usize> = Default::default();
    for round in 0..ROUNDS {
        let run = dir.join(format!("run{round}"));
        std::fs::create_dir_all(&run).unwrap();
        let t = random_sampled_trace(&mut r, round + 1);
        let mut meta = t.meta.clone();
        meta.host = "fuzz".into();
        std::fs::write(
            run.join("gputrace-fuzz-1.gtrace"),
            encode(t.events(), &meta),
        )
        .unwrap();
        let e = random_sampled_trace(&mut r, round + 1);
        let mut env_meta = e.meta.clone();
        env_meta.host = "fuzz".into();
        env_meta.kind = fmt::META_KIND_ENVIRONMENT.into();
        std::fs::write(
            run.join("gputrace-env-fuzz-2.gtrace"),
            encode(e.events(), &env_meta),
        )
        .unwrap();
        let run_s = run.to_string_lossy().into_owned();
        let mut cmds: Vec<Vec<String>> = vec![
            vec!["report".into(), run_s.clone()],
            vec!["report".into(), "--json".into(), run_s.clone()],
            vec!["summary".into(), run_s.clone()],
        ];
        for f in ["gputrace-fuzz-1.gtrace", "gputrace-env-fuzz-2.gtrace"] {
            cmds.push(vec![
                "dump".into(),
                run.join(f).to_string_lossy().into_owned(),
            ]);
        }
        for f in ["perfetto", "chrome", "parquet"] {
            let out = dir.join(format!("out{round}-{f}"));
            cmds.push(vec![
                "export".into(),
                "--format".into(),
                f.into(),
                "-o".into(),
                out.to_string_lossy().into_owned(),
                run_s.clone(),
            ]);
        }
        for c in cmds {
            let o = std::process::Command::new(env!("CARGO_BIN_EXE_gputrace"))
                .args(&c)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                matches!(o.status.code(), Some(0 | 1)),
                "round {round} {c:?}: {:?}\n{err}",
                o.status
            );
            assert!(!err.contains("panicked"), "round {round} {c:?}: {err}");
            if o.status.success() {
                let label = match (c[0].as_str(), c[1].as_str()) {
                    ("export", _) => format!("export {}", c[2]),
                    ("report", "--json") => "report --json".to_string(),
                    (cmd, _) => cmd.to_string(),
                };
                *ok.entry(label).or_insert(0) += 1;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    // The commands do their work on most of these traces (a command that always says
    // why not would pass the loop above): every kind succeeded at least half the time.
    eprintln!("successes by command: {ok:?}");
    for (cmd, n) in &ok {
        assert!(*n * 2 >= ROUNDS, "{cmd}: {n} of {ROUNDS}");
    }
    assert_eq!(ok.len(), 7, "{ok:?}");
}
