//! Training-step detection: where the repeating part of a job starts and ends.
//!
//! Without markers from the program, steps are found in the sequence of kernel names on
//! the busiest device: an eager training loop launches the same kernels in the same
//! order every iteration, so the name sequence is periodic with the number of kernels per
//! step. The period is chosen among the spacings of frequent names by how much of the
//! sequence it explains; the step boundary is put at the position in the period most
//! often preceded by the step's largest GPU gap (where the loop waits for its next
//! input), and boundaries follow an 'anchor' kernel name so that an occasional extra
//! kernel does not shift every later step.

use super::ctx::Ctx;
use super::intervals::WorkKind;
use super::keymap::{KeyMap, NameMap};
use std::collections::HashMap;

/// Where the step boundaries came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepSource {
    /// NVTX ranges named like steps (`step`, `iteration`, `batch`).
    Nvtx,
    /// The repeating kernel sequence.
    KernelPeriod,
    /// The replays of a CUDA graph that runs once per step.
    GraphReplay,
    /// No repeating structure was found.
    None,
}

#[derive(Clone, Debug)]
pub struct Steps {
    pub source: StepSource,
    /// Raw (mangled) name id of the anchor kernel.
    pub anchor: Option<u32>,
    /// Text id of the NVTX range that marks steps.
    pub nvtx_text: Option<u32>,
    /// Kernels per step on the device used.
    pub period: Option<u32>,
    /// The graph whose replays mark the steps (source `GraphReplay`).
    pub graph_id: Option<u32>,
    /// Step start times; step i is [bounds[i], bounds[i+1]).
    pub bounds: Vec<u64>,
    /// Slow leading steps counted as warm-up (part of start-up).
    pub warmup_steps: usize,
    /// Where the loop began: the first step's start, warm-up steps included (the
    /// steady state's start without steps). The run's phases count the warm-up steps as
    /// the loop's (a first step waiting for its data is the loop waiting).
    pub loop_start: u64,
    /// Boundaries that did not fall on the anchor kernel.
    pub irregular: usize,
    pub startup: (u64, u64),
    pub steady: (u64, u64),
    pub tail: (u64, u64),
}

impl Steps {
    pub fn count(&self) -> usize {
        self.bounds.len().saturating_sub(1)
    }
}

/// Largest sample of the kernel sequence used to choose the period.
const SAMPLE: usize = 400_000;
const MAX_CANDIDATES: usize = 16;
const MIN_STEPS: usize = 3;
/// Names standing for copies (minus the copy kind) and memsets in the work sequence.
pub const MEMCPY_NAME: u32 = u32::MAX - 16;
pub const MEMSET_NAME: u32 = u32::MAX - 32;

/// What an anchor id names: a kernel's name id, or a copy or memset.
pub fn anchor_label(t: &crate::model::trace::Trace, id: u32) -> String {
    if id == MEMSET_NAME {
        "memset".into()
    } else if id > MEMSET_NAME && id <= MEMCPY_NAME {
        format!(
            "memcpy {}",
            gputrace_format::CopyKind::from_u8((MEMCPY_NAME - id) as u8).name()
        )
    } else {
        crate::model::trace::demangle(t.str(id))
    }
}

/// Steps with no repeating structure: start-up before `steady_from`, steady state up to
/// `steady_to`, tail after it.
fn no_steps(ctx: &Ctx, steady_from: u64, steady_to: u64) -> Steps {
    let (t0, t1) = (ctx.t0, ctx.t1);
    Steps {
        source: StepSource::None,
        anchor: None,
        nvtx_text: None,
        period: None,
        graph_id: None,
        bounds: Vec::new(),
        warmup_steps: 0,
        loop_start: steady_from,
        irregular: 0,
        startup: (t0, steady_from),
        steady: (steady_from, steady_to),
        tail: (steady_to, t1),
    }
}

/// Steps from marked boundaries (NVTX ranges or graph replays), slow leading steps
/// counted as warm-up; the phases are widened to take in boundaries outside the trace span.
fn marked_steps(
    ctx: &Ctx,
    source: StepSource,
    nvtx_text: Option<u32>,
    graph_id: Option<u32>,
    bounds: Vec<u64>,
) -> Steps {
    let (t0, t1) = (ctx.t0, ctx.t1);
    let loop_start = bounds[0];
    let (bounds, warm) = drop_warmup(bounds);
    let s0 = bounds[0];
    let s1 = *bounds.last().unwrap();
    Steps {
        source,
        anchor: None,
        nvtx_text,
        period: None,
        graph_id,
        bounds,
        warmup_steps: warm,
        loop_start,
        irregular: 0,
        startup: (t0.min(s0), s0),
        steady: (s0, s1),
        tail: (s1, t1.max(s1)),
    }
}

pub fn detect(ctx: &Ctx) -> Steps {
    let (t0, t1) = (ctx.t0, ctx.t1);
    if let Some((text, bounds)) = nvtx_steps(ctx) {
        return marked_steps(ctx, StepSource::Nvtx, Some(text), None, bounds);
    }
    let Some(dev) = ctx.primary else {
        return no_steps(ctx, t0, t1);
    };
    // A job that replays one CUDA graph per step: each replay starts a step.
    if let Some((graph, bounds)) = super::graphs::replay_steps(ctx, dev, MIN_STEPS) {
        return marked_steps(ctx, StepSource::GraphReplay, None, Some(graph), bounds);
    }
    let works = DeviceWorks::new(ctx, dev);
    let n = works.len();
    let name = |p: usize| works.name(p);
    let start = |p: usize| works.start(p);
    let end = |p: usize| works.end(p);
    if let Some(steps) = kernel_period_steps(ctx, n, &name, &start, &end) {
        return steps;
    }
    steady_without_steps(ctx, dev, n, &start, &end)
}

/// The primary device's work in start order: the kernel table itself when the device
/// has no copies or memsets and the table needs no filtering; else kernels, copies and
/// memsets merged (a step often starts with its input copy), names in one array
/// (scanned for the period) and table entries in another (kind in the top two bits).
struct DeviceWorks<'a> {
    t: &'a crate::model::trace::Trace,
    hi: u64,
    merged: bool,
    names: Vec<u32>,
    seq: Vec<u32>,
}

impl<'a> DeviceWorks<'a> {
    /// The work sequence of device `dev`, merged with its copies and memsets when they
    /// are not rare.
    fn new(ctx: &Ctx<'a>, dev: u32) -> Self {
        let t = ctx.t;
        // Copies and memsets join the sequence when they are not rare (2% of the device's
        // work or more): a step that is a copy and a repeated block of kernels is only told
        // from the block by its copy; rare ones would cost a merge for nothing.
        let others = t.memcpys.iter().filter(|m| m.device == dev).count()
            + t.memsets.iter().filter(|m| m.device == dev).count();
        let works = ctx
            .device_works
            .iter()
            .find(|d| d.0 == dev)
            .map_or(0, |d| d.1 as usize);
        let has_other = others > 0 && others * 50 >= works;
        let use_table = ctx.devices.len() == 1 && ctx.bad_records == 0 && !has_other;
        let (names, seq): (Vec<u32>, Vec<u32>) = if use_table {
            (Vec::new(), Vec::new())
        } else {
            let cap = ctx
                .device_works
                .iter()
                .find(|d| d.0 == dev)
                .map_or(0, |d| d.1 as usize);
            let mut names = Vec::with_capacity(cap);
            let mut seq = Vec::with_capacity(cap);
            for w in super::intervals::GpuWork::new(ctx, Some(dev), super::intervals::Select::ALL) {
                if w.index >= 1 << 30 {
                    continue;
                }
                let (kind, name) = match w.kind {
                    WorkKind::Kernel => (0u32, t.kernels.at(w.index).name),
                    WorkKind::Memcpy => (1, MEMCPY_NAME - t.memcpys[w.index].copy_kind as u32),
                    WorkKind::Memset => (2, MEMSET_NAME),
                };
                names.push(name);
                seq.push((kind << 30) | w.index as u32);
            }
            (names, seq)
        };
        DeviceWorks {
            t,
            hi: ctx.hi,
            merged: !use_table,
            names,
            seq,
        }
    }

    /// Number of positions in the sequence.
    fn len(&self) -> usize {
        if self.merged {
            self.seq.len()
        } else {
            self.t.kernels.len()
        }
    }

    /// (start, end) of position p.
    fn span_at(&self, p: usize) -> (u64, u64) {
        let t = self.t;
        if !self.merged {
            let k = t.kernels.at(p);
            return (k.start, k.end.clamp(k.start, self.hi));
        }
        let e = self.seq[p];
        let i = (e & ((1 << 30) - 1)) as usize;
        match e >> 30 {
            0 => {
                let k = t.kernels.at(i);
                (k.start, k.end.clamp(k.start, self.hi))
            }
            1 => {
                let m = &t.memcpys[i];
                (m.start, m.end.clamp(m.start, self.hi))
            }
            _ => {
                let m = &t.memsets[i];
                (m.start, m.end.clamp(m.start, self.hi))
            }
        }
    }

    /// Name id of position p.
    fn name(&self, p: usize) -> u32 {
        if self.merged {
            self.names[p]
        } else {
            self.t.kernels.at(p).name
        }
    }

    /// Start time of position p.
    fn start(&self, p: usize) -> u64 {
        self.span_at(p).0
    }

    /// End time of position p, clamped to the sanity bound.
    fn end(&self, p: usize) -> u64 {
        self.span_at(p).1
    }
}

/// Steps from the period of the work sequence: boundaries on the anchor kernel at the
/// position in the period most often preceded by the largest GPU gap; `None` when no
/// period is found or it gives too few steps.
fn kernel_period_steps(
    ctx: &Ctx,
    n: usize,
    name: &impl Fn(usize) -> u32,
    start: &impl Fn(usize) -> u64,
    end: &impl Fn(usize) -> u64,
) -> Option<Steps> {
    let (t0, t1) = (ctx.t0, ctx.t1);
    let (period, rs, re) = periodic(n, name, ctx.t.strings.len())?;
    let p = refine_by_gaps(period, rs, re, t0, start, end);
    let votes = gap_votes(p, rs, re, t0, start, end);
    let phase = anchor_phase(&votes, p, rs, re, name);
    let anchor = name(rs + phase);
    let (pos, irregular) = anchor_positions(name, anchor, rs + phase, p, re);
    let mut bounds: Vec<u64> = pos.iter().map(|&q| start(q)).collect();
    bounds.dedup();
    if bounds.len() <= MIN_STEPS {
        return None;
    }
    let loop_start = bounds[0];
    let (bounds, warm) = drop_warmup(bounds);
    let s0 = bounds[0];
    let s1 = *bounds.last().unwrap();
    Some(Steps {
        source: StepSource::KernelPeriod,
        anchor: Some(anchor),
        nvtx_text: None,
        period: Some(p as u32),
        graph_id: None,
        bounds,
        warmup_steps: warm,
        loop_start,
        irregular,
        startup: (t0, s0),
        steady: (s0, s1),
        tail: (s1, t1),
    })
}

/// The step's phase in a period of `p` positions: the most voted position (the first on
/// a tie) whose name comes in half the periods from `rs` to `re` or more. A rarer name,
/// such as the copies of the weights before the first step, would lose every step after
/// it; without such a name, the most voted.
fn anchor_phase(
    votes: &[u32],
    p: usize,
    rs: usize,
    re: usize,
    name: &impl Fn(usize) -> u32,
) -> usize {
    let mut order: Vec<usize> = (0..votes.len()).collect();
    order.sort_by(|&a, &b| votes[b].cmp(&votes[a]).then(a.cmp(&b)));
    let periods = (re - rs) / p.max(1);
    let regular = |j: usize| {
        let n = name(rs + j);
        let count = (rs..re).filter(|&x| name(x) == n).count();
        count * 2 >= periods
    };
    // Only the few most voted are tried: each try walks the periodic stretch once.
    order
        .iter()
        .take(8)
        .copied()
        .find(|&j| votes[j] > 0 && regular(j))
        .unwrap_or(order.first().copied().unwrap_or(0))
}

/// Votes for the step's phase in a period of `p` positions: each period from `rs` to `re`
/// votes for the position preceded by its largest GPU gap.
fn gap_votes(
    p: usize,
    rs: usize,
    re: usize,
    t0: u64,
    start: &impl Fn(usize) -> u64,
    end: &impl Fn(usize) -> u64,
) -> Vec<u32> {
    let mut max_end = t0;
    for i in 0..rs {
        max_end = max_end.max(end(i));
    }
    let mut votes = vec![0u32; p];
    let mut block = rs;
    while block + p <= re {
        let (mut best_gap, mut best_j) = (0u64, 0usize);
        for j in 0..p {
            let i = block + j;
            let gap = start(i).saturating_sub(max_end);
            if j == 0 || gap > best_gap {
                best_gap = gap;
                best_j = j;
            }
            max_end = max_end.max(end(i));
        }
        votes[best_j] += 1;
        block += p;
    }
    votes
}

/// Step start positions from `first`, one period `p` apart, each moved to the nearest
/// `anchor` name within a quarter period; stops before `re` or after more than three
/// misses in a row. Also returns the number of boundaries not on the anchor.
fn anchor_positions(
    name: &impl Fn(usize) -> u32,
    anchor: u32,
    first: usize,
    p: usize,
    re: usize,
) -> (Vec<usize>, usize) {
    let mut pos = vec![first];
    let mut irregular = 0;
    let mut misses_in_a_row = 0;
    loop {
        let b = *pos.last().unwrap();
        let e = b + p;
        if e >= re {
            break;
        }
        let next = if name(e) == anchor {
            misses_in_a_row = 0;
            e
        } else {
            let reach = (p / 4).max(1);
            let mut found = None;
            for d in 1..=reach {
                if e >= d && e - d > b && name(e - d) == anchor {
                    found = Some(e - d);
                    break;
                }
                if e + d < re && name(e + d) == anchor {
                    found = Some(e + d);
                    break;
                }
            }
            match found {
                Some(x) => {
                    misses_in_a_row = 0;
                    x
                }
                None => {
                    irregular += 1;
                    misses_in_a_row += 1;
                    e
                }
            }
        };
        if misses_in_a_row > 3 {
            break;
        }
        pos.push(next);
    }
    (pos, irregular)
}

/// No steps: the steady state starts after a long idle stretch early in the trace
/// (imports, model init), else at the first GPU work; it ends with the last GPU work.
fn steady_without_steps(
    ctx: &Ctx,
    dev: u32,
    n: usize,
    start: &impl Fn(usize) -> u64,
    end: &impl Fn(usize) -> u64,
) -> Steps {
    let (t0, t1) = (ctx.t0, ctx.t1);
    let t = ctx.t;
    if n == 0 {
        return no_steps(ctx, t0, t1);
    }
    let half = t0 + (t1 - t0) / 2;
    let mut max_end = 0u64;
    let mut longest = (0u64, start(0));
    for i in 0..n {
        let s = start(i);
        if s > half {
            break;
        }
        if i > 0 && s > max_end && s - max_end > longest.0 {
            longest = (s - max_end, s);
        }
        max_end = max_end.max(end(i));
    }
    let first_work = start(0).min(
        t.memcpys
            .iter()
            .filter(|m| m.device == dev)
            .map(|m| m.start)
            .find(|&s| ctx.sane(s, s).is_some())
            .unwrap_or(u64::MAX),
    );
    let span = t1 - t0;
    let from = if longest.0 >= 1_000_000_000 || longest.0 >= span / 5 {
        longest.1
    } else {
        first_work
    };
    let mut last_end = 0;
    for i in 0..n {
        last_end = last_end.max(end(i));
    }
    for m in &t.memcpys {
        if m.device == dev {
            if let Some((_, e)) = ctx.sane(m.start, m.end) {
                last_end = last_end.max(e);
            }
        }
    }
    let to = last_end.clamp(from, t1);
    no_steps(ctx, from.clamp(t0, t1), to)
}

/// A period of the name sequence can be a fraction of the step: a step that launches
/// the same kernel four times looks periodic every kernel. The GPU's idle gaps then
/// tell the step: when the large gaps (ten times the median gap, and over 20 us) fall
/// at one regular spacing that is a multiple of `p` (four in five spacings or more), that
/// spacing is the period.
fn refine_by_gaps(
    p: usize,
    rs: usize,
    re: usize,
    t0: u64,
    start: &impl Fn(usize) -> u64,
    end: &impl Fn(usize) -> u64,
) -> usize {
    // (At most SAMPLE positions: enough to see the spacing, linear in them.)
    let re = re.min(rs.saturating_add(SAMPLE));
    if re <= rs + 1 {
        return p;
    }
    let mut max_end = t0;
    let mut gaps = Vec::with_capacity(re - rs);
    for i in rs..re {
        gaps.push(start(i).saturating_sub(max_end));
        max_end = max_end.max(end(i));
    }
    let mut sorted = gaps.clone();
    let mid = sorted.len() / 2;
    let median = *sorted.select_nth_unstable(mid).1;
    let big = median.saturating_mul(10).max(20_000);
    let at: Vec<usize> = (1..gaps.len()).filter(|&i| gaps[i] > big).collect();
    if at.len() < MIN_STEPS + 1 {
        return p;
    }
    let mut counts: HashMap<usize, usize> = HashMap::new();
    for w in at.windows(2) {
        *counts.entry(w[1] - w[0]).or_default() += 1;
    }
    let spacings = at.len() - 1;
    match counts
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
    {
        Some((s, c)) if s > p && s % p == 0 && c * 5 >= spacings * 4 => s,
        _ => p,
    }
}

/// The repeating loop among the steps found: steps more than three times the median
/// are irregular (warm-up, a pause on the host, evaluation, checkpointing); the steady
/// state runs from the first to the last run of regular steps that is at least a fifth
/// as long as the longest run (and [`MIN_STEPS`] long). Steps before it are start-up
/// (returned as the warm-up count), steps after it the tail. An irregular step between
/// two long runs stays in (a periodic pause is part of the loop). Warm-up and tail are a
/// few steps at the ends: when the steps they would drop are more than a tenth of those
/// kept and took longer than them, the loop is irregular, not warming up (a thread that
/// takes the GIL at random points leaves runs of fast steps between slow ones, and one
/// run of fast steps would read as a steady state of a few milliseconds in a loop of
/// seconds), and every step is kept.
fn drop_warmup(bounds: Vec<u64>) -> (Vec<u64>, usize) {
    let durs: Vec<u64> = bounds.windows(2).map(|w| w[1] - w[0]).collect();
    let mut sorted = durs.clone();
    sorted.sort_unstable();
    let median = sorted[sorted.len() / 2];
    let slow = |d: u64| d > median.saturating_mul(3);
    // Runs of regular steps: (first step, steps).
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while i < durs.len() {
        if slow(durs[i]) {
            i += 1;
            continue;
        }
        let s = i;
        while i < durs.len() && !slow(durs[i]) {
            i += 1;
        }
        runs.push((s, i - s));
    }
    let longest = runs.iter().map(|r| r.1).max().unwrap_or(0);
    let big = (longest / 5).max(MIN_STEPS);
    let first = runs.iter().find(|r| r.1 >= big);
    let last = runs.iter().rev().find(|r| r.1 >= big);
    match (first, last) {
        (Some(&(from, _)), Some(&(s, n))) if s + n - from >= MIN_STEPS => {
            let (kept, dropped) = (s + n - from, durs.len() - (s + n - from));
            let kept_ns = bounds[s + n] - bounds[from];
            let all_ns = bounds[bounds.len() - 1] - bounds[0];
            if dropped * 10 > kept && all_ns - kept_ns > kept_ns {
                (bounds, 0)
            } else {
                (bounds[from..=s + n].to_vec(), from)
            }
        }
        _ => (bounds, 0),
    }
}

/// Steps from NVTX ranges whose text says step, iteration or batch: the most frequent
/// such text wins. Returns its text id and the step boundaries (each range's start, and
/// the last range's end).
fn nvtx_steps(ctx: &Ctx) -> Option<(u32, Vec<u64>)> {
    let t = ctx.t;
    let mut by: HashMap<u32, u32> = HashMap::new();
    for r in &t.nvtx_ranges {
        if r.open || ctx.sane(r.start, r.end).is_none() {
            continue;
        }
        let txt = t.str(r.text).to_ascii_lowercase();
        if txt.contains("step") || txt.contains("iter") || txt.contains("batch") {
            *by.entry(r.text).or_default() += 1;
        }
    }
    let (&text, &n) = by.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))?;
    if (n as usize) < MIN_STEPS {
        return None;
    }
    let mut ranges: Vec<(u64, u64)> = t
        .nvtx_ranges
        .iter()
        .filter(|r| r.text == text && !r.open && ctx.sane(r.start, r.end).is_some())
        .map(|r| (r.start, r.end.max(r.start)))
        .collect();
    ranges.sort_unstable();
    // Nested ranges of the same text (a step inside a step) count once.
    let mut bounds: Vec<u64> = Vec::new();
    let mut last_end = 0;
    for (s, e) in ranges {
        if s >= last_end {
            bounds.push(s);
            last_end = e;
        }
    }
    if bounds.len() < MIN_STEPS {
        return None;
    }
    bounds.push(last_end);
    bounds.dedup();
    (bounds.len() > MIN_STEPS).then_some((text, bounds))
}

/// Finds the period of the name sequence and the positions [start, end) it covers.
fn periodic(
    n: usize,
    name: &impl Fn(usize) -> u32,
    strings: usize,
) -> Option<(usize, usize, usize)> {
    if n < 2 * MIN_STEPS {
        return None;
    }
    let (a, b) = if n <= SAMPLE {
        (0, n)
    } else {
        (n / 2 - SAMPLE / 2, n / 2 + SAMPLE / 2)
    };
    let sample: Vec<u32> = (a..b).map(name).collect();
    let sname = |i: usize| sample[i];
    // Candidate periods: the majority spacing of each name (Boyer-Moore vote), then how
    // often that spacing really occurs; and the same for the spacing to the occurrence
    // before the previous one, for a name that comes twice a step at uneven spacings
    // (steps that alternate: gradient accumulation, the optimizer every second step).
    #[derive(Clone, Copy)]
    struct Vote {
        cand: usize,
        count: u32,
        hits: u32,
    }
    let fresh = || Vote {
        cand: 0,
        count: 0,
        hits: 0,
    };
    let mut votes: KeyMap<u64> = KeyMap::new();
    for back in [1usize, 2] {
        let mut votes_by_name: NameMap<Vote> = NameMap::new(strings);
        // Each name's last `back` positions, oldest first.
        let mut seen: NameMap<[usize; 2]> = NameMap::new(strings);
        let spacing = |seen: &mut NameMap<[usize; 2]>, nm: u32, i: usize| {
            let l = seen.entry(nm, || [usize::MAX; 2]);
            let from = l[2 - back];
            *l = [l[1], i];
            (from != usize::MAX).then(|| i - from)
        };
        for (i, &nm) in sample.iter().enumerate() {
            let Some(d) = spacing(&mut seen, nm, i) else {
                continue;
            };
            let v = votes_by_name.entry(nm, fresh);
            if v.count == 0 {
                v.cand = d;
                v.count = 1;
            } else if v.cand == d {
                v.count += 1;
            } else {
                v.count -= 1;
            }
        }
        // Second pass: count the spacings equal to each name's candidate.
        let mut seen: NameMap<[usize; 2]> = NameMap::new(strings);
        for (i, &nm) in sample.iter().enumerate() {
            let Some(d) = spacing(&mut seen, nm, i) else {
                continue;
            };
            let v = votes_by_name.entry(nm, fresh);
            if v.cand == d {
                v.hits += 1;
            }
        }
        for (_, v) in votes_by_name.into_pairs() {
            if v.hits >= 2 && v.cand > 0 && v.cand * MIN_STEPS <= b - a {
                *votes.entry(v.cand as u64, || 0) += v.hits as u64;
            }
        }
    }
    let mut cands: Vec<(usize, u64)> = votes.into_pairs().map(|(p, c)| (p as usize, c)).collect();
    cands.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
    cands.truncate(MAX_CANDIDATES);
    let mut scored: Vec<(usize, usize)> = cands
        .iter()
        .map(|&(p, _)| (p, best_run(&sname, p, 0, b - a).map(|r| r.2).unwrap_or(0)))
        .collect();
    let best = scored.iter().map(|s| s.1).max().unwrap_or(0);
    if best == 0 {
        return None;
    }
    scored.sort_by_key(|s| s.0);
    let (p, _) = *scored.iter().find(|s| s.1 * 10 >= best * 9)?;
    drop(sample);
    let (rs, re, covered) = best_run(name, p, 0, n)?;
    if covered < p * MIN_STEPS || covered < 8 {
        return None;
    }
    Some((p, rs, re.min(n)))
}

/// The longest run of periods of length `p` in positions [a, b) whose names repeat one
/// period later, allowing two bad periods in a row inside a run when the periods on both
/// sides of them hold the same kernels (an occasional extra kernel shifts the sequence; a
/// different phase of the program, such as autotuning before the loop, changes what
/// runs). Returns (start, end, positions covered by good periods).
fn best_run(
    name: &impl Fn(usize) -> u32,
    p: usize,
    a: usize,
    b: usize,
) -> Option<(usize, usize, usize)> {
    if p == 0 || b < a + 2 * p {
        return None;
    }
    let mut best: Option<(usize, usize, usize)> = None;
    let mut run: Option<(usize, usize, usize)> = None; // start, end of last good block, good count
    let mut last_good = a;
    let mut bad_streak = 0usize;
    let mut block = a;
    while block + 2 * p <= b {
        let mut hits = 0usize;
        for i in block..block + p {
            if name(i) == name(i + p) {
                hits += 1;
            }
        }
        let good = hits * 4 >= p * 3;
        if good {
            let resume =
                bad_streak == 0 || (bad_streak <= 2 && same_kernels(name, last_good, block, p));
            run = Some(match run {
                Some((s, _, g)) if resume => (s, block + 2 * p, g + p),
                other => {
                    if let Some(r) = other {
                        if best.is_none_or_smaller(r) {
                            best = Some(r);
                        }
                    }
                    (block, block + 2 * p, p)
                }
            });
            bad_streak = 0;
            last_good = block;
        } else {
            bad_streak += 1;
            if bad_streak > 2 {
                if let Some(r) = run.take() {
                    if best.is_none_or_smaller(r) {
                        best = Some(r);
                    }
                }
            }
        }
        block += p;
    }
    if let Some(r) = run {
        if best.is_none_or_smaller(r) {
            best = Some(r);
        }
    }
    best
}

/// The periods starting at `x` and `y` run mostly the same kernels, in any order.
fn same_kernels(name: &impl Fn(usize) -> u32, x: usize, y: usize, p: usize) -> bool {
    let mut u: Vec<u32> = (x..x + p).map(name).collect();
    let mut v: Vec<u32> = (y..y + p).map(name).collect();
    u.sort_unstable();
    v.sort_unstable();
    let (mut i, mut j, mut common) = (0, 0, 0);
    while i < u.len() && j < v.len() {
        match u[i].cmp(&v[j]) {
            std::cmp::Ordering::Equal => {
                common += 1;
                i += 1;
                j += 1;
            }
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
        }
    }
    common * 4 >= p * 3
}

trait BestRun {
    fn is_none_or_smaller(&self, r: (usize, usize, usize)) -> bool;
}

impl BestRun for Option<(usize, usize, usize)> {
    fn is_none_or_smaller(&self, r: (usize, usize, usize)) -> bool {
        match self {
            None => true,
            Some(b) => r.2 > b.2,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{anchor_phase, drop_warmup};

    #[test]
    fn the_step_anchor_is_a_name_every_step_has() {
        // 3 uploads (name 9) before steps of 5 ops (names 1..=5), 40 steps.
        let names: Vec<u32> = std::iter::repeat_n(9, 3)
            .chain((0..40).flat_map(|_| 1..=5u32))
            .collect();
        let name = |i: usize| names[i];
        let (p, rs, re) = (5, 0, names.len());
        // Position 2's largest gap votes most, but at rs + 2 stands an upload: the next
        // most voted position whose name every step has wins.
        let votes = [1, 3, 30, 0, 6];
        assert_eq!(anchor_phase(&votes, p, rs, re, &name), 4);
        // Past the uploads, the most voted stands.
        assert_eq!(anchor_phase(&votes, p, 3, re, &name), 2);
        // No name regular enough: the most voted.
        let rare = |i: usize| i as u32;
        assert_eq!(anchor_phase(&votes, p, rs, re, &rare), 2);
    }

    /// Step boundaries from step durations (ns), from 0.
    fn bounds(durs: &[u64]) -> Vec<u64> {
        let mut b = vec![0];
        for d in durs {
            b.push(b.last().unwrap() + d);
        }
        b
    }

    /// Every step of these durations stays in the steady state.
    fn all_kept(durs: &[u64]) {
        let b = bounds(durs);
        assert_eq!(drop_warmup(b.clone()), (b, 0));
    }

    #[test]
    fn a_few_slow_first_and_last_steps_are_warm_up_and_tail() {
        // Also when they take most of the time (a compiling first step).
        let mut d = vec![2_000_000_000u64; 3];
        d.extend(std::iter::repeat_n(100_000_000, 100));
        d.push(30_000_000_000);
        let b = bounds(&d);
        let (kept, warm) = drop_warmup(b.clone());
        assert_eq!(warm, 3);
        assert_eq!(kept, b[3..=103].to_vec());
    }

    #[test]
    fn an_irregular_loop_keeps_every_step() {
        // Runs of 3 fast steps between slow ones (a GIL taken at random points), with one
        // long run of fast steps in the middle: the long run alone is not the loop.
        let mut d = Vec::new();
        for _ in 0..100 {
            d.extend([3_000, 3_000, 3_000, 5_000_000]);
        }
        d.extend(std::iter::repeat_n(2_600, 138));
        for _ in 0..60 {
            d.extend([3_000, 3_000, 5_000_000]);
        }
        all_kept(&d);
        // The same with a run of fast steps longer than all the others together.
        let mut d = vec![5_000_000u64; 300];
        d.extend(std::iter::repeat_n(2_300, 582));
        for _ in 0..40 {
            d.extend([3_000, 3_000, 5_000_000]);
        }
        all_kept(&d);
    }
}
