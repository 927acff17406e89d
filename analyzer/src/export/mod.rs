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

mod api;
pub mod chrome;
pub mod html;
pub mod json;
pub mod jsonl;
pub mod overlay;
pub mod parquet;
pub mod perfetto;
pub mod proto;
pub mod slices;
pub mod stream;
pub mod summary;
pub mod text;

pub use api::*;

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
