//! `gputrace summary`: what the GPU did, per device.

use crate::model::trace::{blind_windows, demangle, Bounds, NvtxPairing, NvtxRange, Trace};
use gputrace_format::{self as fmt, CopyKind, MemKind};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write;
use std::path::Path;

pub use super::units::bytes;

#[derive(Debug, Serialize, Default, Clone)]
pub struct CopyStats {
    pub count: u64,
    pub bytes: u64,
    pub time_ns: u64,
}

#[derive(Debug, Serialize, Clone)]
pub struct TopKernel {
    pub name: String,
    pub count: u64,
    pub total_ns: u64,
    pub mean_ns: u64,
}

#[derive(Debug, Serialize, Clone)]
pub struct DeviceSummary {
    pub device: u32,
    pub name: String,
    pub sm_count: u32,
    pub memory_bytes: u64,
    pub kernels: u64,
    pub kernel_ns: u64,
    pub memsets: u64,
    /// Copies by host memory kind: "pageable", "pinned", "device" (DtoD / peer), "other".
    pub copies: HashMap<String, CopyStats>,
    /// Time with any kernel, copy or memset running (union over streams).
    pub busy_ns: u64,
    pub busy_pct: f64,
    pub streams: usize,
    pub top_kernels: Vec<TopKernel>,
}

#[derive(Debug, Serialize, Clone)]
pub struct Summary {
    pub path: String,
    pub pid: u32,
    pub host: String,
    pub cmdline: Vec<String>,
    pub cupti: String,
    /// First timestamp and wall time covered by the trace.
    pub start_ns: u64,
    pub span_ns: u64,
    pub devices: Vec<DeviceSummary>,
    pub api_calls: u64,
    pub dropped_cupti: u64,
    pub dropped_ring: u64,
    pub dropped_buffers: u64,
    /// (start, end, why) of windows in which GPU activity was not recorded.
    pub blind_windows: Vec<(u64, u64, String)>,
    pub warning: Option<String>,
    /// A window trace's bounds, and GPU records clipped to its start / left out for
    /// having no timestamps.
    pub window: Option<(u64, u64)>,
    pub clipped: u64,
    pub incomplete: u64,
    /// Copy calls the symbol hooks saw, by host memory class and the source of that
    /// classification (per device GPU copies above are CUPTI's own classification).
    pub host_copies: Vec<HostCopyStats>,
    /// Syncs, memsets and launches the symbol hooks recorded while CUPTI's callbacks
    /// were not recording them.
    pub host_calls: u64,
    /// NCCL calls by op (host side: the time is spent in the call, not on the GPU).
    pub nccl: Vec<NcclStats>,
    /// Distinct communicator ids the NCCL calls used (0, not known, not counted).
    pub nccl_communicators: usize,
    /// NVTX ranges (push/pop and start/end pairs) and marks.
    pub nvtx_ranges: u64,
    pub nvtx_marks: u64,
    /// The host sampler's records (format 2.1); absent when the trace has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_samples: Option<HostSampleStats>,
}

/// What the host sampler recorded.
#[derive(Debug, Serialize, Default, Clone, PartialEq)]
pub struct HostSampleStats {
    /// CUDA-issuing (and main) threads sampled, and their samples.
    pub threads: usize,
    pub thread_samples: u64,
    /// Child processes seen, and process / thread samples in all.
    pub children: usize,
    pub proc_samples: u64,
    pub machine_samples: u64,
    /// Sampling periods, us.
    pub thread_period_us: u32,
    pub tree_period_us: u32,
    /// CPUs the job could use.
    pub cpus_available: Option<f64>,
}

/// Copy calls of one host memory class, as the symbol hooks classified them.
#[derive(Debug, Serialize, Default, Clone, PartialEq)]
pub struct HostCopyStats {
    /// pinned / pageable / device / unknown.
    pub class: String,
    /// Where the class comes from: `registry` (the pinned-memory registry).
    pub source: String,
    pub calls: u64,
    pub bytes: u64,
    /// Host time spent in the calls.
    pub host_ns: u64,
    /// Calls CUPTI recorded as API events too (the same calls, not extra ones).
    pub also_cupti: u64,
}

/// NCCL calls of one op.
#[derive(Debug, Serialize, Default, Clone, PartialEq)]
pub struct NcclStats {
    pub op: String,
    pub calls: u64,
    pub bytes: u64,
    /// Host time spent in the calls.
    pub host_ns: u64,
    /// Calls that returned an error.
    pub failed: u64,
}

/// Name of a `CLASS_SOURCE_*` value.
pub fn class_source_name(source: u8) -> &'static str {
    match source {
        fmt::CLASS_SOURCE_REGISTRY => "registry",
        _ => "unknown",
    }
}

/// The host-side memory kind of a copy, as one word.
pub fn copy_class(m: &fmt::Memcpy) -> &'static str {
    let ck = CopyKind::from_u8(m.copy_kind);
    let host_kind = match ck {
        CopyKind::HtoD | CopyKind::HtoA => MemKind::from_u8(m.src_kind),
        CopyKind::DtoH | CopyKind::AtoH => MemKind::from_u8(m.dst_kind),
        CopyKind::DtoD | CopyKind::PtoP | CopyKind::AtoA | CopyKind::AtoD | CopyKind::DtoA => {
            return "device"
        }
        _ => MemKind::Unknown,
    };
    match host_kind {
        MemKind::Pageable => "pageable",
        MemKind::Pinned => "pinned",
        MemKind::Managed => "managed",
        _ => "other",
    }
}

/// GPU work of one device, summed as it comes in start order.
#[derive(Default)]
struct DeviceTotals {
    kernels: u64,
    kernel_ns: u64,
    memsets: u64,
    copies: HashMap<String, CopyStats>,
    /// By interned name: (count, total ns).
    per_name: HashMap<u32, (u64, u64)>,
    streams: HashSet<u32>,
    busy_ns: u64,
    /// The busy stretch still growing (work comes in start order).
    open: Option<(u64, u64)>,
}

impl DeviceTotals {
    /// Adds `[s, e)` to the union of busy time (`s` never below an earlier one's).
    fn busy(&mut self, s: u64, e: u64, stream: u32) {
        self.streams.insert(stream);
        if e <= s {
            return;
        }
        match self.open {
            Some((os, oe)) if s <= oe => self.open = Some((os, oe.max(e))),
            Some((os, oe)) => {
                self.busy_ns += oe - os;
                self.open = Some((s, e));
            }
            None => self.open = Some((s, e)),
        }
    }

    fn finish(
        mut self,
        id: u32,
        info: Option<&fmt::Device>,
        span: u64,
        str: &dyn Fn(u32) -> String,
    ) -> DeviceSummary {
        if let Some((os, oe)) = self.open.take() {
            self.busy_ns += oe - os;
        }
        let mut top: Vec<TopKernel> = self
            .per_name
            .into_iter()
            .map(|(n, (c, tot))| TopKernel {
                name: demangle(&str(n)),
                count: c,
                total_ns: tot,
                mean_ns: tot / c.max(1),
            })
            .collect();
        top.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.name.cmp(&b.name)));
        top.truncate(10);
        DeviceSummary {
            device: id,
            name: info.map(|d| str(d.name)).unwrap_or_default(),
            sm_count: info.map(|d| d.sm_count).unwrap_or(0),
            memory_bytes: info.map(|d| d.global_memory).unwrap_or(0),
            kernels: self.kernels,
            kernel_ns: self.kernel_ns,
            memsets: self.memsets,
            copies: self.copies,
            busy_ns: self.busy_ns,
            busy_pct: if span > 0 {
                100.0 * self.busy_ns as f64 / span as f64
            } else {
                0.0
            },
            streams: self.streams.len(),
            top_kernels: top,
        }
    }
}

/// A trace's summary, built from its records as they come in time order (GPU work by
/// its start): what it holds is bounded by the number of devices, streams, kernel
/// names, threads and open NVTX ranges, not by the number of records.
#[derive(Default)]
pub struct SummaryBuilder {
    devices: BTreeMap<u32, DeviceTotals>,
    info: Vec<fmt::Device>,
    /// First and last timestamps of any recorded interval (as [`Trace::span`]).
    span: Bounds,
    api_calls: u64,
    drops: [u64; 3],
    states: Vec<(u64, u8, u32)>,
    host_copies: HashMap<(&'static str, &'static str), HostCopyStats>,
    host_calls: u64,
    nccl: BTreeMap<u8, NcclStats>,
    communicators: HashSet<u64>,
    nvtx: NvtxPairing,
    nvtx_closed: u64,
    nvtx_last: u64,
    nvtx_marks: u64,
    closed: Vec<NvtxRange>,
    sampled_threads: HashSet<u32>,
    thread_samples: u64,
    children: HashSet<u32>,
    proc_samples: u64,
    machine_samples: u64,
    limits: Option<fmt::CpuLimits>,
}

impl SummaryBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    fn device_totals(&mut self, id: u32) -> &mut DeviceTotals {
        self.devices.entry(id).or_default()
    }

    pub fn device(&mut self, d: &fmt::Device) {
        self.device_totals(d.id);
        self.info.push(d.clone());
    }

    pub fn kernel(&mut self, k: &fmt::Kernel) {
        self.span.see(k.start, k.end);
        let t = self.device_totals(k.device);
        let d = k.end.saturating_sub(k.start);
        t.kernel_ns = d.saturating_add(t.kernel_ns);
        t.kernels += 1;
        let e = t.per_name.entry(k.name).or_default();
        e.0 += 1;
        e.1 = e.1.saturating_add(d);
        t.busy(k.start, k.end, k.stream);
    }

    pub fn memcpy(&mut self, m: &fmt::Memcpy) {
        self.span.see(m.start, m.end);
        let t = self.device_totals(m.device);
        let c = t.copies.entry(copy_class(m).to_string()).or_default();
        c.count += 1;
        c.bytes = c.bytes.saturating_add(m.bytes);
        c.time_ns = c.time_ns.saturating_add(m.end.saturating_sub(m.start));
        t.busy(m.start, m.end, m.stream);
    }

    pub fn memset(&mut self, m: &fmt::Memset) {
        self.span.see(m.start, m.end);
        let t = self.device_totals(m.device);
        t.memsets += 1;
        t.busy(m.start, m.end, m.stream);
    }

    pub fn api(&mut self, a: &fmt::Api) {
        self.span.see(a.start, a.end);
        self.api_calls += 1;
    }

    pub fn sync(&mut self, s: &fmt::Sync) {
        self.span.see(s.start, s.end);
    }

    pub fn state(&mut self, ts: u64, state: u8, reason: u32) {
        self.states.push((ts, state, reason));
    }

    pub fn dropped(&mut self, source: u8, count: u64) {
        let i = match source {
            fmt::DROP_CUPTI => 0,
            fmt::DROP_RING => 1,
            fmt::DROP_BUFFER_POOL => 2,
            _ => return,
        };
        self.drops[i] += count;
    }

    pub fn host_copy(&mut self, c: &fmt::HostCopy) {
        self.span.see(c.start, c.end);
        let class = MemKind::from_u8(c.host_kind).name();
        let source = class_source_name(c.source);
        let e = self
            .host_copies
            .entry((class, source))
            .or_insert_with(|| HostCopyStats {
                class: class.to_string(),
                source: source.to_string(),
                ..Default::default()
            });
        e.calls += 1;
        e.bytes += c.bytes;
        e.host_ns += c.end.saturating_sub(c.start);
        if c.flags & fmt::HOSTCOPY_FLAG_CUPTI_API != 0 {
            e.also_cupti += 1;
        }
    }

    pub fn host_call(&mut self, c: &fmt::HostCall) {
        self.span.see(c.start, c.end);
        self.host_calls += 1;
    }

    pub fn nccl(&mut self, n: &fmt::Nccl) {
        self.span.see(n.start, n.end);
        let e = self.nccl.entry(n.op).or_insert_with(|| NcclStats {
            op: fmt::nccl_op_name(n.op).to_string(),
            ..Default::default()
        });
        e.calls += 1;
        e.bytes += n.bytes;
        e.host_ns += n.end.saturating_sub(n.start);
        if n.result != 0 {
            e.failed += 1;
        }
        if n.comm_id != 0 {
            self.communicators.insert(n.comm_id);
        }
    }

    pub fn nvtx(&mut self, n: &fmt::Nvtx) {
        self.nvtx_last = n.ts;
        if n.kind == fmt::NVTX_MARK {
            self.nvtx_marks += 1;
        }
        self.nvtx.add(n, &mut self.closed);
        self.nvtx_closed += self.closed.len() as u64;
        self.closed.clear();
    }

    pub fn thread_cpu(&mut self, x: &fmt::ThreadCpu) {
        self.sampled_threads.insert(x.tid);
        self.thread_samples += 1;
    }

    pub fn proc_sample(&mut self, p: &fmt::ProcSample) {
        self.proc_samples += 1;
        if p.flags & (fmt::PROC_FLAG_THREAD | fmt::PROC_FLAG_SELF) == 0 {
            self.children.insert(p.pid);
        }
    }

    pub fn machine_sample(&mut self) {
        self.machine_samples += 1;
    }

    pub fn cpu_limits(&mut self, l: &fmt::CpuLimits) {
        self.limits.get_or_insert_with(|| l.clone());
    }

    /// The summary of the trace at `path`: `str` gives interned strings; `read` is
    /// what reading the file found; `window`, `clipped` and `incomplete` as [`Trace`]
    /// has them.
    pub fn finish(
        self,
        path: &Path,
        meta: &fmt::Meta,
        read: &fmt::ReadStats,
        window: (Option<(u64, u64)>, u64, u64),
        str: &dyn Fn(u32) -> String,
    ) -> Summary {
        let (start, end) = self.span.get().unwrap_or((0, 0));
        let span = end - start;
        let info = &self.info;
        let devices = self
            .devices
            .into_iter()
            .map(|(id, t)| t.finish(id, info.iter().find(|d| d.id == id), span, str))
            .collect();
        let mut host_copies: Vec<HostCopyStats> = self.host_copies.into_values().collect();
        host_copies.sort_by(|a, b| a.class.cmp(&b.class).then(a.source.cmp(&b.source)));
        let open = self.nvtx.into_open().count() as u64;
        let host_samples = (self.thread_samples > 0).then(|| HostSampleStats {
            threads: self.sampled_threads.len(),
            thread_samples: self.thread_samples,
            children: self.children.len(),
            proc_samples: self.proc_samples,
            machine_samples: self.machine_samples,
            thread_period_us: self.limits.as_ref().map_or(0, |l| l.thread_period_us),
            tree_period_us: self.limits.as_ref().map_or(0, |l| l.tree_period_us),
            cpus_available: self.limits.as_ref().map(|l| l.cpus_available()),
        });
        let names: Vec<(u32, String)> = self.states.iter().map(|s| (s.2, str(s.2))).collect();
        let text = |r: u32| names.iter().find(|n| n.0 == r).map_or("", |n| n.1.as_str());
        Summary {
            path: path.display().to_string(),
            pid: meta.pid,
            host: meta.host.clone(),
            cmdline: crate::secrets::cmdline(&meta.cmdline),
            cupti: format!("{} ({})", meta.cupti_path, meta.cupti_source),
            start_ns: start,
            span_ns: span,
            devices,
            api_calls: self.api_calls,
            dropped_cupti: self.drops[0],
            dropped_ring: self.drops[1],
            dropped_buffers: self.drops[2],
            blind_windows: blind_windows(&self.states, || end, text),
            warning: read.warning(),
            window: window.0,
            clipped: window.1,
            incomplete: window.2,
            host_copies,
            host_calls: self.host_calls,
            nccl: self.nccl.into_values().collect(),
            nccl_communicators: self.communicators.len(),
            nvtx_ranges: self.nvtx_closed + open,
            nvtx_marks: self.nvtx_marks,
            host_samples,
        }
    }
}

/// The summary of a trace already in memory (the command streams the file instead:
/// [`crate::export::summary`]).
pub fn summarize(t: &Trace) -> Summary {
    let mut b = SummaryBuilder::new();
    for d in &t.devices {
        b.device(d);
    }
    // GPU work in start order across the three tables (each sorted by start).
    let mut gpu: Vec<(u64, u8, usize)> = Vec::new();
    gpu.extend(t.kernels.iter().enumerate().map(|(i, k)| (k.start, 0, i)));
    gpu.extend(t.memcpys.iter().enumerate().map(|(i, m)| (m.start, 1, i)));
    gpu.extend(t.memsets.iter().enumerate().map(|(i, m)| (m.start, 2, i)));
    gpu.sort_unstable();
    for (_, kind, i) in gpu {
        match kind {
            0 => b.kernel(&t.kernels.at(i)),
            1 => b.memcpy(&t.memcpys[i]),
            _ => b.memset(&t.memsets[i]),
        }
    }
    t.apis.iter().for_each(|a| b.api(&a));
    t.syncs.iter().for_each(|s| b.sync(s));
    for &(ts, st, r) in &t.states {
        b.state(ts, st, r);
    }
    for &(_, source, count) in &t.drops {
        b.dropped(source, count);
    }
    t.host_copies.iter().for_each(|c| b.host_copy(c));
    t.host_calls.iter().for_each(|c| b.host_call(c));
    t.nccl.iter().for_each(|n| b.nccl(n));
    t.nvtx.iter().for_each(|n| b.nvtx(n));
    t.thread_cpu.iter().for_each(|x| b.thread_cpu(x));
    t.proc_samples.iter().for_each(|p| b.proc_sample(p));
    t.machine.iter().for_each(|_| b.machine_sample());
    if let Some(l) = t.cpu_limits.first() {
        b.cpu_limits(l);
    }
    b.finish(
        &t.path,
        &t.meta,
        &t.stats,
        (t.window, t.clipped, t.incomplete),
        &|n| t.str(n).to_string(),
    )
}

/// Milliseconds with three decimals.
pub fn ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

/// The summary as text.
pub fn render(s: &Summary) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "trace {}  (pid {} on {})", s.path, s.pid, s.host);
    if !s.cmdline.is_empty() {
        let _ = writeln!(o, "  command: {}", s.cmdline.join(" "));
    }
    let _ = writeln!(o, "  CUPTI:   {}", s.cupti);
    let _ = writeln!(o, "  traced:  {}", ms(s.span_ns));
    if let Some(w) = &s.warning {
        let _ = writeln!(o, "  WARNING: {w}");
    }
    if let Some((lo, hi)) = s.window {
        let _ = writeln!(
            o,
            "  window:  {} on request; {} GPU records began before it (clipped to its start), {} still running at its end (left out)",
            ms(hi.saturating_sub(lo)),
            s.clipped,
            s.incomplete
        );
    }
    for d in &s.devices {
        let _ = writeln!(
            o,
            "\ndevice {}: {} ({} SMs, {})",
            d.device,
            if d.name.is_empty() { "?" } else { &d.name },
            d.sm_count,
            bytes(d.memory_bytes)
        );
        let _ = writeln!(
            o,
            "  busy      {} of {} = {:.1}%  (any kernel, copy or memset running; {} stream{})",
            ms(d.busy_ns),
            ms(s.span_ns),
            d.busy_pct,
            d.streams,
            if d.streams == 1 { "" } else { "s" }
        );
        let _ = writeln!(
            o,
            "  kernels   {} launches, {} total",
            d.kernels,
            ms(d.kernel_ns)
        );
        let mut kinds: Vec<_> = d.copies.iter().collect();
        kinds.sort_by(|a, b| a.0.cmp(b.0));
        for (k, c) in kinds {
            let _ = writeln!(
                o,
                "  copies    {:<9} {:>7} copies {:>11}  {}",
                k,
                c.count,
                bytes(c.bytes),
                ms(c.time_ns)
            );
        }
        if d.memsets > 0 {
            let _ = writeln!(o, "  memsets   {}", d.memsets);
        }
        if !d.top_kernels.is_empty() {
            let _ = writeln!(o, "  top kernels by total time:");
            for k in &d.top_kernels {
                let pct = 100.0 * k.total_ns as f64 / d.kernel_ns.max(1) as f64;
                let _ = writeln!(
                    o,
                    "    {:>12} {:>5.1}% {:>8}x {:>10.1} µs  {}",
                    ms(k.total_ns),
                    pct,
                    k.count,
                    k.mean_ns as f64 / 1e3,
                    truncate(&k.name, 90)
                );
            }
        }
    }
    if s.devices.is_empty() {
        let _ = writeln!(o, "\nno GPU activity recorded");
    }
    let _ = writeln!(o, "\nhost API calls recorded: {}", s.api_calls);
    let _ = writeln!(
        o,
        "dropped records: {} by CUPTI, {} ring overflow, {} buffer pool exhausted",
        s.dropped_cupti, s.dropped_ring, s.dropped_buffers
    );
    for (a, b, why) in &s.blind_windows {
        let _ = writeln!(
            o,
            "blind window: {} long, {} after start: {}",
            ms(b - a),
            ms(a.saturating_sub(s.start_ns)),
            why
        );
    }
    render_hooks(s, &mut o);
    o
}

/// The symbol hooks' part of the summary (nothing when they saw nothing).
fn render_hooks(s: &Summary, o: &mut String) {
    if !s.host_copies.is_empty() {
        let _ = writeln!(o, "\nhost copy calls (symbol hooks), by host memory:");
        for c in &s.host_copies {
            let _ = writeln!(
                o,
                "  {:<9} {:>7} calls {:>11}  {} in the calls  (classified by: {}; {} also recorded by CUPTI)",
                c.class,
                c.calls,
                bytes(c.bytes),
                ms(c.host_ns),
                c.source,
                c.also_cupti
            );
        }
    }
    if s.host_calls > 0 {
        let _ = writeln!(
            o,
            "host sync/memset/launch calls recorded by the symbol hooks (CUPTI callbacks off): {}",
            s.host_calls
        );
    }
    if !s.nccl.is_empty() {
        let _ = writeln!(
            o,
            "\nNCCL calls (host side) on {} communicator(s):",
            s.nccl_communicators
        );
        for n in &s.nccl {
            let _ = writeln!(
                o,
                "  {:<18} {:>7} calls {:>11}  {} in the calls{}",
                n.op,
                n.calls,
                bytes(n.bytes),
                ms(n.host_ns),
                if n.failed > 0 {
                    format!(", {} failed", n.failed)
                } else {
                    String::new()
                }
            );
        }
    }
    if s.nvtx_ranges > 0 || s.nvtx_marks > 0 {
        let _ = writeln!(o, "NVTX: {} ranges, {} marks", s.nvtx_ranges, s.nvtx_marks);
    }
    if let Some(h) = &s.host_samples {
        let _ = writeln!(
            o,
            "host samples: {} thread{} every {} ms ({} samples), {} child process{} and this process's threads every {} ms ({} samples), {} machine samples{}",
            h.threads,
            if h.threads == 1 { "" } else { "s" },
            h.thread_period_us as f64 / 1000.0,
            h.thread_samples,
            h.children,
            if h.children == 1 { "" } else { "es" },
            h.tree_period_us as f64 / 1000.0,
            h.proc_samples,
            h.machine_samples,
            h.cpus_available
                .map(|c| format!("; {c:.1} CPUs available to the job"))
                .unwrap_or_default()
        );
    }
}

/// `s` cut to `n` characters, the last one an ellipsis when cut.
pub(crate) fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod hook_tests {
    use super::*;

    #[test]
    fn hook_events_are_summarised() {
        let copy = |host_kind: MemKind, bytes, flags| {
            fmt::Event::HostCopy(fmt::HostCopy {
                start: 100,
                end: 150,
                host_kind: host_kind as u8,
                source: fmt::CLASS_SOURCE_REGISTRY,
                bytes,
                flags,
                ..Default::default()
            })
        };
        let nccl = |op, count, comm_id, result| {
            fmt::Event::Nccl(fmt::Nccl {
                start: 200,
                end: 300,
                op,
                count,
                bytes: count * 4,
                datatype: 7,
                comm_id,
                result,
                ..Default::default()
            })
        };
        let t = Trace::from_events(
            fmt::Meta::default(),
            vec![
                copy(MemKind::Pinned, 4096, fmt::HOSTCOPY_FLAG_CUPTI_API),
                copy(MemKind::Pinned, 4096, 0),
                copy(MemKind::Pageable, 100, 0),
                nccl(fmt::NCCL_ALL_REDUCE, 1000, 7, 0),
                nccl(fmt::NCCL_ALL_REDUCE, 1000, 8, 3),
                nccl(fmt::NCCL_SEND, 10, 7, 0),
                fmt::Event::Nvtx(fmt::Nvtx {
                    ts: 10,
                    kind: fmt::NVTX_PUSH,
                    ..Default::default()
                }),
                fmt::Event::Nvtx(fmt::Nvtx {
                    ts: 20,
                    kind: fmt::NVTX_POP,
                    ..Default::default()
                }),
                fmt::Event::Nvtx(fmt::Nvtx {
                    ts: 30,
                    kind: fmt::NVTX_MARK,
                    ..Default::default()
                }),
            ],
        );
        let s = summarize(&t);
        assert_eq!(
            s.host_copies,
            vec![
                HostCopyStats {
                    class: "pageable".into(),
                    source: "registry".into(),
                    calls: 1,
                    bytes: 100,
                    host_ns: 50,
                    also_cupti: 0
                },
                HostCopyStats {
                    class: "pinned".into(),
                    source: "registry".into(),
                    calls: 2,
                    bytes: 8192,
                    host_ns: 100,
                    also_cupti: 1
                },
            ]
        );
        assert_eq!(s.nccl.len(), 2);
        assert_eq!(s.nccl[0].op, "ncclAllReduce");
        assert_eq!(
            (s.nccl[0].calls, s.nccl[0].bytes, s.nccl[0].failed),
            (2, 8000, 1)
        );
        assert_eq!(s.nccl_communicators, 2);
        assert_eq!((s.nvtx_ranges, s.nvtx_marks), (1, 1));
        let text = render(&s);
        assert!(text.contains("classified by: registry"), "{text}");
        assert!(text.contains("ncclAllReduce"), "{text}");
        assert!(text.contains("NVTX: 1 ranges, 1 marks"), "{text}");
    }
}

#[cfg(test)]
mod host_sample_tests {
    use super::*;

    #[test]
    fn host_samples_are_summarised_only_when_present() {
        let ev = vec![
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
                ..Default::default()
            }),
            fmt::Event::ThreadCpu(fmt::ThreadCpu {
                ts: 5,
                tid: 10,
                ..Default::default()
            }),
            fmt::Event::ProcSample(fmt::ProcSample {
                ts: 3,
                pid: 11,
                ppid: 10,
                ..Default::default()
            }),
            fmt::Event::ProcSample(fmt::ProcSample {
                ts: 3,
                pid: 10,
                flags: fmt::PROC_FLAG_SELF,
                ..Default::default()
            }),
        ];
        let t = Trace::from_events(fmt::Meta::default(), ev);
        let s = summarize(&t);
        let h = s.host_samples.as_ref().unwrap();
        assert_eq!((h.threads, h.thread_samples, h.children), (1, 2, 1));
        assert_eq!(h.cpus_available, Some(4.0));
        assert!(render(&s).contains("host samples: 1 thread every 3 ms"));
        let plain = summarize(&Trace::from_events(fmt::Meta::default(), vec![]));
        assert!(plain.host_samples.is_none());
        assert!(!serde_json::to_string(&plain)
            .unwrap()
            .contains("host_samples"));
    }
}
