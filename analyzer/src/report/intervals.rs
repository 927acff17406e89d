//! Streaming interval machinery: GPU work of a device in start order, merged into busy
//! intervals, without materialising per-event copies.

use super::ctx::Ctx;
use std::iter::Peekable;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkKind {
    Kernel,
    Memcpy,
    Memset,
}

/// One piece of GPU work (sanitised times).
#[derive(Clone, Copy, Debug)]
pub struct Work {
    pub start: u64,
    pub end: u64,
    pub corr: u32,
    pub kind: WorkKind,
    /// Index into the trace table of its kind.
    pub index: usize,
    pub stream: u32,
}

/// Which kernels a walk includes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernels {
    None,
    All,
    /// Everything but NCCL.
    Compute,
    /// NCCL only.
    Comm,
}

#[derive(Clone, Copy, Debug)]
pub struct Select {
    pub kernels: Kernels,
    pub copies: bool,
    pub memsets: bool,
}

impl Select {
    pub const ALL: Select = Select {
        kernels: Kernels::All,
        copies: true,
        memsets: true,
    };
    pub const KERNELS: Select = Select {
        kernels: Kernels::All,
        copies: false,
        memsets: false,
    };
    pub const COMPUTE: Select = Select {
        kernels: Kernels::Compute,
        copies: false,
        memsets: false,
    };
    pub const COMM: Select = Select {
        kernels: Kernels::Comm,
        copies: false,
        memsets: false,
    };
}

/// GPU work on one device (or all), in start order, merged from the three tables.
pub struct GpuWork<'c, 'a> {
    ctx: &'c Ctx<'a>,
    dev: Option<u32>,
    sel: Select,
    ki: usize,
    mi: usize,
    si: usize,
    hk: Option<Work>,
    hm: Option<Work>,
    hs: Option<Work>,
}

impl<'c, 'a> GpuWork<'c, 'a> {
    pub fn new(ctx: &'c Ctx<'a>, dev: Option<u32>, sel: Select) -> Self {
        GpuWork {
            ctx,
            dev,
            sel,
            ki: 0,
            mi: 0,
            si: 0,
            hk: None,
            hm: None,
            hs: None,
        }
    }

    fn dev_ok(&self, d: u32) -> bool {
        !matches!(self.dev, Some(x) if x != d)
    }

    fn fill(&mut self) {
        let t = self.ctx.t;
        if self.hk.is_none() && self.sel.kernels != Kernels::None {
            while self.ki < t.kernels.len() {
                let i = self.ki;
                self.ki += 1;
                let k = t.kernels.at(i);
                if !self.dev_ok(k.device) {
                    continue;
                }
                let keep = match self.sel.kernels {
                    Kernels::All => true,
                    Kernels::Compute => !self.ctx.is_comm(&k),
                    Kernels::Comm => self.ctx.is_comm(&k),
                    Kernels::None => false,
                };
                if !keep {
                    continue;
                }
                if let Some((s, e)) = self.ctx.sane(k.start, k.end) {
                    self.hk = Some(Work {
                        start: s,
                        end: e,
                        corr: k.corr,
                        kind: WorkKind::Kernel,
                        index: i,
                        stream: k.stream,
                    });
                    break;
                }
            }
        }
        if self.hm.is_none() && self.sel.copies {
            while self.mi < t.memcpys.len() {
                let i = self.mi;
                self.mi += 1;
                let m = &t.memcpys[i];
                if !self.dev_ok(m.device) {
                    continue;
                }
                if let Some((s, e)) = self.ctx.sane(m.start, m.end) {
                    self.hm = Some(Work {
                        start: s,
                        end: e,
                        corr: m.corr,
                        kind: WorkKind::Memcpy,
                        index: i,
                        stream: m.stream,
                    });
                    break;
                }
            }
        }
        if self.hs.is_none() && self.sel.memsets {
            while self.si < t.memsets.len() {
                let i = self.si;
                self.si += 1;
                let m = &t.memsets[i];
                if !self.dev_ok(m.device) {
                    continue;
                }
                if let Some((s, e)) = self.ctx.sane(m.start, m.end) {
                    self.hs = Some(Work {
                        start: s,
                        end: e,
                        corr: m.corr,
                        kind: WorkKind::Memset,
                        index: i,
                        stream: m.stream,
                    });
                    break;
                }
            }
        }
    }
}

impl Iterator for GpuWork<'_, '_> {
    type Item = Work;
    fn next(&mut self) -> Option<Work> {
        self.fill();
        let key = |w: &Option<Work>| w.map(|w| w.start).unwrap_or(u64::MAX);
        let (k, m, s) = (key(&self.hk), key(&self.hm), key(&self.hs));
        if self.hk.is_some() && k <= m && k <= s {
            self.hk.take()
        } else if self.hm.is_some() && m <= s {
            self.hm.take()
        } else {
            self.hs.take()
        }
    }
}

/// A maximal interval in which some selected work was running.
#[derive(Clone, Copy, Debug)]
pub struct Busy {
    pub start: u64,
    pub end: u64,
    /// The work that opened the interval.
    pub first: Work,
}

/// Merges work (in start order) into disjoint busy intervals.
pub struct Union<I: Iterator<Item = Work>> {
    inner: Peekable<I>,
}

impl<I: Iterator<Item = Work>> Union<I> {
    pub fn new(inner: I) -> Self {
        Union {
            inner: inner.peekable(),
        }
    }
}

impl<I: Iterator<Item = Work>> Iterator for Union<I> {
    type Item = Busy;
    fn next(&mut self) -> Option<Busy> {
        let first = self.inner.next()?;
        let mut b = Busy {
            start: first.start,
            end: first.end,
            first,
        };
        while let Some(w) = self.inner.peek() {
            if w.start <= b.end {
                b.end = b.end.max(w.end);
                self.inner.next();
            } else {
                break;
            }
        }
        Some(b)
    }
}

pub fn busy<'c, 'a>(ctx: &'c Ctx<'a>, dev: Option<u32>, sel: Select) -> Union<GpuWork<'c, 'a>> {
    Union::new(GpuWork::new(ctx, dev, sel))
}

/// Length of `[s, e)` inside `[w0, w1)`.
#[inline]
pub fn clip_len(s: u64, e: u64, w0: u64, w1: u64) -> u64 {
    let a = s.max(w0);
    let b = e.min(w1);
    b.saturating_sub(a)
}

/// Total length of disjoint sorted intervals inside a window.
pub fn len_in(iv: impl Iterator<Item = (u64, u64)>, w0: u64, w1: u64) -> u64 {
    let mut total = 0;
    for (s, e) in iv {
        if s >= w1 {
            break;
        }
        total += clip_len(s, e, w0, w1);
    }
    total
}

/// Length of the intersection of two streams of disjoint sorted intervals, in a window.
pub fn intersect_len(
    a: impl Iterator<Item = (u64, u64)>,
    b: impl Iterator<Item = (u64, u64)>,
    w0: u64,
    w1: u64,
) -> u64 {
    let mut a = a.peekable();
    let mut b = b.peekable();
    let mut total = 0;
    while let (Some(&(as_, ae)), Some(&(bs, be))) = (a.peek(), b.peek()) {
        if as_ >= w1 || bs >= w1 {
            break;
        }
        let s = as_.max(bs).max(w0);
        let e = ae.min(be).min(w1);
        total += e.saturating_sub(s);
        if ae <= be {
            a.next();
        } else {
            b.next();
        }
    }
    total
}
