//! The XOR sample codec: delta-of-delta timestamps and XOR'd float values.

use super::bstream::{peek, read_at, PEEK_BITS};
use super::{BitWriter, ChunkError, HEADER_BYTES};
use crate::encoding::{unzigzag, uvarint_len, zigzag};

/// Sentinel for "no leading/trailing window chosen yet".
const UNSET: u8 = 0xff;

/// Appends samples to one XOR chunk. The chunk bytes are complete and valid
/// after every append, so readers may iterate a head chunk at any time.
#[derive(Debug, Clone)]
pub struct XorAppender {
    w: BitWriter,
    /// Samples in the chunk, as wide as a register: a 16-bit count loaded
    /// 32 bits wide with `second_end` could not be forwarded from the
    /// 16-bit store before it.
    num: u32,
    /// Bytes written when the second sample was (0 before): the samples
    /// after it are the ones a chunk's size is projected from.
    second_end: u16,
    t: i64,
    v: u64,
    t_delta: u64,
    leading: u8,
    trailing: u8,
}

/// Most bytes one sample can add: a 64-bit timestamp code (4 + 64 bits)
/// and a value with new leading and trailing counts (2 + 5 + 6 + 64 bits);
/// the first two samples' varints stay under it too.
const MAX_SAMPLE_BYTES: usize = 20;

/// Samples a chunk usually holds when it is cut (Prometheus' target).
const TYPICAL_SAMPLES: usize = 120;

impl Default for XorAppender {
    /// An empty chunk whose first samples are written inline.
    fn default() -> Self {
        Self::with_capacity(0)
    }
}

impl XorAppender {
    /// A new, empty chunk with room for `cap` bytes.
    pub fn with_capacity(cap: usize) -> Self {
        let mut w = BitWriter::with_capacity(cap.max(HEADER_BYTES));
        w.write_bits(0, 16);
        Self {
            w,
            num: 0,
            second_end: 0,
            t: 0,
            v: 0,
            t_delta: 0,
            leading: UNSET,
            trailing: 0,
        }
    }

    /// Makes sure the sample `(t, vbits)` fits, growing the buffer only if
    /// it does not: the check before each append assumes the worst case,
    /// which would grow a buffer that is exactly full enough.
    #[cold]
    fn make_room(&mut self, t: i64, vbits: u64) {
        let need = (self.w.bit_len() + self.sample_bits(t, vbits) as usize).div_ceil(8);
        if need > self.w.capacity() {
            self.grow(need);
        }
    }

    /// Grows the buffer to hold at least `need` bytes. Instead of doubling
    /// (which leaves an open chunk up to half empty, for as long as it
    /// stays open), it grows to the size the chunk will have at a typical
    /// cut, projected from the bytes per sample so far, plus a sixteenth
    /// of what is left: a projection a little short costs a second heap
    /// block and leaves the first free in the allocator, where (at 100k
    /// series growing in step) little else reuses it. The first samples
    /// are written inline (see [`super::INLINE_BYTES`]), so a chunk's first
    /// heap block is already a projection. Before a typical chunk's
    /// samples are in, a short projection grows by one worst-case sample;
    /// past them, by an eighth. From two samples or fewer it doubles; it
    /// never grows more than eightfold at once.
    fn grow(&mut self, need: usize) {
        let len = self.w.bytes().len();
        let n = self.num as usize;
        let least = need
            + if n < TYPICAL_SAMPLES {
                MAX_SAMPLE_BYTES
            } else {
                len / 8
            };
        let target = if n > 2 {
            // The first sample holds a full timestamp and value, the
            // second a varint delta and the first XOR window: both are
            // larger than the rest, so they are left out when there are
            // samples after them.
            let (from, samples) = if n > 3 {
                (usize::from(self.second_end), n - 2)
            } else {
                (self.first_sample_end(), n - 1)
            };
            let rest = len.saturating_sub(from) * TYPICAL_SAMPLES.saturating_sub(n) / samples;
            len + rest + rest / 16
        } else {
            2 * len
        };
        self.w
            .reserve_total(target.clamp(least, (8 * len).max(least)));
    }

    /// Bits that appending `(t, vbits)` would write, by the same rules as
    /// [`XorAppender::append`].
    fn sample_bits(&self, t: i64, vbits: u64) -> u32 {
        match self.num {
            0 => 8 * uvarint_len(zigzag(t)) as u32 + 64,
            1 => 8 * uvarint_len(t.wrapping_sub(self.t) as u64) as u32 + self.value_bits(vbits),
            _ => {
                let t_delta = t.wrapping_sub(self.t) as u64;
                let dod = t_delta.wrapping_sub(self.t_delta) as i64;
                if dod == 0 && vbits == self.v {
                    return 2;
                }
                dod_code(dod).map_or(68, |(_, width)| width) + self.value_bits(vbits)
            }
        }
    }

    /// Whether a XOR delta with these leading and trailing zeros fits the
    /// window of the previous value's (`10` code) rather than opening one.
    #[inline]
    fn fits_window(&self, lead: u8, trail: u8) -> bool {
        self.leading != UNSET && lead >= self.leading && trail >= self.trailing
    }

    /// Bits of the value's XOR code (see [`XorAppender::write_value`]).
    fn value_bits(&self, vbits: u64) -> u32 {
        let delta = vbits ^ self.v;
        if delta == 0 {
            return 1;
        }
        let lead = (delta.leading_zeros() as u8).min(31);
        let trail = delta.trailing_zeros() as u8;
        if self.fits_window(lead, trail) {
            2 + 64 - u32::from(self.leading) - u32::from(self.trailing)
        } else {
            13 + 64 - u32::from(lead) - u32::from(trail)
        }
    }

    /// Where the first sample ends: the header, its timestamp's varint and
    /// its 8-byte value.
    fn first_sample_end(&self) -> usize {
        let b = self.w.bytes();
        let varint = b
            .iter()
            .skip(HEADER_BYTES)
            .position(|&x| x & 0x80 == 0)
            .map_or(0, |i| i + 1);
        (HEADER_BYTES + varint + 8).min(b.len())
    }

    /// Samples in the chunk.
    #[inline]
    pub fn num_samples(&self) -> u16 {
        self.num as u16
    }

    /// The chunk bytes, header included.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        self.w.bytes()
    }

    /// The newest sample, if any.
    #[inline]
    pub fn last(&self) -> Option<(i64, f64)> {
        (self.num > 0).then(|| (self.t, f64::from_bits(self.v)))
    }

    /// Bytes reserved by the chunk buffer.
    pub fn capacity(&self) -> usize {
        self.w.capacity()
    }

    /// Appends a sample. The caller keeps timestamps increasing and the
    /// sample count below `u16::MAX`; the head cuts chunks long before that.
    #[inline]
    pub fn append(&mut self, t: i64, v: f64) {
        let vbits = v.to_bits();
        let t_delta = t.wrapping_sub(self.t) as u64;
        if self.num >= 2 && t_delta == self.t_delta && vbits == self.v {
            // Regular interval, same value: `0` `0`. Checked before the
            // worst-case room check, which a run of these would otherwise
            // fail for every sample in a chunk's last 20 bytes.
            if !self.w.try_write_zeros(2) {
                self.make_room(t, vbits);
                self.w.write_zeros(2);
            }
            // Only the time and the count change.
            self.t = t;
            self.num += 1;
            self.w.set_header((self.num as u16).to_be_bytes());
            return;
        }
        if self.w.capacity() - self.w.bytes().len() < MAX_SAMPLE_BYTES {
            self.make_room(t, vbits);
        }
        match self.num {
            0 => {
                write_varint(&mut self.w, t);
                self.w.write_bits(vbits, 64);
            }
            n if n >= 2 => {
                let dod = t_delta.wrapping_sub(self.t_delta) as i64;
                self.t_delta = t_delta;
                // Timestamp code as (bits, width); the 64-bit case is rare.
                let (code, width) = match dod_code(dod) {
                    Some(code) => code,
                    None => {
                        self.w.write_bits(0b1111, 4);
                        (dod as u64, 64)
                    }
                };
                self.write_value(vbits, code, width);
            }
            _ => {
                self.t_delta = t_delta;
                write_uvarint(&mut self.w, self.t_delta);
                self.write_value(vbits, 0, 0);
                self.second_end = self.w.bytes().len() as u16;
            }
        }
        self.finish(t, vbits);
    }

    /// Records the sample as the newest and bumps the header count.
    #[inline]
    fn finish(&mut self, t: i64, vbits: u64) {
        self.t = t;
        self.v = vbits;
        self.num += 1;
        self.w.set_header((self.num as u16).to_be_bytes());
    }

    /// Writes the value's XOR code, preceded by `prefix` (the timestamp's
    /// code, `width` bits, possibly none) in the same write when they fit.
    #[inline]
    fn write_value(&mut self, vbits: u64, prefix: u64, width: u32) {
        let delta = vbits ^ self.v;
        if delta == 0 {
            // `0`: value unchanged.
            self.write_pair(prefix, width, 0, 1);
            return;
        }
        let lead = (delta.leading_zeros() as u8).min(31);
        let trail = delta.trailing_zeros() as u8;
        if self.fits_window(lead, trail) {
            // `10` then the significant bits inside the previous window.
            let sig = 64 - u32::from(self.leading) - u32::from(self.trailing);
            let payload = delta >> self.trailing;
            if sig <= 62 {
                self.write_pair(prefix, width, (0b10 << sig) | payload, sig + 2);
            } else {
                self.write_pair(prefix, width, 0b10, 2);
                self.w.write_bits(payload, sig);
            }
            return;
        }
        self.leading = lead;
        self.trailing = trail;
        let sig = 64 - u32::from(lead) - u32::from(trail);
        // `11`, 5 bits of leading zeros, 6 bits of significant-bit count
        // (64 is written as 0): 13 control bits in one write.
        let ctl = (0b11 << 11) | (u64::from(lead) << 6) | u64::from(sig & 0x3f);
        self.write_pair(prefix, width, ctl, 13);
        self.w.write_bits(delta >> trail, sig);
    }

    /// Writes `a` (`an` bits, maybe 0) then `b` (`bn` ≥ 1 bits), as one
    /// write when both fit in 64 bits.
    #[inline]
    fn write_pair(&mut self, a: u64, an: u32, b: u64, bn: u32) {
        if an == 0 {
            self.w.write_bits(b, bn);
        } else if an + bn <= 64 {
            self.w.write_bits((a << bn) | b, an + bn);
        } else {
            self.w.write_bits(a, an);
            self.w.write_bits(b, bn);
        }
    }
}

/// The timestamp code of a delta-of-delta as (bits, width), or `None` for
/// the 64-bit case (`1111` then the whole value).
#[inline]
fn dod_code(dod: i64) -> Option<(u64, u32)> {
    if dod == 0 {
        Some((0, 1))
    } else if bit_range(dod, 14) {
        Some(((0b10 << 14) | (dod as u64 & 0x3fff), 16))
    } else if bit_range(dod, 17) {
        Some(((0b110 << 17) | (dod as u64 & 0x1_ffff), 20))
    } else if bit_range(dod, 20) {
        Some(((0b1110 << 20) | (dod as u64 & 0xf_ffff), 24))
    } else {
        None
    }
}

/// `-(2^(n-1)-1) <= x <= 2^(n-1)`: Prometheus' asymmetric range test.
#[inline]
fn bit_range(x: i64, n: u32) -> bool {
    let half = 1i64 << (n - 1);
    -(half - 1) <= x && x <= half
}

fn write_varint(w: &mut BitWriter, v: i64) {
    write_uvarint(w, zigzag(v));
}

fn write_uvarint(w: &mut BitWriter, mut v: u64) {
    while v >= 0x80 {
        w.write_byte(v as u8 | 0x80);
        v >>= 7;
    }
    w.write_byte(v as u8);
}

/// Iterates the samples of a chunk's bytes. A malformed chunk ends the
/// iteration early and leaves the reason in [`XorIter::err`].
///
/// It reads the stream by bit position: every read loads the eight bytes
/// that hold its first bit and shifts them into place, so the only state
/// that a sample's decoding carries to the next is that position (no bit
/// buffer to refill behind a branch), and a sample's timestamp code and
/// value control bits come from one load.
#[derive(Debug, Clone)]
pub struct XorIter<'a> {
    /// The bit stream: the chunk after its header.
    data: &'a [u8],
    /// Bits of `data` read.
    bit: usize,
    total: u16,
    read: u16,
    /// Samples still to return from a run of `00` codes already consumed.
    repeats: u16,
    t: i64,
    v: u64,
    t_delta: u64,
    leading: u8,
    trailing: u8,
    err: Option<ChunkError>,
}

impl<'a> XorIter<'a> {
    /// Iterates `chunk`, header included.
    pub fn new(chunk: &'a [u8]) -> Self {
        let (total, data, err) = match chunk {
            [a, b, body @ ..] => (u16::from_be_bytes([*a, *b]), body, None),
            _ => (0, &[][..], Some(ChunkError::NoHeader)),
        };
        Self {
            data,
            bit: 0,
            total,
            read: 0,
            repeats: 0,
            t: 0,
            v: 0,
            t_delta: 0,
            leading: 0,
            trailing: 0,
            err,
        }
    }

    /// Why iteration stopped early, if it did.
    pub fn err(&self) -> Option<ChunkError> {
        self.err
    }

    /// Reads `n` bits, 1 ≤ n ≤ 64.
    #[inline(always)]
    fn take(&mut self, n: u32) -> u64 {
        let v = read_at(self.data, self.bit, n);
        self.bit += n as usize;
        v
    }

    #[inline(always)]
    fn read_uvarint(&mut self) -> Option<u64> {
        let (v, bit) = read_uvarint(self.data, self.bit)?;
        self.bit = bit;
        Some(v)
    }

    /// Decodes the next sample; `None` for a malformed or short stream.
    #[inline]
    fn step(&mut self) -> Option<(i64, f64)> {
        self.step_inline()
    }

    /// [`XorIter::step`], inlined into its caller's loop.
    #[inline(always)]
    fn step_inline(&mut self) -> Option<(i64, f64)> {
        match self.read {
            0 => {
                let zz = self.read_uvarint()?;
                self.t = unzigzag(zz);
                self.v = self.take(64);
            }
            1 => {
                self.t_delta = self.read_uvarint()?;
                self.t = self.t.wrapping_add(self.t_delta as i64);
                self.read_value(peek(self.data, self.bit), self.bit)?;
            }
            _ => {
                let w = peek(self.data, self.bit);
                if w >> 62 == 0 {
                    // Regular interval, same value: `0` `0`. They come in
                    // runs, so every pair of zeros among the stream bits
                    // at hand is taken at once (at most the samples left:
                    // the last byte's padding is zeros too), and the rest
                    // returned by `next` directly.
                    let left = (self.data.len() * 8).saturating_sub(self.bit);
                    let zeros = w.leading_zeros().min(PEEK_BITS).min(left as u32);
                    let pairs = (zeros / 2).min(u32::from(self.total - self.read)).max(1);
                    self.bit += 2 * pairs as usize;
                    self.repeats = (pairs - 1) as u16;
                    self.t = self.t.wrapping_add(self.t_delta as i64);
                } else {
                    // Timestamp code: `0`, `10`, `110`, `1110` then 0, 14,
                    // 17 or 20 bits of delta-of-delta; `1111` then 64.
                    let ones = (!w).leading_zeros();
                    // The delta of delta, where the value's code starts,
                    // and the stream from there.
                    let (dod, at, rest) = if ones <= 3 {
                        let (width, dod) = if ones == 0 {
                            (1, 0)
                        } else {
                            // `sz` bits after the prefix hold the dod, in
                            // Prometheus' range -(2^(sz-1)-1) ..= 2^(sz-1):
                            // two's complement of dod - 1, so take 1 at
                            // the field's lowest bit, sign-extend, add 1.
                            let sz = 11 + 3 * ones;
                            let field = (w << (ones + 1)).wrapping_sub(1 << (64 - sz));
                            (12 + 4 * ones, ((field as i64 >> (64 - sz)) + 1) as u64)
                        };
                        // The value's control bits are in the same load.
                        (dod, self.bit + width as usize, w << width)
                    } else {
                        let dod = read_at(self.data, self.bit + 4, 64);
                        let at = self.bit + 68;
                        (dod, at, peek(self.data, at))
                    };
                    self.t_delta = self.t_delta.wrapping_add(dod);
                    self.t = self.t.wrapping_add(self.t_delta as i64);
                    self.read_value(rest, at)?;
                }
            }
        }
        if self.bit > self.data.len() * 8 {
            return None;
        }
        self.read += 1;
        Some((self.t, f64::from_bits(self.v)))
    }

    /// Decodes a value whose code starts at bit `at`; `w` is the stream
    /// from there (at least 13 of its bits). Leaves the position after it.
    #[inline(always)]
    fn read_value(&mut self, w: u64, at: usize) -> Option<()> {
        if w >> 63 == 0 {
            // `0`: value unchanged.
            self.bit = at + 1;
            return Some(());
        }
        let (ctl, lead, sig) = if w >> 62 == 0b11 {
            // `11`, 5 bits of leading zeros, 6 of significant-bit count
            // (0 meaning 64).
            let lead = ((w >> 57) & 0x1f) as u32;
            let sig = match ((w >> 51) & 0x3f) as u32 {
                0 => 64,
                n => n,
            };
            (13, lead, sig)
        } else {
            // `10`: the previous value's window.
            let lead = u32::from(self.leading);
            (2, lead, 64 - lead - u32::from(self.trailing))
        };
        // A corrupt chunk could claim more bits than a u64 holds.
        let trailing = 64u32.checked_sub(lead + sig)?;
        self.leading = lead as u8;
        self.trailing = trailing as u8;
        let at = at + ctl;
        self.v ^= read_at(self.data, at, sig) << trailing;
        self.bit = at + sig as usize;
        Some(())
    }
}

/// Bytes a sample of [`XorIter::run_regular`] may load past the byte of
/// its first bit: its last load starts at most 29 bits in (a 16-bit
/// timestamp code, a 13-bit value code) and takes eight bytes, and the
/// sample ends within them.
const REGULAR_SLACK: usize = 13;

/// A copy of a stream's last bytes (fewer than [`REGULAR_SLACK`] from
/// the next sample's), padded with zeros as [`peek`] pads them, so that
/// [`XorIter::regular`] reads them as it reads the rest.
const TAIL_BYTES: usize = 2 * REGULAR_SLACK + 8;

impl XorIter<'_> {
    /// Decodes samples into `out`, which has room for them, while each
    /// sample's timestamp moves by the interval or within 14 bits of it
    /// (codes `0` and `10`: scrapes at a regular interval, with or
    /// without jitter); stops before any other sample (a wider timestamp
    /// code, a value wider than one load, a damaged window), which the
    /// general step reads. Says whether every sample appended lies in
    /// `[lo, hi]`.
    ///
    /// The stream's last bytes are read from a padded copy, so that only
    /// those codes ever take the general step.
    #[inline(always)]
    fn run_regular(&mut self, out: &mut Vec<(i64, f64)>, lo: i64, hi: i64) -> bool {
        let data = self.data;
        let mut inside = true;
        if let Some(limit) = data.len().checked_sub(REGULAR_SLACK) {
            inside &= self.regular::<false>(data, 0, limit, out, lo, hi);
        }
        let byte = self.bit >> 3;
        if self.read < self.total && byte + REGULAR_SLACK > data.len() {
            let rest = data.get(byte..).unwrap_or(&[]);
            let mut tail = [0u8; TAIL_BYTES];
            tail[..rest.len()].copy_from_slice(rest);
            let end = rest.len() * 8;
            inside &= self.regular::<true>(&tail, byte * 8, end, out, lo, hi);
        }
        inside
    }

    /// [`XorIter::run_regular`]'s loop over `data`, the stream from bit
    /// `base` on: while the next sample starts at or before byte `limit`
    /// of it (every load then lies within it), or, for a padded `TAIL`,
    /// before bit `limit`, each sample ending at or before that bit.
    ///
    /// The decoder's state lives in locals for the loop, and a sample
    /// takes one load for its codes, a second only when its value lies
    /// beyond it; nothing is stored but the sample.
    #[inline(never)]
    fn regular<const TAIL: bool>(
        &mut self,
        data: &[u8],
        base: usize,
        limit: usize,
        out: &mut Vec<(i64, f64)>,
        lo: i64,
        hi: i64,
    ) -> bool {
        let mut bit = self.bit - base;
        let mut t = self.t;
        let mut v = self.v;
        let mut delta = self.t_delta;
        let mut lead = u32::from(self.leading);
        let mut trail = u32::from(self.trailing);
        // The previous window's width (64 before one is set, which
        // `10` cannot use here).
        let mut sig = 64u32.saturating_sub(lead + trail);
        let mut left = self.total - self.read;
        let mut inside = true;
        while left > 0 && if TAIL { bit < limit } else { bit >> 3 <= limit } {
            let w = peek(data, bit);
            // The timestamp: `0`, or `10` and 14 bits of delta of delta
            // (Prometheus' range -(2^13-1) ..= 2^13, as the general step
            // reads it).
            let (width, dod) = if w >> 63 == 0 {
                (1u32, 0u64)
            } else if w >> 62 == 0b10 {
                let field = (w << 2).wrapping_sub(1 << 50);
                (16, ((field as i64 >> 50) + 1) as u64)
            } else {
                break;
            };
            let vw = w << width;
            let at = bit + width as usize;
            let next = if vw >> 63 == 0 {
                if width == 1 {
                    // `0` `0`: the interval, the same value. They come in
                    // runs, taken at once: every pair of zeros in the
                    // load, at most the samples left and, in the tail,
                    // the stream's bits left, as the general step does.
                    let mut pairs = w.leading_zeros().min(PEEK_BITS);
                    if TAIL {
                        pairs = pairs.min((limit - bit) as u32);
                    }
                    let pairs = (pairs / 2).min(u32::from(left));
                    if pairs == 0 {
                        break;
                    }
                    for _ in 0..pairs {
                        t = t.wrapping_add(delta as i64);
                        inside &= (t >= lo) & (t <= hi);
                        out.push((t, f64::from_bits(v)));
                    }
                    bit += 2 * pairs as usize;
                    left -= pairs as u16;
                    continue;
                }
                // `0`: value unchanged.
                at + 1
            } else if vw >> 62 == 0b10 {
                // `10`: within the previous window.
                let x = if width + 2 + sig <= PEEK_BITS {
                    (vw << 2) >> (64 - sig)
                } else if sig <= PEEK_BITS {
                    peek(data, at + 2) >> (64 - sig)
                } else {
                    break;
                };
                if TAIL && at + 2 + sig as usize > limit {
                    break;
                }
                v ^= x << trail;
                at + 2 + sig as usize
            } else {
                // `11`: 5 bits of leading zeros, 6 of width (0 is 64).
                let l = ((vw >> 57) & 0x1f) as u32;
                let s = match ((vw >> 51) & 0x3f) as u32 {
                    0 => 64,
                    n => n,
                };
                if l + s > 64 || s > PEEK_BITS || (TAIL && at + 13 + s as usize > limit) {
                    break;
                }
                let x = if width + 13 + s <= PEEK_BITS {
                    (vw << 13) >> (64 - s)
                } else {
                    peek(data, at + 13) >> (64 - s)
                };
                (lead, sig, trail) = (l, s, 64 - l - s);
                v ^= x << trail;
                at + 13 + s as usize
            };
            if TAIL && next > limit {
                break;
            }
            bit = next;
            delta = delta.wrapping_add(dod);
            t = t.wrapping_add(delta as i64);
            inside &= (t >= lo) & (t <= hi);
            out.push((t, f64::from_bits(v)));
            left -= 1;
        }
        self.read = self.total - left;
        self.bit = base + bit;
        self.t = t;
        self.v = v;
        self.t_delta = delta;
        self.leading = lead as u8;
        self.trailing = trail as u8;
        inside
    }
}

/// A uvarint from bit `at`, and the bit after it.
#[inline(never)]
fn read_uvarint(data: &[u8], mut at: usize) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = read_at(data, at, 8);
        at += 8;
        v |= (b & 0x7f) << shift;
        if b < 0x80 {
            return Some((v, at));
        }
    }
    None
}

impl XorIter<'_> {
    /// Appends the samples left to `out`: what `out.extend(self)` does,
    /// with room made once and the decoder's loop inlined.
    pub fn append_to(&mut self, out: &mut Vec<(i64, f64)>) {
        self.append_within(out, i64::MIN, i64::MAX);
    }

    /// [`XorIter::append_to`], saying whether every sample appended lies
    /// in `[lo, hi]` (a chunk's claimed span): checked as the samples are
    /// decoded, off the decoder's chain of dependent reads, rather than in
    /// a second pass over them.
    #[inline]
    pub fn append_within(&mut self, out: &mut Vec<(i64, f64)>, lo: i64, hi: i64) -> bool {
        out.reserve(usize::from(self.total.saturating_sub(self.read)));
        let mut inside = true;
        while self.read < self.total {
            if self.read >= 2 && self.repeats == 0 {
                inside &= self.run_regular(out, lo, hi);
                if self.read >= self.total {
                    break;
                }
            }
            let p = if self.repeats > 0 {
                self.repeats -= 1;
                self.t = self.t.wrapping_add(self.t_delta as i64);
                self.read += 1;
                (self.t, f64::from_bits(self.v))
            } else {
                match self.step_inline() {
                    Some(p) => p,
                    None => {
                        self.err = Some(ChunkError::Truncated);
                        self.total = self.read;
                        break;
                    }
                }
            };
            inside &= (p.0 >= lo) & (p.0 <= hi);
            out.push(p);
        }
        inside
    }
}

impl XorIter<'_> {
    /// The newest sample at or before `maxt`: what `self.take_while(|s|
    /// s.0 <= maxt).last()` gives, in one loop with the decoder inlined
    /// (an instant selector reads each series' newest chunk so).
    pub fn last_at_most(mut self, maxt: i64) -> Option<(i64, f64)> {
        let mut last = None;
        while self.read < self.total {
            if self.repeats > 0 {
                // A run of equal values at the regular interval: as far
                // into it as `maxt` lets, at once.
                let delta = self.t_delta as i64;
                let next = self.t.wrapping_add(delta);
                if next > maxt {
                    break;
                }
                let fits = if delta > 0 {
                    let more = (i128::from(maxt) - i128::from(next)) / i128::from(delta);
                    u16::try_from(more)
                        .unwrap_or(u16::MAX)
                        .min(self.repeats - 1)
                        + 1
                } else {
                    1
                };
                self.repeats -= fits;
                self.read += fits;
                self.t = self.t.wrapping_add(delta.wrapping_mul(i64::from(fits)));
                last = Some((self.t, f64::from_bits(self.v)));
                continue;
            }
            match self.step_inline() {
                Some(p) if p.0 > maxt => break,
                Some(p) => last = Some(p),
                None => break,
            }
        }
        last
    }
}

impl Iterator for XorIter<'_> {
    type Item = (i64, f64);

    #[inline]
    fn next(&mut self) -> Option<(i64, f64)> {
        // An error sets `total` to the samples read, which ends iteration.
        if self.read >= self.total {
            return None;
        }
        if self.repeats > 0 {
            self.repeats -= 1;
            self.t = self.t.wrapping_add(self.t_delta as i64);
            self.read += 1;
            return Some((self.t, f64::from_bits(self.v)));
        }
        let s = self.step();
        if s.is_none() {
            self.err = Some(ChunkError::Truncated);
            self.total = self.read;
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encode(samples: &[(i64, f64)]) -> Vec<u8> {
        let mut a = XorAppender::default();
        for &(t, v) in samples {
            a.append(t, v);
        }
        a.bytes().to_vec()
    }

    /// Buffer sizes an appender goes through over `n` samples.
    fn growth(n: i64, value: impl Fn(i64) -> f64) -> (Vec<usize>, usize) {
        let mut a = XorAppender::default();
        let mut caps = vec![a.capacity()];
        for i in 0..n {
            a.append(1_700_000_000_000 + i * 15_000, value(i));
            if a.capacity() != *caps.last().expect("one") {
                caps.push(a.capacity());
            }
        }
        (caps, a.bytes().len())
    }

    #[test]
    fn buffers_grow_to_their_projected_size_in_few_steps() {
        // A gauge wandering by tenths and a counter rising by whole
        // amounts, as the benchmark load sends them.
        let gauge = |i: i64| 50.0 + ((i * 7919) % 23) as f64 / 10.0;
        let counter = |i: i64| (i * 3 + (i * 7) % 5) as f64;
        for (name, (caps, len)) in [
            ("gauge", growth(120, gauge)),
            ("counter", growth(120, counter)),
        ] {
            // The first buffer, one projection, at most one correction
            // (growing at most twofold took 128, 216, 432, 864).
            assert!(caps.len() <= 3, "{name}: {caps:?}");
            // The projection does not leave the chunk a third empty.
            let cap = *caps.last().expect("one");
            assert!(cap * 2 <= len * 3, "{name}: {len} bytes in {caps:?}");
        }
    }

    #[test]
    fn first_samples_stay_inline() {
        let mut a = XorAppender::default();
        assert!(!a.w.on_heap());
        a.append(1_700_000_000_000, 50.0);
        a.append(1_700_000_015_000, 50.1);
        a.append(1_700_000_030_000, 50.3);
        assert!(!a.w.on_heap(), "{} bytes", a.bytes().len());
        for i in 3..120 {
            a.append(1_700_000_000_000 + i * 15_000, 50.0 + i as f64 / 10.0);
        }
        assert!(a.w.on_heap());
        let got: Vec<_> = XorIter::new(a.bytes()).map(|(_, v)| v).collect();
        assert_eq!(got.len(), 120);
        assert_eq!(got[1], 50.1);
    }

    // Golden chunks derived by hand from the format in `docs/wire-notes.md` §3.
    //
    // Sample (1000, 1.0):
    //   header            00 01
    //   ts_0 zig-zag(1000) = 2000 = 0b1111_1010000 -> uvarint D0 0F
    //   v_0 bits of 1.0   3F F0 00 00 00 00 00 00
    const ONE: &[u8] = &[0x00, 0x01, 0xD0, 0x0F, 0x3F, 0xF0, 0, 0, 0, 0, 0, 0];

    #[test]
    fn golden_single_sample() {
        assert_eq!(encode(&[(1000, 1.0)]), ONE);
    }

    // Add (2000, 1.0):
    //   ts_1_delta 1000 = 0b111_1101000 -> uvarint E8 07
    //   value unchanged -> bit `0`, padded to one zero byte 00
    #[test]
    fn golden_second_sample_same_value() {
        let mut want = ONE.to_vec();
        want[1] = 2;
        want.extend_from_slice(&[0xE8, 0x07, 0x00]);
        assert_eq!(encode(&[(1000, 1.0), (2000, 1.0)]), want);
    }

    // Add (3010, 3.0) and then (4020, 1.0):
    //   v_1 `0`
    //   t_2 dod = 1010-1000 = 10 -> `10` + 14 bits 00000000001010
    //   v_2 3.0^1.0 = 0x7FF8000000000000: 1 leading, 51 trailing zeros, 12 sig
    //       bits; no window yet -> `11` 00001 001100 + 12 ones
    //   t_3 dod = 0 -> `0`
    //   v_3 1.0^3.0 is the same delta: fits the window -> `10` + 12 ones
    // Stream: 0 10 00000000001010 11 00001 001100 111111111111 0 10 111111111111
    //   0100_0000 0000_0101 0110_0001 0011_0011 1111_1111 1101_0111 1111_1111 1(000_0000)
    //   = 40 05 61 33 FF D7 FF 80
    #[test]
    fn golden_dod_and_xor_windows() {
        let mut want = ONE.to_vec();
        want[1] = 4;
        want.extend_from_slice(&[0xE8, 0x07, 0x40, 0x05, 0x61, 0x33, 0xFF, 0xD7, 0xFF, 0x80]);
        let got = encode(&[(1000, 1.0), (2000, 1.0), (3010, 3.0), (4020, 1.0)]);
        assert_eq!(got, want);
        // After three samples the stream stops at 42 bits: the last byte is 11 + 6 pad zeros.
        let three = encode(&[(1000, 1.0), (2000, 1.0), (3010, 3.0)]);
        assert_eq!(&three[14..], &[0x40, 0x05, 0x61, 0x33, 0xFF, 0xC0]);
    }

    // A negative first timestamp: zig-zag(-1) = 1 -> 01.
    #[test]
    fn golden_negative_timestamp() {
        assert_eq!(encode(&[(-1, 0.0)]), &[0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn truncated_chunk_reports_error() {
        let bytes = encode(&[(1000, 1.0), (2000, 2.0), (3000, 5.0)]);
        let mut it = XorIter::new(&bytes[..bytes.len() - 2]);
        assert_eq!(it.by_ref().count(), 2);
        assert_eq!(it.err(), Some(ChunkError::Truncated));
        assert_eq!(XorIter::new(&[1]).err(), Some(ChunkError::NoHeader));
    }

    /// The format read one bit at a time, straight from its description:
    /// the reference the iterator must agree with on any bytes, valid or
    /// not. Returns the samples (value bits) and whether it stopped early.
    fn reference_decode(chunk: &[u8]) -> (Vec<(i64, u64)>, Option<ChunkError>) {
        let [a, b, body @ ..] = chunk else {
            return (Vec::new(), Some(ChunkError::NoHeader));
        };
        let total = u16::from_be_bytes([*a, *b]);
        let mut r = super::super::BitReader::new(body);
        let mut out = Vec::new();
        let (mut t, mut v, mut t_delta) = (0i64, 0u64, 0u64);
        let (mut lead, mut trail) = (0u32, 0u32);
        fn uvarint(r: &mut super::super::BitReader<'_>) -> Option<u64> {
            let mut x = 0u64;
            for i in 0..10 {
                let b = r.read_bits(8)?;
                x |= (b & 0x7f) << (7 * i);
                if b < 0x80 {
                    return Some(x);
                }
            }
            None
        }
        for i in 0..total {
            let mut sample = || -> Option<()> {
                if i == 0 {
                    let zz = uvarint(&mut r)?;
                    t = unzigzag(zz);
                    v = r.read_bits(64)?;
                    return Some(());
                }
                if i == 1 {
                    t_delta = uvarint(&mut r)?;
                } else {
                    let mut ones = 0;
                    while ones < 4 && r.read_bit()? {
                        ones += 1;
                    }
                    let dod = match ones {
                        0 => 0,
                        4 => r.read_bits(64)?,
                        _ => {
                            let sz = [14, 17, 20][ones - 1];
                            let raw = r.read_bits(sz)?;
                            if raw > 1 << (sz - 1) {
                                raw.wrapping_sub(1 << sz)
                            } else {
                                raw
                            }
                        }
                    };
                    t_delta = t_delta.wrapping_add(dod);
                }
                t = t.wrapping_add(t_delta as i64);
                if r.read_bit()? {
                    if r.read_bit()? {
                        lead = r.read_bits(5)? as u32;
                        let sig = match r.read_bits(6)? as u32 {
                            0 => 64,
                            n => n,
                        };
                        trail = 64u32.checked_sub(lead + sig)?;
                    }
                    let sig = 64 - lead - trail;
                    v ^= r.read_bits(sig)? << trail;
                }
                Some(())
            };
            if sample().is_none() {
                return (out, Some(ChunkError::Truncated));
            }
            out.push((t, v));
        }
        (out, None)
    }

    /// The samples and error of `chunk`, read one by one; read at once
    /// ([`XorIter::append_to`], after one sample when there is one), they
    /// must be the same.
    fn iterate(chunk: &[u8]) -> (Vec<(i64, u64)>, Option<ChunkError>) {
        let mut it = XorIter::new(chunk);
        let got: Vec<(i64, u64)> = it.by_ref().map(|(t, v)| (t, v.to_bits())).collect();
        let mut bulk = XorIter::new(chunk);
        let mut at_once: Vec<(i64, f64)> = bulk.next().into_iter().collect();
        bulk.append_to(&mut at_once);
        let at_once: Vec<(i64, u64)> = at_once.iter().map(|&(t, v)| (t, v.to_bits())).collect();
        assert_eq!(got, at_once, "append_to reads what next reads");
        assert_eq!(it.err(), bulk.err(), "and stops for the same reason");
        // Whether every sample lies in a span: the samples' own, and
        // spans one short of it at either end (a chunk's claimed span
        // checked as it is decoded).
        if let (Some(lo), Some(hi)) = (got.iter().map(|s| s.0).min(), got.iter().map(|s| s.0).max())
        {
            for (a, b, want) in [
                (lo, hi, true),
                (lo.saturating_add(1), hi, lo == i64::MAX),
                (lo, hi.saturating_sub(1), hi == i64::MIN),
            ] {
                let mut out = Vec::new();
                let inside = XorIter::new(chunk).append_within(&mut out, a, b);
                assert_eq!(inside, want, "append_within({a}, {b})");
                assert_eq!(out.len(), got.len(), "append_within reads them all");
            }
        }
        // The newest sample at or before a time, around each sample's.
        let mut times = vec![i64::MIN, i64::MAX];
        for &(t, _) in got.iter().step_by(7).chain(got.last()) {
            times.extend([t.saturating_sub(1), t, t.saturating_add(1)]);
        }
        for maxt in times {
            let want = XorIter::new(chunk)
                .take_while(|&(t, _)| t <= maxt)
                .last()
                .map(|(t, v)| (t, v.to_bits()));
            let last = XorIter::new(chunk)
                .last_at_most(maxt)
                .map(|(t, v)| (t, v.to_bits()));
            assert_eq!(last, want, "last_at_most({maxt})");
        }
        (got, it.err())
    }

    #[test]
    fn every_timestamp_code_width_round_trips_at_its_bounds() {
        // Prometheus' ranges are asymmetric: -(2^(n-1)-1) ..= 2^(n-1).
        let mut dods = vec![0i64];
        for n in [14, 17, 20] {
            let half = 1i64 << (n - 1);
            dods.extend([half, half + 1, -(half - 1), -half, 1 - half, half - 1]);
        }
        dods.extend([i64::from(i32::MAX), -(1i64 << 40)]);
        let mut samples = vec![(0i64, 1.0), (1_000_000_000_000, 1.0)];
        let mut delta = 1_000_000_000_000i64;
        for (i, dod) in dods.iter().enumerate() {
            delta += dod;
            let (t, _) = samples[samples.len() - 1];
            samples.push((t + delta, i as f64));
        }
        let want: Vec<_> = samples.iter().map(|&(t, v)| (t, v.to_bits())).collect();
        let chunk = encode(&samples);
        assert_eq!(iterate(&chunk), (want, None));
        assert_eq!(iterate(&chunk), reference_decode(&chunk));
    }

    #[test]
    fn long_chunks_read_alike_by_every_path() {
        // Long enough that most samples are read by the regular run, with
        // every code mixed in: each timestamp width at its bounds, runs
        // of repeats between, values within the window, new windows and
        // 64-bit ones.
        let mut dods = vec![0i64; 5];
        for n in [14, 17, 20] {
            let half = 1i64 << (n - 1);
            dods.extend([half, -(half - 1), 0, 0, half - 1, 1 - half, 0]);
        }
        dods.extend([i64::from(i32::MAX), -i64::from(i32::MAX), 0, 0, 0, 0]);
        for seed in 0..4u64 {
            let mut samples = vec![(1_700_000_000_000i64, 0.0)];
            let (mut delta, mut v) = (15_000i64, 100.0f64);
            for i in 0..1000u64 {
                let h = (i + seed * 1000).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
                delta += dods[(h as usize) % dods.len()];
                v = match h % 7 {
                    0..=2 => v,
                    3 | 4 => v + (h % 50) as f64,
                    5 => f64::from_bits(h.wrapping_mul(0x2545_f491_4f6c_dd1d)),
                    _ => v + 0.1,
                };
                let (t, _) = samples[samples.len() - 1];
                samples.push((t + delta, v));
            }
            let want: Vec<_> = samples.iter().map(|&(t, v)| (t, v.to_bits())).collect();
            let chunk = encode(&samples);
            assert_eq!(iterate(&chunk), (want, None));
            assert_eq!(iterate(&chunk), reference_decode(&chunk));
        }
    }

    #[test]
    fn a_run_of_repeats_stops_where_the_stream_ends() {
        // 40 equal samples at a regular interval: 80 bits for the first,
        // 17 for the second, then one `00` each: 173 bits in 22 bytes.
        let samples: Vec<_> = (0..40).map(|i| (1000 + 15_000 * i, 7.0)).collect();
        let mut chunk = encode(&samples);
        // A header claiming more samples than the stream holds: two of
        // the three padding bits read as one more repeat, then the stream
        // ends.
        chunk[..2].copy_from_slice(&200u16.to_be_bytes());
        let (got, err) = iterate(&chunk);
        assert_eq!((got.len(), err), (41, Some(ChunkError::Truncated)));
        assert_eq!((got.clone(), err), reference_decode(&chunk));
        assert_eq!(got[39], (1000 + 15_000 * 39, 7f64.to_bits()));
    }

    fn value() -> impl Strategy<Value = f64> {
        prop_oneof![
            any::<f64>(),
            Just(f64::NAN),
            Just(f64::from_bits(0x7ff0_0000_0000_0002)),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(-0.0),
            Just(0.0),
            (-1000i32..1000).prop_map(f64::from),
        ]
    }

    fn step() -> impl Strategy<Value = i64> {
        prop_oneof![
            Just(15_000i64),
            (14_950i64..15_050),
            (1i64..10_000_000),
            (1i64..i64::MAX / 1024),
        ]
    }

    proptest! {
        #[test]
        fn iterator_agrees_with_the_reference_on_any_bytes(
            total in 0u16..300,
            body in proptest::collection::vec(any::<u8>(), 0..400),
        ) {
            let mut chunk = total.to_be_bytes().to_vec();
            chunk.extend_from_slice(&body);
            prop_assert_eq!(iterate(&chunk), reference_decode(&chunk));
        }

        #[test]
        fn iterator_agrees_with_the_reference_on_damaged_chunks(
            steps in proptest::collection::vec((step(), value(), any::<bool>()), 1..200),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..8), 0..4),
            cut in any::<prop::sample::Index>(),
            count in prop_oneof![Just(None), (0u16..400).prop_map(Some)],
        ) {
            let mut t = 1_700_000_000_000i64;
            let mut last = 0.0;
            let mut samples = Vec::new();
            for (dt, v, repeat) in steps {
                let v = if repeat { last } else { v };
                samples.push((t, v));
                last = v;
                t = t.saturating_add(dt);
            }
            let mut chunk = encode(&samples);
            prop_assert_eq!(iterate(&chunk), reference_decode(&chunk));
            for (at, bit) in flips {
                let i = at.index(chunk.len());
                chunk[i] ^= 1 << bit;
            }
            if let Some(n) = count {
                chunk[..2].copy_from_slice(&n.to_be_bytes());
            }
            chunk.truncate(2 + cut.index(chunk.len() - 1));
            prop_assert_eq!(iterate(&chunk), reference_decode(&chunk));
        }

        #[test]
        fn round_trip(t0 in -(1i64 << 50)..(1i64 << 50),
                      steps in proptest::collection::vec((step(), value(), any::<bool>()), 0..300)) {
            let mut samples = Vec::new();
            let mut t = t0;
            let mut last = 0.0f64;
            for (dt, v, repeat) in steps {
                let v = if repeat { last } else { v };
                samples.push((t, v));
                last = v;
                t = match t.checked_add(dt) { Some(t) => t, None => break };
            }
            // The size check before each append predicts every sample's
            // bits exactly.
            let mut a = XorAppender::default();
            for &(t, v) in &samples {
                let before = a.w.bit_len();
                let predicted = a.sample_bits(t, v.to_bits()) as usize;
                a.append(t, v);
                prop_assert_eq!(a.w.bit_len() - before, predicted);
            }
            let bytes = encode(&samples);
            prop_assert_eq!(a.bytes(), &bytes[..]);
            let mut it = XorIter::new(&bytes);
            let got: Vec<(i64, u64)> = it.by_ref().map(|(t, v)| (t, v.to_bits())).collect();
            let want: Vec<(i64, u64)> = samples.iter().map(|&(t, v)| (t, v.to_bits())).collect();
            prop_assert_eq!(it.err(), None);
            prop_assert_eq!(got, want);
        }
    }
}
