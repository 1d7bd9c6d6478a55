//! Streamed answers, chat-completion chunks → OpenAI Responses events
//! (`response.created`, `response.output_item.added`,
//! `response.output_text.delta`, …, `response.completed`).

use serde_json::{Map, Value, json};

use super::sse::SseEvent;
use super::{ChatEvent, Transcode, chat_event, named};
use crate::response::responses::{
    call_item, conclude, envelope, message_item, response_id, usage_from_chat,
};
use crate::unix_seconds;

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
pub struct FromChat {
    request: Value,
    response: Option<Map<String, Value>>,
    output: Vec<Value>,
    open: Option<OpenItem>,
    sequence: u64,
    finish: Option<String>,
    usage: Value,
    ended: bool,
}

impl FromChat {
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

impl FromChat {
    /// The upstream sent an error inside the stream: an `error` event, then
    /// the response failed (if it had started), and nothing more.
    fn fail(&mut self, message: &str, code: Value, out: &mut Vec<SseEvent>) {
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
    }
}

impl Transcode for FromChat {
    fn event(&mut self, event: SseEvent, out: &mut Vec<SseEvent>) {
        if self.ended {
            return;
        }
        let chunk = match chat_event(&event) {
            None => return,
            Some(ChatEvent::Chunk(chunk)) => chunk,
            Some(ChatEvent::Error { message, code }) => {
                self.fail(&message, code, out);
                return;
            }
        };
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
    use crate::stream::{Chain, chat_chunk};

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
        let mut chain = Chain(vec![Box::new(FromChat::new(&json!({})))]);
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
