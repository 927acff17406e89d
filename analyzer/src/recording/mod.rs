//! What the `gputrace` command records itself while the job it runs is traced.

pub mod nvml;
pub mod owner;
