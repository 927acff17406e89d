//! The Python call-site session: the calling thread's Python stack at the host calls a
//! finding can be about (synchronising calls, copies, device and pinned allocations,
//! NCCL calls), in CPython 3.9-3.13, read without the interpreter's help.
//!
//! # How, and what it never does
//! * The thread's `PyThreadState` comes from `PyGILState_GetThisThreadState`, resolved
//!   once with `dlsym(RTLD_DEFAULT)`. It reads the thread-specific slot CPython keeps
//!   for every thread it knows (`pthread_getspecific`): no lock, no allocation, no
//!   Python object, and it answers whether or not the thread holds the GIL. That
//!   matters: PyTorch releases the GIL around its operators, so the thread that calls
//!   `cudaStreamSynchronize` usually does not hold it, and `_PyThreadState_GetCurrent`
//!   (the attached thread state, 3.12's thread-local `_Py_tss_tstate`) is NULL then.
//! * Frames are walked with per-version offsets ([`layout`]; 3.13's `_Py_DebugOffsets`
//!   where present), every read through `process_vm_readv` on our own pid ([`mem`]):
//!   a stale pointer gives a failed read, never a fault. No GIL is taken, no reference
//!   count is touched, no CPython function but the one above is called on the hot path.
//! * The walk is bounded (depth, and four times that many frames looked at), so a
//!   frame chain that changes or loops under a racing reader cannot hang it. On the
//!   calling thread at the call's entry nothing changes under us: the thread is in C
//!   code, and its frames (and their code objects, which they hold) stay put.
//! * On the hot path only raw (code object address, bytecode offset) pairs are kept:
//!   2 + depth system calls, no string. The writer thread turns them into file,
//!   function and line ([`resolve`]), caching by code object and re-checking each
//!   cached code object once per drain (an address reused by a new code object shows
//!   as a changed file name, name or line table pointer).
//!
//! Not a Python process, a version we do not know, a seccomp filter that refuses
//! `process_vm_readv`: no stacks, one debug line, and a `python_call_sites` fact in
//! the trace that says why. `GPUTRACE_PYSTACK=0` turns it off.
//!
//! # Where stacks are taken
//! * The CUPTI API callback (session/cupti/callback.rs), at the ENTER of the calls
//!   `base::cupti::apis` marks as call sites, kept in a thread-local until EXIT, where they go
//!   into the ring just before the call's own record ([`hold`], [`push_held`]).
//! * The symbol hooks (exports/hooks), for the calls CUPTI does not see at the moment:
//!   syncs and copies while CUPTI's callbacks are off, every NCCL collective and
//!   point-to-point call ([`capture`], [`push`]).
//!
//! Never on a kernel launch: that is the per-launch path.

pub mod gil;
pub mod layout;
pub mod lines;
pub mod mem;
pub mod resolve;
pub mod sample;
pub mod threads;

use crate::base::ffi::{errno, set_errno};
use crate::base::log;
use crate::rings::record::{self as rec, RawFrame, RAW_OFFSET_UNKNOWN};
use layout::{FrameKind, Layout, FRAME_OWNED_BY_CSTACK};
use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, Ordering};
use std::sync::OnceLock;

/// Most frames a stack keeps.
pub const MAX_DEPTH: usize = gputrace_format::PYSTACK_MAX_FRAMES as usize;
/// Frames kept when the setting does not say.
pub const DEFAULT_DEPTH: usize = crate::base::opts::PYSTACK_DEPTH;

/// The interpreter found in this process, and what a walk needs of it.
pub struct Python {
    pub layout: Layout,
    /// `PyGILState_GetThisThreadState`.
    this_thread_state: unsafe extern "C" fn() -> *mut c_void,
    /// Addresses of the type objects, to check what a pointer points to.
    pub code_type: u64,
    pub str_type: u64,
    pub bytes_type: u64,
    /// `_PyRuntime`'s address (0 when it is not exported): the GIL and the thread list.
    pub runtime: u64,
}

impl Python {
    /// `CPython 3.12.1`.
    pub fn describe(&self) -> String {
        let l = &self.layout;
        format!("CPython {}.{}.{}", l.major, l.minor, l.micro)
    }
}

/// The interpreter while stacks are being taken (null: not taking them).
static ACTIVE: AtomicPtr<Python> = AtomicPtr::new(std::ptr::null_mut());
/// Frames kept per stack.
static DEPTH: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// The errno of a refused read on a program thread (0: none): stacks are off for good.
static REFUSED: AtomicI32 = AtomicI32::new(0);
static SAID_REFUSED: AtomicBool = AtomicBool::new(false);

/// What detection found, once per process: the interpreter, or why there is none.
static FOUND: OnceLock<Result<&'static Python, String>> = OnceLock::new();

fn sym(name: &std::ffi::CStr) -> Option<*mut c_void> {
    cupti_sys::loader::global(name).map(|p| p.as_ptr())
}

/// Finds the interpreter: the thread-state function, the version, the layout.
fn detect() -> Result<&'static Python, String> {
    let Some(tts) = sym(c"PyGILState_GetThisThreadState") else {
        return Err("not a CPython process".into());
    };
    mem::probe().map_err(|e| {
        format!(
            "process_vm_readv is refused here ({}): stacks cannot be read safely",
            std::io::Error::from_raw_os_error(e)
        )
    })?;
    let (major, minor, micro) = if let Some(v) = sym(c"Py_Version") {
        // 3.11+: `const unsigned long Py_Version`, the hex version.
        let v = mem::read_u64(v as u64).map_err(|_| "Py_Version cannot be read".to_string())?;
        layout::from_hex(v)
    } else if let Some(f) = sym(c"Py_GetVersion") {
        // SAFETY: `const char *Py_GetVersion(void)`: formats the version into a static
        // buffer; it takes no lock and makes no Python object.
        let text = unsafe {
            let f = std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> *const libc::c_char>(
                f,
            );
            let p = f();
            if p.is_null() {
                String::new()
            } else {
                std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        layout::from_text(&text).ok_or_else(|| format!("unreadable version {text:?}"))?
    } else {
        return Err("CPython without a version symbol".into());
    };
    let mut l = layout::for_version(major, minor, micro).ok_or_else(|| {
        format!("CPython {major}.{minor}.{micro} is not supported (3.9 to 3.13 are)")
    })?;
    if minor >= 13 {
        if let Some(rt) = sym(c"_PyRuntime") {
            let mut raw = vec![0u8; layout::DEBUG_OFFSETS_SIZE];
            if mem::read(rt as u64, &mut raw).is_ok() {
                layout::apply_debug_offsets(&mut l, &raw).map_err(|e| {
                    format!(
                        "CPython {major}.{minor}.{micro}: its debug offsets are unusable ({e:?})"
                    )
                })?;
            }
        }
    }
    let ty = |name: &std::ffi::CStr| {
        sym(name)
            .map(|p| p as u64)
            .ok_or_else(|| format!("CPython without {}", name.to_string_lossy()))
    };
    let py = Python {
        layout: l,
        // SAFETY: `PyThreadState *PyGILState_GetThisThreadState(void)` in every
        // version we support.
        this_thread_state: unsafe {
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> *mut c_void>(tts)
        },
        code_type: ty(c"PyCode_Type")?,
        str_type: ty(c"PyUnicode_Type")?,
        bytes_type: ty(c"PyBytes_Type")?,
        runtime: sym(c"_PyRuntime").map_or(0, |p| p as u64),
    };
    Ok(Box::leak(Box::new(py)))
}

/// Starts taking stacks for a trace (`depth` 0: off). Detection runs the first time.
pub fn start(depth: usize) {
    if depth == 0 {
        stop();
        return;
    }
    let found = FOUND.get_or_init(|| {
        let r = detect();
        match &r {
            Ok(py) => log::debug(&format!(
                "Python call sites: {} ({}-frame stacks)",
                py.describe(),
                depth.min(MAX_DEPTH)
            )),
            Err(why) => log::debug(&format!("no Python call sites: {why}")),
        }
        r
    });
    DEPTH.store(depth.min(MAX_DEPTH), Ordering::Relaxed);
    if let Ok(py) = found {
        if REFUSED.load(Ordering::Relaxed) == 0 {
            ACTIVE.store(*py as *const Python as *mut Python, Ordering::Release);
        }
    }
}

/// Stops taking stacks (the end of a trace or a window).
pub fn stop() {
    ACTIVE.store(std::ptr::null_mut(), Ordering::Release);
}

/// The interpreter, if one was found (whether or not stacks are being taken).
pub fn python() -> Option<&'static Python> {
    FOUND.get().and_then(|r| r.as_ref().ok().copied())
}

/// What the trace should say about call sites: `Ok(description)` while they are
/// taken, `Err(why not)`.
pub fn status(depth: usize) -> Result<String, String> {
    if depth == 0 {
        return Err(format!(
            "off ({}=0)",
            gputrace_format::protocol::settings::PYSTACK
        ));
    }
    let refused = REFUSED.load(Ordering::Relaxed);
    if refused != 0 {
        return Err(format!(
            "reading the interpreter's memory was refused ({}); stacks off",
            std::io::Error::from_raw_os_error(refused)
        ));
    }
    match FOUND.get() {
        Some(Ok(py)) => Ok(format!(
            "{}, {} frames",
            py.describe(),
            depth.min(MAX_DEPTH)
        )),
        Some(Err(why)) => Err(why.clone()),
        None => Err("not started".into()),
    }
}

/// A read on a program thread failed in a way that will not get better (the kernel
/// refused the call itself): stacks off for good, said once.
#[cold]
fn refused(e: i32) {
    REFUSED.store(e, Ordering::Relaxed);
    stop();
    if !SAID_REFUSED.swap(true, Ordering::Relaxed) {
        log::debug(&format!(
            "no Python call sites from now on: process_vm_readv failed ({})",
            std::io::Error::from_raw_os_error(e)
        ));
    }
}

/// EFAULT is a stale pointer (a race, the interpreter finalising); anything else means
/// the call itself is refused.
#[inline]
fn check(r: Result<u64, i32>) -> Option<u64> {
    match r {
        Ok(v) => Some(v),
        Err(libc::EFAULT) | Err(libc::ESRCH) => None,
        Err(e) => {
            refused(e);
            None
        }
    }
}

/// A stack as the hot path takes it: up to [`MAX_DEPTH`] raw frames, innermost first.
#[derive(Clone, Copy)]
pub struct Stack {
    pub n: usize,
    /// A code object this thread had not met lately is in it: the writer is woken
    /// when the stack is pushed, to read it while it surely exists.
    pub fresh: bool,
    pub frames: [RawFrame; MAX_DEPTH],
}

impl Stack {
    pub const EMPTY: Stack = Stack {
        n: 0,
        fresh: false,
        frames: [RawFrame { code: 0, offset: 0 }; MAX_DEPTH],
    };

    pub fn frames(&self) -> &[RawFrame] {
        &self.frames[..self.n.min(MAX_DEPTH)]
    }
}

/// Takes the calling thread's Python stack into `out` (empty when the thread runs no
/// Python, or stacks are off). errno is left as it was.
#[inline]
pub fn capture(out: &mut Stack) {
    out.n = 0;
    let p = ACTIVE.load(Ordering::Acquire);
    if p.is_null() {
        return;
    }
    // SAFETY: ACTIVE only ever holds a leaked `Python`, valid for the process's life.
    let py = unsafe { &*p };
    let saved = errno();
    out.n = walk(
        py,
        DEPTH.load(Ordering::Relaxed).min(MAX_DEPTH),
        &mut out.frames,
    );
    out.fresh = out.n > 0 && met_anew(out.frames());
    set_errno(saved);
}

/// Slots of the per-thread table of code objects met lately.
const SEEN_SLOTS: usize = 64;

thread_local! {
    static SEEN: UnsafeCell<[u64; SEEN_SLOTS]> = const { UnsafeCell::new([0; SEEN_SLOTS]) };
}

/// Whether any of `frames`' code objects is missing from the thread's table of code
/// objects met lately (a direct-mapped cache: a steady loop meets the same few).
#[inline]
fn met_anew(frames: &[RawFrame]) -> bool {
    SEEN.try_with(|s| {
        // SAFETY: SEEN is this thread's own; nothing here re-enters it.
        let s = unsafe { &mut *s.get() };
        let mut anew = false;
        for f in frames {
            let slot = &mut s[(f.code >> 4) as usize % SEEN_SLOTS];
            if *slot != f.code {
                *slot = f.code;
                anew = true;
            }
        }
        anew
    })
    .unwrap_or(false)
}

/// Bytes of the top of the thread's data stack read in one piece (3.11+): the
/// innermost frames are there, each a few hundred bytes.
const WINDOW: usize = 4096;

/// The walk; see the module notes. 3.9/3.10: a read for the thread state's frame,
/// then one per frame. 3.11+: one read of the thread state (its frame pointer and
/// the top of its data stack), one of the top [`WINDOW`] bytes of the data stack
/// (with the current-frame pointer, 3.11/3.12), then frames are taken from that
/// window; only frames outside it (generators', entry shims on the C stack, an older
/// chunk's) cost a read each.
fn walk(py: &Python, depth: usize, out: &mut [RawFrame; MAX_DEPTH]) -> usize {
    // SAFETY: PyGILState_GetThisThreadState takes no argument and only reads the
    // calling thread's thread-specific slot.
    let ts = unsafe { (py.this_thread_state)() } as u64;
    if ts == 0 {
        return 0;
    }
    threads::note(ts);
    walk_from(py, ts, depth, out)
}

/// The walk from thread state `ts`: the calling thread's, or (the sampler) another
/// thread's, whose frames may change during the walk: every read is a copy made
/// through `mem`, and the loop is bounded, so a torn chain ends the walk early.
fn walk_from(py: &Python, ts: u64, depth: usize, out: &mut [RawFrame; MAX_DEPTH]) -> usize {
    let l = &py.layout;
    let mut window = [0u8; WINDOW];
    let mut win = (0u64, 0u64);
    let mut f = match (l.frames, l.tstate_chunk) {
        (FrameKind::Interp, Some(chunk_off)) => {
            // The thread state's frame pointer, data stack chunk and top, in one read.
            let lo = l.tstate_frame.min(chunk_off);
            let hi = (l.tstate_frame + 8).max(chunk_off + 16);
            let mut t = [0u8; 320];
            let Some(t) = t.get_mut(..(hi - lo) as usize) else {
                return 0;
            };
            if check(mem::read(ts + lo, t).map(|_| 0)).is_none() {
                return 0;
            }
            let first = mem::u64_at(t, (l.tstate_frame - lo) as usize);
            let chunk = mem::u64_at(t, (chunk_off - lo) as usize);
            let top = mem::u64_at(t, (chunk_off + 8 - lo) as usize);
            let data = chunk.wrapping_add(layout::CHUNK_DATA);
            let used = top.wrapping_sub(data);
            let len = if chunk != 0 && top > data && used < 1 << 30 {
                used.min(WINDOW as u64) as usize
            } else {
                0
            };
            let win_lo = top.wrapping_sub(len as u64);
            match l.cframe_current {
                Some(c) => {
                    if first == 0 {
                        return 0;
                    }
                    let mut cur = [0u8; 8];
                    let got = match mem::read2(first + c, &mut cur, win_lo, &mut window[..len]) {
                        Ok(n) => n,
                        Err(e) => {
                            refused(e);
                            return 0;
                        }
                    };
                    if got == 0 {
                        return 0;
                    }
                    if got == 2 && len > 0 {
                        win = (win_lo, top);
                    }
                    u64::from_le_bytes(cur)
                }
                None => {
                    if len > 0 && check(mem::read(win_lo, &mut window[..len]).map(|_| 0)).is_some()
                    {
                        win = (win_lo, top);
                    }
                    first
                }
            }
        }
        _ => {
            let Some(mut f) = check(mem::read_u64(ts + l.tstate_frame)) else {
                return 0;
            };
            if let Some(c) = l.cframe_current {
                if f == 0 {
                    return 0;
                }
                let Some(cur) = check(mem::read_u64(f + c)) else {
                    return 0;
                };
                f = cur;
            }
            f
        }
    };
    let mut own = [0u8; 128];
    let fr = l.frame_read.min(own.len());
    let mut n = 0;
    let mut looked = 0;
    while f != 0 && n < depth && looked < 4 * MAX_DEPTH {
        looked += 1;
        let hdr: &[u8] = if f >= win.0 && f.saturating_add(fr as u64) <= win.1 {
            let at = (f - win.0) as usize;
            &window[at..at + fr]
        } else {
            match mem::read(f, &mut own[..fr]) {
                Ok(()) => &own[..fr],
                Err(libc::EFAULT) | Err(libc::ESRCH) => break,
                Err(e) => {
                    refused(e);
                    break;
                }
            }
        };
        let code = mem::u64_at(hdr, l.frame_code as usize);
        let back = mem::u64_at(hdr, l.frame_back as usize);
        let offset = match l.frames {
            FrameKind::Object => {
                let lasti = mem::i32_at(hdr, l.frame_pos as usize);
                if lasti < 0 {
                    RAW_OFFSET_UNKNOWN
                } else {
                    (lasti as u32).saturating_mul(l.lasti_scale)
                }
            }
            FrameKind::Interp => {
                if let Some(o) = l.frame_owner {
                    if hdr.get(o as usize) == Some(&FRAME_OWNED_BY_CSTACK) {
                        f = back;
                        continue;
                    }
                }
                let ip = mem::u64_at(hdr, l.frame_pos as usize);
                let at = ip.wrapping_sub(code.wrapping_add(l.code_adaptive));
                if at >= RAW_OFFSET_UNKNOWN as u64 {
                    RAW_OFFSET_UNKNOWN
                } else {
                    at as u32
                }
            }
        };
        if code != 0 {
            out[n] = RawFrame { code, offset };
            n += 1;
        }
        f = back;
    }
    n
}

/// Puts a stack taken with [`capture`] into the calling thread's ring, ahead of the
/// record of the call it belongs to (pushed next, with entry stamp `t0`).
#[inline]
pub fn push(stack: &Stack, tid: u32, t0: u64) {
    if stack.n > 0 {
        rec::pystack(stack.frames(), tid, t0, |r| {
            crate::rings::push(r);
        });
        if stack.fresh {
            crate::writer::wake();
        }
    }
}

/// A stack taken at a CUPTI callback's ENTER, held until its EXIT.
struct Held {
    key: u64,
    stack: Stack,
}

thread_local! {
    static HELD: UnsafeCell<Held> = const {
        UnsafeCell::new(Held {
            key: 0,
            stack: Stack::EMPTY,
        })
    };
}

/// At a call's entry (stamp `key`): takes the thread's stack and holds it.
#[inline]
pub fn hold(key: u64) {
    if ACTIVE.load(Ordering::Relaxed).is_null() {
        return;
    }
    let _ = HELD.try_with(|h| {
        // SAFETY: HELD is this thread's own; nothing here re-enters it.
        let h = unsafe { &mut *h.get() };
        h.key = key;
        capture(&mut h.stack);
    });
}

/// At the call's exit: pushes the stack held for the call that entered at `key`, if
/// any (a call entered while another was held replaces it, and a stale one is
/// dropped).
#[inline]
pub fn push_held(key: u64, tid: u32) {
    let _ = HELD.try_with(|h| {
        // SAFETY: as in `hold`.
        let h = unsafe { &mut *h.get() };
        if h.stack.n > 0 && h.key == key {
            push(&h.stack, tid, key);
        }
        h.stack.n = 0;
    });
}

/// In a forked child: the cached pid is the parent's.
pub fn after_fork() {
    mem::reset_after_fork();
    threads::reset_after_fork();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_interpreter_in_the_test_binary() {
        // The unit tests are not a Python process: detection says so, and a capture
        // takes nothing.
        start(8);
        assert!(status(8).is_err());
        assert_eq!(status(0), Err("off (GPUTRACE_PYSTACK=0)".into()));
        let mut s = Stack::EMPTY;
        capture(&mut s);
        assert_eq!(s.n, 0);
        hold(5);
        push_held(5, 1);
        stop();
    }
}
