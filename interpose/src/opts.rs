//! Settings, read once from `GPUTRACE_*` variables. A bad value gives one warning and
//! the default; it never stops the host process.

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

/// Which NVML the environment sampler loads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NvmlLib {
    /// The driver's `libnvidia-ml.so.1`, through the loader's search path.
    Default,
    Path(PathBuf),
    /// None: the trace gets the host facts only.
    Off,
}

/// Default NVML sampling period.
pub const NVML_MS_DEFAULT: u64 = 100;

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
    /// Also record driver-API launches (cuLaunchKernel*), e.g. from cuBLAS (`GPUTRACE_DRIVER_API`).
    pub driver_api: bool,
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
    /// Production mode triggers: `GPUTRACE_SIGNAL` (SIGUSR1/SIGUSR2), and a timed window
    /// `GPUTRACE_START_AFTER` + `GPUTRACE_DURATION`.
    pub signal: Option<String>,
    pub start_after: Option<std::time::Duration>,
    pub duration: Option<std::time::Duration>,
    /// The host sampler (`GPUTRACE_HOST`, default on; `GPUTRACE_HOST_THREAD_MS`, the
    /// CUDA threads' period, default 3; `GPUTRACE_HOST_TREE_MS`, the process tree's and
    /// the machine's, default 100).
    pub host: crate::sampler::Settings,
    /// Print what the library does (`GPUTRACE_DEBUG`).
    pub debug: bool,
    /// The NVML library for the environment sampler (`GPUTRACE_NVML`: a path or a
    /// soname, default `libnvidia-ml.so.1`; `0`/`off`: no NVML at all).
    pub nvml: NvmlLib,
    /// NVML sampling period in a trace window (`GPUTRACE_NVML_MS`, default 100; 0: the
    /// facts only, no sampling).
    pub nvml_ms: u64,
    /// The variables as read, for the trace's metadata.
    pub raw: Vec<(String, String)>,
    /// Warnings about bad values, printed once.
    pub warnings: Vec<String>,
}

impl Default for Opts {
    fn default() -> Opts {
        Opts {
            mode: Mode::Trace,
            dir: PathBuf::from("gputrace-traces"),
            cupti: None,
            buffer_bytes: 8 << 20,
            pool_bytes: 256 << 20,
            flush_ms: 500,
            driver_api: false,
            activity: DEFAULT_ACTIVITY.iter().map(|s| s.to_string()).collect(),
            hooks: true,
            runtime_api: true,
            api_activity: false,
            per_thread_buffers: false,
            device_buffer_mb: None,
            zeroed_buffers: true,
            cupti_flush_ms: None,
            compress: true,
            exit_wait_ms: 3000,
            signal: None,
            start_after: None,
            duration: None,
            host: crate::sampler::Settings::default(),
            debug: false,
            nvml: NvmlLib::Default,
            nvml_ms: NVML_MS_DEFAULT,
            raw: Vec::new(),
            warnings: Vec::new(),
        }
    }
}

/// Names accepted by `GPUTRACE_ACTIVITY`.
pub const ACTIVITY_NAMES: &[&str] = &["kernel", "memcpy", "memset", "sync", "device", "memory"];
/// Kinds on by default: all but SYNCHRONIZATION, which cost more on a launch-bound loop
/// than any other kind (1.40x against 1.21x for kernel records alone, H200 sweep in
/// bench/RESULTS.md) and adds nothing the runtime callbacks on the sync calls do not
/// record; `GPUTRACE_ACTIVITY=...,sync` brings it back.
pub const DEFAULT_ACTIVITY: &[&str] = &["kernel", "memcpy", "memset", "device", "memory"];

fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}

impl Opts {
    /// Reads the settings from a list of (name, value) pairs (the environment).
    pub fn from_vars<I: IntoIterator<Item = (String, String)>>(vars: I) -> Opts {
        let mut o = Opts::default();
        for (k, v) in vars {
            if !k.starts_with("GPUTRACE_") {
                continue;
            }
            o.raw.push((k.clone(), v.clone()));
            let mut bad = |what: &str| {
                o.warnings.push(format!(
                    "ignoring {k}={v:?}: expected {what}; using the default"
                ))
            };
            match k.as_str() {
                "GPUTRACE_MODE" => match v.trim().to_ascii_lowercase().as_str() {
                    "trace" | "" => o.mode = Mode::Trace,
                    "dormant" => o.mode = Mode::Dormant,
                    "off" | "0" => o.mode = Mode::Off,
                    _ => bad("trace, dormant or off"),
                },
                "GPUTRACE_DIR" => {
                    if v.is_empty() {
                        bad("a directory")
                    } else {
                        o.dir = PathBuf::from(v)
                    }
                }
                "GPUTRACE_CUPTI" => {
                    if !v.is_empty() {
                        o.cupti = Some(PathBuf::from(v))
                    }
                }
                "GPUTRACE_BUFFER_KB" => match v.trim().parse::<usize>() {
                    Ok(n) if (64..=262_144).contains(&n) => o.buffer_bytes = n << 10,
                    _ => bad("a size in KiB between 64 and 262144"),
                },
                "GPUTRACE_BUFFER_POOL_MB" => match v.trim().parse::<usize>() {
                    Ok(n) if (1..=65_536).contains(&n) => o.pool_bytes = n << 20,
                    _ => bad("a size in MiB between 1 and 65536"),
                },
                "GPUTRACE_FLUSH_MS" => match v.trim().parse::<u64>() {
                    Ok(n) if (10..=1000).contains(&n) => o.flush_ms = n,
                    _ => bad("milliseconds between 10 and 1000"),
                },
                "GPUTRACE_EXIT_WAIT_MS" => match v.trim().parse::<u64>() {
                    Ok(n) if n <= 60_000 => o.exit_wait_ms = n,
                    _ => bad("milliseconds up to 60000"),
                },
                "GPUTRACE_DRIVER_API" => match parse_bool(&v) {
                    Some(b) => o.driver_api = b,
                    None => bad("0 or 1"),
                },
                "GPUTRACE_ACTIVITY" => {
                    let names: Vec<String> = v
                        .split(',')
                        .map(|s| s.trim().to_ascii_lowercase())
                        .filter(|s| !s.is_empty())
                        .collect();
                    if names.iter().all(|n| ACTIVITY_NAMES.contains(&n.as_str()))
                        && names.iter().any(|n| n == "kernel")
                    {
                        o.activity = names;
                    } else {
                        bad("a comma-separated list of kernel, memcpy, memset, sync, device, memory that includes kernel")
                    }
                }
                "GPUTRACE_HOOKS" => match parse_bool(&v) {
                    Some(b) => o.hooks = b,
                    None => bad("0 or 1"),
                },
                "GPUTRACE_API" => match (parse_bool(&v), v.trim()) {
                    (Some(b), _) => {
                        o.runtime_api = b;
                        o.api_activity = false;
                    }
                    (None, "callback" | "callbacks") => {
                        o.runtime_api = true;
                        o.api_activity = false;
                    }
                    (None, "activity") => {
                        o.runtime_api = false;
                        o.api_activity = true;
                    }
                    _ => bad("0, 1, callbacks or activity"),
                },
                "GPUTRACE_PER_THREAD_BUFFERS" => match parse_bool(&v) {
                    Some(b) => o.per_thread_buffers = b,
                    None => bad("0 or 1"),
                },
                "GPUTRACE_COMPRESS" => match parse_bool(&v) {
                    Some(b) => o.compress = b,
                    None => bad("0 or 1"),
                },
                "GPUTRACE_ZEROED_BUFFERS" => match parse_bool(&v) {
                    Some(b) => o.zeroed_buffers = b,
                    None => bad("0 or 1"),
                },
                "GPUTRACE_DEVICE_BUFFER_MB" => match v.trim().parse::<usize>() {
                    Ok(n) if (1..=4096).contains(&n) => o.device_buffer_mb = Some(n),
                    _ => bad("a size in MiB between 1 and 4096"),
                },
                "GPUTRACE_CUPTI_FLUSH_MS" => match v.trim().parse::<u64>() {
                    Ok(n) if n <= 10_000 => o.cupti_flush_ms = Some(n),
                    _ => bad("milliseconds up to 10000 (0: CUPTI's own policy)"),
                },
                "GPUTRACE_DEBUG" => match parse_bool(&v) {
                    Some(b) => o.debug = b,
                    None => bad("0 or 1"),
                },
                "GPUTRACE_SIGNAL" => match v.trim().trim_start_matches("SIG") {
                    "" => {}
                    "USR1" | "USR2" => o.signal = Some(v.trim().to_string()),
                    _ => bad("SIGUSR1 or SIGUSR2"),
                },
                "GPUTRACE_START_AFTER" => match crate::control::parse_duration(&v) {
                    Some(d) => o.start_after = Some(d),
                    None => bad("a duration such as 30s"),
                },
                "GPUTRACE_DURATION" => match crate::control::parse_duration(&v) {
                    Some(d) if !d.is_zero() => o.duration = Some(d),
                    _ => bad("a duration such as 10s"),
                },
                "GPUTRACE_HOST" => match parse_bool(&v) {
                    Some(b) => o.host.on = b,
                    None => bad("0 or 1"),
                },
                "GPUTRACE_HOST_THREAD_MS" => match v.trim().parse::<u64>() {
                    Ok(n) if (1..=100).contains(&n) => {
                        o.host.thread_period = std::time::Duration::from_millis(n)
                    }
                    _ => bad("milliseconds between 1 and 100"),
                },
                "GPUTRACE_HOST_TREE_MS" => match v.trim().parse::<u64>() {
                    Ok(n) if (10..=10_000).contains(&n) => {
                        o.host.tree_period = std::time::Duration::from_millis(n)
                    }
                    _ => bad("milliseconds between 10 and 10000"),
                },
                "GPUTRACE_NVML" => match v.trim() {
                    "" => o.nvml = NvmlLib::Default,
                    t if parse_bool(t) == Some(false) => o.nvml = NvmlLib::Off,
                    t => o.nvml = NvmlLib::Path(PathBuf::from(t)),
                },
                "GPUTRACE_NVML_MS" => match v.trim().parse::<u64>() {
                    Ok(n) if n == 0 || (10..=60_000).contains(&n) => o.nvml_ms = n,
                    _ => bad("0 (off) or milliseconds between 10 and 60000"),
                },
                // Read by the `gputrace` binary, not by the library.
                "GPUTRACE_LIB" => {}
                _ => o.warnings.push(format!("unknown setting {k} ignored")),
            }
        }
        if o.pool_bytes < o.buffer_bytes {
            o.warnings.push(format!(
                "GPUTRACE_BUFFER_POOL_MB is smaller than one buffer; using {} MiB",
                o.buffer_bytes >> 20
            ));
            o.pool_bytes = o.buffer_bytes;
        }
        o
    }

    pub fn from_env() -> Opts {
        Opts::from_vars(
            std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
        )
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
            ("GPUTRACE_DRIVER_API", "1"),
            ("GPUTRACE_ACTIVITY", "kernel, memcpy"),
        ]);
        assert_eq!(d.activity, vec!["kernel", "memcpy"]);
        assert_eq!(d.mode, Mode::Dormant);
        assert_eq!(d.dir, PathBuf::from("/tmp/x"));
        assert_eq!(d.buffer_bytes, 1 << 20);
        assert_eq!(d.flush_ms, 100);
        assert!(d.driver_api);
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
        assert!(d.warnings.is_empty(), "{:?}", d.warnings);
        let d = o(&[
            ("GPUTRACE_HOST_THREAD_MS", "0"),
            ("GPUTRACE_HOST_TREE_MS", "5"),
        ]);
        assert_eq!(d.host, crate::sampler::Settings::default());
        assert_eq!(d.warnings.len(), 2);
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
        assert_eq!((d.nvml.clone(), d.nvml_ms), (NvmlLib::Default, 100));
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
}
