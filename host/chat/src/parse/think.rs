//! Reasoning: the `<think>…</think>` part of a sample, split from the
//! answer before tool calls are looked for, so a tool call the model only
//! thought about is never run.

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// Splits `text` into its reasoning (None when there is none, or it is
/// empty) and the rest, with the newlines the templates put after
/// `</think>` trimmed from the rest's start.
///
/// - `<think>…</think>` at the start (after whitespace): reasoning;
/// - `thinking_open` (the prompt ended inside `<think>`), or a `</think>`
///   with no `<think>` before it: everything before `</think>` is
///   reasoning;
/// - an unclosed `<think>` (or `thinking_open` with no `</think>`): the
///   sample was cut off while thinking, so all of it is reasoning.
pub(crate) fn split_reasoning(text: &str, thinking_open: bool) -> (Option<String>, &str) {
    let start = text.trim_start();
    if let Some(inner) = start.strip_prefix(OPEN) {
        return match inner.find(CLOSE) {
            Some(end) => (
                reasoning(&inner[..end]),
                after_reasoning(&inner[end + CLOSE.len()..]),
            ),
            None => (reasoning(inner), ""),
        };
    }
    match text.find(CLOSE) {
        Some(end) if thinking_open || !text[..end].contains(OPEN) => (
            reasoning(&text[..end]),
            after_reasoning(&text[end + CLOSE.len()..]),
        ),
        None if thinking_open => (reasoning(text), ""),
        _ => (None, text),
    }
}

/// Templates render `<think>\n{reasoning}\n</think>`: the newlines are
/// theirs, not the model's thought.
fn reasoning(text: &str) -> Option<String> {
    let trimmed = text.trim();
    (!trimmed.is_empty()).then(|| trimmed.to_owned())
}

fn after_reasoning(rest: &str) -> &str {
    rest.trim_start_matches(['\n', '\r'])
}
