//! `gputrace dataset`: a job's traces as a Parquet dataset partitioned Hive-style by job,
//! host, rank and window; one file per table and process; the layout's description; added
//! to, never silently replaced.

mod common;

use common::*;
use parquet::file::reader::{FileReader, SerializedFileReader};
use std::path::{Path, PathBuf};

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gputrace-dataset-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A Parquet file's column names and row count.
fn read(p: &Path) -> (Vec<String>, i64) {
    let r = SerializedFileReader::new(std::fs::File::open(p).unwrap()).unwrap();
    let md = r.metadata();
    let cols = md
        .file_metadata()
        .schema_descr()
        .columns()
        .iter()
        .map(|c| c.name().to_string())
        .collect();
    (cols, md.file_metadata().num_rows())
}

/// Every value of a string column of a file.
fn strings(p: &Path, col: &str) -> Vec<String> {
    let r = SerializedFileReader::new(std::fs::File::open(p).unwrap()).unwrap();
    r.get_row_iter(None)
        .unwrap()
        .map(|row| {
            let row = row.unwrap();
            row.get_column_iter()
                .find(|(n, _)| n.as_str() == col)
                .map(|(_, v)| v.to_string().trim_matches('"').to_string())
                .unwrap()
        })
        .collect()
}

fn job(dir: &Path, ranks: u32) -> Vec<PathBuf> {
    nccl_job(ranks, 30, 2, None)
        .iter()
        .enumerate()
        .map(|(r, b)| write(dir, &format!("rank{r}.gtrace"), b))
        .collect()
}

#[test]
fn a_job_becomes_partitions_one_per_rank() {
    let d = tmpdir("ranks");
    let traces = d.join("run-7");
    std::fs::create_dir_all(&traces).unwrap();
    job(&traces, 3);
    let ds = d.join("ds");
    let (code, _, err) = gputrace(&[
        "dataset",
        "-o",
        ds.to_str().unwrap(),
        traces.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("wrote 3 processes of job run-7"), "{err}");
    let desc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ds.join("_gputrace_dataset.json")).unwrap())
            .unwrap();
    assert_eq!(desc["version"], 1);
    assert_eq!(desc["partitioning"][2], "rank");
    let tables: Vec<String> = desc["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    assert!(
        tables.contains(&"processes".to_string()) && tables.contains(&"nccl_calls".to_string())
    );
    for r in 0..3 {
        let part = ds.join(format!(
            "nccl_calls/job=run-7/host=node{r}/rank={r}/window=0"
        ));
        let file = part.join(format!("part-{}.parquet", 4000 + r));
        let (cols, rows) = read(&file);
        assert_eq!(rows, 30, "{}", file.display());
        // The partition path holds rank and host; the file has neither.
        assert_eq!(cols[0], "pid");
        assert!(!cols.iter().any(|c| c == "rank" || c == "host"), "{cols:?}");
        assert!(cols.iter().any(|c| c == "seq") && cols.iter().any(|c| c == "comm_id"));
        // Every table has its file in every partition, empty or not.
        for t in &tables {
            let f = ds
                .join(t)
                .join(format!("job=run-7/host=node{r}/rank={r}/window=0"))
                .join(format!("part-{}.parquet", 4000 + r));
            assert!(f.exists(), "{}", f.display());
        }
        let (_, kernels) = read(&ds.join(format!(
            "kernels/job=run-7/host=node{r}/rank={r}/window=0/part-{}.parquet",
            4000 + r
        )));
        assert_eq!(kernels, 60, "30 steps of compute and all-reduce");
        // The collectives, keyed by the NCCL call: the same (comm, seq) on every rank.
        let c = ds.join(format!(
            "collectives/job=run-7/host=node{r}/rank={r}/window=0/part-{}.parquet",
            4000 + r
        ));
        assert_eq!(read(&c).1, 30);
        assert_eq!(strings(&c, "keyed_by")[0], "call");
        assert_eq!(strings(&c, "comm")[0], "0000000000c0ffee");
        let p = ds.join(format!(
            "processes/job=run-7/host=node{r}/rank={r}/window=0/part-{}.parquet",
            4000 + r
        ));
        assert_eq!(read(&p).1, 1);
        assert_eq!(strings(&p, "ended_how"), vec!["unknown".to_string()]);
        assert!(!strings(&p, "verdict")[0].is_empty());
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_dataset_grows_and_never_replaces_silently() {
    let d = tmpdir("grow");
    let a = d.join("a");
    std::fs::create_dir_all(&a).unwrap();
    let files = job(&a, 2);
    let ds = d.join("ds");
    let ds_s = ds.to_str().unwrap();
    let (code, _, err) = gputrace(&[
        "dataset",
        "-o",
        ds_s,
        "--job",
        "j1",
        files[0].to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    // Another rank of the same job, then another job: added beside.
    let (code, _, err) = gputrace(&[
        "dataset",
        "-o",
        ds_s,
        "--job",
        "j1",
        files[1].to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = gputrace(&["dataset", "-o", ds_s, "--job", "j2", a.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(ds
        .join("steps/job=j1/host=node1/rank=1/window=0/part-4001.parquet")
        .exists());
    assert!(ds
        .join("steps/job=j2/host=node0/rank=0/window=0/part-4000.parquet")
        .exists());
    // The same partition again: refused, the file left as it was; --force replaces it.
    let kept = ds.join("processes/job=j1/host=node0/rank=0/window=0/part-4000.parquet");
    let before = std::fs::metadata(&kept).unwrap().modified().unwrap();
    let (code, _, err) = gputrace(&[
        "dataset",
        "-o",
        ds_s,
        "--job",
        "j1",
        files[0].to_str().unwrap(),
    ]);
    assert_eq!(code, 7, "{err}");
    assert!(err.contains("exists"), "{err}");
    assert_eq!(
        std::fs::metadata(&kept).unwrap().modified().unwrap(),
        before
    );
    let (code, _, err) = gputrace(&[
        "dataset",
        "-o",
        ds_s,
        "--job",
        "j1",
        "--force",
        files[0].to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    // A directory that is not a dataset, with files in it, is refused; so is a dataset
    // of another layout version.
    let other = d.join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "mine").unwrap();
    let (code, _, err) = gputrace(&[
        "dataset",
        "-o",
        other.to_str().unwrap(),
        a.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("not a gputrace dataset"), "{err}");
    assert_eq!(
        std::fs::read_to_string(other.join("notes.txt")).unwrap(),
        "mine"
    );
    std::fs::write(ds.join("_gputrace_dataset.json"), r#"{"version": 9}"#).unwrap();
    let (code, _, err) = gputrace(&["dataset", "-o", ds_s, "--job", "j3", a.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("layout version 9"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn partition_values_are_escaped() {
    use gputrace_analyzer::export::parquet::{escape, Partition};
    assert_eq!(escape("node-1.cluster_a"), "node-1.cluster_a");
    assert_eq!(escape("a/b=c d"), "a%2Fb%3Dc%20d");
    assert_eq!(escape(""), "__HIVE_DEFAULT_PARTITION__");
    assert_eq!(escape(".."), "%2E%2E");
    let p = Partition {
        job: "my job".into(),
        host: "h/1".into(),
        rank: -1,
        window: 0,
        pid: 7,
    };
    assert_eq!(
        p.path(),
        PathBuf::from("job=my%20job/host=h%2F1/rank=-1/window=0")
    );
}
