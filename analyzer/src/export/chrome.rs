//! Chrome trace-event JSON in Kineto's dialect (what torch.profiler writes), so that
//! chrome://tracing, Perfetto and Holistic Trace Analysis read it. One file per process:
//! HTA takes a directory with one file per rank, its rank in `distributedInfo`.
//!
//! Kineto's conventions kept: GPU work on pid = device, tid = stream, categories
//! `kernel`, `gpu_memcpy`, `gpu_memset`, `cuda_runtime`, `cuda_driver`,
//! `user_annotation`; `correlation` (and `device`, `stream`) arguments on GPU work and on
//! the calls that launched it, plus `ac2g` flow arrows. Host threads on pid = the
//! process. gputrace's own tracks get tids of their own, named by metadata events: "why
//! idle" (per device; category `gpu_idle`, each idle piece named by its cause), steps,
//! phases, findings, CUDA synchronisation records, the collector. Counters (queue depth,
//! device memory) are `C` events.
//!
//! Times are microseconds after the job's start, with nanoseconds as decimals
//! (`baseTimeNanoseconds` holds the start on the job's time base): absolute
//! nanoseconds do not fit a JSON number's precision.

use super::api::{EventExporter, TraceContext, TraceEvent};
use super::overlay::{self, ProcessView, TimelineExporter};
use super::slices::{self, Arg, Cat, Flow, Name, Nvtx, Shown, Slice, Track};
use crate::model::trace::demangle;
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// Tids of gputrace's own tracks (no real thread has them: above 2^22).
const TID_IDLE: u64 = 0xFFFF_FF00;
const TID_SYNC: u64 = 0xFFFF_FF01;
const TID_COLLECTOR: u64 = 0xFFFF_FF02;
const TID_STEPS: u64 = 0xFFFF_FF03;
const TID_PHASES: u64 = 0xFFFF_FF04;
const TID_FINDINGS: u64 = 0xFFFF_FF05;
/// The Python samples of thread n: `TID_PYTHON + n` (thread ids stay below 2^22).
const TID_PYTHON: u64 = 0x8000_0000;
/// NVML's GPU n: `TID_NVML + n`.
const TID_NVML: u64 = 0xFFFF_FF10;

struct File1 {
    out: BufWriter<File>,
    path: PathBuf,
    pid: u32,
    offset: i64,
    base: u64,
    /// Names as JSON strings, by (kind, id): kernels (demangled), interned strings,
    /// static names (by address).
    names: crate::report::view::FxMap<(u8, usize), Rc<str>>,
    line: Vec<u8>,
    named: std::collections::HashSet<(u64, u64)>,
    nvtx_open: HashMap<u64, (u32, u64)>,
    /// Per thread: the NVTX push levels open.
    nvtx_levels: HashMap<u32, Vec<u32>>,
    last_ts: u64,
    flows: slices::Flows,
}

/// The Chrome JSON exporter.
pub struct Chrome {
    dir: Option<PathBuf>,
    single: PathBuf,
    files: HashMap<usize, File1>,
    cur: usize,
    written: Vec<PathBuf>,
}

impl Chrome {
    /// One process: `out` is the file. Several: `out` is a directory (made), one file
    /// per process in it.
    pub fn create(out: &Path, processes: usize) -> io::Result<Chrome> {
        let dir = if processes > 1 {
            super::api::create_private_dir(out)?;
            Some(out.to_path_buf())
        } else {
            None
        };
        Ok(Chrome {
            dir,
            single: out.to_path_buf(),
            files: HashMap::new(),
            cur: 0,
            written: Vec::new(),
        })
    }

    fn file(&mut self) -> io::Result<&mut File1> {
        self.files
            .get_mut(&self.cur)
            .ok_or_else(|| io::Error::other("no process selected"))
    }

    /// Creates a process's file and writes its header and its process and device names.
    fn open_file(&self, v: &ProcessView<'_>) -> io::Result<File1> {
        let path = match &self.dir {
            Some(d) => d.join(format!(
                "{}.json",
                v.process
                    .label
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                    .collect::<String>()
            )),
            None => self.single.clone(),
        };
        let mut out = BufWriter::with_capacity(1 << 20, super::api::create_private(&path)?);
        let rank = v.process.rank.unwrap_or(v.index as u32);
        // HTA finds the rank with a pattern that wants a space after the colon.
        writeln!(out, "{{\"schemaVersion\": 1,")?;
        writeln!(
            out,
            "\"distributedInfo\": {{\"rank\": {rank}, \"world_size\": {}}},",
            v.world
        )?;
        writeln!(out, "\"baseTimeNanoseconds\": {},", v.job_start_ns)?;
        writeln!(out, "\"displayTimeUnit\": \"ns\",")?;
        let props: Vec<serde_json::Value> = v
            .trace
            .devices
            .iter()
            .map(|d| {
                serde_json::json!({
                    "id": d.id,
                    "name": v.trace.str(d.name),
                    "totalGlobalMem": d.global_memory,
                    "computeMajor": d.cc_major,
                    "computeMinor": d.cc_minor,
                    "numSms": d.sm_count,
                    "maxThreadsPerMultiprocessor": d.max_threads_per_sm,
                    "regsPerMultiprocessor": d.max_regs_per_sm,
                    "sharedMemPerMultiprocessor": d.max_smem_per_sm,
                })
            })
            .collect();
        writeln!(
            out,
            "\"deviceProperties\": {},",
            serde_json::to_string(&props).unwrap_or_else(|_| "[]".into())
        )?;
        writeln!(out, "\"traceEvents\": [")?;
        let mut f = File1 {
            out,
            path: path.clone(),
            pid: v.pid,
            offset: v.offset_ns,
            base: v.job_start_ns,
            names: Default::default(),
            line: Vec::with_capacity(512),
            named: Default::default(),
            nvtx_open: HashMap::new(),
            nvtx_levels: HashMap::new(),
            last_ts: 0,
            flows: slices::Flows::default(),
        };
        let pname = v.display_name();
        let _ = write!(
            f.line,
            r#"{{"ph":"M","name":"process_name","pid":{},"tid":0,"args":{{"name":{}}}}}"#,
            v.pid,
            json_str(&pname)
        );
        f.emit()?;
        for d in &v.trace.devices {
            // Name the device's pid with its model.
            f.name_track(Track::Idle(d.id), Some(v.trace.str(d.name)))?;
        }
        Ok(f)
    }
}

/// Microseconds after `base`, with three decimals (written without allocating).
fn us(ts: u64, base: u64) -> Us {
    Us(ts.saturating_sub(base))
}

struct Us(u64);

impl std::fmt::Display for Us {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1000, self.0 % 1000)
    }
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

impl File1 {
    fn pid_tid(&self, t: Track) -> (u64, u64) {
        let pid = self.pid as u64;
        match t {
            Track::Stream { device, stream } => (device as u64, stream as u64),
            Track::Idle(device) => (device as u64, TID_IDLE),
            Track::Thread(tid) | Track::Nvtx(tid) | Track::Nccl(tid) => (pid, tid as u64),
            Track::Sync => (pid, TID_SYNC),
            Track::Collector => (pid, TID_COLLECTOR),
            Track::Steps => (pid, TID_STEPS),
            Track::Phases => (pid, TID_PHASES),
            Track::Findings => (pid, TID_FINDINGS),
            Track::Nvml(d) => (pid, TID_NVML + d as u64),
            // (A thread id past the range real ones have shares the last track.)
            Track::Python(tid) => (
                pid,
                TID_PYTHON + (tid as u64).min(TID_IDLE - TID_PYTHON - 1),
            ),
        }
    }

    /// One counter value ("ph":"C") of process `pid` at trace time `ts`.
    fn counter(
        &mut self,
        name: &str,
        pid: u32,
        ts: u64,
        val: impl std::fmt::Display,
    ) -> io::Result<()> {
        let ts = overlay::shift(ts, self.offset);
        let _ = write!(
            self.line,
            r#"{{"ph":"C","name":{},"pid":{pid},"ts":{},"args":{{"value":{val}}}}}"#,
            json_str(name),
            us(ts, self.base)
        );
        self.emit()
    }

    fn emit(&mut self) -> io::Result<()> {
        self.line.extend_from_slice(b",\n");
        self.out.write_all(&self.line)?;
        self.line.clear();
        Ok(())
    }

    /// Names a (pid, tid) the first time it is used.
    fn name_track(&mut self, t: Track, device_name: Option<&str>) -> io::Result<()> {
        let (pid, tid) = self.pid_tid(t);
        if !self.named.insert((pid, tid)) {
            return Ok(());
        }
        let name = match t {
            Track::Thread(_) | Track::Nvtx(_) | Track::Nccl(_) => return Ok(()),
            t => slices::track_name(t),
        };
        if pid != self.pid as u64 && self.named.insert((pid, u64::MAX)) {
            let pname = match device_name {
                Some(n) if !n.is_empty() => format!("GPU {pid}: {n}"),
                _ => format!("GPU {pid}"),
            };
            let _ = write!(
                self.line,
                r#"{{"ph":"M","name":"process_name","pid":{pid},"tid":0,"args":{{"name":{}}}}}"#,
                json_str(&pname)
            );
            self.emit()?;
        }
        let _ = write!(
            self.line,
            r#"{{"ph":"M","name":"thread_name","pid":{pid},"tid":{tid},"args":{{"name":{}}}}}"#,
            json_str(&name)
        );
        self.emit()
    }

    /// A name as a JSON string (quoted and escaped), made once.
    fn name_json(&mut self, cx: Option<&TraceContext<'_>>, n: Name<'_>) -> Rc<str> {
        let key = match n {
            Name::Kernel(id) => (0, id as usize),
            Name::Str(id) => (1, id as usize),
            Name::Static(s) => (2, s.as_ptr() as usize),
            Name::Text(t) => return json_str(t).into(),
        };
        self.names
            .entry(key)
            .or_insert_with(|| {
                let text = match n {
                    Name::Kernel(id) => demangle(cx.map_or("", |c| c.str(id))),
                    Name::Str(id) => cx.map_or("", |c| c.str(id)).to_string(),
                    Name::Static(s) => s.to_string(),
                    Name::Text(t) => t.to_string(),
                };
                json_str(&text).into()
            })
            .clone()
    }

    fn args(&mut self, args: &[Arg<'_>]) {
        self.line.extend_from_slice(br#","args":{"#);
        for (i, a) in args.iter().enumerate() {
            if i > 0 {
                self.line.push(b',');
            }
            // Keys are plain words of ours: nothing to escape.
            let _ = write!(self.line, "\"{}\":", a.key());
            let _ = match *a {
                Arg::U(_, v) => write!(self.line, "{v}"),
                Arg::I(_, v) => write!(self.line, "{v}"),
                Arg::S(_, s) => serde_json::to_writer(&mut self.line, s).map_err(io::Error::other),
                Arg::Hex(_, v) => write!(self.line, "\"{v:#x}\""),
                Arg::Dim3(_, d) => write!(self.line, "[{},{},{}]", d[0], d[1], d[2]),
            };
        }
        self.line.push(b'}');
    }

    fn slice(&mut self, cx: Option<&TraceContext<'_>>, s: &Slice<'_>) -> io::Result<()> {
        self.name_track(s.track, None)?;
        let (pid, tid) = self.pid_tid(s.track);
        let start = overlay::shift(s.start, self.offset);
        let end = overlay::shift(s.end, self.offset).max(start);
        self.last_ts = self.last_ts.max(s.end.max(s.start));
        let name = self.name_json(cx, s.name);
        let instant =
            start == end && matches!(s.track, Track::Collector | Track::Findings | Track::Nvml(_));
        if instant {
            let _ = write!(
                self.line,
                r#"{{"ph":"i","s":"t","cat":"{}","name":{},"pid":{pid},"tid":{tid},"ts":{}"#,
                s.cat.name(),
                name,
                us(start, self.base)
            );
        } else {
            let _ = write!(
                self.line,
                r#"{{"ph":"X","cat":"{}","name":{},"pid":{pid},"tid":{tid},"ts":{},"dur":{}"#,
                s.cat.name(),
                name,
                us(start, self.base),
                us(end - start, 0)
            );
        }
        self.args(s.args.as_slice());
        self.line.push(b'}');
        self.emit()?;
        let flow = match s.flow {
            Flow::Launch(c) => Some(("s", c, "")),
            Flow::Work(c) => Some(("f", c, r#","bp":"e""#)),
            Flow::None => None,
        };
        if let Some((ph, c, bp)) = flow {
            let _ = write!(
                self.line,
                r#"{{"ph":"{ph}","id":{c},"pid":{pid},"tid":{tid},"ts":{},"cat":"ac2g","name":"ac2g"{bp}}}"#,
                us(start, self.base)
            );
            self.emit()?;
        }
        Ok(())
    }

    /// Ends the thread's NVTX ranges at `level` and deeper (none open: nothing, the
    /// push came before the trace).
    fn nvtx_pop(&mut self, cx: &TraceContext<'_>, tid: u32, ts: u64, level: u32) -> io::Result<()> {
        let closing = match self.nvtx_levels.get_mut(&tid) {
            Some(st) => match st.iter().position(|&l| l >= level) {
                Some(i) => st.split_off(i).len(),
                None => 0,
            },
            None => 0,
        };
        for _ in 0..closing {
            self.nvtx_edge(cx, 'E', tid as u64, ts, None)?;
        }
        Ok(())
    }

    fn nvtx_edge(
        &mut self,
        cx: &TraceContext<'_>,
        ph: char,
        tid: u64,
        ts: u64,
        name: Option<Name<'_>>,
    ) -> io::Result<()> {
        let ts = overlay::shift(ts, self.offset);
        let pid = self.pid;
        let _ = write!(
            self.line,
            r#"{{"ph":"{ph}","cat":"{}","pid":{pid},"tid":{tid},"ts":{}"#,
            Cat::Nvtx.name(),
            us(ts, self.base)
        );
        if let Some(n) = name {
            let text = self.name_json(Some(cx), n);
            let _ = write!(self.line, r#","name":{text}"#);
        }
        self.line.push(b'}');
        self.emit()
    }

    /// Writes the analysis's slices: phases, steps, graph replays, idle pieces, findings.
    fn analysis_slices(&mut self, v: &ProcessView<'_>) -> io::Result<()> {
        let tl = v.timeline;
        for (name, (s, e)) in [
            ("start-up", tl.startup),
            ("steady state", tl.steady),
            ("tail", tl.tail),
        ] {
            if e > s {
                self.slice(
                    None,
                    &overlay(Track::Phases, s, e, Name::Static(name), Cat::Step),
                )?;
            }
        }
        for (i, w) in tl.steps.windows(2).enumerate() {
            let name = format!("step {i}");
            self.slice(
                None,
                &overlay(Track::Steps, w[0], w[1], Name::Text(&name), Cat::Step),
            )?;
        }
        for r in &tl.replays {
            let name = format!("graph {} replay", r.graph_id);
            self.slice(None, &slices::replay_slice(r, &name))?;
        }
        for p in &tl.idle {
            self.slice(
                None,
                &overlay(
                    Track::Idle(p.device),
                    p.start,
                    p.end,
                    Name::Static(p.cause.id()),
                    Cat::Idle,
                ),
            )?;
        }
        let t0 = v.process.trace_start_ns;
        for fnd in &v.findings {
            for ex in &fnd.examples {
                let mut s = overlay(
                    Track::Findings,
                    t0 + ex.at_ns,
                    t0 + ex.at_ns + ex.dur_ns,
                    Name::Static(fnd.id.as_str()),
                    Cat::Finding,
                );
                s.args.push(Arg::S("severity", fnd.severity.name()));
                s.args.push(Arg::S("what", &ex.what));
                self.slice(None, &s)?;
            }
        }
        Ok(())
    }

    /// Writes the Python sample spans and the counters of the process and its samplers.
    fn sampled_series(&mut self, v: &ProcessView<'_>) -> io::Result<()> {
        let mut res = Ok(());
        overlay::python_spans(v.trace, |p| {
            if res.is_ok() {
                res = self.slice(None, &slices::python_slice(p));
            }
        });
        res?;
        let mut res = Ok(());
        overlay::counters(v.trace, |s, ts, val| {
            if res.is_ok() {
                res = self.counter(&s.name(), s.device(), ts, val);
            }
        });
        std::mem::replace(&mut res, Ok(()))?;
        // The samplers' series: counters of the process (pid), named by what they are of.
        let pid = self.pid;
        overlay::nvml_counters(v.trace, &v.nvml_samples, |s, ts, val| {
            if res.is_ok() {
                res = self.counter(&format!("GPU {} {}", s.device(), s.name()), pid, ts, val);
            }
        });
        std::mem::replace(&mut res, Ok(()))?;
        overlay::sampled_counters(v.trace, &v.nvml_processes, |s, name, ts, val| {
            if res.is_ok() {
                res = self.counter(&s.flat_name(name), pid, ts, val);
            }
        });
        res
    }
}

impl TimelineExporter for Chrome {
    fn process(&mut self, v: &ProcessView<'_>) -> io::Result<()> {
        let mut f = self.open_file(v)?;
        f.analysis_slices(v)?;
        f.sampled_series(v)?;
        self.files.insert(v.index, f);
        self.cur = v.index;
        Ok(())
    }

    fn as_events(&mut self) -> &mut dyn EventExporter {
        self
    }

    fn select(&mut self, index: usize) -> io::Result<()> {
        self.cur = index;
        self.file().map(|_| ())
    }

    fn close(&mut self) -> io::Result<Vec<PathBuf>> {
        let mut keys: Vec<usize> = self.files.keys().copied().collect();
        keys.sort_unstable();
        for k in keys {
            if let Some(mut f) = self.files.remove(&k) {
                // The last line: an event with nothing in it keeps the commas simple.
                writeln!(
                    f.out,
                    "{{\"ph\":\"M\",\"name\":\"gputrace\",\"pid\":{},\"args\":{{}}}}",
                    f.pid
                )?;
                writeln!(f.out, "]}}")?;
                f.out.flush()?;
                self.written.push(f.path);
            }
        }
        Ok(std::mem::take(&mut self.written))
    }
}

/// A slice of the analysis's overlay.
fn overlay(track: Track, start: u64, end: u64, name: Name<'_>, cat: Cat) -> Slice<'_> {
    Slice {
        track,
        start,
        end: end.max(start),
        name,
        cat,
        args: Default::default(),
        flow: Flow::None,
    }
}

impl EventExporter for Chrome {
    fn end_trace(&mut self, cx: &TraceContext<'_>, _out: &mut dyn Write) -> io::Result<()> {
        // Ranges still open end with the trace's last slice.
        let f = self.file()?;
        let end = f.last_ts;
        let tids: Vec<u32> = f.nvtx_levels.keys().copied().collect();
        for tid in tids {
            f.nvtx_pop(cx, tid, end, 0)?;
        }
        let open: Vec<u64> = f.nvtx_open.keys().copied().collect();
        for id in open {
            f.nvtx_open.remove(&id);
            let ts = overlay::shift(end, f.offset);
            let _ = write!(
                f.line,
                r#"{{"ph":"e","cat":"{}","id":{id},"pid":{},"tid":0,"ts":{}}}"#,
                Cat::Nvtx.name(),
                f.pid,
                us(ts, f.base)
            );
            f.emit()?;
        }
        Ok(())
    }

    fn event(
        &mut self,
        cx: &TraceContext<'_>,
        ev: &TraceEvent<'_>,
        _out: &mut dyn Write,
    ) -> io::Result<()> {
        let f = self.file()?;
        match slices::describe(cx, ev) {
            Shown::Slice(mut s) => {
                s.flow = f.flows.filter(s.flow);
                f.slice(Some(cx), &s)
            }
            Shown::Nvtx(n) => match n {
                Nvtx::Push {
                    tid,
                    ts,
                    level,
                    name,
                } => {
                    // A push at a level already open: the pops between were lost.
                    f.nvtx_pop(cx, tid, ts, level)?;
                    f.nvtx_levels.entry(tid).or_default().push(level);
                    f.nvtx_edge(cx, 'B', tid as u64, ts, Some(name))
                }
                Nvtx::Pop { tid, ts, level } => f.nvtx_pop(cx, tid, ts, level),
                Nvtx::Start { ts, id, name } => {
                    f.nvtx_open.insert(id, (0, ts));
                    let text = f.name_json(Some(cx), name);
                    let ts = overlay::shift(ts, f.offset);
                    let _ = write!(
                        f.line,
                        r#"{{"ph":"b","cat":"{}","id":{id},"name":{},"pid":{},"tid":0,"ts":{}}}"#,
                        Cat::Nvtx.name(),
                        text,
                        f.pid,
                        us(ts, f.base)
                    );
                    f.emit()
                }
                Nvtx::End { ts, id } => {
                    if f.nvtx_open.remove(&id).is_none() {
                        return Ok(());
                    }
                    let ts = overlay::shift(ts, f.offset);
                    let _ = write!(
                        f.line,
                        r#"{{"ph":"e","cat":"{}","id":{id},"pid":{},"tid":0,"ts":{}}}"#,
                        Cat::Nvtx.name(),
                        f.pid,
                        us(ts, f.base)
                    );
                    f.emit()
                }
                Nvtx::Mark { tid, ts, name } => f.nvtx_edge(cx, 'i', tid as u64, ts, Some(name)),
            },
            Shown::Thread { tid, name } => {
                let pid = f.pid;
                let _ = write!(
                    f.line,
                    r#"{{"ph":"M","name":"thread_name","pid":{pid},"tid":{tid},"args":{{"name":{}}}}}"#,
                    json_str(cx.str(name))
                );
                f.emit()
            }
            Shown::Device(_) | Shown::Nothing => Ok(()),
        }
    }
}
