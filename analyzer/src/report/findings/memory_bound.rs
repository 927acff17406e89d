//! `memory_bound`: kernels that keep DRAM near its peak bandwidth while the tensor pipes
//! idle, measured by the GPU's own counters (`GPUTRACE_PM=1`). nvidia-smi reads such a
//! GPU as 100% busy; the time is spent moving bytes, not computing. Time at stake: those
//! kernels' busy time in the steady state.

use super::common::{dur, share};
use super::{FindingCx, FindingId};
use crate::report::counters::KernelCounters;
use crate::report::Finding;

/// DRAM throughput (% of peak) from which a kernel counts as bandwidth-bound.
pub(crate) const DRAM_PCT: f64 = 60.0;
/// Tensor-pipe activity (% of elapsed cycles) below which the math pipes count as idle.
pub(crate) const TENSOR_PCT: f64 = 20.0;

fn bound(k: &KernelCounters) -> bool {
    // At least half the kernels' time sampled, so a sample or two at their edges
    // does not decide.
    k.sampled_ns * 2 >= k.busy_ns
        && k.dram_pct.is_some_and(|d| d >= DRAM_PCT)
        && k.tensor_active_pct.unwrap_or(0.0) < TENSOR_PCT
}

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let c = &cx.counters;
    let m = c.measured.as_ref()?;
    let hot: Vec<&KernelCounters> = c.by_kernel.iter().filter(|k| bound(k)).collect();
    let ns: u64 = hot.iter().map(|k| k.busy_ns).sum();
    if !cx.reportable(ns) {
        return None;
    }
    let mut x = cx.finding(
        FindingId::MemoryBound,
        "Kernels limited by memory bandwidth, math pipes idle",
        ns,
        false,
    );
    x.summary = format!(
        "For {} of the steady state the GPU ran kernels that kept DRAM at {}% or more of its peak bandwidth while the tensor pipes were below {}%: the GPU looks busy (nvidia-smi GPU-Util {:.0}%), but it is moving bytes, not computing.",
        share(ns, cx.wall),
        DRAM_PCT,
        TENSOR_PCT,
        cx.report.gpu_util_pct
    );
    let p = |v: Option<f64>| v.map_or("?".into(), |v| format!("{v:.0}%"));
    x.evidence.push(format!(
        "measured over the steady state ({} counter samples): DRAM {}, SMs active {}, occupancy {}, tensor {}",
        m.samples,
        p(m.dram_pct),
        p(m.sm_active_pct),
        p(m.occupancy_pct),
        p(m.tensor_active_pct)
    ));
    for k in hot.iter().take(5) {
        x.evidence.push(format!(
            "{} x{}: {} busy, DRAM {}, SMs active {}, tensor {}",
            cx.kernel_name(k.name),
            k.count,
            dur(k.busy_ns),
            p(k.dram_pct),
            p(k.sm_active_pct),
            p(k.tensor_active_pct)
        ));
    }
    for (key, v) in [
        ("dram_pct", m.dram_pct),
        ("sm_active_pct", m.sm_active_pct),
        ("tensor_active_pct", m.tensor_active_pct),
    ] {
        if let Some(v) = v {
            x.metrics.insert(key.into(), v);
        }
    }
    x.metrics.insert("kernels".into(), hot.len() as f64);
    x.fix = "Move fewer bytes per result: fuse chains of elementwise operations (torch.compile, or fused optimizers and activations) so intermediate tensors stay on chip; use lower precision (bf16/fp16, fp8) for activations and weights; avoid needless copies (.contiguous(), .clone(), dtype round trips, out-of-place ops where in-place would do); raise arithmetic intensity with larger matmuls instead of many elementwise passes.".into();
    Some(x)
}
