//! Hermes-style tool calls (Qwen2.5, Qwen3, NousResearch Hermes): each call
//! a JSON object in its own block,
//! `<tool_call>\n{"name": "NAME", "arguments": {…}}\n</tool_call>`, blocks
//! separated by newlines and anywhere in the answer.

use serde_json::Value;

use super::{
    CallIds, Family, Malformed, ToolCall, ToolCallParser, add_error, arguments_json, json_prefix,
    kind,
};

pub(crate) const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// The [`ToolCallParser`] of [`Family::Hermes`].
#[derive(Debug, Clone, Copy, Default)]
pub struct HermesParser;

impl ToolCallParser for HermesParser {
    fn family(&self) -> Family {
        Family::Hermes
    }

    fn parse(&self, text: &str, ids: &mut CallIds) -> (String, Vec<ToolCall>, Option<String>) {
        let mut content = String::new();
        let mut calls = Vec::new();
        let mut error = None;
        let mut pos = 0;
        let mut number = 0;
        while let Some(found) = text[pos..].find(OPEN) {
            let start = pos + found;
            content.push_str(&text[pos..start]);
            number += 1;
            match block(text, start + OPEN.len()) {
                Ok((name, arguments, end)) => {
                    calls.push(ToolCall {
                        id: ids.next_id(),
                        name,
                        arguments,
                    });
                    pos = end;
                }
                Err((end, why)) => {
                    content.push_str(&text[start..end]);
                    add_error(&mut error, format!("tool call {number}: {why}"));
                    pos = end;
                }
            }
        }
        content.push_str(&text[pos..]);
        (content.trim().to_owned(), calls, error)
    }

    /// As Qwen's templates render calls: one block per call, separated by a
    /// newline, the arguments as given (Qwen3 writes OpenAI's string
    /// arguments verbatim).
    fn format(&self, calls: &[ToolCall]) -> String {
        calls
            .iter()
            .map(|call| {
                let name = Value::String(call.name.clone());
                let arguments = match call.arguments.trim() {
                    "" => "{}",
                    arguments => arguments,
                };
                format!("{OPEN}\n{{\"name\": {name}, \"arguments\": {arguments}}}\n{CLOSE}")
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The block whose body starts at `body`: its name, arguments and end, or
/// the end of its text (to keep in the content) and why it is malformed.
fn block(text: &str, body: usize) -> Result<(String, String, usize), (usize, Malformed)> {
    let rest = &text[body..];
    // A malformed block runs to its `</tool_call>`, or, when another block
    // opens first or none closes it (the sample was cut off), up to there.
    // (Searched only up to the next block, so that a degenerate sample of
    // many unclosed blocks is not scanned to its end once per block.)
    let next_open = rest.find(OPEN);
    let closed_end = rest[..next_open.unwrap_or(rest.len())]
        .find(CLOSE)
        .map(|close| body + close + CLOSE.len());
    let unclosed = |why: Malformed| match closed_end {
        Some(end) => (end, why),
        None => (
            body + next_open.unwrap_or(rest.len()),
            Malformed::Unclosed(CLOSE),
        ),
    };
    let (value, used) = json_prefix(rest).map_err(unclosed)?;
    let after = rest.get(used..).unwrap_or_default();
    let after_trimmed = after.trim_start();
    if !after_trimmed.starts_with(CLOSE) {
        return Err(unclosed(Malformed::TextAfter("the JSON object", CLOSE)));
    }
    let end = body + used + (after.len() - after_trimmed.len()) + CLOSE.len();
    call(value)
        .map(|(name, arguments)| (name, arguments, end))
        .map_err(|why| (end, why))
}

/// A block's JSON as a call: `name` and `arguments` (or `parameters`).
fn call(value: Value) -> Result<(String, String), Malformed> {
    let Value::Object(object) = value else {
        return Err(Malformed::NotAnObject(kind(&value)));
    };
    let name = match object.get("name") {
        Some(Value::String(name)) if !name.trim().is_empty() => name.clone(),
        Some(Value::String(_)) => return Err(Malformed::EmptyName),
        Some(other) => return Err(Malformed::NameNotText(kind(other))),
        None => return Err(Malformed::NoName),
    };
    let arguments = arguments_json(object.get("arguments").or_else(|| object.get("parameters")))?;
    Ok((name, arguments))
}
