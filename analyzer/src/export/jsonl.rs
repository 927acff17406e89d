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
//! GPU hardware counters (`GPUTRACE_PM=1`; values the GPU did not give are left out):
//! * `counter_sample`: `device`, `dur_ns`, `sm_active_pct`, `occupancy_pct` (achieved
//!   occupancy), `tensor_active_pct`, `dram_pct` (of peak), `pcie_read_bytes`,
//!   `pcie_write_bytes`, `nvlink_rx_bytes`, `nvlink_tx_bytes` (over the sample).
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

use super::{EventExporter, TraceContext, TraceEvent};
use crate::trace::demangle;
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

    /// An environment value, left out when NVML did not give it.
    fn env(&mut self, key: &'static str, v: u32) {
        if v != fmt::ENV_NA {
            self.put(key, &v);
        }
    }

    fn env64(&mut self, key: &'static str, v: u64) {
        if v != fmt::ENV_NA64 {
            self.put(key, &v);
        }
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
/// left out).
fn generic(m: &mut Line, cx: &TraceContext<'_>, pid: u32, ev: &fmt::Event) {
    let (ts, end) = ev.span().unwrap_or_default();
    m.start(ev.name(), pid, ts, end.map(|e| e.saturating_sub(ts)));
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

fn dur(start: u64, end: u64) -> Option<u64> {
    Some(end.saturating_sub(start))
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
        let m = &mut self.line;
        let pid = cx.meta.pid;
        match *ev {
            TraceEvent::Device(d) => {
                m.start("device", pid, 0, None);
                m.put("device", &d.id);
                m.put("name", cx.str(d.name));
                m.put("sm_count", &d.sm_count);
                m.put("max_blocks_per_sm", &d.max_blocks_per_sm);
                m.put("max_threads_per_sm", &d.max_threads_per_sm);
                m.put("max_warps_per_sm", &d.max_warps_per_sm);
                m.put("global_memory", &d.global_memory);
                m.put(
                    "compute_capability",
                    &format!("{}.{}", d.cc_major, d.cc_minor),
                );
            }
            TraceEvent::Kernel(k) => {
                m.start("kernel", pid, k.start, dur(k.start, k.end));
                let name = cx.str(k.name);
                m.put("device", &k.device);
                m.put("stream", &k.stream);
                m.put("corr", &k.corr);
                let pretty = self
                    .demangled
                    .entry(k.name)
                    .or_insert_with(|| demangle(name));
                m.put("name", pretty.as_str());
                m.put("mangled", name);
                m.put("grid", &k.grid);
                m.put("block", &k.block);
                m.put("static_smem", &k.static_smem);
                m.put("dynamic_smem", &k.dynamic_smem);
                m.put("registers", &k.registers);
                m.put("graph_id", &k.graph_id);
            }
            TraceEvent::Memcpy(c) => {
                m.start("memcpy", pid, c.start, dur(c.start, c.end));
                m.put("device", &c.device);
                m.put("stream", &c.stream);
                m.put("corr", &c.corr);
                m.put("bytes", &c.bytes);
                m.put("kind", CopyKind::from_u8(c.copy_kind).name());
                m.put("src_kind", MemKind::from_u8(c.src_kind).name());
                m.put("dst_kind", MemKind::from_u8(c.dst_kind).name());
                m.put("host_memory", crate::summary::copy_class(c));
                m.put("async", &(c.flags & fmt::MEMCPY_FLAG_ASYNC != 0));
            }
            TraceEvent::Memset(s) => {
                m.start("memset", pid, s.start, dur(s.start, s.end));
                m.put("device", &s.device);
                m.put("stream", &s.stream);
                m.put("corr", &s.corr);
                m.put("bytes", &s.bytes);
                m.put("value", &s.value);
                m.put("memory_kind", MemKind::from_u8(s.mem_kind).name());
            }
            TraceEvent::Sync(s) => {
                m.start("sync", pid, s.start, dur(s.start, s.end));
                if s.stream != u32::MAX {
                    m.put("stream", &s.stream);
                }
                m.put("corr", &s.corr);
                m.put("kind", SyncKind::from_u8(s.kind).name());
            }
            TraceEvent::Memory(a) => {
                m.start("memory", pid, a.ts, None);
                m.put("device", &a.device);
                m.put("corr", &a.corr);
                let op = if a.op == fmt::MEMORY_OP_FREE {
                    "free"
                } else {
                    "alloc"
                };
                m.put("op", op);
                m.put("address", &a.address);
                m.put("bytes", &a.bytes);
                m.put("memory_kind", MemKind::from_u8(a.mem_kind).name());
            }
            TraceEvent::Api(a) => {
                m.start("api", pid, a.start, dur(a.start, a.end));
                m.put("tid", &a.tid);
                m.put("corr", &a.corr);
                m.put("name", cx.str(a.name));
                let domain = if a.domain == fmt::DOMAIN_DRIVER {
                    "driver"
                } else {
                    "runtime"
                };
                m.put("domain", domain);
                m.put("cbid", &a.cbid);
                m.put("bytes", &a.bytes);
                m.put("arg", &a.arg);
                m.put("result", &a.result);
            }
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
                let src = match source {
                    fmt::DROP_CUPTI => "cupti",
                    fmt::DROP_RING => "ring",
                    fmt::DROP_BUFFER_POOL => "buffer_pool",
                    _ => "unknown",
                };
                m.put("source", src);
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
            TraceEvent::HostCopy(c) => {
                m.start("host_copy", pid, c.start, dur(c.start, c.end));
                m.put("tid", &c.tid);
                m.put("stream", &c.stream);
                m.put("api", fmt::hostcopy_api_name(c.api));
                m.put("kind", CopyKind::from_u8(c.copy_kind).name());
                m.put("bytes", &c.bytes);
                m.put("host_memory", MemKind::from_u8(c.host_kind).name());
                m.put(
                    "host_memory_source",
                    crate::summary::class_source_name(c.source),
                );
                m.put("async", &(c.flags & fmt::HOSTCOPY_FLAG_ASYNC != 0));
                m.put("cupti_api", &(c.flags & fmt::HOSTCOPY_FLAG_CUPTI_API != 0));
                m.put("dst", &c.dst);
                m.put("src", &c.src);
                m.put("result", &c.result);
                if c.dst_device != u32::MAX || c.src_device != u32::MAX {
                    m.put("dst_device", &c.dst_device);
                    m.put("src_device", &c.src_device);
                }
            }
            TraceEvent::HostCall(c) => {
                m.start("host_call", pid, c.start, dur(c.start, c.end));
                let (name, class) = fmt::hostcall_info(c.call);
                m.put("tid", &c.tid);
                m.put("stream", &c.stream);
                m.put("name", name);
                m.put("result", &c.result);
                match class {
                    fmt::HostCallClass::Sync => {
                        m.put("event", &c.arg0);
                        m.put("flags", &c.arg1);
                    }
                    fmt::HostCallClass::Memset => {
                        m.put("value", &c.arg2);
                        m.put("bytes", &c.arg0);
                        m.put("ptr", &c.arg1);
                    }
                    _ => {
                        m.put("block_threads", &c.arg2);
                        m.put("function", &c.arg0);
                        m.put("grid_blocks", &c.arg1);
                    }
                }
                let class = match class {
                    fmt::HostCallClass::Sync => "sync",
                    fmt::HostCallClass::Memset => "memset",
                    fmt::HostCallClass::Launch => "launch",
                    fmt::HostCallClass::Unknown => "unknown",
                };
                m.put("class", class);
            }
            TraceEvent::HostAlloc(a) => {
                m.start("host_alloc", pid, a.start, dur(a.start, a.end));
                m.put("tid", &a.tid);
                m.put("op", fmt::hostalloc_op_name(a.op));
                m.put("ptr", &a.ptr);
                m.put("bytes", &a.bytes);
                m.put("flags", &a.flags);
                m.put("result", &a.result);
            }
            TraceEvent::Nccl(n) => {
                m.start("nccl", pid, n.start, dur(n.start, n.end));
                m.put("tid", &n.tid);
                m.put("stream", &n.stream);
                m.put("op", fmt::nccl_op_name(n.op));
                m.put("count", &n.count);
                m.put("bytes", &n.bytes);
                m.put("datatype", fmt::nccl_datatype(n.datatype).1);
                m.put("redop", fmt::nccl_redop_name(n.redop));
                m.hex("comm_id", n.comm_id);
                m.put("rank", &n.rank);
                m.put("nranks", &n.nranks);
                m.put("seq", &n.seq);
                m.put("result", &n.result);
                match n.op {
                    fmt::NCCL_REDUCE | fmt::NCCL_BROADCAST => m.put("root", &n.peer_or_root),
                    fmt::NCCL_SEND | fmt::NCCL_RECV => m.put("peer", &n.peer_or_root),
                    _ => {}
                }
            }
            TraceEvent::NcclComm(n) => {
                m.start("nccl_comm", pid, n.start, dur(n.start, n.end));
                m.put("tid", &n.tid);
                m.put("op", fmt::nccl_comm_op_name(n.op));
                m.hex("comm", n.comm);
                m.hex("comm_id", n.comm_id);
                m.hex("parent_id", n.parent_id);
                m.put("rank", &n.rank);
                m.put("nranks", &n.nranks);
                m.put("color", &n.color);
                m.put("result", &n.result);
            }
            TraceEvent::Nvtx(n) => {
                m.start("nvtx", pid, n.ts, None);
                m.put("tid", &n.tid);
                m.put("kind", fmt::nvtx_kind_name(n.kind));
                m.put("id", &n.id);
                m.put("text", cx.str(n.text));
                m.put("truncated", &(n.flags & fmt::NVTX_FLAG_TRUNCATED != 0));
            }
            TraceEvent::Fact(f) => {
                m.start("fact", pid, f.ts, None);
                if f.device != fmt::FACT_HOST {
                    m.put("device", &f.device);
                }
                m.put("key", cx.str(f.key));
                m.put("value", cx.str(f.value));
            }
            TraceEvent::GpuSample(g) => {
                m.start("gpu_sample", pid, g.ts, None);
                m.put("device", &g.device);
                m.env("sm_clock_mhz", g.sm_clock_mhz);
                m.env("sm_clock_max_mhz", g.sm_clock_max_mhz);
                m.env("mem_clock_mhz", g.mem_clock_mhz);
                m.env("mem_clock_max_mhz", g.mem_clock_max_mhz);
                if g.clock_reasons != fmt::ENV_NA64 {
                    m.put("clock_reasons", &fmt::clock_reason_names(g.clock_reasons));
                    m.put("clock_reasons_mask", &g.clock_reasons);
                }
                m.env("power_mw", g.power_mw);
                m.env("power_limit_mw", g.power_limit_mw);
                m.env("temperature_c", g.temperature_c);
                m.env("gpu_util_pct", g.gpu_util_pct);
                m.env("mem_util_pct", g.mem_util_pct);
                m.env64("mem_used", g.mem_used);
                m.env64("mem_total", g.mem_total);
                m.env("pcie_gen", g.pcie_gen);
                m.env("pcie_gen_max", g.pcie_gen_max);
                m.env("pcie_width", g.pcie_width);
                m.env("pcie_width_max", g.pcie_width_max);
                m.env("pcie_tx_kbs", g.pcie_tx_kbs);
                m.env("pcie_rx_kbs", g.pcie_rx_kbs);
            }
            TraceEvent::GpuProcess(p) => {
                // `pid` is the process on the GPU, which need not be the traced one.
                m.start("gpu_process", p.pid, p.ts, None);
                m.put("device", &p.device);
                m.put("name", cx.str(p.name));
                m.env64("used_memory", p.used_memory);
                m.env("sm_pct", p.sm_pct);
                m.env("mem_pct", p.mem_pct);
                m.put("listed", &(p.flags & fmt::GPU_PROC_LISTED != 0));
                m.put("self", &(p.flags & fmt::GPU_PROC_SELF != 0));
            }
            TraceEvent::GpuEvent(e) => {
                m.start("gpu_event", pid, e.ts, None);
                m.put("device", &e.device);
                m.put("kind", fmt::gpu_event_name(e.kind));
                let k = if e.kind == fmt::GPU_EVENT_XID {
                    "xid"
                } else {
                    "count"
                };
                m.put(k, &e.data);
            }
            TraceEvent::ThreadCpu(x) => {
                m.start("thread_cpu", pid, x.ts, None);
                m.put("tid", &x.tid);
                m.put("cpu_ns", &x.cpu_ns);
                m.put("wait_ns", &x.wait_ns);
                m.put("slices", &x.slices);
                m.state("state", x.state);
            }
            TraceEvent::ProcSample(x) => {
                m.start("proc_sample", pid, x.ts, None);
                let thread = x.flags & fmt::PROC_FLAG_THREAD != 0;
                let role = if thread {
                    "thread"
                } else if x.flags & fmt::PROC_FLAG_SELF != 0 {
                    "self"
                } else {
                    "child"
                };
                m.put(if thread { "tid" } else { "sample_pid" }, &x.pid);
                m.put("ppid", &x.ppid);
                m.put("comm", cx.str(x.comm));
                m.put("role", role);
                m.state("state", x.state);
                m.put("threads", &x.threads);
                m.put("cpu_ns", &x.cpu_ns);
                if !thread && x.flags & fmt::PROC_FLAG_NO_IO == 0 {
                    m.put("rchar", &x.rchar);
                    m.put("read_bytes", &x.read_bytes);
                    m.put("write_bytes", &x.write_bytes);
                }
            }
            TraceEvent::MachineSample(x) => {
                m.start("machine_sample", pid, x.ts, None);
                m.put("busy_ns", &x.busy_ns);
                m.put("idle_ns", &x.idle_ns);
                m.put("iowait_ns", &x.iowait_ns);
                m.put("steal_ns", &x.steal_ns);
                if x.flags & fmt::MACHINE_FLAG_PSI != 0 {
                    m.put("psi_cpu_some_us", &x.psi_cpu_some_us);
                    m.put("psi_io_some_us", &x.psi_io_some_us);
                    m.put("psi_io_full_us", &x.psi_io_full_us);
                }
                if x.flags & fmt::MACHINE_FLAG_CGROUP != 0 {
                    m.put("cgroup_usage_us", &x.cgroup_usage_us);
                    m.put("cgroup_throttled_us", &x.cgroup_throttled_us);
                }
            }
            TraceEvent::CpuLimits(x) => {
                m.start("cpu_limits", pid, x.ts, None);
                m.put("online_cpus", &x.online_cpus);
                m.put("affinity_cpus", &x.affinity_cpus);
                m.put("quota_us", &x.quota_us);
                m.put("period_us", &x.period_us);
                m.put("cpus_available", &x.cpus_available());
                m.put("memory_limit", &x.memory_limit);
                m.put("thread_period_us", &x.thread_period_us);
                m.put("tree_period_us", &x.tree_period_us);
            }
            TraceEvent::CounterSample(x) => {
                m.start(
                    "counter_sample",
                    pid,
                    x.start,
                    Some(x.end.saturating_sub(x.start)),
                );
                m.put("device", &x.device);
                let pct = |v: u32| (v != fmt::ENV_NA).then(|| v as f64 / 100.0);
                for (k, v) in [
                    ("sm_active_pct", x.sm_active),
                    ("occupancy_pct", x.occupancy),
                    ("tensor_active_pct", x.tensor_active),
                    ("dram_pct", x.dram),
                ] {
                    if let Some(p) = pct(v) {
                        m.put(k, &p);
                    }
                }
                m.env64("pcie_read_bytes", x.pcie_read_bytes);
                m.env64("pcie_write_bytes", x.pcie_write_bytes);
                m.env64("nvlink_rx_bytes", x.nvlink_rx_bytes);
                m.env64("nvlink_tx_bytes", x.nvlink_tx_bytes);
            }
            TraceEvent::Thread { tid, name } => {
                generic(m, cx, pid, &fmt::Event::Thread { tid, name })
            }
            TraceEvent::PyStack(st) => generic(m, cx, pid, &fmt::Event::PyStack(st.clone())),
            TraceEvent::CallSite(c) => generic(m, cx, pid, &fmt::Event::CallSite(c.clone())),
            TraceEvent::PySample(x) => generic(m, cx, pid, &fmt::Event::PySample(x.clone())),
            TraceEvent::Other(e) => generic(m, cx, pid, e),
        }
        m.finish(out)
    }
}
