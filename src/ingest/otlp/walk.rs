//! The walk over a request's bytes: resources (their identity, promoted
//! attributes and `target_info`), metrics (names, metadata, temporality),
//! each data point's labels and time, and the one place a sample is stored
//! ([`Walk::emit`]) through the ingest pipeline.

use super::*;
use crate::protocol::otlp::field::*;

/// The offset in the request where the payload `b` of a length-delimited
/// field found at `at` starts (past its length prefix).
pub(super) fn payload_at(at: usize, b: &[u8]) -> usize {
    at + len_prefix(b.len())
}

pub(super) fn utf8(b: &[u8]) -> &str {
    std::str::from_utf8(b).unwrap_or("")
}

/// Merges sorted labels with sorted `extras`; an extra replaces a label of
/// the same name.
pub(super) fn merge<'a>(
    labels: impl Iterator<Item = (&'a str, &'a str)>,
    extras: &'a [(&'a str, &'a str)],
) -> impl Iterator<Item = (&'a str, &'a str)> {
    let mut labels = labels.peekable();
    let mut extras = extras.iter().copied().peekable();
    std::iter::from_fn(move || match (labels.peek(), extras.peek()) {
        (Some(l), Some(e)) => {
            if e.0 < l.0 {
                extras.next()
            } else if e.0 == l.0 {
                labels.next();
                extras.next()
            } else {
                labels.next()
            }
        }
        (Some(_), None) => labels.next(),
        (None, _) => extras.next(),
    })
}

impl Walk<'_> {
    pub(super) fn request(&mut self, body: &[u8]) -> Result<(), DecodeError> {
        let mut r = Reader::new(body);
        while let Some((num, v, at)) = r.next_field()? {
            if let (request::RESOURCE_METRICS, Value::Bytes(rm)) = (num, v) {
                self.resource_metrics(rm, payload_at(at, rm))?;
            }
        }
        Ok(())
    }

    pub(super) fn resource_metrics(&mut self, rm: &[u8], base: usize) -> Result<(), DecodeError> {
        let mut resource = None;
        let mut r = Reader::nested(rm, base);
        while let Some((num, v, at)) = r.next_field()? {
            if let (resource_metrics::RESOURCE, Value::Bytes(b)) = (num, v) {
                resource = Some((b, payload_at(at, b)));
            }
        }
        self.resource(resource)?;
        self.t_range = (i64::MAX, i64::MIN);
        let mut r = Reader::nested(rm, base);
        while let Some((num, v, at)) = r.next_field()? {
            let (resource_metrics::SCOPE_METRICS, Value::Bytes(sm)) = (num, v) else {
                continue;
            };
            let mut r = Reader::nested(sm, payload_at(at, sm));
            while let Some((num, v, at)) = r.next_field()? {
                if let (scope_metrics::METRICS, Value::Bytes(m)) = (num, v) {
                    self.metric(m, payload_at(at, m))?;
                }
            }
        }
        self.target_info();
        Ok(())
    }

    /// Fills the identity (`job`, `instance`), promoted and `target_info`
    /// label sets from a resource.
    pub(super) fn resource(&mut self, resource: Option<(&[u8], usize)>) -> Result<(), DecodeError> {
        let scratch = &mut *self.scratch;
        scratch.identity.clear();
        scratch.promoted.clear();
        scratch.target.clear();
        let (mut name, mut namespace, mut instance) = (None, None, None);
        scratch.text.clear();
        if let Some((res, base)) = resource {
            let mut r = Reader::nested(res, base);
            while let Some((num, v, at)) = r.next_field()? {
                let (resource::ATTRIBUTES, Value::Bytes(kv)) = (num, v) else {
                    continue;
                };
                let (key, value) = split_key_value(kv, payload_at(at, kv))?;
                let Ok(key) = std::str::from_utf8(key) else {
                    self.report
                        .warnings
                        .push("a resource attribute key is not valid UTF-8; it was ignored".into());
                    continue;
                };
                if self
                    .otlp
                    .opts
                    .promote_resource_attributes
                    .iter()
                    .any(|p| p == key)
                {
                    let _ = scratch
                        .promoted
                        .push_attribute(key, value, Source::Attribute);
                }
                let slot = match key {
                    "service.name" => &mut name,
                    "service.namespace" => &mut namespace,
                    "service.instance.id" => &mut instance,
                    _ => {
                        if scratch
                            .target
                            .push_attribute(key, value, Source::Attribute)
                            .is_err()
                            && self.report.warnings.len() < MAX_PROBLEMS
                        {
                            self.report.warnings.push(format!(
                                "resource attribute {key:?} cannot be a label; it was left out of target_info"
                            ));
                        }
                        continue;
                    }
                };
                let start = scratch.text.len();
                if let Some((vb, vat)) = value {
                    if labels::any_value_string(vb, vat, &mut scratch.text, 0).is_err() {
                        scratch.text.truncate(start);
                    }
                }
                *slot = Some((start, scratch.text.len()));
            }
        }
        let get = |r: Option<(usize, usize)>| r.map(|(a, b)| &scratch.text[a..b]);
        match (get(namespace), get(name)) {
            (Some(ns), Some(n)) if !ns.is_empty() => {
                scratch
                    .identity
                    .push_parts("job", &[ns, "/", n], Source::Identity);
            }
            (_, Some(n)) => scratch.identity.push("job", n, Source::Identity),
            _ => {}
        }
        if let Some(inst) = get(instance) {
            scratch.identity.push("instance", inst, Source::Identity);
        }
        scratch.identity.resolve();
        scratch.promoted.resolve();
        scratch
            .target
            .extend_from(&scratch.identity, Source::Identity);
        scratch.target.resolve();
        Ok(())
    }

    pub(super) fn target_info(&mut self) {
        let (min_t, max_t) = self.t_range;
        let scratch = &*self.scratch;
        let has_attrs = scratch
            .target
            .iter()
            .any(|(n, _)| n != "job" && n != "instance");
        if min_t > max_t || !has_attrs || scratch.identity.is_empty() {
            return;
        }
        self.app
            .add_metadata("target_info", "gauge", "Target metadata", "");
        let step = self.otlp.opts.target_info_interval_ms.max(1);
        // At most 100 samples per resource, however wide the range.
        let mut t = min_t.max(max_t.saturating_sub(step.saturating_mul(100)));
        while t < max_t {
            self.emit(
                Emitted::TargetInfo,
                "target_info",
                None,
                t,
                1.0,
                Temporality::Cumulative,
            );
            t = t.saturating_add(step);
        }
        self.emit(
            Emitted::TargetInfo,
            "target_info",
            None,
            max_t,
            1.0,
            Temporality::Cumulative,
        );
    }

    pub(super) fn metric(&mut self, m: &[u8], base: usize) -> Result<(), DecodeError> {
        let (mut name, mut desc, mut unit, mut data) = (&[][..], &[][..], &[][..], None);
        let mut r = Reader::nested(m, base);
        while let Some((num, v, at)) = r.next_field()? {
            match (num, v) {
                (metric::NAME, Value::Bytes(b)) => name = b,
                (metric::DESCRIPTION, Value::Bytes(b)) => desc = b,
                (metric::UNIT, Value::Bytes(b)) => unit = b,
                (_, Value::Bytes(b)) if DataKind::from_field(num).is_some() => {
                    data = DataKind::from_field(num).map(|kind| (kind, b, payload_at(at, b)));
                }
                _ => {}
            }
        }
        let name_text = String::from_utf8_lossy(name);
        let Some((kind, data, dbase)) = data else {
            if self.report.warnings.len() < MAX_PROBLEMS {
                self.report.warnings.push(format!(
                    "metric {name_text:?} has no data (no gauge, sum, histogram, exponential histogram or summary)"
                ));
            }
            return Ok(());
        };
        let (mut temporality, mut monotonic, mut points) = (0, false, 0u64);
        let mut r = Reader::nested(data, dbase);
        while let Some((num, v, _)) = r.next_field()? {
            match (num, v) {
                (data::DATA_POINTS, Value::Bytes(_)) => points += 1,
                (data::AGGREGATION_TEMPORALITY, Value::Varint(t)) => temporality = t,
                (data::IS_MONOTONIC, Value::Varint(b)) => monotonic = b != 0,
                _ => {}
            }
        }
        if points == 0 {
            if self.report.warnings.len() < MAX_PROBLEMS {
                self.report
                    .warnings
                    .push(format!("metric {name_text:?} has no data points"));
            }
            return Ok(());
        }
        let reject_all = |w: &mut Self, reason: Reason, detail: String| {
            w.report.points += points;
            w.report.rejected_points[reason.index()] += points;
            w.report.samples.reject(reason, points, || detail);
        };
        let Ok(name_str) = std::str::from_utf8(name) else {
            reject_all(
                self,
                Reason::Label(LabelError::InvalidUtf8),
                format!("metric name {name_text:?} is not valid UTF-8"),
            );
            return Ok(());
        };
        let (name_kind, type_name) = match kind {
            DataKind::Gauge => (NameKind::Gauge, "gauge"),
            DataKind::Sum if monotonic => (NameKind::Counter, "counter"),
            DataKind::Sum => (NameKind::Gauge, "gauge"),
            DataKind::Summary => (NameKind::Other, "summary"),
            DataKind::Histogram | DataKind::ExponentialHistogram => (NameKind::Other, "histogram"),
        };
        let mut stored_as = Temporality::Cumulative;
        let has_temporality = matches!(
            kind,
            DataKind::Sum | DataKind::Histogram | DataKind::ExponentialHistogram
        );
        if has_temporality && temporality != temporality::CUMULATIVE {
            if temporality == temporality::DELTA && self.otlp.opts.delta_to_cumulative {
                stored_as = Temporality::Delta;
            } else {
                let why = if temporality == temporality::DELTA {
                    "delta temporality, which Sluice stores only when run with --otlp-delta-to-cumulative"
                } else {
                    "unspecified aggregation temporality"
                };
                reject_all(
                    self,
                    Reason::UnsupportedTemporality,
                    format!(
                        "invalid temporality and type combination for metric {name_str:?}: {why}"
                    ),
                );
                return Ok(());
            }
        }
        let unit_str = utf8(unit);
        let mut bufs = std::mem::take(&mut self.scratch.bufs);
        match self
            .scratch
            .names
            .get(name_str, unit_str, name_kind, self.otlp.opts.translation)
        {
            Ok((prom_name, unit_word)) => {
                self.app
                    .add_metadata(prom_name, type_name, utf8(desc), unit_word);
                bufs.names.set(prom_name);
            }
            Err(e) => {
                let detail = e.to_string();
                self.scratch.bufs = bufs;
                reject_all(self, Reason::Label(LabelError::InvalidMetricName), detail);
                return Ok(());
            }
        }
        let mut r = Reader::nested(data, dbase);
        let mut result = Ok(());
        while let Some((num, v, at)) = r.next_field()? {
            let (data::DATA_POINTS, Value::Bytes(p)) = (num, v) else {
                continue;
            };
            let base = payload_at(at, p);
            self.report.points += 1;
            self.point_reason = None;
            self.start_ms = 0;
            result = match kind {
                DataKind::Gauge | DataKind::Sum => self.number_point(p, base, &bufs, stored_as),
                DataKind::Histogram => self.histogram_point(p, base, &mut bufs, stored_as),
                DataKind::ExponentialHistogram => {
                    self.exp_histogram_point(p, base, &mut bufs, stored_as)
                }
                DataKind::Summary => self.summary_point(p, base, &mut bufs),
            };
            if let Some(reason) = self.point_reason.take() {
                self.report.rejected_points[reason.index()] += 1;
            }
            if result.is_err() {
                break;
            }
        }
        self.scratch.bufs = bufs;
        result
    }

    /// Rejects the current point (or part of it): `samples` samples for `reason`.
    pub(super) fn reject(&mut self, reason: Reason, samples: u64, detail: impl FnOnce() -> String) {
        self.point_reason.get_or_insert(reason);
        self.report.samples.reject(reason, samples, detail);
    }

    /// Builds the point's labels from attribute field `field`, or rejects
    /// its `samples` samples and returns `false`.
    pub(super) fn point_labels(
        &mut self,
        p: &[u8],
        base: usize,
        field: u32,
        name: &str,
        samples: u64,
    ) -> Result<bool, DecodeError> {
        let scratch = &mut *self.scratch;
        scratch.point.clear();
        let mut r = Reader::nested(p, base);
        while let Some((num, v, at)) = r.next_field()? {
            let Value::Bytes(kv) = v else { continue };
            if num != field {
                continue;
            }
            match scratch
                .point
                .push_key_value(kv, payload_at(at, kv), Source::Attribute)
            {
                Ok(()) => {}
                Err(AttrError::Decode(e)) => return Err(e),
                Err(AttrError::Label(e)) => {
                    let key = split_key_value(kv, 0)
                        .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
                        .unwrap_or_default();
                    self.reject(Reason::Label(e), samples, || {
                        format!(
                            "{} in attribute {key:?} of a data point of metric {name:?}",
                            crate::ingest::label_problem(e, self.limits)
                        )
                    });
                    return Ok(false);
                }
            }
        }
        scratch
            .point
            .extend_from(&scratch.promoted, Source::Promoted);
        scratch
            .point
            .extend_from(&scratch.identity, Source::Identity);
        scratch.point.resolve();
        Ok(true)
    }

    /// Checks a point's time; records it for `target_info`.
    pub(super) fn point_time(&mut self, t_ns: u64, name: &str, samples: u64) -> Option<i64> {
        if t_ns == 0 {
            self.reject(Reason::InvalidDataPoint, samples, || {
                format!("a data point of metric {name:?} has no time_unix_nano")
            });
            return None;
        }
        let t = (t_ns / 1_000_000) as i64;
        self.t_range = (self.t_range.0.min(t), self.t_range.1.max(t));
        Some(t)
    }

    /// What every point does first: check its time, refuse it if
    /// `invalid` says why, build its labels from attribute field `field`.
    /// Returns the time in milliseconds, or `None` when the point's
    /// `samples` samples were rejected.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn begin_point(
        &mut self,
        p: &[u8],
        base: usize,
        field: u32,
        t_ns: u64,
        name: &str,
        samples: u64,
        invalid: Option<impl FnOnce() -> String>,
    ) -> Result<Option<i64>, DecodeError> {
        let Some(t) = self.point_time(t_ns, name, samples) else {
            return Ok(None);
        };
        if let Some(why) = invalid {
            self.reject(Reason::InvalidDataPoint, samples, why);
            return Ok(None);
        }
        Ok(self
            .point_labels(p, base, field, name, samples)?
            .then_some(t))
    }

    /// Stores one native histogram of the current point.
    pub(super) fn emit_histogram(&mut self, name: &str, t: i64, h: crate::histogram::HistSample) {
        self.last_stored = false;
        let scratch = &mut *self.scratch;
        let extras = [("__name__", name)];
        scratch.canonical.clear();
        scratch
            .point
            .canonical_with(&extras, &mut scratch.canonical);
        let raw: Vec<(&[u8], &[u8])> = merge(scratch.point.iter(), &extras)
            .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
            .collect();
        let relabelled = match self.door.relabel.is_empty() {
            true => None,
            false => match self.door.relabel.apply(&raw) {
                Ok(Some(labels)) => Some(labels),
                Ok(None) => {
                    self.report.samples.drop_samples(Dropped::Relabel, 1);
                    return;
                }
                Err(e) => {
                    let why = crate::ingest::label_problem(e, self.limits);
                    self.refuse_sample(Reason::Label(e), &why, name);
                    return;
                }
            },
        };
        let (sent, canonical) = match &relabelled {
            None => (
                raw,
                pipeline::Canonical::Given(scratch.canonical.as_slice()),
            ),
            Some(labels) => (
                crate::ingest::relabel::as_raw(labels),
                pipeline::Canonical::Build(&mut scratch.relabelled),
            ),
        };
        let mut valid = Vec::with_capacity(sent.len());
        let outcome = pipeline::append_histograms(
            &mut self.app,
            &sent,
            self.limits,
            &[(t, h)],
            &mut self.counts,
            &mut valid,
            canonical,
        );
        if let Err((reason, why)) = outcome {
            self.refuse_sample(reason, &why, name);
            return;
        }
        self.last_stored = true;
        if self.app.keeps_starts() {
            let stored = match relabelled {
                None => &scratch.canonical,
                Some(_) => &scratch.relabelled,
            };
            self.app
                .note_starts_of(stored, std::iter::once((t, self.start_ms)));
        }
    }

    /// Counts a sample of the current point as not stored for `reason`
    /// (`why`: the rule its series broke), naming the series.
    pub(super) fn refuse_sample(&mut self, reason: Reason, why: &str, name: &str) {
        self.point_reason.get_or_insert(reason);
        self.report
            .samples
            .reject(reason, 1, || format!("{why}; series {name:?} not stored"));
    }

    /// Appends one sample to the series made of the labels `emitted` takes, `__name__`
    /// = `name` and `extra`, which win over labels of the same name.
    pub(super) fn emit(
        &mut self,
        emitted: Emitted,
        name: &str,
        extra: Option<(&str, &str)>,
        t: i64,
        value: f64,
        temporality: Temporality,
    ) {
        self.last_stored = false;
        let scratch = &mut *self.scratch;
        let labels = match emitted {
            Emitted::DataPoint => &scratch.point,
            Emitted::TargetInfo => &scratch.target,
        };
        let extras = [("__name__", name), extra.unwrap_or(("", ""))];
        let extras = &extras[..1 + usize::from(extra.is_some())];
        scratch.canonical.clear();
        labels.canonical_with(extras, &mut scratch.canonical);
        let canonical = scratch.canonical.as_slice();
        let pending = if temporality == Temporality::Delta {
            match self
                .otlp
                .delta
                .next(canonical, t, value, self.app.min_valid_ms())
            {
                Ok(next) => Some(next),
                Err(e) => {
                    let reason = match e {
                        DeltaError::OutOfOrder => Reason::Sample(SampleError::OutOfOrder),
                        DeltaError::Full => Reason::SeriesLimit,
                    };
                    self.point_reason.get_or_insert(reason);
                    self.report.samples.reject(reason, 1, || match e {
                        DeltaError::OutOfOrder => format!(
                            "delta sample at {t} for {name:?} is not newer than the last one; it was not added to the running total"
                        ),
                        DeltaError::Full => format!(
                            "running totals for delta series are full; new series {name:?} not created"
                        ),
                    });
                    return;
                }
            }
        } else {
            None
        };
        let value = pending.map_or(value, |n| n.value);
        let counts = match emitted {
            Emitted::DataPoint => &mut self.counts,
            Emitted::TargetInfo => &mut self.target_counts,
        };
        counts.first = None;
        let sample = std::iter::once((t, value));
        let raw = || -> Vec<(&[u8], &[u8])> {
            merge(labels.iter(), extras)
                .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
                .collect()
        };
        // With relabel rules, the sent labels' key finds the series they
        // become (or that they are dropped); the exemplars of the point
        // go to that series.
        let mut kept = Ok(true);
        let relabel = self.door.relabel;
        if relabel.is_empty() {
            if !self.app.append_existing(canonical, sample.clone(), counts) {
                kept = pipeline::create_series(
                    &mut self.app,
                    &raw(),
                    canonical,
                    self.limits,
                    sample,
                    counts,
                )
                .map(|()| true);
            }
        } else {
            let key = relabel.key_of_bytes(canonical);
            let stored = &mut scratch.relabelled;
            kept = match self.app.lookup_ref(key) {
                Some(r) if r.is_not_stored() => Ok(false),
                Some(r) if self.app.append_ref(r, sample.clone(), counts) => {
                    // The series is there, so its labels pass; if the
                    // limits changed since, its exemplars have no key.
                    if !self.exemplars.is_empty()
                        && !pipeline::relabelled_canonical(&raw(), &self.door, stored)
                    {
                        self.exemplars.clear();
                    }
                    Ok(true)
                }
                _ => pipeline::create_relabelled(
                    &mut self.app,
                    &raw(),
                    &self.door,
                    sample,
                    counts,
                    stored,
                )
                .map(|made| {
                    self.learned
                        .push((key, made.unwrap_or(crate::storage::SeriesRef::NOT_STORED)));
                    made.is_some()
                }),
            };
        }
        match kept {
            Ok(true) => {}
            Ok(false) => {
                if emitted == Emitted::DataPoint {
                    self.report.samples.drop_samples(Dropped::Relabel, 1);
                }
                return;
            }
            Err((reason, why)) => {
                if emitted == Emitted::DataPoint {
                    self.refuse_sample(reason, &why, name);
                }
                return;
            }
        }
        self.last_stored = true;
        // The point's start time, kept with the sample (`st-storage`); a
        // delta turned into a running total has the total's, not its own.
        // A point without one (0) ends what an earlier one said.
        if emitted == Emitted::DataPoint && pending.is_none() && self.app.keeps_starts() {
            let start = std::iter::once((t, self.start_ms));
            if relabel.is_empty() {
                self.app.note_starts_of(canonical, start);
            } else if pipeline::relabelled_canonical(&raw(), &self.door, &mut scratch.relabelled) {
                self.app.note_starts_of(&scratch.relabelled, start);
            }
        }
        if let (Some(next), None) = (pending, counts.first) {
            // The head stored the point: the running total moves.
            self.otlp.delta.commit(canonical, t, next);
        }
        if let (Emitted::DataPoint, Some((e, t))) = (emitted, counts.first) {
            self.point_reason.get_or_insert(Reason::Sample(e));
            if self.report.samples.problems.len() < MAX_PROBLEMS {
                let max_t = self.app.max_t();
                self.report.samples.problems.push(format!(
                    "{} at timestamp {t} for series {name:?}",
                    crate::ingest::sample_problem(e, t, max_t)
                ));
            }
        }
    }
}
