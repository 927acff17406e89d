//! Device memory in use over time, from the allocations and frees the trace saw: each
//! `cudaFree` paired with the `cudaMalloc` that returned its pointer (format 2.5 `Api`
//! pointers; MEMORY2 activity records are off by default), else MEMORY2's device
//! allocations and releases when the trace has them. What a caching allocator (PyTorch's)
//! holds: its segments, not the tensors in them.
//!
//! Frees of pointers allocated before the trace began are counted but change nothing:
//! the in-use figures are then a lower bound. The sum covers every device the process
//! allocated on (a `cudaMalloc` records no device).

use crate::model::trace::Trace;
use gputrace_format as fmt;
use serde::Serialize;
use std::collections::HashMap;

/// CUPTI runtime callback ids of the device allocations and frees paired here.
const CUDA_MALLOC: u32 = 20;
const CUDA_FREE: u32 = 22;

/// One allocation or free, as the pairing reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Alloc { ts: u64, ptr: u64, bytes: u64 },
    Free { ts: u64, ptr: u64 },
}

impl Change {
    fn ts(&self) -> u64 {
        match *self {
            Change::Alloc { ts, .. } | Change::Free { ts, .. } => ts,
        }
    }
}

/// Where the allocations came from.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// `cudaMalloc` / `cudaFree` calls with their pointers (format 2.5).
    CudaMalloc,
    /// CUPTI MEMORY2 records of device memory.
    Memory2,
}

impl Source {
    pub fn words(self) -> &'static str {
        match self {
            Source::CudaMalloc => "cudaMalloc/cudaFree pairs",
            Source::Memory2 => "MEMORY2 records",
        }
    }
}

/// Memory in use over time.
#[derive(Clone, Debug, PartialEq)]
pub struct InUse {
    pub source: Source,
    /// (time, bytes in use from then on), in time order: one point per allocation or
    /// free that changed it.
    pub series: Vec<(u64, u64)>,
    /// Frees with the bytes they gave back (0 for a pointer never seen allocated), in
    /// time order.
    pub frees: Vec<(u64, u64)>,
    pub allocs: u64,
    /// Frees of pointers the trace never saw allocated (made before it began).
    pub unknown_frees: u64,
    /// The most in use, and when it was first reached.
    pub peak_bytes: u64,
    pub peak_at: u64,
}

impl InUse {
    /// Pairs frees with allocations by pointer, in time order (`changes` in any order;
    /// at one time, allocations first).
    pub fn pair(source: Source, mut changes: Vec<Change>) -> InUse {
        changes.sort_by_key(|c| (c.ts(), matches!(c, Change::Free { .. })));
        let mut live: HashMap<u64, u64> = HashMap::new();
        let mut out = InUse {
            source,
            series: Vec::with_capacity(changes.len()),
            frees: Vec::new(),
            allocs: 0,
            unknown_frees: 0,
            peak_bytes: 0,
            peak_at: 0,
        };
        let mut now = 0u64;
        for c in changes {
            match c {
                Change::Alloc { ts, ptr, bytes } => {
                    out.allocs += 1;
                    // A pointer handed out again without a free we saw: the old block
                    // is gone (its free was lost).
                    if let Some(old) = live.insert(ptr, bytes) {
                        now = now.saturating_sub(old);
                    }
                    now += bytes;
                    out.series.push((ts, now));
                    if now > out.peak_bytes {
                        (out.peak_bytes, out.peak_at) = (now, ts);
                    }
                }
                Change::Free { ts, ptr } => match live.remove(&ptr) {
                    Some(b) => {
                        now = now.saturating_sub(b);
                        out.series.push((ts, now));
                        out.frees.push((ts, b));
                    }
                    None => {
                        out.unknown_frees += 1;
                        out.frees.push((ts, 0));
                    }
                },
            }
        }
        out
    }

    /// From the trace: `cudaMalloc`/`cudaFree` with pointers, else MEMORY2 device
    /// records; None when it has neither.
    pub fn of(t: &Trace) -> Option<InUse> {
        let runtime = |a: &fmt::Api| a.domain == fmt::DOMAIN_RUNTIME && a.result == 0;
        let with_ptr = |a: &fmt::Api| a.ptr != fmt::ENV_NA64 && a.ptr != 0;
        if t.apis
            .iter()
            .filter(|a| runtime(a))
            .any(|a| a.cbid == CUDA_MALLOC && with_ptr(&a))
        {
            let changes = t
                .apis
                .iter()
                .filter(|a| runtime(a) && with_ptr(a))
                .filter_map(|a| match a.cbid {
                    // In use once the call returns the pointer; free from its call.
                    CUDA_MALLOC => Some(Change::Alloc {
                        ts: a.end,
                        ptr: a.ptr,
                        bytes: a.bytes,
                    }),
                    CUDA_FREE => Some(Change::Free {
                        ts: a.start,
                        ptr: a.ptr,
                    }),
                    _ => None,
                })
                .collect();
            return Some(InUse::pair(Source::CudaMalloc, changes));
        }
        let device = fmt::MemKind::Device as u8;
        let changes: Vec<Change> = t
            .memory
            .iter()
            .filter(|m| m.mem_kind == device)
            .map(|m| {
                if m.op == fmt::MEMORY_OP_FREE {
                    Change::Free {
                        ts: m.ts,
                        ptr: m.address,
                    }
                } else {
                    Change::Alloc {
                        ts: m.ts,
                        ptr: m.address,
                        bytes: m.bytes,
                    }
                }
            })
            .collect();
        (!changes.is_empty()).then(|| InUse::pair(Source::Memory2, changes))
    }

    /// Bytes in use at `ts` (after every change at or before it).
    pub fn at(&self, ts: u64) -> u64 {
        let i = self.series.partition_point(|p| p.0 <= ts);
        if i == 0 {
            0
        } else {
            self.series[i - 1].1
        }
    }

    /// Bytes given back by frees in `(from, to]` (known pointers only), and how many
    /// frees were made.
    pub fn freed_between(&self, from: u64, to: u64) -> (u64, u64) {
        let lo = self.frees.partition_point(|f| f.0 <= from);
        let hi = self.frees.partition_point(|f| f.0 <= to);
        let fs = &self.frees[lo..hi.max(lo)];
        (fs.iter().map(|f| f.1).sum(), fs.len() as u64)
    }

    /// How in use changed from step to step (`bounds`: step start times; the in-use at
    /// each); None with fewer than two steps.
    pub fn growth(&self, bounds: &[u64]) -> Option<Growth> {
        if bounds.len() < 3 {
            return None;
        }
        let at: Vec<u64> = bounds.iter().map(|&b| self.at(b)).collect();
        let steps = at.len() - 1;
        let grew = at.windows(2).filter(|w| w[1] > w[0]).count();
        let shrank = at.windows(2).filter(|w| w[1] < w[0]).count();
        let (first, last) = (at[0], at[steps]);
        Some(Growth {
            steps,
            grew,
            shrank,
            first_bytes: first,
            last_bytes: last,
            per_step_bytes: last.saturating_sub(first) / steps as u64,
        })
    }
}

/// How memory in use changed over a run's steps.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Growth {
    /// Steps compared (from the start of the first to the start of the last).
    pub steps: usize,
    /// Steps after which more was in use than before, and after which less.
    pub grew: usize,
    pub shrank: usize,
    /// In use at the first step's start and at the last's.
    pub first_bytes: u64,
    pub last_bytes: u64,
    /// The net growth per step (0 when it did not grow).
    pub per_step_bytes: u64,
}

impl Growth {
    /// Memory grew step after step: most steps (three quarters) ended with more in use
    /// than they began with, few with less, and it grew overall. What a leak looks like
    /// through a caching allocator (which stops calling cudaMalloc once its cache holds
    /// a step's tensors).
    pub fn steady(&self) -> bool {
        self.steps >= 3
            && self.grew * 4 >= self.steps * 3
            && self.shrank * 10 <= self.steps
            && self.last_bytes > self.first_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(ts: u64, ptr: u64, bytes: u64) -> Change {
        Change::Alloc { ts, ptr, bytes }
    }

    fn free(ts: u64, ptr: u64) -> Change {
        Change::Free { ts, ptr }
    }

    #[test]
    fn frees_are_paired_with_their_allocations_by_pointer() {
        let u = InUse::pair(
            Source::CudaMalloc,
            vec![
                free(50, 0xA), // made before the trace: counted, changes nothing
                alloc(10, 0xA, 100),
                alloc(20, 0xB, 300),
                free(30, 0xA),
                alloc(40, 0xA, 50), // the pointer handed out again
                free(60, 0xB),
                free(70, 0xC), // never seen allocated
            ],
        );
        assert_eq!(
            u.series,
            vec![
                (10, 100),
                (20, 400),
                (30, 300),
                (40, 350),
                (50, 300),
                (60, 0)
            ]
        );
        assert_eq!((u.peak_bytes, u.peak_at), (400, 20));
        assert_eq!((u.allocs, u.unknown_frees), (3, 1));
        assert_eq!(u.at(5), 0);
        assert_eq!(u.at(20), 400);
        assert_eq!(u.at(45), 350);
        assert_eq!(u.at(1_000), 0);
        // Frees in (25, 60]: 0xA's 100, 0xA's 50 again, 0xB's 300.
        assert_eq!(u.freed_between(25, 60), (450, 3));
    }

    #[test]
    fn an_allocation_and_a_free_at_one_time_count_the_allocation_first() {
        let u = InUse::pair(Source::CudaMalloc, vec![free(10, 0xA), alloc(10, 0xA, 64)]);
        assert_eq!(u.series, vec![(10, 64), (10, 0)]);
        assert_eq!(u.unknown_frees, 0);
    }

    #[test]
    fn a_lost_free_does_not_count_a_reused_pointer_twice() {
        let u = InUse::pair(Source::Memory2, vec![alloc(1, 0xA, 100), alloc(2, 0xA, 40)]);
        assert_eq!(u.at(2), 40);
    }

    #[test]
    fn growth_per_step_tells_a_leak_from_a_plateau() {
        // 1 GiB more every step (nothing freed).
        let leak: Vec<Change> = (0..10u64)
            .map(|i| alloc(i * 100 + 5, 0x1000 + i, 1 << 30))
            .collect();
        let u = InUse::pair(Source::CudaMalloc, leak);
        let bounds: Vec<u64> = (0..10u64).map(|i| i * 100).collect();
        let g = u.growth(&bounds).unwrap();
        assert_eq!((g.steps, g.grew, g.shrank), (9, 9, 0));
        assert_eq!(g.per_step_bytes, 1 << 30);
        assert_eq!((g.first_bytes, g.last_bytes), (0, 9 << 30));
        assert!(g.steady());
        // A cache that fills in the first step, then holds: no growth.
        let plateau = vec![alloc(5, 0x1, 4 << 30), alloc(6, 0x2, 1 << 30)];
        let u = InUse::pair(Source::CudaMalloc, plateau);
        let g = u.growth(&bounds).unwrap();
        assert_eq!((g.grew, g.per_step_bytes), (1, (5u64 << 30) / 9));
        assert!(!g.steady());
        // Up and down each step: not a leak.
        let mut churn = Vec::new();
        for i in 0..10u64 {
            churn.push(alloc(i * 100 + 5, 0x10 + i, 1 << 20));
            if i % 2 == 1 {
                churn.push(free(i * 100 + 50, 0x10 + i - 1));
                churn.push(free(i * 100 + 60, 0x10 + i));
            }
        }
        let g = InUse::pair(Source::CudaMalloc, churn)
            .growth(&bounds)
            .unwrap();
        assert!(!g.steady(), "{g:?}");
        assert!(InUse::pair(Source::CudaMalloc, vec![])
            .growth(&[1, 2])
            .is_none());
    }
}
