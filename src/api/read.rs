//! `POST /api/v1/read`: Prometheus' remote read, as a Prometheus with
//! `remote_read` (and Thanos' sidecar) asks it. A snappy-compressed
//! `ReadRequest` of queries (time range and matchers); the answer is either
//! every sample (`SAMPLES`: one snappy `ReadResponse`) or, when the client
//! accepts it, the stored XOR chunks themselves (`STREAMED_XOR_CHUNKS`:
//! frames of `uvarint length, CRC32C, ChunkedReadResponse`, one series per
//! frame, no re-encoding). Native histograms are held as samples, so an
//! answer that has any is sent as samples, histograms included.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use prost::Message;

use super::error::ApiError;
use super::state::AppState;
use super::tenant::Reads;
use crate::proto::prometheus as pb;
use crate::protocol::histogram;
use crate::protocol::remote_write::field;
use crate::protocol::wire::put_len_delimited;
use crate::storage::index::{MatchOp, Matcher};
use crate::storage::Stop;

const STREAMED: &str = "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse";

pub(super) async fn remote_read(
    State(state): State<AppState>,
    reads: Reads,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let st = state.clone();
    let answer = tokio::task::spawn_blocking(move || handle(&st, &reads, body)).await;
    match answer {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => e.into_response(),
        Err(e) => ApiError::Internal(format!("remote read failed: {e}")).into_response(),
    }
}

fn handle(
    state: &AppState,
    reads: &Reads,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let inner = &state.inner;
    let body = state.write_body(body)?;
    let len = snap::raw::decompress_len(&body)
        .map_err(|e| ApiError::BadRequest(format!("body is not valid snappy block data: {e}")))?;
    if len > inner.max_decompressed_bytes || len > body.len().saturating_mul(22) {
        return Err(ApiError::BadRequest(format!(
            "read request would decompress to {len} bytes: too large"
        )));
    }
    let raw = snap::raw::Decoder::new()
        .decompress_vec(&body)
        .map_err(|e| ApiError::BadRequest(format!("body is not valid snappy block data: {e}")))?;
    let req = pb::ReadRequest::decode(raw.as_slice())
        .map_err(|e| ApiError::BadRequest(format!("not a ReadRequest: {e}")))?;
    let accepts_chunks = req
        .accepted_response_types
        .contains(&(pb::read_request::ResponseType::StreamedXorChunks as i32));
    let stop = Stop {
        deadline: Some(std::time::Instant::now() + inner.query.timeout),
        flag: None,
        bytes: None,
    };
    let mut selections = Vec::with_capacity(req.queries.len());
    for q in &req.queries {
        let matchers = q
            .matchers
            .iter()
            .map(|m| {
                let op = match pb::label_matcher::Type::try_from(m.r#type) {
                    Ok(pb::label_matcher::Type::Eq) => MatchOp::Equal,
                    Ok(pb::label_matcher::Type::Neq) => MatchOp::NotEqual,
                    Ok(pb::label_matcher::Type::Re) => MatchOp::Regex,
                    Ok(pb::label_matcher::Type::Nre) => MatchOp::NotRegex,
                    Err(_) => {
                        return Err(ApiError::BadRequest(format!(
                            "unknown matcher type {}",
                            m.r#type
                        )))
                    }
                };
                Matcher::new(op, &m.name, &m.value).map_err(|e| ApiError::BadRequest(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        // Every matcher set Prometheus' handler takes is taken: one whose
        // matchers all match the empty value (`__name__=~".*"`, what
        // vmctl sends by default) selects every series they match; none
        // at all selects nothing, as Prometheus' postings intersection of
        // no lists does.
        if matchers.is_empty() {
            selections.push(Vec::new());
            continue;
        }
        let (mint, maxt) = (q.start_timestamp_ms, q.end_timestamp_ms);
        let mut selected = reads
            .with_querier(|q| q.select_until(&matchers, mint, maxt, &stop))
            .map_err(|_| ApiError::Overloaded("remote read timed out".into()))?;
        selected.sort_by(|a, b| a.labels.cmp(&b.labels));
        selections.push(selected);
    }
    // Histograms are held as samples, not chunks: an answer with any goes
    // as samples, which every client takes (Prometheus lists both types).
    let has_histograms = selections
        .iter()
        .flatten()
        .any(|s| !s.histograms.is_empty());
    let streamed = accepts_chunks && !has_histograms;
    let mut out = Vec::new();
    // A sampled answer's size so far (before compression).
    let mut out_bytes = 0usize;
    // A sampled answer, `ReadResponse` bytes, one `QueryResult` at a time.
    let mut raw = Vec::new();
    let mut msg = Vec::new();
    for (qi, (q, selected)) in req.queries.iter().zip(&selections).enumerate() {
        let (mint, maxt) = (q.start_timestamp_ms, q.end_timestamp_ms);
        let mut result = Vec::new();
        for s in selected {
            let labels: Vec<pb::Label> = s
                .labels
                .iter()
                .map(|l| pb::Label {
                    name: l.name.to_string(),
                    value: l.value.to_string(),
                })
                .collect();
            if streamed {
                let chunks: Vec<pb::Chunk> = s
                    .chunks
                    .iter()
                    .filter(|c| c.maxt >= mint && c.mint <= maxt)
                    .map(|c| pb::Chunk {
                        min_time_ms: c.mint,
                        max_time_ms: c.maxt,
                        r#type: pb::chunk::Encoding::Xor as i32,
                        data: c.bytes.to_vec(),
                    })
                    .collect();
                if chunks.is_empty() {
                    continue;
                }
                let frame = pb::ChunkedReadResponse {
                    chunked_series: vec![pb::ChunkedSeries { labels, chunks }],
                    query_index: qi as i64,
                }
                .encode_to_vec();
                crate::encoding::put_uvarint(&mut out, frame.len() as u64);
                out.extend_from_slice(&crc32c::crc32c(&frame).to_be_bytes());
                out.extend_from_slice(&frame);
            } else {
                let samples: Vec<pb::Sample> = s
                    .samples(mint, maxt)
                    .map(|(timestamp, value)| pb::Sample { value, timestamp })
                    .collect();
                let in_range = s
                    .histograms
                    .iter()
                    .filter(|(t, _)| (mint..=maxt).contains(t));
                if samples.is_empty() && in_range.clone().next().is_none() {
                    continue;
                }
                // The labels and floats through prost; each histogram
                // appended as its wire message, straight from the model.
                let mut ts = pb::TimeSeries {
                    labels,
                    samples,
                    ..Default::default()
                }
                .encode_to_vec();
                for (t, h) in in_range {
                    msg.clear();
                    histogram::encode(*t, h, &mut msg);
                    put_len_delimited(&mut ts, field::TIMESERIES_HISTOGRAMS, &msg);
                }
                put_len_delimited(&mut result, field::QUERY_RESULT_TIMESERIES, &ts);
                out_bytes = raw.len() + result.len();
            }
            if out.len().max(out_bytes) > inner.max_response_bytes {
                return Err(ApiError::TooLarge(format!(
                    "remote read answer exceeds {} bytes (max-response-bytes)",
                    inner.max_response_bytes
                )));
            }
        }
        put_len_delimited(&mut raw, field::READ_RESPONSE_RESULTS, &result);
    }
    if streamed {
        return Ok((
            StatusCode::OK,
            [(header::CONTENT_TYPE, HeaderValue::from_static(STREAMED))],
            out,
        )
            .into_response());
    }
    let packed = snap::raw::Encoder::new()
        .compress_vec(&raw)
        .map_err(|e| ApiError::Internal(format!("cannot compress the answer: {e}")))?;
    Ok((
        StatusCode::OK,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/x-protobuf"),
            ),
            (header::CONTENT_ENCODING, HeaderValue::from_static("snappy")),
        ],
        packed,
    )
        .into_response())
}
