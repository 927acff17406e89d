//! `cpu_bound`: GPU idle while the thread that feeds it was busy on the CPU with no CUDA
//! call (measured by the host samples): preprocessing in the main process, Python or
//! framework overhead, or a thread ready to run with no CPU free. Short on-CPU stretches
//! between back-to-back launches are `launch_bound` (host.rs).

use super::common::{dur, push_examples_line, share};
use super::inputs::FindingCx;
use crate::report::host_causes::{self, HostReport};
use crate::report::idle::Cause;
use crate::report::out::id::FindingId;
use crate::report::out::Finding;
use crate::report::pysamples;

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

/// Fills in a `cpu_bound` finding whose time is mostly the launching threads waiting
/// for another thread of the process (`gil_contention`, `thread_contention`,
/// `dispatch_thread`).
fn fill_contention(x: &mut Finding, r: &HostReport, f: &FindingCx, kind: &str) -> bool {
    let wall = f.wall;
    let who = host_causes::who(r);
    let (list, what) = if kind == "gil_contention" {
        (&r.gil_holders, "held the GIL")
    } else {
        (&r.other_threads, "was on a CPU")
    };
    let Some(top) = list.first() else {
        return false;
    };
    let at = pysamples::first_place(&r.python_of_contender)
        .map(|p| format!(" at {p}"))
        .unwrap_or_default();
    let idle_pct = crate::report::units::pct(r.contention_ns, r.quiet_ns);
    x.title = match kind {
        "gil_contention" => "GPU idle while another thread of the process held the GIL".into(),
        "dispatch_thread" => {
            "GPU idle while the runtime's launch threads waited for the dispatching thread".into()
        }
        _ => "GPU idle while the launching thread waited for another thread of the process".into(),
    };
    x.summary = match kind {
        "gil_contention" => format!(
            "For {} of the steady state the GPU sat idle while {who} waited for the GIL: {} held it{at} for {idle_pct:.0}% of the idle time with no CUDA call. The process was computing, not waiting for input.",
            share(x.at_stake_ns, wall),
            top.label
        ),
        "dispatch_thread" => format!(
            "For {} of the steady state the GPU sat idle while {who}, which launches the work, waited for {}, which dispatches it and was on a CPU{at} for {idle_pct:.0}% of the idle time: host-side dispatch is the limit, not input.",
            share(x.at_stake_ns, wall),
            top.label
        ),
        _ => format!(
            "For {} of the steady state the GPU sat idle while {who} was blocked and {} was on a CPU{at} for {idle_pct:.0}% of the idle time with no CUDA call: the process was computing on another thread, not waiting for input.",
            share(x.at_stake_ns, wall),
            top.label
        ),
    };
    let each: Vec<String> = list
        .iter()
        .take(3)
        .map(|t| format!("{} {} ({:.0}%)", t.label, dur(t.ns), t.pct))
        .collect();
    x.evidence.push(format!(
        "{who} was blocked with no CUDA call for {} of the idle time while {} {what}: {}",
        dur(r.contention_ns),
        if list.len() == 1 {
            "another thread"
        } else {
            "other threads"
        },
        each.join(", ")
    ));
    if r.on_cpu_ns.saturating_add(r.runq_ns) > 0 {
        x.evidence.push(format!(
            "the launching threads themselves were on a CPU or waiting for one {} (also counted here)",
            dur(r.on_cpu_ns.saturating_add(r.runq_ns))
        ));
    }
    if let Some(l) = pysamples::evidence(&r.python_of_contender) {
        x.evidence.push(format!(
            "{} {}",
            top.label,
            l.trim_start_matches("the host ")
        ));
    }
    x.host_was_in = r.python_of_contender.clone();
    x.examples = f.idle_examples(Cause::CpuBound);
    push_examples_line(x);
    x.metrics
        .insert("contention_ns".into(), r.contention_ns as f64);
    x.metrics.insert("contender_tid".into(), top.tid as f64);
    x.fix = match kind {
        "gil_contention" => format!(
            "{} holds the GIL while the training loop needs it: move that work to another process (multiprocessing, a DataLoader worker, a separate logging/metrics process), make it release the GIL (do it in NumPy/PyTorch operations on whole arrays or a C extension that releases it; sleep between iterations instead of spinning), or do it less often (every N steps).",
            top.label
        ),
        "dispatch_thread" => format!(
            "The thread that dispatches the work ({}) is the limit while the runtime's launch threads wait for it: give each dispatch more work (jit the whole step; lax.scan or a Python loop unrolled into one compiled function over several steps; larger batches), keep per-step Python work and host synchronisation (printing values, .block_until_ready(), converting to NumPy) out of the loop.",
            top.label
        ),
        _ => format!(
            "{} computes while the launching thread waits for it: move that work to another process or ahead of time (precompute, a DataLoader worker), run it in parallel with the GPU instead of in series, or do it less often.",
            top.label
        ),
    };
    true
}

/// Fills in a `cpu_bound` finding (its time already set).
fn fill(x: &mut Finding, r: &HostReport, f: &FindingCx) {
    x.metrics
        .insert("gaps".into(), f.gaps(Cause::CpuBound) as f64);
    if let Some(k @ ("gil_contention" | "thread_contention" | "dispatch_thread")) =
        r.cpu_bound_cause.as_deref()
    {
        x.subcause = Some(k.to_string());
        if fill_contention(x, r, f, k) {
            return;
        }
    }
    let wall = f.wall;
    let cpu = r.on_cpu_ns.saturating_add(r.runq_ns);
    let who = host_causes::who_computing(r);
    let was = if r.computing_threads.len() > 1 {
        "were"
    } else {
        "was"
    };
    let kind = r.cpu_bound_cause.as_deref().unwrap_or("framework_overhead");
    x.subcause = Some(kind.to_string());
    let (doing, what) = if kind == "page_faults" {
        (
            "stalled in page faults",
            "code or memory-mapped files read from disk as they were first used",
        )
    } else if kind == "collective_on_cpu" {
        (
            "busy on the CPU",
            "gloo reducing the collectives' tensors in host memory",
        )
    } else {
        ("busy on the CPU", "host-side computing between steps")
    };
    x.summary = format!(
        "For {} of the steady state the GPU sat idle while {who} {was} {doing} with no CUDA call: {what}, not waiting for input.",
        share(x.at_stake_ns, wall)
    );
    let gaps = f.gaps(Cause::CpuBound);
    let touched = f.gaps_touched(Cause::CpuBound);
    let mut notes: Vec<String> = Vec::new();
    if touched > gaps {
        notes.push(format!(
            "{gaps} of them charged mostly to cpu_bound, as the time breakdown counts them"
        ));
    }
    if let Some(m) = cpu.checked_div(touched) {
        notes.push(format!("mean {} of CPU time per gap", dur(m)));
    }
    x.evidence.push(format!(
        "{who} {was} on a CPU {} and runnable but waiting for one {} in {touched} idle gaps{}",
        dur(r.on_cpu_ns),
        dur(r.runq_ns),
        if notes.is_empty() {
            String::new()
        } else {
            format!(" ({})", notes.join("; "))
        }
    ));
    if r.page_fault_ns > 0 {
        x.evidence.push(format!(
            "{who} {was} off the CPU in page faults {} (uninterruptible sleep outside any system call: code or a memory-mapped file paged in from disk); counted here, not as waiting for input",
            dur(r.page_fault_ns)
        ));
    }
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
            host_causes::cpus_line(r),
            host_causes::machine_line(w).unwrap_or_default()
        );
        if let Some(wl) = host_causes::workers_line(w) {
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
    if r.page_fault_ns > 0 {
        x.metrics
            .insert("page_fault_ns".into(), r.page_fault_ns as f64);
    }
    x.metrics.insert("gaps".into(), gaps as f64);
    let cores = host_causes::cores_word(r);
    x.fix = match kind {
        "cpu_contention" => format!(
            "The feeding thread was ready to run but had no CPU ({} of run-queue wait): the job's CPUs are oversubscribed. Use fewer DataLoader workers (at most {cores} minus one) and fewer intra-op threads (torch.set_num_threads, OMP_NUM_THREADS), or give the job more CPU cores per GPU.",
            dur(r.runq_ns)
        ),
        "page_faults" => "The thread stalled while code or memory-mapped files were read from disk as they were first used (lazily loaded CUDA kernels and libraries, weights read through mmap) on a cold page cache: measure after a warm-up pass, keep the environment and model files on local storage, and load what the step uses before the loop (CUDA_MODULE_LOADING=EAGER for kernels; weights read into memory rather than mapped). If it recurs through a long run, the machine is short of memory for its page cache.".into(),
        "collective_on_cpu" => "The collectives run on the CPU: gloo copies each CUDA tensor to host memory, reduces it there with the other ranks and copies it back, while the GPU waits. Use NCCL for CUDA tensors (init_process_group(\"nccl\"), one GPU per rank); where gloo must stay, overlap the reduction with the backward pass (DDP's buckets do: a larger bucket_cap_mb means fewer of them) and reduce less often (gradient accumulation with no_sync()).".into(),
        "main_process_work" => "The main process computes for long stretches while the GPU waits: move data loading and augmentation into DataLoader workers (num_workers=N, pin_memory=True) or onto the GPU, precompute what does not change per step, and keep per-step host work (Python loops over samples, logging, metrics, checkpointing) out of the step or asynchronous.".into(),
        _ if f.graphs().is_some() => "Python and framework overhead between graph replays keeps the GPU waiting (the job already replays CUDA graphs): give each replay more work (a larger batch, more of the step inside one graph), and move per-step Python work on tensors (loops over elements, .tolist(), logging) out of the loop or make it asynchronous.".into(),
        _ => "Python and framework overhead between steps keeps the GPU waiting: capture the step with torch.compile(model, mode=\"reduce-overhead\") or CUDA graphs, give each step more work (a larger batch), and avoid per-step Python work on tensors (loops over elements, .tolist(), building many small tensors).".into(),
    };
}
