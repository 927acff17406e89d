//! GPU performance counter samples over the steady state: the GPU's measured SM
//! activity, occupancy, tensor / FP / integer pipes and DRAM bandwidth, and the same per
//! kernel name. The samples come from NVML GPM, read by `gputrace run` / `attach` from
//! outside the job (the environment file), or from CUPTI PM sampling in older traces.
//!
//! A sample covers the whole GPU for its interval. A kernel name's values are the
//! time-weighted means of the samples it ran in, weighted by the overlap:
//! * **exact** when some samples were filled by that name alone (no other kernel name
//!   ran on the device during the sample, and the name's kernels covered at least
//!   [`FILL`] of it): then only those samples count;
//! * **mixed** otherwise (other kernels, or idle time, share every sample it ran in):
//!   the values describe the mix, not the kernel alone.

use gputrace_format::{self as fmt, CounterSample};
use serde::Serialize;
use std::collections::HashMap;

/// Share of a sample a kernel name must cover for the sample to count as its own.
pub const FILL: f64 = 0.9;

/// DRAM bandwidth (% of peak) from which a kernel name counts as memory-bound. On an
/// H200, NVML GPM reads elementwise chains on 2 GiB tensors at 58-59% and 8192^3 bf16
/// matmuls at 17%: streaming kernels do not reach the theoretical peak.
pub const MEMORY_DRAM_PCT: f64 = 40.0;
/// Tensor pipes (any precision, % of elapsed cycles) below which they count as idle.
pub const IDLE_TENSOR_PCT: f64 = 20.0;
/// Non-tensor FP pipes (the busiest of FP64/FP32/FP16) below which they count as idle.
pub const IDLE_FP_PCT: f64 = 30.0;
/// Tensor pipes from which work counts as compute-bound on them (healthy).
pub const TENSOR_BOUND_PCT: f64 = 50.0;
/// Occupancy (% of the warps an SM holds) below which busy SMs run few warps each.
pub const LOW_OCCUPANCY_PCT: f64 = 25.0;
/// SM activity from which SMs count as busy.
pub const BUSY_SM_PCT: f64 = 80.0;

/// What the measured values say of a kernel name (or the steady state).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// High DRAM bandwidth with the tensor and FP pipes idle.
    MemoryBound,
    /// Tensor pipes busy: compute-bound on them, as it should be.
    TensorBound,
    Neither,
}

impl Verdict {
    pub fn of(m: &Metrics) -> Verdict {
        let dram = m.dram_pct.unwrap_or(0.0);
        let tensor = m.tensor_active_pct.unwrap_or(0.0);
        if tensor >= TENSOR_BOUND_PCT {
            Verdict::TensorBound
        } else if dram >= MEMORY_DRAM_PCT
            && tensor < IDLE_TENSOR_PCT
            && m.fp_max_pct().unwrap_or(0.0) < IDLE_FP_PCT
        {
            Verdict::MemoryBound
        } else {
            Verdict::Neither
        }
    }

    /// The word `--json` writes.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::MemoryBound => "memory_bound",
            Verdict::TensorBound => "tensor_bound",
            Verdict::Neither => "",
        }
    }
}

/// The metrics, in [`values`]' order.
const SM: usize = 0;
const OCC: usize = 1;
const TENSOR: usize = 2;
const DRAM: usize = 3;
const FP64: usize = 4;
const FP32: usize = 5;
const FP16: usize = 6;
const INT: usize = 7;
const DFMA: usize = 8;
const HMMA: usize = 9;
const IMMA: usize = 10;
const N: usize = 11;

/// A sample's percentages (hundredths), [`fmt::ENV_NA`] where not given.
fn values(c: &CounterSample) -> [u32; N] {
    c.percentages()
}

/// Time-weighted means of the metrics (percent of peak; `None`: not measured).
#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct Metrics {
    pub sm_active_pct: Option<f64>,
    pub occupancy_pct: Option<f64>,
    pub tensor_active_pct: Option<f64>,
    pub dram_pct: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fp64_pct: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fp32_pct: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fp16_pct: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub integer_pct: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensor_dfma_pct: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensor_hmma_pct: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensor_imma_pct: Option<f64>,
}

impl Metrics {
    fn of(m: &[Mean; N]) -> Metrics {
        Metrics {
            sm_active_pct: m[SM].get(),
            occupancy_pct: m[OCC].get(),
            tensor_active_pct: m[TENSOR].get(),
            dram_pct: m[DRAM].get(),
            fp64_pct: m[FP64].get(),
            fp32_pct: m[FP32].get(),
            fp16_pct: m[FP16].get(),
            integer_pct: m[INT].get(),
            tensor_dfma_pct: m[DFMA].get(),
            tensor_hmma_pct: m[HMMA].get(),
            tensor_imma_pct: m[IMMA].get(),
        }
    }

    /// The busiest non-tensor FP pipe (FP64, FP32, FP16), where measured.
    pub fn fp_max_pct(&self) -> Option<f64> {
        [self.fp64_pct, self.fp32_pct, self.fp16_pct]
            .into_iter()
            .flatten()
            .reduce(f64::max)
    }
}

/// The measured means over the steady state.
#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct Measured {
    pub samples: usize,
    /// `gpm` (NVML GPM, from outside the job) or `pm` (CUPTI PM sampling, older traces).
    pub source: String,
    #[serde(flatten)]
    pub m: Metrics,
}

/// Counter means while one kernel name ran.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelCounters {
    /// Interned kernel name.
    pub name: u32,
    pub count: u64,
    /// The kernels' own time in the steady state.
    pub busy_ns: u64,
    /// Sample time they overlapped (the weight of the means).
    pub sampled_ns: u64,
    /// Of that, sample time filled by this name alone (see the module documentation).
    pub exact_ns: u64,
    /// Whether the values come from samples this name filled alone.
    pub exact: bool,
    pub m: Metrics,
}

/// A top kernel name's measured values, as the report shows them.
#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct MeasuredKernel {
    pub name: String,
    pub count: u64,
    pub busy_ns: u64,
    /// `exact` (from samples it filled alone) or `mixed`.
    pub attribution: &'static str,
    /// `memory_bound`, `tensor_bound`, or empty.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub verdict: &'static str,
    #[serde(flatten)]
    pub m: Metrics,
}

/// The report's rows for the `n` busiest kernel names that were sampled.
pub fn top_kernels(
    c: &CounterStats,
    n: usize,
    name: impl Fn(u32) -> String,
) -> Vec<MeasuredKernel> {
    c.by_kernel
        .iter()
        .filter(|k| k.sampled_ns > 0)
        .take(n)
        .map(|k| MeasuredKernel {
            name: name(k.name),
            count: k.count,
            busy_ns: k.busy_ns,
            attribution: if k.exact { "exact" } else { "mixed" },
            verdict: Verdict::of(&k.m).name(),
            m: k.m.clone(),
        })
        .collect()
}

/// What the report and the findings read.
#[derive(Clone, Debug, Default)]
pub struct CounterStats {
    pub measured: Option<Measured>,
    /// By kernel name, most busy first.
    pub by_kernel: Vec<KernelCounters>,
    /// SM time with no warp while kernels ran, over the sampled time (one device's
    /// samples with SM activity only).
    pub sm_idle: Option<SmIdle>,
}

/// How much of the time kernels ran the SMs actually held warps, over the part of the
/// steady state the samples cover: what bounds any estimate of SMs left empty by small
/// grids or low occupancy. SM activity (GPM) is the share of SMs with at least one warp,
/// averaged over the SMs and the sample, so `active_ns` is whole-GPU time.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SmIdle {
    /// Steady-state time the samples cover.
    pub covered_ns: u64,
    /// Time any kernel ran within it (their union).
    pub busy_ns: u64,
    /// Sum over the samples of SM activity x their time in the steady state.
    pub active_ns: u64,
}

impl SmIdle {
    /// SM time with no warp while kernels ran, in the covered time (whole-GPU ns).
    pub fn idle_in_busy_ns(&self) -> u64 {
        self.busy_ns.saturating_sub(self.active_ns)
    }

    /// The same over a steady state of `steady_ns`, scaled from the covered time; None
    /// when the samples cover less than half of it.
    pub fn bound_over(&self, steady_ns: u64) -> Option<u64> {
        (self.covered_ns > 0 && self.covered_ns * 2 >= steady_ns).then(|| {
            (self.idle_in_busy_ns() as f64 * steady_ns as f64 / self.covered_ns as f64) as u64
        })
    }
}

/// [`SmIdle`] of the samples `inside` (sorted by start, not overlapping) and `kernels`
/// (sorted by start), within `steady`. None unless every sample is of one device and
/// has its SM activity.
fn sm_idle(
    inside: &[&CounterSample],
    kernels: &[fmt::Kernel],
    steady: (u64, u64),
) -> Option<SmIdle> {
    let (s0, s1) = steady;
    let dev = inside.first()?.device;
    if inside
        .iter()
        .any(|c| c.device != dev || c.sm_active == fmt::ENV_NA)
    {
        return None;
    }
    let mut out = SmIdle::default();
    for c in inside {
        let span = c.end.min(s1) - c.start.max(s0);
        out.covered_ns += span;
        out.active_ns += (c.sm_active as f64 / 10_000.0 * span as f64) as u64;
    }
    // The union of the device's kernels, clipped to the steady state, against the samples.
    let mut busy: Vec<(u64, u64)> = Vec::new();
    for k in kernels
        .iter()
        .filter(|k| k.device == dev && k.end > k.start)
    {
        let (a, b) = (k.start.max(s0), k.end.min(s1));
        if a >= b {
            continue;
        }
        match busy.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => busy.push((a, b)),
        }
    }
    let mut first = 0;
    for (a, b) in busy {
        while first < inside.len() && inside[first].end.min(s1) <= a {
            first += 1;
        }
        for c in inside[first..].iter().take_while(|c| c.start < b) {
            out.busy_ns += c.end.min(b).saturating_sub(c.start.max(a));
        }
    }
    Some(out)
}

/// Weighted mean of one metric (hundredths of a percent, [`fmt::ENV_NA`] skipped).
#[derive(Clone, Copy, Default, Debug)]
struct Mean {
    sum: f64,
    w: f64,
}

impl Mean {
    fn add(&mut self, v: u32, w: f64) {
        if v != fmt::ENV_NA && w > 0.0 {
            self.sum += v as f64 / 100.0 * w;
            self.w += w;
        }
    }

    fn get(&self) -> Option<f64> {
        (self.w > 0.0).then(|| self.sum / self.w)
    }
}

fn add_all(m: &mut [Mean; N], c: &CounterSample, w: f64) {
    for (x, v) in m.iter_mut().zip(values(c)) {
        x.add(v, w);
    }
}

#[derive(Default)]
struct Acc {
    count: u64,
    busy_ns: u64,
    sampled_ns: u64,
    exact_ns: u64,
    all: [Mean; N],
    exact: [Mean; N],
}

/// Which kernel names ran in a sample, and for how long.
#[derive(Default, Clone)]
struct Occupants {
    /// The one name seen so far, with its kernels' time in the sample.
    name: Option<u32>,
    ns: u64,
    /// More than one name ran in it.
    mixed: bool,
}

/// Calls `f(kernel index, sample index, overlap ns)` for every kernel of the steady
/// state and every sample of its device it overlaps (both sorted by start; the samples
/// of one device do not overlap one another).
fn overlaps(
    inside: &[&CounterSample],
    kernels: &[fmt::Kernel],
    (s0, s1): (u64, u64),
    mut f: impl FnMut(usize, usize, u64),
) {
    let mut first = 0usize;
    // The longest sample: a sample starting this long before a kernel may still overlap it.
    let longest = inside.iter().map(|c| c.end - c.start).max().unwrap_or(0);
    for (ki, k) in kernels.iter().enumerate() {
        if k.end <= s0 || k.start >= s1 || k.end <= k.start {
            continue;
        }
        let (ks, ke) = (k.start.max(s0), k.end.min(s1));
        while first < inside.len() && inside[first].start.saturating_add(longest) <= ks {
            first += 1;
        }
        for (si, c) in inside
            .iter()
            .enumerate()
            .skip(first)
            .take_while(|(_, c)| c.start < ke)
        {
            if c.device != k.device {
                continue;
            }
            let ov = c.end.min(ke).saturating_sub(c.start.max(ks));
            if ov > 0 {
                f(ki, si, ov);
            }
        }
    }
}

/// The counter picture of `steady` (start, end): `samples` and `kernels` each sorted by
/// start.
pub fn stats(
    samples: &[CounterSample],
    kernels: &[fmt::Kernel],
    steady: (u64, u64),
) -> CounterStats {
    let (s0, s1) = steady;
    let inside: Vec<&CounterSample> = samples
        .iter()
        .filter(|c| c.end > s0 && c.start < s1 && c.end > c.start)
        .collect();
    if inside.is_empty() {
        return CounterStats::default();
    }
    let mut all = [Mean::default(); N];
    for c in &inside {
        add_all(&mut all, c, (c.end.min(s1) - c.start.max(s0)) as f64);
    }
    let gpm = inside
        .iter()
        .filter(|c| c.source == fmt::COUNTER_SOURCE_GPM)
        .count();
    let measured = Measured {
        samples: inside.len(),
        source: if gpm * 2 >= inside.len() { "gpm" } else { "pm" }.into(),
        m: Metrics::of(&all),
    };
    // Which names ran in each sample, then each kernel against the samples it overlaps.
    let mut occ = vec![Occupants::default(); inside.len()];
    overlaps(&inside, kernels, steady, |ki, si, ov| {
        let o = &mut occ[si];
        let name = kernels[ki].name;
        match o.name {
            None => o.name = Some(name),
            Some(n) if n != name => o.mixed = true,
            Some(_) => {}
        }
        o.ns += ov;
    });
    let filled = |si: usize| {
        let (o, c) = (&occ[si], inside[si]);
        let span = (c.end.min(s1) - c.start.max(s0)) as f64;
        !o.mixed && o.ns as f64 >= FILL * span
    };
    let mut acc: HashMap<u32, Acc> = HashMap::new();
    for k in kernels {
        if k.end <= s0 || k.start >= s1 || k.end <= k.start {
            continue;
        }
        let a = acc.entry(k.name).or_default();
        a.count += 1;
        a.busy_ns += k.end.min(s1) - k.start.max(s0);
    }
    overlaps(&inside, kernels, steady, |ki, si, ov| {
        let a = acc.entry(kernels[ki].name).or_default();
        let c = inside[si];
        a.sampled_ns += ov;
        add_all(&mut a.all, c, ov as f64);
        if filled(si) {
            a.exact_ns += ov;
            add_all(&mut a.exact, c, ov as f64);
        }
    });
    let mut by_kernel: Vec<KernelCounters> = acc
        .into_iter()
        .map(|(name, a)| {
            let exact = a.exact_ns > 0;
            KernelCounters {
                name,
                count: a.count,
                busy_ns: a.busy_ns,
                sampled_ns: a.sampled_ns,
                exact_ns: a.exact_ns,
                exact,
                m: Metrics::of(if exact { &a.exact } else { &a.all }),
            }
        })
        .collect();
    by_kernel.sort_by(|a, b| b.busy_ns.cmp(&a.busy_ns).then(a.name.cmp(&b.name)));
    CounterStats {
        measured: Some(measured),
        by_kernel,
        sm_idle: sm_idle(&inside, kernels, steady),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(start: u64, end: u64, dram: u32, tensor: u32) -> CounterSample {
        CounterSample {
            start,
            end,
            sm_active: 9_000,
            occupancy: 5_000,
            tensor_active: tensor,
            dram,
            ..Default::default()
        }
    }

    fn kernel(name: u32, start: u64, end: u64) -> fmt::Kernel {
        fmt::Kernel {
            name,
            start,
            end,
            ..Default::default()
        }
    }

    #[test]
    fn sm_idle_is_kernel_time_less_measured_sm_activity() {
        let mut a = sample(0, 100, 0, 0);
        a.sm_active = 5_000;
        let mut b = sample(100, 200, 0, 0);
        b.sm_active = 10_000;
        let c = sample(200, 400, 0, 0);
        // Kernels 0-100 (two, overlapping: one busy stretch) and 150-200; idle 200-400.
        let kernels = [kernel(1, 0, 80), kernel(2, 50, 100), kernel(1, 150, 200)];
        let s = stats(&[a.clone(), b.clone(), c], &kernels, (0, 400));
        let m = s.sm_idle.unwrap();
        assert_eq!((m.covered_ns, m.busy_ns), (400, 150));
        // 50% of 100 + 100% of 100 + 90% of 200 = 50 + 100 + 180.
        assert_eq!(m.active_ns, 330);
        // Activity over idle time (another process, a sampling edge) makes it 0, not less.
        assert_eq!(m.idle_in_busy_ns(), 0);
        let mut quiet = sample(200, 400, 0, 0);
        quiet.sm_active = 0;
        let s = stats(&[a.clone(), b, quiet], &kernels, (0, 400));
        let m = s.sm_idle.unwrap();
        assert_eq!((m.active_ns, m.idle_in_busy_ns()), (150, 0));
        let mut half = a;
        half.end = 200;
        let s = stats(&[half], &kernels, (0, 400));
        let m = s.sm_idle.unwrap();
        // Busy 150 of which SMs held warps 100 (50% of 200): 50 idle, scaled to 400.
        assert_eq!(
            (m.busy_ns, m.active_ns, m.idle_in_busy_ns()),
            (150, 100, 50)
        );
        assert_eq!(m.bound_over(400), Some(100));
        assert_eq!(m.bound_over(401), None);
    }

    #[test]
    fn kernels_get_the_samples_they_overlap() {
        let samples = [
            sample(0, 100, 9_000, 0),
            sample(100, 200, 9_000, 0),
            sample(200, 300, 1_000, 8_000),
        ];
        let kernels = [kernel(1, 0, 200), kernel(2, 200, 300)];
        let s = stats(&samples, &kernels, (0, 300));
        let m = s.measured.unwrap();
        assert_eq!(m.samples, 3);
        assert!((m.m.dram_pct.unwrap() - (90.0 * 2.0 + 10.0) / 3.0).abs() < 1e-9);
        assert_eq!(s.by_kernel.len(), 2);
        let k1 = &s.by_kernel[0];
        assert_eq!((k1.name, k1.busy_ns, k1.sampled_ns), (1, 200, 200));
        assert_eq!(k1.m.dram_pct, Some(90.0));
        assert_eq!(k1.m.tensor_active_pct, Some(0.0));
        assert!(k1.exact);
        let k2 = &s.by_kernel[1];
        assert_eq!(
            (k2.m.dram_pct, k2.m.tensor_active_pct),
            (Some(10.0), Some(80.0))
        );
    }

    #[test]
    fn a_kernel_alone_in_a_sample_is_exact_and_one_that_shares_every_sample_is_mixed() {
        // Samples of 100: `1` fills 0-100 alone; 100-200 holds `1` and `2`; 200-300
        // holds `2` for half of it only (idle after).
        let samples = [
            sample(0, 100, 9_000, 0),
            sample(100, 200, 5_000, 4_000),
            sample(200, 300, 2_000, 6_000),
        ];
        let kernels = [kernel(1, 0, 150), kernel(2, 150, 250)];
        let s = stats(&samples, &kernels, (0, 300));
        let k1 = s.by_kernel.iter().find(|k| k.name == 1).unwrap();
        assert!(k1.exact);
        assert_eq!((k1.sampled_ns, k1.exact_ns), (150, 100));
        // Only the sample it filled: not diluted by the shared one.
        assert_eq!(k1.m.dram_pct, Some(90.0));
        let k2 = s.by_kernel.iter().find(|k| k.name == 2).unwrap();
        assert!(!k2.exact, "it never had a sample to itself");
        assert_eq!((k2.sampled_ns, k2.exact_ns), (100, 0));
        // Both samples it touched, by overlap (50 each).
        assert_eq!(k2.m.dram_pct, Some(35.0));
        assert_eq!(k2.m.tensor_active_pct, Some(50.0));
        // Kernels of one name back to back fill a sample together; a kernel on another
        // device does not share it.
        let mut other = kernel(3, 0, 300);
        other.device = 1;
        let kernels = [kernel(1, 0, 50), kernel(1, 50, 100), other];
        let s = stats(&samples[..1], &kernels, (0, 300));
        let k1 = s.by_kernel.iter().find(|k| k.name == 1).unwrap();
        assert!(k1.exact && k1.exact_ns == 100, "{k1:?}");
        let k3 = s.by_kernel.iter().find(|k| k.name == 3).unwrap();
        assert_eq!(k3.sampled_ns, 0, "no sample of its device");
    }

    #[test]
    fn the_source_and_the_new_pipes_are_reported() {
        let mut c = sample(0, 100, 5_900, 0);
        c.source = fmt::COUNTER_SOURCE_GPM;
        c.fp32_active = 1_200;
        c.tensor_hmma = 0;
        let s = stats(&[c], &[], (0, 100));
        let m = s.measured.unwrap();
        assert_eq!(m.source, "gpm");
        assert_eq!(m.m.fp32_pct, Some(12.0));
        assert_eq!(m.m.fp_max_pct(), Some(12.0));
        assert_eq!(m.m.tensor_hmma_pct, Some(0.0));
        assert_eq!(m.m.fp64_pct, None);
    }

    #[test]
    fn no_samples_in_the_steady_state_measure_nothing() {
        let s = stats(&[sample(0, 100, 9_000, 0)], &[], (500, 900));
        assert!(s.measured.is_none() && s.by_kernel.is_empty());
    }
}
