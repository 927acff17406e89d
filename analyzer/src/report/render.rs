//! The report as text: the verdict first, then the findings, then the time breakdown.

use super::findings::{FindingId, Layer, Stake};

use super::out::{Breakdown, Finding, ProcessReport, Report, Severity};
use super::units::pct;
use std::fmt::Write;

pub use super::units::{bytes, dur, pct_str};

/// A phase boundary, in seconds (to the millisecond).
fn ts_ms(ns: u64) -> String {
    format!("{:.3} s", ns as f64 / 1e9)
}

fn sev(s: Severity) -> &'static str {
    match s {
        Severity::Info => "info",
        Severity::Warn => "WARN",
        Severity::Critical => "CRITICAL",
    }
}

fn wrap(o: &mut String, indent: &str, text: &str, width: usize) {
    let mut line = String::new();
    let cont = " ".repeat(indent.chars().count());
    let mut first = true;
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            let _ = writeln!(o, "{}{line}", if first { indent } else { &cont });
            first = false;
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        let _ = writeln!(o, "{}{line}", if first { indent } else { &cont });
    }
}

fn process_header(o: &mut String, p: &ProcessReport, multi: bool) {
    let cmd = if p.command.is_empty() {
        String::new()
    } else {
        format!(": {}", p.command.join(" "))
    };
    let on = if p.host.is_empty() {
        String::new()
    } else {
        format!(" on {}", p.host)
    };
    let who = if multi || p.rank.is_some() {
        format!("{} (pid {}{on})", p.label, p.pid)
    } else {
        format!("pid {}{on}", p.pid)
    };
    let _ = writeln!(o, "\n== {who}{cmd}");
    if let Some(v) = &p.verdict {
        wrap(o, "   VERDICT    ", v, 100);
    }
    let devs: Vec<String> = p
        .devices
        .iter()
        .map(|d| {
            if d.name.is_empty() {
                format!("device {}", d.id)
            } else {
                format!("{} ({} SMs, {})", d.name, d.sm_count, bytes(d.memory_bytes))
            }
        })
        .collect();
    let _ = writeln!(
        o,
        "   trace {}, {}, {}, {} host API events{}",
        if p.path.is_empty() {
            "(in memory)"
        } else {
            &p.path
        },
        match &p.run {
            Some(r) if r.span_ns > p.span_ns => format!(
                "{} traced (the last CUDA work {} in)",
                dur(r.span_ns),
                dur(p.span_ns)
            ),
            _ => format!("{} traced", dur(p.span_ns)),
        },
        if devs.is_empty() {
            "no GPU activity".to_string()
        } else {
            devs.join(", ")
        },
        p.host_api_events,
        match p.ended.how {
            "unknown" => String::new(),
            _ if p.ended.quiet_ns > 0 => format!(
                "; ended: {}, {} after its last GPU work or CUDA call",
                p.ended.detail,
                dur(p.ended.quiet_ns)
            ),
            _ => format!("; ended: {}", p.ended.detail),
        }
    );
    if p.devices.is_empty() {
        return;
    }
    if let Some(r) = &p.run {
        run_line(o, r);
    }
    phase_lines(o, p);
    let l = &p.launches;
    if l.linked > 0 {
        let line = format!(
            "{} GPU operations (kernels, copies, memsets) linked to the calls that submitted them; launch latency (call start to kernel start) median {} (p90 {}); {:.0}% found their stream empty; mean queue depth {:.1} (operations already waiting on the stream at each submission)",
            l.linked,
            dur(l.latency_p50_ns),
            dur(l.latency_p90_ns),
            l.empty_queue_pct,
            l.mean_queue_depth
        );
        wrap(o, "   launches   ", &line, 100);
    }
    if let Some(g) = &p.graphs {
        graph_lines(o, g);
    }
    match &p.measured {
        Some(m) => measured_lines(o, p, m),
        None => {
            let _ = writeln!(
                o,
                "   nvidia-smi GPU-Util would read {:.0}%; SM fill (block slots occupied) actually achieved ~{} (estimated from grid sizes)",
                p.gpu_util_pct,
                p.sm_fill_pct
                    .map(pct_str)
                    .unwrap_or_else(|| "? (no device record)".into())
            );
        }
    }
    if let Some(h) = &p.host_cpu {
        host_lines(o, h);
    }
    if let Some(e) = &p.environment {
        env_line(o, e);
    }
    for n in &p.notes {
        wrap(o, "   note: ", n, 100);
    }
}

/// The run line: the span of GPU work in words, recompiles after the GPU work began and
/// up to three periodic patterns, wrapped at 100 columns; then, when the run has two
/// kinds of phase or more, a line per kind of 1% of the run or more: its time, the GPU's
/// busy share in it, its three largest idle causes (1% or more) and where the main
/// thread was most (from the Python samples).
fn run_line(o: &mut String, r: &super::phases::Run) {
    let recompiled = if r.recompiles > 0 {
        format!(
            "; recompiled {} time{} after the GPU work began ({})",
            r.recompiles,
            if r.recompiles == 1 { "" } else { "s" },
            dur(r.recompile_ns)
        )
    } else {
        String::new()
    };
    let periodic: String = r
        .periodic
        .iter()
        .take(3)
        .map(|p| format!("; {}", p.words()))
        .collect();
    let before = r.before_trace_ns.map_or(String::new(), |b| {
        format!(
            "; the process started {} before its first CUDA call (imports and set-up: not traced)",
            dur(b)
        )
    });
    let mut w = String::new();
    let pad = "              ";
    wrap(
        &mut w,
        pad,
        &format!(
            "{}: {}{recompiled}{periodic}{before}",
            dur(r.span_ns),
            r.words(5)
        ),
        100,
    );
    o.push_str("   run       ");
    o.push_str(&w[pad.len() - 1..]);
    if r.by_kind.len() < 2 {
        return;
    }
    // Each kind: how busy the GPU was in it, and what kept it idle.
    for k in r.by_kind.iter().filter(|k| k.pct >= 1.0) {
        let causes: String = k
            .idle
            .iter()
            .filter(|c| c.pct >= 1.0)
            .take(3)
            .map(|c| format!(", {} {}", c.cause, pct_str(c.pct)))
            .collect();
        let at = k
            .host_at
            .as_ref()
            .map(|h| format!("; host at {} ({:.0}%)", h.place(), h.pct))
            .unwrap_or_default();
        let line = format!(
            "{} {}: GPU busy {}{causes}{at}",
            k.kind.name(),
            dur(k.ns),
            pct_str(k.busy_pct())
        );
        wrap(o, pad, &line, 100);
    }
}

/// The before, steady state and after lines (window, wall time, GPU busy share, steps
/// found), then the step statistics and boundary when steps were detected. "before", not
/// "start-up": the run line's start-up ends where the loop began, its warm-up steps
/// counted as the loop's, and the two figures would read as one.
fn phase_lines(o: &mut String, p: &ProcessReport) {
    let s = &p.startup;
    let _ = writeln!(
        o,
        "   before     +{} .. +{}  {:>10}  GPU busy {:>5.1}%  (start-up, warm-up: not in the verdict{})",
        ts_ms(s.start_ns),
        ts_ms(s.end_ns),
        dur(s.wall_ns),
        s.busy_pct,
        if p.steps.warmup_steps > 0 {
            format!("; {} slow first steps", p.steps.warmup_steps)
        } else {
            String::new()
        }
    );
    let st = &p.steady;
    let steps = if let Some(n) = &p.steps.nvtx_range {
        format!("{} steps (NVTX range \"{n}\")", p.steps.count)
    } else if let Some(g) = p.steps.graph_id {
        format!("{} steps (replays of CUDA graph {g})", p.steps.count)
    } else if p.steps.detected {
        format!(
            "{} steps of {} GPU ops",
            p.steps.count,
            p.steps.ops_per_step.unwrap_or(0)
        )
    } else {
        "no repeating step found".to_string()
    };
    let _ = writeln!(
        o,
        "   steady     +{} .. +{}  {:>10}  GPU busy {:>5.1}%  {}",
        ts_ms(st.start_ns),
        ts_ms(st.end_ns),
        dur(st.wall_ns),
        st.busy_pct,
        steps
    );
    if p.tail.wall_ns > 0 {
        let _ = writeln!(
            o,
            "   after      +{} .. +{}  {:>10}  GPU busy {:>5.1}%",
            ts_ms(p.tail.start_ns),
            ts_ms(p.tail.end_ns),
            dur(p.tail.wall_ns),
            p.tail.busy_pct
        );
    }
    if p.steps.detected {
        step_lines(o, &p.steps);
    }
}

/// Step duration and per-step GPU busy statistics, and the work the step boundary falls on.
fn step_lines(o: &mut String, s: &super::out::StepsReport) {
    let _ = writeln!(
        o,
        "   steps      median {} (min {}, max {}, spread {:.0}%), GPU busy per step median {:.0}% (min {:.0}%, max {:.0}%)",
        dur(s.step_ns_median),
        dur(s.step_ns_min),
        dur(s.step_ns_max),
        s.spread_pct,
        s.busy_pct_median,
        s.busy_pct_min,
        s.busy_pct_max
    );
    if let Some(a) = &s.anchor_kernel {
        let short: String = if a.chars().count() > 70 {
            let mut t: String = a.chars().take(69).collect();
            t.push('…');
            t
        } else {
            a.clone()
        };
        let what = if short.starts_with("memcpy ") || short == "memset" {
            ""
        } else {
            "kernel "
        };
        let _ = writeln!(o, "              (step boundary at {what}{short})");
    }
}

/// The measured counters line: GPU-Util next to measured SM activity and occupancy, then
/// one line per kernel name whose samples were its own, and a line on those that had none.
fn measured_lines(o: &mut String, p: &ProcessReport, m: &super::counters::Measured) {
    let v = |x: Option<f64>| x.map(pct_str).unwrap_or_else(|| "?".into());
    let by = if m.source == "gpm" {
        "NVML GPM"
    } else {
        "CUPTI PM"
    };
    let _ = writeln!(
        o,
        "   nvidia-smi GPU-Util would read {:.0}%; SMs actually active {}, occupancy {} (measured by {by}: {} samples; tensor {}, DRAM {} of peak)",
        p.gpu_util_pct,
        v(m.m.sm_active_pct),
        v(m.m.occupancy_pct),
        m.samples,
        v(m.m.tensor_active_pct),
        v(m.m.dram_pct)
    );
    // Per kernel name only where the values are its own (exact); a mixed row
    // would repeat the mix of the samples it shared.
    for k in p
        .measured_kernels
        .iter()
        .filter(|k| k.attribution == "exact")
    {
        let _ = write!(
            o,
            "     {} x{} ({}): SMs {}, occupancy {}, tensor {}, DRAM {}",
            k.name,
            k.count,
            k.attribution,
            v(k.m.sm_active_pct),
            v(k.m.occupancy_pct),
            v(k.m.tensor_active_pct),
            v(k.m.dram_pct)
        );
        if let Some(fp) = k.m.fp_max_pct() {
            let _ = write!(o, ", FP {}", pct_str(fp));
        }
        let _ = writeln!(
            o,
            "{}",
            match k.verdict {
                "memory_bound" => ": memory-bound",
                "tensor_bound" => ": compute-bound on the tensor pipes (healthy)",
                _ => "",
            }
        );
    }
    let mixed = p
        .measured_kernels
        .iter()
        .filter(|k| k.attribution != "exact")
        .count();
    if mixed > 0 {
        let all = mixed == p.measured_kernels.len();
        let who = match (all, mixed) {
            (true, 1) => "per kernel: the one kernel name sampled never had a sample to itself (each sample it ran in also held".to_string(),
            (true, n) => format!("per kernel: the {n} busiest kernel names never had a sample to themselves (each sample they ran in also held"),
            (false, 1) => "1 more of the busiest kernel names never had a sample to itself (each sample it ran in also held".to_string(),
            (false, n) => format!("{n} more of the busiest kernel names never had a sample to themselves (each sample they ran in also held"),
        };
        let _ = writeln!(
            o,
            "     {who} other kernels, or more than {:.0}% idle time): the values would repeat the mix of those samples, so they are not shown",
            100.0 - super::counters::FILL * 100.0
        );
    }
}

/// The environment in one line: versions, then each GPU's clocks, power, temperature,
/// link and the processes beside the job.
/// The CUDA graphs: replays in the steady state, then one line per graph.
fn graph_lines(o: &mut String, g: &super::graphs::GraphsReport) {
    let setup = if g.instantiate_calls + g.upload_calls > 0 {
        format!(
            "; set-up {} instantiate ({}), {} upload ({})",
            g.instantiate_calls,
            dur(g.instantiate_ns),
            g.upload_calls,
            dur(g.upload_ns)
        )
    } else {
        String::new()
    };
    if g.graph_level {
        let _ = writeln!(
            o,
            "   graphs     {} CUDA graph replays in the steady state, recorded one record per replay (graph-level tracing: the kernels and gaps inside a replay are not seen){}",
            g.replays,
            setup
        );
    } else {
        let _ = writeln!(
            o,
            "   graphs     {} CUDA graph replays in the steady state ({:.0}% of its kernels), {} idle between nodes inside them{}",
            g.replays,
            g.kernel_pct,
            dur(g.gap_ns),
            setup
        );
    }
    for x in &g.graphs {
        if x.replays == 0 {
            let _ = writeln!(
                o,
                "     graph {} (device {}): {} replays, none in the steady state",
                x.graph_id, x.device, x.replays_total
            );
            continue;
        }
        let _ = writeln!(
            o,
            "     graph {} (device {}): {} replays, {} kernels per replay, GPU {} and gaps {} per replay ({:.0}% of its span); {}",
            x.graph_id,
            x.device,
            x.replays,
            x.kernels_per_replay,
            dur(x.gpu_ns_per_replay),
            dur(x.gap_ns_per_replay),
            x.gap_pct,
            match &x.launch_call {
                Some(c) => format!("{c} median {}", dur(x.launch_call_ns_p50)),
                None => "launch call not recorded".into(),
            }
        );
        if let Some(at) = &x.instantiated_at {
            let _ = writeln!(o, "       captured at {at}");
        }
    }
}

fn env_line(o: &mut String, e: &crate::report::environment::EnvSummary) {
    let mut parts: Vec<String> = Vec::new();
    if let Some(d) = &e.driver {
        match &e.cuda_driver {
            Some(c) => parts.push(format!("driver {d} (CUDA {c})")),
            None => parts.push(format!("driver {d}")),
        }
    }
    if let Some(r) = &e.cuda_runtime {
        parts.push(format!("CUDA runtime {r}"));
    }
    if let Some(tv) = &e.torch {
        parts.push(format!("torch {tv}"));
    }
    let mut line = parts.join(", ");
    for g in &e.gpus {
        let mut q: Vec<String> = Vec::new();
        if let Some(c) = g.sm_clock_mhz_median {
            q.push(match g.sm_clock_max_mhz {
                Some(m) => format!("SM clock {c} MHz (max {m})"),
                None => format!("SM clock {c} MHz"),
            });
        }
        match (g.power_w_median, g.power_limit_w) {
            (Some(p), Some(l)) => q.push(format!("{p:.0} W of {l:.0} W")),
            (Some(p), None) => q.push(format!("{p:.0} W")),
            _ => {}
        }
        if let Some(c) = g.temperature_c_max {
            q.push(format!("up to {c} C"));
        }
        if let Some([gen, gen_max, w, w_max]) = g.pcie {
            q.push(format!("PCIe Gen{gen} x{w} (max Gen{gen_max} x{w_max})"));
        }
        q.push(match g.other_processes {
            0 => "no other process".into(),
            1 => "1 other process".into(),
            n => format!("{n} other processes"),
        });
        if !line.is_empty() {
            line.push_str("; ");
        }
        line.push_str(&format!(
            "GPU {} ({} samples): {}",
            g.device,
            g.samples,
            q.join(", ")
        ));
    }
    if let Some(why) = &e.nvml_unavailable {
        if !line.is_empty() {
            line.push_str("; ");
        }
        line.push_str(&format!("no NVML samples ({why})"));
    }
    if !line.is_empty() {
        wrap(o, "   env        ", &line, 100);
    }
}

/// The host samples' picture of the steady state.
fn host_lines(o: &mut String, h: &super::host_causes::HostReport) {
    let who = match (h.feeding_thread, h.feeding_thread_name.as_str()) {
        _ if !h.feeding_thread_label.is_empty() => h.feeding_thread_label.clone(),
        (Some(t), "") => format!("thread {t}"),
        (Some(t), n) => format!("thread {t} ({n})"),
        _ => "feeding thread unknown".into(),
    };
    let cpu = format!(
        "on a CPU {}, waiting for a CPU {}, between launches {}",
        dur(h.on_cpu_ns),
        dur(h.runq_ns),
        dur(h.launch_overhead_ns)
    );
    let mut blocked = format!("blocked {}", dur(h.blocked_ns));
    if h.io_blocked_ns > 0 {
        blocked.push_str(&format!(" (I/O {})", dur(h.io_blocked_ns)));
    }
    // The CPU time is the feeding thread's, or the launching threads' together (the
    // next line splits it by thread).
    let mut line = if super::host_causes::cpu_of_several(h) {
        format!(
            "{who}, in {} of GPU idle with no CUDA call: {blocked}; the launching threads together {cpu}",
            dur(h.quiet_ns)
        )
    } else {
        format!(
            "{who}, in {} of GPU idle with no CUDA call: {cpu}, {blocked}",
            dur(h.quiet_ns)
        )
    };
    if h.page_fault_ns > 0 {
        line.push_str(&format!(", in page faults {}", dur(h.page_fault_ns)));
    }
    if h.unmeasured_ns > 0 {
        line.push_str(&format!(", not sampled {}", dur(h.unmeasured_ns)));
    }
    wrap(o, "   host       ", &line, 100);
    let by_thread = match h.computing_threads.as_slice() {
        [] => None,
        [one] if Some(one.tid) == h.feeding_thread => None,
        v => Some(
            v.iter()
                .take(4)
                .map(|x| format!("{} {} ({:.0}%)", x.label, dur(x.ns), x.pct))
                .collect::<Vec<_>>()
                .join(", "),
        ),
    };
    if let Some(l) = by_thread {
        wrap(
            o,
            "   host       ",
            &format!("on a CPU by thread: {l}"),
            100,
        );
    }
    if h.contention_ns > 0 {
        let (what, list) = if h.gil_holders.is_empty() {
            (
                "while another thread of the process was on a CPU",
                &h.other_threads,
            )
        } else {
            ("while another thread held the GIL", &h.gil_holders)
        };
        let each: Vec<String> = list
            .iter()
            .take(3)
            .map(|x| format!("{} {}", x.label, dur(x.ns)))
            .collect();
        wrap(
            o,
            "   host       ",
            &format!(
                "blocked {} {what} (cpu_bound): {}",
                dur(h.contention_ns),
                each.join(", ")
            ),
            100,
        );
    }
    let cpus = match h.cpus_available {
        Some(c) => format!("{c:.1} CPUs available"),
        None => "CPUs available unknown".into(),
    };
    let w = &h.while_blocked;
    let mut l2 = format!(
        "{cpus}; {} child process{}",
        h.children,
        if h.children == 1 { "" } else { "es" }
    );
    if w.span_ns > 0 {
        l2.push_str(&format!(
            "; while blocked: {} workers at {:.0}% of a CPU on average, job {:.1} CPUs",
            w.worker_count, w.worker_cpu_pct_mean, w.job_cpus
        ));
        if let Some(b) = w.machine_busy_pct {
            l2.push_str(&format!(", machine {b:.0}% busy"));
        }
        if let Some(i) = w.machine_iowait_pct {
            l2.push_str(&format!(", iowait {i:.1}%"));
        }
    }
    if let Some(c) = &h.data_starvation_cause {
        l2.push_str(&format!(" -> data_starvation: {c}"));
    }
    if let Some(c) = &h.cpu_bound_cause {
        l2.push_str(&format!("; cpu_bound: {c}"));
    }
    wrap(o, "              ", &l2, 100);
}

fn finding(
    o: &mut String,
    i: usize,
    f: &Finding,
    multi: bool,
    fix_shown: &mut Vec<(FindingId, usize)>,
) {
    let who = if multi {
        format!("  [{}]", f.rank)
    } else {
        String::new()
    };
    let est = if f.estimated { ", estimated" } else { "" };
    let no_time = f.id.layer() == Layer::Environment || f.id.stake() == Stake::Failure;
    let of_trace = f.id == FindingId::Hang || matches!(f.id.stake(), Stake::Failure | Stake::Run);
    let stake = if f.at_stake_ns == 0 && no_time {
        String::new()
    } else {
        format!(
            "  {} at stake, {:.1}% of {}{est}",
            dur(f.at_stake_ns),
            f.at_stake_pct,
            // A hang's or a failure's share is of the whole trace: a hung or dead job
            // may have no steady state.
            if of_trace {
                "the trace"
            } else {
                "steady wall time"
            }
        )
    };
    let _ = writeln!(
        o,
        "{:>2}. {:<8} {}{stake}{who}",
        i + 1,
        sev(f.severity),
        f.id
    );
    wrap(o, "    ", &f.summary, 96);
    for e in &f.evidence {
        let mut first = true;
        let mut line = String::new();
        for word in e.split_whitespace() {
            if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > 92 {
                let _ = writeln!(o, "    {} {line}", if first { "-" } else { " " });
                first = false;
                line.clear();
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        if !line.is_empty() {
            let _ = writeln!(o, "    {} {line}", if first { "-" } else { " " });
        }
    }
    if let Some((_, n)) = fix_shown.iter().find(|(id, _)| *id == f.id) {
        let _ = writeln!(o, "    fix: as for #{n}");
    } else if !f.fix.is_empty() {
        fix_shown.push((f.id, i + 1));
        let mut s = String::new();
        wrap(&mut s, "", &f.fix, 90);
        for (j, l) in s.lines().enumerate() {
            let _ = writeln!(o, "    {} {l}", if j == 0 { "fix:" } else { "    " });
        }
    }
}

/// The calls that returned an error, one line per call and code.
fn failed_calls(o: &mut String, p: &ProcessReport, multi: bool) {
    let who = if multi {
        format!(" of {}", p.label)
    } else {
        String::new()
    };
    let _ = writeln!(o, "\nFAILED CALLS{who}");
    for c in &p.failed_calls {
        let when = if c.count > 1 {
            format!(
                "x{} at +{} .. +{}",
                c.count,
                ts_ms(c.first_ns),
                ts_ms(c.last_ns)
            )
        } else {
            format!("x1 at +{}", ts_ms(c.first_ns))
        };
        let mut line = format!("{} returned {} {when}", c.call, c.code_words());
        if let Some(b) = c.bytes {
            line.push_str(&format!(", {} asked", bytes(b)));
        }
        if let Some(at) = &c.called_from {
            line.push_str(&format!(", from {at}"));
        }
        if c.sticky {
            line.push_str(": the CUDA context is unusable from then on");
        }
        wrap(o, "   ", &line, 100);
    }
    if let Some(fc) = &p.fatal_call {
        wrap(
            o,
            "   ",
            &format!(
                "no GPU work ran after the last: {} ({})",
                fc.phrase(),
                fc.what()
            ),
            100,
        );
    }
}

fn breakdown(o: &mut String, title: &str, b: &Breakdown) {
    let _ = writeln!(o, "{title}");
    let row = |o: &mut String, label: &str, ns: u64| {
        let _ = writeln!(
            o,
            "   {:<32} {:>10}  {:>5.1}%",
            label,
            dur(ns),
            pct(ns, b.wall_ns)
        );
    };
    row(o, "busy", b.busy_ns);
    for c in &b.causes {
        row(o, &format!("idle: {}", c.cause), c.ns);
    }
    if b.unattributed_ns > 0 {
        row(o, "unattributed", b.unattributed_ns);
        for c in &b.unattributed {
            row(o, &format!("  of which {}", c.cause), c.ns);
        }
    }
    let _ = writeln!(
        o,
        "   idle {} ({:.1}%), {:.0}% of it attributed to a cause{}",
        dur(b.idle_ns),
        b.idle_pct,
        b.attributed_pct,
        match b.method.as_str() {
            "gpu_only_heuristic" => " (GPU-only heuristic: no host API events)",
            "host_hooks" => " (host calls from the symbol hooks)",
            _ => "",
        }
    );
}

/// Under a process's breakdown: the findings whose time at stake is more than the idle
/// time charged to them above (GPU time they would also save, such as slow copies), so
/// that the two figures are not read as disagreeing.
fn at_stake_beyond_idle(o: &mut String, r: &Report, p: &super::out::ProcessReport) {
    for f in r.findings.iter().filter(|f| f.process == Some(p.index)) {
        let id = f.id.as_str();
        let Some(c) = p.breakdown.causes.iter().find(|c| c.cause == id) else {
            continue;
        };
        if f.at_stake_ns > c.ns {
            let _ = writeln!(
                o,
                "   ({id}: {} at stake = {} idle above + {} of busy time it would also save{})",
                dur(f.at_stake_ns),
                dur(c.ns),
                dur(f.at_stake_ns - c.ns),
                if f.estimated { ", estimated" } else { "" }
            );
        }
    }
}

/// The whole report as text.
pub fn render_text(r: &Report) -> String {
    let mut o = String::new();
    let multi = r.processes.len() > 1;
    let _ = writeln!(
        o,
        "gputrace report: {} trace{}",
        r.processes.len(),
        if multi { "s" } else { "" }
    );
    let _ = writeln!(o, "VERDICT: {}", r.verdict);
    if r.processes_without_cuda > 0 {
        let n = r.processes_without_cuda;
        let _ = writeln!(
            o,
            "NOTE: {n} more process{} did no GPU work (no kernel, copy or CUDA call: launchers, compile workers, tokenizers); not listed",
            if n == 1 { "" } else { "es" }
        );
    }
    if let Some(ts) = &r.trace_set {
        wrap(&mut o, "NOTE: ", &ts.note(r.processes.len()), 100);
    }
    for p in &r.processes {
        process_header(&mut o, p, multi);
    }
    if let Some(c) = &r.cluster {
        let _ = writeln!(
            o,
            "\n== ranks: {} collectives matched on every rank (by {}), clocks aligned by {} (residual {})",
            c.matched_collectives,
            c.matching.replace('_', " "),
            c.alignment.replace('_', " "),
            dur(c.residual_ns)
        );
        for k in &c.ranks {
            let _ = writeln!(
                o,
                "   {:<24} clock offset {:>12} ns  last at {:>5} of {:<5} waited {}",
                k.label,
                k.clock_offset_ns,
                k.last_arrivals,
                k.collectives,
                dur(k.wait_ns)
            );
        }
    }
    let _ = writeln!(o, "\nFINDINGS (ranked by GPU time at stake)");
    if r.findings.is_empty() {
        let _ = writeln!(o, "   none");
    }
    let mut fix_shown = Vec::new();
    for (i, f) in r.findings.iter().enumerate() {
        finding(&mut o, i, f, multi, &mut fix_shown);
    }
    for p in r.processes.iter().filter(|p| !p.failed_calls.is_empty()) {
        failed_calls(&mut o, p, multi);
    }
    for p in &r.processes {
        if p.devices.is_empty() {
            continue;
        }
        let who = if multi {
            format!(" of {}", p.label)
        } else {
            String::new()
        };
        let _ = writeln!(o);
        breakdown(
            &mut o,
            &format!(
                "TIME BREAKDOWN{who} (steady state, {} of device time)",
                dur(p.breakdown.wall_ns)
            ),
            &p.breakdown,
        );
        at_stake_beyond_idle(&mut o, r, p);
        let sb = &p.startup_breakdown;
        let top: Vec<String> = sb
            .causes
            .iter()
            .take(2)
            .map(|c| format!("{} {}", c.cause, dur(c.ns)))
            .collect();
        let _ = writeln!(
            o,
            "   before the steady state (not counted above) {:>10}  GPU busy {:.1}%{}",
            dur(p.startup.wall_ns),
            p.startup.busy_pct,
            if top.is_empty() {
                String::new()
            } else {
                format!("; idle mostly {}", top.join(", "))
            }
        );
    }
    o
}

/// The text report with ANSI colours for a terminal: the verdict line bold, each
/// finding's severity (CRITICAL red, WARN yellow) and its `fix:` green. The words are the
/// same: only escape sequences are added.
pub fn colour(text: &str) -> String {
    const BOLD: &str = "\x1b[1m";
    const RED: &str = "\x1b[1;31m";
    const YELLOW: &str = "\x1b[33m";
    const GREEN: &str = "\x1b[32m";
    const RESET: &str = "\x1b[0m";
    let mut o = String::with_capacity(text.len() + 256);
    for line in text.split_inclusive('\n') {
        let (body, nl) = match line.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (line, ""),
        };
        let trimmed = body.trim_start();
        let indent = &body[..body.len() - trimmed.len()];
        // " 1. CRITICAL data_starvation ...": the number, then the severity word.
        let numbered = trimmed
            .split_once(". ")
            .filter(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if body.starts_with("VERDICT:") {
            o.push_str(&format!("{BOLD}{body}{RESET}{nl}"));
        } else if let Some((n, rest)) = numbered {
            let (word, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            let c = match word {
                "CRITICAL" => Some(RED),
                "WARN" => Some(YELLOW),
                _ => None,
            };
            match c {
                Some(c) => o.push_str(&format!("{indent}{n}. {c}{word}{RESET} {tail}{nl}")),
                None => o.push_str(line),
            }
        } else if let Some(rest) = trimmed.strip_prefix("fix: ") {
            o.push_str(&format!("{indent}{GREEN}fix:{RESET} {rest}{nl}"));
        } else {
            o.push_str(line);
        }
    }
    o
}
