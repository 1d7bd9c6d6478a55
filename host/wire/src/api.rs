//! The three client APIs the proxy serves and the two upstream APIs it
//! speaks. Inside, a turn is always an OpenAI chat completion: a request in
//! another dialect is translated to one on the way in (that is also what is
//! recorded and learned from), and the answer is translated back on the way
//! out. An Anthropic client in front of an Anthropic upstream is passed
//! through untouched (skills aside).

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::response::error_body;
use crate::stream::sse::SseEvent;

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
            Self::Anthropic => error_body::to_anthropic(status, &body),
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
