//! The renderer without Python: loading a model's files (and the errors
//! that say what to fix), its id, stop tokens, encode/decode, and the
//! template environment's extras (special-token variables, raise_exception,
//! strftime_now).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod render_support;

use std::path::Path;

use metaclaw_chat::render::{ModelFiles, RenderError, RenderOptions, Renderer};
use serde_json::json;
use sha2::{Digest, Sha256};

use render_support::{fixture_dir, fixture_renderer};

/// A copy of the fixture in a temporary folder, to change.
fn fixture_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for file in [
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
        "chat_template.jinja",
    ] {
        std::fs::copy(fixture_dir().join(file), dir.path().join(file)).unwrap();
    }
    dir
}

fn with_template(template: &str) -> Result<Renderer, RenderError> {
    let mut files = ModelFiles::from_dir(&fixture_dir()).unwrap();
    files.chat_template = template.to_string();
    Renderer::new(&files)
}

fn render_text(renderer: &Renderer) -> Result<String, RenderError> {
    let messages = [json!({"role": "user", "content": "hi"})];
    renderer
        .render(&messages, None, &RenderOptions::default())
        .map(|r| r.text)
}

#[test]
fn the_fixture_stops_on_im_end() {
    let renderer = fixture_renderer();
    let im_end = renderer.token_id("<|im_end|>").unwrap();
    assert_eq!(renderer.stop_token_ids(), [im_end]);
    assert!(renderer.supports_thinking());
}

#[test]
fn stop_tokens_come_from_generation_config_then_the_tokenizer() {
    let mut files = ModelFiles::from_dir(&fixture_dir()).unwrap();
    let renderer = fixture_renderer();
    let (im_end, eot) = (
        renderer.token_id("<|im_end|>").unwrap(),
        renderer.token_id("<|endoftext|>").unwrap(),
    );
    files.generation_config = Some(json!({"eos_token_id": [eot, im_end, eot]}));
    assert_eq!(
        Renderer::new(&files).unwrap().stop_token_ids(),
        [eot, im_end]
    );
    // No generation config, eos_token as an AddedToken object.
    files.generation_config = None;
    files.tokenizer_config["eos_token"] = json!({"content": "<|endoftext|>", "special": true});
    assert_eq!(Renderer::new(&files).unwrap().stop_token_ids(), [eot]);
}

#[test]
fn the_id_hashes_template_and_tokenizer() {
    let files = ModelFiles::from_dir(&fixture_dir()).unwrap();
    let renderer = Renderer::new(&files).unwrap();
    let mut hasher = Sha256::new();
    hasher.update(files.chat_template.as_bytes());
    hasher.update([0u8]);
    hasher.update(&files.tokenizer_json);
    let hex: String = hasher
        .finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(renderer.id(), format!("sha256:{hex}"));
    assert_eq!(
        fixture_renderer().id(),
        renderer.id(),
        "stable across loads"
    );
    assert_eq!(renderer.template(), files.chat_template);

    let changed = with_template(&format!("{} ", files.chat_template)).unwrap();
    assert_ne!(
        changed.id(),
        renderer.id(),
        "a changed template changes the id"
    );
}

#[test]
fn a_template_syntax_error_fails_at_load() {
    let err = with_template("{% for m in messages %}{{ m.content }}").unwrap_err();
    assert!(matches!(err, RenderError::TemplateSyntax { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("does not compile") && message.contains("tiny-qwen3"),
        "{message}"
    );
}

#[test]
fn raise_exception_fails_the_render_with_its_message() {
    let renderer = with_template("{% if messages[0].role != 'system' %}{{ raise_exception('Conversation must start with a system message') }}{% endif %}ok").unwrap();
    match render_text(&renderer) {
        Err(RenderError::Template(message)) => {
            assert_eq!(message, "Conversation must start with a system message")
        }
        other => panic!("expected the template's exception, got {other:?}"),
    }
    let messages = [json!({"role": "system", "content": "s"})];
    assert_eq!(
        renderer
            .render(&messages, None, &RenderOptions::default())
            .unwrap()
            .text,
        "ok"
    );
}

#[test]
fn other_template_errors_say_where() {
    let renderer = with_template("line one\n{{ messages[0].nope.deeper }}").unwrap();
    let err = render_text(&renderer).unwrap_err();
    assert!(matches!(err, RenderError::Template(_)), "{err:?}");
    assert!(
        err.to_string().contains("line 2") || err.to_string().contains(":2"),
        "{err}"
    );
}

#[test]
fn special_tokens_and_globals_reach_the_template() {
    let renderer = with_template("[{{ eos_token }}|{{ pad_token }}|{{ bos_token }}|{{ strftime_now('%Y') }}|{{ add_generation_prompt }}|{{ tools }}|{{ documents }}]").unwrap();
    let year = chrono_year();
    assert_eq!(
        render_text(&renderer).unwrap(),
        format!("[<|im_end|>|<|endoftext|>||{year}|True|None|None]")
    );
}

fn chrono_year() -> String {
    // Days since the epoch → civil year (Howard Hinnant's algorithm), to
    // check strftime_now without a date crate in the tests.
    let days = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
        / 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2)).to_string()
}

#[test]
fn enable_thinking_is_passed_only_when_set() {
    let renderer = with_template("{{ enable_thinking is defined }}:{{ enable_thinking }}").unwrap();
    assert!(renderer.supports_thinking());
    let messages = [json!({"role": "user", "content": "hi"})];
    let render = |enable_thinking| {
        let options = RenderOptions {
            add_generation_prompt: true,
            enable_thinking,
        };
        renderer.render(&messages, None, &options).unwrap().text
    };
    assert_eq!(render(None), "False:");
    assert_eq!(render(Some(false)), "True:False");
    assert!(!with_template("{{ messages }}").unwrap().supports_thinking());
}

#[test]
fn missing_files_name_the_file_and_the_folder() {
    let dir = fixture_copy();
    std::fs::remove_file(dir.path().join("tokenizer.json")).unwrap();
    let err = ModelFiles::from_dir(dir.path()).unwrap_err();
    assert!(
        matches!(
            err,
            RenderError::Missing {
                file: "tokenizer.json",
                ..
            }
        ),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains("tokenizer.json missing in")
            && message.contains(&dir.path().display().to_string())
            && message.contains("rl.tokenizer_path"),
        "{message}"
    );

    let err = ModelFiles::from_dir(&dir.path().join("nope")).unwrap_err();
    assert!(matches!(err, RenderError::NoModelDir { .. }), "{err:?}");
}

#[test]
fn bad_json_names_the_file() {
    let dir = fixture_copy();
    std::fs::write(dir.path().join("tokenizer_config.json"), "{not json").unwrap();
    let err = ModelFiles::from_dir(dir.path()).unwrap_err();
    assert!(matches!(err, RenderError::Json { .. }), "{err:?}");
    assert!(err.to_string().contains("tokenizer_config.json"), "{err}");
}

#[test]
fn a_broken_tokenizer_fails_at_load() {
    let mut files = ModelFiles::from_dir(&fixture_dir()).unwrap();
    files.tokenizer_json = b"{}".to_vec();
    let err = Renderer::new(&files).unwrap_err();
    assert!(matches!(err, RenderError::Tokenizer { .. }), "{err:?}");
}

#[test]
fn the_template_can_come_from_tokenizer_config() {
    let dir = fixture_copy();
    let jinja = std::fs::read_to_string(dir.path().join("chat_template.jinja")).unwrap();
    std::fs::remove_file(dir.path().join("chat_template.jinja")).unwrap();
    let config_path = dir.path().join("tokenizer_config.json");
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config_path).unwrap()).unwrap();
    let write = |config: &serde_json::Value| {
        std::fs::write(&config_path, serde_json::to_vec(config).unwrap()).unwrap()
    };

    config["chat_template"] = json!("from config");
    write(&config);
    assert_eq!(
        ModelFiles::from_dir(dir.path()).unwrap().chat_template,
        "from config"
    );

    config["chat_template"] =
        json!([{"name": "tool_use", "template": "tools"}, {"name": "default", "template": jinja}]);
    write(&config);
    assert_eq!(
        ModelFiles::from_dir(dir.path()).unwrap().chat_template,
        jinja
    );

    config["chat_template"] = json!([{"name": "tool_use", "template": "tools"}]);
    write(&config);
    assert!(matches!(
        ModelFiles::from_dir(dir.path()),
        Err(RenderError::BadFile { .. })
    ));

    config.as_object_mut().unwrap().remove("chat_template");
    write(&config);
    let err = ModelFiles::from_dir(dir.path()).unwrap_err();
    assert!(matches!(err, RenderError::NoTemplate { .. }), "{err:?}");
    assert!(err.to_string().contains("chat_template.jinja"), "{err}");
}

#[test]
fn the_jinja_file_wins_over_tokenizer_config() {
    let files = ModelFiles::from_dir(&fixture_dir()).unwrap();
    let jinja = std::fs::read_to_string(fixture_dir().join("chat_template.jinja")).unwrap();
    assert_eq!(files.chat_template, jinja);
    assert!(files.generation_config.is_some());
    assert_eq!(files.dir, Path::new(&fixture_dir()));
}

#[test]
fn decode_inverts_encode() {
    let renderer = fixture_renderer();
    for text in [
        "The quick brown fox jumps over the lazy dog.",
        "天空为什么是蓝色的？",
        "emoji 😀👍🏽 and a family 👨‍👩‍👧",
        "tabs\tnewlines\n\n  spaces  ",
        "<tool_call>\n{\"name\": \"read\"}\n</tool_call>",
    ] {
        let ids = renderer.encode(text).unwrap();
        assert_eq!(renderer.decode(&ids, false).unwrap(), text, "{text:?}");
    }
}

#[test]
fn special_and_added_tokens_are_recognised_in_text() {
    let renderer = fixture_renderer();
    let id = |t: &str| renderer.token_id(t).unwrap();
    let ids = renderer
        .encode(
            "<|im_start|>assistant\n<think>\nhm\n</think>\n\n<tool_call>x</tool_call><|im_end|>",
        )
        .unwrap();
    assert_eq!(ids[0], id("<|im_start|>"));
    for token in [
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "<|im_end|>",
    ] {
        assert!(ids.contains(&id(token)), "{token} is one token");
    }
    // skip_special_tokens drops <|im_start|>/<|im_end|>; Qwen3's added
    // tokens are not special and stay.
    let skipped = renderer.decode(&ids, true).unwrap();
    assert_eq!(
        skipped,
        "assistant\n<think>\nhm\n</think>\n\n<tool_call>x</tool_call>"
    );
    assert!(renderer.decode(&[-1], false).is_err());
    assert_eq!(renderer.token_id("not a token"), None);
}

#[test]
fn one_renderer_serves_many_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Renderer>();
    let renderer = fixture_renderer();
    let expected = render_text(&renderer).unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| s.spawn(|| render_text(&renderer).unwrap()))
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), expected);
        }
    });
}

#[test]
fn supports_thinking_sees_macros_and_defaults() {
    let r = with_template("{% macro f() %}{{ enable_thinking }}{% endmacro %}{{ f() }}").unwrap();
    assert!(r.supports_thinking());
    let r = with_template("{%- set enable_thinking = enable_thinking if enable_thinking is defined else true %}{{ enable_thinking }}").unwrap();
    assert!(r.supports_thinking());
    let r = with_template("{% for m in messages %}{% if m.x %}{{ enable_thinking is defined }}{% endif %}{% endfor %}").unwrap();
    assert!(r.supports_thinking());
}
