//! The program's own CUPTI use (torch.profiler, say), as our CUPTI hooks see it: which
//! activity kinds it has enabled, and its buffer callbacks, so they can be put back if
//! we registered ours over them. The runtime steps aside while it holds CUPTI.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Activity kinds the program itself has enabled (bit per kind below 64).
static KINDS: AtomicU64 = AtomicU64::new(0);
/// The program's own buffer callbacks, as addresses (0: none).
static REQUEST: AtomicUsize = AtomicUsize::new(0);
static COMPLETE: AtomicUsize = AtomicUsize::new(0);

/// True while the program has CUPTI activity kinds of its own enabled.
pub fn holds_cupti() -> bool {
    KINDS.load(Ordering::Acquire) != 0
}

/// The program enabled activity kind `kind`.
pub fn enabled(kind: u32) {
    if kind < 64 {
        KINDS.fetch_or(1 << kind, Ordering::AcqRel);
    }
}

/// The program disabled activity kind `kind`.
pub fn disabled(kind: u32) {
    if kind < 64 {
        KINDS.fetch_and(!(1 << kind), Ordering::AcqRel);
    }
}

/// The program finalized CUPTI: nothing of its own is enabled any more.
pub fn finalized() {
    KINDS.store(0, Ordering::Release);
}

/// The program registered its buffer callbacks (addresses of its functions, 0 for none).
pub fn registered_callbacks(request: usize, complete: usize) {
    REQUEST.store(request, Ordering::Release);
    COMPLETE.store(complete, Ordering::Release);
}

/// The program's buffer callbacks, if it registered both.
pub fn callbacks() -> Option<(usize, usize)> {
    let (req, done) = (
        REQUEST.load(Ordering::Acquire),
        COMPLETE.load(Ordering::Acquire),
    );
    (req != 0 && done != 0).then_some((req, done))
}
