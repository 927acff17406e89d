//! The CUPTI callback for the API calls we enabled (`base::cupti::apis`): the entry stamp on
//! ENTER, one ring record on EXIT. It runs on the program's thread inside every such
//! call, so it does as little as it can: no allocation, no lock.

use crate::base::cupti::apis;
use crate::base::ffi::entry;
use crate::base::{clock, internal, local, state, tsc};
use crate::rings::{self, HostRecord, REC_API};
use crate::session::{pystack, stall};
use cupti_sys as sys;
use gputrace_format::{DOMAIN_DRIVER, DOMAIN_RUNTIME};
use std::ffi::c_void;

/// Counts the callback in the thread's cost totals when dropped (and times one in
/// [`rings::OWN_COST_EVERY`] from its stamp).
struct OwnCost(u64);

impl Drop for OwnCost {
    #[inline]
    fn drop(&mut self) {
        rings::note_own_call(self.0);
    }
}

/// True for a driver call made underneath a runtime call we record. The thread's
/// `in_runtime` flag (`base::local`) is set from a runtime call's ENTER to its EXIT:
/// the driver call the runtime makes underneath is then skipped, so each launch, copy
/// or sync is recorded once. Runtime calls do not nest, so a flag is enough; were an
/// EXIT ever lost, the next runtime call's EXIT clears it.
#[inline]
fn nested_driver_call(driver: bool, enter: bool) -> bool {
    local::with(|l| {
        if driver {
            return l.in_runtime.get();
        }
        l.in_runtime.set(enter);
        false
    })
}

/// Subscribed with `cuptiSubscribe`; CUPTI calls it at ENTER and EXIT of each enabled
/// API call.
///
/// # Safety
/// Called by CUPTI with a `CUpti_CallbackData` for the runtime and driver domains.
pub unsafe extern "C" fn api_callback(
    _userdata: *mut c_void,
    domain: sys::CUpti_CallbackDomain,
    cbid: sys::CUpti_CallbackId,
    data: *const c_void,
) {
    entry!({
        if data.is_null() {
            return;
        }
        // SAFETY: for the runtime and driver domains CUPTI passes a CUpti_CallbackData,
        // valid for the duration of the callback.
        let d = unsafe { &*(data as *const sys::CUpti_CallbackData) };
        let driver = domain == sys::CUpti_CallbackDomain_CUPTI_CB_DOMAIN_DRIVER_API;
        // First, before anything else: the nesting flag is kept even while not tracing,
        // so a window that opens inside a runtime call still skips its driver call.
        if nested_driver_call(
            driver,
            d.callbackSite == sys::CUpti_ApiCallbackSite_CUPTI_API_ENTER,
        ) {
            return;
        }
        // The time spent in here from now on, added to this thread's totals on the way
        // out (written to the trace as TracerCost events by the writer). The skip above
        // (one thread-local read) is left out: timing it would cost more than it does.
        // The same stamp is the call's entry (ENTER) or end (EXIT) time.
        let now = tsc::stamp();
        let _cost = OwnCost(now);
        if !state::is_tracing() || internal::is_internal() || d.correlationData.is_null() {
            return;
        }
        // Hook stamps (TSC where the kernel trusts it, else CLOCK_REALTIME; the writer
        // converts them), the cheaper clock on the program's launch path.
        let dom = if driver {
            DOMAIN_DRIVER
        } else {
            DOMAIN_RUNTIME
        };
        let info = apis::find(dom, cbid);
        let site = info.is_some_and(|i| i.site);
        if d.callbackSite == sys::CUpti_ApiCallbackSite_CUPTI_API_ENTER {
            let t0 = now;
            // SAFETY: correlationData is a per-call u64 slot CUPTI keeps from ENTER to EXIT.
            unsafe { *d.correlationData = t0 };
            local::with(|l| l.entered.set(d.correlationId));
            // Which call this thread is inside, for a stall report.
            stall::call_enter(dom, cbid, t0);
            if site {
                // The caller's Python stack, taken on entry, held until EXIT.
                pystack::hold(t0);
            }
            return;
        }
        let end = now;
        stall::call_exit();
        // An EXIT whose ENTER we did not see (the call began before tracing, or before
        // its callbacks were switched on): its slot holds no stamp of ours, so there is
        // no record to make. Calls we record do not nest, so one id per thread suffices.
        if local::with(|l| l.entered.replace(0)) != d.correlationId {
            return;
        }
        // SAFETY: as above; written by our ENTER callback of the same call.
        let start = unsafe { *d.correlationData };
        let tid = clock::tid();
        if site {
            // Just ahead of the call's own record, which it belongs to.
            pystack::push_held(start, tid);
        }
        let (bytes, arg) = match info {
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
        // The pointer an allocation made or a free was given (pairs frees with
        // allocations: memory in use without MEMORY2 records).
        let ptr = match info {
            Some(info) if info.class == apis::Class::Alloc => {
                // SAFETY: functionParams is the parameter struct of exactly this call,
                // at its EXIT.
                unsafe { apis::pointer(info, d.functionParams as *const u8, result == 0) }
            }
            _ => 0,
        };
        // A launch that returned: noted as outstanding until its record arrives.
        if result == 0 && info.is_some_and(|i| i.class == apis::Class::Launch) {
            // SAFETY: functionParams is the parameter struct of exactly this call.
            let dims = unsafe { launch_dims(dom, cbid, d.functionParams as *const u8) };
            stall::note_launch(d.correlationId, tid, start, d.symbolName, dims);
        }
        // Laid out as rings::record says for API records.
        rings::push(&HostRecord {
            kind: REC_API,
            a: dom as u16,
            b: cbid,
            tid,
            corr: d.correlationId,
            t0: start,
            t1: end,
            x: [bytes, arg, result, ptr],
        });
    })
}

/// Grid and block of a launch whose parameters are (func, grid x/y/z, block x/y/z,
/// ...): cudaLaunchKernel and cudaLaunchCooperativeKernel, cuLaunchKernel and
/// cuLaunchCooperativeKernel (and their _ptsz forms); zeros for other launches.
///
/// # Safety
/// `params` must be NULL or the parameter struct of call (`dom`, `cbid`).
unsafe fn launch_dims(dom: u8, cbid: u32, params: *const u8) -> [u32; 6] {
    let mut out = [0u32; 6];
    let known = match dom {
        DOMAIN_RUNTIME => matches!(cbid, 211 | 214 | 269 | 270),
        DOMAIN_DRIVER => matches!(cbid, 307 | 442 | 477 | 478),
        _ => false,
    };
    if params.is_null() || !known {
        return out;
    }
    for (i, o) in out.iter_mut().enumerate() {
        // SAFETY: the grid (3 x u32) sits at offset 8 and the block right after it, at
        // 20, in these calls' parameter structs (after the 8-byte function pointer; the
        // driver's gridDimX..blockDimZ are six consecutive unsigned ints there too).
        *o = unsafe { (params.add(8 + 4 * i) as *const u32).read_unaligned() };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One callback of runtime call `cbid` with id `corr` at `site`, as CUPTI makes it.
    fn callback(cbid: u32, corr: u32, site: sys::CUpti_ApiCallbackSite, slot: &mut u64) {
        let mut ret: i32 = 0;
        // SAFETY: CUpti_CallbackData is plain C data; all zeroes is a valid value.
        let mut d: sys::CUpti_CallbackData = unsafe { std::mem::zeroed() };
        d.callbackSite = site;
        d.correlationId = corr;
        d.correlationData = slot;
        d.functionReturnValue = &mut ret as *mut i32 as *mut c_void;
        // SAFETY: a CUpti_CallbackData of a runtime call, as CUPTI passes it.
        unsafe {
            api_callback(
                std::ptr::null_mut(),
                sys::CUpti_CallbackDomain_CUPTI_CB_DOMAIN_RUNTIME_API,
                cbid,
                &d as *const sys::CUpti_CallbackData as *const c_void,
            )
        };
    }

    #[test]
    fn an_exit_whose_enter_was_not_seen_makes_no_record() {
        let _g = rings::TEST_SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let before = state::get();
        state::set(state::TRACING);
        let tid = std::thread::spawn(|| {
            let (enter, exit) = (
                sys::CUpti_ApiCallbackSite_CUPTI_API_ENTER,
                sys::CUpti_ApiCallbackSite_CUPTI_API_EXIT,
            );
            // cudaStreamSynchronize (131): a pair, an EXIT alone whose slot holds a
            // stale stamp (its ENTER came before tracing), then a pair again.
            let mut slot = 0u64;
            callback(131, 7, enter, &mut slot);
            callback(131, 7, exit, &mut slot);
            let mut stale = 12_345u64;
            callback(131, 8, exit, &mut stale);
            callback(131, 9, enter, &mut slot);
            callback(131, 9, exit, &mut slot);
            clock::tid()
        })
        .join()
        .unwrap();
        state::set(before);
        let mut corrs = Vec::new();
        rings::drain_all(|t, r| {
            if t == tid && r.kind == REC_API {
                corrs.push(r.corr);
            }
        });
        assert_eq!(corrs, vec![7, 9]);
    }
}
