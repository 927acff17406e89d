//! The `gputrace` command line.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use gputrace_analyzer::{dump, report, run, summary, Trace};
use gputrace_format::protocol::{self, settings};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(name = "gputrace", version, about = "Finds out why a GPU job is slow")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run a command with tracing, then report on the traces it wrote.
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
        /// The command and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        cmd: Vec<OsString>,
    },
    /// Per-device summary of one or more traces.
    Summary {
        #[arg(required = true)]
        traces: Vec<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// What the GPU was waiting for: findings, ranked, with the time breakdown.
    /// Several traces are analysed together as the ranks of one job.
    Report {
        #[arg(required = true)]
        traces: Vec<PathBuf>,
        /// Print the report as JSON (schema in README.md).
        #[arg(long)]
        json: bool,
    },
    /// Every event of a trace as one JSON object per line.
    Dump { trace: PathBuf },
    /// Check the environment with no job running: GPUs, driver and CUDA runtimes,
    /// clocks and throttle reasons, power, PCIe and GPU-to-GPU links, processes on the
    /// GPUs, CPUs and memory. Each line OK / WARN (with the fix) / INFO.
    Doctor {
        #[arg(long)]
        json: bool,
        /// The NVML library to load (default: GPUTRACE_NVML, else libnvidia-ml.so.1).
        #[arg(long)]
        nvml: Option<PathBuf>,
        /// A Python site-packages folder to search for CUDA runtimes (repeatable).
        #[arg(long = "site-packages")]
        site_packages: Vec<PathBuf>,
    },
    /// Trace a window of a running process started dormant (GPUTRACE_MODE=dormant or
    /// `gputrace run --dormant`), then print where the trace is and its report.
    Attach {
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
    },
}

fn load(p: &std::path::Path) -> Result<Trace> {
    let t = Trace::load(p).with_context(|| format!("cannot read trace {}", p.display()))?;
    if let Some(w) = t.stats.warning() {
        eprintln!("gputrace: {}: {w}", p.display());
    }
    Ok(t)
}

fn print_summaries(paths: &[PathBuf], json: bool) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let mut all = Vec::new();
    for p in paths {
        let s = summary::summarize(&load(p)?);
        if json {
            all.push(s);
        } else {
            writeln!(out, "{}", summary::render(&s))?;
        }
    }
    if json {
        serde_json::to_writer_pretty(&mut out, &all)?;
        writeln!(out)?;
    }
    Ok(())
}

/// Loads traces with a progress bar on stderr that appears only if reading takes more
/// than a second.
fn load_all(paths: &[PathBuf]) -> Result<Vec<Trace>> {
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let total: u64 = paths
        .iter()
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum();
    let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
    pb.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} ({eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let pb = pb.clone();
        let done = done.clone();
        std::thread::spawn(move || {
            let t0 = std::time::Instant::now();
            while !done.load(Ordering::Relaxed) {
                if t0.elapsed() >= std::time::Duration::from_secs(1) {
                    pb.set_draw_target(ProgressDrawTarget::stderr());
                    pb.enable_steady_tick(std::time::Duration::from_millis(200));
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        })
    };
    // Files are read in parallel (the ranks of a job), the cores shared among them.
    pb.set_message(match paths {
        [one] => format!("reading {}", one.display()),
        _ => format!("reading {} traces", paths.len()),
    });
    let read = std::sync::atomic::AtomicU64::new(0);
    let per_file = gputrace_analyzer::trace::decode_workers(paths.len());
    let loaded = gputrace_analyzer::par::map(paths, gputrace_analyzer::par::workers(), |_, p| {
        let mut mine = 0u64;
        let r = Trace::load_with(p, per_file, |d, _| {
            let now = read.fetch_add(d.saturating_sub(mine), Ordering::Relaxed);
            pb.set_position(now + d.saturating_sub(mine));
            mine = mine.max(d);
        });
        if let Ok(t) = &r {
            if let Some(w) = t.stats.warning() {
                pb.suspend(|| eprintln!("gputrace: {}: {w}", p.display()));
            }
        }
        r
    });
    let mut traces = Vec::with_capacity(paths.len());
    let mut result = Ok(());
    for (p, r) in paths.iter().zip(loaded) {
        match r {
            Ok(t) => traces.push(t),
            Err(e) => {
                result = Err(
                    anyhow::Error::new(e).context(format!("cannot read trace {}", p.display()))
                );
                break;
            }
        }
    }
    done.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    pb.finish_and_clear();
    result.map(|_| traces)
}

fn print_report(paths: &[PathBuf], json: bool) -> Result<()> {
    let traces = load_all(paths)?;
    let r = report::analyze(&traces);
    let mut out = std::io::stdout().lock();
    let res = if json {
        serde_json::to_writer_pretty(&mut out, &r)
            .map_err(std::io::Error::from)
            .and_then(|_| writeln!(out))
    } else {
        out.write_all(report::render_text(&r).as_bytes())
    };
    // The process ends here: unmapping hundreds of MB of tables first would only delay
    // the exit (tens of ms on a 10 M-event trace).
    std::mem::forget(traces);
    match res {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => bail!(e),
    }
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Run {
            out,
            json,
            summary,
            dormant,
            cmd,
        } => {
            let env: Vec<(String, String)> = if dormant {
                vec![(settings::MODE.into(), "dormant".into())]
            } else {
                Vec::new()
            };
            std::process::exit(run::run_and_report(&out, &cmd, &env, |traces| {
                if summary {
                    print_summaries(traces, json)
                } else {
                    print_report(traces, json)
                }
            }));
        }
        Cmd::Summary { traces, json } => print_summaries(&traces, json),
        Cmd::Report { traces, json } => print_report(&traces, json),
        Cmd::Attach {
            pid,
            duration,
            steps,
            at_ms,
            out,
            json,
            no_report,
        } => {
            let duration = duration.unwrap_or(std::time::Duration::from_secs(if steps.is_some() {
                600
            } else {
                10
            }));
            let w = gputrace_analyzer::attach::attach(
                pid,
                duration,
                steps,
                at_ms,
                out.as_deref(),
                |p| {
                    eprintln!(
                        "gputrace: tracing pid {pid} for {:.1} s into {}",
                        duration.as_secs_f64(),
                        p.display()
                    )
                },
            )?;
            println!("trace: {}", w.trace.display());
            if no_report {
                return Ok(());
            }
            print_report(&[w.trace], json)
        }
        Cmd::Doctor {
            json,
            nvml,
            site_packages,
        } => {
            let d = gputrace_analyzer::doctor::run(&gputrace_analyzer::doctor::Options {
                nvml,
                site_packages,
            });
            if json {
                println!("{}", serde_json::to_string_pretty(&d)?);
            } else {
                print!("{}", gputrace_analyzer::doctor::render_text(&d));
            }
            Ok(())
        }
        Cmd::Dump { trace } => {
            let t = load(&trace)?;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            match dump::write(&t, &mut out).and_then(|_| out.flush()) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                Err(e) => bail!(e),
            }
        }
    }
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
        match Cli::try_parse_from(["gputrace", "report", "a.gtrace", "b.gtrace", "--json"])
            .unwrap()
            .cmd
        {
            Cmd::Report { traces, json } => {
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
