//! Anthropic Messages requests ⇄ chat-completions requests: `/v1/messages`
//! in front of an OpenAI-style upstream (to chat), and a chat turn (or the
//! learner's judge and evolver) in front of an Anthropic upstream (from
//! chat). Also where the skills block goes in a passed-through Anthropic
//! request.

use serde::Deserialize;
use serde_json::{Map, Number, Value, json};

use super::{ChatPart, Controls, Lenient, Obj};
use crate::error::{Error, Result};
use crate::response::anthropic::assistant_blocks;
use crate::text::value_text;

/// Anthropic requires `max_tokens`; a chat request may leave it out.
const DEFAULT_MAX_TOKENS: u64 = 4096;

/// An Anthropic Messages request, as the translation to chat reads it.
/// Optional fields of the wrong shape are dropped, never refused (as the
/// key lookups did); `messages` and `system` are checked after.
#[derive(Deserialize, Default)]
#[serde(default)]
struct AnthropicRequest {
    /// Copied as sent, whatever it is: the chat parse judges it.
    #[serde(deserialize_with = "super::given")]
    model: Option<Value>,
    messages: Lenient<Vec<Obj<AnthropicMessage>>>,
    system: Lenient<Option<System>>,
    max_tokens: Lenient<u64>,
    temperature: Lenient<Number>,
    top_p: Lenient<Number>,
    stop_sequences: Lenient<Vec<Value>>,
    metadata: Obj<Metadata>,
    tools: Lenient<Vec<Obj<Tool>>>,
    tool_choice: Obj<ToolChoice>,
    stream: Lenient<bool>,
    #[serde(flatten)]
    controls: Controls,
}

/// A message; one that is not an object or has another role reads as none.
#[derive(Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
enum AnthropicMessage {
    User {
        #[serde(default)]
        content: Lenient<Content>,
    },
    Assistant {
        #[serde(default)]
        content: Lenient<Content>,
    },
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Blocks(Vec<Obj<Block>>),
}

/// A content block; fields are read leniently so that a block of a known
/// type is never demoted to [`Block::Other`] by one of its fields.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        /// As sent: a user's text part is forwarded whatever it holds.
        #[serde(default)]
        text: Value,
    },
    Image {
        #[serde(default)]
        source: Obj<Source>,
    },
    ToolResult {
        #[serde(default)]
        tool_use_id: Value,
        /// Tool output, read for its text.
        #[serde(default)]
        content: Value,
        #[serde(default)]
        is_error: Lenient<bool>,
    },
    Document {
        #[serde(default)]
        source: Obj<Source>,
    },
    ToolUse {
        #[serde(default)]
        id: Value,
        #[serde(default)]
        name: Value,
        /// The call's arguments, forwarded as JSON text.
        #[serde(default, deserialize_with = "super::given")]
        input: Option<Value>,
    },
    /// Thinking, server tools… nothing a chat upstream takes back.
    #[serde(other)]
    Other,
}

/// An image's or a document's `source`.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Source {
    #[serde(rename = "type")]
    kind: Lenient<String>,
    media_type: Lenient<String>,
    data: Lenient<String>,
    url: Lenient<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum System {
    Text(String),
    Blocks(Vec<Obj<SystemBlock>>),
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SystemBlock {
    text: Lenient<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Metadata {
    user_id: Lenient<String>,
}

/// A tool; its schema and description are forwarded as sent.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Tool {
    name: Value,
    #[serde(deserialize_with = "super::given")]
    description: Option<Value>,
    #[serde(deserialize_with = "super::given")]
    input_schema: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ToolChoice {
    /// Matched as a string: any other `type` is `auto`.
    #[serde(rename = "type")]
    kind: Lenient<String>,
    name: Value,
    disable_parallel_tool_use: Lenient<bool>,
}

/// An Anthropic Messages request as a chat-completions request.
pub fn to_chat(request: &Value) -> Result<Value> {
    if !request.is_object() {
        return Err(Error::NotAnObject);
    }
    // Every field is lenient, so an object always reads.
    let request =
        AnthropicRequest::deserialize(request).map_err(|e| Error::Shape(e.to_string()))?;
    let messages = match request.messages {
        Lenient::Read(m) => m,
        Lenient::Wrong => return Err(Error::bad_field("`messages`", "a list of {role, content}")),
        Lenient::Absent => {
            return Err(Error::Missing {
                field: "messages",
                expected: "a list of {role, content}",
            });
        }
    };
    let mut chat = Vec::with_capacity(messages.len() + 1);
    match request.system {
        Lenient::Absent | Lenient::Read(None) => {}
        Lenient::Read(Some(system)) => {
            let text = system_text(system);
            if !text.is_empty() {
                chat.push(json!({"role": "system", "content": text}));
            }
        }
        Lenient::Wrong => {
            return Err(Error::bad_field(
                "`system`",
                "a string or a list of text blocks",
            ));
        }
    }
    for (i, Obj(message)) in messages.into_iter().enumerate() {
        match message {
            Some(AnthropicMessage::User { content }) => user_to_chat(content, i, &mut chat)?,
            Some(AnthropicMessage::Assistant { content }) => {
                chat.push(assistant_to_chat(content, i)?);
            }
            None => {
                return Err(Error::bad_field(
                    format!("messages[{i}].role"),
                    "\"user\" or \"assistant\"",
                ));
            }
        }
    }
    let mut out = Map::new();
    if let Some(model) = request.model {
        out.insert("model".into(), model);
    }
    out.insert("messages".into(), Value::Array(chat));
    if let Some(n) = request.max_tokens.read() {
        out.insert("max_tokens".into(), json!(n));
    }
    for (key, v) in [
        ("temperature", request.temperature),
        ("top_p", request.top_p),
    ] {
        if let Some(v) = v.read() {
            out.insert(key.into(), Value::Number(v));
        }
    }
    if let Some(stop) = request.stop_sequences.read() {
        out.insert("stop".into(), Value::Array(stop));
    }
    if let Some(user) = request.metadata.0.and_then(|m| m.user_id.read()) {
        out.insert("user".into(), json!(user));
    }
    if let Some(tools) = request.tools.read().and_then(tools_to_chat) {
        out.insert("tools".into(), tools);
    }
    if let Obj(Some(choice)) = request.tool_choice {
        tool_choice_to_chat(choice, &mut out);
    }
    if request.stream.read() == Some(true) {
        out.insert("stream".into(), json!(true));
        out.insert("stream_options".into(), json!({"include_usage": true}));
    }
    request.controls.copy_into(&mut out);
    Ok(Value::Object(out))
}

fn system_text(system: System) -> String {
    match system {
        System::Text(s) => s,
        System::Blocks(blocks) => blocks
            .into_iter()
            .filter_map(|Obj(b)| b.and_then(|b| b.text.read()))
            .collect::<Vec<_>>()
            .join("\n\n"),
    }
}

/// The tools in chat form; none when no tool has one.
fn tools_to_chat(tools: Vec<Obj<Tool>>) -> Option<Value> {
    // Server tools (web search…) have no schema and no OpenAI form.
    let tools: Vec<Value> = tools
        .into_iter()
        .filter_map(|Obj(t)| {
            let t = t?;
            let schema = t.input_schema?;
            let mut function = Map::new();
            function.insert("name".into(), t.name);
            if let Some(d) = t.description {
                function.insert("description".into(), d);
            }
            function.insert("parameters".into(), schema);
            Some(json!({"type": "function", "function": function}))
        })
        .collect();
    (!tools.is_empty()).then_some(Value::Array(tools))
}

fn tool_choice_to_chat(choice: ToolChoice, out: &mut Map<String, Value>) {
    let mapped = match choice.kind.read().as_deref() {
        Some("any") => json!("required"),
        Some("none") => json!("none"),
        Some("tool") => json!({"type": "function", "function": {"name": choice.name}}),
        _ => json!("auto"),
    };
    out.insert("tool_choice".into(), mapped);
    if choice.disable_parallel_tool_use.read() == Some(true) {
        out.insert("parallel_tool_calls".into(), json!(false));
    }
}

fn bad_content(i: usize) -> Error {
    Error::bad_field(
        format!("messages[{i}].content"),
        "a string or a list of blocks",
    )
}

/// A user turn: tool results become `tool` messages (first: OpenAI wants
/// them right after the assistant's calls), the rest one user message.
fn user_to_chat(content: Lenient<Content>, i: usize, chat: &mut Vec<Value>) -> Result<()> {
    let blocks = match content {
        Lenient::Read(Content::Blocks(blocks)) => blocks,
        Lenient::Read(Content::Text(s)) => {
            chat.push(json!({"role": "user", "content": s}));
            return Ok(());
        }
        Lenient::Absent | Lenient::Wrong => return Err(bad_content(i)),
    };
    let mut parts = Vec::new();
    for Obj(block) in blocks {
        match block {
            Some(Block::Text { text }) => parts.push(ChatPart::Text(text)),
            Some(Block::Image { source }) => {
                parts.push(ChatPart::Image(source.0.map(image_url).unwrap_or_default()));
            }
            Some(Block::ToolResult {
                tool_use_id,
                content,
                is_error,
            }) => {
                let mut text = value_text(&content);
                if is_error.read() == Some(true) && !text.starts_with("Error") {
                    text = format!("Error: {text}");
                }
                chat.push(json!({
                    "role": "tool",
                    "tool_call_id": tool_use_id,
                    "content": text,
                }));
            }
            Some(Block::Document { source }) => {
                if let Some(text) = source.0.and_then(|s| s.data.read()) {
                    parts.push(ChatPart::Text(json!(text)));
                }
            }
            Some(Block::ToolUse { .. } | Block::Other) | None => {}
        }
    }
    let content = match parts.as_mut_slice() {
        [] => return Ok(()),
        [ChatPart::Text(text)] => text.take(),
        _ => Value::Array(parts.into_iter().map(ChatPart::into_value).collect()),
    };
    chat.push(json!({"role": "user", "content": content}));
    Ok(())
}

/// An image source as a URL: base64 data as a `data:` URL.
fn image_url(source: Source) -> String {
    match source.kind.read().as_deref() {
        Some("base64") => format!(
            "data:{};base64,{}",
            source.media_type.read().as_deref().unwrap_or("image/png"),
            source.data.read().unwrap_or_default()
        ),
        _ => source.url.read().unwrap_or_default(),
    }
}

/// An assistant turn: its text, and its tool uses as tool calls.
fn assistant_to_chat(content: Lenient<Content>, i: usize) -> Result<Value> {
    let blocks = match content {
        Lenient::Read(Content::Blocks(blocks)) => blocks,
        Lenient::Read(Content::Text(s)) => return Ok(json!({"role": "assistant", "content": s})),
        Lenient::Absent | Lenient::Wrong => return Err(bad_content(i)),
    };
    let mut text = String::new();
    let mut calls = Vec::new();
    // Thinking blocks are the model's own; they are not sent back upstream.
    for Obj(block) in blocks {
        match block {
            Some(Block::Text { text: t }) => text.push_str(t.as_str().unwrap_or("")),
            Some(Block::ToolUse { id, name, input }) => calls.push(json!({
                "id": id,
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": input.map_or_else(|| "{}".into(), |v| v.to_string()),
                },
            })),
            _ => {}
        }
    }
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    let content = if text.is_empty() && !calls.is_empty() {
        Value::Null
    } else {
        json!(text)
    };
    message.insert("content".into(), content);
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    Ok(Value::Object(message))
}

/// A chat-completions request as an Anthropic Messages request.
pub fn from_chat(request: &Value) -> Result<Value> {
    let messages = request["messages"].as_array().ok_or(Error::Missing {
        field: "messages",
        expected: "a list of chat messages",
    })?;
    let (system, out_messages) = messages_from_chat(messages);
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
    sampling_from_chat(request, &mut out);
    if let Some(tools) = request["tools"].as_array() {
        let tools: Vec<Value> = tools
            .iter()
            .filter(|t| t["type"] == "function")
            .map(|t| tool_from_chat(&t["function"]))
            .collect();
        if !tools.is_empty() {
            out.insert("tools".into(), Value::Array(tools));
        }
    }
    if let Some(choice) = tool_choice_from_chat(request, out.contains_key("tools")) {
        out.insert("tool_choice".into(), choice);
    }
    if request["stream"] == true {
        out.insert("stream".into(), json!(true));
    }
    Ok(Value::Object(out))
}

/// Chat messages as Anthropic's: the system and developer texts apart
/// (in order), the rest as user and assistant turns.
fn messages_from_chat(messages: &[Value]) -> (Vec<String>, Vec<Value>) {
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
            "tool" => push_tool_result(&mut out_messages, m),
            _ => {
                let content = user_content(&m["content"]);
                out_messages.push(json!({"role": "user", "content": content}));
            }
        }
    }
    (system, out_messages)
}

/// A tool message as a `tool_result` block, in the user turn of the
/// round's other results when the last turn is that.
fn push_tool_result(out_messages: &mut Vec<Value>, m: &Value) {
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

/// A user message's content: its text, or its text and image parts as
/// blocks.
fn user_content(content: &Value) -> Value {
    match content {
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
    }
}

/// `temperature`, `top_p`, `stop` (as `stop_sequences`) and `user` (as
/// `metadata.user_id`), each where the request has it.
fn sampling_from_chat(request: &Value, out: &mut Map<String, Value>) {
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
}

/// A chat tool's function as an Anthropic tool.
fn tool_from_chat(f: &Value) -> Value {
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
}

/// `tool_choice` (with `parallel_tool_calls: false`) as Anthropic's; sent
/// only with tools.
fn tool_choice_from_chat(request: &Value, has_tools: bool) -> Option<Value> {
    let mut choice = match &request["tool_choice"] {
        Value::String(s) if s == "required" => Some(json!({"type": "any"})),
        Value::String(s) if s == "none" => Some(json!({"type": "none"})),
        Value::String(_) => Some(json!({"type": "auto"})),
        Value::Object(o) => o
            .get("function")
            .map(|f| json!({"type": "tool", "name": f["name"]})),
        _ => None,
    };
    if request["parallel_tool_calls"] == false && has_tools {
        let c = choice.get_or_insert_with(|| json!({"type": "auto"}));
        c["disable_parallel_tool_use"] = json!(true);
    }
    choice.filter(|_| has_tools)
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
