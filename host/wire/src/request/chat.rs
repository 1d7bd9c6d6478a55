//! The hot-path view of a chat-completions request: only what routing and
//! session tracking need, parsed without copying where the JSON allows.
//! The body itself is forwarded as received (unless metaclaw must change it)
//! and parsed in full later, off the hot path, when the turn is recorded.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::agent::openclaw;
use crate::error::Error;
use crate::text::content_text;

/// Request fields that belong to metaclaw, not to the upstream: the
/// original's body-level session controls. They are removed before
/// forwarding (OpenAI rejects unknown arguments).
pub const CONTROL_FIELDS: &[&str] = &["session_id", "session_done", "turn_type"];

#[derive(Deserialize)]
struct View<'a> {
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(borrow, default)]
    prompt_cache_key: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    session_id: Option<Cow<'a, str>>,
    #[serde(default)]
    session_done: Option<Truthy>,
    #[serde(borrow, default)]
    turn_type: Option<Cow<'a, str>>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    max_completion_tokens: Option<u64>,
    #[serde(borrow)]
    messages: Vec<MessageView<'a>>,
}

#[derive(Deserialize)]
struct MessageView<'a> {
    #[serde(borrow)]
    role: Cow<'a, str>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

/// `true`, `1`, `"yes"`, `"on"`… as the original accepted.
struct Truthy(bool);

impl<'de> Deserialize<'de> for Truthy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        Ok(Truthy(match v {
            serde_json::Value::Bool(b) => b,
            serde_json::Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
            serde_json::Value::String(s) => truthy(&s),
            _ => false,
        }))
    }
}

pub fn truthy(s: &str) -> bool {
    matches!(
        s.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    )
}

/// What the turn pipeline needs to know about a request.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    pub model: Option<String>,
    pub stream: bool,
    pub prompt_cache_key: Option<String>,
    pub body_session_id: Option<String>,
    pub body_session_done: bool,
    pub body_turn_type: Option<String>,
    /// The body carries one of [`CONTROL_FIELDS`].
    pub has_control_fields: bool,
    /// Conversation messages, not counting system messages or OpenClaw's
    /// internal context: grows within a session, shrinks on a reset.
    pub message_count: u32,
    /// OpenClaw's `sessionId=` from the first user message or the system.
    pub runtime_session_id: Option<String>,
    /// The last message that is really the user's (heartbeat detection).
    pub last_user_text: Option<String>,
    /// Hash of (model, system prompt, first user message): the session key
    /// of last resort, computed only when no other key exists.
    pub fingerprint: Option<String>,
    /// Tokens the request reserves for the answer.
    pub max_output_tokens: u64,
}

impl ChatRequest {
    /// `header_session`: the request names its session in a header.
    pub fn parse(body: &[u8], header_session: bool) -> Result<Self, Error> {
        let view: View<'_> =
            serde_json::from_slice(body).map_err(|e| describe_json_error(body, &e))?;
        let mut system = Vec::new();
        let mut first_user: Option<String> = None;
        let mut last_user: Option<String> = None;
        let mut message_count = 0u32;
        for m in &view.messages {
            match m.role.as_ref() {
                "system" | "developer" => {
                    if let Some(c) = m.content {
                        system.push(c.get());
                    }
                }
                "user" => {
                    let text = m.content.map(content_text).unwrap_or_default();
                    if openclaw::is_internal_context(&text) {
                        continue;
                    }
                    if first_user.is_none() {
                        first_user = Some(text.clone());
                    }
                    last_user = Some(text);
                    message_count += 1;
                }
                _ => message_count += 1,
            }
        }
        let runtime_session_id = first_user
            .as_deref()
            .and_then(openclaw::runtime_session_id)
            .or_else(|| system.iter().find_map(|s| openclaw::runtime_session_id(s)))
            .map(str::to_string);
        // Hashing a ~50 KB system prompt costs tens of microseconds: only
        // when nothing better names the session.
        let needs_fingerprint = !header_session
            && view.session_id.is_none()
            && view.prompt_cache_key.is_none()
            && runtime_session_id.is_none();
        let fingerprint = needs_fingerprint.then(|| {
            let mut hasher = Sha256::new();
            hasher.update(view.model.as_deref().unwrap_or("").as_bytes());
            for s in &system {
                hasher.update([0u8]);
                hasher.update(s.as_bytes());
            }
            hasher.update([1u8]);
            hasher.update(first_user.as_deref().unwrap_or("").as_bytes());
            let digest = hasher.finalize();
            let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
            format!("h-{hex}")
        });
        let has_control_fields =
            view.session_id.is_some() || view.session_done.is_some() || view.turn_type.is_some();
        Ok(ChatRequest {
            model: view.model.map(Cow::into_owned).filter(|m| !m.is_empty()),
            stream: view.stream.unwrap_or(false),
            prompt_cache_key: view.prompt_cache_key.map(Cow::into_owned),
            body_session_id: view
                .session_id
                .map(Cow::into_owned)
                .filter(|s| !s.is_empty()),
            body_session_done: view.session_done.is_some_and(|t| t.0),
            body_turn_type: view.turn_type.map(Cow::into_owned),
            has_control_fields,
            message_count,
            runtime_session_id,
            last_user_text: last_user,
            fingerprint,
            max_output_tokens: view.max_completion_tokens.or(view.max_tokens).unwrap_or(0),
        })
    }
}

/// A clear 400 for a body that is not a usable chat request.
fn describe_json_error(body: &[u8], e: &serde_json::Error) -> Error {
    use serde_json::error::Category;
    match e.classify() {
        Category::Syntax | Category::Eof | Category::Io => Error::InvalidJson(e.to_string()),
        Category::Data => {
            // Well-formed JSON of the wrong shape: say which field.
            match serde_json::from_slice::<serde_json::Value>(body) {
                Ok(serde_json::Value::Object(map)) => match map.get("messages") {
                    None => Error::Missing {
                        field: "messages",
                        expected: "a list of chat messages",
                    },
                    Some(serde_json::Value::Array(messages))
                        if messages.iter().any(|m| !m["role"].is_string()) =>
                    {
                        Error::Shape(format!("{e} (each message needs a string `role`)"))
                    }
                    Some(serde_json::Value::Array(_)) => Error::Shape(e.to_string()),
                    Some(_) => Error::BadField {
                        field: "`messages`".into(),
                        expected: "a list of chat messages",
                    },
                },
                Ok(_) => Error::NotAnObject,
                Err(_) => Error::InvalidJson(e.to_string()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl ChatRequest {
        fn parse_test(body: &[u8]) -> Result<Self, Error> {
            Self::parse(body, false)
        }
    }

    #[test]
    fn reads_the_openclaw_fixture() {
        let fixture = crate::openclaw_fixture("chat_completions_stream_request.json");
        let body = serde_json::to_vec(&fixture).unwrap();
        let req = ChatRequest::parse(&body, false).unwrap();
        assert!(req.stream);
        assert_eq!(req.model.as_deref(), Some("fake-model"));
        assert_eq!(
            req.runtime_session_id.as_deref(),
            Some("1a206f6b-47b6-464c-86db-730d5d7b0316")
        );
        // system + user + internal context: one conversation message.
        assert_eq!(req.message_count, 1);
        assert!(req.last_user_text.unwrap().contains("Say PONG"));
        assert!(!req.has_control_fields);
    }

    #[test]
    fn control_fields_and_truthy_values() {
        let req = ChatRequest::parse_test(
            br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"session_id":"s1","session_done":"yes","turn_type":"side"}"#,
        )
        .unwrap();
        assert_eq!(req.body_session_id.as_deref(), Some("s1"));
        assert!(req.body_session_done);
        assert_eq!(req.body_turn_type.as_deref(), Some("side"));
        assert!(req.has_control_fields);
    }

    #[test]
    fn bad_bodies_get_clear_errors() {
        let e = ChatRequest::parse_test(b"{not json").unwrap_err();
        assert!(matches!(e, Error::InvalidJson(_)));
        let e = ChatRequest::parse_test(br#"{"model":"m"}"#).unwrap_err();
        assert!(e.to_string().contains("`messages` is required"), "{e}");
        let e = ChatRequest::parse_test(br#"{"messages":"hi"}"#).unwrap_err();
        assert!(e.to_string().contains("must be a list"), "{e}");
        let e = ChatRequest::parse_test(br#"[1,2]"#).unwrap_err();
        assert!(e.to_string().contains("JSON object"), "{e}");
        let e = ChatRequest::parse_test(br#"{"messages":[{"content":"x"}]}"#).unwrap_err();
        assert!(e.to_string().contains("role"), "{e}");
    }

    #[test]
    fn the_fingerprint_depends_on_system_and_first_user_message() {
        let a = ChatRequest::parse_test(br#"{"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"hi"}]}"#).unwrap();
        let b = ChatRequest::parse_test(br#"{"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"hi"},{"role":"assistant","content":"yo"},{"role":"user","content":"more"}]}"#).unwrap();
        let c = ChatRequest::parse_test(br#"{"model":"m","messages":[{"role":"system","content":"T"},{"role":"user","content":"hi"}]}"#).unwrap();
        assert_eq!(a.fingerprint, b.fingerprint);
        assert_ne!(a.fingerprint, c.fingerprint);
        assert_eq!(b.message_count, 3);
    }
}
