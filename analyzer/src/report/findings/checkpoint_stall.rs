//! `checkpoint_stall`: the run's checkpoint phases (read in `crate::report::phases`: most
//! Python samples in `torch.save`/`torch.load`, safetensors or orbax) as a share of the
//! whole trace, with what the GPU did meanwhile and the program's line that saved. A
//! checkpoint is time no step runs unless it is written in the background; the idle
//! causes measured inside it (a pageable copy of every tensor, the synchronize behind it)
//! say what to change.

use super::common::{dur, run_severity, share, RUN_NOTE_PCT};
use super::inputs::FindingCx;
use crate::report::out::id::FindingId;
use crate::report::out::{Example, Finding};
use crate::report::phases::{Kind, Run};
use crate::report::pysamples;
use crate::report::units::pct;

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let r = cx.report.run.as_ref()?;
    let ns = r.time(Kind::Checkpoint);
    let p = pct(ns, r.span_ns.max(1));
    if ns == 0 || p < RUN_NOTE_PCT {
        return None;
    }
    let kind = r.by_kind.iter().find(|k| k.kind == Kind::Checkpoint)?;
    let mut x = cx.finding(
        FindingId::CheckpointStall,
        "Checkpoints stopped the run",
        ns,
        false,
    );
    x.at_stake_pct = p;
    x.severity = run_severity(p);
    let t0 = cx.ctx.t0;
    let spans: Vec<(u64, u64)> = phases(r).map(|(s, e)| (t0 + s, t0 + e)).collect();
    let places = pysamples::tally(cx.ctx.t, pysamples::stand_in(cx.ctx.t, None), &spans);
    let busy = pct(kind.busy_ns, ns);
    let top = kind.idle.first();
    x.summary = format!(
        "Saving or loading checkpoints took {} of the {} run ({:.0}%, {} times){}, the GPU busy {:.0}% of it{}: no step ran meanwhile.",
        dur(ns),
        dur(r.span_ns),
        p,
        kind.phases,
        pysamples::first_place(&places)
            .map(|w| format!(" at {w}"))
            .unwrap_or_default(),
        busy,
        top.map(|c| format!(" and mostly idle for {} ({:.0}%)", c.cause, c.pct))
            .unwrap_or_default(),
    );
    x.evidence.push(format!(
        "checkpoint phases {} ({} of them), the loop {}",
        share(ns, r.span_ns),
        kind.phases,
        share(r.time(Kind::Loop), r.span_ns)
    ));
    if !kind.idle.is_empty() {
        let causes: Vec<String> = kind
            .idle
            .iter()
            .take(3)
            .map(|c| format!("{} {:.0}%", c.cause, c.pct))
            .collect();
        x.evidence.push(format!(
            "inside them the GPU was busy {busy:.0}%, idle by cause: {}",
            causes.join(", ")
        ));
    }
    if let Some(w) = pysamples::evidence(&places) {
        x.evidence
            .push(w.replace("in these gaps", "in these checkpoints"));
    }
    x.evidence.push(
        "told from the Python stack samples: most samples of those stretches were in torch.save / torch.load (torch/serialization.py), safetensors or orbax".into(),
    );
    let mut longest: Vec<(u64, u64)> = phases(r).collect();
    longest.sort_by_key(|&(s, e)| std::cmp::Reverse(e - s));
    for &(s, e) in longest.iter().take(3) {
        x.examples.push(Example {
            at_ns: s,
            dur_ns: e - s,
            what: "checkpoint".into(),
        });
    }
    x.metrics.insert("checkpoints".into(), kind.phases as f64);
    x.metrics.insert("gpu_busy_pct".into(), busy);
    x.fix = fix(top.map(|c| c.cause.as_str())).into();
    Some(x)
}

/// The checkpoint phases, ns after the trace start.
fn phases(r: &Run) -> impl Iterator<Item = (u64, u64)> + '_ {
    r.phases
        .iter()
        .filter(|p| p.kind == Kind::Checkpoint)
        .map(|p| (p.start_ns, p.end_ns))
}

fn fix(top_cause: Option<&str>) -> &'static str {
    match top_cause {
        Some("pageable_memcpy") | Some("sync_memcpy") | Some("implicit_sync") => "torch.save of a GPU state dict copies every tensor to pageable host memory, one blocking copy at a time, before writing it: save in the background (torch.distributed.checkpoint.async_save, or copy the state dict once into pinned CPU tensors with non_blocking=True and write it from a thread), save less often, and in data-parallel jobs save from one rank only.",
        _ => "The loop stops while the checkpoint is written: save in the background (torch.distributed.checkpoint.async_save, or a thread writing a CPU copy of the state dict), save less often or less (the model without optimizer state between full saves), write to local fast storage and copy it away later, and in data-parallel jobs save from one rank only.",
    }
}
