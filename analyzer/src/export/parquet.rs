//! Parquet tables of a job, for SQL over many runs and ranks (DuckDB, pandas, Spark):
//! one file per table in the output directory, every row with the process's `rank`
//! (-1 when unknown), `host` and `pid`, times in nanoseconds on the job's time base.
//!
//! | table | one row per |
//! | --- | --- |
//! | `kernels` | kernel |
//! | `copies` | copy or memset (`kind`: HtoD, DtoH, ..., memset) |
//! | `api_calls` | CUDA API call (`source` cupti), or runtime call seen only by the symbol hooks (`source` hooks) |
//! | `nccl_calls` | NCCL collective, point-to-point call or communicator call |
//! | `nvtx` | NVTX range (push/pop or start/end) or mark |
//! | `idle_gaps` | idle piece of a device, with its `cause` and `phase` (start-up, steady, tail) |
//! | `steps` | training step |
//! | `gpu_samples` | NVML sample of a GPU (NVML's index; -1 where NVML gave no reading), the process's own or an environment file's |
//! | `counters` | value of a sampler's percentage counter: a sampled thread's or a process's CPU %, the machine's CPU busy and iowait %, another process's SM % of a GPU (`track` thread, process, machine or gpu; `id` its tid, pid or NVML index, -1 for the machine) |
//! | `gpu_metrics` | GPU counter sample over `start_ns..end_ns` (NVML GPM from `gputrace run`/`attach`, or CUPTI PM in older traces): `device` (the process's CUDA ordinal), `instance` (MIG GPU instance, -1 for the whole GPU), `source` (`gpm`, `pm`), each metric in percent of peak and PCIe/NVLink bytes over the sample; -1 where the GPU gave none |
//! | `findings` | finding of the report |
//! | `python_samples` | Python stack sample |
//! | `collectives` | NCCL kernel, with the key that matches it across ranks (`comm`, `seq`; `keyed_by` call or order) |
//! | `processes` | process: its command, how it ended, its steady state and steps, the verdict and top finding |
//!
//! A dataset (`gputrace dataset`) has the same tables, one directory each, partitioned
//! Hive-style by job, host, rank and window ([`Partition`]); there the files have no
//! `rank` and `host` columns (the path holds them).
//!
//! Written with the `parquet` crate's column writers (no Arrow), Snappy-compressed,
//! strings dictionary-encoded, a row group every [`ROW_GROUP`] rows: memory stays at
//! one row group per table however long the trace.

use super::api::{EventExporter, TraceContext, TraceEvent};
use super::overlay::{self, ProcessView, TimelineExporter};
use super::slices::{Nvtx, Shown};
use crate::model::trace::demangle;
use crate::report::view::place_of;
use gputrace_format::{self as fmt, CopyKind, MemKind};
use parquet::basic::Compression;
use parquet::data_type::{ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Rows per row group.
pub const ROW_GROUP: usize = 1 << 17;

/// A column's type: 64-bit integers (times, counts, ids, flags), strings or doubles
/// (shares in percent).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    I,
    S,
    F,
}

/// Every table: its name and columns (after `rank`, `host`, `pid`).
const TABLES: &[(&str, &[(&str, Kind)])] = &[
    (
        "kernels",
        &[
            ("device", Kind::I),
            ("stream", Kind::I),
            ("start_ns", Kind::I),
            ("end_ns", Kind::I),
            ("dur_ns", Kind::I),
            ("name", Kind::S),
            ("correlation", Kind::I),
            ("grid_x", Kind::I),
            ("grid_y", Kind::I),
            ("grid_z", Kind::I),
            ("block_x", Kind::I),
            ("block_y", Kind::I),
            ("block_z", Kind::I),
            ("registers", Kind::I),
            ("shared_memory", Kind::I),
            ("graph_id", Kind::I),
        ],
    ),
    (
        "copies",
        &[
            ("device", Kind::I),
            ("stream", Kind::I),
            ("start_ns", Kind::I),
            ("end_ns", Kind::I),
            ("dur_ns", Kind::I),
            ("kind", Kind::S),
            ("bytes", Kind::I),
            ("src_memory", Kind::S),
            ("dst_memory", Kind::S),
            ("async", Kind::I),
            ("correlation", Kind::I),
        ],
    ),
    (
        "api_calls",
        &[
            ("tid", Kind::I),
            ("start_ns", Kind::I),
            ("end_ns", Kind::I),
            ("dur_ns", Kind::I),
            ("name", Kind::S),
            ("source", Kind::S),
            ("cbid", Kind::I),
            ("correlation", Kind::I),
            ("bytes", Kind::I),
            ("result", Kind::I),
        ],
    ),
    (
        "nccl_calls",
        &[
            ("tid", Kind::I),
            ("start_ns", Kind::I),
            ("end_ns", Kind::I),
            ("dur_ns", Kind::I),
            ("op", Kind::S),
            ("count", Kind::I),
            ("bytes", Kind::I),
            ("datatype", Kind::S),
            ("redop", Kind::S),
            ("peer_or_root", Kind::I),
            ("comm_id", Kind::S),
            ("comm_rank", Kind::I),
            ("comm_size", Kind::I),
            ("seq", Kind::I),
            ("result", Kind::I),
        ],
    ),
    (
        "nvtx",
        &[
            ("tid", Kind::I),
            ("start_ns", Kind::I),
            ("end_ns", Kind::I),
            ("dur_ns", Kind::I),
            ("text", Kind::S),
            ("kind", Kind::S),
            ("level", Kind::I),
        ],
    ),
    (
        "idle_gaps",
        &[
            ("device", Kind::I),
            ("start_ns", Kind::I),
            ("end_ns", Kind::I),
            ("dur_ns", Kind::I),
            ("cause", Kind::S),
            ("attributed", Kind::I),
            ("phase", Kind::S),
        ],
    ),
    (
        "steps",
        &[
            ("step", Kind::I),
            ("start_ns", Kind::I),
            ("end_ns", Kind::I),
            ("dur_ns", Kind::I),
        ],
    ),
    (
        "gpu_samples",
        &[
            ("device", Kind::I),
            ("ts_ns", Kind::I),
            ("sm_clock_mhz", Kind::I),
            ("mem_clock_mhz", Kind::I),
            ("power_mw", Kind::I),
            ("temperature_c", Kind::I),
            ("gpu_util_pct", Kind::I),
            ("mem_util_pct", Kind::I),
            ("mem_used", Kind::I),
            ("pcie_tx_kbs", Kind::I),
            ("pcie_rx_kbs", Kind::I),
            ("clock_reasons", Kind::I),
        ],
    ),
    (
        "counters",
        &[
            ("track", Kind::S),
            ("id", Kind::I),
            ("name", Kind::S),
            ("ts_ns", Kind::I),
            ("value", Kind::F),
        ],
    ),
    (
        "findings",
        &[
            ("id", Kind::S),
            ("severity", Kind::S),
            ("title", Kind::S),
            ("at_stake_ns", Kind::I),
            ("at_stake_pct", Kind::S),
            ("summary", Kind::S),
            ("fix", Kind::S),
        ],
    ),
    (
        "gpu_metrics",
        &[
            ("device", Kind::I),
            ("instance", Kind::I),
            ("source", Kind::S),
            ("start_ns", Kind::I),
            ("end_ns", Kind::I),
            ("sm_active_pct", Kind::F),
            ("occupancy_pct", Kind::F),
            ("tensor_active_pct", Kind::F),
            ("dram_pct", Kind::F),
            ("fp64_pct", Kind::F),
            ("fp32_pct", Kind::F),
            ("fp16_pct", Kind::F),
            ("integer_pct", Kind::F),
            ("tensor_dfma_pct", Kind::F),
            ("tensor_hmma_pct", Kind::F),
            ("tensor_imma_pct", Kind::F),
            ("pcie_read_bytes", Kind::I),
            ("pcie_write_bytes", Kind::I),
            ("nvlink_rx_bytes", Kind::I),
            ("nvlink_tx_bytes", Kind::I),
        ],
    ),
    (
        "python_samples",
        &[
            ("tid", Kind::I),
            ("ts_ns", Kind::I),
            ("file", Kind::S),
            ("line", Kind::I),
            ("function", Kind::S),
            ("user_code", Kind::I),
            ("innermost_file", Kind::S),
            ("innermost_line", Kind::I),
            ("innermost_function", Kind::S),
            ("stack_id", Kind::I),
            ("depth", Kind::I),
        ],
    ),
    (
        "collectives",
        &[
            ("comm", Kind::S),
            ("seq", Kind::I),
            ("keyed_by", Kind::S),
            ("name", Kind::S),
            ("start_ns", Kind::I),
            ("end_ns", Kind::I),
            ("dur_ns", Kind::I),
        ],
    ),
    (
        "processes",
        &[
            ("command", Kind::S),
            ("rank_source", Kind::S),
            ("trace", Kind::S),
            ("start_ns", Kind::I),
            ("end_ns", Kind::I),
            ("ended_how", Kind::S),
            ("ended_detail", Kind::S),
            ("ended_status", Kind::I),
            ("ended_normal", Kind::I),
            ("damaged", Kind::I),
            ("steady_start_ns", Kind::I),
            ("steady_end_ns", Kind::I),
            ("steady_busy_pct", Kind::F),
            ("steps", Kind::I),
            ("step_ns_median", Kind::I),
            ("kernels", Kind::I),
            ("kernel_ns", Kind::I),
            ("verdict", Kind::S),
            ("top_finding", Kind::S),
        ],
    ),
];

const KERNELS: usize = 0;
const COPIES: usize = 1;
const API: usize = 2;
const NCCL: usize = 3;
const NVTX: usize = 4;
const IDLE: usize = 5;
const STEPS: usize = 6;
const SAMPLES: usize = 7;
const COUNTERS: usize = 8;
const FINDINGS: usize = 9;
const METRICS: usize = 10;
const PYTHON: usize = 11;
const COLLECTIVES: usize = 12;
const PROCESSES: usize = 13;

/// A column's values waiting for the next row group.
enum Col {
    I(Vec<i64>),
    S(Vec<ByteArray>),
    F(Vec<f64>),
}

struct Table {
    name: &'static str,
    path: PathBuf,
    bare: bool,
    w: Option<SerializedFileWriter<File>>,
    cols: Vec<Col>,
    rows: usize,
    /// The column the next value goes to.
    at: usize,
}

fn perr(e: parquet::errors::ParquetError) -> io::Error {
    io::Error::other(e.to_string())
}

impl Table {
    /// The table `name` written to `path`; `bare`: without the `rank` and `host` columns
    /// (a dataset's partition path holds them).
    fn create(
        path: PathBuf,
        name: &'static str,
        cols: &[(&str, Kind)],
        bare: bool,
    ) -> io::Result<Table> {
        let mut schema = if bare {
            format!("message {name} {{ REQUIRED INT64 pid;")
        } else {
            format!(
                "message {name} {{ REQUIRED INT64 rank; REQUIRED BYTE_ARRAY host (UTF8); REQUIRED INT64 pid;"
            )
        };
        for (c, k) in cols {
            match k {
                Kind::I => schema.push_str(&format!(" REQUIRED INT64 {c};")),
                Kind::S => schema.push_str(&format!(" REQUIRED BYTE_ARRAY {c} (UTF8);")),
                Kind::F => schema.push_str(&format!(" REQUIRED DOUBLE {c};")),
            }
        }
        schema.push_str(" }");
        let schema = Arc::new(parse_message_type(&schema).map_err(perr)?);
        let props = Arc::new(
            WriterProperties::builder()
                .set_compression(Compression::SNAPPY)
                .build(),
        );
        let w = SerializedFileWriter::new(super::api::create_private(&path)?, schema, props)
            .map_err(perr)?;
        let mut all = if bare {
            vec![Kind::I]
        } else {
            vec![Kind::I, Kind::S, Kind::I]
        };
        all.extend(cols.iter().map(|c| c.1));
        Ok(Table {
            name,
            path,
            bare,
            w: Some(w),
            cols: all
                .into_iter()
                .map(|k| match k {
                    Kind::I => Col::I(Vec::new()),
                    Kind::S => Col::S(Vec::new()),
                    Kind::F => Col::F(Vec::new()),
                })
                .collect(),
            rows: 0,
            at: 0,
        })
    }

    fn i(&mut self, v: i64) -> &mut Self {
        if let Some(Col::I(c)) = self.cols.get_mut(self.at) {
            c.push(v);
        }
        self.at += 1;
        self
    }

    fn u(&mut self, v: u64) -> &mut Self {
        self.i(v.min(i64::MAX as u64) as i64)
    }

    fn f(&mut self, v: f64) -> &mut Self {
        if let Some(Col::F(c)) = self.cols.get_mut(self.at) {
            c.push(v);
        }
        self.at += 1;
        self
    }

    fn s(&mut self, v: impl Into<ByteArray>) -> &mut Self {
        if let Some(Col::S(c)) = self.cols.get_mut(self.at) {
            c.push(v.into());
        }
        self.at += 1;
        self
    }

    /// The columns every row starts with: rank, host and pid (pid alone in a dataset).
    fn who(&mut self, w: &Who) -> &mut Self {
        if self.bare {
            return self.i(w.pid);
        }
        self.i(w.rank).s(w.host.clone()).i(w.pid)
    }

    /// A span's start, end and length.
    fn span(&mut self, start: u64, end: u64) -> &mut Self {
        let end = end.max(start);
        self.u(start).u(end).u(end - start)
    }

    fn end_row(&mut self) -> io::Result<()> {
        debug_assert_eq!(
            self.at,
            self.cols.len(),
            "{}: a row of the wrong width",
            self.name
        );
        self.at = 0;
        self.rows += 1;
        if self.rows.is_multiple_of(ROW_GROUP) {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the rows held as a row group.
    fn flush(&mut self) -> io::Result<()> {
        let n = match self.cols.first() {
            Some(Col::I(c)) => c.len(),
            _ => 0,
        };
        let Some(w) = self.w.as_mut() else {
            return Ok(());
        };
        if n == 0 {
            return Ok(());
        }
        let mut rg = w.next_row_group().map_err(perr)?;
        let mut i = 0;
        while let Some(mut cw) = rg.next_column().map_err(perr)? {
            match &mut self.cols[i] {
                Col::I(v) => {
                    cw.typed::<Int64Type>()
                        .write_batch(v, None, None)
                        .map_err(perr)?;
                    v.clear();
                }
                Col::F(v) => {
                    cw.typed::<DoubleType>()
                        .write_batch(v, None, None)
                        .map_err(perr)?;
                    v.clear();
                }
                Col::S(v) => {
                    cw.typed::<ByteArrayType>()
                        .write_batch(v, None, None)
                        .map_err(perr)?;
                    v.clear();
                }
            }
            cw.close().map_err(perr)?;
            i += 1;
        }
        rg.close().map_err(perr)?;
        Ok(())
    }

    fn close(&mut self) -> io::Result<PathBuf> {
        self.flush()?;
        if let Some(w) = self.w.take() {
            w.close().map_err(perr)?;
        }
        Ok(self.path.clone())
    }
}

/// The columns that say whose a row is.
#[derive(Clone)]
struct Who {
    rank: i64,
    host: ByteArray,
    pid: i64,
    offset: i64,
}

/// An NVTX range still open: (level or thread, start, text).
type Open = (u32, u64, ByteArray);

/// The Parquet exporter.
pub struct Parquet {
    dir: PathBuf,
    tables: Vec<Table>,
    who: HashMap<usize, Who>,
    cur: usize,
    /// Interned strings of the trace being streamed (kernel names demangled).
    names: HashMap<(bool, u32), ByteArray>,
    /// Open NVTX ranges: per thread (level, start, text); by id (tid, start, text).
    pushed: HashMap<u32, Vec<Open>>,
    started: HashMap<u64, Open>,
    last_ts: u64,
}

impl Parquet {
    /// Writes the tables into `dir` (made).
    pub fn create(dir: &Path) -> io::Result<Parquet> {
        super::api::create_private_dir(dir)?;
        let tables = TABLES
            .iter()
            .map(|(name, cols)| {
                Table::create(dir.join(format!("{name}.parquet")), name, cols, false)
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Parquet::with(dir, tables))
    }

    /// An exporter writing `tables`, its output `dir`.
    fn with(dir: &Path, tables: Vec<Table>) -> Parquet {
        Parquet {
            dir: dir.to_path_buf(),
            tables,
            who: HashMap::new(),
            cur: 0,
            names: HashMap::new(),
            pushed: HashMap::new(),
            started: HashMap::new(),
            last_ts: 0,
        }
    }

    /// Writes one process's tables into a dataset under `root`: each table at
    /// `<root>/<table>/<partition>/part-<pid>.parquet`, without the `rank` and `host`
    /// columns (the partition path holds them). See [`Partition`].
    pub fn create_partition(root: &Path, part: &Partition) -> io::Result<Parquet> {
        let mut tables = Vec::with_capacity(TABLES.len());
        for (name, cols) in TABLES {
            let dir = root.join(name).join(part.path());
            super::api::create_private_dir(&dir)?;
            let file = dir.join(format!("part-{}.parquet", part.pid));
            tables.push(Table::create(file, name, cols, true)?);
        }
        Ok(Parquet::with(root, tables))
    }

    fn who(&self) -> Who {
        self.who.get(&self.cur).cloned().unwrap_or(Who {
            rank: -1,
            host: ByteArray::from(Vec::new()),
            pid: 0,
            offset: 0,
        })
    }

    fn name(&mut self, cx: &TraceContext<'_>, id: u32, kernel: bool) -> ByteArray {
        self.names
            .entry((kernel, id))
            .or_insert_with(|| {
                let s = cx.str(id);
                let text = if kernel { demangle(s) } else { s.to_string() };
                ByteArray::from(text.into_bytes())
            })
            .clone()
    }

    fn nvtx_row(
        &mut self,
        w: &Who,
        tid: u32,
        span: (u64, u64),
        text: ByteArray,
        kind: &str,
        level: i64,
    ) -> io::Result<()> {
        let (s, e) = (
            overlay::shift(span.0, w.offset),
            overlay::shift(span.1, w.offset),
        );
        self.tables[NVTX]
            .who(w)
            .u(tid as u64)
            .span(s, e)
            .s(text)
            .s(kind)
            .i(level)
            .end_row()
    }

    /// Writes the process's row of the `processes` table.
    fn process_row(&mut self, v: &ProcessView<'_>, w: &Who) -> io::Result<()> {
        let p = v.process;
        let at = |rel: u64| v.at(p.trace_start_ns.saturating_add(rel));
        let top = v
            .findings
            .iter()
            .find(|f| f.severity >= crate::report::Severity::Warn)
            .map_or("", |f| f.id.as_str());
        self.tables[PROCESSES]
            .who(w)
            .s(bs(&p.command.join(" ")))
            .s(bs(&p.rank_source))
            .s(bs(&p.path))
            .u(at(0))
            .u(at(p.span_ns))
            .s(p.ended.how)
            .s(bs(&p.ended.detail))
            .i(p.ended.status.map_or(-1, i64::from))
            .i(p.ended.normal as i64)
            .i(p.damage.is_some() as i64)
            .u(at(p.steady.start_ns))
            .u(at(p.steady.end_ns))
            .f(p.steady.busy_pct)
            .u(if p.steps.detected {
                p.steps.count as u64
            } else {
                0
            })
            .u(if p.steps.detected {
                p.steps.step_ns_median
            } else {
                0
            })
            .u(p.kernels.count)
            .u(p.kernels.total_ns)
            .s(bs(v.verdict))
            .s(top)
            .end_row()
    }

    /// Writes the analysis's rows: idle gaps, collectives, steps and findings.
    fn analysis_rows(&mut self, v: &ProcessView<'_>, w: &Who) -> io::Result<()> {
        let tl = v.timeline;
        let phase = |t: u64| {
            if t < tl.steady.0 {
                "startup"
            } else if t < tl.steady.1 {
                "steady"
            } else {
                "tail"
            }
        };
        for p in &tl.idle {
            // Cut at the steady state's bounds, so that a sum over a phase is exact.
            let mut cuts = vec![p.start];
            for b in [tl.steady.0, tl.steady.1] {
                if b > p.start && b < p.end {
                    cuts.push(b);
                }
            }
            cuts.push(p.end);
            for c in cuts.windows(2) {
                self.tables[IDLE]
                    .who(w)
                    .u(p.device as u64)
                    .span(v.at(c[0]), v.at(c[1]))
                    .s(p.cause.id())
                    .i(p.cause.attributed() as i64)
                    .s(phase(c[0]))
                    .end_row()?;
            }
        }
        // Collectives, keyed as the report matches them across ranks: by the NCCL call's
        // communicator (16 hex digits, as nccl_calls.comm_id) and sequence number when the hooks saw the call, else by the
        // kernel's name and its occurrence number.
        for c in &tl.collectives {
            let (comm, seq, by) = match c.call {
                Some((comm, seq)) => (format!("{comm:016x}"), seq, "call"),
                None => (c.name.clone(), c.seq as u64, "order"),
            };
            self.tables[COLLECTIVES]
                .who(w)
                .s(bs(&comm))
                .u(seq)
                .s(by)
                .s(bs(&demangle(&c.name)))
                .span(v.at(c.start), v.at(c.end))
                .end_row()?;
        }
        for (i, b) in tl.steps.windows(2).enumerate() {
            self.tables[STEPS]
                .who(w)
                .u(i as u64)
                .span(v.at(b[0]), v.at(b[1]))
                .end_row()?;
        }
        for f in &v.findings {
            self.tables[FINDINGS]
                .who(w)
                .s(f.id.as_str())
                .s(f.severity.name())
                .s(bs(&f.title))
                .u(f.at_stake_ns)
                .s(bs(&format!("{:.3}", f.at_stake_pct)))
                .s(bs(&f.summary))
                .s(bs(&f.fix))
                .end_row()?;
        }
        Ok(())
    }

    /// Writes the samplers' rows: GPU metrics, NVML samples, counters, Python samples.
    fn sampler_rows(&mut self, v: &ProcessView<'_>, w: &Who) -> io::Result<()> {
        // GPU counter samples, one wide row each.
        for c in &v.trace.counter_samples {
            let t = &mut self.tables[METRICS];
            let instance = if c.instance == fmt::ENV_NA {
                -1
            } else {
                c.instance as i64
            };
            t.who(w)
                .u(c.device as u64)
                .i(instance)
                .s(c.source_name())
                .u(v.at(c.start))
                .u(v.at(c.end));
            for x in c.percentages() {
                t.f(if x == fmt::ENV_NA {
                    -1.0
                } else {
                    x as f64 / 100.0
                });
            }
            for x in [
                c.pcie_read_bytes,
                c.pcie_write_bytes,
                c.nvlink_rx_bytes,
                c.nvlink_tx_bytes,
            ] {
                t.i(if x == fmt::ENV_NA64 { -1 } else { x as i64 });
            }
            t.end_row()?;
        }
        // The samplers' readings, from the loaded trace (with what an environment
        // file gave it).
        {
            let shown = v.trace.gpu_samples.iter().zip(&v.nvml_samples);
            for (g, _) in shown.filter(|x| *x.1) {
                let t = &mut self.tables[SAMPLES];
                t.who(w).u(g.device as u64).u(v.at(g.ts));
                // NVML's readings; -1 where it gave none.
                for what in overlay::Nvml::ALL {
                    t.i(what.of(g).unwrap_or(-1));
                }
                let reasons = if g.clock_reasons == fmt::ENV_NA64 {
                    -1
                } else {
                    g.clock_reasons as i64
                };
                t.i(reasons).end_row()?;
            }
        }
        let mut res = Ok(());
        overlay::sampled_counters(v.trace, &v.nvml_processes, |s, name, ts, val| {
            if res.is_err() {
                return;
            }
            let (track, id) = s.owner();
            res = self.tables[COUNTERS]
                .who(w)
                .s(track)
                .i(id)
                .s(bs(name))
                .u(v.at(ts))
                .f(val)
                .end_row();
        });
        std::mem::replace(&mut res, Ok(()))?;
        // Each Python stack sample with the place it names (as the report tallies them).
        for x in &v.trace.py_samples {
            let Some(st) = v.trace.py_stack(x.stack) else {
                continue;
            };
            let Some((p, user, inner)) = place_of(v.trace, st) else {
                continue;
            };
            let str = |id: u32| bs(v.trace.str(id));
            self.tables[PYTHON]
                .who(w)
                .u(x.tid as u64)
                .u(v.at(x.ts))
                .s(str(p.file))
                .u(p.line as u64)
                .s(str(p.function))
                .u(user as u64)
                .s(str(inner.file))
                .u(inner.line as u64)
                .s(str(inner.function))
                .u(x.stack as u64)
                .u(st.frames.len() as u64)
                .end_row()?;
        }
        Ok(())
    }

    /// Writes the row of a kernel (`kernels`), a copy or a memset (`copies`).
    fn gpu_work_row(
        &mut self,
        cx: &TraceContext<'_>,
        ev: &TraceEvent<'_>,
        w: &Who,
    ) -> io::Result<()> {
        let at = |t: u64| overlay::shift(t, w.offset);
        match *ev {
            TraceEvent::Kernel(k) => {
                let name = self.name(cx, k.name, true);
                self.tables[KERNELS]
                    .who(w)
                    .u(k.device as u64)
                    .u(k.stream as u64)
                    .span(at(k.start), at(k.end))
                    .s(name)
                    .u(k.corr as u64)
                    .u(k.grid[0] as u64)
                    .u(k.grid[1] as u64)
                    .u(k.grid[2] as u64)
                    .u(k.block[0] as u64)
                    .u(k.block[1] as u64)
                    .u(k.block[2] as u64)
                    .u(k.registers as u64)
                    .u(k.static_smem as u64 + k.dynamic_smem as u64)
                    .u(k.graph_id as u64)
                    .end_row()
            }
            TraceEvent::Memcpy(c) => self.tables[COPIES]
                .who(w)
                .u(c.device as u64)
                .u(c.stream as u64)
                .span(at(c.start), at(c.end))
                .s(CopyKind::from_u8(c.copy_kind).name())
                .u(c.bytes)
                .s(MemKind::from_u8(c.src_kind).name())
                .s(MemKind::from_u8(c.dst_kind).name())
                .i((c.flags & fmt::MEMCPY_FLAG_ASYNC != 0) as i64)
                .u(c.corr as u64)
                .end_row(),
            TraceEvent::Memset(m) => self.tables[COPIES]
                .who(w)
                .u(m.device as u64)
                .u(m.stream as u64)
                .span(at(m.start), at(m.end))
                .s("memset")
                .u(m.bytes)
                .s(MemKind::Device.name())
                .s(MemKind::from_u8(m.mem_kind).name())
                .i(1)
                .u(m.corr as u64)
                .end_row(),
            _ => Ok(()),
        }
    }

    /// Writes the row of an API call, a hooked host call or copy, or an NCCL call.
    fn call_row(&mut self, cx: &TraceContext<'_>, ev: &TraceEvent<'_>, w: &Who) -> io::Result<()> {
        let at = |t: u64| overlay::shift(t, w.offset);
        match *ev {
            TraceEvent::Api(a) => {
                let name = self.name(cx, a.name, false);
                self.tables[API]
                    .who(w)
                    .u(a.tid as u64)
                    .span(at(a.start), at(a.end))
                    .s(name)
                    .s("cupti")
                    .u(a.cbid as u64)
                    .u(a.corr as u64)
                    .u(a.bytes)
                    .u(a.result as u64)
                    .end_row()
            }
            TraceEvent::HostCall(c) => self.tables[API]
                .who(w)
                .u(c.tid as u64)
                .span(at(c.start), at(c.end))
                .s(fmt::hostcall_info(c.call).0)
                .s("hooks")
                .i(-1)
                .i(0)
                .i(0)
                .u(c.result as u64)
                .end_row(),
            TraceEvent::HostCopy(c) if c.flags & fmt::HOSTCOPY_FLAG_CUPTI_API == 0 => self.tables
                [API]
                .who(w)
                .u(c.tid as u64)
                .span(at(c.start), at(c.end))
                .s(fmt::hostcopy_api_name(c.api))
                .s("hooks")
                .i(-1)
                .i(0)
                .u(c.bytes)
                .u(c.result as u64)
                .end_row(),
            TraceEvent::Nccl(n) => self.tables[NCCL]
                .who(w)
                .u(n.tid as u64)
                .span(at(n.start), at(n.end))
                .s(fmt::nccl_op_name(n.op))
                .u(n.count)
                .u(n.bytes)
                .s(fmt::nccl_datatype(n.datatype).1)
                .s(fmt::nccl_redop_name(n.redop))
                .i(n.peer_or_root as i64)
                .s(bs(&format!("{:016x}", n.comm_id)))
                .i(n.rank as i64)
                .i(n.nranks as i64)
                .u(n.seq)
                .u(n.result as u64)
                .end_row(),
            TraceEvent::NcclComm(n) => self.tables[NCCL]
                .who(w)
                .u(n.tid as u64)
                .span(at(n.start), at(n.end))
                .s(fmt::nccl_comm_op_name(n.op))
                .i(0)
                .i(0)
                .s("")
                .s("")
                .i(n.color as i64)
                .s(bs(&format!("{:016x}", n.comm_id)))
                .i(n.rank as i64)
                .i(n.nranks as i64)
                .i(0)
                .u(n.result as u64)
                .end_row(),
            _ => Ok(()),
        }
    }

    /// Writes the `nvtx` rows an NVTX call completes, holding the ranges it opens.
    fn nvtx_rows(&mut self, cx: &TraceContext<'_>, ev: &TraceEvent<'_>, w: &Who) -> io::Result<()> {
        match super::slices::describe(cx, ev) {
            Shown::Nvtx(Nvtx::Push { tid, ts, level, .. }) => {
                let text = self.name(cx, nvtx_text(ev), false);
                let st = self.pushed.entry(tid).or_default();
                // A push at a level already open: the pops between were lost.
                if let Some(i) = st.iter().position(|x| x.0 >= level) {
                    let closed = st.split_off(i);
                    for (l, s, t) in closed {
                        self.nvtx_row(w, tid, (s, ts), t, "push_pop", l as i64)?;
                    }
                }
                self.pushed.entry(tid).or_default().push((level, ts, text));
                Ok(())
            }
            Shown::Nvtx(Nvtx::Pop { tid, ts, level }) => {
                let closed = match self.pushed.get_mut(&tid) {
                    Some(st) => match st.iter().position(|x| x.0 >= level) {
                        Some(i) => st.split_off(i),
                        None => Vec::new(),
                    },
                    None => Vec::new(),
                };
                for (l, s, t) in closed.into_iter().rev() {
                    self.nvtx_row(w, tid, (s, ts), t, "push_pop", l as i64)?;
                }
                Ok(())
            }
            Shown::Nvtx(Nvtx::Start { ts, id, .. }) => {
                let text = self.name(cx, nvtx_text(ev), false);
                let tid = nvtx_tid(ev);
                self.started.insert(id, (tid, ts, text));
                Ok(())
            }
            Shown::Nvtx(Nvtx::End { ts, id }) => match self.started.remove(&id) {
                Some((tid, s, t)) => self.nvtx_row(w, tid, (s, ts), t, "start_end", -1),
                None => Ok(()),
            },
            Shown::Nvtx(Nvtx::Mark { tid, ts, .. }) => {
                let text = self.name(cx, nvtx_text(ev), false);
                self.nvtx_row(w, tid, (ts, ts), text, "mark", -1)
            }
            _ => Ok(()),
        }
    }
}

/// The tables' names, in order.
pub fn table_names() -> impl Iterator<Item = &'static str> {
    TABLES.iter().map(|t| t.0)
}

/// Where one process's rows go in a dataset: Hive-style `job=J/host=H/rank=R/window=W`
/// (`rank=-1` when unknown; `window=0` for a whole run, else the window's start in ns).
#[derive(Clone, Debug, PartialEq)]
pub struct Partition {
    pub job: String,
    pub host: String,
    pub rank: i64,
    pub window: u64,
    pub pid: u32,
}

impl Partition {
    /// The partition's relative path, each value escaped as Hive does (`%XX` for `/`,
    /// `=`, `%`, control characters and the like).
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!(
            "job={}/host={}/rank={}/window={}",
            escape(&self.job),
            escape(&self.host),
            self.rank,
            self.window
        ))
    }
}

/// A partition value as a path component: letters, digits, `.`, `_`, `-` and `+` kept,
/// anything else `%XX` (its UTF-8 bytes); empty as Hive's default partition name.
pub fn escape(v: &str) -> String {
    if v.is_empty() {
        return "__HIVE_DEFAULT_PARTITION__".into();
    }
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || b"._-+".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out == "." || out == ".." {
        return out.replace('.', "%2E");
    }
    out
}

fn bs(s: &str) -> ByteArray {
    ByteArray::from(s.as_bytes().to_vec())
}

impl TimelineExporter for Parquet {
    fn process(&mut self, v: &ProcessView<'_>) -> io::Result<()> {
        let w = Who {
            rank: v.process.rank.map_or(-1, |r| r as i64),
            host: bs(&v.process.host),
            pid: v.pid as i64,
            offset: v.offset_ns,
        };
        self.process_row(v, &w)?;
        self.analysis_rows(v, &w)?;
        self.sampler_rows(v, &w)?;
        self.who.insert(v.index, w);
        self.cur = v.index;
        Ok(())
    }

    fn as_events(&mut self) -> &mut dyn EventExporter {
        self
    }

    fn select(&mut self, index: usize) -> io::Result<()> {
        self.cur = index;
        self.names.clear();
        self.pushed.clear();
        self.started.clear();
        self.last_ts = 0;
        Ok(())
    }

    fn close(&mut self) -> io::Result<Vec<PathBuf>> {
        for t in &mut self.tables {
            t.close()?;
        }
        Ok(vec![self.dir.clone()])
    }
}

impl EventExporter for Parquet {
    fn event(
        &mut self,
        cx: &TraceContext<'_>,
        ev: &TraceEvent<'_>,
        _out: &mut dyn Write,
    ) -> io::Result<()> {
        let w = self.who();
        self.last_ts = self.last_ts.max(ev.ts());
        match *ev {
            TraceEvent::Kernel(_) | TraceEvent::Memcpy(_) | TraceEvent::Memset(_) => {
                self.gpu_work_row(cx, ev, &w)
            }
            TraceEvent::Api(_)
            | TraceEvent::HostCall(_)
            | TraceEvent::HostCopy(_)
            | TraceEvent::Nccl(_)
            | TraceEvent::NcclComm(_) => self.call_row(cx, ev, &w),
            TraceEvent::Nvtx(_) => self.nvtx_rows(cx, ev, &w),
            _ => Ok(()),
        }
    }

    fn end_trace(&mut self, _cx: &TraceContext<'_>, _out: &mut dyn Write) -> io::Result<()> {
        // Ranges still open end with the trace.
        let w = self.who();
        let end = self.last_ts;
        let pushed: Vec<(u32, Vec<Open>)> = self.pushed.drain().collect();
        for (tid, st) in pushed {
            for (l, s, t) in st {
                self.nvtx_row(&w, tid, (s, end.max(s)), t, "push_pop", l as i64)?;
            }
        }
        let started: Vec<(u64, Open)> = self.started.drain().collect();
        for (_, (tid, s, t)) in started {
            self.nvtx_row(&w, tid, (s, end.max(s)), t, "start_end", -1)?;
        }
        Ok(())
    }
}

fn nvtx_text(ev: &TraceEvent<'_>) -> u32 {
    match ev {
        TraceEvent::Nvtx(n) => n.text,
        _ => 0,
    }
}

fn nvtx_tid(ev: &TraceEvent<'_>) -> u32 {
    match ev {
        TraceEvent::Nvtx(n) => n.tid,
        _ => 0,
    }
}
