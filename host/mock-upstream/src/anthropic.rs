//! `POST /v1/messages`: the chat answers, spoken in Anthropic's API.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt, stream};
use serde_json::{Value, json};

use crate::chat::answer;
use crate::faults::cut;
use crate::routes::error;
use crate::{Dummy, receive};

/// `POST /v1/messages`: the same models, spoken in Anthropic's API (the
/// request as received is what `/v1/dummy/requests` lists). Lets tests
/// run metaclaw against an Anthropic upstream.
pub(crate) async fn anthropic_messages(
    State(dummy): State<Arc<Dummy>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    use metaclaw_wire as wire;
    let request = match receive(&dummy, &body) {
        Ok(request) => request,
        Err(response) => return *response,
    };
    if headers.get("x-api-key").is_none() || headers.get("anthropic-version").is_none() {
        let body = json!({"type": "error", "error": {"type": "authentication_error",
                          "message": "x-api-key and anthropic-version are required"}});
        return (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    }
    let chat = match wire::request::anthropic::to_chat(&request) {
        Ok(chat) => chat,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let response = answer(dummy, headers, chat, body.len()).await;
    let (parts, body) = response.into_parts();
    if !parts.status.is_success() {
        let bytes = axum::body::to_bytes(body, 1 << 20)
            .await
            .unwrap_or_default();
        return (
            parts.status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            wire::response::error_body::to_anthropic(parts.status.as_u16(), &bytes),
        )
            .into_response();
    }
    let streamed = parts
        .headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if !streamed {
        let Ok(bytes) = axum::body::to_bytes(body, 64 << 20).await else {
            // `reset`: the connection is cut here too.
            return cut("application/json", Vec::new());
        };
        let chat: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        return axum::Json(wire::response::anthropic::from_chat(&chat)).into_response();
    }
    // Chat chunks → Anthropic events, as they come.
    let mut parser = wire::stream::sse::SseParser::new();
    let mut chain =
        wire::stream::Chain(vec![Box::new(wire::stream::anthropic::FromChat::default())]);
    let mut upstream = body.into_data_stream();
    let events = async_stream_events(move |tx| async move {
        while let Some(chunk) = upstream.next().await {
            let Ok(chunk) = chunk else {
                // `reset-after-<n>`: cut this connection too, mid-stream.
                let cut = std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "dummy: connection cut",
                );
                let _ = tx.send(Err(cut)).await;
                return;
            };
            let mut events = Vec::new();
            parser.push(&chunk, &mut |e| events.push(e));
            let mut out = Vec::new();
            for e in chain.run(events, false) {
                wire::stream::encode(&e, &mut out);
            }
            if !out.is_empty() && tx.send(Ok(Bytes::from(out))).await.is_err() {
                return;
            }
        }
        let mut out = Vec::new();
        for e in chain.run(Vec::new(), true) {
            wire::stream::encode(&e, &mut out);
        }
        let _ = tx.send(Ok(Bytes::from(out))).await;
    });
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        )],
        Body::from_stream(events),
    )
        .into_response()
}

/// A body fed by a task through a small channel. The task ends at its
/// first send after the client has gone (the body, and so the channel's
/// receiver, is dropped with the connection).
#[allow(clippy::disallowed_methods)] // this crate is the test double, not metaclaw_core
fn async_stream_events<F, Fut>(produce: F) -> impl Stream<Item = Result<Bytes, std::io::Error>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    tokio::spawn(produce(tx));
    stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) })
}
