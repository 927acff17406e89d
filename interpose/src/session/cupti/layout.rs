//! Where the fields we read sit in CUPTI's activity records, per CUPTI major version.
//!
//! Records are read through a table of field offsets chosen once per CUPTI major
//! version, not through one struct type: CUPTI 12.x and 13.x return different struct
//! versions for the same kind. Only fields present in every supported version are read,
//! and each read is bounds-checked against the size of that version's record.
//!
//! CUPTI 12.x: every field we read sits at the same offset and size in the 12.x structs
//! as in 13.0's (measured for 12.0 to 12.9: cupti-sys/LAYOUTS.md), so the 12.x layout is
//! the 13.0 one with the smallest 12.x record sizes as read bounds.

use cupti_sys as sys;
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
    pub k_graph_node_id: usize,
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
    pub graph_size: usize,
    pub g_start: usize,
    pub g_end: usize,
    pub g_device: usize,
    pub g_stream: usize,
    pub g_corr: usize,
    pub g_graph_id: usize,
}

macro_rules! layout_for {
    ($major:expr, $k:ty, $c:ty, $s:ty, $y:ty, $d:ty, $m:ty, $g:ty) => {
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
            k_graph_node_id: offset_of!($k, graphNodeId),
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
            graph_size: std::mem::size_of::<$g>(),
            g_start: offset_of!($g, start),
            g_end: offset_of!($g, end),
            g_device: offset_of!($g, deviceId),
            g_stream: offset_of!($g, streamId),
            g_corr: offset_of!($g, correlationId),
            g_graph_id: offset_of!($g, graphId),
        }
    };
}

/// The record structs CUPTI 13.x returns.
pub static LAYOUT_13: Layout = layout_13();

const fn layout_13() -> Layout {
    layout_for!(
        13,
        sys::CUpti_ActivityKernel10,
        sys::CUpti_ActivityMemcpy6,
        sys::CUpti_ActivityMemset4,
        sys::CUpti_ActivitySynchronization2,
        sys::CUpti_ActivityDevice5,
        sys::CUpti_ActivityMemory4,
        sys::CUpti_ActivityGraphTrace2
    )
}

/// The layout for a CUPTI major version, if supported.
pub fn layout_for_major(major: u32) -> Option<&'static Layout> {
    match major {
        13 => Some(&LAYOUT_13),
        12 => Some(&LAYOUT_12),
        _ => None,
    }
}

/// Smallest record sizes across CUPTI 12.0 - 12.9 (cupti-sys/LAYOUTS.md).
pub static LAYOUT_12: Layout = Layout {
    major: 12,
    kernel_size: 208,
    memcpy_size: 88,
    memset_size: 88,
    sync_size: 40,
    device_size: 176,
    memory_size: 120,
    // CUpti_ActivityGraphTrace: GraphTrace2 without its last two fields.
    graph_size: 48,
    ..LAYOUT_13_COPY
};

/// `LAYOUT_13` spelled as a constant so it can seed `LAYOUT_12`.
const LAYOUT_13_COPY: Layout = layout_13();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_we_read_fits_in_the_12x_records() {
        let l = &LAYOUT_12;
        let k = [
            l.k_start,
            l.k_end,
            l.k_device,
            l.k_stream,
            l.k_corr,
            l.k_name,
            l.k_graph_id,
            l.k_graph_node_id,
        ];
        assert!(k.iter().all(|o| o + 8 <= l.kernel_size));
        assert!(l.c_corr + 4 <= l.memcpy_size && l.c_bytes + 8 <= l.memcpy_size);
        assert!(l.s_mem_kind + 2 <= l.memset_size && l.s_corr + 4 <= l.memset_size);
        assert!(l.y_stream + 4 <= l.sync_size && l.y_corr + 4 <= l.sync_size);
        assert!(l.d_cc_minor + 4 <= l.device_size && l.d_name + 8 <= l.device_size);
        assert!(l.m_corr + 4 <= l.memory_size && l.m_ts + 8 <= l.memory_size);
        assert_eq!(l.k_corr, LAYOUT_13.k_corr);
        assert_eq!(l.k_graph_node_id, 144);
        let g = [
            l.g_start,
            l.g_end,
            l.g_device,
            l.g_stream,
            l.g_corr,
            l.g_graph_id,
        ];
        assert!(g.iter().all(|o| o + 4 <= l.graph_size) && l.g_end + 8 <= l.graph_size);
        assert_eq!(
            (l.g_corr, l.g_device, l.g_graph_id, l.g_stream),
            (4, 24, 28, 36)
        );
    }
}
