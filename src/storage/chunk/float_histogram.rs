//! Prometheus' float histogram chunk (`float_histogram.go`), byte for
//! byte: the same header and layout as the integer chunk; the first sample
//! as a varbit timestamp and the 64 bits of count, zero count, sum and
//! each bucket; every later one as a varbit timestamp delta-of-delta and
//! each of those floats XOR-coded against its own previous value.

use super::bstream::BitCursor;
use super::histogram::{is_stale, same_floats};
use super::histogram_layout::{
    adjust_for_inserts, expand_both_ways, expand_counter_buckets, insert, put_layout, read_layout,
    CounterResetHeader, Expansion, Insert,
};
use super::varbit::{put_int, read_int};
use super::xor_value::{read_xor, write_xor, XorState};
use super::{BitWriter, ChunkError};
use crate::histogram::{bucket_count, CounterResetHint, FloatHistogram, Span};

/// A float and the XOR window of its last write.
#[derive(Debug, Clone, Copy, Default)]
struct XorValue {
    value: f64,
    state: XorState,
}

impl XorValue {
    fn write(&mut self, w: &mut BitWriter, v: f64) {
        write_xor(w, v, self.value, &mut self.state);
        self.value = v;
    }
}

/// Appends float histograms to one chunk.
#[derive(Debug, Clone)]
pub struct FloatHistogramAppender {
    w: BitWriter,
    schema: i32,
    zero_threshold: f64,
    p_spans: Vec<Span>,
    n_spans: Vec<Span>,
    custom_values: Vec<f64>,
    t: i64,
    t_delta: i64,
    cnt: XorValue,
    z_cnt: XorValue,
    sum: XorValue,
    /// The last sample's bucket counts, and each bucket's XOR window.
    p_values: Vec<f64>,
    p_states: Vec<XorState>,
    n_values: Vec<f64>,
    n_states: Vec<XorState>,
}

impl Default for FloatHistogramAppender {
    fn default() -> Self {
        Self::new()
    }
}

/// Where an append went.
#[derive(Debug)]
pub enum FloatAppended {
    /// Into this chunk.
    Here,
    /// Into a new chunk that follows this one.
    NewChunk(Box<FloatHistogramAppender>),
    /// Into a recoded copy of this chunk that replaces it.
    Recoded(Box<FloatHistogramAppender>),
}

impl FloatHistogramAppender {
    /// An empty chunk.
    pub fn new() -> Self {
        let mut w = BitWriter::with_capacity(128);
        w.write_bits(0, 24);
        Self {
            w,
            schema: 0,
            zero_threshold: 0.0,
            p_spans: Vec::new(),
            n_spans: Vec::new(),
            custom_values: Vec::new(),
            t: 0,
            t_delta: 0,
            cnt: XorValue::default(),
            z_cnt: XorValue::default(),
            sum: XorValue::default(),
            p_values: Vec::new(),
            p_states: Vec::new(),
            n_values: Vec::new(),
            n_states: Vec::new(),
        }
    }

    /// The chunk's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.w.bytes()
    }

    /// Samples in the chunk.
    pub fn num_samples(&self) -> u16 {
        let b = self.w.bytes();
        u16::from_be_bytes([b[0], b[1]])
    }

    /// The chunk's counter-reset header.
    pub fn counter_reset_header(&self) -> CounterResetHeader {
        CounterResetHeader::from_byte(self.w.bytes()[2])
    }

    /// Sets the chunk's counter-reset header (when rebuilding a chunk).
    pub fn set_counter_reset_header(&mut self, h: CounterResetHeader) {
        let third = (self.w.bytes()[2] & 0b0011_1111) | h.bits();
        self.w.set_byte(2, third);
    }

    /// Whether `h` can follow the last sample: the inserts it needs (both
    /// `None` when it cannot), and whether it is a counter reset.
    fn appendable(&self, h: &FloatHistogram) -> (Option<(Expansion, Expansion)>, bool) {
        if self.num_samples() > 0 && self.counter_reset_header() == CounterResetHeader::Gauge {
            return (None, false);
        }
        if h.hint == CounterResetHint::CounterReset {
            return (None, true);
        }
        if is_stale(h.sum) {
            return (Some(Default::default()), false);
        }
        if is_stale(self.sum.value) {
            return (None, false);
        }
        if h.count < self.cnt.value {
            return (None, true);
        }
        if h.schema != self.schema || h.zero_threshold != self.zero_threshold {
            return (None, false);
        }
        if h.uses_custom_buckets() && !same_floats(&h.custom_values, &self.custom_values) {
            return (None, true);
        }
        if h.zero_count < self.z_cnt.value {
            return (None, true);
        }
        let Some(p) = expand_counter_buckets(
            &self.p_spans,
            &h.positive_spans,
            &self.p_values,
            &h.positive_buckets,
            false,
            true,
        ) else {
            return (None, true);
        };
        let Some(n) = expand_counter_buckets(
            &self.n_spans,
            &h.negative_spans,
            &self.n_values,
            &h.negative_buckets,
            false,
            true,
        ) else {
            return (None, true);
        };
        (Some((p, n)), false)
    }

    /// Appends `h` at `t` as Prometheus' `AppendFloatHistogram` does (never
    /// append-only); `prev` is the chunk before this one.
    pub fn append(
        &mut self,
        prev: Option<&FloatHistogramAppender>,
        t: i64,
        h: &FloatHistogram,
    ) -> FloatAppended {
        use CounterResetHeader as C;
        if self.num_samples() == 0 {
            self.append_raw(t, h);
            if h.hint == CounterResetHint::Gauge {
                self.set_counter_reset_header(C::Gauge);
            } else if h.hint == CounterResetHint::CounterReset {
                self.set_counter_reset_header(C::CounterReset);
            } else if let Some(prev) = prev {
                let (_, reset) = prev.appendable(h);
                self.set_counter_reset_header(if reset {
                    C::CounterReset
                } else {
                    C::NotCounterReset
                });
            }
            return FloatAppended::Here;
        }
        if h.hint != CounterResetHint::Gauge {
            let (expansion, reset) = self.appendable(h);
            let Some((p, n)) = expansion.filter(|_| !reset) else {
                let mut chunk = FloatHistogramAppender::new();
                if reset {
                    chunk.set_counter_reset_header(C::CounterReset);
                }
                chunk.append_raw(t, h);
                return FloatAppended::NewChunk(Box::new(chunk));
            };
            // Copied only when its buckets must change.
            let mut h = std::borrow::Cow::Borrowed(h);
            if !p.backward.is_empty() || !n.backward.is_empty() {
                let h = h.to_mut();
                if p.forward.is_empty() && n.forward.is_empty() {
                    h.positive_spans = self.p_spans.clone();
                    h.negative_spans = self.n_spans.clone();
                } else {
                    h.positive_spans = adjust_for_inserts(&h.positive_spans, &p.backward);
                    h.negative_spans = adjust_for_inserts(&h.negative_spans, &n.backward);
                }
                recode_buckets(h, &p.backward, &n.backward);
            }
            return self.finish(t, &h, &p.forward, &n.forward);
        }
        let mergeable = !(self.num_samples() > 0 && self.counter_reset_header() != C::Gauge)
            && (is_stale(h.sum)
                || !is_stale(self.sum.value)
                    && h.schema == self.schema
                    && h.zero_threshold == self.zero_threshold
                    && (!h.uses_custom_buckets()
                        || same_floats(&h.custom_values, &self.custom_values)));
        if !mergeable {
            let mut chunk = FloatHistogramAppender::new();
            chunk.set_counter_reset_header(C::Gauge);
            chunk.append_raw(t, h);
            return FloatAppended::NewChunk(Box::new(chunk));
        }
        if is_stale(h.sum) {
            return self.finish(t, h, &[], &[]);
        }
        let (p, p_merged) = expand_both_ways(&self.p_spans, &h.positive_spans);
        let (n, n_merged) = expand_both_ways(&self.n_spans, &h.negative_spans);
        let mut h = std::borrow::Cow::Borrowed(h);
        if !p.backward.is_empty() || !n.backward.is_empty() {
            let h = h.to_mut();
            h.positive_spans = p_merged;
            h.negative_spans = n_merged;
            recode_buckets(h, &p.backward, &n.backward);
        }
        self.finish(t, &h, &p.forward, &n.forward)
    }

    /// Appends here, or to a recoded copy when the chunk lacks buckets.
    fn finish(
        &mut self,
        t: i64,
        h: &FloatHistogram,
        p_forward: &[Insert],
        n_forward: &[Insert],
    ) -> FloatAppended {
        if !p_forward.is_empty() || !n_forward.is_empty() {
            let mut chunk = self.recode(p_forward, n_forward, &h.positive_spans, &h.negative_spans);
            chunk.append_raw(t, h);
            return FloatAppended::Recoded(Box::new(chunk));
        }
        self.append_raw(t, h);
        FloatAppended::Here
    }

    /// A copy of this chunk with buckets inserted into every sample.
    fn recode(
        &self,
        p_inserts: &[Insert],
        n_inserts: &[Insert],
        p_spans: &[Span],
        n_spans: &[Span],
    ) -> FloatHistogramAppender {
        let mut out = FloatHistogramAppender::new();
        let mut it = FloatHistogramIter::new(self.bytes());
        let mut old = FloatHistogram::default();
        while let Some(t) = it.next_into(&mut old) {
            old.positive_spans = p_spans.to_vec();
            old.negative_spans = n_spans.to_vec();
            if !p_inserts.is_empty() {
                old.positive_buckets = insert(&old.positive_buckets, p_inserts, false);
            }
            if !n_inserts.is_empty() {
                old.negative_buckets = insert(&old.negative_buckets, n_inserts, false);
            }
            out.append_raw(t, &old);
        }
        out.set_counter_reset_header(self.counter_reset_header());
        out
    }

    /// Writes `h` (`appendFloatHistogram`).
    /// Writes `h` without the appendability rules: for rebuilding a chunk
    /// from its own samples, which share its layout.
    pub fn append_raw(&mut self, t: i64, h: &FloatHistogram) {
        let stale_h;
        let h = if is_stale(h.sum) {
            stale_h = FloatHistogram {
                sum: h.sum,
                ..FloatHistogram::default()
            };
            &stale_h
        } else {
            h
        };
        let num = self.num_samples();
        let mut t_delta = 0i64;
        if num == 0 {
            put_layout(
                &mut self.w,
                h.schema,
                h.zero_threshold,
                &h.positive_spans,
                &h.negative_spans,
                &h.custom_values,
            );
            self.schema = h.schema;
            self.zero_threshold = h.zero_threshold;
            self.p_spans = h.positive_spans.clone();
            self.n_spans = h.negative_spans.clone();
            self.custom_values = h.custom_values.clone();
            let fresh = |counts: &[f64], n: usize| -> Vec<f64> {
                (0..n)
                    .map(|i| counts.get(i).copied().unwrap_or_default())
                    .collect()
            };
            let (np, nn) = (
                bucket_count(&h.positive_spans),
                bucket_count(&h.negative_spans),
            );
            self.p_values = fresh(&h.positive_buckets, np);
            self.p_states = vec![XorState::default(); np];
            self.n_values = fresh(&h.negative_buckets, nn);
            self.n_states = vec![XorState::default(); nn];
            put_int(&mut self.w, t);
            self.w.write_bits(h.count.to_bits(), 64);
            self.w.write_bits(h.zero_count.to_bits(), 64);
            self.w.write_bits(h.sum.to_bits(), 64);
            self.cnt.value = h.count;
            self.z_cnt.value = h.zero_count;
            self.sum.value = h.sum;
            for &b in h.positive_buckets.iter().chain(&h.negative_buckets) {
                self.w.write_bits(b.to_bits(), 64);
            }
        } else {
            t_delta = t.wrapping_sub(self.t);
            put_int(&mut self.w, t_delta.wrapping_sub(self.t_delta));
            self.cnt.write(&mut self.w, h.count);
            self.z_cnt.write(&mut self.w, h.zero_count);
            self.sum.write(&mut self.w, h.sum);
            for ((old, state), &b) in self
                .p_values
                .iter_mut()
                .zip(&mut self.p_states)
                .zip(&h.positive_buckets)
            {
                write_xor(&mut self.w, b, *old, state);
                *old = b;
            }
            for ((old, state), &b) in self
                .n_values
                .iter_mut()
                .zip(&mut self.n_states)
                .zip(&h.negative_buckets)
            {
                write_xor(&mut self.w, b, *old, state);
                *old = b;
            }
        }
        self.w.set_header(num.wrapping_add(1).to_be_bytes());
        self.t = t;
        self.t_delta = t_delta;
    }
}

fn recode_buckets(h: &mut FloatHistogram, p: &[Insert], n: &[Insert]) {
    if !p.is_empty() {
        h.positive_buckets = insert(&h.positive_buckets, p, false);
    }
    if !n.is_empty() {
        h.negative_buckets = insert(&h.negative_buckets, n, false);
    }
}

/// Most buckets a chunk's layout may declare for a reader to allocate.
const MAX_BUCKETS: usize = 1 << 16;

/// Reads the samples of a float histogram chunk.
#[derive(Debug, Clone)]
pub struct FloatHistogramIter<'a> {
    r: BitCursor<'a>,
    total: u16,
    read: u16,
    header: CounterResetHeader,
    schema: i32,
    zero_threshold: f64,
    p_spans: Vec<Span>,
    n_spans: Vec<Span>,
    custom_values: Vec<f64>,
    t: i64,
    t_delta: i64,
    cnt: XorValue,
    z_cnt: XorValue,
    sum: XorValue,
    p_buckets: Vec<XorValue>,
    n_buckets: Vec<XorValue>,
    err: Option<ChunkError>,
}

impl<'a> FloatHistogramIter<'a> {
    /// Iterates `chunk`, header included.
    pub fn new(chunk: &'a [u8]) -> Self {
        let (total, header, data, err) = match chunk {
            [a, b, c, rest @ ..] => (
                u16::from_be_bytes([*a, *b]),
                CounterResetHeader::from_byte(*c),
                rest,
                None,
            ),
            _ => (
                0,
                CounterResetHeader::Unknown,
                &[][..],
                Some(ChunkError::NoHeader),
            ),
        };
        Self {
            r: BitCursor::new(data),
            total,
            read: 0,
            header,
            schema: 0,
            zero_threshold: 0.0,
            p_spans: Vec::new(),
            n_spans: Vec::new(),
            custom_values: Vec::new(),
            t: 0,
            t_delta: 0,
            cnt: XorValue::default(),
            z_cnt: XorValue::default(),
            sum: XorValue::default(),
            p_buckets: Vec::new(),
            n_buckets: Vec::new(),
            err,
        }
    }

    /// The chunk's counter-reset header.
    pub fn counter_reset_header(&self) -> CounterResetHeader {
        self.header
    }

    /// Why iteration stopped early, if it did.
    pub fn err(&self) -> Option<ChunkError> {
        self.err
    }

    /// Reads the next sample into `out` (reusing its buffers); its
    /// timestamp, or `None` at the end or on damage (see [`Self::err`]).
    pub fn next_into(&mut self, out: &mut FloatHistogram) -> Option<i64> {
        if self.err.is_some() || self.read >= self.total {
            return None;
        }
        if self.step().is_none() {
            self.err = Some(ChunkError::Truncated);
            return None;
        }
        self.read += 1;
        if is_stale(self.sum.value) {
            *out = FloatHistogram {
                sum: self.sum.value,
                ..FloatHistogram::default()
            };
            return Some(self.t);
        }
        out.hint = self.header.hint_for(self.read);
        out.schema = self.schema;
        out.zero_threshold = self.zero_threshold;
        out.zero_count = self.z_cnt.value;
        out.count = self.cnt.value;
        out.sum = self.sum.value;
        out.positive_spans.clone_from(&self.p_spans);
        out.negative_spans.clone_from(&self.n_spans);
        out.positive_buckets.clear();
        out.positive_buckets
            .extend(self.p_buckets.iter().map(|b| b.value));
        out.negative_buckets.clear();
        out.negative_buckets
            .extend(self.n_buckets.iter().map(|b| b.value));
        out.custom_values.clone_from(&self.custom_values);
        Some(self.t)
    }

    fn step(&mut self) -> Option<()> {
        let r = &mut self.r;
        if self.read == 0 {
            let layout = read_layout(r)?;
            let (np, nn) = (
                bucket_count(&layout.positive_spans),
                bucket_count(&layout.negative_spans),
            );
            if np > MAX_BUCKETS || nn > MAX_BUCKETS {
                return None;
            }
            self.schema = layout.schema;
            self.zero_threshold = layout.zero_threshold;
            self.p_spans = layout.positive_spans;
            self.n_spans = layout.negative_spans;
            self.custom_values = layout.custom_values;
            self.t = read_int(r)?;
            self.cnt.value = f64::from_bits(r.read(64)?);
            self.z_cnt.value = f64::from_bits(r.read(64)?);
            self.sum.value = f64::from_bits(r.read(64)?);
            let mut raw = |n: usize| -> Option<Vec<XorValue>> {
                (0..n)
                    .map(|_| {
                        Some(XorValue {
                            value: f64::from_bits(r.read(64)?),
                            state: XorState::default(),
                        })
                    })
                    .collect()
            };
            self.p_buckets = raw(np)?;
            self.n_buckets = raw(nn)?;
            return Some(());
        }
        self.t_delta = self.t_delta.wrapping_add(read_int(r)?);
        self.t = self.t.wrapping_add(self.t_delta);
        for x in [&mut self.cnt, &mut self.z_cnt, &mut self.sum] {
            x.value = read_xor(r, x.value, &mut x.state)?;
        }
        if is_stale(self.sum.value) {
            return Some(());
        }
        for x in self.p_buckets.iter_mut().chain(self.n_buckets.iter_mut()) {
            x.value = read_xor(r, x.value, &mut x.state)?;
        }
        Some(())
    }
}

impl Iterator for FloatHistogramIter<'_> {
    type Item = (i64, FloatHistogram);

    fn next(&mut self) -> Option<(i64, FloatHistogram)> {
        let mut h = FloatHistogram::default();
        let t = self.next_into(&mut h)?;
        Some((t, h))
    }
}
