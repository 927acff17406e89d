//! `gputrace doctor`: the environment checklist, with no job running. What the driver
//! and NVML say about each GPU now (clocks and throttle reasons, power limit, modes,
//! PCIe link, GPU-to-GPU links, processes on it, ECC), the CUDA runtimes installed
//! against the driver, and the CPUs and memory this shell may use. Each line is OK,
//! WARN (with the fix) or INFO. Reads only: it never changes a setting.

use crate::report::environment::rules::{self, Mismatch};
use gputrace_env::facts::{self, keys, Fact};
use gputrace_env::nvml::{self, Device, Nvml};
use gputrace_format::{self as fmt, FACT_HOST};
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Info,
}

impl Status {
    fn word(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::Warn => "WARN",
            Status::Info => "INFO",
        }
    }
}

/// One line of the checklist.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Check {
    /// Stable id of the check (`nvml`, `gpu`, `clocks`, `power_limit`, ...).
    pub check: String,
    /// The GPU (NVML index) it is about, if one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    pub status: Status,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// A CUDA runtime found installed.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Runtime {
    pub path: String,
    pub version: String,
    /// What it belongs to: `torch` (a wheel's nvidia/ folder), `toolkit`, `system`.
    pub owner: String,
}

/// GPU-to-GPU links, as `nvidia-smi topo -m` shows them: `NV<n>` (NVLinks), or the
/// PCIe path (`PIX`, `PXB`, `PHB`, `NODE`, `SYS`), `X` on the diagonal.
#[derive(Serialize, Clone, Debug, PartialEq, Default)]
pub struct Topology {
    pub gpus: Vec<u32>,
    pub matrix: Vec<Vec<String>>,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Doctor {
    pub checks: Vec<Check>,
    pub runtimes: Vec<Runtime>,
    pub topology: Topology,
    /// Every fact read, `device` absent for host facts.
    pub facts: Vec<FactOut>,
    /// Whether a CUDA job can be traced on this machine, and if not, why.
    pub bottom_line: BottomLine,
}

/// The doctor's answer in one line: `ready` is what `gputrace doctor`'s exit status
/// says (0 ready, [`CANNOT_TRACE_EXIT`] not).
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct BottomLine {
    pub ready: bool,
    pub line: String,
}

/// `gputrace doctor`'s exit status when nothing can be traced here.
pub const CANNOT_TRACE_EXIT: i32 = 4;

/// Whether the CUDA driver's library (`libcuda.so.1`, or `path`) loads in this process.
/// Loading it runs no CUDA call (no `cuInit`), only its initialisers.
fn driver_loads(path: Option<&std::path::Path>) -> bool {
    use cupti_sys::loader::{Library, Open};
    let name = path.unwrap_or(std::path::Path::new("libcuda.so.1"));
    Library::open(name, Open::Load).is_ok()
}

/// The bottom line: a job can be traced where the CUDA driver loads and a GPU is seen
/// (by NVML, or as a device node where NVML is not usable).
fn bottom_line(checks: &[Check], driver: bool) -> BottomLine {
    let warn = |id: &str| {
        checks
            .iter()
            .any(|c| c.check == id && c.status == Status::Warn)
    };
    let gpu_nodes = std::path::Path::new("/dev/nvidia0").exists();
    let mut why = Vec::new();
    if !driver {
        why.push("the CUDA driver library (libcuda.so.1) does not load: no NVIDIA driver here, or not mounted into this container");
    }
    if warn("gpu") {
        why.push("NVML sees no GPU");
    } else if warn("nvml") && !gpu_nodes {
        why.push("no GPU is visible (NVML is not usable and there is no /dev/nvidia0)");
    }
    let warns = checks.iter().filter(|c| c.status == Status::Warn).count();
    if why.is_empty() {
        let line = match warns {
            0 => "ready to trace".to_string(),
            1 => "ready to trace (1 warning above)".to_string(),
            n => format!("ready to trace ({n} warnings above)"),
        };
        BottomLine { ready: true, line }
    } else {
        BottomLine {
            ready: false,
            line: format!("cannot trace here: {}", why.join("; ")),
        }
    }
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct FactOut {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    pub key: String,
    pub value: String,
}

/// Where to look.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// NVML to load (`--nvml`, else `GPUTRACE_NVML`, else the driver's soname).
    pub nvml: Option<PathBuf>,
    /// Extra Python site-packages folders to search for CUDA runtimes.
    pub site_packages: Vec<PathBuf>,
    /// The CUDA driver library whose loading the bottom line checks (default
    /// `libcuda.so.1`).
    pub cuda_driver: Option<PathBuf>,
}

fn check(
    check: &str,
    gpu: Option<u32>,
    status: Status,
    message: String,
    fix: Option<&str>,
) -> Check {
    Check {
        check: check.into(),
        gpu,
        status,
        message,
        fix: fix.map(str::to_string),
    }
}

/// Runs every check.
pub fn run(o: &Options) -> Doctor {
    let mut checks = Vec::new();
    // GPUTRACE_NVML as `gputrace run` reads it; the doctor loads NVML whatever it says.
    let nvml_path =
        o.nvml.clone().or_else(
            || match crate::recording::nvml::Settings::from_env().0.nvml {
                crate::recording::nvml::NvmlChoice::Command(path) => path,
                _ => None,
            },
        );
    let nvml = Nvml::load(nvml_path.as_deref());
    // The facts a trace would record here; the rules below read them as the report
    // reads a trace's.
    let all_facts = gputrace_env::sampler::trace_facts(nvml.as_ref());
    let mut topology = Topology::default();
    match &nvml {
        Ok(n) if rules::nvml_unavailable(all_facts.as_slice()).is_none() => {
            let driver_cuda = n.cuda_driver_version();
            checks.push(check(
                "nvml",
                None,
                Status::Ok,
                format!(
                    "NVML {} ({}); driver {}, supports CUDA up to {}",
                    n.nvml_version().unwrap_or_else(|| "?".into()),
                    n.path.display(),
                    n.driver_version().unwrap_or_else(|| "?".into()),
                    driver_cuda
                        .map(nvml::cuda_version_text)
                        .unwrap_or_else(|| "?".into())
                ),
                None,
            ));
            gpu_checks(n, &all_facts, &mut checks);
            topology = topology_of(n);
        }
        _ => {
            let why = rules::nvml_unavailable(all_facts.as_slice()).unwrap_or("error");
            let (kind, text) = why.split_once(": ").unwrap_or((why, why));
            let fix = match kind {
                "no_permission" => "Run as a user allowed to open /dev/nvidia* (the video group), or give the container the utility capability (NVIDIA_DRIVER_CAPABILITIES=compute,utility).",
                "missing" => "Install the NVIDIA driver's utilities, or mount them into the container (the NVIDIA container toolkit: --gpus all); GPUTRACE_NVML or --nvml names the library if it is elsewhere.",
                _ => "Check that the NVIDIA driver is loaded (nvidia-smi should work).",
            };
            checks.push(check(
                "nvml",
                None,
                Status::Warn,
                format!("NVML is not usable: {text}; GPU checks skipped"),
                Some(fix),
            ));
        }
    }
    let runtimes = installed_runtimes(&o.site_packages);
    runtime_checks(&runtimes, &all_facts, &mut checks);
    host_checks(&all_facts, &mut checks);
    let bottom_line = bottom_line(&checks, driver_loads(o.cuda_driver.as_deref()));
    Doctor {
        bottom_line,
        checks,
        runtimes,
        topology,
        facts: all_facts
            .into_iter()
            .map(|f| FactOut {
                device: (f.device != FACT_HOST).then_some(f.device),
                key: f.key.to_string(),
                value: f.value,
            })
            .collect(),
    }
}

fn gb(bytes: u64) -> String {
    format!("{:.0} GB", bytes as f64 / 1e9)
}

fn gpu_checks(n: &Nvml, all: &[Fact], out: &mut Vec<Check>) {
    let count = n.device_count().unwrap_or(0);
    if count == 0 {
        out.push(check(
            "gpu",
            None,
            Status::Warn,
            "NVML sees no GPU".into(),
            Some("Check the driver (nvidia-smi) and, in a container, that GPUs were passed in (--gpus all)."),
        ));
        return;
    }
    for i in 0..count.min(64) {
        let Ok(d) = n.device(i) else { continue };
        let g = Some(i);
        let fact = |k| facts::find(all, i, k);
        let mem = n.memory(d);
        out.push(check(
            "gpu",
            g,
            Status::Ok,
            format!(
                "{}, {}, PCI {}",
                fact(keys::NAME).unwrap_or("?"),
                mem.map(|m| gb(m.total)).unwrap_or_else(|| "? GB".into()),
                fact(keys::PCI_BUS_ID).unwrap_or("?")
            ),
            None,
        ));
        clock_check(n, all, d, i, out);
        if let Some(p) = rules::power_limit(all, i) {
            let (lim, def) = (p.limit_mw, p.default_mw);
            if p.lowered() {
                out.push(check(
                    "power_limit",
                    g,
                    Status::Warn,
                    format!("power limit {} W, below the default {} W", lim / 1000, def / 1000),
                    Some("Restore it: sudo nvidia-smi -i N -pl <default watts> (or ask the administrator why it was lowered)."),
                ));
            } else {
                out.push(check(
                    "power_limit",
                    g,
                    Status::Ok,
                    format!(
                        "power limit {} W (default {} W), drawing {} W",
                        lim / 1000,
                        def / 1000,
                        n.power_mw(d)
                            .map(|p| (p / 1000).to_string())
                            .unwrap_or("?".into())
                    ),
                    None,
                ));
            }
        }
        match n.persistence_mode(d) {
            Some(true) => out.push(check("persistence", g, Status::Ok, "persistence mode on".into(), None)),
            Some(false) => out.push(check(
                "persistence",
                g,
                Status::Warn,
                "persistence mode off: every new CUDA process waits for the driver to set the GPU up".into(),
                Some("sudo nvidia-smi -pm 1, or run nvidia-persistenced."),
            )),
            None => {}
        }
        if let Some((true, _)) = n.mig_mode(d) {
            out.push(check(
                "mig",
                g,
                Status::Info,
                "MIG mode on: a job gets a slice of this GPU, not all of it".into(),
                None,
            ));
        }
        if let Some(m) = n.compute_mode(d) {
            if m != "default" {
                out.push(check(
                    "compute_mode",
                    g,
                    if m == "prohibited" {
                        Status::Warn
                    } else {
                        Status::Info
                    },
                    format!("compute mode {m}"),
                    (m == "prohibited").then_some("sudo nvidia-smi -i N -c DEFAULT"),
                ));
            }
        }
        pcie_check(n, d, i, out);
        process_check(n, d, i, out);
        if let Some(e) = n.ecc_errors(d, nvml::ECC_UNCORRECTED).filter(|e| *e > 0) {
            out.push(check(
                "ecc",
                g,
                Status::Warn,
                format!("{e} uncorrected ECC errors since the driver loaded"),
                Some("Look for Xid errors in the kernel log (dmesg | grep -i xid); a GPU that keeps producing them needs a reset or replacement."),
            ));
        }
        if let Some(local) = fact(keys::LOCAL_CPUS) {
            out.push(check(
                "local_cpus",
                g,
                Status::Info,
                format!(
                    "CPUs close to this GPU: {local}{}",
                    fact(keys::NUMA_NODE)
                        .map(|n| format!(" (NUMA node {n})"))
                        .unwrap_or_default()
                ),
                None,
            ));
        }
    }
    gpm_checks(n, count.min(64), out);
}

/// Longest wait for NVML's answers about GPM (a driver call may never return).
const GPM_PROBE_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Whether each GPU gives NVML GPM (the counters `gputrace run`/`attach` record), and
/// why not. Asked on a thread of its own with its own NVML session, waited for at most
/// [`GPM_PROBE_WAIT`]: a GPM call that hangs makes a line saying so, not a stuck doctor.
fn gpm_checks(n: &Nvml, count: u32, out: &mut Vec<Check>) {
    let path = n.path.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("gputrace-gpm-probe".into())
        .spawn(move || {
            let Ok(nv) = Nvml::load(Some(&path)) else {
                return;
            };
            for i in 0..count {
                let r = nv
                    .device(i)
                    .map_err(|e| gputrace_env::gpm::Unavailable {
                        kind: "error",
                        text: e.to_string(),
                    })
                    .and_then(|d| gputrace_env::gpm::probe(&nv, d));
                if tx.send((i, r)).is_err() {
                    return;
                }
            }
        });
    if spawned.is_err() {
        return;
    }
    let deadline = std::time::Instant::now() + GPM_PROBE_WAIT;
    for i in 0..count {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Ok((gpu, r)) = rx.recv_timeout(left) else {
            out.push(check(
                "gpm",
                Some(i),
                Status::Warn,
                format!(
                    "GPU performance metrics (NVML GPM): no answer from NVML within {} s",
                    GPM_PROBE_WAIT.as_secs()
                ),
                Some("A driver call is stuck: gputrace run/attach stop waiting for it and record no GPU metrics. Check the driver (nvidia-smi, dmesg for Xid errors); GPUTRACE_GPM_MS=0 turns GPM off."),
            ));
            return;
        };
        out.push(gpm_check(gpu, r));
    }
}

fn gpm_check(gpu: u32, r: Result<(), gputrace_env::gpm::Unavailable>) -> Check {
    let g = Some(gpu);
    let Err(u) = r else {
        return check(
            "gpm",
            g,
            Status::Ok,
            "GPU performance metrics (NVML GPM): available; gputrace run/attach record SM activity, occupancy, tensor/FP pipes and DRAM bandwidth".into(),
            None,
        );
    };
    let (status, what, fix) = match u.kind {
        "unsupported_device" => (
            Status::Info,
            "not supported by this GPU (Hopper or newer)",
            "None needed: the report estimates SM fill from grid sizes and cannot check memory bandwidth (memory_bound).",
        ),
        "no_permission" => (
            Status::Warn,
            "NVML refused access",
            "Run gputrace as root, or let every user read GPU performance counters: options nvidia NVreg_RestrictProfilingToAdminUsers=0 (modprobe.d), then reload the driver.",
        ),
        "driver_too_old" => (
            Status::Info,
            "this driver's NVML has no GPM",
            "Update the NVIDIA driver (GPM came with R520; Hopper or newer GPUs).",
        ),
        _ => (
            Status::Warn,
            "NVML failed",
            "Check the driver (nvidia-smi); GPUTRACE_GPM_MS=0 turns GPM off.",
        ),
    };
    check(
        "gpm",
        g,
        status,
        format!(
            "GPU performance metrics (NVML GPM): {what} ({}): {}",
            u.kind, u.text
        ),
        Some(fix),
    )
}

fn clock_check(n: &Nvml, all: &[Fact], d: Device, i: u32, out: &mut Vec<Check>) {
    let (Some(sm), Some(max)) = (n.clock(d, nvml::CLOCK_SM), n.max_clock(d, nvml::CLOCK_SM)) else {
        return;
    };
    let reasons = n.clock_reasons(d).unwrap_or(0);
    let names = fmt::clock_reason_names(reasons).join(", ");
    let msg = format!(
        "SM clock {sm} of {max} MHz{}{}",
        if names.is_empty() { "" } else { "; reasons: " },
        names
    );
    // The report's rule (env_throttled): held at the default power limit is how the GPU
    // boosts under load, not a fault.
    let throttle = rules::ThrottleKind::of(reasons, rules::power_limit(all, i));
    if !throttle.is_fault() {
        out.push(check("clocks", Some(i), Status::Ok, msg, None));
        return;
    }
    out.push(check(
        "clocks",
        Some(i),
        Status::Warn,
        msg,
        Some(throttle.fix()),
    ));
}

fn pcie_check(n: &Nvml, d: Device, i: u32, out: &mut Vec<Check>) {
    let [Some(gen), Some(gmax), Some(w), Some(wmax)] = n.pcie_link(d) else {
        return;
    };
    let msg = format!("PCIe link gen {gen} x{w} (maximum gen {gmax} x{wmax})");
    let below = rules::pcie_below_max(gen, gmax, w, wmax);
    if below.is_some_and(|(narrow, _)| narrow) {
        out.push(check(
            "pcie",
            Some(i),
            Status::Warn,
            msg,
            Some("The link trained narrower than it can: reseat the card or check the slot and riser (lspci -vv shows LnkSta)."),
        ));
    } else if below.is_some() {
        // GPUs lower the link generation when idle to save power.
        let idle = n.clock_reasons(d).unwrap_or(0) & fmt::CLOCK_REASON_GPU_IDLE != 0;
        out.push(check(
            "pcie",
            Some(i),
            if idle { Status::Info } else { Status::Warn },
            format!(
                "{msg}{}",
                if idle { "; the GPU is idle, and idle GPUs lower the link speed: check again under load" } else { "" }
            ),
            (!idle).then_some("Under load the link runs below its generation: check the slot, BIOS PCIe settings and risers."),
        ));
    } else {
        out.push(check("pcie", Some(i), Status::Ok, msg, None));
    }
}

fn process_check(n: &Nvml, d: Device, i: u32, out: &mut Vec<Check>) {
    match n.compute_processes(d) {
        Ok(p) if p.is_empty() => out.push(check(
            "processes",
            Some(i),
            Status::Ok,
            "no compute process".into(),
            None,
        )),
        Ok(p) => {
            let list: Vec<String> = p
                .iter()
                .map(|p| {
                    let name = gputrace_env::sampler::process_name(p.pid);
                    format!(
                        "pid {}{}{}",
                        p.pid,
                        if name.is_empty() {
                            String::new()
                        } else {
                            format!(" ({name})")
                        },
                        if p.used_gpu_memory == fmt::ENV_NA64 {
                            String::new()
                        } else {
                            format!(", {}", gb(p.used_gpu_memory))
                        }
                    )
                })
                .collect();
            out.push(check(
                "processes",
                Some(i),
                Status::Warn,
                format!("{} compute process(es) already on it: {}", p.len(), list.join("; ")),
                Some("A job started on this GPU now shares it with them (time-sliced): pick a free GPU (CUDA_VISIBLE_DEVICES) or wait."),
            ));
        }
        Err(e) => out.push(check(
            "processes",
            Some(i),
            Status::Info,
            format!("cannot list processes: {e}"),
            None,
        )),
    }
}

fn topology_of(n: &Nvml) -> Topology {
    let count = n.device_count().unwrap_or(0).min(64);
    let devs: Vec<(u32, Device)> = (0..count)
        .filter_map(|i| n.device(i).ok().map(|d| (i, d)))
        .collect();
    let bus: Vec<String> = devs
        .iter()
        .map(|(_, d)| n.pci_bus_id(*d).unwrap_or_default().to_ascii_lowercase())
        .collect();
    let peers: Vec<Vec<String>> = devs
        .iter()
        .map(|(_, d)| {
            n.nvlink_peers(*d)
                .into_iter()
                .map(|p| p.to_ascii_lowercase())
                .collect()
        })
        .collect();
    let mut matrix = Vec::new();
    for (a, (_, da)) in devs.iter().enumerate() {
        let mut row = Vec::new();
        for (b, (_, db)) in devs.iter().enumerate() {
            if a == b {
                row.push("X".to_string());
                continue;
            }
            let links = peers[a].iter().filter(|p| **p == bus[b]).count();
            row.push(if links > 0 {
                format!("NV{links}")
            } else {
                n.topology(*da, *db)
                    .map(nvml::topology_name)
                    .unwrap_or("?")
                    .to_string()
            });
        }
        matrix.push(row);
    }
    Topology {
        gpus: devs.iter().map(|(i, _)| *i).collect(),
        matrix,
    }
}

/// Site-packages folders to search: the given ones, the active virtualenv or conda
/// environment, the one of the `python3` on PATH, the user's and the system's.
pub fn site_packages_dirs(extra: &[PathBuf]) -> Vec<PathBuf> {
    let mut prefixes: Vec<PathBuf> = Vec::new();
    for v in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(p) = std::env::var_os(v) {
            prefixes.push(PathBuf::from(p));
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("python3").is_file() {
                if let Some(prefix) = dir.parent() {
                    prefixes.push(prefix.to_path_buf());
                }
                break;
            }
        }
    }
    if let Some(h) = std::env::var_os("HOME") {
        prefixes.push(Path::new(&h).join(".local"));
    }
    prefixes.extend(["/usr", "/usr/local"].map(PathBuf::from));
    let mut out: Vec<PathBuf> = extra.to_vec();
    for p in prefixes {
        let Ok(rd) = std::fs::read_dir(p.join("lib")) else {
            continue;
        };
        let mut pys: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|d| {
                d.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("python3"))
            })
            .collect();
        pys.sort();
        for py in pys {
            for sub in ["site-packages", "dist-packages"] {
                let d = py.join(sub);
                if d.is_dir() {
                    out.push(d);
                }
            }
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    out.retain(|d| seen.insert(std::fs::canonicalize(d).unwrap_or(d.clone())));
    out
}

/// CUDA runtimes installed: the nvidia/*/lib folders of Python wheels (what torch
/// loads), CUDA toolkits under /usr/local, and the system's library folders.
pub fn installed_runtimes(extra_site_packages: &[PathBuf]) -> Vec<Runtime> {
    let mut dirs: Vec<(PathBuf, &str)> = Vec::new();
    for sp in site_packages_dirs(extra_site_packages) {
        if let Ok(rd) = std::fs::read_dir(sp.join("nvidia")) {
            for e in rd.flatten() {
                dirs.push((e.path().join("lib"), "torch"));
            }
        }
    }
    if let Ok(rd) = std::fs::read_dir("/usr/local") {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("cuda") {
                dirs.push((e.path().join("lib64"), "toolkit"));
                dirs.push((e.path().join("targets/x86_64-linux/lib"), "toolkit"));
            }
        }
    }
    for d in ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"] {
        dirs.push((PathBuf::from(d), "system"));
    }
    let mut out: Vec<Runtime> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (d, owner) in dirs {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut libs: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| facts::version_from_name(p, "libcudart").is_some())
            .collect();
        libs.sort();
        // One per folder: the name with the longest version (the real file).
        let best = libs.iter().filter_map(|p| {
            let real = std::fs::canonicalize(p).unwrap_or(p.clone());
            let v = facts::version_from_name(&real, "libcudart")
                .or_else(|| facts::version_from_name(p, "libcudart"))?;
            Some((v, real))
        });
        if let Some((v, real)) = best.max_by_key(|(v, _)| v.len()) {
            if seen.insert(real.clone()) {
                out.push(Runtime {
                    path: real.display().to_string(),
                    version: v,
                    owner: owner.to_string(),
                });
            }
        }
    }
    out
}

/// The CUDA-version rules of the report ([`rules::cuda_versions`]) on each runtime
/// installed, and on torch's build, as if a process had loaded them.
fn runtime_checks(rts: &[Runtime], all: &[Fact], out: &mut Vec<Check>) {
    if rts.is_empty() {
        out.push(check(
            "cuda_runtime",
            None,
            Status::Info,
            "no CUDA runtime found installed (searched Python site-packages, /usr/local/cuda*, the system library folders)".into(),
            None,
        ));
        return;
    }
    let versions =
        |host: &[(&'static str, &str)]| rules::cuda_versions(&rules::With { base: all, host });
    for r in rts {
        let msg = format!("CUDA runtime {} ({}): {}", r.version, r.owner, r.path);
        let newer = versions(&[(keys::CUDA_RUNTIME_VERSION, &r.version)])
            .into_iter()
            .find_map(|m| match m {
                Mismatch::RuntimeNewerThanDriver { driver, .. } => Some((m.serious(), driver)),
                _ => None,
            });
        match newer {
            Some((true, dv)) => out.push(check(
                "cuda_runtime",
                None,
                Status::Warn,
                format!("{msg}: newer than the driver supports (CUDA {}.{})", dv.0, dv.1),
                Some("Upgrade the driver, or install the build of your framework for the driver's CUDA (e.g. a torch wheel for that cuXYZ)."),
            )),
            Some((false, dv)) => out.push(check(
                "cuda_runtime",
                None,
                Status::Warn,
                format!("{msg}: runs in minor-version compatibility mode on a driver for CUDA {}.{}", dv.0, dv.1),
                Some("Usually fine; PTX newer than the driver cannot be JIT-compiled. Upgrade the driver to remove the doubt."),
            )),
            _ => out.push(check("cuda_runtime", None, Status::Ok, msg, None)),
        }
    }
    // torch's own record of the CUDA it was built for.
    for sp in site_packages_dirs(&[]) {
        let Ok(text) = std::fs::read_to_string(sp.join("torch/version.py")) else {
            continue;
        };
        if let Some((v, cuda)) = facts::torch_version_py(&text) {
            let msg = format!(
                "torch {v} (built for CUDA {}) in {}",
                cuda.as_deref().unwrap_or("none: a CPU build"),
                sp.display()
            );
            let mut facts = vec![(keys::TORCH_VERSION, v.as_str())];
            facts.extend(cuda.as_deref().map(|c| (keys::TORCH_CUDA, c)));
            let too_new = versions(&facts)
                .iter()
                .any(|m| matches!(m, Mismatch::TorchNewerThanDriver { .. }));
            out.push(check(
                "torch",
                None,
                if too_new || cuda.is_none() { Status::Warn } else { Status::Ok },
                msg,
                if too_new {
                    Some("This torch needs a newer driver: upgrade the driver, or install the torch wheel built for the driver's CUDA.")
                } else if cuda.is_none() {
                    Some("This torch cannot use the GPU: install a CUDA build (pip install torch --index-url .../whl/cuXYZ).")
                } else {
                    None
                },
            ));
        }
    }
}

fn host_checks(all: &[Fact], out: &mut Vec<Check>) {
    let f = |k| facts::find(all, FACT_HOST, k);
    let cpus = f(keys::HOST_CPUS).unwrap_or("?");
    let mine = f(keys::PROCESS_CPUS).unwrap_or("?");
    let cg = f(keys::CGROUP_CPUS);
    let mut msg = format!("{cpus} CPUs online; this shell may run on {mine}");
    match cg {
        // cgroup v2's cpu.max reads "max" where no quota is set.
        Some("max") => msg.push_str("; no cgroup CPU quota (cpu.max is \"max\")"),
        Some(c) => msg.push_str(&format!("; cgroup CPU quota {c} CPUs (cpu.max)")),
        None => {}
    }
    let few = rules::cpu_quota_short(all).is_some();
    out.push(check(
        "cpus",
        None,
        if few { Status::Warn } else { Status::Ok },
        msg,
        few.then_some("Under two CPUs per GPU: input pipelines (DataLoader workers) will starve the GPUs; ask for more CPUs."),
    ));
    // Pinned (mostly) away from a GPU's local CPUs: the report's rule.
    let gpus: Vec<u32> = all
        .iter()
        .filter(|x| x.key == keys::LOCAL_CPUS && x.device != FACT_HOST)
        .map(|x| x.device)
        .collect();
    for a in rules::far_cpus(all, &gpus) {
        let none = a.local_pct == 0.0;
        out.push(check(
            "affinity",
            Some(a.device),
            if none { Status::Warn } else { Status::Info },
            format!(
                "this shell runs on CPUs {}, {:.0}% of them close to GPU {} (local CPUs {})",
                facts::format_cpulist(&a.process_cpus),
                a.local_pct,
                a.device,
                facts::format_cpulist(&a.local_cpus)
            ),
            Some("Pin the job to the GPU's NUMA node (numactl --cpunodebind, or the launcher's --cpu-bind)."),
        ));
    }
    let mem = f(keys::HOST_MEMORY)
        .and_then(|v| v.parse::<u64>().ok())
        .map(gb)
        .unwrap_or("?".into());
    out.push(check(
        "memory",
        None,
        Status::Info,
        format!(
            "{mem} of memory{}",
            f(keys::CGROUP_MEMORY)
                .map(|m| match m.parse::<u64>() {
                    Ok(b) => format!("; cgroup limit {}", gb(b)),
                    Err(_) => format!("; cgroup limit {m}"),
                })
                .unwrap_or_default()
        ),
        None,
    ));
    out.push(check(
        "system",
        None,
        Status::Info,
        format!(
            "kernel {}; container: {}{}",
            f(keys::KERNEL_RELEASE).unwrap_or("?"),
            f(keys::CONTAINER).unwrap_or("?"),
            f(keys::CUDA_VISIBLE_DEVICES)
                .map(|v| format!("; CUDA_VISIBLE_DEVICES={v}"))
                .unwrap_or_default()
        ),
        None,
    ));
}

/// The checklist as text.
pub fn render_text(d: &Doctor) -> String {
    let mut s = String::from("gputrace doctor: the environment, with no job running\n\n");
    for c in &d.checks {
        let area = match c.gpu {
            Some(g) => format!("{} (gpu {g})", c.check),
            None => c.check.clone(),
        };
        s.push_str(&format!(
            "{:<5} {:<22} {}\n",
            c.status.word(),
            area,
            c.message
        ));
        if let Some(f) = &c.fix {
            s.push_str(&format!("{:<28} fix: {f}\n", ""));
        }
    }
    if d.topology.gpus.len() > 1 {
        s.push_str("\nGPU-to-GPU links (as nvidia-smi topo -m):\n      ");
        for g in &d.topology.gpus {
            s.push_str(&format!("{:>6}", format!("GPU{g}")));
        }
        s.push('\n');
        for (g, row) in d.topology.gpus.iter().zip(&d.topology.matrix) {
            s.push_str(&format!("{:<6}", format!("GPU{g}")));
            for v in row {
                s.push_str(&format!("{v:>6}"));
            }
            s.push('\n');
        }
    }
    let warns = d.checks.iter().filter(|c| c.status == Status::Warn).count();
    s.push_str(&format!(
        "\n{} checks, {} warning{}\n",
        d.checks.len(),
        warns,
        if warns == 1 { "" } else { "s" }
    ));
    s.push_str(&format!("{}\n", d.bottom_line.line));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtimes_are_found_in_a_wheel_layout() {
        let dir = std::env::temp_dir().join(format!("gputrace-doctor-{}", std::process::id()));
        let lib = dir.join("site-packages/nvidia/cu13/lib");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(lib.join("libcudart.so.13"), b"").unwrap();
        std::fs::create_dir_all(dir.join("site-packages/torch")).unwrap();
        let rts = installed_runtimes(&[dir.join("site-packages")]);
        let _ = std::fs::remove_dir_all(&dir);
        let mine: Vec<_> = rts
            .iter()
            .filter(|r| r.path.contains("gputrace-doctor"))
            .collect();
        assert_eq!(mine.len(), 1, "{rts:?}");
        assert_eq!(
            (mine[0].version.as_str(), mine[0].owner.as_str()),
            ("13", "torch")
        );
    }

    #[test]
    fn a_runtime_newer_than_the_driver_is_a_warning() {
        let rt = |v: &str| Runtime {
            path: "/x".into(),
            version: v.into(),
            owner: "torch".into(),
        };
        // The driver's CUDA, as the facts say it.
        let driver = |v: &str| {
            vec![Fact {
                device: FACT_HOST,
                key: keys::CUDA_DRIVER_VERSION,
                value: v.into(),
            }]
        };
        let mut out = Vec::new();
        runtime_checks(
            &[rt("13.0.96"), rt("12.8.90"), rt("13.1.4")],
            &driver("13.0"),
            &mut out,
        );
        let st: Vec<Status> = out.iter().take(3).map(|c| c.status).collect();
        assert_eq!(st, vec![Status::Ok, Status::Ok, Status::Warn]);
        let mut out = Vec::new();
        runtime_checks(&[rt("13.0.96")], &driver("12.8"), &mut out);
        assert_eq!(out[0].status, Status::Warn);
        assert!(
            out[0].message.contains("newer than the driver"),
            "{:?}",
            out[0]
        );
    }
}
