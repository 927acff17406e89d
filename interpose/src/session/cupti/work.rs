//! Whether CUDA is up with a context in this process: set when a launch call returned
//! or the writer decoded a kernel record (the PM sampling session waits for it).

use std::sync::atomic::{AtomicBool, Ordering};

static GPU_WORK: AtomicBool = AtomicBool::new(false);

pub fn gpu_work_seen() -> bool {
    GPU_WORK.load(Ordering::Acquire)
}

/// The writer decoded a kernel record.
pub fn note_gpu_work() {
    GPU_WORK.store(true, Ordering::Release);
}

/// A launch call returned successfully (once a store; a load after).
pub fn note_launch_returned() {
    if !GPU_WORK.load(Ordering::Relaxed) {
        note_gpu_work();
    }
}

/// In a forked child: the parent's CUDA is not this process's.
pub fn forget() {
    GPU_WORK.store(false, Ordering::Release);
}
