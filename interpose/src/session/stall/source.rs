//! Stall reports as the writer's [`Source`]: drained after the CUPTI session's buffers
//! and the rings, so the records a forced flush just delivered (completions, incomplete
//! records) and the Python stack samples taken for the report are in before it is
//! built.

use super::{calls_in_flight, outstanding, put_back, take_requests, Request};
use crate::base::cupti::apis;
use crate::base::tsc;
use crate::writer::{Sink, Source};
use gputrace_format::{self as fmt, Event};
use std::collections::HashMap;

pub struct StallSource {
    conv: tsc::Converter,
    /// The latest Python stack sample of each thread: (tid -> (ts, stack id)).
    py: HashMap<u32, (u64, u32)>,
    /// The last pass put its requests back (see [`StallSource::drain`]).
    deferred: bool,
}

impl Default for StallSource {
    fn default() -> Self {
        Self::new()
    }
}

impl StallSource {
    pub fn new() -> StallSource {
        StallSource {
            conv: tsc::Converter::new(),
            py: HashMap::new(),
            deferred: false,
        }
    }

    fn report(&mut self, ts: u64, id: u32, seq: u32, flags: u8, out: &mut Sink<'_>) -> bool {
        let ops = outstanding();
        if ops.is_empty() && flags & fmt::STALL_END != 0 {
            return false;
        }
        let oldest = ops
            .iter()
            .filter(|o| o.stamp != 0)
            .map(|o| self.conv.to_real(o.stamp))
            .min()
            .unwrap_or(0);
        let since = super::last_end().max(oldest);
        out.push(Event::Stall(fmt::Stall {
            ts,
            since,
            id,
            seq,
            outstanding: ops.len() as u32,
            flags,
        }));
        for o in &ops {
            let r = o.record.clone().unwrap_or_default();
            let name = if r.name != 0 {
                r.name
            } else {
                // SAFETY: the launch callback's symbol name: NULL or a NUL-terminated
                // name CUDA keeps for as long as its module is loaded.
                unsafe {
                    out.names
                        .intern_cstr(o.name as *const libc::c_char, out.events)
                }
            };
            let mut flags = 0;
            if o.at_launch {
                flags |= fmt::STALL_OP_FLAG_LAUNCH;
            }
            if o.record.is_some() {
                flags |= fmt::STALL_OP_FLAG_INCOMPLETE;
            }
            let pick = |a: [u32; 3], b: &[u32]| if a != [0; 3] { a } else { [b[0], b[1], b[2]] };
            out.push(Event::StallOp(fmt::StallOp {
                ts,
                stall: id,
                seq,
                kind: if o.record.is_some() {
                    r.kind
                } else {
                    fmt::STALL_OP_KERNEL
                },
                flags,
                device: if o.record.is_some() {
                    r.device
                } else {
                    u32::MAX
                },
                stream: r.stream,
                corr: o.corr,
                name,
                tid: if o.at_launch { o.tid } else { u32::MAX },
                launch_ts: if o.stamp != 0 {
                    self.conv.to_real(o.stamp)
                } else {
                    0
                },
                start: r.start,
                bytes: r.bytes,
                grid: pick(r.grid, &o.dims[..3]),
                block: pick(r.block, &o.dims[3..]),
            }));
        }
        let calls = calls_in_flight();
        for (tid, state) in tasks() {
            let (call, call_start) = match calls.iter().find(|c| c.0 == tid) {
                Some(&(_, dom, cbid, since)) => {
                    let name = if dom == super::DOMAIN_NCCL {
                        super::NCCL_CALLS.get(cbid as usize).copied()
                    } else {
                        apis::find(dom, cbid).map(|a| a.name)
                    };
                    let name = name.unwrap_or("cuda call");
                    (out.intern(name), self.conv.to_real(since))
                }
                None => (0, 0),
            };
            out.push(Event::StallThread(fmt::StallThread {
                ts,
                stall: id,
                seq,
                tid,
                call,
                call_start,
                stack: self.py.get(&tid).map(|p| p.1).unwrap_or(0),
                state,
            }));
        }
        true
    }
}

impl Source for StallSource {
    fn drain(&mut self, out: &mut Sink<'_>) {
        for e in out.events.iter() {
            if let Event::PySample(s) = e {
                let cur = self.py.entry(s.tid).or_insert((0, 0));
                if s.ts >= cur.0 {
                    *cur = (s.ts, s.stack);
                }
            }
        }
        let reqs = take_requests();
        if reqs.is_empty() {
            return;
        }
        // A report made after a forced flush must see what that flush delivered: when
        // its buffers came while this pass was past the CUPTI source, they wait for the
        // next pass, and so does the report (once: a busy job's buffers keep coming).
        let flushed = |r: &Request| {
            matches!(
                r,
                Request::End { .. } | Request::Report { forced: true, .. }
            )
        };
        if !self.deferred
            && reqs.iter().any(|(_, r)| flushed(r))
            && crate::session::cupti::buffers::any_completed()
        {
            self.deferred = true;
            put_back(reqs);
            crate::writer::write_soon();
            return;
        }
        self.deferred = false;
        self.conv.tick();
        for (ts, r) in reqs {
            match r {
                Request::Report { id, seq, forced } => {
                    let flags = if forced { fmt::STALL_FORCED_FLUSH } else { 0 };
                    self.report(ts, id, seq, flags, out);
                }
                Request::End { id, seq } => {
                    self.report(ts, id, seq, fmt::STALL_END | fmt::STALL_FORCED_FLUSH, out);
                }
                Request::Resolved { id } => out.push(Event::Stall(fmt::Stall {
                    ts,
                    since: super::last_end(),
                    id,
                    seq: 0,
                    outstanding: 0,
                    flags: fmt::STALL_RESOLVED,
                })),
            }
        }
    }
}

/// (tid, scheduler state letter) of every thread of this process.
fn tasks() -> Vec<(u32, u8)> {
    let mut v = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return v;
    };
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        v.push((tid, parse_stat(&stat).1));
    }
    v.sort_by_key(|t| t.0);
    v
}

/// The name and state letter from a `/proc/<pid>/task/<tid>/stat` line.
fn parse_stat(stat: &str) -> (String, u8) {
    let open = stat.find('(');
    let close = stat.rfind(')');
    match (open, close) {
        (Some(a), Some(b)) if b > a => {
            let comm = stat[a + 1..b].to_string();
            let state = stat[b + 1..]
                .trim_start()
                .bytes()
                .next()
                .unwrap_or(fmt::STATE_UNKNOWN);
            (comm, state)
        }
        _ => (String::new(), fmt::STATE_UNKNOWN),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_give_name_and_state() {
        assert_eq!(
            parse_stat("123 (python3 (w)) S 1 2 3"),
            ("python3 (w)".to_string(), b'S')
        );
        assert_eq!(parse_stat("garbage"), (String::new(), fmt::STATE_UNKNOWN));
        let me = tasks();
        assert!(me.iter().any(|t| t.0 == crate::base::clock::tid()));
    }
}
