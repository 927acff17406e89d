//! `gputrace fleet DATASET`: the job-level analysis over a dataset (`gputrace dataset`,
//! docs/dataset.md), as SQL, in bounded memory whatever the number of ranks.
//!
//! The queries are the files in `sql/` (one statement each, `{job}` filled in as a
//! literal, `{aligned}` by the subquery of `sql/aligned.sqlpart`), written in the SQL that the embedded engine ([`engine`]) and Spark SQL both
//! take, so `scripts/fleet_spark.py` runs the same text on a cluster and hands back their
//! rows ([`Replayed`]). Each returns
//! small results (a row per rank, per communicator, per finding and rank); what follows
//! from them (the straggler, the rank that never arrived, the outlier ranks, the verdict)
//! is decided here, the same whichever engine ran the SQL.

pub mod engine;
mod rows;

pub use rows::{FleetError, Row, Sql, TABLES};

use crate::report::summary::truncate;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// The queries: name and text. `offsets` runs first: its rows make the `{shift}` of the
/// others' aligned collectives ([`shift`]).
pub const QUERIES: &[(&str, &str)] = &[
    ("offsets", include_str!("sql/offsets.sql")),
    ("ranks", include_str!("sql/ranks.sql")),
    ("straggler", include_str!("sql/straggler.sql")),
    ("hang", include_str!("sql/hang.sql")),
    ("members", include_str!("sql/members.sql")),
    ("findings", include_str!("sql/findings.sql")),
    ("idle", include_str!("sql/idle.sql")),
    ("last_place", include_str!("sql/last_place.sql")),
];

/// A string as an SQL literal.
pub fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The collectives on one timeline across hosts: a subquery the queries name `{aligned}`
/// (before `{job}` is filled in).
pub const ALIGNED: &str = include_str!("sql/aligned.sqlpart");

/// Query `name`'s text for `job`, the hosts' clocks moved by `shift` (from [`shift`]).
pub fn query(name: &str, job: &str, shift: &str) -> String {
    let text = QUERIES.iter().find(|q| q.0 == name).map_or("", |q| q.1);
    text.replace("{aligned}", ALIGNED.trim_end())
        .replace("{shift}", shift)
        .replace("{job}", &literal(job))
}

/// The `offsets` query's rows (host, off_ns) as an SQL expression of a collective's host:
/// how far its clock is ahead (`0` when no host is off). `scripts/fleet_spark.py` builds
/// the same.
pub fn shift(offsets: &[Row]) -> String {
    let arms: Vec<String> = offsets
        .iter()
        .map(|r| (text(r, "host"), int(r, "off_ns")))
        .filter(|(_, off)| *off != 0)
        .map(|(host, off)| format!("WHEN {} THEN CAST({off} AS BIGINT)", literal(&host)))
        .collect();
    if arms.is_empty() {
        "0".into()
    } else {
        format!("CASE host {} ELSE 0 END", arms.join(" "))
    }
}

/// Rows another engine produced (Spark: `scripts/fleet_spark.py`), by query name.
pub struct Replayed {
    pub job: String,
    pub results: BTreeMap<String, Vec<Row>>,
}

impl Sql for Replayed {
    fn rows(&mut self, sql: &str) -> Result<Vec<Row>, FleetError> {
        // Only the queries with aligned collectives hold the shift; the others read the
        // same with any.
        let moved = shift(self.results.get("offsets").map_or(&[][..], |v| &v[..]));
        let name = QUERIES
            .iter()
            .find(|(n, _)| query(n, &self.job, &moved) == sql)
            .map(|q| q.0)
            .ok_or_else(|| FleetError::Query {
                query: "?".into(),
                message: "not one of the fleet queries".into(),
            })?;
        self.results
            .get(name)
            .cloned()
            .ok_or_else(|| FleetError::Query {
                query: name.into(),
                message: "missing from the other engine's results".into(),
            })
    }
}

fn run(e: &mut dyn Sql, name: &str, job: &str, shift: &str) -> Result<Vec<Row>, FleetError> {
    e.rows(&query(name, job, shift)).map_err(|err| match err {
        FleetError::Query { message, .. } => FleetError::Query {
            query: name.into(),
            message,
        },
        other => other,
    })
}

fn int(r: &Row, k: &str) -> i64 {
    match r.get(k) {
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .unwrap_or(0),
        Some(Value::String(s)) => s.parse().unwrap_or(0),
        Some(Value::Bool(b)) => *b as i64,
        _ => 0,
    }
}

fn float(r: &Row, k: &str) -> f64 {
    match r.get(k) {
        Some(Value::Number(n)) => n.as_f64().unwrap_or(0.0),
        Some(Value::String(s)) => s.parse().unwrap_or(0.0),
        _ => 0.0,
    }
}

fn text(r: &Row, k: &str) -> String {
    match r.get(k) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(v) => v.to_string(),
    }
}

/// One process of the job.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Rank {
    pub rank: i64,
    pub host: String,
    pub pid: i64,
    pub steps: i64,
    pub step_ns_median: i64,
    pub steady_busy_pct: f64,
    pub ended: String,
    pub ended_normal: bool,
    pub damaged: bool,
    pub top_finding: String,
    /// Kernels in its trace.
    pub kernels: i64,
}

impl Rank {
    /// A process with no rank that ran no kernel: a launcher (torchrun), a compile
    /// worker or a tokenizer started under the preload. Counted apart, never as a rank.
    fn is_helper(&self) -> bool {
        self.rank < 0 && self.kernels == 0 && self.steps == 0
    }
}

/// A process of the job that did no GPU work and has no rank.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Helper {
    pub host: String,
    pub pid: i64,
    pub ended: String,
}

/// Step time over ranks (their median steps).
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct StepSpread {
    pub median_ns: i64,
    pub fastest_rank: i64,
    pub fastest_ns: i64,
    pub slowest_rank: i64,
    pub slowest_ns: i64,
    /// (slowest - fastest) / median, in percent.
    pub spread_pct: f64,
}

/// The rank that arrives last at the collectives.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Straggler {
    pub rank: i64,
    pub times_last: i64,
    /// Collectives every member reached.
    pub collectives: i64,
    pub share_pct: f64,
    /// Summed over those collectives: how long the mean other rank waited for it.
    pub others_waited_ns: i64,
    /// Its own steady-state idle time by cause, most first (communication left out).
    pub own_idle: Vec<(String, i64)>,
    pub top_finding: String,
    /// Who else was last, and how often.
    pub others: Vec<(i64, i64)>,
}

/// A rank behind the others on a communicator.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Behind {
    pub comm: String,
    pub rank: i64,
    /// The last collective it reached, and the furthest any rank reached.
    pub reached: i64,
    pub most: i64,
    pub ended: String,
    /// Where its Python was last seen ("train.py:88 in step"), when sampled.
    pub last_place: Option<String>,
}

/// A communicator with members that have no trace.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Missing {
    pub comm: String,
    pub size: i64,
    pub seen: i64,
}

/// A rank whose finding stands out from the others'.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Outlier {
    pub rank: i64,
    pub finding: String,
    pub pct: f64,
    /// The other ranks' median and largest share for the same finding (0 where absent).
    pub others_median_pct: f64,
    pub others_max_pct: f64,
}

/// The job, across its ranks.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Fleet {
    pub job: String,
    pub verdict: String,
    pub ranks: Vec<Rank>,
    /// Processes without a rank that ran no kernel (launchers and the like): listed
    /// apart, left out of every cross-rank answer.
    pub helpers: Vec<Helper>,
    pub step: Option<StepSpread>,
    pub straggler: Option<Straggler>,
    /// Collectives every member reached; 0 without collectives.
    pub collectives: i64,
    pub behind: Vec<Behind>,
    pub missing: Vec<Missing>,
    pub outliers: Vec<Outlier>,
    pub not_normal: Vec<i64>,
}

/// A rank's share of being last that names it the straggler: at least a quarter of the
/// collectives and twice what chance gives one of `n` ranks; and what the others lost
/// waiting for it (`waited_ns`) at least 5% of the loop (`loop_ns`: steps x median step
/// of the median rank; 0 when unknown, then the share alone decides).
fn is_straggler(share: f64, n: usize, waited_ns: i64, loop_ns: i64) -> bool {
    share >= 25.0
        && share >= 2.0 * 100.0 / n.max(1) as f64
        && (loop_ns <= 0 || waited_ns * 20 >= loop_ns)
}

/// A finding share that stands out: 10% of the steady state or more, and three times
/// the others' median (at least 5%) or more.
fn stands_out(pct: f64, others_median: f64) -> bool {
    pct >= 10.0 && pct >= 3.0 * others_median.max(5.0)
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The job-level analysis of `job`.
pub fn analyze(e: &mut dyn Sql, job: &str) -> Result<Fleet, FleetError> {
    let (helpers, ranks): (Vec<Rank>, Vec<Rank>) =
        rank_rows(e, job)?.into_iter().partition(Rank::is_helper);
    let helpers = helpers
        .into_iter()
        .map(|r| Helper {
            host: r.host,
            pid: r.pid,
            ended: r.ended,
        })
        .collect();
    let step = step_spread(&ranks);
    let idle = idle_by_rank(e, job)?;

    // The hosts' clocks, once, for the queries that compare times across hosts.
    let moved = shift(&run(e, "offsets", job, "0")?);

    // The straggler.
    let last = run(e, "straggler", job, &moved)?;
    let collectives = last.first().map_or(0, |r| int(r, "collectives"));
    let straggler = find_straggler(&ranks, &idle, &last, collectives);

    // Ranks behind on a communicator, and communicators with members missing.
    let behind = ranks_behind(e, job, &moved, &ranks)?;
    let missing: Vec<Missing> = run(e, "members", job, "0")?
        .iter()
        .map(|r| Missing {
            comm: text(r, "comm"),
            size: int(r, "size"),
            seen: int(r, "seen"),
        })
        .filter(|m| m.seen < m.size)
        .collect();

    let outliers = finding_outliers(e, job, &ranks)?;
    let not_normal: Vec<i64> = ranks
        .iter()
        .filter(|r| !r.ended_normal && !r.ended.is_empty() && r.ended != "unknown")
        .map(|r| r.rank)
        .collect();
    let mut f = Fleet {
        job: job.to_string(),
        verdict: String::new(),
        ranks,
        helpers,
        step,
        straggler,
        collectives,
        behind,
        missing,
        outliers,
        not_normal,
    };
    f.verdict = verdict(&f);
    Ok(f)
}

/// The job's processes, from the `ranks` query.
fn rank_rows(e: &mut dyn Sql, job: &str) -> Result<Vec<Rank>, FleetError> {
    Ok(run(e, "ranks", job, "0")?
        .iter()
        .map(|r| Rank {
            rank: int(r, "rank"),
            host: text(r, "host"),
            pid: int(r, "pid"),
            steps: int(r, "steps"),
            step_ns_median: int(r, "step_ns_median"),
            steady_busy_pct: float(r, "steady_busy_pct"),
            ended: text(r, "ended_detail"),
            ended_normal: int(r, "ended_normal") != 0,
            damaged: int(r, "damaged") != 0,
            top_finding: text(r, "top_finding"),
            kernels: int(r, "kernels"),
        })
        .collect())
}

/// The spread of the median step time over the ranks that have steps (at least two).
fn step_spread(ranks: &[Rank]) -> Option<StepSpread> {
    let stepped: Vec<&Rank> = ranks.iter().filter(|r| r.step_ns_median > 0).collect();
    (stepped.len() >= 2).then(|| {
        let mut v: Vec<f64> = stepped.iter().map(|r| r.step_ns_median as f64).collect();
        let med = median(&mut v);
        let fast = stepped
            .iter()
            .min_by_key(|r| (r.step_ns_median, r.rank))
            .unwrap();
        let slow = stepped
            .iter()
            .max_by_key(|r| (r.step_ns_median, -r.rank))
            .unwrap();
        StepSpread {
            median_ns: med as i64,
            fastest_rank: fast.rank,
            fastest_ns: fast.step_ns_median,
            slowest_rank: slow.rank,
            slowest_ns: slow.step_ns_median,
            spread_pct: if med > 0.0 {
                100.0 * (slow.step_ns_median - fast.step_ns_median) as f64 / med
            } else {
                0.0
            },
        }
    })
}

/// Each rank's steady-state idle time by cause, from the `idle` query.
fn idle_by_rank(
    e: &mut dyn Sql,
    job: &str,
) -> Result<BTreeMap<i64, Vec<(String, i64)>>, FleetError> {
    let mut idle: BTreeMap<i64, Vec<(String, i64)>> = BTreeMap::new();
    for r in run(e, "idle", job, "0")? {
        idle.entry(int(&r, "rank"))
            .or_default()
            .push((text(&r, "cause"), int(&r, "ns")));
    }
    Ok(idle)
}

/// The straggler named by the first of the `straggler` query's rows, if it is one.
fn find_straggler(
    ranks: &[Rank],
    idle: &BTreeMap<i64, Vec<(String, i64)>>,
    last: &[Row],
    collectives: i64,
) -> Option<Straggler> {
    // The loop's length: the median rank's steps x median step.
    let loop_ns = {
        let mut v: Vec<f64> = ranks
            .iter()
            .filter(|r| r.steps > 0)
            .map(|r| (r.steps * r.step_ns_median) as f64)
            .collect();
        median(&mut v) as i64
    };
    last.first().and_then(|top| {
        let rank = int(top, "rank");
        let times = int(top, "times_last");
        let share = 100.0 * times as f64 / collectives.max(1) as f64;
        let members = ranks.len().max(2);
        let waited = int(top, "others_waited_ns");
        is_straggler(share, members, waited, loop_ns).then(|| {
            let mut own: Vec<(String, i64)> = idle
                .get(&rank)
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|(c, _)| !c.starts_with("comm"))
                .collect();
            own.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            own.truncate(3);
            Straggler {
                rank,
                times_last: times,
                collectives,
                share_pct: share,
                others_waited_ns: int(top, "others_waited_ns"),
                own_idle: own,
                top_finding: ranks
                    .iter()
                    .find(|r| r.rank == rank)
                    .map_or(String::new(), |r| r.top_finding.clone()),
                others: last
                    .iter()
                    .skip(1)
                    .take(3)
                    .map(|r| (int(r, "rank"), int(r, "times_last")))
                    .collect(),
            }
        })
    })
}

/// The ranks behind on a communicator, each with where its Python was last seen.
fn ranks_behind(
    e: &mut dyn Sql,
    job: &str,
    moved: &str,
    ranks: &[Rank],
) -> Result<Vec<Behind>, FleetError> {
    let places: BTreeMap<i64, Row> = run(e, "last_place", job, "0")?
        .into_iter()
        .map(|r| (int(&r, "rank"), r))
        .collect();
    let mut behind = Vec::new();
    for r in run(e, "hang", job, moved)? {
        let rank = int(&r, "rank");
        let place = places.get(&rank);
        behind.push(Behind {
            comm: text(&r, "comm"),
            rank,
            reached: int(&r, "reached"),
            most: int(&r, "most"),
            ended: ranks
                .iter()
                .find(|x| x.rank == rank)
                .map_or(String::new(), |x| x.ended.clone()),
            last_place: place.map(|p| {
                format!(
                    "{}:{} in {}",
                    short_file(&text(p, "file")),
                    int(p, "line"),
                    text(p, "function")
                )
            }),
        });
    }
    Ok(behind)
}

/// The findings that stand out on one rank against the others', largest share first.
fn finding_outliers(
    e: &mut dyn Sql,
    job: &str,
    ranks: &[Rank],
) -> Result<Vec<Outlier>, FleetError> {
    let mut by_id: BTreeMap<String, BTreeMap<i64, f64>> = BTreeMap::new();
    for r in run(e, "findings", job, "0")? {
        by_id
            .entry(text(&r, "id"))
            .or_default()
            .insert(int(&r, "rank"), float(&r, "pct"));
    }
    let mut outliers = Vec::new();
    if ranks.len() >= 3 {
        for (id, per) in &by_id {
            for (&rank, &pct) in per {
                let mut others: Vec<f64> = ranks
                    .iter()
                    .filter(|r| r.rank != rank)
                    .map(|r| per.get(&r.rank).copied().unwrap_or(0.0))
                    .collect();
                let max = others.iter().cloned().fold(0.0, f64::max);
                let med = median(&mut others);
                if stands_out(pct, med) {
                    outliers.push(Outlier {
                        rank,
                        finding: id.clone(),
                        pct,
                        others_median_pct: med,
                        others_max_pct: max,
                    });
                }
            }
        }
        outliers.sort_by(|a, b| b.pct.total_cmp(&a.pct).then(a.rank.cmp(&b.rank)));
    }
    Ok(outliers)
}

/// The last two components of a path.
fn short_file(p: &str) -> String {
    let parts: Vec<&str> = p.rsplit('/').take(2).collect();
    parts.into_iter().rev().collect::<Vec<_>>().join("/")
}

fn ms(ns: i64) -> String {
    crate::report::units::dur(ns.max(0) as u64)
}

/// The job's verdict, most serious first: a rank that never arrived, members with no
/// trace, the straggler, a rank whose finding stands out, the step-time spread.
pub fn verdict(f: &Fleet) -> String {
    let n = f.ranks.len();
    if let Some(b) = f.behind.first() {
        let others = f.behind.iter().filter(|x| x.comm == b.comm).count();
        let mut s = format!(
            "Hang: rank {} never arrived at collective #{} of communicator {} (it stopped at #{}; the furthest rank reached #{})",
            b.rank,
            b.reached + 1,
            b.comm,
            b.reached,
            b.most
        );
        if others > 1 {
            s.push_str(&format!("; {} ranks are behind there", others));
        }
        if let Some(p) = &b.last_place {
            s.push_str(&format!("; its Python was last at {p}"));
        }
        if !b.ended.is_empty() && b.ended != "unknown" {
            s.push_str(&format!("; it ended: {}", b.ended));
        }
        return s;
    }
    if let Some(m) = f.missing.first() {
        return format!(
            "{} of the {} members of communicator {} have no trace in the dataset: the job is incomplete, and cross-rank answers cover the ranks present only",
            m.size - m.seen,
            m.size,
            m.comm
        );
    }
    if let Some(s) = &f.straggler {
        let own = match s.own_idle.first() {
            Some((cause, ns)) => format!("; its own GPU was idle most for {cause} ({})", ms(*ns)),
            None => String::new(),
        };
        let top = if s.top_finding.is_empty() {
            String::new()
        } else {
            format!("; its top finding: {}", s.top_finding)
        };
        return format!(
            "Straggler: rank {} arrived last at {} of {} collectives ({:.0}%); the other ranks waited {} for it on average{own}{top}",
            s.rank, s.times_last, s.collectives, s.share_pct, ms(s.others_waited_ns)
        );
    }
    if let Some(o) = f.outliers.first() {
        return format!(
            "Rank {} differs: {} {:.0}% of its steady state, while the other {} ranks are at most {:.0}% (median {:.1}%)",
            o.rank,
            o.finding,
            o.pct,
            n.saturating_sub(1),
            o.others_max_pct,
            o.others_median_pct
        );
    }
    match &f.step {
        Some(st) if st.spread_pct >= 10.0 => format!(
            "Step time differs by {:.0}% across {} ranks: rank {} {} against rank {} {}",
            st.spread_pct,
            n,
            st.slowest_rank,
            ms(st.slowest_ns),
            st.fastest_rank,
            ms(st.fastest_ns)
        ),
        Some(st) => format!(
            "The {n} ranks agree: step {} (spread {:.0}%), no straggler, no rank stands out",
            ms(st.median_ns),
            st.spread_pct
        ),
        None => format!("{n} processes; no steps or collectives to compare across them"),
    }
}

/// The job-level report as text.
pub fn render_text(f: &Fleet) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let helpers = match f.helpers.as_slice() {
        [] => String::new(),
        [h] => format!(
            " (and 1 process with no rank and no GPU work, a launcher or helper: pid {} on {})",
            h.pid, h.host
        ),
        hs => format!(
            " (and {} processes with no rank and no GPU work: launchers or helpers)",
            hs.len()
        ),
    };
    let _ = writeln!(
        s,
        "gputrace fleet: job {}, {} processes{helpers}",
        f.job,
        f.ranks.len()
    );
    let _ = writeln!(s, "VERDICT: {}", f.verdict);
    let _ = writeln!(s);
    if let Some(st) = f.step.as_ref().filter(|st| st.fastest_ns == st.slowest_ns) {
        let _ = writeln!(s, "step time   {} on every rank", ms(st.median_ns));
    } else if let Some(st) = &f.step {
        let _ = writeln!(
            s,
            "step time   median {} over ranks; fastest rank {} ({}), slowest rank {} ({}); spread {:.0}%",
            ms(st.median_ns),
            st.fastest_rank,
            ms(st.fastest_ns),
            st.slowest_rank,
            ms(st.slowest_ns),
            st.spread_pct
        );
    }
    if f.collectives > 0 {
        match &f.straggler {
            Some(x) => {
                let others: Vec<String> = x
                    .others
                    .iter()
                    .map(|(r, t)| format!("rank {r} {t}"))
                    .collect();
                let _ = writeln!(
                    s,
                    "arrivals    {} collectives every member reached; last: rank {} {} times ({:.0}%){}",
                    x.collectives,
                    x.rank,
                    x.times_last,
                    x.share_pct,
                    if others.is_empty() {
                        String::new()
                    } else {
                        format!(", then {}", others.join(", "))
                    }
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "arrivals    {} collectives every member reached; the last to arrive varies (no straggler)",
                    f.collectives
                );
            }
        }
    }
    for b in &f.behind {
        let _ = writeln!(
            s,
            "behind      communicator {}: rank {} reached #{} of #{}{}",
            b.comm,
            b.rank,
            b.reached,
            b.most,
            b.last_place
                .as_ref()
                .map_or(String::new(), |p| format!(", last at {p}"))
        );
    }
    for m in &f.missing {
        let _ = writeln!(
            s,
            "missing     communicator {}: {} members, {} with a trace",
            m.comm, m.size, m.seen
        );
    }
    for o in &f.outliers {
        let _ = writeln!(
            s,
            "outlier     rank {}: {} {:.0}% (others: median {:.1}%, at most {:.0}%)",
            o.rank, o.finding, o.pct, o.others_median_pct, o.others_max_pct
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:>6} {:<16} {:>8} {:>7} {:>11} {:>6}  {:<22} top finding",
        "rank", "host", "pid", "steps", "step", "busy", "ended"
    );
    for r in &f.ranks {
        let _ = writeln!(
            s,
            "{:>6} {:<16} {:>8} {:>7} {:>11} {:>5.0}%  {:<22} {}",
            r.rank,
            truncate(&r.host, 16),
            r.pid,
            r.steps,
            if r.step_ns_median > 0 {
                ms(r.step_ns_median)
            } else {
                "-".into()
            },
            r.steady_busy_pct,
            truncate(&r.ended, 22),
            if r.top_finding.is_empty() {
                "-"
            } else {
                &r.top_finding
            }
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_placeholders() {
        assert_eq!(literal("o'neil"), "'o''neil'");
        let q = query("last_place", "j'1", "0");
        assert!(q.contains("job = 'j''1'") && !q.contains('{'), "{q}");
        let row = |host: &str, off: i64| -> Row {
            [
                ("host".to_string(), Value::from(host)),
                ("off_ns".to_string(), Value::from(off)),
            ]
            .into_iter()
            .collect()
        };
        // A host that is not off is left out; none off: no CASE at all.
        let moved = shift(&[row("n'0", 5_000_000), row("n1", 0)]);
        assert_eq!(
            moved,
            "CASE host WHEN 'n''0' THEN CAST(5000000 AS BIGINT) ELSE 0 END"
        );
        assert_eq!(shift(&[row("n1", 0)]), "0");
        for name in ["straggler", "hang"] {
            let q = query(name, "j", &moved);
            assert!(
                q.contains("start_ns - (CASE host WHEN 'n''0'") && !q.contains('{'),
                "{q}"
            );
        }
        assert!(QUERIES.iter().all(|(_, t)| !t.trim().is_empty()));
    }

    #[test]
    fn straggler_and_outlier_thresholds() {
        // Two ranks: one of them is last every time by chance alone.
        assert!(!is_straggler(60.0, 2, 0, 0));
        assert!(is_straggler(100.0, 2, 0, 0));
        assert!(is_straggler(60.0, 8, 0, 0));
        assert!(!is_straggler(20.0, 8, 0, 0));
        // Last most of the time, but the others lost 2% of the loop waiting: noise.
        assert!(!is_straggler(72.0, 8, 2, 100));
        assert!(is_straggler(72.0, 8, 5, 100));
        assert!(stands_out(40.0, 1.0));
        assert!(!stands_out(12.0, 5.0));
        assert!(!stands_out(8.0, 0.0));
    }
}
