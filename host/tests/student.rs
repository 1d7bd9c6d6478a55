//! Serving from the trainable model (`mode: rl`), in process: the product
//! as `App::start` builds it, the fake Tinker server and the dummy
//! upstream on loopback, the tiny Qwen3's tokenizer and chat template
//! (tests/fixtures/tiny-qwen3). The fake samples what a test scripts
//! (`/api/v1/fake/script`), so each test chooses what the model "says":
//! plain text, tool calls, malformed tool calls, reasoning.
//!
//! What a user depends on: every client API gets a well-formed answer
//! (streamed or not) with tool calls in its own shape; the record holds
//! the exact tokens and logprobs the service sampled; when the service is
//! down the agent is answered by `llm` and `status` says why; turns that
//! extend each other form one trajectory, and a template that rewrites
//! history breaks it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_methods)] // tests own and join their threads and servers

mod common;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use metaclaw_chat::render::{ModelFiles, RenderOptions, Renderer};
use metaclaw_core::app::{App, AppHandle, StartOptions};
use metaclaw_core::home::Home;
use metaclaw_core::server::{self, Guard};
use metaclaw_core::store::samples::SampleRecord;
use metaclaw_core::store::{TurnRow, session_turns};
use metaclaw_core::tinker::types::{Datum, LossFn, Sequence, StopReason};
use metaclaw_core::tinker::{SamplingParams, Service, ServiceSettings};
use metaclaw_wire::stream::sse::parse_all;
use serde_json::{Value, json};
use tower::ServiceExt;

const PORT: u16 = 30000;

fn fixture() -> String {
    format!(
        "{}/../tests/fixtures/tiny-qwen3",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn renderer() -> Renderer {
    Renderer::new(&ModelFiles::from_dir(Path::new(&fixture())).unwrap()).unwrap()
}

/// The tokens a model would sample to say `text` and end its turn.
fn says(text: &str) -> Vec<i32> {
    let r = renderer();
    let mut tokens = r.encode(text).unwrap();
    tokens.push(r.token_id("<|im_end|>").unwrap());
    tokens
}

struct Product {
    handle: AppHandle,
    router: Router,
    /// The fake Tinker server's base URL.
    tinker: String,
    fake: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    _home: tempfile::TempDir,
}

/// The product in `mode: rl` with `rl` lines added, sampling the fake
/// Tinker server (unless `no_service`) with the tiny Qwen3's tokenizer.
async fn product(rl: &str, no_service: bool) -> Product {
    product_in(rl, no_service, LEARNING_OFF).await
}

/// [`product`] with this `learning` section.
async fn product_in(rl: &str, no_service: bool, learning: &str) -> Product {
    product_in_with(
        rl,
        no_service,
        learning,
        metaclaw_mock_upstream::Dummy::default(),
    )
    .await
}

/// [`product_in`] with these plugin files in its drop-in folder.
async fn product_in_with_dropins(
    rl: &str,
    learning: &str,
    dropins: &[std::path::PathBuf],
) -> Product {
    product_in_setup(
        rl,
        false,
        learning,
        metaclaw_mock_upstream::Dummy::default(),
        dropins,
    )
    .await
}

/// [`product_in`] in front of this dummy upstream; `{upstream}` in
/// `learning` (or sections after it) is its base URL.
async fn product_in_with(
    rl: &str,
    no_service: bool,
    learning: &str,
    dummy: metaclaw_mock_upstream::Dummy,
) -> Product {
    product_in_setup(rl, no_service, learning, dummy, &[]).await
}

async fn product_in_setup(
    rl: &str,
    no_service: bool,
    learning: &str,
    dummy: metaclaw_mock_upstream::Dummy,
    dropins: &[std::path::PathBuf],
) -> Product {
    let upstream_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = format!("http://{}/v1", upstream_listener.local_addr().unwrap());
    let learning = learning.replace("{upstream}", &upstream);
    let learning = learning.as_str();
    tokio::spawn(metaclaw_mock_upstream::serve(
        upstream_listener,
        Arc::new(dummy),
    ));
    let fake_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let tinker = format!("http://{}", fake_listener.local_addr().unwrap());
    let fake = match no_service {
        true => None,
        false => Some(tokio::spawn(metaclaw_mock_tinker::serve_with(
            fake_listener,
            metaclaw_mock_tinker::Options::default(),
        ))),
    };
    let rl = format!(
        "  model: fake-bigram\n  tinker_base_url: {tinker}\n  tokenizer_path: {}\n{rl}",
        fixture()
    );
    let mut product = product_with_dropins(&upstream, &rl, learning, dropins).await;
    product.tinker = tinker;
    product.fake = fake;
    product
}

/// Learning off: the serving path alone.
const LEARNING_OFF: &str = "learning:\n  enabled: false\n";

/// The product in `mode: rl` in front of `upstream`, with these `rl` lines
/// and this `learning` section.
async fn product_with(upstream: &str, rl: &str, learning: &str) -> Product {
    product_with_dropins(upstream, rl, learning, &[]).await
}

/// [`product_with`] with these plugin files in its drop-in folder.
async fn product_with_dropins(
    upstream: &str,
    rl: &str,
    learning: &str,
    dropins: &[std::path::PathBuf],
) -> Product {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::at(dir.path());
    home.ensure().unwrap();
    std::fs::create_dir_all(home.plugins_dir()).unwrap();
    for file in dropins {
        std::fs::copy(file, home.plugins_dir().join(file.file_name().unwrap())).unwrap();
    }
    // Canaries of weights off unless `learning` turns them on: these tests
    // are about serving and training (the last ones about canaries).
    let canary = match learning.contains("canary:") {
        true => "",
        false => "canary:\n  weights: false\n",
    };
    let config = format!(
        "mode: rl\nllm:\n  api_base: {upstream}\n  model_id: echo\n  force_model: true\nrl:\n{rl}skills:\n  enabled: false\n{learning}plugins:\n  builtin: false\n{canary}"
    );
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, config).unwrap();
    let loaded = metaclaw_core::config::load(&path).unwrap();
    let handle = App::start(StartOptions {
        home: &home,
        loaded: &loaded,
        demo: false,
        host: IpAddr::V4(Ipv4Addr::LOCALHOST),
        port: PORT,
    })
    .unwrap();
    let router = server::router(handle.app().clone(), Guard::new(&loaded.config.proxy, PORT));
    Product {
        handle,
        router,
        tinker: String::new(),
        fake: None,
        _home: dir,
    }
}

impl Product {
    /// Waits until the student's health is `state` (it connects in the
    /// background), and returns the health as `status` shows it.
    async fn student_is(&self, state: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let status = self.status().await;
            if status["student"]["state"] == state {
                return status["student"].clone();
            }
            assert!(
                Instant::now() < deadline,
                "the student never became {state}: {}",
                status["student"]
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn admin_post(&self, path: &str, body: &Value) -> (StatusCode, Vec<u8>) {
        let token = self.handle.app().admin_token.clone();
        let request = Request::post(path).header("authorization", format!("Bearer {token}"));
        self.send(request, body).await
    }

    /// Sends a JSON body as the local agent would (the `Host` the guard
    /// expects); the status and the whole answer.
    async fn send(
        &self,
        request: axum::http::request::Builder,
        body: &Value,
    ) -> (StatusCode, Vec<u8>) {
        let request = request
            .header("host", format!("127.0.0.1:{PORT}"))
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 22)
            .await
            .unwrap();
        (status, bytes.to_vec())
    }

    async fn status(&self) -> Value {
        let token = self.handle.app().admin_token.clone();
        let request = Request::get("/admin/status")
            .header("host", format!("127.0.0.1:{PORT}"))
            .header("authorization", format!("Bearer {token}"))
            .body(Body::empty())
            .unwrap();
        let response = self.router.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        serde_json::from_slice(
            &axum::body::to_bytes(response.into_body(), 1 << 20)
                .await
                .unwrap(),
        )
        .unwrap()
    }

    /// The next samples of the fake say these.
    async fn script(&self, sequences: &[Vec<i32>]) {
        let response = reqwest::Client::new()
            .post(format!("{}/api/v1/fake/script", self.tinker))
            .json(&json!({ "sequences": sequences }))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success());
    }

    async fn post(&self, path: &str, session: &str, body: &Value) -> (StatusCode, Vec<u8>) {
        self.post_as(path, session, "main", body).await
    }

    /// As [`Self::post`], declaring the turn's type (`main` or `side`).
    async fn post_as(
        &self,
        path: &str,
        session: &str,
        turn_type: &str,
        body: &Value,
    ) -> (StatusCode, Vec<u8>) {
        let request = Request::post(path)
            .header("x-session-id", session)
            .header("x-turn-type", turn_type);
        self.send(request, body).await
    }

    async fn turns(&self, session: &str) -> Vec<TurnRow> {
        let store = &self.handle.app().proxy.store;
        store.flush().await;
        let conn = store.db().read().unwrap();
        session_turns(&conn, session).unwrap()
    }

    async fn sample_of(&self, turn: &str) -> SampleRecord {
        let store = &self.handle.app().proxy.store;
        store.flush().await;
        let conn = store.db().read().unwrap();
        metaclaw_core::store::samples::for_turn(&conn, turn)
            .unwrap()
            .expect("the turn has a sample")
    }
}

fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(bytes)))
}

const TOOLS: &str = r#"[{"type": "function", "function": {"name": "read_file", "description": "Read a file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]"#;

fn tools() -> Value {
    serde_json::from_str(TOOLS).unwrap()
}

fn chat_request(stream: bool) -> Value {
    json!({
        "model": "my-agent-model", "stream": stream, "tools": tools(),
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is in notes.txt?"},
        ],
    })
}

fn anthropic_request(stream: bool) -> Value {
    json!({
        "model": "my-agent-model", "stream": stream, "max_tokens": 256,
        "system": "You are a helpful assistant.",
        "tools": [{"name": "read_file", "description": "Read a file",
                   "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}],
        "messages": [{"role": "user", "content": "What is in notes.txt?"}],
    })
}

fn responses_request(stream: bool) -> Value {
    json!({
        "model": "my-agent-model", "stream": stream,
        "instructions": "You are a helpful assistant.",
        "tools": [{"type": "function", "name": "read_file", "description": "Read a file",
                   "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}],
        "input": "What is in notes.txt?",
    })
}

/// A plain answer on the chat API: the agent gets the text the model
/// sampled; the record has the exact prompt the renderer made, the tokens
/// the service sampled, and logprobs the service agrees with when it
/// scores the whole sequence again.
#[tokio::test]
async fn a_plain_answer_is_served_from_the_student_and_recorded_token_for_token() {
    let p = product("", false).await;
    p.student_is("ready").await;
    let sampled = says("The notes are empty.");
    p.script(std::slice::from_ref(&sampled)).await;
    let (status, body) = p
        .post("/v1/chat/completions", "s-plain", &chat_request(false))
        .await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let answer = json_of(&body);
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        "The notes are empty."
    );
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");
    assert_eq!(answer["model"], "my-agent-model");

    let turns = p.turns("s-plain").await;
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0].served_by.as_deref(), Some("student"));
    let sample = p.sample_of(&turns[0].id).await;
    assert_eq!(
        sample.tokens, sampled,
        "the sampled tokens, stop token included"
    );
    assert_eq!(sample.logprobs.len(), sampled.len());
    assert_eq!(sample.policy_version, 0);
    assert_eq!(sample.sampler, "base");
    assert_eq!(sample.parse_error, None);
    assert_eq!(sample.rendering, renderer().id());
    // The prompt is the messages rendered once, tools included.
    let r = renderer();
    let messages = chat_request(false)["messages"].as_array().unwrap().clone();
    let expected = r
        .render(
            &messages,
            Some(tools().as_array().unwrap()),
            &RenderOptions {
                add_generation_prompt: true,
                enable_thinking: None,
            },
        )
        .unwrap();
    assert_eq!(sample.prompt_tokens, expected.tokens);

    // The service, asked to score prompt + sample, gives the same logprobs.
    let service = Service::connect(&ServiceSettings::new(&p.tinker, None))
        .await
        .unwrap();
    let session = service.create_session().await.unwrap();
    let sampler = session.sampler(Some("fake-bigram"), None).await.unwrap();
    let sequence: Vec<i32> = sample
        .prompt_tokens
        .iter()
        .chain(&sample.tokens)
        .copied()
        .collect();
    let params = SamplingParams {
        max_tokens: 1,
        prompt_logprobs: true,
        ..SamplingParams::default()
    };
    let scored = sampler.sample(&sequence, &params, 1).await.unwrap();
    let rescored = scored.prompt_logprobs.unwrap();
    for (i, lp) in sample.logprobs.iter().enumerate() {
        let again = rescored[sample.prompt_tokens.len() + i].unwrap();
        assert!((lp - again).abs() < 1e-4, "token {i}: {lp} vs {again}");
    }

    // `sessions show` says who answered and with what; `--tokens` dumps them.
    let home = p._home.path();
    let out = common::cli_in(home, &["sessions", "show", "s-plain"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "policy version 0 (base) · {} prompt → {} sampled tokens",
            sample.prompt_tokens.len(),
            sample.tokens.len()
        )),
        "{text}"
    );
    let out = common::cli_in(home, &["sessions", "show", "s-plain", "--json", "--tokens"]);
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    let turn = &shown["turns"][0];
    assert_eq!(turn["served_by"], "student");
    assert_eq!(turn["tokens"]["prompt"], json!(sample.prompt_tokens));
    assert_eq!(turn["tokens"]["sampled"], json!(sample.tokens));
    assert_eq!(turn["tokens"]["logprobs"], json!(sample.logprobs));
}

/// The Hermes/Qwen tool call the model writes.
fn tool_call_text() -> String {
    "Let me read it.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"notes.txt\"}}\n</tool_call>".into()
}

/// A tool call comes back in each API's own shape, streamed and not.
#[tokio::test]
async fn tool_calls_reach_every_client_api_in_its_own_shape() {
    let p = product("", false).await;
    p.student_is("ready").await;
    for stream in [false, true] {
        // Chat: tool_calls.
        p.script(&[says(&tool_call_text())]).await;
        let (status, body) = p
            .post("/v1/chat/completions", "s-tools", &chat_request(stream))
            .await;
        assert_eq!(status, StatusCode::OK);
        let answer = match stream {
            false => json_of(&body),
            true => metaclaw_wire::stream::assemble::assemble_sse(&body).0,
        };
        let message = &answer["choices"][0]["message"];
        assert_eq!(message["content"], "Let me read it.", "{answer}");
        let call = &message["tool_calls"][0];
        assert_eq!(call["function"]["name"], "read_file");
        let args: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args, json!({"path": "notes.txt"}));
        assert!(call["id"].as_str().is_some_and(|id| !id.is_empty()));
        assert_eq!(answer["choices"][0]["finish_reason"], "tool_calls");

        // Anthropic: a tool_use block.
        p.script(&[says(&tool_call_text())]).await;
        let (status, body) = p
            .post("/v1/messages", "s-tools-a", &anthropic_request(stream))
            .await;
        assert_eq!(status, StatusCode::OK);
        let message = match stream {
            false => json_of(&body),
            true => metaclaw_wire::stream::anthropic::assemble(&body).0,
        };
        if stream {
            // The assembled stream is in chat form.
            let call = &message["choices"][0]["message"]["tool_calls"][0];
            assert_eq!(call["function"]["name"], "read_file", "{message}");
            let (events, _) = parse_all(&body);
            let names: Vec<&str> = events.iter().filter_map(|e| e.event.as_deref()).collect();
            assert_eq!(names.first(), Some(&"message_start"));
            assert_eq!(names.last(), Some(&"message_stop"));
        } else {
            let blocks = message["content"].as_array().unwrap();
            let tool_use = blocks.iter().find(|b| b["type"] == "tool_use").unwrap();
            assert_eq!(tool_use["name"], "read_file");
            assert_eq!(tool_use["input"], json!({"path": "notes.txt"}));
            assert_eq!(message["stop_reason"], "tool_use");
        }

        // Responses: a function_call item.
        p.script(&[says(&tool_call_text())]).await;
        let (status, body) = p
            .post("/v1/responses", "s-tools-r", &responses_request(stream))
            .await;
        assert_eq!(status, StatusCode::OK);
        let response = match stream {
            false => json_of(&body),
            true => {
                let (events, _) = parse_all(&body);
                let done = events
                    .iter()
                    .find(|e| e.event.as_deref() == Some("response.completed"))
                    .expect("a response.completed event");
                json_of(done.data.as_bytes())["response"].clone()
            }
        };
        let call = response["output"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["type"] == "function_call")
            .unwrap_or_else(|| panic!("no function_call in {response}"));
        assert_eq!(call["name"], "read_file");
        let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args, json!({"path": "notes.txt"}));
    }
}

/// A malformed tool call reaches the agent as text, and the sample is
/// recorded as not parsed (no advantage will be given to it).
#[tokio::test]
async fn a_malformed_tool_call_is_answered_as_text_and_flagged() {
    let p = product("", false).await;
    p.student_is("ready").await;
    let broken = "<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": }\n</tool_call>";
    p.script(&[says(broken)]).await;
    let (status, body) = p
        .post("/v1/chat/completions", "s-broken", &chat_request(false))
        .await;
    assert_eq!(status, StatusCode::OK);
    let answer = json_of(&body);
    let message = &answer["choices"][0]["message"];
    assert!(message["tool_calls"].is_null(), "{answer}");
    assert!(
        message["content"]
            .as_str()
            .unwrap()
            .contains("\"read_file\""),
        "{answer}"
    );
    let turns = p.turns("s-broken").await;
    let sample = p.sample_of(&turns[0].id).await;
    assert!(sample.parse_error.is_some());
    assert_eq!(p.status().await["student"]["parse_errors"], 1);
}

/// Token ids cannot be redacted: a turn whose prompt held a secret is
/// answered, and its sample kept without tokens (not trainable).
#[tokio::test]
async fn a_prompt_with_a_secret_keeps_no_tokens() {
    let p = product("", false).await;
    p.student_is("ready").await;
    p.script(&[says("Noted.")]).await;
    let mut body = chat_request(false);
    body["messages"][1]["content"] =
        json!("my key is sk-proj-abcdefghijklmnopqrstuvwxyz123456, keep it");
    let (status, _) = p.post("/v1/chat/completions", "s-secret", &body).await;
    assert_eq!(status, StatusCode::OK);
    let turns = p.turns("s-secret").await;
    let summary = turns[0].sample.clone().expect("a sample row");
    assert!(summary.withheld.is_some(), "{summary:?}");
    let sample = p.sample_of(&turns[0].id).await;
    assert!(sample.prompt_tokens.is_empty() && sample.tokens.is_empty());
    assert!(sample.logprobs.is_empty());
}

/// With `rl.serve_side_turns: false`, the agent's background calls go to
/// llm (not a fallback: as configured); main turns still to the student.
#[tokio::test]
async fn side_turns_can_be_left_to_llm() {
    let p = product("  serve_side_turns: false\n", false).await;
    p.student_is("ready").await;
    let (status, _) = p
        .post_as(
            "/v1/chat/completions",
            "s-side",
            "side",
            &chat_request(false),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    p.script(&[says("Main answer.")]).await;
    p.post("/v1/chat/completions", "s-side", &chat_request(false))
        .await;
    let turns = p.turns("s-side").await;
    let served: Vec<(&str, Option<&str>)> = turns
        .iter()
        .map(|t| (t.turn_type.as_str(), t.served_by.as_deref()))
        .collect();
    assert_eq!(served, [("side", Some("llm")), ("main", Some("student"))]);
}

/// Reasoning goes to the API's reasoning field, not the answer.
#[tokio::test]
async fn reasoning_is_separated_from_the_answer() {
    let p = product("", false).await;
    p.student_is("ready").await;
    p.script(&[says(
        "<think>\nThe file is small.\n</think>\n\nIt is empty.",
    )])
    .await;
    let (_, body) = p
        .post("/v1/chat/completions", "s-think", &chat_request(false))
        .await;
    let message = json_of(&body)["choices"][0]["message"].clone();
    assert_eq!(message["content"], "It is empty.");
    assert_eq!(message["reasoning_content"], "The file is small.");
}

/// With no training service, the agent is answered by llm: no failed
/// request, the turn is marked not trainable, and status says why.
#[tokio::test]
async fn without_a_training_service_llm_answers_and_status_says_why() {
    let p = product("  sample_timeout: 5s\n", true).await;
    let student = p.student_is("down").await;
    assert!(
        student["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{student}"
    );
    let (status, body) = p
        .post("/v1/chat/completions", "s-down", &chat_request(false))
        .await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    assert!(json_of(&body)["choices"][0]["message"]["content"].is_string());
    let turns = p.turns("s-down").await;
    assert_eq!(turns[0].served_by.as_deref(), Some("llm_fallback"));
    assert!(turns[0].fallback_reason.is_some());
    assert!(turns[0].sample.is_none());
    let student = p.status().await["student"].clone();
    assert_eq!(student["fallbacks"], 1);
    assert!(student["last_fallback"].is_string());
}

/// The service goes away between turns: the next turn is answered by llm
/// (no failed request), and the student is marked down.
#[tokio::test]
async fn a_sampler_outage_mid_session_falls_back_to_llm() {
    let mut p = product("  sample_timeout: 10s\n", false).await;
    p.student_is("ready").await;
    p.script(&[says("First answer.")]).await;
    let (status, _) = p
        .post("/v1/chat/completions", "s-outage", &chat_request(false))
        .await;
    assert_eq!(status, StatusCode::OK);
    p.fake.take().unwrap().abort();
    for stream in [false, true] {
        let (status, body) = p
            .post("/v1/chat/completions", "s-outage", &chat_request(stream))
            .await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    }
    let turns = p.turns("s-outage").await;
    let served: Vec<Option<&str>> = turns.iter().map(|t| t.served_by.as_deref()).collect();
    assert_eq!(
        served,
        [Some("student"), Some("llm_fallback"), Some("llm_fallback")]
    );
    assert_eq!(p.status().await["student"]["state"], "down");
}

/// With the fallback off, the client gets a 503 in its own API's shape.
#[tokio::test]
async fn with_the_fallback_off_a_down_student_is_a_clear_error() {
    let p = product("  fallback_to_llm: false\n", true).await;
    p.student_is("down").await;
    let (status, body) = p
        .post("/v1/messages", "s-nofallback", &anthropic_request(false))
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let error = json_of(&body);
    assert_eq!(error["type"], "error", "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("rl.fallback_to_llm"),
        "{error}"
    );
}

/// Turns whose prompts extend the last prompt and answer form one
/// trajectory; a template that drops earlier reasoning breaks it.
#[tokio::test]
async fn turns_form_one_trajectory_unless_the_template_rewrites_history() {
    let p = product("", false).await;
    p.student_is("ready").await;
    let system = json!({"role": "system", "content": "You are a helpful assistant."});
    let ask = |messages: Vec<Value>| json!({"model": "m", "messages": messages});

    // Plain answers: the next prompt extends prompt + answer.
    p.script(&[says("Hi there.")]).await;
    let first = vec![system.clone(), json!({"role": "user", "content": "Hello"})];
    p.post("/v1/chat/completions", "s-traj", &ask(first.clone()))
        .await;
    p.script(&[says("Fine, thanks.")]).await;
    let mut second = first.clone();
    second.push(json!({"role": "assistant", "content": "Hi there."}));
    second.push(json!({"role": "user", "content": "How are you?"}));
    p.post("/v1/chat/completions", "s-traj", &ask(second)).await;
    let turns = p.turns("s-traj").await;
    let (a, b) = (
        p.sample_of(&turns[0].id).await,
        p.sample_of(&turns[1].id).await,
    );
    assert_eq!(a.trajectory, turns[0].id);
    assert_eq!(b.trajectory, turns[0].id);
    assert_eq!(b.extends.as_deref(), Some(turns[0].id.as_str()));
    let a_full: Vec<i32> = a.prompt_tokens.iter().chain(&a.tokens).copied().collect();
    assert!(b.prompt_tokens.starts_with(&a_full));

    // With reasoning, which the template drops from earlier turns: the
    // next prompt does not extend the last sample, so a new trajectory.
    p.script(&[says("<think>\nGreet back.\n</think>\n\nHi there.")])
        .await;
    p.post("/v1/chat/completions", "s-traj2", &ask(first.clone()))
        .await;
    p.script(&[says("Fine, thanks.")]).await;
    let mut second = first.clone();
    second.push(
        json!({"role": "assistant", "content": "Hi there.", "reasoning_content": "Greet back."}),
    );
    second.push(json!({"role": "user", "content": "How are you?"}));
    p.post("/v1/chat/completions", "s-traj2", &ask(second))
        .await;
    let turns = p.turns("s-traj2").await;
    let b = p.sample_of(&turns[1].id).await;
    assert_eq!(b.trajectory, turns[1].id);
    assert_eq!(b.extends, None);
}

/// The captured OpenClaw requests, each sent streamed and not: (route,
/// body). The chat ones go upstream as they are; the others are
/// translated first.
fn openclaw_requests() -> Vec<(&'static str, &'static str, Value)> {
    let fixtures = [
        (
            "/v1/chat/completions",
            "chat_completions_stream_request.json",
        ),
        (
            "/v1/chat/completions",
            "openai_completions_exec_with_prompt_cache_key.json",
        ),
        (
            "/v1/chat/completions",
            "tool_loop_call2_with_tool_result.json",
        ),
        ("/v1/messages", "anthropic_messages.json"),
        ("/v1/responses", "openai_responses.json"),
    ];
    let mut out = Vec::new();
    for (route, file) in fixtures {
        let body = common::fixture(file)["body"].clone();
        for stream in [false, true] {
            let mut body = body.clone();
            body["stream"] = json!(stream);
            out.push((route, file, body));
        }
    }
    out
}

/// The answer is well formed in its API (streamed or not), as a client
/// library would read it.
fn assert_well_formed(route: &str, stream: bool, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    match (route, stream) {
        ("/v1/chat/completions", false) => {
            let v = json_of(bytes);
            assert_eq!(v["object"], "chat.completion", "{v}");
            assert_eq!(v["choices"][0]["message"]["role"], "assistant", "{v}");
            assert!(v["choices"][0]["finish_reason"].is_string(), "{v}");
        }
        ("/v1/chat/completions", true) => {
            let (v, complete) = metaclaw_wire::stream::assemble::assemble_sse(bytes);
            assert!(
                complete && text.trim_end().ends_with("data: [DONE]"),
                "{text}"
            );
            assert!(v["choices"][0]["finish_reason"].is_string(), "{v}");
        }
        ("/v1/messages", false) => {
            let v = json_of(bytes);
            assert_eq!(v["type"], "message", "{v}");
            assert_eq!(v["role"], "assistant", "{v}");
            assert!(
                v["content"].is_array() && v["stop_reason"].is_string(),
                "{v}"
            );
        }
        ("/v1/messages", true) => {
            let (events, malformed) = parse_all(bytes);
            assert_eq!(malformed, 0, "{text}");
            let names: Vec<&str> = events.iter().filter_map(|e| e.event.as_deref()).collect();
            assert_eq!(names.first(), Some(&"message_start"), "{text}");
            assert_eq!(names.last(), Some(&"message_stop"), "{text}");
            assert!(names.contains(&"message_delta"), "{text}");
        }
        ("/v1/responses", false) => {
            let v = json_of(bytes);
            assert_eq!(v["object"], "response", "{v}");
            // `incomplete` when the answer reached its token limit.
            assert!(
                v["status"] == "completed" || v["status"] == "incomplete",
                "{v}"
            );
            assert!(v["output"].is_array(), "{v}");
        }
        (_, true) => {
            let (events, malformed) = parse_all(bytes);
            assert_eq!(malformed, 0, "{text}");
            let names: Vec<&str> = events.iter().filter_map(|e| e.event.as_deref()).collect();
            assert_eq!(names.first(), Some(&"response.created"), "{text}");
            let last = names.last().copied().unwrap_or_default();
            assert!(
                last == "response.completed" || last == "response.incomplete",
                "{text}"
            );
        }
        _ => unreachable!(),
    }
}

/// Every captured OpenClaw request, at full length, on each API, streamed
/// and not, is answered by the student in a well-formed answer, and each
/// turn records what was sampled.
#[tokio::test]
async fn openclaws_real_requests_are_answered_by_the_student_on_every_api() {
    let p = product("", false).await;
    p.student_is("ready").await;
    for (i, (route, file, body)) in openclaw_requests().into_iter().enumerate() {
        let session = format!("s-openclaw-{i}");
        let stream = body["stream"] == true;
        let (status, bytes) = p.post(route, &session, &body).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "{file}: {}",
            String::from_utf8_lossy(&bytes)
        );
        assert_well_formed(route, stream, &bytes);
        let turns = p.turns(&session).await;
        assert_eq!(turns.len(), 1, "{file}");
        assert_eq!(turns[0].served_by.as_deref(), Some("student"), "{file}");
        let sample = p.sample_of(&turns[0].id).await;
        assert!(sample.prompt_tokens.len() > 100, "{file}");
        assert_eq!(sample.logprobs.len(), sample.tokens.len(), "{file}");
    }
}

/// Transformers' rendering of `messages` and `tools` with the tiny Qwen3's
/// own files: the golden prompt tokens.
fn transformers_tokens(model_dir: &Path, messages: &Value, tools: &Value) -> Vec<i32> {
    let cases = tempfile::NamedTempFile::new().unwrap();
    let case = json!([{"messages": messages, "tools": tools, "add_generation_prompt": true, "enable_thinking": null}]);
    std::fs::write(cases.path(), case.to_string()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/tinker/render_golden.py");
    let out = std::process::Command::new(common::skyrl::venv_python())
        .arg(script)
        .arg(model_dir)
        .arg(cases.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line: Value =
        serde_json::from_slice(out.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    serde_json::from_value(line["tokens"].clone()).unwrap_or_else(|_| panic!("{line}"))
}

/// Against the real skyrl CPU server and the tiny Qwen3: OpenClaw's
/// captured requests on all three APIs, streamed and not, are answered by
/// the student; the recorded prompt tokens are transformers' rendering of
/// the same messages; the recorded sampled tokens and logprobs are what
/// the server gives when it scores the sequence again (a forward pass of
/// a fresh LoRA, which is the base model).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_skyrl_the_student_answers_openclaw_with_the_exact_tokens() {
    let Some(server) = common::skyrl::start("student skyrl") else {
        return;
    };
    let model = common::skyrl::model_dir();
    let upstream = common::dummy();
    let rl = format!(
        "  model: {}\n  tinker_base_url: {}\n  max_new_tokens: 8\n  fallback_to_llm: false\n",
        model.display(),
        server.proc.url
    );
    let p = product_with(&format!("{}/v1", upstream.url), &rl, LEARNING_OFF).await;
    let started = Instant::now();
    p.student_is("ready").await;
    eprintln!("student ready in {:.1} s", started.elapsed().as_secs_f64());

    let mut samples = Vec::new();
    for (i, (route, file, body)) in openclaw_requests().into_iter().enumerate() {
        let session = format!("s-skyrl-{i}");
        let stream = body["stream"] == true;
        let t = Instant::now();
        let (status, bytes) = p.post(route, &session, &body).await;
        eprintln!(
            "{file} (stream {stream}): {:.2} s",
            t.elapsed().as_secs_f64()
        );
        assert_eq!(
            status,
            StatusCode::OK,
            "{file}: {}",
            String::from_utf8_lossy(&bytes)
        );
        assert_well_formed(route, stream, &bytes);
        let turns = p.turns(&session).await;
        let sample = p.sample_of(&turns[0].id).await;
        assert!(
            !sample.tokens.is_empty() && sample.tokens.len() <= 8,
            "{file}"
        );
        if route == "/v1/chat/completions" && !stream {
            let golden = transformers_tokens(&model, &body["messages"], &body["tools"]);
            assert_eq!(
                sample.prompt_tokens, golden,
                "{file}: prompt tokens differ from transformers'"
            );
        }
        samples.push(sample);
    }

    // The server scores each recorded sequence again.
    let service = Service::connect(&ServiceSettings::new(
        &server.proc.url,
        Some("tml-dummy".into()),
    ))
    .await
    .unwrap();
    let session = service.create_session().await.unwrap();
    let base = model.display().to_string();
    let trainer = session
        .create_model(&base, &metaclaw_core::tinker::LoraConfig::new(1).seeded(1))
        .await
        .unwrap();
    let data: Vec<Datum> = samples
        .iter()
        .map(|s| {
            let sequence = Sequence {
                stop_reason: StopReason::Stop,
                tokens: s.tokens.clone(),
                logprobs: Some(s.logprobs.clone()),
            };
            Datum::from_sample(&s.prompt_tokens, &sequence, 0.0)
        })
        .collect();
    let scored = trainer
        .forward_backward(&data, LossFn::ImportanceSampling, &BTreeMap::new())
        .await
        .unwrap();
    for (s, out) in samples.iter().zip(&scored.loss_fn_outputs) {
        let again = out["logprobs"].floats();
        let tail = &again[again.len() - s.logprobs.len()..];
        for (recorded, rescored) in s.logprobs.iter().zip(tail) {
            assert!(
                (recorded - rescored).abs() < 1e-3,
                "recorded {recorded} vs rescored {rescored}"
            );
        }
    }
}

/// The training loop on the fake service: a session's student turns are
/// judged when it ends (the dummy judge: a corrected answer −1, the next
/// one 0), a step trains on them (their advantages differ), the new
/// weights serve the next turn, and the queue says each sample was
/// trained once.
#[tokio::test]
async fn judged_turns_train_a_step_whose_weights_serve_the_next_turn() {
    let rl = "  batch_size: 2\n  manual_train_trigger: true\n  prm_model: judge\n  prm_m: 1\n";
    let p = product_in(rl, false, "learning:\n  enabled: true\n").await;
    p.student_is("ready").await;
    let system = json!({"role": "system", "content": "You are a helpful assistant."});
    let first = vec![
        system,
        json!({"role": "user", "content": "Where is Paris?"}),
    ];
    p.script(&[says("Paris is in Spain.")]).await;
    let (status, _) = p
        .post(
            "/v1/chat/completions",
            "s-train",
            &json!({"model": "m", "messages": first}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let mut second = first.clone();
    second.push(json!({"role": "assistant", "content": "Paris is in Spain."}));
    second.push(json!({"role": "user", "content": "No, that's wrong. Paris is in France."}));
    p.script(&[says("Sorry: Paris is in France.")]).await;
    p.post(
        "/v1/chat/completions",
        "s-train",
        &json!({"model": "m", "messages": second}),
    )
    .await;

    // Before the session's learning job, nothing is ready.
    let (_, body) = p.admin_post("/admin/train/step", &json!({})).await;
    assert_eq!(
        json_of(&body)["outcome"],
        "waiting",
        "{}",
        String::from_utf8_lossy(&body)
    );

    // The session ends and is judged; then one step trains on both turns.
    let (status, body) = p
        .admin_post("/admin/learn/now", &json!({"session": "s-train"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let turns = p.turns("s-train").await;
    let rewards: Vec<Option<f64>> = turns.iter().map(|t| t.reward).collect();
    assert_eq!(rewards[0], Some(-1.0), "{rewards:?}");
    let (status, body) = p.admin_post("/admin/train/step", &json!({})).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let stepped = json_of(&body);
    assert_eq!(stepped["outcome"], "stepped", "{stepped}");
    assert_eq!(stepped["step"], 1);
    assert_eq!(stepped["samples"], 2);
    assert_eq!(
        stepped["datums"], 1,
        "the two turns extend each other: one datum"
    );
    assert_eq!(stepped["policy_version"], 1);
    assert!(stepped["kl_sampler_learner"].is_number(), "{stepped}");

    // The service applied it; the student now serves its weights.
    let models: Value = reqwest::get(format!("{}/api/v1/fake/models", p.tinker))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let steps: Vec<u64> = models
        .as_object()
        .unwrap()
        .values()
        .map(|m| m["steps"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [1], "{models}");
    let status = p.status().await;
    assert_eq!(status["student"]["policy_version"], 1, "{status}");
    assert_eq!(status["training"]["queue"]["trained"], 2, "{status}");
    // The same answer to the same prompt, under step 1's weights: the
    // fake scores a scripted answer with the weights that sampled it, so
    // its logprobs say which weights served.
    let step1 = p.probe("s-after").await;
    assert_eq!(step1.policy_version, 1);

    // The CLI lists the run's checkpoints on the service and the queue
    // (a process of its own: the fake in this test answers it meanwhile).
    let home = p._home.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        let checkpoints = common::cli_in(&home, &["train", "checkpoints", "--json"]);
        let status = common::cli_in(&home, &["train", "status", "--json"]);
        (checkpoints, status)
    })
    .await
    .unwrap();
    let listed: Value = serde_json::from_slice(&out.0.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.0.stderr)));
    let kinds: Vec<(&str, i64)> = listed["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["kind"].as_str().unwrap(), c["step"].as_i64().unwrap()))
        .collect();
    assert!(
        kinds.contains(&("sampler", 1)) && kinds.contains(&("training", 1)),
        "{listed}"
    );
    let status: Value = serde_json::from_slice(&out.1.stdout).unwrap();
    assert_eq!(status["run"]["step"], 1, "{status}");
    assert_eq!(status["queue"]["trained"], 2, "{status}");
    assert_eq!(status["steps"][0]["samples"], 1, "one datum: {status}");
    // The trainer's own numbers are kept with the step; what comes next.
    let ours = &status["steps"][0]["metrics"]["metaclaw"];
    assert_eq!(ours["mean_reward"], stepped["mean_reward"], "{status}");
    assert!(ours["kl_sampler_learner"].is_number(), "{status}");
    assert_eq!(status["next_checkpoint_step"], 2, "{status}");
    assert_eq!(status["service"]["reachable"], true, "{status}");

    // A second step, on the turn step 1's weights answered: policy
    // version 2, whose weights score that answer otherwise.
    let (status, body) = p
        .admin_post("/admin/learn/now", &json!({"session": "s-after"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let (_, body) = p.admin_post("/admin/train/step", &json!({})).await;
    let second = json_of(&body);
    assert_eq!(
        (
            second["outcome"].as_str(),
            second["policy_version"].as_i64()
        ),
        (Some("stepped"), Some(2)),
        "{second}"
    );
    let step2 = p.probe("s-probe-2").await;
    assert_eq!(step2.policy_version, 2);
    assert_ne!(step2.logprobs, step1.logprobs, "step 2 changed nothing");

    // A rollback serves named earlier sampler weights (step 1's, not the
    // step 2 weights served now); an unknown path is refused, and what is
    // served stays.
    let path = stepped["sampler_path"].as_str().unwrap();
    assert_ne!(Some(path), second["sampler_path"].as_str());
    let (status, body) = p
        .admin_post(
            "/admin/train/rollback",
            &json!({"sampler": "tinker://nope/sampler_weights/x"}),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "{}",
        String::from_utf8_lossy(&body)
    );
    let (status, body) = p
        .admin_post("/admin/train/rollback", &json!({"sampler": path}))
        .await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let rollback = json_of(&body);
    assert_eq!(rollback["policy_version"], 1);
    // Served through a model of its own, loaded from the training state
    // step 1 saved with them (the training model is never asked to sample
    // an earlier checkpoint of its own: skyrl would overwrite its weights).
    let served = rollback["sampler"].as_str().unwrap();
    assert!(
        served != path && served.ends_with("-serve-step000001"),
        "{rollback}"
    );
    assert_eq!(p.status().await["student"]["sampler"], served);
    // The next answer comes from step 1's weights: sampled on its sampler,
    // named version 1 to the agent, scored exactly as they scored it.
    let (served_by, rolled_back) = p.probe_served("s-probe-back").await;
    assert_eq!(served_by, "student; policy_version=1");
    assert_eq!(rolled_back.sampler, served);
    assert_eq!(rolled_back.policy_version, 1);
    assert_eq!(rolled_back.logprobs, step1.logprobs);
    // A restart serves it too; the run's training state is untouched.
    let conn = p.handle.app().proxy.store.db().read().unwrap();
    let run = &metaclaw_core::store::training::list(&conn, 1).unwrap()[0];
    assert_eq!(run.sampler_path.as_deref(), Some(served));
    assert_eq!((run.step, run.pending.as_deref()), (2, None));

    // Each sample trained once: a second step finds nothing ready.
    let (_, body) = p.admin_post("/admin/train/step", &json!({})).await;
    assert_eq!(json_of(&body)["outcome"], "waiting");
    let store = &p.handle.app().proxy.store;
    let conn = store.db().read().unwrap();
    let counts = metaclaw_core::store::train_queue::counts(&conn, None).unwrap();
    assert_eq!(
        (counts.trained, counts.ready, counts.in_step),
        (3, 0, 0),
        "{counts:?}"
    );
}

impl Product {
    /// One turn of a session of its own, the fake scripted to say "Hello
    /// again." to [`chat_request`]: the header naming who served it, and
    /// its sample.
    async fn probe_served(&self, session: &str) -> (String, SampleRecord) {
        self.script(&[says("Hello again.")]).await;
        let request = Request::post("/v1/chat/completions")
            .header("x-session-id", session)
            .header("x-turn-type", "main")
            .header("host", format!("127.0.0.1:{PORT}"))
            .header("content-type", "application/json")
            .body(Body::from(chat_request(false).to_string()))
            .unwrap();
        let response = self.router.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let served_by = response.headers()["x-metaclaw-served-by"]
            .to_str()
            .unwrap()
            .to_string();
        let _ = axum::body::to_bytes(response.into_body(), 1 << 22).await;
        let turns = self.turns(session).await;
        (served_by, self.sample_of(&turns[0].id).await)
    }

    /// [`Self::probe_served`]'s sample.
    async fn probe(&self, session: &str) -> SampleRecord {
        self.probe_served(session).await.1
    }
}

/// The product with distillation from the dummy's `teacher` (reading text
/// with `tokenizer`, or one token per character), the dummy judge (one
/// vote), `cispo` and manual steps.
async fn distilling(tokenizer: Option<Renderer>) -> Product {
    let mut dummy = metaclaw_mock_upstream::Dummy::default();
    if let Some(renderer) = tokenizer {
        dummy = dummy.with_tokenizer(Arc::new(renderer));
    }
    // `cispo` with its clip bounds: the loss distillation is usually
    // paired with.
    let rl = "  batch_size: 2\n  manual_train_trigger: true\n  prm_model: judge\n  prm_m: 1\n  loss_fn: cispo\n  clip_low_threshold: 0.8\n  clip_high_threshold: 1.2\n";
    let learning = "learning:\n  enabled: true\nopd:\n  enabled: true\n  teacher_url: {upstream}\n  teacher_model: teacher\n  kl_penalty_coef: 0.5\n";
    product_in_with(rl, false, learning, dummy).await
}

impl Product {
    /// Waits until `status` says the teacher's check went `how`
    /// (`checked`, `refused`), with no step asked for; the line.
    async fn teacher_is(&self, how: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let status = self.status().await;
            let line = status["training"]["opd"].as_str().unwrap_or("");
            if line.contains(&format!(": {how}")) {
                return line.to_string();
            }
            assert!(
                Instant::now() < deadline,
                "the teacher's check never {how}: {}",
                status["training"]
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// One-turn sessions, learned from: the dummy judge scores each 0
    /// (nothing happened after the answer).
    async fn unscored_turns(&self, sessions: &[&str]) -> Vec<String> {
        let mut turns = Vec::new();
        for session in sessions {
            self.script(&[says("Paris is in France.")]).await;
            let (status, body) = self
                .post(
                    "/v1/chat/completions",
                    session,
                    &json!({"model": "m", "messages": [{"role": "user", "content": "Where is Paris?"}]}),
                )
                .await;
            assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
            let (status, body) = self
                .admin_post("/admin/learn/now", &json!({"session": session}))
                .await;
            assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
            let session_turns = self.turns(session).await;
            assert_eq!(session_turns.len(), 1);
            assert_eq!(session_turns[0].reward, Some(0.0), "the judge scores 0");
            turns.push(session_turns[0].id.clone());
        }
        turns
    }
}

/// Turns the judge scored 0 carry no reward signal: without distillation
/// their batch is skipped. With it, the teacher's logprobs of the very
/// tokens sampled give them one: the step trains, and what it reports is
/// computed from the teacher's and the sampler's logprob of each sampled
/// token (so the teacher's answer was aligned with the answer's tokens).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distillation_trains_turns_the_judge_scored_zero() {
    let plain = product_in(
        "  batch_size: 2\n  manual_train_trigger: true\n  prm_model: judge\n  prm_m: 1\n",
        false,
        "learning:\n  enabled: true\n",
    )
    .await;
    plain.student_is("ready").await;
    plain.unscored_turns(&["p-1", "p-2"]).await;
    let (_, body) = plain.admin_post("/admin/train/step", &json!({})).await;
    assert_eq!(
        json_of(&body)["outcome"],
        "no_signal",
        "{}",
        String::from_utf8_lossy(&body)
    );

    let p = distilling(Some(renderer())).await;
    p.student_is("ready").await;
    // Checked at start, before any step.
    p.teacher_is("checked").await;
    let turns = p.unscored_turns(&["d-1", "d-2"]).await;
    let (status, body) = p.admin_post("/admin/train/step", &json!({})).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let stepped = json_of(&body);
    assert_eq!(stepped["outcome"], "stepped", "{stepped}");
    assert_eq!(stepped["samples"], 2);
    let (mut sum, mut n) = (0.0, 0usize);
    for turn in &turns {
        let sample = p.sample_of(turn).await;
        for (token, logprob) in sample.tokens.iter().zip(&sample.logprobs) {
            sum += f64::from(*logprob) - metaclaw_mock_upstream::teacher_logprob(*token);
            n += 1;
        }
    }
    let opd = &stepped["opd"];
    assert_eq!(opd["tokens"], n, "{stepped}");
    let reported = opd["reverse_kl"].as_f64().unwrap();
    assert!(
        (reported - sum / n as f64).abs() < 1e-4,
        "reported {reported}, expected {}",
        sum / n as f64
    );
    let status = p.status().await;
    assert!(
        status["training"]["opd"]
            .as_str()
            .unwrap()
            .contains("checked"),
        "{status}"
    );
    assert_eq!(status["training"]["queue"]["trained"], 2, "{status}");
}

/// A teacher whose tokenizer is not the student's is refused at start,
/// before any step: `status` says why at once; the step fails closed and
/// says why, and the samples stay ready for when the teacher is fixed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teacher_with_another_tokenizer_is_refused() {
    let p = distilling(None).await;
    p.student_is("ready").await;
    let opd = p.teacher_is("refused").await;
    assert!(opd.contains("tokenizer is not the student's"), "{opd}");
    p.unscored_turns(&["r-1", "r-2"]).await;
    let (status, body) = p.admin_post("/admin/train/step", &json!({})).await;
    let text = String::from_utf8_lossy(&body);
    assert_ne!(status, StatusCode::OK, "{text}");
    assert!(text.contains("tokenizer is not the student's"), "{text}");
    let status = p.status().await;
    let training = &status["training"];
    assert!(
        training["opd"].as_str().unwrap().contains("refused"),
        "{status}"
    );
    assert!(
        training["last_error"]
            .as_str()
            .unwrap()
            .contains("nothing trains"),
        "{status}"
    );
    assert_eq!(training["queue"]["ready"], 2, "{status}");
    assert_eq!(training["queue"]["trained"], 0, "{status}");
}

/// Group sampling (`rl.group_size: 3`): one call samples three answers,
/// the first is served and the others kept; the session's job judges all
/// three alike (here the `capital-start` scorer: +1, -1, +1); the step
/// trains the served answer and both siblings, centred on the group's mean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_is_sampled_in_one_call_served_once_and_trained_centred() {
    let scorer = common::built_plugin("testing/capital-start.wasm");
    let learning = "learning:\n  enabled: true\n  judge: false\n";
    let rl = "  group_size: 3\n  batch_size: 1\n  manual_train_trigger: true\n";
    let p = product_in_with_dropins(rl, learning, std::slice::from_ref(&scorer)).await;
    p.student_is("ready").await;
    p.script(&[
        says("Paris is in France."),
        says("paris, in France."),
        says("France."),
    ])
    .await;
    let (status, body) = p
        .post(
            "/v1/chat/completions",
            "g-1",
            &json!({"model": "m", "messages": [{"role": "user", "content": "Where is Paris?"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let answer = json_of(&body);
    assert_eq!(
        answer["choices"][0]["message"]["content"], "Paris is in France.",
        "the first answer is served: {answer}"
    );
    let (status, body) = p
        .admin_post("/admin/learn/now", &json!({"session": "g-1"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let turn = p.turns("g-1").await.remove(0);
    let conn = p.handle.app().proxy.store.db().read().unwrap();
    let siblings = metaclaw_core::store::samples::siblings(&conn, &turn.id).unwrap();
    let contents: Vec<&str> = siblings
        .iter()
        .map(|s| s.message["content"].as_str().unwrap())
        .collect();
    assert_eq!(contents, ["paris, in France.", "France."]);
    let rewards: Vec<Option<f64>> = siblings.iter().map(|s| s.reward).collect();
    assert_eq!(rewards, [Some(-1.0), Some(1.0)]);

    let (status, body) = p.admin_post("/admin/train/step", &json!({})).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let stepped = json_of(&body);
    assert_eq!(stepped["outcome"], "stepped", "{stepped}");
    assert_eq!(stepped["samples"], 1, "{stepped}");
    assert_eq!(stepped["siblings"], 2, "{stepped}");
    assert_eq!(stepped["datums"], 3, "{stepped}");
    // The served answer's advantage: 1 - mean(1, -1, 1).
    let advantage: f64 = conn
        .query_row(
            "SELECT advantage FROM turn_samples WHERE turn_id = ?1",
            [&turn.id],
            |r| r.get(0),
        )
        .unwrap();
    assert!((advantage - 2.0 / 3.0).abs() < 1e-9, "{advantage}");
}

impl Product {
    /// A judged two-turn session, then one step on its two samples: the
    /// user moves on after the first answer (`good`: reward +1) or
    /// corrects it (−1); the last answer is 0. The step's outcome.
    async fn judged_step(&self, session: &str, good: bool) -> Value {
        let first = vec![json!({"role": "user", "content": "Where is Paris?"})];
        self.script(&[says("Paris is in France.")]).await;
        let (status, _) = self
            .post(
                "/v1/chat/completions",
                session,
                &json!({"model": "m", "messages": first}),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        let mut second = first.clone();
        second.push(json!({"role": "assistant", "content": "Paris is in France."}));
        second.push(json!({"role": "user", "content": if good {
            "Thanks, now the weather there?"
        } else {
            "No, that's wrong."
        }}));
        self.script(&[says("Sunny.")]).await;
        let (status, _) = self
            .post(
                "/v1/chat/completions",
                session,
                &json!({"model": "m", "messages": second}),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        let (status, body) = self
            .admin_post("/admin/learn/now", &json!({"session": session}))
            .await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        let (status, body) = self.admin_post("/admin/train/step", &json!({})).await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        let stepped = json_of(&body);
        assert_eq!(stepped["outcome"], "stepped", "{stepped}");
        stepped
    }
}

/// The learning-health verdict over a window of 6 steps: three steps whose
/// sessions went well (mean reward +0.5), then three whose first answers
/// were corrected (−0.5): Welch's t over the halves is −3.2, a collapse.
/// Before that, a window that has not fallen far is "flat".
const HEALTH_RL: &str = "  batch_size: 2\n  manual_train_trigger: true\n  prm_model: judge\n  prm_m: 1\n  health_window: 6\n";

#[tokio::test]
async fn a_collapse_pauses_training_while_every_turn_is_still_answered() {
    let p = product_in(HEALTH_RL, false, "learning:\n  enabled: true\n").await;
    p.student_is("ready").await;
    for (i, good) in [true, true, true, false].into_iter().enumerate() {
        p.judged_step(&format!("h{i}"), good).await;
    }
    let health = &p.status().await["training"]["health"];
    assert_eq!(health["state"], "flat", "{health}");
    p.judged_step("h4", false).await;
    let last = p.judged_step("h5", false).await;
    assert_eq!(last["step"], 6);
    let status = p.status().await;
    let training = &status["training"];
    assert_eq!(training["health"]["state"], "collapsing", "{training}");
    assert_eq!(training["health"]["reward_early"], 0.5, "{training}");
    assert_eq!(training["health"]["reward_late"], -0.5, "{training}");
    let paused = training["paused"].as_str().unwrap();
    assert!(
        paused.starts_with("collapsing at step 6: mean reward +0.500 → -0.500"),
        "{paused}"
    );
    assert!(
        training["on_collapse"]
            .as_str()
            .unwrap()
            .starts_with("paused training")
    );

    // Serving goes on (from the same weights); training does not.
    let served = p.probe("h-after").await;
    assert_eq!(served.policy_version, 6);
    let (status, body) = p.admin_post("/admin/train/step", &json!({})).await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert!(String::from_utf8_lossy(&body).contains("metaclaw train resume"));

    // The CLI reads the same verdict from the store, daemon or not.
    let home = p._home.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        (
            common::cli_in(&home, &["train", "status", "--json"]),
            common::cli_in(&home, &["train", "status"]),
        )
    })
    .await
    .unwrap();
    let json: Value = serde_json::from_slice(&out.0.stdout).unwrap();
    assert_eq!(json["health"]["state"], "collapsing", "{json}");
    assert_eq!(json["paused"].as_str(), Some(paused));
    let text = String::from_utf8_lossy(&out.1.stdout);
    assert!(
        text.contains("learning health: collapsing (mean reward +0.500 → -0.500 over steps 1–6")
            && text.contains("training is paused: collapsing at step 6"),
        "{text}"
    );

    // Resumed: judged afresh from the next step on.
    let (status, body) = p.admin_post("/admin/train/resume", &json!({})).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let training = p.status().await["training"].clone();
    assert!(training["paused"].is_null(), "{training}");
    assert_eq!(training["health"]["state"], "not_enough_data", "{training}");
    let (status, _) = p.admin_post("/admin/train/resume", &json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT);
}

#[tokio::test]
async fn a_collapse_rolls_back_to_the_weights_before_the_fall() {
    let rl = format!("{HEALTH_RL}  on_collapse: rollback\n");
    let p = product_in(&rl, false, "learning:\n  enabled: true\n").await;
    p.student_is("ready").await;
    let mut samplers = Vec::new();
    for (i, good) in [true, true, true, false, false, false]
        .into_iter()
        .enumerate()
    {
        let stepped = p.judged_step(&format!("r{i}"), good).await;
        samplers.push(stepped["sampler_path"].as_str().unwrap().to_string());
    }
    let status = p.status().await;
    let training = &status["training"];
    assert_eq!(training["health"]["state"], "collapsing", "{training}");
    assert!(training["paused"].is_null(), "{training}");
    let done = training["on_collapse"].as_str().unwrap();
    assert!(done.starts_with("rolled back"), "{done}");
    // Step 3, the last before the fall, serves, and training goes on from
    // its saved state, the step counter going on (policy versions only go
    // up), with the rollback judged no more.
    assert_eq!(status["student"]["sampler"], samplers[2], "{status}");
    let served = p.probe("r-after").await;
    assert_eq!(
        (served.sampler.as_str(), served.policy_version),
        (samplers[2].as_str(), 3)
    );
    let conn = p.handle.app().proxy.store.db().read().unwrap();
    let run = &metaclaw_core::store::training::list(&conn, 1).unwrap()[0];
    assert!(
        run.state_path
            .as_deref()
            .is_some_and(|s| s.contains("-step000003")),
        "{run:?}"
    );
    assert_eq!(run.state_step, Some(6));
    let mark = metaclaw_core::store::training::health_mark(&conn, &run.id).unwrap();
    assert_eq!((mark.since_step, mark.paused), (6, None));
    let next = p.judged_step("r6", true).await;
    assert_eq!(next["step"], 7, "{next}");
    assert_eq!(
        p.status().await["training"]["health"]["state"],
        "not_enough_data"
    );
}

/// skyrl 0.3.0 returns the untempered model's logprobs: an answer the
/// agent asked for at temperature 0.7 (or with top_p) is served as asked,
/// but its recorded logprobs are not those of the distribution it was drawn
/// from, so it is never trained as on-policy; the queue says why.
#[tokio::test]
async fn an_answer_sampled_at_another_temperature_is_served_but_never_trained() {
    let p = product_in(HEALTH_RL, false, "learning:\n  enabled: true\n").await;
    p.student_is("ready").await;
    let first = vec![json!({"role": "user", "content": "Where is Paris?"})];
    p.script(&[says("Paris is in France.")]).await;
    let (status, _) = p
        .post(
            "/v1/chat/completions",
            "tempered",
            &json!({"model": "m", "messages": first, "temperature": 0.7}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let mut second = first.clone();
    second.push(json!({"role": "assistant", "content": "Paris is in France."}));
    second.push(json!({"role": "user", "content": "No, that's wrong."}));
    p.script(&[says("Sorry.")]).await;
    let (status, _) = p
        .post(
            "/v1/chat/completions",
            "tempered",
            &json!({"model": "m", "messages": second, "top_p": 0.9}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let turns = p.turns("tempered").await;
    let sample = p.sample_of(&turns[0].id).await;
    assert_eq!(
        sample.off_policy.as_deref(),
        Some(
            "sampled with temperature 0.7 as the agent asked; the service's logprobs are those of the untempered model"
        )
    );
    let (status, body) = p
        .admin_post("/admin/learn/now", &json!({"session": "tempered"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    assert_eq!(p.turns("tempered").await[0].reward, Some(-1.0));
    let (_, body) = p.admin_post("/admin/train/step", &json!({})).await;
    assert_eq!(
        json_of(&body)["outcome"],
        "waiting",
        "{}",
        String::from_utf8_lossy(&body)
    );
    let conn = p.handle.app().proxy.store.db().read().unwrap();
    let skipped = metaclaw_core::store::train_queue::skipped_by_reason(&conn, "").unwrap();
    let reasons: Vec<&str> = skipped.iter().map(|(why, _)| why.as_str()).collect();
    assert_eq!(
        reasons,
        vec![
            "off-policy: sampled with temperature 0.7 as the agent asked; the service's logprobs are those of the untempered model",
            "off-policy: sampled with top_p 0.9 as the agent asked; the service's logprobs are those of the untempered model",
        ],
        "{skipped:?}"
    );
}

impl Product {
    /// A judged session of two student turns on a real service, then one
    /// step on its two samples: the user corrects the first answer (the
    /// dummy judge scores it −1, the last 0). The step's outcome.
    async fn corrected_step(&self, session: &str) -> Value {
        let mut messages = vec![json!({"role": "user", "content": "Where is Paris?"})];
        for _ in 0..2 {
            let (status, body) = self
                .post(
                    "/v1/chat/completions",
                    session,
                    &json!({"model": "m", "messages": messages}),
                )
                .await;
            assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
            messages.push(json_of(&body)["choices"][0]["message"].clone());
            messages.push(json!({"role": "user", "content": "No, that's wrong."}));
        }
        let (status, body) = self
            .admin_post("/admin/learn/now", &json!({"session": session}))
            .await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        let learned = String::from_utf8_lossy(&body).to_string();
        let (status, body) = self.admin_post("/admin/train/step", &json!({})).await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        let stepped = json_of(&body);
        if stepped["outcome"] != "stepped" {
            let conn = self.handle.app().proxy.store.db().read().unwrap();
            let notes: Vec<(String, Option<String>, Option<f64>)> = conn
                .prepare(
                    "SELECT s.train_state, s.train_note, t.reward FROM turn_samples s \
                     JOIN turns t ON t.id = s.turn_id WHERE t.session_id = ?1",
                )
                .unwrap()
                .query_map([session], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            panic!("{session}: {stepped}; its samples: {notes:?}; learning: {learned}");
        }
        stepped
    }
}

/// The `rl` lines against skyrl's tiny model: no fallback (an answer is the
/// student's or an error), 8 tokens, a large learning rate (a step's
/// weights differ visibly), steps when asked, the dummy's judge.
fn skyrl_rl(server: &common::skyrl::Skyrl) -> String {
    format!(
        "  model: {}\n  tinker_base_url: {}\n  fallback_to_llm: false\n  thinking: 'off'\n  max_new_tokens: 8\n  lora_rank: 8\n  lora_seed: 1\n  batch_size: 2\n  learning_rate: 0.5\n  manual_train_trigger: true\n  prm_model: judge\n  prm_m: 1\n",
        common::skyrl::model_dir().display(),
        server.proc.url,
    )
}

/// `train rollback` against skyrl 0.3.0, which samples a saved checkpoint
/// through the adapter of the model that saved it, its training model:
/// sampling step 1's checkpoint again served whatever that adapter held
/// (step 2's weights, under step 1's name: skyrl thought them loaded), and
/// an earlier checkpoint it had not loaded overwrote the training weights.
/// Now the rollback is served by a model of its own, loaded from the
/// training state step 1 saved, and the training model keeps step 2's
/// weights. Seen in the learner's logprobs: steps 1 and 2 train on the
/// weights that sampled their batch (KL(sampler‖learner) ≈ 0), step 3 on
/// step 2's weights while its batch was sampled from step 1's (KL far from
/// 0; it was ≈ 0 before the fix: the batch had come from step 2's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_skyrl_a_rollback_serves_earlier_weights_and_training_goes_on_from_the_recorded_state()
 {
    let Some(server) = common::skyrl::start("rollback against skyrl") else {
        return;
    };
    let upstream = common::dummy();
    let rl = skyrl_rl(&server);
    let p = product_with(&upstream.url, &rl, "learning:\n  enabled: true\n").await;
    p.student_is("ready").await;
    let step1 = p.corrected_step("s-1").await;
    let step2 = p.corrected_step("s-2").await;
    let kl = |s: &Value| s["kl_sampler_learner"].as_f64().unwrap();
    let sampler1 = step1["sampler_path"].as_str().unwrap().to_string();
    let (status, body) = p
        .admin_post("/admin/train/rollback", &json!({"sampler": sampler1}))
        .await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    assert_eq!(p.status().await["student"]["policy_version"], 1);
    let step3 = p.corrected_step("s-3").await;
    eprintln!(
        "KL(sampler||learner): step 1 {:+.3e}, step 2 {:+.3e}, step 3 after the rollback {:+.3e}; entropy {} {} {}",
        kl(&step1),
        kl(&step2),
        kl(&step3),
        step1["entropy"],
        step2["entropy"],
        step3["entropy"],
    );
    assert!(
        kl(&step1).abs() < 1e-3 && kl(&step2).abs() < 1e-3,
        "{step1}\n{step2}"
    );
    assert!(
        kl(&step3) > 0.01,
        "step 3 trained on the rolled-back weights: {step3}"
    );
    // The run says so: step 3 follows step 2 on the same training model,
    // and is served.
    assert_eq!(step3["step"], 3);
    assert_eq!(p.status().await["student"]["policy_version"], 3);
    let conn = p.handle.app().proxy.store.db().read().unwrap();
    let run = step3["run"].as_str().unwrap();
    let steps: Vec<(i64, i64)> = metaclaw_core::store::training::steps(&conn, run, 10)
        .unwrap()
        .iter()
        .map(|s| (s.step, s.incarnation))
        .collect();
    assert_eq!(steps, [(3, 1), (2, 1), (1, 1)]);
}

/// Canaries of new weights against skyrl 0.3.0, whose checkpoints are
/// sampled through the adapter of the model that saved them: a step's
/// weights serve the candidate arm while the incumbent (the base weights,
/// from the run's untrained LoRA in a model of its own) serves the control
/// arm, answers alternating between the arms each come from their own
/// weights (the same seed gives the same tokens and logprobs again), and a
/// rollback trains on from the state before the candidate's step: the next
/// step's learner scores its batch as the incumbent that sampled it did
/// (KL(sampler‖learner) ≈ 0; far from 0 had it trained on from the
/// candidate, at this learning rate).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_skyrl_weights_under_test_serve_beside_the_incumbent_and_a_rollback_trains_on_from_before()
 {
    use metaclaw_core::canary::{Arm, arm_for};
    let Some(server) = common::skyrl::start("weights canary against skyrl") else {
        return;
    };
    let upstream = common::dummy();
    let rl = skyrl_rl(&server);
    let canary = "learning:\n  enabled: true\ncanary:\n  weights: true\n  share: 0.5\n";
    let p = product_with(&upstream.url, &rl, canary).await;
    p.student_is("ready").await;
    let base = p.seeded("s-base").await;
    assert_eq!(base.policy_version, 0);
    let step1 = p.corrected_step("s-1").await;
    let kl = |s: &Value| s["kl_sampler_learner"].as_f64().unwrap();
    assert!(kl(&step1).abs() < 1e-3, "{step1}");
    let id = step1["under_test"]
        .as_i64()
        .unwrap_or_else(|| panic!("not under test: {step1}"));
    let status = p.status().await;
    assert_eq!(status["student"]["policy_version"], 0, "{status}");
    let incumbent = status["student"]["sampler"].as_str().unwrap().to_string();
    assert!(incumbent.ends_with("-serve-step000000"), "{status}");

    let of = |want: Arm| {
        (0..)
            .map(move |i| format!("s-{}-{i}", want.as_str()))
            .filter(move |s| arm_for(id, s, 0.5) == want)
    };
    let (mut candidate, mut control) = (of(Arm::Candidate), of(Arm::Control));
    let c1 = p.seeded(&candidate.next().unwrap()).await;
    let k1 = p.seeded(&control.next().unwrap()).await;
    let c2 = p.seeded(&candidate.next().unwrap()).await;
    let k2 = p.seeded(&control.next().unwrap()).await;
    assert_eq!((c1.policy_version, k1.policy_version), (1, 0));
    assert_eq!(k1.sampler, incumbent);
    // The incumbent is the base model's weights (the LoRA's B starts at 0).
    assert_eq!(k1.tokens, base.tokens);
    for (a, b) in k1.logprobs.iter().zip(&base.logprobs) {
        assert!(
            (a - b).abs() < 1e-4,
            "{:?} vs {:?}",
            k1.logprobs,
            base.logprobs
        );
    }
    assert_ne!(
        c1.logprobs, k1.logprobs,
        "the candidate samples as the incumbent"
    );
    // Alternating arms: each answer from its own weights again.
    assert_eq!((&c2.tokens, &c2.logprobs), (&c1.tokens, &c1.logprobs));
    assert_eq!((&k2.tokens, &k2.logprobs), (&k1.tokens, &k1.logprobs));

    // Rolled back by hand: the incumbent serves everyone, and training
    // goes on from the state before step 1.
    let (status, body) = p
        .admin_post(
            &format!("/admin/experiments/{id}/decide"),
            &json!({"decision": "rollback", "reason": "checking"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    assert_eq!(json_of(&body)["experiment"]["state"], "rolled_back");
    let back = p.seeded(&candidate.next().unwrap()).await;
    assert_eq!((back.policy_version, &back.sampler), (0, &incumbent));
    let step2 = p.corrected_step("s-2").await;
    eprintln!(
        "KL(sampler||learner): step 1 {:+.3e}, step 2 after the rollback {:+.3e}",
        kl(&step1),
        kl(&step2)
    );
    assert_eq!(step2["step"], 2, "{step2}");
    assert!(
        kl(&step2).abs() < 1e-3,
        "step 2 trained on from the rolled-back weights: {step2}"
    );
}

impl Product {
    /// One turn of a session of its own with a fixed sampling seed: its
    /// sample.
    async fn seeded(&self, session: &str) -> SampleRecord {
        let body = json!({"model": "m", "seed": 7, "max_tokens": 8,
                          "messages": [{"role": "user", "content": "Say hello."}]});
        let (status, bytes) = self.post("/v1/chat/completions", session, &body).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "{}",
            String::from_utf8_lossy(&bytes)
        );
        let turns = self.turns(session).await;
        self.sample_of(&turns[0].id).await
    }
}

/// Agents with a mode of their own (`agents.<id>`), one daemon: agent `a`
/// is served from its own run's LoRA and its steps train its samples
/// alone; agent `b` (`skills_only`) is answered by llm; the default agent
/// by the shared run, whose queue a's step leaves as it was, and whose own
/// step trains the default agent's samples alone.
#[tokio::test]
async fn each_agent_is_served_and_trained_by_its_own_mode_and_run() {
    let rl = "  batch_size: 2\n  manual_train_trigger: true\n  prm_model: judge\n  prm_m: 1\n";
    let learning = "learning:\n  enabled: true\nagents:\n  a:\n    mode: rl\n    rl:\n      lora_rank: 4\n  b:\n    mode: skills_only\n";
    let p = product_in(rl, false, learning).await;
    p.student_is("ready").await;
    p.agents_student_is("a", "ready").await;

    // A corrected session each for the default agent and a (rewards -1
    // and 0: a step has a signal), one turn for b.
    // (The shared run's first: a step of a that took the oldest ready
    // samples of any run would take those.)
    for (agent, session) in [(None, "s-shared"), (Some("a"), "s-a")] {
        p.corrected_session(agent, session).await;
    }
    let ask = json!({"model": "m", "messages": [{"role": "user", "content": "Where is Rome?"}]});
    let (status, _) = p.post_for(Some("b"), "s-b", &ask).await;
    assert_eq!(status, StatusCode::OK);
    let served = |turns: Vec<TurnRow>| -> Vec<Option<String>> {
        turns.into_iter().map(|t| t.served_by).collect()
    };
    let student = Some("student".to_string());
    assert_eq!(
        served(p.turns("s-a").await),
        [student.clone(), student.clone()]
    );
    assert_eq!(
        served(p.turns("s-shared").await),
        [student.clone(), student]
    );
    assert_eq!(served(p.turns("s-b").await), [Some("llm".to_string())]);
    // Learning from one agent's sessions (`learn now --agent`): not
    // another agent's session.
    let (status, body) = p
        .admin_post("/admin/learn/now", &json!({"session": "s-b", "agent": "a"}))
        .await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "{}",
        String::from_utf8_lossy(&body)
    );
    let (status, body) = p
        .admin_post("/admin/learn/now", &json!({"session": "s-a", "agent": "a"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let learned = json_of(&body);
    assert_eq!(learned["jobs"][0]["session_id"], "s-a", "{learned}");
    for session in ["s-shared", "s-b"] {
        let (status, body) = p
            .admin_post("/admin/learn/now", &json!({"session": session}))
            .await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    }

    // a's step: a's two samples, nothing of the shared run's.
    let (status, body) = p.admin_post("/admin/train/step?agent=a", &json!({})).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let stepped = json_of(&body);
    assert_eq!(
        (stepped["outcome"].as_str(), stepped["samples"].as_u64()),
        (Some("stepped"), Some(2)),
        "{stepped}"
    );
    let status = p.status().await;
    assert_eq!(
        status["agents"]["a"]["training"]["queue"]["trained"], 2,
        "{status}"
    );
    assert_eq!(
        status["agents"]["a"]["student"]["policy_version"], 1,
        "{status}"
    );
    assert_eq!(status["training"]["queue"]["ready"], 2, "{status}");
    assert_eq!(status["training"]["queue"]["trained"], 0, "{status}");
    assert_eq!(status["student"]["policy_version"], 0, "{status}");
    assert_eq!(status["agents"]["b"]["own_run"], false, "{status}");
    assert!(status["agents"]["b"]["student"].is_null(), "{status}");

    // The shared run's step: the default agent's two samples alone.
    let (status, body) = p.admin_post("/admin/train/step", &json!({})).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    assert_eq!(
        json_of(&body)["samples"],
        2,
        "{}",
        String::from_utf8_lossy(&body)
    );

    // In the store: each sample with its run, two runs of their own.
    let store = &p.handle.app().proxy.store;
    store.flush().await;
    let conn = store.db().read().unwrap();
    let mut samples: Vec<(String, String, String)> = conn
        .prepare(
            "SELECT t.session_id, s.run_agent, r.agent FROM turn_samples s
             JOIN turns t ON t.id = s.turn_id JOIN training_runs r ON r.id = s.run_id",
        )
        .unwrap()
        .query_map((), |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    samples.sort();
    let row = |s: &str, a: &str| (s.to_string(), a.to_string(), a.to_string());
    assert_eq!(
        samples,
        [
            row("s-a", "a"),
            row("s-a", "a"),
            row("s-shared", ""),
            row("s-shared", "")
        ]
    );
    let mut runs: Vec<(String, u32, Option<String>)> = conn
        .prepare("SELECT agent, lora_rank, model_id FROM training_runs")
        .unwrap()
        .query_map((), |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    runs.sort();
    assert_eq!((runs.len(), runs[0].1, runs[1].1), (2, 32, 4), "{runs:?}");
    assert_ne!(runs[0].2, runs[1].2, "one LoRA each: {runs:?}");

    // The CLI reads one run: `train --agent a status`, a's queue and run.
    let home = p._home.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        ["a", "b", "zz"]
            .map(|agent| common::cli_in(&home, &["train", "--agent", agent, "status", "--json"]))
    })
    .await
    .unwrap();
    let a: Value = serde_json::from_slice(&out[0].stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out[0].stderr)));
    assert_eq!(
        (a["run"]["agent"].as_str(), a["run"]["lora_rank"].as_u64()),
        (Some("a"), Some(4)),
        "{a}"
    );
    assert_eq!(
        (a["queue"]["trained"].as_u64(), a["queue"]["ready"].as_u64()),
        (Some(2), Some(0)),
        "{a}"
    );
    for (out, says) in [(&out[1], "agents.b.mode"), (&out[2], "no run of its own")] {
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{err}");
    }

    // b has no run: asking for its step says why.
    let (status, body) = p.admin_post("/admin/train/step?agent=b", &json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        String::from_utf8_lossy(&body).contains("agents.b.mode"),
        "{}",
        String::from_utf8_lossy(&body)
    );
}

impl Product {
    /// Waits until agent `agent`'s own student is `state`.
    async fn agents_student_is(&self, agent: &str, state: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let status = self.status().await;
            if status["agents"][agent]["student"]["state"] == state {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "agent {agent}'s student never became {state}: {}",
                status["agents"]
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A main turn of `agent` (`X-Agent-Id`; none: the default agent).
    async fn post_for(
        &self,
        agent: Option<&str>,
        session: &str,
        body: &Value,
    ) -> (StatusCode, Vec<u8>) {
        let mut request = Request::post("/v1/chat/completions")
            .header("x-session-id", session)
            .header("x-turn-type", "main");
        if let Some(agent) = agent {
            request = request.header("x-agent-id", agent);
        }
        self.send(request, body).await
    }

    /// Two turns of `agent`, the second correcting the first (the dummy
    /// judge: -1, then 0), answered by whichever student serves it.
    async fn corrected_session(&self, agent: Option<&str>, session: &str) {
        let first = vec![
            json!({"role": "system", "content": "You are a helpful assistant."}),
            json!({"role": "user", "content": "Where is Paris?"}),
        ];
        self.script(&[says("Paris is in Spain.")]).await;
        let (status, _) = self
            .post_for(agent, session, &json!({"model": "m", "messages": first}))
            .await;
        assert_eq!(status, StatusCode::OK);
        let mut second = first.clone();
        second.push(json!({"role": "assistant", "content": "Paris is in Spain."}));
        second.push(json!({"role": "user", "content": "No, that's wrong. Paris is in France."}));
        self.script(&[says("Sorry: Paris is in France.")]).await;
        let (status, _) = self
            .post_for(agent, session, &json!({"model": "m", "messages": second}))
            .await;
        assert_eq!(status, StatusCode::OK);
    }
}
