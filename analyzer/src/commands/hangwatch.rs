//! `--hang-timeout`: while a job runs, watch the trace files it writes and, once the
//! latest stall report shows no GPU progress for the timeout, print the hang report on
//! stderr while the job still runs, once per stall. The job is never signalled.
//!
//! A file is read again only when it grew, and decoded only when its chunk headers say
//! it holds stall reports (the reader takes every intact chunk of a file still being
//! written, so a partial file is read as far as it goes).

use crate::model::trace::Trace;
use crate::report::stalls;
use crate::threads::{Spec, Worker, POLICY};
use gputrace_format::{self as fmt, protocol};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

/// `--hang-timeout` when not given.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The library's stall setting, and its threshold when unset (milliseconds of no GPU
/// progress before it writes a stall report, and between two reports of one stall).
pub const STALL_MS_VAR: &str = protocol::settings::STALL_MS;
pub const STALL_MS_DEFAULT: u64 = protocol::default_number(STALL_MS_VAR);
/// The smallest `GPUTRACE_STALL_MS` the library takes.
pub const STALL_MS_MIN: u64 = protocol::number_range(STALL_MS_VAR).0;

/// Reads a `--hang-timeout`: a duration (`60s`, `90`, `2m`, `500ms`), or `0` / `off`
/// for no watching.
pub fn parse_timeout(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if matches!(t, "0" | "0s" | "0ms" | "off") {
        return Ok(Duration::ZERO);
    }
    protocol::parse_duration(t).map_err(|e| format!("{e} (or 0 / off to turn hang reports off)"))
}

/// The `GPUTRACE_STALL_MS` a job gets so that its stall reports come in time for
/// `timeout`: half of it when it is shorter than twice the library's threshold and the
/// user did not set one (`user`: its value in the environment).
pub fn stall_ms_for(timeout: Duration, user: Option<&std::ffi::OsStr>) -> Option<u64> {
    if timeout.is_zero() || user.is_some_and(|v| !v.is_empty()) {
        return None;
    }
    let ms = timeout.as_millis() as u64;
    (ms < 2 * STALL_MS_DEFAULT).then_some((ms / 2).max(STALL_MS_MIN))
}

/// What to watch.
#[derive(Clone, Debug)]
pub enum Watch {
    /// Trace files that appear in a directory (those in `before` are older ones).
    Dir {
        dir: PathBuf,
        before: HashSet<PathBuf>,
    },
    /// One trace file (a window's).
    File(PathBuf),
}

impl Watch {
    fn files(&self) -> Vec<PathBuf> {
        match self {
            Watch::File(p) => vec![p.clone()],
            Watch::Dir { dir, before } => {
                let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
                    .map(|rd| {
                        rd.filter_map(|e| e.ok())
                            .map(|e| e.path())
                            .filter(|p| protocol::is_trace_file(p) && !before.contains(p))
                            .collect()
                    })
                    .unwrap_or_default();
                v.sort();
                v
            }
        }
    }
}

/// How often the files are looked at for a timeout.
fn period(timeout: Duration) -> Duration {
    (timeout / 4).clamp(Duration::from_millis(200), Duration::from_secs(5))
}

/// The watcher's thread (one at a time in the command's process).
static WATCHER: Worker = Worker::new();

/// Longest wait for the watcher to end (it looks at the stop request between files).
const STOP_WAIT: Duration = Duration::from_secs(60);

/// A watcher thread; stopped by [`Watcher::stop`] or on drop.
pub struct Watcher(());

impl Watcher {
    /// Starts watching; `None` when `timeout` is zero (off), a watcher runs already or
    /// no thread could be made.
    pub fn start(
        what: Watch,
        timeout: Duration,
        say: impl Fn(&[String]) + Send + 'static,
    ) -> Option<Watcher> {
        if timeout.is_zero() {
            return None;
        }
        let spec = Spec::new(
            "gputrace-hangwatch",
            "internal error in the hang watcher; no more hang reports",
        );
        match WATCHER.start(&POLICY, spec, move || watch(what, timeout, say)) {
            Ok(true) => Some(Watcher(())),
            _ => None,
        }
    }

    pub fn stop(self) {}
}

impl Drop for Watcher {
    fn drop(&mut self) {
        WATCHER.stop(STOP_WAIT);
    }
}

/// Whether the file's chunks hold stall reports (the reader's tag census of every chunk).
fn has_stalls(p: &std::path::Path) -> bool {
    fmt::open_file(p)
        .map(|mut r| r.census().of(&[fmt::TAG_STALL]) > 0)
        .unwrap_or(false)
}

/// What a pass over the chunks a file gained found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scan {
    /// A stall report in a new chunk.
    Stalls,
    /// No stall report in the new chunks.
    Nothing,
    /// Cannot tell from the headers (an uncompressed chunk, or something that is not a
    /// sane chunk header): the reader's census decides.
    Unknown,
}

/// Reads the headers of the whole chunks written since `pos` (the file offset where the
/// last pass stopped; 0 at first) and the tag census compressed chunks carry, and moves
/// `pos` past them. A chunk still being written is left for the next pass.
fn scan_new(path: &std::path::Path, pos: &mut u64) -> std::io::Result<Scan> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    *pos = (*pos).max(fmt::HEADER_LEN as u64);
    let head = fmt::CHUNK_HEADER_LEN as u64;
    let mut found = Scan::Nothing;
    while *pos + head <= len {
        f.seek(SeekFrom::Start(*pos))?;
        let mut h = [0u8; fmt::CHUNK_HEADER_LEN];
        f.read_exact(&mut h)?;
        let payload = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as u64;
        if &h[..4] != fmt::CHUNK_MAGIC || payload > fmt::MAX_CHUNK_PAYLOAD as u64 {
            return Ok(Scan::Unknown);
        }
        if *pos + head + payload > len {
            break;
        }
        if h[12] == fmt::ChunkKind::EventsZstd as u8 {
            // raw_len u32 | tags u8 | (tag u8, count u32) x tags | zstd frame
            let mut c = vec![0u8; payload.min(5 + 255 * 5) as usize];
            f.read_exact(&mut c)?;
            let tags = c.get(4).copied().unwrap_or(0) as usize;
            let census = c.get(5..5 + tags * 5).unwrap_or(&[]);
            if census.chunks_exact(5).any(|e| e[0] == fmt::TAG_STALL) {
                found = Scan::Stalls;
            }
        } else if h[12] == fmt::ChunkKind::Events as u8 && found == Scan::Nothing {
            found = Scan::Unknown;
        }
        *pos += head + payload;
    }
    Ok(found)
}

fn watch(what: Watch, timeout: Duration, say: impl Fn(&[String])) {
    let timeout_ns = timeout.as_nanos().min(u64::MAX as u128) as u64;
    // Per file: its size when last looked at, and where the chunk scan stopped.
    let mut seen: HashMap<PathBuf, (u64, u64)> = HashMap::new();
    let mut reported: HashSet<(PathBuf, u64)> = HashSet::new();
    loop {
        if WATCHER.wait_stop(period(timeout)) {
            return;
        }
        for p in what.files() {
            let Ok(size) = std::fs::metadata(&p).map(|m| m.len()) else {
                continue;
            };
            let (last_size, pos) = seen.entry(p.clone()).or_insert((u64::MAX, 0));
            if *last_size == size {
                continue;
            }
            *last_size = size;
            // Decoded only when a new stall report came (or the headers cannot say).
            let load = match scan_new(&p, pos).unwrap_or(Scan::Unknown) {
                Scan::Stalls => true,
                Scan::Nothing => false,
                Scan::Unknown => has_stalls(&p),
            };
            if !load {
                continue;
            }
            // One decode worker: the job is running beside us.
            let Ok(t) = Trace::load_with(&p, 1, |_, _| {}) else {
                continue;
            };
            let Some((id, gap, h)) = stalls::live(&t, timeout_ns) else {
                continue;
            };
            if !reported.insert((p.clone(), id)) {
                continue;
            }
            let (pid, path) = (t.meta.pid, t.path.clone());
            // A stuck collective: what the other ranks' traces say (which never arrived).
            let h = if h.op.nccl_kernel || h.nccl.is_some() {
                with_other_ranks(&what, t).unwrap_or(h)
            } else {
                h
            };
            say(&stalls::live_lines(&h, pid, &path, gap));
        }
    }
}

/// The hang of trace `t` as the report on every process trace in the watched place
/// gives it: with each rank's NCCL state on the stuck communicator. None when there is
/// no other trace, or the report has no hang for `t`.
fn with_other_ranks(what: &Watch, t: Trace) -> Option<stalls::Hang> {
    let others: Vec<PathBuf> = what.files().into_iter().filter(|f| *f != t.path).collect();
    if others.is_empty() {
        return None;
    }
    let path = t.path.display().to_string();
    let mut traces = vec![t];
    for f in others {
        if let Ok(x) = Trace::load_with(&f, 1, |_, _| {}) {
            if !x.meta.is_environment() {
                traces.push(x);
            }
        }
    }
    if traces.len() < 2 {
        return None;
    }
    let r = crate::report::analyze(&traces);
    let f = r.findings.iter().find(|f| {
        f.id == crate::report::FindingId::Hang
            && f.process.and_then(|i| r.processes.get(i)).map(|p| &p.path) == Some(&path)
    })?;
    f.hang.as_deref().cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_parse_with_zero_for_off() {
        assert_eq!(parse_timeout("0"), Ok(Duration::ZERO));
        assert_eq!(parse_timeout("off"), Ok(Duration::ZERO));
        assert_eq!(parse_timeout("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_timeout("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_timeout("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_timeout("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_timeout("soon").is_err());
        assert!(parse_timeout("-1s").is_err());
    }

    /// A trace written in pieces: the scan sees the stall report only once its chunk is
    /// whole, and not again.
    #[test]
    fn the_chunk_scan_finds_new_stall_reports_only() {
        let meta = fmt::Meta::default();
        let mut w = fmt::ChunkWriter::new(Vec::new(), &meta).unwrap();
        let chunk = |w: &mut fmt::ChunkWriter<Vec<u8>>, ev: &[fmt::Event], kind| {
            let mut e = fmt::Encoder::new();
            for x in ev {
                e.push(x);
            }
            if kind == fmt::ChunkKind::EventsZstd {
                w.write_events(&mut e).unwrap();
            } else {
                let (p, n) = e.take();
                w.write_chunk(kind, &p, n).unwrap();
            }
        };
        let state = fmt::Event::State {
            ts: 5,
            state: 1,
            reason: 0,
        };
        let stall = fmt::Event::Stall(fmt::Stall {
            ts: 10,
            since: 1,
            id: 1,
            ..Default::default()
        });
        chunk(
            &mut w,
            std::slice::from_ref(&state),
            fmt::ChunkKind::EventsZstd,
        );
        let first = w.get_ref().len();
        chunk(&mut w, &[state.clone(), stall], fmt::ChunkKind::EventsZstd);
        let second = w.get_ref().len();
        chunk(&mut w, &[state], fmt::ChunkKind::Events);
        let bytes = w.into_inner();
        let dir = std::env::temp_dir().join(format!("gputrace-hangwatch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("t.gtrace");
        let mut pos = 0;
        // Up to the first chunk, then half of the second: nothing yet.
        std::fs::write(&p, &bytes[..first]).unwrap();
        assert_eq!(scan_new(&p, &mut pos).unwrap(), Scan::Nothing);
        assert_eq!(pos, first as u64);
        std::fs::write(&p, &bytes[..(first + second) / 2]).unwrap();
        assert_eq!(scan_new(&p, &mut pos).unwrap(), Scan::Nothing);
        assert_eq!(pos, first as u64);
        // The second whole: its stall is seen, once.
        std::fs::write(&p, &bytes[..second]).unwrap();
        assert_eq!(scan_new(&p, &mut pos).unwrap(), Scan::Stalls);
        assert_eq!(scan_new(&p, &mut pos).unwrap(), Scan::Nothing);
        // An uncompressed chunk: the headers cannot say.
        std::fs::write(&p, &bytes).unwrap();
        assert_eq!(scan_new(&p, &mut pos).unwrap(), Scan::Unknown);
        assert!(has_stalls(&p));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_short_timeout_asks_the_library_for_stall_reports_at_half_of_it() {
        let s = Duration::from_secs;
        assert_eq!(stall_ms_for(s(60), None), None);
        assert_eq!(stall_ms_for(s(10), None), None);
        assert_eq!(stall_ms_for(s(6), None), Some(3000));
        assert_eq!(stall_ms_for(s(2), None), Some(1000));
        assert_eq!(stall_ms_for(Duration::ZERO, None), None);
        assert_eq!(stall_ms_for(Duration::from_millis(50), None), Some(100));
        // The user's own setting stands.
        assert_eq!(stall_ms_for(s(2), Some("7000".as_ref())), None);
        assert_eq!(stall_ms_for(s(2), Some("".as_ref())), Some(1000));
    }
}
