//! Hangs: GPU work that never completed.
//!
//! Two ways a trace shows one:
//! * **Stall records** (`Stall`, `StallOp`, `StallThread`): the library's progress
//!   watchdog saw launched GPU work make no progress for a while and wrote what was
//!   outstanding and where every thread was, repeating the report while the stall
//!   lasted. The stall is a hang when one of its outstanding operations never completed
//!   later in the trace (no GPU record with its correlation id). A stall whose work all
//!   completed was a long operation: a note, no finding.
//! * **The end of the trace** (traces without stall records): the trace ended abnormally
//!   (a signal, an abort, or no end record at all), the host's last calls launched GPU
//!   work that has no GPU record, none of it after the last GPU record, and the host
//!   made no call for at least [`SILENT_END_NS`] before the end. An estimate: the
//!   records may also have been lost with the process.
//!
//! [`detect`] gives the [`Hang`] of one process (the `hang` object of the finding in
//! `--json`); [`job`] adds what the other ranks' NCCL calls say about a stuck collective.

use super::callsites::{is_library, short_file};
use super::classify::{self, ApiKind};
use super::units::{bytes, dur, ts};
use crate::model::trace::Trace;
use gputrace_format as fmt;
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};

/// Without stall records: the host made no call for at least this long before an
/// abnormal end (a job killed while its host waits on the GPU).
pub const SILENT_END_NS: u64 = 2_000_000_000;

/// How far before a launch a Python stack sample may be to stand for its launch site.
const SAMPLE_REACH_NS: u64 = 50_000_000;

/// What an outstanding operation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Kernel,
    Memcpy,
    Memset,
    Other,
}

impl OpKind {
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Kernel => "kernel",
            OpKind::Memcpy => "memcpy",
            OpKind::Memset => "memset",
            OpKind::Other => "other",
        }
    }
}

/// One report of a stall, as the analysis reads it from the stall records.
#[derive(Clone, Debug, Default)]
pub struct StallIn {
    pub ts: u64,
    /// The last GPU progress seen before it.
    pub since: u64,
    pub id: u64,
    pub seq: u64,
    pub outstanding: u64,
    /// The stall is over: GPU work completed again at `ts`.
    pub resolved: bool,
    /// Made as the process ended (not by the watchdog's threshold).
    pub end: bool,
    pub ops: Vec<OpIn>,
    pub threads: Vec<ThreadIn>,
}

/// An operation outstanding at a stall report.
#[derive(Clone, Debug)]
pub struct OpIn {
    pub kind: OpKind,
    pub device: u32,
    pub stream: u32,
    pub corr: u32,
    pub name: String,
    pub tid: u32,
    pub launch_ts: u64,
    /// 0: not known to have started.
    pub start: u64,
    pub grid: [u32; 3],
    pub block: [u32; 3],
}

/// A thread at a stall report.
#[derive(Clone, Debug, Default)]
pub struct ThreadIn {
    pub tid: u32,
    /// The CUDA / NCCL call it is in (empty: none).
    pub call: String,
    pub call_start: u64,
    /// A Python stack id (0: none).
    pub stack: u32,
    /// The scheduler's state letter (`R`, `S`, `D`; 0: not known).
    pub state: u8,
}

/// How the process ended, from its end record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndIn {
    Exit,
    Signal(String),
    Abort,
    /// No end record: killed (SIGKILL), or the file was cut.
    CutShort,
    /// A trace window that closed (`gputrace attach`, a timer): the process went on.
    Window,
}

impl EndIn {
    pub fn abnormal(&self) -> bool {
        matches!(self, EndIn::Signal(_) | EndIn::Abort | EndIn::CutShort)
    }
}

// ------------------------------------------------------------------------------------
// What the report says (the `hang` object of the finding).

/// A place in the program's Python code.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Place {
    pub file: String,
    pub line: u32,
    pub function: String,
    /// The frame is the user's code (else every frame was library code: the innermost).
    pub user_code: bool,
    /// `call_site` (recorded with the call), `stall` (the thread's stack at the stall
    /// report) or `sample` (the thread's last periodic stack sample before the launch).
    pub source: String,
}

impl Place {
    /// `train.py:48`
    pub fn short(&self) -> String {
        format!("{}:{}", short_file(&self.file), self.line)
    }
}

/// The operation the GPU is stuck in.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct HangOp {
    /// `kernel`, `memcpy`, `memset`, `other`, or `launch` (a launch call whose GPU work
    /// has no record: traces without stall records).
    pub kind: String,
    /// The kernel's name (demangled), or the launching call's for `launch`.
    pub name: String,
    pub nccl_kernel: bool,
    pub device: Option<u32>,
    pub stream: Option<u32>,
    pub corr: u32,
    pub launched_at_ns: Option<u64>,
    /// When it started on the GPU (absent: not known to have started).
    pub started_at_ns: Option<u64>,
    pub grid: Option<[u32; 3]>,
    pub block: Option<[u32; 3]>,
    pub launch_tid: Option<u32>,
    pub launch_site: Option<Place>,
}

/// Where a thread was at the last stall report (or, without stall records, its last
/// call).
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct HangThread {
    pub tid: u32,
    pub name: String,
    /// The process's main thread (tid = pid).
    pub main: bool,
    /// The CUDA / NCCL call it was in.
    pub call: Option<String>,
    pub call_start_ns: Option<u64>,
    /// Scheduler state letter.
    pub state: Option<String>,
    /// Its Python code.
    pub place: Option<Place>,
}

/// How the job ended.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct HangEnd {
    /// `signal`, `abort`, `exit`, `window_closed` or `cut_short` (no end record).
    pub how: String,
    pub signal: Option<String>,
    pub at_ns: u64,
}

/// One rank's NCCL calls on the stuck communicator.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct RankNccl {
    pub process: usize,
    pub label: String,
    pub rank: i32,
    /// Its last call on the communicator: sequence number, operation, when.
    pub last_seq: u64,
    pub last_op: String,
    pub last_bytes: u64,
    pub last_call_ns: u64,
    /// It called the stuck collective (its last sequence number reaches it).
    pub arrived: bool,
    /// Where its host was at the end (its waiting thread's call and line).
    pub host: Option<String>,
}

/// The stuck collective.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct HangNccl {
    /// Communicator id as hex.
    pub comm_id: String,
    pub op: String,
    pub bytes: u64,
    pub seq: u64,
    pub rank: i32,
    pub nranks: i32,
    /// Every traced rank's state on this communicator (filled across a job's traces).
    pub ranks: Vec<RankNccl>,
    /// Labels of the traced ranks that never called the stuck collective.
    pub never_arrived: Vec<String>,
    /// Ranks of the communicator with no trace given.
    pub untraced_ranks: Vec<i32>,
}

/// A hang, as `--json` gives it (`findings[i].hang`).
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Hang {
    /// `stall_records` or `end_of_trace` (inferred: estimated).
    pub source: String,
    pub stall_id: Option<u64>,
    /// Stall reports written while it lasted.
    pub reports: u64,
    pub op: HangOp,
    /// Operations launched and not completed at the last report.
    pub outstanding: u64,
    /// The last GPU progress (relative to the trace start).
    pub last_progress_ns: u64,
    /// When the library first reported the stall.
    pub detected_at_ns: Option<u64>,
    /// How long the operation ran (or waited, when its start is not known) until the end.
    pub stuck_for_ns: u64,
    /// The end it is measured to: the end record, else the last event.
    pub until_ns: u64,
    pub threads: Vec<HangThread>,
    pub end: Option<HangEnd>,
    pub nccl: Option<HangNccl>,
}

impl Hang {
    /// GPU time at stake: the stall's length, from the last progress to the end.
    pub fn stake_ns(&self) -> u64 {
        self.until_ns.saturating_sub(self.last_progress_ns)
    }
}

// ------------------------------------------------------------------------------------
// Reading the trace.

/// A process's hang and what else its stall records said.
#[derive(Debug, Default)]
pub struct Detected {
    pub hang: Option<Hang>,
    /// Stalls whose work all completed (long operations): one note line each, at most 3.
    pub notes: Vec<String>,
}

/// The stall reports of a trace, in time order, each with its operations and threads.
/// A report flagged resolved carries none: it says the stall is over.
pub fn stalls(t: &Trace) -> Vec<StallIn> {
    t.stalls
        .iter()
        .map(|s| {
            let key = |stall: u32, seq: u32| (stall, seq) == (s.id, s.seq);
            let lo = t
                .stall_ops
                .partition_point(|o| (o.stall, o.seq) < (s.id, s.seq));
            let ops = t.stall_ops[lo..]
                .iter()
                .take_while(|o| key(o.stall, o.seq))
                .map(|o| OpIn {
                    kind: match o.kind {
                        fmt::STALL_OP_KERNEL => OpKind::Kernel,
                        fmt::STALL_OP_MEMCPY => OpKind::Memcpy,
                        fmt::STALL_OP_MEMSET => OpKind::Memset,
                        _ => OpKind::Other,
                    },
                    device: o.device,
                    stream: o.stream,
                    corr: o.corr,
                    name: t.str(o.name).to_string(),
                    tid: o.tid,
                    launch_ts: o.launch_ts,
                    start: o.start,
                    grid: o.grid,
                    block: o.block,
                })
                .collect();
            let lo = t
                .stall_threads
                .partition_point(|o| (o.stall, o.seq) < (s.id, s.seq));
            let threads = t.stall_threads[lo..]
                .iter()
                .take_while(|o| key(o.stall, o.seq))
                .map(|th| ThreadIn {
                    tid: th.tid,
                    call: t.str(th.call).to_string(),
                    call_start: th.call_start,
                    stack: th.stack,
                    state: th.state,
                })
                .collect();
            StallIn {
                ts: s.ts,
                since: s.since,
                id: s.id as u64,
                seq: s.seq as u64,
                outstanding: s.outstanding as u64,
                resolved: s.flags & fmt::STALL_RESOLVED != 0,
                end: s.flags & fmt::STALL_END != 0,
                ops,
                threads,
            }
        })
        .collect()
}

/// The trace's last `Stopped` state (its end record), if any.
pub(crate) fn last_stop(t: &Trace) -> Option<&(u64, u8, u32)> {
    t.states
        .iter()
        .rev()
        .find(|s| s.1 == fmt::CollectorState::Stopped as u8)
}

/// How the trace ended, and when (trace clock).
pub fn end_of(t: &Trace) -> (EndIn, u64) {
    let Some(&(ts, _, reason)) = last_stop(t) else {
        return (EndIn::CutShort, last_ts(t));
    };
    let r = t.str(reason).trim().to_string();
    (end_from_reason(&r, t.window.is_some()), ts.max(1))
}

/// The end a `Stopped` reason names.
pub fn end_from_reason(r: &str, window: bool) -> EndIn {
    if let Some((name, n)) = fmt::end_signal(r) {
        return match (name, n) {
            ("SIGABRT", _) | (_, 6) => EndIn::Abort,
            ("SIG?", n) => EndIn::Signal(format!("signal {n}")),
            (name, _) => EndIn::Signal(name.to_string()),
        };
    }
    let lower = r.to_ascii_lowercase();
    if lower.contains("abort") || lower.contains("sigabrt") {
        return EndIn::Abort;
    }
    if let Some(i) = r.find("SIG") {
        let name: String = r[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect();
        return EndIn::Signal(name);
    }
    if lower.starts_with("signal") {
        let rest = r["signal".len()..].trim();
        let n: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        return EndIn::Signal(
            n.parse::<i32>()
                .ok()
                .map(|n| fmt::signal_name(n).to_string())
                .unwrap_or_else(|| format!("signal {rest}")),
        );
    }
    if window || lower.contains("window") {
        return EndIn::Window;
    }
    EndIn::Exit
}

/// The latest timestamp of anything the trace recorded.
pub fn last_ts(t: &Trace) -> u64 {
    let mut hi = t.span().map(|s| s.1).unwrap_or(0);
    let mut see = |x: u64| hi = hi.max(x);
    for s in &t.states {
        see(s.0);
    }
    if let Some(x) = t.thread_cpu.last() {
        see(x.ts)
    }
    if let Some(x) = t.py_samples.iter().map(|x| x.ts).max() {
        see(x)
    }
    for s in stalls(t) {
        see(s.ts)
    }
    hi
}

/// The library's stall threshold for this trace: its recorded `GPUTRACE_STALL_MS`, else
/// the default (5 s).
fn stall_threshold(t: &Trace) -> u64 {
    const DEFAULT_NS: u64 = 5_000_000_000;
    t.meta
        .options
        .iter()
        .find(|(k, _)| k == fmt::protocol::settings::STALL_MS)
        .and_then(|(_, v)| v.trim().parse::<u64>().ok())
        .filter(|&ms| ms > 0)
        .map(|ms| ms.saturating_mul(1_000_000))
        .unwrap_or(DEFAULT_NS)
}

/// Those of the correlation ids `wanted` whose GPU work completed (a record with both
/// timestamps): one pass over the GPU tables, holding only the few ids asked about.
fn completed(t: &Trace, wanted: impl IntoIterator<Item = u32>) -> HashSet<u32> {
    let mut wanted: HashSet<u32> = wanted.into_iter().filter(|&c| c != 0).collect();
    let mut done = HashSet::new();
    let corrs = t
        .kernels
        .iter()
        .map(|k| k.corr)
        .chain(t.memcpys.iter().map(|k| k.corr))
        .chain(t.memsets.iter().map(|k| k.corr));
    for c in corrs {
        if wanted.is_empty() {
            break;
        }
        if wanted.remove(&c) {
            done.insert(c);
        }
    }
    done
}

/// Whether an outstanding operation completed later in the trace: its own record, or
/// (stream order) a record of GPU work launched after it on the same stream. The second
/// matters after a forced flush: CUPTI hands over an incomplete record once and never
/// delivers it complete (measured on the H200: a 3 s kernel under a forced flush at 1 s
/// left no kernel record), so a long kernel that did end is known only by what ran
/// after it.
fn op_completed(t: &Trace, done: &HashSet<u32>, op: &OpIn) -> bool {
    if op.corr != 0 {
        if done.contains(&op.corr) {
            return true;
        }
        let after = |device: u32, stream: u32, corr: u32| {
            device == op.device && stream == op.stream && corr > op.corr
        };
        return t.kernels.iter().any(|k| after(k.device, k.stream, k.corr))
            || t.memcpys.iter().any(|c| after(c.device, c.stream, c.corr))
            || t.memsets.iter().any(|c| after(c.device, c.stream, c.corr));
    }
    // No correlation id: a kernel of its name on its stream that started after it was
    // launched.
    op.kind == OpKind::Kernel
        && t.kernels.iter().any(|k| {
            k.stream == op.stream
                && k.device == op.device
                && k.start >= op.launch_ts
                && t.str(k.name) == op.name
        })
}

/// A Python stack as a place: its innermost frame of the user's code.
fn place_of(t: &Trace, stack: u32, source: &str) -> Option<Place> {
    let st = t.py_stack(stack)?;
    let (f, user) = st
        .frames
        .iter()
        .find(|f| !is_library(t.str(f.file)))
        .map(|f| (f, true))
        .or_else(|| st.frames.first().map(|f| (f, false)))?;
    Some(Place {
        file: t.str(f.file).to_string(),
        line: f.line,
        function: t.str(f.function).to_string(),
        user_code: user,
        source: source.into(),
    })
}

/// Where a launch was made: its recorded call site, else the thread's last stack
/// sample shortly before it.
fn launch_site(t: &Trace, tid: u32, corr: u32, launch_ts: u64) -> Option<Place> {
    let api = t
        .apis
        .iter()
        .find(|a| a.corr == corr && a.tid == tid && corr != 0);
    if let Some(a) = api {
        if let Some(st) = t.call_site(a.tid, a.start) {
            let id = st.id;
            if let Some(p) = place_of(t, id, "call_site") {
                return Some(p);
            }
        }
    }
    let samples = t.py_samples_in(
        tid,
        launch_ts.saturating_sub(SAMPLE_REACH_NS),
        launch_ts + 1,
    );
    samples.last().and_then(|s| place_of(t, s.stack, "sample"))
}

fn thread_name(t: &Trace, tid: u32) -> String {
    t.thread_name(tid).to_string()
}

/// A process's hang, if its trace shows one. `t0`: the report's trace start;
/// `steady_from`: where its steady state begins (stalls before it are start-up's).
pub fn detect(t: &Trace, t0: u64, steady_from: u64) -> Detected {
    let rel = |x: u64| x.saturating_sub(t0);
    let mut out = Detected::default();
    // Most traces: no stall records and a normal end. Nothing more to read.
    if t.stalls.is_empty() && !t.states.is_empty() {
        let (end, _) = end_of(t);
        if !end.abnormal() {
            return out;
        }
    }
    let (end, until) = end_of(t);
    let reports = stalls(t);
    if !reports.is_empty() {
        let done = completed(t, reports.iter().flat_map(|s| s.ops.iter().map(|o| o.corr)));
        // Group the reports by stall id; the hang is the latest stall with work that never
        // completed.
        let mut by_id: BTreeMap<u64, Vec<&StallIn>> = BTreeMap::new();
        for s in &reports {
            by_id.entry(s.id).or_default().push(s);
        }
        let mut ids: Vec<u64> = by_id.keys().copied().collect();
        ids.sort_by_key(|id| by_id[id].iter().map(|s| s.ts).max().unwrap_or(0));
        for id in ids.iter().rev() {
            let group = &by_id[id];
            let Some(last) = group
                .iter()
                .filter(|s| !s.resolved)
                .max_by_key(|s| (s.seq, s.ts))
            else {
                continue;
            };
            let first = group
                .iter()
                .filter(|s| !s.resolved)
                .min_by_key(|s| (s.seq, s.ts))
                .copied();
            // Only reports made as the process ended: work in flight at the end, a hang
            // only when no progress came for the watchdog's threshold (a shorter wait is
            // a job ended mid-step, or the watchdog was off and it was not long).
            let only_end = group.iter().filter(|s| !s.resolved).all(|s| s.end);
            if only_end && last.ts.saturating_sub(last.since) < stall_threshold(t) {
                continue;
            }
            // A stall the library saw end, or whose work all completed later: a long
            // operation.
            let resolved = group.iter().filter(|s| s.resolved).map(|s| s.ts).max();
            let pending: Vec<&OpIn> = if resolved.is_some() {
                Vec::new()
            } else {
                last.ops
                    .iter()
                    .filter(|o| !op_completed(t, &done, o))
                    .collect()
            };
            if pending.is_empty() {
                // A note only where it tells something: the GPU went without progress
                // for at least the watchdog's threshold (a shorter stretch, down to 0 ns,
                // is records that reached the watchdog late, not a GPU that stood
                // still), and not in start-up (compilation, autotuning, warm-up: the
                // host is busy and the few records of its work come late).
                let upto = resolved.unwrap_or(last.ts);
                let still = upto.saturating_sub(last.since);
                if out.notes.len() < 3 && still >= stall_threshold(t) && last.since >= steady_from {
                    out.notes
                        .push(long_operation_note(last, still, rel(last.since)));
                }
                continue;
            }
            if out.hang.is_some() {
                continue;
            }
            // The stuck one: running before queued, then the earliest launched.
            let op = pending
                .iter()
                .min_by_key(|o| (o.start == 0, o.launch_ts, o.corr))
                .copied()
                .unwrap_or(pending[0]);
            let from = if op.start > 0 { op.start } else { op.launch_ts };
            let hop = stuck_op(t, t0, op, last);
            let threads = stall_threads(t, t0, last);
            out.hang = Some(Hang {
                source: "stall_records".into(),
                stall_id: Some(*id),
                reports: group.len() as u64,
                op: hop,
                outstanding: last.outstanding.max(last.ops.len() as u64),
                last_progress_ns: rel(last.since),
                detected_at_ns: first.map(|f| rel(f.ts)),
                stuck_for_ns: until.saturating_sub(from),
                until_ns: rel(until),
                threads,
                end: hang_end(&end, rel(until)),
                nccl: nccl_of(t, op, &end),
            });
        }
        return out;
    }
    if end.abnormal() {
        out.hang = from_end(t, t0, until).map(|mut h| {
            h.end = hang_end(&end, rel(until));
            h
        });
    }
    out
}

/// How the process ended, for a hang: the end's kind and signal, at `at_ns`.
fn hang_end(e: &EndIn, at_ns: u64) -> Option<HangEnd> {
    let (how, signal) = match e {
        EndIn::Exit => ("exit", None),
        EndIn::Signal(s) => ("signal", Some(s.clone())),
        EndIn::Abort => ("abort", None),
        EndIn::CutShort => ("cut_short", None),
        EndIn::Window => ("window_closed", None),
    };
    Some(HangEnd {
        how: how.into(),
        signal,
        at_ns,
    })
}

/// The note for a stall whose work all completed: a long operation, not a hang.
fn long_operation_note(last: &StallIn, still: u64, since_rel: u64) -> String {
    let what = last
        .ops
        .first()
        .map(|o| op_words(o.kind, &short_name(&o.name)))
        .unwrap_or_else(|| "its work".into());
    format!(
        "the GPU made no progress for at least {} from +{} ({} outstanding), then it completed: a long operation, not a hang",
        dur(still),
        ts(since_rel),
        what
    )
}

/// The stuck operation `op` of the stall report `last`, with where it was launched.
fn stuck_op(t: &Trace, t0: u64, op: &OpIn, last: &StallIn) -> HangOp {
    let rel = |x: u64| x.saturating_sub(t0);
    HangOp {
        kind: op.kind.name().into(),
        name: short_name(&op.name),
        nccl_kernel: op.kind == OpKind::Kernel && classify::is_comm_kernel(&op.name),
        device: (op.device != u32::MAX).then_some(op.device),
        stream: (op.stream != 0).then_some(op.stream),
        corr: op.corr,
        launched_at_ns: (op.launch_ts > 0).then(|| rel(op.launch_ts)),
        started_at_ns: (op.start > 0).then(|| rel(op.start)),
        grid: Some(op.grid),
        block: Some(op.block),
        launch_tid: (op.tid != 0).then_some(op.tid),
        launch_site: launch_site(t, op.tid, op.corr, op.launch_ts).or_else(|| {
            // The launching thread's stack at the stall, when it is still in the
            // launch (a launch that blocks on a full queue).
            last.threads
                .iter()
                .find(|th| th.tid == op.tid && th.call.contains("Launch"))
                .and_then(|th| place_of(t, th.stack, "stall"))
        }),
    }
}

/// The job's threads in the stall report `last` (not the tracer's), with what each did.
fn stall_threads(t: &Trace, t0: u64, last: &StallIn) -> Vec<HangThread> {
    let rel = |x: u64| x.saturating_sub(t0);
    last.threads
        .iter()
        // The tracer's own threads are not the job's.
        .filter(|th| !thread_name(t, th.tid).starts_with("gputrace-"))
        .map(|th| HangThread {
            tid: th.tid,
            name: thread_name(t, th.tid),
            main: th.tid == t.meta.pid && th.tid != 0,
            call: (!th.call.is_empty()).then(|| th.call.clone()),
            call_start_ns: (!th.call.is_empty() && th.call_start > 0).then(|| rel(th.call_start)),
            state: (th.state != 0).then(|| (th.state as char).to_string()),
            place: place_of(t, th.stack, "stall"),
        })
        .collect()
}

/// Without stall records: the earliest launch after the last GPU record whose GPU work
/// has no record, when the host then made no call for [`SILENT_END_NS`] before `until`.
fn from_end(t: &Trace, t0: u64, until: u64) -> Option<Hang> {
    let rel = |x: u64| x.saturating_sub(t0);
    let last_host = t
        .apis
        .iter()
        .map(|a| a.end)
        .chain(t.host_calls.iter().map(|c| c.end))
        .chain(t.nccl.iter().map(|n| n.end))
        .max()?;
    if until.saturating_sub(last_host) < SILENT_END_NS {
        return None;
    }
    let last_gpu = t
        .kernels
        .iter()
        .map(|k| k.end)
        .chain(t.memcpys.iter().map(|m| m.end))
        .chain(t.memsets.iter().map(|m| m.end))
        .max()
        .unwrap_or(0);
    let launches_work = |a: &fmt::Api| {
        matches!(
            classify::api_kind(a, t.str(a.name)),
            ApiKind::Launch | ApiKind::CopyAsync | ApiKind::CopySync | ApiKind::Memset
        )
    };
    let from = t.apis.first_starting_at(last_gpu);
    let launched: Vec<fmt::Api> = (t.apis.iter_from(from))
        .filter(|a| launches_work(a))
        .collect();
    let done = completed(t, launched.iter().map(|a| a.corr));
    let unanswered: Vec<fmt::Api> = launched
        .into_iter()
        .filter(|a| !done.contains(&a.corr))
        .collect();
    // The host's last launch before it fell silent: the work it then waited for.
    let stuck = unanswered.last()?;
    let name = t.str(stuck.name).to_string();
    let nccl = nccl_from_calls(t, stuck.tid, stuck.start).filter(|_| {
        t.nccl.iter().any(|n| {
            n.tid == stuck.tid && n.end + 1_000_000 >= stuck.start && n.start <= stuck.start
        })
    });
    // Each thread's last call, and where its Python code was last seen.
    let mut tids: Vec<u32> = t.apis.iter().map(|a| a.tid).collect();
    tids.sort_unstable();
    tids.dedup();
    let threads = tids
        .iter()
        .filter_map(|&tid| {
            let a = t.apis.iter().rfind(|a| a.tid == tid)?;
            let place = t
                .py_samples_in(tid, a.start, u64::MAX)
                .last()
                .and_then(|s| place_of(t, s.stack, "sample"))
                .or_else(|| {
                    t.call_site(tid, a.start)
                        .and_then(|s| place_of(t, s.id, "call_site"))
                });
            Some(HangThread {
                tid,
                name: thread_name(t, tid),
                main: tid == t.meta.pid && tid != 0,
                // Without stall records: its last recorded call (it may have returned).
                call: Some(t.str(a.name).to_string()),
                call_start_ns: Some(rel(a.start)),
                state: None,
                place,
            })
        })
        .collect();
    // No GPU record at all: they were lost with the process; the progress is then
    // measured from the host's last call.
    let progress = if last_gpu > 0 { last_gpu } else { last_host };
    Some(Hang {
        source: "end_of_trace".into(),
        stall_id: None,
        reports: 0,
        op: HangOp {
            kind: "launch".into(),
            name,
            nccl_kernel: nccl.is_some(),
            device: None,
            stream: None,
            corr: stuck.corr,
            launched_at_ns: Some(rel(stuck.start)),
            started_at_ns: None,
            grid: None,
            block: None,
            launch_tid: Some(stuck.tid),
            launch_site: launch_site(t, stuck.tid, stuck.corr, stuck.start),
        },
        outstanding: unanswered.len() as u64,
        last_progress_ns: rel(progress),
        detected_at_ns: None,
        stuck_for_ns: until.saturating_sub(stuck.start),
        until_ns: rel(until),
        threads,
        end: None,
        nccl,
    })
}

fn is_group(op: u8) -> bool {
    matches!(op, fmt::NCCL_GROUP_START | fmt::NCCL_GROUP_END)
}

/// The NCCL call behind a stuck NCCL kernel: the launching thread's last collective or
/// point-to-point call made before the launch (the kernel is launched inside it, or
/// inside the `ncclGroupEnd` that follows it).
fn nccl_of(t: &Trace, op: &OpIn, end: &EndIn) -> Option<HangNccl> {
    let _ = end;
    if op.kind != OpKind::Kernel || !classify::is_comm_kernel(&op.name) {
        return None;
    }
    nccl_from_calls(t, op.tid, op.launch_ts)
}

fn nccl_from_calls(t: &Trace, tid: u32, launch_ts: u64) -> Option<HangNccl> {
    let n = t
        .nccl
        .iter()
        .rfind(|n| n.start <= launch_ts && !is_group(n.op) && (tid == 0 || n.tid == tid))
        .or_else(|| {
            t.nccl
                .iter()
                .rfind(|n| n.start <= launch_ts && !is_group(n.op))
        })?;
    Some(HangNccl {
        comm_id: format!("{:#x}", n.comm_id),
        op: fmt::nccl_op_name(n.op).to_string(),
        bytes: n.bytes,
        seq: n.seq,
        rank: n.rank,
        nranks: n.nranks,
        ranks: Vec::new(),
        never_arrived: Vec::new(),
        untraced_ranks: Vec::new(),
    })
}

/// A kernel name as the report shows it (demangled, at most 60 characters).
fn short_name(raw: &str) -> String {
    let d = crate::model::trace::demangle(raw);
    if d.chars().count() <= 60 {
        return d;
    }
    let mut s: String = d.chars().take(59).collect();
    s.push('…');
    s
}

fn op_words(kind: OpKind, name: &str) -> String {
    match kind {
        OpKind::Kernel if name.is_empty() => "a kernel".into(),
        OpKind::Kernel => format!("kernel `{name}`"),
        OpKind::Memcpy => "a copy".into(),
        OpKind::Memset => "a memset".into(),
        OpKind::Other => "an operation".into(),
    }
}

// ------------------------------------------------------------------------------------
// In words.

/// What the GPU is stuck in, in words: "kernel `spin_kernel`", "NCCL all_reduce kernel
/// `ncclDevKernel_...`", "a copy".
fn what(h: &Hang) -> String {
    let o = &h.op;
    match o.kind.as_str() {
        "kernel" if o.name.is_empty() => "a kernel".into(),
        "kernel" => format!("kernel `{}`", o.name),
        "memcpy" => "a copy".into(),
        "memset" => "a memset".into(),
        "launch" => format!("the work launched by `{}`", o.name),
        _ => "an operation".into(),
    }
}

/// The thread the sentence names: the main thread if the report has it, else the
/// launching thread, else the first in a call.
fn lead_thread(h: &Hang) -> Option<&HangThread> {
    h.threads
        .iter()
        .find(|th| th.main && th.call.is_some())
        .or_else(|| {
            h.threads
                .iter()
                .find(|th| Some(th.tid) == h.op.launch_tid && th.call.is_some())
        })
        .or_else(|| h.threads.iter().find(|th| th.call.is_some()))
}

fn thread_words(th: &HangThread) -> String {
    if th.main {
        "the main thread".into()
    } else if th.name.is_empty() {
        format!("thread {}", th.tid)
    } else {
        format!("thread {} ({})", th.tid, th.name)
    }
}

fn call_name(call: &str) -> &str {
    call.split(" (").next().unwrap_or(call)
}

/// "the main thread waited in `cudaDeviceSynchronize` at `train.py:52` from +9.1 s"
fn thread_sentence(th: &HangThread, live: bool, inferred: bool) -> String {
    let mut s = thread_words(th);
    match &th.call {
        Some(c) if inferred => {
            s.push_str(&format!("'s last call was `{}`", call_name(c)));
        }
        Some(c) => s.push_str(&format!(
            " {} in `{}`",
            if live { "is waiting" } else { "waited" },
            call_name(c)
        )),
        None => s.push_str(if live {
            " is in no CUDA call"
        } else {
            " was in no CUDA call"
        }),
    }
    if let Some(p) = &th.place {
        s.push_str(&format!(" at `{}`", p.short()));
    }
    if let Some(at) = th.call_start_ns {
        s.push_str(&format!(
            " {} +{}",
            if inferred { "at" } else { "from" },
            secs(at)
        ));
    }
    s
}

/// Seconds with one decimal: `9.1 s`.
fn secs(ns: u64) -> String {
    format!("{:.1} s", ns as f64 / 1e9)
}

fn end_words(e: &HangEnd) -> String {
    match e.how.as_str() {
        "signal" => format!(
            "the job ended by {} at +{}",
            e.signal.as_deref().unwrap_or("a signal"),
            secs(e.at_ns)
        ),
        "abort" => format!("the job aborted at +{}", secs(e.at_ns)),
        "exit" => format!("the job exited at +{}", secs(e.at_ns)),
        "window_closed" => format!("the trace window closed at +{}", secs(e.at_ns)),
        _ => format!(
            "the trace ends at +{} with no end record (the job was killed, e.g. by SIGKILL, or the file was cut)",
            secs(e.at_ns)
        ),
    }
}

/// The one sentence of a hang: what the GPU is stuck in, where it was launched, where
/// the host waits, how the job ended (`live`: while it still runs).
pub fn sentence(h: &Hang, live: bool) -> String {
    let inferred = h.source == "end_of_trace";
    let mut parts = Vec::new();
    let w = what(h);
    parts.push(if inferred {
        format!(
            "{w} at +{} (the host's last launch; {} launch{} with no GPU record) never completed as far as the trace shows: no GPU progress in its last {}, and no host call after +{}",
            secs(h.op.launched_at_ns.unwrap_or(0)),
            h.outstanding,
            if h.outstanding == 1 { "" } else { "es" },
            dur(h.stake_ns()),
            secs(
                h.threads
                    .iter()
                    .filter_map(|t| t.call_start_ns)
                    .max()
                    .unwrap_or(0)
            )
        )
    } else if h.op.started_at_ns.is_some() {
        if live {
            format!(
                "the GPU has run {w} for {} and it has not completed",
                dur(h.stuck_for_ns)
            )
        } else {
            format!(
                "the GPU ran {w} for {} and it never completed",
                dur(h.stuck_for_ns)
            )
        }
    } else {
        format!(
            "{w}, launched at +{}, {} ({} with no GPU progress)",
            secs(h.op.launched_at_ns.unwrap_or(0)),
            if live {
                "has not completed"
            } else {
                "never completed"
            },
            dur(h.stake_ns())
        )
    });
    if let Some(n) = &h.nccl {
        parts.push(format!(
            "it is `{}` #{} ({}) on communicator {} (rank {} of {})",
            n.op,
            n.seq,
            bytes(n.bytes),
            n.comm_id,
            n.rank,
            n.nranks
        ));
        if !n.never_arrived.is_empty() {
            parts.push(format!(
                "{} never arrived at it",
                n.never_arrived.join(", ")
            ));
        }
    }
    // The launch site is the launching thread's last stack sample before the launch,
    // not a stack taken at it: the evidence gives it with that caveat, the headline
    // names only what was measured (on the H200 it named the loop one line before).
    if let Some(th) = lead_thread(h) {
        parts.push(thread_sentence(th, live, inferred));
    }
    if live {
        parts.push("the job is still running".into());
    } else if let Some(e) = &h.end {
        parts.push(end_words(e));
    }
    let mut s = parts.join("; ");
    if let Some(c) = s.get(..1) {
        s = c.to_uppercase() + &s[1..];
    }
    s
}

/// The evidence lines: the operation, every thread, the end, the collective per rank.
pub fn evidence(h: &Hang, live: bool) -> Vec<String> {
    let mut ev = Vec::new();
    let o = &h.op;
    let mut op = format!("stuck: {}", what(h));
    if let (Some(d), Some(s)) = (o.device, o.stream) {
        op.push_str(&format!(" on device {d}, stream {s}"));
    }
    if o.corr != 0 {
        op.push_str(&format!(", correlation {}", o.corr));
    }
    if let (Some(g), Some(b)) = (o.grid, o.block) {
        op.push_str(&format!(
            ", grid {}x{}x{}, block {}x{}x{}",
            g[0], g[1], g[2], b[0], b[1], b[2]
        ));
    }
    if let Some(l) = o.launched_at_ns {
        op.push_str(&format!("; launched at +{}", ts(l)));
        if let Some(tid) = o.launch_tid {
            op.push_str(&format!(" by thread {tid}"));
        }
    }
    if let Some(s) = o.started_at_ns {
        op.push_str(&format!(", started at +{}", ts(s)));
    }
    if let Some(p) = &o.launch_site {
        op.push_str(&format!(
            ", from {} in {}{}",
            p.short(),
            p.function,
            if p.source == "sample" {
                " (the thread's last stack sample before the launch)"
            } else {
                ""
            }
        ));
    }
    ev.push(op);
    match h.source.as_str() {
        "stall_records" => ev.push(format!(
            "the library reported the stall {} time{} from +{}; last GPU progress at +{}; {} operation{} outstanding",
            h.reports,
            if h.reports == 1 { "" } else { "s" },
            h.detected_at_ns.map(ts).unwrap_or_else(|| "?".into()),
            ts(h.last_progress_ns),
            h.outstanding,
            if h.outstanding == 1 { "" } else { "s" }
        )),
        _ => ev.push(format!(
            "inferred from the end of the trace (no stall records): {} launch call{} after the last GPU progress at +{} never produced a GPU record and the host made no call in the last {}; GPU records may also have been lost with the process (a library without a flush on signals)",
            h.outstanding,
            if h.outstanding == 1 { "" } else { "s" },
            ts(h.last_progress_ns),
            dur(h.until_ns.saturating_sub(
                h.threads.iter().filter_map(|t| t.call_start_ns).max().unwrap_or(0)
            ))
        )),
    }
    let inferred = h.source == "end_of_trace";
    // Threads in a call, or whose Python line is known, or the main thread; the others
    // are counted.
    let said = |th: &&HangThread| th.main || th.call.is_some() || th.place.is_some();
    let idle = h.threads.iter().filter(|th| !said(th)).count();
    for th in h.threads.iter().filter(said) {
        let mut line = thread_sentence(th, live, inferred);
        if let Some(s) = &th.state {
            line.push_str(&format!(" (state {s})"));
        }
        if let Some(p) = &th.place {
            line.push_str(&format!(", in {}", p.function));
        }
        ev.push(line);
    }
    if idle > 0 {
        ev.push(format!(
            "{idle} other thread{} in no CUDA call",
            if idle == 1 { "" } else { "s" }
        ));
    }
    if let Some(n) = &h.nccl {
        for r in &n.ranks {
            ev.push(format!(
                "{}: last call on {} was {} #{} ({}) at +{}{}{}",
                r.label,
                n.comm_id,
                r.last_op,
                r.last_seq,
                bytes(r.last_bytes),
                ts(r.last_call_ns),
                if r.arrived {
                    ", stuck in the collective"
                } else {
                    ": never arrived"
                },
                r.host
                    .as_ref()
                    .map(|h| format!("; its host: {h}"))
                    .unwrap_or_default()
            ));
        }
        if !n.untraced_ranks.is_empty() {
            ev.push(format!(
                "no trace given for rank{} {} of the communicator: give every rank's trace to see which never arrived",
                if n.untraced_ranks.len() == 1 { "" } else { "s" },
                n.untraced_ranks
                    .iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    if !live {
        if let Some(e) = &h.end {
            ev.push(end_words(e));
        }
    }
    ev
}

/// The fix, from what was measured.
pub fn fix(h: &Hang) -> String {
    if h.op.nccl_kernel || h.nccl.is_some() {
        let who = h
            .nccl
            .as_ref()
            .filter(|n| !n.never_arrived.is_empty())
            .map(|n| {
                format!(
                    "{} never arrived: look at where its host was and at its trace; ",
                    n.never_arrived.join(", ")
                )
            })
            .unwrap_or_default();
        return format!(
            "A collective that never completes: {who}a rank that never arrived (crashed, stuck in its own work, or took another code path: a collective called on some ranks only, or in a different order) holds every other rank. Check each rank's trace and log, run with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS=COLL), and set a watchdog timeout (TORCH_NCCL_ASYNC_ERROR_HANDLING=1 with a timeout in init_process_group) so the job fails instead of hanging."
        );
    }
    match h.op.kind.as_str() {
        "memcpy" | "memset" => "A copy that never completes is rare: the device may be lost or the memory unreachable. Check `dmesg` (or `journalctl -k`) for Xid errors and `nvidia-smi` for the GPU's state; a peer copy needs the peer device alive.".into(),
        _ => format!(
            "A kernel that never ends: an infinite loop, a deadlock inside the kernel (threads of a block waiting on each other, a __syncthreads() some threads never reach), or a wait on a flag that is never set (by the host, another kernel or another GPU). Run it under compute-sanitizer (--tool racecheck / synccheck) or attach cuda-gdb to the hung process to see where its threads spin: kernel `{}`{}.",
            h.op.name,
            h.op
                .launch_site
                .as_ref()
                .map(|p| format!(", launched after {} (the last stack sample before the launch)", p.short()))
                .unwrap_or_default()
        ),
    }
}

// ------------------------------------------------------------------------------------
// Across the ranks of a job.

/// A rank's NCCL calls per communicator: (comm id, last seq, op, start) of its last
/// collective or point-to-point call.
#[derive(Clone, Debug, Default)]
pub struct NcclTail {
    pub rank_by_comm: BTreeMap<u64, (i32, i32)>,
    /// (seq, op, start, bytes) by communicator id.
    pub last: BTreeMap<u64, (u64, u8, u64, u64)>,
    /// Where its host was: the main thread's (or the first busy thread's) words.
    pub host: Option<String>,
}

/// What [`super::hang_ranks::add`] needs of one trace.
pub fn nccl_tail(t: &Trace, hang: Option<&Hang>) -> NcclTail {
    let mut tail = NcclTail::default();
    for n in &t.nccl {
        if is_group(n.op) || n.comm_id == 0 {
            continue;
        }
        tail.rank_by_comm.insert(n.comm_id, (n.rank, n.nranks));
        let e = tail.last.entry(n.comm_id).or_insert((0, 0, 0, 0));
        if n.seq >= e.0 {
            *e = (n.seq, n.op, n.start, n.bytes);
        }
    }
    tail.host = match hang {
        Some(h) => lead_thread(h).map(|th| thread_sentence(th, false, h.source == "end_of_trace")),
        None => host_at_end(t),
    };
    tail
}

/// Without a hang: where the process's host was last seen (its last stall thread report,
/// else its last call and the last stack sample).
fn host_at_end(t: &Trace) -> Option<String> {
    if let Some(s) = stalls(t).last() {
        let th = s
            .threads
            .iter()
            .find(|th| th.tid == t.meta.pid)
            .or_else(|| s.threads.iter().find(|th| !th.call.is_empty()))?;
        let p = place_of(t, th.stack, "stall");
        return Some(format!(
            "thread {} {}{}",
            th.tid,
            if th.call.is_empty() {
                "in no CUDA call".to_string()
            } else {
                format!("in `{}`", th.call)
            },
            p.map(|p| format!(" at `{}`", p.short()))
                .unwrap_or_default()
        ));
    }
    let a = t.apis.last()?;
    let p = t
        .py_samples_in(a.tid, a.start, u64::MAX)
        .last()
        .and_then(|s| place_of(t, s.stack, "sample"));
    Some(format!(
        "last call `{}` on thread {}{}",
        t.str(a.name),
        a.tid,
        p.map(|p| format!(", then at `{}`", p.short()))
            .unwrap_or_default()
    ))
}

// ------------------------------------------------------------------------------------
// While the job still runs (`gputrace run` / `attach` with `--hang-timeout`).

/// A hang to report while the job runs: the latest stall report of `t` (a trace still
/// being written) shows no GPU progress for `timeout_ns` or more, and work outstanding
/// in it never completed. Returns the stall's id, how long the GPU made no progress, and
/// the hang.
pub fn live(t: &Trace, timeout_ns: u64) -> Option<(u64, u64, Hang)> {
    let last = t.stalls.last()?;
    let gap = last.ts.saturating_sub(last.since);
    if last.flags & fmt::STALL_RESOLVED != 0 || gap < timeout_ns {
        return None;
    }
    let ctx = super::ctx::Ctx::new(t);
    let h = detect(t, ctx.t0, 0).hang?;
    if h.stall_id != Some(last.id as u64) {
        return None;
    }
    Some((last.id as u64, gap, h))
}

/// The lines of a live hang report of process `pid` (trace `path`): a heading, the
/// sentence, the evidence, the fix, and that the job is left running.
pub fn live_lines(h: &Hang, pid: u32, path: &std::path::Path, gap: u64) -> Vec<String> {
    let file = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut lines = vec![format!(
        "======== HANG in pid {pid} ({file}): no GPU progress for {} ========",
        dur(gap)
    )];
    lines.push(sentence(h, true));
    lines.extend(evidence(h, true).into_iter().map(|e| format!("  - {e}")));
    lines.push(format!("  fix: {}", fix(h)));
    lines.push(format!(
        "the job is still running: gputrace leaves it be (stop it yourself; `gputrace report {}` tells the same afterwards)",
        path.display()
    ));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_reasons_read_as_the_library_writes_them() {
        let e = |r: &str| end_from_reason(r, false);
        assert_eq!(
            e(&fmt::end_reason_signal(15)),
            EndIn::Signal("SIGTERM".into())
        );
        assert_eq!(
            e(&fmt::end_reason_signal(2)),
            EndIn::Signal("SIGINT".into())
        );
        assert_eq!(e(&fmt::end_reason_signal(6)), EndIn::Abort);
        assert_eq!(e("signal SIG? 40"), EndIn::Signal("signal 40".into()));
        assert_eq!(e(fmt::END_EXIT), EndIn::Exit);
        assert_eq!(e("end of window"), EndIn::Window);
        assert_eq!(end_from_reason("exit", true), EndIn::Window);
        assert_eq!(e("signal 9"), EndIn::Signal("SIGKILL".into()));
        assert_eq!(e("abort"), EndIn::Abort);
        assert_eq!(e(""), EndIn::Exit);
        assert!(!EndIn::Exit.abnormal() && !EndIn::Window.abnormal());
        assert!(EndIn::CutShort.abnormal() && EndIn::Abort.abnormal());
    }

    #[test]
    fn odd_text_never_panics() {
        for r in [
            "signal",
            "signal ",
            "SIG",
            "signalé 3",
            "é",
            "signal SIGTERM",
            "xSIG",
        ] {
            let _ = end_from_reason(r, false);
        }
        let h = Hang {
            source: "stall_records".into(),
            stall_id: Some(1),
            reports: 1,
            op: HangOp {
                kind: "kernel".into(),
                name: String::new(),
                nccl_kernel: false,
                device: None,
                stream: None,
                corr: 0,
                launched_at_ns: None,
                started_at_ns: None,
                grid: None,
                block: None,
                launch_tid: None,
                launch_site: None,
            },
            outstanding: 0,
            last_progress_ns: 10,
            detected_at_ns: None,
            stuck_for_ns: 0,
            until_ns: 0,
            threads: Vec::new(),
            end: None,
            nccl: None,
        };
        assert_eq!(h.stake_ns(), 0);
        assert!(sentence(&h, false).starts_with("A kernel, launched at +0.0 s"));
        assert!(!evidence(&h, true).is_empty());
        assert!(!fix(&h).is_empty());
    }
}
