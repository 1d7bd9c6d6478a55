//! A real OpenAI-compatible server that stands in for a paid LLM API in
//! tests, benchmarks and `metaclaw start --demo`. The request's model name
//! picks the behaviour (a `provider/` prefix is ignored):
//!
//! | model | answer |
//! |---|---|
//! | `echo` | the last user message, verbatim; streamed one word per chunk |
//! | `echo-system` | the full system prompt it received |
//! | `echo-request` | the request it received (headers and body) as JSON text |
//! | `slow-<ms>` | waits `ms`, then answers like `echo` |
//! | `stream-<n>-<ms>` | `n` chunks `chunk-1 … chunk-n`, `ms` apart |
//! | `tool-call`, `tool-call-<k>` | `k` tool calls (arguments in pieces); after a tool result, a text answer |
//! | `agent` | a tool call when the user's message names an offered tool and gives its arguments as a JSON object (`read {"path": "a.txt"}`); after a tool result, a text answer; else like `echo` (a stand-in for a real agent's model) |
//! | `error-<status>` | that HTTP status with an OpenAI-style error body |
//! | `flaky` | 503 on every other call (the first fails), else like `echo` |
//! | `hang` | never answers |
//! | `reset` | reads the request, then drops the connection without a response |
//! | `reset-after-<n>` | starts the answer (streamed: `n` chunks `chunk-1 … chunk-n`; else half the JSON, or on `/v1/messages` nothing), then drops the connection mid-body |
//! | `judge` | a judge's verdict (`Score: N`) from the prompt's "What happened next" |
//! | `judge-split` | votes 1, -1, 0, 1, … in turn (a judge that cannot agree) |
//! | `judge-flaky` | 429 with `Retry-After: 1` on every other call, else like `judge` |
//! | `evolver` | skill drafts (JSON) from the prompt's transcript, plus a near-copy of an existing skill |
//! | `evolver-leaky` | like `evolver`, with an email, a home path and a token planted in the draft |
//! | `evolver-revise` | the lesson, and a revision (`updates`) of the first existing skill that adds it |
//! | `evolver-bad` | a reply with no JSON in it |
//! | `evolver-slow-<ms>` | waits `ms`, then answers like `evolver` |
//!
//! `GET /v1/dummy/requests?model=NAME` lists the bodies of the last
//! requests for that model (what a judge or evolver was shown).
//!
//! `metaclaw dev upstream --require-key KEY` ([`Dummy::requiring_key`])
//! answers every other `/v1` route with 401 unless the request carries
//! `Authorization: Bearer KEY` or `x-api-key: KEY`, as a real provider
//! does for a wrong key (`doctor --online` is tested against it).
//!
//! OpenClaw's per-call internal-context message is not "the user's
//! message", so `echo` skips it.
//!
//! `POST /v1/embeddings` answers every model with a deterministic hashed
//! bag of words (256 dimensions: texts sharing words are similar), except
//! `error-<status>`, `slow-<ms>` and `hang`, which behave as above.

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::{Stream, StreamExt, stream};
use metaclaw_wire::agent::openclaw;
use metaclaw_wire::text::value_text;
use serde_json::{Value, json};

use super::learning;

#[derive(Default)]
pub struct Stats {
    pub requests: AtomicU64,
    pub streams_completed: AtomicU64,
    pub streams_cancelled: AtomicU64,
    pub embedding_requests: AtomicU64,
    pub embedded_texts: AtomicU64,
    /// The `Authorization` header of the last embeddings request.
    pub embedding_auth: Mutex<Option<String>>,
    /// The last chat request bodies, with their model.
    pub recent: Mutex<std::collections::VecDeque<(String, Value)>>,
}

/// Chat requests `/v1/dummy/requests` keeps.
const RECENT_REQUESTS: usize = 256;

#[derive(Default)]
pub struct Dummy {
    seq: AtomicU64,
    flaky_calls: Mutex<HashMap<String, u64>>,
    pub stats: Stats,
    /// When set, the API routes refuse requests without this key.
    required_key: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
enum Behaviour {
    Echo,
    EchoSystem,
    EchoRequest,
    Slow(u64),
    Stream { n: u32, ms: u64 },
    ToolCall(u32),
    Agent,
    Error(u16),
    Flaky,
    Hang,
    Reset,
    ResetAfter(u32),
    Judge,
    JudgeSplit,
    JudgeFlaky,
    Evolver(learning::Evolver),
    EvolverSlow(u64),
    EvolverBad,
}

const BEHAVIOURS: &[&str] = &[
    "echo",
    "echo-system",
    "echo-request",
    "slow-<ms>",
    "stream-<n>-<ms>",
    "tool-call",
    "tool-call-<k>",
    "agent",
    "error-<status>",
    "flaky",
    "hang",
    "reset",
    "reset-after-<n>",
    "judge",
    "judge-split",
    "judge-flaky",
    "evolver",
    "evolver-leaky",
    "evolver-revise",
    "evolver-bad",
    "evolver-slow-<ms>",
];

fn behaviour(model: &str) -> Option<Behaviour> {
    let name = model.rsplit('/').next().unwrap_or(model);
    Some(match name {
        "echo" => Behaviour::Echo,
        "echo-system" => Behaviour::EchoSystem,
        "echo-request" => Behaviour::EchoRequest,
        "tool-call" => Behaviour::ToolCall(1),
        "agent" => Behaviour::Agent,
        "flaky" => Behaviour::Flaky,
        "hang" => Behaviour::Hang,
        "reset" => Behaviour::Reset,
        "judge" => Behaviour::Judge,
        "judge-split" => Behaviour::JudgeSplit,
        "judge-flaky" => Behaviour::JudgeFlaky,
        "evolver" => Behaviour::Evolver(learning::Evolver::Plain),
        "evolver-leaky" => Behaviour::Evolver(learning::Evolver::Leaky),
        "evolver-revise" => Behaviour::Evolver(learning::Evolver::Revise),
        "evolver-bad" => Behaviour::EvolverBad,
        _ => {
            if let Some(ms) = name.strip_prefix("slow-") {
                Behaviour::Slow(ms.parse().ok()?)
            } else if let Some(rest) = name.strip_prefix("stream-") {
                let (n, ms) = rest.split_once('-')?;
                Behaviour::Stream {
                    n: n.parse().ok()?,
                    ms: ms.parse().ok()?,
                }
            } else if let Some(ms) = name.strip_prefix("evolver-slow-") {
                Behaviour::EvolverSlow(ms.parse().ok()?)
            } else if let Some(n) = name.strip_prefix("reset-after-") {
                Behaviour::ResetAfter(n.parse().ok()?)
            } else if let Some(k) = name.strip_prefix("tool-call-") {
                Behaviour::ToolCall(k.parse::<u32>().ok()?.clamp(1, 16))
            } else if let Some(status) = name.strip_prefix("error-") {
                let status: u16 = status.parse().ok()?;
                StatusCode::from_u16(status).ok()?;
                Behaviour::Error(status)
            } else {
                return None;
            }
        }
    })
}

impl Dummy {
    /// A dummy that answers 401 to API requests without `key`.
    pub fn requiring_key(key: impl Into<String>) -> Self {
        Self {
            required_key: Some(key.into()),
            ..Self::default()
        }
    }

    /// This call's number (1, 2, …) among the calls for `model`.
    fn count_call(&self, model: &str) -> u64 {
        let Ok(mut calls) = self.flaky_calls.lock() else {
            return 1;
        };
        let c = calls.entry(model.to_string()).or_insert(0);
        *c += 1;
        *c
    }
}

pub fn router(dummy: Arc<Dummy>) -> Router {
    let api = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/messages", post(anthropic_messages))
        .route("/v1/models", get(models))
        .route("/v1/embeddings", post(embeddings))
        .route_layer(axum::middleware::from_fn_with_state(
            dummy.clone(),
            require_key,
        ));
    Router::new()
        .merge(api)
        .route("/v1/dummy/stats", get(stats))
        .route("/v1/dummy/requests", get(recent_requests))
        .route(
            "/healthz",
            get(|| async { axum::Json(json!({ "ok": true, "dummy": true })) }),
        )
        .with_state(dummy)
}

/// With a required key, a request that does not carry it gets what OpenAI
/// answers for a wrong key (Anthropic's shape for an Anthropic client).
async fn require_key(
    State(dummy): State<Arc<Dummy>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let Some(key) = &dummy.required_key else {
        return next.run(request).await;
    };
    let headers = request.headers();
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let x_api_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
    if bearer == Some(key.as_str()) || x_api_key == Some(key.as_str()) {
        return next.run(request).await;
    }
    // Anthropic's shape for its clients (they send `anthropic-version`).
    if request.uri().path() == "/v1/messages" || headers.contains_key("anthropic-version") {
        let body = json!({"type": "error", "error": {"type": "authentication_error",
                          "message": "invalid x-api-key"}});
        return (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    }
    let body = json!({ "error": { "message": "Incorrect API key provided",
                       "type": "invalid_request_error", "code": "invalid_api_key" } });
    (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response()
}

/// Serves the dummy on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, dummy: Arc<Dummy>) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router(dummy)).await
}

async fn models() -> Response {
    let data: Vec<Value> = BEHAVIOURS
        .iter()
        .map(|b| json!({ "id": b, "object": "model", "created": 0, "owned_by": "metaclaw-dummy" }))
        .collect();
    axum::Json(json!({ "object": "list", "data": data })).into_response()
}

async fn stats(State(dummy): State<Arc<Dummy>>) -> Response {
    let s = &dummy.stats;
    axum::Json(json!({
        "requests": s.requests.load(Ordering::Relaxed),
        "streams_completed": s.streams_completed.load(Ordering::Relaxed),
        "streams_cancelled": s.streams_cancelled.load(Ordering::Relaxed),
        "embedding_requests": s.embedding_requests.load(Ordering::Relaxed),
        "embedded_texts": s.embedded_texts.load(Ordering::Relaxed),
        "embedding_auth": s.embedding_auth.lock().ok().and_then(|a| a.clone()),
    }))
    .into_response()
}

async fn recent_requests(
    State(dummy): State<Arc<Dummy>>,
    axum::extract::Query(query): axum::extract::Query<HashMap<String, String>>,
) -> Response {
    let model = query.get("model").cloned().unwrap_or_default();
    let bodies: Vec<Value> = dummy
        .stats
        .recent
        .lock()
        .map(|r| {
            r.iter()
                .filter(|(m, _)| model.is_empty() || *m == model)
                .map(|(_, b)| b.clone())
                .collect()
        })
        .unwrap_or_default();
    axum::Json(json!({ "model": model, "requests": bodies })).into_response()
}

/// Dimensions of the dummy's embeddings.
pub const EMBEDDING_DIM: usize = 256;

async fn embeddings(State(dummy): State<Arc<Dummy>>, headers: HeaderMap, body: Bytes) -> Response {
    let s = &dummy.stats;
    s.embedding_requests.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut auth) = s.embedding_auth.lock() {
        *auth = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(String::from);
    }
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "the body is not JSON");
    };
    let model = request["model"].as_str().unwrap_or_default().to_string();
    let texts: Vec<String> = match &request["input"] {
        Value::String(t) => vec![t.clone()],
        Value::Array(items) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(|t| t.as_str().map(String::from))
            .collect(),
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                "input must be a string or a list of strings",
            );
        }
    };
    match behaviour(&model) {
        Some(Behaviour::Error(status)) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
            return error(status, format!("dummy error {}", status.as_u16()));
        }
        Some(Behaviour::Slow(ms)) => tokio::time::sleep(Duration::from_millis(ms)).await,
        Some(Behaviour::Hang) => std::future::pending::<()>().await,
        _ => {}
    }
    s.embedded_texts
        .fetch_add(texts.len() as u64, Ordering::Relaxed);
    let data: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| json!({ "object": "embedding", "index": i, "embedding": hashed_embedding(t, EMBEDDING_DIM) }))
        .collect();
    axum::Json(json!({
        "object": "list",
        "model": model,
        "data": data,
        "usage": { "prompt_tokens": 0, "total_tokens": 0 },
    }))
    .into_response()
}

/// Words hashed into `dim` signed buckets, L2-normalised.
pub fn hashed_embedding(text: &str, dim: usize) -> Vec<f32> {
    let mut v = vec![0f32; dim.max(1)];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() > 2)
    {
        let word = word.to_lowercase();
        let word = word.strip_suffix('s').unwrap_or(&word);
        // FNV-1a: stable across runs and platforms.
        let h = word.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
        let sign = if h >> 63 == 0 { 1.0 } else { -1.0 };
        let slots = v.len() as u64;
        v[(h % slots) as usize] += sign;
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let kind = if status == StatusCode::TOO_MANY_REQUESTS {
        "rate_limit_error"
    } else if status.is_server_error() {
        "server_error"
    } else {
        "invalid_request_error"
    };
    let mut response = (
        status,
        axum::Json(json!({ "error": { "message": message.into(), "type": kind, "code": status.as_u16() } })),
    )
        .into_response();
    if status == StatusCode::TOO_MANY_REQUESTS {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}

async fn chat(State(dummy): State<Arc<Dummy>>, headers: HeaderMap, body: Bytes) -> Response {
    dummy.stats.requests.fetch_add(1, Ordering::Relaxed);
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "the body is not JSON");
    };
    remember(&dummy, &request);
    answer(dummy, headers, request, body.len()).await
}

fn remember(dummy: &Dummy, request: &Value) {
    let model = request["model"].as_str().unwrap_or("").to_string();
    if let Ok(mut recent) = dummy.stats.recent.lock() {
        if recent.len() == RECENT_REQUESTS {
            recent.pop_front();
        }
        recent.push_back((model, request.clone()));
    }
}

/// `POST /v1/messages`: the same models, spoken in Anthropic's API (the
/// request as received is what `/v1/dummy/requests` lists). Lets tests
/// run metaclaw against an Anthropic upstream.
async fn anthropic_messages(
    State(dummy): State<Arc<Dummy>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    use metaclaw_wire as wire;
    dummy.stats.requests.fetch_add(1, Ordering::Relaxed);
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "the body is not JSON");
    };
    remember(&dummy, &request);
    if headers.get("x-api-key").is_none() || headers.get("anthropic-version").is_none() {
        let body = json!({"type": "error", "error": {"type": "authentication_error",
                          "message": "x-api-key and anthropic-version are required"}});
        return (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    }
    let chat = match wire::request::anthropic::to_chat(&request) {
        Ok(chat) => chat,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let response = answer(dummy, headers, chat, body.len()).await;
    let (parts, body) = response.into_parts();
    if !parts.status.is_success() {
        let bytes = axum::body::to_bytes(body, 1 << 20)
            .await
            .unwrap_or_default();
        return (
            parts.status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            wire::response::error_body::to_anthropic(parts.status.as_u16(), &bytes),
        )
            .into_response();
    }
    let streamed = parts
        .headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if !streamed {
        let Ok(bytes) = axum::body::to_bytes(body, 64 << 20).await else {
            // `reset`: the connection is cut here too.
            return cut("application/json", Vec::new());
        };
        let chat: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        return axum::Json(wire::response::anthropic::from_chat(&chat)).into_response();
    }
    // Chat chunks → Anthropic events, as they come.
    let mut parser = wire::stream::sse::SseParser::new();
    let mut chain =
        wire::stream::Chain(vec![Box::new(wire::stream::anthropic::FromChat::default())]);
    let mut upstream = body.into_data_stream();
    let events = async_stream_events(move |tx| async move {
        while let Some(chunk) = upstream.next().await {
            let Ok(chunk) = chunk else {
                // `reset-after-<n>`: cut this connection too, mid-stream.
                let cut = std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "dummy: connection cut",
                );
                let _ = tx.send(Err(cut)).await;
                return;
            };
            let mut events = Vec::new();
            parser.push(&chunk, &mut |e| events.push(e));
            let mut out = Vec::new();
            for e in chain.run(events, false) {
                wire::stream::encode(&e, &mut out);
            }
            if !out.is_empty() && tx.send(Ok(Bytes::from(out))).await.is_err() {
                return;
            }
        }
        let mut out = Vec::new();
        for e in chain.run(Vec::new(), true) {
            wire::stream::encode(&e, &mut out);
        }
        let _ = tx.send(Ok(Bytes::from(out))).await;
    });
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        )],
        Body::from_stream(events),
    )
        .into_response()
}

/// A body fed by a task through a small channel.
fn async_stream_events<F, Fut>(produce: F) -> impl Stream<Item = Result<Bytes, std::io::Error>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    tokio::spawn(produce(tx));
    stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) })
}

/// The answer to a chat request (already recorded).
async fn answer(
    dummy: Arc<Dummy>,
    headers: HeaderMap,
    request: Value,
    body_len: usize,
) -> Response {
    let model = request["model"].as_str().unwrap_or("").to_string();
    let Some(behaviour) = behaviour(&model) else {
        return error(
            StatusCode::NOT_FOUND,
            format!(
                "unknown dummy model {model:?}; try one of: {}",
                BEHAVIOURS.join(", ")
            ),
        );
    };
    let stream = request["stream"].as_bool().unwrap_or(false);
    let include_usage = request["stream_options"]["include_usage"]
        .as_bool()
        .unwrap_or(false);
    let seq = dummy.seq.fetch_add(1, Ordering::Relaxed) + 1;
    let answer = Answer {
        id: format!("chatcmpl-dummy-{seq}"),
        model: model.clone(),
        seq,
        prompt_tokens: (body_len / 4) as u64,
    };

    let (parts, delay, finish): (Vec<Part>, u64, &str) = match behaviour {
        Behaviour::Echo => (words(&last_user_text(&request)), 0, "stop"),
        Behaviour::EchoSystem => (words(&system_text(&request)), 0, "stop"),
        Behaviour::EchoRequest => {
            let shown: serde_json::Map<String, Value> = headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        Value::String(v.to_str().unwrap_or("").to_string()),
                    )
                })
                .collect();
            let text = json!({ "headers": shown, "body": request }).to_string();
            (vec![Part::Text(text)], 0, "stop")
        }
        Behaviour::Slow(ms) => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            (words(&last_user_text(&request)), 0, "stop")
        }
        Behaviour::Stream { n, ms } => (
            (1..=n).map(|i| Part::Text(format!("chunk-{i} "))).collect(),
            ms,
            "stop",
        ),
        Behaviour::ToolCall(k) => {
            if last_message_role(&request) == Some("tool") {
                let result = last_message_text(&request);
                (words(&format!("The tool returned: {result}")), 0, "stop")
            } else {
                (tool_calls(&request, k, seq), 0, "tool_calls")
            }
        }
        Behaviour::Agent => {
            if last_message_role(&request) == Some("tool") {
                let result = last_message_text(&request);
                (words(&format!("The tool returned: {result}")), 0, "stop")
            } else if names_a_tool_call(&request) {
                (tool_calls(&request, 1, seq), 0, "tool_calls")
            } else {
                (words(&last_user_text(&request)), 0, "stop")
            }
        }
        Behaviour::Error(status) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return error(status, format!("dummy error {}", status.as_u16()));
        }
        Behaviour::Flaky => {
            let call = dummy.count_call(&model);
            if call % 2 == 1 {
                return error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("flaky: call {call} fails"),
                );
            }
            (words(&last_user_text(&request)), 0, "stop")
        }
        Behaviour::Hang => {
            std::future::pending::<()>().await;
            return error(StatusCode::INTERNAL_SERVER_ERROR, "unreachable");
        }
        Behaviour::Reset => return cut("application/json", Vec::new()),
        Behaviour::ResetAfter(n) => {
            let parts: Vec<Part> = (1..=n).map(|i| Part::Text(format!("chunk-{i} "))).collect();
            if stream {
                // The role chunk, then `n` content chunks: no finish, no [DONE].
                let mut frames = answer.frames(&parts, "stop", false);
                frames.truncate(1 + n as usize);
                return cut("text/event-stream", frames);
            }
            // The first half of the JSON answer.
            let whole = answer.whole(&parts, "stop").to_string();
            let half = Bytes::copy_from_slice(&whole.as_bytes()[..whole.len() / 2]);
            return cut("application/json", vec![half]);
        }
        Behaviour::Judge => (
            vec![Part::Text(learning::judge_reply(
                &last_user_text(&request),
                None,
            ))],
            0,
            "stop",
        ),
        Behaviour::JudgeSplit | Behaviour::JudgeFlaky => {
            let call = dummy.count_call(&model);
            if behaviour == Behaviour::JudgeFlaky {
                if call % 2 == 1 {
                    return error(
                        StatusCode::TOO_MANY_REQUESTS,
                        format!("judge-flaky: call {call} is rate limited"),
                    );
                }
                (
                    vec![Part::Text(learning::judge_reply(
                        &last_user_text(&request),
                        None,
                    ))],
                    0,
                    "stop",
                )
            } else {
                let text = learning::judge_reply("", Some(call - 1));
                (vec![Part::Text(text)], 0, "stop")
            }
        }
        Behaviour::Evolver(kind) => (
            vec![Part::Text(learning::evolver_reply(
                &last_user_text(&request),
                kind,
            ))],
            0,
            "stop",
        ),
        Behaviour::EvolverSlow(ms) => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            let text = learning::evolver_reply(&last_user_text(&request), learning::Evolver::Plain);
            (vec![Part::Text(text)], 0, "stop")
        }
        Behaviour::EvolverBad => (
            vec![Part::Text(
                "Sorry, I would rather not write skills today.".into(),
            )],
            0,
            "stop",
        ),
    };

    if stream {
        let frames = answer.frames(&parts, finish, include_usage);
        let body = Tracked {
            inner: stream::iter(frames.into_iter().enumerate())
                .then(move |(i, frame)| async move {
                    // Role first, then each piece `delay` apart.
                    if delay > 0 && i >= 2 {
                        tokio::time::sleep(Duration::from_millis(delay)).await;
                    }
                    Ok::<Bytes, Infallible>(frame)
                })
                .boxed(),
            dummy: dummy.clone(),
            done: false,
        };
        return (
            [
                (
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/event-stream"),
                ),
                (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            ],
            Body::from_stream(body),
        )
            .into_response();
    }
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay * parts.len() as u64)).await;
    }
    axum::Json(answer.whole(&parts, finish)).into_response()
}

/// A response whose connection is cut: `frames` go out (each flushed before
/// the next), then the body fails and the server drops the connection
/// mid-message. With no frames the body fails before the response head is
/// flushed, so the client gets no response at all, only the closed socket.
fn cut(content_type: &'static str, frames: Vec<Bytes>) -> Response {
    let sent = !frames.is_empty();
    let frames = stream::iter(frames.into_iter().enumerate()).then(|(i, frame)| async move {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok::<Bytes, std::io::Error>(frame)
    });
    let failure = stream::once(async move {
        if sent {
            // Long enough for the last frame to be flushed.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "dummy: connection cut",
        ))
    });
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
        Body::from_stream(frames.chain(failure)),
    )
        .into_response()
}

/// A piece of the answer: text, or a tool call.
#[derive(Debug, Clone)]
enum Part {
    Text(String),
    Tool {
        id: String,
        name: String,
        arguments: String,
    },
}

struct Answer {
    id: String,
    model: String,
    seq: u64,
    prompt_tokens: u64,
}

impl Answer {
    fn chunk(&self, delta: Value, finish: Option<&str>) -> Bytes {
        let v = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": 1_700_000_000 + self.seq,
            "model": self.model,
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }],
        });
        Bytes::from(format!("data: {v}\n\n"))
    }

    fn usage(&self, parts: &[Part]) -> Value {
        let completion = parts.len() as u64;
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
        })
    }

    fn frames(&self, parts: &[Part], finish: &str, include_usage: bool) -> Vec<Bytes> {
        let mut frames = vec![self.chunk(json!({ "role": "assistant", "content": "" }), None)];
        let mut tool_index = 0;
        for part in parts {
            match part {
                Part::Text(text) => frames.push(self.chunk(json!({ "content": text }), None)),
                Part::Tool {
                    id,
                    name,
                    arguments,
                } => {
                    frames.push(self.chunk(
                        json!({ "tool_calls": [{ "index": tool_index, "id": id, "type": "function",
                                                 "function": { "name": name, "arguments": "" } }] }),
                        None,
                    ));
                    // Arguments arrive in pieces, as real providers send them.
                    for piece in split_in(arguments, 3) {
                        frames.push(self.chunk(
                            json!({ "tool_calls": [{ "index": tool_index, "function": { "arguments": piece } }] }),
                            None,
                        ));
                    }
                    tool_index += 1;
                }
            }
        }
        frames.push(self.chunk(json!({}), Some(finish)));
        if include_usage {
            let v = json!({
                "id": self.id, "object": "chat.completion.chunk", "created": 1_700_000_000 + self.seq,
                "model": self.model, "choices": [], "usage": self.usage(parts),
            });
            frames.push(Bytes::from(format!("data: {v}\n\n")));
        }
        frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
        frames
    }

    fn whole(&self, parts: &[Part], finish: &str) -> Value {
        let text: String = parts
            .iter()
            .filter_map(|p| {
                if let Part::Text(t) = p {
                    Some(t.as_str())
                } else {
                    None
                }
            })
            .collect();
        let calls: Vec<Value> = parts
            .iter()
            .filter_map(|p| match p {
                Part::Tool { id, name, arguments } => Some(json!({
                    "id": id, "type": "function", "function": { "name": name, "arguments": arguments },
                })),
                Part::Text(_) => None,
            })
            .collect();
        let mut message = json!({ "role": "assistant", "content": if calls.is_empty() { json!(text) } else { Value::Null } });
        if !calls.is_empty() {
            message["tool_calls"] = Value::Array(calls);
        }
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": 1_700_000_000 + self.seq,
            "model": self.model,
            "choices": [{ "index": 0, "message": message, "finish_reason": finish }],
            "usage": self.usage(parts),
        })
    }
}

/// Counts streams that ran to the end and streams the client dropped.
struct Tracked {
    inner: futures_util::stream::BoxStream<'static, Result<Bytes, Infallible>>,
    dummy: Arc<Dummy>,
    done: bool,
}

impl Stream for Tracked {
    type Item = Result<Bytes, Infallible>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.inner.poll_next_unpin(cx);
        if let Poll::Ready(None) = polled
            && !self.done
        {
            self.done = true;
            self.dummy
                .stats
                .streams_completed
                .fetch_add(1, Ordering::Relaxed);
        }
        polled
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if !self.done {
            self.dummy
                .stats
                .streams_cancelled
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn messages(request: &Value) -> &[Value] {
    request["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn last_user_text(request: &Value) -> String {
    messages(request)
        .iter()
        .rev()
        .filter(|m| m["role"] == "user")
        .map(|m| value_text(&m["content"]))
        .find(|t| !openclaw::is_internal_context(t))
        .unwrap_or_default()
}

fn system_text(request: &Value) -> String {
    messages(request)
        .iter()
        .filter(|m| m["role"] == "system" || m["role"] == "developer")
        .map(|m| value_text(&m["content"]))
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// The last message that is not OpenClaw's internal context.
fn last_real_message(request: &Value) -> Option<&Value> {
    messages(request).iter().rev().find(|m| {
        !(m["role"] == "user" && openclaw::is_internal_context(&value_text(&m["content"])))
    })
}

fn last_message_role(request: &Value) -> Option<&str> {
    last_real_message(request).and_then(|m| m["role"].as_str())
}

fn last_message_text(request: &Value) -> String {
    last_real_message(request)
        .map(|m| value_text(&m["content"]))
        .unwrap_or_default()
}

/// Words with their trailing whitespace: concatenated, they are the text.
fn words(text: &str) -> Vec<Part> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut in_space = false;
    for (i, c) in text.char_indices() {
        if c.is_whitespace() {
            in_space = true;
        } else if in_space {
            out.push(Part::Text(text[start..i].to_string()));
            start = i;
            in_space = false;
        }
    }
    if start < text.len() {
        out.push(Part::Text(text[start..].to_string()));
    }
    out
}

fn split_in(text: &str, pieces: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return vec![String::new()];
    }
    let size = chars.len().div_ceil(pieces);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// `k` calls: the tools the user's message names (else the request's first
/// tools, else `lookup`), with the first JSON object in the message as
/// arguments (else `{}`).
fn tool_calls(request: &Value, k: u32, seq: u64) -> Vec<Part> {
    let user = last_user_text(request);
    let tools: Vec<String> = request["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let mut named: Vec<String> = tools
        .iter()
        .filter(|t| user.contains(t.as_str()))
        .cloned()
        .collect();
    named.extend(tools.iter().filter(|t| !user.contains(t.as_str())).cloned());
    if named.is_empty() {
        named.push("lookup".into());
    }
    let arguments = first_json_object(&user).unwrap_or_else(|| "{}".into());
    (0..k as usize)
        .map(|i| Part::Tool {
            id: format!("call_{seq}_{i}"),
            name: named[i % named.len()].clone(),
            arguments: arguments.clone(),
        })
        .collect()
}

/// The user's message names one of the offered tools and carries a JSON
/// object for its arguments.
fn names_a_tool_call(request: &Value) -> bool {
    let user = last_user_text(request);
    first_json_object(&user).is_some()
        && request["tools"].as_array().is_some_and(|tools| {
            tools.iter().any(|t| {
                t["function"]["name"]
                    .as_str()
                    .is_some_and(|name| user.contains(name))
            })
        })
}

fn first_json_object(text: &str) -> Option<String> {
    let start = text.find('{')?;
    let mut depth = 0usize;
    for (i, c) in text[start..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    let candidate = &text[start..start + i + 1];
                    return serde_json::from_str::<Value>(candidate)
                        .ok()
                        .map(|v| v.to_string());
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_pick_behaviours() {
        assert_eq!(behaviour("echo"), Some(Behaviour::Echo));
        assert_eq!(behaviour("metaclaw/echo"), Some(Behaviour::Echo));
        assert_eq!(behaviour("slow-250"), Some(Behaviour::Slow(250)));
        assert_eq!(
            behaviour("stream-10-100"),
            Some(Behaviour::Stream { n: 10, ms: 100 })
        );
        assert_eq!(behaviour("tool-call-2"), Some(Behaviour::ToolCall(2)));
        assert_eq!(behaviour("error-429"), Some(Behaviour::Error(429)));
        assert_eq!(behaviour("error-99"), None);
        assert_eq!(behaviour("reset"), Some(Behaviour::Reset));
        assert_eq!(behaviour("reset-after-3"), Some(Behaviour::ResetAfter(3)));
        assert_eq!(behaviour("gpt-4o"), None);
    }

    #[test]
    fn words_concatenate_back_to_the_text() {
        for text in ["", "one", "  lead and  double  spaces\n", "Say PONG"] {
            let joined: String = words(text)
                .into_iter()
                .map(|p| {
                    if let Part::Text(t) = p {
                        t
                    } else {
                        String::new()
                    }
                })
                .collect();
            assert_eq!(joined, text);
        }
    }

    #[test]
    fn the_agent_model_calls_a_tool_only_when_asked() {
        let tools = json!([{"type": "function", "function": {"name": "read"}}]);
        let asked = json!({"messages": [{"role": "user", "content": "read {\"path\": \"a.txt\"}"}], "tools": tools});
        let plain = json!({"messages": [{"role": "user", "content": "Say PONG"}], "tools": tools});
        assert!(names_a_tool_call(&asked));
        assert!(!names_a_tool_call(&plain));
        assert_eq!(behaviour("metaclaw/agent"), Some(Behaviour::Agent));
    }

    #[test]
    fn tool_calls_use_the_named_tool_and_inline_arguments() {
        let request = json!({
            "messages": [{"role": "user", "content": "please read {\"path\": \"hello.txt\"}"}],
            "tools": [{"type": "function", "function": {"name": "exec"}}, {"type": "function", "function": {"name": "read"}}],
        });
        let parts = tool_calls(&request, 1, 7);
        let Part::Tool {
            name,
            arguments,
            id,
        } = &parts[0]
        else {
            panic!()
        };
        assert_eq!(name, "read");
        assert_eq!(arguments, "{\"path\":\"hello.txt\"}");
        assert_eq!(id, "call_7_0");
    }

    #[tokio::test]
    async fn a_required_key_is_checked_on_the_api_routes_only() {
        use tower::ServiceExt;
        let app = router(Arc::new(Dummy::requiring_key("sk-right")));
        let get = |path: &str, auth: Option<(&str, &str)>| {
            let mut request = axum::http::Request::builder().uri(path);
            if let Some((k, v)) = auth {
                request = request.header(k, v);
            }
            let app = app.clone();
            let request = request.body(Body::empty()).unwrap();
            async move { app.oneshot(request).await.unwrap().status() }
        };
        assert_eq!(get("/v1/models", None).await, StatusCode::UNAUTHORIZED);
        let wrong = Some(("authorization", "Bearer sk-wrong"));
        assert_eq!(get("/v1/models", wrong).await, StatusCode::UNAUTHORIZED);
        let right = Some(("authorization", "Bearer sk-right"));
        assert_eq!(get("/v1/models", right).await, StatusCode::OK);
        assert_eq!(
            get("/v1/models", Some(("x-api-key", "sk-right"))).await,
            StatusCode::OK
        );
        // The dummy's own routes stay open.
        assert_eq!(get("/healthz", None).await, StatusCode::OK);
        assert_eq!(get("/v1/dummy/stats", None).await, StatusCode::OK);
        // No key required: everything answers.
        let open = router(Arc::new(Dummy::default()));
        let request = axum::http::Request::builder()
            .uri("/v1/models")
            .body(Body::empty())
            .unwrap();
        assert_eq!(
            open.oneshot(request).await.unwrap().status(),
            StatusCode::OK
        );
    }
}
