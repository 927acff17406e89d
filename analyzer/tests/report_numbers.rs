//! The text report says what `--json` says, and figures that measure the same thing
//! agree, on every bundled example (examples/*.gtrace and the example directories):
//! - each finding's time at stake and share in its heading, each row of the time
//!   breakdown, each summary and evidence line: as in the JSON (formatted here
//!   independently of the report's own formatting);
//! - a finding's time at stake equals the idle time the breakdown charges to its cause,
//!   or the text says what the rest is (busy time it would also save);
//! - the feeding thread's CPU time reads the same wherever it is given (the host line,
//!   data_starvation, cpu_bound);
//! - a call site's per-function counts add up to its calls; `cpu_bound`'s gaps are the
//!   breakdown's;
//! - times under a millisecond are in µs, never "us".

use gputrace_analyzer::model::load::{load_set, LoadOptions};
use gputrace_analyzer::report::{analyze, render_text};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A duration as the report shows it (its own rules, restated).
fn dur(ns: u64) -> String {
    let v = ns as f64;
    match ns {
        0..=999 => format!("{ns} ns"),
        1_000..=999_999 => format!("{:.1} µs", v / 1e3),
        1_000_000..=9_999_999 => format!("{:.2} ms", v / 1e6),
        10_000_000..=999_999_999 => format!("{:.1} ms", v / 1e6),
        1_000_000_000..=99_999_999_999 => format!("{:.3} s", v / 1e9),
        _ => format!("{:.1} s", v / 1e9),
    }
}

/// The text with every run of whitespace (line wraps, indents) made one space.
fn flat(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn u(v: &Value) -> u64 {
    v.as_u64()
        .or_else(|| v.as_f64().map(|f| f as u64))
        .unwrap_or_else(|| panic!("not a number: {v}"))
}

fn examples() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "gtrace")
                || (p.is_dir()
                    && std::fs::read_dir(p)
                        .unwrap()
                        .any(|e| e.unwrap().path().extension().is_some_and(|x| x == "gtrace")))
        })
        .collect();
    v.sort();
    v
}

/// Every place `needle` is followed by a duration in `text`: the durations.
fn durations_after(text: &str, needle: &str) -> Vec<String> {
    text.match_indices(needle)
        .map(|(i, _)| {
            let rest = &text[i + needle.len()..];
            let d = rest.split(' ').take(2).collect::<Vec<_>>().join(" ");
            d.trim_end_matches([',', ';', ')', '.']).to_string()
        })
        .collect()
}

fn check(path: &Path) -> usize {
    let opts = LoadOptions {
        progress: false,
        workers: 1,
    };
    let traces = load_set(&[path.to_path_buf()], &opts, &|_| {}).unwrap();
    let r = analyze(&traces);
    let text = render_text(&r);
    let j = serde_json::to_value(&r).unwrap();
    let flat_text = flat(&text);
    let name = path.display().to_string();
    let mut checked = 0;

    for (i, f) in j["findings"].as_array().unwrap().iter().enumerate() {
        let id = f["id"].as_str().unwrap();
        let stake = u(&f["at_stake_ns"]);
        let pct = f["at_stake_pct"].as_f64().unwrap();
        if stake > 0 {
            let head = format!("{}. ", i + 1);
            let line = text
                .lines()
                .find(|l| l.trim_start().starts_with(&head) && l.contains(id))
                .unwrap_or_else(|| panic!("{name}: no heading for finding {} {id}", i + 1));
            let want = format!("{} at stake, {pct:.1}% of ", dur(stake));
            assert!(line.contains(&want), "{name}: {line:?} lacks {want:?}");
            checked += 1;
        }
        for s in std::iter::once(&f["summary"]).chain(f["evidence"].as_array().unwrap()) {
            let s = flat(s.as_str().unwrap());
            assert!(
                flat_text.contains(&s),
                "{name}: {id}: not in the text: {s:?}"
            );
            checked += 1;
        }
        for site in f
            .get("call_sites")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let sum: u64 = site["api_calls"].as_array().unwrap().iter().map(u).sum();
            assert_eq!(sum, u(&site["calls"]), "{name}: {id}: {site}");
            checked += 1;
        }
    }

    for p in j["processes"].as_array().unwrap() {
        let b = &p["breakdown"];
        if p["devices"].as_array().unwrap().is_empty() {
            continue;
        }
        for c in b["causes"].as_array().unwrap() {
            let cause = c["cause"].as_str().unwrap();
            let row = format!(
                "idle: {cause} {} {:.1}%",
                dur(u(&c["ns"])),
                c["pct"].as_f64().unwrap()
            );
            assert!(flat_text.contains(&row), "{name}: no breakdown row {row:?}");
            checked += 1;
            // The finding of this cause (of this process) and the row measure the same
            // idle time: equal, or the text says what the rest of its time at stake is.
            let index = p["index"].as_u64();
            let Some(f) = j["findings"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["id"] == cause && f["process"].as_u64() == index)
            else {
                continue;
            };
            let (stake, idle) = (u(&f["at_stake_ns"]), u(&c["ns"]));
            // Time counted under comm_straggler instead (waiting for the late rank), said in
            // the finding's evidence.
            let moved = f["metrics"].get("straggler_wait_ns").map_or(0, u);
            if moved > 0 {
                assert_eq!(
                    stake + moved,
                    idle,
                    "{name}: {cause}: {stake} + {moved} moved"
                );
                let said = format!("{} of it was waiting for", dur(moved));
                assert!(flat_text.contains(&said), "{name}: no {said:?}");
                checked += 1;
                continue;
            }
            assert!(
                stake >= idle,
                "{name}: {cause}: at stake {stake} < idle {idle}"
            );
            if stake > idle {
                let note = format!(
                    "({cause}: {} at stake = {} idle above + {} of busy time",
                    dur(stake),
                    dur(idle),
                    dur(stake - idle)
                );
                assert!(flat_text.contains(&note), "{name}: no {note:?}");
            }
            if cause == "cpu_bound" {
                assert_eq!(u(&f["metrics"]["gaps"]), u(&c["gaps"]), "{name}");
            }
            checked += 1;
        }
        // The feeding thread's time on a CPU: one figure everywhere it is given.
        // With several processes' host samples the text holds each one's figures: this
        // check is for examples of one such process.
        let sampled = j["processes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p.get("host_cpu").is_some_and(|h| !h.is_null()))
            .count();
        if let Some(h) = p
            .get("host_cpu")
            .filter(|h| !h.is_null())
            .filter(|_| sampled == 1)
        {
            let on_cpu = dur(u(&h["on_cpu_ns"]));
            let runq = dur(u(&h["runq_ns"]));
            // "on a CPU or waiting for one X" (a cpu_bound of waiting for another thread)
            // gives the two together.
            let both = format!(
                "on a CPU or waiting for one {}",
                dur(u(&h["on_cpu_ns"]) + u(&h["runq_ns"]))
            );
            let flat_text = flat_text.replace(&both, "");
            assert!(
                !flat_text.contains("on a CPU or waiting for one"),
                "{name}: not {both:?}"
            );
            // ("on a CPU by thread: ..." shares it out: its own check below.)
            let seen: Vec<String> = durations_after(&flat_text, "on a CPU ")
                .into_iter()
                // ("while another thread ... was on a CPU (cpu_bound): ..." is not it.)
                .filter(|d| !d.starts_with("by thread") && !d.starts_with("(cpu_bound)"))
                .collect();
            assert!(!seen.is_empty(), "{name}: no CPU time in the text");
            // The per-thread shares add up to the same total (each rounded to its
            // printed precision: within 1% and 0.02 ms).
            if let Some(i) = flat_text.find("on a CPU by thread: ") {
                let line = &flat_text[i..];
                // Up to the next host line (the contention line also names threads).
                let end = [" CPUs available", " host blocked "]
                    .iter()
                    .filter_map(|m| line.find(m))
                    .min()
                    .unwrap_or(line.len());
                let line = &line[..end];
                let shares: f64 = line
                    .split(") ")
                    .skip(1)
                    .filter_map(|w| {
                        let mut it = w.split(' ');
                        let v: f64 = it.next()?.parse().ok()?;
                        let scale = match it.next()? {
                            "s" => 1e3,
                            "ms" => 1.0,
                            "µs" => 1e-3,
                            "ns" => 1e-6,
                            _ => return None,
                        };
                        Some(v * scale)
                    })
                    .sum();
                let total = u(&h["on_cpu_ns"]) as f64 / 1e6;
                if shares > 0.0 {
                    assert!(
                        (shares - total).abs() <= (total * 0.01).max(0.02),
                        "{name}: per-thread CPU {shares} ms vs the host's {total} ms: {line}"
                    );
                }
            }
            for d in &seen {
                assert_eq!(d, &on_cpu, "{name}: CPU time {d} vs the host's {on_cpu}");
            }
            for d in durations_after(&flat_text, "waiting for one ")
                .into_iter()
                .chain(durations_after(&flat_text, "waiting for a CPU "))
            {
                assert_eq!(d, runq, "{name}");
            }
            checked += seen.len();
        }
    }
    // The whole run, kind by kind: each kind's line under the run line (kinds of 1% of
    // the run or more, two kinds or more) gives its time and busy share as the JSON has
    // them, and its busy and idle times add up to the kind's time on its devices.
    for p in j["processes"].as_array().unwrap() {
        let kinds = p["run"]["by_kind"].as_array().cloned().unwrap_or_default();
        for k in &kinds {
            let idle: u64 = k["idle"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| u(&c["ns"]))
                .sum();
            let busy = u(&k["busy_ns"]);
            let ns = u(&k["ns"]);
            assert!(
                ns == 0 || (busy + idle).is_multiple_of(ns),
                "{name}: {}: busy {busy} + idle {idle} is no whole number of {ns}",
                k["kind"]
            );
            if kinds.len() < 2 || k["pct"].as_f64().unwrap() < 1.0 {
                continue;
            }
            let label = match k["kind"].as_str().unwrap() {
                "start_up" => "start-up".to_string(),
                "gpu_work" => "other GPU work".to_string(),
                "host_work" => "host work".to_string(),
                other => other.replace('_', " "),
            };
            let share = if busy + idle == 0 {
                0.0
            } else {
                100.0 * busy as f64 / (busy + idle) as f64
            };
            let shown = if share > 0.0 && share < 9.95 {
                format!("{share:.1}%")
            } else {
                format!("{share:.0}%")
            };
            let want = format!("{label} {}: GPU busy {shown}", dur(ns));
            assert!(flat_text.contains(&want), "{name}: no {want:?}");
            checked += 1;
        }
    }
    for (k, w) in text.split_whitespace().zip(text.split_whitespace().skip(1)) {
        let unit = w.trim_end_matches([',', ';', ')', ':']);
        assert!(
            !(unit == "us" && k.parse::<f64>().is_ok()),
            "{name}: \"{k} {w}\": microseconds are µs"
        );
    }
    checked
}

#[test]
fn text_report_agrees_with_json_on_every_bundled_example() {
    let ex = examples();
    assert!(ex.len() >= 10, "{ex:?}");
    let mut total = 0;
    for p in &ex {
        let n = check(p);
        eprintln!("{}: {n} figures checked", p.display());
        total += n;
    }
    assert!(total > 100, "{total}");
}
