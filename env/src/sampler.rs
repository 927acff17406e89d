//! The NVML sampler: what one tick reads from each GPU, as trace events.
//!
//! It knows nothing of threads or of the trace writer: [`Sampler::tick`] reads NVML
//! and appends [`Item`]s, which the caller turns into events with its own string
//! interner ([`Item::into_events`]). The preload library runs it on a thread of its own
//! while a trace window is open.

use crate::facts::{self, Fact};
use crate::nvml::{self, Device, Nvml};
use gputrace_format as fmt;
use std::collections::HashMap;

/// What a tick produced, strings not yet interned.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    Fact {
        ts: u64,
        fact: Fact,
    },
    Gpu(fmt::GpuSample),
    /// `sample.name` is 0; `name` is the text to intern.
    Process {
        sample: fmt::GpuProcess,
        name: String,
    },
    Event(fmt::GpuEvent),
    /// GPM counters over a pair of samples (the device an NVML index).
    Counter(fmt::CounterSample),
}

impl Item {
    /// The item as trace events; `intern` gives a string's id, appending its `Str`
    /// event to the vector it is given the first time.
    pub fn into_events(
        self,
        intern: &mut impl FnMut(&str, &mut Vec<fmt::Event>) -> u32,
        out: &mut Vec<fmt::Event>,
    ) {
        let ev = match self {
            Item::Fact { ts, fact } => fmt::Event::Fact(fmt::Fact {
                ts,
                device: fact.device,
                key: intern(fact.key, out),
                value: intern(&fact.value, out),
            }),
            Item::Gpu(g) => fmt::Event::GpuSample(g),
            Item::Process { mut sample, name } => {
                sample.name = if name.is_empty() {
                    0
                } else {
                    intern(&name, out)
                };
                fmt::Event::GpuProcess(sample)
            }
            Item::Event(e) => fmt::Event::GpuEvent(e),
            Item::Counter(c) => fmt::Event::CounterSample(c),
        };
        out.push(ev);
    }
}

/// Facts as items stamped `ts`.
pub fn fact_items(ts: u64, facts: Vec<Fact>) -> impl Iterator<Item = Item> {
    facts.into_iter().map(move |fact| Item::Fact { ts, fact })
}

/// CLOCK_REALTIME in ns: the trace's time base for host events.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000) + ts.tv_nsec as u64
}

struct Dev {
    index: u32,
    handle: Device,
    /// Maxima do not change: read once.
    sm_max: Option<u32>,
    mem_max: Option<u32>,
    /// NVML timestamp (us) of the newest per-process sample seen.
    last_util_us: u64,
    /// Volatile ECC counts at the last tick (corrected, uncorrected).
    ecc: [Option<u64>; 2],
    /// The traced process was listed on this device at some tick.
    has_self: bool,
}

/// NVML reads a sampler leaves out (`GPUTRACE_NVML_SKIP`; its type is the settings
/// table's).
pub use gputrace_format::settings::Skip;

/// Reads NVML for every GPU, one tick at a time.
pub struct Sampler<'n> {
    nvml: &'n Nvml,
    devs: Vec<Dev>,
    self_pid: u32,
    events: Option<nvml::Events<'n>>,
    ticks: u64,
    /// PCIe throughput costs NVML 20 ms a counter: read it every this many ticks.
    pcie_every: u64,
    names: HashMap<u32, String>,
    skip: Skip,
    /// Processes descended from `self_pid` count as itself (see [`Sampler::with_descendants`]).
    tree: bool,
    /// Whether a pid counts as the traced process, once asked.
    is_self: HashMap<u32, bool>,
}

impl<'n> Sampler<'n> {
    /// A sampler over every GPU NVML sees, for the process `self_pid`; per-process
    /// utilisation is read from `since_ns` on.
    pub fn new(nvml: &'n Nvml, self_pid: u32, since_ns: u64, skip: Skip) -> Sampler<'n> {
        let n = nvml.device_count().unwrap_or(0).min(64);
        let devs: Vec<Dev> = (0..n)
            .filter_map(|i| {
                let handle = nvml.device(i).ok()?;
                Some(Dev {
                    index: i,
                    handle,
                    sm_max: nvml.max_clock(handle, nvml::CLOCK_SM),
                    mem_max: nvml.max_clock(handle, nvml::CLOCK_MEM),
                    last_util_us: since_ns / 1000,
                    ecc: if skip.ecc {
                        [None, None]
                    } else {
                        [
                            nvml.ecc_errors(handle, nvml::ECC_CORRECTED),
                            nvml.ecc_errors(handle, nvml::ECC_UNCORRECTED),
                        ]
                    },
                    has_self: false,
                })
            })
            .collect();
        let handles: Vec<Device> = devs.iter().map(|d| d.handle).collect();
        Sampler {
            nvml,
            events: if skip.events {
                None
            } else {
                nvml.error_events(&handles)
            },
            devs,
            self_pid,
            ticks: 0,
            pcie_every: if skip.pcie { 0 } else { 10 },
            names: HashMap::new(),
            skip,
            tree: false,
            is_self: HashMap::new(),
        }
    }

    /// Counts the processes descended from `self_pid` as the traced process too: the
    /// sampler of `gputrace run`, which runs outside the job, whose `self_pid` is the
    /// command it started (often a launcher, a shell or torchrun, whose children use the
    /// GPUs). Until one of them is seen on a GPU every GPU is sampled; after that, the
    /// GPUs they were seen on, and the process lists of the others (cheap) are still read
    /// so that a rank starting later on another GPU is found.
    pub fn with_descendants(mut self) -> Self {
        self.tree = true;
        self
    }

    /// Whether `pid` is the traced process (or, with descendants, one of its tree).
    fn is_self(&mut self, pid: u32) -> bool {
        if pid == self.self_pid {
            return true;
        }
        if !self.tree {
            return false;
        }
        let root = self.self_pid;
        *self
            .is_self
            .entry(pid)
            .or_insert_with(|| descends_from(pid, root))
    }

    /// Device `i` not sampled yet: whether a process of the job is listed on it now.
    fn discover(&mut self, i: usize) -> bool {
        let listed = self
            .nvml
            .compute_processes(self.devs[i].handle)
            .unwrap_or_default();
        let found = listed.iter().any(|p| self.is_self(p.pid));
        self.devs[i].has_self |= found;
        found
    }

    /// Reads PCIe throughput every `n` ticks (0: never).
    pub fn pcie_every(mut self, n: u64) -> Self {
        self.pcie_every = n;
        self
    }

    pub fn device_count(&self) -> usize {
        self.devs.len()
    }

    /// The NVML indices (below 64) the traced process was seen on, a bit each; 0 until
    /// it is seen on one.
    pub fn focus_mask(&self) -> u64 {
        self.devs
            .iter()
            .filter(|d| d.has_self && d.index < 64)
            .fold(0, |m, d| m | 1 << d.index)
    }

    /// One sample of every GPU the traced process uses (every GPU until it is seen on
    /// one), stamped `ts`.
    pub fn tick(&mut self, ts: u64, out: &mut Vec<Item>) {
        let focus = self.devs.iter().any(|d| d.has_self);
        let pcie = self.pcie_every > 0 && self.ticks.is_multiple_of(self.pcie_every);
        self.ticks += 1;
        let nv = self.nvml;
        for i in 0..self.devs.len() {
            if focus && !self.devs[i].has_self {
                let found = self.tree && !self.skip.procs && self.discover(i);
                if !found {
                    continue;
                }
            }
            let d = &self.devs[i];
            let h = d.handle;
            let na = |v: Option<u32>| v.unwrap_or(fmt::ENV_NA);
            let [gen, gen_max, width, width_max] = nv.pcie_link(h);
            let (tx, rx) = if pcie {
                nv.pcie_throughput(h)
            } else {
                (None, None)
            };
            let util = nv.utilization(h);
            let mem = nv.memory(h);
            out.push(Item::Gpu(fmt::GpuSample {
                ts,
                device: d.index,
                sm_clock_mhz: na(nv.clock(h, nvml::CLOCK_SM)),
                sm_clock_max_mhz: na(d.sm_max),
                mem_clock_mhz: na(nv.clock(h, nvml::CLOCK_MEM)),
                mem_clock_max_mhz: na(d.mem_max),
                clock_reasons: nv.clock_reasons(h).unwrap_or(fmt::ENV_NA64),
                power_mw: na(nv.power_mw(h)),
                power_limit_mw: na(nv.power_limit_mw(h)),
                temperature_c: na(nv.temperature_c(h)),
                gpu_util_pct: na(util.map(|u| u.gpu)),
                mem_util_pct: na(util.map(|u| u.memory)),
                mem_used: mem.map(|m| m.used).unwrap_or(fmt::ENV_NA64),
                mem_total: mem.map(|m| m.total).unwrap_or(fmt::ENV_NA64),
                pcie_gen: na(gen),
                pcie_gen_max: na(gen_max),
                pcie_width: na(width),
                pcie_width_max: na(width_max),
                pcie_tx_kbs: na(tx),
                pcie_rx_kbs: na(rx),
            }));
            if !self.skip.procs {
                self.processes(i, ts, out);
            }
            if !self.skip.ecc {
                self.ecc(i, ts, out);
            }
        }
        if let Some(ev) = &self.events {
            for e in ev.poll() {
                let device = self
                    .devs
                    .iter()
                    .find(|d| d.handle.is(e.device))
                    .map(|d| d.index)
                    .unwrap_or(fmt::ENV_NA);
                // ECC counts are read each tick: only Xids come from events.
                if e.event_type & nvml::EVENT_XID != 0 {
                    out.push(Item::Event(fmt::GpuEvent {
                        ts,
                        device,
                        kind: fmt::GPU_EVENT_XID,
                        data: e.event_data,
                    }));
                }
            }
        }
    }

    /// The processes on device `i`: NVML's list of compute processes joined with its
    /// per-process utilisation samples since the last tick.
    fn processes(&mut self, i: usize, ts: u64, out: &mut Vec<Item>) {
        let nv = self.nvml;
        let h = self.devs[i].handle;
        let listed = nv.compute_processes(h).unwrap_or_default();
        let samples = nv
            .process_utilization(h, self.devs[i].last_util_us)
            .unwrap_or_default();
        // pid -> (memory, listed, sm sum, mem sum, samples)
        let mut by_pid: std::collections::BTreeMap<u32, (u64, bool, u64, u64, u64)> =
            Default::default();
        for p in &listed {
            let e = by_pid
                .entry(p.pid)
                .or_insert((fmt::ENV_NA64, false, 0, 0, 0));
            e.0 = p.used_gpu_memory;
            e.1 = true;
        }
        let last = &mut self.devs[i].last_util_us;
        for s in &samples {
            if s.time_stamp <= *last {
                continue;
            }
            let e = by_pid
                .entry(s.pid)
                .or_insert((fmt::ENV_NA64, false, 0, 0, 0));
            e.2 += s.sm_util.min(100) as u64;
            e.3 += s.mem_util.min(100) as u64;
            e.4 += 1;
        }
        if let Some(m) = samples.iter().map(|s| s.time_stamp).max() {
            *last = (*last).max(m);
        }
        for (pid, (mem, is_listed, sm, memu, n)) in by_pid {
            let is_self = self.is_self(pid);
            if is_self && is_listed {
                self.devs[i].has_self = true;
            }
            let mut flags = 0;
            if is_listed {
                flags |= fmt::GPU_PROC_LISTED;
            }
            if n > 0 {
                flags |= fmt::GPU_PROC_UTIL;
            }
            if is_self {
                flags |= fmt::GPU_PROC_SELF;
            }
            let name = self
                .names
                .entry(pid)
                .or_insert_with(|| process_name(pid))
                .clone();
            out.push(Item::Process {
                sample: fmt::GpuProcess {
                    ts,
                    device: self.devs[i].index,
                    pid,
                    name: 0,
                    used_memory: mem,
                    sm_pct: sm.checked_div(n).map_or(fmt::ENV_NA, |v| v as u32),
                    mem_pct: memu.checked_div(n).map_or(fmt::ENV_NA, |v| v as u32),
                    flags,
                },
                name,
            });
        }
    }

    /// New ECC errors since the last tick.
    fn ecc(&mut self, i: usize, ts: u64, out: &mut Vec<Item>) {
        let d = &mut self.devs[i];
        for (slot, kind, nkind) in [
            (0, fmt::GPU_EVENT_ECC_CORRECTED, nvml::ECC_CORRECTED),
            (1, fmt::GPU_EVENT_ECC_UNCORRECTED, nvml::ECC_UNCORRECTED),
        ] {
            let Some(now) = self.nvml.ecc_errors(d.handle, nkind) else {
                continue;
            };
            if let Some(before) = d.ecc[slot] {
                if now > before {
                    out.push(Item::Event(fmt::GpuEvent {
                        ts,
                        device: d.index,
                        kind,
                        data: now - before,
                    }));
                }
            }
            d.ecc[slot] = Some(now);
        }
    }
}

/// Whether process `pid` is `root` or descends from it, by the parent links in /proc
/// (false where the chain cannot be read: gone, or another pid namespace). A process
/// whose parent ended was handed to another (init, a subreaper) and no longer counts.
pub fn descends_from(pid: u32, root: u32) -> bool {
    let mut p = pid;
    // Process trees are shallow; the bound only guards against a cycle read mid-change.
    for _ in 0..64 {
        if p == root {
            return true;
        }
        if p <= 1 {
            return false;
        }
        match parent_of(p) {
            Some(pp) => p = pp,
            None => return false,
        }
    }
    false
}

/// The parent pid in `/proc/<pid>/stat` (the field after the state, which follows the
/// command name's closing parenthesis; the name itself may hold anything).
fn parent_of(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// A process's command name, where this process may read it (`""` otherwise: another
/// pid namespace, or gone).
pub fn process_name(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default()
}

/// Facts for a trace: the host's, and NVML's, or the one `nvml` fact that says why
/// NVML is not there.
pub fn trace_facts(nvml: Result<&Nvml, &nvml::NvmlError>) -> Vec<Fact> {
    let mut f = facts::host_facts();
    match nvml {
        Ok(n) => f.extend(facts::nvml_facts(n)),
        Err(e) => f.push(Fact {
            device: fmt::FACT_HOST,
            key: facts::keys::NVML,
            value: format!("{}: {e}", e.kind()),
        }),
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_descends_from_us_and_not_the_other_way() {
        let me = std::process::id();
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("start sleep");
        let kid = child.id();
        let (down, up) = (descends_from(kid, me), descends_from(me, kid));
        let _ = child.kill();
        let _ = child.wait();
        assert!(down);
        assert!(!up);
        assert!(descends_from(me, me));
        assert!(!descends_from(1, me));
        assert!(
            !descends_from(u32::MAX - 1, me),
            "a pid that does not exist"
        );
    }
}
