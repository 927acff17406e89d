//! Python call sites: a Python program (tests/fakes/pystack_app.py) drives the fake
//! libcudart through ctypes, loaded as Python loads extension libraries (RTLD_LOCAL),
//! with libgputrace preloaded; the trace must name the lines of the script that made
//! each call. Run with the system `python3` and with every other CPython 3.9-3.13 this
//! machine has under pyenv (each one it has is tested; none is required but
//! `python3`, and without it the tests say so and pass).

use gputrace_analyzer::report::analyze;
use gputrace_analyzer::report::callsites::is_library;
use gputrace_analyzer::report::pysamples::HostPlace;
use gputrace_format::Event;
use gputrace_tests::{fakes_src, have_program, Cuda, Layout, Output, Trace, Wheel};
use std::collections::HashMap;
use std::path::PathBuf;

/// The interpreters to test: `python3`, then the pyenv installs of 3.9-3.13 found.
fn pythons() -> Vec<PathBuf> {
    let mut v = Vec::new();
    if have_program("python3") {
        v.push(PathBuf::from("python3"));
    } else {
        eprintln!("skipped: no python3 on this machine");
    }
    let root = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")));
    if let Some(root) = root {
        let mut found: Vec<PathBuf> = std::fs::read_dir(root.join("versions"))
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        found.sort();
        for d in found {
            let name = d.file_name().unwrap().to_string_lossy().into_owned();
            let minor = name
                .strip_prefix("3.")
                .and_then(|r| r.split('.').next())
                .and_then(|m| m.parse::<u32>().ok());
            let py = d.join("bin/python3");
            if matches!(minor, Some(9..=13)) && py.is_file() {
                v.push(py);
            }
        }
    }
    eprintln!("interpreters tested: {v:?}");
    v
}

fn script() -> PathBuf {
    fakes_src().join("pystack_app.py")
}

/// `SITE:<name>` markers of the script: name -> (line, function).
fn sites() -> HashMap<String, (u32, String)> {
    let text = std::fs::read_to_string(script()).unwrap();
    let mut out = HashMap::new();
    let mut function = String::new();
    for (i, l) in text.lines().enumerate() {
        if let Some(rest) = l.trim_start().strip_prefix("def ") {
            function = rest.split('(').next().unwrap().to_string();
        }
        if let Some((_, name)) = l.split_once("# SITE:") {
            out.insert(name.trim().to_string(), (i as u32 + 1, function.clone()));
        }
    }
    out
}

/// The line of the first call of `callee` inside `caller` in the script.
fn call_line(caller: &str, callee: &str) -> u32 {
    let text = std::fs::read_to_string(script()).unwrap();
    let mut inside = false;
    for (i, l) in text.lines().enumerate() {
        if let Some(rest) = l.trim_start().strip_prefix("def ") {
            inside = rest.starts_with(&format!("{caller}("));
        } else if inside && l.contains(&format!("{callee}(")) {
            return i as u32 + 1;
        }
    }
    panic!("no call of {callee} in {caller}");
}

/// A stack's frames as (file name, function, line), innermost first.
type Frames = Vec<(String, String, u32)>;

struct Sites {
    /// Stacks by id.
    stacks: HashMap<u32, Frames>,
    /// (tid, ts) -> stack id.
    links: HashMap<(u32, u64), u32>,
    fact: Vec<String>,
}

fn sites_of(t: &Trace) -> Sites {
    let mut s = Sites {
        stacks: HashMap::new(),
        links: HashMap::new(),
        fact: Vec::new(),
    };
    for e in t.events() {
        match e {
            Event::PyStack(st) => {
                let frames = st
                    .frames
                    .iter()
                    .map(|f| {
                        let file = t.str(f.file);
                        let base = file.rsplit('/').next().unwrap_or(file).to_string();
                        (base, t.str(f.function).to_string(), f.line)
                    })
                    .collect();
                assert!(
                    s.stacks.insert(st.id, frames).is_none(),
                    "stack {} defined twice",
                    st.id
                );
            }
            Event::CallSite(c) => {
                assert!(
                    s.stacks.contains_key(&c.stack),
                    "call site before its stack's definition: {c:?}"
                );
                s.links.insert((c.tid, c.ts), c.stack);
            }
            Event::Fact(f) if t.str(f.key) == "python_call_sites" => {
                s.fact.push(t.str(f.value).to_string())
            }
            _ => {}
        }
    }
    s
}

/// A run that went well: exit 0, the script's `done` line printed, nothing said by
/// the library, and one complete trace, returned.
fn finished(out: &Output, python: &PathBuf, done: &str) -> Trace {
    out.assert_ok();
    assert!(out.stdout.contains(done), "{python:?}: {}", out.stdout);
    assert!(
        out.gputrace_lines().is_empty(),
        "{python:?}: {:?}",
        out.gputrace_lines()
    );
    let t = out.only_trace();
    t.assert_complete();
    t
}

fn run_script(w: &Wheel, python: &PathBuf, args: &[&str]) -> Output {
    let script = script();
    let mut a = vec![script.to_str().unwrap()];
    a.extend_from_slice(args);
    w.program(python, &a).run()
}

#[test]
fn call_sites_name_the_lines_of_the_script() {
    let marks = sites();
    for python in pythons() {
        let w = Wheel::new(Cuda::V13, Layout::Flat);
        let out = run_script(&w, &python, &["sites", "3"]);
        let t = finished(&out, &python, "done 3");
        let s = sites_of(&t);
        assert_eq!(s.fact.len(), 1, "{python:?}: {:?}", s.fact);
        assert!(
            s.fact[0].starts_with("CPython 3."),
            "{python:?}: {:?}",
            s.fact
        );
        // Every API call of the script's kinds has a call site, and its innermost
        // frame is the marked line, in the marked function, in the script.
        let want = [
            ("cudaMalloc", vec!["malloc"]),
            ("cudaMemcpy", vec!["upload", "item"]),
            ("cudaStreamSynchronize", vec!["sync"]),
        ];
        for (api, names) in want {
            let calls = t.apis_named(api);
            assert!(!calls.is_empty(), "{python:?}: no {api}");
            let mut seen = Vec::new();
            for a in calls {
                let id = s
                    .links
                    .get(&(a.tid, a.start))
                    .unwrap_or_else(|| panic!("{python:?}: {api} at {} has no call site", a.start));
                let top = &s.stacks[id][0];
                assert_eq!(top.0, "pystack_app.py", "{python:?}: {top:?}");
                seen.push(top.clone());
            }
            for n in names {
                let (line, function) = &marks[n];
                assert!(
                    seen.iter().any(|f| f.2 == *line && f.1 == *function),
                    "{python:?}: {api}: no call site at {function}:{line} among {seen:?}"
                );
            }
        }
        // The outer frames: the sync is called from train_step, called from sites.
        let (line, _) = &marks["sync"];
        let sync_stack = s
            .stacks
            .values()
            .find(|f| f[0].2 == *line)
            .expect("the sync's stack");
        assert_eq!(
            sync_stack[1],
            (
                "pystack_app.py".to_string(),
                "train_step".to_string(),
                call_line("train_step", "wait_for_gpu")
            ),
            "{python:?}"
        );
        assert_eq!(sync_stack[2].1, "sites", "{python:?}");
        assert_eq!(
            sync_stack[2].2,
            call_line("sites", "train_step"),
            "{python:?}"
        );
        // Interned: the same site is one stack, however often it is called.
        let sync_stacks = s.stacks.values().filter(|f| f[0].2 == *line).count();
        assert_eq!(sync_stacks, 1, "{python:?}");
        // Launches never take a stack (none in this script), and every call site is
        // one of the script's calls.
        let api_starts: Vec<(u32, u64)> = t
            .apis()
            .iter()
            .filter(|a| {
                matches!(
                    t.str(a.name),
                    "cudaMalloc" | "cudaMemcpy" | "cudaStreamSynchronize"
                )
            })
            .map(|a| (a.tid, a.start))
            .collect();
        for k in s.links.keys() {
            assert!(
                api_starts.contains(k),
                "{python:?}: call site {k:?} is no call"
            );
        }
    }
}

/// The periodic samples of a trace: (time, tid, stack id) in time order.
fn samples_of(t: &Trace) -> Vec<(u64, u32, u32)> {
    t.events()
        .iter()
        .filter_map(|e| match e {
            Event::PySample(x) => Some((x.ts, x.tid, x.stack)),
            _ => None,
        })
        .collect()
}

#[test]
fn samples_name_what_the_host_ran_between_cuda_calls() {
    for python in pythons() {
        let w = Wheel::new(Cuda::V13, Layout::Flat);
        let out = run_script(&w, &python, &["idle", "300"]);
        let t = finished(&out, &python, "done idle");
        let s = sites_of(&t);
        let samples = samples_of(&t);
        assert!(!samples.is_empty(), "{python:?}: no Python samples");
        // The thread that made the CUDA calls is the one sampled.
        let syncs = t.apis_named("cudaStreamSynchronize");
        let caller = syncs[0].tid;
        // Between the script's two calls the thread runs only the script's own
        // functions; before the first and after the last it may be anywhere (the
        // interpreter's start-up, `print`, `threading._shutdown` at exit).
        let (from, to) = (syncs[0].end, syncs[syncs.len() - 1].start);
        let mut functions = Vec::new();
        for (ts, tid, id) in &samples {
            assert_eq!(*tid, caller, "{python:?}");
            let st = s
                .stacks
                .get(id)
                .unwrap_or_else(|| panic!("{python:?}: sample of undefined stack {id}"));
            if *ts <= from || *ts >= to {
                continue;
            }
            assert_eq!(st[0].0, "pystack_app.py", "{python:?}: {st:?}");
            functions.push(st[0].1.clone());
        }
        for f in ["busy_host", "sleepy_host"] {
            assert!(
                functions.iter().any(|x| x == f),
                "{python:?}: no sample in {f}: {functions:?}"
            );
        }
        // Sampled inside the script's idle call: the outer frame is `idle`.
        assert!(s
            .stacks
            .values()
            .any(|f| f[0].1 == "sleepy_host" && f[1].1 == "idle"));
    }
}

#[test]
fn the_setting_turns_samples_off() {
    let Some(python) = pythons().into_iter().next() else {
        return;
    };
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let out = w
        .program(&python, &[script().to_str().unwrap(), "idle", "50"])
        .env("GPUTRACE_PYSAMPLE_MS", "0")
        .run();
    out.assert_ok();
    let t = out.only_trace();
    assert!(samples_of(&t).is_empty());
    // Call sites are taken as ever.
    assert!(!sites_of(&t).links.is_empty());
}

#[test]
fn frames_changing_under_captures_never_crash_or_hang() {
    // Deep recursion, generators, threads starting and ending, and daemon threads
    // still inside calls while the interpreter finalises.
    let marks = sites();
    for python in pythons() {
        let w = Wheel::new(Cuda::V13, Layout::Flat);
        // Sampled every millisecond: the sampler reads every known thread's frames
        // while they change, and while threads end and the interpreter finalises.
        let out = w
            .program(&python, &[script().to_str().unwrap(), "stress", "20"])
            .env("GPUTRACE_PYSAMPLE_MS", "1")
            .run();
        let t = finished(&out, &python, "done stress");
        let s = sites_of(&t);
        let (gen_line, gen_fn) = &marks["gen"];
        assert!(
            s.stacks
                .values()
                .any(|f| f[0].2 == *gen_line && f[0].1 == *gen_fn && f.len() > 1),
            "{python:?}: no stack from inside the generator"
        );
        // Deep recursion: the innermost frames, no more than the depth kept.
        let (sync_line, _) = &marks["sync"];
        let deep = s
            .stacks
            .values()
            .filter(|f| f[0].2 == *sync_line)
            .map(|f| f.len())
            .max()
            .expect("stacks of the recursion");
        assert_eq!(deep, 16, "{python:?}: the default depth");
        for f in s.stacks.values() {
            assert!(!f.is_empty() && f.len() <= 16);
        }
        // The samples taken meanwhile refer to defined stacks.
        let samples = samples_of(&t);
        assert!(!samples.is_empty(), "{python:?}: no Python samples");
        for (_, _, id) in samples {
            assert!(s.stacks.contains_key(&id), "{python:?}: stack {id}");
        }
    }
}

#[test]
fn a_program_that_is_not_python_records_no_stacks_and_says_so_once() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let out = w.app(&["basic"]).run();
    out.assert_ok();
    let t = out.only_trace();
    let s = sites_of(&t);
    assert!(s.stacks.is_empty() && s.links.is_empty());
    assert_eq!(s.fact, vec!["none: not a CPython process".to_string()]);
    assert!(
        out.gputrace_lines().is_empty(),
        "{:?}",
        out.gputrace_lines()
    );
}

#[test]
fn the_setting_turns_stacks_off() {
    let Some(python) = pythons().into_iter().next() else {
        return;
    };
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let out = w
        .program(&python, &[script().to_str().unwrap(), "sites", "2"])
        .env("GPUTRACE_PYSTACK", "0")
        .run();
    out.assert_ok();
    let t = out.only_trace();
    let s = sites_of(&t);
    assert!(s.stacks.is_empty() && s.links.is_empty());
    assert_eq!(s.fact, vec!["none: off (GPUTRACE_PYSTACK=0)".to_string()]);
    // The calls themselves are recorded as ever.
    assert!(!t.apis_named("cudaStreamSynchronize").is_empty());
    assert!(!t.events().iter().any(|e| matches!(e, Event::CallSite(_))));
}

/// What the report says the host was in while a loop waited for its data loader: runs
/// `pystack_app.py loader` (a worker process makes each batch; the loop waits ten frames
/// down in a package, as in a PyTorch DataLoader) and analyses the trace.
fn loader_report(python: &PathBuf, depth: Option<&str>) -> (Vec<HostPlace>, Vec<String>) {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let mut run = w.program(python, &[script().to_str().unwrap(), "loader", "16", "40"]);
    if let Some(d) = depth {
        run = run.env("GPUTRACE_PYSTACK", d);
    }
    let out = run.run();
    out.assert_ok();
    assert!(
        out.stdout.contains("done loader"),
        "{python:?}: {}",
        out.stdout
    );
    assert_eq!(out.traces.len(), 1, "{python:?}: {:?}", out.traces);
    let t = gputrace_analyzer::Trace::load(&out.traces[0]).expect("read the trace");
    let r = analyze(std::slice::from_ref(&t));
    let text = gputrace_analyzer::render_text(&r);
    let f = r
        .findings
        .iter()
        .find(|f| f.id.as_str() == "data_starvation")
        .unwrap_or_else(|| panic!("{python:?}: no data_starvation\n{text}"));
    assert!(!f.host_was_in.is_empty(), "{python:?}: no place\n{text}");
    (f.host_was_in.clone(), f.evidence.clone())
}

#[test]
fn a_loop_waiting_for_its_loader_is_named_by_its_own_line() {
    let (line, function) = sites()["loader"].clone();
    for python in pythons() {
        let (places, evidence) = loader_report(&python, None);
        let top = &places[0];
        assert!(
            !evidence.iter().any(|l| l.contains("GPUTRACE_PYSTACK")),
            "{python:?}: {evidence:?}"
        );
        assert!(top.user_code, "{python:?}: {places:?}");
        assert_eq!(
            (top.file.rsplit('/').next(), top.line, top.function.as_str()),
            (Some("pystack_app.py"), line, function.as_str()),
            "{python:?}: {places:?}"
        );
        // Seen under the loader's wait, which is library code.
        assert!(is_library(&top.innermost.file), "{python:?}: {places:?}");
    }
}

#[test]
fn a_stack_cut_short_names_the_library_frame_nearest_the_user() {
    // Eight frames stop inside the loader: the outermost kept is its `_next_data`.
    let Some(python) = pythons().into_iter().next() else {
        return;
    };
    let (places, evidence) = loader_report(&python, Some("8"));
    let top = &places[0];
    // The report says why, and how to reach the user's line.
    assert!(
        evidence
            .iter()
            .any(|l| l.starts_with("the stacks kept 8 frames")
                && l.contains("(fakeloader.py)")
                && l.contains("GPUTRACE_PYSTACK=16")),
        "{evidence:?}"
    );
    assert!(!top.user_code, "{places:?}");
    assert!(
        top.file.ends_with("/site-packages/fakeloader.py"),
        "{places:?}"
    );
    assert_eq!(top.function, "_next_data", "{places:?}");
}

#[test]
fn a_stall_report_gives_the_python_stack_of_the_waiting_thread() {
    let marks = sites();
    for python in pythons() {
        let w = Wheel::new(Cuda::V13, Layout::Flat);
        let marker = w.dir.path().join("stuck");
        let script = script();
        let child = w
            .program(
                &python,
                &[script.to_str().unwrap(), "hang", marker.to_str().unwrap()],
            )
            .env("FAKE_CUDA_STUCK", "_Z5stuckv")
            .env("GPUTRACE_STALL_MS", "300")
            .spawn();
        // Until a stall report gives a thread in the synchronize with its stack.
        let found = gputrace_tests::poll(std::time::Duration::from_secs(60), || {
            let f = w.trace_files().into_iter().next()?;
            let t = Trace::from_data(gputrace_format::read_all(&f).ok()?);
            let waiting = t.events().iter().find_map(|e| match e {
                Event::StallThread(x)
                    if t.str(x.call) == "cudaStreamSynchronize" && x.stack != 0 =>
                {
                    Some(x.stack)
                }
                _ => None,
            })?;
            Some((t, waiting))
        });
        let (_status, _out, err) = child.kill();
        let (t, stack) = found.unwrap_or_else(|| panic!("{python:?}: no stack; {err}"));
        let s = sites_of(&t);
        let frames = s.stacks.get(&stack).expect("the stack is defined");
        let (line, function) = &marks["sync"];
        assert_eq!(
            (frames[0].0.as_str(), frames[0].2, &frames[0].1),
            ("pystack_app.py", *line, function),
            "{python:?}: {frames:?}"
        );
        assert!(
            frames.iter().any(|f| f.1 == "hang"),
            "{python:?}: {frames:?}"
        );
    }
}

#[test]
fn the_gil_holder_and_every_python_thread_are_sampled() {
    for python in pythons() {
        let w = Wheel::new(Cuda::V13, Layout::Flat);
        let out = run_script(&w, &python, &["gil", "600"]);
        let t = finished(&out, &python, "done gil");
        let hog: u32 = out
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("hog tid "))
            .and_then(|x| x.trim().parse().ok())
            .unwrap_or_else(|| panic!("{python:?}: {}", out.stdout));
        let caller = t.apis_named("cudaStreamSynchronize")[0].tid;
        let gil: Vec<(u32, u8)> = t
            .events()
            .iter()
            .filter_map(|e| match e {
                Event::GilSample(g) => Some((g.holder, g.locked)),
                _ => None,
            })
            .collect();
        assert!(gil.len() >= 10, "{python:?}: {} GIL samples", gil.len());
        // The main thread waits for the GIL after each call: the hog holds it.
        let by_hog = gil.iter().filter(|g| **g == (hog, 1)).count();
        assert!(
            by_hog * 2 >= gil.len(),
            "{python:?}: hog {hog} held it in {by_hog} of {}: {gil:?}",
            gil.len()
        );
        eprintln!(
            "{python:?}: GIL held by the hog in {by_hog} of {} samples",
            gil.len()
        );
        assert!(gil.iter().all(|g| g.0 == 0 || g.0 == hog || g.0 == caller));
        // The hog's own stack is sampled though it never calls CUDA.
        let s = sites_of(&t);
        let hog_line = sites()["hog"].0;
        let hog_samples = samples_of(&t)
            .into_iter()
            .filter(|x| x.1 == hog)
            .filter(|x| {
                s.stacks
                    .get(&x.2)
                    .is_some_and(|st| st[0].1 == "hog" && st[0].2 == hog_line)
            })
            .count();
        assert!(hog_samples > 0, "{python:?}: no sample of the hog's line");
        // Its CPU time at the thread period, and the main thread's wait (a futex).
        let hog_cpu = t
            .events()
            .iter()
            .filter(|e| matches!(e, Event::ThreadCpu(x) if x.tid == hog))
            .count();
        assert!(
            hog_cpu >= 10,
            "{python:?}: {hog_cpu} CPU samples of the hog"
        );
        let futex = t
            .events()
            .iter()
            .filter(|e| matches!(e, Event::TaskWait(x) if x.tid == caller && x.syscall == 202))
            .count();
        assert!(futex > 0, "{python:?}: the main thread's GIL wait not seen");
        // The report puts the main thread's blocked time on the hog, at its line.
        let at = gputrace_analyzer::Trace::load(&out.traces[0]).expect("read the trace");
        let r = analyze(std::slice::from_ref(&at));
        let h = r.processes[0].host_cpu.as_ref().expect("host samples");
        assert_eq!(
            h.gil_holders.first().map(|x| x.tid),
            Some(hog),
            "{python:?}: {}",
            gputrace_analyzer::render_text(&r)
        );
        assert!(
            h.python_of_contender
                .iter()
                .take(2)
                .any(|p| p.function == "hog"),
            "{python:?}: {:?}",
            h.python_of_contender
        );
    }
}
