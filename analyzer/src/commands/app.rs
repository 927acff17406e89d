//! What each `gputrace` command that reads traces does, for the binary: read, analyse,
//! write through an exporter. The binary parses arguments, calls one of these with
//! stdout, and turns an [`Error`] into a message and an exit code, and an [`Outcome`]
//! into an exit code.

use crate::error::Error;
use crate::export::stream::{EventStream, StreamError, StreamStats, DEFAULT_MAX_PENDING};
use crate::export::{self, Document, Format};
use crate::model::load::{self, LoadOptions, Warn};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// How the commands behave around their output.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub load: LoadOptions,
    /// The process ends right after the command: the traces' tables are not freed
    /// (unmapping hundreds of MB only delays the exit, tens of ms on a 10 M-event
    /// trace).
    pub exiting: bool,
    /// The text report may be coloured (stdout is a terminal and `NO_COLOR` is unset).
    pub colour: bool,
    /// `report --html FILE`: the page is written there too.
    pub html: Option<PathBuf>,
    /// An output that exists may be replaced.
    pub force: bool,
}

/// Exit status of `report`, `summary`, `dump` and `export` after their output when a trace it
/// covers was damaged (bytes inside the file are not what was written, so records may
/// be missing from anywhere in it). A trace merely cut short (the process killed, the
/// disk full) is read to its end as usual: 0.
pub const DAMAGED_EXIT: i32 = 3;

/// What a command found reading its traces, beyond what it wrote: its exit status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// A trace the output covers was damaged (not merely cut short): the output covers
    /// what could be read of it.
    pub damaged: bool,
}

impl Outcome {
    /// The command's exit status: 0, or [`DAMAGED_EXIT`].
    pub fn exit_code(self) -> i32 {
        if self.damaged {
            DAMAGED_EXIT
        } else {
            0
        }
    }
}

/// A closed pipe (`gputrace report x | head`) is how a reader says it has seen
/// enough: not an error.
fn written(r: io::Result<()>) -> Result<(), Error> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Error::Output(e)),
        Ok(()) => Ok(()),
    }
}

/// `gputrace report`: what the GPU was waiting for, over the traces of one job.
pub fn report(
    paths: &[PathBuf],
    format: Format,
    opts: &Options,
    out: &mut dyn Write,
    warn: Warn<'_>,
) -> Result<Outcome, Error> {
    let traces = load::load_set(paths, &opts.load, warn)?;
    let outcome = Outcome {
        damaged: traces.iter().any(|t| t.stats.damaged()),
    };
    let r = match &opts.html {
        Some(page) => {
            check_output(page, opts.force)?;
            let (r, timelines) = crate::report::analyze_timelines(&traces);
            export::create_private(page)
                .and_then(|f| {
                    let mut w = std::io::BufWriter::new(f);
                    export::html::write(&r, &traces, &timelines, &mut w)
                })
                .map_err(Error::Output)?;
            r
        }
        None => crate::report::analyze(&traces),
    };
    let res = if opts.colour && format == Format::Text {
        out.write_all(crate::report::render::colour(&crate::report::render_text(&r)).as_bytes())
    } else {
        export::write_document(format, Document::Report(&r), out)
    }
    .and_then(|_| out.flush());
    if opts.exiting {
        std::mem::forget(traces);
    }
    written(res).map(|_| outcome)
}

/// `gputrace summary`: per-device summary of each trace. Each trace is streamed from
/// its file in time order (bounded memory, whatever its size: [`export::summary`]);
/// environment files are no process and have no summary (given alone, they are an
/// error).
pub fn summary(
    paths: &[PathBuf],
    format: Format,
    out: &mut dyn Write,
    warn: Warn<'_>,
) -> Result<Outcome, Error> {
    let mut all = Vec::new();
    let mut outcome = Outcome::default();
    let mut env_file = None;
    for p in load::distinct_paths(&load::expand_dirs(paths)?, warn) {
        let (s, damaged) = open_stream(&p, warn)?;
        outcome.damaged |= damaged;
        if s.meta().is_environment() {
            env_file.get_or_insert(p);
            continue;
        }
        all.push(match export::summary::summarize(&s) {
            Ok(x) => x,
            Err(StreamError::Read(e)) => return Err(Error::read(&p, e)),
            Err(StreamError::Write(e)) => return Err(Error::Output(e)),
        });
    }
    if let (true, Some(p)) = (all.is_empty(), env_file) {
        return Err(Error::EnvironmentOnly(p));
    }
    written(
        export::write_document(format, Document::Summaries(&all), out).and_then(|_| out.flush()),
    )
    .map(|_| outcome)
}

/// A trace opened for streaming (its index read), what reading it found passed on
/// ([`load::pass_on_loss`]): the stream, and whether the trace was damaged.
fn open_stream(path: &Path, warn: Warn<'_>) -> Result<(EventStream<'static>, bool), Error> {
    load::check_path(path)?;
    let s = EventStream::open(path).map_err(|e| Error::read(path, e))?;
    let damaged = load::pass_on_loss(path, s.read_stats(), warn);
    Ok((s, damaged))
}

/// `gputrace dump`: the events of each trace (directories stand for their traces) as
/// JSON lines, one trace after the other, each streamed in bounded memory ([`events`]).
pub fn dump(paths: &[PathBuf], out: &mut dyn Write, warn: Warn<'_>) -> Result<Outcome, Error> {
    let mut outcome = Outcome::default();
    for p in load::distinct_paths(&load::expand_dirs(paths)?, warn) {
        let (o, _) = events(&p, Format::Jsonl, out, warn)?;
        outcome.damaged |= o.damaged;
    }
    Ok(outcome)
}

/// One trace's events (`gputrace dump`, and any export of events): the trace's events in time order,
/// written as they are read, in bounded memory (see [`crate::export::stream`]). A
/// damaged trace is read past its damage, as for the report (what was lost is said
/// through `warn` before the events).
pub fn events(
    path: &Path,
    format: Format,
    out: &mut dyn Write,
    warn: Warn<'_>,
) -> Result<(Outcome, StreamStats), Error> {
    events_with(path, format, DEFAULT_MAX_PENDING, out, warn)
}

/// [`events`] with the reorder buffer's size (records).
pub fn events_with(
    path: &Path,
    format: Format,
    max_pending: usize,
    out: &mut dyn Write,
    warn: Warn<'_>,
) -> Result<(Outcome, StreamStats), Error> {
    let Some(mut exporter) = export::event_exporter(format) else {
        return Err(Error::Output(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a format of events", format.name()),
        )));
    };
    let (s, damaged) = open_stream(path, warn)?;
    let outcome = Outcome { damaged };
    let r = exporter
        .begin(out)
        .map_err(StreamError::Write)
        .and_then(|_| s.write(max_pending, exporter.as_mut(), out))
        .and_then(|st| {
            exporter
                .finish(out)
                .and_then(|_| out.flush())
                .map(|_| st)
                .map_err(StreamError::Write)
        });
    match r {
        Ok(st) => Ok((outcome, st)),
        Err(StreamError::Read(e)) => Err(Error::read(path, e)),
        Err(StreamError::Write(e)) => written(Err(e)).map(|_| (outcome, StreamStats::default())),
    }
}

/// What `gputrace export` wrote.
#[derive(Clone, Debug, Default)]
pub struct Exported {
    /// The files (or, for Parquet, the directory) written.
    pub paths: Vec<PathBuf>,
    pub processes: usize,
    /// Events streamed, over every trace.
    pub events: u64,
    /// A trace was damaged: what could be read of it was written (what was lost was
    /// said through `warn` as it was read).
    pub outcome: Outcome,
}

/// Refuses an output that exists (a file, or a directory with something in it) unless
/// `force`: an export never replaces earlier work silently.
fn check_output(target: &Path, force: bool) -> Result<(), Error> {
    if force {
        return Ok(());
    }
    let taken = match std::fs::read_dir(target) {
        Ok(mut rd) => rd.next().is_some(),
        Err(_) => target.symlink_metadata().is_ok(),
    };
    if taken {
        return Err(Error::OutputExists(target.to_path_buf()));
    }
    Ok(())
}

/// Output bytes per event of each timeline format, as measured on the 10 M-event
/// benchmark trace (bench/export.json).
fn bytes_per_event(format: Format) -> f64 {
    match format {
        Format::Chrome => 460.0,
        Format::Perfetto => 125.0,
        Format::Parquet => 31.0,
        _ => 0.0,
    }
}

/// Said before an export of 1 GB or more: its estimated size, so that a Chrome export of a
/// large trace (about 460 bytes per event) is no surprise.
fn size_warning(format: Format, traces: &[crate::model::trace::Trace]) -> Option<String> {
    let events: usize = traces
        .iter()
        .map(|t| {
            t.kernels.len()
                + t.apis.len()
                + t.memcpys.len()
                + t.memsets.len()
                + t.syncs.len()
                + t.host_calls.len()
                + t.host_copies.len()
                + t.nccl.len()
                + t.nvtx.len()
        })
        .sum();
    size_words(format, events)
}

/// The estimate for `events` events, when it is 1 GB or more.
fn size_words(format: Format, events: usize) -> Option<String> {
    let bytes = events as f64 * bytes_per_event(format);
    (bytes >= 1e9).then(|| {
        format!(
            "exporting about {events} events as {}: about {:.1} GB ({:.0} bytes per event){}",
            format.name(),
            bytes / 1e9,
            bytes_per_event(format),
            if format == Format::Chrome {
                "; Perfetto's format (--format perfetto) is about a quarter of that"
            } else {
                ""
            }
        )
    })
}

/// `gputrace export --format perfetto|chrome|parquet`: the job's traces analysed
/// together (as `report` does), what the analysis placed on each process's timeline
/// handed to the exporter, the traces dropped, then each trace's events streamed from
/// its file (see [`crate::export::overlay`]). `out`: where to write (default beside the
/// first trace, [`export::timeline_output`]). An output that exists is refused unless
/// `force` (before the traces are read when `out` is given). A damaged trace is
/// exported as far as it could be read; [`Exported::outcome`] says so.
pub fn export(
    paths: &[PathBuf],
    format: Format,
    out: Option<&Path>,
    force: bool,
    opts: &Options,
    warn: Warn<'_>,
) -> Result<Exported, Error> {
    if let Some(p) = out {
        check_output(p, force)?;
    }
    let traces = load::load_set(paths, &opts.load, warn)?;
    let outcome = Outcome {
        damaged: traces.iter().any(|t| t.stats.damaged()),
    };
    let n = traces.len();
    let target = match out {
        Some(p) => p.to_path_buf(),
        None => export::timeline_output(
            format,
            traces
                .first()
                .map(|t| t.path.as_path())
                .unwrap_or(Path::new("trace")),
            n,
        ),
    };
    if out.is_none() {
        check_output(&target, force)?;
    }
    if let Some(w) = size_warning(format, &traces) {
        warn(&w);
    }
    let mut exporter = match export::timeline_exporter(format, &target, n) {
        Some(Ok(e)) => e,
        Some(Err(e)) => return Err(Error::Output(e)),
        None => {
            return Err(Error::Output(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a timeline format", format.name()),
            )))
        }
    };
    let (report, timelines) = crate::report::analyze_timelines(&traces);
    let views = crate::export::overlay::views(&traces, &report, &timelines);
    for v in &views {
        exporter.process(v).map_err(Error::Output)?;
    }
    let order: Vec<(usize, PathBuf)> = views
        .iter()
        .map(|v| (v.index, v.trace.path.clone()))
        .collect();
    // Freed before the events are streamed (even when exiting after): the stream is
    // what should hold memory from here on.
    drop(views);
    drop(timelines);
    drop(traces);
    let events = stream_into(exporter.as_mut(), order, opts.load.progress)?;
    let paths = exporter.close().map_err(Error::Output)?;
    Ok(Exported {
        paths,
        processes: n,
        events,
        outcome,
    })
}

/// Streams each trace's events (its file read again, in order) into a timeline
/// exporter whose processes were given; the events streamed.
fn stream_into(
    exporter: &mut dyn crate::export::overlay::TimelineExporter,
    order: Vec<(usize, PathBuf)>,
    progress: bool,
) -> Result<u64, Error> {
    let mut events = 0;
    exporter
        .as_events()
        .begin(&mut io::sink())
        .map_err(Error::Output)?;
    for (index, path) in order {
        exporter.select(index).map_err(Error::Output)?;
        let s = EventStream::open(&path).map_err(|e| Error::read(&path, e))?;
        let bar = load::Bar::events(
            progress,
            s.events(),
            format!("exporting {}", path.display()),
        );
        let mut counted = Counted {
            inner: exporter.as_events(),
            bar: &bar,
            n: 0,
        };
        let res = s.write(DEFAULT_MAX_PENDING, &mut counted, &mut io::sink());
        bar.finish();
        match res {
            Ok(st) => events += st.events,
            Err(StreamError::Read(e)) => return Err(Error::read(&path, e)),
            Err(StreamError::Write(e)) => return Err(Error::Output(e)),
        }
    }
    exporter
        .as_events()
        .finish(&mut io::sink())
        .map_err(Error::Output)?;
    Ok(events)
}

/// An exporter that moves a progress bar on as events pass through it.
struct Counted<'a> {
    inner: &'a mut dyn crate::export::EventExporter,
    bar: &'a load::Bar,
    n: u64,
}

impl crate::export::EventExporter for Counted<'_> {
    fn begin(&mut self, out: &mut dyn Write) -> io::Result<()> {
        self.inner.begin(out)
    }
    fn begin_trace(
        &mut self,
        cx: &crate::export::TraceContext<'_>,
        out: &mut dyn Write,
    ) -> io::Result<()> {
        self.inner.begin_trace(cx, out)
    }
    fn event(
        &mut self,
        cx: &crate::export::TraceContext<'_>,
        ev: &crate::export::TraceEvent<'_>,
        out: &mut dyn Write,
    ) -> io::Result<()> {
        self.n += 1;
        if self.n.is_multiple_of(65_536) {
            self.bar.set(self.n);
        }
        self.inner.event(cx, ev, out)
    }
    fn end_trace(
        &mut self,
        cx: &crate::export::TraceContext<'_>,
        out: &mut dyn Write,
    ) -> io::Result<()> {
        self.inner.end_trace(cx, out)
    }
    fn finish(&mut self, out: &mut dyn Write) -> io::Result<()> {
        self.inner.finish(out)
    }
}

/// The dataset's description file, at its root.
pub const DATASET_FILE: &str = "_gputrace_dataset.json";
/// The dataset layout's version: a reader refuses another major.
pub const DATASET_VERSION: u32 = 1;

/// What `gputrace dataset` wrote.
#[derive(Clone, Debug, Default)]
pub struct DatasetWritten {
    pub root: PathBuf,
    pub job: String,
    /// The partitions written, one per process trace.
    pub partitions: Vec<PathBuf>,
    pub events: u64,
    pub outcome: Outcome,
}

/// The job name a dataset uses when none is given: the name of the first directory
/// given, else of the first trace's directory, else "job".
pub fn default_job(paths: &[PathBuf]) -> String {
    let dir = paths.iter().find(|p| p.is_dir()).cloned().or_else(|| {
        paths
            .first()
            .and_then(|p| p.parent().map(Path::to_path_buf))
    });
    dir.and_then(|d| {
        std::fs::canonicalize(&d)
            .ok()
            .and_then(|c| c.file_name().map(|n| n.to_string_lossy().into_owned()))
    })
    .filter(|n| !n.is_empty())
    .unwrap_or_else(|| "job".into())
}

/// `gputrace dataset -o DIR`: each process trace analysed alone (with the environment
/// files beside it), its tables written as Parquet under `root`, partitioned Hive-style
/// by job, host, rank and window (`export::parquet::Partition`). One trace is in memory
/// at a time, so a job of any number of ranks is written in the memory of its largest
/// trace. A dataset grows: other jobs, ranks or windows are added beside what is there;
/// a partition file that exists is refused unless `force`. The root's
/// `_gputrace_dataset.json` names the layout's version and its tables.
pub fn dataset(
    paths: &[PathBuf],
    root: &Path,
    job: Option<&str>,
    force: bool,
    opts: &Options,
    warn: Warn<'_>,
) -> Result<DatasetWritten, Error> {
    use crate::export::parquet::{Parquet, Partition};
    let job = job.map_or_else(|| default_job(paths), str::to_string);
    let files = load::distinct_paths(&load::expand_dirs(paths)?, warn);
    let is_env = |p: &Path| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("gputrace-env-"))
    };
    let (envs, procs): (Vec<PathBuf>, Vec<PathBuf>) = files.into_iter().partition(|p| is_env(p));
    if procs.is_empty() {
        return Err(match envs.first() {
            Some(e) => Error::EnvironmentOnly(e.clone()),
            None => Error::NoTraces(paths.first().cloned().unwrap_or_default()),
        });
    }
    check_dataset_root(root)?;
    let mut out = DatasetWritten {
        root: root.to_path_buf(),
        job: job.clone(),
        ..Default::default()
    };
    for f in &procs {
        // The environment files of the trace's directory.
        let mut set = vec![f.clone()];
        set.extend(envs.iter().filter(|e| e.parent() == f.parent()).cloned());
        let traces = load::load_set(&set, &opts.load, warn)?;
        out.outcome.damaged |= traces.iter().any(|t| t.stats.damaged());
        let (report, timelines) = crate::report::analyze_timelines(&traces);
        let views = crate::export::overlay::views(&traces, &report, &timelines);
        let Some(v) = views.first() else {
            continue;
        };
        let part = Partition {
            job: job.clone(),
            host: v.process.host.clone(),
            rank: v.process.rank.map_or(-1, i64::from),
            window: v.trace.window.map_or(0, |w| w.0),
            pid: v.process.pid,
        };
        let probe = root
            .join("processes")
            .join(part.path())
            .join(format!("part-{}.parquet", part.pid));
        if probe.exists() && !force {
            return Err(Error::OutputExists(probe));
        }
        let mut ex = Parquet::create_partition(root, &part).map_err(Error::Output)?;
        crate::export::overlay::TimelineExporter::process(&mut ex, v).map_err(Error::Output)?;
        let order = vec![(v.index, v.trace.path.clone())];
        drop(views);
        drop(timelines);
        drop(traces);
        out.events += stream_into(&mut ex, order, opts.load.progress)?;
        crate::export::overlay::TimelineExporter::close(&mut ex).map_err(Error::Output)?;
        out.partitions.push(part.path());
    }
    Ok(out)
}

/// Whether a dataset's description (`_gputrace_dataset.json`'s text) is of the layout this
/// gputrace reads and writes; else why not.
fn check_layout(text: &str) -> Result<(), String> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("{DATASET_FILE} is not JSON: {e}"))?;
    let ver = v.get("version").and_then(|x| x.as_u64());
    if ver != Some(DATASET_VERSION as u64) {
        return Err(format!(
            "a dataset of layout version {} (this gputrace reads and writes {DATASET_VERSION})",
            ver.map_or("unknown".into(), |x| x.to_string())
        ));
    }
    Ok(())
}

/// Makes the dataset's root, or checks the one there: its description file must be of
/// this layout's version; a directory with files but no description is refused.
fn check_dataset_root(root: &Path) -> Result<(), Error> {
    let desc = root.join(DATASET_FILE);
    let bad = |why: String| {
        Error::Output(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {why}", root.display()),
        ))
    };
    match std::fs::read_to_string(&desc) {
        Ok(text) => check_layout(&text).map_err(bad),
        Err(_) => {
            if std::fs::read_dir(root).is_ok_and(|mut d| d.next().is_some()) {
                return Err(bad(format!(
                    "not a gputrace dataset (no {DATASET_FILE}) and not empty"
                )));
            }
            crate::export::create_private_dir(root).map_err(Error::Output)?;
            let tables: Vec<&str> = crate::export::parquet::table_names().collect();
            let v = serde_json::json!({
                "format": "gputrace dataset",
                "version": DATASET_VERSION,
                "partitioning": ["job", "host", "rank", "window"],
                "tables": tables,
                "about": "Parquet tables of gputrace traces: <table>/job=J/host=H/rank=R/window=W/part-<pid>.parquet; docs/dataset.md",
            });
            let text = serde_json::to_string_pretty(&v).unwrap_or_default();
            std::fs::write(&desc, text + "\n").map_err(Error::Output)
        }
    }
}

/// One side of `gputrace diff`: a report saved as JSON (`gputrace report --json`), or
/// a trace analysed now.
pub fn diff_side(
    path: &Path,
    opts: &Options,
    warn: Warn<'_>,
) -> Result<crate::report::diff::Side, Error> {
    let name = path.display().to_string();
    // A run's directory is its traces (and environment file), analysed below.
    if !path.is_dir() && is_json_report(path)? {
        let text = std::fs::read_to_string(path).map_err(Error::Output)?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            Error::Output(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{name}: {e}"),
            ))
        })?;
        return crate::report::diff::Side::from_json(&name, v).map_err(|e| {
            Error::Output(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{name}: {e}"),
            ))
        });
    }
    let traces = load::load_set(&[path.to_path_buf()], &opts.load, warn)?;
    let r = crate::report::analyze(&traces);
    Ok(crate::report::diff::Side::from_report(&name, &r))
}

/// Whether a file given to `diff` is a saved `report --json` (its first non-blank byte
/// is `{`) rather than a trace.
fn is_json_report(path: &Path) -> Result<bool, Error> {
    let mut head = [0u8; 64];
    let n = std::fs::File::open(path)
        .and_then(|mut f| io::Read::read(&mut f, &mut head))
        .map_err(|e| {
            Error::read(
                path,
                gputrace_format::ReadError::Io {
                    path: path.to_path_buf(),
                    source: e,
                },
            )
        })?;
    Ok(head[..n].iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{'))
}

/// `gputrace diff BEFORE AFTER`: two runs compared (text or JSON).
pub fn diff(
    before: &Path,
    after: &Path,
    format: Format,
    opts: &Options,
    out: &mut dyn Write,
    warn: Warn<'_>,
) -> Result<(), Error> {
    let b = diff_side(before, opts, warn)?;
    let a = diff_side(after, opts, warn)?;
    let d = crate::report::diff::diff(b, a);
    written(export::write_document(format, Document::Diff(&d), out).and_then(|_| out.flush()))
}

/// `gputrace fleet DATASET`: the job-level analysis of `job` (the dataset's only job
/// when None) on the embedded engine, holding at most `memory` bytes.
#[cfg(feature = "fleet")]
pub fn fleet(
    root: &Path,
    job: Option<&str>,
    memory: u64,
    spill: Option<&Path>,
) -> Result<crate::fleet::Fleet, crate::fleet::FleetError> {
    use crate::fleet::{engine::DataFusion, FleetError, Sql};
    let desc = root.join(DATASET_FILE);
    let text = std::fs::read_to_string(&desc).map_err(|_| {
        FleetError::Dataset(format!(
            "{}: not a gputrace dataset (no {DATASET_FILE}; write one with gputrace dataset)",
            root.display()
        ))
    })?;
    check_layout(&text).map_err(|why| FleetError::Dataset(format!("{}: {why}", root.display())))?;
    let mut e = DataFusion::open(
        root,
        memory.min(usize::MAX as u64) as usize,
        spill,
        crate::par::workers(),
    )?;
    let jobs: Vec<String> = e
        .rows("SELECT DISTINCT job FROM processes ORDER BY job")?
        .iter()
        .filter_map(|r| r.get("job").and_then(|v| v.as_str()).map(str::to_string))
        .collect();
    let job = match job {
        Some(j) if jobs.iter().any(|x| x == j) => j.to_string(),
        Some(j) => return Err(FleetError::NoJob(j.into(), jobs.join(", "))),
        None if jobs.len() == 1 => jobs[0].clone(),
        None if jobs.is_empty() => {
            return Err(FleetError::Dataset(format!(
                "{}: the dataset holds no process",
                root.display()
            )))
        }
        None => {
            return Err(FleetError::Dataset(format!(
                "{}: several jobs ({}); say which with --job",
                root.display(),
                jobs.join(", ")
            )))
        }
    };
    crate::fleet::analyze(&mut e, &job)
}

/// `gputrace fleet --results FILE`: the job-level analysis from the rows another engine
/// produced for the same queries (`scripts/fleet_spark.py`'s output).
#[cfg(feature = "fleet")]
pub fn fleet_from_results(
    path: &Path,
    job: Option<&str>,
) -> Result<crate::fleet::Fleet, crate::fleet::FleetError> {
    use crate::fleet::{FleetError, Replayed, Row};
    let bad = |why: String| FleetError::Dataset(format!("{}: {why}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let got = v
        .get("job")
        .and_then(|j| j.as_str())
        .ok_or_else(|| bad("no \"job\" (not the output of fleet_spark.py)".into()))?;
    if let Some(j) = job {
        if j != got {
            return Err(bad(format!("the results are of job {got:?}, not {j:?}")));
        }
    }
    let mut results = std::collections::BTreeMap::new();
    let map = v
        .get("results")
        .and_then(|r| r.as_object())
        .ok_or_else(|| bad("no \"results\" object".into()))?;
    for (name, rows) in map {
        let rows: Vec<Row> = rows
            .as_array()
            .map(|a| a.iter().filter_map(|r| r.as_object().cloned()).collect())
            .unwrap_or_default();
        results.insert(name.clone(), rows);
    }
    let mut e = Replayed {
        job: got.to_string(),
        results,
    };
    crate::fleet::analyze(&mut e, got)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_export_is_announced_with_its_size() {
        assert_eq!(size_words(Format::Chrome, 1_000_000), None);
        let w = size_words(Format::Chrome, 10_000_000).unwrap();
        assert!(
            w.contains("about 4.6 GB") && w.contains("--format perfetto"),
            "{w}"
        );
        let w = size_words(Format::Perfetto, 10_000_000).unwrap();
        assert!(w.contains("about 1.2 GB") && !w.contains("quarter"), "{w}");
        assert_eq!(size_words(Format::Parquet, 10_000_000), None);
    }
}
