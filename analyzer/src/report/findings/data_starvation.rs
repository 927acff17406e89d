//! `data_starvation`: GPU idle while no host thread was in a CUDA call. With host samples,
//! only the time the feeding thread was blocked (off the CPU), with the sub-cause the
//! samples measured and the fix it calls for (the thread's CPU time is `cpu_bound`).

use super::common::{bytes, dur, push_examples_line, share};
use super::inputs::FindingCx;
use crate::report::host_causes::{self, HostReport};
use crate::report::idle::Cause;
use crate::report::out::id::FindingId;
use crate::report::out::Finding;
use crate::report::pysamples;

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let ns = cx.idle(Cause::DataStarvation);
    if !cx.reportable(ns) {
        return None;
    }
    let mut x = cx.finding(
        FindingId::DataStarvation,
        "GPU idle while the host issued no CUDA work",
        ns,
        false,
    );
    x.summary = format!(
        "For {} of the steady state no host thread was in a CUDA call while the GPU sat idle: the loop was waiting for its next input or doing host-side work.",
        share(ns, cx.wall)
    );
    let gaps = cx.gaps(Cause::DataStarvation);
    x.evidence.push(format!(
        "{gaps} idle gaps charged mostly here, {} in total",
        dur(ns)
    ));
    if let Some(l) = cx.step_line() {
        x.evidence.push(format!(
            "{l}; GPU busy {:.0}% of a median step",
            cx.report.steps.busy_pct_median
        ));
    }
    x.examples = cx.idle_examples(Cause::DataStarvation);
    push_examples_line(&mut x);
    cx.heuristic_note(&mut x);
    x.metrics.insert("gaps".into(), gaps as f64);
    x.fix = "Feed the GPU ahead of time: DataLoader(num_workers=N, pin_memory=True, persistent_workers=True, prefetch_factor=2 or more), with N up to the CPU cores you can give each GPU; move heavy per-sample transforms to the GPU or precompute them; keep host-side work (logging, metrics, checkpoint I/O) out of the step or make it asynchronous.".into();
    if let Some(h) = &cx.report.host_cpu {
        x.host_was_in = h.python_while_blocked.clone();
        // A native launcher (the autograd thread) has no Python stack: the place comes
        // from the main thread, which the summary then names as the one waiting.
        let main = cx.ctx.t.meta.pid;
        let main_waited = (h.feeding_thread.is_some_and(|f| f != main)
            && pysamples::stand_in(cx.ctx.t, h.feeding_thread) == Some(main))
        .then(|| pysamples::first_place(&x.host_was_in))
        .flatten()
        .map(|place| format!(", and the main thread (tid {main}) waited at {place}"));
        with_host_samples(&mut x, h, cx.wall, main_waited.as_deref().unwrap_or(""));
        if let Some(l) = pysamples::evidence(&x.host_was_in) {
            x.evidence.push(l);
        }
        if let Some(l) = pysamples::cut_short_note(cx.ctx.t, &x.host_was_in) {
            x.evidence.push(l);
        }
    }
    at_epoch_boundaries(cx, &mut x);
    Some(x)
}

/// Most of the wait at epoch boundaries (the DataLoader's workers replaced between
/// epochs): said first, with the fix for it. The loop's own waits keep the fix above.
fn at_epoch_boundaries(cx: &FindingCx, x: &mut Finding) {
    use crate::report::phases::Kind;
    let Some(run) = cx.report.run.as_ref() else {
        return;
    };
    let Some(k) = run.by_kind.iter().find(|k| k.kind == Kind::EpochBoundary) else {
        return;
    };
    let there = k
        .idle
        .iter()
        .find(|c| c.cause == FindingId::DataStarvation.as_str())
        .map_or(0, |c| c.ns)
        .min(x.at_stake_ns);
    if there * 2 < x.at_stake_ns {
        return;
    }
    x.subcause = Some("epoch_boundary".into());
    x.evidence.insert(
        0,
        format!(
            "{} of it ({}) at the {} epoch boundar{} of the run, where the DataLoader started new workers and the loop waited for their first batches",
            dur(there),
            share(there, x.at_stake_ns).replace(&format!(" ({})", dur(there)), ""),
            k.phases,
            if k.phases == 1 { "y" } else { "ies" }
        ),
    );
    x.fix = format!(
        "Keep the DataLoader's workers from one epoch to the next: DataLoader(..., persistent_workers=True), so each epoch does not start new ones and wait for their first batches; make their start cheaper too (worker_init_fn, the dataset's own set-up and imports run again in every new worker). For the waits inside the epochs: {}",
        lower_first(&x.fix)
    );
}

fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}

/// The title and summary: the feeding thread asleep on a timer, or waiting for input.
fn headline(x: &mut Finding, r: &HostReport, wall: u64, waited: &str, cause: &str, who: &str) {
    if cause == "sleeping" {
        x.title = "GPU idle while the feeding thread slept".into();
        x.summary = format!(
            "For {} of the steady state the GPU sat idle while {who}, which issues the work, slept with no CUDA call{waited} ({:.0}% of its wait samples in nanosleep or clock_nanosleep{}): the program paused on a timer, not for its input.",
            share(x.at_stake_ns, wall),
            r.sleeping_pct,
            pysamples::first_place(&r.python_while_blocked)
                .map(|x| format!(", at {x}"))
                .unwrap_or_default()
        );
    } else {
        x.title = "GPU idle while the feeding thread was blocked waiting for input".into();
        x.summary = format!(
            "For {} of the steady state the GPU sat idle while {who}, which issues the work, was off the CPU with no CUDA call{waited}: waiting for its next input.",
            share(x.at_stake_ns, wall)
        );
    }
}

/// Fills in `data_starvation` from the host samples: the blocked time's measured
/// sub-cause, its numbers, and the fix that sub-cause calls for.
/// `waited`: a clause naming the main thread where it, not the launcher, waited.
fn with_host_samples(x: &mut Finding, r: &HostReport, wall: u64, waited: &str) {
    let Some(cause) = r.data_starvation_cause.as_deref() else {
        // Nothing measured as blocked: what is left is the unmeasured part.
        x.evidence.push(format!(
            "host samples did not cover these gaps ({} not measured)",
            dur(r.unmeasured_ns)
        ));
        return;
    };
    let w = &r.while_blocked;
    let who = host_causes::who(r);
    headline(x, r, wall, waited, cause, &who);
    x.subcause = Some(cause.to_string());
    x.evidence.insert(
        0,
        format!(
            "{who} was blocked (not on a CPU) for {} of the idle time with no CUDA call{}; {}on a CPU {} and waiting for one {} (cpu_bound), {} in short stretches between launches (launch_bound){}",
            dur(r.blocked_ns),
            if r.io_blocked_ns > 0 {
                format!(", {} of it in I/O wait (D state)", dur(r.io_blocked_ns))
            } else {
                String::new()
            },
            if host_causes::cpu_of_several(r) {
                "the launching threads together were "
            } else {
                ""
            },
            dur(r.on_cpu_ns),
            dur(r.runq_ns),
            dur(r.launch_overhead_ns),
            if r.unmeasured_ns > 0 {
                format!("; {} not covered by host samples", dur(r.unmeasured_ns))
            } else {
                String::new()
            }
        ),
    );
    let mut at = 1;
    let mut add = |x: &mut Finding, s: String| {
        x.evidence.insert(at, s);
        at += 1;
    };
    if let Some(l) = host_causes::workers_line(w) {
        add(x, format!("while it was blocked: {l}"));
        let (ds, idx) = (r.worker_waits_in_dataset, r.worker_waits_for_indices);
        if ds + idx > 0 {
            add(
                x,
                format!(
                    "the workers' system calls while it was blocked: {ds} inside the dataset (sleeping, reading, fetching), {idx} waiting for indices (polling their queue)"
                ),
            );
        }
    } else if let Some(p) = &r.producer_thread {
        add(
            x,
            format!(
                "it waited in a lock or queue (futex) while {} was the Python thread seen in those gaps{}: no DataLoader workers, no other thread computing",
                p.label,
                pysamples::first_place(&r.python_of_producer)
                    .map(|x| format!(", at {x}"))
                    .unwrap_or_default()
            ),
        );
    } else {
        add(
            x,
            "no child processes were working while it was blocked: no DataLoader workers (num_workers=0?)".into(),
        );
    }
    add(
        x,
        format!(
            "{}; {}",
            host_causes::cpus_line(r),
            host_causes::machine_line(w).unwrap_or_default()
        ),
    );
    if w.read_bytes_per_s >= 1.0 || w.worker_d_state_pct > 0.0 {
        add(
            x,
            format!(
                "storage reads by the job {}/s while blocked; workers in I/O wait {:.0}% of the time",
                bytes(w.read_bytes_per_s as u64),
                w.worker_d_state_pct
            ),
        );
    }
    let m = &mut x.metrics;
    m.insert("blocked_ns".into(), r.blocked_ns as f64);
    m.insert("io_blocked_ns".into(), r.io_blocked_ns as f64);
    if r.sleeping_pct > 0.0 {
        m.insert("sleeping_pct".into(), r.sleeping_pct);
    }
    m.insert("unmeasured_ns".into(), r.unmeasured_ns as f64);
    m.insert("workers".into(), w.worker_count as f64);
    m.insert("worker_cpu_pct_mean".into(), w.worker_cpu_pct_mean);
    m.insert("workers_busy".into(), w.workers_busy as f64);
    m.insert("job_cpus".into(), w.job_cpus);
    if let Some(c) = r.cpus_available {
        m.insert("cpus_available".into(), c);
    }
    if let Some(b) = w.machine_busy_pct {
        m.insert("machine_busy_pct".into(), b);
    }
    if let Some(i) = w.machine_iowait_pct {
        m.insert("machine_iowait_pct".into(), i);
    }
    m.insert("worker_d_state_pct".into(), w.worker_d_state_pct);
    let cores = host_causes::cores_word(r);
    let n = w.worker_count;
    x.fix = match cause {
        "workers_saturated" => format!(
            "The DataLoader workers are the bottleneck: each is busy ~{:.0}% of a CPU and together they cannot keep up. Raise DataLoader(num_workers=...) above {n} (up to about {cores} minus one for the main process), keep persistent_workers=True and prefetch_factor >= 2; or make each sample cheaper: move augmentation to the GPU (torchvision.transforms.v2 on CUDA tensors, DALI, kornia), decode once and cache, use smaller images or precomputed features.",
            w.worker_cpu_pct_mean
        ),
        "cpu_saturated" => format!(
            "The CPUs are saturated: the job used {:.1} of {cores} CPUs while the GPU waited, so more workers cannot help (num_workers is not the more the better). Use at most {cores} minus one workers (now {n}), give each worker one thread (torch.set_num_threads(1) in worker_init_fn, OMP_NUM_THREADS=1), cut per-sample CPU work (augmentation on the GPU, precomputed or cached inputs), or run with more CPU cores per GPU.",
            w.job_cpus
        ),
        "io_wait" => "The input pipeline waits on storage: put the dataset on faster local storage (NVMe, a RAM disk) or cache it in memory, read fewer larger files (WebDataset/TFRecord shards, LMDB) instead of many small ones, and overlap more reads with DataLoader(num_workers=N, prefetch_factor=4, persistent_workers=True).".to_string(),
        "producer_thread" => {
            let p = r.producer_thread.as_ref().map_or("another thread".to_string(), |p| p.label.clone());
            let at = pysamples::first_place(&r.python_of_producer).map(|x| format!(" (at {x})")).unwrap_or_default();
            format!(
                "The loop waits on its own queue or lock, fed by {p}{at}, which did not keep up: nothing else in the process was computing, so the producer's own waits (a sleep, a read, a request) are the gap. Run more producers in parallel (several threads for I/O-bound sources, processes or DataLoader workers for CPU-bound ones), fetch further ahead (a deeper queue, started before the loop), or make the source itself faster."
            )
        }
        "workers_latency_bound" => format!(
            "The {n} workers spend each sample waiting inside the dataset (a sleep, a read, a network fetch: blocked in {} of {} samples of their system calls, at {:.0}% of a CPU each), not computing: that latency is hidden only by more requests in flight. Raise DataLoader(num_workers=...) above {n} (waiting workers cost little CPU) and prefetch_factor (4 or more), or fetch several samples per call (batched or asynchronous reads, a local cache).",
            r.worker_waits_in_dataset,
            r.worker_waits_in_dataset + r.worker_waits_for_indices,
            w.worker_cpu_pct_mean
        ),
        "workers_idle" => format!(
            "The {n} workers were mostly idle while the GPU waited ({:.0}% of a CPU each): the wait is elsewhere. See what the main thread blocks on during a gap (py-spy dump --pid PID): a lock or queue, a time.sleep, host-side logging, metrics or checkpoint I/O, a large batch collated or pinned in the main process; use persistent_workers=True so workers are not restarted every epoch.",
            w.worker_cpu_pct_mean
        ),
        "sleeping" => format!(
            "The feeding thread slept{} while nothing was queued on the GPU: take the sleep out of the loop (a rate limit, a polling interval, a retry back-off), wait on an event or a queue instead of a timer, and where the wait is deliberate (another job, a file to appear) queue GPU work before it so the device keeps running.",
            pysamples::first_place(&r.python_while_blocked)
                .map(|x| format!(" at {x}"))
                .unwrap_or_default()
        ),
        _ => "The feeding thread waited with no input workers running: see what it blocks on during a gap (py-spy dump --pid PID): a time.sleep, a lock, network or file reads in the step. Load data in DataLoader workers (num_workers=N, pin_memory=True, persistent_workers=True) so loading overlaps the GPU, and keep logging, metrics and checkpoint I/O out of the step or asynchronous.".to_string(),
    };
}
