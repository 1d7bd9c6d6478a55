//! The renderer against transformers itself: the same cases rendered by
//! `tokenizer.apply_chat_template` (tests/tinker/render_golden.py, with the
//! Python of skyrl's venv) must give the same text and the same token ids.
//! The cases cover the template's branches (tools, tool calls and results,
//! reasoning, thinking off), the renderer's normalisation (content parts,
//! arguments as JSON strings), JSON spelling (`tojson` of non-ASCII, `<>&'`,
//! floats), and real OpenClaw requests. Also: the checked-in fixture is what
//! tests/tinker/make_tiny_qwen3.py generates, byte for byte. The same cases
//! against a real model's files: SmolLM2-135M-Instruct (ChatML, a
//! digit-splitting byte-level BPE) as `scripts/fetch-smollm2` converts it.
//!
//! Skipped, saying so, only where the venv's Python is not installed (and the
//! SmolLM2 test where `METACLAW_TEST_SMOLLM2_DIR` is unset: `scripts/test`
//! sets it).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod render_support;

use std::path::Path;
use std::process::Command;

use metaclaw_chat::render::{ModelFiles, RenderOptions, Renderer};
use serde_json::{Value, json};

use render_support::{fixture_dir, fixture_renderer, root, smollm2_dir, venv_python};

struct Case {
    name: String,
    messages: Vec<Value>,
    tools: Option<Vec<Value>>,
    add_generation_prompt: bool,
    enable_thinking: Option<bool>,
}

fn case(name: &str, messages: Value, tools: Option<Value>) -> Case {
    Case {
        name: name.into(),
        messages: messages.as_array().unwrap().clone(),
        tools: tools.map(|t| t.as_array().unwrap().clone()),
        add_generation_prompt: true,
        enable_thinking: None,
    }
}

fn read_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "read",
        "description": "Read a file's text. Paths like <dir>/a&b.txt work; it's 'quoted'.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "文件路径 😀"},
            "limit": {"type": "integer", "minimum": 0, "default": 2000},
            "ratio": {"type": "number", "default": 0.5, "maximum": 1e-05, "big": 1e16, "whole": 3.0},
            "flags": {"type": "array", "items": {"enum": [true, false, null]}}
        }, "required": ["path"]}
    }})
}

fn exec_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "exec",
        "description": "Run a shell command.\nTabs\there, a backslash \\ and \"quotes\", control \u{1b}[0m.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
    }})
}

fn cases() -> Vec<Case> {
    let sys = json!({"role": "system", "content": "You are a helpful assistant."});
    let tool_call = |id: &str, name: &str, args: Value| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}});
    let mut cases = vec![
        case(
            "system and user",
            json!([sys, {"role": "user", "content": "Hello, how are you today?"}]),
            None,
        ),
        case(
            "multi-turn",
            json!([
                sys,
                {"role": "user", "content": "What is 2 + 2?"},
                {"role": "assistant", "content": "4."},
                {"role": "user", "content": "And 3 * 3?"},
                {"role": "assistant", "content": "9."},
                {"role": "user", "content": "Thanks!"}
            ]),
            None,
        ),
        case(
            "user only, no system",
            json!([{"role": "user", "content": "hi"}]),
            None,
        ),
        case(
            "tools offered",
            json!([sys, {"role": "user", "content": "Read hello.txt"}]),
            Some(json!([read_tool(), exec_tool()])),
        ),
        case(
            "tools offered, no system message",
            json!([{"role": "user", "content": "Read hello.txt"}]),
            Some(json!([read_tool()])),
        ),
        case(
            "tool calls, results and a follow-up",
            json!([
                sys,
                {"role": "user", "content": "Read hello.txt and list the folder"},
                {"role": "assistant", "content": null, "tool_calls": [
                    tool_call("call_1", "read", json!("{\"path\":\"hello.txt\",\"limit\":10}")),
                    tool_call("call_2", "exec", json!("{\"command\": \"ls -la | grep '<x>' && echo \\\"é\\\"\"}"))
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "secret content XYZZY"},
                {"role": "tool", "tool_call_id": "call_2", "content": "a.txt\nb.txt"},
                {"role": "assistant", "content": "The file says XYZZY; the folder has a.txt and b.txt."},
                {"role": "user", "content": "Thanks. Read a.txt"},
                {"role": "assistant", "content": "Reading it.", "tool_calls": [
                    tool_call("call_3", "read", json!({"path": "a.txt"}))
                ]},
                {"role": "tool", "tool_call_id": "call_3", "content": "A"}
            ]),
            Some(json!([read_tool(), exec_tool()])),
        ),
        case(
            "odd tool-call arguments: empty, invalid JSON, not an object",
            json!([
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": "", "tool_calls": [
                    tool_call("a", "exec", json!("")),
                    tool_call("b", "exec", json!("{not json")),
                    tool_call("c", "exec", json!("[1, 2]")),
                    tool_call("d", "exec", Value::Null)
                ]},
                {"role": "tool", "tool_call_id": "a", "content": "ok"}
            ]),
            Some(json!([exec_tool()])),
        ),
        case(
            "vLLM's spellings: reasoning, empty tool_calls, no content, tool result as parts",
            json!([
                {"role": "user", "content": [{"type": "input_text", "text": "look"}, "and see"]},
                {"role": "assistant", "reasoning": "Nothing to call.", "content": "Seen.", "tool_calls": []},
                {"role": "user", "content": "now call"},
                {"role": "assistant", "reasoning": "Call exec.", "tool_calls": [
                    tool_call("x", "exec", json!({"command": "ls"}))
                ]},
                {"role": "tool", "tool_call_id": "x", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"role": "assistant", "content": [{"type": "refusal", "refusal": "I won't."}], "tool_calls": null}
            ]),
            Some(json!([exec_tool()])),
        ),
        case(
            "reasoning in history and after the last query",
            json!([
                sys,
                {"role": "user", "content": "Which is bigger, 9.11 or 9.9?"},
                {"role": "assistant", "reasoning_content": "Compare decimals: 0.9 > 0.11.", "content": "9.9 is bigger."},
                {"role": "user", "content": "Read hello.txt"},
                {"role": "assistant", "reasoning_content": "\nI should call read.\n", "content": "", "tool_calls": [
                    tool_call("call_9", "read", json!("{\"path\": \"hello.txt\"}"))
                ]},
                {"role": "tool", "tool_call_id": "call_9", "content": "hi there"}
            ]),
            Some(json!([read_tool()])),
        ),
        case(
            "think block inside assistant content",
            json!([
                {"role": "user", "content": "q1"},
                {"role": "assistant", "content": "<think>\nold thoughts\n</think>\n\nold answer"},
                {"role": "user", "content": "q2"},
                {"role": "assistant", "content": "<think>\nnew thoughts\n</think>\n\nnew answer"}
            ]),
            None,
        ),
        case(
            "content as parts",
            json!([
                {"role": "system", "content": [{"type": "text", "text": "You are terse."}, {"type": "text", "text": "Answer in one line."}]},
                {"role": "user", "content": [
                    {"type": "text", "text": "What is in this picture?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}
                ]}
            ]),
            None,
        ),
        case(
            "non-ASCII text",
            json!([
                {"role": "system", "content": "你是一个乐于助人的助手。Emoji: 😀👍🏽 — “quotes” ‘single’ <b>&amp;</b> it's"},
                {"role": "user", "content": "用中文回答：天空为什么是蓝色的？🌈 Ünïcödé, tab\there, \\backslash\\, zero-width\u{200b}joiner"}
            ]),
            Some(json!([read_tool()])),
        ),
    ];
    let mut off = case(
        "enable_thinking false",
        json!([sys, {"role": "user", "content": "Quick: capital of France?"}]),
        None,
    );
    off.enable_thinking = Some(false);
    let mut on = case(
        "enable_thinking true",
        json!([sys, {"role": "user", "content": "Think about it."}]),
        None,
    );
    on.enable_thinking = Some(true);
    let mut no_prompt = case(
        "no generation prompt",
        json!([sys, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]),
        None,
    );
    no_prompt.add_generation_prompt = false;
    let mut no_prompt_thinking_off = case(
        "no generation prompt, thinking off",
        json!([{"role": "user", "content": "hi"}]),
        Some(json!([])),
    );
    no_prompt_thinking_off.add_generation_prompt = false;
    no_prompt_thinking_off.enable_thinking = Some(false);
    cases.extend([off, on, no_prompt, no_prompt_thinking_off]);
    cases.extend(openclaw_cases());
    cases
}

/// Real requests OpenClaw sent (tests/fixtures/openclaw): their messages
/// and tools as they came, ~26–49 KB system prompts included.
fn openclaw_cases() -> Vec<Case> {
    [
        "chat_completions_stream_request.json",
        "openai_completions_exec_with_prompt_cache_key.json",
        "tool_loop_call1.json",
        "tool_loop_call2_with_tool_result.json",
    ]
    .into_iter()
    .map(|file| {
        let path = root().join("tests/fixtures/openclaw").join(file);
        let request: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let body = &request["body"];
        Case {
            name: format!("openclaw {file}"),
            messages: body["messages"].as_array().unwrap().clone(),
            tools: body.get("tools").and_then(Value::as_array).cloned(),
            add_generation_prompt: true,
            enable_thinking: None,
        }
    })
    .collect()
}

/// transformers' answers, one per case: `{text, tokens}` or `{error}`.
fn transformers(python: &Path, model_dir: &Path, cases: &[Case]) -> Vec<Value> {
    let input: Vec<Value> = cases
        .iter()
        .map(|c| {
            json!({
                "messages": c.messages,
                "tools": c.tools,
                "add_generation_prompt": c.add_generation_prompt,
                "enable_thinking": c.enable_thinking,
            })
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let cases_file = dir.path().join("cases.json");
    std::fs::write(&cases_file, serde_json::to_vec(&input).unwrap()).unwrap();
    let out = Command::new(python)
        .arg(root().join("tests/tinker/render_golden.py"))
        .arg(model_dir)
        .arg(&cases_file)
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1")
        .env("TRANSFORMERS_VERBOSITY", "error")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "render_golden.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(answers.len(), cases.len(), "one answer per case");
    answers
}

/// Where two texts first differ, with some context, for a readable failure.
fn first_difference(ours: &str, theirs: &str) -> String {
    let at = ours
        .char_indices()
        .zip(theirs.chars())
        .find(|((_, a), b)| a != b)
        .map(|((i, _), _)| i)
        .unwrap_or(ours.len().min(theirs.len()));
    let window = |s: &str| {
        let start = s.floor_char_boundary(at.saturating_sub(60));
        let end = s.ceil_char_boundary((at + 60).min(s.len()));
        format!("{:?}", &s[start..end])
    };
    format!(
        "texts differ at byte {at} (lengths {} and {}):\n  ours:         {}\n  transformers: {}",
        ours.len(),
        theirs.len(),
        window(ours),
        window(theirs)
    )
}

/// Each case rendered by `renderer` and by transformers (`answers`); the
/// failures, one line each.
fn compare(renderer: &Renderer, cases: &[Case], answers: &[Value]) -> Vec<String> {
    let mut failures = Vec::new();
    for (case, answer) in cases.iter().zip(answers) {
        let options = RenderOptions {
            add_generation_prompt: case.add_generation_prompt,
            enable_thinking: case.enable_thinking,
        };
        let ours = renderer.render(&case.messages, case.tools.as_deref(), &options);
        let failure = match (ours, answer.get("error")) {
            (Err(_), Some(_)) => None,
            (Ok(_), Some(error)) => Some(format!("transformers failed ({error}), we rendered")),
            (Err(e), None) => Some(format!("transformers rendered, we failed: {e}")),
            (Ok(ours), None) => {
                let text = answer["text"].as_str().unwrap();
                let tokens: Vec<i32> = serde_json::from_value(answer["tokens"].clone()).unwrap();
                if ours.text != text {
                    Some(first_difference(&ours.text, text))
                } else if ours.tokens != tokens {
                    Some("same text, different token ids".into())
                } else {
                    None
                }
            }
        };
        if let Some(failure) = failure {
            failures.push(format!("{}: {failure}", case.name));
        }
    }
    failures
}

#[test]
fn renders_as_transformers_does() {
    let Some(python) = venv_python("render_golden") else {
        return;
    };
    let cases = cases();
    let answers = transformers(&python, &fixture_dir(), &cases);
    let failures = compare(&fixture_renderer(), &cases, &answers);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    eprintln!(
        "{} cases rendered as transformers renders them",
        cases.len()
    );
}

/// SmolLM2's tokenizer and template (the real model of the RL proof), here
/// and in transformers: same text and token ids for every case, and
/// `<|im_end|>` (the id generation_config names) ends a completion.
#[test]
fn renders_smollm2_as_transformers_does() {
    let Some(dir) = smollm2_dir("renders_smollm2_as_transformers_does") else {
        return;
    };
    let Some(python) = venv_python("renders_smollm2_as_transformers_does") else {
        return;
    };
    let files = ModelFiles::from_dir(&dir).unwrap_or_else(|e| {
        panic!(
            "METACLAW_TEST_SMOLLM2_DIR={}: {e} (rerun scripts/fetch-smollm2)",
            dir.display()
        )
    });
    let renderer = Renderer::new(&files).unwrap();
    let im_end = renderer.token_id("<|im_end|>").unwrap();
    assert_eq!(renderer.stop_token_ids(), [im_end]);
    let cases = cases();
    let answers = transformers(&python, &dir, &cases);
    let failures = compare(&renderer, &cases, &answers);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let rendered = answers.iter().filter(|a| a.get("error").is_none()).count();
    assert_eq!(
        rendered,
        cases.len(),
        "SmolLM2's template renders every case"
    );
    eprintln!("{rendered} cases rendered with SmolLM2's files as transformers renders them");
}

/// Other models' templates, to check one before training it:
/// `METACLAW_RENDER_TEMPLATES=DIR` (a folder of `*.jinja`) renders the
/// cases with each template and the fixture's tokenizer, here and in
/// transformers. Does nothing without the variable.
#[test]
fn renders_other_templates_as_transformers_does() {
    let Some(dir) = std::env::var_os("METACLAW_RENDER_TEMPLATES") else {
        return;
    };
    let Some(python) = venv_python("renders_other_templates_as_transformers_does") else {
        return;
    };
    let cases = cases();
    let mut templates: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jinja"))
        .collect();
    templates.sort();
    let mut failures = Vec::new();
    for template in templates {
        let model = tempfile::tempdir().unwrap();
        for file in [
            "tokenizer.json",
            "tokenizer_config.json",
            "generation_config.json",
        ] {
            std::fs::copy(fixture_dir().join(file), model.path().join(file)).unwrap();
        }
        std::fs::copy(&template, model.path().join("chat_template.jinja")).unwrap();
        let name = template.file_name().unwrap().to_string_lossy().into_owned();
        let renderer = match Renderer::new(&ModelFiles::from_dir(model.path()).unwrap()) {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        let answers = transformers(&python, model.path(), &cases);
        let rendered = answers.iter().filter(|a| a.get("error").is_none()).count();
        let these = compare(&renderer, &cases, &answers);
        eprintln!(
            "{name}: {} of {} cases differ ({rendered} rendered by transformers)",
            these.len(),
            cases.len()
        );
        failures.extend(these.into_iter().map(|f| format!("{name}: {f}")));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_conversation_the_template_cannot_render_fails_in_both() {
    let Some(python) = venv_python("render_golden") else {
        return;
    };
    // Qwen3's template reads messages[0].role: an empty conversation is an
    // error in Jinja2 (attribute of undefined), and must be one here.
    let cases = vec![case("no messages", json!([]), Some(json!([exec_tool()])))];
    let answers = transformers(&python, &fixture_dir(), &cases);
    assert!(
        answers[0].get("error").is_some(),
        "transformers: {}",
        answers[0]
    );
    let err = fixture_renderer()
        .render(&[], Some(&[exec_tool()]), &RenderOptions::default())
        .unwrap_err();
    eprintln!("transformers: {}\nours: {err}", answers[0]["error"]);
}

#[test]
fn the_fixture_is_what_make_tiny_qwen3_generates() {
    let Some(python) = venv_python("the_fixture_is_what_make_tiny_qwen3_generates") else {
        return;
    };
    let out = tempfile::tempdir().unwrap();
    let status = Command::new(python)
        .arg(root().join("tests/tinker/make_tiny_qwen3.py"))
        .arg(out.path())
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "make_tiny_qwen3.py failed");
    for file in [
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
        "chat_template.jinja",
    ] {
        let generated = std::fs::read(out.path().join(file)).unwrap();
        let checked_in = std::fs::read(fixture_dir().join(file)).unwrap();
        assert!(
            generated == checked_in,
            "tests/fixtures/tiny-qwen3/{file} is not what tests/tinker/make_tiny_qwen3.py generates: \
             regenerate it (python tests/tinker/make_tiny_qwen3.py DIR) and copy {file} from DIR"
        );
    }
}
