//! The whole run, phase by phase, on synthetic traces with known phases: start-up (with
//! the compiler's modules imported, which is not compiling), a first compilation, a
//! loop of steps, then compilation again and again between bursts of GPU work (the
//! recompiling job), a checkpoint save and a pause.

mod common;

use common::*;
use gputrace_analyzer::report::phases::Kind;
use gputrace_analyzer::report::{analyze, render_text, FindingId, Report, Severity};
use gputrace_format::{self as fmt, Event};

const DYNAMO: &str = "/venv/lib/python3.12/site-packages/torch/_dynamo/convert_frame.py";
const EVAL_FRAME: &str = "/venv/lib/python3.12/site-packages/torch/_dynamo/eval_frame.py";
const SAVE: &str = "/venv/lib/python3.12/site-packages/torch/serialization.py";
const TRAIN: &str = "/work/train.py";

/// Python stacks: 1 compiling (dynamo under train.py), 2 importing dynamo, 3 saving, 4
/// the training step, 5 evaluating, 6 an optimizer step inside the wrapper of
/// `torch._dynamo.disable` (running, not compiling).
fn stacks(b: &mut B) {
    let frame = |b: &mut B, file: &str, function: &str, line: u32| fmt::PyFrame {
        file: b.s(file),
        function: b.s(function),
        line,
    };
    let compiling = vec![
        frame(b, DYNAMO, "_compile", 700),
        frame(b, TRAIN, "step", 40),
    ];
    let importing = vec![
        frame(b, DYNAMO, "<module>", 60),
        frame(b, "<frozen importlib._bootstrap>", "_find_and_load", 1360),
        frame(b, TRAIN, "<module>", 3),
    ];
    let saving = vec![frame(b, SAVE, "save", 900), frame(b, TRAIN, "main", 80)];
    let stepping = vec![frame(b, TRAIN, "step", 41)];
    let evaluating = vec![frame(b, TRAIN, "evaluate", 60), frame(b, TRAIN, "main", 75)];
    let optimizer = vec![
        frame(
            b,
            "/venv/lib/python3.12/site-packages/torch/optim/sgd.py",
            "step",
            120,
        ),
        frame(b, EVAL_FRAME, "_fn", 1000),
        frame(b, TRAIN, "step", 42),
    ];
    for (id, frames) in [
        (1, compiling),
        (2, importing),
        (3, saving),
        (4, stepping),
        (5, evaluating),
        (6, optimizer),
    ] {
        b.ev.push(Event::PyStack(fmt::PyStack { id, frames }));
    }
}

/// Samples of stack `stack` every 10 ms over [from, to).
fn sample(b: &mut B, from: u64, to: u64, stack: u32) {
    let mut ts = from;
    while ts < to {
        b.ev.push(Event::PySample(fmt::PySample {
            ts,
            tid: TID,
            stack,
        }));
        ts += 10 * MS;
    }
}

/// Steps of 4 kernels of 500 us from `h` for `n` steps; the end.
fn steps(b: &mut B, mut h: u64, n: usize) -> u64 {
    for _ in 0..n {
        b.step_kernels(h, 500 * US);
        h += 2100 * US;
    }
    h
}

/// Start-up 2 s (its first 0.5 s importing dynamo), a first compile of 1 s, a loop of
/// 200 steps (420 ms), then 10 rounds of 1 s compiling and 5 steps, a 300 ms checkpoint
/// save, a 2 s pause, 5 steps.
fn recompiling() -> B {
    let mut b = B::new();
    stacks(&mut b);
    let t = startup(&mut b, 2 * GIB);
    sample(&mut b, T0 + 100 * MS, T0 + 600 * MS, 2);
    sample(&mut b, t, t + S, 1);
    let mut h = t + S;
    sample(&mut b, h, h + 420 * MS, 4);
    h = steps(&mut b, h, 200);
    for _ in 0..10 {
        sample(&mut b, h, h + S, 1);
        h += S;
        h = steps(&mut b, h, 5);
    }
    sample(&mut b, h, h + 300 * MS, 3);
    h += 300 * MS;
    h += 2 * S;
    steps(&mut b, h, 5);
    b
}

fn report(b: B) -> Report {
    analyze(&[b.build()])
}

#[test]
fn a_recompiling_run_is_told_phase_by_phase() {
    let r = report(recompiling());
    let text = render_text(&r);
    let run = r.processes[0].run.as_ref().expect("a run");
    let time = |k: Kind| run.time(k) as f64 / 1e9;
    // Compilation: the first (1 s) and ten more (1 s each), within a bin each way.
    assert!((time(Kind::Compilation) - 11.0).abs() < 0.3, "{text}");
    assert_eq!(run.recompiles, 10, "{text}");
    assert!((run.recompile_ns as f64 / 1e9 - 10.0).abs() < 0.3, "{text}");
    assert_eq!(run.compiler, Some("torch"));
    // The checkpoint and the pause.
    assert!((time(Kind::Checkpoint) - 0.3).abs() < 0.1, "{text}");
    assert!((time(Kind::Pause) - 2.0).abs() < 0.2, "{text}");
    // Importing torch._dynamo at start-up is start-up, not compilation.
    assert!(run.phases[0].kind == Kind::StartUp, "{:?}", run.phases[0]);
    assert!(time(Kind::StartUp) > 1.9, "{text}");
    // The largest kind first; shares add up to the run.
    assert_eq!(run.by_kind[0].kind, Kind::Compilation);
    let sum: u64 = run.by_kind.iter().map(|k| k.ns).sum();
    assert_eq!(sum, run.span_ns);
    // The finding: critical, its time a share of the trace, the torch fix.
    let f = r
        .findings
        .iter()
        .find(|f| f.id == FindingId::Recompilation)
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(f.severity, Severity::Critical);
    assert_eq!(f.at_stake_ns, run.recompile_ns);
    assert!(f.at_stake_pct > 40.0, "{}", f.at_stake_pct);
    assert!(f.fix.contains("dynamic=True"), "{}", f.fix);
    assert_eq!(r.findings[0].id, FindingId::Recompilation, "{text}");
    // The verdict says the loop is a small part of the run, and what the rest was.
    assert!(
        r.verdict.contains("of the ") && r.verdict.contains("run: compilation "),
        "{}",
        r.verdict
    );
    assert!(text.contains("\n   run        "), "{text}");
    assert!(
        text.contains("recompiled 10 times after the GPU work began"),
        "{text}"
    );
    // --json carries the phases.
    let json = serde_json::to_value(&r).unwrap();
    let phases = json["processes"][0]["run"]["phases"].as_array().unwrap();
    assert!(phases.iter().any(|p| p["kind"] == "checkpoint"));
    assert_eq!(json["processes"][0]["run"]["recompiles"], 10);
}

#[test]
fn a_plain_loop_has_no_compilation_and_no_run_clause() {
    // Start-up 2 s, then 3000 steps (6.3 s): the loop is most of the run.
    let mut b = B::new();
    let t = startup(&mut b, 2 * GIB);
    steps(&mut b, t, 3000);
    let r = report(b);
    let run = r.processes[0].run.as_ref().unwrap();
    assert_eq!(run.recompiles, 0);
    assert_eq!(run.time(Kind::Compilation), 0);
    assert!(run.time(Kind::Loop) * 2 > run.span_ns, "{:?}", run.by_kind);
    assert!(!r.verdict.contains(" run: "), "{}", r.verdict);
    assert!(r.findings.iter().all(|f| f.id != FindingId::Recompilation));
}

#[test]
fn a_stray_compiling_sample_in_the_loop_is_no_recompilation() {
    // One compiling sample among the loop's (a guard failure compiled in a blink, or
    // a sample taken in a lazy import): no compilation phase, no recompilation.
    let mut b = B::new();
    stacks(&mut b);
    let t = startup(&mut b, 2 * GIB);
    let mid = steps(&mut b, t, 1500);
    sample(&mut b, mid, mid + MS, 1);
    steps(&mut b, mid, 1500);
    let r = report(b);
    let run = r.processes[0].run.as_ref().unwrap();
    assert_eq!(run.time(Kind::Compilation), 0, "{:?}", run.by_kind);
    assert_eq!((run.recompiles, run.recompile_ns), (0, 0));
    assert!(!render_text(&r).contains("recompiled"));
}

/// A plain loop whose trace says when the process started (`process_start_ns`).
fn started_at(start: u64) -> Report {
    let mut b = B::new();
    let t = startup(&mut b, 2 * GIB);
    steps(&mut b, t, 300);
    let (key, value) = (b.s("process_start_ns"), b.s(&start.to_string()));
    b.ev.push(Event::Fact(fmt::Fact {
        ts: T0,
        device: fmt::FACT_HOST,
        key,
        value,
    }));
    report(b)
}

#[test]
fn the_time_before_the_first_cuda_call_is_said_apart() {
    let r = started_at(T0 - 3_200 * MS);
    let text = render_text(&r);
    let p = &r.processes[0];
    let run = p.run.as_ref().expect("a run");
    // From the process's start to the trace's first record (T0 or a little after).
    let before = run.before_trace_ns.expect("time before the trace");
    assert!((3_200 * MS..3_300 * MS).contains(&before), "{before}");
    // Not in the run's span: the run is what was traced.
    assert_eq!(run.by_kind.iter().map(|k| k.ns).sum::<u64>(), run.span_ns);
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("the process started 3.2")
            && flat.contains(" before its first CUDA call (imports and set-up: not traced)"),
        "{text}"
    );
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["processes"][0]["run"]["before_trace_ns"], before);
    // A start after the first record (a clock stepped) says nothing.
    let r = started_at(T0 + 10 * S);
    assert_eq!(r.processes[0].run.as_ref().unwrap().before_trace_ns, None);
    assert!(!render_text(&r).contains("the process started"));
}

#[test]
fn an_optimizer_step_inside_dynamos_wrapper_is_not_compilation() {
    // Every sample of the loop in `optimizer.step`, under the wrapper torch puts around
    // it (torch/_dynamo/eval_frame.py): the loop, not compilation.
    let mut b = B::new();
    stacks(&mut b);
    let t = startup(&mut b, 2 * GIB);
    sample(&mut b, t, t + 3000 * 2100 * US, 6);
    steps(&mut b, t, 3000);
    let r = report(b);
    let run = r.processes[0].run.as_ref().unwrap();
    assert_eq!(run.time(Kind::Compilation), 0, "{:?}", run.by_kind);
    assert_eq!(run.recompiles, 0);
    assert!(r.findings.iter().all(|f| f.id != FindingId::Recompilation));
}

/// Start-up 2 s, then 4 epochs of 500 steps (1.05 s each); after each of the first three
/// an evaluation (400 ms of other kernels, in `evaluate`) and a checkpoint save (300 ms).
fn epochs() -> B {
    let mut b = B::new();
    stacks(&mut b);
    let mut h = startup(&mut b, 2 * GIB);
    for epoch in 0..4 {
        sample(&mut b, h, h + 1050 * MS, 4);
        h = steps(&mut b, h, 500);
        if epoch < 3 {
            sample(&mut b, h, h + 400 * MS, 5);
            for i in 0..200 {
                b.launch(
                    h + i * 2 * MS,
                    5 * US,
                    h + i * 2 * MS + 10 * US,
                    MS,
                    "eval_gemm",
                    BIG,
                );
            }
            h += 400 * MS;
            sample(&mut b, h, h + 300 * MS, 3);
            h += 300 * MS;
        }
    }
    b
}

#[test]
fn a_loop_interrupted_by_evaluation_and_checkpoints_names_them() {
    let r = report(epochs());
    let text = render_text(&r);
    let run = r.processes[0].run.as_ref().expect("a run");
    let time = |k: Kind| run.time(k) as f64 / 1e9;
    // All four epochs are the loop (the steps outside the steady stretch too).
    assert!((time(Kind::Loop) - 4.2).abs() < 0.3, "{text}");
    assert_eq!(time(Kind::GpuWork), 0.0, "{text}");
    assert!((time(Kind::Evaluation) - 1.2).abs() < 0.2, "{text}");
    assert!((time(Kind::Checkpoint) - 0.9).abs() < 0.2, "{text}");
    // The parts that come back, named with their period in steps.
    let ev = run
        .periodic
        .iter()
        .find(|p| p.kind == Kind::Evaluation)
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(ev.times, 3);
    let every = ev.every_steps.expect("steps known");
    assert!((450..=550).contains(&every), "{every}");
    // 1.2 s of a loop region of 6.3 s.
    assert!((ev.pct_of_loop - 19.0).abs() < 3.0, "{}", ev.pct_of_loop);
    assert!(run
        .periodic
        .iter()
        .any(|p| p.kind == Kind::Checkpoint && p.times == 3));
    assert!(text.contains("also evaluation (3 times, "), "{text}");
    // The loop is half of the run: the verdict names the largest part that comes back.
    assert!(
        r.verdict.contains("(every ~")
            && r.verdict
                .contains("also evaluation: 19% of the loop's time)"),
        "{}",
        r.verdict
    );
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["processes"][0]["run"]["periodic"][0]["times"], 3);
}

/// A loop stretch from `h` of `n` kernels of 20 us, each launched by a call of 30 us
/// every 80 us and starting 20 us after its call returns: the GPU is busy a quarter of the
/// time, and idle the rest waiting for the next launch (launch_bound). The end.
fn launch_gaps(b: &mut B, mut h: u64, n: usize) -> u64 {
    for i in 0..n {
        let name = format!("small_op_{}", i % 10);
        b.launch(h, 30 * US, h + 50 * US, 20 * US, &name, BIG);
        h += 80 * US;
    }
    h
}

#[test]
fn each_phase_kind_has_its_busy_time_and_idle_causes() {
    // Start-up 2 s (nothing on the GPU, no CUDA call), a loop of 1 s with launch gaps, a
    // pause of 3 s (no GPU work, no call), the loop again for 1 s.
    let mut b = B::new();
    let h = startup(&mut b, 2 * GIB);
    let h = launch_gaps(&mut b, h, 12_500);
    launch_gaps(&mut b, h + 3 * S, 12_500);
    let r = report(b);
    let text = render_text(&r);
    let p = &r.processes[0];
    let run = p.run.as_ref().expect("a run");
    let kind = |k: Kind| {
        run.by_kind
            .iter()
            .find(|x| x.kind == k)
            .unwrap_or_else(|| panic!("no {k:?}: {text}"))
    };
    // Busy and idle add up to each kind's time (one device).
    for k in &run.by_kind {
        let idle: u64 = k.idle.iter().map(|c| c.ns).sum();
        assert_eq!(k.busy_ns + idle, k.ns, "{k:?}");
    }
    // The pause: nothing ran, and nobody asked for anything.
    let pause = kind(Kind::Pause);
    assert!((pause.ns as f64 / 1e9 - 3.0).abs() < 0.1, "{text}");
    assert_eq!(pause.busy_ns, 0);
    assert_eq!(pause.idle[0].cause, "data_starvation", "{:?}", pause.idle);
    assert!(pause.idle[0].pct > 99.0, "{:?}", pause.idle);
    // The loop: busy a quarter of its time, the rest the launches.
    let lp = kind(Kind::Loop);
    assert!((lp.ns as f64 / 1e9 - 2.0).abs() < 0.1, "{text}");
    assert!((lp.busy_pct() - 25.0).abs() < 1.0, "{}", lp.busy_pct());
    assert_eq!(lp.idle[0].cause, "launch_bound", "{:?}", lp.idle);
    assert!((lp.idle[0].pct - 75.0).abs() < 2.0, "{:?}", lp.idle);
    // Start-up: quiet on the host and the GPU.
    let su = kind(Kind::StartUp);
    assert_eq!(su.idle[0].cause, "data_starvation", "{:?}", su.idle);
    // The kinds share out all the busy time of the run: 25 000 kernels of 20 us.
    let busy: u64 = run.by_kind.iter().map(|k| k.busy_ns).sum();
    assert_eq!(busy, 25_000 * 20 * US);
    assert_eq!(busy, p.startup.busy_ns + p.steady.busy_ns + p.tail.busy_ns);
    // A line per kind under the run line, in by_kind order.
    let lines: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("   run "))
        .skip(1)
        .take(run.by_kind.len())
        .collect();
    for (l, k) in lines.iter().zip(&run.by_kind) {
        assert!(
            l.starts_with(&format!("              {} ", k.kind.name())),
            "{l}\n{text}"
        );
    }
    assert!(
        text.contains(": GPU busy 0%, data_starvation 100%\n"),
        "{text}"
    );
    assert!(text.contains(": GPU busy 25%, launch_bound 75%"), "{text}");
    // --json carries them.
    let json = serde_json::to_value(&r).unwrap();
    let k0 = &json["processes"][0]["run"]["by_kind"][0];
    assert!(k0["busy_ns"].is_u64() && k0["idle"].is_array(), "{k0}");
}

/// Samples of DataLoader worker `pid` (a child of the traced process) every 100 ms over
/// [from, to).
fn worker(b: &mut B, pid: u32, from: u64, to: u64) {
    let comm = b.s("pt_data_worker");
    let mut ts = from;
    while ts < to {
        b.ev.push(Event::ProcSample(fmt::ProcSample {
            ts,
            pid,
            ppid: b.meta.pid,
            comm,
            flags: 0,
            state: b'S',
            threads: 1,
            cpu_ns: 0,
            rchar: 0,
            read_bytes: 0,
            write_bytes: 0,
        }));
        ts += 100 * MS;
    }
}

/// Start-up 2 s, then 4 epochs of 400 steps (840 ms each), each with its two workers;
/// between epochs the workers are replaced and the GPU waits 600 ms for the new ones'
/// first batch (no kernel, the host blocked: no call either).
fn restarting_workers() -> B {
    restarting_workers_every(400)
}

/// [`restarting_workers`] with epochs of `steps` steps (2.1 ms each).
fn restarting_workers_every(steps_per_epoch: usize) -> B {
    let mut b = B::new();
    stacks(&mut b);
    let mut h = startup(&mut b, 2 * GIB);
    for epoch in 0..4u32 {
        let from = h;
        sample(&mut b, h, h + steps_per_epoch as u64 * 2100 * US, 4);
        h = steps(&mut b, h, steps_per_epoch);
        worker(&mut b, 5000 + 2 * epoch, from, h);
        worker(&mut b, 5001 + 2 * epoch, from, h);
        if epoch < 3 {
            h += 600 * MS;
        }
    }
    b
}

#[test]
fn workers_replaced_between_epochs_are_epoch_boundaries() {
    let r = report(restarting_workers());
    let text = render_text(&r);
    let run = r.processes[0].run.as_ref().expect("a run");
    let time = |k: Kind| run.time(k) as f64 / 1e9;
    // Three boundaries of 600 ms (to a bin or two), not pauses and not the loop.
    assert!(
        (time(Kind::EpochBoundary) - 1.8).abs() < 0.35,
        "{}\n{text}",
        time(Kind::EpochBoundary)
    );
    assert_eq!(time(Kind::Pause), 0.0, "{text}");
    assert!((time(Kind::Loop) - 3.36).abs() < 0.35, "{text}");
    let eb = run
        .periodic
        .iter()
        .find(|p| p.kind == Kind::EpochBoundary)
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(eb.times, 3, "{text}");
    assert!(text.contains("also epoch boundary (3 times, "), "{text}");
    // The waits are at the boundaries: the fix is to keep the workers.
    let f = r
        .findings
        .iter()
        .find(|f| f.id == FindingId::DataStarvation)
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(f.subcause.as_deref(), Some("epoch_boundary"), "{text}");
    assert!(
        f.fix.starts_with("Keep the DataLoader's workers"),
        "{}",
        f.fix
    );
    // The same loop without the workers replaced: the waits are the loop's own.
    let mut b = B::new();
    stacks(&mut b);
    let mut h = startup(&mut b, 2 * GIB);
    let from = h;
    for epoch in 0..4 {
        sample(&mut b, h, h + 840 * MS, 4);
        h = steps(&mut b, h, 400);
        if epoch < 3 {
            h += 600 * MS;
        }
    }
    worker(&mut b, 5000, from, h);
    let r = report(b);
    let run = r.processes[0].run.as_ref().expect("a run");
    assert_eq!(run.time(Kind::EpochBoundary), 0, "{}", render_text(&r));
}

#[test]
fn epochs_shorter_than_a_second_each_have_their_boundary() {
    // Epochs of 100 steps (210 ms): new workers every 810 ms, each generation gone before
    // the next appears: three boundaries, not one.
    let r = report(restarting_workers_every(100));
    let text = render_text(&r);
    let run = r.processes[0].run.as_ref().expect("a run");
    let n = run
        .phases
        .iter()
        .filter(|p| p.kind == Kind::EpochBoundary)
        .count();
    assert_eq!(n, 3, "{text}");
}

/// Gradient accumulation over 2 micro-batches: every second step also runs the optimizer
/// (40 more kernels of 200 us), so steps alternate between short and long.
#[test]
fn alternating_steps_are_one_loop() {
    let mut b = B::new();
    stacks(&mut b);
    let mut h = startup(&mut b, 2 * GIB);
    sample(&mut b, h, h + 3 * S, 4);
    for i in 0..600 {
        b.step_kernels(h, 500 * US);
        h += 2100 * US;
        if i % 2 == 1 {
            for k in 0..40 {
                b.launch(
                    h + k * 210 * US,
                    5 * US,
                    h + k * 210 * US + 10 * US,
                    200 * US,
                    "adam_step",
                    BIG,
                );
            }
            h += 40 * 210 * US + 100 * US;
        }
    }
    let r = report(b);
    let text = render_text(&r);
    let run = r.processes[0].run.as_ref().expect("a run");
    // The whole loop is the loop: no part of it is told apart as another kind.
    let looped = run.time(Kind::Loop) as f64 / 1e9;
    assert!((looped - 3.79).abs() < 0.1, "{looped}\n{text}");
    // Steps found over the pairs or the micro-batches, with nothing left out.
    let st = &r.processes[0].steps;
    assert!(st.detected, "{text}");
    let covered = st.count as f64 * st.step_ns_median as f64 / 1e9;
    assert!(
        covered > 0.8 * 3.79,
        "{} steps of {} ns\n{text}",
        st.count,
        st.step_ns_median
    );
}
