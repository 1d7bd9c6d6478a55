//! Streamed answers, event by event: chat-completion chunks → Anthropic's
//! events ([`FromChat`], for `/v1/messages` clients of an OpenAI-style
//! upstream), Anthropic's events → chat chunks ([`ToChat`], for everything
//! else in front of an Anthropic upstream), and a whole captured Anthropic
//! stream as the `chat.completion` it adds up to ([`assemble`]).

use std::collections::HashMap;

use serde_json::{Value, json};

use super::assemble::ChatAssembler;
use super::sse::{SseEvent, parse_all};
use super::{ChatEvent, Transcode, chat_chunk, chat_event, named};
use crate::response::anthropic::{finish_from_stop, message_id, stop_from_finish, usage_input};
use crate::unix_seconds;

#[derive(Clone, Copy, PartialEq)]
enum Open {
    Text,
    /// The chat tool-call index this block carries.
    Tool(u64),
}

/// Chat-completion chunks → Anthropic's event sequence (`message_start`,
/// `content_block_start`/`delta`/`stop`, `message_delta`, `message_stop`).
#[derive(Default)]
pub struct FromChat {
    started: bool,
    ended: bool,
    open: Option<(u64, Open)>,
    next_block: u64,
    stop_reason: Option<&'static str>,
    input_tokens: u64,
    output_tokens: u64,
}

impl FromChat {
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

impl Transcode for FromChat {
    fn event(&mut self, event: SseEvent, out: &mut Vec<SseEvent>) {
        if self.ended {
            return;
        }
        let chunk = match chat_event(&event) {
            None => return,
            Some(ChatEvent::Chunk(chunk)) => chunk,
            Some(ChatEvent::Error { message, .. }) => {
                out.push(named(
                    "error",
                    json!({"type": "error", "error": {"type": "api_error", "message": message}}),
                ));
                self.ended = true;
                return;
            }
        };
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
pub struct ToChat {
    id: Value,
    model: Value,
    created: i64,
    /// Anthropic block index → chat tool-call index.
    tools: HashMap<u64, u64>,
    input_tokens: u64,
    output_tokens: u64,
}

impl ToChat {
    /// Usage from wherever the stream carries it: `message_start` usually
    /// has the input and `message_delta` the output, but some upstreams
    /// (and Anthropic with server tools) report the input only at the end.
    /// The counts are cumulative: a later one replaces an earlier one.
    fn count(&mut self, usage: &Value) {
        let input = usage_input(usage);
        if input > 0 {
            self.input_tokens = input;
        }
        if let Some(n) = usage["output_tokens"].as_u64() {
            self.output_tokens = n;
        }
    }

    fn chunk(&self, delta: Value, finish: Option<&str>) -> SseEvent {
        chat_chunk(json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }))
    }
}

impl Transcode for ToChat {
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
                self.count(&m["usage"]);
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
                self.count(&v["usage"]);
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
pub fn assemble(bytes: &[u8]) -> (Value, bool) {
    let (events, _) = parse_all(bytes);
    let mut to_chat = ToChat::default();
    let mut asm = ChatAssembler::default();
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
    use crate::stream::{Chain, encode};

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
        let mut chain = Chain(vec![Box::new(FromChat::default())]);
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
        let (chat, done) = assemble(&wire);
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
        let mut chain = Chain(vec![Box::new(FromChat::default())]);
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
    fn usage_is_taken_from_wherever_the_stream_carries_it() {
        let event = |v: Value| format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap());
        // The input only at the end, as some Anthropic-compatible upstreams
        // send it: not 0 prompt tokens.
        let stream = [
            event(json!({"type": "message_start", "message": {"id": "m1", "model": "c", "usage": {"output_tokens": 1}}})),
            event(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})),
            event(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}})),
            event(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"input_tokens": 812, "cache_read_input_tokens": 100, "output_tokens": 7}})),
            event(json!({"type": "message_stop"})),
        ]
        .concat();
        let (chat, done) = assemble(stream.as_bytes());
        assert!(done);
        assert_eq!(chat["usage"]["prompt_tokens"], 912, "{chat}");
        assert_eq!(chat["usage"]["completion_tokens"], 7, "{chat}");
        // The usual place: the input at the start, the output at the end.
        let stream = [
            event(json!({"type": "message_start", "message": {"id": "m1", "model": "c", "usage": {"input_tokens": 40, "output_tokens": 1}}})),
            event(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}})),
            event(json!({"type": "message_stop"})),
        ]
        .concat();
        let (chat, _) = assemble(stream.as_bytes());
        assert_eq!(chat["usage"]["prompt_tokens"], 40, "{chat}");
        assert_eq!(chat["usage"]["completion_tokens"], 9, "{chat}");
    }
}
