//! Metric and label names for OTLP data, as Prometheus' OTLP receiver makes
//! them. By default (`UnderscoreEscapingWithSuffixes`; the rules are in
//! `docs/wire-notes.md` §2): escape the name to `[a-zA-Z0-9:]` tokens
//! joined by `_`, add the unit (`By` → `bytes`, `/s` → `per_second`), then
//! `total` for monotonic cumulative sums or `ratio` for gauges of unit `1`.
//! `NoUTF8EscapingWithSuffixes` keeps names and attribute keys as they are
//! and appends the same suffixes with `_`; `NoTranslation` keeps them as
//! they are without suffixes.

/// How OTLP names become Prometheus names: Prometheus' OTLP
/// `translation_strategy`, with its values.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
pub enum Translation {
    /// Classic names: other characters become `_`; unit and type suffixes.
    #[default]
    #[value(name = "UnderscoreEscapingWithSuffixes")]
    UnderscoreEscapingWithSuffixes,
    /// UTF-8 names as sent, unit and type suffixes appended.
    #[value(name = "NoUTF8EscapingWithSuffixes")]
    #[serde(rename = "NoUTF8EscapingWithSuffixes")]
    NoUtf8EscapingWithSuffixes,
    /// UTF-8 names as sent, nothing appended.
    #[value(name = "NoTranslation")]
    NoTranslation,
}

impl Translation {
    /// Whether names are kept as sent (UTF-8) rather than escaped.
    pub fn keeps_names(self) -> bool {
        self != Self::UnderscoreEscapingWithSuffixes
    }
}

impl std::fmt::Display for Translation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::UnderscoreEscapingWithSuffixes => "UnderscoreEscapingWithSuffixes",
            Self::NoUtf8EscapingWithSuffixes => "NoUTF8EscapingWithSuffixes",
            Self::NoTranslation => "NoTranslation",
        })
    }
}

/// How a metric's type affects its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    /// A gauge (or non-monotonic sum): `ratio` when the unit is `1`.
    Gauge,
    /// A monotonic cumulative sum: `total` last.
    Counter,
    /// Histograms, summaries and anything else: unit only.
    Other,
}

/// A name that escaping leaves empty or made only of underscores.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("name {0:?} has no valid characters left after escaping")]
pub struct InvalidName(pub String);

/// The Prometheus unit word for an OTLP (UCUM) main unit.
fn main_unit(u: &str) -> &str {
    match u {
        "d" => "days",
        "h" => "hours",
        "min" => "minutes",
        "s" => "seconds",
        "ms" => "milliseconds",
        "us" => "microseconds",
        "ns" => "nanoseconds",
        "By" => "bytes",
        "KiBy" => "kibibytes",
        "MiBy" => "mebibytes",
        "GiBy" => "gibibytes",
        "TiBy" => "tibibytes",
        "KBy" => "kilobytes",
        "MBy" => "megabytes",
        "GBy" => "gigabytes",
        "TBy" => "terabytes",
        "m" => "meters",
        "V" => "volts",
        "A" => "amperes",
        "J" => "joules",
        "W" => "watts",
        "g" => "grams",
        "Cel" => "celsius",
        "Hz" => "hertz",
        "%" => "percent",
        "1" => "",
        other => other,
    }
}

/// The Prometheus word for an OTLP "per" unit.
fn per_unit(u: &str) -> &str {
    match u {
        "s" => "second",
        "m" => "minute",
        "h" => "hour",
        "d" => "day",
        "w" => "week",
        "mo" => "month",
        "y" => "year",
        other => other,
    }
}

fn is_metric_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == ':'
}

/// Replaces characters outside `[a-zA-Z0-9:]` with `_`, collapses runs of
/// `_` and drops a leading one.
fn clean_unit(u: &str) -> String {
    let mut out = String::with_capacity(u.len());
    for c in u.chars() {
        let c = if is_metric_char(c) { c } else { '_' };
        if !(c == '_' && (out.is_empty() || out.ends_with('_'))) {
            out.push(c);
        }
    }
    out
}

/// The main and `per_` unit suffixes of an OTLP unit, before cleaning.
fn unit_suffixes(unit: &str) -> (String, String) {
    let (main, per) = match unit.split_once('/') {
        Some((m, p)) => (m, Some(p)),
        None => (unit, None),
    };
    let usable = |u: &str| !u.is_empty() && !u.contains(['{', '}']);
    let main = main.trim();
    let main = if usable(main) {
        main_unit(main).to_owned()
    } else {
        String::new()
    };
    let per = match per.map(str::trim) {
        Some(p) if usable(p) => match per_unit(p) {
            "" => String::new(),
            p => format!("per_{p}"),
        },
        _ => String::new(),
    };
    (main, per)
}

/// The Prometheus metric name for an OTLP metric under `translation`.
pub fn metric_name_as(
    name: &str,
    unit: &str,
    kind: NameKind,
    translation: Translation,
) -> Result<String, InvalidName> {
    let out = match translation {
        Translation::UnderscoreEscapingWithSuffixes => return metric_name(name, unit, kind),
        Translation::NoTranslation => name.to_owned(),
        Translation::NoUtf8EscapingWithSuffixes => {
            // The unit words as they are (not cleaned), each after `_`.
            let (main, per) = unit_suffixes(unit);
            let mut out = name.to_owned();
            for suffix in [main, per] {
                if !suffix.is_empty() {
                    out.push('_');
                    out.push_str(&suffix);
                }
            }
            match kind {
                NameKind::Counter => out.push_str("_total"),
                NameKind::Gauge if unit == "1" => out.push_str("_ratio"),
                _ => {}
            }
            out
        }
    };
    if name.is_empty() {
        return Err(InvalidName(name.to_owned()));
    }
    Ok(out)
}

/// The Prometheus metric name for an OTLP metric, by default.
pub fn metric_name(name: &str, unit: &str, kind: NameKind) -> Result<String, InvalidName> {
    let mut tokens: Vec<String> = name
        .split(|c: char| !is_metric_char(c))
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect();
    let (main, per) = unit_suffixes(unit);
    let (mut main, per) = (clean_unit(&main), clean_unit(&per));
    if tokens.contains(&main) {
        main.clear();
    }
    let per = if per == "per_" {
        String::new()
    } else {
        let p = per.trim_end_matches('_').to_owned();
        if tokens.contains(&p) {
            String::new()
        } else {
            p
        }
    };
    if !per.is_empty() {
        main = main.trim_end_matches('_').to_owned();
    }
    for suffix in [main, per] {
        if !suffix.is_empty() {
            tokens.push(suffix);
        }
    }
    let last = match kind {
        NameKind::Counter => Some("total"),
        NameKind::Gauge if unit == "1" => Some("ratio"),
        _ => None,
    };
    if let Some(last) = last {
        tokens.retain(|t| t != last);
        tokens.push(last.to_owned());
    }
    let mut out = tokens.join("_");
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    if out.is_empty() || (out != name && out.chars().all(|c| c == '_')) {
        return Err(InvalidName(name.to_owned()));
    }
    Ok(out)
}

/// The Prometheus label name for an OTLP attribute key: characters outside
/// `[a-zA-Z0-9_]` become `_` (runs are kept), a leading digit gets `key_`,
/// a single leading `_` gets `key`; `__reserved` names stay as they are.
pub fn label_name(key: &str) -> Result<String, InvalidName> {
    let mut out = String::new();
    if push_label_name(key, &mut out) {
        Ok(out)
    } else {
        Err(InvalidName(key.to_owned()))
    }
}

/// Appends the label name for attribute `key` under `translation`: the
/// key itself when names are kept, else [`push_label_name`]'s.
pub fn push_label_name_as(key: &str, out: &mut String, translation: Translation) -> bool {
    if translation.keeps_names() {
        if key.is_empty() {
            return false;
        }
        out.push_str(key);
        return true;
    }
    push_label_name(key, out)
}

/// Appends [`label_name`]`(key)` to `out` without allocating (beyond
/// `out`'s growth). Returns `false`, leaving `out` as it was, when the key
/// has no valid characters.
pub fn push_label_name(key: &str, out: &mut String) -> bool {
    let start = out.len();
    let b = key.as_bytes();
    match b.first() {
        None => return false,
        Some(c) if c.is_ascii_digit() => out.push_str("key_"),
        Some(b'_') if b.get(1) != Some(&b'_') => out.push_str("key"),
        _ => {}
    }
    let mut all_underscore = true;
    for c in key.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        };
        all_underscore &= c == '_';
        out.push(c);
    }
    if all_underscore && !key.bytes().all(|c| c == b'_') {
        out.truncate(start);
        return false;
    }
    true
}

/// The Prometheus unit word of an OTLP unit, as metadata reports it
/// (`s` → `seconds`, `By/s` → `bytes_per_second`, `1` and `{x}` → empty).
pub fn unit_name(unit: &str) -> String {
    let (main, per) = unit_suffixes(unit);
    let (main, per) = (clean_unit(&main), clean_unit(&per));
    let main = main.trim_matches('_');
    let per = per.trim_matches('_');
    match (main.is_empty(), per.is_empty() || per == "per") {
        (_, true) => main.to_owned(),
        (true, false) => per.to_owned(),
        (false, false) => format!("{main}_{per}"),
    }
}

/// Translated names of the metrics seen lately, so that a request for
/// metrics already seen builds no strings.
#[derive(Debug, Default)]
pub struct NameCache {
    table: hashbrown::HashTable<CachedName>,
}

#[derive(Debug)]
struct CachedName {
    hash: u64,
    kind: NameKind,
    translation: Translation,
    name: Box<str>,
    unit: Box<str>,
    /// The metric name and the unit word, or why the name is invalid.
    out: Result<(Box<str>, Box<str>), InvalidName>,
}

/// Names the cache holds before it starts over.
const NAME_CACHE_SIZE: usize = 4096;

impl NameCache {
    /// The Prometheus name and unit word for metric `name` of `unit` and `kind`.
    pub fn get(
        &mut self,
        name: &str,
        unit: &str,
        kind: NameKind,
        translation: Translation,
    ) -> Result<(&str, &str), &InvalidName> {
        use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};
        let seed = xxh3_64(unit.as_bytes()) ^ kind as u64 ^ ((translation as u64) << 8);
        let hash = xxh3_64_with_seed(name.as_bytes(), seed);
        let eq = |e: &CachedName| {
            e.hash == hash
                && e.kind == kind
                && e.translation == translation
                && *e.name == *name
                && *e.unit == *unit
        };
        if self.table.len() >= NAME_CACHE_SIZE && self.table.find(hash, eq).is_none() {
            self.table.clear();
        }
        let entry = self
            .table
            .entry(hash, eq, |e| e.hash)
            .or_insert_with(|| CachedName {
                hash,
                kind,
                translation,
                name: name.into(),
                unit: unit.into(),
                out: metric_name_as(name, unit, kind, translation)
                    .map(|n| (n.into_boxed_str(), unit_name(unit).into_boxed_str())),
            })
            .into_mut();
        match &entry.out {
            Ok((n, u)) => Ok((n, u)),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str, unit: &str, kind: NameKind) -> String {
        metric_name(name, unit, kind).expect("valid")
    }

    #[test]
    fn metric_names_follow_prometheus_otlp_receiver() {
        assert_eq!(
            m("http.server.duration", "s", NameKind::Other),
            "http_server_duration_seconds"
        );
        assert_eq!(
            m("requests.count", "1", NameKind::Counter),
            "requests_count_total"
        );
        assert_eq!(
            m("memory.usage", "By", NameKind::Gauge),
            "memory_usage_bytes"
        );
        assert_eq!(
            m("cpu.utilization", "1", NameKind::Gauge),
            "cpu_utilization_ratio"
        );
        assert_eq!(
            m("network.io", "By/s", NameKind::Gauge),
            "network_io_bytes_per_second"
        );
        assert_eq!(
            m("throughput", "{packet}/s", NameKind::Gauge),
            "throughput_per_second"
        );
        assert_eq!(m("packets", "{packet}", NameKind::Counter), "packets_total");
        // `total` moves to the end; an existing unit token is not repeated.
        assert_eq!(m("total.requests", "", NameKind::Counter), "requests_total");
        assert_eq!(
            m("latency_seconds", "s", NameKind::Other),
            "latency_seconds"
        );
        assert_eq!(
            m("disk__io...time", "ms", NameKind::Counter),
            "disk_io_time_milliseconds_total"
        );
        assert_eq!(m("temp", "Cel", NameKind::Gauge), "temp_celsius");
        assert_eq!(
            m("queue", "items/mo", NameKind::Gauge),
            "queue_items_per_month"
        );
        assert_eq!(m("odd", "foo bar", NameKind::Gauge), "odd_foo_bar");
        // A leading digit gets an underscore.
        assert_eq!(m("2xx.count", "", NameKind::Gauge), "_2xx_count");
        assert_eq!(m("a:b.c", "", NameKind::Gauge), "a:b_c");
        assert!(metric_name("...", "", NameKind::Gauge).is_err());
        assert!(metric_name("", "", NameKind::Gauge).is_err());
    }

    #[test]
    fn label_names_follow_prometheus_otlp_receiver() {
        let l = |k: &str| label_name(k).expect("valid");
        assert_eq!(l("http.method"), "http_method");
        assert_eq!(l("service.instance.id"), "service_instance_id");
        assert_eq!(l("123invalid"), "key_123invalid");
        assert_eq!(l("_private"), "key_private");
        assert_eq!(l("__reserved__"), "__reserved__");
        assert_eq!(l("a..b"), "a__b");
        assert_eq!(l("grüße"), "gr__e");
        assert_eq!(l("__"), "__");
        assert_eq!(l("_"), "key_");
        assert!(label_name("").is_err());
        assert!(label_name("...").is_err());
    }

    #[test]
    fn every_unit_in_the_maps() {
        let main = [
            ("d", "days"),
            ("h", "hours"),
            ("min", "minutes"),
            ("s", "seconds"),
            ("ms", "milliseconds"),
            ("us", "microseconds"),
            ("ns", "nanoseconds"),
            ("By", "bytes"),
            ("KiBy", "kibibytes"),
            ("MiBy", "mebibytes"),
            ("GiBy", "gibibytes"),
            ("TiBy", "tibibytes"),
            ("KBy", "kilobytes"),
            ("MBy", "megabytes"),
            ("GBy", "gigabytes"),
            ("TBy", "terabytes"),
            ("m", "meters"),
            ("V", "volts"),
            ("A", "amperes"),
            ("J", "joules"),
            ("W", "watts"),
            ("g", "grams"),
            ("Cel", "celsius"),
            ("Hz", "hertz"),
            ("%", "percent"),
        ];
        for (unit, word) in main {
            assert_eq!(m("x", unit, NameKind::Other), format!("x_{word}"), "{unit}");
            assert_eq!(unit_name(unit), word, "{unit}");
        }
        let per = [
            ("s", "second"),
            ("m", "minute"),
            ("h", "hour"),
            ("d", "day"),
            ("w", "week"),
            ("mo", "month"),
            ("y", "year"),
        ];
        for (unit, word) in per {
            assert_eq!(
                m("x", &format!("By/{unit}"), NameKind::Gauge),
                format!("x_bytes_per_{word}"),
                "{unit}"
            );
        }
        // Unmapped units pass through, sanitised; unmapped per-units too.
        assert_eq!(m("x", "widgets", NameKind::Gauge), "x_widgets");
        assert_eq!(
            m("x", "By/fortnight", NameKind::Gauge),
            "x_bytes_per_fortnight"
        );
    }

    #[test]
    fn suffix_rules_table() {
        use NameKind::{Counter, Gauge, Other};
        let table = [
            // `_total` only for monotonic counters, always last, never twice.
            ("requests", "", Counter, "requests_total"),
            ("requests_total", "", Counter, "requests_total"),
            ("requests.total.count", "", Counter, "requests_count_total"),
            ("requests", "", Gauge, "requests"),
            ("requests", "", Other, "requests"),
            ("bytes.sent", "By", Counter, "bytes_sent_total"),
            ("sent", "By", Counter, "sent_bytes_total"),
            // `_ratio` only for gauges of unit 1.
            ("cpu.usage", "1", Gauge, "cpu_usage_ratio"),
            ("cpu.usage", "1", Counter, "cpu_usage_total"),
            ("cpu.usage", "1", Other, "cpu_usage"),
            ("usage_ratio", "1", Gauge, "usage_ratio"),
            // Escaping: runs of invalid characters become one `_`; leading
            // and trailing ones go; colons stay.
            ("http..server--latency", "", Gauge, "http_server_latency"),
            ("_leading.trailing_", "", Gauge, "leading_trailing"),
            ("ns:sub.metric", "", Gauge, "ns:sub_metric"),
            ("métrique", "", Gauge, "m_trique"),
            // Leading digits.
            ("5xx.errors", "", Counter, "_5xx_errors_total"),
            ("0", "s", Gauge, "_0_seconds"),
            // A unit already in the name is not repeated.
            ("duration.seconds", "s", Other, "duration_seconds"),
            // `per_second` is one suffix, never one of the name's tokens, so
            // Prometheus appends it even to a name that spells it out.
            (
                "io.bytes.per.second",
                "By/s",
                Gauge,
                "io_bytes_per_second_per_second",
            ),
            ("io.rate", "By/s", Gauge, "io_rate_bytes_per_second"),
        ];
        for (name, unit, kind, want) in table {
            assert_eq!(m(name, unit, kind), want, "{name} {unit} {kind:?}");
        }
    }

    #[test]
    fn unit_words_for_metadata() {
        assert_eq!(unit_name("s"), "seconds");
        assert_eq!(unit_name("By/s"), "bytes_per_second");
        assert_eq!(unit_name("1"), "");
        assert_eq!(unit_name("{packet}"), "");
        assert_eq!(unit_name("{packet}/s"), "per_second");
        assert_eq!(unit_name("1/s"), "per_second");
    }

    #[test]
    fn the_name_cache_answers_like_the_namer() {
        let mut cache = NameCache::default();
        let escape = Translation::UnderscoreEscapingWithSuffixes;
        for _ in 0..2 {
            assert_eq!(
                cache.get("http.server.duration", "s", NameKind::Other, escape),
                Ok(("http_server_duration_seconds", "seconds"))
            );
            assert_eq!(
                cache.get("http.server.duration", "s", NameKind::Counter, escape),
                Ok(("http_server_duration_seconds_total", "seconds"))
            );
            // The same metric under another strategy is another entry.
            assert_eq!(
                cache.get(
                    "http.server.duration",
                    "s",
                    NameKind::Counter,
                    Translation::NoUtf8EscapingWithSuffixes
                ),
                Ok(("http.server.duration_seconds_total", "seconds"))
            );
            assert!(cache.get("...", "", NameKind::Gauge, escape).is_err());
            assert!(cache
                .get("", "", NameKind::Gauge, Translation::NoTranslation)
                .is_err());
        }
    }
}
