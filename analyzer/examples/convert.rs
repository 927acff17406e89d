//! Rewrites a trace in this build's format (events chunks zstd-compressed unless
//! `--uncompressed`), chunk for chunk, and checks the result reads back to the same
//! metadata and events before writing it. Used to bring the bundled examples to the
//! current format:
//!
//! ```text
//! cargo run -p gputrace-analyzer --example convert -- IN.gtrace OUT.gtrace [--uncompressed]
//! ```
//!
//! A trace that lost records (damaged, cut short) or holds events this reader does not
//! know is refused: the rewrite could not be lossless.

use anyhow::{bail, Context, Result};
use gputrace_format::{self as fmt, ChunkWriter, Encoder, Event};
use std::path::{Path, PathBuf};

/// The metadata and every events chunk of a trace, in file order.
fn chunks(path: &Path, data: &[u8]) -> Result<(fmt::Meta, Vec<Vec<Event>>, fmt::ReadStats)> {
    let mut r = fmt::open(path, data)?;
    let mut out = Vec::new();
    r.for_each_chunk_par(1, Vec::new, |c: Vec<Event>| out.push(c), |_, _| {});
    Ok((r.meta.clone(), out, r.stats.clone()))
}

fn convert(input: &Path, output: &Path, compress: bool) -> Result<()> {
    let data = std::fs::read(input).with_context(|| format!("cannot read {}", input.display()))?;
    let (meta, chunks_in, stats) = chunks(input, &data)?;
    if let Some(w) = stats.warning() {
        bail!("{}: {w}; not rewritten", input.display());
    }
    if stats.unknown_events > 0 {
        bail!(
            "{}: {} events of kinds this build does not know; not rewritten",
            input.display(),
            stats.unknown_events
        );
    }
    let mut w = ChunkWriter::new(Vec::new(), &meta)?;
    if !compress {
        w = w.without_compression();
    }
    // One chunk out for each chunk in; the encoder keeps kernel shapes across chunks
    // as the collector's does. The last holds the end record (a trace read without a
    // warning has one): written as the end, as the collector writes it.
    let mut enc = Encoder::new();
    for (i, c) in chunks_in.iter().enumerate() {
        for e in c {
            enc.push(e);
        }
        if i + 1 == chunks_in.len() {
            w.write_end(&mut enc)?;
        } else {
            w.write_events(&mut enc)?;
        }
    }
    let bytes = w.into_inner();
    let (meta2, chunks_out, stats2) = chunks(output, &bytes)?;
    let flat = |c: &[Vec<Event>]| c.iter().flatten().cloned().collect::<Vec<Event>>();
    if meta2 != meta || flat(&chunks_out) != flat(&chunks_in) || stats2.warning().is_some() {
        bail!(
            "{}: the rewrite does not read back the same",
            input.display()
        );
    }
    let tmp = output.with_extension("gtrace.tmp");
    std::fs::write(&tmp, &bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, output)?;
    eprintln!(
        "{} (format {}.{}, {} bytes) -> {} (format {}.{}, {} bytes): {} chunks, {} events, the same",
        input.display(),
        stats.major,
        stats.minor,
        data.len(),
        output.display(),
        fmt::VERSION_MAJOR,
        fmt::VERSION_MINOR,
        bytes.len(),
        chunks_in.len(),
        stats.events
    );
    Ok(())
}

fn main() -> Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let compress = !args.iter().any(|a| a == "--uncompressed");
    args.retain(|a| a != "--uncompressed");
    let [input, output] = &args[..] else {
        bail!("usage: convert IN.gtrace OUT.gtrace [--uncompressed]");
    };
    convert(&PathBuf::from(input), &PathBuf::from(output), compress)
}
