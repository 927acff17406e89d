//! Turning CUPTI activity records into trace events, on the writer thread.
//!
//! Records are read through a table of field offsets chosen once per CUPTI major
//! version, not through one struct type: CUPTI 12.x and 13.x return different struct
//! versions for the same kind. Only fields present in every supported version are read,
//! and each read is bounds-checked against the size of that version's record.

use crate::intern::Interner;
use cupti_sys as sys;
use gputrace_format::{self as fmt, Event};
use std::mem::offset_of;

/// Field offsets of the records we read, for one CUPTI major version.
#[derive(Debug)]
pub struct Layout {
    pub major: u32,
    pub kernel_size: usize,
    pub k_start: usize,
    pub k_end: usize,
    pub k_device: usize,
    pub k_stream: usize,
    pub k_corr: usize,
    pub k_grid: [usize; 3],
    pub k_block: [usize; 3],
    pub k_static_smem: usize,
    pub k_dynamic_smem: usize,
    pub k_registers: usize,
    pub k_name: usize,
    pub k_graph_id: usize,
    pub memcpy_size: usize,
    pub c_copy_kind: usize,
    pub c_src_kind: usize,
    pub c_dst_kind: usize,
    pub c_flags: usize,
    pub c_bytes: usize,
    pub c_start: usize,
    pub c_end: usize,
    pub c_device: usize,
    pub c_stream: usize,
    pub c_corr: usize,
    pub memset_size: usize,
    pub s_value: usize,
    pub s_bytes: usize,
    pub s_start: usize,
    pub s_end: usize,
    pub s_device: usize,
    pub s_stream: usize,
    pub s_corr: usize,
    pub s_flags: usize,
    pub s_mem_kind: usize,
    pub sync_size: usize,
    pub y_type: usize,
    pub y_start: usize,
    pub y_end: usize,
    pub y_corr: usize,
    pub y_stream: usize,
    pub device_size: usize,
    pub d_global_mem: usize,
    pub d_id: usize,
    pub d_max_blocks_per_sm: usize,
    pub d_threads_per_warp: usize,
    pub d_max_warps_per_sm: usize,
    pub d_max_regs_per_sm: usize,
    pub d_max_smem_per_sm: usize,
    pub d_sm_count: usize,
    pub d_name: usize,
    pub d_cc_major: usize,
    pub d_cc_minor: usize,
    pub memory_size: usize,
    pub m_op: usize,
    pub m_kind: usize,
    pub m_address: usize,
    pub m_bytes: usize,
    pub m_ts: usize,
    pub m_device: usize,
    pub m_corr: usize,
}

macro_rules! layout_for {
    ($major:expr, $k:ty, $c:ty, $s:ty, $y:ty, $d:ty, $m:ty) => {
        Layout {
            major: $major,
            kernel_size: std::mem::size_of::<$k>(),
            k_start: offset_of!($k, start),
            k_end: offset_of!($k, end),
            k_device: offset_of!($k, deviceId),
            k_stream: offset_of!($k, streamId),
            k_corr: offset_of!($k, correlationId),
            k_grid: [
                offset_of!($k, gridX),
                offset_of!($k, gridY),
                offset_of!($k, gridZ),
            ],
            k_block: [
                offset_of!($k, blockX),
                offset_of!($k, blockY),
                offset_of!($k, blockZ),
            ],
            k_static_smem: offset_of!($k, staticSharedMemory),
            k_dynamic_smem: offset_of!($k, dynamicSharedMemory),
            k_registers: offset_of!($k, registersPerThread),
            k_name: offset_of!($k, name),
            k_graph_id: offset_of!($k, graphId),
            memcpy_size: std::mem::size_of::<$c>(),
            c_copy_kind: offset_of!($c, copyKind),
            c_src_kind: offset_of!($c, srcKind),
            c_dst_kind: offset_of!($c, dstKind),
            c_flags: offset_of!($c, flags),
            c_bytes: offset_of!($c, bytes),
            c_start: offset_of!($c, start),
            c_end: offset_of!($c, end),
            c_device: offset_of!($c, deviceId),
            c_stream: offset_of!($c, streamId),
            c_corr: offset_of!($c, correlationId),
            memset_size: std::mem::size_of::<$s>(),
            s_value: offset_of!($s, value),
            s_bytes: offset_of!($s, bytes),
            s_start: offset_of!($s, start),
            s_end: offset_of!($s, end),
            s_device: offset_of!($s, deviceId),
            s_stream: offset_of!($s, streamId),
            s_corr: offset_of!($s, correlationId),
            s_flags: offset_of!($s, flags),
            s_mem_kind: offset_of!($s, memoryKind),
            sync_size: std::mem::size_of::<$y>(),
            y_type: offset_of!($y, type_),
            y_start: offset_of!($y, start),
            y_end: offset_of!($y, end),
            y_corr: offset_of!($y, correlationId),
            y_stream: offset_of!($y, streamId),
            device_size: std::mem::size_of::<$d>(),
            d_global_mem: offset_of!($d, globalMemorySize),
            d_id: offset_of!($d, id),
            d_max_blocks_per_sm: offset_of!($d, maxBlocksPerMultiprocessor),
            d_threads_per_warp: offset_of!($d, numThreadsPerWarp),
            d_max_warps_per_sm: offset_of!($d, maxWarpsPerMultiprocessor),
            d_max_regs_per_sm: offset_of!($d, maxRegistersPerMultiprocessor),
            d_max_smem_per_sm: offset_of!($d, maxSharedMemoryPerMultiprocessor),
            d_sm_count: offset_of!($d, numMultiprocessors),
            d_name: offset_of!($d, name),
            d_cc_major: offset_of!($d, computeCapabilityMajor),
            d_cc_minor: offset_of!($d, computeCapabilityMinor),
            memory_size: std::mem::size_of::<$m>(),
            m_op: offset_of!($m, memoryOperationType),
            m_kind: offset_of!($m, memoryKind),
            m_address: offset_of!($m, address),
            m_bytes: offset_of!($m, bytes),
            m_ts: offset_of!($m, timestamp),
            m_device: offset_of!($m, deviceId),
            m_corr: offset_of!($m, correlationId),
        }
    };
}

/// The record structs CUPTI 13.x returns.
pub static LAYOUT_13: Layout = layout_13();

pub(crate) const fn layout_13() -> Layout {
    layout_for!(
        13,
        sys::CUpti_ActivityKernel10,
        sys::CUpti_ActivityMemcpy6,
        sys::CUpti_ActivityMemset4,
        sys::CUpti_ActivitySynchronization2,
        sys::CUpti_ActivityDevice5,
        sys::CUpti_ActivityMemory4
    )
}

/// The layout for a CUPTI major version, if supported.
pub fn layout_for_major(major: u32) -> Option<&'static Layout> {
    match major {
        13 => Some(&LAYOUT_13),
        12 => Some(&crate::records12::LAYOUT_12),
        _ => None,
    }
}

/// A view of one activity record.
struct Rec {
    p: *const u8,
    size: usize,
}

impl Rec {
    /// Reads a `T` at `off`, or zero when the field lies past the record's size.
    #[inline]
    fn get<T: Copy + Default>(&self, off: usize) -> T {
        if off + std::mem::size_of::<T>() > self.size {
            return T::default();
        }
        // SAFETY: CUPTI hands out records of at least `size` bytes (the struct size of
        // this version's record kind), and the read is within it.
        unsafe { (self.p.add(off) as *const T).read_unaligned() }
    }
}

/// Decodes the record at `p` (of activity kind `kind`) into an event.
///
/// # Safety
/// `p` must point to a CUPTI activity record of kind `kind` laid out as `l` describes.
#[allow(non_upper_case_globals)]
pub unsafe fn decode(
    l: &Layout,
    kind: u32,
    p: *const u8,
    names: &mut Interner,
    out: &mut Vec<Event>,
) -> bool {
    use sys::*;
    let r = |size| Rec { p, size };
    match kind {
        CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
        | CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_KERNEL => {
            let r = r(l.kernel_size);
            let name_ptr: usize = r.get(l.k_name);
            // SAFETY: CUPTI's record field is NULL or a NUL-terminated name.
            let name = unsafe { names.intern_cstr(name_ptr as *const libc::c_char, out) };
            out.push(Event::Kernel(fmt::Kernel {
                start: r.get(l.k_start),
                end: r.get(l.k_end),
                device: r.get(l.k_device),
                stream: r.get(l.k_stream),
                corr: r.get(l.k_corr),
                name,
                grid: [
                    r.get::<i32>(l.k_grid[0]) as u32,
                    r.get::<i32>(l.k_grid[1]) as u32,
                    r.get::<i32>(l.k_grid[2]) as u32,
                ],
                block: [
                    r.get::<i32>(l.k_block[0]) as u32,
                    r.get::<i32>(l.k_block[1]) as u32,
                    r.get::<i32>(l.k_block[2]) as u32,
                ],
                static_smem: r.get::<i32>(l.k_static_smem) as u32,
                dynamic_smem: r.get::<i32>(l.k_dynamic_smem) as u32,
                registers: r.get::<u16>(l.k_registers) as u32,
                graph_id: r.get(l.k_graph_id),
            }));
        }
        CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_MEMCPY => {
            let r = r(l.memcpy_size);
            let flags: u8 = r.get(l.c_flags);
            out.push(Event::Memcpy(fmt::Memcpy {
                start: r.get(l.c_start),
                end: r.get(l.c_end),
                device: r.get(l.c_device),
                stream: r.get(l.c_stream),
                corr: r.get(l.c_corr),
                bytes: r.get(l.c_bytes),
                copy_kind: r.get(l.c_copy_kind),
                src_kind: r.get(l.c_src_kind),
                dst_kind: r.get(l.c_dst_kind),
                // CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC is bit 0.
                flags: flags & fmt::MEMCPY_FLAG_ASYNC,
            }));
        }
        CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_MEMSET => {
            let r = r(l.memset_size);
            let flags: u16 = r.get(l.s_flags);
            out.push(Event::Memset(fmt::Memset {
                start: r.get(l.s_start),
                end: r.get(l.s_end),
                device: r.get(l.s_device),
                stream: r.get(l.s_stream),
                corr: r.get(l.s_corr),
                bytes: r.get(l.s_bytes),
                value: r.get(l.s_value),
                mem_kind: r.get::<u16>(l.s_mem_kind) as u8,
                flags: (flags & 1) as u8,
            }));
        }
        CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_SYNCHRONIZATION => {
            let r = r(l.sync_size);
            out.push(Event::Sync(fmt::Sync {
                start: r.get(l.y_start),
                end: r.get(l.y_end),
                device: u32::MAX,
                stream: r.get(l.y_stream),
                corr: r.get(l.y_corr),
                kind: r.get::<u32>(l.y_type) as u8,
            }));
        }
        CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_DEVICE => {
            let r = r(l.device_size);
            let name_ptr: usize = r.get(l.d_name);
            // SAFETY: CUPTI's record field is NULL or a NUL-terminated name.
            let name = unsafe { names.intern_cstr(name_ptr as *const libc::c_char, out) };
            out.push(Event::Device(fmt::Device {
                id: r.get(l.d_id),
                name,
                sm_count: r.get(l.d_sm_count),
                max_blocks_per_sm: r.get(l.d_max_blocks_per_sm),
                max_threads_per_sm: r
                    .get::<u32>(l.d_max_warps_per_sm)
                    .saturating_mul(r.get::<u32>(l.d_threads_per_warp)),
                max_warps_per_sm: r.get(l.d_max_warps_per_sm),
                global_memory: r.get(l.d_global_mem),
                cc_major: r.get(l.d_cc_major),
                cc_minor: r.get(l.d_cc_minor),
                max_regs_per_sm: r.get(l.d_max_regs_per_sm),
                max_smem_per_sm: r.get(l.d_max_smem_per_sm),
            }));
        }
        CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_MEMORY2 => {
            let r = r(l.memory_size);
            out.push(Event::Memory(fmt::Memory {
                ts: r.get(l.m_ts),
                device: r.get(l.m_device),
                corr: r.get(l.m_corr),
                address: r.get(l.m_address),
                bytes: r.get(l.m_bytes),
                op: r.get::<u32>(l.m_op) as u8,
                mem_kind: r.get::<u32>(l.m_kind) as u8,
            }));
        }
        _ => return false,
    }
    true
}
