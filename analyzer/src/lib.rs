//! The gputrace analyzer: reads traces written by libgputrace.so and says what the GPU
//! did and what it was waiting for. All logic lives here; the `gputrace` binary only
//! parses arguments, calls [`commands`] and prints.
//!
//! Layers, each importing only those below it:
//! - [`commands`]: the `gputrace` commands (`run`, `attach`, `doctor`, `diff`, `summary`,
//!   and [`commands::app`], which dispatches report, dump and export);
//! - [`export`]: every output format (text, JSON, the streamed JSON lines of `dump`,
//!   Chrome, Perfetto, Parquet);
//! - [`report`]: the analysis (what the GPU waited for, the findings, the environment
//!   rules in [`report::environment`]);
//! - [`model`]: a trace file decoded into tables ([`model::trace`]), the traces a command
//!   was given ([`model::load`], [`model::job`]), the environment files given to the
//!   process traces they cover ([`model::env_files`]);
//! - [`recording`]: what the command itself records while a job runs (NVML, GPM:
//!   [`recording::nvml`]).
//!
//! Beside them, [`secrets`] says how the command stores and shows command lines
//! (redacted).

pub mod commands;
pub mod error;
pub mod export;
#[cfg(feature = "fleet")]
pub mod fleet;
pub mod model;
pub mod par;
pub mod recording;
pub mod report;
pub mod secrets;
pub mod threads;

pub use error::Error;
pub use model::trace::Trace;

pub use report::{analyze, render_text, Report};
