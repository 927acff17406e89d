//! `cpu_bound`: GPU idle while the thread that feeds it was busy on the CPU with no CUDA
//! call (measured by the host samples): preprocessing in the main process, Python or
//! framework overhead, or a thread ready to run with no CPU free. Short on-CPU stretches
//! between back-to-back launches are `launch_bound` (host.rs).

use super::common::{dur, push_examples_line, share};
use super::{FindingCx, FindingId};
use crate::report::hostfind::{self, HostReport};
use crate::report::idle::Cause;
use crate::report::pysamples;
use crate::report::Finding;

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let h = cx.report.host_cpu.as_ref()?;
    let ns = cx.idle(Cause::CpuBound);
    if !cx.reportable(ns) {
        return None;
    }
    let mut x = cx.finding(
        FindingId::CpuBound,
        "GPU idle while the feeding thread was computing on the CPU",
        ns,
        false,
    );
    fill(&mut x, h, cx);
    Some(x)
}

/// Fills in a `cpu_bound` finding (its time already set).
fn fill(x: &mut Finding, r: &HostReport, f: &FindingCx) {
    let wall = f.wall;
    let cpu = r.on_cpu_ns.saturating_add(r.runq_ns);
    let who = hostfind::who_computing(r);
    let kind = r.cpu_bound_cause.as_deref().unwrap_or("framework_overhead");
    x.subcause = Some(kind.to_string());
    x.summary = format!(
        "For {} of the steady state the GPU sat idle while {who} was busy on the CPU with no CUDA call: host-side computing between steps, not waiting for input.",
        share(x.at_stake_ns, wall)
    );
    let gaps = f.gaps(Cause::CpuBound);
    let touched = f.gaps_touched(Cause::CpuBound);
    let mut notes: Vec<String> = Vec::new();
    if touched > gaps {
        notes.push(format!("the largest share of {gaps} of them"));
    }
    if let Some(m) = cpu.checked_div(touched) {
        notes.push(format!("mean {} of CPU time per gap", dur(m)));
    }
    x.evidence.push(format!(
        "{who} was on a CPU {} and runnable but waiting for one {} in {touched} idle gaps{}",
        dur(r.on_cpu_ns),
        dur(r.runq_ns),
        if notes.is_empty() {
            String::new()
        } else {
            format!(" ({})", notes.join("; "))
        }
    ));
    if r.launch_overhead_ns > 0 {
        x.evidence.push(format!(
            "CPU time in quiet stretches under {} between launches ({}) is counted under launch_bound",
            dur(crate::report::host::CPU_LAUNCH_NS),
            dur(r.launch_overhead_ns)
        ));
    }
    let w = &r.while_computing;
    if w.span_ns > 0 {
        let mut l = format!(
            "meanwhile: {}; {}",
            hostfind::cpus_line(r),
            hostfind::machine_line(w).unwrap_or_default()
        );
        if let Some(wl) = hostfind::workers_line(w) {
            l.push_str(&format!("; {wl}"));
        }
        x.evidence.push(l);
    }
    x.host_was_in = r.python_while_computing.clone();
    if let Some(l) = pysamples::evidence(&x.host_was_in) {
        x.evidence.push(l);
    }
    if let Some(l) = pysamples::cut_short_note(f.ctx.t, &x.host_was_in) {
        x.evidence.push(l);
    }
    x.examples = f.idle_examples(Cause::CpuBound);
    push_examples_line(x);
    x.metrics.insert("on_cpu_ns".into(), r.on_cpu_ns as f64);
    x.metrics.insert("runq_ns".into(), r.runq_ns as f64);
    x.metrics.insert("gaps".into(), gaps as f64);
    let cores = hostfind::cores_word(r);
    x.fix = match kind {
        "cpu_contention" => format!(
            "The feeding thread was ready to run but had no CPU ({} of run-queue wait): the job's CPUs are oversubscribed. Use fewer DataLoader workers (at most {cores} minus one) and fewer intra-op threads (torch.set_num_threads, OMP_NUM_THREADS), or give the job more CPU cores per GPU.",
            dur(r.runq_ns)
        ),
        "main_process_work" => "The main process computes for long stretches while the GPU waits: move data loading and augmentation into DataLoader workers (num_workers=N, pin_memory=True) or onto the GPU, precompute what does not change per step, and keep per-step host work (Python loops over samples, logging, metrics, checkpointing) out of the step or asynchronous.".into(),
        _ => "Python and framework overhead between steps keeps the GPU waiting: capture the step with torch.compile(model, mode=\"reduce-overhead\") or CUDA graphs, give each step more work (a larger batch), and avoid per-step Python work on tensors (loops over elements, .tolist(), building many small tensors).".into(),
    };
}
