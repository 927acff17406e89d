//! CUDA runtime hooks: copies (classified pinned / pageable), syncs, memsets, launches,
//! and the pinned host memory calls that feed the registry.
//!
//! Signatures are declared here from the CUDA runtime headers with plain C integer and
//! pointer types: `cudaError_t` and `cudaMemcpyKind` are C enums, and receiving a value
//! a Rust enum does not list (a newer runtime's error code) would be undefined
//! behaviour, so they are `c_int` here (which is also why cudarc's enum-typed
//! bindings are not used for hook signatures).

#![allow(non_snake_case)] // the exported names are the C API's

use super::resolve::{real, CUDART};
use super::{keep_registries, pinned, recording, run, run_at, Entry, Scope, Site};
use crate::base::ffi::{entry, errno, guarded, guarded_value, set_errno};
use crate::base::tsc;
use crate::rings::{self as ring, record as rec};
use gputrace_format::{self as fmt, CopyKind, MemKind};
use std::ffi::{c_int, c_uint, c_void};

pub type CudaError = c_int;
pub type Stream = *mut c_void;

/// `dim3`, passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dim3 {
    pub x: c_uint,
    pub y: c_uint,
    pub z: c_uint,
}

impl Dim3 {
    fn volume(self) -> u64 {
        self.x as u64 * self.y as u64 * self.z as u64
    }
}

/// The leading fields of `cudaLaunchConfig_t` (the ones read here).
#[repr(C)]
pub struct LaunchConfig {
    pub grid: Dim3,
    pub block: Dim3,
    pub dynamic_smem: usize,
    pub stream: Stream,
    pub attrs: *mut c_void,
    pub num_attrs: c_uint,
}

/// `cudaMemcpyKind` to the trace's copy direction.
pub fn copy_kind(kind: c_int) -> CopyKind {
    match kind {
        pinned::HOST_TO_HOST => CopyKind::HtoH,
        pinned::HOST_TO_DEVICE => CopyKind::HtoD,
        pinned::DEVICE_TO_HOST => CopyKind::DtoH,
        pinned::DEVICE_TO_DEVICE => CopyKind::DtoD,
        _ => CopyKind::Unknown,
    }
}

struct Copy {
    api: u8,
    kind: Option<c_int>,
    dst: u64,
    src: u64,
    bytes: u64,
    stream: Stream,
    devices: Option<(c_int, c_int)>,
}

#[inline(always)]
fn record_copy(e: &Entry, t1: u64, r: CudaError, c: Copy) {
    let (copy_kind, host_kind) = match (c.kind, c.devices) {
        (Some(k), _) => (copy_kind(k), pinned::classify(k, c.dst, c.src)),
        (None, _) => (CopyKind::PtoP, MemKind::Device),
    };
    let is_async = matches!(
        c.api,
        fmt::HOSTCOPY_MEMCPY_ASYNC
            | fmt::HOSTCOPY_MEMCPY_2D_ASYNC
            | fmt::HOSTCOPY_MEMCPY_PEER_ASYNC
    );
    let flags = if is_async {
        fmt::HOSTCOPY_FLAG_ASYNC
    } else {
        0
    } | if e.cupti {
        fmt::HOSTCOPY_FLAG_CUPTI_API
    } else {
        0
    };
    let (dst_device, src_device) = c
        .devices
        .map(|(d, s)| (d as u32, s as u32))
        .unwrap_or((u32::MAX, u32::MAX));
    ring::push(&rec::copy(&fmt::HostCopy {
        start: e.t0,
        end: t1,
        tid: e.tid,
        api: c.api,
        copy_kind: copy_kind as u8,
        host_kind: host_kind as u8,
        source: fmt::CLASS_SOURCE_REGISTRY,
        flags,
        bytes: c.bytes,
        stream: c.stream as u64,
        dst: c.dst,
        src: c.src,
        dst_device,
        src_device,
        result: r as u32,
    }));
}

#[inline(always)]
fn record_call(e: &Entry, t1: u64, r: CudaError, call: u16, stream: Stream, args: [u64; 3]) {
    ring::push(&rec::call(&fmt::HostCall {
        start: e.t0,
        end: t1,
        tid: e.tid,
        call,
        stream: stream as u64,
        arg0: args[0],
        arg1: args[1],
        arg2: args[2],
        result: r as u32,
    }));
}

// ---------------------------------------------------------------------------------
// Copies.

/// # Safety
/// Called by C code with the arguments of the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaMemcpy(
    dst: *mut c_void,
    src: *const c_void,
    count: usize,
    kind: c_int,
) -> CudaError {
    entry!(CUDART.missing.0, {
        type F = unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> CudaError;
        let f = match real!(CUDART, c"cudaMemcpy", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        run_at(
            Site::UnlessCupti,
            false,
            // SAFETY: forwarding the caller's arguments unchanged.
            || unsafe { f(dst, src, count, kind) },
            |e, t1, r| {
                let c = Copy {
                    api: fmt::HOSTCOPY_MEMCPY,
                    kind: Some(kind),
                    dst: dst as u64,
                    src: src as u64,
                    bytes: count as u64,
                    stream: std::ptr::null_mut(),
                    devices: None,
                };
                record_copy(e, t1, r, c)
            },
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaMemcpyAsync(
    dst: *mut c_void,
    src: *const c_void,
    count: usize,
    kind: c_int,
    stream: Stream,
) -> CudaError {
    entry!(CUDART.missing.0, {
        type F =
            unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int, Stream) -> CudaError;
        let f = match real!(CUDART, c"cudaMemcpyAsync", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        run_at(
            Site::UnlessCupti,
            false,
            // SAFETY: forwarding the caller's arguments unchanged.
            || unsafe { f(dst, src, count, kind, stream) },
            |e, t1, r| {
                let c = Copy {
                    api: fmt::HOSTCOPY_MEMCPY_ASYNC,
                    kind: Some(kind),
                    dst: dst as u64,
                    src: src as u64,
                    bytes: count as u64,
                    stream,
                    devices: None,
                };
                record_copy(e, t1, r, c)
            },
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaMemcpy2D(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: c_int,
) -> CudaError {
    entry!(CUDART.missing.0, {
        type F = unsafe extern "C" fn(
            *mut c_void,
            usize,
            *const c_void,
            usize,
            usize,
            usize,
            c_int,
        ) -> CudaError;
        let f = match real!(CUDART, c"cudaMemcpy2D", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        run_at(
            Site::UnlessCupti,
            false,
            // SAFETY: forwarding the caller's arguments unchanged.
            || unsafe { f(dst, dpitch, src, spitch, width, height, kind) },
            |e, t1, r| {
                let c = Copy {
                    api: fmt::HOSTCOPY_MEMCPY_2D,
                    kind: Some(kind),
                    dst: dst as u64,
                    src: src as u64,
                    bytes: (width as u64).saturating_mul(height as u64),
                    stream: std::ptr::null_mut(),
                    devices: None,
                };
                record_copy(e, t1, r, c)
            },
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn cudaMemcpy2DAsync(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: c_int,
    stream: Stream,
) -> CudaError {
    entry!(CUDART.missing.0, {
        type F = unsafe extern "C" fn(
            *mut c_void,
            usize,
            *const c_void,
            usize,
            usize,
            usize,
            c_int,
            Stream,
        ) -> CudaError;
        let f = match real!(CUDART, c"cudaMemcpy2DAsync", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        run_at(
            Site::UnlessCupti,
            false,
            // SAFETY: forwarding the caller's arguments unchanged.
            || unsafe { f(dst, dpitch, src, spitch, width, height, kind, stream) },
            |e, t1, r| {
                let c = Copy {
                    api: fmt::HOSTCOPY_MEMCPY_2D_ASYNC,
                    kind: Some(kind),
                    dst: dst as u64,
                    src: src as u64,
                    bytes: (width as u64).saturating_mul(height as u64),
                    stream,
                    devices: None,
                };
                record_copy(e, t1, r, c)
            },
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaMemcpyPeer(
    dst: *mut c_void,
    dst_device: c_int,
    src: *const c_void,
    src_device: c_int,
    count: usize,
) -> CudaError {
    entry!(CUDART.missing.0, {
        type F = unsafe extern "C" fn(*mut c_void, c_int, *const c_void, c_int, usize) -> CudaError;
        let f = match real!(CUDART, c"cudaMemcpyPeer", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        run_at(
            Site::UnlessCupti,
            false,
            // SAFETY: forwarding the caller's arguments unchanged.
            || unsafe { f(dst, dst_device, src, src_device, count) },
            |e, t1, r| {
                let c = Copy {
                    api: fmt::HOSTCOPY_MEMCPY_PEER,
                    kind: None,
                    dst: dst as u64,
                    src: src as u64,
                    bytes: count as u64,
                    stream: std::ptr::null_mut(),
                    devices: Some((dst_device, src_device)),
                };
                record_copy(e, t1, r, c)
            },
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaMemcpyPeerAsync(
    dst: *mut c_void,
    dst_device: c_int,
    src: *const c_void,
    src_device: c_int,
    count: usize,
    stream: Stream,
) -> CudaError {
    entry!(CUDART.missing.0, {
        type F = unsafe extern "C" fn(
            *mut c_void,
            c_int,
            *const c_void,
            c_int,
            usize,
            Stream,
        ) -> CudaError;
        let f = match real!(CUDART, c"cudaMemcpyPeerAsync", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        run_at(
            Site::UnlessCupti,
            false,
            // SAFETY: forwarding the caller's arguments unchanged.
            || unsafe { f(dst, dst_device, src, src_device, count, stream) },
            |e, t1, r| {
                let c = Copy {
                    api: fmt::HOSTCOPY_MEMCPY_PEER_ASYNC,
                    kind: None,
                    dst: dst as u64,
                    src: src as u64,
                    bytes: count as u64,
                    stream,
                    devices: Some((dst_device, src_device)),
                };
                record_copy(e, t1, r, c)
            },
        )
    })
}

// ---------------------------------------------------------------------------------
// Memsets and syncs: recorded only while CUPTI's callbacks are not.

/// # Safety
/// Called by C code with the arguments of the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaMemset(dev: *mut c_void, value: c_int, count: usize) -> CudaError {
    entry!(CUDART.missing.0, {
        type F = unsafe extern "C" fn(*mut c_void, c_int, usize) -> CudaError;
        let f = match real!(CUDART, c"cudaMemset", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        run(
            true,
            // SAFETY: forwarding the caller's arguments unchanged.
            || unsafe { f(dev, value, count) },
            |e, t1, r| {
                let args = [count as u64, dev as u64, value as u32 as u64];
                record_call(e, t1, r, fmt::HOSTCALL_MEMSET, std::ptr::null_mut(), args)
            },
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaMemsetAsync(
    dev: *mut c_void,
    value: c_int,
    count: usize,
    stream: Stream,
) -> CudaError {
    entry!(CUDART.missing.0, {
        type F = unsafe extern "C" fn(*mut c_void, c_int, usize, Stream) -> CudaError;
        let f = match real!(CUDART, c"cudaMemsetAsync", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        run(
            true,
            // SAFETY: forwarding the caller's arguments unchanged.
            || unsafe { f(dev, value, count, stream) },
            |e, t1, r| {
                let args = [count as u64, dev as u64, value as u32 as u64];
                record_call(e, t1, r, fmt::HOSTCALL_MEMSET_ASYNC, stream, args)
            },
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaStreamSynchronize(stream: Stream) -> CudaError {
    entry!(CUDART.missing.0, {
        type F = unsafe extern "C" fn(Stream) -> CudaError;
        let f = match real!(CUDART, c"cudaStreamSynchronize", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        run_at(
            Site::UnlessCupti,
            true,
            // SAFETY: forwarding the caller's argument unchanged.
            || unsafe { f(stream) },
            |e, t1, r| record_call(e, t1, r, fmt::HOSTCALL_STREAM_SYNCHRONIZE, stream, [0; 3]),
        )
    })
}

/// # Safety
/// Called by C code (no arguments).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaDeviceSynchronize() -> CudaError {
    entry!(CUDART.missing.0, {
        type F = unsafe extern "C" fn() -> CudaError;
        let f = match real!(CUDART, c"cudaDeviceSynchronize", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        run_at(
            Site::UnlessCupti,
            true,
            // SAFETY: no arguments.
            || unsafe { f() },
            |e, t1, r| {
                let s = std::ptr::null_mut();
                record_call(e, t1, r, fmt::HOSTCALL_DEVICE_SYNCHRONIZE, s, [0; 3])
            },
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaEventSynchronize(event: *mut c_void) -> CudaError {
    entry!(CUDART.missing.0, {
        type F = unsafe extern "C" fn(*mut c_void) -> CudaError;
        let f = match real!(CUDART, c"cudaEventSynchronize", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        run_at(
            Site::UnlessCupti,
            true,
            // SAFETY: forwarding the caller's argument unchanged.
            || unsafe { f(event) },
            |e, t1, r| {
                let (s, args) = (std::ptr::null_mut(), [event as u64, 0, 0]);
                record_call(e, t1, r, fmt::HOSTCALL_EVENT_SYNCHRONIZE, s, args)
            },
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaStreamWaitEvent(
    stream: Stream,
    event: *mut c_void,
    flags: c_uint,
) -> CudaError {
    entry!(CUDART.missing.0, {
        type F = unsafe extern "C" fn(Stream, *mut c_void, c_uint) -> CudaError;
        let f = match real!(CUDART, c"cudaStreamWaitEvent", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        run(
            true,
            // SAFETY: forwarding the caller's arguments unchanged.
            || unsafe { f(stream, event, flags) },
            |e, t1, r| {
                let args = [event as u64, flags as u64, 0];
                record_call(e, t1, r, fmt::HOSTCALL_STREAM_WAIT_EVENT, stream, args)
            },
        )
    })
}

// ---------------------------------------------------------------------------------
// Launches: a cheap host-side signal (kernels themselves come from CUPTI).

/// # Safety
/// Called by C code (nvcc's `<<<>>>` stubs) with the arguments of the CUDA runtime
/// function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __cudaLaunchKernel(
    kernel: *const c_void,
    grid: Dim3,
    block: Dim3,
    args: *mut *mut c_void,
    shared: usize,
    stream: Stream,
) -> CudaError {
    entry!(CUDART.missing.0, {
        type F = unsafe extern "C" fn(
            *const c_void,
            Dim3,
            Dim3,
            *mut *mut c_void,
            usize,
            Stream,
        ) -> CudaError;
        let f = match real!(CUDART, c"__cudaLaunchKernel", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        run(
            true,
            // SAFETY: forwarding the caller's arguments unchanged.
            || unsafe { f(kernel, grid, block, args, shared, stream) },
            |e, t1, r| {
                let a = [kernel as u64, grid.volume(), block.volume()];
                record_call(e, t1, r, fmt::HOSTCALL_LAUNCH_KERNEL_STUB, stream, a)
            },
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaLaunchKernel(
    func: *const c_void,
    grid: Dim3,
    block: Dim3,
    args: *mut *mut c_void,
    shared: usize,
    stream: Stream,
) -> CudaError {
    entry!(CUDART.missing.0, {
        type F = unsafe extern "C" fn(
            *const c_void,
            Dim3,
            Dim3,
            *mut *mut c_void,
            usize,
            Stream,
        ) -> CudaError;
        let f = match real!(CUDART, c"cudaLaunchKernel", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        run(
            true,
            // SAFETY: forwarding the caller's arguments unchanged.
            || unsafe { f(func, grid, block, args, shared, stream) },
            |e, t1, r| {
                let a = [func as u64, grid.volume(), block.volume()];
                record_call(e, t1, r, fmt::HOSTCALL_LAUNCH_KERNEL, stream, a)
            },
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaLaunchKernelExC(
    config: *const LaunchConfig,
    func: *const c_void,
    args: *mut *mut c_void,
) -> CudaError {
    entry!(CUDART.missing.0, {
        type F =
            unsafe extern "C" fn(*const LaunchConfig, *const c_void, *mut *mut c_void) -> CudaError;
        let f = match real!(CUDART, c"cudaLaunchKernelExC", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        run(
            true,
            // SAFETY: forwarding the caller's arguments unchanged.
            || unsafe { f(config, func, args) },
            |e, t1, r| {
                // Read only after the runtime accepted it (a bad pointer is refused).
                let (stream, a) = if config.is_null() || r != 0 {
                    (std::ptr::null_mut(), [func as u64, 0, 0])
                } else {
                    // SAFETY: a config the runtime accepted is the caller's valid
                    // cudaLaunchConfig_t, which outlives the call.
                    let c = unsafe { &*config };
                    (c.stream, [func as u64, c.grid.volume(), c.block.volume()])
                };
                record_call(e, t1, r, fmt::HOSTCALL_LAUNCH_KERNEL_EXC, stream, a)
            },
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaGraphLaunch(exec: *mut c_void, stream: Stream) -> CudaError {
    entry!(CUDART.missing.0, {
        type F = unsafe extern "C" fn(*mut c_void, Stream) -> CudaError;
        let f = match real!(CUDART, c"cudaGraphLaunch", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        run(
            true,
            // SAFETY: forwarding the caller's arguments unchanged.
            || unsafe { f(exec, stream) },
            |e, t1, r| {
                record_call(
                    e,
                    t1,
                    r,
                    fmt::HOSTCALL_GRAPH_LAUNCH,
                    stream,
                    [exec as u64, 0, 0],
                )
            },
        )
    })
}

// ---------------------------------------------------------------------------------
// Pinned host memory: the registry is kept in every state but DISABLED, so a trace
// window opened later still classifies copies from memory pinned before it.

/// Memory made pinned: added to the registry once the call has succeeded.
#[inline]
fn made(
    op: u8,
    bytes: usize,
    flags: c_uint,
    call: impl FnOnce() -> CudaError,
    ptr_after: impl FnOnce() -> u64,
) -> CudaError {
    if !keep_registries() {
        return call();
    }
    let Some(scope) = Scope::enter() else {
        return call();
    };
    let t0 = tsc::stamp();
    let r = call();
    let t1 = tsc::stamp();
    let saved = errno();
    guarded(|| {
        let ptr = if r == 0 { ptr_after() } else { 0 };
        if r == 0 {
            pinned::insert(ptr, bytes as u64);
        }
        if recording() {
            ring::push(&rec::host_alloc(&fmt::HostAlloc {
                start: t0,
                end: t1,
                tid: scope.tid(),
                op,
                ptr,
                bytes: bytes as u64,
                flags,
                result: r as u32,
            }));
        }
    });
    drop(scope);
    set_errno(saved);
    r
}

/// Memory given back: taken out of the registry before the call (so an allocation
/// that reuses the address at once is not lost), put back if the call fails.
#[inline]
fn released(op: u8, ptr: *mut c_void, call: impl FnOnce() -> CudaError) -> CudaError {
    if !keep_registries() {
        return call();
    }
    let Some(scope) = Scope::enter() else {
        return call();
    };
    let t0 = tsc::stamp();
    let had = guarded_value(|| pinned::remove(ptr as u64));
    let r = call();
    let t1 = tsc::stamp();
    let saved = errno();
    guarded(|| {
        if r != 0 {
            if let Some(b) = had {
                pinned::insert(ptr as u64, b);
            }
        }
        if recording() {
            ring::push(&rec::host_alloc(&fmt::HostAlloc {
                start: t0,
                end: t1,
                tid: scope.tid(),
                op,
                ptr: ptr as u64,
                bytes: had.unwrap_or(0),
                flags: 0,
                result: r as u32,
            }));
        }
    });
    drop(scope);
    set_errno(saved);
    r
}

/// # Safety
/// Called by C code with the arguments of the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaHostAlloc(
    p_host: *mut *mut c_void,
    size: usize,
    flags: c_uint,
) -> CudaError {
    entry!(CUDART.missing.0, {
        type F = unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> CudaError;
        let f = match real!(CUDART, c"cudaHostAlloc", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        made(
            fmt::HOSTALLOC_HOST_ALLOC,
            size,
            flags,
            // SAFETY: forwarding the caller's arguments unchanged.
            || unsafe { f(p_host, size, flags) },
            // SAFETY: on success the runtime stored the new pointer through p_host.
            || unsafe { p_host.as_ref().map_or(0, |p| *p as u64) },
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaMallocHost(ptr: *mut *mut c_void, size: usize) -> CudaError {
    entry!(CUDART.missing.0, {
        type F = unsafe extern "C" fn(*mut *mut c_void, usize) -> CudaError;
        let f = match real!(CUDART, c"cudaMallocHost", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        made(
            fmt::HOSTALLOC_MALLOC_HOST,
            size,
            0,
            // SAFETY: forwarding the caller's arguments unchanged.
            || unsafe { f(ptr, size) },
            // SAFETY: on success the runtime stored the new pointer through ptr.
            || unsafe { ptr.as_ref().map_or(0, |p| *p as u64) },
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaHostRegister(
    ptr: *mut c_void,
    size: usize,
    flags: c_uint,
) -> CudaError {
    entry!(CUDART.missing.0, {
        type F = unsafe extern "C" fn(*mut c_void, usize, c_uint) -> CudaError;
        let f = match real!(CUDART, c"cudaHostRegister", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        made(
            fmt::HOSTALLOC_HOST_REGISTER,
            size,
            flags,
            // SAFETY: forwarding the caller's arguments unchanged.
            || unsafe { f(ptr, size, flags) },
            || ptr as u64,
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaHostUnregister(ptr: *mut c_void) -> CudaError {
    entry!(CUDART.missing.0, {
        type F = unsafe extern "C" fn(*mut c_void) -> CudaError;
        let f = match real!(CUDART, c"cudaHostUnregister", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        released(
            fmt::HOSTALLOC_HOST_UNREGISTER,
            ptr,
            // SAFETY: forwarding the caller's argument unchanged.
            || unsafe { f(ptr) },
        )
    })
}

/// # Safety
/// Called by C code with the arguments of the CUDA runtime function of the same name.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaFreeHost(ptr: *mut c_void) -> CudaError {
    entry!(CUDART.missing.0, {
        type F = unsafe extern "C" fn(*mut c_void) -> CudaError;
        let f = match real!(CUDART, c"cudaFreeHost", F) {
            Ok(f) => f,
            Err(e) => return e,
        };
        released(
            fmt::HOSTALLOC_FREE_HOST,
            ptr,
            // SAFETY: forwarding the caller's argument unchanged.
            || unsafe { f(ptr) },
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcpy_kinds_map_to_trace_directions() {
        assert_eq!(copy_kind(0), CopyKind::HtoH);
        assert_eq!(copy_kind(1), CopyKind::HtoD);
        assert_eq!(copy_kind(2), CopyKind::DtoH);
        assert_eq!(copy_kind(3), CopyKind::DtoD);
        assert_eq!(copy_kind(4), CopyKind::Unknown);
        assert_eq!(copy_kind(-7), CopyKind::Unknown);
    }

    #[test]
    fn launch_config_has_the_runtime_layout() {
        assert_eq!(std::mem::offset_of!(LaunchConfig, block), 12);
        assert_eq!(std::mem::offset_of!(LaunchConfig, dynamic_smem), 24);
        assert_eq!(std::mem::offset_of!(LaunchConfig, stream), 32);
        assert_eq!(std::mem::offset_of!(LaunchConfig, num_attrs), 48);
        assert_eq!(std::mem::size_of::<Dim3>(), 12);
    }

    #[test]
    fn a_hook_without_its_library_returns_the_runtime_error_and_keeps_errno() {
        // No libcudart in the unit-test process.
        crate::base::ffi::set_errno(77);
        // SAFETY: the real function cannot be found, so nothing is dereferenced.
        let r = unsafe { cudaMemcpy(std::ptr::null_mut(), std::ptr::null(), 0, 1) };
        assert_eq!(r, 3);
        assert_eq!(crate::base::ffi::errno(), 77);
    }
}
