//! `POST /v1/metrics` and `POST /api/v1/otlp/v1/metrics`: the OTLP/HTTP
//! metrics receiver.
//!
//! Replies follow the OTLP/HTTP contract, in the request's content type:
//! 200 with an `ExportMetricsServiceResponse` (with `partial_success` when
//! points were rejected: the client must not retry those); 400 with a
//! `google.rpc.Status` for a body that cannot be decoded; 413 for a body
//! over the limit after decompression; 415 for a content type or encoding
//! other than protobuf/JSON and gzip/none. 503 (a timeout) is the only
//! retryable answer Sluice gives today.

use std::io::Read as _;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use prost::Message as _;

use super::error::ApiError;
use super::state::{AppState, WriteRules};
use super::tenant::{Tenant, Writer};
use crate::ingest::otlp::{self, json, OtlpReport};
use crate::proto::google::rpc::Status;
use crate::proto::opentelemetry::proto::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceResponse,
};
use crate::reuse::Reused;

/// gRPC status codes used in `google.rpc.Status` bodies.
const CODE_INVALID_ARGUMENT: i32 = 3;
const CODE_RESOURCE_EXHAUSTED: i32 = 8;
const CODE_INTERNAL: i32 = 13;
const CODE_UNAVAILABLE: i32 = 14;

thread_local! {
    /// Reused buffers per worker thread: the gunzipped body, and the
    /// protobuf transcoded from a JSON body.
    static BUFS: Reused<(Vec<u8>, Vec<u8>)> = const { Reused::new((Vec::new(), Vec::new())) };
}

/// The two encodings OTLP/HTTP speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Protobuf,
    Json,
}

impl Format {
    fn content_type(self) -> &'static str {
        match self {
            Format::Protobuf => "application/x-protobuf",
            Format::Json => "application/json",
        }
    }
}

pub(super) async fn export(
    State(state): State<AppState>,
    writer: Writer,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let media = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = media.split(';').next().unwrap_or("").trim();
    let format = if essence.eq_ignore_ascii_case("application/x-protobuf") {
        Format::Protobuf
    } else if essence.eq_ignore_ascii_case("application/json") {
        Format::Json
    } else {
        let e = ApiError::UnsupportedMediaType(format!(
            "unsupported Content-Type {media:?}: OTLP/HTTP takes application/x-protobuf or application/json"
        ));
        return error_reply(Format::Protobuf, e);
    };
    // A tenant's first write opens it only once its body has passed the
    // checks that need no decoding.
    let (gzip, body) = match check_body(&state, &headers, body) {
        Ok(checked) => checked,
        Err(e) => return error_reply(format, e),
    };
    let tenant = match writer.open(state.tenants()).await {
        Ok(t) => t,
        Err(e) => return error_reply(format, ApiError::from(e)),
    };
    match handle(&state, &tenant, format, gzip, &body) {
        Ok(report) => match report.samples.commit.clone().durable().await {
            Ok(()) => success(format, &report),
            Err(e) => error_reply(format, ApiError::from(e)),
        },
        Err(e) => error_reply(format, e),
    }
}

/// The checks of a body that need no decoding: its encoding and size.
/// Whether it is gzipped, and the body.
fn check_body(
    state: &AppState,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(bool, Bytes), ApiError> {
    let gzip = match headers.get(header::CONTENT_ENCODING).map(|v| v.to_str()) {
        None => false,
        Some(Ok(v)) if v.trim().eq_ignore_ascii_case("gzip") => true,
        Some(Ok(v)) if v.trim().is_empty() || v.trim().eq_ignore_ascii_case("identity") => false,
        Some(v) => {
            return Err(ApiError::UnsupportedMediaType(format!(
                "unsupported Content-Encoding {:?}: OTLP/HTTP takes gzip or none",
                v.unwrap_or("(not text)")
            )))
        }
    };
    Ok((gzip, state.write_body(body)?))
}

fn handle(
    state: &AppState,
    tenant: &Tenant,
    format: Format,
    gzip: bool,
    body: &Bytes,
) -> Result<OtlpReport, ApiError> {
    let inner = &state.inner;
    state.check_writable(tenant, "otlp")?;
    // Each data point takes a token before anything is stored, as remote
    // write's samples do; the samples the points become beyond one each
    // (a histogram's buckets) are charged after, and an overdraft makes
    // the next requests wait.
    // HA pairs are Prometheus servers writing remote write; OTLP requests
    // are not deduplicated.
    let WriteRules {
        limits,
        labels,
        relabel,
        ..
    } = state.write_limits(tenant);
    state.check_rate_open(tenant, &limits, "otlp")?;
    let mut refused = None;
    let mut points = 0;
    let mut admit = |n: u64| {
        points = n;
        match state.take_rate(tenant, &limits, n) {
            Ok(()) => true,
            Err(e) => {
                refused = Some(e);
                false
            }
        }
    };
    let limit = inner.max_decompressed_bytes;
    let now_ms = state.now_ms();
    let report = BUFS.with(|kept| {
        kept.with(|(unzipped, transcoded)| {
            let mut bytes: &[u8] = body;
            if gzip {
                unzipped.clear();
                flate2::read::MultiGzDecoder::new(bytes)
                    .take(limit as u64 + 1)
                    .read_to_end(unzipped)
                    .map_err(|e| ApiError::BadRequest(format!("body is not valid gzip: {e}")))?;
                bytes = unzipped;
            }
            if bytes.len() > limit {
                return Err(ApiError::TooLarge(format!(
                    "decompressed body is over the limit of {limit} bytes (max-decompressed-bytes)"
                )));
            }
            if format == Format::Json {
                transcoded.clear();
                json::to_protobuf(bytes, transcoded).map_err(|e| ApiError::BadRequest(e.0))?;
                bytes = transcoded;
            }
            let result = otlp::append_export_request_admitted(
                &tenant.db,
                &tenant.otlp,
                &crate::ingest::Door {
                    limits: &labels,
                    relabel: &relabel,
                    ha: None,
                },
                bytes,
                now_ms,
                &mut admit,
            )
            .map_err(|e| {
                ApiError::BadRequest(format!("cannot decode ExportMetricsServiceRequest: {e}"))
            });
            result
        })
    })?;
    if let Some(e) = refused {
        inner.metrics.record_rate_limited("otlp");
        return Err(e);
    }
    let beyond = report.samples.accepted.saturating_sub(points);
    if beyond > 0 {
        tenant.bucket.lock().charge(beyond, &limits, Instant::now());
    }
    // Points the relabel rules dropped are not charged (Mimir counts its
    // rate after relabelling).
    let dropped = report.samples.dropped[crate::ingest::Dropped::Relabel as usize];
    if dropped > 0 {
        tenant
            .bucket
            .lock()
            .refund(dropped, &limits, Instant::now());
    }
    inner.metrics.record_ingest("otlp", &report.samples);
    tenant.stats.record(&report.samples);
    inner
        .metrics
        .record_rejected_points("otlp", &report.rejected_points);
    Ok(report)
}

fn success(format: Format, report: &OtlpReport) -> Response {
    let message = report.message();
    let partial = (!message.is_empty()).then(|| ExportMetricsPartialSuccess {
        rejected_data_points: i64::try_from(report.rejected_points_total()).unwrap_or(i64::MAX),
        error_message: message,
    });
    let body = match format {
        Format::Protobuf => ExportMetricsServiceResponse {
            partial_success: partial,
        }
        .encode_to_vec(),
        Format::Json => match partial {
            None => b"{}".to_vec(),
            // proto3 JSON writes int64 as a string.
            Some(p) => serde_json::json!({
                "partialSuccess": {
                    "rejectedDataPoints": p.rejected_data_points.to_string(),
                    "errorMessage": p.error_message,
                }
            })
            .to_string()
            .into_bytes(),
        },
    };
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, format.content_type())],
        body,
    )
        .into_response()
}

fn error_reply(format: Format, e: ApiError) -> Response {
    let mut parts = e.into_parts();
    let code = match parts.status {
        StatusCode::SERVICE_UNAVAILABLE => CODE_UNAVAILABLE,
        StatusCode::TOO_MANY_REQUESTS => CODE_RESOURCE_EXHAUSTED,
        s if s.is_server_error() => CODE_INTERNAL,
        _ => CODE_INVALID_ARGUMENT,
    };
    let message = std::mem::take(&mut parts.message);
    let body = match format {
        Format::Protobuf => Status { code, message }.encode_to_vec(),
        Format::Json => serde_json::json!({ "code": code, "message": message })
            .to_string()
            .into_bytes(),
    };
    parts.reply(format.content_type(), body)
}
