//! Environment files in a set of traces: their facts and NVML samples given to the
//! process traces they describe.
//!
//! `gputrace run` samples NVML from its own process into an environment file beside the
//! job's traces (`crate::recording::nvml`). The environment checks (`crate::report::environment`) read a
//! process trace's own tables, so each process trace of the same host whose time the
//! file covers gets a copy of its events, as if it had sampled them itself:
//! * the samples (GPUs, processes on them, driver errors) from the trace's beginning to
//!   its end, and each GPU's first sample after the end (a sample describes the period
//!   before it, so that one holds the trace's last moments);
//! * the NVML facts ([`gputrace_env::facts::is_nvml_fact`]) in place of the trace's own
//!   (which say NVML was off); what the trace knows of its own process (the libraries it
//!   loaded, its CPUs) stays its own;
//! * whose process each process sample is, decided again for this trace: its own pid is
//!   itself (`GPU_PROC_SELF`); the processes of the set's other traces on the same host
//!   are the same job, and left out (never "another process on the GPU"); any other
//!   process is another.
//!
//! * the GPM counter samples (`CounterSample`, source GPM) that overlap the trace, each
//!   GPU's NVML index turned into the CUDA ordinal the process knew it by (see
//!   [`cuda_ordinals`]); a GPU the process could not see gives it nothing. MIG instance
//!   samples are given only where the GPU has one instance sampled (which instance a
//!   process ran on is not recorded).
//!
//! A trace that has NVML data of its own (sampled in-process on purpose) keeps it and
//! takes nothing. Of several environment files, a trace takes the one that covers most
//! of it (two jobs run at once from one directory sample the same GPUs). The environment
//! files then leave the set: they are no process.

use crate::error::Error;
use crate::model::trace::{fact, Trace};
use gputrace_env::facts::{is_nvml_fact, keys};
use gputrace_format::{self as fmt, FACT_HOST};
use std::collections::{HashMap, HashSet};

/// How `t`'s process ended as `gputrace run` saw it, when `e` is the environment file of
/// the run that started it (same host, its `job_pid`).
fn job_end_of(e: &Trace, t: &Trace) -> Option<String> {
    if e.meta.host != t.meta.host {
        return None;
    }
    let pid: u32 = fact(e, FACT_HOST, keys::JOB_PID)?.parse().ok()?;
    (pid == t.meta.pid).then(|| fact(e, FACT_HOST, keys::JOB_END).map(str::to_string))?
}

/// The set's process traces, each with what an environment file of the set recorded
/// for it. An error when the set holds environment files only.
pub fn give_environment(traces: Vec<Trace>) -> Result<Vec<Trace>, Error> {
    let (envs, mut procs): (Vec<Trace>, Vec<Trace>) =
        traces.into_iter().partition(|t| t.meta.is_environment());
    if procs.is_empty() {
        if let Some(e) = envs.first() {
            return Err(Error::EnvironmentOnly(e.path.clone()));
        }
    }
    if envs.is_empty() {
        return Ok(procs);
    }
    let ids: Vec<(String, u32)> = procs
        .iter()
        .map(|t| (t.meta.host.clone(), t.meta.pid))
        .collect();
    let env_ranges: Vec<Option<(u64, u64)>> = envs.iter().map(env_range).collect();
    for t in &mut procs {
        t.parent_saw = envs.iter().find_map(|e| job_end_of(e, t));
        if has_own_nvml(t) {
            continue;
        }
        let Some((lo, hi)) = time_range(t) else {
            continue;
        };
        let best = envs
            .iter()
            .zip(&env_ranges)
            .filter(|(e, _)| e.meta.host == t.meta.host)
            .filter_map(|(e, r)| {
                let (a, b) = (*r)?;
                (a <= hi && b >= lo).then(|| (e, b.min(hi) - a.max(lo)))
            })
            // The first of equals: max_by_key would take the last.
            .fold(None::<(&Trace, u64)>, |best, (e, n)| match best {
                Some((_, m)) if m >= n => best,
                _ => Some((e, n)),
            });
        if let Some((e, _)) = best {
            let same_job: HashSet<u32> = ids
                .iter()
                .filter(|(h, p)| *h == t.meta.host && *p != t.meta.pid)
                .map(|(_, p)| *p)
                .collect();
            give(t, e, (lo, hi), &same_job);
        }
    }
    Ok(procs)
}

/// NVML data the trace recorded itself (samples, or facts read with NVML on).
fn has_own_nvml(t: &Trace) -> bool {
    !t.gpu_samples.is_empty() || crate::model::trace::fact(t, FACT_HOST, keys::NVML) == Some("ok")
}

/// The time a process trace covers: its window, else from its opening (or first
/// record) to its last record or state change.
pub fn time_range(t: &Trace) -> Option<(u64, u64)> {
    let span = t.span();
    let firsts = [
        (t.meta.start_real_ns > 0).then_some(t.meta.start_real_ns),
        t.states.first().map(|s| s.0),
        span.map(|s| s.0),
    ];
    let lasts = [
        t.states.last().map(|s| s.0),
        span.map(|s| s.1),
        t.thread_cpu.last().map(|x| x.ts),
        t.proc_samples.last().map(|x| x.ts),
        t.machine.last().map(|x| x.ts),
    ];
    let lo = firsts.into_iter().flatten().min()?;
    let hi = lasts.into_iter().flatten().max().unwrap_or(lo).max(lo);
    match t.window {
        Some((a, b)) if b != u64::MAX => Some((a, b.max(a))),
        Some((a, _)) => Some((a, hi.max(a))),
        None => Some((lo, hi)),
    }
}

/// From an environment file's opening to its last event.
fn env_range(e: &Trace) -> Option<(u64, u64)> {
    let times = (e.meta.start_real_ns > 0)
        .then_some(e.meta.start_real_ns)
        .into_iter()
        .chain(e.facts.iter().map(|f| f.ts))
        .chain(e.gpu_samples.iter().map(|g| g.ts))
        .chain(e.gpu_processes.iter().map(|p| p.ts))
        .chain(e.counter_samples.iter().map(|c| c.end))
        .chain(e.states.iter().map(|s| s.0));
    times.fold(None, |r, ts| match r {
        None => Some((ts, ts)),
        Some((a, b)) => Some((a.min(ts), b.max(ts))),
    })
}

/// Copies into `t` what `e` recorded within `[lo, hi]` (see the module documentation).
fn give(t: &mut Trace, e: &Trace, (lo, hi): (u64, u64), same_job: &HashSet<u32>) {
    // Each GPU's first sample at or after the end closes the trace's last period.
    let mut until: HashMap<u32, u64> = HashMap::new();
    for g in e.gpu_samples.iter().filter(|g| g.ts >= hi) {
        until.entry(g.device).or_insert(g.ts);
    }
    let keep = |device: u32, ts: u64| ts >= lo && ts <= until.get(&device).copied().unwrap_or(hi);
    let own = &t.strings;
    t.facts.retain(|f| {
        let key = own.get(f.key as usize).map_or("", String::as_str);
        !is_nvml_fact(f.device, key)
    });
    // The file's string ids, as ids of this trace.
    let mut ids: HashMap<u32, u32> = HashMap::new();
    let strings = &mut t.strings;
    let mut id_of = |id: u32| -> u32 {
        if id == 0 {
            return 0;
        }
        *ids.entry(id).or_insert_with(|| {
            strings.push(e.str(id).to_string());
            (strings.len() - 1) as u32
        })
    };
    for f in e
        .facts
        .iter()
        .filter(|f| is_nvml_fact(f.device, e.str(f.key)))
    {
        t.facts.push(fmt::Fact {
            key: id_of(f.key),
            value: id_of(f.value),
            ..f.clone()
        });
    }
    t.gpu_samples.extend(
        e.gpu_samples
            .iter()
            .filter(|g| keep(g.device, g.ts))
            .cloned(),
    );
    for p in e.gpu_processes.iter().filter(|p| keep(p.device, p.ts)) {
        let mut p = p.clone();
        p.flags &= !fmt::GPU_PROC_SELF;
        if p.pid == t.meta.pid {
            p.flags |= fmt::GPU_PROC_SELF;
        } else if same_job.contains(&p.pid) {
            continue;
        }
        p.name = id_of(p.name);
        t.gpu_processes.push(p);
    }
    t.gpu_events.extend(
        e.gpu_events
            .iter()
            .filter(|x| keep(x.device, x.ts))
            .cloned(),
    );
    // GPM samples, unless the trace measured counters itself (PM, older traces).
    if t.counter_samples.is_empty() {
        let ordinals = cuda_ordinals(t, e);
        let mut instances: HashMap<u32, HashSet<u32>> = HashMap::new();
        for c in &e.counter_samples {
            instances.entry(c.device).or_default().insert(c.instance);
        }
        for c in e
            .counter_samples
            .iter()
            .filter(|c| c.end > lo && c.start < hi)
        {
            let whole = c.instance == fmt::ENV_NA;
            if !whole && instances.get(&c.device).map_or(0, HashSet::len) != 1 {
                continue;
            }
            if let Some(&ordinal) = ordinals.get(&c.device) {
                t.counter_samples.push(fmt::CounterSample {
                    device: ordinal,
                    ..c.clone()
                });
            }
        }
        t.counter_samples.sort_by_key(|c| (c.start, c.device));
    }
    // As the trace's own tables are sorted when read.
    t.facts.sort_by_key(|f| f.ts);
    t.gpu_samples.sort_by_key(|g| (g.ts, g.device));
    t.gpu_processes.sort_by_key(|p| (p.ts, p.device, p.pid));
    t.gpu_events.sort_by_key(|x| (x.ts, x.device));
}

/// NVML index -> CUDA ordinal for process trace `t`, from its own
/// `cuda_visible_devices` fact (whole numbers are NVML indices, as CUDA and NVML both
/// number GPUs in PCI order on the machines we know; `GPU-...` UUIDs, or their
/// prefixes, are matched against the `uuid` facts of the environment file `e`; the
/// list ends at the first entry that names nothing, as CUDA's does). Without the fact,
/// each GPU is its own ordinal.
pub fn cuda_ordinals(t: &Trace, e: &Trace) -> HashMap<u32, u32> {
    let gpus: Vec<u32> = {
        let mut v: Vec<u32> = e
            .facts
            .iter()
            .filter(|f| f.device != FACT_HOST)
            .map(|f| f.device)
            .chain(e.counter_samples.iter().map(|c| c.device))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let Some(visible) = crate::model::trace::fact(t, FACT_HOST, keys::CUDA_VISIBLE_DEVICES) else {
        return gpus.iter().map(|&i| (i, i)).collect();
    };
    let uuid_of = |i: u32| crate::model::trace::fact(e, i, keys::UUID).unwrap_or("");
    let mut out = HashMap::new();
    for (ordinal, entry) in visible.split(',').map(str::trim).enumerate() {
        let index = if let Ok(n) = entry.parse::<u32>() {
            gpus.contains(&n).then_some(n)
        } else if entry.starts_with("GPU-") {
            let hits: Vec<u32> = gpus
                .iter()
                .copied()
                .filter(|&i| uuid_of(i).starts_with(entry))
                .collect();
            (hits.len() == 1).then(|| hits[0])
        } else {
            None
        };
        let Some(index) = index.filter(|i| !out.contains_key(i)) else {
            break;
        };
        out.insert(index, ordinal as u32);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use fmt::{Event, GpuProcess, GpuSample, Kernel, Meta};

    const MS: u64 = 1_000_000;

    /// Interns strings for synthetic events.
    #[derive(Default)]
    struct Strs(Vec<String>);

    impl Strs {
        fn id(&mut self, text: &str, ev: &mut Vec<Event>) -> u32 {
            if let Some(i) = self.0.iter().position(|s| s == text) {
                return i as u32 + 1;
            }
            self.0.push(text.into());
            let id = self.0.len() as u32;
            ev.push(Event::Str {
                id,
                text: text.into(),
            });
            id
        }

        fn fact(&mut self, device: u32, key: &str, value: &str, ev: &mut Vec<Event>) {
            let (key, value) = (self.id(key, ev), self.id(value, ev));
            ev.push(Event::Fact(fmt::Fact {
                ts: 0,
                device,
                key,
                value,
            }));
        }
    }

    fn meta(host: &str, pid: u32, start: u64, kind: &str) -> Meta {
        Meta {
            host: host.into(),
            pid,
            start_real_ns: start,
            kind: kind.into(),
            ..Default::default()
        }
    }

    /// A process's trace: kernels from 100 to 950 ms, NVML off, its own CUDA runtime.
    fn process(pid: u32) -> Trace {
        let mut ev = Vec::new();
        let mut s = Strs::default();
        s.fact(
            FACT_HOST,
            "nvml",
            "off: GPUTRACE_NVML=1 turns it on",
            &mut ev,
        );
        s.fact(FACT_HOST, "cuda_runtime_version", "13.0.96", &mut ev);
        s.fact(FACT_HOST, "pid", &pid.to_string(), &mut ev);
        for i in 0..18u64 {
            let start = 100 * MS + i * 50 * MS;
            ev.push(Event::Kernel(Kernel {
                start,
                end: start + 40 * MS,
                ..Default::default()
            }));
        }
        let mut t = Trace::from_events(meta("h", pid, 50 * MS, ""), ev);
        t.path = format!("p{pid}.gtrace").into();
        t
    }

    /// An environment file of `host` sampling GPU 0 every 100 ms from 0 to `end_ms`,
    /// the driver named `driver`; on the GPU: pid 100 (the job's command), pid 300, and
    /// pid 200 (`matmul`) taking 40%.
    fn env_file(host: &str, end_ms: u64, driver: &str) -> Trace {
        let mut ev = Vec::new();
        let mut s = Strs::default();
        s.fact(FACT_HOST, "nvml", "ok", &mut ev);
        s.fact(FACT_HOST, "driver_version", driver, &mut ev);
        s.fact(FACT_HOST, "pid", "999", &mut ev);
        s.fact(0, "name", "Fake H200", &mut ev);
        let matmul = s.id("matmul", &mut ev);
        for ts in (0..=end_ms).step_by(100).map(|m| m * MS) {
            ev.push(Event::GpuSample(GpuSample {
                ts,
                device: 0,
                clock_reasons: 0,
                ..Default::default()
            }));
            for (pid, sm, flags, name) in [
                (100, 40, fmt::GPU_PROC_SELF, 0),
                (200, 40, 0, matmul),
                (300, 20, 0, 0),
            ] {
                ev.push(Event::GpuProcess(GpuProcess {
                    ts,
                    device: 0,
                    pid,
                    name,
                    used_memory: 1 << 30,
                    sm_pct: sm,
                    mem_pct: 0,
                    flags: flags | fmt::GPU_PROC_LISTED | fmt::GPU_PROC_UTIL,
                }));
            }
        }
        let mut t = Trace::from_events(meta(host, 999, 0, fmt::META_KIND_ENVIRONMENT), ev);
        t.path = format!("env-{host}-{driver}.gtrace").into();
        t
    }

    /// GPM samples of NVML GPUs 0 and 1 every 100 ms from 0 to 1200 ms.
    fn with_gpm(mut e: Trace) -> Trace {
        let mut ev = Vec::new();
        let mut s = Strs(e.strings.iter().skip(1).cloned().collect());
        s.fact(0, "uuid", "GPU-aaaa-0000", &mut ev);
        s.fact(1, "uuid", "GPU-bbbb-1111", &mut ev);
        for i in 0..12u64 {
            for device in [0, 1] {
                ev.push(Event::CounterSample(fmt::CounterSample {
                    start: i * 100 * MS,
                    end: (i + 1) * 100 * MS,
                    device,
                    dram: 5_000 + device,
                    source: fmt::COUNTER_SOURCE_GPM,
                    ..Default::default()
                }));
            }
        }
        let mut more = Trace::from_events(e.meta.clone(), ev);
        e.facts.append(&mut more.facts);
        e.strings = more.strings;
        e.counter_samples.append(&mut more.counter_samples);
        e
    }

    fn with_visible(mut t: Trace, v: &str) -> Trace {
        t.strings.push("cuda_visible_devices".into());
        t.strings.push(v.into());
        let n = t.strings.len() as u32;
        t.facts.push(fmt::Fact {
            ts: 0,
            device: FACT_HOST,
            key: n - 2,
            value: n - 1,
        });
        t
    }

    #[test]
    fn gpm_samples_reach_each_process_under_its_own_device_numbers() {
        let dram = |t: &Trace| -> Vec<(u32, u32)> {
            let mut v: Vec<(u32, u32)> = t
                .counter_samples
                .iter()
                .map(|c| (c.device, c.dram))
                .collect();
            v.dedup();
            v.sort_unstable();
            v.dedup();
            v
        };
        // No CUDA_VISIBLE_DEVICES: ordinals are NVML indices.
        let got =
            give_environment(vec![process(100), with_gpm(env_file("h", 1200, "580"))]).unwrap();
        assert_eq!(dram(&got[0]), vec![(0, 5_000), (1, 5_001)]);
        // Samples overlapping the trace (50..950 ms) only.
        let starts: Vec<u64> = got[0]
            .counter_samples
            .iter()
            .filter(|c| c.device == 0)
            .map(|c| c.start / MS)
            .collect();
        assert_eq!(starts, (0..10).map(|i| i * 100).collect::<Vec<_>>());
        // CUDA_VISIBLE_DEVICES=1: NVML GPU 1 is CUDA device 0, GPU 0 is not seen.
        for v in ["1", "GPU-bbbb", "GPU-bbbb-1111,GPU-zzzz"] {
            let t = with_visible(process(100), v);
            let got = give_environment(vec![t, with_gpm(env_file("h", 1200, "580"))]).unwrap();
            assert_eq!(dram(&got[0]), vec![(0, 5_001)], "{v}");
        }
        // Both, in the other order.
        let t = with_visible(process(100), "1,0");
        let got = give_environment(vec![t, with_gpm(env_file("h", 1200, "580"))]).unwrap();
        assert_eq!(dram(&got[0]), vec![(0, 5_001), (1, 5_000)]);
        // A name that matches nothing ends the list, as CUDA reads it.
        let t = with_visible(process(100), "GPU-cccc,0");
        let got = give_environment(vec![t, with_gpm(env_file("h", 1200, "580"))]).unwrap();
        assert!(got[0].counter_samples.is_empty());
    }

    #[test]
    fn each_process_trace_takes_the_samples_of_its_time_as_its_own() {
        let set = vec![
            process(100),
            env_file("other-host", 2000, "1.0"),
            env_file("h", 1200, "580.159.04"),
            process(300),
        ];
        let got = give_environment(set).unwrap();
        let pids: Vec<u32> = got.iter().map(|t| t.meta.pid).collect();
        assert_eq!(pids, vec![100, 300], "the environment files are no process");
        let p = &got[0];
        // From its beginning (50 ms) to the first sample after its end (950 ms).
        let ts: Vec<u64> = p.gpu_samples.iter().map(|g| g.ts / MS).collect();
        assert_eq!(ts, (1..=10).map(|i| i * 100).collect::<Vec<_>>());
        // NVML's facts from the file, the process's own facts its own.
        assert_eq!(
            crate::report::environment::fact(p, FACT_HOST, "nvml"),
            Some("ok")
        );
        assert_eq!(
            crate::report::environment::fact(p, FACT_HOST, "driver_version"),
            Some("580.159.04")
        );
        assert_eq!(
            crate::report::environment::fact(p, 0, "name"),
            Some("Fake H200")
        );
        assert_eq!(
            crate::report::environment::fact(p, FACT_HOST, "cuda_runtime_version"),
            Some("13.0.96")
        );
        assert_eq!(
            crate::report::environment::fact(p, FACT_HOST, "pid"),
            Some("100")
        );
        assert_eq!(crate::report::environment::nvml_unavailable(p), None);
        // Itself, and the other trace's process left out; pid 200 is another process.
        for t in &got {
            let me = t.meta.pid;
            let seen: HashSet<(u32, bool)> = t
                .gpu_processes
                .iter()
                .map(|x| (x.pid, x.flags & fmt::GPU_PROC_SELF != 0))
                .collect();
            assert_eq!(seen, HashSet::from([(me, true), (200, false)]), "pid {me}");
            let (lo, hi) = time_range(t).unwrap();
            let shared = crate::report::environment::shared_gpu(t, lo, hi);
            assert_eq!(shared.len(), 1, "pid {me}: {shared:?}");
            assert_eq!((shared[0].pid, shared[0].name.as_str()), (200, "matmul"));
            assert_eq!(shared[0].sm_share_pct, 40.0);
        }
    }

    #[test]
    fn samples_taken_in_the_process_win() {
        let mut own = process(100);
        own.gpu_samples.push(GpuSample {
            ts: 500 * MS,
            ..Default::default()
        });
        let got = give_environment(vec![own, env_file("h", 1200, "580")]).unwrap();
        assert_eq!(got[0].gpu_samples.len(), 1);
        assert!(got[0].gpu_processes.is_empty());
        assert!(crate::report::environment::nvml_unavailable(&got[0])
            .unwrap()
            .starts_with("off"));
    }

    #[test]
    fn the_file_covering_most_of_the_trace_is_taken() {
        let set = vec![
            env_file("h", 400, "short"),
            process(100),
            env_file("h", 3000, "long"),
        ];
        let got = give_environment(set).unwrap();
        assert_eq!(got.len(), 1);
        let t = &got[0];
        assert_eq!(
            crate::report::environment::fact(t, FACT_HOST, "driver_version"),
            Some("long")
        );
        assert_eq!(t.gpu_samples.len(), 10, "one file's samples, not both");
        // A file of another time is given to nobody.
        let mut late = env_file("h", 3000, "late");
        late.facts.iter_mut().for_each(|f| f.ts = 5000 * MS);
        late.gpu_samples.iter_mut().for_each(|g| g.ts += 5000 * MS);
        late.gpu_processes
            .iter_mut()
            .for_each(|p| p.ts += 5000 * MS);
        late.meta.start_real_ns = 5000 * MS;
        let got = give_environment(vec![process(100), late]).unwrap();
        assert!(got[0].gpu_samples.is_empty() && got[0].gpu_processes.is_empty());
    }

    #[test]
    fn an_environment_file_alone_is_an_error_not_a_process() {
        let e = give_environment(vec![env_file("h", 100, "x")]).unwrap_err();
        assert!(matches!(e, Error::EnvironmentOnly(_)), "{e}");
        assert!(e.to_string().contains("environment file"), "{e}");
        assert!(e.hint().unwrap().contains("gputrace dump"));
        assert!(give_environment(Vec::new()).unwrap().is_empty());
    }
}
