//! `memory_growth`: device memory allocated through `cudaMalloc` (paired with `cudaFree`
//! by pointer, `crate::report::memuse`) grew step after step in a job that did not run
//! out: a leak that has not ended it yet. No time at stake; a warning, with how many
//! more steps the device's memory would last at that rate. A job whose allocations
//! already failed gets `out_of_memory` instead.

use super::common::{bytes, dur};
use super::inputs::FindingCx;
use crate::report::failures::OUT_OF_MEMORY;
use crate::report::out::id::FindingId;
use crate::report::out::{Finding, Severity};

/// Growth over the steady state below this is not worth a warning.
const MIN_GROWTH: u64 = 256 << 20;

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let m = cx.report.memory_in_use.as_ref()?;
    let g = m.growth.as_ref().filter(|g| g.steady())?;
    let grown = g.last_bytes.saturating_sub(g.first_bytes);
    if grown < MIN_GROWTH || cx.ctx.t.apis.iter().any(|a| a.result == OUT_OF_MEMORY) {
        return None;
    }
    let mut f = cx.finding(
        FindingId::MemoryGrowth,
        "Device memory grew every step",
        0,
        false,
    );
    f.severity = Severity::Warn;
    let capacity = match cx.ctx.t.devices.as_slice() {
        [d] if d.global_memory > 0 => Some(d.global_memory),
        _ => None,
    };
    let step_ns = cx.report.steps.step_ns_median;
    // At this rate, the device's memory left lasts this many more steps.
    let lasts = capacity
        .filter(|&c| c > m.end_bytes && g.per_step_bytes > 0)
        .map(|c| (c - m.end_bytes) / g.per_step_bytes);
    f.summary = format!(
        "Memory allocated through cudaMalloc grew {} every step (grew in {} of {} steps), from {} to {}, and was not given back: tensors kept alive across steps.{}",
        bytes(g.per_step_bytes),
        g.grew,
        g.steps,
        bytes(g.first_bytes),
        bytes(g.last_bytes),
        match lasts {
            Some(n) => format!(
                " At this rate the GPU's {} runs out in about {n} more steps ({}): the job would die of CUDA out of memory.",
                bytes(capacity.unwrap_or(0)),
                dur(n.saturating_mul(step_ns))
            ),
            None => String::new(),
        }
    );
    f.evidence.push(format!(
        "{} cudaMalloc and {} cudaFree calls paired by pointer; in use at the end {}, peak {}{}",
        m.allocations,
        m.frees,
        bytes(m.end_bytes),
        bytes(m.peak_bytes),
        if m.unknown_frees > 0 {
            format!(
                " (a lower bound: {} frees of memory allocated before the trace began)",
                m.unknown_frees
            )
        } else {
            String::new()
        }
    ));
    if let Some(l) = cx.step_line() {
        f.evidence.push(l);
    }
    f.metrics
        .insert("growth_per_step_bytes".into(), g.per_step_bytes as f64);
    f.metrics.insert("steps_grown".into(), g.grew as f64);
    f.metrics.insert("steps_compared".into(), g.steps as f64);
    f.metrics.insert("first_bytes".into(), g.first_bytes as f64);
    f.metrics.insert("last_bytes".into(), g.last_bytes as f64);
    if let Some(n) = lasts {
        f.metrics.insert("steps_left".into(), n as f64);
    }
    f.fix = "Something keeps each step's tensors alive. Look for what accumulates across steps: a loss or an output kept as a tensor (total_loss += loss, outputs appended to a list: keep loss.item() or .detach() instead), a cache or history held on the model, tensors kept for logging or metrics. torch.cuda.memory._record_memory_history() then torch.cuda.memory._dump_snapshot() shows the allocations that stay and the code that made them.".into();
    Some(f)
}
