//! Marks code running on behalf of the tracer, so our own hooks and callbacks ignore it.

use std::cell::Cell;

thread_local! {
    static INTERNAL: Cell<u32> = const { Cell::new(0) };
}

/// True on the tracer's own threads and inside the tracer's own CUDA/CUPTI calls.
#[inline]
pub fn is_internal() -> bool {
    INTERNAL.try_with(|c| c.get() != 0).unwrap_or(true)
}

/// Marks the current scope as the tracer's own.
pub struct Internal(());

impl Internal {
    pub fn enter() -> Internal {
        let _ = INTERNAL.try_with(|c| c.set(c.get() + 1));
        Internal(())
    }
}

impl Drop for Internal {
    fn drop(&mut self) {
        let _ = INTERNAL.try_with(|c| c.set(c.get().saturating_sub(1)));
    }
}

/// Marks the whole current thread as the tracer's own (the writer thread).
pub fn mark_thread_internal() {
    let _ = INTERNAL.try_with(|c| c.set(1 << 30));
}
