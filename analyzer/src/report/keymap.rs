//! Small maps for the hot loops: few distinct keys (devices, streams, threads, kernel
//! names) looked up once per event. A last-hit cache and a linear scan serve the common
//! case; a hash index with a cheap multiplicative hash takes over when keys are many.

pub use crate::model::table::{Fx, FxMap};

const LINEAR: usize = 8;

/// A map from u64 keys, in insertion order.
pub struct KeyMap<V> {
    keys: Vec<u64>,
    vals: Vec<V>,
    index: FxMap<u64, usize>,
    last: usize,
}

impl<V> Default for KeyMap<V> {
    fn default() -> Self {
        KeyMap {
            keys: Vec::new(),
            vals: Vec::new(),
            index: FxMap::default(),
            last: 0,
        }
    }
}

impl<V> KeyMap<V> {
    pub fn new() -> Self {
        Self::default()
    }

    #[inline]
    fn find(&mut self, k: u64) -> Option<usize> {
        if self.keys.get(self.last) == Some(&k) {
            return Some(self.last);
        }
        let i = if self.keys.len() <= LINEAR {
            self.keys.iter().position(|&x| x == k)
        } else {
            self.index.get(&k).copied()
        }?;
        self.last = i;
        Some(i)
    }

    #[inline]
    pub fn entry(&mut self, k: u64, make: impl FnOnce() -> V) -> &mut V {
        let i = match self.find(k) {
            Some(i) => i,
            None => {
                let i = self.keys.len();
                self.keys.push(k);
                self.vals.push(make());
                if self.keys.len() > LINEAR {
                    if self.index.is_empty() {
                        for (j, &x) in self.keys.iter().enumerate() {
                            self.index.insert(x, j);
                        }
                    } else {
                        self.index.insert(k, i);
                    }
                }
                self.last = i;
                i
            }
        };
        &mut self.vals[i]
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn into_pairs(self) -> impl Iterator<Item = (u64, V)> {
        self.keys.into_iter().zip(self.vals)
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.vals.iter()
    }
}

/// A map keyed by interned string id: a dense table for ids the trace defined, a
/// [`KeyMap`] for any others.
pub struct NameMap<V> {
    slot: Vec<u32>,
    vals: Vec<(u32, V)>,
    other: KeyMap<usize>,
}

impl<V> NameMap<V> {
    pub fn new(strings: usize) -> Self {
        NameMap {
            slot: vec![0; strings.min(1 << 24)],
            vals: Vec::new(),
            other: KeyMap::new(),
        }
    }

    #[inline]
    pub fn entry(&mut self, id: u32, make: impl FnOnce() -> V) -> &mut V {
        let i = match self.slot.get(id as usize) {
            Some(&s) if s != 0 => s as usize - 1,
            Some(_) => {
                self.vals.push((id, make()));
                let i = self.vals.len() - 1;
                self.slot[id as usize] = i as u32 + 1;
                i
            }
            None => {
                let n = self.vals.len();
                let i = *self.other.entry(id as u64, || n);
                if i == n {
                    self.vals.push((id, make()));
                }
                i
            }
        };
        &mut self.vals[i].1
    }

    pub fn into_pairs(self) -> impl Iterator<Item = (u32, V)> {
        self.vals.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keymap_grows_past_linear() {
        let mut m: KeyMap<u64> = KeyMap::new();
        for round in 0..3 {
            for k in 0..100u64 {
                *m.entry(k * 7919, || 0) += k;
            }
            assert_eq!(m.len(), 100, "round {round}");
        }
        let pairs: Vec<_> = m.into_pairs().collect();
        assert_eq!(pairs[3], (3 * 7919, 9));
    }

    #[test]
    fn namemap_dense_and_sparse() {
        let mut m: NameMap<u32> = NameMap::new(4);
        *m.entry(2, || 0) += 1;
        *m.entry(2, || 0) += 1;
        *m.entry(u32::MAX, || 0) += 5;
        *m.entry(u32::MAX, || 0) += 5;
        *m.entry(0, || 0) += 1;
        let mut v: Vec<_> = m.into_pairs().collect();
        v.sort();
        assert_eq!(v, vec![(0, 1), (2, 2), (u32::MAX, 10)]);
    }
}
