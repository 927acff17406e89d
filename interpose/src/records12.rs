//! CUPTI 12.x records. Every field we read sits at the same offset and size in the
//! 12.x structs as in 13.0's (measured for 12.0 to 12.9: cupti-sys/LAYOUTS.md), so the
//! 12.x layout is the 13.0 one with the smallest 12.x record sizes as read bounds.

use crate::records::Layout;

/// Smallest record sizes across CUPTI 12.0 - 12.9 (cupti-sys/LAYOUTS.md).
pub static LAYOUT_12: Layout = Layout {
    major: 12,
    kernel_size: 208,
    memcpy_size: 88,
    memset_size: 88,
    sync_size: 40,
    device_size: 176,
    memory_size: 120,
    ..LAYOUT_13_COPY
};

/// `LAYOUT_13` spelled as a constant so it can seed `LAYOUT_12`.
const LAYOUT_13_COPY: Layout = crate::records::layout_13();

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
        ];
        assert!(k.iter().all(|o| o + 8 <= l.kernel_size));
        assert!(l.c_corr + 4 <= l.memcpy_size && l.c_bytes + 8 <= l.memcpy_size);
        assert!(l.s_mem_kind + 2 <= l.memset_size && l.s_corr + 4 <= l.memset_size);
        assert!(l.y_stream + 4 <= l.sync_size && l.y_corr + 4 <= l.sync_size);
        assert!(l.d_cc_minor + 4 <= l.device_size && l.d_name + 8 <= l.device_size);
        assert!(l.m_corr + 4 <= l.memory_size && l.m_ts + 8 <= l.memory_size);
        assert_eq!(l.k_corr, crate::records::LAYOUT_13.k_corr);
    }
}
