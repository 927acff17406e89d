//! What the detectors read. A new kind of per-trace data for findings (host CPU samples, GPU
//! counter samples, NVML samples, ...) becomes one more field of [`FindingCx`], filled in
//! where `report::analyze_process` builds it; data about the whole job goes in [`JobCx`].

use super::common::{self, dur};
use crate::report::callsites::{self, CallSite, Tally};
use crate::report::comm::{ClusterComm, CommStats};
use crate::report::copies::CopyStats;
use crate::report::counters::CounterStats;
use crate::report::ctx::Ctx;
use crate::report::ctx::HostClass;
use crate::report::idle::{Attribution, Cause, Method};
use crate::report::kernels::{KernelStats, MemoryUse};
use crate::report::out::id::FindingId;
use crate::report::out::{Example, Finding, ProcessReport};
use crate::report::steps::Steps;
use gputrace_format::{self as fmt, CopyKind, MemKind};

/// Everything measured about one process, for its detectors.
pub(crate) struct FindingCx<'c, 'a> {
    /// The trace and what was derived from it once (devices, blind windows, strings).
    pub ctx: &'c Ctx<'a>,
    /// Index into the report's processes.
    pub index: usize,
    /// The process's label (`pid 123`, `rank 2`).
    pub label: String,
    pub steps: Steps,
    /// The steady state's idle time, by cause.
    pub att: Attribution,
    /// Steady-state wall time x devices with work: what time at stake is a share of.
    pub wall: u64,
    pub kstats: KernelStats,
    pub copies: CopyStats,
    pub memory: Vec<MemoryUse>,
    pub comm: CommStats,
    /// GPU hardware counter samples over the steady state (empty without them).
    pub counters: CounterStats,
    /// The process's section of the report, filled in: the numbers it shows.
    pub report: &'c ProcessReport,
    /// GPU work that never completed, if the trace shows it (`crate::report::stalls`).
    pub hang: Option<crate::report::stalls::Hang>,
}

/// Which calls a finding's call sites are those of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Calls {
    /// Calls that blocked until the GPU drained (`implicit_sync`).
    Implicit,
    /// Blocking copies from pinned memory (`sync_memcpy`).
    SyncMemcpy,
    /// Copies from pageable memory (`pageable_memcpy`).
    Pageable,
    /// NCCL collectives and point-to-point calls.
    Nccl,
}

/// Everything known about a job of several ranks, for the job-wide detectors.
pub(crate) struct JobCx<'a> {
    /// Every process's section of the report, indexed as findings' `process`.
    pub procs: &'a [ProcessReport],
    /// Clock alignment, collective matching and arrival skew across the ranks.
    pub comm: &'a ClusterComm,
}

impl FindingCx<'_, '_> {
    /// The job's CUDA graph replays in the steady state, when it replays graphs: a
    /// finding then never advises capturing CUDA graphs.
    pub fn graphs(&self) -> Option<&crate::report::graphs::GraphsReport> {
        self.report.graphs.as_ref().filter(|g| g.replays_graphs())
    }

    /// Whether the process ran GPU work in a steady state (else only coverage findings).
    pub fn has_steady_gpu(&self) -> bool {
        self.wall > 0 && !self.ctx.devices.is_empty()
    }

    /// A finding about this process with `ns` of its steady state at stake.
    pub fn finding(&self, id: FindingId, title: &str, ns: u64, estimated: bool) -> Finding {
        let mut f = common::finding(id, title, ns, self.wall);
        f.process = Some(self.index);
        f.rank = self.label.clone();
        f.estimated = estimated;
        f
    }

    /// Whether the share of the steady state is large enough to report.
    pub fn reportable(&self, ns: u64) -> bool {
        crate::report::units::pct(ns, self.wall) >= common::REPORT_PCT
    }

    /// Nanoseconds after the start of the trace.
    pub fn rel(&self, ts: u64) -> u64 {
        self.ctx.rel(ts)
    }

    /// An interned string of the trace (a kernel's name) as evidence shows it.
    pub fn kernel_name(&self, name: u32) -> String {
        common::kernel_name(self.ctx.t.str(name))
    }

    /// Idle time charged to `c` in the steady state.
    pub fn idle(&self, c: Cause) -> u64 {
        self.att.get(c)
    }

    /// Idle intervals charged mostly to `c`.
    pub fn gaps(&self, c: Cause) -> u64 {
        self.att.gaps[c as usize]
    }

    /// Idle intervals with any share charged to `c` (a cause can hold part of many
    /// gaps whose largest share went elsewhere).
    pub fn gaps_touched(&self, c: Cause) -> u64 {
        self.att.touched[c as usize]
    }

    /// The largest idle intervals charged to `c`, as examples.
    pub fn idle_examples(&self, c: Cause) -> Vec<Example> {
        self.att.examples[c as usize]
            .iter()
            .filter(|e| e.charged > 0)
            .map(|e| Example {
                at_ns: self.rel(e.start),
                dur_ns: e.len,
                what: if e.charged >= e.len {
                    format!("GPU idle {}", dur(e.len))
                } else {
                    format!(
                        "GPU idle {}, {} of it charged here",
                        dur(e.len),
                        dur(e.charged)
                    )
                },
            })
            .collect()
    }

    pub fn gpu_only(&self) -> bool {
        self.att.method == Method::GpuOnly
    }

    /// Says how the host side was seen when it was not seen through CUPTI callbacks; a
    /// GPU-only heuristic makes the finding an estimate.
    pub fn heuristic_note(&self, f: &mut Finding) {
        if self.att.method == Method::HostHooks {
            f.evidence.push(
                "host activity from the symbol hooks (no CUPTI API callbacks): calls are not linked to GPU work".into(),
            );
        }
        if self.gpu_only() {
            f.estimated = true;
            f.evidence.push(
                "GPU-only heuristic: this trace has no host API events, so what the host was doing is inferred from GPU gaps".into(),
            );
        }
    }

    /// "N steps, median step T", when steps were found.
    pub fn step_line(&self) -> Option<String> {
        let s = &self.steps;
        if s.count() == 0 {
            return None;
        }
        let mut d: Vec<u64> = s.bounds.windows(2).map(|w| w[1] - w[0]).collect();
        d.sort_unstable();
        Some(format!(
            "{} steps, median step {}",
            s.count(),
            dur(d[d.len() / 2])
        ))
    }

    /// Where in the program's Python code the steady state's `calls` were made (empty
    /// for traces without call sites).
    pub fn call_sites(&self, calls: Calls) -> Vec<CallSite> {
        let t = self.ctx.t;
        if !Tally::possible(t) {
            return Vec::new();
        }
        let (lo, hi) = self.steps.steady;
        let inside = |s: u64| s >= lo && s < hi;
        let mut tally = Tally::new(t);
        if calls == Calls::Nccl {
            for n in &t.nccl {
                let group = matches!(n.op, fmt::NCCL_GROUP_START | fmt::NCCL_GROUP_END);
                if inside(n.start) && !group {
                    tally.add(n.tid, n.start, n.end, fmt::nccl_op_name(n.op));
                }
            }
            return tally.finish();
        }
        if self.ctx.has_api() {
            let class = match calls {
                Calls::Implicit => HostClass::Implicit,
                Calls::SyncMemcpy => HostClass::SyncMemcpy,
                _ => HostClass::Pageable,
            };
            for (i, a) in t.apis.iter().enumerate() {
                if inside(a.start) && self.ctx.api.class(i) == Some(class) {
                    tally.add(a.tid, a.start, a.end, t.str(a.name));
                }
            }
            return tally.finish();
        }
        // Host hooks only: their own records carry the call sites.
        if calls == Calls::Implicit {
            for c in &t.host_calls {
                let (name, class) = fmt::hostcall_info(c.call);
                let blocks =
                    class == fmt::HostCallClass::Sync && c.call != fmt::HOSTCALL_STREAM_WAIT_EVENT;
                if inside(c.start) && blocks {
                    tally.add(c.tid, c.start, c.end, name);
                }
            }
        }
        for c in &t.host_copies {
            if !inside(c.start) || c.flags & fmt::HOSTCOPY_FLAG_CUPTI_API != 0 {
                continue;
            }
            let blocking = c.flags & fmt::HOSTCOPY_FLAG_ASYNC == 0;
            let host = MemKind::from_u8(c.host_kind);
            let want = match calls {
                Calls::Implicit => blocking && CopyKind::from_u8(c.copy_kind) == CopyKind::DtoH,
                Calls::SyncMemcpy => blocking && host == MemKind::Pinned,
                _ => host == MemKind::Pageable,
            };
            if want {
                tally.add(c.tid, c.start, c.end, fmt::hostcopy_api_name(c.api));
            }
        }
        tally.finish()
    }

    /// Fills in a finding's call sites and the evidence line that shows the top ones.
    pub fn add_call_sites(&self, f: &mut Finding, calls: Calls) {
        f.call_sites = self.call_sites(calls);
        if let Some(line) = callsites::evidence(&f.call_sites) {
            f.evidence.push(line);
        }
    }
}
