//! A minimal protobuf wire reader over borrowed bytes: tags, varints,
//! fixed-width scalars and length-delimited slices. Nothing is copied and
//! nothing is allocated; every length is checked against the buffer.

/// Where and why the bytes are not valid protobuf.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid protobuf at byte {offset}: {what}")]
pub struct DecodeError {
    /// What was wrong.
    pub what: &'static str,
    /// Offset into the decoded message where it was found.
    pub offset: usize,
}

/// One field's payload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1.
    Fixed64(u64),
    /// Wire type 2.
    Bytes(&'a [u8]),
    /// Wire type 5.
    Fixed32(u32),
}

/// Walks the fields of one message.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Offset of `buf` in the outermost message, for error positions.
    base: usize,
}

impl<'a> Reader<'a> {
    /// A reader over a whole message.
    pub fn new(buf: &'a [u8]) -> Self {
        Self {
            buf,
            pos: 0,
            base: 0,
        }
    }

    /// A reader over a nested message found at `base` in the outer buffer.
    pub fn nested(buf: &'a [u8], base: usize) -> Self {
        Self { buf, pos: 0, base }
    }

    /// Offset (in the outermost buffer) of the next byte to read.
    pub fn offset(&self) -> usize {
        self.base + self.pos
    }

    #[cold]
    fn err(&self, what: &'static str) -> DecodeError {
        DecodeError {
            what,
            offset: self.offset(),
        }
    }

    /// Reads a varint; one- and two-byte ones (tags, lengths) inline.
    #[inline(always)]
    fn varint(&mut self) -> Result<u64, DecodeError> {
        if let Some(&b0) = self.buf.get(self.pos) {
            if b0 < 0x80 {
                self.pos += 1;
                return Ok(u64::from(b0));
            }
            if let Some(&b1) = self.buf.get(self.pos + 1) {
                if b1 < 0x80 {
                    self.pos += 2;
                    return Ok(u64::from(b0 & 0x7f) | (u64::from(b1) << 7));
                }
            }
        }
        self.varint_slow()
    }

    #[inline(never)]
    fn varint_slow(&mut self) -> Result<u64, DecodeError> {
        let mut v = 0u64;
        for i in 0..10 {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(self.err("truncated varint"));
            };
            self.pos += 1;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(self.err("varint longer than 10 bytes"))
    }

    #[inline(always)]
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| self.err("length runs past the end of the message"))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// The next field as (field number, value, offset of the value), or
    /// `None` at the end of the message.
    #[inline(always)]
    pub fn next_field(&mut self) -> Result<Option<(u32, Value<'a>, usize)>, DecodeError> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let field = key >> 3;
        if field == 0 || field > u64::from(u32::MAX >> 3) {
            return Err(self.err("invalid field number"));
        }
        let at = self.offset();
        let v = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => {
                let b = self.take(8)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                Value::Fixed64(u64::from_le_bytes(a))
            }
            2 => {
                let n = self.varint()?;
                let n = usize::try_from(n).map_err(|_| self.err("length too large"))?;
                Value::Bytes(self.take(n)?)
            }
            5 => {
                let b = self.take(4)?;
                let mut a = [0u8; 4];
                a.copy_from_slice(b);
                Value::Fixed32(u32::from_le_bytes(a))
            }
            _ => return Err(self.err("unsupported wire type (groups are not allowed)")),
        };
        Ok(Some((field as u32, v, at)))
    }
}

/// Appends field `field` as a length-delimited value (bytes, a string or
/// a nested message): its tag, its length, then `value`.
pub fn put_len_delimited(out: &mut Vec<u8>, field: u32, value: &[u8]) {
    crate::encoding::put_uvarint(out, u64::from(field << 3 | 2));
    crate::encoding::put_uvarint(out, value.len() as u64);
    out.extend_from_slice(value);
}

/// An error for a known field that arrived with the wrong wire type.
pub fn wrong_type(offset: usize) -> DecodeError {
    DecodeError {
        what: "field has the wrong wire type",
        offset,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_wire_type_and_rejects_bad_input() {
        // field 1 varint 300, field 2 fixed64 1, field 3 bytes "hi", field 4 fixed32 7
        let msg = [
            0x08, 0xac, 0x02, 0x11, 1, 0, 0, 0, 0, 0, 0, 0, 0x1a, 2, b'h', b'i', 0x25, 7, 0, 0, 0,
        ];
        let mut r = Reader::new(&msg);
        let mut got = Vec::new();
        while let Some((f, v, _)) = r.next_field().expect("valid") {
            got.push((f, v));
        }
        assert_eq!(
            got,
            vec![
                (1, Value::Varint(300)),
                (2, Value::Fixed64(1)),
                (3, Value::Bytes(b"hi")),
                (4, Value::Fixed32(7))
            ]
        );
        assert_eq!(
            Reader::new(&[0x08, 0x80]).next_field().unwrap_err().what,
            "truncated varint"
        );
        assert_eq!(
            Reader::new(&[0x1a, 5, b'h']).next_field().unwrap_err().what,
            "length runs past the end of the message"
        );
        assert_eq!(Reader::new(&[0x0b]).next_field().unwrap_err().offset, 1);
        assert!(Reader::new(&[0x00]).next_field().is_err());
    }
}
