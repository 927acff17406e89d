//! Line numbers from a code object's line table, for the three formats CPython 3.9-3.13
//! use. Each table is decoded once into ranges of bytecode (byte offsets) and the line
//! each range belongs to; a lookup is a binary search. Written from the format
//! descriptions (CPython's `Objects/lnotab_notes.txt` for 3.9 and 3.10, the locations
//! table notes for 3.11 on) and checked against what each interpreter's own
//! `co_lines()` / `co_positions()` say (tests below, and `tests/data/linetables.json`).

/// The line table formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// 3.9 `co_lnotab`: (byte offset increment, signed line increment) pairs; a pair's
    /// line increment applies from its offset on.
    Lnotab,
    /// 3.10 `co_linetable`: (range length in bytes, signed line delta) pairs; delta
    /// -128 means the range has no line.
    Table310,
    /// 3.11+ `co_linetable`: location entries covering code units (two bytes each).
    Locations,
}

/// One range of bytecode and its line (`None`: no line, such as cache entries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub start: u32,
    pub end: u32,
    pub line: Option<u32>,
}

/// A decoded line table: sorted, non-overlapping ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lines {
    ranges: Vec<Range>,
    first: u32,
}

impl Lines {
    /// Decodes `table` for a code object whose first line is `first`. A malformed
    /// table decodes as far as it is well formed.
    pub fn decode(format: Format, table: &[u8], first: u32) -> Lines {
        let ranges = match format {
            Format::Lnotab => lnotab(table, first),
            Format::Table310 => table310(table, first),
            Format::Locations => locations(table, first),
        };
        Lines { ranges, first }
    }

    /// The line of the instruction at byte offset `at` (0: not known). An offset past
    /// every range, or in a range without a line, gives the code's first line, which is
    /// at least the right function.
    pub fn line_at(&self, at: u32) -> u32 {
        let i = self.ranges.partition_point(|r| r.end <= at);
        match self.ranges.get(i) {
            Some(r) if r.start <= at => r.line.unwrap_or(self.first),
            _ => self.first,
        }
    }

    pub fn ranges(&self) -> &[Range] {
        &self.ranges
    }
}

/// Pushes a range, merging it into the previous one when they touch and share a line.
fn push(out: &mut Vec<Range>, start: u32, end: u32, line: Option<u32>) {
    if end <= start {
        return;
    }
    if let Some(last) = out.last_mut() {
        if last.end == start && last.line == line {
            last.end = end;
            return;
        }
    }
    out.push(Range { start, end, line });
}

fn clamp_line(l: i64) -> Option<u32> {
    u32::try_from(l).ok()
}

/// 3.9: the line at an offset is the first line plus the increments of every pair
/// whose offset is at or before it.
fn lnotab(t: &[u8], first: u32) -> Vec<Range> {
    let mut out = Vec::new();
    let mut line = first as i64;
    let mut start = 0u32;
    let mut addr = 0u32;
    for p in t.chunks_exact(2) {
        let next = addr.saturating_add(p[0] as u32);
        if next != addr {
            push(&mut out, start, next, clamp_line(line));
            start = next;
        }
        addr = next;
        line += p[1] as i8 as i64;
    }
    // Past the last pair, the last line runs to the end of the code.
    push(&mut out, start, u32::MAX, clamp_line(line));
    out
}

/// 3.10: each pair is a range of `len` bytes; its line is the running line after the
/// delta (the delta -128 leaves the line alone and gives the range none).
fn table310(t: &[u8], first: u32) -> Vec<Range> {
    let mut out = Vec::new();
    let mut line = first as i64;
    let mut addr = 0u32;
    for p in t.chunks_exact(2) {
        let len = p[0] as u32;
        let delta = p[1] as i8;
        let has = if delta == -128 {
            None
        } else {
            line += delta as i64;
            clamp_line(line)
        };
        push(&mut out, addr, addr.saturating_add(len), has);
        addr = addr.saturating_add(len);
    }
    out
}

/// Reads the 3.11 table's unsigned varint: 6-bit chunks, least significant first, bit 6
/// set on every chunk but the last.
fn varint(t: &[u8], i: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let b = *t.get(*i)?;
        *i += 1;
        if shift < 64 {
            v |= ((b & 0x3f) as u64) << shift;
        }
        shift += 6;
        if b & 0x40 == 0 {
            return Some(v);
        }
    }
}

/// The signed varint: the unsigned one with the sign in bit 0.
fn svarint(t: &[u8], i: &mut usize) -> Option<i64> {
    let u = varint(t, i)?;
    let m = (u >> 1) as i64;
    Some(if u & 1 == 1 { -m } else { m })
}

/// 3.11+: entries of a first byte (bit 7 set; code in bits 3-6; length - 1 in code
/// units in bits 0-2) and the bytes that code needs.
fn locations(t: &[u8], first: u32) -> Vec<Range> {
    let mut out = Vec::new();
    let mut line = first as i64;
    let mut addr = 0u32;
    let mut i = 0;
    while i < t.len() {
        let head = t[i];
        if head & 0x80 == 0 {
            // Not the start of an entry: the table is damaged from here on.
            break;
        }
        i += 1;
        let code = (head >> 3) & 0xf;
        let units = (head & 7) as u32 + 1;
        let has = match code {
            // Short forms: same line, one byte of columns.
            0..=9 => {
                i += 1;
                true
            }
            // One-line forms: line + (code - 10), two bytes of columns.
            10..=12 => {
                line += (code - 10) as i64;
                i += 2;
                true
            }
            // No columns: a signed line delta.
            13 => match svarint(t, &mut i) {
                Some(d) => {
                    line += d;
                    true
                }
                None => break,
            },
            // Long form: line delta, end-line delta, start and end columns.
            14 => {
                let Some(d) = svarint(t, &mut i) else { break };
                line += d;
                if varint(t, &mut i).is_none()
                    || varint(t, &mut i).is_none()
                    || varint(t, &mut i).is_none()
                {
                    break;
                }
                true
            }
            // No location at all.
            _ => false,
        };
        if i > t.len() {
            break;
        }
        let end = addr.saturating_add(units * 2);
        push(
            &mut out,
            addr,
            end,
            if has { clamp_line(line) } else { None },
        );
        addr = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lnotab_follows_the_pairs() {
        // The example of lnotab_notes.txt: offsets 0, 6, 50, 350, 361 start lines
        // 1, 2, 7, 207, 208 (firstlineno 1), as the compiler writes it.
        let t = [6, 1, 44, 5, 255, 0, 45, 127, 0, 73, 11, 1];
        let l = Lines::decode(Format::Lnotab, &t, 1);
        for (at, line) in [(0, 1), (5, 1), (6, 2), (49, 2), (50, 7), (349, 7)] {
            assert_eq!(l.line_at(at), line, "offset {at}");
        }
        assert_eq!(l.line_at(350), 207);
        assert_eq!(l.line_at(361), 208);
        assert_eq!(l.line_at(10_000), 208, "the last line runs on");
    }

    #[test]
    fn table310_ranges_and_missing_lines() {
        // 4 bytes on line 10 (first 9, +1), 6 bytes without a line, 2 bytes on line 12.
        let t = [4, 1, 6, 0x80, 2, 2];
        let l = Lines::decode(Format::Table310, &t, 9);
        assert_eq!(l.line_at(0), 10);
        assert_eq!(l.line_at(3), 10);
        assert_eq!(l.line_at(4), 9, "no line: the first line");
        assert_eq!(l.line_at(10), 12);
        assert_eq!(l.line_at(12), 9, "past the end");
    }

    #[test]
    fn locations_every_form() {
        let t = [
            // short form (code 0), 1 unit: same line (first = 20)
            0x80,
            0x00, // one-line form +2 (code 12), 2 units
            0x80 | 12 << 3 | 1,
            4,
            9, // no columns (code 13), delta -1 (svarint 3), 1 unit
            0x80 | 13 << 3,
            3, // long form (code 14), delta +40 (80, two chunks), 1 unit
            0x80 | 14 << 3,
            0x40 | (80 & 0x3f),
            80 >> 6,
            0,
            1,
            2,
            // no location (code 15), 3 units
            0x80 | 15 << 3 | 2,
        ];
        let l = Lines::decode(Format::Locations, &t, 20);
        assert_eq!(
            l.ranges(),
            &[
                Range {
                    start: 0,
                    end: 2,
                    line: Some(20)
                },
                Range {
                    start: 2,
                    end: 6,
                    line: Some(22)
                },
                Range {
                    start: 6,
                    end: 8,
                    line: Some(21)
                },
                Range {
                    start: 8,
                    end: 10,
                    line: Some(61)
                },
                Range {
                    start: 10,
                    end: 16,
                    line: None
                },
            ]
        );
        assert_eq!(l.line_at(7), 21);
        assert_eq!(l.line_at(12), 20);
    }

    /// Code compiled by CPython 3.9-3.13 and the line of each of its instructions as
    /// each interpreter says (interpose/tests/data/gen_linetables.py made it).
    const REAL_TABLES: &str = include_str!("../../../tests/data/linetables.txt");

    fn hex(s: &str) -> Vec<u8> {
        if s == "-" {
            return Vec::new();
        }
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn every_instruction_of_real_code_gets_the_interpreters_line() {
        let mut checked = [0usize; 14];
        for l in REAL_TABLES.lines() {
            let f: Vec<&str> = l.split(' ').collect();
            let minor: usize = f[0].parse().unwrap();
            let first: u32 = f[1].parse().unwrap();
            let format = match minor {
                9 => Format::Lnotab,
                10 => Format::Table310,
                _ => Format::Locations,
            };
            let lines = Lines::decode(format, &hex(f[2]), first);
            if f[3] == "-" {
                continue;
            }
            for pair in f[3].split(',') {
                let (at, line) = pair.split_once(':').unwrap();
                let (at, line): (u32, u32) = (at.parse().unwrap(), line.parse().unwrap());
                assert_eq!(lines.line_at(at), line, "3.{minor}, offset {at}: {l}");
                checked[minor] += 1;
            }
        }
        for (minor, n) in checked.iter().enumerate().skip(9) {
            assert!(*n > 100, "3.{minor}: {n}");
        }
    }

    #[test]
    fn damaged_tables_decode_what_they_can() {
        let l = Lines::decode(Format::Locations, &[0x80, 0x00, 0x12, 0x80 | 14 << 3], 5);
        assert_eq!(l.line_at(0), 5);
        assert_eq!(l.ranges().len(), 1);
        assert_eq!(Lines::decode(Format::Table310, &[3], 1).ranges(), &[]);
        for f in [Format::Lnotab, Format::Table310, Format::Locations] {
            let junk: Vec<u8> = (0..=255).collect();
            let l = Lines::decode(f, &junk, 1);
            let _ = l.line_at(100);
        }
    }
}
