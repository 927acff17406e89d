//! Harness for the host sampler's end-to-end test (`tests/tests/host.rs`): compiles
//! `tests/fakes/host_app.c` once per test binary into the target directory (keyed by a
//! hash of its sources); it runs against the fake runtime of [`crate::Wheel`].

use crate::fakes_src;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

const SOURCES: &[&str] = &["host_app.c", "fake_cuda.h"];
const CFLAGS: &[&str] = &[
    "-std=gnu11",
    "-O1",
    "-g",
    "-Wall",
    "-Wextra",
    "-Werror=implicit-function-declaration",
    "-Werror=incompatible-pointer-types",
    "-Werror=int-conversion",
    "-Werror=return-type",
];

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".to_string())
}

/// The compiled `host_app`.
pub fn host_app() -> &'static PathBuf {
    static F: OnceLock<PathBuf> = OnceLock::new();
    F.get_or_init(|| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        CFLAGS.hash(&mut h);
        cc().hash(&mut h);
        for s in SOURCES {
            std::fs::read(fakes_src().join(s))
                .expect("read a fake's source")
                .hash(&mut h);
        }
        let exe = std::env::current_exe().expect("current_exe");
        let mut dir = exe.parent().expect("a directory").to_path_buf();
        if dir.file_name().is_some_and(|n| n == "deps") {
            dir.pop();
        }
        let root = dir.join("gputrace-fakes");
        let out = root
            .join(format!("host-{:016x}", h.finish()))
            .join("host_app");
        if out.is_file() {
            return out;
        }
        std::fs::create_dir_all(&root).expect("create the fakes directory");
        let tmp = root.join(format!(".build-host-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).expect("create a build directory");
        let src = fakes_src();
        let mut cmd = Command::new(cc());
        cmd.args(CFLAGS)
            .arg(format!("-I{}", src.display()))
            .arg("-o")
            .arg(tmp.join("host_app"))
            .arg(src.join("host_app.c"))
            .arg("-pthread")
            .arg("-ldl");
        let o = cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run the C compiler {:?}: {e}", cc()));
        assert!(
            o.status.success(),
            "compiling host_app.c failed ({cmd:?}):\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let final_dir = out.parent().unwrap().to_path_buf();
        if std::fs::rename(&tmp, &final_dir).is_err() {
            // Another process got there first; its build is as good as ours.
            let _ = std::fs::remove_dir_all(&tmp);
        }
        assert!(out.is_file(), "host_app missing after the build");
        out
    })
}
