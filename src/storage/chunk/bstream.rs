//! Bit stream writer and reader, most-significant bit first, as Prometheus'
//! `bstream`. The writer keeps the partial last byte inside the buffer, so the
//! bytes are a valid chunk at any moment; the reader keeps up to 64 bits in a
//! register and refills eight bytes at a time.

/// Bytes a chunk buffer holds inside its owner before it needs a heap block.
pub const INLINE_BYTES: usize = 38;

/// The storage of a [`BitWriter`]: its first [`INLINE_BYTES`] in place,
/// then a heap block sized by its owner. All of it is initialised and
/// every byte past the written ones is zero, so a write can store a whole
/// 8-byte word and advance by the bytes it meant.
///
/// A chunk's first samples are what tell how large it will grow, so its
/// heap block is only allocated once they are written (see
/// `XorAppender::grow`). A small first heap block that is freed as the
/// chunk grows would be lost to the process: every series frees one at
/// about the same moment and nothing else asks for blocks of that size.
#[derive(Debug, Clone)]
enum Buf {
    Inline([u8; INLINE_BYTES]),
    Heap(Box<[u8]>),
}

impl Buf {
    #[inline(always)]
    fn all(&self) -> &[u8] {
        match self {
            Buf::Heap(b) => b,
            Buf::Inline(a) => a,
        }
    }

    #[inline(always)]
    fn all_mut(&mut self) -> &mut [u8] {
        match self {
            Buf::Heap(b) => b,
            Buf::Inline(a) => a,
        }
    }
}

/// Appends bits to a byte buffer, MSB first. Unused low bits of the last byte
/// stay zero, which is the padding the format expects.
#[derive(Debug, Clone)]
pub struct BitWriter {
    buf: Buf,
    /// Bytes written, the partial last byte included.
    len: u32,
    /// Free bits left in the last byte (0 when the stream is byte-aligned).
    free: u8,
}

impl Default for BitWriter {
    fn default() -> Self {
        Self::with_capacity(0)
    }
}

impl BitWriter {
    /// A writer with room for `cap` bytes before it reallocates: inline
    /// when they fit there.
    pub fn with_capacity(cap: usize) -> Self {
        let buf = if cap <= INLINE_BYTES {
            Buf::Inline([0; INLINE_BYTES])
        } else {
            Buf::Heap(vec![0; cap].into_boxed_slice())
        };
        Self {
            buf,
            len: 0,
            free: 0,
        }
    }

    /// The bytes written so far, the partial last byte included.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        let all = self.buf.all();
        all.get(..self.len as usize).unwrap_or(all)
    }

    /// Bits written so far.
    #[inline]
    pub fn bit_len(&self) -> usize {
        self.len as usize * 8 - usize::from(self.free)
    }

    /// Overwrites the first two bytes (the chunk header).
    #[inline]
    pub fn set_header(&mut self, h: [u8; 2]) {
        if let Some(head) = self.buf.all_mut().get_mut(..2) {
            head.copy_from_slice(&h);
        }
    }

    /// Overwrites the written byte at `i` (a header byte).
    #[inline]
    pub fn set_byte(&mut self, i: usize, b: u8) {
        if i < self.len as usize {
            if let Some(x) = self.buf.all_mut().get_mut(i) {
                *x = b;
            }
        }
    }

    /// Grows the buffer to hold `total` bytes in a heap block of exactly
    /// that size.
    pub fn reserve_total(&mut self, total: usize) {
        if total <= self.capacity() {
            return;
        }
        let mut v = Vec::with_capacity(total);
        v.extend_from_slice(self.bytes());
        v.resize(total, 0);
        self.buf = Buf::Heap(v.into_boxed_slice());
    }

    /// Bytes reserved by the buffer (for memory accounting).
    #[inline]
    pub fn capacity(&self) -> usize {
        self.buf.all().len()
    }

    /// Whether the bytes live in a heap block of their own.
    pub fn on_heap(&self) -> bool {
        matches!(self.buf, Buf::Heap(_))
    }

    /// Writes one whole byte (which straddles two bytes when unaligned).
    #[inline]
    pub fn write_byte(&mut self, b: u8) {
        self.write_bits(u64::from(b), 8);
    }

    /// Writes a single bit.
    #[inline]
    pub fn write_bit(&mut self, bit: bool) {
        self.write_bits(u64::from(bit), 1);
    }

    /// Writes `n` (≤ 8) zero bits if they fit without growing; false if
    /// they do not. Every byte past the written ones is zero, so this only
    /// moves the bit position.
    #[inline(always)]
    pub fn try_write_zeros(&mut self, n: u8) -> bool {
        if n <= self.free {
            self.free -= n;
            true
        } else if (self.len as usize) < self.capacity() {
            self.len += 1;
            self.free += 8 - n;
            true
        } else {
            false
        }
    }

    /// Writes `n` zero bits (1 ≤ n ≤ 64). Free bits are already zero, so
    /// this often only moves the bit position.
    #[inline]
    pub fn write_zeros(&mut self, n: u32) {
        if n <= u32::from(self.free) {
            self.free -= n as u8;
        } else {
            self.write_bits(0, n);
        }
    }

    /// Writes the low `n` bits of `v` (1 ≤ n ≤ 64), most significant first.
    ///
    /// The bits that fill the partial last byte are OR-ed into it; the rest
    /// go in as one 8-byte store (the bytes past them are zero in `v` and
    /// in the buffer alike), then the length moves by the bytes they took.
    #[inline(always)]
    pub fn write_bits(&mut self, v: u64, n: u32) {
        debug_assert!((1..=64).contains(&n));
        // Left-align the payload so the next bit to write is bit 63.
        let mut v = v << (64 - n);
        let mut n = n;
        let len = self.len as usize;
        let free = u32::from(self.free);
        let all = self.buf.all_mut();
        if free > 0 {
            let take = free.min(n);
            if let Some(last) = len.checked_sub(1).and_then(|i| all.get_mut(i)) {
                *last |= ((v >> (64 - take)) as u8) << (free - take);
            }
            self.free -= take as u8;
            n -= take;
            if n == 0 {
                return;
            }
            v <<= take;
        }
        let whole = n.div_ceil(8);
        let word = v.to_be_bytes();
        if let Some(dst) = all.get_mut(len..len + 8) {
            dst.copy_from_slice(&word);
        } else {
            self.write_tail(&word[..whole as usize]);
        }
        self.len += whole;
        self.free = (whole * 8 - n) as u8;
    }

    /// Stores `bytes` at the end when fewer than eight bytes of room are
    /// left, growing the buffer if even they do not fit (its owner
    /// normally makes room first).
    #[cold]
    fn write_tail(&mut self, bytes: &[u8]) {
        let len = self.len as usize;
        if len + bytes.len() > self.capacity() {
            self.reserve_total(2 * (len + bytes.len()));
        }
        if let Some(dst) = self.buf.all_mut().get_mut(len..len + bytes.len()) {
            dst.copy_from_slice(bytes);
        }
    }
}

// Word-at-a-time reading, shared by the chunk iterators.

/// Bits of the stream a [`peek`] returns at least (64 less the up
/// to 7 of its first byte that precede the position).
pub(super) const PEEK_BITS: u32 = 57;

/// The stream `data` from bit `at` on, left-aligned: its first
/// [`PEEK_BITS`] are the stream's, zeros past its end. (The reading
/// helpers take the slice, not the iterator, so that the iterator's state
/// can live in registers.)
#[inline(always)]
pub(super) fn peek(data: &[u8], at: usize) -> u64 {
    let byte = at >> 3;
    let word = match data.get(byte..byte + 8) {
        Some(w) => {
            let mut a = [0u8; 8];
            a.copy_from_slice(w);
            u64::from_be_bytes(a)
        }
        None => peek_tail(data, byte),
    };
    word << (at & 7)
}

/// The last bytes of `data` (fewer than eight from `byte`), padded with
/// zeros.
#[inline(never)]
fn peek_tail(data: &[u8], byte: usize) -> u64 {
    let mut a = [0u8; 8];
    for (d, s) in a.iter_mut().zip(data.get(byte..).unwrap_or(&[])) {
        *d = *s;
    }
    u64::from_be_bytes(a)
}

/// `n` bits (1 ≤ n ≤ 64) from bit `at`.
#[inline(always)]
pub(super) fn read_at(data: &[u8], at: usize, n: u32) -> u64 {
    if n <= PEEK_BITS {
        peek(data, at) >> (64 - n)
    } else {
        read_wide(data, at, n)
    }
}

/// `n` bits (58 ≤ n ≤ 64) from bit `at`, in two loads.
#[cold]
#[inline(never)]
fn read_wide(data: &[u8], at: usize, n: u32) -> u64 {
    let hi = peek(data, at) >> 32;
    let lo = peek(data, at + 32) >> (96 - n);
    (hi << (n - 32)) | lo
}

/// A read position in a bit stream, for the formats whose fields are read
/// one after another (histogram chunks): each read checks that the
/// stream holds its bits.
#[derive(Debug, Clone)]
pub struct BitCursor<'a> {
    data: &'a [u8],
    bit: usize,
}

impl<'a> BitCursor<'a> {
    /// A cursor at the first bit of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Self { data, bit: 0 }
    }

    /// `n` bits (1 ≤ n ≤ 64), or `None` past the end of the stream.
    #[inline]
    pub fn read(&mut self, n: u32) -> Option<u64> {
        if self.bit + n as usize > self.data.len() * 8 {
            return None;
        }
        let v = read_at(self.data, self.bit, n);
        self.bit += n as usize;
        Some(v)
    }

    /// One bit.
    #[inline]
    pub fn bit(&mut self) -> Option<bool> {
        self.read(1).map(|b| b == 1)
    }
}

/// Reads bits MSB first from a byte slice, one at a time: the plain
/// reference that the writer and [`super::XorIter`]'s word-at-a-time
/// reading are tested against.
#[cfg(test)]
#[derive(Debug, Clone)]
pub struct BitReader<'a> {
    data: &'a [u8],
    /// Next bit to read.
    bit: usize,
}

#[cfg(test)]
impl<'a> BitReader<'a> {
    /// A reader positioned at the first bit of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Self { data, bit: 0 }
    }

    /// Reads one bit, or `None` when the data has ended.
    pub fn read_bit(&mut self) -> Option<bool> {
        let byte = self.data.get(self.bit / 8)?;
        let b = byte >> (7 - self.bit % 8) & 1;
        self.bit += 1;
        Some(b == 1)
    }

    /// Reads `n` bits (0 ≤ n ≤ 64), or `None` when the data runs out.
    pub fn read_bits(&mut self, n: u32) -> Option<u64> {
        let mut v = 0u64;
        for _ in 0..n {
            v = v << 1 | u64::from(self.read_bit()?);
        }
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn zeros_only_advance_within_a_byte() {
        let mut w = BitWriter::default();
        w.write_bit(true);
        w.write_zeros(2);
        w.write_bit(true);
        w.write_zeros(9);
        w.write_bit(true);
        // 1 00 1 000000000 1: bit 14 is set.
        assert_eq!(w.bytes(), &[0b1001_0000, 0b0000_0100]);
        w.write_bit(true);
        assert_eq!(w.bytes(), &[0b1001_0000, 0b0000_0110]);
        w.write_zeros(2);
        w.write_bit(true);
        assert_eq!(w.bytes(), &[0b1001_0000, 0b0000_0110, 0b0100_0000]);
        // Two zeros across the byte boundary: one bit of this byte, one of
        // the next, then a one right after them.
        let mut w = BitWriter::default();
        w.write_bits(0b111_1111, 7);
        assert!(w.try_write_zeros(2));
        w.write_bit(true);
        assert_eq!(w.bytes(), &[0b1111_1110, 0b0100_0000]);
        // Full: no room for a new byte, and nothing written.
        let full = 8 * w.capacity();
        while w.bit_len() < full {
            w.write_bits(0, (full - w.bit_len()).min(64) as u32);
        }
        assert!(!w.try_write_zeros(1));
        assert_eq!(w.bit_len(), full);
    }

    #[test]
    fn bits_land_msb_first_and_pad_with_zeros() {
        let mut w = BitWriter::default();
        w.write_bit(true);
        w.write_bits(0b01, 2);
        w.write_bits(0xABCD, 16);
        // 1 01 1010101111001101 -> 1011 0101 0111 1001 101(0 0000)
        assert_eq!(w.bytes(), &[0b1011_0101, 0b0111_1001, 0b1010_0000]);
    }

    proptest! {
        #[test]
        fn writer_and_reader_agree(fields in proptest::collection::vec((any::<u64>(), 1u32..=64), 0..200)) {
            let mut w = BitWriter::default();
            for &(v, n) in &fields {
                w.write_bits(v, n);
            }
            let total: u32 = fields.iter().map(|f| f.1).sum();
            prop_assert_eq!(w.bytes().len() as u32, total.div_ceil(8));
            let mut r = BitReader::new(w.bytes());
            for &(v, n) in &fields {
                let mask = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
                prop_assert_eq!(r.read_bits(n), Some(v & mask));
            }
            let pad = total.div_ceil(8) * 8 - total;
            if pad > 0 {
                prop_assert_eq!(r.read_bits(pad), Some(0));
            }
            prop_assert_eq!(r.read_bit(), None);
        }
    }
}
