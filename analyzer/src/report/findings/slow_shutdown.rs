//! `slow_shutdown`: the run's shutdown phases (read in `crate::report::phases`: after the
//! last CUDA work of a process that ended normally, the main thread in no line of the
//! program's own) when they took long, with where the main thread waited. The job had
//! finished its GPU work; the time is still paid for (a GPU held, a node not released).
//! Exit handlers that wait are the usual cause: DataLoader workers blocked in a read, each
//! joined with a timeout, or torch.compile's pool of compile processes shut down. Always
//! info: a one-time cost, like start-up.

use super::common::{dur, share};
use super::inputs::FindingCx;
use crate::report::out::id::FindingId;
use crate::report::out::{Example, Finding, Severity};
use crate::report::phases::Kind;
use crate::report::units::pct;

/// Shorter shutdowns are how an interpreter ends: not reported.
const MIN_NS: u64 = 1_000_000_000;

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let r = cx.report.run.as_ref()?;
    let kind = r.by_kind.iter().find(|k| k.kind == Kind::Shutdown)?;
    let ns = kind.ns;
    if ns < MIN_NS {
        return None;
    }
    let p = pct(ns, r.span_ns.max(1));
    let mut x = cx.finding(
        FindingId::SlowShutdown,
        "The process took long to exit after its GPU work",
        ns,
        false,
    );
    x.at_stake_pct = p;
    // A one-time cost at the end, as start-up is one at the beginning: never the verdict,
    // whose account of the run already gives the shutdown's share; listed with its fix.
    x.severity = Severity::Info;
    let at = kind.host_at.as_ref();
    x.summary = format!(
        "After its last CUDA work the process took {} more to exit ({:.0}% of the {} run){}: the GPU was held with nothing to do.",
        dur(ns),
        p,
        dur(r.span_ns),
        at.map(|h| format!(", its main thread at {} ({:.0}% of its samples)", h.place(), h.pct))
            .unwrap_or_default(),
    );
    x.evidence.push(format!(
        "shutdown {} of the run, from the last CUDA work at +{} to the last host sample",
        share(ns, r.span_ns),
        dur(r.gpu_end_ns)
    ));
    if let Some(h) = at {
        x.evidence.push(format!(
            "the main thread was in {}, innermost {}:{}",
            h.place(),
            crate::report::callsites::short_file(&h.innermost.file),
            h.innermost.function
        ));
    }
    for ph in r.phases.iter().filter(|p| p.kind == Kind::Shutdown).take(3) {
        x.examples.push(Example {
            at_ns: ph.start_ns,
            dur_ns: ph.end_ns - ph.start_ns,
            what: "shutdown".into(),
        });
    }
    x.fix = fix(
        at.map_or("", |h| h.file.as_str()),
        at.map_or("", |h| h.function.as_str()),
    )
    .into();
    Some(x)
}

fn fix(file: &str, function: &str) -> &'static str {
    if file.contains("torch/utils/data/")
        || function.contains("worker") && file.contains("dataloader")
    {
        "The DataLoader's exit handler joins each worker process with a timeout, and workers blocked in a read (slow storage, a network fetch) run each one out: give the dataset's reads a timeout, finish or delete the iterator as soon as the loop is done, and keep fewer workers waiting on slow I/O (more prefetch per worker instead)."
    } else if file.contains("torch/_inductor/") {
        "torch.compile's pool of compile processes is shut down at exit, waiting for each: a job that compiles little can compile in its own process (TORCHINDUCTOR_COMPILE_THREADS=1, no pool), and a service that compiles often can keep one long-lived process so the pool is started and ended once."
    } else {
        "Exit handlers (atexit, object finalizers, library shutdown hooks) ran long after the GPU work: see what the main thread waited on at exit (the place above; py-spy dump --pid PID while it exits), and end that work earlier or in the background: join threads and worker processes as soon as they are done, flush and close files before the end."
    }
}
