//! A session's own thread, started when a trace window opens and asked to end when it
//! closes (the environment and PM sessions): at most one per session at a time, a panic
//! in it caught and said once, its end waited for with a bound, forgotten in a forked
//! child. Also the lock every layer takes: a poisoned mutex is still used (a panic
//! elsewhere must not stop the tracer).

use super::internal::mark_thread_internal;
use super::log;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Locks `m`, poisoned or not.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The state of one session's thread; a `static` of the session.
pub struct Worker {
    running: AtomicBool,
    stop: Mutex<bool>,
    stop_cv: Condvar,
    done: Mutex<bool>,
    done_cv: Condvar,
}

impl Worker {
    pub const fn new() -> Worker {
        Worker {
            running: AtomicBool::new(false),
            stop: Mutex::new(false),
            stop_cv: Condvar::new(),
            done: Mutex::new(true),
            done_cv: Condvar::new(),
        }
    }

    /// Claims the worker for a new window: false while the last window's thread is
    /// still running (the new window then goes without this session).
    pub fn claim(&self) -> bool {
        if self.running.swap(true, Ordering::AcqRel) {
            return false;
        }
        *lock(&self.stop) = false;
        *lock(&self.done) = false;
        true
    }

    /// Runs `body` on a thread of its own named `name` (after [`Worker::claim`]); a panic
    /// in it is logged as `on_panic`.
    pub fn spawn(
        &'static self,
        name: &str,
        on_panic: &'static str,
        body: impl FnOnce() + Send + 'static,
    ) {
        let spawned = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                mark_thread_internal();
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).is_err() {
                    log::warn(on_panic);
                }
                self.finish();
            });
        if spawned.is_err() {
            self.finish();
        }
    }

    fn finish(&self) {
        self.running.store(false, Ordering::Release);
        *lock(&self.done) = true;
        self.done_cv.notify_all();
    }

    /// Asks the thread to end and waits at most `wait` for it; false when it did not
    /// end in time (nothing to wait for is true).
    pub fn stop(&self, wait: Duration) -> bool {
        if !self.running.load(Ordering::Acquire) {
            return true;
        }
        *lock(&self.stop) = true;
        self.stop_cv.notify_all();
        let deadline = Instant::now() + wait;
        let mut done = lock(&self.done);
        while !*done {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            done = self
                .done_cv
                .wait_timeout(done, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
        true
    }

    /// On the worker's thread: waits `d` or until asked to stop; true when asked to stop.
    pub fn wait_stop(&self, d: Duration) -> bool {
        let stop = lock(&self.stop);
        let (stop, _) = self
            .stop_cv
            .wait_timeout_while(stop, d, |s| !*s)
            .unwrap_or_else(|e| e.into_inner());
        *stop
    }

    /// In a forked child: the parent's thread does not exist here.
    pub fn forget_after_fork(&self) {
        self.running.store(false, Ordering::Release);
        if let Ok(mut d) = self.done.try_lock() {
            *d = true;
        }
    }
}

impl Default for Worker {
    fn default() -> Worker {
        Worker::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_thread_at_a_time_stopped_within_its_bound() {
        static W: Worker = Worker::new();
        assert!(W.claim());
        assert!(!W.claim(), "a second window while the first thread runs");
        W.spawn("worker-test", "panic in the test worker", || {
            while !W.wait_stop(Duration::from_millis(5)) {}
        });
        assert!(W.stop(Duration::from_secs(30)));
        assert!(W.claim(), "free again once its thread ended");
        // A thread that panics still ends and frees the worker.
        W.spawn("worker-test", "panic in the test worker", || panic!("boom"));
        assert!(W.stop(Duration::from_secs(30)));
        assert!(W.claim());
        // A thread that never looks at the stop flag: the wait is bounded.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        W.spawn("worker-test", "panic in the test worker", move || {
            let _ = rx.recv();
        });
        assert!(!W.stop(Duration::from_millis(20)));
        drop(tx);
        assert!(W.stop(Duration::from_secs(30)));
    }
}
