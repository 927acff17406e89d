//! The one way native code is reached at run time: CUPTI, the CUDA driver and runtime,
//! NCCL, NVML, libc's next definition of a hooked symbol, and the Python runtime's
//! symbols all go through here, so three rules hold everywhere:
//!
//! * **Secure execution**: under `AT_SECURE` (a setuid, setgid or file-capability
//!   program) nothing new is loaded; looking up what is already loaded still works.
//! * **Our own library** is never taken for the real one: a symbol whose definition
//!   lies in the object this code is linked into (libgputrace.so, or the `gputrace`
//!   command) is skipped where the caller asks for the real function.
//! * **Errors** are one type, [`LoadError`], with the `dlerror` text; nothing panics.
//!
//! Handles are never closed: a library a tool loaded into a process (and that may have
//! started threads) stays mapped for the process's life.

use std::ffi::{c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, Ordering};

/// Why a native library or symbol could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The process runs in secure-execution mode: nothing is loaded.
    #[error("{}: not loaded (secure execution: a setuid or capability program)", .0.display())]
    Secure(PathBuf),
    /// `dlopen` failed.
    #[error("cannot load {}: {message}", path.display())]
    Open { path: PathBuf, message: String },
    /// Looked up without loading, and not loaded.
    #[error("{} is not loaded: {message}", path.display())]
    NotLoaded { path: PathBuf, message: String },
    /// The library lacks a symbol its user requires.
    #[error("{} lacks the symbol `{symbol}`", path.display())]
    MissingSymbol { path: PathBuf, symbol: String },
}

/// How [`Library::open`] may reach a library.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Open {
    /// Load it (`RTLD_NOW | RTLD_LOCAL`), running its initialisers if it is new.
    Load,
    /// Only if the process has it loaded already (`RTLD_NOLOAD`): nothing runs.
    IfLoaded,
}

/// A reference to a loaded object, never closed.
#[derive(Debug)]
pub struct Library {
    handle: NonNull<c_void>,
    path: PathBuf,
}

// SAFETY: a dlopen handle is a process-wide token that the loader's functions accept
// from any thread; it is never closed, so it cannot dangle.
unsafe impl Send for Library {}
// SAFETY: as above: nothing in Library is mutated through a shared reference.
unsafe impl Sync for Library {}

const UNKNOWN: u8 = 0;
const NORMAL: u8 = 1;
const SECURE: u8 = 2;
static MODE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Whether the process runs in secure-execution mode (`getauxval(AT_SECURE)`).
pub fn secure_execution() -> bool {
    match MODE.load(Ordering::Relaxed) {
        NORMAL => false,
        SECURE => true,
        _ => {
            // SAFETY: getauxval has no preconditions; an absent entry reads 0.
            let secure = unsafe { libc::getauxval(libc::AT_SECURE) } != 0;
            MODE.store(if secure { SECURE } else { NORMAL }, Ordering::Relaxed);
            secure
        }
    }
}

/// The text of the calling thread's last loader error (and clears it).
fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a C string valid until the next loader call on
    // this thread; it is copied at once.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown loader error".into()
    } else {
        // SAFETY: non-null, NUL-terminated (above).
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

impl Library {
    /// Opens the library `name` (a path, or a file name the loader searches for).
    pub fn open(name: &Path, how: Open) -> Result<Library, LoadError> {
        Library::open_with(name, how, secure_execution())
    }

    fn open_with(name: &Path, how: Open, secure: bool) -> Result<Library, LoadError> {
        use std::os::unix::ffi::OsStrExt;
        if how == Open::Load && secure {
            return Err(LoadError::Secure(name.to_path_buf()));
        }
        let c = CString::new(name.as_os_str().as_bytes()).map_err(|_| LoadError::Open {
            path: name.to_path_buf(),
            message: "the name holds a NUL byte".into(),
        })?;
        let flags = match how {
            Open::Load => libc::RTLD_NOW | libc::RTLD_LOCAL,
            Open::IfLoaded => libc::RTLD_NOW | libc::RTLD_LOCAL | libc::RTLD_NOLOAD,
        };
        // SAFETY: a valid C string. Loading runs the library's initialisers: callers
        // load only libraries meant to run in any CUDA process (CUPTI, NVML), or look
        // up loaded ones (RTLD_NOLOAD runs nothing).
        let h = unsafe { libc::dlopen(c.as_ptr(), flags) };
        match NonNull::new(h) {
            Some(handle) => Ok(Library {
                handle,
                path: name.to_path_buf(),
            }),
            None => {
                let message = dl_error();
                let path = name.to_path_buf();
                Err(match how {
                    Open::Load => LoadError::Open { path, message },
                    Open::IfLoaded => LoadError::NotLoaded { path, message },
                })
            }
        }
    }

    /// The first of `names` that the process has loaded.
    pub fn first_loaded(names: &[&CStr]) -> Option<Library> {
        use std::os::unix::ffi::OsStrExt;
        names.iter().find_map(|n| {
            let p = Path::new(std::ffi::OsStr::from_bytes(n.to_bytes()));
            Library::open(p, Open::IfLoaded).ok()
        })
    }

    /// The name it was opened by.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The raw handle (for bindings that take one, e.g. [`crate::from_handle`]).
    pub fn handle(&self) -> *mut c_void {
        self.handle.as_ptr()
    }

    /// The address of `name` in this library (what it resolves to from there),
    /// `None` if it has none or the definition found is our own.
    pub fn sym(&self, name: &CStr) -> Option<NonNull<c_void>> {
        // SAFETY: a live handle (never closed) and a C string.
        let p = unsafe { libc::dlsym(self.handle.as_ptr(), name.as_ptr()) };
        real(p)
    }

    /// [`sym`](Self::sym), or [`LoadError::MissingSymbol`].
    pub fn require(&self, name: &CStr) -> Result<NonNull<c_void>, LoadError> {
        self.sym(name).ok_or_else(|| LoadError::MissingSymbol {
            path: self.path.clone(),
            symbol: name.to_string_lossy().into_owned(),
        })
    }
}

/// `p` unless it is null or inside our own object.
fn real(p: *mut c_void) -> Option<NonNull<c_void>> {
    NonNull::new(p).filter(|p| !is_ours(p.as_ptr()))
}

/// The next definition of `name` after the object this code is linked into
/// (`RTLD_NEXT`): for an exported hook, the function it stands in front of.
pub fn next(name: &CStr) -> Option<NonNull<c_void>> {
    // SAFETY: dlsym with RTLD_NEXT and a C string; a missing symbol is NULL.
    real(unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) })
}

/// The definition of `name` in the process's global scope (`RTLD_DEFAULT`), unless it
/// is our own.
pub fn global(name: &CStr) -> Option<NonNull<c_void>> {
    // SAFETY: dlsym with RTLD_DEFAULT and a C string; a missing symbol is NULL.
    real(unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) })
}

/// The base address of the object holding `p` (null if none).
fn object_base(p: *const c_void) -> *mut c_void {
    // SAFETY: an all-zero Dl_info is a valid value for dladdr to overwrite.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only looks `p` up (never reads it) and writes `info`.
    if unsafe { libc::dladdr(p, &mut info) } == 0 {
        return std::ptr::null_mut();
    }
    info.dli_fbase
}

/// Whether `p` lies in the object this code is linked into (libgputrace.so in a traced
/// process): the one rule for "this is our own definition, not the real one".
pub fn is_ours(p: *const c_void) -> bool {
    let mine = object_base(is_ours as *const c_void);
    !mine.is_null() && object_base(p) == mine
}

/// The file the object holding `p` was loaded from, as the loader was given it (links
/// not followed); `p` is only looked up, never read.
pub fn object_file(p: *const c_void) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: an all-zero Dl_info is a valid value for dladdr to overwrite.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // An address only looked up: passed on as a number, never dereferenced here.
    let addr = p as usize as *const c_void;
    // SAFETY: dladdr only looks `addr` up and writes `info`.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the loader.
    let s = unsafe { CStr::from_ptr(info.dli_fname) };
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(s.to_bytes())))
}

/// Takes a reference on the object holding `p`, so it stays mapped while a pointer
/// into it is kept (the program may dlclose its own handle).
pub fn pin(p: NonNull<c_void>) {
    // SAFETY: an all-zero Dl_info is a valid value for dladdr to overwrite.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only writes `info`; dli_fname is a loader-owned C string.
    if unsafe { libc::dladdr(p.as_ptr(), &mut info) } != 0 && !info.dli_fname.is_null() {
        // SAFETY: RTLD_NOLOAD never loads anything; the reference is kept on purpose.
        unsafe { libc::dlopen(info.dli_fname, libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    }
}

/// Clears the thread's loader error, so our failed look-ups never show in the
/// program's own `dlerror()`.
pub fn forget_errors() {
    // SAFETY: dlerror only reads and clears the thread's error state.
    unsafe { libc::dlerror() };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loading_is_refused_under_secure_execution_and_look_ups_are_not() {
        let libc_so = Path::new("libc.so.6");
        assert!(matches!(
            Library::open_with(libc_so, Open::Load, true),
            Err(LoadError::Secure(_))
        ));
        let l = Library::open_with(libc_so, Open::IfLoaded, true).expect("libc is loaded");
        assert!(l.sym(c"getpid").is_some());
        assert!(!secure_execution(), "the test binary is not setuid");
    }

    #[test]
    fn errors_carry_the_loader_text() {
        let e =
            Library::open(Path::new("libgputrace-no-such-lib.so.9"), Open::IfLoaded).unwrap_err();
        assert!(matches!(e, LoadError::NotLoaded { .. }), "{e}");
        let e = Library::open(Path::new("/nonexistent/libx.so"), Open::Load).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/libx.so"), "{e}");
        let libc_so = Library::open(Path::new("libc.so.6"), Open::IfLoaded).unwrap();
        let e = libc_so.require(c"gputraceNoSuchFunction").unwrap_err();
        assert!(e.to_string().contains("gputraceNoSuchFunction"), "{e}");
    }

    #[test]
    fn our_own_code_is_never_the_real_definition() {
        assert!(is_ours(is_ours as *const c_void));
        assert!(!is_ours(libc::malloc as *const c_void));
        assert!(next(c"getpid").is_some());
        assert!(global(c"getpid").is_some());
        assert!(Library::first_loaded(&[c"libgputrace-none.so", c"libc.so.6"]).is_some());
    }
}
