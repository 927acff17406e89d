//! The environment as the trace recorded it (facts, NVML samples, driver errors), and
//! what it did to the job: another process on the GPU, throttled clocks, a PCIe link
//! below its maximum while copies ran, CUDA versions that do not fit the driver, CPUs
//! far from the GPU, Xid and ECC errors. Each check returns the measured numbers; the
//! `env_*` findings are written from them.
//!
//! NVML samples are instants; a sample at `ts` describes the period since the sample
//! before it on the same device (the sampler's tick), so time is counted over those
//! periods, clipped to the range asked about.

pub mod rules;

use crate::model::trace::Trace;
use gputrace_env::facts::keys;
use gputrace_format::{self as fmt, FACT_HOST};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// The value of a fact (it lives with the trace model, which reads it too).
pub use crate::model::trace::fact;

/// Every fact as (device, key, value), in the order recorded.
pub fn facts(t: &Trace) -> Vec<(u32, &str, &str)> {
    t.facts
        .iter()
        .map(|f| (f.device, t.str(f.key), t.str(f.value)))
        .collect()
}

/// Whether the trace has environment data at all (traces before format 2.1 have none).
pub fn recorded(t: &Trace) -> bool {
    !t.facts.is_empty() || !t.gpu_samples.is_empty()
}

/// NVML's state in the trace: `None` when NVML was used, else why not.
pub fn nvml_unavailable(t: &Trace) -> Option<String> {
    rules::nvml_unavailable(t).map(str::to_string)
}

/// Each sample's period on its device: (device, from, to, index into gpu_samples).
/// The first sample of a device stands for the time since the trace began (the
/// sampler's first tick comes a little after the trace opens: what it reads held
/// then too).
fn periods(t: &Trace) -> Vec<(u32, u64, u64, usize)> {
    let begin = trace_begin(t);
    let mut last: HashMap<u32, u64> = HashMap::new();
    let mut out = Vec::with_capacity(t.gpu_samples.len());
    for (i, g) in t.gpu_samples.iter().enumerate() {
        let from = last
            .insert(g.device, g.ts)
            .unwrap_or(begin.unwrap_or(g.ts).min(g.ts));
        out.push((g.device, from, g.ts, i));
    }
    out
}

/// When the trace began: its first state change or recorded interval.
fn trace_begin(t: &Trace) -> Option<u64> {
    let state = t.states.first().map(|s| s.0);
    let span = t.span().map(|s| s.0);
    match (state, span) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn clip(a: u64, b: u64, lo: u64, hi: u64) -> u64 {
    b.min(hi).saturating_sub(a.max(lo))
}

/// NVML devices the traced process was seen on; all sampled devices when it never
/// was (another pid namespace hides it from NVML's list).
pub fn own_devices(t: &Trace) -> Vec<u32> {
    let mut own: Vec<u32> = t
        .gpu_processes
        .iter()
        .filter(|p| p.flags & fmt::GPU_PROC_SELF != 0)
        .map(|p| p.device)
        .collect();
    if own.is_empty() {
        own = t.gpu_samples.iter().map(|g| g.device).collect();
    }
    own.sort_unstable();
    own.dedup();
    own
}

/// Another process that used a GPU of the job.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct SharedGpu {
    pub device: u32,
    pub pid: u32,
    pub name: String,
    /// Time (in the range) in which it had a non-zero SM share, and that as a share of
    /// the range.
    pub active_ns: u64,
    pub active_pct: f64,
    /// Its mean share of the SM time while active, and ours over the same samples.
    pub sm_share_pct: f64,
    pub our_sm_share_pct: Option<f64>,
    /// Device memory it held (most seen).
    pub memory_bytes: Option<u64>,
    /// Our devices' idle time while it was active: the GPU was busy with it.
    pub idle_while_active_ns: u64,
    /// Our devices' busy time while it was active (time-sliced with it).
    pub busy_while_active_ns: u64,
    /// Our kernels' durations while it was active against while not.
    pub slowdown: Option<Slowdown>,
    /// Listed on the GPU but never with SM time.
    pub idle: bool,
}

/// How much slower the same kernels ran while another process was active.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Slowdown {
    /// Kernel names seen both inside and outside its activity.
    pub names: usize,
    /// Kernels compared (inside its activity).
    pub kernels: usize,
    /// Their time inside, against the same kernels at their median outside duration.
    pub ratio: f64,
    /// Kernel time lost: inside time minus what it would have been at the outside
    /// medians.
    pub extra_ns: u64,
}

/// Other processes on the job's GPUs within `[lo, hi)`.
pub fn shared_gpu(t: &Trace, lo: u64, hi: u64) -> Vec<SharedGpu> {
    let own = own_devices(t);
    let per = periods(t);
    // The period each process sample belongs to: the device's previous sample up to it.
    let mut tick_from: BTreeMap<(u32, u64), u64> = BTreeMap::new();
    for &(d, from, to, _) in &per {
        tick_from.insert((d, to), from);
    }
    struct Acc {
        name: u32,
        active: Vec<(u64, u64)>,
        sm: Vec<f64>,
        mem: Option<u64>,
        listed: bool,
    }
    let mut others: BTreeMap<(u32, u32), Acc> = BTreeMap::new();
    // Our SM share by (device, ts).
    let mut ours: HashMap<(u32, u64), u32> = HashMap::new();
    for p in &t.gpu_processes {
        if !own.contains(&p.device) {
            continue;
        }
        if p.flags & fmt::GPU_PROC_SELF != 0 {
            if p.sm_pct != fmt::ENV_NA {
                ours.insert((p.device, p.ts), p.sm_pct);
            }
            continue;
        }
        let a = others.entry((p.device, p.pid)).or_insert(Acc {
            name: p.name,
            active: Vec::new(),
            sm: Vec::new(),
            mem: None,
            listed: false,
        });
        if p.name != 0 {
            a.name = p.name;
        }
        a.listed |= p.flags & fmt::GPU_PROC_LISTED != 0;
        if p.used_memory != fmt::ENV_NA64 {
            a.mem = Some(a.mem.unwrap_or(0).max(p.used_memory));
        }
        if p.sm_pct != fmt::ENV_NA && p.sm_pct > 0 {
            let from = tick_from.get(&(p.device, p.ts)).copied().unwrap_or(p.ts);
            if clip(from, p.ts, lo, hi) > 0 || (from == p.ts && p.ts >= lo && p.ts < hi) {
                a.active.push((from.max(lo), p.ts.min(hi)));
                a.sm.push(p.sm_pct as f64);
            }
        }
    }
    // Our busy time, only when another process is there to set it against.
    let mut busy = None;
    let mut out = Vec::new();
    for ((device, pid), a) in others {
        if a.sm.is_empty() && !a.listed {
            continue;
        }
        let busy = busy.get_or_insert_with(|| busy_by_device(t));
        let active = merge(a.active.clone());
        let active_ns: u64 = active.iter().map(|(s, e)| e - s).sum();
        let our: Vec<f64> = a
            .active
            .iter()
            .filter_map(|(_, ts)| ours.get(&(device, *ts)).map(|v| *v as f64))
            .collect();
        // CUDA device ids and NVML indices agree on single-GPU jobs, the common case;
        // with several, our busy time is taken over all our devices.
        let our_busy: Vec<(u64, u64)> = if busy.len() == 1 {
            busy.values().next().cloned().unwrap_or_default()
        } else {
            merge(busy.values().flatten().copied().collect())
        };
        let idle_while_active = active_ns.saturating_sub(overlap(&active, &our_busy));
        out.push(SharedGpu {
            device,
            pid,
            name: t.str(a.name).to_string(),
            active_ns,
            active_pct: 100.0 * active_ns as f64 / (hi.saturating_sub(lo)).max(1) as f64,
            sm_share_pct: mean(&a.sm).unwrap_or(0.0),
            our_sm_share_pct: mean(&our),
            memory_bytes: a.mem,
            idle_while_active_ns: if a.sm.is_empty() {
                0
            } else {
                idle_while_active
            },
            busy_while_active_ns: active_ns - idle_while_active,
            slowdown: slowdown(t, &active, lo, hi),
            idle: a.sm.is_empty(),
        });
    }
    out.sort_by(|a, b| b.active_ns.cmp(&a.active_ns).then(a.pid.cmp(&b.pid)));
    out
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn merge(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.retain(|(s, e)| e > s);
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (s, e) in v {
        match out.last_mut() {
            Some(l) if s <= l.1 => l.1 = l.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// Total overlap of two merged interval lists.
fn overlap(a: &[(u64, u64)], b: &[(u64, u64)]) -> u64 {
    let (mut i, mut j, mut n) = (0, 0, 0u64);
    while i < a.len() && j < b.len() {
        n += clip(a[i].0, a[i].1, b[j].0, b[j].1);
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    n
}

fn inside(iv: &[(u64, u64)], ts: u64) -> bool {
    let i = iv.partition_point(|(s, _)| *s <= ts);
    i > 0 && ts < iv[i - 1].1
}

/// The job's GPU work per CUDA device, merged into busy intervals.
fn busy_by_device(t: &Trace) -> BTreeMap<u32, Vec<(u64, u64)>> {
    let mut by: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    // Each table is in start order: work that overlaps the last interval kept joins it
    // as it comes (a busy GPU's back-to-back kernels make few intervals, not one each);
    // `merge` then puts the three tables' intervals together.
    let mut add = |d: u32, s: u64, e: u64| {
        let v = by.entry(d).or_default();
        match v.last_mut() {
            _ if e <= s => {}
            Some(l) if s >= l.0 && s <= l.1 => l.1 = l.1.max(e),
            _ => v.push((s, e)),
        }
    };
    for k in &t.kernels {
        add(k.device, k.start, k.end);
    }
    for m in &t.memcpys {
        add(m.device, m.start, m.end);
    }
    for m in &t.memsets {
        add(m.device, m.start, m.end);
    }
    by.into_iter().map(|(d, v)| (d, merge(v))).collect()
}

/// Same-name kernels starting inside `active` against those outside (within the
/// range): the time ratio at the outside medians.
pub fn slowdown(t: &Trace, active: &[(u64, u64)], lo: u64, hi: u64) -> Option<Slowdown> {
    let mut by: HashMap<u32, (Vec<u64>, Vec<u64>)> = HashMap::new();
    for k in &t.kernels {
        if k.start < lo || k.start >= hi || k.end <= k.start {
            continue;
        }
        let e = by.entry(k.name).or_default();
        if inside(active, k.start) {
            e.0.push(k.end - k.start);
        } else {
            e.1.push(k.end - k.start);
        }
    }
    let (mut names, mut kernels, mut inside_ns, mut expect_ns) = (0, 0, 0u64, 0u64);
    for (_, (ins, mut outs)) in by {
        if ins.is_empty() || outs.len() < 3 {
            continue;
        }
        outs.sort_unstable();
        let med = outs[outs.len() / 2];
        names += 1;
        kernels += ins.len();
        inside_ns += ins.iter().sum::<u64>();
        expect_ns += med * ins.len() as u64;
    }
    (names > 0 && expect_ns > 0).then(|| Slowdown {
        names,
        kernels,
        ratio: inside_ns as f64 / expect_ns as f64,
        extra_ns: inside_ns.saturating_sub(expect_ns),
    })
}

/// Clocks held down by power, heat or a hardware slowdown on one GPU.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Throttle {
    pub device: u32,
    /// Names of the throttle reasons seen.
    pub reasons: Vec<String>,
    /// The same as NVML's bits (`fmt::CLOCK_REASON_*`).
    #[serde(skip)]
    pub reason_bits: u64,
    pub throttled_ns: u64,
    pub throttled_pct: f64,
    /// Median SM clock while throttled, and the maximum.
    pub sm_clock_mhz: u32,
    pub sm_clock_max_mhz: u32,
    /// How much lower than the maximum, in percent.
    pub clock_drop_pct: f64,
    /// Highest temperature and power draw seen while throttled, and the power limit.
    pub max_temperature_c: Option<u32>,
    pub max_power_mw: Option<u32>,
    pub power_limit_mw: Option<u32>,
}

/// Throttling on the job's GPUs within `[lo, hi)`.
pub fn throttled(t: &Trace, lo: u64, hi: u64) -> Vec<Throttle> {
    let own = own_devices(t);
    let mut out = Vec::new();
    for d in own {
        let (mut ns, mut mask, mut clocks, mut max) = (0u64, 0u64, Vec::new(), 0u32);
        let (mut temp, mut power, mut limit) = (None::<u32>, None::<u32>, None::<u32>);
        for &(dev, from, to, i) in &periods(t) {
            let g = &t.gpu_samples[i];
            if dev != d || g.clock_reasons == fmt::ENV_NA64 {
                continue;
            }
            let m = g.clock_reasons & fmt::CLOCK_REASONS_THROTTLE;
            if m == 0 {
                continue;
            }
            let len = clip(from, to, lo, hi);
            let at = from == to && to >= lo && to < hi;
            if len == 0 && !at {
                continue;
            }
            ns += len;
            mask |= m;
            if g.sm_clock_mhz != fmt::ENV_NA {
                clocks.push(g.sm_clock_mhz);
            }
            if g.sm_clock_max_mhz != fmt::ENV_NA {
                max = max.max(g.sm_clock_max_mhz);
            }
            let some = |v: u32| (v != fmt::ENV_NA).then_some(v);
            temp = temp.max(some(g.temperature_c));
            power = power.max(some(g.power_mw));
            limit = limit.or(some(g.power_limit_mw));
        }
        if mask == 0 {
            continue;
        }
        clocks.sort_unstable();
        let clock = clocks.get(clocks.len() / 2).copied().unwrap_or(0);
        out.push(Throttle {
            device: d,
            reasons: fmt::clock_reason_names(mask)
                .into_iter()
                .map(String::from)
                .collect(),
            reason_bits: mask,
            throttled_ns: ns,
            throttled_pct: 100.0 * ns as f64 / hi.saturating_sub(lo).max(1) as f64,
            sm_clock_mhz: clock,
            sm_clock_max_mhz: max,
            clock_drop_pct: if max > 0 && clock > 0 {
                100.0 * (max.saturating_sub(clock)) as f64 / max as f64
            } else {
                0.0
            },
            max_temperature_c: temp,
            max_power_mw: power,
            power_limit_mw: limit,
        });
    }
    out
}

/// A PCIe link below its maximum while the job copied over it.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct PcieDegraded {
    pub device: u32,
    pub gen: u32,
    pub gen_max: u32,
    pub width: u32,
    pub width_max: u32,
    /// Host<->device copy time in periods where the link was degraded, and in all.
    pub copy_ns_degraded: u64,
    pub copy_ns: u64,
    /// Copy bandwidth reachable at this link against the full one (gen x width).
    pub link_pct: f64,
}

/// PCIe links below their maximum in periods in which host<->device copies ran. (GPUs
/// lower the link generation when idle to save power: only periods with copies count.)
pub fn pcie_degraded(t: &Trace, lo: u64, hi: u64) -> Vec<PcieDegraded> {
    let copies: Vec<(u64, u64)> = {
        let mut v: Vec<(u64, u64)> = t
            .memcpys
            .iter()
            .filter(|m| {
                matches!(
                    fmt::CopyKind::from_u8(m.copy_kind),
                    fmt::CopyKind::HtoD | fmt::CopyKind::DtoH
                )
            })
            .map(|m| (m.start.max(lo), m.end.min(hi)))
            .collect();
        v.retain(|(s, e)| e > s);
        merge(v)
    };
    let copy_ns: u64 = copies.iter().map(|(s, e)| e - s).sum();
    let mut out: BTreeMap<u32, PcieDegraded> = BTreeMap::new();
    for &(d, from, to, i) in &periods(t) {
        let g = &t.gpu_samples[i];
        if rules::pcie_below_max(g.pcie_gen, g.pcie_gen_max, g.pcie_width, g.pcie_width_max)
            .is_none()
        {
            continue;
        }
        let c = overlap(&[(from.max(lo), to.min(hi))], &copies);
        if c == 0 {
            continue;
        }
        let e = out.entry(d).or_insert(PcieDegraded {
            device: d,
            gen: g.pcie_gen,
            gen_max: g.pcie_gen_max,
            width: g.pcie_width,
            width_max: g.pcie_width_max,
            copy_ns_degraded: 0,
            copy_ns,
            link_pct: 0.0,
        });
        e.copy_ns_degraded += c;
        e.gen = e.gen.min(g.pcie_gen);
        e.width = e.width.min(g.pcie_width);
    }
    out.into_values()
        .map(|mut p| {
            p.link_pct =
                100.0 * link_rate(p.gen, p.width) / link_rate(p.gen_max, p.width_max).max(1e-9);
            p
        })
        .collect()
}

/// Usable GB/s per direction of a PCIe link (per-lane rates after encoding).
pub fn link_rate(gen: u32, width: u32) -> f64 {
    let lane = match gen {
        1 => 0.25,
        2 => 0.5,
        3 => 0.985,
        4 => 1.969,
        5 => 3.938,
        6 => 7.563,
        _ => 0.0,
    };
    lane * width as f64
}

/// CUDA versions that do not fit together.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Compat {
    /// [`rules::Mismatch::kind`]: `runtime_newer_than_driver`, `forward_compat_libcuda`,
    /// `torch_runtime_mismatch`, `torch_newer_than_driver`.
    pub kind: String,
    pub detail: String,
    /// Whether it breaks CUDA rather than runs in a compatibility mode.
    pub serious: bool,
}

/// Checks the recorded versions against each other ([`rules::cuda_versions`]).
pub fn cuda_compat(t: &Trace) -> Vec<Compat> {
    let f = |k| fact(t, FACT_HOST, k);
    rules::cuda_versions(t)
        .into_iter()
        .map(|m| {
            use rules::Mismatch::*;
            let detail = match &m {
                RuntimeNewerThanDriver { runtime: r, driver: d } => format!(
                    "the CUDA runtime is {}.{} but the driver ({}) supports CUDA up to {}.{}: {}",
                    r.0,
                    r.1,
                    f(keys::DRIVER_VERSION).unwrap_or("?"),
                    d.0,
                    d.1,
                    if m.serious() {
                        "it needs the forward-compatibility package, or fails with cudaErrorInsufficientDriver"
                    } else {
                        "minor-version compatibility mode (newer PTX cannot be JIT-compiled; some features are off)"
                    }
                ),
                ForwardCompatLibcuda { libcuda, driver } => format!(
                    "the process loaded libcuda {libcuda} while the kernel driver is {driver} (a CUDA forward-compatibility libcuda)"
                ),
                TorchRuntimeMismatch { torch_cuda: tc, runtime: r } => format!(
                    "torch {} was built for CUDA {}.{} but the process loaded CUDA runtime {}.{}",
                    f(keys::TORCH_VERSION).unwrap_or("?"),
                    tc.0,
                    tc.1,
                    r.0,
                    r.1
                ),
                TorchNewerThanDriver { torch_cuda: tc, driver: d } => format!(
                    "torch {} was built for CUDA {}.{} but the driver ({}) supports CUDA up to {}.{}",
                    f(keys::TORCH_VERSION).unwrap_or("?"),
                    tc.0,
                    tc.1,
                    f(keys::DRIVER_VERSION).unwrap_or("?"),
                    d.0,
                    d.1
                ),
            };
            Compat {
                kind: m.kind().into(),
                detail,
                serious: m.serious(),
            }
        })
        .collect()
}

/// The process's CPUs against the CPUs close to its GPU.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Affinity {
    pub device: u32,
    pub process_cpus: String,
    pub local_cpus: String,
    /// Share of the process's CPUs that are local to the GPU.
    pub local_pct: f64,
}

/// Processes pinned (in part or whole) to CPUs far from their GPU ([`rules::far_cpus`]
/// over the job's own GPUs).
pub fn cpu_affinity(t: &Trace) -> Vec<Affinity> {
    use gputrace_env::facts::format_cpulist;
    rules::far_cpus(t, &own_devices(t))
        .into_iter()
        .map(|a| Affinity {
            device: a.device,
            process_cpus: format_cpulist(&a.process_cpus),
            local_cpus: format_cpulist(&a.local_cpus),
            local_pct: a.local_pct,
        })
        .collect()
}

/// Xid and ECC errors within `[lo, hi)` (all of them when the range is the trace's).
pub fn gpu_errors(t: &Trace, lo: u64, hi: u64) -> Vec<&fmt::GpuEvent> {
    t.gpu_events
        .iter()
        .filter(|e| e.ts >= lo && e.ts < hi && e.kind != fmt::GPU_EVENT_ECC_CORRECTED)
        .collect()
}

/// The range the environment checks cover when the caller has none: from the trace's
/// beginning to its last sample.
pub fn sample_range(t: &Trace) -> Option<(u64, u64)> {
    let first = t.gpu_samples.first()?.ts;
    let lo = trace_begin(t).unwrap_or(first).min(first);
    let hi = t.gpu_samples.last()?.ts;
    Some((lo, hi.max(lo + 1)))
}

/// What the environment looked like over a range: the versions, and per GPU of the
/// job the NVML samples' clocks, power, temperature and link (the report's `env` line).
#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct EnvSummary {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// The CUDA version the driver supports.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda_driver: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda_runtime: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub torch: Option<String>,
    /// Why there are no NVML samples (not installed, refused, off), when there are none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvml_unavailable: Option<String>,
    pub gpus: Vec<GpuSummary>,
}

#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct GpuSummary {
    pub device: u32,
    pub samples: usize,
    pub sm_clock_mhz_median: Option<u32>,
    pub sm_clock_max_mhz: Option<u32>,
    pub power_w_median: Option<f64>,
    pub power_limit_w: Option<f64>,
    pub temperature_c_max: Option<u32>,
    /// Current and maximum link generation and width, from the last sample.
    pub pcie: Option<[u32; 4]>,
    /// nvidia-smi's GPU-Util over the samples, mean.
    pub gpu_util_pct_mean: Option<f64>,
    /// Other processes NVML listed on this GPU.
    pub other_processes: usize,
}

fn median(mut v: Vec<u32>) -> Option<u32> {
    v.sort_unstable();
    v.get(v.len() / 2).copied()
}

/// The environment over [lo, hi); `None` when the trace recorded none.
pub fn summary(t: &Trace, lo: u64, hi: u64) -> Option<EnvSummary> {
    if !recorded(t) {
        return None;
    }
    let host = |k| fact(t, FACT_HOST, k).map(str::to_string);
    let mut s = EnvSummary {
        driver: host(keys::DRIVER_VERSION),
        cuda_driver: host(keys::CUDA_DRIVER_VERSION),
        cuda_runtime: host(keys::CUDA_RUNTIME_VERSION),
        torch: host(keys::TORCH_VERSION),
        nvml_unavailable: nvml_unavailable(t),
        gpus: Vec::new(),
    };
    let na = |v: u32| (v != fmt::ENV_NA).then_some(v);
    for d in own_devices(t) {
        let mut in_range: Vec<&fmt::GpuSample> = t
            .gpu_samples
            .iter()
            .filter(|g| g.device == d && g.ts >= lo && g.ts < hi)
            .collect();
        if in_range.is_empty() {
            // A range shorter than the sampling period: the nearest sample after it.
            in_range.extend(t.gpu_samples.iter().find(|g| g.device == d && g.ts >= lo));
        }
        if in_range.is_empty() {
            continue;
        }
        let col = |f: &dyn Fn(&fmt::GpuSample) -> u32| -> Vec<u32> {
            in_range.iter().filter_map(|g| na(f(g))).collect()
        };
        let last = in_range[in_range.len() - 1];
        let util = col(&|g| g.gpu_util_pct);
        let mut others: Vec<u32> = t
            .gpu_processes
            .iter()
            .filter(|p| {
                p.device == d && p.flags & fmt::GPU_PROC_SELF == 0 && p.ts >= lo && p.ts < hi
            })
            .map(|p| p.pid)
            .collect();
        others.sort_unstable();
        others.dedup();
        let pcie = [
            last.pcie_gen,
            last.pcie_gen_max,
            last.pcie_width,
            last.pcie_width_max,
        ];
        s.gpus.push(GpuSummary {
            device: d,
            samples: in_range.len(),
            sm_clock_mhz_median: median(col(&|g| g.sm_clock_mhz)),
            sm_clock_max_mhz: na(last.sm_clock_max_mhz),
            power_w_median: median(col(&|g| g.power_mw)).map(|v| v as f64 / 1000.0),
            power_limit_w: na(last.power_limit_mw).map(|v| v as f64 / 1000.0),
            temperature_c_max: col(&|g| g.temperature_c).into_iter().max(),
            pcie: pcie.iter().all(|&v| v != fmt::ENV_NA).then_some(pcie),
            gpu_util_pct_mean: (!util.is_empty())
                .then(|| util.iter().map(|&v| v as f64).sum::<f64>() / util.len() as f64),
            other_processes: others.len(),
        });
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fmt::{Event, GpuProcess, GpuSample, Kernel};

    const MS: u64 = 1_000_000;

    fn s(id: u32, text: &str) -> Event {
        Event::Str {
            id,
            text: text.into(),
        }
    }

    fn sample(ts: u64) -> Event {
        Event::GpuSample(GpuSample {
            ts,
            device: 0,
            sm_clock_mhz: 1980,
            sm_clock_max_mhz: 1980,
            clock_reasons: 0,
            pcie_gen: 5,
            pcie_gen_max: 5,
            pcie_width: 16,
            pcie_width_max: 16,
            ..Default::default()
        })
    }

    fn proc_(ts: u64, pid: u32, sm: u32, flags: u8) -> Event {
        Event::GpuProcess(GpuProcess {
            ts,
            device: 0,
            pid,
            name: if flags & fmt::GPU_PROC_SELF != 0 {
                0
            } else {
                1
            },
            used_memory: 1 << 30,
            sm_pct: sm,
            mem_pct: 0,
            flags: flags | fmt::GPU_PROC_LISTED | fmt::GPU_PROC_UTIL,
        })
    }

    fn kernel(start: u64, dur: u64) -> Event {
        Event::Kernel(Kernel {
            start,
            end: start + dur,
            name: 2,
            ..Default::default()
        })
    }

    /// 10 ticks of 100 ms; the other process is active in ticks 5..=9 (500-1000 ms);
    /// our kernel takes 1 ms alone and 1.5 ms beside it.
    fn shared_trace() -> Trace {
        let mut ev = vec![s(1, "matmul_bench"), s(2, "gemm")];
        for i in 0..=10u64 {
            let ts = i * 100 * MS;
            ev.push(sample(ts));
            ev.push(proc_(
                ts,
                100,
                if i >= 6 { 60 } else { 100 },
                fmt::GPU_PROC_SELF,
            ));
            if i >= 6 {
                ev.push(proc_(ts, 200, 40, 0));
            }
        }
        for i in 0..100u64 {
            let start = i * 10 * MS;
            ev.push(kernel(
                start,
                if start >= 500 * MS { 1_500_000 } else { MS },
            ));
        }
        Trace::from_events(Default::default(), ev)
    }

    #[test]
    fn another_process_is_found_with_its_share_and_our_slowdown() {
        let t = shared_trace();
        let got = shared_gpu(&t, 0, 1000 * MS);
        assert_eq!(got.len(), 1, "{got:?}");
        let g = &got[0];
        assert_eq!((g.pid, g.name.as_str()), (200, "matmul_bench"));
        assert_eq!(g.active_ns, 500 * MS);
        assert!((g.active_pct - 50.0).abs() < 1e-9);
        assert_eq!(g.sm_share_pct, 40.0);
        assert_eq!(g.our_sm_share_pct, Some(60.0));
        let sd = g.slowdown.as_ref().expect("kernels inside and outside");
        assert!((sd.ratio - 1.5).abs() < 1e-9, "{sd:?}");
        assert_eq!(sd.kernels, 50);
        assert_eq!(sd.extra_ns, 50 * 500_000);
        // Our GPU was idle 8.5 of every 10 ms while it was active.
        assert_eq!(g.idle_while_active_ns, 500 * MS - 50 * 1_500_000);
    }

    #[test]
    fn the_summary_covers_the_range_and_counts_other_processes_once() {
        let mut ev = vec![s(1, "x")];
        for i in 0..5u64 {
            ev.push(sample(i * 100 * MS));
            ev.push(proc_(i * 100 * MS, 100, 100, fmt::GPU_PROC_SELF));
            ev.push(proc_(i * 100 * MS, 200, 0, 0));
        }
        let t = Trace::from_events(Default::default(), ev);
        let e = summary(&t, 100 * MS, 400 * MS).expect("samples");
        assert_eq!(e.gpus.len(), 1);
        let g = &e.gpus[0];
        assert_eq!((g.device, g.samples, g.other_processes), (0, 3, 1));
        assert_eq!(g.sm_clock_mhz_median, Some(1980));
        // Nothing recorded: no summary.
        assert_eq!(
            summary(&Trace::from_events(Default::default(), vec![]), 0, 1),
            None
        );
    }

    #[test]
    fn the_process_itself_is_not_another() {
        let mut ev = vec![s(1, "x")];
        for i in 0..3u64 {
            ev.push(sample(i * 100 * MS));
            ev.push(proc_(i * 100 * MS, 100, 100, fmt::GPU_PROC_SELF));
        }
        let t = Trace::from_events(Default::default(), ev);
        assert!(shared_gpu(&t, 0, 300 * MS).is_empty());
    }

    #[test]
    fn throttling_counts_only_throttle_reasons() {
        let mut ev = Vec::new();
        for i in 0..=4u64 {
            ev.push(Event::GpuSample(GpuSample {
                ts: i * 100 * MS,
                device: 0,
                sm_clock_mhz: if i >= 3 { 1200 } else { 1980 },
                sm_clock_max_mhz: 1980,
                clock_reasons: if i >= 3 {
                    fmt::CLOCK_REASON_HW_SLOWDOWN
                } else {
                    fmt::CLOCK_REASON_GPU_IDLE
                },
                ..Default::default()
            }));
        }
        let t = Trace::from_events(Default::default(), ev);
        let got = throttled(&t, 0, 400 * MS);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].reasons, vec!["hw_slowdown"]);
        assert_eq!(got[0].throttled_ns, 200 * MS);
        assert_eq!(got[0].sm_clock_mhz, 1200);
        assert!((got[0].clock_drop_pct - 100.0 * 780.0 / 1980.0).abs() < 1e-9);
    }

    #[test]
    fn a_slow_link_matters_only_where_copies_ran() {
        let mut ev = Vec::new();
        for i in 0..=2u64 {
            ev.push(Event::GpuSample(GpuSample {
                ts: i * 100 * MS,
                device: 0,
                pcie_gen: 3,
                pcie_gen_max: 5,
                pcie_width: 8,
                pcie_width_max: 16,
                ..Default::default()
            }));
        }
        let no_copies = Trace::from_events(Default::default(), ev.clone());
        assert!(pcie_degraded(&no_copies, 0, 200 * MS).is_empty());
        ev.push(Event::Memcpy(fmt::Memcpy {
            start: 150 * MS,
            end: 160 * MS,
            copy_kind: fmt::CopyKind::HtoD as u8,
            bytes: 1 << 30,
            ..Default::default()
        }));
        let t = Trace::from_events(Default::default(), ev);
        let got = pcie_degraded(&t, 0, 200 * MS);
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].gen, got[0].width), (3, 8));
        assert_eq!(got[0].copy_ns_degraded, 10 * MS);
        assert!((got[0].link_pct - 100.0 * 0.985 * 8.0 / (3.938 * 16.0)).abs() < 1e-6);
    }

    fn with_facts(pairs: &[(u32, &str, &str)]) -> Trace {
        let mut ev = Vec::new();
        let mut id = 1;
        for (d, k, v) in pairs {
            ev.push(s(id, k));
            ev.push(s(id + 1, v));
            ev.push(Event::Fact(fmt::Fact {
                ts: 0,
                device: *d,
                key: id,
                value: id + 1,
            }));
            id += 2;
        }
        Trace::from_events(Default::default(), ev)
    }

    #[test]
    fn versions_are_checked_against_the_driver() {
        let t = with_facts(&[
            (FACT_HOST, "cuda_runtime_version", "13.1.80"),
            (FACT_HOST, "cuda_driver_version", "13.0"),
            (FACT_HOST, "driver_version", "580.159.04"),
            (FACT_HOST, "libcuda_version", "580.159.04"),
            (FACT_HOST, "torch_cuda", "12.8"),
        ]);
        let kinds: Vec<String> = cuda_compat(&t).into_iter().map(|c| c.kind).collect();
        assert_eq!(
            kinds,
            vec!["runtime_newer_than_driver", "torch_runtime_mismatch"]
        );
        let ok = with_facts(&[
            (FACT_HOST, "cuda_runtime_version", "13.0.96"),
            (FACT_HOST, "cuda_driver_version", "13.0"),
        ]);
        assert!(cuda_compat(&ok).is_empty());
    }

    #[test]
    fn cpus_far_from_the_gpu_are_found() {
        let far = with_facts(&[
            (FACT_HOST, "process_cpus", "32-39"),
            (FACT_HOST, "host_cpus", "64"),
            (0, "local_cpus", "0-31"),
        ]);
        let mut far = far;
        far.gpu_samples.push(GpuSample::default());
        let got = cpu_affinity(&far);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].local_pct, 0.0);
        let mut near = with_facts(&[
            (FACT_HOST, "process_cpus", "0-7"),
            (FACT_HOST, "host_cpus", "64"),
            (0, "local_cpus", "0-31"),
        ]);
        near.gpu_samples.push(GpuSample::default());
        assert!(cpu_affinity(&near).is_empty());
    }

    #[test]
    fn nvml_status_reads_from_its_fact() {
        let t = with_facts(&[(FACT_HOST, "nvml", "no_permission: NVML refused access")]);
        assert_eq!(
            nvml_unavailable(&t).as_deref(),
            Some("no_permission: NVML refused access")
        );
        assert!(nvml_unavailable(&with_facts(&[(FACT_HOST, "nvml", "ok")])).is_none());
        assert!(nvml_unavailable(&Trace::default()).is_none());
    }
}
