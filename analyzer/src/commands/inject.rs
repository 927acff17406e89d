//! Loading libgputrace.so into a running process that was started without it, so that
//! `gputrace attach` works on any CUDA process (x86-64 Linux).
//!
//! How, and why it is safe:
//! - One thread of the target is stopped with `PTRACE_SEIZE` + `PTRACE_INTERRUPT`; the
//!   others keep running, so a lock another thread holds is released as usual. The
//!   thread chosen is one blocked in a waiting system call (futex, poll, epoll, sleep,
//!   select): such a thread is not inside the allocator or the dynamic loader, whose
//!   locks `dlopen` takes. Only when no thread waits (a single busy thread) is a thread
//!   stopped in user code used, and only when it stopped outside libc and the loader.
//! - In that thread `dlopen(path, RTLD_NOW)` is called: its registers (general and
//!   extended state) are saved, the path is written below its stack's red zone, the
//!   return address is 0, so the call ends in a SIGSEGV stop at address 0 that is never
//!   delivered. Then the registers and the bytes written are put back exactly and the
//!   thread detached; a system call it was in is restarted by the kernel as after any
//!   stop.
//! - The library learns it was loaded late from a marker file beside the control socket
//!   (`protocol::inject_marker_path`): it then starts dormant, sets no environment
//!   variable (other threads run) and makes its control socket at once.

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
    #[error("cannot find dlopen in pid {pid}: {why}")]
    NoDlopen { pid: u32, why: String },
    #[error("no thread of pid {0} stopped at a point where loading a library is safe (every try found one inside libc or the loader)")]
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
    /// Whether that thread was waiting in a system call (else stopped in user code).
    pub was_waiting: bool,
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

/// Address ranges of libc and the dynamic loader (a thread stopped inside them may hold
/// their locks).
fn runtime_ranges(maps: &[Mapping]) -> Vec<(u64, u64)> {
    maps.iter()
        .filter(|m| {
            let n = file_name(&m.path);
            n.starts_with("libc.so")
                || n.starts_with("libc-")
                || n.starts_with("ld-linux")
                || n.starts_with("libpthread")
                || n.starts_with("libdl")
        })
        .map(|m| (m.start, m.end))
        .collect()
}

/// Where `dlopen` is in the target: the same file as this process's dlopen (same
/// device and inode), at the same offset from its base.
fn remote_dlopen(pid: u32, maps: &[Mapping]) -> Result<u64, InjectError> {
    let err = |why: String| InjectError::NoDlopen { pid, why };
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name has no preconditions.
    let own = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"dlopen".as_ptr()) } as u64;
    if own == 0 {
        return Err(err("this process has no dlopen".into()));
    }
    let mine = std::fs::read_to_string("/proc/self/maps")
        .map(|t| parse_maps(&t))
        .map_err(|e| err(format!("cannot read /proc/self/maps: {e}")))?;
    let m = mine
        .iter()
        .find(|m| m.start <= own && own < m.end)
        .ok_or_else(|| err("this process's dlopen is in no mapped file".into()))?;
    let my_base = base_of(&mine, &m.dev, m.inode)
        .ok_or_else(|| err("cannot find the base of this process's libc".into()))?;
    let theirs = base_of(maps, &m.dev, m.inode).ok_or_else(|| {
        err(format!(
            "it does not map {} (a different C library, as in another container image): run `gputrace attach` where the job runs (the same image)",
            m.path
        ))
    })?;
    Ok(theirs.start + (own - my_base.start))
}

/// System calls a thread waits in without holding the allocator's or the loader's lock.
fn is_waiting_syscall(nr: u64) -> bool {
    matches!(
        nr,
        7      // poll
        | 23   // select
        | 35   // nanosleep
        | 202  // futex
        | 230  // clock_nanosleep
        | 232  // epoll_wait
        | 270  // pselect6
        | 271  // ppoll
        | 281  // epoll_pwait
        | 441 // epoll_pwait2
    )
}

/// The threads of `pid`, those waiting in a system call first (by /proc's syscall file).
fn candidate_threads(pid: u32) -> Vec<u32> {
    let mut waiting = Vec::new();
    let mut other = Vec::new();
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for e in rd.flatten() {
            let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let sc = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall"))
                .unwrap_or_default();
            let nr = sc.split_whitespace().next().and_then(|s| s.parse().ok());
            match nr {
                Some(n) if is_waiting_syscall(n) => waiting.push(tid),
                _ => other.push(tid),
            }
        }
    }
    // The main thread last among the waiting ones: stopping it stalls the program.
    waiting.sort_by_key(|t| (*t == pid, *t));
    other.sort_by_key(|t| (*t != pid, *t));
    waiting.extend(other);
    waiting
}

fn seccomp_mode(pid: u32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let l = s.lines().find(|l| l.starts_with("Seccomp:"))?;
    Some(l["Seccomp:".len()..].trim().to_string())
}

fn ptrace_scope() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .map(|s| s.trim().to_string())
}

/// Loads `lib` into `pid`. The marker file that tells the library it was loaded late is
/// made first (and removed again if the load fails).
pub fn inject(pid: u32, lib: &Path, marker: &Path) -> Result<Injected, InjectError> {
    if !cfg!(all(target_arch = "x86_64", target_os = "linux")) {
        return Err(InjectError::Unsupported);
    }
    let maps_text = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(|error| InjectError::Io { pid, error })?;
    let maps = parse_maps(&maps_text);
    if !has_cuda(&maps) {
        return Err(InjectError::NoCuda(pid));
    }
    if let Some(mode) = seccomp_mode(pid).filter(|m| m != "0") {
        return Err(InjectError::Seccomp { pid, mode });
    }
    let dlopen = remote_dlopen(pid, &maps)?;
    let path = CString::new(lib.as_os_str().as_encoded_bytes()).map_err(|_| {
        InjectError::DlopenFailed {
            pid,
            why: "the library path holds a NUL byte".into(),
        }
    })?;
    write_marker(pid, marker).map_err(|error| InjectError::Io { pid, error })?;
    let r = imp::call_dlopen(pid, dlopen, &path, &runtime_ranges(&maps));
    if r.is_err() {
        let _ = std::fs::remove_file(marker);
    }
    r
}

/// The marker, owned by the process's user so that its library may remove it.
fn write_marker(pid: u32, marker: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let meta = std::fs::metadata(format!("/proc/{pid}"))?;
    if let Some(dir) = marker.parent() {
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
            std::os::unix::fs::chown(dir, Some(meta.uid()), Some(meta.gid()))?;
        }
    }
    std::fs::write(marker, b"")?;
    std::os::unix::fs::chown(marker, Some(meta.uid()), Some(meta.gid()))
}

/// The marker path for `pid`, in the socket directory its library will use.
pub fn marker_for(socket: &Path, pid: u32) -> PathBuf {
    let dir = socket.parent().unwrap_or(Path::new("/tmp"));
    protocol::inject_marker_path(dir, pid)
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod imp {
    use super::*;

    const NT_X86_XSTATE: libc::c_int = 0x202;
    /// Large enough for the XSAVE area of current x86 CPUs (AVX-512 included).
    const XSTATE_LEN: usize = 16384;
    /// How long the dlopen may take before we stop waiting and report (the thread is
    /// then left to finish it: undoing a half-done dlopen is not safe).
    const CALL_LIMIT: Duration = Duration::from_secs(20);
    /// Tries at stopping a thread at a safe point.
    const TRIES: usize = 50;

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
        /// The signal the thread stopped for (0: our interrupt), delivered at detach.
        pending: i32,
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
            pending: 0,
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

    fn detach(tid: u32) {
        detach_with(tid, 0)
    }

    fn detach_with(tid: u32, sig: i32) {
        // SAFETY: detaching a tracee, delivering `sig` (0: none).
        unsafe { libc::ptrace(libc::PTRACE_DETACH, tid, 0, sig) };
    }

    /// Seizes `tid` and stops it; the stop's registers.
    fn stop(pid: u32, tid: u32) -> Result<Saved, InjectError> {
        // SAFETY: PTRACE_SEIZE/INTERRUPT on a thread id, no pointers.
        if unsafe { libc::ptrace(libc::PTRACE_SEIZE, tid, 0, 0) } != 0 {
            return Err(perr(pid, "PTRACE_SEIZE"));
        }
        // SAFETY: as above.
        if unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0) } != 0 {
            let e = perr(pid, "PTRACE_INTERRUPT");
            detach(tid);
            return Err(e);
        }
        let Some(st) = wait_stop(tid, Duration::from_secs(2)) else {
            detach(tid);
            return Err(InjectError::Ptrace {
                pid,
                what: "waiting for the thread to stop",
                error: std::io::Error::from(std::io::ErrorKind::TimedOut),
            });
        };
        // A signal-delivery stop (a signal of the program's arrived first): delivered
        // when we let go.
        let pending =
            if libc::WIFSTOPPED(st) && (st >> 16) == 0 && libc::WSTOPSIG(st) != libc::SIGTRAP {
                libc::WSTOPSIG(st)
            } else {
                0
            };
        match get_regs(tid, pid) {
            Ok(s) => Ok(Saved { pending, ..s }),
            Err(e) => {
                detach(tid);
                Err(e)
            }
        }
    }

    /// Calls `func(a0, a1)` in the stopped thread `tid` whose registers are `saved`;
    /// returns rax. The thread stays stopped; memory below its stack is restored.
    fn remote_call(
        pid: u32,
        tid: u32,
        saved: &Saved,
        func: u64,
        data: &[u8],
        a1: u64,
    ) -> Result<u64, InjectError> {
        let io = |error| InjectError::Io { pid, error };
        // The data (a C string) below the red zone, then the return address 0.
        let words = data.len().div_ceil(8);
        let data_at = (saved.regs.rsp - 256 - 8 * words as u64) & !15;
        let sp = data_at - 8 - 64; // 64 spare bytes, then the return address.
        let sp = (sp & !15) - 8; // at the call, rsp % 16 == 8 (as after a `call`).
        let span = ((saved.regs.rsp - 256) - sp) as usize / 8 + 1;
        let old = read_words(tid, sp, span).map_err(io)?;
        let mut buf = vec![0u8; words * 8];
        buf[..data.len()].copy_from_slice(data);
        let w: Vec<u64> = buf
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect();
        let restore = |tid| write_words(tid, sp, &old);
        write_words(tid, data_at, &w).map_err(io)?;
        poke(tid, sp, 0).map_err(io)?;
        let mut regs = saved.regs;
        regs.rip = func;
        regs.rdi = data_at;
        regs.rsi = a1;
        regs.rax = 0;
        regs.rsp = sp;
        // No system call restart on the way out of this stop.
        regs.orig_rax = u64::MAX;
        // SAFETY: PTRACE_SETREGS with a complete user_regs_struct.
        if unsafe { libc::ptrace(libc::PTRACE_SETREGS, tid, 0, &regs) } != 0 {
            let _ = restore(tid);
            return Err(perr(pid, "PTRACE_SETREGS"));
        }
        let mut sig = 0;
        let t0 = Instant::now();
        let rax = loop {
            // SAFETY: resuming a stopped tracee with a signal number (0: none).
            if unsafe { libc::ptrace(libc::PTRACE_CONT, tid, 0, sig) } != 0 {
                return Err(perr(pid, "PTRACE_CONT"));
            }
            let left = CALL_LIMIT.saturating_sub(t0.elapsed());
            let Some(st) = wait_stop(tid, left) else {
                return Err(InjectError::DlopenFailed {
                    pid,
                    why: format!(
                        "the call did not return within {} s; the thread finishes it on its own",
                        CALL_LIMIT.as_secs()
                    ),
                });
            };
            if libc::WIFEXITED(st) || libc::WIFSIGNALED(st) {
                return Err(InjectError::DlopenFailed {
                    pid,
                    why: "the process ended during the load".into(),
                });
            }
            let s = libc::WSTOPSIG(st);
            if s == libc::SIGSEGV {
                // SAFETY: a zeroed user_regs_struct is overwritten by GETREGS.
                let mut now: libc::user_regs_struct = unsafe { std::mem::zeroed() };
                // SAFETY: as in get_regs.
                if unsafe { libc::ptrace(libc::PTRACE_GETREGS, tid, 0, &mut now) } != 0 {
                    return Err(perr(pid, "PTRACE_GETREGS"));
                }
                if now.rip == 0 {
                    break now.rax;
                }
                // A fault of the program's own during the call: not ours to hide.
                sig = s;
                continue;
            }
            // A group stop or event stop: resume without a signal; any other signal is
            // the program's and is delivered.
            sig = if (st >> 16) != 0 || s == libc::SIGTRAP {
                0
            } else {
                s
            };
        };
        restore(tid).map_err(io)?;
        Ok(rax)
    }

    pub fn call_dlopen(
        pid: u32,
        dlopen: u64,
        path: &CString,
        unsafe_ranges: &[(u64, u64)],
    ) -> Result<Injected, InjectError> {
        let threads = candidate_threads(pid);
        if threads.is_empty() {
            return Err(InjectError::NoSafeThread(pid));
        }
        for attempt in 0..TRIES {
            let tid = threads[attempt % threads.len()];
            let t0 = Instant::now();
            let saved = match stop(pid, tid) {
                Ok(s) => s,
                // The thread ended meanwhile: try another.
                Err(InjectError::Ptrace { error, .. })
                    if error.raw_os_error() == Some(libc::ESRCH) =>
                {
                    continue
                }
                Err(e) => return Err(e),
            };
            let in_syscall = (saved.regs.orig_rax as i64) >= 0;
            let waiting = in_syscall && is_waiting_syscall(saved.regs.orig_rax);
            let rip = saved.regs.rip;
            let in_runtime = unsafe_ranges.iter().any(|(a, b)| *a <= rip && rip < *b);
            if !(waiting || (!in_syscall && !in_runtime)) {
                detach_with(tid, saved.pending);
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            let r = remote_call(
                pid,
                tid,
                &saved,
                dlopen,
                path.as_bytes_with_nul(),
                libc::RTLD_NOW as u64,
            );
            let handle = match r {
                Ok(h) => h,
                Err(e) => {
                    // The registers go back whatever happened, where the thread allows.
                    let _ = set_regs(tid, pid, &saved);
                    detach(tid);
                    return Err(e);
                }
            };
            let why = if handle == 0 {
                remote_dlerror(pid, tid, &saved)
            } else {
                String::new()
            };
            set_regs(tid, pid, &saved)?;
            detach_with(tid, saved.pending);
            let stalled = t0.elapsed();
            if handle == 0 {
                return Err(InjectError::DlopenFailed { pid, why });
            }
            return Ok(Injected {
                tid,
                stalled,
                was_waiting: waiting,
            });
        }
        Err(InjectError::NoSafeThread(pid))
    }

    /// dlerror() in the target, for the message of a failed dlopen.
    fn remote_dlerror(pid: u32, tid: u32, saved: &Saved) -> String {
        // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name.
        let own = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"dlerror".as_ptr()) } as u64;
        // SAFETY: as above.
        let own_open = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"dlopen".as_ptr()) } as u64;
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            return "dlopen returned NULL".into();
        };
        let Ok(open) = remote_dlopen(pid, &parse_maps(&maps)) else {
            return "dlopen returned NULL".into();
        };
        // dlerror lives in the same file as dlopen: the same distance apart.
        let func = open.wrapping_add(own.wrapping_sub(own_open));
        match remote_call(pid, tid, saved, func, &[0], 0) {
            Ok(0) | Err(_) => "dlopen returned NULL".into(),
            Ok(p) => read_cstr(tid, p, 512),
        }
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod imp {
    use super::*;
    pub fn call_dlopen(
        _pid: u32,
        _dlopen: u64,
        _path: &CString,
        _r: &[(u64, u64)],
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
        assert_eq!(runtime_ranges(&m), vec![(0x7f00, 0x7f10), (0x7f10, 0x7f20)]);
    }

    #[test]
    fn waiting_syscalls_are_the_blocking_ones() {
        assert!(is_waiting_syscall(202));
        assert!(is_waiting_syscall(7));
        assert!(!is_waiting_syscall(9)); // mmap: the allocator may hold its lock
        assert!(!is_waiting_syscall(0)); // read
    }
}
