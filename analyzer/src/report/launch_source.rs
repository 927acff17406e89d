//! Which code issues a launch-bound loop's launches, and the fix for that code.
//!
//! `launch_bound` measures idle gaps the host could not fill; this module says where
//! those launches come from, from three things measured over the *launch-bound
//! stretches* (the idle pieces the idle pass charged to `launch_bound`, joined when
//! less than [`JOIN_NS`] of GPU work lies between them, i.e. the loop that issued them):
//!
//! 1. The Python stack samples of the launching thread (the thread that made most launch
//!    calls in the steady state, or its stand-in, see [`pysamples::stand_in`]) taken inside
//!    the stretches: tallied by the user's innermost frame (with the innermost frame
//!    overall, e.g. `torch/optim/adam.py:_single_tensor_adam`), and each stack classified
//!    by [`frame_kind`] (optimizer, generation, layers, or the user's own code).
//! 2. The kernels started in the stretches, grouped into families by name
//!    ([`FAMILIES`]), with each family's share of them.
//! 3. The source, from the samples (never from kernel names alone, which cannot say
//!    what code made them): the frame kind with the most samples, at least
//!    [`SOURCE_MIN_PCT`] of them; the user's own code is an element-wise chain when
//!    element-wise kernels are at least [`ELEMENTWISE_CHAIN_PCT`] of the launches, else a
//!    Python loop over items; a model's layers with [`KV_CACHE_MIN_PCT`] of the samples
//!    in a KV cache's code are a decode loop. Its fix is [`LaunchSource::fix`]; without samples (or none
//!    dominant) no source is named and the finding keeps its generic fix.

use super::callsites::{is_library, short_file};
use super::ctx::{Ctx, HostClass};
use super::idle::{self, Cause, Extras};
use super::pysamples::{self, HostPlace};
use crate::model::trace::{demangle, Trace};
use gputrace_format as fmt;
use std::collections::HashMap;

/// Launch-bound pieces with less GPU work than this between them are one stretch (the
/// host issuing back to back: the idle pass's own bound for that).
pub const JOIN_NS: u64 = idle::QUIET_LAUNCH_NS;
/// Fewest samples inside the stretches for a source to be named from them.
pub const MIN_SAMPLES: u64 = 5;
/// Share of those samples a frame kind needs to be named the source.
pub const SOURCE_MIN_PCT: f64 = 30.0;
/// Share of the launches in element-wise kernels from which the user's own code is a
/// chain of element-wise ops (fusion) rather than a loop over items (vectorize).
pub const ELEMENTWISE_CHAIN_PCT: f64 = 50.0;
/// Share of the samples in a KV cache's code (`transformers/cache_utils.py`) from which
/// a model's layers run token by token: a decode loop (generation).
pub const KV_CACHE_MIN_PCT: f64 = 5.0;
/// Families named in the evidence line.
pub const SHOWN_FAMILIES: usize = 4;

/// A kernel family: kernels whose demangled name, lower-cased, contains one of
/// `patterns`. [`FAMILIES`] is tried in order and the first match wins, so narrower
/// families come before those whose patterns they contain (a `direct_copy_kernel` is
/// launched through `unrolled_elementwise_kernel`, but it is a copy).
pub struct Family {
    /// Stable id (metrics `family_<id>_pct`).
    pub id: &'static str,
    /// As the evidence names it.
    pub label: &'static str,
    pub patterns: &'static [&'static str],
}

/// The families, most specific first. Names seen in PyTorch traces:
///
/// | family | patterns | e.g. |
/// |---|---|---|
/// | `compiled` | `triton_` | `triton_poi_fused_add_mul_0` (already fused by torch.compile) |
/// | `multi_tensor` | `multi_tensor_apply`, `fused_adam`, `fusedadam`, `fused_sgd` | `multi_tensor_apply_kernel<..., BinaryOpListAlphaFunctor>` (foreach / fused optimizers) |
/// | `communication` | `nccl` | `ncclDevKernel_AllReduce_Sum_f32_RING_LL` |
/// | `attention` | `flash`, `fmha`, `attention` | `flash_fwd_kernel` |
/// | `gemm` | `gemm`, `gemv`, `nvjet`, `cutlass`, `xmma`, `matmul`, `cublas` | `sm90_xmma_gemm_...`, `nvjet_tst_...` |
/// | `convolution` | `conv`, `cudnn`, `wgrad`, `dgrad` | `implicit_convolve_sgemm` |
/// | `normalization` | `layer_norm`, `batch_norm`, `rms_norm`, `group_norm`, `layernorm`, `batchnorm` | `vectorized_layer_norm_kernel` |
/// | `softmax` | `softmax` | `cunn_SoftMaxForward` |
/// | `reduction` | `reduce_kernel`, `reduce`, `cub::`, `scan`, `argmax`, `topk` | `reduce_kernel<512, 1, ReduceOp<...>>` |
/// | `indexing` | `index`, `gather`, `scatter`, `embedding` | `index_elementwise_kernel` |
/// | `copy` | `copy`, `cat_`, `fill` | `direct_copy_kernel_cuda`, `CatArrayBatchedCopy` |
/// | `elementwise` | `elementwise`, `pointwise` | `vectorized_elementwise_kernel<4, CUDAFunctor_add>` |
///
/// Anything else is `other`.
pub const FAMILIES: &[Family] = &[
    Family {
        id: "compiled",
        label: "compiled (Triton)",
        patterns: &["triton_"],
    },
    Family {
        id: "multi_tensor",
        label: "multi-tensor (foreach/fused)",
        patterns: &["multi_tensor_apply", "fused_adam", "fusedadam", "fused_sgd"],
    },
    Family {
        id: "communication",
        label: "communication",
        patterns: &["nccl"],
    },
    Family {
        id: "attention",
        label: "attention",
        patterns: &["flash", "fmha", "attention"],
    },
    Family {
        id: "gemm",
        label: "GEMM",
        patterns: &[
            "gemm", "gemv", "nvjet", "cutlass", "xmma", "matmul", "cublas",
        ],
    },
    Family {
        id: "convolution",
        label: "convolution",
        patterns: &["conv", "cudnn", "wgrad", "dgrad"],
    },
    Family {
        id: "normalization",
        label: "normalization",
        patterns: &[
            "layer_norm",
            "batch_norm",
            "rms_norm",
            "group_norm",
            "layernorm",
            "batchnorm",
        ],
    },
    Family {
        id: "softmax",
        label: "softmax",
        patterns: &["softmax"],
    },
    Family {
        id: "reduction",
        label: "reduction",
        patterns: &["reduce_kernel", "reduce", "cub::", "scan", "argmax", "topk"],
    },
    Family {
        id: "indexing",
        label: "indexing",
        patterns: &["index", "gather", "scatter", "embedding"],
    },
    Family {
        id: "copy",
        label: "copy/fill",
        patterns: &["copy", "cat_", "fill"],
    },
    Family {
        id: "elementwise",
        label: "element-wise",
        patterns: &["elementwise", "pointwise"],
    },
];

/// The family of a kernel (raw or demangled name): an entry of [`FAMILIES`], or None
/// (`other`).
pub fn family_of(name: &str) -> Option<&'static Family> {
    let n = demangle(name).to_lowercase();
    FAMILIES
        .iter()
        .find(|f| f.patterns.iter().any(|p| n.contains(p)))
}

/// One family's share of the kernels started in the stretches.
#[derive(Clone, Debug, PartialEq)]
pub struct FamilyShare {
    /// `other` for kernels of no family.
    pub id: &'static str,
    pub label: &'static str,
    pub kernels: u64,
    pub pct: f64,
    /// Its most frequent kernel, demangled and cut short.
    pub example: String,
}

/// What the frames of one stack sample say the host was running, most telling first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrameKind {
    /// A frame of an optimizer (`torch/optim/`, apex, bitsandbytes).
    Optimizer,
    /// A frame of a decode loop (`generation/`, or `generate`, `sample`, `decode`, ...).
    Generation,
    /// A frame of `torch/nn/modules/` or autograd: a model's forward or backward.
    Layers,
    /// None of those: the user's code calling tensor operations itself.
    Direct,
}

/// Where the launches come from, when the samples say so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Optimizer,
    Generation,
    SmallLayers,
    ElementwiseChain,
    PythonLoop,
}

/// How an optimizer seen in the samples runs its update (from its frames' functions).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Optimizer {
    /// `Adam`, `AdamW`, `SGD`, ... (from the file), empty when not known.
    pub name: String,
    /// The innermost optimizer frame's function (`_single_tensor_adam`).
    pub function: String,
}

impl Optimizer {
    /// `_single_tensor_*`: one set of kernels per parameter (`foreach=False`).
    fn per_parameter(&self) -> bool {
        self.function.starts_with("_single_tensor")
    }
    fn foreach(&self) -> bool {
        self.function.starts_with("_multi_tensor")
    }
    fn fused(&self) -> bool {
        self.function.starts_with("_fused")
    }
}

/// What was found about a launch-bound loop's launches.
#[derive(Clone, Debug, Default)]
pub struct LaunchSource {
    /// The stretches, and their total length.
    pub stretches: usize,
    pub stretch_ns: u64,
    /// Kernels started inside them, by family (most first).
    pub kernels: u64,
    pub families: Vec<FamilyShare>,
    /// Samples inside them with a stack, tallied by place.
    pub samples: u64,
    pub places: Vec<HostPlace>,
    /// The source named, with its share of the samples.
    pub source: Option<(Source, f64)>,
    /// The optimizer's frames, when the source is the optimizer.
    pub optimizer: Optimizer,
}

/// The launch-bound stretches of the steady state and what issued the launches in them.
pub fn find(ctx: &Ctx, steady: (u64, u64)) -> LaunchSource {
    let spans = stretches(ctx, steady);
    let t = ctx.t;
    let mut r = LaunchSource {
        stretches: spans.len(),
        stretch_ns: spans.iter().map(|s| s.1 - s.0).sum(),
        ..Default::default()
    };
    (r.kernels, r.families) = families(t, &spans);
    let tid = launcher(ctx, steady);
    r.places = pysamples::tally(t, tid, &spans);
    let (kinds, opt, kv) = frame_kinds(t, tid, &spans);
    r.samples = kinds.values().sum();
    r.optimizer = opt;
    r.source = choose(&kinds, r.samples, &r.families);
    // Layers run token by token, updating a KV cache: a decode loop.
    if matches!(r.source, Some((Source::SmallLayers, _)))
        && crate::report::units::pct(kv, r.samples) >= KV_CACHE_MIN_PCT
    {
        r.source = r.source.map(|(_, p)| (Source::Generation, p));
    }
    r
}

/// The steady state's launch-bound idle pieces on every device, time-sorted and joined
/// when less than [`JOIN_NS`] apart (the pieces' own join rule aside, the idle pass is
/// the one that decides which gaps are launch-bound: it is run again to list them).
fn stretches(ctx: &Ctx, steady: (u64, u64)) -> Vec<(u64, u64)> {
    let mut pieces: Vec<(u64, u64)> = Vec::new();
    for &d in &ctx.devices {
        // Only its launch-bound pieces, joined as they come (every idle piece of a
        // launch-bound loop would be one per kernel).
        let mut ex = Extras {
            idle: Some(Vec::new()),
            idle_only: Some((Cause::LaunchBound, JOIN_NS)),
            ..Default::default()
        };
        idle::attribute_windows(ctx, d, &[steady.0, steady.1], None, &mut ex);
        pieces.extend(
            ex.idle
                .unwrap_or_default()
                .iter()
                .filter(|p| p.cause == Cause::LaunchBound && p.end > p.start)
                .map(|p| (p.start, p.end)),
        );
    }
    pieces.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (s, e) in pieces {
        match out.last_mut() {
            Some(l) if s <= l.1.saturating_add(JOIN_NS) => l.1 = l.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// The thread that made most launch calls in the steady state (None without API
/// records: every sampled thread then stands in).
fn launcher(ctx: &Ctx, steady: (u64, u64)) -> Option<u32> {
    let mut n: HashMap<u32, u64> = HashMap::new();
    for (a, c) in ctx.t.apis.iter().zip(ctx.api.classes()) {
        if c == HostClass::Issue && a.start >= steady.0 && a.start < steady.1 {
            *n.entry(a.tid).or_default() += 1;
        }
    }
    n.into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|x| x.0)
}

/// Kernels started inside the spans (the end included: a gap ends when its kernel
/// starts), by family, most first.
fn families(t: &Trace, spans: &[(u64, u64)]) -> (u64, Vec<FamilyShare>) {
    // Family index (FAMILIES.len() for other) -> kernel name -> count.
    let mut by: HashMap<usize, HashMap<u32, u64>> = HashMap::new();
    let mut of_name: HashMap<u32, usize> = HashMap::new();
    let mut total = 0u64;
    for &(s, e) in spans {
        let lo = t.kernels.first_starting_at(s);
        for k in t.kernels.iter_from(lo).take_while(|k| k.start <= e) {
            let f = *of_name.entry(k.name).or_insert_with(|| {
                let fam = family_of(t.str(k.name));
                fam.map_or(FAMILIES.len(), |f| {
                    FAMILIES.iter().position(|x| x.id == f.id).unwrap_or(0)
                })
            });
            *by.entry(f).or_default().entry(k.name).or_default() += 1;
            total += 1;
        }
    }
    let mut v: Vec<FamilyShare> = by
        .into_iter()
        .map(|(f, names)| share(t, f, names, total))
        .collect();
    v.sort_by(|a, b| b.kernels.cmp(&a.kernels).then(a.id.cmp(b.id)));
    (total, v)
}

fn share(t: &Trace, f: usize, names: HashMap<u32, u64>, total: u64) -> FamilyShare {
    let n: u64 = names.values().sum();
    let top = names
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|x| x.0)
        .unwrap_or(0);
    let (id, label) = FAMILIES
        .get(f)
        .map_or(("other", "other"), |x| (x.id, x.label));
    let mut example = base_name(t.str(top));
    // A family found in the template arguments (a fill run by an element-wise kernel):
    // the pattern that put it there.
    let full = demangle(t.str(top)).to_lowercase();
    let pattern = FAMILIES
        .get(f)
        .and_then(|x| x.patterns.iter().find(|p| full.contains(**p)));
    if let Some(p) = pattern.filter(|p| !example.to_lowercase().contains(**p)) {
        example = format!("{example}: {}", p.trim_end_matches('_'));
    }
    FamilyShare {
        id,
        label,
        kernels: n,
        pct: crate::report::units::pct(n, total),
        example,
    }
}

/// A kernel's name without its namespaces and template arguments, cut to 40
/// characters: `vectorized_elementwise_kernel`.
fn base_name(raw: &str) -> String {
    let d = demangle(raw);
    let head = d.split('<').next().unwrap_or(&d).trim();
    let head = head.strip_prefix("void ").unwrap_or(head);
    let mut parts = head.rsplit("::");
    let last = parts.next().unwrap_or(head);
    // A generic name says nothing without its namespace (`gemvx::kernel`).
    let generic = matches!(
        last.to_lowercase().as_str(),
        "kernel" | "kernel2" | "device_kernel"
    );
    let joined;
    let base = match parts.next() {
        Some(ns) if generic => {
            joined = format!("{ns}::{last}");
            joined.as_str()
        }
        _ => last,
    };
    if base.chars().count() <= 40 {
        return base.to_string();
    }
    let mut s: String = base.chars().take(39).collect();
    s.push('…');
    s
}

/// Samples of the launching thread (or its stand-in) in the spans: by frame kind, the
/// optimizer most seen among them, and how many were in a KV cache's code.
fn frame_kinds(
    t: &Trace,
    tid: Option<u32>,
    spans: &[(u64, u64)],
) -> (HashMap<FrameKind, u64>, Optimizer, u64) {
    let tids: Vec<u32> = match pysamples::stand_in(t, tid) {
        Some(x) => vec![x],
        None => {
            let mut v: Vec<u32> = t.py_samples.iter().map(|s| s.tid).collect();
            v.dedup();
            v
        }
    };
    let mut kinds: HashMap<FrameKind, u64> = HashMap::new();
    let mut opts: HashMap<(String, String), u64> = HashMap::new();
    let mut kv = 0u64;
    for &tid in &tids {
        for &(s, e) in spans {
            for x in t.py_samples_in(tid, s, e.saturating_add(1)) {
                let Some(st) = t.py_stack(x.stack).filter(|st| !st.frames.is_empty()) else {
                    continue;
                };
                let (kind, opt) = frame_kind(t, st);
                *kinds.entry(kind).or_default() += 1;
                kv += st.frames.iter().any(|f| kv_cache(t.str(f.file))) as u64;
                if let Some(o) = opt {
                    *opts.entry((o.name, o.function)).or_default() += 1;
                }
            }
        }
    }
    let opt = opts
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|((name, function), _)| Optimizer { name, function })
        .unwrap_or_default();
    (kinds, opt, kv)
}

/// A KV cache's code: Hugging Face's `cache_utils.py` (`DynamicCache.update`, ...).
fn kv_cache(file: &str) -> bool {
    file.ends_with("/transformers/cache_utils.py")
}

/// Function names of decode loops (Hugging Face's `generate` and its strategies,
/// gpt-fast's `decode_one_token`, and the like).
const GENERATION_FUNCS: &[&str] = &[
    "generate",
    "sample",
    "_sample",
    "greedy_search",
    "_greedy_search",
    "beam_search",
    "_beam_search",
    "decode",
    "decode_one_token",
    "decode_n_tokens",
];

/// What one stack was running (frames innermost first), and for an optimizer its name
/// and innermost optimizer frame.
pub fn frame_kind(t: &Trace, st: &fmt::PyStack) -> (FrameKind, Option<Optimizer>) {
    let frames = || st.frames.iter().map(|f| (t.str(f.file), t.str(f.function)));
    let optim = |file: &str| {
        (file.contains("/torch/optim/") && !file.ends_with("lr_scheduler.py"))
            || file.contains("/apex/optimizers/")
            || file.contains("/bitsandbytes/optim/")
    };
    if let Some((file, function)) = frames().find(|(f, _)| optim(f)) {
        let name = optimizer_name(file);
        // The innermost frame in the optimizer that says how it runs, else the innermost.
        let how = frames()
            .filter(|(f, _)| optim(f))
            .map(|(_, g)| g)
            .find(|g| {
                g.starts_with("_single_tensor")
                    || g.starts_with("_multi_tensor")
                    || g.starts_with("_fused")
            })
            .unwrap_or(function);
        let o = Optimizer {
            name,
            function: how.to_string(),
        };
        return (FrameKind::Optimizer, Some(o));
    }
    if frames().any(|(f, g)| f.contains("/generation/") || GENERATION_FUNCS.contains(&g)) {
        return (FrameKind::Generation, None);
    }
    let layers = |f: &str| {
        f.contains("/torch/nn/modules/")
            || f.contains("/torch/autograd/")
            || f.ends_with("/torch/_tensor.py")
    };
    if frames().any(|(f, _)| layers(f)) {
        return (FrameKind::Layers, None);
    }
    (FrameKind::Direct, None)
}

/// `Adam` from `.../torch/optim/adam.py`; the file's stem for optimizers not listed.
fn optimizer_name(file: &str) -> String {
    const NAMES: &[(&str, &str)] = &[
        ("adamw", "AdamW"),
        ("adam", "Adam"),
        ("sgd", "SGD"),
        ("rmsprop", "RMSprop"),
        ("adagrad", "Adagrad"),
        ("adamax", "Adamax"),
        ("nadam", "NAdam"),
        ("radam", "RAdam"),
        ("lamb", "LAMB"),
    ];
    let stem = short_file(file);
    let stem = stem.strip_suffix(".py").unwrap_or(&stem).to_string();
    NAMES
        .iter()
        .find(|(k, _)| {
            stem.eq_ignore_ascii_case(k) || stem.eq_ignore_ascii_case(&format!("fused_{k}"))
        })
        .map_or(stem.clone(), |(_, v)| v.to_string())
}

/// The source: the frame kind with the most samples, if it has [`SOURCE_MIN_PCT`] of
/// at least [`MIN_SAMPLES`]; the user's own code split by the kernels it launched.
fn choose(
    kinds: &HashMap<FrameKind, u64>,
    total: u64,
    families: &[FamilyShare],
) -> Option<(Source, f64)> {
    if total < MIN_SAMPLES {
        return None;
    }
    let (&kind, &n) = kinds
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))?;
    let pct = crate::report::units::pct(n, total);
    if pct < SOURCE_MIN_PCT {
        return None;
    }
    let elementwise: f64 = families
        .iter()
        .filter(|f| f.id == "elementwise")
        .map(|f| f.pct)
        .sum();
    let s = match kind {
        FrameKind::Optimizer => Source::Optimizer,
        FrameKind::Generation => Source::Generation,
        FrameKind::Layers => Source::SmallLayers,
        FrameKind::Direct if elementwise >= ELEMENTWISE_CHAIN_PCT => Source::ElementwiseChain,
        FrameKind::Direct => Source::PythonLoop,
    };
    Some((s, pct))
}

impl Source {
    /// The finding's `subcause`.
    pub fn id(self) -> &'static str {
        match self {
            Source::Optimizer => "optimizer",
            Source::Generation => "generation",
            Source::SmallLayers => "small_layers",
            Source::ElementwiseChain => "elementwise_chain",
            Source::PythonLoop => "python_loop",
        }
    }
}

/// A frame's file as evidence shows it: the user's by its name, a library's from its
/// package (`torch/optim/adam.py`).
fn show_file(file: &str) -> String {
    if !is_library(file) {
        return short_file(file);
    }
    for cut in ["/site-packages/", "/dist-packages/"] {
        if let Some((_, rest)) = file.rsplit_once(cut) {
            return rest.to_string();
        }
    }
    match file.rfind("/torch/") {
        Some(i) => file[i + 1..].to_string(),
        None => short_file(file),
    }
}

impl LaunchSource {
    /// `kernels started in the 3 launch-bound stretches (7.6 ms): 950; element-wise 78%
    /// (vectorized_elementwise_kernel), ...`; None without kernels.
    pub fn families_line(&self) -> Option<String> {
        if self.kernels == 0 {
            return None;
        }
        let shown: Vec<String> = self
            .families
            .iter()
            .take(SHOWN_FAMILIES)
            .map(|f| format!("{} {:.0}% ({})", f.label, f.pct, f.example))
            .collect();
        let more = self.families.len().saturating_sub(SHOWN_FAMILIES);
        Some(format!(
            "kernel families of the {} kernels started in the {} launch-bound stretch{} ({}): {}{}",
            self.kernels,
            self.stretches,
            if self.stretches == 1 { "" } else { "es" },
            super::render::dur(self.stretch_ns),
            shown.join(", "),
            if more > 0 {
                format!(", {more} more")
            } else {
                String::new()
            }
        ))
    }

    /// `72% of the N Python samples in the launch-bound stretches were at train.py:88 in
    /// train_step -> torch/optim/adam.py:412 in _single_tensor_adam; ...`; None without
    /// samples there.
    pub fn samples_line(&self) -> Option<String> {
        if self.places.is_empty() {
            return None;
        }
        let shown: Vec<String> = self
            .places
            .iter()
            .take(pysamples::SHOWN_PLACES)
            .map(|p| {
                let i = &p.innermost;
                let same = i.file == p.file && i.function == p.function && i.line == p.line;
                format!(
                    "{:.0}% at {}:{} in {}{}",
                    p.pct,
                    show_file(&p.file),
                    p.line,
                    p.function,
                    if same {
                        String::new()
                    } else {
                        format!(" -> {}:{} in {}", show_file(&i.file), i.line, i.function)
                    }
                )
            })
            .collect();
        Some(format!(
            "of the {} Python samples in the launch-bound stretches, {}",
            self.samples,
            shown.join("; ")
        ))
    }

    /// The user's place most sampled (`train.py:88 in train_step`), else the top one.
    fn user_place(&self) -> Option<String> {
        self.places
            .iter()
            .find(|p| p.user_code)
            .or(self.places.first())
            .map(|p| format!("{}:{} in {}", show_file(&p.file), p.line, p.function))
    }

    /// ` (at train.py:88 in train_step)`, for the fix; empty without samples.
    fn at(&self) -> String {
        self.user_place()
            .map(|p| format!(" (at {p})"))
            .unwrap_or_default()
    }

    /// The evidence line naming the source; None when none was named.
    pub fn source_line(&self) -> Option<String> {
        let (s, pct) = self.source?;
        let o = &self.optimizer;
        let what = match s {
            Source::Optimizer if o.per_parameter() => format!(
                "{}'s per-parameter loop ({}, foreach=False: one set of kernels per parameter)",
                opt_name(o),
                o.function
            ),
            Source::Optimizer if o.foreach() => {
                format!("{}'s foreach step ({})", opt_name(o), o.function)
            }
            Source::Optimizer if o.fused() => {
                format!("{}'s fused step ({})", opt_name(o), o.function)
            }
            Source::Optimizer => format!("the optimizer's step ({}: {})", opt_name(o), o.function),
            Source::Generation => "a token-by-token decode loop".to_string(),
            Source::SmallLayers => {
                "a model of many small layers (torch.nn modules' forward, autograd's backward)"
                    .to_string()
            }
            Source::ElementwiseChain => {
                "chains of element-wise operations in the program's own code".to_string()
            }
            Source::PythonLoop => {
                "a Python loop in the program's own code issuing small operations one item at a time"
                    .to_string()
            }
        };
        let from = self
            .user_place()
            .map(|p| format!(", called from {p}"))
            .unwrap_or_default();
        Some(format!(
            "the launches come from {what}{from}: {pct:.0}% of the samples in the launch-bound stretches"
        ))
    }

    /// The fix for the source named; None when none was.
    pub fn fix(&self) -> Option<String> {
        let (s, _) = self.source?;
        let at = self.at();
        Some(match s {
            Source::Optimizer => optimizer_fix(&self.optimizer, &at),
            Source::Generation => format!("The launches come from the decode loop{at}: every token runs the whole model's small kernels one by one. Use a static KV cache (Hugging Face: StaticCache, or generate(..., cache_implementation=\"static\")) and capture the decode step in a CUDA graph (torch.compile(model.forward, mode=\"reduce-overhead\")), and batch requests together."),
            Source::SmallLayers => format!("The launches come from many small layers{at}: compile the model, torch.compile(model) fuses their small ops and mode=\"reduce-overhead\" captures the step in CUDA graphs; a larger batch gives each kernel more work."),
            Source::ElementwiseChain => format!("The launches are chains of element-wise operations{at}, one kernel each: fuse them, torch.compile the function that runs them (or write one fused kernel), and keep intermediate results out of Python."),
            Source::PythonLoop => format!("A Python loop{at} issues small operations one item at a time: vectorize it, one operation over the whole batch (batched and broadcast operations, torch.vmap, indexing with tensors rather than per-item Python indexing)."),
        })
    }
}

fn opt_name(o: &Optimizer) -> &str {
    if o.name.is_empty() {
        "optimizer"
    } else {
        &o.name
    }
}

fn optimizer_fix(o: &Optimizer, at: &str) -> String {
    let name = opt_name(o);
    if o.fused() {
        format!("The launches come from the optimizer's step{at}, already fused: capture the whole training step, optimizer included, in a CUDA graph ({name}(..., capturable=True) with torch.cuda.CUDAGraph or torch.compile(mode=\"reduce-overhead\")), or give each step more work (a larger batch).")
    } else if o.foreach() {
        format!("The launches come from the optimizer's step{at}, already foreach: construct it with fused=True ({name}(params, fused=True): one kernel for the whole update), or compile the step with torch.compile.")
    } else {
        format!("The launches come from the optimizer's per-parameter loop{at}: construct it with foreach=True (one multi-tensor kernel per operation over all parameters) or fused=True (one kernel for the whole update), e.g. {name}(params, fused=True); then capture the step in a CUDA graph if launches still dominate.")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_fall_into_families() {
        let fam = |n: &str| family_of(n).map_or("other", |f| f.id);
        assert_eq!(
            fam("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)"),
            "elementwise"
        );
        assert_eq!(
            fam("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>(int)"),
            "copy"
        );
        assert_eq!(
            fam("void at::native::multi_tensor_apply_kernel<at::native::TensorListMetadata<4>, at::native::FusedAdamMathFunctor<float, 4>>()"),
            "multi_tensor"
        );
        assert_eq!(fam("sm90_xmma_gemm_bf16bf16_bf16f32"), "gemm");
        assert_eq!(fam("nvjet_tst_128x64_64x8_1x1_v_bz_TNT"), "gemm");
        assert_eq!(
            fam("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>>>()"),
            "reduction"
        );
        assert_eq!(fam("triton_poi_fused_add_mul_0"), "compiled");
        assert_eq!(
            fam("void at::native::index_elementwise_kernel<128, 4>()"),
            "indexing"
        );
        assert_eq!(fam("my_custom_kernel"), "other");
        assert_eq!(
            base_name("internal::gemvx::kernel<int, int, float, float, float, float, false, true>"),
            "gemvx::kernel"
        );
        assert_eq!(base_name("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)"), "vectorized_elementwise_kernel");
    }

    #[test]
    fn optimizer_files_are_named() {
        assert_eq!(
            optimizer_name("/x/site-packages/torch/optim/adamw.py"),
            "AdamW"
        );
        assert_eq!(
            optimizer_name("/x/site-packages/torch/optim/adam.py"),
            "Adam"
        );
        assert_eq!(
            optimizer_name("/x/site-packages/apex/optimizers/fused_lamb.py"),
            "LAMB"
        );
        assert_eq!(optimizer_name("/x/torch/optim/lion.py"), "lion");
        assert_eq!(
            show_file("/usr/lib/python3.12/site-packages/torch/optim/adam.py"),
            "torch/optim/adam.py"
        );
        assert_eq!(show_file("/home/u/train.py"), "train.py");
    }
}
