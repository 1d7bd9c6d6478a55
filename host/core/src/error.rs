//! The one error type of the HTTP surface. Every variant knows its HTTP status,
//! its OpenAI-style `type`, and the metrics label it is counted under, so a
//! handler only ever returns `Result<_, ApiError>` and the client always gets
//! a JSON body it can parse.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use metaclaw_wire::Front;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("request body is not valid JSON: {0}")]
    InvalidJson(String),
    #[error("unsupported content type {0:?}: send `Content-Type: application/json`")]
    UnsupportedMediaType(String),
    #[error("request body exceeds the limit of {limit} bytes (proxy.max_body_mb)")]
    PayloadTooLarge { limit: usize },
    #[error("the client did not send the request body within {secs} s")]
    ClientBodyTimeout { secs: f64 },
    #[error("{0}")]
    Unauthorized(&'static str),
    #[error("{0}")]
    NotFound(String),
    /// The action cannot run in the state things are in (training paused).
    #[error("{0}")]
    Conflict(String),
    /// A `Host` this daemon does not serve (DNS rebinding).
    #[error("{0}")]
    HostNotAllowed(String),
    /// A browser page of another origin (cross-site request forgery).
    #[error("{0}")]
    CrossSite(String),
    #[error("method not allowed on this route")]
    MethodNotAllowed,
    #[error("upstream {base} is unreachable: {reason}")]
    UpstreamUnreachable { base: String, reason: String },
    /// A training step failed: the training service's words (a refusal, an
    /// outage) as the trainer got them.
    #[error("the training step failed: {0}")]
    TrainingFailed(String),
    #[error("upstream did not answer within {secs} s ({phase})")]
    UpstreamTimeout { phase: &'static str, secs: f64 },
    /// The upstream answered with an error status; its body is passed on as
    /// it was when it already is an OpenAI-style error, wrapped otherwise.
    #[error("upstream answered {status}")]
    UpstreamStatus { status: StatusCode, body: Bytes },
    #[error("metaclaw is shutting down")]
    ShuttingDown,
    /// In `rl` mode with `rl.fallback_to_llm: false`, the trainable model
    /// could not answer.
    #[error("the trainable model cannot answer (rl.fallback_to_llm is off): {0}")]
    StudentUnavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) | Self::InvalidJson(_) => StatusCode::BAD_REQUEST,
            Self::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::ClientBodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::HostNotAllowed(_) | Self::CrossSite(_) => StatusCode::FORBIDDEN,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::UpstreamUnreachable { .. } | Self::TrainingFailed(_) => StatusCode::BAD_GATEWAY,
            Self::UpstreamTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            Self::UpstreamStatus { status, .. } => *status,
            Self::ShuttingDown | Self::StudentUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The label this error is counted under in `metaclaw_errors_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::BadRequest(_) => "bad_request",
            Self::InvalidJson(_) => "invalid_json",
            Self::UnsupportedMediaType(_) => "unsupported_media_type",
            Self::PayloadTooLarge { .. } => "payload_too_large",
            Self::ClientBodyTimeout { .. } => "client_body_timeout",
            Self::Unauthorized(_) => "unauthorized",
            Self::NotFound(_) => "not_found",
            Self::Conflict(_) => "conflict",
            Self::HostNotAllowed(_) => "host_not_allowed",
            Self::CrossSite(_) => "cross_site",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::UpstreamUnreachable { .. } => "upstream_unreachable",
            Self::TrainingFailed(_) => "training_failed",
            Self::UpstreamTimeout { .. } => "upstream_timeout",
            Self::UpstreamStatus { .. } => "upstream_status",
            Self::ShuttingDown => "shutting_down",
            Self::StudentUnavailable(_) => "student_unavailable",
            Self::Internal(_) => "internal",
        }
    }

    /// OpenAI's `error.type` vocabulary, extended with metaclaw's own kinds.
    fn error_type(&self) -> &'static str {
        match self {
            Self::BadRequest(_)
            | Self::InvalidJson(_)
            | Self::UnsupportedMediaType(_)
            | Self::PayloadTooLarge { .. }
            | Self::ClientBodyTimeout { .. }
            | Self::MethodNotAllowed => "invalid_request_error",
            Self::Unauthorized(_) => "authentication_error",
            Self::NotFound(_) => "not_found_error",
            Self::Conflict(_) => "conflict_error",
            Self::HostNotAllowed(_) | Self::CrossSite(_) => "permission_error",
            Self::UpstreamUnreachable { .. } => "upstream_unreachable",
            Self::UpstreamTimeout { .. } => "upstream_timeout",
            Self::UpstreamStatus { .. } | Self::TrainingFailed(_) => "upstream_error",
            Self::ShuttingDown | Self::StudentUnavailable(_) => "service_unavailable",
            Self::Internal(_) => "internal_error",
        }
    }

    /// The JSON error body for this error in the API `front`'s clients
    /// parse.
    pub fn body_for(&self, front: Front) -> Bytes {
        front.error_body(self.status().as_u16(), self.body())
    }

    /// The JSON error body for this error (OpenAI's shape).
    pub fn body(&self) -> Bytes {
        if let Self::UpstreamStatus { status, body } = self {
            return upstream_error_body(*status, body);
        }
        let value = serde_json::json!({
            "error": {
                "message": self.to_string(),
                "type": self.error_type(),
                "code": self.kind(),
            }
        });
        Bytes::from(value.to_string())
    }
}

/// An upstream error body, made OpenAI-shaped: a JSON object with an `error`
/// member passes through untouched (the agent may read provider codes from
/// it); anything else is wrapped with the upstream's text as the message.
pub fn upstream_error_body(status: StatusCode, body: &Bytes) -> Bytes {
    if let Ok(serde_json::Value::Object(map)) = serde_json::from_slice::<serde_json::Value>(body)
        && map.contains_key("error")
    {
        return body.clone();
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let message = if text.is_empty() {
        format!(
            "upstream answered {} {}",
            status.as_u16(),
            status.canonical_reason().unwrap_or("")
        )
    } else {
        // Bound what an upstream HTML error page can make us echo.
        let cut: String = text.chars().take(2000).collect();
        format!("upstream answered {}: {cut}", status.as_u16())
    };
    let value = serde_json::json!({
        "error": { "message": message, "type": "upstream_error", "code": status.as_u16() }
    });
    Bytes::from(value.to_string())
}

impl ApiError {
    /// The response for this error with `body` (the error in the client's
    /// API dialect) instead of the OpenAI-style one.
    pub fn into_response_with(self, body: Bytes) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::warn!(kind = self.kind(), status = status.as_u16(), "{self}");
        } else {
            tracing::debug!(kind = self.kind(), status = status.as_u16(), "{self}");
        }
        let mut response = (status, body).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if matches!(self, Self::Unauthorized(_)) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// What the wire crate refuses is the client's fault: a 400, counted as
/// `invalid_json` when the body is not JSON and `bad_request` otherwise,
/// with the wire error's message.
impl From<metaclaw_wire::Error> for ApiError {
    fn from(e: metaclaw_wire::Error) -> Self {
        match e {
            metaclaw_wire::Error::InvalidJson(reason) => Self::InvalidJson(reason),
            other => Self::BadRequest(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.body();
        self.into_response_with(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_style_upstream_errors_pass_through_untouched() {
        let body =
            Bytes::from_static(br#"{"error":{"message":"rate limited","type":"rate_limit"}}"#);
        assert_eq!(
            upstream_error_body(StatusCode::TOO_MANY_REQUESTS, &body),
            body
        );
    }

    #[test]
    fn non_json_upstream_errors_are_wrapped() {
        let body = Bytes::from_static(b"<html>Bad Gateway</html>");
        let wrapped = upstream_error_body(StatusCode::BAD_GATEWAY, &body);
        let v: serde_json::Value = serde_json::from_slice(&wrapped).unwrap();
        assert_eq!(v["error"]["code"], 502);
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("Bad Gateway")
        );
    }

    #[test]
    fn every_error_body_is_json_with_a_message() {
        let errors = [
            ApiError::BadRequest("x".into()),
            ApiError::PayloadTooLarge { limit: 10 },
            ApiError::Unauthorized("missing token"),
            ApiError::UpstreamTimeout {
                phase: "first byte",
                secs: 3.0,
            },
        ];
        for e in errors {
            let v: serde_json::Value = serde_json::from_slice(&e.body()).unwrap();
            assert!(v["error"]["message"].is_string(), "{e:?}");
        }
    }
}
