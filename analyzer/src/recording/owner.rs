//! Files this command makes beside another user's trace. Run as root (`sudo gputrace
//! attach PID`), it must not make files with root's rights in a directory another user
//! owns: that user could have put a link or a name there for root to follow. The file
//! is made with the directory owner's file-system identity instead, as that user could
//! have made it.

use std::path::Path;

/// Runs `f` with this thread's file-system user and group set to the owner of `dir`,
/// when this command runs as root and `dir` belongs to another user; as it is
/// otherwise. (`setfsuid`/`setfsgid` change the calling thread only.)
pub fn as_owner_of<T>(dir: &Path, f: impl FnOnce() -> T) -> T {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let owner = match std::fs::metadata(dir) {
        Ok(m) if root && m.uid() != 0 => (m.uid(), m.gid()),
        _ => return f(),
    };
    // SAFETY: setfsgid/setfsuid only change this thread's file-system identity, which
    // is set back below before anything else runs on it.
    let (old_gid, old_uid) = unsafe { (libc::setfsgid(owner.1), libc::setfsuid(owner.0)) };
    let r = f();
    // SAFETY: as above: back to the identity this thread had.
    unsafe {
        libc::setfsuid(old_uid as libc::uid_t);
        libc::setfsgid(old_gid as libc::gid_t);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn root_makes_files_in_another_users_directory_as_that_user() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root");
            return;
        }
        let dir = std::env::temp_dir().join(format!("gputrace-owner-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
        let made = as_owner_of(&dir, || std::fs::write(dir.join("f"), b"x"));
        made.unwrap();
        let m = std::fs::metadata(dir.join("f")).unwrap();
        assert_eq!((m.uid(), m.gid()), (65534, 65534));
        // This thread is root again afterwards.
        std::fs::write(dir.join("after"), b"x").unwrap();
        assert_eq!(std::fs::metadata(dir.join("after")).unwrap().uid(), 0);
        // A root-owned directory gets a root-owned file.
        std::os::unix::fs::chown(&dir, Some(0), Some(0)).unwrap();
        as_owner_of(&dir, || std::fs::write(dir.join("g"), b"x")).unwrap();
        assert_eq!(std::fs::metadata(dir.join("g")).unwrap().uid(), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
