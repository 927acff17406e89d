//! The CUDA API calls whose host side we record through CUPTI callbacks, and how to
//! read their arguments. Only these ids are enabled: enabling every runtime and driver
//! callback costs up to 2x on a launch-bound loop.
//!
//! Ids are CUPTI's `CUPTI_RUNTIME_TRACE_CBID_*` / `CUPTI_DRIVER_TRACE_CBID_*` values,
//! stable across CUPTI versions (new ids are only appended).

/// What a call does, for the analyzer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Launch,
    Memcpy,
    Memset,
    Sync,
    Alloc,
    /// CUDA graph set-up (instantiate, upload): rare calls, timed for the start-up cost.
    Graph,
}

/// Where the byte count and copy kind sit in the call's parameter struct.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Args {
    None,
    /// (dst, src, count, kind[, stream]): count at 16, kind at 24.
    Copy,
    /// (dst, dpitch, src, spitch, width, height, kind[, stream]).
    Copy2D,
    /// (dst, dstDevice, src, srcDevice, count[, stream]): count at 32.
    Peer,
    /// (devPtr, value, count[, stream]): count at 16.
    Set,
    /// (ptr*, size[, flags]): size at 8; the pointer made is written through the
    /// out-parameter at 0.
    Size,
    /// (ptr): a free of the pointer at 0.
    Ptr,
    /// A driver copy (dst, src, ByteCount, hStream): count at 16; the direction is
    /// the call's own, given as a cudaMemcpyKind (1 HtoD, 2 DtoH, 3 DtoD, 4 any).
    DrvCopy(u8),
}

pub struct ApiInfo {
    pub cbid: u32,
    pub name: &'static str,
    pub class: Class,
    pub args: Args,
    /// The caller's Python stack is recorded with the call (session/pystack): the calls
    /// a finding can be about (syncs that block, copies, allocations) and the rare CUDA
    /// graph set-up calls (where a graph was captured), never a launch.
    pub site: bool,
}

impl ApiInfo {
    /// A call that launches one kernel (not a graph's replay).
    pub fn launches_kernel(&self) -> bool {
        self.class == Class::Launch && !self.name.contains("Graph")
    }
}

const fn api(cbid: u32, name: &'static str, class: Class, args: Args) -> ApiInfo {
    ApiInfo {
        cbid,
        name,
        class,
        args,
        site: matches!(
            class,
            Class::Memcpy | Class::Sync | Class::Alloc | Class::Graph
        ),
    }
}

/// A call that orders GPU work without blocking the host (cudaStreamWaitEvent): no
/// call site.
const fn wait(cbid: u32, name: &'static str) -> ApiInfo {
    ApiInfo {
        site: false,
        ..api(cbid, name, Class::Sync, Args::None)
    }
}

use Args as A;
use Class as C;

/// Runtime API ids recorded by default.
pub static RUNTIME: &[ApiInfo] = &[
    api(20, "cudaMalloc", C::Alloc, A::Size),
    api(22, "cudaFree", C::Alloc, A::Ptr),
    api(25, "cudaMallocHost", C::Alloc, A::Size),
    api(26, "cudaFreeHost", C::Alloc, A::Ptr),
    api(27, "cudaHostAlloc", C::Alloc, A::Size),
    api(31, "cudaMemcpy", C::Memcpy, A::Copy),
    api(32, "cudaMemcpy2D", C::Memcpy, A::Copy2D),
    api(41, "cudaMemcpyAsync", C::Memcpy, A::Copy),
    api(44, "cudaMemcpy2DAsync", C::Memcpy, A::Copy2D),
    api(49, "cudaMemset", C::Memset, A::Set),
    api(51, "cudaMemsetAsync", C::Memset, A::Set),
    api(131, "cudaStreamSynchronize", C::Sync, A::None),
    api(137, "cudaEventSynchronize", C::Sync, A::None),
    wait(147, "cudaStreamWaitEvent"),
    api(160, "cudaMemcpyPeer", C::Memcpy, A::Peer),
    api(161, "cudaMemcpyPeerAsync", C::Memcpy, A::Peer),
    api(165, "cudaDeviceSynchronize", C::Sync, A::None),
    api(211, "cudaLaunchKernel", C::Launch, A::None),
    api(214, "cudaLaunchKernel_ptsz", C::Launch, A::None),
    api(216, "cudaMemcpy2D_ptds", C::Memcpy, A::Copy2D),
    api(225, "cudaMemcpyAsync_ptsz", C::Memcpy, A::Copy),
    api(228, "cudaMemcpy2DAsync_ptsz", C::Memcpy, A::Copy2D),
    api(235, "cudaMemsetAsync_ptsz", C::Memset, A::Set),
    api(239, "cudaStreamSynchronize_ptsz", C::Sync, A::None),
    wait(247, "cudaStreamWaitEvent_ptsz"),
    api(269, "cudaLaunchCooperativeKernel", C::Launch, A::None),
    api(270, "cudaLaunchCooperativeKernel_ptsz", C::Launch, A::None),
    api(310, "cudaGraphInstantiate", C::Graph, A::None),
    api(311, "cudaGraphLaunch", C::Launch, A::None),
    api(312, "cudaGraphLaunch_ptsz", C::Launch, A::None),
    api(348, "cudaGraphUpload", C::Graph, A::None),
    api(349, "cudaGraphUpload_ptsz", C::Graph, A::None),
    api(418, "cudaGraphInstantiateWithFlags", C::Graph, A::None),
    api(430, "cudaLaunchKernelExC", C::Launch, A::None),
    api(431, "cudaLaunchKernelExC_ptsz", C::Launch, A::None),
    api(436, "cudaGraphInstantiateWithParams", C::Graph, A::None),
    api(
        437,
        "cudaGraphInstantiateWithParams_ptsz",
        C::Graph,
        A::None,
    ),
    api(443, "cudaGraphInstantiate", C::Graph, A::None),
    api(505, "__cudaLaunchKernel", C::Launch, A::None),
    api(506, "__cudaLaunchKernel_ptsz", C::Launch, A::None),
];

/// Driver API ids recorded by default (`GPUTRACE_DRIVER_API=0` turns them off): the
/// launches, async copies and syncs of programs that bypass the runtime (JAX/XLA,
/// cuBLAS). A runtime call makes its driver call underneath; that nested callback is
/// skipped (session/cupti/callback.rs), so each call is recorded once.
pub static DRIVER: &[ApiInfo] = &[
    api(17, "cuCtxSynchronize", C::Sync, A::None),
    api(121, "cuEventSynchronize", C::Sync, A::None),
    api(126, "cuStreamSynchronize", C::Sync, A::None),
    api(277, "cuMemcpyHtoDAsync_v2", C::Memcpy, A::DrvCopy(1)),
    api(279, "cuMemcpyDtoHAsync_v2", C::Memcpy, A::DrvCopy(2)),
    api(281, "cuMemcpyDtoDAsync_v2", C::Memcpy, A::DrvCopy(3)),
    api(306, "cuMemcpyAsync", C::Memcpy, A::DrvCopy(4)),
    api(307, "cuLaunchKernel", C::Launch, A::None),
    api(418, "cuMemcpyAsync_ptsz", C::Memcpy, A::DrvCopy(4)),
    api(421, "cuMemcpyHtoDAsync_v2_ptsz", C::Memcpy, A::DrvCopy(1)),
    api(422, "cuMemcpyDtoHAsync_v2_ptsz", C::Memcpy, A::DrvCopy(2)),
    api(423, "cuMemcpyDtoDAsync_v2_ptsz", C::Memcpy, A::DrvCopy(3)),
    api(440, "cuStreamSynchronize_ptsz", C::Sync, A::None),
    api(442, "cuLaunchKernel_ptsz", C::Launch, A::None),
    api(477, "cuLaunchCooperativeKernel", C::Launch, A::None),
    api(478, "cuLaunchCooperativeKernel_ptsz", C::Launch, A::None),
    api(513, "cuGraphInstantiate", C::Graph, A::None),
    api(514, "cuGraphLaunch", C::Launch, A::None),
    api(515, "cuGraphLaunch_ptsz", C::Launch, A::None),
    api(578, "cuGraphInstantiate_v2", C::Graph, A::None),
    api(580, "cuGraphUpload", C::Graph, A::None),
    api(581, "cuGraphUpload_ptsz", C::Graph, A::None),
    api(643, "cuGraphInstantiateWithFlags", C::Graph, A::None),
    api(652, "cuLaunchKernelEx", C::Launch, A::None),
    api(653, "cuLaunchKernelEx_ptsz", C::Launch, A::None),
    api(656, "cuGraphInstantiateWithParams", C::Graph, A::None),
    api(657, "cuGraphInstantiateWithParams_ptsz", C::Graph, A::None),
];

/// Index into [`RUNTIME`] / [`DRIVER`] by callback id (255 = not ours), built at compile
/// time so the callback's lookup is one load instead of a scan.
const MAX_CBID: usize = 1024;

const fn index(table: &[ApiInfo]) -> [u8; MAX_CBID] {
    let mut out = [255u8; MAX_CBID];
    let mut i = 0;
    while i < table.len() {
        out[table[i].cbid as usize] = i as u8;
        i += 1;
    }
    out
}

static RUNTIME_INDEX: [u8; MAX_CBID] = index(RUNTIME);
static DRIVER_INDEX: [u8; MAX_CBID] = index(DRIVER);

#[inline]
pub fn find(domain: u8, cbid: u32) -> Option<&'static ApiInfo> {
    let (table, idx) = if domain == gputrace_format::DOMAIN_DRIVER {
        (DRIVER, &DRIVER_INDEX)
    } else {
        (RUNTIME, &RUNTIME_INDEX)
    };
    let i = *idx.get(cbid as usize)?;
    table.get(i as usize)
}

/// The linear lookup the index replaces, for the test that checks them against each other.
#[cfg(test)]
fn find_slow(domain: u8, cbid: u32) -> Option<&'static ApiInfo> {
    let table = if domain == gputrace_format::DOMAIN_DRIVER {
        DRIVER
    } else {
        RUNTIME
    };
    table.iter().find(|a| a.cbid == cbid)
}

/// Reads (bytes, copy kind) from a parameter struct.
///
/// # Safety
/// `params` must be NULL or point to the CUPTI parameter struct of the call `info` names.
pub unsafe fn extract(info: &ApiInfo, params: *const u8) -> (u64, u64) {
    if params.is_null() {
        return (0, 0);
    }
    // SAFETY: the caller guarantees the struct layout; each read is of a field it has.
    let rd = |off: usize| unsafe { (params.add(off) as *const u64).read_unaligned() };
    // SAFETY: as above.
    let rd32 = |off: usize| unsafe { (params.add(off) as *const u32).read_unaligned() } as u64;
    match info.args {
        Args::None => (0, 0),
        Args::Copy => (rd(16), rd32(24)),
        Args::Copy2D => (rd(32).saturating_mul(rd(40)), rd32(48)),
        Args::Peer => (rd(32), 0),
        Args::Set => (rd(16), 0),
        Args::Size => (rd(8), 0),
        Args::Ptr => (0, 0),
        Args::DrvCopy(kind) => (rd(16), kind as u64),
    }
}

/// The pointer an allocation made or a free was given, read at EXIT: what pairs a
/// `cudaFree` with its `cudaMalloc` (memory in use without MEMORY2 records). 0 for other
/// calls, a failed allocation (`ok` false: its out-parameter holds nothing of ours to
/// read) and a NULL out-parameter.
///
/// # Safety
/// `params` must be NULL or point to the CUPTI parameter struct of the call `info`
/// names, at that call's EXIT: the out-parameter of a successful allocation is then the
/// caller's pointer the call has just written through.
pub unsafe fn pointer(info: &ApiInfo, params: *const u8, ok: bool) -> u64 {
    if params.is_null() {
        return 0;
    }
    // SAFETY: the caller guarantees the layout; the first field of both shapes is a
    // pointer-sized value.
    let first = unsafe { (params as *const u64).read_unaligned() };
    match info.args {
        Args::Size if ok && first != 0 => {
            // SAFETY: `first` is the call's `void **` out-parameter, which a successful
            // allocation wrote the new pointer through.
            unsafe { (first as *const u64).read_unaligned() }
        }
        Args::Ptr => first,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexed_lookup_matches_the_tables() {
        for dom in [
            gputrace_format::DOMAIN_RUNTIME,
            gputrace_format::DOMAIN_DRIVER,
        ] {
            for cbid in 0..1100 {
                assert_eq!(
                    find(dom, cbid).map(|a| a.name),
                    find_slow(dom, cbid).map(|a| a.name)
                );
            }
        }
    }

    #[test]
    fn call_sites_are_blocking_calls_copies_and_allocations_never_launches() {
        for a in RUNTIME.iter().chain(DRIVER) {
            let want = matches!(
                a.class,
                Class::Memcpy | Class::Sync | Class::Alloc | Class::Graph
            ) && !a.name.starts_with("cudaStreamWaitEvent");
            assert_eq!(a.site, want, "{}", a.name);
        }
        assert!(find(gputrace_format::DOMAIN_RUNTIME, 131).unwrap().site);
        assert!(!find(gputrace_format::DOMAIN_RUNTIME, 211).unwrap().site);
        assert!(!find(gputrace_format::DOMAIN_RUNTIME, 311).unwrap().site);
        assert!(find(gputrace_format::DOMAIN_RUNTIME, 443).unwrap().site);
    }

    #[test]
    fn ids_are_unique() {
        for t in [RUNTIME, DRIVER] {
            let mut ids: Vec<_> = t.iter().map(|a| a.cbid).collect();
            ids.sort();
            ids.dedup();
            assert_eq!(ids.len(), t.len());
        }
    }

    #[test]
    fn allocations_and_frees_give_their_pointers() {
        let mut made: u64 = 0x7e00_0000_0000;
        // cudaMalloc(void **devPtr, size_t size).
        let malloc = [&mut made as *mut u64 as u64, 1 << 20];
        let info = find(gputrace_format::DOMAIN_RUNTIME, 20).unwrap();
        let p = malloc.as_ptr() as *const u8;
        // SAFETY: `malloc` has the layout of cudaMalloc's parameter struct, its
        // out-parameter pointing to `made`.
        unsafe {
            assert_eq!(extract(info, p), (1 << 20, 0));
            assert_eq!(pointer(info, p, true), 0x7e00_0000_0000);
            assert_eq!(pointer(info, p, false), 0, "a failed call's is not read");
        }
        // A NULL out-parameter is not followed.
        let null = [0u64, 64];
        // SAFETY: as above, with devPtr NULL.
        let got = unsafe { pointer(info, null.as_ptr() as *const u8, true) };
        assert_eq!(got, 0);
        // cudaFree(void *devPtr).
        let free = [0x7e00_0000_0000u64];
        let info = find(gputrace_format::DOMAIN_RUNTIME, 22).unwrap();
        // SAFETY: `free` has the layout of cudaFree's parameter struct.
        unsafe {
            assert_eq!(
                pointer(info, free.as_ptr() as *const u8, true),
                0x7e00_0000_0000
            );
            assert_eq!(extract(info, free.as_ptr() as *const u8), (0, 0));
        }
        // Other calls have none.
        let info = find(gputrace_format::DOMAIN_RUNTIME, 211).unwrap();
        // SAFETY: any readable struct of at least 8 bytes.
        let got = unsafe { pointer(info, free.as_ptr() as *const u8, true) };
        assert_eq!(got, 0);
    }

    #[test]
    fn copy_args_are_read_from_their_offsets() {
        #[repr(C)]
        struct P {
            dst: u64,
            src: u64,
            count: u64,
            kind: u32,
            _pad: u32,
            stream: u64,
        }
        let p = P {
            dst: 1,
            src: 2,
            count: 4096,
            kind: 1,
            _pad: 0,
            stream: 9,
        };
        let info = find(gputrace_format::DOMAIN_RUNTIME, 41).unwrap();
        assert_eq!(info.name, "cudaMemcpyAsync");
        // SAFETY: P has the layout of cudaMemcpyAsync's parameter struct.
        let got = unsafe { extract(info, &p as *const P as *const u8) };
        assert_eq!(got, (4096, 1));
        // cuMemcpyDtoHAsync_v2 (dstHost, srcDevice, ByteCount, hStream): the count at 16,
        // the direction from the call itself.
        let info = find(gputrace_format::DOMAIN_DRIVER, 279).unwrap();
        assert_eq!(info.name, "cuMemcpyDtoHAsync_v2");
        // SAFETY: P starts with the layout of that call's parameter struct.
        let got = unsafe { extract(info, &p as *const P as *const u8) };
        assert_eq!(got, (4096, 2));
    }
}
