//! A job that hangs or dies still leaves its trace: the progress watchdog, and the
//! flush at an abnormal end.
//!
//! * **The watchdog** (thread `gputrace-watchdog`, while a trace is open): when launched
//!   GPU work is outstanding, no GPU record has completed for `GPUTRACE_STALL_MS`, and
//!   the host is waiting (no launch for that long, or a thread inside a CUDA call for
//!   that long), it forces a CUPTI flush (`CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`: CUPTI
//!   otherwise holds back a buffer while one record in it is incomplete, with every
//!   completed record before it) and asks the writer for a stall report, written at
//!   once. While the stall lasts, it does so again every period, so a SIGKILL later
//!   still leaves the evidence. A GPU record that ended after the stall was found ends
//!   it (a `STALL_RESOLVED` report).
//! * **An abnormal end**: for SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGABRT, SIGSEGV and
//!   SIGBUS whose disposition is the default when the trace starts, a handler of ours.
//!   It does only async-signal-safe things: it writes to an eventfd the watchdog thread
//!   waits on, and waits (poll) at most [`END_WAIT_MS`] for it to say it is done. The
//!   watchdog thread forces a CUPTI flush, asks for a last stall report of what is
//!   still outstanding, and finishes the trace with the signal as its end reason. Then
//!   the handler restores the default disposition and raises the signal again, so the
//!   process ends as it would have, with the same status. A signal whose handler the
//!   program installed (before or after us) is the program's: it runs unchanged, and
//!   the trace is finished at exit as usual.

use super::settings::opts;
use crate::base::ffi::{self, entry, END_SIGNALS};
use crate::base::worker::{Spec, Worker, POLICY};
use crate::base::{clock, internal, log, state, tsc};
use crate::session::stall::{self, Request};
use crate::session::{cupti, lifecycle};
use crate::writer;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::time::Duration;

/// The longest a signal handler waits for the trace to be finished (ms), before it lets
/// the signal take its default action anyway.
pub const END_WAIT_MS: i32 = 2000;

/// The eventfd the handler wakes the watchdog thread with, and the one the watchdog
/// thread says it is done on (-1: none).
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);
static DONE_FD: AtomicI32 = AtomicI32::new(-1);
/// The signal being handled (0: none).
static ENDING: AtomicI32 = AtomicI32::new(0);
/// The pid that installed the handlers (a forked child's handlers only re-raise).
static OWNER: AtomicU32 = AtomicU32::new(0);
static STARTED: AtomicBool = AtomicBool::new(false);
/// The watchdog's thread (one per process, for its life).
static WATCHDOG: Worker = Worker::new();

/// Held by the watchdog thread while it uses CUPTI; taken by the end of a window before
/// CUPTI is finalized ([`wait_idle`]).
static CUPTI_USE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Waits until the watchdog thread is not using CUPTI; once the state is no longer
/// tracing, it will not start again.
pub fn wait_idle() {
    drop(crate::base::worker::lock(&CUPTI_USE));
}

/// The stall being reported (0: none), its last report, and the next stall's id.
static CUR_ID: AtomicU32 = AtomicU32::new(0);
static CUR_SEQ: AtomicU32 = AtomicU32::new(0);
static NEXT_ID: AtomicU32 = AtomicU32::new(1);

/// Starts the watchdog thread and installs the end handlers, once per process; stall
/// ids start again from 1 in each trace file.
pub fn start() {
    CUR_ID.store(0, Ordering::Release);
    CUR_SEQ.store(0, Ordering::Release);
    NEXT_ID.store(1, Ordering::Release);
    if STARTED.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: eventfd has no memory preconditions.
    let (wake, done) = unsafe {
        (
            libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK),
            libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK),
        )
    };
    if wake < 0 || done < 0 {
        log::warn("cannot make the watchdog's eventfds; no stall reports or flush on signals");
        return;
    }
    WAKE_FD.store(wake, Ordering::Release);
    DONE_FD.store(done, Ordering::Release);
    let o = opts();
    let dog = Dog::new(o.stall_ms, o.handover_ms, o.handover_forced);
    let spec = Spec {
        first: ffi::block_end_signals,
        ..Spec::new(
            "gputrace-watchdog",
            "internal error in the stall watchdog; it stops here (the program runs on)",
        )
    };
    if let Err(e) = WATCHDOG.start(&POLICY, spec, move || dog.run(wake, done)) {
        log::warn(&format!("cannot start the watchdog thread: {e}"));
        return;
    }
    install_handlers();
}

/// Our handler for every end signal whose disposition is the default now.
fn install_handlers() {
    OWNER.store(std::process::id(), Ordering::Release);
    for sig in END_SIGNALS {
        // SAFETY: sigaction with a NULL new action only reads the current one into a
        // zeroed struct we own.
        let default = unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                && ((old.sa_flags & libc::SA_SIGINFO == 0 && old.sa_sigaction == libc::SIG_DFL)
                    // Ours already (a forked child tracing on its own): kept, now its own.
                    || old.sa_sigaction == on_end_signal as *const () as usize)
        };
        if !default {
            log::debug(&format!(
                "{}: the program's own disposition; left alone",
                gputrace_format::signal_name(sig)
            ));
            continue;
        }
        // SAFETY: installs a handler that only makes async-signal-safe calls (see
        // `on_end_signal`); the mask blocks the other end signals while it runs.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_end_signal as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut sa.sa_mask);
            for s in END_SIGNALS {
                libc::sigaddset(&mut sa.sa_mask, s);
            }
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Monotonic ms, from `clock_gettime` (async-signal-safe).
fn mono_ms() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we own; it is async-signal-safe.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000
}

/// The end handler: wake the watchdog thread, wait for it (bounded), then the signal's
/// default action. Only async-signal-safe calls: atomics, write, poll, clock_gettime,
/// getpid, sigaction, sigprocmask, raise.
extern "C" fn on_end_signal(
    sig: libc::c_int,
    _info: *mut libc::siginfo_t,
    _ctx: *mut libc::c_void,
) {
    entry!({
        let saved = ffi::errno();
        // SAFETY: getpid is async-signal-safe.
        let mine = unsafe { libc::getpid() } as u32 == OWNER.load(Ordering::Acquire);
        let wake = WAKE_FD.load(Ordering::Acquire);
        let done = DONE_FD.load(Ordering::Acquire);
        if mine && wake >= 0 && done >= 0 && writer::is_running() {
            if ENDING
                .compare_exchange(0, sig, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                let one: u64 = 1;
                // SAFETY: writes 8 bytes we own to our eventfd; async-signal-safe.
                unsafe { libc::write(wake, &one as *const u64 as *const libc::c_void, 8) };
            }
            let deadline = mono_ms() + END_WAIT_MS as i64;
            loop {
                let left = deadline - mono_ms();
                if left <= 0 {
                    break;
                }
                let mut p = libc::pollfd {
                    fd: done,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: poll on one pollfd we own; async-signal-safe.
                let r = unsafe { libc::poll(&mut p, 1, left as i32) };
                if r > 0 || (r < 0 && ffi::errno() != libc::EINTR) {
                    break;
                }
            }
        }
        // The default action, as if we had never been there.
        // SAFETY: sigaction, sigprocmask and raise are async-signal-safe; the structs
        // are ours.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = libc::SIG_DFL;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::raise(sig);
        }
        // Still here (the signal was blocked, or its default is to continue): the
        // program goes on.
        ffi::set_errno(saved);
    })
}

/// In a forked child: no watchdog thread there; the handlers only re-raise.
pub fn forget_after_fork() {
    STARTED.store(false, Ordering::Release);
    WATCHDOG.forget_after_fork();
    ENDING.store(0, Ordering::Release);
    CUR_ID.store(0, Ordering::Release);
    CUR_SEQ.store(0, Ordering::Release);
    NEXT_ID.store(1, Ordering::Release);
    let w = WAKE_FD.swap(-1, Ordering::AcqRel);
    let d = DONE_FD.swap(-1, Ordering::AcqRel);
    for fd in [w, d] {
        if fd >= 0 {
            // SAFETY: our own eventfds, used by no thread of the child.
            unsafe { libc::close(fd) };
        }
    }
}

/// Queues the last stall report of the trace (what is still outstanding, if anything),
/// before the writer's last pass. Called as the trace finishes.
pub fn end_report() {
    let cur = CUR_ID.load(Ordering::Acquire);
    let (id, seq) = if cur != 0 {
        (cur, CUR_SEQ.load(Ordering::Acquire) + 1)
    } else {
        (NEXT_ID.load(Ordering::Acquire), 0)
    };
    stall::request(clock::now_ns(), Request::End { id, seq });
}

/// Finishes the trace for signal `sig`, on the watchdog thread: a forced flush, the
/// last report, the writer's last chunk with the signal as the end reason.
fn finish_for_signal(sig: i32) {
    let _g = internal::Internal::enter();
    writer::note_end_signal(sig);
    let s = state::get();
    if s == state::TRACING || s == state::BLIND {
        // A forced CUPTI flush (while tracing) and the Python stacks. Not waiting for
        // the lock: a stall report's flush may be what hangs.
        lifecycle::flush_all();
        end_report();
        state::set(state::STOPPED);
    }
    // Also when the exit handler was already finishing the trace: its writer's last
    // chunk is waited for before the signal ends the process.
    let wait = Duration::from_millis((END_WAIT_MS as u64).min(opts().exit_wait_ms.max(100)));
    if writer::is_running() && !writer::finish(wait) {
        log::warn("the trace writer did not finish in time after a signal");
    }
}

struct Dog {
    stall_ns: u64,
    /// The handover period (0: none), whether it forces the flush, and when it last
    /// flushed (trace clock).
    handover_ns: u64,
    handover_forced: bool,
    last_handover: u64,
    conv: tsc::Converter,
    /// The stall being reported: (id, seq, found at, next report at), trace clock.
    active: Option<(u32, u32, u64, u64)>,
}

impl Dog {
    fn new(stall_ms: u64, handover_ms: u64, handover_forced: bool) -> Dog {
        Dog {
            stall_ns: stall_ms * 1_000_000,
            handover_ns: handover_ms * 1_000_000,
            handover_forced,
            last_handover: 0,
            conv: tsc::Converter::new(),
            active: None,
        }
    }

    /// How long the thread sleeps between two looks (ms): a fifth of the stall
    /// threshold and half the handover period, 50 ms to 1 s.
    fn period(&self) -> i32 {
        let mut ms = 1000;
        if self.stall_ns > 0 {
            ms = ms.min(self.stall_ns / 5_000_000);
        }
        if self.handover_ns > 0 {
            ms = ms.min(self.handover_ns / 2_000_000);
        }
        ms.clamp(50, 1000) as i32
    }

    fn run(mut self, wake: i32, done: i32) {
        loop {
            let mut p = libc::pollfd {
                fd: wake,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: poll on one pollfd we own.
            let r = unsafe { libc::poll(&mut p, 1, self.period()) };
            if r > 0 {
                let mut v: u64 = 0;
                // SAFETY: reads 8 bytes into a u64 we own from our eventfd.
                unsafe { libc::read(wake, &mut v as *mut u64 as *mut libc::c_void, 8) };
                let sig = ENDING.load(Ordering::Acquire);
                if sig != 0 {
                    finish_for_signal(sig);
                    let one: u64 = 1;
                    // SAFETY: writes 8 bytes we own to our eventfd.
                    unsafe { libc::write(done, &one as *const u64 as *const libc::c_void, 8) };
                    return;
                }
            }
            if self.stall_ns > 0 {
                self.tick();
            }
            if self.handover_ns > 0 {
                self.hand_over();
            }
        }
    }

    /// The periodic handover: CUPTI hands a buffer to us when it is full, or at a flush.
    /// A busy GPU running few, long kernels fills none for minutes, and a SIGKILL then
    /// loses every record it held (3000 matmuls in 5 s left 0 kernels). So when launched
    /// work is outstanding, or something was launched since the last handover, and no
    /// record has reached us for the period, CUPTI is flushed (its default flush: every
    /// buffer whose records are all complete, full or not) and the writer writes at once.
    /// A job whose records arrive by themselves never pays for it.
    fn hand_over(&mut self) {
        if !state::is_tracing() {
            self.last_handover = 0;
            return;
        }
        let now = clock::now_ns();
        let due = |since: u64| now.saturating_sub(since) >= self.handover_ns;
        if !due(self.last_handover) || !due(stall::last_completion()) {
            return;
        }
        self.conv.tick();
        let (n, _, newest) = stall::outstanding_launches();
        if n == 0 && (newest == 0 || self.conv.to_real(newest) <= self.last_handover) {
            return;
        }
        self.last_handover = now;
        {
            let _g = internal::Internal::enter();
            let _u = crate::base::worker::lock(&CUPTI_USE);
            if let Some(c) = cupti::active().filter(|_| state::is_tracing()) {
                c.flush(self.handover_forced);
            }
        }
        writer::write_soon();
    }

    fn tick(&mut self) {
        if !state::is_tracing() {
            self.active = None;
            return;
        }
        let now = clock::now_ns();
        self.conv.tick();
        let (n, oldest, newest) = stall::outstanding_launches();
        // A thread inside a CUDA call (a synchronize, a blocking copy) for a whole period.
        let blocked = stall::calls_in_flight()
            .iter()
            .any(|c| now.saturating_sub(self.conv.to_real(c.3)) >= self.stall_ns);
        if let Some((id, seq, found, next)) = self.active {
            // A GPU record that ended after the stall was found: the GPU moves again.
            // Or nothing is outstanding and nobody waits any more.
            if stall::last_end() > found || (n == 0 && !blocked) {
                stall::request(now, Request::Resolved { id });
                stall::forget_outstanding();
                CUR_ID.store(0, Ordering::Release);
                self.active = None;
                return;
            }
            if now >= next {
                self.report(id, seq + 1, now);
                self.active = Some((id, seq + 1, found, now + self.stall_ns));
            }
            return;
        }
        let quiet = |since: u64| now.saturating_sub(since) >= self.stall_ns;
        let stalled = if n > 0 {
            // Launches outstanding and nothing completed since the oldest of them, while
            // the host waits too: it launched nothing lately, or a thread is blocked in a
            // call. A host that keeps launching is feeding a busy GPU whose records CUPTI
            // has not handed over yet.
            quiet(stall::last_completion().max(self.conv.to_real(oldest)))
                && (quiet(self.conv.to_real(newest)) || blocked)
        } else {
            // Launches the callbacks do not see (driver-API launches: CuPy, Triton):
            // a thread blocked in a call with nothing completing is a stall too; the
            // forced flush hands over the incomplete record of what runs.
            blocked && quiet(stall::last_completion())
        };
        if !stalled {
            return;
        }
        let id = NEXT_ID.fetch_add(1, Ordering::AcqRel);
        self.report(id, 0, now);
        self.active = Some((id, 0, now, now + self.stall_ns));
    }

    /// A forced flush, the Python stacks, then the report request.
    fn report(&mut self, id: u32, seq: u32, now: u64) {
        {
            // A forced CUPTI flush (while tracing), then the Python stacks.
            let _g = internal::Internal::enter();
            let _u = crate::base::worker::lock(&CUPTI_USE);
            lifecycle::flush_all();
        }
        CUR_ID.store(id, Ordering::Release);
        CUR_SEQ.store(seq, Ordering::Release);
        if seq == 0 {
            log::debug(&format!(
                "stall {id}: GPU work outstanding with no progress for {} ms",
                self.stall_ns / 1_000_000
            ));
        }
        stall::request(
            now,
            Request::Report {
                id,
                seq,
                forced: cupti::active().is_some(),
            },
        );
    }
}
