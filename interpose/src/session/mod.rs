//! The sessions layer: each session records one kind of thing for as long as a trace
//! (or a trace window) is open, started and stopped by the runtime.
//!
//! [`cupti`]: GPU activity and the host side of CUDA API calls; [`env`]: the
//! environment (versions, limits, NVML samples of clocks, power, PCIe, other processes);
//! [`host`]: the host side from /proc (the CUDA threads' CPU time, the process tree,
//! the machine's CPU); [`pystack`]: the Python stacks of the calls that matter.
//! the machine's CPU); [`pm`]: GPU hardware counters (CUPTI PM sampling).
//! A new session (NVML counters, host /proc samples, Python stacks) goes next to it as
//! `session/<name>/`, and needs:
//! * a way to start and stop, called from `runtime::start_tracing` and
//!   `runtime::finish` / the end of `runtime::window` next to the CUPTI session's;
//! * its records handed to the writer as a `writer::Source` (given to `writer::start`
//!   in `runtime::start_tracing`), decoded on the writer thread: either its own queue of
//!   typed records, like CUPTI's completed buffers, or the host rings
//!   (`rings::push`) for records made on the program's threads;
//! * a reset for a forked child, called from `runtime::after_fork`.
//!
//! A session may use the rings, the writer and `base`; never the runtime or the exports.

pub mod cupti;
pub mod env;
pub mod host;
pub mod pm;
pub mod pystack;
pub mod stall;
