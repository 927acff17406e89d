//! The sessions layer: each session records one kind of thing for as long as a trace
//! (or a trace window) is open, started and stopped by the runtime.
//!
//! [`cupti`]: GPU activity and the host side of CUDA API calls; [`env`]: the
//! environment (versions, limits, NVML samples of clocks, power, PCIe, other processes);
//! [`host`]: the host side from /proc (the CUDA threads' CPU time, the process tree,
//! the machine's CPU); [`pystack`]: the Python stacks of the calls that matter;
//! [`stall`]: the launches outstanding and the calls threads are in, for stall reports.
//! The GPU's performance counters are read from outside the process (NVML GPM, by
//! `gputrace run` / `attach`), not by a session here.
//!
//! Every session implements [`lifecycle::Session`] (open, start, flush, stop, fork
//! child, describe), and the runtime iterates over [`lifecycle::SESSIONS`]. A new
//! session goes next to the others as `session/<name>/`, and needs:
//! * its own start and stop, and a reset for a forked child;
//! * its records handed to the writer as a `writer::Source`, decoded on the writer
//!   thread: either its own queue of typed records, like CUPTI's completed buffers, or
//!   the host rings (`rings::push`) for records made on the program's threads;
//! * an adapter in `lifecycle.rs` implementing `Session` with those, and a place in
//!   `SESSIONS` (the writer drains the sources in that order).
//!
//! A session may use the rings, the writer and `base`; never the runtime or the exports.

pub mod cupti;
pub mod env;
pub mod host;
pub mod lifecycle;
pub mod pystack;
pub mod stall;
