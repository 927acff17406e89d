//! Text for people: the report (verdict, findings, time breakdown) and the per-device
//! summaries.

use super::api::{Document, DocumentExporter};
use std::io::{self, Write};

/// The text exporter.
pub struct Text;

impl DocumentExporter for Text {
    fn write(&mut self, doc: Document<'_>, out: &mut dyn Write) -> io::Result<()> {
        match doc {
            Document::Report(r) => out.write_all(crate::report::render_text(r).as_bytes()),
            Document::Summaries(all) => {
                for s in all {
                    writeln!(out, "{}", crate::report::summary::render(s))?;
                }
                Ok(())
            }
            Document::Diff(d) => out.write_all(crate::report::diff::render_text(d).as_bytes()),
        }
    }
}
