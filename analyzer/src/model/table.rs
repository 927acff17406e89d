//! Compact tables for the two kinds that make most of a trace: kernels and API calls.
//!
//! A record is split into what is its own (start, duration, correlation id) and what
//! repeats from record to record (a kernel's name, stream, grid, block, registers...;
//! a call's thread, function, result): the repeating part is its *shape*, stored once
//! and referred to by index. A row is 24 bytes, against 80 for a decoded `Kernel` and
//! 64 for an `Api`. What rarely differs from its default (a call's byte count and
//! pointer) and durations that do not fit 32 bits (over 4.29 s, or a record without
//! an end) go to a side table of *extras*, which the row points to.
//!
//! Rows are read back as the decoded record, by value ([`Table::get`], [`Table::iter`]):
//! the passes see the same fields as in the file.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// A record kind a [`Table`] holds.
pub trait Compact: Sized {
    /// What repeats: interned once per table.
    type Shape: Clone + Eq + Hash + std::fmt::Debug + Default;
    /// What is usually at its default: kept aside for the rows where it is not.
    type Extra: Clone + PartialEq + std::fmt::Debug + Default;
    /// (start, end, correlation id).
    fn key(&self) -> (u64, u64, u32);
    fn split(self) -> (Self::Shape, Self::Extra);
    fn join(start: u64, end: u64, corr: u32, shape: &Self::Shape, extra: &Self::Extra) -> Self;
    /// The order of two records with the same start and end (a total order on the
    /// fields the analysis reads, so that the table's order does not depend on the
    /// order records arrived in).
    fn tie(a: &Self, b: &Self) -> Ordering;
}

/// No extra: the row stands alone.
const NONE: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Row {
    start: u64,
    dur: u32,
    corr: u32,
    shape: u32,
    extra: u32,
}

/// FxHash's mix, for shape keys (a few words each, hashed once per record while
/// loading: SipHash would cost more than the rest of the load of a kernel).
#[derive(Default, Clone, Copy)]
pub struct Fx(u64);

impl Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.write_u64(i as u64)
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64)
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64)
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

type Index<S> = HashMap<S, u32, BuildHasherDefault<Fx>>;

/// Records of one kind, in 24-byte rows over interned shapes.
#[derive(Clone, Debug)]
pub struct Table<T: Compact> {
    rows: Vec<Row>,
    shapes: Vec<T::Shape>,
    /// (end, extra) of the rows that point here.
    extras: Vec<(u64, T::Extra)>,
    /// Shape -> index while records are added (rebuilt when needed after
    /// [`Table::seal`] dropped it).
    index: Index<T::Shape>,
}

impl<T: Compact> Default for Table<T> {
    fn default() -> Self {
        Table {
            rows: Vec::new(),
            shapes: Vec::new(),
            extras: Vec::new(),
            index: Index::default(),
        }
    }
}

impl<T: Compact> Table<T> {
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Bytes held (rows, shapes, extras), for the memory accounts.
    pub fn heap_bytes(&self) -> usize {
        self.rows.capacity() * std::mem::size_of::<Row>()
            + self.shapes.capacity() * std::mem::size_of::<T::Shape>()
            + self.extras.capacity() * std::mem::size_of::<(u64, T::Extra)>()
    }

    fn end_of(&self, r: &Row) -> u64 {
        if r.extra == NONE {
            r.start + r.dur as u64
        } else {
            self.extras[r.extra as usize].0
        }
    }

    fn join(&self, r: &Row) -> T {
        let shape = &self.shapes[r.shape as usize];
        if r.extra == NONE {
            T::join(
                r.start,
                r.start + r.dur as u64,
                r.corr,
                shape,
                &T::Extra::default(),
            )
        } else {
            let (end, x) = &self.extras[r.extra as usize];
            T::join(r.start, *end, r.corr, shape, x)
        }
    }

    /// The `i`th record (`None` past the end).
    pub fn get(&self, i: usize) -> Option<T> {
        self.rows.get(i).map(|r| self.join(r))
    }

    /// The `i`th record; panics past the end, as indexing a slice does.
    pub fn at(&self, i: usize) -> T {
        self.join(&self.rows[i])
    }

    /// The `i`th record's start, without building the record.
    pub fn start(&self, i: usize) -> u64 {
        self.rows[i].start
    }

    /// The `i`th record's end, without building the record.
    pub fn end(&self, i: usize) -> u64 {
        self.end_of(&self.rows[i])
    }

    pub fn first(&self) -> Option<T> {
        self.get(0)
    }

    pub fn last(&self) -> Option<T> {
        self.rows.last().map(|r| self.join(r))
    }

    pub fn iter(&self) -> Iter<'_, T> {
        self.range(0..self.len())
    }

    /// The records in `r` (clamped to the table).
    pub fn range(&self, r: std::ops::Range<usize>) -> Iter<'_, T> {
        let hi = r.end.min(self.len());
        Iter {
            t: self,
            lo: r.start.min(hi),
            hi,
        }
    }

    /// The records from `i` on.
    pub fn iter_from(&self, i: usize) -> Iter<'_, T> {
        self.range(i..self.len())
    }

    /// The first index where `pred` is false, for a `pred` true on a prefix (as
    /// [`slice::partition_point`]).
    pub fn partition_point(&self, mut pred: impl FnMut(&T) -> bool) -> usize {
        self.rows.partition_point(|r| pred(&self.join(r)))
    }

    /// The first index whose start is not below `t` (a search on the start column).
    pub fn first_starting_at(&self, t: u64) -> usize {
        self.rows.partition_point(|r| r.start < t)
    }

    fn shape_id(&mut self, s: T::Shape) -> u32 {
        if self.index.len() != self.shapes.len() {
            self.index = (self.shapes.iter().cloned())
                .zip(0u32..)
                .collect::<Index<T::Shape>>();
        }
        if let Some(&i) = self.index.get(&s) {
            return i;
        }
        let i = self.shapes.len() as u32;
        self.shapes.push(s.clone());
        self.index.insert(s, i);
        i
    }

    fn make_row(&mut self, x: T) -> Row {
        let (start, end, corr) = x.key();
        let (shape, extra) = x.split();
        let shape = self.shape_id(shape);
        let dur = end.wrapping_sub(start);
        if end >= start && dur < NONE as u64 && extra == T::Extra::default() {
            return Row {
                start,
                dur: dur as u32,
                corr,
                shape,
                extra: NONE,
            };
        }
        self.extras.push((end, extra));
        Row {
            start,
            dur: 0,
            corr,
            shape,
            extra: (self.extras.len() - 1) as u32,
        }
    }

    pub fn push(&mut self, x: T) {
        let r = self.make_row(x);
        self.rows.push(r);
    }

    /// Replaces the `i`th record with what `f` makes of it.
    pub fn update(&mut self, i: usize, f: impl FnOnce(&mut T)) {
        let mut x = self.at(i);
        f(&mut x);
        // The old extra, if any, is left unused (updates are rare: window clips,
        // deferred shapes of a chunk).
        self.rows[i] = self.make_row(x);
    }

    /// Changes every shape that `f` changes (it must keep distinct shapes distinct).
    pub fn map_shapes(&mut self, mut f: impl FnMut(&mut T::Shape)) {
        self.shapes.iter_mut().for_each(&mut f);
        self.index.clear();
    }

    /// Moves `other`'s records to the end of this table.
    pub fn append(&mut self, other: &mut Self) {
        let map: Vec<u32> = std::mem::take(&mut other.shapes)
            .into_iter()
            .map(|s| self.shape_id(s))
            .collect();
        let base = self.extras.len() as u32;
        self.extras.append(&mut other.extras);
        self.rows.extend(other.rows.drain(..).map(|mut r| {
            r.shape = map[r.shape as usize];
            if r.extra != NONE {
                r.extra += base;
            }
            r
        }));
        other.index.clear();
    }

    pub fn retain(&mut self, mut f: impl FnMut(&T) -> bool) {
        let rows = std::mem::take(&mut self.rows);
        self.rows = rows.into_iter().filter(|r| f(&self.join(r))).collect();
    }

    pub fn reserve_exact(&mut self, n: usize) {
        self.rows.reserve_exact(n)
    }

    /// Sorts by (start, end), then [`Compact::tie`].
    pub fn sort(&mut self) {
        let mut rows = std::mem::take(&mut self.rows);
        rows.sort_unstable_by(|a, b| {
            (a.start, self.end_of(a))
                .cmp(&(b.start, self.end_of(b)))
                .then_with(|| T::tie(&self.join(a), &self.join(b)))
        });
        self.rows = rows;
    }

    /// Done adding: the slack of growth is given back and the shape index dropped (it is
    /// rebuilt if records are added later).
    pub fn seal(&mut self) {
        self.rows.shrink_to_fit();
        self.shapes.shrink_to_fit();
        self.extras.shrink_to_fit();
        self.index = Index::default();
    }

    /// The rows' allocation, as an address range and a capacity in bytes (to map its
    /// pages ahead of the load).
    pub fn allocation(&self) -> (usize, usize) {
        (
            self.rows.as_ptr() as usize,
            self.rows.capacity() * std::mem::size_of::<Row>(),
        )
    }
}

impl<T: Compact + PartialEq> PartialEq for Table<T> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl<T: Compact> From<Vec<T>> for Table<T> {
    fn from(v: Vec<T>) -> Self {
        v.into_iter().collect()
    }
}

impl<T: Compact> FromIterator<T> for Table<T> {
    fn from_iter<I: IntoIterator<Item = T>>(it: I) -> Self {
        let mut t = Table::default();
        for x in it {
            t.push(x);
        }
        t
    }
}

/// The records of a [`Table`] (or a range of it), by value.
#[derive(Clone)]
pub struct Iter<'a, T: Compact> {
    t: &'a Table<T>,
    lo: usize,
    hi: usize,
}

impl<T: Compact> Iterator for Iter<'_, T> {
    type Item = T;
    #[inline]
    fn next(&mut self) -> Option<T> {
        if self.lo >= self.hi {
            return None;
        }
        self.lo += 1;
        Some(self.t.join(&self.t.rows[self.lo - 1]))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.hi - self.lo;
        (n, Some(n))
    }
    fn nth(&mut self, n: usize) -> Option<T> {
        self.lo = self.lo.saturating_add(n).min(self.hi);
        self.next()
    }
}

impl<T: Compact> DoubleEndedIterator for Iter<'_, T> {
    fn next_back(&mut self) -> Option<T> {
        if self.lo >= self.hi {
            return None;
        }
        self.hi -= 1;
        Some(self.t.join(&self.t.rows[self.hi]))
    }
}

impl<T: Compact> ExactSizeIterator for Iter<'_, T> {}

impl<'a, T: Compact> IntoIterator for &'a Table<T> {
    type Item = T;
    type IntoIter = Iter<'a, T>;
    fn into_iter(self) -> Iter<'a, T> {
        self.iter()
    }
}

use gputrace_format as fmt;

/// A kernel's launch and placement: everything but its times and correlation id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct KernelShape {
    device: u32,
    stream: u32,
    name: u32,
    grid: [u32; 3],
    block: [u32; 3],
    static_smem: u32,
    dynamic_smem: u32,
    registers: u32,
    graph_id: u32,
    graph_node_id: u64,
}

impl KernelShape {
    /// The kernel's interned name.
    pub fn name(&self) -> u32 {
        self.name
    }
    pub fn set_name(&mut self, name: u32) {
        self.name = name
    }
}

impl Compact for fmt::Kernel {
    type Shape = KernelShape;
    type Extra = ();
    fn key(&self) -> (u64, u64, u32) {
        (self.start, self.end, self.corr)
    }
    fn split(self) -> (KernelShape, ()) {
        let s = KernelShape {
            device: self.device,
            stream: self.stream,
            name: self.name,
            grid: self.grid,
            block: self.block,
            static_smem: self.static_smem,
            dynamic_smem: self.dynamic_smem,
            registers: self.registers,
            graph_id: self.graph_id,
            graph_node_id: self.graph_node_id,
        };
        (s, ())
    }
    #[inline]
    fn join(start: u64, end: u64, corr: u32, s: &KernelShape, _: &()) -> Self {
        fmt::Kernel {
            start,
            end,
            device: s.device,
            stream: s.stream,
            corr,
            name: s.name,
            grid: s.grid,
            block: s.block,
            static_smem: s.static_smem,
            dynamic_smem: s.dynamic_smem,
            registers: s.registers,
            graph_id: s.graph_id,
            graph_node_id: s.graph_node_id,
        }
    }
    fn tie(a: &Self, b: &Self) -> Ordering {
        (a.corr, a.stream, a.name, a.device).cmp(&(b.corr, b.stream, b.name, b.device))
    }
}

/// An API call's thread, function and outcome.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ApiShape {
    tid: u32,
    domain: u8,
    cbid: u32,
    name: u32,
    arg: u32,
    result: u32,
}

impl Compact for fmt::Api {
    type Shape = ApiShape;
    /// (bytes, pointer): set on copies, memsets and allocations only.
    type Extra = ApiExtra;
    fn key(&self) -> (u64, u64, u32) {
        (self.start, self.end, self.corr)
    }
    fn split(self) -> (ApiShape, ApiExtra) {
        let s = ApiShape {
            tid: self.tid,
            domain: self.domain,
            cbid: self.cbid,
            name: self.name,
            arg: self.arg,
            result: self.result,
        };
        (s, ApiExtra(self.bytes, self.ptr))
    }
    #[inline]
    fn join(start: u64, end: u64, corr: u32, s: &ApiShape, x: &ApiExtra) -> Self {
        fmt::Api {
            start,
            end,
            tid: s.tid,
            corr,
            domain: s.domain,
            cbid: s.cbid,
            name: s.name,
            bytes: x.0,
            arg: s.arg,
            result: s.result,
            ptr: x.1,
        }
    }
    fn tie(a: &Self, b: &Self) -> Ordering {
        (a.tid, a.corr, a.cbid).cmp(&(b.tid, b.corr, b.cbid))
    }
}

/// An API call's bytes and pointer.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiExtra(u64, u64);

impl Default for ApiExtra {
    fn default() -> Self {
        ApiExtra(0, fmt::ENV_NA64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(start: u64, end: u64, corr: u32, name: u32) -> fmt::Kernel {
        fmt::Kernel {
            start,
            end,
            corr,
            name,
            grid: [4, 1, 1],
            ..Default::default()
        }
    }

    #[test]
    fn records_read_back_as_written() {
        let v = vec![
            k(10, 20, 1, 5),
            k(30, 30 + 5_000_000_000, 2, 5),
            k(40, 0, 3, 6),
            k(50, 60, 4, 5),
        ];
        let t: Table<fmt::Kernel> = v.clone().into();
        assert_eq!(t.iter().collect::<Vec<_>>(), v);
        assert_eq!(t.shapes.len(), 2);
        assert_eq!(t.extras.len(), 2);
        assert_eq!(t.end(1), 30 + 5_000_000_000);
        assert_eq!(t.iter().next_back(), Some(v[3].clone()));
        assert_eq!(t.range(1..3).count(), 2);
        assert_eq!(t.partition_point(|x| x.start < 35), 2);
        let a = fmt::Api {
            start: 1,
            end: 2,
            bytes: 64,
            ..Default::default()
        };
        let b = fmt::Api {
            start: 3,
            end: 4,
            ..Default::default()
        };
        let at: Table<fmt::Api> = vec![a.clone(), b.clone()].into();
        assert_eq!(at.extras.len(), 1);
        assert_eq!((at.at(0), at.at(1)), (a, b));
    }

    #[test]
    fn append_sort_and_update_keep_records() {
        let mut a: Table<fmt::Kernel> = vec![k(30, 40, 3, 1), k(10, 20, 1, 2)].into();
        let mut b: Table<fmt::Kernel> = vec![k(20, 25, 2, 2), k(5, 1 << 40, 4, 3)].into();
        a.append(&mut b);
        assert!(b.is_empty());
        a.sort();
        let starts: Vec<u64> = a.iter().map(|x| x.start).collect();
        assert_eq!(starts, [5, 10, 20, 30]);
        assert_eq!(a.at(0).end, 1 << 40);
        assert_eq!(a.at(2).name, 2);
        a.update(3, |x| x.start = 35);
        assert_eq!(a.at(3), k(35, 40, 3, 1));
        a.retain(|x| x.name != 2);
        assert_eq!(a.len(), 2);
        a.seal();
        a.push(k(50, 60, 9, 1));
        assert_eq!(a.shapes.len(), 3);
    }
}
