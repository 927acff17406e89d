//! `gputrace fleet`: the job-level analysis over a dataset, on generated jobs with known
//! answers: the straggler, the rank that never arrived, a member with no trace, the rank
//! whose finding stands out; and what it says of bad input.
#![cfg(feature = "fleet")]

mod common;

use common::*;
use gputrace_format::Event;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gputrace-fleet-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Writes the ranks' traces and a dataset of them (job `job`); the dataset's root.
fn dataset(d: &Path, job: &str, ranks: &[B]) -> PathBuf {
    let traces = d.join(format!("traces-{job}"));
    std::fs::create_dir_all(&traces).unwrap();
    for (i, b) in ranks.iter().enumerate() {
        write(&traces, &format!("rank{i}.gtrace"), b);
    }
    let ds = d.join("ds");
    let (code, _, err) = gputrace(&[
        "dataset",
        "-o",
        ds.to_str().unwrap(),
        "--job",
        job,
        traces.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    ds
}

fn fleet(args: &[&str]) -> (i32, Value, String, String) {
    let mut a = vec!["fleet", "--json", "--memory", "256M"];
    a.extend_from_slice(args);
    let (code, out, err) = gputrace(&a);
    let v = serde_json::from_str(&out).unwrap_or(Value::Null);
    (code, v, out, err)
}

#[test]
fn the_rank_that_arrives_last_is_the_straggler() {
    let d = tmpdir("straggler");
    // With a launcher's trace (torchrun under the preload): no rank, no GPU work.
    let mut procs = nccl_job(4, 40, 2, None);
    let mut launcher = B::bare();
    launcher.meta.pid = 3999;
    launcher.meta.host = "node0".into();
    let name = launcher.s("torchrun");
    launcher.ev.push(Event::Thread { tid: 3999, name });
    procs.push(launcher);
    let ds = dataset(&d, "j", &procs);
    let (code, v, out, err) = fleet(&[ds.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["straggler"]["rank"], 2, "{out}");
    assert_eq!(v["straggler"]["collectives"], 40, "{out}");
    assert_eq!(v["straggler"]["times_last"], 40, "{out}");
    // The others reach each all-reduce 2 ms before it: 2 ms x 40 of waiting.
    let waited = v["straggler"]["others_waited_ns"].as_i64().unwrap();
    assert!((waited - 80_000_000).abs() < 1_000_000, "{waited}");
    assert!(
        v["verdict"]
            .as_str()
            .unwrap()
            .starts_with("Straggler: rank 2 arrived last at 40 of 40 collectives (100%)"),
        "{}",
        v["verdict"]
    );
    // The launcher is said apart, not listed as rank -1.
    assert_eq!(v["ranks"].as_array().unwrap().len(), 4, "{out}");
    assert_eq!(v["helpers"].as_array().unwrap().len(), 1, "{out}");
    assert_eq!(v["helpers"][0]["pid"], 3999, "{out}");
    assert!(v["behind"].as_array().unwrap().is_empty());
    // The text says the same.
    let (code, text, _) = gputrace(&["fleet", ds.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(
        text.contains("4 processes (and 1 process with no rank and no GPU work, a launcher or helper: pid 3999 on node0)"),
        "{text}"
    );
    assert!(!text.contains("    -1 "), "{text}");
    assert!(text.contains("VERDICT: Straggler: rank 2"), "{text}");
    assert!(text.contains("last: rank 2 40 times (100%)"), "{text}");
    let _ = std::fs::remove_dir_all(&d);
}

/// `nccl_job`'s four ranks, each on its own host, rank 2 the straggler (7 ms of compute
/// against 5, 40 collectives), and the clock of host `node{skewed}` ahead by `skew` ns
/// (behind when negative).
fn skewed_job(skewed: u32, skew: i64) -> Vec<B> {
    nccl_job_skewed(4, 40, 2, None, Some((skewed, skew)))
}

#[test]
fn hosts_clocks_are_aligned_before_arrivals_are_compared() {
    let d = tmpdir("skew");
    // Host node0's clock 5 ms ahead: read as is, rank 0 would arrive last every time
    // (5 + 5 ms against rank 2's 7 ms).
    let ds = dataset(&d, "j", &skewed_job(0, 5 * MS as i64));
    let (code, v, out, err) = fleet(&[ds.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["straggler"]["rank"], 2, "{out}");
    assert_eq!(v["straggler"]["times_last"], 40, "{out}");
    let waited = v["straggler"]["others_waited_ns"].as_i64().unwrap();
    assert!((waited - 80_000_000).abs() < 1_000_000, "{waited}");
    // The straggler's own clock 3 ms behind: read as is, its arrivals (7 - 3 ms) would
    // come before the others' (5 ms) and no rank would be last twice as often as chance.
    let d2 = tmpdir("skew-behind");
    let ds2 = dataset(&d2, "j", &skewed_job(2, -3 * MS as i64));
    let (_, v2, out2, _) = fleet(&[ds2.to_str().unwrap()]);
    assert_eq!(v2["straggler"]["rank"], 2, "{out2}");
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::remove_dir_all(&d2);
}

#[test]
fn a_rank_that_never_arrived_is_named() {
    let d = tmpdir("hang");
    // Rank 3 stops 5 collectives before the others (35 of 40), with no straggler.
    let ds = dataset(&d, "j", &nccl_job(4, 40, 99, Some((3, 5))));
    let (code, v, out, err) = fleet(&[ds.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let b = &v["behind"][0];
    assert_eq!(b["rank"], 3, "{out}");
    assert_eq!(b["reached"], 35, "{out}");
    assert_eq!(b["most"], 40, "{out}");
    assert_eq!(v["behind"].as_array().unwrap().len(), 1, "{out}");
    assert!(
        v["verdict"].as_str().unwrap().starts_with(
            "Hang: rank 3 never arrived at collective #36 of communicator 0000000000c0ffee"
        ),
        "{}",
        v["verdict"]
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_collective_only_one_rank_ran_is_no_hang() {
    // Rank 0 alone ran a broadcast kernel before the loop (its own start-up): "behind" on
    // that key, the others went on with 40 all-reduces after it. The straggler stands.
    let d = tmpdir("one-rank-only");
    let mut job = nccl_job(4, 40, 2, None);
    job[0].launch(
        T0 + S,
        5 * US,
        T0 + S + 10 * US,
        100 * US,
        "ncclDevKernel_Broadcast_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
        BIG,
    );
    job[0].launch(
        T0 + S + MS,
        5 * US,
        T0 + S + MS + 10 * US,
        100 * US,
        "ncclDevKernel_Broadcast_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
        BIG,
    );
    for b in job.iter_mut().skip(1) {
        b.launch(
            T0 + S,
            5 * US,
            T0 + S + 10 * US,
            100 * US,
            "ncclDevKernel_Broadcast_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
            BIG,
        );
    }
    let ds = dataset(&d, "j", &job);
    let (code, v, out, err) = fleet(&[ds.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(v["behind"].as_array().unwrap().is_empty(), "{out}");
    assert_eq!(v["straggler"]["rank"], 2, "{out}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_member_with_no_trace_is_said() {
    let d = tmpdir("missing");
    let mut ranks = nccl_job(4, 20, 99, None);
    ranks.pop();
    let ds = dataset(&d, "j", &ranks);
    let (code, v, out, err) = fleet(&[ds.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["missing"][0]["size"], 4, "{out}");
    assert_eq!(v["missing"][0]["seen"], 3, "{out}");
    assert!(
        v["verdict"]
            .as_str()
            .unwrap()
            .starts_with("1 of the 4 members of communicator"),
        "{}",
        v["verdict"]
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_rank_whose_finding_stands_out_is_named() {
    let d = tmpdir("outlier");
    let mut ranks: Vec<B> = (0..3).map(|_| healthy(40)).collect();
    ranks.push(data_starved(40));
    for (r, b) in ranks.iter_mut().enumerate() {
        b.meta.pid = 5000 + r as u32;
        b.meta.options = vec![("RANK".into(), r.to_string())];
    }
    let ds = dataset(&d, "j", &ranks);
    let (code, v, out, err) = fleet(&[ds.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let o = &v["outliers"][0];
    assert_eq!(o["rank"], 3, "{out}");
    let top = v["ranks"][3]["top_finding"].as_str().unwrap().to_string();
    assert_eq!(o["finding"], top.as_str(), "{out}");
    assert!(o["pct"].as_f64().unwrap() >= 10.0, "{out}");
    assert!(
        v["verdict"]
            .as_str()
            .unwrap()
            .starts_with(&format!("Rank 3 differs: {top}")),
        "{}",
        v["verdict"]
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn bad_input_gets_a_clear_error() {
    let d = tmpdir("bad");
    // Not a dataset.
    let (code, _, _, err) = fleet(&[d.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("not a gputrace dataset"), "{err}");
    // Two jobs: which one must be said; an unknown one is refused with the list.
    let ds = dataset(&d, "a", &nccl_job(2, 5, 9, None));
    dataset(&d, "b", &nccl_job(2, 5, 9, None));
    let (code, _, _, err) = fleet(&[ds.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("several jobs (a, b)"), "{err}");
    let (code, _, _, err) = fleet(&[ds.to_str().unwrap(), "--job", "c"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("no job named \"c\"") && err.contains("a, b"),
        "{err}"
    );
    let (code, v, _, err) = fleet(&[ds.to_str().unwrap(), "--job", "b"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["job"], "b");
    let _ = std::fs::remove_dir_all(&d);
}
