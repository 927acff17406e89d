//! CUPTI's own entry points (`cuptiSubscribe`, `cuptiActivityRegisterCallbacks`, ...),
//! exported so we see the program's CUPTI use: when the program (torch.profiler, say)
//! starts using CUPTI, the runtime steps aside (`runtime::blind`); when it has switched
//! all its activity kinds off again and flushed, it takes CUPTI back. Each hook forwards
//! to the real function and returns its result untouched.

#![allow(non_snake_case)] // the exported names are the C API's

use super::cached_fn;
use crate::base::ffi::{entry, guarded};
use crate::base::{internal, log, state};
use crate::runtime::blind;
use crate::session::cupti::{self, foreign};
use cupti_sys as sys;
use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

// ---------------------------------------------------------------------------------
// Finding the real CUPTI functions behind our exported names.

const SONAMES: &[&CStr] = &[c"libcupti.so.13", c"libcupti.so.12", c"libcupti.so"];

/// The real `name` in libcupti: the next definition after ours, else the library the
/// collector loaded, else any libcupti already loaded (extensions load it RTLD_LOCAL).
fn real_symbol(name: &CStr) -> *mut c_void {
    use cupti_sys::loader::{self, Library, Open};
    let found = loader::next(name)
        .or_else(|| {
            let c = cupti::active()?;
            Library::open(&c.path, Open::IfLoaded).ok()?.sym(name)
        })
        .or_else(|| {
            SONAMES
                .iter()
                .find_map(|so| Library::first_loaded(&[so])?.sym(name))
        });
    found.map_or(std::ptr::null_mut(), |p| p.as_ptr())
}

/// The real CUPTI function behind one of our hooks.
macro_rules! real {
    ($name:literal, $ty:ty) => {
        cached_fn!(real_symbol, $name, $ty)
    };
}

const NOT_INIT: sys::CUptiResult = sys::CUptiResult_CUPTI_ERROR_NOT_INITIALIZED;

fn missing(name: &str) -> sys::CUptiResult {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        log::warn(&format!("{name}: the real CUPTI function was not found"));
    }
    NOT_INIT
}

// ---------------------------------------------------------------------------------
// Stepping aside for the program's own CUPTI use (runtime/blind.rs).

/// Puts the program's buffer callbacks back (we may have registered ours over them).
fn restore_foreign_callbacks() {
    let Some((req, done)) = foreign::callbacks() else {
        return;
    };
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

/// Is this call the program's own (not ours, and tracing not off for good)?
fn programs() -> bool {
    !internal::is_internal() && state::get() != state::DISABLED
}

/// # Safety
/// Called by C code with the arguments of the CUPTI function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuptiSubscribe(
    subscriber: *mut sys::CUpti_SubscriberHandle,
    callback: sys::CUpti_CallbackFunc,
    userdata: *mut c_void,
) -> sys::CUptiResult {
    entry!(NOT_INIT, {
        type F = unsafe extern "C" fn(
            *mut sys::CUpti_SubscriberHandle,
            sys::CUpti_CallbackFunc,
            *mut c_void,
        ) -> sys::CUptiResult;
        if programs() {
            guarded(|| blind::step_aside("the program subscribed to CUPTI itself (a profiler?)"));
        }
        match real!(c"cuptiSubscribe", F) {
            // SAFETY: forwarding the caller's arguments unchanged.
            Some(f) => unsafe { f(subscriber, callback, userdata) },
            None => missing("cuptiSubscribe"),
        }
    })
}

/// # Safety
/// Called by C code with the arguments of the CUPTI function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuptiActivityRegisterCallbacks(
    req: sys::CUpti_BuffersCallbackRequestFunc,
    done: sys::CUpti_BuffersCallbackCompleteFunc,
) -> sys::CUptiResult {
    entry!(NOT_INIT, {
        type F = unsafe extern "C" fn(
            sys::CUpti_BuffersCallbackRequestFunc,
            sys::CUpti_BuffersCallbackCompleteFunc,
        ) -> sys::CUptiResult;
        if programs() {
            foreign::registered_callbacks(
                req.map_or(0, |f| f as usize),
                done.map_or(0, |f| f as usize),
            );
            guarded(|| {
                blind::step_aside(
                    "the program registered its own CUPTI activity buffers (a profiler?)",
                )
            });
        }
        match real!(c"cuptiActivityRegisterCallbacks", F) {
            // SAFETY: forwarding the caller's arguments unchanged.
            Some(f) => unsafe { f(req, done) },
            None => missing("cuptiActivityRegisterCallbacks"),
        }
    })
}

/// # Safety
/// Called by C code with the arguments of the CUPTI function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuptiActivityEnable(kind: sys::CUpti_ActivityKind) -> sys::CUptiResult {
    entry!(NOT_INIT, {
        type F = unsafe extern "C" fn(sys::CUpti_ActivityKind) -> sys::CUptiResult;
        if programs() {
            guarded(|| {
                if state::get() == state::TRACING {
                    blind::step_aside("the program enabled CUPTI activity itself (a profiler?)");
                    restore_foreign_callbacks();
                }
            });
            foreign::enabled(kind);
        }
        match real!(c"cuptiActivityEnable", F) {
            // SAFETY: forwarding the caller's argument unchanged.
            Some(f) => unsafe { f(kind) },
            None => missing("cuptiActivityEnable"),
        }
    })
}

/// # Safety
/// Called by C code with the arguments of the CUPTI function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuptiActivityDisable(kind: sys::CUpti_ActivityKind) -> sys::CUptiResult {
    entry!(NOT_INIT, {
        type F = unsafe extern "C" fn(sys::CUpti_ActivityKind) -> sys::CUptiResult;
        let r = match real!(c"cuptiActivityDisable", F) {
            // SAFETY: forwarding the caller's argument unchanged.
            Some(f) => unsafe { f(kind) },
            None => missing("cuptiActivityDisable"),
        };
        if programs() {
            foreign::disabled(kind);
        }
        r
    })
}

/// # Safety
/// Called by C code with the arguments of the CUPTI function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuptiActivityFlushAll(flag: u32) -> sys::CUptiResult {
    entry!(NOT_INIT, {
        type F = unsafe extern "C" fn(u32) -> sys::CUptiResult;
        let r = match real!(c"cuptiActivityFlushAll", F) {
            // SAFETY: forwarding the caller's argument unchanged.
            Some(f) => unsafe { f(flag) },
            None => missing("cuptiActivityFlushAll"),
        };
        if programs() {
            // The program's records are in its hands now; if it has nothing enabled any
            // more, its session is over.
            guarded(blind::maybe_resume);
        }
        r
    })
}

/// # Safety
/// Called by C code with the arguments of the CUPTI function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuptiUnsubscribe(sub: sys::CUpti_SubscriberHandle) -> sys::CUptiResult {
    entry!(NOT_INIT, {
        type F = unsafe extern "C" fn(sys::CUpti_SubscriberHandle) -> sys::CUptiResult;
        let r = match real!(c"cuptiUnsubscribe", F) {
            // SAFETY: forwarding the caller's argument unchanged.
            Some(f) => unsafe { f(sub) },
            None => missing("cuptiUnsubscribe"),
        };
        if programs() {
            guarded(|| {
                blind::maybe_resume();
                // Resumed earlier while the program still held the only subscriber slot?
                blind::resubscribe();
            });
        }
        r
    })
}

/// # Safety
/// Called by C code with the arguments of the CUPTI function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuptiFinalize() -> sys::CUptiResult {
    entry!(NOT_INIT, {
        type F = unsafe extern "C" fn() -> sys::CUptiResult;
        let r = match real!(c"cuptiFinalize", F) {
            // SAFETY: no arguments.
            Some(f) => unsafe { f() },
            None => missing("cuptiFinalize"),
        };
        if programs() {
            foreign::finalized();
            guarded(blind::maybe_resume);
        }
        r
    })
}
