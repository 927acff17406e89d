//! `memory_bound`: kernels that keep DRAM busy near what it delivers while the tensor and
//! FP pipes idle, measured by the GPU's own counters (NVML GPM from `gputrace run` /
//! `attach`, or CUPTI PM sampling in older traces). nvidia-smi reads such a GPU as 100%
//! busy; the time is spent moving bytes, not computing. Time at stake: those kernels'
//! busy time in the steady state. Thresholds: [`crate::report::counters::Verdict`].

use super::common::{dur, share};
use super::inputs::FindingCx;
use crate::report::counters::{
    KernelCounters, Verdict, IDLE_FP_PCT, IDLE_TENSOR_PCT, MEMORY_DRAM_PCT,
};
use crate::report::out::id::FindingId;
use crate::report::out::Finding;

fn bound(k: &KernelCounters) -> bool {
    // At least half the kernels' time sampled, so a sample or two at their edges
    // does not decide.
    k.sampled_ns * 2 >= k.busy_ns && Verdict::of(&k.m) == Verdict::MemoryBound
}

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let c = &cx.counters;
    let m = c.measured.as_ref()?;
    let hot: Vec<&KernelCounters> = c.by_kernel.iter().filter(|k| bound(k)).collect();
    let ns: u64 = hot.iter().map(|k| k.busy_ns).sum();
    if !cx.reportable(ns) {
        return None;
    }
    let p = |v: Option<f64>| v.map_or("?".into(), |v| format!("{v:.0}%"));
    // The DRAM bandwidth of the bound kernels, weighted by their time.
    let dram = {
        let (mut sum, mut w) = (0.0, 0.0);
        for k in &hot {
            if let Some(d) = k.m.dram_pct {
                sum += d * k.busy_ns as f64;
                w += k.busy_ns as f64;
            }
        }
        (w > 0.0).then(|| sum / w)
    };
    let mut x = cx.finding(
        FindingId::MemoryBound,
        &format!(
            "Kernels limited by memory bandwidth (DRAM {} of peak), math pipes idle",
            p(dram)
        ),
        ns,
        false,
    );
    let by = if m.source == "gpm" {
        "NVML GPM"
    } else {
        "CUPTI PM sampling"
    };
    x.summary = format!(
        "For {} of the steady state the GPU ran kernels that kept DRAM at {} of its peak bandwidth (measured by {by}) while the tensor pipes stayed below {IDLE_TENSOR_PCT}% and the FP pipes below {IDLE_FP_PCT}%: the GPU looks busy (nvidia-smi GPU-Util {:.0}%), but it is moving bytes, not computing. Faster math will not help; moving fewer bytes will.",
        share(ns, cx.wall),
        p(dram),
        cx.report.gpu_util_pct
    );
    x.evidence.push(format!(
        "measured over the steady state ({} samples, {by}): DRAM {}, SMs active {}, occupancy {}, tensor {}, FP32 {}",
        m.samples,
        p(m.m.dram_pct),
        p(m.m.sm_active_pct),
        p(m.m.occupancy_pct),
        p(m.m.tensor_active_pct),
        p(m.m.fp32_pct)
    ));
    for k in hot.iter().take(5) {
        x.evidence.push(format!(
            "{} x{}: {} busy, DRAM {}, SMs active {}, occupancy {}, tensor {}, FP32 {} ({})",
            cx.kernel_name(k.name),
            k.count,
            dur(k.busy_ns),
            p(k.m.dram_pct),
            p(k.m.sm_active_pct),
            p(k.m.occupancy_pct),
            p(k.m.tensor_active_pct),
            p(k.m.fp32_pct),
            if k.exact {
                "exact: samples it filled alone"
            } else {
                "mixed: it shared every sample with other kernels or idle time"
            }
        ));
    }
    if let Some(d) = dram {
        x.metrics.insert("dram_pct".into(), d);
    }
    for (key, v) in [
        ("steady_dram_pct", m.m.dram_pct),
        ("sm_active_pct", m.m.sm_active_pct),
        ("tensor_active_pct", m.m.tensor_active_pct),
    ] {
        if let Some(v) = v {
            x.metrics.insert(key.into(), v);
        }
    }
    x.metrics.insert("kernels".into(), hot.len() as f64);
    x.metrics
        .insert("dram_threshold_pct".into(), MEMORY_DRAM_PCT);
    x.fix = "Move fewer bytes per result: fuse chains of elementwise operations so intermediates stay on chip (torch.compile the model or the loss/activation code, or use fused optimizers and fused activations); keep activations in bf16 (autocast) rather than float32; avoid materialising intermediate tensors (no needless .contiguous(), .clone(), dtype round trips or temporaries in a chain); use in-place ops (x.mul_(a).add_(b)) where autograd allows.".into();
    Some(x)
}
