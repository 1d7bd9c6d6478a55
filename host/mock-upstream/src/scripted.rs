//! Models this crate does not script itself, served by name once
//! registered ([`crate::Dummy::with_scripted`]): MetaClaw-Bench's oracle
//! lives with the bench (metaclaw-bench) and registers here for the tests
//! that use it.

use serde_json::Value;

/// A model registered by name: it sees each chat request for that name
/// (on `/v1/chat/completions`, and on `/v1/messages` translated to chat).
pub trait Scripted: Send + Sync {
    /// Its answer to `request`.
    fn reply(&self, request: &ScriptedRequest<'_>) -> ScriptedReply;
}

/// What a scripted model is shown of a chat request.
pub struct ScriptedRequest<'a> {
    /// The request's messages, as sent.
    pub messages: &'a [Value],
    /// The names of the tools it offers.
    pub tools: Vec<String>,
    /// The last user message's text (OpenClaw's internal context skipped).
    pub last_user_text: String,
}

/// A scripted model's answer: text, or tool calls after a text.
#[derive(Debug, Clone, PartialEq)]
pub enum ScriptedReply {
    Text(String),
    Calls {
        text: String,
        calls: Vec<ScriptedCall>,
    },
}

/// One tool call of a [`ScriptedReply::Calls`].
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptedCall {
    pub name: String,
    pub arguments: Value,
}
