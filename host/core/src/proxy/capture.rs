//! A turn as the record takes it. The request: the agent's bytes and where
//! its messages, tools and parameters lie (read once, by the proxy). The
//! answer: the bytes the upstream sent and how to read them as a chat
//! completion. Reading runs later, on the store's writer thread, so the
//! serving path only keeps bytes and ranges; the store knows no API format
//! and no agent.

use bytes::Bytes;
use metaclaw_wire::ApiFormat;
use metaclaw_wire::request::{CONTROL_FIELDS, ChatRequest, Role};
use serde_json::{Value, json};

use crate::store::{Capture, RecordedRequest, SCORER_TAIL};

/// What of a request is recorded: the conversation (not OpenClaw's
/// per-call internal context), the tools and the parameters, without
/// metaclaw's own control fields.
pub fn request(request: &ChatRequest) -> RecordedRequest {
    let mut recorded = RecordedRequest {
        body: request.body().clone(),
        messages: request
            .messages()
            .iter()
            .filter(|m| !m.internal)
            .map(|m| m.raw.clone())
            .collect(),
        ..RecordedRequest::default()
    };
    let mut scored: Vec<usize> = request
        .messages()
        .iter()
        .filter(|m| !m.internal)
        .enumerate()
        .filter(|(_, m)| m.role != Role::System)
        .map(|(i, _)| i)
        .collect();
    scored.drain(..scored.len().saturating_sub(SCORER_TAIL));
    recorded.scored = scored;
    for field in request.fields() {
        match field.name.as_str() {
            "messages" => {}
            "tools" => recorded.tools = Some(field.value.clone()),
            name if CONTROL_FIELDS.contains(&name) => {}
            name => recorded
                .params
                .push((name.to_string(), field.value.clone())),
        }
    }
    recorded
}

/// A whole (non-streamed) answer from an upstream speaking `format`.
pub fn whole(format: ApiFormat, bytes: Bytes) -> Capture {
    let read = match format {
        ApiFormat::Openai => chat_json,
        ApiFormat::Anthropic => anthropic_json,
    };
    Capture::Answer { bytes, read }
}

/// A streamed answer (server-sent events) from an upstream speaking
/// `format`, as far as it went.
pub fn stream(format: ApiFormat, bytes: Vec<u8>) -> Capture {
    let read = match format {
        ApiFormat::Openai => metaclaw_wire::stream::assemble::assemble_sse,
        ApiFormat::Anthropic => metaclaw_wire::stream::anthropic::assemble,
    };
    Capture::Answer {
        bytes: Bytes::from(bytes),
        read,
    }
}

/// An error answer, already in OpenAI's shape.
pub fn error(body: Bytes) -> Capture {
    Capture::Answer {
        bytes: body,
        read: chat_json,
    }
}

fn chat_json(bytes: &[u8]) -> (Value, bool) {
    (
        serde_json::from_slice(bytes).unwrap_or_else(|_| raw(bytes)),
        true,
    )
}

fn anthropic_json(bytes: &[u8]) -> (Value, bool) {
    let chat = serde_json::from_slice::<Value>(bytes)
        .map(|v| metaclaw_wire::response::anthropic::to_chat(&v))
        .unwrap_or_else(|_| raw(bytes));
    (chat, true)
}

/// An answer that is not JSON, kept as text.
fn raw(bytes: &[u8]) -> Value {
    json!({ "raw": String::from_utf8_lossy(bytes) })
}
