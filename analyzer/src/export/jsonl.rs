//! `gputrace dump`: one JSON object per event per line, keys in alphabetical order.
//!
//! Common fields: `type`, `ts_ns`, `dur_ns`, `pid`, `tid`, `device`, `stream`, `corr`
//! (each present when the event has it), then the type's own fields. String ids are
//! resolved to their text.
//!
//! Events of the symbol hooks (host side, from libgputrace's own exports):
//! * `host_copy`: `api` (cudaMemcpy, cudaMemcpyAsync, ...), `kind` (HtoD, DtoH, ...),
//!   `bytes`, `host_memory` (pinned / pageable / device / unknown) and
//!   `host_memory_source` (`registry`: the pinned-memory registry), `async`,
//!   `cupti_api` (true: CUPTI recorded the same call as an `api` event; this line only
//!   adds the classification), `dst`, `src`, `dst_device` / `src_device` (peer copies),
//!   `result`.
//! * `host_call`: a sync, memset or launch recorded while CUPTI's callbacks were not
//!   recording: `name`, `class` (sync / memset / launch), `result`, and by class:
//!   `event`, `flags` (syncs); `bytes`, `ptr`, `value` (memsets); `function`,
//!   `grid_blocks`, `block_threads` (launches; `function` is the graph exec for
//!   cudaGraphLaunch).
//! * `host_alloc`: pinned host memory: `op` (cudaHostAlloc, cudaMallocHost,
//!   cudaHostRegister, cudaFreeHost, cudaHostUnregister), `ptr`, `bytes`, `flags`,
//!   `result`.
//! * `nccl`: `op` (ncclAllReduce, ...), `count`, `bytes` (count x datatype size),
//!   `datatype`, `redop`, `root` or `peer`, `comm_id` (hex, the same on every rank),
//!   `rank`, `nranks`, `seq` (the call's number on its communicator), `result`.
//! * `nccl_comm`: `op` (ncclCommInitRank, ncclCommSplit, ncclCommDestroy, ...),
//!   `comm` (handle), `comm_id`, `parent_id` (splits, hex), `rank`, `nranks`, `color`,
//!   `result`.
//! * `nvtx`: `kind` (push / pop / start / end / mark), `id` (range id for start / end,
//!   nesting level for push / pop), `text`, `truncated`.
//!
//! Environment events (fields NVML did not give are left out):
//! * `fact`: `key`, `value`, and `device` (NVML index) for facts about one GPU.
//! * `gpu_sample`: `device`, `sm_clock_mhz`, `sm_clock_max_mhz`, `mem_clock_mhz`,
//!   `mem_clock_max_mhz`, `clock_reasons` (names) and `clock_reasons_mask`, `power_mw`,
//!   `power_limit_mw`, `temperature_c`, `gpu_util_pct`, `mem_util_pct`, `mem_used`,
//!   `mem_total`, `pcie_gen`, `pcie_gen_max`, `pcie_width`, `pcie_width_max`,
//!   `pcie_tx_kbs`, `pcie_rx_kbs`.
//! * `gpu_process`: `device`, `pid` (other processes' too), `name`, `used_memory`,
//!   `sm_pct`, `mem_pct` (its share since the last sample), `listed`, `self`.
//! * `gpu_event`: `device`, `kind` (xid / ecc_corrected / ecc_uncorrected), `xid` or
//!   `count`.
//!
//! Python call sites (format 2.2):
//! * `py_stack`: a stack, once per id, before the records: `id`, `frames` (innermost
//!   first, each `file`, `function`, `line`; line 0 when not known).
//! * `call_site`: `tid`, `ts_ns` (the start of that thread's host call: an `api`,
//!   `host_call`, `host_copy` or `nccl` line) and `stack` (a `py_stack` id).
//! * `py_sample` (format 2.3): a periodic sample of a CUDA-issuing thread's Python
//!   stack during the window: `tid`, `ts_ns`, `stack` (a `py_stack` id).
//!
//! GPU performance counters (NVML GPM from `gputrace run`/`attach`: in the environment
//! file, the device an NVML index; CUPTI PM in older traces; values the GPU did not give
//! are left out):
//! * `counter_sample`: `device`, `dur_ns`, `sm_active_pct`, `occupancy_pct` (achieved
//!   occupancy), `tensor_active_pct`, `dram_pct` (of peak), `fp64_pct`, `fp32_pct`,
//!   `fp16_pct`, `integer_pct`, `tensor_dfma_pct`, `tensor_hmma_pct`, `tensor_imma_pct`,
//!   `pcie_read_bytes`, `pcie_write_bytes`, `nvlink_rx_bytes`, `nvlink_tx_bytes` (over
//!   the sample), `source` (`gpm` or `pm`), `gpu_instance` (a MIG GPU instance only).
//!
//! Host samples (format 2.1, the library's sampler; counters are cumulative):
//! * `thread_cpu`: a CUDA-issuing thread: `tid`, `cpu_ns` (on a CPU), `wait_ns`
//!   (runnable, waiting for a CPU), `slices` (times switched in), `state` (R, S, D, ...;
//!   null when not read).
//! * `proc_sample`: a process of the traced process's tree or one of its threads:
//!   `tid` (for threads) or `sample_pid`, `ppid`, `comm`, `role` (self / child /
//!   thread), `state`, `threads`, `cpu_ns`, and for processes `rchar`, `read_bytes`,
//!   `write_bytes` (absent when /proc/PID/io was not readable).
//! * `machine_sample`: `busy_ns`, `idle_ns`, `iowait_ns`, `steal_ns` (all CPUs), and
//!   where read `psi_cpu_some_us`, `psi_io_some_us`, `psi_io_full_us`,
//!   `cgroup_usage_us`, `cgroup_throttled_us`.
//! * `cpu_limits`: `online_cpus`, `affinity_cpus`, `quota_us` / `period_us` (0: no
//!   quota), `cpus_available`, `memory_limit` (0: none), `thread_period_us`,
//!   `tree_period_us`.

use super::api::{EventExporter, TraceContext, TraceEvent};
use crate::model::trace::demangle;
use gputrace_format::{self as fmt, CopyKind, MemKind, SyncKind, Value};
use serde::Serialize;
use std::collections::HashMap;
use std::io::{self, Write};
use std::ops::Range;

/// The JSON-lines exporter. Each line is put together in reused buffers and written
/// with one call.
#[derive(Default)]
pub struct Jsonl {
    line: Line,
    /// Kernel names demangled, by string id (a trace has few names, millions of
    /// kernels).
    demangled: HashMap<u32, String>,
}

/// One object being written: its fields' keys and rendered values, sorted when done.
#[derive(Default)]
struct Line {
    fields: Vec<(&'static str, Range<usize>)>,
    values: Vec<u8>,
    out: Vec<u8>,
}

impl Line {
    fn start(&mut self, ty: &str, pid: u32, ts: u64, dur: Option<u64>) {
        self.fields.clear();
        self.values.clear();
        self.put("type", ty);
        self.put("ts_ns", &ts);
        if let Some(d) = dur {
            self.put("dur_ns", &d);
        }
        self.put("pid", &pid);
    }

    fn put<T: Serialize + ?Sized>(&mut self, key: &'static str, v: &T) {
        let from = self.values.len();
        // Numbers, strings, booleans and arrays of them: writing them into a Vec cannot
        // fail.
        let _ = serde_json::to_writer(&mut self.values, v);
        self.fields.push((key, from..self.values.len()));
    }

    /// A scheduler state letter, null when it was not read.
    fn state(&mut self, key: &'static str, s: u8) {
        if s == fmt::STATE_UNKNOWN {
            self.put(key, &());
        } else {
            self.put(key, &(s as char).to_string());
        }
    }

    fn hex(&mut self, key: &'static str, v: u64) {
        self.put(key, &format!("{v:#018x}"));
    }

    /// The object as one line, keys sorted as a JSON map sorts them.
    fn finish(&mut self, out: &mut dyn Write) -> io::Result<()> {
        self.fields.sort_unstable_by_key(|f| f.0);
        debug_assert!(
            self.fields.windows(2).all(|w| w[0].0 != w[1].0),
            "a key twice: {:?}",
            self.fields
        );
        self.out.clear();
        self.out.push(b'{');
        for (i, (k, r)) in self.fields.iter().enumerate() {
            if i > 0 {
                self.out.push(b',');
            }
            self.out.push(b'"');
            self.out.extend_from_slice(k.as_bytes());
            self.out.extend_from_slice(b"\":");
            self.out.extend_from_slice(&self.values[r.clone()]);
        }
        self.out.extend_from_slice(b"}\n");
        out.write_all(&self.out)
    }
}

/// The line of an event as its definition in the event table has it: typed by the
/// kind's name, `ts_ns` and `dur_ns` from its first time field and its end, then every
/// other field under its own name (interned strings resolved, values not available
/// left out), but those named in `own` (the caller writes them its own way).
fn generic(m: &mut Line, cx: &TraceContext<'_>, pid: u32, ev: &dyn fmt::Fields, own: &[&str]) {
    let (ts, end) = ev.span().unwrap_or_default();
    m.start(ev.kind_name(), pid, ts, end.map(|e| e.saturating_sub(ts)));
    #[derive(Serialize)]
    struct Frame<'a> {
        file: &'a str,
        function: &'a str,
        line: u32,
    }
    // The times already given as `ts_ns` and `dur_ns`.
    let mut times = 1 + end.is_some() as usize;
    ev.fields(&mut |k, v| match v {
        Value::Time(_) if times > 0 => times -= 1,
        _ if own.contains(&k) => {}
        Value::Time(t) => m.put(k, &t),
        Value::U(x) => m.put(k, &x),
        Value::I(x) => m.put(k, &x),
        Value::Str(id) => m.put(k, cx.str(id)),
        Value::Text(t) => m.put(k, t),
        Value::Array(a) => m.put(k, a),
        Value::Frames(frames) => {
            let frames: Vec<Frame<'_>> = frames
                .iter()
                .map(|f| Frame {
                    file: cx.str(f.file),
                    function: cx.str(f.function),
                    line: f.line,
                })
                .collect();
            m.put(k, &frames)
        }
        Value::Na => {}
    });
}

impl Jsonl {
    /// Writes the line of a device, kernel, copy, memset, sync, memory or CUDA API record.
    fn gpu_activity(&mut self, cx: &TraceContext<'_>, ev: &TraceEvent<'_>) {
        let m = &mut self.line;
        let pid = cx.meta.pid;
        let mut line = |e: &dyn fmt::Fields, own: &[&str]| generic(m, cx, pid, e, own);
        match *ev {
            TraceEvent::Device(d) => {
                let own = [
                    "id",
                    "cc_major",
                    "cc_minor",
                    "max_regs_per_sm",
                    "max_smem_per_sm",
                ];
                line(d, &own);
                m.put("device", &d.id);
                let cc = format!("{}.{}", d.cc_major, d.cc_minor);
                m.put("compute_capability", &cc);
            }
            TraceEvent::Kernel(k) => {
                line(k, &["name"]);
                let name = cx.str(k.name);
                let pretty = self
                    .demangled
                    .entry(k.name)
                    .or_insert_with(|| demangle(name));
                m.put("name", pretty.as_str());
                m.put("mangled", name);
            }
            TraceEvent::Memcpy(c) => {
                line(c, &["copy_kind", "src_kind", "dst_kind", "flags"]);
                m.put("kind", CopyKind::from_u8(c.copy_kind).name());
                m.put("src_kind", MemKind::from_u8(c.src_kind).name());
                m.put("dst_kind", MemKind::from_u8(c.dst_kind).name());
                m.put("host_memory", crate::report::summary::copy_class(c));
                m.put("async", &(c.flags & fmt::MEMCPY_FLAG_ASYNC != 0));
            }
            TraceEvent::Memset(s) => {
                line(s, &["mem_kind", "flags"]);
                m.put("memory_kind", MemKind::from_u8(s.mem_kind).name());
            }
            TraceEvent::Sync(s) => {
                line(s, &["device", "stream", "kind"]);
                if s.stream != u32::MAX {
                    m.put("stream", &s.stream);
                }
                m.put("kind", SyncKind::from_u8(s.kind).name());
            }
            TraceEvent::Memory(a) => {
                line(a, &["op", "mem_kind"]);
                let free = a.op == fmt::MEMORY_OP_FREE;
                m.put("op", if free { "free" } else { "alloc" });
                m.put("memory_kind", MemKind::from_u8(a.mem_kind).name());
            }
            TraceEvent::Api(a) => {
                line(a, &["domain"]);
                let driver = a.domain == fmt::DOMAIN_DRIVER;
                m.put("domain", if driver { "driver" } else { "runtime" });
            }
            _ => unreachable!("not a GPU activity event"),
        }
    }

    /// Writes the line of a collector's record: state, drops, clock pair, stalls, other kinds.
    fn collector_record(&mut self, cx: &TraceContext<'_>, ev: &TraceEvent<'_>) {
        let m = &mut self.line;
        let pid = cx.meta.pid;
        let mut line = |e: &dyn fmt::Fields, own: &[&str]| generic(m, cx, pid, e, own);
        match *ev {
            TraceEvent::State { ts, state, reason } => {
                m.start("state", pid, ts, None);
                let name = fmt::CollectorState::from_u8(state)
                    .map(|s| s.name())
                    .unwrap_or("unknown");
                m.put("state", name);
                m.put("reason", cx.str(reason));
            }
            TraceEvent::Dropped { ts, source, count } => {
                m.start("dropped", pid, ts, None);
                m.put("source", fmt::drop_source_name(source));
                m.put("count", &count);
            }
            TraceEvent::Clock {
                cupti_ns,
                mono_ns,
                real_ns,
            } => {
                m.start("clock", pid, real_ns, None);
                m.put("cupti_ns", &cupti_ns);
                m.put("mono_ns", &mono_ns);
                m.put("real_ns", &real_ns);
            }
            TraceEvent::Other(fmt::Event::Stall(x)) => {
                line(x, &["since", "flags"]);
                m.put("since_ns", &x.since);
                m.put("end", &(x.flags & fmt::STALL_END != 0));
                m.put("resolved", &(x.flags & fmt::STALL_RESOLVED != 0));
                m.put("forced_flush", &(x.flags & fmt::STALL_FORCED_FLUSH != 0));
            }
            TraceEvent::Other(fmt::Event::StallOp(x)) => {
                line(x, &["kind", "flags", "corr", "launch_ts", "start"]);
                m.put("kind", fmt::stall_op_name(x.kind));
                m.put("correlation", &x.corr);
                m.put("launch_ns", &x.launch_ts);
                m.put("start_ns", &x.start);
                m.put("at_launch", &(x.flags & fmt::STALL_OP_FLAG_LAUNCH != 0));
                let incomplete = x.flags & fmt::STALL_OP_FLAG_INCOMPLETE != 0;
                m.put("incomplete_record", &incomplete);
            }
            TraceEvent::Other(fmt::Event::StallThread(x)) => {
                line(x, &["call_start", "state"]);
                m.put("call_start_ns", &x.call_start);
                m.state("state", x.state);
            }
            TraceEvent::Other(e) => line(e, &[]),
            _ => unreachable!("not a collector record"),
        }
    }

    /// Writes the line of a call the symbol hooks saw (host copies and calls, NCCL, NVTX).
    fn host_call(&mut self, cx: &TraceContext<'_>, ev: &TraceEvent<'_>) {
        let m = &mut self.line;
        let pid = cx.meta.pid;
        let mut line = |e: &dyn fmt::Fields, own: &[&str]| generic(m, cx, pid, e, own);
        match *ev {
            TraceEvent::HostCopy(c) => {
                let own = [
                    "api",
                    "copy_kind",
                    "host_kind",
                    "source",
                    "flags",
                    "dst_device",
                    "src_device",
                ];
                line(c, &own);
                m.put("api", fmt::hostcopy_api_name(c.api));
                m.put("kind", CopyKind::from_u8(c.copy_kind).name());
                m.put("host_memory", MemKind::from_u8(c.host_kind).name());
                let source = crate::report::summary::class_source_name(c.source);
                m.put("host_memory_source", source);
                m.put("async", &(c.flags & fmt::HOSTCOPY_FLAG_ASYNC != 0));
                m.put("cupti_api", &(c.flags & fmt::HOSTCOPY_FLAG_CUPTI_API != 0));
                if c.dst_device != u32::MAX || c.src_device != u32::MAX {
                    m.put("dst_device", &c.dst_device);
                    m.put("src_device", &c.src_device);
                }
            }
            TraceEvent::HostCall(c) => {
                line(c, &["call", "arg0", "arg1", "arg2"]);
                let (name, class) = fmt::hostcall_info(c.call);
                m.put("name", name);
                let (class, keys) = match class {
                    fmt::HostCallClass::Sync => ("sync", ["event", "flags", ""]),
                    fmt::HostCallClass::Memset => ("memset", ["bytes", "ptr", "value"]),
                    fmt::HostCallClass::Launch => {
                        ("launch", ["function", "grid_blocks", "block_threads"])
                    }
                    fmt::HostCallClass::Unknown => {
                        ("unknown", ["function", "grid_blocks", "block_threads"])
                    }
                };
                for (k, v) in keys.into_iter().zip([c.arg0, c.arg1, c.arg2]) {
                    if !k.is_empty() {
                        m.put(k, &v);
                    }
                }
                m.put("class", class);
            }
            TraceEvent::HostAlloc(a) => {
                line(a, &["op"]);
                m.put("op", fmt::hostalloc_op_name(a.op));
            }
            TraceEvent::Nccl(n) => {
                line(n, &["op", "datatype", "redop", "comm_id", "peer_or_root"]);
                m.put("op", fmt::nccl_op_name(n.op));
                m.put("datatype", fmt::nccl_datatype(n.datatype).1);
                m.put("redop", fmt::nccl_redop_name(n.redop));
                m.hex("comm_id", n.comm_id);
                match n.op {
                    fmt::NCCL_REDUCE | fmt::NCCL_BROADCAST => m.put("root", &n.peer_or_root),
                    fmt::NCCL_SEND | fmt::NCCL_RECV => m.put("peer", &n.peer_or_root),
                    _ => {}
                }
            }
            TraceEvent::NcclComm(n) => {
                line(n, &["op", "comm", "comm_id", "parent_id"]);
                m.put("op", fmt::nccl_comm_op_name(n.op));
                m.hex("comm", n.comm);
                m.hex("comm_id", n.comm_id);
                m.hex("parent_id", n.parent_id);
            }
            TraceEvent::Nvtx(n) => {
                line(n, &["kind", "flags"]);
                m.put("kind", fmt::nvtx_kind_name(n.kind));
                m.put("truncated", &(n.flags & fmt::NVTX_FLAG_TRUNCATED != 0));
            }
            _ => unreachable!("not a host call"),
        }
    }

    /// Writes the line of an NVML reading (facts, samples, processes, events) or counter sample.
    fn gpu_sampler(&mut self, cx: &TraceContext<'_>, ev: &TraceEvent<'_>) {
        let m = &mut self.line;
        let pid = cx.meta.pid;
        let mut line = |e: &dyn fmt::Fields, own: &[&str]| generic(m, cx, pid, e, own);
        match *ev {
            // Fields NVML did not give are left out (the generic line does that).
            TraceEvent::Fact(f) => line(f, &[]),
            TraceEvent::GpuSample(g) => {
                line(g, &["clock_reasons"]);
                if g.clock_reasons != fmt::ENV_NA64 {
                    m.put("clock_reasons", &fmt::clock_reason_names(g.clock_reasons));
                    m.put("clock_reasons_mask", &g.clock_reasons);
                }
            }
            TraceEvent::GpuProcess(p) => {
                // `pid` is the process on the GPU, which need not be the traced one.
                generic(m, cx, p.pid, p, &["pid", "flags"]);
                m.put("listed", &(p.flags & fmt::GPU_PROC_LISTED != 0));
                m.put("self", &(p.flags & fmt::GPU_PROC_SELF != 0));
            }
            TraceEvent::GpuEvent(e) => {
                line(e, &["kind", "data"]);
                m.put("kind", fmt::gpu_event_name(e.kind));
                let xid = e.kind == fmt::GPU_EVENT_XID;
                m.put(if xid { "xid" } else { "count" }, &e.data);
            }
            TraceEvent::CounterSample(x) => {
                let pct = [
                    ("sm_active_pct", x.sm_active),
                    ("occupancy_pct", x.occupancy),
                    ("tensor_active_pct", x.tensor_active),
                    ("dram_pct", x.dram),
                    ("fp64_pct", x.fp64_active),
                    ("fp32_pct", x.fp32_active),
                    ("fp16_pct", x.fp16_active),
                    ("integer_pct", x.integer_active),
                    ("tensor_dfma_pct", x.tensor_dfma),
                    ("tensor_hmma_pct", x.tensor_hmma),
                    ("tensor_imma_pct", x.tensor_imma),
                ];
                let own = [
                    "sm_active",
                    "occupancy",
                    "tensor_active",
                    "dram",
                    "fp64_active",
                    "fp32_active",
                    "fp16_active",
                    "integer_active",
                    "tensor_dfma",
                    "tensor_hmma",
                    "tensor_imma",
                    "source",
                    "instance",
                ];
                line(x, &own);
                for (k, v) in pct {
                    if v != fmt::ENV_NA {
                        m.put(k, &(v as f64 / 100.0));
                    }
                }
                m.put("source", x.source_name());
                if x.instance != fmt::ENV_NA {
                    m.put("gpu_instance", &x.instance);
                }
            }
            _ => unreachable!("not a GPU sampler event"),
        }
    }

    /// Writes the line of a host sampler's reading (threads, processes, machine, CPU limits).
    fn host_sampler(&mut self, cx: &TraceContext<'_>, ev: &TraceEvent<'_>) {
        let m = &mut self.line;
        let pid = cx.meta.pid;
        let mut line = |e: &dyn fmt::Fields, own: &[&str]| generic(m, cx, pid, e, own);
        match *ev {
            TraceEvent::ThreadCpu(x) => {
                line(x, &["state"]);
                m.state("state", x.state);
            }
            TraceEvent::ProcSample(x) => {
                let io = ["rchar", "read_bytes", "write_bytes"];
                line(x, &["pid", "flags", "state", io[0], io[1], io[2]]);
                let thread = x.flags & fmt::PROC_FLAG_THREAD != 0;
                let role = if thread {
                    "thread"
                } else if x.flags & fmt::PROC_FLAG_SELF != 0 {
                    "self"
                } else {
                    "child"
                };
                m.put(if thread { "tid" } else { "sample_pid" }, &x.pid);
                m.put("role", role);
                m.state("state", x.state);
                if !thread && x.flags & fmt::PROC_FLAG_NO_IO == 0 {
                    m.put(io[0], &x.rchar);
                    m.put(io[1], &x.read_bytes);
                    m.put(io[2], &x.write_bytes);
                }
            }
            TraceEvent::MachineSample(x) => {
                let psi = ["psi_cpu_some_us", "psi_io_some_us", "psi_io_full_us"];
                let cgroup = ["cgroup_usage_us", "cgroup_throttled_us"];
                line(x, &["flags", psi[0], psi[1], psi[2], cgroup[0], cgroup[1]]);
                if x.flags & fmt::MACHINE_FLAG_PSI != 0 {
                    m.put(psi[0], &x.psi_cpu_some_us);
                    m.put(psi[1], &x.psi_io_some_us);
                    m.put(psi[2], &x.psi_io_full_us);
                }
                if x.flags & fmt::MACHINE_FLAG_CGROUP != 0 {
                    m.put(cgroup[0], &x.cgroup_usage_us);
                    m.put(cgroup[1], &x.cgroup_throttled_us);
                }
            }
            TraceEvent::CpuLimits(x) => {
                line(x, &[]);
                m.put("cpus_available", &x.cpus_available());
            }
            _ => unreachable!("not a host sampler event"),
        }
    }
}

impl EventExporter for Jsonl {
    fn begin_trace(&mut self, _cx: &TraceContext<'_>, _out: &mut dyn Write) -> io::Result<()> {
        // Ids are the trace's own.
        self.demangled.clear();
        Ok(())
    }

    fn event(
        &mut self,
        cx: &TraceContext<'_>,
        ev: &TraceEvent<'_>,
        out: &mut dyn Write,
    ) -> io::Result<()> {
        // Each family's method writes most kinds as the generic line of the event table's
        // definition, less the fields named, which the arm writes its own way.
        match *ev {
            TraceEvent::Device(_)
            | TraceEvent::Kernel(_)
            | TraceEvent::Memcpy(_)
            | TraceEvent::Memset(_)
            | TraceEvent::Sync(_)
            | TraceEvent::Memory(_)
            | TraceEvent::Api(_) => self.gpu_activity(cx, ev),
            TraceEvent::State { .. }
            | TraceEvent::Dropped { .. }
            | TraceEvent::Clock { .. }
            | TraceEvent::Other(_) => self.collector_record(cx, ev),
            TraceEvent::HostCopy(_)
            | TraceEvent::HostCall(_)
            | TraceEvent::HostAlloc(_)
            | TraceEvent::Nccl(_)
            | TraceEvent::NcclComm(_)
            | TraceEvent::Nvtx(_) => self.host_call(cx, ev),
            TraceEvent::Fact(_)
            | TraceEvent::GpuSample(_)
            | TraceEvent::GpuProcess(_)
            | TraceEvent::GpuEvent(_)
            | TraceEvent::CounterSample(_) => self.gpu_sampler(cx, ev),
            TraceEvent::ThreadCpu(_)
            | TraceEvent::ProcSample(_)
            | TraceEvent::MachineSample(_)
            | TraceEvent::CpuLimits(_) => self.host_sampler(cx, ev),
            // Thread names and Python stacks: the generic line as it is.
            TraceEvent::Thread { tid, name } => {
                let thread = fmt::Event::Thread { tid, name };
                generic(&mut self.line, cx, cx.meta.pid, &thread, &[])
            }
            TraceEvent::PyStack(st) => generic(&mut self.line, cx, cx.meta.pid, st, &[]),
            TraceEvent::CallSite(c) => generic(&mut self.line, cx, cx.meta.pid, c, &[]),
            TraceEvent::PySample(x) => generic(&mut self.line, cx, cx.meta.pid, x, &[]),
        }
        self.line.finish(out)
    }
}
