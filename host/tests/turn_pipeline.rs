//! The turn pipeline in process: the product as `App::start` builds it, its
//! router called with `tower::ServiceExt::oneshot`, the dummy upstream on
//! loopback. What a user depends on and what would otherwise only be seen
//! through timing-sensitive end-to-end runs: a turn is recorded when the
//! client goes away mid-stream or the upstream cuts its stream, a failing
//! upstream falls back before any byte is sent, and errors come back in
//! the client's own API shape.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_methods)] // tests own and join their threads and servers

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use futures_util::StreamExt;
use metaclaw_core::app::{App, AppHandle, StartOptions};
use metaclaw_core::home::Home;
use metaclaw_core::server::{self, Guard};
use metaclaw_core::store::{TurnRow, session_turns};
use serde_json::{Value, json};
use tower::ServiceExt;

/// The port the router believes it serves (the `Host` guard checks it).
const PORT: u16 = 30000;

struct Product {
    handle: AppHandle,
    router: Router,
    /// The in-process upstream, when [`product`] started it.
    dummy: Option<Arc<metaclaw_mock_upstream::Dummy>>,
    _home: tempfile::TempDir,
}

/// The product on a fresh home, its upstream an in-process dummy, with
/// `llm` lines added to its `llm:` section (`{upstream}` is the dummy).
async fn product(llm: &str) -> Product {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = format!("http://{}/v1", listener.local_addr().unwrap());
    let dummy = Arc::new(metaclaw_mock_upstream::Dummy::default());
    tokio::spawn(metaclaw_mock_upstream::serve(listener, dummy.clone()));
    let mut product = product_of(&upstream, llm).await;
    product.dummy = Some(dummy);
    product
}

/// [`product`] in front of the upstream at `upstream`.
async fn product_of(upstream: &str, llm: &str) -> Product {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::at(dir.path());
    home.ensure().unwrap();
    // Skills, learning and plugins off: this is the serving path alone.
    let config = format!(
        "llm:\n  api_base: {upstream}\n  model_id: echo\n{llm}skills:\n  enabled: false\nlearning:\n  enabled: false\nplugins:\n  builtin: false\n"
    );
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, config.replace("{upstream}", upstream)).unwrap();
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
        dummy: None,
        _home: dir,
    }
}

impl Product {
    async fn post(&self, path: &str, session: &str, body: Value) -> axum::response::Response {
        let request = Request::post(path)
            .header("host", format!("127.0.0.1:{PORT}"))
            .header("content-type", "application/json")
            .header("x-session-id", session)
            .body(Body::from(body.to_string()))
            .unwrap();
        self.router.clone().oneshot(request).await.unwrap()
    }

    /// The session's recorded turns, once everything queued is written.
    async fn turns(&self, session: &str) -> Vec<TurnRow> {
        let store = &self.handle.app().proxy.store;
        store.flush().await;
        let conn = store.db().read().unwrap();
        // An `X-Session-Id` is the session's id.
        session_turns(&conn, session).unwrap()
    }
}

async fn json_body(response: axum::response::Response) -> Value {
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    serde_json::from_slice(&bytes).unwrap_or_else(|_| {
        panic!("not JSON: {}", String::from_utf8_lossy(&bytes));
    })
}

fn chat(model: &str, stream: bool) -> Value {
    json!({
        "model": model,
        "stream": stream,
        "messages": [{"role": "user", "content": "hello there"}],
    })
}

#[tokio::test]
async fn a_turn_is_answered_and_recorded_once() {
    let p = product("").await;
    let response = p
        .post("/v1/chat/completions", "s-ok", chat("echo", false))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let body = json_body(response).await;
    assert_eq!(body["choices"][0]["message"]["content"], "hello there");
    let turns = p.turns("s-ok").await;
    assert_eq!(turns.len(), 1, "{turns:?}");
    assert_eq!(turns[0].status, "ok");
    assert_eq!(turns[0].user.as_deref(), Some("hello there"));
    p.handle.shutdown().await;
}

#[tokio::test]
async fn one_read_of_the_request_feeds_the_upstream_body_and_the_record() {
    let p = product("").await;
    let internal =
        "<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>\nruntime notes\n<<<END_OPENCLAW_INTERNAL_CONTEXT>>>";
    let body = json!({
        "turn_type": "main",
        "model": "echo",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "[Mon 2026-11-23 18:26 UTC] what is 2+2?"},
            {"role": "user", "content": internal},
        ],
        "temperature": 0.25,
        "session_done": false,
    });
    let response = p.post("/v1/chat/completions", "s-once", body).await;
    assert_eq!(response.status(), StatusCode::OK);
    json_body(response).await;

    // Upstream: the agent's request minus metaclaw's control fields, the
    // internal context still there (the model needs it).
    let dummy = p.dummy.as_ref().unwrap();
    let (_, sent) = dummy.stats.recent.lock().unwrap().back().cloned().unwrap();
    assert!(
        sent.get("turn_type").is_none() && sent.get("session_done").is_none(),
        "{sent}"
    );
    assert_eq!(sent["temperature"], 0.25);
    assert_eq!(sent["messages"].as_array().unwrap().len(), 3);

    // Record: the conversation (no internal context), the parameters (no
    // control fields), the user's words.
    let turns = p.turns("s-once").await;
    assert_eq!(turns.len(), 1, "{turns:?}");
    let turn = &turns[0];
    assert_eq!(turn.user.as_deref(), Some("what is 2+2?"));
    assert_eq!(
        turn.request_params,
        json!({"model": "echo", "temperature": 0.25})
    );
    let store = &p.handle.app().proxy.store;
    let conn = store.db().read().unwrap();
    let messages = metaclaw_core::store::load_messages(&conn, &turn.message_hashes).unwrap();
    assert_eq!(
        messages,
        [
            json!({"role": "system", "content": "You are terse."}),
            json!({"role": "user", "content": "[Mon 2026-11-23 18:26 UTC] what is 2+2?"}),
        ]
    );
    p.handle.shutdown().await;
}

#[tokio::test]
async fn a_client_that_goes_away_mid_stream_is_recorded_as_incomplete() {
    let p = product("").await;
    // Ten chunks 200 ms apart: the client leaves after the first.
    let response = p
        .post(
            "/v1/chat/completions",
            "s-gone",
            chat("stream-10-200", true),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body().into_data_stream();
    let first = body.next().await.unwrap().unwrap();
    assert!(
        String::from_utf8_lossy(&first).contains("data:"),
        "{first:?}"
    );
    drop(body);

    let turns = p.turns("s-gone").await;
    assert_eq!(turns.len(), 1, "{turns:?}");
    assert_eq!(turns[0].status, "incomplete");
    let error = turns[0].error.as_deref().unwrap_or_default();
    assert!(error.contains("client"), "{error}");
    p.handle.shutdown().await;
}

#[tokio::test]
async fn an_upstream_that_cuts_its_stream_ends_the_clients_stream_and_is_recorded() {
    let p = product("").await;
    let response = p
        .post("/v1/chat/completions", "s-cut", chat("reset-after-3", true))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body().into_data_stream();
    let mut received = String::new();
    while let Some(Ok(chunk)) = body.next().await {
        received.push_str(&String::from_utf8_lossy(&chunk));
    }
    // What came before the cut reached the client, then its stream ended.
    assert!(received.contains("chunk-3"), "{received}");
    assert!(!received.contains("chunk-4"), "{received}");

    let turns = p.turns("s-cut").await;
    assert_eq!(turns.len(), 1, "{turns:?}");
    assert_eq!(turns[0].status, "incomplete");
    p.handle.shutdown().await;
}

#[tokio::test]
async fn a_failing_upstream_falls_back_before_any_byte_is_sent() {
    // The primary answers 503 for this model; the fallback asks for `echo`.
    let p = product("  fallbacks:\n    - api_base: {upstream}\n      model_id: echo\n").await;
    let response = p
        .post("/v1/chat/completions", "s-fb", chat("error-503", false))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let body = json_body(response).await;
    assert_eq!(body["choices"][0]["message"]["content"], "hello there");
    let turns = p.turns("s-fb").await;
    assert_eq!(turns.len(), 1, "{turns:?}");
    assert_eq!(turns[0].status, "ok");
    assert_eq!(turns[0].upstream_model.as_deref(), Some("echo"));
    p.handle.shutdown().await;
}

#[tokio::test]
async fn errors_come_back_in_the_clients_shape_and_are_recorded() {
    let p = product("").await;

    // An upstream error, to an OpenAI client and to an Anthropic one.
    let response = p
        .post("/v1/chat/completions", "s-err", chat("error-500", false))
        .await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body = json_body(response).await;
    assert!(body["error"]["message"].is_string(), "{body}");

    let anthropic = json!({
        "model": "error-500",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hello there"}],
    });
    let response = p.post("/v1/messages", "s-err-a", anthropic).await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body = json_body(response).await;
    assert_eq!(body["type"], "error", "{body}");
    assert!(body["error"]["type"].is_string(), "{body}");
    assert!(body["error"]["message"].is_string(), "{body}");

    // A body that is not JSON never reaches the upstream: 400, same shapes.
    let request = |path: &str| {
        Request::post(path)
            .header("host", format!("127.0.0.1:{PORT}"))
            .header("content-type", "application/json")
            .body(Body::from("{not json"))
            .unwrap()
    };
    let response = p
        .router
        .clone()
        .oneshot(request("/v1/chat/completions"))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(json_body(response).await["error"]["message"].is_string());
    let response = p
        .router
        .clone()
        .oneshot(request("/v1/messages"))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(json_body(response).await["type"], "error");

    let turns = p.turns("s-err").await;
    assert_eq!(turns.len(), 1, "{turns:?}");
    assert_eq!(turns[0].status, "error");
    assert_eq!(turns[0].http_status, Some(500));
    p.handle.shutdown().await;
}

#[tokio::test]
async fn an_agents_resend_after_a_failure_is_an_attempt_of_the_same_turn() {
    let p = product("").await;
    // `flaky` fails every other call, the first one first: the agent gets
    // a 503 and sends the same request again, as OpenClaw does.
    let first = p
        .post("/v1/chat/completions", "s-retry", chat("flaky", false))
        .await;
    assert_eq!(first.status(), StatusCode::SERVICE_UNAVAILABLE);
    let again = p
        .post("/v1/chat/completions", "s-retry", chat("flaky", false))
        .await;
    assert_eq!(again.status(), StatusCode::OK);

    let turns = p.turns("s-retry").await;
    assert_eq!(turns.len(), 2, "{turns:?}");
    // The failed attempt is kept but no learning reads it: only main turns
    // are judged and scored, and the session counts one turn.
    assert_eq!(
        (turns[0].turn_type.as_str(), turns[0].attempt),
        ("retried", 1)
    );
    assert_eq!((turns[1].turn_type.as_str(), turns[1].attempt), ("main", 2));
    assert_eq!(turns[1].retry_of.as_deref(), Some(turns[0].id.as_str()));
    let conn = p.handle.app().proxy.store.db().read().unwrap();
    let session = metaclaw_core::store::session_detail(&conn, "s-retry")
        .unwrap()
        .unwrap();
    assert_eq!(session.main_turns, 1, "{session:?}");

    // The next request of the conversation is a new turn.
    let mut next = chat("echo", false);
    next["messages"] = json!([
        {"role": "user", "content": "hello there"},
        {"role": "assistant", "content": "hello there"},
        {"role": "user", "content": "and now?"},
    ]);
    let response = p.post("/v1/chat/completions", "s-retry", next).await;
    assert_eq!(response.status(), StatusCode::OK);
    let turns = p.turns("s-retry").await;
    assert_eq!((turns[2].turn_type.as_str(), turns[2].attempt), ("main", 1));
    p.handle.shutdown().await;
}

#[tokio::test]
async fn an_anthropic_clients_error_from_an_anthropic_upstream_passes_through_whole() {
    // A provider's error, with fields metaclaw knows nothing about.
    let error = json!({
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded", "retry_hint": 3},
        "request_id": "req_011CPqYVyj",
    });
    let answer = error.clone();
    let upstream = Router::new().route(
        "/v1/messages",
        axum::routing::post(move || {
            let answer = answer.clone();
            async move { (StatusCode::from_u16(529).unwrap(), axum::Json(answer)) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, upstream).await });
    let p = product_of(&base, "  api_format: anthropic\n  api_key: sk-test\n").await;

    let request = json!({
        "model": "claude",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hello there"}],
    });
    let response = p.post("/v1/messages", "s-529", request.clone()).await;
    assert_eq!(response.status().as_u16(), 529);
    assert_eq!(json_body(response).await, error);

    // An OpenAI client of the same upstream gets it in OpenAI's shape.
    let response = p.post("/v1/chat/completions", "s-529-chat", request).await;
    assert_eq!(response.status().as_u16(), 529);
    let body = json_body(response).await;
    assert_eq!(body["error"]["message"], "Overloaded", "{body}");
    let turns = p.turns("s-529").await;
    assert_eq!(
        (turns[0].status.as_str(), turns[0].http_status),
        ("error", Some(529))
    );
    p.handle.shutdown().await;
}
