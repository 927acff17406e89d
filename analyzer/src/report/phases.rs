//! The whole run, phase by phase: every process's traced time cut into start-up,
//! compilation, the loop (the steady state the findings are about), checkpoints,
//! evaluation, other GPU work, host work with no GPU work, pauses and the end, so the
//! report can say where all the time went before it diagnoses one loop.
//!
//! The trace is cut into bins ([`bin_ns`]: a 400th of the trace, 20 ms to 1 s; the steady
//! state's start and end are edges too, so the loop is exactly the steady state). Each bin
//! gets one kind, from what was measured in it:
//! * **compilation**: most Python stack samples of the bin are inside a compiler
//!   (`torch/_dynamo/`, `torch/_inductor/`, AOT autograd, `triton/compiler/`,
//!   `jax/_src/interpreters/`, `jax/_src/compiler.py`, `jax/_src/pjit.py` compiling,
//!   `torch/backends/cudnn` autotuning), not counting the wrappers that run on every
//!   call (`torch/_dynamo/eval_frame.py` around a `torch._dynamo.disable`d
//!   `optimizer.step`, the runtime of compiled graphs);
//! * **checkpoint**: most samples in `torch/serialization.py` (torch.save / torch.load),
//!   `safetensors` or `orbax`;
//! * **evaluation**: most samples under a frame of the program's own code whose function
//!   is named `eval*`, `evaluate*`, `valid*` or `test*`;
//! * otherwise by time: **loop** inside the steady state; before it **start-up**; after
//!   it **GPU work** where the GPU was busy, else **pause** where neither the GPU nor
//!   the host's CUDA calls did anything, else **host work**.
//!
//! Runs of one kind become phases. Without Python samples (no CPython, sampling off)
//! only the kinds by time are told. Compilation after the first GPU work (the loop or
//! other) is recompilation, the `recompilation` finding's time; its count is of
//! episodes: runs of compiling samples, a new one wherever a kernel started between two
//! samples (finer than the bins: a job that recompiles before every step counts each).
//!
//! Each kind also gets the devices' busy time and idle causes in its phases
//! ([`KindTime::set_idle`]): the idle pass's windows are cut at every phase edge, so the
//! same walk that measures the start-up, steady state and tail measures the kinds.

use crate::model::trace::Trace;
use crate::report::cause::{Cause, NCAUSE};
use crate::report::ctx::Ctx;
use gputrace_format as fmt;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};

/// A phase's kind.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    StartUp,
    Compilation,
    Loop,
    Checkpoint,
    Evaluation,
    GpuWork,
    HostWork,
    Pause,
    /// The loop stopped between epochs: its DataLoader workers were replaced.
    EpochBoundary,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::StartUp => "start-up",
            Kind::Compilation => "compilation",
            Kind::Loop => "loop",
            Kind::Checkpoint => "checkpoint",
            Kind::Evaluation => "evaluation",
            Kind::GpuWork => "other GPU work",
            Kind::HostWork => "host work",
            Kind::Pause => "pause",
            Kind::EpochBoundary => "epoch boundary",
        }
    }
}

/// One phase: a stretch of one kind.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Phase {
    pub kind: Kind,
    /// ns after the trace start.
    pub start_ns: u64,
    pub end_ns: u64,
    /// Share of the phase the GPU was busy with kernels (their summed time, capped).
    pub gpu_busy_pct: f64,
}

/// Time of one kind over the run.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct KindTime {
    pub kind: Kind,
    pub ns: u64,
    pub pct: f64,
    /// Phases of this kind.
    pub phases: u64,
    /// Time the devices were busy in the phases of this kind (any work: kernels, copies,
    /// memsets), summed over the devices counted for the kind: those with work in it, and
    /// the primary device. With [`KindTime::idle`] it adds up to `ns` x those devices.
    pub busy_ns: u64,
    /// Their idle time by cause (unattributed causes under their names), most first,
    /// causes with time only.
    pub idle: Vec<CauseTime>,
}

/// A cause's idle time in the phases of one kind.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct CauseTime {
    /// [`Cause::id`]: a finding's id, or an unattributed cause's name.
    pub cause: String,
    pub ns: u64,
    /// Share of the kind's device time (its `ns` x the devices counted).
    pub pct: f64,
}

impl KindTime {
    /// Sets the kind's busy time and idle causes, measured on `devices` devices.
    pub fn set_idle(&mut self, busy_ns: u64, by_cause: &[u64; NCAUSE], devices: u64) {
        let wall = self.ns.saturating_mul(devices);
        self.busy_ns = busy_ns;
        self.idle = Cause::ALL
            .iter()
            .map(|&c| (c, by_cause[c as usize]))
            .filter(|&(_, ns)| ns > 0)
            .map(|(c, ns)| CauseTime {
                cause: c.id().to_string(),
                ns,
                pct: crate::report::units::pct(ns, wall),
            })
            .collect();
        self.idle
            .sort_by(|a, b| b.ns.cmp(&a.ns).then(a.cause.cmp(&b.cause)));
    }

    /// The share of the kind's device time the devices were busy: busy over busy and
    /// idle (which add up to the kind's time on each device counted).
    pub fn busy_pct(&self) -> f64 {
        let idle: u64 = self.idle.iter().map(|c| c.ns).sum();
        crate::report::units::pct(self.busy_ns, self.busy_ns + idle)
    }
}

/// The run, phase by phase.
#[derive(Serialize, Clone, Debug, PartialEq, Default)]
pub struct Run {
    pub span_ns: u64,
    /// Most time first.
    pub by_kind: Vec<KindTime>,
    pub phases: Vec<Phase>,
    /// Compilation after GPU work had begun: its time and its episodes.
    pub recompile_ns: u64,
    pub recompiles: u64,
    /// The Python frames told compilation (`torch` or `jax`), when any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compiler: Option<&'static str>,
    /// What interrupts the loop again and again (evaluation every N steps, a checkpoint,
    /// a recompilation), most time first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub periodic: Vec<Periodic>,
}

/// A part of the loop that comes back: a phase of one kind between stretches of the loop,
/// two times or more.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Periodic {
    pub kind: Kind,
    pub times: u64,
    /// Its time in all, and as a share of the loop's time (the first loop stretch's start
    /// to the last one's end, these parts included).
    pub ns: u64,
    pub pct_of_loop: f64,
    /// The median time from one start to the next, and in steps when the steps are known.
    pub every_ns: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub every_steps: Option<u64>,
}

impl Periodic {
    fn every(&self) -> String {
        match self.every_steps {
            Some(n) => format!("every ~{n} steps"),
            None => format!("every ~{}", crate::report::units::dur(self.every_ns)),
        }
    }

    /// "every ~100 steps also evaluation: 9% of the loop's time".
    pub fn short_words(&self) -> String {
        format!(
            "{} also {}: {} of the loop's time",
            self.every(),
            self.kind.name(),
            share_words(self.pct_of_loop)
        )
    }

    /// "every ~100 steps also evaluation (3 times, 1.1 s each): 9% of the loop's time".
    pub fn words(&self) -> String {
        let every = self.every();
        format!(
            "{every} also {} ({} times, {} each): {} of the loop's time",
            self.kind.name(),
            self.times,
            crate::report::units::dur(self.ns / self.times.max(1)),
            share_words(self.pct_of_loop)
        )
    }
}

impl Run {
    pub fn time(&self, k: Kind) -> u64 {
        self.by_kind
            .iter()
            .find(|x| x.kind == k)
            .map_or(0, |x| x.ns)
    }

    /// "compilation 74% (16.9 s, 98 times), loop 12% (2.7 s), start-up 9% (2.1 s)": the
    /// largest kinds, at most `n`.
    pub fn words(&self, n: usize) -> String {
        self.by_kind
            .iter()
            .filter(|k| k.pct >= 0.5 || k.kind == Kind::Loop)
            .take(n)
            .map(|k| {
                let times = if k.phases > 1 && (evidenced(k.kind) || k.kind == Kind::Pause) {
                    format!(", {} times", k.phases)
                } else {
                    String::new()
                };
                format!(
                    "{} {} ({}{times})",
                    k.kind.name(),
                    share_words(k.pct),
                    crate::report::units::dur(k.ns)
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A share in words: whole percents, one decimal below 1%.
pub(crate) fn share_words(pct: f64) -> String {
    if pct < 1.0 {
        format!("{pct:.1}%")
    } else {
        format!("{pct:.0}%")
    }
}

/// Bin width for a trace of `span` ns.
fn bin_ns(span: u64) -> u64 {
    (span / 400).clamp(20_000_000, 1_000_000_000)
}

/// Frames (file paths) of compilers, and which compiler.
const COMPILE_FILES: &[(&str, &str)] = &[
    ("torch/_dynamo/", "torch"),
    ("torch/_inductor/", "torch"),
    ("torch/_functorch/_aot_autograd/", "torch"),
    ("torch/_functorch/aot_autograd.py", "torch"),
    ("torch/_functorch/partitioners.py", "torch"),
    ("torch/fx/experimental/symbolic_shapes", "torch"),
    // Tracing a graph with fake tensors: AOT autograd's, under dynamo.
    ("torch/fx/experimental/proxy_tensor.py", "torch"),
    ("torch/_subclasses/fake_tensor.py", "torch"),
    ("torch/_subclasses/meta_utils.py", "torch"),
    ("triton/compiler/", "torch"),
    ("torch/backends/cudnn", "torch"),
    ("jax/_src/interpreters/", "jax"),
    ("jax/_src/compiler.py", "jax"),
    ("jax/_src/pjit.py", "jax"),
];

/// Frames inside the compilers' directories that run on every call of compiled (or
/// dynamo-disabled) code, not while compiling: the wrapper `torch._dynamo.disable` puts
/// around `optimizer.step`, the runtime of compiled graphs, Triton's launcher. A stack
/// counts as compiling only through some other compiler frame.
const COMPILE_RUNTIME_FILES: &[&str] = &[
    "torch/_dynamo/eval_frame.py",
    "torch/_dynamo/external_utils.py",
    "torch/_dynamo/decorators.py",
    "torch/_functorch/_aot_autograd/runtime_wrappers.py",
    "torch/_inductor/runtime/",
    "torch/_inductor/output_code.py",
];

/// Frames of saving and loading checkpoints.
const CHECKPOINT_FILES: &[&str] = &["torch/serialization.py", "safetensors", "orbax/"];

/// What one sampled stack was doing.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Doing {
    Compiling(&'static str),
    Checkpoint,
    Evaluating,
    Other,
}

fn doing(t: &Trace, st: &fmt::PyStack) -> Doing {
    // Importing a compiler's modules (`import torch._dynamo` at start-up) is not
    // compiling: a stack inside the import machinery is importing.
    if st
        .frames
        .iter()
        .any(|f| t.str(f.file).starts_with("<frozen importlib"))
    {
        return Doing::Other;
    }
    for f in &st.frames {
        let file = t.str(f.file);
        if let Some((_, who)) = COMPILE_FILES.iter().find(|(p, _)| file.contains(p)) {
            if !COMPILE_RUNTIME_FILES.iter().any(|p| file.contains(p)) {
                return Doing::Compiling(who);
            }
        }
        if CHECKPOINT_FILES.iter().any(|p| file.contains(p)) {
            return Doing::Checkpoint;
        }
    }
    let evaluating = st.frames.iter().any(|f| {
        let file = t.str(f.file);
        let user = !(file.contains("site-packages")
            || file.contains("/lib/python")
            || file.starts_with('<'));
        let fun = t.str(f.function).to_ascii_lowercase();
        user && ["eval", "valid", "test"].iter().any(|p| fun.starts_with(p))
    });
    if evaluating {
        Doing::Evaluating
    } else {
        Doing::Other
    }
}

/// Per bin: samples by what they were doing, kernel time, CUDA calls.
#[derive(Clone, Copy, Default)]
struct Bin {
    samples: u32,
    compiling: u32,
    checkpoint: u32,
    evaluating: u32,
    kernel_ns: u64,
    /// Kernel time of the steady state's own kernels (by name).
    loop_kernel_ns: u64,
    calls: u32,
    /// A child process of the traced one (a DataLoader worker) was first seen here,
    /// after others had been: the workers were replaced (a new epoch's iterator).
    new_workers: bool,
}

/// Bin edges: every `w` from `t0`, and the steady state's start and end, up to `t1`.
fn edges(t0: u64, t1: u64, w: u64, steady: (u64, u64)) -> Vec<u64> {
    let mut e: Vec<u64> = (0..).map(|i| t0 + i * w).take_while(|&x| x < t1).collect();
    e.extend(
        [steady.0, steady.1]
            .into_iter()
            .filter(|&x| x > t0 && x < t1),
    );
    e.push(t1);
    e.sort_unstable();
    e.dedup();
    e
}

/// What the bins hold, the compiler seen, and the times of the samples that were
/// compiling (sorted).
type Binned = (Vec<Bin>, Option<&'static str>, Vec<u64>);

fn bins(t: &Trace, edges: &[u64], looped: &HashSet<u32>) -> Binned {
    let (t0, t1) = (edges[0], edges[edges.len() - 1]);
    let n = edges.len() - 1;
    let mut out = vec![Bin::default(); n];
    let at = |ts: u64| edges.partition_point(|&e| e <= ts).clamp(1, n) - 1;
    let mut compiler = None;
    let mut compiling = Vec::new();
    for s in &t.py_samples {
        if s.ts < t0 || s.ts >= t1 {
            continue;
        }
        let Some(st) = t.py_stack(s.stack) else {
            continue;
        };
        let b = &mut out[at(s.ts)];
        b.samples += 1;
        match doing(t, st) {
            Doing::Compiling(who) => {
                b.compiling += 1;
                compiler = compiler.or(Some(who));
                compiling.push(s.ts);
            }
            Doing::Checkpoint => b.checkpoint += 1,
            Doing::Evaluating => b.evaluating += 1,
            Doing::Other => {}
        }
    }
    // The loop's kernel names by string id (ids are indexes into the string table).
    let mut is_loop = vec![false; t.strings.len()];
    for &n in looped {
        if let Some(x) = is_loop.get_mut(n as usize) {
            *x = true;
        }
    }
    // Kernels come in start order: the bin of a start only moves forward.
    let mut first = 0;
    for k in &t.kernels {
        let (s, e) = (k.start.max(t0), k.end.min(t1));
        let looping = match is_loop.get(k.name as usize) {
            Some(&l) => l,
            None => looped.contains(&k.name),
        };
        while first + 1 < n && edges[first + 1] <= s {
            first += 1;
        }
        let (mut x, mut i) = (s, first);
        while x < e {
            while i + 1 < n && edges[i + 1] <= x {
                i += 1;
            }
            let y = e.min(edges[i + 1]);
            out[i].kernel_ns += y - x;
            if looping {
                out[i].loop_kernel_ns += y - x;
            }
            x = y;
        }
    }
    for a in &t.apis {
        if a.start >= t0 && a.start < t1 {
            out[at(a.start)].calls += 1;
        }
    }
    for ts in replaced_workers(t) {
        if ts >= t0 && ts < t1 {
            out[at(ts)].new_workers = true;
        }
    }
    compiling.sort_unstable();
    (out, compiler, compiling)
}

/// The name PyTorch gives its DataLoader worker processes (`comm`).
const DATA_WORKER: &str = "pt_data_worker";

/// When DataLoader workers (child processes of the traced one named [`DATA_WORKER`])
/// were first seen while earlier ones were gone: the sample time of the first new worker
/// after each such replacement. The first workers (the first epoch's) are no replacement;
/// other children (torch.compile's worker pool, which is replaced too) are not looked at.
fn replaced_workers(t: &Trace) -> Vec<u64> {
    let me = t.meta.pid;
    // pid -> (first seen, last seen), for the traced process's own workers.
    let mut seen: HashMap<u32, (u64, u64)> = HashMap::new();
    for p in &t.proc_samples {
        if p.ppid != me
            || p.pid == me
            || p.flags & (fmt::PROC_FLAG_THREAD | fmt::PROC_FLAG_SELF) != 0
            || t.str(p.comm) != DATA_WORKER
        {
            continue;
        }
        let e = seen.entry(p.pid).or_insert((p.ts, p.ts));
        e.0 = e.0.min(p.ts);
        e.1 = e.1.max(p.ts);
    }
    let mut kids: Vec<(u64, u64)> = seen.into_values().collect();
    kids.sort_unstable();
    let mut out = Vec::new();
    // The workers of the latest replacement (indices into `kids`).
    let mut group: Vec<usize> = Vec::new();
    for (i, &(first, _)) in kids.iter().enumerate() {
        // An earlier child last seen before this one appeared: replaced.
        let replaced = kids[..i].iter().any(|&(_, last)| last < first);
        if !replaced {
            continue;
        }
        // Workers started together are one replacement; one whose own workers are gone
        // by now was replaced in turn (epochs can be shorter than a second).
        let again = group.iter().any(|&g| kids[g].1 < first);
        if group.is_empty() || again {
            out.push(first);
            group.clear();
        }
        group.push(i);
    }
    out
}

/// Compilations that began at or after `from`: runs of compiling samples, a new one
/// wherever a kernel started between two of them (GPU work ran in between).
fn episodes(t: &Trace, compiling: &[u64], from: u64) -> u64 {
    let ran_between = |a: u64, b: u64| {
        let i = t.kernels.partition_point(|k| k.start <= a);
        t.kernels.get(i).is_some_and(|k| k.start < b)
    };
    let mut n = 0;
    let mut prev: Option<u64> = None;
    for &ts in compiling {
        let new = match prev {
            None => true,
            Some(p) => ran_between(p, ts),
        };
        if new && ts >= from {
            n += 1;
        }
        prev = Some(ts);
    }
    n
}

impl Bin {
    /// The kind most of the bin's Python samples show the program doing (two samples or
    /// more): compiling, saving a checkpoint or evaluating.
    fn evidence(&self) -> Option<Kind> {
        let most = |n: u32| self.samples >= 2 && n * 2 >= self.samples;
        if most(self.compiling) {
            Some(Kind::Compilation)
        } else if most(self.checkpoint) {
            Some(Kind::Checkpoint)
        } else if most(self.evaluating) {
            Some(Kind::Evaluation)
        } else {
            None
        }
    }
}

/// The kind of bin `b` over `[start, start + w)` (absolute), given the steady state.
fn kind_of(b: &Bin, start: u64, w: u64, steady: (u64, u64)) -> Kind {
    if let Some(k) = b.evidence() {
        return k;
    }
    let mid = start + w / 2;
    if b.calls == 0 && b.kernel_ns == 0 && mid >= steady.0 {
        // Kept only when long (see `smooth`): a quiet bin inside a loop is its own.
        return Kind::Pause;
    }
    if steady.1 > steady.0 && mid >= steady.0 && mid < steady.1 {
        return Kind::Loop;
    }
    if mid < steady.0 {
        return Kind::StartUp;
    }
    if b.kernel_ns * 20 >= w {
        // The loop again after its steady stretch (another epoch, steps of another
        // shape): mostly the steady state's own kernels.
        if b.loop_kernel_ns * 10 >= b.kernel_ns * 7 {
            Kind::Loop
        } else {
            Kind::GpuWork
        }
    } else if b.calls == 0 && b.kernel_ns == 0 {
        Kind::Pause
    } else {
        Kind::HostWork
    }
}

/// Kinds told by what the program was doing (never absorbed into their neighbours).
fn evidenced(k: Kind) -> bool {
    matches!(
        k,
        Kind::Compilation | Kind::Checkpoint | Kind::Evaluation | Kind::EpochBoundary
    )
}

/// The bins of each epoch boundary: the bin where new workers appeared (or the one just
/// before or after it), with the bins around it where the GPU ran little (under 5% of the
/// bin) and no evidence says what the host did instead, from the loop's start on.
fn boundary_bins(bins: &[Bin], edges: &[u64], w: u64, steady: (u64, u64)) -> Vec<bool> {
    let n = bins.len();
    let mut out = vec![false; n];
    let quiet = |i: usize| bins[i].kernel_ns * 20 < w && bins[i].evidence().is_none();
    for i in (0..n).filter(|&i| bins[i].new_workers && edges[i + 1] > steady.0) {
        // The new workers' first sample may come in the wait (forked, first batch not
        // ready) or with the first step after it (a sample every 100 ms).
        let Some(i) = [Some(i), i.checked_sub(1), Some(i + 1)]
            .into_iter()
            .flatten()
            .find(|&j| j < n && quiet(j))
        else {
            continue;
        };
        out[i] = true;
        let mut j = i;
        while j > 0 && quiet(j - 1) && edges[j - 1] >= steady.0 {
            j -= 1;
            out[j] = true;
        }
        let mut j = i + 1;
        while j < n && quiet(j) {
            out[j] = true;
            j += 1;
        }
    }
    out
}

/// A pause shorter than this is part of what it interrupts (a loop waiting for its
/// data, start-up between two steps of it).
const PAUSE_NS: u64 = 1_000_000_000;

/// A pause shorter than [`PAUSE_NS`] takes the kind of the phase before it (or after
/// it); then a phase of one bin told only by time, between two phases of one kind, joins
/// them (start-up cut by a compile bin and back).
fn smooth(mut phases: Vec<Phase>, kernel_ns: Vec<u64>, w: u64) -> (Vec<Phase>, Vec<u64>) {
    for i in 0..phases.len() {
        if phases[i].kind == Kind::Pause && phases[i].end_ns - phases[i].start_ns < PAUSE_NS {
            let near = if i > 0 {
                Some(phases[i - 1].kind)
            } else {
                phases.get(i + 1).map(|p| p.kind)
            };
            if let Some(k) = near.filter(|&k| k != Kind::Pause) {
                phases[i].kind = k;
            }
        }
    }
    let mut out: Vec<Phase> = Vec::with_capacity(phases.len());
    let mut ks: Vec<u64> = Vec::with_capacity(phases.len());
    let mut i = 0;
    while i < phases.len() {
        let p = &phases[i];
        let short = p.end_ns - p.start_ns <= w && !evidenced(p.kind) && p.kind != Kind::Loop;
        let joins = short
            && i + 1 < phases.len()
            && out
                .last()
                .is_some_and(|prev: &Phase| prev.kind == phases[i + 1].kind);
        if joins {
            let last = out.last_mut().unwrap();
            last.end_ns = phases[i + 1].end_ns;
            *ks.last_mut().unwrap() += kernel_ns[i] + kernel_ns[i + 1];
            i += 2;
            continue;
        }
        match out.last_mut() {
            Some(last) if last.kind == p.kind => {
                last.end_ns = p.end_ns;
                *ks.last_mut().unwrap() += kernel_ns[i];
            }
            _ => {
                out.push(p.clone());
                ks.push(kernel_ns[i]);
            }
        }
        i += 1;
    }
    (out, ks)
}

/// The run of the process whose trace `ctx` reads, with its steady state `steady`.
pub fn run(ctx: &Ctx, steady: (u64, u64)) -> Run {
    let (t0, t1) = (ctx.t0, ctx.t1);
    let span = t1.saturating_sub(t0);
    if span == 0 {
        return Run::default();
    }
    let w = bin_ns(span);
    let edges = edges(t0, t1, w, steady);
    let looped = loop_kernels(ctx.t, steady);
    let (bins, compiler, compiling) = bins(ctx.t, &edges, &looped);
    let boundary = boundary_bins(&bins, &edges, w, steady);
    let mut phases: Vec<Phase> = Vec::new();
    let mut kernel_ns: Vec<u64> = Vec::new();
    for (i, b) in bins.iter().enumerate() {
        let (start, end) = (edges[i], edges[i + 1]);
        let kind = if boundary[i] {
            Kind::EpochBoundary
        } else {
            kind_of(b, start, end - start, steady)
        };
        match phases.last_mut() {
            Some(p) if p.kind == kind => {
                p.end_ns = end - t0;
                *kernel_ns.last_mut().unwrap() += b.kernel_ns;
            }
            _ => {
                phases.push(Phase {
                    kind,
                    start_ns: start - t0,
                    end_ns: end - t0,
                    gpu_busy_pct: 0.0,
                });
                kernel_ns.push(b.kernel_ns);
            }
        }
    }
    let (phases, kernel_ns) = smooth(phases, kernel_ns, w);
    let mut phases = phases;
    for (p, k) in phases.iter_mut().zip(&kernel_ns) {
        let len = (p.end_ns - p.start_ns).max(1);
        p.gpu_busy_pct = (100.0 * *k as f64 / len as f64).min(100.0);
    }
    // Recompilation: compilation after the first GPU work (the loop or other).
    let first_work = phases
        .iter()
        .position(|p| matches!(p.kind, Kind::Loop | Kind::GpuWork));
    let (mut recompile_ns, mut recompiles) = (0, 0);
    if let Some(f) = first_work {
        recompile_ns = phases[f..]
            .iter()
            .filter(|p| p.kind == Kind::Compilation)
            .map(|p| p.end_ns - p.start_ns)
            .sum();
        recompiles = episodes(ctx.t, &compiling, t0 + phases[f].start_ns);
    }
    let mut by_kind: Vec<KindTime> = Vec::new();
    for p in &phases {
        let ns = p.end_ns - p.start_ns;
        match by_kind.iter_mut().find(|k| k.kind == p.kind) {
            Some(k) => {
                k.ns += ns;
                k.phases += 1;
            }
            None => by_kind.push(KindTime {
                kind: p.kind,
                ns,
                pct: 0.0,
                phases: 1,
                busy_ns: 0,
                idle: Vec::new(),
            }),
        }
    }
    for k in &mut by_kind {
        k.pct = crate::report::units::pct(k.ns, span);
    }
    by_kind.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.kind.cmp(&b.kind)));
    Run {
        span_ns: span,
        by_kind,
        phases,
        recompile_ns,
        recompiles,
        compiler,
        periodic: Vec::new(),
    }
}

/// The kernel names that make up most (90%) of the steady state's kernel time.
fn loop_kernels(t: &Trace, steady: (u64, u64)) -> HashSet<u32> {
    let mut by_name: HashMap<u32, u64> = HashMap::new();
    for k in &t.kernels {
        if k.start >= steady.0 && k.end <= steady.1 {
            let e = by_name.entry(k.name).or_default();
            *e = e.saturating_add(k.end.saturating_sub(k.start));
        }
    }
    let total: u128 = by_name.values().map(|&x| x as u128).sum();
    let mut v: Vec<(u32, u64)> = by_name.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut out = HashSet::new();
    let mut sum = 0;
    for (name, ns) in v {
        if sum * 10 >= total * 9 {
            break;
        }
        sum += ns as u128;
        out.insert(name);
    }
    out
}

/// Names the parts that keep interrupting the loop: phases of one kind (not the loop)
/// between its first and last stretch, at least twice; `step_ns` (the median step, 0 when
/// unknown) turns their spacing into steps.
pub fn name_periods(r: &mut Run, step_ns: u64) {
    let first = r.phases.iter().position(|p| p.kind == Kind::Loop);
    let last = r.phases.iter().rposition(|p| p.kind == Kind::Loop);
    let (Some(first), Some(last)) = (first, last) else {
        return;
    };
    let inner = &r.phases[first..=last];
    let loop_ns = inner[inner.len() - 1].end_ns - inner[0].start_ns;
    if loop_ns == 0 {
        return;
    }
    let mut kinds: Vec<Kind> = inner
        .iter()
        .map(|p| p.kind)
        .filter(|&k| k != Kind::Loop)
        .collect();
    kinds.sort();
    kinds.dedup();
    let mut out = Vec::new();
    for kind in kinds {
        let mine: Vec<&Phase> = inner.iter().filter(|p| p.kind == kind).collect();
        if mine.len() < 2 {
            continue;
        }
        let ns: u64 = mine.iter().map(|p| p.end_ns - p.start_ns).sum();
        let mut gaps: Vec<u64> = mine
            .windows(2)
            .map(|w| w[1].start_ns - w[0].start_ns)
            .collect();
        gaps.sort_unstable();
        let every_ns = gaps[gaps.len() / 2];
        // Steps in between: the loop's own time from one start to the next, in steps.
        let mut looped: Vec<u64> = mine
            .windows(2)
            .map(|w| {
                inner
                    .iter()
                    .filter(|p| {
                        p.kind == Kind::Loop
                            && p.start_ns >= w[0].start_ns
                            && p.start_ns < w[1].start_ns
                    })
                    .map(|p| p.end_ns - p.start_ns)
                    .sum()
            })
            .collect();
        looped.sort_unstable();
        let every_steps = (step_ns > 0)
            .then(|| (looped[looped.len() / 2] + step_ns / 2) / step_ns)
            .filter(|&n| n > 0);
        out.push(Periodic {
            kind,
            times: mine.len() as u64,
            ns,
            pct_of_loop: crate::report::units::pct(ns, loop_ns),
            every_ns,
            every_steps,
        });
    }
    out.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.kind.cmp(&b.kind)));
    r.periodic = out;
}
