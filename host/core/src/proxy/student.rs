//! A turn answered by the trainable model (`mode: rl` / `auto`): the chat
//! request as it would go upstream (skills block included) is sampled
//! through the policy, and the parsed sample becomes a chat completion,
//! then the client's API: a whole body, or a stream told in one go when
//! the sample is complete (Tinker sampling is not incremental, so the
//! first byte comes when the whole answer does, and the turn's TTFT says
//! so). What was sampled goes to the store with the turn.

use std::time::Instant;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use metaclaw_wire::ApiFormat;
use metaclaw_wire::request::ChatRequest;
use metaclaw_wire::stream::{encode, replay};
use serde_json::{Value, json};

use super::answer::Dialects;
use super::capture;
use super::record::{Outcome, TurnCtx};
use crate::error::ApiError;
use crate::policy::{Answer, Policy, TurnInput, Unavailable};
use crate::store::ServedBy;

/// Samples the student for this turn: `Err` says why `llm` must answer
/// instead.
pub(super) async fn sample(
    policy: &Policy,
    request: &ChatRequest,
    block: Option<&str>,
    ctx: &mut TurnCtx,
) -> Result<Answer, Unavailable> {
    let body = request.outgoing(None, block);
    let chat: Sampling = serde_json::from_slice(&body)
        .map_err(|e| Unavailable(format!("the request cannot be sampled: {e}")))?;
    if chat.n.is_some_and(|n| n > 1) {
        return Err(Unavailable(
            "the request asks for n > 1 answers; the student gives one".into(),
        ));
    }
    let tools = chat.tools.as_deref().filter(|t| !t.is_empty());
    let stop = match chat.stop {
        Some(Stop::One(s)) => vec![s],
        Some(Stop::Many(items)) => items,
        None => Vec::new(),
    };
    let max_tokens = chat.max_completion_tokens.or(chat.max_tokens);
    let skill_generation = ctx
        .proxy
        .skills
        .as_ref()
        .map_or(0, |s| s.library.snapshot().generation);
    ctx.upstream_started = Some(Instant::now());
    let input = TurnInput {
        messages: &chat.messages,
        tools,
        max_tokens,
        temperature: chat.temperature.map(|t| t as f32),
        top_p: chat.top_p.map(|t| t as f32),
        seed: chat.seed,
        stop,
        session: &ctx.session.id,
        turn_id: &ctx.id,
        main: ctx.turn_type == crate::sessions::TurnType::Main,
        skill_generation,
    };
    policy.answer(input).await
}

/// What the student reads of a chat request (as it would go upstream,
/// skills block included), typed. A field of the wrong type is refused, and
/// `llm` answers (its upstream says what is wrong).
#[derive(serde::Deserialize)]
struct Sampling {
    #[serde(default)]
    n: Option<u64>,
    /// Rendered by the model's chat template, as sent.
    #[serde(default)]
    messages: Vec<Value>,
    #[serde(default)]
    tools: Option<Vec<Value>>,
    #[serde(default)]
    stop: Option<Stop>,
    #[serde(default)]
    max_completion_tokens: Option<u64>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    seed: Option<u64>,
}

/// `stop`: one string or several.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Stop {
    One(String),
    Many(Vec<String>),
}

/// The student's answer in the client's API, recorded with its sample.
pub(super) fn respond(
    answer: Answer,
    mut ctx: TurnCtx,
    client: Option<&Value>,
) -> Result<Response, ApiError> {
    let now = Instant::now();
    ctx.first_byte = Some(now);
    ctx.upstream_done = Some(now);
    let model = ctx
        .model
        .clone()
        .unwrap_or_else(|| answer.sample.base_model.clone());
    let completion = completion(&ctx.id, &model, &answer);
    let whole = Bytes::from(completion.to_string());
    let dialects = Dialects::new(ctx.front, ApiFormat::Openai);
    let mut headers = HeaderMap::new();
    ctx.upstream_model = Some(answer.sample.base_model.clone());
    let capture = capture::whole(ApiFormat::Openai, whole.clone());
    ctx.arms.extend(answer.arm);
    ctx.served_by = ServedBy::Student(Box::new(answer.sample));
    ctx.tag(&mut headers);
    if ctx.stream {
        let mut events = replay::chat_stream(&completion);
        if let Some(mut chain) = dialects.transcoders(client) {
            events = chain.run(events, true);
        }
        let mut bytes = Vec::new();
        for event in &events {
            encode(event, &mut bytes);
        }
        ctx.finish(Outcome::Answered {
            http_status: StatusCode::OK,
            capture,
        });
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        return Ok((StatusCode::OK, headers, Body::from(bytes)).into_response());
    }
    match dialects.whole_answer(&whole, client) {
        Ok(body) => {
            ctx.finish(Outcome::Answered {
                http_status: StatusCode::OK,
                capture,
            });
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            Ok((StatusCode::OK, headers, body).into_response())
        }
        Err(e) => {
            ctx.finish(Outcome::failed(Some(StatusCode::OK), &e));
            Err(e)
        }
    }
}

/// The answer as an OpenAI chat completion.
fn completion(turn_id: &str, model: &str, answer: &Answer) -> Value {
    let (prompt, completion) = (
        answer.sample.prompt_tokens.len(),
        answer.sample.tokens.len(),
    );
    json!({
        "id": format!("chatcmpl-{turn_id}"),
        "object": "chat.completion",
        "created": crate::clock::now_ms() / 1000,
        "model": model,
        "choices": [{"index": 0, "message": crate::policy::message_json(&answer.parsed), "finish_reason": answer.finish_reason}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    })
}
