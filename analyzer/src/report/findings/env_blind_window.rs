//! `env_blind_window`: stretches in which the collector recorded no GPU activity (another
//! CUPTI user held the subscriber).

use super::common::dur;
use super::inputs::FindingCx;
use crate::report::intervals::clip_len;
use crate::report::out::id::FindingId;
use crate::report::out::{Example, Finding, Severity};
use crate::report::units::pct;

/// Blind for this share of the steady state: a warning.
const WARN_PCT: f64 = 20.0;

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let windows = &cx.ctx.blind;
    if windows.is_empty() {
        return None;
    }
    let (s0, s1) = cx.steps.steady;
    let blind: u64 = windows.iter().map(|b| clip_len(b.0, b.1, s0, s1)).sum();
    let blind_all: u64 = windows.iter().map(|b| b.1.saturating_sub(b.0)).sum();
    let mut x = cx.finding(
        FindingId::EnvBlindWindow,
        "The collector was blind part of the time",
        blind,
        false,
    );
    x.severity = if pct(blind, cx.wall.max(1)) >= WARN_PCT {
        Severity::Warn
    } else {
        Severity::Info
    };
    x.summary = format!(
        "GPU activity was not recorded for {} ({} of it in the steady state), usually because another CUPTI user (torch.profiler, Nsight) took the subscriber.",
        dur(blind_all),
        dur(blind)
    );
    x.examples = windows
        .iter()
        .take(3)
        .map(|b| Example {
            at_ns: cx.rel(b.0),
            dur_ns: b.1.saturating_sub(b.0),
            what: if b.2.is_empty() {
                "blind".into()
            } else {
                b.2.clone()
            },
        })
        .collect();
    x.evidence.push(format!("{} blind windows", windows.len()));
    x.fix = "Do not run torch.profiler or Nsight in the same process while tracing (CUDA < 13.3 allows one CUPTI subscriber), or trace a window outside the profiled steps.".into();
    Some(x)
}
