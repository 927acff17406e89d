//! `gputrace report`: what the GPU was waiting for, how much each cause cost, and what
//! to change.
//!
//! [`analyze`] turns one trace per process into a [`Report`]: per process the start-up /
//! steady-state split (from detected training steps), the steady state's time breakdown
//! (busy, idle by cause, unattributed), kernel, launch, copy, memory and communication
//! facts, and ranked [`Finding`]s with the stable ids of the findings vocabulary; across
//! several ranks, clock alignment and collective arrival skew. [`render_text`] prints it.
//! The JSON form is `serde_json::to_string(&report)` (schema in README.md).

pub mod callsites;
pub mod cause;
pub mod classify;
pub mod comm;
pub mod copies;
pub mod counters;
pub mod ctx;
pub mod damage;
pub mod diff;
pub mod endings;
pub mod environment;
pub mod failures;
mod findings;
pub mod graphs;
mod hang_ranks;
pub mod host;
pub mod host_causes;
mod host_hang;
pub mod idle;
pub mod intervals;
pub mod kernels;
pub mod keymap;
pub mod launch_source;
pub mod links;
pub mod load;
pub mod memuse;
pub mod oom;
pub mod phases;
pub mod pysamples;
pub mod render;
pub mod stalls;
pub mod steps;
pub mod summary;
pub mod syncfix;
pub mod units;
mod verdict;
pub mod view;

mod analyze;
pub mod out;

pub use analyze::{analyze, analyze_timelines};
pub use ctx::Ctx;
pub use damage::TraceDamage;
pub use findings::{About, FindingId, Layer, Stake, UnknownFindingId};
pub use idle::Cause;
pub use out::*;
pub use render::render_text;
