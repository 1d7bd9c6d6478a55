//! An answer in chat-completions shape: whole, or as SSE frames.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt, stream};
use serde_json::{Value, json};

use crate::Dummy;

/// A piece of the answer: text, or a tool call.
#[derive(Debug, Clone)]
pub(crate) enum Part {
    Text(String),
    Tool {
        id: String,
        name: String,
        arguments: String,
    },
}

pub(crate) struct Answer {
    pub(crate) id: String,
    pub(crate) model: String,
    pub(crate) seq: u64,
    pub(crate) prompt_tokens: u64,
}

impl Answer {
    fn chunk(&self, delta: Value, finish: Option<&str>) -> Bytes {
        let v = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": 1_700_000_000 + self.seq,
            "model": self.model,
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }],
        });
        Bytes::from(format!("data: {v}\n\n"))
    }

    fn usage(&self, parts: &[Part]) -> Value {
        let completion = parts.len() as u64;
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
        })
    }

    pub(crate) fn frames(&self, parts: &[Part], finish: &str, include_usage: bool) -> Vec<Bytes> {
        let mut frames = vec![self.chunk(json!({ "role": "assistant", "content": "" }), None)];
        let mut tool_index = 0;
        for part in parts {
            match part {
                Part::Text(text) => frames.push(self.chunk(json!({ "content": text }), None)),
                Part::Tool {
                    id,
                    name,
                    arguments,
                } => {
                    frames.push(self.chunk(
                        json!({ "tool_calls": [{ "index": tool_index, "id": id, "type": "function",
                                                 "function": { "name": name, "arguments": "" } }] }),
                        None,
                    ));
                    // Arguments arrive in pieces, as real providers send them.
                    for piece in split_in(arguments, 3) {
                        frames.push(self.chunk(
                            json!({ "tool_calls": [{ "index": tool_index, "function": { "arguments": piece } }] }),
                            None,
                        ));
                    }
                    tool_index += 1;
                }
            }
        }
        frames.push(self.chunk(json!({}), Some(finish)));
        if include_usage {
            let v = json!({
                "id": self.id, "object": "chat.completion.chunk", "created": 1_700_000_000 + self.seq,
                "model": self.model, "choices": [], "usage": self.usage(parts),
            });
            frames.push(Bytes::from(format!("data: {v}\n\n")));
        }
        frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
        frames
    }

    pub(crate) fn whole(&self, parts: &[Part], finish: &str) -> Value {
        let text: String = parts
            .iter()
            .filter_map(|p| {
                if let Part::Text(t) = p {
                    Some(t.as_str())
                } else {
                    None
                }
            })
            .collect();
        let calls: Vec<Value> = parts
            .iter()
            .filter_map(|p| match p {
                Part::Tool { id, name, arguments } => Some(json!({
                    "id": id, "type": "function", "function": { "name": name, "arguments": arguments },
                })),
                Part::Text(_) => None,
            })
            .collect();
        let mut message = json!({ "role": "assistant", "content": if calls.is_empty() { json!(text) } else { Value::Null } });
        if !calls.is_empty() {
            message["tool_calls"] = Value::Array(calls);
        }
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": 1_700_000_000 + self.seq,
            "model": self.model,
            "choices": [{ "index": 0, "message": message, "finish_reason": finish }],
            "usage": self.usage(parts),
        })
    }

    /// The response: SSE frames (the role first, then each piece `delay` ms
    /// apart), or the whole answer after `delay` ms per piece.
    pub(crate) async fn send(
        &self,
        dummy: &Arc<Dummy>,
        parts: &[Part],
        delay: u64,
        finish: &str,
        stream: bool,
        include_usage: bool,
    ) -> Response {
        if stream {
            let frames = self.frames(parts, finish, include_usage);
            let body = Tracked {
                inner: stream::iter(frames.into_iter().enumerate())
                    .then(move |(i, frame)| async move {
                        if delay > 0 && i >= 2 {
                            tokio::time::sleep(Duration::from_millis(delay)).await;
                        }
                        Ok::<Bytes, Infallible>(frame)
                    })
                    .boxed(),
                dummy: dummy.clone(),
                done: false,
            };
            return (
                [
                    (
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("text/event-stream"),
                    ),
                    (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
                ],
                Body::from_stream(body),
            )
                .into_response();
        }
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay * parts.len() as u64)).await;
        }
        axum::Json(self.whole(parts, finish)).into_response()
    }
}

/// Counts streams that ran to the end and streams the client dropped.
struct Tracked {
    inner: futures_util::stream::BoxStream<'static, Result<Bytes, Infallible>>,
    dummy: Arc<Dummy>,
    done: bool,
}

impl Stream for Tracked {
    type Item = Result<Bytes, Infallible>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.inner.poll_next_unpin(cx);
        if let Poll::Ready(None) = polled
            && !self.done
        {
            self.done = true;
            self.dummy
                .stats
                .streams_completed
                .fetch_add(1, Ordering::Relaxed);
        }
        polled
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if !self.done {
            self.dummy
                .stats
                .streams_cancelled
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// `text` in `pieces` about equal pieces (by characters).
fn split_in(text: &str, pieces: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return vec![String::new()];
    }
    let size = chars.len().div_ceil(pieces);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}
