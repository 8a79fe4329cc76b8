//! `GET /federate?match[]=…`: the newest sample of each matched series, in
//! the Prometheus text format, for another Prometheus to scrape (with
//! `honor_labels: true`). Follows Prometheus' `web/federate.go`: the union
//! of the selectors; the newest sample within the lookback; series whose
//! newest sample is a stale marker are left out; every family is
//! `untyped`; `instance=""` is added where a series has no `instance`;
//! every sample carries its millisecond timestamp.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::params::Params;
use super::prom::ErrorType;
use super::state::AppState;
use crate::promql::value::format_float;
use crate::storage::labels::Label;
use crate::storage::{Stop, STALE_NAN};

/// The text exposition format's content type.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

pub(super) async fn federate(
    State(state): State<AppState>,
    p: Params,
) -> Result<Response, ApiError> {
    // A bad selector is a plain-text 400, as Prometheus answers it.
    let selectors = p
        .selectors(&state.query_options().parse)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let now = state.now_ms();
    let mint = now - state.query_options().lookback_ms;
    let head = state.head_arc();
    let max = state.max_response_bytes();
    let out = state
        .read(state.query_options().timeout, move |flag| {
            let stop = Stop {
                flag: Some(&flag),
                deadline: None,
            };
            // Keyed by metric name, then labels: families in name order.
            let mut newest: BTreeMap<(String, Vec<Label>), (i64, f64)> = BTreeMap::new();
            for matchers in &selectors {
                for s in head.select_until(matchers, mint, now, &stop)? {
                    let Some(last) = s.samples(mint, now).last() else {
                        continue;
                    };
                    if last.1.to_bits() != STALE_NAN {
                        let name = s.label("__name__").unwrap_or("").to_owned();
                        // A series matched by several selectors is written once.
                        newest.entry((name, s.labels)).or_insert(last);
                    }
                }
            }
            let mut out = String::with_capacity(newest.len() * 96);
            let mut family = None;
            for ((name, labels), (t, v)) in &newest {
                if family != Some(name) {
                    let _ = writeln!(out, "# TYPE {name} untyped");
                    family = Some(name);
                }
                write_sample(&mut out, name, labels, *t, *v);
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
    Ok(([(header::CONTENT_TYPE, TEXT_FORMAT)], out).into_response())
}

/// One line: `name{labels} value timestamp_ms`.
fn write_sample(out: &mut String, name: &str, labels: &[Label], t: i64, v: f64) {
    out.push_str(name);
    out.push('{');
    let mut first = true;
    let mut instance = false;
    for l in labels.iter().filter(|l| l.name != "__name__") {
        if !instance && l.name.as_str() > "instance" {
            push_label(out, &mut first, "instance", "");
            instance = true;
        }
        instance |= l.name == "instance";
        push_label(out, &mut first, &l.name, &l.value);
    }
    if !instance {
        push_label(out, &mut first, "instance", "");
    }
    out.push_str("} ");
    format_float(v, out);
    let _ = writeln!(out, " {t}");
}

fn push_label(out: &mut String, first: &mut bool, name: &str, value: &str) {
    if !*first {
        out.push(',');
    }
    *first = false;
    out.push_str(name);
    out.push_str("=\"");
    for c in value.chars() {
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
            "m",
            &[label("__name__", "m"), label("instance", "i")],
            -5,
            1.5,
        );
        assert_eq!(out, "m{instance=\"i\"} 1.5 -5\n");
        out.clear();
        write_sample(
            &mut out,
            "m",
            &[label("__name__", "m"), label("a", "1")],
            1,
            f64::NAN,
        );
        assert_eq!(out, "m{a=\"1\",instance=\"\"} NaN 1\n");
    }
}
