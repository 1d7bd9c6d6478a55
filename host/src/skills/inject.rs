//! The skills block, and putting it into a request.
//!
//! The block goes right after the agent's own system prompt, whose bytes are
//! never changed: the request's JSON is spliced, not re-serialised, so the
//! prefix a provider caches stays identical turn after turn. Skills appear in
//! id order, so the same selection gives the same bytes.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

pub const BEGIN: &str = "<!-- metaclaw:skills -->";
pub const END: &str = "<!-- /metaclaw:skills -->";

/// One skill as it is injected.
#[derive(Debug, Clone, PartialEq)]
pub struct Injected {
    pub id: String,
    pub name: String,
    pub version: String,
    pub description: String,
    pub text: String,
    pub score: f32,
}

/// The block for `skills` (already in the order to show them).
pub fn block(skills: &[Injected]) -> String {
    let mut out = String::new();
    out.push_str(BEGIN);
    out.push_str("\n## Skills\n\nSelected by metaclaw for this request. Apply them where they fit; ignore them where they do not.\n");
    for s in skills {
        out.push_str(&format!(
            "\n### {} (v{})\n*{}*\n\n{}\n",
            s.name,
            s.version,
            s.description,
            s.text.trim()
        ));
    }
    out.push_str(END);
    out
}

/// A rough token count (about four bytes a token for English and code);
/// used only to keep the request within `max_context_tokens`.
pub fn estimate_tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4)
}

/// Drops the lowest-scored skills until the request fits the budget.
/// `reserve` is what the request keeps for the answer (its max tokens).
pub fn fit(
    mut skills: Vec<Injected>,
    request_bytes: usize,
    reserve: u64,
    max_context_tokens: u64,
) -> Vec<Injected> {
    while !skills.is_empty() {
        let total = estimate_tokens(request_bytes + block(&skills).len()) + reserve;
        if total <= max_context_tokens {
            break;
        }
        let Some(lowest) = skills
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.score.total_cmp(&b.1.score))
            .map(|(i, _)| i)
        else {
            break;
        };
        skills.remove(lowest);
    }
    skills
}

#[derive(Deserialize)]
struct Body<'a> {
    #[serde(borrow)]
    messages: &'a RawValue,
}

#[derive(Deserialize)]
struct FirstMessage<'a> {
    #[serde(borrow)]
    role: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

/// `body` with `text` appended to the system prompt: at the end of the
/// first message's content if that message is the system prompt, else as a
/// new system message in front. `None` if the body has no messages array.
pub fn splice(body: &[u8], text: &str) -> Option<Bytes> {
    let parsed: Body<'_> = serde_json::from_slice(body).ok()?;
    let messages: Vec<&RawValue> = serde_json::from_str(parsed.messages.get()).ok()?;
    let escaped = serde_json::to_string(&format!("\n\n{text}")).ok()?;
    let escaped_inner = &escaped[1..escaped.len() - 1];
    if let Some(first) = messages.first() {
        let m: FirstMessage<'_> = serde_json::from_str(first.get()).ok()?;
        if matches!(m.role.as_ref(), "system" | "developer") {
            let content = m.content?;
            let raw = content.get();
            let start = offset(body, raw)?;
            let end = start + raw.len();
            if raw.starts_with('"') {
                // Before the closing quote of the string.
                return Some(join(&[
                    &body[..end - 1],
                    escaped_inner.as_bytes(),
                    &body[end - 1..],
                ]));
            }
            if raw.starts_with('[') {
                // A new text part at the end of the parts list.
                let part = format!(
                    ",{{\"type\":\"text\",\"text\":{}}}",
                    serde_json::to_string(text).ok()?
                );
                let close = start + raw.rfind(']')?;
                let empty = raw[1..raw.len() - 1].trim().is_empty();
                let part = if empty { &part[1..] } else { part.as_str() };
                return Some(join(&[&body[..close], part.as_bytes(), &body[close..]]));
            }
            return None;
        }
    }
    // No system prompt: one goes first.
    let list = parsed.messages.get();
    let open = offset(body, list)? + list.find('[')? + 1;
    let message = format!(
        "{{\"role\":\"system\",\"content\":{}}}{}",
        serde_json::to_string(text).ok()?,
        if messages.is_empty() { "" } else { "," }
    );
    Some(join(&[&body[..open], message.as_bytes(), &body[open..]]))
}

/// Where `part` (a slice of `whole`) starts in it.
fn offset(whole: &[u8], part: &str) -> Option<usize> {
    let start = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    (start + part.len() <= whole.len()).then_some(start)
}

fn join(parts: &[&[u8]]) -> Bytes {
    let mut out = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
    for p in parts {
        out.extend_from_slice(p);
    }
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn skill(id: &str, score: f32) -> Injected {
        Injected {
            id: id.into(),
            name: id.into(),
            version: "1.0.0".into(),
            description: format!("About {id}."),
            text: "Do the thing.".into(),
            score,
        }
    }

    #[test]
    fn appends_after_a_string_system_prompt_and_keeps_its_bytes() {
        let body = br#"{"model":"m","messages":[{"role":"system","content":"You are \"terse\".\nBe kind."},{"role":"user","content":"hi"}],"x":1}"#;
        let out = splice(body, &block(&[skill("a", 1.0)])).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        let system = v["messages"][0]["content"].as_str().unwrap();
        assert!(system.starts_with("You are \"terse\".\nBe kind.\n\n<!-- metaclaw:skills -->"));
        assert!(system.ends_with(END));
        // The agent's bytes are a prefix of the new body.
        let prefix =
            br#"{"model":"m","messages":[{"role":"system","content":"You are \"terse\".\nBe kind."#;
        assert!(out.starts_with(&prefix[..prefix.len() - 1]));
        assert_eq!(v["messages"][1]["content"], "hi");
        assert_eq!(v["x"], 1);
    }

    #[test]
    fn adds_a_part_to_a_list_system_prompt() {
        let body = serde_json::to_vec(&json!({"messages": [{"role": "system", "content": [{"type": "text", "text": "S"}]}, {"role": "user", "content": "q"}]})).unwrap();
        let out = splice(&body, "BLOCK").unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["messages"][0]["content"][0]["text"], "S");
        assert_eq!(v["messages"][0]["content"][1]["text"], "BLOCK");
    }

    #[test]
    fn inserts_a_system_message_when_there_is_none() {
        let out = splice(br#"{"messages": [{"role":"user","content":"q"}]}"#, "BLOCK").unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v["messages"][0],
            json!({"role": "system", "content": "BLOCK"})
        );
        assert_eq!(v["messages"][1]["content"], "q");
        let out = splice(br#"{"messages":[]}"#, "BLOCK").unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["messages"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn the_budget_drops_the_weakest_skills_first() {
        let skills = vec![skill("a", 0.9), skill("b", 0.3), skill("c", 0.6)];
        let one = block(&skills[..1]).len();
        let kept = fit(skills.clone(), 4000, 100, estimate_tokens(4000 + one) + 100);
        assert_eq!(
            kept.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
            vec!["a"]
        );
        assert!(fit(skills.clone(), 4000, 0, 10).is_empty());
        assert_eq!(fit(skills, 10, 0, 1_000_000).len(), 3);
    }
}
