//! Streamed answers: the SSE parser, the transcoders that turn one API's
//! events into another's (chained: upstream API → chat → client API), and
//! the assembly of a chat stream into the one answer it adds up to.

pub mod anthropic;
pub mod assemble;
pub mod replay;
pub mod responses;
pub mod sse;

use serde_json::Value;

use sse::SseEvent;

/// Turns the events of one streamed answer into the events of another API.
pub trait Transcode: Send {
    fn event(&mut self, event: SseEvent, out: &mut Vec<SseEvent>);
    /// The upstream's stream is over (cleanly or not): close what is open.
    fn finish(&mut self, out: &mut Vec<SseEvent>);
}

/// What one event of a chat-completions stream carries, for a transcoder.
pub(crate) enum ChatEvent {
    Chunk(Value),
    /// An `error` object sent inside the stream (OpenAI does this).
    Error {
        message: String,
        code: Value,
    },
}

/// The chunk or error one chat-completions event carries; none for
/// `[DONE]`, a blank event or one that is not JSON.
pub(crate) fn chat_event(event: &SseEvent) -> Option<ChatEvent> {
    let data = event.data.trim();
    if data.is_empty() || data == "[DONE]" {
        return None;
    }
    let chunk = serde_json::from_str::<Value>(data).ok()?;
    match chunk.get("error").filter(|e| !e.is_null()) {
        Some(error) => Some(ChatEvent::Error {
            message: error["message"]
                .as_str()
                .unwrap_or("upstream error")
                .to_string(),
            code: error["code"].clone(),
        }),
        None => Some(ChatEvent::Chunk(chunk)),
    }
}

/// Transcoders applied one after the other (upstream dialect → chat →
/// client dialect).
pub struct Chain(pub Vec<Box<dyn Transcode>>);

impl Chain {
    pub fn run(&mut self, events: Vec<SseEvent>, finish: bool) -> Vec<SseEvent> {
        let mut current = events;
        for stage in &mut self.0 {
            let mut next = Vec::new();
            for event in current {
                stage.event(event, &mut next);
            }
            if finish {
                stage.finish(&mut next);
            }
            current = next;
        }
        current
    }
}

/// One event on the wire.
pub fn encode(event: &SseEvent, out: &mut Vec<u8>) {
    if let Some(name) = &event.event {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.push(b'\n');
    }
    for line in event.data.split('\n') {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
}

/// A named event whose data is `value` (Anthropic and Responses events).
pub fn named(name: &str, value: Value) -> SseEvent {
    SseEvent {
        event: Some(name.to_string()),
        data: value.to_string(),
    }
}

/// A chat-completions chunk event.
pub fn chat_chunk(value: Value) -> SseEvent {
    SseEvent {
        event: None,
        data: value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::stream::sse::parse_all;

    #[test]
    fn encoded_events_parse_back() {
        let mut out = Vec::new();
        encode(&named("message_start", json!({"a": 1})), &mut out);
        encode(
            &SseEvent {
                event: None,
                data: "two\nlines".into(),
            },
            &mut out,
        );
        let (events, _) = parse_all(&out);
        assert_eq!(events[0].event.as_deref(), Some("message_start"));
        assert_eq!(events[0].data, "{\"a\":1}");
        assert_eq!(events[1].data, "two\nlines");
    }
}
