//! `recompilation`: compilation after the GPU work began (read in
//! `crate::report::phases`): torch.compile compiling again for a new input shape, JAX
//! re-tracing a jitted function. Its time at stake is the compilation phases' time after
//! the first GPU work, a share of the whole trace (a run that recompiles every step has
//! no steady state worth the name). A one-time compile at start-up is start-up, not this.

use super::common::{dur, run_severity, share, RUN_NOTE_PCT};
use super::inputs::FindingCx;
use crate::report::out::id::FindingId;
use crate::report::out::{Example, Finding};
use crate::report::phases::{Kind, Run};
use crate::report::units::pct;

pub(super) fn detect(cx: &FindingCx) -> Option<Finding> {
    let r = cx.report.run.as_ref()?;
    let ns = r.recompile_ns;
    let p = pct(ns, r.span_ns.max(1));
    if r.recompiles == 0 || p < RUN_NOTE_PCT {
        return None;
    }
    let mut x = cx.finding(
        FindingId::Recompilation,
        "Compiled again after the GPU work began",
        ns,
        false,
    );
    x.at_stake_pct = p;
    x.severity = run_severity(p);
    x.summary = format!(
        "The program compiled {} times after its GPU work began, for {} of the {} run ({:.0}%), the GPU mostly waiting: every compilation is time no step runs.",
        r.recompiles,
        dur(ns),
        dur(r.span_ns),
        p
    );
    evidence(r, &mut x);
    x.metrics.insert("recompiles".into(), r.recompiles as f64);
    x.metrics
        .insert("compile_ns".into(), r.time(Kind::Compilation) as f64);
    x.fix = fix(r.compiler).into();
    Some(x)
}

fn evidence(r: &Run, x: &mut Finding) {
    let compiling: Vec<_> = r
        .phases
        .iter()
        .filter(|p| p.kind == Kind::Compilation)
        .collect();
    let busy: f64 = compiling
        .iter()
        .map(|p| p.gpu_busy_pct * (p.end_ns - p.start_ns) as f64)
        .sum::<f64>()
        / compiling
            .iter()
            .map(|p| (p.end_ns - p.start_ns) as f64)
            .sum::<f64>()
            .max(1.0);
    x.evidence.push(format!(
        "compilation in all {} ({} phases, start-up's included), the GPU busy {:.0}% of it; the loop {}",
        share(r.time(Kind::Compilation), r.span_ns),
        compiling.len(),
        busy,
        share(r.time(Kind::Loop), r.span_ns)
    ));
    x.evidence.push(format!(
        "told from the Python stack samples: most samples of those stretches were inside {}",
        match r.compiler {
            Some("jax") => "JAX's tracing and XLA compilation (jax/_src/interpreters, compiler.py, pjit.py)",
            _ => "torch.compile (torch/_dynamo, torch/_inductor, torch/_functorch) or Triton's compiler",
        }
    ));
    let first = r
        .phases
        .iter()
        .position(|p| matches!(p.kind, Kind::Loop | Kind::GpuWork));
    let mut longest: Vec<_> = r
        .phases
        .iter()
        .skip(first.unwrap_or(0))
        .filter(|p| p.kind == Kind::Compilation)
        .collect();
    longest.sort_by_key(|p| std::cmp::Reverse(p.end_ns - p.start_ns));
    for p in longest.iter().take(3) {
        x.examples.push(Example {
            at_ns: p.start_ns,
            dur_ns: p.end_ns - p.start_ns,
            what: "compiling".into(),
        });
    }
}

fn fix(compiler: Option<&str>) -> &'static str {
    match compiler {
        Some("jax") => "Each new input shape or static argument value traces and compiles the jitted function again: keep shapes static (pad inputs to a few bucket sizes), make an argument static only if it takes few values, and call jax.jit once, outside the loop. JAX_LOG_COMPILES=1 prints each compilation and its cause.",
        _ => "Shapes or Python values that change from step to step make torch.compile compile again: mark the changing dimension dynamic (torch.compile(model, dynamic=True), or torch._dynamo.mark_dynamic(x, 0) before the call), or pad inputs to a few fixed sizes so each compiles once, and warm every size up before the timed run; keep compiled code across runs with the inductor cache. TORCH_LOGS=recompiles prints what changed at each recompilation.",
    }
}
