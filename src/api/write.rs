//! `POST /api/v1/write`: the remote-write 1.0 and 2.0 receiver, the
//! version chosen by `Content-Type` as the 2.0 spec requires.
//!
//! Status codes follow the spec so that senders do the right thing: 204 when
//! everything was stored; 400 (not retried) when some data is invalid, with
//! the valid rest stored; 413 for bodies over a limit; 415 for an encoding
//! or message type we do not speak. 5xx is kept for faults a retry can fix.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::state::{AppState, WriteRules};
use super::tenant::{Tenant, Writer};
use crate::ingest;
use crate::reuse::Reused;

/// The remote-write version header, sent back on every reply.
static VERSION_HEADER: HeaderName = HeaderName::from_static("x-prometheus-remote-write-version");

/// What a 2.0 reply says was written (spec: "Required Written Response
/// Headers"), on success and on failure.
static SAMPLES_WRITTEN: HeaderName =
    HeaderName::from_static("x-prometheus-remote-write-samples-written");
static HISTOGRAMS_WRITTEN: HeaderName =
    HeaderName::from_static("x-prometheus-remote-write-histograms-written");
static EXEMPLARS_WRITTEN: HeaderName =
    HeaderName::from_static("x-prometheus-remote-write-exemplars-written");

/// The message a request carries, by its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    /// `prometheus.WriteRequest`.
    V1,
    /// `io.prometheus.write.v2.Request`.
    V2,
}

impl Version {
    fn header(self) -> HeaderValue {
        HeaderValue::from_static(match self {
            Version::V1 => "0.1.0",
            Version::V2 => "2.0.0",
        })
    }

    /// The protocol label of its metrics.
    fn protocol(self) -> &'static str {
        match self {
            Version::V1 => "remote_write",
            Version::V2 => "remote_write_2",
        }
    }
}

/// The first bytes of a snappy *framed* stream (which PRW forbids).
const SNAPPY_FRAMED_MAGIC: &[u8] = b"\xff\x06\x00\x00sNaPpY";

/// The most a snappy block can expand: a 3-byte copy element makes 64
/// bytes (21.3×), rounded up.
const SNAPPY_MAX_RATIO: usize = 22;

thread_local! {
    /// Reused decompression buffer: one per worker thread, not per request.
    static DECODE_BUF: Reused<Vec<u8>> = const { Reused::new(Vec::new()) };
}

pub(super) async fn remote_write(
    State(state): State<AppState>,
    writer: Writer,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let version = check_content_type(&headers);
    let replied_as = version.as_ref().map_or(Version::V1, |v| *v);
    // Samples and exemplars durably written: what a 2.0 reply reports.
    let (mut written, mut exemplars_written, mut histograms_written) = (0, 0, 0);
    // A tenant's first write opens it only once its body has passed the
    // checks that need no decoding.
    let checked = match version.and_then(|v| check_body(&state, &headers, body).map(|b| (v, b))) {
        Ok((v, b)) => match writer.open(state.tenants()).await {
            Ok(tenant) => Ok((v, b, tenant)),
            Err(e) => Err(ApiError::from(e)),
        },
        Err(e) => Err(e),
    };
    let appended =
        checked.and_then(|(v, (body, len), tenant)| append(&state, &tenant, v, &body, len));
    let result = match appended {
        // What was stored must be durable before any reply, 400 included:
        // a sender does not retry a 400, so its valid part must not be lost.
        Ok(report) => match report.commit.clone().durable().await {
            Ok(()) => {
                written = report.accepted - report.histograms_written;
                histograms_written = report.histograms_written;
                exemplars_written = report.exemplars_written;
                if report.is_partial() {
                    Err(ApiError::BadRequest(report.message()))
                } else {
                    Ok(report.deduplicated)
                }
            }
            Err(e) => Err(ApiError::from(e)),
        },
        Err(e) => Err(e),
    };
    let mut resp = match result {
        Ok(None) => StatusCode::NO_CONTENT.into_response(),
        // The replica of an HA pair that is not elected: accepted, not
        // stored (Mimir's 202), so its sender moves on.
        Ok(Some(why)) => (StatusCode::ACCEPTED, why).into_response(),
        Err(e) => e.into_response(),
    };
    let version = replied_as;
    let headers = resp.headers_mut();
    headers.insert(VERSION_HEADER.clone(), version.header());
    if version == Version::V2 {
        headers.insert(SAMPLES_WRITTEN.clone(), HeaderValue::from(written));
        headers.insert(
            HISTOGRAMS_WRITTEN.clone(),
            HeaderValue::from(histograms_written),
        );
        headers.insert(
            EXEMPLARS_WRITTEN.clone(),
            HeaderValue::from(exemplars_written),
        );
    }
    resp
}

/// The checks of a body that need no decoding: its encoding, size and
/// snappy header. The body and its decompressed length.
fn check_body(
    state: &AppState,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(Bytes, usize), ApiError> {
    check_content_encoding(headers)?;
    let inner = &state.inner;
    let body = state.write_body(body)?;
    if body.starts_with(SNAPPY_FRAMED_MAGIC) {
        return Err(ApiError::BadRequest(
            "body uses the snappy framed format; remote write requires the snappy block format"
                .into(),
        ));
    }
    let len = snap::raw::decompress_len(&body)
        .map_err(|e| ApiError::BadRequest(format!("body is not valid snappy block data: {e}")))?;
    if len > inner.max_decompressed_bytes {
        return Err(ApiError::TooLarge(format!(
            "decompressed body would be {len} bytes, over the limit of {} bytes (max-decompressed-bytes)",
            inner.max_decompressed_bytes
        )));
    }
    // A snappy element expands at most 64 bytes from 3: a header claiming
    // more than 22 times the body's size is a lie, refused before the
    // buffer it asks for is allocated.
    if len > body.len().saturating_mul(SNAPPY_MAX_RATIO) {
        return Err(ApiError::BadRequest(format!(
            "body is not valid snappy block data: its header claims {len} bytes, more than \
             {} compressed bytes can hold",
            body.len()
        )));
    }
    Ok((body, len))
}

/// Decodes the checked `body` (`len` bytes decompressed) into `tenant`'s
/// database.
fn append(
    state: &AppState,
    tenant: &Tenant,
    version: Version,
    body: &Bytes,
    len: usize,
) -> Result<ingest::IngestReport, ApiError> {
    let inner = &state.inner;
    state.check_writable(tenant, version.protocol())?;
    let WriteRules {
        limits,
        labels,
        relabel,
        ha,
    } = state.write_limits(tenant);
    let door = ingest::Door {
        limits: &labels,
        relabel: &relabel,
        ha: ha.as_ref().map(|config| (&tenant.ha, config)),
    };
    state.check_rate_open(tenant, &limits, version.protocol())?;
    // The rate limit is asked once the request's samples are counted,
    // before anything of it is stored.
    let mut refused = None;
    let mut admit = |samples: u64| match state.take_rate(tenant, &limits, samples) {
        Ok(()) => true,
        Err(e) => {
            refused = Some(e);
            false
        }
    };
    let now_ms = state.now_ms();
    let report = DECODE_BUF.with(|kept| {
        kept.with(|buf| {
            if buf.len() < len {
                buf.resize(len, 0);
            }
            let n = snap::raw::Decoder::new()
                .decompress(body, &mut buf[..len])
                .map_err(|e| {
                    ApiError::BadRequest(format!("body is not valid snappy block data: {e}"))
                })?;
            let body = &buf[..n];
            match version {
                Version::V1 => {
                    ingest::append_write_request_admitted(
                        &tenant.db, body, &door, now_ms, &mut admit,
                    )
                }
                .map_err(|e| ApiError::BadRequest(format!("cannot decode WriteRequest: {e}"))),
                Version::V2 => ingest::append_write_request_v2_admitted(
                    &tenant.db,
                    body,
                    &door,
                    inner.v2.created_timestamp_zero_ingestion,
                    now_ms,
                    &mut admit,
                )
                .map_err(|e| {
                    ApiError::BadRequest(format!(
                        "cannot decode io.prometheus.write.v2.Request: {e}"
                    ))
                }),
            }
        })
    })?;
    if let Some(e) = refused {
        inner.metrics.record_rate_limited(version.protocol());
        return Err(e);
    }
    let dropped = report.dropped[ingest::Dropped::Relabel as usize];
    if dropped > 0 {
        tenant
            .bucket
            .lock()
            .refund(dropped, &limits, std::time::Instant::now());
    }
    inner.metrics.record_ingest(version.protocol(), &report);
    tenant.stats.record(&report);
    Ok(report)
}

/// The message the request carries: a missing Content-Type, or protobuf
/// without a `proto=` parameter, means 1.0 (as Prometheus treats it);
/// `proto=` names 1.0 or 2.0; anything else is 415.
fn check_content_type(headers: &HeaderMap) -> Result<Version, ApiError> {
    let Some(v) = headers.get(header::CONTENT_TYPE) else {
        return Ok(Version::V1);
    };
    let v = v.to_str().unwrap_or("");
    let mut parts = v.split(';');
    let media = parts.next().unwrap_or("").trim();
    if !media.eq_ignore_ascii_case("application/x-protobuf") {
        return Err(ApiError::UnsupportedMediaType(format!(
            "unsupported Content-Type {v:?}: remote write needs application/x-protobuf"
        )));
    }
    let mut version = Version::V1;
    for p in parts {
        let Some((k, val)) = p.split_once('=') else {
            continue;
        };
        if k.trim().eq_ignore_ascii_case("proto") {
            version = match val.trim().trim_matches('"') {
                "prometheus.WriteRequest" => Version::V1,
                "io.prometheus.write.v2.Request" => Version::V2,
                other => {
                    return Err(ApiError::UnsupportedMediaType(format!(
                        "unsupported remote write message {other:?}: this receiver speaks \
                         prometheus.WriteRequest (1.0) and io.prometheus.write.v2.Request (2.0)"
                    )))
                }
            };
        }
    }
    Ok(version)
}

/// A missing Content-Encoding is taken as snappy; anything else is refused.
fn check_content_encoding(headers: &HeaderMap) -> Result<(), ApiError> {
    match headers.get(header::CONTENT_ENCODING) {
        None => Ok(()),
        Some(v)
            if v.to_str()
                .is_ok_and(|s| s.trim().eq_ignore_ascii_case("snappy")) =>
        {
            Ok(())
        }
        Some(v) => Err(ApiError::UnsupportedMediaType(format!(
            "unsupported Content-Encoding {:?}: remote write needs snappy",
            String::from_utf8_lossy(v.as_bytes())
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::SNAPPY_MAX_RATIO;

    #[test]
    fn no_real_snappy_block_expands_past_the_plausibility_ratio() {
        // Runs of one byte are snappy's best case: all 64-byte copies.
        for len in [1usize, 100, 65_536, 4 << 20] {
            let raw = vec![0u8; len];
            let packed = snap::raw::Encoder::new()
                .compress_vec(&raw)
                .expect("compresses");
            assert!(
                len <= packed.len() * SNAPPY_MAX_RATIO,
                "{len} bytes packed into {}",
                packed.len()
            );
        }
    }
}
