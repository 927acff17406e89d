//! What the exporters read of the analysis, in one place: the report and each
//! process's [`Timeline`] (from [`super::analyze::analyze_timelines`]), and the analysis's own
//! answers about single records (a CUDA graph replay, a Python stack's place, whether a
//! call submits GPU work), so that an exporter labels them as the report does and never
//! works them out again. The exporters (`export/`) import this, the report's public
//! types and its documents (`summary`, `diff`), nothing else of `report/`.

use super::classify::{self, ApiKind};
use gputrace_format as fmt;

pub use super::callsites::short_file;
pub use super::graphs::Replay;
pub use super::keymap::{Fx, FxMap};
pub use super::out::{Finding, ProcessReport, Report, Timeline};
pub use super::pysamples::place_of;

/// Whether a host API call submits GPU work (a launch, a copy, a memset: the start of a
/// launch arrow), as the idle pass classifies it.
pub fn submits_gpu_work(a: &fmt::Api, name: &str) -> bool {
    matches!(
        classify::api_kind(a, name),
        ApiKind::Launch | ApiKind::CopyAsync | ApiKind::CopySync | ApiKind::Memset
    )
}
