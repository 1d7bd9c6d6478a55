//! One call to a Tinker-compatible service: the headers every request
//! carries (key, idempotency key reused on every retry of the call), the
//! retries the protocol allows (408, 409, 429, 5xx and unanswered requests,
//! honouring `retry-after-ms` / `retry-after`; a billing pause, 402, waited
//! out for up to an hour), the body's encoding (zstd when the service asks
//! for it), and the server's error in its own words (`{"detail"}` or
//! `{"error", "category"}`).

use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode};
use bytes::Bytes;
use serde_json::Value;

use super::Error;
use super::replies::Failure;
use crate::http::{Backoff, retry_after};

/// How many times one request is sent before its failure is final (the
/// protocol's number).
pub const TRIES: u32 = 10;
/// The SDK's backoff: 0.5 s doubling, capped at 10 s.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(500), Duration::from_secs(10));

/// A request body: JSON, or protobuf (`forward_backward`), plain or
/// zstd-compressed.
#[derive(Clone)]
pub enum Body {
    Json(Value),
    Protobuf(Bytes),
    ProtobufZstd(Bytes),
}

/// What came back: the status, content type and bytes.
pub struct Reply {
    pub status: StatusCode,
    pub protobuf: bool,
    pub bytes: Bytes,
    pub headers: HeaderMap,
}

impl Reply {
    pub fn json(&self) -> Result<Value, Error> {
        serde_json::from_slice(&self.bytes).map_err(|e| Error::Protocol(format!("not JSON: {e}")))
    }

    /// The JSON body as `what` (named in the error).
    pub fn decode<T: serde::de::DeserializeOwned>(&self, what: &str) -> Result<T, Error> {
        serde_json::from_slice(&self.bytes).map_err(|e| Error::Protocol(format!("{what}: {e}")))
    }
}

/// The service's address and credentials, and the HTTP client.
pub struct Transport {
    pub(super) http: reqwest::Client,
    pub(super) base: String,
    pub(super) api_key: Option<String>,
    /// First wait of the retry backoff (tests shorten it).
    pub(super) first_wait: Duration,
    /// Sends of one request before its failure is final.
    pub(super) tries: u32,
    /// The pause between tries while the service wants payment (402).
    pub(super) billing_wait: Duration,
    /// How long a call waits for payment before its 402 is final.
    pub(super) billing_limit: Duration,
    /// The service's `proto_compress_fwdbwd`: protobuf bodies go zstd.
    pub(super) compress: bool,
}

impl Transport {
    fn url(&self, path: &str) -> String {
        format!("{}/api/v1/{path}", self.base)
    }

    /// A protobuf body, zstd-compressed if the service asked for that.
    pub fn protobuf(&self, body: Vec<u8>) -> Result<Body, Error> {
        if !self.compress {
            return Ok(Body::Protobuf(Bytes::from(body)));
        }
        let packed = metaclaw_tinker::convert::compress_body(&body)
            .map_err(|e| Error::Client(format!("compressing a request body: {e}")))?;
        Ok(Body::ProtobufZstd(Bytes::from(packed)))
    }

    /// A 402 (billing): pauses and says whether to try again, which is
    /// so until `billing_limit` after the call's first 402 (`since`).
    pub async fn billing_pause(&self, since: &mut Option<Instant>) -> bool {
        let first = *since.get_or_insert_with(|| {
            tracing::warn!("the training service wants payment (HTTP 402); pausing");
            Instant::now()
        });
        if first.elapsed() >= self.billing_limit {
            return false;
        }
        tokio::time::sleep(self.billing_wait).await;
        true
    }

    /// One attempt, no retries (a poll: its statuses mean other things).
    pub async fn send_once(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Body>,
        headers: &[(&str, String)],
        timeout: Duration,
    ) -> Result<Reply, reqwest::Error> {
        let mut request = self
            .http
            .request(method, self.url(path))
            .timeout(timeout)
            .header("accept", "application/x-protobuf, application/json");
        if let Some(key) = &self.api_key {
            request = request.header("x-api-key", key);
        }
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        request = match body {
            Some(Body::Json(v)) => request
                .header("content-type", "application/json")
                .body(v.to_string()),
            Some(Body::Protobuf(b)) => request
                .header("content-type", "application/x-protobuf")
                .body(b.clone()),
            Some(Body::ProtobufZstd(b)) => request
                .header("content-type", "application/x-protobuf")
                .header("content-encoding", "zstd")
                .body(b.clone()),
            None => request,
        };
        let response = request.send().await?;
        let status = response.status();
        let headers = response.headers().clone();
        let protobuf = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("application/x-protobuf"));
        let bytes = response.bytes().await?;
        Ok(Reply {
            status: StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY),
            protobuf,
            bytes,
            headers,
        })
    }

    /// A call, retried as the protocol allows with one idempotency key
    /// (402s, waited out, count as no try); a final error status becomes
    /// [`Error::Service`].
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Body>,
    ) -> Result<Reply, Error> {
        let key = format!("metaclaw-retry-{}", uuid::Uuid::new_v4());
        let headers = [("x-idempotency-key", key)];
        let mut backoff = Backoff::new(self.first_wait, BACKOFF.1);
        let mut last = String::new();
        let mut billing = None;
        let mut tries = 0;
        while tries < self.tries {
            let hint = match self
                .send_once(
                    method.clone(),
                    path,
                    body.as_ref(),
                    &headers,
                    Duration::from_secs(60),
                )
                .await
            {
                Ok(reply) if reply.status.is_success() => return Ok(reply),
                Ok(reply) if reply.status == StatusCode::PAYMENT_REQUIRED => {
                    if self.billing_pause(&mut billing).await {
                        continue;
                    }
                    return Err(service_error(path, &reply));
                }
                Ok(reply) => {
                    let retryable = matches!(reply.status.as_u16(), 408 | 409 | 429 | 500..=599)
                        && reply
                            .headers
                            .get("x-should-retry")
                            .and_then(|v| v.to_str().ok())
                            != Some("false");
                    let error = service_error(path, &reply);
                    if !retryable {
                        return Err(error);
                    }
                    last = error.to_string();
                    retry_hint(&reply.headers)
                }
                Err(e) => {
                    last = format!("{path}: {}", crate::http::describe(&e));
                    None
                }
            };
            tries += 1;
            tokio::time::sleep(backoff.wait(hint)).await;
        }
        Err(Error::Unavailable(format!(
            "{last} (after {} tries)",
            self.tries
        )))
    }
}

/// `retry-after-ms`, else `retry-after`.
pub fn retry_hint(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_millis)
        .or_else(|| retry_after(headers))
}

/// The server's error, in its words: FastAPI's `{"detail"}` (a string or
/// validation errors) or a future's `{"error", "category"}`.
pub fn service_error(path: &str, reply: &Reply) -> Error {
    let body: Failure = serde_json::from_slice(&reply.bytes).unwrap_or_default();
    let message = match (&body.detail, &body.error) {
        (Value::String(s), _) | (_, Value::String(s)) => s.clone(),
        (Value::Null, Value::Null) => String::from_utf8_lossy(&reply.bytes)
            .chars()
            .take(300)
            .collect(),
        (detail, _) => detail.to_string(),
    };
    Error::Service {
        status: reply.status.as_u16(),
        call: path.to_string(),
        message,
        users_fault: body.category.as_deref() == Some("user"),
    }
}
