//! What the trainable model sampled for a turn it answered: the exact
//! prompt tokens sent, the tokens sampled and their logprobs, and what
//! they were sampled with (policy version, rendering, skill generation).
//! Token ids and logprobs are packed little-endian (`i32`, `f32`) BLOBs:
//! a long turn has tens of thousands of them.

use crate::store::sql::{Conn, Optional, Tx, params};

/// One sampled answer, recorded with its turn.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleRecord {
    /// The training service's base model.
    pub base_model: String,
    /// What was sampled: `base` weights or a saved sampler's path.
    pub sampler: String,
    /// 0 for the base weights; the training step of the sampler weights.
    pub policy_version: i64,
    /// The rendering's id (`sha256:` of chat template and tokenizer).
    pub rendering: String,
    /// The skill library's generation when the turn was sampled (support
    /// and query samples are told apart by it).
    pub skill_generation: u64,
    pub prompt_tokens: Vec<i32>,
    pub tokens: Vec<i32>,
    pub logprobs: Vec<f32>,
    /// `stop` or `length`.
    pub stop_reason: String,
    /// Why the sample did not parse into an answer (a malformed tool call).
    pub parse_error: Option<String>,
    /// The first turn of the trajectory this turn belongs to (its own id
    /// when it starts one).
    pub trajectory: String,
    /// The turn whose prompt and sampled tokens this turn's prompt extends.
    pub extends: Option<String>,
    /// The other answers sampled with this one (`rl.group_size` > 1), not
    /// served.
    pub siblings: Vec<Sibling>,
    /// Why the logprobs are not those of the distribution sampled from
    /// (`policy::off_policy`): never trained.
    pub off_policy: Option<String>,
    /// The run that trains it: '' the shared run, else the agent's own
    /// (`agents.<id>.rl`).
    pub run_agent: String,
}

/// An answer sampled in the same call as a turn's served one, not served:
/// judged with it as a group (`learn::stages::group`).
#[derive(Debug, Clone, PartialEq)]
pub struct Sibling {
    pub tokens: Vec<i32>,
    pub logprobs: Vec<f32>,
    /// `stop` or `length`.
    pub stop_reason: String,
    /// The answer as an assistant message (chat-completions shape).
    pub message: serde_json::Value,
    pub finish_reason: String,
    pub parse_error: Option<String>,
}

pub fn pack_i32(values: &[i32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

pub fn pack_f32(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

pub fn unpack_i32(bytes: &[u8]) -> Vec<i32> {
    bytes
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub fn unpack_f32(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Stores a turn's sample; `siblings`: those of its siblings kept (by
/// index), with their redacted messages.
pub(super) fn insert(
    tx: &Tx<'_>,
    turn_id: &str,
    s: &SampleRecord,
    withheld: Option<&str>,
    siblings: &[(usize, serde_json::Value)],
    at_ms: i64,
) -> crate::store::sql::Result<()> {
    // A row written again replaces the old one whole (what SQLite's
    // INSERT OR REPLACE did; Postgres has no such statement).
    for (idx, message) in siblings {
        let Some(sibling) = s.siblings.get(*idx) else {
            continue;
        };
        tx.prepare_cached("DELETE FROM turn_siblings WHERE turn_id = ?1 AND idx = ?2")?
            .execute(params![turn_id, *idx as i64])?;
        tx.prepare_cached(
            "INSERT INTO turn_siblings (turn_id, idx, tokens, logprobs, stop_reason, message,
                 finish_reason, parse_error)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?
        .execute(params![
            turn_id,
            *idx as i64,
            pack_i32(&sibling.tokens),
            pack_f32(&sibling.logprobs),
            sibling.stop_reason,
            message.to_string(),
            sibling.finish_reason,
            sibling.parse_error,
        ])?;
    }
    let (prompt, sampled, logprobs) = match withheld {
        Some(_) => (Vec::new(), Vec::new(), Vec::new()),
        None => (
            pack_i32(&s.prompt_tokens),
            pack_i32(&s.tokens),
            pack_f32(&s.logprobs),
        ),
    };
    tx.prepare_cached("DELETE FROM turn_samples WHERE turn_id = ?1")?
        .execute(params![turn_id])?;
    tx.prepare_cached(
        "INSERT INTO turn_samples (turn_id, base_model, sampler, policy_version, rendering,
             skill_generation, prompt_tokens, sampled_tokens, logprobs, prompt_len, sampled_len,
             stop_reason, parsed, parse_error, withheld, trajectory_id, extends_turn, at_ms, off_policy,
             run_agent)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
    )?
    .execute(params![
        turn_id,
        s.base_model,
        s.sampler,
        s.policy_version,
        s.rendering,
        s.skill_generation as i64,
        prompt,
        sampled,
        logprobs,
        s.prompt_tokens.len() as i64,
        s.tokens.len() as i64,
        s.stop_reason,
        s.parse_error.is_none(),
        s.parse_error,
        withheld,
        s.trajectory,
        s.extends,
        at_ms,
        s.off_policy,
        s.run_agent,
    ])?;
    Ok(())
}

/// The sample recorded with a turn, if the student answered it.
pub fn for_turn(conn: &Conn, turn_id: &str) -> crate::store::sql::Result<Option<SampleRecord>> {
    conn.query_row(
        "SELECT base_model, sampler, policy_version, rendering, skill_generation, prompt_tokens,
                sampled_tokens, logprobs, stop_reason, parse_error, trajectory_id, extends_turn,
                off_policy, run_agent
         FROM turn_samples WHERE turn_id = ?1",
        params![turn_id],
        |r| {
            Ok(SampleRecord {
                base_model: r.get(0)?,
                sampler: r.get(1)?,
                policy_version: r.get(2)?,
                rendering: r.get(3)?,
                skill_generation: r.get::<i64>(4)?.max(0) as u64,
                prompt_tokens: unpack_i32(&r.get::<Vec<u8>>(5)?),
                tokens: unpack_i32(&r.get::<Vec<u8>>(6)?),
                logprobs: unpack_f32(&r.get::<Vec<u8>>(7)?),
                stop_reason: r.get(8)?,
                parse_error: r.get(9)?,
                trajectory: r.get(10)?,
                extends: r.get(11)?,
                siblings: Vec::new(),
                off_policy: r.get(12)?,
                run_agent: r.get(13)?,
            })
        },
    )
    .optional()
}

/// A stored sibling answer and its group reward.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredSibling {
    pub idx: i64,
    pub tokens: Vec<i32>,
    pub logprobs: Vec<f32>,
    pub message: serde_json::Value,
    pub finish_reason: String,
    pub parse_error: Option<String>,
    pub reward: Option<f64>,
}

/// The sibling answers kept with a turn, in order.
pub fn siblings(conn: &Conn, turn_id: &str) -> crate::store::sql::Result<Vec<StoredSibling>> {
    conn.prepare_cached(
        "SELECT idx, tokens, logprobs, message, finish_reason, parse_error, reward
         FROM turn_siblings WHERE turn_id = ?1 ORDER BY idx",
    )?
    .query_map(params![turn_id], |r| {
        Ok(StoredSibling {
            idx: r.get(0)?,
            tokens: unpack_i32(&r.get::<Vec<u8>>(1)?),
            logprobs: unpack_f32(&r.get::<Vec<u8>>(2)?),
            message: serde_json::from_str(&r.get::<String>(3)?).unwrap_or_default(),
            finish_reason: r.get(4)?,
            parse_error: r.get(5)?,
            reward: r.get(6)?,
        })
    })?
    .collect()
}

/// The main turns of a session whose group (served answer and siblings)
/// is not judged yet.
pub fn unjudged_groups(conn: &Conn, session: &str) -> crate::store::sql::Result<Vec<String>> {
    conn.prepare_cached(
        "SELECT s.turn_id FROM turn_samples s JOIN turns t ON t.id = s.turn_id
         WHERE t.session_id = ?1 AND t.turn_type = 'main' AND s.group_judged = 0
           AND s.withheld IS NULL AND EXISTS (SELECT 1 FROM turn_siblings g WHERE g.turn_id = s.turn_id)
         ORDER BY t.started_at_ms, t.seq",
    )?
    .query_map(params![session], |r| r.get(0))?
    .collect()
}

/// A group's rewards, all judged alike: the served answer's and each
/// sibling's (by index); `None` where nothing gave a reward.
pub fn set_group_rewards(
    conn: &Conn,
    turn_id: &str,
    served: Option<f64>,
    siblings: &[(i64, Option<f64>)],
) -> crate::store::sql::Result<()> {
    conn.prepare_cached(
        "UPDATE turn_samples SET group_reward = ?2, group_judged = 1 WHERE turn_id = ?1",
    )?
    .execute(params![turn_id, served])?;
    let mut stmt = conn
        .prepare_cached("UPDATE turn_siblings SET reward = ?3 WHERE turn_id = ?1 AND idx = ?2")?;
    for (idx, reward) in siblings {
        stmt.execute(params![turn_id, idx, reward])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn packed_tokens_and_logprobs_read_back_exactly() {
        let tokens = vec![0, 1, -1, i32::MAX, i32::MIN, 151_645];
        assert_eq!(unpack_i32(&pack_i32(&tokens)), tokens);
        let logprobs = vec![0.0, -1.5, -1e-9, f32::MIN, -0.333_333_34];
        assert_eq!(unpack_f32(&pack_f32(&logprobs)), logprobs);
        assert_eq!(pack_i32(&[1]), vec![1, 0, 0, 0]);
    }
}
