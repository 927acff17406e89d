//! Settings, read once from `GPUTRACE_*` variables through the one settings table
//! (`gputrace_format::settings`: each setting one row, with its typed field in
//! [`Values`], its default and its parser). Bad values and unknown names are ignored,
//! the defaults kept, and said in one warning line per process; they never stop the
//! host process. Under secure execution nothing is read ([`Opts::from_env`]).

use gputrace_format::protocol::{self, parse_flag, settings as set, ReadBy};
use gputrace_format::redact::REDACTED;
pub use gputrace_format::settings::{Api, DriverApi, Mode, Nvml, Skip, Values, PYSTACK_DEPTH};
use std::path::PathBuf;
use std::time::Duration;

/// The host sampler's settings (`GPUTRACE_HOST`, `GPUTRACE_HOST_THREAD_MS`,
/// `GPUTRACE_HOST_TREE_MS`, `GPUTRACE_PYSAMPLE_MS`, `GPUTRACE_HOST_ALL_THREADS`): on
/// or off, and its periods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostSettings {
    pub on: bool,
    /// The CUDA-issuing threads' period.
    pub thread_period: Duration,
    /// The process tree's and the machine's period.
    pub tree_period: Duration,
    /// The Python stack samples' period (zero: none).
    pub py_period: Duration,
    /// Every thread of the process, the GIL and every Python thread's stack while a
    /// CUDA-issuing thread is blocked.
    pub all_threads: bool,
}

impl HostSettings {
    pub fn of(v: &Values) -> HostSettings {
        HostSettings {
            on: v.host,
            thread_period: Duration::from_millis(v.host_thread_ms),
            tree_period: Duration::from_millis(v.host_tree_ms),
            py_period: Duration::from_millis(v.pysample_ms),
            all_threads: v.host_all_threads,
        }
    }
}

impl Default for HostSettings {
    fn default() -> HostSettings {
        HostSettings::of(&Values::defaults())
    }
}

/// Which NVML the in-process environment sampler loads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NvmlLib {
    /// The driver's `libnvidia-ml.so.1`, through the loader's search path.
    Default,
    Path(PathBuf),
    /// None: the trace gets the host facts only.
    Off,
}

/// What the library says when `GPUTRACE_PM` is set.
pub const PM_REMOVED: &str = "GPUTRACE_PM: in-process PM sampling was removed (it could crash the job at exit); `gputrace run` and `gputrace attach` record the GPU's SM activity, occupancy, tensor/FP pipes and DRAM bandwidth with NVML GPM from outside the job (GPUTRACE_GPM_MS)";

/// The library's settings: every setting's typed value (reached through `Deref`:
/// `opts.flush_ms`), and what the library derives from them.
#[derive(Clone, Debug)]
pub struct Opts {
    pub values: Values,
    /// This process's rank in its job and on its node, and the variable each came from
    /// (`GPUTRACE_RANK`, else `protocol::RANK_VARS`; `protocol::LOCAL_RANK_VARS`).
    pub rank: Option<(u32, String)>,
    pub local_rank: Option<(u32, String)>,
    /// The variables as read, for the trace's metadata: every `GPUTRACE_*` one (an
    /// unknown one's value redacted), and the launchers' rank variables that are set.
    pub raw: Vec<(String, String)>,
    /// What was wrong with the settings, one clause each ([`Opts::warning`] joins them).
    pub warnings: Vec<String>,
}

impl std::ops::Deref for Opts {
    type Target = Values;
    fn deref(&self) -> &Values {
        &self.values
    }
}

impl std::ops::DerefMut for Opts {
    fn deref_mut(&mut self) -> &mut Values {
        &mut self.values
    }
}

impl Default for Opts {
    fn default() -> Opts {
        Opts {
            values: Values::defaults(),
            rank: None,
            local_rank: None,
            raw: Vec::new(),
            warnings: Vec::new(),
        }
    }
}

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
            if let Some(Err(what)) = o.values.set(&k, &v) {
                o.warnings
                    .push(format!("{k}={v:?} ignored (expected {what})"));
            }
        }
        o.rank = protocol::rank_from(&o.raw, protocol::RANK_VARS).map(|(r, k)| (r, k.into()));
        o.local_rank =
            protocol::rank_from(&o.raw, protocol::LOCAL_RANK_VARS).map(|(r, k)| (r, k.into()));
        if o.buffer_pool_mb << 20 < o.buffer_kb << 10 {
            o.warnings.push(format!(
                "{} below one buffer, using {} MiB",
                set::BUFFER_POOL_MB,
                o.buffer_kb >> 10
            ));
        }
        o
    }

    /// Size of one CUPTI activity buffer.
    pub fn buffer_bytes(&self) -> usize {
        (self.buffer_kb as usize) << 10
    }

    /// Most CUPTI buffer memory held at once: at least one buffer.
    pub fn pool_bytes(&self) -> usize {
        ((self.buffer_pool_mb as usize) << 20).max(self.buffer_bytes())
    }

    /// The host sampler's settings.
    pub fn host_settings(&self) -> HostSettings {
        HostSettings::of(&self.values)
    }

    /// Runtime API calls recorded through CUPTI callbacks.
    pub fn runtime_api(&self) -> bool {
        self.api == Api::Callbacks
    }

    /// Runtime API calls recorded as CUPTI RUNTIME activity instead.
    pub fn api_activity(&self) -> bool {
        self.api == Api::Activity
    }

    /// The NVML of the in-process sampler: off unless `GPUTRACE_NVML` asks for it
    /// (on the H200, NVML sampling from a thread of the traced process hung PyTorch at
    /// its first kernel launches: bench/results/2026-12-03-run5-wave).
    pub fn nvml_lib(&self) -> NvmlLib {
        match &self.nvml {
            Nvml::Unset | Nvml::Off => NvmlLib::Off,
            Nvml::On | Nvml::InProcess => NvmlLib::Default,
            Nvml::Path(p) => NvmlLib::Path(p.clone()),
        }
    }

    /// `GPUTRACE_PM` was asked for: in-process PM sampling is removed, and the library
    /// says so once (the job runs on unchanged).
    pub fn pm_removed(&self) -> bool {
        self.pm
            .as_deref()
            .is_some_and(|v| parse_flag(v) != Some(false))
    }

    /// Everything wrong with the settings, as one line (`None` when all is well).
    pub fn warning(&self) -> Option<String> {
        (!self.warnings.is_empty()).then(|| format!("settings: {}", self.warnings.join("; ")))
    }

    /// The note for a removed setting that was asked for (one line), if any.
    pub fn note(&self) -> Option<&'static str> {
        self.pm_removed().then_some(PM_REMOVED)
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
        let mut values = Values::defaults();
        values.mode = Mode::Off;
        Opts {
            values,
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
        assert_eq!(d.buffer_bytes(), 1 << 20);
        assert_eq!(d.flush_ms, 100);
        assert_eq!(d.driver_api, DriverApi::Off);
        assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    }

    #[test]
    fn host_sampler_settings() {
        let d = o(&[]);
        assert!(d.host_settings().on);
        assert_eq!(
            d.host_settings().thread_period,
            std::time::Duration::from_millis(3)
        );
        assert_eq!(
            d.host_settings().tree_period,
            std::time::Duration::from_millis(100)
        );
        let d = o(&[
            ("GPUTRACE_HOST", "0"),
            ("GPUTRACE_HOST_THREAD_MS", "5"),
            ("GPUTRACE_HOST_TREE_MS", "50"),
        ]);
        assert!(!d.host_settings().on);
        assert_eq!(
            d.host_settings().thread_period,
            std::time::Duration::from_millis(5)
        );
        assert_eq!(
            d.host_settings().tree_period,
            std::time::Duration::from_millis(50)
        );
        assert_eq!(
            d.host_settings().py_period,
            std::time::Duration::from_millis(10)
        );
        assert!(d.warnings.is_empty(), "{:?}", d.warnings);
        let d = o(&[("GPUTRACE_PYSAMPLE_MS", "0")]);
        assert_eq!(d.host_settings().py_period, std::time::Duration::ZERO);
        let d = o(&[("GPUTRACE_PYSAMPLE_MS", "25")]);
        assert_eq!(
            d.host_settings().py_period,
            std::time::Duration::from_millis(25)
        );
        let d = o(&[("GPUTRACE_PYSAMPLE_MS", "5000")]);
        assert_eq!(
            d.host_settings().py_period,
            std::time::Duration::from_millis(10)
        );
        assert!(!d.warnings.is_empty());
        let d = o(&[
            ("GPUTRACE_HOST_THREAD_MS", "0"),
            ("GPUTRACE_HOST_TREE_MS", "5"),
        ]);
        assert_eq!(d.host_settings(), HostSettings::default());
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
        assert!(d.api_activity() && !d.runtime_api());
        assert!(d.per_thread_buffers && !d.zeroed_buffers);
        assert_eq!(d.device_buffer_mb, Some(64));
        assert_eq!(d.cupti_flush_ms, Some(0));
        assert!(d.warnings.is_empty(), "{:?}", d.warnings);
        let d = o(&[
            ("GPUTRACE_API", "sometimes"),
            ("GPUTRACE_DEVICE_BUFFER_MB", "0"),
        ]);
        assert!(d.runtime_api() && !d.api_activity());
        assert_eq!(d.device_buffer_mb, None);
        assert_eq!(d.warnings.len(), 2);
    }

    #[test]
    fn nvml_settings() {
        let d = o(&[]);
        assert_eq!((d.nvml_lib(), d.nvml_ms), (NvmlLib::Off, 100));
        assert_eq!(o(&[("GPUTRACE_NVML", "1")]).nvml_lib(), NvmlLib::Default);
        // `gputrace run`'s word for sampling in the process: the default library here.
        assert_eq!(
            o(&[("GPUTRACE_NVML", "inprocess")]).nvml_lib(),
            NvmlLib::Default
        );
        let d = o(&[
            ("GPUTRACE_NVML", "/opt/libnvidia-ml.so.1"),
            ("GPUTRACE_NVML_MS", "0"),
        ]);
        assert_eq!(
            d.nvml_lib(),
            NvmlLib::Path(PathBuf::from("/opt/libnvidia-ml.so.1"))
        );
        assert_eq!(d.nvml_ms, 0);
        let d = o(&[("GPUTRACE_NVML", "off"), ("GPUTRACE_NVML_MS", "5")]);
        assert_eq!(d.nvml_lib(), NvmlLib::Off);
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
        assert_eq!(o(&[]).stall_ms, Values::defaults().stall_ms);
        assert_eq!(o(&[("GPUTRACE_STALL_MS", "0")]).stall_ms, 0);
        assert_eq!(o(&[("GPUTRACE_STALL_MS", "250")]).stall_ms, 250);
        let d = o(&[("GPUTRACE_STALL_MS", "5")]);
        assert_eq!(d.stall_ms, Values::defaults().stall_ms);
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
        assert_eq!(d.activity.len(), Values::defaults().activity.len());
        assert_eq!(d.mode, Mode::Trace);
        assert_eq!(d.buffer_bytes(), Opts::default().buffer_bytes());
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
                | set::STALL_MS
                | set::HANDOVER_MS => "100",
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
