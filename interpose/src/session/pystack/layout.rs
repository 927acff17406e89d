//! Where CPython keeps what a stack walk reads, per minor version (64-bit Linux, the
//! default build: no `Py_DEBUG`, no `Py_TRACE_REFS`, not free-threaded). The numbers
//! are `offsetof` values from each version's own headers (3.9.18, 3.10.13, 3.11.7,
//! 3.12.1, 3.13.0; layouts do not change within a minor version). 3.13 also
//! publishes them at the start of `_PyRuntime` (`_Py_DebugOffsets`), which is read
//! where present and preferred over the table.
//!
//! The walk: the thread state's current frame (3.9/3.10 `tstate->frame`, a
//! `PyFrameObject`; 3.11/3.12 `tstate->cframe->current_frame` and 3.13
//! `tstate->current_frame`, an `_PyInterpreterFrame`), then each frame's code object,
//! position and caller.

use super::lines::Format;

/// What a frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// 3.9/3.10 `PyFrameObject`: the position is `f_lasti` (an int).
    Object,
    /// 3.11+ `_PyInterpreterFrame`: the position is a pointer into the code object's
    /// bytecode (`prev_instr`, 3.13 `instr_ptr`).
    Interp,
}

/// Offsets (bytes) of the fields a walk and its resolution read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub major: u8,
    pub minor: u8,
    pub micro: u8,
    pub frames: FrameKind,
    pub lines: Format,
    /// Thread state -> its frame pointer (3.11/3.12: the `_PyCFrame` pointer).
    pub tstate_frame: u64,
    /// 3.11/3.12: `_PyCFrame` -> current frame.
    pub cframe_current: Option<u64>,
    /// 3.11+: thread state -> `datastack_chunk` (the chunk its frames are pushed on;
    /// `datastack_top` follows it). A walk reads the top of the chunk in one piece.
    pub tstate_chunk: Option<u64>,
    pub frame_back: u64,
    pub frame_code: u64,
    /// `f_lasti` or the instruction pointer.
    pub frame_pos: u64,
    /// 3.12+: the frame's owner byte (frames the C stack owns are shims, skipped).
    pub frame_owner: Option<u64>,
    /// Bytes of a frame a walk reads (every field above fits).
    pub frame_read: usize,
    /// 3.9: `f_lasti` counts bytes (1); 3.10: code units (2).
    pub lasti_scale: u32,
    pub code_filename: u64,
    pub code_name: u64,
    pub code_firstlineno: u64,
    /// `co_lnotab` (3.9) or `co_linetable`.
    pub code_linetable: u64,
    /// 3.11+: where the bytecode starts inside the code object.
    pub code_adaptive: u64,
    pub ob_type: u64,
    pub bytes_size: u64,
    pub bytes_sval: u64,
    pub str_length: u64,
    pub str_state: u64,
    /// Sizes of `PyASCIIObject` and `PyCompactUnicodeObject`: where compact strings'
    /// characters start.
    pub str_ascii_size: u64,
    pub str_compact_size: u64,
    /// The interpreter's threads and its GIL (gil.rs). `_PyRuntime` ->
    /// `interpreters.main` (the main interpreter).
    pub runtime_main_interp: u64,
    /// 3.9-3.11: `_PyRuntime` -> `ceval.gil` (the `_gil_runtime_state` itself).
    pub runtime_gil: Option<u64>,
    /// 3.12+: interpreter -> `ceval.gil` (a pointer to the `_gil_runtime_state`).
    pub interp_gil_ptr: Option<u64>,
    /// Interpreter -> its first thread state (`tstate_head`, 3.11+ `threads.head`).
    pub interp_threads_head: u64,
    /// Thread state -> the next one (`next`).
    pub tstate_next: u64,
    /// 3.11+: thread state -> `native_thread_id` (the kernel's tid).
    pub tstate_native_tid: Option<u64>,
    /// Thread state -> `thread_id` (its `pthread_t`).
    pub tstate_pthread: u64,
}

/// `_gil_runtime_state` (3.9-3.13 alike): `last_holder` (a thread state pointer),
/// `locked` (an int), `switch_number`.
pub const GIL_LAST_HOLDER: u64 = 8;
pub const GIL_LOCKED: u64 = 16;
pub const GIL_SWITCHES: u64 = 24;

/// Where a data stack chunk's frames start (`_PyStackChunk.data`, 3.11+).
pub const CHUNK_DATA: u64 = 24;

/// The owner value of a frame the C stack owns (an entry shim), 3.12+.
pub const FRAME_OWNED_BY_CSTACK: u8 = 3;

/// The layout of CPython `major.minor.micro`, if it is one we know.
pub fn for_version(major: u8, minor: u8, micro: u8) -> Option<Layout> {
    if major != 3 {
        return None;
    }
    let base = Layout {
        major,
        minor,
        micro,
        frames: FrameKind::Interp,
        lines: Format::Locations,
        tstate_frame: 0,
        cframe_current: None,
        tstate_chunk: None,
        frame_back: 0,
        frame_code: 0,
        frame_pos: 0,
        frame_owner: None,
        frame_read: 0,
        lasti_scale: 1,
        code_filename: 0,
        code_name: 0,
        code_firstlineno: 0,
        code_linetable: 0,
        code_adaptive: 0,
        ob_type: 8,
        bytes_size: 16,
        bytes_sval: 32,
        str_length: 16,
        str_state: 32,
        str_ascii_size: 40,
        str_compact_size: 56,
        runtime_main_interp: 48,
        runtime_gil: None,
        interp_gil_ptr: None,
        interp_threads_head: 0,
        tstate_next: 8,
        tstate_native_tid: None,
        tstate_pthread: 0,
    };
    Some(match minor {
        9 | 10 => Layout {
            frames: FrameKind::Object,
            lines: if minor == 9 {
                Format::Lnotab
            } else {
                Format::Table310
            },
            tstate_frame: 24,
            frame_back: 24,
            frame_code: 32,
            frame_pos: if minor == 9 { 104 } else { 96 },
            frame_read: if minor == 9 { 108 } else { 100 },
            lasti_scale: if minor == 9 { 1 } else { 2 },
            code_filename: 104,
            code_name: 112,
            code_firstlineno: 40,
            code_linetable: 120,
            str_ascii_size: 48,
            str_compact_size: 72,
            runtime_main_interp: 40,
            runtime_gil: Some(352),
            interp_threads_head: 8,
            tstate_pthread: 176,
            ..base
        },
        11 => Layout {
            tstate_frame: 56,
            cframe_current: Some(8),
            tstate_chunk: Some(296),
            frame_back: 48,
            frame_code: 32,
            frame_pos: 56,
            frame_read: 64,
            code_filename: 112,
            code_name: 120,
            code_firstlineno: 72,
            code_linetable: 136,
            code_adaptive: 184,
            str_ascii_size: 48,
            str_compact_size: 72,
            runtime_main_interp: 48,
            runtime_gil: Some(360),
            interp_threads_head: 16,
            tstate_native_tid: Some(160),
            tstate_pthread: 152,
            ..base
        },
        12 => Layout {
            tstate_frame: 56,
            cframe_current: Some(0),
            tstate_chunk: Some(232),
            frame_back: 8,
            frame_code: 0,
            frame_pos: 56,
            frame_owner: Some(70),
            frame_read: 72,
            code_filename: 112,
            code_name: 120,
            code_firstlineno: 68,
            code_linetable: 136,
            code_adaptive: 192,
            runtime_main_interp: 48,
            interp_gil_ptr: Some(384),
            interp_threads_head: 72,
            tstate_native_tid: Some(144),
            tstate_pthread: 136,
            ..base
        },
        13 => Layout {
            tstate_frame: 72,
            tstate_chunk: Some(232),
            frame_back: 8,
            frame_code: 0,
            frame_pos: 56,
            frame_owner: Some(70),
            frame_read: 72,
            code_filename: 112,
            code_name: 120,
            code_firstlineno: 68,
            code_linetable: 136,
            code_adaptive: 200,
            runtime_main_interp: 640,
            interp_gil_ptr: Some(16),
            interp_threads_head: 7344,
            tstate_native_tid: Some(160),
            tstate_pthread: 152,
            ..base
        },
        _ => return None,
    })
}

/// Size of 3.13's `_Py_DebugOffsets` (what is read of `_PyRuntime`).
pub const DEBUG_OFFSETS_SIZE: usize = 584;

/// Why 3.13's debug offsets could not be used.
#[derive(Debug, PartialEq, Eq)]
pub enum DebugOffsetsError {
    NoCookie,
    /// They describe another version than the one running (hex version).
    Version(u64),
    FreeThreaded,
    /// An offset too large to be one (a damaged or unexpected table).
    Implausible(&'static str),
}

/// Takes the offsets a 3.13 interpreter publishes at the start of `_PyRuntime`
/// (`raw`, [`DEBUG_OFFSETS_SIZE`] bytes) in place of the table's. Positions inside
/// `_Py_DebugOffsets` are those of the 3.13 headers.
pub fn apply_debug_offsets(l: &mut Layout, raw: &[u8]) -> Result<(), DebugOffsetsError> {
    use super::mem::u64_at;
    if raw.len() < DEBUG_OFFSETS_SIZE || &raw[..8] != b"xdebugpy" {
        return Err(DebugOffsetsError::NoCookie);
    }
    let version = u64_at(raw, 8);
    if (version >> 24) & 0xff != l.major as u64 || (version >> 16) & 0xff != l.minor as u64 {
        return Err(DebugOffsetsError::Version(version));
    }
    if u64_at(raw, 16) != 0 {
        return Err(DebugOffsetsError::FreeThreaded);
    }
    let field = |name: &'static str, at: usize, limit: u64| {
        let v = u64_at(raw, at);
        if v < limit {
            Ok(v)
        } else {
            Err(DebugOffsetsError::Implausible(name))
        }
    };
    const OBJ: u64 = 4096;
    let current = field("thread_state.current_frame", 184, OBJ)?;
    let chunk = field("thread_state.datastack_chunk", 208, OBJ)?;
    let previous = field("interpreter_frame.previous", 232, OBJ)?;
    let executable = field("interpreter_frame.executable", 240, OBJ)?;
    let instr = field("interpreter_frame.instr_ptr", 248, OBJ)?;
    let owner = field("interpreter_frame.owner", 264, OBJ)?;
    let filename = field("code_object.filename", 280, OBJ)?;
    let name = field("code_object.name", 288, OBJ)?;
    let linetable = field("code_object.linetable", 304, OBJ)?;
    let firstlineno = field("code_object.firstlineno", 312, OBJ)?;
    let adaptive = field("code_object.co_code_adaptive", 344, OBJ)?;
    let ob_type = field("pyobject.ob_type", 360, 64)?;
    let bytes_size = field("bytes_object.ob_size", 520, 256)?;
    let bytes_sval = field("bytes_object.ob_sval", 528, 256)?;
    let str_state = field("unicode_object.state", 544, 256)?;
    let str_length = field("unicode_object.length", 552, 256)?;
    let str_ascii = field("unicode_object.asciiobject_size", 560, 256)?;
    l.tstate_frame = current;
    l.cframe_current = None;
    l.tstate_chunk = Some(chunk);
    l.frame_back = previous;
    l.frame_code = executable;
    l.frame_pos = instr;
    l.frame_owner = Some(owner);
    let end = [previous + 8, executable + 8, instr + 8, owner + 1]
        .into_iter()
        .max()
        .unwrap_or(0);
    l.frame_read = end.next_multiple_of(8) as usize;
    l.code_filename = filename;
    l.code_name = name;
    l.code_linetable = linetable;
    l.code_firstlineno = firstlineno;
    l.code_adaptive = adaptive;
    l.ob_type = ob_type;
    l.bytes_size = bytes_size;
    l.bytes_sval = bytes_sval;
    l.str_state = str_state;
    l.str_length = str_length;
    // A compact non-ASCII string adds utf8_length and utf8 to the ASCII header.
    l.str_compact_size = str_ascii + 16;
    l.str_ascii_size = str_ascii;
    Ok(())
}

/// (major, minor, micro) from a hex version (`Py_Version`, `PY_VERSION_HEX`).
pub fn from_hex(v: u64) -> (u8, u8, u8) {
    ((v >> 24) as u8, (v >> 16) as u8, (v >> 8) as u8)
}

/// (major, minor, micro) from the start of `Py_GetVersion()`'s text (`3.10.13 (main...`).
pub fn from_text(s: &str) -> Option<(u8, u8, u8)> {
    let head = s.split_whitespace().next()?;
    let mut it = head.split('.');
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    // The micro part may carry a suffix (`0rc1`, `7+`).
    let micro_txt = it.next().unwrap_or("0");
    let digits: String = micro_txt
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    Some((major, minor, digits.parse().unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_we_know() {
        for minor in 9..=13 {
            let l = for_version(3, minor, 0).unwrap();
            assert!(l.frame_read >= l.frame_pos as usize + 4);
            assert!(l.frame_read >= l.frame_back as usize + 8);
            if let Some(o) = l.frame_owner {
                assert!(l.frame_read > o as usize);
            }
        }
        // The GIL and thread-list offsets, read off each version's headers with
        // offsetof (3.9.18, 3.10.13, 3.11.7, 3.12.1, 3.13.0; Py_BUILD_CORE).
        let g = |m| {
            let l = for_version(3, m, 0).unwrap();
            (
                l.runtime_main_interp,
                l.runtime_gil,
                l.interp_gil_ptr,
                l.interp_threads_head,
                l.tstate_native_tid,
                l.tstate_pthread,
            )
        };
        assert_eq!(g(9), (40, Some(352), None, 8, None, 176));
        assert_eq!(g(10), (40, Some(352), None, 8, None, 176));
        assert_eq!(g(11), (48, Some(360), None, 16, Some(160), 152));
        assert_eq!(g(12), (48, None, Some(384), 72, Some(144), 136));
        assert_eq!(g(13), (640, None, Some(16), 7344, Some(160), 152));
        assert!(for_version(3, 8, 0).is_none());
        assert!(for_version(3, 14, 0).is_none());
        assert!(for_version(2, 7, 18).is_none());
    }

    #[test]
    fn version_texts_and_numbers() {
        assert_eq!(from_hex(0x030c01f0), (3, 12, 1));
        assert_eq!(
            from_text("3.10.13 (main, May  9 2026) [GCC]"),
            Some((3, 10, 13))
        );
        assert_eq!(from_text("3.9.0rc1 (default)"), Some((3, 9, 0)));
        assert_eq!(from_text("junk"), None);
    }

    fn debug_offsets_313() -> Vec<u8> {
        // The values a 3.13.0 build publishes, at their places in _Py_DebugOffsets.
        let mut raw = vec![0u8; DEBUG_OFFSETS_SIZE];
        raw[..8].copy_from_slice(b"xdebugpy");
        let mut put = |at: usize, v: u64| raw[at..at + 8].copy_from_slice(&v.to_le_bytes());
        put(8, 0x030d00f0);
        for (at, v) in [
            (184, 72),
            (208, 232),
            (232, 8),
            (240, 0),
            (248, 56),
            (264, 70),
            (280, 112),
            (288, 120),
            (304, 136),
            (312, 68),
            (344, 200),
            (360, 8),
            (520, 16),
            (528, 32),
            (544, 32),
            (552, 16),
            (560, 40),
        ] {
            put(at, v);
        }
        raw
    }

    #[test]
    fn debug_offsets_agree_with_the_table() {
        let table = for_version(3, 13, 0).unwrap();
        let mut l = table;
        apply_debug_offsets(&mut l, &debug_offsets_313()).unwrap();
        assert_eq!(l, table);
    }

    #[test]
    fn debug_offsets_are_checked() {
        let mut l = for_version(3, 13, 0).unwrap();
        let mut raw = debug_offsets_313();
        raw[0] = b'y';
        assert_eq!(
            apply_debug_offsets(&mut l, &raw),
            Err(DebugOffsetsError::NoCookie)
        );
        let mut raw = debug_offsets_313();
        raw[16] = 1;
        assert_eq!(
            apply_debug_offsets(&mut l, &raw),
            Err(DebugOffsetsError::FreeThreaded)
        );
        let mut raw = debug_offsets_313();
        raw[8 + 2] = 14;
        assert!(matches!(
            apply_debug_offsets(&mut l, &raw),
            Err(DebugOffsetsError::Version(_))
        ));
        let mut raw = debug_offsets_313();
        raw[184 + 5] = 1;
        assert!(matches!(
            apply_debug_offsets(&mut l, &raw),
            Err(DebugOffsetsError::Implausible(_))
        ));
        assert_eq!(l, for_version(3, 13, 0).unwrap(), "left as it was");
    }
}
