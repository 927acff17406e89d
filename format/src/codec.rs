//! Event encoding inside one chunk: tag byte, body length (varint), body of varints.
//! Timestamps and correlation ids are zigzag deltas against the previous ones in the
//! chunk; the state resets at every chunk boundary.

use crate::event::*;

/// Encodes events into one chunk payload.
#[derive(Default)]
pub struct Encoder {
    buf: Vec<u8>,
    body: Vec<u8>,
    last_ts: u64,
    last_corr: u32,
    count: u32,
    /// Kernel launch shapes defined so far in this file (they outlive chunks).
    shapes: std::collections::HashMap<ShapeKey, u32>,
    /// Events of each tag in this chunk so far.
    tags: Vec<u32>,
}

/// What a kernel launch shape is made of: (name, grid, block, static smem, dynamic
/// smem, registers, graph id).
type ShapeKey = (u32, [u32; 3], [u32; 3], u32, u32, u32, u32);

fn shape_of(k: &Kernel) -> ShapeKey {
    (
        k.name,
        k.grid,
        k.block,
        k.static_smem,
        k.dynamic_smem,
        k.registers,
        k.graph_id,
    )
}

#[inline]
fn put_var(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline]
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

#[inline]
fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
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
        self.last_ts = 0;
        self.last_corr = 0;
        self.count = 0;
        (out, n)
    }

    fn v(&mut self, v: u64) {
        put_var(&mut self.body, v);
    }

    fn ts(&mut self, t: u64) {
        let d = t.wrapping_sub(self.last_ts) as i64;
        self.last_ts = t;
        put_var(&mut self.body, zigzag(d));
    }

    fn span(&mut self, start: u64, end: u64) {
        self.ts(start);
        self.v(end.saturating_sub(start));
    }

    fn corr(&mut self, c: u32) {
        let d = (c as i64) - (self.last_corr as i64);
        self.last_corr = c;
        put_var(&mut self.body, zigzag(d));
    }

    fn i32(&mut self, v: i32) {
        put_var(&mut self.body, zigzag(v as i64));
    }

    /// A value that may be "not available" (`na`): stored as value + 1, `na` as 0.
    fn na(&mut self, v: u64, na: u64) {
        self.v(if v == na { 0 } else { v.wrapping_add(1) });
    }

    fn bytes(&mut self, s: &[u8]) {
        self.v(s.len() as u64);
        self.body.extend_from_slice(s);
    }

    /// Appends one event.
    pub fn push(&mut self, ev: &Event) {
        self.body.clear();
        let tag = match ev {
            Event::Str { id, text } => {
                self.v(*id as u64);
                self.bytes(text.as_bytes());
                TAG_STR
            }
            Event::Clock {
                cupti_ns,
                mono_ns,
                real_ns,
            } => {
                self.v(*cupti_ns);
                self.v(*mono_ns);
                self.v(*real_ns);
                TAG_CLOCK
            }
            Event::Device(d) => {
                for x in [
                    d.id as u64,
                    d.name as u64,
                    d.sm_count as u64,
                    d.max_blocks_per_sm as u64,
                    d.max_threads_per_sm as u64,
                    d.max_warps_per_sm as u64,
                    d.global_memory,
                    d.cc_major as u64,
                    d.cc_minor as u64,
                    d.max_regs_per_sm as u64,
                    d.max_smem_per_sm as u64,
                ] {
                    self.v(x);
                }
                TAG_DEVICE
            }
            Event::Kernel(k) => {
                // Kernels repeat their launch shape: define it once, then refer to it.
                let key = shape_of(k);
                let shape = match self.shapes.get(&key) {
                    Some(id) => *id,
                    None => {
                        let id = self.shapes.len() as u32;
                        self.shapes.insert(key, id);
                        self.v(id as u64);
                        self.v(k.name as u64);
                        for x in k.grid.iter().chain(k.block.iter()) {
                            self.v(*x as u64);
                        }
                        self.v(k.static_smem as u64);
                        self.v(k.dynamic_smem as u64);
                        self.v(k.registers as u64);
                        self.v(k.graph_id as u64);
                        self.emit(TAG_KERNEL_SHAPE);
                        self.body.clear();
                        id
                    }
                };
                self.span(k.start, k.end);
                self.v(k.device as u64);
                self.v(k.stream as u64);
                self.corr(k.corr);
                self.v(shape as u64);
                TAG_KERNEL_COMPACT
            }
            Event::Memcpy(m) => {
                self.span(m.start, m.end);
                self.v(m.device as u64);
                self.v(m.stream as u64);
                self.corr(m.corr);
                self.v(m.bytes);
                self.body
                    .extend_from_slice(&[m.copy_kind, m.src_kind, m.dst_kind, m.flags]);
                TAG_MEMCPY
            }
            Event::Memset(m) => {
                self.span(m.start, m.end);
                self.v(m.device as u64);
                self.v(m.stream as u64);
                self.corr(m.corr);
                self.v(m.bytes);
                self.v(m.value as u64);
                self.body.extend_from_slice(&[m.mem_kind, m.flags]);
                TAG_MEMSET
            }
            Event::Sync(s) => {
                self.span(s.start, s.end);
                self.v(s.device as u64);
                self.v(s.stream as u64);
                self.corr(s.corr);
                self.body.push(s.kind);
                TAG_SYNC
            }
            Event::Memory(m) => {
                self.ts(m.ts);
                self.v(m.device as u64);
                self.corr(m.corr);
                self.v(m.address);
                self.v(m.bytes);
                self.body.extend_from_slice(&[m.op, m.mem_kind]);
                TAG_MEMORY
            }
            Event::Api(a) => {
                self.span(a.start, a.end);
                self.v(a.tid as u64);
                self.corr(a.corr);
                self.body.push(a.domain);
                self.v(a.cbid as u64);
                self.v(a.name as u64);
                self.v(a.bytes);
                self.v(a.arg as u64);
                self.v(a.result as u64);
                TAG_API
            }
            Event::Dropped { ts, source, count } => {
                self.ts(*ts);
                self.body.push(*source);
                self.v(*count);
                TAG_DROPPED
            }
            Event::State { ts, state, reason } => {
                self.ts(*ts);
                self.body.push(*state);
                self.v(*reason as u64);
                TAG_STATE
            }
            Event::Thread { tid, name } => {
                self.v(*tid as u64);
                self.v(*name as u64);
                TAG_THREAD
            }
            Event::HostCopy(c) => {
                self.span(c.start, c.end);
                self.v(c.tid as u64);
                self.body
                    .extend_from_slice(&[c.api, c.copy_kind, c.host_kind, c.source, c.flags]);
                self.v(c.bytes);
                self.v(c.stream);
                self.v(c.dst);
                self.v(c.src);
                // +1: "no device" (u32::MAX) is the common case and encodes as 0.
                self.v(c.dst_device.wrapping_add(1) as u64);
                self.v(c.src_device.wrapping_add(1) as u64);
                self.v(c.result as u64);
                TAG_HOST_COPY
            }
            Event::HostCall(c) => {
                self.span(c.start, c.end);
                self.v(c.tid as u64);
                self.v(c.call as u64);
                self.v(c.stream);
                self.v(c.arg0);
                self.v(c.arg1);
                self.v(c.arg2);
                self.v(c.result as u64);
                TAG_HOST_CALL
            }
            Event::HostAlloc(a) => {
                self.span(a.start, a.end);
                self.v(a.tid as u64);
                self.body.push(a.op);
                self.v(a.ptr);
                self.v(a.bytes);
                self.v(a.flags as u64);
                self.v(a.result as u64);
                TAG_HOST_ALLOC
            }
            Event::Nccl(n) => {
                self.span(n.start, n.end);
                self.v(n.tid as u64);
                self.body.extend_from_slice(&[n.op, n.datatype, n.redop]);
                self.v(n.stream);
                self.v(n.count);
                self.v(n.bytes);
                self.i32(n.peer_or_root);
                self.v(n.comm_id);
                self.i32(n.rank);
                self.i32(n.nranks);
                self.v(n.seq);
                self.v(n.result as u64);
                TAG_NCCL
            }
            Event::NcclComm(n) => {
                self.span(n.start, n.end);
                self.v(n.tid as u64);
                self.body.push(n.op);
                self.v(n.comm);
                self.v(n.comm_id);
                self.v(n.parent_id);
                self.i32(n.rank);
                self.i32(n.nranks);
                self.i32(n.color);
                self.v(n.result as u64);
                TAG_NCCL_COMM
            }
            Event::Nvtx(n) => {
                self.ts(n.ts);
                self.v(n.tid as u64);
                self.body.extend_from_slice(&[n.kind, n.flags]);
                self.v(n.id);
                self.v(n.text as u64);
                TAG_NVTX
            }
            Event::ThreadCpu(x) => {
                self.ts(x.ts);
                self.v(x.tid as u64);
                self.v(x.cpu_ns);
                self.v(x.wait_ns);
                self.v(x.slices);
                self.body.push(x.state);
                TAG_THREAD_CPU
            }
            Event::ProcSample(x) => {
                self.ts(x.ts);
                self.v(x.pid as u64);
                self.v(x.ppid as u64);
                self.v(x.comm as u64);
                self.body.extend_from_slice(&[x.flags, x.state]);
                self.v(x.threads as u64);
                self.v(x.cpu_ns);
                self.v(x.rchar);
                self.v(x.read_bytes);
                self.v(x.write_bytes);
                TAG_PROC_SAMPLE
            }
            Event::MachineSample(x) => {
                self.ts(x.ts);
                self.v(x.busy_ns);
                self.v(x.idle_ns);
                self.v(x.iowait_ns);
                self.v(x.steal_ns);
                self.body.push(x.flags);
                self.v(x.psi_cpu_some_us);
                self.v(x.psi_io_some_us);
                self.v(x.psi_io_full_us);
                self.v(x.cgroup_usage_us);
                self.v(x.cgroup_throttled_us);
                TAG_MACHINE_SAMPLE
            }
            Event::CpuLimits(x) => {
                self.ts(x.ts);
                self.v(x.online_cpus as u64);
                self.v(x.affinity_cpus as u64);
                self.v(x.quota_us);
                self.v(x.period_us);
                self.v(x.memory_limit);
                self.v(x.thread_period_us as u64);
                self.v(x.tree_period_us as u64);
                TAG_CPU_LIMITS
            }
            Event::Fact(f) => {
                self.ts(f.ts);
                self.na(f.device as u64, ENV_NA as u64);
                self.v(f.key as u64);
                self.v(f.value as u64);
                TAG_FACT
            }
            Event::GpuSample(g) => {
                self.ts(g.ts);
                self.v(g.device as u64);
                for x in [
                    g.sm_clock_mhz,
                    g.sm_clock_max_mhz,
                    g.mem_clock_mhz,
                    g.mem_clock_max_mhz,
                ] {
                    self.na(x as u64, ENV_NA as u64);
                }
                self.na(g.clock_reasons, ENV_NA64);
                for x in [
                    g.power_mw,
                    g.power_limit_mw,
                    g.temperature_c,
                    g.gpu_util_pct,
                    g.mem_util_pct,
                ] {
                    self.na(x as u64, ENV_NA as u64);
                }
                self.na(g.mem_used, ENV_NA64);
                self.na(g.mem_total, ENV_NA64);
                for x in [
                    g.pcie_gen,
                    g.pcie_gen_max,
                    g.pcie_width,
                    g.pcie_width_max,
                    g.pcie_tx_kbs,
                    g.pcie_rx_kbs,
                ] {
                    self.na(x as u64, ENV_NA as u64);
                }
                TAG_GPU_SAMPLE
            }
            Event::GpuProcess(p) => {
                self.ts(p.ts);
                self.v(p.device as u64);
                self.v(p.pid as u64);
                self.v(p.name as u64);
                self.na(p.used_memory, ENV_NA64);
                self.na(p.sm_pct as u64, ENV_NA as u64);
                self.na(p.mem_pct as u64, ENV_NA as u64);
                self.body.push(p.flags);
                TAG_GPU_PROCESS
            }
            Event::GpuEvent(e) => {
                self.ts(e.ts);
                self.v(e.device as u64);
                self.body.push(e.kind);
                self.v(e.data);
                TAG_GPU_EVENT
            }
            Event::PyStack(st) => {
                self.v(st.id as u64);
                self.v(st.frames.len() as u64);
                for f in &st.frames {
                    self.v(f.file as u64);
                    self.v(f.function as u64);
                    self.v(f.line as u64);
                }
                TAG_PY_STACK
            }
            Event::CallSite(c) => {
                self.ts(c.ts);
                self.v(c.tid as u64);
                self.v(c.stack as u64);
                TAG_CALL_SITE
            }
            Event::CounterSample(c) => {
                self.span(c.start, c.end);
                self.v(c.device as u64);
                for x in [c.sm_active, c.occupancy, c.tensor_active, c.dram] {
                    self.na(x as u64, ENV_NA as u64);
                }
                for x in [
                    c.pcie_read_bytes,
                    c.pcie_write_bytes,
                    c.nvlink_rx_bytes,
                    c.nvlink_tx_bytes,
                ] {
                    self.na(x, ENV_NA64);
                }
                TAG_COUNTER_SAMPLE
            }
            Event::PySample(x) => {
                self.ts(x.ts);
                self.v(x.tid as u64);
                self.v(x.stack as u64);
                TAG_PY_SAMPLE
            }
            Event::Stall(x) => {
                self.ts(x.ts);
                self.ts(x.since);
                self.v(x.id as u64);
                self.v(x.seq as u64);
                self.v(x.outstanding as u64);
                self.body.push(x.flags);
                TAG_STALL
            }
            Event::StallOp(x) => {
                self.ts(x.ts);
                self.v(x.stall as u64);
                self.v(x.seq as u64);
                self.body.extend_from_slice(&[x.kind, x.flags]);
                // +1: "not known" (u32::MAX) encodes as 0.
                self.v(x.device.wrapping_add(1) as u64);
                self.v(x.stream as u64);
                self.corr(x.corr);
                self.v(x.name as u64);
                self.v(x.tid as u64);
                self.ts(x.launch_ts);
                self.ts(x.start);
                self.v(x.bytes);
                for g in x.grid.iter().chain(x.block.iter()) {
                    self.v(*g as u64);
                }
                TAG_STALL_OP
            }
            Event::StallThread(x) => {
                self.ts(x.ts);
                self.v(x.stall as u64);
                self.v(x.seq as u64);
                self.v(x.tid as u64);
                self.v(x.call as u64);
                self.ts(x.call_start);
                self.v(x.stack as u64);
                self.body.push(x.state);
                TAG_STALL_THREAD
            }
        };
        self.emit(tag);
        self.count += 1;
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

/// Adds the events of each tag in an (uncompressed) chunk payload to `out`, reading
/// only tags and lengths; stops at the first malformed event.
pub(crate) fn count_tags(payload: &[u8], out: &mut crate::read::Census) {
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

/// Why an event could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("event body ends early at byte {0}")]
    Truncated(usize),
    #[error("varint too long at byte {0}")]
    BadVarint(usize),
    #[error("string is not UTF-8 at byte {0}")]
    BadString(usize),
    #[error("kernel refers to an undefined launch shape {0}")]
    BadShape(u32),
}

/// Decodes the events of one chunk payload.
pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
    last_ts: u64,
    last_corr: u32,
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

struct Body<'a> {
    b: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> Body<'a> {
    #[inline(always)]
    fn v(&mut self) -> Result<u64, DecodeError> {
        // Most values are one byte (deltas, ids, flags).
        if let Some(&b) = self.b.get(self.pos) {
            if b < 0x80 {
                self.pos += 1;
                return Ok(b as u64);
            }
        }
        self.v_long()
    }

    #[inline(never)]
    fn v_long(&mut self) -> Result<u64, DecodeError> {
        let mut out = 0u64;
        let mut shift = 0u32;
        loop {
            let byte = *self
                .b
                .get(self.pos)
                .ok_or(DecodeError::Truncated(self.base + self.pos))?;
            self.pos += 1;
            if shift >= 64 {
                return Err(DecodeError::BadVarint(self.base + self.pos));
            }
            out |= ((byte & 0x7f) as u64) << shift;
            if byte & 0x80 == 0 {
                return Ok(out);
            }
            shift += 7;
        }
    }
    #[inline(always)]
    fn v32(&mut self) -> Result<u32, DecodeError> {
        Ok(self.v()? as u32)
    }
    /// A value stored by `Encoder::na`: 0 reads as `na`.
    fn na(&mut self, na: u64) -> Result<u64, DecodeError> {
        Ok(match self.v()? {
            0 => na,
            x => x - 1,
        })
    }
    fn na32(&mut self) -> Result<u32, DecodeError> {
        Ok(self.na(ENV_NA as u64)? as u32)
    }
    #[inline(always)]
    fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(unzigzag(self.v()?) as i32)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        let byte = *self
            .b
            .get(self.pos)
            .ok_or(DecodeError::Truncated(self.base + self.pos))?;
        self.pos += 1;
        Ok(byte)
    }
    fn slice(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.b.len())
            .ok_or(DecodeError::Truncated(self.base + self.pos))?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
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
            last_ts: 0,
            last_corr: 0,
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
        let id = b.v32()?;
        let k = Kernel {
            name: b.v32()?,
            grid: [b.v32()?, b.v32()?, b.v32()?],
            block: [b.v32()?, b.v32()?, b.v32()?],
            static_smem: b.v32()?,
            dynamic_smem: b.v32()?,
            registers: b.v32()?,
            graph_id: b.v32()?,
            ..Default::default()
        };
        if let Some(ops) = &mut self.deferred {
            ops.push(ShapeOp::Define(id, k));
            return Ok(());
        }
        self.shapes.define(id, k)
    }

    #[inline(always)]
    fn ts(&mut self, b: &mut Body) -> Result<u64, DecodeError> {
        let d = unzigzag(b.v()?);
        self.last_ts = self.last_ts.wrapping_add(d as u64);
        Ok(self.last_ts)
    }

    #[inline(always)]
    fn span(&mut self, b: &mut Body) -> Result<(u64, u64), DecodeError> {
        let s = self.ts(b)?;
        let d = b.v()?;
        Ok((s, s.saturating_add(d)))
    }

    #[inline(always)]
    fn corr(&mut self, b: &mut Body) -> Result<u32, DecodeError> {
        let d = unzigzag(b.v()?);
        self.last_corr = (self.last_corr as i64).wrapping_add(d) as u32;
        Ok(self.last_corr)
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
            if tag == TAG_KERNEL_SHAPE {
                match self.define_shape(&mut b) {
                    Ok(()) => continue,
                    Err(e) => return Some(Err(e)),
                }
            }
            match self.decode(tag, &mut b) {
                Ok(Some(ev)) => return Some(Ok(ev)),
                Ok(None) => {
                    self.skipped += 1;
                    continue;
                }
                Err(e) => return Some(Err(e)),
            }
        }
    }

    fn decode(&mut self, tag: u8, b: &mut Body) -> Result<Option<Event>, DecodeError> {
        Ok(Some(match tag {
            TAG_STR => {
                let id = b.v32()?;
                let n = b.v()? as usize;
                let at = b.base + b.pos;
                let s = b.slice(n)?;
                let text = std::str::from_utf8(s)
                    .map_err(|_| DecodeError::BadString(at))?
                    .to_string();
                Event::Str { id, text }
            }
            TAG_CLOCK => Event::Clock {
                cupti_ns: b.v()?,
                mono_ns: b.v()?,
                real_ns: b.v()?,
            },
            TAG_DEVICE => Event::Device(Device {
                id: b.v32()?,
                name: b.v32()?,
                sm_count: b.v32()?,
                max_blocks_per_sm: b.v32()?,
                max_threads_per_sm: b.v32()?,
                max_warps_per_sm: b.v32()?,
                global_memory: b.v()?,
                cc_major: b.v32()?,
                cc_minor: b.v32()?,
                max_regs_per_sm: b.v32()?,
                max_smem_per_sm: b.v32()?,
            }),
            TAG_KERNEL => {
                let (start, end) = self.span(b)?;
                let device = b.v32()?;
                let stream = b.v32()?;
                let corr = self.corr(b)?;
                let name = b.v32()?;
                let grid = [b.v32()?, b.v32()?, b.v32()?];
                let block = [b.v32()?, b.v32()?, b.v32()?];
                let k = Kernel {
                    start,
                    end,
                    device,
                    stream,
                    corr,
                    name,
                    grid,
                    block,
                    static_smem: b.v32()?,
                    dynamic_smem: b.v32()?,
                    registers: b.v32()?,
                    graph_id: b.v32()?,
                };
                self.kernels += 1;
                Event::Kernel(k)
            }
            TAG_KERNEL_COMPACT => {
                let (start, end) = self.span(b)?;
                let device = b.v32()?;
                let stream = b.v32()?;
                let corr = self.corr(b)?;
                let id = b.v32()?;
                // Built once, from its shape where known (the hot path).
                let k = match (self.shapes.get(id), &mut self.deferred) {
                    (Some(shape), _) => Kernel {
                        start,
                        end,
                        device,
                        stream,
                        corr,
                        ..shape.clone()
                    },
                    // Deferred: shapes past the snapshot are filled in by the reader.
                    (None, Some(ops)) => {
                        ops.push(ShapeOp::Use {
                            nth: self.kernels,
                            id,
                        });
                        Kernel {
                            start,
                            end,
                            device,
                            stream,
                            corr,
                            ..Default::default()
                        }
                    }
                    (None, None) => return Err(DecodeError::BadShape(id)),
                };
                self.kernels += 1;
                Event::Kernel(k)
            }
            TAG_MEMCPY => {
                let (start, end) = self.span(b)?;
                let device = b.v32()?;
                let stream = b.v32()?;
                let corr = self.corr(b)?;
                Event::Memcpy(Memcpy {
                    start,
                    end,
                    device,
                    stream,
                    corr,
                    bytes: b.v()?,
                    copy_kind: b.u8()?,
                    src_kind: b.u8()?,
                    dst_kind: b.u8()?,
                    flags: b.u8()?,
                })
            }
            TAG_MEMSET => {
                let (start, end) = self.span(b)?;
                let device = b.v32()?;
                let stream = b.v32()?;
                let corr = self.corr(b)?;
                Event::Memset(Memset {
                    start,
                    end,
                    device,
                    stream,
                    corr,
                    bytes: b.v()?,
                    value: b.v32()?,
                    mem_kind: b.u8()?,
                    flags: b.u8()?,
                })
            }
            TAG_SYNC => {
                let (start, end) = self.span(b)?;
                let device = b.v32()?;
                let stream = b.v32()?;
                let corr = self.corr(b)?;
                Event::Sync(Sync {
                    start,
                    end,
                    device,
                    stream,
                    corr,
                    kind: b.u8()?,
                })
            }
            TAG_MEMORY => {
                let ts = self.ts(b)?;
                let device = b.v32()?;
                let corr = self.corr(b)?;
                Event::Memory(Memory {
                    ts,
                    device,
                    corr,
                    address: b.v()?,
                    bytes: b.v()?,
                    op: b.u8()?,
                    mem_kind: b.u8()?,
                })
            }
            TAG_API => {
                let (start, end) = self.span(b)?;
                let tid = b.v32()?;
                let corr = self.corr(b)?;
                Event::Api(Api {
                    start,
                    end,
                    tid,
                    corr,
                    domain: b.u8()?,
                    cbid: b.v32()?,
                    name: b.v32()?,
                    bytes: b.v()?,
                    arg: b.v32()?,
                    result: b.v32()?,
                })
            }
            TAG_DROPPED => Event::Dropped {
                ts: self.ts(b)?,
                source: b.u8()?,
                count: b.v()?,
            },
            TAG_STATE => Event::State {
                ts: self.ts(b)?,
                state: b.u8()?,
                reason: b.v32()?,
            },
            TAG_THREAD => Event::Thread {
                tid: b.v32()?,
                name: b.v32()?,
            },
            TAG_HOST_COPY => {
                let (start, end) = self.span(b)?;
                Event::HostCopy(HostCopy {
                    start,
                    end,
                    tid: b.v32()?,
                    api: b.u8()?,
                    copy_kind: b.u8()?,
                    host_kind: b.u8()?,
                    source: b.u8()?,
                    flags: b.u8()?,
                    bytes: b.v()?,
                    stream: b.v()?,
                    dst: b.v()?,
                    src: b.v()?,
                    dst_device: b.v32()?.wrapping_sub(1),
                    src_device: b.v32()?.wrapping_sub(1),
                    result: b.v32()?,
                })
            }
            TAG_HOST_CALL => {
                let (start, end) = self.span(b)?;
                Event::HostCall(HostCall {
                    start,
                    end,
                    tid: b.v32()?,
                    call: b.v()? as u16,
                    stream: b.v()?,
                    arg0: b.v()?,
                    arg1: b.v()?,
                    arg2: b.v()?,
                    result: b.v32()?,
                })
            }
            TAG_HOST_ALLOC => {
                let (start, end) = self.span(b)?;
                Event::HostAlloc(HostAlloc {
                    start,
                    end,
                    tid: b.v32()?,
                    op: b.u8()?,
                    ptr: b.v()?,
                    bytes: b.v()?,
                    flags: b.v32()?,
                    result: b.v32()?,
                })
            }
            TAG_NCCL => {
                let (start, end) = self.span(b)?;
                Event::Nccl(Nccl {
                    start,
                    end,
                    tid: b.v32()?,
                    op: b.u8()?,
                    datatype: b.u8()?,
                    redop: b.u8()?,
                    stream: b.v()?,
                    count: b.v()?,
                    bytes: b.v()?,
                    peer_or_root: b.i32()?,
                    comm_id: b.v()?,
                    rank: b.i32()?,
                    nranks: b.i32()?,
                    seq: b.v()?,
                    result: b.v32()?,
                })
            }
            TAG_NCCL_COMM => {
                let (start, end) = self.span(b)?;
                Event::NcclComm(NcclComm {
                    start,
                    end,
                    tid: b.v32()?,
                    op: b.u8()?,
                    comm: b.v()?,
                    comm_id: b.v()?,
                    parent_id: b.v()?,
                    rank: b.i32()?,
                    nranks: b.i32()?,
                    color: b.i32()?,
                    result: b.v32()?,
                })
            }
            TAG_NVTX => Event::Nvtx(Nvtx {
                ts: self.ts(b)?,
                tid: b.v32()?,
                kind: b.u8()?,
                flags: b.u8()?,
                id: b.v()?,
                text: b.v32()?,
            }),
            // Host samples: fields a later minor version appends to these bodies are
            // ignored here (every body carries its own length).
            TAG_THREAD_CPU => Event::ThreadCpu(ThreadCpu {
                ts: self.ts(b)?,
                tid: b.v32()?,
                cpu_ns: b.v()?,
                wait_ns: b.v()?,
                slices: b.v()?,
                state: b.u8()?,
            }),
            TAG_PROC_SAMPLE => Event::ProcSample(ProcSample {
                ts: self.ts(b)?,
                pid: b.v32()?,
                ppid: b.v32()?,
                comm: b.v32()?,
                flags: b.u8()?,
                state: b.u8()?,
                threads: b.v32()?,
                cpu_ns: b.v()?,
                rchar: b.v()?,
                read_bytes: b.v()?,
                write_bytes: b.v()?,
            }),
            TAG_MACHINE_SAMPLE => Event::MachineSample(MachineSample {
                ts: self.ts(b)?,
                busy_ns: b.v()?,
                idle_ns: b.v()?,
                iowait_ns: b.v()?,
                steal_ns: b.v()?,
                flags: b.u8()?,
                psi_cpu_some_us: b.v()?,
                psi_io_some_us: b.v()?,
                psi_io_full_us: b.v()?,
                cgroup_usage_us: b.v()?,
                cgroup_throttled_us: b.v()?,
            }),
            TAG_CPU_LIMITS => Event::CpuLimits(CpuLimits {
                ts: self.ts(b)?,
                online_cpus: b.v32()?,
                affinity_cpus: b.v32()?,
                quota_us: b.v()?,
                period_us: b.v()?,
                memory_limit: b.v()?,
                thread_period_us: b.v32()?,
                tree_period_us: b.v32()?,
            }),
            TAG_FACT => Event::Fact(Fact {
                ts: self.ts(b)?,
                device: b.na32()?,
                key: b.v32()?,
                value: b.v32()?,
            }),
            TAG_GPU_SAMPLE => Event::GpuSample(GpuSample {
                ts: self.ts(b)?,
                device: b.v32()?,
                sm_clock_mhz: b.na32()?,
                sm_clock_max_mhz: b.na32()?,
                mem_clock_mhz: b.na32()?,
                mem_clock_max_mhz: b.na32()?,
                clock_reasons: b.na(ENV_NA64)?,
                power_mw: b.na32()?,
                power_limit_mw: b.na32()?,
                temperature_c: b.na32()?,
                gpu_util_pct: b.na32()?,
                mem_util_pct: b.na32()?,
                mem_used: b.na(ENV_NA64)?,
                mem_total: b.na(ENV_NA64)?,
                pcie_gen: b.na32()?,
                pcie_gen_max: b.na32()?,
                pcie_width: b.na32()?,
                pcie_width_max: b.na32()?,
                pcie_tx_kbs: b.na32()?,
                pcie_rx_kbs: b.na32()?,
            }),
            TAG_GPU_PROCESS => Event::GpuProcess(GpuProcess {
                ts: self.ts(b)?,
                device: b.v32()?,
                pid: b.v32()?,
                name: b.v32()?,
                used_memory: b.na(ENV_NA64)?,
                sm_pct: b.na32()?,
                mem_pct: b.na32()?,
                flags: b.u8()?,
            }),
            TAG_GPU_EVENT => Event::GpuEvent(GpuEvent {
                ts: self.ts(b)?,
                device: b.v32()?,
                kind: b.u8()?,
                data: b.v()?,
            }),
            TAG_PY_STACK => {
                let id = b.v32()?;
                let n = b.v()? as usize;
                // Each frame takes at least three bytes: a corrupt count cannot make
                // the reader reserve more than the body could hold.
                let mut frames = Vec::with_capacity(n.min(b.b.len() / 3));
                for _ in 0..n {
                    frames.push(PyFrame {
                        file: b.v32()?,
                        function: b.v32()?,
                        line: b.v32()?,
                    });
                }
                Event::PyStack(PyStack { id, frames })
            }
            TAG_CALL_SITE => Event::CallSite(CallSite {
                ts: self.ts(b)?,
                tid: b.v32()?,
                stack: b.v32()?,
            }),
            TAG_COUNTER_SAMPLE => {
                let (start, end) = self.span(b)?;
                Event::CounterSample(CounterSample {
                    start,
                    end,
                    device: b.v32()?,
                    sm_active: b.na32()?,
                    occupancy: b.na32()?,
                    tensor_active: b.na32()?,
                    dram: b.na32()?,
                    pcie_read_bytes: b.na(ENV_NA64)?,
                    pcie_write_bytes: b.na(ENV_NA64)?,
                    nvlink_rx_bytes: b.na(ENV_NA64)?,
                    nvlink_tx_bytes: b.na(ENV_NA64)?,
                })
            }
            TAG_PY_SAMPLE => Event::PySample(PySample {
                ts: self.ts(b)?,
                tid: b.v32()?,
                stack: b.v32()?,
            }),
            TAG_STALL => Event::Stall(Stall {
                ts: self.ts(b)?,
                since: self.ts(b)?,
                id: b.v32()?,
                seq: b.v32()?,
                outstanding: b.v32()?,
                flags: b.u8()?,
            }),
            TAG_STALL_OP => Event::StallOp(StallOp {
                ts: self.ts(b)?,
                stall: b.v32()?,
                seq: b.v32()?,
                kind: b.u8()?,
                flags: b.u8()?,
                device: (b.v()? as u32).wrapping_sub(1),
                stream: b.v32()?,
                corr: self.corr(b)?,
                name: b.v32()?,
                tid: b.v32()?,
                launch_ts: self.ts(b)?,
                start: self.ts(b)?,
                bytes: b.v()?,
                grid: [b.v32()?, b.v32()?, b.v32()?],
                block: [b.v32()?, b.v32()?, b.v32()?],
            }),
            TAG_STALL_THREAD => Event::StallThread(StallThread {
                ts: self.ts(b)?,
                stall: b.v32()?,
                seq: b.v32()?,
                tid: b.v32()?,
                call: b.v32()?,
                call_start: self.ts(b)?,
                stack: b.v32()?,
                state: b.u8()?,
            }),
            _ => return Ok(None),
        }))
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
    fn assert_round_trip(evs: &[Event]) {
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
    fn hook_events() -> Vec<Event> {
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
    fn env_events() -> Vec<Event> {
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
    fn round_trip_stall_events() {
        let mut evs = sample_events();
        evs.extend(stall_events());
        evs.extend(sample_events());
        assert_round_trip(&evs);
    }

    #[test]
    fn truncated_stall_events_are_errors_not_panics() {
        let mut enc = Encoder::new();
        for e in stall_events() {
            enc.push(&e);
        }
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
            TAG_STALL,
            TAG_STALL_OP,
            TAG_STALL_THREAD,
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
        let mut enc = Encoder::new();
        for e in host_sample_events() {
            enc.push(&e);
        }
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

    #[test]
    fn truncated_body_is_an_error_not_a_panic() {
        let mut enc = Encoder::new();
        for e in sample_events() {
            enc.push(&e);
        }
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
            }));
        }
        let per = enc.len() as f64 / 1000.0;
        assert!(per <= 12.0, "{per} bytes per kernel");
    }
}
