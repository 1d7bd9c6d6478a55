//! OpenAI Responses API ⇄ chat completions: the request as a chat request,
//! the chat answer (whole or streamed) as a `response` and its events.
//! Stateless: `store` is ignored and `previous_response_id` refused (the
//! client sends the whole conversation, as OpenClaw does with `store: false`).

use serde_json::{Map, Value, json};

use crate::dialect::{Transcode, blocks_text, copy_control_fields, named};
use crate::error::{Error, Result};
use crate::sse::SseEvent;
use crate::unix_seconds;

/// A Responses request as a chat-completions request.
pub fn request_to_chat(request: &Value) -> Result<Value> {
    let obj = request.as_object().ok_or(Error::NotAnObject)?;
    if obj
        .get("previous_response_id")
        .is_some_and(|v| !v.is_null())
    {
        return Err(Error::Unsupported {
            field: "previous_response_id",
            instead: "metaclaw keeps no responses; send the whole conversation in `input`",
        });
    }
    let mut chat: Vec<Value> = Vec::new();
    match obj.get("instructions") {
        Some(Value::String(s)) if !s.is_empty() => {
            chat.push(json!({"role": "system", "content": s}));
        }
        _ => {}
    }
    match obj.get("input") {
        Some(Value::String(s)) => chat.push(json!({"role": "user", "content": s})),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                item_to_chat(item, i, &mut chat)?;
            }
        }
        Some(_) => return Err(bad_field("`input`", "a string or a list of items")),
        None => {
            return Err(Error::Missing {
                field: "input",
                expected: "a string or a list of items",
            });
        }
    }
    let mut out = Map::new();
    if let Some(model) = obj.get("model") {
        out.insert("model".into(), model.clone());
    }
    out.insert("messages".into(), Value::Array(chat));
    if let Some(n) = obj.get("max_output_tokens").filter(|v| v.is_u64()) {
        out.insert("max_tokens".into(), n.clone());
    }
    for key in [
        "temperature",
        "top_p",
        "parallel_tool_calls",
        "user",
        "prompt_cache_key",
        "safety_identifier",
    ] {
        if let Some(v) = obj.get(key).filter(|v| !v.is_null()) {
            out.insert(key.into(), v.clone());
        }
    }
    if let Some(effort) = request["reasoning"]["effort"].as_str() {
        out.insert("reasoning_effort".into(), json!(effort));
    }
    let format = &request["text"]["format"];
    match format["type"].as_str() {
        Some("json_schema") => {
            let mut schema = Map::new();
            for key in ["name", "schema", "strict", "description"] {
                if let Some(v) = format.get(key) {
                    schema.insert(key.into(), v.clone());
                }
            }
            out.insert(
                "response_format".into(),
                json!({"type": "json_schema", "json_schema": schema}),
            );
        }
        Some("json_object") => {
            out.insert("response_format".into(), json!({"type": "json_object"}));
        }
        _ => {}
    }
    if let Some(tools) = obj.get("tools").and_then(Value::as_array) {
        // Built-in tools (web search, file search…) have no chat form.
        let tools: Vec<Value> = tools
            .iter()
            .filter(|t| t["type"] == "function")
            .map(|t| {
                let mut function = Map::new();
                for key in ["name", "description", "parameters", "strict"] {
                    if let Some(v) = t.get(key).filter(|v| !v.is_null()) {
                        function.insert(key.into(), v.clone());
                    }
                }
                json!({"type": "function", "function": function})
            })
            .collect();
        if !tools.is_empty() {
            out.insert("tools".into(), Value::Array(tools));
        }
    }
    match obj.get("tool_choice") {
        Some(Value::String(s)) => {
            out.insert("tool_choice".into(), json!(s));
        }
        Some(Value::Object(c)) if c.get("type") == Some(&json!("function")) => {
            out.insert(
                "tool_choice".into(),
                json!({"type": "function", "function": {"name": c.get("name")}}),
            );
        }
        _ => {}
    }
    if obj.get("stream") == Some(&Value::Bool(true)) {
        out.insert("stream".into(), json!(true));
        out.insert("stream_options".into(), json!({"include_usage": true}));
    }
    copy_control_fields(request, &mut out);
    Ok(Value::Object(out))
}

fn bad_field(field: impl Into<String>, expected: &'static str) -> Error {
    Error::BadField {
        field: field.into(),
        expected,
    }
}

fn item_to_chat(item: &Value, i: usize, chat: &mut Vec<Value>) -> Result<()> {
    let kind = item["type"]
        .as_str()
        .or_else(|| item.get("role").map(|_| "message"));
    match kind {
        Some("message") => {
            let role = match item["role"].as_str() {
                Some("system" | "developer") => "system",
                Some("user") => "user",
                Some("assistant") => "assistant",
                _ => {
                    return Err(bad_field(
                        format!("input[{i}].role"),
                        "system, developer, user or assistant",
                    ));
                }
            };
            let content = match &item["content"] {
                Value::String(s) => json!(s),
                Value::Array(parts) if role == "user" => user_parts(parts),
                parts @ Value::Array(_) => json!(blocks_text(parts)),
                _ => {
                    return Err(bad_field(
                        format!("input[{i}].content"),
                        "a string or a list of parts",
                    ));
                }
            };
            chat.push(json!({"role": role, "content": content}));
        }
        Some("function_call") => {
            let call = json!({
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"].as_str().unwrap_or("{}")},
            });
            // Calls made in one step belong to one assistant message.
            match chat.last_mut() {
                Some(last) if last["role"] == "assistant" => {
                    if let Some(calls) = last["tool_calls"].as_array_mut() {
                        calls.push(call);
                    } else {
                        last["tool_calls"] = json!([call]);
                    }
                }
                _ => chat.push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
            }
        }
        Some("function_call_output") => {
            let output = match &item["output"] {
                Value::String(s) => s.clone(),
                other => blocks_text(other),
            };
            chat.push(json!({"role": "tool", "tool_call_id": item["call_id"], "content": output}));
        }
        // Reasoning items and references to stored items carry nothing a
        // stateless chat upstream can use.
        Some(_) => {}
        None => {
            return Err(Error::Untyped {
                field: format!("input[{i}]"),
                expected: "a `type` (message, function_call, function_call_output) or a `role`",
            });
        }
    }
    Ok(())
}

/// User content parts: a string when it is all text, else chat parts.
fn user_parts(parts: &[Value]) -> Value {
    let mut out = Vec::new();
    for part in parts {
        match part["type"].as_str() {
            Some("input_text" | "output_text" | "text") => {
                out.push(json!({"type": "text", "text": part["text"]}));
            }
            Some("input_image") => {
                if let Some(url) = part["image_url"].as_str() {
                    out.push(json!({"type": "image_url", "image_url": {"url": url}}));
                }
            }
            _ => {}
        }
    }
    if out.iter().all(|p| p["type"] == "text") {
        json!(
            out.iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        )
    } else {
        Value::Array(out)
    }
}

fn response_id(chat_id: Option<&str>) -> String {
    match chat_id {
        Some(id) if id.starts_with("resp_") => id.to_string(),
        Some(id) if !id.is_empty() => format!("resp_{id}"),
        _ => format!("resp_{}", uuid::Uuid::now_v7().simple()),
    }
}

fn usage_from_chat(usage: &Value) -> Value {
    let input = usage["prompt_tokens"].as_u64().unwrap_or(0);
    let output = usage["completion_tokens"].as_u64().unwrap_or(0);
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": usage["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0)},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": usage["completion_tokens_details"]["reasoning_tokens"].as_u64().unwrap_or(0)},
        "total_tokens": input + output,
    })
}

/// The fields a `response` object always has; `status` and `output` vary.
fn envelope(id: &str, model: &Value, created: i64, request: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("id".into(), json!(id));
    out.insert("object".into(), json!("response"));
    out.insert("created_at".into(), json!(created));
    out.insert("status".into(), json!("in_progress"));
    out.insert("error".into(), Value::Null);
    out.insert("incomplete_details".into(), Value::Null);
    out.insert("model".into(), model.clone());
    out.insert("output".into(), json!([]));
    out.insert(
        "parallel_tool_calls".into(),
        request
            .get("parallel_tool_calls")
            .cloned()
            .unwrap_or(json!(true)),
    );
    out.insert(
        "tool_choice".into(),
        request.get("tool_choice").cloned().unwrap_or(json!("auto")),
    );
    out.insert(
        "tools".into(),
        request.get("tools").cloned().unwrap_or(json!([])),
    );
    out.insert("store".into(), json!(false));
    out.insert("usage".into(), Value::Null);
    out
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({"type": "message", "id": id, "status": status, "role": "assistant",
           "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

fn call_item(id: &str, call_id: &Value, name: &Value, arguments: &str, status: &str) -> Value {
    json!({"type": "function_call", "id": id, "call_id": call_id, "name": name,
           "arguments": arguments, "status": status})
}

/// Sets `status` (and why it is incomplete) from the chat finish reason.
fn conclude(resp: &mut Map<String, Value>, finish: Option<&str>) {
    if finish == Some("length") {
        resp.insert("status".into(), json!("incomplete"));
        resp.insert(
            "incomplete_details".into(),
            json!({"reason": "max_output_tokens"}),
        );
    } else {
        resp.insert("status".into(), json!("completed"));
    }
}

/// A `chat.completion` as a `response` (`request` is the client's
/// Responses request, echoed in part as the API does).
pub fn response_from_chat(chat: &Value, request: &Value) -> Value {
    let id = response_id(chat["id"].as_str());
    let created = chat["created"].as_i64().unwrap_or(unix_seconds());
    let mut resp = envelope(&id, &chat["model"], created, request);
    let choice = &chat["choices"][0];
    let message = &choice["message"];
    let mut output = Vec::new();
    let text = blocks_text(&message["content"]);
    if !text.is_empty() {
        output.push(message_item(
            &format!("msg_{}", id.trim_start_matches("resp_")),
            &text,
            "completed",
        ));
    }
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        output.push(call_item(
            &format!("fc_{}", call["id"].as_str().unwrap_or("")),
            &call["id"],
            &call["function"]["name"],
            call["function"]["arguments"].as_str().unwrap_or(""),
            "completed",
        ));
    }
    resp.insert("output".into(), Value::Array(output));
    resp.insert("usage".into(), usage_from_chat(&chat["usage"]));
    conclude(&mut resp, choice["finish_reason"].as_str());
    Value::Object(resp)
}

enum OpenItem {
    Message {
        id: String,
        text: String,
    },
    Call {
        /// The chat tool-call index.
        tool: u64,
        id: String,
        call_id: Value,
        name: Value,
        arguments: String,
    },
}

/// Chat-completion chunks → Responses streaming events (`response.created`,
/// `response.output_item.added`, `response.output_text.delta`,
/// `response.function_call_arguments.delta`, …, `response.completed`).
pub struct FromChatStream {
    request: Value,
    response: Option<Map<String, Value>>,
    output: Vec<Value>,
    open: Option<OpenItem>,
    sequence: u64,
    finish: Option<String>,
    usage: Value,
    ended: bool,
}

impl FromChatStream {
    /// `request`: the client's Responses request (its tools and choices are
    /// echoed in the `response` objects).
    pub fn new(request: &Value) -> Self {
        let mut echo = Map::new();
        for key in ["tools", "tool_choice", "parallel_tool_calls"] {
            if let Some(v) = request.get(key) {
                echo.insert(key.into(), v.clone());
            }
        }
        Self {
            request: Value::Object(echo),
            response: None,
            output: Vec::new(),
            open: None,
            sequence: 0,
            finish: None,
            usage: Value::Null,
            ended: false,
        }
    }

    fn emit(&mut self, kind: &str, mut data: Value, out: &mut Vec<SseEvent>) {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        out.push(named(kind, data));
    }

    fn start(&mut self, chunk: &Value, out: &mut Vec<SseEvent>) {
        if self.response.is_some() {
            return;
        }
        let id = response_id(chunk["id"].as_str());
        let created = chunk["created"].as_i64().unwrap_or(unix_seconds());
        let resp = envelope(&id, &chunk["model"], created, &self.request);
        self.response = Some(resp.clone());
        self.emit(
            "response.created",
            json!({"response": Value::Object(resp.clone())}),
            out,
        );
        self.emit(
            "response.in_progress",
            json!({"response": Value::Object(resp)}),
            out,
        );
    }

    fn response_id(&self) -> String {
        self.response
            .as_ref()
            .and_then(|r| r["id"].as_str())
            .unwrap_or("resp_")
            .to_string()
    }

    fn close(&mut self, out: &mut Vec<SseEvent>) {
        let index = self.output.len();
        match self.open.take() {
            None => {}
            Some(OpenItem::Message { id, text }) => {
                let part = json!({"type": "output_text", "text": text, "annotations": []});
                self.emit(
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "text": text}),
                    out,
                );
                self.emit(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
                    out,
                );
                let item = message_item(&id, &text, "completed");
                self.emit(
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                    out,
                );
                self.output.push(item);
            }
            Some(OpenItem::Call {
                id,
                call_id,
                name,
                arguments,
                ..
            }) => {
                self.emit(
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": index, "arguments": arguments}),
                    out,
                );
                let item = call_item(&id, &call_id, &name, &arguments, "completed");
                self.emit(
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                    out,
                );
                self.output.push(item);
            }
        }
    }

    fn text(&mut self, piece: &str, out: &mut Vec<SseEvent>) {
        if !matches!(self.open, Some(OpenItem::Message { .. })) {
            self.close(out);
            let id = format!(
                "msg_{}_{}",
                self.response_id().trim_start_matches("resp_"),
                self.output.len()
            );
            let index = self.output.len();
            let mut item = message_item(&id, "", "in_progress");
            item["content"] = json!([]);
            self.emit(
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
                out,
            );
            self.emit(
                "response.content_part.added",
                json!({"item_id": id, "output_index": index, "content_index": 0,
                       "part": {"type": "output_text", "text": "", "annotations": []}}),
                out,
            );
            self.open = Some(OpenItem::Message {
                id,
                text: String::new(),
            });
        }
        let index = self.output.len();
        let mut event = None;
        if let Some(OpenItem::Message { id, text }) = &mut self.open {
            text.push_str(piece);
            event = Some(
                json!({"item_id": id, "output_index": index, "content_index": 0, "delta": piece}),
            );
        }
        if let Some(event) = event {
            self.emit("response.output_text.delta", event, out);
        }
    }

    fn call(&mut self, position: usize, call: &Value, out: &mut Vec<SseEvent>) {
        let tool = call["index"].as_u64().unwrap_or(position as u64);
        let same = matches!(&self.open, Some(OpenItem::Call { tool: t, .. }) if *t == tool);
        if !same {
            self.close(out);
            let call_id = call["id"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| format!("call_{}", uuid::Uuid::now_v7().simple()));
            let id = format!("fc_{call_id}");
            let name = call["function"]["name"].clone();
            let item = call_item(&id, &json!(call_id), &name, "", "in_progress");
            self.emit(
                "response.output_item.added",
                json!({"output_index": self.output.len(), "item": item}),
                out,
            );
            self.open = Some(OpenItem::Call {
                tool,
                id,
                call_id: json!(call_id),
                name,
                arguments: String::new(),
            });
        }
        let Some(piece) = call["function"]["arguments"]
            .as_str()
            .filter(|a| !a.is_empty())
        else {
            return;
        };
        let index = self.output.len();
        let mut event = None;
        if let Some(OpenItem::Call { id, arguments, .. }) = &mut self.open {
            arguments.push_str(piece);
            event = Some(json!({"item_id": id, "output_index": index, "delta": piece}));
        }
        if let Some(event) = event {
            self.emit("response.function_call_arguments.delta", event, out);
        }
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
            let code = error["code"].clone();
            self.emit(
                "error",
                json!({"code": code, "message": message, "param": null}),
                out,
            );
            if let Some(mut resp) = self.response.take() {
                resp.insert("status".into(), json!("failed"));
                resp.insert(
                    "error".into(),
                    json!({"code": "server_error", "message": message}),
                );
                resp.insert("output".into(), Value::Array(self.output.clone()));
                self.emit(
                    "response.failed",
                    json!({"response": Value::Object(resp)}),
                    out,
                );
            }
            self.ended = true;
            return;
        }
        self.start(&chunk, out);
        if chunk["usage"].is_object() {
            self.usage = chunk["usage"].clone();
        }
        let choice = &chunk["choices"][0];
        if let Some(piece) = choice["delta"]["content"]
            .as_str()
            .filter(|t| !t.is_empty())
        {
            self.text(piece, out);
        }
        for (position, call) in choice["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            self.call(position, call, out);
        }
        if let Some(finish) = choice["finish_reason"].as_str() {
            self.finish = Some(finish.to_string());
        }
    }

    fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if self.ended {
            return;
        }
        self.ended = true;
        self.start(&Value::Null, out);
        self.close(out);
        let mut resp = self.response.take().unwrap_or_default();
        resp.insert(
            "output".into(),
            Value::Array(std::mem::take(&mut self.output)),
        );
        resp.insert("usage".into(), usage_from_chat(&self.usage));
        conclude(&mut resp, self.finish.as_deref());
        let kind = if resp["status"] == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        self.emit(kind, json!({"response": Value::Object(resp)}), out);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::dialect::{Chain, chat_chunk};

    fn fixture() -> Value {
        let v: Value = serde_json::from_str(include_str!(
            "../../../tests/fixtures/openclaw/openai_responses.json"
        ))
        .unwrap();
        v["body"].clone()
    }

    #[test]
    fn openclaws_request_translates_to_chat() {
        let body = fixture();
        let chat = request_to_chat(&body).unwrap();
        let m = chat["messages"].as_array().unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(m[0]["role"], "system");
        let system = m[0]["content"].as_str().unwrap();
        assert!(system.contains("You are a personal assistant running inside OpenClaw"));
        assert!(system.contains("sessionId="));
        assert_eq!(m[1]["role"], "user");
        assert!(
            m[2]["content"]
                .as_str()
                .unwrap()
                .starts_with("<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>")
        );
        assert_eq!(chat["max_tokens"], 8192);
        assert_eq!(chat["stream_options"]["include_usage"], true);
        assert!(chat.get("store").is_none());
        let tools = chat["tools"].as_array().unwrap();
        assert_eq!(tools.len(), body["tools"].as_array().unwrap().len());
        assert_eq!(
            tools[0]["function"]["parameters"],
            body["tools"][0]["parameters"]
        );
    }

    #[test]
    fn function_calls_and_outputs_become_tool_calls_and_tool_messages() {
        let body = json!({"model": "m", "instructions": "Be brief.", "input": [
            {"role": "user", "content": "read a.txt"},
            {"type": "function_call", "call_id": "call_1", "name": "read", "arguments": "{\"path\":\"a.txt\"}"},
            {"type": "function_call", "call_id": "call_2", "name": "ls", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "XYZZY"},
            {"type": "reasoning", "summary": []},
        ], "tool_choice": {"type": "function", "name": "read"}});
        let chat = request_to_chat(&body).unwrap();
        let m = chat["messages"].as_array().unwrap();
        assert_eq!(m[0], json!({"role": "system", "content": "Be brief."}));
        assert_eq!(m[2]["tool_calls"].as_array().unwrap().len(), 2);
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "call_1", "content": "XYZZY"})
        );
        assert_eq!(m.len(), 4);
        assert_eq!(chat["tool_choice"]["function"]["name"], "read");
    }

    #[test]
    fn bad_requests_say_what_is_wrong() {
        for (body, says) in [
            (json!("x"), "JSON object"),
            (json!({"model": "m"}), "`input` is required"),
            (json!({"input": 5}), "`input` must be"),
            (json!({"input": [{"content": "x"}]}), "needs a `type`"),
            (
                json!({"input": [{"role": "tool", "content": "x"}]}),
                "input[0].role",
            ),
            (
                json!({"input": "x", "previous_response_id": "resp_1"}),
                "previous_response_id",
            ),
        ] {
            let e = request_to_chat(&body).unwrap_err();
            assert!(e.to_string().contains(says), "{e}");
        }
    }

    #[test]
    fn a_whole_answer_becomes_a_response() {
        let chat = json!({"id": "c1", "created": 7, "model": "m", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{}"}}]}, "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 3, "completion_tokens": 2}});
        let r = response_from_chat(&chat, &json!({"tools": []}));
        assert_eq!(r["object"], "response");
        assert_eq!(r["status"], "completed");
        assert_eq!(r["output"][0]["content"][0]["text"], "Hi");
        assert_eq!(r["output"][1]["type"], "function_call");
        assert_eq!(r["output"][1]["call_id"], "call_1");
        assert_eq!(r["usage"]["total_tokens"], 5);
        let cut = json!({"choices": [{"message": {"content": "x"}, "finish_reason": "length"}]});
        let r = response_from_chat(&cut, &json!({}));
        assert_eq!(r["status"], "incomplete");
        assert_eq!(r["incomplete_details"]["reason"], "max_output_tokens");
    }

    #[test]
    fn a_chat_stream_becomes_responses_events() {
        let chunks = [
            json!({"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
            json!({"id": "c1", "choices": [{"index": 0, "delta": {"content": "Hel"}}]}),
            json!({"id": "c1", "choices": [{"index": 0, "delta": {"content": "lo"}}]}),
            json!({"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "read", "arguments": "{\"p"}}]}}]}),
            json!({"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\":1}"}}]}}]}),
            json!({"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            json!({"id": "c1", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}}),
        ];
        let events: Vec<SseEvent> = chunks.into_iter().map(chat_chunk).collect();
        let mut chain = Chain(vec![Box::new(FromChatStream::new(&json!({})))]);
        let out = chain.run(events, true);
        let names: Vec<&str> = out.iter().map(|e| e.event.as_deref().unwrap()).collect();
        assert_eq!(
            names,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        let done: Value = serde_json::from_str(&out.last().unwrap().data).unwrap();
        assert_eq!(done["response"]["status"], "completed");
        assert_eq!(done["response"]["output"][0]["content"][0]["text"], "Hello");
        assert_eq!(done["response"]["output"][1]["arguments"], "{\"p\":1}");
        assert_eq!(done["response"]["usage"]["output_tokens"], 4);
        // Sequence numbers count up from 0 without gaps.
        for (i, e) in out.iter().enumerate() {
            let v: Value = serde_json::from_str(&e.data).unwrap();
            assert_eq!(v["sequence_number"], i as u64);
            assert_eq!(v["type"], e.event.as_deref().unwrap());
        }
    }
}
