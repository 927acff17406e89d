//! The environment layer of gputrace: what the machine, the driver and the other
//! processes on the GPU did to the job.
//!
//! * [`nvml`]: a thin NVML binding, loaded at run time (the library still loads where
//!   NVML is absent or refuses us);
//! * [`facts`]: facts read once (versions, modes, CPU and memory limits, affinity),
//!   from NVML and from /proc and /sys, never by running a program;
//! * [`sampler`]: one NVML tick of every GPU as trace events (clocks and their event
//!   reasons, power, temperature, utilisation, memory, PCIe link, the processes on
//!   the GPU with their share of it, Xid and ECC errors).
//!
//! * [`gpm`]: NVML GPM, the GPU's activity counters (SMs, occupancy, tensor and FP
//!   pipes, DRAM bandwidth), as counter samples.
//!
//! Shared by the preload library (which samples while a trace window is open) and the
//! analyzer (`gputrace doctor`).

pub mod facts;
pub mod gpm;
pub mod nvml;
pub mod sampler;
pub mod worker;

pub use nvml::{Nvml, NvmlError};
pub use sampler::{Item, Sampler};
