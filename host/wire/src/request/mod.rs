//! Requests: the hot-path view of a chat-completions request
//! ([`ChatRequest`]), and the other APIs' requests translated to and from
//! chat form. Inside, a turn is always an OpenAI chat completion: a request
//! in another API becomes one on the way in (that is also what is recorded
//! and learned from).

pub mod anthropic;
mod chat;
pub mod responses;

use serde::de::{Deserialize, DeserializeOwned, Deserializer};
use serde_json::{Map, Value, json};

pub use chat::{CONTROL_FIELDS, ChatRequest, Field, Message, Role, truthy};

/// A field of a translated request as the client sent it: absent, read as
/// `T`, or of another shape. Reading it never fails, so each translator
/// decides what a wrong shape means (dropped, or its own [`crate::Error`])
/// and no serde message reaches the client.
#[derive(Default)]
pub enum Lenient<T> {
    #[default]
    Absent,
    Read(T),
    Wrong,
}

impl<T> Lenient<T> {
    /// The value when it was read as `T`; absent and wrong alike are none.
    pub fn read(self) -> Option<T> {
        match self {
            Self::Read(v) => Some(v),
            Self::Absent | Self::Wrong => None,
        }
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        Ok(T::deserialize(value).map_or(Self::Wrong, Self::Read))
    }
}

/// A field forwarded as sent: present, null included (a plain
/// `Option<Value>` reads a null as absent).
fn given<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// `T` read from a JSON object only: anything else, or an object `T`
/// cannot read, is none (derived structs and tagged enums would also
/// read a list, which the key lookups they replace never did).
pub struct Obj<T>(pub Option<T>);

impl<T: DeserializeOwned> Obj<T> {
    /// `value` read as `T` when it is an object `T` reads.
    pub fn read(value: &Value) -> Option<T> {
        match value {
            Value::Object(_) => T::deserialize(value).ok(),
            _ => None,
        }
    }
}

impl<T> Default for Obj<T> {
    fn default() -> Self {
        Self(None)
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Self(match Value::deserialize(d)? {
            object @ Value::Object(_) => T::deserialize(object).ok(),
            _ => None,
        }))
    }
}

/// metaclaw's own body fields ([`CONTROL_FIELDS`]), carried across a
/// translation as sent, so the turn pipeline still sees them.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Controls {
    #[serde(deserialize_with = "given")]
    session_id: Option<Value>,
    #[serde(deserialize_with = "given")]
    session_done: Option<Value>,
    #[serde(deserialize_with = "given")]
    turn_type: Option<Value>,
}

impl Controls {
    fn fields(self) -> [(&'static str, Option<Value>); 3] {
        [
            ("session_id", self.session_id),
            ("session_done", self.session_done),
            ("turn_type", self.turn_type),
        ]
    }

    /// Copies the fields that were sent into `to`.
    fn copy_into(self, to: &mut Map<String, Value>) {
        for (name, value) in self.fields() {
            if let Some(v) = value {
                to.insert(name.to_string(), v);
            }
        }
    }
}

/// A part of a translated user message: chat's text or image part.
enum ChatPart {
    /// The client's `text`, as sent (not always a string).
    Text(Value),
    Image(String),
}

impl ChatPart {
    fn into_value(self) -> Value {
        match self {
            Self::Text(text) => json!({"type": "text", "text": text}),
            Self::Image(url) => json!({"type": "image_url", "image_url": {"url": url}}),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_the_control_fields() {
        let names: Vec<&str> = Controls::default()
            .fields()
            .iter()
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(names, CONTROL_FIELDS);
    }
}
