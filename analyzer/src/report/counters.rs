//! GPU hardware counter samples (CUPTI PM sampling, `GPUTRACE_PM=1`) over the steady
//! state: the GPU's measured SM activity, occupancy, tensor-pipe activity and DRAM
//! throughput, and the same per kernel name, from the samples each kernel overlapped.
//!
//! A sample covers the whole GPU for its interval; a kernel gets the share of each
//! sample it overlapped (weighted by the overlap), so with concurrent kernels a sample
//! counts towards each of them.

use gputrace_format::{self as fmt, CounterSample};
use serde::Serialize;
use std::collections::HashMap;

/// The measured means over the steady state (a metric the samples lack is `None`).
#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct Measured {
    pub samples: usize,
    pub sm_active_pct: Option<f64>,
    pub occupancy_pct: Option<f64>,
    pub tensor_active_pct: Option<f64>,
    pub dram_pct: Option<f64>,
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
    pub sm_active_pct: Option<f64>,
    pub tensor_active_pct: Option<f64>,
    pub dram_pct: Option<f64>,
}

/// What the report and the findings read.
#[derive(Clone, Debug, Default)]
pub struct CounterStats {
    pub measured: Option<Measured>,
    /// By kernel name, most busy first.
    pub by_kernel: Vec<KernelCounters>,
}

/// Weighted mean of one metric (hundredths of a percent, [`fmt::ENV_NA`] skipped).
#[derive(Clone, Copy, Default)]
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

#[derive(Default)]
struct Acc {
    count: u64,
    busy_ns: u64,
    sampled_ns: u64,
    sm: Mean,
    tensor: Mean,
    dram: Mean,
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
    let (mut sm, mut occ, mut ten, mut dram) = (
        Mean::default(),
        Mean::default(),
        Mean::default(),
        Mean::default(),
    );
    for c in &inside {
        let w = (c.end.min(s1) - c.start.max(s0)) as f64;
        sm.add(c.sm_active, w);
        occ.add(c.occupancy, w);
        ten.add(c.tensor_active, w);
        dram.add(c.dram, w);
    }
    let measured = Measured {
        samples: inside.len(),
        sm_active_pct: sm.get(),
        occupancy_pct: occ.get(),
        tensor_active_pct: ten.get(),
        dram_pct: dram.get(),
    };
    // Per kernel name: walk the kernels of the steady state, each against the samples
    // it overlaps (both sorted by start; samples do not overlap one another).
    let mut acc: HashMap<u32, Acc> = HashMap::new();
    let mut first = 0usize;
    for k in kernels {
        if k.end <= s0 || k.start >= s1 || k.end <= k.start {
            continue;
        }
        let (ks, ke) = (k.start.max(s0), k.end.min(s1));
        let a = acc.entry(k.name).or_default();
        a.count += 1;
        a.busy_ns += ke - ks;
        while first < inside.len() && inside[first].end <= ks {
            first += 1;
        }
        for c in inside[first..].iter().take_while(|c| c.start < ke) {
            if c.device != k.device {
                continue;
            }
            let ov = c.end.min(ke).saturating_sub(c.start.max(ks));
            if ov == 0 {
                continue;
            }
            a.sampled_ns += ov;
            let w = ov as f64;
            a.sm.add(c.sm_active, w);
            a.tensor.add(c.tensor_active, w);
            a.dram.add(c.dram, w);
        }
    }
    let mut by_kernel: Vec<KernelCounters> = acc
        .into_iter()
        .map(|(name, a)| KernelCounters {
            name,
            count: a.count,
            busy_ns: a.busy_ns,
            sampled_ns: a.sampled_ns,
            sm_active_pct: a.sm.get(),
            tensor_active_pct: a.tensor.get(),
            dram_pct: a.dram.get(),
        })
        .collect();
    by_kernel.sort_by(|a, b| b.busy_ns.cmp(&a.busy_ns).then(a.name.cmp(&b.name)));
    CounterStats {
        measured: Some(measured),
        by_kernel,
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
        assert!((m.dram_pct.unwrap() - (90.0 * 2.0 + 10.0) / 3.0).abs() < 1e-9);
        assert_eq!(s.by_kernel.len(), 2);
        let k1 = &s.by_kernel[0];
        assert_eq!((k1.name, k1.busy_ns, k1.sampled_ns), (1, 200, 200));
        assert_eq!(k1.dram_pct, Some(90.0));
        assert_eq!(k1.tensor_active_pct, Some(0.0));
        let k2 = &s.by_kernel[1];
        assert_eq!(
            (k2.dram_pct, k2.tensor_active_pct),
            (Some(10.0), Some(80.0))
        );
    }

    #[test]
    fn no_samples_in_the_steady_state_measure_nothing() {
        let s = stats(&[sample(0, 100, 9_000, 0)], &[], (500, 900));
        assert!(s.measured.is_none() && s.by_kernel.is_empty());
    }
}
