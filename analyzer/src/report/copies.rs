//! Host<->device copies: how much, from which kind of host memory, how fast, and how
//! much of it ran with no kernel alongside.

use super::classify;
use super::ctx::Ctx;
use gputrace_format::{self as fmt, CopyKind, MemKind};
use std::collections::BTreeMap;

/// What pinned, asynchronous copies typically reach over PCIe 5 x16 on an H200, used
/// when the trace has no large pinned copy of its own to compare with (an estimate).
pub const TYPICAL_PINNED_GBPS: f64 = 50.0;
/// Copies smaller than this are dominated by latency and say nothing about bandwidth.
const BW_MIN_BYTES: u64 = 1 << 20;

#[derive(Clone, Debug, Default)]
pub struct CopyGroup {
    pub host_memory: &'static str,
    pub direction: &'static str,
    pub is_async: bool,
    pub count: u64,
    pub bytes: u64,
    pub time_ns: u64,
    /// Time not overlapped by any kernel on the same device.
    pub exposed_ns: u64,
    /// Bytes and time of copies of at least 1 MiB (for bandwidth).
    pub big_bytes: u64,
    pub big_ns: u64,
    /// Longest copies: (start, duration, bytes).
    pub examples: Vec<(u64, u64, u64)>,
}

impl CopyGroup {
    pub fn gbps(&self) -> Option<f64> {
        let (b, t) = if self.big_ns > 0 {
            (self.big_bytes, self.big_ns)
        } else {
            (self.bytes, self.time_ns)
        };
        (t > 0).then(|| b as f64 / t as f64)
    }
}

/// Reference bandwidth for one direction.
#[derive(Clone, Copy, Debug)]
pub struct RefBw {
    pub gbps: f64,
    /// Measured from the trace's own pinned copies (else the typical figure).
    pub measured: bool,
}

#[derive(Clone, Debug, Default)]
pub struct CopyStats {
    pub groups: Vec<CopyGroup>,
    /// Pageable copies in the window.
    pub pageable: CopyGroup,
    /// Extra time pageable copies took beyond the reference rate, exposed part only.
    pub pageable_excess_ns: u64,
    pub pageable_ref: Option<RefBw>,
    /// Copies from pinned memory made with a blocking call.
    pub sync_pinned: CopyGroup,
    /// API names of those blocking calls with counts.
    pub sync_calls: BTreeMap<String, u64>,
}

fn is_host_dir(ck: CopyKind) -> bool {
    matches!(
        ck,
        CopyKind::HtoD | CopyKind::DtoH | CopyKind::HtoA | CopyKind::AtoH
    )
}

/// Pinned-copy bandwidth per direction, from the whole trace.
fn reference(ctx: &Ctx, dir: CopyKind) -> RefBw {
    let (mut b, mut t) = (0u64, 0u64);
    for m in &ctx.t.memcpys {
        if CopyKind::from_u8(m.copy_kind) == dir
            && classify::host_mem_kind(m) == MemKind::Pinned
            && m.bytes >= BW_MIN_BYTES
        {
            if let Some((s, e)) = ctx.sane(m.start, m.end) {
                b = b.saturating_add(m.bytes);
                t += e - s;
            }
        }
    }
    if t > 0 && b > 0 {
        RefBw {
            gbps: b as f64 / t as f64,
            measured: true,
        }
    } else {
        RefBw {
            gbps: TYPICAL_PINNED_GBPS,
            measured: false,
        }
    }
}

fn add(g: &mut CopyGroup, m: &fmt::Memcpy, s: u64, e: u64, exposed: u64) {
    g.count += 1;
    g.bytes = g.bytes.saturating_add(m.bytes);
    g.time_ns += e - s;
    g.exposed_ns += exposed;
    if m.bytes >= BW_MIN_BYTES {
        g.big_bytes = g.big_bytes.saturating_add(m.bytes);
        g.big_ns += e - s;
    }
    let d = e - s;
    if g.examples.len() < 3 || g.examples.iter().any(|x| x.1 < d) {
        g.examples.push((s, d, m.bytes));
        g.examples.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        g.examples.truncate(3);
    }
}

/// Copy statistics in the window; `exposure` holds (memcpy index, time with no kernel
/// alongside) sorted by index, as measured by the idle pass.
pub fn stats(ctx: &Ctx, window: (u64, u64), exposure: &[(u32, u64)]) -> CopyStats {
    let (w0, w1) = window;
    let t = ctx.t;
    let mut out = CopyStats::default();
    let mut groups: BTreeMap<(&'static str, &'static str, bool), CopyGroup> = BTreeMap::new();
    let mut pageable_ref: BTreeMap<u8, RefBw> = BTreeMap::new();
    let mut excess = 0f64;
    let mut xi = 0usize;
    {
        let first = t.memcpys.partition_point(|m| m.start < w0);
        for (i, m) in t.memcpys.iter().enumerate().skip(first) {
            if m.start >= w1 {
                break;
            }
            if !ctx.devices.contains(&m.device) {
                continue;
            }
            let Some((s, e)) = ctx.sane(m.start, m.end) else {
                continue;
            };
            while xi < exposure.len() && (exposure[xi].0 as usize) < i {
                xi += 1;
            }
            let exposed = match exposure.get(xi) {
                Some(&(j, x)) if j as usize == i => x,
                _ => e - s,
            };
            let hm = classify::host_memory(m);
            let dir = classify::direction(m);
            let is_async = m.flags & fmt::MEMCPY_FLAG_ASYNC != 0;
            add(
                groups
                    .entry((hm, dir, is_async))
                    .or_insert_with(|| CopyGroup {
                        host_memory: hm,
                        direction: dir,
                        is_async,
                        ..Default::default()
                    }),
                m,
                s,
                e,
                exposed,
            );
            let ck = CopyKind::from_u8(m.copy_kind);
            if hm == "pageable" && is_host_dir(ck) {
                add(&mut out.pageable, m, s, e, exposed);
                let r = *pageable_ref
                    .entry(m.copy_kind)
                    .or_insert_with(|| reference(ctx, ck));
                let ideal = m.bytes as f64 / r.gbps;
                let d = (e - s) as f64;
                if d > ideal && d > 0.0 {
                    excess += exposed as f64 * (1.0 - ideal / d);
                }
            }
        }
    }
    out.pageable.host_memory = "pageable";
    out.pageable_excess_ns = excess as u64;
    // One reference for the text: the direction with the most pageable bytes.
    out.pageable_ref = pageable_ref
        .iter()
        .max_by_key(|(k, _)| {
            groups
                .values()
                .filter(|g| {
                    g.host_memory == "pageable" && g.direction == CopyKind::from_u8(**k).name()
                })
                .map(|g| g.bytes)
                .sum::<u64>()
        })
        .map(|(_, r)| *r);
    out.groups = groups.into_values().collect();
    out.groups.sort_by_key(|g| std::cmp::Reverse(g.time_ns));

    // Blocking copies from pinned memory.
    out.sync_pinned.host_memory = "pinned";
    for &ai in &ctx.blocking_copies {
        let a = t.apis.at(ai as usize);
        if a.start < w0 || a.start >= w1 {
            continue;
        }
        let Some(mi) = ctx.memcpy_by_corr.get(a.corr) else {
            continue;
        };
        let m = &t.memcpys[mi];
        if classify::host_mem_kind(m) != MemKind::Pinned {
            continue;
        }
        if let Some((s, e)) = ctx.sane(m.start, m.end) {
            add(&mut out.sync_pinned, m, s, e, 0);
            *out.sync_calls.entry(t.str(a.name).to_string()).or_default() += 1;
        }
    }
    out
}
