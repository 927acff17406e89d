//! The interpreter's own view of its threads, read like the stacks (every read through
//! `process_vm_readv` on our own pid, [`super::mem`]): which thread holds the GIL, and
//! every Python thread of the process (not only those that issue CUDA work).
//!
//! * The main interpreter: `_PyRuntime.interpreters.main`.
//! * Its threads: the interpreter's list of thread states (`tstate_head`, 3.11+
//!   `threads.head`, then each state's `next`), at most [`MAX_THREADS`] followed, each
//!   mapped to the kernel's thread id (3.11+ `native_thread_id`; 3.9/3.10 only keep the
//!   `pthread_t`, whose thread id is read from glibc's thread descriptor at the offset
//!   found once on the calling thread, see [`pthread_tid_offset`]).
//! * The GIL: a `_gil_runtime_state` (3.9-3.11 inside `_PyRuntime.ceval`, 3.12+ pointed
//!   to by the interpreter's `ceval.gil`): `locked`, and `last_holder`, the thread
//!   state that took it last (the holder while `locked`), and `switch_number`.
//!
//! Offsets: layout.rs, per minor version. Before any of it is used the layout is
//! checked against the running process once: the thread list must hold the calling
//! process's main thread, each state pointing back at the interpreter, and the GIL must
//! read as a lock (`locked` 0 or 1, its holder null or a listed state). A check that
//! fails turns this off for the process (the stacks of the noted threads go on).

use super::{layout, mem, Python};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

/// Thread states followed at most in one walk of the list.
pub const MAX_THREADS: usize = 64;

/// Thread state -> its interpreter (`interp`, 3.9-3.13 alike).
const TSTATE_INTERP: u64 = 16;

/// 0: not checked yet; 1: usable; 2: not usable here.
static CHECKED: AtomicU8 = AtomicU8::new(0);

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

fn read_u64(at: u64) -> Option<u64> {
    mem::read_u64(at).ok()
}

/// Where glibc keeps a thread's kernel id in its thread descriptor (`pthread_t` points
/// at it): found once by looking for the calling thread's own id in its descriptor.
fn pthread_tid_offset() -> Option<u64> {
    static OFF: OnceLock<Option<u64>> = OnceLock::new();
    *OFF.get_or_init(|| {
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() } as u64;
        let tid = gettid();
        let mut buf = [0u8; 1024];
        mem::read(me, &mut buf).ok()?;
        (16..buf.len() - 4).step_by(4).find_map(|o| {
            let v = u32::from_le_bytes([buf[o], buf[o + 1], buf[o + 2], buf[o + 3]]);
            (v == tid).then_some(o as u64)
        })
    })
}

/// The main interpreter's address.
fn interp(py: &Python) -> Option<u64> {
    if py.runtime == 0 {
        return None;
    }
    read_u64(py.runtime + py.layout.runtime_main_interp).filter(|&a| a != 0)
}

/// The kernel thread id of thread state `ts` (0 when it cannot be read).
pub fn tid_of(py: &Python, ts: u64) -> u32 {
    let l = &py.layout;
    let v = match l.tstate_native_tid {
        Some(o) => read_u64(ts + o),
        None => read_u64(ts + l.tstate_pthread)
            .filter(|&p| p != 0)
            .and_then(|p| Some(p + pthread_tid_offset()?))
            .and_then(read_u64),
    };
    v.map_or(0, |x| x as u32)
}

/// Calls `f(tid, thread state)` for each thread of the main interpreter (at most
/// [`MAX_THREADS`]); returns how many.
fn walk(py: &Python, interp: u64, mut f: impl FnMut(u32, u64)) -> usize {
    let l = &py.layout;
    let mut ts = read_u64(interp + l.interp_threads_head).unwrap_or(0);
    let mut n = 0;
    while ts != 0 && n < MAX_THREADS {
        f(tid_of(py, ts), ts);
        n += 1;
        ts = read_u64(ts + l.tstate_next).unwrap_or(0);
    }
    n
}

/// The GIL's address (`_gil_runtime_state`).
fn gil_addr(py: &Python, interp: u64) -> Option<u64> {
    let l = &py.layout;
    match (l.runtime_gil, l.interp_gil_ptr) {
        (Some(o), _) if py.runtime != 0 => Some(py.runtime + o),
        (None, Some(o)) => read_u64(interp + o).filter(|&a| a != 0),
        _ => None,
    }
}

/// The GIL as read: (last holder's thread state, locked, switches).
fn read_gil(at: u64) -> Option<(u64, i32, u64)> {
    let mut b = [0u8; 32];
    mem::read(at, &mut b).ok()?;
    Some((
        mem::u64_at(&b, layout::GIL_LAST_HOLDER as usize),
        mem::i32_at(&b, layout::GIL_LOCKED as usize),
        mem::u64_at(&b, layout::GIL_SWITCHES as usize),
    ))
}

/// Checks the layout against this process once (see the module's notes).
fn usable(py: &Python) -> bool {
    match CHECKED.load(Ordering::Acquire) {
        1 => return true,
        2 => return false,
        _ => {}
    }
    let r = check_layout(py);
    if let Err(why) = &r {
        crate::base::log::debug(&format!("no GIL or thread-list samples: {why}"));
    }
    let ok = r.is_ok();
    CHECKED.store(if ok { 1 } else { 2 }, Ordering::Release);
    ok
}

/// Why the layout does not fit this process, if it does not.
pub fn check_layout(py: &Python) -> Result<(), String> {
    let i = interp(py).ok_or("the main interpreter cannot be read")?;
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    let mut states: Vec<u64> = Vec::with_capacity(8);
    let mut main = false;
    let mut foreign = false;
    walk(py, i, |tid, ts| {
        states.push(ts);
        main |= tid == pid;
        foreign |= read_u64(ts + TSTATE_INTERP) != Some(i);
    });
    if states.is_empty() || foreign {
        return Err("the interpreter's thread list does not read as one".into());
    }
    if !main {
        return Err("the main thread is not in the interpreter's thread list".into());
    }
    let g = gil_addr(py, i).ok_or("the GIL cannot be found")?;
    let (holder, locked, _) = read_gil(g).ok_or("the GIL cannot be read")?;
    if !(0..=1).contains(&locked) || (holder != 0 && !states.contains(&holder)) {
        return Err("the GIL does not read as a lock".into());
    }
    Ok(())
}

/// The GIL now: (holder's thread id, 0 when none or not known; locked; switches).
pub fn gil(py: &Python) -> Option<(u32, bool, u64)> {
    if !usable(py) {
        return None;
    }
    let i = interp(py)?;
    let (holder, locked, switches) = read_gil(gil_addr(py, i)?)?;
    let tid = if holder != 0 { tid_of(py, holder) } else { 0 };
    Some((tid, locked == 1, switches))
}

/// Calls `f(tid, thread state)` for every Python thread of the process (at most
/// [`MAX_THREADS`]).
pub fn each_thread(py: &Python, f: impl FnMut(u32, u64)) {
    if !usable(py) {
        return;
    }
    if let Some(i) = interp(py) {
        walk(py, i, f);
    }
}

/// The GIL now, if stacks are being taken ([`gil`]). On the host sampler's thread.
pub fn now() -> Option<(u32, bool, u64)> {
    let p = super::ACTIVE.load(Ordering::Acquire);
    if p.is_null() {
        return None;
    }
    // SAFETY: ACTIVE only ever holds a leaked `Python`, valid for the process's life.
    gil(unsafe { &*p })
}
