//! Between the two APIs of a turn, the client's and the upstream's: the
//! body sent upstream, and the upstream's answer (an error, a stream or a
//! whole body) in the client's API.

use std::time::Instant;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use metaclaw_wire as wire;
use metaclaw_wire::request::{CONTROL_FIELDS, ChatRequest};
use metaclaw_wire::stream::{Chain, Transcode};
use metaclaw_wire::{ApiFormat, Front};
use serde_json::Value;

use super::capture;
use super::record::{Outcome, TurnCtx};
use super::stream::TeeStream;
use super::upstream::Upstream;
use crate::error::ApiError;
use crate::store::Capture;

/// The largest non-streamed upstream answer accepted.
const WHOLE_BODY_LIMIT: usize = 64 << 20;
/// The most of an upstream's error body read.
const ERROR_BODY_LIMIT: usize = 1 << 20;

/// The client's API and the upstream's.
#[derive(Debug, Clone, Copy)]
pub struct Dialects {
    pub client: Front,
    pub upstream: ApiFormat,
    /// Both speak Anthropic: the client's own body goes upstream, and the
    /// upstream's answer back, untranslated.
    pub passthrough: bool,
}

impl Dialects {
    pub fn new(client: Front, upstream: ApiFormat) -> Self {
        Self {
            client,
            upstream,
            passthrough: client.passes_through(upstream),
        }
    }

    /// The upstream's route.
    pub fn path(self) -> &'static str {
        match self.upstream {
            ApiFormat::Openai => "/chat/completions",
            ApiFormat::Anthropic => "/messages",
        }
    }

    /// The body for the upstream, in its API, asking for `model`, with the
    /// skills `block` after the system prompt: the agent's chat bytes with
    /// only what changes rewritten, the client's own Anthropic body
    /// (pass-through: skills as one more system block), or the chat body
    /// translated to Anthropic's form.
    pub fn outgoing(
        self,
        request: &ChatRequest,
        client: Option<&Value>,
        model: &str,
        block: Option<&str>,
    ) -> Result<Bytes, ApiError> {
        let to_bytes = |v: &Value| {
            serde_json::to_vec(v)
                .map(Bytes::from)
                .map_err(|e| ApiError::Internal(e.to_string()))
        };
        if let (true, Some(client)) = (self.passthrough, client) {
            let mut body = client.clone();
            if let Some(map) = body.as_object_mut() {
                for field in CONTROL_FIELDS {
                    map.shift_remove(*field);
                }
                map.insert("model".into(), Value::String(model.to_string()));
            }
            if let Some(block) = block {
                wire::request::anthropic::splice_system(&mut body, block);
            }
            return to_bytes(&body);
        }
        let chat_body = request.outgoing(Some(model), block);
        match self.upstream {
            ApiFormat::Openai => Ok(chat_body),
            ApiFormat::Anthropic => {
                let chat: Value = serde_json::from_slice(&chat_body)
                    .map_err(|e| ApiError::InvalidJson(e.to_string()))?;
                to_bytes(&wire::request::anthropic::from_chat(&chat)?)
            }
        }
    }

    /// What turns the upstream's events into the client's: nothing when
    /// they speak the same API, else upstream → chat → client.
    pub(super) fn transcoders(self, client: Option<&Value>) -> Option<Chain> {
        if self.passthrough {
            return None;
        }
        let mut stages: Vec<Box<dyn Transcode>> = Vec::new();
        if self.upstream == ApiFormat::Anthropic {
            stages.push(Box::new(wire::stream::anthropic::ToChat::default()));
        }
        match self.client {
            Front::Chat => {}
            Front::Anthropic => stages.push(Box::new(wire::stream::anthropic::FromChat::default())),
            Front::Responses => stages.push(Box::new(wire::stream::responses::FromChat::new(
                client.unwrap_or(&Value::Null),
            ))),
        }
        (!stages.is_empty()).then_some(Chain(stages))
    }

    /// A whole (non-streamed) upstream answer in the client's API.
    pub(super) fn whole_answer(
        self,
        bytes: &Bytes,
        client: Option<&Value>,
    ) -> Result<Bytes, ApiError> {
        if self.passthrough || (self.client == Front::Chat && self.upstream == ApiFormat::Openai) {
            return Ok(bytes.clone());
        }
        let parsed: Value =
            serde_json::from_slice(bytes).map_err(|e| ApiError::UpstreamUnreachable {
                base: String::new(),
                reason: format!("the upstream's answer is not JSON: {e}"),
            })?;
        let chat = match self.upstream {
            ApiFormat::Anthropic => wire::response::anthropic::to_chat(&parsed),
            ApiFormat::Openai => parsed,
        };
        let answer = match self.client {
            Front::Chat => chat,
            Front::Anthropic => wire::response::anthropic::from_chat(&chat),
            Front::Responses => {
                wire::response::responses::from_chat(&chat, client.unwrap_or(&Value::Null))
            }
        };
        serde_json::to_vec(&answer)
            .map(Bytes::from)
            .map_err(|e| ApiError::Internal(e.to_string()))
    }
}

/// The upstream's answer, as the client gets it: errors with the upstream's
/// status, a stream forwarded as it arrives, a whole body translated.
pub async fn answer(
    response: reqwest::Response,
    mut ctx: TurnCtx,
    dialects: Dialects,
    client: Option<&Value>,
) -> Result<Response, ApiError> {
    let status =
        StatusCode::from_u16(response.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut headers = HeaderMap::new();
    super::upstream::forward_response_headers(response.headers(), &mut headers);
    ctx.tag(&mut headers);
    if !status.is_success() {
        return Ok(error(response, ctx, dialects, status, headers).await);
    }
    if is_event_stream(&headers) {
        let stream = TeeStream::new(
            response.bytes_stream().boxed(),
            ctx.proxy.upstream.between_chunks_timeout,
            dialects.transcoders(client),
            ctx,
        );
        return Ok((status, headers, Body::from_stream(stream)).into_response());
    }
    let bytes = match read_whole(response, &ctx.proxy.upstream, WHOLE_BODY_LIMIT).await {
        Ok(bytes) => bytes,
        Err(e) => {
            ctx.finish(Outcome::Incomplete {
                http_status: Some(status),
                capture: Capture::None,
                why: e.to_string(),
            });
            return Err(e);
        }
    };
    ctx.first_byte = ctx.upstream_started;
    ctx.upstream_done = Some(Instant::now());
    let answer = dialects.whole_answer(&bytes, client);
    let capture = capture::whole(dialects.upstream, bytes);
    match answer {
        Ok(answer) => {
            ctx.finish(Outcome::Answered {
                http_status: status,
                capture,
            });
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            Ok((status, headers, answer).into_response())
        }
        Err(e) => {
            ctx.finish(Outcome::Failed {
                http_status: Some(status),
                capture,
                error: e.to_string(),
            });
            Err(e)
        }
    }
}

/// An upstream error, passed on with its status. An Anthropic client of an
/// Anthropic upstream gets the upstream's own error (its request_id and any
/// other field); the record, like every other client, gets it in the one
/// shape the store keeps.
async fn error(
    response: reqwest::Response,
    mut ctx: TurnCtx,
    dialects: Dialects,
    status: StatusCode,
    headers: HeaderMap,
) -> Response {
    let body = read_whole(response, &ctx.proxy.upstream, ERROR_BODY_LIMIT)
        .await
        .unwrap_or_default();
    ctx.upstream_done = Some(Instant::now());
    let own = (dialects.passthrough
        && dialects.upstream == ApiFormat::Anthropic
        && is_json_object(&body))
    .then(|| body.clone());
    let body = match dialects.upstream {
        ApiFormat::Anthropic => wire::response::error_body::to_openai(status.as_u16(), &body),
        ApiFormat::Openai => body,
    };
    let error = ApiError::UpstreamStatus { status, body };
    ctx.finish(Outcome::Failed {
        http_status: Some(status),
        capture: capture::error(error.body()),
        error: error.to_string(),
    });
    ctx.proxy.metrics.errors.inc(&[error.kind()]);
    let body = own.unwrap_or_else(|| error.body_for(dialects.client));
    let mut response = error.into_response_with(body);
    for (name, value) in headers
        .iter()
        .filter(|(name, _)| **name != header::CONTENT_TYPE)
    {
        response.headers_mut().append(name.clone(), value.clone());
    }
    response
}

fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            ct.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}

fn is_json_object(bytes: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok()
        && bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// A whole upstream body, chunk by chunk under the between-chunks timeout.
async fn read_whole(
    response: reqwest::Response,
    upstream: &Upstream,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let mut stream = response.bytes_stream();
    let mut buf = Vec::new();
    loop {
        match tokio::time::timeout(upstream.between_chunks_timeout, stream.next()).await {
            Err(_) => {
                return Err(ApiError::UpstreamTimeout {
                    phase: "reading the response body",
                    secs: upstream.between_chunks_timeout.as_secs_f64(),
                });
            }
            Ok(None) => return Ok(Bytes::from(buf)),
            Ok(Some(Err(e))) => return Err(upstream.transport_error(&e)),
            Ok(Some(Ok(chunk))) => {
                if buf.len() + chunk.len() > limit {
                    return Err(ApiError::UpstreamUnreachable {
                        base: upstream.base.clone(),
                        reason: format!("response larger than {limit} bytes"),
                    });
                }
                buf.extend_from_slice(&chunk);
            }
        }
    }
}
