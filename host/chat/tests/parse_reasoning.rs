//! Reasoning split from the answer, and which family a model's chat
//! template teaches.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use metaclaw_chat::parse::{Family, parse};

/// (reasoning, content) of a sample with no tool-call family.
fn split(text: &str, thinking_open: bool) -> (Option<String>, String) {
    let parsed = parse(text, None, thinking_open);
    assert_eq!(parsed.error, None);
    assert!(parsed.tool_calls.is_empty());
    (parsed.reasoning, parsed.content)
}

fn some(text: &str) -> Option<String> {
    Some(text.to_owned())
}

#[test]
fn think_at_the_start_is_reasoning() {
    assert_eq!(
        split(
            "<think>\nThe user wants X.\nSo Y.\n</think>\n\nHere is Y.",
            false
        ),
        (some("The user wants X.\nSo Y."), "Here is Y.".to_owned())
    );
    // Whitespace before it; no newlines around it.
    assert_eq!(
        split("\n  <think>short</think>answer", false),
        (some("short"), "answer".to_owned())
    );
    // Qwen3 with thinking off writes an empty block: no reasoning.
    assert_eq!(
        split("<think>\n\n</think>\n\nJust the answer.", false),
        (None, "Just the answer.".to_owned())
    );
    // No reasoning at all: the text untouched.
    assert_eq!(
        split("Plain answer.\n", false),
        (None, "Plain answer.\n".to_owned())
    );
    // A `<think>` that is not at the start is the answer talking about tags.
    let text = "Wrap it as <think>x</think> in the prompt.";
    assert_eq!(split(text, false), (None, text.to_owned()));
}

#[test]
fn a_prompt_that_opened_think_starts_the_sample_in_reasoning() {
    // The generation prompt ended with `<think>\n` (QwQ, DeepSeek-R1 style).
    assert_eq!(
        split("The user wants X.\n</think>\n\nHere is X.", true),
        (some("The user wants X."), "Here is X.".to_owned())
    );
    // The same without being told: a `</think>` with no `<think>`.
    assert_eq!(
        split("The user wants X.\n</think>\n\nHere is X.", false),
        (some("The user wants X."), "Here is X.".to_owned())
    );
    // Still thinking when the sample ended.
    assert_eq!(
        split("Hmm, let me see", true),
        (some("Hmm, let me see"), String::new())
    );
    assert_eq!(split("", true), (None, String::new()));
}

#[test]
fn a_sample_cut_off_while_thinking_is_all_reasoning() {
    assert_eq!(
        split("<think>\nStep 1: read the file.\nStep 2: ", false),
        (some("Step 1: read the file.\nStep 2:"), String::new())
    );
    // Tool calls it was thinking about are not run.
    for family in Family::ALL {
        let calls = [metaclaw_chat::parse::ToolCall {
            id: "functions.a:0".to_owned(),
            name: "a".to_owned(),
            arguments: "{}".to_owned(),
        }];
        let text = format!("<think>\nMaybe {}", family.parser().format(&calls));
        let parsed = parse(&text, Some(family), false);
        assert!(parsed.tool_calls.is_empty(), "{family:?}");
        assert_eq!(parsed.content, "");
        assert_eq!(parsed.error, None);
        assert!(parsed.reasoning.unwrap().starts_with("Maybe "));
    }
}

#[test]
fn families_are_found_by_name() {
    for family in Family::ALL {
        assert_eq!(Family::from_name(family.name()), Some(family));
        assert_eq!(family.to_string(), family.name());
    }
    assert_eq!(Family::Hermes.name(), "hermes");
    assert_eq!(Family::KimiK2.name(), "kimi_k2");
    for name in ["hermes", "qwen", "qwen3", "Qwen3", "qwen2.5", " hermes "] {
        assert_eq!(Family::from_name(name), Some(Family::Hermes), "{name}");
    }
    for name in ["kimi", "kimi_k2", "kimi-k2", "Kimi-K2", "kimik2"] {
        assert_eq!(Family::from_name(name), Some(Family::KimiK2), "{name}");
    }
    for name in ["", "llama", "deepseek", "kimi_k3"] {
        assert_eq!(Family::from_name(name), None, "{name}");
    }
}

#[test]
fn families_are_found_in_chat_templates() {
    // Qwen2.5 / Qwen3: the system prompt teaches the syntax.
    let qwen = r#"{{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}"#;
    assert_eq!(Family::detect(qwen), Some(Family::Hermes));
    // Kimi K2: the assistant's calls rendered with its special tokens.
    let kimi = r#"{%- if message['role'] == 'assistant' and message.get('tool_calls') -%}
    <|tool_calls_section_begin|>
    {%- for tool_call in message['tool_calls'] -%}
      <|tool_call_begin|>{{ tool_call['id'] }}<|tool_call_argument_begin|>{{ tool_call['function']['arguments'] }}<|tool_call_end|>
    {%- endfor -%}
    <|tool_calls_section_end|>"#;
    assert_eq!(Family::detect(kimi), Some(Family::KimiK2));
    // Qwen3-Coder and GLM put another syntax inside `<tool_call>`: unknown,
    // rather than every call failing to parse.
    let qwen3_coder = "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n</function>\n</tool_call>";
    assert_eq!(Family::detect(qwen3_coder), None);
    let glm = "<tool_call>{{ tc.name }}\n<arg_key>{{ k }}</arg_key>\n<arg_value>{{ v }}</arg_value>\n</tool_call>";
    assert_eq!(Family::detect(glm), None);
    // A template that teaches no tool calls.
    let llama = "{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n{{ message['content'] }}<|eot_id|>{% endfor %}";
    assert_eq!(Family::detect(llama), None);
    assert_eq!(Family::detect(""), None);
}
