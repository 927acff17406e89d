//! `small_grid`: kernels with far fewer blocks than the GPU holds resident, leaving SMs
//! empty while they run (an estimate from grid, block, registers and shared memory).

use super::common::{dur, pct_str, share};
use super::inputs::FindingCx;
use crate::report::kernels::NameAgg;
use crate::report::out::id::FindingId;
use crate::report::out::{Example, Finding};

/// The time at stake: the estimate from grid sizes, bounded by what the GPU's counters
/// measured (SM time with no warp while kernels ran) where they cover the steady state;
/// whether it is still the estimate; and the measured bound.
pub(super) fn stake(cx: &FindingCx) -> (u64, bool, Option<u64>) {
    let est = cx.kstats.small_grid_ns as u64;
    let bound = measured_bound(cx);
    match bound {
        Some(b) if b < est => (b, false, bound),
        _ => (est, true, bound),
    }
}

/// SM time left with no warp while kernels ran in the steady state, from GPM's SM
/// activity: no grid could have filled more than that. None without samples covering
/// most of the steady state of a one-device process.
fn measured_bound(cx: &FindingCx) -> Option<u64> {
    if cx.ctx.devices.len() != 1 {
        return None;
    }
    cx.counters.sm_idle?.bound_over(cx.report.steady.wall_ns)
}

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let est = cx.kstats.small_grid_ns as u64;
    let (ns, estimated, bound) = stake(cx);
    if !cx.reportable(ns) {
        return None;
    }
    let r = cx.report;
    let mut x = cx.finding(
        FindingId::SmallGrid,
        "Kernels with far fewer blocks than the GPU holds",
        ns,
        estimated,
    );
    x.summary = format!(
        "Kernels with fewer blocks than SMs, filling less than a quarter of the GPU's resident-block slots, leave SMs empty while they run; the empty share of their time is {} of the steady state ({}).",
        share(ns, cx.wall),
        if estimated {
            "estimate"
        } else {
            "bounded by the SM activity measured"
        }
    );
    x.evidence.push(basis_line(cx, est, bound));
    x.metrics.insert("estimate_ns".into(), est as f64);
    if let Some(b) = bound {
        x.metrics.insert("measured_bound_ns".into(), b as f64);
    }
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
        if let Some(m) = measured_line(cx, a.name) {
            x.evidence.push(m);
        }
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

/// What the time at stake rests on: the estimate's assumption, and the measurement that
/// bounds it when there is one.
fn basis_line(cx: &FindingCx, est: u64, bound: Option<u64>) -> String {
    let Some(b) = bound else {
        return format!(
            "estimated from grid, block, registers and shared memory ({}), assuming every resident-block slot left empty is lost time; no GPU counters checked it (gputrace run samples NVML GPM, which measures SM activity)",
            dur(est)
        );
    };
    let sm = cx
        .counters
        .measured
        .as_ref()
        .and_then(|m| m.m.sm_active_pct)
        .map(pct_str)
        .unwrap_or_else(|| "?".into());
    format!(
        "measured: SMs active {sm} of the steady state while kernels ran {} of it, so SMs sat with no warp during kernels for at most {} ({}); the estimate from grid sizes, {}, is {}",
        share(cx.report.steady.busy_ns, cx.report.steady.wall_ns),
        dur(b),
        share(b, cx.wall),
        dur(est),
        if b < est { "capped at it" } else { "within it" }
    )
}

/// What the GPU's counters measured while kernel `name` ran (NVML GPM): the SMs that
/// were busy and how many warps each held. Busy SMs with low occupancy mean few warps
/// per SM; few busy SMs mean the grid left SMs empty.
fn measured_line(cx: &FindingCx, name: u32) -> Option<String> {
    use crate::report::counters::{BUSY_SM_PCT, LOW_OCCUPANCY_PCT};
    let k = cx
        .counters
        .by_kernel
        .iter()
        .find(|k| k.name == name && k.sampled_ns > 0)?;
    let (sm, occ) = (k.m.sm_active_pct?, k.m.occupancy_pct?);
    let what = if sm >= BUSY_SM_PCT && occ < LOW_OCCUPANCY_PCT {
        ": SMs busy but few warps each (low occupancy)"
    } else if sm < BUSY_SM_PCT {
        ": SMs left idle"
    } else {
        ""
    };
    Some(format!(
        "measured while {} ran ({}): SMs active {}, occupancy {}{what}",
        cx.kernel_name(name),
        if k.exact {
            "exact"
        } else {
            "mixed with other kernels"
        },
        pct_str(sm),
        pct_str(occ)
    ))
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
