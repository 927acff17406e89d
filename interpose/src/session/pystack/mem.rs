//! Reads of the interpreter's memory that cannot fault: `process_vm_readv` on our own
//! process. The kernel copies what is mapped and answers EFAULT for what is not, so a
//! frame freed under us, a stale pointer or a wrong offset gives a failed read, never
//! a SIGSEGV in the program. (A signal handler with a jump out would be cheaper, but it
//! would fight the program's own SIGSEGV handling; a pipe write would work too, at the
//! same cost of one system call and a file descriptor held.)
//!
//! The kernel lets a thread group read itself whatever ptrace policy is in force; a
//! seccomp filter may still refuse the call (EPERM, ENOSYS), which the probe at start
//! finds.

use std::sync::atomic::{AtomicI32, Ordering};

/// Our pid, cached (getpid is a system call); reset in a forked child.
static PID: AtomicI32 = AtomicI32::new(0);

fn pid() -> i32 {
    let p = PID.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: getpid has no preconditions.
    let p = unsafe { libc::getpid() };
    PID.store(p, Ordering::Relaxed);
    p
}

/// In a forked child: the cached pid is the parent's.
pub fn reset_after_fork() {
    PID.store(0, Ordering::Relaxed);
}

/// Fills `buf` from our own address `addr`. `Err(errno)` if any of it could not be
/// read (EFAULT: not mapped). Changes errno: callers on the program's threads save it.
#[inline]
pub fn read(addr: u64, buf: &mut [u8]) -> Result<(), i32> {
    if addr == 0 {
        return Err(libc::EFAULT);
    }
    if buf.is_empty() {
        return Ok(());
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` describes `buf`, which we own mutably; the remote range is only
    // read by the kernel, which checks it.
    let n = unsafe { libc::process_vm_readv(pid(), &local, 1, &remote, 1, 0) };
    if n == buf.len() as isize {
        Ok(())
    } else if n < 0 {
        Err(crate::base::ffi::errno())
    } else {
        Err(libc::EFAULT)
    }
}

/// Fills `a` from our own address `at_a` and `b` from `at_b` in one system call.
/// Returns how many of the two were read whole (0, 1 or 2: the kernel stops at the
/// first that cannot be read), or the errno of a refusal.
pub fn read2(at_a: u64, a: &mut [u8], at_b: u64, b: &mut [u8]) -> Result<usize, i32> {
    if at_a == 0 {
        return Ok(0);
    }
    let iov = |p: *mut u8, n: usize| libc::iovec {
        iov_base: p as *mut libc::c_void,
        iov_len: n,
    };
    let local = [iov(a.as_mut_ptr(), a.len()), iov(b.as_mut_ptr(), b.len())];
    let remote = [
        iov(at_a as usize as *mut u8, a.len()),
        iov(at_b as usize as *mut u8, b.len()),
    ];
    let count = if at_b == 0 || b.is_empty() { 1 } else { 2 };
    // SAFETY: each local iovec describes a buffer we own mutably; the remote ranges are
    // only read, by the kernel, which checks them.
    let n =
        unsafe { libc::process_vm_readv(pid(), local.as_ptr(), count, remote.as_ptr(), count, 0) };
    if n < 0 {
        let e = crate::base::ffi::errno();
        return if e == libc::EFAULT { Ok(0) } else { Err(e) };
    }
    let n = n as usize;
    Ok(if n >= a.len() + b.len() && count == 2 {
        2
    } else if n >= a.len() {
        1
    } else {
        0
    })
}

/// A little-endian u64 at `off` of `b` (0 if out of bounds).
#[inline]
pub fn u64_at(b: &[u8], off: usize) -> u64 {
    b.get(off..off + 8)
        .map(|s| u64::from_le_bytes(s.try_into().unwrap_or([0; 8])))
        .unwrap_or(0)
}

/// A little-endian i32 at `off` of `b` (0 if out of bounds).
#[inline]
pub fn i32_at(b: &[u8], off: usize) -> i32 {
    b.get(off..off + 4)
        .map(|s| i32::from_le_bytes(s.try_into().unwrap_or([0; 4])))
        .unwrap_or(0)
}

/// The u64 at our own address `addr`.
#[inline]
pub fn read_u64(addr: u64) -> Result<u64, i32> {
    let mut b = [0u8; 8];
    read(addr, &mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// Whether the kernel lets us read our own memory this way: Ok, or the errno of the
/// refusal.
pub fn probe() -> Result<(), i32> {
    let x: u64 = 0x5eed_f00d_0bad_cafe;
    let got = read_u64(&x as *const u64 as u64)?;
    if got == x {
        Ok(())
    } else {
        Err(libc::EIO)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_is_mapped_and_refuses_what_is_not() {
        probe().unwrap();
        let v: Vec<u8> = (0..100).collect();
        let mut b = [0u8; 10];
        read(v.as_ptr() as u64 + 5, &mut b).unwrap();
        assert_eq!(b, [5, 6, 7, 8, 9, 10, 11, 12, 13, 14]);
        assert_eq!(read(0, &mut b), Err(libc::EFAULT));
        assert_eq!(read(8, &mut b), Err(libc::EFAULT));
        // A page that is mapped and then unmapped: the read fails, no signal.
        // SAFETY: a fresh anonymous mapping, unmapped before it is read.
        let p = unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            libc::munmap(p, 4096);
            p
        };
        assert_eq!(read(p as u64, &mut b), Err(libc::EFAULT));
        let (mut x, mut y) = ([0u8; 4], [0u8; 3]);
        assert_eq!(
            read2(v.as_ptr() as u64, &mut x, v.as_ptr() as u64 + 50, &mut y),
            Ok(2)
        );
        assert_eq!((x, y), ([0, 1, 2, 3], [50, 51, 52]));
        assert_eq!(read2(v.as_ptr() as u64, &mut x, p as u64, &mut y), Ok(1));
        assert_eq!(read2(p as u64, &mut x, v.as_ptr() as u64, &mut y), Ok(0));
        assert_eq!(u64_at(&[1, 0, 0, 0, 0, 0, 0, 0, 9], 0), 1);
        assert_eq!(u64_at(&[1, 2, 3], 0), 0);
        assert_eq!(i32_at(&[0xff, 0xff, 0xff, 0xff], 0), -1);
    }
}
