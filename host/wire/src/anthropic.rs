//! Anthropic Messages ⇄ OpenAI chat completions: requests both ways,
//! whole answers both ways, streamed answers both ways (event by event),
//! and error bodies. Used for `/v1/messages` in front of an OpenAI-style
//! upstream, for chat clients in front of an Anthropic upstream, and to
//! record an Anthropic answer in the one form the store keeps.

use std::collections::HashMap;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::dialect::{
    Transcode, arguments_object, blocks_text, chat_chunk, copy_control_fields, named,
};
use crate::error::{Error, Result};
use crate::sse::SseEvent;
use crate::unix_seconds;

/// Anthropic requires `max_tokens`; a chat request may leave it out.
const DEFAULT_MAX_TOKENS: u64 = 4096;

// ---------------------------------------------------------------------------
// Requests.

fn bad_field(field: impl Into<String>, expected: &'static str) -> Error {
    Error::BadField {
        field: field.into(),
        expected,
    }
}

/// An Anthropic Messages request as a chat-completions request.
pub fn request_to_chat(request: &Value) -> Result<Value> {
    let obj = request.as_object().ok_or(Error::NotAnObject)?;
    let messages = match obj.get("messages") {
        Some(Value::Array(m)) => m,
        Some(_) => return Err(bad_field("`messages`", "a list of {role, content}")),
        None => {
            return Err(Error::Missing {
                field: "messages",
                expected: "a list of {role, content}",
            });
        }
    };
    let mut chat = Vec::with_capacity(messages.len() + 1);
    match obj.get("system") {
        None | Some(Value::Null) => {}
        Some(system @ (Value::String(_) | Value::Array(_))) => {
            let text = system_text(system);
            if !text.is_empty() {
                chat.push(json!({"role": "system", "content": text}));
            }
        }
        Some(_) => {
            return Err(bad_field("`system`", "a string or a list of text blocks"));
        }
    }
    for (i, message) in messages.iter().enumerate() {
        let content = &message["content"];
        match message["role"].as_str() {
            Some("user") => user_to_chat(content, i, &mut chat)?,
            Some("assistant") => chat.push(assistant_to_chat(content, i)?),
            _ => {
                return Err(bad_field(
                    format!("messages[{i}].role"),
                    "\"user\" or \"assistant\"",
                ));
            }
        }
    }
    let mut out = Map::new();
    if let Some(model) = obj.get("model") {
        out.insert("model".into(), model.clone());
    }
    out.insert("messages".into(), Value::Array(chat));
    if let Some(n) = obj.get("max_tokens").filter(|v| v.is_u64()) {
        out.insert("max_tokens".into(), n.clone());
    }
    for key in ["temperature", "top_p"] {
        if let Some(v) = obj.get(key).filter(|v| v.is_number()) {
            out.insert(key.into(), v.clone());
        }
    }
    if let Some(stop) = obj.get("stop_sequences").filter(|v| v.is_array()) {
        out.insert("stop".into(), stop.clone());
    }
    if let Some(user) = request["metadata"]["user_id"].as_str() {
        out.insert("user".into(), json!(user));
    }
    if let Some(tools) = obj.get("tools").and_then(Value::as_array) {
        // Server tools (web search…) have no schema and no OpenAI form.
        let tools: Vec<Value> = tools
            .iter()
            .filter(|t| t.get("input_schema").is_some())
            .map(|t| {
                let mut function = Map::new();
                function.insert("name".into(), t["name"].clone());
                if let Some(d) = t.get("description") {
                    function.insert("description".into(), d.clone());
                }
                function.insert("parameters".into(), t["input_schema"].clone());
                json!({"type": "function", "function": function})
            })
            .collect();
        if !tools.is_empty() {
            out.insert("tools".into(), Value::Array(tools));
        }
    }
    if let Some(choice) = obj.get("tool_choice").filter(|v| v.is_object()) {
        let mapped = match choice["type"].as_str() {
            Some("any") => json!("required"),
            Some("none") => json!("none"),
            Some("tool") => json!({"type": "function", "function": {"name": choice["name"]}}),
            _ => json!("auto"),
        };
        out.insert("tool_choice".into(), mapped);
        if choice["disable_parallel_tool_use"] == true {
            out.insert("parallel_tool_calls".into(), json!(false));
        }
    }
    if obj.get("stream") == Some(&Value::Bool(true)) {
        out.insert("stream".into(), json!(true));
        out.insert("stream_options".into(), json!({"include_usage": true}));
    }
    copy_control_fields(request, &mut out);
    Ok(Value::Object(out))
}

fn system_text(system: &Value) -> String {
    match system {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n\n"),
        _ => String::new(),
    }
}

/// A user turn: tool results become `tool` messages (first: OpenAI wants
/// them right after the assistant's calls), the rest one user message.
fn user_to_chat(content: &Value, i: usize, chat: &mut Vec<Value>) -> Result<()> {
    let blocks = match content {
        Value::String(s) => {
            chat.push(json!({"role": "user", "content": s}));
            return Ok(());
        }
        Value::Array(blocks) => blocks,
        _ => {
            return Err(bad_field(
                format!("messages[{i}].content"),
                "a string or a list of blocks",
            ));
        }
    };
    let mut parts = Vec::new();
    for block in blocks {
        match block["type"].as_str() {
            Some("text") => parts.push(json!({"type": "text", "text": block["text"]})),
            Some("image") => {
                let source = &block["source"];
                let url = match source["type"].as_str() {
                    Some("base64") => format!(
                        "data:{};base64,{}",
                        source["media_type"].as_str().unwrap_or("image/png"),
                        source["data"].as_str().unwrap_or("")
                    ),
                    _ => source["url"].as_str().unwrap_or("").to_string(),
                };
                parts.push(json!({"type": "image_url", "image_url": {"url": url}}));
            }
            Some("tool_result") => {
                let mut text = blocks_text(&block["content"]);
                if block["is_error"] == true && !text.starts_with("Error") {
                    text = format!("Error: {text}");
                }
                chat.push(json!({
                    "role": "tool",
                    "tool_call_id": block["tool_use_id"],
                    "content": text,
                }));
            }
            Some("document") => {
                if let Some(text) = block["source"]["data"].as_str() {
                    parts.push(json!({"type": "text", "text": text}));
                }
            }
            _ => {}
        }
    }
    if parts.is_empty() {
        return Ok(());
    }
    let all_text = parts.iter().all(|p| p["type"] == "text");
    let content = if all_text && parts.len() == 1 {
        parts[0]["text"].clone()
    } else {
        Value::Array(parts)
    };
    chat.push(json!({"role": "user", "content": content}));
    Ok(())
}

fn assistant_to_chat(content: &Value, i: usize) -> Result<Value> {
    let blocks = match content {
        Value::String(s) => return Ok(json!({"role": "assistant", "content": s})),
        Value::Array(blocks) => blocks,
        _ => {
            return Err(bad_field(
                format!("messages[{i}].content"),
                "a string or a list of blocks",
            ));
        }
    };
    // Thinking blocks are the model's own; they are not sent back upstream.
    let (message, _thinking) = assistant_message(blocks);
    Ok(Value::Object(message))
}

/// Anthropic assistant content blocks as a chat assistant message (text
/// joined, `tool_use` as `tool_calls`; `content` null when there are only
/// calls), and the text of its thinking blocks.
fn assistant_message(blocks: &[Value]) -> (Map<String, Value>, String) {
    let mut text = String::new();
    let mut calls = Vec::new();
    let mut thinking = String::new();
    for block in blocks {
        match block["type"].as_str() {
            Some("text") => text.push_str(block["text"].as_str().unwrap_or("")),
            Some("thinking") => thinking.push_str(block["thinking"].as_str().unwrap_or("")),
            Some("tool_use") => calls.push(json!({
                "id": block["id"],
                "type": "function",
                "function": {
                    "name": block["name"],
                    "arguments": block.get("input").map(Value::to_string).unwrap_or_else(|| "{}".into()),
                },
            })),
            _ => {}
        }
    }
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    message.insert(
        "content".into(),
        if text.is_empty() && !calls.is_empty() {
            Value::Null
        } else {
            json!(text)
        },
    );
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    (message, thinking)
}

/// A chat-completions request as an Anthropic Messages request.
pub fn request_from_chat(request: &Value) -> Result<Value> {
    let messages = request["messages"].as_array().ok_or(Error::Missing {
        field: "messages",
        expected: "a list of chat messages",
    })?;
    let mut system = Vec::new();
    let mut out_messages: Vec<Value> = Vec::new();
    for m in messages {
        match m["role"].as_str().unwrap_or("") {
            "system" | "developer" => system.push(blocks_text(&m["content"])),
            "assistant" => {
                let mut blocks = Vec::new();
                let text = blocks_text(&m["content"]);
                if !text.is_empty() {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                for call in m["tool_calls"].as_array().into_iter().flatten() {
                    blocks.push(json!({
                        "type": "tool_use",
                        "id": call["id"],
                        "name": call["function"]["name"],
                        "input": arguments_object(call["function"]["arguments"].as_str().unwrap_or("")),
                    }));
                }
                if !blocks.is_empty() {
                    out_messages.push(json!({"role": "assistant", "content": blocks}));
                }
            }
            "tool" => {
                let block = json!({
                    "type": "tool_result",
                    "tool_use_id": m["tool_call_id"],
                    "content": blocks_text(&m["content"]),
                });
                // Results of one round of calls share one user turn.
                match out_messages.last_mut() {
                    Some(last)
                        if last["role"] == "user"
                            && last["content"]
                                .as_array()
                                .is_some_and(|b| b.iter().all(|b| b["type"] == "tool_result")) =>
                    {
                        if let Some(blocks) = last["content"].as_array_mut() {
                            blocks.push(block);
                        }
                    }
                    _ => out_messages.push(json!({"role": "user", "content": [block]})),
                }
            }
            _ => {
                let content = match &m["content"] {
                    Value::String(s) => json!(s),
                    Value::Array(parts) => Value::Array(
                        parts
                            .iter()
                            .filter_map(|p| match p["type"].as_str() {
                                Some("text") => Some(json!({"type": "text", "text": p["text"]})),
                                Some("image_url") => {
                                    Some(image_block(p["image_url"]["url"].as_str().unwrap_or("")))
                                }
                                _ => None,
                            })
                            .collect(),
                    ),
                    _ => json!(""),
                };
                out_messages.push(json!({"role": "user", "content": content}));
            }
        }
    }
    let mut out = Map::new();
    out.insert("model".into(), request["model"].clone());
    let max_tokens = request["max_completion_tokens"]
        .as_u64()
        .or(request["max_tokens"].as_u64())
        .unwrap_or(DEFAULT_MAX_TOKENS);
    out.insert("max_tokens".into(), json!(max_tokens));
    let system = system.join("\n\n");
    if !system.is_empty() {
        out.insert("system".into(), json!(system));
    }
    out.insert("messages".into(), Value::Array(out_messages));
    for key in ["temperature", "top_p"] {
        if request[key].is_number() {
            out.insert(key.into(), request[key].clone());
        }
    }
    match &request["stop"] {
        Value::String(s) => {
            out.insert("stop_sequences".into(), json!([s]));
        }
        v @ Value::Array(_) => {
            out.insert("stop_sequences".into(), v.clone());
        }
        _ => {}
    }
    if let Some(user) = request["user"].as_str() {
        out.insert("metadata".into(), json!({"user_id": user}));
    }
    if let Some(tools) = request["tools"].as_array() {
        let tools: Vec<Value> = tools
            .iter()
            .filter(|t| t["type"] == "function")
            .map(|t| {
                let f = &t["function"];
                let mut tool = Map::new();
                tool.insert("name".into(), f["name"].clone());
                if f["description"].is_string() {
                    tool.insert("description".into(), f["description"].clone());
                }
                tool.insert(
                    "input_schema".into(),
                    if f["parameters"].is_object() {
                        f["parameters"].clone()
                    } else {
                        json!({"type": "object"})
                    },
                );
                Value::Object(tool)
            })
            .collect();
        if !tools.is_empty() {
            out.insert("tools".into(), Value::Array(tools));
        }
    }
    let mut choice = match &request["tool_choice"] {
        Value::String(s) if s == "required" => Some(json!({"type": "any"})),
        Value::String(s) if s == "none" => Some(json!({"type": "none"})),
        Value::String(_) => Some(json!({"type": "auto"})),
        Value::Object(o) => o
            .get("function")
            .map(|f| json!({"type": "tool", "name": f["name"]})),
        _ => None,
    };
    if request["parallel_tool_calls"] == false && out.contains_key("tools") {
        let c = choice.get_or_insert_with(|| json!({"type": "auto"}));
        c["disable_parallel_tool_use"] = json!(true);
    }
    if let Some(choice) = choice
        && out.contains_key("tools")
    {
        out.insert("tool_choice".into(), choice);
    }
    if request["stream"] == true {
        out.insert("stream".into(), json!(true));
    }
    Ok(Value::Object(out))
}

fn image_block(url: &str) -> Value {
    if let Some(rest) = url.strip_prefix("data:")
        && let Some((media, data)) = rest.split_once(";base64,")
    {
        return json!({"type": "image", "source": {"type": "base64", "media_type": media, "data": data}});
    }
    json!({"type": "image", "source": {"type": "url", "url": url}})
}

/// Appends `text` to the system prompt of an Anthropic request (a new text
/// block after the agent's own, whose blocks and cache marks stay as sent).
pub fn splice_system(request: &mut Value, text: &str) {
    let Some(obj) = request.as_object_mut() else {
        return;
    };
    match obj.get_mut("system") {
        Some(Value::String(s)) => {
            s.push_str("\n\n");
            s.push_str(text);
        }
        Some(Value::Array(blocks)) => blocks.push(json!({"type": "text", "text": text})),
        _ => {
            obj.insert("system".into(), json!(text));
        }
    }
}

// ---------------------------------------------------------------------------
// Whole answers.

fn stop_from_finish(finish: Option<&str>) -> &'static str {
    match finish {
        Some("length") => "max_tokens",
        Some("tool_calls" | "function_call") => "tool_use",
        Some("content_filter") => "refusal",
        _ => "end_turn",
    }
}

fn finish_from_stop(stop: Option<&str>) -> Option<&'static str> {
    Some(match stop? {
        "max_tokens" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        _ => "stop",
    })
}

fn message_id(chat_id: Option<&str>) -> String {
    match chat_id {
        Some(id) if id.starts_with("msg_") => id.to_string(),
        Some(id) if !id.is_empty() => format!("msg_{id}"),
        _ => format!("msg_{}", uuid::Uuid::now_v7().simple()),
    }
}

/// A `chat.completion` as an Anthropic `message`.
pub fn response_from_chat(chat: &Value) -> Value {
    let choice = &chat["choices"][0];
    let message = &choice["message"];
    let mut content = Vec::new();
    let text = blocks_text(&message["content"]);
    if !text.is_empty() {
        content.push(json!({"type": "text", "text": text}));
    }
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        content.push(json!({
            "type": "tool_use",
            "id": call["id"],
            "name": call["function"]["name"],
            "input": arguments_object(call["function"]["arguments"].as_str().unwrap_or("")),
        }));
    }
    json!({
        "id": message_id(chat["id"].as_str()),
        "type": "message",
        "role": "assistant",
        "model": chat["model"],
        "content": content,
        "stop_reason": stop_from_finish(choice["finish_reason"].as_str()),
        "stop_sequence": null,
        "usage": {
            "input_tokens": chat["usage"]["prompt_tokens"].as_u64().unwrap_or(0),
            "output_tokens": chat["usage"]["completion_tokens"].as_u64().unwrap_or(0),
        },
    })
}

/// An Anthropic `message` as a `chat.completion`.
pub fn response_to_chat(message: &Value) -> Value {
    let blocks = message["content"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let (mut msg, reasoning) = assistant_message(blocks);
    if !reasoning.is_empty() {
        msg.insert("reasoning_content".into(), json!(reasoning));
    }
    let usage = &message["usage"];
    let input = usage_input(usage);
    let output = usage["output_tokens"].as_u64().unwrap_or(0);
    json!({
        "id": message["id"],
        "object": "chat.completion",
        "created": unix_seconds(),
        "model": message["model"],
        "choices": [{
            "index": 0,
            "message": msg,
            "finish_reason": finish_from_stop(message["stop_reason"].as_str()),
        }],
        "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output},
    })
}

/// Anthropic counts cached prompt tokens apart; OpenAI's prompt count
/// includes them.
fn usage_input(usage: &Value) -> u64 {
    [
        "input_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    ]
    .iter()
    .filter_map(|k| usage[*k].as_u64())
    .sum()
}

// ---------------------------------------------------------------------------
// Errors.

fn error_type(status: u16) -> &'static str {
    match status {
        400 | 405 | 415 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        408 | 504 => "timeout_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    }
}

/// An OpenAI-style error body (or any upstream error body) as Anthropic's;
/// one already in Anthropic's shape passes through.
pub fn error_from_openai(status: u16, body: &Bytes) -> Bytes {
    let parsed = serde_json::from_slice::<Value>(body).unwrap_or(Value::Null);
    if parsed["type"] == "error" && parsed["error"].is_object() {
        return body.clone();
    }
    let message = parsed["error"]["message"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(2000).collect());
    Bytes::from(
        json!({"type": "error", "error": {"type": error_type(status), "message": message}})
            .to_string(),
    )
}

/// An Anthropic error body as OpenAI's, for a chat client.
pub fn error_to_openai(status: u16, body: &Bytes) -> Bytes {
    let parsed = serde_json::from_slice::<Value>(body).unwrap_or(Value::Null);
    match parsed["error"]["message"].as_str() {
        Some(message) if parsed["type"] == "error" => Bytes::from(
            json!({"error": {"message": message, "type": parsed["error"]["type"], "code": status}})
                .to_string(),
        ),
        _ => body.clone(),
    }
}

// ---------------------------------------------------------------------------
// Streams.

#[derive(Clone, Copy, PartialEq)]
enum Open {
    Text,
    /// The chat tool-call index this block carries.
    Tool(u64),
}

/// Chat-completion chunks → Anthropic's event sequence (`message_start`,
/// `content_block_start`/`delta`/`stop`, `message_delta`, `message_stop`).
#[derive(Default)]
pub struct FromChatStream {
    started: bool,
    ended: bool,
    open: Option<(u64, Open)>,
    next_block: u64,
    stop_reason: Option<&'static str>,
    input_tokens: u64,
    output_tokens: u64,
}

impl FromChatStream {
    fn start(&mut self, chunk: &Value, out: &mut Vec<SseEvent>) {
        if self.started {
            return;
        }
        self.started = true;
        out.push(named(
            "message_start",
            json!({"type": "message_start", "message": {
                "id": message_id(chunk["id"].as_str()),
                "type": "message",
                "role": "assistant",
                "model": chunk["model"],
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": {"input_tokens": 0, "output_tokens": 0},
            }}),
        ));
    }

    fn close(&mut self, out: &mut Vec<SseEvent>) {
        if let Some((index, _)) = self.open.take() {
            out.push(named(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            ));
        }
    }

    fn open(&mut self, kind: Open, block: Value, out: &mut Vec<SseEvent>) -> u64 {
        self.close(out);
        let index = self.next_block;
        self.next_block += 1;
        self.open = Some((index, kind));
        out.push(named(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": block}),
        ));
        index
    }
}

impl Transcode for FromChatStream {
    fn event(&mut self, event: SseEvent, out: &mut Vec<SseEvent>) {
        let data = event.data.trim();
        if self.ended || data.is_empty() || data == "[DONE]" {
            return;
        }
        let Ok(chunk) = serde_json::from_str::<Value>(data) else {
            return;
        };
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            let message = error["message"].as_str().unwrap_or("upstream error");
            out.push(named(
                "error",
                json!({"type": "error", "error": {"type": "api_error", "message": message}}),
            ));
            self.ended = true;
            return;
        }
        self.start(&chunk, out);
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.input_tokens = usage["prompt_tokens"].as_u64().unwrap_or(self.input_tokens);
            self.output_tokens = usage["completion_tokens"]
                .as_u64()
                .unwrap_or(self.output_tokens);
        }
        let choice = &chunk["choices"][0];
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            let index = match self.open {
                Some((index, Open::Text)) => index,
                _ => self.open(Open::Text, json!({"type": "text", "text": ""}), out),
            };
            out.push(named(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}}),
            ));
        }
        for (position, call) in delta["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let tool = call["index"].as_u64().unwrap_or(position as u64);
            let index = match self.open {
                Some((index, Open::Tool(t))) if t == tool => index,
                _ => {
                    let id = call["id"]
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| format!("toolu_{}", uuid::Uuid::now_v7().simple()));
                    self.open(
                        Open::Tool(tool),
                        json!({"type": "tool_use", "id": id, "name": call["function"]["name"], "input": {}}),
                        out,
                    )
                }
            };
            if let Some(piece) = call["function"]["arguments"]
                .as_str()
                .filter(|a| !a.is_empty())
            {
                out.push(named(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}}),
                ));
            }
        }
        if let Some(finish) = choice["finish_reason"].as_str() {
            self.stop_reason = Some(stop_from_finish(Some(finish)));
        }
    }

    fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if self.ended {
            return;
        }
        self.ended = true;
        self.start(&Value::Null, out);
        self.close(out);
        out.push(named(
            "message_delta",
            json!({"type": "message_delta",
                   "delta": {"stop_reason": self.stop_reason.unwrap_or("end_turn"), "stop_sequence": null},
                   "usage": {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}}),
        ));
        out.push(named("message_stop", json!({"type": "message_stop"})));
    }
}

/// Anthropic's events → chat-completion chunks (then `[DONE]` at
/// `message_stop`).
#[derive(Default)]
pub struct ToChatStream {
    id: Value,
    model: Value,
    created: i64,
    /// Anthropic block index → chat tool-call index.
    tools: HashMap<u64, u64>,
    input_tokens: u64,
    output_tokens: u64,
}

impl ToChatStream {
    fn chunk(&self, delta: Value, finish: Option<&str>) -> SseEvent {
        chat_chunk(json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }))
    }
}

impl Transcode for ToChatStream {
    fn event(&mut self, event: SseEvent, out: &mut Vec<SseEvent>) {
        let Ok(v) = serde_json::from_str::<Value>(&event.data) else {
            return;
        };
        let kind = v["type"]
            .as_str()
            .or(event.event.as_deref())
            .unwrap_or("")
            .to_string();
        match kind.as_str() {
            "message_start" => {
                let m = &v["message"];
                self.id = m["id"].clone();
                self.model = m["model"].clone();
                self.created = unix_seconds();
                self.input_tokens = usage_input(&m["usage"]);
                out.push(self.chunk(json!({"role": "assistant", "content": ""}), None));
            }
            "content_block_start" => {
                let block = &v["content_block"];
                let index = v["index"].as_u64().unwrap_or(0);
                match block["type"].as_str() {
                    Some("tool_use") => {
                        let tool = self.tools.len() as u64;
                        self.tools.insert(index, tool);
                        out.push(self.chunk(
                            json!({"tool_calls": [{"index": tool, "id": block["id"], "type": "function",
                                                   "function": {"name": block["name"], "arguments": ""}}]}),
                            None,
                        ));
                    }
                    Some("text") => {
                        if let Some(t) = block["text"].as_str().filter(|t| !t.is_empty()) {
                            out.push(self.chunk(json!({"content": t}), None));
                        }
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let delta = &v["delta"];
                match delta["type"].as_str() {
                    Some("text_delta") => {
                        out.push(self.chunk(json!({"content": delta["text"]}), None));
                    }
                    Some("input_json_delta") => {
                        let index = v["index"].as_u64().unwrap_or(0);
                        let tool = self.tools.get(&index).copied().unwrap_or(0);
                        out.push(self.chunk(
                            json!({"tool_calls": [{"index": tool, "function": {"arguments": delta["partial_json"]}}]}),
                            None,
                        ));
                    }
                    Some("thinking_delta") => {
                        out.push(self.chunk(json!({"reasoning_content": delta["thinking"]}), None));
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(n) = v["usage"]["output_tokens"].as_u64() {
                    self.output_tokens = n;
                }
                if let Some(finish) = finish_from_stop(v["delta"]["stop_reason"].as_str()) {
                    out.push(self.chunk(json!({}), Some(finish)));
                }
            }
            "message_stop" => {
                let total = self.input_tokens + self.output_tokens;
                out.push(chat_chunk(json!({
                    "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                    "choices": [],
                    "usage": {"prompt_tokens": self.input_tokens, "completion_tokens": self.output_tokens, "total_tokens": total},
                })));
                out.push(SseEvent {
                    event: None,
                    data: "[DONE]".into(),
                });
            }
            "error" => {
                out.push(chat_chunk(json!({"error": {
                    "message": v["error"]["message"], "type": v["error"]["type"],
                }})));
            }
            _ => {}
        }
    }

    fn finish(&mut self, _out: &mut Vec<SseEvent>) {}
}

/// A whole captured Anthropic stream, as the `chat.completion` it adds up
/// to, and whether it ended properly.
pub fn assemble_sse(bytes: &[u8]) -> (Value, bool) {
    let (events, _) = crate::sse::parse_all(bytes);
    let mut to_chat = ToChatStream::default();
    let mut asm = crate::assemble::ChatAssembler::default();
    let mut chunks = Vec::new();
    for event in events {
        to_chat.event(event, &mut chunks);
    }
    for chunk in &chunks {
        asm.push_data(&chunk.data);
    }
    let done = asm.done;
    (asm.finish(), done)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::dialect::{Chain, encode};
    use crate::sse::parse_all;

    fn fixture() -> Value {
        let v: Value = serde_json::from_str(include_str!(
            "../../../tests/fixtures/openclaw/anthropic_messages.json"
        ))
        .unwrap();
        v["body"].clone()
    }

    #[test]
    fn openclaws_request_translates_to_chat() {
        let body = fixture();
        let chat = request_to_chat(&body).unwrap();
        let messages = chat["messages"].as_array().unwrap();
        // System blocks joined; the runtime line (in the second block) kept.
        let system = messages[0]["content"].as_str().unwrap();
        assert!(system.starts_with("<!-- openclaw:attempt:STABLE -->"));
        assert!(system.contains("sessionId="));
        assert_eq!(messages[1]["role"], "user");
        assert!(
            messages[1]["content"]
                .as_str()
                .unwrap()
                .contains("capture metaclaw-anthropic/fake-claude")
        );
        assert_eq!(messages.len(), 3);
        assert_eq!(chat["max_tokens"], 8192);
        assert_eq!(chat["stream"], true);
        assert_eq!(chat["stream_options"]["include_usage"], true);
        let tools = chat["tools"].as_array().unwrap();
        assert_eq!(tools.len(), body["tools"].as_array().unwrap().len());
        assert_eq!(tools[0]["function"]["name"], "apply_patch");
        assert_eq!(
            tools[0]["function"]["parameters"],
            body["tools"][0]["input_schema"]
        );
    }

    #[test]
    fn tool_use_and_tool_results_map_to_tool_calls_and_tool_messages() {
        let body = json!({"model": "m", "max_tokens": 10, "messages": [
            {"role": "user", "content": "read a.txt"},
            {"role": "assistant", "content": [{"type": "text", "text": "Reading."}, {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.txt"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "XYZZY"}]}, {"type": "text", "text": "and?"}]},
        ], "tools": [{"name": "read", "input_schema": {"type": "object"}}],
           "tool_choice": {"type": "any", "disable_parallel_tool_use": true}});
        let chat = request_to_chat(&body).unwrap();
        let m = chat["messages"].as_array().unwrap();
        assert_eq!(m[1]["content"], "Reading.");
        assert_eq!(m[1]["tool_calls"][0]["id"], "toolu_1");
        assert_eq!(
            m[1]["tool_calls"][0]["function"]["arguments"],
            "{\"path\":\"a.txt\"}"
        );
        assert_eq!(
            m[2],
            json!({"role": "tool", "tool_call_id": "toolu_1", "content": "XYZZY"})
        );
        assert_eq!(m[3], json!({"role": "user", "content": "and?"}));
        assert_eq!(chat["tool_choice"], "required");
        assert_eq!(chat["parallel_tool_calls"], false);
        // And back: the same conversation in Anthropic's form.
        let back = request_from_chat(&chat).unwrap();
        assert_eq!(
            back["messages"][1]["content"][1]["input"],
            json!({"path": "a.txt"})
        );
        assert_eq!(back["messages"][2]["content"][0]["type"], "tool_result");
        assert_eq!(back["messages"][3]["content"], "and?");
        assert_eq!(back["tool_choice"]["type"], "any");
        assert_eq!(back["tool_choice"]["disable_parallel_tool_use"], true);
        assert_eq!(back["tools"][0]["input_schema"], json!({"type": "object"}));
    }

    #[test]
    fn bad_requests_say_what_is_wrong() {
        for (body, says) in [
            (json!([1]), "JSON object"),
            (json!({"model": "m"}), "`messages` is required"),
            (
                json!({"messages": [{"role": "system", "content": "x"}]}),
                "\"user\" or \"assistant\"",
            ),
            (json!({"messages": [], "system": 5}), "`system`"),
            (
                json!({"messages": [{"role": "user", "content": 5}]}),
                "messages[0].content",
            ),
        ] {
            let e = request_to_chat(&body).unwrap_err();
            assert!(e.to_string().contains(says), "{e}");
        }
    }

    #[test]
    fn whole_answers_round_trip() {
        let chat = json!({"id": "chatcmpl-1", "model": "m", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}}]}, "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 5, "completion_tokens": 2}});
        let message = response_from_chat(&chat);
        assert_eq!(message["type"], "message");
        assert_eq!(message["stop_reason"], "tool_use");
        assert_eq!(message["content"][0], json!({"type": "text", "text": "Hi"}));
        assert_eq!(message["content"][1]["input"], json!({"path": "a"}));
        assert_eq!(message["usage"]["input_tokens"], 5);
        let back = response_to_chat(&message);
        assert_eq!(back["choices"][0]["message"]["content"], "Hi");
        assert_eq!(back["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(
            back["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            "{\"path\":\"a\"}"
        );
    }

    fn chat_stream() -> Vec<SseEvent> {
        let chunks = [
            json!({"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
            json!({"id": "c1", "choices": [{"index": 0, "delta": {"content": "Let me "}}]}),
            json!({"id": "c1", "choices": [{"index": 0, "delta": {"content": "look."}}]}),
            json!({"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{\"pa"}}]}}]}),
            json!({"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "th\":\"a\"}"}}]}}]}),
            json!({"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            json!({"id": "c1", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}}),
        ];
        let mut events: Vec<SseEvent> = chunks.into_iter().map(chat_chunk).collect();
        events.push(SseEvent {
            event: None,
            data: "[DONE]".into(),
        });
        events
    }

    #[test]
    fn a_chat_stream_becomes_anthropic_events_and_back() {
        let mut chain = Chain(vec![Box::new(FromChatStream::default())]);
        let events = chain.run(chat_stream(), true);
        let names: Vec<&str> = events.iter().map(|e| e.event.as_deref().unwrap()).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        let delta: Value = serde_json::from_str(&events[9].data).unwrap();
        assert_eq!(delta["delta"]["stop_reason"], "tool_use");
        assert_eq!(delta["usage"]["output_tokens"], 4);
        let tool: Value = serde_json::from_str(&events[5].data).unwrap();
        assert_eq!(tool["content_block"]["id"], "call_1");
        assert_eq!(tool["index"], 1);
        // Back to chat and assembled: the same answer.
        let mut wire = Vec::new();
        for e in &events {
            encode(e, &mut wire);
        }
        let (chat, done) = assemble_sse(&wire);
        assert!(done);
        let m = &chat["choices"][0]["message"];
        assert_eq!(m["content"], "Let me look.");
        assert_eq!(
            m["tool_calls"][0]["function"]["arguments"],
            "{\"path\":\"a\"}"
        );
        assert_eq!(chat["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(chat["usage"]["completion_tokens"], 4);
        assert_eq!(parse_all(&wire).0.len(), 11);
    }

    #[test]
    fn an_in_stream_error_ends_the_anthropic_stream_with_an_error_event() {
        let mut chain = Chain(vec![Box::new(FromChatStream::default())]);
        let mut events = chat_stream();
        events.truncate(2);
        events.push(chat_chunk(json!({"error": {"message": "cut"}})));
        let out = chain.run(events, true);
        let last = out.last().unwrap();
        assert_eq!(last.event.as_deref(), Some("error"));
        assert!(
            !out.iter()
                .any(|e| e.event.as_deref() == Some("message_stop"))
        );
    }

    #[test]
    fn errors_take_anthropics_shape() {
        let body = Bytes::from_static(br#"{"error":{"message":"slow down","type":"rate_limit"}}"#);
        let v: Value = serde_json::from_slice(&error_from_openai(429, &body)).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "rate_limit_error");
        assert_eq!(v["error"]["message"], "slow down");
        let back: Value =
            serde_json::from_slice(&error_to_openai(429, &Bytes::from(v.to_string()))).unwrap();
        assert_eq!(back["error"]["message"], "slow down");
    }

    #[test]
    fn skills_go_after_the_agents_system_blocks() {
        let mut body = fixture();
        let blocks = body["system"].as_array().unwrap().len();
        splice_system(&mut body, "SKILLS");
        let system = body["system"].as_array().unwrap();
        assert_eq!(system.len(), blocks + 1);
        assert_eq!(system[0]["cache_control"]["type"], "ephemeral");
        assert_eq!(system[blocks]["text"], "SKILLS");
        let mut plain = json!({"messages": []});
        splice_system(&mut plain, "S");
        assert_eq!(plain["system"], "S");
    }
}
