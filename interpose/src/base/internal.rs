//! Marks code running on behalf of the tracer, so our own hooks and callbacks ignore it.

use super::local;

/// True on the tracer's own threads and inside the tracer's own CUDA/CUPTI calls.
#[inline]
pub fn is_internal() -> bool {
    local::with(|l| l.internal.get() != 0)
}

/// Marks the current scope as the tracer's own.
pub struct Internal(());

impl Internal {
    pub fn enter() -> Internal {
        local::with(|l| l.internal.set(l.internal.get() + 1));
        Internal(())
    }
}

impl Drop for Internal {
    fn drop(&mut self) {
        local::with(|l| l.internal.set(l.internal.get().saturating_sub(1)));
    }
}

/// Marks the whole current thread as the tracer's own (the writer thread).
pub fn mark_thread_internal() {
    local::with(|l| l.internal.set(1 << 30));
}
