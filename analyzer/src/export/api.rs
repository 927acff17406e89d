//! The seams every exporter implements or reads, apart from the factories in `mod.rs`:
//! whole documents ([`DocumentExporter`]), events in time order ([`EventExporter`]),
//! what an event exporter is handed ([`TraceContext`], [`TraceEvent`]), and files made
//! private to their owner.

use crate::report::summary::Summary;
use crate::report::Report;
use gputrace_format::{self as fmt, Meta};
use std::collections::HashMap;
use std::io::{self, Write};
use std::path::Path;

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
