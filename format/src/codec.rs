//! Event encoding inside one chunk: tag byte, body length (varint), body. The bodies
//! follow the event table (`event.rs`, codecs in `table.rs`); kernels are the one
//! kind written apart: their launch shape is defined once per file
//! ([`TAG_KERNEL_SHAPE`]) and each kernel refers to it ([`TAG_KERNEL_COMPACT`]).
//! Timestamps and correlation ids are zigzag deltas against the previous ones in the
//! chunk; the state resets at every chunk boundary.

use crate::event::*;
use crate::table::{put_var, Arr, Codec, Corr, End, Na, Sid, Ts, V};
pub use crate::wire::{Body, DecodeError, Delta};

/// Encodes events into one chunk payload.
#[derive(Default)]
pub struct Encoder {
    buf: Vec<u8>,
    body: Vec<u8>,
    delta: Delta,
    count: u32,
    /// Kernel launch shapes defined so far in this file (they outlive chunks).
    shapes: std::collections::HashMap<ShapeKey, u32>,
    /// Events of each tag in this chunk so far.
    tags: Vec<u32>,
}

/// What a kernel launch shape is made of: (name, grid, block, static smem, dynamic
/// smem, registers, graph id, graph node id).
type ShapeKey = (u32, [u32; 3], [u32; 3], u32, u32, u32, u32, u64);

fn shape_of(k: &Kernel) -> ShapeKey {
    (
        k.name,
        k.grid,
        k.block,
        k.static_smem,
        k.dynamic_smem,
        k.registers,
        k.graph_id,
        k.graph_node_id,
    )
}

impl Encoder {
    pub fn new() -> Encoder {
        Encoder::default()
    }

    /// Bytes encoded so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Events encoded so far.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// (tag, events) for every tag in this chunk so far.
    pub fn census(&self) -> Vec<(u8, u32)> {
        let t = self.tags.iter().enumerate();
        t.filter(|(_, n)| **n > 0)
            .map(|(t, n)| (t as u8, *n))
            .collect()
    }

    /// Takes the payload and resets the delta state for the next chunk.
    pub fn take(&mut self) -> (Vec<u8>, u32) {
        let out = std::mem::take(&mut self.buf);
        self.tags.iter_mut().for_each(|n| *n = 0);
        let n = self.count;
        self.delta = Delta::default();
        self.count = 0;
        (out, n)
    }

    /// Appends one event.
    pub fn push(&mut self, ev: &Event) {
        self.body.clear();
        let tag = match ev {
            Event::Kernel(k) => self.kernel(k),
            ev => ev.encode_body(&mut self.delta, &mut self.body),
        };
        self.emit(tag);
        self.count += 1;
    }

    /// A kernel: its launch shape, defined once (a record of its own), then the
    /// kernel's own fields and the shape's id.
    fn kernel(&mut self, k: &Kernel) -> u8 {
        let (d, b) = (&mut self.delta, &mut self.body);
        let key = shape_of(k);
        let shape = match self.shapes.get(&key) {
            Some(id) => *id,
            None => {
                let id = self.shapes.len() as u32;
                self.shapes.insert(key, id);
                put_var(b, id as u64);
                Sid::put(d, b, &k.name);
                Arr::put(d, b, &k.grid);
                Arr::put(d, b, &k.block);
                for x in [k.static_smem, k.dynamic_smem, k.registers, k.graph_id] {
                    put_var(b, x as u64);
                }
                // Appended, and only for a graph node: shapes of kernels launched
                // outside graphs keep the bytes they always had.
                if k.graph_node_id != ENV_NA64 {
                    Na::put(d, b, &k.graph_node_id);
                }
                self.emit(TAG_KERNEL_SHAPE);
                self.body.clear();
                id
            }
        };
        let (d, b) = (&mut self.delta, &mut self.body);
        Ts::put(d, b, &k.start);
        End::put(d, b, &k.end);
        put_var(b, k.device as u64);
        put_var(b, k.stream as u64);
        Corr::put(d, b, &k.corr);
        put_var(b, shape as u64);
        TAG_KERNEL_COMPACT
    }

    /// Appends the record in `body` under `tag`.
    fn emit(&mut self, tag: u8) {
        if self.tags.is_empty() {
            self.tags = vec![0; 256];
        }
        self.tags[tag as usize] += 1;
        self.buf.push(tag);
        put_var(&mut self.buf, self.body.len() as u64);
        self.buf.extend_from_slice(&self.body);
    }
}

/// Events of each tag in a trace (indexed by tag), from a pass over its chunks that
/// expands nothing: for sizing tables before decoding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Census(pub [u64; 256]);

impl Default for Census {
    fn default() -> Census {
        Census([0; 256])
    }
}

impl Census {
    pub fn of(&self, tags: &[u8]) -> usize {
        tags.iter().map(|t| self.0[*t as usize]).sum::<u64>() as usize
    }
}

/// Adds the events of each tag in an (uncompressed) chunk payload to `out`, reading
/// only tags and lengths; stops at the first malformed event.
pub(crate) fn count_tags(payload: &[u8], out: &mut Census) {
    walk_tags(payload, |tag| out.0[tag as usize] += 1);
}

/// Calls `f` with the tag of every event of a chunk payload, reading only tags and
/// lengths. True if the payload is exactly a sequence of whole events (every length in
/// bounds, the last ending at the end); false at the first malformed one.
pub(crate) fn walk_tags(payload: &[u8], mut f: impl FnMut(u8)) -> bool {
    let mut pos = 0;
    while pos < payload.len() {
        let tag = payload[pos];
        let mut b = Body {
            b: payload,
            pos: pos + 1,
            base: 0,
        };
        let Some(end) = b.v().ok().and_then(|l| b.pos.checked_add(l as usize)) else {
            return false;
        };
        if end > payload.len() {
            return false;
        }
        f(tag);
        pos = end;
    }
    true
}

/// Decodes the events of one chunk payload.
pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
    delta: Delta,
    /// Events with tags this reader does not know, skipped.
    pub skipped: u64,
    /// Kernel launch shapes defined so far in the file (carried from chunk to chunk).
    shapes: Shapes,
    /// Set for a chunk decoded apart from the chunks before it (in parallel): shape
    /// definitions, and uses of shapes not in `shapes`, are recorded here in order, for
    /// the reader to apply once the earlier chunks' shapes are known.
    deferred: Option<Vec<ShapeOp>>,
    /// Kernel events produced so far (full and compact).
    kernels: usize,
}

/// A shape definition or use met by a [`Decoder::deferred`] decoder.
#[derive(Clone, Debug)]
pub enum ShapeOp {
    Define(u32, Kernel),
    /// The `nth` kernel event of the chunk (from 0) takes shape `id`.
    Use {
        nth: usize,
        id: u32,
    },
}

/// Kernel launch shapes, applied in file order (see [`Decoder::deferred`]), by id.
#[derive(Clone, Debug, Default)]
pub struct Shapes(Vec<Option<Kernel>>);

/// Ids a definition may skip past the highest one defined: writers give ids in order,
/// but the chunks that defined the ones between may have been lost to damage.
const MAX_SHAPE_SKIP: usize = 1 << 16;

impl Shapes {
    /// One past the highest id defined.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Defines shape `id` (a redefinition replaces). Writers give ids in order; a gap
    /// (shapes defined in a lost chunk) is allowed up to a bound that keeps a corrupt
    /// id from exhausting memory.
    pub fn define(&mut self, id: u32, k: Kernel) -> Result<(), DecodeError> {
        let i = id as usize;
        if i >= self.0.len() + MAX_SHAPE_SKIP || i >= (1 << 22) {
            return Err(DecodeError::BadShape(id));
        }
        if i >= self.0.len() {
            self.0.resize(i + 1, None);
        }
        self.0[i] = Some(k);
        Ok(())
    }

    pub fn get(&self, id: u32) -> Option<&Kernel> {
        self.0.get(id as usize)?.as_ref()
    }

    /// Forgets the shapes from `len` on.
    pub fn truncate(&mut self, len: usize) {
        self.0.truncate(len);
    }

    /// Forgets shape `id`.
    pub fn undefine(&mut self, id: u32) {
        if let Some(s) = self.0.get_mut(id as usize) {
            *s = None;
        }
    }

    /// Gives `k` (timing, device, stream and correlation already set) shape `id`.
    pub fn fill(&self, id: u32, k: &mut Kernel) -> Result<(), DecodeError> {
        let shape = self.get(id).ok_or(DecodeError::BadShape(id))?;
        *k = Kernel {
            start: k.start,
            end: k.end,
            device: k.device,
            stream: k.stream,
            corr: k.corr,
            ..shape.clone()
        };
        Ok(())
    }
}

impl<'a> Decoder<'a> {
    pub fn new(buf: &'a [u8]) -> Decoder<'a> {
        Decoder::with_shapes(buf, Shapes::default())
    }

    /// A decoder for a chunk that follows others: `shapes` are the kernel launch shapes
    /// the earlier chunks defined (see [`Decoder::into_shapes`]).
    pub fn with_shapes(buf: &'a [u8], shapes: Shapes) -> Decoder<'a> {
        Decoder {
            buf,
            pos: 0,
            delta: Delta::default(),
            skipped: 0,
            shapes,
            deferred: None,
            kernels: 0,
        }
    }

    /// A decoder for a chunk whose predecessors may not be decoded yet. `known`: the
    /// shapes defined before some earlier point of the file. Kernels of those shapes
    /// come out whole (right unless a chunk in between redefined one: the reader checks);
    /// shape definitions, and uses of shapes past `known`, are recorded for the reader
    /// to apply in order (see [`Decoder::into_shape_ops`]). Definitions do not change
    /// what this decoder resolves.
    pub fn deferred(buf: &'a [u8], known: Shapes) -> Decoder<'a> {
        Decoder {
            deferred: Some(Vec::new()),
            ..Decoder::with_shapes(buf, known)
        }
    }

    /// The kernel launch shapes known after this chunk, for the next chunk's decoder.
    pub fn into_shapes(self) -> Shapes {
        self.shapes
    }

    /// A deferred decoder's shape definitions and uses, in chunk order.
    pub fn into_shape_ops(self) -> Vec<ShapeOp> {
        self.deferred.unwrap_or_default()
    }

    fn define_shape(&mut self, b: &mut Body) -> Result<(), DecodeError> {
        let d = &mut self.delta;
        let id = b.v32()?;
        let k = Kernel {
            name: b.v32()?,
            grid: Arr::get(d, b)?,
            block: Arr::get(d, b)?,
            static_smem: b.v32()?,
            dynamic_smem: b.v32()?,
            registers: b.v32()?,
            graph_id: b.v32()?,
            // A graph node's id, when the shape has one (shapes end before it otherwise).
            graph_node_id: if b.pos < b.b.len() {
                Na::get(d, b)?
            } else {
                ENV_NA64
            },
            ..Default::default()
        };
        if let Some(ops) = &mut self.deferred {
            ops.push(ShapeOp::Define(id, k));
            return Ok(());
        }
        self.shapes.define(id, k)
    }

    /// A compact kernel: its own fields, and its shape from the shapes defined.
    #[inline(always)]
    fn compact_kernel(&mut self, b: &mut Body) -> Result<Kernel, DecodeError> {
        let d = &mut self.delta;
        let start = Ts::get(d, b)?;
        let end = End::get(d, b)?;
        let device = V::get(d, b)?;
        let stream = V::get(d, b)?;
        let corr = Corr::get(d, b)?;
        let id = b.v32()?;
        // Built once, from its shape where known (the hot path).
        let shape = match (self.shapes.get(id), &mut self.deferred) {
            (Some(shape), _) => shape.clone(),
            // Deferred: shapes past the snapshot are filled in by the reader.
            (None, Some(ops)) => {
                let nth = self.kernels;
                ops.push(ShapeOp::Use { nth, id });
                Kernel::default()
            }
            (None, None) => return Err(DecodeError::BadShape(id)),
        };
        Ok(Kernel {
            start,
            end,
            device,
            stream,
            corr,
            ..shape
        })
    }

    /// The next event, `None` at the end of the payload.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Result<Event, DecodeError>> {
        loop {
            if self.pos >= self.buf.len() {
                return None;
            }
            let tag = self.buf[self.pos];
            let mut head = Body {
                b: self.buf,
                pos: self.pos + 1,
                base: 0,
            };
            let len = match head.v() {
                Ok(l) => l as usize,
                Err(e) => {
                    self.pos = self.buf.len();
                    return Some(Err(e));
                }
            };
            let start = head.pos;
            let Some(end) = start.checked_add(len).filter(|e| *e <= self.buf.len()) else {
                self.pos = self.buf.len();
                return Some(Err(DecodeError::Truncated(start)));
            };
            self.pos = end;
            let mut b = Body {
                b: &self.buf[start..end],
                pos: 0,
                base: start,
            };
            let ev = match tag {
                TAG_KERNEL_SHAPE => match self.define_shape(&mut b) {
                    Ok(()) => continue,
                    Err(e) => return Some(Err(e)),
                },
                TAG_KERNEL_COMPACT => self.compact_kernel(&mut b).map(|k| Some(Event::Kernel(k))),
                // Fields a later minor version appends to a body are not read here
                // (every body carries its own length).
                tag => Event::decode_body(tag, &mut self.delta, &mut b),
            };
            match ev {
                Ok(Some(ev)) => {
                    if let Event::Kernel(_) = ev {
                        self.kernels += 1;
                    }
                    return Some(Ok(ev));
                }
                Ok(None) => {
                    self.skipped += 1;
                    continue;
                }
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample_events() -> Vec<Event> {
        vec![
            Event::Str {
                id: 1,
                text: "_Z6kernelPf".into(),
            },
            Event::Clock {
                cupti_ns: 1_000,
                mono_ns: 5_000,
                real_ns: 1_700_000_000_000_000_000,
            },
            Event::Device(Device {
                id: 0,
                name: 1,
                sm_count: 132,
                max_blocks_per_sm: 32,
                max_threads_per_sm: 2048,
                max_warps_per_sm: 64,
                global_memory: 150_000_000_000,
                cc_major: 9,
                cc_minor: 0,
                max_regs_per_sm: 65536,
                max_smem_per_sm: 233472,
            }),
            Event::Kernel(Kernel {
                start: 10_000,
                end: 12_500,
                device: 0,
                stream: 7,
                corr: 42,
                name: 1,
                grid: [132, 1, 1],
                block: [256, 1, 1],
                static_smem: 0,
                dynamic_smem: 1024,
                registers: 32,
                graph_id: 0,
                graph_node_id: ENV_NA64,
            }),
            Event::Api(Api {
                start: 9_000,
                end: 9_400,
                tid: 1234,
                corr: 41,
                domain: DOMAIN_RUNTIME,
                cbid: 211,
                name: 1,
                bytes: 0,
                arg: 0,
                result: 0,
                ptr: ENV_NA64,
            }),
            Event::Memcpy(Memcpy {
                start: 13_000,
                end: 20_000,
                device: 0,
                stream: 7,
                corr: 43,
                bytes: 1 << 20,
                copy_kind: CopyKind::HtoD as u8,
                src_kind: MemKind::Pageable as u8,
                dst_kind: MemKind::Device as u8,
                flags: 0,
            }),
            Event::Memset(Memset {
                start: 21_000,
                end: 21_100,
                device: 0,
                stream: 7,
                corr: 44,
                bytes: 4096,
                value: 0,
                mem_kind: MemKind::Device as u8,
                flags: 1,
            }),
            Event::Sync(Sync {
                start: 21_000,
                end: 25_000,
                device: 0,
                stream: u32::MAX,
                corr: 45,
                kind: SyncKind::ContextSynchronize as u8,
            }),
            Event::Memory(Memory {
                ts: 8_000,
                device: 0,
                corr: 40,
                address: 0x7f00_0000_0000,
                bytes: 1 << 30,
                op: MEMORY_OP_ALLOC,
                mem_kind: MemKind::Device as u8,
            }),
            Event::Dropped {
                ts: 30_000,
                source: DROP_CUPTI,
                count: 3,
            },
            Event::State {
                ts: 31_000,
                state: CollectorState::Blind as u8,
                reason: 1,
            },
            Event::Thread { tid: 1234, name: 1 },
        ]
    }

    /// Encodes `evs` in one chunk and decodes them back: every event comes back equal, in
    /// order, none skipped.
    pub(crate) fn assert_round_trip(evs: &[Event]) {
        let mut enc = Encoder::new();
        for e in evs {
            enc.push(e);
        }
        let (buf, n) = enc.take();
        assert_eq!(n as usize, evs.len());
        let mut dec = Decoder::new(&buf);
        let out: Vec<_> = std::iter::from_fn(|| dec.next())
            .map(|e| e.unwrap())
            .collect();
        assert_eq!(out, evs);
        assert_eq!(dec.skipped, 0);
    }

    #[test]
    fn round_trip_every_event_kind() {
        assert_round_trip(&sample_events());
    }

    /// One of each symbol-hook event, with values at the edges of their ranges.
    pub(crate) fn hook_events() -> Vec<Event> {
        vec![
            Event::HostCopy(HostCopy {
                start: 40_000,
                end: 41_000,
                tid: 77,
                api: HOSTCOPY_MEMCPY_ASYNC,
                copy_kind: CopyKind::HtoD as u8,
                host_kind: MemKind::Pinned as u8,
                source: CLASS_SOURCE_REGISTRY,
                flags: HOSTCOPY_FLAG_ASYNC | HOSTCOPY_FLAG_CUPTI_API,
                bytes: 1 << 33,
                stream: 0x5555_0000_1000,
                dst: 0x7f00_0000_0000,
                src: u64::MAX,
                dst_device: u32::MAX,
                src_device: 3,
                result: 11,
            }),
            Event::HostCall(HostCall {
                start: 39_000,
                end: 39_500,
                tid: 77,
                call: HOSTCALL_LAUNCH_KERNEL_EXC,
                stream: 0,
                arg0: 0xdead_beef,
                arg1: 132 * 8,
                arg2: 1024,
                result: 0,
            }),
            Event::HostAlloc(HostAlloc {
                start: 50_000,
                end: 50_010,
                tid: 78,
                op: HOSTALLOC_HOST_REGISTER,
                ptr: 0x7fff_0000_0000,
                bytes: 4096,
                flags: 0x0f,
                result: 0,
            }),
            Event::Nccl(Nccl {
                start: 60_000,
                end: 60_001,
                tid: 79,
                op: NCCL_REDUCE,
                stream: 0x1234,
                count: 1 << 20,
                bytes: 2 << 20,
                datatype: 9,
                redop: NCCL_CUSTOM_REDOP,
                peer_or_root: -1,
                comm_id: u64::MAX,
                rank: i32::MAX,
                nranks: i32::MIN,
                seq: 42,
                result: 2,
            }),
            Event::NcclComm(NcclComm {
                start: 1_000,
                end: 900_000,
                tid: 79,
                op: NCCL_COMM_SPLIT,
                comm: 0x5000,
                comm_id: 0x0123_4567_89ab_cdef,
                parent_id: 7,
                rank: 3,
                nranks: 8,
                color: -5,
                result: 0,
            }),
            Event::Nvtx(Nvtx {
                ts: 70_000,
                tid: 80,
                kind: NVTX_PUSH,
                flags: NVTX_FLAG_TRUNCATED,
                id: 2,
                text: 1,
            }),
            Event::Nvtx(Nvtx {
                ts: 69_000,
                tid: 80,
                kind: NVTX_END,
                flags: 0,
                id: u64::MAX,
                text: 0,
            }),
        ]
    }

    #[test]
    fn round_trip_hook_events() {
        let mut evs = sample_events();
        evs.extend(hook_events());
        assert_round_trip(&evs);
    }

    /// One of each environment event, with "not available" and edge values.
    pub(crate) fn env_events() -> Vec<Event> {
        vec![
            Event::Fact(Fact {
                ts: 1_700_000_000_000_000_000,
                device: FACT_HOST,
                key: 1,
                value: 2,
            }),
            Event::Fact(Fact {
                ts: 1_700_000_000_000_000_001,
                device: 0,
                key: 3,
                value: 0,
            }),
            Event::GpuSample(GpuSample {
                ts: 1_700_000_000_100_000_000,
                device: 1,
                sm_clock_mhz: 1980,
                sm_clock_max_mhz: 1980,
                mem_clock_mhz: 2619,
                mem_clock_max_mhz: 2619,
                clock_reasons: CLOCK_REASON_HW_SLOWDOWN | CLOCK_REASON_SW_POWER_CAP,
                power_mw: 118_000,
                power_limit_mw: 700_000,
                temperature_c: 0,
                gpu_util_pct: 100,
                mem_util_pct: 37,
                mem_used: 150_000_000_000,
                mem_total: ENV_NA64 - 1,
                pcie_gen: 5,
                pcie_gen_max: 5,
                pcie_width: 16,
                pcie_width_max: 16,
                pcie_tx_kbs: ENV_NA - 1,
                pcie_rx_kbs: 0,
            }),
            Event::GpuSample(GpuSample {
                ts: 1_700_000_000_200_000_000,
                device: 0,
                ..Default::default()
            }),
            Event::GpuProcess(GpuProcess {
                ts: 1_700_000_000_200_000_000,
                device: 0,
                pid: 4242,
                name: 2,
                used_memory: 1 << 30,
                sm_pct: 27,
                mem_pct: 0,
                flags: GPU_PROC_LISTED | GPU_PROC_UTIL,
            }),
            Event::GpuProcess(GpuProcess {
                ts: 1_700_000_000_200_000_000,
                device: 0,
                pid: u32::MAX,
                ..Default::default()
            }),
            Event::GpuEvent(GpuEvent {
                ts: 1_700_000_000_300_000_000,
                device: 0,
                kind: GPU_EVENT_XID,
                data: 79,
            }),
            Event::CounterSample(CounterSample {
                start: 1_700_000_000_400_000_000,
                end: 1_700_000_000_401_000_000,
                device: 0,
                sm_active: 9_871,
                occupancy: 4_012,
                tensor_active: 0,
                dram: 9_204,
                pcie_read_bytes: 0,
                pcie_write_bytes: 1 << 20,
                ..Default::default()
            }),
            Event::CounterSample(CounterSample {
                start: 1_700_000_000_401_000_000,
                end: 1_700_000_000_401_000_000,
                device: 1,
                ..Default::default()
            }),
            Event::CounterSample(CounterSample {
                start: 1_700_000_000_402_000_000,
                end: 1_700_000_000_502_000_000,
                device: 3,
                sm_active: 9_980,
                occupancy: 9_000,
                tensor_active: 0,
                dram: 5_850,
                fp64_active: 0,
                fp32_active: 1_240,
                fp16_active: ENV_NA - 1,
                integer_active: 310,
                tensor_dfma: 0,
                tensor_hmma: 0,
                tensor_imma: 0,
                source: COUNTER_SOURCE_GPM,
                instance: 2,
                ..Default::default()
            }),
        ]
    }

    #[test]
    fn round_trip_env_events() {
        let mut evs = sample_events();
        evs.extend(env_events());
        assert_round_trip(&evs);
    }

    #[test]
    fn unavailable_values_cost_one_byte() {
        let mut enc = Encoder::new();
        enc.push(&Event::GpuSample(GpuSample {
            ts: 0,
            device: 0,
            ..Default::default()
        }));
        let (buf, _) = enc.take();
        // tag, length, ts, device, then 18 fields of one zero byte each.
        assert_eq!(buf.len(), 4 + 18, "{buf:?}");
        assert!(buf[4..].iter().all(|b| *b == 0));
    }

    #[test]
    fn a_reader_without_the_env_tags_skips_them() {
        // What a 2.0 reader does with 2.1 events: the tags are unknown to it, and every
        // event carries its length, so it steps over them and reads on.
        let mut enc = Encoder::new();
        enc.push(&Event::Thread { tid: 1, name: 2 });
        for e in env_events() {
            enc.push(&e);
        }
        enc.push(&Event::Thread { tid: 3, name: 4 });
        let (buf, _) = enc.take();
        let mut pos = 0;
        let mut kept = Vec::new();
        while pos < buf.len() {
            let tag = buf[pos];
            let mut b = Body {
                b: &buf,
                pos: pos + 1,
                base: 0,
            };
            let len = b.v().unwrap() as usize;
            if tag < TAG_FACT {
                kept.push(tag);
            }
            pos = b.pos + len;
        }
        assert_eq!(pos, buf.len());
        assert_eq!(kept, vec![TAG_THREAD, TAG_THREAD]);
    }

    /// Python call-site events: a stack of several frames, an empty one, and links.
    pub(crate) fn pystack_events() -> Vec<Event> {
        vec![
            Event::PyStack(PyStack {
                id: 1,
                frames: vec![
                    PyFrame {
                        file: 5,
                        function: 6,
                        line: 57,
                    },
                    PyFrame {
                        file: 5,
                        function: 7,
                        line: 0,
                    },
                    PyFrame {
                        file: u32::MAX,
                        function: 8,
                        line: u32::MAX,
                    },
                ],
            }),
            Event::PyStack(PyStack {
                id: 2,
                frames: vec![],
            }),
            Event::CallSite(CallSite {
                ts: 1_700_000_000_000_000_000,
                tid: 77,
                stack: 1,
            }),
            Event::CallSite(CallSite {
                ts: 1_699_999_999_000_000_000,
                tid: u32::MAX,
                stack: 2,
            }),
            Event::PySample(PySample {
                ts: 1_700_000_000_010_000_000,
                tid: 77,
                stack: 2,
            }),
        ]
    }

    #[test]
    fn round_trip_pystack_events() {
        let mut evs = sample_events();
        evs.extend(pystack_events());
        assert_round_trip(&evs);
    }

    #[test]
    fn a_reader_without_the_pystack_tags_skips_them() {
        // What a 2.1 reader does with 2.2 events: unknown tags, stepped over by length.
        let mut enc = Encoder::new();
        enc.push(&Event::Thread { tid: 1, name: 2 });
        for e in pystack_events() {
            enc.push(&e);
        }
        enc.push(&Event::Thread { tid: 3, name: 4 });
        let (buf, _) = enc.take();
        let mut seen = Vec::new();
        assert!(walk_tags(&buf, |t| seen.push(t)));
        let kept: Vec<u8> = seen.into_iter().filter(|t| *t < TAG_PY_STACK).collect();
        assert_eq!(kept, vec![TAG_THREAD, TAG_THREAD]);
    }

    #[test]
    fn a_corrupt_frame_count_is_an_error_not_an_allocation() {
        // Tag, length 6, id 1, then a frame count of 2^35 with no frames after it.
        let buf = vec![TAG_PY_STACK, 6, 1, 0x80, 0x80, 0x80, 0x80, 0x01];
        let mut dec = Decoder::new(&buf);
        assert!(matches!(dec.next(), Some(Err(_))));
    }

    #[test]
    fn tags_are_distinct() {
        let mut tags = vec![
            TAG_STR,
            TAG_CLOCK,
            TAG_DEVICE,
            TAG_KERNEL,
            TAG_MEMCPY,
            TAG_MEMSET,
            TAG_SYNC,
            TAG_MEMORY,
            TAG_API,
            TAG_DROPPED,
            TAG_STATE,
            TAG_THREAD,
            TAG_HOST_COPY,
            TAG_HOST_CALL,
            TAG_HOST_ALLOC,
            TAG_NCCL,
            TAG_NCCL_COMM,
            TAG_NVTX,
            TAG_KERNEL_SHAPE,
            TAG_KERNEL_COMPACT,
            TAG_THREAD_CPU,
            TAG_PROC_SAMPLE,
            TAG_MACHINE_SAMPLE,
            TAG_CPU_LIMITS,
            TAG_FACT,
            TAG_GPU_SAMPLE,
            TAG_GPU_PROCESS,
            TAG_GPU_EVENT,
            TAG_PY_STACK,
            TAG_CALL_SITE,
            TAG_COUNTER_SAMPLE,
            TAG_PY_SAMPLE,
        ];
        let n = tags.len();
        tags.sort_unstable();
        tags.dedup();
        assert_eq!(tags.len(), n);
    }

    /// One of each host-sample event, with values at the edges of their ranges.
    pub(crate) fn host_sample_events() -> Vec<Event> {
        vec![
            Event::CpuLimits(CpuLimits {
                ts: 1_700_000_000_000_000_000,
                online_cpus: 192,
                affinity_cpus: 16,
                quota_us: 800_000,
                period_us: 100_000,
                memory_limit: 64 << 30,
                thread_period_us: 3_000,
                tree_period_us: 100_000,
            }),
            Event::ThreadCpu(ThreadCpu {
                ts: 1_700_000_000_003_000_000,
                tid: 4242,
                cpu_ns: 123_456_789_012,
                wait_ns: 9_876_543,
                slices: 77_000,
                state: b'R',
            }),
            Event::ThreadCpu(ThreadCpu {
                ts: 1_700_000_000_002_999_000,
                tid: u32::MAX,
                cpu_ns: u64::MAX,
                wait_ns: 0,
                slices: 0,
                state: STATE_UNKNOWN,
            }),
            Event::ProcSample(ProcSample {
                ts: 1_700_000_000_100_000_000,
                pid: 5000,
                ppid: 4242,
                comm: 1,
                flags: PROC_FLAG_NO_IO,
                state: b'D',
                threads: 3,
                cpu_ns: 2_500_000_000,
                rchar: u64::MAX,
                read_bytes: 1 << 40,
                write_bytes: 7,
            }),
            Event::ProcSample(ProcSample {
                ts: 1_700_000_000_100_000_000,
                pid: 4243,
                ppid: 4242,
                comm: 0,
                flags: PROC_FLAG_THREAD,
                state: b'S',
                threads: 1,
                cpu_ns: 10,
                ..Default::default()
            }),
            Event::MachineSample(MachineSample {
                ts: 1_700_000_000_100_000_100,
                busy_ns: 10_000_000_000_000,
                idle_ns: 90_000_000_000_000,
                iowait_ns: 1,
                steal_ns: 0,
                flags: MACHINE_FLAG_PSI | MACHINE_FLAG_CGROUP,
                psi_cpu_some_us: 5,
                psi_io_some_us: 6,
                psi_io_full_us: 7,
                cgroup_usage_us: u64::MAX,
                cgroup_throttled_us: 8,
            }),
        ]
    }

    #[test]
    fn round_trip_host_samples() {
        let mut evs = sample_events();
        evs.extend(host_sample_events());
        assert_round_trip(&evs);
    }

    #[test]
    fn host_samples_keep_their_encoding_and_accept_appended_fields() {
        let mut enc = Encoder::new();
        enc.push(&Event::ThreadCpu(ThreadCpu {
            ts: 5,
            tid: 2,
            cpu_ns: 300,
            wait_ns: 4,
            slices: 1,
            state: b'R',
        }));
        let (buf, _) = enc.take();
        // 300 = 0xAC 0x02 as a varint.
        assert_eq!(buf, vec![TAG_THREAD_CPU, 7, 10, 2, 0xAC, 0x02, 4, 1, b'R']);
        // A newer writer appends a field: this reader reads what it knows.
        let newer = vec![TAG_THREAD_CPU, 8, 10, 2, 0xAC, 0x02, 4, 1, b'R', 99];
        let mut dec = Decoder::new(&newer);
        let got = dec.next().unwrap().unwrap();
        assert_eq!(
            got,
            Event::ThreadCpu(ThreadCpu {
                ts: 5,
                tid: 2,
                cpu_ns: 300,
                wait_ns: 4,
                slices: 1,
                state: b'R',
            })
        );
        assert!(dec.next().is_none());
    }

    #[test]
    fn truncated_host_samples_are_errors_not_panics() {
        decode_every_prefix(&host_sample_events());
    }

    #[test]
    fn cpus_available_takes_the_smaller_of_affinity_and_quota() {
        let l = CpuLimits {
            online_cpus: 64,
            affinity_cpus: 16,
            quota_us: 250_000,
            period_us: 100_000,
            ..Default::default()
        };
        assert_eq!(l.cpus_available(), 2.5);
        let l = CpuLimits {
            online_cpus: 64,
            affinity_cpus: 0,
            ..Default::default()
        };
        assert_eq!(l.cpus_available(), 64.0);
    }

    #[test]
    fn hook_events_keep_their_existing_encoding() {
        // Pins the byte layout of one event per new tag: a change here breaks old traces.
        let mut enc = Encoder::new();
        enc.push(&Event::Nvtx(Nvtx {
            ts: 5,
            tid: 2,
            kind: NVTX_MARK,
            flags: 0,
            id: 0,
            text: 3,
        }));
        let (buf, _) = enc.take();
        assert_eq!(buf, vec![TAG_NVTX, 6, 10, 2, NVTX_MARK, 0, 0, 3]);
    }

    #[test]
    fn unknown_tags_are_skipped() {
        let mut enc = Encoder::new();
        enc.push(&Event::Thread { tid: 1, name: 2 });
        let (mut buf, _) = enc.take();
        // An event from a newer writer: tag 200, 3 body bytes.
        buf.extend_from_slice(&[200, 3, 1, 2, 3]);
        let mut enc = Encoder::new();
        enc.push(&Event::Thread { tid: 3, name: 4 });
        buf.extend_from_slice(&enc.take().0);
        let mut dec = Decoder::new(&buf);
        let got: Vec<_> = std::iter::from_fn(|| dec.next())
            .map(|e| e.unwrap())
            .collect();
        assert_eq!(got.len(), 2);
        assert_eq!(dec.skipped, 1);
    }

    /// Encodes `evs` into one chunk and decodes every prefix of it: a cut anywhere is an
    /// error or a shorter read, never a panic.
    pub(crate) fn decode_every_prefix(evs: &[Event]) {
        let mut enc = Encoder::new();
        evs.iter().for_each(|e| enc.push(e));
        let (buf, _) = enc.take();
        for cut in 0..buf.len() {
            let mut dec = Decoder::new(&buf[..cut]);
            while let Some(r) = dec.next() {
                if r.is_err() {
                    break;
                }
            }
        }
    }

    #[test]
    fn truncated_body_is_an_error_not_a_panic() {
        decode_every_prefix(&sample_events());
    }

    #[test]
    fn garbage_never_panics() {
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for _ in 0..2000 {
            let buf: Vec<u8> = (0..64)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let mut dec = Decoder::new(&buf);
            let mut n = 0;
            while let Some(_r) = dec.next() {
                n += 1;
                assert!(n <= 64);
            }
        }
    }

    /// Kernels replayed from a CUDA graph: each node's id comes back, nodes of one graph
    /// get a shape each, and a kernel outside graphs is written as it always was.
    #[test]
    fn graph_kernels_keep_their_node_ids() {
        let k = |start: u64, node: u64, graph: u32| {
            Event::Kernel(Kernel {
                start,
                end: start + 2_000,
                stream: 7,
                corr: 9,
                name: 3,
                grid: [4, 1, 1],
                block: [128, 1, 1],
                graph_id: graph,
                graph_node_id: node,
                ..Default::default()
            })
        };
        let evs = vec![
            k(1_000, 1, 5),
            k(4_000, 2, 5),
            k(7_000, 1, 5),
            k(9_000, (1 << 40) + 3, 5),
            k(12_000, ENV_NA64, 0),
        ];
        assert_round_trip(&evs);
        // The shape of a kernel outside graphs has the bytes of format 2.0 (no node id):
        // id, name, grid, block, static smem, dynamic smem, registers, graph id.
        let mut enc = Encoder::new();
        enc.push(&k(12_000, ENV_NA64, 0));
        let (buf, _) = enc.take();
        assert_eq!(buf[0], TAG_KERNEL_SHAPE);
        // (128 is two varint bytes.)
        assert_eq!(&buf[1..15], &[13, 0, 3, 4, 1, 1, 128, 1, 1, 1, 0, 0, 0, 0]);
        assert_eq!(
            buf[15], TAG_KERNEL_COMPACT,
            "the shape ends at its graph id"
        );
        // A graph node's shape is one byte longer: node id + 1.
        let mut enc = Encoder::new();
        enc.push(&k(1_000, 1, 5));
        let (buf, _) = enc.take();
        assert_eq!(&buf[..2], &[TAG_KERNEL_SHAPE, 14]);
        assert_eq!(&buf[14..17], &[5, 2, TAG_KERNEL_COMPACT]);
    }

    #[test]
    fn kernel_event_is_compact() {
        // Back-to-back kernels of one stream: the delta coding keeps each small.
        let mut enc = Encoder::new();
        for i in 0..1000u64 {
            enc.push(&Event::Kernel(Kernel {
                start: 1_000_000_000 + i * 7_000,
                end: 1_000_000_000 + i * 7_000 + 2_500,
                device: 0,
                stream: 7,
                corr: 100 + i as u32 * 5,
                name: 3,
                grid: [1, 1, 1],
                block: [128, 1, 1],
                static_smem: 0,
                dynamic_smem: 0,
                registers: 16,
                graph_id: 0,
                graph_node_id: ENV_NA64,
            }));
        }
        let per = enc.len() as f64 / 1000.0;
        assert!(per <= 12.0, "{per} bytes per kernel");
    }
}

#[cfg(test)]
mod table_tests {
    use super::tests::*;
    use super::*;
    use crate::Value;

    /// One event of every kind of format 2.3 (the encoding test pins their bytes).
    fn kinds_of_2_3() -> Vec<Event> {
        let mut evs = sample_events();
        evs.extend(pystack_events());
        evs.extend(hook_events());
        evs.extend(env_events());
        evs.extend(host_sample_events());
        evs
    }

    /// A stall report with its ops and threads, one resolved stall, and edge values.
    pub(crate) fn stall_events() -> Vec<Event> {
        vec![
            Event::Stall(Stall {
                ts: 1_700_000_005_000_000_000,
                since: 1_700_000_000_000_000_000,
                id: 1,
                seq: 0,
                outstanding: 2,
                flags: STALL_FORCED_FLUSH,
            }),
            Event::StallOp(StallOp {
                ts: 1_700_000_005_000_000_000,
                stall: 1,
                seq: 0,
                kind: STALL_OP_KERNEL,
                flags: STALL_OP_FLAG_LAUNCH | STALL_OP_FLAG_INCOMPLETE,
                device: 0,
                stream: 7,
                corr: 4_000,
                name: 3,
                tid: 4242,
                launch_ts: 1_699_999_999_999_000_000,
                start: 1_700_000_000_000_000_000,
                bytes: 0,
                grid: [132, 1, 1],
                block: [256, 1, 1],
            }),
            Event::StallOp(StallOp {
                ts: 1_700_000_005_000_000_000,
                stall: 1,
                seq: 0,
                kind: STALL_OP_MEMCPY,
                flags: STALL_OP_FLAG_LAUNCH,
                device: u32::MAX,
                stream: 0,
                corr: 3_999,
                name: 0,
                tid: u32::MAX,
                launch_ts: 0,
                start: 0,
                bytes: u64::MAX,
                grid: [0; 3],
                block: [0; 3],
            }),
            Event::StallThread(StallThread {
                ts: 1_700_000_005_000_000_000,
                stall: 1,
                seq: 0,
                tid: 4242,
                call: 9,
                call_start: 1_700_000_000_000_100_000,
                stack: 2,
                state: b'S',
            }),
            Event::StallThread(StallThread {
                ts: 1_700_000_005_000_000_000,
                stall: 1,
                seq: 0,
                tid: 4243,
                state: STATE_UNKNOWN,
                ..Default::default()
            }),
            Event::Stall(Stall {
                ts: 1_700_000_010_000_000_000,
                since: 0,
                id: u32::MAX,
                seq: u32::MAX,
                outstanding: 0,
                flags: STALL_RESOLVED | STALL_END,
            }),
        ]
    }

    #[test]
    fn counter_samples_of_format_2_3_decode_with_the_appended_fields_unavailable() {
        // A 2.3 body: span, device, 4 percentages, 4 byte counts, nothing after.
        let mut old = vec![TAG_COUNTER_SAMPLE, 11];
        old.extend([20, 10, 1]); // start 10 (zigzag), end 20, device 1
        old.extend([101, 51, 1, 0]); // sm 100, occupancy 50, tensor 0, dram n/a
        old.extend([0, 0, 8, 0]); // pcie read n/a, write n/a, nvlink rx 7, tx n/a
        let mut dec = Decoder::new(&old);
        let got = dec.next().unwrap().unwrap();
        assert_eq!(
            got,
            Event::CounterSample(CounterSample {
                start: 10,
                end: 20,
                device: 1,
                sm_active: 100,
                occupancy: 50,
                tensor_active: 0,
                nvlink_rx_bytes: 7,
                ..Default::default()
            })
        );
        let Event::CounterSample(c) = &got else {
            unreachable!()
        };
        assert_eq!(c.source, COUNTER_SOURCE_PM);
        assert_eq!(
            (c.fp32_active, c.tensor_hmma, c.instance),
            (ENV_NA, ENV_NA, ENV_NA)
        );
        assert!(dec.next().is_none());
        // This writer's body is the old one with the new fields after it.
        let mut enc = Encoder::new();
        enc.push(&got);
        let (buf, _) = enc.take();
        assert_eq!(buf[2..13], old[2..13]);
        assert_eq!(buf[1] as usize, buf.len() - 2);
        // Each appended field is optional on its own: a body that ends after some of
        // them (a writer between the two) reads the rest as unavailable.
        let mut cut = buf.clone();
        cut.truncate(buf.len() - 3);
        cut[1] = (cut.len() - 2) as u8;
        assert_eq!(Decoder::new(&cut).next(), Some(Ok(got.clone())));
    }

    #[test]
    fn round_trip_stall_events() {
        let mut evs = sample_events();
        evs.extend(stall_events());
        evs.extend(sample_events());
        assert_round_trip(&evs);
    }

    #[test]
    fn truncated_stall_events_are_errors_not_panics() {
        decode_every_prefix(&stall_events());
    }

    #[test]
    fn a_reader_without_the_stall_tags_skips_them() {
        // What a 2.3 reader does with 2.4 events: unknown tags, stepped over by length.
        let mut enc = Encoder::new();
        enc.push(&Event::Thread { tid: 1, name: 2 });
        for e in stall_events() {
            enc.push(&e);
        }
        enc.push(&Event::Thread { tid: 3, name: 4 });
        let (buf, _) = enc.take();
        let mut seen = Vec::new();
        assert!(walk_tags(&buf, |t| seen.push(t)));
        let kept: Vec<u8> = seen.into_iter().filter(|t| *t < TAG_STALL).collect();
        assert_eq!(kept, vec![TAG_THREAD, TAG_THREAD]);
    }

    #[test]
    fn end_reasons_name_their_signal() {
        assert_eq!(end_reason_signal(15), "signal SIGTERM 15");
        assert_eq!(end_signal("signal SIGTERM 15"), Some(("SIGTERM", 15)));
        assert_eq!(end_signal(&end_reason_signal(6)), Some(("SIGABRT", 6)));
        assert_eq!(end_signal(END_EXIT), None);
        assert_eq!(end_signal("signal SIGTERM"), None);
        assert_eq!(end_signal("end of window"), None);
    }

    /// One event of each kind added to the table after format 2.3.
    fn later_kinds() -> Vec<Event> {
        let mut v = stall_events();
        v.extend(contention_events());
        v
    }

    /// The GIL and blocked-thread samples (tags 40, 41).
    fn contention_events() -> Vec<Event> {
        vec![
            Event::GilSample(crate::GilSample {
                ts: 1_700_000_000_011_000_000,
                holder: 78,
                locked: 1,
                switches: 12_345,
            }),
            Event::TaskWait(crate::TaskWait {
                ts: 1_700_000_000_012_000_000,
                tid: 79,
                syscall: 202,
                state: b'S',
                flags: crate::TASK_WAIT_PYTHON,
            }),
            Event::TaskWait(crate::TaskWait {
                ts: 1_700_000_000_013_000_000,
                tid: 5001,
                syscall: crate::ENV_NA,
                state: b'R',
                flags: crate::TASK_WAIT_CHILD,
            }),
        ]
    }

    #[test]
    fn truncated_contention_events_are_errors_not_panics() {
        decode_every_prefix(&contention_events());
    }

    #[test]
    fn encoding_is_byte_identical_to_the_hand_written_codec() {
        // Length and CRC-32 of these events encoded by the hand-written codec before
        // the event table, with the stall kinds of format 2.4 and the appended
        // CounterSample fields (forwards, then backwards in a second chunk: other
        // deltas).
        let mut evs = kinds_of_2_3();
        evs.extend(stall_events());
        let mut enc = Encoder::new();
        evs.iter().for_each(|e| enc.push(e));
        let (a, _) = enc.take();
        evs.iter().rev().for_each(|e| enc.push(e));
        let (b, _) = enc.take();
        assert_eq!((a.len(), crc32fast::hash(&a)), (983, 0x3193fe14));
        assert_eq!((b.len(), crc32fast::hash(&b)), (976, 0x1b7b53df));
    }

    /// Kinds after the stall reports, outside the pinned encoding test.
    fn newest_kinds() -> Vec<Event> {
        vec![
            // A cudaMalloc with its pointer (format 2.5), and a failed one without.
            Event::Api(Api {
                start: 1_700_000_010_400_000_000,
                end: 1_700_000_010_400_020_000,
                tid: 4242,
                corr: 77,
                domain: DOMAIN_RUNTIME,
                cbid: 20,
                name: 1,
                bytes: 1 << 30,
                arg: 0,
                result: 0,
                ptr: 0x7f00_0000_0000,
            }),
            Event::Api(Api {
                start: 1_700_000_010_400_030_000,
                end: 1_700_000_010_400_040_000,
                tid: 4242,
                corr: 78,
                domain: DOMAIN_RUNTIME,
                cbid: 20,
                name: 1,
                bytes: 1 << 40,
                arg: 0,
                result: 2,
                ptr: ENV_NA64,
            }),
            Event::TracerCost(TracerCost {
                ts: 1_700_000_010_500_000_000,
                tid: 4242,
                calls: 200_000,
                ns: 31_000_000,
            }),
            Event::TracerCost(TracerCost {
                ts: 1_700_000_011_000_000_000,
                tid: u32::MAX,
                calls: 0,
                ns: u64::MAX,
            }),
        ]
    }

    /// An `Api` event's pointer (format 2.5) is written only where it is set: without
    /// one the body is that of 2.4, which a 2.4 reader read and a 2.5 reader reads as no
    /// pointer; with one, an older reader stops before it.
    #[test]
    fn an_api_pointer_is_written_only_where_set() {
        let api = |ptr: u64| Api {
            start: 1_000,
            end: 1_500,
            tid: 7,
            corr: 3,
            domain: DOMAIN_RUNTIME,
            cbid: 22,
            name: 2,
            bytes: 0,
            arg: 0,
            result: 0,
            ptr,
        };
        let body = |a: &Api| {
            let mut b = Vec::new();
            assert_eq!(
                Event::Api(a.clone()).encode_body(&mut Delta::default(), &mut b),
                TAG_API
            );
            b
        };
        let read = |b: &[u8]| {
            let mut body = Body { b, pos: 0, base: 0 };
            Event::decode_body(TAG_API, &mut Delta::default(), &mut body)
        };
        let none = body(&api(ENV_NA64));
        let set = body(&api(0x7e00_0000_0200));
        assert_eq!(set.len(), none.len() + 7, "the pointer is appended");
        assert_eq!(&set[..none.len()], &none[..]);
        assert_eq!(read(&none), Ok(Some(Event::Api(api(ENV_NA64)))));
        assert_eq!(read(&set), Ok(Some(Event::Api(api(0x7e00_0000_0200)))));
        // Pointer 0 (`cudaFree(NULL)`) is a value of its own, kept.
        assert_eq!(read(&body(&api(0))), Ok(Some(Event::Api(api(0)))));
    }

    #[test]
    fn every_tag_in_the_table_round_trips_and_is_named() {
        let mut evs = kinds_of_2_3();
        evs.extend(later_kinds());
        // Graph-level replays (tag 36), after the kinds the byte-identity test pins.
        evs.push(Event::GraphTrace(GraphTrace {
            start: 50_000,
            end: 75_000,
            device: 1,
            stream: 13,
            corr: 4_000_000_000,
            graph_id: 9,
        }));
        evs.extend(newest_kinds());
        assert_round_trip(&evs);
        let mut tags: Vec<u8> = evs.iter().map(|e| e.tag()).collect();
        tags.sort_unstable();
        tags.dedup();
        // Every tag of the table has a test event.
        let table: Vec<u8> = (0..=255)
            .filter(|t| Event::tag_name(*t).is_some())
            .collect();
        assert_eq!(tags, table);
        // The first 32 but the two kernel records of the codec are in it.
        assert!((1..=32)
            .filter(|t| *t != TAG_KERNEL_SHAPE && *t != TAG_KERNEL_COMPACT)
            .all(|t| table.contains(&t)));
        for e in &evs {
            assert_eq!(Event::tag_name(e.tag()), Some(e.name()));
        }
        assert_eq!(Event::tag_name(TAG_KERNEL_COMPACT), None);
    }

    #[test]
    fn the_self_contained_kernel_of_format_1_still_reads() {
        let k = match &sample_events()[3] {
            Event::Kernel(k) => k.clone(),
            e => panic!("{e:?}"),
        };
        let mut body = Vec::new();
        let ev = Event::Kernel(k);
        assert_eq!(ev.encode_body(&mut Delta::default(), &mut body), TAG_KERNEL);
        let mut buf = vec![TAG_KERNEL, body.len() as u8];
        buf.extend_from_slice(&body);
        let mut dec = Decoder::new(&buf);
        assert_eq!(dec.next(), Some(Ok(ev)));
        assert_eq!(dec.next(), None);
    }

    #[test]
    fn fields_come_in_wire_order_with_their_values() {
        let ev = Event::HostCopy(HostCopy {
            start: 100,
            end: 150,
            tid: 7,
            dst_device: u32::MAX,
            src_device: 2,
            ..Default::default()
        });
        let mut got = Vec::new();
        ev.fields(&mut |k, v| got.push((k, format!("{v:?}"))));
        let names: Vec<&str> = got.iter().map(|x| x.0).collect();
        assert_eq!(
            names,
            [
                "start",
                "end",
                "tid",
                "api",
                "copy_kind",
                "host_kind",
                "source",
                "flags",
                "bytes",
                "stream",
                "dst",
                "src",
                "dst_device",
                "src_device",
                "result"
            ]
        );
        assert_eq!(got[0].1, "Time(100)");
        assert_eq!(got[1].1, "Time(150)");
        assert_eq!(got[12].1, "Na");
        assert_eq!(got[13].1, "U(2)");
        assert_eq!(
            (ev.name(), ev.span()),
            ("host_copy", Some((100, Some(150))))
        );
        let g = Event::GpuSample(GpuSample::default());
        let mut na = 0;
        g.fields(&mut |_, v| na += (v == Value::Na) as usize);
        assert_eq!(na, 18);
        let s = Event::Str {
            id: 1,
            text: "x".into(),
        };
        assert_eq!(s.span(), None);
        let mut got = Vec::new();
        s.fields(&mut |k, v| got.push(format!("{k}={v:?}")));
        assert_eq!(got, ["id=U(1)", r#"text=Text("x")"#]);
    }

    /// A table of its own, as a kind looks once a later version appends fields to it:
    /// `Sample` had `ts` and `device`; `util` and `label` came after.
    #[allow(dead_code)]
    mod appended {
        use crate::table::{Na, Opt, Sid, Ts, V};
        use crate::ENV_NA;
        crate::define_events! {
            structs {
                /// A sample.
                Sample(TAG_SAMPLE = 200, "sample") {
                    ts: u64 => Ts,
                    device: u32 => V,
                    util: u32 => Opt<Na> = ENV_NA,
                    label: u32 => Opt<Sid>,
                }
            }
            inline {}
        }
    }

    #[test]
    fn a_shorter_body_from_an_older_writer_reads_with_defaults() {
        use appended::{Event as E, Sample, TAG_SAMPLE};
        let new = E::Sample(Sample {
            ts: 5,
            device: 1,
            util: 40,
            label: 3,
        });
        let mut body = Vec::new();
        assert_eq!(
            new.encode_body(&mut Delta::default(), &mut body),
            TAG_SAMPLE
        );
        assert_eq!(body, [10, 1, 41, 3]);
        let read = |body: &[u8]| {
            let mut b = Body {
                b: body,
                pos: 0,
                base: 0,
            };
            E::decode_body(TAG_SAMPLE, &mut Delta::default(), &mut b)
        };
        assert_eq!(read(&body), Ok(Some(new)));
        // The older body: `ts` and `device` only. The appended fields take their
        // defaults (not available, no label).
        let old = Sample {
            ts: 5,
            device: 1,
            ..Default::default()
        };
        assert_eq!(old.util, ENV_NA);
        assert_eq!(read(&body[..2]), Ok(Some(E::Sample(old.clone()))));
        // With one of the two appended fields.
        let mid = Sample { util: 40, ..old };
        assert_eq!(read(&body[..3]), Ok(Some(E::Sample(mid))));
        // A body cut inside the fields every version has is still an error.
        assert_eq!(read(&body[..1]), Err(DecodeError::Truncated(1)));
    }
}
