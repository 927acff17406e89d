//! Per-process facts every analysis needs: sane time bounds, the devices, what each API
//! call was (as a host-side cause), and correlation-id lookups.

use super::classify::{self, ApiKind};
use super::keymap::KeyMap;
use crate::model::table::{Compact, Table};
use crate::model::trace::Trace;
use gputrace_format::{self as fmt, CopyKind, MemKind};

/// Records further than this from the bulk of the trace are treated as corrupt.
const SANE_RADIUS_NS: u64 = 86_400 * 1_000_000_000;
/// A sync that starts this soon after a copy call on the same thread finishes that copy.
const COPY_THEN_SYNC_NS: u64 = 50_000;
/// At most this many devices are analysed (a corrupt file could name millions).
pub const MAX_DEVICES: usize = 64;

/// What a host thread inside a call was doing, as a cause of GPU idle time.
/// Lower values win when several threads are in calls at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum HostClass {
    /// The collector was blind (another CUPTI user): nothing can be said.
    Blind = 0,
    /// Inside a copy from pageable host memory (staged by the driver, effectively blocking).
    Pageable = 1,
    /// Inside a blocking copy (or the sync that finishes one) from pinned memory.
    SyncMemcpy = 2,
    /// Blocked until the GPU drained: stream/device/event sync, `.item()`, cudaFree.
    Implicit = 3,
    /// Issuing GPU work: launches, async copies, memsets.
    Issue = 4,
    /// In some other CUDA call (allocation, unknown).
    Other = 5,
}

pub const HOST_CLASSES: usize = 6;

impl HostClass {
    pub fn from_index(i: usize) -> HostClass {
        match i {
            0 => HostClass::Blind,
            1 => HostClass::Pageable,
            2 => HostClass::SyncMemcpy,
            3 => HostClass::Implicit,
            4 => HostClass::Issue,
            _ => HostClass::Other,
        }
    }
    /// Calls that keep the host waiting for the GPU.
    pub fn blocks(self) -> bool {
        matches!(
            self,
            HostClass::Pageable | HostClass::SyncMemcpy | HostClass::Implicit
        )
    }
}

/// A gap may be launch latency up to this many times the trace's own cost of one launch.
pub const LAUNCH_GAP_MULT: u64 = 4;
/// ... and always up to this long (the "back to back" distance between calls,
/// `idle::QUIET_LAUNCH_NS`)...
pub const LAUNCH_GAP_FLOOR_NS: u64 = 100_000;
/// ... but never longer than this (the host samples' short stretch: above it, the
/// feeding thread's CPU time is host work, `cpu_bound`).
pub const LAUNCH_GAP_CEIL_NS: u64 = super::host::CPU_LAUNCH_NS;

/// How long a GPU gap may be and still be launch latency (`launch_bound`), from what the
/// trace measured: a launch costs the host the median time between two launch calls of
/// one thread (Python and framework overhead included) or, if longer, the median launch
/// call. A gap of up to [`LAUNCH_GAP_MULT`] (4) launches is of the order of a launch;
/// the bound is kept within [[`LAUNCH_GAP_FLOOR_NS`], [`LAUNCH_GAP_CEIL_NS`]]
/// (100 us to 1 ms). E.g. a torch.compile(mode="reduce-overhead") job replaying a graph
/// every 96 us: gaps up to 384 us are launch latency; its 7 ms gaps are host work. Eager
/// PyTorch launching every 10 us: up to 100 us (the floor).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchGap {
    /// Launch calls measured (host API records, else the symbol hooks' launches).
    pub calls: u64,
    /// Median launch call, and median time from one launch call to the next on a thread.
    pub call_p50_ns: u64,
    pub interval_p50_ns: u64,
    /// The longest gap that may be charged to `launch_bound`.
    pub max_ns: u64,
}

impl LaunchGap {
    /// From (thread, start, end) of each launch call, in start order per thread.
    pub fn of(launches: impl Iterator<Item = (u32, u64, u64)> + Clone) -> LaunchGap {
        // The medians in two passes over the calls, in fixed memory (a series of every
        // call's duration and interval was 16 bytes a call); exact below 4.29 s, and
        // taken again in full past it.
        let (mut call, mut ival) = (RadixMedian::default(), RadixMedian::default());
        spans(launches.clone(), |d, i| {
            call.count(d);
            if let Some(i) = i {
                ival.count(i)
            }
        });
        call.settle();
        ival.settle();
        spans(launches.clone(), |d, i| {
            call.refine(d);
            if let Some(i) = i {
                ival.refine(i)
            }
        });
        let calls = call.n;
        let (call, ival) = match (call.get(), ival.get()) {
            (Some(c), Some(i)) => (c, i),
            _ => {
                let (mut d, mut i) = (Vec::new(), Vec::new());
                spans(launches, |x, y| {
                    d.push(x);
                    i.extend(y);
                });
                (median(&mut d), median(&mut i))
            }
        };
        LaunchGap {
            calls,
            call_p50_ns: call,
            interval_p50_ns: ival,
            max_ns: call
                .max(ival)
                .saturating_mul(LAUNCH_GAP_MULT)
                .clamp(LAUNCH_GAP_FLOOR_NS, LAUNCH_GAP_CEIL_NS),
        }
    }

    /// The launch calls of a trace: host API records, else the symbol hooks' launches
    /// (without host events: the floor, which the GPU-only rule's 20 us is under).
    pub fn of_ctx(ctx: &Ctx) -> LaunchGap {
        let t = ctx.t;
        if ctx.has_api() {
            LaunchGap::of(
                (t.apis.iter().zip(ctx.api.kinds()))
                    .filter(|(_, k)| *k == ApiKind::Launch)
                    .filter_map(|(a, _)| ctx.sane(a.start, a.end).map(|(s, e)| (a.tid, s, e))),
            )
        } else {
            LaunchGap::of(
                t.host_calls
                    .iter()
                    .filter(|c| {
                        gputrace_format::hostcall_info(c.call).1
                            == gputrace_format::HostCallClass::Launch
                    })
                    .filter_map(|c| ctx.sane(c.start, c.end).map(|(s, e)| (c.tid, s, e))),
            )
        }
    }
}

/// What each API call does and its host class, packed in a byte (4 bits each).
#[derive(Debug, Default)]
pub struct ApiTags(Vec<u8>);

impl ApiTags {
    const KINDS: [ApiKind; 9] = [
        ApiKind::Launch,
        ApiKind::CopyAsync,
        ApiKind::CopySync,
        ApiKind::Memset,
        ApiKind::Sync,
        ApiKind::StreamWait,
        ApiKind::Alloc,
        ApiKind::Free,
        ApiKind::Other,
    ];
    const CLASSES: [HostClass; HOST_CLASSES] = [
        HostClass::Blind,
        HostClass::Pageable,
        HostClass::SyncMemcpy,
        HostClass::Implicit,
        HostClass::Issue,
        HostClass::Other,
    ];

    fn pack((k, c): (ApiKind, HostClass)) -> u8 {
        let k = Self::KINDS.iter().position(|x| *x == k).unwrap_or(8) as u8;
        k | (c as u8) << 4
    }

    /// Call `i`'s kind (`None` past the end).
    pub fn kind(&self, i: usize) -> Option<ApiKind> {
        self.0.get(i).map(|b| Self::KINDS[(b & 15) as usize])
    }

    /// Call `i`'s host class (`None` past the end).
    pub fn class(&self, i: usize) -> Option<HostClass> {
        self.0.get(i).map(|b| Self::CLASSES[(b >> 4) as usize])
    }

    pub fn kinds(&self) -> impl Iterator<Item = ApiKind> + Clone + '_ {
        self.0.iter().map(|b| Self::KINDS[(b & 15) as usize])
    }

    pub fn classes(&self) -> impl Iterator<Item = HostClass> + '_ {
        self.0.iter().map(|b| Self::CLASSES[(b >> 4) as usize])
    }
}

/// Calls `f` with each launch's duration and its interval since the same thread's
/// previous launch (none for a thread's first).
fn spans(launches: impl Iterator<Item = (u32, u64, u64)>, mut f: impl FnMut(u64, Option<u64>)) {
    let mut last: std::collections::HashMap<u32, u64> = Default::default();
    for (tid, s, e) in launches {
        let i = last.insert(tid, s).map(|p| s.saturating_sub(p));
        f(e.saturating_sub(s), i);
    }
}

/// The median (the upper one of an even count), 0 for none.
fn median(v: &mut [u64]) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let m = v.len() / 2;
    *v.select_nth_unstable(m).1
}

/// [`median`] of values seen twice, in 2 x 2^16 counters: the first pass counts the
/// values' high 16 bits (of 32), which finds the median's; the second counts the low 16
/// bits of the values that share them. Values of 2^32 - 1 and more count as that.
#[derive(Default)]
struct RadixMedian {
    n: u64,
    high: Vec<u32>,
    low: Vec<u32>,
    /// The median's high bits and how many values are below them.
    bucket: usize,
    below: u64,
}

impl RadixMedian {
    fn clamp(v: u64) -> usize {
        v.min(u32::MAX as u64) as usize
    }
    fn count(&mut self, v: u64) {
        if self.high.is_empty() {
            self.high = vec![0; 1 << 16];
        }
        self.high[Self::clamp(v) >> 16] += 1;
        self.n += 1;
    }
    fn settle(&mut self) {
        let rank = self.n / 2;
        let mut below = 0u64;
        for (b, &c) in self.high.iter().enumerate() {
            if below + c as u64 > rank {
                (self.bucket, self.below) = (b, below);
                self.low = vec![0; 1 << 16];
                return;
            }
            below += c as u64;
        }
    }
    fn refine(&mut self, v: u64) {
        let v = Self::clamp(v);
        if v >> 16 == self.bucket && !self.low.is_empty() {
            self.low[v & 0xffff] += 1;
        }
    }
    /// The median; None when it is at the clamp (not exact).
    fn get(&self) -> Option<u64> {
        if self.n == 0 {
            return Some(0);
        }
        let mut rank = self.n / 2 - self.below;
        for (i, &c) in self.low.iter().enumerate() {
            if rank < c as u64 {
                let v = ((self.bucket as u64) << 16) | i as u64;
                return (v < u32::MAX as u64).then_some(v);
            }
            rank -= c as u64;
        }
        None
    }
}

/// Maps correlation ids to table indices: a dense table when ids are compact, else a
/// sorted list searched by bisection.
#[derive(Debug, Default)]
pub enum CorrIndex {
    #[default]
    Empty,
    Dense {
        base: u32,
        /// index + 1, 0 = none
        slots: Vec<u32>,
    },
    Sparse(Vec<(u32, u32)>),
}

impl CorrIndex {
    pub fn build(n: usize, corr_of: impl Fn(usize) -> u32) -> CorrIndex {
        let n = n.min(u32::MAX as usize - 1);
        let mut range = CorrRange::default();
        for i in 0..n {
            range.see(corr_of(i));
        }
        let mut b = CorrIndexBuilder::new(range);
        for i in 0..n {
            b.push(corr_of(i), i);
        }
        b.finish()
    }

    pub fn get(&self, corr: u32) -> Option<usize> {
        if corr == 0 {
            return None;
        }
        match self {
            CorrIndex::Empty => None,
            CorrIndex::Dense { base, slots } => {
                let off = corr.checked_sub(*base)? as usize;
                let s = *slots.get(off)?;
                (s != 0).then(|| s as usize - 1)
            }
            CorrIndex::Sparse(v) => v
                .binary_search_by_key(&corr, |p| p.0)
                .ok()
                .map(|i| v[i].1 as usize),
        }
    }

    pub fn heap_bytes(&self) -> usize {
        match self {
            CorrIndex::Empty => 0,
            CorrIndex::Dense { slots, .. } => slots.capacity() * 4,
            CorrIndex::Sparse(v) => v.capacity() * 8,
        }
    }
}

/// Smallest and largest non-zero correlation id, and how many there are.
#[derive(Clone, Copy, Debug)]
pub struct CorrRange {
    lo: u32,
    hi: u32,
    count: usize,
}

impl Default for CorrRange {
    fn default() -> Self {
        CorrRange {
            lo: u32::MAX,
            hi: 0,
            count: 0,
        }
    }
}

impl CorrRange {
    #[inline]
    pub fn see(&mut self, c: u32) {
        if c != 0 {
            self.lo = self.lo.min(c);
            self.hi = self.hi.max(c);
            self.count += 1;
        }
    }
}

/// Fills a [`CorrIndex`] in one pass once the id range is known.
pub enum CorrIndexBuilder {
    Empty,
    Dense { base: u32, slots: Vec<u32> },
    Sparse(Vec<(u32, u32)>),
}

impl CorrIndexBuilder {
    pub fn new(r: CorrRange) -> Self {
        if r.count == 0 {
            return CorrIndexBuilder::Empty;
        }
        let range = (r.hi - r.lo) as usize + 1;
        if range <= 3 * r.count + 4096 {
            CorrIndexBuilder::Dense {
                base: r.lo,
                slots: vec![0; range],
            }
        } else {
            CorrIndexBuilder::Sparse(Vec::with_capacity(r.count))
        }
    }

    #[inline]
    pub fn push(&mut self, corr: u32, i: usize) {
        if corr == 0 {
            return;
        }
        match self {
            CorrIndexBuilder::Empty => {}
            CorrIndexBuilder::Dense { base, slots } => {
                if let Some(s) = corr
                    .checked_sub(*base)
                    .and_then(|o| slots.get_mut(o as usize))
                {
                    if *s == 0 {
                        *s = i as u32 + 1;
                    }
                }
            }
            CorrIndexBuilder::Sparse(v) => v.push((corr, i as u32)),
        }
    }

    pub fn finish(self) -> CorrIndex {
        match self {
            CorrIndexBuilder::Empty => CorrIndex::Empty,
            CorrIndexBuilder::Dense { base, slots } => CorrIndex::Dense { base, slots },
            CorrIndexBuilder::Sparse(mut v) => {
                // Stable sort keeps the first call of a repeated id first.
                v.sort_by_key(|p| p.0);
                v.dedup_by_key(|p| p.0);
                CorrIndex::Sparse(v)
            }
        }
    }
}

/// The per-process context.
pub struct Ctx<'a> {
    pub t: &'a Trace,
    /// Sanity bounds: records starting outside them are ignored.
    pub lo: u64,
    pub hi: u64,
    /// First and last timestamp of any sane interval (0, 0 when there is none).
    pub t0: u64,
    pub t1: u64,
    /// Devices with work, busiest first is not implied: sorted by id.
    pub devices: Vec<u32>,
    /// Sane GPU works (kernels, copies, memsets) per analysed device.
    pub device_works: Vec<(u32, u64)>,
    /// The device with the most kernel time.
    pub primary: Option<u32>,
    /// Devices dropped because there were too many.
    pub devices_dropped: usize,
    /// Per string id: the name is an NCCL kernel.
    pub comm_name: Vec<bool>,
    /// Per API call: what it does and its host class (a byte each).
    pub api: ApiTags,
    pub api_by_corr: CorrIndex,
    pub memcpy_by_corr: CorrIndex,
    /// API indices of copy calls that kept the host waiting: blocking copies, async copies
    /// finished by an immediate sync, async copies from pageable memory.
    pub blocking_copies: Vec<u32>,
    /// Records with impossible times (end before start, far outside the trace).
    pub bad_records: u64,
    pub blind: Vec<(u64, u64, String)>,
    /// Host samples, indexed (None when the trace has none).
    pub host: Option<super::host::HostCpu>,
    /// The longest GPU gap that may be launch latency, from the trace's launch calls.
    pub launch_gap: LaunchGap,
}

impl<'a> Ctx<'a> {
    pub fn new(t: &'a Trace) -> Ctx<'a> {
        // A reference time from the middle of the bulk of the records (tables are sorted).
        let reference = table_median_start(&t.kernels)
            .or_else(|| table_median_start(&t.apis))
            .or_else(|| median_start(&t.memcpys, |m| m.start))
            .or_else(|| median_start(&t.memsets, |m| m.start))
            .or_else(|| median_start(&t.syncs, |m| m.start))
            .unwrap_or(0);
        let lo = reference.saturating_sub(SANE_RADIUS_NS).max(1);
        let hi = reference.saturating_add(SANE_RADIUS_NS);
        let mut c = Ctx {
            t,
            lo,
            hi,
            t0: 0,
            t1: 0,
            devices: Vec::new(),
            device_works: Vec::new(),
            primary: None,
            devices_dropped: 0,
            comm_name: t
                .strings
                .iter()
                .map(|s| classify::is_comm_kernel(s))
                .collect(),
            api: ApiTags::default(),
            api_by_corr: CorrIndex::Empty,
            memcpy_by_corr: CorrIndex::Empty,
            blocking_copies: Vec::new(),
            bad_records: 0,
            blind: Vec::new(),
            host: super::host::HostCpu::new(t),
            launch_gap: LaunchGap::of(std::iter::empty()),
        };
        let api_corrs = c.scan();
        c.blind = c.blind_windows();
        c.memcpy_by_corr = CorrIndex::build(t.memcpys.len(), |i| t.memcpys[i].corr);
        c.classify_apis(api_corrs);
        c.launch_gap = LaunchGap::of_ctx(&c);
        c
    }

    /// The interval clipped to sanity, or None for a record to ignore.
    #[inline]
    pub fn sane(&self, start: u64, end: u64) -> Option<(u64, u64)> {
        if start < self.lo || start > self.hi {
            return None;
        }
        Some((start, end.clamp(start, self.hi)))
    }

    /// Sanity, span and devices; returns the range of the API calls' correlation ids.
    fn scan(&mut self) -> CorrRange {
        let t = self.t;
        let (slo, shi) = (self.lo, self.hi);
        let mut lo = u64::MAX;
        let mut hi = 0u64;
        let mut bad = 0u64;
        // device -> (kernel ns, works)
        let mut work: KeyMap<(u64, u64)> = KeyMap::new();
        let mut see = |s: u64, e: u64| -> Option<u64> {
            if s < slo || s > shi || e < s || e > shi {
                bad += 1;
            }
            if s < slo || s > shi {
                return None;
            }
            let e = e.clamp(s, shi);
            lo = lo.min(s);
            hi = hi.max(e);
            Some(e - s)
        };
        for k in &t.kernels {
            if let Some(d) = see(k.start, k.end) {
                let w = work.entry(k.device as u64, || (0, 0));
                w.0 += d;
                w.1 += 1;
            }
        }
        for m in &t.memcpys {
            if see(m.start, m.end).is_some() {
                work.entry(m.device as u64, || (0, 0)).1 += 1;
            }
        }
        for m in &t.memsets {
            if see(m.start, m.end).is_some() {
                work.entry(m.device as u64, || (0, 0)).1 += 1;
            }
        }
        let mut corrs = CorrRange::default();
        for a in t.apis.iter().take(u32::MAX as usize - 1) {
            see(a.start, a.end);
            corrs.see(a.corr);
        }
        for s in &t.syncs {
            see(s.start, s.end);
        }
        if lo <= hi {
            self.t0 = lo;
            self.t1 = hi;
        }
        self.bad_records = bad;
        let mut devs: Vec<(u32, u64, u64)> = work
            .into_pairs()
            .map(|(d, (ns, n))| (d as u32, ns, n))
            .collect();
        // Busiest first to choose which to keep, then by id.
        devs.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
        if devs.len() > MAX_DEVICES {
            self.devices_dropped = devs.len() - MAX_DEVICES;
            devs.truncate(MAX_DEVICES);
        }
        self.primary = devs
            .iter()
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
            .map(|d| d.0);
        self.devices = devs.iter().map(|d| d.0).collect();
        self.devices.sort_unstable();
        self.device_works = devs.iter().map(|d| (d.0, d.2)).collect();
        corrs
    }

    /// Classifies every API call and indexes the calls by correlation id, in one pass.
    fn classify_apis(&mut self, corrs: CorrRange) {
        let t = self.t;
        let mut index = CorrIndexBuilder::new(corrs);
        let mut tags = ApiTags(Vec::with_capacity(t.apis.len()));
        let mut last_on_thread: KeyMap<usize> = KeyMap::new();
        let mut blocking = Vec::new();
        for (i, a) in t.apis.iter().enumerate().take(u32::MAX as usize - 1) {
            index.push(a.corr, i);
            let kind = classify::api_kind(&a, t.str(a.name));
            let memcpy = |idx: usize| {
                self.memcpy_by_corr
                    .get(t.apis.at(idx).corr)
                    .map(|j| &t.memcpys[j])
            };
            let class = match kind {
                ApiKind::Launch | ApiKind::Memset | ApiKind::StreamWait => HostClass::Issue,
                ApiKind::CopyAsync => match memcpy(i) {
                    Some(m) if classify::host_mem_kind(m) == MemKind::Pageable => {
                        blocking.push(i as u32);
                        HostClass::Pageable
                    }
                    _ => HostClass::Issue,
                },
                ApiKind::CopySync => {
                    blocking.push(i as u32);
                    copy_episode_class(&a, memcpy(i))
                }
                ApiKind::Sync => match last_on_thread.entry(a.tid as u64, || usize::MAX) {
                    &mut j
                        if j != usize::MAX
                            && matches!(
                                tags.kind(j),
                                Some(ApiKind::CopyAsync | ApiKind::CopySync)
                            )
                            && a.start >= t.apis.end(j)
                            && a.start - t.apis.end(j) <= COPY_THEN_SYNC_NS =>
                    {
                        if blocking.last() != Some(&(j as u32)) {
                            blocking.push(j as u32);
                        }
                        copy_episode_class(&t.apis.at(j), memcpy(j))
                    }
                    _ => HostClass::Implicit,
                },
                ApiKind::Free => HostClass::Implicit,
                ApiKind::Alloc | ApiKind::Other => HostClass::Other,
            };
            tags.0.push(ApiTags::pack((kind, class)));
            *last_on_thread.entry(a.tid as u64, || i) = i;
        }
        self.api = tags;
        self.blocking_copies = blocking;
        self.api_by_corr = index.finish();
    }

    /// Blind windows as [`Trace::blind_windows`] pairs them, an open one running to the
    /// end of the sane records (without a second scan of the trace).
    fn blind_windows(&self) -> Vec<(u64, u64, String)> {
        let t = self.t;
        if !t
            .states
            .iter()
            .any(|s| s.1 == gputrace_format::CollectorState::Blind as u8)
        {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut open: Option<(u64, u32)> = None;
        for &(ts, st, reason) in &t.states {
            match gputrace_format::CollectorState::from_u8(st) {
                Some(gputrace_format::CollectorState::Blind) if open.is_none() => {
                    open = Some((ts, reason));
                }
                Some(gputrace_format::CollectorState::Blind) => {}
                Some(_) => {
                    if let Some((s, r)) = open.take() {
                        out.push((s, ts.max(s), t.str(r).to_string()));
                    }
                }
                None => {}
            }
        }
        if let Some((s, r)) = open {
            out.push((s, self.t1.max(s), t.str(r).to_string()));
        }
        out
    }

    pub fn has_api(&self) -> bool {
        !self.t.apis.is_empty()
    }

    /// The API call that produced GPU work with this correlation id.
    pub fn api_for(&self, corr: u32) -> Option<fmt::Api> {
        self.api_by_corr.get(corr).map(|i| self.t.apis.at(i))
    }

    pub fn is_comm(&self, k: &fmt::Kernel) -> bool {
        self.comm_name
            .get(k.name as usize)
            .copied()
            .unwrap_or(false)
    }

    pub fn device_info(&self, id: u32) -> Option<&'a fmt::Device> {
        self.t.devices.iter().find(|d| d.id == id)
    }

    /// Nanoseconds after the trace start.
    pub fn rel(&self, ts: u64) -> u64 {
        ts.saturating_sub(self.t0)
    }

    pub fn heap_bytes(&self) -> usize {
        self.api.0.capacity()
            + self.comm_name.capacity()
            + self.api_by_corr.heap_bytes()
            + self.memcpy_by_corr.heap_bytes()
    }
}

fn median_start<T>(v: &[T], start: impl Fn(&T) -> u64) -> Option<u64> {
    let first = v.partition_point(|x| start(x) == 0);
    v.get(first + (v.len() - first) / 2).map(start)
}

/// [`median_start`] of a compact table.
fn table_median_start<T: Compact>(v: &Table<T>) -> Option<u64> {
    let first = v.first_starting_at(1);
    (first < v.len()).then(|| v.start(first + (v.len() - first) / 2))
}

/// The cause class of a copy call that blocks (or of the sync that finishes it).
fn copy_episode_class(a: &fmt::Api, m: Option<&fmt::Memcpy>) -> HostClass {
    let dir = match m {
        Some(m) => CopyKind::from_u8(m.copy_kind),
        None => match a.arg {
            0 => CopyKind::HtoH,
            1 => CopyKind::HtoD,
            2 => CopyKind::DtoH,
            3 => CopyKind::DtoD,
            _ => CopyKind::Unknown,
        },
    };
    let host = m.map(classify::host_mem_kind).unwrap_or(MemKind::Unknown);
    match dir {
        CopyKind::DtoH | CopyKind::AtoH => {
            let bytes = m.map(|m| m.bytes).unwrap_or(a.bytes);
            if host == MemKind::Pageable && bytes >= 1 << 20 {
                HostClass::Pageable
            } else {
                HostClass::Implicit
            }
        }
        CopyKind::HtoD | CopyKind::HtoA => {
            if host == MemKind::Pageable {
                HostClass::Pageable
            } else {
                HostClass::SyncMemcpy
            }
        }
        _ => HostClass::Implicit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two-pass median against sorting, on values spread over 32 bits, crowded in
    /// one bucket, and past the clamp (where it must say it cannot tell).
    #[test]
    fn radix_median_is_the_sorted_median() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let cases: Vec<Vec<u64>> = vec![
            (0..1001).map(|_| next() % (1 << 32)).collect(),
            (0..1000).map(|_| 70_000 + next() % 50).collect(),
            vec![5],
            vec![3, 1],
            (0..11).map(|i| if i < 6 { 1 << 40 } else { i }).collect(),
        ];
        for v in cases {
            let mut m = RadixMedian::default();
            v.iter().for_each(|&x| m.count(x));
            m.settle();
            v.iter().for_each(|&x| m.refine(x));
            let want = median(&mut v.clone());
            let got = m.get();
            if want >= u32::MAX as u64 {
                assert_eq!(got, None);
            } else {
                assert_eq!(got, Some(want), "{v:?}");
            }
        }
        assert_eq!(RadixMedian::default().get(), Some(0));
        // Through LaunchGap, a median past the clamp is still exact.
        let g = LaunchGap::of((0..5u64).map(|i| (1, i << 34, (i << 34) + 7)));
        assert_eq!((g.call_p50_ns, g.interval_p50_ns), (7, 1 << 34));
    }
}
