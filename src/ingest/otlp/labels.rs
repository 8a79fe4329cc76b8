//! The label set of one OTLP data point, built in reused buffers: attribute
//! keys sanitised, values stringified, colliding keys merged with `;`,
//! resource labels laid over them, and the result sorted by name. Once the
//! buffers have grown, building a set allocates nothing.

use std::fmt::Write as _;

use base64::Engine as _;

use super::names;
use crate::ingest::validate::LabelError;
use crate::protocol::otlp::field::{any_value, array_value, key_value, key_value_list};
use crate::protocol::wire::{DecodeError, Reader, Value};
use crate::storage::labels::encode_canonical;

/// How a label got into the set, which decides who wins a name clash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// A promoted resource attribute: kept only if nothing else has the name.
    Promoted = 0,
    /// A data-point (or, for `target_info`, resource) attribute; clashing
    /// attributes are merged.
    Attribute = 1,
    /// `job` and `instance` from the resource: override attributes.
    Identity = 2,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    name: (u32, u32),
    value: (u32, u32),
    /// The attribute's original key, which orders merged values.
    key: (u32, u32),
    source: Source,
}

/// A label set under construction, then sorted and resolved.
#[derive(Debug, Default)]
pub struct LabelSet {
    text: String,
    entries: Vec<Entry>,
    resolved: Vec<Entry>,
    scratch: String,
    /// The resolved labels in the head's canonical encoding, and where
    /// each label's bytes end, so a series' encoding is a few copies.
    encoded: Vec<u8>,
    ends: Vec<usize>,
    /// How attribute keys become label names.
    translation: names::Translation,
}

fn span(text: &str, start: usize) -> (u32, u32) {
    (start as u32, text.len() as u32)
}

impl LabelSet {
    /// Sets how attribute keys become label names (kept across `clear`).
    pub fn set_translation(&mut self, translation: names::Translation) {
        self.translation = translation;
    }

    /// Empties the set, keeping its buffers.
    pub fn clear(&mut self) {
        self.text.clear();
        self.entries.clear();
        self.resolved.clear();
        self.encoded.clear();
        self.ends.clear();
    }

    fn get(&self, (a, b): (u32, u32)) -> &str {
        &self.text[a as usize..b as usize]
    }

    /// Adds a label whose name is already valid.
    pub fn push(&mut self, name: &str, value: &str, source: Source) {
        self.push_parts(name, &[value], source);
    }

    /// Adds a label whose value is `parts` joined.
    pub fn push_parts(&mut self, name: &str, parts: &[&str], source: Source) {
        let n0 = self.text.len();
        self.text.push_str(name);
        let name = span(&self.text, n0);
        let v0 = self.text.len();
        for p in parts {
            self.text.push_str(p);
        }
        let value = span(&self.text, v0);
        self.entries.push(Entry {
            name,
            value,
            key: name,
            source,
        });
    }

    /// Adds an OTLP `KeyValue` (protobuf bytes at offset `base`) as an
    /// attribute. A `__name__` attribute is skipped, as Prometheus skips it.
    pub fn push_key_value(
        &mut self,
        kv: &[u8],
        base: usize,
        source: Source,
    ) -> Result<(), AttrError> {
        let (key, value) = split_key_value(kv, base)?;
        let key =
            std::str::from_utf8(key).map_err(|_| AttrError::Label(LabelError::InvalidUtf8))?;
        self.push_attribute(key, value, source)
    }

    /// Adds attribute `key` with the `AnyValue` bytes `value`.
    pub fn push_attribute(
        &mut self,
        key: &str,
        value: Option<Located<'_>>,
        source: Source,
    ) -> Result<(), AttrError> {
        if key == "__name__" {
            return Ok(());
        }
        let k0 = self.text.len();
        self.text.push_str(key);
        let key_span = span(&self.text, k0);
        let n0 = self.text.len();
        if !names::push_label_name_as(key, &mut self.text, self.translation) {
            self.text.truncate(k0);
            return Err(AttrError::Label(LabelError::InvalidLabelName));
        }
        let name = span(&self.text, n0);
        let v0 = self.text.len();
        if let Some((bytes, at)) = value {
            if let Err(e) = any_value_string(bytes, at, &mut self.text, 0) {
                self.text.truncate(k0);
                return Err(e);
            }
        }
        let value = span(&self.text, v0);
        self.entries.push(Entry {
            name,
            value,
            key: key_span,
            source,
        });
        Ok(())
    }

    /// Adds every label of `other` (resolved) with source `source`.
    pub fn extend_from(&mut self, other: &LabelSet, source: Source) {
        for (n, v) in other.iter() {
            self.push(n, v, source);
        }
    }

    /// Sorts by name and settles clashes: the strongest source wins;
    /// attributes of one name are merged, their values joined by `;` in
    /// the order of their original keys. Empty values are dropped, as an
    /// empty label is no label in Prometheus.
    pub fn resolve(&mut self) {
        let text = &self.text;
        let get = |(a, b): (u32, u32)| &text[a as usize..b as usize];
        self.entries.sort_unstable_by(|x, y| {
            get(x.name)
                .cmp(get(y.name))
                .then(y.source.cmp(&x.source))
                .then(get(x.key).cmp(get(y.key)))
        });
        self.resolved.clear();
        let mut i = 0;
        while i < self.entries.len() {
            let first = self.entries[i];
            let mut j = i + 1;
            while j < self.entries.len() && self.get(self.entries[j].name) == self.get(first.name) {
                j += 1;
            }
            let mut chosen = first;
            let merging = first.source == Source::Attribute
                && j - i > 1
                && self.entries[i + 1].source == Source::Attribute;
            if merging {
                self.scratch.clear();
                for (n, e) in self.entries[i..j].iter().enumerate() {
                    if e.source != Source::Attribute {
                        break;
                    }
                    if n > 0 {
                        self.scratch.push(';');
                    }
                    let v = &self.text[e.value.0 as usize..e.value.1 as usize];
                    self.scratch.push_str(v);
                }
                let v0 = self.text.len();
                self.text.push_str(&self.scratch);
                chosen.value = span(&self.text, v0);
            }
            if chosen.value.0 != chosen.value.1 {
                self.resolved.push(chosen);
            }
            i = j;
        }
        self.encoded.clear();
        self.ends.clear();
        for e in &self.resolved {
            let (n, v) = (
                &self.text[e.name.0 as usize..e.name.1 as usize],
                &self.text[e.value.0 as usize..e.value.1 as usize],
            );
            encode_canonical([(n, v)], &mut self.encoded);
            self.ends.push(self.encoded.len());
        }
    }

    /// Appends to `out` the canonical encoding of the resolved labels with
    /// `extras` (sorted by name) laid over them: an extra replaces a label
    /// of the same name.
    pub fn canonical_with(&self, extras: &[(&str, &str)], out: &mut Vec<u8>) {
        let start = |i: usize| if i == 0 { 0 } else { self.ends[i - 1] };
        let mut i = 0;
        for &(name, value) in extras {
            let mut j = i;
            while j < self.resolved.len() && self.get(self.resolved[j].name) < name {
                j += 1;
            }
            out.extend_from_slice(&self.encoded[start(i)..start(j)]);
            encode_canonical([(name, value)], out);
            i = j;
            if i < self.resolved.len() && self.get(self.resolved[i].name) == name {
                i += 1;
            }
        }
        out.extend_from_slice(&self.encoded[start(i)..]);
    }

    /// Bytes held by the set's buffers.
    pub fn heap_bytes(&self) -> usize {
        self.text.capacity()
            + self.scratch.capacity()
            + self.encoded.capacity()
            + (self.entries.capacity() + self.resolved.capacity()) * std::mem::size_of::<Entry>()
            + self.ends.capacity() * std::mem::size_of::<usize>()
    }

    /// The resolved labels, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> + Clone + '_ {
        self.resolved
            .iter()
            .map(|e| (self.get(e.name), self.get(e.value)))
    }

    /// The resolved value of `name`.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// Whether the resolved set is empty.
    pub fn is_empty(&self) -> bool {
        self.resolved.is_empty()
    }
}

/// Why an attribute could not become a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrError {
    /// The bytes are not valid protobuf (cannot happen after the check).
    Decode(DecodeError),
    /// The key or value breaks a label rule.
    Label(LabelError),
}

impl From<DecodeError> for AttrError {
    fn from(e: DecodeError) -> Self {
        AttrError::Decode(e)
    }
}

/// A nested message's bytes and their offset in the request.
pub type Located<'a> = (&'a [u8], usize);

/// The key and the `AnyValue` bytes (with their offset) of a `KeyValue`.
pub fn split_key_value(
    kv: &[u8],
    base: usize,
) -> Result<(&[u8], Option<Located<'_>>), DecodeError> {
    let mut key: &[u8] = &[];
    let mut value = None;
    let mut r = Reader::nested(kv, base);
    while let Some((num, v, at)) = r.next_field()? {
        match (num, v) {
            (key_value::KEY, Value::Bytes(b)) => key = b,
            (key_value::VALUE, Value::Bytes(b)) => {
                value = Some((b, at + crate::protocol::otlp::len_prefix(b.len())))
            }
            _ => {}
        }
    }
    Ok((key, value))
}

/// Appends the string form of an `AnyValue`, as OpenTelemetry's `AsString`
/// gives it: strings as they are, numbers in decimal, bytes in base64,
/// arrays and maps as JSON.
pub fn any_value_string(
    bytes: &[u8],
    base: usize,
    out: &mut String,
    depth: usize,
) -> Result<(), AttrError> {
    let mut r = Reader::nested(bytes, base);
    let mut last = None;
    while let Some((num, v, at)) = r.next_field()? {
        if (1..=7).contains(&num) {
            last = Some((num, v, at));
        }
    }
    let Some((num, v, at)) = last else {
        return Ok(());
    };
    match (num, v) {
        (any_value::STRING_VALUE, Value::Bytes(b)) => out.push_str(
            std::str::from_utf8(b).map_err(|_| AttrError::Label(LabelError::InvalidUtf8))?,
        ),
        (any_value::BOOL_VALUE, Value::Varint(b)) => {
            out.push_str(if b != 0 { "true" } else { "false" })
        }
        (any_value::INT_VALUE, Value::Varint(i)) => {
            let _ = write!(out, "{}", i as i64);
        }
        (any_value::DOUBLE_VALUE, Value::Fixed64(bits)) => push_double(out, f64::from_bits(bits)),
        (any_value::ARRAY_VALUE | any_value::KVLIST_VALUE, Value::Bytes(b)) => {
            let json = any_json(
                num,
                b,
                at + crate::protocol::otlp::len_prefix(b.len()),
                depth,
            )?;
            let _ = write!(out, "{json}");
        }
        (any_value::BYTES_VALUE, Value::Bytes(b)) => {
            base64::engine::general_purpose::STANDARD.encode_string(b, out)
        }
        _ => return Err(AttrError::Decode(crate::protocol::wire::wrong_type(at))),
    }
    Ok(())
}

/// A double as OpenTelemetry stringifies it (ES6 number-to-string).
fn push_double(out: &mut String, f: f64) {
    let a = f.abs();
    if f.is_nan() {
        out.push_str("NaN");
    } else if f.is_infinite() {
        out.push_str(if f > 0.0 { "+Inf" } else { "-Inf" });
    } else if a != 0.0 && !(1e-6..1e21).contains(&a) {
        let _ = write!(out, "{f:e}");
    } else {
        let _ = write!(out, "{f}");
    }
}

/// An array (5) or kvlist (6) `AnyValue` as JSON.
fn any_json(num: u32, b: &[u8], base: usize, depth: usize) -> Result<serde_json::Value, AttrError> {
    use serde_json::Value as J;
    if depth > crate::protocol::otlp::MAX_DEPTH {
        return Err(AttrError::Decode(DecodeError {
            what: "messages nested too deeply",
            offset: base,
        }));
    }
    let one = |v: &[u8], at: usize| -> Result<J, AttrError> {
        let mut r = Reader::nested(v, at);
        let mut last = None;
        while let Some((n, val, at)) = r.next_field()? {
            if (1..=7).contains(&n) {
                last = Some((n, val, at));
            }
        }
        Ok(match last {
            None => J::Null,
            Some((any_value::STRING_VALUE, Value::Bytes(s), _)) => J::String(
                std::str::from_utf8(s)
                    .map_err(|_| AttrError::Label(LabelError::InvalidUtf8))?
                    .to_owned(),
            ),
            Some((any_value::BOOL_VALUE, Value::Varint(x), _)) => J::Bool(x != 0),
            Some((any_value::INT_VALUE, Value::Varint(x), _)) => J::from(x as i64),
            Some((any_value::DOUBLE_VALUE, Value::Fixed64(x), _)) => J::from(f64::from_bits(x)),
            Some((n @ (5 | 6), Value::Bytes(s), at)) => any_json(
                n,
                s,
                at + crate::protocol::otlp::len_prefix(s.len()),
                depth + 1,
            )?,
            Some((any_value::BYTES_VALUE, Value::Bytes(s), _)) => {
                J::String(base64::engine::general_purpose::STANDARD.encode(s))
            }
            Some((_, _, at)) => {
                return Err(AttrError::Decode(crate::protocol::wire::wrong_type(at)))
            }
        })
    };
    let mut r = Reader::nested(b, base);
    if num == any_value::ARRAY_VALUE {
        let mut items = Vec::new();
        while let Some((n, v, at)) = r.next_field()? {
            if let (array_value::VALUES, Value::Bytes(item)) = (n, v) {
                items.push(one(
                    item,
                    at + crate::protocol::otlp::len_prefix(item.len()),
                )?);
            }
        }
        Ok(J::Array(items))
    } else {
        let mut map = serde_json::Map::new();
        while let Some((n, v, at)) = r.next_field()? {
            if let (key_value_list::VALUES, Value::Bytes(kv)) = (n, v) {
                let (k, val) =
                    split_key_value(kv, at + crate::protocol::otlp::len_prefix(kv.len()))?;
                let k = std::str::from_utf8(k)
                    .map_err(|_| AttrError::Label(LabelError::InvalidUtf8))?;
                let val = match val {
                    Some((vb, vat)) => one(vb, vat)?,
                    None => J::Null,
                };
                map.insert(k.to_owned(), val);
            }
        }
        Ok(J::Object(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::opentelemetry::proto::common::v1::{
        any_value::Value as Any, AnyValue, ArrayValue, KeyValue, KeyValueList,
    };
    use prost::Message;

    fn kv(k: &str, v: Any) -> Vec<u8> {
        KeyValue {
            key: k.into(),
            value: Some(AnyValue { value: Some(v) }),
            ..Default::default()
        }
        .encode_to_vec()
    }

    fn s(v: &str) -> Any {
        Any::StringValue(v.into())
    }

    fn labels(set: &LabelSet) -> Vec<(String, String)> {
        set.iter()
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
            .collect()
    }

    #[test]
    fn collisions_merge_in_key_order_and_identity_wins() {
        let mut set = LabelSet::default();
        for (k, v) in [
            ("b.c", s("2")),
            ("b_c", s("1")),
            ("job", s("attr-job")),
            ("__name__", s("dropped")),
            ("empty", s("")),
            ("n", Any::IntValue(-5)),
            ("t", Any::BoolValue(true)),
            ("d", Any::DoubleValue(0.25)),
            ("bytes", Any::BytesValue(b"hi".to_vec())),
        ] {
            set.push_key_value(&kv(k, v), 0, Source::Attribute)
                .expect("valid");
        }
        set.push("job", "ns/svc", Source::Identity);
        set.push("zone", "promoted", Source::Promoted);
        set.push("n", "promoted-loses", Source::Promoted);
        set.resolve();
        assert_eq!(
            labels(&set),
            [
                ("b_c", "2;1"),
                ("bytes", "aGk="),
                ("d", "0.25"),
                ("job", "ns/svc"),
                ("n", "-5"),
                ("t", "true"),
                ("zone", "promoted"),
            ]
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
        );
        // The canonical encoding with extras equals encoding the merged list.
        let mut fast = Vec::new();
        set.canonical_with(&[("__name__", "m"), ("n", "over")], &mut fast);
        let mut slow = Vec::new();
        let mut merged: Vec<(&str, &str)> = set.iter().filter(|(n, _)| *n != "n").collect();
        merged.extend([("__name__", "m"), ("n", "over")]);
        merged.sort();
        encode_canonical(merged, &mut slow);
        assert_eq!(fast, slow);
        // Reuse after clear starts fresh.
        set.clear();
        set.push("a", "1", Source::Attribute);
        set.resolve();
        assert_eq!(labels(&set), [("a".to_owned(), "1".to_owned())]);
    }

    #[test]
    fn arrays_and_maps_become_json_and_bad_values_are_refused() {
        let mut set = LabelSet::default();
        let arr = Any::ArrayValue(ArrayValue {
            values: vec![
                AnyValue {
                    value: Some(s("a")),
                },
                AnyValue {
                    value: Some(Any::IntValue(1)),
                },
            ],
        });
        let map = Any::KvlistValue(KeyValueList {
            values: vec![KeyValue {
                key: "k".into(),
                value: Some(AnyValue {
                    value: Some(Any::BoolValue(false)),
                }),
                ..Default::default()
            }],
        });
        set.push_key_value(&kv("arr", arr), 0, Source::Attribute)
            .expect("valid");
        set.push_key_value(&kv("map", map), 0, Source::Attribute)
            .expect("valid");
        set.resolve();
        assert_eq!(set.value("arr"), Some(r#"["a",1]"#));
        assert_eq!(set.value("map"), Some(r#"{"k":false}"#));

        // Invalid UTF-8 in a value, and a key that sanitises to nothing.
        let mut bad = KeyValue {
            key: "k".into(),
            value: Some(AnyValue {
                value: Some(s("xx")),
            }),
            ..Default::default()
        }
        .encode_to_vec();
        let n = bad.len();
        bad[n - 1] = 0xff;
        assert_eq!(
            set.push_key_value(&bad, 0, Source::Attribute),
            Err(AttrError::Label(LabelError::InvalidUtf8))
        );
        assert_eq!(
            set.push_key_value(&kv("...", s("v")), 0, Source::Attribute),
            Err(AttrError::Label(LabelError::InvalidLabelName))
        );
    }

    #[test]
    fn doubles_print_as_opentelemetry_does() {
        let p = |f: f64| {
            let mut s = String::new();
            push_double(&mut s, f);
            s
        };
        assert_eq!(p(1.5), "1.5");
        assert_eq!(p(100.0), "100");
        assert_eq!(p(1e21), "1e21");
        assert_eq!(p(1e-7), "1e-7");
    }
}
