//! The gputrace analyzer: reads traces written by libgputrace.so and says what the GPU
//! did and what it was waiting for. All logic lives here; the `gputrace` binary only
//! parses arguments and prints.

pub mod attach;
pub mod doctor;
pub mod dump;
pub mod env;
pub mod par;
pub mod report;
pub mod run;
pub mod summary;
pub mod trace;

pub use trace::Trace;

pub use report::{analyze, render_text, Report};
