//! Compact tables for the two kinds that make most of a trace: kernels and API calls.
//!
//! A record is split into what is its own (start, duration, correlation id) and what
//! repeats from record to record (a kernel's name, stream, grid, block, registers...;
//! a call's thread, function, result): the repeating part is its *shape*, stored once
//! and referred to by index. A row is 20 bytes (its start, and 12 bytes in a second
//! column), against 80 for a decoded `Kernel` and 64 for an `Api`. What rarely differs
//! from its default (a call's byte count and pointer) and durations that do not fit 32
//! bits (over 4.29 s, or a record without an end) go to a side table of *extras*, kept
//! by row, and the row is flagged.
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
    /// A cheap key of a shape (its name, its function): shapes of one key are likely
    /// the same shape, found again without hashing it.
    fn slot(shape: &Self::Shape) -> u32;
}

/// Slots of the last shape seen per [`Compact::slot`] key (a power of two).
const SLOTS: usize = 256;

/// The bit of a row's shape index that says the row has an extra.
const EXTRA: u32 = 1 << 31;

/// A row's own values beside its start: 12 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Rest {
    dur: u32,
    corr: u32,
    /// The shape's index, with [`EXTRA`] set when the row has an extra.
    shape: u32,
}

/// A multiply-rotate hasher for integer keys (not for untrusted string keys): shape keys
/// here, hashed once per record while loading (SipHash would cost more than the rest of
/// the load of a kernel), and the report's small maps.
#[derive(Default, Clone, Copy)]
pub struct Fx(u64);

impl Fx {
    #[inline]
    fn add(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.add(b as u64);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.add(v as u64);
    }
    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }
    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

pub type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<Fx>>;

type Index<S> = FxMap<S, u32>;

/// Records of one kind in two columns (starts, and the 12-byte rest of each row: 20
/// bytes a record) over interned shapes.
#[derive(Clone)]
pub struct Table<T: Compact> {
    starts: Vec<u64>,
    rest: Vec<Rest>,
    shapes: Vec<T::Shape>,
    /// (row, end, extra) of the rows flagged [`EXTRA`], by row.
    extras: Vec<(u32, u64, T::Extra)>,
    /// Shape -> index while records are added (rebuilt when needed after
    /// [`Table::seal`] dropped it).
    index: Index<T::Shape>,
    /// The last shape index seen per slot key (u32::MAX: none): a repeated shape is
    /// found by one comparison instead of a hash.
    recent: Vec<u32>,
}

impl<T: Compact> Default for Table<T> {
    fn default() -> Self {
        Table {
            starts: Vec::new(),
            rest: Vec::new(),
            shapes: Vec::new(),
            extras: Vec::new(),
            index: Index::default(),
            recent: Vec::new(),
        }
    }
}

impl<T: Compact> Table<T> {
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// Bytes held (columns, shapes, extras), for the memory accounts.
    pub fn heap_bytes(&self) -> usize {
        self.starts.capacity() * 8
            + self.rest.capacity() * std::mem::size_of::<Rest>()
            + self.shapes.capacity() * std::mem::size_of::<T::Shape>()
            + self.extras.capacity() * std::mem::size_of::<(u32, u64, T::Extra)>()
    }

    fn extra_of(&self, i: usize) -> &(u32, u64, T::Extra) {
        let k = self.extras.partition_point(|e| (e.0 as usize) < i);
        &self.extras[k]
    }

    fn end_of(&self, i: usize) -> u64 {
        let r = &self.rest[i];
        if r.shape & EXTRA == 0 {
            self.starts[i] + r.dur as u64
        } else {
            self.extra_of(i).1
        }
    }

    #[inline]
    fn join(&self, i: usize) -> T {
        let (start, r) = (self.starts[i], &self.rest[i]);
        let shape = &self.shapes[(r.shape & !EXTRA) as usize];
        if r.shape & EXTRA == 0 {
            T::join(
                start,
                start + r.dur as u64,
                r.corr,
                shape,
                &T::Extra::default(),
            )
        } else {
            let (_, end, x) = self.extra_of(i);
            T::join(start, *end, r.corr, shape, x)
        }
    }

    /// The `i`th record (`None` past the end).
    pub fn get(&self, i: usize) -> Option<T> {
        (i < self.len()).then(|| self.join(i))
    }

    /// The `i`th record; panics past the end, as indexing a slice does.
    pub fn at(&self, i: usize) -> T {
        assert!(i < self.len(), "row {i} of {}", self.len());
        self.join(i)
    }

    /// The `i`th record's start, without building the record.
    pub fn start(&self, i: usize) -> u64 {
        self.starts[i]
    }

    /// The `i`th record's end, without building the record.
    pub fn end(&self, i: usize) -> u64 {
        self.end_of(i)
    }

    pub fn first(&self) -> Option<T> {
        self.get(0)
    }

    pub fn last(&self) -> Option<T> {
        self.len().checked_sub(1).map(|i| self.join(i))
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
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if pred(&self.join(mid)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The first index whose start is not below `t` (a search on the start column).
    pub fn first_starting_at(&self, t: u64) -> usize {
        self.starts.partition_point(|&s| s < t)
    }

    fn shape_id(&mut self, s: T::Shape) -> u32 {
        if self.recent.is_empty() {
            self.recent = vec![u32::MAX; SLOTS];
        }
        let slot = T::slot(&s) as usize & (SLOTS - 1);
        let r = self.recent[slot];
        if (r as usize) < self.shapes.len() && self.shapes[r as usize] == s {
            return r;
        }
        let i = self.hashed_shape_id(s);
        self.recent[slot] = i;
        i
    }

    fn hashed_shape_id(&mut self, s: T::Shape) -> u32 {
        if self.index.len() != self.shapes.len() {
            self.index = (self.shapes.iter().cloned())
                .zip(0u32..)
                .collect::<Index<T::Shape>>();
        }
        if let Some(&i) = self.index.get(&s) {
            return i;
        }
        let i = self.shapes.len() as u32;
        assert!(i < EXTRA, "more than 2^31 distinct shapes");
        self.shapes.push(s.clone());
        self.index.insert(s, i);
        i
    }

    /// The row of `x`, and its extra when it needs one.
    fn make_row(&mut self, x: T) -> (u64, Rest, Option<(u64, T::Extra)>) {
        let (start, end, corr) = x.key();
        let (shape, extra) = x.split();
        let shape = self.shape_id(shape);
        let dur = end.wrapping_sub(start);
        if end >= start && dur <= u32::MAX as u64 && extra == T::Extra::default() {
            let r = Rest {
                dur: dur as u32,
                corr,
                shape,
            };
            return (start, r, None);
        }
        let r = Rest {
            dur: 0,
            corr,
            shape: shape | EXTRA,
        };
        (start, r, Some((end, extra)))
    }

    pub fn push(&mut self, x: T) {
        let row = self.len() as u32;
        let (start, r, extra) = self.make_row(x);
        self.starts.push(start);
        self.rest.push(r);
        if let Some((end, x)) = extra {
            self.extras.push((row, end, x));
        }
    }

    /// Replaces the `i`th record with what `f` makes of it.
    pub fn update(&mut self, i: usize, f: impl FnOnce(&mut T)) {
        let mut x = self.at(i);
        f(&mut x);
        let (start, r, extra) = self.make_row(x);
        let k = self.extras.partition_point(|e| (e.0 as usize) < i);
        let had = self.extras.get(k).is_some_and(|e| e.0 as usize == i);
        match (had, extra) {
            (true, Some((end, x))) => self.extras[k] = (i as u32, end, x),
            (true, None) => {
                self.extras.remove(k);
            }
            (false, Some((end, x))) => self.extras.insert(k, (i as u32, end, x)),
            (false, None) => {}
        }
        self.starts[i] = start;
        self.rest[i] = r;
    }

    /// Changes every shape that `f` changes (it must keep distinct shapes distinct).
    pub fn map_shapes(&mut self, mut f: impl FnMut(&mut T::Shape)) {
        self.shapes.iter_mut().for_each(&mut f);
        self.index.clear();
        self.recent.clear();
    }

    /// Moves `other`'s records to the end of this table.
    pub fn append(&mut self, other: &mut Self) {
        let map: Vec<u32> = std::mem::take(&mut other.shapes)
            .into_iter()
            .map(|s| self.shape_id(s))
            .collect();
        let base = self.len() as u32;
        self.extras
            .extend(other.extras.drain(..).map(|(r, e, x)| (r + base, e, x)));
        self.starts.append(&mut other.starts);
        self.rest.extend(other.rest.drain(..).map(|mut r| {
            r.shape = map[(r.shape & !EXTRA) as usize] | (r.shape & EXTRA);
            r
        }));
        other.index.clear();
    }

    /// Keeps the records `f` accepts, in place.
    pub fn retain(&mut self, mut f: impl FnMut(&T) -> bool) {
        // Rows move down to j <= i, and their extras down to kept <= k: the extras of
        // the rows not yet seen stay where they were, in row order.
        let (mut j, mut k, mut kept) = (0, 0, 0);
        for i in 0..self.len() {
            let keep = f(&self.join(i));
            if self.rest[i].shape & EXTRA != 0 {
                if keep {
                    self.extras.swap(kept, k);
                    self.extras[kept].0 = j as u32;
                    kept += 1;
                }
                k += 1;
            }
            if keep {
                self.starts[j] = self.starts[i];
                self.rest[j] = self.rest[i];
                j += 1;
            }
        }
        self.starts.truncate(j);
        self.rest.truncate(j);
        self.extras.truncate(kept);
    }

    pub fn reserve_exact(&mut self, n: usize) {
        self.starts.reserve_exact(n);
        self.rest.reserve_exact(n);
    }

    /// Sorts by (start, end), then [`Compact::tie`].
    pub fn sort(&mut self) {
        let n = self.len() as u32;
        let sorted = (1..self.len())
            .all(|i| (self.starts[i - 1], self.end_of(i - 1)) < (self.starts[i], self.end_of(i)));
        if sorted {
            return;
        }
        let mut order: Vec<u32> = (0..n).collect();
        order.sort_unstable_by(|&a, &b| {
            let (a, b) = (a as usize, b as usize);
            (self.starts[a], self.end_of(a))
                .cmp(&(self.starts[b], self.end_of(b)))
                .then_with(|| T::tie(&self.join(a), &self.join(b)))
        });
        self.gather(order);
    }

    /// Puts the rows in `order` (a permutation of them).
    fn gather(&mut self, mut order: Vec<u32>) {
        // The extras follow their rows to their new places.
        let mut extras = Vec::new();
        for (j, &i) in order.iter().enumerate() {
            if self.rest[i as usize].shape & EXTRA != 0 {
                let (_, end, x) = self.extra_of(i as usize).clone();
                extras.push((j as u32, end, x));
            }
        }
        self.extras = extras;
        // A permutation, applied in place one cycle at a time: position j takes the row
        // at order[j]; a position done is marked by order[j] = j.
        for i in 0..order.len() {
            if order[i] as usize == i {
                continue;
            }
            let (s, r) = (self.starts[i], self.rest[i]);
            let mut j = i;
            loop {
                let k = order[j] as usize;
                order[j] = j as u32;
                if k == i {
                    self.starts[j] = s;
                    self.rest[j] = r;
                    break;
                }
                self.starts[j] = self.starts[k];
                self.rest[j] = self.rest[k];
                j = k;
            }
        }
    }

    /// Done adding: the slack of growth is given back and the shape index dropped (it is
    /// rebuilt if records are added later).
    pub fn seal(&mut self) {
        self.starts.shrink_to_fit();
        self.rest.shrink_to_fit();
        self.shapes.shrink_to_fit();
        self.extras.shrink_to_fit();
        self.index = Index::default();
        self.recent = Vec::new();
    }

    /// The columns' allocations, as (address, bytes) (to map their pages ahead of the
    /// load).
    pub fn allocations(&self) -> [(usize, usize); 2] {
        [
            (self.starts.as_ptr() as usize, self.starts.capacity() * 8),
            (
                self.rest.as_ptr() as usize,
                self.rest.capacity() * std::mem::size_of::<Rest>(),
            ),
        ]
    }
}

/// The records, as a list (what the table holds, whatever order its shapes came in).
impl<T: Compact + std::fmt::Debug> std::fmt::Debug for Table<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
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
        Some(self.t.join(self.lo - 1))
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
        Some(self.t.join(self.hi))
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
    fn slot(s: &KernelShape) -> u32 {
        s.name
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
    fn slot(s: &ApiShape) -> u32 {
        s.cbid ^ s.tid.rotate_left(5)
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
        // A row that gains an extra, one that loses it, and extras that follow their
        // rows through a filter and a sort.
        a.update(1, |x| x.end = 0);
        a.update(0, |x| x.end = 6);
        assert_eq!((a.at(0).end, a.at(1).end), (6, 0));
        assert_eq!(a.extras.len(), 1);
        let want: Vec<fmt::Kernel> = a.iter().filter(|x| x.name != 2).collect();
        a.retain(|x| x.name != 2);
        assert_eq!(a.iter().collect::<Vec<_>>(), want);
        assert_eq!(a.len(), 2);
        let mut c: Table<fmt::Kernel> =
            vec![k(1, 0, 1, 1), k(2, 0, 2, 2), k(3, 4, 3, 1), k(5, 0, 4, 1)].into();
        c.retain(|x| x.name == 1);
        let got: Vec<(u64, u64)> = c.iter().map(|x| (x.start, x.end)).collect();
        assert_eq!(got, [(1, 0), (3, 4), (5, 0)]);
        let mut b: Table<fmt::Kernel> =
            vec![k(9, 0, 1, 1), k(8, 1 << 33, 2, 1), k(7, 8, 3, 1)].into();
        b.sort();
        let got: Vec<(u64, u64)> = b.iter().map(|x| (x.start, x.end)).collect();
        assert_eq!(got, [(7, 8), (8, 1 << 33), (9, 0)]);
        a.seal();
        a.push(k(50, 60, 9, 1));
        assert_eq!(a.shapes.len(), 3);
    }
}
