//! Idle attribution: every stretch in which a device ran nothing is split by what the
//! host threads were doing at the time.
//!
//! Rules, in order, for an idle interval [a, b) that ends when work W starts:
//! 1. W had been fully submitted before a (its API call returned): the GPU was not
//!    waiting for the host. Short gaps (<= 20 us) are the device-side cost of running many
//!    tiny kernels (`kernel_fragmentation`); longer ones are waits on something else
//!    (events, other streams, peers): unattributed, `queued_work_waiting`.
//! 2. A host thread was blocked in a sync or blocking copy when the GPU drained at a:
//!    the host lost its run-ahead for as long as it waited while the GPU was still busy,
//!    so idle time up to the call's return plus that wait is charged to the call's cause
//!    (`implicit_sync`, `sync_memcpy`, `pageable_memcpy`).
//! 3. The rest, instant by instant, by the most telling call any thread was in:
//!    blocking copy or sync -> its cause; launch / async copy / memset -> `launch_bound`;
//!    another CUDA call -> unattributed (`other_cuda_call`); a blind window ->
//!    unattributed (`not_observed`); no call at all -> `launch_bound` when the host was
//!    between two calls less than 100 us apart (issuing back to back), else
//!    `data_starvation` (waiting for input or doing host-side work).
//!
//! Without host API events, rule 1 and the quiet-stretch test are unavailable; Sync
//! activity records still give host waits, and the rest is a GPU-only heuristic: gaps of
//! <= 20 us are `launch_bound`, a gap before a pageable copy is `pageable_memcpy` for up to
//! the copy's length, anything else is `data_starvation`.

use super::ctx::{Ctx, HostClass, HOST_CLASSES};
use super::intervals::{busy, Select, Work, WorkKind};
use gputrace_format::MemKind;

/// Gaps up to this long between already-queued work are the device's per-kernel overhead.
pub const FRAG_GAP_NS: u64 = 20_000;
/// Host calls closer than this are "back to back".
pub const QUIET_LAUNCH_NS: u64 = 100_000;
/// Slack for comparing host and GPU timestamps.
const TOL_NS: u64 = 5_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cause {
    DataStarvation = 0,
    PageableMemcpy = 1,
    SyncMemcpy = 2,
    ImplicitSync = 3,
    LaunchBound = 4,
    KernelFragmentation = 5,
    /// Unattributed: the next work was queued but the GPU did not run it.
    QueuedWait = 6,
    /// Unattributed: a host thread was in a CUDA call of no telling kind.
    OtherCall = 7,
    /// Unattributed: the collector was blind.
    NotObserved = 8,
}

pub const NCAUSE: usize = 9;

impl Cause {
    pub const ALL: [Cause; NCAUSE] = [
        Cause::DataStarvation,
        Cause::PageableMemcpy,
        Cause::SyncMemcpy,
        Cause::ImplicitSync,
        Cause::LaunchBound,
        Cause::KernelFragmentation,
        Cause::QueuedWait,
        Cause::OtherCall,
        Cause::NotObserved,
    ];
    pub fn id(self) -> &'static str {
        match self {
            Cause::DataStarvation => "data_starvation",
            Cause::PageableMemcpy => "pageable_memcpy",
            Cause::SyncMemcpy => "sync_memcpy",
            Cause::ImplicitSync => "implicit_sync",
            Cause::LaunchBound => "launch_bound",
            Cause::KernelFragmentation => "kernel_fragmentation",
            Cause::QueuedWait => "queued_work_waiting",
            Cause::OtherCall => "other_cuda_call",
            Cause::NotObserved => "not_observed",
        }
    }
    /// Causes that name a finding; the others are reported as unattributed.
    pub fn attributed(self) -> bool {
        (self as usize) < 6
    }
    fn from_host(c: HostClass) -> Cause {
        match c {
            HostClass::Blind => Cause::NotObserved,
            HostClass::Pageable => Cause::PageableMemcpy,
            HostClass::SyncMemcpy => Cause::SyncMemcpy,
            HostClass::Implicit => Cause::ImplicitSync,
            HostClass::Issue => Cause::LaunchBound,
            HostClass::Other => Cause::OtherCall,
        }
    }
}

/// An idle interval, for evidence: where it was and how much of it went to one cause.
#[derive(Clone, Copy, Debug, Default)]
pub struct Example {
    pub start: u64,
    pub len: u64,
    pub charged: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    HostApi,
    GpuOnly,
}

/// The result of attributing one device's idle time in one window.
#[derive(Clone, Debug)]
pub struct Attribution {
    pub window: (u64, u64),
    pub busy_ns: u64,
    pub idle_ns: u64,
    pub by_cause: [u64; NCAUSE],
    /// Idle intervals whose largest share went to this cause.
    pub gaps: [u64; NCAUSE],
    /// The largest charges to each cause.
    pub examples: [[Example; 3]; NCAUSE],
    pub method: Method,
}

impl Attribution {
    pub fn empty(window: (u64, u64), method: Method) -> Attribution {
        Attribution {
            window,
            busy_ns: 0,
            idle_ns: 0,
            by_cause: [0; NCAUSE],
            gaps: [0; NCAUSE],
            examples: [[Example::default(); 3]; NCAUSE],
            method,
        }
    }
    pub fn wall_ns(&self) -> u64 {
        self.window.1.saturating_sub(self.window.0)
    }
    pub fn get(&self, c: Cause) -> u64 {
        self.by_cause[c as usize]
    }
    pub fn attributed_ns(&self) -> u64 {
        Cause::ALL
            .iter()
            .filter(|c| c.attributed())
            .map(|&c| self.get(c))
            .sum()
    }
    pub fn merge(&mut self, o: &Attribution) {
        self.busy_ns += o.busy_ns;
        self.idle_ns += o.idle_ns;
        for i in 0..NCAUSE {
            self.by_cause[i] += o.by_cause[i];
            self.gaps[i] += o.gaps[i];
            for ex in o.examples[i] {
                offer(&mut self.examples[i], ex);
            }
        }
    }
}

fn offer(top: &mut [Example; 3], ex: Example) {
    if ex.charged == 0 {
        return;
    }
    if let Some(pos) = top.iter().position(|t| ex.charged > t.charged) {
        for j in (pos + 1..3).rev() {
            top[j] = top[j - 1];
        }
        top[pos] = ex;
    }
}

/// Host activity, as a sequence of segments: each is either quiet (no thread in a call)
/// or carries the most telling class among the calls in progress.
struct HostSweep<'c, 'a> {
    ctx: &'c Ctx<'a>,
    use_apis: bool,
    ai: usize,
    bi: usize,
    yi: usize,
    /// Calls in progress: (end, class), sorted by end descending (the next to end is last).
    active: Vec<(u64, u8)>,
    counts: [u32; HOST_CLASSES],
    cur: u64,
    done: bool,
}

#[derive(Clone, Copy, Debug)]
struct Seg {
    s: u64,
    e: u64,
    class: Option<HostClass>,
}

impl<'c, 'a> HostSweep<'c, 'a> {
    fn new(ctx: &'c Ctx<'a>, use_apis: bool) -> Self {
        HostSweep {
            ctx,
            use_apis,
            ai: 0,
            bi: 0,
            yi: 0,
            active: Vec::new(),
            counts: [0; HOST_CLASSES],
            cur: 0,
            done: false,
        }
    }

    /// Start of the next activity not yet taken, skipping insane records.
    fn peek_start(&mut self) -> Option<u64> {
        let t = self.ctx.t;
        let mut best = u64::MAX;
        if self.use_apis {
            while self.ai < t.apis.len() && self.ctx.sane(t.apis[self.ai].start, 0).is_none() {
                self.ai += 1;
            }
            if let Some(a) = t.apis.get(self.ai) {
                best = best.min(a.start);
            }
        } else {
            while self.yi < t.syncs.len() && self.ctx.sane(t.syncs[self.yi].start, 0).is_none() {
                self.yi += 1;
            }
            if let Some(s) = t.syncs.get(self.yi) {
                best = best.min(s.start);
            }
        }
        if let Some(b) = self.ctx.blind.get(self.bi) {
            best = best.min(b.0);
        }
        (best != u64::MAX).then_some(best)
    }

    /// Takes the activity whose start `peek_start` returned.
    fn take(&mut self, at: u64) -> (u64, u64, HostClass) {
        let t = self.ctx.t;
        if let Some(b) = self.ctx.blind.get(self.bi) {
            if b.0 == at {
                self.bi += 1;
                return (b.0, b.1, HostClass::Blind);
            }
        }
        if self.use_apis {
            let i = self.ai;
            self.ai += 1;
            let a = &t.apis[i];
            let (s, e) = self.ctx.sane(a.start, a.end).unwrap_or((a.start, a.start));
            (s, e, self.ctx.api_class[i])
        } else {
            let i = self.yi;
            self.yi += 1;
            let y = &t.syncs[i];
            let (s, e) = self.ctx.sane(y.start, y.end).unwrap_or((y.start, y.start));
            (s, e, HostClass::Implicit)
        }
    }

    fn top(&self) -> Option<HostClass> {
        self.counts
            .iter()
            .position(|&c| c > 0)
            .map(HostClass::from_index)
    }

    fn next_seg(&mut self) -> Option<Seg> {
        loop {
            let ns = self.peek_start();
            let ne = self.active.last().map(|x| x.0);
            let tn = match (ns, ne) {
                (None, None) => {
                    if self.done {
                        return None;
                    }
                    self.done = true;
                    return Some(Seg {
                        s: self.cur,
                        e: u64::MAX,
                        class: None,
                    });
                }
                (Some(a), None) => a,
                (None, Some(b)) => b,
                (Some(a), Some(b)) => a.min(b),
            };
            let seg = (tn > self.cur).then(|| Seg {
                s: self.cur,
                e: tn,
                class: self.top(),
            });
            while let Some(&(e, c)) = self.active.last() {
                if e > tn {
                    break;
                }
                self.active.pop();
                self.counts[c as usize] -= 1;
            }
            while let Some(s) = self.peek_start() {
                if s > tn {
                    break;
                }
                let (s, e, c) = self.take(s);
                if e > s.max(tn) {
                    self.counts[c as usize] += 1;
                    let pos = self
                        .active
                        .iter()
                        .position(|x| x.0 < e)
                        .unwrap_or(self.active.len());
                    self.active.insert(pos, (e, c as u8));
                }
            }
            self.cur = self.cur.max(tn);
            if let Some(seg) = seg {
                return Some(seg);
            }
        }
    }
}

/// Blocking calls in progress when the GPU drained, for rule 2.
struct Blockers<'c, 'a> {
    ctx: &'c Ctx<'a>,
    use_apis: bool,
    i: usize,
    active: Vec<(u64, u64, HostClass)>,
}

impl<'c, 'a> Blockers<'c, 'a> {
    fn new(ctx: &'c Ctx<'a>, use_apis: bool) -> Self {
        Blockers {
            ctx,
            use_apis,
            i: 0,
            active: Vec::new(),
        }
    }

    /// End of the run-ahead window that a blocked call opened at `a`, and its cause.
    fn window_at(&mut self, a: u64) -> Option<(u64, HostClass)> {
        let t = self.ctx.t;
        if self.use_apis {
            while self.i < t.apis.len() && t.apis[self.i].start < a {
                let c = self.ctx.api_class[self.i];
                let x = &t.apis[self.i];
                if c.blocks() {
                    if let Some((s, e)) = self.ctx.sane(x.start, x.end) {
                        if e + TOL_NS >= a {
                            self.active.push((s, e, c));
                        }
                    }
                }
                self.i += 1;
            }
        } else {
            while self.i < t.syncs.len() && t.syncs[self.i].start < a {
                let x = &t.syncs[self.i];
                if let Some((s, e)) = self.ctx.sane(x.start, x.end) {
                    if e + TOL_NS >= a {
                        self.active.push((s, e, HostClass::Implicit));
                    }
                }
                self.i += 1;
            }
        }
        self.active.retain(|x| x.1 + TOL_NS >= a);
        self.active
            .iter()
            .filter(|x| x.0 < a)
            .map(|x| (x.1.saturating_add(a - x.0), x.2))
            .max_by(|p, q| p.0.cmp(&q.0).then(q.1.cmp(&p.1)))
    }
}

/// Attributes the idle time of device `dev` inside `window`.
pub fn attribute(ctx: &Ctx, dev: u32, window: (u64, u64)) -> Attribution {
    let method = if ctx.has_api() {
        Method::HostApi
    } else {
        Method::GpuOnly
    };
    let (w0, w1) = window;
    let mut out = Attribution::empty(window, method);
    if w1 <= w0 {
        return out;
    }
    let use_apis = method == Method::HostApi;
    let mut st = State {
        ctx,
        host: HostSweep::new(ctx, use_apis),
        seg: None,
        blockers: Blockers::new(ctx, use_apis),
        out: &mut out,
    };
    let mut prev = w0;
    for b in busy(ctx, Some(dev), Select::ALL) {
        if b.end <= w0 {
            continue;
        }
        if b.start >= w1 {
            st.gap(prev, w1, Some(b.first));
            prev = w1;
            break;
        }
        let bs = b.start.max(w0);
        if bs > prev {
            st.gap(prev, bs, Some(b.first));
        }
        let be = b.end.min(w1);
        st.out.busy_ns += be.saturating_sub(bs.max(prev));
        prev = prev.max(be);
    }
    if prev < w1 {
        st.gap(prev, w1, None);
    }
    out
}

struct State<'c, 'a, 'o> {
    ctx: &'c Ctx<'a>,
    host: HostSweep<'c, 'a>,
    seg: Option<Seg>,
    blockers: Blockers<'c, 'a>,
    out: &'o mut Attribution,
}

impl State<'_, '_, '_> {
    fn seg_at(&mut self, p: u64) -> Seg {
        loop {
            match self.seg {
                Some(s) if s.e > p => return s,
                _ => match self.host.next_seg() {
                    Some(s) => self.seg = Some(s),
                    None => {
                        return Seg {
                            s: p,
                            e: u64::MAX,
                            class: None,
                        }
                    }
                },
            }
        }
    }

    fn gap(&mut self, a: u64, b: u64, next: Option<Work>) {
        if b <= a {
            return;
        }
        let len = b - a;
        self.out.idle_ns += len;
        let mut local = [0u64; NCAUSE];
        let host_api = self.out.method == Method::HostApi;
        let queued = host_api
            && next
                .and_then(|w| self.ctx.api_for(w.corr))
                .is_some_and(|api| api.end <= a + 1_000 && api.end + 60_000_000_000 >= a);
        if queued {
            let c = if len <= FRAG_GAP_NS {
                Cause::KernelFragmentation
            } else {
                Cause::QueuedWait
            };
            local[c as usize] += len;
        } else {
            let mut p = a;
            if let Some((we, class)) = self.blockers.window_at(a) {
                let e = we.min(b);
                if e > p {
                    local[Cause::from_host(class) as usize] += e - p;
                    p = e;
                }
            }
            // GPU-only: the end of a gap before a pageable copy is the driver staging it.
            let mut cut = b;
            if !host_api && len > FRAG_GAP_NS {
                if let Some(w) = next.filter(|w| self.is_pageable_copy(w)) {
                    cut = b - (w.end - w.start).min(b - p);
                }
            }
            while p < cut {
                let seg = self.seg_at(p);
                let e = seg.e.min(cut);
                let cause = match seg.class {
                    Some(c) => Cause::from_host(c),
                    None if host_api => {
                        if seg.e.saturating_sub(seg.s) <= QUIET_LAUNCH_NS {
                            Cause::LaunchBound
                        } else {
                            Cause::DataStarvation
                        }
                    }
                    None if len <= FRAG_GAP_NS => Cause::LaunchBound,
                    None => Cause::DataStarvation,
                };
                local[cause as usize] += e - p;
                p = e;
            }
            if cut < b {
                local[Cause::PageableMemcpy as usize] += b - cut.max(p);
            }
        }
        let mut dominant = 0;
        for (i, &v) in local.iter().enumerate() {
            self.out.by_cause[i] += v;
            if v > local[dominant] {
                dominant = i;
            }
            offer(
                &mut self.out.examples[i],
                Example {
                    start: a,
                    len,
                    charged: v,
                },
            );
        }
        self.out.gaps[dominant] += 1;
    }

    fn is_pageable_copy(&self, w: &Work) -> bool {
        w.kind == WorkKind::Memcpy
            && self
                .ctx
                .t
                .memcpys
                .get(w.index)
                .is_some_and(|m| super::classify::host_mem_kind(m) == MemKind::Pageable)
    }
}
