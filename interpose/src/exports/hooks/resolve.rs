//! Finding the real function behind one of our exported names.
//!
//! Order, tried at the first call and again while nothing is found, whenever objects
//! were loaded or unloaded since the last try (the library may come later, with a
//! Python import; the loader's add/remove counters make the check cheap):
//! 1. `dlsym(RTLD_NEXT)`: the next definition after ours in the global scope (a C++
//!    program linked against libcudart).
//! 2. `dlopen(soname, RTLD_NOLOAD)` over the known sonames, then `dlsym` in that
//!    object: Python extensions load libcudart / libnccl RTLD_LOCAL, out of the global
//!    scope, where RTLD_NEXT cannot see them.
//! 3. Every loaded object whose file name starts with the library's stem (a soname we
//!    do not know, such as `libcudart.so.14`).
//!
//! A definition inside libgputrace itself is never taken (that would call our own
//! hook forever). The object found is kept open (a NOLOAD handle is a reference), so
//! the cached pointer stays valid even if the program dlcloses its own handle.
//! Resolving never changes errno.
//!
//! When nothing is found the hook returns the error the real API gives when it cannot
//! start: `cudaErrorInitializationError` (3) for the runtime, `ncclSystemError` (2) for
//! NCCL (the failure is in the environment, a library that could not be found, not a
//! bug inside NCCL, which `ncclInternalError` would claim), and says so once per
//! function in a `gputrace:` line.

use crate::base::cupti::discover;
use crate::base::ffi::{entry, errno, guarded_value, set_errno};
use crate::base::log;
use cupti_sys::loader::{self, Library, Open};
use std::ffi::{c_void, CStr};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

/// A library whose functions we hook.
pub struct Lib {
    pub sonames: &'static [&'static CStr],
    /// File names of its objects start with this.
    pub stem: &'static str,
    /// What the hook returns when the real function cannot be found, and its name.
    pub missing: (i32, &'static str),
}

pub static CUDART: Lib = Lib {
    sonames: &[
        c"libcudart.so.13",
        c"libcudart.so.12",
        c"libcudart.so.11.0",
        c"libcudart.so",
    ],
    stem: "libcudart",
    missing: (3, "cudaErrorInitializationError"),
};

pub static NCCL: Lib = Lib {
    sonames: &[c"libnccl.so.2", c"libnccl.so"],
    stem: "libnccl",
    missing: (2, "ncclSystemError"),
};

/// The cached address of one real function.
pub struct Real {
    lib: &'static Lib,
    name: &'static CStr,
    ptr: AtomicPtr<c_void>,
    said: AtomicBool,
    /// [`load_generation`] at the last failed try (`u64::MAX`: never tried).
    tried: AtomicU64,
}

impl Real {
    pub const fn new(lib: &'static Lib, name: &'static CStr) -> Real {
        Real {
            lib,
            name,
            ptr: AtomicPtr::new(std::ptr::null_mut()),
            said: AtomicBool::new(false),
            tried: AtomicU64::new(u64::MAX),
        }
    }

    /// The real function's address, or NULL if it cannot be found (yet).
    #[inline(always)]
    pub fn get(&self) -> *mut c_void {
        let p = self.ptr.load(Ordering::Acquire);
        if p.is_null() {
            self.resolve()
        } else {
            p
        }
    }

    #[cold]
    #[inline(never)]
    fn resolve(&self) -> *mut c_void {
        let saved = errno();
        let gen = load_generation();
        if gen == self.tried.load(Ordering::Relaxed) {
            // Nothing loaded since the last try: still not there.
            set_errno(saved);
            return std::ptr::null_mut();
        }
        let p = guarded_value(|| Some(find(self.lib, self.name))).unwrap_or(std::ptr::null_mut());
        if p.is_null() {
            self.tried.store(gen, Ordering::Relaxed);
            if !self.said.swap(true, Ordering::Relaxed) {
                log::warn(&format!(
                    "{}: the real function was not found (no {} loaded?); returning {}",
                    self.name.to_string_lossy(),
                    self.lib.stem,
                    self.lib.missing.1
                ));
            }
        } else {
            self.ptr.store(p, Ordering::Release);
        }
        set_errno(saved);
        p
    }

    /// What to return when the real function is missing.
    pub fn missing(&self) -> i32 {
        self.lib.missing.0
    }
}

/// Resolves (once, cached) the real function named `$name` (a constant `&CStr`: a C
/// string literal, or a `const`) of `$lib` as a function pointer of type `$ty`: `Ok(f)`
/// or `Err(error code to return)`.
macro_rules! real {
    ($lib:expr, $name:expr, $ty:ty) => {{
        static REAL: $crate::exports::hooks::resolve::Real =
            $crate::exports::hooks::resolve::Real::new(&$lib, $name);
        let p = REAL.get();
        if p.is_null() {
            Err(REAL.missing())
        } else {
            // SAFETY: `p` is the address of the C function named $name in the real
            // library, whose signature is $ty per that library's headers.
            Ok(unsafe { std::mem::transmute::<*mut std::ffi::c_void, $ty>(p) })
        }
    }};
}
pub(crate) use real;

/// Objects the loader has added plus removed so far: changes whenever one is loaded or
/// unloaded (0 where the loader does not say).
pub fn load_generation() -> u64 {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        size: libc::size_t,
        data: *mut c_void,
    ) -> libc::c_int {
        entry!(1, {
            let need = std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + 8;
            if size >= need {
                // SAFETY: the loader says its struct is at least this long; `data` is
                // the u64 passed below.
                unsafe {
                    *(data as *mut u64) = (*info).dlpi_adds.wrapping_add((*info).dlpi_subs);
                }
            }
            1 // the counters are the same in every entry: stop at the first
        })
    }
    let mut g: u64 = 0;
    // SAFETY: the callback only reads loader data and writes `g`.
    unsafe { libc::dl_iterate_phdr(Some(first), &mut g as *mut u64 as *mut c_void) };
    g
}

/// Is `p` inside libgputrace itself? (The loader's one rule.)
pub fn is_ours(p: *const c_void) -> bool {
    loader::is_ours(p)
}

/// The real definition of `name` in `lib`, NULL if there is none loaded.
pub fn find(lib: &Lib, name: &CStr) -> *mut c_void {
    let p = find_inner(lib, name);
    // Our failed lookups must not show up in the program's own dlerror().
    loader::forget_errors();
    p.map_or(std::ptr::null_mut(), NonNull::as_ptr)
}

fn find_inner(lib: &Lib, name: &CStr) -> Option<NonNull<c_void>> {
    if let Some(p) = loader::next(name) {
        loader::pin(p);
        return Some(p);
    }
    // An object found here stays referenced (the loader never closes a handle), so
    // the pointer kept stays valid if the program dlcloses its own.
    if let Some(p) = lib
        .sonames
        .iter()
        .find_map(|so| Library::first_loaded(&[so])?.sym(name))
    {
        return Some(p);
    }
    discover::loaded_objects()
        .into_iter()
        .filter(|obj| {
            obj.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(lib.stem) && n.contains(".so"))
        })
        .find_map(|obj| Library::open(&obj, Open::IfLoaded).ok()?.sym(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_code_is_recognised() {
        assert!(is_ours(find as *const c_void));
        assert!(!is_ours(libc::malloc as *const c_void));
    }

    #[test]
    fn a_missing_library_resolves_to_null_and_keeps_errno() {
        static R: Real = Real::new(
            &Lib {
                sonames: &[c"libgputrace-test-nonexistent.so.1"],
                stem: "libgputrace-test-nonexistent",
                missing: (3, "cudaErrorInitializationError"),
            },
            c"gputraceNoSuchFunction",
        );
        crate::base::ffi::set_errno(1234);
        assert!(R.get().is_null());
        assert_eq!(crate::base::ffi::errno(), 1234);
        assert_eq!(R.missing(), 3);
    }

    #[test]
    fn loading_an_object_changes_the_generation() {
        let before = load_generation();
        assert_ne!(before, 0);
        // SAFETY: loading and unloading a system library we do not otherwise use.
        let h = unsafe { libc::dlopen(c"libm.so.6".as_ptr(), libc::RTLD_NOW) };
        if !h.is_null() {
            let loaded = load_generation();
            // SAFETY: the handle from above.
            unsafe { libc::dlclose(h) };
            // libm may have been loaded already (then nothing changes).
            assert!(loaded >= before);
        }
    }

    #[test]
    fn libc_functions_are_found_through_rtld_next() {
        let lib = Lib {
            sonames: &[c"libc.so.6"],
            stem: "libc",
            missing: (0, ""),
        };
        assert!(!find(&lib, c"getpid").is_null());
    }
}
