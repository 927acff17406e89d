//! `gputrace report --html FILE`: one self-contained page (no network, no server) with
//! the verdict, the run's phases, a zoomable timeline per device and stream with every
//! idle gap coloured by its cause, the step times, the time breakdown, the findings
//! with their evidence, the GPU counters and, for several ranks, a rank x step heat map.
//!
//! The page holds the `--json` document unchanged (`report`), so every figure it shows
//! is one the JSON has; beside it, for the timeline, what the analysis placed on each
//! process's time line and the GPU's work per stream (`tracks`). The page's script
//! (`report.html`) draws both; nothing else is fetched.
//!
//! Size: a timeline of millions of kernels would make a page of hundreds of MB. The
//! work of a stream is drawn as busy stretches: neighbouring operations whose gap is
//! under the track's resolution (its span / [`RESOLUTION`]) are joined, and so are idle
//! pieces of one cause; the page says so. Exact per-kernel records are the Perfetto
//! export's job.

use crate::model::trace::Trace;
use crate::report::view::{Report, Timeline};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{self, Write};

/// Distinct instants across a track's span: stretches closer than span / RESOLUTION
/// are drawn as one.
pub const RESOLUTION: u64 = 200_000;

const TEMPLATE: &str = include_str!("report.html");
const MARK: &str = "\"__GPUTRACE_DATA__\"";

/// What the page's timeline draws of one process. Times are nanoseconds after the
/// start of its trace (the `--json` document's origin).
#[derive(Serialize)]
struct Track {
    /// Index in the report's `processes`.
    process: usize,
    /// Nanoseconds: stretches closer than this were joined.
    resolution_ns: u64,
    streams: Vec<StreamTrack>,
    /// Per device: its idle pieces as flat triples (start, end, cause index into
    /// `causes`).
    idle: Vec<IdleTrack>,
    /// Step start times (step i is [steps[i], steps[i+1])).
    steps: Vec<u64>,
}

#[derive(Serialize)]
struct StreamTrack {
    device: u32,
    stream: u32,
    /// Operations on it (kernels, copies, memsets).
    ops: u64,
    /// Flat pairs: start, end of each busy stretch.
    busy: Vec<u64>,
}

#[derive(Serialize)]
struct IdleTrack {
    device: u32,
    pieces: Vec<u64>,
}

#[derive(Serialize)]
struct Page<'a> {
    report: &'a Report,
    causes: Vec<&'static str>,
    tracks: Vec<Track>,
}

/// Writes the page for an analysed job: `traces` and `timelines` as
/// [`crate::report::analyze_timelines`] gave them with `report`.
pub fn write(
    report: &Report,
    traces: &[Trace],
    timelines: &[Timeline],
    out: &mut dyn Write,
) -> io::Result<()> {
    let causes: Vec<&'static str> = crate::report::Cause::ALL.iter().map(|c| c.id()).collect();
    let mut tracks = Vec::new();
    for (index, p) in report.processes.iter().enumerate() {
        let Some(tl) = timelines.iter().find(|tl| tl.process == index) else {
            continue;
        };
        let Some(t) = traces.get(tl.trace) else {
            continue;
        };
        tracks.push(track(index, p.trace_start_ns, p.span_ns, t, tl));
    }
    let page = Page {
        report,
        causes,
        tracks,
    };
    // Inside <script>, "</" would end the element: JSON allows "<\/" for it.
    let json = serde_json::to_string(&page)
        .map_err(io::Error::other)?
        .replace("</", "<\\/");
    let (head, tail) = TEMPLATE
        .split_once(MARK)
        .ok_or_else(|| io::Error::other("the page template has no data mark"))?;
    out.write_all(head.as_bytes())?;
    out.write_all(json.as_bytes())?;
    out.write_all(tail.as_bytes())?;
    out.flush()
}

fn track(process: usize, t0: u64, span: u64, t: &Trace, tl: &Timeline) -> Track {
    let res = (span / RESOLUTION).max(1);
    let rel = |ts: u64| ts.saturating_sub(t0);
    // (device, stream) -> operations in start order.
    let mut by_stream: BTreeMap<(u32, u32), Vec<(u64, u64)>> = BTreeMap::new();
    let work = t
        .kernels
        .iter()
        .map(|k| (k.device, k.stream, k.start, k.end))
        .chain(
            t.memcpys
                .iter()
                .map(|m| (m.device, m.stream, m.start, m.end)),
        )
        .chain(
            t.memsets
                .iter()
                .map(|m| (m.device, m.stream, m.start, m.end)),
        );
    for (d, s, a, b) in work {
        if b > a {
            by_stream.entry((d, s)).or_default().push((rel(a), rel(b)));
        }
    }
    let streams = by_stream
        .into_iter()
        .map(|((device, stream), mut ops)| {
            ops.sort_unstable();
            StreamTrack {
                device,
                stream,
                ops: ops.len() as u64,
                busy: join(ops.into_iter(), res),
            }
        })
        .collect();
    let mut idle: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for p in &tl.idle {
        let v = idle.entry(p.device).or_default();
        let (a, b, c) = (rel(p.start), rel(p.end), p.cause as u64);
        let n = v.len();
        // The same cause again within the resolution: one piece.
        if n >= 3 && v[n - 1] == c && a <= v[n - 2] + res {
            v[n - 2] = v[n - 2].max(b);
        } else if b > a {
            v.extend([a, b, c]);
        }
    }
    Track {
        process,
        resolution_ns: res,
        streams,
        idle: idle
            .into_iter()
            .map(|(device, pieces)| IdleTrack { device, pieces })
            .collect(),
        steps: tl.steps.iter().map(|&s| rel(s)).collect(),
    }
}

/// Joins intervals in start order whose gap is at most `res` into flat (start, end) pairs.
fn join(ops: impl Iterator<Item = (u64, u64)>, res: u64) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::new();
    for (a, b) in ops {
        let n = out.len();
        if n >= 2 && a <= out[n - 1] + res {
            out[n - 1] = out[n - 1].max(b);
        } else {
            out.extend([a, b]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_stretches_join_and_far_ones_stay_apart() {
        let ops = [(0, 10), (12, 20), (5, 18), (100, 110)];
        assert_eq!(join(ops.into_iter(), 2), vec![0, 20, 100, 110]);
        assert_eq!(join(ops.into_iter(), 1), vec![0, 10, 12, 20, 100, 110]);
    }

    #[test]
    fn the_template_has_one_data_mark() {
        assert_eq!(TEMPLATE.matches(MARK).count(), 1);
    }
}
