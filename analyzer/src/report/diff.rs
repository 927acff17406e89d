//! `gputrace diff BEFORE AFTER`: what changed between two runs, in plain words first
//! ("step time -38% (19.7 -> 12.2 ms); data_starvation gone; new top: small_grid"),
//! then step time, busy share, each idle cause's time, the top kernels and copies, and
//! the findings gained and lost.
//!
//! Each side is a report: analysed from traces, or read from `gputrace report --json`
//! output. Both go through the report's JSON form ([`Side::from_json`]), so a report
//! saved yesterday and one made now are read alike. A side of several processes
//! (ranks) counts as one job: step time is the slowest rank's median step, times are
//! summed over ranks, busy share is over all of them.
//!
//! Idle causes and kernels are compared per step when both sides have steps (runs of
//! different lengths then compare), else as shares of the steady-state wall time. The
//! whole run is compared phase by phase, in time (`processes[].run`: compilation 16.9 s
//! -> 0.8 s), summed over processes, with the recompilations counted.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// How many kernels and copies a diff lists.
pub const TOP: usize = 8;

/// What a diff reads of one report (the fields of the `--json` schema it needs).
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct ReportView {
    verdict: String,
    top_finding: Option<String>,
    processes: Vec<ProcView>,
    findings: Vec<FindingView>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct ProcView {
    command: Vec<String>,
    devices: Vec<DeviceView>,
    steady: PhaseView,
    steps: StepsView,
    breakdown: BreakdownView,
    kernels: KernelsView,
    copies: Vec<CopyView>,
    run: RunView,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct DeviceView {
    name: String,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct RunView {
    span_ns: u64,
    by_kind: Vec<KindView>,
    recompiles: u64,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct KindView {
    kind: String,
    ns: u64,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct PhaseView {
    wall_ns: u64,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct StepsView {
    detected: bool,
    count: u64,
    step_ns_median: u64,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct BreakdownView {
    wall_ns: u64,
    busy_ns: u64,
    causes: Vec<CauseView>,
    unattributed: Vec<CauseView>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct CauseView {
    cause: String,
    ns: u64,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct KernelsView {
    count: u64,
    total_ns: u64,
    top: Vec<KernelView>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct KernelView {
    name: String,
    count: u64,
    total_ns: u64,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct CopyView {
    host_memory: String,
    direction: String,
    #[serde(rename = "async")]
    is_async: bool,
    count: u64,
    bytes: u64,
    time_ns: u64,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct FindingView {
    id: String,
    severity: String,
    title: String,
    at_stake_ns: u64,
    at_stake_pct: f64,
}

/// One side of a diff, as compared.
#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct Side {
    /// Where it came from (the trace or report file names).
    pub source: String,
    pub verdict: String,
    pub top_finding: Option<String>,
    pub processes: usize,
    /// The slowest rank's median step (None without steps).
    pub step_ns: Option<u64>,
    /// Steps in the steady state, over ranks.
    pub steps: u64,
    /// Steady-state wall time x devices, over ranks.
    pub wall_ns: u64,
    pub busy_ns: u64,
    pub busy_pct: f64,
    /// Idle time by cause (attributed and not), over ranks.
    pub causes: BTreeMap<String, u64>,
    /// Kernel time by name (the top kernels of each rank).
    pub kernels: BTreeMap<String, (u64, u64)>,
    pub kernel_count: u64,
    pub kernel_ns: u64,
    /// Copy time by kind ("pageable HtoD sync"): (count, bytes, ns).
    pub copies: BTreeMap<String, (u64, u64, u64)>,
    /// Findings by id: (severity, title, at stake ns, at stake %), the largest of a
    /// finding raised on several ranks.
    pub findings: BTreeMap<String, (String, String, u64, f64)>,
    /// The traced time over processes, and its time by phase kind ("compilation").
    pub run_ns: u64,
    pub phases: BTreeMap<String, u64>,
    pub recompiles: u64,
    /// The programs its processes ran (`train.py`, `-m pkg.mod`, the executable's name).
    pub programs: BTreeSet<String>,
    /// The names of the GPUs it ran on.
    pub gpus: BTreeSet<String>,
}

/// The program a command line runs: for a Python interpreter its script or `-m`
/// module, else the executable's file name.
fn program_of(cmd: &[String]) -> Option<String> {
    let base = |a: &str| a.rsplit('/').next().unwrap_or(a).to_string();
    let exe = base(cmd.first()?);
    if !exe.starts_with("python") {
        return Some(exe);
    }
    let mut args = cmd[1..].iter();
    while let Some(a) = args.next() {
        match a.as_str() {
            "-m" => return args.next().map(|m| format!("-m {m}")),
            "-c" => return Some(format!("{exe} -c")),
            x if x.starts_with('-') => {}
            x => return Some(base(x)),
        }
    }
    Some(exe)
}

/// Why a side could not be read.
#[derive(Debug, thiserror::Error)]
#[error("not a gputrace report: {0}")]
pub struct NotAReport(String);

impl Side {
    /// Reads a report in its JSON form (`gputrace report --json`).
    pub fn from_json(source: &str, v: serde_json::Value) -> Result<Side, NotAReport> {
        if v.get("processes").is_none() {
            return Err(NotAReport("no `processes`".into()));
        }
        let r: ReportView = serde_json::from_value(v).map_err(|e| NotAReport(e.to_string()))?;
        let mut s = Side {
            source: source.to_string(),
            verdict: r.verdict,
            top_finding: r.top_finding,
            processes: r.processes.len(),
            ..Default::default()
        };
        for p in &r.processes {
            if p.steps.detected && p.steps.count > 0 {
                s.step_ns = Some(s.step_ns.unwrap_or(0).max(p.steps.step_ns_median));
                s.steps += p.steps.count;
            }
            let wall = if p.breakdown.wall_ns > 0 {
                p.breakdown.wall_ns
            } else {
                p.steady.wall_ns
            };
            s.wall_ns += wall;
            s.busy_ns += p.breakdown.busy_ns;
            for c in p.breakdown.causes.iter().chain(&p.breakdown.unattributed) {
                *s.causes.entry(c.cause.clone()).or_default() += c.ns;
            }
            s.programs.extend(program_of(&p.command));
            s.gpus.extend(
                p.devices
                    .iter()
                    .map(|d| d.name.clone())
                    .filter(|n| !n.is_empty()),
            );
            s.run_ns += p.run.span_ns;
            s.recompiles += p.run.recompiles;
            for k in &p.run.by_kind {
                // The kind's name in words ("other GPU work"), an unknown one as written.
                let name = serde_json::from_value::<crate::report::phases::Kind>(
                    serde_json::Value::String(k.kind.clone()),
                )
                .map_or_else(|_| k.kind.clone(), |x| x.name().to_string());
                *s.phases.entry(name).or_default() += k.ns;
            }
            s.kernel_count += p.kernels.count;
            s.kernel_ns += p.kernels.total_ns;
            for k in &p.kernels.top {
                let e = s.kernels.entry(k.name.clone()).or_default();
                e.0 += k.count;
                e.1 += k.total_ns;
            }
            for c in &p.copies {
                let key = format!(
                    "{} {} {}",
                    c.host_memory,
                    c.direction,
                    if c.is_async { "async" } else { "sync" }
                );
                let e = s.copies.entry(key).or_default();
                e.0 += c.count;
                e.1 += c.bytes;
                e.2 += c.time_ns;
            }
        }
        s.busy_pct = crate::report::units::pct(s.busy_ns, s.wall_ns);
        for f in r.findings {
            let e = s
                .findings
                .entry(f.id)
                .or_insert((f.severity.clone(), f.title.clone(), 0, 0.0));
            if f.at_stake_ns >= e.2 {
                *e = (f.severity, f.title, f.at_stake_ns, f.at_stake_pct);
            }
        }
        Ok(s)
    }

    /// A report made now.
    pub fn from_report(source: &str, r: &crate::report::out::Report) -> Side {
        let v = serde_json::to_value(r).unwrap_or_default();
        Side::from_json(source, v).unwrap_or_default()
    }

    /// `ns` as this side compares it: per step when both sides have steps, else as
    /// a share of the steady-state wall time (in ns per second of wall).
    fn norm(&self, ns: u64, per_step: bool) -> f64 {
        if per_step {
            ns as f64 / self.steps.max(1) as f64
        } else if self.wall_ns > 0 {
            ns as f64 * 1e9 / self.wall_ns as f64
        } else {
            0.0
        }
    }
}

/// One compared quantity.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Change {
    pub name: String,
    /// Per step (ns) when `per_step`, else ns per second of steady-state wall time.
    pub before: f64,
    pub after: f64,
    /// after - before.
    pub delta: f64,
    /// Relative change in percent (None when `before` is 0).
    pub pct: Option<f64>,
}

impl Change {
    fn new(name: &str, before: f64, after: f64) -> Change {
        Change {
            name: name.to_string(),
            before,
            after,
            delta: after - before,
            pct: (before > 0.0).then(|| 100.0 * (after - before) / before),
        }
    }
}

/// A finding on one side only, or on both with another severity.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct FindingChange {
    pub id: String,
    pub title: String,
    pub before: Option<String>,
    pub after: Option<String>,
    pub before_stake_pct: f64,
    pub after_stake_pct: f64,
}

/// Two runs compared.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Diff {
    /// The change in plain words.
    pub summary: String,
    /// Kernels, causes and copies are compared per step (else per second of wall).
    pub per_step: bool,
    pub step: Option<Change>,
    pub busy_pct: Change,
    /// The traced time (ns), then each phase kind's time (ns), largest change first.
    pub run: Change,
    pub phases: Vec<Change>,
    /// Every idle cause of either side, largest change first.
    pub causes: Vec<Change>,
    /// The kernels with the largest change in time, of the top kernels of either side.
    pub kernels: Vec<Change>,
    pub copies: Vec<Change>,
    pub findings_gained: Vec<FindingChange>,
    pub findings_lost: Vec<FindingChange>,
    /// On both sides with another severity.
    pub findings_changed: Vec<FindingChange>,
    /// What makes the comparison doubtful: the runs ran different programs, or on
    /// different GPUs.
    pub warnings: Vec<String>,
    pub before: Side,
    pub after: Side,
}

fn ms(ns: f64) -> String {
    if ns >= 10e6 {
        format!("{:.1} ms", ns / 1e6)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.0} µs", ns / 1e3)
    }
}

fn compare<V>(
    a: &BTreeMap<String, V>,
    b: &BTreeMap<String, V>,
    val: impl Fn(&V) -> u64,
    norm_a: impl Fn(u64) -> f64,
    norm_b: impl Fn(u64) -> f64,
) -> Vec<Change> {
    let mut names: Vec<&String> = a.keys().chain(b.keys()).collect();
    names.sort();
    names.dedup();
    let mut v: Vec<Change> = names
        .into_iter()
        .map(|n| {
            Change::new(
                n,
                a.get(n).map_or(0.0, |x| norm_a(val(x))),
                b.get(n).map_or(0.0, |x| norm_b(val(x))),
            )
        })
        .collect();
    v.sort_by(|x, y| {
        y.delta
            .abs()
            .total_cmp(&x.delta.abs())
            .then_with(|| x.name.cmp(&y.name))
    });
    v
}

/// Severities that make a finding worth naming in the summary.
fn notable(sev: &str) -> bool {
    sev == "warn" || sev == "critical"
}

/// What makes two runs hard to compare: other programs, other GPUs (each side's set,
/// when both are known and differ).
fn warnings(before: &Side, after: &Side) -> Vec<String> {
    let list = |v: &BTreeSet<String>| v.iter().cloned().collect::<Vec<_>>().join(", ");
    let mut out = Vec::new();
    let differ =
        |a: &BTreeSet<String>, b: &BTreeSet<String>| !a.is_empty() && !b.is_empty() && a != b;
    if differ(&before.programs, &after.programs) {
        out.push(format!(
            "the runs ran different programs ({} before, {} after)",
            list(&before.programs),
            list(&after.programs)
        ));
    }
    if differ(&before.gpus, &after.gpus) {
        out.push(format!(
            "the runs ran on different GPUs ({} before, {} after)",
            list(&before.gpus),
            list(&after.gpus)
        ));
    }
    out
}

/// Compares two reports' sides.
pub fn diff(before: Side, after: Side) -> Diff {
    let per_step = before.step_ns.is_some() && after.step_ns.is_some();
    let step = match (before.step_ns, after.step_ns) {
        (Some(a), Some(b)) => Some(Change::new("step time", a as f64, b as f64)),
        _ => None,
    };
    let busy = Change::new("busy", before.busy_pct, after.busy_pct);
    let na = |ns: u64| before.norm(ns, per_step);
    let nb = |ns: u64| after.norm(ns, per_step);
    let causes = compare(&before.causes, &after.causes, |&x| x, na, nb);
    let mut kernels = compare(&before.kernels, &after.kernels, |x| x.1, na, nb);
    kernels.truncate(TOP);
    let mut copies = compare(&before.copies, &after.copies, |x| x.2, na, nb);
    copies.truncate(TOP);
    let run = Change::new("run", before.run_ns as f64, after.run_ns as f64);
    let mut phases = compare(
        &before.phases,
        &after.phases,
        |&x| x,
        |ns| ns as f64,
        |ns| ns as f64,
    );
    phases.retain(|p| p.before > 0.0 || p.after > 0.0);
    let fc = |id: &String| {
        let a = before.findings.get(id);
        let b = after.findings.get(id);
        FindingChange {
            id: id.clone(),
            title: b.or(a).map(|x| x.1.clone()).unwrap_or_default(),
            before: a.map(|x| x.0.clone()),
            after: b.map(|x| x.0.clone()),
            before_stake_pct: a.map_or(0.0, |x| x.3),
            after_stake_pct: b.map_or(0.0, |x| x.3),
        }
    };
    let gained: Vec<FindingChange> = after
        .findings
        .keys()
        .filter(|k| !before.findings.contains_key(*k))
        .map(fc)
        .collect();
    let lost: Vec<FindingChange> = before
        .findings
        .keys()
        .filter(|k| !after.findings.contains_key(*k))
        .map(fc)
        .collect();
    let changed: Vec<FindingChange> = before
        .findings
        .iter()
        .filter(|(k, v)| after.findings.get(*k).is_some_and(|w| w.0 != v.0))
        .map(|(k, _)| fc(k))
        .collect();

    // The plain words.
    let mut words = Vec::new();
    match &step {
        Some(s) => words.push(format!(
            "step time {} ({} -> {})",
            Some(s.words(ms))
                .filter(|w| !w.is_empty())
                .unwrap_or_else(|| "unchanged".into()),
            ms(s.before),
            ms(s.after)
        )),
        None => words.push(format!(
            "steps {}",
            match (before.step_ns, after.step_ns) {
                (None, None) => "not found in either run",
                (Some(_), None) => "not found after",
                _ => "not found before",
            }
        )),
    }
    if (busy.after - busy.before).abs() >= 1.0 {
        words.push(format!(
            "GPU busy {:.0}% -> {:.0}%",
            busy.before, busy.after
        ));
    }
    // The whole run, when a phase's change is a tenth of the run before or more.
    if let Some(p) = phases.first() {
        if run.before > 0.0 && p.delta.abs() >= 0.1 * run.before {
            words.push(format!(
                "run {} -> {}, {} {} ({} -> {})",
                secs(run.before),
                secs(run.after),
                p.name,
                p.words(secs),
                secs(p.before),
                secs(p.after)
            ));
        }
    }
    for f in &lost {
        if f.before.as_deref().is_some_and(notable) {
            words.push(format!("{} gone", f.id));
        }
    }
    for f in &changed {
        if f.before.as_deref().is_some_and(notable) && !f.after.as_deref().is_some_and(notable) {
            words.push(format!(
                "{} down to {}",
                f.id,
                f.after.as_deref().unwrap_or("")
            ));
        }
    }
    if before.top_finding != after.top_finding {
        if let Some(t) = &after.top_finding {
            words.push(format!("new top: {t}"));
        }
    }
    for f in &gained {
        if f.after.as_deref().is_some_and(notable) && after.top_finding.as_ref() != Some(&f.id) {
            words.push(format!("new: {}", f.id));
        }
    }
    if after.top_finding.is_none() && before.top_finding.is_some() {
        words.push("no warning left".into());
    }
    Diff {
        summary: words.join("; "),
        per_step,
        step,
        busy_pct: busy,
        run,
        phases,
        causes,
        kernels,
        copies,
        findings_gained: gained,
        findings_lost: lost,
        findings_changed: changed,
        warnings: warnings(&before, &after),
        before,
        after,
    }
}

fn secs(ns: f64) -> String {
    if ns >= 10e9 {
        format!("{:.0} s", ns / 1e9)
    } else {
        format!("{:.1} s", ns / 1e9)
    }
}

impl Change {
    /// The change in a few characters, as the values are shown by `show`: nothing when
    /// they show alike (a change below what is shown is no change), "new" from nothing,
    /// "gone" to nothing, "12x" for ten times or more (a percentage from almost nothing
    /// says little), else a signed percentage ("+12%", "-3%"; never "-0%").
    fn words(&self, show: fn(f64) -> String) -> String {
        if show(self.before) == show(self.after) {
            return String::new();
        }
        match self.pct {
            _ if self.before <= 0.0 => "new".into(),
            _ if self.after <= 0.0 => "gone".into(),
            Some(p) if p >= 900.0 => format!("{:.0}x", self.after / self.before),
            Some(p) if p.abs() < 0.5 => "0%".into(),
            Some(p) if p > 0.0 => format!("+{p:.0}%"),
            Some(p) => format!("{p:.0}%"),
            None => "new".into(),
        }
    }
}

/// The diff as text: the plain words, then the tables.
pub fn render_text(d: &Diff) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "DIFF  {}", d.summary);
    let _ = writeln!(s, "  before: {}", d.before.source);
    let _ = writeln!(s, "  after:  {}", d.after.source);
    for w in &d.warnings {
        let _ = writeln!(s, "  note: {w}");
    }
    let _ = writeln!(s);
    let unit = if d.per_step {
        "per step"
    } else {
        "per second of steady state"
    };
    if let Some(st) = &d.step {
        let _ = writeln!(
            s,
            "Step time (median, slowest rank)  {:>10} -> {:>10}  {}",
            ms(st.before),
            ms(st.after),
            st.words(ms)
        );
    }
    let _ = writeln!(
        s,
        "GPU busy (steady state)           {:>9.1}% -> {:>9.1}%",
        d.busy_pct.before, d.busy_pct.after
    );
    let table = |s: &mut String, title: &str, rows: &[Change]| {
        if rows.is_empty() {
            return;
        }
        let _ = writeln!(s, "\n{title} ({unit}):");
        // Rows that show as nothing on both sides say nothing.
        for r in rows
            .iter()
            .filter(|r| ms(r.before) != ms(0.0) || ms(r.after) != ms(0.0))
        {
            let _ = writeln!(
                s,
                "  {:<44} {:>10} -> {:>10}  {}",
                truncate(&r.name, 44),
                ms(r.before),
                ms(r.after),
                r.words(ms)
            );
        }
    };
    if d.run.before > 0.0 || d.run.after > 0.0 {
        let _ = writeln!(
            s,
            "\nThe whole run (time by phase)     {:>10} -> {:>10}  {}",
            secs(d.run.before),
            secs(d.run.after),
            d.run.words(secs)
        );
        for r in &d.phases {
            let _ = writeln!(
                s,
                "  {:<32} {:>10} -> {:>10}  {}",
                r.name,
                secs(r.before),
                secs(r.after),
                r.words(secs)
            );
        }
    }
    table(&mut s, "Idle time by cause", &d.causes);
    table(&mut s, "Top kernels", &d.kernels);
    table(&mut s, "Copies", &d.copies);
    let list = |s: &mut String, title: &str, v: &[FindingChange]| {
        if v.is_empty() {
            return;
        }
        let _ = writeln!(s, "\n{title}:");
        for f in v {
            let sev = |x: &Option<String>| x.clone().unwrap_or_else(|| "-".into());
            let _ = writeln!(
                s,
                "  {:<22} {:>8} -> {:<8} {}",
                f.id,
                sev(&f.before),
                sev(&f.after),
                f.title
            );
        }
    };
    list(&mut s, "Findings gained", &d.findings_gained);
    list(&mut s, "Findings lost", &d.findings_lost);
    list(
        &mut s,
        "Findings with another severity",
        &d.findings_changed,
    );
    // No trailing blanks where a change reads as nothing.
    let mut out: String = s.lines().map(|l| format!("{}\n", l.trim_end())).collect();
    if !s.ends_with('\n') {
        out.pop();
    }
    s = out;
    s
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 3).collect();
        t.push_str("...");
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn report(
        step_ns: u64,
        steps: u64,
        busy: u64,
        causes: &[(&str, u64)],
        findings: &[(&str, &str)],
        top: Option<&str>,
    ) -> serde_json::Value {
        json!({
            "verdict": "v",
            "top_finding": top,
            "processes": [{
                "steady": {"wall_ns": steps * step_ns},
                "steps": {"detected": true, "count": steps, "step_ns_median": step_ns},
                "breakdown": {
                    "wall_ns": steps * step_ns,
                    "busy_ns": busy,
                    "causes": causes.iter().map(|(c, ns)| json!({"cause": c, "ns": ns})).collect::<Vec<_>>(),
                    "unattributed": []
                },
                "kernels": {"count": 10, "total_ns": busy, "top": [{"name": "gemm", "count": 10, "total_ns": busy}]},
                "copies": [{"host_memory": "pageable", "direction": "HtoD", "async": false, "count": steps, "bytes": 1, "time_ns": 1000 * steps}]
            }],
            "findings": findings.iter().map(|(id, sev)| json!({"id": id, "severity": sev, "title": format!("{id} title"), "at_stake_ns": 1, "at_stake_pct": 1.0})).collect::<Vec<_>>()
        })
    }

    #[test]
    fn plain_words_name_the_step_change_and_the_findings() {
        let before = Side::from_json(
            "b",
            report(
                19_700_000,
                10,
                90_000_000,
                &[("data_starvation", 80_000_000)],
                &[("data_starvation", "critical")],
                Some("data_starvation"),
            ),
        )
        .unwrap();
        let after = Side::from_json(
            "a",
            report(
                12_200_000,
                20,
                200_000_000,
                &[("launch_bound", 10_000_000)],
                &[("small_grid", "warn")],
                Some("small_grid"),
            ),
        )
        .unwrap();
        let d = diff(before, after);
        assert_eq!(
            d.summary,
            "step time -38% (19.7 ms -> 12.2 ms); GPU busy 46% -> 82%; data_starvation gone; new top: small_grid"
        );
        assert!(d.per_step);
        // Per step: 8 ms of starvation per step before, none after.
        let ds = d
            .causes
            .iter()
            .find(|c| c.name == "data_starvation")
            .unwrap();
        assert_eq!((ds.before, ds.after), (8_000_000.0, 0.0));
        let lb = d.causes.iter().find(|c| c.name == "launch_bound").unwrap();
        assert_eq!((lb.before, lb.after, lb.pct), (0.0, 500_000.0, None));
        assert_eq!(d.causes[0].name, "data_starvation", "largest change first");
        // Kernel time per step: 9 ms -> 10 ms.
        assert_eq!(d.kernels[0].before, 9_000_000.0);
        assert_eq!(d.kernels[0].after, 10_000_000.0);
        assert_eq!(d.findings_gained.len(), 1);
        assert_eq!(d.findings_gained[0].id, "small_grid");
        assert_eq!(d.findings_lost[0].id, "data_starvation");
        let text = render_text(&d);
        assert!(text.starts_with("DIFF  step time -38%"), "{text}");
        assert!(text.contains("Findings lost:"), "{text}");
    }

    #[test]
    fn a_run_compared_with_itself_has_no_change() {
        let r = report(
            1_000_000,
            5,
            4_000_000,
            &[("implicit_sync", 1_000_000)],
            &[("implicit_sync", "warn")],
            Some("implicit_sync"),
        );
        let d = diff(
            Side::from_json("x", r.clone()).unwrap(),
            Side::from_json("x", r).unwrap(),
        );
        assert_eq!(d.summary, "step time unchanged (1.00 ms -> 1.00 ms)");
        assert!(d.causes.iter().all(|c| c.delta == 0.0));
        assert!(d.findings_gained.is_empty() && d.findings_lost.is_empty());
    }

    #[test]
    fn the_whole_run_is_compared_phase_by_phase() {
        let with_run = |compile_ns: u64, loop_ns: u64, recompiles: u64| {
            let mut r = report(1_000_000, 5, 4_000_000, &[], &[], None);
            r["processes"][0]["run"] = json!({
                "span_ns": compile_ns + loop_ns,
                "recompiles": recompiles,
                "by_kind": [
                    {"kind": "compilation", "ns": compile_ns, "pct": 0.0, "phases": 1},
                    {"kind": "loop", "ns": loop_ns, "pct": 0.0, "phases": 1},
                    {"kind": "start_up", "ns": 0, "pct": 0.0, "phases": 1}
                ]
            });
            Side::from_json("x", r).unwrap()
        };
        let d = diff(
            with_run(16_900_000_000, 2_700_000_000, 98),
            with_run(800_000_000, 2_600_000_000, 0),
        );
        assert_eq!(d.phases[0].name, "compilation", "largest change first");
        assert_eq!(d.phases[0].before, 16.9e9);
        assert_eq!(d.before.recompiles, 98);
        assert!(d.before.phases.contains_key("start-up"));
        assert!(
            d.phases.iter().all(|p| p.name != "start-up"),
            "none on either side"
        );
        assert!(
            d.summary
                .contains("run 20 s -> 3.4 s, compilation -95% (17 s -> 0.8 s)"),
            "{}",
            d.summary
        );
        let text = render_text(&d);
        assert!(text.contains("The whole run (time by phase)"), "{text}");
        // Without phases on either side (older reports), no run line or table.
        let plain = report(1_000_000, 5, 4_000_000, &[], &[], None);
        let d = diff(
            Side::from_json("x", plain.clone()).unwrap(),
            Side::from_json("x", plain).unwrap(),
        );
        assert!(d.phases.is_empty() && !render_text(&d).contains("whole run"));
    }

    #[test]
    fn not_a_report_is_refused() {
        assert!(Side::from_json("x", json!({"a": 1})).is_err());
        assert!(Side::from_json("x", json!([1, 2])).is_err());
    }

    #[test]
    fn a_change_reads_as_the_values_are_shown() {
        let c = |b: f64, a: f64| Change::new("x", b, a).words(ms);
        // Alike as shown (0.2 us and 0.3 us are both "0.000 ms"): no percentage.
        assert_eq!(c(200.0, 300.0), "");
        assert_eq!(c(0.0, 0.0), "");
        assert_eq!(c(0.0, 2e6), "new");
        assert_eq!(c(2e6, 0.0), "gone");
        // From almost nothing: a ratio, not "+122771%".
        assert_eq!(c(1e4, 1.2e7), "1200x");
        assert_eq!(c(1e6, 1.5e6), "+50%");
        assert_eq!(c(1e6, 0.7e6), "-30%");
        // Never "-0%".
        assert_eq!(c(1e9, 0.999e9), "0%");
    }

    #[test]
    fn runs_of_other_programs_or_gpus_are_said_to_be() {
        let cmd = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            program_of(&cmd(&["/usr/bin/python3", "-u", "train.py", "--lr", "1"])).unwrap(),
            "train.py"
        );
        assert_eq!(
            program_of(&cmd(&["python", "-m", "torch.distributed.run"])).unwrap(),
            "-m torch.distributed.run"
        );
        assert_eq!(program_of(&cmd(&["./bench", "-n", "3"])).unwrap(), "bench");
        let side = |p: &str, g: &str| Side {
            programs: [p.to_string()].into(),
            gpus: [g.to_string()].into(),
            ..Default::default()
        };
        assert!(warnings(&side("a.py", "H100"), &side("a.py", "H100")).is_empty());
        let w = warnings(&side("a.py", "H100"), &side("b.py", "H200"));
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("a.py before, b.py after"), "{w:?}");
        assert!(w[1].contains("H100 before, H200 after"), "{w:?}");
        // Unknown on one side (a report without them): nothing said.
        assert!(warnings(&Side::default(), &side("b.py", "H200")).is_empty());
    }
}
