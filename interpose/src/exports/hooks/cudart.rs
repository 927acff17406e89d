//! CUDA runtime hooks: copies (classified pinned / pageable), syncs, memsets, launches,
//! and the pinned host memory calls that feed the registry.
//!
//! Signatures are declared here from the CUDA runtime headers with plain C integer and
//! pointer types: `cudaError_t` and `cudaMemcpyKind` are C enums, and receiving a value
//! a Rust enum does not list (a newer runtime's error code) would be undefined
//! behaviour, so they are `c_int` here (which is also why cudarc's enum-typed
//! bindings are not used for hook signatures).

#![allow(non_snake_case)] // the exported names are the C API's

use super::resolve::CUDART;
use super::{hook_table, pinned, recording, run, run_at, run_keeping, Action, Entry, Ran, Site};
use crate::base::ffi::guarded_value;
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
// The hooks.

hook_table! {
    CUDART;

    // Copies: the host side classified pinned / pageable, with or without CUPTI.
    extern "C" fn cudaMemcpy(
        dst: *mut c_void, src: *const c_void, count: usize, kind: c_int,
    ) -> CudaError;
        => Copy::new(fmt::HOSTCOPY_MEMCPY, dst, src, count as u64, kind, NO_STREAM);

    extern "C" fn cudaMemcpyAsync(
        dst: *mut c_void, src: *const c_void, count: usize, kind: c_int, stream: Stream,
    ) -> CudaError;
        => Copy::new(fmt::HOSTCOPY_MEMCPY_ASYNC, dst, src, count as u64, kind, stream);

    extern "C" fn cudaMemcpy2D(
        dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize,
        height: usize, kind: c_int,
    ) -> CudaError;
        => Copy::new(fmt::HOSTCOPY_MEMCPY_2D, dst, src, area(width, height), kind, NO_STREAM);

    extern "C" fn cudaMemcpy2DAsync(
        dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize,
        height: usize, kind: c_int, stream: Stream,
    ) -> CudaError;
        => Copy::new(fmt::HOSTCOPY_MEMCPY_2D_ASYNC, dst, src, area(width, height), kind, stream);

    extern "C" fn cudaMemcpyPeer(
        dst: *mut c_void, dst_device: c_int, src: *const c_void, src_device: c_int,
        count: usize,
    ) -> CudaError;
        => Copy::peer(fmt::HOSTCOPY_MEMCPY_PEER, (dst, dst_device), (src, src_device), count,
                      NO_STREAM);

    extern "C" fn cudaMemcpyPeerAsync(
        dst: *mut c_void, dst_device: c_int, src: *const c_void, src_device: c_int,
        count: usize, stream: Stream,
    ) -> CudaError;
        => Copy::peer(fmt::HOSTCOPY_MEMCPY_PEER_ASYNC, (dst, dst_device), (src, src_device),
                      count, stream);

    // Memsets and syncs: recorded only while CUPTI's callbacks are not.
    extern "C" fn cudaMemset(dev: *mut c_void, value: c_int, count: usize) -> CudaError;
        => Call::new(fmt::HOSTCALL_MEMSET, NO_STREAM,
                     [count as u64, dev as u64, value as u32 as u64]);

    extern "C" fn cudaMemsetAsync(
        dev: *mut c_void, value: c_int, count: usize, stream: Stream,
    ) -> CudaError;
        => Call::new(fmt::HOSTCALL_MEMSET_ASYNC, stream,
                     [count as u64, dev as u64, value as u32 as u64]);

    extern "C" fn cudaStreamSynchronize(stream: Stream) -> CudaError;
        => Call::sync(fmt::HOSTCALL_STREAM_SYNCHRONIZE, stream, [0; 3]);

    extern "C" fn cudaDeviceSynchronize() -> CudaError;
        => Call::sync(fmt::HOSTCALL_DEVICE_SYNCHRONIZE, NO_STREAM, [0; 3]);

    extern "C" fn cudaEventSynchronize(event: *mut c_void) -> CudaError;
        => Call::sync(fmt::HOSTCALL_EVENT_SYNCHRONIZE, NO_STREAM, [event as u64, 0, 0]);

    extern "C" fn cudaStreamWaitEvent(
        stream: Stream, event: *mut c_void, flags: c_uint,
    ) -> CudaError;
        => Call::new(fmt::HOSTCALL_STREAM_WAIT_EVENT, stream, [event as u64, flags as u64, 0]);

    // Launches: a cheap host-side signal (kernels themselves come from CUPTI).
    /// What nvcc's `<<<>>>` stubs call.
    extern "C" fn __cudaLaunchKernel(
        kernel: *const c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize,
        stream: Stream,
    ) -> CudaError;
        => Call::new(fmt::HOSTCALL_LAUNCH_KERNEL_STUB, stream,
                     [kernel as u64, grid.volume(), block.volume()]);

    extern "C" fn cudaLaunchKernel(
        func: *const c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize,
        stream: Stream,
    ) -> CudaError;
        => Call::new(fmt::HOSTCALL_LAUNCH_KERNEL, stream,
                     [func as u64, grid.volume(), block.volume()]);

    extern "C" fn cudaLaunchKernelExC(
        config: *const LaunchConfig, func: *const c_void, args: *mut *mut c_void,
    ) -> CudaError;
        => LaunchExC { config, func };

    extern "C" fn cudaGraphLaunch(exec: *mut c_void, stream: Stream) -> CudaError;
        => Call::new(fmt::HOSTCALL_GRAPH_LAUNCH, stream, [exec as u64, 0, 0]);

    // Pinned host memory, for the registry (pinned.rs).
    extern "C" fn cudaHostAlloc(p_host: *mut *mut c_void, size: usize, flags: c_uint) -> CudaError;
        => Pin { op: fmt::HOSTALLOC_HOST_ALLOC, at: Host::Out(p_host), bytes: size, flags };

    extern "C" fn cudaMallocHost(ptr: *mut *mut c_void, size: usize) -> CudaError;
        => Pin { op: fmt::HOSTALLOC_MALLOC_HOST, at: Host::Out(ptr), bytes: size, flags: 0 };

    extern "C" fn cudaHostRegister(ptr: *mut c_void, size: usize, flags: c_uint) -> CudaError;
        => Pin { op: fmt::HOSTALLOC_HOST_REGISTER, at: Host::At(ptr), bytes: size, flags };

    extern "C" fn cudaHostUnregister(ptr: *mut c_void) -> CudaError;
        => Unpin(fmt::HOSTALLOC_HOST_UNREGISTER, ptr);

    extern "C" fn cudaFreeHost(ptr: *mut c_void) -> CudaError;
        => Unpin(fmt::HOSTALLOC_FREE_HOST, ptr);
}

// ---------------------------------------------------------------------------------
// What the rows record. The values hold the hook's own arguments (pointers included,
// read as the CUDA runtime API defines them).

const NO_STREAM: Stream = std::ptr::null_mut();

/// The bytes a 2D copy moves.
fn area(width: usize, height: usize) -> u64 {
    (width as u64).saturating_mul(height as u64)
}

impl Copy {
    fn new(
        api: u8,
        dst: *mut c_void,
        src: *const c_void,
        bytes: u64,
        kind: c_int,
        stream: Stream,
    ) -> Copy {
        Copy {
            api,
            kind: Some(kind),
            dst: dst as u64,
            src: src as u64,
            bytes,
            stream,
            devices: None,
        }
    }

    /// A copy between two devices' memory: (pointer, device) each side.
    fn peer(
        api: u8,
        (dst, dst_device): (*mut c_void, c_int),
        (src, src_device): (*const c_void, c_int),
        count: usize,
        stream: Stream,
    ) -> Copy {
        Copy {
            kind: None,
            devices: Some((dst_device, src_device)),
            ..Copy::new(api, dst, src, count as u64, 0, stream)
        }
    }
}

/// A copy: recorded whether or not CUPTI's callbacks are on (the classification is
/// ours alone), with the caller's Python stack unless CUPTI takes it.
impl Action<CudaError> for Copy {
    #[inline(always)]
    fn run(self, call: impl FnOnce() -> CudaError) -> CudaError {
        run_at(Site::UnlessCupti, false, call, |e, t1, r| {
            record_copy(e, t1, r, self)
        })
    }
}

/// A memset, sync or launch (`HostCall`): recorded only while CUPTI's callbacks are
/// not; syncs with the caller's Python stack.
struct Call {
    call: u16,
    stream: Stream,
    args: [u64; 3],
    site: Site,
}

impl Call {
    fn new(call: u16, stream: Stream, args: [u64; 3]) -> Call {
        Call {
            call,
            stream,
            args,
            site: Site::No,
        }
    }

    fn sync(call: u16, stream: Stream, args: [u64; 3]) -> Call {
        Call {
            site: Site::UnlessCupti,
            ..Call::new(call, stream, args)
        }
    }
}

impl Action<CudaError> for Call {
    #[inline(always)]
    fn run(self, call: impl FnOnce() -> CudaError) -> CudaError {
        let Call {
            call: id,
            stream,
            args,
            site,
        } = self;
        run_at(site, true, call, |e, t1, r| {
            record_call(e, t1, r, id, stream, args)
        })
    }
}

/// `cudaLaunchKernelExC`: grid, block and stream are in its launch configuration.
struct LaunchExC {
    config: *const LaunchConfig,
    func: *const c_void,
}

impl Action<CudaError> for LaunchExC {
    #[inline(always)]
    fn run(self, call: impl FnOnce() -> CudaError) -> CudaError {
        let LaunchExC { config, func } = self;
        run(true, call, |e, t1, r| {
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
        })
    }
}

// Pinned host memory: the registry is kept in every state but DISABLED, so a trace
// window opened later still classifies copies from memory pinned before it.

/// Where the pinned memory's address is once the call has succeeded.
enum Host {
    /// Stored by the runtime through the caller's out-pointer.
    Out(*mut *mut c_void),
    /// The caller's own memory.
    At(*mut c_void),
}

/// Memory made pinned: added to the registry once the call has succeeded.
struct Pin {
    op: u8,
    at: Host,
    bytes: usize,
    flags: c_uint,
}

impl Action<CudaError> for Pin {
    #[inline]
    fn run(self, call: impl FnOnce() -> CudaError) -> CudaError {
        let Pin {
            op,
            at,
            bytes,
            flags,
        } = self;
        run_keeping(
            call,
            || (),
            |ran, (), r| {
                let ptr = match (r, at) {
                    (0, Host::At(p)) => p as u64,
                    // SAFETY: on success the runtime stored the new pointer through the
                    // caller's out-pointer (NULL: nothing read).
                    (0, Host::Out(p)) => unsafe { p.as_ref().map_or(0, |p| *p as u64) },
                    _ => 0,
                };
                if r == 0 {
                    pinned::insert(ptr, bytes as u64);
                }
                record_host_alloc(ran, op, ptr, bytes as u64, flags, r);
            },
        )
    }
}

/// Memory given back (op, pointer): taken out of the registry before the call (so an
/// allocation that reuses the address at once is not lost), put back if the call
/// fails.
struct Unpin(u8, *mut c_void);

impl Action<CudaError> for Unpin {
    #[inline]
    fn run(self, call: impl FnOnce() -> CudaError) -> CudaError {
        let Unpin(op, ptr) = self;
        let remove = || guarded_value(|| pinned::remove(ptr as u64));
        run_keeping(call, remove, |ran, had, r| {
            if r != 0 {
                if let Some(b) = had {
                    pinned::insert(ptr as u64, b);
                }
            }
            record_host_alloc(ran, op, ptr as u64, had.unwrap_or(0), 0, r);
        })
    }
}

fn record_host_alloc(ran: &Ran, op: u8, ptr: u64, bytes: u64, flags: c_uint, r: CudaError) {
    if recording() {
        ring::push(&rec::host_alloc(&fmt::HostAlloc {
            start: ran.t0,
            end: ran.t1,
            tid: ran.tid(),
            op,
            ptr,
            bytes,
            flags,
            result: r as u32,
        }));
    }
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
