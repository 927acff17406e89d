//! Settings, read once from `GPUTRACE_*` variables (their names and meanings:
//! `gputrace_format::protocol::SETTINGS`). Bad values and unknown names are ignored,
//! the defaults kept, and said in one warning line per process; they never stop the
//! host process.

use gputrace_format::protocol::{
    self, default_flag, default_number, settings as set, ReadBy, Value,
};
use gputrace_format::redact::REDACTED;
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Trace from CUDA initialisation to exit (the default).
    Trace,
    /// Loaded, recording nothing, until asked.
    Dormant,
    /// Do nothing at all.
    Off,
}

/// When driver-API calls are recorded (`GPUTRACE_DRIVER_API`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverApi {
    /// Never.
    Off,
    /// Copies, syncs and graph launches from the start; kernel launches once kernels
    /// that no recorded runtime call launched are seen, or a driver call of the
    /// program's own is (`base::cupti::claims`). Opt-in: cuBLAS launches through the driver,
    /// and CUPTI holds a GPU-bound program's kernel records until a buffer fills.
    Auto,
    /// Every one from the start (the default).
    On,
}

impl DriverApi {
    pub fn parse(v: &str) -> Option<DriverApi> {
        match (
            protocol::parse_flag(v),
            v.trim().to_ascii_lowercase().as_str(),
        ) {
            (Some(true), _) => Some(DriverApi::On),
            (Some(false), _) => Some(DriverApi::Off),
            (None, "auto") => Some(DriverApi::Auto),
            _ => None,
        }
    }
}

/// The host sampler's settings (`GPUTRACE_HOST`, `GPUTRACE_HOST_THREAD_MS`,
/// `GPUTRACE_HOST_TREE_MS`): on or off, and its two periods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostSettings {
    pub on: bool,
    /// The CUDA-issuing threads' period.
    pub thread_period: std::time::Duration,
    /// The process tree's and the machine's period.
    pub tree_period: std::time::Duration,
    /// The Python stack samples' period (`GPUTRACE_PYSAMPLE_MS`; zero: none).
    pub py_period: std::time::Duration,
    /// Every thread of the process, the GIL and every Python thread's stack while a
    /// CUDA-issuing thread is blocked (`GPUTRACE_HOST_ALL_THREADS`).
    pub all_threads: bool,
}

impl Default for HostSettings {
    fn default() -> HostSettings {
        HostSettings {
            on: default_flag(set::HOST),
            thread_period: std::time::Duration::from_millis(default_number(set::HOST_THREAD_MS)),
            tree_period: std::time::Duration::from_millis(default_number(set::HOST_TREE_MS)),
            py_period: std::time::Duration::from_millis(default_number(set::PYSAMPLE_MS)),
            all_threads: default_flag(set::HOST_ALL_THREADS),
        }
    }
}

/// Which NVML the environment sampler loads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NvmlLib {
    /// The driver's `libnvidia-ml.so.1`, through the loader's search path.
    Default,
    Path(PathBuf),
    /// None: the trace gets the host facts only.
    Off,
}

/// Default NVML sampling period (the settings table's).
pub const NVML_MS_DEFAULT: u64 = default_number(set::NVML_MS);

/// What the library says when `GPUTRACE_PM` is set.
pub const PM_REMOVED: &str = "GPUTRACE_PM: in-process PM sampling was removed (it could crash the job at exit); `gputrace run` and `gputrace attach` record the GPU's SM activity, occupancy, tensor/FP pipes and DRAM bandwidth with NVML GPM from outside the job (GPUTRACE_GPM_MS)";

#[derive(Clone, Debug)]
pub struct Opts {
    pub mode: Mode,
    /// Where trace files go (`GPUTRACE_DIR`, default `./gputrace-traces`).
    pub dir: PathBuf,
    /// Explicit CUPTI library (`GPUTRACE_CUPTI`).
    pub cupti: Option<PathBuf>,
    /// Size of one CUPTI activity buffer (`GPUTRACE_BUFFER_KB`).
    pub buffer_bytes: usize,
    /// Most CUPTI buffer memory to hold at once (`GPUTRACE_BUFFER_POOL_MB`).
    pub pool_bytes: usize,
    /// Longest time between two writes to the trace file (`GPUTRACE_FLUSH_MS`).
    pub flush_ms: u64,
    /// Record driver-API launches, async copies and syncs (cuLaunchKernel*, cuGraphLaunch,
    /// cuMemcpy*Async, cu*Synchronize), e.g. from JAX or Triton (`GPUTRACE_DRIVER_API`):
    /// all from the start by default.
    pub driver_api: DriverApi,
    /// CUPTI activity kinds to enable (`GPUTRACE_ACTIVITY`, comma-separated names of
    /// kernel, memcpy, memset, sync, device, memory; default all). `kernel` alone with
    /// `GPUTRACE_API=0` and `GPUTRACE_HOOKS=0` is the CUPTI floor benchmark mode.
    pub activity: Vec<String>,
    /// Symbol hooks (copies, NCCL, NVTX) record while tracing (`GPUTRACE_HOOKS`).
    pub hooks: bool,
    /// Record the host side of runtime API calls through CUPTI callbacks (`GPUTRACE_API`,
    /// default on).
    pub runtime_api: bool,
    /// Record them as CUPTI RUNTIME activity, filtered to our callback ids, instead
    /// (`GPUTRACE_API=activity`): no callback into us on the program's thread, but no
    /// call parameters either.
    pub api_activity: bool,
    /// CUPTI tuning, for the cost experiments of bench/RESULTS.md:
    /// `GPUTRACE_PER_THREAD_BUFFERS` (CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER),
    /// `GPUTRACE_DEVICE_BUFFER_MB` (CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE),
    /// `GPUTRACE_ZEROED_BUFFERS` (our pre-zeroed buffers promised to CUPTI, default on),
    /// `GPUTRACE_CUPTI_FLUSH_MS` (CUPTI's flush period; 0: CUPTI's own policy; default
    /// GPUTRACE_FLUSH_MS).
    pub per_thread_buffers: bool,
    pub device_buffer_mb: Option<usize>,
    pub zeroed_buffers: bool,
    pub cupti_flush_ms: Option<u64>,
    /// zstd-compress the trace's events chunks (`GPUTRACE_COMPRESS`, default on).
    pub compress: bool,
    /// Longest wait at exit for the trace to be written (`GPUTRACE_EXIT_WAIT_MS`).
    pub exit_wait_ms: u64,
    /// No GPU progress for this long while work is outstanding is a stall: a forced
    /// CUPTI flush and a stall report (`GPUTRACE_STALL_MS`, default
    /// [`STALL_MS_DEFAULT`]; 0: no watchdog).
    pub stall_ms: u64,
    /// Production mode triggers: `GPUTRACE_SIGNAL` (SIGUSR1/SIGUSR2), and a timed window
    /// `GPUTRACE_START_AFTER` + `GPUTRACE_DURATION`.
    pub signal: Option<String>,
    pub start_after: Option<std::time::Duration>,
    pub duration: Option<std::time::Duration>,
    /// The host sampler (`GPUTRACE_HOST`, default on; `GPUTRACE_HOST_THREAD_MS`, the
    /// CUDA threads' period, default 3; `GPUTRACE_HOST_TREE_MS`, the process tree's and
    /// the machine's, default 100).
    pub host: HostSettings,
    /// Frames kept of the caller's Python stack at the calls that matter
    /// (`GPUTRACE_PYSTACK`: 0 off, 1/on the default [`PYSTACK_DEPTH`], 2-16).
    pub pystack: usize,
    /// Print what the library does (`GPUTRACE_DEBUG`).
    pub debug: bool,
    /// The NVML library for the in-process environment sampler (`GPUTRACE_NVML`: `1` or
    /// `inprocess` for `libnvidia-ml.so.1`, or a path; off by default, and `gputrace run`
    /// sets `0` for its job while it samples NVML from its own process).
    pub nvml: NvmlLib,
    /// NVML sampling period in a trace window (`GPUTRACE_NVML_MS`, default 100; 0: the
    /// facts only, no sampling).
    pub nvml_ms: u64,
    /// `GPUTRACE_PM` was asked for: in-process PM sampling is removed, and the library
    /// says so once (the job runs on unchanged).
    pub pm_removed: bool,
    /// `GPUTRACE_NVML_SKIP`: NVML reads left out.
    pub nvml_skip: gputrace_env::sampler::Skip,
    /// This process's rank in its job and on its node, and the variable each came from
    /// (`protocol::RANK_VARS`, `protocol::LOCAL_RANK_VARS`).
    pub rank: Option<(u32, String)>,
    pub local_rank: Option<(u32, String)>,
    /// Store the command line as it is, secrets and all (`GPUTRACE_KEEP_SECRETS`); by
    /// default it is redacted (`gputrace_format::redact`).
    pub keep_secrets: bool,
    /// The variables as read, for the trace's metadata: every `GPUTRACE_*` one (an
    /// unknown one's value redacted), and the launchers' rank variables that are set.
    pub raw: Vec<(String, String)>,
    /// What was wrong with the settings, one clause each ([`Opts::warning`] joins them).
    pub warnings: Vec<String>,
}

impl Default for Opts {
    fn default() -> Opts {
        Opts {
            mode: Mode::Trace,
            dir: PathBuf::from(protocol::DEFAULT_TRACE_DIR),
            cupti: None,
            // Every number and flag below comes from the settings table's defaults.
            buffer_bytes: (default_number(set::BUFFER_KB) as usize) << 10,
            pool_bytes: (default_number(set::BUFFER_POOL_MB) as usize) << 20,
            flush_ms: default_number(set::FLUSH_MS),
            driver_api: DriverApi::parse(protocol::default_text(set::DRIVER_API))
                .unwrap_or(DriverApi::On),
            activity: DEFAULT_ACTIVITY.iter().map(|s| s.to_string()).collect(),
            hooks: default_flag(set::HOOKS),
            runtime_api: true,
            api_activity: false,
            per_thread_buffers: default_flag(set::PER_THREAD_BUFFERS),
            device_buffer_mb: None,
            zeroed_buffers: default_flag(set::ZEROED_BUFFERS),
            cupti_flush_ms: None,
            compress: default_flag(set::COMPRESS),
            exit_wait_ms: default_number(set::EXIT_WAIT_MS),
            stall_ms: STALL_MS_DEFAULT,
            signal: None,
            start_after: None,
            duration: None,
            host: HostSettings::default(),
            pystack: PYSTACK_DEPTH,
            debug: default_flag(set::DEBUG),
            // Off by default: on the H200, NVML sampling from a thread of the traced
            // process hung PyTorch at its first kernel launches (bench/results/2026-12-03-run5-wave).
            nvml: NvmlLib::Off,
            nvml_ms: NVML_MS_DEFAULT,
            pm_removed: false,
            nvml_skip: Default::default(),
            rank: None,
            local_rank: None,
            keep_secrets: default_flag(set::KEEP_SECRETS),
            raw: Vec::new(),
            warnings: Vec::new(),
        }
    }
}

/// `GPUTRACE_STALL_MS`'s default (the settings table's, which says why).
pub const STALL_MS_DEFAULT: u64 = default_number(set::STALL_MS);

/// Python stack frames kept by default (`GPUTRACE_PYSTACK=1`).
pub const PYSTACK_DEPTH: usize = 16;
/// Most Python stack frames kept.
pub const PYSTACK_MAX: usize = 16;

/// Names accepted by `GPUTRACE_ACTIVITY`.
pub const ACTIVITY_NAMES: &[&str] = &[
    "kernel", "memcpy", "memset", "sync", "device", "memory", "graph",
];
/// Kinds on by default: all but SYNCHRONIZATION, which cost more on a launch-bound loop
/// than any other kind (1.40x against 1.21x for kernel records alone, H200 sweep in
/// bench/RESULTS.md) and adds nothing the runtime callbacks on the sync calls do not
/// record; `GPUTRACE_ACTIVITY=...,sync` brings it back.
pub const DEFAULT_ACTIVITY: &[&str] = &["kernel", "memcpy", "memset", "device", "memory"];

use protocol::parse_flag as parse_bool;

impl Opts {
    /// Reads the settings from a list of (name, value) pairs (the environment).
    pub fn from_vars<I: IntoIterator<Item = (String, String)>>(vars: I) -> Opts {
        let mut o = Opts::default();
        for (k, v) in vars {
            if !k.starts_with(protocol::SETTING_PREFIX) {
                let launcher = protocol::RANK_VARS.contains(&k.as_str())
                    || protocol::LOCAL_RANK_VARS.contains(&k.as_str());
                if launcher {
                    o.raw.push((k, v));
                }
                continue;
            }
            let Some(setting) = protocol::setting(&k) else {
                // A mistyped or foreign name may hold anything (a token): its name alone.
                o.raw.push((k.clone(), REDACTED.to_string()));
                o.warnings.push(format!("{k} unknown, ignored"));
                continue;
            };
            o.raw.push((k.clone(), v.clone()));
            if matches!(setting.read_by, ReadBy::Command | ReadBy::Developer) {
                // Read by the `gputrace` command or the project's tests, not here.
                continue;
            }
            // Flags and numbers are parsed and range-checked by the table; the rest here.
            let taken = match setting.value {
                Value::Flag => setting
                    .flag(&v)
                    .map(|b| o.set_flag(setting.name, b))
                    .ok_or(()),
                Value::Number { .. } => setting
                    .number(&v)
                    .map(|n| o.set_number(setting.name, n))
                    .ok_or(()),
                Value::Text => o.set_text(setting.name, &v).map_err(|_| ()),
            };
            if taken.is_err() {
                let what = match setting.value {
                    Value::Text => Opts::text_expected(setting.name).to_string(),
                    _ => setting.expected(),
                };
                o.warnings
                    .push(format!("{k}={v:?} ignored (expected {what})"));
            }
        }
        o.rank = protocol::rank_from(&o.raw, protocol::RANK_VARS).map(|(r, k)| (r, k.into()));
        o.local_rank =
            protocol::rank_from(&o.raw, protocol::LOCAL_RANK_VARS).map(|(r, k)| (r, k.into()));
        if o.pool_bytes < o.buffer_bytes {
            o.warnings.push(format!(
                "{} below one buffer, using {} MiB",
                set::BUFFER_POOL_MB,
                o.buffer_bytes >> 20
            ));
            o.pool_bytes = o.buffer_bytes;
        }
        o
    }

    /// A flag of the table, parsed.
    fn set_flag(&mut self, name: &str, b: bool) {
        match name {
            set::HOOKS => self.hooks = b,
            set::PER_THREAD_BUFFERS => self.per_thread_buffers = b,
            set::COMPRESS => self.compress = b,
            set::ZEROED_BUFFERS => self.zeroed_buffers = b,
            set::DEBUG => self.debug = b,
            set::HOST => self.host.on = b,
            set::HOST_ALL_THREADS => self.host.all_threads = b,
            set::KEEP_SECRETS => self.keep_secrets = b,
            // The command's or the tests'.
            _ => {}
        }
    }

    /// A number of the table, parsed and within its range.
    fn set_number(&mut self, name: &str, n: u64) {
        let ms = std::time::Duration::from_millis(n);
        match name {
            set::BUFFER_KB => self.buffer_bytes = (n as usize) << 10,
            set::BUFFER_POOL_MB => self.pool_bytes = (n as usize) << 20,
            set::FLUSH_MS => self.flush_ms = n,
            set::EXIT_WAIT_MS => self.exit_wait_ms = n,
            set::DEVICE_BUFFER_MB => self.device_buffer_mb = Some(n as usize),
            set::CUPTI_FLUSH_MS => self.cupti_flush_ms = Some(n),
            set::HOST_THREAD_MS => self.host.thread_period = ms,
            set::HOST_TREE_MS => self.host.tree_period = ms,
            set::PYSAMPLE_MS => self.host.py_period = ms,
            set::STALL_MS => self.stall_ms = n,
            set::NVML_MS => self.nvml_ms = n,
            // The command's (GPUTRACE_GPM_MS).
            _ => {}
        }
    }

    /// What a text setting read here takes, for the warning.
    fn text_expected(name: &str) -> &'static str {
        match name {
            set::MODE => "trace, dormant or off",
            set::DIR => "a directory",
            set::ACTIVITY => "a comma-separated list of kernel, memcpy, memset, sync, device, memory that includes kernel",
            set::API => "0, 1, callbacks or activity",
            set::SIGNAL => "SIGUSR1 or SIGUSR2",
            set::START_AFTER => "a duration such as 30s, from 1ms to 24h",
            set::DURATION => "a duration such as 10s, from 1ms to 24h",
            set::PYSTACK => "0, 1, or frames to keep from 2 to 16",
            set::NVML_SKIP => "a comma-separated list from events, procs, ecc, pcie, ticks",
            set::RANK => "a whole number",
            _ => "a value it takes (docs/settings.md)",
        }
    }

    /// A text setting: parsed by its own rule; `Err` when it does not take `v`.
    fn set_text(&mut self, name: &str, v: &str) -> Result<(), ()> {
        match name {
            set::MODE => match v.trim().to_ascii_lowercase().as_str() {
                "trace" | "" => self.mode = Mode::Trace,
                "dormant" => self.mode = Mode::Dormant,
                "off" | "0" => self.mode = Mode::Off,
                _ => return Err(()),
            },
            set::DIR => {
                if v.is_empty() {
                    return Err(());
                }
                self.dir = PathBuf::from(v)
            }
            set::CUPTI if !v.is_empty() => self.cupti = Some(PathBuf::from(v)),
            set::ACTIVITY => {
                let names: Vec<String> = v
                    .split(',')
                    .map(|s| s.trim().to_ascii_lowercase())
                    .filter(|s| !s.is_empty())
                    .collect();
                if !(names.iter().all(|n| ACTIVITY_NAMES.contains(&n.as_str()))
                    && names.iter().any(|n| n == "kernel"))
                {
                    return Err(());
                }
                self.activity = names;
            }
            set::DRIVER_API => self.driver_api = DriverApi::parse(v).ok_or(())?,
            set::API => match (parse_bool(v), v.trim()) {
                (Some(b), _) => {
                    self.runtime_api = b;
                    self.api_activity = false;
                }
                (None, "callback" | "callbacks") => {
                    self.runtime_api = true;
                    self.api_activity = false;
                }
                (None, "activity") => {
                    self.runtime_api = false;
                    self.api_activity = true;
                }
                _ => return Err(()),
            },
            set::SIGNAL => match v.trim().trim_start_matches("SIG") {
                "" => {}
                "USR1" | "USR2" => self.signal = Some(v.trim().to_string()),
                _ => return Err(()),
            },
            set::START_AFTER => {
                self.start_after = Some(protocol::parse_duration(v).map_err(|_| ())?)
            }
            set::DURATION => self.duration = Some(protocol::parse_duration(v).map_err(|_| ())?),
            set::PYSTACK => match (parse_bool(v), v.trim().parse::<usize>()) {
                (_, Ok(n)) if (2..=PYSTACK_MAX).contains(&n) => self.pystack = n,
                (Some(true), _) => self.pystack = PYSTACK_DEPTH,
                (Some(false), _) => self.pystack = 0,
                _ => return Err(()),
            },
            set::NVML => match v.trim() {
                "" => self.nvml = NvmlLib::Off,
                t if parse_bool(t) == Some(true) || t == protocol::NVML_IN_PROCESS => {
                    self.nvml = NvmlLib::Default
                }
                t if parse_bool(t) == Some(false) => self.nvml = NvmlLib::Off,
                t => self.nvml = NvmlLib::Path(PathBuf::from(t)),
            },
            // Removed; accepted so that no job fails or warns for asking.
            set::PM => self.pm_removed = parse_bool(v) != Some(false),
            set::PM_US => {}
            set::NVML_SKIP => {
                self.nvml_skip = gputrace_env::sampler::Skip::parse(v).ok_or(())?;
            }
            set::RANK => {
                v.trim().parse::<u32>().map_err(|_| ())?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Everything wrong with the settings, as one line (`None` when all is well).
    pub fn warning(&self) -> Option<String> {
        (!self.warnings.is_empty()).then(|| format!("settings: {}", self.warnings.join("; ")))
    }

    /// The note for a removed setting that was asked for (one line), if any.
    pub fn note(&self) -> Option<&'static str> {
        self.pm_removed.then_some(PM_REMOVED)
    }

    /// The settings of this process: from its environment, or, under secure execution
    /// (a setuid, setgid or file-capability program, `base::secure`), none at all and
    /// the library off.
    pub fn from_env() -> Opts {
        if crate::base::secure::secure_execution() {
            return Opts::inert();
        }
        Opts::from_vars(crate::base::secure::vars())
    }

    /// Off, with nothing read from the environment.
    pub fn inert() -> Opts {
        Opts {
            mode: Mode::Off,
            ..Opts::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(pairs: &[(&str, &str)]) -> Opts {
        Opts::from_vars(pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())))
    }

    #[test]
    fn defaults() {
        let d = o(&[]);
        assert_eq!(d.mode, Mode::Trace);
        assert_eq!(d.dir, PathBuf::from("gputrace-traces"));
        assert!(d.warnings.is_empty());
    }

    #[test]
    fn good_values() {
        let d = o(&[
            ("GPUTRACE_MODE", "dormant"),
            ("GPUTRACE_DIR", "/tmp/x"),
            ("GPUTRACE_BUFFER_KB", "1024"),
            ("GPUTRACE_FLUSH_MS", "100"),
            ("GPUTRACE_DRIVER_API", "0"),
            ("GPUTRACE_ACTIVITY", "kernel, memcpy"),
        ]);
        assert_eq!(d.activity, vec!["kernel", "memcpy"]);
        assert_eq!(d.mode, Mode::Dormant);
        assert_eq!(d.dir, PathBuf::from("/tmp/x"));
        assert_eq!(d.buffer_bytes, 1 << 20);
        assert_eq!(d.flush_ms, 100);
        assert_eq!(d.driver_api, DriverApi::Off);
        assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    }

    #[test]
    fn host_sampler_settings() {
        let d = o(&[]);
        assert!(d.host.on);
        assert_eq!(d.host.thread_period, std::time::Duration::from_millis(3));
        assert_eq!(d.host.tree_period, std::time::Duration::from_millis(100));
        let d = o(&[
            ("GPUTRACE_HOST", "0"),
            ("GPUTRACE_HOST_THREAD_MS", "5"),
            ("GPUTRACE_HOST_TREE_MS", "50"),
        ]);
        assert!(!d.host.on);
        assert_eq!(d.host.thread_period, std::time::Duration::from_millis(5));
        assert_eq!(d.host.tree_period, std::time::Duration::from_millis(50));
        assert_eq!(d.host.py_period, std::time::Duration::from_millis(10));
        assert!(d.warnings.is_empty(), "{:?}", d.warnings);
        let d = o(&[("GPUTRACE_PYSAMPLE_MS", "0")]);
        assert_eq!(d.host.py_period, std::time::Duration::ZERO);
        let d = o(&[("GPUTRACE_PYSAMPLE_MS", "25")]);
        assert_eq!(d.host.py_period, std::time::Duration::from_millis(25));
        let d = o(&[("GPUTRACE_PYSAMPLE_MS", "5000")]);
        assert_eq!(d.host.py_period, std::time::Duration::from_millis(10));
        assert!(!d.warnings.is_empty());
        let d = o(&[
            ("GPUTRACE_HOST_THREAD_MS", "0"),
            ("GPUTRACE_HOST_TREE_MS", "5"),
        ]);
        assert_eq!(d.host, HostSettings::default());
        assert_eq!(d.warnings.len(), 2);
    }

    #[test]
    fn python_stack_depth() {
        assert_eq!(o(&[]).pystack, PYSTACK_DEPTH);
        assert_eq!(o(&[("GPUTRACE_PYSTACK", "0")]).pystack, 0);
        assert_eq!(o(&[("GPUTRACE_PYSTACK", "off")]).pystack, 0);
        assert_eq!(o(&[("GPUTRACE_PYSTACK", "1")]).pystack, PYSTACK_DEPTH);
        assert_eq!(o(&[("GPUTRACE_PYSTACK", "12")]).pystack, 12);
        let d = o(&[("GPUTRACE_PYSTACK", "40")]);
        assert_eq!(d.pystack, PYSTACK_DEPTH);
        assert_eq!(d.warnings.len(), 1);
    }

    #[test]
    fn cupti_tuning_values() {
        let d = o(&[
            ("GPUTRACE_API", "activity"),
            ("GPUTRACE_PER_THREAD_BUFFERS", "1"),
            ("GPUTRACE_DEVICE_BUFFER_MB", "64"),
            ("GPUTRACE_ZEROED_BUFFERS", "0"),
            ("GPUTRACE_CUPTI_FLUSH_MS", "0"),
        ]);
        assert!(d.api_activity && !d.runtime_api);
        assert!(d.per_thread_buffers && !d.zeroed_buffers);
        assert_eq!(d.device_buffer_mb, Some(64));
        assert_eq!(d.cupti_flush_ms, Some(0));
        assert!(d.warnings.is_empty(), "{:?}", d.warnings);
        let d = o(&[
            ("GPUTRACE_API", "sometimes"),
            ("GPUTRACE_DEVICE_BUFFER_MB", "0"),
        ]);
        assert!(d.runtime_api && !d.api_activity);
        assert_eq!(d.device_buffer_mb, None);
        assert_eq!(d.warnings.len(), 2);
    }

    #[test]
    fn nvml_settings() {
        let d = o(&[]);
        assert_eq!((d.nvml.clone(), d.nvml_ms), (NvmlLib::Off, 100));
        assert_eq!(o(&[("GPUTRACE_NVML", "1")]).nvml, NvmlLib::Default);
        // `gputrace run`'s word for sampling in the process: the default library here.
        assert_eq!(o(&[("GPUTRACE_NVML", "inprocess")]).nvml, NvmlLib::Default);
        let d = o(&[
            ("GPUTRACE_NVML", "/opt/libnvidia-ml.so.1"),
            ("GPUTRACE_NVML_MS", "0"),
        ]);
        assert_eq!(
            d.nvml,
            NvmlLib::Path(PathBuf::from("/opt/libnvidia-ml.so.1"))
        );
        assert_eq!(d.nvml_ms, 0);
        let d = o(&[("GPUTRACE_NVML", "off"), ("GPUTRACE_NVML_MS", "5")]);
        assert_eq!(d.nvml, NvmlLib::Off);
        assert_eq!(d.nvml_ms, 100);
        assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
    }

    #[test]
    fn the_removed_pm_setting_is_a_note_not_a_warning() {
        assert_eq!(o(&[]).note(), None);
        assert_eq!(o(&[("GPUTRACE_PM", "0")]).note(), None);
        for v in ["1", "on", "maybe"] {
            let d = o(&[("GPUTRACE_PM", v), ("GPUTRACE_PM_US", "5")]);
            assert!(d.warnings.is_empty(), "{:?}", d.warnings);
            let n = d.note().expect("a note");
            assert!(n.contains("removed") && n.contains("GPM"), "{n}");
        }
    }

    #[test]
    fn the_stall_watchdog_setting() {
        assert_eq!(o(&[]).stall_ms, STALL_MS_DEFAULT);
        assert_eq!(o(&[("GPUTRACE_STALL_MS", "0")]).stall_ms, 0);
        assert_eq!(o(&[("GPUTRACE_STALL_MS", "250")]).stall_ms, 250);
        let d = o(&[("GPUTRACE_STALL_MS", "5")]);
        assert_eq!(d.stall_ms, STALL_MS_DEFAULT);
        assert!(!d.warnings.is_empty());
    }

    #[test]
    fn bad_values_warn_and_keep_defaults() {
        let d = o(&[
            ("GPUTRACE_MODE", "sometimes"),
            ("GPUTRACE_BUFFER_KB", "-5"),
            ("GPUTRACE_FLUSH_MS", "100000"),
            ("GPUTRACE_DEBUG", "maybe"),
            ("GPUTRACE_FROB", "1"),
            ("GPUTRACE_ACTIVITY", "memcpy"),
        ]);
        assert_eq!(d.activity.len(), DEFAULT_ACTIVITY.len());
        assert_eq!(d.mode, Mode::Trace);
        assert_eq!(d.buffer_bytes, Opts::default().buffer_bytes);
        assert_eq!(d.flush_ms, Opts::default().flush_ms);
        assert!(!d.debug);
        assert_eq!(d.warnings.len(), 6, "{:?}", d.warnings);
    }

    #[test]
    fn unknown_settings_are_named_without_their_value() {
        let d = o(&[("GPUTRACE_FROB", "secretvalue"), ("GPUTRACE_DEBUG", "1")]);
        assert_eq!(
            d.raw,
            vec![
                ("GPUTRACE_FROB".to_string(), REDACTED.to_string()),
                ("GPUTRACE_DEBUG".to_string(), "1".to_string()),
            ]
        );
        let line = d.warning().unwrap();
        assert!(line.contains("GPUTRACE_FROB unknown"), "{line}");
        assert!(!line.contains("secretvalue"), "{line}");
    }

    #[test]
    fn secrets_are_kept_only_when_asked() {
        assert!(!o(&[]).keep_secrets);
        assert!(o(&[("GPUTRACE_KEEP_SECRETS", "1")]).keep_secrets);
        assert!(!o(&[("GPUTRACE_KEEP_SECRETS", "no")]).keep_secrets);
        let d = o(&[("GPUTRACE_KEEP_SECRETS", "maybe")]);
        assert!(!d.keep_secrets);
        assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
    }

    #[test]
    fn many_bad_settings_make_one_line() {
        let d = o(&[
            ("GPUTRACE_MODE", "sometimes"),
            ("GPUTRACE_BUFFER_KB", "4096"),
            ("GPUTRACE_BUFFER_POOL_MB", "1"),
            ("GPUTRACE_FROB", "1"),
        ]);
        let line = d.warning().unwrap();
        assert!(!line.contains('\n'));
        for k in ["GPUTRACE_MODE", "GPUTRACE_BUFFER_POOL_MB", "GPUTRACE_FROB"] {
            assert!(line.contains(k), "{k} not in {line}");
        }
        assert!(!line.contains("GPUTRACE_BUFFER_KB"), "{line}");
        assert_eq!(o(&[]).warning(), None);
    }

    #[test]
    fn every_setting_of_the_table_is_known_here() {
        // The library reads its own settings and stays quiet about the others' (the
        // command's, the tests'); a name outside the table is the only unknown one.
        for s in protocol::SETTINGS {
            let value = match s.name {
                set::MODE => "trace",
                set::DIR | set::CUPTI | set::LIB => "/x",
                set::ACTIVITY => "kernel",
                set::NVML_SKIP => "events",
                set::SIGNAL => "SIGUSR1",
                set::START_AFTER | set::DURATION => "10s",
                set::BUFFER_KB => "1024",
                set::DEVICE_BUFFER_MB | set::BUFFER_POOL_MB | set::RANK => "64",
                set::FLUSH_MS
                | set::CUPTI_FLUSH_MS
                | set::EXIT_WAIT_MS
                | set::NVML_MS
                | set::PM_US
                | set::HOST_TREE_MS
                | set::STALL_MS => "100",
                _ => "1",
            };
            let d = o(&[(s.name, value)]);
            assert!(
                d.warnings.is_empty(),
                "{}={value}: {:?}",
                s.name,
                d.warnings
            );
            assert_eq!(d.raw, vec![(s.name.to_string(), value.to_string())]);
        }
    }

    #[test]
    fn ranks_come_from_the_launchers_variables() {
        let d = o(&[
            ("PATH", "/bin"),
            ("RANK", "5"),
            ("LOCAL_RANK", "1"),
            ("SLURM_PROCID", "9"),
        ]);
        assert_eq!(d.rank, Some((5, "RANK".into())));
        assert_eq!(d.local_rank, Some((1, "LOCAL_RANK".into())));
        assert!(d.warnings.is_empty());
        // Recorded for the trace, the unrelated PATH not.
        assert_eq!(d.raw.len(), 3, "{:?}", d.raw);
        assert!(!d.raw.iter().any(|(k, _)| k == "PATH"));
        let d = o(&[("RANK", "5"), ("GPUTRACE_RANK", "2")]);
        assert_eq!(d.rank, Some((2, "GPUTRACE_RANK".into())));
        let d = o(&[("GPUTRACE_RANK", "first"), ("OMPI_COMM_WORLD_RANK", "3")]);
        assert_eq!(d.rank, Some((3, "OMPI_COMM_WORLD_RANK".into())));
        assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
        assert_eq!(o(&[("PMI_RANK", "x")]).rank, None);
    }
}
