//! How numbers, durations and strings are written in PromQL text, as Go
//! and Prometheus write them.

use std::fmt::Write;

/// A duration as Prometheus' `model.ParseDuration` reads it (rule files,
/// API parameters): `[0-9]+` followed by a unit, repeated with units
/// strictly decreasing; `0` alone is zero. `None` when it is not one.
pub fn parse_prom_duration(s: &str) -> Option<i64> {
    const UNITS: [(&str, i64); 7] = [
        ("y", 365 * 86_400_000),
        ("w", 7 * 86_400_000),
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
        ("ms", 1),
    ];
    if s == "0" {
        return Some(0);
    }
    let mut rest = s;
    let mut total: i64 = 0;
    let mut last_unit = 0usize;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let n: i64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        // "ms" before "m" so that "5ms" is not "5m" + "s".
        let (idx, (unit, mult)) = UNITS
            .iter()
            .enumerate()
            .filter(|(_, (u, _))| rest.starts_with(u))
            .max_by_key(|(_, (u, _))| u.len())?;
        if idx < last_unit || (total > 0 && idx == last_unit) {
            return None;
        }
        last_unit = idx;
        rest = &rest[unit.len()..];
        total = total.checked_add(n.checked_mul(*mult)?)?;
    }
    Some(total)
}

/// A duration as Prometheus' `model.Duration` prints it: `1h30m`, `90d`
/// (years and weeks only when exact), `0s`.
pub fn duration(ms: i64) -> String {
    if ms == 0 {
        return "0s".into();
    }
    let mut ms = ms;
    let mut out = String::new();
    let day = 86_400_000;
    for (unit, mult, exact) in [
        ("y", 365 * day, true),
        ("w", 7 * day, true),
        ("d", day, false),
        ("h", 3_600_000, false),
        ("m", 60_000, false),
        ("s", 1000, false),
        ("ms", 1, false),
    ] {
        if exact && ms % mult != 0 {
            continue;
        }
        let v = ms / mult;
        if v > 0 {
            let _ = write!(out, "{v}{unit}");
            ms -= v * mult;
        }
    }
    out
}

pub(crate) fn duration_secs(s: f64) -> String {
    duration((s * 1000.0).round() as i64)
}

/// A number as Go's `strconv.FormatFloat(v, 'f', -1, 64)` writes it.
pub fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

/// A string quoted as Go's `strconv.Quote` quotes it.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
