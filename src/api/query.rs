//! `/api/v1/query` and `/api/v1/query_range`: PromQL over the head, in
//! Prometheus' JSON shapes (timestamps as numbers with up to 3 decimals,
//! values as Go-formatted strings, matrices sorted by labels).

use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::params::{parse_duration, Params};
use super::state::AppState;
use super::tenant::Reads;
use crate::histogram::FloatHistogram;
use crate::promql::annotations::Annotations;
use crate::promql::guard;
use crate::promql::value::{format_float, format_timestamp, Series, Value};
use crate::promql::{Engine, QueryError, QueryOptions};
use crate::storage::labels::Label;

/// Prometheus' cap on points per series in a range query.
const MAX_POINTS: i64 = 11_000;

fn options(state: &AppState, p: &Params) -> Result<QueryOptions, ApiError> {
    let mut opts = state.query_options().clone();
    if let Some(v) = p.get("timeout") {
        let ms = parse_duration(v).map_err(|e| ApiError::bad_param("timeout", e))?;
        if ms <= 0 {
            // Prometheus makes the query under a deadline already past, and
            // that fails as the query is parsed: its words, its 400.
            return Err(ApiError::bad_param("query", "context deadline exceeded"));
        }
        opts.timeout = opts.timeout.min(Duration::from_millis(ms.unsigned_abs()));
    }
    if let Some(v) = p.get("lookback_delta") {
        let ms = parse_duration(v).map_err(|e| ApiError::bad_param("lookback_delta", e))?;
        if ms > 0 {
            opts.lookback_ms = ms;
        }
    }
    Ok(opts)
}

/// Evaluates on a query slot, within the query's timeout; the engine
/// stops when the answer is no longer wanted.
async fn run<T: Send + 'static>(
    state: &AppState,
    reads: &Reads,
    mut opts: QueryOptions,
    f: impl FnOnce(Engine<'_>) -> Result<T, QueryError> + Send + 'static,
) -> Result<T, ApiError> {
    // A federated read takes the smallest limit of its tenants (0: none),
    // as Mimir does.
    let in_force = state.tenant_limits().current();
    let tenants = reads.open_tenants();
    let limits: Vec<_> = tenants.iter().map(|(id, _)| in_force.limits(id)).collect();
    if let Some(max) = limits
        .iter()
        .map(|l| l.max_query_samples)
        .filter(|&n| n > 0)
        .min()
    {
        opts.max_samples = usize::try_from(max).unwrap_or(usize::MAX);
    }
    // A tenant at its concurrency waits for its own queries, within the
    // query's timeout, before it takes a server slot; a federated read
    // takes a turn of each of its tenants, in their sorted order.
    let deadline = tokio::time::Instant::now() + opts.timeout;
    let mut turns = Vec::new();
    for ((id, tenant), l) in tenants.iter().zip(&limits) {
        if l.max_query_concurrency == 0 {
            continue;
        }
        let n = usize::try_from(l.max_query_concurrency).unwrap_or(usize::MAX);
        let turn = tenant.queries.enter(n, deadline).await;
        turns
            .push(turn.ok_or_else(|| super::slots::no_turn(id.as_str(), l.max_query_concurrency))?);
    }
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    let reads = reads.clone();
    state
        .read(left, move |stop| {
            // Held until the evaluation ends, even if the client left.
            let _turns = turns;
            reads.with_querier(|q| Ok(f(Engine::new(q, opts).with_cancel(stop))?))
        })
        .await
}

/// `GET|POST /api/v1/query?query=&time=&timeout=&lookback_delta=`
pub(super) async fn instant(
    State(state): State<AppState>,
    reads: Reads,
    p: Params,
) -> Result<Response, ApiError> {
    let query = p
        .get("query")
        .ok_or_else(|| ApiError::bad_param("query", "query must not be empty"))?
        .to_owned();
    let t = p.time("time", state.now_ms())?;
    let opts = options(&state, &p)?;
    let max = state.max_response_bytes();
    // The answer is written on the query thread too: it is CPU work as
    // large as the result, and bounded by `max`.
    let out = run(&state, &reads, opts, move |e| {
        let answer = e.instant(&query, t)?;
        let mut out = instant_body(&answer.value, t, max)?;
        annotations(&mut out, &answer.annotations, &query);
        Ok(out)
    })
    .await?;
    Ok(json(out))
}

/// The error of an answer that would outgrow `query-max-response-bytes`.
fn too_large(max: usize) -> QueryError {
    QueryError::Execution(format!(
        "the answer would be larger than query-max-response-bytes ({max} bytes); \
         select fewer series or a shorter range"
    ))
}

/// The JSON answer to an instant query at `t`.
fn instant_body(value: &Value, t: i64, max: usize) -> Result<String, QueryError> {
    let mut out = String::with_capacity(256);
    out.push_str(r#"{"status":"success","data":{"resultType":""#);
    out.push_str(value.type_name());
    out.push_str(r#"","result":"#);
    match value {
        Value::Scalar(v) => point(&mut out, t, *v),
        Value::String(s) => {
            out.push('[');
            format_timestamp(t, &mut out);
            out.push(',');
            push_json_str(&mut out, s);
            out.push(']');
        }
        Value::Vector(samples) => {
            out.push('[');
            for (i, s) in samples.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(r#"{"metric":"#);
                metric(&mut out, &s.labels);
                match &s.h {
                    Some(h) => {
                        out.push_str(r#","histogram":"#);
                        hist_point(&mut out, t, h);
                    }
                    None => {
                        out.push_str(r#","value":"#);
                        point(&mut out, t, s.v);
                    }
                }
                out.push('}');
                if out.len() > max {
                    return Err(too_large(max));
                }
            }
            out.push(']');
        }
        Value::Matrix(series) => matrix(&mut out, series, max)?,
    }
    out.push_str("}}");
    if out.len() > max {
        return Err(too_large(max));
    }
    Ok(out)
}

/// `GET|POST /api/v1/query_range?query=&start=&end=&step=`
pub(super) async fn range(
    State(state): State<AppState>,
    reads: Reads,
    p: Params,
) -> Result<Response, ApiError> {
    let query = p
        .get("query")
        .ok_or_else(|| ApiError::bad_param("query", "query must not be empty"))?
        .to_owned();
    let start = match p.get("start") {
        Some(_) => p.time("start", 0)?,
        None => return Err(ApiError::bad_param("start", "missing")),
    };
    let end = match p.get("end") {
        Some(_) => p.time("end", 0)?,
        None => return Err(ApiError::bad_param("end", "missing")),
    };
    if end < start {
        return Err(ApiError::bad_param(
            "end",
            "end timestamp must not be before start time",
        ));
    }
    let step = match p.get("step") {
        Some(v) => parse_duration(v).map_err(|e| ApiError::bad_param("step", e))?,
        None => return Err(ApiError::bad_param("step", "missing")),
    };
    if step <= 0 {
        return Err(ApiError::bad_param(
            "step",
            "zero or negative query resolution step widths are not accepted. Try a positive integer",
        ));
    }
    if (i128::from(end) - i128::from(start)) / i128::from(step) > i128::from(MAX_POINTS) {
        return Err(ApiError::bad_data(
            "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)",
        ));
    }
    let opts = options(&state, &p)?;
    let max = state.max_response_bytes();
    let out = run(&state, &reads, opts, move |e| {
        let answer = e.range(&query, start, end, step)?;
        let mut out = String::with_capacity(256 + answer.value.len() * 64);
        out.push_str(r#"{"status":"success","data":{"resultType":"matrix","result":"#);
        matrix(&mut out, &answer.value, max)?;
        out.push_str("}}");
        annotations(&mut out, &answer.annotations, &query);
        Ok(out)
    })
    .await?;
    Ok(json(out))
}

/// Adds `"warnings"` and `"infos"` (each only when there are some) to a
/// finished answer object, before its closing brace; each names its place
/// in `query`.
fn annotations(out: &mut String, a: &Annotations, query: &str) {
    if a.is_empty() || !out.ends_with('}') {
        return;
    }
    out.pop();
    for (key, list) in [("warnings", a.warnings(query)), ("infos", a.infos(query))] {
        if list.is_empty() {
            continue;
        }
        out.push_str(",\"");
        out.push_str(key);
        out.push_str("\":[");
        for (i, m) in list.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            push_json_str(out, m);
        }
        out.push(']');
    }
    out.push('}');
}

fn json(body: String) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

fn push_json_str(out: &mut String, s: &str) {
    // Label names and values rarely hold anything to escape: copy them.
    if !s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        out.push('"');
        out.push_str(s);
        out.push('"');
        return;
    }
    match serde_json::to_string(s) {
        Ok(q) => out.push_str(&q),
        Err(_) => out.push_str("\"\""),
    }
}

fn point(out: &mut String, t: i64, v: f64) {
    out.push('[');
    format_timestamp(t, out);
    out.push_str(",\"");
    format_float(v, out);
    out.push_str("\"]");
}

/// `[t, {"count": "…", "sum": "…", "buckets": [[rule, "lower", "upper",
/// "count"], …]}]` as Prometheus writes a histogram sample: buckets in
/// ascending order, empty ones left out.
fn hist_point(out: &mut String, t: i64, h: &FloatHistogram) {
    let quoted = |out: &mut String, v: f64| {
        out.push('"');
        format_float(v, out);
        out.push('"');
    };
    out.push('[');
    format_timestamp(t, out);
    out.push_str(r#",{"count":"#);
    quoted(out, h.count);
    out.push_str(r#","sum":"#);
    quoted(out, h.sum);
    let mut first = true;
    for b in h.all_buckets() {
        if b.count == 0.0 {
            continue;
        }
        out.push_str(if first { r#","buckets":[["# } else { ",[" });
        first = false;
        out.push(char::from(b'0' + b.boundary_rule()));
        out.push(',');
        quoted(out, b.lower);
        out.push(',');
        quoted(out, b.upper);
        out.push(',');
        quoted(out, b.count);
        out.push(']');
    }
    if !first {
        out.push(']');
    }
    out.push_str("}]");
}

fn metric(out: &mut String, labels: &[Label]) {
    out.push('{');
    for (i, l) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_json_str(out, &l.name);
        out.push(':');
        push_json_str(out, &l.value);
    }
    out.push('}');
}

/// Writes `series` as a JSON matrix; fails once `out` outgrows `max`.
fn matrix(out: &mut String, series: &[Series], max: usize) -> Result<(), QueryError> {
    // A large answer is written in parts on free cores (formatting its
    // numbers is most of the work), joined in order.
    let points: usize = series
        .iter()
        .map(|s| s.points.len() + s.histograms.len() * HISTOGRAM_POINTS)
        .sum();
    let min_part = (series.len() * MATRIX_POINTS_PER_WORKER).div_ceil(points.max(1));
    // The bytes all parts have written: each stops once they pass the bound.
    let written = std::sync::atomic::AtomicUsize::new(out.len());
    let parts = crate::parallel::parts(series.len(), min_part, |r| {
        // Sized for the part up front: grown by doubling, a part of
        // megabytes would be copied about once more on the way.
        let part_points: usize = series[r.clone()]
            .iter()
            .map(|s| s.points.len() + s.histograms.len() * HISTOGRAM_POINTS)
            .sum();
        let guess = part_points
            .saturating_mul(POINT_BYTES)
            .saturating_add(r.len().saturating_mul(SERIES_BYTES));
        let mut part = String::with_capacity(guess.min(max.saturating_add(1)));
        matrix_series(&mut part, &series[r], max, &written).map(|()| part)
    });
    let parts = parts.into_iter().collect::<Result<Vec<_>, _>>()?;
    // Room for the brackets, the commas and what the caller closes the
    // answer with (its braces, a few annotations): a multi-megabyte answer
    // is copied once, not again by a growth for its last bytes.
    out.reserve(parts.iter().map(|p| p.len() + 1).sum::<usize>() + ANSWER_TAIL);
    out.push('[');
    let mut first = true;
    for part in parts {
        if part.is_empty() {
            continue;
        }
        if !std::mem::take(&mut first) {
            out.push(',');
        }
        out.push_str(&part);
        if out.len() > max {
            return Err(too_large(max));
        }
    }
    out.push(']');
    Ok(())
}

/// About what a float point takes in a matrix answer (`[1700000000.123,
/// "12.5"],`), and a series' labels and brackets, to size its parts.
const POINT_BYTES: usize = 28;
const SERIES_BYTES: usize = 128;

/// Bytes reserved past a matrix for the rest of its answer.
const ANSWER_TAIL: usize = 4096;

/// Points of a matrix answer worth a helper thread to write.
const MATRIX_POINTS_PER_WORKER: usize = 32_768;

/// What a histogram point weighs against a float point when an answer is
/// cut into parts.
const HISTOGRAM_POINTS: usize = 8;

/// The series of a matrix answer, separated by commas; `written` counts
/// the bytes of the whole answer so far, which must stay within `max`.
fn matrix_series(
    out: &mut String,
    series: &[Series],
    max: usize,
    written: &std::sync::atomic::AtomicUsize,
) -> Result<(), QueryError> {
    for (i, s) in series.iter().enumerate() {
        let before = out.len();
        if i > 0 {
            out.push(',');
        }
        out.push_str(r#"{"metric":"#);
        metric(out, &s.labels);
        if !s.points.is_empty() {
            out.push_str(r#","values":["#);
            for (j, &(t, v)) in s.points.iter().enumerate() {
                if j > 0 {
                    out.push(',');
                }
                point(out, t, v);
            }
            out.push(']');
        }
        if !s.histograms.is_empty() {
            out.push_str(r#","histograms":["#);
            for (j, (t, h)) in s.histograms.iter().enumerate() {
                if j > 0 {
                    out.push(',');
                }
                hist_point(out, *t, h);
            }
            out.push(']');
        }
        out.push('}');
        let grew = out.len() - before;
        let now = written.fetch_add(grew, std::sync::atomic::Ordering::Relaxed) + grew;
        if now > max {
            return Err(too_large(max));
        }
    }
    Ok(())
}

/// `GET|POST /api/v1/format_query?query=`: the query, pretty-printed.
pub(super) async fn format_query(
    State(state): State<AppState>,
    p: Params,
) -> Result<Response, ApiError> {
    let query = p
        .get("query")
        .ok_or_else(|| ApiError::bad_param("query", "query must not be empty"))?
        .to_owned();
    parsed(&state, query, |expr| expr.prettify().into()).await
}

/// `GET|POST /api/v1/parse_query?query=`: the query's syntax tree as
/// Prometheus' query page draws it (its tree view and explain tab).
pub(super) async fn parse_query(
    State(state): State<AppState>,
    p: Params,
) -> Result<Response, ApiError> {
    let query = p.get("query").unwrap_or_default().to_owned();
    parsed(&state, query, crate::promql::parser::tree::to_json).await
}

/// `render` of the parsed `query`, or its parse error. Parsing and what
/// `render` does with the tree recurse: on a query thread, whose stack
/// fits the deepest query the limits let through.
async fn parsed(
    state: &AppState,
    query: String,
    render: fn(&crate::promql::parser::Expr) -> serde_json::Value,
) -> Result<Response, ApiError> {
    let limits = state.query_options().parse;
    let max = state.max_response_bytes();
    state
        .read(state.query_options().timeout, move |_| {
            let expr =
                guard::parse(&query, &limits).map_err(|e| ApiError::bad_param("query", e))?;
            Ok(super::prom::success_within(render(&expr), &[], max)?)
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::{matrix, matrix_series, push_json_str};
    use crate::promql::value::Series;
    use crate::storage::labels::Label;

    fn answer(series: usize, points: usize) -> Vec<Series> {
        (0..series)
            .map(|i| Series {
                labels: vec![Label {
                    name: "i".into(),
                    value: i.to_string().into(),
                }]
                .into(),
                points: (0..(points + i % 3))
                    .map(|k| (k as i64 * 15_000 + i as i64, k as f64 / (i + 1) as f64))
                    .collect(),
                histograms: Vec::new(),
                drop_name: false,
            })
            .collect()
    }

    #[test]
    fn a_matrix_written_in_parts_is_the_matrix_written_at_once() {
        // Small answers are written on one thread, large ones (here 200k
        // points, and some series without any) in parts.
        for (series, points) in [(0, 0), (1, 3), (3, 0), (400, 500), (7, 40_000)] {
            let answer = answer(series, points);
            let mut parts = String::new();
            matrix(&mut parts, &answer, usize::MAX).expect("fits");
            let mut whole = String::from("[");
            let written = std::sync::atomic::AtomicUsize::new(0);
            matrix_series(&mut whole, &answer, usize::MAX, &written).expect("fits");
            whole.push(']');
            assert_eq!(parts, whole, "{series} series x {points} points");
            serde_json::from_str::<serde_json::Value>(&parts).expect("valid JSON");
            // Closing the answer does not grow (and copy) it again.
            let room = parts.capacity();
            parts.push_str("}}");
            assert_eq!(parts.capacity(), room, "{series} series x {points} points");
        }
        // Past the bound, in parts as at once: an error, not a partial answer.
        let big = answer(400, 500);
        let mut out = String::new();
        assert!(matrix(&mut out, &big, 100_000).is_err());
    }

    #[test]
    fn strings_are_written_as_json_would() {
        for s in [
            "",
            "plain",
            "10.0.0.1:9100",
            "quote\"d",
            "back\\slash",
            "new\nline\ttab\u{1}",
            "ünïcödé ✓",
            "</script>",
        ] {
            let mut out = String::new();
            push_json_str(&mut out, s);
            let back: String = serde_json::from_str(&out).expect("valid JSON");
            assert_eq!(back, s);
            assert_eq!(out, serde_json::to_string(s).expect("serialises"));
        }
    }
}
