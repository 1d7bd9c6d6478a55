//! Turns the chunks of a streamed chat completion back into the one
//! `chat.completion` they add up to: content and reasoning appended, tool
//! calls merged by `index` (their arguments arrive in pieces), finish reason
//! and usage kept. This is what gets recorded for a streamed turn.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::sse;

#[derive(Debug, Default)]
pub struct ChatAssembler {
    id: Option<String>,
    model: Option<String>,
    created: Option<i64>,
    system_fingerprint: Option<String>,
    choices: BTreeMap<u32, ChoiceAcc>,
    usage: Option<Value>,
    /// An `error` object sent inside the stream (OpenAI does this).
    pub error: Option<Value>,
    /// `data: [DONE]` was seen: the upstream finished the stream properly.
    pub done: bool,
    pub chunks: u32,
    pub malformed: u32,
}

#[derive(Debug, Default)]
struct ChoiceAcc {
    role: Option<String>,
    content: Option<String>,
    reasoning: Option<String>,
    refusal: Option<String>,
    tool_calls: BTreeMap<u32, ToolCallAcc>,
    finish_reason: Option<String>,
}

#[derive(Debug, Default)]
struct ToolCallAcc {
    id: String,
    kind: String,
    name: String,
    arguments: String,
}

#[derive(Deserialize)]
struct Chunk {
    id: Option<String>,
    model: Option<String>,
    created: Option<i64>,
    system_fingerprint: Option<String>,
    #[serde(default)]
    choices: Vec<ChoiceDelta>,
    usage: Option<Value>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct ChoiceDelta {
    #[serde(default)]
    index: u32,
    delta: Option<Delta>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    role: Option<String>,
    content: Option<String>,
    reasoning_content: Option<String>,
    reasoning: Option<String>,
    refusal: Option<String>,
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Deserialize)]
struct ToolCallDelta {
    index: Option<u32>,
    id: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    name: Option<String>,
    arguments: Option<String>,
}

fn append(slot: &mut Option<String>, piece: Option<String>) {
    if let Some(piece) = piece {
        slot.get_or_insert_with(String::new).push_str(&piece);
    }
}

impl ChatAssembler {
    /// Feeds the `data` of one SSE event.
    pub fn push_data(&mut self, data: &str) {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return;
        }
        if data.is_empty() {
            return;
        }
        let Ok(chunk) = serde_json::from_str::<Chunk>(data) else {
            self.malformed += 1;
            return;
        };
        self.chunks += 1;
        if self.id.is_none() {
            self.id = chunk.id;
        }
        if chunk.model.is_some() {
            self.model = chunk.model;
        }
        if self.created.is_none() {
            self.created = chunk.created;
        }
        if chunk.system_fingerprint.is_some() {
            self.system_fingerprint = chunk.system_fingerprint;
        }
        if chunk.usage.as_ref().is_some_and(|u| !u.is_null()) {
            self.usage = chunk.usage;
        }
        if chunk.error.is_some() {
            self.error = chunk.error;
        }
        for choice in chunk.choices {
            let acc = self.choices.entry(choice.index).or_default();
            if let Some(reason) = choice.finish_reason {
                acc.finish_reason = Some(reason);
            }
            let Some(delta) = choice.delta else { continue };
            if delta.role.is_some() {
                acc.role = delta.role;
            }
            append(&mut acc.content, delta.content);
            append(
                &mut acc.reasoning,
                delta.reasoning_content.or(delta.reasoning),
            );
            append(&mut acc.refusal, delta.refusal);
            for (position, call) in delta.tool_calls.into_iter().flatten().enumerate() {
                // `index` is required by the spec; a missing one (the original
                // MetaClaw's bug) falls back to the call's position.
                let index = call.index.unwrap_or(position as u32);
                let slot = acc.tool_calls.entry(index).or_default();
                if let Some(id) = call.id.filter(|id| !id.is_empty()) {
                    slot.id = id;
                }
                if let Some(kind) = call.kind {
                    slot.kind = kind;
                }
                if let Some(function) = call.function {
                    if let Some(name) = function.name.filter(|n| !n.is_empty()) {
                        // Most providers send the name once; some repeat it.
                        if slot.name != name {
                            slot.name.push_str(&name);
                        }
                    }
                    if let Some(arguments) = function.arguments {
                        slot.arguments.push_str(&arguments);
                    }
                }
            }
        }
    }

    /// The assembled `chat.completion`.
    pub fn finish(self) -> Value {
        let choices: Vec<Value> = self
            .choices
            .into_iter()
            .map(|(index, c)| {
                let mut message = Map::new();
                message.insert("role".into(), json!(c.role.unwrap_or_else(|| "assistant".into())));
                message.insert("content".into(), json!(c.content));
                if !c.tool_calls.is_empty() {
                    let calls: Vec<Value> = c
                        .tool_calls
                        .into_values()
                        .map(|t| {
                            json!({
                                "id": t.id,
                                "type": if t.kind.is_empty() { "function".to_string() } else { t.kind },
                                "function": { "name": t.name, "arguments": t.arguments },
                            })
                        })
                        .collect();
                    message.insert("tool_calls".into(), Value::Array(calls));
                }
                if let Some(r) = c.reasoning {
                    message.insert("reasoning_content".into(), json!(r));
                }
                if let Some(r) = c.refusal {
                    message.insert("refusal".into(), json!(r));
                }
                json!({ "index": index, "message": message, "finish_reason": c.finish_reason })
            })
            .collect();
        let mut out = Map::new();
        out.insert("id".into(), json!(self.id));
        out.insert("object".into(), json!("chat.completion"));
        out.insert("created".into(), json!(self.created));
        out.insert("model".into(), json!(self.model));
        out.insert("choices".into(), Value::Array(choices));
        if let Some(usage) = self.usage {
            out.insert("usage".into(), usage);
        }
        if let Some(fp) = self.system_fingerprint {
            out.insert("system_fingerprint".into(), json!(fp));
        }
        if let Some(error) = self.error {
            out.insert("error".into(), error);
        }
        Value::Object(out)
    }
}

/// Assembles a whole captured SSE body. Returns the completion, whether the
/// stream ended with `[DONE]`, and an in-stream error if there was one.
pub fn assemble_sse(bytes: &[u8]) -> (Value, bool) {
    let (events, _) = sse::parse_all(bytes);
    let mut asm = ChatAssembler::default();
    for event in &events {
        asm.push_data(&event.data);
    }
    let done = asm.done;
    (asm.finish(), done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_content_tool_calls_usage_and_finish_reason() {
        let stream = concat!(
            "data: {\"id\":\"c1\",\"created\":5,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
            "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n",
            "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"read\",\"arguments\":\"\"}},{\"index\":1,\"id\":\"call_b\",\"type\":\"function\",\"function\":{\"name\":\"ls\",\"arguments\":\"{\\\"p\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"path\\\":\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"arguments\":\"\\\":1}\"}},{\"index\":0,\"function\":{\"arguments\":\"\\\"a.txt\\\"}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":5}}\n\n",
            "data: [DONE]\n\n",
        );
        let (done_value, done) = assemble_sse(stream.as_bytes());
        assert!(done);
        let msg = &done_value["choices"][0]["message"];
        assert_eq!(msg["content"], "Hello");
        assert_eq!(msg["tool_calls"][0]["id"], "call_a");
        assert_eq!(
            msg["tool_calls"][0]["function"]["arguments"],
            "{\"path\":\"a.txt\"}"
        );
        assert_eq!(msg["tool_calls"][1]["function"]["name"], "ls");
        assert_eq!(msg["tool_calls"][1]["function"]["arguments"], "{\"p\":1}");
        assert_eq!(done_value["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(done_value["usage"]["total_tokens"], 5);
        assert_eq!(done_value["id"], "c1");
    }

    #[test]
    fn a_cut_stream_is_not_done_and_keeps_what_arrived() {
        let (v, done) = assemble_sse(
            b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"par\"}}]}\n\n",
        );
        assert!(!done);
        assert_eq!(v["choices"][0]["message"]["content"], "par");
        assert!(v["choices"][0]["finish_reason"].is_null());
    }

    #[test]
    fn in_stream_errors_and_garbage_are_kept_apart() {
        let mut asm = ChatAssembler::default();
        asm.push_data("{\"error\":{\"message\":\"overloaded\"}}");
        asm.push_data("not json");
        assert_eq!(asm.malformed, 1);
        assert_eq!(asm.finish()["error"]["message"], "overloaded");
    }
}
