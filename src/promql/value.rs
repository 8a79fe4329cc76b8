//! Query values and their formatting as Prometheus writes them.

use std::fmt::Write as _;
use std::sync::Arc;

use crate::histogram::FloatHistogram;
use crate::storage::labels::Label;

/// Sorted labels of a result series; shared, so passing a series' labels
/// from step to step and node to node is a reference-count bump.
pub type Labels = Arc<[Label]>;

/// One element of an instant vector.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The series' labels.
    pub labels: Labels,
    /// The value (0 when the sample is a histogram).
    pub v: f64,
    /// The native histogram, when the sample is one.
    pub h: Option<Hist>,
    /// An operation that changes what the value means went over it, so its
    /// metric name goes at the end of the query. Only with delayed name
    /// removal does the name stay until then (see [`Ctx::unnamed`]).
    ///
    /// [`Ctx::unnamed`]: super::eval::Ctx::unnamed
    pub drop_name: bool,
}

/// A native histogram in a query's values; shared, as the stored sample
/// it was read from is passed along unchanged by most operators.
pub type Hist = Arc<FloatHistogram>;

impl Sample {
    /// A float sample.
    pub fn float(labels: Labels, v: f64) -> Self {
        Sample {
            labels,
            v,
            h: None,
            drop_name: false,
        }
    }

    /// A histogram sample.
    pub fn histogram(labels: Labels, h: Hist) -> Self {
        Sample {
            labels,
            v: 0.0,
            h: Some(h),
            drop_name: false,
        }
    }
}

/// One series of a range vector or matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The series' labels.
    pub labels: Labels,
    /// (timestamp ms, value) in time order.
    pub points: Vec<(i64, f64)>,
    /// (timestamp ms, histogram) in time order.
    pub histograms: Vec<(i64, Hist)>,
    /// As [`Sample::drop_name`]: its name goes at the end of the query.
    pub drop_name: bool,
}

impl Series {
    /// A series of floats.
    pub fn floats(labels: Labels, points: Vec<(i64, f64)>) -> Self {
        Series {
            labels,
            points,
            histograms: Vec::new(),
            drop_name: false,
        }
    }
}

/// A PromQL value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A number.
    Scalar(f64),
    /// A string literal.
    String(String),
    /// An instant vector.
    Vector(Vec<Sample>),
    /// A range vector (or a range query's result).
    Matrix(Vec<Series>),
}

impl Value {
    /// Prometheus' name for the value's type.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Scalar(_) => "scalar",
            Value::String(_) => "string",
            Value::Vector(_) => "vector",
            Value::Matrix(_) => "matrix",
        }
    }
}

/// Formats a float as Go's `strconv.FormatFloat(f, 'f' or 'e', -1, 64)`
/// does in Prometheus' JSON: `NaN`, `+Inf`, `-Inf`; the shortest digits that
/// round-trip; exponent form below 1e-6 and from 1e21 on.
pub fn format_float(f: f64, out: &mut String) {
    if f.is_nan() {
        out.push_str("NaN");
    } else if f.is_infinite() {
        out.push_str(if f > 0.0 { "+Inf" } else { "-Inf" });
    } else if f.fract() == 0.0 && f.abs() < 1e15 {
        // Whole numbers (counters, most gauges) skip the float formatter:
        // exact as an i64 below 2^53. Go writes negative zero as "-0".
        if f == 0.0 && f.is_sign_negative() {
            out.push_str("-0");
        } else {
            out.push_str(itoa::Buffer::new().format(f as i64));
        }
    } else if f != 0.0 && (f.abs() < 1e-6 || f.abs() >= 1e21) {
        // Rust gives `1.5e21` / `1e-7`; Go writes `1.5e+21` / `1e-07`.
        let s = format!("{f:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let (sign, digits) = match exp.strip_prefix('-') {
            Some(d) => ('-', d),
            None => ('+', exp),
        };
        let _ = write!(out, "{mantissa}e{sign}{digits:0>2}");
    } else {
        // Ryu finds the shortest digits as Go does, ties between two
        // nearest candidates to the even one (the standard formatter
        // rounds those up), and faster (a range answer writes one per
        // point); it writes an exponent below 1e-5 and from 1e16 on, and
        // `.0` after whole numbers, where Go writes neither.
        let mut buf = ryu::Buffer::new();
        let s = buf.format_finite(f);
        if s.contains('e') {
            let _ = write!(out, "{f}");
        } else {
            out.push_str(s.strip_suffix(".0").unwrap_or(s));
        }
    }
}

/// Formats a millisecond timestamp as Prometheus' JSON number: seconds with
/// up to three decimals, exactly (`1435781451.781`, `1435781451`, `1.050`).
pub fn format_timestamp(t: i64, out: &mut String) {
    let (sign, t) = if t < 0 {
        ("-", t.unsigned_abs())
    } else {
        ("", t as u64)
    };
    let (secs, ms) = (t / 1000, t % 1000);
    out.push_str(sign);
    out.push_str(itoa::Buffer::new().format(secs));
    if ms != 0 {
        let ms = ms as u32; // < 1000
        out.push('.');
        for d in [ms / 100, ms / 10 % 10, ms % 10] {
            out.push(char::from(b'0' + d as u8));
        }
    }
}

/// Whether `name` is one of the labels that describe the metric rather than
/// the series: `__name__`, and Prometheus 3's `__type__` and `__unit__`.
/// They go together: an operation that changes what the values mean drops
/// all three.
pub fn is_metadata_label(name: &str) -> bool {
    matches!(name, "__name__" | "__type__" | "__unit__")
}

/// The labels without `__name__`, `__type__` and `__unit__` (the same
/// allocation when there are none).
pub fn drop_name(labels: &Labels) -> Labels {
    if labels.iter().any(|l| is_metadata_label(&l.name)) {
        labels
            .iter()
            .filter(|l| !is_metadata_label(&l.name))
            .cloned()
            .collect()
    } else {
        Arc::clone(labels)
    }
}

/// Labels as Prometheus writes them in messages (Go's `Labels.String`):
/// `{__name__="up", job="a"}`, names that are not plain identifiers quoted.
pub fn labels_string(labels: &[Label]) -> String {
    let mut out = String::from("{");
    for (i, l) in labels.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let plain = l
            .name
            .chars()
            .enumerate()
            .all(|(k, c)| c == '_' || c.is_ascii_alphabetic() || (k > 0 && c.is_ascii_digit()));
        if plain && !l.name.is_empty() {
            out.push_str(&l.name);
        } else {
            out.push_str(&format!("{:?}", l.name));
        }
        out.push('=');
        out.push_str(&format!("{:?}", l.value));
    }
    out.push('}');
    out
}

/// `labels` with `name` set to `value` (removed when `value` is empty).
pub fn set_label(labels: &Labels, name: &str, value: String) -> Labels {
    let mut v: Vec<Label> = labels.iter().filter(|l| l.name != name).cloned().collect();
    if !value.is_empty() {
        v.push(Label {
            name: name.into(),
            value: value.into(),
        });
        v.sort();
    }
    v.into()
}

/// Whether a `by`/`on` list (Include) keeps label `name`, or a
/// `without`/`ignoring` list (Exclude, which always drops `__name__` too)
/// leaves it. `None` keeps all but `__name__`.
pub fn keeps_label(name: &str, modifier: &Option<crate::promql::parser::LabelModifier>) -> bool {
    use crate::promql::parser::LabelModifier;
    match modifier {
        Some(LabelModifier::Include(on)) => on.labels.iter().any(|n| n == name),
        Some(LabelModifier::Exclude(off)) => {
            name != "__name__" && !off.labels.iter().any(|n| n == name)
        }
        None => name != "__name__",
    }
}

/// The labels [`keeps_label`] keeps.
pub fn keep_labels(
    labels: &[Label],
    modifier: &Option<crate::promql::parser::LabelModifier>,
) -> Labels {
    labels
        .iter()
        .filter(|l| keeps_label(&l.name, modifier))
        .cloned()
        .collect()
}

/// No labels.
pub fn no_labels() -> Labels {
    // One shared empty set: a new one per call would be an allocation per
    // step of every scalar in a range query or subquery.
    static EMPTY: std::sync::LazyLock<Labels> = std::sync::LazyLock::new(|| Arc::from(Vec::new()));
    Arc::clone(&EMPTY)
}

/// Whether a result keeps its input's metric name (`last_over_time` and
/// the like) or drops it (functions that change what the value means).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Name {
    /// The result keeps `__name__`.
    Keep,
    /// The result drops `__name__`.
    Drop,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(v: f64) -> String {
        let mut s = String::new();
        format_float(v, &mut s);
        s
    }

    #[test]
    fn floats_format_like_go() {
        assert_eq!(f(1.0), "1");
        assert_eq!(f(0.1), "0.1");
        assert_eq!(f(-2.5), "-2.5");
        assert_eq!(f(1e20), "100000000000000000000");
        assert_eq!(f(1e21), "1e+21");
        assert_eq!(f(1.5e300), "1.5e+300");
        assert_eq!(f(1e-6), "0.000001");
        assert_eq!(f(1e-7), "1e-07");
        assert_eq!(f(-2.5e-10), "-2.5e-10");
        assert_eq!(f(0.0), "0");
        assert_eq!(f(-0.0), "-0");
        assert_eq!(f(f64::NAN), "NaN");
        assert_eq!(f(f64::INFINITY), "+Inf");
        assert_eq!(f(f64::NEG_INFINITY), "-Inf");
        assert_eq!(f(1.0 / 3.0), "0.3333333333333333");
        // Halfway between two shortest candidates: Prometheus 3.5.3
        // answers these (an instant query of the number), to the even.
        let tie = |s: &str| s.parse::<f64>().unwrap_or(f64::NAN);
        assert_eq!(f(tie("-1895127954628905.25")), "-1895127954628905.2");
        assert_eq!(f(tie("1895127954628905.75")), "1895127954628905.8");
        assert_eq!(f(0.30000000000000004), "0.30000000000000004");
        assert_eq!(f(123456789012345.67), "123456789012345.67");
    }

    proptest::proptest! {
        /// The whole-number fast path writes what the float formatter does.
        #[test]
        fn whole_numbers_format_as_floats_do(i in -999_999_999_999_999i64..=999_999_999_999_999) {
            let v = i as f64;
            proptest::prop_assert_eq!(f(v), format!("{v}"));
        }

        /// Floats written in plain decimals read back as themselves, in no
        /// more digits than the standard formatter writes.
        #[test]
        fn plain_floats_read_back_in_the_fewest_digits(
            bits in proptest::prelude::any::<u64>(),
            scale in -6i32..21,
        ) {
            let v = f64::from_bits(bits);
            // Any mantissa, brought into the range written in plain digits.
            let v = if v.is_finite() && v != 0.0 {
                let v = v / 10f64.powi(v.abs().log10().floor() as i32) * 10f64.powi(scale);
                if v.abs() < 1e-6 || v.abs() >= 1e21 { 0.5 } else { v }
            } else {
                0.25
            };
            let written = f(v);
            proptest::prop_assert_eq!(written.parse::<f64>().ok(), Some(v));
            proptest::prop_assert!(!written.contains('e'));
            proptest::prop_assert!(written.len() <= format!("{v}").len(), "{} {}", written, v);
        }

        #[test]
        fn timestamps_read_back_exactly(ms in -10_000_000_000_000i64..10_000_000_000_000) {
            let mut s = String::new();
            format_timestamp(ms, &mut s);
            let back: f64 = s.parse().expect("a number");
            proptest::prop_assert_eq!((back * 1000.0).round() as i64, ms);
        }
    }

    #[test]
    fn timestamps_format_like_prometheus() {
        let t = |ms: i64| {
            let mut s = String::new();
            format_timestamp(ms, &mut s);
            s
        };
        assert_eq!(t(1_435_781_451_781), "1435781451.781");
        assert_eq!(t(1_435_781_451_000), "1435781451");
        assert_eq!(t(1_050), "1.050");
        assert_eq!(t(-1_500), "-1.500");
        assert_eq!(t(0), "0");
    }
}
