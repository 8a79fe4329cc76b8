//! Exemplars of a data point: read from the point, labelled as
//! Prometheus' translator labels them, and stored with the series the last
//! sample of their bucket went to.

use super::walk::payload_at;
use super::*;
use crate::protocol::otlp::field::*;

impl Walk<'_> {
    /// Stores the current point's exemplars whose value is in `(lower,
    /// upper]` with the series the last `emit` wrote (if it was stored),
    /// and drops them from the point's list.
    pub(super) fn attach_exemplars(&mut self, lower: f64, upper: f64) {
        if self.exemplars.is_empty() {
            return;
        }
        let stored = self.last_stored;
        let series = match self.door.relabel.is_empty() {
            true => self.scratch.canonical.as_slice(),
            false => self.scratch.relabelled.as_slice(),
        };
        let report = &mut self.report.samples;
        let app = &mut self.app;
        self.exemplars.retain(|e| {
            let here = (e.value > lower && e.value <= upper)
                || (upper == f64::INFINITY && e.value.is_nan());
            if !here {
                return true;
            }
            if stored {
                report.exemplars += 1;
                let labels: Vec<(&[u8], &[u8])> = e
                    .labels
                    .iter()
                    .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
                    .collect();
                pipeline::store_exemplar(app, report, series, &labels, e.value, e.t);
            }
            false
        });
    }
}

/// Reads the exemplars (field `field`) of the data point `p` into `out`,
/// which is cleared first.
pub(super) fn read_exemplars(
    p: &[u8],
    base: usize,
    field: u32,
    out: &mut Vec<PointExemplar>,
) -> Result<(), DecodeError> {
    out.clear();
    let mut r = Reader::nested(p, base);
    while let Some((num, v, at)) = r.next_field()? {
        let (true, Value::Bytes(e)) = (num == field, v) else {
            continue;
        };
        let mut ex = PointExemplar {
            labels: Vec::new(),
            value: 0.0,
            t: 0,
        };
        let (mut trace, mut span) = (None, None);
        let mut er = Reader::nested(e, payload_at(at, e));
        while let Some((num, v, at)) = er.next_field()? {
            match (num, v) {
                (exemplar::TIME_UNIX_NANO, Value::Fixed64(t)) => ex.t = (t / 1_000_000) as i64,
                (exemplar::AS_DOUBLE, Value::Fixed64(b)) => ex.value = f64::from_bits(b),
                (exemplar::AS_INT, Value::Fixed64(i)) => ex.value = i as i64 as f64,
                (exemplar::SPAN_ID, Value::Bytes(b)) if !b.is_empty() => span = Some(hex(b)),
                (exemplar::TRACE_ID, Value::Bytes(b)) if !b.is_empty() => trace = Some(hex(b)),
                (exemplar::FILTERED_ATTRIBUTES, Value::Bytes(kv)) => {
                    let (key, value) = split_key_value(kv, payload_at(at, kv))?;
                    let mut text = String::new();
                    if let (Ok(key), Some((vb, vat))) = (std::str::from_utf8(key), value) {
                        if labels::any_value_string(vb, vat, &mut text, 0).is_ok() {
                            ex.labels.push((key.to_owned(), text));
                        }
                    }
                }
                _ => {}
            }
        }
        if let Some(span) = span {
            ex.labels.push(("span_id".to_owned(), span));
        }
        if let Some(trace) = trace {
            ex.labels.push(("trace_id".to_owned(), trace));
        }
        out.push(ex);
    }
    Ok(())
}

/// Lowercase hex, as trace and span ids are written.
pub(super) fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for byte in b {
        let _ = write!(s, "{byte:02x}");
    }
    s
}
