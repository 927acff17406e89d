//! Turning CUPTI activity records into trace events, on the writer thread, through the
//! field offsets of [`Layout`].

use super::layout::Layout;
use crate::writer::intern::Interner;
use cupti_sys as sys;
use gputrace_format::{self as fmt, Event};

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
            let graph_id: u32 = r.get(l.k_graph_id);
            if graph_id != 0 {
                super::note_graph_seen();
            }
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
                graph_id,
                // CUPTI gives 0 for a kernel launched outside a graph.
                graph_node_id: match r.get::<u64>(l.k_graph_node_id) {
                    0 => fmt::ENV_NA64,
                    n => n.min(fmt::ENV_NA64 - 1),
                },
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
        CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_GRAPH_TRACE => {
            super::note_graph_seen();
            let r = r(l.graph_size);
            out.push(Event::GraphTrace(fmt::GraphTrace {
                start: r.get(l.g_start),
                end: r.get(l.g_end),
                device: r.get(l.g_device),
                stream: r.get(l.g_stream),
                corr: r.get(l.g_corr),
                graph_id: r.get(l.g_graph_id),
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
