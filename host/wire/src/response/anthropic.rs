//! Whole answers, Anthropic `message` ⇄ `chat.completion`: for a
//! `/v1/messages` client in front of an OpenAI-style upstream, and to read
//! an Anthropic upstream's answer as chat (the client's, the record's and
//! the learner's). The stop reasons, ids and usage rules here are shared
//! with the stream transcoders.

use serde_json::{Map, Value, json};

use crate::text::value_text;
use crate::unix_seconds;

/// Anthropic assistant content blocks as a chat assistant message (text
/// joined, `tool_use` as `tool_calls`; `content` null when there are only
/// calls), and the text of its thinking blocks.
pub(crate) fn assistant_message(blocks: &[Value]) -> (Map<String, Value>, String) {
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

/// A chat assistant message as Anthropic content blocks: its text, then
/// its tool calls as `tool_use` blocks (the inverse of [`assistant_message`]).
pub(crate) fn assistant_blocks(message: &Value) -> Vec<Value> {
    let mut blocks = Vec::new();
    let text = value_text(&message["content"]);
    if !text.is_empty() {
        blocks.push(json!({"type": "text", "text": text}));
    }
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        blocks.push(json!({
            "type": "tool_use",
            "id": call["id"],
            "name": call["function"]["name"],
            "input": arguments_object(call["function"]["arguments"].as_str().unwrap_or("")),
        }));
    }
    blocks
}

/// A tool call's JSON arguments as an object (Anthropic's `input`); text
/// that is not a JSON object is kept under `_raw` rather than lost.
fn arguments_object(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return json!({});
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => json!({ "_raw": arguments }),
    }
}

pub(crate) fn stop_from_finish(finish: Option<&str>) -> &'static str {
    match finish {
        Some("length") => "max_tokens",
        Some("tool_calls" | "function_call") => "tool_use",
        Some("content_filter") => "refusal",
        _ => "end_turn",
    }
}

pub(crate) fn finish_from_stop(stop: Option<&str>) -> Option<&'static str> {
    Some(match stop? {
        "max_tokens" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        _ => "stop",
    })
}

pub(crate) fn message_id(chat_id: Option<&str>) -> String {
    match chat_id {
        Some(id) if id.starts_with("msg_") => id.to_string(),
        Some(id) if !id.is_empty() => format!("msg_{id}"),
        _ => format!("msg_{}", uuid::Uuid::now_v7().simple()),
    }
}

/// A `chat.completion` as an Anthropic `message`.
pub fn from_chat(chat: &Value) -> Value {
    let choice = &chat["choices"][0];
    let message = &choice["message"];
    let content = assistant_blocks(message);
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
pub fn to_chat(message: &Value) -> Value {
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
pub(crate) fn usage_input(usage: &Value) -> u64 {
    [
        "input_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    ]
    .iter()
    .filter_map(|k| usage[*k].as_u64())
    .sum()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn whole_answers_round_trip() {
        let chat = json!({"id": "chatcmpl-1", "model": "m", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}}]}, "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 5, "completion_tokens": 2}});
        let message = from_chat(&chat);
        assert_eq!(message["type"], "message");
        assert_eq!(message["stop_reason"], "tool_use");
        assert_eq!(message["content"][0], json!({"type": "text", "text": "Hi"}));
        assert_eq!(message["content"][1]["input"], json!({"path": "a"}));
        assert_eq!(message["usage"]["input_tokens"], 5);
        let back = to_chat(&message);
        assert_eq!(back["choices"][0]["message"]["content"], "Hi");
        assert_eq!(back["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(
            back["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            "{\"path\":\"a\"}"
        );
    }

    #[test]
    fn arguments_that_are_not_an_object_are_kept() {
        assert_eq!(arguments_object("{\"a\":1}"), json!({"a": 1}));
        assert_eq!(arguments_object(""), json!({}));
        assert_eq!(arguments_object("[1"), json!({"_raw": "[1"}));
    }
}
