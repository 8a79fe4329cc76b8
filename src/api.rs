//! The HTTP edge: [`router`] wires the routes and tower layers, and
//! [`ApiError`] is the one mapping from errors to HTTP replies.

mod federate;
mod metadata;
mod otlp;
pub mod params;
pub mod prom;
mod query;
mod slots;
mod status;
mod write;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::timeout::TimeoutLayer;

use crate::config::Config;
use crate::ingest::otlp::Otlp;
use crate::ingest::validate::LabelLimits;
use crate::promql::{QueryError, QueryOptions};
use crate::storage::head::Head;
use crate::storage::metadata::MetadataStore;
use crate::storage::Clock;
use crate::telemetry::Metrics;
use prom::ErrorType;

/// Shared state of every handler: a cheap clone.
#[derive(Debug, Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    head: Arc<Head>,
    metadata: MetadataStore,
    otlp: Otlp,
    query: QueryOptions,
    slots: slots::Slots,
    metrics: Metrics,
    limits: LabelLimits,
    max_body_bytes: usize,
    max_decompressed_bytes: usize,
    max_form_bytes: usize,
    max_response_bytes: usize,
    request_timeout: Duration,
    clock: Clock,
    /// Head bytes at which writes are pushed back.
    high_water_bytes: usize,
    memory_limit: u64,
    /// Settings by flag name, for the status page.
    flags: Vec<(String, String)>,
    started: Instant,
    /// When the status page was last viewed and the samples ingested then.
    last_view: parking_lot::Mutex<(Instant, u64)>,
}

impl AppState {
    /// State over `head`, with the limits from `config`.
    pub fn new(config: &Config, head: Arc<Head>) -> Self {
        Self::with_clock(config, head, Clock::system())
    }

    /// Like [`AppState::new`], reading time from `clock`.
    pub fn with_clock(config: &Config, head: Arc<Head>, clock: Clock) -> Self {
        let memory_limit = config.memory_limit();
        let metrics = Metrics::new(Arc::clone(&head), memory_limit);
        let slots = slots::Slots::new(
            config.query_max_concurrency,
            config.query_max_depth,
            metrics.queries_running(),
            metrics.queries_timed_out(),
        );
        Self {
            inner: Arc::new(Inner {
                metrics,
                slots,
                clock,
                memory_limit,
                flags: config.flags(),
                started: Instant::now(),
                last_view: parking_lot::Mutex::new((Instant::now(), 0)),
                high_water_bytes: usize::try_from(memory_limit / 10 * 8).unwrap_or(usize::MAX),
                head,
                metadata: MetadataStore::new(
                    config.max_metadata_families,
                    config.max_metadata_bytes,
                ),
                otlp: Otlp::new(config.otlp_options(), config.max_series),
                query: config.query_options(),
                limits: config.label_limits(),
                max_body_bytes: config.max_body_bytes,
                max_decompressed_bytes: config.max_decompressed_bytes,
                max_form_bytes: config.query_max_form_bytes,
                max_response_bytes: config.query_max_response_bytes,
                request_timeout: config.request_timeout,
            }),
        }
    }

    /// Now, in Unix milliseconds, by the state's clock.
    pub fn now_ms(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    /// The clock, for background tasks.
    pub fn clock(&self) -> Clock {
        self.inner.clock.clone()
    }

    /// Refuses a write while the head is at its memory high-water mark.
    pub(crate) fn check_memory(&self, protocol: &'static str) -> Result<(), ApiError> {
        let held = self.inner.head.accounted_bytes()
            + self.inner.metadata.bytes()
            + self.inner.otlp.delta.bytes();
        if held < self.inner.high_water_bytes {
            return Ok(());
        }
        self.inner.metrics.record_throttled(protocol);
        Err(ApiError::Throttled(format!(
            "memory limit reached: the head, metadata and delta totals hold {held} bytes, at or over the high-water \
             mark of {} bytes (80% of max-memory {}); retry later, as old data ages out \
             (retention) or series are deleted",
            self.inner.high_water_bytes, self.inner.memory_limit
        )))
    }

    /// The head.
    pub fn head(&self) -> &Head {
        &self.inner.head
    }

    /// A shared handle to the head, for work moved off the async threads.
    pub fn head_arc(&self) -> Arc<Head> {
        Arc::clone(&self.inner.head)
    }

    /// Waits until the WAL holds everything up to `lsn` durably (by the
    /// fsync mode); a WAL that cannot write is a server fault.
    pub(crate) async fn durable(&self, lsn: u64) -> Result<(), ApiError> {
        self.inner
            .head
            .durable(lsn)
            .await
            .map_err(|e| ApiError::Internal(format!("the write-ahead log failed: {e}")))
    }

    /// Default limits of queries.
    pub fn query_options(&self) -> &QueryOptions {
        &self.inner.query
    }

    /// Largest form body of a query API request.
    pub(crate) fn max_form_bytes(&self) -> usize {
        self.inner.max_form_bytes
    }

    /// Largest answer of the query API and federation.
    pub(crate) fn max_response_bytes(&self) -> usize {
        self.inner.max_response_bytes
    }

    /// Runs read work (`work` gets a stop flag) on a query slot, within
    /// `timeout`.
    pub(crate) async fn read<T: Send + 'static>(
        &self,
        timeout: std::time::Duration,
        work: impl FnOnce(Arc<std::sync::atomic::AtomicBool>) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        self.inner.slots.run(timeout, work).await
    }

    /// Stops running queries and refuses new ones: the server is shutting
    /// down.
    pub fn close_reads(&self) {
        self.inner.slots.close();
    }

    /// Metric metadata reported by senders.
    pub fn metadata(&self) -> &MetadataStore {
        &self.inner.metadata
    }
}

/// Every error a handler can return. Client mistakes are 4xx and are not
/// logged as errors; server faults are 5xx with details only in the log.
/// The write endpoints answer in plain text (the remote-write contract);
/// the query API answers in Prometheus' JSON envelope ([`ApiError::Prom`]).
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A query-API error, answered as `{"status":"error","errorType":…}`.
    #[error("{message}")]
    Prom {
        /// The Prometheus error type, which fixes the status code.
        kind: ErrorType,
        /// What went wrong.
        message: String,
    },
    /// The request is malformed or holds invalid data (400).
    #[error("{0}")]
    BadRequest(String),
    /// The body is larger than allowed (413).
    #[error("{0}")]
    TooLarge(String),
    /// The Content-Type or Content-Encoding is not supported (415).
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// Writes are pushed back: the head is at its memory limit (429, with
    /// `Retry-After`).
    #[error("{0}")]
    Throttled(String),
    /// Something failed on our side (500); the message goes to the log only.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    /// A `bad_data` query-API error.
    pub fn bad_data(message: impl Into<String>) -> Self {
        Self::Prom {
            kind: ErrorType::BadData,
            message: message.into(),
        }
    }

    /// A `bad_data` error for one parameter, worded as Prometheus words it.
    pub fn bad_param(name: &str, err: impl std::fmt::Display) -> Self {
        Self::bad_data(format!("invalid parameter {name:?}: {err}"))
    }
}

impl ApiError {
    /// The HTTP status, the message a client may see, and for a server
    /// fault the details kept out of the reply (for the log).
    fn into_parts(self) -> (StatusCode, String, Option<String>) {
        match self {
            ApiError::Prom { kind, message } => (kind.status(), message, None),
            ApiError::BadRequest(m) => (StatusCode::BAD_REQUEST, m, None),
            ApiError::TooLarge(m) => (StatusCode::PAYLOAD_TOO_LARGE, m, None),
            ApiError::UnsupportedMediaType(m) => (StatusCode::UNSUPPORTED_MEDIA_TYPE, m, None),
            ApiError::Throttled(m) => (StatusCode::TOO_MANY_REQUESTS, m, None),
            ApiError::Internal(m) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal error; see the server log".to_owned(),
                Some(m),
            ),
        }
    }
}

/// A server fault's details, carried on its 5xx reply for [`observe`] to
/// log: building a reply has no side effects.
#[derive(Debug, Clone)]
struct Fault(String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Prom { kind, message } = &self {
            let mut resp = prom::error(*kind, message);
            if matches!(kind, ErrorType::Internal) {
                resp.extensions_mut().insert(Fault(message.clone()));
            }
            return resp;
        }
        let (status, body, fault) = self.into_parts();
        let mut resp = with_retry_after(
            (
                status,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                body + "\n",
            )
                .into_response(),
        );
        if let Some(fault) = fault {
            resp.extensions_mut().insert(Fault(fault));
        }
        resp
    }
}

impl From<QueryError> for ApiError {
    fn from(e: QueryError) -> Self {
        let kind = match &e {
            QueryError::BadData(_) => return ApiError::bad_param("query", e),
            QueryError::Execution(_) | QueryError::TooManySamples(_) => ErrorType::Execution,
            QueryError::Timeout(_) => ErrorType::Timeout,
        };
        ApiError::Prom {
            kind,
            message: e.to_string(),
        }
    }
}

/// Seconds a pushed-back sender is asked to wait.
const RETRY_AFTER_SECONDS: &str = "5";

/// Adds `Retry-After` to a 429 reply.
fn with_retry_after(mut resp: Response) -> Response {
    if resp.status() == StatusCode::TOO_MANY_REQUESTS {
        resp.headers_mut().insert(
            header::RETRY_AFTER,
            header::HeaderValue::from_static(RETRY_AFTER_SECONDS),
        );
    }
    resp
}

impl AppState {
    /// The body of a write request, or the error that says why it could
    /// not be read (413 over `--max-body-bytes`).
    fn write_body(
        &self,
        body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
    ) -> Result<axum::body::Bytes, ApiError> {
        body.map_err(|e| match e.status() {
            StatusCode::PAYLOAD_TOO_LARGE => ApiError::TooLarge(format!(
                "request body is larger than the limit of {} bytes (max-body-bytes)",
                self.inner.max_body_bytes
            )),
            _ => ApiError::BadRequest(format!("cannot read request body: {e}")),
        })
    }
}

/// The route pattern a request matched (axum's [`MatchedPath`]), as a
/// metric label value (`other` if a matched route had none). Patterns come only from the
/// router's own routes, a closed set, so each is kept once for the life of
/// the process and a request allocates nothing for its label.
fn route_label(path: Option<&MatchedPath>) -> &'static str {
    static SEEN: parking_lot::Mutex<Vec<&'static str>> = parking_lot::Mutex::new(Vec::new());
    let Some(path) = path.map(MatchedPath::as_str) else {
        return "other";
    };
    let mut seen = SEEN.lock();
    if let Some(&known) = seen.iter().find(|&&r| r == path) {
        return known;
    }
    let kept: &'static str = Box::leak(path.to_owned().into_boxed_str());
    seen.push(kept);
    kept
}

async fn observe(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let handler = route_label(req.extensions().get::<MatchedPath>());
    let start = Instant::now();
    let resp = next.run(req).await;
    state
        .inner
        .metrics
        .record_http(handler, resp.status().as_u16(), start.elapsed());
    if let Some(Fault(detail)) = resp.extensions().get::<Fault>() {
        tracing::error!(route = handler, status = resp.status().as_u16(), error = %detail, "request failed");
    }
    resp
}

/// The application: every route, the body limit, the timeouts, the
/// request metrics, and the panic guard.
pub fn router(state: AppState) -> Router {
    let timeout = state.inner.request_timeout;
    // Reads enforce the query timeout themselves, inside evaluation, and
    // answer it in Prometheus' JSON; everything else gets the request
    // timeout (a timed-out write must be retried by the sender: 503).
    let reads = Router::new()
        .route("/api/v1/query", get(query::instant).post(query::instant))
        .route("/api/v1/query_range", get(query::range).post(query::range))
        .route(
            "/api/v1/format_query",
            get(query::format_query).post(query::format_query),
        )
        .route(
            "/api/v1/series",
            get(metadata::series).post(metadata::series),
        )
        .route(
            "/api/v1/labels",
            get(metadata::labels).post(metadata::labels),
        )
        .route("/api/v1/label/{name}/values", get(metadata::label_values))
        .route("/federate", get(federate::federate));
    let rest = Router::new()
        .route("/api/v1/write", post(write::remote_write))
        .route("/v1/metrics", post(otlp::export))
        .route("/api/v1/otlp/v1/metrics", post(otlp::export))
        .route("/api/v1/metadata", get(metadata::metadata))
        .route("/api/v1/status/buildinfo", get(metadata::buildinfo))
        .route(
            "/api/v1/query_exemplars",
            get(metadata::query_exemplars).post(metadata::query_exemplars),
        )
        .route("/", get(status::page))
        .route("/metrics", get(status::metrics))
        .route("/-/healthy", get(status::healthy))
        .route("/-/ready", get(status::ready))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            timeout,
        ));
    guarded(reads.merge(rest), state)
}

/// The layers every route has: the body limit, request metrics, and a
/// panic in a handler turned into a 500 that keeps the connection.
fn guarded(routes: Router<AppState>, state: AppState) -> Router {
    let body_limit = state.inner.max_body_bytes;
    routes
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            refuse_declared_oversize,
        ))
        .layer(CatchPanicLayer::custom(panicked))
        .route_layer(middleware::from_fn_with_state(state.clone(), observe))
        .with_state(state)
}

/// A body whose `Content-Length` is over the limit gets 413 at once,
/// before anything is read or waited for.
async fn refuse_declared_oversize(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let limit = state.inner.max_body_bytes;
    match declared {
        Some(n) if n > limit as u64 => ApiError::TooLarge(format!(
            "request body of {n} bytes (Content-Length) is larger than the limit of {limit} \
             bytes (max-body-bytes)"
        ))
        .into_response(),
        _ => next.run(req).await,
    }
}

/// The reply to a handler's panic: logged, and a plain 500.
fn panicked(what: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let what = what
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| what.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    ApiError::Internal(format!("a handler panicked: {what}")).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    #[tokio::test]
    async fn a_panicking_handler_is_a_500_and_the_router_keeps_serving() {
        let head = Arc::new(Head::new(Config::default().head_options()));
        let state = AppState::new(&Config::default(), head);
        async fn boom() -> &'static str {
            panic!("handler bug")
        }
        let app = guarded(
            Router::new()
                .route("/boom", get(boom))
                .route("/-/healthy", get(status::healthy)),
            state,
        );
        let req = |uri: &str| {
            Request::builder()
                .uri(uri)
                .body(axum::body::Body::empty())
                .expect("request")
        };
        let resp = app.clone().oneshot(req("/boom")).await.expect("answered");
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .expect("body");
        assert_eq!(&body[..], b"internal error; see the server log\n");
        let resp = app.oneshot(req("/-/healthy")).await.expect("answered");
        assert_eq!(resp.status(), StatusCode::OK);
    }

    /// The router over an empty head, with `config`'s limits.
    fn app(config: &Config) -> Router {
        let head = Arc::new(Head::new(config.head_options()));
        router(AppState::new(config, head))
    }

    async fn send(app: &Router, req: Request) -> (StatusCode, String) {
        let resp = app.clone().oneshot(req).await.expect("answered");
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .expect("body");
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    fn write(body: &'static [u8], headers: &[(&str, &str)]) -> Request {
        let mut b = Request::builder().method("POST").uri("/api/v1/write");
        for &(k, v) in headers {
            b = b.header(k, v);
        }
        b.body(axum::body::Body::from(body)).expect("request")
    }

    fn get_uri(uri: &str) -> Request {
        Request::builder()
            .uri(uri)
            .body(axum::body::Body::empty())
            .expect("request")
    }

    #[tokio::test]
    async fn every_error_maps_to_its_status() {
        let config = Config {
            max_body_bytes: 64,
            ..Config::default()
        };
        let a = app(&config);
        // 400: not snappy.
        let (status, body) = send(&a, write(b"not snappy at all", &[])).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        // 405: a write must be a POST.
        let (status, _) = send(&a, get_uri("/api/v1/write")).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        // 413: a declared length over max-body-bytes.
        let (status, body) = send(&a, write(&[0; 100], &[("content-length", "100")])).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
        // 415: an encoding remote write does not use.
        let (status, body) = send(&a, write(b"x", &[("content-encoding", "gzip")])).await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{body}");
        // 422: a query that fails while it runs.
        let (status, body) = send(
            &a,
            get_uri("/api/v1/query?query=count_values(%22%22,vector(1))&time=1"),
        )
        .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert!(body.contains(r#""errorType":"execution""#), "{body}");
        // 503: a query past its timeout (here none at all).
        let (status, body) = send(
            &a,
            get_uri("/api/v1/query?query=max_over_time(vector(1)[10m:1ms])&time=1&timeout=0s"),
        )
        .await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert!(body.contains(r#""errorType":"timeout""#), "{body}");
        // 429: the head at its memory high-water mark.
        let full = app(&Config {
            max_memory: 1,
            ..Config::default()
        });
        let (status, body) = send(&full, write(b"", &[])).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    }

    #[tokio::test]
    async fn requests_are_counted_by_the_route_pattern_they_matched() {
        let a = app(&Config::default());
        send(&a, get_uri("/api/v1/label/job/values")).await;
        send(&a, get_uri("/api/v1/label/instance/values")).await;
        let (_, metrics) = send(&a, get_uri("/metrics")).await;
        assert!(
            metrics.contains(
                r#"sluice_http_requests_total{handler="/api/v1/label/{name}/values",code="200"} 2"#
            ),
            "{metrics}"
        );
    }
}
