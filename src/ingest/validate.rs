//! Label rules for new series: UTF-8 names and values (or, with
//! `legacy` name validation, the remote-write 1.0 spec's name grammar), no
//! duplicates, and the configured size limits.
//!
//! Unsorted labels are sorted and accepted, as Prometheus' own receiver does
//! (`labelProtosToLabels` sorts); the caller counts how often it happens.
//! Labels with an empty value are dropped: in Prometheus a label with an
//! empty value is the same as no label at all.

/// Limits on one series' labels.
#[derive(Debug, Clone, Copy)]
pub struct LabelLimits {
    /// Most labels per series, `__name__` included.
    pub max_labels: usize,
    /// Longest label name in bytes.
    pub max_name_len: usize,
    /// Longest label value in bytes.
    pub max_value_len: usize,
    /// Which names are accepted.
    pub names: NameValidation,
}

impl Default for LabelLimits {
    fn default() -> Self {
        Self {
            max_labels: 64,
            max_name_len: 1024,
            max_value_len: 4096,
            names: NameValidation::Utf8,
        }
    }
}

/// Why a series' labels were rejected. Values, counted per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelError {
    /// No `__name__` label.
    MissingMetricName,
    /// `__name__` is not a valid name (see [`NameValidation`]).
    InvalidMetricName,
    /// A label name is not valid (see [`NameValidation`]).
    InvalidLabelName,
    /// A name or value is not valid UTF-8.
    InvalidUtf8,
    /// The same label name twice.
    DuplicateLabelName,
    /// More labels than allowed.
    TooManyLabels,
    /// A label name longer than allowed.
    LabelNameTooLong,
    /// A label value longer than allowed.
    LabelValueTooLong,
}

impl LabelError {
    /// Every variant, for iterating counters.
    pub const ALL: [LabelError; 8] = [
        Self::MissingMetricName,
        Self::InvalidMetricName,
        Self::InvalidLabelName,
        Self::InvalidUtf8,
        Self::DuplicateLabelName,
        Self::TooManyLabels,
        Self::LabelNameTooLong,
        Self::LabelValueTooLong,
    ];

    /// The reason label used in metrics and messages.
    pub fn reason(self) -> &'static str {
        match self {
            Self::MissingMetricName => "missing_metric_name",
            Self::InvalidMetricName => "invalid_metric_name",
            Self::InvalidLabelName => "invalid_label_name",
            Self::InvalidUtf8 => "invalid_utf8",
            Self::DuplicateLabelName => "duplicate_label_name",
            Self::TooManyLabels => "too_many_labels",
            Self::LabelNameTooLong => "label_name_too_long",
            Self::LabelValueTooLong => "label_value_too_long",
        }
    }
}

pub use crate::storage::labels::{is_valid_label_name, is_valid_metric_name, NameValidation};

/// Checks raw `(name, value)` pairs and turns them into sorted string pairs
/// in `out`. Returns whether the input had to be sorted.
pub fn validate<'a>(
    raw: &[(&'a [u8], &'a [u8])],
    limits: &LabelLimits,
    out: &mut Vec<(&'a str, &'a str)>,
) -> Result<bool, LabelError> {
    out.clear();
    for &(name, value) in raw {
        if value.is_empty() {
            continue;
        }
        if name.len() > limits.max_name_len {
            return Err(LabelError::LabelNameTooLong);
        }
        if value.len() > limits.max_value_len {
            return Err(LabelError::LabelValueTooLong);
        }
        let (Ok(n), Ok(v)) = (std::str::from_utf8(name), std::str::from_utf8(value)) else {
            return Err(LabelError::InvalidUtf8);
        };
        if !limits.names.label_name(name) {
            return Err(LabelError::InvalidLabelName);
        }
        if n == "__name__" && !limits.names.metric_name(value) {
            return Err(LabelError::InvalidMetricName);
        }
        out.push((n, v));
    }
    if out.len() > limits.max_labels {
        return Err(LabelError::TooManyLabels);
    }
    let sorted = out.windows(2).all(|w| w[0].0 < w[1].0);
    if !sorted {
        out.sort_unstable_by(|a, b| a.0.cmp(b.0));
        if out.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(LabelError::DuplicateLabelName);
        }
    }
    if out.binary_search_by(|l| l.0.cmp("__name__")).is_err() {
        return Err(LabelError::MissingMetricName);
    }
    Ok(!sorted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(pairs: &[(&str, &str)]) -> Result<(bool, Vec<(String, String)>), LabelError> {
        check_with(pairs, NameValidation::Legacy)
    }

    fn check_with(
        pairs: &[(&str, &str)],
        names: NameValidation,
    ) -> Result<(bool, Vec<(String, String)>), LabelError> {
        let raw: Vec<(&[u8], &[u8])> = pairs
            .iter()
            .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
            .collect();
        let mut out = Vec::new();
        let sorted = validate(
            &raw,
            &LabelLimits {
                max_labels: 3,
                max_name_len: 10,
                max_value_len: 10,
                names,
            },
            &mut out,
        )?;
        Ok((
            sorted,
            out.iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
        ))
    }

    #[test]
    fn valid_labels_pass_and_unsorted_ones_are_sorted() {
        let (resorted, l) = check(&[("__name__", "up"), ("job", "x")]).expect("valid");
        assert!(!resorted);
        assert_eq!(l.len(), 2);
        let (resorted, l) = check(&[("job", "x"), ("__name__", "a:b_c")]).expect("valid");
        assert!(resorted);
        assert_eq!(l[0].0, "__name__");
        // Empty values are dropped, not counted against the limit.
        let (_, l) = check(&[
            ("__name__", "up"),
            ("a", ""),
            ("b", ""),
            ("c", ""),
            ("d", "1"),
        ])
        .expect("valid");
        assert_eq!(l.len(), 2);
    }

    #[test]
    fn utf8_names_pass_unless_empty_or_not_utf8() {
        let utf8 = NameValidation::Utf8;
        let (_, l) = check_with(&[("__name__", "http.dur"), ("svc.name", "a")], utf8)
            .expect("UTF-8 names are valid");
        assert_eq!(l[0], ("__name__".into(), "http.dur".into()));
        assert!(check_with(&[("__name__", "1up"), ("a-b", "x")], utf8).is_ok());
        assert_eq!(
            check_with(&[("__name__", "up"), ("", "x")], utf8),
            Err(LabelError::InvalidLabelName)
        );
        let raw: [(&[u8], &[u8]); 2] = [(b"__name__", b"up"), (b"a\xff", b"x")];
        assert_eq!(
            validate(&raw, &LabelLimits::default(), &mut Vec::new()),
            Err(LabelError::InvalidUtf8)
        );
    }

    #[test]
    fn each_rule_has_its_reason() {
        assert_eq!(check(&[("job", "x")]), Err(LabelError::MissingMetricName));
        assert_eq!(
            check(&[("__name__", "1up")]),
            Err(LabelError::InvalidMetricName)
        );
        assert_eq!(
            check(&[("__name__", "up"), ("a-b", "x")]),
            Err(LabelError::InvalidLabelName)
        );
        assert_eq!(
            check(&[("__name__", "up"), ("", "x")]),
            Err(LabelError::InvalidLabelName)
        );
        assert_eq!(
            check(&[("__name__", "up"), ("job", "a"), ("job", "b")]),
            Err(LabelError::DuplicateLabelName)
        );
        assert_eq!(
            check(&[("job", "a"), ("__name__", "up"), ("job", "b")]),
            Err(LabelError::DuplicateLabelName)
        );
        assert_eq!(
            check(&[("__name__", "up"), ("a", "1"), ("b", "1"), ("c", "1")]),
            Err(LabelError::TooManyLabels)
        );
        assert_eq!(
            check(&[("__name__", "up"), ("abcdefghijk", "1")]),
            Err(LabelError::LabelNameTooLong)
        );
        assert_eq!(
            check(&[("__name__", "up"), ("a", "01234567890")]),
            Err(LabelError::LabelValueTooLong)
        );
        let raw: [(&[u8], &[u8]); 2] = [(b"__name__", b"up"), (b"a", b"\xff")];
        assert_eq!(
            validate(&raw, &LabelLimits::default(), &mut Vec::new()),
            Err(LabelError::InvalidUtf8)
        );
    }
}
