//! `pageable_memcpy`: host<->device copies from pageable memory, staged by the driver and
//! blocking the host.

use super::common::{bytes, dur, push_examples_line, share};
use super::inputs::Calls;
use super::inputs::FindingCx;
use crate::report::idle::Cause;
use crate::report::out::id::FindingId;
use crate::report::out::{Example, Finding};

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let idle = cx.idle(Cause::PageableMemcpy);
    let pg = &cx.copies.pageable;
    if pg.count == 0 && idle == 0 {
        return None;
    }
    let excess = cx.copies.pageable_excess_ns;
    let ns = idle + excess;
    if !cx.reportable(ns) {
        return None;
    }
    let mut x = cx.finding(
        FindingId::PageableMemcpy,
        "Copies from pageable host memory",
        ns,
        excess > 0,
    );
    x.summary = if excess > 0 {
        format!(
            "Host<->device copies from ordinary (pageable) memory are staged by the driver and block the host; they cost an estimated {} of the steady state: {} of GPU idle while the host was inside them (the time breakdown's pageable_memcpy) plus {} of copy time beyond the pinned rate.",
            share(ns, cx.wall),
            dur(idle),
            dur(excess)
        )
    } else {
        format!(
            "Host<->device copies from ordinary (pageable) memory are staged by the driver and block the host; they cost {} of the steady state (GPU idle while the host was inside them).",
            share(ns, cx.wall)
        )
    };
    if pg.count > 0 {
        copy_evidence(cx, &mut x);
    }
    x.evidence.push(format!(
        "GPU idle while the host was inside these copies: {}",
        dur(idle)
    ));
    if excess > 0 {
        x.evidence.push(format!(
            "copy time beyond the pinned rate, with no kernel alongside: {} (estimate)",
            dur(excess)
        ));
    }
    cx.add_call_sites(&mut x, Calls::Pageable);
    x.examples = pg
        .examples
        .iter()
        .map(|&(s, d, b)| Example {
            at_ns: cx.rel(s),
            dur_ns: d,
            what: format!("pageable copy of {}", bytes(b)),
        })
        .collect();
    push_examples_line(&mut x);
    cx.heuristic_note(&mut x);
    x.metrics.insert("idle_ns".into(), idle as f64);
    x.metrics.insert("excess_ns".into(), excess as f64);
    x.fix = "Pin the host buffers and copy asynchronously: DataLoader(pin_memory=True) (or tensor.pin_memory()), then .to(device, non_blocking=True); outside PyTorch, allocate with cudaHostAlloc/cudaMallocHost or register with cudaHostRegister and use cudaMemcpyAsync on a stream.".into();
    Some(x)
}

/// The pageable copies' rate against the pinned rate, as evidence and metrics.
fn copy_evidence(cx: &FindingCx, x: &mut Finding) {
    let pg = &cx.copies.pageable;
    let gbps = pg.gbps().unwrap_or(0.0);
    let reference = cx.copies.pageable_ref.map(|r| {
        if r.measured {
            format!("{:.1} GB/s measured on this trace's pinned copies", r.gbps)
        } else {
            format!(
                "~{:.0} GB/s typical for pinned copies over PCIe 5 on an H200 (estimate)",
                r.gbps
            )
        }
    });
    x.evidence.push(format!(
        "{} pageable copies, {}, {} on the GPU: {:.1} GB/s{}",
        pg.count,
        bytes(pg.bytes),
        dur(pg.time_ns),
        gbps,
        reference.map(|r| format!(" vs {r}")).unwrap_or_default()
    ));
    x.metrics.insert("copies".into(), pg.count as f64);
    x.metrics.insert("bytes".into(), pg.bytes as f64);
    x.metrics.insert("copy_ns".into(), pg.time_ns as f64);
    x.metrics.insert("achieved_gbps".into(), gbps);
    if let Some(r) = cx.copies.pageable_ref {
        x.metrics.insert("reference_gbps".into(), r.gbps);
    }
}
