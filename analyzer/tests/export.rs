//! `gputrace export` and `gputrace diff` on synthetic traces with known answers (the
//! scenarios of tests/common: a data-starved loop idles 6022 us per step with no host
//! call, a healthy one keeps the GPU busy).

mod common;

use common::*;
use gputrace_analyzer::report::{analyze, analyze_timelines};
use gputrace_format::{self as fmt, Event};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The start of the first kernel the builder holds.
fn first_kernel_start(b: &B) -> u64 {
    b.ev.iter()
        .find_map(|e| match e {
            Event::Kernel(k) => Some(k.start),
            _ => None,
        })
        .expect("a kernel")
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gputrace-export-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn idle_pieces_add_up_to_the_breakdown_in_the_steady_state() {
    for b in [data_starved(30), healthy(30), item_every_step(30)] {
        let t = b.build();
        let (r, tls) = analyze_timelines(std::slice::from_ref(&t));
        assert_eq!(r, analyze(std::slice::from_ref(&t)), "the same report");
        let tl = &tls[0];
        let (lo, hi) = tl.steady;
        let mut by: BTreeMap<String, u64> = BTreeMap::new();
        for p in &tl.idle {
            assert!(p.end > p.start);
            let n = p.end.min(hi).saturating_sub(p.start.max(lo));
            if n > 0 {
                *by.entry(p.cause.id().to_string()).or_default() += n;
            }
        }
        let b = &r.processes[0].breakdown;
        let want: BTreeMap<String, u64> = b
            .causes
            .iter()
            .chain(&b.unattributed)
            .map(|c| (c.cause.clone(), c.ns))
            .collect();
        assert_eq!(by, want);
        assert_eq!(tl.steps.len(), r.processes[0].steps.count + 1);
    }
}

#[test]
fn diff_of_a_fix_names_the_cause_gone() {
    let d = tmpdir("diff");
    let before = write(&d, "before.gtrace", &data_starved(30));
    let after = write(&d, "after.gtrace", &healthy(30));
    let (code, out, err) = gputrace(&[
        "diff",
        "--json",
        before.to_str().unwrap(),
        after.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let summary = v["summary"].as_str().unwrap();
    assert!(summary.starts_with("step time "), "{summary}");
    assert!(summary.contains("data_starvation gone"), "{summary}");
    // Known answer: 6022 us per step with no host call, and the 5 us from the launch
    // call's return to its kernel (a 6 ms gap is not launch latency; the 5 us inside the
    // call is other_cuda_call) before, none after.
    let ds = v["causes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "data_starvation")
        .unwrap();
    let per_step = ds["before"].as_f64().unwrap();
    assert!((per_step - 6027e3).abs() < 2e3, "{per_step}");
    assert_eq!(ds["after"].as_f64().unwrap(), 0.0);
    assert!(v["findings_lost"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["id"] == "data_starvation"));
    // The step of the starved loop: 8.035 ms.
    let step = v["step"]["before"].as_f64().unwrap();
    assert!((step - 8.035e6).abs() < 0.01e6, "{step}");

    // A saved report on one side reads as the trace does.
    let (_, rep, _) = gputrace(&["report", "--json", before.to_str().unwrap()]);
    let saved = d.join("before.json");
    std::fs::write(&saved, rep).unwrap();
    let (code, out2, err) = gputrace(&[
        "diff",
        "--json",
        saved.to_str().unwrap(),
        after.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let mut v2: Value = serde_json::from_str(&out2).unwrap();
    let mut v1 = v;
    for v in [&mut v1, &mut v2] {
        v["before"]["source"] = Value::Null;
    }
    assert_eq!(v1, v2);

    // Text: the plain words first.
    let (code, text, _) = gputrace(&["diff", before.to_str().unwrap(), after.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(text.starts_with("DIFF  step time"), "{text}");
    // Not a report, not a trace.
    let junk = d.join("junk.json");
    std::fs::write(&junk, "{\"a\": 1}").unwrap();
    let (code, _, err) = gputrace(&["diff", junk.to_str().unwrap(), after.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("not a gputrace report"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn chrome_export_has_every_gpu_record_and_the_idle_causes() {
    let d = tmpdir("chrome");
    let t = write(&d, "starved.gtrace", &data_starved(30));
    let out = d.join("starved.json");
    let (code, _, err) = gputrace(&[
        "export",
        "--format",
        "chrome",
        "-o",
        out.to_str().unwrap(),
        t.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(v["distributedInfo"]["rank"], 0);
    let ev = v["traceEvents"].as_array().unwrap();
    let count = |cat: &str| {
        ev.iter()
            .filter(|e| e["cat"] == cat && e["ph"] == "X")
            .count()
    };
    assert_eq!(count("kernel"), 30 * 4);
    assert_eq!(count("cuda_runtime"), 30 * 4 + 1);
    assert_eq!(count("step"), 3 + r_steps(&t));
    let starving: f64 = ev
        .iter()
        .filter(|e| e["cat"] == "gpu_idle" && e["name"] == "data_starvation")
        .map(|e| e["dur"].as_f64().unwrap())
        .sum();
    // 6022 us per step, over the steps and the start-up.
    assert!(starving >= 29.0 * 6022.0, "{starving}");
    // Every arrow that ends starts.
    let starts: Vec<&Value> = ev
        .iter()
        .filter(|e| e["ph"] == "s")
        .map(|e| &e["id"])
        .collect();
    let ends: Vec<&Value> = ev
        .iter()
        .filter(|e| e["ph"] == "f")
        .map(|e| &e["id"])
        .collect();
    assert_eq!(ends.len(), 30 * 4);
    assert!(ends.iter().all(|id| starts.contains(id)));
    let _ = std::fs::remove_dir_all(&d);
}

fn r_steps(p: &Path) -> usize {
    let (_, out, _) = gputrace(&["report", "--json", p.to_str().unwrap()]);
    let v: Value = serde_json::from_str(&out).unwrap();
    v["processes"][0]["steps"]["count"].as_u64().unwrap() as usize
}

#[test]
fn perfetto_export_of_several_ranks_is_one_file_with_a_process_each() {
    let d = tmpdir("perfetto");
    let mut a = data_starved(10);
    a.meta.pid = 100;
    let mut b = healthy(10);
    b.meta.pid = 100;
    let pa = write(&d, "a.gtrace", &a);
    let pb = write(&d, "b.gtrace", &b);
    let out = d.join("job.pftrace");
    let (code, _, err) = gputrace(&[
        "export",
        "--format",
        "perfetto",
        "-o",
        out.to_str().unwrap(),
        pa.to_str().unwrap(),
        pb.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let bytes = std::fs::read(&out).unwrap();
    // Every packet is field 1 of the Trace message, length-delimited.
    let mut at = 0;
    let mut packets = 0;
    while at < bytes.len() {
        assert_eq!(bytes[at], 0x0a, "packet {packets} at {at}");
        at += 1;
        let (mut len, mut shift) = (0usize, 0);
        loop {
            let b = bytes[at];
            at += 1;
            len |= ((b & 0x7f) as usize) << shift;
            shift += 7;
            if b < 0x80 {
                break;
            }
        }
        at += len;
        packets += 1;
    }
    assert_eq!(at, bytes.len());
    assert!(packets > 2 * (40 + 40));
    // Two process descriptors with different pids (the second pid made unique).
    let text = String::from_utf8_lossy(&bytes);
    assert_eq!(text.matches("why idle").count(), 2);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn export_refuses_what_it_cannot_write() {
    let d = tmpdir("refuse");
    let t = write(&d, "h.gtrace", &healthy(5));
    let (code, _, err) = gputrace(&["export", "--format", "yaml", t.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = gputrace(&[
        "export",
        "--format",
        "perfetto",
        "-o",
        d.join("no/such/dir/x.pftrace").to_str().unwrap(),
        t.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.starts_with("gputrace: cannot write the output"),
        "{err}"
    );
    // Default output: beside the trace.
    let (code, _, err) = gputrace(&["export", "--format", "perfetto", t.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(d.join("h.pftrace").exists());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn export_never_overwrites_without_force() {
    let d = tmpdir("force");
    let t = write(&d, "h.gtrace", &healthy(5));
    let t = t.to_str().unwrap();
    let export = |format: &str, out: &Path, force: bool| {
        let mut args = vec!["export", "--format", format, "-o", out.to_str().unwrap()];
        if force {
            args.push("--force");
        }
        args.push(t);
        gputrace(&args)
    };
    // A file (perfetto, chrome with one trace): refused, with exit 7, and left as it was.
    for format in ["perfetto", "chrome"] {
        let out = d.join(format!("out.{format}"));
        std::fs::write(&out, b"earlier work").unwrap();
        let (code, _, err) = export(format, &out, false);
        assert_eq!(code, 7, "{format}: {err}");
        assert!(
            err.contains(&format!(
                "{} exists already: not overwritten",
                out.display()
            )),
            "{err}"
        );
        assert!(err.contains("--force"), "{err}");
        assert_eq!(std::fs::read(&out).unwrap(), b"earlier work", "{format}");
        // With --force it is replaced by the export.
        let (code, _, err) = export(format, &out, true);
        assert_eq!(code, 0, "{format}: {err}");
        assert_ne!(std::fs::read(&out).unwrap(), b"earlier work", "{format}");
        // The default output beside the trace is refused the same way.
        let (code, _, err) = gputrace(&["export", "--format", format, t]);
        assert_eq!(code, 0, "{format}: {err}");
        let (code, _, err) = gputrace(&["export", "--format", format, t]);
        assert_eq!(code, 7, "{format}: {err}");
        assert!(err.contains("exists already"), "{err}");
    }
    // A directory (parquet): an empty one is written into; one with files in it is
    // refused, its files untouched, unless --force.
    let pq = d.join("tables");
    std::fs::create_dir_all(&pq).unwrap();
    let (code, _, err) = export("parquet", &pq, false);
    assert_eq!(code, 0, "{err}");
    let kernels = pq.join("kernels.parquet");
    let before = std::fs::read(&kernels).unwrap();
    std::fs::write(&kernels, b"earlier work").unwrap();
    let (code, _, err) = export("parquet", &pq, false);
    assert_eq!(code, 7, "{err}");
    assert_eq!(std::fs::read(&kernels).unwrap(), b"earlier work");
    let (code, _, err) = export("parquet", &pq, true);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read(&kernels).unwrap(), before);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn nvml_samples_become_counters_and_a_table() {
    let d = tmpdir("nvml");
    let mut b = healthy(10);
    let t0 = first_kernel_start(&b);
    for i in 0..5u64 {
        b.ev.push(Event::GpuSample(fmt::GpuSample {
            ts: t0 + i * 10 * MS,
            device: 0,
            sm_clock_mhz: 1980 - i as u32 * 100,
            gpu_util_pct: 90,
            ..Default::default()
        }));
    }
    b.ev.push(Event::GpuEvent(fmt::GpuEvent {
        ts: t0 + 5 * MS,
        device: 0,
        kind: fmt::GPU_EVENT_XID,
        data: 79,
    }));
    let t = write(&d, "nvml.gtrace", &b);
    let chrome = d.join("nvml.json");
    let (code, _, err) = gputrace(&[
        "export",
        "--format",
        "chrome",
        "-o",
        chrome.to_str().unwrap(),
        t.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&chrome).unwrap()).unwrap();
    let ev = v["traceEvents"].as_array().unwrap();
    let clocks: Vec<i64> = ev
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"] == "GPU 0 SM clock (MHz)")
        .map(|e| e["args"]["value"].as_i64().unwrap())
        .collect();
    assert_eq!(clocks, vec![1980, 1880, 1780, 1680, 1580]);
    // Readings NVML did not give are left out.
    assert!(!ev.iter().any(|e| e["name"] == "GPU 0 power (mW)"));
    assert_eq!(ev.iter().filter(|e| e["name"] == "xid").count(), 1);
    let pf = d.join("nvml.pftrace");
    let (code, _, err) = gputrace(&[
        "export",
        "--format",
        "perfetto",
        "-o",
        pf.to_str().unwrap(),
        t.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let bytes = std::fs::read(&pf).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("GPU 0 (NVML)") && text.contains("SM clock (MHz)"));
    let pq = d.join("pq");
    let (code, _, err) = gputrace(&[
        "export",
        "--format",
        "parquet",
        "-o",
        pq.to_str().unwrap(),
        t.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(pq.join("gpu_samples.parquet").exists());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn several_traces_are_put_on_one_time_base() {
    let d = tmpdir("align");
    let clock = |b: &mut B, real_minus_cupti: u64| {
        b.ev.push(Event::Clock {
            cupti_ns: T0,
            mono_ns: 1,
            real_ns: T0 + real_minus_cupti,
        });
    };
    // The same work by the CUPTI clock; B's clock pair says its CUPTI clock is 5 s
    // behind real time, so on the common time base B's work comes 5 s later.
    let mut a = healthy(10);
    clock(&mut a, 0);
    let mut b = healthy(10);
    b.meta.host = "other".into();
    clock(&mut b, 5 * S);
    let pa = write(&d, "a.gtrace", &a);
    let pb = write(&d, "b.gtrace", &b);
    let out = d.join("job");
    let (code, _, err) = gputrace(&[
        "export",
        "--format",
        "chrome",
        "-o",
        out.to_str().unwrap(),
        pa.to_str().unwrap(),
        pb.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let mut firsts = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&out).unwrap().flatten().collect();
    files.sort_by_key(|e| e.path());
    assert_eq!(files.len(), 2);
    for f in files {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(f.path()).unwrap()).unwrap();
        let first = v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["cat"] == "kernel")
            .map(|e| e["ts"].as_f64().unwrap())
            .fold(f64::MAX, f64::min);
        firsts.push((v["baseTimeNanoseconds"].as_u64().unwrap(), first));
    }
    assert_eq!(firsts[0].0, firsts[1].0, "one job start for every file");
    let gap_us = (firsts[1].1 - firsts[0].1).abs();
    assert!((gap_us - 5e6).abs() < 1.0, "{firsts:?}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn nvtx_ranges_are_paired_in_every_format() {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let d = tmpdir("nvtx");
    let mut b = healthy(10);
    let t0 = T0 + 2 * S;
    let step = b.s("step");
    let fwd = b.s("forward");
    let mark = b.s("checkpoint");
    let n = |ts: u64, kind: u8, id: u64, text: u32| {
        Event::Nvtx(fmt::Nvtx {
            ts,
            tid: TID,
            kind,
            flags: 0,
            id,
            text,
        })
    };
    b.ev.extend([
        n(t0, fmt::NVTX_PUSH, 0, step),
        n(t0 + MS, fmt::NVTX_PUSH, 1, fwd),
        n(t0 + 2 * MS, fmt::NVTX_POP, 1, 0),
        n(t0 + 3 * MS, fmt::NVTX_MARK, 0, mark),
        n(t0 + 4 * MS, fmt::NVTX_POP, 0, 0),
        n(t0 + 5 * MS, fmt::NVTX_START, 77, step),
        n(t0 + 6 * MS, fmt::NVTX_END, 77, 0),
        // A pop whose push came before the trace: nothing to close.
        n(t0 + 7 * MS, fmt::NVTX_POP, 0, 0),
    ]);
    let t = write(&d, "nvtx.gtrace", &b);
    let run = |format: &str, out: &Path| {
        let (code, _, err) = gputrace(&[
            "export",
            "--format",
            format,
            "-o",
            out.to_str().unwrap(),
            t.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{err}");
    };
    let chrome = d.join("nvtx.json");
    run("chrome", &chrome);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&chrome).unwrap()).unwrap();
    let ph = |p: &str| {
        v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == p && e["cat"] == "user_annotation")
            .count()
    };
    assert_eq!(
        (ph("B"), ph("E"), ph("i"), ph("b"), ph("e")),
        (2, 2, 1, 1, 1)
    );
    let pq = d.join("pq");
    run("parquet", &pq);
    let r =
        SerializedFileReader::new(std::fs::File::open(pq.join("nvtx.parquet")).unwrap()).unwrap();
    // Two push/pop ranges, one start/end range, one mark.
    assert_eq!(r.metadata().file_metadata().num_rows(), 4);
    let pf = d.join("nvtx.pftrace");
    run("perfetto", &pf);
    let text = String::from_utf8_lossy(&std::fs::read(&pf).unwrap()).into_owned();
    assert!(text.contains("forward") && text.contains("checkpoint"));
    let _ = std::fs::remove_dir_all(&d);
}

/// A process trace with host samples (a thread's CPU time, a DataLoader worker's, the
/// machine's), and an environment file of its host with NVML samples of its GPU and of
/// another process on it. `pid`: the process's.
fn sampled_job(d: &Path, pid: u32, host_samples: bool) -> (PathBuf, u64) {
    let mut b = healthy(10);
    b.meta.pid = pid;
    let t0 = first_kernel_start(&b);
    if host_samples {
        let name = b.s("pt_main_thread");
        b.ev.push(Event::Thread { tid: 4242, name });
        // On a CPU 5 of 10 ms, then 15 of 10 (capped at 100).
        for (i, cpu) in [0, 5, 20].into_iter().enumerate() {
            b.ev.push(Event::ThreadCpu(fmt::ThreadCpu {
                ts: t0 + i as u64 * 10 * MS,
                tid: 4242,
                cpu_ns: cpu * MS,
                ..Default::default()
            }));
        }
        // A worker on 1.5 CPUs for 100 ms; the machine 60% busy, 10% in iowait.
        let comm = b.s("pt_data_worker");
        for (i, cpu) in [0u64, 150].into_iter().enumerate() {
            let ts = t0 + i as u64 * 100 * MS;
            b.ev.push(Event::ProcSample(fmt::ProcSample {
                ts,
                pid: 2000,
                ppid: pid,
                comm,
                threads: 3,
                cpu_ns: cpu * MS,
                ..Default::default()
            }));
            let k = i as u64;
            b.ev.push(Event::MachineSample(fmt::MachineSample {
                ts,
                busy_ns: 600 * k,
                idle_ns: 300 * k,
                iowait_ns: 100 * k,
                ..Default::default()
            }));
        }
    }
    let p = write(d, &format!("gputrace-node0-{pid}.gtrace"), &b);
    (p, t0)
}

/// A job whose thread 4242 was sampled every 10 ms: waiting in the standard library
/// under train.py:43 (3 samples), computing at train.py:25 (2), a pause in the
/// samples, then waiting again (1).
fn python_sampled_job(d: &Path) -> (PathBuf, u64) {
    let mut b = healthy(10);
    let t0 = first_kernel_start(&b);
    let name = b.s("pt_main_thread");
    b.ev.push(Event::Thread { tid: 4242, name });
    let (sel, train) = (
        b.s("/usr/lib/python3.12/selectors.py"),
        b.s("/job/train.py"),
    );
    let (select, main, step) = (b.s("select"), b.s("main"), b.s("train_step"));
    let frame = |file, function, line| fmt::PyFrame {
        file,
        function,
        line,
    };
    b.ev.push(Event::PyStack(fmt::PyStack {
        id: 1,
        frames: vec![frame(sel, select, 415), frame(train, main, 43)],
    }));
    b.ev.push(Event::PyStack(fmt::PyStack {
        id: 2,
        frames: vec![frame(train, step, 25), frame(train, main, 44)],
    }));
    for (ms, stack) in [(0, 1), (10, 1), (20, 1), (30, 2), (40, 2), (100, 1)] {
        b.ev.push(Event::PySample(fmt::PySample {
            ts: t0 + ms * MS,
            tid: 4242,
            stack,
        }));
    }
    (write(d, "gputrace-node0-1000.gtrace", &b), t0)
}

#[test]
fn python_samples_become_slices_and_a_parquet_table() {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let d = tmpdir("python-samples");
    let (p, _) = python_sampled_job(&d);
    let json = d.join("job.json");
    let (code, _, err) = gputrace(&[
        "export",
        "--format",
        "chrome",
        "-o",
        json.to_str().unwrap(),
        p.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let spans: Vec<(String, f64, f64, u64)> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "python_sample")
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["ts"].as_f64().unwrap(),
                e["dur"].as_f64().unwrap(),
                e["args"]["samples"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(spans.len(), 3, "{spans:?}");
    let t = spans[0].1;
    let us = |ms: f64| ms * 1000.0;
    // Same place merged; a new place ends the span; after the pause, one period.
    let want = [
        ("train.py:43 in main", 0.0, 30.0, 3),
        ("train.py:25 in train_step", 30.0, 20.0, 2),
        ("train.py:43 in main", 100.0, 10.0, 1),
    ];
    for (got, w) in spans.iter().zip(want) {
        assert_eq!(got.0, w.0, "{spans:?}");
        assert!((got.1 - t - us(w.1)).abs() < 1.0, "{spans:?}");
        assert!((got.2 - us(w.2)).abs() < 1.0, "{spans:?}");
        assert_eq!(got.3, w.3, "{spans:?}");
    }
    // On their own track, named for the thread.
    let python_tids: Vec<&Value> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "python_sample")
        .map(|e| &e["tid"])
        .collect();
    assert!(python_tids
        .iter()
        .all(|t| **t == *python_tids[0] && **t != 4242));
    assert!(v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["ph"] == "M"
            && e["tid"] == *python_tids[0]
            && e["args"]["name"] == "Python (sampled), thread 4242"));
    // Parquet: a row per sample, with the place and the innermost frame.
    let out = d.join("pq");
    let (code, _, err) = gputrace(&[
        "export",
        "--format",
        "parquet",
        "-o",
        out.to_str().unwrap(),
        p.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let f = std::fs::File::open(out.join("python_samples.parquet")).unwrap();
    let rows: Vec<String> = SerializedFileReader::new(f)
        .unwrap()
        .get_row_iter(None)
        .unwrap()
        .map(|r| r.unwrap().to_string())
        .collect();
    assert_eq!(rows.len(), 6, "{rows:#?}");
    let waits = rows
        .iter()
        .filter(|r| {
            r.contains("line: 43")
                && r.contains("user_code: 1")
                && r.contains("innermost_function: \"select\"")
        })
        .count();
    assert_eq!(waits, 4, "{rows:#?}");
    // Perfetto takes them too.
    let (code, _, err) = gputrace(&[
        "export",
        "--format",
        "perfetto",
        "-o",
        d.join("job.pftrace").to_str().unwrap(),
        p.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

fn environment_file(d: &Path, t0: u64) -> PathBuf {
    let mut e = B::bare();
    e.meta.kind = fmt::META_KIND_ENVIRONMENT.into();
    e.meta.pid = 999;
    let other = e.s("other_job");
    for i in 0..5u64 {
        e.ev.push(Event::GpuSample(fmt::GpuSample {
            ts: t0 + i * MS,
            device: 0,
            sm_clock_mhz: 1900 + i as u32,
            ..Default::default()
        }));
        e.ev.push(Event::GpuProcess(fmt::GpuProcess {
            ts: t0 + i * MS,
            device: 0,
            pid: 3000,
            name: other,
            sm_pct: 40,
            flags: fmt::GPU_PROC_UTIL,
            ..Default::default()
        }));
    }
    write(d, "gputrace-env-node0-999.gtrace", &e)
}

/// Counter values by name in a Chrome export.
fn chrome_counters(path: &Path) -> BTreeMap<String, Vec<f64>> {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut out: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for e in v["traceEvents"].as_array().unwrap() {
        if e["ph"] == "C" {
            let name = e["name"].as_str().unwrap().to_string();
            out.entry(name)
                .or_default()
                .push(e["args"]["value"].as_f64().unwrap());
        }
    }
    out
}

#[test]
fn host_and_environment_samples_become_chrome_counters() {
    let d = tmpdir("samples-chrome");
    let (p, t0) = sampled_job(&d, 1000, true);
    let env = environment_file(&d, t0);
    let out = d.join("job.json");
    let (code, _, err) = gputrace(&[
        "export",
        "--format",
        "chrome",
        "-o",
        out.to_str().unwrap(),
        p.to_str().unwrap(),
        env.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let c = chrome_counters(&out);
    assert_eq!(c["thread 4242 CPU %"], vec![50.0, 100.0]);
    assert_eq!(c["pid 2000 (pt_data_worker) CPU %"], vec![150.0]);
    assert_eq!(c["machine CPU busy %"], vec![60.0]);
    assert_eq!(c["machine iowait %"], vec![10.0]);
    // The environment file's samples, on the process it was given to.
    assert_eq!(
        c["GPU 0 SM clock (MHz)"],
        vec![1900.0, 1901.0, 1902.0, 1903.0, 1904.0]
    );
    assert_eq!(c["GPU 0 pid 3000 (other_job) SM %"], vec![40.0; 5]);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn gpu_counter_samples_become_chrome_counters() {
    let d = tmpdir("counters-chrome");
    let mut b = healthy(10);
    let t0 = first_kernel_start(&b);
    for i in 0..3u64 {
        b.ev.push(Event::CounterSample(fmt::CounterSample {
            start: t0 + i * MS,
            end: t0 + (i + 1) * MS,
            device: 0,
            sm_active: 9_850,
            dram: 9_000 + i as u32 * 100,
            tensor_hmma: 9_300,
            fp32_active: 120,
            source: fmt::COUNTER_SOURCE_GPM,
            ..Default::default()
        }));
    }
    let p = write(&d, "gputrace-node0-7.gtrace", &b);
    let out = d.join("job.json");
    let (code, _, err) = gputrace(&[
        "export",
        "--format",
        "chrome",
        "-o",
        out.to_str().unwrap(),
        p.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let c = chrome_counters(&out);
    // And one wide Parquet row per sample.
    {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let pq = d.join("pq");
        let (code, _, err) = gputrace(&[
            "export",
            "--format",
            "parquet",
            "-o",
            pq.to_str().unwrap(),
            p.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{err}");
        let f = std::fs::File::open(pq.join("gpu_metrics.parquet")).unwrap();
        let rows: Vec<String> = SerializedFileReader::new(f)
            .unwrap()
            .get_row_iter(None)
            .unwrap()
            .map(|r| r.unwrap().to_string())
            .collect();
        assert_eq!(rows.len(), 3, "{rows:#?}");
        for (i, r) in rows.iter().enumerate() {
            for want in [
                "source: \"gpm\"".to_string(),
                "instance: -1".into(),
                format!("dram_pct: {}", 90 + i),
                "tensor_hmma_pct: 93.0".into(),
                "occupancy_pct: -1E0".into(),
                "pcie_read_bytes: -1".into(),
            ] {
                assert!(r.contains(&want), "{want} not in {r}");
            }
        }
    }
    assert_eq!(c["GPU 0 SM active % (counters)"], vec![98.5; 3]);
    assert_eq!(c["GPU 0 DRAM % of peak (counters)"], vec![90.0, 91.0, 92.0]);
    assert_eq!(c["GPU 0 tensor HMMA % (counters)"], vec![93.0; 3]);
    assert_eq!(c["GPU 0 FP32 pipe % (counters)"], vec![1.2; 3]);
    // A metric the GPU did not give has no track.
    assert!(!c.contains_key("GPU 0 occupancy % (counters)"), "{c:?}");
    let _ = std::fs::remove_dir_all(&d);
}

/// The fields of a protobuf message: (field, varint or fixed64 value, bytes).
fn pb_fields(mut b: &[u8]) -> Vec<(u32, u64, &[u8])> {
    fn varint(b: &mut &[u8]) -> u64 {
        let (mut v, mut shift) = (0u64, 0);
        loop {
            let x = b[0];
            *b = &b[1..];
            v |= ((x & 0x7f) as u64) << shift;
            shift += 7;
            if x < 0x80 {
                return v;
            }
        }
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let key = varint(&mut b);
        let field = (key >> 3) as u32;
        match key & 7 {
            0 => out.push((field, varint(&mut b), &[][..])),
            1 => {
                let v = u64::from_le_bytes(b[..8].try_into().unwrap());
                b = &b[8..];
                out.push((field, v, &[][..]));
            }
            2 => {
                let n = varint(&mut b) as usize;
                out.push((field, 0, &b[..n]));
                b = &b[n..];
            }
            w => panic!("wire type {w}"),
        }
    }
    out
}

#[test]
fn host_and_environment_samples_become_perfetto_counter_tracks_once() {
    let d = tmpdir("samples-perfetto");
    let (a, t0) = sampled_job(&d, 1000, true);
    let (b, _) = sampled_job(&d, 1001, false);
    let env = environment_file(&d, t0);
    let out = d.join("job.pftrace");
    let (code, _, err) = gputrace(&[
        "export",
        "--format",
        "perfetto",
        "-o",
        out.to_str().unwrap(),
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        env.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let bytes = std::fs::read(&out).unwrap();
    // Tracks: uuid -> (name, parent, thread id, is a counter track).
    let mut tracks: BTreeMap<u64, (String, u64, u64, bool)> = BTreeMap::new();
    // Counter values by track uuid.
    let mut values: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for (f, _, pkt) in pb_fields(&bytes) {
        assert_eq!(f, 1);
        for (f, _, m) in pb_fields(pkt) {
            if f == 60 {
                let mut t = (String::new(), 0, 0, false);
                let mut uuid = 0;
                for (f, v, m) in pb_fields(m) {
                    match f {
                        1 => uuid = v,
                        2 => t.0 = String::from_utf8(m.to_vec()).unwrap(),
                        5 => t.1 = v,
                        4 => {
                            for (f, v, m) in pb_fields(m) {
                                match f {
                                    2 => t.2 = v,
                                    5 => t.0 = String::from_utf8(m.to_vec()).unwrap(),
                                    _ => {}
                                }
                            }
                        }
                        8 => t.3 = true,
                        _ => {}
                    }
                }
                assert!(tracks.insert(uuid, t).is_none(), "track {uuid} twice");
            }
            if f == 11 {
                let ev = pb_fields(m);
                if ev.iter().any(|x| x.0 == 9 && x.1 == 4) {
                    let uuid = ev.iter().find(|x| x.0 == 11).unwrap().1;
                    let v = match ev.iter().find(|x| x.0 == 44) {
                        Some(x) => f64::from_bits(x.1),
                        None => ev.iter().find(|x| x.0 == 30).unwrap().1 as i64 as f64,
                    };
                    values.entry(uuid).or_default().push(v);
                }
            }
        }
    }
    let named = |name: &str| -> Vec<u64> {
        tracks
            .iter()
            .filter(|(_, t)| t.0 == name && t.3)
            .map(|(u, _)| *u)
            .collect()
    };
    // The thread's CPU % is under its thread track, named as the trace names it.
    let cpu = named("CPU %");
    assert_eq!(cpu.len(), 1);
    let thread = &tracks[&tracks[&cpu[0]].1];
    assert_eq!((thread.0.as_str(), thread.2), ("pt_main_thread", 4242));
    assert_eq!(values[&cpu[0]], vec![50.0, 100.0]);
    let worker = named("pid 2000 (pt_data_worker) CPU %");
    assert_eq!(values[&worker[0]], vec![150.0]);
    assert_eq!(values[&named("machine CPU busy %")[0]], vec![60.0]);
    assert_eq!(values[&named("machine iowait %")[0]], vec![10.0]);
    // One environment file given to both processes: its samples shown once.
    let clock = named("SM clock (MHz)");
    assert_eq!(clock.len(), 1, "{tracks:?}");
    assert_eq!(
        values[&clock[0]],
        vec![1900.0, 1901.0, 1902.0, 1903.0, 1904.0]
    );
    assert_eq!(tracks[&tracks[&clock[0]].1].0, "GPU 0 (NVML)");
    let other = named("pid 3000 (other_job) SM %");
    assert_eq!(other.len(), 1);
    assert_eq!(values[&other[0]], vec![40.0; 5]);
    assert_eq!(tracks[&other[0]].1, tracks[&clock[0]].1);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn host_samples_become_a_parquet_counters_table() {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let d = tmpdir("samples-parquet");
    let (p, t0) = sampled_job(&d, 1000, true);
    let env = environment_file(&d, t0);
    let out = d.join("pq");
    let (code, _, err) = gputrace(&[
        "export",
        "--format",
        "parquet",
        "-o",
        out.to_str().unwrap(),
        p.to_str().unwrap(),
        env.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let read = |table: &str| -> Vec<String> {
        let f = std::fs::File::open(out.join(format!("{table}.parquet"))).unwrap();
        let r = SerializedFileReader::new(f).unwrap();
        r.get_row_iter(None)
            .unwrap()
            .map(|row| row.unwrap().to_string())
            .collect()
    };
    let rows = read("counters");
    let has = |needles: &[&str]| rows.iter().any(|r| needles.iter().all(|n| r.contains(n)));
    assert_eq!(rows.len(), 2 + 1 + 2 + 5, "{rows:#?}");
    assert!(
        has(&["track: \"thread\"", "id: 4242", "value: 100.0"]),
        "{rows:#?}"
    );
    assert!(has(&["pid 2000 (pt_data_worker) CPU %", "value: 150.0"]));
    assert!(has(&["machine iowait %", "value: 10.0"]));
    assert!(has(&[
        "track: \"gpu\"",
        "pid 3000 (other_job) SM %",
        "value: 40.0"
    ]));
    // The environment file's NVML samples, in their table.
    assert_eq!(read("gpu_samples").len(), 5);
    let _ = std::fs::remove_dir_all(&d);
}
