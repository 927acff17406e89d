//! `env_pcie_degraded`: the GPU's PCIe link ran below its generation or width while the
//! job copied between host and device. Only periods with copies count (idle GPUs lower
//! the link speed to save power), and only when copies are a measurable share.

use super::common::dur;
use super::inputs::FindingCx;
use crate::report::environment;
use crate::report::out::id::FindingId;
use crate::report::out::Finding;

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let (s0, s1) = cx.steps.steady;
    let all = environment::pcie_degraded(cx.ctx.t, s0, s1);
    let p = all.iter().max_by_key(|p| p.copy_ns_degraded)?;
    // At full link rate the copies would have taken link_pct% of the time (an estimate
    // for copies that are link-bound).
    let ns = (p.copy_ns_degraded as f64 * (1.0 - p.link_pct / 100.0)) as u64;
    if !cx.reportable(p.copy_ns_degraded) {
        return None;
    }
    let mut x = cx.finding(
        FindingId::EnvPcieDegraded,
        "PCIe link below its maximum",
        ns,
        true,
    );
    x.summary = format!(
        "GPU {}'s link ran at gen {} x{} instead of gen {} x{} ({:.0}% of its bandwidth) while {} of host<->device copies ran.",
        p.device, p.gen, p.width, p.gen_max, p.width_max, p.link_pct, dur(p.copy_ns_degraded)
    );
    x.evidence.push(format!(
        "copies in those periods: {} of {} in the steady state",
        dur(p.copy_ns_degraded),
        dur(p.copy_ns)
    ));
    x.metrics.insert("link_pct".into(), p.link_pct);
    x.fix = if p.width < p.width_max {
        "The link trained narrower than it can: reseat the card, check the slot and riser (lspci -vv: LnkSta against LnkCap).".into()
    } else {
        "The link ran below its generation under load: check the slot, risers and the BIOS PCIe settings.".into()
    };
    Some(x)
}
