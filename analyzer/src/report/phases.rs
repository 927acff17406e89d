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
use crate::report::steps::Steps;
use gputrace_env::facts::keys::PROCESS_START_NS;
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
    /// After the last CUDA work of a process that ended normally, to its last host
    /// sample, the main thread in no line of the program's own: exit handlers, the
    /// interpreter ending (a checkpoint or evaluation there is told by its samples as
    /// anywhere; the program's own code still running is host work).
    Shutdown,
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
            Kind::Shutdown => "shutdown",
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
    /// Where the program's main thread was in these phases: its most sampled place (the
    /// innermost frame of the program's own code, else the library frame nearest to it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_at: Option<crate::report::pysamples::HostPlace>,
}

/// The devices' idle time after the process's last CUDA work (no cause: nothing was
/// submitted any more).
pub const AFTER_GPU_WORK: &str = "after_gpu_work";

/// A cause's idle time in the phases of one kind.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct CauseTime {
    /// [`Cause::id`]: a finding's id, or an unattributed cause's name.
    pub cause: String,
    pub ns: u64,
    /// Share of the kind's device time (its `ns` x the devices counted).
    pub pct: f64,
}

impl Run {
    /// The phases of kind `k` after the last CUDA work, ns.
    pub fn after_gpu_work(&self, k: Kind) -> u64 {
        self.phases
            .iter()
            .filter(|p| p.kind == k)
            .map(|p| p.end_ns.saturating_sub(p.start_ns.max(self.gpu_end_ns)))
            .sum()
    }
}

impl KindTime {
    /// Sets the kind's busy time and idle causes, measured on `devices` devices.
    /// `after_ns`: the kind's time after the last CUDA work, which the idle pass does not
    /// walk: idle on every device counted, as [`AFTER_GPU_WORK`].
    pub fn set_idle(
        &mut self,
        busy_ns: u64,
        by_cause: &[u64; NCAUSE],
        devices: u64,
        after_ns: u64,
    ) {
        let devices = if after_ns > 0 {
            devices.max(1)
        } else {
            devices
        };
        let wall = self.ns.saturating_mul(devices);
        self.busy_ns = busy_ns;
        let after = (AFTER_GPU_WORK, after_ns.saturating_mul(devices));
        self.idle = Cause::ALL
            .iter()
            .map(|&c| (c.id(), by_cause[c as usize]))
            .chain(std::iter::once(after))
            .filter(|&(_, ns)| ns > 0)
            .map(|(c, ns)| CauseTime {
                cause: c.to_string(),
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
    /// ns from the trace start to the last CUDA work (`span_ns` goes on to the last host
    /// sample: the shutdown, or a checkpoint written after the last copy).
    pub gpu_end_ns: u64,
    /// The Python frames told compilation (`torch` or `jax`), when any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compiler: Option<&'static str>,
    /// How long the process ran before its first CUDA call, where tracing begins: the
    /// imports and set-up before CUDA was used (from the `process_start_ns` fact; traces
    /// of older libraries do not have it). Not traced, not in `span_ns`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before_trace_ns: Option<u64>,
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

/// The last host sample (a Python stack or a thread's CPU clock) of the process up to
/// `hi`: how long it ran after its last CUDA work.
fn host_end(t: &Trace, hi: u64) -> u64 {
    let py = t.py_samples.iter().map(|s| s.ts);
    let cpu = t.thread_cpu.iter().map(|s| s.ts);
    py.chain(cpu).filter(|&ts| ts <= hi).max().unwrap_or(0)
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
/// around `optimizer.step`, the runtime of compiled graphs, Triton's launcher, the
/// compile pool's reader thread (the pool's work shows in the frames that wait on it). A stack
/// counts as compiling only through some other compiler frame.
const COMPILE_RUNTIME_FILES: &[&str] = &[
    "torch/_dynamo/eval_frame.py",
    // Evaluating a compiled frame's guards before each call (building them happens under
    // `convert_frame.py`, which compiles).
    "torch/_dynamo/guards.py",
    "torch/_dynamo/external_utils.py",
    "torch/_dynamo/decorators.py",
    "torch/_functorch/_aot_autograd/runtime_wrappers.py",
    "torch/_inductor/runtime/",
    "torch/_inductor/output_code.py",
    // The compile pool's reader thread, always waiting for its workers' replies.
    "torch/_inductor/compile_worker/",
];

/// Functions of compiler files that run on every call of a compiled graph: inductor's
/// input-aligning wrapper (`utils.py: run`), AOT autograd's module `forward` and call helper
/// (`_aot_autograd/utils.py: g`, `call_func_at_runtime_with_args`); and the exit
/// handler that shuts the compile pool down.
const COMPILE_RUNTIME_FUNCTIONS: &[(&str, &str)] = &[
    ("torch/_inductor/utils.py", "run"),
    ("torch/_functorch/aot_autograd.py", "forward"),
    ("torch/_functorch/_aot_autograd/utils.py", "g"),
    (
        "torch/_functorch/_aot_autograd/utils.py",
        "call_func_at_runtime_with_args",
    ),
    // At exit: waiting for the compile pool's processes to end.
    (
        "torch/_inductor/async_compile.py",
        "shutdown_compile_workers",
    ),
];

/// Functions inside the runtime's files that compile all the same: the first call of a
/// kernel with several configurations benchmarks each (autotuning), then keeps one.
const COMPILE_AUTOTUNE_FUNCTIONS: &[(&str, &str)] = &[
    (
        "torch/_inductor/runtime/triton_heuristics.py",
        "autotune_to_one_config",
    ),
    (
        "torch/_inductor/runtime/triton_heuristics.py",
        "benchmark_all_configs",
    ),
    ("torch/_inductor/runtime/triton_heuristics.py", "bench"),
    // Timing one configuration: its inputs cloned, the kernel called (a sampled stack
    // can stop this deep).
    (
        "torch/_inductor/runtime/triton_heuristics.py",
        "kernel_call",
    ),
    (
        "torch/_inductor/runtime/triton_heuristics.py",
        "maybe_clone_args",
    ),
    ("torch/_inductor/runtime/benchmarking.py", "benchmark_gpu"),
    ("torch/_inductor/runtime/benchmarking.py", "benchmark"),
];

/// Frames of saving and loading checkpoints.
const CHECKPOINT_FILES: &[&str] = &["torch/serialization.py", "safetensors", "orbax/"];

/// What one sampled stack was doing.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Doing {
    Compiling(&'static str),
    /// Benchmarking a kernel's configurations: compiling, with kernels on the GPU that
    /// carry the loop's own names.
    Autotuning,
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
        if COMPILE_AUTOTUNE_FUNCTIONS
            .iter()
            .any(|(p, fun)| file.contains(p) && t.str(f.function) == *fun)
        {
            return Doing::Autotuning;
        }
        if let Some((_, who)) = COMPILE_FILES.iter().find(|(p, _)| file.contains(p)) {
            let runtime = COMPILE_RUNTIME_FILES.iter().any(|p| file.contains(p))
                || COMPILE_RUNTIME_FUNCTIONS
                    .iter()
                    .any(|(p, fun)| file.contains(p) && t.str(f.function) == *fun);
            if !runtime {
                return Doing::Compiling(who);
            }
        }
        if CHECKPOINT_FILES.iter().any(|p| file.contains(p)) {
            return Doing::Checkpoint;
        }
    }
    let evaluating = st.frames.iter().any(|f| {
        let fun = t.str(f.function).to_ascii_lowercase();
        user_file(t.str(f.file)) && ["eval", "valid", "test"].iter().any(|p| fun.starts_with(p))
    });
    if evaluating {
        Doing::Evaluating
    } else {
        Doing::Other
    }
}

/// A file of the program's own code: not a library's, not Python's, not generated.
fn user_file(file: &str) -> bool {
    !(file.contains("site-packages") || file.contains("/lib/python") || file.starts_with('<'))
}

/// The thread whose Python runs the program: the process's first thread when it was
/// sampled, else the thread sampled most.
fn main_thread(t: &Trace) -> u32 {
    let pid = t.meta.pid;
    if t.py_samples.iter().any(|s| s.tid == pid) {
        return pid;
    }
    // Samples come by thread: count each thread's run.
    let mut best = (0usize, pid);
    for run in t.py_samples.chunk_by(|a, b| a.tid == b.tid) {
        if run.len() > best.0 {
            best = (run.len(), run[0].tid);
        }
    }
    best.1
}

/// The innermost frame of the program's own code in a sampled stack: (file, line).
fn user_line(t: &Trace, stack: u32) -> Option<(u32, u32)> {
    t.py_stack(stack)?
        .frames
        .iter()
        .find(|f| user_file(t.str(f.file)))
        .map(|f| (f.file, f.line))
}

/// Where the loop's code began running before its first step's kernels: the first of
/// the main thread's samples, back from `from` (the loop phase's start) without a break,
/// whose innermost line of the program's own code is one the steady state's samples show
/// (the first iteration's host work: a library's lazy start in its first call, the
/// first batch's transfer). `looping`: the loop phases (absolute); nothing before `floor`.
fn loop_code_start(t: &Trace, from: u64, floor: u64, looping: &[(u64, u64)]) -> Option<u64> {
    let tid = main_thread(t);
    let lines: HashSet<(u32, u32)> = looping
        .iter()
        .flat_map(|&(a, b)| t.py_samples_in(tid, a, b))
        .filter_map(|s| user_line(t, s.stack))
        .collect();
    if lines.is_empty() {
        return None;
    }
    let mut start = None;
    for s in t.py_samples_in(tid, floor, from).iter().rev() {
        match user_line(t, s.stack) {
            Some(l) if lines.contains(&l) => start = Some(s.ts),
            _ => break,
        }
    }
    start
}

/// Where the loop began, given its first warm-up step's start `first` and the steady
/// state: `first`, unless the main thread's samples after it show a line of the
/// program's own that the steady state's samples do not (a warm-up "step" that spans a
/// wait outside the loop: for another process to be ready); then from the first sample
/// after the last such line (the steady state's start without one). Without samples
/// nothing tells a slow first step from a wait before the loop: the steady state's start.
fn warmup_start(t: &Trace, first: u64, steady: (u64, u64)) -> u64 {
    if first >= steady.0 {
        return steady.0;
    }
    let tid = main_thread(t);
    let lines: HashSet<(u32, u32)> = t
        .py_samples_in(tid, steady.0, steady.1)
        .iter()
        .filter_map(|s| user_line(t, s.stack))
        .collect();
    if lines.is_empty() {
        return steady.0;
    }
    let mut start = first;
    for s in t.py_samples_in(tid, first, steady.0) {
        if user_line(t, s.stack).is_some_and(|l| !lines.contains(&l)) {
            start = s.ts + 1;
        }
    }
    if start == first {
        return first;
    }
    t.py_samples_in(tid, start, steady.0)
        .first()
        .map_or(steady.0, |s| s.ts)
}

/// Per bin: samples by what they were doing, kernel time, CUDA calls.
#[derive(Clone, Copy, Default)]
struct Bin {
    samples: u32,
    compiling: u32,
    /// Of `compiling`, samples benchmarking configurations ([`Doing::Autotuning`]).
    autotuning: u32,
    checkpoint: u32,
    evaluating: u32,
    kernel_ns: u64,
    /// Kernel time of the steady state's own kernels (by name).
    loop_kernel_ns: u64,
    calls: u32,
    /// A child process of the traced one (a DataLoader worker) was first seen here,
    /// after others had been: the workers were replaced (a new epoch's iterator).
    new_workers: bool,
    /// The main thread's samples, and those of them with a line of the program's own code
    /// on the stack (its `<module>` still running, not an exit handler).
    main_samples: u32,
    main_in_program: u32,
    /// One thread's samples (two or more) were mostly compiling: AOT autograd compiles
    /// the backward pass in the autograd thread while the main thread waits in
    /// `backward()`, and waiting threads (a tqdm monitor, a compile pool's reader) outvote
    /// it in the bin.
    thread_compiling: bool,
}

/// Bin edges: every `w` from `t0`, the steady state's start and end and where the loop
/// began, up to `t1`.
fn edges(t0: u64, t1: u64, w: u64, steady: (u64, u64), loop_start: u64) -> Vec<u64> {
    let mut e: Vec<u64> = (0..).map(|i| t0 + i * w).take_while(|&x| x < t1).collect();
    e.extend(
        [steady.0, steady.1, loop_start]
            .into_iter()
            .filter(|&x| x > t0 && x < t1),
    );
    e.push(t1);
    e.sort_unstable();
    e.dedup();
    e
}

/// The times of the samples that showed each evidenced kind, sorted.
#[derive(Default)]
struct Seen {
    compiling: Vec<u64>,
    /// Of `compiling`, the samples benchmarking configurations.
    autotuning: Vec<u64>,
    checkpoint: Vec<u64>,
    evaluating: Vec<u64>,
}

impl Seen {
    fn of(&self, k: Kind) -> &[u64] {
        match k {
            Kind::Compilation => &self.compiling,
            Kind::Checkpoint => &self.checkpoint,
            Kind::Evaluation => &self.evaluating,
            _ => &[],
        }
    }
}

/// What the bins hold, the compiler seen, and when the samples showed each kind.
type Binned = (Vec<Bin>, Option<&'static str>, Seen);

fn bins(t: &Trace, edges: &[u64], looped: &HashSet<u32>) -> Binned {
    let (t0, t1) = (edges[0], edges[edges.len() - 1]);
    let n = edges.len() - 1;
    let mut out = vec![Bin::default(); n];
    let at = |ts: u64| edges.partition_point(|&e| e <= ts).clamp(1, n) - 1;
    let mut compiler = None;
    let mut seen = Seen::default();
    let main = main_thread(t);
    // One thread's samples in one bin (the samples come by thread, then time): (thread,
    // bin, samples, compiling).
    let mut one: Option<(u32, usize, u32, u32)> = None;
    let flush = |one: Option<(u32, usize, u32, u32)>, out: &mut [Bin]| {
        if let Some((_, bin, n, c)) = one {
            if n >= 2 && c * 2 >= n {
                out[bin].thread_compiling = true;
            }
        }
    };
    for s in &t.py_samples {
        if s.ts < t0 || s.ts >= t1 {
            continue;
        }
        let Some(st) = t.py_stack(s.stack) else {
            continue;
        };
        let i = at(s.ts);
        if one.is_some_and(|(tid, bin, _, _)| tid != s.tid || bin != i) {
            flush(one.take(), &mut out);
        }
        let mine = one.get_or_insert((s.tid, i, 0, 0));
        mine.2 += 1;
        let b = &mut out[i];
        b.samples += 1;
        if s.tid == main {
            b.main_samples += 1;
            b.main_in_program += st.frames.iter().any(|f| user_file(t.str(f.file))) as u32;
        }
        match doing(t, st) {
            now @ (Doing::Autotuning | Doing::Compiling(_)) => {
                let who = match now {
                    Doing::Compiling(who) => who,
                    _ => {
                        b.autotuning += 1;
                        seen.autotuning.push(s.ts);
                        "torch"
                    }
                };
                b.compiling += 1;
                mine.3 += 1;
                compiler = compiler.or(Some(who));
                seen.compiling.push(s.ts);
            }
            Doing::Checkpoint => {
                b.checkpoint += 1;
                seen.checkpoint.push(s.ts);
            }
            Doing::Evaluating => {
                b.evaluating += 1;
                seen.evaluating.push(s.ts);
            }
            Doing::Other => {}
        }
    }
    flush(one, &mut out);
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
    seen.compiling.sort_unstable();
    seen.autotuning.sort_unstable();
    seen.checkpoint.sort_unstable();
    seen.evaluating.sort_unstable();
    (out, compiler, seen)
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
/// wherever a kernel started between two of them (GPU work ran in between) that are in
/// two compilation phases (`phases`, absolute); inside one phase, where two samples are
/// further apart than one and a half times their usual spacing and the loop's own kernels
/// (`looped`) ran between them, unless one of the two benchmarks configurations (the
/// kernels autotuning times, or XLA's own GPU work, are not the program running again);
/// outside phases, where they are that far apart and any GPU work ran between.
fn episodes(
    t: &Trace,
    seen: &Seen,
    looped: &HashSet<u32>,
    from: u64,
    phases: &[(u64, u64)],
) -> u64 {
    let compiling = &seen.compiling;
    let mut gaps: Vec<u64> = compiling.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort_unstable();
    let usual = gaps.get(gaps.len() / 2).copied().unwrap_or(0);
    // The compilation phase a sample is in (`phases`: absolute, in time order).
    let phase_of = |ts: u64| {
        let i = phases.partition_point(|p| p.1 <= ts);
        phases.get(i).filter(|p| p.0 <= ts).map(|_| i)
    };
    let tuning = |ts: u64| seen.autotuning.binary_search(&ts).is_ok();
    let ran_loop = |a: u64, b: u64| {
        let i = t.kernels.partition_point(|k| k.start <= a);
        t.kernels
            .iter_from(i)
            .take_while(|k| k.start < b)
            .any(|k| looped.contains(&k.name))
    };
    let ran_between = |a: u64, b: u64| {
        let i = t.kernels.partition_point(|k| k.start <= a);
        let gpu = t.kernels.get(i).is_some_and(|k| k.start < b);
        let far = (b - a) * 2 > usual * 3;
        match (phase_of(a), phase_of(b)) {
            // Two phases: the GPU ran something between them, however short.
            (Some(x), Some(y)) if x != y => gpu,
            // Inside one: the kernels autotuning times come between its samples while
            // the compiler goes on: one compilation.
            (Some(_), Some(_)) if tuning(a) || tuning(b) => false,
            // Else a new one only where the program ran its loop's own kernels in
            // between (a short run of steps the phase took in), not where only other
            // GPU work ran (XLA's own while it compiles).
            (Some(_), Some(_)) => far && ran_loop(a, b),
            _ => far && gpu,
        }
    };
    let mut n = 0;
    let mut prev: Option<u64> = None;
    for &ts in compiling {
        let new = match prev {
            None => true,
            Some(p) => ran_between(p, ts),
        };
        // A compiling sample outside every compilation phase (a stray one among the
        // loop's) starts none.
        if new && ts >= from && phase_of(ts).is_some() {
            n += 1;
        }
        prev = Some(ts);
    }
    n
}

impl Bin {
    /// The GPU ran something in the bin (5% of it or more), mostly the steady state's own
    /// kernels (70%).
    fn looks_looped(&self, w: u64) -> bool {
        self.kernel_ns * 20 >= w && self.loop_kernel_ns * 10 >= self.kernel_ns * 7
    }

    /// The kind most of the bin's Python samples show the program doing (two samples or
    /// more): compiling, saving a checkpoint or evaluating.
    fn evidence(&self, w: u64) -> Option<Kind> {
        let most = |n: u32| self.samples >= 2 && n * 2 >= self.samples;
        // One thread compiling counts while the GPU is not mostly running the loop, or
        // when it benchmarks configurations (the loop's kernels, run to time them).
        let thread = self.thread_compiling && (self.loop_kernel_ns * 2 < w || self.autotuning > 0);
        if most(self.compiling) || thread {
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
    if let Some(k) = b.evidence(w) {
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
        if b.looks_looped(w) {
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
    let quiet = |i: usize| bins[i].kernel_ns * 20 < w && bins[i].evidence(w).is_none();
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

/// The run of the process whose trace `ctx` reads, with its steps `st` (the steady
/// state, where the loop began, the step bounds when known).
/// `ended_normally`: the process exited on its own ([`crate::report::endings::Ended`]),
/// so its run goes on after its last CUDA work.
pub fn run(ctx: &Ctx, st: &Steps, ended_normally: bool) -> Run {
    let (steady, bounds) = (st.steady, &st.bounds[..]);
    // The run of a process that ended normally goes on after the last CUDA work for as
    // long as the host was sampled (a hang's or a failure's quiet end is not its run).
    let (t0, gpu_end) = (ctx.t0, ctx.t1);
    if gpu_end <= t0 {
        return Run::default();
    }
    let t1 = if ended_normally {
        gpu_end.max(host_end(ctx.t, ctx.hi))
    } else {
        gpu_end
    };
    let span = t1 - t0;
    let w = bin_ns(span);
    // The loop's warm-up steps are the loop's (see [`Steps::loop_start`]).
    let loop_start = warmup_start(ctx.t, st.loop_start.clamp(t0, steady.0.max(t0)), steady);
    let mut edges = edges(t0, t1, w, steady, loop_start);
    if gpu_end < t1 {
        let i = edges.partition_point(|&e| e < gpu_end);
        if edges[i] != gpu_end {
            edges.insert(i, gpu_end);
        }
    }
    let looped = loop_kernels(ctx.t, steady);
    let (bins, compiler, seen) = bins(ctx.t, &edges, &looped);
    let boundary = boundary_bins(&bins, &edges, w, steady);
    let mut kinds: Vec<Kind> = bins
        .iter()
        .enumerate()
        .map(|(i, b)| {
            if boundary[i] {
                Kind::EpochBoundary
            } else {
                kind_of(b, edges[i], edges[i + 1] - edges[i], steady)
            }
        })
        .collect();
    // After the last CUDA work: host work while the main thread still ran the program's
    // own code, else shutdown (exit handlers, the interpreter ending), unless the samples
    // tell what it was.
    for (i, k) in kinds.iter_mut().enumerate() {
        if edges[i] >= gpu_end && !evidenced(*k) {
            let b = &bins[i];
            let own = b.main_samples > 0 && b.main_in_program * 2 >= b.main_samples;
            *k = if own { Kind::HostWork } else { Kind::Shutdown };
        }
    }
    // The loop began before its steady stretch: at its warm-up steps, and where the bins
    // just before those already ran its kernels (steps too irregular to be told): loop,
    // not start-up.
    let first_steady = edges.partition_point(|&e| e < steady.0).min(bins.len());
    let first_loop = edges.partition_point(|&e| e < loop_start).min(first_steady);
    for k in &mut kinds[first_loop..first_steady] {
        if *k == Kind::StartUp {
            *k = Kind::Loop;
        }
    }
    for i in (0..first_loop).rev() {
        if kinds[i] != Kind::StartUp || !bins[i].looks_looped(edges[i + 1] - edges[i]) {
            break;
        }
        kinds[i] = Kind::Loop;
    }
    let mut phases: Vec<Phase> = Vec::new();
    let mut kernel_ns: Vec<u64> = Vec::new();
    for (i, b) in bins.iter().enumerate() {
        let (start, end) = (edges[i], edges[i + 1]);
        let kind = kinds[i];
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
    let (phases, _) = smooth(phases, kernel_ns, w);
    let mut phases = refine(phases, ctx.t, t0, w, (steady, loop_start), &seen, &looped);
    // The first loop stretch after start-up begins with the loop's code.
    if let Some(i) = phases.iter().position(|p| p.kind == Kind::Loop) {
        if i > 0 && phases[i - 1].kind == Kind::StartUp {
            let (a, b) = (t0 + phases[i - 1].start_ns, t0 + phases[i].start_ns);
            let looping: Vec<(u64, u64)> = phases
                .iter()
                .filter(|p| p.kind == Kind::Loop)
                .map(|p| (t0 + p.start_ns, t0 + p.end_ns))
                .collect();
            if let Some(y) = loop_code_start(ctx.t, b, a, &looping) {
                phases[i - 1].end_ns = y - t0;
                phases[i].start_ns = y - t0;
                phases.retain(|p| p.end_ns > p.start_ns);
            }
        }
    }
    let phases = loop_by_steps(phases, ctx.t, t0, bounds, &seen.compiling, &looped);
    let phases = loops_inside_compilation(phases, ctx.t, t0, &seen.compiling, &looped);
    let mut phases = startup_compilation(phases, ctx.t, t0);
    set_busy(&mut phases, ctx.t, t0);
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
        let spans: Vec<(u64, u64)> = phases
            .iter()
            .filter(|p| p.kind == Kind::Compilation)
            .map(|p| (t0 + p.start_ns, t0 + p.end_ns))
            .collect();
        recompiles = episodes(ctx.t, &seen, &looped, t0 + phases[f].start_ns, &spans);
    }
    let by_kind = by_kind(&phases, ctx.t, t0, span);
    Run {
        span_ns: span,
        by_kind,
        phases,
        recompile_ns,
        recompiles,
        gpu_end_ns: gpu_end - t0,
        compiler,
        before_trace_ns: before_trace(ctx.t, t0),
        periodic: Vec::new(),
    }
}

/// The time from the process's start to `t0` (its first traced activity), when the trace
/// says when the process started and that is before `t0` by less than a week (a clock
/// stepped in between gives nothing rather than a wrong figure).
fn before_trace(t: &Trace, t0: u64) -> Option<u64> {
    let start: u64 = crate::model::trace::fact(t, fmt::FACT_HOST, PROCESS_START_NS)?
        .parse()
        .ok()?;
    const WEEK_NS: u64 = 7 * 86_400 * 1_000_000_000;
    t0.checked_sub(start).filter(|&d| d > 0 && d < WEEK_NS)
}

/// The time of each kind over the run (`span` ns), most first, with where the main thread
/// was in it (`t0` the trace start); busy and idle are set later, by the idle pass.
fn by_kind(phases: &[Phase], t: &Trace, t0: u64, span: u64) -> Vec<KindTime> {
    let mut by_kind: Vec<KindTime> = Vec::new();
    for p in phases {
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
                host_at: None,
            }),
        }
    }
    let main = crate::report::pysamples::stand_in(t, None);
    for k in &mut by_kind {
        k.pct = crate::report::units::pct(k.ns, span);
        let spans: Vec<(u64, u64)> = phases
            .iter()
            .filter(|p| p.kind == k.kind)
            .map(|p| (t0 + p.start_ns, t0 + p.end_ns))
            .collect();
        if main.is_some() {
            k.host_at = crate::report::pysamples::tally(t, main, &spans)
                .into_iter()
                .next();
        }
    }
    by_kind.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.kind.cmp(&b.kind)));
    by_kind
}

/// Moves the edges between phases off the bins' grid to where the evidence changes,
/// within a bin of where the bins put them (`t0` the trace start, `w` the bin width):
/// * into a phase told by samples (compilation, a checkpoint, evaluation): the end of
///   the last kernel that started before its first sample there (without one, that
///   sample);
/// * out of one: the first kernel that started after its last sample there (without
///   one, that sample); from one into another: halfway between the last sample of the
///   one and the next of the other;
/// * between the loop and a kind told by time: the loop's first kernel (its kernels:
///   `looped`) that started after the edge's bin, or the end of its last one.
///
/// The steady state's own edges and the loop's start stay (they are steps' bounds). A
/// phase left empty goes; neighbours of one kind join.
fn refine(
    phases: Vec<Phase>,
    t: &Trace,
    t0: u64,
    w: u64,
    (steady, loop_start): ((u64, u64), u64),
    seen: &Seen,
    looped: &HashSet<u32>,
) -> Vec<Phase> {
    let mut phases = phases;
    let told = |k: Kind| matches!(k, Kind::Compilation | Kind::Checkpoint | Kind::Evaluation);
    for i in 1..phases.len() {
        let (a, b) = (&phases[i - 1], &phases[i]);
        let x = t0 + b.start_ns;
        let fixed = x == steady.0 || x == steady.1 || x == loop_start;
        if fixed {
            continue;
        }
        let lo = (t0 + a.start_ns).max(x.saturating_sub(w));
        let hi = (t0 + b.end_ns).min(x + w);
        let in_window = |ts: &[u64]| {
            let i = ts.partition_point(|&s| s < lo);
            let j = ts.partition_point(|&s| s < hi);
            (
                ts.get(i).copied().filter(|_| i < j),
                j.checked_sub(1).filter(|&j| j >= i).map(|j| ts[j]),
            )
        };
        let moved = if told(a.kind) && told(b.kind) {
            // Halfway from the last sample of the one to the first of the other after it.
            let last = in_window(seen.of(a.kind)).1;
            last.and_then(|s1| {
                let ts = seen.of(b.kind);
                let j = ts.partition_point(|&x| x <= s1);
                ts.get(j)
                    .filter(|&&s2| s2 < hi)
                    .map(|&s2| s1 + (s2 - s1) / 2)
            })
        } else if told(b.kind) {
            in_window(seen.of(b.kind))
                .0
                .map(|s| last_end(t, lo, s, None).unwrap_or(s))
        } else if told(a.kind) {
            in_window(seen.of(a.kind)).1.map(|s| {
                // A last sample benchmarking configurations came while their kernels
                // ran: the compilation ends with that run of kernels.
                let from = if seen.autotuning.binary_search(&s).is_ok() {
                    autotune_end(t, s, looped)
                } else {
                    s
                };
                first_start(t, from, hi, None).unwrap_or(s)
            })
        } else if b.kind == Kind::Loop || a.kind == Kind::Loop {
            // Two bins either side: a bin of the loop's first or last step can read as
            // quiet (one step's kernels in a bin of waiting for data).
            let lo = (t0 + a.start_ns).max(x.saturating_sub(2 * w));
            let hi = (t0 + b.end_ns).min(x + 2 * w);
            // Next to a stretch with no CUDA work (a pause, an epoch boundary), the loop
            // is its CUDA calls too: the first batch's copy, the last synchronize.
            let calls = |k: Kind| matches!(k, Kind::Pause | Kind::EpochBoundary);
            // Any kernel there is the loop's; elsewhere only the loop's own.
            let only = |k: Kind| (!calls(k)).then_some(looped);
            if b.kind == Kind::Loop {
                let k = first_start(t, lo, hi, only(a.kind));
                let c = calls(a.kind).then(|| first_call(t, lo, hi)).flatten();
                k.into_iter().chain(c).min()
            } else {
                let k = last_end(t, lo, hi, only(b.kind));
                let c = calls(b.kind).then(|| last_call_end(t, lo, hi)).flatten();
                k.into_iter().chain(c).max()
            }
        } else {
            None
        };
        if let Some(y) = moved {
            // Within the phases either side (the loop's window is two bins wide).
            let y = y.clamp(t0 + a.start_ns, t0 + b.end_ns) - t0;
            phases[i - 1].end_ns = y;
            phases[i].start_ns = y;
        }
    }
    tidy(phases)
}

/// A run of kernels each starting within this of the one before.
const RUN_GAP_NS: u64 = 1_000_000;
/// Kernels in a run that is a loop of its own inside a compilation.
const RUN_KERNELS: usize = 32;

/// Compiling before the loop's first stretch is start-up until the main thread compiles
/// for a line of the loop's own code (one its samples show in the loop, or compiling
/// again later): a model's or a random key's first jitted call at start-up is a one-time
/// cost, not the loop's compilation. Samples without a line of the program's own (a
/// stack deeper than the sampler keeps) count as start-up.
fn startup_compilation(phases: Vec<Phase>, t: &Trace, t0: u64) -> Vec<Phase> {
    let Some(first) = phases.iter().position(|p| p.kind == Kind::Loop) else {
        return phases;
    };
    if !phases[..first].iter().any(|p| p.kind == Kind::Compilation) {
        return phases;
    }
    let tid = main_thread(t);
    let lines: HashSet<(u32, u32)> = phases[first..]
        .iter()
        .filter(|p| matches!(p.kind, Kind::Loop | Kind::Compilation))
        .flat_map(|p| t.py_samples_in(tid, t0 + p.start_ns, t0 + p.end_ns))
        .filter_map(|s| user_line(t, s.stack))
        .collect();
    if lines.is_empty() {
        return phases;
    }
    let mut phases = phases;
    for i in 0..first {
        if phases[i].kind != Kind::Compilation {
            continue;
        }
        let (s, e) = (t0 + phases[i].start_ns, t0 + phases[i].end_ns);
        let at = t
            .py_samples_in(tid, s, e)
            .iter()
            .find(|x| user_line(t, x.stack).is_some_and(|l| lines.contains(&l)))
            .map(|x| x.ts);
        match at {
            None => phases[i].kind = Kind::StartUp,
            Some(ts) => {
                let mut head = phases[i].clone();
                head.kind = Kind::StartUp;
                head.end_ns = ts - t0;
                phases[i].start_ns = ts - t0;
                phases.insert(i, head);
                break;
            }
        }
    }
    tidy(phases)
}

/// A run of kernels, each starting within [`RUN_GAP_NS`] of the one before.
struct KernelRun {
    start: u64,
    end: u64,
    last_start: u64,
    kernels: usize,
    /// Kernels by name, most first once the run is closed.
    names: Vec<(u32, usize)>,
}

impl KernelRun {
    /// Mixed like a step of the loop: as many names as one (three, or all of `looped`
    /// when it has fewer), no two of them making up 80% of the kernels unless the loop
    /// has fewer than three. Autotuning runs one kernel a hundred times with a
    /// cache-clearing fill between: two names.
    fn mixed(&self, looped: &HashSet<u32>) -> bool {
        let needed = looped.len().clamp(1, 3);
        let top2: usize = self.names.iter().take(2).map(|x| x.1).sum();
        self.names.len() >= needed && (needed < 3 || top2 * 10 < self.kernels * 8)
    }
}

/// The runs of kernels from the `from`th kernel on, in time order.
fn kernel_runs(t: &Trace, from: usize) -> impl Iterator<Item = KernelRun> + '_ {
    let mut ks = t.kernels.iter_from(from).peekable();
    std::iter::from_fn(move || {
        let k = ks.next()?;
        let mut r = KernelRun {
            start: k.start,
            end: k.end,
            last_start: k.start,
            kernels: 1,
            names: vec![(k.name, 1)],
        };
        while let Some(k) = ks.next_if(|k| k.start - r.last_start <= RUN_GAP_NS) {
            r.end = r.end.max(k.end);
            r.last_start = k.start;
            r.kernels += 1;
            match r.names.iter_mut().find(|x| x.0 == k.name) {
                Some(x) => x.1 += 1,
                None => r.names.push((k.name, 1)),
            }
        }
        r.names.sort_unstable_by_key(|x| std::cmp::Reverse(x.1));
        Some(r)
    })
}

/// The runs of kernels in `[s, e)` that look like a loop of their own: [`RUN_KERNELS`]
/// kernels or more, with no compiling sample (`compiling`, sorted) from the run's first
/// start to its last end (autotuning's are in compiler frames), [`KernelRun::mixed`]. A
/// run that began up to a second before `s` or goes on after `e` is judged whole.
/// Absolute, clipped to `[s, e)`.
fn loop_runs(
    t: &Trace,
    s: u64,
    e: u64,
    compiling: &[u64],
    looped: &HashSet<u32>,
) -> Vec<(u64, u64)> {
    let from = t.kernels.first_starting_at(s.saturating_sub(1_000_000_000));
    kernel_runs(t, from)
        .take_while(|r| r.start < e)
        .filter(|r| {
            let i = compiling.partition_point(|&x| x < r.start);
            let quiet = compiling.get(i).is_none_or(|&x| x > r.end);
            r.kernels >= RUN_KERNELS && quiet && r.mixed(looped) && r.end > s
        })
        .map(|r| (r.start.max(s), r.end.min(e)))
        .collect()
}

/// Loops too short for a bin inside a compilation phase (a jitted step run 40 times in
/// 3 ms between two compilations): its [`loop_runs`].
fn loops_inside_compilation(
    phases: Vec<Phase>,
    t: &Trace,
    t0: u64,
    compiling: &[u64],
    looped: &HashSet<u32>,
) -> Vec<Phase> {
    let mut out: Vec<Phase> = Vec::with_capacity(phases.len());
    let push = |out: &mut Vec<Phase>, kind: Kind, s: u64, e: u64| {
        if e <= s {
            return;
        }
        match out.last_mut() {
            Some(last) if last.kind == kind && last.end_ns == s => last.end_ns = e,
            _ => out.push(Phase {
                kind,
                start_ns: s,
                end_ns: e,
                gpu_busy_pct: 0.0,
            }),
        }
    };
    for p in phases {
        if p.kind != Kind::Compilation {
            push(&mut out, p.kind, p.start_ns, p.end_ns);
            continue;
        }
        let (s, e) = (t0 + p.start_ns, t0 + p.end_ns);
        let runs = loop_runs(t, s, e, compiling, looped);
        // What is left between and around the runs stays compilation where a sample
        // shows compiling; beside a run, without one, it is the loop's (its host work
        // between two bursts of kernels).
        let rest = |x: u64, y: u64| {
            let i = compiling.partition_point(|&c| c < t0 + x);
            let sampled = compiling.get(i).is_some_and(|&c| c < t0 + y);
            if sampled || runs.is_empty() {
                Kind::Compilation
            } else {
                Kind::Loop
            }
        };
        let mut at = p.start_ns;
        for &(a, b) in &runs {
            push(&mut out, rest(at, a - t0), at, a - t0);
            push(&mut out, Kind::Loop, a - t0, b - t0);
            at = b - t0;
        }
        push(&mut out, rest(at, p.end_ns), at, p.end_ns);
    }
    out
}

/// Next to compilation, the loop is its steps: a loop phase beside a compilation
/// phase starts at its first ordinary step and ends with its last (ordinary: at most 4
/// times the median step; a step that compiled, or ran a compiled graph for the first
/// time, is longer), and one with no ordinary step is the compilation's (the first call
/// of a new graph loading and autotuning its kernels). Without steps, a loop phase
/// beside compilation with none of [`loop_runs`] is the compilation's (the new input
/// made before the call that compiles, a first call loading and autotuning kernels).
/// `bounds` as for [`run`]; `compiling` the compiling samples' times.
fn loop_by_steps(
    phases: Vec<Phase>,
    t: &Trace,
    t0: u64,
    bounds: &[u64],
    compiling: &[u64],
    looped: &HashSet<u32>,
) -> Vec<Phase> {
    // Ordinary steps, absolute [start, end), in time order; without steps, each kernel
    // is one (a loop phase with none is no loop).
    let ordinary: Vec<(u64, u64)> = if bounds.len() >= 4 {
        let mut d: Vec<u64> = bounds.windows(2).map(|w| w[1] - w[0]).collect();
        d.sort_unstable();
        let limit = d[d.len() / 2].saturating_mul(4);
        bounds
            .windows(2)
            .filter(|w| w[1] - w[0] <= limit)
            .map(|w| (w[0], w[1]))
            .collect()
    } else {
        Vec::new()
    };
    let stepped = !ordinary.is_empty();
    let mut phases = phases;
    for i in 0..phases.len() {
        if phases[i].kind != Kind::Loop {
            continue;
        }
        let before = i > 0 && phases[i - 1].kind == Kind::Compilation;
        let after = phases
            .get(i + 1)
            .is_some_and(|p| p.kind == Kind::Compilation);
        if !before && !after {
            continue;
        }
        let (s, e) = (t0 + phases[i].start_ns, t0 + phases[i].end_ns);
        if !stepped {
            if loop_runs(t, s, e, compiling, looped).is_empty() {
                phases[i].kind = Kind::Compilation;
            }
            continue;
        }
        let j = ordinary.partition_point(|x| x.1 <= s);
        let inside: Vec<&(u64, u64)> = ordinary[j..].iter().take_while(|x| x.0 < e).collect();
        let (Some(first), Some(last)) = (inside.first(), inside.last()) else {
            phases[i].kind = Kind::Compilation;
            continue;
        };
        if before && first.0 > s {
            let y = first.0 - t0;
            phases[i - 1].end_ns = y;
            phases[i].start_ns = y;
        }
        if after && last.1 < e {
            let y = last.1 - t0;
            phases[i].end_ns = y;
            phases[i + 1].start_ns = y;
        }
    }
    tidy(phases)
}

/// The phases without empty ones, neighbours of one kind joined (after edges moved).
fn tidy(phases: Vec<Phase>) -> Vec<Phase> {
    let mut out: Vec<Phase> = Vec::with_capacity(phases.len());
    for p in phases.into_iter().filter(|p| p.end_ns > p.start_ns) {
        match out.last_mut() {
            Some(last) if last.kind == p.kind => last.end_ns = p.end_ns,
            _ => out.push(p),
        }
    }
    out
}

/// The first kernel (of `only`'s names, when given) that started in `[lo, hi)`.
fn first_start(t: &Trace, lo: u64, hi: u64, only: Option<&HashSet<u32>>) -> Option<u64> {
    t.kernels
        .iter_from(t.kernels.first_starting_at(lo))
        .take_while(|k| k.start < hi)
        .find(|k| only.is_none_or(|o| o.contains(&k.name)))
        .map(|k| k.start)
}

/// Where autotuning that a sample at `ts` showed stops: after the run of kernels going
/// on at `ts` (one that started in the [`RUN_GAP_NS`] before it) and the runs after it that
/// are not [`KernelRun::mixed`] (other configurations benchmarked); just after the last
/// of those runs' last start, or `ts` when there is none.
fn autotune_end(t: &Trace, ts: u64, looped: &HashSet<u32>) -> u64 {
    let mut end = ts;
    for (i, r) in kernel_runs(
        t,
        t.kernels.first_starting_at(ts.saturating_sub(RUN_GAP_NS)),
    )
    .enumerate()
    {
        let benchmark = r.kernels >= RUN_KERNELS && !r.mixed(looped);
        if !(i == 0 && r.start <= ts || benchmark) {
            break;
        }
        end = end.max(r.last_start + 1);
    }
    end
}

/// The end (capped at `hi`) of the last kernel (of `only`'s names, when given) that
/// started in `[lo, hi)`.
fn last_end(t: &Trace, lo: u64, hi: u64, only: Option<&HashSet<u32>>) -> Option<u64> {
    t.kernels
        .range(t.kernels.first_starting_at(lo)..t.kernels.first_starting_at(hi))
        .filter(|k| only.is_none_or(|o| o.contains(&k.name)))
        .map(|k| k.end.min(hi))
        .max()
}

/// The start of the first CUDA call that started in `[lo, hi)`.
fn first_call(t: &Trace, lo: u64, hi: u64) -> Option<u64> {
    let i = t.apis.first_starting_at(lo);
    t.apis.get(i).map(|a| a.start).filter(|&s| s < hi)
}

/// The end (capped at `hi`) of the last CUDA call that started in `[lo, hi)`.
fn last_call_end(t: &Trace, lo: u64, hi: u64) -> Option<u64> {
    t.apis
        .range(t.apis.first_starting_at(lo)..t.apis.first_starting_at(hi))
        .map(|a| a.end.min(hi))
        .max()
}

/// Each phase's GPU busy share: its kernels' summed time in it, capped at 100%.
fn set_busy(phases: &mut [Phase], t: &Trace, t0: u64) {
    for p in phases {
        let (s, e) = (t0 + p.start_ns, t0 + p.end_ns);
        // Kernels that started up to a minute before still count for their part inside.
        let from = t
            .kernels
            .first_starting_at(s.saturating_sub(60_000_000_000));
        let ns: u64 = t
            .kernels
            .range(from..t.kernels.first_starting_at(e))
            .map(|k| k.end.min(e).saturating_sub(k.start.max(s)))
            .sum();
        let len = (e - s).max(1);
        p.gpu_busy_pct = (100.0 * ns as f64 / len as f64).min(100.0);
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
