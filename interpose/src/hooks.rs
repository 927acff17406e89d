//! Every symbol libgputrace.so exports, in one place.
//!
//! * `InitializeInjection`: the CUDA driver's injection entry point, called in cuInit.
//! * CUPTI's own entry points (`cuptiSubscribe`, `cuptiActivityRegisterCallbacks`, ...):
//!   when the program (torch.profiler, say) starts using CUPTI, we flush our records,
//!   switch ours off and let it have CUPTI to itself; the trace records that blind
//!   window. When the program has switched all its activity kinds off again and
//!   flushed, we take CUPTI back. Each hook forwards to the real function and returns
//!   its result untouched.

#![allow(non_snake_case)] // the exported names are the C API's

use crate::collector;
use crate::{guard, lifecycle, log, state};
use cupti_sys as sys;
use gputrace_format::CollectorState;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

/// CUDA driver injection entry point (`CUDA_INJECTION64_PATH`): returns 1 on success.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn InitializeInjection() -> i32 {
    // Runs inside the program's first CUDA call: its errno must come out as it went in.
    let saved = errno();
    let r = match std::panic::catch_unwind(lifecycle::on_cuda_init) {
        Ok(true) => 1,
        _ => 0,
    };
    set_errno(saved);
    r
}

fn errno() -> i32 {
    // SAFETY: __errno_location always returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() }
}

fn set_errno(v: i32) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = v };
}

/// True while the program has CUPTI activity kinds of its own enabled.
pub fn program_holds_cupti() -> bool {
    FOREIGN_KINDS.load(Ordering::Acquire) != 0
}

// ---------------------------------------------------------------------------------
// exec: the new image replaces this one without running atexit handlers, so the trace
// is finished first. glibc's exec* variants reach execve internally, not through the
// PLT, so each is wrapped.

type ExecvFn = unsafe extern "C" fn(*const c_char, *const *const c_char) -> i32;
type ExecveFn =
    unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> i32;

fn before_exec() {
    if guard::is_internal() {
        return;
    }
    let saved = errno();
    let _ = std::panic::catch_unwind(|| {
        // The control socket's file goes with the image (a vfork child, another pid,
        // leaves its parent's alone).
        crate::control::before_exec();
        // A vfork child (Python's subprocess uses vfork) shares our memory and has run
        // no fork handler: finishing "its" trace would switch the parent's tracing off.
        // Only the traced process itself finishes its trace.
        // SAFETY: getpid has no preconditions (glibc does not cache it).
        if unsafe { libc::getpid() } as u32 == lifecycle::traced_pid() {
            lifecycle::finish();
        }
    });
    set_errno(saved);
}

/// The exec returned: it failed, and this image runs on.
fn after_exec_failed() {
    if guard::is_internal() {
        return;
    }
    let saved = errno();
    let _ = std::panic::catch_unwind(crate::control::after_failed_exec);
    set_errno(saved);
}

fn exec_missing() -> i32 {
    set_errno(libc::ENOSYS);
    -1
}

/// # Safety
/// Called by C code with the arguments of execve(2).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> i32 {
    before_exec();
    match real_libc!(c"execve", ExecveFn) {
        Some(f) => {
            // SAFETY: forwarding the caller's arguments unchanged.
            let r = unsafe { f(path, argv, envp) };
            after_exec_failed();
            r
        }
        None => exec_missing(),
    }
}

/// # Safety
/// Called by C code with the arguments of execv(3).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> i32 {
    before_exec();
    match real_libc!(c"execv", ExecvFn) {
        Some(f) => {
            // SAFETY: forwarding the caller's arguments unchanged.
            let r = unsafe { f(path, argv) };
            after_exec_failed();
            r
        }
        None => exec_missing(),
    }
}

/// # Safety
/// Called by C code with the arguments of execvp(3).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> i32 {
    before_exec();
    match real_libc!(c"execvp", ExecvFn) {
        Some(f) => {
            // SAFETY: forwarding the caller's arguments unchanged.
            let r = unsafe { f(file, argv) };
            after_exec_failed();
            r
        }
        None => exec_missing(),
    }
}

/// # Safety
/// Called by C code with the arguments of execvpe(3).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> i32 {
    before_exec();
    match real_libc!(c"execvpe", ExecveFn) {
        Some(f) => {
            // SAFETY: forwarding the caller's arguments unchanged.
            let r = unsafe { f(file, argv, envp) };
            after_exec_failed();
            r
        }
        None => exec_missing(),
    }
}

// ---------------------------------------------------------------------------------
// Finding the real CUPTI functions behind our exported names.

const SONAMES: &[&CStr] = &[c"libcupti.so.13", c"libcupti.so.12", c"libcupti.so"];

/// The real `name` in libcupti: the next definition after ours, else the library the
/// collector loaded, else any libcupti already loaded (extensions load it RTLD_LOCAL).
fn real_symbol(name: &CStr) -> *mut c_void {
    // SAFETY: dlsym with a NUL-terminated name.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if !p.is_null() && !is_ours(p) {
        return p;
    }
    if let Some(c) = collector::active() {
        if let Ok(h) = crate::discover::dlopen(&c.path, libc::RTLD_NOLOAD | libc::RTLD_LAZY) {
            // SAFETY: valid handle and name.
            let p = unsafe { libc::dlsym(h, name.as_ptr()) };
            if !p.is_null() {
                return p;
            }
        }
    }
    for so in SONAMES {
        // SAFETY: RTLD_NOLOAD never loads anything; it only looks up a loaded object.
        let h = unsafe { libc::dlopen(so.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
        if !h.is_null() {
            // SAFETY: valid handle and name.
            let p = unsafe { libc::dlsym(h, name.as_ptr()) };
            if !p.is_null() && !is_ours(p) {
                return p;
            }
        }
    }
    std::ptr::null_mut()
}

fn is_ours(p: *mut c_void) -> bool {
    let mine = crate::discover::object_path_of(InitializeInjection as *const c_void);
    mine.is_some() && crate::discover::object_path_of(p) == mine
}

/// Resolves `$name` once with `$resolve` (a `fn(&CStr) -> *mut c_void`), caches the
/// address, and hands it out as the function type `$ty` (`None` while unresolved).
macro_rules! cached_fn {
    ($resolve:expr, $name:literal, $ty:ty) => {{
        static CACHE: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
        let mut p = CACHE.load(Ordering::Acquire);
        if p.is_null() {
            p = $resolve($name);
            CACHE.store(p, Ordering::Release);
        }
        if p.is_null() {
            None
        } else {
            // SAFETY: `p` is the address of the C function named $name, whose C
            // signature is $ty.
            Some(unsafe { std::mem::transmute::<*mut c_void, $ty>(p) })
        }
    }};
}
// Path-scoped, so the exec hooks above this definition can use it too.
use cached_fn;

/// The real CUPTI function behind one of our hooks.
macro_rules! real {
    ($name:literal, $ty:ty) => {
        cached_fn!(real_symbol, $name, $ty)
    };
}

/// The next definition of a libc function (ours comes first).
fn next_libc(name: &CStr) -> *mut c_void {
    // SAFETY: dlsym with a NUL-terminated name.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) }
}

macro_rules! real_libc {
    ($name:literal, $ty:ty) => {
        cached_fn!(next_libc, $name, $ty)
    };
}
use real_libc;

const NOT_INIT: sys::CUptiResult = sys::CUptiResult_CUPTI_ERROR_NOT_INITIALIZED;

fn missing(name: &str) -> sys::CUptiResult {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        log::warn(&format!("{name}: the real CUPTI function was not found"));
    }
    NOT_INIT
}

// ---------------------------------------------------------------------------------
// Stepping aside for the program's own CUPTI use.

/// Activity kinds the program itself has enabled (bit per kind below 64).
static FOREIGN_KINDS: AtomicU64 = AtomicU64::new(0);
/// The program's own buffer callbacks, so they can be put back if we took them.
static FOREIGN_REQ: AtomicUsize = AtomicUsize::new(0);
static FOREIGN_DONE: AtomicUsize = AtomicUsize::new(0);
/// Times we stepped aside.
pub static BLIND_WINDOWS: AtomicU64 = AtomicU64::new(0);

fn step_aside(reason: &str) {
    if !state::advance(state::TRACING, state::BLIND) {
        return;
    }
    BLIND_WINDOWS.fetch_add(1, Ordering::Relaxed);
    if let Some(c) = collector::active() {
        c.stop();
    }
    collector::note_state(CollectorState::Blind, reason);
    log::warn(&format!(
        "{reason}: gputrace steps aside (its trace records this blind window)"
    ));
}

/// Takes CUPTI back once the program has nothing enabled any more.
fn maybe_resume() {
    if state::get() != state::BLIND || FOREIGN_KINDS.load(Ordering::Acquire) != 0 {
        return;
    }
    let Some(c) = collector::active() else { return };
    if !state::advance(state::BLIND, state::TRACING) {
        return;
    }
    match c.start() {
        Ok(()) => {
            collector::note_state(
                CollectorState::Tracing,
                "resumed after the program's own CUPTI use",
            );
            log::warn("the program's CUPTI session ended: gputrace resumes tracing");
        }
        Err(e) => {
            state::set(state::BLIND);
            log::warn(&format!("cannot resume tracing: {e}"));
        }
    }
}

/// Puts the program's buffer callbacks back (we may have registered ours over them).
fn restore_foreign_callbacks() {
    let (req, done) = (
        FOREIGN_REQ.load(Ordering::Acquire),
        FOREIGN_DONE.load(Ordering::Acquire),
    );
    if req == 0 || done == 0 {
        return;
    }
    type Reg = unsafe extern "C" fn(
        sys::CUpti_BuffersCallbackRequestFunc,
        sys::CUpti_BuffersCallbackCompleteFunc,
    ) -> sys::CUptiResult;
    if let Some(f) = real!(c"cuptiActivityRegisterCallbacks", Reg) {
        // SAFETY: the two addresses were passed to us by the program as these types.
        unsafe {
            f(
                std::mem::transmute::<usize, sys::CUpti_BuffersCallbackRequestFunc>(req),
                std::mem::transmute::<usize, sys::CUpti_BuffersCallbackCompleteFunc>(done),
            )
        };
    }
}

fn foreign() -> bool {
    !guard::is_internal() && state::get() != state::DISABLED
}

/// # Safety
/// Called by C code with the arguments of the CUPTI function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuptiSubscribe(
    subscriber: *mut sys::CUpti_SubscriberHandle,
    callback: sys::CUpti_CallbackFunc,
    userdata: *mut c_void,
) -> sys::CUptiResult {
    type F = unsafe extern "C" fn(
        *mut sys::CUpti_SubscriberHandle,
        sys::CUpti_CallbackFunc,
        *mut c_void,
    ) -> sys::CUptiResult;
    if foreign() {
        let _ = std::panic::catch_unwind(|| {
            step_aside("the program subscribed to CUPTI itself (a profiler?)")
        });
    }
    match real!(c"cuptiSubscribe", F) {
        // SAFETY: forwarding the caller's arguments unchanged.
        Some(f) => unsafe { f(subscriber, callback, userdata) },
        None => missing("cuptiSubscribe"),
    }
}

/// # Safety
/// Called by C code with the arguments of the CUPTI function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuptiActivityRegisterCallbacks(
    req: sys::CUpti_BuffersCallbackRequestFunc,
    done: sys::CUpti_BuffersCallbackCompleteFunc,
) -> sys::CUptiResult {
    type F = unsafe extern "C" fn(
        sys::CUpti_BuffersCallbackRequestFunc,
        sys::CUpti_BuffersCallbackCompleteFunc,
    ) -> sys::CUptiResult;
    if foreign() {
        FOREIGN_REQ.store(req.map_or(0, |f| f as usize), Ordering::Release);
        FOREIGN_DONE.store(done.map_or(0, |f| f as usize), Ordering::Release);
        let _ = std::panic::catch_unwind(|| {
            step_aside("the program registered its own CUPTI activity buffers (a profiler?)")
        });
    }
    match real!(c"cuptiActivityRegisterCallbacks", F) {
        // SAFETY: forwarding the caller's arguments unchanged.
        Some(f) => unsafe { f(req, done) },
        None => missing("cuptiActivityRegisterCallbacks"),
    }
}

/// # Safety
/// Called by C code with the arguments of the CUPTI function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuptiActivityEnable(kind: sys::CUpti_ActivityKind) -> sys::CUptiResult {
    type F = unsafe extern "C" fn(sys::CUpti_ActivityKind) -> sys::CUptiResult;
    if foreign() {
        let _ = std::panic::catch_unwind(|| {
            if state::get() == state::TRACING {
                step_aside("the program enabled CUPTI activity itself (a profiler?)");
                restore_foreign_callbacks();
            }
        });
        if kind < 64 {
            FOREIGN_KINDS.fetch_or(1 << kind, Ordering::AcqRel);
        }
    }
    match real!(c"cuptiActivityEnable", F) {
        // SAFETY: forwarding the caller's argument unchanged.
        Some(f) => unsafe { f(kind) },
        None => missing("cuptiActivityEnable"),
    }
}

/// # Safety
/// Called by C code with the arguments of the CUPTI function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuptiActivityDisable(kind: sys::CUpti_ActivityKind) -> sys::CUptiResult {
    type F = unsafe extern "C" fn(sys::CUpti_ActivityKind) -> sys::CUptiResult;
    let r = match real!(c"cuptiActivityDisable", F) {
        // SAFETY: forwarding the caller's argument unchanged.
        Some(f) => unsafe { f(kind) },
        None => missing("cuptiActivityDisable"),
    };
    if foreign() && kind < 64 {
        FOREIGN_KINDS.fetch_and(!(1 << kind), Ordering::AcqRel);
    }
    r
}

/// # Safety
/// Called by C code with the arguments of the CUPTI function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuptiActivityFlushAll(flag: u32) -> sys::CUptiResult {
    type F = unsafe extern "C" fn(u32) -> sys::CUptiResult;
    let r = match real!(c"cuptiActivityFlushAll", F) {
        // SAFETY: forwarding the caller's argument unchanged.
        Some(f) => unsafe { f(flag) },
        None => missing("cuptiActivityFlushAll"),
    };
    if foreign() {
        // The program's records are in its hands now; if it has nothing enabled any
        // more, its session is over.
        let _ = std::panic::catch_unwind(maybe_resume);
    }
    r
}

/// # Safety
/// Called by C code with the arguments of the CUPTI function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuptiUnsubscribe(sub: sys::CUpti_SubscriberHandle) -> sys::CUptiResult {
    type F = unsafe extern "C" fn(sys::CUpti_SubscriberHandle) -> sys::CUptiResult;
    let r = match real!(c"cuptiUnsubscribe", F) {
        // SAFETY: forwarding the caller's argument unchanged.
        Some(f) => unsafe { f(sub) },
        None => missing("cuptiUnsubscribe"),
    };
    if foreign() {
        let _ = std::panic::catch_unwind(|| {
            maybe_resume();
            // Resumed earlier while the program still held the only subscriber slot?
            if state::is_tracing() {
                if let Some(c) = collector::active() {
                    c.ensure_subscribed();
                }
            }
        });
    }
    r
}

/// # Safety
/// Called by C code with the arguments of the CUPTI function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuptiFinalize() -> sys::CUptiResult {
    type F = unsafe extern "C" fn() -> sys::CUptiResult;
    let r = match real!(c"cuptiFinalize", F) {
        // SAFETY: no arguments.
        Some(f) => unsafe { f() },
        None => missing("cuptiFinalize"),
    };
    if foreign() {
        FOREIGN_KINDS.store(0, Ordering::Release);
        let _ = std::panic::catch_unwind(maybe_resume);
    }
    r
}
