//! Broken connections: a response cut before its head or mid-body.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use futures_util::{StreamExt, stream};

use crate::answer::{Answer, Part};

/// A response whose connection is cut: `frames` go out (each flushed before
/// the next), then the body fails and the server drops the connection
/// mid-message. With no frames the body fails before the response head is
/// flushed, so the client gets no response at all, only the closed socket.
pub(crate) fn cut(content_type: &'static str, frames: Vec<Bytes>) -> Response {
    let sent = !frames.is_empty();
    let frames = stream::iter(frames.into_iter().enumerate()).then(|(i, frame)| async move {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok::<Bytes, std::io::Error>(frame)
    });
    let failure = stream::once(async move {
        if sent {
            // Long enough for the last frame to be flushed.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "dummy: connection cut",
        ))
    });
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
        Body::from_stream(frames.chain(failure)),
    )
        .into_response()
}

/// `reset-after-<n>`: the answer starts (streamed: the role chunk and `n`
/// content chunks, no finish, no `[DONE]`; else the first half of the
/// JSON), then the connection is cut.
pub(crate) fn reset_after(answer: &Answer, n: u32, stream: bool) -> Response {
    let parts: Vec<Part> = (1..=n).map(|i| Part::Text(format!("chunk-{i} "))).collect();
    if stream {
        let mut frames = answer.frames(&parts, "stop", false);
        frames.truncate(1 + n as usize);
        return cut("text/event-stream", frames);
    }
    let whole = answer.whole(&parts, "stop").to_string();
    let half = Bytes::copy_from_slice(&whole.as_bytes()[..whole.len() / 2]);
    cut("application/json", vec![half])
}
