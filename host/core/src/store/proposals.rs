//! Evolved skills offered to OpenClaw's Skill Workshop (skills::workshop):
//! one row per SKILL.md text offered, from "to offer" through OpenClaw's
//! proposal to the owner's verdict.

use crate::store::sql::{Conn, Optional, params};
use serde::Serialize;

/// Where an offer stands. OpenClaw's own states, and two of metaclaw's:
/// `to_offer` (recorded, not proposed yet) and `failed` (OpenClaw refused
/// the proposal [`MAX_ATTEMPTS`] times).
pub const STATES: &[&str] = &[
    "to_offer",
    "pending",
    "applied",
    "rejected",
    "quarantined",
    "stale",
    "failed",
];

/// Proposals OpenClaw refused this often are given up (`failed`).
pub const MAX_ATTEMPTS: i64 = 5;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Proposal {
    pub sha256: String,
    pub skill_id: String,
    pub version: Option<String>,
    #[serde(skip)]
    pub content: String,
    pub openclaw_agent: String,
    pub state: String,
    pub proposal_id: Option<String>,
    pub reason: Option<String>,
    pub attempts: i64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// Records a skill text to offer (again: nothing changes).
pub fn offer(
    conn: &Conn,
    sha256: &str,
    skill_id: &str,
    version: Option<&str>,
    content: &str,
    openclaw_agent: &str,
    at_ms: i64,
) -> crate::store::sql::Result<()> {
    conn.execute(
        "INSERT INTO skill_proposals (sha256, skill_id, version, content, openclaw_agent, state,
             created_at_ms, updated_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, 'to_offer', ?6, ?6)
         ON CONFLICT(sha256) DO NOTHING",
        params![sha256, skill_id, version, content, openclaw_agent, at_ms],
    )?;
    Ok(())
}

/// The skill was not written after all: nothing to offer.
pub fn withdraw(conn: &Conn, sha256: &str) -> crate::store::sql::Result<()> {
    conn.execute(
        "DELETE FROM skill_proposals WHERE sha256 = ?1 AND state = 'to_offer'",
        params![sha256],
    )?;
    Ok(())
}

/// Moves an offer to `state` (with OpenClaw's proposal id and the reason,
/// where given); true if it was in another state before.
pub fn set_state(
    conn: &Conn,
    sha256: &str,
    state: &str,
    proposal_id: Option<&str>,
    reason: Option<&str>,
    at_ms: i64,
) -> crate::store::sql::Result<bool> {
    let n = conn.execute(
        "UPDATE skill_proposals SET state = ?2, proposal_id = COALESCE(?3, proposal_id),
             reason = ?4, updated_at_ms = ?5
         WHERE sha256 = ?1 AND state != ?2",
        params![sha256, state, proposal_id, reason, at_ms],
    )?;
    Ok(n > 0)
}

/// One more failed try to propose it, with why; `failed` after
/// [`MAX_ATTEMPTS`]. Returns the new state.
pub fn failed_try(
    conn: &Conn,
    sha256: &str,
    why: &str,
    at_ms: i64,
) -> crate::store::sql::Result<String> {
    conn.execute(
        "UPDATE skill_proposals SET attempts = attempts + 1, reason = ?2, updated_at_ms = ?3,
             state = CASE WHEN attempts + 1 >= ?4 THEN 'failed' ELSE state END
         WHERE sha256 = ?1",
        params![sha256, why, at_ms, MAX_ATTEMPTS],
    )?;
    conn.query_row(
        "SELECT state FROM skill_proposals WHERE sha256 = ?1",
        params![sha256],
        |r| r.get(0),
    )
}

/// Every offer, oldest first.
pub fn all(conn: &Conn) -> crate::store::sql::Result<Vec<Proposal>> {
    conn.prepare(
        "SELECT sha256, skill_id, version, content, openclaw_agent, state, proposal_id, reason,
             attempts, created_at_ms, updated_at_ms
         FROM skill_proposals ORDER BY created_at_ms, sha256",
    )?
    .query_map((), |r| {
        Ok(Proposal {
            sha256: r.get(0)?,
            skill_id: r.get(1)?,
            version: r.get(2)?,
            content: r.get(3)?,
            openclaw_agent: r.get(4)?,
            state: r.get(5)?,
            proposal_id: r.get(6)?,
            reason: r.get(7)?,
            attempts: r.get(8)?,
            created_at_ms: r.get(9)?,
            updated_at_ms: r.get(10)?,
        })
    })?
    .collect()
}

/// Whether an earlier text of `skill_id` was applied in `openclaw_agent`'s
/// Workshop (the next one is proposed as an update of it).
pub fn applied_before(
    conn: &Conn,
    skill_id: &str,
    openclaw_agent: &str,
) -> crate::store::sql::Result<bool> {
    Ok(conn
        .query_row(
            "SELECT 1 FROM skill_proposals
             WHERE skill_id = ?1 AND openclaw_agent = ?2 AND state = 'applied' LIMIT 1",
            params![skill_id, openclaw_agent],
            |_| Ok(()),
        )
        .optional()?
        .is_some())
}
