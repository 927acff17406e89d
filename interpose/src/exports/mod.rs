//! The entry points layer: every symbol libgputrace.so exports, and the process's own
//! entry points (the one library constructor, the one fork handler).
//!
//! * the library constructor (`.init_array`): reads the settings, arranges to be called
//!   at cuInit (`runtime::on_load`), registers the fork handler;
//! * `InitializeInjection`: the CUDA driver's injection entry point, called in cuInit;
//! * `execve`, `execv`, `execvp`, `execvpe`: the trace is finished before the image goes;
//! * `cupti.rs`: CUPTI's own entry points, to step aside for the program's CUPTI use;
//! * `hooks/`: the CUDA runtime, NCCL and NVTX entry points (symbol hooks).
//!
//! Every exported function and every callback handed to C runs through
//! `base::ffi::entry!` (checked by interpose/tests/layers.rs).

#![allow(non_snake_case)] // the exported names are the C API's

pub mod cupti;
pub mod hooks;

use crate::base::ffi::{entry, errno, guarded, set_errno};
use crate::base::internal;
use crate::runtime;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};

/// The library constructor, the only one: settings, the CUDA and NVTX injection paths,
/// the fork handler. Runs before main, while the process has one thread.
#[cfg_attr(test, allow(dead_code))]
extern "C" fn gputrace_init() {
    entry!({
        // errno is the program's: keep it as we found it.
        let saved = errno();
        if runtime::on_load() {
            // SAFETY: registering a handler with a plain function pointer.
            unsafe { libc::pthread_atfork(None, None, Some(after_fork_child)) };
        }
        set_errno(saved);
    })
}

#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = gputrace_init;

/// The fork handler, the only one (in the child): locks another parent thread may have
/// held are free again, and the state a child must not trust is dropped.
extern "C" fn after_fork_child() {
    entry!({
        hooks::after_fork();
        runtime::after_fork();
    })
}

/// CUDA driver injection entry point (`CUDA_INJECTION64_PATH`): returns 1 on success.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn InitializeInjection() -> i32 {
    entry!(0, {
        // Runs inside the program's first CUDA call: its errno must come out as it went in.
        let saved = errno();
        let r = runtime::on_cuda_init() as i32;
        set_errno(saved);
        r
    })
}

// ---------------------------------------------------------------------------------
// exec: the new image replaces this one without running atexit handlers, so the trace
// is finished first. glibc's exec* variants reach execve internally, not through the
// PLT, so each is wrapped.

type ExecvFn = unsafe extern "C" fn(*const c_char, *const *const c_char) -> i32;
type ExecveFn =
    unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> i32;

fn before_exec() {
    if internal::is_internal() {
        return;
    }
    let saved = errno();
    guarded(runtime::before_exec);
    set_errno(saved);
}

/// The exec returned: it failed, and this image runs on.
fn after_failed_exec() {
    if internal::is_internal() {
        return;
    }
    let saved = errno();
    guarded(runtime::after_failed_exec);
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
    entry!(exec_missing(), {
        before_exec();
        match real_libc!(c"execve", ExecveFn) {
            Some(f) => {
                // SAFETY: forwarding the caller's arguments unchanged.
                let r = unsafe { f(path, argv, envp) };
                after_failed_exec();
                r
            }
            None => exec_missing(),
        }
    })
}

/// # Safety
/// Called by C code with the arguments of execv(3).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> i32 {
    entry!(exec_missing(), {
        before_exec();
        match real_libc!(c"execv", ExecvFn) {
            Some(f) => {
                // SAFETY: forwarding the caller's arguments unchanged.
                let r = unsafe { f(path, argv) };
                after_failed_exec();
                r
            }
            None => exec_missing(),
        }
    })
}

/// # Safety
/// Called by C code with the arguments of execvp(3).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> i32 {
    entry!(exec_missing(), {
        before_exec();
        match real_libc!(c"execvp", ExecvFn) {
            Some(f) => {
                // SAFETY: forwarding the caller's arguments unchanged.
                let r = unsafe { f(file, argv) };
                after_failed_exec();
                r
            }
            None => exec_missing(),
        }
    })
}

/// # Safety
/// Called by C code with the arguments of execvpe(3).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> i32 {
    entry!(exec_missing(), {
        before_exec();
        match real_libc!(c"execvpe", ExecveFn) {
            Some(f) => {
                // SAFETY: forwarding the caller's arguments unchanged.
                let r = unsafe { f(file, argv, envp) };
                after_failed_exec();
                r
            }
            None => exec_missing(),
        }
    })
}

// ---------------------------------------------------------------------------------
// Exits that run no exit handler (`_exit`, `_Exit`, `quick_exit`; Python's `os._exit`,
// multiprocessing's children): the trace is finished in the call, as `exit` finishes
// it through the handler registered at CUDA initialisation. glibc's own `exit` reaches
// `_exit` internally, not through these. `exit` itself is hooked only to note a status
// other than 0 for the end record.

type ExitFn = unsafe extern "C" fn(c_int) -> !;

fn before_exit_now(call: &str, status: c_int) {
    if internal::is_internal() {
        return;
    }
    let saved = errno();
    guarded(|| runtime::before_exit_now(call, status));
    set_errno(saved);
}

/// The process goes now, with `status`, if the real function could not be found.
fn exit_group(status: c_int) {
    // SAFETY: exit_group ends the process; it takes the status and nothing else.
    unsafe { libc::syscall(libc::SYS_exit_group, status) };
}

/// Finishes the trace, then ends the process through `real` (or exit_group).
fn exit_through(call: &str, status: c_int, real: Option<ExitFn>) {
    before_exit_now(call, status);
    match real {
        // SAFETY: the real function of that name with the caller's status.
        Some(f) => unsafe { f(status) },
        None => exit_group(status),
    }
}

/// # Safety
/// Called by C code with the argument of exit(3). The exit handlers (ours among them)
/// run in the real one; a status other than 0 is noted first, so the end record says
/// `exit 1` where it would say `exit`. (A `main` that returns reaches glibc's exit
/// inside glibc, not through this: its status is not seen.)
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn exit(status: c_int) {
    entry!(exit_group(status), {
        if status != 0 && !internal::is_internal() {
            let saved = errno();
            guarded(|| runtime::note_exit_status(status));
            set_errno(saved);
        }
        match real_libc!(c"exit", ExitFn) {
            // SAFETY: the real exit with the caller's status.
            Some(f) => unsafe { f(status) },
            None => exit_group(status),
        }
    })
}

/// # Safety
/// Called by C code with the argument of _exit(2).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn _exit(status: c_int) {
    entry!(exit_group(status), {
        exit_through("_exit", status, real_libc!(c"_exit", ExitFn))
    })
}

/// # Safety
/// Called by C code with the argument of _Exit(3).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn _Exit(status: c_int) {
    entry!(exit_group(status), {
        exit_through("_Exit", status, real_libc!(c"_Exit", ExitFn))
    })
}

/// # Safety
/// Called by C code with the argument of quick_exit(3) (its at_quick_exit handlers
/// run in the real one).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn quick_exit(status: c_int) {
    entry!(exit_group(status), {
        exit_through("quick_exit", status, real_libc!(c"quick_exit", ExitFn))
    })
}

// ---------------------------------------------------------------------------------
// Finding the real functions behind our exported names (libc's here, CUPTI's in
// cupti.rs; the CUDA runtime's and NCCL's in hooks/resolve.rs).

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
pub(crate) use cached_fn;

/// The next definition of a libc function (ours comes first).
fn next_libc(name: &CStr) -> *mut c_void {
    cupti_sys::loader::next(name).map_or(std::ptr::null_mut(), |p| p.as_ptr())
}

macro_rules! real_libc {
    ($name:literal, $ty:ty) => {
        cached_fn!(next_libc, $name, $ty)
    };
}
use real_libc;
