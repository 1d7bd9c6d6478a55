//! The three client APIs the proxy serves and the two upstream APIs it
//! speaks. Inside, a turn is always an OpenAI chat completion: a request in
//! another dialect is translated to one on the way in (that is also what is
//! recorded and learned from), and the answer is translated back on the way
//! out. An Anthropic client in front of an Anthropic upstream is passed
//! through untouched (skills aside).

use bytes::Bytes;
use serde_json::{Value, json};

use serde::{Deserialize, Serialize};

use crate::sse::SseEvent;

/// The API an upstream speaks (`llm.api_format`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum ApiFormat {
    /// OpenAI chat completions.
    #[default]
    Openai,
    /// Anthropic Messages.
    Anthropic,
}

/// The API a client spoke to the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Front {
    /// `POST /v1/chat/completions`
    Chat,
    /// `POST /v1/messages`
    Anthropic,
    /// `POST /v1/responses`
    Responses,
}

impl Front {
    pub fn route(self) -> &'static str {
        match self {
            Self::Chat => "/v1/chat/completions",
            Self::Anthropic => "/v1/messages",
            Self::Responses => "/v1/responses",
        }
    }

    /// The `api` a turn is recorded under.
    pub fn api(self) -> &'static str {
        match self {
            Self::Chat => "chat_completions",
            Self::Anthropic => "messages",
            Self::Responses => "responses",
        }
    }

    /// An Anthropic client in front of an Anthropic upstream: no translation.
    pub fn passes_through(self, upstream: ApiFormat) -> bool {
        self == Self::Anthropic && upstream == ApiFormat::Anthropic
    }

    /// An OpenAI-style JSON error body (`status`, `body`) in this dialect
    /// (Anthropic clients parse `{"type": "error", "error": {"type",
    /// "message"}}`; OpenAI's two APIs share `{"error": {…}}`).
    pub fn error_body(self, status: u16, body: Bytes) -> Bytes {
        match self {
            Self::Anthropic => crate::anthropic::error_from_openai(status, &body),
            Self::Chat | Self::Responses => body,
        }
    }

    /// The event that ends a stream that cannot go on, in this dialect.
    pub fn stream_error(self, kind: &str, message: &str) -> SseEvent {
        match self {
            Self::Chat => SseEvent {
                event: None,
                data:
                    json!({"error": {"message": message, "type": "upstream_error", "code": kind}})
                        .to_string(),
            },
            Self::Anthropic => SseEvent {
                event: Some("error".into()),
                data: json!({"type": "error", "error": {"type": "api_error", "message": message}})
                    .to_string(),
            },
            Self::Responses => SseEvent {
                event: Some("error".into()),
                data: json!({"type": "error", "code": kind, "message": message, "param": null})
                    .to_string(),
            },
        }
    }
}

/// Turns the events of one streamed answer into the events of another API.
pub trait Transcode: Send {
    fn event(&mut self, event: SseEvent, out: &mut Vec<SseEvent>);
    /// The upstream's stream is over (cleanly or not): close what is open.
    fn finish(&mut self, out: &mut Vec<SseEvent>);
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

/// A tool call's JSON arguments as an object (Anthropic's `input`); text
/// that is not a JSON object is kept under `_raw` rather than lost.
pub fn arguments_object(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return json!({});
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => json!({ "_raw": arguments }),
    }
}

/// The text of an Anthropic or Responses content value: a string, or the
/// text of its text blocks, joined.
pub fn blocks_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| match b {
                Value::String(s) => Some(s.as_str()),
                _ => b["text"].as_str(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Copies metaclaw's own body fields (session controls) across a
/// translation, so the turn pipeline still sees them.
pub fn copy_control_fields(from: &Value, to: &mut serde_json::Map<String, Value>) {
    for field in crate::request::CONTROL_FIELDS {
        if let Some(v) = from.get(*field) {
            to.insert((*field).to_string(), v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::parse_all;

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

    #[test]
    fn arguments_that_are_not_an_object_are_kept() {
        assert_eq!(arguments_object("{\"a\":1}"), json!({"a": 1}));
        assert_eq!(arguments_object(""), json!({}));
        assert_eq!(arguments_object("[1"), json!({"_raw": "[1"}));
    }
}
