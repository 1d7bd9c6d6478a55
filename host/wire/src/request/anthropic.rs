//! Anthropic Messages requests ⇄ chat-completions requests: `/v1/messages`
//! in front of an OpenAI-style upstream (to chat), and a chat turn (or the
//! learner's judge and evolver) in front of an Anthropic upstream (from
//! chat). Also where the skills block goes in a passed-through Anthropic
//! request.

use serde_json::{Map, Value, json};

use super::copy_control_fields;
use crate::error::{Error, Result};
use crate::response::anthropic::{assistant_blocks, assistant_message};
use crate::text::value_text;

/// Anthropic requires `max_tokens`; a chat request may leave it out.
const DEFAULT_MAX_TOKENS: u64 = 4096;

/// An Anthropic Messages request as a chat-completions request.
pub fn to_chat(request: &Value) -> Result<Value> {
    let obj = request.as_object().ok_or(Error::NotAnObject)?;
    let messages = match obj.get("messages") {
        Some(Value::Array(m)) => m,
        Some(_) => return Err(Error::bad_field("`messages`", "a list of {role, content}")),
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
            return Err(Error::bad_field(
                "`system`",
                "a string or a list of text blocks",
            ));
        }
    }
    for (i, message) in messages.iter().enumerate() {
        let content = &message["content"];
        match message["role"].as_str() {
            Some("user") => user_to_chat(content, i, &mut chat)?,
            Some("assistant") => chat.push(assistant_to_chat(content, i)?),
            _ => {
                return Err(Error::bad_field(
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
            return Err(Error::bad_field(
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
                let mut text = value_text(&block["content"]);
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
            return Err(Error::bad_field(
                format!("messages[{i}].content"),
                "a string or a list of blocks",
            ));
        }
    };
    // Thinking blocks are the model's own; they are not sent back upstream.
    let (message, _thinking) = assistant_message(blocks);
    Ok(Value::Object(message))
}

/// A chat-completions request as an Anthropic Messages request.
pub fn from_chat(request: &Value) -> Result<Value> {
    let messages = request["messages"].as_array().ok_or(Error::Missing {
        field: "messages",
        expected: "a list of chat messages",
    })?;
    let mut system = Vec::new();
    let mut out_messages: Vec<Value> = Vec::new();
    for m in messages {
        match m["role"].as_str().unwrap_or("") {
            "system" | "developer" => system.push(value_text(&m["content"])),
            "assistant" => {
                let blocks = assistant_blocks(m);
                if !blocks.is_empty() {
                    out_messages.push(json!({"role": "assistant", "content": blocks}));
                }
            }
            "tool" => {
                let block = json!({
                    "type": "tool_result",
                    "tool_use_id": m["tool_call_id"],
                    "content": value_text(&m["content"]),
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn fixture() -> Value {
        crate::openclaw_fixture("anthropic_messages.json")
    }

    #[test]
    fn openclaws_request_translates_to_chat() {
        let body = fixture();
        let chat = to_chat(&body).unwrap();
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
        let chat = to_chat(&body).unwrap();
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
        let back = from_chat(&chat).unwrap();
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
            let e = to_chat(&body).unwrap_err();
            assert!(e.to_string().contains(says), "{e}");
        }
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
