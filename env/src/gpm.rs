//! NVML GPM (GPU Performance Monitoring, Hopper and newer): the GPU's own activity
//! counters (SMs busy, occupancy, tensor and FP pipes, DRAM bandwidth, PCIe and NVLink
//! rates), read from outside the job.
//!
//! GPM gives metrics between two samples of a device: each tick takes a new sample and
//! turns the pair (previous, new) into one [`CounterSample`] covering the time between
//! them. The environment sampler of `gputrace run` / `attach` runs this on a thread of
//! its own, so a slow or hung GPM call never delays the other NVML reads, and nothing is
//! loaded into the job. A device without GPM (older than Hopper, a driver without the
//! calls, NVML refusing) gives one `gpm` fact saying why and no samples.

use crate::facts::{keys, Fact};
use crate::nvml::{Device, GpmSample, Nvml, NvmlError};
use gputrace_format::{self as fmt, CounterSample};

/// `nvmlGpmMetricId_t` values read (nvml.h).
pub mod ids {
    pub const SM_UTIL: u32 = 2;
    pub const SM_OCCUPANCY: u32 = 3;
    pub const INTEGER_UTIL: u32 = 4;
    pub const ANY_TENSOR_UTIL: u32 = 5;
    pub const DFMA_TENSOR_UTIL: u32 = 6;
    pub const HMMA_TENSOR_UTIL: u32 = 7;
    pub const IMMA_TENSOR_UTIL: u32 = 9;
    pub const DRAM_BW_UTIL: u32 = 10;
    pub const FP64_UTIL: u32 = 11;
    pub const FP32_UTIL: u32 = 12;
    pub const FP16_UTIL: u32 = 13;
    /// MiB/s out of the GPU.
    pub const PCIE_TX_PER_SEC: u32 = 20;
    /// MiB/s into the GPU.
    pub const PCIE_RX_PER_SEC: u32 = 21;
    pub const NVLINK_TOTAL_RX_PER_SEC: u32 = 60;
    pub const NVLINK_TOTAL_TX_PER_SEC: u32 = 61;
}

/// Every metric asked for at each tick.
pub const METRICS: [u32; 15] = [
    ids::SM_UTIL,
    ids::SM_OCCUPANCY,
    ids::INTEGER_UTIL,
    ids::ANY_TENSOR_UTIL,
    ids::DFMA_TENSOR_UTIL,
    ids::HMMA_TENSOR_UTIL,
    ids::IMMA_TENSOR_UTIL,
    ids::DRAM_BW_UTIL,
    ids::FP64_UTIL,
    ids::FP32_UTIL,
    ids::FP16_UTIL,
    ids::PCIE_TX_PER_SEC,
    ids::PCIE_RX_PER_SEC,
    ids::NVLINK_TOTAL_RX_PER_SEC,
    ids::NVLINK_TOTAL_TX_PER_SEC,
];

/// Why a device gives no GPM samples: a stable word (`unsupported_device`,
/// `no_permission`, `driver_too_old`, `error`) and NVML's account of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unavailable {
    pub kind: &'static str,
    pub text: String,
}

impl Unavailable {
    fn of(e: NvmlError) -> Unavailable {
        let kind = match &e {
            NvmlError::MissingSymbol { .. } => "driver_too_old",
            NvmlError::NoPermission { .. } => "no_permission",
            NvmlError::Call {
                code: crate::nvml::ERROR_NOT_SUPPORTED,
                ..
            } => "unsupported_device",
            _ => "error",
        };
        Unavailable {
            kind,
            text: e.to_string(),
        }
    }

    /// The `gpm` fact's value: `kind: text`.
    pub fn fact_value(&self) -> String {
        format!("{}: {}", self.kind, self.text)
    }
}

/// Whether GPM works on device `d`: supported, and one sample can be read (which is
/// where NVML refuses an unprivileged user on drivers that restrict profiling).
pub fn probe(nvml: &Nvml, d: Device) -> Result<(), Unavailable> {
    match nvml.gpm_supported(d) {
        Ok(true) => {}
        Ok(false) => {
            return Err(Unavailable {
                kind: "unsupported_device",
                text: "nvmlGpmQueryDeviceSupport: this GPU has no GPM (Hopper or newer needed)"
                    .into(),
            })
        }
        Err(e) => return Err(Unavailable::of(e)),
    }
    let mut s = nvml.gpm_sample().map_err(Unavailable::of)?;
    nvml.gpm_sample_get(d, None, &mut s)
        .map_err(Unavailable::of)
}

/// One device (or MIG GPU instance) sampled: the previous sample and its time.
struct Target<'n> {
    index: u32,
    handle: Device,
    instance: Option<u32>,
    prev: GpmSample<'n>,
    next: GpmSample<'n>,
    /// When `prev` was taken; `None` until a sample succeeded.
    prev_ts: Option<u64>,
    /// Failed reads in a row; a target that keeps failing is dropped.
    failures: u32,
}

/// Reads in a row that may fail before a device is given up.
const GIVE_UP_AFTER: u32 = 5;

/// GPM samples of a set of devices, one pair at a time.
pub struct GpmSampler<'n> {
    nvml: &'n Nvml,
    targets: Vec<Target<'n>>,
}

impl<'n> GpmSampler<'n> {
    /// A sampler over the devices of `indices` (NVML indices) that support GPM (every
    /// MIG GPU instance of a device in MIG mode), and a `gpm` fact for each device
    /// saying `ok` or why not.
    pub fn new(nvml: &'n Nvml, indices: &[u32]) -> (GpmSampler<'n>, Vec<Fact>) {
        let mut targets = Vec::new();
        let mut facts = Vec::new();
        for &i in indices {
            let fact = |value: String| Fact {
                device: i,
                key: keys::GPM,
                value,
            };
            let d = match nvml.device(i) {
                Ok(d) => d,
                Err(e) => {
                    facts.push(fact(Unavailable::of(e).fact_value()));
                    continue;
                }
            };
            let instances: Vec<Option<u32>> = match nvml.mig_mode(d) {
                Some((true, _)) => nvml.gpu_instances(d).into_iter().map(Some).collect(),
                _ => vec![None],
            };
            let probe = match instances.first() {
                None => Err(Unavailable {
                    kind: "error",
                    text: "MIG mode is on and no GPU instance was found".into(),
                }),
                Some(None) => probe(nvml, d),
                // Support is the parent's; the instance read is checked by its first tick.
                Some(Some(_)) => match nvml.gpm_supported(d) {
                    Ok(true) => Ok(()),
                    Ok(false) => Err(Unavailable {
                        kind: "unsupported_device",
                        text: "nvmlGpmQueryDeviceSupport: this GPU has no GPM".into(),
                    }),
                    Err(e) => Err(Unavailable::of(e)),
                },
            };
            if let Err(u) = probe {
                facts.push(fact(u.fact_value()));
                continue;
            }
            let mut added = 0;
            for instance in instances {
                let (Ok(prev), Ok(next)) = (nvml.gpm_sample(), nvml.gpm_sample()) else {
                    continue;
                };
                targets.push(Target {
                    index: i,
                    handle: d,
                    instance,
                    prev,
                    next,
                    prev_ts: None,
                    failures: 0,
                });
                added += 1;
            }
            facts.push(fact(if added > 0 {
                "ok".into()
            } else {
                "error: nvmlGpmSampleAlloc failed".into()
            }));
        }
        (GpmSampler { nvml, targets }, facts)
    }

    /// Devices (NVML indices) being sampled.
    pub fn devices(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.targets.iter().map(|t| t.index).collect();
        v.dedup();
        v
    }

    /// Takes a sample of each device `want` accepts, stamped `ts` (CLOCK_REALTIME ns),
    /// and appends the metrics since its previous sample. A device left out starts a
    /// new pair when it is next wanted.
    pub fn tick(&mut self, ts: u64, want: impl Fn(u32) -> bool, out: &mut Vec<CounterSample>) {
        let nvml = self.nvml;
        for t in &mut self.targets {
            if !want(t.index) {
                t.prev_ts = None;
                continue;
            }
            if nvml
                .gpm_sample_get(t.handle, t.instance, &mut t.next)
                .is_err()
            {
                t.failures += 1;
                t.prev_ts = None;
                continue;
            }
            t.failures = 0;
            if let Some(t0) = t.prev_ts.filter(|t0| ts > *t0) {
                if let Ok(values) = nvml.gpm_metrics(&t.prev, &t.next, &METRICS) {
                    out.push(counter_sample(t0, ts, t.index, t.instance, &values));
                }
            }
            std::mem::swap(&mut t.prev, &mut t.next);
            t.prev_ts = Some(ts);
        }
        self.targets.retain(|t| t.failures < GIVE_UP_AFTER);
    }

    /// Whether any device is still sampled.
    pub fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }
}

/// The metrics of one pair as a [`CounterSample`] over `start..end`.
pub fn counter_sample(
    start: u64,
    end: u64,
    device: u32,
    instance: Option<u32>,
    values: &[(u32, Option<f64>)],
) -> CounterSample {
    let get = |id: u32| values.iter().find(|(m, _)| *m == id).and_then(|(_, v)| *v);
    // Percent as hundredths of a percent.
    let pct = |id: u32| {
        get(id).map_or(fmt::ENV_NA, |v| {
            (v * 100.0).round().clamp(0.0, 10_000.0) as u32
        })
    };
    // MiB/s over the sample as bytes.
    let secs = (end - start) as f64 / 1e9;
    let bytes = |id: u32| {
        get(id).map_or(fmt::ENV_NA64, |v| {
            (v.max(0.0) * 1_048_576.0 * secs)
                .round()
                .min((fmt::ENV_NA64 - 1) as f64) as u64
        })
    };
    CounterSample {
        start,
        end,
        device,
        sm_active: pct(ids::SM_UTIL),
        occupancy: pct(ids::SM_OCCUPANCY),
        tensor_active: pct(ids::ANY_TENSOR_UTIL),
        dram: pct(ids::DRAM_BW_UTIL),
        pcie_read_bytes: bytes(ids::PCIE_RX_PER_SEC),
        pcie_write_bytes: bytes(ids::PCIE_TX_PER_SEC),
        nvlink_rx_bytes: bytes(ids::NVLINK_TOTAL_RX_PER_SEC),
        nvlink_tx_bytes: bytes(ids::NVLINK_TOTAL_TX_PER_SEC),
        fp64_active: pct(ids::FP64_UTIL),
        fp32_active: pct(ids::FP32_UTIL),
        fp16_active: pct(ids::FP16_UTIL),
        integer_active: pct(ids::INTEGER_UTIL),
        tensor_dfma: pct(ids::DFMA_TENSOR_UTIL),
        tensor_hmma: pct(ids::HMMA_TENSOR_UTIL),
        tensor_imma: pct(ids::IMMA_TENSOR_UTIL),
        source: fmt::COUNTER_SOURCE_GPM,
        instance: instance.unwrap_or(fmt::ENV_NA),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_of_samples_becomes_one_counter_sample() {
        let values = [
            (ids::SM_UTIL, Some(99.8)),
            (ids::SM_OCCUPANCY, Some(90.04)),
            (ids::ANY_TENSOR_UTIL, Some(0.0)),
            (ids::DRAM_BW_UTIL, Some(58.6)),
            (ids::PCIE_RX_PER_SEC, Some(10.0)),
            (ids::NVLINK_TOTAL_RX_PER_SEC, None),
            (ids::FP32_UTIL, Some(150.0)),
        ];
        let c = counter_sample(1_000_000_000, 1_100_000_000, 2, None, &values);
        assert_eq!(
            (c.start, c.end, c.device),
            (1_000_000_000, 1_100_000_000, 2)
        );
        assert_eq!(
            (c.sm_active, c.occupancy, c.tensor_active, c.dram),
            (9_980, 9_004, 0, 5_860)
        );
        // 10 MiB/s for 100 ms.
        assert_eq!(c.pcie_read_bytes, 1_048_576);
        assert_eq!(c.nvlink_rx_bytes, fmt::ENV_NA64);
        assert_eq!(c.pcie_write_bytes, fmt::ENV_NA64);
        assert_eq!(c.fp32_active, 10_000, "clamped to 100%");
        assert_eq!(c.tensor_hmma, fmt::ENV_NA);
        assert_eq!(
            (c.source, c.instance),
            (fmt::COUNTER_SOURCE_GPM, fmt::ENV_NA)
        );
        let m = counter_sample(0, 1, 0, Some(3), &[]);
        assert_eq!(m.instance, 3);
    }
}
