//! Prometheus' XOR chunk format (Gorilla with millisecond timestamps), byte
//! for byte: a 2-byte big-endian sample count, then a bit stream written
//! most-significant bit first. See `docs/wire-notes.md` §3.
//!
//! [`XorAppender`] owns a growing chunk; [`XorIter`] walks the bytes of any
//! chunk (sealed or head) without copying them.

mod bstream;
mod float_histogram;
mod histogram;
mod histogram_layout;
mod merge;
mod varbit;
mod xor;
mod xor_value;

/// Which of Prometheus' two native histogram chunk encodings a chunk has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistogramKind {
    /// Integer counts (`EncHistogram`).
    Int,
    /// Float counts (`EncFloatHistogram`).
    Float,
}

impl HistogramKind {
    /// The encoding a sample is stored in.
    pub fn of(h: &crate::histogram::HistSample) -> Self {
        match h {
            crate::histogram::HistSample::Int(_) => Self::Int,
            crate::histogram::HistSample::Float(_) => Self::Float,
        }
    }
}

/// Appends the samples of histogram chunk `bytes` (of encoding `kind`) with
/// `mint <= t <= maxt` to `out`.
pub fn decode_histograms(
    kind: HistogramKind,
    bytes: &[u8],
    mint: i64,
    maxt: i64,
    out: &mut Vec<(i64, crate::histogram::HistSample)>,
) {
    if kind == HistogramKind::Float {
        let mut it = FloatHistogramIter::new(bytes);
        let mut h = crate::histogram::FloatHistogram::default();
        while let Some(t) = it.next_into(&mut h) {
            if (mint..=maxt).contains(&t) {
                out.push((t, crate::histogram::HistSample::Float(h.clone())));
            }
        }
    } else {
        let mut it = HistogramIter::new(bytes);
        let mut h = crate::histogram::Histogram::default();
        while let Some(t) = it.next_into(&mut h) {
            if (mint..=maxt).contains(&t) {
                out.push((t, crate::histogram::HistSample::Int(h.clone())));
            }
        }
    }
}

#[cfg(test)]
use bstream::BitReader;
pub use bstream::{BitWriter, INLINE_BYTES};
pub use float_histogram::{FloatAppended, FloatHistogramAppender, FloatHistogramIter};
pub use histogram::{Appended, HistogramAppender, HistogramIter};
pub use histogram_layout::CounterResetHeader;
pub use merge::{encode_xor, in_order, merge_overlapping, MERGED_CHUNK_SAMPLES};
pub use xor::{XorAppender, XorIter};

/// A selected chunk's bytes: a head chunk's shared whole, or a range of
/// one buffer its series' other chunks share (a block's chunks read as
/// one run: one allocation per series rather than one per chunk).
#[derive(Clone)]
pub struct ChunkBytes {
    buf: std::sync::Arc<[u8]>,
    start: usize,
    end: usize,
}

impl ChunkBytes {
    /// `buf[range]`, sharing `buf`; `None` when the range is not in it.
    pub fn slice(buf: &std::sync::Arc<[u8]>, range: std::ops::Range<usize>) -> Option<Self> {
        buf.get(range.clone())?;
        Some(Self {
            buf: std::sync::Arc::clone(buf),
            start: range.start,
            end: range.end,
        })
    }

    /// Whether `self` and `other` are the same bytes of the same buffer
    /// (a chunk passed on, not copied).
    pub fn same(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.buf, &other.buf)
            && (self.start, self.end) == (other.start, other.end)
    }

    /// The bytes as one shared buffer: the one held when they are all of
    /// it, else a copy.
    pub fn into_shared(self) -> std::sync::Arc<[u8]> {
        if self.start == 0 && self.end == self.buf.len() {
            self.buf
        } else {
            std::sync::Arc::from(&self.buf[self.start..self.end])
        }
    }
}

impl std::ops::Deref for ChunkBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }
}

impl From<std::sync::Arc<[u8]>> for ChunkBytes {
    fn from(buf: std::sync::Arc<[u8]>) -> Self {
        let end = buf.len();
        Self { buf, start: 0, end }
    }
}

impl From<&[u8]> for ChunkBytes {
    fn from(b: &[u8]) -> Self {
        std::sync::Arc::<[u8]>::from(b).into()
    }
}

impl std::fmt::Debug for ChunkBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ChunkBytes({} bytes)", self.len())
    }
}

/// One chunk of a selected series.
#[derive(Debug, Clone)]
pub struct ChunkRef {
    /// First sample's timestamp.
    pub mint: i64,
    /// Last sample's timestamp.
    pub maxt: i64,
    /// The XOR chunk bytes.
    pub bytes: ChunkBytes,
    /// The newest sample (at `maxt`), where the writer knows it without
    /// decoding: the head's open chunk, a chunk just encoded. A read of
    /// the newest sample then decodes nothing.
    pub last: Option<(i64, f64)>,
}

/// Bytes of the chunk header (the big-endian sample count).
pub const HEADER_BYTES: usize = 2;

/// Why a chunk's bytes could not be read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    /// The bit stream ended before the sample count in the header was reached.
    #[error("chunk ends before its last sample")]
    Truncated,
    /// The chunk is shorter than its header.
    #[error("chunk shorter than its header")]
    NoHeader,
}
