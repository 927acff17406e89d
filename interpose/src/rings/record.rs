//! How host events travel through a 64-byte ring record, and back into trace events on
//! the writer thread: the symbol hooks' calls, and API calls (from the CUPTI callbacks,
//! or CUPTI RUNTIME activity records decoded into the same shape).
//!
//! Every record: `kind` = `REC_*`, `tid` = the calling thread, `t0` / `t1` = the call's
//! entry and exit stamps (TSC or CLOCK_REALTIME, see base/tsc.rs; [`decode`] converts them to
//! CLOCK_REALTIME ns). The rest, by kind:
//!
//! | kind | a | b | corr | x[0] | x[1] | x[2] | x[3] |
//! | --- | --- | --- | --- | --- | --- | --- | --- |
//! | API | domain | callback id | CUPTI correlation id | bytes | arg | result | pointer (0: none) |
//! | COPY | api, copy_kind << 8 | result | host_kind, flags << 8, dst dev << 16, src dev << 24 | bytes | stream | dst | src |
//! | CALL | call | result | - | stream | arg0 | arg1 | arg2 |
//! | HOST_ALLOC | op | result | flags | ptr | bytes | - | - |
//! | NCCL | op, datatype << 8 | peer / root | seq (low 32 bits) | stream | count | comm id | rank:24, nranks:24, result:8, redop:8 |
//! | NCCL_COMM | op | result | color | comm | comm id | parent id | rank, nranks << 32 |
//! | NVTX | kind:4, flags:4, text length:8 | id low | id high | text bytes 8..40 (t1 holds bytes 0..8) ||||
//! | PYSTACK | frames here, first index << 8 | frames in all | the call's t0, low 32 bits | offsets of frames 0, 1 (in t0) and 2, 3 (in t1) | code | code | code | code |
//!
//! NVTX records carry their text inline (the caller's string may be gone by the time
//! the writer reads the ring): up to [`NVTX_TEXT`] bytes, flagged when cut.
//!
//! PYSTACK records carry a Python stack as raw frames (code object address, bytecode
//! offset), [`FRAMES_PER_RECORD`] to a record, pushed just before the record of the
//! call they belong to; `corr` and that record's entry stamp must agree, so a stack
//! whose call record was dropped (a full ring) is never pinned on another call.

use super::{
    HostRecord, REC_CALL, REC_COPY, REC_HOST_ALLOC, REC_NCCL, REC_NCCL_COMM, REC_NVTX, REC_PYSTACK,
};
use crate::base::cupti::apis;
use crate::base::tsc::Converter;
use crate::writer::intern::Interner;
use crate::writer::Sink;
use gputrace_format::{self as fmt, Event};
use std::collections::HashMap;

/// Bytes of NVTX text a record holds.
pub const NVTX_TEXT: usize = 40;

/// One Python frame as the hot path takes it: the code object's address and the byte
/// offset of the instruction running in it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RawFrame {
    pub code: u64,
    pub offset: u32,
}

/// [`RawFrame::offset`] when the position could not be read.
pub const RAW_OFFSET_UNKNOWN: u32 = u32::MAX;

/// Raw frames one PYSTACK record holds.
pub const FRAMES_PER_RECORD: usize = 4;

/// The PYSTACK records of `frames` (innermost first), for the call of thread `tid`
/// whose entry stamp is `t0`, handed to `each` in order.
pub fn pystack(frames: &[RawFrame], tid: u32, t0: u64, mut each: impl FnMut(&HostRecord)) {
    let total = frames.len().min(u16::MAX as usize) as u32;
    for (i, part) in frames.chunks(FRAMES_PER_RECORD).enumerate() {
        let first = (i * FRAMES_PER_RECORD) as u16;
        let mut r = HostRecord {
            kind: REC_PYSTACK,
            a: part.len() as u16 | first << 8,
            b: total,
            tid,
            corr: t0 as u32,
            ..Default::default()
        };
        let mut offs = [0u32; FRAMES_PER_RECORD];
        for (j, f) in part.iter().enumerate() {
            r.x[j] = f.code;
            offs[j] = f.offset;
        }
        r.t0 = offs[0] as u64 | (offs[1] as u64) << 32;
        r.t1 = offs[2] as u64 | (offs[3] as u64) << 32;
        each(&r);
    }
}

/// One PYSTACK record read back: (index of its first frame, frames in the whole
/// stack, the call's t0 low bits, its frames).
pub fn pystack_part(r: &HostRecord) -> (usize, usize, u32, Vec<RawFrame>) {
    let n = ((r.a & 0xFF) as usize).min(FRAMES_PER_RECORD);
    let offs = [
        r.t0 as u32,
        (r.t0 >> 32) as u32,
        r.t1 as u32,
        (r.t1 >> 32) as u32,
    ];
    let frames = (0..n)
        .map(|j| RawFrame {
            code: r.x[j],
            offset: offs[j],
        })
        .collect();
    ((r.a >> 8) as usize, r.b as usize, r.corr, frames)
}

const NO_DEV: u32 = 0xFF;
const UNKNOWN_RANK: u64 = 0xFF_FFFF;

fn dev8(d: u32) -> u32 {
    if d == u32::MAX {
        NO_DEV
    } else {
        d.min(NO_DEV - 1)
    }
}

fn undev8(d: u32) -> u32 {
    if d == NO_DEV {
        u32::MAX
    } else {
        d
    }
}

fn rank24(r: i32) -> u64 {
    if r < 0 {
        UNKNOWN_RANK
    } else {
        (r as u64).min(UNKNOWN_RANK - 1)
    }
}

fn unrank24(v: u64) -> i32 {
    let v = v & UNKNOWN_RANK;
    if v == UNKNOWN_RANK {
        -1
    } else {
        v as i32
    }
}

pub fn copy(c: &fmt::HostCopy) -> HostRecord {
    HostRecord {
        kind: REC_COPY,
        a: c.api as u16 | (c.copy_kind as u16) << 8,
        b: c.result,
        tid: c.tid,
        corr: c.host_kind as u32
            | (c.flags as u32) << 8
            | dev8(c.dst_device) << 16
            | dev8(c.src_device) << 24,
        t0: c.start,
        t1: c.end,
        x: [c.bytes, c.stream, c.dst, c.src],
    }
}

pub fn call(c: &fmt::HostCall) -> HostRecord {
    HostRecord {
        kind: REC_CALL,
        a: c.call,
        b: c.result,
        tid: c.tid,
        corr: 0,
        t0: c.start,
        t1: c.end,
        x: [c.stream, c.arg0, c.arg1, c.arg2],
    }
}

pub fn host_alloc(h: &fmt::HostAlloc) -> HostRecord {
    HostRecord {
        kind: REC_HOST_ALLOC,
        a: h.op as u16,
        b: h.result,
        tid: h.tid,
        corr: h.flags,
        t0: h.start,
        t1: h.end,
        x: [h.ptr, h.bytes, 0, 0],
    }
}

/// `bytes` is not carried: the writer derives it from count and datatype.
pub fn nccl(n: &fmt::Nccl) -> HostRecord {
    HostRecord {
        kind: REC_NCCL,
        a: n.op as u16 | (n.datatype as u16) << 8,
        b: n.peer_or_root as u32,
        tid: n.tid,
        corr: n.seq as u32,
        t0: n.start,
        t1: n.end,
        x: [
            n.stream,
            n.count,
            n.comm_id,
            rank24(n.rank)
                | rank24(n.nranks) << 24
                | (n.result.min(255) as u64) << 48
                | (n.redop as u64) << 56,
        ],
    }
}

pub fn nccl_comm(n: &fmt::NcclComm) -> HostRecord {
    HostRecord {
        kind: REC_NCCL_COMM,
        a: n.op as u16,
        b: n.result,
        tid: n.tid,
        corr: n.color as u32,
        t0: n.start,
        t1: n.end,
        x: [
            n.comm,
            n.comm_id,
            n.parent_id,
            n.rank as u32 as u64 | (n.nranks as u32 as u64) << 32,
        ],
    }
}

/// An NVTX record; `text` holds at most [`NVTX_TEXT`] bytes (the caller cuts it and
/// sets `NVTX_FLAG_TRUNCATED`).
pub fn nvtx(ts: u64, tid: u32, kind: u8, flags: u8, id: u64, text: &[u8]) -> HostRecord {
    let n = text.len().min(NVTX_TEXT);
    let mut buf = [0u8; NVTX_TEXT];
    buf[..n].copy_from_slice(&text[..n]);
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&buf[i * 8..i * 8 + 8]);
        u64::from_le_bytes(w)
    };
    HostRecord {
        kind: REC_NVTX,
        a: (kind as u16 & 0xF) | (flags as u16 & 0xF) << 4 | (n as u16) << 8,
        b: id as u32,
        tid,
        corr: (id >> 32) as u32,
        t0: ts,
        t1: word(0),
        x: [word(1), word(2), word(3), word(4)],
    }
}

/// The text bytes of an NVTX record.
pub fn nvtx_text(r: &HostRecord) -> ([u8; NVTX_TEXT], usize) {
    let mut buf = [0u8; NVTX_TEXT];
    buf[..8].copy_from_slice(&r.t1.to_le_bytes());
    for (i, w) in r.x.iter().enumerate() {
        buf[8 + i * 8..16 + i * 8].copy_from_slice(&w.to_le_bytes());
    }
    let n = ((r.a >> 8) as usize).min(NVTX_TEXT);
    (buf, n)
}

/// The longest valid UTF-8 prefix (text cut mid-character loses that character).
fn utf8_prefix(b: &[u8]) -> &str {
    match std::str::from_utf8(b) {
        Ok(s) => s,
        Err(e) => {
            // SAFETY: from_utf8 vouched for the bytes before valid_up_to.
            unsafe { std::str::from_utf8_unchecked(&b[..e.valid_up_to()]) }
        }
    }
}

/// The names of API calls, interned once per trace.
#[derive(Default)]
pub struct ApiNames(HashMap<(u8, u32), u32>);

impl ApiNames {
    /// The `Api` event of a `REC_API` record (its stamps already CLOCK_REALTIME ns),
    /// the call's name interned on first sight.
    pub fn event(&mut self, r: &HostRecord, out: &mut Sink<'_>) -> Event {
        let domain = r.a as u8;
        let name = match self.0.get(&(domain, r.b)) {
            Some(id) => *id,
            None => {
                let text = apis::find(domain, r.b)
                    .map(|a| a.name.to_string())
                    .unwrap_or_else(|| format!("cbid_{}", r.b));
                let id = out.intern(&text);
                self.0.insert((domain, r.b), id);
                id
            }
        };
        Event::Api(fmt::Api {
            start: r.t0,
            end: r.t1,
            tid: r.tid,
            corr: r.corr,
            domain,
            cbid: r.b,
            name,
            bytes: r.x[0],
            arg: r.x[1] as u32,
            result: r.x[2] as u32,
            ptr: match r.x[3] {
                0 => fmt::ENV_NA64,
                p => p,
            },
        })
    }
}

/// Turns one symbol-hook record into trace events (Str events first when the NVTX text
/// is new), its stamps converted to CLOCK_REALTIME ns with `conv`. Returns false for
/// kinds this function does not own (`REC_API`: see [`ApiNames`]).
pub fn decode(
    r: &HostRecord,
    conv: &Converter,
    names: &mut Interner,
    out: &mut Vec<Event>,
) -> bool {
    let mut r = *r;
    r.t0 = conv.to_real(r.t0);
    if r.kind != REC_NVTX {
        // NVTX records carry text in t1.
        r.t1 = conv.to_real(r.t1);
    }
    let r = &r;
    let ev = match r.kind {
        REC_COPY => Event::HostCopy(fmt::HostCopy {
            start: r.t0,
            end: r.t1,
            tid: r.tid,
            api: r.a as u8,
            copy_kind: (r.a >> 8) as u8,
            host_kind: r.corr as u8,
            source: fmt::CLASS_SOURCE_REGISTRY,
            flags: (r.corr >> 8) as u8,
            bytes: r.x[0],
            stream: r.x[1],
            dst: r.x[2],
            src: r.x[3],
            dst_device: undev8((r.corr >> 16) & 0xFF),
            src_device: undev8(r.corr >> 24),
            result: r.b,
        }),
        REC_CALL => Event::HostCall(fmt::HostCall {
            start: r.t0,
            end: r.t1,
            tid: r.tid,
            call: r.a,
            stream: r.x[0],
            arg0: r.x[1],
            arg1: r.x[2],
            arg2: r.x[3],
            result: r.b,
        }),
        REC_HOST_ALLOC => Event::HostAlloc(fmt::HostAlloc {
            start: r.t0,
            end: r.t1,
            tid: r.tid,
            op: r.a as u8,
            ptr: r.x[0],
            bytes: r.x[1],
            flags: r.corr,
            result: r.b,
        }),
        REC_NCCL => {
            let datatype = (r.a >> 8) as u8;
            let count = r.x[1];
            let packed = r.x[3];
            Event::Nccl(fmt::Nccl {
                start: r.t0,
                end: r.t1,
                tid: r.tid,
                op: r.a as u8,
                stream: r.x[0],
                count,
                bytes: count.saturating_mul(fmt::nccl_datatype(datatype).0),
                datatype,
                redop: (packed >> 56) as u8,
                peer_or_root: r.b as i32,
                comm_id: r.x[2],
                rank: unrank24(packed),
                nranks: unrank24(packed >> 24),
                seq: r.corr as u64,
                result: ((packed >> 48) & 0xFF) as u32,
            })
        }
        REC_NCCL_COMM => Event::NcclComm(fmt::NcclComm {
            start: r.t0,
            end: r.t1,
            tid: r.tid,
            op: r.a as u8,
            comm: r.x[0],
            comm_id: r.x[1],
            parent_id: r.x[2],
            rank: r.x[3] as u32 as i32,
            nranks: (r.x[3] >> 32) as u32 as i32,
            color: r.corr as i32,
            result: r.b,
        }),
        REC_NVTX => {
            let (buf, n) = nvtx_text(r);
            let text = if n == 0 {
                0
            } else {
                names.intern(utf8_prefix(&buf[..n]), out)
            };
            Event::Nvtx(fmt::Nvtx {
                ts: r.t0,
                tid: r.tid,
                kind: (r.a & 0xF) as u8,
                flags: ((r.a >> 4) & 0xF) as u8,
                id: r.b as u64 | (r.corr as u64) << 32,
                text,
            })
        }
        _ => return false,
    };
    out.push(ev);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rings::REC_API;
    use gputrace_format::{CopyKind, MemKind};

    fn back(r: HostRecord) -> Vec<Event> {
        let mut names = Interner::new();
        let mut out = Vec::new();
        assert!(decode(&r, &Converter::identity(), &mut names, &mut out));
        out
    }

    #[test]
    fn stamps_are_converted_but_nvtx_text_is_not() {
        let conv = Converter::with(1000, 1_000_000, 2.0);
        let mut names = Interner::new();
        let mut out = Vec::new();
        let mut c = copy(&fmt::HostCopy {
            start: 1010,
            end: 1020,
            ..Default::default()
        });
        c.tid = 1;
        decode(&c, &conv, &mut names, &mut out);
        let Event::HostCopy(h) = &out[0] else {
            panic!()
        };
        assert_eq!((h.start, h.end), (1_000_020, 1_000_040));
        out.clear();
        decode(
            &nvtx(1005, 1, fmt::NVTX_MARK, 0, 0, b"abcdefghij"),
            &conv,
            &mut names,
            &mut out,
        );
        assert_eq!(
            out[0],
            Event::Str {
                id: 1,
                text: "abcdefghij".into()
            }
        );
        let Event::Nvtx(n) = &out[1] else { panic!() };
        assert_eq!(n.ts, 1_000_010);
    }

    #[test]
    fn copies_round_trip() {
        let c = fmt::HostCopy {
            start: 10,
            end: 20,
            tid: 5,
            api: fmt::HOSTCOPY_MEMCPY_PEER_ASYNC,
            copy_kind: CopyKind::PtoP as u8,
            host_kind: MemKind::Device as u8,
            source: fmt::CLASS_SOURCE_REGISTRY,
            flags: fmt::HOSTCOPY_FLAG_ASYNC | fmt::HOSTCOPY_FLAG_CUPTI_API,
            bytes: 1 << 40,
            stream: 0xabc,
            dst: 0x7f00_0000_1000,
            src: u64::MAX,
            dst_device: 1,
            src_device: 0,
            result: 0xFFFF_FFFF,
        };
        assert_eq!(back(copy(&c)), vec![Event::HostCopy(c.clone())]);
        let mut d = c;
        d.dst_device = u32::MAX;
        d.src_device = u32::MAX;
        assert_eq!(back(copy(&d)), vec![Event::HostCopy(d)]);
    }

    #[test]
    fn calls_and_allocs_round_trip() {
        let c = fmt::HostCall {
            start: 1,
            end: 2,
            tid: 3,
            call: fmt::HOSTCALL_STREAM_WAIT_EVENT,
            stream: 4,
            arg0: 5,
            arg1: 6,
            arg2: u64::MAX,
            result: 400,
        };
        assert_eq!(back(call(&c)), vec![Event::HostCall(c)]);
        let a = fmt::HostAlloc {
            start: 1,
            end: 2,
            tid: 3,
            op: fmt::HOSTALLOC_HOST_REGISTER,
            ptr: 0x1000,
            bytes: 1 << 30,
            flags: 0xF,
            result: 0,
        };
        assert_eq!(back(host_alloc(&a)), vec![Event::HostAlloc(a)]);
    }

    #[test]
    fn nccl_round_trips_and_derives_bytes() {
        let n = fmt::Nccl {
            start: 100,
            end: 200,
            tid: 9,
            op: fmt::NCCL_ALL_REDUCE,
            stream: 0x55,
            count: 1000,
            bytes: 2000,
            datatype: 9, // bfloat16
            redop: 4,
            peer_or_root: -1,
            comm_id: 0xdead_beef_0000_0001,
            rank: 3,
            nranks: 16_000_000,
            seq: 77,
            result: 5,
        };
        assert_eq!(back(nccl(&n)), vec![Event::Nccl(n.clone())]);
        let mut u = n;
        u.rank = -1;
        u.nranks = -1;
        u.datatype = fmt::NCCL_NO_DATATYPE;
        u.bytes = 0;
        u.redop = fmt::NCCL_NO_REDOP;
        assert_eq!(back(nccl(&u)), vec![Event::Nccl(u)]);
    }

    #[test]
    fn comms_round_trip() {
        let n = fmt::NcclComm {
            start: 1,
            end: 2,
            tid: 3,
            op: fmt::NCCL_COMM_SPLIT,
            comm: 0x4000,
            comm_id: 5,
            parent_id: 6,
            rank: -1,
            nranks: 8,
            color: -1,
            result: 7,
        };
        assert_eq!(back(nccl_comm(&n)), vec![Event::NcclComm(n)]);
    }

    #[test]
    fn nvtx_text_travels_inline() {
        let r = nvtx(50, 4, fmt::NVTX_START, 0, 0x1_0000_0002, b"forward");
        let evs = back(r);
        assert_eq!(
            evs[0],
            Event::Str {
                id: 1,
                text: "forward".into()
            }
        );
        assert_eq!(
            evs[1],
            Event::Nvtx(fmt::Nvtx {
                ts: 50,
                tid: 4,
                kind: fmt::NVTX_START,
                flags: 0,
                id: 0x1_0000_0002,
                text: 1
            })
        );
        let long = [b'x'; NVTX_TEXT];
        let (buf, n) = nvtx_text(&nvtx(0, 0, fmt::NVTX_MARK, 1, 0, &long));
        assert_eq!((n, &buf[..]), (NVTX_TEXT, &long[..]));
        // No text at all: no string.
        let evs = back(nvtx(1, 2, fmt::NVTX_POP, 0, 0, b""));
        assert_eq!(evs.len(), 1);
    }

    #[test]
    fn text_cut_mid_character_keeps_whole_characters() {
        let s = "é".repeat(25); // 50 bytes
        let r = nvtx(0, 0, fmt::NVTX_MARK, 1, 0, &s.as_bytes()[..NVTX_TEXT - 1]);
        let evs = back(r);
        assert_eq!(
            evs[0],
            Event::Str {
                id: 1,
                text: "é".repeat(19)
            }
        );
    }

    #[test]
    fn python_stacks_split_into_records_and_back() {
        let frames: Vec<RawFrame> = (0..10)
            .map(|i| RawFrame {
                code: 0x7f00_0000_0000 + i * 0x100,
                offset: if i == 3 {
                    RAW_OFFSET_UNKNOWN
                } else {
                    i as u32 * 2
                },
            })
            .collect();
        let mut recs = Vec::new();
        pystack(&frames, 42, 0x1_2345_6789, |r| recs.push(*r));
        assert_eq!(recs.len(), 3);
        let mut back = Vec::new();
        for (i, r) in recs.iter().enumerate() {
            assert_eq!((r.kind, r.tid), (REC_PYSTACK, 42));
            let (first, total, key, part) = pystack_part(r);
            assert_eq!(
                (first, total, key),
                (i * FRAMES_PER_RECORD, 10, 0x2345_6789)
            );
            back.extend(part);
        }
        assert_eq!(back, frames);
        // Left alone by the symbol-hook decoder.
        let mut names = Interner::new();
        let mut out = Vec::new();
        assert!(!decode(
            &recs[0],
            &Converter::identity(),
            &mut names,
            &mut out
        ));
    }

    #[test]
    fn other_kinds_are_left_alone() {
        let mut names = Interner::new();
        let mut out = Vec::new();
        let r = HostRecord {
            kind: REC_API,
            ..Default::default()
        };
        assert!(!decode(&r, &Converter::identity(), &mut names, &mut out));
        assert!(out.is_empty());
    }
}
