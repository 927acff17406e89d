//! String interning on the writer thread: each distinct string is written once, as a
//! `Str` event before its first use, and referred to by id afterwards.

use gputrace_format::Event;
use std::collections::HashMap;
use std::ffi::CStr;

#[derive(Default)]
pub struct Interner {
    /// CUPTI hands out one stable pointer per kernel name: the pointer is the fast key.
    by_ptr: HashMap<usize, u32>,
    by_text: HashMap<String, u32>,
    next: u32,
}

impl Interner {
    pub fn new() -> Interner {
        Interner {
            next: 1,
            ..Default::default()
        }
    }

    /// Id of `text`; emits a `Str` event into `out` the first time.
    pub fn intern(&mut self, text: &str, out: &mut Vec<Event>) -> u32 {
        if let Some(id) = self.by_text.get(text) {
            return *id;
        }
        let id = self.next;
        self.next += 1;
        self.by_text.insert(text.to_string(), id);
        out.push(Event::Str {
            id,
            text: text.to_string(),
        });
        id
    }

    /// Id of the C string at `p` (0 for NULL).
    ///
    /// # Safety
    /// `p` must be NULL or point to a NUL-terminated string.
    pub unsafe fn intern_cstr(&mut self, p: *const libc::c_char, out: &mut Vec<Event>) -> u32 {
        if p.is_null() {
            return 0;
        }
        if let Some(id) = self.by_ptr.get(&(p as usize)) {
            return *id;
        }
        // SAFETY: the caller guarantees a NUL-terminated string (CUPTI's name pointers
        // live as long as the module they name).
        let text = unsafe { CStr::from_ptr(p) }.to_string_lossy();
        let id = self.intern(&text, out);
        self.by_ptr.insert(p as usize, id);
        id
    }
}
