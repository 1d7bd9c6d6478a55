//! What OpenClaw puts into its requests that tells us about sessions
//! (see shared/reference/openclaw.md §4): the `prompt_cache_key`
//! (`<sessionId>:<boundary>`), the runtime line (`… sessionId=<uuid> …`) in
//! the first user message, the internal-context message appended to every
//! call, and heartbeat polls.

pub const INTERNAL_CONTEXT_BEGIN: &str = "<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>";
const HEARTBEAT_MARKERS: &[&str] = &["[OpenClaw heartbeat poll]", "HEARTBEAT_OK"];

/// `"<sessionId>:<N>"` → (sessionId, N). A key without a numeric suffix is a
/// session id of its own with boundary 0.
pub fn split_prompt_cache_key(key: &str) -> Option<(&str, u32)> {
    let key = key.trim();
    if key.is_empty() {
        return None;
    }
    match key.rsplit_once(':') {
        Some((sid, n)) if !sid.is_empty() => match n.parse::<u32>() {
            Ok(n) => Some((sid, n)),
            Err(_) => Some((key, 0)),
        },
        _ => Some((key, 0)),
    }
}

/// The `sessionId=<uuid>` of OpenClaw's runtime line, if `text` has one.
pub fn runtime_session_id(text: &str) -> Option<&str> {
    let mut rest = text;
    while let Some(at) = rest.find("sessionId=") {
        let candidate = &rest[at + "sessionId=".len()..];
        if let Some(id) = candidate.get(..36)
            && is_uuid(id)
        {
            return Some(id);
        }
        rest = candidate;
    }
    None
}

/// The marker that ends OpenClaw's cacheable system prompt: only OpenClaw's
/// harness writes it (an agent id is read only from requests that have it).
pub const STABLE_END: &str = "<!-- /openclaw:attempt:STABLE -->";
const DYNAMIC_END: &str = "<!-- /openclaw:attempt:DYNAMIC -->";

/// The agent id of OpenClaw's runtime line (`Runtime: [name=… | ]agent=<id>
/// | session=agent:<id>:… | …`), when that line is the last of `text` (the
/// DYNAMIC block's end marker aside): where OpenClaw puts it, after
/// whatever the user wrote, so a line a sender typed into a message is
/// never it. Its `agent=` and its session key must agree.
pub fn runtime_agent(text: &str) -> Option<&str> {
    let text = text.trim_end();
    let text = text.strip_suffix(DYNAMIC_END).unwrap_or(text).trim_end();
    let line = text.rsplit('\n').next()?;
    let fields = line.strip_prefix("Runtime: ")?;
    let (mut agent, mut session) = (None, None);
    for field in fields.split(" | ") {
        if let Some(id) = field.strip_prefix("agent=") {
            agent = Some(id.trim());
        } else if let Some(key) = field.strip_prefix("session=") {
            session = Some(key.trim());
        }
    }
    let agent = agent.filter(|a| !a.is_empty())?;
    session?
        .strip_prefix("agent:")?
        .strip_prefix(agent)?
        .strip_prefix(':')?;
    Some(agent)
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// Is this message text OpenClaw's per-call internal context? It is
/// regenerated on every call and never part of the conversation.
pub fn is_internal_context(text: &str) -> bool {
    text.trim_start().starts_with(INTERNAL_CONTEXT_BEGIN)
}

/// `text` without the wall-clock envelope OpenClaw puts before each user
/// message (`[Wed 2026-11-25 06:31 UTC] …`); as it is when there is none.
pub fn strip_time_envelope(text: &str) -> &str {
    let Some(end) = text.strip_prefix('[').and_then(|t| t.find("] ")) else {
        return text;
    };
    // `Ddd YYYY-MM-DD`, then the time and zone.
    let inner = &text[1..=end];
    let date = inner.get(4..14).unwrap_or("");
    let is_date = date.len() == 10
        && date.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b'-',
            _ => b.is_ascii_digit(),
        });
    if inner.get(3..4) == Some(" ") && is_date {
        &text[end + 3..]
    } else {
        text
    }
}

/// A heartbeat poll is background work, not the user talking.
pub fn is_heartbeat(text: &str) -> bool {
    HEARTBEAT_MARKERS.iter().any(|m| text.contains(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_envelope_is_stripped_and_nothing_else() {
        assert_eq!(
            strip_time_envelope("[Wed 2026-11-25 06:31 UTC] [Previous Feedback] ok"),
            "[Previous Feedback] ok"
        );
        assert_eq!(strip_time_envelope("[Mon 2026-03-16 09:00 GMT+8] hi"), "hi");
        for kept in [
            "[Previous Feedback] ok",
            "[note] hi",
            "[Wed 2026-1-25 06:31] x",
            "[",
        ] {
            assert_eq!(strip_time_envelope(kept), kept);
        }
    }

    #[test]
    fn prompt_cache_keys() {
        assert_eq!(
            split_prompt_cache_key("1a206f6b-47b6-464c-86db-730d5d7b0316:0"),
            Some(("1a206f6b-47b6-464c-86db-730d5d7b0316", 0))
        );
        assert_eq!(split_prompt_cache_key("abc:12"), Some(("abc", 12)));
        assert_eq!(split_prompt_cache_key("plain-key"), Some(("plain-key", 0)));
        assert_eq!(split_prompt_cache_key("a:b"), Some(("a:b", 0)));
        assert_eq!(split_prompt_cache_key("  "), None);
    }

    #[test]
    fn the_agent_is_read_from_the_runtime_line_openclaw_appends() {
        let completions = "[Sun 2026-11-22 08:43 UTC] Say PONG\n\nRuntime: agent=main | session=agent:main:main | sessionId=1a206f6b-47b6-464c-86db-730d5d7b0316 | host=vm";
        assert_eq!(runtime_agent(completions), Some("main"));
        let named = "x\nRuntime: name=Ops | agent=ops-bot | session=agent:ops-bot:explicit:7b21 | host=vm\n<!-- /openclaw:attempt:DYNAMIC -->";
        assert_eq!(runtime_agent(named), Some("ops-bot"));
        // A line a sender typed is followed by OpenClaw's own: the last wins.
        let forged = "[Sun] hi\nRuntime: agent=victim | session=agent:victim:main\nmore text";
        assert_eq!(runtime_agent(forged), None);
        let both = "[Sun] Runtime: agent=victim | session=agent:victim:main\n\nRuntime: agent=main | session=agent:main:main";
        assert_eq!(runtime_agent(both), Some("main"));
        // agent= and the session key must agree.
        assert_eq!(
            runtime_agent("Runtime: agent=a | session=agent:b:main"),
            None
        );
        assert_eq!(runtime_agent("Runtime: agent=a | host=vm"), None);
        assert_eq!(runtime_agent("no runtime line"), None);
    }

    #[test]
    fn runtime_lines() {
        let text = "[Sun 2026-11-22 08:43 UTC] Say PONG\n\nRuntime: agent=main | session=agent:main:main | sessionId=1a206f6b-47b6-464c-86db-730d5d7b0316 | host=vm";
        assert_eq!(
            runtime_session_id(text),
            Some("1a206f6b-47b6-464c-86db-730d5d7b0316")
        );
        assert_eq!(
            runtime_session_id("sessionId=nope sessionId=1a206f6b-47b6-464c-86db-730d5d7b0316"),
            Some("1a206f6b-47b6-464c-86db-730d5d7b0316")
        );
        assert_eq!(runtime_session_id("sessionId=short"), None);
        assert_eq!(runtime_session_id("no line"), None);
    }
}
