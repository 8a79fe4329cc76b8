//! Prometheus' integer histogram chunk (`histogram.go`), byte for byte.
//!
//! After the 3-byte header, the layout (see [`super::histogram_layout`]),
//! then per sample: the first as varbit timestamp, count and zero count,
//! the sum's 64 bits and each bucket's delta; every later one as varbit
//! delta-of-deltas of timestamp, count, zero count and each bucket, with
//! the sum XOR-coded against the previous one. A histogram whose buckets
//! are a superset of the chunk's is taken by recoding the chunk with the
//! new (empty) buckets; a counter reset or another schema starts a new
//! chunk.

use super::bstream::BitCursor;
use super::histogram_layout::{
    adjust_for_inserts, expand_both_ways, expand_counter_buckets, insert, put_layout, read_layout,
    CounterResetHeader, Expansion,
};
use super::varbit::{put_int, put_uint, read_int, read_uint};
use super::xor_value::{read_xor, write_xor, XorState};
use super::{BitWriter, ChunkError};
use crate::histogram::{bucket_count, CounterResetHint, Histogram, Span};

/// Prometheus' stale marker, a NaN with these bits.
pub const STALE_NAN: u64 = 0x7ff0_0000_0000_0002;

/// Whether `v` is the stale marker.
pub(super) fn is_stale(v: f64) -> bool {
    v.to_bits() == STALE_NAN
}

/// Appends integer histograms to one chunk.
#[derive(Debug, Clone)]
pub struct HistogramAppender {
    w: BitWriter,
    schema: i32,
    zero_threshold: f64,
    p_spans: Vec<Span>,
    n_spans: Vec<Span>,
    custom_values: Vec<f64>,
    t: i64,
    cnt: u64,
    z_cnt: u64,
    t_delta: i64,
    cnt_delta: i64,
    z_cnt_delta: i64,
    p_buckets: Vec<i64>,
    n_buckets: Vec<i64>,
    p_buckets_delta: Vec<i64>,
    n_buckets_delta: Vec<i64>,
    sum: f64,
    xor: XorState,
}

impl Default for HistogramAppender {
    fn default() -> Self {
        Self::new()
    }
}

/// Where an append went.
#[derive(Debug)]
pub enum Appended {
    /// Into this chunk.
    Here,
    /// Into a new chunk that follows this one (a counter reset, another
    /// schema, or a layout the chunk cannot take).
    NewChunk(Box<HistogramAppender>),
    /// Into a recoded copy of this chunk that replaces it: the new
    /// histogram brought buckets the chunk lacked.
    Recoded(Box<HistogramAppender>),
}

impl HistogramAppender {
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
            cnt: 0,
            z_cnt: 0,
            t_delta: 0,
            cnt_delta: 0,
            z_cnt_delta: 0,
            p_buckets: Vec::new(),
            n_buckets: Vec::new(),
            p_buckets_delta: Vec::new(),
            n_buckets_delta: Vec::new(),
            sum: 0.0,
            xor: XorState::default(),
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
        let b = self.w.bytes();
        let third = (b[2] & 0b0011_1111) | h.bits();
        self.w.set_byte(2, third);
    }

    /// Whether `h` can follow the chunk's last sample (`appendable`): the
    /// inserts it needs, and the counter-reset verdict.
    fn appendable(
        &self,
        h: &Histogram,
    ) -> (Option<Expansion>, Option<Expansion>, CounterResetHeader) {
        use CounterResetHeader as C;
        let no = |c| (None, None, c);
        if self.num_samples() > 0 && self.counter_reset_header() == C::Gauge {
            return no(C::NotCounterReset);
        }
        if h.hint == CounterResetHint::CounterReset {
            return no(C::CounterReset);
        }
        if is_stale(h.sum) {
            return (
                Some(Expansion::default()),
                Some(Expansion::default()),
                C::NotCounterReset,
            );
        }
        if is_stale(self.sum) {
            return no(C::Unknown);
        }
        if h.count < self.cnt {
            return no(C::CounterReset);
        }
        if h.schema != self.schema || h.zero_threshold != self.zero_threshold {
            return no(C::Unknown);
        }
        if h.uses_custom_buckets() && !same_floats(&h.custom_values, &self.custom_values) {
            return no(C::CounterReset);
        }
        if h.zero_count < self.z_cnt {
            return no(C::CounterReset);
        }
        let Some(p) = expand_counter_buckets(
            &self.p_spans,
            &h.positive_spans,
            &self.p_buckets,
            &h.positive_buckets,
            true,
            false,
        ) else {
            return no(C::CounterReset);
        };
        let Some(n) = expand_counter_buckets(
            &self.n_spans,
            &h.negative_spans,
            &self.n_buckets,
            &h.negative_buckets,
            true,
            false,
        ) else {
            return no(C::CounterReset);
        };
        (Some(p), Some(n), C::NotCounterReset)
    }

    /// Appends `h` at `t` as Prometheus' `AppendHistogram` does (never
    /// append-only). `prev` is the chunk before this one, consulted when
    /// this one is empty to set its counter-reset header.
    pub fn append(&mut self, prev: Option<&HistogramAppender>, t: i64, h: &Histogram) -> Appended {
        use CounterResetHeader as C;
        if self.num_samples() == 0 {
            self.append_raw(t, h);
            if h.hint == CounterResetHint::Gauge {
                self.set_counter_reset_header(C::Gauge);
            } else if h.hint == CounterResetHint::CounterReset {
                self.set_counter_reset_header(C::CounterReset);
            } else if let Some(prev) = prev {
                let (_, _, verdict) = prev.appendable(h);
                self.set_counter_reset_header(verdict);
            }
            return Appended::Here;
        }
        if h.hint != CounterResetHint::Gauge {
            let (p, n, verdict) = self.appendable(h);
            let (Some(p), Some(n)) = (p, n) else {
                return self.start_new(t, h, verdict);
            };
            if verdict != C::NotCounterReset {
                return self.start_new(t, h, verdict);
            }
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
            if !p.forward.is_empty() || !n.forward.is_empty() {
                let mut chunk =
                    self.recode(&p.forward, &n.forward, &h.positive_spans, &h.negative_spans);
                chunk.append_raw(t, &h);
                return Appended::Recoded(Box::new(chunk));
            }
            self.append_raw(t, &h);
            return Appended::Here;
        }
        // A gauge histogram: any layout merges, both ways.
        let mergeable = !(self.num_samples() > 0 && self.counter_reset_header() != C::Gauge)
            && (is_stale(h.sum)
                || !is_stale(self.sum)
                    && h.schema == self.schema
                    && h.zero_threshold == self.zero_threshold
                    && (!h.uses_custom_buckets()
                        || same_floats(&h.custom_values, &self.custom_values)));
        if !mergeable {
            return self.start_new(t, h, C::Gauge);
        }
        let (p, p_merged, n, n_merged) = if is_stale(h.sum) {
            (
                Expansion::default(),
                Vec::new(),
                Expansion::default(),
                Vec::new(),
            )
        } else {
            let (p, pm) = expand_both_ways(&self.p_spans, &h.positive_spans);
            let (n, nm) = expand_both_ways(&self.n_spans, &h.negative_spans);
            (p, pm, n, nm)
        };
        let mut h = std::borrow::Cow::Borrowed(h);
        if !p.backward.is_empty() || !n.backward.is_empty() {
            let h = h.to_mut();
            h.positive_spans = p_merged;
            h.negative_spans = n_merged;
            recode_buckets(h, &p.backward, &n.backward);
        }
        if !p.forward.is_empty() || !n.forward.is_empty() {
            let mut chunk =
                self.recode(&p.forward, &n.forward, &h.positive_spans, &h.negative_spans);
            chunk.append_raw(t, &h);
            return Appended::Recoded(Box::new(chunk));
        }
        self.append_raw(t, &h);
        Appended::Here
    }

    fn start_new(&self, t: i64, h: &Histogram, header: CounterResetHeader) -> Appended {
        let mut chunk = HistogramAppender::new();
        chunk.set_counter_reset_header(header);
        chunk.append_raw(t, h);
        Appended::NewChunk(Box::new(chunk))
    }

    /// A copy of this chunk with buckets inserted into every sample.
    fn recode(
        &self,
        p_inserts: &[super::histogram_layout::Insert],
        n_inserts: &[super::histogram_layout::Insert],
        p_spans: &[Span],
        n_spans: &[Span],
    ) -> HistogramAppender {
        let mut out = HistogramAppender::new();
        let mut it = HistogramIter::new(self.bytes());
        let mut old = Histogram::default();
        while let Some(t) = it.next_into(&mut old) {
            old.positive_spans = p_spans.to_vec();
            old.negative_spans = n_spans.to_vec();
            if !p_inserts.is_empty() {
                old.positive_buckets = insert(&old.positive_buckets, p_inserts, true);
            }
            if !n_inserts.is_empty() {
                old.negative_buckets = insert(&old.negative_buckets, n_inserts, true);
            }
            out.append_raw(t, &old);
        }
        out.set_counter_reset_header(self.counter_reset_header());
        out
    }

    /// Writes `h` (`appendHistogram`).
    /// Writes `h` without the appendability rules: for rebuilding a chunk
    /// from its own samples, which share its layout.
    pub fn append_raw(&mut self, t: i64, h: &Histogram) {
        let stale_h;
        let h = if is_stale(h.sum) {
            stale_h = Histogram {
                sum: h.sum,
                ..Histogram::default()
            };
            &stale_h
        } else {
            h
        };
        let num = self.num_samples();
        let (mut t_delta, mut cnt_delta, mut z_cnt_delta) = (0i64, 0i64, 0i64);
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
            let (np, nn) = (
                bucket_count(&h.positive_spans),
                bucket_count(&h.negative_spans),
            );
            self.p_buckets = vec![0; np];
            self.p_buckets_delta = vec![0; np];
            self.n_buckets = vec![0; nn];
            self.n_buckets_delta = vec![0; nn];
            put_int(&mut self.w, t);
            put_uint(&mut self.w, h.count);
            put_uint(&mut self.w, h.zero_count);
            self.w.write_bits(h.sum.to_bits(), 64);
            for &b in &h.positive_buckets {
                put_int(&mut self.w, b);
            }
            for &b in &h.negative_buckets {
                put_int(&mut self.w, b);
            }
        } else {
            t_delta = t.wrapping_sub(self.t);
            cnt_delta = (h.count as i64).wrapping_sub(self.cnt as i64);
            z_cnt_delta = (h.zero_count as i64).wrapping_sub(self.z_cnt as i64);
            let t_dod = t_delta.wrapping_sub(self.t_delta);
            let mut cnt_dod = cnt_delta.wrapping_sub(self.cnt_delta);
            let mut z_cnt_dod = z_cnt_delta.wrapping_sub(self.z_cnt_delta);
            if is_stale(h.sum) {
                cnt_dod = 0;
                z_cnt_dod = 0;
            }
            put_int(&mut self.w, t_dod);
            put_int(&mut self.w, cnt_dod);
            put_int(&mut self.w, z_cnt_dod);
            write_xor(&mut self.w, h.sum, self.sum, &mut self.xor);
            for (i, &b) in h.positive_buckets.iter().enumerate() {
                let (Some(prev), Some(prev_delta)) =
                    (self.p_buckets.get(i), self.p_buckets_delta.get_mut(i))
                else {
                    break;
                };
                let delta = b.wrapping_sub(*prev);
                put_int(&mut self.w, delta.wrapping_sub(*prev_delta));
                *prev_delta = delta;
            }
            for (i, &b) in h.negative_buckets.iter().enumerate() {
                let (Some(prev), Some(prev_delta)) =
                    (self.n_buckets.get(i), self.n_buckets_delta.get_mut(i))
                else {
                    break;
                };
                let delta = b.wrapping_sub(*prev);
                put_int(&mut self.w, delta.wrapping_sub(*prev_delta));
                *prev_delta = delta;
            }
        }
        self.w.set_header((num.wrapping_add(1)).to_be_bytes());
        self.t = t;
        self.cnt = h.count;
        self.z_cnt = h.zero_count;
        self.t_delta = t_delta;
        self.cnt_delta = cnt_delta;
        self.z_cnt_delta = z_cnt_delta;
        for (dst, &src) in self.p_buckets.iter_mut().zip(&h.positive_buckets) {
            *dst = src;
        }
        for (dst, &src) in self.n_buckets.iter_mut().zip(&h.negative_buckets) {
            *dst = src;
        }
        self.sum = h.sum;
    }
}

/// Inserts the backward inserts into the new histogram's buckets
/// (`recodeHistogram`).
fn recode_buckets(
    h: &mut Histogram,
    p: &[super::histogram_layout::Insert],
    n: &[super::histogram_layout::Insert],
) {
    if !p.is_empty() {
        h.positive_buckets = insert(&h.positive_buckets, p, true);
    }
    if !n.is_empty() {
        h.negative_buckets = insert(&h.negative_buckets, n, true);
    }
}

/// Float slices equal bit for bit (`FloatBucketsMatch`).
pub(super) fn same_floats(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Reads the samples of an integer histogram chunk.
#[derive(Debug, Clone)]
pub struct HistogramIter<'a> {
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
    cnt: u64,
    z_cnt: u64,
    t_delta: i64,
    cnt_delta: i64,
    z_cnt_delta: i64,
    p_buckets: Vec<i64>,
    n_buckets: Vec<i64>,
    p_buckets_delta: Vec<i64>,
    n_buckets_delta: Vec<i64>,
    sum: f64,
    xor: XorState,
    err: Option<ChunkError>,
}

/// Most buckets a chunk's layout may declare for a reader to allocate.
const MAX_BUCKETS: usize = 1 << 16;

impl<'a> HistogramIter<'a> {
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
            cnt: 0,
            z_cnt: 0,
            t_delta: 0,
            cnt_delta: 0,
            z_cnt_delta: 0,
            p_buckets: Vec::new(),
            n_buckets: Vec::new(),
            p_buckets_delta: Vec::new(),
            n_buckets_delta: Vec::new(),
            sum: 0.0,
            xor: XorState::default(),
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
    pub fn next_into(&mut self, out: &mut Histogram) -> Option<i64> {
        if self.err.is_some() || self.read >= self.total {
            return None;
        }
        if self.step().is_none() {
            self.err = Some(ChunkError::Truncated);
            return None;
        }
        self.read += 1;
        if is_stale(self.sum) {
            *out = Histogram {
                sum: self.sum,
                ..Histogram::default()
            };
            return Some(self.t);
        }
        out.hint = self.header.hint_for(self.read);
        out.schema = self.schema;
        out.zero_threshold = self.zero_threshold;
        out.zero_count = self.z_cnt;
        out.count = self.cnt;
        out.sum = self.sum;
        out.positive_spans.clone_from(&self.p_spans);
        out.negative_spans.clone_from(&self.n_spans);
        out.positive_buckets.clone_from(&self.p_buckets);
        out.negative_buckets.clone_from(&self.n_buckets);
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
            self.cnt = read_uint(r)?;
            self.z_cnt = read_uint(r)?;
            self.sum = f64::from_bits(r.read(64)?);
            self.p_buckets = (0..np).map(|_| read_int(r)).collect::<Option<_>>()?;
            self.n_buckets = (0..nn).map(|_| read_int(r)).collect::<Option<_>>()?;
            self.p_buckets_delta = vec![0; np];
            self.n_buckets_delta = vec![0; nn];
            return Some(());
        }
        self.t_delta = self.t_delta.wrapping_add(read_int(r)?);
        self.t = self.t.wrapping_add(self.t_delta);
        self.cnt_delta = self.cnt_delta.wrapping_add(read_int(r)?);
        self.cnt = (self.cnt as i64).wrapping_add(self.cnt_delta) as u64;
        self.z_cnt_delta = self.z_cnt_delta.wrapping_add(read_int(r)?);
        self.z_cnt = (self.z_cnt as i64).wrapping_add(self.z_cnt_delta) as u64;
        self.sum = read_xor(r, self.sum, &mut self.xor)?;
        if is_stale(self.sum) {
            return Some(());
        }
        for (b, d) in self.p_buckets.iter_mut().zip(&mut self.p_buckets_delta) {
            *d = d.wrapping_add(read_int(r)?);
            *b = b.wrapping_add(*d);
        }
        for (b, d) in self.n_buckets.iter_mut().zip(&mut self.n_buckets_delta) {
            *d = d.wrapping_add(read_int(r)?);
            *b = b.wrapping_add(*d);
        }
        Some(())
    }
}

impl Iterator for HistogramIter<'_> {
    type Item = (i64, Histogram);

    fn next(&mut self) -> Option<(i64, Histogram)> {
        let mut h = Histogram::default();
        let t = self.next_into(&mut h)?;
        Some((t, h))
    }
}
