//! `/v1/messages` (Anthropic) and `/v1/responses` (OpenAI Responses) end
//! to end: OpenClaw's captured requests through the real binary to the
//! dummy upstream, streaming and not, with tool use; an Anthropic upstream
//! passed through; and `llm.fallbacks`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

/// One skill the fixtures' user messages clearly ask for.
const SKILL: &str = "---\nname: capture-protocol\ndescription: How to answer a capture request for metaclaw.\ntags: [capture, metaclaw]\nversion: 1.0.0\n---\n# Capture protocol\n\nWhen asked to capture, answer with the word CAPTURED.\n";

/// metaclaw with one skill (and its retriever loaded) in front of `up`.
fn start_with_skill(up: &Proc, extra: &str) -> (Metaclaw, tempfile::TempDir) {
    let skills = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(skills.path().join("capture-protocol")).unwrap();
    std::fs::write(
        skills.path().join("capture-protocol/SKILL.md"),
        SKILL.as_bytes(),
    )
    .unwrap();
    let config = format!(
        "llm:\n  api_base: {{upstream}}\n  model_id: agent\n  force_model: true\n{extra}skills:\n  dir: {}\n",
        skills.path().display()
    );
    let mc = Metaclaw::start(&up.url, &config);
    poll_json(mc.home.path(), &["status", "--json"], |v| {
        skills_ready(v, 1)
    });
    (mc, skills)
}

async fn post(url: &str, body: &Value, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut req = client()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

/// `(event name, data)` of each event of an SSE body; data as JSON where
/// it is JSON.
async fn events(response: reqwest::Response) -> Vec<(String, Value)> {
    sse_events(&response.text().await.unwrap())
        .into_iter()
        .map(|(name, data)| {
            let value = serde_json::from_str(&data).unwrap_or(Value::String(data));
            (name, value)
        })
        .collect()
}

/// What the dummy received for `model`, oldest first.
async fn upstream_saw(up: &Proc, model: &str) -> Vec<Value> {
    dummy_requests(&up.url, model).await
}

fn runtime_session_id(text: &str) -> String {
    let at = text.find("sessionId=").unwrap() + "sessionId=".len();
    text[at..at + 36].to_string()
}

/// The fixture's headers minus the per-connection ones.
fn fixture_headers(f: &Value) -> Vec<(String, String)> {
    f["headers"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "host" | "content-length" | "connection" | "accept-encoding"
            )
        })
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect()
}

fn as_refs(h: &[(String, String)]) -> Vec<(&str, &str)> {
    h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

fn text_of_anthropic(events: &[(String, Value)]) -> String {
    events
        .iter()
        .filter(|(n, v)| n == "content_block_delta" && v["delta"]["type"] == "text_delta")
        .map(|(_, v)| v["delta"]["text"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn openclaws_anthropic_request_streams_back_as_anthropic_events() {
    let up = dummy();
    let (mc, _skills) = start_with_skill(&up, "");
    let f = fixture("anthropic_messages.json");
    let mut body = f["body"].clone();
    // Agents ask for their model's whole output limit (Hermes: 65,536);
    // skills still fit.
    body["max_tokens"] = json!(65536);
    let body = &body;
    let headers = fixture_headers(&f);
    let response = post(
        &format!("{}/v1/messages", mc.url()),
        body,
        &as_refs(&headers),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    assert_eq!(response.headers()["x-metaclaw-skills"], "capture-protocol");
    let events = events(response).await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(names.last(), Some(&"message_stop"));
    assert_eq!(names[names.len() - 2], "message_delta");
    assert_eq!(
        events[names.len() - 2].1["delta"]["stop_reason"],
        "end_turn"
    );
    assert!(names.contains(&"content_block_start") && names.contains(&"content_block_stop"));
    // The dummy echoes the user's message.
    let user_text = body["messages"][0]["content"][0]["text"].as_str().unwrap();
    assert_eq!(text_of_anthropic(&events), user_text);

    // The upstream (OpenAI-style here) saw OpenClaw's whole system prompt,
    // then the skills block.
    let seen = upstream_saw(&up, "agent").await;
    let system = seen.last().unwrap()["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(system.starts_with("<!-- openclaw:attempt:STABLE -->"));
    let skills_at = system.find("<!-- metaclaw:skills -->").unwrap();
    assert!(system[..skills_at].contains(body["system"][1]["text"].as_str().unwrap()));
    assert!(system[skills_at..].contains("When asked to capture"));

    // Recorded under OpenClaw's sessionId (its runtime line is in the
    // system prompt in this mode), as an Anthropic turn in chat form.
    let sid = runtime_session_id(body["system"][1]["text"].as_str().unwrap());
    let session = mc.turns(&sid, 1);
    let turn = &session["turns"][0];
    assert_eq!(turn["api"], "messages");
    assert_eq!(turn["status"], "ok");
    assert_eq!(turn["model"], "fake-claude");
    assert!(
        turn["response"]
            .to_string()
            .contains("capture metaclaw-anthropic")
    );
    // OpenClaw's per-call internal context is forwarded, never recorded.
    let users: Vec<&Value> = turn["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .collect();
    assert_eq!(users.len(), 1);
    assert!(
        users[0]["content"]
            .to_string()
            .contains("capture metaclaw-anthropic")
    );
}

#[tokio::test]
async fn anthropic_tool_use_round_trip_streamed_and_whole() {
    let up = dummy();
    let mc = Metaclaw::start(
        &up.url,
        "llm:\n  api_base: {upstream}\n  model_id: agent\n  force_model: true\n",
    );
    let url = format!("{}/v1/messages", mc.url());
    let tools = json!([{"name": "read", "description": "Read a file", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]);
    let ask = json!({"model": "claude-x", "max_tokens": 100, "stream": true, "tools": tools,
        "system": [{"type": "text", "text": "You are terse."}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "read {\"path\": \"hello.txt\"}"}]}]});
    let events = events(post(&url, &ask, &[("x-session-id", "anth-tools")]).await).await;
    let start = events
        .iter()
        .find(|(n, v)| n == "content_block_start" && v["content_block"]["type"] == "tool_use")
        .expect("a tool_use block");
    assert_eq!(start.1["content_block"]["name"], "read");
    let id = start.1["content_block"]["id"].as_str().unwrap().to_string();
    let json: String = events
        .iter()
        .filter(|(_, v)| v["delta"]["type"] == "input_json_delta")
        .map(|(_, v)| v["delta"]["partial_json"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&json).unwrap(),
        json!({"path": "hello.txt"})
    );
    let delta = events.iter().find(|(n, _)| n == "message_delta").unwrap();
    assert_eq!(delta.1["delta"]["stop_reason"], "tool_use");

    // The result goes back as a tool_result; the answer is not streamed.
    let mut follow = ask.clone();
    follow["stream"] = json!(false);
    follow["messages"].as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "read", "input": {"path": "hello.txt"}}]}),
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "secret XYZZY"}]}),
    ]);
    let response = post(&url, &follow, &[("x-session-id", "anth-tools")]).await;
    assert_eq!(response.status(), 200);
    let message: Value = response.json().await.unwrap();
    assert_eq!(message["type"], "message");
    assert_eq!(message["role"], "assistant");
    assert_eq!(message["stop_reason"], "end_turn");
    assert_eq!(
        message["content"][0]["text"],
        "The tool returned: secret XYZZY"
    );
    // The upstream saw a tool message answering the call it made.
    let seen = upstream_saw(&up, "agent").await;
    let last = seen.last().unwrap()["messages"].as_array().unwrap().clone();
    assert_eq!(last[2]["tool_calls"][0]["id"], id.as_str());
    assert_eq!(
        last[3],
        json!({"role": "tool", "tool_call_id": id, "content": "secret XYZZY"})
    );
    let session = mc.turns("anth-tools", 2);
    assert_eq!(
        session["turns"][0]["response"]["choices"][0]["finish_reason"],
        "tool_calls"
    );
}

#[tokio::test]
async fn openclaws_responses_request_streams_back_as_responses_events() {
    let up = dummy();
    let (mc, _skills) = start_with_skill(&up, "");
    let f = fixture("openai_responses.json");
    let mut body = f["body"].clone();
    let headers = fixture_headers(&f);
    let url = format!("{}/v1/responses", mc.url());
    let response = post(&url, &body, &as_refs(&headers)).await;
    assert_eq!(response.status(), 200);
    let events = events(response).await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[0], "response.created");
    assert_eq!(*names.last().unwrap(), "response.completed");
    for (i, (name, v)) in events.iter().enumerate() {
        assert_eq!(v["type"], name.as_str());
        assert_eq!(v["sequence_number"], i as u64);
    }
    let text: String = events
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, v)| v["delta"].as_str().unwrap().to_string())
        .collect();
    let user_text = body["input"][1]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(text, user_text);
    let done = &events.last().unwrap().1["response"];
    assert_eq!(done["status"], "completed");
    assert_eq!(done["output"][0]["content"][0]["text"], user_text);

    // Skills after OpenClaw's system prompt; session from its runtime line.
    let seen = upstream_saw(&up, "agent").await;
    let system = seen.last().unwrap()["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(system.contains("You are a personal assistant running inside OpenClaw"));
    assert!(system.contains("<!-- metaclaw:skills -->"));
    let sid = runtime_session_id(body["input"][0]["content"][0]["text"].as_str().unwrap());
    let session = mc.turns(&sid, 1);
    assert_eq!(session["turns"][0]["api"], "responses");
    assert_eq!(session["turns"][0]["status"], "ok");

    // Not streamed: one `response` object.
    body["stream"] = json!(false);
    let response = post(&url, &body, &as_refs(&headers)).await;
    assert_eq!(response.status(), 200);
    let r: Value = response.json().await.unwrap();
    assert_eq!(r["object"], "response");
    assert_eq!(r["status"], "completed");
    assert_eq!(r["output"][0]["type"], "message");
    assert_eq!(r["output"][0]["content"][0]["text"], user_text);
    assert!(r["usage"]["input_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn responses_tool_use_round_trip() {
    let up = dummy();
    let mc = Metaclaw::start(
        &up.url,
        "llm:\n  api_base: {upstream}\n  model_id: agent\n  force_model: true\n",
    );
    let url = format!("{}/v1/responses", mc.url());
    let tools = json!([{"type": "function", "name": "read", "description": "Read a file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}]);
    let ask = json!({"model": "m", "stream": true, "store": false, "tools": tools,
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "read {\"path\": \"a.txt\"}"}]}]});
    let events = events(post(&url, &ask, &[]).await).await;
    let added = events
        .iter()
        .find(|(n, v)| n == "response.output_item.added" && v["item"]["type"] == "function_call")
        .expect("a function_call item");
    assert_eq!(added.1["item"]["name"], "read");
    let done = &events.last().unwrap().1["response"];
    let call = &done["output"][0];
    assert_eq!(call["type"], "function_call");
    assert_eq!(
        serde_json::from_str::<Value>(call["arguments"].as_str().unwrap()).unwrap(),
        json!({"path": "a.txt"})
    );
    let call_id = call["call_id"].as_str().unwrap();
    let mut follow = ask.clone();
    follow["stream"] = json!(false);
    follow["input"].as_array_mut().unwrap().extend([
        json!({"type": "function_call", "call_id": call_id, "name": "read", "arguments": call["arguments"]}),
        json!({"type": "function_call_output", "call_id": call_id, "output": "XYZZY"}),
    ]);
    let r: Value = post(&url, &follow, &[]).await.json().await.unwrap();
    assert_eq!(
        r["output"][0]["content"][0]["text"],
        "The tool returned: XYZZY"
    );
}

#[tokio::test]
async fn an_anthropic_upstream_is_passed_through_and_recorded() {
    let up = dummy();
    let (mc, _skills) = start_with_skill(
        &up,
        "  api_format: anthropic\n  api_key: sk-ant-configured-key-0123456789\n",
    );
    let f = fixture("anthropic_messages.json");
    let body = &f["body"];
    let headers = fixture_headers(&f);
    let response = post(
        &format!("{}/v1/messages", mc.url()),
        body,
        &as_refs(&headers),
    )
    .await;
    assert_eq!(response.status(), 200);
    let events = events(response).await;
    let user_text = body["messages"][0]["content"][0]["text"].as_str().unwrap();
    assert_eq!(text_of_anthropic(&events), user_text);
    // The upstream got the agent's own body: its system blocks and cache
    // marks as sent, the skills as one more block, the model forced.
    let seen = upstream_saw(&up, "agent").await;
    let sent = seen.last().unwrap();
    let system = sent["system"].as_array().unwrap();
    assert_eq!(system.len(), 3);
    assert_eq!(system[0], body["system"][0]);
    assert_eq!(system[1], body["system"][1]);
    assert!(
        system[2]["text"]
            .as_str()
            .unwrap()
            .starts_with("<!-- metaclaw:skills -->")
    );
    assert_eq!(sent["messages"], body["messages"]);
    assert_eq!(sent["tools"], body["tools"]);
    // Recorded like any other turn (the Anthropic stream assembled).
    let sid = runtime_session_id(body["system"][1]["text"].as_str().unwrap());
    let session = mc.turns(&sid, 1);
    let turn = &session["turns"][0];
    assert_eq!(turn["status"], "ok");
    assert_eq!(
        turn["response"]["choices"][0]["message"]["content"],
        user_text
    );
    assert!(
        !serde_json::to_string(&session)
            .unwrap()
            .contains("sk-ant-configured")
    );

    // A chat client in front of the same Anthropic upstream.
    let events = read_sse(
        post_chat(
            &format!("{}/v1", mc.url()),
            &chat("any", "hello there", true),
            &[],
        )
        .await,
        Instant::now(),
    )
    .await;
    assert_eq!(content_of(&events), "hello there");
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let whole: Value = post_chat(
        &format!("{}/v1", mc.url()),
        &chat("any", "hi again", false),
        &[],
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(whole["choices"][0]["message"]["content"], "hi again");
    assert_eq!(whole["object"], "chat.completion");
}

#[tokio::test]
async fn fallbacks_answer_when_the_primary_fails_before_answering() {
    let up = dummy();
    // A 5xx, a 429, and a primary that refuses connections.
    for (base, model) in [
        (up.url.as_str(), "error-500"),
        (up.url.as_str(), "error-429"),
        ("http://127.0.0.1:9/v1", "echo"),
    ] {
        let primary = format!("{base} {model}");
        let config = format!(
            "llm:\n  api_base: {base}\n  model_id: {model}\n  force_model: true\n  fallbacks:\n    - api_base: {{upstream}}\n      model_id: echo\n"
        );
        let mc = Metaclaw::start(&up.url, &config);
        let base = format!("{}/v1", mc.url());
        let response = post_chat(
            &base,
            &chat("x", "via fallback", false),
            &[("x-session-id", "fb")],
        )
        .await;
        assert_eq!(response.status(), 200, "{primary}");
        assert_eq!(response.headers()["x-metaclaw-fallback"], "1");
        let v: Value = response.json().await.unwrap();
        assert_eq!(v["choices"][0]["message"]["content"], "via fallback");
        let events = read_sse(
            post_chat(
                &base,
                &chat("x", "streamed via fallback", true),
                &[("x-session-id", "fb")],
            )
            .await,
            Instant::now(),
        )
        .await;
        assert_eq!(content_of(&events), "streamed via fallback", "{primary}");
        let session = mc.turns("fb", 2);
        assert_eq!(session["turns"][0]["upstream_model"], "echo");
        assert_eq!(session["turns"][0]["status"], "ok");
    }
    // Every fallback failing: the last one's error, as JSON.
    let mc = Metaclaw::start(
        &up.url,
        "llm:\n  api_base: {upstream}\n  model_id: error-503\n  force_model: true\n  fallbacks:\n    - api_base: {upstream}\n      model_id: error-502\n",
    );
    let response = post_chat(&format!("{}/v1", mc.url()), &chat("x", "hi", false), &[]).await;
    assert_eq!(response.status(), 502);
    let v: Value = response.json().await.unwrap();
    assert!(v["error"]["message"].is_string());
}

#[tokio::test]
async fn a_stream_cut_midway_ends_with_an_error_event_and_no_retry() {
    use futures_util::StreamExt;
    let fallback = dummy();
    for (route, body) in [
        ("chat/completions", chat("x", "hi", true)),
        (
            "messages",
            json!({"model": "x", "max_tokens": 50, "stream": true, "messages": [{"role": "user", "content": "hi"}]}),
        ),
        (
            "responses",
            json!({"model": "x", "stream": true, "input": "hi"}),
        ),
    ] {
        let mut primary = dummy();
        let config = format!(
            "llm:\n  api_base: {{upstream}}\n  model_id: stream-10-100\n  force_model: true\n  fallbacks:\n    - api_base: {}\n      model_id: echo\n",
            fallback.url
        );
        let mc = Metaclaw::start(&primary.url, &config);
        let response = post(&format!("{}/v1/{route}", mc.url()), &body, &[]).await;
        assert_eq!(response.status(), 200);
        let mut stream = response.bytes_stream();
        let mut got = String::new();
        let started = Instant::now();
        // The first chunks arrive; then the primary dies mid-stream.
        while !got.contains("chunk-2") && started.elapsed() < Duration::from_secs(10) {
            got.push_str(&String::from_utf8_lossy(
                &stream.next().await.unwrap().unwrap(),
            ));
        }
        let _ = primary.child.kill();
        while let Some(chunk) = stream.next().await {
            got.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
        assert!(!got.contains("chunk-10"), "{route}: {got}");
        match route {
            "messages" => {
                assert!(got.contains("event: error"), "{got}");
                assert!(!got.contains("message_stop"), "{got}");
            }
            "responses" => {
                assert!(got.contains("event: error"), "{got}");
                assert!(!got.contains("response.completed"), "{got}");
            }
            _ => {
                assert!(got.contains("\"error\""), "{got}");
                assert!(!got.contains("[DONE]"), "{got}");
            }
        }
        // The fallback was never asked: no silent retry once bytes went out.
        assert!(upstream_saw(&fallback, "echo").await.is_empty(), "{route}");
    }
}

#[tokio::test]
async fn anthropic_clients_get_anthropic_shaped_errors() {
    let up = dummy();
    let mc = Metaclaw::start(
        &up.url,
        "llm:\n  api_base: {upstream}\n  model_id: echo\nproxy:\n  api_key: proxy-token-123\n",
    );
    let url = format!("{}/v1/messages", mc.url());
    let body =
        json!({"model": "echo", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
    // No token: 401 in Anthropic's shape.
    let response = post(&url, &body, &[]).await;
    assert_eq!(response.status(), 401);
    let v: Value = response.json().await.unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "authentication_error");
    // x-api-key is accepted, as is a bearer token.
    for header in [
        ("x-api-key", "proxy-token-123"),
        ("authorization", "Bearer proxy-token-123"),
    ] {
        let response = post(&url, &body, &[header]).await;
        assert_eq!(response.status(), 200, "{header:?}");
        let v: Value = response.json().await.unwrap();
        assert_eq!(v["content"][0]["text"], "hi");
    }
    let auth = [("x-api-key", "proxy-token-123")];
    // Bad bodies: 400 saying what is wrong.
    for (bad, says) in [
        (json!({"model": "echo"}), "`messages` is required"),
        (
            json!({"model": "echo", "messages": [{"role": "tool", "content": "x"}]}),
            "messages[0].role",
        ),
    ] {
        let response = post(&url, &bad, &auth).await;
        assert_eq!(response.status(), 400);
        let v: Value = response.json().await.unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(says),
            "{v}"
        );
    }
    let response = client()
        .post(&url)
        .header("content-type", "application/json")
        .header("x-api-key", "proxy-token-123")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let v: Value = response.json().await.unwrap();
    assert_eq!(v["type"], "error");
    // An upstream error, in Anthropic's shape with the upstream's status.
    let response = post(&url, &json!({"model": "error-429", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}), &auth).await;
    assert_eq!(response.status(), 429);
    let v: Value = response.json().await.unwrap();
    assert_eq!(v["error"]["type"], "rate_limit_error");
    // The Responses API refuses what a stateless proxy cannot do, clearly.
    let response = post(
        &format!("{}/v1/responses", mc.url()),
        &json!({"model": "echo", "input": "hi", "previous_response_id": "resp_1"}),
        &[("authorization", "Bearer proxy-token-123")],
    )
    .await;
    assert_eq!(response.status(), 400);
    let v: Value = response.json().await.unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("previous_response_id")
    );
}
