//! The text of a message, read the same way from a parsed tree and from raw
//! JSON, in all three APIs; and the user's own words in a user message.

use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::agent::openclaw;

/// The user's own words in a user message's text, without what agent
/// frameworks wrap around them: OpenClaw's `[Mon 2026-11-23 18:26 UTC]`
/// prefix and trailing `Runtime: …` line, `… (untrusted metadata):`
/// blocks; none in OpenClaw's per-call internal context. One set of rules,
/// the first-party scorer plugins' own (`metaclaw-plugin-text`), for
/// everything that reads what the user said: retrieval, the scorers, the
/// judge and the evolver.
pub fn user_words(text: &str) -> String {
    if openclaw::is_internal_context(text) {
        return String::new();
    }
    metaclaw_plugin_text::message::strip_metadata(text)
}

/// The text of a message `content`: a string, or the texts of a list's
/// parts joined by newlines (a part is a bare string or has a string
/// `text`: chat's text parts, Anthropic's text blocks, Responses'
/// `input_text`); anything else has none.
pub fn value_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.as_str()),
                _ => p["text"].as_str(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// [`value_text`] of a raw (unparsed) `content`, without building its tree.
pub fn content_text(raw: &RawValue) -> String {
    json_content_text(raw.get())
}

/// [`content_text`] of a `content` given as its JSON text.
pub fn json_content_text(s: &str) -> String {
    if s.starts_with('"') {
        return serde_json::from_str::<String>(s).unwrap_or_default();
    }
    if !s.starts_with('[') {
        return String::new();
    }
    match serde_json::from_str::<Vec<PartText>>(s) {
        Ok(parts) => parts
            .into_iter()
            .filter_map(|p| p.0)
            .collect::<Vec<_>>()
            .join("\n"),
        Err(_) => String::new(),
    }
}

/// The text of one part of a list `content` (see [`value_text`]).
struct PartText(Option<String>);

/// A value that is kept only when it is a string.
struct StringOnly(Option<String>);

impl<'de> Deserialize<'de> for PartText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TextVisitor { in_part: true })
            .map(PartText)
    }
}

impl<'de> Deserialize<'de> for StringOnly {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TextVisitor { in_part: false })
            .map(StringOnly)
    }
}

/// Whether a member's key is `text` (read without copying it).
struct IsText(bool);

impl<'de> Deserialize<'de> for IsText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = IsText;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }

            fn visit_str<E>(self, key: &str) -> Result<IsText, E> {
                Ok(IsText(key == "text"))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// A string is its own text; a part (object) has the text of its `text`
/// member (the last one, as a parsed tree keeps); anything else has none.
struct TextVisitor {
    /// Reading a part (whose `text` member counts), not a `text` value.
    in_part: bool,
}

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
        Ok(Some(s.to_owned()))
    }

    fn visit_string<E>(self, s: String) -> Result<Self::Value, E> {
        Ok(Some(s))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut text = None;
        while let Some(IsText(is_text)) = map.next_key()? {
            if self.in_part && is_text {
                text = map.next_value::<StringOnly>()?.0;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(text)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    /// Every user message of the captured OpenClaw requests, as the user's
    /// words.
    #[test]
    fn openclaws_user_messages_become_the_users_words() {
        for (file, words) in [
            ("chat_completions_stream_request.json", "Say PONG"),
            (
                "openai_completions_exec_with_prompt_cache_key.json",
                "capture metaclaw/fake-model",
            ),
            ("tool_loop_call2_with_tool_result.json", "read hello.txt"),
            (
                "anthropic_messages.json",
                "capture metaclaw-anthropic/fake-claude",
            ),
            (
                "openai_responses.json",
                "capture metaclaw-responses/fake-resp",
            ),
        ] {
            let body = crate::openclaw_fixture(file);
            let items = body["messages"]
                .as_array()
                .or(body["input"].as_array())
                .unwrap();
            let said: Vec<String> = items
                .iter()
                .filter(|m| m["role"] == "user")
                .map(|m| user_words(&value_text(&m["content"])))
                .filter(|w| !w.is_empty())
                .collect();
            assert_eq!(said, [words]);
        }
        for (message, words) in [
            (
                "[Mon 2026-11-23 18:26 UTC] What is the distance from the earth to the moon?\n\nRuntime: agent=main | session=agent:main:main | sessionId=1a206f6b-47b6-464c-86db-730d5d7b0316 | host=vm",
                "What is the distance from the earth to the moon?",
            ),
            (
                "Sender (untrusted metadata):\n```json\n{\"name\": \"ana\"}\n```\n[Mon 2026-11-23 18:27 UTC] no, that's wrong",
                "no, that's wrong",
            ),
            ("  plain  ", "plain"),
            ("[x] is a checkbox", "[x] is a checkbox"),
        ] {
            assert_eq!(user_words(message), words);
        }
    }

    #[test]
    fn raw_and_parsed_contents_read_alike() {
        for (content, text) in [
            (r#""plain""#, "plain"),
            (r#""esc\"aped\n""#, "esc\"aped\n"),
            (
                r#"[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"b"}]"#,
                "a\nb",
            ),
            (
                r#"["bare", {"text": "part"}, 5, null, [1], {"text": 7}]"#,
                "bare\npart",
            ),
            (r#"[{"text": "first", "text": "last"}]"#, "last"),
            (
                r#"[{"type": "input_text", "text": "résumé \ud83e\udd80"}]"#,
                "résumé 🦀",
            ),
            (r#"{"text": "an object is no content"}"#, ""),
            ("null", ""),
            ("42", ""),
            ("[]", ""),
        ] {
            let raw: Box<RawValue> = serde_json::from_str(content).unwrap();
            let tree: Value = serde_json::from_str(content).unwrap();
            assert_eq!(content_text(&raw), text, "{content}");
            assert_eq!(value_text(&tree), text, "{content}");
        }
    }
}
