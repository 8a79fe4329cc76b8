//! Every error a handler returns, and the one mapping of errors to HTTP
//! replies.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use super::prom::{self, ErrorType};
use crate::promql::QueryError;

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
    pub(super) fn into_parts(self) -> (StatusCode, String, Option<String>) {
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
pub(super) struct Fault(pub(super) String);

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
pub(super) fn with_retry_after(mut resp: Response) -> Response {
    if resp.status() == StatusCode::TOO_MANY_REQUESTS {
        resp.headers_mut().insert(
            header::RETRY_AFTER,
            header::HeaderValue::from_static(RETRY_AFTER_SECONDS),
        );
    }
    resp
}

impl From<prom::NotEncoded> for ApiError {
    fn from(e: prom::NotEncoded) -> Self {
        ApiError::Prom {
            kind: e.kind,
            message: e.message,
        }
    }
}
