//! Which agent a turn is for: the namespace its session (and, as they move
//! into namespaces, its skills, mode and learning) belongs to.
//!
//! What is trusted to name it (docs/skills.md, "Agents"): the `X-Agent-Id`
//! header, which the agent's own configuration sets (a local client, as
//! trusted as its API key); OpenClaw's runtime line, only where OpenClaw's
//! harness wrote it (`metaclaw_wire::agent::openclaw::runtime_agent`).
//! Never the text of a message, a tool result or a document: a stranger
//! who can write to the agent must not move its turns into another agent's
//! namespace.

use std::fmt;
use std::sync::Arc;

/// The agent of a turn that names none.
pub const DEFAULT: &str = "default";
pub const MAX_LEN: usize = 64;

/// An agent id: 1 to 64 of `a-z 0-9 - _`, starting with a letter or a
/// digit (an OpenClaw agent id is already one; ASCII capitals are folded);
/// or a team's agent, `team/agent`, each part such a name (a team on a
/// shared store: docs/team.md).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AgentId(Arc<str>);

/// Text that is not an agent id (as the user wrote it, cut to a safe line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "agent id {0:?} is not valid: 1 to {MAX_LEN} of a-z, 0-9, '-' and '_', starting with a letter or a digit (a team's agent: TEAM/AGENT, each part so)"
)]
pub struct BadAgentId(pub String);

impl AgentId {
    pub fn parse(text: &str) -> Result<Self, BadAgentId> {
        let id = text.trim().to_ascii_lowercase();
        let part = |p: &str| {
            !p.is_empty()
                && p.len() <= MAX_LEN
                && p.starts_with(|c: char| c.is_ascii_alphanumeric())
                && p.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        };
        let valid = match id.split_once('/') {
            Some((team, agent)) => part(team) && part(agent),
            None => part(&id),
        };
        if valid {
            Ok(Self(id.into()))
        } else {
            Err(BadAgentId(crate::untrusted::log_line(text, 80)))
        }
    }

    pub fn default_agent() -> Self {
        Self(DEFAULT.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The team of a team's agent (`ops` of `ops/alice`).
    pub fn team(&self) -> Option<&str> {
        self.0.split_once('/').map(|(team, _)| team)
    }

    /// The agent's name within its team (`alice` of `ops/alice`), or the
    /// whole id.
    pub fn name(&self) -> &str {
        self.0.split_once('/').map_or(&self.0, |(_, name)| name)
    }
}

/// A turn that names no agent is the default agent's.
impl Default for AgentId {
    fn default() -> Self {
        Self::default_agent()
    }
}

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_short_plain_and_folded() {
        assert_eq!(AgentId::parse("main").unwrap().as_str(), "main");
        assert_eq!(AgentId::parse(" Ops-Bot_2 ").unwrap().as_str(), "ops-bot_2");
        for bad in [
            "",
            "-lead",
            "a b",
            "a/b/c",
            "/b",
            "a/",
            "a/-b",
            "../x",
            "é",
            &"a".repeat(65),
        ] {
            assert!(AgentId::parse(bad).is_err(), "{bad:?}");
        }
        let alice = AgentId::parse("Ops/Alice").unwrap();
        assert_eq!(
            (alice.as_str(), alice.team(), alice.name()),
            ("ops/alice", Some("ops"), "alice")
        );
        let plain = AgentId::parse("ops").unwrap();
        assert_eq!((plain.team(), plain.name()), (None, "ops"));
        assert_eq!(AgentId::default_agent().as_str(), DEFAULT);
    }
}
