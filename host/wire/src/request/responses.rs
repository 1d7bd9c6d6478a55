//! OpenAI Responses requests as chat-completions requests. Stateless:
//! `store` is ignored and `previous_response_id` refused (the client sends
//! the whole conversation, as OpenClaw does with `store: false`).

use serde_json::{Map, Value, json};

use super::copy_control_fields;
use crate::error::{Error, Result};
use crate::text::value_text;

/// A Responses request as a chat-completions request.
pub fn to_chat(request: &Value) -> Result<Value> {
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
        Some(_) => return Err(Error::bad_field("`input`", "a string or a list of items")),
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
                    return Err(Error::bad_field(
                        format!("input[{i}].role"),
                        "system, developer, user or assistant",
                    ));
                }
            };
            let content = match &item["content"] {
                Value::String(s) => json!(s),
                Value::Array(parts) if role == "user" => user_parts(parts),
                parts @ Value::Array(_) => json!(value_text(parts)),
                _ => {
                    return Err(Error::bad_field(
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
                other => value_text(other),
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn fixture() -> Value {
        crate::openclaw_fixture("openai_responses.json")
    }

    #[test]
    fn openclaws_request_translates_to_chat() {
        let body = fixture();
        let chat = to_chat(&body).unwrap();
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
        let chat = to_chat(&body).unwrap();
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
            let e = to_chat(&body).unwrap_err();
            assert!(e.to_string().contains(says), "{e}");
        }
    }
}
