//! `out_of_memory`: allocations failed for want of device memory (read in
//! `crate::report::oom`). Critical when the process ran no GPU work after the last one
//! (it died of it): its time at stake is then the traced time up to the failure, the work
//! the run lost, as a share of the trace. A job that went on after the allocator's retry
//! is warned: it runs at the edge of its memory.

use super::common::{bytes, ts};
use super::inputs::FindingCx;
use crate::report::memuse::Growth;
use crate::report::oom::{self, Diagnosis, Oom};
use crate::report::out::id::FindingId;
use crate::report::out::{Example, Finding, Severity};
use crate::report::units::pct;

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let o = oom::detect(cx.ctx.t, cx.ctx.t0, &cx.steps.bounds)?;
    let (title, ns) = if o.fatal {
        ("The process died of CUDA out of memory", o.at_ns)
    } else {
        ("Allocations failed: device memory ran out", 0)
    };
    let mut f = cx.finding(FindingId::OutOfMemory, title, ns, false);
    f.severity = if o.fatal {
        Severity::Critical
    } else {
        Severity::Warn
    };
    // A share of the whole trace: a job that died may have no steady state.
    let span = cx.ctx.t1.saturating_sub(cx.ctx.t0).max(ns);
    f.at_stake_pct = pct(ns, span.max(1)).min(100.0);
    f.summary = summary(cx, &o);
    f.evidence = evidence(cx, &o);
    f.examples.push(Example {
        at_ns: o.at_ns,
        dur_ns: 0,
        what: format!("{} of {} failed ({})", o.call, bytes(o.bytes), o.error),
    });
    f.fix = fix(&o, o.diagnosis());
    metrics(&o, &mut f);
    Some(f)
}

/// "cudaMalloc of 2.0 GiB failed with cudaErrorMemoryAllocation at +1.2 s (train.py:57
/// in step) and the process ran no GPU work after it: 14.0 GiB were in use ..."
fn summary(cx: &FindingCx, o: &Oom) -> String {
    let from = o
        .called_from
        .as_ref()
        .map(|p| format!(" ({p})"))
        .unwrap_or_default();
    let mut s = format!(
        "{} of {} failed with {} at +{}{from}",
        o.call,
        bytes(o.bytes),
        o.error,
        ts(o.at_ns)
    );
    s.push_str(if o.fatal {
        " and the process ran no GPU work after it"
    } else {
        ", and the job went on"
    });
    if let Some(u) = &o.in_use {
        s.push_str(&format!(
            ": {} allocated through cudaMalloc was in use then",
            bytes(u.in_use_bytes)
        ));
    }
    match (o.diagnosis(), &o.growth) {
        (Diagnosis::TooLarge, _) => s.push_str(&format!(
            "; the allocation alone is larger than the GPU's {}",
            bytes(o.capacity_bytes.unwrap_or(0))
        )),
        (Diagnosis::Leak, Some(g)) => s.push_str(&format!(
            ", and that grew {} every step ({}): tensors kept alive across steps",
            bytes(g.per_step_bytes),
            grew_in(g)
        )),
        (Diagnosis::Peak, Some(g)) => s.push_str(&format!(
            ", and it did not grow from step to step ({}): the job's peak does not fit, not a leak",
            grew_in(g)
        )),
        _ if cx.steps.count() == 0 => {
            s.push_str(" (no repeating step found: growth per step unknown)")
        }
        _ => {}
    }
    s.push('.');
    s
}

/// "grew in 12 of 12 steps"
fn grew_in(g: &Growth) -> String {
    format!("grew in {} of {} steps", g.grew, g.steps)
}

fn evidence(cx: &FindingCx, o: &Oom) -> Vec<String> {
    let mut e = Vec::new();
    let when = if o.failed > 1 {
        format!(
            "{} allocations failed, the first at +{}, the last at +{}",
            o.failed,
            ts(o.first_at_ns),
            ts(o.at_ns)
        )
    } else {
        format!("1 allocation failed, at +{}", ts(o.at_ns))
    };
    e.push(format!(
        "{when}: {} of {} ({} {})",
        o.call,
        bytes(o.bytes),
        o.error,
        o.code
    ));
    if let Some(u) = &o.in_use {
        let of = o
            .capacity_bytes
            .map(|c| format!(" of the GPU's {}", bytes(c)))
            .unwrap_or_default();
        e.push(format!(
            "in use when it failed: {}{of}, from {} (peak {} at +{}){}",
            bytes(u.in_use_bytes),
            u.source.words(),
            bytes(u.peak_bytes),
            ts(u.peak_at_ns),
            if u.unknown_frees > 0 {
                format!(
                    "; a lower bound: {} frees of memory allocated before the trace began",
                    u.unknown_frees
                )
            } else {
                String::new()
            }
        ));
    } else {
        e.push("memory in use not known: the trace has no cudaMalloc pointers (format 2.5) and no MEMORY2 records".into());
    }
    if let Some(n) = &o.nvml {
        e.push(format!(
            "NVML at +{}: device {} memory used {} of {}{}",
            ts(n.at_ns),
            n.device,
            bytes(n.used_bytes),
            bytes(n.total_bytes),
            n.process_bytes
                .map(|b| format!(" (this process {})", bytes(b)))
                .unwrap_or_default()
        ));
    }
    if let Some(r) = o.last_retry() {
        e.push(format!(
            "the allocator then freed {} of cached blocks ({} cudaFree call{}) and retried: it failed again",
            bytes(r.freed_bytes),
            r.frees,
            if r.frees == 1 { "" } else { "s" }
        ));
    }
    let recovered = o.retries.iter().filter(|r| r.succeeded).count();
    if recovered > 0 {
        e.push(format!(
            "{recovered} earlier failure{} recovered after the allocator freed its cache (each such retry waits for the GPU)",
            if recovered == 1 { " was" } else { "s were" }
        ));
    }
    if let Some(g) = &o.growth {
        let step = cx
            .step_line()
            .map(|l| format!(" ({l})"))
            .unwrap_or_default();
        e.push(format!(
            "in use at the start of each step: {} at the first, {} at the last, {} per step{step}",
            bytes(g.first_bytes),
            bytes(g.last_bytes),
            if g.per_step_bytes > 0 {
                format!("+{}", bytes(g.per_step_bytes))
            } else {
                "no growth".into()
            }
        ));
    }
    e
}

/// The fix that follows from what was measured.
fn fix(o: &Oom, d: Diagnosis) -> String {
    const LEAK: &str = "something keeps each step's tensors alive. Look for what accumulates across steps: a loss or an output kept as a tensor (total_loss += loss, outputs appended to a list: keep loss.item() or .detach() instead), a cache or history held on the model, tensors kept for logging or metrics. torch.cuda.memory._record_memory_history() then torch.cuda.memory._dump_snapshot() shows the allocations that stay and the code that made them";
    const PEAK: &str = "lower the peak: a smaller batch (keep the effective batch with gradient accumulation), activation checkpointing (torch.utils.checkpoint) on the largest layers, mixed precision (torch.autocast with bfloat16), and PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True when torch.cuda.memory_reserved() is well above memory_allocated() (fragmentation)";
    match d {
        Diagnosis::TooLarge => format!(
            "One allocation of {} is more than the GPU has: check the shape of the tensor made at that line (a batch, sequence length or vocabulary far larger than meant, a dimension multiplied in twice).",
            bytes(o.bytes)
        ),
        Diagnosis::Leak => format!("Memory grew every step and was not given back: {LEAK}."),
        Diagnosis::Peak => format!(
            "Memory did not grow from step to step: the job's peak needs more than the GPU has. To make it fit, {PEAK}."
        ),
        Diagnosis::Unknown => format!(
            "If memory grows from step to step, {LEAK}. If it does not, {PEAK}."
        ),
    }
}

fn metrics(o: &Oom, f: &mut Finding) {
    let mut m = |k: &str, v: f64| {
        f.metrics.insert(k.into(), v);
    };
    m("failed_bytes", o.bytes as f64);
    m("failed_at_ns", o.at_ns as f64);
    m("failed_allocations", o.failed as f64);
    m("fatal", o.fatal as u8 as f64);
    if let Some(u) = &o.in_use {
        m("in_use_bytes", u.in_use_bytes as f64);
        m("peak_bytes", u.peak_bytes as f64);
    }
    if let Some(c) = o.capacity_bytes {
        m("capacity_bytes", c as f64);
    }
    if let Some(n) = &o.nvml {
        m("nvml_used_bytes", n.used_bytes as f64);
        m("nvml_total_bytes", n.total_bytes as f64);
    }
    if let Some(r) = o.last_retry() {
        m("retry_freed_bytes", r.freed_bytes as f64);
        m("retry_frees", r.frees as f64);
    }
    if let Some(g) = &o.growth {
        m("growth_per_step_bytes", g.per_step_bytes as f64);
        m("steps_grown", g.grew as f64);
        m("steps_compared", g.steps as f64);
    }
}
