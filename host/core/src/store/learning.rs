//! What learning writes and reads: turn rewards (exactly once per turn),
//! the judge's verdicts, combined rewards, and evolved skill drafts.

use crate::store::sql::{Conn, Optional, params};
use serde::Serialize;

use super::RewardRecord;
use super::jobs::text_enum;

/// Stores a finished turn's scorer rewards, unless it was scored already
/// (the per-turn scorer and a session's job may both get to its last turn)
/// or it failed (no real answer is rewarded).
/// Returns whether these rewards were the ones kept.
pub fn store_rewards(
    conn: &Conn,
    turn_id: &str,
    rewards: &[RewardRecord],
    at_ms: i64,
) -> crate::store::sql::Result<bool> {
    let fresh = conn
        .prepare_cached(
            "UPDATE turns SET scored_at_ms = ?2
             WHERE id = ?1 AND scored_at_ms IS NULL AND status = 'ok'",
        )?
        .execute(params![turn_id, at_ms])?;
    if fresh == 0 {
        return Ok(false);
    }
    let mut stmt = conn.prepare_cached(
        "INSERT INTO turn_rewards (turn_id, source, value, label, rationale, created_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    for r in rewards {
        stmt.execute(params![
            turn_id,
            r.source,
            f64::from(r.value),
            r.label,
            r.rationale,
            at_ms
        ])?;
    }
    Ok(true)
}

/// A main turn of a session and what learning has done with it.
#[derive(Debug, Clone)]
pub struct MainTurn {
    pub id: String,
    pub seq: i64,
    pub scored: bool,
    pub judged: bool,
    /// The model that answered (a fallback's when one did).
    pub model: Option<String>,
    /// Why it is no real answer (`None`: answered whole): see [`failure`].
    pub failed: Option<String>,
}

/// Why a turn recorded with `status` is no real answer, or `None` when it
/// is one (`ok`). A turn is *failed* when the upstream answered with an
/// error status, could not be reached or timed out, every fallback failed
/// too, or the answer did not reach the client whole (a stream cut or
/// stalled, the client gone mid-answer): the store records those as
/// `error` or `incomplete`. A failed turn is never judged, rewarded,
/// counted in the skills' outcomes or trained (docs/learning.md).
pub fn failure(status: &str, http_status: Option<i64>, error: Option<&str>) -> Option<String> {
    if status == "ok" {
        return None;
    }
    let what = match status {
        "incomplete" => "answer incomplete",
        _ => "upstream failed",
    };
    let detail = match (http_status.filter(|s| *s >= 400), error) {
        (Some(code), Some(e)) => format!("{code} {e}"),
        (Some(code), None) => code.to_string(),
        (None, Some(e)) => e.to_string(),
        (None, None) => status.to_string(),
    };
    let mut clipped: String = detail.chars().take(200).collect();
    if clipped.len() < detail.len() {
        clipped.push('…');
    }
    Some(format!("{what}: {clipped}"))
}

/// Every main turn of a session, in order, failed ones included (they
/// are the next state of the turn before them; they are not judged).
/// In the order they started, not `seq`'s: `seq` is the order they were
/// committed, and in a team a session's turns are committed by several
/// instances' writers, a slow one after the turns that came next; by
/// `seq` the turn after a correction would be taken for it.
pub fn main_turns(conn: &Conn, session_id: &str) -> crate::store::sql::Result<Vec<MainTurn>> {
    conn.prepare_cached(
        "SELECT t.id, t.seq, t.scored_at_ms IS NOT NULL, j.turn_id IS NOT NULL,
                t.upstream_model, t.status, t.http_status, t.error
         FROM turns t LEFT JOIN turn_judgments j ON j.turn_id = t.id
         WHERE t.session_id = ?1 AND t.turn_type = 'main' ORDER BY t.started_at_ms, t.seq",
    )?
    .query_map([session_id], |r| {
        let status: String = r.get(5)?;
        let error: Option<String> = r.get(7)?;
        Ok(MainTurn {
            id: r.get(0)?,
            seq: r.get(1)?,
            scored: r.get(2)?,
            judged: r.get(3)?,
            model: r.get(4)?,
            failed: failure(&status, r.get(6)?, error.as_deref()),
        })
    })?
    .collect()
}

/// One judge vote.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Vote {
    /// -1, 0 or 1; `None` when the reply had no score.
    pub score: Option<i8>,
    pub rationale: String,
}

/// The judge's verdict on one turn.
#[derive(Debug, Clone, Serialize)]
pub struct Judgment {
    pub turn_id: String,
    pub value: i8,
    pub votes: Vec<Vote>,
    pub rationale: String,
    /// `next-user-message`, `tool-results`, `both` or `none`.
    pub evidence: String,
    pub model: String,
    pub prompt_version: String,
    pub at_ms: i64,
    /// The model whose answer was judged (a fallback's when one answered;
    /// `None`: judged before this was kept).
    pub answer_model: Option<String>,
}

pub fn store_judgment(conn: &Conn, j: &Judgment) -> crate::store::sql::Result<()> {
    let votes = serde_json::to_string(&j.votes).unwrap_or_else(|_| "[]".into());
    conn.prepare_cached(
        "INSERT INTO turn_judgments (turn_id, value, votes, rationale, evidence, model, prompt_version, at_ms, answer_model)
         SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9
         WHERE EXISTS (SELECT 1 FROM turns WHERE id = ?1 AND status = 'ok')
         ON CONFLICT(turn_id) DO NOTHING",
    )?
    .execute(params![
        j.turn_id,
        j.value,
        votes,
        j.rationale,
        j.evidence,
        j.model,
        j.prompt_version,
        j.at_ms,
        j.answer_model
    ])?;
    Ok(())
}

/// The judgments of a session's turns, by turn id.
pub fn judgments(
    conn: &Conn,
    session_id: &str,
) -> crate::store::sql::Result<std::collections::HashMap<String, Judgment>> {
    conn.prepare_cached(
        "SELECT j.turn_id, j.value, j.votes, j.rationale, j.evidence, j.model, j.prompt_version, j.at_ms,
                j.answer_model
         FROM turn_judgments j JOIN turns t ON t.id = j.turn_id WHERE t.session_id = ?1",
    )?
    .query_map([session_id], |r| {
        let votes: String = r.get(2)?;
        Ok(Judgment {
            turn_id: r.get(0)?,
            value: r.get(1)?,
            votes: serde_json::from_str(&votes).unwrap_or_default(),
            rationale: r.get(3)?,
            evidence: r.get(4)?,
            model: r.get(5)?,
            prompt_version: r.get(6)?,
            at_ms: r.get(7)?,
            answer_model: r.get(8)?,
        })
    })?
    .map(|j| j.map(|j| (j.turn_id.clone(), j)))
    .collect()
}

/// The combined rewards of a session's turns, by turn id.
pub fn turn_reward_totals(
    conn: &Conn,
    session_id: &str,
) -> crate::store::sql::Result<std::collections::HashMap<String, f64>> {
    conn.prepare_cached(
        "SELECT id, reward FROM turns WHERE session_id = ?1 AND reward IS NOT NULL",
    )?
    .query_map([session_id], |r| Ok((r.get(0)?, r.get(1)?)))?
    .collect()
}

/// A skill draft from a session's evolution and what became of it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DraftRow {
    pub id: i64,
    pub session_id: String,
    pub round: i64,
    pub name: String,
    pub outcome: DraftOutcome,
    pub skill_id: Option<String>,
    pub version: Option<String>,
    pub reason: Option<String>,
    /// The SKILL.md to write (kept drafts).
    #[serde(skip)]
    pub content: Option<String>,
    #[serde(skip)]
    pub base_hash: Option<String>,
    /// The version an update revises.
    pub base_version: Option<String>,
    pub written_ms: Option<i64>,
    /// When a held revision was accepted or rejected.
    pub reviewed_ms: Option<i64>,
    pub at_ms: i64,
}

text_enum! {
    /// What became of a skill draft.
    pub enum DraftOutcome {
        /// A new skill (written by the publish stage).
        Created = "created",
        /// The next version of a library skill (written by the publish
        /// stage, or once accepted in review).
        Updated = "updated",
        /// Turned down (the reason is kept with it).
        Rejected = "rejected",
        /// A revision of a built-in or user-written skill, written only
        /// once accepted (`metaclaw skills review`).
        PendingReview = "pending-review",
    }
}

impl DraftOutcome {
    /// A draft that is (or is to be) in the library.
    pub fn kept(self) -> bool {
        self != Self::Rejected
    }
}

pub fn insert_draft(conn: &Conn, d: &DraftRow) -> crate::store::sql::Result<()> {
    conn.prepare_cached(
        "INSERT INTO evolved_drafts (session_id, round, name, outcome, skill_id, version, reason,
                                     content, base_hash, base_version, written_ms, reviewed_ms, at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    )?
    .execute(params![
        d.session_id,
        d.round,
        d.name,
        d.outcome,
        d.skill_id,
        d.version,
        d.reason,
        d.content,
        d.base_hash,
        d.base_version,
        d.written_ms,
        d.reviewed_ms,
        d.at_ms
    ])?;
    Ok(())
}

fn draft_row(r: &crate::store::sql::Row) -> crate::store::sql::Result<DraftRow> {
    Ok(DraftRow {
        id: r.get(0)?,
        session_id: r.get(1)?,
        round: r.get(2)?,
        name: r.get(3)?,
        outcome: r.get(4)?,
        skill_id: r.get(5)?,
        version: r.get(6)?,
        reason: r.get(7)?,
        content: r.get(8)?,
        base_hash: r.get(9)?,
        base_version: r.get(10)?,
        written_ms: r.get(11)?,
        reviewed_ms: r.get(12)?,
        at_ms: r.get(13)?,
    })
}

const DRAFT_COLUMNS: &str = "id, session_id, round, name, outcome, skill_id, version, reason, content, base_hash, base_version, written_ms, reviewed_ms, at_ms";

/// Every draft of a session, oldest first.
pub fn drafts(conn: &Conn, session_id: &str) -> crate::store::sql::Result<Vec<DraftRow>> {
    conn.prepare_cached(&format!(
        "SELECT {DRAFT_COLUMNS} FROM evolved_drafts WHERE session_id = ?1 ORDER BY id"
    ))?
    .query_map([session_id], draft_row)?
    .collect()
}

/// Kept drafts of a session not yet on disk (not those held for review).
pub fn unwritten_drafts(conn: &Conn, session_id: &str) -> crate::store::sql::Result<Vec<DraftRow>> {
    conn.prepare_cached(&format!(
        "SELECT {DRAFT_COLUMNS} FROM evolved_drafts
         WHERE session_id = ?1 AND outcome IN (?2, ?3) AND written_ms IS NULL ORDER BY id"
    ))?
    .query_map(
        params![session_id, DraftOutcome::Created, DraftOutcome::Updated],
        draft_row,
    )?
    .collect()
}

/// Draft `id` is about to be written as this exact text (its sha256):
/// recorded before the file is renamed into place, so that whichever
/// rescan finds the file credits this draft's session (`store::skills`).
pub fn writing(
    conn: &Conn,
    id: i64,
    content_hash: &str,
    at_ms: i64,
) -> crate::store::sql::Result<()> {
    conn.prepare_cached(
        "UPDATE evolved_drafts SET content_hash = ?2, writing_ms = ?3 WHERE id = ?1",
    )?
    .execute(params![id, content_hash, at_ms])?;
    Ok(())
}

/// The draft is on disk (or, with `rejected`, could not be written).
pub fn draft_written(
    conn: &Conn,
    id: i64,
    at_ms: i64,
    rejected: Option<&str>,
) -> crate::store::sql::Result<()> {
    match rejected {
        None => conn
            .prepare_cached("UPDATE evolved_drafts SET written_ms = ?2 WHERE id = ?1")?
            .execute(params![id, at_ms])?,
        Some(reason) => conn
            .prepare_cached(
                "UPDATE evolved_drafts SET outcome = ?4, reason = ?2, written_ms = ?3 WHERE id = ?1",
            )?
            .execute(params![id, reason, at_ms, DraftOutcome::Rejected])?,
    };
    Ok(())
}

/// The latest `limit` drafts of every session, newest first.
pub fn recent_drafts(conn: &Conn, limit: u32) -> crate::store::sql::Result<Vec<DraftRow>> {
    conn.prepare_cached(&format!(
        "SELECT {DRAFT_COLUMNS} FROM evolved_drafts ORDER BY id DESC LIMIT ?1"
    ))?
    .query_map([limit], draft_row)?
    .collect()
}

/// Every draft of a skill (by its id, or by its name where none was
/// written), newest first.
pub fn skill_drafts(
    conn: &Conn,
    skill: &str,
    limit: u32,
) -> crate::store::sql::Result<Vec<DraftRow>> {
    conn.prepare_cached(&format!(
        "SELECT {DRAFT_COLUMNS} FROM evolved_drafts WHERE skill_id = ?1 OR name = ?1
         ORDER BY id DESC LIMIT ?2"
    ))?
    .query_map(params![skill, limit], draft_row)?
    .collect()
}

/// Revisions held for review, oldest first.
pub fn pending_reviews(conn: &Conn) -> crate::store::sql::Result<Vec<DraftRow>> {
    conn.prepare_cached(&format!(
        "SELECT {DRAFT_COLUMNS} FROM evolved_drafts WHERE outcome = ?1 ORDER BY id"
    ))?
    .query_map([DraftOutcome::PendingReview], draft_row)?
    .collect()
}

/// The revisions waiting for review, one group per skill: how many wait,
/// from how many sessions, and the newest (what accepting would write).
#[derive(Debug, Clone, Serialize)]
pub struct ReviewGroup {
    pub skill: String,
    pub waiting: i64,
    pub sessions: i64,
    pub newest: DraftRow,
}

/// [`ReviewGroup`]s, the most recently drafted first, at most `limit`; and
/// how many revisions wait in all. A library whose evolver keeps drafting
/// near-identical revisions lists one line per skill, not thousands.
pub fn review_groups(
    conn: &Conn,
    limit: u32,
) -> crate::store::sql::Result<(Vec<ReviewGroup>, i64)> {
    let total: i64 = conn.query_row(
        "SELECT count(*) FROM evolved_drafts WHERE outcome = ?1",
        [DraftOutcome::PendingReview],
        |r| r.get(0),
    )?;
    let heads: Vec<(String, i64, i64, i64)> = conn
        .prepare_cached(
            "SELECT coalesce(skill_id, name), count(*), count(DISTINCT session_id), max(id)
             FROM evolved_drafts WHERE outcome = ?1
             GROUP BY 1 ORDER BY 4 DESC LIMIT ?2",
        )?
        .query_map(params![DraftOutcome::PendingReview, limit], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?
        .collect::<crate::store::sql::Result<_>>()?;
    let mut groups = Vec::with_capacity(heads.len());
    for (skill, waiting, sessions, newest) in heads {
        if let Some(newest) = draft(conn, newest)? {
            groups.push(ReviewGroup {
                skill,
                waiting,
                sessions,
                newest,
            });
        }
    }
    Ok((groups, total))
}

/// One draft, by id.
pub fn draft(conn: &Conn, id: i64) -> crate::store::sql::Result<Option<DraftRow>> {
    conn.query_row(
        &format!("SELECT {DRAFT_COLUMNS} FROM evolved_drafts WHERE id = ?1"),
        [id],
        draft_row,
    )
    .optional()
}

/// A held revision was accepted (and is on disk) or rejected. False when it
/// was no longer held.
pub fn reviewed(
    conn: &Conn,
    id: i64,
    accepted: bool,
    reason: Option<&str>,
    at_ms: i64,
) -> crate::store::sql::Result<bool> {
    let held = DraftOutcome::PendingReview;
    let changed = if accepted {
        conn.execute(
            "UPDATE evolved_drafts SET outcome = ?3, written_ms = ?2, reviewed_ms = ?2
             WHERE id = ?1 AND outcome = ?4",
            params![id, at_ms, DraftOutcome::Updated, held],
        )?
    } else {
        conn.execute(
            "UPDATE evolved_drafts SET outcome = ?4, reason = ?2, reviewed_ms = ?3
             WHERE id = ?1 AND outcome = ?5",
            params![id, reason, at_ms, DraftOutcome::Rejected, held],
        )?
    };
    Ok(changed == 1)
}

/// The agent a session belongs to (the default agent's when it is not in
/// the store).
pub fn session_agent(
    conn: &Conn,
    session_id: &str,
) -> crate::store::sql::Result<Option<crate::agent_id::AgentId>> {
    conn.query_row(
        "SELECT agent_id FROM sessions WHERE id = ?1",
        [session_id],
        |r| super::read::agent_column(r, 0),
    )
    .optional()
}

/// The session's end reason, if it has ended.
pub fn session_ended(conn: &Conn, session_id: &str) -> crate::store::sql::Result<Option<bool>> {
    conn.query_row(
        "SELECT status = 'ended' FROM sessions WHERE id = ?1",
        [session_id],
        |r| r.get(0),
    )
    .optional()
}

/// Why `turn` has no reward (`None`: it has one), as `sessions show` and
/// the dashboard's session page say it. `judged`: the judge gave it a
/// verdict; `job`: its session's learning job.
pub fn no_reward(
    turn: &super::read::TurnRow,
    judged: bool,
    job: Option<&super::jobs::Job>,
) -> Option<String> {
    use super::jobs::JobState;
    if turn.reward.is_some() {
        return None;
    }
    if let Some(why) = failure(
        &turn.status,
        turn.http_status.map(i64::from),
        turn.error.as_deref(),
    ) {
        return Some(format!("{why} (a failed turn is never judged)"));
    }
    match turn.turn_type.as_str() {
        "main" => {}
        "retried" => return Some("resent: the attempt after it is the one judged".into()),
        _ => return Some("a side call, not a turn of the conversation: not judged".into()),
    }
    // Learned: its session's job finished after the turn did.
    let learned = job.is_some_and(|j| {
        j.state == JobState::Done && j.finished_ms.is_some_and(|f| f >= turn.finished_at_ms)
    });
    Some(match job {
        _ if learned && judged => {
            "no signal: the judge's verdict and the scorers' rewards combined to none (learning.reward)".into()
        }
        _ if learned => {
            "no signal: not judged (judging off, or no judge model) and no scorer rewarded it".into()
        }
        Some(j) if j.state == JobState::Failed => {
            format!("not judged yet: the session's learning job failed ({})", j.detail())
        }
        _ => "not judged yet: the session's learning job has not run".into(),
    })
}

/// A skill change the overview lists: what changed, when, by whom.
#[derive(Debug, Clone, Serialize)]
pub struct RecentChange {
    pub skill_id: String,
    /// `added`, `changed` or `removed`.
    pub change: String,
    pub version: Option<String>,
    pub who: String,
    pub why: String,
    pub at_ms: i64,
}

/// How many skill changes of each kind (`added`, `changed`, `removed`).
pub type ChangeCounts = Vec<(String, i64)>;

/// The newest skill changes since `since_ms` (at most `limit`), and how
/// many of each kind there were.
pub fn recent_changes(
    conn: &Conn,
    since_ms: i64,
    limit: u32,
) -> crate::store::sql::Result<(Vec<RecentChange>, ChangeCounts)> {
    let mut stmt = conn.prepare(
        "SELECT skill_id, change, version, who, why, at_ms FROM skill_changes
         WHERE at_ms >= ?1 ORDER BY id DESC LIMIT ?2",
    )?;
    let changes = stmt
        .query_map(params![since_ms, limit], |r| {
            Ok(RecentChange {
                skill_id: r.get(0)?,
                change: r.get(1)?,
                version: r.get(2)?,
                who: r.get(3)?,
                why: r.get(4)?,
                at_ms: r.get(5)?,
            })
        })?
        .collect::<crate::store::sql::Result<Vec<_>>>()?;
    let mut stmt = conn.prepare(
        "SELECT change, COUNT(*) FROM skill_changes WHERE at_ms >= ?1 GROUP BY change ORDER BY change",
    )?;
    let counts = stmt
        .query_map([since_ms], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<crate::store::sql::Result<Vec<_>>>()?;
    Ok((changes, counts))
}

/// One day's judged main turns, with skills injected and without.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DayRewards {
    /// Days since the Unix epoch (UTC).
    pub day: i64,
    pub with_skills: i64,
    pub with_sum: f64,
    pub without_skills: i64,
    pub without_sum: f64,
}

/// Per day since `since_ms`, the judged main turns that carried skills and
/// those that carried none, and their reward sums: the overview's trend.
pub fn reward_trend(conn: &Conn, since_ms: i64) -> crate::store::sql::Result<Vec<DayRewards>> {
    let mut stmt = conn.prepare(
        "SELECT started_at_ms / 86400000 AS day,
                COALESCE(injected_skills, '[]') NOT IN ('[]', '') AS with_skills,
                COUNT(*), SUM(reward)
         FROM turns
         WHERE started_at_ms >= ?1 AND turn_type = 'main' AND reward IS NOT NULL
         GROUP BY day, with_skills ORDER BY day",
    )?;
    let rows = stmt
        .query_map([since_ms], |r| {
            Ok((
                r.get::<i64>(0)?,
                r.get::<bool>(1)?,
                r.get::<i64>(2)?,
                r.get::<f64>(3)?,
            ))
        })?
        .collect::<crate::store::sql::Result<Vec<_>>>()?;
    let mut days: Vec<DayRewards> = Vec::new();
    for (day, with, n, sum) in rows {
        if days.last().is_none_or(|d| d.day != day) {
            days.push(DayRewards {
                day,
                ..DayRewards::default()
            });
        }
        if let Some(d) = days.last_mut() {
            match with {
                true => (d.with_skills, d.with_sum) = (n, sum),
                false => (d.without_skills, d.without_sum) = (n, sum),
            }
        }
    }
    Ok(days)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// In a team, a session's turns are committed by the instances that
    /// served them: a slow writer commits a turn after the one that came
    /// next (a larger `seq`). Learning reads them as they happened, so the
    /// user's correction is the next state of the answer it corrects.
    #[test]
    fn a_sessions_turns_are_read_in_the_order_they_started_not_committed() {
        let conn = crate::store::memory();
        conn.execute(
            "INSERT INTO sessions (id, base_key, source, started_at_ms, last_activity_ms)
             VALUES ('s', 's', 'test', 0, 0)",
            (),
        )
        .unwrap();
        // (id, seq: commit order, started_at_ms)
        for (id, seq, started) in [("first", 1, 100), ("third", 2, 300), ("second", 3, 200)] {
            conn.execute(
                "INSERT INTO turns (id, session_id, seq, turn_type, api, stream, status,
                                    request_messages, request_params, started_at_ms,
                                    finished_at_ms, total_ms)
                 VALUES (?1, 's', ?2, 'main', 'openai', 0, 'ok', '[]', '{}', ?3, ?3, 0)",
                params![id, seq, started],
            )
            .unwrap();
        }
        let order = ["first", "second", "third"];
        let main: Vec<String> = main_turns(&conn, "s")
            .unwrap()
            .into_iter()
            .map(|t| t.id)
            .collect();
        assert_eq!(main, order);
        let all: Vec<String> = crate::store::read::session_turns(&conn, "s")
            .unwrap()
            .into_iter()
            .map(|t| t.id)
            .collect();
        assert_eq!(all, order);
    }
}
