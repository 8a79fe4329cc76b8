//! The native-histogram side of a series: its histogram chunks (integer or
//! float encoding), cut by Prometheus' head rules for histograms
//! (`histogramsAppendPreprocessor`: about 1 KiB per chunk, at least 10
//! samples, never across a chunk-range boundary, a new chunk when the
//! encoding changes), and the appender's own cuts and recodes. A series
//! holds one only once it has had a histogram sample, so float-only
//! series pay one pointer.

use std::sync::Arc;

pub use crate::histogram::HistSample;
use crate::storage::append::{chunk_end_time, range_for_timestamp, HeadOptions, SampleError};
use crate::storage::chunk::{
    decode_histograms, Appended, CounterResetHeader, FloatAppended, FloatHistogramAppender,
    FloatHistogramIter, HistogramAppender, HistogramIter, HistogramKind,
};

/// Prometheus' `TargetBytesPerHistogramChunk`.
const TARGET_BYTES: usize = 1024;
/// Prometheus' `MinSamplesPerHistogramChunk`.
const MIN_SAMPLES: u16 = 10;

/// A series' histogram chunks as a checkpoint holds them.
#[derive(Debug, Clone, PartialEq)]
pub struct HistImage<'a> {
    /// When the open chunk must be cut at the latest.
    pub next_at: i64,
    /// Sealed chunks, oldest first: (mint, maxt, encoding, bytes).
    pub sealed: Vec<(i64, i64, HistogramKind, &'a [u8])>,
    /// The open chunk.
    pub open: Option<OpenImage<'a>>,
}

/// An open chunk as a checkpoint holds it: (mint, maxt, encoding,
/// bytes).
pub type OpenImage<'a> = (i64, i64, HistogramKind, &'a [u8]);

/// The chunk being appended to.
#[derive(Debug, Clone)]
enum OpenApp {
    Int(HistogramAppender),
    Float(FloatHistogramAppender),
}

impl OpenApp {
    fn bytes(&self) -> &[u8] {
        match self {
            Self::Int(a) => a.bytes(),
            Self::Float(a) => a.bytes(),
        }
    }

    fn num_samples(&self) -> u16 {
        match self {
            Self::Int(a) => a.num_samples(),
            Self::Float(a) => a.num_samples(),
        }
    }

    fn kind(&self) -> HistogramKind {
        match self {
            Self::Int(_) => HistogramKind::Int,
            Self::Float(_) => HistogramKind::Float,
        }
    }
}

/// A closed histogram chunk.
#[derive(Debug, Clone)]
pub struct SealedHist {
    /// First sample's timestamp.
    pub mint: i64,
    /// Last sample's timestamp.
    pub maxt: i64,
    /// Its encoding.
    pub kind: HistogramKind,
    /// The chunk's bytes.
    pub bytes: Arc<[u8]>,
}

#[derive(Debug, Clone)]
struct OpenHist {
    app: OpenApp,
    mint: i64,
    maxt: i64,
}

/// Histogram samples (in time order, each time once) encoded as the head
/// encodes them: (mint, maxt, kind, bytes) per chunk.
pub fn encode(
    samples: &[(i64, HistSample)],
    opts: &HeadOptions,
) -> Vec<(i64, i64, HistogramKind, Arc<[u8]>)> {
    let mut part = HistSeries::default();
    for (t, h) in samples {
        // In time order, each once: nothing is refused.
        let taken = part.append(*t, h, None, opts);
        debug_assert!(matches!(taken, Ok(Some(_))), "{t}: {taken:?}");
    }
    part.chunks()
        .map(|(mint, maxt, kind, bytes)| (mint, maxt, kind, Arc::from(bytes)))
        .collect()
}

/// A series' histogram chunks.
#[derive(Debug, Clone, Default)]
pub struct HistSeries {
    sealed: Vec<SealedHist>,
    open: Option<OpenHist>,
    next_at: i64,
    /// `nextAt` was spread over the range once the chunk reached a
    /// quarter of its target size.
    end_computed: bool,
    /// The newest sample, to tell an exact duplicate from a conflict.
    last: Option<HistSample>,
}

/// What an append did to the chunks: bytes added (may be negative after a
/// recode) and chunks opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HistDelta {
    /// Change in encoded bytes.
    pub bytes: isize,
    /// Chunks added.
    pub chunks: usize,
}

impl HistSeries {
    /// The newest sample's timestamp.
    pub fn maxt(&self) -> Option<i64> {
        self.open.as_ref().map(|o| o.maxt)
    }

    /// The oldest sample's timestamp.
    pub fn mint(&self) -> Option<i64> {
        self.sealed
            .first()
            .map(|c| c.mint)
            .or_else(|| self.open.as_ref().map(|o| o.mint))
    }

    /// Appends `h` at `t`; `float_maxt` is the series' newest float
    /// sample, which a histogram must also follow. `Ok(None)` for an exact
    /// duplicate (accepted, not stored again).
    pub fn append(
        &mut self,
        t: i64,
        h: &HistSample,
        float_maxt: Option<i64>,
        opts: &HeadOptions,
    ) -> Result<Option<HistDelta>, SampleError> {
        if let Some(maxt) = self.maxt() {
            if t < maxt {
                return Err(SampleError::OutOfOrder);
            }
            if t == maxt {
                return match &self.last {
                    Some(last) if last.same(h) => Ok(None),
                    _ => Err(SampleError::Duplicate),
                };
            }
        }
        if let Some(ft) = float_maxt {
            if t < ft {
                return Err(SampleError::OutOfOrder);
            }
            if t == ft {
                return Err(SampleError::Duplicate);
            }
        }
        let mut delta = HistDelta::default();
        let kind = HistogramKind::of(h);
        // The previous chunk's appender, when this append opens a chunk:
        // it decides the new chunk's counter-reset header.
        let mut prev: Option<OpenApp> = None;
        let cut = match &self.open {
            None => true,
            Some(o) if o.app.kind() != kind => true,
            Some(o) => {
                let n = o.app.num_samples();
                let bytes = o.app.bytes().len();
                let range_start = if self.end_computed {
                    range_for_timestamp(o.mint, opts.chunk_range_ms)
                } else {
                    self.next_at
                };
                if !self.end_computed && bytes >= TARGET_BYTES / 4 {
                    let ratio = TARGET_BYTES as f64 / bytes as f64;
                    self.next_at = chunk_end_time(o.mint, o.maxt, self.next_at, ratio);
                    self.end_computed = true;
                }
                (t >= self.next_at || bytes >= TARGET_BYTES * 2)
                    && (n >= MIN_SAMPLES || t >= range_start)
            }
        };
        if cut {
            if let Some(o) = self.open.take() {
                self.sealed.push(SealedHist {
                    mint: o.mint,
                    maxt: o.maxt,
                    kind: o.app.kind(),
                    bytes: Arc::from(o.app.bytes()),
                });
                prev = Some(o.app);
            }
            let app = if kind == HistogramKind::Float {
                OpenApp::Float(FloatHistogramAppender::new())
            } else {
                OpenApp::Int(HistogramAppender::new())
            };
            delta.bytes += app.bytes().len() as isize;
            delta.chunks += 1;
            self.open = Some(OpenHist {
                app,
                mint: t,
                maxt: t,
            });
            self.next_at = range_for_timestamp(t, opts.chunk_range_ms);
            self.end_computed = false;
        }
        let Some(o) = self.open.as_mut() else {
            return Ok(Some(delta));
        };
        let before = o.app.bytes().len() as isize;
        let replaced = match (&mut o.app, h) {
            (OpenApp::Int(app), HistSample::Int(h)) => {
                let prev = match &prev {
                    Some(OpenApp::Int(p)) => Some(p),
                    _ => None,
                };
                match app.append(prev, t, h) {
                    Appended::Here => None,
                    Appended::Recoded(a) => Some((OpenApp::Int(*a), true)),
                    Appended::NewChunk(a) => Some((OpenApp::Int(*a), false)),
                }
            }
            (OpenApp::Float(app), HistSample::Float(h)) => {
                let prev = match &prev {
                    Some(OpenApp::Float(p)) => Some(p),
                    _ => None,
                };
                match app.append(prev, t, h) {
                    FloatAppended::Here => None,
                    FloatAppended::Recoded(a) => Some((OpenApp::Float(*a), true)),
                    FloatAppended::NewChunk(a) => Some((OpenApp::Float(*a), false)),
                }
            }
            // The cut above matched the encodings.
            _ => return Err(SampleError::OutOfOrder),
        };
        match replaced {
            None => {
                delta.bytes += o.app.bytes().len() as isize - before;
                o.maxt = t;
            }
            Some((app, true)) => {
                delta.bytes += app.bytes().len() as isize - before;
                o.app = app;
                o.maxt = t;
            }
            Some((app, false)) => {
                let old = std::mem::replace(
                    o,
                    OpenHist {
                        app,
                        mint: t,
                        maxt: t,
                    },
                );
                delta.bytes += o.app.bytes().len() as isize;
                delta.chunks += 1;
                self.sealed.push(SealedHist {
                    mint: old.mint,
                    maxt: old.maxt,
                    kind: old.app.kind(),
                    bytes: Arc::from(old.app.bytes()),
                });
                self.next_at = range_for_timestamp(t, opts.chunk_range_ms);
                self.end_computed = false;
            }
        }
        match &mut self.last {
            Some(last) => last.assign(h),
            None => self.last = Some(h.clone()),
        }
        Ok(Some(delta))
    }

    /// Chunks in time order, the open one last: (mint, maxt, kind, bytes).
    pub fn chunks(&self) -> impl Iterator<Item = (i64, i64, HistogramKind, &[u8])> {
        self.sealed
            .iter()
            .map(|c| (c.mint, c.maxt, c.kind, &*c.bytes))
            .chain(
                self.open
                    .iter()
                    .map(|o| (o.mint, o.maxt, o.app.kind(), o.app.bytes())),
            )
    }

    /// Samples with `mint <= t <= maxt` and `t <= until`, decoded.
    pub fn samples(&self, mint: i64, maxt: i64, until: i64) -> Vec<(i64, HistSample)> {
        let maxt = maxt.min(until);
        let mut out = Vec::new();
        for (cmin, cmax, kind, bytes) in self.chunks() {
            if cmax < mint || cmin > maxt {
                continue;
            }
            decode_histograms(kind, bytes, mint, maxt, &mut out);
        }
        out
    }

    /// Encoded bytes and chunk count.
    pub fn footprint(&self) -> (usize, usize) {
        let bytes = self.chunks().map(|c| c.3.len()).sum();
        (bytes, self.sealed.len() + usize::from(self.open.is_some()))
    }

    /// Samples held.
    pub fn sample_count(&self) -> usize {
        self.chunks()
            .map(|c| usize::from(u16::from_be_bytes([c.3[0], c.3[1]])))
            .sum()
    }

    /// Drops sealed chunks that end before `cutoff`; (chunks, bytes,
    /// samples) dropped.
    pub fn retain(&mut self, cutoff: i64) -> (usize, usize, usize) {
        let old = self.sealed.iter().take_while(|c| c.maxt < cutoff).count();
        let bytes = self.sealed[..old].iter().map(|c| c.bytes.len()).sum();
        let samples = self.sealed[..old]
            .iter()
            .map(|c| usize::from(u16::from_be_bytes([c.bytes[0], c.bytes[1]])))
            .sum();
        self.sealed.drain(..old);
        (old, bytes, samples)
    }

    /// For a checkpoint: sealed chunks, the open one, `next_at`.
    pub fn image(&self) -> (&[SealedHist], Option<OpenImage<'_>>, i64) {
        (
            &self.sealed,
            self.open
                .as_ref()
                .map(|o| (o.mint, o.maxt, o.app.kind(), o.app.bytes())),
            self.next_at,
        )
    }

    /// Rebuilds from a checkpoint image; `None` if a chunk does not decode
    /// to the same bytes.
    pub fn restore(
        sealed: Vec<SealedHist>,
        open: Option<OpenImage<'_>>,
        next_at: i64,
    ) -> Option<Self> {
        let mut s = HistSeries {
            sealed,
            open: None,
            next_at,
            end_computed: false,
            last: None,
        };
        if let Some((mint, maxt, kind, bytes)) = open {
            // Appending the chunk's own samples in order yields its bytes
            // again (one layout throughout, so no recode or cut).
            let (app, last) = if kind == HistogramKind::Float {
                let mut app = FloatHistogramAppender::new();
                let mut last = None;
                let mut it = FloatHistogramIter::new(bytes);
                for (t, h) in it.by_ref() {
                    app.append_raw(t, &h);
                    last = Some(HistSample::Float(h));
                }
                it.err().is_none().then_some(())?;
                app.set_counter_reset_header(CounterResetHeader::from_byte(*bytes.get(2)?));
                (OpenApp::Float(app), last)
            } else {
                let mut app = HistogramAppender::new();
                let mut last = None;
                let mut it = HistogramIter::new(bytes);
                for (t, h) in it.by_ref() {
                    app.append_raw(t, &h);
                    last = Some(HistSample::Int(h));
                }
                it.err().is_none().then_some(())?;
                app.set_counter_reset_header(CounterResetHeader::from_byte(*bytes.get(2)?));
                (OpenApp::Int(app), last)
            };
            if app.bytes() != bytes {
                return None;
            }
            // Whether `nextAt` was already spread is not kept; a quarter
            // of the target says it would have been.
            s.end_computed = bytes.len() >= TARGET_BYTES / 4;
            s.open = Some(OpenHist { app, mint, maxt });
            s.last = last;
        }
        Some(s)
    }
}
