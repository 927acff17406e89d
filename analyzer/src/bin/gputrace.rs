//! The `gputrace` command line.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use gputrace_analyzer::{dump, run, summary, Trace};
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
    /// Run a command with tracing, then summarise the traces it wrote.
    Run {
        /// Directory for the trace files.
        #[arg(short = 'o', long = "out", default_value = "gputrace-traces")]
        out: PathBuf,
        /// Print a JSON summary instead of text.
        #[arg(long)]
        json: bool,
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
    /// Every event of a trace as one JSON object per line.
    Dump { trace: PathBuf },
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

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Run { out, json, cmd } => {
            let lib = run::find_library(
                std::env::var_os("GPUTRACE_LIB").map(PathBuf::from),
                std::env::current_exe().ok(),
            )?;
            let o = run::run(&lib, &out, &cmd, &[])?;
            if o.traces.is_empty() {
                eprintln!(
                    "gputrace: the command wrote no trace (it did not use CUDA, or tracing was off)"
                );
            } else if let Err(e) = print_summaries(&o.traces, json) {
                eprintln!("gputrace: {e:#}");
            }
            std::process::exit(o.code);
        }
        Cmd::Summary { traces, json } => print_summaries(&traces, json),
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
    }
}
