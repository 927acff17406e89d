//! `comm_exposed`: NCCL kernels that ran with no compute kernel alongside.

use super::common::{dur, share};
use super::inputs::Calls;
use super::inputs::FindingCx;
use crate::report::out::id::FindingId;
use crate::report::out::{Example, Finding};
use crate::report::units::pct;

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let cm = &cx.comm;
    let ns = cm.exposed_ns;
    if cm.kernels == 0 || !cx.reportable(ns) {
        return None;
    }
    let mut x = cx.finding(
        FindingId::CommExposed,
        "Collective time not hidden behind compute",
        ns,
        false,
    );
    x.summary = format!(
        "NCCL kernels ran with no compute kernel alongside for {} of the steady state.",
        share(ns, cx.wall)
    );
    x.evidence.push(format!(
        "{} NCCL kernels, {} of communication, {} of it ({:.0}%) exposed",
        cm.kernels,
        dur(cm.comm_ns),
        dur(ns),
        pct(ns, cm.comm_ns)
    ));
    let names: Vec<String> = cm
        .names
        .iter()
        .take(3)
        .map(|(n, cnt, t)| format!("{} x{} ({})", cx.kernel_name(*n), cnt, dur(*t)))
        .collect();
    x.evidence.push(format!("by kernel: {}", names.join("; ")));
    x.examples = cm
        .examples
        .iter()
        .map(|&(s, d, n)| Example {
            at_ns: cx.rel(s),
            dur_ns: d,
            what: cx.kernel_name(n),
        })
        .collect();
    cx.add_call_sites(&mut x, Calls::Nccl);
    x.metrics.insert("comm_ns".into(), cm.comm_ns as f64);
    x.metrics.insert("exposed_ns".into(), ns as f64);
    x.fix = "Overlap communication with compute: let DDP all-reduce gradient buckets during backward (tune bucket_cap_mb, gradient_as_bucket_view=True) instead of one all_reduce after it; accumulate gradients over N micro-batches under model.no_sync() to communicate less often; check NCCL settings (NCCL_ALGO, NCCL_PROTO, NCCL_MIN_NCHANNELS; NCCL_DEBUG=INFO shows the transport) and the topology (nvidia-smi topo -m).".into();
    Some(x)
}
