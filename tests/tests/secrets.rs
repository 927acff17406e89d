//! Secrets kept out of traces: a command line with a password, a token, a token in an
//! environment assignment and a URL with credentials, and an unknown `GPUTRACE_*`
//! variable, through the library, `gputrace run`'s environment file, and every output of
//! the analyzer; `GPUTRACE_KEEP_SECRETS=1` keeps them where asked.

use gputrace_tests::*;
use std::path::Path;

/// The app's `basic` scenario ignores the arguments after its name.
const ARGS: &[&str] = &[
    "basic",
    "--password=hunter2",
    "--token",
    "abc123",
    "HF_TOKEN=zzz",
    "https://u:pw@example.invalid/x",
];
const FROB: (&str, &str) = ("GPUTRACE_FROB", "secretvalue");
const SECRETS: &[&str] = &["hunter2", "abc123", "zzz", "pw@", "secretvalue"];
/// Long enough not to turn up by chance in compressed or binary bytes.
const LONG_SECRETS: &[&str] = &["hunter2", "abc123", "secretvalue"];

fn leaks(what: &str, text: &str, secrets: &[&str]) -> Vec<String> {
    secrets
        .iter()
        .filter(|s| text.contains(*s))
        .map(|s| format!("{s} in {what}"))
        .collect()
}

fn bytes_contain(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The cmdline and settings a trace file stored, as one text.
fn stored(t: &Trace) -> String {
    let m = &t.data.meta;
    let opts: Vec<String> = m.options.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{} | {}", m.cmdline.join(" "), opts.join(" "))
}

/// Every file under `p` (a file or a directory), read.
fn read_all_under(p: &Path) -> Vec<(String, Vec<u8>)> {
    if p.is_file() {
        return vec![(p.display().to_string(), std::fs::read(p).unwrap())];
    }
    let mut out = Vec::new();
    for e in std::fs::read_dir(p).unwrap().flatten() {
        out.extend(read_all_under(&e.path()));
    }
    out
}

/// What the analyzer shows of `trace`: report, report --json, summary, dump, and the
/// three exports' files, with `env` in its environment.
fn analyzer_outputs(w: &Wheel, trace: &Path, env: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
    let path = trace.to_string_lossy().into_owned();
    let out_dir = w.dir.path().join(format!("exports-{}", env.len()));
    std::fs::create_dir_all(&out_dir).unwrap();
    let mut outs = Vec::new();
    let run = |args: &[&str]| {
        let mut r = w.program(gputrace_bin(), args).untraced();
        for (k, v) in env {
            r = r.env(k, v);
        }
        r.run()
    };
    for args in [
        &["report", &path][..],
        &["report", "--json", &path],
        &["summary", &path],
        &["dump", &path],
    ] {
        let o = run(args);
        assert!(
            o.status.code().is_some_and(|c| c <= 2) && !o.stdout.is_empty(),
            "gputrace {args:?}: {}\n{}",
            o.status,
            o.stderr
        );
        assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
        outs.push((
            format!("gputrace {}", args.join(" ")),
            o.stdout.into_bytes(),
        ));
    }
    for (format, name) in [
        ("perfetto", "job.pftrace"),
        ("chrome", "job.json"),
        ("parquet", "parquet"),
    ] {
        let dest = out_dir.join(name);
        let d = dest.to_string_lossy().into_owned();
        let o = run(&["export", "--format", format, "-o", &d, &path]);
        o.assert_ok();
        outs.extend(read_all_under(&dest));
    }
    outs
}

#[test]
fn the_library_redacts_what_it_stores() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let out = w.app(ARGS).env(FROB.0, FROB.1).run();
    out.assert_ok();
    // The warning names the unknown variable, never its value.
    let warn = out.gputrace_lines().join("\n");
    assert!(warn.contains("GPUTRACE_FROB"), "{warn}");
    assert!(!warn.contains("secretvalue"), "{warn}");
    let t = out.only_trace();
    t.assert_complete();
    let m = &t.data.meta;
    assert_eq!(
        m.cmdline[1..],
        [
            "basic",
            "--password=<redacted>",
            "--token",
            "<redacted>",
            "HF_TOKEN=<redacted>",
            "https://u:<redacted>@example.invalid/x",
        ]
    );
    assert!(
        m.options
            .iter()
            .any(|(k, v)| k == "GPUTRACE_FROB" && v == "<redacted>"),
        "{:?}",
        m.options
    );
    let mut wrong = leaks("the trace's metadata", &stored(&t), SECRETS);
    let file = std::fs::read(&t.data.path).unwrap();
    for s in LONG_SECRETS {
        if bytes_contain(&file, s) {
            wrong.push(format!("{s} in the trace file's bytes"));
        }
    }
    for (what, bytes) in analyzer_outputs(&w, &t.data.path, &[]) {
        wrong.extend(leaks(&what, &String::from_utf8_lossy(&bytes), SECRETS));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn keep_secrets_keeps_them_in_the_trace_and_the_analyzer_still_redacts() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let out = w
        .app(ARGS)
        .env(FROB.0, FROB.1)
        .env("GPUTRACE_KEEP_SECRETS", "1")
        .run();
    out.assert_ok();
    let t = out.only_trace();
    assert_eq!(t.data.meta.cmdline[1..], *ARGS);
    assert!(t
        .data
        .meta
        .options
        .iter()
        .any(|(k, v)| k == "GPUTRACE_KEEP_SECRETS" && v == "1"));
    // The setting keeps the command line; an unknown variable's value stays out.
    let kept = stored(&t);
    assert!(!kept.contains("secretvalue"), "{kept}");
    for s in ["hunter2", "abc123", "zzz", "pw@"] {
        assert!(kept.contains(s), "{s} not kept: {kept}");
    }
    // Such a trace, like one from before the library redacted, shows nothing to whoever
    // reads its report without the setting.
    let mut wrong = Vec::new();
    let outputs = analyzer_outputs(&w, &t.data.path, &[]);
    for (what, bytes) in &outputs {
        wrong.extend(leaks(what, &String::from_utf8_lossy(bytes), SECRETS));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let report = String::from_utf8_lossy(&outputs[0].1).into_owned();
    assert!(report.contains("--password=<redacted>"), "{report}");
    // With it, the analyzer shows what was stored.
    let shown = analyzer_outputs(&w, &t.data.path, &[("GPUTRACE_KEEP_SECRETS", "1")]);
    let report = String::from_utf8_lossy(&shown[0].1).into_owned();
    assert!(report.contains("--password=hunter2"), "{report}");
    let json = String::from_utf8_lossy(&shown[1].1).into_owned();
    assert!(json.contains("abc123"), "{json}");
}

#[test]
fn gputrace_run_redacts_the_environment_file() {
    let w = Wheel::new(Cuda::V13, Layout::Flat);
    let traces = w.traces.to_string_lossy().into_owned();
    let app = w.app.to_string_lossy().into_owned();
    let mut args = vec!["run", "-o", &traces, "--", &app];
    args.extend_from_slice(ARGS);
    let run = |keep: bool| {
        let mut r = w
            .program(gputrace_bin(), &args)
            .untraced()
            .unset("GPUTRACE_DIR")
            .env(FROB.0, FROB.1);
        if keep {
            r = r.env("GPUTRACE_KEEP_SECRETS", "1");
        }
        r.run()
    };
    let out = run(false);
    out.assert_ok();
    assert_eq!(out.traces.len(), 2, "{:?}\n{}", out.traces, out.stderr);
    let mut wrong = leaks("gputrace run's output", &out.stdout, SECRETS);
    for p in &out.traces {
        let t = Trace::read(p);
        let what = if t.data.meta.is_environment() {
            "the environment file"
        } else {
            "the process trace"
        };
        wrong.extend(leaks(what, &stored(&t), SECRETS));
        assert!(
            t.data
                .meta
                .cmdline
                .iter()
                .any(|a| a == "--password=<redacted>"),
            "{what}: {:?}",
            t.data.meta.cmdline
        );
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    for p in &out.traces {
        std::fs::remove_file(p).unwrap();
    }
    let out = run(true);
    out.assert_ok();
    let env = out
        .traces
        .iter()
        .map(|p| Trace::read(p))
        .find(|t| t.data.meta.is_environment())
        .expect("an environment file");
    assert_eq!(env.data.meta.cmdline[1..], *ARGS);
    assert!(!stored(&env).contains("secretvalue"), "{}", stored(&env));
}
