//! `gputrace export` writes what the trace holds (command lines, paths, kernel names):
//! its files are private to their owner, as the traces are (mode 0600; directories it
//! makes 0700), whatever the umask, and a file it overwrites (`--force`) is made so
//! before anything is written to it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `gputrace` under umask 022 (files 0644 unless the command asks otherwise).
fn gputrace(args: &[&str]) -> (i32, String) {
    let o = Command::new("sh")
        .arg("-c")
        .arg("umask 022 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_gputrace"))
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run gputrace");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn example(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name);
    p.to_str().unwrap().to_string()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn export(format: &str, out: &Path, traces: &[&str], force: bool) {
    let mut args = vec!["export", "--format", format, "-o", out.to_str().unwrap()];
    if force {
        args.push("--force");
    }
    args.extend_from_slice(traces);
    let (code, err) = gputrace(&args);
    assert_eq!(code, 0, "export --format {format}: {err}");
}

/// Every file under `p` (or `p` itself) is 0600, every directory 0700.
fn assert_private(p: &Path) -> usize {
    if p.is_dir() {
        let m = mode(p);
        assert!(m == 0o700, "{}: mode {m:o}", p.display());
        let entries = std::fs::read_dir(p).unwrap();
        entries.map(|e| assert_private(&e.unwrap().path())).sum()
    } else {
        let m = mode(p);
        assert!(m == 0o600, "{}: mode {m:o}", p.display());
        1
    }
}

#[test]
fn exports_are_private() {
    let d = Dir(std::env::temp_dir().join(format!("gputrace-export-mode-{}", std::process::id())));
    std::fs::create_dir_all(&d.0).unwrap();
    let one = example("healthy.gtrace");
    let two = example("pageable_memcpy.gtrace");
    let cases: [(&str, &str, Vec<&str>); 5] = [
        ("perfetto", "t.pftrace", vec![&one]),
        ("perfetto", "job.pftrace", vec![&one, &two]),
        ("chrome", "t.json", vec![&one]),
        // Several processes: a directory of files, made with its parent.
        ("chrome", "new/job-chrome", vec![&one, &two]),
        ("parquet", "t-parquet", vec![&one]),
    ];
    for (format, name, traces) in &cases {
        let out = d.0.join(name);
        export(format, &out, traces, false);
        assert!(assert_private(&out) > 0, "{format}: nothing written");
    }
    assert_private(&d.0.join("new"));

    // Overwritten: a file that was readable by everyone is not any longer.
    let out = d.0.join("old.pftrace");
    std::fs::write(&out, b"old").unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o644)).unwrap();
    export("perfetto", &out, &[&one], true);
    assert_private(&out);
    assert!(std::fs::metadata(&out).unwrap().len() > 3);
}
