//! Synthetic traces with known answers: a small builder over format events, and one
//! scenario per finding. Times are in nanoseconds on a realistic epoch base.
#![allow(dead_code)]

use gputrace_analyzer::report::Finding;
use gputrace_analyzer::{Report, Trace};
use gputrace_format::{self as fmt, Event, Meta};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const US: u64 = 1_000;
pub const MS: u64 = 1_000_000;
pub const S: u64 = 1_000_000_000;
/// Trace start (CUPTI time is CLOCK_REALTIME on Linux).
pub const T0: u64 = 1_796_225_776_000_000_000;
pub const TID: u32 = 4242;
pub const GIB: u64 = 1 << 30;

pub const LAUNCH: u32 = 211;
pub const MEMCPY_ASYNC: u32 = 41;
pub const STREAM_SYNC: u32 = 131;
pub const GRAPH_LAUNCH: u32 = 311;
pub const MALLOC: u32 = 20;

/// A kernel's shape.
#[derive(Clone, Copy)]
pub struct Shape {
    pub grid: u32,
    pub block: u32,
    pub regs: u32,
}

/// Plenty of blocks: fills an H200.
pub const BIG: Shape = Shape {
    grid: 4096,
    block: 256,
    regs: 32,
};

pub struct B {
    pub ev: Vec<Event>,
    corr: u32,
    names: HashMap<String, u32>,
    next_str: u32,
    pub meta: Meta,
    pub stream: u32,
    pub device: u32,
}

impl Default for B {
    fn default() -> Self {
        Self::new()
    }
}

impl B {
    /// A process with one H200.
    pub fn new() -> B {
        let mut b = B::bare();
        let name = b.s("NVIDIA H200");
        b.ev.push(Event::Device(h200(0, name)));
        b
    }

    /// No device record.
    pub fn bare() -> B {
        B {
            ev: Vec::new(),
            corr: 100,
            names: HashMap::new(),
            next_str: 1,
            meta: Meta {
                pid: 1000,
                host: "node0".into(),
                cmdline: vec!["python".into(), "train.py".into()],
                ..Default::default()
            },
            stream: 7,
            device: 0,
        }
    }

    pub fn s(&mut self, text: &str) -> u32 {
        if let Some(&id) = self.names.get(text) {
            return id;
        }
        let id = self.next_str;
        self.next_str += 1;
        self.names.insert(text.to_string(), id);
        self.ev.push(Event::Str {
            id,
            text: text.to_string(),
        });
        id
    }

    /// The id of a string already interned (0 if it is not).
    pub fn s_get(&self, text: &str) -> u32 {
        self.names.get(text).copied().unwrap_or(0)
    }

    pub fn corr(&mut self) -> u32 {
        self.corr += 1;
        self.corr
    }

    pub fn kernel_shape(&mut self, start: u64, dur: u64, name: &str, corr: u32, sh: Shape) {
        let n = self.s(name);
        self.ev.push(Event::Kernel(fmt::Kernel {
            start,
            end: start.saturating_add(dur),
            device: self.device,
            stream: self.stream,
            corr,
            name: n,
            grid: [sh.grid, 1, 1],
            block: [sh.block, 1, 1],
            static_smem: 0,
            dynamic_smem: 0,
            registers: sh.regs,
            graph_id: 0,
            graph_node_id: fmt::ENV_NA64,
        }));
    }

    /// A kernel with no recorded launch call.
    pub fn kernel(&mut self, start: u64, dur: u64, name: &str) {
        let c = self.corr();
        self.kernel_shape(start, dur, name, c, BIG);
    }

    #[allow(clippy::too_many_arguments)]
    pub fn api(
        &mut self,
        tid: u32,
        start: u64,
        dur: u64,
        cbid: u32,
        name: &str,
        bytes: u64,
        arg: u32,
    ) -> u32 {
        let c = self.corr();
        let n = self.s(name);
        self.ev.push(Event::Api(fmt::Api {
            start,
            end: start.saturating_add(dur),
            tid,
            corr: c,
            domain: fmt::DOMAIN_RUNTIME,
            cbid,
            name: n,
            bytes,
            arg,
            result: 0,
            ptr: fmt::ENV_NA64,
        }));
        c
    }

    /// A launch call at `at` lasting `call`, and its kernel at `start`.
    /// The step's kernels (`STEP_KERNELS`, `BIG` grids), launched 10 us apart from `at`,
    /// each running `dur` as soon as the one before ends; the last one's end.
    pub fn step_kernels(&mut self, at: u64, dur: u64) -> u64 {
        let mut prev_end = 0;
        for (j, name) in STEP_KERNELS.iter().enumerate() {
            let at = at + j as u64 * 10 * US;
            let start = (at + 10 * US).max(prev_end + US);
            self.launch(at, 5 * US, start, dur, name, BIG);
            prev_end = start + dur;
        }
        prev_end
    }

    pub fn launch(&mut self, at: u64, call: u64, start: u64, dur: u64, name: &str, sh: Shape) {
        let c = self.api(TID, at, call, LAUNCH, "cudaLaunchKernel", 0, 0);
        self.kernel_shape(start, dur, name, c, sh);
    }

    #[allow(clippy::too_many_arguments)]
    pub fn memcpy(
        &mut self,
        start: u64,
        dur: u64,
        bytes: u64,
        kind: fmt::CopyKind,
        src: fmt::MemKind,
        dst: fmt::MemKind,
        is_async: bool,
        corr: u32,
    ) {
        self.ev.push(Event::Memcpy(fmt::Memcpy {
            start,
            end: start.saturating_add(dur),
            device: self.device,
            stream: self.stream,
            corr,
            bytes,
            copy_kind: kind as u8,
            src_kind: src as u8,
            dst_kind: dst as u8,
            flags: if is_async { fmt::MEMCPY_FLAG_ASYNC } else { 0 },
        }));
    }

    /// A stream sync call and its CUPTI sync record.
    pub fn sync(&mut self, start: u64, end: u64) {
        let c = self.api(
            TID,
            start,
            end - start,
            STREAM_SYNC,
            "cudaStreamSynchronize",
            0,
            0,
        );
        self.ev.push(Event::Sync(fmt::Sync {
            start,
            end,
            device: self.device,
            stream: self.stream,
            corr: c,
            kind: fmt::SyncKind::StreamSynchronize as u8,
        }));
    }

    /// A cudaMalloc of `bytes` at `ts` (call and memory record).
    pub fn alloc(&mut self, ts: u64, bytes: u64) {
        let c = self.api(TID, ts, 50 * US, MALLOC, "cudaMalloc", bytes, 0);
        self.ev.push(Event::Memory(fmt::Memory {
            ts: ts + 40 * US,
            device: self.device,
            corr: c,
            address: 0x7f00_0000_0000 + ts % 1_000_000,
            bytes,
            op: fmt::MEMORY_OP_ALLOC,
            mem_kind: fmt::MemKind::Device as u8,
        }));
    }

    pub fn build(self) -> Trace {
        Trace::from_events(self.meta, self.ev)
    }

    pub fn events(&self) -> &[Event] {
        &self.ev
    }
}

pub fn h200(id: u32, name: u32) -> fmt::Device {
    fmt::Device {
        id,
        name,
        sm_count: 132,
        max_blocks_per_sm: 32,
        max_threads_per_sm: 2048,
        max_warps_per_sm: 64,
        global_memory: 141 * GIB,
        cc_major: 9,
        cc_minor: 0,
        max_regs_per_sm: 65536,
        max_smem_per_sm: 233472,
    }
}

/// Start-up common to every scenario: a cudaMalloc (the CUDA context), then two seconds
/// of imports with nothing on the GPU. Returns when the steps may begin.
pub fn startup(b: &mut B, mem: u64) -> u64 {
    b.alloc(T0, mem);
    T0 + 2 * S
}

pub const STEP_KERNELS: [&str; 4] = ["fwd_gemm", "fwd_relu", "bwd_gemm", "adam_step"];

/// Healthy: the host runs far ahead, kernels of 2.5 ms back to back, memory 85% used.
pub fn healthy(steps: usize) -> B {
    let mut b = B::new();
    let t = startup(&mut b, 120 * GIB);
    healthy_steps(&mut b, t, steps);
    b
}

/// `steps` healthy steps from `t` (the host far ahead, kernels of 2.5 ms back to back);
/// the end of the last kernel.
pub fn healthy_steps(b: &mut B, t: u64, steps: usize) -> u64 {
    let mut gpu = t + 100 * US;
    let mut host = t;
    for _ in 0..steps {
        for name in STEP_KERNELS {
            let start = gpu.max(host + 10 * US);
            b.launch(host, 5 * US, start, 2500 * US, name, BIG);
            gpu = start + 2500 * US + US;
            host += 50 * US;
        }
    }
    gpu
}

/// Data starvation: each step the host is quiet for 8 ms (loading data), then launches 4
/// kernels of 500 us at a 10 us cadence. Per step the GPU idles 6032 us, of which 6022 us
/// with no host call (data_starvation) and 10 us inside or between launches.
pub fn data_starved(steps: usize) -> B {
    let mut b = B::new();
    let mut h = startup(&mut b, 2 * GIB);
    for _ in 0..steps {
        b.step_kernels(h, 500 * US);
        h += 35 * US + 8 * MS;
    }
    b
}

/// `.item()` every step: a 4-byte DtoH copy then a stream sync; the host then spends
/// 200 us before the next step. Per step the GPU idles 214 us (implicit_sync).
pub fn item_every_step(steps: usize) -> B {
    let mut b = B::new();
    let mut h = startup(&mut b, 2 * GIB);
    for _ in 0..steps {
        let prev_end = b.step_kernels(h, 500 * US);
        let c = b.api(
            TID,
            h + 40 * US,
            5 * US,
            MEMCPY_ASYNC,
            "cudaMemcpyAsync",
            4,
            2,
        );
        let copy_start = prev_end + US;
        b.memcpy(
            copy_start,
            2 * US,
            4,
            fmt::CopyKind::DtoH,
            fmt::MemKind::Device,
            fmt::MemKind::Pageable,
            true,
            c,
        );
        let ret = copy_start + 2 * US + 4 * US;
        b.sync(h + 46 * US, ret);
        h = ret + 200 * US;
    }
    b
}

/// pin_memory without non_blocking: a pinned 16 MiB HtoD copy queued behind the previous
/// step, a stream sync, 100 us of host work, then 4 kernels of 200 us. Per step the GPU
/// idles 114 us (sync_memcpy).
pub fn pinned_blocking(steps: usize) -> B {
    let mut b = B::new();
    let mut h = startup(&mut b, 2 * GIB);
    let mut gpu_free = h;
    for _ in 0..steps {
        let c = b.api(
            TID,
            h,
            10 * US,
            MEMCPY_ASYNC,
            "cudaMemcpyAsync",
            16 << 20,
            1,
        );
        let cs = (h + 15 * US).max(gpu_free + US);
        let cd = 335 * US;
        b.memcpy(
            cs,
            cd,
            16 << 20,
            fmt::CopyKind::HtoD,
            fmt::MemKind::Pinned,
            fmt::MemKind::Device,
            true,
            c,
        );
        let ce = cs + cd;
        b.sync(h + 12 * US, ce + 4 * US);
        let k = ce + 4 * US + 100 * US;
        gpu_free = b.step_kernels(k, 200 * US);
        h = k + 40 * US;
    }
    b
}

/// Pageable copies: each step a 32 MiB pageable HtoD copy (0.4 ms of staging, then 3.2 ms
/// of DMA at ~10 GB/s), then 4 kernels of 300 us; 1 ms of host work before the next copy.
/// Per step the GPU idles 227 us inside the copy call (plus 15 us between the DMA's end
/// and the first kernel while the call returns), and the DMA takes 2.529 ms longer than
/// at the typical 50 GB/s (estimate).
pub fn pageable(steps: usize, pinned_reference: bool) -> B {
    let mut b = B::new();
    let mut h = startup(&mut b, 2 * GIB);
    if pinned_reference {
        // A pinned async copy in start-up: 64 MiB in 1.28 ms = 52.4 GB/s.
        let c = b.api(
            TID,
            h - S,
            10 * US,
            MEMCPY_ASYNC,
            "cudaMemcpyAsync",
            64 << 20,
            1,
        );
        b.memcpy(
            h - S + 20 * US,
            1280 * US,
            64 << 20,
            fmt::CopyKind::HtoD,
            fmt::MemKind::Pinned,
            fmt::MemKind::Device,
            true,
            c,
        );
    }
    let mut gpu_free = 0;
    for _ in 0..steps {
        let bytes = 32u64 << 20;
        let dma_start = (h + 400 * US).max(gpu_free + 227 * US);
        let call_end = dma_start + 3200 * US + 5 * US;
        let c = b.api(
            TID,
            h,
            call_end - h,
            MEMCPY_ASYNC,
            "cudaMemcpyAsync",
            bytes,
            1,
        );
        b.memcpy(
            dma_start,
            3200 * US,
            bytes,
            fmt::CopyKind::HtoD,
            fmt::MemKind::Pageable,
            fmt::MemKind::Device,
            true,
            c,
        );
        gpu_free = b.step_kernels(call_end, 300 * US);
        h = call_end + 40 * US + MS;
    }
    b
}

/// Launch-bound: 50 distinct tiny kernels per step (2 us each), launched every 8 us by
/// calls of 3 us; each kernel starts 2 us after its call returns. The GPU idles 6 of
/// every 8 us (launch_bound).
pub fn launch_bound(steps: usize) -> B {
    let mut b = B::new();
    let mut h = startup(&mut b, 2 * GIB);
    for _ in 0..steps {
        for j in 0..50 {
            let name = format!("elementwise_{j}");
            b.launch(h, 3 * US, h + 5 * US, 2 * US, &name, BIG);
            h += 8 * US;
        }
    }
    b
}

/// CUDA graphs of 100 tiny kernels (3 us, 2 us apart on the device), all launched far
/// ahead: the GPU idles 2 of every 5 us between queued kernels (kernel_fragmentation).
pub fn graphs(steps: usize) -> B {
    let mut b = B::new();
    let t = startup(&mut b, 2 * GIB);
    let mut gpu = t + 100 * US;
    for i in 0..steps as u64 {
        let at = t + i * 20 * US;
        let c = b.api(TID, at, 10 * US, GRAPH_LAUNCH, "cudaGraphLaunch", 0, 0);
        let mut start = gpu.max(at + 15 * US);
        for j in 0..100 {
            b.kernel_shape(start, 3 * US, &format!("graph_node_{j}"), c, BIG);
            start += 5 * US;
        }
        gpu = start - 5 * US + 3 * US + 2 * US;
    }
    b
}

/// Few-block kernels: 3 kernels of 5 ms per step with 4 blocks of 128 threads, the host
/// far ahead, `mem` bytes allocated.
pub fn small_grid(steps: usize, mem: u64) -> B {
    let mut b = B::new();
    let t = startup(&mut b, mem);
    let sh = Shape {
        grid: 4,
        block: 128,
        regs: 32,
    };
    let mut gpu = t + 100 * US;
    let mut host = t;
    for _ in 0..steps {
        for name in ["scan_a", "scan_b", "scan_c"] {
            let start = gpu.max(host + 10 * US);
            b.launch(host, 5 * US, start, 5 * MS, name, sh);
            gpu = start + 5 * MS + US;
            host += 50 * US;
        }
    }
    b
}

pub const ALLREDUCE: &str =
    "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LLP24ncclDevKernelArgsStorageILm4096EE";
pub const ALLGATHER: &str =
    "_Z39ncclDevKernel_AllGather_RING_LL_____P24ncclDevKernelArgsStorageILm4096EE";

/// Exposed communication: per step a 2 ms compute kernel, then a 1.5 ms all-reduce with
/// nothing alongside; a 0.5 ms all-gather overlapped by the compute. Exposed: 1.5 ms per step.
pub fn comm_exposed(steps: usize) -> B {
    let mut b = B::new();
    let t = startup(&mut b, 40 * GIB);
    let mut s = t + 100 * US;
    let mut host = t;
    for _ in 0..steps {
        b.stream = 7;
        b.launch(host, 5 * US, s, 2 * MS, "fwd_bwd", BIG);
        b.stream = 13;
        b.launch(
            host + 10 * US,
            5 * US,
            s + 500 * US,
            500 * US,
            ALLGATHER,
            BIG,
        );
        b.launch(
            host + 20 * US,
            5 * US,
            s + 2 * MS + US,
            1500 * US,
            ALLREDUCE,
            BIG,
        );
        b.stream = 7;
        s += 3500 * US + 2 * US;
        host += 100 * US;
    }
    b
}

/// Three ranks on three hosts: each step 5 ms of compute (7 ms on rank 2), then an
/// all-reduce that every rank enters 10 us after its compute and that ends 1 ms after the
/// last arrival; the next step's compute follows at once (the host is far ahead). Rank 1's
/// clock runs 7 ms ahead. Ranks 0 and 1 wait 2 ms per collective.
pub fn straggler_ranks(steps: usize) -> Vec<Trace> {
    let period = 7 * MS + 10 * US + MS + US;
    (0..3u32)
        .map(|r| {
            let mut b = B::new();
            b.meta.pid = 2000 + r;
            b.meta.host = format!("node{r}");
            b.meta.options = vec![("RANK".into(), r.to_string())];
            let skew = if r == 1 { 7 * MS } else { 0 };
            b.ev.push(Event::Clock {
                cupti_ns: T0 + skew,
                mono_ns: 1_000,
                real_ns: T0 + skew,
            });
            let t = startup(&mut b, 40 * GIB) + skew;
            let compute = if r == 2 { 7 * MS } else { 5 * MS };
            for k in 0..steps as u64 {
                let s = t + k * period;
                let host = t - MS + k * 20 * US;
                b.launch(host, 5 * US, s, compute, "fwd_bwd", BIG);
                let arrive = s + compute + 10 * US;
                let end = s + 7 * MS + 10 * US + MS;
                b.launch(host + 10 * US, 5 * US, arrive, end - arrive, ALLREDUCE, BIG);
            }
            b.build()
        })
        .collect()
}

/// Step `k` of the NCCL jobs, from `t`: compute (`compute` long, launched 1 ms ahead), then
/// an all-reduce on communicator 0xC0FFEE: the NCCL call of rank `who.0` of `who.1` (sequence
/// number k + 1) launching kernel `name`, which starts 10 us after the compute and ends 1 ms
/// after the slowest rank's (7 ms of compute) arrival. Steps are 8.011 ms apart.
pub fn nccl_step(b: &mut B, t: u64, k: u64, compute: u64, who: (u32, u32), name: &str) {
    let s = t + k * (7 * MS + 10 * US + MS + US);
    let host = t - MS + k * 20 * US;
    b.launch(host, 5 * US, s, compute, "fwd_bwd", BIG);
    let arrive = s + compute + 10 * US;
    let end = s + 7 * MS + 10 * US + MS;
    // The call that launches the kernel (the host is ahead of the GPU).
    b.ev.push(Event::Nccl(fmt::Nccl {
        start: host + 9 * US,
        end: host + 16 * US,
        tid: TID,
        op: fmt::NCCL_ALL_REDUCE,
        count: 1 << 20,
        bytes: 4 << 20,
        datatype: 7,
        redop: 0,
        peer_or_root: -1,
        comm_id: 0xC0FFEE,
        rank: who.0 as i32,
        nranks: who.1 as i32,
        seq: k + 1,
        ..Default::default()
    }));
    b.launch(host + 10 * US, 5 * US, arrive, end - arrive, name, BIG);
}

/// The straggler job as the symbol hooks see it: every all-reduce is an NCCL call (one
/// communicator, sequence numbers from 1, the rank in the call), no RANK setting, and rank
/// 2's kernels have another algorithm's name, so only the calls can match them.
pub fn straggler_ranks_with_nccl(steps: usize) -> Vec<Trace> {
    (0..3u32)
        .map(|r| {
            let mut b = B::new();
            b.meta.pid = 3000 + r;
            b.meta.host = format!("node{r}");
            let skew = if r == 1 { 7 * MS } else { 0 };
            b.ev.push(Event::Clock {
                cupti_ns: T0 + skew,
                mono_ns: 1_000,
                real_ns: T0 + skew,
            });
            let t = startup(&mut b, 40 * GIB) + skew;
            let compute = if r == 2 { 7 * MS } else { 5 * MS };
            let name = if r == 2 {
                "_Z39ncclDevKernel_AllReduce_Sum_f32_TREE_LLP24ncclDevKernelArgsStorageILm4096EE"
            } else {
                ALLREDUCE
            };
            for k in 0..steps as u64 {
                nccl_step(&mut b, t, k, compute, (r, 3), name);
            }
            b.build()
        })
        .collect()
}

/// A trace file's bytes: the events in chunks of about 8 KiB.
pub fn encode(events: &[Event], meta: &Meta) -> Vec<u8> {
    encode_chunks(events, meta, 8192)
}

/// A trace file's bytes: the events in chunks of about `chunk` encoded bytes.
pub fn encode_chunks(events: &[Event], meta: &Meta, chunk: usize) -> Vec<u8> {
    let mut w = fmt::ChunkWriter::new(Vec::new(), meta).unwrap();
    let mut enc = fmt::Encoder::new();
    for e in events {
        enc.push(e);
        if enc.len() > chunk {
            let (p, n) = enc.take();
            w.write_chunk(fmt::ChunkKind::Events, &p, n).unwrap();
        }
    }
    let (p, n) = enc.take();
    if n > 0 {
        w.write_chunk(fmt::ChunkKind::Events, &p, n).unwrap();
    }
    w.into_inner()
}

/// Writes the builder's trace to `dir/name`.
pub fn write(dir: &Path, name: &str, b: &B) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, encode(b.events(), &b.meta)).unwrap();
    p
}

/// Runs the `gputrace` command: (exit code, stdout, stderr).
pub fn gputrace(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(args)
        .output()
        .expect("run gputrace");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The finding `id` of the report (a `FindingId` or its name), if there is one.
#[allow(dead_code)]
pub fn find(r: &Report, id: impl std::fmt::Display) -> Option<&Finding> {
    let id = id.to_string();
    r.findings.iter().find(|f| f.id.as_str() == id)
}

/// The finding `id` of the report; the test fails, with the findings and the report,
/// when there is none.
#[allow(dead_code)]
pub fn get(r: &Report, id: impl std::fmt::Display) -> &Finding {
    let name = id.to_string();
    find(r, &name).unwrap_or_else(|| {
        panic!(
            "no {name} finding; have {:?}\n{}",
            r.findings
                .iter()
                .map(|f| (&f.id, f.severity, f.at_stake_ns))
                .collect::<Vec<_>>(),
            gputrace_analyzer::render_text(r)
        )
    })
}

/// A job of `ranks` ranks on `ranks` hosts (`RANK` set), `steps` steps each: compute
/// (5 ms; 7 ms on rank `slow`), then an all-reduce on one communicator (an NCCL call with
/// its sequence number, from 1, and its kernel, which ends 1 ms after the last rank's
/// arrival). Rank `behind`, when given, stops `behind.1` collectives early: it never
/// arrives at the last ones the others reached (a hang, as the others' traces see it up
/// to their end).
pub fn nccl_job(ranks: u32, steps: usize, slow: u32, behind: Option<(u32, usize)>) -> Vec<B> {
    nccl_job_skewed(ranks, steps, slow, behind, None)
}

/// [`nccl_job`] with the clock of one host, `skew.0`'s, ahead by `skew.1` ns from the
/// loop on (behind when negative).
pub fn nccl_job_skewed(
    ranks: u32,
    steps: usize,
    slow: u32,
    behind: Option<(u32, usize)>,
    skew: Option<(u32, i64)>,
) -> Vec<B> {
    (0..ranks)
        .map(|r| {
            let mut b = B::new();
            b.meta.pid = 4000 + r;
            b.meta.host = format!("node{r}");
            b.meta.options = vec![("RANK".into(), r.to_string())];
            let mut t = startup(&mut b, 40 * GIB);
            if let Some((_, ns)) = skew.filter(|s| s.0 == r) {
                t = t.saturating_add_signed(ns);
            }
            let compute = if r == slow { 7 * MS } else { 5 * MS };
            let mine = match behind {
                Some((who, n)) if who == r => steps - n,
                _ => steps,
            };
            for k in 0..mine as u64 {
                nccl_step(&mut b, t, k, compute, (r, ranks), ALLREDUCE);
            }
            b
        })
        .collect()
}
