//! OpenAI Responses requests as chat-completions requests. Stateless:
//! `store` is ignored and `previous_response_id` refused (the client sends
//! the whole conversation, as OpenClaw does with `store: false`).

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny};
use serde_json::{Map, Value, json};

use super::{ChatPart, Controls, Lenient, Obj};
use crate::error::{Error, Result};
use crate::text::value_text;

/// A Responses request, as the translation to chat reads it. Optional
/// fields of the wrong shape are dropped; `input` is checked after.
#[derive(Deserialize, Default)]
#[serde(default)]
struct ResponsesRequest {
    /// Copied as sent, whatever it is: the chat parse judges it.
    #[serde(deserialize_with = "super::given")]
    model: Option<Value>,
    /// Refused when given (not null).
    previous_response_id: Option<IgnoredAny>,
    instructions: Lenient<String>,
    input: Lenient<Input>,
    max_output_tokens: Lenient<u64>,
    // Forwarded as sent unless null (`Option` reads a null as absent).
    temperature: Option<Value>,
    top_p: Option<Value>,
    parallel_tool_calls: Option<Value>,
    user: Option<Value>,
    prompt_cache_key: Option<Value>,
    safety_identifier: Option<Value>,
    reasoning: Obj<Reasoning>,
    text: Obj<TextOptions>,
    tools: Lenient<Vec<Obj<Tool>>>,
    tool_choice: Option<ToolChoice>,
    stream: Lenient<bool>,
    #[serde(flatten)]
    controls: Controls,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Input {
    Text(String),
    Items(Vec<Item>),
}

/// An `input` item: by its `type`, else a message by its `role`.
enum Item {
    Typed(TypedItem),
    ByRole(ItemMessage),
    /// Not an object.
    Untyped,
}

impl<'de> Deserialize<'de> for Item {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        if !value.is_object() {
            return Ok(Self::Untyped);
        }
        // Not `untagged`: through serde's buffer a number would pass as a
        // variant's index; read from the value, a `type` must be a string.
        // Reading fails only without one, and a message never fails.
        Ok(match TypedItem::deserialize(&value) {
            Ok(item) => Self::Typed(item),
            Err(_) => ItemMessage::deserialize(value).map_or(Self::Untyped, Self::ByRole),
        })
    }
}

/// An item with a `type`; fields are read leniently so that a known item
/// is never demoted to [`TypedItem::Other`] by one of its fields.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum TypedItem {
    Message(ItemMessage),
    FunctionCall(FunctionCall),
    FunctionCallOutput(FunctionCallOutput),
    /// Reasoning items and references to stored items carry nothing a
    /// stateless chat upstream can use.
    #[serde(other)]
    Other,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ItemMessage {
    role: Lenient<String>,
    content: Lenient<MessageContent>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum MessageContent {
    Text(String),
    Parts(Vec<Part>),
}

/// A content part: a bare string, or an object (none when another value).
#[derive(Deserialize)]
#[serde(untagged)]
enum Part {
    Bare(String),
    Object(Obj<PartFields>),
}

/// An object part. Flat, not tagged: any part's `text` is its text in a
/// non-user message, whatever its `type`.
#[derive(Deserialize, Default)]
#[serde(default)]
struct PartFields {
    #[serde(rename = "type")]
    kind: Lenient<String>,
    /// As sent: a user's text part is forwarded whatever it holds.
    text: Value,
    image_url: Lenient<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct FunctionCall {
    call_id: Value,
    name: Value,
    arguments: Lenient<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct FunctionCallOutput {
    call_id: Value,
    /// Tool output, read for its text.
    output: Value,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Reasoning {
    effort: Lenient<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct TextOptions {
    format: Obj<Format>,
}

/// `text.format`.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Format {
    JsonSchema(Box<JsonSchema>),
    JsonObject,
    #[serde(other)]
    Other,
}

/// A `json_schema` format's fields, forwarded as sent.
#[derive(Deserialize, Default)]
#[serde(default)]
struct JsonSchema {
    #[serde(deserialize_with = "super::given")]
    name: Option<Value>,
    #[serde(deserialize_with = "super::given")]
    schema: Option<Value>,
    #[serde(deserialize_with = "super::given")]
    strict: Option<Value>,
    #[serde(deserialize_with = "super::given")]
    description: Option<Value>,
}

/// A tool.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Tool {
    Function(Box<FunctionTool>),
    /// Built-in tools (web search, file search…) have no chat form.
    #[serde(other)]
    Other,
}

/// A function tool's fields, forwarded as sent when not null.
#[derive(Deserialize)]
struct FunctionTool {
    name: Option<Value>,
    description: Option<Value>,
    parameters: Option<Value>,
    strict: Option<Value>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ToolChoice {
    Mode(String),
    Named(Obj<NamedChoice>),
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum NamedChoice {
    Function {
        #[serde(default)]
        name: Value,
    },
    #[serde(other)]
    Other,
}

/// A chat message being built: calls made in one step join the assistant
/// message before them.
enum ChatMessage {
    Said {
        role: &'static str,
        content: Value,
        calls: Vec<Value>,
    },
    ToolOutput {
        call_id: Value,
        content: String,
    },
}

impl ChatMessage {
    fn said(role: &'static str, content: Value) -> Self {
        Self::Said {
            role,
            content,
            calls: Vec::new(),
        }
    }

    fn into_value(self) -> Value {
        match self {
            Self::Said {
                role,
                content,
                calls,
            } if calls.is_empty() => json!({"role": role, "content": content}),
            Self::Said {
                role,
                content,
                calls,
            } => json!({"role": role, "content": content, "tool_calls": calls}),
            Self::ToolOutput { call_id, content } => {
                json!({"role": "tool", "tool_call_id": call_id, "content": content})
            }
        }
    }
}

/// A Responses request as a chat-completions request.
pub fn to_chat(request: &Value) -> Result<Value> {
    if !request.is_object() {
        return Err(Error::NotAnObject);
    }
    // Every field is lenient, so an object always reads.
    let request =
        ResponsesRequest::deserialize(request).map_err(|e| Error::Shape(e.to_string()))?;
    if request.previous_response_id.is_some() {
        return Err(Error::Unsupported {
            field: "previous_response_id",
            instead: "metaclaw keeps no responses; send the whole conversation in `input`",
        });
    }
    let mut chat = Vec::new();
    if let Some(s) = request.instructions.read().filter(|s| !s.is_empty()) {
        chat.push(ChatMessage::said("system", json!(s)));
    }
    match request.input {
        Lenient::Read(Input::Text(s)) => chat.push(ChatMessage::said("user", json!(s))),
        Lenient::Read(Input::Items(items)) => {
            for (i, item) in items.into_iter().enumerate() {
                item_to_chat(item, i, &mut chat)?;
            }
        }
        Lenient::Wrong => return Err(Error::bad_field("`input`", "a string or a list of items")),
        Lenient::Absent => {
            return Err(Error::Missing {
                field: "input",
                expected: "a string or a list of items",
            });
        }
    }
    let mut out = Map::new();
    if let Some(model) = request.model {
        out.insert("model".into(), model);
    }
    let chat = chat.into_iter().map(ChatMessage::into_value).collect();
    out.insert("messages".into(), Value::Array(chat));
    if let Some(n) = request.max_output_tokens.read() {
        out.insert("max_tokens".into(), json!(n));
    }
    for (key, v) in [
        ("temperature", request.temperature),
        ("top_p", request.top_p),
        ("parallel_tool_calls", request.parallel_tool_calls),
        ("user", request.user),
        ("prompt_cache_key", request.prompt_cache_key),
        ("safety_identifier", request.safety_identifier),
    ] {
        if let Some(v) = v {
            out.insert(key.into(), v);
        }
    }
    if let Some(effort) = request.reasoning.0.and_then(|r| r.effort.read()) {
        out.insert("reasoning_effort".into(), json!(effort));
    }
    if let Some(format) = request.text.0.and_then(|t| t.format.0) {
        response_format(format, &mut out);
    }
    if let Some(tools) = request.tools.read().and_then(tools_to_chat) {
        out.insert("tools".into(), tools);
    }
    match request.tool_choice {
        Some(ToolChoice::Mode(s)) => {
            out.insert("tool_choice".into(), json!(s));
        }
        Some(ToolChoice::Named(Obj(Some(NamedChoice::Function { name })))) => {
            out.insert(
                "tool_choice".into(),
                json!({"type": "function", "function": {"name": name}}),
            );
        }
        _ => {}
    }
    if request.stream.read() == Some(true) {
        out.insert("stream".into(), json!(true));
        out.insert("stream_options".into(), json!({"include_usage": true}));
    }
    request.controls.copy_into(&mut out);
    Ok(Value::Object(out))
}

/// `text.format` as chat's `response_format`.
fn response_format(format: Format, out: &mut Map<String, Value>) {
    match format {
        Format::JsonSchema(format) => {
            let mut json_schema = Map::new();
            for (key, v) in [
                ("name", format.name),
                ("schema", format.schema),
                ("strict", format.strict),
                ("description", format.description),
            ] {
                if let Some(v) = v {
                    json_schema.insert(key.into(), v);
                }
            }
            out.insert(
                "response_format".into(),
                json!({"type": "json_schema", "json_schema": json_schema}),
            );
        }
        Format::JsonObject => {
            out.insert("response_format".into(), json!({"type": "json_object"}));
        }
        Format::Other => {}
    }
}

/// The function tools in chat form; none when there is none.
fn tools_to_chat(tools: Vec<Obj<Tool>>) -> Option<Value> {
    let tools: Vec<Value> = tools
        .into_iter()
        .filter_map(|Obj(t)| match t? {
            Tool::Function(f) => {
                let mut function = Map::new();
                for (key, v) in [
                    ("name", f.name),
                    ("description", f.description),
                    ("parameters", f.parameters),
                    ("strict", f.strict),
                ] {
                    if let Some(v) = v {
                        function.insert(key.into(), v);
                    }
                }
                Some(json!({"type": "function", "function": function}))
            }
            Tool::Other => None,
        })
        .collect();
    (!tools.is_empty()).then_some(Value::Array(tools))
}

fn item_to_chat(item: Item, i: usize, chat: &mut Vec<ChatMessage>) -> Result<()> {
    match item {
        Item::Typed(TypedItem::Message(message)) => message_to_chat(message, i, chat)?,
        Item::ByRole(message) if !matches!(message.role, Lenient::Absent) => {
            message_to_chat(message, i, chat)?;
        }
        Item::Typed(TypedItem::FunctionCall(c)) => {
            let call = json!({
                "id": c.call_id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments.read().unwrap_or_else(|| "{}".into())},
            });
            // Calls made in one step belong to one assistant message.
            match chat.last_mut() {
                Some(ChatMessage::Said {
                    role: "assistant",
                    calls,
                    ..
                }) => calls.push(call),
                _ => chat.push(ChatMessage::Said {
                    role: "assistant",
                    content: Value::Null,
                    calls: vec![call],
                }),
            }
        }
        Item::Typed(TypedItem::FunctionCallOutput(o)) => {
            chat.push(ChatMessage::ToolOutput {
                call_id: o.call_id,
                content: value_text(&o.output),
            });
        }
        Item::Typed(TypedItem::Other) => {}
        Item::ByRole(_) | Item::Untyped => {
            return Err(Error::Untyped {
                field: format!("input[{i}]"),
                expected: "a `type` (message, function_call, function_call_output) or a `role`",
            });
        }
    }
    Ok(())
}

fn message_to_chat(message: ItemMessage, i: usize, chat: &mut Vec<ChatMessage>) -> Result<()> {
    let role = match message.role.read().as_deref() {
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
    let content = match message.content {
        Lenient::Read(MessageContent::Text(s)) => json!(s),
        Lenient::Read(MessageContent::Parts(parts)) if role == "user" => user_parts(parts),
        Lenient::Read(MessageContent::Parts(parts)) => json!(parts_text(parts)),
        Lenient::Absent | Lenient::Wrong => {
            return Err(Error::bad_field(
                format!("input[{i}].content"),
                "a string or a list of parts",
            ));
        }
    };
    chat.push(ChatMessage::said(role, content));
    Ok(())
}

/// The parts' texts joined by newlines, as [`value_text`] reads a list.
fn parts_text(parts: Vec<Part>) -> String {
    parts
        .into_iter()
        .filter_map(|part| match part {
            Part::Bare(s) => Some(s),
            Part::Object(Obj(p)) => p.and_then(|p| match p.text {
                Value::String(s) => Some(s),
                _ => None,
            }),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// User content parts: a string when it is all text, else chat parts.
fn user_parts(parts: Vec<Part>) -> Value {
    let mut out = Vec::new();
    for part in parts {
        let Part::Object(Obj(Some(p))) = part else {
            continue;
        };
        match p.kind.read().as_deref() {
            Some("input_text" | "output_text" | "text") => out.push(ChatPart::Text(p.text)),
            Some("input_image") => {
                if let Some(url) = p.image_url.read() {
                    out.push(ChatPart::Image(url));
                }
            }
            _ => {}
        }
    }
    if out.iter().all(|p| matches!(p, ChatPart::Text(_))) {
        json!(
            out.into_iter()
                .filter_map(|p| match p {
                    ChatPart::Text(Value::String(s)) => Some(s),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n")
        )
    } else {
        Value::Array(out.into_iter().map(ChatPart::into_value).collect())
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
