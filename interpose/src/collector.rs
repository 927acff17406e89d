//! The CUPTI side: loading the library, enabling activity kinds and the few callbacks
//! we need, the buffer pool, and stepping aside when the program uses CUPTI itself.

use crate::apis;
use crate::clock::{now_ns, tid};
use crate::discover;
use crate::guard;
use crate::log;
use crate::opts::Opts;
use crate::records::{self, Layout};
use crate::ring::{self, HostRecord, REC_API};
use crate::writer;
use cupti_sys as sys;
use gputrace_format::protocol::settings;
use gputrace_format::{CollectorState, DOMAIN_DRIVER, DOMAIN_RUNTIME};
use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

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
    driver_api: bool,
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
];

/// Calls an optional CUPTI entry point; a missing symbol reads as NOT_INITIALIZED.
macro_rules! call {
    ($c:expr, $f:ident ( $($a:expr),* )) => {
        match $c.$f.as_ref() {
            // SAFETY: the symbol was resolved from the CUPTI library by its C name, and
            // the arguments follow that function's C signature.
            Ok(f) => unsafe { f($($a),*) },
            Err(_) => cupti_sys::CUptiResult_CUPTI_ERROR_NOT_INITIALIZED,
        }
    };
}
pub(crate) use call;

const OK: sys::CUptiResult = sys::CUptiResult_CUPTI_SUCCESS;

impl Collector {
    /// Finds and loads the CUPTI that matches the process's CUDA runtime.
    pub fn load(opts: &Opts) -> Result<Collector, String> {
        let objs = discover::loaded_objects();
        let rt = discover::loaded_cudart(&objs);
        let major = rt.as_ref().map(|r| r.1).or_else(driver_major);
        let cuda_home = std::env::var_os("CUDA_HOME").map(PathBuf::from);
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
                    let Some(layout) = records::layout_for_major(lib_major) else {
                        tried.push(format!(
                            "{} (CUPTI {lib_major} is not supported: 12 and 13 are)",
                            c.path.display()
                        ));
                        continue;
                    };
                    let mut v: u32 = 0;
                    call!(cupti, cuptiGetVersion(&mut v));
                    let path = std::fs::canonicalize(&c.path).unwrap_or(c.path.clone());
                    return Ok(Collector {
                        cupti,
                        path,
                        source: c.source,
                        major: lib_major,
                        api_version: v,
                        layout,
                        subscriber: AtomicUsize::new(0),
                        runtime_api: opts.runtime_api,
                        api_activity: opts.api_activity,
                        driver_api: opts.driver_api,
                        cupti_flush_ms: opts.cupti_flush_ms.unwrap_or(opts.flush_ms),
                        per_thread_buffers: opts.per_thread_buffers,
                        device_buffer_mb: opts.device_buffer_mb,
                        zeroed_buffers: opts.zeroed_buffers,
                        activity: opts.activity.clone(),
                    });
                }
                Err(e) => tried.push(format!("{}: {e}", c.path.display())),
            }
        }
        Err(format!(
            "no usable CUPTI library; tried: {}",
            tried.join("; ")
        ))
    }

    fn result_string(&self, r: sys::CUptiResult) -> String {
        sys::result_string(&self.cupti, r)
    }

    /// Switches collection on: buffers, activity kinds, callbacks.
    pub fn start(&self) -> Result<(), String> {
        let _g = guard::Internal::enter();
        let r = call!(
            self.cupti,
            cuptiActivityRegisterCallbacks(Some(buffer_requested), Some(buffer_completed))
        );
        if r != OK {
            return Err(format!(
                "cuptiActivityRegisterCallbacks failed: {}",
                self.result_string(r)
            ));
        }
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
            let r = call!(self.cupti, cuptiActivityEnable(*kind));
            if r != OK {
                if *required {
                    return Err(format!(
                        "cuptiActivityEnable({name}) failed: {}",
                        self.result_string(r)
                    ));
                }
                log::debug(&format!(
                    "activity kind {name} not available: {}",
                    self.result_string(r)
                ));
            }
        }
        if self.api_activity {
            self.enable_runtime_activity();
        }
        // We hand CUPTI buffers that are already zero (cleared on the writer thread when
        // recycled), so CUPTI need not clear them on the application's thread.
        let accepted = self.zeroed_buffers && self.promise_zeroed_buffers(true);
        lock(&POOL).zeroed = accepted;
        // Ask CUPTI to hand over partly filled buffers, so a killed process loses at
        // most about one flush period of GPU records.
        let _ = call!(
            self.cupti,
            cuptiActivityFlushPeriod(self.cupti_flush_ms as u32)
        );
        if self.runtime_api || self.driver_api {
            self.subscribe();
        }
        Ok(())
    }

    /// RUNTIME activity for the callback ids of apis.rs only (CUPTI records every
    /// runtime call once the kind is on, so the others are switched off one by one).
    fn enable_runtime_activity(&self) {
        let kind = sys::CUpti_ActivityKind_CUPTI_ACTIVITY_KIND_RUNTIME;
        let r = call!(self.cupti, cuptiActivityEnable(kind));
        if r != OK {
            log::warn(&format!(
                "cuptiActivityEnable(RUNTIME) failed: {}",
                self.result_string(r)
            ));
            return;
        }
        let n = sys::CUpti_runtime_api_trace_cbid_enum_CUPTI_RUNTIME_TRACE_CBID_SIZE;
        let mut refused = 0;
        for cbid in 1..n {
            let on = apis::find(DOMAIN_RUNTIME, cbid).is_some() as u8;
            if call!(self.cupti, cuptiActivityEnableRuntimeApi(cbid, on)) != OK {
                refused += 1;
            }
        }
        if refused > 0 {
            log::debug(&format!(
                "cuptiActivityEnableRuntimeApi refused {refused} of {} ids",
                n - 1
            ));
        }
        crate::sym::note_cupti_callbacks(true);
    }

    /// Sets one process-wide CUPTI activity attribute; true if CUPTI accepted it.
    fn set_attribute(&self, attr: sys::CUpti_ActivityAttribute, value: &[u8]) -> bool {
        let mut v = value.to_vec();
        let mut sz = v.len();
        let r = call!(
            self.cupti,
            cuptiActivitySetAttribute(attr, &mut sz, v.as_mut_ptr() as *mut c_void)
        );
        r == OK
    }

    /// Subscribes for the API callbacks if we are not subscribed (the program's own
    /// subscriber, which kept us out, may have gone).
    pub fn ensure_subscribed(&self) {
        if (self.runtime_api || self.driver_api) && self.subscriber.load(Ordering::Acquire) == 0 {
            let _g = guard::Internal::enter();
            self.subscribe();
        }
    }

    fn subscribe(&self) {
        let mut sub: sys::CUpti_SubscriberHandle = std::ptr::null_mut();
        let r = call!(
            self.cupti,
            cuptiSubscribe(&mut sub, Some(api_callback), std::ptr::null_mut())
        );
        if r != OK {
            // Said once: after a profiler session, this may repeat at every resume.
            static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
            let msg = format!(
                "CUPTI callbacks unavailable ({}); recording GPU activity without host API calls until the other subscriber leaves",
                self.result_string(r)
            );
            if SAID.swap(true, Ordering::Relaxed) {
                log::debug(&msg);
            } else {
                log::warn(&msg);
            }
            return;
        }
        self.subscriber.store(sub as usize, Ordering::Release);
        let enable = |domain, table: &[apis::ApiInfo]| {
            for a in table {
                let r = call!(self.cupti, cuptiEnableCallback(1, sub, domain, a.cbid));
                if r != OK {
                    log::debug(&format!(
                        "callback {} not enabled: {}",
                        a.name,
                        self.result_string(r)
                    ));
                }
            }
        };
        if self.runtime_api {
            enable(
                sys::CUpti_CallbackDomain_CUPTI_CB_DOMAIN_RUNTIME_API,
                apis::RUNTIME,
            );
        }
        if self.driver_api {
            enable(
                sys::CUpti_CallbackDomain_CUPTI_CB_DOMAIN_DRIVER_API,
                apis::DRIVER,
            );
        }
        // The symbol hooks leave to CUPTI what it now records (sym/mod.rs).
        crate::sym::note_cupti_callbacks(self.runtime_api);
    }

    /// Hands every finished record to the writer.
    pub fn flush(&self, forced: bool) {
        let _g = guard::Internal::enter();
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
        {
            let _g = guard::Internal::enter();
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
        let _g = guard::Internal::enter();
        // Drops are read when a buffer completes; those after the last completion (the
        // pool empty to the end) are read here, from the global queue.
        let n = self.dropped_records(std::ptr::null_mut(), 0);
        if n > 0 {
            CUPTI_DROPPED.fetch_add(n, Ordering::Relaxed);
        }
        // The zeroed-buffer promise is process-wide: withdraw it, since a program that
        // takes CUPTI next hands over buffers of its own, not cleared by us.
        if lock(&POOL).zeroed {
            self.promise_zeroed_buffers(false);
        }
        // Before unsubscribing: a call in between is recorded twice rather than never.
        crate::sym::note_cupti_callbacks(false);
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
            let r0 = now_ns();
            let mono = crate::clock::mono_ns();
            call!(self.cupti, cuptiGetTimestamp(&mut t));
            let r1 = now_ns();
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
    /// to stay slower after profiling ended when CUPTI was left initialised.
    pub fn finalize(&self) {
        let _g = guard::Internal::enter();
        let r = call!(self.cupti, cuptiFinalize());
        if r != OK {
            log::debug(&format!("cuptiFinalize: {}", self.result_string(r)));
        }
    }

    /// Device properties from the driver API, for traces that start after the CUDA
    /// context exists (CUPTI's DEVICE records come only at context creation).
    pub fn emit_device_properties(&self) {
        for (d, name) in driver_devices() {
            writer::push_device(d, name);
        }
    }

    /// Records CUPTI lost for one context/stream buffer.
    fn dropped_records(&self, ctx: sys::CUcontext, stream: u32) -> u64 {
        let mut n: usize = 0;
        let r = call!(
            self.cupti,
            cuptiActivityGetNumDroppedRecords(ctx, stream, &mut n)
        );
        if r == OK {
            n as u64
        } else {
            0
        }
    }
}

/// Every device's properties, read through the driver API (empty if it is not loaded).
fn driver_devices() -> Vec<(gputrace_format::Device, String)> {
    let Ok(h) = discover::dlopen(
        std::path::Path::new("libcuda.so.1"),
        libc::RTLD_NOLOAD | libc::RTLD_LAZY,
    ) else {
        return Vec::new();
    };
    let sym = |n: &std::ffi::CStr| {
        // SAFETY: valid handle and NUL-terminated name.
        let p = unsafe { libc::dlsym(h, n.as_ptr()) };
        (!p.is_null()).then_some(p)
    };
    let (Some(count), Some(get), Some(attr), Some(name), Some(mem)) = (
        sym(c"cuDeviceGetCount"),
        sym(c"cuDeviceGet"),
        sym(c"cuDeviceGetAttribute"),
        sym(c"cuDeviceGetName"),
        sym(c"cuDeviceTotalMem_v2"),
    ) else {
        return Vec::new();
    };
    // SAFETY: these are the driver API's C signatures (CUresult is an int, CUdevice an int).
    let (count, get, attr, name, mem) = unsafe {
        (
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut i32) -> i32>(count),
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut i32, i32) -> i32>(get),
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut i32, i32, i32) -> i32>(
                attr,
            ),
            std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(*mut libc::c_char, i32, i32) -> i32,
            >(name),
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut usize, i32) -> i32>(mem),
        )
    };
    let mut n = 0;
    // SAFETY: valid out-pointer.
    if unsafe { count(&mut n) } != 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for i in 0..n.clamp(0, 64) {
        let mut dev = 0;
        // SAFETY: valid out-pointer and ordinal.
        if unsafe { get(&mut dev, i) } != 0 {
            continue;
        }
        // CUdevice_attribute values from the driver API.
        let a = |id: i32| {
            let mut v = 0;
            // SAFETY: valid out-pointer, attribute id and device.
            unsafe { attr(&mut v, id, dev) };
            v.max(0) as u32
        };
        let mut buf = [0 as libc::c_char; 256];
        // SAFETY: the buffer is writable for its length.
        unsafe { name(buf.as_mut_ptr(), buf.len() as i32 - 1, dev) };
        // SAFETY: zero-initialised and length-limited, so NUL-terminated.
        let nm = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let mut bytes = 0usize;
        // SAFETY: valid out-pointer.
        unsafe { mem(&mut bytes, dev) };
        let warp = a(10).max(1);
        out.push((
            gputrace_format::Device {
                id: i as u32,
                name: 0,
                sm_count: a(16),
                max_blocks_per_sm: a(106),
                max_threads_per_sm: a(39),
                max_warps_per_sm: a(39) / warp,
                global_memory: bytes as u64,
                cc_major: a(75),
                cc_minor: a(76),
                max_regs_per_sm: a(82),
                max_smem_per_sm: a(81),
            },
            nm,
        ));
    }
    out
}

/// The driver's major CUDA version, for processes that use the driver API only.
fn driver_major() -> Option<u32> {
    let h = discover::dlopen(
        std::path::Path::new("libcuda.so.1"),
        libc::RTLD_NOLOAD | libc::RTLD_LAZY,
    )
    .ok()?;
    // SAFETY: `h` is a valid handle; the name is a NUL-terminated literal.
    let f = unsafe { libc::dlsym(h, c"cuDriverGetVersion".as_ptr()) };
    if f.is_null() {
        return None;
    }
    // SAFETY: cuDriverGetVersion(int*) -> CUresult, per the CUDA driver API.
    let f: unsafe extern "C" fn(*mut i32) -> i32 = unsafe { std::mem::transmute(f) };
    let mut v = 0;
    // SAFETY: `v` is a valid out-pointer.
    if unsafe { f(&mut v) } != 0 || v <= 0 {
        return None;
    }
    Some(v as u32 / 1000)
}

// ---------------------------------------------------------------------------------
// The active collector and the buffer pool.

static ACTIVE: std::sync::atomic::AtomicPtr<Collector> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

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
/// Only try_lock here: a parent thread may have held a lock at the fork, and in the
/// child it would never be released. The buffers themselves are leaked.
pub fn forget_after_fork() {
    ACTIVE.store(std::ptr::null_mut(), Ordering::Release);
    if let Ok(mut p) = POOL.try_lock() {
        p.free.clear();
        p.ours.clear();
    }
    if let Ok(mut c) = COMPLETED.try_lock() {
        c.clear();
    }
}

#[derive(Default)]
struct Pool {
    free: Vec<usize>,
    ours: Vec<usize>,
    buffer_bytes: usize,
    cap_bytes: usize,
    /// CUPTI expects zeroed buffers from us (ZEROED_OUT_ACTIVITY_BUFFER accepted).
    zeroed: bool,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    free: Vec::new(),
    ours: Vec::new(),
    buffer_bytes: 0,
    cap_bytes: 0,
    zeroed: false,
});

/// Completed buffers waiting for the writer: (address, valid bytes).
pub static COMPLETED: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());
/// Records CUPTI reported dropped, and buffer requests we could not serve.
pub static CUPTI_DROPPED: AtomicU64 = AtomicU64::new(0);
pub static POOL_EXHAUSTED: AtomicU64 = AtomicU64::new(0);

pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sets the buffer size and cap, and allocates two zeroed buffers up front, off the
/// application's launch path.
pub fn configure_pool(buffer_bytes: usize, cap_bytes: usize) {
    let mut p = lock(&POOL);
    p.buffer_bytes = buffer_bytes;
    p.cap_bytes = cap_bytes;
    for _ in 0..2 {
        if (p.ours.len() + 1) * p.buffer_bytes > p.cap_bytes {
            break;
        }
        match alloc_zeroed(buffer_bytes) {
            Some(a) => {
                p.ours.push(a);
                p.free.push(a);
            }
            None => break,
        }
    }
}

fn alloc_zeroed(bytes: usize) -> Option<usize> {
    let mut m: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid out-pointer; alignment 8 is what CUPTI requires.
    if unsafe { libc::posix_memalign(&mut m, 8, bytes) } != 0 || m.is_null() {
        return None;
    }
    // SAFETY: `m` is a fresh allocation of `bytes` bytes.
    unsafe { std::ptr::write_bytes(m as *mut u8, 0, bytes) };
    Some(m as usize)
}

/// Returns a buffer to the pool once the writer has read its first `valid` bytes,
/// clearing them (the rest was never written) so it goes back to CUPTI zeroed.
pub fn recycle(addr: usize, valid: usize) {
    let (ours, size, zeroed) = {
        let p = lock(&POOL);
        (p.ours.contains(&addr), p.buffer_bytes, p.zeroed)
    };
    if !ours {
        // A buffer another CUPTI client requested, completed to us after we took the
        // callbacks back: read, never freed or reused.
        return;
    }
    if zeroed {
        // SAFETY: `addr` is one of our buffers of `size` bytes, handed back by CUPTI and
        // used by no one but this thread until it is on the free list again.
        unsafe { std::ptr::write_bytes(addr as *mut u8, 0, valid.min(size)) };
    }
    lock(&POOL).free.push(addr);
}

unsafe extern "C" fn buffer_requested(buf: *mut *mut u8, size: *mut usize, max: *mut usize) {
    let r = std::panic::catch_unwind(|| {
        let mut p = lock(&POOL);
        let addr = match p.free.pop() {
            Some(a) => a,
            None if (p.ours.len() + 1) * p.buffer_bytes <= p.cap_bytes => {
                match alloc_zeroed(p.buffer_bytes) {
                    Some(a) => {
                        p.ours.push(a);
                        a
                    }
                    None => 0,
                }
            }
            None => 0,
        };
        (addr, p.buffer_bytes)
    });
    let (addr, bytes) = r.unwrap_or((0, 0));
    if addr == 0 {
        POOL_EXHAUSTED.fetch_add(1, Ordering::Relaxed);
    }
    // SAFETY: CUPTI passes valid out-pointers.
    unsafe {
        *buf = addr as *mut u8;
        *size = if addr == 0 { 0 } else { bytes };
        *max = 0;
    }
}

unsafe extern "C" fn buffer_completed(
    ctx: sys::CUcontext,
    stream: u32,
    buf: *mut u8,
    _size: usize,
    valid: usize,
) {
    let _ = std::panic::catch_unwind(|| {
        if let Some(c) = active() {
            let n = c.dropped_records(ctx, stream);
            if n > 0 {
                CUPTI_DROPPED.fetch_add(n, Ordering::Relaxed);
            }
        }
        if buf.is_null() {
            return;
        }
        // No parsing here: the writer thread decodes the records.
        lock(&COMPLETED).push((buf as usize, valid));
        writer::wake();
    });
}

/// The CUPTI callback for the API calls we enabled: enter time on ENTER, one ring
/// record on EXIT.
unsafe extern "C" fn api_callback(
    _userdata: *mut c_void,
    domain: sys::CUpti_CallbackDomain,
    cbid: sys::CUpti_CallbackId,
    data: *const c_void,
) {
    if !crate::state::is_tracing() || data.is_null() || guard::is_internal() {
        return;
    }
    // SAFETY: for the runtime and driver domains CUPTI passes a CUpti_CallbackData,
    // valid for the duration of the callback.
    let d = unsafe { &*(data as *const sys::CUpti_CallbackData) };
    if d.correlationData.is_null() {
        return;
    }
    // Hook stamps (TSC where the kernel trusts it, else CLOCK_REALTIME; the writer
    // converts them), the cheaper clock on the program's launch path.
    if d.callbackSite == sys::CUpti_ApiCallbackSite_CUPTI_API_ENTER {
        // SAFETY: correlationData is a per-call u64 slot CUPTI keeps from ENTER to EXIT.
        unsafe { *d.correlationData = crate::sym::tsc::stamp() };
        return;
    }
    let end = crate::sym::tsc::stamp();
    // SAFETY: as above; written by our ENTER callback of the same call.
    let start = unsafe { *d.correlationData };
    let dom = if domain == sys::CUpti_CallbackDomain_CUPTI_CB_DOMAIN_DRIVER_API {
        DOMAIN_DRIVER
    } else {
        DOMAIN_RUNTIME
    };
    let (bytes, arg) = match apis::find(dom, cbid) {
        // SAFETY: functionParams is the parameter struct of exactly this call.
        Some(info) => unsafe { apis::extract(info, d.functionParams as *const u8) },
        None => (0, 0),
    };
    let result = if d.functionReturnValue.is_null() {
        0
    } else {
        // SAFETY: at EXIT, functionReturnValue points to the call's return code.
        unsafe { *(d.functionReturnValue as *const i32) as u32 as u64 }
    };
    let t = tid();
    ring::push(&HostRecord {
        kind: REC_API,
        a: dom as u16,
        b: cbid,
        tid: t,
        corr: d.correlationId,
        t0: start,
        t1: end,
        x: [bytes, arg, result, 0],
    });
}

/// Records a state change for the writer to put in the trace.
pub fn note_state(state: CollectorState, reason: &str) {
    note_state_at(now_ns(), state, reason);
}

/// Records a state change that happened at `ts` (CLOCK_REALTIME ns).
pub fn note_state_at(ts: u64, state: CollectorState, reason: &str) {
    writer::push_state(ts, state, reason);
}
