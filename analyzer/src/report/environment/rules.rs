//! The environment rules, one set: `report` evaluates them on the facts a trace
//! recorded (the `env_*` findings), `gputrace doctor` on the facts it gathers on the
//! machine now (its checklist). Each rule reads facts through [`Facts`], by the keys of
//! `gputrace_env::facts::keys` (the table the library writes them with), and returns
//! what it found as numbers; the wording is the caller's.

use gputrace_env::facts::{self, keys, Fact};
use gputrace_format::FACT_HOST;

/// Where the rules read facts: a trace's, or those the doctor gathered.
pub trait Facts {
    /// The value of `key` for `device` (an NVML index, or [`FACT_HOST`]).
    fn fact(&self, device: u32, key: &str) -> Option<&str>;
}

impl Facts for crate::model::trace::Trace {
    fn fact(&self, device: u32, key: &str) -> Option<&str> {
        crate::model::trace::fact(self, device, key)
    }
}

impl Facts for [Fact] {
    fn fact(&self, device: u32, key: &str) -> Option<&str> {
        facts::find(self, device, key)
    }
}

/// Facts with a few host facts laid over them (the doctor asks about each CUDA runtime
/// installed as if a process had loaded it).
pub struct With<'a, F: Facts + ?Sized> {
    pub base: &'a F,
    pub host: &'a [(&'static str, &'a str)],
}

impl<F: Facts + ?Sized> Facts for With<'_, F> {
    fn fact(&self, device: u32, key: &str) -> Option<&str> {
        let own = (device == FACT_HOST)
            .then(|| self.host.iter().find(|(k, _)| *k == key).map(|(_, v)| *v))
            .flatten();
        own.or_else(|| self.base.fact(device, key))
    }
}

/// `13.0.96` as (13, 0); `12` as (12, 0).
pub fn major_minor(v: &str) -> Option<(u32, u32)> {
    let mut it = v.split('.');
    let a = it.next()?.trim().parse().ok()?;
    let b = it.next().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    Some((a, b))
}

// ---------------------------------------------------------------------------------
// NVML

/// Why NVML was not used (`missing: ...`, `no_permission: ...`, `off`), or `None` when
/// it was (or the facts do not say).
pub fn nvml_unavailable<F: Facts + ?Sized>(f: &F) -> Option<&str> {
    f.fact(FACT_HOST, keys::NVML).filter(|v| *v != "ok")
}

// ---------------------------------------------------------------------------------
// CUDA versions

/// CUDA versions that do not fit together.
#[derive(Clone, Debug, PartialEq)]
pub enum Mismatch {
    /// The runtime is newer than the newest CUDA the driver supports: a newer major
    /// needs the forward-compatibility package (or fails); a newer minor runs in
    /// minor-version compatibility mode.
    RuntimeNewerThanDriver {
        runtime: (u32, u32),
        driver: (u32, u32),
    },
    /// The process loaded a libcuda of another version than the kernel driver's.
    ForwardCompatLibcuda { libcuda: String, driver: String },
    /// torch was built for another CUDA major than the runtime loaded.
    TorchRuntimeMismatch {
        torch_cuda: (u32, u32),
        runtime: (u32, u32),
    },
    /// torch was built for a CUDA major newer than the driver supports.
    TorchNewerThanDriver {
        torch_cuda: (u32, u32),
        driver: (u32, u32),
    },
}

impl Mismatch {
    /// The stable id (`report --json`'s words).
    pub fn kind(&self) -> &'static str {
        match self {
            Mismatch::RuntimeNewerThanDriver { .. } => "runtime_newer_than_driver",
            Mismatch::ForwardCompatLibcuda { .. } => "forward_compat_libcuda",
            Mismatch::TorchRuntimeMismatch { .. } => "torch_runtime_mismatch",
            Mismatch::TorchNewerThanDriver { .. } => "torch_newer_than_driver",
        }
    }

    /// Whether it breaks CUDA (rather than works in a compatibility mode).
    pub fn serious(&self) -> bool {
        match self {
            Mismatch::RuntimeNewerThanDriver { runtime, driver } => runtime.0 > driver.0,
            Mismatch::ForwardCompatLibcuda { .. } => false,
            Mismatch::TorchRuntimeMismatch { .. } | Mismatch::TorchNewerThanDriver { .. } => true,
        }
    }
}

/// Checks the CUDA versions the facts give against each other.
pub fn cuda_versions<F: Facts + ?Sized>(f: &F) -> Vec<Mismatch> {
    let host = |k| f.fact(FACT_HOST, k);
    let mut out = Vec::new();
    let rt = host(keys::CUDA_RUNTIME_VERSION).and_then(major_minor);
    let drv = host(keys::CUDA_DRIVER_VERSION).and_then(major_minor);
    if let (Some(runtime), Some(driver)) = (rt, drv) {
        if runtime > driver {
            out.push(Mismatch::RuntimeNewerThanDriver { runtime, driver });
        }
    }
    if let (Some(lib), Some(drv)) = (host(keys::LIBCUDA_VERSION), host(keys::DRIVER_VERSION)) {
        if lib != drv {
            out.push(Mismatch::ForwardCompatLibcuda {
                libcuda: lib.to_string(),
                driver: drv.to_string(),
            });
        }
    }
    let torch = host(keys::TORCH_CUDA).and_then(major_minor);
    if let (Some(torch_cuda), Some(runtime)) = (torch, rt) {
        if torch_cuda.0 != runtime.0 {
            out.push(Mismatch::TorchRuntimeMismatch {
                torch_cuda,
                runtime,
            });
        }
    }
    if let (Some(torch_cuda), Some(driver)) = (torch, drv) {
        if torch_cuda.0 > driver.0 {
            out.push(Mismatch::TorchNewerThanDriver { torch_cuda, driver });
        }
    }
    out
}

// ---------------------------------------------------------------------------------
// CPUs

/// A process's CPUs, mostly far from a GPU.
#[derive(Clone, Debug, PartialEq)]
pub struct FarCpus {
    pub device: u32,
    pub process_cpus: Vec<u32>,
    pub local_cpus: Vec<u32>,
    /// Share of the process's CPUs that are local to the GPU.
    pub local_pct: f64,
}

/// The GPUs of `devices` whose local CPUs are under half of the CPUs the process may
/// run on. Nothing where every CPU is local (one socket).
pub fn far_cpus<F: Facts + ?Sized>(f: &F, devices: &[u32]) -> Vec<FarCpus> {
    let Some(proc_cpus) = f
        .fact(FACT_HOST, keys::PROCESS_CPUS)
        .and_then(facts::parse_cpulist)
    else {
        return Vec::new();
    };
    let host = f
        .fact(FACT_HOST, keys::HOST_CPUS)
        .and_then(|v| v.parse::<usize>().ok());
    let mut out = Vec::new();
    for &d in devices {
        let Some(local) = f.fact(d, keys::LOCAL_CPUS).and_then(facts::parse_cpulist) else {
            continue;
        };
        if proc_cpus.is_empty() || host.is_some_and(|h| local.len() >= h) {
            continue;
        }
        let n = proc_cpus.iter().filter(|c| local.contains(c)).count();
        let pct = 100.0 * n as f64 / proc_cpus.len() as f64;
        if pct < 50.0 {
            out.push(FarCpus {
                device: d,
                process_cpus: proc_cpus.clone(),
                local_cpus: local,
                local_pct: pct,
            });
        }
    }
    out
}

/// A cgroup CPU quota under two CPUs per GPU: (quota, GPUs).
pub fn cpu_quota_short<F: Facts + ?Sized>(f: &F) -> Option<(f64, f64)> {
    let gpus: f64 = f
        .fact(FACT_HOST, keys::GPU_COUNT)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    let quota: f64 = f
        .fact(FACT_HOST, keys::CGROUP_CPUS)
        .and_then(|c| c.parse().ok())?;
    (gpus > 0.0 && quota < 2.0 * gpus).then_some((quota, gpus))
}

// ---------------------------------------------------------------------------------
// Power and the PCIe link

/// A GPU's power limit and its default (mW).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PowerLimit {
    pub limit_mw: u64,
    pub default_mw: u64,
}

impl PowerLimit {
    /// Set more than a watt below the default.
    pub fn lowered(&self) -> bool {
        self.limit_mw + 1000 < self.default_mw
    }
}

pub fn power_limit<F: Facts + ?Sized>(f: &F, device: u32) -> Option<PowerLimit> {
    let mw = |k| f.fact(device, k).and_then(|v| v.parse::<u64>().ok());
    Some(PowerLimit {
        limit_mw: mw(keys::POWER_LIMIT_MW)?,
        default_mw: mw(keys::POWER_DEFAULT_LIMIT_MW)?,
    })
}

/// What NVML's clock event reasons (`fmt::CLOCK_REASON_*` bits) say about a GPU, for the
/// report's `env_throttled` and `gputrace doctor` alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThrottleKind {
    /// No throttling reason.
    None,
    /// Held at its default power limit: how the GPU's boost works under a full load (an
    /// H200 running bf16 matmuls at 1500 of 1980 MHz, 400 W of 700 W, said
    /// sw_power_cap). Worth knowing, not a fault.
    AtPowerCap,
    /// Held at a power limit set below the default.
    LoweredPowerLimit,
    /// Too hot (hardware or software thermal slowdown).
    Thermal,
    /// A hardware slowdown or power brake (power supply, temperature).
    Hardware,
}

impl ThrottleKind {
    /// The reasons `reasons` of a GPU whose power limit is `limit` (when known).
    pub fn of(reasons: u64, limit: Option<PowerLimit>) -> ThrottleKind {
        use gputrace_format as fmt;
        let r = reasons & fmt::CLOCK_REASONS_THROTTLE;
        if r == 0 {
            ThrottleKind::None
        } else if r & (fmt::CLOCK_REASON_HW_THERMAL | fmt::CLOCK_REASON_SW_THERMAL) != 0 {
            ThrottleKind::Thermal
        } else if r & (fmt::CLOCK_REASON_HW_SLOWDOWN | fmt::CLOCK_REASON_HW_POWER_BRAKE) != 0 {
            ThrottleKind::Hardware
        } else if limit.is_some_and(|p| p.lowered()) {
            ThrottleKind::LoweredPowerLimit
        } else {
            ThrottleKind::AtPowerCap
        }
    }

    /// A fault worth a warning (not the normal power cap).
    pub fn is_fault(self) -> bool {
        !matches!(self, ThrottleKind::None | ThrottleKind::AtPowerCap)
    }

    /// What to do about it.
    pub fn fix(self) -> &'static str {
        match self {
            ThrottleKind::Thermal => "The GPU is too hot: check cooling and airflow (nvidia-smi -q -d TEMPERATURE,PERFORMANCE).",
            ThrottleKind::Hardware => "Hardware slowdown (power supply or temperature): check nvidia-smi -q -d PERFORMANCE and the machine's power and cooling.",
            ThrottleKind::LoweredPowerLimit => "Held at a power limit below the default: restore it (sudo nvidia-smi -i N -pl <default watts>) or ask the administrator why it was lowered.",
            ThrottleKind::AtPowerCap | ThrottleKind::None => "Nothing to fix: the GPU boosts up to its default power limit and holds there under a full load.",
        }
    }
}

/// A PCIe link trained below what it can do: (narrower, slower generation). NVML's
/// "not available" readings (0 or the sentinel) are not below anything.
pub fn pcie_below_max(gen: u32, gen_max: u32, width: u32, width_max: u32) -> Option<(bool, bool)> {
    let known = [gen, gen_max, width, width_max]
        .iter()
        .all(|v| *v != gputrace_format::ENV_NA && *v > 0);
    let below = (width < width_max, gen < gen_max);
    (known && (below.0 || below.1)).then_some(below)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(key: &'static str, value: &str) -> Fact {
        Fact {
            device: FACT_HOST,
            key,
            value: value.into(),
        }
    }

    #[test]
    fn versions() {
        let f = [
            host(keys::CUDA_RUNTIME_VERSION, "13.1.80"),
            host(keys::CUDA_DRIVER_VERSION, "13.0"),
            host(keys::TORCH_CUDA, "14.0"),
        ];
        let kinds: Vec<&str> = cuda_versions(&f[..]).iter().map(|m| m.kind()).collect();
        assert_eq!(
            kinds,
            [
                "runtime_newer_than_driver",
                "torch_runtime_mismatch",
                "torch_newer_than_driver"
            ]
        );
        // A minor-newer runtime works in compatibility mode; a major-newer one does not.
        assert!(!cuda_versions(&f[..])[0].serious());
        let over = With {
            base: &f[..],
            host: &[(keys::CUDA_RUNTIME_VERSION, "14.0")],
        };
        assert!(cuda_versions(&over)[0].serious());
    }

    #[test]
    fn cpus_and_power() {
        let mut f = vec![
            host(keys::PROCESS_CPUS, "0-3"),
            host(keys::HOST_CPUS, "16"),
            host(keys::GPU_COUNT, "4"),
            host(keys::CGROUP_CPUS, "6"),
        ];
        f.push(Fact {
            device: 0,
            key: keys::LOCAL_CPUS,
            value: "8-15".into(),
        });
        f.push(Fact {
            device: 1,
            key: keys::LOCAL_CPUS,
            value: "0-7".into(),
        });
        let far = far_cpus(&f[..], &[0, 1]);
        assert_eq!(far.len(), 1);
        assert_eq!((far[0].device, far[0].local_pct), (0, 0.0));
        assert_eq!(cpu_quota_short(&f[..]), Some((6.0, 4.0)));
        for (k, v) in [
            (keys::POWER_LIMIT_MW, "500000"),
            (keys::POWER_DEFAULT_LIMIT_MW, "700000"),
        ] {
            f.push(Fact {
                device: 0,
                key: k,
                value: v.into(),
            });
        }
        assert!(power_limit(&f[..], 0).is_some_and(|p| p.lowered()));
        assert_eq!(power_limit(&f[..], 1), None);
        assert_eq!(pcie_below_max(5, 5, 8, 16), Some((true, false)));
        assert_eq!(pcie_below_max(5, 5, 16, 16), None);
        assert_eq!(pcie_below_max(0, 5, 16, 16), None);
    }

    /// Every read of a fact names its key by `gputrace_env::facts::keys`, never by a
    /// string literal (tests aside): a key renamed on the writing side cannot be
    /// silently missed here.
    #[test]
    fn fact_keys_are_read_through_the_table() {
        fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for e in std::fs::read_dir(dir).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    out.push(p);
                }
            }
        }
        // A literal inside the parentheses of one of these calls, or right after one of
        // these comparisons.
        let calls = ["fact(", "facts::find(", "host(", "f("];
        let compares = ["str(f.key) == \"", "*k == \"", ".key == \""];
        let mut files = Vec::new();
        walk(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut files,
        );
        let mut bad = Vec::new();
        for p in files {
            let text = std::fs::read_to_string(&p).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for (n, line) in code.lines().enumerate() {
                let l = line.trim_start();
                if l.starts_with("//") {
                    continue;
                }
                let in_call = calls.iter().any(|c| {
                    line.match_indices(c).any(|(i, _)| {
                        let pre = line[..i].chars().last();
                        let word = pre.is_some_and(|ch| ch.is_alphanumeric() || ch == '_');
                        let args = &line[i + c.len()..];
                        let args = &args[..args.find(')').unwrap_or(args.len())];
                        // A literal that reads as a key (`cuda_driver_version`).
                        let key = args.split('"').skip(1).step_by(2).any(|lit| {
                            !lit.is_empty()
                                && lit.chars().all(|ch| ch.is_ascii_lowercase() || ch == '_')
                        });
                        !word && key
                    })
                });
                if in_call || compares.iter().any(|c| line.contains(c)) {
                    bad.push(format!("{}:{}: {}", p.display(), n + 1, l));
                }
            }
        }
        assert!(bad.is_empty(), "fact keys as literals:\n{}", bad.join("\n"));
    }
}
