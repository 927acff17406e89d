//! The bottom layer: what every other layer uses and which uses none of them. Settings,
//! the lifecycle state, clocks, the FFI guard, logging, the tracer's own-thread marker,
//! library discovery and the table of CUDA API callback ids.

pub mod clock;
pub mod cupti;
pub mod ffi;
pub mod internal;
pub mod local;
pub mod log;
pub mod opts;
pub mod secure;
pub mod state;
pub mod tsc;
pub mod worker;
