//! `gputrace` on damaged and cut-short traces: the verdict states the loss, never "No
//! GPU activity recorded" when records were lost; a damaged trace exits 3 after its
//! report, a trace cut short exits 0; a directory is called a directory.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn gputrace(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run gputrace");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn example(name: &str) -> Vec<u8> {
    std::fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../examples")
            .join(name),
    )
    .unwrap()
}

struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("gputrace-damaged-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
    fn file(&self, name: &str, data: &[u8]) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, data).unwrap();
        p.to_string_lossy().into_owned()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// (start, end) of every chunk after the file header.
fn chunks(d: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = gputrace_format::HEADER_LEN;
    while at < d.len() {
        let len = u32::from_le_bytes(d[at + 4..at + 8].try_into().unwrap()) as usize;
        out.push((at, at + 20 + len));
        at += 20 + len;
    }
    out
}

/// The fix text of the report's finding `id` ("" when absent).
fn fix_of(report: &Value, id: &str) -> String {
    report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["id"] == id)
        .and_then(|f| f["fix"].as_str())
        .unwrap_or("")
        .to_string()
}

fn verdict(json: &str) -> String {
    let v: Value = serde_json::from_str(json).unwrap();
    v["verdict"].as_str().unwrap().to_string()
}

#[test]
fn a_damaged_trace_says_so_in_its_verdict_and_exit_status() {
    let dir = Dir::new("flip");
    let mut d = example("healthy.gtrace");
    let c = chunks(&d);
    // The largest events chunk: its GPU records are lost.
    let (s, e) = *c[1..].iter().max_by_key(|(s, e)| e - s).unwrap();
    d[(s + e) / 2] ^= 0x55;
    let p = dir.file("flip.gtrace", &d);
    let (code, out, err) = gputrace(&["report", "--json", &p]);
    assert_eq!(code, 3, "{err}");
    let v = verdict(&out);
    assert!(v.contains("trace damaged"), "{v}");
    assert_ne!(v, "No GPU activity recorded");
    assert!(
        err.contains("trace damaged") && err.contains(&format!("at byte {s}")),
        "{err}"
    );
    let j: Value = serde_json::from_str(&out).unwrap();
    let dmg = &j["processes"][0]["damage"];
    assert_eq!(dmg["damaged"], true);
    assert_eq!(dmg["places"][0]["offset"], s as u64);
    assert_eq!(dmg["places"][0]["kind"], "damaged");
    // The finding's fix fits damage: the file changed after it was written.
    assert!(
        fix_of(&j, "env_trace_damaged").contains("changed after it was written"),
        "{out}"
    );
    // Summary and dump report on it too, and exit the same way.
    assert_eq!(gputrace(&["summary", &p]).0, 3);
    assert_eq!(gputrace(&["dump", &p]).0, 3);
}

#[test]
fn a_damaged_trace_is_exported_as_far_as_it_reads_and_exits_3() {
    let dir = Dir::new("export");
    let mut d = example("torch-mlp.gtrace");
    let c = chunks(&d);
    let (s, e) = *c[1..].iter().max_by_key(|(s, e)| e - s).unwrap();
    d[(s + e) / 2] ^= 0x55;
    let p = dir.file("flip.gtrace", &d);
    let intact = dir.file("intact.gtrace", &example("torch-mlp.gtrace"));
    for format in ["perfetto", "chrome", "parquet"] {
        let out = dir.0.join(format!("flip.{format}"));
        let o = out.to_str().unwrap();
        let (code, _, err) = gputrace(&["export", "--format", format, "-o", o, &p]);
        assert_eq!(code, 3, "{format}: {err}");
        // What was lost is said, and what was written too.
        assert!(
            err.contains("trace damaged") && err.contains(&format!("at byte {s}")),
            "{format}: {err}"
        );
        assert!(err.contains(&format!("wrote {o}")), "{format}: {err}");
        let size = |p: &Path| match std::fs::read_dir(p) {
            Ok(rd) => rd.flatten().map(|e| e.metadata().unwrap().len()).sum(),
            Err(_) => std::fs::metadata(p).unwrap().len(),
        };
        assert!(size(&out) > 0, "{format}: nothing written");
        // The intact copy exports with 0, and more than the damaged one holds.
        let whole = dir.0.join(format!("intact.{format}"));
        let (code, _, err) = gputrace(&[
            "export",
            "--format",
            format,
            "-o",
            whole.to_str().unwrap(),
            &intact,
        ]);
        assert_eq!(code, 0, "{format}: {err}");
        assert!(!err.contains("trace damaged"), "{format}: {err}");
        assert!(size(&whole) > size(&out), "{format}");
    }
}

#[test]
fn a_cut_trace_without_gpu_records_is_not_called_idle() {
    let dir = Dir::new("cut");
    let d = example("torch-mlp.gtrace");
    let c = chunks(&d);
    // Cut inside the second events chunk: what is left has host records only.
    let cut = (c[2].0 + c[2].1) / 2;
    let p = dir.file("cut.gtrace", &d[..cut]);
    let (code, out, err) = gputrace(&["report", "--json", &p]);
    assert_eq!(code, 0, "cut short is not damage: {err}");
    let v = verdict(&out);
    assert!(
        v.starts_with("No GPU activity in what could be read: trace cut short after"),
        "{v}"
    );
    assert!(
        err.contains("cut short") && err.contains("truncated"),
        "{err}"
    );
    // The finding's fix fits a cut: let the process exit so the last chunk is written.
    let j: Value = serde_json::from_str(&out).unwrap();
    assert!(
        fix_of(&j, "env_trace_damaged").contains("flush its last chunk"),
        "{out}"
    );
    // The whole trace has no damage line and no `damage` field.
    let whole = dir.file("whole.gtrace", &d);
    let (code, out, err) = gputrace(&["report", "--json", &whole]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(!out.contains("\"damage\""));
}

#[test]
fn a_directory_or_a_flipped_version_byte_gets_the_right_message() {
    let dir = Dir::new("msgs");
    // A directory is a set of traces to `report` and `dump` (here none).
    for cmd in ["report", "dump"] {
        let (code, _, err) = gputrace(&[cmd, dir.0.to_str().unwrap()]);
        assert_ne!(code, 0);
        assert!(err.contains("no trace files"), "{cmd}: {err}");
        assert!(!err.contains("magic"), "{err}");
    }
    let mut d = example("healthy.gtrace");
    d[8] ^= 0x5a;
    let p = dir.file("ver.gtrace", &d);
    let (code, out, err) = gputrace(&["report", &p]);
    assert_eq!(code, 3, "{err}");
    assert!(!err.contains("upgrade"), "{err}");
    assert!(err.contains("header damaged"), "{err}");
    assert!(out.contains("VERDICT: Healthy"), "{out}");
}

#[test]
fn a_verdict_keeps_the_case_of_an_acronym() {
    let paths: Vec<String> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples"))
            .unwrap()
            .map(|e| e.unwrap().path().to_string_lossy().into_owned())
            .filter(|p| p.ends_with(".gtrace"))
            .collect();
    let mut args = vec!["report", "--json"];
    args.extend(paths.iter().map(|s| s.as_str()));
    let (code, out, err) = gputrace(&args);
    assert_eq!(code, 0, "{err}");
    // Unrelated traces: a verdict each, none with an acronym lowered ("gPU"); the rule
    // itself is tested in report::findings::rank.
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    let each: Vec<&str> = r["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["verdict"].as_str())
        .collect();
    assert_eq!(each.len(), paths.len(), "{each:?}");
    assert!(each.iter().any(|v| v.contains("GPU ")), "{each:?}");
    assert!(each.iter().all(|v| !v.contains("gPU")), "{each:?}");
}

/// A trace whose chunks are numbered (format 2.6) with one chunk written twice in a row
/// (a replayed write, a copy tool's repeat): the copy is not read, so the report counts
/// the kernels of the original, names the copy's offset and exits 3. Before numbered
/// chunks the copy was read as data: its kernels counted twice, silently.
#[test]
fn a_replayed_chunk_is_named_and_its_kernels_counted_once() {
    use gputrace_format as fmt;
    let dir = Dir::new("replay");
    let seed = dir.file("seed.gtrace", &example("healthy.gtrace"));
    let t = fmt::read_all(Path::new(&seed)).unwrap();
    // Its events written again, numbered, in chunks of 100 events, the last as the end;
    // the kernels of each events chunk.
    let mut w = fmt::ChunkWriter::new(Vec::new(), &t.meta).unwrap();
    let mut enc = fmt::Encoder::new();
    let mut kernels_in = vec![0];
    for e in &t.events {
        if enc.count() == 100 {
            w.write_events(&mut enc).unwrap();
            kernels_in.push(0);
        }
        enc.push(e);
        *kernels_in.last_mut().unwrap() += matches!(e, fmt::Event::Kernel(_)) as usize;
    }
    w.write_end(&mut enc).unwrap();
    let d = w.into_inner();
    let c = chunks(&d);
    assert!(c.len() > 3 && c.len() == kernels_in.len() + 1);
    // The chunk with the most kernels, repeated after itself.
    let i = (0..kernels_in.len())
        .max_by_key(|i| kernels_in[*i])
        .unwrap();
    assert!(kernels_in[i] > 0);
    let (s, e) = c[i + 1];
    let mut twice = d[..e].to_vec();
    twice.extend_from_slice(&d[s..]);
    let whole = dir.file("whole.gtrace", &d);
    let replayed = dir.file("replayed.gtrace", &twice);
    let count = |out: &str| {
        let j: Value = serde_json::from_str(out).unwrap();
        j["processes"][0]["kernels"]["count"].as_u64().unwrap()
    };
    let (code, out, err) = gputrace(&["report", "--json", &whole]);
    assert_eq!(code, 0, "{err}");
    let kernels = count(&out);
    let (code, out, err) = gputrace(&["report", "--json", &replayed]);
    assert_eq!(code, 3, "{err}");
    assert_eq!(count(&out), kernels);
    // The copy starts where the original ends; the chunk is numbered i + 1 (0: metadata).
    let line = format!("chunk at byte {e} is a copy of chunk {}", i + 1);
    assert!(err.contains(&line), "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    let dmg = &j["processes"][0]["damage"];
    assert_eq!(dmg["damaged"], true);
    assert_eq!(dmg["cut_short"], false);
    assert_eq!(dmg["places"][0]["kind"], "replayed");
    assert_eq!(dmg["places"][0]["offset"], e as u64);
    assert!(
        verdict(&out).contains("1 replayed chunk set aside"),
        "{out}"
    );
    // The text report says it too.
    let (code, text, _) = gputrace(&["report", &replayed]);
    assert_eq!(code, 3);
    assert!(text.contains("replayed chunk"), "{text}");
}
