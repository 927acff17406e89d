//! Facts about the machine and the process, read once per trace (and by `gputrace
//! doctor`) from /proc, /sys and the files of the libraries loaded, never by running
//! anything: versions of the driver, the CUDA runtime, CUPTI, NCCL and torch; the CPUs
//! and memory the job may use; the kernel; container hints.
//!
//! Each fact is a key and a value (text). The keys are the constants of [`keys`]; the
//! trace stores them as [`gputrace_format::Fact`] events, device-scoped ones with the
//! GPU's NVML index.

use crate::nvml::{self, Nvml};
use gputrace_format::FACT_HOST;
use std::path::{Path, PathBuf};

/// The fact keys. Stable: the analyzer and users' scripts read them.
pub mod keys {
    /// `ok`, or why NVML is not usable: `missing: ...`, `no_permission: ...`,
    /// `off` (GPUTRACE_NVML=0).
    pub const NVML: &str = "nvml";
    pub const NVML_LIBRARY: &str = "nvml_library";
    pub const NVML_VERSION: &str = "nvml_version";
    /// The kernel driver, `580.159.04`.
    pub const DRIVER_VERSION: &str = "driver_version";
    /// The newest CUDA the driver supports, `13.0` (nvidia-smi's "CUDA Version").
    pub const CUDA_DRIVER_VERSION: &str = "cuda_driver_version";
    /// Versions read from the file names of the libraries the process loaded
    /// (`libcudart.so.13.0.96` gives `13.0.96`; a bare soname gives its major).
    pub const CUDA_RUNTIME_VERSION: &str = "cuda_runtime_version";
    pub const CUDA_RUNTIME_PATH: &str = "cuda_runtime_path";
    pub const CUPTI_VERSION: &str = "cupti_version";
    pub const NCCL_VERSION: &str = "nccl_version";
    /// `libcuda.so.580.159.04` names the driver that user-space CUDA belongs to.
    pub const LIBCUDA_VERSION: &str = "libcuda_version";
    /// torch's `version.py` next to the loaded libtorch: `2.11.0+cu130`, and the CUDA
    /// it was built for, `13.0`.
    pub const TORCH_VERSION: &str = "torch_version";
    pub const TORCH_CUDA: &str = "torch_cuda";
    pub const KERNEL_RELEASE: &str = "kernel_release";
    /// CPUs online, and the CPUs this process may run on (`0-15`).
    pub const HOST_CPUS: &str = "host_cpus";
    pub const PROCESS_CPUS: &str = "process_cpus";
    pub const HOST_MEMORY: &str = "host_memory_bytes";
    /// cgroup limits: CPUs (`2.5`, or `max`) and memory bytes (or `max`).
    pub const CGROUP_CPUS: &str = "cgroup_cpus";
    pub const CGROUP_MEMORY: &str = "cgroup_memory_bytes";
    /// `docker`, `podman`, `kubernetes`, `container` (some other) or `none`.
    pub const CONTAINER: &str = "container";
    pub const CUDA_VISIBLE_DEVICES: &str = "cuda_visible_devices";
    pub const PID: &str = "pid";
    /// When the process started, in CLOCK_REALTIME ns (the trace's clock): from
    /// `/proc/self/stat`'s start time (clock ticks since boot, 10 ms apart) and the boot
    /// clock read beside the real-time one. Tells the time before tracing began (imports
    /// and set-up before the first CUDA call).
    pub const PROCESS_START_NS: &str = "process_start_ns";
    /// In an environment file of `gputrace run`: the command it started (its pid), and
    /// how that process ended as its parent saw it (`exit 1`, `signal SIGKILL 9`,
    /// `signal SIGSEGV 11, core dumped`).
    pub const JOB_PID: &str = "job_pid";
    pub const JOB_END: &str = "job_end";
    /// The number of GPUs NVML sees.
    pub const GPU_COUNT: &str = "gpu_count";
    // Per GPU (the fact's device is the NVML index):
    pub const NAME: &str = "name";
    pub const UUID: &str = "uuid";
    pub const PCI_BUS_ID: &str = "pci_bus_id";
    /// `on` / `off`.
    pub const PERSISTENCE_MODE: &str = "persistence_mode";
    /// `default`, `exclusive_process`, `prohibited`, ...
    pub const COMPUTE_MODE: &str = "compute_mode";
    /// `on` / `off` (current MIG mode).
    pub const MIG_MODE: &str = "mig_mode";
    pub const POWER_DEFAULT_LIMIT_MW: &str = "power_default_limit_mw";
    pub const POWER_LIMIT_MW: &str = "power_limit_mw";
    /// The CPUs close to the GPU (NVML's ideal affinity, else sysfs `local_cpulist`).
    pub const LOCAL_CPUS: &str = "local_cpus";
    pub const NUMA_NODE: &str = "numa_node";
    /// Active NVLinks.
    pub const NVLINKS: &str = "nvlinks";
    /// NVML GPM on this GPU: `ok`, or why not (`unsupported_device: ...`,
    /// `no_permission: ...`, `driver_too_old: ...`, `error: ...`); written by the
    /// environment sampler that reads GPM.
    pub const GPM: &str = "gpm";
    /// What the process's Python call sites are (`CPython 3.12.3, 8 frames`), or why
    /// there are none; written by the library's Python-stack session.
    pub const PYTHON_CALL_SITES: &str = "python_call_sites";
    /// CUPTI PM sampling's state (`on: ...`, `refused: ...`): written by builds that
    /// sampled PM counters in the process; still read from their traces.
    pub const PM_SAMPLING: &str = "pm_sampling";
}

/// One fact: the device it is about ([`FACT_HOST`] for none), key, value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fact {
    pub device: u32,
    pub key: &'static str,
    pub value: String,
}

fn host(key: &'static str, value: impl Into<String>) -> Fact {
    Fact {
        device: FACT_HOST,
        key,
        value: value.into(),
    }
}

/// Facts about the host and this process, from /proc and /sys and the libraries
/// loaded. Reads files only.
pub fn host_facts() -> Vec<Fact> {
    let mut out = vec![host(keys::PID, std::process::id().to_string())];
    if let Some(t) = process_start_ns() {
        out.push(host(keys::PROCESS_START_NS, t.to_string()));
    }
    out.extend(library_facts(&loaded_libraries()));
    if let Some(k) = read_trim("/proc/sys/kernel/osrelease") {
        out.push(host(keys::KERNEL_RELEASE, k));
    }
    // SAFETY: sysconf has no preconditions.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if online > 0 {
        out.push(host(keys::HOST_CPUS, online.to_string()));
    }
    if let Some(cpus) = process_affinity() {
        out.push(host(keys::PROCESS_CPUS, format_cpulist(&cpus)));
    }
    if let Some(m) = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| meminfo_total(&s))
    {
        out.push(host(keys::HOST_MEMORY, m.to_string()));
    }
    let (cpus, mem) = cgroup_limits(Path::new("/"));
    if let Some(c) = cpus {
        out.push(host(keys::CGROUP_CPUS, c));
    }
    if let Some(m) = mem {
        out.push(host(keys::CGROUP_MEMORY, m));
    }
    out.push(host(keys::CONTAINER, container_hint(Path::new("/"))));
    if let Ok(v) = std::env::var("CUDA_VISIBLE_DEVICES") {
        out.push(host(keys::CUDA_VISIBLE_DEVICES, v));
    }
    out
}

/// Facts NVML gives: versions, and per GPU its identity, modes and limits.
pub fn nvml_facts(nvml: &Nvml) -> Vec<Fact> {
    let mut out = vec![
        host(keys::NVML, "ok"),
        host(keys::NVML_LIBRARY, nvml.path.display().to_string()),
    ];
    if let Some(v) = nvml.nvml_version() {
        out.push(host(keys::NVML_VERSION, v));
    }
    if let Some(v) = nvml.driver_version() {
        out.push(host(keys::DRIVER_VERSION, v));
    }
    if let Some(v) = nvml.cuda_driver_version() {
        out.push(host(keys::CUDA_DRIVER_VERSION, nvml::cuda_version_text(v)));
    }
    let n = nvml.device_count().unwrap_or(0);
    out.push(host(keys::GPU_COUNT, n.to_string()));
    for i in 0..n.min(64) {
        let Ok(d) = nvml.device(i) else { continue };
        let mut put = |key, value: String| {
            out.push(Fact {
                device: i,
                key,
                value,
            })
        };
        if let Some(v) = nvml.name(d) {
            put(keys::NAME, v);
        }
        if let Some(v) = nvml.uuid(d) {
            put(keys::UUID, v);
        }
        let bus = nvml.pci_bus_id(d);
        if let Some(v) = &bus {
            put(keys::PCI_BUS_ID, v.clone());
        }
        if let Some(v) = nvml.persistence_mode(d) {
            put(keys::PERSISTENCE_MODE, on_off(v));
        }
        if let Some(v) = nvml.compute_mode(d) {
            put(keys::COMPUTE_MODE, v.into());
        }
        if let Some((cur, _)) = nvml.mig_mode(d) {
            put(keys::MIG_MODE, on_off(cur));
        }
        if let Some(v) = nvml.power_default_limit_mw(d) {
            put(keys::POWER_DEFAULT_LIMIT_MW, v.to_string());
        }
        if let Some(v) = nvml.power_limit_mw(d) {
            put(keys::POWER_LIMIT_MW, v.to_string());
        }
        let sysfs = bus.as_deref().map(sysfs_pci_dir);
        let local = nvml.cpu_affinity(d).or_else(|| {
            let s = std::fs::read_to_string(sysfs.as_ref()?.join("local_cpulist")).ok()?;
            parse_cpulist(&s)
        });
        if let Some(c) = local {
            put(keys::LOCAL_CPUS, format_cpulist(&c));
        }
        if let Some(node) = sysfs.as_ref().and_then(|p| read_trim(p.join("numa_node"))) {
            put(keys::NUMA_NODE, node);
        }
        let links = nvml.nvlink_peers(d);
        if !links.is_empty() {
            put(keys::NVLINKS, links.len().to_string());
        }
    }
    out
}

/// Whether a fact is one [`nvml_facts`] gives (NVML's state, versions, and every
/// per-GPU fact) rather than one about the process or the host. An environment file
/// written by `gputrace run` lends a process trace these, and only these: the rest it
/// knows of itself.
pub fn is_nvml_fact(device: u32, key: &str) -> bool {
    device != FACT_HOST
        || [
            keys::NVML,
            keys::NVML_LIBRARY,
            keys::NVML_VERSION,
            keys::DRIVER_VERSION,
            keys::CUDA_DRIVER_VERSION,
            keys::GPU_COUNT,
        ]
        .contains(&key)
}

fn on_off(b: bool) -> String {
    if b { "on" } else { "off" }.to_string()
}

/// `/sys/bus/pci/devices/0000:17:00.0` for NVML's `00000000:17:00.0`.
pub fn sysfs_pci_dir(nvml_bus_id: &str) -> PathBuf {
    let id = nvml_bus_id.to_ascii_lowercase();
    // NVML pads the domain to 8 digits; sysfs uses 4.
    let id = match id.split_once(':') {
        Some((dom, rest)) if dom.len() > 4 => format!("{}:{rest}", &dom[dom.len() - 4..]),
        _ => id,
    };
    Path::new("/sys/bus/pci/devices").join(id)
}

/// The process's start time as CLOCK_REALTIME ns (see [`keys::PROCESS_START_NS`]).
fn process_start_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let ticks = gputrace_format::protocol::stat_start_time(&stat)?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz <= 0 {
        return None;
    }
    let clock = |id| {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid clock id and a pointer to a timespec we own.
        (unsafe { libc::clock_gettime(id, &mut ts) } == 0)
            .then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    };
    let (boot, real) = (clock(libc::CLOCK_BOOTTIME)?, clock(libc::CLOCK_REALTIME)?);
    let since_boot = ticks.checked_mul(1_000_000_000 / hz as u64)?;
    real.checked_sub(boot.checked_sub(since_boot)?)
}

fn read_trim(p: impl AsRef<Path>) -> Option<String> {
    let s = std::fs::read_to_string(p).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// The files mapped into this process (/proc/self/maps), with symlinks resolved so
/// that their names carry full versions.
pub fn loaded_libraries() -> Vec<PathBuf> {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    let mut seen = std::collections::BTreeSet::new();
    for line in maps.lines() {
        if let Some(p) = line.split_whitespace().nth(5) {
            if p.starts_with('/') && p.contains(".so") {
                seen.insert(PathBuf::from(p));
            }
        }
    }
    seen.into_iter().collect()
}

/// The version in a library's file name after `stem.so.`: `libcudart.so.13.0.96`
/// gives `13.0.96`.
pub fn version_from_name(path: &Path, stem: &str) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    let v = name.strip_prefix(stem)?.strip_prefix(".so.")?;
    (!v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '.')).then(|| v.to_string())
}

/// The best version of `stem` among `libs`: the path as mapped, or the file it links
/// to when that name says more.
fn library_version(libs: &[PathBuf], stem: &str) -> Option<(String, PathBuf)> {
    libs.iter().find_map(|p| {
        let v = version_from_name(p, stem)?;
        let real = std::fs::canonicalize(p).unwrap_or(p.clone());
        let better = version_from_name(&real, stem).filter(|r| r.len() > v.len());
        Some((better.unwrap_or(v), p.clone()))
    })
}

/// Versions of the CUDA libraries and of torch, from the libraries loaded.
pub fn library_facts(libs: &[PathBuf]) -> Vec<Fact> {
    let mut out = Vec::new();
    if let Some((v, p)) = library_version(libs, "libcudart") {
        out.push(host(keys::CUDA_RUNTIME_VERSION, v));
        out.push(host(keys::CUDA_RUNTIME_PATH, p.display().to_string()));
    }
    for (stem, key) in [
        ("libcupti", keys::CUPTI_VERSION),
        ("libnccl", keys::NCCL_VERSION),
        ("libcuda", keys::LIBCUDA_VERSION),
    ] {
        if let Some((v, _)) = library_version(libs, stem) {
            out.push(host(key, v));
        }
    }
    let torch = libs.iter().find_map(|p| {
        let name = p.file_name()?.to_str()?;
        if !name.starts_with("libtorch") {
            return None;
        }
        // site-packages/torch/lib/libtorch_cuda.so -> site-packages/torch/version.py
        let py = p.parent()?.parent()?.join("version.py");
        torch_version_py(&std::fs::read_to_string(py).ok()?)
    });
    if let Some((v, cuda)) = torch {
        out.push(host(keys::TORCH_VERSION, v));
        if let Some(c) = cuda {
            out.push(host(keys::TORCH_CUDA, c));
        }
    }
    out
}

/// (`__version__`, `cuda`) from torch's `version.py`.
pub fn torch_version_py(text: &str) -> Option<(String, Option<String>)> {
    let value = |key: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            let k = k.split(':').next()?.trim();
            if k != key {
                return None;
            }
            let v = v.trim().trim_matches(|c| c == '\'' || c == '"');
            (!v.is_empty() && v != "None").then(|| v.to_string())
        })
    };
    Some((value("__version__")?, value("cuda")))
}

/// Parses a Linux CPU list (`0-3,8,10-11`).
pub fn parse_cpulist(s: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b < a || b - a > 65_536 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.trim().parse().ok()?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// Writes CPU numbers as a Linux CPU list.
pub fn format_cpulist(cpus: &[u32]) -> String {
    let mut v = cpus.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        parts.push(if j == i {
            v[i].to_string()
        } else {
            format!("{}-{}", v[i], v[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// The CPUs this process may run on.
pub fn process_affinity() -> Option<Vec<u32>> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return None;
    }
    let n = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: reads bits of a valid set.
    let cpus: Vec<u32> = (0..n)
        .filter(|i| unsafe { libc::CPU_ISSET(*i, &set) })
        .map(|i| i as u32)
        .collect();
    (!cpus.is_empty()).then_some(cpus)
}

fn meminfo_total(s: &str) -> Option<u64> {
    let l = s.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = l.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The cgroup (v2, else v1) CPU and memory limits of this process, under `root`
/// (`/` except in tests): CPUs as a decimal or `max`, memory bytes or `max`.
pub fn cgroup_limits(root: &Path) -> (Option<String>, Option<String>) {
    let cg = std::fs::read_to_string(root.join("proc/self/cgroup")).unwrap_or_default();
    let fs = root.join("sys/fs/cgroup");
    // v2: one line "0::/path".
    if let Some(path) = cg.lines().find_map(|l| l.strip_prefix("0::")) {
        let dir = fs.join(path.trim_start_matches('/'));
        // The limit may be set on the group or any parent: the tightest wins.
        let mut cpus: Option<f64> = None;
        let mut mem: Option<u64> = None;
        let mut seen = false;
        for d in dir.ancestors().take_while(|d| d.starts_with(&fs)) {
            if let Ok(s) = std::fs::read_to_string(d.join("cpu.max")) {
                seen = true;
                if let Some(c) = cpu_max(&s) {
                    cpus = Some(cpus.map_or(c, |x| x.min(c)));
                }
            }
            if let Ok(s) = std::fs::read_to_string(d.join("memory.max")) {
                seen = true;
                if let Ok(m) = s.trim().parse::<u64>() {
                    mem = Some(mem.map_or(m, |x| x.min(m)));
                }
            }
        }
        if seen {
            return (
                Some(cpus.map_or("max".into(), |c| format!("{c:.2}"))),
                Some(mem.map_or("max".into(), |m| m.to_string())),
            );
        }
    }
    // v1: "N:cpu,cpuacct:/path" and "N:memory:/path".
    let v1 = |ctrl: &str| {
        cg.lines().find_map(|l| {
            let mut it = l.splitn(3, ':');
            let (_, ctrls, path) = (it.next()?, it.next()?, it.next()?);
            ctrls
                .split(',')
                .any(|c| c == ctrl)
                .then(|| path.to_string())
        })
    };
    let num = |p: PathBuf| -> Option<i64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
    let cpus = v1("cpu").and_then(|p| {
        let d = ["cpu,cpuacct", "cpu"]
            .iter()
            .map(|c| fs.join(c).join(p.trim_start_matches('/')))
            .find(|d| d.is_dir())?;
        let quota = num(d.join("cpu.cfs_quota_us"))?;
        let period = num(d.join("cpu.cfs_period_us"))?;
        Some(if quota <= 0 || period <= 0 {
            "max".to_string()
        } else {
            format!("{:.2}", quota as f64 / period as f64)
        })
    });
    let mem = v1("memory").and_then(|p| {
        let v = num(fs
            .join("memory")
            .join(p.trim_start_matches('/'))
            .join("memory.limit_in_bytes"))?;
        // v1 writes "no limit" as a huge number near i64::MAX.
        Some(if v <= 0 || v >= (1i64 << 60) {
            "max".to_string()
        } else {
            v.to_string()
        })
    });
    (cpus, mem)
}

/// `cpu.max` ("200000 100000" or "max 100000") as CPUs.
fn cpu_max(s: &str) -> Option<f64> {
    let mut it = s.split_whitespace();
    let quota: f64 = it.next()?.parse().ok()?;
    let period: f64 = it.next()?.parse().ok()?;
    (period > 0.0).then(|| quota / period)
}

/// What kind of container this process runs in, from marker files, the environment
/// and cgroup paths.
pub fn container_hint(root: &Path) -> String {
    if root.join(".dockerenv").exists() {
        return "docker".into();
    }
    if root.join("run/.containerenv").exists() {
        return "podman".into();
    }
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
        return "kubernetes".into();
    }
    let cg = std::fs::read_to_string(root.join("proc/1/cgroup")).unwrap_or_default();
    for (word, name) in [
        ("kubepods", "kubernetes"),
        ("docker", "docker"),
        ("containerd", "container"),
        ("lxc", "container"),
    ] {
        if cg.contains(word) {
            return name.into();
        }
    }
    "none".into()
}

/// The value of `key` for `device` in a list of facts.
pub fn find<'a>(facts: &'a [Fact], device: u32, key: &str) -> Option<&'a str> {
    facts
        .iter()
        .find(|f| f.device == device && f.key == key)
        .map(|f| f.value.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_round_trip() {
        assert_eq!(
            parse_cpulist("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(format_cpulist(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(format_cpulist(&[5]), "5");
        assert_eq!(parse_cpulist("3-1"), None);
        assert_eq!(parse_cpulist("x"), None);
        assert_eq!(parse_cpulist(""), Some(vec![]));
    }

    #[test]
    fn versions_come_from_library_file_names() {
        let p = Path::new("/x/nvidia/cu13/lib/libcudart.so.13.0.96");
        assert_eq!(
            version_from_name(p, "libcudart").as_deref(),
            Some("13.0.96")
        );
        let p = Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04");
        assert_eq!(
            version_from_name(p, "libcuda").as_deref(),
            Some("580.159.04")
        );
        // libcudart is not libcuda, and a bare .so has no version.
        assert_eq!(
            version_from_name(Path::new("/l/libcudart.so.13"), "libcuda"),
            None
        );
        assert_eq!(
            version_from_name(Path::new("/l/libnccl.so"), "libnccl"),
            None
        );
    }

    #[test]
    fn torch_version_py_is_read_without_python() {
        let text = "__version__ = '2.11.0+cu130'\ndebug = False\ncuda: Optional[str] = '13.0'\ngit_version = 'abc'\nhip: Optional[str] = None\n";
        assert_eq!(
            torch_version_py(text),
            Some(("2.11.0+cu130".into(), Some("13.0".into())))
        );
        let cpu = "__version__ = '2.5.0+cpu'\ncuda = None\n";
        assert_eq!(torch_version_py(cpu), Some(("2.5.0+cpu".into(), None)));
        assert_eq!(torch_version_py("nothing here"), None);
    }

    #[test]
    fn torch_is_found_next_to_a_loaded_libtorch() {
        let dir = std::env::temp_dir().join(format!("gputrace-env-torch-{}", std::process::id()));
        let lib = dir.join("site-packages/torch/lib");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(
            dir.join("site-packages/torch/version.py"),
            "__version__ = '2.11.0+cu130'\ncuda = '13.0'\n",
        )
        .unwrap();
        let facts = library_facts(&[
            lib.join("libtorch_cuda.so"),
            PathBuf::from("/w/nvidia/cu13/lib/libcudart.so.13.0.96"),
        ]);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            find(&facts, FACT_HOST, keys::TORCH_VERSION),
            Some("2.11.0+cu130")
        );
        assert_eq!(find(&facts, FACT_HOST, keys::TORCH_CUDA), Some("13.0"));
        assert_eq!(
            find(&facts, FACT_HOST, keys::CUDA_RUNTIME_VERSION),
            Some("13.0.96")
        );
    }

    #[test]
    fn cgroup_v2_limits_take_the_tightest_ancestor() {
        let root = std::env::temp_dir().join(format!("gputrace-env-cg-{}", std::process::id()));
        let job = root.join("sys/fs/cgroup/kubepods/pod1/job");
        std::fs::create_dir_all(&job).unwrap();
        std::fs::create_dir_all(root.join("proc/self")).unwrap();
        std::fs::write(root.join("proc/self/cgroup"), "0::/kubepods/pod1/job\n").unwrap();
        std::fs::write(job.join("cpu.max"), "max 100000\n").unwrap();
        std::fs::write(job.parent().unwrap().join("cpu.max"), "250000 100000\n").unwrap();
        std::fs::write(job.join("memory.max"), "17179869184\n").unwrap();
        let got = cgroup_limits(&root);
        let hint = container_hint(&root);
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(got, (Some("2.50".into()), Some("17179869184".into())));
        assert!(hint == "none" || hint == "kubernetes", "{hint}");
    }

    #[test]
    fn cgroup_v1_no_limit_reads_as_max() {
        let root = std::env::temp_dir().join(format!("gputrace-env-cg1-{}", std::process::id()));
        let cpu = root.join("sys/fs/cgroup/cpu,cpuacct/docker/abc");
        let mem = root.join("sys/fs/cgroup/memory/docker/abc");
        std::fs::create_dir_all(&cpu).unwrap();
        std::fs::create_dir_all(&mem).unwrap();
        std::fs::create_dir_all(root.join("proc/self")).unwrap();
        std::fs::write(
            root.join("proc/self/cgroup"),
            "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n",
        )
        .unwrap();
        std::fs::write(cpu.join("cpu.cfs_quota_us"), "-1\n").unwrap();
        std::fs::write(cpu.join("cpu.cfs_period_us"), "100000\n").unwrap();
        std::fs::write(mem.join("memory.limit_in_bytes"), "9223372036854771712\n").unwrap();
        let got = cgroup_limits(&root);
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(got, (Some("max".into()), Some("max".into())));
    }

    #[test]
    fn sysfs_paths_use_a_four_digit_domain() {
        assert_eq!(
            sysfs_pci_dir("00000000:17:00.0"),
            Path::new("/sys/bus/pci/devices/0000:17:00.0")
        );
    }

    #[test]
    fn host_facts_are_read_here() {
        let f = host_facts();
        assert!(find(&f, FACT_HOST, keys::PID).is_some());
        // This test process started before now, and not days ago.
        let start: u64 = find(&f, FACT_HOST, keys::PROCESS_START_NS)
            .expect("process start")
            .parse()
            .unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        assert!(start <= now + 20_000_000, "{start} {now}");
        assert!(now - start.min(now) < 86_400_000_000_000, "{start} {now}");
        assert!(find(&f, FACT_HOST, keys::CONTAINER).is_some());
    }

    #[test]
    fn nvml_facts_are_told_from_the_process_own() {
        // What a process knows of itself is never taken from another process's file.
        assert!(host_facts().iter().all(|f| !is_nvml_fact(f.device, f.key)));
        for k in [keys::NVML, keys::DRIVER_VERSION, keys::CUDA_DRIVER_VERSION] {
            assert!(is_nvml_fact(FACT_HOST, k), "{k}");
        }
        assert!(is_nvml_fact(0, keys::NAME));
        assert!(!is_nvml_fact(FACT_HOST, keys::CUDA_RUNTIME_VERSION));
    }
}
