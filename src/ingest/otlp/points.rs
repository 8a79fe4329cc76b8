//! Data points by type: numbers, explicit-bucket and exponential
//! histograms, summaries; the classic series each becomes, and the native
//! histogram an exponential one converts to, as Prometheus' receiver does.

use super::exemplars::read_exemplars;
use super::walk::payload_at;
use super::*;
use crate::protocol::otlp::field::*;

/// Go's `strconv.FormatFloat(f, 'f', -1, 64)`, which Rust's `Display`
/// matches for finite values.
pub(super) fn push_float(out: &mut String, f: f64) {
    out.clear();
    if f.is_infinite() {
        out.push_str(if f > 0.0 { "+Inf" } else { "-Inf" });
    } else {
        let _ = write!(out, "{f}");
    }
}

/// `2^(index · 2^-scale)`: the lower bound of exponential bucket `index`.
pub(super) fn exp_bound(index: i64, scale: i32) -> f64 {
    if scale <= 0 {
        let exp = index.saturating_mul(1i64 << (-scale));
        2f64.powi(exp.clamp(-1100, 1100) as i32)
    } else {
        (index as f64 / f64::from(1u32 << scale)).exp2()
    }
}

impl Walk<'_> {
    /// Emits `_sum` (when present) and `_count`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn emit_sum_count(
        &mut self,
        names: &MetricNames,
        t: i64,
        sum: Option<f64>,
        count: u64,
        stale: Staleness,
        temporality: Temporality,
    ) {
        if let Some(sum) = sum {
            self.emit(
                Emitted::DataPoint,
                &names.sum,
                None,
                t,
                stale.value(sum),
                temporality,
            );
        }
        let count = stale.value(count as f64);
        self.emit(
            Emitted::DataPoint,
            &names.count,
            None,
            t,
            count,
            temporality,
        );
    }

    /// Emits one cumulative bucket, `le` formatted into `le_buf`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn emit_bucket(
        &mut self,
        name: &str,
        le_buf: &mut String,
        le: f64,
        t: i64,
        cumulative: u64,
        stale: Staleness,
        temporality: Temporality,
    ) {
        push_float(le_buf, le);
        let v = stale.value(cumulative as f64);
        self.emit(
            Emitted::DataPoint,
            name,
            Some(("le", le_buf)),
            t,
            v,
            temporality,
        );
    }

    pub(super) fn number_point(
        &mut self,
        p: &[u8],
        base: usize,
        bufs: &PointBufs,
        temporality: Temporality,
    ) -> Result<(), DecodeError> {
        let (mut t_ns, mut value, mut flags) = (0, None, 0);
        let mut r = Reader::nested(p, base);
        while let Some((num, v, _)) = r.next_field()? {
            match (num, v) {
                (number_point::TIME_UNIX_NANO, Value::Fixed64(t)) => t_ns = t,
                (number_point::START_TIME_UNIX_NANO, Value::Fixed64(st)) => {
                    self.start_ms = (st / 1_000_000) as i64
                }
                (number_point::AS_DOUBLE, Value::Fixed64(b)) => value = Some(f64::from_bits(b)),
                (number_point::AS_INT, Value::Fixed64(i)) => value = Some(i as i64 as f64),
                (number_point::FLAGS, Value::Varint(f)) => flags = f,
                _ => {}
            }
        }
        let name = bufs.names.base.as_str();
        let stale = Staleness::of(flags);
        let invalid = (stale == Staleness::Recorded && value.is_none())
            .then_some(move || format!("a data point of metric {name:?} has no value"));
        if let Some(t) =
            self.begin_point(p, base, number_point::ATTRIBUTES, t_ns, name, 1, invalid)?
        {
            let v = stale.value(value.unwrap_or(0.0));
            read_exemplars(p, base, number_point::EXEMPLARS, &mut self.exemplars)?;
            self.emit(Emitted::DataPoint, name, None, t, v, temporality);
            self.attach_exemplars(f64::NEG_INFINITY, f64::INFINITY);
        }
        Ok(())
    }

    pub(super) fn histogram_point(
        &mut self,
        p: &[u8],
        base: usize,
        bufs: &mut PointBufs,
        temporality: Temporality,
    ) -> Result<(), DecodeError> {
        let (mut t_ns, mut count, mut sum, mut flags) = (0, 0, None, 0);
        bufs.bounds.clear();
        bufs.counts.clear();
        let mut r = Reader::nested(p, base);
        while let Some((num, v, _)) = r.next_field()? {
            match (num, v) {
                (histogram_point::TIME_UNIX_NANO, Value::Fixed64(t)) => t_ns = t,
                (histogram_point::START_TIME_UNIX_NANO, Value::Fixed64(st)) => {
                    self.start_ms = (st / 1_000_000) as i64
                }
                (histogram_point::COUNT, Value::Fixed64(c)) => count = c,
                (histogram_point::SUM, Value::Fixed64(b)) => sum = Some(f64::from_bits(b)),
                // Past MAX_BUCKETS the point is rejected; collect no more.
                (histogram_point::BUCKET_COUNTS, Value::Fixed64(c)) => {
                    push_capped(&mut bufs.counts, [c])
                }
                (histogram_point::BUCKET_COUNTS, Value::Bytes(b)) => {
                    push_capped(&mut bufs.counts, fixed64s(b))
                }
                (histogram_point::EXPLICIT_BOUNDS, Value::Fixed64(b)) => {
                    push_capped(&mut bufs.bounds, [f64::from_bits(b)])
                }
                (histogram_point::EXPLICIT_BOUNDS, Value::Bytes(b)) => {
                    push_capped(&mut bufs.bounds, fixed64s(b).map(f64::from_bits));
                }
                (histogram_point::FLAGS, Value::Varint(f)) => flags = f,
                _ => {}
            }
        }
        // Prometheus pairs bounds with counts as far as both go.
        let n = bufs.bounds.len().min(bufs.counts.len());
        let samples = n as u64 + 2 + u64::from(sum.is_some());
        let PointBufs {
            names,
            bounds,
            counts,
            le,
            ..
        } = bufs;
        let invalid = (n > MAX_BUCKETS).then_some({
            || {
                format!(
                "a data point of histogram {:?} has {n} buckets, over the limit of {MAX_BUCKETS}",
                names.base
            )
            }
        });
        let Some(t) = self.begin_point(
            p,
            base,
            histogram_point::ATTRIBUTES,
            t_ns,
            &names.base,
            samples,
            invalid,
        )?
        else {
            return Ok(());
        };
        let stale = Staleness::of(flags);
        read_exemplars(p, base, histogram_point::EXEMPLARS, &mut self.exemplars)?;
        self.emit_sum_count(names, t, sum, count, stale, temporality);
        let mut cumulative = 0u64;
        // Each exemplar goes to the bucket series whose `le` first covers
        // its value, as Prometheus' OTLP translator attaches them.
        let mut lower = f64::NEG_INFINITY;
        for (&bound, &c) in bounds.iter().zip(counts.iter()) {
            cumulative = cumulative.saturating_add(c);
            if bound.is_finite() {
                self.emit_bucket(&names.bucket, le, bound, t, cumulative, stale, temporality);
                self.attach_exemplars(lower, bound);
                lower = bound;
            }
        }
        self.emit_bucket(
            &names.bucket,
            le,
            f64::INFINITY,
            t,
            count,
            stale,
            temporality,
        );
        self.attach_exemplars(lower, f64::INFINITY);
        self.exemplars.clear();
        Ok(())
    }

    pub(super) fn exp_histogram_point(
        &mut self,
        p: &[u8],
        base: usize,
        bufs: &mut PointBufs,
        temporality: Temporality,
    ) -> Result<(), DecodeError> {
        let (mut t_ns, mut count, mut sum, mut flags) = (0, 0, None, 0);
        let (mut scale, mut zero_count, mut zero_threshold) = (0i32, 0u64, 0f64);
        let (mut pos_offset, mut neg_offset) = (0i32, 0i32);
        bufs.counts.clear();
        bufs.negative.clear();
        let mut r = Reader::nested(p, base);
        while let Some((num, v, at)) = r.next_field()? {
            match (num, v) {
                (exp_point::TIME_UNIX_NANO, Value::Fixed64(t)) => t_ns = t,
                (exp_point::START_TIME_UNIX_NANO, Value::Fixed64(st)) => {
                    self.start_ms = (st / 1_000_000) as i64
                }
                (exp_point::COUNT, Value::Fixed64(c)) => count = c,
                (exp_point::SUM, Value::Fixed64(b)) => sum = Some(f64::from_bits(b)),
                (exp_point::SCALE, Value::Varint(z)) => scale = zigzag32(z),
                (exp_point::ZERO_COUNT, Value::Fixed64(z)) => zero_count = z,
                (exp_point::POSITIVE, Value::Bytes(b)) => {
                    bufs.counts.clear();
                    pos_offset = buckets(b, payload_at(at, b), &mut bufs.counts)?;
                }
                (exp_point::NEGATIVE, Value::Bytes(b)) => {
                    bufs.negative.clear();
                    neg_offset = buckets(b, payload_at(at, b), &mut bufs.negative)?;
                }
                (exp_point::FLAGS, Value::Varint(f)) => flags = f,
                (exp_point::ZERO_THRESHOLD, Value::Fixed64(b)) => {
                    zero_threshold = f64::from_bits(b)
                }
                _ => {}
            }
        }
        if !self.otlp.opts.exponential_as_classic && temporality == Temporality::Cumulative {
            let stale = Staleness::of(flags);
            let names = &bufs.names;
            let invalid = (scale < -4).then_some({
                || format!("cannot convert exponential histogram {:?} to a native histogram: scale must be >= -4, was {scale}", names.base)
            });
            let Some(t) = self.begin_point(
                p,
                base,
                exp_point::ATTRIBUTES,
                t_ns,
                &names.base,
                1,
                invalid,
            )?
            else {
                return Ok(());
            };
            let h = native_from_exponential(NativeParts {
                scale,
                zero_count,
                count,
                sum,
                stale,
                positive: (pos_offset, &bufs.counts),
                negative: (neg_offset, &bufs.negative),
            });
            let name = bufs.names.base.clone();
            match h.validate() {
                Ok(()) => self.emit_histogram(&name, t, crate::histogram::HistSample::Int(h)),
                Err(e) => self.reject(Reason::InvalidDataPoint, 1, || {
                    format!("exponential histogram {name:?} does not make a valid native histogram: {e}")
                }),
            }
            return Ok(());
        }
        let n = bufs.counts.len() + bufs.negative.len() + 1;
        let samples = n as u64 + 2 + u64::from(sum.is_some());
        let PointBufs {
            names,
            counts: positive,
            negative,
            le,
            ..
        } = bufs;
        let invalid = (n > MAX_BUCKETS || !SCALES.contains(&scale)).then_some({
            || format!(
                "a data point of exponential histogram {:?} has scale {scale} and {n} buckets; Sluice takes scales {}..={} and at most {MAX_BUCKETS} buckets",
                names.base, SCALES.start(), SCALES.end()
            )
        });
        let Some(t) = self.begin_point(
            p,
            base,
            exp_point::ATTRIBUTES,
            t_ns,
            &names.base,
            samples,
            invalid,
        )?
        else {
            return Ok(());
        };
        let stale = Staleness::of(flags);
        self.emit_sum_count(names, t, sum, count, stale, temporality);
        // Lowest values first: negative buckets from the largest index
        // (bucket i holds -base^(i+1) <= v < -base^i, so its `le` is -base^i),
        // then the zero bucket, then positive bucket i, which holds
        // base^i < v <= base^(i+1).
        let mut cumulative = 0u64;
        for (i, &c) in negative.iter().enumerate().rev() {
            cumulative = cumulative.saturating_add(c);
            let bound = -exp_bound(i64::from(neg_offset) + i as i64, scale);
            self.emit_bucket(&names.bucket, le, bound, t, cumulative, stale, temporality);
        }
        cumulative = cumulative.saturating_add(zero_count);
        let zero = zero_threshold.max(0.0);
        self.emit_bucket(&names.bucket, le, zero, t, cumulative, stale, temporality);
        for (i, &c) in positive.iter().enumerate() {
            cumulative = cumulative.saturating_add(c);
            let bound = exp_bound(i64::from(pos_offset) + i as i64 + 1, scale);
            if bound.is_finite() {
                self.emit_bucket(&names.bucket, le, bound, t, cumulative, stale, temporality);
            }
        }
        self.emit_bucket(
            &names.bucket,
            le,
            f64::INFINITY,
            t,
            count,
            stale,
            temporality,
        );
        Ok(())
    }

    pub(super) fn summary_point(
        &mut self,
        p: &[u8],
        base: usize,
        bufs: &mut PointBufs,
    ) -> Result<(), DecodeError> {
        let (mut t_ns, mut count, mut sum, mut flags) = (0, 0, 0.0, 0);
        bufs.quantiles.clear();
        let mut r = Reader::nested(p, base);
        while let Some((num, v, at)) = r.next_field()? {
            match (num, v) {
                (summary_point::START_TIME_UNIX_NANO, Value::Fixed64(st)) => {
                    self.start_ms = (st / 1_000_000) as i64
                }
                (summary_point::TIME_UNIX_NANO, Value::Fixed64(t)) => t_ns = t,
                (summary_point::COUNT, Value::Fixed64(c)) => count = c,
                (summary_point::SUM, Value::Fixed64(b)) => sum = f64::from_bits(b),
                (summary_point::QUANTILE_VALUES, Value::Bytes(b)) => {
                    let (mut q, mut qv) = (0.0, 0.0);
                    let mut r = Reader::nested(b, payload_at(at, b));
                    while let Some((num, v, _)) = r.next_field()? {
                        match (num, v) {
                            (quantile::QUANTILE, Value::Fixed64(x)) => q = f64::from_bits(x),
                            (quantile::VALUE, Value::Fixed64(x)) => qv = f64::from_bits(x),
                            _ => {}
                        }
                    }
                    push_capped(&mut bufs.quantiles, [(q, qv)]);
                }
                (summary_point::FLAGS, Value::Varint(f)) => flags = f,
                _ => {}
            }
        }
        let samples = bufs.quantiles.len() as u64 + 2;
        let PointBufs {
            names,
            quantiles,
            le,
            ..
        } = bufs;
        let invalid = (quantiles.len() > MAX_BUCKETS).then_some({
            || {
                format!(
                    "a data point of summary {:?} has more than {MAX_BUCKETS} quantiles",
                    names.base
                )
            }
        });
        let Some(t) = self.begin_point(
            p,
            base,
            summary_point::ATTRIBUTES,
            t_ns,
            &names.base,
            samples,
            invalid,
        )?
        else {
            return Ok(());
        };
        let stale = Staleness::of(flags);
        self.emit_sum_count(names, t, Some(sum), count, stale, Temporality::Cumulative);
        for &(q, v) in quantiles.iter() {
            push_float(le, q);
            let v = stale.value(v);
            self.emit(
                Emitted::DataPoint,
                &names.base,
                Some(("quantile", le)),
                t,
                v,
                Temporality::Cumulative,
            );
        }
        Ok(())
    }
}

pub(super) fn zigzag32(v: u64) -> i32 {
    let v = v as u32;
    ((v >> 1) as i32) ^ -((v & 1) as i32)
}

/// The little-endian 8-byte values of a packed run (whole, after the check).
pub(super) fn fixed64s(b: &[u8]) -> impl Iterator<Item = u64> + '_ {
    b.chunks_exact(8).map(|c| {
        let mut a = [0u8; 8];
        a.copy_from_slice(c);
        u64::from_le_bytes(a)
    })
}

/// An exponential histogram point's parts, for [`native_from_exponential`].
pub(super) struct NativeParts<'a> {
    scale: i32,
    zero_count: u64,
    count: u64,
    sum: Option<f64>,
    stale: Staleness,
    positive: (i32, &'a [u64]),
    negative: (i32, &'a [u64]),
}

/// Prometheus' OTLP receiver's zero threshold for converted histograms.
pub(super) const OTLP_ZERO_THRESHOLD: f64 = 1e-128;

/// The native histogram Prometheus' OTLP receiver makes of an exponential
/// histogram point (`exponentialToNativeHistogram`): the scale becomes the
/// schema, scales above 8 are merged down to 8, the hint is unknown, and a
/// point with no recorded value is the stale marker. The scale was checked
/// to be at least -4.
pub(super) fn native_from_exponential(p: NativeParts<'_>) -> crate::histogram::Histogram {
    let (schema, down) = if p.scale > 8 {
        (8, p.scale - 8)
    } else {
        (p.scale, 0)
    };
    let (positive_spans, positive_buckets) = buckets_layout(p.positive.1, p.positive.0, down);
    let (negative_spans, negative_buckets) = buckets_layout(p.negative.1, p.negative.0, down);
    let (sum, count) = if p.stale == Staleness::NoRecordedValue {
        (f64::from_bits(STALE_NAN), STALE_NAN)
    } else {
        (p.sum.unwrap_or(0.0), p.count)
    };
    crate::histogram::Histogram {
        hint: crate::histogram::CounterResetHint::Unknown,
        schema,
        zero_threshold: OTLP_ZERO_THRESHOLD,
        zero_count: p.zero_count,
        count,
        sum,
        positive_spans,
        negative_spans,
        positive_buckets,
        negative_buckets,
        custom_values: Vec::new(),
    }
}

/// OTLP bucket counts from `offset` as native spans and deltas, merging
/// `2^down` buckets into one (`convertBucketsLayout` with its offset
/// adjusted: OTLP bucket `i` covers `(base^i, base^(i+1)]`, native bucket
/// `i` covers `(base^(i-1), base^i]`). Kept as Prometheus writes it, gaps
/// of up to two buckets filled with empty ones and empty runs at the start
/// of a merge skipped the same way.
pub(super) fn buckets_layout(
    counts: &[u64],
    offset: i32,
    down: i32,
) -> (Vec<crate::histogram::Span>, Vec<i64>) {
    use crate::histogram::Span;
    if counts.is_empty() {
        return (Vec::new(), Vec::new());
    }
    // Go's int32 arithmetic wraps, and its shifts by the width or more
    // give 0 or -1; so do these (offsets and scales come off the wire).
    let shr = |i: i32| {
        if down >= 32 {
            i >> 31
        } else {
            i >> down.max(0)
        }
    };
    let idx = |i: i32| shr(i).wrapping_add(1);
    let mut spans = vec![Span {
        offset: idx(offset),
        length: 0,
    }];
    let mut deltas: Vec<i64> = Vec::with_capacity(counts.len());
    let mut prev = 0i64;
    let mut append = |spans: &mut Vec<Span>, deltas: &mut Vec<i64>, c: i64| {
        if let Some(s) = spans.last_mut() {
            s.length += 1;
        }
        deltas.push(c.wrapping_sub(prev));
        prev = c;
    };
    let mut bucket_idx = idx(offset);
    let mut count = 0i64;
    for (i, &c) in counts.iter().enumerate() {
        let next = idx((i as i32).wrapping_add(offset));
        if bucket_idx == next {
            count = count.wrapping_add(c as i64);
            continue;
        }
        if count == 0 {
            count = c as i64;
            continue;
        }
        let gap = next.wrapping_sub(bucket_idx).wrapping_sub(1);
        if gap > 2 {
            spans.push(Span {
                offset: gap,
                length: 0,
            });
        } else {
            for _ in 0..gap {
                append(&mut spans, &mut deltas, 0);
            }
        }
        append(&mut spans, &mut deltas, count);
        count = c as i64;
        bucket_idx = next;
    }
    let last = (counts.len() as i32).wrapping_add(offset).wrapping_sub(1);
    let gap = idx(last).wrapping_sub(bucket_idx);
    if gap > 2 {
        spans.push(Span {
            offset: gap,
            length: 0,
        });
    } else {
        for _ in 0..gap {
            append(&mut spans, &mut deltas, 0);
        }
    }
    append(&mut spans, &mut deltas, count);
    (spans, deltas)
}

/// Reads an exponential histogram `Buckets` into `out`; returns its offset.
pub(super) fn buckets(b: &[u8], base: usize, out: &mut Vec<u64>) -> Result<i32, DecodeError> {
    let mut offset = 0;
    let mut r = Reader::nested(b, base);
    while let Some((num, v, at)) = r.next_field()? {
        match (num, v) {
            (buckets::OFFSET, Value::Varint(o)) => offset = zigzag32(o),
            (buckets::BUCKET_COUNTS, Value::Varint(c)) => push_capped(out, [c]),
            (buckets::BUCKET_COUNTS, Value::Bytes(run)) => {
                for c in (PackedVarints { buf: run }) {
                    push_capped(out, [c.map_err(|what| DecodeError { what, offset: at })?]);
                }
            }
            _ => {}
        }
    }
    Ok(offset)
}

/// Appends `items` to `out` until it holds one more than [`MAX_BUCKETS`]:
/// enough to reject the point, and no more memory than that.
pub(super) fn push_capped<T>(out: &mut Vec<T>, items: impl IntoIterator<Item = T>) {
    let room = (MAX_BUCKETS + 1).saturating_sub(out.len());
    out.extend(items.into_iter().take(room));
}
