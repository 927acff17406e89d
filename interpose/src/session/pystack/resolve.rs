//! On the writer thread: raw frames (code object address, bytecode offset) into file,
//! function and line, and stacks interned as `PyStack` events. Also the trace's
//! `python_call_sites` fact: what was found, or why there are no stacks.
//!
//! A code object is read once (its file name, name, first line and line table) and
//! cached by address. An address can be reused once the code object is freed (code
//! made at run time, the interpreter finalising), so a cached entry is checked again
//! the first time it is used in each drain: its type, and the pointers to its file
//! name, name and line table, and its first line, must be the same. Every read goes
//! through `mem::read`, so a freed object gives a failed check, never a fault. An
//! address that holds no code object any more keeps its entry (the object was freed
//! after the capture, as at exit, when the interpreter finalises before the last
//! drain). A frame that cannot be read is left out of its stack. So that a code object
//! is read while it is still alive, the hot path wakes the writer when a thread meets
//! one it has not met before (see `Stack::fresh`).

use super::lines::Lines;
use super::{mem, status, Python};
use crate::base::clock;
use crate::rings::record::{RawFrame, RAW_OFFSET_UNKNOWN};
use crate::rings::source::Stacks;
use crate::writer::Sink;
use gputrace_format::{self as fmt, Event, PyFrame, PyStack};
use std::collections::HashMap;

/// The fact's key.
pub const FACT_KEY: &str = gputrace_env::facts::keys::PYTHON_CALL_SITES;

/// Longest file name or function name read (characters).
const MAX_STR: u64 = 1024;
/// Longest line table read (bytes).
const MAX_TABLE: u64 = 1 << 20;

/// What identifies a code object besides its address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fingerprint {
    filename: u64,
    name: u64,
    table: u64,
    first: i32,
}

struct Code {
    print: Fingerprint,
    /// The drain in which it was last checked.
    checked: u64,
    file: u32,
    function: u32,
    lines: Lines,
}

/// The resolver handed to the ring source.
pub struct Resolver {
    py: Option<&'static Python>,
    depth: usize,
    codes: HashMap<u64, Code>,
    stacks: HashMap<Vec<PyFrame>, u32>,
    next_stack: u32,
    drain: u64,
    /// The status last written as a fact.
    said: Option<String>,
    /// Periodic samples taken from the sampler's queue (reused between drains).
    samples: Vec<super::sample::Sampled>,
}

impl Resolver {
    /// For a trace whose depth setting is `depth` (0: off).
    pub fn new(depth: usize) -> Resolver {
        Resolver {
            py: super::python(),
            depth,
            codes: HashMap::new(),
            stacks: HashMap::new(),
            next_stack: 1,
            drain: 0,
            said: None,
            samples: Vec::new(),
        }
    }

    /// The code object at `addr`'s fingerprint, read now.
    fn fingerprint(py: &Python, addr: u64) -> Option<Fingerprint> {
        let l = &py.layout;
        let end = [
            l.ob_type + 8,
            l.code_filename + 8,
            l.code_name + 8,
            l.code_linetable + 8,
            l.code_firstlineno + 4,
        ]
        .into_iter()
        .max()?;
        let mut b = vec![0u8; end as usize];
        mem::read(addr, &mut b).ok()?;
        if mem::u64_at(&b, l.ob_type as usize) != py.code_type {
            return None;
        }
        Some(Fingerprint {
            filename: mem::u64_at(&b, l.code_filename as usize),
            name: mem::u64_at(&b, l.code_name as usize),
            table: mem::u64_at(&b, l.code_linetable as usize),
            first: mem::i32_at(&b, l.code_firstlineno as usize),
        })
    }

    /// The code object at `addr`, read (or checked again) as needed.
    fn code(&mut self, addr: u64, out: &mut Sink<'_>) -> Option<&Code> {
        let py = self.py?;
        let drain = self.drain;
        let fresh = match self.codes.get(&addr) {
            Some(c) if c.checked == drain => false,
            // No code object there any more: it was freed after the capture (the
            // interpreter finalising, code made at run time), and what was cached is
            // what the frame ran. A different code object there: read it anew.
            Some(c) => Self::fingerprint(py, addr).is_some_and(|p| p != c.print),
            None => true,
        };
        if fresh {
            self.codes.remove(&addr);
            let print = Self::fingerprint(py, addr)?;
            let file = read_str(py, print.filename).unwrap_or_else(|| "?".into());
            let function = read_str(py, print.name).unwrap_or_else(|| "?".into());
            let table = read_bytes(py, print.table).unwrap_or_default();
            let code = Code {
                print,
                checked: drain,
                file: out.intern(&file),
                function: out.intern(&function),
                lines: Lines::decode(py.layout.lines, &table, print.first.max(0) as u32),
            };
            self.codes.insert(addr, code);
        }
        let c = self.codes.get_mut(&addr)?;
        c.checked = drain;
        Some(c)
    }
}

/// A `str` object's text: compact strings (every code object's names are), ASCII or
/// Latin-1/UCS-2/UCS-4; None for anything else.
fn read_str(py: &Python, addr: u64) -> Option<String> {
    let l = &py.layout;
    let mut h = vec![0u8; l.str_compact_size as usize];
    mem::read(addr, &mut h).ok()?;
    if mem::u64_at(&h, l.ob_type as usize) != py.str_type {
        return None;
    }
    let len = mem::u64_at(&h, l.str_length as usize);
    let state = *h.get(l.str_state as usize)?;
    // state: interned:2, kind:3, compact:1, ascii:1 (3.9 to 3.13).
    let kind = (state >> 2) & 7;
    let compact = state & (1 << 5) != 0;
    let ascii = state & (1 << 6) != 0;
    if !compact || len > MAX_STR {
        return None;
    }
    let (data, width) = if ascii {
        (addr + l.str_ascii_size, 1)
    } else {
        (addr + l.str_compact_size, kind as u64)
    };
    if !matches!(width, 1 | 2 | 4) {
        return None;
    }
    let mut b = vec![0u8; (len * width) as usize];
    mem::read(data, &mut b).ok()?;
    Some(match width {
        1 => b.iter().map(|&c| c as char).collect(),
        2 => b
            .chunks_exact(2)
            .map(|c| char::from_u32(u16::from_le_bytes([c[0], c[1]]) as u32).unwrap_or('?'))
            .collect(),
        _ => b
            .chunks_exact(4)
            .map(|c| char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]])).unwrap_or('?'))
            .collect(),
    })
}

/// A `bytes` object's contents.
fn read_bytes(py: &Python, addr: u64) -> Option<Vec<u8>> {
    let l = &py.layout;
    let mut h = vec![0u8; l.bytes_sval as usize];
    mem::read(addr, &mut h).ok()?;
    if mem::u64_at(&h, l.ob_type as usize) != py.bytes_type {
        return None;
    }
    let n = mem::u64_at(&h, l.bytes_size as usize);
    if n > MAX_TABLE {
        return None;
    }
    let mut b = vec![0u8; n as usize];
    mem::read(addr + l.bytes_sval, &mut b).ok()?;
    Some(b)
}

impl Stacks for Resolver {
    fn pass(&mut self, out: &mut Sink<'_>) {
        self.drain += 1;
        let now = match status(self.depth) {
            Ok(s) => s,
            Err(why) => format!("none: {why}"),
        };
        if self.said.as_deref() != Some(now.as_str()) {
            let key = out.intern(FACT_KEY);
            let value = out.intern(&now);
            out.push(Event::Fact(fmt::Fact {
                ts: clock::now_ns(),
                device: fmt::FACT_HOST,
                key,
                value,
            }));
            self.said = Some(now);
        }
        // The periodic samples, interned like call sites' stacks.
        let mut samples = std::mem::take(&mut self.samples);
        let dropped = super::sample::drain(&mut samples);
        for x in samples.drain(..) {
            if let Some(stack) = self.intern(super::sample::frames(&x), out) {
                out.push(Event::PySample(fmt::PySample {
                    ts: x.ts,
                    tid: x.tid,
                    stack,
                }));
            }
        }
        self.samples = samples;
        if dropped > 0 {
            out.push(Event::Dropped {
                ts: clock::now_ns(),
                source: fmt::DROP_HOST_SAMPLES,
                count: dropped,
            });
        }
    }

    fn intern(&mut self, frames: &[RawFrame], out: &mut Sink<'_>) -> Option<u32> {
        let mut resolved = Vec::with_capacity(frames.len());
        for f in frames {
            let Some(c) = self.code(f.code, out) else {
                continue;
            };
            let line = if f.offset == RAW_OFFSET_UNKNOWN {
                0
            } else {
                c.lines.line_at(f.offset)
            };
            resolved.push(PyFrame {
                file: c.file,
                function: c.function,
                line,
            });
        }
        if resolved.is_empty() {
            return None;
        }
        if let Some(id) = self.stacks.get(&resolved) {
            return Some(*id);
        }
        let id = self.next_stack;
        self.next_stack += 1;
        out.push(Event::PyStack(PyStack {
            id,
            frames: resolved.clone(),
        }));
        self.stacks.insert(resolved, id);
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writer::intern::Interner;

    #[test]
    fn without_an_interpreter_the_fact_says_why_once() {
        let mut r = Resolver::new(0);
        let mut names = Interner::new();
        let mut events = Vec::new();
        let mut out = Sink {
            names: &mut names,
            events: &mut events,
        };
        r.pass(&mut out);
        r.pass(&mut out);
        let facts: Vec<_> = events
            .iter()
            .filter(|e| matches!(e, Event::Fact(_)))
            .collect();
        assert_eq!(facts.len(), 1);
        assert!(events.contains(&Event::Str {
            id: 2,
            text: "none: off (GPUTRACE_PYSTACK=0)".into()
        }));
        let mut out = Sink {
            names: &mut names,
            events: &mut events,
        };
        let f = RawFrame { code: 8, offset: 0 };
        assert_eq!(r.intern(&[f], &mut out), None);
    }
}
