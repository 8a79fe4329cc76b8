//! `GET /federate?match[]=…`: the newest sample of each matched series, in
//! the Prometheus text format, for another Prometheus to scrape (with
//! `honor_labels: true`). Follows Prometheus' `web/federate.go`: the union
//! of the selectors; the newest sample within the lookback; series whose
//! newest sample is a stale marker are left out; every family is
//! `untyped`; `instance=""` is added where a series has no `instance`;
//! every sample carries its millisecond timestamp. Names outside the
//! classic grammar are written in the escaping scheme the client's
//! `Accept` asks for (`escaping=allow-utf-8` quotes them), else with `_`
//! for each character the grammar lacks, as Prometheus 3 does.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::escaping::Escaping;
use super::params::Params;
use super::prom::ErrorType;
use super::state::AppState;
use super::tenant::Reads;
use crate::promql::value::format_float;
use crate::storage::labels::{is_valid_label_name, is_valid_metric_name, Label};
use crate::storage::{Stop, STALE_NAN};

/// The text exposition format's content type, before its `escaping=`.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

pub(super) async fn federate(
    State(state): State<AppState>,
    reads: Reads,
    headers: HeaderMap,
    p: Params,
) -> Result<Response, ApiError> {
    let escaping = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .map_or(Escaping::Underscores, Escaping::from_accept);
    // A bad selector is a plain-text 400, as Prometheus answers it.
    let selectors = p
        .selectors(&state.query_options().parse)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let now = state.now_ms();
    let mint = now - state.query_options().lookback_ms;
    let max = state.max_response_bytes();
    let out = state
        .read(state.query_options().timeout, move |flag| {
            let stop = Stop {
                flag: Some(&flag),
                bytes: None,
                deadline: None,
            };
            // Keyed by metric name, then labels: families in name order.
            let mut newest: BTreeMap<(String, Vec<Label>), (i64, f64)> = BTreeMap::new();
            reads.with_querier(|q| -> Result<(), crate::storage::Stopped> {
                for matchers in &selectors {
                    for s in q.select_newest_until(matchers, mint, now, &stop)? {
                        let Some(last) = s.last_sample(mint, now) else {
                            continue;
                        };
                        if last.1.to_bits() != STALE_NAN {
                            let name = s.label("__name__").unwrap_or("").to_owned();
                            // A series matched by several selectors is written once.
                            newest.entry((name, s.labels)).or_insert(last);
                        }
                    }
                }
                Ok(())
            })?;
            let mut out = String::with_capacity(newest.len() * 96);
            let mut family = None;
            for ((name, labels), (t, v)) in &newest {
                if family != Some(name) {
                    out.push_str("# TYPE ");
                    push_name(&mut out, escaping, name);
                    out.push_str(" untyped\n");
                    family = Some(name);
                }
                write_sample(&mut out, escaping, name, labels, *t, *v);
                if out.len() > max {
                    return Err(ApiError::Prom {
                        kind: ErrorType::Execution,
                        message: format!(
                            "the answer would be larger than query-max-response-bytes \
                             ({max} bytes); federate fewer series"
                        ),
                    });
                }
            }
            Ok(out)
        })
        .await?;
    let content_type = format!("{TEXT_FORMAT}; escaping={}", escaping.as_str());
    Ok(([(header::CONTENT_TYPE, content_type)], out).into_response())
}

/// Whether `name` must be quoted to be written as it is.
fn needs_quotes(escaping: Escaping, name: &str) -> bool {
    escaping == Escaping::AllowUtf8 && !is_valid_metric_name(name.as_bytes())
}

/// A metric or label name, escaped or quoted.
fn push_name(out: &mut String, escaping: Escaping, name: &str) {
    if needs_quotes(escaping, name) {
        push_quoted(out, name);
    } else {
        out.push_str(&escaping.escape(name));
    }
}

/// One line: `name{labels} value timestamp_ms`, or `{"name",labels} …`
/// for a name that has to be quoted.
fn write_sample(
    out: &mut String,
    escaping: Escaping,
    name: &str,
    labels: &[Label],
    t: i64,
    v: f64,
) {
    let mut first = true;
    if needs_quotes(escaping, name) {
        out.push('{');
        push_quoted(out, name);
        first = false;
    } else {
        out.push_str(&escaping.escape(name));
        out.push('{');
    }
    let mut instance = false;
    for l in labels.iter().filter(|l| l.name != "__name__") {
        if !instance && l.name.as_str() > "instance" {
            push_label(out, escaping, &mut first, "instance", "");
            instance = true;
        }
        instance |= l.name == "instance";
        push_label(out, escaping, &mut first, &l.name, &l.value);
    }
    if !instance {
        push_label(out, escaping, &mut first, "instance", "");
    }
    out.push_str("} ");
    format_float(v, out);
    let _ = writeln!(out, " {t}");
}

fn push_label(out: &mut String, escaping: Escaping, first: &mut bool, name: &str, value: &str) {
    if !*first {
        out.push(',');
    }
    *first = false;
    if escaping == Escaping::AllowUtf8 && !is_valid_label_name(name.as_bytes()) {
        push_quoted(out, name);
    } else {
        out.push_str(&escaping.escape(name));
    }
    out.push('=');
    push_quoted(out, value);
}

/// `s` in double quotes, with `\\`, `"` and newlines escaped.
fn push_quoted(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(n: &str, v: &str) -> Label {
        Label {
            name: n.into(),
            value: v.into(),
        }
    }

    #[test]
    fn lines_escape_values_and_add_an_empty_instance() {
        let mut out = String::new();
        write_sample(
            &mut out,
            Escaping::Underscores,
            "up",
            &[
                label("__name__", "up"),
                label("job", "a\"b\\c\nd"),
                label("zone", "z"),
            ],
            6_000_000,
            f64::INFINITY,
        );
        assert_eq!(
            out,
            "up{instance=\"\",job=\"a\\\"b\\\\c\\nd\",zone=\"z\"} +Inf 6000000\n"
        );
        out.clear();
        write_sample(
            &mut out,
            Escaping::Underscores,
            "m",
            &[label("__name__", "m"), label("instance", "i")],
            -5,
            1.5,
        );
        assert_eq!(out, "m{instance=\"i\"} 1.5 -5\n");
        out.clear();
        write_sample(
            &mut out,
            Escaping::Underscores,
            "m",
            &[label("__name__", "m"), label("a", "1")],
            1,
            f64::NAN,
        );
        assert_eq!(out, "m{a=\"1\",instance=\"\"} NaN 1\n");
    }

    #[test]
    fn utf8_names_are_escaped_or_quoted_as_asked() {
        let labels = [label("__name__", "http.dur"), label("svc.name", "api")];
        let mut out = String::new();
        write_sample(&mut out, Escaping::Underscores, "http.dur", &labels, 1, 2.0);
        assert_eq!(out, "http_dur{instance=\"\",svc_name=\"api\"} 2 1\n");
        out.clear();
        write_sample(&mut out, Escaping::AllowUtf8, "http.dur", &labels, 1, 2.0);
        assert_eq!(
            out,
            "{\"http.dur\",instance=\"\",\"svc.name\"=\"api\"} 2 1\n"
        );
        out.clear();
        let classic = [label("__name__", "up"), label("job", "a")];
        write_sample(&mut out, Escaping::AllowUtf8, "up", &classic, 1, 2.0);
        assert_eq!(out, "up{instance=\"\",job=\"a\"} 2 1\n");
    }
}
