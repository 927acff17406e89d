//! A chunk's place in its file (from format 2.6): the writer numbers its chunks and marks
//! the one that holds the end record, so that a reader can tell a replayed copy, a chunk
//! out of place or from another file, a missing chunk, and anything after the end, from
//! the chunks the writer wrote, in their order.
//!
//! In the chunk header, `flags u8 | seq u16` (bytes 13..16, zeros before 2.6):
//! * `seq`: the chunk's number in its file: the metadata chunk is 0, every chunk written
//!   after it one more, modulo 2^16 (65535 is followed by 0).
//! * `flags` bit 7 ([`END`]): the chunk holds the end record (the collector's last
//!   `Stopped` state); its writer writes nothing after it.
//! * `flags` bits 0..6: a check of `seq` and `END`. The chunk's checksum covers its payload
//!   only (and stays so: readers of older versions check it), so these bits guard the
//!   number: each of the 17 bits of `seq` and `END` is folded into one check bit, so one
//!   changed bit in the three bytes is always seen, and the zeros of an older writer's
//!   header never pass.
//!
//! What a reader does with them is in `read.rs` (`Frames::in_sequence`).

/// `flags` bit: the chunk holds the end record.
pub(crate) const END: u8 = 0x80;

/// The first minor version of major 2 whose writers number their chunks.
pub(crate) const SINCE_MINOR: u16 = 6;

/// Makes the check of all-zero fields non-zero, so an older writer's header fails it.
const SALT: u32 = 0x55;

/// The 7 check bits of a chunk numbered `seq`.
fn check(seq: u16, end: bool) -> u8 {
    let x = seq as u32 | (end as u32) << 16;
    ((x ^ (x >> 7) ^ (x >> 14) ^ SALT) & 0x7f) as u8
}

/// The `flags` byte of the chunk numbered `seq`.
pub(crate) fn flags(seq: u16, end: bool) -> u8 {
    check(seq, end) | if end { END } else { 0 }
}

/// Whether `flags` checks `seq`: `Some(end)` if so, `None` for a changed header or one
/// written without a number.
pub(crate) fn read(flags: u8, seq: u16) -> Option<bool> {
    let end = flags & END != 0;
    (flags & !END == check(seq, end)).then_some(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every number reads back, and any one changed bit of the three bytes is seen.
    #[test]
    fn one_changed_bit_is_always_seen() {
        for seq in 0..=u16::MAX {
            for end in [false, true] {
                let f = flags(seq, end);
                assert_eq!(read(f, seq), Some(end));
                for bit in 0..8 {
                    assert_eq!(read(f ^ 1 << bit, seq), None, "{seq} {end} flags {bit}");
                }
                for bit in 0..16 {
                    assert_eq!(read(f, seq ^ 1 << bit), None, "{seq} {end} seq {bit}");
                }
            }
        }
        // An older writer's header: no number.
        assert_eq!(read(0, 0), None);
    }
}
