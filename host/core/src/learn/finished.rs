//! A recorded turn and its successor, as the `finished-turn` scorers, the
//! judge and the evolver see them: user messages are the user's words
//! (`metaclaw_wire::text::user_words`, the rules retrieval uses), so an
//! agent's metadata (OpenClaw's timestamp prefix and runtime line) is
//! neither judged nor learned from, nor named in an evolved skill.

use metaclaw_wire::recorded::{Completion, Message as Recorded};
use metaclaw_wire::text::{user_words, value_text};
use serde_json::Value;

use crate::plugins::types::{FinishedTurn, Message, ToolCall};
use crate::store::ScoringInput;

/// `turn`'s request and answer, and its next state from `next`: the tool
/// results and the user message that came after the answer.
pub fn finished_turn(turn: &ScoringInput, next: Option<&ScoringInput>) -> FinishedTurn {
    let response = turn
        .response
        .as_ref()
        .map(Completion::read)
        .and_then(|c| c.choices.into_iter().next())
        .and_then(|c| c.message)
        .map(|m| to_message(&m))
        .unwrap_or_else(|| Message {
            role: "assistant".into(),
            content: String::new(),
            tool_call_id: None,
            tool_calls: Vec::new(),
        });
    let (tool_results, next_user_message) = match next {
        Some(next) => next_state(&next.messages),
        None => (Vec::new(), None),
    };
    FinishedTurn {
        session_id: turn.session_id.clone(),
        turn_id: turn.turn_id.clone(),
        request: turn
            .messages
            .iter()
            .map(|m| to_message(&Recorded::read(m)))
            .collect(),
        response,
        tool_results,
        next_user_message,
        status: turn.status.clone(),
    }
}

/// What follows the last assistant message of the next request: tool
/// results, and the user's next message if it ends with one.
fn next_state(messages: &[Value]) -> (Vec<Message>, Option<String>) {
    let messages: Vec<Recorded> = messages.iter().map(Recorded::read).collect();
    let after = messages
        .iter()
        .rposition(|m| m.role() == "assistant")
        .map(|i| i + 1)
        .unwrap_or(0);
    let tail: Vec<Message> = messages[after..].iter().map(to_message).collect();
    let tools = tail.iter().filter(|m| m.role == "tool").cloned().collect();
    let user = tail
        .iter()
        .rev()
        .find(|m| m.role == "user")
        .map(|m| m.content.clone());
    (tools, user)
}

/// A recorded OpenAI-shaped message as a WIT `message` (a user message's
/// content is the user's words).
pub fn to_message(m: &Recorded) -> Message {
    let role = m.role();
    let content = match role {
        "user" => user_words(&value_text(&m.content)),
        _ => value_text(&m.content),
    };
    let tool_calls = m
        .tool_calls
        .iter()
        .map(|c| ToolCall {
            id: c.id.clone().unwrap_or_default(),
            name: c.function.name.clone().unwrap_or_default(),
            arguments: c.function.arguments.clone().unwrap_or_default(),
        })
        .collect();
    Message {
        role: role.to_string(),
        content,
        tool_call_id: m.tool_call_id.clone(),
        tool_calls,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn input(messages: Vec<Value>, response: Option<Value>) -> ScoringInput {
        ScoringInput {
            turn_id: "t".into(),
            session_id: "s".into(),
            seq: 1,
            status: "ok".into(),
            turn_type: "main".into(),
            messages,
            response,
        }
    }

    #[test]
    fn the_next_request_supplies_tool_results_and_the_users_reply() {
        let turn = input(
            vec![json!({"role": "user", "content": "read a.txt"})],
            Some(
                json!({"choices": [{"message": {"role": "assistant", "content": null,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}]}}]}),
            ),
        );
        let next = input(
            vec![
                json!({"role": "user", "content": "read a.txt"}),
                json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "function": {"name": "read", "arguments": "{}"}}]}),
                json!({"role": "tool", "tool_call_id": "c1", "content": "ENOENT"}),
            ],
            None,
        );
        let f = finished_turn(&turn, Some(&next));
        assert_eq!(f.response.tool_calls[0].name, "read");
        assert_eq!(f.tool_results.len(), 1);
        assert_eq!(f.tool_results[0].tool_call_id.as_deref(), Some("c1"));
        assert_eq!(f.next_user_message, None);

        let reply = input(
            vec![
                json!({"role": "user", "content": "hi"}),
                json!({"role": "assistant", "content": "hello"}),
                json!({"role": "user", "content": [{"type": "text", "text": "no, that's wrong"}]}),
            ],
            None,
        );
        let f = finished_turn(&turn, Some(&reply));
        assert_eq!(f.next_user_message.as_deref(), Some("no, that's wrong"));
        assert!(f.tool_results.is_empty());
        let last = finished_turn(&turn, None);
        assert_eq!(last.next_user_message, None);
    }

    #[test]
    fn openclaws_metadata_is_not_what_the_user_said() {
        let task = "[Mon 2026-11-23 18:26 UTC] What is the distance from the earth to the moon?\n\nRuntime: agent=main | session=agent:main:main | sessionId=1a206f6b-47b6-464c-86db-730d5d7b0316 | host=vm";
        let turn = input(
            vec![
                json!({"role": "system", "content": "[Mon 2026-11-23 18:26 UTC] kept as sent"}),
                json!({"role": "user", "content": [{"type": "text", "text": task}]}),
            ],
            Some(
                json!({"choices": [{"message": {"role": "assistant", "content": "[1] About 1,000 km."}}]}),
            ),
        );
        let next = input(
            vec![
                json!({"role": "user", "content": task}),
                json!({"role": "assistant", "content": "[1] About 1,000 km."}),
                json!({"role": "user", "content": "[Mon 2026-11-23 18:27 UTC] No, that's wrong: it is about 384,400 km."}),
            ],
            None,
        );
        let f = finished_turn(&turn, Some(&next));
        assert_eq!(
            f.request[1].content,
            "What is the distance from the earth to the moon?"
        );
        assert_eq!(
            f.next_user_message.as_deref(),
            Some("No, that's wrong: it is about 384,400 km.")
        );
        // Only the user's messages are theirs to clean.
        assert_eq!(
            f.request[0].content,
            "[Mon 2026-11-23 18:26 UTC] kept as sent"
        );
        assert_eq!(f.response.content, "[1] About 1,000 km.");
    }
}
