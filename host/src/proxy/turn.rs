//! One chat turn, top to bottom:
//!
//! 1. **admit**: a JSON body of bounded size, read within bounded time;
//! 2. **session**: which conversation the turn belongs to, main or side;
//! 3. **upstream body**: the agent's request as received, minus metaclaw's
//!    own control fields;
//! 4. **skills**: the retriever picks the few skills that fit the turn and
//!    they are spliced in after the agent's system prompt;
//! 5. **upstream**: sent on a pooled keep-alive connection;
//! 6. **answer**: errors pass through with the upstream's status; a stream is
//!    forwarded chunk by chunk as it arrives while a tee keeps a copy;
//! 7. **record**: when the answer is over (or the client went away), the
//!    turn is queued for the store and the session is told; a client's
//!    "done" ends the session, which is what learning listens for.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{Stream, StreamExt, stream::BoxStream};
use metaclaw_wire as wire;
use metaclaw_wire::Front;
use metaclaw_wire::agent::openclaw;
use metaclaw_wire::request::{CONTROL_FIELDS, ChatRequest, truthy};
use metaclaw_wire::stream::sse::SseParser;
use metaclaw_wire::stream::{Chain, Transcode, encode};
use serde_json::{Map, Value};
use tokio::time::Sleep;
use tracing::Instrument;

use super::upstream::{Upstream, forward_response_headers};
use super::{Limits, Proxy, capture};
use crate::clock::now_ms;
use crate::config::ApiFormat;
use crate::error::ApiError;
use crate::sessions::{Attempt, EndReason, Hints, TurnType};
use crate::skills::{Query, Skills, inject};
use crate::store::{
    Admission, Capture, InjectedSkill, SessionInfo, SessionSource, TurnRecord, TurnStatus,
};

/// The most of one answer kept for the record; the client still gets all.
const CAPTURE_LIMIT: usize = 32 << 20;
/// How much of an oversized request body is read and dropped before the 413.
const DRAIN_LIMIT: usize = 64 << 20;
/// The largest non-streamed upstream answer accepted.
const WHOLE_BODY_LIMIT: usize = 64 << 20;

/// `POST /v1/chat/completions`
pub async fn chat_completions(State(proxy): State<Arc<Proxy>>, request: Request) -> Response {
    serve(proxy, request, Front::Chat).await
}

/// `POST /v1/messages` (Anthropic Messages)
pub async fn messages(State(proxy): State<Arc<Proxy>>, request: Request) -> Response {
    serve(proxy, request, Front::Anthropic).await
}

/// `POST /v1/responses` (OpenAI Responses)
pub async fn responses(State(proxy): State<Arc<Proxy>>, request: Request) -> Response {
    serve(proxy, request, Front::Responses).await
}

async fn serve(proxy: Arc<Proxy>, request: Request, front: Front) -> Response {
    let started = Instant::now();
    // Every log of this turn (session, retrieval, plugins, upstream, the
    // streamed answer) carries its id, session, front and model.
    let id = uuid::Uuid::now_v7().to_string();
    let span = tracing::info_span!(
        "turn",
        id = %id,
        front = front.route(),
        session = tracing::field::Empty,
        model = tracing::field::Empty,
    );
    let turn = turn(&proxy, request, started, front, id, span.clone());
    let response = match turn.instrument(span).await {
        Ok(response) => response,
        Err(e) => {
            proxy.metrics.errors.inc(&[e.kind()]);
            let body = e.body_for(front);
            e.into_response_with(body)
        }
    };
    proxy
        .metrics
        .requests
        .inc(&[front.route(), response.status().as_str()]);
    response
}

async fn turn(
    proxy: &Arc<Proxy>,
    request: Request,
    started: Instant,
    front: Front,
    id: String,
    span: tracing::Span,
) -> Result<Response, ApiError> {
    let started_at_ms = now_ms();
    let (parts, body) = request.into_parts();

    // 1. Admit; a request in another dialect becomes the chat request that
    // is recorded and learned from (the client's own is kept for a
    // pass-through and for echoing).
    require_json(&parts.headers)?;
    let raw = read_body(body, &proxy.limits).await?;
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
    let request = ChatRequest::parse(&body, parts.headers.contains_key("x-session-id"))?;

    // 2. Session.
    let turn_type = turn_type(&parts.headers, &request);
    let session = proxy
        .sessions
        .resolve(&session_hints(&parts.headers, &request), turn_type);
    span.record("session", &*session.id);
    if let Some(model) = &request.model {
        span.record("model", model.as_str());
    }
    let done_after = parts
        .headers
        .get("x-session-done")
        .and_then(|v| v.to_str().ok())
        .is_some_and(truthy)
        || request.body_session_done;

    // 3. Upstream body (chat form).
    let (chat_body, upstream_model) = match upstream_body(&body, &request, &proxy.upstream) {
        Ok(b) => b,
        Err(e) => {
            proxy.sessions.finished(&session, turn_type, "", false);
            return Err(e);
        }
    };
    // A resend of a main turn whose answer failed is that turn again.
    let attempt = match turn_type {
        TurnType::Main => {
            let key = Attempt::key(
                request.model.as_deref(),
                request.message_count,
                request.last_user_text.as_deref(),
            );
            proxy.sessions.attempt(&session, key, &id)
        }
        TurnType::Side | TurnType::Retried => Attempt::FIRST,
    };
    // From here on the turn is tracked: if the client goes away at any
    // await below, dropping `ctx` records it and releases its session.
    let mut ctx = TurnCtx {
        proxy: proxy.clone(),
        id,
        span,
        attempt,
        user_text: request
            .last_user_text
            .as_deref()
            .map(wire::text::user_words),
        session,
        turn_type,
        front,
        model: request.model.clone(),
        upstream_model,
        stream: request.stream,
        message_count: request.message_count,
        request_body: body,
        started,
        started_at_ms,
        upstream_started: None,
        upstream_done: None,
        first_byte: None,
        admission: None,
        done_after,
        injected: Vec::new(),
        fallback: 0,
        finished: false,
    };
    ctx.admission = proxy.store.admit().await;

    // 4. Skills: the few that fit this turn, after the agent's own system
    // prompt (main turns only; background work gets none).
    let block = match (&proxy.skills, turn_type) {
        (Some(skills), TurnType::Main) if skills.settings.enabled => {
            choose_skills(skills, &chat_body, &mut ctx, request.max_output_tokens).await
        }
        _ => None,
    };
    let format = proxy.upstream.format;
    let passthrough = front.passes_through(format);
    let outgoing = match outgoing(format, passthrough, chat_body, client.as_ref(), &ctx, block) {
        Ok(outgoing) => outgoing,
        Err(e) => {
            ctx.finish(TurnStatus::Error, None, Capture::None, Some(e.to_string()));
            return Err(e);
        }
    };

    // 5. Upstream (falling back to `llm.fallbacks` before any byte is sent).
    ctx.upstream_started = Some(Instant::now());
    let path = match format {
        ApiFormat::Openai => "/chat/completions",
        ApiFormat::Anthropic => "/messages",
    };
    let sent = match proxy.upstream.post(path, &parts.headers, outgoing).await {
        Ok(sent) => sent,
        Err(e) => {
            ctx.finish(TurnStatus::Error, None, Capture::None, Some(e.to_string()));
            return Err(e);
        }
    };
    ctx.fallback = sent.target;
    if sent.model.is_some() {
        ctx.upstream_model = sent.model;
    }
    let response = sent.response;

    // 6. Answer, in the client's dialect.
    let status =
        StatusCode::from_u16(response.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut headers = HeaderMap::new();
    forward_response_headers(response.headers(), &mut headers);
    ctx.tag(&mut headers);
    if !status.is_success() {
        let body = read_whole(response, &proxy.upstream, 1 << 20)
            .await
            .unwrap_or_default();
        ctx.upstream_done = Some(Instant::now());
        // An Anthropic client of an Anthropic upstream gets the upstream's
        // own error (its request_id and any other field); the record, like
        // every other client, gets it in the one shape the store keeps.
        let own = (passthrough && format == ApiFormat::Anthropic && is_json_object(&body))
            .then(|| body.clone());
        let body = match format {
            ApiFormat::Anthropic => wire::response::error_body::to_openai(status.as_u16(), &body),
            ApiFormat::Openai => body,
        };
        let error = ApiError::UpstreamStatus { status, body };
        ctx.finish(
            TurnStatus::Error,
            Some(status),
            capture::error(error.body()),
            Some(error.to_string()),
        );
        proxy.metrics.errors.inc(&[error.kind()]);
        let body = own.unwrap_or_else(|| error.body_for(front));
        let mut response = error.into_response_with(body);
        for (name, value) in headers
            .iter()
            .filter(|(name, _)| **name != header::CONTENT_TYPE)
        {
            response.headers_mut().append(name.clone(), value.clone());
        }
        return Ok(response);
    }
    if is_event_stream(&headers) {
        let transcode = transcoders(format, front, passthrough, client.as_ref());
        let stream = TeeStream::new(
            response.bytes_stream().boxed(),
            ctx,
            proxy.upstream.between_chunks_timeout,
            transcode,
        );
        return Ok((status, headers, Body::from_stream(stream)).into_response());
    }
    match read_whole(response, &proxy.upstream, WHOLE_BODY_LIMIT).await {
        Ok(bytes) => {
            ctx.first_byte = ctx.upstream_started;
            ctx.upstream_done = Some(Instant::now());
            let answer = whole_answer(format, front, passthrough, &bytes, client.as_ref());
            let capture = capture::whole(format, bytes);
            match answer {
                Ok(answer) => {
                    ctx.finish(TurnStatus::Ok, Some(status), capture, None);
                    headers.insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    );
                    Ok((status, headers, answer).into_response())
                }
                Err(e) => {
                    ctx.finish(
                        TurnStatus::Error,
                        Some(status),
                        capture,
                        Some(e.to_string()),
                    );
                    Err(e)
                }
            }
        }
        Err(e) => {
            ctx.finish(
                TurnStatus::Incomplete,
                Some(status),
                Capture::None,
                Some(e.to_string()),
            );
            Err(e)
        }
    }
}

/// The body for the upstream, in its API: the chat body (skills spliced in
/// without re-serialising the agent's bytes), the client's own Anthropic
/// body (pass-through: skills as one more system block), or the chat body
/// translated to Anthropic's form.
fn outgoing(
    format: ApiFormat,
    passthrough: bool,
    chat_body: Bytes,
    client: Option<&Value>,
    ctx: &TurnCtx,
    block: Option<String>,
) -> Result<Bytes, ApiError> {
    let to_bytes = |v: &Value| {
        serde_json::to_vec(v)
            .map(Bytes::from)
            .map_err(|e| ApiError::Internal(e.to_string()))
    };
    if let (true, Some(client)) = (passthrough, client) {
        let mut body = client.clone();
        if let Some(map) = body.as_object_mut() {
            for field in CONTROL_FIELDS {
                map.shift_remove(*field);
            }
            if let Some(model) = &ctx.upstream_model {
                map.insert("model".into(), Value::String(model.clone()));
            }
        }
        if let Some(block) = &block {
            wire::request::anthropic::splice_system(&mut body, block);
        }
        return to_bytes(&body);
    }
    let chat_body = match &block {
        Some(block) => inject::splice(&chat_body, block).unwrap_or(chat_body),
        None => chat_body,
    };
    match format {
        ApiFormat::Openai => Ok(chat_body),
        ApiFormat::Anthropic => {
            let chat: Value = serde_json::from_slice(&chat_body)
                .map_err(|e| ApiError::InvalidJson(e.to_string()))?;
            to_bytes(&wire::request::anthropic::from_chat(&chat)?)
        }
    }
}

/// What turns the upstream's events into the client's: nothing when they
/// speak the same API, else upstream → chat → client.
fn transcoders(
    format: ApiFormat,
    front: Front,
    passthrough: bool,
    client: Option<&Value>,
) -> Option<Chain> {
    if passthrough {
        return None;
    }
    let mut stages: Vec<Box<dyn Transcode>> = Vec::new();
    if format == ApiFormat::Anthropic {
        stages.push(Box::new(wire::stream::anthropic::ToChat::default()));
    }
    match front {
        Front::Chat => {}
        Front::Anthropic => stages.push(Box::new(wire::stream::anthropic::FromChat::default())),
        Front::Responses => stages.push(Box::new(wire::stream::responses::FromChat::new(
            client.unwrap_or(&Value::Null),
        ))),
    }
    (!stages.is_empty()).then_some(Chain(stages))
}

/// A whole (non-streamed) upstream answer in the client's API.
fn whole_answer(
    format: ApiFormat,
    front: Front,
    passthrough: bool,
    bytes: &Bytes,
    client: Option<&Value>,
) -> Result<Bytes, ApiError> {
    if passthrough || (front == Front::Chat && format == ApiFormat::Openai) {
        return Ok(bytes.clone());
    }
    let parsed: Value =
        serde_json::from_slice(bytes).map_err(|e| ApiError::UpstreamUnreachable {
            base: String::new(),
            reason: format!("the upstream's answer is not JSON: {e}"),
        })?;
    let chat = match format {
        ApiFormat::Anthropic => wire::response::anthropic::to_chat(&parsed),
        ApiFormat::Openai => parsed,
    };
    let answer = match front {
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

// ---------------------------------------------------------------------------
// Stage helpers, in pipeline order.

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

fn is_json_object(bytes: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok()
        && bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// The request body, refused past `proxy.max_body_mb` or when the client is
/// slower than `proxy.timeouts.client_body`.
pub async fn read_body(body: Body, limits: &Limits) -> Result<Bytes, ApiError> {
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

fn turn_type(headers: &HeaderMap, request: &ChatRequest) -> TurnType {
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

fn session_hints<'a>(headers: &'a HeaderMap, request: &'a ChatRequest) -> Hints<'a> {
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
    }
}

/// The body to send upstream and the model it names. The agent's bytes go
/// out untouched unless something must change (control fields, model).
fn upstream_body(
    body: &Bytes,
    request: &ChatRequest,
    upstream: &Upstream,
) -> Result<(Bytes, Option<String>), ApiError> {
    let model = match (&request.model, &upstream.default_model) {
        (_, Some(default)) if upstream.force_model => default.clone(),
        (Some(model), _) => model.clone(),
        (None, Some(default)) => default.clone(),
        (None, None) => {
            return Err(ApiError::BadRequest(
                "`model` is required (or set llm.model_id to give requests a default)".into(),
            ));
        }
    };
    let change_model = request.model.as_deref() != Some(model.as_str());
    if !request.has_control_fields && !change_model {
        return Ok((body.clone(), Some(model)));
    }
    let mut map: Map<String, Value> =
        serde_json::from_slice(body).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    for field in CONTROL_FIELDS {
        map.shift_remove(*field);
    }
    if change_model {
        map.insert("model".into(), Value::String(model.clone()));
    }
    let bytes = serde_json::to_vec(&map).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok((Bytes::from(bytes), Some(model)))
}

/// Chooses the turn's skills (on a blocking thread: retrievers are plugins)
/// and returns the block to add to the system prompt, noting in `ctx` what
/// was injected. Any failure injects nothing.
async fn choose_skills(
    skills: &Arc<Skills>,
    body: &Bytes,
    ctx: &mut TurnCtx,
    reserve: u64,
) -> Option<String> {
    let skills = skills.clone();
    let query_body = body.clone();
    let session = ctx.session.id.to_string();
    let model = ctx.upstream_model.clone().unwrap_or_default();
    let engine = skills.plugins.as_ref().map(|p| p.engine.clone());
    let choose = async move {
        let query = Query::from_chat_request(&query_body, &session, &model);
        let selection = skills.select(&query).await;
        let budget = skills.settings.max_context_tokens;
        // `max_tokens` is a ceiling, often the model's whole output limit
        // (Hermes: 65,536): reserving all of it would leave no room for
        // skills, so at most a quarter of the budget is kept for the answer.
        let reserve = reserve.min(budget / 4);
        inject::fit(selection.skills, query_body.len(), reserve, budget)
    };
    // On the plugin runtime: serving threads never run plugin code, and
    // each plugin call there ends at its deadline. Dropped with the turn.
    let chosen = match engine {
        Some(engine) => engine.spawn(choose).await?,
        None => choose.await,
    };
    if chosen.is_empty() {
        return None;
    }
    ctx.injected = chosen
        .iter()
        .map(|s| InjectedSkill {
            id: s.id.clone(),
            version: s.version.clone(),
            score: s.score,
        })
        .collect();
    Some(inject::block(&chosen))
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

// ---------------------------------------------------------------------------
// The turn in flight, and how it is recorded.

struct TurnCtx {
    proxy: Arc<Proxy>,
    id: String,
    /// The turn's span, entered again wherever the turn goes on after its
    /// handler returned (the streamed answer).
    span: tracing::Span,
    attempt: Attempt,
    /// What the user said last, in their own words.
    user_text: Option<String>,
    session: SessionInfo,
    turn_type: TurnType,
    front: Front,
    model: Option<String>,
    upstream_model: Option<String>,
    stream: bool,
    message_count: u32,
    request_body: Bytes,
    started: Instant,
    started_at_ms: i64,
    upstream_started: Option<Instant>,
    upstream_done: Option<Instant>,
    first_byte: Option<Instant>,
    admission: Admission,
    done_after: bool,
    /// The skills injected, best first.
    injected: Vec<InjectedSkill>,
    /// Which upstream answered: 0 the primary, `i + 1` `llm.fallbacks[i]`.
    fallback: usize,
    finished: bool,
}

impl TurnCtx {
    /// Lets the client know where its turn was recorded.
    fn tag(&self, headers: &mut HeaderMap) {
        if let Ok(v) = HeaderValue::from_str(&self.session.id) {
            headers.insert("x-metaclaw-session-id", v);
        }
        if let Ok(v) = HeaderValue::from_str(&self.id) {
            headers.insert("x-metaclaw-turn-id", v);
        }
        if !self.injected.is_empty() {
            let ids: Vec<&str> = self.injected.iter().map(|s| s.id.as_str()).collect();
            if let Ok(v) = HeaderValue::from_str(&ids.join(",")) {
                headers.insert("x-metaclaw-skills", v);
            }
        }
        if self.fallback > 0 {
            headers.insert("x-metaclaw-fallback", HeaderValue::from(self.fallback));
        }
    }

    fn finish(
        &mut self,
        status: TurnStatus,
        http_status: Option<StatusCode>,
        response: Capture,
        error: Option<String>,
    ) {
        if self.finished {
            return;
        }
        self.finished = true;
        let now = Instant::now();
        let total = now.duration_since(self.started);
        let upstream = self.upstream_started.map(|s| {
            self.upstream_done
                .unwrap_or(now)
                .saturating_duration_since(s)
        });
        let metrics = &self.proxy.metrics;
        if let Some(upstream) = upstream {
            metrics.upstream_latency.observe(upstream.as_secs_f64());
            if status == TurnStatus::Ok {
                metrics
                    .overhead
                    .observe(total.saturating_sub(upstream).as_secs_f64());
            }
        }
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let id = std::mem::take(&mut self.id);
        let failed = status != TurnStatus::Ok;
        let record = TurnRecord {
            id: id.clone(),
            user_text: self.user_text.take(),
            attempt: self.attempt.number,
            retry_of: self.attempt.retry_of.take(),
            session: self.session.clone(),
            turn_type: self.turn_type,
            api: self.front,
            model: self.model.take(),
            upstream_model: self.upstream_model.take(),
            stream: self.stream,
            request_body: std::mem::take(&mut self.request_body),
            response,
            status,
            http_status: http_status.map(|s| s.as_u16()),
            error,
            started_at_ms: self.started_at_ms,
            finished_at_ms: self.started_at_ms + total.as_millis() as i64,
            total_ms: ms(total),
            upstream_ms: upstream.map(ms),
            ttft_ms: self
                .first_byte
                .map(|f| ms(f.saturating_duration_since(self.started))),
            message_count: self.message_count,
            injected_skills: std::mem::take(&mut self.injected),
        };
        self.proxy.store.record(record, self.admission.take());
        self.proxy
            .sessions
            .finished(&self.session, self.turn_type, &id, failed);
        if self.done_after {
            let _ = self
                .proxy
                .sessions
                .end(&self.session.id, EndReason::ClientDone);
        }
    }
}

impl Drop for TurnCtx {
    /// The handler was dropped mid-turn: the client went away.
    fn drop(&mut self) {
        if !self.finished {
            self.proxy.metrics.errors.inc(&["client_disconnected"]);
            self.finish(
                TurnStatus::Incomplete,
                None,
                Capture::None,
                Some("client disconnected".into()),
            );
        }
    }
}

/// Forwards an upstream SSE body chunk by chunk as it arrives (translated
/// event by event when the client speaks another API), keeping a copy of
/// the upstream's bytes for the record; ends the stream with an error event
/// in the client's API if the upstream stalls or fails (never a silent
/// retry: the client already has part of the answer); records the turn when
/// the stream ends or the client drops it.
struct TeeStream {
    upstream: BoxStream<'static, reqwest::Result<Bytes>>,
    captured: Vec<u8>,
    ctx: Option<TurnCtx>,
    idle: Pin<Box<Sleep>>,
    idle_timeout: Duration,
    transcode: Option<(SseParser, Chain)>,
    ended: bool,
}

impl TeeStream {
    fn new(
        upstream: BoxStream<'static, reqwest::Result<Bytes>>,
        ctx: TurnCtx,
        idle_timeout: Duration,
        transcode: Option<Chain>,
    ) -> Self {
        Self {
            upstream,
            captured: Vec::new(),
            ctx: Some(ctx),
            idle: Box::pin(tokio::time::sleep(idle_timeout)),
            idle_timeout,
            transcode: transcode.map(|chain| (SseParser::new(), chain)),
            ended: false,
        }
    }

    fn capture(&mut self) -> Capture {
        let bytes = std::mem::take(&mut self.captured);
        let format = self
            .ctx
            .as_ref()
            .map_or(ApiFormat::Openai, |c| c.proxy.upstream.format);
        capture::stream(format, bytes)
    }

    /// The client's bytes for an upstream chunk (`None`: nothing to send
    /// yet, the events are not complete).
    fn translate(&mut self, chunk: Bytes, last: bool) -> Option<Bytes> {
        let Some((parser, chain)) = self.transcode.as_mut() else {
            return Some(chunk);
        };
        let mut events = Vec::new();
        parser.push(&chunk, &mut |e| events.push(e));
        if last {
            parser.finish(&mut |e| events.push(e));
        }
        let mut out = Vec::new();
        for event in chain.run(events, last) {
            encode(&event, &mut out);
        }
        (!out.is_empty()).then(|| Bytes::from(out))
    }

    fn end(&mut self, status: TurnStatus, error: Option<(&'static str, String)>) -> Option<Bytes> {
        self.ended = true;
        let captured = self.capture();
        let ctx = self.ctx.as_mut()?;
        if status == TurnStatus::Ok {
            ctx.upstream_done = Some(Instant::now());
        }
        let event = error.as_ref().map(|(kind, message)| {
            ctx.proxy.metrics.errors.inc(&[kind]);
            let mut out = Vec::new();
            encode(&ctx.front.stream_error(kind, message), &mut out);
            Bytes::from(out)
        });
        ctx.finish(
            status,
            Some(StatusCode::OK),
            captured,
            error.map(|(_, m)| m),
        );
        event
    }
}

impl Stream for TeeStream {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if this.ended {
                return Poll::Ready(None);
            }
            let _in_turn = this.ctx.as_ref().map(|c| c.span.clone().entered());
            match this.upstream.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    if let Some(ctx) = this.ctx.as_mut() {
                        ctx.first_byte.get_or_insert_with(Instant::now);
                    }
                    if this.captured.len() + chunk.len() <= CAPTURE_LIMIT {
                        this.captured.extend_from_slice(&chunk);
                    }
                    let deadline = tokio::time::Instant::now() + this.idle_timeout;
                    this.idle.as_mut().reset(deadline);
                    if let Some(out) = this.translate(chunk, false) {
                        return Poll::Ready(Some(Ok(out)));
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    let message = format!("the upstream stream failed: {e}");
                    return Poll::Ready(
                        this.end(
                            TurnStatus::Incomplete,
                            Some(("upstream_stream_error", message)),
                        )
                        .map(Ok),
                    );
                }
                Poll::Ready(None) => {
                    let tail = this.translate(Bytes::new(), true);
                    this.end(TurnStatus::Ok, None);
                    return Poll::Ready(tail.map(Ok));
                }
                Poll::Pending => {
                    if this.idle.as_mut().poll(cx).is_ready() {
                        let message = format!(
                            "the upstream sent nothing for {} s (proxy.timeouts.between_chunks)",
                            this.idle_timeout.as_secs_f64()
                        );
                        return Poll::Ready(
                            this.end(TurnStatus::Incomplete, Some(("stream_stalled", message)))
                                .map(Ok),
                        );
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

impl Drop for TeeStream {
    /// Dropped before the end: the client disconnected. Dropping the
    /// upstream body (right after this) closes the upstream connection,
    /// which cancels the upstream request.
    fn drop(&mut self) {
        if !self.ended {
            let captured = self.capture();
            if let Some(mut ctx) = self.ctx.take() {
                ctx.proxy.metrics.errors.inc(&["client_disconnected"]);
                ctx.finish(
                    TurnStatus::Incomplete,
                    Some(StatusCode::OK),
                    captured,
                    Some("client disconnected".into()),
                );
            }
        }
    }
}
