//! The shape of the OTLP metrics messages Sluice reads, as tables: field
//! numbers, JSON names and types (`proto/opentelemetry/…`). One table drives
//! both the structural check of protobuf bodies and the JSON transcoder, so
//! the two cannot disagree about the wire.
//!
//! Fields not listed (exemplar-free extensions, profiling-only string
//! indexes, entity refs) are unknown to Sluice and skipped, as protobuf
//! and the OTLP JSON mapping both require.

use super::wire::{DecodeError, Reader, Value};
use crate::encoding::uvarint;

/// A field's type, as far as the wire and JSON care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    /// A nested message.
    Msg(&'static Msg),
    /// UTF-8 text (checked where it is used, not here).
    Str,
    /// Bytes; base64 in JSON.
    Bytes,
    /// Trace and span ids; hex in OTLP JSON.
    HexBytes,
    /// `bool` (varint).
    Bool,
    /// `int64` (varint).
    Int64,
    /// `uint32` (varint).
    Uint32,
    /// `uint64` (varint).
    Uint64,
    /// `sint32` (zigzag varint).
    Sint32,
    /// An enum (varint); an integer in OTLP JSON.
    Enum,
    /// `fixed64`.
    Fixed64,
    /// `sfixed64`.
    Sfixed64,
    /// `double`.
    Double,
}

impl Ty {
    /// The protobuf wire type of one (unpacked) value.
    pub fn wire_type(self) -> u8 {
        match self {
            Ty::Msg(_) | Ty::Str | Ty::Bytes | Ty::HexBytes => 2,
            Ty::Bool | Ty::Int64 | Ty::Uint32 | Ty::Uint64 | Ty::Sint32 | Ty::Enum => 0,
            Ty::Fixed64 | Ty::Sfixed64 | Ty::Double => 1,
        }
    }
}

/// One field of a message.
#[derive(Debug, PartialEq, Eq)]
pub struct Field {
    /// Field number.
    pub num: u32,
    /// The lowerCamelCase name used by the OTLP JSON mapping.
    pub json: &'static str,
    /// Its type.
    pub ty: Ty,
    /// Whether it is `repeated`.
    pub repeated: bool,
}

/// A message: its name (for errors) and the fields Sluice knows.
#[derive(Debug, PartialEq, Eq)]
pub struct Msg {
    /// The protobuf message name.
    pub name: &'static str,
    /// Known fields.
    pub fields: &'static [Field],
}

impl Msg {
    /// The field with number `num`.
    pub fn by_num(&self, num: u32) -> Option<&'static Field> {
        self.fields.iter().find(|f| f.num == num)
    }

    /// The field with JSON name `name`.
    pub fn by_json(&self, name: &str) -> Option<&'static Field> {
        self.fields.iter().find(|f| f.json == name)
    }
}

const fn f(num: u32, json: &'static str, ty: Ty) -> Field {
    Field {
        num,
        json,
        ty,
        repeated: false,
    }
}

/// Field numbers of the OTLP metrics messages, by message, named once: the
/// tables below and the walk that appends both use them.
pub mod field {
    /// `ExportMetricsServiceRequest`.
    pub mod request {
        /// `resourceMetrics`.
        pub const RESOURCE_METRICS: u32 = 1;
    }
    /// `ResourceMetrics`.
    pub mod resource_metrics {
        /// `resource`.
        pub const RESOURCE: u32 = 1;
        /// `scopeMetrics`.
        pub const SCOPE_METRICS: u32 = 2;
        /// `schemaUrl`.
        pub const SCHEMA_URL: u32 = 3;
    }
    /// `Resource`.
    pub mod resource {
        /// `attributes`.
        pub const ATTRIBUTES: u32 = 1;
        /// `droppedAttributesCount`.
        pub const DROPPED_ATTRIBUTES_COUNT: u32 = 2;
    }
    /// `ScopeMetrics`.
    pub mod scope_metrics {
        /// `scope`.
        pub const SCOPE: u32 = 1;
        /// `metrics`.
        pub const METRICS: u32 = 2;
        /// `schemaUrl`.
        pub const SCHEMA_URL: u32 = 3;
    }
    /// `InstrumentationScope`.
    pub mod scope {
        /// `name`.
        pub const NAME: u32 = 1;
        /// `version`.
        pub const VERSION: u32 = 2;
        /// `attributes`.
        pub const ATTRIBUTES: u32 = 3;
        /// `droppedAttributesCount`.
        pub const DROPPED_ATTRIBUTES_COUNT: u32 = 4;
    }
    /// `Metric (its data kinds are [`DataKind`])`.
    pub mod metric {
        /// `name`.
        pub const NAME: u32 = 1;
        /// `description`.
        pub const DESCRIPTION: u32 = 2;
        /// `unit`.
        pub const UNIT: u32 = 3;
        /// `metadata`.
        pub const METADATA: u32 = 12;
    }
    /// `Gauge, Sum, Histogram, ExponentialHistogram and Summary (their fields share numbers)`.
    pub mod data {
        /// `dataPoints`.
        pub const DATA_POINTS: u32 = 1;
        /// `aggregationTemporality`.
        pub const AGGREGATION_TEMPORALITY: u32 = 2;
        /// `isMonotonic`.
        pub const IS_MONOTONIC: u32 = 3;
    }
    /// `NumberDataPoint`.
    pub mod number_point {
        /// `startTimeUnixNano`.
        pub const START_TIME_UNIX_NANO: u32 = 2;
        /// `timeUnixNano`.
        pub const TIME_UNIX_NANO: u32 = 3;
        /// `asDouble`.
        pub const AS_DOUBLE: u32 = 4;
        /// `exemplars`.
        pub const EXEMPLARS: u32 = 5;
        /// `asInt`.
        pub const AS_INT: u32 = 6;
        /// `attributes`.
        pub const ATTRIBUTES: u32 = 7;
        /// `flags`.
        pub const FLAGS: u32 = 8;
    }
    /// `HistogramDataPoint`.
    pub mod histogram_point {
        /// `startTimeUnixNano`.
        pub const START_TIME_UNIX_NANO: u32 = 2;
        /// `timeUnixNano`.
        pub const TIME_UNIX_NANO: u32 = 3;
        /// `count`.
        pub const COUNT: u32 = 4;
        /// `sum`.
        pub const SUM: u32 = 5;
        /// `bucketCounts`.
        pub const BUCKET_COUNTS: u32 = 6;
        /// `explicitBounds`.
        pub const EXPLICIT_BOUNDS: u32 = 7;
        /// `exemplars`.
        pub const EXEMPLARS: u32 = 8;
        /// `attributes`.
        pub const ATTRIBUTES: u32 = 9;
        /// `flags`.
        pub const FLAGS: u32 = 10;
        /// `min`.
        pub const MIN: u32 = 11;
        /// `max`.
        pub const MAX: u32 = 12;
    }
    /// `ExponentialHistogramDataPoint`.
    pub mod exp_point {
        /// `attributes`.
        pub const ATTRIBUTES: u32 = 1;
        /// `startTimeUnixNano`.
        pub const START_TIME_UNIX_NANO: u32 = 2;
        /// `timeUnixNano`.
        pub const TIME_UNIX_NANO: u32 = 3;
        /// `count`.
        pub const COUNT: u32 = 4;
        /// `sum`.
        pub const SUM: u32 = 5;
        /// `scale`.
        pub const SCALE: u32 = 6;
        /// `zeroCount`.
        pub const ZERO_COUNT: u32 = 7;
        /// `positive`.
        pub const POSITIVE: u32 = 8;
        /// `negative`.
        pub const NEGATIVE: u32 = 9;
        /// `flags`.
        pub const FLAGS: u32 = 10;
        /// `exemplars`.
        pub const EXEMPLARS: u32 = 11;
        /// `min`.
        pub const MIN: u32 = 12;
        /// `max`.
        pub const MAX: u32 = 13;
        /// `zeroThreshold`.
        pub const ZERO_THRESHOLD: u32 = 14;
    }
    /// `ExponentialHistogramDataPoint.Buckets`.
    pub mod buckets {
        /// `offset`.
        pub const OFFSET: u32 = 1;
        /// `bucketCounts`.
        pub const BUCKET_COUNTS: u32 = 2;
    }
    /// `SummaryDataPoint`.
    pub mod summary_point {
        /// `startTimeUnixNano`.
        pub const START_TIME_UNIX_NANO: u32 = 2;
        /// `timeUnixNano`.
        pub const TIME_UNIX_NANO: u32 = 3;
        /// `count`.
        pub const COUNT: u32 = 4;
        /// `sum`.
        pub const SUM: u32 = 5;
        /// `quantileValues`.
        pub const QUANTILE_VALUES: u32 = 6;
        /// `attributes`.
        pub const ATTRIBUTES: u32 = 7;
        /// `flags`.
        pub const FLAGS: u32 = 8;
    }
    /// `SummaryDataPoint.ValueAtQuantile`.
    pub mod quantile {
        /// `quantile`.
        pub const QUANTILE: u32 = 1;
        /// `value`.
        pub const VALUE: u32 = 2;
    }
    /// `Exemplar`.
    pub mod exemplar {
        /// `timeUnixNano`.
        pub const TIME_UNIX_NANO: u32 = 2;
        /// `asDouble`.
        pub const AS_DOUBLE: u32 = 3;
        /// `spanId`.
        pub const SPAN_ID: u32 = 4;
        /// `traceId`.
        pub const TRACE_ID: u32 = 5;
        /// `asInt`.
        pub const AS_INT: u32 = 6;
        /// `filteredAttributes`.
        pub const FILTERED_ATTRIBUTES: u32 = 7;
    }
    /// `KeyValue`.
    pub mod key_value {
        /// `key`.
        pub const KEY: u32 = 1;
        /// `value`.
        pub const VALUE: u32 = 2;
    }
    /// `AnyValue`.
    pub mod any_value {
        /// `stringValue`.
        pub const STRING_VALUE: u32 = 1;
        /// `boolValue`.
        pub const BOOL_VALUE: u32 = 2;
        /// `intValue`.
        pub const INT_VALUE: u32 = 3;
        /// `doubleValue`.
        pub const DOUBLE_VALUE: u32 = 4;
        /// `arrayValue`.
        pub const ARRAY_VALUE: u32 = 5;
        /// `kvlistValue`.
        pub const KVLIST_VALUE: u32 = 6;
        /// `bytesValue`.
        pub const BYTES_VALUE: u32 = 7;
    }
    /// `ArrayValue`.
    pub mod array_value {
        /// `values`.
        pub const VALUES: u32 = 1;
    }
    /// `KeyValueList`.
    pub mod key_value_list {
        /// `values`.
        pub const VALUES: u32 = 1;
    }
}

const fn rep(num: u32, json: &'static str, ty: Ty) -> Field {
    Field {
        num,
        json,
        ty,
        repeated: true,
    }
}

/// `ExportMetricsServiceRequest`.
pub static REQUEST: Msg = Msg {
    name: "ExportMetricsServiceRequest",
    fields: &[rep(
        field::request::RESOURCE_METRICS,
        "resourceMetrics",
        Ty::Msg(&RESOURCE_METRICS),
    )],
};

static RESOURCE_METRICS: Msg = Msg {
    name: "ResourceMetrics",
    fields: &[
        f(
            field::resource_metrics::RESOURCE,
            "resource",
            Ty::Msg(&RESOURCE),
        ),
        rep(
            field::resource_metrics::SCOPE_METRICS,
            "scopeMetrics",
            Ty::Msg(&SCOPE_METRICS),
        ),
        f(field::resource_metrics::SCHEMA_URL, "schemaUrl", Ty::Str),
    ],
};

static RESOURCE: Msg = Msg {
    name: "Resource",
    fields: &[
        rep(
            field::resource::ATTRIBUTES,
            "attributes",
            Ty::Msg(&KEY_VALUE),
        ),
        f(
            field::resource::DROPPED_ATTRIBUTES_COUNT,
            "droppedAttributesCount",
            Ty::Uint32,
        ),
    ],
};

static SCOPE_METRICS: Msg = Msg {
    name: "ScopeMetrics",
    fields: &[
        f(field::scope_metrics::SCOPE, "scope", Ty::Msg(&SCOPE)),
        rep(field::scope_metrics::METRICS, "metrics", Ty::Msg(&METRIC)),
        f(field::scope_metrics::SCHEMA_URL, "schemaUrl", Ty::Str),
    ],
};

static SCOPE: Msg = Msg {
    name: "InstrumentationScope",
    fields: &[
        f(field::scope::NAME, "name", Ty::Str),
        f(field::scope::VERSION, "version", Ty::Str),
        rep(field::scope::ATTRIBUTES, "attributes", Ty::Msg(&KEY_VALUE)),
        f(
            field::scope::DROPPED_ATTRIBUTES_COUNT,
            "droppedAttributesCount",
            Ty::Uint32,
        ),
    ],
};

/// The `data` oneof of `Metric`: each kind's field number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum DataKind {
    /// `gauge`.
    Gauge = 5,
    /// `sum`.
    Sum = 7,
    /// `histogram` (explicit buckets).
    Histogram = 9,
    /// `exponential_histogram`.
    ExponentialHistogram = 10,
    /// `summary`.
    Summary = 11,
}

impl DataKind {
    /// The kind whose field number is `num`.
    pub fn from_field(num: u32) -> Option<DataKind> {
        [
            DataKind::Gauge,
            DataKind::Sum,
            DataKind::Histogram,
            DataKind::ExponentialHistogram,
            DataKind::Summary,
        ]
        .into_iter()
        .find(|k| *k as u32 == num)
    }
}

/// `AggregationTemporality` values.
pub mod temporality {
    /// `AGGREGATION_TEMPORALITY_DELTA`.
    pub const DELTA: u64 = 1;
    /// `AGGREGATION_TEMPORALITY_CUMULATIVE`.
    pub const CUMULATIVE: u64 = 2;
}

static METRIC: Msg = Msg {
    name: "Metric",
    fields: &[
        f(field::metric::NAME, "name", Ty::Str),
        f(field::metric::DESCRIPTION, "description", Ty::Str),
        f(field::metric::UNIT, "unit", Ty::Str),
        f(DataKind::Gauge as u32, "gauge", Ty::Msg(&GAUGE)),
        f(DataKind::Sum as u32, "sum", Ty::Msg(&SUM)),
        f(DataKind::Histogram as u32, "histogram", Ty::Msg(&HISTOGRAM)),
        f(
            DataKind::ExponentialHistogram as u32,
            "exponentialHistogram",
            Ty::Msg(&EXP_HISTOGRAM),
        ),
        f(DataKind::Summary as u32, "summary", Ty::Msg(&SUMMARY)),
        rep(field::metric::METADATA, "metadata", Ty::Msg(&KEY_VALUE)),
    ],
};

static GAUGE: Msg = Msg {
    name: "Gauge",
    fields: &[rep(
        field::data::DATA_POINTS,
        "dataPoints",
        Ty::Msg(&NUMBER_POINT),
    )],
};

static SUM: Msg = Msg {
    name: "Sum",
    fields: &[
        rep(
            field::data::DATA_POINTS,
            "dataPoints",
            Ty::Msg(&NUMBER_POINT),
        ),
        f(
            field::data::AGGREGATION_TEMPORALITY,
            "aggregationTemporality",
            Ty::Enum,
        ),
        f(field::data::IS_MONOTONIC, "isMonotonic", Ty::Bool),
    ],
};

static HISTOGRAM: Msg = Msg {
    name: "Histogram",
    fields: &[
        rep(
            field::data::DATA_POINTS,
            "dataPoints",
            Ty::Msg(&HISTOGRAM_POINT),
        ),
        f(
            field::data::AGGREGATION_TEMPORALITY,
            "aggregationTemporality",
            Ty::Enum,
        ),
    ],
};

static EXP_HISTOGRAM: Msg = Msg {
    name: "ExponentialHistogram",
    fields: &[
        rep(field::data::DATA_POINTS, "dataPoints", Ty::Msg(&EXP_POINT)),
        f(
            field::data::AGGREGATION_TEMPORALITY,
            "aggregationTemporality",
            Ty::Enum,
        ),
    ],
};

static SUMMARY: Msg = Msg {
    name: "Summary",
    fields: &[rep(
        field::data::DATA_POINTS,
        "dataPoints",
        Ty::Msg(&SUMMARY_POINT),
    )],
};

static NUMBER_POINT: Msg = Msg {
    name: "NumberDataPoint",
    fields: &[
        rep(
            field::number_point::ATTRIBUTES,
            "attributes",
            Ty::Msg(&KEY_VALUE),
        ),
        f(
            field::number_point::START_TIME_UNIX_NANO,
            "startTimeUnixNano",
            Ty::Fixed64,
        ),
        f(
            field::number_point::TIME_UNIX_NANO,
            "timeUnixNano",
            Ty::Fixed64,
        ),
        f(field::number_point::AS_DOUBLE, "asDouble", Ty::Double),
        f(field::number_point::AS_INT, "asInt", Ty::Sfixed64),
        rep(
            field::number_point::EXEMPLARS,
            "exemplars",
            Ty::Msg(&EXEMPLAR),
        ),
        f(field::number_point::FLAGS, "flags", Ty::Uint32),
    ],
};

static HISTOGRAM_POINT: Msg = Msg {
    name: "HistogramDataPoint",
    fields: &[
        rep(
            field::histogram_point::ATTRIBUTES,
            "attributes",
            Ty::Msg(&KEY_VALUE),
        ),
        f(
            field::histogram_point::START_TIME_UNIX_NANO,
            "startTimeUnixNano",
            Ty::Fixed64,
        ),
        f(
            field::histogram_point::TIME_UNIX_NANO,
            "timeUnixNano",
            Ty::Fixed64,
        ),
        f(field::histogram_point::COUNT, "count", Ty::Fixed64),
        f(field::histogram_point::SUM, "sum", Ty::Double),
        rep(
            field::histogram_point::BUCKET_COUNTS,
            "bucketCounts",
            Ty::Fixed64,
        ),
        rep(
            field::histogram_point::EXPLICIT_BOUNDS,
            "explicitBounds",
            Ty::Double,
        ),
        rep(
            field::histogram_point::EXEMPLARS,
            "exemplars",
            Ty::Msg(&EXEMPLAR),
        ),
        f(field::histogram_point::FLAGS, "flags", Ty::Uint32),
        f(field::histogram_point::MIN, "min", Ty::Double),
        f(field::histogram_point::MAX, "max", Ty::Double),
    ],
};

static EXP_POINT: Msg = Msg {
    name: "ExponentialHistogramDataPoint",
    fields: &[
        rep(
            field::exp_point::ATTRIBUTES,
            "attributes",
            Ty::Msg(&KEY_VALUE),
        ),
        f(
            field::exp_point::START_TIME_UNIX_NANO,
            "startTimeUnixNano",
            Ty::Fixed64,
        ),
        f(
            field::exp_point::TIME_UNIX_NANO,
            "timeUnixNano",
            Ty::Fixed64,
        ),
        f(field::exp_point::COUNT, "count", Ty::Fixed64),
        f(field::exp_point::SUM, "sum", Ty::Double),
        f(field::exp_point::SCALE, "scale", Ty::Sint32),
        f(field::exp_point::ZERO_COUNT, "zeroCount", Ty::Fixed64),
        f(field::exp_point::POSITIVE, "positive", Ty::Msg(&BUCKETS)),
        f(field::exp_point::NEGATIVE, "negative", Ty::Msg(&BUCKETS)),
        f(field::exp_point::FLAGS, "flags", Ty::Uint32),
        rep(field::exp_point::EXEMPLARS, "exemplars", Ty::Msg(&EXEMPLAR)),
        f(field::exp_point::MIN, "min", Ty::Double),
        f(field::exp_point::MAX, "max", Ty::Double),
        f(
            field::exp_point::ZERO_THRESHOLD,
            "zeroThreshold",
            Ty::Double,
        ),
    ],
};

static BUCKETS: Msg = Msg {
    name: "ExponentialHistogramDataPoint.Buckets",
    fields: &[
        f(field::buckets::OFFSET, "offset", Ty::Sint32),
        rep(field::buckets::BUCKET_COUNTS, "bucketCounts", Ty::Uint64),
    ],
};

static SUMMARY_POINT: Msg = Msg {
    name: "SummaryDataPoint",
    fields: &[
        rep(
            field::summary_point::ATTRIBUTES,
            "attributes",
            Ty::Msg(&KEY_VALUE),
        ),
        f(
            field::summary_point::START_TIME_UNIX_NANO,
            "startTimeUnixNano",
            Ty::Fixed64,
        ),
        f(
            field::summary_point::TIME_UNIX_NANO,
            "timeUnixNano",
            Ty::Fixed64,
        ),
        f(field::summary_point::COUNT, "count", Ty::Fixed64),
        f(field::summary_point::SUM, "sum", Ty::Double),
        rep(
            field::summary_point::QUANTILE_VALUES,
            "quantileValues",
            Ty::Msg(&QUANTILE),
        ),
        f(field::summary_point::FLAGS, "flags", Ty::Uint32),
    ],
};

static QUANTILE: Msg = Msg {
    name: "SummaryDataPoint.ValueAtQuantile",
    fields: &[
        f(field::quantile::QUANTILE, "quantile", Ty::Double),
        f(field::quantile::VALUE, "value", Ty::Double),
    ],
};

static EXEMPLAR: Msg = Msg {
    name: "Exemplar",
    fields: &[
        rep(
            field::exemplar::FILTERED_ATTRIBUTES,
            "filteredAttributes",
            Ty::Msg(&KEY_VALUE),
        ),
        f(field::exemplar::TIME_UNIX_NANO, "timeUnixNano", Ty::Fixed64),
        f(field::exemplar::AS_DOUBLE, "asDouble", Ty::Double),
        f(field::exemplar::AS_INT, "asInt", Ty::Sfixed64),
        f(field::exemplar::SPAN_ID, "spanId", Ty::HexBytes),
        f(field::exemplar::TRACE_ID, "traceId", Ty::HexBytes),
    ],
};

static KEY_VALUE: Msg = Msg {
    name: "KeyValue",
    fields: &[
        f(field::key_value::KEY, "key", Ty::Str),
        f(field::key_value::VALUE, "value", Ty::Msg(&ANY_VALUE)),
    ],
};

static ANY_VALUE: Msg = Msg {
    name: "AnyValue",
    fields: &[
        f(field::any_value::STRING_VALUE, "stringValue", Ty::Str),
        f(field::any_value::BOOL_VALUE, "boolValue", Ty::Bool),
        f(field::any_value::INT_VALUE, "intValue", Ty::Int64),
        f(field::any_value::DOUBLE_VALUE, "doubleValue", Ty::Double),
        f(
            field::any_value::ARRAY_VALUE,
            "arrayValue",
            Ty::Msg(&ARRAY_VALUE),
        ),
        f(
            field::any_value::KVLIST_VALUE,
            "kvlistValue",
            Ty::Msg(&KEY_VALUE_LIST),
        ),
        f(field::any_value::BYTES_VALUE, "bytesValue", Ty::Bytes),
    ],
};

static ARRAY_VALUE: Msg = Msg {
    name: "ArrayValue",
    fields: &[rep(
        field::array_value::VALUES,
        "values",
        Ty::Msg(&ANY_VALUE),
    )],
};

static KEY_VALUE_LIST: Msg = Msg {
    name: "KeyValueList",
    fields: &[rep(
        field::key_value_list::VALUES,
        "values",
        Ty::Msg(&KEY_VALUE),
    )],
};

/// How deep messages may nest. The request itself is 9 levels deep at an
/// attribute value; the rest is headroom for array and kvlist values,
/// which may nest without end in the proto but not on our stack.
pub const MAX_DEPTH: usize = 32;

/// Checks that `body` is a well-formed `msg`: every known field has its
/// declared wire type (or is a packed repeated scalar), packed runs hold
/// whole values, and nested messages are themselves well-formed. After
/// this, the walk that appends can trust the structure. The number of
/// data points it holds (of every kind), counted on the way.
pub fn check(body: &[u8], msg: &Msg) -> Result<u64, DecodeError> {
    let mut points = 0;
    check_at(body, 0, msg, 0, &mut points)?;
    Ok(points)
}

/// Whether `msg` is a data point.
fn is_point(msg: &Msg) -> bool {
    [&NUMBER_POINT, &HISTOGRAM_POINT, &EXP_POINT, &SUMMARY_POINT]
        .into_iter()
        .any(|p| std::ptr::eq(p, msg))
}

fn check_at(
    buf: &[u8],
    base: usize,
    msg: &Msg,
    depth: usize,
    points: &mut u64,
) -> Result<(), DecodeError> {
    if depth > MAX_DEPTH {
        return Err(DecodeError {
            what: "messages nested too deeply",
            offset: base,
        });
    }
    let mut r = Reader::nested(buf, base);
    while let Some((num, value, at)) = r.next_field()? {
        let Some(field) = msg.by_num(num) else {
            continue;
        };
        let ok = match (field.ty, value) {
            (Ty::Msg(inner), Value::Bytes(b)) => {
                check_at(b, at + len_prefix(b.len()), inner, depth + 1, points)?;
                *points += u64::from(is_point(inner));
                true
            }
            (Ty::Str | Ty::Bytes | Ty::HexBytes, Value::Bytes(_)) => true,
            (ty, Value::Bytes(b)) if field.repeated => {
                check_packed(b, ty).map_err(|what| DecodeError { what, offset: at })?;
                true
            }
            (ty, Value::Varint(_)) => ty.wire_type() == 0,
            (ty, Value::Fixed64(_)) => ty.wire_type() == 1,
            _ => false,
        };
        if !ok {
            return Err(DecodeError {
                what: "field has the wrong wire type",
                offset: at,
            });
        }
    }
    Ok(())
}

/// Bytes taken by the length prefix of a `len`-byte field.
pub fn len_prefix(len: usize) -> usize {
    let mut n = 1;
    let mut v = len >> 7;
    while v > 0 {
        n += 1;
        v >>= 7;
    }
    n
}

fn check_packed(b: &[u8], ty: Ty) -> Result<(), &'static str> {
    match ty.wire_type() {
        1 if b.len().is_multiple_of(8) => Ok(()),
        1 => Err("packed run of 8-byte values has a partial value"),
        0 => {
            let mut it = PackedVarints { buf: b };
            for v in &mut it {
                v?;
            }
            Ok(())
        }
        _ => Err("field has the wrong wire type"),
    }
}

/// The varints of a packed run.
#[derive(Debug, Clone)]
pub struct PackedVarints<'a> {
    /// What is left to read.
    pub buf: &'a [u8],
}

impl Iterator for PackedVarints<'_> {
    type Item = Result<u64, &'static str>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() {
            return None;
        }
        match uvarint(self.buf) {
            Some((v, n)) => {
                self.buf = &self.buf[n..];
                Some(Ok(v))
            }
            None => {
                let truncated = self.buf.len() < 10;
                self.buf = &[];
                Some(Err(if truncated {
                    "truncated varint in packed run"
                } else {
                    "varint longer than 10 bytes in packed run"
                }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::opentelemetry::proto::{
        collector::metrics::v1::ExportMetricsServiceRequest, common::v1 as common, metrics::v1 as m,
    };
    use prost::Message;

    fn request() -> ExportMetricsServiceRequest {
        let kv = |k: &str, v: &str| common::KeyValue {
            key: k.into(),
            value: Some(common::AnyValue {
                value: Some(common::any_value::Value::StringValue(v.into())),
            }),
            ..Default::default()
        };
        ExportMetricsServiceRequest {
            resource_metrics: vec![m::ResourceMetrics {
                resource: Some(crate::proto::opentelemetry::proto::resource::v1::Resource {
                    attributes: vec![kv("service.name", "api")],
                    ..Default::default()
                }),
                scope_metrics: vec![m::ScopeMetrics {
                    metrics: vec![m::Metric {
                        name: "h".into(),
                        data: Some(m::metric::Data::Histogram(m::Histogram {
                            data_points: vec![m::HistogramDataPoint {
                                attributes: vec![kv("a", "b")],
                                time_unix_nano: 5_000_000,
                                count: 3,
                                bucket_counts: vec![1, 2],
                                explicit_bounds: vec![1.0],
                                ..Default::default()
                            }],
                            aggregation_temporality: 2,
                        })),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    #[test]
    fn accepts_what_prost_encodes_and_rejects_damage() {
        let body = request().encode_to_vec();
        check(&body, &REQUEST).expect("valid request");
        // Every strict prefix cuts some length-delimited field short.
        for n in 1..body.len() {
            assert!(check(&body[..n], &REQUEST).is_err(), "prefix {n} accepted");
        }
        // resourceMetrics as a varint is the wrong wire type.
        let err = check(&[0x08, 0x01], &REQUEST).unwrap_err();
        assert_eq!(err.what, "field has the wrong wire type");
        // Unknown fields are skipped.
        check(&[0x78, 0x01], &REQUEST).expect("unknown field 15 skipped");
    }

    #[test]
    fn bounds_nesting_depth() {
        // AnyValue{arrayValue{values[AnyValue{arrayValue{…}}]}}: each level
        // is two messages deep.
        let chain = |levels: usize| {
            let mut deep = Vec::new();
            for _ in 0..levels {
                let mut array = vec![0x0a];
                put_len(&mut array, deep.len());
                array.extend_from_slice(&deep);
                let mut any = vec![0x2a];
                put_len(&mut any, array.len());
                any.extend_from_slice(&array);
                deep = any;
            }
            deep
        };
        assert!(check(&chain(MAX_DEPTH / 2 - 1), &ANY_VALUE).is_ok());
        let err = check(&chain(MAX_DEPTH), &ANY_VALUE).unwrap_err();
        assert_eq!(err.what, "messages nested too deeply");
    }
    fn put_len(out: &mut Vec<u8>, mut n: usize) {
        while n >= 0x80 {
            out.push((n as u8) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
    }

    #[test]
    fn packed_runs_must_hold_whole_values() {
        // HistogramDataPoint.bucketCounts (6, fixed64) packed with 7 bytes.
        let mut msg = vec![0x32, 7];
        msg.extend_from_slice(&[0; 7]);
        assert!(check(&msg, &HISTOGRAM_POINT).is_err());
        let mut msg = vec![0x32, 8];
        msg.extend_from_slice(&[0; 8]);
        assert!(check(&msg, &HISTOGRAM_POINT).is_ok());
        // Buckets.bucketCounts (2, uint64) packed with a truncated varint.
        assert!(check(&[0x12, 2, 0x01, 0x80], &BUCKETS).is_err());
        assert!(check(&[0x12, 2, 0x01, 0x02], &BUCKETS).is_ok());
    }
}
