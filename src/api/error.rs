//! Every error a handler returns, and the one mapping of errors to HTTP
//! replies.

use axum::body::Body;
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
    /// Writes are pushed back for now: the head is at its memory
    /// high-water mark. 503 with `Retry-After`, because every sender
    /// retries 503 by default (Prometheus retries 429 only with
    /// `retry_on_http_429: true`, and drops the batch otherwise).
    #[error("{0}")]
    Overloaded(String),
    /// A tenant is over its ingestion rate: 503 (or `--rate-limit-status`)
    /// with a `Retry-After` of when its samples can pass.
    #[error("{message}")]
    RateLimited {
        /// What limit, for whom.
        message: String,
        /// Seconds until the request can pass.
        retry_after: u64,
        /// 503, or 429 for senders set up to retry it.
        status: StatusCode,
    },
    /// The login may not use this tenant (403).
    #[error("{0}")]
    Forbidden(String),
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

/// An error as a reply: its status and message, the details of a server
/// fault (kept out of the reply, for the log), and whether the client is
/// asked to come back later (`Retry-After`).
pub(super) struct Parts {
    pub(super) status: StatusCode,
    pub(super) message: String,
    pub(super) fault: Option<String>,
    pub(super) retry_after: Option<u64>,
}

impl ApiError {
    /// The reply's parts.
    pub(super) fn into_parts(self) -> Parts {
        let reply = |status, message| Parts {
            status,
            message,
            fault: None,
            retry_after: None,
        };
        match self {
            ApiError::Prom { kind, message } => Parts {
                retry_after: matches!(kind, ErrorType::Unavailable).then_some(RETRY_AFTER_SECONDS),
                ..reply(kind.status(), message)
            },
            ApiError::BadRequest(m) => reply(StatusCode::BAD_REQUEST, m),
            ApiError::TooLarge(m) => reply(StatusCode::PAYLOAD_TOO_LARGE, m),
            ApiError::UnsupportedMediaType(m) => reply(StatusCode::UNSUPPORTED_MEDIA_TYPE, m),
            ApiError::Overloaded(m) => Parts {
                retry_after: Some(RETRY_AFTER_SECONDS),
                ..reply(StatusCode::SERVICE_UNAVAILABLE, m)
            },
            ApiError::RateLimited {
                message,
                retry_after,
                status,
            } => Parts {
                retry_after: Some(retry_after),
                ..reply(status, message)
            },
            ApiError::Forbidden(m) => reply(StatusCode::FORBIDDEN, m),
            ApiError::Internal(m) => Parts {
                fault: Some(m),
                ..reply(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal error; see the server log".to_owned(),
                )
            },
        }
    }
}

impl Parts {
    /// The reply with `body` of `content_type`.
    pub(super) fn reply(self, content_type: &'static str, body: impl Into<Body>) -> Response {
        let mut resp = (
            self.status,
            [(header::CONTENT_TYPE, content_type)],
            body.into(),
        )
            .into_response();
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
        }
        if let Some(fault) = self.fault {
            resp.extensions_mut().insert(Fault(fault));
        }
        resp
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
            match kind {
                ErrorType::Internal => {
                    resp.extensions_mut().insert(Fault(message.clone()));
                }
                // Unavailable now, so a retry later can succeed.
                ErrorType::Unavailable => {
                    resp.headers_mut().insert(
                        header::RETRY_AFTER,
                        header::HeaderValue::from(RETRY_AFTER_SECONDS),
                    );
                }
                _ => {}
            }
            return resp;
        }
        let mut parts = self.into_parts();
        let body = std::mem::take(&mut parts.message) + "\n";
        parts.reply("text/plain; charset=utf-8", body)
    }
}

impl From<QueryError> for ApiError {
    fn from(e: QueryError) -> Self {
        let kind = match &e {
            QueryError::BadData(_) => return ApiError::bad_param("query", e),
            QueryError::Execution(_)
            | QueryError::TooManySamples(_)
            | QueryError::TooMuchMemory(..) => ErrorType::Execution,
            QueryError::Timeout(_) => ErrorType::Timeout,
            QueryError::Busy(_) => ErrorType::Unavailable,
        };
        ApiError::Prom {
            kind,
            message: e.to_string(),
        }
    }
}

/// The WAL could not make a write durable: the sender is pushed back when
/// a retry can succeed (a full disk, a shutdown), else a server fault.
impl From<crate::storage::CommitError> for ApiError {
    fn from(e: crate::storage::CommitError) -> Self {
        if e.retryable() {
            ApiError::Overloaded(e.to_string())
        } else {
            ApiError::Internal(e.to_string())
        }
    }
}

/// The WAL takes no writes now.
impl From<crate::storage::WalRefusal> for ApiError {
    fn from(e: crate::storage::WalRefusal) -> Self {
        match e {
            crate::storage::WalRefusal::DiskFull => ApiError::Overloaded(e.to_string()),
            crate::storage::WalRefusal::Failed(_) => ApiError::Internal(e.to_string()),
        }
    }
}

/// The database is full: the sender is pushed back.
impl From<crate::storage::MemoryFull> for ApiError {
    fn from(e: crate::storage::MemoryFull) -> Self {
        ApiError::Overloaded(e.to_string())
    }
}

/// Seconds a pushed-back sender is asked to wait.
const RETRY_AFTER_SECONDS: u64 = 5;

impl From<prom::NotEncoded> for ApiError {
    fn from(e: prom::NotEncoded) -> Self {
        ApiError::Prom {
            kind: e.kind,
            message: e.message,
        }
    }
}
