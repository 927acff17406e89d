//! The PM sampling session: GPU hardware counters (SM active, achieved occupancy,
//! tensor pipe, DRAM throughput, PCIe and NVLink bytes) sampled by the GPU itself at a
//! fixed interval while a trace window is open (`GPUTRACE_PM=1`), through CUPTI's PM
//! sampling API (CUPTI 12.6+, Ampere GA10x and newer for the time-interval trigger).
//!
//! A thread of its own does everything, so no CUPTI profiler call ever runs on the
//! program's threads:
//! 1. it waits until a launch call returned or a kernel record came (CUDA is up and a
//!    context exists; the session must never start while CUDA initialises);
//! 2. sets up the device that work ran on (CUPTI's device of the first launch's
//!    context, or of the first kernel record): `cuptiProfilerInitialize`, the metric set (each candidate name
//!    checked with the profiler host API, the set cut until it fits one pass), the
//!    config image, `cuptiPmSamplingEnable`, `SetConfig` (GPU time interval trigger,
//!    a 64 MiB hardware buffer keeping the latest records, so a late decode loses the
//!    oldest samples instead of stopping the sampler), the counter data image, `Start`;
//! 3. every 100 ms decodes the hardware buffer into the counter data image, reads the
//!    completed samples (start/end timestamps, metric values) and queues them as
//!    [`CounterSample`] events for the writer;
//! 4. at the end of the window: `Stop`, then decodes until CUPTI says the records ended
//!    (samples can become decodable only at `Stop`), then `Disable` and CUPTI's profiler
//!    released (after the CUPTI session's last flush). The config image lives until
//!    `Disable`: CUPTI keeps a pointer to it. The runtime waits for this at most as long
//!    as for the other samplers.
//!
//! Any refusal (not permitted, hardware busy, not supported, an older CUPTI) gives one
//! debug line and one `pm_sampling` fact in the trace, and the rest of the trace goes
//! on as without it.
//!
//! Clock: CUPTI's guide says the sample timestamps are CPU time stamps in CUPTI's own
//! timestamp domain, the one its activity records use: REALTIME on Linux unless a
//! timestamp callback changed it. The trace is on REALTIME (the CUPTI session shifts
//! records when CUPTI's clock differs); the samples are checked at the first decode
//! against CUPTI's timestamp and the host's REALTIME of the same moment and shifted the
//! same way (see [`ClockFix`]).

pub mod ffi;

use crate::base::worker::{lock, Worker};
use crate::base::{clock, discover, log};
use crate::session::cupti;
use crate::writer::{Sink, Source};
use ffi::{call, Pm};
use gputrace_format::{CounterSample, Event, Fact, ENV_NA, ENV_NA64};
use std::ffi::{c_char, c_void, CStr, CString};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

/// The fact key of every PM sampling note (`on: ...` or why not).
pub const FACT_KEY: &str = "pm_sampling";
/// How often the hardware buffer is decoded.
const DECODE_PERIOD: Duration = Duration::from_millis(100);
/// GPU memory CUPTI may use for raw samples.
const HW_BUFFER_BYTES: usize = 64 << 20;
/// The device sampled: the CUDA ordinal of the first work the CUPTI session saw (0
/// until then); set by the session's thread before it uses it.
static DEVICE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn device() -> usize {
    DEVICE.load(std::sync::atomic::Ordering::Relaxed)
}
/// The most host memory a config or counter data image may take (a sanity bound on
/// sizes CUPTI returns).
const MAX_IMAGE_BYTES: usize = 256 << 20;

/// What the session hands the writer.
enum Item {
    Sample(CounterSample),
    Fact { ts: u64, value: String },
}

static QUEUE: Mutex<Vec<Item>> = Mutex::new(Vec::new());
static WORKER: Worker = Worker::new();

fn push(it: Item) {
    lock(&QUEUE).push(it);
}

fn note(value: String) {
    log::debug(&format!("PM sampling: {value}"));
    push(Item::Fact {
        ts: clock::now_ns(),
        value,
    });
}

/// Starts the session for a window that just opened, if `GPUTRACE_PM=1`.
pub fn start(interval_us: u64) {
    if !WORKER.claim() {
        log::debug("PM sampler still busy from the last window; not sampling");
        return;
    }
    lock(&QUEUE).clear();
    cupti::want_device();
    WORKER.spawn(
        "gputrace-pm",
        "internal error in the PM sampler; GPU counters off",
        move || run(interval_us),
    );
}

/// Ends the session: the thread decodes what is left and stops the sampler. Waits at
/// most `wait`.
pub fn stop(wait: Duration) {
    if !WORKER.stop(wait) {
        log::debug("PM sampler did not end in time; its last samples are lost");
    }
}

/// In a forked child: the parent's sampler thread does not exist here.
pub fn forget_after_fork() {
    WORKER.forget_after_fork();
    if let Ok(mut p) = PARKED.try_lock() {
        *p = None;
    }
    if let Ok(mut q) = QUEUE.try_lock() {
        q.clear();
    }
}

/// The session's queue as the writer drains it.
pub struct PmSource;

impl Source for PmSource {
    fn drain(&mut self, out: &mut Sink<'_>) {
        let items = std::mem::take(&mut *lock(&QUEUE));
        for it in items {
            match it {
                Item::Sample(s) => out.push(Event::CounterSample(s)),
                Item::Fact { ts, value } => {
                    let key = out.intern(FACT_KEY);
                    let value = out.intern(&value);
                    out.push(Event::Fact(Fact {
                        ts,
                        device: device() as u32,
                        key,
                        value,
                    }));
                }
            }
        }
    }
}

/// Waits `d` or until asked to stop; true when asked to stop.
fn wait_stop(d: Duration) -> bool {
    WORKER.wait_stop(d)
}

/// CUPTI's word for a refusal, with the fix where there is one.
fn why(call: &str, rc: ffi::CuptiResult) -> String {
    match rc {
        ffi::CUPTI_ERROR_INSUFFICIENT_PRIVILEGES
        | ffi::CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES => format!(
            "refused: not permitted ({call}: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES); set NVreg_RestrictProfilingToAdminUsers=0 or run as root"
        ),
        ffi::CUPTI_ERROR_HARDWARE_BUSY => format!(
            "refused: hardware busy ({call}: another profiler such as DCGM profiling, ncu or Nsight holds the counters)"
        ),
        ffi::CUPTI_ERROR_NOT_SUPPORTED
        | ffi::CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED
        | ffi::CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED
        | ffi::CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED => {
            format!("not supported on this GPU or setup ({call}: CUPTI error {rc})")
        }
        _ => format!("failed: {call} returned CUPTI error {rc}"),
    }
}

/// Which field of [`CounterSample`] a quantity fills.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Field {
    SmActive,
    Occupancy,
    Tensor,
    Dram,
    PcieRead,
    PcieWrite,
    NvlRx,
    NvlTx,
}

/// How a quantity is computed from the values of its metrics (in the order named).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Calc {
    /// The one metric's value.
    Value,
    /// `100 * a / b`: active cycles of elapsed cycles.
    Percent,
    /// `100 * a / b / max warps per SM`: warps resident per active cycle, of the most
    /// an SM holds (achieved occupancy).
    Occupancy,
    /// `a + b`: read and write throughput, each a share of the same peak.
    Sum,
}

/// One way to measure a quantity.
struct Alt {
    names: &'static [&'static str],
    calc: Calc,
}

const fn one(name: &'static [&'static str]) -> Alt {
    Alt {
        names: name,
        calc: Calc::Value,
    }
}

/// What we ask for, most wanted first, each with the ways to measure it (the first one
/// whose metrics the chip knows is used: the ratio metrics where PM sampling has them,
/// else the raw counters they come from). If the set needs more than one pass, the
/// last quantities are left out.
const WANT: &[(Field, &[Alt])] = &[
    (
        Field::SmActive,
        &[
            one(&["sm__cycles_active.avg.pct_of_peak_sustained_elapsed"]),
            Alt {
                names: &["sm__cycles_active.avg", "sm__cycles_elapsed.avg"],
                calc: Calc::Percent,
            },
        ],
    ),
    (
        Field::Dram,
        &[
            one(&["dram__throughput.avg.pct_of_peak_sustained_elapsed"]),
            one(&["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"]),
            // The PM sampling table's DRAM controller names; GH100's metrics evaluator
            // knows them only under their group's prefix.
            Alt {
                names: &[
                    "dramc__read_throughput.avg.pct_of_peak_sustained_elapsed",
                    "dramc__write_throughput.avg.pct_of_peak_sustained_elapsed",
                ],
                calc: Calc::Sum,
            },
            Alt {
                names: &[
                    "FBSP.TriageCompute.dramc__read_throughput.avg.pct_of_peak_sustained_elapsed",
                    "FBSP.TriageCompute.dramc__write_throughput.avg.pct_of_peak_sustained_elapsed",
                ],
                calc: Calc::Sum,
            },
            one(&["dram__bytes.sum.pct_of_peak_sustained_elapsed"]),
        ],
    ),
    (
        Field::Tensor,
        // Every tensor pipe where the chip has the sum; then the PM sampling table's
        // realtime counter (GH100's evaluator knows it under its group's prefix); then
        // the HMMA pipe, which on GH100 counts HGMMA and QGMMA (warpgroup MMA) too.
        &[
            one(&["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"]),
            one(&["sm__pipe_tensor_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed"]),
            one(&[
                "TPC.TriageCompute.sm__pipe_tensor_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed",
            ]),
            one(&["sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed"]),
            Alt {
                names: &[
                    "sm__pipe_tensor_cycles_active.avg",
                    "sm__cycles_elapsed.avg",
                ],
                calc: Calc::Percent,
            },
            Alt {
                names: &[
                    "sm__pipe_tensor_op_hmma_cycles_active.avg",
                    "sm__cycles_elapsed.avg",
                ],
                calc: Calc::Percent,
            },
        ],
    ),
    (
        Field::Occupancy,
        &[
            one(&["sm__warps_active.avg.pct_of_peak_sustained_active"]),
            Alt {
                names: &["sm__warps_active.avg", "sm__cycles_active.avg"],
                calc: Calc::Occupancy,
            },
        ],
    ),
    (Field::PcieRead, &[one(&["pcie__read_bytes.sum"])]),
    (Field::PcieWrite, &[one(&["pcie__write_bytes.sum"])]),
    (Field::NvlRx, &[one(&["nvlrx__bytes.sum"])]),
    (Field::NvlTx, &[one(&["nvltx__bytes.sum"])]),
];

/// The quantities measured, and the metric list CUPTI is given (each name once).
struct MetricSet {
    /// (field, how, index of each of its metrics in `names`).
    chosen: Vec<(Field, Calc, Vec<usize>)>,
    names: Vec<CString>,
}

impl MetricSet {
    fn new(picks: &[(Field, &Alt)]) -> MetricSet {
        let mut names: Vec<CString> = Vec::new();
        let mut chosen = Vec::new();
        for (f, alt) in picks {
            let idx = alt
                .names
                .iter()
                .map(|n| {
                    let c = CString::new(*n).unwrap_or_default();
                    match names.iter().position(|x| *x == c) {
                        Some(i) => i,
                        None => {
                            names.push(c);
                            names.len() - 1
                        }
                    }
                })
                .collect();
            chosen.push((*f, alt.calc, idx));
        }
        MetricSet { chosen, names }
    }

    fn ptrs(&self) -> Vec<*const c_char> {
        self.names.iter().map(|n| n.as_ptr()).collect()
    }

    /// A sample's fields from the evaluated metric values (one per name).
    fn fill(&self, s: &mut CounterSample, values: &[f64], max_warps: f64) {
        for (f, calc, idx) in &self.chosen {
            let v = |i: usize| idx.get(i).and_then(|&k| values.get(k)).copied();
            let x = match (calc, v(0), v(1)) {
                (Calc::Value, Some(a), _) => a,
                (Calc::Percent, Some(a), Some(b)) if b > 0.0 => 100.0 * a / b,
                (Calc::Occupancy, Some(a), Some(b)) if b > 0.0 && max_warps > 0.0 => {
                    100.0 * a / b / max_warps
                }
                (Calc::Sum, Some(a), Some(b)) => a + b,
                _ => f64::NAN,
            };
            set(s, *f, x);
        }
    }
}

/// Puts one quantity into a sample.
fn set(s: &mut CounterSample, f: Field, v: f64) {
    let pct = |v: f64| {
        if v.is_finite() && v >= 0.0 {
            ((v * 100.0).round() as u64).min(ENV_NA as u64 - 1) as u32
        } else {
            ENV_NA
        }
    };
    let bytes = |v: f64| {
        if v.is_finite() && v >= 0.0 {
            (v.round() as u64).min(ENV_NA64 - 1)
        } else {
            ENV_NA64
        }
    };
    match f {
        Field::SmActive => s.sm_active = pct(v),
        Field::Occupancy => s.occupancy = pct(v),
        Field::Tensor => s.tensor_active = pct(v),
        Field::Dram => s.dram = pct(v),
        Field::PcieRead => s.pcie_read_bytes = bytes(v),
        Field::PcieWrite => s.pcie_write_bytes = bytes(v),
        Field::NvlRx => s.nvlink_rx_bytes = bytes(v),
        Field::NvlTx => s.nvlink_tx_bytes = bytes(v),
    }
}

/// How sample timestamps become trace time (host REALTIME ns, the clock the CUPTI
/// session puts kernel records on: when CUPTI's timestamps differ from REALTIME by more
/// than a second, it shifts them by the difference, and so is done here). Chosen once,
/// at the first samples, by which clock the newest sample's end is close to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ClockFix {
    /// Already on REALTIME (CUPTI's timestamps on Linux unless a callback changed them).
    Realtime,
    /// On CUPTI's clock, which differs from REALTIME: shifted by CUPTI minus REALTIME.
    Cupti(i64),
    /// Neither: the newest sample's end is taken to be the decode time (shift).
    Aligned(i64),
}

impl ClockFix {
    /// Offsets as the CUPTI session takes them: below a second, none.
    const SAME: i128 = 1_000_000_000;
    /// A sample end this close to a clock's now is on that clock.
    const CLOSE: i128 = 10_000_000_000;

    /// `end` is the newest sample's end; `now_rt` and `now_cupti` read together at
    /// the decode that produced it (`now_cupti` 0 when CUPTI gave none).
    pub fn choose(end: u64, now_rt: u64, now_cupti: u64) -> ClockFix {
        let (end, rt) = (end as i128, now_rt as i128);
        let cu = if now_cupti == 0 {
            rt
        } else {
            now_cupti as i128
        };
        let off = cu - rt;
        let clamp = |x: i128| x.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
        if off.abs() > Self::SAME && (cu - end).abs() < Self::CLOSE {
            ClockFix::Cupti(clamp(off))
        } else if (rt - end).abs() < Self::CLOSE || (cu - end).abs() < Self::CLOSE {
            ClockFix::Realtime
        } else {
            ClockFix::Aligned(clamp(end - rt))
        }
    }

    pub fn apply(self, t: u64) -> u64 {
        match self {
            ClockFix::Realtime => t,
            ClockFix::Cupti(off) | ClockFix::Aligned(off) => {
                (t as i128 - off as i128).clamp(0, u64::MAX as i128) as u64
            }
        }
    }
}

/// Most warps one SM of the sampled device holds, from the driver (64, Hopper's, when the driver
/// is not at hand).
fn max_warps_per_sm() -> f64 {
    cupti::devices::driver_devices()
        .into_iter()
        .find(|(d, _)| d.id == device() as u32)
        .map(|(d, _)| d.max_warps_per_sm)
        .filter(|w| *w > 0)
        .unwrap_or(64) as f64
}

/// CUPTI's timestamp now (0 if the CUPTI session has none).
fn cupti_now() -> u64 {
    let mut t: u64 = 0;
    if let Some(c) = cupti::active() {
        let _ = cupti::call!(c.cupti, cuptiGetTimestamp(&mut t));
    }
    t
}

/// The CUPTI library the CUPTI session uses, opened again (never loading another).
fn cupti_handle() -> Option<(*mut c_void, PathBuf)> {
    let c = cupti::active()?;
    let h = discover::dlopen(&c.path, libc::RTLD_NOLOAD | libc::RTLD_NOW).ok()?;
    Some((h, c.path.clone()))
}

/// Makes the sampled device's primary context current on this thread when the real driver is
/// loaded (the profiler calls act on the current context's device); returns the
/// release function to call at the end.
fn bind_primary_context() -> Option<unsafe extern "C" fn(i32) -> i32> {
    let h = discover::dlopen(
        std::path::Path::new("libcuda.so.1"),
        libc::RTLD_NOLOAD | libc::RTLD_LAZY,
    )
    .ok()?;
    let sym = |n: &CStr| {
        // SAFETY: valid handle and NUL-terminated name.
        let p = unsafe { libc::dlsym(h, n.as_ptr()) };
        (!p.is_null()).then_some(p)
    };
    let (retain, set_current, release) = (
        sym(c"cuDevicePrimaryCtxRetain")?,
        sym(c"cuCtxSetCurrent")?,
        sym(c"cuDevicePrimaryCtxRelease_v2").or_else(|| sym(c"cuDevicePrimaryCtxRelease"))?,
    );
    // SAFETY: the driver API's C signatures (CUresult is an int, CUdevice an int,
    // CUcontext a pointer).
    let (retain, set_current, release) = unsafe {
        (
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut *mut c_void, i32) -> i32>(
                retain,
            ),
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut c_void) -> i32>(
                set_current,
            ),
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(i32) -> i32>(release),
        )
    };
    let mut ctx: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid out-pointer; the device exists (work ran on it).
    if unsafe { retain(&mut ctx, device() as i32) } != 0 || ctx.is_null() {
        return None;
    }
    // SAFETY: a context we hold a reference to.
    if unsafe { set_current(ctx) } != 0 {
        // SAFETY: the reference taken above.
        unsafe { release(device() as i32) };
        return None;
    }
    Some(release)
}

fn run(interval_us: u64) {
    // The entry points first: an older CUPTI is said at once, whatever the program does.
    let Some((handle, path)) = cupti_handle() else {
        note("not supported: CUPTI is not loaded".into());
        return;
    };
    // SAFETY: `handle` was just opened on the CUPTI library the CUPTI session loaded.
    let pm = match unsafe { Pm::load(handle) } {
        Ok(pm) => pm,
        Err(sym) => {
            note(format!(
                "not supported: {} has no {sym} (PM sampling needs CUPTI 12.6 or newer)",
                path.display()
            ));
            return;
        }
    };
    // Then wait for CUDA to be up: the CUPTI session has seen a kernel.
    while !cupti::gpu_work_seen() {
        if wait_stop(Duration::from_millis(50)) {
            note("not started: no kernel ran in the window".into());
            return;
        }
    }
    // The device of the work seen (one process driving several GPUs gets the first):
    // the next launch asks CUPTI for it, or a kernel record gives it; wait a little
    // for either when CUDA was up before the window (device 0 after that).
    let mut waited = 0;
    while cupti::gpu_device().is_none() && waited < 40 {
        if wait_stop(Duration::from_millis(50)) {
            note("not started: the window closed before its device was known".into());
            return;
        }
        waited += 1;
    }
    let dev = cupti::gpu_device().unwrap_or_else(|| {
        log::debug("PM sampling: the device of the work is not known; sampling device 0");
        0
    });
    DEVICE.store(dev as usize, std::sync::atomic::Ordering::Relaxed);
    let release = bind_primary_context();
    let mut s = match Session::open(&pm, interval_us, release) {
        Ok(s) => s,
        Err(why) => {
            note(why);
            return;
        }
    };
    note(format!(
        "on: device {}, every {interval_us} us, {} metrics: {}",
        device(),
        s.metrics.names.len(),
        s.names().join(", ")
    ));
    let mut pass = 0u64;
    while !wait_stop(DECODE_PERIOD) {
        pass += 1;
        s.decode_pass(pass);
    }
    pass += 1;
    s.stop_and_drain(pass);
    s.close();
    log::debug(&format!(
        "PM sampling: stopped after {pass} passes, {} samples",
        s.total
    ));
}

type CtxRelease = unsafe extern "C" fn(i32) -> i32;

/// What waits for the CUPTI session to stop: disabling PM sampling (which was seen to
/// finalize CUPTI as a whole in some releases: the activity records still in CUPTI's
/// buffers would be lost), releasing CUPTI's profiler, and our context reference.
struct Parked {
    pm: Pm,
    /// The PM sampling object (an address), 0 when none.
    object: usize,
    /// The config image SetConfig was given: CUPTI keeps a pointer to it until Disable.
    config: Vec<u8>,
    profiler_on: bool,
    ctx_release: Option<CtxRelease>,
    /// The device whose primary context `ctx_release` releases.
    device: usize,
}

static PARKED: Mutex<Option<Parked>> = Mutex::new(None);

/// Disables PM sampling and releases the profiler, once the CUPTI session has stopped
/// and flushed (the runtime calls it after the CUPTI session's `stop`). Nothing when
/// the sampler did not run or did not finish in time.
pub fn release() {
    let Some(p) = lock(&PARKED).take() else {
        return;
    };
    let _g = crate::base::internal::Internal::enter();
    let object = p.object as *mut ffi::Object;
    if !object.is_null() {
        // SAFETY: the PM sampling object CUPTI made in Enable, stopped and not yet
        // disabled; the function pointers come from the same CUPTI.
        let _ = unsafe { call(p.pm.disable, |x: &mut ffi::ObjectParams| x.object = object) };
    }
    // Only now may the config image go.
    drop(p.config);
    if p.profiler_on {
        // SAFETY: CUPTI's profiler was initialized by this session.
        let _ = unsafe { call(p.pm.profiler_deinitialize, |_| {}) };
    }
    if let Some(rel) = p.ctx_release {
        // SAFETY: the primary context reference bind_primary_context took.
        unsafe { rel(p.device as i32) };
    }
    log::debug("PM sampling: disabled");
}

/// An open PM sampling session on one device.
struct Session<'a> {
    pm: &'a Pm,
    object: *mut ffi::Object,
    host: *mut ffi::HostObject,
    metrics: MetricSet,
    /// Most warps an SM holds (for occupancy from raw counters).
    max_warps: f64,
    ptrs: Vec<*const c_char>,
    image: Vec<u8>,
    /// The config image given to SetConfig (CUPTI keeps a pointer to it).
    config: Vec<u8>,
    /// CUPTI's counter availability image for the device (empty when it gave none).
    avail: Vec<u8>,
    clock: Option<ClockFix>,
    /// The newest sample end queued (samples that do not end after it are dropped).
    last_end: u64,
    total: u64,
    failed: bool,
    stopped: bool,
    profiler_on: bool,
    ctx_release: Option<CtxRelease>,
}

impl Drop for Session<'_> {
    /// Unwinding out of the session (a panic caught by the worker) with PM sampling
    /// still enabled: CUPTI may still read the config image, so it is never freed.
    fn drop(&mut self) {
        if !self.object.is_null() {
            std::mem::forget(std::mem::take(&mut self.config));
        }
    }
}

impl<'a> Session<'a> {
    fn names(&self) -> Vec<String> {
        self.metrics
            .names
            .iter()
            .map(|n| n.to_string_lossy().into_owned())
            .collect()
    }

    fn open(
        pm: &'a Pm,
        interval_us: u64,
        ctx_release: Option<CtxRelease>,
    ) -> Result<Session<'a>, String> {
        let mut s = Session {
            pm,
            object: std::ptr::null_mut(),
            host: std::ptr::null_mut(),
            metrics: MetricSet::new(&[]),
            max_warps: max_warps_per_sm(),
            ptrs: Vec::new(),
            image: Vec::new(),
            config: Vec::new(),
            avail: Vec::new(),
            clock: None,
            last_end: 0,
            total: 0,
            failed: false,
            stopped: false,
            profiler_on: false,
            ctx_release,
        };
        match s.setup(interval_us) {
            Ok(()) => Ok(s),
            Err(e) => {
                s.close();
                Err(e)
            }
        }
    }

    fn setup(&mut self, interval_us: u64) -> Result<(), String> {
        let pm = self.pm;
        // Every CUPTI call here: each function pointer is the CUPTI function of the
        // params struct it is called with; the pointers put in the structs point to
        // live buffers of this function or of `self`, sized as passed.
        // SAFETY: as said at the top of `setup`.
        unsafe { call(pm.profiler_initialize, |_| {}) }
            .map_err(|rc| why("cuptiProfilerInitialize", rc))?;
        self.profiler_on = true;
        // SAFETY: as said at the top of `setup`.
        let chip = unsafe {
            call(pm.device_get_chip_name, |p: &mut ffi::DeviceGetChipName| {
                p.device_index = device()
            })
        }
        .map_err(|rc| why("cuptiDeviceGetChipName", rc))?;
        if chip.chip_name.is_null() {
            return Err("failed: CUPTI gave no chip name".into());
        }
        // SAFETY: CUPTI returned a NUL-terminated name it keeps.
        let chip = unsafe { CStr::from_ptr(chip.chip_name) }.to_owned();
        log::debug(&format!("PM sampling: chip {}", chip.to_string_lossy()));
        self.avail = self.counter_availability();
        // The metric set: per quantity, the first way whose metrics this chip knows.
        let mut picks: Vec<(Field, &Alt)> = Vec::new();
        for (field, alts) in WANT {
            // Choosing takes a host object per try: give up at once if the window closed.
            if wait_stop(Duration::ZERO) {
                return Err("not started: the window closed while the metrics were chosen".into());
            }
            let mut found = false;
            for alt in alts.iter() {
                let one = MetricSet::new(&[(*field, alt)]);
                match self.try_config(&chip, &one.ptrs()) {
                    Ok(_) => {
                        picks.push((*field, alt));
                        found = true;
                        break;
                    }
                    Err(rc) => log::debug(&format!(
                        "PM sampling: {:?} by {}: CUPTI error {rc}",
                        field,
                        alt.names.join(" + ")
                    )),
                }
            }
            if !found {
                log::debug(&format!("PM sampling: no metric for {field:?}"));
            }
        }
        // Cut from the end until one pass holds the set.
        let (set, config) = loop {
            if picks.is_empty() {
                return Err("not supported: no metric of ours is known to this GPU".into());
            }
            let set = MetricSet::new(&picks);
            match self.try_config(&chip, &set.ptrs()) {
                Ok((config, 1)) => break (set, config),
                Ok((_, passes)) => log::debug(&format!(
                    "PM sampling: {} metrics need {passes} passes; leaving out {:?}",
                    set.names.len(),
                    picks.last().map(|c| c.0)
                )),
                Err(rc) => log::debug(&format!(
                    "PM sampling: config of {} metrics: CUPTI error {rc}",
                    set.names.len()
                )),
            }
            picks.pop();
        };
        self.ptrs = set.ptrs();
        self.metrics = set;
        self.config = config;
        // The host object the values are evaluated with.
        let ptrs = self.ptrs.clone();
        self.host = self
            .host_with(&chip, &ptrs)
            .map_err(|(call, rc)| why(call, rc))?;
        // SAFETY: as said at the top of `setup`.
        let en = unsafe { call(pm.enable, |p: &mut ffi::Enable| p.device_index = device()) }
            .map_err(|rc| why("cuptiPmSamplingEnable", rc))?;
        self.object = en.object;
        let object = self.object;
        let config = &self.config;
        let set_config = |struct_size: usize| {
            // SAFETY: as said at the top of `setup`; the config image lives in `self`
            // and then in `Parked` until after Disable. A smaller structSize only hides
            // the fields past it from CUPTI.
            unsafe {
                call(pm.set_config, |p: &mut ffi::SetConfig| {
                    p.struct_size = struct_size;
                    p.object = object;
                    p.config_size = config.len();
                    p.config = config.as_ptr();
                    p.hardware_buffer_size = HW_BUFFER_BYTES;
                    p.sampling_interval = interval_us * 1000;
                    p.trigger_mode = ffi::TRIGGER_GPU_TIME_INTERVAL;
                    p.append_mode = ffi::APPEND_KEEP_LATEST;
                })
            }
        };
        // The 13.0 struct; a 12.x CUPTI knows it without the append mode.
        match set_config(<ffi::SetConfig as ffi::Params>::STRUCT_SIZE) {
            Err(ffi::CUPTI_ERROR_INVALID_PARAMETER) => {
                log::debug("PM sampling: SetConfig refused the 13.0 struct; trying the 12.x one");
                set_config(ffi::SET_CONFIG_SIZE_12)
            }
            r => r,
        }
        .map_err(|rc| why("cuptiPmSamplingSetConfig", rc))?;
        // Room for two decode periods of samples.
        let max_samples = (2 * DECODE_PERIOD.as_micros() as u64 / interval_us).clamp(256, 50_000);
        // SAFETY: as said at the top of `setup`.
        let size = unsafe {
            call(
                pm.get_counter_data_size,
                |p: &mut ffi::GetCounterDataSize| {
                    p.object = object;
                    p.metric_names = ptrs.as_ptr();
                    p.num_metrics = ptrs.len();
                    p.max_samples = max_samples as u32;
                },
            )
        }
        .map_err(|rc| why("cuptiPmSamplingGetCounterDataSize", rc))?;
        if size.counter_data_size == 0 || size.counter_data_size > MAX_IMAGE_BYTES {
            return Err(format!(
                "failed: CUPTI asked for a counter data image of {} bytes",
                size.counter_data_size
            ));
        }
        self.image = vec![0u8; size.counter_data_size];
        self.init_image()
            .map_err(|rc| why("cuptiPmSamplingCounterDataImageInitialize", rc))?;
        // SAFETY: as said at the top of `setup`.
        unsafe { call(pm.start, |p: &mut ffi::ObjectParams| p.object = object) }
            .map_err(|rc| why("cuptiPmSamplingStart", rc))?;
        log::debug(&format!(
            "PM sampling: started (GPU time interval trigger, {} ns, hardware buffer {} MiB, keep latest, counter data {} bytes for {max_samples} samples)",
            interval_us * 1000,
            HW_BUFFER_BYTES >> 20,
            self.image.len()
        ));
        Ok(())
    }

    /// A config image for `names` with a host object of its own: (image, passes).
    /// A profiler host object for PM sampling on `chip` (with the counter availability
    /// image when there is one) holding the metrics `names`; on an error, the call that
    /// failed and its code (the object, if made, freed).
    fn host_with(
        &self,
        chip: &CStr,
        names: &[*const c_char],
    ) -> Result<*mut ffi::HostObject, (&'static str, u32)> {
        let pm = self.pm;
        let avail = self.avail_ptr();
        // SAFETY: as said at the top of `setup`.
        let host = unsafe {
            call(pm.host_initialize, |p: &mut ffi::HostInitialize| {
                p.profiler_type = ffi::CUPTI_PROFILER_TYPE_PM_SAMPLING;
                p.chip_name = chip.as_ptr();
                p.counter_availability = avail;
            })
        }
        .map_err(|rc| ("cuptiProfilerHostInitialize", rc))?
        .host;
        // SAFETY: as said at the top of `setup`.
        let added = unsafe {
            call(
                pm.host_config_add_metrics,
                |p: &mut ffi::HostConfigAddMetrics| {
                    p.host = host;
                    p.metric_names = names.as_ptr();
                    p.num_metrics = names.len();
                },
            )
        };
        match added {
            Ok(_) => Ok(host),
            Err(rc) => {
                self.free_host(host);
                Err(("cuptiProfilerHostConfigAddMetrics", rc))
            }
        }
    }

    /// Frees a host object made by [`Self::host_with`].
    fn free_host(&self, host: *mut ffi::HostObject) {
        // SAFETY: as said at the top of `setup`; a host object CUPTI made.
        let _ = unsafe {
            call(
                self.pm.host_deinitialize,
                |p: &mut ffi::HostDeinitialize| p.host = host,
            )
        };
    }

    fn try_config(&self, chip: &CStr, names: &[*const c_char]) -> Result<(Vec<u8>, usize), u32> {
        let pm = self.pm;
        let host = self.host_with(chip, names).map_err(|(_, rc)| rc)?;
        let r = (|| {
            // SAFETY: as said at the top of `setup`.
            let size = unsafe {
                call(
                    pm.host_get_config_image_size,
                    |p: &mut ffi::HostGetConfigImageSize| p.host = host,
                )
            }?
            .config_image_size;
            if size == 0 || size > MAX_IMAGE_BYTES {
                return Err(ffi::CUPTI_ERROR_NOT_SUPPORTED);
            }
            let mut image = vec![0u8; size];
            // SAFETY: as said at the top of `setup`; `image` has `size` bytes.
            unsafe {
                call(
                    pm.host_get_config_image,
                    |p: &mut ffi::HostGetConfigImage| {
                        p.host = host;
                        p.config_image_size = image.len();
                        p.config_image = image.as_mut_ptr();
                    },
                )
            }?;
            // SAFETY: as said at the top of `setup`.
            let passes = unsafe {
                call(
                    pm.host_get_num_of_passes,
                    |p: &mut ffi::HostGetNumOfPasses| {
                        p.config_image_size = image.len();
                        p.config_image = image.as_mut_ptr();
                    },
                )
            }?
            .num_passes;
            Ok((image, passes))
        })();
        self.free_host(host);
        r
    }

    /// CUPTI's counter availability image for the device (what its counters can give
    /// here: a VM or a busy unit may lack some), asked before Enable as CUPTI's own
    /// sample does; empty when this CUPTI has no such call or refuses it (then the host
    /// objects go by the chip name alone).
    fn counter_availability(&self) -> Vec<u8> {
        let Some(f) = self.pm.get_counter_availability else {
            return Vec::new();
        };
        let image = (|| {
            // SAFETY: as said at the top of `setup`; first the size (no image).
            let size = unsafe {
                call(f, |p: &mut ffi::GetCounterAvailability| {
                    p.device_index = device()
                })
            }?
            .counter_availability_size;
            if size == 0 || size > MAX_IMAGE_BYTES {
                return Ok(Vec::new());
            }
            let mut image = vec![0u8; size];
            // SAFETY: as said at the top of `setup`; `image` has `size` bytes.
            unsafe {
                call(f, |p: &mut ffi::GetCounterAvailability| {
                    p.device_index = device();
                    p.counter_availability_size = image.len();
                    p.counter_availability = image.as_mut_ptr();
                })
            }?;
            Ok(image)
        })();
        image.unwrap_or_else(|rc: ffi::CuptiResult| {
            log::debug(&format!(
                "PM sampling: no counter availability image (CUPTI error {rc})"
            ));
            Vec::new()
        })
    }

    fn avail_ptr(&self) -> *const u8 {
        if self.avail.is_empty() {
            std::ptr::null()
        } else {
            self.avail.as_ptr()
        }
    }

    /// Stops the sampler, then decodes until CUPTI says the records ended (samples may
    /// become decodable only once stopped), at most 16 rounds.
    fn stop_and_drain(&mut self, pass: u64) {
        let (pm, object) = (self.pm, self.object);
        if object.is_null() {
            return;
        }
        // SAFETY: as said at the top of `setup`; the object CUPTI made in Enable.
        if let Err(rc) = unsafe { call(pm.stop, |p: &mut ffi::ObjectParams| p.object = object) } {
            log::debug(&format!(
                "PM sampling: cuptiPmSamplingStop: CUPTI error {rc}"
            ));
        }
        self.stopped = true;
        for _ in 0..16 {
            match self.decode_pass(pass) {
                Some(ffi::DECODE_STOP_END_OF_RECORDS) | None => return,
                Some(_) => {}
            }
        }
    }

    fn init_image(&mut self) -> Result<(), u32> {
        let object = self.object;
        let (ptr, len) = (self.image.as_mut_ptr(), self.image.len());
        // SAFETY: as said at the top of `setup`; the image is `len` bytes.
        unsafe {
            call(
                self.pm.counter_data_initialize,
                |p: &mut ffi::CounterDataInitialize| {
                    p.object = object;
                    p.counter_data_size = len;
                    p.counter_data = ptr;
                },
            )
        }
        .map(|_| ())
    }

    /// Decodes what the hardware buffer holds, queues the completed samples, and
    /// clears the counter data image for the next pass. The last decode's stop reason;
    /// None once decoding failed.
    fn decode_pass(&mut self, pass: u64) -> Option<u32> {
        if self.failed {
            return None;
        }
        let pm = self.pm;
        let object = self.object;
        for round in 0..8 {
            let (ptr, len) = (self.image.as_mut_ptr(), self.image.len());
            // SAFETY: as said at the top of `setup`.
            let d = unsafe {
                call(pm.decode_data, |p: &mut ffi::DecodeData| {
                    p.object = object;
                    p.counter_data = ptr;
                    p.counter_data_size = len;
                })
            };
            let d = match d {
                Ok(d) => d,
                Err(rc) => {
                    self.failed = true;
                    note(format!("stopped: {}", why("cuptiPmSamplingDecodeData", rc)));
                    return None;
                }
            };
            // SAFETY: as said at the top of `setup`.
            let info = unsafe {
                call(
                    pm.get_counter_data_info,
                    |p: &mut ffi::GetCounterDataInfo| {
                        p.counter_data = ptr;
                        p.counter_data_size = len;
                    },
                )
            };
            let (total, populated, completed) = match &info {
                Ok(i) => (i.total, i.populated, i.completed),
                Err(_) => (0, 0, 0),
            };
            let kept = self.read_samples(completed);
            // Every pass of the first few seconds, then one in a hundred (and any with
            // an overflow or a full image).
            let say = pass <= 50
                || pass.is_multiple_of(100)
                || d.overflow != 0
                || d.stop_reason == ffi::DECODE_STOP_COUNTER_DATA_FULL;
            if say {
                log::debug(&format!(
                "PM sampling: pass {pass}.{round}: stop reason {} ({}), overflow {}, samples in image {total}, populated {populated}, completed {completed}, kept {kept}",
                d.stop_reason,
                match d.stop_reason {
                    ffi::DECODE_STOP_COUNTER_DATA_FULL => "counter data full",
                    ffi::DECODE_STOP_END_OF_RECORDS => "end of records",
                    _ => "other",
                },
                d.overflow
            ));
            }
            if completed > 0 || d.stop_reason == ffi::DECODE_STOP_COUNTER_DATA_FULL {
                if let Err(rc) = self.init_image() {
                    self.failed = true;
                    note(format!(
                        "stopped: {}",
                        why("cuptiPmSamplingCounterDataImageInitialize", rc)
                    ));
                    return None;
                }
            }
            if d.stop_reason != ffi::DECODE_STOP_COUNTER_DATA_FULL {
                return Some(d.stop_reason);
            }
        }
        Some(ffi::DECODE_STOP_COUNTER_DATA_FULL)
    }

    /// Reads samples `0..n` of the counter data image into the queue; how many.
    fn read_samples(&mut self, n: usize) -> usize {
        let pm = self.pm;
        let (object, host) = (self.object, self.host);
        let (ptr, len) = (self.image.as_ptr(), self.image.len());
        let mut values = vec![0f64; self.metrics.names.len()];
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            // SAFETY: as said at the top of `setup`.
            let Ok(info) = (unsafe {
                call(pm.get_sample_info, |p: &mut ffi::GetSampleInfo| {
                    p.object = object;
                    p.counter_data = ptr;
                    p.counter_data_size = len;
                    p.sample_index = i;
                })
            }) else {
                continue;
            };
            let vp = values.as_mut_ptr();
            let names = self.ptrs.as_ptr();
            let nm = self.ptrs.len();
            // SAFETY: as said at the top of `setup`; `values` has one slot per metric name.
            let ok = unsafe {
                call(
                    pm.host_evaluate_to_gpu_values,
                    |p: &mut ffi::HostEvaluateToGpuValues| {
                        p.host = host;
                        p.counter_data = ptr;
                        p.counter_data_size = len;
                        p.range_index = i;
                        p.metric_names = names;
                        p.num_metrics = nm;
                        p.metric_values = vp;
                    },
                )
            }
            .is_ok();
            let mut s = CounterSample {
                start: info.start,
                end: info.end.max(info.start),
                device: device() as u32,
                ..Default::default()
            };
            if ok {
                self.metrics.fill(&mut s, &values, self.max_warps);
            }
            out.push(s);
        }
        // A sample without a start, or not ending after the last one kept (the same
        // sample again after an image reset), is dropped, before the clock is chosen.
        let mut good = Vec::with_capacity(out.len());
        for s in out {
            if s.start == 0 || s.end <= s.start || s.end <= self.last_end {
                continue;
            }
            self.last_end = s.end;
            good.push(s);
        }
        if good.is_empty() {
            return 0;
        }
        let fix = *self.clock.get_or_insert_with(|| {
            let end = good.iter().map(|s| s.end).max().unwrap_or(0);
            let (rt, cu) = (clock::now_ns(), cupti_now());
            let f = ClockFix::choose(end, rt, cu);
            log::debug(&format!(
                "PM sampling: clock: newest sample end {end}, host realtime {rt}, CUPTI timestamp {cu}: {f:?}"
            ));
            if let ClockFix::Aligned(_) = f {
                note("sample times aligned to the decode time: their clock is neither the host's nor CUPTI's".into());
            }
            f
        });
        let kept = good.len();
        let mut q = lock(&QUEUE);
        for mut s in good {
            s.start = fix.apply(s.start);
            s.end = fix.apply(s.end);
            q.push(Item::Sample(s));
        }
        self.total += kept as u64;
        kept
    }

    /// Stops the sampler and frees the host object; the rest waits for [`release`].
    fn close(&mut self) {
        let pm = self.pm;
        let object = self.object;
        if !object.is_null() && !self.stopped {
            // SAFETY: as said at the top of `setup`; the object CUPTI made in Enable.
            let _ = unsafe { call(pm.stop, |p: &mut ffi::ObjectParams| p.object = object) };
            self.stopped = true;
        }
        if !self.host.is_null() {
            self.free_host(self.host);
            self.host = std::ptr::null_mut();
        }
        let mut parked = lock(&PARKED);
        if let Some(stale) = parked.take() {
            // A sampler of an earlier window that finished after its release: its
            // object was never disabled, so CUPTI may still read its config image.
            log::debug(
                "PM sampling: an earlier sampler was never released; its config image is kept",
            );
            std::mem::forget(stale.config);
        }
        *parked = Some(Parked {
            pm: *pm,
            object: object as usize,
            config: std::mem::take(&mut self.config),
            profiler_on: self.profiler_on,
            device: device(),
            ctx_release: self.ctx_release.take(),
        });
        self.object = std::ptr::null_mut();
        self.profiler_on = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_fix_puts_samples_on_the_trace_clock() {
        let rt = 1_700_000_000_000_000_000u64;
        // Linux: CUPTI's timestamps are REALTIME; nothing moves.
        assert_eq!(
            ClockFix::choose(rt - 50_000_000, rt, rt),
            ClockFix::Realtime
        );
        assert_eq!(ClockFix::choose(rt - 50_000_000, rt, 0), ClockFix::Realtime);
        // CUPTI's clock a day ahead and the samples on it: moved onto REALTIME by the
        // offset the CUPTI session moves kernel records by.
        let cu = rt + 86_400_000_000_000;
        let f = ClockFix::choose(cu - 50_000_000, rt, cu);
        assert_eq!(f, ClockFix::Cupti(86_400_000_000_000));
        assert_eq!(f.apply(cu - 50_000_000), rt - 50_000_000);
        // CUPTI 3 s ahead (the session shifts records by it; so are samples on it).
        let f = ClockFix::choose(rt + 3_000_000_000 - 50_000_000, rt, rt + 3_000_000_000);
        assert_eq!(f.apply(rt + 3_000_000_000 - 50_000_000), rt - 50_000_000);
        // Samples on REALTIME while CUPTI's clock differs: they stay.
        assert_eq!(
            ClockFix::choose(rt - 50_000_000, rt, cu),
            ClockFix::Realtime
        );
        // Neither: the newest end lands on the decode time.
        let f = ClockFix::choose(5_000, rt, cu);
        assert_eq!(f.apply(5_000), rt);
        // Absurd values neither overflow nor wrap.
        let f = ClockFix::choose(u64::MAX, 0, 0);
        assert!(f.apply(u64::MAX) <= u64::MAX / 2 + 1);
        assert_eq!(f.apply(0), 0);
    }

    #[test]
    fn raw_counters_give_the_same_quantities() {
        // SM active and occupancy from raw counters, DRAM from read + write, sharing
        // sm__cycles_active.avg between two quantities.
        let sm = &WANT[0].1[1];
        let dram = &WANT[1].1[2];
        let occ = &WANT[3].1[1];
        let set = MetricSet::new(&[
            (Field::SmActive, sm),
            (Field::Dram, dram),
            (Field::Occupancy, occ),
        ]);
        assert_eq!(set.names.len(), 5, "{:?}", set.names);
        // active 900 of 1000 cycles; 48 + 40 % of peak; 28800 warp-cycles over 900
        // active cycles = 32 warps of 64.
        let values = [900.0, 1000.0, 48.0, 40.0, 28_800.0];
        let mut s = CounterSample::default();
        set.fill(&mut s, &values, 64.0);
        assert_eq!((s.sm_active, s.dram, s.occupancy), (9_000, 8_800, 5_000));
        // A zero denominator is "not available", not a division by zero.
        let mut s = CounterSample::default();
        set.fill(&mut s, &[0.0, 0.0, 1.0, 1.0, 0.0], 64.0);
        assert_eq!((s.sm_active, s.occupancy, s.dram), (ENV_NA, ENV_NA, 200));
    }

    #[test]
    fn values_become_hundredths_of_a_percent_and_bytes() {
        let mut s = CounterSample::default();
        set(&mut s, Field::Dram, 92.345);
        set(&mut s, Field::Tensor, f64::NAN);
        set(&mut s, Field::PcieRead, 1048576.4);
        set(&mut s, Field::SmActive, -1.0);
        assert_eq!(
            (s.dram, s.tensor_active, s.sm_active),
            (9235, ENV_NA, ENV_NA)
        );
        assert_eq!(s.pcie_read_bytes, 1 << 20);
        assert_eq!(s.occupancy, ENV_NA);
    }
}
