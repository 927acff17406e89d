//! Whether CUDA is up with a context in this process, and on which device: set when a
//! launch call returned or the writer decoded a kernel record (the PM sampling session
//! waits for it, and samples that device).

use cupti_sys as sys;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

static GPU_WORK: AtomicBool = AtomicBool::new(false);
/// The device of the first work seen; `u32::MAX` while not known.
static DEVICE: AtomicU32 = AtomicU32::new(u32::MAX);
pub fn gpu_work_seen() -> bool {
    GPU_WORK.load(Ordering::Acquire)
}

/// The device (CUDA ordinal) of the first work seen, when known.
pub fn gpu_device() -> Option<u32> {
    let d = DEVICE.load(Ordering::Acquire);
    (d != u32::MAX).then_some(d)
}

fn note_device(device: Option<u32>) {
    if let Some(d) = device.filter(|d| *d != u32::MAX) {
        let _ = DEVICE.compare_exchange(u32::MAX, d, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// The writer decoded a kernel record of `device`.
pub fn note_gpu_work(device: Option<u32>) {
    note_device(device);
    GPU_WORK.store(true, Ordering::Release);
}

/// A launch call returned successfully in `context`: the first one notes that CUDA is
/// up (a store once; a load after).
pub fn note_launch_returned(_context: sys::CUcontext) {
    if !GPU_WORK.load(Ordering::Relaxed) {
        note_gpu_work(None);
    }
}

/// In a forked child: the parent's CUDA is not this process's.
pub fn forget() {
    GPU_WORK.store(false, Ordering::Release);
    DEVICE.store(u32::MAX, Ordering::Release);
}
