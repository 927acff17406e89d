//! Which call synchronised: the synchronising calls of a window by kind (the caching
//! allocator's frees, device-to-host reads, device / stream / event synchronize), with
//! the host time blocked in each. `implicit_sync`'s fix follows the largest.

use super::classify::ApiKind;
use super::ctx::{Ctx, HostClass};
use gputrace_format::{self as fmt, CopyKind};

/// A kind of synchronising call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SyncCause {
    /// `cudaFree` and friends (the caching allocator giving memory back: `empty_cache()`,
    /// allocator churn).
    Allocator,
    /// A device-to-host read: a blocking copy, or a stream sync right after an async
    /// one (`.item()`, `.cpu()`, `.tolist()`, `print(tensor)`).
    D2hRead,
    /// `cudaDeviceSynchronize` / `cudaCtxSynchronize` (`torch.cuda.synchronize()`).
    DeviceSync,
    /// `cudaStreamSynchronize` on its own (`stream.synchronize()`).
    StreamSync,
    /// `cudaEventSynchronize` (`event.synchronize()`, `elapsed_time()`).
    EventSync,
    Other,
}

impl SyncCause {
    pub const ALL: [SyncCause; 6] = [
        SyncCause::Allocator,
        SyncCause::D2hRead,
        SyncCause::DeviceSync,
        SyncCause::StreamSync,
        SyncCause::EventSync,
        SyncCause::Other,
    ];

    pub fn id(self) -> &'static str {
        match self {
            SyncCause::Allocator => "allocator",
            SyncCause::D2hRead => "d2h_read",
            SyncCause::DeviceSync => "device_synchronize",
            SyncCause::StreamSync => "stream_synchronize",
            SyncCause::EventSync => "event_synchronize",
            SyncCause::Other => "other",
        }
    }
}

/// Synchronising calls in a window: (cause, calls, host ns blocked), largest first.
pub fn sync_calls(ctx: &Ctx, w: (u64, u64)) -> Vec<(SyncCause, u64, u64)> {
    let t = ctx.t;
    let mut acc = [(0u64, 0u64); 6];
    let mut add = |c: SyncCause, ns: u64| {
        let i = SyncCause::ALL.iter().position(|x| *x == c).unwrap_or(5);
        acc[i].0 += 1;
        acc[i].1 = acc[i].1.saturating_add(ns);
    };
    if ctx.has_api() {
        // The previous call on each thread (a sync right after a DtoH copy reads it back).
        let mut last: std::collections::HashMap<u32, usize> = Default::default();
        for (i, a) in t.apis.iter().enumerate() {
            let prev = last.insert(a.tid, i);
            if a.start < w.0 || a.start >= w.1 {
                continue;
            }
            if ctx.api.class(i) != Some(HostClass::Implicit) {
                continue;
            }
            let ns = a.end.saturating_sub(a.start);
            let kind = ctx.api.kind(i).unwrap_or(ApiKind::Other);
            let name = t.str(a.name);
            let cause = match kind {
                ApiKind::Free => SyncCause::Allocator,
                ApiKind::CopySync | ApiKind::CopyAsync => SyncCause::D2hRead,
                ApiKind::Sync => {
                    let after_copy = prev.is_some_and(|j| {
                        matches!(
                            ctx.api.kind(j),
                            Some(ApiKind::CopyAsync | ApiKind::CopySync)
                        ) && is_dtoh(ctx, j)
                            && a.start.saturating_sub(t.apis.end(j)) <= 50_000
                    });
                    if after_copy {
                        SyncCause::D2hRead
                    } else if name.contains("Event") {
                        SyncCause::EventSync
                    } else if name.contains("Stream") {
                        SyncCause::StreamSync
                    } else if name.contains("Device") || name.contains("Ctx") {
                        SyncCause::DeviceSync
                    } else {
                        SyncCause::Other
                    }
                }
                _ => SyncCause::Other,
            };
            add(cause, ns);
        }
    } else {
        for c in &t.host_calls {
            if c.start < w.0 || c.start >= w.1 {
                continue;
            }
            let cause = match c.call {
                fmt::HOSTCALL_DEVICE_SYNCHRONIZE => SyncCause::DeviceSync,
                fmt::HOSTCALL_STREAM_SYNCHRONIZE => SyncCause::StreamSync,
                fmt::HOSTCALL_EVENT_SYNCHRONIZE => SyncCause::EventSync,
                _ => continue,
            };
            add(cause, c.end.saturating_sub(c.start));
        }
        for c in &t.host_copies {
            let blocking = c.flags & fmt::HOSTCOPY_FLAG_ASYNC == 0;
            if c.start >= w.0
                && c.start < w.1
                && blocking
                && CopyKind::from_u8(c.copy_kind) == CopyKind::DtoH
            {
                add(SyncCause::D2hRead, c.end.saturating_sub(c.start));
            }
        }
    }
    let mut v: Vec<(SyncCause, u64, u64)> = SyncCause::ALL
        .iter()
        .zip(acc)
        .filter(|(_, a)| a.0 > 0)
        .map(|(c, a)| (*c, a.0, a.1))
        .collect();
    v.sort_by(|a, b| b.2.cmp(&a.2).then(b.1.cmp(&a.1)).then(a.0.cmp(&b.0)));
    v
}

fn is_dtoh(ctx: &Ctx, i: usize) -> bool {
    let a = ctx.t.apis.at(i);
    match ctx.memcpy_by_corr.get(a.corr).map(|j| &ctx.t.memcpys[j]) {
        Some(m) => CopyKind::from_u8(m.copy_kind) == CopyKind::DtoH,
        None => a.arg == 2,
    }
}

/// `cudaMalloc`-like calls in a window (allocator churn shows as both).
pub fn alloc_calls(ctx: &Ctx, w: (u64, u64)) -> u64 {
    ctx.t
        .apis
        .iter()
        .zip(ctx.api.kinds())
        .filter(|(a, k)| *k == ApiKind::Alloc && a.start >= w.0 && a.start < w.1)
        .count() as u64
}
