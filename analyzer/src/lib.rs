//! The gputrace analyzer: reads traces written by libgputrace.so and says what the GPU
//! did and what it was waiting for. All logic lives here; the `gputrace` binary only
//! parses arguments, calls [`app`] (or [`run`], [`attach`]) and prints.
//!
//! Layers: [`trace`] (a trace file decoded into tables) and [`load`] (the traces a
//! command was given) -> [`report`], [`summary`] (analyses) -> [`export`] (every
//! output format) -> [`app`] (the commands).

pub mod app;
pub mod attach;
pub mod diff;
pub mod doctor;
pub mod env;
pub mod env_merge;
pub mod env_record;
pub mod error;
pub mod export;
pub mod hangwatch;
pub mod job;
pub mod load;
pub mod par;
pub mod report;
pub mod run;
pub mod summary;
pub mod trace;

pub use error::Error;
pub use trace::Trace;

pub use report::{analyze, render_text, Report};
