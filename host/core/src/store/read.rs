//! Queries: session continuity for the daemon, listings for the CLI.

use crate::store::sql::{Conn, Optional, Row, params};
use serde::Serialize;
use serde_json::Value;

/// What the session tracker needs to continue a session after a restart.
#[derive(Debug, Clone)]
pub struct StoredSession {
    pub id: String,
    pub base_key: String,
    pub agent_session_id: Option<String>,
    pub source: String,
    pub window: u32,
    pub status: String,
    pub last_activity_ms: i64,
    pub last_message_count: u32,
    pub agent_id: crate::agent_id::AgentId,
}

const STORED_COLUMNS: &str = "id, base_key, agent_session_id, source, window_index, status, last_activity_ms, last_message_count, agent_id";

fn stored(row: &Row) -> crate::store::sql::Result<StoredSession> {
    Ok(StoredSession {
        id: row.get(0)?,
        base_key: row.get(1)?,
        agent_session_id: row.get(2)?,
        source: row.get(3)?,
        window: row.get(4)?,
        status: row.get(5)?,
        last_activity_ms: row.get(6)?,
        last_message_count: row.get(7)?,
        agent_id: agent_column(row, 8)?,
    })
}

/// A stored agent id (written only from a parsed one).
pub(crate) fn agent_column(
    row: &Row,
    i: usize,
) -> crate::store::sql::Result<crate::agent_id::AgentId> {
    let text: String = row.get(i)?;
    crate::agent_id::AgentId::parse(&text).map_err(|e| crate::store::sql::Error::column(i, e))
}

pub fn latest_for_base(
    conn: &Conn,
    base_key: &str,
) -> crate::store::sql::Result<Option<StoredSession>> {
    conn.prepare_cached(&format!(
        "SELECT {STORED_COLUMNS} FROM sessions WHERE base_key = ?1 ORDER BY window_index DESC LIMIT 1"
    ))?
    .query_row(params![base_key], stored)
    .optional()
}

pub fn stored_session(conn: &Conn, id: &str) -> crate::store::sql::Result<Option<StoredSession>> {
    conn.prepare_cached(&format!(
        "SELECT {STORED_COLUMNS} FROM sessions WHERE id = ?1"
    ))?
    .query_row(params![id], stored)
    .optional()
}

pub fn active_sessions(conn: &Conn) -> crate::store::sql::Result<Vec<StoredSession>> {
    conn.prepare_cached(&format!(
        "SELECT {STORED_COLUMNS} FROM sessions WHERE status = 'active'"
    ))?
    .query_map((), stored)?
    .collect()
}

pub fn counts(conn: &Conn) -> crate::store::sql::Result<(u64, u64)> {
    let sessions: i64 = conn.query_row("SELECT count(*) FROM sessions", (), |r| r.get(0))?;
    let turns: i64 = conn.query_row("SELECT count(*) FROM turns", (), |r| r.get(0))?;
    Ok((sessions.max(0) as u64, turns.max(0) as u64))
}

/// A session as `metaclaw sessions` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct SessionRow {
    pub id: String,
    pub agent_session_id: Option<String>,
    pub source: String,
    pub window: u32,
    pub status: String,
    pub started_at_ms: i64,
    pub last_activity_ms: i64,
    pub ended_at_ms: Option<i64>,
    pub end_reason: Option<String>,
    pub turns: u64,
    pub main_turns: u64,
    /// The agent that sent its first turn (`openclaw`, or the client's
    /// User-Agent product); `None` before it was recorded.
    pub agent: Option<String>,
    /// The agent (namespace) it belongs to (`crate::agent_id`).
    pub agent_id: String,
}

const ROW_COLUMNS: &str = "id, agent_session_id, source, window_index, status, started_at_ms, last_activity_ms, \
                           ended_at_ms, end_reason, turn_count, main_turns, agent, agent_id";

pub(super) fn session_row(row: &Row) -> crate::store::sql::Result<SessionRow> {
    Ok(SessionRow {
        id: row.get(0)?,
        agent_session_id: row.get(1)?,
        source: row.get(2)?,
        window: row.get(3)?,
        status: row.get(4)?,
        started_at_ms: row.get(5)?,
        last_activity_ms: row.get(6)?,
        ended_at_ms: row.get(7)?,
        end_reason: row.get(8)?,
        turns: row.get::<i64>(9)?.max(0) as u64,
        main_turns: row.get::<i64>(10)?.max(0) as u64,
        agent: row.get(11)?,
        agent_id: row.get(12)?,
    })
}

/// Newest sessions first; `agent`: only that agent's.
pub fn list_sessions(
    conn: &Conn,
    limit: u32,
    agent: Option<&str>,
) -> crate::store::sql::Result<Vec<SessionRow>> {
    conn.prepare(&format!(
        "SELECT {ROW_COLUMNS} FROM sessions WHERE CAST(?2 AS TEXT) IS NULL OR agent_id = ?2
         ORDER BY last_activity_ms DESC, id LIMIT ?1"
    ))?
    .query_map(params![limit, agent], session_row)?
    .collect()
}

/// A session by its id, or by the agent's own session id (newest window).
pub fn session_detail(conn: &Conn, id: &str) -> crate::store::sql::Result<Option<SessionRow>> {
    let by_id = conn
        .prepare(&format!("SELECT {ROW_COLUMNS} FROM sessions WHERE id = ?1"))?
        .query_row(params![id], session_row)
        .optional()?;
    if by_id.is_some() {
        return Ok(by_id);
    }
    conn.prepare(&format!(
        "SELECT {ROW_COLUMNS} FROM sessions WHERE agent_session_id = ?1 ORDER BY window_index DESC LIMIT 1"
    ))?
    .query_row(params![id], session_row)
    .optional()
}

/// What the student sampled for a turn, without the tokens.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SampleSummary {
    pub policy_version: i64,
    pub sampler: String,
    pub prompt_len: u64,
    pub sampled_len: u64,
    pub parse_error: Option<String>,
    /// Why the tokens were not kept (a secret was redacted).
    pub withheld: Option<String>,
    pub trajectory: String,
    pub extends: Option<String>,
    pub stop_reason: String,
    pub rendering: String,
    pub skill_generation: u64,
}

/// A recorded turn.
#[derive(Debug, Clone, Serialize)]
pub struct TurnRow {
    pub id: String,
    pub seq: i64,
    pub turn_type: String,
    pub api: String,
    pub model: Option<String>,
    pub upstream_model: Option<String>,
    pub stream: bool,
    pub status: String,
    pub http_status: Option<u16>,
    pub error: Option<String>,
    pub user: Option<String>,
    pub response_summary: Option<String>,
    pub usage: Option<Value>,
    pub started_at_ms: i64,
    pub finished_at_ms: i64,
    pub total_ms: f64,
    pub upstream_ms: Option<f64>,
    pub ttft_ms: Option<f64>,
    pub response: Option<Value>,
    pub request_params: Value,
    pub message_hashes: Vec<String>,
    /// `[{"id", "version", "score"}]` of the skills injected.
    pub injected_skills: Option<Value>,
    /// The judge's and the scorers' rewards combined (`learning.reward`).
    pub reward: Option<f64>,
    /// Which attempt of its turn this is; a retry names the first attempt.
    pub attempt: u32,
    pub retry_of: Option<String>,
    /// `llm`, `student` or `llm_fallback` (`None`: recorded before serving
    /// from the student existed).
    pub served_by: Option<String>,
    /// Why the student did not answer (`llm_fallback`).
    pub fallback_reason: Option<String>,
    /// What the student sampled, in short.
    pub sample: Option<SampleSummary>,
    /// `[{"experiment", "arm"}]`: the canaries the turn met and its arm.
    pub arms: Option<Value>,
}

/// A session's turns in the order they started (`learning::main_turns`
/// says why not `seq`'s).
pub fn session_turns(conn: &Conn, session_id: &str) -> crate::store::sql::Result<Vec<TurnRow>> {
    conn.prepare(
        "SELECT id, seq, turn_type, api, model, upstream_model, stream, status, http_status, error,
                user_summary, response_summary, usage, started_at_ms, finished_at_ms, total_ms, upstream_ms,
                ttft_ms, response, request_params, request_messages, injected_skills, reward,
                attempt, retry_of, served_by, fallback_reason,
                s.policy_version, s.sampler, s.prompt_len, s.sampled_len, s.parse_error,
                s.withheld, s.trajectory_id, s.extends_turn, s.stop_reason, s.rendering,
                s.skill_generation, turns.arms
         FROM turns LEFT JOIN turn_samples s ON s.turn_id = turns.id
         WHERE session_id = ?1 ORDER BY started_at_ms, seq",
    )?
    .query_map(params![session_id], |row| {
        let json = |i: usize| -> crate::store::sql::Result<Option<Value>> {
            Ok(row
                .get::<Option<String>>(i)?
                .and_then(|s| serde_json::from_str(&s).ok()))
        };
        Ok(TurnRow {
            id: row.get(0)?,
            seq: row.get(1)?,
            turn_type: row.get(2)?,
            api: row.get(3)?,
            model: row.get(4)?,
            upstream_model: row.get(5)?,
            stream: row.get(6)?,
            status: row.get(7)?,
            http_status: row.get(8)?,
            error: row.get(9)?,
            user: row.get(10)?,
            response_summary: row.get(11)?,
            usage: json(12)?,
            started_at_ms: row.get(13)?,
            finished_at_ms: row.get(14)?,
            total_ms: row.get(15)?,
            upstream_ms: row.get(16)?,
            ttft_ms: row.get(17)?,
            response: json(18)?,
            request_params: json(19)?.unwrap_or(Value::Null),
            message_hashes: json(20)?
                .and_then(|v| serde_json::from_value(v).ok())
                .unwrap_or_default(),
            injected_skills: json(21)?,
            reward: row.get(22)?,
            attempt: row.get(23)?,
            retry_of: row.get(24)?,
            served_by: row.get(25)?,
            fallback_reason: row.get(26)?,
            arms: json(38)?,
            sample: match row.get::<Option<i64>>(27)? {
                None => None,
                Some(policy_version) => Some(SampleSummary {
                    policy_version,
                    sampler: row.get(28)?,
                    prompt_len: row.get::<i64>(29)?.max(0) as u64,
                    sampled_len: row.get::<i64>(30)?.max(0) as u64,
                    parse_error: row.get(31)?,
                    withheld: row.get(32)?,
                    trajectory: row.get(33)?,
                    extends: row.get(34)?,
                    stop_reason: row.get(35)?,
                    rendering: row.get(36)?,
                    skill_generation: row.get::<i64>(37)?.max(0) as u64,
                }),
            },
        })
    })?
    .collect()
}

/// The messages behind a turn's blob hashes, in order.
pub fn load_messages(conn: &Conn, hashes: &[String]) -> crate::store::sql::Result<Vec<Value>> {
    let mut stmt = conn.prepare_cached("SELECT json FROM blobs WHERE hash = ?1")?;
    hashes
        .iter()
        .map(|h| {
            let json: Option<String> = stmt.query_row(params![h], |r| r.get(0)).optional()?;
            Ok(json
                .and_then(|j| serde_json::from_str(&j).ok())
                .unwrap_or(Value::Null))
        })
        .collect()
}

/// A recorded turn, as much as judging it needs.
#[derive(Debug, Clone)]
pub struct ScoringInput {
    pub turn_id: String,
    pub session_id: String,
    pub seq: i64,
    pub status: String,
    pub turn_type: String,
    /// The request's messages (OpenClaw's internal context already gone).
    pub messages: Vec<Value>,
    /// The assembled answer (`chat.completion` shape).
    pub response: Option<Value>,
}

pub fn scoring_input(
    conn: &Conn,
    turn_id: &str,
) -> crate::store::sql::Result<Option<ScoringInput>> {
    let row = conn
        .prepare_cached(
            "SELECT session_id, seq, status, turn_type, request_messages, response FROM turns WHERE id = ?1",
        )?
        .query_row(params![turn_id], |r| {
            Ok((
                r.get::<String>(0)?,
                r.get::<i64>(1)?,
                r.get::<String>(2)?,
                r.get::<String>(3)?,
                r.get::<String>(4)?,
                r.get::<Option<String>>(5)?,
            ))
        })
        .optional()?;
    let Some((session_id, seq, status, turn_type, hashes, response)) = row else {
        return Ok(None);
    };
    let hashes: Vec<String> = serde_json::from_str(&hashes).unwrap_or_default();
    Ok(Some(ScoringInput {
        turn_id: turn_id.to_string(),
        session_id,
        seq,
        status,
        turn_type,
        messages: load_messages(conn, &hashes)?,
        response: response.and_then(|r| serde_json::from_str(&r).ok()),
    }))
}

/// The latest main turn of a session that has not been scored (and did
/// not fail: a failed turn is never scored), before `before_seq` if given.
pub fn unscored_main_turn(
    conn: &Conn,
    session_id: &str,
    before_seq: Option<i64>,
) -> crate::store::sql::Result<Option<(String, i64)>> {
    conn.prepare_cached(
        "SELECT id, seq FROM turns
         WHERE session_id = ?1 AND turn_type = 'main' AND status = 'ok' AND scored_at_ms IS NULL
           AND (CAST(?2 AS BIGINT) IS NULL OR seq < ?2)
         ORDER BY seq DESC LIMIT 1",
    )?
    .query_row(params![session_id, before_seq], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
    .optional()
}

/// A stored reward.
#[derive(Debug, Clone, Serialize)]
pub struct RewardRow {
    pub source: String,
    pub value: f64,
    pub label: String,
    pub rationale: String,
}

/// Rewards of a session's turns, by turn id.
pub fn turn_rewards(
    conn: &Conn,
    session_id: &str,
) -> crate::store::sql::Result<std::collections::HashMap<String, Vec<RewardRow>>> {
    let mut out: std::collections::HashMap<String, Vec<RewardRow>> =
        std::collections::HashMap::new();
    let mut stmt = conn.prepare(
        "SELECT r.turn_id, r.source, r.value, r.label, r.rationale FROM turn_rewards r
         JOIN turns t ON t.id = r.turn_id WHERE t.session_id = ?1 ORDER BY r.id",
    )?;
    let rows = stmt.query_map(params![session_id], |r| {
        Ok((
            r.get::<String>(0)?,
            RewardRow {
                source: r.get(1)?,
                value: r.get(2)?,
                label: r.get(3)?,
                rationale: r.get(4)?,
            },
        ))
    })?;
    for row in rows {
        let (turn, reward) = row?;
        out.entry(turn).or_default().push(reward);
    }
    Ok(out)
}
