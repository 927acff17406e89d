//! Every `GPUTRACE_*` setting, each one row of [`define_settings!`]: its constant, its
//! variable, the field it fills in [`Values`] with that field's type, how a value is
//! read ([`Kind`]: a flag, a number and its range, or a word, path or list with what it
//! takes), its default as the docs write it, who reads it and what it means. From the
//! rows come the constants (`names`), the table ([`SETTINGS`], which docs/settings.md is
//! checked against), the typed values with their defaults ([`Values::defaults`]) and
//! the one parser ([`Values::set`]): the library's `Opts` and the command read settings
//! through it, and nothing else parses a `GPUTRACE_*` variable.
//!
//! A new setting is one row here; its reader uses `values.<field>`.

use crate::protocol::{parse_duration, parse_flag, ReadBy, Setting, Value, DEFAULT_TRACE_DIR};
use std::path::PathBuf;
use std::time::Duration;

/// What the library does when loaded (`GPUTRACE_MODE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Trace from CUDA initialisation to exit (the default).
    #[default]
    Trace,
    /// Loaded, recording nothing, until asked.
    Dormant,
    /// Do nothing at all.
    Off,
}

/// How the host side of runtime API calls is recorded (`GPUTRACE_API`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Api {
    /// Through CUPTI callbacks on the calling thread (the default).
    #[default]
    Callbacks,
    /// As CUPTI RUNTIME activity records, filtered to our callback ids: no callback on
    /// the program's thread, no call parameters.
    Activity,
    /// Not at all.
    Off,
}

/// When driver-API calls are recorded (`GPUTRACE_DRIVER_API`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DriverApi {
    /// Never.
    Off,
    /// Copies, syncs and graph launches from the start; kernel launches once kernels
    /// that no recorded runtime call launched are seen, or a driver call of the
    /// program's own is. Opt-in: cuBLAS launches through the driver, and CUPTI holds a
    /// GPU-bound program's kernel records until a buffer fills.
    Auto,
    /// Every one from the start (the default).
    #[default]
    On,
}

/// `GPUTRACE_NVML` as written: what the library and the command each make of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Nvml {
    /// Unset: the command samples from its own process; the library does not.
    #[default]
    Unset,
    /// `0`: nobody samples.
    Off,
    /// `1` (or empty): the driver's `libnvidia-ml.so.1`.
    On,
    /// `inprocess`: in the traced process even under `gputrace run`.
    InProcess,
    /// That library.
    Path(PathBuf),
}

/// NVML reads a sampler leaves out (`GPUTRACE_NVML_SKIP`), to find a read that
/// misbehaves on some machine without rebuilding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Skip {
    /// No event set (Xid, ECC events) is registered.
    pub events: bool,
    /// No process list or per-process utilisation.
    pub procs: bool,
    /// No ECC counts.
    pub ecc: bool,
    /// No PCIe throughput.
    pub pcie: bool,
    /// No ticks at all: facts only.
    pub ticks: bool,
}

impl Skip {
    /// `"events,procs"`; `""` or `"none"` skips nothing; `None` for an unknown word.
    pub fn parse(s: &str) -> Option<Skip> {
        let mut k = Skip::default();
        for w in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match w {
                "none" => {}
                "events" => k.events = true,
                "procs" => k.procs = true,
                "ecc" => k.ecc = true,
                "pcie" => k.pcie = true,
                "ticks" => k.ticks = true,
                _ => return None,
            }
        }
        Some(k)
    }
}

/// Names accepted by `GPUTRACE_ACTIVITY`.
pub const ACTIVITY_NAMES: &[&str] = &[
    "kernel", "memcpy", "memset", "sync", "device", "memory", "graph",
];

/// Python stack frames kept by default (`GPUTRACE_PYSTACK=1`), and at most.
pub const PYSTACK_DEPTH: usize = 16;

/// How one setting's value is read into its field of type `T`.
pub struct Kind<T> {
    /// What it takes, for the table (and the range check of a number).
    pub value: Value,
    /// What it takes, in the words of a warning (`SIGUSR1 or SIGUSR2`).
    pub takes: &'static str,
    /// The value, or `None` when the text is not one it takes.
    parse: fn(&Value, &str) -> Option<T>,
    /// The value while the variable is unset: from the documented default where that
    /// is a value, `None` for the type's default (an optional setting: not used).
    initial: fn(&Value, &'static str) -> Option<T>,
}

impl<T: Default> Kind<T> {
    fn read(&self, v: &str) -> Option<T> {
        (self.parse)(&self.value, v)
    }

    fn initial(&self, doc_default: &'static str) -> T {
        (self.initial)(&self.value, doc_default).unwrap_or_default()
    }

    /// Whether the documented default is a value this kind reads (checked by a test
    /// for every row whose field is not optional).
    pub fn default_reads(&self, doc_default: &'static str) -> bool {
        (self.initial)(&self.value, doc_default).is_some()
    }
}

/// How each kind of value is read (the rows below name them `kind::...`).
pub mod kind {
    use super::*;

    fn number(v: &Value, s: &str) -> Option<u64> {
        let Value::Number { min, max, zero, .. } = *v else {
            return None;
        };
        let n: u64 = s.trim().parse().ok()?;
        ((min..=max).contains(&n) || (n == 0 && !zero.is_empty())).then_some(n)
    }

    fn flag(_: &Value, s: &str) -> Option<bool> {
        parse_flag(s)
    }

    /// On or off.
    pub const FLAG: Kind<bool> = Kind {
        value: Value::Flag,
        takes: "0 or 1",
        parse: flag,
        initial: flag,
    };

    /// Milliseconds from `min` to `max`.
    pub const fn ms(min: u64, max: u64) -> Kind<u64> {
        num(Value::Number {
            min,
            max,
            unit: "ms",
            zero: "",
        })
    }

    /// Milliseconds from `min` to `max`, or 0 (`zero`: what it means).
    pub const fn ms_or_0(min: u64, max: u64, zero: &'static str) -> Kind<u64> {
        num(Value::Number {
            min,
            max,
            unit: "ms",
            zero,
        })
    }

    /// A size in `unit` (`KiB`, `MiB`) from `min` to `max`.
    pub const fn size(min: u64, max: u64, unit: &'static str) -> Kind<u64> {
        num(Value::Number {
            min,
            max,
            unit,
            zero: "",
        })
    }

    const fn num(value: Value) -> Kind<u64> {
        Kind {
            value,
            takes: "",
            parse: number,
            initial: number,
        }
    }

    /// A number that is not used unless set (a size in `unit` from `min` to `max`).
    pub const fn optional_size(min: u64, max: u64, unit: &'static str) -> Kind<Option<u64>> {
        Kind {
            value: Value::Number {
                min,
                max,
                unit,
                zero: "",
            },
            takes: "",
            parse: |v, s| number(v, s).map(Some),
            initial: |_, _| None,
        }
    }

    /// Milliseconds from `min` to `max` that are not used unless set.
    pub const fn optional_ms(min: u64, max: u64) -> Kind<Option<u64>> {
        Kind {
            value: Value::Number {
                min,
                max,
                unit: "ms",
                zero: "",
            },
            takes: "",
            parse: |v, s| number(v, s).map(Some),
            initial: |_, _| None,
        }
    }

    /// A word, path or list of the row's own.
    const fn text<T>(
        takes: &'static str,
        parse: fn(&Value, &str) -> Option<T>,
        initial: fn(&Value, &'static str) -> Option<T>,
    ) -> Kind<T> {
        Kind {
            value: Value::Text,
            takes,
            parse,
            initial,
        }
    }

    /// Read as written, by its reader (the tests', the benchmarks').
    pub const RAW: Kind<Option<String>> =
        text("any text", |_, s| Some(Some(s.to_string())), |_, _| None);

    /// A path that is not used unless set.
    pub const PATH: Kind<Option<PathBuf>> = text(
        "a path",
        |_, s| Some((!s.is_empty()).then(|| PathBuf::from(s))),
        |_, _| None,
    );

    fn dir(_: &Value, s: &str) -> Option<PathBuf> {
        (!s.is_empty()).then(|| PathBuf::from(s))
    }
    pub const DIR: Kind<PathBuf> = text("a directory", dir, dir);

    fn mode(_: &Value, s: &str) -> Option<Mode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "trace" | "" => Some(Mode::Trace),
            "dormant" => Some(Mode::Dormant),
            "off" | "0" => Some(Mode::Off),
            _ => None,
        }
    }
    pub const MODE: Kind<Mode> = text("trace, dormant or off", mode, mode);

    fn api(_: &Value, s: &str) -> Option<Api> {
        match (parse_flag(s), s.trim()) {
            (Some(true), _) | (None, "callback" | "callbacks") => Some(Api::Callbacks),
            (Some(false), _) => Some(Api::Off),
            (None, "activity") => Some(Api::Activity),
            _ => None,
        }
    }
    pub const API: Kind<Api> = text("0, 1, callbacks or activity", api, api);

    fn driver_api(_: &Value, s: &str) -> Option<DriverApi> {
        match (parse_flag(s), s.trim().to_ascii_lowercase().as_str()) {
            (Some(true), _) => Some(DriverApi::On),
            (Some(false), _) => Some(DriverApi::Off),
            (None, "auto") => Some(DriverApi::Auto),
            _ => None,
        }
    }
    pub const DRIVER_API: Kind<DriverApi> = text("0, 1 or auto", driver_api, driver_api);

    fn activity(_: &Value, s: &str) -> Option<Vec<String>> {
        let names: Vec<String> = s
            .split(',')
            .map(|s| s.trim().to_ascii_lowercase())
            .filter(|s| !s.is_empty())
            .collect();
        (names.iter().all(|n| ACTIVITY_NAMES.contains(&n.as_str()))
            && names.iter().any(|n| n == "kernel"))
        .then_some(names)
    }
    pub const ACTIVITY: Kind<Vec<String>> = text(
        "a comma-separated list of kernel, memcpy, memset, sync, device, memory, graph that includes kernel",
        activity,
        activity,
    );

    pub const SIGNAL: Kind<Option<String>> = text(
        "SIGUSR1 or SIGUSR2",
        |_, s| match s.trim().trim_start_matches("SIG") {
            "" => Some(None),
            "USR1" | "USR2" => Some(Some(s.trim().to_string())),
            _ => None,
        },
        |_, _| None,
    );

    /// A duration (`parse_duration`) that is not used unless set.
    pub const DURATION: Kind<Option<Duration>> = text(
        "a duration such as 10s, from 1ms to 24h",
        |_, s| parse_duration(s).ok().map(Some),
        |_, _| None,
    );

    fn pystack(_: &Value, s: &str) -> Option<usize> {
        match (parse_flag(s), s.trim().parse::<usize>()) {
            (_, Ok(n)) if (2..=PYSTACK_DEPTH).contains(&n) => Some(n),
            (Some(true), _) => Some(PYSTACK_DEPTH),
            (Some(false), _) => Some(0),
            _ => None,
        }
    }
    pub const PYSTACK: Kind<usize> = text("0, 1, or frames to keep from 2 to 16", pystack, pystack);

    pub const NVML: Kind<Nvml> = text(
        "1, 0, inprocess or a path",
        |_, s| {
            Some(match s.trim() {
                t if t == crate::protocol::NVML_IN_PROCESS => Nvml::InProcess,
                t if parse_flag(t) == Some(true) || t.is_empty() => Nvml::On,
                t if parse_flag(t) == Some(false) => Nvml::Off,
                _ => Nvml::Path(PathBuf::from(s)),
            })
        },
        |_, _| None,
    );

    pub const SKIP: Kind<Skip> = text(
        "a comma-separated list from events, procs, ecc, pcie, ticks",
        |_, s| Skip::parse(s),
        |_, _| None,
    );

    pub const RANK: Kind<Option<u32>> = text(
        "a whole number",
        |_, s| s.trim().parse::<u32>().ok().map(Some),
        |_, _| None,
    );

    /// A count that is not used unless set (a whole number from 1).
    pub const COUNT: Kind<Option<u64>> = text(
        "a whole number from 1",
        |_, s| s.trim().parse::<u64>().ok().filter(|&n| n > 0).map(Some),
        |_, _| None,
    );

    /// Accepted with any value and otherwise ignored (a removed setting).
    pub const REMOVED: Kind<Option<String>> = RAW;
}

macro_rules! define_settings {
    ($(
        $(#[$doc:meta])*
        $konst:ident = $var:literal, $field:ident: $ty:ty = $kind:expr,
            default $default:expr, $reader:ident, $experimental:literal, $meaning:literal;
    )*) => {
        /// The variables, one constant each.
        pub mod names {
            $( pub const $konst: &str = $var; )*
        }

        /// Every `GPUTRACE_*` variable: name, default, what it takes, meaning, who reads
        /// it. docs/settings.md documents each with its default
        /// (format/tests/settings_doc.rs checks it).
        pub const SETTINGS: &[Setting] = &[
            $( Setting {
                name: $var,
                default: $default,
                value: $kind.value,
                takes: $kind.takes,
                meaning: $meaning,
                read_by: ReadBy::$reader,
                experimental: $experimental,
            }, )*
        ];

        /// Every setting's value, typed: the defaults, then what the environment set.
        #[derive(Clone, Debug, PartialEq)]
        pub struct Values {
            $( $(#[$doc])* pub $field: $ty, )*
        }

        impl Values {
            /// Every setting at its default.
            pub fn defaults() -> Values {
                Values { $( $field: $kind.initial($default), )* }
            }

            /// Sets `name` from `v`: `None` when `name` is not a setting, `Some(Err(what
            /// it takes))` when `v` is not a value it takes (the field keeps its value).
            pub fn set(&mut self, name: &str, v: &str) -> Option<Result<(), String>> {
                match name {
                    $( $var => Some(match $kind.read(v) {
                        Some(x) => {
                            self.$field = x;
                            Ok(())
                        }
                        None => Err(crate::protocol::setting(name)
                            .map(Setting::expected)
                            .unwrap_or_default()),
                    }), )*
                    _ => None,
                }
            }

            /// For each row: its name and whether its documented default is a value it
            /// reads (false for optional fields, whose default is "not used").
            pub fn default_reads() -> Vec<(&'static str, bool)> {
                vec![ $( ($var, $kind.default_reads($default)), )* ]
            }
        }
    };
}

// 5 s for GPUTRACE_STALL_MS: longer than any kernel of a healthy training or inference
// step (microseconds to milliseconds; the longest are collectives waiting a few seconds
// for a late peer), short enough that a job a scheduler kills minutes later leaves the
// evidence.
define_settings! {
    /// Where trace files go.
    DIR = "GPUTRACE_DIR", dir: PathBuf = kind::DIR, default DEFAULT_TRACE_DIR, Library, false,
        "where trace files go (directory mode 0700, files 0600)";
    MODE = "GPUTRACE_MODE", mode: Mode = kind::MODE, default "trace", Library, false,
        "`trace`, `dormant` (loaded, recording nothing until a window opens) or `off`";
    /// An explicit CUPTI library (`None`: searched for).
    CUPTI = "GPUTRACE_CUPTI", cupti: Option<PathBuf> = kind::PATH, default "search", Library, false,
        "the libcupti to use";
    API = "GPUTRACE_API", api: Api = kind::API, default "1", Library, false,
        "record the host side of runtime API calls (CUPTI callbacks); `activity`: as CUPTI RUNTIME records instead";
    DRIVER_API = "GPUTRACE_DRIVER_API", driver_api: DriverApi = kind::DRIVER_API, default "1", Library, false,
        "record driver-API launches, async copies and syncs (`cuLaunchKernel*`, `cuMemcpy*Async`: JAX/XLA, Triton, cuBLAS), each call once; `1`: from the start, `auto`: the kernel launches only from when the program is seen making them (cheaper on a runtime-only launch loop; late or never for cuBLAS in a GPU-bound program), `0`: none";
    BUFFER_KB = "GPUTRACE_BUFFER_KB", buffer_kb: u64 = kind::size(64, 262_144, "KiB"), default "8192", Library, false,
        "size of one CUPTI activity buffer";
    BUFFER_POOL_MB = "GPUTRACE_BUFFER_POOL_MB", buffer_pool_mb: u64 = kind::size(1, 65_536, "MiB"), default "256", Library, false,
        "most CUPTI buffer memory held at once; beyond it records are dropped and counted";
    FLUSH_MS = "GPUTRACE_FLUSH_MS", flush_ms: u64 = kind::ms(10, 1000), default "500", Library, false,
        "longest time between two writes of the trace file";
    EXIT_WAIT_MS = "GPUTRACE_EXIT_WAIT_MS", exit_wait_ms: u64 = kind::ms(0, 60_000), default "3000", Library, false,
        "longest wait at exit for the trace to be written";
    /// CUPTI activity kinds to enable (`kernel` alone with `GPUTRACE_API=0` and
    /// `GPUTRACE_HOOKS=0` is the CUPTI floor benchmark mode). SYNCHRONIZATION is off by
    /// default: it cost more on a launch-bound loop than any other kind (1.40x against
    /// 1.21x for kernel records alone, H200 sweep in bench/RESULTS.md) and adds nothing
    /// the runtime callbacks on the sync calls do not record.
    ACTIVITY = "GPUTRACE_ACTIVITY", activity: Vec<String> = kind::ACTIVITY, default "kernel,memcpy,memset,device,memory", Library, false,
        "CUPTI kinds, comma-separated, from kernel,memcpy,memset,sync,device,memory (must include kernel)";
    HOOKS = "GPUTRACE_HOOKS", hooks: bool = kind::FLAG, default "1", Library, false,
        "record the symbol hooks' calls (NCCL, copies, NVTX, ...)";
    SIGNAL = "GPUTRACE_SIGNAL", signal: Option<String> = kind::SIGNAL, default "off", Library, false,
        "`SIGUSR1` or `SIGUSR2`: opens a window in a dormant process";
    START_AFTER = "GPUTRACE_START_AFTER", start_after: Option<Duration> = kind::DURATION, default "off", Library, false,
        "opens a timed window this long after CUDA starts (a duration, see parse_duration)";
    /// A window's length when set (setting it makes the process dormant).
    DURATION = "GPUTRACE_DURATION", duration: Option<Duration> = kind::DURATION, default "10s", Library, false,
        "length of a window opened by the timer or the signal (a duration)";
    COMPRESS = "GPUTRACE_COMPRESS", compress: bool = kind::FLAG, default "1", Library, false,
        "zstd-compress the trace's event chunks";
    DEBUG = "GPUTRACE_DEBUG", debug: bool = kind::FLAG, default "0", Library, false,
        "print what the library does";
    NVML = "GPUTRACE_NVML", nvml: Nvml = kind::NVML, default "on from `gputrace run`/`attach`, off in the library", Both, false,
        "NVML sampling: `gputrace run`/`attach` read it from their own process into an environment file beside the traces (unset/`1`: libnvidia-ml.so.1, a path: that library, `0`: none) and give the job `0`; `inprocess` (or, without the command, `1`/a path) samples in the traced process instead (it hung PyTorch on an H200)";
    NVML_MS = "GPUTRACE_NVML_MS", nvml_ms: u64 = kind::ms_or_0(10, 60_000, "facts only"), default "100", Both, false,
        "NVML sampling period of the `gputrace` command's sampler and of the library's";
    GPM_MS = "GPUTRACE_GPM_MS", gpm_ms: u64 = kind::ms_or_0(10, 60_000, "off"), default "100", Command, false,
        "NVML GPM sampling period of the `gputrace` command's sampler: the GPU's SM activity, occupancy, tensor/FP/integer pipes, DRAM bandwidth, PCIe and NVLink rates (Hopper and newer)";
    PM = "GPUTRACE_PM", pm: Option<String> = kind::REMOVED, default "removed", Library, false,
        "removed (CUPTI PM sampling in the process): accepted with a note; `gputrace run`/`attach` record the GPU's counters with NVML GPM (GPUTRACE_GPM_MS)";
    PM_US = "GPUTRACE_PM_US", pm_us: Option<String> = kind::REMOVED, default "removed", Library, false,
        "removed with GPUTRACE_PM; accepted and ignored";
    HOST = "GPUTRACE_HOST", host: bool = kind::FLAG, default "1", Library, false,
        "the host sampler: the CUDA threads' CPU time, the process tree, the machine's CPU (0: off)";
    HOST_THREAD_MS = "GPUTRACE_HOST_THREAD_MS", host_thread_ms: u64 = kind::ms(1, 100), default "3", Library, false,
        "host sampler period for the threads that issue CUDA work";
    HOST_TREE_MS = "GPUTRACE_HOST_TREE_MS", host_tree_ms: u64 = kind::ms(10, 10_000), default "100", Library, false,
        "host sampler period for the process tree and the machine";
    HOST_ALL_THREADS = "GPUTRACE_HOST_ALL_THREADS", host_all_threads: bool = kind::FLAG, default "1", Library, false,
        "while a thread that issues CUDA work is blocked: every thread of the process at the host thread period (CPU time; the system call of the blocked ones), the GIL's holder, and the Python stacks of every Python thread (0: only the CUDA-issuing threads and the main thread)";
    /// Frames kept of the caller's Python stack at the calls that matter (0: off).
    PYSTACK = "GPUTRACE_PYSTACK", pystack: usize = kind::PYSTACK, default "1", Library, false,
        "Python call sites: the calling thread's Python stack at synchronising calls, copies, allocations and NCCL calls, in CPython 3.9-3.13 (0: off; 2-16: frames kept, 1 or on: 16)";
    PYSAMPLE_MS = "GPUTRACE_PYSAMPLE_MS", pysample_ms: u64 = kind::ms_or_0(1, 1000, "off"), default "10", Library, false,
        "Python stack samples of the threads that issue CUDA work during a trace window, every this many ms; taken by the host sampler, so off with it";
    STALL_MS = "GPUTRACE_STALL_MS", stall_ms: u64 = kind::ms_or_0(100, 3_600_000, "no watchdog"), default "5000", Library, false,
        "launched GPU work that makes no progress for this long is a stall: CUPTI is flushed (forced) so every completed record reaches the file, and a stall report (outstanding operations, every thread's call and Python stack) is written, again every period while it lasts";
    HANDOVER_MS = "GPUTRACE_HANDOVER_MS", handover_ms: u64 = kind::ms_or_0(100, 60_000, "off"), default "500", Library, false,
        "while launched GPU work is outstanding and CUPTI has handed over no record for this long, its buffers are flushed (CUPTI's default flush: the buffers whose records are all complete), so a busy job killed with SIGKILL loses about this much of what its GPU ran";
    HANDOVER_FORCED = "GPUTRACE_HANDOVER_FORCED", handover_forced: bool = kind::FLAG, default "0", Library, true,
        "the periodic handover forces CUPTI's flush (it then hands over incomplete records too, whose completion never comes: the kernels running at that moment are lost); for measuring it against the default flush";
    RANK = "GPUTRACE_RANK", rank: Option<u32> = kind::RANK, default "off", Library, false,
        "this process's rank in its job (a whole number); before RANK, SLURM_PROCID, ...";
    KEEP_SECRETS = "GPUTRACE_KEEP_SECRETS", keep_secrets: bool = kind::FLAG, default "0", Both, false,
        "keep command lines as they are: the library in the trace, `gputrace run`/`attach` in the environment file, the analyzer in what it shows (by default values that look like secrets become `<redacted>`: crate::redact)";
    NVML_SKIP = "GPUTRACE_NVML_SKIP", nvml_skip: Skip = kind::SKIP, default "none", Library, true,
        "NVML reads the sampler leaves out, comma-separated: events, procs, ecc, pcie, ticks (for finding a read that misbehaves)";
    PER_THREAD_BUFFERS = "GPUTRACE_PER_THREAD_BUFFERS", per_thread_buffers: bool = kind::FLAG, default "0", Library, true,
        "CUPTI per-thread activity buffers";
    DEVICE_BUFFER_MB = "GPUTRACE_DEVICE_BUFFER_MB", device_buffer_mb: Option<u64> = kind::optional_size(1, 4096, "MiB"), default "off", Library, true,
        "CUPTI's device buffer size";
    /// CUPTI's flush period (`None`: GPUTRACE_FLUSH_MS; 0: CUPTI's own policy).
    CUPTI_FLUSH_MS = "GPUTRACE_CUPTI_FLUSH_MS", cupti_flush_ms: Option<u64> = kind::optional_ms(0, 10_000), default "GPUTRACE_FLUSH_MS", Library, true,
        "CUPTI's flush period (0: CUPTI's own policy)";
    ZEROED_BUFFERS = "GPUTRACE_ZEROED_BUFFERS", zeroed_buffers: bool = kind::FLAG, default "1", Library, true,
        "promise CUPTI buffers that are already zero";
    LIB = "GPUTRACE_LIB", lib: Option<PathBuf> = kind::PATH, default "next to `gputrace`", Command, false,
        "the library `gputrace run` preloads";
    THREADS = "GPUTRACE_THREADS", threads: Option<u64> = kind::COUNT, default "the cores the process may use", Command, false,
        "workers reading and analysing traces";
    TESTS_KEEP = "GPUTRACE_TESTS_KEEP", tests_keep: Option<String> = kind::RAW, default "off", Developer, false,
        "keep the end-to-end tests' temporary directories";
    BENCH_EVENTS = "GPUTRACE_BENCH_EVENTS", bench_events: Option<String> = kind::RAW, default "10000000", Developer, false,
        "events in the analyzer benchmark's synthetic trace";
    BENCH_REPS = "GPUTRACE_BENCH_REPS", bench_reps: Option<String> = kind::RAW, default "5", Developer, false,
        "repetitions of the analyzer benchmark";
    BENCH_WRITE = "GPUTRACE_BENCH_WRITE", bench_write: Option<String> = kind::RAW, default "off", Developer, false,
        "also write the analyzer benchmark's synthetic trace to this file";
    BENCH_SAMPLED = "GPUTRACE_BENCH_SAMPLED", bench_sampled: Option<String> = kind::RAW, default "0", Developer, false,
        "1: the analyzer benchmark's trace also has the samplers' data at their default rates (host, Python stacks and call sites); 2: that, and a 5 ms host wait after each step";
}

impl Values {
    /// The values set by `vars` (the environment's `GPUTRACE_*` pairs; others are
    /// skipped) over the defaults, and what was wrong, one clause each.
    pub fn read<'a>(vars: impl IntoIterator<Item = (&'a str, &'a str)>) -> (Values, Vec<String>) {
        let mut v = Values::defaults();
        let mut wrong = Vec::new();
        for (k, val) in vars {
            if !k.starts_with(crate::protocol::SETTING_PREFIX) {
                continue;
            }
            match v.set(k, val) {
                None => wrong.push(format!("{k} unknown, ignored")),
                Some(Err(what)) => wrong.push(format!("{k}={val:?} ignored (expected {what})")),
                Some(Ok(())) => {}
            }
        }
        (v, wrong)
    }

    /// The settings of this process's environment (the `gputrace` command's; the
    /// library reads its own through its secure-execution rule).
    pub fn from_env() -> (Values, Vec<String>) {
        let vars: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        Values::read(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_that_is_a_value_reads_as_one() {
        let optional = [
            names::CUPTI,
            names::SIGNAL,
            names::START_AFTER,
            names::DURATION,
            names::NVML,
            names::PM,
            names::PM_US,
            names::RANK,
            names::NVML_SKIP,
            names::DEVICE_BUFFER_MB,
            names::CUPTI_FLUSH_MS,
            names::LIB,
            names::THREADS,
            names::TESTS_KEEP,
            names::BENCH_EVENTS,
            names::BENCH_REPS,
            names::BENCH_WRITE,
            names::BENCH_SAMPLED,
        ];
        for (name, reads) in Values::default_reads() {
            assert_eq!(
                reads,
                !optional.contains(&name),
                "{name}: its documented default should {}be a value",
                if reads { "not " } else { "" }
            );
        }
    }

    #[test]
    fn defaults_and_values() {
        let d = Values::defaults();
        assert_eq!(d.mode, Mode::Trace);
        assert_eq!(d.dir, PathBuf::from("gputrace-traces"));
        assert_eq!(d.flush_ms, 500);
        assert_eq!(d.pystack, PYSTACK_DEPTH);
        assert_eq!(d.nvml, Nvml::Unset);
        assert_eq!(d.duration, None);
        assert_eq!(
            d.activity,
            ["kernel", "memcpy", "memset", "device", "memory"]
        );
        let (v, wrong) = Values::read([
            ("GPUTRACE_MODE", "dormant"),
            ("GPUTRACE_FLUSH_MS", "100"),
            ("GPUTRACE_NVML", "inprocess"),
            ("GPUTRACE_API", "activity"),
            ("GPUTRACE_DURATION", "2s"),
            ("PATH", "/bin"),
        ]);
        assert!(wrong.is_empty(), "{wrong:?}");
        assert_eq!(
            (v.mode, v.flush_ms, v.nvml, v.api, v.duration),
            (
                Mode::Dormant,
                100,
                Nvml::InProcess,
                Api::Activity,
                Some(Duration::from_secs(2))
            )
        );
        let (v, wrong) = Values::read([
            ("GPUTRACE_FLUSH_MS", "5"),
            ("GPUTRACE_MODE", "sometimes"),
            ("GPUTRACE_FROB", "1"),
        ]);
        assert_eq!(v, Values::defaults());
        assert_eq!(wrong.len(), 3, "{wrong:?}");
        assert!(
            wrong[0].contains("milliseconds between 10 and 1000"),
            "{wrong:?}"
        );
        assert!(wrong[1].contains("trace, dormant or off"), "{wrong:?}");
        assert!(wrong[2].contains("unknown"), "{wrong:?}");
    }
}
