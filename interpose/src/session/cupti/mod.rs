//! The CUPTI session: loading CUPTI, switching on the activity kinds and the few API
//! callbacks we need, and off again. Its records reach the trace two ways: GPU activity
//! in CUPTI's buffers (`buffers.rs`, decoded by `source.rs` on the writer thread), and
//! the host side of API calls through `callback.rs` into the rings. `foreign.rs` keeps
//! track of the program's own CUPTI use, which we step aside for.
//!
//! CUPTI calls go through cupti-sys's result layer (`CuptiError`); what tracing cannot
//! do without fails as an [`Error`].

pub mod buffers;
pub mod callback;
pub mod devices;
pub mod foreign;
pub mod layout;
pub mod records;
pub mod source;

use crate::base::cupti::{apis, claims, discover};
use crate::base::ffi::entry;
use crate::base::opts::DriverApi;
use crate::base::opts::Opts;
use crate::base::{clock, internal, log, state};
use crate::writer;
use callback::api_callback;
use cupti_sys::{self as sys, CuptiError};
use gputrace_format::protocol::settings;
use gputrace_format::DOMAIN_RUNTIME;
use layout::Layout;
use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// A loaded CUPTI and what we have switched on in it.
pub struct Collector {
    pub cupti: sys::Cupti,
    pub path: PathBuf,
    pub source: &'static str,
    pub major: u32,
    pub api_version: u32,
    pub layout: &'static Layout,
    /// Our callback subscriber (0 when not subscribed), stored as an address.
    subscriber: AtomicUsize,
    runtime_api: bool,
    /// Runtime calls as CUPTI RUNTIME activity records instead of callbacks.
    api_activity: bool,
    driver_api: DriverApi,
    cupti_flush_ms: u64,
    per_thread_buffers: bool,
    device_buffer_mb: Option<usize>,
    zeroed_buffers: bool,
    /// Our names of the activity kinds to enable (`Opts::activity`).
    activity: Vec<String>,
}

use sys::CUpti_ActivityKind as K;
/// Activity kinds we may enable: (kind, CUPTI name, our name, required).
/// CONCURRENT_KERNEL, never KERNEL (which serialises kernels).
const KINDS: &[(K, &str, &str, bool)] = &[
    (
        sys::CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
        "CONCURRENT_KERNEL",
        "kernel",
        true,
    ),
    (
        sys::CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_MEMCPY,
        "MEMCPY",
        "memcpy",
        false,
    ),
    (
        sys::CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_MEMSET,
        "MEMSET",
        "memset",
        false,
    ),
    (
        sys::CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
        "SYNCHRONIZATION",
        "sync",
        false,
    ),
    (
        sys::CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_DEVICE,
        "DEVICE",
        "device",
        false,
    ),
    (
        sys::CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_MEMORY2,
        "MEMORY2",
        "memory",
        false,
    ),
    // Graph-level tracing: one record per graph replay, no kernel records for its nodes.
    (
        sys::CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_GRAPH_TRACE,
        "GRAPH_TRACE",
        "graph",
        false,
    ),
];

/// Calls an optional CUPTI entry point through cupti-sys's result layer:
/// `Result<(), CuptiError>`, a missing symbol reading as NOT_INITIALIZED.
macro_rules! call {
    ($c:expr, $f:ident ( $($a:expr),* )) => {
        match $c.$f.as_ref() {
            Ok(f) => cupti_sys::CuptiResultExt::result(
                // SAFETY: the symbol was resolved from the CUPTI library by its C name,
                // and the arguments follow that function's C signature.
                unsafe { f($($a),*) },
            ),
            Err(_) => Err(cupti_sys::CuptiError {
                code: cupti_sys::CUptiResult_CUPTI_ERROR_NOT_INITIALIZED,
            }),
        }
    };
}
pub(crate) use call;

/// Why CUPTI cannot be used.
#[derive(Debug, Clone)]
pub enum Error {
    /// No library could be loaded: each one tried, and why it was refused.
    NoLibrary { tried: Vec<String> },
    /// CUPTI refused a call tracing cannot do without; `text` is CUPTI's own word for it.
    Call {
        call: String,
        err: CuptiError,
        text: String,
    },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NoLibrary { tried } => {
                write!(f, "no usable CUPTI library; tried: {}", tried.join("; "))
            }
            Error::Call { call, text, .. } => write!(f, "{call} failed: {text}"),
        }
    }
}

impl std::error::Error for Error {}

/// Set once the program was seen launching kernels through the driver API (sticky).
static DRIVER_LAUNCHES_ON: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Set once a kernel of a CUDA graph was recorded (sticky: the program replays graphs).
static GRAPH_SEEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn note_graph_seen() {
    GRAPH_SEEN.store(true, Ordering::Relaxed);
}

impl Collector {
    /// Finds and loads the CUPTI that matches the process's CUDA runtime.
    pub fn load(opts: &Opts) -> Result<Collector, Error> {
        let objs = discover::loaded_objects();
        let rt = discover::loaded_cudart(&objs);
        let major = rt.as_ref().map(|r| r.1).or_else(devices::driver_major);
        let cuda_home = crate::base::secure::path_var("CUDA_HOME");
        let cands = discover::candidates(
            opts.cupti.as_deref(),
            &objs,
            major,
            cuda_home.as_deref(),
            &|p| p.exists(),
        );
        let mut tried = Vec::new();
        for c in cands {
            match sys::load(&c.path) {
                Ok(cupti) => {
                    let lib_major = discover::soname_major(&c.path, "libcupti")
                        .or(major)
                        .unwrap_or(13);
                    if let (Some(m), Some(lm)) =
                        (major, discover::soname_major(&c.path, "libcupti"))
                    {
                        if m != lm && c.source != settings::CUPTI {
                            tried
                                .push(format!("{} (CUPTI {lm}, runtime is {m})", c.path.display()));
                            continue;
                        }
                    }
                    let Some(layout) = layout::layout_for_major(lib_major) else {
                        tried.push(format!(
                            "{} (CUPTI {lib_major} is not supported: 12 and 13 are)",
                            c.path.display()
                        ));
                        continue;
                    };
                    let mut v: u32 = 0;
                    let _ = call!(cupti, cuptiGetVersion(&mut v));
                    let path = std::fs::canonicalize(&c.path).unwrap_or(c.path.clone());
                    return Ok(Collector {
                        cupti,
                        path,
                        source: c.source,
                        major: lib_major,
                        api_version: v,
                        layout,
                        subscriber: AtomicUsize::new(0),
                        runtime_api: opts.runtime_api(),
                        api_activity: opts.api_activity(),
                        // Only beside the runtime callbacks: without them the driver
                        // call under each runtime call could not be told apart and
                        // would be recorded as the program's own (GPUTRACE_API=0 or
                        // =activity turn both off).
                        driver_api: if opts.runtime_api() {
                            opts.driver_api
                        } else {
                            DriverApi::Off
                        },
                        cupti_flush_ms: opts.cupti_flush_ms.unwrap_or(opts.flush_ms),
                        per_thread_buffers: opts.per_thread_buffers,
                        device_buffer_mb: opts.device_buffer_mb.map(|m| m as usize),
                        zeroed_buffers: opts.zeroed_buffers,
                        activity: opts.activity.clone(),
                    });
                }
                Err(e) => tried.push(format!("{}: {e}", c.path.display())),
            }
        }
        Err(Error::NoLibrary { tried })
    }

    /// CUPTI's own text for an error (its name and number if CUPTI cannot say).
    fn result_string(&self, e: CuptiError) -> String {
        sys::result_string(&self.cupti, e.code)
    }

    fn refused(&self, call: impl Into<String>, err: CuptiError) -> Error {
        Error::Call {
            call: call.into(),
            err,
            text: self.result_string(err),
        }
    }

    /// Switches collection on: buffers, activity kinds, callbacks.
    pub fn start(&self) -> Result<(), Error> {
        let _g = internal::Internal::enter();
        call!(
            self.cupti,
            cuptiActivityRegisterCallbacks(Some(buffer_requested), Some(buffer_completed))
        )
        .map_err(|e| self.refused("cuptiActivityRegisterCallbacks", e))?;
        if self.per_thread_buffers
            && !self.set_attribute(
                sys::CUpti_ActivityAttribute_CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER,
                &1u8.to_ne_bytes(),
            )
        {
            log::warn("CUPTI refused per-thread activity buffers");
        }
        if let Some(mb) = self.device_buffer_mb {
            if !self.set_attribute(
                sys::CUpti_ActivityAttribute_CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE,
                &(mb << 20).to_ne_bytes(),
            ) {
                log::warn(&format!("CUPTI refused {}", settings::DEVICE_BUFFER_MB));
            }
        }
        for (kind, name, ours, required) in KINDS {
            if !self.activity.iter().any(|a| a == ours) {
                continue;
            }
            if let Err(e) = call!(self.cupti, cuptiActivityEnable(*kind)) {
                if *required {
                    return Err(self.refused(format!("cuptiActivityEnable({name})"), e));
                }
                log::debug(&format!(
                    "activity kind {name} not available: {}",
                    self.result_string(e)
                ));
            }
        }
        if self.api_activity {
            self.enable_runtime_activity();
        }
        // We hand CUPTI buffers that are already zero (cleared on the writer thread when
        // recycled), so CUPTI need not clear them on the application's thread.
        let accepted = self.zeroed_buffers && self.promise_zeroed_buffers(true);
        buffers::set_zeroed(accepted);
        // Ask CUPTI to hand over partly filled buffers, so a killed process loses at
        // most about one flush period of GPU records.
        let _ = call!(
            self.cupti,
            cuptiActivityFlushPeriod(self.cupti_flush_ms as u32)
        );
        if self.runtime_api {
            self.subscribe();
        }
        Ok(())
    }

    /// RUNTIME activity for the callback ids of base/cupti/apis.rs only (CUPTI records every
    /// runtime call once the kind is on, so the others are switched off one by one).
    fn enable_runtime_activity(&self) {
        let kind = sys::CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_RUNTIME;
        if let Err(e) = call!(self.cupti, cuptiActivityEnable(kind)) {
            log::warn(&format!(
                "cuptiActivityEnable(RUNTIME) failed: {}",
                self.result_string(e)
            ));
            return;
        }
        let n = sys::CUpti_runtime_api_trace_cbid_enum_CUPTI_RUNTIME_TRACE_CBID_SIZE;
        let mut refused = 0;
        for cbid in 1..n {
            let on = apis::find(DOMAIN_RUNTIME, cbid).is_some() as u8;
            if call!(self.cupti, cuptiActivityEnableRuntimeApi(cbid, on)).is_err() {
                refused += 1;
            }
        }
        if refused > 0 {
            log::debug(&format!(
                "cuptiActivityEnableRuntimeApi refused {refused} of {} ids",
                n - 1
            ));
        }
        state::note_cupti_callbacks(true);
    }

    /// Sets one process-wide CUPTI activity attribute; true if CUPTI accepted it.
    fn set_attribute(&self, attr: sys::CUpti_ActivityAttribute, value: &[u8]) -> bool {
        let mut v = value.to_vec();
        let mut sz = v.len();
        call!(
            self.cupti,
            cuptiActivitySetAttribute(attr, &mut sz, v.as_mut_ptr() as *mut c_void)
        )
        .is_ok()
    }

    /// Whether CUPTI takes a subscriber now (none of the program's own holds it): tried
    /// and undone at once.
    pub fn can_subscribe(&self) -> bool {
        let _g = internal::Internal::enter();
        let mut sub: sys::CUpti_SubscriberHandle = std::ptr::null_mut();
        if call!(
            self.cupti,
            cuptiSubscribe(&mut sub, Some(api_callback), std::ptr::null_mut())
        )
        .is_err()
        {
            return false;
        }
        let _ = call!(self.cupti, cuptiUnsubscribe(sub));
        true
    }

    /// Subscribes for the API callbacks if we are not subscribed (the program's own
    /// subscriber, which kept us out, may have gone).
    pub fn ensure_subscribed(&self) {
        if self.runtime_api && self.subscriber.load(Ordering::Acquire) == 0 {
            let _g = internal::Internal::enter();
            self.subscribe();
        }
    }

    fn subscribe(&self) {
        let mut sub: sys::CUpti_SubscriberHandle = std::ptr::null_mut();
        let r = call!(
            self.cupti,
            cuptiSubscribe(&mut sub, Some(api_callback), std::ptr::null_mut())
        );
        if let Err(e) = r {
            // Said once: after a profiler session, this may repeat at every resume.
            static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
            let msg = format!(
                "CUPTI callbacks unavailable ({}); recording GPU activity without host API calls until the other subscriber leaves",
                self.result_string(e)
            );
            if SAID.swap(true, Ordering::Relaxed) {
                log::debug(&msg);
            } else {
                log::warn(&msg);
            }
            return;
        }
        self.subscriber.store(sub as usize, Ordering::Release);
        self.enable(
            sub,
            sys::CUpti_CallbackDomain_CUPTI_CB_DOMAIN_RUNTIME_API,
            apis::RUNTIME,
        );
        // Driver kernel launches: from the start where asked (or where an earlier
        // window saw the program make them), else once seen (`base::cupti::claims`).
        let launches = match self.driver_api {
            DriverApi::Off => None,
            DriverApi::On => Some(true),
            DriverApi::Auto => Some(DRIVER_LAUNCHES_ON.load(Ordering::Acquire)),
        };
        if let Some(launches) = launches {
            self.enable(
                sub,
                sys::CUpti_CallbackDomain_CUPTI_CB_DOMAIN_DRIVER_API,
                apis::DRIVER
                    .iter()
                    .filter(|a| launches || !a.launches_kernel()),
            );
        }
        claims::watch(launches == Some(false));
        // The symbol hooks leave to CUPTI what it now records (exports/hooks/mod.rs).
        state::note_cupti_callbacks(self.runtime_api);
    }

    fn enable<'a>(
        &self,
        sub: sys::CUpti_SubscriberHandle,
        domain: sys::CUpti_CallbackDomain,
        calls: impl IntoIterator<Item = &'a apis::ApiInfo>,
    ) {
        for a in calls {
            if let Err(e) = call!(self.cupti, cuptiEnableCallback(1, sub, domain, a.cbid)) {
                log::debug(&format!(
                    "callback {} not enabled: {}",
                    a.name,
                    self.result_string(e)
                ));
            }
        }
    }

    /// The program launches kernels through the driver API (`base::cupti::claims` saw them):
    /// the driver's launch callbacks go on, for this window and every later one. Called
    /// on the writer thread.
    pub fn enable_driver_launches(&self) {
        DRIVER_LAUNCHES_ON.store(true, Ordering::Release);
        let sub = self.subscriber.load(Ordering::Acquire);
        if sub == 0 || !state::is_tracing() {
            return;
        }
        let _g = internal::Internal::enter();
        self.enable(
            sub as sys::CUpti_SubscriberHandle,
            sys::CUpti_CallbackDomain_CUPTI_CB_DOMAIN_DRIVER_API,
            apis::DRIVER.iter().filter(|a| a.launches_kernel()),
        );
        log::debug(&format!(
            "the program uses the driver API (a call of its own, or kernels no runtime launch claims: {:?}): driver launch calls recorded from now on",
            claims::tally()
        ));
    }

    /// Hands every finished record to the writer.
    pub fn flush(&self, forced: bool) {
        let _g = internal::Internal::enter();
        let flag = if forced {
            sys::CUpti_ActivityFlag_CUPTI_ACTIVITY_FLAG_FLUSH_FORCED
        } else {
            0
        };
        let _ = call!(self.cupti, cuptiActivityFlushAll(flag));
    }

    /// Switches collection off: flushes, disables our kinds, drops our subscriber.
    pub fn stop(&self) {
        self.flush(true);
        if claims::watching() {
            log::debug(&format!(
                "driver launch callbacks stayed off: {:?}",
                claims::watch(false)
            ));
        }
        {
            let _g = internal::Internal::enter();
            for (kind, _, _, _) in KINDS {
                let _ = call!(self.cupti, cuptiActivityDisable(*kind));
            }
            if self.api_activity {
                let kind = sys::CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_RUNTIME;
                let _ = call!(self.cupti, cuptiActivityDisable(kind));
            }
        }
        // Flushed again once disabled: a record made between the first flush and the
        // disable would otherwise sit in a buffer CUPTI never hands back.
        self.flush(true);
        let _g = internal::Internal::enter();
        // Drops are read when a buffer completes; those after the last completion (the
        // pool empty to the end) are read here, from the global queue.
        buffers::note_dropped(self.dropped_records(std::ptr::null_mut(), 0));
        // The zeroed-buffer promise is process-wide: withdraw it, since a program that
        // takes CUPTI next hands over buffers of its own, not cleared by us.
        if buffers::zeroed() {
            self.promise_zeroed_buffers(false);
        }
        // Before unsubscribing: a call in between is recorded twice rather than never.
        state::note_cupti_callbacks(false);
        let sub = self.subscriber.swap(0, Ordering::AcqRel);
        if sub != 0 {
            let _ = call!(
                self.cupti,
                cuptiUnsubscribe(sub as sys::CUpti_SubscriberHandle)
            );
        }
    }

    /// A clock pair: CUPTI's timestamp next to the host clocks. The best of three
    /// tries (the one with the shortest host-clock bracket), its host time the
    /// bracket's midpoint.
    pub fn clock_pair(&self) -> (u64, u64, u64) {
        let mut best = (u64::MAX, (0, 0, 0));
        for _ in 0..3 {
            let mut t: u64 = 0;
            let r0 = clock::now_ns();
            let mono = clock::mono_ns();
            let _ = call!(self.cupti, cuptiGetTimestamp(&mut t));
            let r1 = clock::now_ns();
            let width = r1.saturating_sub(r0);
            if width < best.0 {
                best = (width, (t, mono, r0 + width / 2));
            }
        }
        best.1
    }

    /// Sets CUPTI's process-wide ZEROED_OUT_ACTIVITY_BUFFER attribute (our buffers come
    /// to it already zero); true if CUPTI accepted it.
    fn promise_zeroed_buffers(&self, on: bool) -> bool {
        self.set_attribute(
            sys::CUpti_ActivityAttribute_CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER,
            &[on as u8],
        )
    }

    /// Releases CUPTI (end of a window), where this CUPTI supports it. Jobs were seen
    /// to stay slower after profiling ended when CUPTI was left initialised. Not in a
    /// program that has replayed CUDA graphs: on the H200, JAX jobs (XLA replays
    /// command buffers) died with CUDA_ERROR_LAUNCH_FAILED at the end of 3 windows of 6
    /// there; CUPTI then stays initialised, with no activity kind on and no subscriber.
    pub fn finalize(&self) {
        if GRAPH_SEEN.load(Ordering::Relaxed) {
            log::debug("CUDA graphs seen: CUPTI left initialised at the end of the window");
            return;
        }
        let _g = internal::Internal::enter();
        if let Err(e) = call!(self.cupti, cuptiFinalize()) {
            log::debug(&format!("cuptiFinalize: {}", self.result_string(e)));
        }
    }

    /// Device properties from the driver API, for traces that start after the CUDA
    /// context exists (CUPTI's DEVICE records come only at context creation).
    pub fn emit_device_properties(&self) {
        for (d, name) in devices::driver_devices() {
            writer::push_device(d, name);
        }
    }

    /// Records CUPTI lost for one context/stream buffer.
    fn dropped_records(&self, ctx: sys::CUcontext, stream: u32) -> u64 {
        let mut n: usize = 0;
        call!(
            self.cupti,
            cuptiActivityGetNumDroppedRecords(ctx, stream, &mut n)
        )
        .map_or(0, |()| n as u64)
    }
}

// ---------------------------------------------------------------------------------
// The active collector and CUPTI's buffer callbacks.

static ACTIVE: AtomicPtr<Collector> = AtomicPtr::new(std::ptr::null_mut());

/// Installs the collector for the life of the process (it is never freed).
pub fn install(c: Collector) -> &'static Collector {
    let p = Box::into_raw(Box::new(c));
    ACTIVE.store(p, Ordering::Release);
    // SAFETY: just leaked; lives forever.
    unsafe { &*p }
}

pub fn active() -> Option<&'static Collector> {
    let p = ACTIVE.load(Ordering::Acquire);
    // SAFETY: a non-null ACTIVE points to a leaked Collector.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Forgets the collector in a forked child (its CUPTI state belongs to the parent).
pub fn forget_after_fork() {
    ACTIVE.store(std::ptr::null_mut(), Ordering::Release);
    buffers::forget_after_fork();
}

/// CUPTI asks for an empty buffer: one from the pool, or none (CUPTI then drops records
/// and counts them) when the pool is at its cap.
///
/// # Safety
/// Called by CUPTI with valid out-pointers.
unsafe extern "C" fn buffer_requested(buf: *mut *mut u8, size: *mut usize, max: *mut usize) {
    entry!({
        // SAFETY: CUPTI passes valid out-pointers. Written first, so a failure below
        // still hands CUPTI "no buffer".
        unsafe {
            *buf = std::ptr::null_mut();
            *size = 0;
            *max = 0;
        }
        if let Some((addr, bytes)) = buffers::take() {
            // SAFETY: as above.
            unsafe {
                *buf = addr as *mut u8;
                *size = bytes;
            }
        }
    })
}

/// CUPTI hands back a buffer: queued for the writer thread, which decodes it (no
/// parsing here, on CUPTI's thread).
///
/// # Safety
/// Called by CUPTI with a buffer it got from `buffer_requested` (or, after we took the
/// callbacks back from the program, one of the program's).
unsafe extern "C" fn buffer_completed(
    ctx: sys::CUcontext,
    stream: u32,
    buf: *mut u8,
    _size: usize,
    valid: usize,
) {
    entry!({
        if let Some(c) = active() {
            buffers::note_dropped(c.dropped_records(ctx, stream));
        }
        if buf.is_null() {
            return;
        }
        buffers::complete(buf, valid);
        writer::wake();
    })
}
