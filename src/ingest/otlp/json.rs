//! The OTLP JSON mapping, transcoded to protobuf bytes so that JSON bodies
//! take the same checked walk as protobuf ones. Keys are lowerCamelCase;
//! 64-bit integers come as strings or numbers; enums as integers; trace
//! and span ids as hex; unknown keys are ignored (OTLP/HTTP spec, "JSON
//! Protobuf Encoding"). JSON is the slow path by nature, so this builds
//! the protobuf once per request; protobuf bodies skip this entirely.

use std::cell::RefCell;

use base64::Engine as _;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value as Json;

use crate::encoding::put_uvarint;
use crate::protocol::otlp::{Field, Msg, Ty, REQUEST};

/// A JSON body that is not a valid OTLP metrics request, with the path of
/// the offending value (`resourceMetrics[0].scopeMetrics[1]…`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct JsonError(pub String);

/// Transcodes a JSON `ExportMetricsServiceRequest` into protobuf bytes.
///
/// The body is read as a stream, guided by the schema: unknown keys are
/// skipped without being built (an ignored array of millions of values
/// costs nothing), and known messages are written as they are read. Only
/// each scalar becomes a `serde_json::Value`, one at a time.
pub fn to_protobuf(body: &[u8], out: &mut Vec<u8>) -> Result<(), JsonError> {
    let problem = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_slice(body);
    let read = MsgSeed {
        msg: &REQUEST,
        out,
        problem: &problem,
        nested: None,
    }
    .deserialize(&mut de)
    .and_then(|()| de.end());
    match (read, problem.into_inner()) {
        (Ok(()), _) => Ok(()),
        (Err(_), Some(p)) => Err(JsonError(format!("invalid {}: {p}", REQUEST.name))),
        (Err(e), None) => Err(JsonError(format!("body is not valid JSON: {e}"))),
    }
}

/// Where a schema error is written, path first: each level prepends its
/// part as the error travels up. A serde error carries no path of ours.
type Problem = RefCell<Option<String>>;

fn fail<E: de::Error>(problem: &Problem, message: impl Into<String>) -> E {
    *problem.borrow_mut() = Some(message.into());
    E::custom("invalid OTLP JSON")
}

fn prefix<E>(problem: &Problem, part: &str, e: E) -> E {
    if let Some(m) = problem.borrow_mut().as_mut() {
        m.insert_str(0, part);
    }
    e
}

/// A message read into `out`; `nested` is its field number when it is a
/// field of another message (written length-delimited), and whether a
/// `null` may stand for it.
struct MsgSeed<'a> {
    msg: &'static Msg,
    out: &'a mut Vec<u8>,
    problem: &'a Problem,
    nested: Option<(u32, bool)>,
}

impl<'de> DeserializeSeed<'de> for MsgSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl MsgSeed<'_> {
    fn not_object<E: de::Error>(&self) -> E {
        let dot = if self.nested.is_some() { "." } else { "" };
        fail(
            self.problem,
            format!("{dot}expected an object for {}", self.msg.name),
        )
    }
}

impl<'de> Visitor<'de> for MsgSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "an object for {}", self.msg.name)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut inner = Vec::new();
        let out = if self.nested.is_some() {
            &mut inner
        } else {
            &mut *self.out
        };
        while let Some(key) = map.next_key::<String>()? {
            let Some(field) = self.msg.by_json(&key) else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            let seed = FieldSeed {
                field,
                out: &mut *out,
                problem: self.problem,
            };
            map.next_value_seed(seed).map_err(|e| {
                let dot = if self.nested.is_some() { "." } else { "" };
                prefix(self.problem, &format!("{dot}{key}"), e)
            })?;
        }
        if let Some((num, _)) = self.nested {
            put_bytes(self.out, num, &inner);
        }
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        match self.nested {
            Some((_, true)) => Ok(()),
            _ => Err(self.not_object()),
        }
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Err(self.not_object())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Err(self.not_object())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Err(self.not_object())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Err(self.not_object())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Err(self.not_object())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(self.not_object())
    }
}

/// One known field's value: an array of values when `repeated`.
struct FieldSeed<'a> {
    field: &'static Field,
    out: &'a mut Vec<u8>,
    problem: &'a Problem,
}

impl<'de> DeserializeSeed<'de> for FieldSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.field.repeated {
            d.deserialize_any(self)
        } else {
            value(
                self.field.num,
                self.field.ty,
                true,
                self.out,
                self.problem,
                d,
            )
        }
    }
}

impl<'de> Visitor<'de> for FieldSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0usize;
        loop {
            let item = ItemSeed {
                field: self.field,
                out: &mut *self.out,
                problem: self.problem,
            };
            match seq.next_element_seed(item) {
                Ok(Some(())) => i += 1,
                Ok(None) => return Ok(()),
                Err(e) => return Err(prefix(self.problem, &format!("[{i}]"), e)),
            }
        }
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(fail(self.problem, ": expected an array"))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Err(fail(self.problem, ": expected an array"))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Err(fail(self.problem, ": expected an array"))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Err(fail(self.problem, ": expected an array"))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Err(fail(self.problem, ": expected an array"))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Err(fail(self.problem, ": expected an array"))
    }
}

/// One element of a repeated field.
struct ItemSeed<'a> {
    field: &'static Field,
    out: &'a mut Vec<u8>,
    problem: &'a Problem,
}

impl<'de> DeserializeSeed<'de> for ItemSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        value(
            self.field.num,
            self.field.ty,
            false,
            self.out,
            self.problem,
            d,
        )
    }
}

/// Reads one field value of type `ty` and appends it as field `num`; a
/// `null` is skipped where `null_ok` (a singular field).
fn value<'de, D: Deserializer<'de>>(
    num: u32,
    ty: Ty,
    null_ok: bool,
    out: &mut Vec<u8>,
    problem: &Problem,
    d: D,
) -> Result<(), D::Error> {
    if let Ty::Msg(inner) = ty {
        return MsgSeed {
            msg: inner,
            out,
            problem,
            nested: Some((num, null_ok)),
        }
        .deserialize(d);
    }
    let v = d.deserialize_any(ScalarVisitor)?;
    if v.is_null() && null_ok {
        return Ok(());
    }
    put_value(num, ty, &v, out).map_err(|m| fail(problem, m))
}

/// A scalar as a `serde_json::Value`; an array or object where a scalar
/// belongs is skipped, not built, and stands as an empty one.
struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a scalar")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Json, E> {
        Ok(Json::Bool(b))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Json, E> {
        Ok(Json::from(n))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Json, E> {
        Ok(Json::from(n))
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Json, E> {
        Ok(serde_json::Number::from_f64(n).map_or(Json::Null, Json::Number))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Json, E> {
        Ok(Json::String(s.to_owned()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Json::Array(Vec::new()))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Json::Object(serde_json::Map::new()))
    }
}

fn put_tag(out: &mut Vec<u8>, num: u32, wire: u8) {
    put_uvarint(out, (u64::from(num) << 3) | u64::from(wire));
}

fn put_bytes(out: &mut Vec<u8>, num: u32, b: &[u8]) {
    put_tag(out, num, 2);
    put_uvarint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Appends one scalar field value; errors are `: what`.
fn put_value(num: u32, ty: Ty, v: &Json, out: &mut Vec<u8>) -> Result<(), String> {
    match ty {
        // Messages are streamed by `MsgSeed`, never held as a value.
        Ty::Msg(_) => return Err(": expected an object".to_owned()),
        Ty::Str => {
            let s = v.as_str().ok_or(": expected a string")?;
            put_bytes(out, num, s.as_bytes());
        }
        Ty::Bytes => {
            let s = v.as_str().ok_or(": expected a base64 string")?;
            let b = base64::engine::general_purpose::STANDARD
                .decode(s)
                .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(s))
                .map_err(|_| ": expected a base64 string".to_owned())?;
            put_bytes(out, num, &b);
        }
        Ty::HexBytes => {
            let s = v.as_str().ok_or(": expected a hex string")?;
            let b = hex(s).ok_or(": expected a hex string")?;
            put_bytes(out, num, &b);
        }
        Ty::Bool => {
            let b = v.as_bool().ok_or(": expected true or false")?;
            put_tag(out, num, 0);
            put_uvarint(out, u64::from(b));
        }
        Ty::Int64 => {
            put_tag(out, num, 0);
            put_uvarint(out, int::<i64>(v)? as u64);
        }
        Ty::Uint32 => {
            put_tag(out, num, 0);
            put_uvarint(out, u64::from(int::<u32>(v)?));
        }
        Ty::Uint64 => {
            put_tag(out, num, 0);
            put_uvarint(out, int::<u64>(v)?);
        }
        Ty::Enum => {
            // Enums are int32 on the wire: negative ones are sign-extended.
            put_tag(out, num, 0);
            put_uvarint(out, i64::from(int::<i32>(v)?) as u64);
        }
        Ty::Sint32 => {
            let n = int::<i32>(v)?;
            put_tag(out, num, 0);
            put_uvarint(out, u64::from(((n << 1) ^ (n >> 31)) as u32));
        }
        Ty::Fixed64 => {
            put_tag(out, num, 1);
            out.extend_from_slice(&int::<u64>(v)?.to_le_bytes());
        }
        Ty::Sfixed64 => {
            put_tag(out, num, 1);
            out.extend_from_slice(&int::<i64>(v)?.to_le_bytes());
        }
        Ty::Double => {
            put_tag(out, num, 1);
            out.extend_from_slice(&double(v)?.to_le_bytes());
        }
    }
    Ok(())
}

/// An integer given as a JSON number or a decimal string.
fn int<T: TryFrom<i128> + std::str::FromStr>(v: &Json) -> Result<T, String> {
    let n: Option<T> = match v {
        Json::Number(n) => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
            .or_else(|| {
                // 1e3 or 5.0 are integers written as floats; accept them.
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 1.8e19)
                    .map(|f| f as i128)
            })
            .and_then(|i| T::try_from(i).ok()),
        Json::String(s) => s.trim().parse::<T>().ok(),
        _ => None,
    };
    n.ok_or_else(|| format!(": expected an integer in range, got {v}"))
}

/// A double given as a JSON number, a decimal string, or one of
/// `"NaN"`, `"Infinity"`, `"-Infinity"` (proto3 JSON).
fn double(v: &Json) -> Result<f64, String> {
    let n = match v {
        Json::Number(n) => n.as_f64(),
        Json::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            s => s.trim().parse::<f64>().ok().filter(|f| f.is_finite()),
        },
        _ => None,
    };
    n.ok_or_else(|| format!(": expected a number, got {v}"))
}

fn hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::opentelemetry::proto::collector::metrics::v1::ExportMetricsServiceRequest;
    use crate::proto::opentelemetry::proto::common::v1::any_value::Value as Any;
    use crate::proto::opentelemetry::proto::metrics::v1::metric::Data;
    use crate::proto::opentelemetry::proto::metrics::v1::number_data_point::Value as Num;
    use prost::Message;

    fn decode(json: &str) -> Result<ExportMetricsServiceRequest, JsonError> {
        let mut out = Vec::new();
        to_protobuf(json.as_bytes(), &mut out)?;
        Ok(ExportMetricsServiceRequest::decode(out.as_slice()).expect("valid protobuf"))
    }

    #[test]
    fn transcodes_the_otlp_json_mapping() {
        // The shape of opentelemetry-proto's examples/metrics.json.
        let req = decode(
            r#"{"resourceMetrics":[{"resource":{"attributes":[
                {"key":"service.name","value":{"stringValue":"my.service"}},
                {"key":"n","value":{"intValue":"7"}},
                {"key":"b","value":{"bytesValue":"aGk="}}]},
              "scopeMetrics":[{"scope":{"name":"my.library","version":"1.0.0"},
                "metrics":[{"name":"my.counter","unit":"1","description":"I am a Counter",
                  "sum":{"aggregationTemporality":1,"isMonotonic":true,
                    "dataPoints":[{"asDouble":5,"startTimeUnixNano":"1544712660300000000",
                      "timeUnixNano":1544712660300000000,"flags":1,
                      "attributes":[{"key":"my.counter.attr","value":{"stringValue":"some value"}}],
                      "exemplars":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","asInt":"3"}]},
                      {"asInt":"-9007199254740993","timeUnixNano":"1"}]}},
                  {"name":"h","histogram":{"aggregationTemporality":2,"dataPoints":[
                    {"count":"2","sum":"NaN","bucketCounts":["1",1],"explicitBounds":[1.5],"timeUnixNano":"5"}]}},
                  {"name":"e","exponentialHistogram":{"dataPoints":[
                    {"scale":-3,"positive":{"offset":-2,"bucketCounts":["4"]},"zeroCount":"1"}]}},
                  {"name":"s","unknownField":{"x":1},"summary":{"dataPoints":[
                    {"quantileValues":[{"quantile":0.5,"value":"Infinity"}]}]}}]}]}]}"#,
        )
        .expect("valid JSON");
        let rm = &req.resource_metrics[0];
        let attrs = &rm.resource.as_ref().expect("resource").attributes;
        assert_eq!(attrs[0].key, "service.name");
        assert_eq!(
            attrs[1].value.as_ref().and_then(|v| v.value.clone()),
            Some(Any::IntValue(7))
        );
        assert_eq!(
            attrs[2].value.as_ref().and_then(|v| v.value.clone()),
            Some(Any::BytesValue(b"hi".to_vec()))
        );
        let metrics = &rm.scope_metrics[0].metrics;
        let Some(Data::Sum(sum)) = &metrics[0].data else {
            panic!("sum expected")
        };
        assert_eq!(sum.aggregation_temporality, 1);
        assert!(sum.is_monotonic);
        let p = &sum.data_points[0];
        assert_eq!(p.time_unix_nano, 1_544_712_660_300_000_000);
        assert_eq!(p.start_time_unix_nano, 1_544_712_660_300_000_000);
        assert_eq!(p.value, Some(Num::AsDouble(5.0)));
        assert_eq!(p.flags, 1);
        assert_eq!(
            p.exemplars[0].span_id,
            hex("eee19b7ec3c1b174").expect("hex")
        );
        assert_eq!(
            sum.data_points[1].value,
            Some(Num::AsInt(-9_007_199_254_740_993))
        );
        let Some(Data::Histogram(h)) = &metrics[1].data else {
            panic!("histogram expected")
        };
        assert_eq!(h.data_points[0].bucket_counts, vec![1, 1]);
        assert!(h.data_points[0].sum.expect("sum").is_nan());
        let Some(Data::ExponentialHistogram(e)) = &metrics[2].data else {
            panic!("exponential histogram expected")
        };
        let ep = &e.data_points[0];
        assert_eq!(ep.scale, -3);
        assert_eq!(ep.positive.as_ref().map(|b| b.offset), Some(-2));
        assert_eq!(ep.zero_count, 1);
        let Some(Data::Summary(s)) = &metrics[3].data else {
            panic!("summary expected")
        };
        assert_eq!(s.data_points[0].quantile_values[0].value, f64::INFINITY);
    }

    #[test]
    fn wrong_types_name_the_path() {
        let err = decode(r#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"x","gauge":{"dataPoints":[{"asDouble":"fast"}]}}]}]}]}"#)
            .unwrap_err();
        assert_eq!(
            err.0,
            "invalid ExportMetricsServiceRequest: resourceMetrics[0].scopeMetrics[0].metrics[0].gauge.dataPoints[0].asDouble: expected a number, got \"fast\""
        );
        let err = decode(r#"{"resourceMetrics":{"a":1}}"#).unwrap_err();
        assert!(
            err.0.ends_with("resourceMetrics: expected an array"),
            "{}",
            err.0
        );
        let err = decode(r#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":5}]}]}]}"#)
            .unwrap_err();
        assert!(
            err.0.ends_with("metrics[0].name: expected a string"),
            "{}",
            err.0
        );
        assert!(decode("{not json")
            .unwrap_err()
            .0
            .starts_with("body is not valid JSON"));
        assert!(decode("[]").is_err());
        // An empty object is an empty request.
        assert_eq!(
            decode("{}").expect("valid"),
            ExportMetricsServiceRequest::default()
        );
    }
}
