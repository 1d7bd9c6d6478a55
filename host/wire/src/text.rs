//! The text of a message, read the same way from a parsed tree and from raw
//! JSON, in all three APIs.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

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
    let s = raw.get();
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
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if self.in_part && key == "text" {
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
