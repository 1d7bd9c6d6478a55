//! The proxy, end to end: real binary, real dummy upstream, real HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_methods)] // tests own and join their threads and servers

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

const PLAIN: &str = "llm:\n  api_base: {upstream}\n";

#[tokio::test]
async fn a_stream_arrives_chunk_by_chunk_with_the_upstreams_timing() {
    let up = dummy();
    let mc = Metaclaw::start(&up.url, PLAIN);
    let body = chat("stream-10-100", "go", true);

    let t = Instant::now();
    let direct = read_sse(post_chat(&up.url, &body, &[]).await, t).await;
    let t = Instant::now();
    let proxied = read_sse(post_chat(&format!("{}/v1", mc.url()), &body, &[]).await, t).await;

    // Same chunks, same content, byte for byte.
    assert_eq!(deltas(&proxied), deltas(&direct));
    let expected: String = (1..=10).map(|i| format!("chunk-{i} ")).collect();
    assert_eq!(content_of(&proxied), expected);
    assert_eq!(proxied.last().unwrap().1, "[DONE]");

    // Not bunched at the end: chunks arrive ~100 ms apart, the first at once.
    let times: Vec<Duration> = proxied
        .iter()
        .filter(|(_, d)| d.contains("chunk-"))
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(times.len(), 10);
    assert!(
        times[0] < Duration::from_millis(500),
        "first chunk after {:?}",
        times[0]
    );
    let spread = times[9] - times[0];
    assert!(
        spread >= Duration::from_millis(850),
        "chunks bunched: spread {spread:?}"
    );
    let gaps = times
        .windows(2)
        .filter(|w| w[1] - w[0] >= Duration::from_millis(50))
        .count();
    assert!(
        gaps >= 8,
        "only {gaps} of 9 gaps look like the upstream's 100 ms: {times:?}"
    );
}

#[tokio::test]
async fn tool_call_deltas_pass_through_intact_and_are_merged_in_the_record() {
    let up = dummy();
    let mc = Metaclaw::start(&up.url, PLAIN);
    let mut body = chat("tool-call-2", "use read {\"path\":\"hello.txt\"}", true);
    body["tools"] = json!([
        {"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}},
    ]);
    let t = Instant::now();
    let direct = read_sse(post_chat(&up.url, &body, &[]).await, t).await;
    let proxied = read_sse(
        post_chat(
            &format!("{}/v1", mc.url()),
            &body,
            &[("x-session-id", "tools-1")],
        )
        .await,
        t,
    )
    .await;
    assert_eq!(deltas(&proxied), deltas(&direct));
    // Every tool-call delta carries its index.
    for d in deltas(&proxied) {
        for call in d["choices"][0]["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            assert!(call["index"].is_u64(), "{call}");
        }
    }
    let session = mc.turns("tools-1", 1);
    let message = &session["turns"][0]["response"]["choices"][0]["message"];
    assert_eq!(message["tool_calls"][0]["function"]["name"], "read");
    assert_eq!(
        message["tool_calls"][0]["function"]["arguments"],
        "{\"path\":\"hello.txt\"}"
    );
    assert_eq!(message["tool_calls"][1]["function"]["name"], "ls");
    assert_eq!(
        session["turns"][0]["response"]["choices"][0]["finish_reason"],
        "tool_calls"
    );
    assert_eq!(session["turns"][0]["status"], "ok");
}

#[tokio::test]
async fn a_non_streamed_answer_is_returned_as_the_upstream_sent_it_and_recorded() {
    let up = dummy();
    let mc = Metaclaw::start(&up.url, PLAIN);
    let body = chat("echo", "Say PONG", false);
    let direct: Value = post_chat(&up.url, &body, &[]).await.json().await.unwrap();
    let response = post_chat(
        &format!("{}/v1", mc.url()),
        &body,
        &[("x-session-id", "plain-1")],
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-metaclaw-session-id"], "plain-1");
    let proxied: Value = response.json().await.unwrap();
    assert_eq!(proxied["choices"], direct["choices"]);
    assert_eq!(proxied["choices"][0]["message"]["content"], "Say PONG");

    let session = mc.turns("plain-1", 1);
    let turn = &session["turns"][0];
    assert_eq!(session["session"]["source"], "header");
    assert_eq!(turn["status"], "ok");
    assert_eq!(turn["stream"], false);
    assert_eq!(turn["model"], "echo");
    assert_eq!(turn["user"], "Say PONG");
    assert_eq!(
        turn["response"]["choices"][0]["message"]["content"],
        "Say PONG"
    );
    assert!(turn["usage"]["total_tokens"].as_u64().unwrap() > 0);
    assert!(turn["total_ms"].as_f64().unwrap() >= turn["upstream_ms"].as_f64().unwrap());
    assert_eq!(turn["messages"][1]["content"], "Say PONG");
}

#[tokio::test]
async fn unknown_fields_and_headers_are_forwarded_but_metaclaw_controls_are_not() {
    let up = dummy();
    let mc = Metaclaw::start(&up.url, PLAIN);
    let body = json!({
        "model": "echo-request",
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.3,
        "frobnicate": {"nested": [1, 2.5, "x", null]},
        "session_id": "from-body",
        "turn_type": "main",
    });
    let response = post_chat(
        &format!("{}/v1", mc.url()),
        &body,
        &[
            ("openai-beta", "assistants=v2"),
            ("x-custom-thing", "kept"),
            ("authorization", "Bearer agent-key"),
        ],
    )
    .await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    let seen: Value =
        serde_json::from_str(answer["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(seen["body"]["frobnicate"], body["frobnicate"]);
    assert_eq!(seen["body"]["temperature"], 0.3);
    assert!(
        seen["body"].get("session_id").is_none(),
        "control fields must not reach the upstream"
    );
    assert!(seen["body"].get("turn_type").is_none());
    assert_eq!(seen["headers"]["openai-beta"], "assistants=v2");
    assert_eq!(seen["headers"]["x-custom-thing"], "kept");
    // No key configured and no proxy token: the agent's own key is passed on.
    assert_eq!(seen["headers"]["authorization"], "Bearer agent-key");
    // Recorded under the body's session id.
    mc.turns("from-body", 1);
}

#[tokio::test]
async fn the_configured_upstream_key_replaces_the_agents_and_is_never_stored() {
    let up = dummy();
    let mc = Metaclaw::start_with_env(
        &up.url,
        "llm:\n  api_base: {upstream}\n  api_key_env: TEST_UPSTREAM_KEY\nproxy:\n  api_key: proxy-token-123\n",
        &[("TEST_UPSTREAM_KEY", "sk-upstream-secret-abcdefghijkl")],
    );
    let body = json!({"model": "echo-request", "messages": [{"role": "user", "content": "my key is sk-upstream-secret-abcdefghijkl"}]});
    let response = post_chat(
        &format!("{}/v1", mc.url()),
        &body,
        &[
            ("authorization", "Bearer proxy-token-123"),
            ("x-session-id", "keys"),
        ],
    )
    .await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    let seen: Value =
        serde_json::from_str(answer["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(
        seen["headers"]["authorization"],
        "Bearer sk-upstream-secret-abcdefghijkl"
    );
    let session = mc.turns("keys", 1);
    let dump = session.to_string();
    assert!(
        !dump.contains("sk-upstream-secret-abcdefghijkl"),
        "a secret reached the store: {dump}"
    );
    assert!(!dump.contains("proxy-token-123"));
    let db = std::fs::read(mc.home.path().join("metaclaw.db")).unwrap();
    assert!(!String::from_utf8_lossy(&db).contains("sk-upstream-secret"));
}

#[tokio::test]
async fn openclaw_requests_are_recorded_under_openclaws_session_id() {
    let up = dummy();
    // The fixtures name OpenClaw's model; force the dummy's echo instead.
    let mc = Metaclaw::start(
        &up.url,
        "llm:\n  api_base: {upstream}\n  model_id: echo\n  force_model: true\n",
    );
    let base = format!("{}/v1", mc.url());
    let cases = [
        (
            "chat_completions_stream_request.json",
            "1a206f6b-47b6-464c-86db-730d5d7b0316",
            "openclaw_runtime",
        ),
        (
            "openai_completions_exec_with_prompt_cache_key.json",
            "",
            "prompt_cache_key",
        ),
        ("tool_loop_call1.json", "", "prompt_cache_key"),
        (
            "tool_loop_call2_with_tool_result.json",
            "",
            "prompt_cache_key",
        ),
    ];
    for (file, expected, source) in cases {
        let f = fixture(file);
        let body = &f["body"];
        let sid = match body["prompt_cache_key"].as_str() {
            Some(pck) => pck.rsplit_once(':').unwrap().0.to_string(),
            None => expected.to_string(),
        };
        let headers: Vec<(String, String)> = f["headers"]
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
            .collect();
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let events = read_sse(post_chat(&base, body, &headers).await, Instant::now()).await;
        assert_eq!(
            events.last().map(|e| e.1.as_str()),
            Some("[DONE]"),
            "{file}: {events:?}"
        );
        let session = mc.session_until(&sid, |v| {
            v["turns"].as_array().is_some_and(|turns| {
                turns.iter().any(|t| {
                    t["request_params"]["max_completion_tokens"] == body["max_completion_tokens"]
                })
            })
        });
        assert_eq!(session["session"]["id"], sid, "{file}");
        assert_eq!(session["session"]["agent_session_id"], sid, "{file}");
        assert_eq!(session["session"]["source"], source, "{file}");
        // The internal-context message is forwarded but never recorded.
        for turn in session["turns"].as_array().unwrap() {
            for m in turn["messages"].as_array().unwrap() {
                let text = if m["content"].is_string() {
                    m["content"].to_string()
                } else {
                    m["content"][0]["text"].to_string()
                };
                assert!(
                    !(m["role"] == "user"
                        && text
                            .trim_start_matches('"')
                            .starts_with("<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT")),
                    "{file}: internal context recorded"
                );
            }
            assert_eq!(turn["upstream_model"], "echo");
            assert_eq!(turn["model"], "fake-model");
        }
    }
    // The tool loop's two calls are one session.
    let sid = fixture("tool_loop_call1.json")["body"]["prompt_cache_key"]
        .as_str()
        .unwrap()
        .rsplit_once(':')
        .unwrap()
        .0
        .to_string();
    let session = mc.turns(&sid, 2);
    let turns = session["turns"].as_array().unwrap();
    assert!(
        turns
            .iter()
            .any(|t| t["messages"].to_string().contains("secret content XYZZY"))
    );
}

#[tokio::test]
async fn openclaws_internal_context_still_reaches_the_upstream() {
    let up = dummy();
    let mc = Metaclaw::start(&up.url, PLAIN);
    let mut body = fixture("chat_completions_stream_request.json")["body"].clone();
    body["model"] = json!("echo-request");
    body["stream"] = json!(false);
    let response = post_chat(&format!("{}/v1", mc.url()), &body, &[]).await;
    let answer: Value = response.json().await.unwrap();
    let seen = answer["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(seen.contains("BEGIN_OPENCLAW_INTERNAL_CONTEXT"));
    let session = mc.turns("1a206f6b-47b6-464c-86db-730d5d7b0316", 1);
    let messages = session["turns"][0]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "system + user, no internal context");
    assert!(
        messages[0]["content"]
            .as_str()
            .unwrap()
            .starts_with("<!-- openclaw:attempt:STABLE -->")
    );
}

#[tokio::test]
async fn a_client_that_disconnects_mid_stream_cancels_the_upstream_and_leaves_an_incomplete_turn() {
    use futures_util::StreamExt;
    let up = dummy();
    let mc = Metaclaw::start(&up.url, PLAIN);
    let body = chat("stream-30-100", "go", true);
    let response = post_chat(
        &format!("{}/v1", mc.url()),
        &body,
        &[("x-session-id", "gone")],
    )
    .await;
    let mut stream = response.bytes_stream();
    let mut seen = String::new();
    while !seen.contains("chunk-2 ") {
        seen.push_str(&String::from_utf8_lossy(
            &stream.next().await.unwrap().unwrap(),
        ));
    }
    drop(stream);

    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let stats = dummy_stats(&up.url).await;
        if stats["streams_cancelled"] == 1 {
            assert_eq!(stats["streams_completed"], 0);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the upstream stream was never cancelled: {stats}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let session = mc.turns("gone", 1);
    let turn = &session["turns"][0];
    assert_eq!(turn["status"], "incomplete");
    assert_eq!(turn["error"], "client disconnected");
    let partial = turn["response"]["choices"][0]["message"]["content"]
        .as_str()
        .unwrap();
    assert!(partial.starts_with("chunk-1 chunk-2 "), "{partial}");
    assert!(!partial.contains("chunk-30"));
}

#[tokio::test]
async fn bad_requests_get_clear_json_errors() {
    let up = dummy();
    let mc = Metaclaw::start(
        &up.url,
        "llm:\n  api_base: {upstream}\nproxy:\n  max_body_mb: 1\n",
    );
    let url = format!("{}/v1/chat/completions", mc.url());
    let c = client();
    let cases: Vec<(reqwest::RequestBuilder, u16, &str)> = vec![
        (
            c.post(&url)
                .header("content-type", "application/json")
                .body("{\"model\": "),
            400,
            "not valid JSON",
        ),
        (
            c.post(&url).header("content-type", "text/plain").body("{}"),
            415,
            "application/json",
        ),
        (c.post(&url).body("{}"), 415, "application/json"),
        (
            c.post(&url)
                .header("content-type", "application/json")
                .body("{\"model\":\"echo\"}"),
            400,
            "`messages` is required",
        ),
        (
            c.post(&url)
                .header("content-type", "application/json")
                .body("[1]"),
            400,
            "JSON object",
        ),
        (
            c.post(&url)
                .header("content-type", "application/json")
                .body(format!(
                    "{{\"model\":\"echo\",\"messages\":[],\"pad\":\"{}\"}}",
                    "x".repeat(2 << 20)
                )),
            413,
            "max_body_mb",
        ),
        (
            c.post(&url)
                .header("content-type", "application/json")
                .body("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"),
            400,
            "`model` is required",
        ),
        (c.get(&url), 405, "not allowed"),
        (c.get(format!("{}/v2/nothing", mc.url())), 404, "no route"),
    ];
    for (request, status, needle) in cases {
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), status, "{needle}");
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/json")
        );
        let body: Value = response.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(needle),
            "{message:?} should mention {needle:?}"
        );
    }
    // Still serving.
    let ok = post_chat(
        &format!("{}/v1", mc.url()),
        &chat("echo", "alive", false),
        &[],
    )
    .await;
    assert_eq!(ok.status(), 200);
}

#[tokio::test]
async fn tokens_guard_the_proxy_and_the_admin_routes() {
    let up = dummy();
    let mc = Metaclaw::start(
        &up.url,
        "llm:\n  api_base: {upstream}\nproxy:\n  api_key: proxy-token-123\n",
    );
    let base = format!("{}/v1", mc.url());
    let body = chat("echo", "hi", false);
    for (headers, status) in [
        (vec![], 401),
        (vec![("authorization", "Bearer wrong-token-999")], 401),
        (vec![("authorization", "Basic cHJveHk=")], 401),
        (vec![("authorization", "Bearer proxy-token-123")], 200),
        (vec![("x-api-key", "proxy-token-123")], 200),
    ] {
        let response = post_chat(&base, &body, &headers).await;
        assert_eq!(response.status().as_u16(), status, "{headers:?}");
        if status == 401 {
            let v: Value = response.json().await.unwrap();
            assert_eq!(v["error"]["type"], "authentication_error");
        }
    }
    let c = client();
    for (url, expected) in [
        (format!("{base}/models"), 401),
        (format!("{}/metrics", mc.url()), 401),
        (format!("{}/healthz", mc.url()), 200),
    ] {
        let status = c.get(&url).send().await.unwrap().status();
        assert_eq!(status, expected, "{url}");
    }
    // The admin route wants the admin token, not the proxy's.
    let admin = format!("{}/admin/status", mc.url());
    let with_proxy = c
        .get(&admin)
        .bearer_auth("proxy-token-123")
        .send()
        .await
        .unwrap();
    assert_eq!(with_proxy.status(), 401);
    let token = std::fs::read_to_string(mc.home.path().join("admin.token")).unwrap();
    let status: Value = c
        .get(&admin)
        .bearer_auth(token.trim())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status["running"], true);
    assert_eq!(status["mode"], "skills_only");
}

#[tokio::test]
async fn upstream_failures_come_back_as_clear_errors() {
    let up = dummy();
    let mc = Metaclaw::start(
        &up.url,
        "llm:\n  api_base: {upstream}\nproxy:\n  timeouts:\n    first_byte: 500ms\n    between_chunks: 400ms\n",
    );
    let base = format!("{}/v1", mc.url());

    // Upstream statuses and OpenAI-style bodies pass through.
    let r = post_chat(
        &base,
        &chat("error-429", "x", false),
        &[("x-session-id", "errs")],
    )
    .await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "1");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["message"], "dummy error 429");
    let r = post_chat(&base, &chat("error-503", "x", true), &[]).await;
    assert_eq!(r.status(), 503);

    // The upstream never answers: 504.
    let t = Instant::now();
    let r = post_chat(&base, &chat("hang", "x", false), &[]).await;
    assert_eq!(r.status(), 504);
    assert!(t.elapsed() < Duration::from_secs(5));
    let v: Value = r.json().await.unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("did not answer")
    );

    // The upstream stalls mid-stream: the stream ends with an error event.
    let events = read_sse(
        post_chat(
            &base,
            &chat("stream-3-1500", "x", true),
            &[("x-session-id", "stall")],
        )
        .await,
        Instant::now(),
    )
    .await;
    let last: Value = serde_json::from_str(&events.last().unwrap().1).unwrap();
    assert_eq!(last["error"]["code"], "stream_stalled");
    let session = mc.turns("stall", 1);
    assert_eq!(session["turns"][0]["status"], "incomplete");

    let session = mc.turns("errs", 1);
    assert_eq!(session["turns"][0]["status"], "error");
    assert_eq!(session["turns"][0]["http_status"], 429);
}

#[tokio::test]
async fn an_unreachable_upstream_is_a_502_that_says_so() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let upstream = format!("http://127.0.0.1:{port}/v1");
    let mc = Metaclaw::start(&upstream, PLAIN);
    let r = post_chat(
        &format!("{}/v1", mc.url()),
        &chat("echo", "x", true),
        &[("x-session-id", "down")],
    )
    .await;
    assert_eq!(r.status(), 502);
    let v: Value = r.json().await.unwrap();
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("unreachable") && message.contains(&upstream),
        "{message}"
    );
    let session = mc.turns("down", 1);
    assert_eq!(session["turns"][0]["status"], "error");
}

#[tokio::test]
async fn sessions_end_on_done_on_request_on_reset_and_when_idle() {
    let up = dummy();
    let mc = Metaclaw::start(
        &up.url,
        "llm:\n  api_base: {upstream}\nsessions:\n  idle_timeout: 1s\n",
    );
    let base = format!("{}/v1", mc.url());
    let ended = |id: &str, reason: &str| {
        let reason = reason.to_string();
        mc.session_until(id, move |v| {
            v["session"]["status"] == "ended" && v["session"]["end_reason"] == reason.as_str()
        });
    };

    // X-Session-Done.
    post_chat(
        &base,
        &chat("echo", "bye", false),
        &[("x-session-id", "s-done"), ("x-session-done", "true")],
    )
    .await;
    ended("s-done", "client_done");

    // POST /v1/sessions/{id}/end, then again, then an unknown id.
    post_chat(
        &base,
        &chat("echo", "hi", false),
        &[("x-session-id", "s-api")],
    )
    .await;
    mc.turns("s-api", 1);
    let c = client();
    let r: Value = c
        .post(format!("{base}/sessions/s-api/end"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["ended"], true);
    ended("s-api", "api");
    let r: Value = c
        .post(format!("{base}/sessions/s-api/end"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["already_ended"], true);
    assert_eq!(
        c.post(format!("{base}/sessions/nope/end"))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );

    // A new prompt_cache_key boundary is a reset.
    let mut body = chat("echo", "one", false);
    body["prompt_cache_key"] = json!("oc-session:0");
    post_chat(&base, &body, &[]).await;
    body["prompt_cache_key"] = json!("oc-session:1");
    post_chat(&base, &body, &[]).await;
    ended("oc-session", "reset");
    let next = mc.turns("oc-session:1", 1);
    assert_eq!(next["session"]["agent_session_id"], "oc-session");
    assert_eq!(next["session"]["window"], 1);

    // Silence.
    post_chat(
        &base,
        &chat("echo", "anyone?", false),
        &[("x-session-id", "s-idle")],
    )
    .await;
    mc.turns("s-idle", 1);
    ended("s-idle", "idle");

    // Coming back to an ended session reopens it.
    post_chat(
        &base,
        &chat("echo", "back again", false),
        &[("x-session-id", "s-api")],
    )
    .await;
    mc.session_until("s-api", |v| {
        v["session"]["status"] == "active" && v["turns"].as_array().unwrap().len() == 2
    });
}

#[tokio::test]
async fn health_models_and_metrics() {
    let up = dummy();
    let mc = Metaclaw::start(&up.url, PLAIN);
    let c = client();
    let health: Value = c
        .get(format!("{}/healthz", mc.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["ok"], true);
    let models: Value = c
        .get(format!("{}/v1/models", mc.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        models["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == "echo")
    );

    post_chat(
        &format!("{}/v1", mc.url()),
        &chat("echo", "count me", false),
        &[],
    )
    .await;
    post_chat(
        &format!("{}/v1", mc.url()),
        &chat("error-500", "x", false),
        &[],
    )
    .await;
    let text = c
        .get(format!("{}/metrics", mc.url()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("metaclaw_requests_total{route=\"/v1/chat/completions\",status=\"200\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("metaclaw_requests_total{route=\"/v1/chat/completions\",status=\"500\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("metaclaw_errors_total{kind=\"upstream_status\"} 1"),
        "{text}"
    );
    assert!(text.contains("metaclaw_overhead_seconds_count 1"), "{text}");
    assert!(
        text.contains("metaclaw_upstream_latency_seconds_count 2"),
        "{text}"
    );
}

/// What a web page in the user's browser could send (DNS rebinding, a
/// cross-site form or `no-cors` fetch), through real HTTP: refused, and
/// nothing recorded or ended.
#[tokio::test]
async fn a_web_page_cannot_use_the_proxy_through_the_browser() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let up = dummy();
    let mc = Metaclaw::start(&up.url, PLAIN);
    let base = format!("{}/v1", mc.url());
    let port = mc.url().rsplit(':').next().unwrap().to_string();
    let c = client();

    // DNS rebinding: the page's own name in Host.
    let r = c
        .post(format!("{base}/chat/completions"))
        .header("host", format!("evil.example:{port}"))
        .header("content-type", "application/json")
        .header("x-session-id", "rebound")
        .body(chat("echo", "hi", false).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let v: Value = r.json().await.unwrap();
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("evil.example:{port}"))
            && message.contains("proxy.allowed_hosts"),
        "{message}"
    );
    for host in [format!("localhost:{port}"), format!("[::1]:{port}")] {
        let r = c
            .get(format!("{}/healthz", mc.url()))
            .header("host", &host)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{host}");
    }
    // HTTP/1.0 with no Host.
    let mut tcp = tokio::net::TcpStream::connect(mc.url().trim_start_matches("http://"))
        .await
        .unwrap();
    tcp.write_all(b"GET /healthz HTTP/1.0\r\n\r\n")
        .await
        .unwrap();
    let mut raw = String::new();
    tcp.read_to_string(&mut raw).await.unwrap();
    assert!(
        raw.starts_with("HTTP/1.0 403") || raw.starts_with("HTTP/1.1 403"),
        "{raw}"
    );

    // A `no-cors` fetch: text/plain, no preflight.
    let r = c
        .post(format!("{base}/chat/completions"))
        .header("content-type", "text/plain;charset=UTF-8")
        .header("x-session-id", "no-cors")
        .body(chat("echo", "hi", false).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);

    // A live session, which a page tries to end.
    post_chat(
        &base,
        &chat("echo", "hi", false),
        &[("x-session-id", "live")],
    )
    .await;
    mc.turns("live", 1);
    let end = format!("{base}/sessions/live/end");
    for (name, value) in [
        ("origin", "http://evil.example"),
        ("sec-fetch-site", "cross-site"),
    ] {
        let r = c
            .post(&end)
            .header(name, value)
            .header("content-type", "text/plain")
            .body("x")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{name}");
    }
    let session = mc.turns("live", 1);
    assert_eq!(session["session"]["status"], "active", "{session}");
    // The same from a program.
    let r: Value = c
        .post(&end)
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (&r["ended"], &r["already_ended"]),
        (&json!(true), &json!(false))
    );

    // Only the program's session was recorded.
    let out = mc.cli(&["sessions", "list", "--json"]);
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["live"], "{list}");
}

/// The dummy upstream behind HTTPS: a rustls server holding the test CA's
/// certificate for 127.0.0.1 (tests/fixtures/tls) that relays each
/// connection to the plain dummy, and the key exchange group each handshake
/// settled on (the server takes the client's first choice it supports).
struct TlsFront {
    url: String,
    groups: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    _relay: tokio::task::JoinHandle<()>,
}

/// A file of the test-only TLS material in tests/fixtures/tls.
fn tls_fixture(name: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/tls")
        .join(name)
}

async fn tls_front(dummy_url: &str) -> TlsFront {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(tls_fixture("server.pem"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(tls_fixture("server.key")).unwrap();
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider.kx_groups = rustls::crypto::aws_lc_rs::ALL_KX_GROUPS.to_vec();
    let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(provider))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let plain = dummy_url
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_string();
    let groups = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = groups.clone();
    let relay = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, plain, seen) = (acceptor.clone(), plain.clone(), seen.clone());
            tokio::spawn(async move {
                // A failed handshake (an untrusted certificate) ends here.
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                if let Some(group) = tls.get_ref().1.negotiated_key_exchange_group() {
                    seen.lock().unwrap().push(format!("{:?}", group.name()));
                }
                let mut upstream = tokio::net::TcpStream::connect(plain).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut upstream).await;
            });
        }
    });
    TlsFront {
        url: format!("https://127.0.0.1:{port}/v1"),
        groups,
        _relay: relay,
    }
}

#[tokio::test]
async fn an_https_upstream_is_verified_and_reached_with_post_quantum_key_exchange() {
    let up = dummy();
    let front = tls_front(&up.url).await;

    // The system's roots replaced by the test CA (rustls-native-certs reads
    // SSL_CERT_FILE): a turn goes through, over X25519MLKEM768.
    let ca = tls_fixture("ca.pem");
    let mc = Metaclaw::start_with_env(
        &front.url,
        PLAIN,
        &[("SSL_CERT_FILE", ca.to_str().unwrap())],
    );
    let r = post_chat(
        &format!("{}/v1", mc.url()),
        &chat("echo", "over TLS", false),
        &[],
    )
    .await;
    assert_eq!(r.status(), 200, "{}", mc.log());
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "over TLS");
    let groups = front.groups.lock().unwrap().clone();
    assert!(
        !groups.is_empty() && groups.iter().all(|g| g == "X25519MLKEM768"),
        "{groups:?}"
    );

    // Trusting only an unrelated certificate: the server's is refused, and
    // the agent is told why.
    let other = tls_fixture("server.pem");
    let mc = Metaclaw::start_with_env(
        &front.url,
        PLAIN,
        &[("SSL_CERT_FILE", other.to_str().unwrap())],
    );
    let r = post_chat(
        &format!("{}/v1", mc.url()),
        &chat("echo", "over TLS", false),
        &[],
    )
    .await;
    assert_eq!(r.status(), 502);
    let v: Value = r.json().await.unwrap();
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("certificate"), "{message}");
}
