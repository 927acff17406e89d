//! Harness for gputrace's end-to-end tests, which need no GPU.
//!
//! The C fakes in `tests/fakes/` stand in for NVIDIA's libraries: `fake_cupti.c` is a
//! libcupti (13.0 records, or 12.0 ones with `-DFAKE_CUPTI_12`), `fake_cudart.c` is a
//! libcudart that also plays the driver (it honours `CUDA_INJECTION64_PATH` in its
//! first call, as `cuInit` does), and `app.c` is a program that dlopens the runtime and
//! runs a named scenario. This crate compiles them with the system C compiler (`cc`,
//! or `$CC`), lays them out like a PyTorch wheel in a fresh directory per test, runs
//! the app with `LD_PRELOAD=libgputrace.so` and reads the traces it leaves.
//!
//! `libgputrace.so` is `$GPUTRACE_LIB` when set, else the one `cargo build -p
//! gputrace-interpose` left in this test binary's target directory; when that is
//! missing or older than the library's sources, the harness runs that build itself,
//! once per test binary. The `gputrace` command, for the tests that run it, is
//! `$GPUTRACE_BIN` or the target directory's, found and built the same way.

pub mod hooks;
pub mod host;

use gputrace_format::protocol::{self, settings};
use gputrace_format::{self as fmt, CollectorState, Event, TraceData};
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Which CUDA major version the fakes pretend to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cuda {
    V13,
    V12,
}

impl Cuda {
    pub fn major(self) -> u32 {
        match self {
            Cuda::V13 => 13,
            Cuda::V12 => 12,
        }
    }

    /// `cuptiGetVersion` of the fake libcupti (13.0 and 12.0 values).
    pub fn cupti_api_version(self) -> u32 {
        match self {
            Cuda::V13 => 130001,
            Cuda::V12 => 18,
        }
    }

    pub fn cudart_name(self) -> String {
        format!("libcudart.so.{}", self.major())
    }

    pub fn cupti_name(self) -> String {
        format!("libcupti.so.{}", self.major())
    }
}

/// Where the libraries go, as in the wheels PyTorch depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `nvidia/cu13/lib/` holds both libcudart and libcupti (CUDA 13 wheels).
    Flat,
    /// `nvidia/cuda_runtime/lib/libcudart` and `nvidia/cuda_cupti/lib/libcupti`
    /// (CUDA 12 wheels).
    Split,
    /// Like `Flat`, without libcupti.
    NoCupti,
}

// ---------------------------------------------------------------------------------
// Directories

/// A directory removed on drop; kept (and named on stderr) when `GPUTRACE_TESTS_KEEP`
/// is set, to look at afterwards.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path = std::env::temp_dir().join(format!(
            "gputrace-test-{tag}-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).expect("create a temporary directory");
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os(settings::TESTS_KEEP).is_some() {
            eprintln!("(kept {})", self.path.display());
            return;
        }
        if std::thread::panicking() {
            eprintln!(
                "(set {}=1 to keep {})",
                settings::TESTS_KEEP,
                self.path.display()
            );
        }
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The profile directory of this test binary (`target/debug`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary has a directory");
    if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().expect("deps has a parent").to_path_buf()
    } else {
        deps.to_path_buf()
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is inside the workspace")
        .to_path_buf()
}

pub fn fakes_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fakes")
}

// ---------------------------------------------------------------------------------
// libgputrace.so

/// The preload library under test.
pub fn libgputrace() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        if let Some(p) = std::env::var_os(settings::LIB) {
            let p = PathBuf::from(p);
            assert!(
                p.is_file(),
                "{}={} is not a file",
                settings::LIB,
                p.display()
            );
            return std::fs::canonicalize(&p).unwrap_or(p);
        }
        let dir = profile_dir();
        let lib = dir.join("libgputrace.so");
        if is_stale(&lib, &["interpose", "format", "cupti-sys", "env"]) {
            cargo_build(&dir, &["-p", "gputrace-interpose"]);
        }
        assert!(
            lib.is_file(),
            "{} is missing; run `cargo build -p gputrace-interpose`",
            lib.display()
        );
        lib
    })
}

/// The `gputrace` command under test: `$GPUTRACE_BIN` when set (an installed copy),
/// else the one in this test binary's target directory, beside its libgputrace.so.
pub fn gputrace_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("GPUTRACE_BIN") {
            let p = PathBuf::from(p);
            assert!(p.is_file(), "GPUTRACE_BIN={} is not a file", p.display());
            return p;
        }
        let dir = profile_dir();
        let bin = dir.join("gputrace");
        if is_stale(&bin, &["analyzer", "format", "env"]) {
            cargo_build(&dir, &["-p", "gputrace-analyzer", "--bin", "gputrace"]);
        }
        assert!(
            bin.is_file(),
            "{} is missing; run `cargo build -p gputrace-analyzer`",
            bin.display()
        );
        bin
    })
}

/// Newest modification time of the files under `dir` (recursively).
fn newest_mtime(dir: &Path) -> Option<std::time::SystemTime> {
    let mut newest = None;
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        let t = if p.is_dir() {
            newest_mtime(&p)
        } else {
            e.metadata().and_then(|m| m.modified()).ok()
        };
        newest = newest.max(t);
    }
    newest
}

/// Missing, or older than the sources of `crates` it is built from (so a test never
/// runs an old build without saying so).
fn is_stale(built: &Path, crates: &[&str]) -> bool {
    let Ok(built) = built.metadata().and_then(|m| m.modified()) else {
        return true;
    };
    let root = workspace_root();
    crates.iter().any(|c| {
        let crate_dir = root.join(c);
        let src = newest_mtime(&crate_dir.join("src"));
        let manifest = crate_dir
            .join("Cargo.toml")
            .metadata()
            .and_then(|m| m.modified())
            .ok();
        src.max(manifest).is_some_and(|t| t > built)
    })
}

/// `cargo build ARGS` into the target directory of `profile`.
fn cargo_build(profile: &Path, args: &[&str]) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root()).arg("build").args(args);
    if profile.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    if let Some(target) = profile.parent() {
        cmd.env("CARGO_TARGET_DIR", target);
    }
    let st = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo build {}: {e}", args.join(" ")));
    assert!(st.success(), "cargo build {} failed: {st}", args.join(" "));
}

// ---------------------------------------------------------------------------------
// Compiling the fakes

/// The compiled fakes of one flavour.
pub struct Fakes {
    pub cudart: PathBuf,
    pub cupti: PathBuf,
    pub app: PathBuf,
}

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".to_string())
}

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

/// Compiles one C source of `fakes/` into `out` with the fakes' flags and `extra`.
pub fn compile(out: &Path, src: &str, extra: &[String]) {
    let dir = fakes_src();
    let mut cmd = Command::new(cc());
    cmd.args(CFLAGS)
        .arg(format!("-I{}", dir.display()))
        .args(extra)
        .arg("-o")
        .arg(out)
        .arg(dir.join(src))
        .args(["-ldl", "-lpthread"]);
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {:?}: {e}", cc()));
    assert!(
        o.status.success(),
        "compiling {src} failed ({:?}):\n{}",
        cmd,
        String::from_utf8_lossy(&o.stderr)
    );
}

fn sources_key(cuda: Cuda) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    cuda.hash(&mut h);
    CFLAGS.hash(&mut h);
    cc().hash(&mut h);
    for f in ["fake_cuda.h", "fake_cupti.c", "fake_cudart.c", "app.c"] {
        std::fs::read(fakes_src().join(f))
            .expect("read a fake's source")
            .hash(&mut h);
    }
    h.finish()
}

/// Compiles the fakes of `cuda`, once per process and cached in the target directory
/// by a hash of their sources.
pub fn fakes(cuda: Cuda) -> &'static Fakes {
    static F13: OnceLock<Fakes> = OnceLock::new();
    static F12: OnceLock<Fakes> = OnceLock::new();
    let cell = match cuda {
        Cuda::V13 => &F13,
        Cuda::V12 => &F12,
    };
    cell.get_or_init(|| build_fakes(cuda))
}

fn build_fakes(cuda: Cuda) -> Fakes {
    let root = profile_dir().join("gputrace-fakes");
    let dir = root.join(format!("cuda{}-{:016x}", cuda.major(), sources_key(cuda)));
    let f = Fakes {
        cudart: dir.join(cuda.cudart_name()),
        cupti: dir.join(cuda.cupti_name()),
        app: dir.join("app"),
    };
    if f.app.is_file() {
        return f;
    }
    // Build next to it, then rename into place: concurrent test binaries never see a
    // half-built directory.
    std::fs::create_dir_all(&root).expect("create the fakes directory");
    let tmp = root.join(format!(".build-{}-{}", cuda.major(), std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).expect("create a build directory");
    let (cupti_flag, cudart_flag) = match cuda {
        Cuda::V13 => (None, None),
        Cuda::V12 => (Some("-DFAKE_CUPTI_12"), Some("-DFAKE_CUDART_12")),
    };
    let lib_flags = |soname: &str, flag: Option<&'static str>| {
        let mut v = vec![
            "-fPIC".to_string(),
            "-shared".to_string(),
            "-fvisibility=hidden".to_string(),
            format!("-Wl,-soname,{soname}"),
        ];
        v.extend(flag.map(str::to_string));
        v
    };
    let cupti = lib_flags(&cuda.cupti_name(), cupti_flag);
    let cudart = lib_flags(&cuda.cudart_name(), cudart_flag);
    compile(&tmp.join(cuda.cupti_name()), "fake_cupti.c", &cupti);
    compile(&tmp.join(cuda.cudart_name()), "fake_cudart.c", &cudart);
    compile(&tmp.join("app"), "app.c", &[]);
    if std::fs::rename(&tmp, &dir).is_err() {
        // Another process got there first; its build is as good as ours.
        let _ = std::fs::remove_dir_all(&tmp);
    }
    assert!(
        f.app.is_file(),
        "fakes missing after the build in {}",
        dir.display()
    );
    f
}

// ---------------------------------------------------------------------------------
// A wheel-like install and runs of the app in it

/// One test's world: the fake libraries in a wheel-like tree, a trace directory, and
/// a working directory, all under one temporary directory.
pub struct Wheel {
    pub dir: TempDir,
    pub cuda: Cuda,
    pub cudart: PathBuf,
    /// Where libcupti was put (None for [`Layout::NoCupti`]).
    pub cupti: Option<PathBuf>,
    pub app: PathBuf,
    /// `GPUTRACE_DIR` for the runs.
    pub traces: PathBuf,
}

impl Wheel {
    /// `XDG_RUNTIME_DIR` for the runs: their control sockets stay in the test's
    /// directory, and go with it.
    pub fn runtime_dir(&self) -> PathBuf {
        self.dir.path().join("run")
    }

    /// The control sockets the runs left (none when every process removed its own).
    pub fn sockets(&self) -> Vec<PathBuf> {
        let dir = protocol::socket_dir(Some(&self.runtime_dir()), 0);
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    pub fn new(cuda: Cuda, layout: Layout) -> Wheel {
        let f = fakes(cuda);
        let dir = TempDir::new(&format!("cuda{}", cuda.major()));
        let nvidia = dir.path().join("site-packages/nvidia");
        let (rt_dir, cupti_dir) = match layout {
            Layout::Flat | Layout::NoCupti => {
                let d = nvidia.join(format!("cu{}/lib", cuda.major()));
                (d.clone(), d)
            }
            Layout::Split => (
                nvidia.join("cuda_runtime/lib"),
                nvidia.join("cuda_cupti/lib"),
            ),
        };
        std::fs::create_dir_all(&rt_dir).unwrap();
        std::fs::create_dir_all(&cupti_dir).unwrap();
        let cudart = rt_dir.join(cuda.cudart_name());
        std::fs::copy(&f.cudart, &cudart).expect("copy libcudart");
        let cupti = (layout != Layout::NoCupti).then(|| {
            let p = cupti_dir.join(cuda.cupti_name());
            std::fs::copy(&f.cupti, &p).expect("copy libcupti");
            p
        });
        // The app runs from the shared build directory: copying an executable while
        // other test threads fork (their children briefly hold the copy's fd) would
        // make its exec fail with ETXTBSY.
        let app = f.app.clone();
        let traces = dir.path().join("traces");
        Wheel {
            cuda,
            cudart,
            cupti,
            app,
            traces,
            dir,
        }
    }

    /// A run of the app with these arguments (traced unless told otherwise).
    pub fn app(&self, args: &[&str]) -> Run<'_> {
        let mut r = Run::new(self, &self.app);
        r.args = args.iter().map(|s| s.to_string()).collect();
        r
    }

    /// A run of any program in this test's environment.
    pub fn program(&self, program: impl AsRef<Path>, args: &[&str]) -> Run<'_> {
        let mut r = Run::new(self, program.as_ref());
        r.args = args.iter().map(|s| s.to_string()).collect();
        r
    }

    /// Trace files in the trace directory, sorted.
    pub fn trace_files(&self) -> Vec<PathBuf> {
        trace_files_in(&self.traces)
    }
}

/// The `.gtrace` files in `dir`, sorted (none when `dir` does not exist).
pub fn trace_files_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "gtrace"))
            .collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

/// A process to start: the app (or another program) with the test's environment.
pub struct Run<'a> {
    wheel: &'a Wheel,
    program: PathBuf,
    args: Vec<String>,
    preload: bool,
    env: Vec<(String, String)>,
    unset: Vec<String>,
}

impl<'a> Run<'a> {
    fn new(wheel: &'a Wheel, program: &Path) -> Run<'a> {
        Run {
            wheel,
            program: program.to_path_buf(),
            args: Vec::new(),
            preload: true,
            env: Vec::new(),
            unset: Vec::new(),
        }
    }

    /// Leaves `k` out of the environment (even the harness's own GPUTRACE_DIR).
    pub fn unset(mut self, k: &str) -> Self {
        self.unset.push(k.to_string());
        self
    }

    /// Runs without libgputrace, for a baseline.
    pub fn untraced(mut self) -> Self {
        self.preload = false;
        self
    }

    pub fn env(mut self, k: &str, v: impl AsRef<str>) -> Self {
        self.env.push((k.to_string(), v.as_ref().to_string()));
        self
    }

    fn command(&self) -> Command {
        let mut c = Command::new(&self.program);
        c.args(&self.args).current_dir(self.wheel.dir.path());
        // Nothing from the environment of `cargo test` may leak into the run.
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy();
            if k.starts_with(protocol::SETTING_PREFIX)
                || k == "LD_PRELOAD"
                || k == protocol::CUDA_INJECTION_VAR
            {
                c.env_remove(&*k);
            }
        }
        c.env("FAKE_CUDART", &self.wheel.cudart)
            .env("GPUTRACE_DIR", &self.wheel.traces)
            .env(protocol::RUNTIME_DIR_VAR, self.wheel.runtime_dir());
        if self.preload {
            c.env("LD_PRELOAD", libgputrace());
        }
        for (k, v) in &self.env {
            c.env(k, v);
        }
        for k in &self.unset {
            c.env_remove(k);
        }
        c.stdin(Stdio::null());
        c
    }

    /// Runs to completion.
    pub fn run(self) -> Output {
        let child = self.spawn();
        let pid = child.id();
        let o = child
            .into_inner()
            .wait_with_output()
            .expect("wait for the process");
        Output {
            pid,
            status: o.status,
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
            traces: self.wheel.trace_files(),
        }
    }

    /// Starts it with stdout and stderr piped; it is killed if dropped still running.
    pub fn spawn(&self) -> Running {
        let c = self
            .command()
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.program.display()));
        Running(Some(c))
    }
}

/// A started process, SIGKILLed and reaped if dropped while running (a failing test
/// never leaves a spinning app behind).
pub struct Running(Option<Child>);

impl Running {
    pub fn id(&self) -> u32 {
        self.0.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    pub fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("the child")
    }

    /// Hands the child over; the caller waits for it.
    pub fn into_inner(mut self) -> Child {
        self.0.take().expect("the child")
    }

    /// SIGKILL, then reap; returns (exit status, stdout, stderr).
    pub fn kill(mut self) -> (ExitStatus, String, String) {
        let mut c = self.0.take().expect("the child");
        let _ = c.kill();
        let st = c.wait().expect("reap the killed process");
        (st, drain(c.stdout.take()), drain(c.stderr.take()))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// What a finished run left.
#[derive(Debug)]
pub struct Output {
    pub pid: u32,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// Trace files in the trace directory after the run.
    pub traces: Vec<PathBuf>,
}

impl Output {
    /// Panics, showing everything, unless the process exited with status 0.
    pub fn assert_ok(&self) -> &Self {
        assert!(
            self.status.success(),
            "process failed: {}\nstdout:\n{}\nstderr:\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
        self
    }

    /// The library's lines on stderr.
    pub fn gputrace_lines(&self) -> Vec<&str> {
        crate::gputrace_lines(&self.stderr)
    }

    /// The one process trace the run wrote, read and checked for well-formedness (an
    /// environment file `gputrace run` wrote beside it is no process's trace).
    pub fn only_trace(&self) -> Trace {
        let mut procs: Vec<Trace> = self
            .traces
            .iter()
            .map(|p| Trace::read(p))
            .filter(|t| !t.data.meta.is_environment())
            .collect();
        assert_eq!(
            procs.len(),
            1,
            "expected exactly one trace file, found {:?}\nstderr:\n{}",
            self.traces,
            self.stderr
        );
        procs.remove(0)
    }
}

/// The library's own lines (`gputrace: ...`) in a process's stderr.
pub fn gputrace_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("gputrace:"))
        .collect()
}

/// Reads everything a child wrote to a pipe (after it exited or was killed).
pub fn drain(r: Option<impl Read>) -> String {
    let mut s = String::new();
    if let Some(mut r) = r {
        let _ = r.read_to_string(&mut s);
    }
    s
}

/// Polls `f` every 20 ms until it returns Some or `limit` passes.
pub fn poll<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------------
// Reading traces

/// A trace read into memory, with its strings resolved.
#[derive(Debug, Clone)]
pub struct Trace {
    pub data: TraceData,
    pub strings: HashMap<u32, String>,
}

impl Trace {
    /// Reads a trace and checks the interning rules: every string id is defined by one
    /// `Str` event before its first use, and never redefined.
    pub fn read(path: &Path) -> Trace {
        let data =
            fmt::read_all(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        Trace::from_data(data)
    }

    pub fn from_data(data: TraceData) -> Trace {
        let mut strings = HashMap::new();
        for (i, e) in data.events.iter().enumerate() {
            if let Event::Str { id, text } = e {
                let prev = strings.insert(*id, text.clone());
                assert!(prev.is_none(), "string id {id} defined twice (event {i})");
                continue;
            }
            for id in name_refs(e) {
                assert!(
                    id == 0 || strings.contains_key(&id),
                    "event {i} ({e:?}) uses string id {id} before its Str event"
                );
            }
        }
        Trace { data, strings }
    }

    pub fn str(&self, id: u32) -> &str {
        self.strings.get(&id).map(String::as_str).unwrap_or("")
    }

    pub fn events(&self) -> &[Event] {
        &self.data.events
    }

    pub fn kernels(&self) -> Vec<&fmt::Kernel> {
        self.events()
            .iter()
            .filter_map(|e| match e {
                Event::Kernel(k) => Some(k),
                _ => None,
            })
            .collect()
    }

    pub fn kernels_named(&self, name: &str) -> Vec<&fmt::Kernel> {
        self.kernels()
            .into_iter()
            .filter(|k| self.str(k.name) == name)
            .collect()
    }

    pub fn memcpys(&self) -> Vec<&fmt::Memcpy> {
        self.events()
            .iter()
            .filter_map(|e| match e {
                Event::Memcpy(m) => Some(m),
                _ => None,
            })
            .collect()
    }

    pub fn memsets(&self) -> Vec<&fmt::Memset> {
        self.events()
            .iter()
            .filter_map(|e| match e {
                Event::Memset(m) => Some(m),
                _ => None,
            })
            .collect()
    }

    pub fn syncs(&self) -> Vec<&fmt::Sync> {
        self.events()
            .iter()
            .filter_map(|e| match e {
                Event::Sync(s) => Some(s),
                _ => None,
            })
            .collect()
    }

    pub fn memories(&self) -> Vec<&fmt::Memory> {
        self.events()
            .iter()
            .filter_map(|e| match e {
                Event::Memory(m) => Some(m),
                _ => None,
            })
            .collect()
    }

    pub fn devices(&self) -> Vec<&fmt::Device> {
        self.events()
            .iter()
            .filter_map(|e| match e {
                Event::Device(d) => Some(d),
                _ => None,
            })
            .collect()
    }

    pub fn apis(&self) -> Vec<&fmt::Api> {
        self.events()
            .iter()
            .filter_map(|e| match e {
                Event::Api(a) => Some(a),
                _ => None,
            })
            .collect()
    }

    pub fn apis_named(&self, name: &str) -> Vec<&fmt::Api> {
        self.apis()
            .into_iter()
            .filter(|a| self.str(a.name) == name)
            .collect()
    }

    /// Api events by correlation id (panics if two share one).
    pub fn api_by_corr(&self) -> HashMap<u32, &fmt::Api> {
        let mut m = HashMap::new();
        for a in self.apis() {
            assert!(
                m.insert(a.corr, a).is_none(),
                "two Api events with corr {}",
                a.corr
            );
        }
        m
    }

    /// (ts, state, reason) of every State event, in file order.
    pub fn states(&self) -> Vec<(u64, CollectorState, String)> {
        self.events()
            .iter()
            .filter_map(|e| match e {
                Event::State { ts, state, reason } => Some((
                    *ts,
                    CollectorState::from_u8(*state)
                        .unwrap_or_else(|| panic!("unknown collector state {state}")),
                    self.str(*reason).to_string(),
                )),
                _ => None,
            })
            .collect()
    }

    /// Total records reported lost, by source.
    pub fn dropped(&self) -> HashMap<u8, u64> {
        let mut m = HashMap::new();
        for e in self.events() {
            if let Event::Dropped { source, count, .. } = e {
                *m.entry(*source).or_insert(0) += *count;
            }
        }
        m
    }

    /// Thread ids named by Thread events.
    pub fn named_threads(&self) -> HashSet<u32> {
        self.events()
            .iter()
            .filter_map(|e| match e {
                Event::Thread { tid, .. } => Some(*tid),
                _ => None,
            })
            .collect()
    }

    /// Panics unless the file ended cleanly: whole chunks only, nothing corrupt, and
    /// a final Stopped state (the process exited normally).
    pub fn assert_complete(&self) {
        let s = &self.data.stats;
        assert!(!s.truncated_tail, "trace is truncated: {s:?}");
        assert_eq!(s.corrupt_at, None, "trace is corrupt: {s:?}");
        // Chunks numbered in order, nothing after the end (format 2.6).
        assert!(!s.damaged(), "trace damaged: {:?}", s.warning());
        assert_eq!(s.bad_events, 0, "undecodable events: {s:?}");
        assert_eq!(s.unknown_events, 0, "unknown events: {s:?}");
        let last = self.states().last().map(|s| s.1);
        assert_eq!(
            last,
            Some(CollectorState::Stopped),
            "the trace does not end stopped"
        );
    }
}

/// String ids an event refers to.
fn name_refs(e: &Event) -> Vec<u32> {
    match e {
        Event::Kernel(k) => vec![k.name],
        Event::Api(a) => vec![a.name],
        Event::Device(d) => vec![d.name],
        Event::State { reason, .. } => vec![*reason],
        Event::Thread { name, .. } => vec![*name],
        Event::Fact(f) => vec![f.key, f.value],
        Event::GpuProcess(p) => vec![p.name],
        Event::StallOp(o) => vec![o.name],
        Event::StallThread(t) => vec![t.call],
        Event::PyStack(st) => st
            .frames
            .iter()
            .flat_map(|f| [f.file, f.function])
            .collect(),
        _ => vec![],
    }
}

/// Is `program` runnable here (for optional checks such as python3)?
pub fn have_program(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

// ---------------------------------------------------------------------------------
// The fake NVML

/// The fake `libnvidia-ml.so.1` (tests/fakes/fake_nvml.c), compiled once per process
/// and cached by a hash of its source. Its scenario is `FAKE_NVML_SCENARIO`.
pub fn fake_nvml() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        CFLAGS.hash(&mut h);
        cc().hash(&mut h);
        std::fs::read(fakes_src().join("fake_nvml.c"))
            .expect("read fake_nvml.c")
            .hash(&mut h);
        let root = profile_dir().join("gputrace-fakes");
        let dir = root.join(format!("nvml-{:016x}", h.finish()));
        let lib = dir.join("libnvidia-ml.so.1");
        if lib.is_file() {
            return lib;
        }
        std::fs::create_dir_all(&root).expect("create the fakes directory");
        let tmp = root.join(format!(".build-nvml-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).expect("create a build directory");
        let flags: Vec<String> = [
            "-fPIC",
            "-shared",
            "-fvisibility=hidden",
            "-Wl,-soname,libnvidia-ml.so.1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        compile(&tmp.join("libnvidia-ml.so.1"), "fake_nvml.c", &flags);
        if std::fs::rename(&tmp, &dir).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        assert!(lib.is_file(), "fake NVML missing after the build");
        lib
    })
}

/// The median of a benchmark's timings (the upper one of an even count).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
