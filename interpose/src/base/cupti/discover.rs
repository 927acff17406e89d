//! Finding the CUPTI library that matches the process's own CUDA runtime.
//!
//! Order: `GPUTRACE_CUPTI`; a libcupti the process already loaded; the libcupti next to
//! the libcudart the process loaded (PyTorch wheels keep both in
//! `site-packages/nvidia/cu13/lib`; CUDA 12 wheels keep it in `nvidia/cuda_cupti/lib`);
//! the CUDA toolkit; the loader's search path. Its major version must be the runtime's.

use crate::base::ffi::entry;
use std::ffi::CStr;
use std::path::{Path, PathBuf};

/// Paths of every object loaded in the process, in load order.
pub fn loaded_objects() -> Vec<PathBuf> {
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // A panic stops the walk (1); the objects listed so far are kept.
        entry!(1, {
            // SAFETY: `data` is the Vec passed below, borrowed by nothing else meanwhile.
            let out = unsafe { &mut *(data as *mut Vec<PathBuf>) };
            // SAFETY: the loader passes a valid `info` for the duration of the callback.
            let name = unsafe { (*info).dlpi_name };
            if !name.is_null() {
                // SAFETY: dlpi_name is a NUL-terminated string owned by the loader.
                let s = unsafe { CStr::from_ptr(name) };
                if !s.to_bytes().is_empty() {
                    use std::os::unix::ffi::OsStrExt;
                    out.push(PathBuf::from(std::ffi::OsStr::from_bytes(s.to_bytes())));
                }
            }
            0
        })
    }
    let mut out: Vec<PathBuf> = Vec::new();
    // SAFETY: the callback only reads loader-owned data and writes our Vec.
    unsafe { libc::dl_iterate_phdr(Some(cb), &mut out as *mut _ as *mut libc::c_void) };
    out
}

/// The major version in a soname such as `libcudart.so.13` or `libcudart.so.12.8.90`.
pub fn soname_major(path: &Path, stem: &str) -> Option<u32> {
    let name = path.file_name()?.to_str()?;
    let rest = name.strip_prefix(stem)?.strip_prefix(".so.")?;
    rest.split('.').next()?.parse().ok()
}

/// The CUDA runtime the process has loaded, if any: (path, major).
pub fn loaded_cudart(objs: &[PathBuf]) -> Option<(PathBuf, u32)> {
    objs.iter()
        .find_map(|p| soname_major(p, "libcudart").map(|m| (p.clone(), m)))
}

/// A candidate CUPTI library and why it was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub path: PathBuf,
    pub source: &'static str,
}

/// Every candidate, best first. `exists` is a parameter so tests can fake the file system.
pub fn candidates(
    explicit: Option<&Path>,
    objs: &[PathBuf],
    major: Option<u32>,
    env_cuda_home: Option<&Path>,
    exists: &dyn Fn(&Path) -> bool,
) -> Vec<Candidate> {
    let mut out = Vec::new();
    if let Some(p) = explicit {
        out.push(Candidate {
            path: p.to_path_buf(),
            source: gputrace_format::protocol::settings::CUPTI,
        });
        return out;
    }
    let want = |p: &Path| match major {
        Some(m) => soname_major(p, "libcupti") == Some(m),
        None => soname_major(p, "libcupti").is_some(),
    };
    for o in objs {
        if want(o) {
            out.push(Candidate {
                path: o.clone(),
                source: "already loaded by the process",
            });
        }
    }
    let names: Vec<String> = match major {
        Some(m) => vec![format!("libcupti.so.{m}")],
        None => vec!["libcupti.so.13".into(), "libcupti.so.12".into()],
    };
    if let Some((rt, _)) = loaded_cudart(objs) {
        if let Some(dir) = rt.parent() {
            for n in &names {
                for d in [dir.to_path_buf(), dir.join("../../cuda_cupti/lib")] {
                    let p = d.join(n);
                    if exists(&p) {
                        out.push(Candidate {
                            path: p,
                            source: "next to the process's libcudart",
                        });
                    }
                }
            }
        }
    }
    let mut roots: Vec<PathBuf> = Vec::new();
    if let Some(h) = env_cuda_home {
        roots.push(h.to_path_buf());
    }
    roots.push(PathBuf::from("/usr/local/cuda"));
    if let Some(m) = major {
        for minor in (0..=9).rev() {
            roots.push(PathBuf::from(format!("/usr/local/cuda-{m}.{minor}")));
        }
    }
    for r in &roots {
        for n in &names {
            for sub in ["extras/CUPTI/lib64", "lib64", "targets/x86_64-linux/lib"] {
                let p = r.join(sub).join(n);
                if exists(&p) {
                    out.push(Candidate {
                        path: p,
                        source: "CUDA toolkit",
                    });
                }
            }
        }
    }
    for n in &names {
        out.push(Candidate {
            path: PathBuf::from(n),
            source: "loader search path",
        });
    }
    out
}

/// The absolute path of the object holding `addr` (an address only looked up, never read).
pub fn object_path_of(addr: *const libc::c_void) -> Option<PathBuf> {
    let p = object_path_as_loaded(addr)?;
    std::fs::canonicalize(&p).ok().or(Some(p))
}

/// The path the object holding `addr` was loaded under, as given to the loader (links
/// not followed).
pub fn object_path_as_loaded(addr: *const libc::c_void) -> Option<PathBuf> {
    cupti_sys::loader::object_file(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soname_versions() {
        assert_eq!(
            soname_major(Path::new("/x/libcudart.so.13"), "libcudart"),
            Some(13)
        );
        assert_eq!(
            soname_major(Path::new("libcudart.so.12.8.90"), "libcudart"),
            Some(12)
        );
        assert_eq!(soname_major(Path::new("libcudart.so"), "libcudart"), None);
        assert_eq!(
            soname_major(Path::new("libcudart_static.a"), "libcudart"),
            None
        );
    }

    #[test]
    fn explicit_path_wins_alone() {
        let c = candidates(
            Some(Path::new("/opt/my/libcupti.so.13")),
            &[PathBuf::from("/a/libcupti.so.13")],
            Some(13),
            None,
            &|_| true,
        );
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].source, "GPUTRACE_CUPTI");
    }

    #[test]
    fn order_loaded_then_next_to_cudart_then_toolkit_then_loader() {
        let objs = vec![
            PathBuf::from("/usr/lib/libc.so.6"),
            PathBuf::from("/site/nvidia/cu13/lib/libcudart.so.13"),
            PathBuf::from("/other/libcupti.so.12"),
        ];
        let c = candidates(None, &objs, Some(13), None, &|p| {
            p == Path::new("/site/nvidia/cu13/lib/libcupti.so.13")
                || p == Path::new("/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13")
        });
        let paths: Vec<_> = c.iter().map(|c| c.path.to_str().unwrap()).collect();
        assert_eq!(
            paths,
            vec![
                "/site/nvidia/cu13/lib/libcupti.so.13",
                "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13",
                "libcupti.so.13"
            ],
            "a libcupti of the wrong major version is never picked"
        );
    }

    #[test]
    fn this_process_objects_are_listed() {
        let objs = loaded_objects();
        assert!(objs.iter().any(|p| p.to_string_lossy().contains("libc.so")));
    }
}
