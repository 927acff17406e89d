//! `gputrace summary` from the trace file itself: its events in time order
//! ([`super::stream`]) fed to a [`SummaryBuilder`], so the summary of a trace of any
//! size holds only the stream's reorder buffer and a few totals per device.

use super::api::{EventExporter, TraceContext, TraceEvent};
use super::stream::{EventStream, StreamError, DEFAULT_MAX_PENDING};
use crate::report::summary::{Summary, SummaryBuilder};
use std::io::{self, Write};

/// Hands each event to the builder.
struct Feed(SummaryBuilder);

impl EventExporter for Feed {
    fn event(
        &mut self,
        _cx: &TraceContext<'_>,
        ev: &TraceEvent<'_>,
        _out: &mut dyn Write,
    ) -> io::Result<()> {
        let b = &mut self.0;
        match *ev {
            TraceEvent::Device(d) => b.device(d),
            TraceEvent::Kernel(k) => b.kernel(k),
            TraceEvent::Memcpy(m) => b.memcpy(m),
            TraceEvent::Memset(m) => b.memset(m),
            TraceEvent::Api(a) => b.api(a),
            TraceEvent::Sync(s) => b.sync(s),
            TraceEvent::State { ts, state, reason } => b.state(ts, state, reason),
            TraceEvent::Dropped { source, count, .. } => b.dropped(source, count),
            TraceEvent::HostCopy(c) => b.host_copy(c),
            TraceEvent::HostCall(c) => b.host_call(c),
            TraceEvent::Nccl(n) => b.nccl(n),
            TraceEvent::Nvtx(n) => b.nvtx(n),
            TraceEvent::ThreadCpu(x) => b.thread_cpu(x),
            TraceEvent::ProcSample(p) => b.proc_sample(p),
            TraceEvent::MachineSample(_) => b.machine_sample(),
            TraceEvent::CpuLimits(l) => b.cpu_limits(l),
            _ => {}
        }
        Ok(())
    }
}

/// The summary of the trace `s` streams.
pub fn summarize(s: &EventStream<'_>) -> Result<Summary, StreamError> {
    let mut feed = Feed(SummaryBuilder::new());
    let stats = s.write(DEFAULT_MAX_PENDING, &mut feed, &mut io::sink())?;
    Ok(feed.0.finish(
        s.path(),
        s.meta(),
        s.read_stats(),
        (s.window(), stats.clipped, stats.incomplete),
        &|n| s.str(n).to_string(),
    ))
}
