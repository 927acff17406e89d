//! The bytes of an event body: the reader of one body ([`Body`]), the delta state a chunk
//! keeps ([`Delta`]), the decoding errors, and the one compound value the field codecs
//! know ([`PyFrame`]). The lowest layer of the format: it imports nothing of the crate.

/// The delta state of a chunk: the previous timestamp and correlation id.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Delta {
    pub(crate) last_ts: u64,
    pub(crate) last_corr: u32,
}

/// Why an event could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("event body ends early at byte {0}")]
    Truncated(usize),
    #[error("varint too long at byte {0}")]
    BadVarint(usize),
    #[error("string is not UTF-8 at byte {0}")]
    BadString(usize),
    #[error("kernel refers to an undefined launch shape {0}")]
    BadShape(u32),
}

/// The body of one event being read.
#[doc(hidden)]
pub struct Body<'a> {
    pub(crate) b: &'a [u8],
    pub(crate) pos: usize,
    /// Where `b` starts in the chunk payload (for error offsets).
    pub(crate) base: usize,
}

impl<'a> Body<'a> {
    #[inline(always)]
    pub(crate) fn v(&mut self) -> Result<u64, DecodeError> {
        // Most values are one byte (deltas, ids, flags).
        if let Some(&b) = self.b.get(self.pos) {
            if b < 0x80 {
                self.pos += 1;
                return Ok(b as u64);
            }
        }
        self.v_long()
    }

    #[inline(never)]
    fn v_long(&mut self) -> Result<u64, DecodeError> {
        let mut out = 0u64;
        let mut shift = 0u32;
        loop {
            let byte = *self
                .b
                .get(self.pos)
                .ok_or(DecodeError::Truncated(self.base + self.pos))?;
            self.pos += 1;
            if shift >= 64 {
                return Err(DecodeError::BadVarint(self.base + self.pos));
            }
            out |= ((byte & 0x7f) as u64) << shift;
            if byte & 0x80 == 0 {
                return Ok(out);
            }
            shift += 7;
        }
    }
    #[inline(always)]
    pub(crate) fn v32(&mut self) -> Result<u32, DecodeError> {
        Ok(self.v()? as u32)
    }
    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        let byte = *self
            .b
            .get(self.pos)
            .ok_or(DecodeError::Truncated(self.base + self.pos))?;
        self.pos += 1;
        Ok(byte)
    }
    pub(crate) fn slice(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.b.len())
            .ok_or(DecodeError::Truncated(self.base + self.pos))?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    /// Where the next byte is in the chunk payload.
    pub(crate) fn offset(&self) -> usize {
        self.base + self.pos
    }
    /// Whether the body has been read to its end.
    #[inline(always)]
    pub(crate) fn at_end(&self) -> bool {
        self.pos >= self.b.len()
    }
    /// The body's length.
    pub(crate) fn len(&self) -> usize {
        self.b.len()
    }
}

/// One frame of a `PyStack`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PyFrame {
    /// Interned file name, as the code object has it (`co_filename`).
    pub file: u32,
    /// Interned function name (`co_name`).
    pub function: u32,
    /// Line being run in that frame (0 when not known).
    pub line: u32,
}
