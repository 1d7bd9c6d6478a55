//! The WIT records the in-process plugin tests pass to plugins.
#![allow(dead_code)]

use metaclaw_core::plugins::types::{FinishedTurn, Message, Skill, TurnContext};

pub fn message(role: &str, content: &str) -> Message {
    Message {
        role: role.into(),
        content: content.into(),
        tool_call_id: None,
        tool_calls: Vec::new(),
    }
}

/// A main turn of session `s` asking `query`.
pub fn context(query: &str) -> TurnContext {
    TurnContext {
        session_id: "s".into(),
        turn_type: "main".into(),
        model: "m".into(),
        system_prompt: String::new(),
        messages: Vec::new(),
        query: query.into(),
    }
}

/// A general skill at version 1.0.0.
pub fn skill(id: &str, description: &str, body: &str) -> Skill {
    Skill {
        id: id.into(),
        name: id.into(),
        description: description.into(),
        category: "general".into(),
        tags: Vec::new(),
        version: "1.0.0".into(),
        body: body.into(),
    }
}

/// A finished turn of `session` that answered "hi" with `response`.
pub fn finished_turn(
    session: &str,
    response: Message,
    tool_results: Vec<Message>,
    next_user_message: Option<&str>,
) -> FinishedTurn {
    FinishedTurn {
        session_id: session.into(),
        turn_id: "t".into(),
        request: vec![message("user", "hi")],
        response,
        tool_results,
        next_user_message: next_user_message.map(str::to_string),
        status: "ok".into(),
    }
}
