//! Loading libgputrace.so into a running process that was started without it, so that
//! `gputrace attach` works on any CUDA process (x86-64 Linux).
//!
//! How, and why it is safe:
//! - One thread of the target is stopped with `PTRACE_SEIZE` + `PTRACE_INTERRUPT`; the
//!   others keep running, so a lock another thread holds is released as usual. Only a
//!   thread blocked in a system call that the kernel restarts unseen after a stop
//!   (futex, poll, select, nanosleep, clock_nanosleep) is used: such a thread is not
//!   inside the allocator or the dynamic loader, whose locks `dlopen` takes. It must not
//!   block SIGSEGV (the call's end, below, would reset the process's handler) and must
//!   have room on its stack (not a small signal stack).
//! - In that thread `dlopen(path, RTLD_NOW)` is called: its registers (general and
//!   extended state) are saved, the path is written below its stack's red zone, the
//!   return address is 0, so the call ends in a SIGSEGV stop at address 0 that is never
//!   delivered. Then the registers and the bytes written are put back exactly and the
//!   thread detached; the system call it was in is restarted by the kernel as after any
//!   stop. A call that does not return in time is left to finish in a `pause()` that
//!   its return lands in: the thread is lost, the process runs on.
//! - The library learns it was loaded late from the name it is loaded under,
//!   `protocol::LATE_LOAD_FILE`: a link to it in a fresh private directory, so nothing is
//!   written where the process's user could redirect it. It then starts dormant, sets no
//!   environment variable (other threads run) and makes its control socket at once.

use gputrace_format::protocol;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    #[error("loading the library into a running process is only supported on x86-64 Linux")]
    Unsupported,
    #[error("pid {0} has no CUDA library loaded (no libcuda.so or libcudart.so in its memory maps): it does not use CUDA, or has not started to")]
    NoCuda(u32),
    #[error("pid {pid} runs under a seccomp filter (Seccomp: {mode} in /proc/{pid}/status): loading a library into it could be refused or kill it")]
    Seccomp { pid: u32, mode: String },
    #[error("not permitted to trace pid {pid} with ptrace: {why}")]
    NotPermitted { pid: u32, why: String },
    #[error("pid {pid} is already traced by pid {tracer} (a debugger?)")]
    Traced { pid: u32, tracer: u32 },
    #[error("pid {0} ignores SIGSEGV: the end of the remote call would reset that for the whole process")]
    SegvIgnored(u32),
    #[error("cannot find {what} in pid {pid}: {why}")]
    NoDlopen {
        pid: u32,
        what: &'static str,
        why: String,
    },
    #[error("no thread of pid {0} was at a point where loading a library is safe (waiting in futex, poll, select or a sleep, SIGSEGV not blocked, room on its stack); try again")]
    NoSafeThread(u32),
    #[error("dlopen failed in pid {pid}: {why}")]
    DlopenFailed { pid: u32, why: String },
    #[error("ptrace on pid {pid} failed ({what}): {error}")]
    Ptrace {
        pid: u32,
        what: &'static str,
        error: std::io::Error,
    },
    #[error("cannot prepare the load into pid {pid}: {error}")]
    Io { pid: u32, error: std::io::Error },
}

impl InjectError {
    pub fn hint(&self) -> Option<String> {
        match self {
            InjectError::NotPermitted { .. } => Some(
                "run `gputrace attach` as root or as the process's user with CAP_SYS_PTRACE (in a container: --cap-add=SYS_PTRACE), and check /proc/sys/kernel/yama/ptrace_scope (0 or 1 lets a parent or root trace); or start the job with `gputrace run --dormant -- CMD`".into(),
            ),
            InjectError::Seccomp { .. } => Some(
                "start the job with `gputrace run --dormant -- CMD` (the library is then loaded at start) and attach to it".into(),
            ),
            InjectError::NoCuda(_) => Some("attach once the program has made its first CUDA call".into()),
            _ => None,
        }
    }
}

/// What the load did.
#[derive(Debug, Clone)]
pub struct Injected {
    /// The thread that ran dlopen.
    pub tid: u32,
    /// How long that thread was stopped (the rest of the process ran on).
    pub stalled: Duration,
}

/// A mapped file of the process: (start address, file offset, device, inode, path).
#[derive(Debug, Clone, PartialEq)]
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    dev: String,
    inode: u64,
    path: String,
}

fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let range = f.next()?;
            let _perms = f.next()?;
            let offset = u64::from_str_radix(f.next()?, 16).ok()?;
            let dev = f.next()?.to_string();
            let inode = f.next()?.parse().ok()?;
            let path = f.collect::<Vec<_>>().join(" ");
            let (a, b) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(a, 16).ok()?,
                end: u64::from_str_radix(b, 16).ok()?,
                offset,
                dev,
                inode,
                path,
            })
        })
        .collect()
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Whether the maps show a CUDA runtime or driver library.
fn has_cuda(maps: &[Mapping]) -> bool {
    maps.iter().any(|m| {
        let n = file_name(&m.path);
        n.starts_with("libcuda.so") || n.starts_with("libcudart.so")
    })
}

/// The load address of the object `path` (its mapping at file offset 0).
fn base_of<'a>(maps: &'a [Mapping], dev: &str, inode: u64) -> Option<&'a Mapping> {
    maps.iter()
        .find(|m| m.inode == inode && m.dev == dev && m.offset == 0)
}

/// Where the C library function `name` is in the target: the same file as this
/// process's (same device and inode), at the same offset from its base.
fn remote_sym(
    pid: u32,
    maps: &[Mapping],
    name: &'static std::ffi::CStr,
) -> Result<u64, InjectError> {
    let name_str: &'static str = name.to_str().unwrap_or("a symbol");
    let err = |why: String| InjectError::NoDlopen {
        pid,
        what: name_str,
        why,
    };
    let own = cupti_sys::loader::global(name).map_or(0, |p| p.as_ptr() as u64);
    if own == 0 {
        return Err(err("this process has none".into()));
    }
    let mine = std::fs::read_to_string("/proc/self/maps")
        .map(|t| parse_maps(&t))
        .map_err(|e| err(format!("cannot read /proc/self/maps: {e}")))?;
    let m = mine
        .iter()
        .find(|m| m.start <= own && own < m.end)
        .ok_or_else(|| err("this process's copy is in no mapped file".into()))?;
    let my_base = base_of(&mine, &m.dev, m.inode)
        .ok_or_else(|| err("cannot find the base of this process's C library".into()))?;
    let theirs = base_of(maps, &m.dev, m.inode).ok_or_else(|| {
        err(format!(
            "it does not map {} (a different C library, as in another container image): run `gputrace attach` where the job runs (the same image)",
            m.path
        ))
    })?;
    Ok(theirs.start + (own - my_base.start))
}

/// System calls a thread waits in without holding the allocator's or the loader's lock,
/// and that the kernel restarts unseen after a ptrace stop (epoll_wait returns EINTR
/// instead: not used).
fn is_waiting_syscall(nr: u64) -> bool {
    matches!(
        nr,
        7      // poll
        | 23   // select
        | 35   // nanosleep
        | 202  // futex
        | 230 // clock_nanosleep
    )
}

/// The system call `tid` is blocked in, from /proc (None: running, or unreadable).
fn syscall_of(pid: u32, tid: u32) -> Option<u64> {
    let sc = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    sc.split_whitespace().next()?.parse().ok()
}

/// The threads of `pid` now waiting in one of those system calls, the main thread last
/// (stopping it would stall the program).
fn candidate_threads(pid: u32) -> Vec<u32> {
    let mut waiting = Vec::new();
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for e in rd.flatten() {
            let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if syscall_of(pid, tid).is_some_and(is_waiting_syscall) {
                waiting.push(tid);
            }
        }
    }
    waiting.sort_by_key(|t| (*t == pid, *t));
    waiting
}

/// A field of /proc/PID/status, its value trimmed.
pub(crate) fn status_field(pid: u32, key: &str) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let l = s.lines().find(|l| l.starts_with(key))?;
    Some(l[key.len()..].trim().to_string())
}

fn ptrace_scope() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .map(|s| s.trim().to_string())
}

/// Loads `lib` into `pid`, under the name that tells the library it was loaded late.
pub fn inject(pid: u32, lib: &Path) -> Result<Injected, InjectError> {
    if !cfg!(all(target_arch = "x86_64", target_os = "linux")) {
        return Err(InjectError::Unsupported);
    }
    let maps_text = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(|error| InjectError::Io { pid, error })?;
    let maps = parse_maps(&maps_text);
    if !has_cuda(&maps) {
        return Err(InjectError::NoCuda(pid));
    }
    if let Some(mode) = status_field(pid, "Seccomp:").filter(|m| m != "0") {
        return Err(InjectError::Seccomp { pid, mode });
    }
    if let Some(tracer) = status_field(pid, "TracerPid:")
        .and_then(|t| t.parse::<u32>().ok())
        .filter(|t| *t != 0)
    {
        return Err(InjectError::Traced { pid, tracer });
    }
    let ignored = status_field(pid, "SigIgn:")
        .and_then(|m| u64::from_str_radix(&m, 16).ok())
        .unwrap_or(0);
    if ignored & (1 << (libc::SIGSEGV - 1)) != 0 {
        return Err(InjectError::SegvIgnored(pid));
    }
    let dlopen = remote_sym(pid, &maps, c"dlopen")?;
    let pause = remote_sym(pid, &maps, c"pause")?;
    let dlerror = remote_sym(pid, &maps, c"dlerror")?;
    let io = |error| InjectError::Io { pid, error };
    let lib = std::fs::canonicalize(lib).map_err(io)?;
    let dir = LateDir::new().map_err(io)?;
    let link = dir.0.join(protocol::LATE_LOAD_FILE);
    std::os::unix::fs::symlink(&lib, &link).map_err(io)?;
    let path = CString::new(link.as_os_str().as_encoded_bytes()).map_err(|_| {
        InjectError::DlopenFailed {
            pid,
            why: "the library path holds a NUL byte".into(),
        }
    })?;
    let stacks: Vec<(u64, u64, bool)> = maps
        .iter()
        .map(|m| (m.start, m.end, m.path == "[stack]"))
        .collect();
    imp::call_dlopen(
        pid,
        imp::Funcs {
            dlopen,
            pause,
            dlerror,
        },
        &path,
        &stacks,
    )
}

/// A fresh directory under /tmp holding the link the library is loaded through; removed
/// when dropped (the library stays mapped).
struct LateDir(PathBuf);

impl LateDir {
    fn new() -> std::io::Result<LateDir> {
        use std::os::unix::fs::PermissionsExt;
        let mut tmpl = *b"/tmp/gputrace-load-XXXXXX\0";
        // SAFETY: a writable NUL-terminated template, as mkdtemp requires.
        let p = unsafe { libc::mkdtemp(tmpl.as_mut_ptr().cast()) };
        if p.is_null() {
            return Err(std::io::Error::last_os_error());
        }
        let dir = PathBuf::from(std::str::from_utf8(&tmpl[..tmpl.len() - 1]).unwrap_or("/tmp"));
        // Readable by the process's user (it opens the library through it), writable by
        // us only.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
        Ok(LateDir(dir))
    }
}

impl Drop for LateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.0.join(protocol::LATE_LOAD_FILE));
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod imp {
    use super::*;

    /// The C library functions called in the target.
    pub struct Funcs {
        pub dlopen: u64,
        pub pause: u64,
        pub dlerror: u64,
    }

    const NT_X86_XSTATE: libc::c_int = 0x202;
    const PTRACE_GETSIGMASK: libc::c_uint = 0x420a;
    /// Large enough for the XSAVE area of current x86 CPUs (AVX-512 and AMX included).
    const XSTATE_LEN: usize = 16384;
    /// How long the dlopen may take; then its thread is parked (see `park`).
    const CALL_LIMIT: Duration = Duration::from_secs(20);
    /// Rounds of looking for a thread at a safe point, 5 ms apart.
    const ROUNDS: usize = 200;
    /// Stack the call may use below the thread's stack pointer.
    const STACK_ROOM: u64 = 256 << 10;

    fn perr(pid: u32, what: &'static str) -> InjectError {
        let error = std::io::Error::last_os_error();
        if error.raw_os_error() == Some(libc::EPERM) && what == "PTRACE_SEIZE" {
            let scope = ptrace_scope()
                .map(|s| format!("kernel.yama.ptrace_scope is {s}"))
                .unwrap_or_else(|| "no Yama ptrace_scope on this kernel".into());
            return InjectError::NotPermitted {
                pid,
                why: format!("{error} ({scope}; CAP_SYS_PTRACE or the same user is needed)"),
            };
        }
        InjectError::Ptrace { pid, what, error }
    }

    /// Waits for `tid` to stop, for at most `limit`; the wait status.
    fn wait_stop(tid: u32, limit: Duration) -> Option<i32> {
        let t0 = Instant::now();
        loop {
            let mut st = 0;
            // SAFETY: waitpid on a thread we trace, with a valid status pointer.
            let r = unsafe { libc::waitpid(tid as i32, &mut st, libc::__WALL | libc::WNOHANG) };
            if r == tid as i32 {
                return Some(st);
            }
            if r < 0 || t0.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    struct Saved {
        regs: libc::user_regs_struct,
        xstate: Vec<u8>,
        xstate_len: usize,
    }

    fn get_regs(tid: u32, pid: u32) -> Result<Saved, InjectError> {
        // SAFETY: a zeroed user_regs_struct is a valid value to be overwritten.
        let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        // SAFETY: PTRACE_GETREGS writes one user_regs_struct of a stopped tracee.
        if unsafe { libc::ptrace(libc::PTRACE_GETREGS, tid, 0, &mut regs) } != 0 {
            return Err(perr(pid, "PTRACE_GETREGS"));
        }
        let mut xstate = vec![0u8; XSTATE_LEN];
        let mut iov = libc::iovec {
            iov_base: xstate.as_mut_ptr().cast(),
            iov_len: xstate.len(),
        };
        // SAFETY: PTRACE_GETREGSET writes at most iov_len bytes and updates iov_len.
        if unsafe { libc::ptrace(libc::PTRACE_GETREGSET, tid, NT_X86_XSTATE, &mut iov) } != 0 {
            return Err(perr(pid, "PTRACE_GETREGSET"));
        }
        Ok(Saved {
            regs,
            xstate_len: iov.iov_len,
            xstate,
        })
    }

    fn set_regs(tid: u32, pid: u32, s: &Saved) -> Result<(), InjectError> {
        // SAFETY: PTRACE_SETREGS reads one user_regs_struct.
        if unsafe { libc::ptrace(libc::PTRACE_SETREGS, tid, 0, &s.regs) } != 0 {
            return Err(perr(pid, "PTRACE_SETREGS"));
        }
        let mut iov = libc::iovec {
            iov_base: s.xstate.as_ptr() as *mut libc::c_void,
            iov_len: s.xstate_len,
        };
        // SAFETY: PTRACE_SETREGSET reads iov_len bytes of the buffer read before.
        if unsafe { libc::ptrace(libc::PTRACE_SETREGSET, tid, NT_X86_XSTATE, &mut iov) } != 0 {
            return Err(perr(pid, "PTRACE_SETREGSET"));
        }
        Ok(())
    }

    /// The stopped thread's blocked-signal mask.
    fn sigmask(tid: u32) -> Option<u64> {
        let mut m: u64 = 0;
        // SAFETY: PTRACE_GETSIGMASK writes 8 bytes (the size passed) of a stopped tracee.
        let r = unsafe {
            libc::ptrace(
                PTRACE_GETSIGMASK,
                tid,
                std::mem::size_of::<u64>(),
                &mut m as *mut u64,
            )
        };
        (r == 0).then_some(m)
    }

    fn peek(tid: u32, addr: u64) -> Result<u64, std::io::Error> {
        // SAFETY: clearing errno before PTRACE_PEEKDATA, whose -1 result is ambiguous.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: PTRACE_PEEKDATA reads a word of the stopped tracee.
        let v = unsafe { libc::ptrace(libc::PTRACE_PEEKDATA, tid, addr, 0) };
        // SAFETY: reading errno.
        if v == -1 && unsafe { *libc::__errno_location() } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(v as u64)
    }

    fn poke(tid: u32, addr: u64, v: u64) -> Result<(), std::io::Error> {
        // SAFETY: PTRACE_POKEDATA writes a word of the stopped tracee's memory.
        if unsafe { libc::ptrace(libc::PTRACE_POKEDATA, tid, addr, v) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    fn read_words(tid: u32, addr: u64, n: usize) -> Result<Vec<u64>, std::io::Error> {
        (0..n).map(|i| peek(tid, addr + 8 * i as u64)).collect()
    }

    fn write_words(tid: u32, addr: u64, w: &[u64]) -> Result<(), std::io::Error> {
        for (i, v) in w.iter().enumerate() {
            poke(tid, addr + 8 * i as u64, *v)?;
        }
        Ok(())
    }

    fn read_cstr(tid: u32, addr: u64, max: usize) -> String {
        let mut out = Vec::new();
        let mut a = addr;
        while out.len() < max {
            let Ok(w) = peek(tid, a) else { break };
            for b in w.to_le_bytes() {
                if b == 0 {
                    return String::from_utf8_lossy(&out).into_owned();
                }
                out.push(b);
            }
            a += 8;
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    fn detach(tid: u32, sig: i32) -> bool {
        // SAFETY: detaching a stopped tracee, delivering `sig` (0: none).
        unsafe { libc::ptrace(libc::PTRACE_DETACH, tid, 0, sig) == 0 }
    }

    /// Why a stopped thread was let go without being used.
    enum Skip {
        /// A signal of the program's arrived first: delivered, try again later.
        Signal,
        /// Not in a waiting system call, SIGSEGV blocked, or a small stack.
        Unsafe,
        /// It ended, or would not stop.
        Gone,
    }

    /// Seizes and stops `tid`; its registers if it stopped at a safe point, else why not
    /// (it is let go again then).
    fn stop_safe(
        pid: u32,
        tid: u32,
        stacks: &[(u64, u64, bool)],
    ) -> Result<Saved, Result<Skip, InjectError>> {
        // SAFETY: PTRACE_SEIZE/INTERRUPT on a thread id, no pointers.
        if unsafe { libc::ptrace(libc::PTRACE_SEIZE, tid, 0, 0) } != 0 {
            let e = perr(pid, "PTRACE_SEIZE");
            return Err(match e {
                InjectError::Ptrace { ref error, .. }
                    if error.raw_os_error() == Some(libc::ESRCH) =>
                {
                    Ok(Skip::Gone)
                }
                e => Err(e),
            });
        }
        // SAFETY: as above.
        if unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0) } != 0 {
            detach(tid, 0);
            return Err(Ok(Skip::Gone));
        }
        let Some(st) = wait_stop(tid, Duration::from_secs(2)) else {
            // Stuck in the kernel (a driver call): it stops later and is let go then
            // by the kernel when we exit; nothing was changed.
            detach(tid, 0);
            return Err(Ok(Skip::Gone));
        };
        if !libc::WIFSTOPPED(st) {
            return Err(Ok(Skip::Gone));
        }
        if (st >> 16) == 0 {
            // A signal-delivery stop: the program's signal, delivered now with its own
            // siginfo.
            detach(tid, libc::WSTOPSIG(st));
            return Err(Ok(Skip::Signal));
        }
        let saved = match get_regs(tid, pid) {
            Ok(s) => s,
            Err(_) => {
                detach(tid, 0);
                return Err(Ok(Skip::Gone));
            }
        };
        let nr = saved.regs.orig_rax;
        let waiting = (nr as i64) >= 0 && is_waiting_syscall(nr);
        let segv_blocked = sigmask(tid).is_none_or(|m| m & (1 << (libc::SIGSEGV - 1)) != 0);
        let sp = saved.regs.rsp;
        let room = stacks
            .iter()
            .find(|(a, b, _)| *a <= sp && sp < *b)
            .is_some_and(|(a, _, main)| *main || sp - a >= STACK_ROOM);
        if !waiting || segv_blocked || !room {
            detach(tid, 0);
            return Err(Ok(Skip::Unsafe));
        }
        Ok(saved)
    }

    /// Leaves a thread whose call has not returned to finish it alone: it is stopped
    /// (mid-call: no register changes), the return slot and the words above it get
    /// `pause`, and it is let go. When the call returns, the thread waits in pause()
    /// for good instead of jumping to 0.
    fn park(tid: u32, sp: u64, pause: u64) {
        // SAFETY: PTRACE_INTERRUPT on our tracee.
        unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0) };
        if wait_stop(tid, Duration::from_secs(2)).is_some() {
            for i in 0..8 {
                let _ = poke(tid, sp + 8 * i, pause);
            }
        }
        detach(tid, 0);
    }

    enum Call {
        Returned(u64),
        /// Did not return in time; the thread was parked.
        Parked,
        Failed(InjectError),
    }

    /// Calls `func(data, a1)` in the stopped thread `tid` whose registers are `saved`.
    /// On return the thread stays stopped and the stack words used are restored.
    fn remote_call(
        pid: u32,
        tid: u32,
        saved: &Saved,
        func: u64,
        data: &[u8],
        a1: u64,
        pause: u64,
    ) -> Call {
        let io = |error| Call::Failed(InjectError::Io { pid, error });
        // The data (a C string) below the red zone, then the return address 0.
        let words = data.len().div_ceil(8);
        let data_at = (saved.regs.rsp - 256 - 8 * words as u64) & !15;
        let sp = data_at - 8 - 64; // 64 spare bytes (the parking slots), then the return address.
        let sp = (sp & !15) - 8; // at the call, rsp % 16 == 8 (as after a `call`).
        let span = ((saved.regs.rsp - 256) - sp) as usize / 8 + 1;
        let old = match read_words(tid, sp, span) {
            Ok(o) => o,
            Err(e) => return io(e),
        };
        let mut buf = vec![0u8; words * 8];
        buf[..data.len()].copy_from_slice(data);
        let w: Vec<u64> = buf
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect();
        if let Err(e) = write_words(tid, data_at, &w).and_then(|()| poke(tid, sp, 0)) {
            let _ = write_words(tid, sp, &old);
            return io(e);
        }
        let mut regs = saved.regs;
        regs.rip = func;
        regs.rdi = data_at;
        regs.rsi = a1;
        regs.rax = 0;
        regs.rsp = sp;
        regs.eflags &= !0x400; // the direction flag clear, as the ABI wants at a call
                               // No system call restart on the way out of this stop.
        regs.orig_rax = u64::MAX;
        // SAFETY: PTRACE_SETREGS with a complete user_regs_struct.
        if unsafe { libc::ptrace(libc::PTRACE_SETREGS, tid, 0, &regs) } != 0 {
            let _ = write_words(tid, sp, &old);
            return Call::Failed(perr(pid, "PTRACE_SETREGS"));
        }
        let mut sig = 0;
        let t0 = Instant::now();
        let rax = loop {
            // SAFETY: resuming a stopped tracee with a signal number (0: none).
            if unsafe { libc::ptrace(libc::PTRACE_CONT, tid, 0, sig) } != 0 {
                return Call::Failed(perr(pid, "PTRACE_CONT"));
            }
            let left = CALL_LIMIT.saturating_sub(t0.elapsed());
            let Some(st) = wait_stop(tid, left) else {
                park(tid, sp, pause);
                return Call::Parked;
            };
            if libc::WIFEXITED(st) || libc::WIFSIGNALED(st) {
                return Call::Failed(InjectError::DlopenFailed {
                    pid,
                    why: "the process ended during the load".into(),
                });
            }
            if (st >> 16) != 0 {
                // A group stop or an event stop: resume, no signal.
                sig = 0;
                continue;
            }
            let s = libc::WSTOPSIG(st);
            if s == libc::SIGSEGV {
                // SAFETY: a zeroed user_regs_struct is overwritten by GETREGS.
                let mut now: libc::user_regs_struct = unsafe { std::mem::zeroed() };
                // SAFETY: as in get_regs.
                if unsafe { libc::ptrace(libc::PTRACE_GETREGS, tid, 0, &mut now) } != 0 {
                    return Call::Failed(perr(pid, "PTRACE_GETREGS"));
                }
                if now.rip == 0 && now.rsp == sp + 8 {
                    break now.rax;
                }
            }
            // The program's own signal (a fault of its own included): delivered.
            sig = s;
        };
        match write_words(tid, sp, &old) {
            Ok(()) => Call::Returned(rax),
            Err(e) => io(e),
        }
    }

    pub fn call_dlopen(
        pid: u32,
        f: Funcs,
        path: &CString,
        stacks: &[(u64, u64, bool)],
    ) -> Result<Injected, InjectError> {
        for _ in 0..ROUNDS {
            for tid in candidate_threads(pid) {
                // Looked at again just before: it may have moved on.
                if !syscall_of(pid, tid).is_some_and(is_waiting_syscall) {
                    continue;
                }
                let t0 = Instant::now();
                let saved = match stop_safe(pid, tid, stacks) {
                    Ok(s) => s,
                    Err(Ok(_)) => continue,
                    Err(Err(e)) => return Err(e),
                };
                let r = remote_call(
                    pid,
                    tid,
                    &saved,
                    f.dlopen,
                    path.as_bytes_with_nul(),
                    libc::RTLD_NOW as u64,
                    f.pause,
                );
                let handle = match r {
                    Call::Returned(h) => h,
                    Call::Parked => {
                        return Err(InjectError::DlopenFailed {
                            pid,
                            why: format!(
                                "dlopen did not return within {} s; its thread {tid} finishes it and then waits in pause() for good (the rest of the process runs on)",
                                CALL_LIMIT.as_secs()
                            ),
                        })
                    }
                    Call::Failed(e) => {
                        // The registers go back whatever happened, where the thread allows.
                        let _ = set_regs(tid, pid, &saved);
                        detach(tid, 0);
                        return Err(e);
                    }
                };
                let why = if handle == 0 {
                    match remote_call(pid, tid, &saved, f.dlerror, &[0], 0, f.pause) {
                        Call::Returned(p) if p != 0 => read_cstr(tid, p, 512),
                        Call::Parked => {
                            return Err(InjectError::DlopenFailed {
                                pid,
                                why: "dlopen returned NULL and dlerror did not return".into(),
                            })
                        }
                        _ => "dlopen returned NULL".into(),
                    }
                } else {
                    String::new()
                };
                // Always let go, even if a register set could not be put back.
                let restored = set_regs(tid, pid, &saved);
                detach(tid, 0);
                let stalled = t0.elapsed();
                restored?;
                if handle == 0 {
                    return Err(InjectError::DlopenFailed { pid, why });
                }
                return Ok(Injected { tid, stalled });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Err(InjectError::NoSafeThread(pid))
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod imp {
    use super::*;
    pub struct Funcs {
        pub dlopen: u64,
        pub pause: u64,
        pub dlerror: u64,
    }
    pub fn call_dlopen(
        _pid: u32,
        _f: Funcs,
        _path: &CString,
        _s: &[(u64, u64, bool)],
    ) -> Result<Injected, InjectError> {
        Err(InjectError::Unsupported)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_are_parsed_with_paths_and_inodes() {
        let t = "7f00-7f10 r--p 00000000 fd:01 1234 /usr/lib/libc.so.6\n\
                 7f10-7f20 r-xp 00010000 fd:01 1234 /usr/lib/libc.so.6\n\
                 7ff0-7ff8 rw-p 00000000 00:00 0 [stack]\n\
                 8000-9000 r-xp 00000000 fd:01 99 /opt/x/libcudart.so.13\n";
        let m = parse_maps(t);
        assert_eq!(m.len(), 4);
        assert_eq!(base_of(&m, "fd:01", 1234).unwrap().start, 0x7f00);
        assert!(has_cuda(&m));
        assert!(!has_cuda(&m[..3]));
    }

    #[test]
    fn waiting_syscalls_are_the_blocking_ones() {
        assert!(is_waiting_syscall(202));
        assert!(is_waiting_syscall(7));
        assert!(!is_waiting_syscall(9)); // mmap: the allocator may hold its lock
        assert!(!is_waiting_syscall(0)); // read
        assert!(!is_waiting_syscall(232)); // epoll_wait: EINTR after a stop
    }
}
