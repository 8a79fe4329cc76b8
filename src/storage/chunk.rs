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

/// Bytes shared by the chunks that lie in them without a copy: a block's
/// chunk segment (mapped from its file, or held in memory).
pub type SharedBytes = std::sync::Arc<dyn AsRef<[u8]> + Send + Sync>;

/// Where a selected chunk's bytes lie: a buffer of their own (a head
/// chunk, a chunk encoded for the query) or shared bytes they are a range
/// of (a block's segment, so a query reads a block's chunks in place).
#[derive(Clone)]
enum Backing {
    Own(std::sync::Arc<[u8]>),
    Shared(SharedBytes),
}

/// A selected chunk's bytes: a range of a head chunk's or a block
/// segment's bytes, sharing them.
#[derive(Clone)]
pub struct ChunkBytes {
    buf: Backing,
    start: usize,
    end: usize,
    /// The sample count of the chunk's header (0 when the bytes are too
    /// short to hold one), read when the bytes are taken, while they are
    /// at hand: a query sizing its work by it then does not load every
    /// chunk's first bytes again (from a block's mapped segment, each a
    /// cache miss).
    samples: u16,
}

/// The sample count a chunk's header gives (big-endian, its first two
/// bytes), 0 when `b` is shorter.
fn header_samples(b: &[u8]) -> u16 {
    match *b {
        [a, b, ..] => u16::from_be_bytes([a, b]),
        _ => 0,
    }
}

impl ChunkBytes {
    /// `buf[range]`, sharing `buf`; `None` when the range is not in it.
    pub fn slice(buf: &std::sync::Arc<[u8]>, range: std::ops::Range<usize>) -> Option<Self> {
        let samples = header_samples(buf.get(range.clone())?);
        Some(Self {
            buf: Backing::Own(std::sync::Arc::clone(buf)),
            start: range.start,
            end: range.end,
            samples,
        })
    }

    /// `buf[range]` of shared bytes, sharing them; `None` when the range
    /// is not in them.
    pub fn within(buf: &SharedBytes, range: std::ops::Range<usize>) -> Option<Self> {
        let samples = header_samples((**buf).as_ref().get(range.clone())?);
        Some(Self {
            buf: Backing::Shared(std::sync::Arc::clone(buf)),
            start: range.start,
            end: range.end,
            samples,
        })
    }

    /// The sample count of the chunk's header, 0 when the bytes are too
    /// short to hold one: what `self[..2]` says, without loading it.
    #[inline]
    pub fn header_samples(&self) -> u16 {
        self.samples
    }

    /// Whether `self` and `other` are the same bytes of the same buffer
    /// (a chunk passed on, not copied).
    pub fn same(&self, other: &Self) -> bool {
        let same_buf = match (&self.buf, &other.buf) {
            (Backing::Own(a), Backing::Own(b)) => std::sync::Arc::ptr_eq(a, b),
            (Backing::Shared(a), Backing::Shared(b)) => std::sync::Arc::ptr_eq(a, b),
            _ => false,
        };
        same_buf && (self.start, self.end) == (other.start, other.end)
    }

    /// The bytes as one buffer of their own: the one held when they are
    /// all of it, else a copy.
    pub fn into_shared(self) -> std::sync::Arc<[u8]> {
        match self.buf {
            Backing::Own(buf) if self.start == 0 && self.end == buf.len() => buf,
            _ => std::sync::Arc::from(&*self),
        }
    }
}

impl std::ops::Deref for ChunkBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        let all: &[u8] = match &self.buf {
            Backing::Own(b) => b,
            Backing::Shared(b) => (**b).as_ref(),
        };
        &all[self.start..self.end]
    }
}

impl From<std::sync::Arc<[u8]>> for ChunkBytes {
    fn from(buf: std::sync::Arc<[u8]>) -> Self {
        let (end, samples) = (buf.len(), header_samples(&buf));
        Self {
            buf: Backing::Own(buf),
            start: 0,
            end,
            samples,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The sample count kept with chunk bytes is their header's, however
    /// they were taken; 0 for bytes too short to hold one.
    #[test]
    fn chunk_bytes_keep_their_header_count() {
        let mut app = XorAppender::default();
        for i in 0..300 {
            app.append(i * 15_000, i as f64);
        }
        let one: std::sync::Arc<[u8]> = std::sync::Arc::from(app.bytes());
        let header = |b: &[u8]| u16::from_be_bytes([b[0], b[1]]);
        assert_eq!(header(&one), 300);
        let own = ChunkBytes::from(std::sync::Arc::clone(&one));
        assert_eq!(own.header_samples(), 300);
        // Two chunks side by side in one buffer, as in a block's segment.
        let mut seg = vec![9u8; 5];
        seg.extend_from_slice(&one);
        seg.extend_from_slice(&[0x01, 0x02, 7, 7]);
        let seg: std::sync::Arc<[u8]> = seg.into();
        let first = ChunkBytes::slice(&seg, 5..5 + one.len()).expect("in range");
        assert_eq!(first.header_samples(), 300);
        assert_eq!(&*first, &*one);
        let shared: SharedBytes = std::sync::Arc::new(seg.to_vec());
        let second = ChunkBytes::within(&shared, 5 + one.len()..seg.len()).expect("in range");
        assert_eq!(second.header_samples(), 0x0102);
        assert_eq!(second.header_samples(), header(&second));
        for short in [&[][..], &[4u8][..]] {
            assert_eq!(ChunkBytes::from(short).header_samples(), 0);
        }
        assert!(ChunkBytes::within(&shared, 0..seg.len() + 1).is_none());
    }
}
