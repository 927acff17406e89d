//! A thread of our own, the one way the library's samplers, its writer, watchdog and
//! control thread, and the `gputrace` command's NVML and GPM recorders run: started by
//! name, at most one at a time per [`Worker`], its panics caught and said once as its
//! [`Spec`] says, asked to stop and waited for with a bound, paced by a period that a
//! stop request cuts short, and forgotten in a forked child (the thread is the
//! parent's). Also the lock every layer takes: a poisoned mutex is still used (a panic
//! elsewhere must not stop the tracer).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Locks `m`, poisoned or not.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How a process runs its workers: what every one of its threads does first, and where
/// a panic is said. The library marks its threads internal (its hooks ignore them) and
/// writes `gputrace:` lines with one write; the command prints to its stderr.
pub struct Policy {
    pub on_start: fn(),
    pub warn: fn(&str),
}

/// One thread: its name, stack size (0: the default), what it does first on its own
/// thread (block signals, say), and what a panic in it does beyond being said
/// (`on_panic_also`, e.g. switch tracing off).
pub struct Spec {
    pub name: &'static str,
    pub stack: usize,
    pub first: fn(),
    /// Said (through the policy) when the body panics.
    pub on_panic: &'static str,
    pub on_panic_also: fn(),
}

impl Spec {
    pub const fn new(name: &'static str, on_panic: &'static str) -> Spec {
        fn nothing() {}
        Spec {
            name,
            stack: 0,
            first: nothing,
            on_panic,
            on_panic_also: nothing,
        }
    }
}

/// The state of one thread of ours; usually a `static`.
pub struct Worker {
    running: AtomicBool,
    /// Asked to end: read without the lock by [`Worker::stop_requested`] (a sampler's
    /// loop asks every few milliseconds); `stop` is its copy the waits sleep on.
    stopping: AtomicBool,
    stop: Mutex<bool>,
    stop_cv: Condvar,
    done: Mutex<bool>,
    done_cv: Condvar,
}

impl Worker {
    pub const fn new() -> Worker {
        Worker {
            running: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            stop: Mutex::new(false),
            stop_cv: Condvar::new(),
            done: Mutex::new(true),
            done_cv: Condvar::new(),
        }
    }

    /// Claims the worker: false while its last thread still runs.
    pub fn claim(&self) -> bool {
        if self.running.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.stopping.store(false, Ordering::Release);
        *lock(&self.stop) = false;
        *lock(&self.done) = false;
        true
    }

    /// Claims the worker and runs `body` on a thread of its own; `Ok(false)` when its
    /// last thread still runs (nothing started), `Err` when no thread could be made.
    pub fn start(
        &'static self,
        policy: &'static Policy,
        spec: Spec,
        body: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<bool> {
        if !self.claim() {
            return Ok(false);
        }
        self.spawn_claimed(policy, spec, body).map(|_| true)
    }

    /// Runs `body` on a thread of its own, after [`Worker::claim`].
    pub fn spawn_claimed(
        &'static self,
        policy: &'static Policy,
        spec: Spec,
        body: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<()> {
        let mut b = std::thread::Builder::new().name(spec.name.into());
        if spec.stack > 0 {
            b = b.stack_size(spec.stack);
        }
        let spawned = b.spawn(move || {
            (policy.on_start)();
            (spec.first)();
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).is_err() {
                (spec.on_panic_also)();
                (policy.warn)(spec.on_panic);
            }
            self.finish();
        });
        spawned.map(|_| ()).inspect_err(|_| self.finish())
    }

    fn finish(&self) {
        self.running.store(false, Ordering::Release);
        *lock(&self.done) = true;
        self.done_cv.notify_all();
    }

    /// Whether its thread runs.
    pub fn is_running(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }

    /// Asks the thread to end (it sees it in [`Worker::stop_requested`] and
    /// [`Worker::wait_stop`]); does not wait.
    pub fn request_stop(&self) {
        self.stopping.store(true, Ordering::Release);
        *lock(&self.stop) = true;
        self.stop_cv.notify_all();
    }

    /// On the worker's thread: whether it was asked to end.
    pub fn stop_requested(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Waits at most `wait` for the thread to end; true when it did (or none runs).
    pub fn wait_done(&self, wait: Duration) -> bool {
        if !self.is_running() {
            return true;
        }
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

    /// Asks the thread to end and waits at most `wait`; false when it did not end in
    /// time (nothing to wait for is true).
    pub fn stop(&self, wait: Duration) -> bool {
        if !self.is_running() {
            return true;
        }
        self.request_stop();
        self.wait_done(wait)
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

    /// On the worker's thread: runs `tick` every `period` (the first at once) until
    /// asked to stop or `tick` returns false.
    pub fn every(&self, period: Duration, mut tick: impl FnMut() -> bool) {
        let mut next = Instant::now();
        loop {
            if !tick() {
                return;
            }
            next += period;
            let now = Instant::now();
            if next < now {
                // Behind by more than a period: skip, do not catch up.
                next = now + period;
            }
            if self.wait_stop(next - now) {
                return;
            }
        }
    }

    /// In a forked child: the parent's thread does not exist here.
    pub fn forget_after_fork(&self) {
        self.running.store(false, Ordering::Release);
        self.stopping.store(false, Ordering::Release);
        if let Ok(mut s) = self.stop.try_lock() {
            *s = false;
        }
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
    use std::sync::atomic::AtomicU32;

    static SAID: AtomicU32 = AtomicU32::new(0);
    static POLICY: Policy = Policy {
        on_start: || {},
        warn: |_| {
            SAID.fetch_add(1, Ordering::Relaxed);
        },
    };

    #[test]
    fn one_thread_at_a_time_stopped_within_its_bound() {
        static W: Worker = Worker::new();
        let spec = || Spec::new("worker-test", "panic in the test worker");
        assert!(W
            .start(&POLICY, spec(), || {
                while !W.wait_stop(Duration::from_millis(5)) {}
            })
            .unwrap());
        assert!(
            !W.start(&POLICY, spec(), || {}).unwrap(),
            "a second thread while the first runs"
        );
        assert!(W.stop(Duration::from_secs(30)));
        // A thread that panics still ends, frees the worker and is said once.
        let before = SAID.load(Ordering::Relaxed);
        assert!(W.start(&POLICY, spec(), || panic!("boom")).unwrap());
        assert!(W.wait_done(Duration::from_secs(30)));
        assert_eq!(SAID.load(Ordering::Relaxed), before + 1);
        // A thread that never looks at the stop flag: the wait is bounded.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        assert!(W
            .start(&POLICY, spec(), move || {
                let _ = rx.recv();
            })
            .unwrap());
        assert!(!W.stop(Duration::from_millis(20)));
        drop(tx);
        assert!(W.wait_done(Duration::from_secs(30)));
        assert!(!W.is_running());
    }

    #[test]
    fn a_period_ends_at_a_stop_request() {
        static W: Worker = Worker::new();
        static TICKS: AtomicU32 = AtomicU32::new(0);
        assert!(W
            .start(&POLICY, Spec::new("worker-every", "panic"), || {
                W.every(Duration::from_secs(3600), || {
                    TICKS.fetch_add(1, Ordering::Relaxed);
                    true
                })
            })
            .unwrap());
        // The first tick comes at once; the hour-long wait ends at the request.
        while TICKS.load(Ordering::Relaxed) == 0 {
            std::thread::yield_now();
        }
        assert!(W.stop(Duration::from_secs(30)));
        assert_eq!(TICKS.load(Ordering::Relaxed), 1);
    }
}
