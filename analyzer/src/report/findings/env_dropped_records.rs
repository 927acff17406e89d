//! `env_dropped_records`: records the collector lost; every number undercounts by as much.

use super::inputs::FindingCx;
use crate::report::out::id::FindingId;
use crate::report::out::{Finding, Severity};
use gputrace_format::{DROP_BUFFER_POOL, DROP_CUPTI, DROP_RING};

/// Dropped records from this share of all: a warning.
const WARN_PCT: f64 = 5.0;
/// From this share, critical: the verdict leads with the loss (`verdict::losses`).
pub(crate) const CRITICAL_PCT: f64 = 25.0;

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let t = cx.ctx.t;
    let dropped: u64 = t.drops.iter().map(|d| d.2).sum();
    if dropped == 0 {
        return None;
    }
    // Traces without a stats record: count what was read.
    let recorded = if t.stats.events > 0 {
        t.stats.events
    } else {
        (t.kernels.len()
            + t.memcpys.len()
            + t.memsets.len()
            + t.apis.len()
            + t.syncs.len()
            + t.memory.len()) as u64
    };
    let total = recorded.max(1) + dropped;
    let share = 100.0 * dropped as f64 / total as f64;
    let mut x = cx.finding(
        FindingId::EnvDroppedRecords,
        "Records were dropped",
        0,
        false,
    );
    x.severity = if share >= CRITICAL_PCT {
        Severity::Critical
    } else if share >= WARN_PCT {
        Severity::Warn
    } else {
        Severity::Info
    };
    x.summary = format!(
        "{} records were lost ({:.1}% of all): {} by CUPTI, {} to ring overflow, {} to buffer-pool exhaustion; numbers above undercount by about that much.",
        dropped,
        share,
        t.dropped(DROP_CUPTI),
        t.dropped(DROP_RING),
        t.dropped(DROP_BUFFER_POOL)
    );
    x.metrics.insert("dropped".into(), dropped as f64);
    x.metrics.insert("dropped_pct".into(), share);
    x.fix = "Give the collector more buffer space (GPUTRACE_BUFFER_POOL_MB, GPUTRACE_BUFFER_KB) or trace a shorter window; a writer that falls behind needs a CPU of its own.".into();
    Some(x)
}
