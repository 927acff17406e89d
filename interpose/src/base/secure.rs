//! Secure execution: a setuid, setgid or file-capability program runs with the kernel's
//! `AT_SECURE` set, and an unprivileged user chose its environment. The library then
//! stays inert: it reads no setting, loads nothing from a path the environment names,
//! creates no file or directory and sets no variable (glibc's loader ignores
//! `LD_LIBRARY_PATH` there for the same reason). This module is the one place that
//! rule is asked; every environment variable that names a path is read through
//! [`path_var`].

use std::ffi::OsString;
use std::path::PathBuf;

/// Whether the process runs in secure-execution mode (the loader's rule, asked once
/// for the library's loads and its settings alike).
pub fn secure_execution() -> bool {
    cupti_sys::loader::secure_execution()
}

fn var_if(allowed: bool, name: &str) -> Option<OsString> {
    allowed.then(|| std::env::var_os(name)).flatten()
}

/// An environment variable that names a path (a library to load, a directory to write
/// in): `None` under secure execution, and when unset or empty.
pub fn path_var(name: &str) -> Option<PathBuf> {
    path_var_if(!secure_execution(), name)
}

fn path_var_if(allowed: bool, name: &str) -> Option<PathBuf> {
    var_if(allowed, name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Every environment variable as UTF-8 pairs, or none at all under secure execution.
pub fn vars() -> Vec<(String, String)> {
    vars_if(!secure_execution())
}

fn vars_if(allowed: bool) -> Vec<(String, String)> {
    if !allowed {
        return Vec::new();
    }
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ordinary_process_reads_its_environment() {
        // The test binary is not setuid: AT_SECURE is 0.
        assert!(!secure_execution());
        std::env::set_var("GPUTRACE_SECURE_UNIT_TEST", "/x");
        assert_eq!(
            path_var("GPUTRACE_SECURE_UNIT_TEST"),
            Some(PathBuf::from("/x"))
        );
        std::env::set_var("GPUTRACE_SECURE_UNIT_TEST", "");
        assert_eq!(path_var("GPUTRACE_SECURE_UNIT_TEST"), None);
    }

    #[test]
    fn secure_execution_reads_nothing() {
        std::env::set_var("GPUTRACE_SECURE_UNIT_TEST2", "/y");
        assert!(path_var_if(true, "GPUTRACE_SECURE_UNIT_TEST2").is_some());
        assert_eq!(path_var_if(false, "GPUTRACE_SECURE_UNIT_TEST2"), None);
        assert_eq!(var_if(false, "GPUTRACE_SECURE_UNIT_TEST2"), None);
        assert!(!vars_if(true).is_empty());
        assert!(vars_if(false).is_empty());
    }
}
