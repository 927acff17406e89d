//! A job of several ranks for the HTML page's browser test (scripts/test-html.py), which
//! no bundled real trace is: 6 ranks of 60 steps, rank 2 the straggler. Written only when
//! asked (`GPUTRACE_FIXTURE_OUT=DIR cargo test --test html_fixture -- --ignored`); the
//! test itself checks that the job reads as 6 ranks with their steps.

mod common;

use common::*;

#[test]
#[ignore = "writes the fixture for scripts/test-html.py"]
fn write_job_fixture() {
    let Some(dir) = std::env::var_os("GPUTRACE_FIXTURE_OUT") else {
        panic!("set GPUTRACE_FIXTURE_OUT to the directory to write to");
    };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap();
    let job = nccl_job(6, 60, 2, None);
    for (r, b) in job.iter().enumerate() {
        write(&dir, &format!("rank{r}.gtrace"), b);
    }
    let (code, out, err) = gputrace(&["report", "--json", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    let procs = j["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 6, "{out}");
    assert!(procs
        .iter()
        .all(|p| p["steps"]["list"].as_array().is_some_and(|l| !l.is_empty())));
}
