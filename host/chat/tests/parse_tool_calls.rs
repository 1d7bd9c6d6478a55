//! Tool calls parsed out of samples, per family: what the model writes in
//! its own syntax comes back as the calls the agent runs, and what it gets
//! wrong stays visible as text with an error.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;

use metaclaw_chat::parse::{CallIds, Family, Parsed, ToolCall, parse, parse_with_ids};
use serde_json::json;

fn call(id: &str, name: &str, arguments: serde_json::Value) -> ToolCall {
    ToolCall {
        id: id.to_owned(),
        name: name.to_owned(),
        arguments: arguments.to_string(),
    }
}

/// Call lists of 0, 1 and 3 calls, with the arguments that break naive
/// parsers: nesting, arrays, unicode, quotes, backslashes, newlines, markers
/// inside strings, no arguments.
fn call_lists() -> Vec<Vec<ToolCall>> {
    vec![
        vec![],
        vec![call(
            "functions.get_weather:0",
            "get_weather",
            json!({"city": "Paris", "unit": "celsius"}),
        )],
        vec![
            call(
                "functions.write_file:1",
                "write_file",
                json!({
                    "path": "/tmp/a \"quoted\" name.txt",
                    "content": "line 1\nline 2\t\\n not a newline\\\n日本語 🦀 é\u{200b}",
                    "options": {"mode": 420, "flags": ["create", "truncate"], "nested": {"deep": [1, 2.5, null, true, {}]}},
                }),
            ),
            call("functions.list:2", "list", json!({})),
            call(
                "functions.mcp.server-tool:3",
                "mcp.server-tool",
                json!({"z": 1, "a": [], "m": "</tool_call><tool_call><|tool_call_end|>", "k": "{\"name\": \"x\"}"}),
            ),
        ],
    ]
}

fn assert_same_calls(parsed: &Parsed, calls: &[ToolCall], family: Family) {
    let got: Vec<(&str, &str)> = parsed
        .tool_calls
        .iter()
        .map(|c| (c.name.as_str(), c.arguments.as_str()))
        .collect();
    let want: Vec<(&str, &str)> = calls
        .iter()
        .map(|c| (c.name.as_str(), c.arguments.as_str()))
        .collect();
    assert_eq!(got, want, "{family:?}");
    let ids: HashSet<&str> = parsed.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids.len(), parsed.tool_calls.len(), "ids unique: {parsed:?}");
    match family {
        Family::KimiK2 => {
            let want_ids: Vec<&str> = calls.iter().map(|c| c.id.as_str()).collect();
            let got_ids: Vec<&str> = parsed.tool_calls.iter().map(|c| c.id.as_str()).collect();
            assert_eq!(got_ids, want_ids, "Kimi keeps the model's own ids");
        }
        Family::Hermes => {
            for c in &parsed.tool_calls {
                assert!(c.id.starts_with("call_") && c.id.len() == 29, "{}", c.id);
                assert!(
                    c.id[5..].chars().all(|ch| ch.is_ascii_alphanumeric()),
                    "{}",
                    c.id
                );
            }
        }
    }
}

/// What the template renders between the content and the calls.
fn sample(family: Family, content: &str, calls: &[ToolCall]) -> String {
    let formatted = family.parser().format(calls);
    match (family, content.is_empty() || calls.is_empty()) {
        (Family::Hermes, false) => format!("{content}\n{formatted}"),
        _ => format!("{content}{formatted}"),
    }
}

#[test]
fn every_family_gets_back_what_it_formatted() {
    for family in Family::ALL {
        for calls in call_lists() {
            for content in [
                "",
                "Let me check that for you.",
                "Two lines:\n\n- \"é\" \\ 🦀",
            ] {
                let text = sample(family, content, &calls);
                let parsed = parse(&text, Some(family), false);
                assert_eq!(parsed.error, None, "{family:?} {text}");
                assert_eq!(parsed.content, content, "{family:?} {text}");
                assert_eq!(parsed.reasoning, None);
                assert_same_calls(&parsed, &calls, family);

                // After reasoning, as a thinking model writes it.
                let text = format!("<think>\nFirst I think.\n</think>\n\n{text}");
                let parsed = parse(&text, Some(family), false);
                assert_eq!(parsed.error, None, "{family:?} {text}");
                assert_eq!(parsed.reasoning.as_deref(), Some("First I think."));
                assert_eq!(parsed.content, content, "{family:?} {text}");
                assert_same_calls(&parsed, &calls, family);
            }
        }
    }
}

#[test]
fn the_format_is_the_templates() {
    let calls = [
        call("functions.a:0", "a", json!({"x": 1})),
        call("functions.b:1", "b", json!({})),
    ];
    assert_eq!(
        Family::Hermes.parser().format(&calls),
        "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\":1}}\n</tool_call>\n\
         <tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>"
    );
    assert_eq!(
        Family::KimiK2.parser().format(&calls),
        "<|tool_calls_section_begin|>\
         <|tool_call_begin|>functions.a:0<|tool_call_argument_begin|>{\"x\":1}<|tool_call_end|>\
         <|tool_call_begin|>functions.b:1<|tool_call_argument_begin|>{}<|tool_call_end|>\
         <|tool_calls_section_end|>"
    );
    for family in Family::ALL {
        assert_eq!(family.parser().format(&[]), "");
        assert_eq!(family.parser().family(), family);
    }
    // An id from another model (an OpenAI client's history) gets Kimi's form.
    let foreign = [call("call_abc", "read", json!({"p": 1}))];
    assert!(
        Family::KimiK2
            .parser()
            .format(&foreign)
            .contains("<|tool_call_begin|>functions.read:0<|tool_call_argument_begin|>")
    );
}

#[test]
fn ids_are_unique_and_reproducible_from_a_seed() {
    let text = sample(
        Family::Hermes,
        "",
        &[call("", "ls", json!({})), call("", "ls", json!({}))],
    );
    let first = parse_with_ids(&text, Some(Family::Hermes), false, &mut CallIds::seeded(7));
    let again = parse_with_ids(&text, Some(Family::Hermes), false, &mut CallIds::seeded(7));
    assert_eq!(first, again);
    assert_ne!(first.tool_calls[0].id, first.tool_calls[1].id);
    // The same text sampled twice in one conversation: different ids, since
    // clients match results to calls by id.
    let one = parse(&text, Some(Family::Hermes), false);
    let two = parse(&text, Some(Family::Hermes), false);
    assert_ne!(one.tool_calls[0].id, two.tool_calls[0].id);
}

// --- Hermes ---

#[test]
fn hermes_reads_what_qwen_templates_and_models_write() {
    // Qwen's `tojson` spacing, key order that is not alphabetical: compacted, order kept.
    let text = "Checking.\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"rust\", \"limit\": 5, \"filters\": {\"z\": [1, 2], \"a\": null}}}\n</tool_call>";
    let parsed = parse(text, Some(Family::Hermes), false);
    assert_eq!(parsed.error, None);
    assert_eq!(parsed.content, "Checking.");
    assert_eq!(parsed.tool_calls.len(), 1);
    assert_eq!(parsed.tool_calls[0].name, "search");
    assert_eq!(
        parsed.tool_calls[0].arguments,
        r#"{"query":"rust","limit":5,"filters":{"z":[1,2],"a":null}}"#
    );

    // Qwen2.5 renders OpenAI's string arguments with `tojson`: a JSON string.
    // Hermes 2 Pro puts "arguments" first; some models say "parameters";
    // a tool without parameters may get no arguments at all.
    let text = "<tool_call>\n{\"name\": \"a\", \"arguments\": \"{\\\"x\\\": 1}\"}\n</tool_call>\n\
                <tool_call>{\"arguments\": {\"y\": 2}, \"name\": \"b\"}</tool_call>\
                <tool_call>\n{\"name\": \"c\", \"parameters\": {\"z\": 3}}\n</tool_call>\n\
                <tool_call>\n{\"name\": \"d\"}\n</tool_call>";
    let parsed = parse(text, Some(Family::Hermes), false);
    assert_eq!(parsed.error, None);
    assert_eq!(parsed.content, "");
    let got: Vec<(&str, &str)> = parsed
        .tool_calls
        .iter()
        .map(|c| (c.name.as_str(), c.arguments.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("a", r#"{"x":1}"#),
            ("b", r#"{"y":2}"#),
            ("c", r#"{"z":3}"#),
            ("d", "{}")
        ]
    );

    // Text between and after the calls is content.
    let text = "Before.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\nBetween.\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>\nAfter.";
    let parsed = parse(text, Some(Family::Hermes), false);
    assert_eq!(parsed.error, None);
    assert_eq!(parsed.content, "Before.\n\nBetween.\n\nAfter.");
    assert_eq!(parsed.tool_calls.len(), 2);
}

/// A malformed block: no calls, all of the text kept, the error naming it.
fn assert_hermes_rejects(text: &str, why: &str) {
    let parsed = parse(text, Some(Family::Hermes), false);
    assert!(parsed.tool_calls.is_empty(), "{text}: {parsed:?}");
    assert_eq!(parsed.content, text.trim(), "{text}");
    let error = parsed
        .error
        .unwrap_or_else(|| panic!("no error for {text}"));
    assert!(error.starts_with("tool call 1: "), "{error}");
    assert!(error.contains(why), "{text}: {error} lacks {why:?}");
}

#[test]
fn hermes_keeps_a_malformed_call_as_text_and_says_why() {
    assert_hermes_rejects(
        "Sure.\n<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": }}\n</tool_call>",
        "invalid JSON",
    );
    assert_hermes_rejects(
        "<tool_call>\n{\"arguments\": {\"path\": \"a\"}}\n</tool_call>",
        "no \"name\"",
    );
    assert_hermes_rejects(
        "<tool_call>\n{\"name\": 3, \"arguments\": {}}\n</tool_call>",
        "\"name\" is a number",
    );
    assert_hermes_rejects(
        "<tool_call>\n{\"name\": \"a\", \"arguments\": [1]}\n</tool_call>",
        "arguments are an array",
    );
    assert_hermes_rejects(
        "<tool_call>\n[{\"name\": \"a\", \"arguments\": {}}]\n</tool_call>",
        "an array, not a JSON object",
    );
    // One brace too many: a common slip.
    assert_hermes_rejects(
        "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}}\n</tool_call>",
        "text after the JSON object",
    );
    // Cut off by max_tokens, mid-JSON and just before the closing tag.
    assert_hermes_rejects(
        "Reading.\n<tool_call>\n{\"name\": \"read\", \"argu",
        "cut off",
    );
    assert_hermes_rejects(
        "<tool_call>\n{\"name\": \"read\", \"arguments\": {}}\n",
        "cut off",
    );
}

#[test]
fn hermes_returns_the_good_calls_beside_bad_ones() {
    let bad = "<tool_call>\n{\"name\": \"broken\", \"arguments\": {\"a\": 1,}}\n</tool_call>";
    let cut = "<tool_call>\n{\"name\": \"cut\", \"arguments\": {\"a\":";
    let text = format!(
        "I'll run three.\n\
         <tool_call>\n{{\"name\": \"first\", \"arguments\": {{\"n\": 1}}}}\n</tool_call>\n\
         {bad}\n\
         <tool_call>\n{{\"name\": \"third\", \"arguments\": {{\"n\": 3}}}}\n</tool_call>\n\
         {cut}"
    );
    let parsed = parse(&text, Some(Family::Hermes), false);
    let names: Vec<&str> = parsed.tool_calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["first", "third"]);
    assert_eq!(parsed.content, format!("I'll run three.\n\n{bad}\n\n{cut}"));
    let error = parsed.error.unwrap();
    assert!(error.contains("tool call 2: invalid JSON"), "{error}");
    assert!(
        error.contains("tool call 4: no </tool_call> (cut off?)"),
        "{error}"
    );

    // A block that never closes before the next one opens: only it is lost.
    let text = "<tool_call>\n{\"name\": \"a\", \n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>";
    let parsed = parse(text, Some(Family::Hermes), false);
    assert_eq!(parsed.tool_calls.len(), 1);
    assert_eq!(parsed.tool_calls[0].name, "b");
    assert_eq!(parsed.content, "<tool_call>\n{\"name\": \"a\",");
    assert!(parsed.error.unwrap().contains("tool call 1"));
}

// --- Kimi K2 ---

#[test]
fn kimi_reads_what_kimi_writes() {
    // vLLM accepts newlines around the markers, the singular section
    // markers and a name without `functions.`; so do we.
    let text = "Let me look.<|tool_calls_section_begin|>\n\
                <|tool_call_begin|> functions.get_weather:0 <|tool_call_argument_begin|> {\"city\": \"東京\"} <|tool_call_end|>\n\
                <|tool_call_begin|>search:1<|tool_call_argument_begin|>{\"q\": \"a\"}<|tool_call_end|>\n\
                <|tool_call_begin|>functions.ping:2<|tool_call_argument_begin|><|tool_call_end|>\n\
                <|tool_calls_section_end|>";
    let parsed = parse(text, Some(Family::KimiK2), false);
    assert_eq!(parsed.error, None);
    assert_eq!(parsed.content, "Let me look.");
    let got: Vec<(&str, &str, &str)> = parsed
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (
                "functions.get_weather:0",
                "get_weather",
                r#"{"city":"東京"}"#
            ),
            ("search:1", "search", r#"{"q":"a"}"#),
            ("functions.ping:2", "ping", "{}"),
        ]
    );

    let singular = "<|tool_call_section_begin|><|tool_call_begin|>functions.a:3<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_call_section_end|>";
    let parsed = parse(singular, Some(Family::KimiK2), false);
    assert_eq!(parsed.error, None);
    assert_eq!(parsed.tool_calls[0].id, "functions.a:3");

    // The same id twice in one answer: the second gets a new one. No index:
    // a new one too, the name kept.
    let text = "<|tool_calls_section_begin|>\
                <|tool_call_begin|>functions.a:0<|tool_call_argument_begin|>{}<|tool_call_end|>\
                <|tool_call_begin|>functions.a:0<|tool_call_argument_begin|>{}<|tool_call_end|>\
                <|tool_call_begin|>functions.b<|tool_call_argument_begin|>{}<|tool_call_end|>\
                <|tool_calls_section_end|>";
    let parsed = parse(text, Some(Family::KimiK2), false);
    assert_eq!(parsed.error, None);
    let ids: Vec<&str> = parsed.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids[0], "functions.a:0");
    assert!(ids[1].starts_with("call_") && ids[2].starts_with("call_") && ids[1] != ids[2]);
    assert_eq!(parsed.tool_calls[2].name, "b");

    // Tool-call syntax of another family is just text.
    let hermes = "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>";
    let parsed = parse(hermes, Some(Family::KimiK2), false);
    assert_eq!(
        (
            parsed.content.as_str(),
            parsed.tool_calls.len(),
            parsed.error
        ),
        (hermes, 0, None)
    );
}

/// A malformed call: no calls, all of its text kept, the error naming it.
fn assert_kimi_rejects(text: &str, kept: &str, why: &str) {
    let parsed = parse(text, Some(Family::KimiK2), false);
    assert!(parsed.tool_calls.is_empty(), "{text}: {parsed:?}");
    assert_eq!(parsed.content, kept, "{text}");
    let error = parsed
        .error
        .unwrap_or_else(|| panic!("no error for {text}"));
    assert!(error.contains(why), "{text}: {error} lacks {why:?}");
}

#[test]
fn kimi_keeps_a_malformed_call_as_text_and_says_why() {
    let begin = "<|tool_calls_section_begin|>";
    let end = "<|tool_calls_section_end|>";
    let bad_json = "<|tool_call_begin|>functions.read:0<|tool_call_argument_begin|>{\"path\": }<|tool_call_end|>";
    assert_kimi_rejects(
        &format!("Reading.{begin}{bad_json}{end}"),
        &format!("Reading.{bad_json}"),
        "tool call 1: invalid JSON",
    );
    let no_arguments_marker =
        "<|tool_call_begin|>functions.read:0{\"path\": \"a\"}<|tool_call_end|>";
    assert_kimi_rejects(
        &format!("{begin}{no_arguments_marker}{end}"),
        no_arguments_marker,
        "no <|tool_call_argument_begin|>",
    );
    let no_name = "<|tool_call_begin|>functions.:0<|tool_call_argument_begin|>{}<|tool_call_end|>";
    assert_kimi_rejects(
        &format!("{begin}{no_name}{end}"),
        no_name,
        "no function name",
    );
    let not_object =
        "<|tool_call_begin|>functions.a:0<|tool_call_argument_begin|>[1, 2]<|tool_call_end|>";
    assert_kimi_rejects(
        &format!("{begin}{not_object}{end}"),
        not_object,
        "arguments are an array",
    );
    // Cut off by max_tokens inside the call.
    let cut = "<|tool_call_begin|>functions.read:0<|tool_call_argument_begin|>{\"path\": \"/et";
    assert_kimi_rejects(
        &format!("Reading.{begin}{cut}"),
        &format!("Reading.{cut}"),
        "cut off",
    );
    let cut = "<|tool_call_begin|>functions.rea";
    assert_kimi_rejects(&format!("{begin}{cut}"), cut, "cut off");
    // Text inside the section but in no call.
    assert_kimi_rejects(&format!("{begin}oops{end}"), "oops", "outside any call");
}

#[test]
fn kimi_returns_the_good_calls_beside_bad_ones() {
    let bad =
        "<|tool_call_begin|>functions.b:1<|tool_call_argument_begin|>{\"n\": 2,}<|tool_call_end|>";
    let cut = "<|tool_call_begin|>functions.d:3<|tool_call_argument_begin|>{\"n\":";
    let text = format!(
        "Four calls.<|tool_calls_section_begin|>\
         <|tool_call_begin|>functions.a:0<|tool_call_argument_begin|>{{\"n\": 1}}<|tool_call_end|>\
         {bad}\
         <|tool_call_begin|>functions.c:2<|tool_call_argument_begin|>{{\"n\": 3}}<|tool_call_end|>\
         {cut}"
    );
    let parsed = parse(&text, Some(Family::KimiK2), false);
    let ids: Vec<&str> = parsed.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["functions.a:0", "functions.c:2"]);
    assert_eq!(parsed.content, format!("Four calls.{bad}{cut}"));
    let error = parsed.error.unwrap();
    assert!(error.contains("tool call 2: invalid JSON"), "{error}");
    assert!(
        error.contains("tool call 4: no <|tool_call_end|> (cut off?)"),
        "{error}"
    );

    // Cut off after a complete call, before the section's end: nothing is
    // lost, so the call stands.
    let text = "<|tool_calls_section_begin|><|tool_call_begin|>functions.a:0<|tool_call_argument_begin|>{}<|tool_call_end|>";
    let parsed = parse(text, Some(Family::KimiK2), false);
    assert_eq!(
        (
            parsed.tool_calls.len(),
            parsed.content.as_str(),
            parsed.error
        ),
        (1, "", None)
    );
}

#[test]
fn no_family_parses_no_tool_calls() {
    let text = "<think>\nhm\n</think>\n\nText <tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>";
    let parsed = parse(text, None, false);
    assert_eq!(parsed.reasoning.as_deref(), Some("hm"));
    assert_eq!(
        parsed.content,
        "Text <tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>"
    );
    assert!(parsed.tool_calls.is_empty());
    assert_eq!(parsed.error, None);
}
