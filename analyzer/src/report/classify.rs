//! What each recorded call and kernel is, for the report: API classes by callback id
//! (with the function name as a fallback for ids this table does not know), NCCL kernels
//! by name, and the host side of a copy.

use gputrace_format::{self as fmt, CopyKind, MemKind};

/// What a host API call does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiKind {
    Launch,
    CopyAsync,
    /// A copy call that does not return before the copy is done (`cudaMemcpy`).
    CopySync,
    Memset,
    /// Host blocks until the GPU reaches a point (`cudaStreamSynchronize`, ...).
    Sync,
    /// Enqueues a GPU-side wait; the host does not block (`cudaStreamWaitEvent`).
    StreamWait,
    Alloc,
    /// `cudaFree` and friends: they synchronise the device.
    Free,
    Other,
}

/// Runtime API callback ids (CUPTI_RUNTIME_TRACE_CBID_*), as recorded by interpose/src/apis.rs.
pub fn runtime_kind(cbid: u32) -> Option<ApiKind> {
    use ApiKind::*;
    Some(match cbid {
        211 | 214 | 269 | 270 | 311 | 312 | 430 | 431 | 505 | 506 => Launch,
        41 | 44 | 161 | 225 | 228 => CopyAsync,
        31 | 32 | 160 | 216 => CopySync,
        49 | 51 | 235 => Memset,
        131 | 137 | 165 | 239 => Sync,
        147 | 247 => StreamWait,
        20 | 25 | 27 => Alloc,
        22 | 26 => Free,
        _ => return None,
    })
}

/// Driver API ids (CUPTI_DRIVER_TRACE_CBID_*), as recorded by interpose's DRIVER table:
/// launches, async copies and syncs of programs that bypass the runtime.
pub fn driver_kind(cbid: u32) -> Option<ApiKind> {
    use ApiKind::*;
    Some(match cbid {
        307 | 442 | 477 | 478 | 514 | 515 | 652 | 653 => Launch,
        277 | 279 | 281 | 306 | 418 | 421 | 422 | 423 => CopyAsync,
        17 | 121 | 126 | 440 => Sync,
        _ => return None,
    })
}

/// Classifies a call by its function name (for ids added after this table was written).
pub fn kind_from_name(name: &str) -> ApiKind {
    use ApiKind::*;
    let n = name.trim_start_matches('_');
    if n.contains("WaitEvent") {
        StreamWait
    } else if n.contains("Synchronize") {
        Sync
    } else if n.contains("Memcpy") {
        if n.contains("Async") {
            CopyAsync
        } else {
            CopySync
        }
    } else if n.contains("Memset") || n.contains("MemsetD") {
        Memset
    } else if n.contains("Launch") {
        Launch
    } else if n.contains("Free") {
        Free
    } else if n.contains("Malloc") || n.contains("HostAlloc") || n.contains("MemAlloc") {
        Alloc
    } else {
        Other
    }
}

pub fn api_kind(a: &fmt::Api, name: &str) -> ApiKind {
    let by_id = if a.domain == fmt::DOMAIN_DRIVER {
        driver_kind(a.cbid)
    } else {
        runtime_kind(a.cbid)
    };
    by_id.unwrap_or_else(|| kind_from_name(name))
}

/// True for kernels that belong to NCCL: its collective and point-to-point kernels
/// (`ncclDevKernel_*`, older `ncclKernel_*`) and the one-rank reduction it launches when a
/// communicator has a single rank (`oneRankReduce`).
pub fn is_comm_kernel(name: &str) -> bool {
    let base = strip_mangling(name);
    base.starts_with("ncclDevKernel")
        || base.starts_with("ncclKernel")
        || base.starts_with("oneRankReduce")
        || base.starts_with("void ncclDevKernel")
        || base.starts_with("void ncclKernel")
        || base.starts_with("void oneRankReduce")
        // NCCL builds the one-rank kernel as a file-static symbol: nvcc prefixes it with
        // `__nv_static_<n>__<hash>_<n>_onerank_cu_<hash>_` (seen with NCCL 2.28 on an H200).
        || (name.starts_with("__nv_static_") && name.contains("_onerank_cu_") && name.contains("oneRankReduce"))
}

/// For a mangled name `_Z<len><ident>...` returns `<ident>...`; else the name.
fn strip_mangling(name: &str) -> &str {
    if let Some(rest) = name.strip_prefix("_Z") {
        let digits = rest.bytes().take_while(|b| b.is_ascii_digit()).count();
        if digits > 0 {
            return &rest[digits..];
        }
    }
    name
}

/// Host memory kind of a copy as one of "pageable", "pinned", "device", "managed", "other".
pub fn host_memory(m: &fmt::Memcpy) -> &'static str {
    crate::report::summary::copy_class(m)
}

/// Direction of a copy as a short word.
pub fn direction(m: &fmt::Memcpy) -> &'static str {
    CopyKind::from_u8(m.copy_kind).name()
}

/// The host-side memory kind of a copy record.
pub fn host_mem_kind(m: &fmt::Memcpy) -> MemKind {
    match CopyKind::from_u8(m.copy_kind) {
        CopyKind::HtoD | CopyKind::HtoA => MemKind::from_u8(m.src_kind),
        CopyKind::DtoH | CopyKind::AtoH => MemKind::from_u8(m.dst_kind),
        _ => MemKind::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_names() {
        assert!(is_comm_kernel(
            "_Z32ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE"
        ));
        assert!(is_comm_kernel("ncclKernel_AllReduce_RING_LL_Sum_float"));
        assert!(is_comm_kernel(
            "_Z13oneRankReduceI13FuncPreMulSumIfEEvPvPKvmmm"
        ));
        assert!(!is_comm_kernel("_Z6kernelPfi"));
        assert!(!is_comm_kernel("my_nccl_like_kernel"));
        assert!(is_comm_kernel(
            "__nv_static_32__b4148644_10_onerank_cu_fdf47990__ZN43_GLOBAL__N__b4148644_10_onerank_cu_fdf4799013oneRankReduceI13FuncPreMulSumIfEEEvPvS3_mmb"
        ));
    }

    #[test]
    fn api_names() {
        assert_eq!(kind_from_name("cudaMemcpyAsync_v2"), ApiKind::CopyAsync);
        assert_eq!(kind_from_name("cuMemcpyHtoD_v2"), ApiKind::CopySync);
        assert_eq!(kind_from_name("cudaStreamSynchronize_v2"), ApiKind::Sync);
        assert_eq!(kind_from_name("cudaStreamWaitEvent"), ApiKind::StreamWait);
        assert_eq!(kind_from_name("cuLaunchKernelEx"), ApiKind::Launch);
        assert_eq!(kind_from_name("cudaGetDevice"), ApiKind::Other);
        assert_eq!(runtime_kind(41), Some(ApiKind::CopyAsync));
        assert_eq!(driver_kind(307), Some(ApiKind::Launch));
        assert_eq!(driver_kind(279), Some(ApiKind::CopyAsync));
        assert_eq!(driver_kind(126), Some(ApiKind::Sync));
        assert_eq!(driver_kind(17), Some(ApiKind::Sync));
    }
}
