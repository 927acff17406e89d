//! The environment file: NVML sampled from the `gputrace` command's own process while
//! the job runs (`gputrace run`) or a window is open (`gputrace attach`), written beside
//! the job's traces.
//!
//! Why from outside the job: NVML initialised inside a PyTorch process hung it at its
//! first kernel launches on an H200 (measured, cause unknown); the `gputrace` process
//! runs no CUDA. The file is a trace file whose metadata says it is an environment file
//! (`Meta::kind`, named by `protocol::env_file_name`): the facts once, then every
//! `GPUTRACE_NVML_MS` one [`Sampler::tick`] of the GPUs the job uses, as the events the
//! library writes (tags 25-28), a chunk at least every [`FLUSH`] so a killed run keeps
//! what it had. Readers give its events to the process traces of the same host and time
//! (`crate::model::env_files`).
//!
//! The sampler never holds the job up: it starts after the job was spawned, on a thread
//! of its own, and at the job's end gets at most a bounded wait for its last tick.

use crate::threads::{Spec, Worker, POLICY};
use gputrace_env::sampler::{self, Sampler, Skip};
use gputrace_env::Nvml;
use gputrace_format::protocol::{self, settings, TraceFileName};
use gputrace_format::redact::REDACTED;
use gputrace_format::settings::{Nvml as NvmlSetting, Values};
use gputrace_format::{ChunkWriter, CollectorState, Encoder, Event, Meta};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Longest time between two chunk writes.
pub const FLUSH: Duration = Duration::from_millis(500);
/// Longest wait for the last tick once the job (or window) ended.
pub const LAST_TICK_WAIT: Duration = Duration::from_secs(1);
/// The sampling period when `GPUTRACE_NVML_MS` is unset.
pub const DEFAULT_PERIOD: Duration =
    Duration::from_millis(protocol::default_number(settings::NVML_MS));
/// The GPM sampling period when `GPUTRACE_GPM_MS` is unset.
pub const DEFAULT_GPM_PERIOD: Duration =
    Duration::from_millis(protocol::default_number(settings::GPM_MS));
/// Longest wait at the end for the GPM thread's last pair (it may be stuck in NVML).
const GPM_LAST_WAIT: Duration = Duration::from_millis(300);

/// Where NVML is sampled, as `GPUTRACE_NVML` tells the command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NvmlChoice {
    /// `0` / `off`: nowhere.
    Off,
    /// From the command's own process, with this library (`None`: libnvidia-ml.so.1).
    /// Unset, `1` / `on`, or a path.
    Command(Option<PathBuf>),
    /// [`protocol::NVML_IN_PROCESS`]: by the library inside the traced process; the
    /// command samples nothing.
    InProcess,
}

impl NvmlChoice {
    /// Reads a `GPUTRACE_NVML` value (`None`: unset) through the settings table.
    pub fn parse(v: Option<&OsStr>) -> NvmlChoice {
        let mut values = Values::defaults();
        if let Some(v) = v {
            // Every text is a value of this setting (a path, at worst).
            let _ = values.set(settings::NVML, &v.to_string_lossy());
        }
        NvmlChoice::of(&values.nvml)
    }

    /// What `GPUTRACE_NVML` means for the command: it samples unless told not to.
    pub fn of(n: &NvmlSetting) -> NvmlChoice {
        match n {
            NvmlSetting::Unset | NvmlSetting::On => NvmlChoice::Command(None),
            NvmlSetting::Off => NvmlChoice::Off,
            NvmlSetting::InProcess => NvmlChoice::InProcess,
            NvmlSetting::Path(p) => NvmlChoice::Command(Some(p.clone())),
        }
    }

    /// The job's `GPUTRACE_NVML`: `0` (no NVML in the job: the command samples, or
    /// nobody does), or left as the user set it for in-process sampling.
    pub fn for_job(&self) -> Option<(&'static str, &'static str)> {
        match self {
            NvmlChoice::InProcess => None,
            NvmlChoice::Off | NvmlChoice::Command(_) => Some((settings::NVML, "0")),
        }
    }
}

/// The command's NVML settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub nvml: NvmlChoice,
    /// Between two ticks; zero: the facts only.
    pub period: Duration,
    /// Between two NVML GPM samples (`GPUTRACE_GPM_MS`); zero: no GPM.
    pub gpm_period: Duration,
}

impl Settings {
    /// From `GPUTRACE_NVML`, `GPUTRACE_NVML_MS` and `GPUTRACE_GPM_MS` (`None`: unset).
    /// A bad period is named in the warning returned, and the default used.
    pub fn parse(
        nvml: Option<&OsStr>,
        ms: Option<&OsStr>,
        gpm_ms: Option<&OsStr>,
    ) -> (Settings, Option<String>) {
        let set: Vec<(&str, String)> = [
            (settings::NVML, nvml),
            (settings::NVML_MS, ms),
            (settings::GPM_MS, gpm_ms),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k, v?.to_string_lossy().into_owned())))
        .collect();
        let (values, wrong) = Values::read(set.iter().map(|(k, v)| (*k, v.as_str())));
        (
            Settings::of(&values),
            (!wrong.is_empty()).then(|| wrong.join("; ")),
        )
    }

    /// The command's NVML settings among all of them.
    pub fn of(v: &Values) -> Settings {
        Settings {
            nvml: NvmlChoice::of(&v.nvml),
            period: Duration::from_millis(v.nvml_ms),
            gpm_period: Duration::from_millis(v.gpm_ms),
        }
    }

    /// [`Settings::parse`] of this process's environment.
    pub fn from_env() -> (Settings, Option<String>) {
        Settings::parse(
            std::env::var_os(settings::NVML).as_deref(),
            std::env::var_os(settings::NVML_MS).as_deref(),
            std::env::var_os(settings::GPM_MS).as_deref(),
        )
    }
}

/// An environment file being written by its sampler thread.
pub struct Recorder {
    path: PathBuf,
    ctl: Arc<Ctl>,
}

/// The recorder's two threads, workers (`gputrace_env::worker`): one writes the file,
/// one reads GPM. One recorder at a time in the command's process.
static SAMPLER: Worker = Worker::new();
static GPM: Worker = Worker::new();

/// What the caller, the sampler thread and the GPM thread share.
#[derive(Default)]
struct Ctl {
    state: Mutex<CtlState>,
}

#[derive(Default)]
struct CtlState {
    /// The caller stopped waiting: write nothing more (the file is being read).
    abandoned: bool,
    /// GPM samples (and facts) taken by the GPM thread, for the sampler thread to write.
    gpm: Vec<sampler::Item>,
    /// NVML indices of the GPUs the job was seen on (bit per index; 0: not yet seen).
    focus: u64,
    /// The job's pid and how it ended, as its parent saw it, for the file's last facts.
    job_end: Option<(u32, String)>,
}

fn lock(c: &Ctl) -> MutexGuard<'_, CtlState> {
    crate::threads::lock(&c.state)
}

/// What the job is, for the file's metadata.
pub struct Job<'a> {
    /// The process whose tree is the job (the command `gputrace run` started, the
    /// process `gputrace attach` opened a window in).
    pub pid: u32,
    pub cmdline: Vec<String>,
    /// `gputrace run`, `gputrace attach`.
    pub started_by: &'a str,
}

impl Recorder {
    /// Creates an environment file in `dir` and starts sampling for `job`; `None` when
    /// the settings leave NVML to the job or off. NVML is loaded on the sampler's thread:
    /// a missing or refusing one gives the file one `nvml` fact saying why, and no samples.
    pub fn start(dir: &Path, job: Job<'_>, s: &Settings) -> io::Result<Option<Recorder>> {
        let NvmlChoice::Command(lib) = &s.nvml else {
            return Ok(None);
        };
        let host = hostname();
        let (file, path) = super::owner::as_owner_of(dir, || create_file(dir, &host))?;
        let meta = Meta {
            writer: format!("gputrace {}", env!("CARGO_PKG_VERSION")),
            pid: std::process::id(),
            // SAFETY: getppid has no preconditions.
            ppid: unsafe { libc::getppid() } as u32,
            host,
            exe: std::env::current_exe()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            // The command's own GPUTRACE_KEEP_SECRETS decides, as for what it shows.
            cmdline: crate::secrets::cmdline(&job.cmdline),
            pointer_bits: usize::BITS,
            start_mono_ns: clock_ns(libc::CLOCK_MONOTONIC),
            start_real_ns: sampler::now_ns(),
            started_by: job.started_by.to_string(),
            // An unknown name's value may be anything: the name alone, as the library does.
            options: std::env::vars()
                .filter(|(k, _)| k.starts_with(protocol::SETTING_PREFIX))
                .map(|(k, v)| match protocol::setting(&k) {
                    Some(_) => (k, v),
                    None => (k, REDACTED.to_string()),
                })
                .collect(),
            kind: gputrace_format::META_KIND_ENVIRONMENT.to_string(),
            ..Default::default()
        };
        let w = match ChunkWriter::new(file, &meta) {
            Ok(w) => w,
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
        };
        let ctl = Arc::new(Ctl::default());
        let (lib, period, pid, c) = (lib.clone(), s.period, job.pid, ctl.clone());
        let gpm_period = s.gpm_period;
        let spec = Spec {
            first: block_signals,
            ..Spec::new(
                "gputrace-env",
                "internal error in the NVML recorder; its file keeps what it had",
            )
        };
        let started = SAMPLER.start(&POLICY, spec, move || {
            record(Out::new(w), lib.as_deref(), period, gpm_period, pid, &c);
        });
        match started {
            Ok(true) => Ok(Some(Recorder { path, ctl })),
            Ok(false) => {
                let _ = std::fs::remove_file(&path);
                Err(io::Error::other(
                    "the last recorder's thread is still in an NVML call",
                ))
            }
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                Err(e)
            }
        }
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The job's process `pid` ended so (`exit 1`, `signal SIGKILL 9`): written as the
    /// facts `job_pid` and `job_end` at the end of the file, for the report on its trace.
    pub fn note_job_end(&self, pid: u32, end: &str) {
        lock(&self.ctl).job_end = Some((pid, end.to_string()));
    }

    /// Asks for the last tick and waits at most `wait` for the file to be complete;
    /// returns its path. Past `wait` the thread is left to finish its NVML call and
    /// writes nothing more: the file keeps what it had.
    pub fn finish(mut self, wait: Duration) -> PathBuf {
        GPM.request_stop();
        if !SAMPLER.stop(wait) {
            // Taken while the thread writes a chunk: a chunk in progress is finished first.
            lock(&self.ctl).abandoned = true;
        }
        std::mem::take(&mut self.path)
    }
}

impl Drop for Recorder {
    /// Not finished (the caller failed on the way): the threads end after one more tick.
    fn drop(&mut self) {
        GPM.request_stop();
        SAMPLER.request_stop();
    }
}

/// The sampler thread: facts, then a tick every `period` until asked to stop, then the
/// last tick and a `Stopped` state (without NVML or ticks: the facts, and the `Stopped`
/// state when asked to stop). GPM is read on a thread of its own (see [`gpm_thread`]),
/// whose samples this thread writes.
fn record(
    mut out: Out,
    lib: Option<&Path>,
    period: Duration,
    gpm_period: Duration,
    job_pid: u32,
    ctl: &Arc<Ctl>,
) {
    let t0 = sampler::now_ns();
    // One NVML session for both threads (NVML counts initialisations; the last user
    // shuts it down).
    let nvml = Nvml::load(lib).map(Arc::new);
    out.add(sampler::fact_items(
        t0,
        sampler::trace_facts(nvml.as_ref().map(|n| &**n)),
    ));
    out.write(ctl);
    if let (Ok(n), false) = (&nvml, gpm_period.is_zero()) {
        start_gpm(n.clone(), gpm_period, ctl);
    }
    if let (Ok(nvml), false) = (&nvml, period.is_zero()) {
        let mut s = Sampler::new(nvml, job_pid, t0, Skip::default()).with_descendants();
        let mut written = Instant::now();
        loop {
            let mut items = Vec::new();
            s.tick(sampler::now_ns(), &mut items);
            out.add(items);
            let stop = SAMPLER.wait_stop(period);
            {
                let mut st = lock(ctl);
                st.focus = s.focus_mask();
                out.add(std::mem::take(&mut st.gpm));
            }
            if stop {
                // The last tick, as the job ends.
                let mut items = Vec::new();
                s.tick(sampler::now_ns(), &mut items);
                out.add(items);
                break;
            }
            if written.elapsed() >= FLUSH {
                out.write(ctl);
                written = Instant::now();
            }
        }
    } else {
        // Facts (and GPM samples) only: the Stopped state below still marks the job's
        // end, so that readers know which traces the facts were read for.
        let mut written = Instant::now();
        loop {
            let stop = SAMPLER.wait_stop(FLUSH);
            let items = std::mem::take(&mut lock(ctl).gpm);
            out.add(items);
            if stop {
                break;
            }
            if written.elapsed() >= FLUSH {
                out.write(ctl);
                written = Instant::now();
            }
        }
    }
    // The GPM thread's last pair, if it comes soon (it may be stuck in NVML).
    GPM.stop(GPM_LAST_WAIT);
    let (items, job_end) = {
        let mut st = lock(ctl);
        (std::mem::take(&mut st.gpm), st.job_end.take())
    };
    out.add(items);
    if let Some((pid, end)) = job_end {
        let fact = |key, value| gputrace_env::facts::Fact {
            device: gputrace_format::FACT_HOST,
            key,
            value,
        };
        out.add(sampler::fact_items(
            sampler::now_ns(),
            vec![
                fact(gputrace_env::facts::keys::JOB_PID, pid.to_string()),
                fact(gputrace_env::facts::keys::JOB_END, end),
            ],
        ));
    }
    out.events.push(Event::State {
        ts: sampler::now_ns(),
        state: CollectorState::Stopped as u8,
        reason: 0,
    });
    out.write_end(ctl);
}

/// Starts the GPM thread (none where it could not be started: no GPM samples).
fn start_gpm(nvml: Arc<Nvml>, period: Duration, ctl: &Arc<Ctl>) {
    let c = ctl.clone();
    let spec = Spec {
        first: block_signals,
        ..Spec::new(
            "gputrace-gpm",
            "internal error in the GPM recorder; no more GPM samples",
        )
    };
    let _ = GPM.start(&POLICY, spec, move || gpm_thread(&nvml, period, &c));
}

/// NVML GPM every `period`: a `gpm` fact per GPU (`ok` or why not), then one
/// [`gputrace_format::CounterSample`] per GPU and pair of samples, handed to the
/// sampler thread. A thread of its own: a GPM call that hangs holds only this thread,
/// which the command does not wait for.
fn gpm_thread(nvml: &Nvml, period: Duration, ctl: &Ctl) {
    let n = nvml.device_count().unwrap_or(0).min(64);
    let all: Vec<u32> = (0..n).collect();
    let (mut gpm, facts) = gputrace_env::gpm::GpmSampler::new(nvml, &all);
    lock(ctl)
        .gpm
        .extend(sampler::fact_items(sampler::now_ns(), facts));
    if gpm.is_empty() {
        return;
    }
    // Ticks on a fixed schedule, so the pairs stay evenly spaced whatever a read costs.
    let mut next = Instant::now();
    loop {
        let focus = lock(ctl).focus;
        let want = |i: u32| focus == 0 || (i < 64 && focus >> i & 1 == 1);
        let mut samples = Vec::new();
        gpm.tick(sampler::now_ns(), want, &mut samples);
        {
            let mut st = lock(ctl);
            st.gpm
                .extend(samples.into_iter().map(sampler::Item::Counter));
            if st.abandoned {
                return;
            }
        }
        next += period;
        let now = Instant::now();
        if next <= now {
            // Fell behind (a slow read): skip the missed ticks.
            next = now + period;
        }
        let stop = GPM.wait_stop(next - now);
        if stop {
            // The last pair, up to the job's end.
            let mut samples = Vec::new();
            gpm.tick(sampler::now_ns(), want, &mut samples);
            lock(ctl)
                .gpm
                .extend(samples.into_iter().map(sampler::Item::Counter));
            return;
        }
        if gpm.is_empty() {
            return;
        }
    }
}

/// The file's writer with its string interner.
struct Out {
    w: ChunkWriter<File>,
    enc: Encoder,
    events: Vec<Event>,
    ids: HashMap<String, u32>,
    /// A write failed (disk full): nothing more is written.
    failed: bool,
}

impl Out {
    fn new(w: ChunkWriter<File>) -> Out {
        Out {
            w,
            enc: Encoder::new(),
            events: Vec::new(),
            ids: HashMap::new(),
            failed: false,
        }
    }

    /// Items as events, each string written once (a `Str` event before its first use).
    fn add(&mut self, items: impl IntoIterator<Item = sampler::Item>) {
        let ids = &mut self.ids;
        let mut intern = |text: &str, out: &mut Vec<Event>| -> u32 {
            if let Some(id) = ids.get(text) {
                return *id;
            }
            let id = ids.len() as u32 + 1;
            ids.insert(text.to_string(), id);
            out.push(Event::Str {
                id,
                text: text.to_string(),
            });
            id
        };
        for it in items {
            it.into_events(&mut intern, &mut self.events);
        }
    }

    /// Writes the events so far as one chunk, unless the caller stopped waiting.
    fn write(&mut self, ctl: &Ctl) {
        self.write_chunk(ctl, false)
    }

    /// [`Out::write`] for the file's last chunk, holding its end record.
    fn write_end(&mut self, ctl: &Ctl) {
        self.write_chunk(ctl, true)
    }

    fn write_chunk(&mut self, ctl: &Ctl, end: bool) {
        // Held while writing, so that a caller giving up waits for a chunk in progress
        // rather than reading half of it.
        let st = lock(ctl);
        if st.abandoned || self.failed {
            return;
        }
        for e in self.events.drain(..) {
            self.enc.push(&e);
        }
        let w = if end {
            ChunkWriter::write_end
        } else {
            ChunkWriter::write_events
        };
        self.failed = w(&mut self.w, &mut self.enc).is_err();
    }
}

/// The sampler thread takes no asynchronous signals: they go to the command's main
/// thread (`gputrace run` relays them to the job from there), and NVML's calls are never
/// interrupted by them.
fn block_signals() {
    // SAFETY: a signal set built in place and applied to this thread only; faults
    // (synchronous signals) stay unblocked.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        for s in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGFPE,
            libc::SIGILL,
            libc::SIGTRAP,
            libc::SIGABRT,
            libc::SIGSYS,
        ] {
            libc::sigdelset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Creates the environment file (mode 0600, never over another file).
fn create_file(dir: &Path, host: &str) -> io::Result<(File, PathBuf)> {
    use std::os::unix::fs::OpenOptionsExt;
    for seq in 0..1000 {
        let path = dir.join(protocol::env_file_name(host, std::process::id(), seq));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(&path)
        {
            Ok(f) => return Ok((f, path)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("too many environment files for this pid"))
}

/// This machine's name as trace files and their metadata spell it (as the library does).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length.
    if unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) } != 0 {
        return "unknown".into();
    }
    let n = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    TraceFileName::host_part(&String::from_utf8_lossy(&buf[..n]))
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid, writable timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000) + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nvml_setting_as_the_command_reads_it() {
        let p = |v: Option<&str>| NvmlChoice::parse(v.map(OsStr::new));
        assert_eq!(p(None), NvmlChoice::Command(None));
        assert_eq!(p(Some("1")), NvmlChoice::Command(None));
        assert_eq!(p(Some("")), NvmlChoice::Command(None));
        assert_eq!(p(Some("off")), NvmlChoice::Off);
        assert_eq!(p(Some("0")), NvmlChoice::Off);
        assert_eq!(p(Some("inprocess")), NvmlChoice::InProcess);
        assert_eq!(
            p(Some("/opt/libnvidia-ml.so.1")),
            NvmlChoice::Command(Some("/opt/libnvidia-ml.so.1".into()))
        );
        // The job samples nothing itself unless asked to.
        assert_eq!(p(None).for_job(), Some((settings::NVML, "0")));
        assert_eq!(p(Some("0")).for_job(), Some((settings::NVML, "0")));
        assert_eq!(p(Some("inprocess")).for_job(), None);
        let (s, w) = Settings::parse(None, Some(OsStr::new("0")), None);
        assert_eq!((s.period, w), (Duration::ZERO, None));
        assert_eq!(s.gpm_period, DEFAULT_GPM_PERIOD);
        let (s, w) = Settings::parse(None, Some(OsStr::new("5")), None);
        assert_eq!(s.period, DEFAULT_PERIOD);
        assert!(w.unwrap().contains("GPUTRACE_NVML_MS"));
        let (s, w) = Settings::parse(None, None, Some(OsStr::new("20")));
        assert_eq!((s.gpm_period, w), (Duration::from_millis(20), None));
        let (s, w) = Settings::parse(None, None, Some(OsStr::new("0")));
        assert_eq!((s.gpm_period, w), (Duration::ZERO, None));
        let (s, w) = Settings::parse(None, None, Some(OsStr::new("fast")));
        assert_eq!(s.gpm_period, DEFAULT_GPM_PERIOD);
        assert!(w.unwrap().contains("GPUTRACE_GPM_MS"));
    }

    #[test]
    fn a_missing_nvml_gives_a_complete_file_with_its_reason() {
        let dir = std::env::temp_dir().join(format!("gputrace-envrec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let s = Settings {
            nvml: NvmlChoice::Command(Some("/nonexistent/libnvidia-ml.so.1".into())),
            period: DEFAULT_PERIOD,
            gpm_period: DEFAULT_GPM_PERIOD,
        };
        let job = Job {
            pid: 1,
            cmdline: vec!["job".into()],
            started_by: "test",
        };
        let r = Recorder::start(&dir, job, &s).unwrap().expect("a recorder");
        let path = r.finish(Duration::from_secs(60));
        let t = crate::Trace::load(&path).expect("read it back");
        std::fs::remove_dir_all(&dir).ok();
        assert!(t.meta.is_environment());
        assert_eq!(t.meta.pid, std::process::id());
        assert!(!t.stats.cut_short(), "{:?}", t.stats);
        let why = crate::report::environment::nvml_unavailable(&t).expect("the nvml fact");
        assert!(why.starts_with("missing: "), "{why}");
        assert!(t.gpu_samples.is_empty());
        // Off, or left to the job: no file.
        for nvml in [NvmlChoice::Off, NvmlChoice::InProcess] {
            let s = Settings { nvml, ..s.clone() };
            let job = Job {
                pid: 1,
                cmdline: Vec::new(),
                started_by: "test",
            };
            assert!(Recorder::start(Path::new("/nonexistent"), job, &s)
                .unwrap()
                .is_none());
        }
    }
}
