//! What the dashboard lists, a page at a time (docs/dashboard.md). Each
//! list walks an index from a cursor (keyset pagination), so a page costs
//! about the same with a hundred sessions as with a hundred thousand.

use std::collections::HashMap;

use crate::store::sql::{Arg as Sql, Conn, params_from_iter};
use serde::Serialize;
use serde_json::{Value, json};

use super::read::{self, SessionRow};

/// What the sessions list is narrowed to.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SessionFilter {
    /// `active` or `ended`.
    pub status: Option<String>,
    /// Started at or after / before (Unix ms).
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
    /// The mean final reward of its judged main turns, within these
    /// (a session with none judged is left out when either is set).
    pub min_reward: Option<f64>,
    pub max_reward: Option<f64>,
    /// Its id or the agent's session id starts with this.
    pub id_prefix: Option<String>,
    /// Sent by this agent (`SessionRow::agent`).
    pub agent: Option<String>,
    /// Of this agent's namespace (`SessionRow::agent_id`).
    pub agent_id: Option<String>,
}

/// A session in the list, with its rewards in short.
#[derive(Debug, Clone, Serialize)]
pub struct SessionListRow {
    #[serde(flatten)]
    pub session: SessionRow,
    /// Main turns with a final reward, and their mean.
    pub judged: u64,
    pub mean_reward: Option<f64>,
}

/// Where the next page starts: after this session (newest first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub started_at_ms: i64,
    pub id: String,
}

impl Cursor {
    /// `<ms>.<id>`, as the page's "older" link carries it.
    pub fn parse(text: &str) -> Option<Self> {
        let (ms, id) = text.split_once('.')?;
        Some(Self {
            started_at_ms: ms.parse().ok()?,
            id: id.to_string(),
        })
    }

    pub fn text(&self) -> String {
        format!("{}.{}", self.started_at_ms, self.id)
    }
}

/// Up to `limit` sessions, newest first, after `after`; and the cursor of
/// the page after it, if there is one.
pub fn sessions_page(
    conn: &Conn,
    filter: &SessionFilter,
    after: Option<&Cursor>,
    limit: u32,
) -> crate::store::sql::Result<(Vec<SessionListRow>, Option<Cursor>)> {
    let mut conditions = Vec::new();
    let mut args: Vec<Sql<'static>> = Vec::new();
    let mut arg = |v: Sql<'static>| {
        args.push(v);
        format!("?{}", args.len())
    };
    if let Some(c) = after {
        let (ms, id) = (
            arg(Sql::Int(c.started_at_ms)),
            arg(Sql::Text(c.id.clone().into())),
        );
        conditions.push(format!(
            "(s.started_at_ms < {ms} OR (s.started_at_ms = {ms} AND s.id < {id}))"
        ));
    }
    if let Some(status) = &filter.status {
        conditions.push(format!(
            "s.status = {}",
            arg(Sql::Text(status.clone().into()))
        ));
    }
    if let Some(agent) = &filter.agent {
        conditions.push(format!(
            "s.agent = {}",
            arg(Sql::Text(agent.clone().into()))
        ));
    }
    if let Some(agent_id) = &filter.agent_id {
        conditions.push(format!(
            "s.agent_id = {}",
            arg(Sql::Text(agent_id.clone().into()))
        ));
    }
    if let Some(ms) = filter.since_ms {
        conditions.push(format!("s.started_at_ms >= {}", arg(Sql::Int(ms))));
    }
    if let Some(ms) = filter.until_ms {
        conditions.push(format!("s.started_at_ms < {}", arg(Sql::Int(ms))));
    }
    if let Some(prefix) = filter.id_prefix.as_deref().filter(|p| !p.is_empty()) {
        // A range, not LIKE: ids are compared as they are, and `%` or `_`
        // in the prefix mean themselves.
        let (low, high) = (
            arg(Sql::Text(prefix.to_owned().into())),
            arg(Sql::Text(format!("{prefix}\u{10FFFF}").into())),
        );
        conditions.push(format!(
            "((s.id >= {low} AND s.id < {high}) OR (s.agent_session_id >= {low} AND s.agent_session_id < {high}))"
        ));
    }
    let mut outer = Vec::new();
    if let Some(min) = filter.min_reward {
        outer.push(format!("mean >= {}", arg(Sql::Real(min))));
    }
    if let Some(max) = filter.max_reward {
        outer.push(format!("mean <= {}", arg(Sql::Real(max))));
    }
    let limit_arg = arg(Sql::Int(i64::from(limit) + 1));
    let clause = |word: &str, c: &[String]| {
        if c.is_empty() {
            String::new()
        } else {
            format!("{word} {}", c.join(" AND "))
        }
    };
    // Walked newest first on sessions_by_start; the rewards are worked out
    // for the sessions walked past only (each one's turns through
    // turns_by_session), until the page is full. The outer ORDER BY
    // repeats the inner one: SQL does not promise a subquery's order
    // survives, and both databases see it costs no sort.
    let sql = format!(
        "SELECT * FROM (
             SELECT s.id, s.agent_session_id, s.source, s.window_index, s.status, s.started_at_ms,
                    s.last_activity_ms, s.ended_at_ms, s.end_reason, s.turn_count, s.main_turns, s.agent,
                    s.agent_id,
                    (SELECT count(t.reward) FROM turns t
                     WHERE t.session_id = s.id AND t.turn_type = 'main') AS judged,
                    (SELECT avg(t.reward) FROM turns t
                     WHERE t.session_id = s.id AND t.turn_type = 'main') AS mean
             FROM sessions s {inner}
             ORDER BY s.started_at_ms DESC, s.id DESC) AS page
         {outer}
         ORDER BY started_at_ms DESC, id DESC
         LIMIT {limit_arg}",
        inner = clause("WHERE", &conditions),
        outer = clause("WHERE", &outer),
    );
    let mut rows: Vec<SessionListRow> = conn
        .prepare(&sql)?
        .query_map(params_from_iter(args.iter()), |row| {
            Ok(SessionListRow {
                session: read::session_row(row)?,
                judged: row.get::<i64>(13)?.max(0) as u64,
                mean_reward: row.get(14)?,
            })
        })?
        .collect::<crate::store::sql::Result<_>>()?;
    let next = (rows.len() > limit as usize).then(|| {
        rows.truncate(limit as usize);
        rows.last().map(|r| Cursor {
            started_at_ms: r.session.started_at_ms,
            id: r.session.id.clone(),
        })
    });
    Ok((rows, next.flatten()))
}

/// Indexes a turn under each skill injected into it, for the skill's page.
pub(super) fn turn_injected(
    conn: &Conn,
    turn_id: &str,
    at_ms: i64,
    skills: &[super::InjectedSkill],
) -> crate::store::sql::Result<()> {
    if skills.is_empty() {
        return Ok(());
    }
    let mut stmt = conn.prepare_cached(
        "INSERT OR IGNORE INTO turn_skills (skill_id, at_ms, turn_id, version) VALUES (?1, ?2, ?3, ?4)",
    )?;
    for s in skills {
        stmt.execute(crate::store::sql::params![s.id, at_ms, turn_id, s.version])?;
    }
    Ok(())
}

/// A turn a skill was injected into.
#[derive(Debug, Clone, Serialize)]
pub struct InjectedInto {
    pub turn_id: String,
    pub version: String,
    pub at_ms: i64,
    pub session_id: String,
    pub seq: i64,
    pub turn_type: String,
    pub user: Option<String>,
    pub reward: Option<f64>,
}

/// The latest `limit` turns `skill_id` was injected into, newest first.
pub fn injected_into(
    conn: &Conn,
    skill_id: &str,
    limit: u32,
) -> crate::store::sql::Result<Vec<InjectedInto>> {
    conn.prepare_cached(
        "SELECT ts.turn_id, ts.version, ts.at_ms, t.session_id, t.seq, t.turn_type, t.user_summary, t.reward
         FROM turn_skills ts JOIN turns t ON t.id = ts.turn_id
         WHERE ts.skill_id = ?1 ORDER BY ts.at_ms DESC, ts.turn_id DESC LIMIT ?2",
    )?
    .query_map(crate::store::sql::params![skill_id, limit], |r| {
        Ok(InjectedInto {
            turn_id: r.get(0)?,
            version: r.get(1)?,
            at_ms: r.get(2)?,
            session_id: r.get(3)?,
            seq: r.get(4)?,
            turn_type: r.get(5)?,
            user: r.get(6)?,
            reward: r.get(7)?,
        })
    })?
    .collect()
}

/// The agents (namespaces) sessions belong to, for the list's filter: a
/// skip-scan of sessions_by_agent_id. `n` counts the seeks: a cap both
/// databases take (Postgres has no LIMIT inside a recursive query).
pub fn agent_ids(conn: &Conn) -> crate::store::sql::Result<Vec<String>> {
    conn.prepare(
        "WITH RECURSIVE a(x, n) AS (
             SELECT (SELECT min(agent_id) FROM sessions), 1
             UNION ALL
             SELECT (SELECT min(agent_id) FROM sessions WHERE agent_id > a.x), a.n + 1 FROM a
             WHERE a.x IS NOT NULL AND a.n < 1000)
         SELECT x FROM a WHERE x IS NOT NULL",
    )?
    .query_map((), |r| r.get(0))?
    .collect()
}

/// The agents sessions were recorded from, for the list's filter.
pub fn agents(conn: &Conn) -> crate::store::sql::Result<Vec<String>> {
    // A skip-scan of sessions_by_agent_name: one seek per agent, however
    // many sessions each has.
    conn.prepare(
        "WITH RECURSIVE a(x, n) AS (
             SELECT (SELECT min(agent) FROM sessions WHERE agent IS NOT NULL), 1
             UNION ALL
             SELECT (SELECT min(agent) FROM sessions WHERE agent > a.x), a.n + 1 FROM a
             WHERE a.x IS NOT NULL AND a.n < 100)
         SELECT x FROM a WHERE x IS NOT NULL",
    )?
    .query_map((), |r| r.get(0))?
    .collect()
}

/// What a session view adds to each turn besides what learning made of
/// it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Detail {
    /// The turn's request messages.
    pub messages: bool,
    /// The tokens the student sampled, with their logprobs, when it
    /// answered the turn.
    pub tokens: bool,
}

/// A session with its turns and what learning made of them, as
/// `sessions show --json` prints it and the dashboard shows it.
pub fn session_view(conn: &Conn, id: &str, detail: Detail) -> anyhow::Result<Option<Value>> {
    let Some(session) = read::session_detail(conn, id)? else {
        return Ok(None);
    };
    let turns = read::session_turns(conn, &session.id)?;
    let learned = Learned {
        rewards: read::turn_rewards(conn, &session.id)?,
        judgments: super::learning::judgments(conn, &session.id)?,
        job: super::jobs::get(conn, &session.id)?,
        feedback: super::feedback::list(conn, &session.id)?,
    };
    let turns = turns
        .iter()
        .map(|t| turn_view(conn, t, &learned, detail))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let turns = serde_json::to_value(turns)?;
    Ok(Some(json!({
        "session": session,
        "turns": turns,
        "learning": learned.job,
        "evolved": super::learning::drafts(conn, &session.id)?,
        // All of it; each turn's own is also under the turn.
        "feedback": learned.feedback,
    })))
}

/// What learning made of a session's turns, by turn id.
struct Learned {
    rewards: HashMap<String, Vec<read::RewardRow>>,
    judgments: HashMap<String, super::learning::Judgment>,
    job: Option<super::jobs::Job>,
    feedback: Vec<super::feedback::Feedback>,
}

/// A turn in a session view: its row, then what learning made of it.
#[derive(Serialize)]
struct TurnView<'a> {
    #[serde(flatten)]
    turn: &'a read::TurnRow,
    rewards: &'a [read::RewardRow],
    judgment: Option<&'a super::learning::Judgment>,
    feedback: Vec<&'a super::feedback::Feedback>,
    no_reward: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    messages: Option<Vec<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tokens: Option<Tokens>,
}

/// What the student sampled for a turn.
#[derive(Serialize)]
struct Tokens {
    prompt: Vec<i32>,
    sampled: Vec<i32>,
    logprobs: Vec<f32>,
}

fn turn_view<'a>(
    conn: &Conn,
    t: &'a read::TurnRow,
    learned: &'a Learned,
    detail: Detail,
) -> anyhow::Result<TurnView<'a>> {
    let messages = match detail.messages {
        true => Some(read::load_messages(conn, &t.message_hashes)?),
        false => None,
    };
    let tokens = match detail.tokens {
        true => super::samples::for_turn(conn, &t.id)?.map(|sample| Tokens {
            prompt: sample.prompt_tokens,
            sampled: sample.tokens,
            logprobs: sample.logprobs,
        }),
        false => None,
    };
    Ok(TurnView {
        turn: t,
        rewards: learned.rewards.get(&t.id).map_or(&[][..], Vec::as_slice),
        judgment: learned.judgments.get(&t.id),
        feedback: learned
            .feedback
            .iter()
            .filter(|f| f.turn_id.as_deref() == Some(t.id.as_str()))
            .collect(),
        no_reward: super::learning::no_reward(
            t,
            learned.judgments.contains_key(&t.id),
            learned.job.as_ref(),
        ),
        messages,
        tokens,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The list shows each session's agent, its judged turns and their
    /// mean, and narrows to one agent's sessions.
    #[test]
    fn the_list_shows_and_filters_each_sessions_agent() {
        let conn = crate::store::memory();
        for (id, agent, at) in [("s1", "default", 1), ("s2", "coder", 2), ("s3", "coder", 3)] {
            conn.execute(
                "INSERT INTO sessions (id, base_key, source, status, started_at_ms, last_activity_ms, agent_id)
                 VALUES (?1, ?1, 'header', 'ended', ?2, ?2, ?3)",
                crate::store::sql::params![id, at, agent],
            )
            .unwrap();
        }
        conn.execute(
            "INSERT INTO turns (id, session_id, seq, turn_type, api, stream, status, request_messages,
                                request_params, started_at_ms, finished_at_ms, total_ms, reward)
             VALUES ('t', 's2', 1, 'main', 'chat', 0, 'ok', '[]', '{}', 2, 2, 1.0, 0.5)",
            (),
        )
        .unwrap();
        let (all, _) = sessions_page(&conn, &SessionFilter::default(), None, 10).unwrap();
        let shown: Vec<(&str, &str, u64)> = all
            .iter()
            .map(|r| (r.session.id.as_str(), r.session.agent_id.as_str(), r.judged))
            .collect();
        assert_eq!(
            shown,
            [("s3", "coder", 0), ("s2", "coder", 1), ("s1", "default", 0)]
        );
        assert_eq!(all[1].mean_reward, Some(0.5));
        let coder = SessionFilter {
            agent_id: Some("coder".into()),
            ..Default::default()
        };
        let (rows, _) = sessions_page(&conn, &coder, None, 10).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(agent_ids(&conn).unwrap(), ["coder", "default"]);
    }
}
