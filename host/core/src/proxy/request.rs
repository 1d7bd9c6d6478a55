//! The first steps of a turn: admitting a request and reading it, once,
//! into the typed request every later step uses (session, retrieval, the
//! upstream body, the record).

use axum::body::Body;
use axum::http::{HeaderMap, header};
use bytes::Bytes;
use futures_util::StreamExt;
use metaclaw_wire as wire;
use metaclaw_wire::Front;
use metaclaw_wire::agent::openclaw;
use metaclaw_wire::request::{ChatRequest, truthy};
use serde_json::Value;

use super::Limits;
use super::upstream::Upstream;
use crate::agent_id::AgentId;
use crate::error::ApiError;
use crate::sessions::{Hints, TurnAttempt, TurnType};
use crate::store::SessionSource;

/// How much of an oversized request body is read and dropped before the 413.
const DRAIN_LIMIT: usize = 64 << 20;

/// A request, read.
pub struct Incoming {
    /// In chat form: what is routed, recorded and learned from.
    pub request: ChatRequest,
    /// The client's own body when it speaks another API, kept for a
    /// pass-through and for echoing its fields in the answer.
    pub client: Option<Value>,
}

/// A JSON body of bounded size, read within bounded time; a request in
/// another API becomes the chat request it means.
pub async fn admit(
    headers: &HeaderMap,
    body: Body,
    limits: &Limits,
    front: Front,
) -> Result<Incoming, ApiError> {
    require_json(headers)?;
    let raw = read_body(body, limits).await?;
    let header_session = headers.contains_key("x-session-id");
    let (body, client) = match front {
        Front::Chat => (raw, None),
        Front::Anthropic | Front::Responses => {
            let value: Value =
                serde_json::from_slice(&raw).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
            let chat = if front == Front::Anthropic {
                wire::request::anthropic::to_chat(&value)?
            } else {
                wire::request::responses::to_chat(&value)?
            };
            let bytes = serde_json::to_vec(&chat).map_err(|e| ApiError::Internal(e.to_string()))?;
            (Bytes::from(bytes), Some(value))
        }
    };
    Ok(Incoming {
        request: ChatRequest::parse(body, header_session)?,
        client,
    })
}

fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let media = crate::http::media_type(ct);
    if media == "application/json"
        || (media.starts_with("application/") && media.ends_with("+json"))
    {
        Ok(())
    } else {
        Err(ApiError::UnsupportedMediaType(if ct.is_empty() {
            "(none)".into()
        } else {
            ct.to_string()
        }))
    }
}

/// The request body, refused past `proxy.max_body_mb` or when the client is
/// slower than `proxy.timeouts.client_body`.
async fn read_body(body: Body, limits: &Limits) -> Result<Bytes, ApiError> {
    let limit = limits.max_body_bytes;
    let read = async {
        let mut stream = body.into_data_stream();
        let mut buf = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk
                .map_err(|e| ApiError::BadRequest(format!("cannot read the request body: {e}")))?;
            if buf.len() + chunk.len() > limit {
                // Read (and drop) a bounded rest, so that a client still
                // sending gets the 413 instead of a broken pipe.
                let mut drained = buf.len() + chunk.len();
                drop(buf);
                while drained < DRAIN_LIMIT {
                    match stream.next().await {
                        Some(Ok(more)) => drained += more.len(),
                        _ => break,
                    }
                }
                return Err(ApiError::PayloadTooLarge { limit });
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(Bytes::from(buf))
    };
    match tokio::time::timeout(limits.client_body_timeout, read).await {
        Ok(result) => result,
        Err(_) => Err(ApiError::ClientBodyTimeout {
            secs: limits.client_body_timeout.as_secs_f64(),
        }),
    }
}

/// Main (the user's conversation) or side (background work): as declared
/// by a header or the body, else a heartbeat poll is side work.
pub fn turn_type(headers: &HeaderMap, request: &ChatRequest) -> TurnType {
    let declared = headers
        .get("x-turn-type")
        .and_then(|v| v.to_str().ok())
        .or(request.body_turn_type.as_deref())
        .and_then(TurnType::parse);
    if let Some(t) = declared {
        return t;
    }
    if request
        .last_user_text
        .as_deref()
        .is_some_and(openclaw::is_heartbeat)
    {
        return TurnType::Side;
    }
    TurnType::Main
}

/// The agent (namespace) the turn is for ([`crate::agent_id`]): the
/// `X-Agent-Id` header, else OpenClaw's own runtime line, else `default`.
/// Never the text of a message.
pub fn agent_id(headers: &HeaderMap, request: &ChatRequest) -> Result<AgentId, ApiError> {
    if let Some(value) = headers.get("x-agent-id") {
        let text = value
            .to_str()
            .map_err(|_| ApiError::BadRequest("X-Agent-Id: not visible ASCII text".into()))?;
        return AgentId::parse(text).map_err(|e| ApiError::BadRequest(format!("X-Agent-Id: {e}")));
    }
    Ok(request
        .openclaw_agent
        .as_deref()
        .and_then(|id| AgentId::parse(id).ok())
        .unwrap_or_else(AgentId::default_agent))
}

/// What names the turn's session, best first.
pub fn session_hints<'a>(
    headers: &'a HeaderMap,
    request: &'a ChatRequest,
    agent: &'a AgentId,
) -> Hints<'a> {
    let header = headers
        .get("x-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| (s, SessionSource::Header));
    let body = request
        .body_session_id
        .as_deref()
        .map(|s| (s, SessionSource::Body));
    Hints {
        explicit: header.or(body),
        prompt_cache_key: request.prompt_cache_key.as_deref(),
        runtime_session_id: request.runtime_session_id.as_deref(),
        fingerprint: request.fingerprint.as_deref(),
        message_count: request.message_count,
        agent: Some(agent),
    }
}

/// Which agent sent a turn, for the dashboard's filter: OpenClaw when its
/// prompt says so (its runtime line, or its internal context, which every
/// call carries even on a session whose id is not a UUID; every OpenClaw
/// speaks through the same SDK), otherwise the User-Agent's product without
/// its version (`OpenAI/Python`, `curl`).
pub fn agent(headers: &HeaderMap, request: &ChatRequest) -> Option<String> {
    let user_agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    let openclaw =
        request.runtime_session_id.is_some() || request.messages().iter().any(|m| m.internal);
    agent_name(openclaw, user_agent)
}

fn agent_name(openclaw: bool, user_agent: Option<&str>) -> Option<String> {
    if openclaw {
        return Some("openclaw".into());
    }
    let product = user_agent?.split_whitespace().next()?;
    let name = match product.rsplit_once('/') {
        Some((name, version)) if version.starts_with(|c: char| c.is_ascii_digit()) => name,
        _ => product,
    };
    let name: String = name
        .chars()
        .filter(char::is_ascii_graphic)
        .take(64)
        .collect();
    (!name.is_empty()).then_some(name)
}

/// The client says its session ends with this turn.
pub fn ends_session(headers: &HeaderMap, request: &ChatRequest) -> bool {
    headers
        .get("x-session-done")
        .and_then(|v| v.to_str().ok())
        .is_some_and(truthy)
        || request.body_session_done
}

/// What identifies a main turn among its resends.
pub fn attempt_key(request: &ChatRequest) -> u64 {
    TurnAttempt::key(
        request.model.as_deref(),
        request.message_count,
        request.last_user_text.as_deref(),
    )
}

/// The model the upstream is asked for: the request's, unless the config
/// forces one or the request names none.
pub fn served_model(request: &ChatRequest, upstream: &Upstream) -> Result<String, ApiError> {
    match (&request.model, &upstream.default_model) {
        (_, Some(default)) if upstream.force_model => Ok(default.clone()),
        (Some(model), _) => Ok(model.clone()),
        (None, Some(default)) => Ok(default.clone()),
        (None, None) => Err(ApiError::BadRequest(
            "`model` is required (or set llm.model_id to give requests a default)".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::{ChatRequest, HeaderMap, agent, agent_name};

    /// A session OpenClaw was told to use (`--session-id day01_…`, no UUID
    /// in a runtime line) is still OpenClaw's: its internal context says so.
    #[test]
    fn openclaw_is_known_by_its_internal_context_too() {
        let body = serde_json::json!({"model": "m", "messages": [
            {"role": "system", "content": "You are a personal assistant running inside OpenClaw."},
            {"role": "user", "content": "[Wed 2026-11-25 06:31 UTC] hello"},
            {"role": "user", "content": [{"type": "text", "text":
                "<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>\nnone\n<<<END_OPENCLAW_INTERNAL_CONTEXT>>>"}]},
        ]});
        let mut headers = HeaderMap::new();
        headers.insert("user-agent", "OpenAI/JS 7.15.0".parse().unwrap());
        let parse = |b: &serde_json::Value| {
            ChatRequest::parse(serde_json::to_vec(b).unwrap().into(), true).unwrap()
        };
        assert_eq!(agent(&headers, &parse(&body)).as_deref(), Some("openclaw"));
        let mut plain = body.clone();
        plain["messages"].as_array_mut().unwrap().pop();
        assert_eq!(
            agent(&headers, &parse(&plain)).as_deref(),
            Some("OpenAI/JS")
        );
    }

    #[test]
    fn the_agent_is_openclaw_or_the_user_agents_product_without_its_version() {
        assert_eq!(
            agent_name(true, Some("OpenAI/JS 7.15.0")).as_deref(),
            Some("openclaw")
        );
        assert_eq!(
            agent_name(false, Some("OpenAI/JS 7.15.0")).as_deref(),
            Some("OpenAI/JS")
        );
        assert_eq!(
            agent_name(false, Some("OpenAI/Python 1.40.0")).as_deref(),
            Some("OpenAI/Python")
        );
        assert_eq!(
            agent_name(false, Some("curl/8.5.0")).as_deref(),
            Some("curl")
        );
        assert_eq!(agent_name(false, Some("undici")).as_deref(), Some("undici"));
        assert_eq!(agent_name(false, Some("   ")), None);
        assert_eq!(agent_name(false, None), None);
        let long = "x".repeat(500);
        assert_eq!(agent_name(false, Some(&long)).map(|a| a.len()), Some(64));
    }
}
