//! Idle attribution: every stretch in which a device ran nothing is split by what the
//! host threads were doing at the time.
//!
//! Rules, in order, for an idle interval [a, b) that ends when work W starts:
//! 1. W had been fully submitted before a (its API call returned, or W is a CUDA-graph
//!    kernel from the same launch as the work before the gap, even while that launch
//!    call is still running on the host): the GPU was not waiting for the host. Short gaps (<= 20 us) are the device-side cost of running many
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
//!    between two calls less than 100 us apart (issuing back to back), or when the gap
//!    is under 100 us and the work after it was launched by a call that was not recorded
//!    (driver-API launches), else `data_starvation` (waiting for input or doing host-side
//!    work).
//! 4. `launch_bound` is launch latency: only a gap of the order of one launch may be
//!    charged to it ([`LaunchGap`]: at most 4x the trace's median launch interval or
//!    call, never under 100 us nor over 1 ms). In a longer gap the host was doing
//!    something else: time inside a launch call is `other_cuda_call`, and a quiet stretch
//!    that rule 3 would call back to back is what the host was doing then
//!    (`data_starvation`, split by the host samples into `cpu_bound` and its sub-causes).
//!
//! Without host API events, rule 1 and the quiet-stretch test are unavailable; Sync
//! activity records still give host waits, and the rest is a GPU-only heuristic: gaps of
//! <= 20 us are `launch_bound`, a gap before a pageable copy is `pageable_memcpy` for up to
//! the copy's length, anything else is `data_starvation`.

use super::ctx::{Ctx, HostClass, HOST_CLASSES};
pub use super::ctx::{LaunchGap, LAUNCH_GAP_CEIL_NS, LAUNCH_GAP_FLOOR_NS, LAUNCH_GAP_MULT};
use super::intervals::{GpuWork, Select, Work, WorkKind};
use gputrace_format::MemKind;

/// Gaps up to this long between already-queued work are the device's per-kernel overhead.
pub const FRAG_GAP_NS: u64 = 20_000;
/// Host calls closer than this are "back to back".
pub const QUIET_LAUNCH_NS: u64 = 100_000;
/// Slack for comparing host and GPU timestamps.
const TOL_NS: u64 = 5_000;

pub use super::cause::{Cause, NCAUSE};

impl Cause {
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

/// One piece of an idle interval charged to one cause: what the timeline exporters show
/// at each gap ([`Extras::idle`]). The pieces of a device's gaps add up to its
/// breakdown's idle time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdlePiece {
    pub start: u64,
    pub end: u64,
    pub device: u32,
    pub cause: Cause,
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
    /// CUPTI API callbacks: host calls linked to GPU work by correlation id.
    HostApi,
    /// No API callbacks, but the symbol hooks' host calls and copies (no correlation).
    HostHooks,
    /// Neither: GPU records (and CUPTI sync records) only.
    GpuOnly,
}

impl Method {
    pub fn of(ctx: &Ctx) -> Method {
        if ctx.has_api() {
            Method::HostApi
        } else if !ctx.t.host_calls.is_empty() || !ctx.t.host_copies.is_empty() {
            Method::HostHooks
        } else {
            Method::GpuOnly
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Method::HostApi => "host_api",
            Method::HostHooks => "host_hooks",
            Method::GpuOnly => "gpu_only_heuristic",
        }
    }
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
    /// Idle intervals with any share charged to this cause.
    pub touched: [u64; NCAUSE],
    /// The largest charges to each cause.
    pub examples: [[Example; 3]; NCAUSE],
    pub method: Method,
    /// How the feeding thread spent the quiet stretches (with host samples only).
    pub host: super::host::HostSplit,
}

impl Attribution {
    pub fn empty(window: (u64, u64), method: Method) -> Attribution {
        Attribution {
            window,
            busy_ns: 0,
            idle_ns: 0,
            by_cause: [0; NCAUSE],
            gaps: [0; NCAUSE],
            touched: [0; NCAUSE],
            examples: [[Example::default(); 3]; NCAUSE],
            method,
            host: Default::default(),
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
            self.touched[i] += o.touched[i];
            for ex in o.examples[i] {
                offer(&mut self.examples[i], ex);
            }
        }
        self.host.merge(&o.host);
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Src {
    Blind,
    Api,
    Sync,
    Call,
    Copy,
}

/// What a runtime call seen by the symbol hooks says about the host.
fn host_call_class(c: &gputrace_format::HostCall) -> HostClass {
    use gputrace_format::HostCallClass as H;
    if c.call == gputrace_format::HOSTCALL_STREAM_WAIT_EVENT {
        return HostClass::Issue;
    }
    match gputrace_format::hostcall_info(c.call).1 {
        H::Sync => HostClass::Implicit,
        H::Memset | H::Launch => HostClass::Issue,
        H::Unknown => HostClass::Other,
    }
}

/// What a copy call seen by the symbol hooks says about the host.
fn host_copy_class(c: &gputrace_format::HostCopy) -> HostClass {
    use gputrace_format::CopyKind;
    let is_async = c.flags & gputrace_format::HOSTCOPY_FLAG_ASYNC != 0;
    match MemKind::from_u8(c.host_kind) {
        MemKind::Pageable
            if c.bytes >= 1 << 20 || CopyKind::from_u8(c.copy_kind) == CopyKind::HtoD =>
        {
            HostClass::Pageable
        }
        _ if CopyKind::from_u8(c.copy_kind) == CopyKind::DtoH && !is_async => HostClass::Implicit,
        MemKind::Pinned if !is_async => HostClass::SyncMemcpy,
        _ if is_async => HostClass::Issue,
        _ => HostClass::Implicit,
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
    /// Symbol-hook host calls and copies (used when there are no API events).
    hi: usize,
    ci: usize,
    /// What `peek` found, until `take`.
    peeked: Option<Option<(u64, Src)>>,
    /// Calls in progress: (end, class), sorted by end descending (the next to end is last).
    active: Vec<(u64, u8)>,
    counts: [u32; HOST_CLASSES],
    cur: u64,
    /// Blocking calls taken so far and possibly still relevant (for rule 2).
    blocked: Vec<(u64, u64, HostClass)>,
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
            hi: 0,
            ci: 0,
            peeked: None,
            active: Vec::new(),
            counts: [0; HOST_CLASSES],
            cur: 0,
            blocked: Vec::new(),
            done: false,
        }
    }

    /// The next activity not yet taken (skipping insane records): its start and source.
    fn peek(&mut self) -> Option<(u64, Src)> {
        if let Some(p) = self.peeked {
            return p;
        }
        let p = self.find_next();
        self.peeked = Some(p);
        p
    }

    fn find_next(&mut self) -> Option<(u64, Src)> {
        let t = self.ctx.t;
        let ctx = self.ctx;
        let mut best: Option<(u64, Src)> = None;
        let mut offer = |start: u64, src: Src| {
            if best.is_none_or(|b| start < b.0) {
                best = Some((start, src));
            }
        };
        if let Some(b) = ctx.blind.get(self.bi) {
            offer(b.0, Src::Blind);
        }
        if self.use_apis {
            while self.ai < t.apis.len() && ctx.sane(t.apis.start(self.ai), 0).is_none() {
                self.ai += 1;
            }
            if let Some(a) = t.apis.get(self.ai) {
                offer(a.start, Src::Api);
            }
        } else {
            while self.yi < t.syncs.len() && ctx.sane(t.syncs[self.yi].start, 0).is_none() {
                self.yi += 1;
            }
            if let Some(x) = t.syncs.get(self.yi) {
                offer(x.start, Src::Sync);
            }
            while self.hi < t.host_calls.len() && ctx.sane(t.host_calls[self.hi].start, 0).is_none()
            {
                self.hi += 1;
            }
            if let Some(x) = t.host_calls.get(self.hi) {
                offer(x.start, Src::Call);
            }
            while self.ci < t.host_copies.len()
                && ctx.sane(t.host_copies[self.ci].start, 0).is_none()
            {
                self.ci += 1;
            }
            if let Some(x) = t.host_copies.get(self.ci) {
                offer(x.start, Src::Copy);
            }
        }
        best
    }

    fn peek_start(&mut self) -> Option<u64> {
        self.peek().map(|p| p.0)
    }

    /// Takes the next activity.
    fn take(&mut self, _at: u64) -> (u64, u64, HostClass) {
        let t = self.ctx.t;
        let ctx = self.ctx;
        let clip = |s: u64, e: u64| ctx.sane(s, e).unwrap_or((s, s));
        let next = self.peek();
        self.peeked = None;
        match next {
            Some((_, Src::Blind)) => {
                let b = &ctx.blind[self.bi];
                self.bi += 1;
                (b.0, b.1, HostClass::Blind)
            }
            Some((_, Src::Api)) => {
                let i = self.ai;
                self.ai += 1;
                let (s, e) = clip(t.apis.start(i), t.apis.end(i));
                (s, e, ctx.api.class(i).unwrap_or(HostClass::Other))
            }
            Some((_, Src::Sync)) => {
                let y = &t.syncs[self.yi];
                self.yi += 1;
                let (s, e) = clip(y.start, y.end);
                (s, e, HostClass::Implicit)
            }
            Some((_, Src::Call)) => {
                let c = &t.host_calls[self.hi];
                self.hi += 1;
                let (s, e) = clip(c.start, c.end);
                (s, e, host_call_class(c))
            }
            Some((_, Src::Copy)) => {
                let c = &t.host_copies[self.ci];
                self.ci += 1;
                let (s, e) = clip(c.start, c.end);
                (s, e, host_copy_class(c))
            }
            None => (0, 0, HostClass::Other),
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
                if c.blocks() {
                    self.blocked.push((s, e, c));
                }
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

impl HostSweep<'_, '_> {
    /// End of the run-ahead window that a call blocked when the GPU drained at `a`
    /// opened, and its cause (rule 2). The sweep must have been advanced to `a`.
    fn window_at(&mut self, a: u64) -> Option<(u64, HostClass)> {
        self.blocked.retain(|x| x.1 + TOL_NS >= a);
        self.blocked
            .iter()
            .filter(|x| x.0 < a)
            .map(|x| (x.1.saturating_add(a - x.0), x.2))
            .max_by(|p, q| p.0.cmp(&q.0).then(q.1.cmp(&p.1)))
    }
}

/// What one pass over a device's work measures.
pub struct Pass {
    /// One attribution per window [bounds[i], bounds[i+1]).
    pub windows: Vec<Attribution>,
    /// Time with any kernel running, per window.
    pub kernel_busy: Vec<u64>,
    /// Busy time per step, when step bounds were given.
    pub step_busy: Vec<u64>,
}

/// Attributes the idle time of device `dev` inside `window`.
pub fn attribute(ctx: &Ctx, dev: u32, window: (u64, u64)) -> Attribution {
    attribute_windows(
        ctx,
        dev,
        &[window.0, window.1],
        None,
        &mut Extras::default(),
    )
    .windows
    .pop()
    .unwrap()
}

/// Other measurements that ride on the idle pass's walk over a device's work.
#[derive(Default)]
pub struct Extras {
    /// Queue depth at submission and launch latency.
    pub queues: Option<super::links::QueueTracker>,
    /// Copies in this window get their time with no kernel alongside measured:
    /// (memcpy index, exposed ns), appended in no particular order.
    pub exposure_window: Option<(u64, u64)>,
    pub exposure: Vec<(u32, u64)>,
    /// When set, every idle piece is appended here, in time order per device
    /// (neighbouring pieces of one gap with the same cause joined).
    pub idle: Option<Vec<IdlePiece>>,
    /// With `idle`: only the pieces of this cause (and of some length) are kept, joined
    /// when less than this many ns apart (`None`: every piece, as above).
    pub idle_only: Option<(Cause, u64)>,
}

/// Copies whose overlap with kernels is still being measured.
struct OpenCopy {
    index: u32,
    start: u64,
    end: u64,
    covered: u64,
}

/// One pass over the device's work: idle attribution in each of the consecutive windows
/// given by `bounds`, kernel busy time per window, and busy time per step.
pub fn attribute_windows(
    ctx: &Ctx,
    dev: u32,
    bounds: &[u64],
    steps: Option<&[u64]>,
    extras: &mut Extras,
) -> Pass {
    let method = Method::of(ctx);
    let nw = bounds.len().saturating_sub(1);
    let mut pass = Pass {
        windows: (0..nw)
            .map(|i| Attribution::empty((bounds[i], bounds[i + 1].max(bounds[i])), method))
            .collect(),
        kernel_busy: vec![0; nw],
        step_busy: vec![0; steps.map_or(0, |s| s.len().saturating_sub(1))],
    };
    if nw == 0 {
        return pass;
    }
    let (w0, w1) = (bounds[0], bounds[nw].max(bounds[0]));
    if w1 <= w0 {
        return pass;
    }
    let sorted = bounds.windows(2).all(|w| w[0] <= w[1]);
    let use_apis = method == Method::HostApi;
    let mut st = State {
        ctx,
        host: HostSweep::new(ctx, use_apis),
        seg: None,
        bounds,
        pieces: Vec::new(),
        method,
        prev_corr: None,
        host_acc: Default::default(),
        dev,
        idle: extras.idle.take(),
        idle_only: extras.idle_only,
    };
    let mut prev = w0;
    // The union of all work, and of kernels alone, merged here from one walk.
    // (start, end, first work, correlation id of the work that ends last)
    let mut cur: Option<(u64, u64, Work, u32)> = None;
    let mut kcur: Option<(u64, u64)> = None;
    let mut step_i = 0usize;
    let mut copies: Vec<OpenCopy> = Vec::new();
    let expo = extras.exposure_window;
    let mut open = true;
    for w in GpuWork::new(ctx, Some(dev), Select::ALL) {
        if let Some(q) = extras.queues.as_mut() {
            q.observe(ctx, dev, &w);
        }
        match w.kind {
            WorkKind::Kernel => {
                kcur = match kcur {
                    Some((s, e)) if w.start <= e => Some((s, e.max(w.end))),
                    Some(k) => {
                        flush_kernels(
                            &mut pass,
                            k,
                            bounds,
                            sorted,
                            &mut copies,
                            &mut extras.exposure,
                        );
                        Some((w.start, w.end))
                    }
                    None => Some((w.start, w.end)),
                };
            }
            WorkKind::Memcpy => {
                if let Some((e0, e1)) = expo {
                    if w.start >= e0 && w.start < e1 {
                        // Overlap with the kernel interval in progress (and earlier
                        // ones, which ended before this copy started) comes at its flush.
                        copies.push(OpenCopy {
                            index: w.index as u32,
                            start: w.start,
                            end: w.end,
                            covered: 0,
                        });
                    }
                }
            }
            WorkKind::Memset => {}
        }
        cur = match cur {
            Some((s, e, f, lc)) if w.start <= e => {
                Some((s, e.max(w.end), f, if w.end >= e { w.corr } else { lc }))
            }
            Some(b) => {
                if open {
                    open = st.flush_block(&mut pass, &mut prev, &mut step_i, b, (w0, w1), steps);
                }
                Some((w.start, w.end, w, w.corr))
            }
            None => Some((w.start, w.end, w, w.corr)),
        };
        if !open && w.start >= w1 {
            break;
        }
    }
    if let Some(k) = kcur {
        flush_kernels(
            &mut pass,
            k,
            bounds,
            sorted,
            &mut copies,
            &mut extras.exposure,
        );
    }
    for c in copies {
        extras
            .exposure
            .push((c.index, (c.end - c.start).saturating_sub(c.covered)));
    }
    if let (Some(b), true) = (cur, open) {
        st.flush_block(&mut pass, &mut prev, &mut step_i, b, (w0, w1), steps);
    }
    if prev < w1 {
        st.gap(&mut pass.windows, prev, w1, None);
    }
    extras.idle = st.idle.take();
    pass
}

/// Charges one merged kernel interval `k`: its time in each window (`sorted`: the
/// bounds ascend), and its overlap with the open copies; copies that end by its end are
/// done and their exposed time is appended to `exposure`.
fn flush_kernels(
    pass: &mut Pass,
    k: (u64, u64),
    bounds: &[u64],
    sorted: bool,
    copies: &mut Vec<OpenCopy>,
    exposure: &mut Vec<(u32, u64)>,
) {
    let nw = pass.kernel_busy.len();
    // Sorted bounds (the usual case, and many windows when the phases cut them): only
    // the windows that `k` overlaps, found by bisection; the others get nothing.
    let from = if sorted {
        bounds[1..=nw].partition_point(|&b| b <= k.0)
    } else {
        0
    };
    for i in from..nw {
        if sorted && bounds[i] >= k.1 {
            break;
        }
        pass.kernel_busy[i] += super::intervals::clip_len(k.0, k.1, bounds[i], bounds[i + 1]);
    }
    if !copies.is_empty() {
        for c in copies.iter_mut() {
            c.covered += super::intervals::clip_len(k.0, k.1, c.start, c.end);
        }
        // Later kernel intervals start after k ends: copies ending by then are done.
        copies.retain(|c| {
            let done = c.end <= k.1;
            if done {
                exposure.push((c.index, (c.end - c.start).saturating_sub(c.covered)));
            }
            !done
        });
    }
}

struct State<'c, 'a, 'b> {
    ctx: &'c Ctx<'a>,
    host: HostSweep<'c, 'a>,
    seg: Option<Seg>,
    bounds: &'b [u64],
    pieces: Vec<(u64, u64, Cause)>,
    method: Method,
    /// Correlation id of the work that ended last before the current gap.
    prev_corr: Option<u32>,
    /// The host samples' split of the current gap's quiet stretches.
    host_acc: super::host::HostSplit,
    dev: u32,
    /// Where every piece goes, when asked for ([`Extras::idle`]).
    idle: Option<Vec<IdlePiece>>,
    idle_only: Option<(Cause, u64)>,
}

impl State<'_, '_, '_> {
    /// Charges one merged block of work (start, end, first work, correlation id of the
    /// work that ends last): the idle gap before it, its busy time per window and per
    /// step. False once the block starts at or after the end of `window`.
    fn flush_block(
        &mut self,
        pass: &mut Pass,
        prev: &mut u64,
        step_i: &mut usize,
        b: (u64, u64, Work, u32),
        window: (u64, u64),
        steps: Option<&[u64]>,
    ) -> bool {
        let (w0, w1) = window;
        let (bs0, be0, first, last_corr) = b;
        if be0 <= w0 {
            self.prev_corr = Some(last_corr);
            return true;
        }
        if bs0 >= w1 {
            self.gap(&mut pass.windows, *prev, w1, Some(first));
            *prev = w1;
            return false;
        }
        let bs = bs0.max(w0);
        if bs > *prev {
            self.gap(&mut pass.windows, *prev, bs, Some(first));
        }
        let be = be0.min(w1);
        let from = bs.max(*prev);
        if be > from {
            self.split(&mut pass.windows, from, be, |w, n| w.busy_ns += n);
        }
        if let Some(sb) = steps {
            while *step_i + 1 < sb.len() && sb[*step_i + 1] <= bs0 {
                *step_i += 1;
            }
            let mut j = *step_i;
            while j + 1 < sb.len() && sb[j] < be0 {
                pass.step_busy[j] += super::intervals::clip_len(bs0, be0, sb[j], sb[j + 1]);
                j += 1;
            }
        }
        *prev = (*prev).max(be);
        self.prev_corr = Some(last_corr);
        true
    }

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

    /// Index of the window holding `t`.
    fn window_of(&self, t: u64) -> usize {
        let n = self.bounds.len() - 1;
        self.bounds[1..n].partition_point(|&b| b <= t)
    }

    /// Applies `f` to each window's share of [s, e).
    fn split(
        &self,
        outs: &mut [Attribution],
        s: u64,
        e: u64,
        mut f: impl FnMut(&mut Attribution, u64),
    ) {
        let mut i = self.window_of(s);
        let mut p = s;
        while p < e && i < outs.len() {
            let end = if i + 1 < outs.len() {
                self.bounds[i + 1].min(e)
            } else {
                e
            };
            if end > p {
                f(&mut outs[i], end - p);
            }
            p = end.max(p);
            i += 1;
        }
    }

    fn gap(&mut self, outs: &mut [Attribution], a: u64, b: u64, next: Option<Work>) {
        if b <= a {
            return;
        }
        let len = b - a;
        self.pieces.clear();
        let host_api = self.method == Method::HostApi;
        // Kernels of a CUDA graph whose launch call is not in the trace: one launched by the
        // same call as the work before the gap was submitted with it (a gap inside one
        // graph run); another is a new launch that was not recorded.
        let prev_corr = self.prev_corr;
        let same_graph_launch = |w: &Work| {
            w.kind == WorkKind::Kernel
                && w.corr != 0
                && prev_corr == Some(w.corr)
                && self
                    .ctx
                    .t
                    .kernels
                    .get(w.index)
                    .is_some_and(|k| k.graph_id != 0)
        };
        // (The graph rule needs no host events: it holds in every method, and it holds
        // while the host is still inside the launch call: one call submitted the whole
        // graph, so a gap between its nodes is the device's, never the host's.)
        let queued = next.is_some_and(|w| {
            same_graph_launch(&w)
                || match self.ctx.api_for(w.corr) {
                    Some(api) if host_api => api.end <= a + 1_000 && api.end + 60_000_000_000 >= a,
                    _ => false,
                }
        });
        // The next work came from a call that was not recorded (driver-API launches such
        // as cuBLAS's or JAX's): a short quiet gap before it is that launch, not idleness.
        let unlinked = host_api
            && !queued
            && next
                .is_some_and(|w| w.kind == WorkKind::Kernel && self.ctx.api_for(w.corr).is_none());
        // Rule 4: only a gap of the order of a launch may be launch latency.
        let launch_gap = len <= self.ctx.launch_gap.max_ns;
        if queued {
            let c = if len <= FRAG_GAP_NS {
                Cause::KernelFragmentation
            } else {
                Cause::QueuedWait
            };
            self.pieces.push((a, b, c));
        } else {
            self.host_pieces(a, b, next, unlinked, launch_gap);
        }
        self.charge(outs, a, b);
    }

    /// Cuts the gap [a, b) by what the host was doing (the call that ends in it, then
    /// each host segment), ending with the staging of a pageable copy in GPU-only mode.
    fn host_pieces(
        &mut self,
        a: u64,
        b: u64,
        next: Option<Work>,
        unlinked: bool,
        launch_gap: bool,
    ) {
        let len = b - a;
        let mut p = a;
        // Advance the host sweep to `a` so that every call begun before it is seen.
        self.seg_at(a);
        if let Some((we, class)) = self.host.window_at(a) {
            let e = we.min(b);
            if e > p {
                self.pieces.push((p, e, Cause::from_host(class)));
                p = e;
            }
        }
        // GPU-only: the end of a gap before a pageable copy is the driver staging it.
        let mut cut = b;
        if self.method == Method::GpuOnly && len > FRAG_GAP_NS {
            if let Some(w) = next.filter(|w| self.is_pageable_copy(w)) {
                cut = b - (w.end - w.start).min(b - p);
            }
        }
        while p < cut {
            let seg = self.seg_at(p);
            let e = seg.e.min(cut).max(p + 1).min(cut);
            let cause = self.quiet_cause(seg, len, launch_gap, unlinked);
            match (&self.ctx.host, cause) {
                // With host samples, what the feeding thread did decides.
                (Some(h), Cause::DataStarvation) => {
                    let tid = next.and_then(|w| self.ctx.api_for(w.corr)).map(|a| a.tid);
                    super::host::split_quiet(
                        h,
                        tid,
                        (p, e),
                        seg.e.saturating_sub(seg.s),
                        launch_gap,
                        &mut self.pieces,
                        &mut self.host_acc,
                    );
                }
                _ => self.pieces.push((p, e, cause)),
            }
            p = e;
        }
        if cut < b {
            self.pieces.push((cut.max(p), b, Cause::PageableMemcpy));
        }
    }

    /// The cause of a stretch of a gap of `len` ns that lies in host segment `seg`.
    fn quiet_cause(&self, seg: Seg, len: u64, launch_gap: bool, unlinked: bool) -> Cause {
        let host_api = self.method == Method::HostApi;
        match seg.class {
            // In a launch call through a gap far longer than a launch: a CUDA
            // call that took long, not launch latency.
            Some(HostClass::Issue) if !launch_gap => Cause::OtherCall,
            Some(c) => Cause::from_host(c),
            None if !launch_gap => Cause::DataStarvation,
            None if host_api => {
                if seg.e.saturating_sub(seg.s) <= QUIET_LAUNCH_NS
                    || (unlinked && len <= QUIET_LAUNCH_NS)
                {
                    Cause::LaunchBound
                } else {
                    Cause::DataStarvation
                }
            }
            // Hook-recorded calls: back-to-back calls, or a gap too short to be
            // anything but a launch the hooks do not see (driver API).
            None if self.method == Method::HostHooks => {
                if seg.e.saturating_sub(seg.s) <= QUIET_LAUNCH_NS || len <= FRAG_GAP_NS {
                    Cause::LaunchBound
                } else {
                    Cause::DataStarvation
                }
            }
            None if len <= FRAG_GAP_NS => Cause::LaunchBound,
            None => Cause::DataStarvation,
        }
    }

    /// Charges the pieces of the gap [a, b) to the windows, records them as idle pieces
    /// when asked, and counts the gap under its dominant cause in the window of its start.
    fn charge(&mut self, outs: &mut [Attribution], a: u64, b: u64) {
        let len = b - a;
        let mut local = [0u64; NCAUSE];
        let wa = self.window_of(a).min(outs.len() - 1);
        let pieces = std::mem::take(&mut self.pieces);
        if wa + 1 == outs.len() || b <= self.bounds[wa + 1] {
            // The whole gap lies in one window.
            let w = &mut outs[wa];
            for &(s, e, c) in &pieces {
                local[c as usize] += e - s;
                w.by_cause[c as usize] += e - s;
            }
            w.idle_ns += len;
        } else {
            for &(s, e, c) in &pieces {
                local[c as usize] += e - s;
                self.split(outs, s, e, |w, n| {
                    w.by_cause[c as usize] += n;
                    w.idle_ns += n;
                });
            }
        }
        if let Some(sink) = self.idle.as_mut() {
            let (only, join) = match self.idle_only {
                Some((c, join)) => (Some(c), join),
                None => (None, 0),
            };
            for &(start, end, cause) in &pieces {
                if only.is_some_and(|c| c != cause || end <= start) {
                    continue;
                }
                match sink.last_mut() {
                    Some(l)
                        if l.device == self.dev
                            && l.cause == cause
                            && start >= l.end
                            && start - l.end <= join =>
                    {
                        l.end = l.end.max(end)
                    }
                    _ => sink.push(IdlePiece {
                        start,
                        end,
                        device: self.dev,
                        cause,
                    }),
                }
            }
        }
        self.pieces = pieces;
        let home = &mut outs[wa];
        if self.ctx.host.is_some() {
            home.host.merge(&self.host_acc);
            self.host_acc = Default::default();
        }
        let mut dominant = 0;
        for (i, &v) in local.iter().enumerate() {
            if v > local[dominant] {
                dominant = i;
            }
            if v > 0 {
                home.touched[i] += 1;
            }
            offer(
                &mut home.examples[i],
                Example {
                    start: a,
                    len,
                    charged: v,
                },
            );
        }
        home.gaps[dominant] += 1;
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

#[cfg(test)]
mod launch_gap_tests {
    use super::*;

    #[test]
    fn the_launch_gap_bound_is_a_few_launches_within_its_floor_and_ceiling() {
        assert_eq!(LAUNCH_GAP_FLOOR_NS, QUIET_LAUNCH_NS);
        // A replay every 96 us, calls of 10 us: 4 x 96 us.
        let g = LaunchGap::of((0..100u64).map(|i| (1, i * 96_000, i * 96_000 + 10_000)));
        assert_eq!(
            (g.calls, g.call_p50_ns, g.interval_p50_ns),
            (100, 10_000, 96_000)
        );
        assert_eq!(g.max_ns, 384_000);
        // Eager launches every 8 us: the floor. Two threads interleaved: per thread.
        let g = LaunchGap::of((0..100u64).map(|i| ((i % 2) as u32, i * 4_000, i * 4_000 + 3_000)));
        assert_eq!((g.interval_p50_ns, g.max_ns), (8_000, LAUNCH_GAP_FLOOR_NS));
        // A launch every 50 ms: the ceiling. No launches: the floor.
        let g = LaunchGap::of((0..10u64).map(|i| (1, i * 50_000_000, i * 50_000_000 + 5_000)));
        assert_eq!(g.max_ns, LAUNCH_GAP_CEIL_NS);
        assert_eq!(
            LaunchGap::of(std::iter::empty()).max_ns,
            LAUNCH_GAP_FLOOR_NS
        );
    }
}
