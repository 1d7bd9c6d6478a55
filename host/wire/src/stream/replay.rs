//! A whole chat completion told as a chat-completions stream: for answers
//! that are not produced incrementally (the trainable model is sampled
//! whole), so a streaming client still gets a well-formed stream. The
//! events are what an incremental upstream would have sent, in one go:
//! the role, the reasoning, the content, each tool call, the finish reason
//! with the usage, and `[DONE]`.

use serde_json::{Value, json};

use super::chat_chunk;
use super::sse::SseEvent;

/// The stream of `completion` (a `chat.completion` object), first choice.
pub fn chat_stream(completion: &Value) -> Vec<SseEvent> {
    let head = |delta: Value, finish: Value| {
        json!({
            "id": completion["id"],
            "object": "chat.completion.chunk",
            "created": completion["created"],
            "model": completion["model"],
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
    };
    let message = &completion["choices"][0]["message"];
    let mut events = vec![chat_chunk(head(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    ))];
    if let Some(reasoning) = message["reasoning_content"]
        .as_str()
        .filter(|r| !r.is_empty())
    {
        events.push(chat_chunk(head(
            json!({"reasoning_content": reasoning}),
            Value::Null,
        )));
    }
    if let Some(content) = message["content"].as_str().filter(|c| !c.is_empty()) {
        events.push(chat_chunk(head(json!({"content": content}), Value::Null)));
    }
    for (index, call) in message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        events.push(chat_chunk(head(
            json!({"tool_calls": [{
                "index": index, "id": call["id"], "type": "function",
                "function": {"name": call["function"]["name"], "arguments": call["function"]["arguments"]},
            }]}),
            Value::Null,
        )));
    }
    let mut last = head(json!({}), completion["choices"][0]["finish_reason"].clone());
    if !completion["usage"].is_null() {
        last["usage"] = completion["usage"].clone();
    }
    events.push(chat_chunk(last));
    events.push(SseEvent {
        event: None,
        data: "[DONE]".into(),
    });
    events
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::stream::assemble::assemble_sse;
    use crate::stream::encode;

    /// Told as a stream and assembled again, a completion is itself.
    #[test]
    fn a_replayed_completion_assembles_back_to_itself() {
        let completion = json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 7, "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": "Let me look.", "reasoning_content": "the user wants x",
                "tool_calls": [
                    {"id": "call_a", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}},
                    {"id": "call_b", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
                ],
            }}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        });
        let mut bytes = Vec::new();
        for event in chat_stream(&completion) {
            encode(&event, &mut bytes);
        }
        let (assembled, complete) = assemble_sse(&bytes);
        assert!(complete);
        let message = &assembled["choices"][0]["message"];
        assert_eq!(message["content"], "Let me look.");
        assert_eq!(message["reasoning_content"], "the user wants x");
        assert_eq!(
            message["tool_calls"],
            completion["choices"][0]["message"]["tool_calls"]
        );
        assert_eq!(assembled["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(assembled["usage"]["completion_tokens"], 5);
    }
}
