//! launch_bound traced to its source: the Python samples taken in the launch-bound
//! stretches, the kernel families launched there, and the fix for the code that launched
//! them (`report::launch_source`).

mod common;

use common::*;
use gputrace_analyzer::report::{analyze, FindingId, Report};
use gputrace_format::{self as fmt, Event};

/// The j-th kernel of a step: distinct names (a step is found by its first kernel).
fn add(j: u64) -> String {
    format!("void at::native::vectorized_elementwise_kernel<4, at::native::Op{j}<float>>(int)")
}
fn gemm(j: u64) -> String {
    format!("sm90_xmma_gemm_f32f32_tn_{j}")
}
const STEPS: u64 = 20;
/// Launches per step: 10 GEMMs of the forward pass, then 40 element-wise kernels of the
/// optimizer; one every 8 us, each kernel 2 us (the GPU idles 6 of every 8 us).
const PER_STEP: u64 = 50;
const FORWARD: u64 = 10;

/// The loop, and the time its steady part starts.
fn optimizer_loop() -> (B, u64) {
    let mut b = B::new();
    let t0 = startup(&mut b, 2 * GIB);
    let mut h = t0;
    for _ in 0..STEPS {
        for j in 0..PER_STEP {
            let name = if j < FORWARD { gemm(j) } else { add(j) };
            b.launch(h, 3 * US, h + 5 * US, 2 * US, &name, BIG);
            h += 8 * US;
        }
    }
    (b, t0)
}

/// Python samples of the launching thread every 20 us: in the forward pass (a
/// `torch.nn.Linear`) while the GEMMs are launched, in Adam's per-parameter loop
/// (`foreach=False`: `_single_tensor_adam`) while the element-wise kernels are.
fn add_samples(b: &mut B, t0: u64) {
    let train = b.s("/home/u/train.py");
    let adam = b.s("/usr/lib/python3.12/site-packages/torch/optim/adam.py");
    let optim = b.s("/usr/lib/python3.12/site-packages/torch/optim/optimizer.py");
    let linear = b.s("/usr/lib/python3.12/site-packages/torch/nn/modules/linear.py");
    let module = b.s("/usr/lib/python3.12/site-packages/torch/nn/modules/module.py");
    let f = |b: &mut B, file, name: &str, line| fmt::PyFrame {
        file,
        function: b.s(name),
        line,
    };
    let opt = vec![
        f(b, adam, "_single_tensor_adam", 412),
        f(b, adam, "adam", 900),
        f(b, adam, "step", 240),
        f(b, optim, "wrapper", 484),
        f(b, train, "train_step", 88),
        f(b, train, "main", 120),
    ];
    let fwd = vec![
        f(b, linear, "forward", 125),
        f(b, module, "_call_impl", 1750),
        f(b, train, "train_step", 80),
        f(b, train, "main", 120),
    ];
    b.ev.push(Event::PyStack(fmt::PyStack { id: 1, frames: opt }));
    b.ev.push(Event::PyStack(fmt::PyStack { id: 2, frames: fwd }));
    let step = PER_STEP * 8 * US;
    let mut ts = t0 + 10 * US;
    while ts < t0 + STEPS * step {
        let in_forward = (ts - t0) % step < FORWARD * 8 * US;
        b.ev.push(Event::PySample(fmt::PySample {
            ts,
            tid: TID,
            stack: if in_forward { 2 } else { 1 },
        }));
        ts += 20 * US;
    }
}

fn report(b: B) -> Report {
    analyze(&[b.build()])
}

#[test]
fn samples_in_adams_per_parameter_loop_name_the_line_and_foreach_or_fused() {
    let (mut b, t0) = optimizer_loop();
    add_samples(&mut b, t0);
    let r = report(b);
    let f = common::get(&r, FindingId::LaunchBound);
    let ev = f.evidence.join("\n");
    // The line of the user's code, the optimizer's frame under it, and their share.
    let line = f
        .evidence
        .iter()
        .find(|e| e.contains("Python samples in the launch-bound stretches"))
        .unwrap_or_else(|| panic!("{ev}"));
    assert!(
        line.contains(
            "80% at train.py:88 in train_step -> torch/optim/adam.py:412 in _single_tensor_adam"
        ),
        "{line}"
    );
    assert!(
        line.contains(
            "20% at train.py:80 in train_step -> torch/nn/modules/linear.py:125 in forward"
        ),
        "{line}"
    );
    // The kernel families and their share of the launches.
    assert!(
        ev.contains("element-wise 80% (vectorized_elementwise_kernel), GEMM 20%"),
        "{ev}"
    );
    assert!(
        ev.contains("the launches come from Adam's per-parameter loop (_single_tensor_adam, foreach=False: one set of kernels per parameter), called from train.py:88 in train_step: 80% of the samples in the launch-bound stretches"),
        "{ev}"
    );
    // The fix for that source, not the generic one.
    assert!(
        f.fix
            .contains("per-parameter loop (at train.py:88 in train_step)"),
        "{}",
        f.fix
    );
    assert!(
        f.fix.contains("foreach=True") && f.fix.contains("fused=True"),
        "{}",
        f.fix
    );
    assert!(!f.fix.contains("reduce-overhead"), "{}", f.fix);
    assert_eq!(f.subcause.as_deref(), Some("optimizer"));
    assert_eq!(f.host_was_in[0].line, 88);
    assert!((f.metrics["family_elementwise_pct"] - 80.0).abs() < 1.0);
    assert!((f.metrics["source_samples_pct"] - 80.0).abs() < 1.0);
    // The verdict says it in the program's terms.
    assert!(
        r.verdict.contains("launch_bound")
            && r.verdict
                .contains("optimizer, host at train.py:88 in train_step"),
        "{}",
        r.verdict
    );
}

#[test]
fn without_samples_the_families_are_named_and_the_fix_stays_generic() {
    let (b, _) = optimizer_loop();
    let r = report(b);
    let f = common::get(&r, FindingId::LaunchBound);
    let ev = f.evidence.join("\n");
    let line = f
        .evidence
        .iter()
        .find(|e| e.starts_with("kernel families of the"))
        .unwrap_or_else(|| panic!("{ev}"));
    assert!(
        line.contains("launch-bound stretch")
            && line.contains("element-wise 80% (vectorized_elementwise_kernel), GEMM 20% (sm90_xmma_gemm_f32f32_tn_"),
        "{line}"
    );
    assert!(!ev.contains("Python samples"), "{ev}");
    assert!(!ev.contains("the launches come from"), "{ev}");
    assert!(
        f.fix.starts_with("Cut the per-kernel host cost"),
        "{}",
        f.fix
    );
    assert_eq!(f.subcause, None);
    assert!(f.host_was_in.is_empty());
}

/// The user's own function issuing small indexing and copy kernels directly (no torch
/// module or optimizer frames): a Python loop over items, to vectorize.
#[test]
fn the_users_own_loop_of_small_indexing_ops_is_to_be_vectorized() {
    let mut b = B::new();
    let t0 = startup(&mut b, 2 * GIB);
    let mut h = t0;
    for _ in 0..STEPS {
        for j in 0..PER_STEP {
            let name = if j % 2 == 0 {
                format!("void at::native::index_elementwise_kernel<128, {j}>(long)")
            } else {
                format!("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda{j}>(int)")
            };
            b.launch(h, 3 * US, h + 5 * US, 2 * US, &name, BIG);
            h += 8 * US;
        }
    }
    let train = b.s("/home/u/train.py");
    let function = b.s("collate_boxes");
    b.ev.push(Event::PyStack(fmt::PyStack {
        id: 1,
        frames: vec![fmt::PyFrame {
            file: train,
            function,
            line: 33,
        }],
    }));
    let mut ts = t0 + 10 * US;
    while ts < h {
        b.ev.push(Event::PySample(fmt::PySample {
            ts,
            tid: TID,
            stack: 1,
        }));
        ts += 20 * US;
    }
    let r = report(b);
    let f = common::get(&r, FindingId::LaunchBound);
    assert_eq!(
        f.subcause.as_deref(),
        Some("python_loop"),
        "{:#?}",
        f.evidence
    );
    assert!(f.fix.contains("vectorize"), "{}", f.fix);
    assert!(f.fix.contains("train.py:33 in collate_boxes"), "{}", f.fix);
}
