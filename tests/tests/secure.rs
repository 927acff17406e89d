//! Secure execution: a set-user-ID program with the library preloaded, every path
//! setting pointed at a library that marks its loading, run by an unprivileged user.
//! The library must load nothing, create nothing and set nothing; the same program
//! without the set-user-ID bit shows that the settings would have been obeyed.

use gputrace_tests::{compile, fakes_src, Cuda, Layout, Wheel};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the loader takes preloaded objects from for a set-user-ID program: the
/// standard library directories only, and only objects with the set-user-ID bit.
const TRUSTED_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/usr/lib",
];

/// A copy of libgputrace.so in a trusted directory, removed on drop.
struct Installed(PathBuf);

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()));
}

struct Seen {
    stdout: String,
    stderr: String,
    ok: bool,
}

const NOBODY: u32 = 65534;

fn run_as_nobody(program: &Path, cudart: &Path, env: &[(&str, String)]) -> Seen {
    let mut c = Command::new(program);
    c.arg(cudart).env_clear().env("PATH", "/usr/bin:/bin");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", program.display()));
    Seen {
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        ok: o.status.success(),
    }
}

#[test]
fn a_setuid_program_loads_nothing_and_creates_nothing() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to make a set-user-ID program and run it as another user");
        return;
    }
    let Some(trusted) = TRUSTED_DIRS.iter().map(Path::new).find(|d| d.is_dir()) else {
        eprintln!("skipped: no standard library directory to preload from");
        return;
    };
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let root = w.dir.path();
    // Everything the other user runs or reads is readable by it; `open/` is writable.
    for d in root.ancestors().take_while(|d| *d != Path::new("/tmp")) {
        chmod(d, 0o755);
    }
    let mut d = w.cudart.parent();
    while let Some(p) = d.filter(|p| p.starts_with(root) && *p != root) {
        chmod(p, 0o755);
        d = p.parent();
    }
    let open = root.join("open");
    std::fs::create_dir(&open).unwrap();
    chmod(&open, 0o777);
    let marker = open.join("loaded");
    let marker_lib = root.join("marker-lib.so");
    compile(
        &marker_lib,
        "marker_lib.c",
        &[
            "-fPIC".into(),
            "-shared".into(),
            format!("-DMARKER=\"{}\"", marker.display()),
        ],
    );
    let app = root.join("secure_app");
    compile(&app, "secure_app.c", &[]);
    assert!(fakes_src().join("secure_app.c").is_file());
    let suid_app = root.join("secure_app_suid");
    std::fs::copy(&app, &suid_app).unwrap();
    chmod(&suid_app, 0o4755);

    let name = format!("libgputrace-sectest-{}.so", std::process::id());
    let installed = Installed(trusted.join(&name));
    std::fs::copy(gputrace_tests::libgputrace(), &installed.0).unwrap();
    chmod(&installed.0, 0o4755);

    let trace_dir = open.join("traces/deeper");
    let runtime_dir = open.join("run");
    let env = |preload: String| {
        vec![
            ("LD_PRELOAD", preload),
            // The driver would load this library at cuInit if asked: asked here.
            ("CUDA_INJECTION64_PATH", installed.0.display().to_string()),
            ("GPUTRACE_CUPTI", marker_lib.display().to_string()),
            ("GPUTRACE_NVML", marker_lib.display().to_string()),
            ("GPUTRACE_DIR", trace_dir.display().to_string()),
            ("GPUTRACE_MODE", "trace".to_string()),
            ("GPUTRACE_DEBUG", "1".to_string()),
            ("CUDA_HOME", open.display().to_string()),
            ("XDG_RUNTIME_DIR", runtime_dir.display().to_string()),
        ]
    };

    // Set-user-ID: the loader preloads the library by its bare name from a trusted
    // directory; it must stay inert.
    let s = run_as_nobody(&suid_app, &w.cudart, &env(name.clone()));
    assert!(s.ok, "the program failed: {} {}", s.stdout, s.stderr);
    assert_eq!(
        s.stdout.trim(),
        "secure=1 gputrace=1 marker=0 nvtx_var=0",
        "stderr: {}",
        s.stderr
    );
    assert!(!marker.exists(), "a library named by a setting was loaded");
    assert!(
        !trace_dir.exists() && !open.join("traces").exists(),
        "a directory was created"
    );
    assert!(!runtime_dir.exists(), "a socket directory was created");
    assert!(
        !s.stderr.contains("gputrace:"),
        "the library spoke under secure execution: {}",
        s.stderr
    );

    // The same program without the bit: the settings are obeyed, so the checks above
    // could have failed.
    let s = run_as_nobody(&app, &w.cudart, &env(installed.0.display().to_string()));
    assert!(s.ok, "the program failed: {} {}", s.stdout, s.stderr);
    assert!(
        // (The marker library may be unloaded again by now: its file is the proof.)
        s.stdout.starts_with("secure=0 gputrace=1 "),
        "{} {}",
        s.stdout,
        s.stderr
    );
    assert!(marker.exists());
    assert!(trace_dir.is_dir(), "{}", s.stderr);
}
