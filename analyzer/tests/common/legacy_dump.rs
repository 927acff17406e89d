//! The previous `gputrace dump`: every event built as a JSON value, all sorted at once.
//! Kept as the definition of the output the streamed dump must reproduce byte for byte.
#![allow(dead_code)]

use gputrace_analyzer::model::trace::demangle;
use gputrace_analyzer::Trace;
use gputrace_format::{self as fmt, CopyKind, MemKind, SyncKind};
use serde_json::{json, Map, Value};

/// The dump as the previous implementation wrote it.
pub fn legacy_dump(t: &Trace) -> Vec<u8> {
    let mut out = Vec::new();
    for v in legacy_events(t) {
        serde_json::to_writer(&mut out, &v).unwrap();
        out.push(b'\n');
    }
    out
}

fn base(ty: &str, pid: u32, ts: u64, dur: Option<u64>) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("type".into(), json!(ty));
    m.insert("ts_ns".into(), json!(ts));
    if let Some(d) = dur {
        m.insert("dur_ns".into(), json!(d));
    }
    m.insert("pid".into(), json!(pid));
    m
}

fn put(m: &mut Map<String, Value>, pairs: &[(&str, Value)]) {
    for (k, v) in pairs {
        m.insert((*k).to_string(), v.clone());
    }
}

/// Every event of the trace as JSON values, in time order within each kind's table,
/// merged by timestamp.
pub fn legacy_events(t: &Trace) -> Vec<Value> {
    let pid = t.meta.pid;
    let mut out: Vec<(u64, Value)> = Vec::new();
    for d in &t.devices {
        let mut m = base("device", pid, 0, None);
        put(
            &mut m,
            &[
                ("device", json!(d.id)),
                ("name", json!(t.str(d.name))),
                ("sm_count", json!(d.sm_count)),
                ("max_blocks_per_sm", json!(d.max_blocks_per_sm)),
                ("max_threads_per_sm", json!(d.max_threads_per_sm)),
                ("max_warps_per_sm", json!(d.max_warps_per_sm)),
                ("global_memory", json!(d.global_memory)),
                (
                    "compute_capability",
                    json!(format!("{}.{}", d.cc_major, d.cc_minor)),
                ),
            ],
        );
        out.push((0, Value::Object(m)));
    }
    for k in &t.kernels {
        let mut m = base("kernel", pid, k.start, Some(k.end.saturating_sub(k.start)));
        let name = t.str(k.name);
        put(
            &mut m,
            &[
                ("device", json!(k.device)),
                ("stream", json!(k.stream)),
                ("corr", json!(k.corr)),
                ("name", json!(demangle(name))),
                ("mangled", json!(name)),
                ("grid", json!(k.grid)),
                ("block", json!(k.block)),
                ("static_smem", json!(k.static_smem)),
                ("dynamic_smem", json!(k.dynamic_smem)),
                ("registers", json!(k.registers)),
                ("graph_id", json!(k.graph_id)),
            ],
        );
        out.push((k.start, Value::Object(m)));
    }
    for c in &t.memcpys {
        let mut m = base("memcpy", pid, c.start, Some(c.end.saturating_sub(c.start)));
        put(
            &mut m,
            &[
                ("device", json!(c.device)),
                ("stream", json!(c.stream)),
                ("corr", json!(c.corr)),
                ("bytes", json!(c.bytes)),
                ("kind", json!(CopyKind::from_u8(c.copy_kind).name())),
                ("src_kind", json!(MemKind::from_u8(c.src_kind).name())),
                ("dst_kind", json!(MemKind::from_u8(c.dst_kind).name())),
                (
                    "host_memory",
                    json!(gputrace_analyzer::report::summary::copy_class(c)),
                ),
                ("async", json!(c.flags & fmt::MEMCPY_FLAG_ASYNC != 0)),
            ],
        );
        out.push((c.start, Value::Object(m)));
    }
    for s in &t.memsets {
        let mut m = base("memset", pid, s.start, Some(s.end.saturating_sub(s.start)));
        put(
            &mut m,
            &[
                ("device", json!(s.device)),
                ("stream", json!(s.stream)),
                ("corr", json!(s.corr)),
                ("bytes", json!(s.bytes)),
                ("value", json!(s.value)),
                ("memory_kind", json!(MemKind::from_u8(s.mem_kind).name())),
            ],
        );
        out.push((s.start, Value::Object(m)));
    }
    for s in &t.syncs {
        let mut m = base("sync", pid, s.start, Some(s.end.saturating_sub(s.start)));
        if s.stream != u32::MAX {
            m.insert("stream".into(), json!(s.stream));
        }
        put(
            &mut m,
            &[
                ("corr", json!(s.corr)),
                ("kind", json!(SyncKind::from_u8(s.kind).name())),
            ],
        );
        out.push((s.start, Value::Object(m)));
    }
    for a in &t.memory {
        let mut m = base("memory", pid, a.ts, None);
        put(
            &mut m,
            &[
                ("device", json!(a.device)),
                ("corr", json!(a.corr)),
                (
                    "op",
                    json!(if a.op == fmt::MEMORY_OP_FREE {
                        "free"
                    } else {
                        "alloc"
                    }),
                ),
                ("address", json!(a.address)),
                ("bytes", json!(a.bytes)),
                ("memory_kind", json!(MemKind::from_u8(a.mem_kind).name())),
            ],
        );
        out.push((a.ts, Value::Object(m)));
    }
    for a in &t.apis {
        let mut m = base("api", pid, a.start, Some(a.end.saturating_sub(a.start)));
        put(
            &mut m,
            &[
                ("tid", json!(a.tid)),
                ("corr", json!(a.corr)),
                ("name", json!(t.str(a.name))),
                (
                    "domain",
                    json!(if a.domain == fmt::DOMAIN_DRIVER {
                        "driver"
                    } else {
                        "runtime"
                    }),
                ),
                ("cbid", json!(a.cbid)),
                ("bytes", json!(a.bytes)),
                ("arg", json!(a.arg)),
                ("result", json!(a.result)),
            ],
        );
        out.push((a.start, Value::Object(m)));
    }
    for (ts, st, reason) in &t.states {
        let mut m = base("state", pid, *ts, None);
        let name = fmt::CollectorState::from_u8(*st)
            .map(|s| s.name())
            .unwrap_or("unknown");
        put(
            &mut m,
            &[("state", json!(name)), ("reason", json!(t.str(*reason)))],
        );
        out.push((*ts, Value::Object(m)));
    }
    for (ts, source, count) in &t.drops {
        let mut m = base("dropped", pid, *ts, None);
        // (A host-samples drop read "unknown" until the names came from the format.)
        let src = fmt::drop_source_name(*source);
        put(&mut m, &[("source", json!(src)), ("count", json!(count))]);
        out.push((*ts, Value::Object(m)));
    }
    for (c, mono, real) in &t.clocks {
        let mut m = base("clock", pid, *real, None);
        put(
            &mut m,
            &[
                ("cupti_ns", json!(c)),
                ("mono_ns", json!(mono)),
                ("real_ns", json!(real)),
            ],
        );
        out.push((*real, Value::Object(m)));
    }
    hook_events(t, &mut out);
    env_events(t, &mut out);
    host_sample_events(t, &mut out);
    let mut threads: Vec<_> = t.threads.iter().collect();
    threads.sort();
    for (tid, name) in threads {
        let mut m = base("thread", pid, 0, None);
        put(
            &mut m,
            &[("tid", json!(tid)), ("name", json!(t.str(*name)))],
        );
        out.push((0, Value::Object(m)));
    }
    out.sort_by_key(|(ts, _)| *ts);
    out.into_iter().map(|(_, v)| v).collect()
}

fn hex(v: u64) -> Value {
    json!(format!("{v:#018x}"))
}

/// Lines for the environment events.
fn env_events(t: &Trace, out: &mut Vec<(u64, Value)>) {
    let pid = t.meta.pid;
    let opt = |m: &mut Map<String, Value>, k: &str, v: u32| {
        if v != fmt::ENV_NA {
            m.insert(k.into(), json!(v));
        }
    };
    let opt64 = |m: &mut Map<String, Value>, k: &str, v: u64| {
        if v != fmt::ENV_NA64 {
            m.insert(k.into(), json!(v));
        }
    };
    for f in &t.facts {
        let mut m = base("fact", pid, f.ts, None);
        if f.device != fmt::FACT_HOST {
            m.insert("device".into(), json!(f.device));
        }
        put(
            &mut m,
            &[
                ("key", json!(t.str(f.key))),
                ("value", json!(t.str(f.value))),
            ],
        );
        out.push((f.ts, Value::Object(m)));
    }
    for g in &t.gpu_samples {
        let mut m = base("gpu_sample", pid, g.ts, None);
        m.insert("device".into(), json!(g.device));
        opt(&mut m, "sm_clock_mhz", g.sm_clock_mhz);
        opt(&mut m, "sm_clock_max_mhz", g.sm_clock_max_mhz);
        opt(&mut m, "mem_clock_mhz", g.mem_clock_mhz);
        opt(&mut m, "mem_clock_max_mhz", g.mem_clock_max_mhz);
        if g.clock_reasons != fmt::ENV_NA64 {
            m.insert(
                "clock_reasons".into(),
                json!(fmt::clock_reason_names(g.clock_reasons)),
            );
            m.insert("clock_reasons_mask".into(), json!(g.clock_reasons));
        }
        opt(&mut m, "power_mw", g.power_mw);
        opt(&mut m, "power_limit_mw", g.power_limit_mw);
        opt(&mut m, "temperature_c", g.temperature_c);
        opt(&mut m, "gpu_util_pct", g.gpu_util_pct);
        opt(&mut m, "mem_util_pct", g.mem_util_pct);
        opt64(&mut m, "mem_used", g.mem_used);
        opt64(&mut m, "mem_total", g.mem_total);
        opt(&mut m, "pcie_gen", g.pcie_gen);
        opt(&mut m, "pcie_gen_max", g.pcie_gen_max);
        opt(&mut m, "pcie_width", g.pcie_width);
        opt(&mut m, "pcie_width_max", g.pcie_width_max);
        opt(&mut m, "pcie_tx_kbs", g.pcie_tx_kbs);
        opt(&mut m, "pcie_rx_kbs", g.pcie_rx_kbs);
        out.push((g.ts, Value::Object(m)));
    }
    for p in &t.gpu_processes {
        let mut m = base("gpu_process", pid, p.ts, None);
        put(
            &mut m,
            &[
                ("device", json!(p.device)),
                // The process on the GPU, which need not be the traced one.
                ("pid", json!(p.pid)),
                ("name", json!(t.str(p.name))),
            ],
        );
        opt64(&mut m, "used_memory", p.used_memory);
        opt(&mut m, "sm_pct", p.sm_pct);
        opt(&mut m, "mem_pct", p.mem_pct);
        put(
            &mut m,
            &[
                ("listed", json!(p.flags & fmt::GPU_PROC_LISTED != 0)),
                ("self", json!(p.flags & fmt::GPU_PROC_SELF != 0)),
            ],
        );
        out.push((p.ts, Value::Object(m)));
    }
    for e in &t.gpu_events {
        let mut m = base("gpu_event", pid, e.ts, None);
        put(
            &mut m,
            &[
                ("device", json!(e.device)),
                ("kind", json!(fmt::gpu_event_name(e.kind))),
            ],
        );
        let k = if e.kind == fmt::GPU_EVENT_XID {
            "xid"
        } else {
            "count"
        };
        m.insert(k.into(), json!(e.data));
        out.push((e.ts, Value::Object(m)));
    }
}

/// Lines for the symbol hooks' events.
fn hook_events(t: &Trace, out: &mut Vec<(u64, Value)>) {
    let pid = t.meta.pid;
    for c in &t.host_copies {
        let mut m = base(
            "host_copy",
            pid,
            c.start,
            Some(c.end.saturating_sub(c.start)),
        );
        put(
            &mut m,
            &[
                ("tid", json!(c.tid)),
                ("stream", json!(c.stream)),
                ("api", json!(fmt::hostcopy_api_name(c.api))),
                ("kind", json!(CopyKind::from_u8(c.copy_kind).name())),
                ("bytes", json!(c.bytes)),
                ("host_memory", json!(MemKind::from_u8(c.host_kind).name())),
                (
                    "host_memory_source",
                    json!(gputrace_analyzer::report::summary::class_source_name(
                        c.source
                    )),
                ),
                ("async", json!(c.flags & fmt::HOSTCOPY_FLAG_ASYNC != 0)),
                (
                    "cupti_api",
                    json!(c.flags & fmt::HOSTCOPY_FLAG_CUPTI_API != 0),
                ),
                ("dst", json!(c.dst)),
                ("src", json!(c.src)),
                ("result", json!(c.result)),
            ],
        );
        if c.dst_device != u32::MAX || c.src_device != u32::MAX {
            put(
                &mut m,
                &[
                    ("dst_device", json!(c.dst_device)),
                    ("src_device", json!(c.src_device)),
                ],
            );
        }
        out.push((c.start, Value::Object(m)));
    }
    for c in &t.host_calls {
        let mut m = base(
            "host_call",
            pid,
            c.start,
            Some(c.end.saturating_sub(c.start)),
        );
        let (name, class) = fmt::hostcall_info(c.call);
        put(
            &mut m,
            &[
                ("tid", json!(c.tid)),
                ("stream", json!(c.stream)),
                ("name", json!(name)),
                ("result", json!(c.result)),
            ],
        );
        let extra = match class {
            fmt::HostCallClass::Sync => [("event", json!(c.arg0)), ("flags", json!(c.arg1))],
            fmt::HostCallClass::Memset => {
                put(&mut m, &[("value", json!(c.arg2))]);
                [("bytes", json!(c.arg0)), ("ptr", json!(c.arg1))]
            }
            _ => {
                put(&mut m, &[("block_threads", json!(c.arg2))]);
                [("function", json!(c.arg0)), ("grid_blocks", json!(c.arg1))]
            }
        };
        put(&mut m, &extra);
        let class = match class {
            fmt::HostCallClass::Sync => "sync",
            fmt::HostCallClass::Memset => "memset",
            fmt::HostCallClass::Launch => "launch",
            fmt::HostCallClass::Unknown => "unknown",
        };
        put(&mut m, &[("class", json!(class))]);
        out.push((c.start, Value::Object(m)));
    }
    for a in &t.host_allocs {
        let mut m = base(
            "host_alloc",
            pid,
            a.start,
            Some(a.end.saturating_sub(a.start)),
        );
        put(
            &mut m,
            &[
                ("tid", json!(a.tid)),
                ("op", json!(fmt::hostalloc_op_name(a.op))),
                ("ptr", json!(a.ptr)),
                ("bytes", json!(a.bytes)),
                ("flags", json!(a.flags)),
                ("result", json!(a.result)),
            ],
        );
        out.push((a.start, Value::Object(m)));
    }
    for n in &t.nccl {
        let mut m = base("nccl", pid, n.start, Some(n.end.saturating_sub(n.start)));
        put(
            &mut m,
            &[
                ("tid", json!(n.tid)),
                ("stream", json!(n.stream)),
                ("op", json!(fmt::nccl_op_name(n.op))),
                ("count", json!(n.count)),
                ("bytes", json!(n.bytes)),
                ("datatype", json!(fmt::nccl_datatype(n.datatype).1)),
                ("redop", json!(fmt::nccl_redop_name(n.redop))),
                ("comm_id", hex(n.comm_id)),
                ("rank", json!(n.rank)),
                ("nranks", json!(n.nranks)),
                ("seq", json!(n.seq)),
                ("result", json!(n.result)),
            ],
        );
        match n.op {
            fmt::NCCL_REDUCE | fmt::NCCL_BROADCAST => {
                put(&mut m, &[("root", json!(n.peer_or_root))])
            }
            fmt::NCCL_SEND | fmt::NCCL_RECV => put(&mut m, &[("peer", json!(n.peer_or_root))]),
            _ => {}
        }
        out.push((n.start, Value::Object(m)));
    }
    for n in &t.nccl_comms {
        let mut m = base(
            "nccl_comm",
            pid,
            n.start,
            Some(n.end.saturating_sub(n.start)),
        );
        put(
            &mut m,
            &[
                ("tid", json!(n.tid)),
                ("op", json!(fmt::nccl_comm_op_name(n.op))),
                ("comm", hex(n.comm)),
                ("comm_id", hex(n.comm_id)),
                ("parent_id", hex(n.parent_id)),
                ("rank", json!(n.rank)),
                ("nranks", json!(n.nranks)),
                ("color", json!(n.color)),
                ("result", json!(n.result)),
            ],
        );
        out.push((n.start, Value::Object(m)));
    }
    for n in &t.nvtx {
        let mut m = base("nvtx", pid, n.ts, None);
        put(
            &mut m,
            &[
                ("tid", json!(n.tid)),
                ("kind", json!(fmt::nvtx_kind_name(n.kind))),
                ("id", json!(n.id)),
                ("text", json!(t.str(n.text))),
                ("truncated", json!(n.flags & fmt::NVTX_FLAG_TRUNCATED != 0)),
            ],
        );
        out.push((n.ts, Value::Object(m)));
    }
}

fn state_char(s: u8) -> Value {
    if s == fmt::STATE_UNKNOWN {
        Value::Null
    } else {
        json!((s as char).to_string())
    }
}

/// Lines for the host sampler's events.
fn host_sample_events(t: &Trace, out: &mut Vec<(u64, Value)>) {
    let pid = t.meta.pid;
    for x in &t.thread_cpu {
        let mut m = base("thread_cpu", pid, x.ts, None);
        put(
            &mut m,
            &[
                ("tid", json!(x.tid)),
                ("cpu_ns", json!(x.cpu_ns)),
                ("wait_ns", json!(x.wait_ns)),
                ("slices", json!(x.slices)),
                ("state", state_char(x.state)),
            ],
        );
        out.push((x.ts, Value::Object(m)));
    }
    for x in &t.proc_samples {
        let mut m = base("proc_sample", pid, x.ts, None);
        let thread = x.flags & fmt::PROC_FLAG_THREAD != 0;
        let role = if thread {
            "thread"
        } else if x.flags & fmt::PROC_FLAG_SELF != 0 {
            "self"
        } else {
            "child"
        };
        m.insert(
            (if thread { "tid" } else { "sample_pid" }).into(),
            json!(x.pid),
        );
        put(
            &mut m,
            &[
                ("ppid", json!(x.ppid)),
                ("comm", json!(t.str(x.comm))),
                ("role", json!(role)),
                ("state", state_char(x.state)),
                ("threads", json!(x.threads)),
                ("cpu_ns", json!(x.cpu_ns)),
            ],
        );
        if !thread && x.flags & fmt::PROC_FLAG_NO_IO == 0 {
            put(
                &mut m,
                &[
                    ("rchar", json!(x.rchar)),
                    ("read_bytes", json!(x.read_bytes)),
                    ("write_bytes", json!(x.write_bytes)),
                ],
            );
        }
        out.push((x.ts, Value::Object(m)));
    }
    for x in &t.machine {
        let mut m = base("machine_sample", pid, x.ts, None);
        put(
            &mut m,
            &[
                ("busy_ns", json!(x.busy_ns)),
                ("idle_ns", json!(x.idle_ns)),
                ("iowait_ns", json!(x.iowait_ns)),
                ("steal_ns", json!(x.steal_ns)),
            ],
        );
        if x.flags & fmt::MACHINE_FLAG_PSI != 0 {
            put(
                &mut m,
                &[
                    ("psi_cpu_some_us", json!(x.psi_cpu_some_us)),
                    ("psi_io_some_us", json!(x.psi_io_some_us)),
                    ("psi_io_full_us", json!(x.psi_io_full_us)),
                ],
            );
        }
        if x.flags & fmt::MACHINE_FLAG_CGROUP != 0 {
            put(
                &mut m,
                &[
                    ("cgroup_usage_us", json!(x.cgroup_usage_us)),
                    ("cgroup_throttled_us", json!(x.cgroup_throttled_us)),
                ],
            );
        }
        out.push((x.ts, Value::Object(m)));
    }
    for x in &t.cpu_limits {
        let mut m = base("cpu_limits", pid, x.ts, None);
        put(
            &mut m,
            &[
                ("online_cpus", json!(x.online_cpus)),
                ("affinity_cpus", json!(x.affinity_cpus)),
                ("quota_us", json!(x.quota_us)),
                ("period_us", json!(x.period_us)),
                ("cpus_available", json!(x.cpus_available())),
                ("memory_limit", json!(x.memory_limit)),
                ("thread_period_us", json!(x.thread_period_us)),
                ("tree_period_us", json!(x.tree_period_us)),
            ],
        );
        out.push((x.ts, Value::Object(m)));
    }
}
