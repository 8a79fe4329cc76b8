//! Request parameters of the Prometheus HTTP API: form values from the URL
//! query and, for POST, the form-encoded body (like Go's `r.FormValue`),
//! and the API's time, duration and selector formats.

use axum::extract::{FromRequest, Request};
use axum::http::{header, Method};

use super::error::ApiError;
use super::state::AppState;
use crate::promql::guard::ParseLimits;
use crate::storage::index::Matcher;

/// Every form value of a request, in order; keys may repeat (`match[]`).
#[derive(Debug, Default, Clone)]
pub struct Params(Vec<(String, String)>);

impl FromRequest<AppState> for Params {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let mut pairs: Vec<(String, String)> = req
            .uri()
            .query()
            .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
            .unwrap_or_default();
        let is_form = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
        if req.method() == Method::POST && is_form {
            let limit = state.max_form_bytes();
            let body = axum::body::to_bytes(req.into_body(), limit)
                .await
                .map_err(|e| form_error(&e, limit))?;
            // Body values come first, as with Go's ParseForm.
            let mut form: Vec<(String, String)> =
                form_urlencoded::parse(&body).into_owned().collect();
            form.append(&mut pairs);
            pairs = form;
        }
        Ok(Params(pairs))
    }
}

/// Go's `ParseForm` words for a body over its limit, which Prometheus
/// passes on as `bad_data`.
fn form_error(e: &axum::Error, limit: usize) -> ApiError {
    use std::error::Error as _;
    let mut source = e.source();
    while let Some(s) = source {
        if s.is::<http_body_util::LengthLimitError>() {
            return ApiError::bad_data(format!(
                "error parsing form values: http: POST too large (the form body is over \
                 query-max-form-bytes, {limit} bytes)"
            ));
        }
        source = s.source();
    }
    ApiError::bad_data(format!("error parsing form values: {e}"))
}

impl Params {
    /// Builds parameters from pairs (tests).
    pub fn from_pairs(pairs: &[(&str, &str)]) -> Self {
        Params(
            pairs
                .iter()
                .map(|&(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        )
    }

    /// The first value of `key`, if given and non-empty.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    /// Every value of `key`.
    pub fn all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A time parameter, or `default` when absent.
    pub fn time(&self, key: &str, default: i64) -> Result<i64, ApiError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => parse_time(v).map_err(|e| ApiError::bad_param(key, e)),
        }
    }

    /// The `start`/`end` pair of the metadata endpoints; both optional.
    pub fn time_range(&self) -> Result<(i64, i64), ApiError> {
        Ok((self.time("start", MIN_TIME)?, self.time("end", MAX_TIME)?))
    }

    /// A non-negative integer parameter (`limit`), 0 (no limit) when
    /// absent; negative values are refused, as Prometheus refuses them.
    pub fn limit(&self, key: &str) -> Result<usize, ApiError> {
        match self.signed_limit(key)? {
            None => Ok(0),
            Some(n) => usize::try_from(n)
                .map_err(|_| ApiError::bad_param(key, "limit must be non-negative")),
        }
    }

    /// An integer parameter where a negative value means no limit (the
    /// metadata endpoint's `limit` and `limit_per_metric`), 0 when absent.
    pub fn limit_or_unlimited(&self, key: &str) -> Result<usize, ApiError> {
        Ok(self
            .signed_limit(key)?
            .map_or(0, |n| usize::try_from(n).unwrap_or(0)))
    }

    fn signed_limit(&self, key: &str) -> Result<Option<i64>, ApiError> {
        self.get(key)
            .map(|v| {
                v.parse::<i64>().map_err(|_| {
                    ApiError::bad_param(key, format!("cannot parse {v:?} to a valid limit"))
                })
            })
            .transpose()
    }

    /// The `match[]` selectors, each a list of matchers.
    pub fn selectors(&self, limits: &ParseLimits) -> Result<Vec<Vec<Matcher>>, ApiError> {
        let mut out = Vec::new();
        for s in self.all("match[]") {
            out.extend(parse_selector(s, limits).map_err(|e| ApiError::bad_param("match[]", e))?);
        }
        Ok(out)
    }
}

/// The earliest and latest times the API knows, in ms (Prometheus' MinTime
/// and MaxTime).
pub const MIN_TIME: i64 = (i64::MIN / 1000 + 62_135_596_801) * 1000;
/// See [`MIN_TIME`].
pub const MAX_TIME: i64 = (i64::MAX / 1000 - 62_135_596_801) * 1000 + 999;

/// A time or duration parameter that does not parse, in Prometheus' words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadValue {
    /// Not a time.
    #[error("cannot parse {0:?} to a valid timestamp")]
    Time(String),
    /// Not a duration.
    #[error("cannot parse {0:?} to a valid duration")]
    Duration(String),
    /// A duration longer than Go's int64 of nanoseconds.
    #[error("cannot parse {0:?} to a valid duration. It overflows int64")]
    DurationOverflow(String),
}

/// Parses an API time: unix seconds as a float (rounded to the ms), or
/// RFC 3339. Returns milliseconds.
pub fn parse_time(s: &str) -> Result<i64, BadValue> {
    let bad = || BadValue::Time(s.to_owned());
    if let Ok(f) = s.parse::<f64>() {
        if !f.is_finite() {
            return Err(bad());
        }
        let secs = f.trunc();
        let ms = ((f - secs) * 1000.0).round();
        let t = secs * 1000.0 + ms;
        if t >= i64::MAX as f64 || t <= i64::MIN as f64 {
            return Err(bad());
        }
        return Ok(t as i64);
    }
    // Prometheus' own renderings of MinTime and MaxTime.
    match s {
        "-292273086-05-16T16:47:06Z" => return Ok(MIN_TIME),
        "292277025-08-18T07:12:54.999999999Z" => return Ok(MAX_TIME),
        _ => {}
    }
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_millis())
        .map_err(|_| bad())
}

/// Parses an API duration: float seconds, or a Prometheus duration such as
/// `1h30m` (units ms, s, m, h, d, w, y; longest first). Returns ms.
///
/// Durations are Go's: an int64 of nanoseconds, about ±292 years; longer
/// ones are refused in Prometheus' words.
pub fn parse_duration(s: &str) -> Result<i64, BadValue> {
    let overflows = || BadValue::DurationOverflow(s.to_owned());
    if let Ok(f) = s.parse::<f64>() {
        let ms = f * 1000.0;
        if !ms.is_finite() {
            return Err(BadValue::Duration(s.to_owned()));
        }
        if ms.abs() > MAX_DURATION_MS as f64 {
            return Err(overflows());
        }
        return Ok(ms.round() as i64);
    }
    match parse_prom_duration(s) {
        Some(ms) if ms <= MAX_DURATION_MS => Ok(ms),
        Some(_) => Err(overflows()),
        None => Err(BadValue::Duration(s.to_owned())),
    }
}

/// The longest duration, in ms: `i64::MAX` nanoseconds.
pub const MAX_DURATION_MS: i64 = i64::MAX / 1_000_000;

pub use crate::promql::parser::text::parse_prom_duration;

/// The deepest `match[]` selector parsed; a valid one is 1 deep.
const SELECTOR_MAX_DEPTH: usize = 16;

/// Parses one series selector (`up{job="x"}`) into matcher sets: one set,
/// or several when the selector uses `or` inside its braces.
pub fn parse_selector(s: &str, limits: &ParseLimits) -> Result<Vec<Vec<Matcher>>, String> {
    // A selector nests one level (its braces): anything much deeper is
    // refused before it is parsed, here on an async worker's stack.
    let limits = ParseLimits {
        max_depth: limits.max_depth.min(SELECTOR_MAX_DEPTH),
        ..*limits
    };
    match crate::promql::guard::parse(s, &limits).map_err(|e| e.to_string())? {
        crate::promql::parser::Expr::VectorSelector(vs) => crate::promql::selector_matchers(&vs),
        _ => Err(format!("invalid selector {s:?}: not a series selector")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::index::MatchOp;

    #[test]
    fn times_parse_like_prometheus() {
        assert_eq!(parse_time("1435781451.781"), Ok(1_435_781_451_781));
        assert_eq!(parse_time("1435781451"), Ok(1_435_781_451_000));
        assert_eq!(
            parse_time("2015-07-01T20:10:51.781Z"),
            Ok(1_435_781_451_781)
        );
        assert_eq!(
            parse_time("2015-07-01T22:10:51.781+02:00"),
            Ok(1_435_781_451_781)
        );
        assert_eq!(parse_time("-1.5"), Ok(-1500));
        // Grafana's exemplar probe sends milliseconds: still a valid time.
        assert!(parse_time("1700000000000").is_ok());
        assert!(parse_time("yesterday").is_err());
        assert!(parse_time("NaN").is_err());
        assert_eq!(parse_time("-292273086-05-16T16:47:06Z"), Ok(MIN_TIME));
    }

    #[test]
    fn durations_parse_like_prometheus() {
        assert_eq!(parse_duration("15"), Ok(15_000));
        assert_eq!(parse_duration("0.5"), Ok(500));
        assert_eq!(parse_duration("1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration("5ms"), Ok(5));
        assert_eq!(parse_duration("1d"), Ok(86_400_000));
        assert_eq!(
            parse_duration("1y2w"),
            Ok(365 * 86_400_000 + 14 * 86_400_000)
        );
        assert_eq!(parse_duration("0"), Ok(0));
        for bad in ["", "1.5h", "30m1h", "1h1h", "h", "5x", "-5m", "NaN", "Inf"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        for huge in ["1e30", "-1e30", "9e15", "300y", "99999999999999999999y"] {
            let e = parse_duration(huge).expect_err(huge).to_string();
            assert!(
                e.contains("overflows int64") || e.contains("valid duration"),
                "{e}"
            );
        }
        assert_eq!(parse_duration("292y"), Ok(292 * 365 * 86_400_000));
    }

    #[test]
    fn selectors_become_matchers() {
        let sets = parse_selector(r#"up{job=~"a|b", env!="dev"}"#, &ParseLimits::default())
            .expect("valid");
        assert_eq!(sets.len(), 1);
        let m = &sets[0];
        assert_eq!(
            (m[0].name.as_str(), m[0].op, m[0].value.as_str()),
            ("__name__", MatchOp::Equal, "up")
        );
        assert_eq!((m[1].name.as_str(), m[1].op), ("job", MatchOp::Regex));
        assert_eq!((m[2].name.as_str(), m[2].op), ("env", MatchOp::NotEqual));
        assert!(parse_selector("rate(up[5m])", &ParseLimits::default()).is_err());
        assert!(parse_selector(r#"{job=~".*"}"#, &ParseLimits::default()).is_err());
        assert!(parse_selector("up{", &ParseLimits::default()).is_err());
    }
}
