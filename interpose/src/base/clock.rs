//! Host clocks.
//!
//! Trace timestamps are in CUPTI's time base, which on Linux is CLOCK_REALTIME in ns
//! (CUPTI's documentation of `cuptiActivityRegisterTimestampCallback`). Host-side events
//! are stamped with CLOCK_REALTIME too, so host and GPU intervals line up with no
//! conversion; clock pairs (CUPTI, MONOTONIC, REALTIME) in the trace let the writer and
//! the analyzer check that, and correct for platforms where CUPTI uses another clock.

#[inline]
fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes it.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000) + ts.tv_nsec as u64
}

/// The trace time base for host events: CLOCK_REALTIME in ns (vDSO, about 20 ns).
#[inline]
pub fn now_ns() -> u64 {
    read(libc::CLOCK_REALTIME)
}

/// CLOCK_MONOTONIC in ns.
pub fn mono_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

/// The kernel thread id of the caller, cached per thread.
#[inline]
pub fn tid() -> u32 {
    super::local::with(|l| {
        let t = &l.tid;
        let v = t.get();
        if v != 0 {
            return v;
        }
        // SAFETY: gettid has no preconditions.
        let v = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
        t.set(v);
        v
    })
}

/// Forgets the forking thread's cached id: in the child it is a new thread.
pub fn reset_tid_after_fork() {
    super::local::with(|l| l.tid.set(0));
}
