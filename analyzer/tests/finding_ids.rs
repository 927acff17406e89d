//! Every finding id written in a data file is a `FindingId`, so renaming an id fails here
//! until the files that name it follow.

use gputrace_analyzer::report::FindingId;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e} (moved? update this test)", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn assert_id(v: &Value, at: &str) {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("{at}: not a string: {v}"));
    if let Err(e) = s.parse::<FindingId>() {
        panic!("{at}: {e}");
    }
}

/// The GPU workloads' expectations: `finding` (or `healthy`) and the ids in `not`.
#[test]
fn workload_expectations_name_known_ids() {
    let path = repo().join("scripts/workloads/pathology/expect.json");
    let v = read_json(&path);
    let workloads = v["workloads"]
        .as_object()
        .unwrap_or_else(|| panic!("{}: no workloads", path.display()));
    assert!(!workloads.is_empty());
    for (name, want) in workloads {
        let finding = &want["finding"];
        if finding != "healthy" {
            assert_id(finding, &format!("{name}.finding"));
        }
        for (i, id) in want["not"].as_array().into_iter().flatten().enumerate() {
            assert_id(id, &format!("{name}.not[{i}]"));
        }
    }
}

/// The golden JSON reports: every finding's id and overlaps, and the top finding.
#[test]
fn golden_reports_name_known_ids() {
    let dir = repo().join("analyzer/tests/golden");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let v = read_json(&path);
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        if !v["top_finding"].is_null() {
            assert_id(&v["top_finding"], &format!("{file}: top_finding"));
        }
        for f in v["findings"].as_array().into_iter().flatten() {
            assert_id(&f["id"], &format!("{file}: findings[].id"));
            for o in f["overlaps"].as_array().into_iter().flatten() {
                assert_id(o, &format!("{file}: overlaps"));
            }
            seen += 1;
        }
    }
    assert!(seen > 0, "no findings in {}", dir.display());
}

#[test]
fn an_unknown_id_is_refused() {
    let e = "data_starved".parse::<FindingId>().unwrap_err();
    assert_eq!(e.to_string(), "unknown finding id `data_starved`");
}
