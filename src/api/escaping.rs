//! Prometheus 3's encodings of UTF-8 metric and label names for readers
//! that only know the classic grammar (prometheus/common `model`'s
//! escaping schemes): `/federate` writes names in the scheme its client
//! asks for in `Accept` (`escaping=`), and `/api/v1/label/<name>/values`
//! takes a name in the `U__` (values) form.

/// How names that are not classic are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Escaping {
    /// Each character outside the classic grammar becomes `_`
    /// (the default for a client that does not ask).
    Underscores,
    /// `.` becomes `_dot_`, `_` becomes `__`, others `__`.
    Dots,
    /// `U__` then the name with `_` doubled and others as `_<hex>_`.
    Values,
    /// Names as they are, quoted where the classic grammar ends.
    AllowUtf8,
}

impl Escaping {
    /// The scheme named by an `escaping=` parameter in `accept`; the
    /// default when none is named (or an unknown one).
    pub fn from_accept(accept: &str) -> Self {
        for param in accept.split([',', ';']) {
            if let Some((k, v)) = param.split_once('=') {
                if k.trim() == "escaping" {
                    return match v.trim() {
                        "allow-utf-8" => Self::AllowUtf8,
                        "values" => Self::Values,
                        "dots" => Self::Dots,
                        _ => Self::Underscores,
                    };
                }
            }
        }
        Self::Underscores
    }

    /// The parameter's value, for the reply's content type.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Underscores => "underscores",
            Self::Dots => "dots",
            Self::Values => "values",
            Self::AllowUtf8 => "allow-utf-8",
        }
    }

    /// `name` in this scheme (`AllowUtf8` leaves it as it is; the writer
    /// quotes it).
    pub fn escape(self, name: &str) -> std::borrow::Cow<'_, str> {
        let classic = crate::storage::labels::is_valid_metric_name(name.as_bytes());
        let mut out = String::with_capacity(name.len() + 8);
        match self {
            Self::AllowUtf8 => return name.into(),
            Self::Underscores if classic => return name.into(),
            Self::Underscores => {
                for (i, c) in name.chars().enumerate() {
                    out.push(if classic_char(c, i) { c } else { '_' });
                }
            }
            Self::Dots => {
                for (i, c) in name.chars().enumerate() {
                    match c {
                        '_' => out.push_str("__"),
                        '.' => out.push_str("_dot_"),
                        c if classic_char(c, i) => out.push(c),
                        _ => out.push_str("__"),
                    }
                }
            }
            Self::Values if classic => return name.into(),
            Self::Values => {
                out.push_str("U__");
                for (i, c) in name.chars().enumerate() {
                    match c {
                        '_' => out.push_str("__"),
                        c if classic_char(c, i) => out.push(c),
                        c => {
                            out.push('_');
                            out.push_str(&format!("{:x}", u32::from(c)));
                            out.push('_');
                        }
                    }
                }
            }
        }
        out.into()
    }
}

/// Whether `c`, at character index `i`, fits the classic metric name
/// grammar `[a-zA-Z_:][a-zA-Z0-9_:]*`.
fn classic_char(c: char, i: usize) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
}

/// Decodes a name in the `U__` (values) form; any other name, or one that
/// does not decode, is returned as it is.
pub fn unescape_values(name: &str) -> std::borrow::Cow<'_, str> {
    let Some(body) = name.strip_prefix("U__") else {
        return name.into();
    };
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if c != '_' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('_') => out.push('_'),
            Some(first) => {
                // `_<hex>_`: at most six hex digits, a valid code point.
                let mut code = 0u32;
                let mut digits = 0;
                let mut d = Some(first);
                loop {
                    match d {
                        Some('_') if digits > 0 => break,
                        Some(h) if digits < 6 && h.is_ascii_hexdigit() => {
                            code = code * 16 + h.to_digit(16).unwrap_or(0);
                            digits += 1;
                        }
                        _ => return name.into(),
                    }
                    d = chars.next();
                }
                match char::from_u32(code) {
                    Some(c) => out.push(c),
                    None => return name.into(),
                }
            }
            None => return name.into(),
        }
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_escape_as_prometheus_common_does() {
        let n = "http.server_duration";
        assert_eq!(Escaping::Underscores.escape(n), "http_server_duration");
        assert_eq!(Escaping::Dots.escape(n), "http_dot_server__duration");
        assert_eq!(Escaping::Values.escape(n), "U__http_2e_server__duration");
        assert_eq!(Escaping::AllowUtf8.escape(n), n);
        // Classic names stay as they are, but for dots' doubled `_`.
        assert_eq!(Escaping::Underscores.escape("up_total"), "up_total");
        assert_eq!(Escaping::Values.escape("up_total"), "up_total");
        assert_eq!(Escaping::Underscores.escape("1a"), "_a");
    }

    #[test]
    fn values_form_round_trips_and_bad_forms_stay() {
        for n in ["http.server_duration", "ünïcode:1", "a b", "x"] {
            let e = Escaping::Values.escape(n);
            assert_eq!(unescape_values(&e), n, "{e}");
        }
        for bad in [
            "U__a_zz_",
            "U__a_2e",
            "U__a_",
            "U__a_110000_",
            "U__a_1234567_",
        ] {
            assert_eq!(unescape_values(bad), bad);
        }
    }

    #[test]
    fn accept_names_the_scheme() {
        assert_eq!(
            Escaping::from_accept("text/plain;version=0.0.4"),
            Escaping::Underscores
        );
        assert_eq!(
            Escaping::from_accept("text/plain;version=1.0.0;escaping=allow-utf-8,*/*;q=0.1"),
            Escaping::AllowUtf8
        );
        assert_eq!(
            Escaping::from_accept("text/plain; escaping=values"),
            Escaping::Values
        );
    }
}
