//! Symbol hooks: libgputrace.so exports CUDA runtime, NCCL and NVTX entry points of its
//! own. Preloaded, it comes first in the global symbol scope, so a program's (or a
//! Python extension's) calls land here; each hook notes the call in the thread's ring
//! and forwards to the real function, returning its result and errno untouched.
//!
//! What is hooked, and why:
//! * NCCL (`nccl.rs`): CUPTI never sees NCCL's API. Every collective and point-to-point
//!   call is recorded with its op, count, bytes, datatype, reduction, root or peer,
//!   stream, and its communicator's cross-rank id, rank, size and sequence number
//!   (`comms.rs`); communicator creation and destruction are recorded too.
//! * Copies (`cudart.rs`): cudaMemcpy, cudaMemcpyAsync, 2D and peer variants. Each gets
//!   its host memory classified pinned / pageable by the pinned-memory registry
//!   (`pinned.rs`), kept from cudaHostAlloc / cudaMallocHost / cudaHostRegister and
//!   their frees, which works whether or not CUPTI is on.
//! * Syncs, memsets and launches (`cudart.rs`): cudaStream/Device/EventSynchronize,
//!   cudaStreamWaitEvent, cudaMemset(Async), `__cudaLaunchKernel`,
//!   cudaLaunchKernelExC, cudaLaunchKernel, cudaGraphLaunch: a cheap host-side signal.
//! * NVTX (`nvtx.rs`): libgputrace is the NVTX injection library (the constructor sets
//!   `NVTX_INJECTION64_PATH` to it unless a tool already did; `gputrace run` sets it
//!   too); ranges and marks are recorded with (up to 40 bytes of) their text.
//!
//! # The hook table
//! The runtime and NCCL hooks are rows of `hook_table!` in `cudart.rs` and `nccl.rs`:
//! each row is a function's C prototype and the `Action` that records it; the glue
//! (guard, real function, wrapper) is generated. A new hook is one row.
//!
//! # Double recording
//! CUPTI's runtime API callbacks (session/cupti) already record an `Api` event for the
//! copies, syncs, memsets and launches above while they are on. The policy:
//! * While CUPTI's runtime callbacks are on (state TRACING and the collector subscribed,
//!   see `state::note_cupti_callbacks`), sync / memset / launch hooks record nothing: they
//!   pass straight through. Copy hooks record a `HostCopy` flagged
//!   `HOSTCOPY_FLAG_CUPTI_API`: it adds only the host memory classification, and the
//!   analyzer attaches it to the `Api` event of the same thread whose interval lies
//!   inside it, never counting the call twice.
//! * Otherwise (no CUPTI, CUPTI failed, the program's own profiler made us step aside:
//!   state BLIND, or `GPUTRACE_API=0`) the hooks record the whole call: `HostCopy`
//!   without the flag, `HostCall` for the rest.
//!
//! The decision is taken at the call's entry, so a call that straddles a change records
//! at worst a duplicate, never a hole.
//!
//! # Driver entry points
//! `cuGetProcAddress` / `cudaGetDriverEntryPoint(ByVersion)` are not hooked. cuBLAS,
//! cuDNN, the CUDA runtime itself and PyTorch's own driver calls reach the driver through
//! them, so hooking them would mean handing out wrapped function pointers for hundreds
//! of driver functions. The GPU side of that work is already complete in CUPTI's
//! CONCURRENT_KERNEL / MEMCPY / MEMSET activity (it sees every kernel, cuBLAS's
//! included) and the driver launch, copy and sync calls' host side comes through CUPTI
//! callbacks (on by default, `GPUTRACE_DRIVER_API=0` turns them off). A pinned allocation made through the driver (cuMemHostAlloc, e.g.
//! by XLA) is invisible to the registry; CUPTI's memcpy records still classify those
//! copies correctly, and the analyzer prefers CUPTI's classification where it has one.
//!
//! # Finding the real function
//! See `resolve.rs`: RTLD_NEXT, then the loaded library by soname (RTLD_NOLOAD: how
//! Python extensions' RTLD_LOCAL libraries are reached), then any loaded object of that
//! family; never our own definition; retried while missing whenever the set of loaded
//! objects changed; missing, the hook returns the API's "cannot initialise" error
//! (cudaErrorInitializationError, ncclSystemError) and says so once.
//!
//! # Cost
//! Not tracing: one relaxed load of the state (plus the cached real-function pointer):
//! about 1 ns over the call. Tracing: two time stamps (`rdtsc` where the kernel trusts
//! the TSC, see `base/tsc.rs`), three thread-local lookups, errno saved and restored, one
//! 64-byte ring record: 36-40 ns over the call on the 2-core CPU box, 57-73 ns on the
//! GPU host's slower CPU (bench/cpu-hooks.md).

pub mod comms;
pub mod cudart;
pub mod nccl;
pub mod nvtx;
pub mod pinned;
pub mod resolve;

use crate::base::ffi::{errno, guarded, set_errno};
use crate::base::state::cupti_sees_runtime_calls;
use crate::base::{internal, state, tsc};
use crate::session::pystack;
use std::cell::Cell;

/// Is a record pushed now kept? (TRACING, or BLIND: CUPTI blind, hooks still on.)
#[inline]
pub(crate) fn recording() -> bool {
    let s = state::get();
    s == state::TRACING || s == state::BLIND
}

/// Should a hook time the call it is about to make? IDLE counts: the call may be the
/// one that initialises CUDA (and starts tracing), and it is recorded if so.
#[inline(always)]
pub(crate) fn may_record(s: u8) -> bool {
    // IDLE = 0, TRACING = 1, BLIND = 2: one compare when not tracing.
    s <= state::BLIND && state::hooks_enabled()
}

/// Should hooks keep the registries (pinned memory, communicators) up to date? Yes in
/// every state but DISABLED, so a window opened later classifies correctly.
#[inline]
pub(crate) fn keep_registries() -> bool {
    state::get() != state::DISABLED && state::hooks_enabled()
}

/// The hooks' per-thread state, in one thread-local block (a TLS lookup in a shared
/// object is a call; a traced hook makes this one and the ring's).
struct HookTls {
    /// Inside one of our hooks.
    in_hook: Cell<bool>,
    /// The kernel thread id, cached (0 = not yet read).
    tid: Cell<u32>,
}

thread_local! {
    static HOOK_TLS: HookTls = const {
        HookTls {
            in_hook: Cell::new(false),
            tid: Cell::new(0),
        }
    };
}

/// The calling thread is inside one of our hooks: hooked calls the real function makes
/// in turn (NCCL's own ncclGroupStart, say) pass straight through.
pub(crate) struct Scope {
    tls: *const HookTls,
}

impl Scope {
    /// None on the tracer's own threads, inside another hook, or during TLS teardown.
    #[inline]
    pub(crate) fn enter() -> Option<Scope> {
        if internal::is_internal() {
            return None;
        }
        HOOK_TLS
            .try_with(|t| {
                // Lazily: a Scope made and dropped here would clear the outer hook's flag.
                (!t.in_hook.replace(true)).then(|| Scope {
                    tls: t as *const HookTls,
                })
            })
            .ok()
            .flatten()
    }

    /// The calling thread's kernel id.
    #[inline]
    pub(crate) fn tid(&self) -> u32 {
        // SAFETY: `tls` is this thread's HookTls (a Scope never leaves its thread: the
        // raw pointer makes it !Send), which lives as long as the thread.
        let t = unsafe { &*self.tls };
        let v = t.tid.get();
        if v != 0 {
            return v;
        }
        // SAFETY: gettid has no preconditions.
        let v = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
        t.tid.set(v);
        v
    }
}

impl Drop for Scope {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: as in `tid`.
        unsafe { (*self.tls).in_hook.set(false) };
    }
}

/// What a hook knew when the call began.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    /// CUPTI's callbacks record this call too.
    pub cupti: bool,
    /// Entry stamp (see base/tsc.rs: TSC or CLOCK_REALTIME; the writer converts).
    pub t0: u64,
    pub tid: u32,
}

/// Whether a hooked call records the caller's Python stack (session/pystack).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Site {
    /// No (launches, memsets, group brackets, ...).
    No,
    /// Unless CUPTI's callbacks record this call (they take the stack then): syncs and
    /// copies.
    UnlessCupti,
    /// Always: calls CUPTI never sees (NCCL).
    Always,
}

/// Runs a hook: times `call` (the real function, with the caller's arguments) when
/// tracing, then hands (entry, end time, result) to `record`. `quiet_under_cupti`: the
/// call is one CUPTI's callbacks record in full, so nothing is done while they are on.
/// The result and errno the caller sees are the real function's.
#[inline(always)]
pub(crate) fn run<R: Copy>(
    quiet_under_cupti: bool,
    call: impl FnOnce() -> R,
    record: impl FnOnce(&Entry, u64, R),
) -> R {
    run_at(Site::No, quiet_under_cupti, call, record)
}

/// [`run`], taking the caller's Python stack at entry where `site` says, and putting
/// it in the ring just ahead of the call's record.
#[inline(always)]
pub(crate) fn run_at<R: Copy>(
    site: Site,
    quiet_under_cupti: bool,
    call: impl FnOnce() -> R,
    record: impl FnOnce(&Entry, u64, R),
) -> R {
    let s = state::get();
    if !may_record(s) {
        return call();
    }
    let cupti = cupti_sees_runtime_calls(s);
    if quiet_under_cupti && cupti {
        return call();
    }
    let Some(scope) = Scope::enter() else {
        return call();
    };
    let mut stack = pystack::Stack::EMPTY;
    let wants_stack = match site {
        Site::No => false,
        Site::UnlessCupti => !cupti,
        Site::Always => true,
    };
    if wants_stack && recording() {
        // Leaves errno as it was.
        pystack::capture(&mut stack);
    }
    let t0 = tsc::stamp();
    let r = call();
    let t1 = tsc::stamp();
    let saved = errno();
    if recording() {
        let tid = scope.tid();
        guarded(|| {
            pystack::push(&stack, tid, t0);
            record(&Entry { cupti, t0, tid }, t1, r)
        });
    }
    drop(scope);
    set_errno(saved);
    r
}

/// When a registry call ran, and the calling thread.
pub(crate) struct Ran<'a> {
    pub t0: u64,
    pub t1: u64,
    scope: &'a Scope,
}

impl Ran<'_> {
    pub(crate) fn tid(&self) -> u32 {
        self.scope.tid()
    }
}

/// Runs a hook that keeps a registry (pinned memory, communicators), in every state but
/// DISABLED ([`keep_registries`]): `before` just ahead of the call (taking an entry out
/// that the call frees), `after` once it has returned, inside the guard, with its
/// value, the time the call ran and its result; `after` checks `recording()` before it
/// records. The result and errno the caller sees are the real function's.
#[inline]
pub(crate) fn run_keeping<R: Copy, B>(
    call: impl FnOnce() -> R,
    before: impl FnOnce() -> B,
    after: impl FnOnce(&Ran, B, R),
) -> R {
    if !keep_registries() {
        return call();
    }
    let Some(scope) = Scope::enter() else {
        return call();
    };
    let t0 = tsc::stamp();
    let b = before();
    let r = call();
    let t1 = tsc::stamp();
    let saved = errno();
    guarded(|| {
        let ran = Ran {
            t0,
            t1,
            scope: &scope,
        };
        after(&ran, b, r)
    });
    drop(scope);
    set_errno(saved);
    r
}

/// What a row of a hook table does around its real call: the glue hands it the call,
/// with the caller's arguments, inside the library's wrapper (see [`hook_table!`]).
/// Each family of hooks (NCCL collectives, copies, pinned allocations, ...) is one
/// implementation; a row builds its value from the hook's arguments.
pub(crate) trait Action<R> {
    fn run(self, call: impl FnOnce() -> R) -> R;
}

/// The wrapper of a library whose calls run as they are.
#[inline(always)]
pub(crate) fn direct<R>(_name: &str, call: impl FnOnce() -> R) -> R {
    call()
}

/// The hook table: one row per hooked C function, its prototype and then the
/// [`Action`] that records it:
///
/// ```text
/// hook_table! {
///     NCCL, inside stall::in_nccl_call;   // the library (resolve.rs) and the wrapper
///                                          // every real call runs in (none: `NCCL;`)
///     /// The row's own docs, if any.
///     extern "C" fn ncclSend(send: *const c_void, ..., stream: Stream) -> NcclResult;
///         => Op { op: fmt::NCCL_SEND, comm, stream, ... };
/// }
/// ```
///
/// Each row becomes the function exported under that name (outside unit tests) with
/// that signature, whose whole body is the FFI guard `entry!` around: the real
/// function found through `real!` (missing: the library's "cannot initialise" error,
/// said once), then the row's action run around the call of it with the caller's
/// arguments, inside the wrapper (`stall::in_nccl_call` names the NCCL call a thread
/// is in for stall reports). The action decides the rest: the recursion and
/// internal-thread guard, errno, the `recording()` check, the Python call site
/// ([`run_at`] and the registry runners). The table also lists its names in `HOOKED`.
///
/// The function is named `hook`, inside a block whose value is the constant of the
/// exported name (a pointer to it, which Rust callers call as they would the function):
/// `interpose/tests/layers.rs` reads the source and checks that every `extern "C" fn`
/// it can name is one `entry!`, which it cannot do for a `$name`. Named `hook`, the
/// body every row gets is checked; the rows are C declarations to it.
macro_rules! hook_table {
    ($lib:ident; $($rows:tt)*) => {
        $crate::exports::hooks::hook_table!(
            $lib, inside $crate::exports::hooks::direct; $($rows)*
        );
    };
    ($lib:ident, inside $wrap:path; $(
        $(#[$attr:meta])*
        extern "C" fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;
            => $action:expr;
    )*) => {
        /// The functions this table hooks.
        pub const HOOKED: &[&str] = &[$(stringify!($name)),*];
        $(
            $(#[$attr])*
            ///
            /// # Safety
            /// Called by C code with the arguments of the C function of the same name.
            #[allow(non_upper_case_globals)]
            pub const $name: unsafe extern "C" fn($($ty),*) -> $ret = {
                #[cfg_attr(not(test), export_name = stringify!($name))]
                #[allow(clippy::too_many_arguments)]
                unsafe extern "C" fn hook($($arg: $ty),*) -> $ret {
                    $crate::base::ffi::entry!($lib.missing.0, {
                        type F = unsafe extern "C" fn($($ty),*) -> $ret;
                        const NAME: &::std::ffi::CStr =
                            match ::std::ffi::CStr::from_bytes_with_nul(
                                concat!(stringify!($name), "\0").as_bytes(),
                            ) {
                                Ok(c) => c,
                                Err(_) => panic!("a C function name"),
                            };
                        let f = match $crate::exports::hooks::resolve::real!($lib, NAME, F) {
                            Ok(f) => f,
                            Err(e) => return e,
                        };
                        $crate::exports::hooks::Action::run($action, || {
                            $wrap(stringify!($name), || {
                                // SAFETY: the caller's arguments, unchanged, to the real
                                // function, whose C signature is the row's.
                                unsafe { f($($arg),*) }
                            })
                        })
                    })
                }
                hook
            };
        )*
    };
}
pub(crate) use hook_table;

/// In a forked child: the hooks' per-thread state of the forking thread, and the
/// registries another parent thread may have been changing, start clean.
pub fn after_fork() {
    let _ = HOOK_TLS.try_with(|t| {
        t.in_hook.set(false);
        // The forking thread is a new thread in the child.
        t.tid.set(0);
    });
    pinned::after_fork();
    comms::after_fork();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_is_one_compare_over_the_states() {
        assert!(may_record(state::IDLE));
        assert!(may_record(state::TRACING));
        assert!(may_record(state::BLIND));
        for s in [state::DORMANT, state::STOPPED, state::DISABLED] {
            assert!(!may_record(s), "state {s}");
        }
    }

    #[test]
    fn cupti_policy_follows_state_and_subscription() {
        use crate::base::state::note_cupti_callbacks;
        note_cupti_callbacks(true);
        assert!(cupti_sees_runtime_calls(state::TRACING));
        // Stepped aside for the program's profiler: our callbacks are gone.
        assert!(!cupti_sees_runtime_calls(state::BLIND));
        assert!(!cupti_sees_runtime_calls(state::IDLE));
        note_cupti_callbacks(false);
        assert!(!cupti_sees_runtime_calls(state::TRACING));
    }

    #[test]
    fn scopes_do_not_nest() {
        let a = Scope::enter();
        assert!(a.is_some());
        assert!(
            Scope::enter().is_none(),
            "a hook inside a hook passes through"
        );
        assert!(
            Scope::enter().is_none(),
            "and the outer hook's scope is intact"
        );
        drop(a);
        assert!(Scope::enter().is_some());
        let _g = internal::Internal::enter();
        assert!(
            Scope::enter().is_none(),
            "the tracer's own calls pass through"
        );
    }
}
