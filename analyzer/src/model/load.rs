//! Reading the traces a command was given: each file once, the files in parallel (the
//! ranks of a job) with the cores shared among them, a progress bar on stderr when
//! reading takes more than a second, and read problems passed on as warnings.

use crate::error::Error;
use crate::model::trace::Trace;
use gputrace_format::ReadStats;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How to read.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Draw a progress bar on stderr if reading takes more than a second (and stderr
    /// is a terminal).
    pub progress: bool,
    /// Threads in all (`GPUTRACE_THREADS`, else the cores this process may use).
    pub workers: usize,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            progress: false,
            workers: crate::par::workers(),
        }
    }
}

/// Where warnings go (one line each, without the `gputrace: ` prefix). Called from the
/// reading threads.
pub type Warn<'a> = &'a (dyn Fn(&str) + Sync);

/// The paths given, each file once: a path naming a file already given (the same
/// canonical path) is dropped with a warning.
pub fn distinct_paths(paths: &[PathBuf], warn: Warn<'_>) -> Vec<PathBuf> {
    let mut seen: Vec<(PathBuf, &Path)> = Vec::new();
    let mut out = Vec::new();
    for p in paths {
        // A path that does not resolve is kept: reading it says what is wrong.
        let canon = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
        if let Some((_, first)) = seen.iter().find(|(c, _)| *c == canon) {
            if first == p {
                warn(&format!("{} given twice: read once", p.display()));
            } else {
                warn(&format!(
                    "{} is the same file as {}: read once",
                    p.display(),
                    first.display()
                ));
            }
            continue;
        }
        seen.push((canon, p));
        out.push(p.clone());
    }
    out
}

/// Checks a path before reading it, for a clearer message than the reader's.
pub fn check_path(p: &Path) -> Result<(), Error> {
    if p.is_dir() {
        return Err(Error::IsDir(p.to_path_buf()));
    }
    Ok(())
}

/// Passes on what reading a trace found wrong (records lost to damage or to an end cut
/// short), if anything. True if the trace was damaged, not merely cut short: the
/// commands then exit with [`crate::commands::app::DAMAGED_EXIT`] after their output.
pub fn pass_on_loss(path: &Path, stats: &ReadStats, warn: Warn<'_>) -> bool {
    if let Some(w) = stats.warning() {
        warn(&format!("{}: {w}", path.display()));
    }
    stats.damaged()
}

/// Reads one trace (decoded on the default number of threads), passing on what
/// reading it found wrong (see [`pass_on_loss`]; the trace's `stats` keep it).
pub fn load(path: &Path, warn: Warn<'_>) -> Result<Trace, Error> {
    check_path(path)?;
    let t = Trace::load(path).map_err(|e| Error::read(path, e))?;
    pass_on_loss(path, &t.stats, warn);
    Ok(t)
}

/// Reads the traces of a set, each file once: distinct files in parallel, then
/// copies of one trace under different names (same host, pid and start time) kept
/// once, and environment files (`gputrace run`'s NVML samples) given to the process
/// traces they cover ([`crate::model::env_files`]): only process traces are returned. The first
/// error stops it; a set of environment files only is one.
pub fn load_set(
    paths: &[PathBuf],
    opts: &LoadOptions,
    warn: Warn<'_>,
) -> Result<Vec<Trace>, Error> {
    let paths = distinct_paths(&expand_dirs(paths)?, warn);
    for p in &paths {
        check_path(p)?;
    }
    let traces = read_all(&paths, opts, warn)?;
    crate::model::env_files::give_environment(distinct_traces(traces, warn))
}

/// A directory in a set stands for the trace files in it (`*.gtrace`, sorted by name):
/// what `gputrace run -o DIR` or `GPUTRACE_DIR` wrote, environment file included.
pub fn expand_dirs(paths: &[PathBuf]) -> Result<Vec<PathBuf>, Error> {
    let mut out = Vec::with_capacity(paths.len());
    for p in paths {
        if !p.is_dir() {
            out.push(p.clone());
            continue;
        }
        let mut found: Vec<PathBuf> = std::fs::read_dir(p)
            .map_err(|_| Error::NoTraces(p.clone()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|f| f.is_file() && gputrace_format::protocol::is_trace_file(f))
            .collect();
        if found.is_empty() {
            return Err(Error::NoTraces(p.clone()));
        }
        found.sort();
        out.extend(found);
    }
    Ok(out)
}

/// Drops a trace that is a copy of one before it: same host, pid and start time (a
/// file opened at a different moment, as every window of a dormant process is, is a
/// different trace).
pub fn distinct_traces(traces: Vec<Trace>, warn: Warn<'_>) -> Vec<Trace> {
    let mut out: Vec<Trace> = Vec::with_capacity(traces.len());
    for t in traces {
        let m = &t.meta;
        // Synthetic traces carry no start time: nothing to tell copies by.
        let copy_of = (m.start_real_ns != 0)
            .then(|| {
                out.iter().find(|o| {
                    o.meta.host == m.host
                        && o.meta.pid == m.pid
                        && o.meta.start_real_ns == m.start_real_ns
                })
            })
            .flatten();
        if let Some(o) = copy_of {
            warn(&format!(
                "{} is a copy of {} (pid {} on {}, same start): counted once",
                t.path.display(),
                o.path.display(),
                m.pid,
                m.host
            ));
            continue;
        }
        out.push(t);
    }
    out
}

/// Reads the files in parallel, the cores shared among them.
fn read_all(paths: &[PathBuf], opts: &LoadOptions, warn: Warn<'_>) -> Result<Vec<Trace>, Error> {
    let total: u64 = paths
        .iter()
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum();
    let bar = Bar::start(opts.progress, total, paths);
    let read = AtomicU64::new(0);
    let per_file =
        (opts.workers / paths.len().max(1)).clamp(1, crate::model::trace::MAX_DECODE_WORKERS);
    let loaded = crate::par::map(paths, opts.workers, |_, p| {
        let mut mine = 0u64;
        let r = Trace::load_with(p, per_file, |d, _| {
            let now = read.fetch_add(d.saturating_sub(mine), Ordering::Relaxed);
            bar.set(now + d.saturating_sub(mine));
            mine = mine.max(d);
        });
        if let Ok(t) = &r {
            if t.stats.warning().is_some() {
                bar.suspend(|| {
                    pass_on_loss(p, &t.stats, warn);
                });
            }
        }
        r
    });
    bar.finish();
    paths
        .iter()
        .zip(loaded)
        .map(|(p, r)| r.map_err(|e| Error::read(p, e)))
        .collect()
}

/// A progress bar that appears only once reading has taken a second.
pub(crate) struct Bar {
    pb: indicatif::ProgressBar,
    done: Arc<AtomicBool>,
    watcher: Option<std::thread::JoinHandle<()>>,
}

impl Bar {
    fn start(show: bool, total: u64, paths: &[PathBuf]) -> Bar {
        let msg = match paths {
            [one] => format!("reading {}", one.display()),
            _ => format!("reading {} traces", paths.len()),
        };
        Bar::new(show, total, msg, "{bytes}/{total_bytes}")
    }

    /// A bar counting events (an export's second pass, over each trace's file).
    pub(crate) fn events(show: bool, total: u64, msg: String) -> Bar {
        Bar::new(show, total, msg, "{human_pos}/{human_len} events")
    }

    fn new(show: bool, total: u64, msg: String, counts: &str) -> Bar {
        use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
        let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
        pb.set_style(
            ProgressStyle::with_template(&format!("{{msg}} [{{bar:30}}] {counts} ({{eta}})"))
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        pb.set_message(msg);
        let done = Arc::new(AtomicBool::new(false));
        let watcher = show.then(|| {
            let pb = pb.clone();
            let done = done.clone();
            std::thread::spawn(move || {
                let t0 = Instant::now();
                while !done.load(Ordering::Relaxed) {
                    if t0.elapsed() >= Duration::from_secs(1) {
                        pb.set_draw_target(ProgressDrawTarget::stderr());
                        pb.enable_steady_tick(Duration::from_millis(200));
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        });
        Bar { pb, done, watcher }
    }

    pub(crate) fn set(&self, pos: u64) {
        self.pb.set_position(pos);
    }

    /// Runs `f` (which prints) with the bar out of the way.
    fn suspend(&self, f: impl FnOnce()) {
        self.pb.suspend(f)
    }

    pub(crate) fn finish(mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
        self.pb.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn a_file_given_twice_is_read_once() {
        let dir = std::env::temp_dir().join(format!("gputrace-distinct-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = dir.join("a.gtrace");
        std::fs::write(&a, b"x").unwrap();
        let b = dir.join("b.gtrace");
        std::fs::write(&b, b"x").unwrap();
        let notes = Mutex::new(Vec::new());
        let warn = |s: &str| notes.lock().unwrap().push(s.to_string());
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let other_name = dir.join("sub/../a.gtrace");
        let got = distinct_paths(&[a.clone(), b.clone(), a.clone(), other_name], &warn);
        assert_eq!(got, vec![a, b]);
        let notes = notes.into_inner().unwrap();
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(
            notes[0].ends_with("a.gtrace given twice: read once"),
            "{notes:?}"
        );
        assert!(notes[1].contains("is the same file as"), "{notes:?}");
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn a_copy_of_a_trace_counts_once() {
        let t = |path: &str, pid: u32, start: u64| Trace {
            path: path.into(),
            meta: gputrace_format::Meta {
                pid,
                host: "node0".into(),
                start_real_ns: start,
                ..Default::default()
            },
            ..Default::default()
        };
        let notes = Mutex::new(Vec::new());
        let warn = |s: &str| notes.lock().unwrap().push(s.to_string());
        let got = distinct_traces(
            vec![
                t("a", 1, 100),
                t("copy-of-a", 1, 100),
                t("second-window", 1, 200),
                t("other", 2, 100),
                // No start time: never taken for a copy.
                t("s1", 3, 0),
                t("s2", 3, 0),
            ],
            &warn,
        );
        let names: Vec<_> = got.iter().map(|t| t.path.display().to_string()).collect();
        assert_eq!(names, ["a", "second-window", "other", "s1", "s2"]);
        assert_eq!(
            notes.into_inner().unwrap(),
            ["copy-of-a is a copy of a (pid 1 on node0, same start): counted once"]
        );
    }
}
