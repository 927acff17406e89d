//! The `gputrace report` command on real trace files: the recorded examples and files
//! written here with the format crate's writer.

mod common;

use common::*;
use gputrace_analyzer::report::load::load_with_progress;
use gputrace_analyzer::Trace;
use gputrace_format::Event;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gputrace-report-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

#[test]
fn progress_loader_reads_what_the_plain_loader_reads() {
    for name in ["torch-mlp.gtrace", "jax-loop.gtrace"] {
        let p = examples().join(name);
        if !p.exists() {
            continue;
        }
        let a = Trace::load(&p).unwrap();
        let mut calls = 0;
        let mut last = 0;
        let b = load_with_progress(&p, |d, total| {
            calls += 1;
            assert!(d >= last && d <= total);
            last = d;
        })
        .unwrap();
        assert!(calls >= 2);
        assert_eq!(a.kernels, b.kernels);
        assert_eq!(a.apis, b.apis);
        assert_eq!(a.memcpys, b.memcpys);
        assert_eq!(a.memory, b.memory);
        assert_eq!(a.strings, b.strings);
        assert_eq!(a.stats, b.stats);
        assert_eq!(a.path, b.path);
    }
}

#[test]
fn progress_loader_on_many_chunks() {
    let dir = tmpdir("chunks");
    let b = data_starved(300);
    let p = write(&dir, "many.gtrace", &b);
    let a = Trace::load(&p).unwrap();
    assert!(a.stats.chunks > 3, "{:?}", a.stats);
    let mut seen = Vec::new();
    let c = load_with_progress(&p, |d, _| seen.push(d)).unwrap();
    assert_eq!(a.kernels, c.kernels);
    assert_eq!(a.apis, c.apis);
    assert_eq!(a.stats, c.stats);
    assert!(seen.windows(2).all(|w| w[0] <= w[1]));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn report_json_on_written_files() {
    let dir = tmpdir("json");
    let p = write(&dir, "starved.gtrace", &data_starved(20));
    let (code, out, err) = gputrace(&["report", "--json", p.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).expect("valid JSON");
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["top_finding"], "data_starvation");
    assert_eq!(v["findings"][0]["id"], "data_starvation");
    assert_eq!(v["findings"][0]["severity"], "critical");
    assert_eq!(v["processes"][0]["steps"]["count"], 19);
    assert_eq!(v["processes"][0]["path"], p.to_str().unwrap());
    let causes = v["processes"][0]["breakdown"]["causes"].as_array().unwrap();
    assert_eq!(causes[0]["cause"], "data_starvation");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn report_text_on_several_ranks() {
    let dir = tmpdir("ranks");
    let mut paths = Vec::new();
    for (i, t) in straggler_ranks(20).into_iter().enumerate() {
        // Re-encode each rank's events: rebuild them from the trace tables.
        let mut ev: Vec<Event> = t
            .strings
            .iter()
            .enumerate()
            .skip(1)
            .map(|(id, s)| Event::Str {
                id: id as u32,
                text: s.clone(),
            })
            .collect();
        ev.extend(t.devices.iter().cloned().map(Event::Device));
        ev.extend(t.clocks.iter().map(|c| Event::Clock {
            cupti_ns: c.0,
            mono_ns: c.1,
            real_ns: c.2,
        }));
        ev.extend(t.apis.iter().map(Event::Api));
        ev.extend(t.kernels.iter().map(Event::Kernel));
        ev.extend(t.memory.iter().cloned().map(Event::Memory));
        let p = dir.join(format!("rank{i}.gtrace"));
        std::fs::write(&p, encode(&ev, &t.meta)).unwrap();
        paths.push(p.to_str().unwrap().to_string());
    }
    let mut args = vec!["report"];
    args.extend(paths.iter().map(|s| s.as_str()).rev());
    let (code, out, err) = gputrace(&args);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("gputrace report: 3 traces\nVERDICT: "),
        "{out}"
    );
    assert!(
        out.lines()
            .nth(1)
            .unwrap()
            .contains("comm_straggler on rank 2"),
        "{out}"
    );
    // Processes are listed by rank whatever the order on the command line.
    let r0 = out.find("== rank 0").unwrap();
    let r2 = out.find("== rank 2").unwrap();
    assert!(r0 < r2);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn report_on_a_truncated_file_warns_and_reports() {
    let dir = tmpdir("cut");
    let b = data_starved(20);
    let bytes = encode(b.events(), &b.meta);
    let p = dir.join("cut.gtrace");
    std::fs::write(&p, &bytes[..bytes.len() - 7]).unwrap();
    let (code, out, err) = gputrace(&["report", p.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("truncated"), "{err}");
    assert!(out.contains("VERDICT:"));
    assert!(out.contains("env_trace_damaged"), "{out}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn report_refuses_what_is_not_a_trace() {
    let dir = tmpdir("bad");
    let p = dir.join("x.gtrace");
    std::fs::write(&p, b"not a trace at all").unwrap();
    let (code, _, err) = gputrace(&["report", p.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("not a gputrace trace"), "{err}");
    let (code, _, err) = gputrace(&["report", "/nonexistent/none.gtrace"]);
    assert_ne!(code, 0);
    assert!(err.contains("cannot read trace"), "{err}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn report_on_the_recorded_examples() {
    let p = examples().join("torch-mlp.gtrace");
    if !p.exists() {
        return;
    }
    let (code, out, err) = gputrace(&["report", "--json", p.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let proc0 = &v["processes"][0];
    // 50 steps of the MLP loop, the first ones warm-up; the 5 s start-up is not steady.
    let steps = proc0["steps"]["count"].as_u64().unwrap();
    assert!((45..=50).contains(&steps), "{steps}");
    // 46 kernels and the memset of zero_grad.
    assert_eq!(proc0["steps"]["ops_per_step"], 47);
    assert!(proc0["startup"]["wall_ns"].as_u64().unwrap() > 4_000_000_000);
    // The loop synchronises twice per step: that is what it waits for.
    assert_eq!(v["top_finding"], "implicit_sync");
}

/// `gputrace` with extra environment variables, as (exit code, stdout, stderr).
fn gputrace_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run gputrace");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn dump_into_a_pipe_closed_early_ends_quietly() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let dir = tmpdir("pipe");
    let p = write(&dir, "big.gtrace", &data_starved(600));
    let p = p.to_str().unwrap();
    // Far more than a pipe holds, so the dump is still writing when the pipe closes.
    let (code, all, err) = gputrace(&["dump", p]);
    assert_eq!(code, 0, "{err}");
    assert!(all.len() > 512 << 10, "{}", all.len());
    let mut child = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(["dump", p])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert!(first.starts_with("{\""), "{first}");
    // What `| head -1` does: read a line, close the pipe.
    drop(out);
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&o.stderr), "");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn user_errors_are_short_and_never_show_a_backtrace() {
    let dir = tmpdir("errors");
    let junk = dir.join("junk.gtrace");
    std::fs::write(&junk, b"not a trace at all").unwrap();
    let (d, j) = (dir.to_str().unwrap(), junk.to_str().unwrap());
    let missing = "/nonexistent/none.gtrace";
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let e = empty.to_str().unwrap();
    let cases: [(&[&str], &str, &str); 6] = [
        (&["report", missing], missing, "no such file"),
        (&["dump", missing], missing, "no such file"),
        (&["summary", missing], missing, "no such file"),
        (&["report", e], e, "no trace files"),
        // A directory stands for its traces, as for report: here one that is not one.
        (&["dump", d], j, "not a gputrace trace"),
        (&["summary", j], j, "not a gputrace trace"),
    ];
    for (args, path, why) in cases {
        let (code, out, err) = gputrace_env(
            args,
            &[("RUST_BACKTRACE", "full"), ("RUST_LIB_BACKTRACE", "1")],
        );
        assert_eq!(code, 1, "{args:?}: {err}");
        assert_eq!(out, "", "{args:?}");
        let lines: Vec<&str> = err.lines().collect();
        assert!((1..=2).contains(&lines.len()), "{args:?}: {err}");
        assert!(lines.iter().all(|l| l.starts_with("gputrace: ")), "{err}");
        assert!(lines[0].contains("cannot read trace"), "{err}");
        assert!(lines[0].contains(why), "{args:?}: {err}");
        // The file is named once, on the first line.
        assert_eq!(lines[0].matches(path).count(), 1, "{err}");
        assert!(!err.to_lowercase().contains("backtrace"), "{err}");
        assert!(!err.contains("Caused by"), "{err}");
    }
    // A wrong argument is a usage error.
    let (code, _, _) = gputrace(&["report"]);
    assert_eq!(code, 2);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_trace_given_twice_counts_once() {
    let dir = tmpdir("twice");
    let p = write(&dir, "one.gtrace", &data_starved(20));
    let a = p.to_str().unwrap();
    let other = dir
        .join(".")
        .join("..")
        .join(dir.file_name().unwrap())
        .join("one.gtrace");
    let b = other.to_str().unwrap();
    let (code, out, err) = gputrace(&["report", a, a, b]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("gputrace report: 1 trace\n"), "{out}");
    assert!(err.contains("given twice: read once"), "{err}");
    assert!(err.contains("is the same file as"), "{err}");
    // A copy under another name is the same process's trace.
    let copy = dir.join("copy.gtrace");
    let mut b2 = data_starved(20);
    b2.meta.start_real_ns = 1_796_225_776_000_000_000;
    let orig = write(&dir, "orig.gtrace", &b2);
    std::fs::copy(&orig, &copy).unwrap();
    let (code, out, err) = gputrace(&["report", orig.to_str().unwrap(), copy.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("gputrace report: 1 trace\n"), "{out}");
    assert!(err.contains("is a copy of"), "{err}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn unrelated_traces_are_said_to_be_unrelated() {
    let dir = tmpdir("unrelated");
    let a = data_starved(20);
    let mut b = data_starved(20);
    b.meta.host = "other-node".into();
    b.meta.pid = 77;
    let pa = write(&dir, "a.gtrace", &a);
    let pb = write(&dir, "b.gtrace", &b);
    let (pa, pb) = (pa.to_str().unwrap(), pb.to_str().unwrap());
    let (code, out, err) = gputrace(&["report", pa, pb]);
    assert_eq!(code, 0, "{err}");
    let third = out.lines().nth(2).unwrap();
    assert!(
        third.starts_with("NOTE: these 2 traces do not look like the ranks of one job"),
        "{out}"
    );
    assert!(!out.contains("== ranks:"), "{out}");
    let (code, out, err) = gputrace(&["report", "--json", pa, pb]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["trace_set"]["one_job"], false);
    assert_eq!(v["trace_set"]["reasons"][0]["id"], "hosts_without_ranks");
    assert!(v["cluster"].is_null());
    // A verdict each, not one for both: the report's only lists them.
    assert!(v["top_finding"].is_null(), "{out}");
    let verdict = v["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("2 processes that are not one job's ranks"),
        "{verdict}"
    );
    for p in v["processes"].as_array().unwrap() {
        assert_eq!(p["top_finding"], "data_starvation", "{p}");
        let own = p["verdict"].as_str().unwrap();
        assert!(own.contains("data_starvation"), "{own}");
        assert!(verdict.contains(&format!("{} data_starvation", p["label"].as_str().unwrap())));
    }
    // The same traces as one job (same host, so they may be): one verdict, none each.
    let mut c = data_starved(20);
    c.meta.pid = 78;
    let pc = write(&dir, "c.gtrace", &c);
    let (_, out, _) = gputrace(&["report", "--json", pa, pc.to_str().unwrap()]);
    let v: Value = serde_json::from_str(&out).unwrap();
    if v["trace_set"]["one_job"] != false {
        assert!(v["processes"][0].get("verdict").is_none(), "{out}");
        assert!(!v["verdict"].as_str().unwrap().contains("not one job's"));
    }
    // One trace: no such field.
    let (_, out, _) = gputrace(&["report", "--json", pa]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(v.get("trace_set").is_none());
    std::fs::remove_dir_all(dir).ok();
}

/// Two traces joined into one file (`cat a.gtrace b.gtrace`): the second trace's events
/// are not read as the first's. The first reads as it does alone (same report), the
/// command says where the second starts and exits as for damage; a trace joined to a
/// different one does not take its kernels.
#[test]
fn joined_traces_are_not_mixed() {
    let d = tmpdir("joined");
    let a = std::fs::read(examples().join("healthy.gtrace")).unwrap();
    let b = std::fs::read(examples().join("pageable_memcpy.gtrace")).unwrap();
    for (name, second) in [("twice", &a), ("mixed", &b)] {
        let p = d.join(format!("{name}.gtrace"));
        std::fs::write(&p, [a.as_slice(), second.as_slice()].concat()).unwrap();
        let alone = Trace::load(&examples().join("healthy.gtrace")).unwrap();
        let joined = Trace::load(&p).unwrap();
        assert_eq!(joined.stats.joined_at, Some(a.len() as u64), "{name}");
        assert_eq!(joined.kernels.len(), alone.kernels.len(), "{name}");
        let (code, out, err) = gputrace(&["report", "--json", p.to_str().unwrap()]);
        assert_eq!(code, 3, "{name}: {err}");
        assert!(
            err.contains(&format!("second trace's header stands at byte {}", a.len())),
            "{name}: {err}"
        );
        let (code1, out1, _) = gputrace(&[
            "report",
            "--json",
            examples().join("healthy.gtrace").to_str().unwrap(),
        ]);
        assert_eq!(code1, 0);
        let (j, j1): (Value, Value) = (
            serde_json::from_str(&out).unwrap(),
            serde_json::from_str(&out1).unwrap(),
        );
        let ids = |v: &Value| -> Vec<String> {
            let f = v["findings"].as_array().unwrap();
            f.iter()
                .map(|x| x["id"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(
            ids(&j),
            [ids(&j1), vec!["env_trace_damaged".to_string()]].concat(),
            "{name}"
        );
        let (v, v1) = (
            j["verdict"].as_str().unwrap(),
            j1["verdict"].as_str().unwrap(),
        );
        assert!(v.starts_with(v1), "{name}: {v}");
        assert!(v.contains("second trace joined"), "{name}: {v}");
    }
}

#[test]
fn attach_to_a_pid_that_does_not_exist_says_so() {
    // Above the highest pid the kernel hands out: no such process, ever.
    let max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4_194_304);
    let pid = (max + 1).to_string();
    let (code, out, err) = gputrace(&["attach", &pid]);
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.starts_with(&format!("gputrace: no process with pid {pid}\n")),
        "{err}"
    );
    assert!(err.contains("check the PID"), "{err}");
    assert!(!err.contains("socket"), "{err}");
}

#[test]
fn attach_to_a_process_without_the_library_says_why_it_cannot_load_it() {
    let mut child = Command::new("sleep")
        .arg("30")
        .env_remove("LD_PRELOAD")
        .spawn()
        .expect("start sleep");
    let pid = child.id().to_string();
    // By default the library is loaded into it, but `sleep` has no CUDA.
    let (code, _, err) = gputrace(&["attach", &pid]);
    // With --no-load, nothing is tried: how to start it instead.
    let (code2, _, err2) = gputrace(&["attach", &pid, "--no-load"]);
    let alive = std::fs::metadata(format!("/proc/{pid}")).is_ok();
    let _ = child.kill();
    let _ = child.wait();
    assert!(alive, "the process must be left running");
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "cannot load libgputrace.so into pid {pid}: pid {pid} has no CUDA library loaded"
        )),
        "{err}"
    );
    assert!(err.contains("first CUDA call"), "{err}");
    assert_eq!(code2, 1, "{err2}");
    assert!(
        err2.contains(&format!(
            "pid {pid} does not have libgputrace.so loaded, and --no-load says not to load it"
        )),
        "{err2}"
    );
    assert!(
        err2.contains("gputrace run --dormant") && err2.contains("GPUTRACE_MODE=dormant"),
        "{err2}"
    );
    assert!(!err2.contains("no process with pid"), "{err2}");
}

#[test]
fn top_level_help_lists_one_line_per_command() {
    let (code, out, err) = gputrace(&["--help"]);
    assert_eq!(code, 0, "{err}");
    let list: Vec<&str> = out
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    let names: Vec<&str> = list
        .iter()
        .map(|l| l.split_whitespace().next().unwrap_or(""))
        .collect();
    // `fleet` is there when built with its feature (DataFusion).
    let mut want = vec![
        "run", "summary", "report", "dump", "diff", "export", "dataset",
    ];
    if cfg!(feature = "fleet") {
        want.push("fleet");
    }
    want.extend(["doctor", "attach", "help"]);
    assert_eq!(names, want, "{out}");
    for l in &list {
        // Two-space indent, the name, its one-line description; nothing continues on
        // the next line (a continuation would be a line of its own above).
        assert!(l.starts_with("  ") && !l.starts_with("   "), "{l:?}");
        assert!(l.split_whitespace().count() > 1, "no description: {l:?}");
        assert!(l.len() <= 100, "too long for one line: {l:?}");
    }
    // The longer text is in each command's own help.
    let (code, out, _) = gputrace(&["report", "--help"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("Several traces are analysed together"),
        "{out}"
    );
    assert!(out.contains("docs/json-schema.md"), "{out}");
    assert!(!out.contains("README.md"), "{out}");
}

#[test]
fn with_json_stdout_is_one_json_document_even_on_failure() {
    let dir = tmpdir("json-errors");
    let missing = dir.join("missing.gtrace");
    let missing = missing.to_str().unwrap();
    // A command that fails, and an argument clap refuses: the error as JSON on stdout,
    // with the exit status it would have anyway; the message still on stderr.
    for (args, want) in [
        (vec!["report", "--json", missing], 1),
        (vec!["summary", "--json", missing], 1),
        (vec!["report", "--json", "--no-such-flag", missing], 2),
    ] {
        let (code, out, err) = gputrace(&args);
        assert_eq!(code, want, "{args:?}: {err}");
        let v: Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out:?}"));
        assert_eq!(v["error"]["exit_code"], want, "{out}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(
            !msg.is_empty() && err.contains(msg.split(':').next().unwrap()),
            "{msg} / {err}"
        );
    }
    // Without --json, nothing on stdout.
    let (code, out, _) = gputrace(&["report", missing]);
    assert_eq!((code, out.as_str()), (1, ""));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn version_names_the_commit_and_its_date() {
    let (code, out, _) = gputrace(&["--version"]);
    assert_eq!(code, 0);
    // "gputrace 0.1.0 (0123456789ab 2026-12-06)", or "(unknown unknown)" outside git.
    let inner = out
        .trim()
        .split_once(" (")
        .and_then(|(_, r)| r.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{out}"));
    let (commit, date) = inner.split_once(' ').unwrap_or_else(|| panic!("{out}"));
    assert!(
        commit == "unknown"
            || (commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit())),
        "{out}"
    );
    assert!(
        date == "unknown" || (date.len() == 10 && date.as_bytes()[4] == b'-'),
        "{out}"
    );
}

#[test]
fn dump_takes_what_report_takes() {
    let dir = examples().join("implicit_sync");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "gtrace"))
        .collect();
    files.sort();
    assert!(files.len() >= 2, "{files:?}");
    let (code, all, err) = gputrace(&["dump", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    // The directory: its traces one after the other, as each alone.
    let mut each = String::new();
    for f in &files {
        let (code, out, err) = gputrace(&["dump", f.to_str().unwrap()]);
        assert_eq!(code, 0, "{err}");
        assert!(!out.is_empty());
        each.push_str(&out);
    }
    assert_eq!(all, each);
    let names: Vec<&str> = files.iter().map(|f| f.to_str().unwrap()).collect();
    let (code, listed, _) = gputrace(&["dump", names[0], names[1]]);
    assert_eq!(code, 0);
    assert!(listed.len() > all.len() / 4 && listed.lines().count() > 10);
}

#[test]
fn colour_adds_escapes_and_nothing_else() {
    use gputrace_analyzer::report::render::colour;
    let dir = examples().join("train");
    let traces: Vec<Trace> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "gtrace"))
        .map(|p| Trace::load(&p).unwrap())
        .collect();
    let text = gputrace_analyzer::render_text(&gputrace_analyzer::analyze(&traces));
    let c = colour(&text);
    assert!(
        c.contains("\x1b[1;31mCRITICAL\x1b[0m data_starvation"),
        "{c}"
    );
    assert!(c.contains("\x1b[33mWARN\x1b[0m"), "{c}");
    assert!(
        c.starts_with("gputrace report") && c.contains("\x1b[1mVERDICT:"),
        "{c}"
    );
    assert!(c.contains("\x1b[32mfix:\x1b[0m "), "{c}");
    // Without the escapes, the same text.
    let mut plain = String::new();
    let mut it = c.chars().peekable();
    while let Some(ch) = it.next() {
        if ch == '\x1b' {
            for x in it.by_ref() {
                if x == 'm' {
                    break;
                }
            }
        } else {
            plain.push(ch);
        }
    }
    assert_eq!(plain, text);
    // Not a terminal (the tests' pipe): no colour from the command.
    let (_, out, _) = gputrace(&["report", dir.to_str().unwrap()]);
    assert!(!out.contains('\x1b'));
}
