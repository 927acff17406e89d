//! libgputrace.so: preloaded into a CUDA process, it records what the GPU did (CUPTI
//! activity records) and the host side of the calls that fed it (CUPTI callbacks on a
//! few API ids, symbol hooks on the CUDA runtime, NCCL and NVTX, through lock-free
//! per-thread rings), into one trace file per process.
//!
//! It never blocks the program, never changes a return value or errno, and never takes
//! the process down: every failure turns tracing off with one `gputrace:` line.
//!
//! Layers, top to bottom; a module imports only from its own layer and those below
//! (interpose/tests/layers.rs checks it, and that no modules import each other in a
//! loop):
//!
//! ```text
//! exports   every symbol we export; the one constructor, the one fork handler
//!    |
//! runtime   the tracing life: start-up, cuInit, windows, stepping aside, exec, exit
//!    |
//! session   what records: CUPTI today (NVML, /proc and Python-stack samplers next)
//!    |
//! rings     per-thread rings of host records, and how they decode
//!    |
//! writer    the writer thread: drains its sources, writes chunks
//!    |
//! base      settings, state, clocks, the FFI guard, logging, discovery
//! ```

pub mod base;
pub mod exports;
pub mod rings;
pub mod runtime;
pub mod session;
pub mod writer;
