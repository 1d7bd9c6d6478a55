//! Requests: the hot-path view of a chat-completions request
//! ([`ChatRequest`]), and the other APIs' requests translated to and from
//! chat form. Inside, a turn is always an OpenAI chat completion: a request
//! in another API becomes one on the way in (that is also what is recorded
//! and learned from).

pub mod anthropic;
mod chat;
pub mod responses;

use serde_json::Value;

pub use chat::{CONTROL_FIELDS, ChatRequest, Field, Message, Role, truthy};

/// Copies metaclaw's own body fields (session controls) across a
/// translation, so the turn pipeline still sees them.
fn copy_control_fields(from: &Value, to: &mut serde_json::Map<String, Value>) {
    for field in CONTROL_FIELDS {
        if let Some(v) = from.get(*field) {
            to.insert((*field).to_string(), v.clone());
        }
    }
}
