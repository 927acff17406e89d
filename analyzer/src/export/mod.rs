//! Every way gputrace writes out what it read or found, behind two seams.
//!
//! * [`DocumentExporter`]: a finished analysis (a [`Document`]: the report, the
//!   per-device summaries) written whole. One file per format: [`text`], [`json`].
//! * [`EventExporter`]: a trace's events, handed over one at a time in time order by
//!   [`stream::EventStream`], which reads the file in bounded memory however large it
//!   is. One file per format: [`jsonl`] (`gputrace dump`).
//!
//! A new output is one new file: a format of whole documents implements
//! [`DocumentExporter`], a format of events (a timeline for Perfetto or Chrome, a
//! columnar file) implements [`EventExporter`]; either gets a [`Format`] variant, and
//! the compiler points at the two factory functions below. A new kind of document (a
//! diff of two reports) is a [`Document`] variant, and the compiler points at every
//! format that must say how to write it.
//!
//! A new kind of event in the trace format (an `Event` variant with its own tag) reaches
//! the event exporters in these places, in the same order everywhere (the order equal
//! timestamps are written in):
//! Nowhere, to begin with: a kind without a [`TraceEvent`] variant of its own reaches
//! every exporter as [`TraceEvent::Other`], shown from its definition in the event
//! table (dump: a line typed by its name, with its fields; timelines: an instant or a
//! slice with its fields as arguments). A kind that deserves more (its own track, its
//! own line format, a table of the analysis) gets, in the same order everywhere (the
//! order equal timestamps are written in):
//! 1. [`TraceEvent`]: a variant, and its timestamp in [`TraceEvent::ts`].
//! 2. [`stream`]: a `Kind`, a `Rec` variant (boxed if larger than the others: the
//!    reorder buffer's entry size is tested), and `Rec::of`, `kind_tie` (the key
//!    [`crate::model::trace::Trace`] sorts that table by) and `with_event`.
//! 3. The exporters that show it differently from the generic way.
//! 4. The test oracle `analyzer/tests/common/legacy_dump.rs` (the same line from the
//!    trace's table) and the random traces of `analyzer/tests/dump.rs`, which compare
//!    the two byte for byte.

pub mod chrome;
pub mod json;
pub mod jsonl;
pub mod overlay;
pub mod parquet;
pub mod perfetto;
pub mod proto;
pub mod slices;
pub mod stream;
pub mod text;

use crate::report::summary::Summary;
use crate::report::Report;
use gputrace_format::{self as fmt, Meta};
use std::collections::HashMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// An output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// Text for people (report, summary).
    Text,
    /// One pretty-printed JSON document (report, summary; schema in the docs).
    Json,
    /// One JSON object per event per line (dump).
    Jsonl,
    /// Perfetto's native protobuf trace of the job (timeline).
    Perfetto,
    /// Chrome / Kineto JSON trace, one file per process (timeline; Holistic Trace
    /// Analysis reads it).
    Chrome,
    /// Parquet tables of the job (kernels, copies, API calls, NCCL, NVTX, idle gaps,
    /// findings).
    Parquet,
}

impl Format {
    /// Every format, for listings and argument parsing.
    pub const ALL: [Format; 6] = [
        Format::Text,
        Format::Json,
        Format::Jsonl,
        Format::Perfetto,
        Format::Chrome,
        Format::Parquet,
    ];

    /// The name users type (`--format NAME`).
    pub fn name(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Json => "json",
            Format::Jsonl => "jsonl",
            Format::Perfetto => "perfetto",
            Format::Chrome => "chrome",
            Format::Parquet => "parquet",
        }
    }

    pub fn from_name(name: &str) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// A finished analysis, ready to be written.
#[derive(Clone, Copy, Debug)]
pub enum Document<'a> {
    Report(&'a Report),
    /// One summary per trace, in the order given.
    Summaries(&'a [Summary]),
    /// Two runs compared (`gputrace diff`).
    Diff(&'a crate::report::diff::Diff),
}

/// Writes whole documents in one format.
pub trait DocumentExporter {
    fn write(&mut self, doc: Document<'_>, out: &mut dyn Write) -> io::Result<()>;
}

/// Receives traces' events in time order (see [`stream`] for the exact order) and
/// writes them as it gets them (py-spy's `Recorder`, Kineto's `ActivityLogger`).
///
/// Calls: `begin`, then for each trace (several for the ranks of a job, one after the
/// other) `begin_trace`, its events, `end_trace`; then `finish`. A format with a
/// header, a footer or an index writes it in `begin` / `finish`.
pub trait EventExporter {
    /// Before the first trace.
    fn begin(&mut self, _out: &mut dyn Write) -> io::Result<()> {
        Ok(())
    }
    /// Before a trace's first event.
    fn begin_trace(&mut self, _cx: &TraceContext<'_>, _out: &mut dyn Write) -> io::Result<()> {
        Ok(())
    }
    fn event(
        &mut self,
        cx: &TraceContext<'_>,
        ev: &TraceEvent<'_>,
        out: &mut dyn Write,
    ) -> io::Result<()>;
    /// After a trace's last event.
    fn end_trace(&mut self, _cx: &TraceContext<'_>, _out: &mut dyn Write) -> io::Result<()> {
        Ok(())
    }
    /// After the last trace.
    fn finish(&mut self, _out: &mut dyn Write) -> io::Result<()> {
        Ok(())
    }
}

/// The exporter of whole documents in `format`; `None` for a format of events.
pub fn document_exporter(format: Format) -> Option<Box<dyn DocumentExporter>> {
    match format {
        Format::Text => Some(Box::new(text::Text)),
        Format::Json => Some(Box::new(json::Json)),
        Format::Jsonl | Format::Perfetto | Format::Chrome | Format::Parquet => None,
    }
}

/// The exporter of events in `format`; `None` for a format of whole documents.
pub fn event_exporter(format: Format) -> Option<Box<dyn EventExporter>> {
    match format {
        Format::Jsonl => Some(Box::new(jsonl::Jsonl::default())),
        Format::Text | Format::Json | Format::Perfetto | Format::Chrome | Format::Parquet => None,
    }
}

/// The exporter of a whole job's timeline in `format`, writing under `out` (a file or
/// a directory, as the format has it; see [`timeline_output`]); `None` for a format
/// that is not one of those. `processes`: how many processes the job has.
pub fn timeline_exporter(
    format: Format,
    out: &Path,
    processes: usize,
) -> Option<io::Result<Box<dyn overlay::TimelineExporter>>> {
    Some(match format {
        Format::Perfetto => perfetto::Perfetto::create(out)
            .map(|e| Box::new(e) as Box<dyn overlay::TimelineExporter>),
        Format::Chrome => chrome::Chrome::create(out, processes)
            .map(|e| Box::new(e) as Box<dyn overlay::TimelineExporter>),
        Format::Parquet => {
            parquet::Parquet::create(out).map(|e| Box::new(e) as Box<dyn overlay::TimelineExporter>)
        }
        Format::Text | Format::Json | Format::Jsonl => return None,
    })
}

/// Creates (or empties) an export file readable by its owner only (mode 0600, as the
/// traces are): it holds what the trace holds (command lines, paths, kernel names). A
/// regular file that was there with a wider mode is narrowed before anything is written
/// to it; a device or pipe (`/dev/stdout`) is left as it is.
pub fn create_private(path: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    let md = f.metadata()?;
    if md.is_file() && md.permissions().mode() & 0o077 != 0 {
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(f)
}

/// Creates a directory for an export's files, and its missing parents, private (0700,
/// as `gputrace run` makes the trace directory); one that exists is left as it is.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Where a timeline format writes when the user names nothing: beside the first trace
/// (`x.gtrace` -> `x.pftrace`, `x.json` or, for several traces, `x-chrome/`,
/// `x-parquet/`).
pub fn timeline_output(format: Format, first: &Path, processes: usize) -> PathBuf {
    let suffix = match format {
        Format::Perfetto => ".pftrace",
        Format::Chrome if processes <= 1 => ".json",
        Format::Chrome => "-chrome",
        Format::Parquet => "-parquet",
        Format::Text | Format::Json | Format::Jsonl => ".out",
    };
    overlay::default_output(first, suffix)
}

/// What every event of one trace shares: the file, its metadata, its strings.
pub struct TraceContext<'a> {
    pub path: &'a Path,
    pub meta: &'a Meta,
    strings: &'a HashMap<u32, String>,
}

impl<'a> TraceContext<'a> {
    pub fn new(path: &'a Path, meta: &'a Meta, strings: &'a HashMap<u32, String>) -> Self {
        TraceContext {
            path,
            meta,
            strings,
        }
    }

    /// An interned string by id ("" for an id never defined).
    pub fn str(&self, id: u32) -> &'a str {
        self.strings.get(&id).map(|s| s.as_str()).unwrap_or("")
    }
}

/// One event of a trace as exporters receive it. GPU records (kernels, copies,
/// memsets) without timestamps are left out, and in a window trace those that began
/// before the window have their start clipped to it, as in the analysis.
///
/// Events come ordered by [`TraceEvent::ts`]; equal timestamps in the order of these
/// variants.
#[derive(Clone, Copy, Debug)]
pub enum TraceEvent<'a> {
    Device(&'a fmt::Device),
    Kernel(&'a fmt::Kernel),
    Memcpy(&'a fmt::Memcpy),
    Memset(&'a fmt::Memset),
    Sync(&'a fmt::Sync),
    Memory(&'a fmt::Memory),
    Api(&'a fmt::Api),
    State {
        ts: u64,
        state: u8,
        reason: u32,
    },
    Dropped {
        ts: u64,
        source: u8,
        count: u64,
    },
    Clock {
        cupti_ns: u64,
        mono_ns: u64,
        real_ns: u64,
    },
    HostCopy(&'a fmt::HostCopy),
    HostCall(&'a fmt::HostCall),
    HostAlloc(&'a fmt::HostAlloc),
    Nccl(&'a fmt::Nccl),
    NcclComm(&'a fmt::NcclComm),
    Nvtx(&'a fmt::Nvtx),
    Fact(&'a fmt::Fact),
    GpuSample(&'a fmt::GpuSample),
    GpuProcess(&'a fmt::GpuProcess),
    GpuEvent(&'a fmt::GpuEvent),
    /// Host samples (the library's sampler).
    ThreadCpu(&'a fmt::ThreadCpu),
    ProcSample(&'a fmt::ProcSample),
    MachineSample(&'a fmt::MachineSample),
    CpuLimits(&'a fmt::CpuLimits),
    /// GPU hardware counters over an interval (CUPTI PM sampling).
    CounterSample(&'a fmt::CounterSample),
    /// A thread's name (the last one recorded for it).
    Thread {
        tid: u32,
        name: u32,
    },
    /// A Python stack (its definition; written before the records, like thread names).
    PyStack(&'a fmt::PyStack),
    /// The Python stack a host call was made from.
    CallSite(&'a fmt::CallSite),
    /// A periodic sample of a thread's Python stack.
    PySample(&'a fmt::PySample),
    /// An event of a kind without a variant of its own: exporters show it through the
    /// event table's accessors ([`fmt::Event::name`], [`fmt::Event::span`],
    /// [`fmt::Event::fields`]). Sorts after every kind above at equal times.
    Other(&'a fmt::Event),
}

impl TraceEvent<'_> {
    /// Where the event sorts in time: its start (a clock pair: its realtime reading;
    /// devices and thread names: 0, before everything).
    pub fn ts(&self) -> u64 {
        match *self {
            TraceEvent::Device(_) | TraceEvent::Thread { .. } | TraceEvent::PyStack(_) => 0,
            TraceEvent::Kernel(k) => k.start,
            TraceEvent::Memcpy(c) => c.start,
            TraceEvent::Memset(s) => s.start,
            TraceEvent::Sync(s) => s.start,
            TraceEvent::Memory(m) => m.ts,
            TraceEvent::Api(a) => a.start,
            TraceEvent::State { ts, .. } | TraceEvent::Dropped { ts, .. } => ts,
            TraceEvent::Clock { real_ns, .. } => real_ns,
            TraceEvent::HostCopy(c) => c.start,
            TraceEvent::HostCall(c) => c.start,
            TraceEvent::HostAlloc(a) => a.start,
            TraceEvent::Nccl(n) => n.start,
            TraceEvent::NcclComm(n) => n.start,
            TraceEvent::Nvtx(n) => n.ts,
            TraceEvent::Fact(f) => f.ts,
            TraceEvent::GpuSample(g) => g.ts,
            TraceEvent::GpuProcess(p) => p.ts,
            TraceEvent::GpuEvent(e) => e.ts,
            TraceEvent::ThreadCpu(x) => x.ts,
            TraceEvent::ProcSample(x) => x.ts,
            TraceEvent::MachineSample(x) => x.ts,
            TraceEvent::CpuLimits(x) => x.ts,
            TraceEvent::CallSite(c) => c.ts,
            TraceEvent::CounterSample(x) => x.start,
            TraceEvent::PySample(x) => x.ts,
            TraceEvent::Other(e) => e.ts().unwrap_or(0),
        }
    }
}

/// Writes a whole document in `format` (text or JSON).
pub fn write_document(format: Format, doc: Document<'_>, out: &mut dyn Write) -> io::Result<()> {
    match document_exporter(format) {
        Some(mut e) => e.write(doc, out),
        None => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is a format of events, not of documents", format.name()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_format_has_exactly_one_kind_of_exporter() {
        for f in Format::ALL {
            assert_eq!(Format::from_name(f.name()), Some(f));
            let dir = std::env::temp_dir().join(format!(
                "gputrace-formats-{}-{}",
                std::process::id(),
                f.name()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            let kinds = [
                document_exporter(f).is_some(),
                event_exporter(f).is_some(),
                timeline_exporter(f, &dir.join("out"), 1).is_some(),
            ];
            let _ = std::fs::remove_dir_all(&dir);
            assert_eq!(kinds.iter().filter(|&&k| k).count(), 1, "{}", f.name());
        }
        assert_eq!(Format::from_name("yaml"), None);
    }
}
