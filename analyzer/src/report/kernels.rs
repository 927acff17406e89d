//! Kernel-level facts: duration distribution, how full each grid keeps the GPU, device
//! memory in use.

use super::ctx::Ctx;
use super::keymap::NameMap;
use gputrace_format::{self as fmt, MemKind};
use hdrhistogram::Histogram;
use std::collections::HashMap;

/// Kernels shorter than this are "tiny".
pub const TINY_NS: u64 = 10_000;
/// A grid filling less than a quarter of the GPU's resident-block slots, with fewer blocks
/// than SMs, is small.
pub const SMALL_FILL: f64 = 0.25;

/// Resident blocks per SM for a kernel, from the occupancy limits the device reports:
/// blocks per SM, warps per SM, registers per SM (allocated per warp in units of 256),
/// shared memory per SM (static + dynamic, plus the 1 KiB the driver reserves per block
/// from compute capability 8.0 on). None when the device record is missing.
pub fn resident_blocks_per_sm(dev: &fmt::Device, k: &fmt::Kernel) -> Option<u32> {
    if dev.sm_count == 0 {
        return None;
    }
    let threads = (k.block[0] as u64)
        .saturating_mul(k.block[1].max(1) as u64)
        .saturating_mul(k.block[2].max(1) as u64)
        .max(1);
    let warps = threads.div_ceil(32).max(1);
    let mut limit = u64::MAX;
    if dev.max_blocks_per_sm > 0 {
        limit = limit.min(dev.max_blocks_per_sm as u64);
    }
    if dev.max_warps_per_sm > 0 {
        limit = limit.min(dev.max_warps_per_sm as u64 / warps);
    } else if dev.max_threads_per_sm > 0 {
        limit = limit.min(dev.max_threads_per_sm as u64 / threads);
    }
    if dev.max_regs_per_sm > 0 && k.registers > 0 {
        let per_warp = (k.registers as u64 * 32).div_ceil(256) * 256;
        let warps_by_regs = dev.max_regs_per_sm as u64 / per_warp;
        limit = limit.min(warps_by_regs / warps);
    }
    let smem = k.static_smem as u64 + k.dynamic_smem as u64;
    if dev.max_smem_per_sm > 0 && smem > 0 {
        let reserve = if dev.cc_major >= 8 { 1024 } else { 0 };
        limit = limit.min(dev.max_smem_per_sm as u64 / (smem + reserve));
    }
    if limit == u64::MAX {
        return None;
    }
    Some(limit.clamp(1, u32::MAX as u64) as u32)
}

pub fn blocks(k: &fmt::Kernel) -> u64 {
    (k.grid[0] as u64)
        .saturating_mul(k.grid[1].max(1) as u64)
        .saturating_mul(k.grid[2].max(1) as u64)
}

/// Share of the GPU's resident-block slots the grid fills at once (0..=1).
pub fn fill(dev: &fmt::Device, k: &fmt::Kernel) -> Option<(f64, u32)> {
    let r = resident_blocks_per_sm(dev, k)?;
    let slots = dev.sm_count as f64 * r as f64;
    Some(((blocks(k) as f64 / slots).min(1.0), r))
}

/// What decides a kernel's occupancy: device, grid, block, registers, shared memory.
pub type ShapeKey = (u32, [u32; 3], [u32; 3], u32, u32, u32);

/// A shape, its fill and resident blocks per SM (if the device is known), and the SMs.
pub type ShapeFill = (ShapeKey, Option<(f64, u32)>, u64);

#[derive(Clone, Debug, Default)]
pub struct NameAgg {
    /// The last shape seen and its fill (kernels of one name mostly share a shape).
    pub shape: Option<ShapeFill>,
    pub name: u32,
    pub count: u64,
    pub total_ns: u64,
    pub tiny: u64,
    pub comm: bool,
    /// Sum of duration x fill, over kernels with a known fill.
    pub fill_ns: f64,
    pub fill_known_ns: u64,
    /// Sum of duration x (1 - fill) over kernels that fill less than SMALL_FILL.
    pub empty_ns: f64,
    pub small_count: u64,
    pub blocks_min: u64,
    pub blocks_max: u64,
    pub resident: u32,
    pub threads: u64,
    pub first_start: u64,
    pub longest: (u64, u64),
}

pub struct KernelStats {
    pub count: u64,
    pub total_ns: u64,
    pub comm_ns: u64,
    pub hist: Histogram<u64>,
    pub tiny_count: u64,
    pub tiny_ns: u64,
    /// By total time, descending.
    pub by_name: Vec<NameAgg>,
    pub fill_ns: f64,
    pub fill_known_ns: u64,
    pub small_grid_ns: f64,
    /// Time with any kernel running, summed over devices (what nvidia-smi samples).
    pub util_ns: u64,
    /// Devices with kernels in the window.
    pub active_devices: u32,
    pub no_device_info: bool,
}

/// Kernel statistics in the window; `util_ns` is the time with any kernel running
/// (measured by the idle pass).
pub fn stats(ctx: &Ctx, window: (u64, u64), util_ns: u64) -> KernelStats {
    let (w0, w1) = window;
    let mut hist =
        Histogram::<u64>::new_with_bounds(1, 1 << 42, 2).expect("valid histogram bounds");
    let mut by: NameMap<NameAgg> = NameMap::new(ctx.t.strings.len());
    let mut s = KernelStats {
        count: 0,
        total_ns: 0,
        comm_ns: 0,
        hist: Histogram::new(2).expect("valid histogram"),
        tiny_count: 0,
        tiny_ns: 0,
        by_name: Vec::new(),
        fill_ns: 0.0,
        fill_known_ns: 0,
        small_grid_ns: 0.0,
        util_ns: 0,
        active_devices: 0,
        no_device_info: false,
    };
    let devinfo: HashMap<u32, &fmt::Device> = ctx.t.devices.iter().map(|d| (d.id, d)).collect();
    // Kernels of one name mostly share a shape: remember the last occupancy computed.
    let mut last_dev: Option<(u32, bool)> = None;
    let first = ctx.t.kernels.first_starting_at(w0);
    for k in ctx.t.kernels.iter_from(first) {
        if k.start >= w1 {
            break;
        }
        let Some((ks, ke)) = ctx.sane(k.start, k.end) else {
            continue;
        };
        let known = match last_dev {
            Some((d, known)) if d == k.device => known,
            _ => {
                let known = ctx.devices.contains(&k.device);
                last_dev = Some((k.device, known));
                known
            }
        };
        if !known {
            continue;
        }
        let d = ke - ks;
        s.count += 1;
        s.total_ns += d;
        hist.saturating_record(d.max(1));
        let comm = ctx.is_comm(&k);
        if comm {
            s.comm_ns += d;
        }
        let a = by.entry(k.name, || NameAgg {
            name: k.name,
            comm,
            blocks_min: u64::MAX,
            first_start: ks,
            ..Default::default()
        });
        a.count += 1;
        a.total_ns += d;
        if d < TINY_NS {
            a.tiny += 1;
            s.tiny_count += 1;
            s.tiny_ns += d;
        }
        if d > a.longest.1 {
            a.longest = (ks, d);
        }
        let b = blocks(&k);
        a.blocks_min = a.blocks_min.min(b);
        a.blocks_max = a.blocks_max.max(b);
        a.threads = (k.block[0] as u64)
            .saturating_mul(k.block[1].max(1) as u64)
            .saturating_mul(k.block[2].max(1) as u64);
        let key: ShapeKey = (
            k.device,
            k.grid,
            k.block,
            k.registers,
            k.static_smem,
            k.dynamic_smem,
        );
        let (f, sms) = match &a.shape {
            Some((kk, f, sms)) if *kk == key => (*f, *sms),
            _ => {
                let dev = devinfo.get(&k.device);
                let f = dev.and_then(|dev| fill(dev, &k));
                let sms = dev.map_or(0, |d| d.sm_count as u64);
                a.shape = Some((key, f, sms));
                (f, sms)
            }
        };
        match f {
            Some((f, r)) => {
                a.resident = r;
                a.fill_ns += d as f64 * f;
                a.fill_known_ns += d;
                s.fill_ns += d as f64 * f;
                s.fill_known_ns += d;
                // Small: under a quarter of the slots, and some SMs get no block at all.
                if f < SMALL_FILL && b < sms && !comm {
                    a.empty_ns += d as f64 * (1.0 - f);
                    a.small_count += 1;
                    s.small_grid_ns += d as f64 * (1.0 - f);
                }
            }
            None => s.no_device_info = true,
        }
    }
    s.hist = hist;
    s.util_ns = util_ns;
    // Concurrent small kernels fill each other's empty SMs: never claim more empty time
    // than the time kernels ran.
    s.small_grid_ns = s.small_grid_ns.min(s.util_ns as f64);
    let mut v: Vec<NameAgg> = by.into_pairs().map(|(_, a)| a).collect();
    v.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.name.cmp(&b.name)));
    s.by_name = v;
    s
}

#[derive(Clone, Debug)]
pub struct MemoryUse {
    pub device: u32,
    pub peak_bytes: u64,
    /// Peak over the whole trace.
    pub peak_all_bytes: u64,
    pub capacity_bytes: u64,
    /// The trace freed memory it never saw allocated: the level is a lower bound.
    pub lower_bound: bool,
    pub events: u64,
}

/// Device memory in use from allocation and free records, peak inside the window.
pub fn memory(ctx: &Ctx, window: (u64, u64)) -> Vec<MemoryUse> {
    let (w0, w1) = window;
    let mut out = Vec::new();
    for &dev in &ctx.devices {
        let mut level: i128 = 0;
        let mut peak_in: i128 = 0;
        let mut peak_all: i128 = 0;
        let mut lower = false;
        let mut events = 0;
        let mut entered = false;
        for m in &ctx.t.memory {
            if m.device != dev {
                continue;
            }
            let kind = MemKind::from_u8(m.mem_kind);
            if !matches!(kind, MemKind::Device | MemKind::Unknown | MemKind::Managed) {
                continue;
            }
            if ctx.sane(m.ts, m.ts).is_none() {
                continue;
            }
            if m.ts >= w0 && !entered {
                entered = true;
                peak_in = peak_in.max(level);
            }
            if m.ts > w1 {
                break;
            }
            events += 1;
            match m.op {
                fmt::MEMORY_OP_ALLOC => level += m.bytes as i128,
                fmt::MEMORY_OP_FREE => level -= m.bytes as i128,
                _ => {}
            }
            if level < 0 {
                lower = true;
                level = 0;
            }
            peak_all = peak_all.max(level);
            if m.ts >= w0 {
                peak_in = peak_in.max(level);
            }
        }
        if !entered {
            peak_in = peak_in.max(level);
        }
        if events == 0 {
            continue;
        }
        out.push(MemoryUse {
            device: dev,
            peak_bytes: peak_in.clamp(0, u64::MAX as i128) as u64,
            peak_all_bytes: peak_all.clamp(0, u64::MAX as i128) as u64,
            capacity_bytes: ctx.device_info(dev).map(|d| d.global_memory).unwrap_or(0),
            lower_bound: lower,
            events,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h200() -> fmt::Device {
        fmt::Device {
            id: 0,
            sm_count: 132,
            max_blocks_per_sm: 32,
            max_threads_per_sm: 2048,
            max_warps_per_sm: 64,
            global_memory: 141 << 30,
            cc_major: 9,
            max_regs_per_sm: 65536,
            max_smem_per_sm: 233472,
            ..Default::default()
        }
    }

    fn kern(grid: u32, block: u32, regs: u32, smem: u32) -> fmt::Kernel {
        fmt::Kernel {
            grid: [grid, 1, 1],
            block: [block, 1, 1],
            registers: regs,
            dynamic_smem: smem,
            ..Default::default()
        }
    }

    #[test]
    fn occupancy_limits() {
        let d = h200();
        // 256 threads, few registers: warps limit 64 / 8 = 8 blocks.
        assert_eq!(resident_blocks_per_sm(&d, &kern(1, 256, 16, 0)), Some(8));
        // 128 registers per thread: 128*32 = 4096 per warp, 16 warps by registers, 2 blocks.
        assert_eq!(resident_blocks_per_sm(&d, &kern(1, 256, 128, 0)), Some(2));
        // 226 KiB of shared memory: one block.
        assert_eq!(
            resident_blocks_per_sm(&d, &kern(1, 384, 168, 231424)),
            Some(1)
        );
        // 32 threads: block limit 32.
        assert_eq!(resident_blocks_per_sm(&d, &kern(1, 32, 8, 0)), Some(32));
        let (f, _) = fill(&d, &kern(8, 256, 16, 0)).unwrap();
        assert!((f - 8.0 / (132.0 * 8.0)).abs() < 1e-9);
        let (f, _) = fill(&d, &kern(100_000, 256, 16, 0)).unwrap();
        assert_eq!(f, 1.0);
        assert!(fill(&fmt::Device::default(), &kern(1, 1, 1, 1)).is_none());
    }
}
