//! Out of memory: the allocations that failed with `cudaErrorMemoryAllocation` (or the
//! driver's `CUDA_ERROR_OUT_OF_MEMORY`), what was in use then ([`memuse`]: `cudaMalloc`
//! paired with `cudaFree`; NVML's device memory when the trace has its samples), how the
//! allocator retried (the frees between two attempts: a caching allocator gives back its
//! cached blocks and asks again), and how memory grew step by step: what tells a leak
//! from a peak that does not fit. The findings `out_of_memory` and `memory_growth` word it.

use crate::model::trace::Trace;
use crate::report::classify::{self, ApiKind};
use crate::report::failures::{self, FatalKind, OUT_OF_MEMORY};
use crate::report::memuse::{Growth, InUse, Source};
use crate::report::{callsites, environment};
use gputrace_format as fmt;
use serde::Serialize;

/// Calls after a failed allocation searched for its retry.
const RETRY_REACH: usize = 100_000;

/// What was in use when an allocation failed, from the pairs of allocations and frees.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct InUseAt {
    pub source: Source,
    pub in_use_bytes: u64,
    pub peak_bytes: u64,
    /// ns after the trace start.
    pub peak_at_ns: u64,
    /// Frees of memory allocated before the trace began: the figures are lower bounds.
    pub unknown_frees: u64,
}

/// NVML's view of the device when an allocation failed (the last sample before it).
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct NvmlAt {
    pub device: u32,
    pub at_ns: u64,
    pub used_bytes: u64,
    pub total_bytes: u64,
    /// What NVML listed for this process on that device, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process_bytes: Option<u64>,
}

/// A failed allocation asked again after frees: a caching allocator's retry.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Retry {
    /// The failure retried, ns after the trace start.
    pub failed_at_ns: u64,
    /// Frees between the failure and the next attempt, and the bytes they gave back
    /// (known pointers only).
    pub frees: u64,
    pub freed_bytes: u64,
    /// The attempt asked for the same size and it succeeded.
    pub succeeded: bool,
}

/// Allocations that found no memory, and what the trace says about why.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Oom {
    /// The last failed allocation: its call, code and size.
    pub call: String,
    pub error: String,
    pub code: u32,
    pub bytes: u64,
    /// Its start, ns after the trace start; and the first failure's.
    pub at_ns: u64,
    pub first_at_ns: u64,
    /// Allocations that failed for want of memory.
    pub failed: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub called_from: Option<String>,
    /// The process ran no GPU work after the last one: it ended there.
    pub fatal: bool,
    /// Memory in use then (absent without allocation pairs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_use: Option<InUseAt>,
    /// The device's memory (its `Device` record), when one device was used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvml: Option<NvmlAt>,
    /// Each failure that was asked again after frees.
    pub retries: Vec<Retry>,
    /// How memory in use changed over the steps (absent without steps or pairs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub growth: Option<Growth>,
}

/// The failed allocations of `t` (allocation calls that returned out of memory), in
/// start order.
fn failed_allocations(t: &Trace) -> Vec<usize> {
    t.apis
        .iter()
        .enumerate()
        .filter(|(_, a)| {
            a.result == OUT_OF_MEMORY && classify::api_kind(a, t.str(a.name)) == ApiKind::Alloc
        })
        .map(|(i, _)| i)
        .collect()
}

/// Out of memory in `t`, if an allocation failed for it. `steps`: step start times (the
/// steady state's), for the growth per step. Times relative to `t0`.
pub fn detect(t: &Trace, t0: u64, steps: &[u64]) -> Option<Oom> {
    let failed = failed_allocations(t);
    let (&first, &last) = (failed.first()?, failed.last()?);
    let f = t.apis.at(last);
    let rel = |ts: u64| ts.saturating_sub(t0);
    let use_ = InUse::of(t);
    let in_use = use_.as_ref().map(|u| InUseAt {
        source: u.source,
        in_use_bytes: u.at(f.start),
        peak_bytes: u.peak_bytes,
        peak_at_ns: rel(u.peak_at),
        unknown_frees: u.unknown_frees,
    });
    let fatal = failures::fatal(t, t0)
        .is_some_and(|x| x.kind == FatalKind::OutOfMemory && x.at_ns == rel(f.start));
    let capacity_bytes = match t.devices.as_slice() {
        [d] if d.global_memory > 0 => Some(d.global_memory),
        _ => None,
    };
    let retries = failed
        .iter()
        .filter_map(|&i| retry(t, i, use_.as_ref(), t0))
        .collect();
    Some(Oom {
        call: t.str(f.name).to_string(),
        error: failures::error_name(source_of(&f), f.result),
        code: f.result,
        bytes: f.bytes,
        at_ns: rel(f.start),
        first_at_ns: rel(t.apis.start(first)),
        failed: failed.len() as u64,
        called_from: callsites::place_of(t, f.tid, f.start),
        fatal,
        in_use,
        capacity_bytes,
        nvml: nvml_at(t, f.start, t0),
        retries,
        growth: use_.as_ref().and_then(|u| u.growth(steps)),
    })
}

fn source_of(a: &fmt::Api) -> failures::Source {
    if a.domain == fmt::DOMAIN_DRIVER {
        failures::Source::Driver
    } else {
        failures::Source::Runtime
    }
}

/// The retry of failed allocation `i`: the next call of the same function on the same
/// thread, with the frees that thread made in between; None when frees did not come
/// before it (nothing given back: not a retry) or no call came.
fn retry(t: &Trace, i: usize, u: Option<&InUse>, t0: u64) -> Option<Retry> {
    let f = t.apis.at(i);
    let mut frees = 0u64;
    for a in t.apis.iter_from(i + 1).take(RETRY_REACH) {
        if a.tid != f.tid {
            continue;
        }
        let kind = classify::api_kind(&a, t.str(a.name));
        if kind == ApiKind::Free {
            frees += 1;
        } else if a.cbid == f.cbid && a.domain == f.domain {
            if frees == 0 {
                return None;
            }
            let freed = u.map_or(0, |u| u.freed_between(f.end, a.start).0);
            return Some(Retry {
                failed_at_ns: f.start.saturating_sub(t0),
                frees,
                freed_bytes: freed,
                succeeded: a.result == 0 && a.bytes == f.bytes,
            });
        }
    }
    None
}

/// NVML's last sample of the process's device at or before `ts`, with device memory.
fn nvml_at(t: &Trace, ts: u64, t0: u64) -> Option<NvmlAt> {
    let own = environment::own_devices(t);
    let g = t
        .gpu_samples
        .iter()
        .filter(|g| {
            g.ts <= ts
                && own.contains(&g.device)
                && g.mem_used != fmt::ENV_NA64
                && g.mem_total != fmt::ENV_NA64
        })
        .max_by_key(|g| g.ts)?;
    let process_bytes = t
        .gpu_processes
        .iter()
        .filter(|p| {
            p.device == g.device
                && p.ts <= ts
                && p.flags & fmt::GPU_PROC_SELF != 0
                && p.used_memory != fmt::ENV_NA64
        })
        .max_by_key(|p| p.ts)
        .map(|p| p.used_memory);
    Some(NvmlAt {
        device: g.device,
        at_ns: g.ts.saturating_sub(t0),
        used_bytes: g.mem_used,
        total_bytes: g.mem_total,
        process_bytes,
    })
}

/// What the measurements say the job needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Diagnosis {
    /// One allocation asked for more than the device has.
    TooLarge,
    /// Memory in use grew step after step: something keeps tensors alive.
    Leak,
    /// It did not grow: the job's peak needs more than the device has.
    Peak,
    /// Not known (no steps, or no allocation pairs).
    Unknown,
}

impl Oom {
    pub fn diagnosis(&self) -> Diagnosis {
        if self.capacity_bytes.is_some_and(|c| self.bytes > c) {
            return Diagnosis::TooLarge;
        }
        match &self.growth {
            Some(g) if g.steady() => Diagnosis::Leak,
            Some(_) => Diagnosis::Peak,
            None => Diagnosis::Unknown,
        }
    }

    /// The retry into the last failure, if the allocator made one (it failed again).
    pub fn last_retry(&self) -> Option<&Retry> {
        self.retries.last().filter(|r| !r.succeeded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::trace::Trace;
    use gputrace_format::{Event, Meta};

    const GIB: u64 = 1 << 30;

    struct B {
        ev: Vec<Event>,
        corr: u32,
    }

    impl B {
        fn new() -> B {
            let mut ev: Vec<Event> = ["", "cudaMalloc", "cudaFree", "_Z4stepv"]
                .iter()
                .enumerate()
                .map(|(i, s)| Event::Str {
                    id: i as u32,
                    text: s.to_string(),
                })
                .collect();
            ev.push(Event::Device(fmt::Device {
                global_memory: 16 * GIB,
                name: 0,
                ..Default::default()
            }));
            B { ev, corr: 0 }
        }
        fn api(&mut self, start: u64, cbid: u32, bytes: u64, result: u32, ptr: u64) {
            self.corr += 1;
            self.ev.push(Event::Api(fmt::Api {
                start,
                end: start + 100,
                tid: 1,
                corr: self.corr,
                domain: fmt::DOMAIN_RUNTIME,
                cbid,
                name: if cbid == 20 { 1 } else { 2 },
                bytes,
                result,
                ptr,
                ..Default::default()
            }));
        }
        fn kernel(&mut self, start: u64) {
            self.ev.push(Event::Kernel(fmt::Kernel {
                start,
                end: start + 1_000,
                name: 3,
                corr: 0,
                ..Default::default()
            }));
        }
        fn trace(self) -> Trace {
            Trace::from_events(Meta::default(), self.ev)
        }
    }

    /// Each of 6 steps allocates 2 GiB and frees nothing; the seventh's allocation fails,
    /// the allocator frees two cached blocks of 1 GiB and retries, and fails again.
    fn leaking_job(die: bool) -> Trace {
        let mut b = B::new();
        b.api(0, 20, GIB, 0, 0x100);
        b.api(10, 20, GIB, 0, 0x200);
        b.api(1_000, 22, 0, 0, 0x100);
        b.api(2_000, 22, 0, 0, 0x200);
        for i in 0..7u64 {
            let s = 1_000_000 * (i + 1);
            b.kernel(s);
            let ok = i < 6;
            b.api(
                s + 10_000,
                20,
                2 * GIB,
                if ok { 0 } else { 2 },
                if ok { 0x1000 + i } else { fmt::ENV_NA64 },
            );
        }
        b.api(7_020_000, 22, 0, 0, 0x300);
        b.api(7_030_000, 20, 2 * GIB, 2, fmt::ENV_NA64);
        if !die {
            b.kernel(8_000_000);
        }
        b.trace()
    }

    #[test]
    fn a_job_that_grew_every_step_died_of_a_leak() {
        let t = leaking_job(true);
        let bounds: Vec<u64> = (1..=7u64).map(|i| i * 1_000_000).collect();
        let o = detect(&t, 0, &bounds).unwrap();
        assert_eq!(
            (o.call.as_str(), o.error.as_str()),
            ("cudaMalloc", "cudaErrorMemoryAllocation")
        );
        assert_eq!(
            (o.bytes, o.failed, o.at_ns, o.first_at_ns),
            (2 * GIB, 2, 7_030_000, 7_010_000)
        );
        assert!(o.fatal);
        let u = o.in_use.as_ref().unwrap();
        assert_eq!(
            (u.in_use_bytes, u.peak_bytes, u.unknown_frees),
            (12 * GIB, 12 * GIB, 1)
        );
        let g = o.growth.as_ref().unwrap();
        assert_eq!((g.steps, g.grew, g.per_step_bytes), (6, 6, 2 * GIB));
        assert_eq!(o.diagnosis(), Diagnosis::Leak);
        // The free between the two failures is of a block made before the trace: one
        // free, no bytes known.
        assert_eq!(
            o.retries,
            vec![Retry {
                failed_at_ns: 7_010_000,
                frees: 1,
                freed_bytes: 0,
                succeeded: false
            }]
        );
        assert!(o.last_retry().is_some());
        assert_eq!(o.capacity_bytes, Some(16 * GIB));
    }

    #[test]
    fn a_job_that_ran_on_after_the_failure_did_not_die_of_it() {
        let o = detect(&leaking_job(false), 0, &[]).unwrap();
        assert!(!o.fatal);
        assert_eq!(o.growth, None);
        assert_eq!(o.diagnosis(), Diagnosis::Unknown);
    }

    #[test]
    fn an_allocation_larger_than_the_device_is_its_own_diagnosis() {
        let mut b = B::new();
        b.kernel(0);
        b.api(5_000, 20, 64 * GIB, 2, fmt::ENV_NA64);
        let o = detect(&b.trace(), 0, &[]).unwrap();
        assert_eq!(o.diagnosis(), Diagnosis::TooLarge);
        assert!(o.in_use.is_none(), "no pairs without pointers");
        assert!(o.retries.is_empty());
    }

    #[test]
    fn no_failed_allocation_no_oom() {
        let mut b = B::new();
        b.api(0, 20, GIB, 0, 0x100);
        b.api(10, 20, 0, 1, fmt::ENV_NA64);
        assert_eq!(detect(&b.trace(), 0, &[]), None);
    }
}
