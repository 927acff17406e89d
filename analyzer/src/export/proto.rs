//! Just enough of the protobuf wire format to write Perfetto's trace messages: varints,
//! 64-bit fixed fields, length-delimited strings and nested messages. Field numbers live
//! with the messages that use them ([`super::perfetto`]); no schema compiler is needed
//! at build time.

/// Wire types.
const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;

/// Appends `v` as a base-128 varint.
#[inline]
pub fn varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

#[inline]
fn key(buf: &mut Vec<u8>, field: u32, wire: u32) {
    varint(buf, ((field << 3) | wire) as u64);
}

/// An unsigned integer, enum or bool field.
#[inline]
pub fn uint(buf: &mut Vec<u8>, field: u32, v: u64) {
    key(buf, field, VARINT);
    varint(buf, v);
}

/// A signed `int32` / `int64` field (two's complement, as protobuf writes them).
#[inline]
pub fn int(buf: &mut Vec<u8>, field: u32, v: i64) {
    uint(buf, field, v as u64);
}

/// A `fixed64` field.
#[inline]
pub fn fixed64(buf: &mut Vec<u8>, field: u32, v: u64) {
    key(buf, field, FIXED64);
    buf.extend_from_slice(&v.to_le_bytes());
}

/// A `double` field.
#[inline]
pub fn double(buf: &mut Vec<u8>, field: u32, v: f64) {
    fixed64(buf, field, v.to_bits());
}

/// A `string` (or `bytes`) field.
#[inline]
pub fn string(buf: &mut Vec<u8>, field: u32, s: &str) {
    key(buf, field, LEN);
    varint(buf, s.len() as u64);
    buf.extend_from_slice(s.as_bytes());
}

/// A nested message written by `f`. Its length goes before it: one byte is set aside,
/// and the body moves up in the rare case it is longer than 127 bytes.
#[inline]
pub fn message(buf: &mut Vec<u8>, field: u32, f: impl FnOnce(&mut Vec<u8>)) {
    key(buf, field, LEN);
    let at = buf.len();
    buf.push(0);
    f(buf);
    let len = buf.len() - at - 1;
    if len < 0x80 {
        buf[at] = len as u8;
    } else {
        let mut head = Vec::with_capacity(10);
        varint(&mut head, len as u64);
        buf.splice(at..at + 1, head);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_match_the_wire_format() {
        let mut b = Vec::new();
        varint(&mut b, 1);
        varint(&mut b, 300);
        varint(&mut b, u64::MAX);
        assert_eq!(&b[..3], &[0x01, 0xac, 0x02]);
        assert_eq!(b.len(), 3 + 10);
        let mut b = Vec::new();
        int(&mut b, 1, -1);
        assert_eq!(b.len(), 1 + 10);
    }

    #[test]
    fn doubles_are_fixed64_little_endian() {
        // TrackEvent.double_counter_value (field 44): key (44 << 3) | 1 = 353 as a
        // varint, then the IEEE-754 bits.
        let mut b = Vec::new();
        double(&mut b, 44, 62.5);
        let mut want = vec![0xe1, 0x02];
        want.extend_from_slice(&62.5f64.to_bits().to_le_bytes());
        assert_eq!(b, want);
        assert_eq!(&b[2..], &[0, 0, 0, 0, 0, 0x40, 0x4f, 0x40]);
    }

    #[test]
    fn nested_messages_of_any_length() {
        for n in [0usize, 1, 127, 128, 300, 20_000] {
            let text = "x".repeat(n);
            let mut b = Vec::new();
            message(&mut b, 1, |m| string(m, 2, &text));
            // Outer: key, length; inner: key, length, text.
            let mut inner = Vec::new();
            string(&mut inner, 2, &text);
            let mut want = vec![0x0a];
            varint(&mut want, inner.len() as u64);
            want.extend_from_slice(&inner);
            assert_eq!(b, want, "{n}");
        }
    }
}
