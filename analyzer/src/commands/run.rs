//! `gputrace run -- CMD`: run a command with the preload library and collect its traces.
//!
//! The command must not notice gputrace in how it is signalled or how its end is seen.
//!
//! * It stays in gputrace's process group, so the terminal's own signals (Ctrl-C, Ctrl-\,
//!   hang-up) reach it directly, as they would without gputrace.
//! * gputrace must survive those same signals to report afterwards. It catches them with a
//!   handler rather than ignoring them: `exec` resets a caught signal to its default in the
//!   command, while an ignored one would be inherited (Ctrl-C then did nothing and Python
//!   never raised KeyboardInterrupt). A signal that was already ignored when gputrace
//!   started (`nohup`, `&` in a script) is left ignored, so the command inherits it as it
//!   would have.
//! * The handler forwards the signal to the command, except those the kernel sent for the
//!   terminal (`si_code` `SI_KERNEL`): they went to the whole foreground group, the command
//!   included, and a second copy would, say, interrupt Python's KeyboardInterrupt cleanup.
//! * A signal to forward that comes before the command's pid is known is kept and sent
//!   once it is. Nothing is blocked around the spawn: the command would inherit the
//!   blocked mask (the standard library's spawn passes the caller's mask on), so it gets
//!   gputrace's own mask, as it would have without gputrace. Its handlers are the
//!   defaults: `posix_spawn` resets caught signals before `exec`, and on a fork path the
//!   handler notices it runs in the child and re-raises with the default action.
//! * The wait does not reap (`waitid` with `WNOWAIT`) until forwarding is off, so a late
//!   signal cannot reach an unrelated process that reused the pid.
//!
//! Exit status, as a shell gives it: the command's exit code; 128+N when a signal N
//! killed it; 127 when it was not found, 126 when it could not be executed; 125 when
//! gputrace itself failed before starting it. When Ctrl-C killed the command (and reached
//! gputrace too), gputrace ends by SIGINT itself after its report, as a shell does, so a
//! calling script stops as it would for the bare command (its `$?` is 130 either way).

use crate::commands::hangwatch;
use crate::recording::nvml as recorder;
use gputrace_format::protocol::{self, settings};
use std::collections::HashSet;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot find libgputrace.so (looked in: {0}); set {lib} to its path", lib = settings::LIB)]
    NoLibrary(String),
    /// The library that would be preloaded is missing or cannot be loaded; no other one is
    /// tried in its place.
    #[error("{what}: {why}; the command was not run")]
    BadLibrary { what: String, why: String },
    #[error("cannot create the trace directory {0}: {1}")]
    Dir(PathBuf, std::io::Error),
    #[error("{}: {}", .0.to_string_lossy(), spawn_reason(.0, .1))]
    Spawn(OsString, std::io::Error),
    #[error("lost track of the command (pid {0}): {1}")]
    Wait(u32, std::io::Error),
}

fn spawn_reason(cmd: &OsString, e: &std::io::Error) -> String {
    let has_slash = cmd.to_string_lossy().contains('/');
    match e.kind() {
        std::io::ErrorKind::NotFound if !has_slash => "command not found".into(),
        // The file is there: the interpreter its `#!` line names is not.
        std::io::ErrorKind::NotFound if Path::new(cmd).is_file() => {
            "cannot execute it: the interpreter its #! line names was not found".into()
        }
        std::io::ErrorKind::NotFound => "no such file".into(),
        _ => format!("cannot execute it: {e}"),
    }
}

impl RunError {
    /// The exit code a shell would give: 127 for a command not found, 126 for one that
    /// cannot be executed, and 125 (as `env`, `timeout`, `nice` do) for gputrace's own
    /// failures before the command starts.
    pub fn exit_code(&self) -> i32 {
        match self {
            RunError::Spawn(_, e) if e.kind() == std::io::ErrorKind::NotFound => 127,
            RunError::Spawn(..) => 126,
            RunError::NoLibrary(_)
            | RunError::BadLibrary { .. }
            | RunError::Dir(..)
            | RunError::Wait(..) => 125,
        }
    }
}

/// Where the preload library is: GPUTRACE_LIB, else next to this binary, else ../lib,
/// else inside the `gputrace` Python package the wheel installed beside this binary's
/// bin/ (../gputrace with `pip install --target`, ../lib/python3.X/site-packages/gputrace
/// in a virtual environment or a prefix, dist-packages on Debian's Python). The one
/// found must look loadable; a bad one is an error, never replaced by another.
pub fn find_library(explicit: Option<PathBuf>, exe: Option<PathBuf>) -> Result<PathBuf, RunError> {
    if let Some(p) = explicit {
        return match loadable(&p) {
            Ok(()) => Ok(std::fs::canonicalize(&p).unwrap_or(p)),
            Err(why) => Err(RunError::BadLibrary {
                what: format!("{}={}", settings::LIB, p.display()),
                why,
            }),
        };
    }
    let mut looked = Vec::new();
    if let Some(dir) = exe.as_ref().and_then(|e| e.parent()) {
        let mut candidates = vec![
            dir.join("libgputrace.so"),
            dir.join("../lib/libgputrace.so"),
            dir.join("../gputrace/libgputrace.so"),
        ];
        candidates.extend(python_packages(&dir.join("../lib")));
        for c in candidates {
            if c.symlink_metadata().is_ok() {
                let c = std::fs::canonicalize(&c).unwrap_or(c);
                return match loadable(&c) {
                    Ok(()) => Ok(c),
                    Err(why) => Err(RunError::BadLibrary {
                        what: c.display().to_string(),
                        why: format!("{why} (set {} to a good libgputrace.so)", settings::LIB),
                    }),
                };
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

/// `LIB/python3.*/{site,dist}-packages/gputrace/libgputrace.so`, newest Python first.
fn python_packages(lib: &Path) -> Vec<PathBuf> {
    let mut pythons: Vec<PathBuf> = std::fs::read_dir(lib)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("python3"))
        })
        .collect();
    pythons.sort_by_key(|p| std::cmp::Reverse(python_minor(p)));
    pythons
        .iter()
        .flat_map(|py| {
            ["site-packages", "dist-packages"].map(|d| py.join(d).join("gputrace/libgputrace.so"))
        })
        .filter(|c| c.symlink_metadata().is_ok())
        .collect()
}

/// 12 for `python3.12`.
fn python_minor(p: &Path) -> u32 {
    p.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("python3."))
        .and_then(|m| m.parse().ok())
        .unwrap_or(0)
}

/// Whether the dynamic loader could preload `p` here: a readable ELF shared object of
/// this machine's word size, byte order and architecture, at a path `LD_PRELOAD` can
/// carry. Read from the header only: loading it would start tracing gputrace itself.
fn loadable(p: &Path) -> Result<(), String> {
    let s = p.as_os_str().to_string_lossy();
    if s.contains([' ', ':']) {
        return Err("LD_PRELOAD cannot carry a path with a space or a colon".into());
    }
    let meta = match std::fs::metadata(p) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err("no such file".into()),
        Err(e) => return Err(format!("cannot read it: {e}")),
    };
    if !meta.is_file() {
        return Err("not a file".into());
    }
    let mut h = Vec::with_capacity(20);
    std::fs::File::open(p)
        .and_then(|f| f.take(20).read_to_end(&mut h))
        .map_err(|e| format!("cannot read it: {e}"))?;
    if !h.starts_with(b"\x7fELF") {
        return Err("not a shared library (no ELF header)".into());
    }
    if h.len() < 20 {
        return Err("not a shared library (too short)".into());
    }
    let class = if cfg!(target_pointer_width = "64") {
        2
    } else {
        1
    };
    let little = cfg!(target_endian = "little");
    if h[4] != class || h[5] != if little { 1 } else { 2 } {
        return Err("a library for another word size or byte order".into());
    }
    let half = |i: usize| {
        let b = [h[i], h[i + 1]];
        if little {
            u16::from_le_bytes(b)
        } else {
            u16::from_be_bytes(b)
        }
    };
    const ET_DYN: u16 = 3;
    if half(16) != ET_DYN {
        return Err("an ELF file but not a shared library".into());
    }
    let machine: Option<u16> = if cfg!(target_arch = "x86_64") {
        Some(62)
    } else if cfg!(target_arch = "aarch64") {
        Some(183)
    } else {
        None
    };
    if machine.is_some_and(|m| m != half(18)) {
        return Err(format!(
            "a library for another architecture (this is {})",
            std::env::consts::ARCH
        ));
    }
    Ok(())
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

/// Creates `dir` and its missing parents, private (0700 before the umask). Returns the
/// directories this call created, outermost first; an existing one is left as it is.
fn make_dir(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    use std::os::unix::fs::DirBuilderExt;
    let missing: Vec<&Path> = dir
        .ancestors()
        .take_while(|a| !a.as_os_str().is_empty() && a.symlink_metadata().is_err())
        .collect();
    let mut created = Vec::new();
    for d in missing.into_iter().rev() {
        match std::fs::DirBuilder::new().mode(0o700).create(d) {
            Ok(()) => created.push(d.to_path_buf()),
            // Made meanwhile by someone else: theirs, not ours to remove.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && d.is_dir() => {}
            Err(e) => return Err(e),
        }
    }
    if created.is_empty() && !dir.is_dir() {
        // Exists but is no directory: say so in the words mkdir would use.
        std::fs::DirBuilder::new().create(dir)?;
    }
    Ok(created)
}

/// Removes the directories `make_dir` created, innermost first, while they are empty.
fn remove_if_empty(created: &[PathBuf]) {
    for d in created.iter().rev() {
        if std::fs::remove_dir(d).is_err() {
            break;
        }
    }
}

pub struct RunOutcome {
    /// The command's exit code (128 + signal number if it was killed).
    pub code: i32,
    /// The signal that killed the command, if one did.
    pub signal: Option<i32>,
    /// gputrace itself received SIGINT while the command ran (Ctrl-C in the terminal).
    pub interrupted: bool,
    /// Trace files the run produced, sorted.
    pub traces: Vec<PathBuf>,
    /// The environment file gputrace wrote beside them (NVML sampled from its own
    /// process, `crate::recording::nvml`); none when sampling here was off or the command
    /// wrote no trace.
    pub env_file: Option<PathBuf>,
    /// What went wrong with the environment file, for the caller to say.
    pub notes: Vec<String>,
}

/// Runs `cmd` with the library preloaded; traces go to `dir`, which is created private
/// if missing and removed again if the run left it empty. NVML is sampled from this
/// process into an environment file in `dir` while the command runs, as `nvml` says
/// (the command is then told not to sample it itself). Signals are handled as the
/// module documentation says. One run at a time per process: the signal handling is
/// process-wide, so concurrent calls wait for each other.
pub fn run(
    lib: &Path,
    dir: &Path,
    cmd: &[OsString],
    extra_env: &[(String, String)],
    nvml: &recorder::Settings,
) -> Result<RunOutcome, RunError> {
    run_watched(lib, dir, cmd, extra_env, nvml, Duration::ZERO)
}

/// [`run`], with the traces the command writes watched for a hang while it runs
/// (`crate::commands::hangwatch`): once a stall shows no GPU progress for `hang_timeout`, its
/// report goes to stderr and the command goes on. Zero: no watching.
pub fn run_watched(
    lib: &Path,
    dir: &Path,
    cmd: &[OsString],
    extra_env: &[(String, String)],
    nvml: &recorder::Settings,
    hang_timeout: Duration,
) -> Result<RunOutcome, RunError> {
    let Some(program) = cmd.first() else {
        return Err(RunError::Spawn(
            OsString::new(),
            std::io::ErrorKind::NotFound.into(),
        ));
    };
    let created = make_dir(dir).map_err(|e| RunError::Dir(dir.to_path_buf(), e))?;
    let canon = std::fs::canonicalize(dir).unwrap_or(dir.to_path_buf());
    let before = traces_in(&canon);
    let watch = hangwatch::Watch::Dir {
        dir: canon.clone(),
        before: before.clone(),
    };
    let result = run_in(
        lib,
        &canon,
        program,
        &cmd[1..],
        extra_env,
        nvml,
        (watch, hang_timeout),
    );
    let env_file = result.as_ref().ok().and_then(|r| r.env_file.clone());
    let mut traces: Vec<PathBuf> = traces_in(&canon)
        .difference(&before)
        .filter(|p| Some(*p) != env_file.as_ref())
        .cloned()
        .collect();
    traces.sort();
    // Samples of a run that traced nothing describe nothing.
    let env_file = match env_file {
        Some(p) if traces.is_empty() => {
            let _ = std::fs::remove_file(&p);
            None
        }
        kept => kept,
    };
    if traces.is_empty() {
        remove_if_empty(&created);
    }
    let ran = result?;
    use std::os::unix::process::ExitStatusExt;
    let signal = ran.status.signal();
    let code = ran.status.code().or(signal.map(|s| 128 + s)).unwrap_or(1);
    Ok(RunOutcome {
        code,
        signal,
        interrupted: ran.interrupted,
        traces,
        env_file,
        notes: ran.notes,
    })
}

/// What [`run_in`] saw.
struct Ran {
    status: std::process::ExitStatus,
    /// gputrace got SIGINT meanwhile.
    interrupted: bool,
    env_file: Option<PathBuf>,
    notes: Vec<String>,
}

/// Spawns and waits for the command with signals handled, NVML sampled meanwhile.
fn run_in(
    lib: &Path,
    dir: &Path,
    program: &OsString,
    args: &[OsString],
    extra_env: &[(String, String)],
    nvml: &recorder::Settings,
    (watch, hang_timeout): (hangwatch::Watch, Duration),
) -> Result<Ran, RunError> {
    let mut preload = OsString::from(lib.as_os_str());
    if let Some(old) = std::env::var_os("LD_PRELOAD") {
        if !old.is_empty() {
            preload.push(":");
            preload.push(old);
        }
    }
    let mut c = Command::new(program);
    c.args(args)
        .env("LD_PRELOAD", preload)
        .env(settings::DIR, dir)
        .env(protocol::CUDA_INJECTION_VAR, lib)
        .env(protocol::NVTX_INJECTION_VAR, lib);
    if let Some((k, v)) = nvml.nvml.for_job() {
        c.env(k, v);
    }
    for (k, v) in extra_env {
        c.env(k, v);
    }
    let mut relay = signals::Relay::install();
    let mut child = c.spawn().map_err(|e| RunError::Spawn(program.clone(), e))?;
    let pid = child.id();
    relay.forward_to(pid);
    let mut notes = Vec::new();
    let job = recorder::Job {
        pid,
        cmdline: std::iter::once(program)
            .chain(args)
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        started_by: "gputrace run",
    };
    let recorder = recorder::Recorder::start(dir, job, nvml).unwrap_or_else(|e| {
        notes.push(format!(
            "no NVML samples: cannot write the environment file in {}: {e}",
            dir.display()
        ));
        None
    });
    let watcher = hangwatch::Watcher::start(watch, hang_timeout, say_hang);
    let exited = signals::wait_exited(pid);
    if let Some(w) = watcher {
        w.stop();
    }
    // The command is a zombie now (or waitid failed): stop forwarding before it is reaped
    // so its pid cannot be reused under a late signal.
    let interrupted = relay.stop();
    drop(relay);
    // The last tick, bounded, before the reaping (the command's processes are still
    // listed as they ended).
    let env_file = recorder.map(|r| {
        if let Ok(end) = &exited {
            r.note_job_end(pid, end);
        }
        r.finish(recorder::LAST_TICK_WAIT)
    });
    let status = exited
        .and_then(|_| child.wait())
        .map_err(|e| RunError::Wait(pid, e))?;
    Ok(Ran {
        status,
        interrupted,
        env_file,
        notes,
    })
}

/// Prints a hang report on stderr, each line marked as gputrace's, in one piece.
pub fn say_hang(lines: &[String]) {
    let mut e = std::io::stderr().lock();
    for l in lines {
        let _ = writeln!(e, "gputrace: {l}");
    }
    let _ = e.flush();
}

/// Ends the `gputrace run` process after its report as the command's end asks: returns
/// the exit code, or, when Ctrl-C killed the command and reached gputrace too, ends by
/// SIGINT (the wait-and-cooperative-exit convention of shells: a calling script's loop
/// stops as it would have for the bare command).
pub fn finish(o: &RunOutcome) -> i32 {
    if o.interrupted && o.signal == Some(libc::SIGINT) {
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        signals::die_by(libc::SIGINT);
    }
    o.code
}

/// `gputrace run` as the binary does it: finds the library (`GPUTRACE_LIB`, else next to
/// the binary), runs the command with NVML sampled as `GPUTRACE_NVML` and
/// `GPUTRACE_NVML_MS` say, has `report` print on the traces it wrote and the environment
/// file (or says there were none), and returns the exit code. Every failure is one line
/// on stderr.
pub fn run_and_report(
    out: &Path,
    cmd: &[OsString],
    extra_env: &[(String, String)],
    hang_timeout: Duration,
    report: impl FnOnce(&[PathBuf]) -> anyhow::Result<()>,
) -> i32 {
    let say = |m: &dyn std::fmt::Display| {
        let _ = writeln!(std::io::stderr().lock(), "gputrace: {m}");
    };
    // An empty GPUTRACE_LIB counts as unset, as an empty LD_PRELOAD does.
    let explicit = gputrace_format::settings::Values::from_env().0.lib;
    let (nvml, warning) = recorder::Settings::from_env();
    if let Some(w) = warning {
        say(&w);
    }
    // Stall reports in time for a short --hang-timeout, unless the user set their own.
    let mut env = extra_env.to_vec();
    let user = std::env::var_os(hangwatch::STALL_MS_VAR);
    if let Some(ms) = hangwatch::stall_ms_for(hang_timeout, user.as_deref()) {
        env.push((hangwatch::STALL_MS_VAR.into(), ms.to_string()));
    }
    let outcome = find_library(explicit, std::env::current_exe().ok())
        .and_then(|lib| run_watched(&lib, out, cmd, &env, &nvml, hang_timeout));
    let o = match outcome {
        Ok(o) => o,
        Err(e) => {
            say(&e);
            return e.exit_code();
        }
    };
    for n in &o.notes {
        say(n);
    }
    if o.traces.is_empty() {
        say(&no_trace_message(o.signal));
    } else {
        let files: Vec<PathBuf> = o.traces.iter().chain(&o.env_file).cloned().collect();
        if let Err(e) = report(&files) {
            say(&format_args!("{e:#}"));
        }
    }
    finish(&o)
}

/// What `gputrace run` says when the command wrote no trace: the signal that killed it,
/// where one did (a trace is written at exit, so a program killed before then, by
/// SIGKILL above all, leaves none), else the usual reasons.
pub fn no_trace_message(signal: Option<i32>) -> String {
    match signal {
        Some(sig) => match gputrace_format::signal_name(sig) {
            "SIG?" => format!("the command was killed by signal {sig} and wrote no trace"),
            name => format!("the command was killed by {name} (signal {sig}) and wrote no trace"),
        },
        None => "the command wrote no trace (it did not use CUDA, or tracing was off)".into(),
    }
}

/// The process-wide signal handling of a run.
mod signals {
    use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering::SeqCst};
    use std::sync::{Mutex, MutexGuard};

    /// What gputrace relays to the command. SIGUSR1/SIGUSR2 too: the library's optional
    /// window trigger (`GPUTRACE_SIGNAL`) listens in the command, so `kill -USR2` reaches it
    /// through gputrace, and without the trigger the command ends by it as it would have,
    /// instead of gputrace dying and leaving it orphaned.
    const RELAYED: [libc::c_int; 6] = [
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGUSR1,
        libc::SIGUSR2,
    ];

    /// The gputrace process (a forked child before `exec` has another pid).
    static OWNER: AtomicI32 = AtomicI32::new(0);
    /// The command's pid while signals are forwarded to it, else 0.
    static CHILD: AtomicI32 = AtomicI32::new(0);
    /// Signals to forward that came before the command's pid was known (bit N-1 for N).
    static EARLY: AtomicU64 = AtomicU64::new(0);
    /// Handlers running now (on any thread), so forwarding can be switched off for sure.
    static IN_HANDLER: AtomicUsize = AtomicUsize::new(0);
    static GOT_SIGINT: AtomicBool = AtomicBool::new(false);
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

    fn bit(sig: libc::c_int) -> u64 {
        1 << (sig - 1)
    }

    /// Sends the signals kept in EARLY to `pid`, each once: whoever empties EARLY sends.
    fn send_early(pid: libc::pid_t) {
        let early = EARLY.swap(0, SeqCst);
        for s in RELAYED {
            if early & bit(s) != 0 {
                // SAFETY: kill is async-signal-safe; pid is the command, not yet reaped.
                unsafe { libc::kill(pid, s) };
            }
        }
    }

    extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
        // SAFETY: errno is thread-local; the handler gives back the value it found.
        let errno = unsafe { *libc::__errno_location() };
        // SAFETY: getpid is async-signal-safe.
        if unsafe { libc::getpid() } != OWNER.load(SeqCst) {
            // SAFETY: signal and raise are async-signal-safe; this process is a child
            // between fork and exec and must take the command's (default) action.
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
                libc::raise(sig);
            }
        } else {
            IN_HANDLER.fetch_add(1, SeqCst);
            if sig == libc::SIGINT {
                GOT_SIGINT.store(true, SeqCst);
            }
            // SAFETY: with SA_SIGINFO the kernel passes a valid siginfo (checked non-null).
            let from_terminal = !info.is_null() && unsafe { (*info).si_code } == libc::SI_KERNEL;
            if !from_terminal {
                let pid = CHILD.load(SeqCst);
                if pid > 0 {
                    // SAFETY: kill is async-signal-safe; pid is the command, not yet reaped.
                    unsafe { libc::kill(pid, sig) };
                } else {
                    // Not started yet: kept for it. Should the pid have been published
                    // meanwhile, its publisher may have looked at EARLY already.
                    EARLY.fetch_or(bit(sig), SeqCst);
                    let pid = CHILD.load(SeqCst);
                    if pid > 0 {
                        send_early(pid);
                    }
                }
            }
            IN_HANDLER.fetch_sub(1, SeqCst);
        }
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
    }

    /// Handlers installed for one run; the old ones are put back on drop.
    pub(super) struct Relay {
        old_actions: Vec<(libc::c_int, libc::sigaction)>,
        _one: MutexGuard<'static, ()>,
    }

    impl Relay {
        /// Catches each relayed signal that is not ignored already.
        pub(super) fn install() -> Relay {
            let one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: getpid has no preconditions.
            OWNER.store(unsafe { libc::getpid() }, SeqCst);
            CHILD.store(0, SeqCst);
            EARLY.store(0, SeqCst);
            GOT_SIGINT.store(false, SeqCst);
            let mut old_actions = Vec::new();
            for s in RELAYED {
                // SAFETY: plain sigaction calls on valid signal numbers with initialised
                // structs; the handler is async-signal-safe.
                unsafe {
                    let mut old: libc::sigaction = std::mem::zeroed();
                    if libc::sigaction(s, std::ptr::null(), &mut old) != 0
                        || old.sa_sigaction == libc::SIG_IGN
                    {
                        continue;
                    }
                    let mut sa: libc::sigaction = std::mem::zeroed();
                    sa.sa_sigaction = on_signal as *const () as usize;
                    sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
                    // One handler at a time, so signals are forwarded in the order taken.
                    libc::sigemptyset(&mut sa.sa_mask);
                    for r in RELAYED {
                        libc::sigaddset(&mut sa.sa_mask, r);
                    }
                    if libc::sigaction(s, &sa, &mut old) == 0 {
                        old_actions.push((s, old));
                    }
                }
            }
            Relay {
                old_actions,
                _one: one,
            }
        }

        /// The command runs: forward to it from now on, starting with what came meanwhile.
        pub(super) fn forward_to(&mut self, pid: u32) {
            CHILD.store(pid as libc::pid_t, SeqCst);
            send_early(pid as libc::pid_t);
        }

        /// Stops forwarding (waiting out a handler running on another thread); returns
        /// whether SIGINT came.
        pub(super) fn stop(&mut self) -> bool {
            CHILD.store(0, SeqCst);
            while IN_HANDLER.load(SeqCst) != 0 {
                std::thread::yield_now();
            }
            GOT_SIGINT.load(SeqCst)
        }
    }

    impl Drop for Relay {
        fn drop(&mut self) {
            self.stop();
            for (s, old) in &self.old_actions {
                // SAFETY: puts back the action saved in install.
                unsafe { libc::sigaction(*s, old, std::ptr::null_mut()) };
            }
        }
    }

    /// Waits until the child `pid` has ended, without reaping it; returns how it ended
    /// as the end records say it (`exit 1`, `signal SIGKILL 9`, `signal SIGSEGV 11, core
    /// dumped`).
    pub(super) fn wait_exited(pid: u32) -> std::io::Result<String> {
        loop {
            // SAFETY: info is an out-parameter of the right type; pid is our child.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            let r = unsafe {
                libc::waitid(
                    libc::P_PID,
                    pid as libc::id_t,
                    &mut info,
                    libc::WEXITED | libc::WNOWAIT,
                )
            };
            if r == 0 {
                // SAFETY: waitid filled in a SIGCHLD siginfo, whose si_status is set.
                let status = unsafe { info.si_status() };
                return Ok(match info.si_code {
                    libc::CLD_EXITED => format!("exit {status}"),
                    libc::CLD_DUMPED => {
                        format!(
                            "{}, core dumped",
                            gputrace_format::end_reason_signal(status)
                        )
                    }
                    _ => gputrace_format::end_reason_signal(status),
                });
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Ends this process by `sig` with its default action (returns if that did not end it).
    pub(super) fn die_by(sig: libc::c_int) {
        // SAFETY: resets one disposition, unblocks that signal and raises it.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::raise(sig);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system's temporary directory, removed on drop.
    struct Tmp(PathBuf);
    impl Tmp {
        fn new(name: &str) -> Tmp {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let d = std::env::temp_dir().join(format!(
                "gputrace-run-{name}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            Tmp(d)
        }
    }
    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// No NVML sampling from the test process.
    fn no_nvml() -> recorder::Settings {
        recorder::Settings {
            nvml: recorder::NvmlChoice::Off,
            period: recorder::DEFAULT_PERIOD,
            gpm_period: recorder::DEFAULT_GPM_PERIOD,
        }
    }

    fn sh(script: &str) -> Vec<OsString> {
        vec!["sh".into(), "-c".into(), script.into()]
    }

    fn mode(p: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn library_lookup_reports_where_it_looked() {
        let err = find_library(
            Some(PathBuf::from("/nonexistent/libgputrace.so")),
            Some(PathBuf::from("/also/not/gputrace")),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("/nonexistent/libgputrace.so"), "{err}");
        assert!(err.contains("GPUTRACE_LIB"), "{err}");
        let err = find_library(None, Some(PathBuf::from("/also/not/gputrace")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/also/not/libgputrace.so"), "{err}");
        assert!(err.contains("GPUTRACE_LIB"), "{err}");
    }

    #[test]
    fn a_bad_explicit_library_is_an_error_not_replaced() {
        let t = Tmp::new("badlib");
        // A good library next to the "binary" must not stand in for the bad explicit one.
        let exe_dir = t.0.join("bin");
        std::fs::create_dir(&exe_dir).unwrap();
        let good = exe_dir.join("libgputrace.so");
        let header = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        std::fs::write(&good, &header[..64]).unwrap();
        assert_eq!(
            find_library(None, Some(exe_dir.join("gputrace"))).unwrap(),
            good
        );
        let text = t.0.join("text.so");
        std::fs::write(&text, "not a library\n").unwrap();
        let cases = [
            (t.0.join("missing.so"), "no such file"),
            (text, "no ELF header"),
            (t.0.clone(), "not a file"),
            (t.0.join("with space.so"), "space"),
        ];
        for (p, why) in cases {
            let e = find_library(Some(p.clone()), Some(exe_dir.join("gputrace"))).unwrap_err();
            let msg = e.to_string();
            assert!(matches!(e, RunError::BadLibrary { .. }), "{msg}");
            assert_eq!(e.exit_code(), 125);
            assert!(msg.contains(why), "{p:?}: {msg}");
            assert!(msg.contains("GPUTRACE_LIB="), "{msg}");
            assert!(!msg.contains('\n'), "{msg}");
        }
    }

    #[test]
    fn the_wheel_layouts_are_found_from_the_command() {
        let header = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        // A virtual environment (newest Python first), then `pip install --target DIR`.
        let t = Tmp::new("wheel-venv");
        std::fs::create_dir(t.0.join("bin")).unwrap();
        for py in ["python3.9", "python3.12"] {
            let pkg = t.0.join("lib").join(py).join("site-packages/gputrace");
            std::fs::create_dir_all(&pkg).unwrap();
            std::fs::write(pkg.join("libgputrace.so"), &header[..64]).unwrap();
        }
        let found = find_library(None, Some(t.0.join("bin/gputrace"))).unwrap();
        assert!(
            found.ends_with("lib/python3.12/site-packages/gputrace/libgputrace.so"),
            "{found:?}"
        );
        let t = Tmp::new("wheel-target");
        std::fs::create_dir_all(t.0.join("bin")).unwrap();
        std::fs::create_dir_all(t.0.join("gputrace")).unwrap();
        std::fs::write(t.0.join("gputrace/libgputrace.so"), &header[..64]).unwrap();
        let found = find_library(None, Some(t.0.join("bin/gputrace"))).unwrap();
        assert!(found.ends_with("gputrace/libgputrace.so"), "{found:?}");
    }

    #[test]
    fn the_elf_check_knows_a_shared_library_from_other_files() {
        // This test binary is a position-independent executable: ELF type ET_DYN, like a
        // shared library, of this machine, so it passes; its header changed, it does not.
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let t = Tmp::new("elf");
        let p = t.0.join("lib.so");
        std::fs::write(&p, &exe[..64]).unwrap();
        assert_eq!(loadable(&p), Ok(()));
        let mut other_arch = exe[..64].to_vec();
        other_arch[18] ^= 0x40;
        std::fs::write(&p, &other_arch).unwrap();
        assert!(loadable(&p).unwrap_err().contains("architecture"));
        let mut exec = exe[..64].to_vec();
        exec[16] = 2; // ET_EXEC (little-endian low byte; the high byte is 0 either way)
        std::fs::write(&p, &exec).unwrap();
        assert!(loadable(&p).unwrap_err().contains("not a shared library"));
        let mut class32 = exe[..64].to_vec();
        class32[4] = 1;
        std::fs::write(&p, &class32).unwrap();
        assert!(loadable(&p).unwrap_err().contains("word size"));
        std::fs::write(&p, &exe[..19]).unwrap();
        assert!(loadable(&p).unwrap_err().contains("too short"));
    }

    #[test]
    fn run_reports_exit_code_and_new_traces_only() {
        let t = Tmp::new("codes");
        let dir = t.0.join("traces");
        let elsewhere = t.0.join("elsewhere");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::write(dir.join("old.gtrace"), b"x").unwrap();
        // A library path that does not exist: LD_PRELOAD of it only warns.
        let script = format!("echo > '{}/new.gtrace'; exit 7", elsewhere.display());
        let out = run(
            Path::new("/nonexistent-lib.so"),
            &dir,
            &sh(&script),
            &[],
            &no_nvml(),
        );
        let out = out.unwrap();
        assert_eq!(out.code, 7);
        assert_eq!(out.signal, None);
        assert!(
            out.traces.is_empty(),
            "a file made elsewhere is not in the trace dir"
        );
        assert!(elsewhere.join("new.gtrace").exists());
    }

    #[test]
    fn a_killed_command_gives_128_plus_the_signal() {
        let t = Tmp::new("killed");
        let out = run(
            Path::new("/nonexistent-lib.so"),
            &t.0,
            &sh("kill -KILL $$"),
            &[],
            &no_nvml(),
        )
        .unwrap();
        assert_eq!((out.code, out.signal), (137, Some(9)));
        assert!(!out.interrupted);
    }

    #[test]
    fn commands_that_cannot_start_give_127_and_126() {
        let t = Tmp::new("spawn");
        let lib = Path::new("/nonexistent-lib.so");
        let e = run(
            lib,
            &t.0,
            &["gputrace-no-such-command-x".into()],
            &[],
            &no_nvml(),
        )
        .err()
        .unwrap();
        assert_eq!(e.exit_code(), 127);
        assert!(e.to_string().contains("command not found"), "{e}");
        let plain = t.0.join("plain-file");
        std::fs::write(&plain, "exit 0\n").unwrap();
        let e = run(lib, &t.0, &[plain.into()], &[], &no_nvml())
            .err()
            .unwrap();
        assert_eq!(e.exit_code(), 126, "{e}");
        let e = run(lib, &t.0, &[t.0.clone().into()], &[], &no_nvml())
            .err()
            .unwrap();
        assert_eq!(e.exit_code(), 126, "{e}");
    }

    #[test]
    fn a_new_trace_directory_is_private_and_removed_when_left_empty() {
        let t = Tmp::new("dir");
        let lib = Path::new("/nonexistent-lib.so");
        // Nothing traced: the directories made for the run (parent included) go again.
        let dir = t.0.join("a/b");
        let o = run(lib, &dir, &sh("test -d \"$GPUTRACE_DIR\""), &[], &no_nvml()).unwrap();
        assert_eq!(o.code, 0, "the directory exists while the command runs");
        assert!(
            !t.0.join("a").exists(),
            "empty directories were left behind"
        );
        // A command that fails to start leaves nothing either.
        let _ = run(
            lib,
            &dir,
            &["gputrace-no-such-command-x".into()],
            &[],
            &no_nvml(),
        )
        .err();
        assert!(!t.0.join("a").exists());
        // A trace written: the directory stays, mode 0700.
        let o = run(
            lib,
            &dir,
            &sh("echo > \"$GPUTRACE_DIR/x.gtrace\""),
            &[],
            &no_nvml(),
        )
        .unwrap();
        assert_eq!(o.traces.len(), 1);
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&t.0.join("a")), 0o700);
    }

    #[test]
    fn the_environment_file_is_written_beside_traces_only() {
        let t = Tmp::new("envfile");
        let lib = Path::new("/nonexistent-lib.so");
        let nvml = recorder::Settings {
            nvml: recorder::NvmlChoice::Command(Some("/nonexistent/libnvidia-ml.so.1".into())),
            period: recorder::DEFAULT_PERIOD,
            gpm_period: recorder::DEFAULT_GPM_PERIOD,
        };
        // The command is told not to sample NVML itself.
        let script = "echo \"$GPUTRACE_NVML\" > \"$GPUTRACE_DIR/x.gtrace\"";
        let o = run(lib, &t.0, &sh(script), &[], &nvml).unwrap();
        assert_eq!(o.traces, vec![t.0.join("x.gtrace")]);
        assert_eq!(std::fs::read_to_string(&o.traces[0]).unwrap(), "0\n");
        let env = o.env_file.expect("an environment file");
        assert!(
            env.is_file() && env.parent() == Some(t.0.as_path()),
            "{env:?}"
        );
        assert!(o.notes.is_empty(), "{:?}", o.notes);
        // No trace: no environment file either.
        let dir = t.0.join("none");
        let o = run(lib, &dir, &sh("true"), &[], &nvml).unwrap();
        assert!(o.traces.is_empty() && o.env_file.is_none());
        assert!(!dir.exists());
    }

    #[test]
    fn an_existing_trace_directory_is_left_as_it_was() {
        use std::os::unix::fs::PermissionsExt;
        let t = Tmp::new("existing");
        let dir = t.0.join("mine");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let o = run(
            Path::new("/nonexistent-lib.so"),
            &dir,
            &sh("true"),
            &[],
            &no_nvml(),
        )
        .unwrap();
        assert!(o.traces.is_empty());
        assert!(dir.is_dir(), "the user's empty directory was removed");
        assert_eq!(mode(&dir), 0o755);
        // A file where the directory should be is an error that says so.
        let file = t.0.join("file");
        std::fs::write(&file, "").unwrap();
        let e = run(
            Path::new("/nonexistent-lib.so"),
            &file,
            &sh("true"),
            &[],
            &no_nvml(),
        )
        .err()
        .unwrap();
        assert!(matches!(e, RunError::Dir(..)), "{e}");
        assert_eq!(e.exit_code(), 125);
    }
}
