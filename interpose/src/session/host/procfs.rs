//! Reading `/proc` without allocating: files kept open and read again with `pread`
//! into a caller's buffer, directories listed with `getdents64` into one, and parsers
//! for the few formats the host sampler reads. The parsers take bytes and never panic
//! on odd input (a field missing is `None`).

use std::ffi::CStr;

/// An open `/proc` (or `/sys`) file, read from offset 0 each time.
pub struct ProcFile {
    fd: libc::c_int,
}

impl ProcFile {
    /// Opens `path` (NUL-terminated) read-only; `None` if it cannot be opened.
    pub fn open(path: &CStr) -> Option<ProcFile> {
        // SAFETY: a valid NUL-terminated path; the flags ask for nothing unusual.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        (fd >= 0).then_some(ProcFile { fd })
    }

    /// Opens a path built in `scratch` by `f` (no allocation once `scratch` has grown).
    pub fn open_fmt(scratch: &mut Vec<u8>, f: impl FnOnce(&mut Vec<u8>)) -> Option<ProcFile> {
        scratch.clear();
        f(scratch);
        scratch.push(0);
        let p = CStr::from_bytes_until_nul(scratch).ok()?;
        ProcFile::open(p)
    }

    /// Reads the file's content from its start into `buf`; returns the bytes read,
    /// `None` when the read fails or the file is empty (the process or thread is gone).
    pub fn read<'b>(&self, buf: &'b mut [u8]) -> Option<&'b [u8]> {
        // SAFETY: `buf` is writable for its length; `fd` is open for reading.
        let n =
            unsafe { libc::pread(self.fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) };
        (n > 0).then(|| &buf[..n as usize])
    }
}

impl Drop for ProcFile {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor.
        unsafe { libc::close(self.fd) };
    }
}

/// An open directory listed again with `getdents64` (no allocation).
pub struct ProcDir {
    fd: libc::c_int,
}

impl ProcDir {
    pub fn open(path: &CStr) -> Option<ProcDir> {
        // SAFETY: a valid NUL-terminated path.
        let fd = unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        (fd >= 0).then_some(ProcDir { fd })
    }

    /// Calls `f` with every entry whose name is a decimal number (pids, tids), reading
    /// the directory in pieces of `buf`'s size.
    pub fn numeric_entries(&self, buf: &mut [u8], mut f: impl FnMut(u32)) -> bool {
        // SAFETY: rewinding an open directory descriptor.
        if unsafe { libc::lseek(self.fd, 0, libc::SEEK_SET) } < 0 {
            return false;
        }
        loop {
            // SAFETY: getdents64 writes at most `buf.len()` bytes into `buf`.
            let n = unsafe {
                libc::syscall(
                    libc::SYS_getdents64,
                    self.fd,
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                )
            };
            if n < 0 {
                return false;
            }
            if n == 0 {
                return true;
            }
            dirents(&buf[..n as usize], &mut f);
        }
    }
}

impl Drop for ProcDir {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor.
        unsafe { libc::close(self.fd) };
    }
}

/// Walks `linux_dirent64` records (ino u64, off i64, reclen u16, type u8, name\0).
fn dirents(b: &[u8], f: &mut impl FnMut(u32)) {
    let mut at = 0;
    while at + 19 <= b.len() {
        let reclen = u16::from_ne_bytes([b[at + 16], b[at + 17]]) as usize;
        if reclen == 0 || at + reclen > b.len() {
            return;
        }
        let name = &b[at + 19..at + reclen];
        let name = &name[..name.iter().position(|c| *c == 0).unwrap_or(name.len())];
        if let Some(v) = parse_u32(name) {
            f(v);
        }
        at += reclen;
    }
}

/// A decimal number making up all of `s`.
pub fn parse_u32(s: &[u8]) -> Option<u32> {
    if s.is_empty() || s.len() > 10 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + (c - b'0') as u64;
    }
    u32::try_from(v).ok()
}

fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((c - b'0') as u64)?;
    }
    Some(v)
}

fn fields(s: &[u8]) -> impl Iterator<Item = &[u8]> {
    s.split(|c| c.is_ascii_whitespace())
        .filter(|f| !f.is_empty())
}

/// CPU time of thread `tid` of this process, up to date even while it runs (the
/// thread's CPU-time clock; `schedstat` lags by up to a scheduler tick). `None` once
/// the thread has ended.
pub fn thread_cpu_ns(tid: u32) -> Option<u64> {
    // The kernel's id for a thread's scheduler CPU clock: the complemented tid shifted
    // left by 3, the per-thread bit (4) and CPUCLOCK_SCHED (2).
    let id: libc::clockid_t = (!(tid as libc::clockid_t) << 3) | 6;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid, writable timespec; an unknown clock id only fails with EINVAL.
    let r = unsafe { libc::clock_gettime(id, &mut ts) };
    (r == 0).then(|| (ts.tv_sec as u64).wrapping_mul(1_000_000_000) + ts.tv_nsec as u64)
}

/// `/proc/.../syscall`: the number of the system call the task is blocked in (`202 0x..
/// ...`), [`fmt::SYSCALL_NONE`] for `-1` (blocked outside any: a page fault); None for
/// `running` or anything else.
pub fn parse_syscall(s: &[u8]) -> Option<u32> {
    let first = fields(s).next()?;
    if first == b"-1" {
        return Some(gputrace_format::SYSCALL_NONE);
    }
    parse_u32(first)
}

/// `/proc/.../schedstat`: ns on a CPU, ns waiting on a run queue, times switched in.
pub fn parse_schedstat(s: &[u8]) -> Option<(u64, u64, u64)> {
    let mut it = fields(s);
    Some((
        parse_u64(it.next()?)?,
        parse_u64(it.next()?)?,
        parse_u64(it.next()?)?,
    ))
}

/// What the sampler takes from `/proc/.../stat`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat<'a> {
    pub comm: &'a [u8],
    pub state: u8,
    pub ppid: u32,
    /// utime + stime, clock ticks.
    pub cpu_ticks: u64,
    pub threads: u32,
}

/// `/proc/.../stat`. The name sits in parentheses and may hold spaces or parentheses
/// itself: the fields start after the last `)`.
pub fn parse_stat(s: &[u8]) -> Option<Stat<'_>> {
    let open = s.iter().position(|c| *c == b'(')?;
    let close = s.iter().rposition(|c| *c == b')')?;
    if close < open {
        return None;
    }
    let comm = &s[open + 1..close];
    // Fields 3 on: state ppid pgrp session tty tpgid flags minflt cminflt majflt
    // cmajflt utime stime cutime cstime priority nice num_threads ...
    let mut it = fields(&s[close + 1..]);
    let state = *it.next()?.first()?;
    let ppid = parse_u32(it.next()?)?;
    let mut it = it.skip(9);
    let utime = parse_u64(it.next()?)?;
    let stime = parse_u64(it.next()?)?;
    let mut it = it.skip(4);
    let threads = parse_u32(it.next()?)?;
    Some(Stat {
        comm,
        state,
        ppid,
        cpu_ticks: utime.saturating_add(stime),
        threads,
    })
}

/// The state letter of a `/proc/.../stat` line (cheaper than the whole parse).
pub fn stat_state(s: &[u8]) -> Option<u8> {
    let close = s.iter().rposition(|c| *c == b')')?;
    fields(&s[close + 1..]).next()?.first().copied()
}

/// `/proc/PID/io`: (rchar, read_bytes, write_bytes).
pub fn parse_io(s: &[u8]) -> Option<(u64, u64, u64)> {
    let (mut r, mut rb, mut wb) = (None, None, None);
    for line in s.split(|c| *c == b'\n') {
        let mut it = fields(line);
        let (Some(k), Some(v)) = (it.next(), it.next()) else {
            continue;
        };
        match k {
            b"rchar:" => r = parse_u64(v),
            b"read_bytes:" => rb = parse_u64(v),
            b"write_bytes:" => wb = parse_u64(v),
            _ => {}
        }
    }
    Some((r?, rb.unwrap_or(0), wb.unwrap_or(0)))
}

/// The aggregate `cpu` line of `/proc/stat`, in ticks: (busy, idle, iowait, steal),
/// busy being user + nice + system + irq + softirq (guest time is inside user).
pub fn parse_proc_stat(s: &[u8]) -> Option<(u64, u64, u64, u64)> {
    let line = s.split(|c| *c == b'\n').next()?;
    let mut it = fields(line);
    if it.next()? != b"cpu" {
        return None;
    }
    let mut v = [0u64; 8];
    for (i, slot) in v.iter_mut().enumerate() {
        match it.next() {
            Some(f) => *slot = parse_u64(f)?,
            // Old kernels stop after iowait or irq: the rest stays 0.
            None if i >= 4 => break,
            None => return None,
        }
    }
    let [user, nice, system, idle, iowait, irq, softirq, steal] = v;
    Some((user + nice + system + irq + softirq, idle, iowait, steal))
}

/// A PSI file (`/proc/pressure/cpu`, `.../io`): the `total=` of its `some` and `full`
/// lines, in us (`full` is 0 where the file has no such line).
pub fn parse_psi(s: &[u8]) -> Option<(u64, u64)> {
    let mut some = None;
    let mut full = 0;
    for line in s.split(|c| *c == b'\n') {
        let mut it = fields(line);
        let kind = it.next();
        let total = it
            .find_map(|f| f.strip_prefix(b"total="))
            .and_then(parse_u64);
        match (kind, total) {
            (Some(b"some"), Some(t)) => some = Some(t),
            (Some(b"full"), Some(t)) => full = t,
            _ => {}
        }
    }
    Some((some?, full))
}

/// cgroup v2 `cpu.stat`: (usage_usec, throttled_usec).
pub fn parse_cpu_stat(s: &[u8]) -> Option<(u64, u64)> {
    let (mut usage, mut thr) = (None, 0);
    for line in s.split(|c| *c == b'\n') {
        let mut it = fields(line);
        match (it.next(), it.next().and_then(parse_u64)) {
            (Some(b"usage_usec"), Some(v)) => usage = Some(v),
            (Some(b"throttled_usec"), Some(v)) => thr = v,
            _ => {}
        }
    }
    Some((usage?, thr))
}

/// cgroup v2 `cpu.max` (`max 100000` or `200000 100000`): (quota, period) in us,
/// quota 0 for no limit.
pub fn parse_cpu_max(s: &[u8]) -> Option<(u64, u64)> {
    let mut it = fields(s);
    let q = it.next()?;
    let period = parse_u64(it.next()?)?;
    let quota = if q == b"max" { 0 } else { parse_u64(q)? };
    Some((quota, period))
}

/// A number file such as `memory.max` or v1 `cpu.cfs_quota_us`: `None` for `max`,
/// negative values (-1: no quota) and values too large to be a real limit.
pub fn parse_limit(s: &[u8]) -> Option<u64> {
    let v = parse_u64(fields(s).next()?)?;
    (v < (1 << 60)).then_some(v)
}

/// The cgroup v2 path of `/proc/self/cgroup` (the `0::/path` line).
pub fn parse_cgroup_v2_path(s: &[u8]) -> Option<&[u8]> {
    s.split(|c| *c == b'\n')
        .find_map(|l| l.strip_prefix(b"0::"))
        .map(|p| p.trim_ascii_end())
}

/// `/proc/PID/task/TID/children`: the child pids, space-separated.
pub fn parse_children(s: &[u8], mut f: impl FnMut(u32)) {
    for x in fields(s) {
        if let Some(p) = parse_u32(x) {
            f(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_cpu_clock_reads_this_thread_and_a_running_one() {
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
        let a = thread_cpu_ns(me).expect("own thread clock");
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_add(std::hint::black_box(i));
        }
        std::hint::black_box(x);
        let b = thread_cpu_ns(me).expect("own thread clock");
        assert!(b > a, "{a} then {b}");
        // Another thread of this process, spinning: its clock advances while it runs.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let s2 = stop.clone();
        let h = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::syscall(libc::SYS_gettid) } as u32)
                .unwrap();
            while !s2.load(std::sync::atomic::Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        let tid = rx.recv().unwrap();
        let c0 = thread_cpu_ns(tid).expect("sibling thread clock");
        let mut c1 = c0;
        while c1 == c0 {
            c1 = thread_cpu_ns(tid).expect("sibling thread clock");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        h.join().unwrap();
        assert!(c1 > c0);
        // A thread of another process (init): not readable.
        assert_eq!(thread_cpu_ns(1), None);
    }

    #[test]
    fn schedstat() {
        assert_eq!(
            parse_schedstat(b"123456789 2000 37\n"),
            Some((123456789, 2000, 37))
        );
        assert_eq!(parse_schedstat(b"1 2\n"), None);
        assert_eq!(parse_schedstat(b""), None);
    }

    #[test]
    fn stat_with_a_hostile_name() {
        let s = b"4242 (py thon) (x)) S 4200 4242 4242 0 -1 4194560 9120 0 0 0 150 37 0 0 20 0 12 0 3317 1000 100 18446744073709551615\n";
        let st = parse_stat(s).unwrap();
        assert_eq!(st.comm, b"py thon) (x)");
        assert_eq!(st.state, b'S');
        assert_eq!(st.ppid, 4200);
        assert_eq!(st.cpu_ticks, 187);
        assert_eq!(st.threads, 12);
        assert_eq!(stat_state(s), Some(b'S'));
        assert_eq!(parse_stat(b"4242 (python) S 1"), None);
        assert_eq!(parse_stat(b")(("), None);
    }

    #[test]
    fn syscall_file() {
        assert_eq!(
            parse_syscall(b"202 0x7f 0x80 0x0 0x0 0x0 0x0 0x7ffd 0x7f12\n"),
            Some(202)
        );
        assert_eq!(
            parse_syscall(b"0 0x3 0x7f00 0x1000 0x0 0x0 0x0 0x7ffd 0x7f12\n"),
            Some(0)
        );
        // Blocked outside any system call (a page fault): its stack and program counter.
        assert_eq!(
            parse_syscall(b"-1 0x7ffd3b2c 0x7f1234\n"),
            Some(gputrace_format::SYSCALL_NONE)
        );
        assert_eq!(parse_syscall(b"running\n"), None);
        assert_eq!(parse_syscall(b""), None);
    }

    #[test]
    fn io() {
        let s = b"rchar: 100\nwchar: 5\nsyscr: 1\nsyscw: 1\nread_bytes: 4096\nwrite_bytes: 8192\ncancelled_write_bytes: 0\n";
        assert_eq!(parse_io(s), Some((100, 4096, 8192)));
        assert_eq!(parse_io(b"wchar: 5\n"), None);
    }

    #[test]
    fn proc_stat() {
        let s = b"cpu  10 1 5 100 7 2 3 4 0 0\ncpu0 1 1 1 1 1 1 1 1 0 0\n";
        assert_eq!(parse_proc_stat(s), Some((21, 100, 7, 4)));
        assert_eq!(
            parse_proc_stat(b"cpu  10 1 5 100 7\n"),
            Some((16, 100, 7, 0))
        );
        assert_eq!(parse_proc_stat(b"intr 5\n"), None);
        assert_eq!(parse_proc_stat(b"cpu 1 2\n"), None);
    }

    #[test]
    fn psi() {
        let s = b"some avg10=0.00 avg60=0.10 avg300=0.00 total=12345\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=678\n";
        assert_eq!(parse_psi(s), Some((12345, 678)));
        assert_eq!(
            parse_psi(b"some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n"),
            Some((5, 0))
        );
        assert_eq!(parse_psi(b"nonsense\n"), None);
    }

    #[test]
    fn cgroup_files() {
        assert_eq!(
            parse_cpu_stat(b"usage_usec 500\nuser_usec 400\nsystem_usec 100\nnr_periods 0\nnr_throttled 0\nthrottled_usec 25\n"),
            Some((500, 25))
        );
        assert_eq!(parse_cpu_max(b"max 100000\n"), Some((0, 100000)));
        assert_eq!(parse_cpu_max(b"250000 100000\n"), Some((250000, 100000)));
        assert_eq!(parse_limit(b"max\n"), None);
        assert_eq!(parse_limit(b"-1\n"), None);
        assert_eq!(parse_limit(b"9223372036854771712\n"), None);
        assert_eq!(parse_limit(b"8589934592\n"), Some(8 << 30));
        assert_eq!(
            parse_cgroup_v2_path(b"12:cpu:/x\n0::/user.slice/job\n"),
            Some(&b"/user.slice/job"[..])
        );
    }

    #[test]
    fn children_and_numbers() {
        let mut v = vec![];
        parse_children(b"101 102 x 103 ", |p| v.push(p));
        assert_eq!(v, vec![101, 102, 103]);
        assert_eq!(parse_u32(b"4294967296"), None);
        assert_eq!(parse_u32(b""), None);
    }

    #[test]
    fn reads_this_process() {
        let f = ProcFile::open(c"/proc/self/stat").unwrap();
        let mut buf = [0u8; 1024];
        let st = parse_stat(f.read(&mut buf).unwrap()).unwrap();
        assert!(st.threads >= 1);
        let d = ProcDir::open(c"/proc/self/task").unwrap();
        let mut tids = vec![];
        assert!(d.numeric_entries(&mut buf, |t| tids.push(t)));
        assert!(tids.contains(&std::process::id()));
        // Read twice from the same descriptors: the same kind of answer.
        tids.clear();
        assert!(d.numeric_entries(&mut buf[..64], |t| tids.push(t)));
        assert!(tids.contains(&std::process::id()));
    }
}
