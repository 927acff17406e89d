//! What the timeline and table formats (Perfetto, Chrome JSON, Parquet) are given about
//! each process of a job besides its events: who it is, where its clock sits among the
//! others, and what the analysis placed on its timeline (steps, phases, every idle
//! piece with its cause, findings), plus the series computed from its loaded trace
//! (queue depth per stream, device memory in use).
//!
//! The order of an export ([`crate::commands::app::export`]): the traces are loaded and analysed
//! together, as `gputrace report` does; each process is handed to the exporter with
//! [`TimelineExporter::process`] while its trace is loaded; the traces are dropped; then
//! each trace's events are streamed from its file ([`super::stream`]) after
//! [`TimelineExporter::select`] names the process they belong to. Memory: the analysis's
//! (as `report`), then the stream's bound.
//!
//! The samplers' series are counters written with the process, from its loaded trace
//! (not from the stream): there they include what an environment file of the set gave
//! the trace ([`crate::model::env_files`]). NVML's readings are [`Series::Nvml`]
//! ([`nvml_counters`]); the host sampler's CPU shares and NVML's per-process SM shares
//! are [`Sampled`] percentages ([`sampled_counters`]). Samples that one environment file
//! gave to several processes of a host are shown by the first of them only
//! ([`ProcessView::nvml_samples`]).

use super::api::EventExporter;
use crate::model::trace::Trace;
use crate::report::view::{Finding, FxMap, ProcessReport, Report, Timeline};
use gputrace_format::{self as fmt, MemKind};
use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};

/// A format of whole jobs: their processes' timelines, then their events. It writes its
/// own files under the output path it was made with (so the `out` its
/// [`EventExporter`] methods get is not used).
pub trait TimelineExporter: EventExporter {
    /// A process of the job, before any events; its trace is loaded.
    fn process(&mut self, p: &ProcessView<'_>) -> io::Result<()>;
    /// The events that follow belong to process `index` (its [`ProcessView::index`]).
    fn select(&mut self, index: usize) -> io::Result<()>;
    /// After the last event: the files written.
    fn close(&mut self) -> io::Result<Vec<PathBuf>>;
    /// The exporter as the event stream takes it.
    fn as_events(&mut self) -> &mut dyn EventExporter;
}

/// One process of an export.
pub struct ProcessView<'a> {
    /// Index in the report's `processes` (the order of ranks).
    pub index: usize,
    pub process: &'a ProcessReport,
    pub trace: &'a Trace,
    pub timeline: &'a Timeline,
    /// This process's findings.
    pub findings: Vec<&'a Finding>,
    /// The job's verdict (the report's first line).
    pub verdict: &'a str,
    /// Added to the trace's timestamps to put every process on one time base: 0 for a
    /// single trace; with several, CLOCK_REALTIME, corrected by the collectives' ends
    /// across hosts where the report aligned them.
    pub offset_ns: i64,
    /// The pid the timeline shows (the process's own, unless another process of the job
    /// has it: then one made unique).
    pub pid: u32,
    /// Processes in the job.
    pub world: usize,
    /// The earliest trace start of the job, on its time base.
    pub job_start_ns: u64,
    /// Which of the trace's NVML samples this process shows (parallel to its
    /// `gpu_samples` and `gpu_processes`): those no earlier process of the job on the
    /// same host shows already. One environment file gives its samples to every
    /// process trace of its host that it covers; the timeline shows each once.
    pub nvml_samples: Vec<bool>,
    pub nvml_processes: Vec<bool>,
}

impl ProcessView<'_> {
    /// The process's name on a timeline: `rank 3 (host, pid 123)` or `pid 123 (host)`.
    pub fn display_name(&self) -> String {
        let (host, pid) = (&self.process.host, self.trace.meta.pid);
        match self.process.rank {
            Some(r) => format!("rank {r} ({host}, pid {pid})"),
            None => format!("pid {pid} ({host})"),
        }
    }

    /// A trace timestamp on the job's time base.
    pub fn at(&self, ts: u64) -> u64 {
        shift(ts, self.offset_ns)
    }
}

/// `ts + offset`, kept in range.
pub fn shift(ts: u64, offset: i64) -> u64 {
    (ts as i128 + offset as i128).clamp(0, u64::MAX as i128) as u64
}

/// Each process's view of a job, in the report's order.
pub fn views<'a>(
    traces: &'a [Trace],
    report: &'a Report,
    timelines: &'a [Timeline],
) -> Vec<ProcessView<'a>> {
    let multi = traces.len() > 1;
    let offsets: Vec<i64> = timelines
        .iter()
        .enumerate()
        .map(|(i, tl)| {
            if !multi {
                return 0;
            }
            report
                .cluster
                .as_ref()
                .and_then(|c| c.ranks.iter().find(|r| r.process == i))
                .map(|r| r.clock_offset_ns)
                .unwrap_or_else(|| realtime_offset(&traces[tl.trace].clocks))
        })
        .collect();
    let job_start_ns = report
        .processes
        .iter()
        .zip(&offsets)
        .filter(|(p, _)| p.trace_start_ns > 0)
        .map(|(p, &o)| shift(p.trace_start_ns, o))
        .min()
        .unwrap_or(0);
    let world = report.processes.len();
    let mut pids: HashMap<u32, usize> = HashMap::new();
    type Shown = (HashSet<(u32, u64)>, HashSet<(u32, u32, u64)>);
    let mut shown: HashMap<String, Shown> = HashMap::new();
    report
        .processes
        .iter()
        .zip(timelines)
        .enumerate()
        .map(|(i, (p, tl))| {
            let t = &traces[tl.trace];
            let offset_ns = offsets[i];
            let seen = pids.entry(t.meta.pid).or_insert(0);
            *seen += 1;
            // A pid another process of the job already has: one no real process has
            // (above the kernel's pid_max of 2^22).
            let pid = if *seen == 1 {
                t.meta.pid
            } else {
                (1 << 22) + i as u32
            };
            // NVML samples shown by an earlier process of the host are copies from one
            // environment file (two samplers never share a timestamp).
            let seen = shown.entry(p.host.clone()).or_default();
            let nvml_samples = t
                .gpu_samples
                .iter()
                .map(|g| seen.0.insert((g.device, g.ts)))
                .collect();
            let nvml_processes = t
                .gpu_processes
                .iter()
                .map(|g| seen.1.insert((g.device, g.pid, g.ts)))
                .collect();
            ProcessView {
                index: i,
                process: p,
                trace: t,
                timeline: tl,
                findings: report
                    .findings
                    .iter()
                    .filter(|f| f.process == Some(i))
                    .collect(),
                verdict: &report.verdict,
                offset_ns,
                pid,
                world,
                job_start_ns,
                nvml_samples,
                nvml_processes,
            }
        })
        .collect()
}

/// CUPTI time onto CLOCK_REALTIME through the trace's clock pairs (their median).
pub fn realtime_offset(clocks: &[(u64, u64, u64)]) -> i64 {
    let mut d: Vec<i64> = clocks
        .iter()
        .filter(|c| c.0 > 0 && c.2 > 0)
        .map(|c| (c.2 as i128 - c.0 as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64)
        .collect();
    if d.is_empty() {
        return 0;
    }
    d.sort_unstable();
    d[d.len() / 2]
}

/// Where a counter's values come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Series {
    /// GPU work submitted (its launch call returned) and not finished, on one stream.
    QueueDepth { device: u32, stream: u32 },
    /// Device memory allocated and not freed (bytes), from the memory records.
    DeviceMemory { device: u32 },
    /// One reading of the NVML sampler, per GPU (NVML's index).
    Nvml { device: u32, what: Nvml },
}

/// What the NVML sampler reads (`GpuSample`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Nvml {
    SmClock,
    MemClock,
    Power,
    Temperature,
    GpuUtil,
    MemUtil,
    MemUsed,
    PcieTx,
    PcieRx,
}

impl Nvml {
    pub const ALL: [Nvml; 9] = [
        Nvml::SmClock,
        Nvml::MemClock,
        Nvml::Power,
        Nvml::Temperature,
        Nvml::GpuUtil,
        Nvml::MemUtil,
        Nvml::MemUsed,
        Nvml::PcieTx,
        Nvml::PcieRx,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Nvml::SmClock => "SM clock (MHz)",
            Nvml::MemClock => "memory clock (MHz)",
            Nvml::Power => "power (mW)",
            Nvml::Temperature => "temperature (C)",
            Nvml::GpuUtil => "GPU-Util (%)",
            Nvml::MemUtil => "memory util (%)",
            Nvml::MemUsed => "memory used (NVML)",
            Nvml::PcieTx => "PCIe TX (KB/s)",
            Nvml::PcieRx => "PCIe RX (KB/s)",
        }
    }

    /// The sample's reading, when NVML gave one.
    pub fn of(self, g: &fmt::GpuSample) -> Option<i64> {
        let v32 = |v: u32| (v != fmt::ENV_NA).then_some(v as i64);
        match self {
            Nvml::SmClock => v32(g.sm_clock_mhz),
            Nvml::MemClock => v32(g.mem_clock_mhz),
            Nvml::Power => v32(g.power_mw),
            Nvml::Temperature => v32(g.temperature_c),
            Nvml::GpuUtil => v32(g.gpu_util_pct),
            Nvml::MemUtil => v32(g.mem_util_pct),
            Nvml::MemUsed => {
                (g.mem_used != fmt::ENV_NA64).then_some(g.mem_used.min(i64::MAX as u64) as i64)
            }
            Nvml::PcieTx => v32(g.pcie_tx_kbs),
            Nvml::PcieRx => v32(g.pcie_rx_kbs),
        }
    }
}

impl Series {
    /// The counter's name on a timeline.
    pub fn name(&self) -> String {
        match self {
            Series::QueueDepth { stream, .. } => format!("queue depth, stream {stream}"),
            Series::DeviceMemory { .. } => "device memory".into(),
            Series::Nvml { what, .. } => what.name().into(),
        }
    }
    pub fn device(&self) -> u32 {
        match *self {
            Series::QueueDepth { device, .. }
            | Series::DeviceMemory { device }
            | Series::Nvml { device, .. } => device,
        }
    }
    /// The unit a viewer should show.
    pub fn is_bytes(&self) -> bool {
        matches!(
            self,
            Series::DeviceMemory { .. }
                | Series::Nvml {
                    what: Nvml::MemUsed,
                    ..
                }
        )
    }
    /// A sampler's reading (its GPU is NVML's index, which need not be CUDA's).
    pub fn is_sampled(&self) -> bool {
        matches!(self, Series::Nvml { .. })
    }
}

/// Calls `f(series, ts, value)` for every change of every counter of the trace, in time
/// order per series (trace timestamps). Queue depth: +1 when the call that submitted a
/// piece of work returned (work linked to its call by correlation id), -1 when the work
/// ended; device memory: the level of allocations minus frees of device memory (a free
/// of memory allocated before the trace floors it at 0, as the report does).
pub fn counters(t: &Trace, mut f: impl FnMut(Series, u64, i64)) {
    // Launch, copy and memset calls by correlation id: the submissions. CUPTI numbers
    // calls one after another, so a table indexed by id is small; a map when not.
    let subs: Vec<(u32, u64)> = t
        .apis
        .iter()
        .filter(|a| a.corr != 0 && crate::report::view::submits_gpu_work(a, t.str(a.name)))
        .map(|a| (a.corr, a.end))
        .collect();
    let lo = subs.iter().map(|s| s.0).min().unwrap_or(0);
    let hi = subs.iter().map(|s| s.0).max().unwrap_or(0);
    let dense = (hi - lo) as usize <= 4 * subs.len() + 1024;
    let mut table: Vec<u64> = Vec::new();
    let mut map: FxMap<u32, u64> = FxMap::default();
    if dense {
        table = vec![u64::MAX; (hi - lo) as usize + 1];
        for &(c, e) in &subs {
            table[(c - lo) as usize] = e;
        }
    } else {
        map.extend(subs.iter().copied());
    }
    drop(subs);
    let submitted = |corr: u32| -> Option<u64> {
        if dense {
            let i = corr.checked_sub(lo)? as usize;
            table.get(i).copied().filter(|&e| e != u64::MAX)
        } else {
            map.get(&corr).copied()
        }
    };
    // Per (device, stream): submission times and end times, each nearly in order
    // already (work of a stream runs in order), so sorting them is cheap; then merged.
    type Times = (Vec<u64>, Vec<u64>);
    let mut changes: Vec<((u32, u32), Times)> = Vec::new();
    let mut last = usize::MAX;
    let mut see = |dev: u32, stream: u32, corr: u32, end: u64| {
        let Some(sub) = submitted(corr) else {
            return;
        };
        if sub >= end {
            return;
        }
        // Few streams: the last one used, else a scan.
        if changes.get(last).is_none_or(|c| c.0 != (dev, stream)) {
            last = match changes.iter().position(|c| c.0 == (dev, stream)) {
                Some(i) => i,
                None => {
                    changes.push(((dev, stream), Default::default()));
                    changes.len() - 1
                }
            };
        }
        let (subs, ends) = &mut changes[last].1;
        subs.push(sub);
        ends.push(end);
    };
    for k in &t.kernels {
        see(k.device, k.stream, k.corr, k.end);
    }
    for c in &t.memcpys {
        see(c.device, c.stream, c.corr, c.end);
    }
    for s in &t.memsets {
        see(s.device, s.stream, s.corr, s.end);
    }
    drop((table, map));
    changes.sort_unstable_by_key(|c| c.0);
    for (key, (mut subs, mut ends)) in changes {
        subs.sort_unstable();
        ends.sort_unstable();
        let series = Series::QueueDepth {
            device: key.0,
            stream: key.1,
        };
        let (mut i, mut j, mut depth) = (0, 0, 0i64);
        while i < subs.len() || j < ends.len() {
            // At one time, work ending comes before work submitted.
            let ts = match (subs.get(i), ends.get(j)) {
                (Some(&s), Some(&e)) => s.min(e),
                (Some(&s), None) => s,
                (None, Some(&e)) => e,
                (None, None) => break,
            };
            while ends.get(j) == Some(&ts) {
                depth = (depth - 1).max(0);
                j += 1;
            }
            while subs.get(i) == Some(&ts) {
                depth += 1;
                i += 1;
            }
            f(series, ts, depth);
        }
    }
    let mut devices: Vec<u32> = t.memory.iter().map(|m| m.device).collect();
    devices.sort_unstable();
    devices.dedup();
    for dev in devices {
        let series = Series::DeviceMemory { device: dev };
        let mut level: i128 = 0;
        let mut last: Option<(u64, i128)> = None;
        for m in t.memory.iter().filter(|m| m.device == dev) {
            if !matches!(
                MemKind::from_u8(m.mem_kind),
                MemKind::Device | MemKind::Unknown | MemKind::Managed
            ) {
                continue;
            }
            match m.op {
                fmt::MEMORY_OP_ALLOC => level += m.bytes as i128,
                fmt::MEMORY_OP_FREE => level = (level - m.bytes as i128).max(0),
                _ => continue,
            }
            if let Some((ts, v)) = last {
                if ts != m.ts {
                    f(series, ts, v.min(i64::MAX as i128) as i64);
                }
            }
            last = Some((m.ts, level));
        }
        if let Some((ts, v)) = last {
            f(series, ts, v.min(i64::MAX as i128) as i64);
        }
    }
}

/// Calls `f(series, ts, value)` for every reading of the NVML sampler in the trace's
/// table (its own samples, or those an environment file gave it) that `shown` keeps
/// ([`ProcessView::nvml_samples`]), in the table's order.
pub fn nvml_counters(t: &Trace, shown: &[bool], mut f: impl FnMut(Series, u64, i64)) {
    for (g, _) in t.gpu_samples.iter().zip(shown).filter(|x| *x.1) {
        for what in Nvml::ALL {
            if let Some(v) = what.of(g) {
                f(
                    Series::Nvml {
                        device: g.device,
                        what,
                    },
                    g.ts,
                    v,
                );
            }
        }
    }
}

/// A counter of the samplers whose values are shares in percent: the host sampler's
/// CPU time, and NVML's per-process SM share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sampled {
    /// A sampled (CUDA-issuing) thread's on-CPU share between consecutive samples,
    /// capped at 100; shown under the thread.
    ThreadCpu {
        tid: u32,
    },
    /// A process of the traced process's tree (itself, its DataLoader workers and
    /// other children): CPU time between consecutive samples as a share of one CPU
    /// (above 100 when it ran on several at once).
    ProcessCpu {
        pid: u32,
    },
    /// The machine's CPUs: busy (user, nice, system, irq, softirq) and I/O-wait shares
    /// of all CPU time between consecutive samples.
    MachineBusy,
    MachineIowait,
    /// Another process's share of the time the GPU's SMs were busy (NVML, per sample
    /// period); shown under the GPU as NVML names it.
    GpuProcessSm {
        device: u32,
        pid: u32,
    },
    /// The GPU's performance counters (NVML GPM, or CUPTI PM in older traces), percent
    /// of peak: 0 SM active, 1 achieved occupancy, 2 tensor pipes, 3 DRAM throughput,
    /// 4-6 FP64/FP32/FP16 pipes, 7 integer pipe, 8-10 DFMA/HMMA/IMMA tensor pipes;
    /// shown under the GPU.
    GpuCounter {
        device: u32,
        which: u8,
    },
}

impl Sampled {
    /// A name that says which thread, process or GPU without a track around it (for
    /// formats with flat counters per process).
    pub fn flat_name(&self, name: &str) -> String {
        match *self {
            Sampled::ThreadCpu { tid } => format!("thread {tid} {name}"),
            Sampled::GpuProcessSm { device, .. } | Sampled::GpuCounter { device, .. } => {
                format!("GPU {device} {name}")
            }
            _ => name.to_string(),
        }
    }

    /// What the counter is of (the Parquet `counters` table's `track` and `id`).
    pub fn owner(&self) -> (&'static str, i64) {
        match *self {
            Sampled::ThreadCpu { tid } => ("thread", tid as i64),
            Sampled::ProcessCpu { pid } => ("process", pid as i64),
            Sampled::MachineBusy | Sampled::MachineIowait => ("machine", -1),
            Sampled::GpuProcessSm { device, .. } | Sampled::GpuCounter { device, .. } => {
                ("gpu", device as i64)
            }
        }
    }
}

/// A share in percent to two decimals.
fn pct(part: u64, whole: u64) -> f64 {
    (part as f64 / whole as f64 * 10_000.0).round() / 100.0
}

/// Calls `f(counter, name, ts, value)` for every value of the samplers' percentage
/// counters (see [`Sampled`]; the name is the counter's on its track). A share between
/// two samples is given at the first of them (it holds until the next); NVML's
/// per-process shares, which describe the period before their sample, at their
/// sample, those `nvml` keeps ([`ProcessView::nvml_processes`]).
pub fn sampled_counters(t: &Trace, nvml: &[bool], mut f: impl FnMut(Sampled, &str, u64, f64)) {
    let mut last: HashMap<u32, (u64, u64)> = HashMap::new();
    for s in &t.thread_cpu {
        if let Some((ts, cpu)) = last.insert(s.tid, (s.ts, s.cpu_ns)) {
            if s.ts > ts {
                let v = pct(s.cpu_ns.saturating_sub(cpu), s.ts - ts).min(100.0);
                f(Sampled::ThreadCpu { tid: s.tid }, "CPU %", ts, v);
            }
        }
    }
    last.clear();
    let mut names: HashMap<u32, String> = HashMap::new();
    for s in &t.proc_samples {
        if s.flags & fmt::PROC_FLAG_THREAD != 0 {
            continue;
        }
        if let Some((ts, cpu)) = last.insert(s.pid, (s.ts, s.cpu_ns)) {
            if s.ts > ts {
                let name = names.entry(s.pid).or_insert_with(|| {
                    let comm = t.str(s.comm);
                    let comm = if comm.is_empty() { "?" } else { comm };
                    format!("pid {} ({comm}) CPU %", s.pid)
                });
                let v = pct(s.cpu_ns.saturating_sub(cpu), s.ts - ts);
                f(Sampled::ProcessCpu { pid: s.pid }, name, ts, v);
            }
        }
    }
    for w in t.machine.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        let d = |x: u64, y: u64| y.saturating_sub(x);
        let busy = d(a.busy_ns, b.busy_ns);
        let iowait = d(a.iowait_ns, b.iowait_ns);
        let total = busy
            .saturating_add(iowait)
            .saturating_add(d(a.idle_ns, b.idle_ns))
            .saturating_add(d(a.steal_ns, b.steal_ns));
        if b.ts > a.ts && total > 0 {
            f(
                Sampled::MachineBusy,
                "machine CPU busy %",
                a.ts,
                pct(busy, total),
            );
            f(
                Sampled::MachineIowait,
                "machine iowait %",
                a.ts,
                pct(iowait, total),
            );
        }
    }
    let mut names: HashMap<(u32, u32), String> = HashMap::new();
    for (p, _) in t.gpu_processes.iter().zip(nvml).filter(|x| *x.1) {
        if p.flags & fmt::GPU_PROC_SELF != 0 || p.sm_pct == fmt::ENV_NA {
            continue;
        }
        let name = names.entry((p.device, p.pid)).or_insert_with(|| {
            let comm = t.str(p.name);
            let comm = if comm.is_empty() { "?" } else { comm };
            format!("pid {} ({comm}) SM %", p.pid)
        });
        let key = Sampled::GpuProcessSm {
            device: p.device,
            pid: p.pid,
        };
        f(key, name, p.ts, p.sm_pct as f64);
    }
    // GPU counter samples (NVML GPM, or CUPTI PM in older traces): hundredths of a
    // percent over [start, end), given at the start.
    const NAMES: [&str; 11] = [
        "SM active % (counters)",
        "occupancy % (counters)",
        "tensor active % (counters)",
        "DRAM % of peak (counters)",
        "FP64 pipe % (counters)",
        "FP32 pipe % (counters)",
        "FP16 pipe % (counters)",
        "integer pipe % (counters)",
        "tensor DFMA % (counters)",
        "tensor HMMA % (counters)",
        "tensor IMMA % (counters)",
    ];
    for c in &t.counter_samples {
        let values = c.percentages();
        for (which, v) in values.into_iter().enumerate() {
            if v != fmt::ENV_NA {
                let key = Sampled::GpuCounter {
                    device: c.device,
                    which: which as u8,
                };
                f(key, NAMES[which], c.start, v as f64 / 100.0);
            }
        }
    }
}

/// The file a format writes for one input when the user named none: beside the first
/// trace, its name with `suffix` for its extension.
pub fn default_output(first: &Path, suffix: &str) -> PathBuf {
    let stem = first
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "trace".into());
    first.with_file_name(format!("{stem}{suffix}"))
}

/// A stretch of time a thread's Python stack samples put in one place: consecutive
/// samples whose place (the innermost frame of the user's code, see
/// [`crate::report::view::place_of`]) is the same.
pub struct PySpan {
    pub tid: u32,
    /// From the first sample to the next sample elsewhere (or, after the thread's last
    /// sample or a pause in its samples, one sampling period on).
    pub start: u64,
    pub end: u64,
    /// `train.py:43 in main`.
    pub place: String,
    pub user_code: bool,
    /// The innermost frame most seen in the span (`selectors.py:415 in select`).
    pub innermost: String,
    /// The first sample's whole stack, innermost first, one frame a line.
    pub stack: String,
    pub samples: u32,
}

/// The sampling period of a thread's samples: the median interval between them.
fn sample_period(ts: &[u64]) -> u64 {
    let mut d: Vec<u64> = ts
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]))
        .filter(|&x| x > 0)
        .collect();
    if d.is_empty() {
        return 10_000_000;
    }
    let mid = d.len() / 2;
    *d.select_nth_unstable(mid).1
}

/// A frame as a place: (file, line, function) string ids.
type FrameKey = (u32, u32, u32);

fn key(x: &fmt::PyFrame) -> FrameKey {
    (x.file, x.line, x.function)
}

/// Calls `f` for each [`PySpan`] of each sampled thread, in time order per thread.
/// A sample more than three periods after the one before starts a new span (the
/// sampler did not see the thread meanwhile).
pub fn python_spans(t: &Trace, mut f: impl FnMut(&PySpan)) {
    use crate::report::view::{place_of, short_file};
    let name = |(file, line, function): FrameKey| {
        format!("{}:{line} in {}", short_file(t.str(file)), t.str(function))
    };
    // The span being built: its place, and how often each innermost frame was seen.
    struct Open {
        span: PySpan,
        place: FrameKey,
        inners: HashMap<FrameKey, u32>,
    }
    let mut close = |o: Open, end: u64| {
        let mut span = o.span;
        span.end = end;
        if let Some((&k, _)) = o
            .inners
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        {
            span.innermost = name(k);
        }
        f(&span);
    };
    for samples in t.py_samples.chunk_by(|a, b| a.tid == b.tid) {
        let ts: Vec<u64> = samples.iter().map(|s| s.ts).collect();
        let period = sample_period(&ts);
        let mut open: Option<Open> = None;
        let mut last = 0u64;
        for s in samples {
            let Some(st) = t.py_stack(s.stack) else {
                continue;
            };
            let Some((p, user, inner)) = place_of(t, st) else {
                continue;
            };
            let pause = s.ts.saturating_sub(last) > period.saturating_mul(3);
            match open.as_mut() {
                Some(o) if o.place == key(p) && !pause => {
                    o.span.samples += 1;
                    *o.inners.entry(key(inner)).or_default() += 1;
                    last = s.ts;
                    continue;
                }
                _ => {}
            }
            if let Some(o) = open.take() {
                close(
                    o,
                    if pause {
                        last.saturating_add(period)
                    } else {
                        s.ts
                    },
                );
            }
            open = Some(Open {
                span: PySpan {
                    tid: s.tid,
                    start: s.ts,
                    end: s.ts,
                    place: name(key(p)),
                    user_code: user,
                    innermost: String::new(),
                    stack: st
                        .frames
                        .iter()
                        .map(|x| name(key(x)))
                        .collect::<Vec<_>>()
                        .join("\n"),
                    samples: 1,
                },
                place: key(p),
                inners: HashMap::from([(key(inner), 1)]),
            });
            last = s.ts;
        }
        if let Some(o) = open {
            close(o, last.saturating_add(period));
        }
    }
}
