//! CUPTI's activity buffers: the pool we hand them out from, and the typed queue that
//! carries completed ones from CUPTI's thread to the writer thread, where the session's
//! source (`source.rs`) decodes them and gives them back.

use crate::base::worker::lock;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

#[derive(Default)]
struct Pool {
    free: Vec<usize>,
    ours: Vec<usize>,
    buffer_bytes: usize,
    cap_bytes: usize,
    /// CUPTI expects zeroed buffers from us (ZEROED_OUT_ACTIVITY_BUFFER accepted).
    zeroed: bool,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    free: Vec::new(),
    ours: Vec::new(),
    buffer_bytes: 0,
    cap_bytes: 0,
    zeroed: false,
});

/// A buffer CUPTI filled and handed back: `valid` bytes of records. Ours (from the pool)
/// or, after we took CUPTI back from the program, one of its buffers (read, never
/// reused). Give it back with [`Completed::recycle`] once read.
#[must_use = "a completed buffer goes back to the pool once read"]
pub struct Completed {
    addr: usize,
    valid: usize,
}

impl Completed {
    /// The buffer and how many bytes of records it holds.
    pub fn records(&self) -> (*mut u8, usize) {
        (self.addr as *mut u8, self.valid)
    }

    /// Returns the buffer to the pool, its written bytes cleared when CUPTI was
    /// promised zeroed buffers (the rest was never written).
    pub fn recycle(self) {
        let (ours, size, zeroed) = {
            let p = lock(&POOL);
            (p.ours.contains(&self.addr), p.buffer_bytes, p.zeroed)
        };
        if !ours {
            return;
        }
        if zeroed {
            // SAFETY: `addr` is one of our buffers of `size` bytes, handed back by CUPTI
            // and used by no one but this thread until it is on the free list again.
            unsafe { std::ptr::write_bytes(self.addr as *mut u8, 0, self.valid.min(size)) };
        }
        lock(&POOL).free.push(self.addr);
    }
}

/// Completed buffers waiting for the writer thread.
static COMPLETED: Mutex<Vec<Completed>> = Mutex::new(Vec::new());
/// Records CUPTI reported dropped, and buffer requests we could not serve.
static CUPTI_DROPPED: AtomicU64 = AtomicU64::new(0);
static POOL_EXHAUSTED: AtomicU64 = AtomicU64::new(0);

/// Sets the buffer size and cap, and allocates two zeroed buffers up front, off the
/// application's launch path.
pub fn configure(buffer_bytes: usize, cap_bytes: usize) {
    let mut p = lock(&POOL);
    p.buffer_bytes = buffer_bytes;
    p.cap_bytes = cap_bytes;
    for _ in 0..2 {
        if (p.ours.len() + 1) * p.buffer_bytes > p.cap_bytes {
            break;
        }
        match alloc_zeroed(buffer_bytes) {
            Some(a) => {
                p.ours.push(a);
                p.free.push(a);
            }
            None => break,
        }
    }
}

fn alloc_zeroed(bytes: usize) -> Option<usize> {
    let mut m: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid out-pointer; alignment 8 is what CUPTI requires.
    if unsafe { libc::posix_memalign(&mut m, 8, bytes) } != 0 || m.is_null() {
        return None;
    }
    // SAFETY: `m` is a fresh allocation of `bytes` bytes.
    unsafe { std::ptr::write_bytes(m as *mut u8, 0, bytes) };
    Some(m as usize)
}

/// A buffer for CUPTI: (address, size), or `None` (counted) when the pool is at its cap.
pub fn take() -> Option<(usize, usize)> {
    let mut p = lock(&POOL);
    let addr = match p.free.pop() {
        Some(a) => Some(a),
        None if (p.ours.len() + 1) * p.buffer_bytes <= p.cap_bytes => {
            alloc_zeroed(p.buffer_bytes).inspect(|a| p.ours.push(*a))
        }
        None => None,
    };
    if addr.is_none() {
        POOL_EXHAUSTED.fetch_add(1, Ordering::Relaxed);
    }
    addr.map(|a| (a, p.buffer_bytes))
}

/// Queues a buffer CUPTI completed, for the writer thread.
pub fn complete(buf: *mut u8, valid: usize) {
    lock(&COMPLETED).push(Completed {
        addr: buf as usize,
        valid,
    });
}

/// Whether completed buffers wait for the writer.
pub fn any_completed() -> bool {
    !lock(&COMPLETED).is_empty()
}

/// Every completed buffer queued so far.
pub fn take_completed() -> Vec<Completed> {
    std::mem::take(&mut *lock(&COMPLETED))
}

/// Records CUPTI says it dropped.
pub fn note_dropped(n: u64) {
    if n > 0 {
        CUPTI_DROPPED.fetch_add(n, Ordering::Relaxed);
    }
}

/// (records CUPTI dropped, buffer requests refused) since the last call.
pub fn take_losses() -> (u64, u64) {
    (
        CUPTI_DROPPED.swap(0, Ordering::Relaxed),
        POOL_EXHAUSTED.swap(0, Ordering::Relaxed),
    )
}

/// Whether CUPTI was promised zeroed buffers (it accepted ZEROED_OUT_ACTIVITY_BUFFER).
pub fn set_zeroed(on: bool) {
    lock(&POOL).zeroed = on;
}

pub fn zeroed() -> bool {
    lock(&POOL).zeroed
}

/// In a forked child: only try_lock here (a parent thread may have held a lock at the
/// fork, and in the child it would never be released). The buffers are leaked.
pub fn forget_after_fork() {
    if let Ok(mut p) = POOL.try_lock() {
        p.free.clear();
        p.ours.clear();
    }
    if let Ok(mut c) = COMPLETED.try_lock() {
        // Leaked, not recycled: the pool is the parent's.
        std::mem::forget(std::mem::take(&mut *c));
    }
}
