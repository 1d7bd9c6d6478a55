//! An OpenAI chat message and chat completion as metaclaw records them
//! (the agent's messages, an assembled answer), read into types. Read
//! leniently, as the agent's JSON deserves: a field that is missing or of
//! another shape reads as absent, never as an error, so one odd field does
//! not cost the rest of the message.

use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer};
use serde_json::Value;

use crate::request::Lenient;

/// A chat completion (`{"choices": [{"message": …, "finish_reason": …}]}`)
/// or an error body (`{"error": {"message": …}}`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Completion {
    #[serde(deserialize_with = "each")]
    pub choices: Vec<Choice>,
    #[serde(deserialize_with = "lenient")]
    pub error: Option<ErrorBody>,
}

impl Completion {
    pub fn read(value: &Value) -> Self {
        Self::deserialize(value).unwrap_or_default()
    }

    /// The first choice's message.
    pub fn message(&self) -> Option<&Message> {
        self.choices.first().and_then(|c| c.message.as_ref())
    }

    /// Whether some choice says why it ended (a whole answer).
    pub fn finished(&self) -> bool {
        self.choices.iter().any(|c| !c.finish_reason.is_null())
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Choice {
    #[serde(deserialize_with = "lenient")]
    pub message: Option<Message>,
    /// Kept as sent: any value but `null` means the answer ended.
    pub finish_reason: Value,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ErrorBody {
    #[serde(deserialize_with = "lenient")]
    pub message: Option<String>,
}

/// A chat message: its role, its content as sent (a string or a list of
/// parts: [`crate::text::value_text`] reads either), its tool calls.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Message {
    #[serde(deserialize_with = "lenient")]
    pub role: Option<String>,
    pub content: Value,
    #[serde(deserialize_with = "each")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(deserialize_with = "lenient")]
    pub tool_call_id: Option<String>,
}

impl Message {
    pub fn read(value: &Value) -> Self {
        Self::deserialize(value).unwrap_or_default()
    }

    pub fn role(&self) -> &str {
        self.role.as_deref().unwrap_or("")
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ToolCall {
    #[serde(deserialize_with = "lenient")]
    pub id: Option<String>,
    #[serde(deserialize_with = "lenient")]
    pub function: Function,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Function {
    #[serde(deserialize_with = "lenient")]
    pub name: Option<String>,
    /// JSON text, as OpenAI sends it.
    #[serde(deserialize_with = "lenient")]
    pub arguments: Option<String>,
}

/// The field as `T`, or `T`'s default where it has another shape (the
/// request fronts' [`Lenient`], with the default filled in).
pub fn lenient<'de, D: Deserializer<'de>, T: DeserializeOwned + Default>(
    d: D,
) -> Result<T, D::Error> {
    Ok(Lenient::<T>::deserialize(d)?.read().unwrap_or_default())
}

/// A list, each element read leniently; not a list: empty.
pub fn each<'de, D: Deserializer<'de>, T: DeserializeOwned + Default>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(items) => items
            .into_iter()
            .map(|v| T::deserialize(v).unwrap_or_default())
            .collect(),
        _ => Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_odd_field_reads_as_absent_and_costs_nothing_else() {
        let m = Message::read(&json!({
            "role": 7,
            "content": [{"type": "text", "text": "hi"}],
            "tool_calls": [
                "not a call",
                {"id": "c1", "function": {"name": "ls", "arguments": {"not": "text"}}}
            ],
            "tool_call_id": "t1"
        }));
        assert_eq!(m.role(), "");
        assert_eq!(crate::text::value_text(&m.content), "hi");
        assert_eq!(m.tool_calls.len(), 2);
        assert_eq!(m.tool_calls[0].id, None);
        assert_eq!(m.tool_calls[1].id.as_deref(), Some("c1"));
        assert_eq!(m.tool_calls[1].function.name.as_deref(), Some("ls"));
        assert_eq!(m.tool_calls[1].function.arguments, None);
        assert_eq!(m.tool_call_id.as_deref(), Some("t1"));
        assert_eq!(Message::read(&json!("text")).role, None);
    }

    #[test]
    fn a_completion_its_message_whether_it_ended_and_an_error() {
        let done = Completion::read(&json!({"choices": [
            {"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ]}));
        assert!(done.finished());
        assert_eq!(done.message().map(|m| m.role()), Some("assistant"));
        let cut = Completion::read(
            &json!({"choices": [{"message": {"content": "o"}, "finish_reason": null}]}),
        );
        assert!(!cut.finished());
        let failed = Completion::read(&json!({"error": {"message": "boom"}}));
        assert!(failed.message().is_none());
        assert_eq!(
            failed.error.and_then(|e| e.message).as_deref(),
            Some("boom")
        );
    }
}
