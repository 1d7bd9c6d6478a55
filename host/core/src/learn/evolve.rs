//! Skill evolution: a session's transcript (secrets redacted, size-bounded)
//! and the judge's scores go to the evolver model with the library's names
//! and descriptions; its JSON drafts are checked against the skill schema
//! (repaired where that is safe, rejected with a reason otherwise), then
//! pass through the `evolver` plugin chain.

use std::collections::HashSet;

use metaclaw_wire::Obj;
use metaclaw_wire::recorded::{each, lenient};
use serde::Deserialize;
use serde_json::Value;

use super::llm::{Prompt, clip};
use crate::plugins::types::{Message, SkillDraft};
use crate::redact::Redactor;
use crate::skills::skill::{Category, MAX_BODY, MAX_DRAFT_DESCRIPTION, valid_name};

pub const PROMPT: Prompt = Prompt::new("evolver-v1", include_str!("../../prompts/evolver-v1.md"));

/// Characters of one message in the transcript.
const MESSAGE_CHARS: usize = 1_500;
/// Library entries listed to the evolver (names and descriptions).
const LISTED_SKILLS: usize = 300;
pub const MAX_TOKENS: u32 = 3_000;
const MAX_TAGS: usize = 8;

/// The conversation as `[role] text` lines, secrets redacted, system
/// messages left out (the agent's own prompt teaches nothing new), cut to
/// `limit` characters: the first user message (the task) stays, then as
/// many of the latest messages as fit.
pub fn transcript(messages: &[Message], limit: usize, redactor: &Redactor) -> String {
    let lines: Vec<String> = messages
        .iter()
        .filter(|m| m.role != "system")
        .map(|m| {
            let mut line = format!("[{}] {}", m.role, clip(m.content.trim(), MESSAGE_CHARS));
            for call in &m.tool_calls {
                line.push_str(&format!(
                    "\n[calls tool {}({})]",
                    call.name,
                    clip(&call.arguments, 300)
                ));
            }
            redactor.redact_str(&line)
        })
        .collect();
    let total: usize = lines.iter().map(|l| l.len() + 1).sum();
    if total <= limit {
        return lines.join("\n");
    }
    let first = lines
        .iter()
        .position(|l| l.starts_with("[user]"))
        .unwrap_or(0);
    let head = clip(&lines[first], limit / 4);
    let mut budget = limit.saturating_sub(head.len() + 64);
    let mut tail = Vec::new();
    for line in lines[first + 1..].iter().rev() {
        if line.len() + 1 > budget {
            break;
        }
        budget -= line.len() + 1;
        tail.push(line.as_str());
    }
    tail.reverse();
    let omitted = lines.len() - first - 1 - tail.len();
    let mut out = head;
    out.push_str(&format!("\n[… {omitted} messages omitted …]\n"));
    out.push_str(&tail.join("\n"));
    out
}

/// `- name: description` per library skill, for the evolver, with a note
/// after the (clipped) description where there is one: how a skill that
/// did badly fared, so the evolver can revise it.
pub fn library_list<'a>(
    skills: impl Iterator<Item = (&'a str, &'a str, Option<String>)>,
) -> String {
    let mut out = String::new();
    for (i, (name, description, note)) in skills.enumerate() {
        if i == LISTED_SKILLS {
            out.push_str("- …\n");
            break;
        }
        let note = note.map(|n| format!(" ({n})")).unwrap_or_default();
        out.push_str(&format!("- {name}: {}{note}\n", clip(description, 200)));
    }
    if out.is_empty() {
        out.push_str("(none yet)");
    }
    out
}

/// A draft the schema check turned down.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejected {
    pub name: String,
    pub reason: String,
}

/// The evolver's reply as drafts: at most `max`, each valid against the
/// skill schema. Repairs: a name is slugged, a long description cut, an
/// unknown category becomes `general`, tags are cleaned, an `updates` that
/// names no library skill is dropped. Anything else wrong rejects the
/// draft, with the reason.
pub fn parse_drafts(
    reply: &str,
    max: usize,
    library: &HashSet<String>,
) -> Result<(Vec<SkillDraft>, Vec<Rejected>), ReplyRejected> {
    let value =
        extract_json(reply).ok_or_else(|| ReplyRejected::NoJson(clip(reply.trim(), 200)))?;
    let items = match &value {
        Value::Array(items) => items.clone(),
        Value::Object(o) => match o.get("skills").or_else(|| o.get("drafts")) {
            Some(Value::Array(items)) => items.clone(),
            _ if o.contains_key("name") => vec![value.clone()],
            _ => return Err(ReplyRejected::NoSkillsList),
        },
        _ => return Err(ReplyRejected::NotListOrObject),
    };
    let mut drafts: Vec<SkillDraft> = Vec::new();
    let mut rejected = Vec::new();
    for item in items {
        let item = Obj::<Draft>::read(&item);
        let name_hint = item
            .as_ref()
            .and_then(|d| d.name.as_deref())
            .unwrap_or("(unnamed)")
            .to_string();
        if drafts.len() == max {
            rejected.push(Rejected {
                name: name_hint,
                reason: format!("over the limit of {max} drafts per session"),
            });
            continue;
        }
        match check_draft(item.as_ref(), library) {
            Ok(d) if drafts.iter().any(|k| k.name == d.name) => rejected.push(Rejected {
                name: d.name,
                reason: "the same name twice in one reply".into(),
            }),
            Ok(d) => drafts.push(d),
            Err(reason) => rejected.push(Rejected {
                name: name_hint,
                reason: reason.to_string(),
            }),
        }
    }
    Ok((drafts, rejected))
}

/// Why an evolver's reply gave no drafts at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyRejected {
    #[error("the reply has no JSON: {0}")]
    NoJson(String),
    #[error("the reply's JSON has no \"skills\" list")]
    NoSkillsList,
    #[error("the reply's JSON is neither a list nor an object")]
    NotListOrObject,
}

/// Why one draft of a reply is not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DraftRejected {
    #[error("not a JSON object")]
    NotAnObject,
    #[error("no name")]
    NoName,
    #[error("name {0:?}: 2-64 lowercase letters, digits and dashes")]
    BadName(String),
    #[error("no description")]
    NoDescription,
    #[error("no body")]
    NoBody,
    #[error("the body is {0} bytes; at most {MAX_BODY}")]
    LongBody(usize),
}

/// A draft as the evolver wrote it: each field none when absent or of
/// another shape (as good as missing, which [`check_draft`] judges).
#[derive(Deserialize, Default)]
#[serde(default)]
struct Draft {
    #[serde(deserialize_with = "lenient")]
    name: Option<String>,
    #[serde(deserialize_with = "lenient")]
    description: Option<String>,
    #[serde(deserialize_with = "lenient")]
    body: Option<String>,
    /// The original's drafts call the body "content".
    #[serde(deserialize_with = "lenient")]
    content: Option<String>,
    #[serde(deserialize_with = "lenient")]
    category: Option<String>,
    /// Each tag none unless a string.
    #[serde(deserialize_with = "each")]
    tags: Vec<Option<String>>,
    #[serde(deserialize_with = "lenient")]
    updates: Option<String>,
}

/// The text of a field, trimmed; none when blank.
fn text(field: Option<&str>) -> Option<&str> {
    field.map(str::trim).filter(|s| !s.is_empty())
}

/// `item`: none when the reply's item is not a JSON object.
fn check_draft(
    item: Option<&Draft>,
    library: &HashSet<String>,
) -> Result<SkillDraft, DraftRejected> {
    let Some(item) = item else {
        return Err(DraftRejected::NotAnObject);
    };
    let name = slug(text(item.name.as_deref()).ok_or(DraftRejected::NoName)?);
    if !valid_name(&name) {
        return Err(DraftRejected::BadName(name));
    }
    let description = text(item.description.as_deref()).ok_or(DraftRejected::NoDescription)?;
    let description = clip(
        &description.split_whitespace().collect::<Vec<_>>().join(" "),
        MAX_DRAFT_DESCRIPTION - 1,
    );
    let body = text(item.body.as_deref())
        .or_else(|| text(item.content.as_deref()))
        .ok_or(DraftRejected::NoBody)?
        .to_string();
    if body.len() > MAX_BODY {
        return Err(DraftRejected::LongBody(body.len()));
    }
    let category = text(item.category.as_deref())
        .and_then(|c| {
            let c = c.to_ascii_lowercase().replace('_', "-");
            Category::ALL.into_iter().find(|k| k.as_str() == c)
        })
        .unwrap_or(Category::General);
    let mut tags: Vec<String> = Vec::new();
    for tag in item.tags.iter().flatten() {
        let t = tag.trim().to_lowercase();
        if (1..=40).contains(&t.len()) && !tags.contains(&t) && tags.len() < MAX_TAGS {
            tags.push(t);
        }
    }
    let updates = text(item.updates.as_deref())
        .map(slug)
        .filter(|u| library.contains(u));
    Ok(SkillDraft {
        name,
        description,
        category: category.as_str().into(),
        tags,
        body,
        updates,
    })
}

/// `Fix the Build!` → `fix-the-build`.
fn slug(text: &str) -> String {
    let mut out = String::new();
    for c in text.trim().chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    let mut out = out.trim_end_matches('-').to_string();
    out.truncate(64);
    out.trim_end_matches('-').to_string()
}

/// The JSON in a model's reply: the whole reply, a fenced block, or the
/// span from the first `{`/`[` to its last closing brace.
fn extract_json(reply: &str) -> Option<Value> {
    let trimmed = reply.trim();
    if let Ok(v) = serde_json::from_str(trimmed) {
        return Some(v);
    }
    if let Some(start) = trimmed.find("```") {
        let after = &trimmed[start + 3..];
        let after = after.trim_start_matches(|c: char| c.is_ascii_alphabetic());
        if let Some(end) = after.find("```")
            && let Ok(v) = serde_json::from_str(after[..end].trim())
        {
            return Some(v);
        }
    }
    for (open, close) in [('{', '}'), ('[', ']')] {
        if let (Some(a), Some(b)) = (trimmed.find(open), trimmed.rfind(close))
            && a < b
            && let Ok(v) = serde_json::from_str(&trimmed[a..=b])
        {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: &str, content: &str) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
            tool_call_id: None,
            tool_calls: Vec::new(),
        }
    }

    #[test]
    fn drafts_are_repaired_or_rejected_with_a_reason() {
        let library: HashSet<String> = ["git-rebase".to_string()].into();
        let reply = r#"Here you go:
```json
{"skills": [
  {"name": "Check Units First!", "description": "When numbers have units.", "category": "Coding", "tags": ["Math", "math", ""], "body": "Convert first.", "updates": "nope"},
  {"name": "no-body", "description": "x"},
  {"name": "check-units-first", "description": "again", "body": "b"},
  {"name": "git-rebase", "description": "Rebase better.", "content": "Fetch first.", "updates": "git-rebase", "category": "common_mistakes"},
  {"name": "fourth", "description": "d", "body": "b"}
]}
```"#;
        let (drafts, rejected) = parse_drafts(reply, 2, &library).unwrap();
        assert_eq!(drafts.len(), 2);
        assert_eq!(drafts[0].name, "check-units-first");
        assert_eq!(drafts[0].category, "general");
        assert_eq!(drafts[0].tags, vec!["math"]);
        assert_eq!(drafts[0].updates, None, "unknown skill: not an update");
        assert_eq!(drafts[1].body, "Fetch first.");
        assert_eq!(drafts[1].updates.as_deref(), Some("git-rebase"));
        assert_eq!(drafts[1].category, "common-mistakes");
        let reasons: Vec<&str> = rejected.iter().map(|r| r.reason.as_str()).collect();
        assert_eq!(
            reasons,
            vec![
                "no body",
                "the same name twice in one reply",
                "over the limit of 2 drafts per session"
            ]
        );
        assert!(parse_drafts("no json here", 3, &library).is_err());
        assert!(parse_drafts("{\"other\": 1}", 3, &library).is_err());
        let (bare, _) = parse_drafts(
            r#"[{"name": "a-b", "description": "d", "body": "b"}]"#,
            3,
            &library,
        )
        .unwrap();
        assert_eq!(bare[0].name, "a-b");
    }

    #[test]
    fn transcripts_are_redacted_and_bounded_keeping_the_task() {
        let redactor = Redactor::new(Vec::new());
        let mut messages = vec![
            msg("system", "You are OpenClaw. Huge prompt."),
            msg(
                "user",
                "Deploy it; my key is sk-live-abcdefghijklmnopqrstuvwxyz123456",
            ),
        ];
        for i in 0..200 {
            messages.push(msg("assistant", &format!("step {i} {}", "x".repeat(100))));
        }
        messages.push(msg("user", "no, that is wrong"));
        let t = transcript(&messages, 4_000, &redactor);
        assert!(t.len() <= 4_100, "{}", t.len());
        assert!(!t.contains("Huge prompt"));
        assert!(!t.contains("sk-live-abcdefghijklmnopqrstuvwxyz123456"));
        assert!(t.starts_with("[user] Deploy it"));
        assert!(t.contains("messages omitted"));
        assert!(t.ends_with("[user] no, that is wrong"));
        let short = transcript(&messages[..3], 4_000, &redactor);
        assert!(!short.contains("omitted"));
    }
}
