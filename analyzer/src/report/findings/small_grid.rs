//! `small_grid`: kernels with far fewer blocks than the GPU holds resident, leaving SMs
//! empty while they run (an estimate from grid, block, registers and shared memory).

use super::common::{dur, pct_str, share};
use super::{FindingCx, FindingId};
use crate::report::kernels::NameAgg;
use crate::report::{Example, Finding};

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let ns = cx.kstats.small_grid_ns as u64;
    if !cx.reportable(ns) {
        return None;
    }
    let r = cx.report;
    let mut x = cx.finding(
        FindingId::SmallGrid,
        "Kernels with far fewer blocks than the GPU holds",
        ns,
        true,
    );
    x.summary = format!(
        "Kernels with fewer blocks than SMs, filling less than a quarter of the GPU's resident-block slots, leave SMs empty while they run; the empty share of their time is {} of the steady state (estimate).",
        share(ns, cx.wall)
    );
    x.evidence.push(format!(
        "nvidia-smi GPU-Util would read {:.0}% (time with any kernel running); SM fill actually achieved ~{} (time-weighted resident blocks / slots, estimated from grid, block, registers and shared memory)",
        r.gpu_util_pct,
        r.sm_fill_pct.map(pct_str).unwrap_or_else(|| "?".into())
    ));
    let mut small: Vec<&NameAgg> = cx
        .kstats
        .by_name
        .iter()
        .filter(|a| a.empty_ns > 0.0)
        .collect();
    small.sort_by(|a, b| b.empty_ns.total_cmp(&a.empty_ns).then(a.name.cmp(&b.name)));
    for a in small.iter().take(3) {
        x.evidence.push(kernel_line(cx, a));
        x.examples.push(Example {
            at_ns: cx.rel(a.longest.0),
            dur_ns: a.longest.1,
            what: format!("{} ({} blocks)", cx.kernel_name(a.name), a.blocks_max),
        });
    }
    x.metrics.insert("gpu_util_pct".into(), r.gpu_util_pct);
    if let Some(p) = r.sm_fill_pct {
        x.metrics.insert("sm_fill_pct".into(), p);
    }
    x.fix = "Give each kernel more parallel work: raise the batch size (or tokens per step); for your own kernels launch enough blocks to cover every SM several times (grid-stride loops), or use smaller blocks; run independent small kernels concurrently on separate streams.".into();
    Some(x)
}

/// One small-grid kernel: its grid against what the GPU holds, and the fill it got.
fn kernel_line(cx: &FindingCx, a: &NameAgg) -> String {
    let sms = cx
        .ctx
        .primary
        .and_then(|d| cx.ctx.device_info(d))
        .map(|d| d.sm_count)
        .unwrap_or(0);
    let blocks = if a.blocks_min == a.blocks_max {
        a.blocks_max.to_string()
    } else {
        format!("{}-{}", a.blocks_min, a.blocks_max)
    };
    let fill = if a.fill_known_ns > 0 {
        100.0 * a.fill_ns / a.fill_known_ns as f64
    } else {
        0.0
    };
    format!(
        "{} x{}: {} blocks of {} threads vs {} SMs x {} resident = {} full, {} in total",
        cx.kernel_name(a.name),
        a.count,
        blocks,
        a.threads,
        sms,
        a.resident,
        pct_str(fill),
        dur(a.total_ns)
    )
}
