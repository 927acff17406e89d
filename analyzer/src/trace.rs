//! A trace loaded into typed, time-sorted tables.

use gputrace_format::{self as fmt, Event, Meta, ReadError, ReadStats};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// One process's trace, decoded.
#[derive(Debug, Default, Clone)]
pub struct Trace {
    pub path: PathBuf,
    pub meta: Meta,
    pub stats: ReadStats,
    /// Interned strings by id (index 0 is the empty string).
    pub strings: Vec<String>,
    pub devices: Vec<fmt::Device>,
    pub kernels: Vec<fmt::Kernel>,
    pub memcpys: Vec<fmt::Memcpy>,
    pub memsets: Vec<fmt::Memset>,
    pub syncs: Vec<fmt::Sync>,
    pub memory: Vec<fmt::Memory>,
    pub apis: Vec<fmt::Api>,
    /// (ts, state, reason)
    pub states: Vec<(u64, u8, u32)>,
    /// (ts, source, count)
    pub drops: Vec<(u64, u8, u64)>,
    pub threads: HashMap<u32, u32>,
    /// (cupti, mono, real)
    pub clocks: Vec<(u64, u64, u64)>,
}

impl Trace {
    /// Reads and decodes a trace file.
    pub fn load(path: &Path) -> Result<Trace, ReadError> {
        let data = std::fs::read(path).map_err(|e| ReadError::Io {
            path: path.to_path_buf(),
            source: e,
        })?;
        Self::from_bytes(path, &data)
    }

    pub fn from_bytes(path: &Path, data: &[u8]) -> Result<Trace, ReadError> {
        let mut r = fmt::open(path, data)?;
        let mut t = Trace {
            path: path.to_path_buf(),
            meta: r.meta.clone(),
            strings: vec![String::new()],
            ..Default::default()
        };
        r.for_each_event(|e| t.add(e));
        t.stats = r.stats.clone();
        t.finish();
        Ok(t)
    }

    /// Builds a trace from events (tests, synthetic traces).
    pub fn from_events(meta: Meta, events: impl IntoIterator<Item = Event>) -> Trace {
        let mut t = Trace {
            meta,
            strings: vec![String::new()],
            ..Default::default()
        };
        for e in events {
            t.add(e);
        }
        t.finish();
        t
    }

    fn add(&mut self, e: Event) {
        match e {
            Event::Str { id, text } => {
                let i = id as usize;
                // Ids come from the file: bound them so a corrupt id cannot exhaust memory.
                if i < (1 << 24) {
                    if self.strings.len() <= i {
                        self.strings.resize(i + 1, String::new());
                    }
                    self.strings[i] = text;
                }
            }
            Event::Clock {
                cupti_ns,
                mono_ns,
                real_ns,
            } => self.clocks.push((cupti_ns, mono_ns, real_ns)),
            Event::Device(d) => {
                if !self.devices.iter().any(|x| x.id == d.id) {
                    self.devices.push(d)
                }
            }
            Event::Kernel(k) => self.kernels.push(k),
            Event::Memcpy(m) => self.memcpys.push(m),
            Event::Memset(m) => self.memsets.push(m),
            Event::Sync(s) => self.syncs.push(s),
            Event::Memory(m) => self.memory.push(m),
            Event::Api(a) => self.apis.push(a),
            Event::Dropped { ts, source, count } => self.drops.push((ts, source, count)),
            Event::State { ts, state, reason } => self.states.push((ts, state, reason)),
            Event::Thread { tid, name } => {
                self.threads.insert(tid, name);
            }
        }
    }

    fn finish(&mut self) {
        self.kernels.sort_by_key(|k| (k.start, k.end));
        self.memcpys.sort_by_key(|k| (k.start, k.end));
        self.memsets.sort_by_key(|k| (k.start, k.end));
        self.syncs.sort_by_key(|k| (k.start, k.end));
        self.memory.sort_by_key(|k| k.ts);
        self.apis.sort_by_key(|k| (k.start, k.end));
        self.states.sort_by_key(|s| s.0);
        self.devices.sort_by_key(|d| d.id);
    }

    pub fn str(&self, id: u32) -> &str {
        self.strings
            .get(id as usize)
            .map(|s| s.as_str())
            .unwrap_or("")
    }

    pub fn thread_name(&self, tid: u32) -> &str {
        self.threads.get(&tid).map(|n| self.str(*n)).unwrap_or("")
    }

    /// Total records lost, by source.
    pub fn dropped(&self, source: u8) -> u64 {
        self.drops
            .iter()
            .filter(|d| d.1 == source)
            .map(|d| d.2)
            .sum()
    }

    /// First and last timestamps of any recorded interval.
    pub fn span(&self) -> Option<(u64, u64)> {
        let mut lo = u64::MAX;
        let mut hi = 0u64;
        let mut see = |s: u64, e: u64| {
            if s > 0 {
                lo = lo.min(s);
                hi = hi.max(e.max(s));
            }
        };
        for k in &self.kernels {
            see(k.start, k.end)
        }
        for m in &self.memcpys {
            see(m.start, m.end)
        }
        for m in &self.memsets {
            see(m.start, m.end)
        }
        for a in &self.apis {
            see(a.start, a.end)
        }
        for s in &self.syncs {
            see(s.start, s.end)
        }
        (lo <= hi).then_some((lo, hi))
    }

    /// Intervals in which the collector did not see GPU activity (another CUPTI user).
    /// An open window at the end runs to the end of the trace.
    pub fn blind_windows(&self) -> Vec<(u64, u64, String)> {
        let end = self.span().map(|s| s.1).unwrap_or(0);
        let mut out = Vec::new();
        let mut open: Option<(u64, u32)> = None;
        for (ts, st, reason) in &self.states {
            match fmt::CollectorState::from_u8(*st) {
                Some(fmt::CollectorState::Blind) if open.is_none() => open = Some((*ts, *reason)),
                Some(fmt::CollectorState::Blind) => {}
                Some(_) => {
                    if let Some((s, r)) = open.take() {
                        out.push((s, *ts, self.str(r).to_string()));
                    }
                }
                None => {}
            }
        }
        if let Some((s, r)) = open {
            out.push((s, end.max(s), self.str(r).to_string()));
        }
        out
    }
}

/// Demangles a C++ kernel name; returns the input unchanged if it is not mangled.
pub fn demangle(name: &str) -> String {
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            let opts = cpp_demangle::DemangleOptions::new()
                .no_params()
                .no_return_type();
            if let Ok(s) = sym.demangle(&opts) {
                return s;
            }
        }
    }
    name.to_string()
}

/// Length of the union of intervals (need not be sorted).
pub fn union_len(iv: &mut [(u64, u64)]) -> u64 {
    iv.sort_unstable();
    let mut total = 0;
    let mut cur: Option<(u64, u64)> = None;
    for &(s, e) in iv.iter() {
        if e <= s {
            continue;
        }
        match cur {
            Some((cs, ce)) if s <= ce => cur = Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                cur = Some((s, e));
            }
            None => cur = Some((s, e)),
        }
    }
    if let Some((cs, ce)) = cur {
        total += ce - cs;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn union_merges_overlaps() {
        let mut v = vec![(10, 20), (15, 30), (40, 50), (0, 5), (50, 50)];
        assert_eq!(union_len(&mut v), 5 + 20 + 10);
        assert_eq!(union_len(&mut []), 0);
    }

    #[test]
    fn demangles_cpp_and_keeps_plain_names() {
        assert_eq!(demangle("_Z6kernelPfi"), "kernel");
        assert_eq!(demangle("my_triton_kernel"), "my_triton_kernel");
        assert_eq!(demangle("_Zgarbage"), "_Zgarbage");
    }

    #[test]
    fn blind_windows_pair_up() {
        let t = Trace::from_events(
            Meta::default(),
            vec![
                Event::Str {
                    id: 1,
                    text: "profiler".into(),
                },
                Event::State {
                    ts: 100,
                    state: fmt::CollectorState::Blind as u8,
                    reason: 1,
                },
                Event::State {
                    ts: 300,
                    state: fmt::CollectorState::Tracing as u8,
                    reason: 0,
                },
            ],
        );
        assert_eq!(t.blind_windows(), vec![(100, 300, "profiler".to_string())]);
    }
}
