//! libgputrace as the NVTX injection library.
//!
//! NVTX v3 is header-only: every library that uses it (PyTorch, NCCL, the program)
//! carries its own copy, which on its first NVTX call reads `NVTX_INJECTION64_PATH`,
//! dlopens that library, and calls its `InitializeInjectionNvtx2(getExportTable)`. The
//! tool asks `getExportTable(NVTX_ETID_CALLBACKS = 1)` for a table whose
//! `GetModuleFunctionTable(module, &table, &size)` hands out, per module, an array
//! (indexed by callback id) of pointers to the copy's function-pointer slots; the tool
//! writes its own functions into the slots it implements. Slots it leaves alone become
//! no-ops. Returning 0 from the init function makes every NVTX call a no-op.
//!
//! We fill the CORE module (id 1): MarkEx/A/W (ids 1-3), RangeStartEx/A/W (4-6),
//! RangeEnd (7), RangePushEx/A/W (8-10), RangePop (11). Category and thread naming
//! (12-15) and the domain / sync modules are left to NVTX's no-ops. Each copy of NVTX
//! calls us separately; they all share the per-thread push depth (the default domain is
//! one per thread, whichever copy pushes).
//!
//! Text: the caller's string may be gone when the writer reads the ring, so up to
//! 40 bytes are copied into the record (UTF-32 `wchar_t` text is converted to UTF-8),
//! flagged `NVTX_FLAG_TRUNCATED` when cut. Registered strings (`NVTX_MESSAGE_TYPE_REGISTERED`
//! needs the domain module) are recorded without text.
//!
//! Values returned, as NVTX specifies: RangeStart* a process-unique range id; RangePush*
//! the new range's nesting level from 0; RangePop the level of the range it ends, or -1
//! with nothing to pop. They are kept right whether or not a trace is being written.

#![allow(non_snake_case)] // the exported names are the C API's

use crate::base::ffi::{entry, errno, guarded, set_errno};
use crate::base::{log, state, tsc};
use crate::rings::record::{self as rec, NVTX_TEXT};
use crate::rings::{self as ring};
use crate::runtime::window;
use gputrace_format as fmt;
use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::{AtomicU64, Ordering};

type GetExportTable = unsafe extern "C" fn(u32) -> *const c_void;
type Slot = Option<unsafe extern "C" fn()>;
type GetModuleFunctionTable =
    unsafe extern "C" fn(c_int, *mut *mut *mut Slot, *mut c_uint) -> c_int;

const ETID_CALLBACKS: u32 = 1;
const ETID_VERSIONINFO: u32 = 3;
const MODULE_CORE: c_int = 1;
/// The NVTX API version we implement (reported to NVTX's version table).
const NVTX_VERSION: u32 = 3;

#[repr(C)]
struct ExportTableCallbacks {
    struct_size: usize,
    get_module_function_table: Option<GetModuleFunctionTable>,
}

#[repr(C)]
struct ExportTableVersionInfo {
    struct_size: usize,
    version: u32,
    reserved0: u32,
    set_injection_nvtx_version: Option<unsafe extern "C" fn(u32)>,
}

/// `nvtxEventAttributes_t` (v2; v1 has the same layout).
#[repr(C)]
pub struct EventAttributes {
    pub version: u16,
    pub size: u16,
    pub category: u32,
    pub color_type: i32,
    pub color: u32,
    pub payload_type: i32,
    pub reserved0: i32,
    pub payload: u64,
    pub message_type: i32,
    pub message: *const c_void,
}

const MESSAGE_ASCII: i32 = 1;
const MESSAGE_UNICODE: i32 = 2;

/// NVTX's entry point for an injection library: fills the CORE callbacks. Returns 1 on
/// success, 0 to leave NVTX as no-ops.
///
/// # Safety
/// Called by NVTX with its `nvtxGetExportTable` function.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn InitializeInjectionNvtx2(get: Option<GetExportTable>) -> c_int {
    entry!(0, {
        let saved = errno();
        let ok = if state::get() == state::DISABLED || !state::hooks_enabled() {
            false
        } else {
            // SAFETY: `get` is NVTX's export table function, per the injection protocol.
            get.is_some_and(|g| unsafe { attach(g) })
        };
        set_errno(saved);
        ok as c_int
    })
}

/// # Safety
/// `get` must be an NVTX `nvtxGetExportTable`.
unsafe fn attach(get: GetExportTable) -> bool {
    // SAFETY: the callbacks table, per the protocol: NULL or a struct of at least
    // `struct_size` bytes that lives as long as the NVTX copy.
    let cb = unsafe { get(ETID_CALLBACKS) } as *const ExportTableCallbacks;
    if cb.is_null() {
        return false;
    }
    // SAFETY: as above.
    let cb = unsafe { &*cb };
    if cb.struct_size < std::mem::size_of::<ExportTableCallbacks>() {
        return false;
    }
    let Some(get_table) = cb.get_module_function_table else {
        return false;
    };
    let mut table: *mut *mut Slot = std::ptr::null_mut();
    let mut size: c_uint = 0;
    // SAFETY: valid out-pointers.
    if unsafe { get_table(MODULE_CORE, &mut table, &mut size) } == 0 || table.is_null() {
        return false;
    }
    let ours = core_functions();
    for (id, f) in ours.iter().enumerate().skip(1) {
        if id >= size as usize {
            break;
        }
        let Some(f) = f else { continue };
        // SAFETY: `table` holds `size` entries, each NULL or the address of one of
        // the NVTX copy's function-pointer slots, which it reads after we return.
        unsafe {
            let slot = *table.add(id);
            if !slot.is_null() {
                *slot = Some(*f);
            }
        }
    }
    // SAFETY: the version table, per the protocol (NULL when this NVTX has none).
    let vi = unsafe { get(ETID_VERSIONINFO) } as *const ExportTableVersionInfo;
    if !vi.is_null() {
        // SAFETY: as above.
        let vi = unsafe { &*vi };
        if vi.struct_size >= std::mem::size_of::<ExportTableVersionInfo>() {
            if let Some(set) = vi.set_injection_nvtx_version {
                // SAFETY: NVTX's own function, taking our version.
                unsafe { set(NVTX_VERSION) };
            }
        }
    }
    log::debug("NVTX attached");
    true
}

/// Our CORE functions by callback id (index 0 is the invalid id).
fn core_functions() -> [Option<unsafe extern "C" fn()>; 12] {
    // SAFETY: (every transmute) NVTX calls each slot with the signature of the
    // callback id it sits at, which is the signature of the function put there.
    unsafe {
        use std::mem::transmute as t;
        type F = unsafe extern "C" fn();
        [
            None,
            Some(t::<unsafe extern "C" fn(*const EventAttributes), F>(
                nvtx_mark_ex,
            )),
            Some(t::<unsafe extern "C" fn(*const c_char), F>(nvtx_mark_a)),
            Some(t::<unsafe extern "C" fn(*const libc::wchar_t), F>(
                nvtx_mark_w,
            )),
            Some(t::<unsafe extern "C" fn(*const EventAttributes) -> u64, F>(
                nvtx_range_start_ex,
            )),
            Some(t::<unsafe extern "C" fn(*const c_char) -> u64, F>(
                nvtx_range_start_a,
            )),
            Some(t::<unsafe extern "C" fn(*const libc::wchar_t) -> u64, F>(
                nvtx_range_start_w,
            )),
            Some(t::<unsafe extern "C" fn(u64), F>(nvtx_range_end)),
            Some(t::<unsafe extern "C" fn(*const EventAttributes) -> c_int, F>(nvtx_range_push_ex)),
            Some(t::<unsafe extern "C" fn(*const c_char) -> c_int, F>(
                nvtx_range_push_a,
            )),
            Some(t::<unsafe extern "C" fn(*const libc::wchar_t) -> c_int, F>(
                nvtx_range_push_w,
            )),
            Some(t::<unsafe extern "C" fn() -> c_int, F>(nvtx_range_pop)),
        ]
    }
}

// ---------------------------------------------------------------------------------
// Text.

/// Up to 40 bytes of a message, as UTF-8.
#[derive(Clone, Copy)]
pub struct Text {
    pub buf: [u8; NVTX_TEXT],
    pub len: usize,
    pub truncated: bool,
}

impl Text {
    pub const NONE: Text = Text {
        buf: [0; NVTX_TEXT],
        len: 0,
        truncated: false,
    };

    /// # Safety
    /// `p` is NULL or a NUL-terminated string.
    pub unsafe fn from_c(p: *const c_char) -> Text {
        let mut t = Text::NONE;
        if p.is_null() {
            return t;
        }
        for i in 0..=NVTX_TEXT {
            // SAFETY: reading stops at the NUL, which the string has.
            let b = unsafe { *p.add(i) } as u8;
            if b == 0 {
                return t;
            }
            if i == NVTX_TEXT {
                t.truncated = true;
                return t;
            }
            t.buf[i] = b;
            t.len = i + 1;
        }
        t
    }

    /// # Safety
    /// `p` is NULL or a NUL-terminated `wchar_t` (UTF-32 on Linux) string.
    pub unsafe fn from_wide(p: *const libc::wchar_t) -> Text {
        let mut t = Text::NONE;
        if p.is_null() {
            return t;
        }
        let mut i = 0;
        loop {
            // SAFETY: reading stops at the NUL, which the string has.
            let w = unsafe { *p.add(i) };
            if w == 0 {
                return t;
            }
            let c = char::from_u32(w as u32).unwrap_or(char::REPLACEMENT_CHARACTER);
            let n = c.len_utf8();
            if t.len + n > NVTX_TEXT {
                t.truncated = true;
                return t;
            }
            c.encode_utf8(&mut t.buf[t.len..t.len + n]);
            t.len += n;
            i += 1;
        }
    }

    /// # Safety
    /// `a` is NULL or an `nvtxEventAttributes_t` whose `size` is honest.
    pub unsafe fn from_attributes(a: *const EventAttributes) -> Text {
        if a.is_null() {
            return Text::NONE;
        }
        // SAFETY: the caller's attributes; `size` says how much of it exists.
        let a = unsafe { &*a };
        if (a.size as usize) < std::mem::size_of::<EventAttributes>() {
            return Text::NONE;
        }
        match a.message_type {
            // SAFETY: the message union holds this kind of string.
            MESSAGE_ASCII => unsafe { Text::from_c(a.message as *const c_char) },
            // SAFETY: as above.
            MESSAGE_UNICODE => unsafe { Text::from_wide(a.message as *const libc::wchar_t) },
            _ => Text::NONE,
        }
    }
}

// ---------------------------------------------------------------------------------
// The callbacks.

thread_local! {
    static DEPTH: Cell<i32> = const { Cell::new(0) };
}

static NEXT_RANGE: AtomicU64 = AtomicU64::new(1);

#[inline]
fn recording() -> bool {
    super::recording() && state::hooks_enabled()
}

/// Records one NVTX event; `text` is only read when recording.
#[inline]
fn record(kind: u8, id: u64, text: impl FnOnce() -> Text) {
    if !recording() {
        return;
    }
    // Our own NVTX functions make no hooked calls; the scope gives the cached tid and
    // skips the tracer's own threads.
    let Some(scope) = super::Scope::enter() else {
        return;
    };
    let saved = errno();
    guarded(|| {
        let ts = tsc::stamp();
        let t = text();
        if (kind == fmt::NVTX_START || kind == fmt::NVTX_PUSH)
            && window::is_step_name(&t.buf[..t.len])
        {
            window::note_step();
        }
        let flags = if t.truncated {
            fmt::NVTX_FLAG_TRUNCATED
        } else {
            0
        };
        ring::push(&rec::nvtx(
            ts,
            scope.tid(),
            kind,
            flags,
            id,
            &t.buf[..t.len],
        ));
    });
    drop(scope);
    set_errno(saved);
}

fn push_level() -> i32 {
    DEPTH
        .try_with(|d| {
            let l = d.get();
            d.set(l + 1);
            l
        })
        .unwrap_or(-1)
}

fn pop_level() -> i32 {
    DEPTH
        .try_with(|d| {
            let l = d.get();
            if l <= 0 {
                -1
            } else {
                d.set(l - 1);
                l - 1
            }
        })
        .unwrap_or(-1)
}

unsafe extern "C" fn nvtx_mark_ex(a: *const EventAttributes) {
    entry!({
        // SAFETY: NVTX passes the caller's attributes.
        record(fmt::NVTX_MARK, 0, || unsafe { Text::from_attributes(a) });
    })
}

unsafe extern "C" fn nvtx_mark_a(m: *const c_char) {
    entry!({
        // SAFETY: NVTX passes the caller's C string.
        record(fmt::NVTX_MARK, 0, || unsafe { Text::from_c(m) });
    })
}

unsafe extern "C" fn nvtx_mark_w(m: *const libc::wchar_t) {
    entry!({
        // SAFETY: NVTX passes the caller's wide string.
        record(fmt::NVTX_MARK, 0, || unsafe { Text::from_wide(m) });
    })
}

fn start(text: impl FnOnce() -> Text) -> u64 {
    let id = NEXT_RANGE.fetch_add(1, Ordering::Relaxed);
    record(fmt::NVTX_START, id, text);
    id
}

unsafe extern "C" fn nvtx_range_start_ex(a: *const EventAttributes) -> u64 {
    entry!(0, {
        // SAFETY: NVTX passes the caller's attributes.
        start(|| unsafe { Text::from_attributes(a) })
    })
}

unsafe extern "C" fn nvtx_range_start_a(m: *const c_char) -> u64 {
    entry!(0, {
        // SAFETY: NVTX passes the caller's C string.
        start(|| unsafe { Text::from_c(m) })
    })
}

unsafe extern "C" fn nvtx_range_start_w(m: *const libc::wchar_t) -> u64 {
    entry!(0, {
        // SAFETY: NVTX passes the caller's wide string.
        start(|| unsafe { Text::from_wide(m) })
    })
}

unsafe extern "C" fn nvtx_range_end(id: u64) {
    entry!({
        record(fmt::NVTX_END, id, || Text::NONE);
    })
}

fn push(text: impl FnOnce() -> Text) -> c_int {
    let level = push_level();
    if level >= 0 {
        record(fmt::NVTX_PUSH, level as u64, text);
    }
    level
}

unsafe extern "C" fn nvtx_range_push_ex(a: *const EventAttributes) -> c_int {
    entry!(-1, {
        // SAFETY: NVTX passes the caller's attributes.
        push(|| unsafe { Text::from_attributes(a) })
    })
}

unsafe extern "C" fn nvtx_range_push_a(m: *const c_char) -> c_int {
    entry!(-1, {
        // SAFETY: NVTX passes the caller's C string.
        push(|| unsafe { Text::from_c(m) })
    })
}

unsafe extern "C" fn nvtx_range_push_w(m: *const libc::wchar_t) -> c_int {
    entry!(-1, {
        // SAFETY: NVTX passes the caller's wide string.
        push(|| unsafe { Text::from_wide(m) })
    })
}

unsafe extern "C" fn nvtx_range_pop() -> c_int {
    entry!(-1, {
        let level = pop_level();
        if level >= 0 {
            record(fmt::NVTX_POP, level as u64, || Text::NONE);
        }
        level
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_have_the_nvtx_layout() {
        assert_eq!(std::mem::offset_of!(EventAttributes, category), 4);
        assert_eq!(std::mem::offset_of!(EventAttributes, payload), 24);
        assert_eq!(std::mem::offset_of!(EventAttributes, message_type), 32);
        assert_eq!(std::mem::offset_of!(EventAttributes, message), 40);
        assert_eq!(std::mem::size_of::<EventAttributes>(), 48);
    }

    #[test]
    fn c_text_is_copied_and_cut_at_40_bytes() {
        // SAFETY: NUL-terminated literals.
        let t = unsafe { Text::from_c(c"forward".as_ptr()) };
        assert_eq!((&t.buf[..t.len], t.truncated), (&b"forward"[..], false));
        let exact = "x".repeat(NVTX_TEXT);
        let c = std::ffi::CString::new(exact.clone()).unwrap();
        // SAFETY: as above.
        let t = unsafe { Text::from_c(c.as_ptr()) };
        assert_eq!((t.len, t.truncated), (NVTX_TEXT, false));
        let c = std::ffi::CString::new(exact + "y").unwrap();
        // SAFETY: as above.
        let t = unsafe { Text::from_c(c.as_ptr()) };
        assert_eq!((t.len, t.truncated), (NVTX_TEXT, true));
        // SAFETY: NULL is allowed.
        assert_eq!(unsafe { Text::from_c(std::ptr::null()) }.len, 0);
    }

    #[test]
    fn wide_text_becomes_utf8() {
        let w: Vec<libc::wchar_t> = "naïve λ"
            .chars()
            .map(|c| c as libc::wchar_t)
            .chain([0])
            .collect();
        // SAFETY: NUL-terminated.
        let t = unsafe { Text::from_wide(w.as_ptr()) };
        assert_eq!(std::str::from_utf8(&t.buf[..t.len]).unwrap(), "naïve λ");
        let mut long = vec!['é' as libc::wchar_t; 30];
        long.push(0);
        // SAFETY: NUL-terminated.
        let t = unsafe { Text::from_wide(long.as_ptr()) };
        assert_eq!((t.len, t.truncated), (NVTX_TEXT, true));
    }

    #[test]
    fn attribute_messages_by_type() {
        let mut a = EventAttributes {
            version: 2,
            size: 48,
            category: 0,
            color_type: 0,
            color: 0,
            payload_type: 0,
            reserved0: 0,
            payload: 0,
            message_type: MESSAGE_ASCII,
            message: c"step".as_ptr() as *const c_void,
        };
        // SAFETY: a valid attributes struct.
        let t = unsafe { Text::from_attributes(&a) };
        assert_eq!(&t.buf[..t.len], b"step");
        // Registered: needs the domain module.
        a.message_type = 3;
        // SAFETY: a valid attributes struct.
        assert_eq!(unsafe { Text::from_attributes(&a) }.len, 0);
        // Too small to hold the message.
        a.message_type = MESSAGE_ASCII;
        a.size = 40;
        // SAFETY: a valid attributes struct whose `size` understates it (read less, not more).
        assert_eq!(unsafe { Text::from_attributes(&a) }.len, 0);
    }

    #[test]
    fn push_pop_levels_follow_nvtx() {
        std::thread::spawn(|| {
            // SAFETY: plain callbacks with valid arguments.
            unsafe {
                assert_eq!(nvtx_range_pop(), -1, "nothing to pop");
                assert_eq!(nvtx_range_push_a(c"a".as_ptr()), 0);
                assert_eq!(nvtx_range_push_a(c"b".as_ptr()), 1);
                assert_eq!(nvtx_range_pop(), 1);
                assert_eq!(nvtx_range_pop(), 0);
                assert_eq!(nvtx_range_pop(), -1);
                let a = nvtx_range_start_a(c"r".as_ptr());
                let b = nvtx_range_start_a(c"s".as_ptr());
                assert!(a > 0 && b > a);
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_core_table_is_filled_through_the_export_table() {
        // A minimal NVTX copy: slots start NULL; we check ours land at their ids.
        static mut SLOTS: [Slot; 16] = [None; 16];
        static mut TABLE: [*mut Slot; 17] = [std::ptr::null_mut(); 17];
        unsafe extern "C" fn get_table(
            module: c_int,
            out: *mut *mut *mut Slot,
            size: *mut c_uint,
        ) -> c_int {
            if module != MODULE_CORE {
                return 0;
            }
            // SAFETY: test-only statics, single-threaded use.
            unsafe {
                let slots = std::ptr::addr_of_mut!(SLOTS);
                let table = std::ptr::addr_of_mut!(TABLE);
                for i in 1..16 {
                    (*table)[i] = std::ptr::addr_of_mut!((*slots)[i]);
                }
                *out = (*table).as_mut_ptr();
                *size = 16;
            }
            1
        }
        static CB: ExportTableCallbacks = ExportTableCallbacks {
            struct_size: std::mem::size_of::<ExportTableCallbacks>(),
            get_module_function_table: Some(get_table),
        };
        unsafe extern "C" fn get(id: u32) -> *const c_void {
            if id == ETID_CALLBACKS {
                &CB as *const ExportTableCallbacks as *const c_void
            } else {
                std::ptr::null()
            }
        }
        // SAFETY: `get` follows the protocol.
        assert!(unsafe { attach(get) });
        // SAFETY: read back after attach wrote them.
        let slots = unsafe { *std::ptr::addr_of!(SLOTS) };
        assert!(slots[0].is_none());
        for (i, s) in slots.iter().enumerate().take(12).skip(1) {
            assert!(s.is_some(), "slot {i}");
        }
        assert!(
            slots[12..].iter().all(|s| s.is_none()),
            "naming left to NVTX"
        );
        let pop: unsafe extern "C" fn() -> c_int =
            // SAFETY: slot 11 is RangePop.
            unsafe { std::mem::transmute(slots[11].unwrap()) };
        std::thread::spawn(move || {
            // SAFETY: our RangePop.
            assert_eq!(unsafe { pop() }, -1)
        })
        .join()
        .unwrap();
    }
}
