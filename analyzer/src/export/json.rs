//! JSON: one pretty-printed document and a newline (the report's schema is in the
//! docs; summaries are a list, one per trace).

use super::api::{Document, DocumentExporter};
use std::io::{self, Write};

/// The JSON exporter.
pub struct Json;

impl DocumentExporter for Json {
    fn write(&mut self, doc: Document<'_>, out: &mut dyn Write) -> io::Result<()> {
        let mut out = out;
        match doc {
            Document::Report(r) => serde_json::to_writer_pretty(&mut out, r)?,
            Document::Summaries(all) => serde_json::to_writer_pretty(&mut out, all)?,
            Document::Diff(d) => serde_json::to_writer_pretty(&mut out, d)?,
        }
        writeln!(out)
    }
}
