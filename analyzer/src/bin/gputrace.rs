//! The `gputrace` command line.

use anyhow::Result;
use clap::{Parser, Subcommand};
use gputrace_analyzer::commands::{app, attach, doctor, hangwatch, run};
use gputrace_analyzer::export::Format;
use gputrace_analyzer::model::load::LoadOptions;
use gputrace_analyzer::recording::nvml as recorder;
use gputrace_analyzer::Error;
use gputrace_format::protocol::{self, settings};
use std::ffi::OsString;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

/// `gputrace --version`: the version, the commit and its date.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("GPUTRACE_COMMIT"),
    " ",
    env!("GPUTRACE_COMMIT_DATE"),
    ")"
);

/// Examples under `gputrace --help`.
const EXAMPLES: &str = "Examples:
  gputrace run -- python train.py            trace a job, then print what its GPU waited for
  gputrace run -o runs/a -- torchrun --nproc-per-node 8 train.py
                                             every rank's trace in runs/a, one report for the job
  gputrace report runs/a                     the report again, from the traces
  gputrace report --json runs/a | jq .verdict
  gputrace report --html a.html runs/a       the same as a page: timeline, phases, steps
  gputrace summary runs/a                    what the GPU did, per device
  gputrace diff runs/a runs/b                what changed between two runs
  gputrace export --format perfetto runs/a   a timeline for ui.perfetto.dev
  gputrace run --dormant -- python serve.py  then: gputrace attach PID --duration 10s
  gputrace doctor                            can this machine trace, and what is odd about it

Exit status: 0 done, 1 failed, 2 wrong usage, 3 a trace was damaged (the output covers what
could be read), 7 the output exists (add --force); docs/commands.md has them all.";

#[derive(Parser, Debug)]
#[command(
    name = "gputrace",
    version = VERSION,
    about = "Finds out why a GPU job is slow",
    after_help = EXAMPLES
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run a command with tracing, then report on the traces it wrote.
    #[command(
        long_about = "Run a command with tracing, then report on the traces it wrote.\n\nThe command runs with libgputrace.so preloaded; its traces go to the --out directory, and the report (or, with --summary, the per-device summary) is printed when it ends. gputrace exits with the command's exit code."
    )]
    Run {
        /// Directory for the trace files.
        #[arg(short = 'o', long = "out", default_value = protocol::DEFAULT_TRACE_DIR)]
        out: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Print the per-device summary instead of the report.
        #[arg(long)]
        summary: bool,
        /// Start the command dormant (nothing recorded until `gputrace attach`, a signal
        /// or a timer opens a window).
        #[arg(long)]
        dormant: bool,
        /// While the command runs, print a hang report on stderr once its GPU has made no
        /// progress for this long (60s, 90, 2m; 0 turns it off). The command is left
        /// running.
        #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = hangwatch::parse_timeout)]
        hang_timeout: std::time::Duration,
        /// Also add the traces to this dataset when the command ends (`gputrace dataset`;
        /// docs/dataset.md), under the job --job names (default: the trace directory's
        /// name).
        #[arg(long, value_name = "DIR")]
        dataset: Option<PathBuf>,
        /// The job's name in the dataset.
        #[arg(long, requires = "dataset")]
        job: Option<String>,
        /// The command and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        cmd: Vec<OsString>,
    },
    /// Per-device summary of one or more traces.
    Summary {
        /// Trace files (*.gtrace), or directories of them (`gputrace run -o DIR`).
        #[arg(required = true)]
        traces: Vec<PathBuf>,
        /// Print the summaries as JSON instead of text: an array, one object per trace.
        #[arg(long)]
        json: bool,
    },
    /// What the GPU was waiting for: findings, ranked, with the time breakdown.
    #[command(
        long_about = "What the GPU was waiting for: findings, ranked, with the time breakdown.\n\nSeveral traces are analysed together as the ranks of one job (traces that cannot be one job's ranks are reported side by side, with a note saying why)."
    )]
    Report {
        /// Trace files (*.gtrace) of one job, or directories of them (`gputrace run -o
        /// DIR`).
        #[arg(required = true)]
        traces: Vec<PathBuf>,
        /// Print the report as JSON (schema in docs/json-schema.md).
        #[arg(long)]
        json: bool,
        /// Also write the report as one self-contained HTML page (timeline, phases,
        /// steps, breakdown, findings); open it in any browser.
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
        /// Replace the --html page if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Every event of a trace as JSON lines, in time order.
    #[command(
        long_about = "Every event of a trace as one JSON object per line, in time order, written as the trace is read (memory stays bounded whatever its size). Several traces (or directories of them) are written one after the other; each line names its process (pid)."
    )]
    Dump {
        /// Trace files (*.gtrace), or directories of them (`gputrace run -o DIR`).
        #[arg(required = true)]
        traces: Vec<PathBuf>,
    },
    /// What changed between two runs.
    #[command(
        long_about = "What changed between two runs: step time, busy share, each idle cause's time, the top kernels and copies, findings gained and lost. Each run is a trace or a saved `gputrace report --json`."
    )]
    Diff {
        /// The earlier run: a trace, a directory of traces, or a saved `report --json`.
        before: PathBuf,
        /// The later run, given the same way.
        after: PathBuf,
        /// Print the comparison as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write a job's traces as a Perfetto or Chrome timeline, or as Parquet tables.
    #[command(
        long_about = "Write the traces of a job as a timeline (Perfetto, Chrome/Kineto JSON) or as Parquet tables, with what the analysis found placed on it: every idle gap named by its cause, the steps, the findings.\n\nAn output that exists already is left as it is unless --force is given."
    )]
    Export {
        /// Trace files (*.gtrace) of one job, or directories of them (`gputrace run -o
        /// DIR`).
        #[arg(required = true)]
        traces: Vec<PathBuf>,
        /// perfetto (ui.perfetto.dev), chrome (chrome://tracing, Holistic Trace
        /// Analysis; one file per process) or parquet (a directory of tables).
        #[arg(long, value_parser = parse_timeline_format)]
        format: Format,
        /// Where to write: a file (perfetto; chrome with one trace) or a directory
        /// (parquet; chrome with several traces). Default: beside the first trace.
        #[arg(short = 'o', long = "out")]
        out: Option<PathBuf>,
        /// Replace the output if it exists already (a file, or a directory with files in
        /// it).
        #[arg(short = 'f', long)]
        force: bool,
    },
    /// Add a job's traces to a Parquet dataset partitioned by job, host, rank, window.
    #[command(
        long_about = "Add a job's traces to a dataset: Parquet tables (kernels, copies, api_calls, nccl_calls, nvtx, idle_gaps, steps, gpu_samples, counters, findings, gpu_metrics, python_samples, processes) under DIR/<table>/job=J/host=H/rank=R/window=W/, one file per process. Each trace is analysed alone, one at a time, so memory stays that of the largest trace however many ranks the job has. Layout: docs/dataset.md.\n\nA partition that exists already is left as it is unless --force is given."
    )]
    Dataset {
        /// Trace files (*.gtrace) of one job, or directories of them (`gputrace run -o
        /// DIR`).
        #[arg(required = true)]
        traces: Vec<PathBuf>,
        /// The dataset's root directory (made, or added to).
        #[arg(short = 'o', long = "out")]
        out: PathBuf,
        /// The job's name in the dataset (default: the name of the traces' directory).
        #[arg(long)]
        job: Option<String>,
        /// Replace partitions that exist already.
        #[arg(short = 'f', long)]
        force: bool,
    },
    /// The job across its ranks, from a dataset: straggler, hang, outlier ranks.
    #[cfg(feature = "fleet")]
    #[command(
        long_about = "The job across its ranks, as SQL over a dataset (`gputrace dataset`) on the embedded engine, in bounded memory (spilling to disk): step time per rank and its spread; the straggler, from who reaches each collective last; a hang across ranks (the rank that never arrived at a collective the others reached, and where its Python was); members of a communicator with no trace; a rank whose finding stands out from the others'. Layout and queries: docs/dataset.md."
    )]
    Fleet {
        /// The dataset's root directory.
        dataset: PathBuf,
        /// The job to analyse (needed when the dataset holds several).
        #[arg(long)]
        job: Option<String>,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
        /// Memory the queries may hold before spilling to disk (bytes, or with K, M, G).
        #[arg(long, default_value = "2G", value_parser = parse_bytes)]
        memory: u64,
        /// Where to spill (default: a temporary directory).
        #[arg(long)]
        spill: Option<PathBuf>,
        /// Take the queries' rows from another engine's run instead (the JSON that
        /// `spark-submit scripts/fleet_spark.py DATASET JOB --out FILE` writes).
        #[arg(long)]
        results: Option<PathBuf>,
    },
    /// Check the GPUs, driver, CUDA runtimes and machine before tracing.
    #[command(
        long_about = "Check the environment with no job running: GPUs, driver and CUDA runtimes, clocks and throttle reasons, power, PCIe and GPU-to-GPU links, processes on the GPUs, CPUs and memory. Each line OK / WARN (with the fix) / INFO."
    )]
    Doctor {
        /// Print the checks as JSON instead of text.
        #[arg(long)]
        json: bool,
        /// The NVML library to load (default: GPUTRACE_NVML, else libnvidia-ml.so.1).
        #[arg(long)]
        nvml: Option<PathBuf>,
        /// A Python site-packages folder to search for CUDA runtimes (repeatable).
        #[arg(long = "site-packages")]
        site_packages: Vec<PathBuf>,
    },
    /// Trace a window of a running CUDA process (dormant, or started without gputrace).
    #[command(
        long_about = "Trace a window of a running CUDA process, then print where the trace is and its report. A process started dormant (GPUTRACE_MODE=dormant or `gputrace run --dormant`) is asked over its control socket; a process started without libgputrace.so gets it loaded first (ptrace; one of its waiting threads is stopped for a few milliseconds), and keeps it, dormant, for later windows."
    )]
    Attach {
        /// The process id of the CUDA program.
        pid: u32,
        /// How long to trace: 10s, 500ms, 2m (default 10s; with --steps, the longest
        /// the window may last, default 10m).
        #[arg(long, value_parser = protocol::parse_duration)]
        duration: Option<std::time::Duration>,
        /// Trace N training steps: the window closes when N NVTX ranges named like a
        /// step ("step" in their text) have begun in it and the next one begins.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        steps: Option<u64>,
        /// Start at this wall-clock time (ms since the epoch), so every rank of a job
        /// traces the same window.
        #[arg(long = "at")]
        at_ms: Option<u64>,
        /// Directory the process writes the window's trace to (default: its GPUTRACE_DIR).
        #[arg(short = 'o', long = "out")]
        out: Option<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Only print the trace's path.
        #[arg(long)]
        no_report: bool,
        /// While the window is open, print a hang report on stderr once the process's GPU
        /// has made no progress for this long (0 turns it off). The process is left as it
        /// is.
        #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = hangwatch::parse_timeout)]
        hang_timeout: std::time::Duration,
        /// Refuse a process started without libgputrace.so instead of loading the
        /// library into it (through ptrace: root or CAP_SYS_PTRACE, or the same user
        /// where kernel.yama.ptrace_scope allows it).
        #[arg(long)]
        no_load: bool,
        /// Also add the window's trace to this dataset (`gputrace dataset`;
        /// docs/dataset.md): each window is a partition of its own (window=START), so
        /// windows taken one after another make the job's history.
        #[arg(long, value_name = "DIR")]
        dataset: Option<PathBuf>,
        /// The job's name in the dataset (default: the trace directory's name).
        #[arg(long, requires = "dataset")]
        job: Option<String>,
    },
}

/// "2G", "512M", "1048576": bytes (K, M, G, T are powers of 1024; a trailing "iB" or "B"
/// is allowed).
#[cfg(feature = "fleet")]
fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, mult) = match t.chars().last() {
        Some('K') | Some('k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') | Some('m') => (&t[..t.len() - 1], 1 << 20),
        Some('G') | Some('g') => (&t[..t.len() - 1], 1 << 30),
        Some('T') | Some('t') => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 2G, 512M)"))?;
    if !(n.is_finite() && n > 0.0) {
        return Err(format!("{s:?}: the size must be above 0"));
    }
    Ok((n * mult as f64) as u64)
}

fn parse_timeline_format(s: &str) -> Result<Format, String> {
    match Format::from_name(s) {
        Some(f @ (Format::Perfetto | Format::Chrome | Format::Parquet)) => Ok(f),
        _ => Err(format!("{s:?} is not one of perfetto, chrome, parquet")),
    }
}

/// Where the library's warnings go.
fn warn(msg: &str) {
    eprintln!("gputrace: {msg}");
}

fn options() -> app::Options {
    app::Options {
        load: LoadOptions {
            progress: true,
            ..Default::default()
        },
        exiting: true,
        colour: colour_wanted(),
        html: None,
        force: false,
    }
}

/// Colour for a person at a terminal: stdout is one, `NO_COLOR` is unset or empty
/// (no-color.org) and `TERM` is not `dumb`.
fn colour_wanted() -> bool {
    use std::io::IsTerminal;
    let set = |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty());
    std::io::stdout().is_terminal()
        && !set("NO_COLOR")
        && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
}

impl Cmd {
    /// Whether the command prints JSON (`--json`).
    fn json(&self) -> bool {
        match self {
            Cmd::Run { json, .. }
            | Cmd::Summary { json, .. }
            | Cmd::Report { json, .. }
            | Cmd::Diff { json, .. }
            | Cmd::Doctor { json, .. }
            | Cmd::Attach { json, .. } => *json,
            #[cfg(feature = "fleet")]
            Cmd::Fleet { json, .. } => *json,
            _ => false,
        }
    }
}

fn format(json: bool) -> Format {
    if json {
        Format::Json
    } else {
        Format::Text
    }
}

/// Standard output, buffered: the library writes through this.
fn stdout() -> BufWriter<std::io::StdoutLock<'static>> {
    BufWriter::with_capacity(1 << 16, std::io::stdout().lock())
}

/// Prints the report (or the summaries) of traces a command wrote.
fn report_on(traces: &[PathBuf], json: bool, summary: bool) -> Result<app::Outcome, Error> {
    if summary {
        app::summary(traces, format(json), &mut stdout(), &warn)
    } else {
        app::report(traces, format(json), &options(), &mut stdout(), &warn)
    }
}

/// Runs the command; its exit code.
fn run_cli(cli: Cli) -> Result<i32> {
    match cli.cmd {
        Cmd::Run {
            out,
            json,
            summary,
            dormant,
            hang_timeout,
            dataset,
            job,
            cmd,
        } => {
            let env: Vec<(String, String)> = if dormant {
                vec![(settings::MODE.into(), "dormant".into())]
            } else {
                Vec::new()
            };
            // The command's exit code (or its end by SIGINT, see `run::finish`).
            Ok(run::run_and_report(
                &out,
                &cmd,
                &env,
                hang_timeout,
                |traces| {
                    report_run(traces, json, summary, dataset.as_deref(), job.as_deref());
                    Ok(())
                },
            ))
        }
        Cmd::Summary { traces, json } => {
            Ok(app::summary(&traces, format(json), &mut stdout(), &warn)?.exit_code())
        }
        Cmd::Report {
            traces,
            json,
            html,
            force,
        } => {
            let opts = app::Options {
                html,
                force,
                ..options()
            };
            Ok(app::report(&traces, format(json), &opts, &mut stdout(), &warn)?.exit_code())
        }
        Cmd::Attach {
            pid,
            duration,
            steps,
            at_ms,
            out,
            json,
            no_report,
            hang_timeout,
            no_load,
            dataset,
            job,
        } => {
            let duration = duration.unwrap_or(std::time::Duration::from_secs(if steps.is_some() {
                600
            } else {
                10
            }));
            let req = protocol::WindowReq {
                duration,
                steps,
                at_ms,
                dir: out,
            };
            let keep = dataset.as_deref().map(|d| (d, job.as_deref()));
            attach_window(pid, &req, hang_timeout, !no_load, no_report, json, keep)
        }
        Cmd::Diff {
            before,
            after,
            json,
        } => {
            app::diff(
                &before,
                &after,
                format(json),
                &options(),
                &mut stdout(),
                &warn,
            )?;
            Ok(0)
        }
        Cmd::Export {
            traces,
            format,
            out,
            force,
        } => export_traces(&traces, format, out.as_deref(), force),
        #[cfg(feature = "fleet")]
        Cmd::Fleet {
            dataset,
            job,
            json,
            memory,
            spill,
            results,
        } => fleet_job(
            &dataset,
            job.as_deref(),
            json,
            memory,
            spill.as_deref(),
            results.as_deref(),
        ),
        Cmd::Dataset {
            traces,
            out,
            job,
            force,
        } => add_to_dataset(&traces, &out, job.as_deref(), force),
        Cmd::Doctor {
            json,
            nvml,
            site_packages,
        } => check_environment(json, nvml, site_packages),
        Cmd::Dump { traces } => Ok(app::dump(&traces, &mut stdout(), &warn)?.exit_code()),
    }
}

/// Prints the report of a traced command's traces and adds them to a dataset if asked.
fn report_run(
    traces: &[PathBuf],
    json: bool,
    summary: bool,
    dataset: Option<&std::path::Path>,
    job: Option<&str>,
) {
    // A report that fails is said here, with its hint line where there is
    // one; the command's exit code stands either way.
    if let Err(e) = report_on(traces, json, summary) {
        let e = e.into();
        print_error(&e, json, error_code(&e));
    }
    // The dataset too when asked; a failure is said, the exit code stands.
    if let Some(ds) = dataset {
        add_to(traces, ds, job);
    }
}

/// Traces a window of process `pid`, prints the trace's path and its report; the exit code.
fn attach_window(
    pid: u32,
    req: &protocol::WindowReq,
    hang_timeout: std::time::Duration,
    load: bool,
    no_report: bool,
    json: bool,
    dataset: Option<(&std::path::Path, Option<&str>)>,
) -> Result<i32> {
    let (nvml, warning) = recorder::Settings::from_env();
    if let Some(w) = warning {
        warn(&w);
    }
    let started = |p: &std::path::Path| {
        warn(&format!(
            "tracing pid {pid} for {:.1} s into {}",
            req.duration.as_secs_f64(),
            p.display()
        ))
    };
    if let Some(l) = attach::load_if_needed(pid, load)? {
        warn(&format!(
            // Only a thread waiting in a system call is used.
            "loaded libgputrace.so into pid {pid} (it was started without it): its thread {} was stopped {:.1} ms while it waited",
            l.tid,
            l.stalled.as_secs_f64() * 1e3,
        ));
    }
    let (w, env_file) = attach::attach_watched(pid, req, &nvml, &warn, hang_timeout, started)?;
    // The trace's path: on stdout alone when it is the output, else on stderr so that
    // the report (one JSON document with --json) is all stdout holds.
    match (no_report, json) {
        (true, true) => println!("{}", serde_json::json!({ "trace": w.trace })),
        (true, false) => println!("trace: {}", w.trace.display()),
        (false, _) => warn(&format!("trace: {}", w.trace.display())),
    }
    let files: Vec<PathBuf> = std::iter::once(w.trace).chain(env_file).collect();
    let code = if no_report {
        0
    } else {
        report_on(&files, json, false)?.exit_code()
    };
    if let Some((ds, job)) = dataset {
        add_to(&files, ds, job);
    }
    Ok(code)
}

/// Adds the traces a command or a window wrote to a dataset, saying what was added; a
/// failure is said, and the command's exit code stands.
fn add_to(traces: &[PathBuf], ds: &std::path::Path, job: Option<&str>) {
    match app::dataset(traces, ds, job, false, &options(), &warn) {
        Ok(d) => warn(&format!(
            "added {} process{} of job {} to the dataset {}",
            d.partitions.len(),
            if d.partitions.len() == 1 { "" } else { "es" },
            d.job,
            d.root.display()
        )),
        Err(e) => {
            let e = e.into();
            print_error(&e, false, error_code(&e))
        }
    }
}

/// Exports the traces as a timeline or tables, saying each file written; the exit code.
fn export_traces(
    traces: &[PathBuf],
    format: Format,
    out: Option<&std::path::Path>,
    force: bool,
) -> Result<i32> {
    let t = std::time::Instant::now();
    let e = app::export(traces, format, out, force, &options(), &warn)?;
    for p in &e.paths {
        let size = dir_size(p);
        warn(&format!(
            "wrote {} ({:.1} MB, {} events of {} process{}, {:.1} s)",
            p.display(),
            size as f64 / 1e6,
            e.events,
            e.processes,
            if e.processes == 1 { "" } else { "es" },
            t.elapsed().as_secs_f64()
        ));
    }
    Ok(e.outcome.exit_code())
}

/// Prints the job-level analysis of a dataset (or of saved results) as text or JSON.
#[cfg(feature = "fleet")]
fn fleet_job(
    dataset: &std::path::Path,
    job: Option<&str>,
    json: bool,
    memory: u64,
    spill: Option<&std::path::Path>,
    results: Option<&std::path::Path>,
) -> Result<i32> {
    let f = match results {
        Some(r) => app::fleet_from_results(r, job)?,
        None => app::fleet(dataset, job, memory, spill)?,
    };
    let mut out = stdout();
    if json {
        serde_json::to_writer_pretty(&mut out, &f)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", gputrace_analyzer::fleet::render_text(&f))?;
    }
    Ok(0)
}

/// Adds the traces to the dataset under `out`, saying what was written; the exit code.
fn add_to_dataset(
    traces: &[PathBuf],
    out: &std::path::Path,
    job: Option<&str>,
    force: bool,
) -> Result<i32> {
    let t = std::time::Instant::now();
    let d = app::dataset(traces, out, job, force, &options(), &warn)?;
    warn(&format!(
        "wrote {} process{} of job {} into {} ({} events, {:.1} MB in the dataset, {:.1} s)",
        d.partitions.len(),
        if d.partitions.len() == 1 { "" } else { "es" },
        d.job,
        d.root.display(),
        d.events,
        dir_size(&d.root) as f64 / 1e6,
        t.elapsed().as_secs_f64()
    ));
    Ok(d.outcome.exit_code())
}

/// Runs the environment checks and prints them as text or JSON; the exit code.
fn check_environment(
    json: bool,
    nvml: Option<PathBuf>,
    site_packages: Vec<PathBuf>,
) -> Result<i32> {
    let d = doctor::run(&doctor::Options {
        nvml,
        site_packages,
        cuda_driver: None,
    });
    let text = if json {
        serde_json::to_string_pretty(&d)? + "\n"
    } else {
        doctor::render_text(&d)
    };
    let code = if d.bottom_line.ready {
        0
    } else {
        doctor::CANNOT_TRACE_EXIT
    };
    let mut out = stdout();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        // A reader that closed the pipe early has seen enough, as for the others.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(code),
        r => r.map(|_| code).map_err(|e| Error::Output(e).into()),
    }
}

/// Bytes in a file, or in the files of a directory.
/// Bytes of the files under `p` (a file: its size), symbolic links not followed.
fn dir_size(p: &std::path::Path) -> u64 {
    match std::fs::read_dir(p) {
        Ok(rd) => rd
            .flatten()
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() => dir_size(&e.path()),
                Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
                _ => 0,
            })
            .sum(),
        Err(_) => std::fs::metadata(p).map(|m| m.len()).unwrap_or(0),
    }
}

/// The error's message, its causes appended where they add something, and a hint.
fn error_text(e: &anyhow::Error) -> (String, Option<String>) {
    let mut msg = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !msg.contains(&c) {
            msg = format!("{msg}: {c}");
        }
    }
    let hint = match e.downcast_ref::<Error>() {
        Some(e) => e.hint(),
        None => e
            .downcast_ref::<attach::AttachError>()
            .and_then(attach::AttachError::hint),
    };
    (msg, hint)
}

/// Says why the command failed, on stderr: the message with its causes, then a hint
/// when there is one. Never a backtrace: these are the user's errors, not ours. With
/// `--json`, stdout also gets the error as one JSON document (see [`json_error`]).
fn print_error(e: &anyhow::Error, json: bool, code: i32) {
    let (msg, hint) = error_text(e);
    eprintln!("gputrace: {msg}");
    if let Some(h) = &hint {
        eprintln!("gputrace: {h}");
    }
    if json {
        println!("{}", json_error(&msg, hint.as_deref(), code));
    }
}

/// `{"error": {"message": ..., "hint": ..., "exit_code": N}}`: what a `--json` command
/// prints on stdout when it fails, so that its stdout is always one JSON document.
fn json_error(message: &str, hint: Option<&str>, code: i32) -> String {
    serde_json::json!({
        "error": {"message": message, "hint": hint, "exit_code": code}
    })
    .to_string()
}

/// The exit status of a command that failed (see the table in docs/commands.md).
fn error_code(e: &anyhow::Error) -> i32 {
    match (
        e.downcast_ref::<Error>(),
        e.downcast_ref::<attach::AttachError>(),
    ) {
        (Some(e), _) => e.exit_code(),
        (_, Some(a)) => a.exit_code(),
        _ => 1,
    }
}

/// Whether the arguments ask for JSON output (for errors found before a command runs,
/// such as clap's own).
fn wants_json(args: &[OsString]) -> bool {
    args.iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "--json")
}

/// Exit codes (the table is docs/commands.md's): 0 done (also when the reader of the
/// output closed it early), 1 the command failed (a trace that cannot be read, a process
/// that cannot be attached to, ...), 2 wrong usage, 3 (`report`, `summary`, `dump`,
/// `export`, `attach`) done, but a trace was damaged and the output covers what could be
/// read of it (a trace merely cut short gives 0); 4, 5, 6 (`attach`) refused for safety:
/// the control socket or its directory is not the process user's own and private, the
/// process listening is not the one asked for, a reply named a file outside the trace
/// directory; 4 (`doctor`) this machine cannot trace; 7 an output exists and `--force`
/// was not given; `run` exits with its command's code, or as a shell would when the
/// command could not be started (125, 126, 127; see
/// `gputrace_analyzer::commands::run`).
fn main() {
    let args: Vec<OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = e.exit_code();
            if code != 0 && wants_json(&args) {
                let first = e.to_string();
                let msg = first
                    .lines()
                    .next()
                    .unwrap_or("")
                    .trim_start_matches("error: ");
                println!("{}", json_error(msg, None, code));
            }
            e.exit()
        }
    };
    let json = cli.cmd.json();
    let code = match run_cli(cli) {
        Ok(code) => code,
        Err(e) => {
            let code = error_code(&e);
            print_error(&e, json, code);
            code
        }
    };
    std::process::exit(code);
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_command_and_argument_has_a_help_text() {
        let mut cli = Cli::command();
        cli.build();
        let mut seen = 0;
        for sub in cli.get_subcommands().filter(|s| s.get_name() != "help") {
            let name = sub.get_name();
            let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
            assert!(!about.is_empty(), "{name}: no about");
            assert!(
                !about.contains('\n') && about.len() <= 80,
                "{name}: the list's line is one short line: {about:?}"
            );
            for arg in sub.get_arguments() {
                let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
                assert!(
                    !help.trim().is_empty(),
                    "{name} {}: no help text",
                    arg.get_id()
                );
                seen += 1;
            }
        }
        // Every subcommand's arguments were walked (not an empty tree).
        assert!(seen > 30, "{seen}");
        let report = cli.find_subcommand("report").unwrap();
        let json = report
            .get_arguments()
            .find(|a| a.get_id() == "json")
            .unwrap();
        assert!(json
            .get_help()
            .unwrap()
            .to_string()
            .contains("docs/json-schema.md"));
    }

    #[test]
    fn run_takes_everything_after_the_separator() {
        let c = Cli::try_parse_from(["gputrace", "run", "--", "python", "-c", "print(1)"]).unwrap();
        match c.cmd {
            Cmd::Run { cmd, out, .. } => {
                assert_eq!(cmd, vec!["python", "-c", "print(1)"]);
                assert_eq!(out, PathBuf::from("gputrace-traces"));
            }
            _ => panic!("wrong subcommand"),
        }
        assert!(Cli::try_parse_from(["gputrace", "run"]).is_err());
        assert!(Cli::try_parse_from(["gputrace", "summary"]).is_err());
        assert!(Cli::try_parse_from(["gputrace", "report"]).is_err());
        assert!(Cli::try_parse_from(["gputrace", "dump"]).is_err());
        assert!(matches!(
            Cli::try_parse_from(["gputrace", "dump", "a.gtrace", "runs/"]).unwrap().cmd,
            Cmd::Dump { traces } if traces.len() == 2
        ));
        assert!(matches!(
            Cli::try_parse_from(["gputrace", "dump", "a.gtrace"])
                .unwrap()
                .cmd,
            Cmd::Dump { .. }
        ));
        match Cli::try_parse_from(["gputrace", "report", "a.gtrace", "b.gtrace", "--json"])
            .unwrap()
            .cmd
        {
            Cmd::Report { traces, json, .. } => {
                assert_eq!(traces.len(), 2);
                assert!(json);
            }
            _ => panic!("wrong subcommand"),
        }
        match Cli::try_parse_from(["gputrace", "run", "--summary", "--", "x"])
            .unwrap()
            .cmd
        {
            Cmd::Run { summary, .. } => assert!(summary),
            _ => panic!("wrong subcommand"),
        }
    }

    #[test]
    fn hang_timeout_is_on_by_default_and_zero_turns_it_off() {
        let secs = std::time::Duration::from_secs;
        let run = |args: &[&str]| match Cli::try_parse_from(args).map(|c| c.cmd) {
            Ok(Cmd::Run { hang_timeout, .. }) | Ok(Cmd::Attach { hang_timeout, .. }) => {
                Ok(hang_timeout)
            }
            Ok(_) => panic!("wrong subcommand"),
            Err(e) => Err(e),
        };
        assert_eq!(run(&["gputrace", "run", "--", "x"]).unwrap(), secs(60));
        assert_eq!(
            run(&["gputrace", "run", "--hang-timeout", "2s", "--", "x"]).unwrap(),
            secs(2)
        );
        assert_eq!(
            run(&["gputrace", "run", "--hang-timeout", "0", "--", "x"]).unwrap(),
            secs(0)
        );
        assert_eq!(
            run(&["gputrace", "run", "--hang-timeout=90", "--", "x"]).unwrap(),
            secs(90)
        );
        assert!(run(&["gputrace", "run", "--hang-timeout", "never", "--", "x"]).is_err());
        assert_eq!(run(&["gputrace", "attach", "42"]).unwrap(), secs(60));
        assert_eq!(
            run(&["gputrace", "attach", "42", "--hang-timeout", "off"]).unwrap(),
            secs(0)
        );
        assert_eq!(
            run(&["gputrace", "attach", "42", "--hang-timeout", "500ms"]).unwrap(),
            std::time::Duration::from_millis(500)
        );
        // After the command, it is the command's.
        match Cli::try_parse_from(["gputrace", "run", "--", "x", "--hang-timeout", "1s"])
            .unwrap()
            .cmd
        {
            Cmd::Run {
                hang_timeout, cmd, ..
            } => {
                assert_eq!(hang_timeout, secs(60));
                assert_eq!(cmd, vec!["x", "--hang-timeout", "1s"]);
            }
            _ => panic!("wrong subcommand"),
        }
    }

    #[test]
    fn attach_parses_durations_and_refuses_nonsense() {
        match Cli::try_parse_from(["gputrace", "attach", "42", "--duration", "500ms"])
            .unwrap()
            .cmd
        {
            Cmd::Attach { pid, duration, .. } => {
                assert_eq!(pid, 42);
                assert_eq!(duration, Some(std::time::Duration::from_millis(500)));
            }
            _ => panic!("wrong subcommand"),
        }
        assert!(Cli::try_parse_from(["gputrace", "attach", "42", "--duration", "soon"]).is_err());
        assert!(Cli::try_parse_from(["gputrace", "attach", "42", "--duration", "0s"]).is_err());
        assert!(Cli::try_parse_from(["gputrace", "attach", "notapid"]).is_err());
        assert!(Cli::try_parse_from(["gputrace", "attach", "42", "--steps", "0"]).is_err());
        assert!(matches!(
            Cli::try_parse_from(["gputrace", "attach", "42", "--steps", "20"])
                .unwrap()
                .cmd,
            Cmd::Attach {
                steps: Some(20),
                duration: None,
                ..
            }
        ));
        assert!(matches!(
            Cli::try_parse_from(["gputrace", "run", "--dormant", "--", "x"])
                .unwrap()
                .cmd,
            Cmd::Run { dormant: true, .. }
        ));
    }
}
