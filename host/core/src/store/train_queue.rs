//! The training queue: the student's samples (`turn_samples`), each on its
//! way to at most one training step. A sample is
//!
//! - `waiting` until its session's learning job is done (its reward final,
//!   its evolution known; a session that reopened: until it ends again and
//!   that round's job is done);
//! - then `skipped`, with the reason, or `ready`;
//! - `in_step` once a step of a run has it;
//! - `trained` once a saved training state includes that step. A restart
//!   goes back to the last saved state, so the samples of later steps are
//!   `ready` again: none is trained twice, none is lost.
//!
//! Never trained: a turn whose upstream failed (its answer did not reach
//! the client whole), a turn without a reward, whose sample did not parse,
//! whose tokens were withheld, that was resent (retried), that is the
//! support set of an evolution (its session's skills were published: the
//! next generation learned from it), or that is **stale**: a skill injected
//! into its turn changed (edited, evolved, updated, retired) after it was
//! sampled.
//!
//! Why that rule, and not "any change to the library": a sample is the
//! exact prompt and answer of its turn, so a policy-gradient step on it
//! stays valid whatever else happens to the library. What a change can
//! spoil is the sample's *context*: an answer given (and rewarded) under a
//! skill's old text teaches the weights to act on guidance the agent no
//! longer gets, or to make up for a gap the new text fills. So only a
//! change to a skill that was in the turn's prompt makes it stale; a skill
//! added, edited or retired elsewhere in the library does not touch it.
//! (A turn that extends another shares its prompt, skills block included,
//! so a trajectory's turns go stale together.) The support set stays out
//! for its own reason: the evolution already learned from it, and training
//! the weights on the same failures would teach the lesson twice.
//!
//! Each run trains its own samples: a sample belongs to the run of the
//! policy that sampled it (`run_agent`: '' the shared run, else the agent
//! whose own run it is, `agents.<id>.rl`), and the functions a trainer
//! calls take that run's agent.

use crate::store::instances::{Fence, fenced};
use crate::store::sql::{Conn, params};

use super::samples::{StoredSibling, unpack_f32, unpack_i32};

/// A sample ready to train on.
#[derive(Debug, Clone, PartialEq)]
pub struct Ready {
    pub turn_id: String,
    pub session_id: String,
    pub seq: i64,
    pub trajectory: String,
    pub extends: Option<String>,
    /// `None` only when distillation (`opd`) trains turns without one.
    pub reward: Option<f64>,
    pub skill_generation: u64,
    pub policy_version: i64,
    pub prompt_tokens: Vec<i32>,
    pub tokens: Vec<i32>,
    pub logprobs: Vec<f32>,
    /// Group sampling: the served answer's group reward and its siblings
    /// (`None`: sampled alone).
    pub group: Option<Group>,
    /// The served answer was cut off at the length limit.
    pub truncated: bool,
}

/// A served answer's group: all judged alike (`learn::stages::group`).
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// The served answer's group reward.
    pub served: Option<f64>,
    pub siblings: Vec<StoredSibling>,
}

/// What the queue holds, by state.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Counts {
    pub waiting: u64,
    pub ready: u64,
    pub in_step: u64,
    pub trained: u64,
    pub skipped: u64,
}

const STALE_WHY: &str = "stale: a skill injected into its turn changed after it was sampled";

/// Decides the waiting samples whose session's learning job is done:
/// skipped (with why) or ready. Returns how many became ready.
pub fn classify(conn: &Conn, opd: bool) -> crate::store::sql::Result<usize> {
    // Only samples whose job has finished; each rule marks what it skips.
    // And only of an ended session: one that reopened after its job (the
    // agent came back to it) keeps the last round's job `done` until it
    // ends again, and its new turns, not judged yet, would be skipped for
    // want of a reward (host/tests/support_query.rs). The decidable ones
    // are found once (the queue may hold thousands of samples whose session
    // is never learned from); the rules then look at those alone, each by
    // its row's turn.
    // Named bare: both databases look among temporary tables first.
    conn.execute_batch(
        "CREATE TEMP TABLE IF NOT EXISTS decidable (turn_id TEXT PRIMARY KEY);
         DELETE FROM decidable;",
    )?;
    conn.prepare_cached(
        "INSERT INTO decidable
         SELECT q.turn_id FROM turn_samples q JOIN turns t ON t.id = q.turn_id
         JOIN learning_jobs j ON j.session_id = t.session_id
         JOIN sessions s ON s.id = t.session_id
         WHERE q.train_state = 'waiting' AND j.state = 'done' AND s.status = 'ended'",
    )?
    .execute(())?;
    const DONE: &str = "train_state = 'waiting' AND turn_id IN (SELECT turn_id FROM decidable)";
    // With distillation on, a turn without a reward still has the
    // teacher's signal: it is trained on that alone.
    let no_reward = match opd {
        true => "FALSE",
        false => {
            "EXISTS (SELECT 1 FROM turns t WHERE t.id = turn_samples.turn_id AND t.reward IS NULL)"
        }
    };
    let rules: [(&str, &str); 6] = [
        (
            "EXISTS (SELECT 1 FROM turns t WHERE t.id = turn_samples.turn_id AND t.status != 'ok')",
            "the upstream failed (no real answer to learn from)",
        ),
        (
            "withheld IS NOT NULL",
            "its tokens were not kept (a secret was redacted)",
        ),
        ("parse_error IS NOT NULL", "the sample did not parse"),
        (
            "EXISTS (SELECT 1 FROM turns t WHERE t.id = turn_samples.turn_id AND t.turn_type != 'main')",
            "not a main turn (a side turn, or an attempt that was resent)",
        ),
        (no_reward, NO_REWARD),
        (
            "EXISTS (SELECT 1 FROM turns t JOIN evolved_drafts d ON d.session_id = t.session_id
                     WHERE t.id = turn_samples.turn_id AND d.written_ms IS NOT NULL
                       AND d.outcome IN ('created', 'updated'))",
            "support set: skills were evolved from its session",
        ),
    ];
    // Its own words: what it was sampled with.
    conn.prepare_cached(&format!(
        "UPDATE turn_samples SET train_state = 'skipped', train_note = 'off-policy: ' || off_policy
         WHERE {DONE} AND off_policy IS NOT NULL"
    ))?
    .execute(())?;
    for (rule, why) in rules {
        let sql = format!(
            "UPDATE turn_samples SET train_state = 'skipped', train_note = ?1 WHERE {DONE} AND {rule}"
        );
        conn.prepare_cached(&sql)?.execute(params![why])?;
    }
    skip_stale(conn, DONE)?;
    conn.prepare_cached(&format!(
        "UPDATE turn_samples SET train_state = 'ready' WHERE {DONE}"
    ))?
    .execute(())
}

const NO_REWARD: &str = "no reward signal (neither the judge nor a scorer)";

/// Skips the stale samples among those `which` picks (a condition on
/// `turn_samples`' own columns): those a skill injected into their turn
/// has a change recorded for after the generation they were sampled under
/// (the rule above). Worked out here, not in SQL: a turn's skills are
/// JSON, which each database reads with functions of its own, and
/// Postgres's fail on malformed text where SQLite's `json_valid` let the
/// rule pass over it.
fn skip_stale(conn: &Conn, which: &str) -> crate::store::sql::Result<()> {
    let samples: Vec<(String, i64, String)> = conn
        .prepare_cached(&format!(
            "SELECT turn_samples.turn_id, turn_samples.skill_generation, t.injected_skills
             FROM turn_samples JOIN turns t ON t.id = turn_samples.turn_id
             WHERE {which} AND t.injected_skills IS NOT NULL"
        ))?
        .query_map((), |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<crate::store::sql::Result<_>>()?;
    if samples.is_empty() {
        return Ok(());
    }
    let mut last_change =
        conn.prepare_cached("SELECT max(generation) FROM skill_changes WHERE skill_id = ?1")?;
    // Still picked by `which` when skipped: another connection may have
    // moved it on since it was read.
    let mut skip = conn.prepare_cached(&format!(
        "UPDATE turn_samples SET train_state = 'skipped', train_note = ?2
         WHERE turn_id = ?1 AND {which}"
    ))?;
    let mut changed_at: std::collections::HashMap<String, Option<i64>> = Default::default();
    for (turn, generation, injected) in samples {
        let mut stale = false;
        for id in injected_ids(&injected) {
            let last = match changed_at.get(&id) {
                Some(last) => *last,
                None => {
                    let last: Option<i64> = last_change.query_row([&id], |r| r.get(0))?;
                    changed_at.insert(id, last);
                    last
                }
            };
            if last.is_some_and(|g| g > generation) {
                stale = true;
                break;
            }
        }
        if stale {
            skip.execute(params![turn, STALE_WHY])?;
        }
    }
    Ok(())
}

/// The ids in a turn's `injected_skills` (`[{"id", …}]`); none when it
/// does not parse.
fn injected_ids(injected: &str) -> Vec<String> {
    match serde_json::from_str::<serde_json::Value>(injected) {
        Ok(serde_json::Value::Array(items)) => items
            .iter()
            .filter_map(|item| Some(item.get("id")?.as_str()?.to_owned()))
            .collect(),
        _ => Vec::new(),
    }
}

/// The ready samples of `run_agent`'s run, of whatever skill generation,
/// oldest first (session, then turn order); those gone stale since they
/// were made ready skipped, and without distillation (`opd`) those without
/// a reward (made ready while it was on).
pub fn ready(conn: &Conn, opd: bool, run_agent: &str) -> crate::store::sql::Result<Vec<Ready>> {
    skip_stale(conn, "train_state = 'ready'")?;
    if !opd {
        conn.prepare_cached(
            "UPDATE turn_samples SET train_state = 'skipped', train_note = ?1
             WHERE train_state = 'ready' AND turn_id IN (SELECT id FROM turns WHERE reward IS NULL)",
        )?
        .execute(params![NO_REWARD])?;
    }
    conn.prepare_cached(
        "SELECT s.turn_id, t.session_id, t.seq, s.trajectory_id, s.extends_turn, t.reward,
                s.skill_generation, s.policy_version, s.prompt_tokens, s.sampled_tokens, s.logprobs,
                s.group_judged, s.group_reward, s.stop_reason = 'length'
         FROM turn_samples s JOIN turns t ON t.id = s.turn_id
         WHERE s.train_state = 'ready' AND s.run_agent = ?1
         ORDER BY t.started_at_ms, t.session_id, t.seq",
    )?
    .query_map(params![run_agent], |r| {
        Ok(Ready {
            turn_id: r.get(0)?,
            session_id: r.get(1)?,
            seq: r.get(2)?,
            trajectory: r.get(3)?,
            extends: r.get(4)?,
            reward: r.get(5)?,
            skill_generation: r.get::<i64>(6)?.max(0) as u64,
            policy_version: r.get(7)?,
            prompt_tokens: unpack_i32(&r.get::<Vec<u8>>(8)?),
            tokens: unpack_i32(&r.get::<Vec<u8>>(9)?),
            logprobs: unpack_f32(&r.get::<Vec<u8>>(10)?),
            group: r
                .get::<bool>(11)?
                .then(|| r.get(12))
                .transpose()?
                .map(|served| Group {
                    served,
                    siblings: Vec::new(),
                }),
            truncated: r.get(13)?,
        })
    })?
    .collect::<crate::store::sql::Result<Vec<Ready>>>()
    .and_then(|mut ready| {
        for sample in &mut ready {
            if let Some(group) = &mut sample.group {
                group.siblings = super::samples::siblings(conn, &sample.turn_id)?;
            }
        }
        Ok(ready)
    })
}

/// Marks samples as in a step of a run, each with its advantage (in one
/// transaction with nothing else: the step itself is recorded by the run).
/// Every write of the queue by a run's trainer is made under its `fence`
/// (`None`: alone on its store): a trainer that lost the lead writes
/// nothing.
pub fn assign(
    conn: &Conn,
    fence: Option<&Fence>,
    run_id: &str,
    step: i64,
    samples: &[(String, f64)],
) -> crate::store::sql::Result<()> {
    fenced(conn, fence, |tx| {
        let mut stmt = tx.prepare_cached(
            "UPDATE turn_samples SET train_state = 'in_step', run_id = ?2, train_step = ?3, advantage = ?4
             WHERE turn_id = ?1 AND train_state = 'ready'",
        )?;
        for (turn, advantage) in samples {
            stmt.execute(params![turn, run_id, step, advantage])?;
        }
        Ok(())
    })
}

/// Samples with no signal in their batch (every advantage zero): skipped,
/// never trained as zeros.
pub fn skip(
    conn: &Conn,
    fence: Option<&Fence>,
    turns: &[String],
    why: &str,
) -> crate::store::sql::Result<()> {
    fenced(conn, fence, |tx| {
        let mut stmt = tx.prepare_cached(
            "UPDATE turn_samples SET train_state = 'skipped', train_note = ?2 WHERE turn_id = ?1",
        )?;
        for turn in turns {
            stmt.execute(params![turn, why])?;
        }
        Ok(())
    })
}

/// Samples of `run_agent`'s run sampled from policy version `version` not
/// trained yet: skipped (`why`), as when a canary rolled those weights back
/// (a run numbers its steps on through a rollback, so the version names
/// those weights alone).
pub fn skip_version(
    conn: &Conn,
    run_agent: &str,
    version: i64,
    why: &str,
) -> crate::store::sql::Result<usize> {
    conn.prepare_cached(
        "UPDATE turn_samples SET train_state = 'skipped', train_note = ?2
         WHERE policy_version = ?1 AND run_agent = ?3 AND train_state IN ('waiting', 'ready')",
    )?
    .execute(params![version, why, run_agent])
}

/// A training state saved after step `step` of `run_id`: its samples (and
/// those of earlier steps) are trained.
pub fn checkpointed(
    conn: &Conn,
    fence: Option<&Fence>,
    run_id: &str,
    step: i64,
) -> crate::store::sql::Result<usize> {
    fenced(conn, fence, |tx| {
        tx.prepare_cached(
            "UPDATE turn_samples SET train_state = 'trained'
             WHERE train_state = 'in_step' AND run_id = ?1 AND train_step <= ?2",
        )?
        .execute(params![run_id, step])
    })
}

/// The run went back to its state saved after step `step` (a restart, a
/// failed step): the samples of later steps are ready again, and those its
/// agent's earlier runs left in a step (another agent's run is not this
/// run's business).
pub fn rewind(
    conn: &Conn,
    fence: Option<&Fence>,
    run_agent: &str,
    run_id: &str,
    step: i64,
) -> crate::store::sql::Result<usize> {
    fenced(conn, fence, |tx| {
        tx.prepare_cached(
            "UPDATE turn_samples SET train_state = 'ready', run_id = NULL, train_step = NULL, advantage = NULL
             WHERE train_state = 'in_step' AND run_agent = ?3 AND (run_id != ?1 OR train_step > ?2)",
        )?
        .execute(params![run_id, step, run_agent])
    })
}

/// A running reward baseline: policy version → its value and how many
/// rewards it has seen.
pub type Baseline = (i64, (f64, u64));

/// The running reward baselines of `run_agent`'s run as last saved.
pub fn baselines(conn: &Conn, run_agent: &str) -> crate::store::sql::Result<Vec<Baseline>> {
    conn.prepare_cached(
        "SELECT policy_version, value, count FROM rl_run_baselines WHERE run_agent = ?1",
    )?
    .query_map(params![run_agent], |r| {
        Ok((r.get(0)?, (r.get(1)?, r.get::<i64>(2)?.max(0) as u64)))
    })?
    .collect()
}

/// Saves the running reward baselines (all of them, in one transaction), so
/// that a restart goes on from them rather than from nothing.
pub fn save_baselines(
    conn: &mut Conn,
    run_agent: &str,
    values: impl IntoIterator<Item = Baseline>,
) -> crate::store::sql::Result<()> {
    let tx = conn.transaction()?;
    {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO rl_run_baselines (run_agent, policy_version, value, count) VALUES (?4, ?1, ?2, ?3)
             ON CONFLICT (run_agent, policy_version) DO UPDATE SET value = ?2, count = ?3",
        )?;
        for (version, (value, count)) in values {
            stmt.execute(params![version, value, count as i64, run_agent])?;
        }
    }
    tx.commit()
}

/// The skipped samples of `run_agent`'s run by why, most first.
pub fn skipped_by_reason(
    conn: &Conn,
    run_agent: &str,
) -> crate::store::sql::Result<Vec<(String, u64)>> {
    conn.prepare_cached(
        "SELECT coalesce(train_note, '(no reason recorded)'), count(*) FROM turn_samples
         WHERE train_state = 'skipped' AND run_agent = ?1 GROUP BY 1 ORDER BY 2 DESC, 1",
    )?
    .query_map(params![run_agent], |r| {
        Ok((r.get(0)?, r.get::<i64>(1)?.max(0) as u64))
    })?
    .collect()
}

/// The queue by state: of one run's samples (`Some(run_agent)`), or of all.
pub fn counts(conn: &Conn, run_agent: Option<&str>) -> crate::store::sql::Result<Counts> {
    let mut counts = Counts::default();
    let mut stmt = conn.prepare_cached(
        "SELECT train_state, count(*) FROM turn_samples
         WHERE CAST(?1 AS TEXT) IS NULL OR run_agent = ?1 GROUP BY train_state",
    )?;
    let rows = stmt.query_map(params![run_agent], |r| {
        Ok((r.get::<String>(0)?, r.get::<i64>(1)?))
    })?;
    for row in rows {
        let (state, n) = row?;
        let n = n.max(0) as u64;
        match state.as_str() {
            "waiting" => counts.waiting = n,
            "ready" => counts.ready = n,
            "in_step" => counts.in_step = n,
            "trained" => counts.trained = n,
            _ => counts.skipped += n,
        }
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use crate::store::sql::Conn;

    use super::*;
    use crate::store::samples::pack_i32;

    fn db() -> Conn {
        crate::store::memory()
    }

    /// A session with a finished (or not) learning job: ended, as a
    /// session with a job is (until it reopens).
    fn session(conn: &Conn, id: &str, job: Option<&str>) {
        let status = if job.is_some() { "ended" } else { "active" };
        conn.execute(
            "INSERT INTO sessions (id, base_key, source, status, started_at_ms, last_activity_ms) VALUES (?1, ?1, 'header', ?2, 0, 0)",
            params![id, status],
        )
        .unwrap();
        if let Some(state) = job {
            conn.execute(
                "INSERT INTO learning_jobs (session_id, state, not_before_ms, enqueued_ms) VALUES (?1, ?2, 0, 0)",
                params![id, state],
            )
            .unwrap();
        }
    }

    /// A student turn and its sample.
    #[allow(clippy::too_many_arguments)]
    fn turn(
        conn: &Conn,
        id: &str,
        session: &str,
        seq: i64,
        turn_type: &str,
        reward: Option<f64>,
        parse_error: Option<&str>,
        generation: i64,
    ) {
        conn.execute(
            "INSERT INTO turns (id, session_id, seq, turn_type, api, stream, status, request_messages,
                                request_params, started_at_ms, finished_at_ms, total_ms, reward)
             VALUES (?1, ?2, ?3, ?4, 'chat', 0, 'ok', '[]', '{}', ?3, ?3, 1.0, ?5)",
            params![id, session, seq, turn_type, reward],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO turn_samples (turn_id, base_model, sampler, policy_version, rendering, skill_generation,
                 prompt_tokens, sampled_tokens, logprobs, prompt_len, sampled_len, stop_reason, parsed,
                 parse_error, trajectory_id, at_ms)
             VALUES (?1, 'm', 'base', 0, 'r', ?2, ?3, ?3, ?5, 1, 1, 'stop', 1, ?4, ?1, 0)",
            params![id, generation, pack_i32(&[1]), parse_error, Vec::<u8>::new()],
        )
        .unwrap();
    }

    /// The turn had these skills injected (`[{"id", "version", "score"}]`).
    fn inject(conn: &Conn, turn: &str, skills: &[&str]) {
        let list: Vec<serde_json::Value> = skills
            .iter()
            .map(|id| serde_json::json!({"id": id, "version": "1.0.0", "score": 0.5}))
            .collect();
        conn.execute(
            "UPDATE turns SET injected_skills = ?2 WHERE id = ?1",
            params![turn, serde_json::Value::from(list).to_string()],
        )
        .unwrap();
    }

    /// The library recorded a change of `skill` at `generation`.
    fn changed(conn: &Conn, skill: &str, generation: i64) {
        conn.execute(
            "INSERT INTO skill_changes (skill_id, change, who, why, generation, at_ms)
             VALUES (?1, 'changed', 'user', 'edited', ?2, 0)",
            params![skill, generation],
        )
        .unwrap();
    }

    fn state(conn: &Conn, turn: &str) -> (String, Option<String>) {
        conn.query_row(
            "SELECT train_state, train_note FROM turn_samples WHERE turn_id = ?1",
            params![turn],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
    }

    /// Only judged samples leave `waiting`; each rule skips what it names,
    /// and the support set of an evolution is never ready.
    #[test]
    fn samples_are_classified_once_their_session_is_learned_from() {
        let conn = db();
        session(&conn, "a", Some("done"));
        session(&conn, "support", Some("done"));
        session(&conn, "pending", Some("running"));
        // Its job done, then reopened: the new turn waits for the next round.
        session(&conn, "reopened", Some("done"));
        conn.execute(
            "UPDATE sessions SET status = 'active' WHERE id = 'reopened'",
            (),
        )
        .unwrap();
        turn(&conn, "good", "a", 1, "main", Some(1.0), None, 2);
        turn(&conn, "no-reward", "a", 2, "main", None, None, 2);
        turn(
            &conn,
            "broken",
            "a",
            3,
            "main",
            Some(1.0),
            Some("bad json"),
            2,
        );
        turn(&conn, "side", "a", 4, "side", Some(1.0), None, 2);
        // Sampled at generation 1 with `tidy` in its prompt, which changed
        // at 2: stale. Its neighbour had `terse`, untouched since: ready,
        // a generation older or not. One with malformed skills is judged
        // by the other rules.
        turn(&conn, "old", "a", 5, "main", Some(1.0), None, 1);
        turn(&conn, "untouched", "a", 6, "main", Some(1.0), None, 1);
        turn(&conn, "odd", "a", 7, "main", Some(1.0), None, 1);
        inject(&conn, "old", &["terse", "tidy"]);
        inject(&conn, "untouched", &["terse"]);
        inject(&conn, "good", &["tidy"]);
        conn.execute(
            "UPDATE turns SET injected_skills = 'not json' WHERE id = 'odd'",
            (),
        )
        .unwrap();
        changed(&conn, "terse", 1);
        changed(&conn, "tidy", 2);
        changed(&conn, "lesson", 2);
        turn(&conn, "taught", "support", 1, "main", Some(-1.0), None, 2);
        turn(&conn, "later", "pending", 1, "main", Some(1.0), None, 2);
        turn(&conn, "again", "reopened", 1, "main", None, None, 2);
        conn.execute(
            "INSERT INTO evolved_drafts (session_id, round, name, outcome, skill_id, written_ms, at_ms)
             VALUES ('support', 1, 'lesson', 'created', 'lesson', 5, 5)",
            (),
        )
        .unwrap();
        assert_eq!(classify(&conn, false).unwrap(), 3);
        for turn in ["good", "untouched", "odd"] {
            assert_eq!(state(&conn, turn).0, "ready", "{turn}");
        }
        assert_eq!(state(&conn, "later").0, "waiting");
        assert_eq!(state(&conn, "again").0, "waiting");
        for (turn, why) in [
            ("no-reward", "no reward"),
            ("broken", "did not parse"),
            ("side", "not a main turn"),
            ("old", "a skill injected into its turn changed"),
            ("taught", "support set"),
        ] {
            let (s, note) = state(&conn, turn);
            assert_eq!(s, "skipped", "{turn}");
            assert!(note.unwrap().contains(why), "{turn}");
        }
        let reasons = skipped_by_reason(&conn, "").unwrap();
        assert_eq!(reasons.len(), 5, "{reasons:?}");
        assert!(reasons.iter().all(|(_, n)| *n == 1), "{reasons:?}");
        let ids =
            |ready: &[Ready]| -> Vec<String> { ready.iter().map(|r| r.turn_id.clone()).collect() };
        assert_eq!(
            ids(&ready(&conn, false, "").unwrap()),
            ["good", "untouched", "odd"]
        );
        // `tidy` changed again since: the ready sample that had it is
        // stale now; the others are not touched by that change.
        changed(&conn, "tidy", 3);
        assert_eq!(ids(&ready(&conn, false, "").unwrap()), ["untouched", "odd"]);
        let (s, note) = state(&conn, "good");
        assert_eq!(s, "skipped");
        assert!(note.unwrap().contains("stale"));
    }

    /// A turn whose upstream failed (or whose answer was cut) is never
    /// trained: not on a reward it got before this rule, not on the
    /// teacher's signal with distillation on.
    #[test]
    fn a_failed_turn_is_never_trained() {
        for opd in [false, true] {
            let conn = db();
            session(&conn, "a", Some("done"));
            turn(&conn, "cut", "a", 1, "main", Some(1.0), None, 0);
            turn(&conn, "fine", "a", 2, "main", Some(1.0), None, 0);
            conn.execute(
                "UPDATE turns SET status = 'incomplete' WHERE id = 'cut'",
                (),
            )
            .unwrap();
            assert_eq!(classify(&conn, opd).unwrap(), 1);
            let (s, note) = state(&conn, "cut");
            assert_eq!(s, "skipped");
            assert!(note.unwrap().contains("the upstream failed"));
            assert_eq!(state(&conn, "fine").0, "ready");
        }
    }

    /// With distillation on, a turn without a reward is trained on the
    /// teacher's signal alone; the other rules still hold, and once it is
    /// off again such a sample is skipped, not trained on nothing.
    #[test]
    fn with_distillation_a_turn_without_a_reward_is_ready() {
        let conn = db();
        session(&conn, "a", Some("done"));
        turn(&conn, "no-reward", "a", 1, "main", None, None, 0);
        turn(&conn, "side", "a", 2, "side", None, None, 0);
        turn(&conn, "scored", "a", 3, "main", Some(0.0), None, 0);
        assert_eq!(classify(&conn, true).unwrap(), 2);
        let ready_now = ready(&conn, true, "").unwrap();
        let rewards: Vec<(&str, Option<f64>)> = ready_now
            .iter()
            .map(|r| (r.turn_id.as_str(), r.reward))
            .collect();
        assert_eq!(rewards, [("no-reward", None), ("scored", Some(0.0))]);
        assert_eq!(state(&conn, "side").0, "skipped");
        let ready_later = ready(&conn, false, "").unwrap();
        assert_eq!(ready_later.len(), 1);
        let (s, note) = state(&conn, "no-reward");
        assert_eq!(s, "skipped");
        assert!(note.unwrap().contains("no reward"));
    }

    /// In a step, then trained only once a saved state holds the step; a
    /// rewind to an earlier save makes later steps' samples ready again.
    #[test]
    fn samples_are_trained_once_a_saved_state_holds_their_step() {
        let conn = db();
        session(&conn, "a", Some("done"));
        for (i, t) in ["t1", "t2", "t3"].iter().enumerate() {
            turn(&conn, t, "a", i as i64, "main", Some(1.0), None, 0);
        }
        classify(&conn, false).unwrap();
        assign(&conn, None, "run", 1, &[("t1".into(), 0.5)]).unwrap();
        assign(&conn, None, "run", 2, &[("t2".into(), -0.5)]).unwrap();
        assert_eq!(checkpointed(&conn, None, "run", 1).unwrap(), 1);
        // Killed after step 2, before its save: back to the state of step 1.
        assert_eq!(rewind(&conn, None, "", "run", 1).unwrap(), 1);
        assert_eq!(state(&conn, "t1").0, "trained");
        assert_eq!(state(&conn, "t2").0, "ready");
        let c = counts(&conn, None).unwrap();
        assert_eq!((c.trained, c.ready, c.in_step), (1, 2, 0));
    }

    /// A trainer still stepping after its lead passed to another instance
    /// (silent past the TTL, yet alive) writes nothing of its step: the
    /// samples the new leader took back are not taken, skipped, trained or
    /// rewound by the old one, and each is trained once, by the new one.
    #[test]
    fn a_trainer_that_lost_its_lead_writes_nothing_of_its_step() {
        use crate::store::instances::acquire;
        use crate::store::sql::Error;
        let conn = db();
        session(&conn, "a", Some("done"));
        for (i, t) in ["t1", "t2", "t3"].iter().enumerate() {
            turn(&conn, t, "a", i as i64, "main", Some(1.0), None, 0);
        }
        classify(&conn, false).unwrap();
        let fence = |holder: &str, epoch| Fence {
            lease: "trainer".into(),
            holder: holder.into(),
            epoch,
        };
        assert_eq!(acquire(&conn, "trainer", "x", 60_000).unwrap(), Some(1));
        let (old, new) = (fence("x", 1), fence("y", 2));
        assign(&conn, Some(&old), "run", 1, &[("t1".into(), 0.5)]).unwrap();
        // x goes silent mid-step: its lease runs out, y takes it and goes
        // on from the last saved state (none), so t1 is ready again.
        assert_eq!(acquire(&conn, "trainer", "x", -10).unwrap(), Some(1));
        assert_eq!(acquire(&conn, "trainer", "y", 60_000).unwrap(), Some(2));
        assert_eq!(rewind(&conn, Some(&new), "", "run", 0).unwrap(), 1);
        let fenced = |r: crate::store::sql::Result<usize>| matches!(r, Err(Error::Fenced(_)));
        assert!(fenced(checkpointed(&conn, Some(&old), "run", 1)));
        assert!(fenced(rewind(&conn, Some(&old), "", "run", 0)));
        let two = [("t2".to_string(), 0.5)];
        assert!(matches!(
            assign(&conn, Some(&old), "run", 2, &two),
            Err(Error::Fenced(_))
        ));
        assert!(matches!(
            skip(&conn, Some(&old), &["t3".into()], "no signal"),
            Err(Error::Fenced(_))
        ));
        let c = counts(&conn, None).unwrap();
        assert_eq!((c.ready, c.in_step, c.trained, c.skipped), (3, 0, 0, 0));
        // y trains them all as its step 1, once.
        let all: Vec<(String, f64)> = ["t1", "t2", "t3"]
            .iter()
            .map(|t| (t.to_string(), 0.5))
            .collect();
        assign(&conn, Some(&new), "run", 1, &all).unwrap();
        assert_eq!(checkpointed(&conn, Some(&new), "run", 1).unwrap(), 3);
        // And once y lets go, even y's old fence writes nothing.
        crate::store::instances::release(&conn, "trainer", "y").unwrap();
        assert!(fenced(rewind(&conn, Some(&new), "", "run", 0)));
        assert_eq!(counts(&conn, None).unwrap().trained, 3);
    }

    #[test]
    fn baselines_are_saved_and_read_back() {
        let mut conn = db();
        assert!(baselines(&conn, "").unwrap().is_empty());
        save_baselines(&mut conn, "", [(0, (0.5, 3)), (2, (-0.25, 1))]).unwrap();
        save_baselines(&mut conn, "", [(0, (0.75, 4))]).unwrap();
        let mut read = baselines(&conn, "").unwrap();
        read.sort_by_key(|(k, _)| *k);
        assert_eq!(read, [(0, (0.75, 4)), (2, (-0.25, 1))]);
    }

    /// Two runs in one store (the shared one and agent a's own): each sees,
    /// rewinds and baselines its own samples alone.
    #[test]
    fn each_run_trains_its_own_samples_alone() {
        let mut conn = db();
        session(&conn, "s", Some("done"));
        turn(&conn, "shared", "s", 0, "main", Some(1.0), None, 0);
        turn(&conn, "mine", "s", 1, "main", Some(1.0), None, 0);
        turn(&conn, "mine-too", "s", 2, "main", Some(1.0), None, 0);
        conn.execute(
            "UPDATE turn_samples SET run_agent = 'a' WHERE turn_id LIKE 'mine%'",
            (),
        )
        .unwrap();
        classify(&conn, false).unwrap();
        let ids =
            |ready: Vec<Ready>| -> Vec<String> { ready.into_iter().map(|r| r.turn_id).collect() };
        assert_eq!(ids(ready(&conn, false, "a").unwrap()), ["mine", "mine-too"]);
        assert_eq!(ids(ready(&conn, false, "").unwrap()), ["shared"]);
        assign(&conn, None, "run-a", 1, &[("mine".into(), 0.5)]).unwrap();
        assign(&conn, None, "run-shared", 4, &[("shared".into(), 0.5)]).unwrap();
        // a's new run goes back to nothing: its own sample is ready again,
        // the shared run's stays in its step.
        assert_eq!(rewind(&conn, None, "a", "run-a2", 0).unwrap(), 1);
        assert_eq!(state(&conn, "mine").0, "ready");
        assert_eq!(state(&conn, "shared").0, "in_step");
        assert_eq!(skip_version(&conn, "", 0, "rolled back").unwrap(), 0);
        assert_eq!(counts(&conn, Some("a")).unwrap().ready, 2);
        assert_eq!(counts(&conn, None).unwrap().in_step, 1);
        save_baselines(&mut conn, "a", [(0, (0.5, 3))]).unwrap();
        save_baselines(&mut conn, "", [(0, (-0.5, 1))]).unwrap();
        assert_eq!(baselines(&conn, "a").unwrap(), [(0, (0.5, 3))]);
        assert_eq!(baselines(&conn, "").unwrap(), [(0, (-0.5, 1))]);
    }
}
