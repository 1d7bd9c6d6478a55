//! Fuzz entry points: one function per input parser that the proxy or the
//! CLI runs on bytes it does not control. The cargo-fuzz targets in
//! `fuzz/fuzz_targets/` call these, and `tests/fuzz_regressions.rs` (in
//! `cargo test --workspace`) replays the seed corpora and every crash found
//! so far through them, so one piece of code serves both. A crate of its
//! own, beside the targets: none of it ships in `metaclaw`.
//!
//! Each function must return on any input without panicking, hanging or
//! allocating without bound; where it is cheap it also checks a property
//! (a spliced request still parses, SSE events do not depend on where the
//! stream was cut, a valid config survives a YAML round trip…).
//!
//! | function | what it feeds |
//! |---|---|
//! | [`chat_request`] | `/v1/chat/completions` bodies: hot-path parse, session hints, query, skill splice, Anthropic translation |
//! | [`anthropic_request`] | `/v1/messages` bodies: translation to chat, then [`chat_request`]'s path; whole answers and error bodies |
//! | [`responses_request`] | `/v1/responses` bodies: the same for the Responses API |
//! | [`sse`] | upstream event streams, cut into chunks chosen by the first byte: parser, assemblers, stream transcoders |
//! | [`skill_md`] | `SKILL.md` files: frontmatter parsing, render → parse round trips, and the skills block sealed around them |
//! | [`config`] | `config.yaml` text: YAML, schema, validation, and a round trip of what validates |

// A fuzz harness reports a failure by panicking: libFuzzer turns the panic
// into a crash file, and the regression test into a failed test.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use bytes::Bytes;
use metaclaw_core::sessions::TurnType;
use metaclaw_core::skills::inject::{self, Injected};
use metaclaw_core::skills::{Query, skill};
use metaclaw_wire as wire;
use metaclaw_wire::agent::openclaw;
use metaclaw_wire::request::ChatRequest;
use metaclaw_wire::stream::sse::{SseEvent, SseParser, parse_all};
use metaclaw_wire::stream::{Chain, Transcode, encode};
use serde_json::{Value, json};

/// A fuzz entry point.
pub type Target = fn(&[u8]);

/// The targets, by the name of their folder under `fuzz/corpus/` and
/// `fuzz/regressions/`.
pub const TARGETS: &[(&str, Target)] = &[
    ("chat_request", chat_request),
    ("anthropic_request", anthropic_request),
    ("responses_request", responses_request),
    ("sse", sse),
    ("skill_md", skill_md),
    ("config", config),
];

// ---------------------------------------------------------------------------
// Requests.

/// A chat-completions request body, through what `proxy::turn` does with it
/// before it goes upstream.
pub fn chat_request(data: &[u8]) {
    chat_pipeline(data);
}

/// An Anthropic Messages body: `turn` parses it to a tree, translates it,
/// serialises the chat request and goes on as for a chat request.
pub fn anthropic_request(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    if let Ok(chat) = wire::request::anthropic::to_chat(&value) {
        translated(&chat);
    }
    // Pass-through to an Anthropic upstream: skills as one more system block.
    let mut passthrough = value.clone();
    wire::request::anthropic::splice_system(&mut passthrough, "BLOCK");
    if let Some(obj) = passthrough.as_object() {
        match &obj["system"] {
            Value::String(s) => assert!(s.ends_with("BLOCK")),
            Value::Array(blocks) => assert_eq!(blocks.last().unwrap()["text"], "BLOCK"),
            other => panic!("splice_system left `system` as {other}"),
        }
    }
    whole_answers(&value, data);
}

/// An OpenAI Responses body, as [`anthropic_request`].
pub fn responses_request(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    if let Ok(chat) = wire::request::responses::to_chat(&value) {
        translated(&chat);
    }
    whole_answers(&value, data);
}

/// A request translated to chat goes on as a chat request. The translators
/// copy the client's top-level fields as they are, so the hot-path parse may
/// still refuse one of the wrong type (a 400, as for a chat client); any other
/// refusal means the translation made a bad chat request.
fn translated(chat: &Value) {
    let bytes = serde_json::to_vec(chat).unwrap();
    if chat_pipeline(&bytes).is_some() {
        return;
    }
    let wrong =
        |key: &str, ok: fn(&Value) -> bool| chat.get(key).is_some_and(|v| !v.is_null() && !ok(v));
    let string = |v: &Value| v.is_string();
    let count = |v: &Value| v.is_u64();
    let copied_wrong = wrong("model", string)
        || wrong("prompt_cache_key", string)
        || wrong("session_id", string)
        || wrong("turn_type", string)
        || wrong("stream", Value::is_boolean)
        || wrong("max_tokens", count)
        || wrong("max_completion_tokens", count);
    assert!(
        copied_wrong,
        "a translated request is not a valid chat request: {chat}"
    );
}

/// What `turn` does with a chat-completions body (the client's, or one
/// translated from another dialect); `None` where the proxy answers 400.
fn chat_pipeline(body: &[u8]) -> Option<ChatRequest> {
    let bytes = Bytes::copy_from_slice(body);
    let parsed = ChatRequest::parse(bytes.clone(), false);
    let with_header = ChatRequest::parse(bytes, true);
    let request = match (parsed, with_header) {
        (Ok(r), Ok(h)) => {
            assert!(h.fingerprint.is_none(), "a header names the session");
            assert_eq!(r.message_count, h.message_count);
            assert_eq!(r.last_user_text, h.last_user_text);
            assert_eq!(r.runtime_session_id, h.runtime_session_id);
            r
        }
        (Err(_), Err(_)) => return None,
        (r, h) => panic!(
            "parse depends on the session header: {:?} / {:?}",
            r.err(),
            h.err()
        ),
    };

    // Session detection and turn type, as `turn_type`/`session_hints` read them.
    let _ = request.body_turn_type.as_deref().and_then(TurnType::parse);
    let _ = request
        .last_user_text
        .as_deref()
        .is_some_and(openclaw::is_heartbeat);
    if let Some(key) = request.prompt_cache_key.as_deref()
        && let Some((sid, _)) = openclaw::split_prompt_cache_key(key)
    {
        assert!(!sid.is_empty());
    }

    // The retrieval query (on a blocking thread in the proxy).
    let query = Query::from_request(&request, "session", "model");
    let _ = wire::text::user_words(&query.text);

    // Skills spliced after the system prompt, the agent's bytes untouched
    // but for what must change (here the model and the control fields too).
    let block = inject::block(&[Injected {
        id: "fuzz-skill".into(),
        name: "fuzz-skill".into(),
        version: "1.0.0".into(),
        description: "A \"quoted\" description\nover two lines.".into(),
        text: "Do the thing. \u{1F980} </script> \\ \u{0}".into(),
        score: 1.0,
    }]);
    // The hot path does not check what it skips (an unknown field may hold
    // invalid UTF-8): the property holds for bodies that are JSON.
    let tree = serde_json::from_slice::<Value>(body).ok();
    for model in [None, Some("served-model")] {
        if tree.is_none() {
            break;
        }
        let spliced = request.outgoing(model, Some(&block));
        let tree: Value = serde_json::from_slice(&spliced)
            .unwrap_or_else(|e| panic!("the spliced body is not JSON ({e})"));
        let after = ChatRequest::parse(spliced.clone(), false)
            .unwrap_or_else(|e| panic!("the spliced body no longer parses: {e}"));
        assert_eq!(after.message_count, request.message_count);
        assert_eq!(after.last_user_text, request.last_user_text);
        assert_eq!(after.model.as_deref(), model.or(request.model.as_deref()));
        assert_eq!(after.stream, request.stream);
        assert!(!after.has_control_fields, "a control field went upstream");
        let first = &tree["messages"][0];
        assert!(
            matches!(first["role"].as_str(), Some("system" | "developer")),
            "the block is not in a system message: {first}"
        );
        let system = wire::text::value_text(&first["content"]);
        assert!(system.ends_with(&block), "the block is not at the end");
        let again = Query::from_request(&after, "session", "model");
        assert_eq!(again.text, query.text);
        // An Anthropic upstream gets the spliced body translated.
        let _ = wire::request::anthropic::from_chat(&tree);
    }
    if let Some(tree) = &tree {
        let _ = wire::request::anthropic::from_chat(tree);
    }
    Some(request)
}

/// Whole upstream answers and error bodies, from the same untrusted JSON.
fn whole_answers(value: &Value, raw: &[u8]) {
    let chat = wire::response::anthropic::to_chat(value);
    let _ = wire::response::anthropic::from_chat(&chat);
    let _ = wire::response::anthropic::from_chat(value);
    let _ = wire::response::responses::from_chat(value, value);
    let raw = Bytes::copy_from_slice(raw);
    for status in [400, 429] {
        let _ = wire::response::error_body::to_openai(status, &raw);
        let body = wire::response::error_body::to_anthropic(status, &raw);
        assert!(serde_json::from_slice::<Value>(&body).is_ok());
    }
}

// ---------------------------------------------------------------------------
// Streams.

/// An upstream event stream. The first byte chooses where the rest is cut
/// into chunks; the events, and what the transcoders make of them, must not
/// depend on the cuts.
pub fn sse(data: &[u8]) {
    let Some((&seed, stream)) = data.split_first() else {
        return;
    };
    let chunks = cut(seed, stream);

    let (whole, dropped) = parse_all(stream);
    let mut parser = SseParser::new();
    let mut pieces = Vec::new();
    for chunk in &chunks {
        parser.push(chunk, &mut |e| pieces.push(e));
    }
    parser.finish(&mut |e| pieces.push(e));
    assert_eq!(
        pieces, whole,
        "the events depend on where the stream is cut"
    );
    assert_eq!(parser.dropped_events, dropped);

    // What is recorded for a streamed turn.
    let (completion, _) = wire::stream::assemble::assemble_sse(stream);
    assert!(completion["choices"].is_array());
    let (completion, _) = wire::stream::anthropic::assemble(stream);
    assert!(completion["choices"].is_array());

    // What a client in another dialect gets (the chains `turn` builds).
    let request = json!({"tools": [{"type": "function", "name": "f"}], "tool_choice": "auto"});
    let chains: [fn(&Value) -> Chain; 4] = [
        |_| Chain(vec![Box::new(wire::stream::anthropic::FromChat::default())]),
        |r| Chain(vec![Box::new(wire::stream::responses::FromChat::new(r))]),
        |_| Chain(vec![Box::new(wire::stream::anthropic::ToChat::default())]),
        |r| {
            Chain(vec![
                Box::new(wire::stream::anthropic::ToChat::default()) as Box<dyn Transcode>,
                Box::new(wire::stream::responses::FromChat::new(r)),
            ])
        },
    ];
    for make in chains {
        let at_once = transcode(make(&request), &[stream]);
        let in_chunks = transcode(make(&request), &chunks);
        let names =
            |events: &[SseEvent]| events.iter().map(|e| e.event.clone()).collect::<Vec<_>>();
        assert_eq!(
            names(&at_once),
            names(&in_chunks),
            "the transcoded events depend on where the stream is cut"
        );
    }
}

/// Chunks of `stream`: whole for seed 0, else pseudo-random lengths of 1 to
/// `seed % 32 + 1` bytes.
fn cut(seed: u8, stream: &[u8]) -> Vec<&[u8]> {
    if seed == 0 {
        return vec![stream];
    }
    let longest = u32::from(seed % 32) + 1;
    let mut state = u32::from(seed).wrapping_mul(0x9E37_79B9) | 1;
    let mut chunks = Vec::new();
    let mut rest = stream;
    while !rest.is_empty() {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let n = ((state % longest) as usize + 1).min(rest.len());
        let (head, tail) = rest.split_at(n);
        chunks.push(head);
        rest = tail;
    }
    chunks
}

/// The events a client gets, chunk by chunk as `TeeStream` sends them; the
/// bytes sent must parse back to those events.
fn transcode(mut chain: Chain, chunks: &[&[u8]]) -> Vec<SseEvent> {
    let mut parser = SseParser::new();
    let mut sent = Vec::new();
    let mut wire = Vec::new();
    let last = chunks.len();
    for (i, chunk) in chunks
        .iter()
        .copied()
        .chain(std::iter::once(&b""[..]))
        .enumerate()
    {
        let finish = i == last;
        let mut events = Vec::new();
        parser.push(chunk, &mut |e| events.push(e));
        if finish {
            parser.finish(&mut |e| events.push(e));
        }
        for event in chain.run(events, finish) {
            encode(&event, &mut wire);
            sent.push(event);
        }
    }
    for event in &sent {
        assert!(
            event.data == "[DONE]" || serde_json::from_str::<Value>(&event.data).is_ok(),
            "a transcoded event is not JSON: {:?}",
            event.data
        );
    }
    let (back, _) = parse_all(&wire);
    assert_eq!(back, sent, "the encoded events do not parse back");
    sent
}

// ---------------------------------------------------------------------------
// Files.

/// A `SKILL.md`, named after the `name:` it declares (the folder must match
/// it). A skill that parses renders to text that parses back to it, and
/// injected, cannot close the skills block early or open another.
pub fn skill_md(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let id = text
        .lines()
        .find_map(|l| l.strip_prefix("name:"))
        .map(|n| n.trim().trim_matches(['"', '\'']))
        .unwrap_or("skill");
    let Ok(parsed) = skill::parse(id, text) else {
        return;
    };
    let block = inject::block(&[Injected {
        id: parsed.id.clone(),
        name: parsed.name.clone(),
        version: parsed.version.to_string(),
        description: parsed.description.clone(),
        text: parsed.body.clone(),
        score: 1.0,
    }]);
    let markers = inject::markers(&block);
    assert!(
        block.starts_with(inject::BEGIN)
            && block.ends_with(inject::END)
            && markers.len() == 2
            && markers[1].start > block.len() - inject::END.len(),
        "the skill's text unsealed the block:\n{block}"
    );
    let rendered = skill::render(&parsed);
    let again = skill::parse(id, &rendered)
        .unwrap_or_else(|e| panic!("a rendered skill does not parse: {e}\n{rendered}"));
    assert_eq!(
        skill::Skill {
            content_hash: String::new(),
            ..again
        },
        skill::Skill {
            content_hash: String::new(),
            ..parsed
        },
        "render → parse changed the skill:\n{rendered}"
    );
}

/// `config.yaml` text as `config::load` reads it. A config that validates
/// re-serialises (as `config show`/`config set` write it) and parses back to
/// the same value.
pub fn config(data: &[u8]) {
    use metaclaw_core::config;
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("config.yaml");
    let Ok(raw) = config::parse_raw(text, path) else {
        return;
    };
    let Ok((parsed, _unknown)) = config::parse_tree(&raw, path) else {
        return;
    };
    if config::validate(&parsed).is_err() {
        return;
    }
    let tree = serde_json::to_value(&parsed).unwrap();
    let yaml = config::to_yaml(&tree);
    let raw2 = config::parse_raw(&yaml, path)
        .unwrap_or_else(|e| panic!("the written config is not YAML: {e}\n{yaml}"));
    let (again, unknown) = config::parse_tree(&raw2, path)
        .unwrap_or_else(|e| panic!("the written config does not load: {e}\n{yaml}"));
    assert!(unknown.is_empty(), "written keys unknown: {unknown:?}");
    assert_eq!(again, parsed, "YAML round trip changed the config:\n{yaml}");
    config::validate(&again).unwrap();
    // `config show`.
    let loaded = config::LoadedConfig {
        config: parsed,
        path: path.to_path_buf(),
        file_exists: true,
        warnings: Vec::new(),
        secret_sources: Default::default(),
    };
    let _ = config::to_yaml(&config::masked_tree(&loaded));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_cover_the_stream() {
        let stream: Vec<u8> = (0..200u8).collect();
        for seed in 0..=255u8 {
            let chunks = cut(seed, &stream);
            assert_eq!(chunks.concat(), stream);
            assert!(chunks.iter().all(|c| !c.is_empty()));
        }
    }
}
