//! From measurements to findings: each with its stable id, severity, the GPU time at stake
//! in the steady state, the evidence, and the fix in the user's terms.

use super::classify::{self, ApiKind};
use super::comm::ClusterComm;
use super::idle::{Cause, Method};
use super::text::{dur, share};
use super::{pct, Example, Facts, Finding, ProcessReport, Severity};
use crate::trace::demangle;
use std::collections::BTreeMap;

/// Share of the steady-state wall time from which a cause is worth a warning.
pub const WARN_PCT: f64 = 5.0;
/// ... and from which it is the problem.
pub const CRITICAL_PCT: f64 = 25.0;
/// Below this, a cause is not a warning whatever its share (very short traces).
pub const MIN_WARN_NS: u64 = 100_000;
/// Findings smaller than this share are left out.
pub const REPORT_PCT: f64 = 1.0;

fn severity_for(pct_: f64, ns: u64) -> Severity {
    if ns >= MIN_WARN_NS && pct_ >= CRITICAL_PCT {
        Severity::Critical
    } else if ns >= MIN_WARN_NS && pct_ >= WARN_PCT {
        Severity::Warn
    } else {
        Severity::Info
    }
}

fn trunc(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

struct Ctx2<'f, 'c, 'a> {
    f: &'f Facts<'c, 'a>,
}

impl Ctx2<'_, '_, '_> {
    fn finding(&self, id: &str, title: &str, ns: u64, estimated: bool) -> Finding {
        let p = pct(ns, self.f.wall);
        Finding {
            id: id.to_string(),
            severity: severity_for(p, ns),
            process: Some(self.f.index),
            rank: self.f.label.clone(),
            title: title.to_string(),
            at_stake_ns: ns,
            at_stake_pct: p,
            estimated,
            summary: String::new(),
            evidence: Vec::new(),
            examples: Vec::new(),
            metrics: BTreeMap::new(),
            fix: String::new(),
            overlaps: Vec::new(),
            subcause: None,
        }
    }

    fn rel(&self, ts: u64) -> u64 {
        self.f.ctx.rel(ts)
    }

    fn idle_examples(&self, c: Cause) -> Vec<Example> {
        self.f.att.examples[c as usize]
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

    fn gpu_only(&self) -> bool {
        self.f.att.method == Method::GpuOnly
    }

    fn heuristic_note(&self, f: &mut Finding) {
        if self.f.att.method == Method::HostHooks {
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

    fn examples_line(&self, ex: &[Example]) -> Option<String> {
        if ex.is_empty() {
            return None;
        }
        Some(format!(
            "e.g. at {}",
            ex.iter()
                .map(|e| format!("+{} ({})", super::text::ts(e.at_ns), dur(e.dur_ns)))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }

    fn step_line(&self) -> Option<String> {
        let s = &self.f.steps;
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

    /// Calls of a kind in the steady state: (name, count, total ns, longest (start, dur)).
    fn calls_of(&self, want: &[ApiKind]) -> Vec<(String, u64, u64, (u64, u64))> {
        let mut v: Vec<_> = self
            .f
            .launches
            .calls
            .iter()
            .filter(|(n, _)| want.contains(&classify::kind_from_name(n)))
            .map(|(n, c)| (n.clone(), c.0, c.1, c.2))
            .collect();
        v.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
        v
    }
}

/// Findings about one process.
pub(crate) fn process(f: &Facts, r: &ProcessReport) -> Vec<Finding> {
    let c = Ctx2 { f };
    let mut out = Vec::new();
    let att = &f.att;
    let wall = f.wall;
    if wall == 0 || f.ctx.devices.is_empty() {
        env(&c, r, &mut out);
        return out;
    }

    // data_starvation
    let ns = att.get(Cause::DataStarvation);
    if pct(ns, wall) >= REPORT_PCT {
        let mut x = c.finding(
            "data_starvation",
            "GPU idle while the host issued no CUDA work",
            ns,
            false,
        );
        x.summary = format!(
            "For {} of the steady state no host thread was in a CUDA call while the GPU sat idle: the loop was waiting for its next input or doing host-side work.",
            share(ns, wall)
        );
        x.evidence.push(format!(
            "{} idle gaps charged mostly here, {} in total",
            att.gaps[Cause::DataStarvation as usize],
            dur(ns)
        ));
        if let Some(l) = c.step_line() {
            x.evidence.push(format!(
                "{l}; GPU busy {:.0}% of a median step",
                r.steps.busy_pct_median
            ));
        }
        x.examples = c.idle_examples(Cause::DataStarvation);
        if let Some(l) = c.examples_line(&x.examples) {
            x.evidence.push(l);
        }
        c.heuristic_note(&mut x);
        x.metrics.insert(
            "gaps".into(),
            att.gaps[Cause::DataStarvation as usize] as f64,
        );
        x.fix = "Feed the GPU ahead of time: DataLoader(num_workers=N, pin_memory=True, persistent_workers=True, prefetch_factor=2 or more), with N up to the CPU cores you can give each GPU; move heavy per-sample transforms to the GPU or precompute them; keep host-side work (logging, metrics, checkpoint I/O) out of the step or make it asynchronous.".into();
        if let Some(h) = &r.host_cpu {
            super::hostfind::refine_data_starvation(&mut x, h, wall);
        }
        out.push(x);
    }

    // cpu_bound (host samples only)
    let ns = att.get(Cause::CpuBound);
    if let (Some(h), true) = (&r.host_cpu, pct(ns, wall) >= REPORT_PCT) {
        let mut x = c.finding(
            "cpu_bound",
            "GPU idle while the feeding thread was computing on the CPU",
            ns,
            false,
        );
        super::hostfind::fill_cpu_bound(&mut x, h, f);
        out.push(x);
    }

    // implicit_sync
    let ns = att.get(Cause::ImplicitSync);
    if pct(ns, wall) >= REPORT_PCT {
        let mut x = c.finding(
            "implicit_sync",
            "The host waited for the GPU, then the GPU waited for the host",
            ns,
            false,
        );
        let syncs = c.calls_of(&[ApiKind::Sync, ApiKind::Free]);
        let top = syncs
            .iter()
            .take(3)
            .map(|s| format!("{} x{} (blocked {})", s.0, s.1, dur(s.2)))
            .collect::<Vec<_>>();
        x.summary = format!(
            "Synchronising calls drained the GPU's queue; the idle time after each, until the host had issued new work, cost {} of the steady state.",
            share(ns, wall)
        );
        if !top.is_empty() {
            x.evidence
                .push(format!("in steady state: {}", top.join(", ")));
        }
        let small_dtoh: (u64, u64) = f
            .copies
            .groups
            .iter()
            .filter(|g| g.direction == "DtoH")
            .fold((0, 0), |a, g| (a.0 + g.count, a.1.saturating_add(g.bytes)));
        if small_dtoh.0 > 0 {
            x.evidence.push(format!(
                "{} device-to-host copies ({} in all): reading values back, as .item(), .cpu(), .tolist() or print(tensor) do",
                small_dtoh.0,
                super::text::bytes(small_dtoh.1)
            ));
        }
        x.evidence.push(format!(
            "{} idle gaps charged mostly here",
            att.gaps[Cause::ImplicitSync as usize]
        ));
        x.examples = c.idle_examples(Cause::ImplicitSync);
        if let Some(l) = c.examples_line(&x.examples) {
            x.evidence.push(l);
        }
        c.heuristic_note(&mut x);
        x.metrics.insert(
            "sync_calls".into(),
            syncs.iter().map(|s| s.1).sum::<u64>() as f64,
        );
        x.metrics.insert(
            "sync_blocked_ns".into(),
            syncs.iter().map(|s| s.2).sum::<u64>() as f64,
        );
        x.fix = "Stop reading GPU results every step: keep running losses/metrics as GPU tensors and call .item() (or .cpu(), print) every N steps; remove torch.cuda.synchronize() from the loop (time with torch.cuda.Event instead); avoid Python control flow that depends on GPU values; make host<->device copies non_blocking=True.".into();
        super::syncfix::follow_the_call(&mut x, f);
        out.push(x);
    }

    // pageable_memcpy
    let idle_pg = att.get(Cause::PageableMemcpy);
    let pg = &f.copies.pageable;
    if pg.count > 0 || idle_pg > 0 {
        let excess = f.copies.pageable_excess_ns;
        let ns = idle_pg + excess;
        if pct(ns, wall) >= REPORT_PCT {
            let mut x = c.finding(
                "pageable_memcpy",
                "Copies from pageable host memory",
                ns,
                excess > 0,
            );
            x.summary = format!(
                "Host<->device copies from ordinary (pageable) memory are staged by the driver and block the host; they cost {} of the steady state.",
                share(ns, wall)
            );
            if pg.count > 0 {
                let gbps = pg.gbps().unwrap_or(0.0);
                let reference = f.copies.pageable_ref.map(|r| {
                    if r.measured {
                        format!("{:.1} GB/s measured on this trace's pinned copies", r.gbps)
                    } else {
                        format!("~{:.0} GB/s typical for pinned copies over PCIe 5 on an H200 (estimate)", r.gbps)
                    }
                });
                x.evidence.push(format!(
                    "{} pageable copies, {}, {} on the GPU: {:.1} GB/s{}",
                    pg.count,
                    super::text::bytes(pg.bytes),
                    dur(pg.time_ns),
                    gbps,
                    reference.map(|r| format!(" vs {r}")).unwrap_or_default()
                ));
                x.metrics.insert("copies".into(), pg.count as f64);
                x.metrics.insert("bytes".into(), pg.bytes as f64);
                x.metrics.insert("copy_ns".into(), pg.time_ns as f64);
                x.metrics.insert("achieved_gbps".into(), gbps);
                if let Some(r) = f.copies.pageable_ref {
                    x.metrics.insert("reference_gbps".into(), r.gbps);
                }
            }
            x.evidence.push(format!(
                "GPU idle while the host was inside these copies: {}",
                dur(idle_pg)
            ));
            if excess > 0 {
                x.evidence.push(format!(
                    "copy time beyond the pinned rate, with no kernel alongside: {} (estimate)",
                    dur(excess)
                ));
            }
            x.examples = pg
                .examples
                .iter()
                .map(|&(s, d, b)| Example {
                    at_ns: c.rel(s),
                    dur_ns: d,
                    what: format!("pageable copy of {}", super::text::bytes(b)),
                })
                .collect();
            if let Some(l) = c.examples_line(&x.examples) {
                x.evidence.push(l);
            }
            c.heuristic_note(&mut x);
            x.metrics.insert("idle_ns".into(), idle_pg as f64);
            x.metrics.insert("excess_ns".into(), excess as f64);
            x.fix = "Pin the host buffers and copy asynchronously: DataLoader(pin_memory=True) (or tensor.pin_memory()), then .to(device, non_blocking=True); outside PyTorch, allocate with cudaHostAlloc/cudaMallocHost or register with cudaHostRegister and use cudaMemcpyAsync on a stream.".into();
            out.push(x);
        }
    }

    // sync_memcpy
    let ns = att.get(Cause::SyncMemcpy);
    let sp = &f.copies.sync_pinned;
    if pct(ns, wall) >= REPORT_PCT || (sp.count > 0 && ns > 0) {
        let mut x = c.finding(
            "sync_memcpy",
            "Pinned copies made with a blocking call",
            ns,
            false,
        );
        x.summary = format!(
            "Copies from pinned memory were made synchronously (pin_memory without non_blocking), so the host waited for them and the GPU then waited for the host: {} of the steady state.",
            share(ns, wall)
        );
        if sp.count > 0 {
            x.evidence.push(format!(
                "{} blocking copies from pinned memory, {}, {} on the GPU; calls: {}",
                sp.count,
                super::text::bytes(sp.bytes),
                dur(sp.time_ns),
                f.copies
                    .sync_calls
                    .iter()
                    .map(|(k, v)| format!("{k} x{v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            x.metrics.insert("copies".into(), sp.count as f64);
            x.metrics.insert("bytes".into(), sp.bytes as f64);
        }
        x.examples = c.idle_examples(Cause::SyncMemcpy);
        if let Some(l) = c.examples_line(&x.examples) {
            x.evidence.push(l);
        }
        x.fix = "The buffers are already pinned: add non_blocking=True to .to(device) / .cuda() so the copy overlaps compute; keep pin_memory=True in the DataLoader.".into();
        out.push(x);
    }

    // launch_bound
    let ns = att.get(Cause::LaunchBound);
    if pct(ns, wall) >= REPORT_PCT {
        let mut x = c.finding(
            "launch_bound",
            "Kernels shorter than the time to launch them",
            ns,
            false,
        );
        let l = &r.launches;
        x.summary = format!(
            "The host issued work back to back but could not keep up: the GPU finished each kernel before the next was launched, idle {} of the steady state.",
            share(ns, wall)
        );
        x.evidence.push(format!(
            "{} kernels in {} ({:.0}/s); median kernel {}, while the host launched one every {} (median call {})",
            r.kernels.count,
            dur(r.steady.wall_ns),
            r.kernels.per_second,
            dur(r.kernels.p50_ns),
            dur(l.launch_interval_p50_ns),
            dur(l.launch_call_p50_ns)
        ));
        if l.linked > 0 {
            x.evidence.push(format!(
                "{:.0}% of submissions found their stream's queue empty (mean depth {:.1}); launch latency median {}",
                l.empty_queue_pct,
                l.mean_queue_depth,
                dur(l.latency_p50_ns)
            ));
        }
        x.examples = c.idle_examples(Cause::LaunchBound);
        if let Some(e) = c.examples_line(&x.examples) {
            x.evidence.push(e);
        }
        c.heuristic_note(&mut x);
        x.metrics
            .insert("kernels_per_s".into(), r.kernels.per_second);
        x.metrics
            .insert("kernel_p50_ns".into(), r.kernels.p50_ns as f64);
        x.metrics.insert(
            "launch_interval_p50_ns".into(),
            l.launch_interval_p50_ns as f64,
        );
        x.metrics
            .insert("empty_queue_pct".into(), l.empty_queue_pct);
        x.fix = "Cut the per-kernel host cost: capture the step in a CUDA graph (torch.compile(mode=\"reduce-overhead\") or torch.cuda.CUDAGraph), fuse small ops with torch.compile, and give each kernel more work (a larger batch).".into();
        out.push(x);
    }

    // kernel_fragmentation
    let ns = att.get(Cause::KernelFragmentation);
    let k = &r.kernels;
    if pct(ns, wall) >= REPORT_PCT || (k.count >= 1000 && k.under_10us_time_pct >= 50.0) {
        let mut x = c.finding(
            "kernel_fragmentation",
            "GPU time spread over very many tiny kernels",
            ns,
            false,
        );
        if k.under_10us_count_pct < 50.0 && x.severity > Severity::Info {
            x.severity = Severity::Info;
        }
        x.summary = format!(
            "{:.0}% of kernels run under 10 us ({:.0}% of kernel time); the gaps between queued kernels alone cost {} of the steady state.",
            k.under_10us_count_pct,
            k.under_10us_time_pct,
            share(ns, wall)
        );
        x.evidence.push(format!(
            "{} kernels, {:.0}/s; duration p50 {}, p90 {}, p99 {}",
            k.count,
            k.per_second,
            dur(k.p50_ns),
            dur(k.p90_ns),
            dur(k.p99_ns)
        ));
        let tiny: Vec<String> = f
            .kstats
            .by_name
            .iter()
            .filter(|a| a.tiny * 2 > a.count)
            .take(3)
            .map(|a| format!("{} x{}", trunc(&demangle(f.ctx.t.str(a.name)), 60), a.count))
            .collect();
        if !tiny.is_empty() {
            x.evidence
                .push(format!("most frequent tiny kernels: {}", tiny.join("; ")));
        }
        x.evidence.push(format!(
            "device-side gaps between already-queued kernels: {} over {} gaps",
            dur(ns),
            att.gaps[Cause::KernelFragmentation as usize]
        ));
        x.examples = c.idle_examples(Cause::KernelFragmentation);
        x.metrics.insert("kernels".into(), k.count as f64);
        x.metrics
            .insert("under_10us_count_pct".into(), k.under_10us_count_pct);
        x.metrics
            .insert("under_10us_time_pct".into(), k.under_10us_time_pct);
        x.metrics.insert("p50_ns".into(), k.p50_ns as f64);
        x.fix = "Fuse: torch.compile the model, use fused optimizers (torch.optim.AdamW(fused=True)), batch many small tensor ops into few large ones; CUDA graphs remove the launch cost but not the per-kernel gaps.".into();
        out.push(x);
    }

    // small_grid
    let ns = f.kstats.small_grid_ns as u64;
    if pct(ns, wall) >= REPORT_PCT {
        let mut x = c.finding(
            "small_grid",
            "Kernels with far fewer blocks than the GPU holds",
            ns,
            true,
        );
        x.summary = format!(
            "Kernels with fewer blocks than SMs, filling less than a quarter of the GPU's resident-block slots, leave SMs empty while they run; the empty share of their time is {} of the steady state (estimate).",
            share(ns, wall)
        );
        x.evidence.push(format!(
            "nvidia-smi GPU-Util would read {:.0}% (time with any kernel running); SM fill actually achieved ~{} (time-weighted resident blocks / slots, estimated from grid, block, registers and shared memory)",
            r.gpu_util_pct,
            r.sm_fill_pct.map(super::text::pct_str).unwrap_or_else(|| "?".into())
        ));
        let sms = f
            .ctx
            .primary
            .and_then(|d| f.ctx.device_info(d))
            .map(|d| d.sm_count)
            .unwrap_or(0);
        let mut small: Vec<&super::kernels::NameAgg> = f
            .kstats
            .by_name
            .iter()
            .filter(|a| a.empty_ns > 0.0)
            .collect();
        small.sort_by(|a, b| b.empty_ns.total_cmp(&a.empty_ns).then(a.name.cmp(&b.name)));
        for a in small.iter().take(3) {
            x.evidence.push(format!(
                "{} x{}: {} blocks of {} threads vs {} SMs x {} resident = {} full, {} in total",
                trunc(&demangle(f.ctx.t.str(a.name)), 60),
                a.count,
                if a.blocks_min == a.blocks_max {
                    a.blocks_max.to_string()
                } else {
                    format!("{}-{}", a.blocks_min, a.blocks_max)
                },
                a.threads,
                sms,
                a.resident,
                super::text::pct_str(if a.fill_known_ns > 0 {
                    100.0 * a.fill_ns / a.fill_known_ns as f64
                } else {
                    0.0
                }),
                dur(a.total_ns)
            ));
            x.examples.push(Example {
                at_ns: c.rel(a.longest.0),
                dur_ns: a.longest.1,
                what: format!(
                    "{} ({} blocks)",
                    trunc(&demangle(f.ctx.t.str(a.name)), 60),
                    a.blocks_max
                ),
            });
        }
        x.metrics.insert("gpu_util_pct".into(), r.gpu_util_pct);
        if let Some(p) = r.sm_fill_pct {
            x.metrics.insert("sm_fill_pct".into(), p);
        }
        x.fix = "Give each kernel more parallel work: raise the batch size (or tokens per step); for your own kernels launch enough blocks to cover every SM several times (grid-stride loops), or use smaller blocks; run independent small kernels concurrently on separate streams.".into();
        out.push(x);
    }

    // memory_headroom
    if let Some(m) = f
        .memory
        .iter()
        .filter(|m| m.capacity_bytes > 0)
        .min_by(|a, b| {
            pct(a.peak_bytes, a.capacity_bytes).total_cmp(&pct(b.peak_bytes, b.capacity_bytes))
        })
    {
        let used = pct(m.peak_bytes, m.capacity_bytes);
        let fixable = f.kstats.small_grid_ns as u64
            + att.get(Cause::LaunchBound)
            + att.get(Cause::KernelFragmentation);
        let fp = pct(fixable, wall);
        if used < 30.0 && fp >= 3.0 {
            let mut x = c.finding(
                "memory_headroom",
                "Small batches while most device memory is unused",
                fixable,
                true,
            );
            if fp < 10.0 {
                x.severity = Severity::Info;
            } else if x.severity == Severity::Critical {
                x.severity = Severity::Warn;
            }
            x.summary = format!(
                "Peak device memory was {:.0}% of capacity while small or short kernels cost {} of the steady state: a larger batch would use the idle memory and SMs.",
                used,
                share(fixable, wall)
            );
            x.evidence.push(format!(
                "peak device memory in steady state {} of {} ({:.1}%), from {} allocation records{}",
                super::text::bytes(m.peak_bytes),
                super::text::bytes(m.capacity_bytes),
                used,
                m.events,
                if m.lower_bound { " (a lower bound: the trace began after some allocations)" } else { "" }
            ));
            x.evidence.push(format!(
                "median kernel {}, SM fill ~{}; time at stake is that of small_grid + launch_bound + kernel_fragmentation",
                dur(r.kernels.p50_ns),
                r.sm_fill_pct.map(super::text::pct_str).unwrap_or_else(|| "?".into())
            ));
            x.overlaps = vec![
                "small_grid".into(),
                "launch_bound".into(),
                "kernel_fragmentation".into(),
            ];
            x.metrics.insert("peak_bytes".into(), m.peak_bytes as f64);
            x.metrics
                .insert("capacity_bytes".into(), m.capacity_bytes as f64);
            x.metrics.insert("peak_pct".into(), used);
            x.fix = "Increase the batch size until device memory is ~80-90% used (scale the learning rate with it); if the optimiser needs the small batch, keep it as the effective batch but run fewer, larger steps per launch (CUDA graphs, torch.compile) rather than gradient accumulation, which keeps every kernel small.".into();
            out.push(x);
        }
    }

    // comm_exposed
    let cm = &f.comm;
    if cm.kernels > 0 {
        let ns = cm.exposed_ns;
        if pct(ns, wall) >= REPORT_PCT {
            let mut x = c.finding(
                "comm_exposed",
                "Collective time not hidden behind compute",
                ns,
                false,
            );
            x.summary = format!(
                "NCCL kernels ran with no compute kernel alongside for {} of the steady state.",
                share(ns, wall)
            );
            x.evidence.push(format!(
                "{} NCCL kernels, {} of communication, {} of it ({:.0}%) exposed",
                cm.kernels,
                dur(cm.comm_ns),
                dur(ns),
                pct(ns, cm.comm_ns)
            ));
            let names: Vec<String> = cm
                .names
                .iter()
                .take(3)
                .map(|(n, cnt, t)| {
                    format!(
                        "{} x{} ({})",
                        trunc(&demangle(f.ctx.t.str(*n)), 60),
                        cnt,
                        dur(*t)
                    )
                })
                .collect();
            x.evidence.push(format!("by kernel: {}", names.join("; ")));
            x.examples = cm
                .examples
                .iter()
                .map(|&(s, d, n)| Example {
                    at_ns: c.rel(s),
                    dur_ns: d,
                    what: trunc(&demangle(f.ctx.t.str(n)), 60),
                })
                .collect();
            x.metrics.insert("comm_ns".into(), cm.comm_ns as f64);
            x.metrics.insert("exposed_ns".into(), ns as f64);
            x.fix = "Overlap communication with compute: let DDP all-reduce gradient buckets during backward (tune bucket_cap_mb, gradient_as_bucket_view=True) instead of one all_reduce after it; accumulate gradients over N micro-batches under model.no_sync() to communicate less often; check NCCL settings (NCCL_ALGO, NCCL_PROTO, NCCL_MIN_NCHANNELS; NCCL_DEBUG=INFO shows the transport) and the topology (nvidia-smi topo -m).".into();
            out.push(x);
        }
    }

    env(&c, r, &mut out);
    out
}

/// Environment findings: what the trace itself says about its own coverage.
fn env(c: &Ctx2, r: &ProcessReport, out: &mut Vec<Finding>) {
    let f = c.f;
    let t = f.ctx.t;
    let wall = f.wall.max(1);
    let (s0, s1) = f.steps.steady;
    let blind: u64 = f
        .ctx
        .blind
        .iter()
        .map(|b| super::intervals::clip_len(b.0, b.1, s0, s1))
        .sum();
    let blind_all: u64 = f.ctx.blind.iter().map(|b| b.1.saturating_sub(b.0)).sum();
    if !f.ctx.blind.is_empty() {
        let mut x = c.finding(
            "env_blind_window",
            "The collector was blind part of the time",
            blind,
            false,
        );
        x.severity = if pct(blind, wall) >= 20.0 {
            Severity::Warn
        } else {
            Severity::Info
        };
        x.summary = format!(
            "GPU activity was not recorded for {} ({} of it in the steady state), usually because another CUPTI user (torch.profiler, Nsight) took the subscriber.",
            dur(blind_all),
            dur(blind)
        );
        for b in f.ctx.blind.iter().take(3) {
            x.examples.push(Example {
                at_ns: c.rel(b.0),
                dur_ns: b.1.saturating_sub(b.0),
                what: if b.2.is_empty() {
                    "blind".into()
                } else {
                    b.2.clone()
                },
            });
        }
        x.evidence
            .push(format!("{} blind windows", f.ctx.blind.len()));
        x.fix = "Do not run torch.profiler or Nsight in the same process while tracing (CUDA < 13.3 allows one CUPTI subscriber), or trace a window outside the profiled steps.".into();
        out.push(x);
    }
    let dropped: u64 = t.drops.iter().map(|d| d.2).sum();
    if dropped > 0 {
        let recorded = if t.stats.events > 0 {
            t.stats.events
        } else {
            (t.kernels.len()
                + t.memcpys.len()
                + t.memsets.len()
                + t.apis.len()
                + t.syncs.len()
                + t.memory.len()) as u64
        };
        let total = recorded.max(1) + dropped;
        let share_ = 100.0 * dropped as f64 / total as f64;
        let mut x = c.finding("env_dropped_records", "Records were dropped", 0, false);
        x.severity = if share_ >= 5.0 {
            Severity::Warn
        } else {
            Severity::Info
        };
        x.summary = format!(
            "{} records were lost ({:.1}% of all): {} by CUPTI, {} to ring overflow, {} to buffer-pool exhaustion; numbers above undercount by about that much.",
            dropped,
            share_,
            t.dropped(gputrace_format::DROP_CUPTI),
            t.dropped(gputrace_format::DROP_RING),
            t.dropped(gputrace_format::DROP_BUFFER_POOL)
        );
        x.metrics.insert("dropped".into(), dropped as f64);
        x.metrics.insert("dropped_pct".into(), share_);
        x.fix = "Give the collector more buffer space (GPUTRACE_* buffer settings) or trace a shorter window.".into();
        out.push(x);
    }
    if !f.ctx.has_api() && !f.ctx.devices.is_empty() {
        let mut x = c.finding("env_no_host_api", "No host API events", 0, false);
        x.severity = Severity::Info;
        x.summary = "The trace has GPU records but no host API callbacks (another profiler may hold the CUPTI subscriber, or callbacks were off): idle causes are GPU-only heuristics.".into();
        x.fix = "Trace without another profiler attached to get host-side causes.".into();
        out.push(x);
    }
    if let Some(w) = t.stats.warning() {
        let mut x = c.finding("env_trace_damaged", "The trace file is damaged", 0, false);
        x.severity = Severity::Info;
        x.summary = format!("{w}; the report covers what was read.");
        x.fix = "Let the traced process exit normally (or stop tracing) so the collector can flush its last chunk.".into();
        out.push(x);
    }
    if f.ctx.bad_records > 0 {
        let mut x = c.finding(
            "env_bad_records",
            "Records with impossible timestamps",
            0,
            false,
        );
        x.severity = Severity::Info;
        x.summary = format!(
            "{} records had an end before their start or times far outside the trace; they were clipped or ignored.",
            f.ctx.bad_records
        );
        x.metrics.insert("records".into(), f.ctx.bad_records as f64);
        x.fix =
            "Usually a driver or CUPTI timestamp glitch; if frequent, report it with the trace."
                .into();
        out.push(x);
    }
    let _ = r;
}

/// The comm_straggler finding from the cluster analysis.
pub(crate) fn straggler(c: &ClusterComm, procs: &[ProcessReport]) -> Option<Finding> {
    let s = c.straggler?;
    let n = procs.len();
    let others: Vec<&ProcessReport> = procs.iter().filter(|p| p.index != s).collect();
    let wall =
        others.iter().map(|p| p.breakdown.wall_ns).sum::<u64>() / (others.len().max(1) as u64);
    let ns = c.others_wait_ns;
    let p = pct(ns, wall);
    let label = procs[s].label.clone();
    let mut sev = severity_for(p, ns);
    if c.straggler_last_pct < 50.0 && sev > Severity::Warn {
        sev = Severity::Warn;
    }
    let worst = c
        .ranks
        .iter()
        .filter(|r| r.process != s)
        .max_by(|a, b| a.wait_ns.cmp(&b.wait_ns).then(b.process.cmp(&a.process)));
    let mut evidence = vec![format!(
        "{} arrived last at {:.0}% of {} matched collectives ({} ranks)",
        label, c.straggler_last_pct, c.matched, n
    )];
    if let Some(w) = worst {
        evidence.push(format!(
            "the other ranks waited {} each on average for it (most: {} waited {} in all collectives)",
            dur(ns),
            procs[w.process].label,
            dur(w.wait_ns)
        ));
    }
    evidence.push(format!(
        "clocks aligned by {}; collective end times agree within {} (median)",
        c.alignment.replace('_', " "),
        dur(c.residual_ns)
    ));
    if c.unmatched > 0 {
        evidence.push(format!(
            "{} collectives of the first rank had no counterpart on every rank and were left out",
            c.unmatched
        ));
    }
    let mut metrics = BTreeMap::new();
    metrics.insert("straggler_last_pct".into(), c.straggler_last_pct);
    metrics.insert("matched_collectives".into(), c.matched as f64);
    metrics.insert("others_wait_ns".into(), ns as f64);
    Some(Finding {
        id: "comm_straggler".into(),
        severity: sev,
        process: Some(s),
        rank: label.clone(),
        title: "A rank arrives late at collectives".into(),
        at_stake_ns: ns,
        at_stake_pct: p,
        estimated: false,
        summary: format!(
            "{label} reached collectives last; every other rank's NCCL kernels spun waiting for it, {} of their steady state.",
            share(ns, wall)
        ),
        evidence,
        examples: c
            .examples
            .iter()
            .map(|&(st, w)| Example {
                at_ns: st.saturating_sub(procs[s].trace_start_ns),
                dur_ns: w,
                what: format!("others waited {} for {label}", dur(w)),
            })
            .collect(),
        metrics,
        fix: format!(
            "Find what makes {label} slow before each collective: its input pipeline (num_workers, storage), uneven batch or sequence sizes across ranks (DistributedSampler, length bucketing), extra host work only it does (logging, evaluation, checkpointing on rank 0), or a throttled or shared GPU; gradient accumulation with no_sync() makes ranks meet less often."
        ),
        overlaps: Vec::new(),
        subcause: None,
    })
}

/// Moves the time each waiting rank spent waiting for the straggler out of its
/// comm_exposed finding (it is counted under comm_straggler) and says so.
pub(crate) fn annotate_comm(c: &ClusterComm, procs: &[ProcessReport], all: &mut Vec<Finding>) {
    let Some(s) = c.straggler else { return };
    for f in all.iter_mut().filter(|f| f.id == "comm_exposed") {
        let Some(p) = f.process else { continue };
        if p == s {
            continue;
        }
        let Some(r) = c.ranks.iter().find(|r| r.process == p) else {
            continue;
        };
        let wall = procs[p].breakdown.wall_ns;
        let moved = r.wait_ns.min(f.at_stake_ns);
        f.at_stake_ns -= moved;
        f.at_stake_pct = pct(f.at_stake_ns, wall);
        f.severity = severity_for(f.at_stake_pct, f.at_stake_ns);
        f.evidence.push(format!(
            "{} of it was waiting for {} to arrive: counted under comm_straggler, not here",
            dur(moved),
            procs[s].label
        ));
        f.metrics.insert("straggler_wait_ns".into(), moved as f64);
    }
    all.retain(|f| f.id != "comm_exposed" || f.at_stake_pct >= REPORT_PCT);
}

/// Ranks findings by GPU time at stake. A finding that overlaps others (memory_headroom,
/// comm_straggler) is ranked right after the largest of the findings it overlaps.
pub(crate) fn rank(all: &mut [Finding]) {
    let key: Vec<(u64, u8)> = all
        .iter()
        .map(|f| {
            if f.overlaps.is_empty() {
                return (f.at_stake_ns, 1);
            }
            let under = all
                .iter()
                .filter(|g| g.process == f.process && f.overlaps.contains(&g.id))
                .map(|g| g.at_stake_ns)
                .max();
            match under {
                Some(u) => (u.min(f.at_stake_ns), 0),
                None => (f.at_stake_ns, 1),
            }
        })
        .collect();
    let mut idx: Vec<usize> = (0..all.len()).collect();
    idx.sort_by(|&a, &b| {
        key[b]
            .cmp(&key[a])
            .then(all[b].severity.cmp(&all[a].severity))
            .then(all[a].id.cmp(&all[b].id))
            .then(all[a].process.cmp(&all[b].process))
    });
    let sorted: Vec<Finding> = idx.iter().map(|&i| all[i].clone()).collect();
    all.clone_from_slice(&sorted);
}

/// Findings whose time is GPU idle time.
fn is_idle_cause(id: &str) -> bool {
    matches!(
        id,
        "data_starvation"
            | "cpu_bound"
            | "pageable_memcpy"
            | "sync_memcpy"
            | "implicit_sync"
            | "launch_bound"
            | "kernel_fragmentation"
            | "comm_straggler"
            | "comm_exposed"
    )
}

/// The one-line verdict and the id it names.
pub(crate) fn verdict(procs: &[ProcessReport], all: &[Finding]) -> (String, Option<String>) {
    let with_gpu: Vec<&ProcessReport> = procs.iter().filter(|p| !p.devices.is_empty()).collect();
    if with_gpu.is_empty() {
        return ("No GPU activity recorded".into(), None);
    }
    let (idle, busy) = {
        let w: u64 = with_gpu.iter().map(|p| p.breakdown.wall_ns).sum();
        let i: u64 = with_gpu.iter().map(|p| p.breakdown.idle_ns).sum();
        let b: u64 = with_gpu.iter().map(|p| p.breakdown.busy_ns).sum();
        (pct(i, w), pct(b, w))
    };
    let scope = if with_gpu.len() == 1 {
        let p = with_gpu[0];
        if p.steps.count > 0 {
            format!(
                "steady state ({} steps, {})",
                p.steps.count,
                dur(p.steady.wall_ns)
            )
        } else {
            format!("steady state ({})", dur(p.steady.wall_ns))
        }
    } else {
        let worst = with_gpu
            .iter()
            .max_by(|a, b| a.breakdown.idle_pct.total_cmp(&b.breakdown.idle_pct))
            .unwrap();
        format!(
            "steady state across {} processes (worst: {}, {:.0}% idle)",
            with_gpu.len(),
            worst.label,
            worst.breakdown.idle_pct
        )
    };
    let top = all.iter().find(|f| f.severity >= Severity::Warn);
    match top {
        None => (
            format!("Healthy: GPU busy {busy:.0}% of {scope}; no warn-level finding"),
            None,
        ),
        Some(f) => {
            let who = if procs.len() > 1 {
                format!(" on {}", f.rank)
            } else {
                String::new()
            };
            let est = if f.estimated { ", estimated" } else { "" };
            // The idle form only when the time at stake is idle time (a pageable copy's
            // excess, for one, is busy copy-engine time).
            let line = if is_idle_cause(&f.id) && f.at_stake_pct <= idle + 0.5 {
                format!(
                    "GPU idle {idle:.0}% of {scope}; biggest cause: {}{who} ({:.0}% of wall time, {}{est})",
                    f.id,
                    f.at_stake_pct,
                    dur(f.at_stake_ns)
                )
            } else {
                format!(
                    "GPU busy {busy:.0}% of {scope}, but the top finding is {}{who}: {} ({:.0}% of wall time, {}{est})",
                    f.id,
                    lower_first(&f.title),
                    f.at_stake_pct,
                    dur(f.at_stake_ns)
                )
            };
            (line, Some(f.id.clone()))
        }
    }
}

fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}
