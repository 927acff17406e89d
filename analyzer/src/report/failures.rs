//! Calls that failed: every traced call whose return code was an error (CUDA runtime and
//! driver calls from the CUPTI callbacks, NCCL calls, the symbol hooks' copies, syncs,
//! launches and pinned allocations), grouped by call and code, with the code's name, and
//! which of them could have ended the process ([`fatal`]): an out-of-memory, an error
//! that corrupts the CUDA context (sticky), or an NCCL error, after which the process
//! ran no more GPU work.
//!
//! One pass over the host call tables, keeping only the failures: cheap.

use crate::model::trace::Trace;
use crate::report::callsites;
use crate::report::stalls::{end_of, EndIn};
use crate::report::units::{bytes, ts};
use gputrace_format as fmt;
use serde::Serialize;
use std::collections::BTreeMap;

/// `cudaErrorMemoryAllocation` (runtime) and `CUDA_ERROR_OUT_OF_MEMORY` (driver).
pub const OUT_OF_MEMORY: u32 = 2;
/// `cudaErrorNotReady` / `CUDA_ERROR_NOT_READY`: "not yet", not a failure.
const NOT_READY: u32 = 600;
/// `ncclInProgress`: a non-blocking communicator's "not yet", not a failure.
const NCCL_IN_PROGRESS: u32 = 7;

/// Where a failed call was seen.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// A CUDA runtime call (CUPTI callback): its code is a `cudaError_t`.
    Runtime,
    /// A CUDA driver call (CUPTI callback): a `CUresult`.
    Driver,
    /// An NCCL call (symbol hooks): an `ncclResult_t`.
    Nccl,
    /// A CUDA runtime call seen only by the symbol hooks: a `cudaError_t`.
    Hooks,
}

/// One kind of failure: a call that returned one error code, however many times.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct FailedCall {
    /// The function (`cudaMalloc`, `cuLaunchKernel`, `ncclAllReduce`).
    pub call: String,
    pub source: Source,
    /// The return code.
    pub code: u32,
    /// Its name (`cudaErrorMemoryAllocation`, `CUDA_ERROR_ILLEGAL_ADDRESS`,
    /// `ncclSystemError`); `cudaError 12345` for a code the table does not know.
    pub error: String,
    /// The error corrupts the CUDA context: every later CUDA call fails the same way and
    /// the process must be restarted (a fault in a kernel, found at the next call that
    /// waits for it).
    pub sticky: bool,
    pub count: u64,
    /// Start of the first and of the last such call, ns after the trace start.
    pub first_ns: u64,
    pub last_ns: u64,
    /// Bytes asked (allocations) or to move (copies, collectives): the largest of the
    /// failed calls; absent for calls without a size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Where in the Python code the first of them was made (`train.py:57 in step`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub called_from: Option<String>,
}

impl FailedCall {
    /// `cudaErrorMemoryAllocation (2)`, with `, sticky` when it is.
    pub fn code_words(&self) -> String {
        format!(
            "{} ({}{})",
            self.error,
            self.code,
            if self.sticky { ", sticky" } else { "" }
        )
    }
}

/// What a failure that may have ended the process was.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FatalKind {
    /// An allocation found no memory (`cudaErrorMemoryAllocation`).
    OutOfMemory,
    /// An error that corrupts the CUDA context (`cudaErrorIllegalAddress`, ...).
    Sticky,
    /// An NCCL call failed.
    Nccl,
}

/// The failed call after which the process ran no more GPU work, when it is one that
/// ends processes: what the verdict's "how it ended" clause can name.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct FatalCall {
    pub kind: FatalKind,
    pub call: String,
    pub code: u32,
    pub error: String,
    /// Start of the call, ns after the trace start.
    pub at_ns: u64,
    /// Bytes asked, for an allocation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Where in the Python code it was made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub called_from: Option<String>,
}

impl FatalCall {
    /// "cudaMalloc of 2.0 GiB failed with cudaErrorMemoryAllocation at +1.203000 s (from
    /// train.py:57 in step)".
    pub fn phrase(&self) -> String {
        let size = match self.bytes {
            Some(b) if b > 0 => format!(" of {}", bytes(b)),
            _ => String::new(),
        };
        let from = match &self.called_from {
            Some(p) => format!(" (from {p})"),
            None => String::new(),
        };
        format!(
            "{}{size} failed with {} at +{}{from}",
            self.call,
            self.error,
            ts(self.at_ns)
        )
    }

    /// What it means, in a few words: `CUDA out of memory`, `a GPU fault
    /// (cudaErrorIllegalAddress)`, `an NCCL error (ncclSystemError)`.
    pub fn what(&self) -> String {
        match self.kind {
            FatalKind::OutOfMemory => "CUDA out of memory".into(),
            FatalKind::Sticky => format!("a GPU fault ({})", self.error),
            FatalKind::Nccl => format!("an NCCL error ({})", self.error),
        }
    }
}

/// One failed call, before grouping.
struct Failure {
    start: u64,
    tid: u32,
    call: String,
    source: Source,
    code: u32,
    bytes: Option<u64>,
}

/// Every failed call of the trace, in start order.
fn failures(t: &Trace) -> Vec<Failure> {
    let mut out = Vec::new();
    // CUPTI's calls, by thread and start: a hook that saw the same call (it runs around
    // CUPTI's callbacks) is not counted twice.
    let mut seen: Vec<(u32, u64, u64)> = Vec::new();
    for a in &t.apis {
        if a.result == 0 || a.result == NOT_READY {
            continue;
        }
        let driver = a.domain == fmt::DOMAIN_DRIVER;
        let name = t.str(a.name);
        out.push(Failure {
            start: a.start,
            tid: a.tid,
            call: name.to_string(),
            source: if driver {
                Source::Driver
            } else {
                Source::Runtime
            },
            code: a.result,
            bytes: (a.bytes > 0).then_some(a.bytes),
        });
        seen.push((a.tid, a.start, a.end));
    }
    seen.sort_unstable();
    // The CUPTI call starts inside the hooked one; the hooks' stamps, converted from the
    // TSC, may differ from CUPTI's by a little.
    const SLACK: u64 = 2_000;
    let by_cupti = |tid: u32, start: u64, end: u64| {
        let i = seen.partition_point(|s| (s.0, s.1) < (tid, start.saturating_sub(SLACK)));
        seen.get(i)
            .is_some_and(|s| s.0 == tid && s.1 <= end.saturating_add(SLACK))
    };
    let mut hook = |start: u64, end: u64, tid: u32, call: &str, code: u32, b: u64| {
        if code != 0 && code != NOT_READY && !by_cupti(tid, start, end) {
            out.push(Failure {
                start,
                tid,
                call: call.to_string(),
                source: Source::Hooks,
                code,
                bytes: (b > 0).then_some(b),
            });
        }
    };
    for c in &t.host_calls {
        let b = if matches!(c.call, fmt::HOSTCALL_MEMSET | fmt::HOSTCALL_MEMSET_ASYNC) {
            c.arg0
        } else {
            0
        };
        hook(
            c.start,
            c.end,
            c.tid,
            fmt::hostcall_info(c.call).0,
            c.result,
            b,
        );
    }
    for c in &t.host_copies {
        hook(
            c.start,
            c.end,
            c.tid,
            fmt::hostcopy_api_name(c.api),
            c.result,
            c.bytes,
        );
    }
    for h in &t.host_allocs {
        let asked = matches!(
            h.op,
            fmt::HOSTALLOC_HOST_ALLOC | fmt::HOSTALLOC_MALLOC_HOST | fmt::HOSTALLOC_HOST_REGISTER
        );
        hook(
            h.start,
            h.end,
            h.tid,
            fmt::hostalloc_op_name(h.op),
            h.result,
            if asked { h.bytes } else { 0 },
        );
    }
    for n in &t.nccl {
        if n.result != 0 && n.result != NCCL_IN_PROGRESS {
            out.push(Failure {
                start: n.start,
                tid: n.tid,
                call: fmt::nccl_op_name(n.op).to_string(),
                source: Source::Nccl,
                code: n.result,
                bytes: (n.bytes > 0).then_some(n.bytes),
            });
        }
    }
    for n in &t.nccl_comms {
        if n.result != 0 && n.result != NCCL_IN_PROGRESS {
            out.push(Failure {
                start: n.start,
                tid: n.tid,
                call: fmt::nccl_comm_op_name(n.op).to_string(),
                source: Source::Nccl,
                code: n.result,
                bytes: None,
            });
        }
    }
    out.sort_by_key(|f| f.start);
    out
}

/// Every failed call of `t`, grouped by call and code, in order of their first failure.
/// Times are relative to `t0`.
pub fn failed_calls(t: &Trace, t0: u64) -> Vec<FailedCall> {
    let mut groups: BTreeMap<(String, Source, u32), FailedCall> = BTreeMap::new();
    for f in failures(t) {
        let at = f.start.saturating_sub(t0);
        let g = groups
            .entry((f.call.clone(), f.source, f.code))
            .or_insert_with(|| FailedCall {
                call: f.call.clone(),
                source: f.source,
                code: f.code,
                error: error_name(f.source, f.code),
                sticky: is_sticky(f.source, f.code),
                count: 0,
                first_ns: at,
                last_ns: at,
                bytes: None,
                called_from: callsites::place_of(t, f.tid, f.start),
            });
        g.count += 1;
        g.last_ns = at;
        if let Some(b) = f.bytes {
            g.bytes = Some(g.bytes.map_or(b, |x| x.max(b)));
        }
    }
    let mut v: Vec<FailedCall> = groups.into_values().collect();
    v.sort_by(|a, b| a.first_ns.cmp(&b.first_ns).then(a.call.cmp(&b.call)));
    v
}

/// The kind of failure that ends processes, for a call's code.
fn fatal_kind(source: Source, code: u32) -> Option<FatalKind> {
    match source {
        Source::Nccl => Some(FatalKind::Nccl),
        _ if code == OUT_OF_MEMORY => Some(FatalKind::OutOfMemory),
        _ if is_sticky(source, code) => Some(FatalKind::Sticky),
        _ => None,
    }
}

/// The last failed call of `t`, when the process ran no GPU work after it and it is a
/// failure that ends processes (out of memory, a sticky error, an NCCL error). None for
/// a trace window that closed while the process went on: what came after is not known.
/// Times are relative to `t0`.
///
/// Whether the process then exited with an error is its end's to say (`endings`); a job
/// that catches the error and exits cleanly still ran nothing after it.
pub fn fatal(t: &Trace, t0: u64) -> Option<FatalCall> {
    if end_of(t).0 == EndIn::Window {
        return None;
    }
    let f = failures(t).into_iter().next_back()?;
    let kind = fatal_kind(f.source, f.code)?;
    if gpu_work_after(t, f.start) {
        return None;
    }
    Some(FatalCall {
        kind,
        error: error_name(f.source, f.code),
        code: f.code,
        at_ns: f.start.saturating_sub(t0),
        bytes: f.bytes,
        called_from: callsites::place_of(t, f.tid, f.start),
        call: f.call,
    })
}

/// Whether any GPU work (kernel, copy, memset) started after `ts`.
pub fn gpu_work_after(t: &Trace, ts: u64) -> bool {
    t.kernels.iter().any(|k| k.start > ts)
        || t.memcpys.iter().any(|m| m.start > ts)
        || t.memsets.iter().any(|m| m.start > ts)
}

/// The name of return code `code` of a call seen by `source`.
pub fn error_name(source: Source, code: u32) -> String {
    let known = match source {
        Source::Runtime | Source::Hooks => runtime_error(code),
        Source::Driver => driver_error(code),
        Source::Nccl => nccl_error(code),
    };
    match (known, source) {
        (Some(n), _) => n.to_string(),
        (None, Source::Driver) => format!("CUresult {code}"),
        (None, Source::Nccl) => format!("ncclResult {code}"),
        (None, _) => format!("cudaError {code}"),
    }
}

/// Whether `code` corrupts the CUDA context: the runtime's and the driver's codes agree
/// on these (the runtime documents them as leaving "the process in an inconsistent
/// state": any further CUDA work returns the same error until the process restarts).
pub fn is_sticky(source: Source, code: u32) -> bool {
    source != Source::Nccl && matches!(code, 700 | 702 | 710 | 714..=719 | 810 | 911)
}

/// `cudaError_t` names: the common ones, and every context-corrupting one.
fn runtime_error(code: u32) -> Option<&'static str> {
    Some(match code {
        1 => "cudaErrorInvalidValue",
        2 => "cudaErrorMemoryAllocation",
        3 => "cudaErrorInitializationError",
        4 => "cudaErrorCudartUnloading",
        9 => "cudaErrorInvalidConfiguration",
        12 => "cudaErrorInvalidPitchValue",
        13 => "cudaErrorInvalidSymbol",
        17 => "cudaErrorInvalidDevicePointer",
        21 => "cudaErrorInvalidMemcpyDirection",
        34 => "cudaErrorStubLibrary",
        35 => "cudaErrorInsufficientDriver",
        36 => "cudaErrorCallRequiresNewerDriver",
        46 => "cudaErrorDevicesUnavailable",
        98 => "cudaErrorInvalidDeviceFunction",
        100 => "cudaErrorNoDevice",
        101 => "cudaErrorInvalidDevice",
        200 => "cudaErrorInvalidKernelImage",
        201 => "cudaErrorDeviceUninitialized",
        209 => "cudaErrorNoKernelImageForDevice",
        214 => "cudaErrorECCUncorrectable",
        218 => "cudaErrorInvalidPtx",
        222 => "cudaErrorUnsupportedPtxVersion",
        400 => "cudaErrorInvalidResourceHandle",
        401 => "cudaErrorIllegalState",
        500 => "cudaErrorSymbolNotFound",
        600 => "cudaErrorNotReady",
        700 => "cudaErrorIllegalAddress",
        701 => "cudaErrorLaunchOutOfResources",
        702 => "cudaErrorLaunchTimeout",
        709 => "cudaErrorContextIsDestroyed",
        710 => "cudaErrorAssert",
        712 => "cudaErrorHostMemoryAlreadyRegistered",
        713 => "cudaErrorHostMemoryNotRegistered",
        714 => "cudaErrorHardwareStackError",
        715 => "cudaErrorIllegalInstruction",
        716 => "cudaErrorMisalignedAddress",
        717 => "cudaErrorInvalidAddressSpace",
        718 => "cudaErrorInvalidPc",
        719 => "cudaErrorLaunchFailure",
        720 => "cudaErrorCooperativeLaunchTooLarge",
        800 => "cudaErrorNotPermitted",
        801 => "cudaErrorNotSupported",
        802 => "cudaErrorSystemNotReady",
        803 => "cudaErrorSystemDriverMismatch",
        804 => "cudaErrorCompatNotSupportedOnDevice",
        810 => "cudaErrorMpsClientTerminated",
        900 => "cudaErrorStreamCaptureUnsupported",
        901 => "cudaErrorStreamCaptureInvalidated",
        909 => "cudaErrorTimeout",
        911 => "cudaErrorExternalDevice",
        999 => "cudaErrorUnknown",
        _ => return None,
    })
}

/// `CUresult` names: the common ones, and every context-corrupting one.
fn driver_error(code: u32) -> Option<&'static str> {
    Some(match code {
        1 => "CUDA_ERROR_INVALID_VALUE",
        2 => "CUDA_ERROR_OUT_OF_MEMORY",
        3 => "CUDA_ERROR_NOT_INITIALIZED",
        4 => "CUDA_ERROR_DEINITIALIZED",
        100 => "CUDA_ERROR_NO_DEVICE",
        101 => "CUDA_ERROR_INVALID_DEVICE",
        200 => "CUDA_ERROR_INVALID_IMAGE",
        201 => "CUDA_ERROR_INVALID_CONTEXT",
        209 => "CUDA_ERROR_NO_BINARY_FOR_GPU",
        214 => "CUDA_ERROR_ECC_UNCORRECTABLE",
        400 => "CUDA_ERROR_INVALID_HANDLE",
        500 => "CUDA_ERROR_NOT_FOUND",
        600 => "CUDA_ERROR_NOT_READY",
        700 => "CUDA_ERROR_ILLEGAL_ADDRESS",
        701 => "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
        702 => "CUDA_ERROR_LAUNCH_TIMEOUT",
        709 => "CUDA_ERROR_CONTEXT_IS_DESTROYED",
        710 => "CUDA_ERROR_ASSERT",
        714 => "CUDA_ERROR_HARDWARE_STACK_ERROR",
        715 => "CUDA_ERROR_ILLEGAL_INSTRUCTION",
        716 => "CUDA_ERROR_MISALIGNED_ADDRESS",
        717 => "CUDA_ERROR_INVALID_ADDRESS_SPACE",
        718 => "CUDA_ERROR_INVALID_PC",
        719 => "CUDA_ERROR_LAUNCH_FAILED",
        720 => "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
        800 => "CUDA_ERROR_NOT_PERMITTED",
        801 => "CUDA_ERROR_NOT_SUPPORTED",
        810 => "CUDA_ERROR_MPS_CLIENT_TERMINATED",
        900 => "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
        901 => "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
        909 => "CUDA_ERROR_TIMEOUT",
        911 => "CUDA_ERROR_EXTERNAL_DEVICE",
        999 => "CUDA_ERROR_UNKNOWN",
        _ => return None,
    })
}

/// `ncclResult_t` names.
fn nccl_error(code: u32) -> Option<&'static str> {
    Some(match code {
        1 => "ncclUnhandledCudaError",
        2 => "ncclSystemError",
        3 => "ncclInternalError",
        4 => "ncclInvalidArgument",
        5 => "ncclInvalidUsage",
        6 => "ncclRemoteError",
        7 => "ncclInProgress",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::trace::Trace;
    use gputrace_format::{Event, Meta};

    fn api(start: u64, tid: u32, cbid: u32, name: u32, bytes: u64, result: u32) -> Event {
        Event::Api(fmt::Api {
            start,
            end: start + 10,
            tid,
            corr: start as u32,
            domain: fmt::DOMAIN_RUNTIME,
            cbid,
            name,
            bytes,
            result,
            ..Default::default()
        })
    }

    fn strs() -> Vec<Event> {
        [
            "",
            "cudaMalloc",
            "cudaLaunchKernel",
            "cudaStreamSynchronize",
        ]
        .iter()
        .enumerate()
        .map(|(i, s)| Event::Str {
            id: i as u32,
            text: s.to_string(),
        })
        .collect()
    }

    fn kernel(start: u64) -> Event {
        Event::Kernel(fmt::Kernel {
            start,
            end: start + 5,
            corr: 1,
            ..Default::default()
        })
    }

    #[test]
    fn failures_are_grouped_by_call_and_code_with_names() {
        let mut ev = strs();
        ev.extend([
            api(1_000, 1, 20, 1, 1 << 20, 0),
            kernel(1_100),
            api(2_000, 1, 20, 1, 4 << 30, 2),
            api(3_000, 1, 20, 1, 8 << 30, 2),
            api(4_000, 1, 211, 2, 0, 9),
            api(5_000, 1, 131, 3, 0, 700),
            api(6_000, 1, 131, 3, 0, 600),
        ]);
        let t = Trace::from_events(Meta::default(), ev);
        let v = failed_calls(&t, 1_000);
        let got: Vec<_> = v
            .iter()
            .map(|f| {
                (
                    f.call.as_str(),
                    f.error.as_str(),
                    f.count,
                    f.first_ns,
                    f.last_ns,
                    f.bytes,
                    f.sticky,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "cudaMalloc",
                    "cudaErrorMemoryAllocation",
                    2,
                    1_000,
                    2_000,
                    Some(8 << 30),
                    false
                ),
                (
                    "cudaLaunchKernel",
                    "cudaErrorInvalidConfiguration",
                    1,
                    3_000,
                    3_000,
                    None,
                    false
                ),
                (
                    "cudaStreamSynchronize",
                    "cudaErrorIllegalAddress",
                    1,
                    4_000,
                    4_000,
                    None,
                    true
                ),
            ]
        );
        assert_eq!(v[2].code_words(), "cudaErrorIllegalAddress (700, sticky)");
        // The sticky error is last and nothing ran after it.
        let f = fatal(&t, 1_000).unwrap();
        assert_eq!(
            (f.kind, f.call.as_str(), f.at_ns),
            (FatalKind::Sticky, "cudaStreamSynchronize", 4_000)
        );
    }

    #[test]
    fn an_out_of_memory_is_fatal_only_when_no_gpu_work_follows() {
        let mut ev = strs();
        ev.extend([api(1_000, 1, 20, 1, 1 << 30, 2), kernel(2_000)]);
        let t = Trace::from_events(Meta::default(), ev.clone());
        assert_eq!(fatal(&t, 0), None, "the job went on");
        ev.push(api(3_000, 1, 20, 1, 2 << 30, 2));
        let t = Trace::from_events(Meta::default(), ev);
        let f = fatal(&t, 0).unwrap();
        assert_eq!(f.kind, FatalKind::OutOfMemory);
        assert_eq!(
            f.phrase(),
            "cudaMalloc of 2.0 GiB failed with cudaErrorMemoryAllocation at +0.000003 s"
        );
        assert_eq!(f.what(), "CUDA out of memory");
    }

    #[test]
    fn a_hooked_call_cupti_also_saw_is_counted_once() {
        let mut ev = strs();
        ev.push(api(1_000, 4, 131, 3, 0, 400));
        for (start, tid) in [(995, 4), (5_000, 4)] {
            ev.push(Event::HostCall(fmt::HostCall {
                start,
                end: start + 30,
                tid,
                call: fmt::HOSTCALL_STREAM_SYNCHRONIZE,
                result: 400,
                ..Default::default()
            }));
        }
        let t = Trace::from_events(Meta::default(), ev);
        let v = failed_calls(&t, 0);
        let got: Vec<_> = v.iter().map(|f| (f.source, f.count)).collect();
        assert_eq!(got, vec![(Source::Runtime, 1), (Source::Hooks, 1)]);
        assert_eq!(v[0].error, "cudaErrorInvalidResourceHandle");
        // Not a failure that ends processes.
        assert_eq!(fatal(&t, 0), None);
    }

    #[test]
    fn names_by_source() {
        assert_eq!(error_name(Source::Driver, 2), "CUDA_ERROR_OUT_OF_MEMORY");
        assert_eq!(error_name(Source::Driver, 719), "CUDA_ERROR_LAUNCH_FAILED");
        assert_eq!(error_name(Source::Runtime, 719), "cudaErrorLaunchFailure");
        assert_eq!(error_name(Source::Nccl, 2), "ncclSystemError");
        assert_eq!(error_name(Source::Runtime, 12345), "cudaError 12345");
        assert!(is_sticky(Source::Driver, 700) && !is_sticky(Source::Nccl, 700));
        assert!(!is_sticky(Source::Runtime, 2));
    }
}
