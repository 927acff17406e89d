//! `gputrace run -- CMD`: run a command with the preload library and collect its traces.

use gputrace_format::protocol::{self, settings};
use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot find libgputrace.so (looked in: {0}); set {lib} to its path", lib = settings::LIB)]
    NoLibrary(String),
    #[error("cannot create the trace directory {0}: {1}")]
    Dir(PathBuf, std::io::Error),
    #[error("cannot start {0:?}: {1}")]
    Spawn(OsString, std::io::Error),
}

/// Where the preload library is: GPUTRACE_LIB, else next to this binary, else ../lib.
pub fn find_library(explicit: Option<PathBuf>, exe: Option<PathBuf>) -> Result<PathBuf, RunError> {
    let mut looked = Vec::new();
    if let Some(p) = explicit {
        if p.is_file() {
            return Ok(std::fs::canonicalize(&p).unwrap_or(p));
        }
        looked.push(p);
    }
    if let Some(dir) = exe.as_ref().and_then(|e| e.parent()) {
        for c in [
            dir.join("libgputrace.so"),
            dir.join("../lib/libgputrace.so"),
        ] {
            if c.is_file() {
                return Ok(std::fs::canonicalize(&c).unwrap_or(c));
            }
            looked.push(c);
        }
    }
    Err(RunError::NoLibrary(
        looked
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    ))
}

fn traces_in(dir: &Path) -> HashSet<PathBuf> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| protocol::is_trace_file(p))
                .collect()
        })
        .unwrap_or_default()
}

pub struct RunOutcome {
    /// The command's exit code (128 + signal number if it was killed).
    pub code: i32,
    /// Trace files the run produced, sorted.
    pub traces: Vec<PathBuf>,
}

/// Runs `cmd` with the library preloaded; traces go to `dir`.
pub fn run(
    lib: &Path,
    dir: &Path,
    cmd: &[OsString],
    extra_env: &[(String, String)],
) -> Result<RunOutcome, RunError> {
    std::fs::create_dir_all(dir).map_err(|e| RunError::Dir(dir.to_path_buf(), e))?;
    let dir = std::fs::canonicalize(dir).unwrap_or(dir.to_path_buf());
    let before = traces_in(&dir);
    let mut preload = OsString::from(lib.as_os_str());
    if let Some(old) = std::env::var_os("LD_PRELOAD") {
        if !old.is_empty() {
            preload.push(":");
            preload.push(old);
        }
    }
    let mut c = Command::new(&cmd[0]);
    c.args(&cmd[1..])
        .env("LD_PRELOAD", preload)
        .env(settings::DIR, &dir)
        .env(protocol::CUDA_INJECTION_VAR, lib)
        .env(protocol::NVTX_INJECTION_VAR, lib);
    for (k, v) in extra_env {
        c.env(k, v);
    }
    // While the command runs, Ctrl-C is for it: we wait and then report.
    // SAFETY: setting a signal disposition; restored below.
    let old_int = unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) };
    let status = c.status();
    // SAFETY: restores the previous disposition.
    unsafe { libc::signal(libc::SIGINT, old_int) };
    let status = status.map_err(|e| RunError::Spawn(cmd[0].clone(), e))?;
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    let mut traces: Vec<PathBuf> = traces_in(&dir).difference(&before).cloned().collect();
    traces.sort();
    Ok(RunOutcome { code, traces })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_lookup_reports_where_it_looked() {
        let err = find_library(
            Some(PathBuf::from("/nonexistent/libgputrace.so")),
            Some(PathBuf::from("/also/not/gputrace")),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("/nonexistent/libgputrace.so"), "{err}");
        assert!(err.contains("/also/not/libgputrace.so"), "{err}");
        assert!(err.contains("GPUTRACE_LIB"), "{err}");
    }

    #[test]
    fn run_reports_exit_code_and_new_traces_only() {
        let dir = std::env::temp_dir().join(format!("gputrace-run-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("old.gtrace"), b"x").unwrap();
        // /bin/sh as the "library" path: LD_PRELOAD of a non-library only warns.
        let out = run(
            Path::new("/nonexistent-lib.so"),
            &dir,
            &["sh".into(), "-c".into(), "echo > new.gtrace; exit 7".into()],
            &[],
        );
        let out = out.unwrap();
        assert_eq!(out.code, 7);
        assert!(
            out.traces.is_empty(),
            "a file made in the cwd is not in the trace dir"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
