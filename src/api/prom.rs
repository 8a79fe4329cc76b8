//! The Prometheus HTTP API's JSON envelope and error types
//! (`{"status":"success","data":…}` / `{"status":"error","errorType":…}`).

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// Prometheus' `errorType` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorType {
    /// Invalid parameters or query (400).
    BadData,
    /// The query failed while evaluating (422).
    Execution,
    /// The query was canceled (499).
    Canceled,
    /// The query timed out (503).
    Timeout,
    /// A fault on our side (500).
    Internal,
    /// Unknown resource (404).
    NotFound,
    /// Cannot produce the asked-for representation (406).
    NotAcceptable,
    /// Not available right now (500, as Prometheus' default mapping).
    Unavailable,
}

impl ErrorType {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BadData => "bad_data",
            Self::Execution => "execution",
            Self::Canceled => "canceled",
            Self::Timeout => "timeout",
            Self::Internal => "internal",
            Self::NotFound => "not_found",
            Self::NotAcceptable => "not_acceptable",
            Self::Unavailable => "unavailable",
        }
    }

    /// The HTTP status Prometheus answers with.
    pub fn status(self) -> StatusCode {
        match self {
            Self::BadData => StatusCode::BAD_REQUEST,
            Self::Execution => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Canceled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
            Self::Timeout => StatusCode::SERVICE_UNAVAILABLE,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::NotAcceptable => StatusCode::NOT_ACCEPTABLE,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            // Prometheus' switch has no case for it (its default is 500)
            // and never sends it on a query; Sluice sends it only for a
            // query its shutdown cancels, which a retry elsewhere or later
            // can answer: 503.
            Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

#[derive(Serialize)]
struct Envelope<'a, T: Serialize> {
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<T>,
    #[serde(rename = "errorType", skip_serializing_if = "Option::is_none")]
    error_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    warnings: &'a [String],
}

fn json(status: StatusCode, body: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// A success reply with `data` and optional warnings.
pub fn success<T: Serialize>(data: T, warnings: &[String]) -> Response {
    success_within(data, warnings, usize::MAX).unwrap_or_else(|e| error(e.kind, &e.message))
}

/// Why a success reply was not made: the error to answer instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotEncoded {
    /// `execution` for an answer over the cap, `internal` otherwise.
    pub kind: ErrorType,
    /// What to tell the client.
    pub message: String,
}

/// [`success`], or 422 `execution` when the body would be larger than
/// `max` bytes (the encoder stops there).
pub fn success_within<T: Serialize>(
    data: T,
    warnings: &[String],
    max: usize,
) -> Result<Response, NotEncoded> {
    let env = Envelope {
        status: "success",
        data: Some(data),
        error_type: None,
        error: None,
        warnings,
    };
    let mut body = Capped {
        bytes: Vec::new(),
        max,
    };
    match serde_json::to_writer(&mut body, &env) {
        Ok(()) => Ok(json(StatusCode::OK, body.bytes)),
        Err(e) if e.is_io() => Err(NotEncoded {
            kind: ErrorType::Execution,
            message: format!(
                "the answer would be larger than query-max-response-bytes ({max} bytes); \
                 select fewer series or a shorter range, or set a limit"
            ),
        }),
        Err(e) => Err(NotEncoded {
            kind: ErrorType::Internal,
            message: format!("cannot encode response: {e}"),
        }),
    }
}

/// A body buffer that refuses to grow past `max` bytes.
struct Capped {
    bytes: Vec<u8>,
    max: usize,
}

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > self.max {
            return Err(std::io::Error::other("response too large"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An error reply.
pub fn error(kind: ErrorType, message: &str) -> Response {
    let env: Envelope<'_, ()> = Envelope {
        status: "error",
        data: None,
        error_type: Some(kind.as_str()),
        error: Some(message),
        warnings: &[],
    };
    let body = serde_json::to_vec(&env)
        .unwrap_or_else(|_| br#"{"status":"error","errorType":"internal"}"#.to_vec());
    json(kind.status(), body)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body(r: Response) -> (u16, String) {
        let status = r.status().as_u16();
        let b = axum::body::to_bytes(r.into_body(), 1 << 20)
            .await
            .expect("body");
        (status, String::from_utf8_lossy(&b).into_owned())
    }

    #[tokio::test]
    async fn envelopes_match_prometheus() {
        assert_eq!(
            body(success(["a"], &[])).await,
            (200, r#"{"status":"success","data":["a"]}"#.into())
        );
        assert_eq!(
            body(success(Vec::<u8>::new(), &["w".into()])).await,
            (
                200,
                r#"{"status":"success","data":[],"warnings":["w"]}"#.into()
            )
        );
        assert_eq!(
            body(error(ErrorType::BadData, "no")).await,
            (
                400,
                r#"{"status":"error","errorType":"bad_data","error":"no"}"#.into()
            )
        );
        assert_eq!(error(ErrorType::Execution, "x").status().as_u16(), 422);
        assert_eq!(error(ErrorType::Canceled, "x").status().as_u16(), 499);
        assert_eq!(error(ErrorType::Timeout, "x").status().as_u16(), 503);
        // Sluice's own choice (see `status`): a query its shutdown cancels.
        assert_eq!(error(ErrorType::Unavailable, "x").status().as_u16(), 503);
    }
}
