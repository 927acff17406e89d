//! Harness for the symbol-hook tests (`tests/tests/hooks.rs`).
//!
//! The fakes (`tests/fakes/hook_*.c`, behaviour in `hook_fakes.h`): `hook_cudart.c`
//! is a libcudart.so.13 and `hook_nccl.c` a libnccl.so.2 with fixed, checkable
//! results; `hook_ext.c` is a "Python extension" linked against both (DT_NEEDED, RPATH
//! `$ORIGIN`) that makes every hooked call with known arguments and checks each result
//! and errno against what the fake says it returned; `hook_app.c` dlopens it
//! RTLD_LOCAL, as Python does, and runs one scenario. They are compiled once per test
//! binary into the target directory (keyed by a hash of their sources).
//!
//! Runs have no CUPTI (`GPUTRACE_CUPTI=/nonexistent`): the library traces what the
//! symbol hooks see and records a blind state.

use gputrace_format::{self as fmt, Event, TraceData};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::OnceLock;

use crate::{fakes_src, libgputrace, TempDir};

/// The compiled symbol-hook fakes.
pub struct HookFakes {
    pub dir: PathBuf,
    pub ext: PathBuf,
    pub app: PathBuf,
}

const SOURCES: &[&str] = &[
    "hook_fakes.h",
    "hook_cudart.c",
    "hook_nccl.c",
    "hook_ext.c",
    "hook_app.c",
];

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

/// `target/debug` (or release) of this test binary.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().expect("test binary has a directory");
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().expect("deps has a parent").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

fn compile(out: &Path, src: &str, extra: &[&str]) {
    let dir = fakes_src();
    let mut cmd = Command::new(cc());
    cmd.args(CFLAGS)
        .arg(format!("-I{}", dir.display()))
        .arg("-o")
        .arg(out)
        .arg(dir.join(src))
        .args(extra)
        .args(["-ldl", "-lpthread"]);
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {:?}: {e}", cc()));
    assert!(
        o.status.success(),
        "compiling {src} failed ({cmd:?}):\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Compiles the fakes once per process (and reuses an identical earlier build).
pub fn hook_fakes() -> &'static HookFakes {
    static F: OnceLock<HookFakes> = OnceLock::new();
    F.get_or_init(|| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        CFLAGS.hash(&mut h);
        cc().hash(&mut h);
        for s in SOURCES {
            std::fs::read(fakes_src().join(s))
                .expect("read a fake's source")
                .hash(&mut h);
        }
        let root = profile_dir().join("gputrace-fakes");
        let dir = root.join(format!("hooks-{:016x}", h.finish()));
        let f = HookFakes {
            ext: dir.join("hook_ext.so"),
            app: dir.join("hook_app"),
            dir: dir.clone(),
        };
        if f.app.is_file() {
            return f;
        }
        std::fs::create_dir_all(&root).expect("create the fakes directory");
        let tmp = root.join(format!(".build-hooks-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).expect("create a build directory");
        let lib = |soname: &str| {
            [
                "-fPIC".to_string(),
                "-shared".to_string(),
                "-fvisibility=hidden".to_string(),
                format!("-Wl,-soname,{soname}"),
            ]
        };
        for (out, src) in [
            ("libcudart.so.13", "hook_cudart.c"),
            ("libnccl.so.2", "hook_nccl.c"),
        ] {
            let flags = lib(out);
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            compile(&tmp.join(out), src, &flags);
        }
        let link = format!("-L{}", tmp.display());
        compile(
            &tmp.join("hook_ext.so"),
            "hook_ext.c",
            &[
                "-fPIC",
                "-shared",
                "-fvisibility=hidden",
                &link,
                "-l:libcudart.so.13",
                "-l:libnccl.so.2",
                "-Wl,-rpath,$ORIGIN",
            ],
        );
        compile(&tmp.join("hook_app"), "hook_app.c", &[]);
        if std::fs::rename(&tmp, &dir).is_err() {
            // Another test binary built the same sources first.
            let _ = std::fs::remove_dir_all(&tmp);
        }
        assert!(f.app.is_file(), "fakes missing in {}", dir.display());
        f
    })
}

/// One run of `hook_app` under the preload library.
pub struct HookRun {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub traces: Vec<PathBuf>,
    /// Holds the trace directory.
    pub dir: TempDir,
}

impl HookRun {
    /// Panics, showing everything, unless the app exited with status 0 (every call's
    /// result and errno were the fake's).
    pub fn assert_ok(&self) -> &Self {
        assert!(
            self.status.success(),
            "hook_app failed: {}\nstdout:\n{}\nstderr:\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
        self
    }

    /// The `tid N` the scenario printed (its main thread).
    pub fn tid(&self) -> u32 {
        self.value("tid")
            .and_then(|v| v.parse().ok())
            .expect("the scenario prints its tid")
    }

    /// The text after `key ` on the first stdout line that starts with it.
    pub fn value(&self, key: &str) -> Option<&str> {
        self.stdout
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
    }

    pub fn gputrace_lines(&self) -> Vec<&str> {
        crate::gputrace_lines(&self.stderr)
    }

    /// The one trace the run wrote, read whole and checked.
    pub fn trace(&self) -> HookTrace {
        assert_eq!(
            self.traces.len(),
            1,
            "expected one trace, found {:?}\nstderr:\n{}",
            self.traces,
            self.stderr
        );
        HookTrace::read(&self.traces[0])
    }
}

/// Runs `hook_app EXT scenario args` with libgputrace preloaded (no CUPTI) and `env`.
pub fn run_scenario(scenario: &str, args: &[&str], env: &[(&str, &str)]) -> HookRun {
    let f = hook_fakes();
    let dir = TempDir::new(&format!("hooks-{scenario}"));
    let traces = dir.path().join("traces");
    let mut cmd = Command::new(&f.app);
    cmd.arg(&f.ext)
        .arg(scenario)
        .args(args)
        .current_dir(dir.path())
        .env("LD_PRELOAD", libgputrace())
        .env("GPUTRACE_DIR", &traces)
        .env("GPUTRACE_CUPTI", "/nonexistent")
        // A slow debug build must still finish writing at exit.
        .env("GPUTRACE_EXIT_WAIT_MS", "60000")
        // Control sockets (dormant runs) stay in the test's directory.
        .env(
            gputrace_format::protocol::RUNTIME_DIR_VAR,
            dir.path().join("run"),
        )
        .env_remove("CUDA_INJECTION64_PATH")
        .env_remove("NVTX_INJECTION64_PATH")
        .env_remove("GPUTRACE_MODE")
        .env_remove("GPUTRACE_HOOKS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", f.app.display()));
    let mut found: Vec<PathBuf> = std::fs::read_dir(&traces)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "gtrace"))
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    HookRun {
        status: o.status,
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        traces: found,
        dir,
    }
}

/// A trace, as raw events and as the analyzer's tables.
pub struct HookTrace {
    pub data: TraceData,
    pub t: gputrace_analyzer::Trace,
}

impl HookTrace {
    /// Reads a trace; checks it is whole and that NVTX text ids are defined before use.
    pub fn read(path: &Path) -> HookTrace {
        let data = fmt::read_all(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let s = &data.stats;
        assert!(!s.truncated_tail && s.corrupt_at.is_none(), "{s:?}");
        assert_eq!((s.bad_events, s.unknown_events), (0, 0), "{s:?}");
        let mut defined = std::collections::HashSet::new();
        for e in &data.events {
            match e {
                Event::Str { id, .. } => {
                    defined.insert(*id);
                }
                Event::Nvtx(n) if n.text != 0 => {
                    assert!(
                        defined.contains(&n.text),
                        "NVTX text {} used before its Str",
                        n.text
                    )
                }
                _ => {}
            }
        }
        let t = gputrace_analyzer::Trace::load(path).expect("the analyzer reads the trace");
        HookTrace { data, t }
    }

    /// Records lost to full rings.
    pub fn ring_drops(&self) -> u64 {
        self.t.dropped(fmt::DROP_RING)
    }

    pub fn states(&self) -> Vec<fmt::CollectorState> {
        self.t
            .states
            .iter()
            .filter_map(|s| fmt::CollectorState::from_u8(s.1))
            .collect()
    }
}

/// FNV-1a over `parts`, as the hooks compute communicator ids.
pub fn fnv(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in *p {
            h ^= *b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h.max(1)
}

/// The bytes of the fake's n-th ncclUniqueId (seed n, from 1).
pub fn unique_id(seed: u32) -> Vec<u8> {
    (0..128u32)
        .map(|i| (seed.wrapping_mul(31).wrapping_add(i)) as u8)
        .collect()
}

/// The id of the `n`-th split of `parent` with `color`, as the hooks compute it.
pub fn split_id(parent: u64, n: u64, color: i32) -> u64 {
    fnv(&[
        b"split",
        &parent.to_le_bytes(),
        &n.to_le_bytes(),
        &color.to_le_bytes(),
    ])
}
