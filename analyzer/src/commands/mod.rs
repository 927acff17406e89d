//! The `gputrace` commands, each the logic behind one subcommand.

pub mod app;
pub mod attach;
pub mod doctor;
pub mod hangwatch;
pub mod inject;
pub mod run;
