//! A `chat.completion` as an OpenAI Responses `response`; the envelope and
//! output items here are shared with the stream transcoder.

use serde_json::{Map, Value, json};

use crate::text::value_text;
use crate::unix_seconds;

pub(crate) fn response_id(chat_id: Option<&str>) -> String {
    match chat_id {
        Some(id) if id.starts_with("resp_") => id.to_string(),
        Some(id) if !id.is_empty() => format!("resp_{id}"),
        _ => format!("resp_{}", uuid::Uuid::now_v7().simple()),
    }
}

pub(crate) fn usage_from_chat(usage: &Value) -> Value {
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
pub(crate) fn envelope(
    id: &str,
    model: &Value,
    created: i64,
    request: &Value,
) -> Map<String, Value> {
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

pub(crate) fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({"type": "message", "id": id, "status": status, "role": "assistant",
           "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

pub(crate) fn call_item(
    id: &str,
    call_id: &Value,
    name: &Value,
    arguments: &str,
    status: &str,
) -> Value {
    json!({"type": "function_call", "id": id, "call_id": call_id, "name": name,
           "arguments": arguments, "status": status})
}

/// Sets `status` (and why it is incomplete) from the chat finish reason.
pub(crate) fn conclude(resp: &mut Map<String, Value>, finish: Option<&str>) {
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
pub fn from_chat(chat: &Value, request: &Value) -> Value {
    let id = response_id(chat["id"].as_str());
    let created = chat["created"].as_i64().unwrap_or(unix_seconds());
    let mut resp = envelope(&id, &chat["model"], created, request);
    let choice = &chat["choices"][0];
    let message = &choice["message"];
    let mut output = Vec::new();
    let text = value_text(&message["content"]);
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn a_whole_answer_becomes_a_response() {
        let chat = json!({"id": "c1", "created": 7, "model": "m", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{}"}}]}, "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 3, "completion_tokens": 2}});
        let r = from_chat(&chat, &json!({"tools": []}));
        assert_eq!(r["object"], "response");
        assert_eq!(r["status"], "completed");
        assert_eq!(r["output"][0]["content"][0]["text"], "Hi");
        assert_eq!(r["output"][1]["type"], "function_call");
        assert_eq!(r["output"][1]["call_id"], "call_1");
        assert_eq!(r["usage"]["total_tokens"], 5);
        let cut = json!({"choices": [{"message": {"content": "x"}, "finish_reason": "length"}]});
        let r = from_chat(&cut, &json!({}));
        assert_eq!(r["status"], "incomplete");
        assert_eq!(r["incomplete_details"]["reason"], "max_output_tokens");
    }
}
