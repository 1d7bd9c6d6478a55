//! Does the next request's prompt extend the last one? The host relies on
//! it to reuse a sampled turn's tokens: after prompt P1 and a completion C
//! (ending in the stop token `<|im_end|>`), the prompt P2 of the request
//! that follows (history + the assistant's message + what came next)
//! should start with P1 + C + the template's end of turn. These tests
//! record what the Qwen3-style template gives:
//!
//! - a plain reply without reasoning: extends, the end of turn being
//!   `<|im_end|>` then `"\n"` (the sampler stops at `<|im_end|>`; the
//!   `"\n"` comes from the template);
//! - a tool-call turn, with or without reasoning: extends (Qwen3 keeps
//!   the reasoning of turns after the last user query), provided the
//!   model wrote the call's JSON as `tojson` spells it (`", "`, `": "`);
//! - a reply with reasoning followed by a new user message: breaks (Qwen3
//!   drops the reasoning of turns before the last user query), as does
//!   `enable_thinking=false` (the empty `<think></think>` of the generation
//!   prompt is not written into history).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod render_support;

use metaclaw_chat::render::{RenderOptions, Renderer};
use serde_json::{Value, json};

use render_support::fixture_renderer;

fn system() -> Value {
    json!({"role": "system", "content": "You are a helpful assistant."})
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

fn read_tool() -> Value {
    json!({"type": "function", "function": {"name": "read", "description": "Read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}})
}

fn prompt(
    renderer: &Renderer,
    messages: &[Value],
    tools: Option<&[Value]>,
    thinking: Option<bool>,
) -> Vec<i32> {
    let options = RenderOptions {
        add_generation_prompt: true,
        enable_thinking: thinking,
    };
    renderer.render(messages, tools, &options).unwrap().tokens
}

/// P1 + the completion + `<|im_end|>` + "\n".
fn extended(renderer: &Renderer, p1: &[i32], completion: &str) -> Vec<i32> {
    let mut expected = p1.to_vec();
    expected.extend(renderer.encode(completion).unwrap());
    expected.push(renderer.token_id("<|im_end|>").unwrap());
    expected.extend(renderer.encode("\n").unwrap());
    expected
}

#[test]
fn a_plain_reply_extends_the_prompt() {
    let r = fixture_renderer();
    let p1 = prompt(&r, &[system(), user("What is 2 + 2?")], None, None);
    let reply = "2 + 2 = 4.";
    let p2 = prompt(
        &r,
        &[
            system(),
            user("What is 2 + 2?"),
            json!({"role": "assistant", "content": reply}),
            user("And 3 + 3?"),
        ],
        None,
        None,
    );
    let expected = extended(&r, &p1, reply);
    assert!(
        p2.starts_with(&expected),
        "P2 extends P1 + reply + <|im_end|>\\n"
    );
    assert_eq!(
        r.encode("\n").unwrap().len(),
        1,
        "the end of turn is two tokens"
    );
}

#[test]
fn a_tool_call_turn_extends_the_prompt_with_or_without_reasoning() {
    let r = fixture_renderer();
    let tools = [read_tool()];
    let history = [system(), user("Read a.txt")];
    let p1 = prompt(&r, &history, Some(&tools), None);
    let call =
        "<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"a.txt\"}}\n</tool_call>";
    for (completion, assistant) in [
        (
            call.to_string(),
            json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{\"path\": \"a.txt\"}"}}
            ]}),
        ),
        (
            format!("<think>\nI should read it.\n</think>\n\n{call}"),
            json!({"role": "assistant", "reasoning_content": "I should read it.", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a.txt\"}"}}
            ]}),
        ),
    ] {
        let mut messages = history.to_vec();
        messages.push(assistant);
        messages.push(json!({"role": "tool", "tool_call_id": "c1", "content": "A"}));
        let p2 = prompt(&r, &messages, Some(&tools), None);
        assert!(
            p2.starts_with(&extended(&r, &p1, &completion)),
            "extends after {completion:?}"
        );
    }
}

#[test]
fn reasoning_before_the_last_user_query_breaks_the_extension() {
    let r = fixture_renderer();
    let p1 = prompt(
        &r,
        &[system(), user("Which is bigger, 9.11 or 9.9?")],
        None,
        None,
    );
    let completion = "<think>\n0.9 > 0.11\n</think>\n\n9.9 is bigger.";
    let p2 = prompt(
        &r,
        &[
            system(),
            user("Which is bigger, 9.11 or 9.9?"),
            json!({"role": "assistant", "reasoning_content": "0.9 > 0.11", "content": "9.9 is bigger."}),
            user("Thanks"),
        ],
        None,
        None,
    );
    assert!(
        !p2.starts_with(&extended(&r, &p1, completion)),
        "the reasoning is dropped from history"
    );
    assert!(
        p2.starts_with(&extended(&r, &p1, "9.9 is bigger.")),
        "only the answer stays"
    );
}

#[test]
fn thinking_off_breaks_the_extension() {
    let r = fixture_renderer();
    let p1 = prompt(&r, &[system(), user("Hi")], None, Some(false));
    let p2 = prompt(
        &r,
        &[
            system(),
            user("Hi"),
            json!({"role": "assistant", "content": "Hello!"}),
            user("Bye"),
        ],
        None,
        Some(false),
    );
    assert!(
        !p2.starts_with(&extended(&r, &p1, "Hello!")),
        "P1 ends in an empty think block history lacks"
    );
    let empty_think = r.encode("<think>\n\n</think>\n\n").unwrap();
    assert!(p1.ends_with(&empty_think));
    let without_block = &p1[..p1.len() - empty_think.len()];
    assert!(p2.starts_with(&extended(&r, without_block, "Hello!")));
}
