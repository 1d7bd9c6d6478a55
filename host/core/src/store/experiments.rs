//! Canaries' records: each candidate under test (an experiment), the arm
//! each session met it in, and how it was decided. The decision itself is
//! `canary::decide`; the learner applies it (`learn/canary.rs`).

use crate::store::sql::{Conn, Optional, params};
use serde::Serialize;

/// A turn's arm of one experiment, as recorded with the turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ArmRecord {
    pub experiment: i64,
    /// `candidate` or `control`.
    pub arm: &'static str,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Experiment {
    pub id: i64,
    pub kind: String,
    pub subject: String,
    pub version: String,
    pub share: f64,
    /// `testing`, `promoted`, `rolled_back`, `superseded` or `abandoned`.
    pub state: String,
    pub started_ms: i64,
    pub origin: String,
    pub decided_ms: Option<i64>,
    /// `test`, `timeout` or `user`.
    pub decided_by: Option<String>,
    pub reason: Option<String>,
}

impl Experiment {
    /// What is tested, in a few words: `skill@version`, or the weights of a
    /// train step.
    pub fn label(&self) -> String {
        match self.kind.as_str() {
            "weights" => format!("weights of step {}", self.version),
            _ => format!("{}@{}", self.subject, self.version),
        }
    }
}

const COLUMNS: &str =
    "id, kind, subject, version, share, state, started_ms, origin, decided_ms, decided_by, reason";

fn row(r: &crate::store::sql::Row) -> crate::store::sql::Result<Experiment> {
    Ok(Experiment {
        id: r.get(0)?,
        kind: r.get(1)?,
        subject: r.get(2)?,
        version: r.get(3)?,
        share: r.get(4)?,
        state: r.get(5)?,
        started_ms: r.get(6)?,
        origin: r.get(7)?,
        decided_ms: r.get(8)?,
        decided_by: r.get(9)?,
        reason: r.get(10)?,
    })
}

/// Starts testing `version` of skill `subject` (or returns the test of it
/// already running: a job resumed after a crash writes the same skill
/// again); a test of another version of it still running ends as
/// `superseded` (its sessions met a text that is gone).
pub fn start_skill(
    conn: &Conn,
    subject: &str,
    version: &str,
    share: f64,
    origin: &str,
    at_ms: i64,
) -> crate::store::sql::Result<i64> {
    let running: Option<i64> = conn
        .prepare_cached(
            "SELECT id FROM experiments
             WHERE kind = 'skill' AND subject = ?1 AND version = ?2 AND state = 'testing'",
        )?
        .query_row(params![subject, version], |r| r.get(0))
        .optional()?;
    if let Some(id) = running {
        return Ok(id);
    }
    conn.prepare_cached(
        "UPDATE experiments SET state = 'superseded', decided_ms = ?2, decided_by = 'test',
                reason = 'a newer version of the skill is tested instead'
         WHERE kind = 'skill' AND subject = ?1 AND state = 'testing'",
    )?
    .execute(params![subject, at_ms])?;
    conn.prepare_cached(
        "INSERT INTO experiments (kind, subject, version, share, state, started_ms, origin)
         VALUES ('skill', ?1, ?2, ?3, 'testing', ?4, ?5) RETURNING id",
    )?
    .query_row(params![subject, version, share, at_ms, origin], |r| {
        r.get(0)
    })
}

/// Starts testing the weights of step `version` of training run `run`
/// (one weights test at a time of each agent's runs, and of the shared
/// runs: one of theirs still running ends as `superseded`).
pub fn start_weights(
    conn: &Conn,
    test: &WeightsTest,
    share: f64,
    origin: &str,
    at_ms: i64,
) -> crate::store::sql::Result<i64> {
    conn.prepare_cached(
        "UPDATE experiments SET state = 'superseded', decided_ms = ?1, decided_by = 'test',
                reason = 'newer weights are tested instead'
         WHERE kind = 'weights' AND state = 'testing'
           AND coalesce((SELECT agent FROM training_runs WHERE id = subject), '')
             = coalesce((SELECT agent FROM training_runs WHERE id = ?2), '')",
    )?
    .execute(params![at_ms, test.run])?;
    let id: i64 = conn
        .prepare_cached(
            "INSERT INTO experiments (kind, subject, version, share, state, started_ms, origin)
         VALUES ('weights', ?1, ?2, ?3, 'testing', ?4, ?5) RETURNING id",
        )?
        .query_row(
            params![
                test.run,
                test.candidate_version.to_string(),
                share,
                at_ms,
                origin
            ],
            |r| r.get(0),
        )?;
    set_weights_test(conn, id, test)?;
    Ok(id)
}

/// Keeps what weights test `id` compares (again, after a restart saved the
/// candidate's weights anew).
pub fn set_weights_test(conn: &Conn, id: i64, test: &WeightsTest) -> crate::store::sql::Result<()> {
    conn.prepare_cached(
        "INSERT INTO meta (key, value) VALUES (?1, ?2)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )?
    .execute(params![
        weights_key(id),
        serde_json::to_string(test).unwrap_or_default()
    ])?;
    Ok(())
}

/// What a weights test compares and where to go back to: kept with the
/// experiment (the `meta` table) so a restart tests on or rolls back.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct WeightsTest {
    /// The training run.
    pub run: String,
    pub candidate_sampler: String,
    pub candidate_version: i64,
    /// The candidate's saved training state (what a promotion trains on).
    pub candidate_state: String,
    pub incumbent_sampler: String,
    pub incumbent_version: i64,
    /// The saved training state the incumbent's weights were loaded from
    /// (a restart serves them again from it).
    pub incumbent_state: String,
    /// The training state the candidate's step started from: what a
    /// rollback trains on from.
    pub trained_from: String,
}

fn weights_key(id: i64) -> String {
    format!("canary.weights.{id}")
}

/// What weights test `id` compares (`None`: not a weights test, or its
/// record is unreadable).
pub fn weights_test(conn: &Conn, id: i64) -> crate::store::sql::Result<Option<WeightsTest>> {
    let value: Option<String> = conn
        .prepare_cached("SELECT value FROM meta WHERE key = ?1")?
        .query_row([weights_key(id)], |r| r.get(0))
        .optional()?;
    Ok(value.and_then(|v| serde_json::from_str(&v).ok()))
}

/// One answer the student served in a weights test, as the collapse guard
/// reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Answered {
    pub tokens: f64,
    pub truncated: bool,
    /// Mean −log p of its sampled tokens (`None`: none kept).
    pub surprise: Option<f64>,
}

/// The student's answers in each arm of weights test `id`: the
/// candidate's from its version, the control's from the incumbent's.
pub fn arm_answers(
    conn: &Conn,
    id: i64,
    test: &WeightsTest,
) -> crate::store::sql::Result<(Vec<Answered>, Vec<Answered>)> {
    let mut stmt = conn.prepare_cached(
        "SELECT a.arm, s.policy_version, s.sampled_len, s.stop_reason, s.logprobs
         FROM session_arms a
         JOIN turns t ON t.session_id = a.session_id
         JOIN turn_samples s ON s.turn_id = t.id
         WHERE a.experiment_id = ?1 AND s.withheld IS NULL",
    )?;
    let rows = stmt.query_map([id], |r| {
        Ok((
            r.get::<String>(0)?,
            r.get::<i64>(1)?,
            r.get::<i64>(2)?,
            r.get::<String>(3)?,
            r.get::<Vec<u8>>(4)?,
        ))
    })?;
    let (mut candidate, mut control) = (Vec::new(), Vec::new());
    for row in rows {
        let (arm, version, len, stop, logprobs) = row?;
        let logprobs: Vec<f64> = logprobs
            .chunks_exact(4)
            .map(|b| f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            .collect();
        let answered = Answered {
            tokens: len as f64,
            truncated: stop == "length",
            surprise: (!logprobs.is_empty())
                .then(|| -logprobs.iter().sum::<f64>() / logprobs.len() as f64),
        };
        match (arm.as_str(), version) {
            ("candidate", v) if v == test.candidate_version => candidate.push(answered),
            ("control", v) if v == test.incumbent_version => control.push(answered),
            _ => {}
        }
    }
    Ok((candidate, control))
}

/// Ends a test: `state` is `promoted`, `rolled_back` or `abandoned`. Only a
/// test still running is ended; returns whether this one was.
pub fn decide(
    conn: &Conn,
    id: i64,
    state: &str,
    by: &str,
    reason: &str,
    at_ms: i64,
) -> crate::store::sql::Result<bool> {
    let n = conn
        .prepare_cached(
            "UPDATE experiments SET state = ?2, decided_by = ?3, reason = ?4, decided_ms = ?5
             WHERE id = ?1 AND state = 'testing'",
        )?
        .execute(params![id, state, by, reason, at_ms])?;
    Ok(n == 1)
}

/// The experiments under test of a kind.
pub fn testing(conn: &Conn, kind: &str) -> crate::store::sql::Result<Vec<Experiment>> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM experiments WHERE state = 'testing' AND kind = ?1 ORDER BY id"
    ))?
    .query_map([kind], row)?
    .collect()
}

pub fn get(conn: &Conn, id: i64) -> crate::store::sql::Result<Option<Experiment>> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM experiments WHERE id = ?1"))?
        .query_row([id], row)
        .optional()
}

/// The newest experiments first.
pub fn list(conn: &Conn, limit: u32) -> crate::store::sql::Result<Vec<Experiment>> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM experiments ORDER BY id DESC LIMIT ?1"
    ))?
    .query_map([limit], row)?
    .collect()
}

/// [`list`], of `agent`'s own alone: the tests of skills in its layer
/// (`@AGENT/NAME`) and of its own run's weights.
pub fn list_of_agent(
    conn: &Conn,
    agent: &str,
    limit: u32,
) -> crate::store::sql::Result<Vec<Experiment>> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM experiments
         WHERE (kind = 'skill' AND substr(subject, 1, length(?2) + 2) = '@' || ?2 || '/')
            OR (kind = 'weights' AND subject IN (SELECT id FROM training_runs WHERE agent = ?2))
         ORDER BY id DESC LIMIT ?1"
    ))?
    .query_map(params![limit, agent], row)?
    .collect()
}

/// The agent whose run a weights experiment tests ('' the shared run's);
/// None for a skill's or an unknown experiment.
pub fn run_agent(conn: &Conn, id: i64) -> crate::store::sql::Result<Option<String>> {
    conn.prepare_cached(
        "SELECT r.agent FROM experiments e JOIN training_runs r ON r.id = e.subject
         WHERE e.id = ?1 AND e.kind = 'weights'",
    )?
    .query_row([id], |r| r.get(0))
    .optional()
}

/// Records the arms a main turn of `session` met (the first turn of a
/// session to meet an experiment fixes its arm; later ones agree, since
/// the arm is a function of the session).
pub fn record_arms(
    tx: &Conn,
    session: &str,
    arms: &[ArmRecord],
    at_ms: i64,
) -> crate::store::sql::Result<()> {
    let mut stmt = tx.prepare_cached(
        "INSERT OR IGNORE INTO session_arms (experiment_id, session_id, arm, at_ms)
         VALUES (?1, ?2, ?3, ?4)",
    )?;
    for a in arms {
        stmt.execute(params![a.experiment, session, a.arm, at_ms])?;
    }
    Ok(())
}

/// The turns' `arms` column: JSON, or NULL when the turn met none.
pub fn arms_column(arms: &[ArmRecord]) -> Option<String> {
    (!arms.is_empty())
        .then(|| serde_json::to_string(arms).ok())
        .flatten()
}

/// Each arm's session rewards, in the order the sessions met the
/// experiment: a session's reward is the mean final reward of its answered
/// main turns (judge, scorers and the user's feedback, as learning
/// combined them); sessions with none yet are left out.
pub fn arm_rewards(conn: &Conn, id: i64) -> crate::store::sql::Result<(Vec<f64>, Vec<f64>)> {
    let mut stmt = conn.prepare_cached(
        "SELECT a.arm, avg(t.reward) FROM session_arms a
         JOIN turns t ON t.session_id = a.session_id
         WHERE a.experiment_id = ?1 AND t.turn_type = 'main' AND t.status = 'ok'
           AND t.reward IS NOT NULL
         GROUP BY a.experiment_id, a.session_id ORDER BY a.at_ms, a.session_id",
    )?;
    let rows = stmt.query_map([id], |r| Ok((r.get::<String>(0)?, r.get::<f64>(1)?)))?;
    let (mut candidate, mut control) = (Vec::new(), Vec::new());
    for row in rows {
        let (arm, reward) = row?;
        match arm.as_str() {
            "candidate" => candidate.push(reward),
            _ => control.push(reward),
        }
    }
    Ok((candidate, control))
}

/// Sessions that met the experiment, per arm (judged or not).
pub fn arm_sessions(conn: &Conn, id: i64) -> crate::store::sql::Result<(i64, i64)> {
    conn.prepare_cached(
        "SELECT count(CASE WHEN arm = 'candidate' THEN 1 END), count(CASE WHEN arm = 'control' THEN 1 END)
         FROM session_arms WHERE experiment_id = ?1",
    )?
    .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Conn) {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = crate::store::open_rw(&dir.path().join("metaclaw.db")).unwrap();
        crate::store::schema::migrate(&mut conn).unwrap();
        (dir, Conn::from(conn))
    }

    /// A session `id` with main turns rewarded `rewards` (`None`: not yet).
    fn session(conn: &Conn, id: &str, rewards: &[Option<f64>]) {
        conn.execute(
            "INSERT INTO sessions (id, base_key, source, started_at_ms, last_activity_ms)
             VALUES (?1, ?1, 'header', 0, 0)",
            [id],
        )
        .unwrap();
        for (i, r) in rewards.iter().enumerate() {
            conn.execute(
                "INSERT INTO turns (id, session_id, seq, turn_type, api, stream, status,
                                    request_messages, request_params, started_at_ms,
                                    finished_at_ms, total_ms, reward)
                 VALUES (?1, ?2, ?3, 'main', 'chat', 0, 'ok', '[]', '{}', 0, 1, 1.0, ?4)",
                params![format!("{id}-{i}"), id, i as i64 + 1, r],
            )
            .unwrap();
        }
    }

    /// An agent's own canaries: its layer's skills and its run's weights;
    /// a weights test supersedes only one of the same agent's runs.
    #[test]
    fn an_agents_canaries_are_its_layers_skills_and_its_runs_weights() {
        let (_dir, conn) = store();
        conn.execute_batch(
            "INSERT INTO training_runs (id, service, base_model, lora_rank, created_ms, updated_ms, agent)
             VALUES ('run-a', 's', 'm', 4, 0, 0, 'a'), ('run-shared', 's', 'm', 4, 0, 0, '');",
        )
        .unwrap();
        for subject in ["tidy", "@a/tidy", "@ab/other"] {
            start_skill(&conn, subject, "1.0.0", 0.25, "evolved:s0", 1).unwrap();
        }
        let test = |run: &str| WeightsTest {
            run: run.into(),
            candidate_sampler: format!("{run}/2"),
            candidate_version: 2,
            candidate_state: String::new(),
            incumbent_sampler: format!("{run}/1"),
            incumbent_version: 1,
            incumbent_state: String::new(),
            trained_from: String::new(),
        };
        let a = start_weights(&conn, &test("run-a"), 0.25, "train step 2 of run-a", 2).unwrap();
        start_weights(&conn, &test("run-shared"), 0.25, "train step 2", 3).unwrap();
        let mine: Vec<(String, String, String)> = list_of_agent(&conn, "a", 10)
            .unwrap()
            .into_iter()
            .map(|e| (e.kind, e.subject, e.state))
            .collect();
        let row = |k: &str, s: &str| (k.to_string(), s.to_string(), "testing".to_string());
        assert_eq!(mine, [row("weights", "run-a"), row("skill", "@a/tidy")]);
        assert_eq!(get(&conn, a).unwrap().unwrap().state, "testing");
    }

    #[test]
    fn each_arm_gets_its_sessions_mean_rewards_in_the_order_they_met_it() {
        let (_dir, conn) = store();
        let id = start_skill(&conn, "tidy", "1.0.0", 0.25, "evolved:s0", 1).unwrap();
        session(&conn, "a", &[Some(1.0), Some(0.0)]);
        session(&conn, "b", &[Some(-1.0)]);
        session(&conn, "c", &[None]);
        session(&conn, "d", &[Some(1.0)]);
        let arm = |a| ArmRecord {
            experiment: id,
            arm: a,
        };
        record_arms(&conn, "d", &[arm("candidate")], 5).unwrap();
        record_arms(&conn, "a", &[arm("candidate")], 2).unwrap();
        record_arms(&conn, "b", &[arm("control")], 3).unwrap();
        record_arms(&conn, "c", &[arm("control")], 4).unwrap();
        // A later turn cannot move a session to the other arm.
        record_arms(&conn, "a", &[arm("control")], 6).unwrap();
        let (candidate, control) = arm_rewards(&conn, id).unwrap();
        assert_eq!(candidate, vec![0.5, 1.0]);
        assert_eq!(control, vec![-1.0]);
        assert_eq!(arm_sessions(&conn, id).unwrap(), (2, 2));
    }

    #[test]
    fn a_new_version_supersedes_the_test_of_the_old_and_a_decision_is_taken_once() {
        let (_dir, conn) = store();
        let old = start_skill(&conn, "tidy", "1.0.0", 0.25, "evolved:s0", 1).unwrap();
        let new = start_skill(&conn, "tidy", "1.1.0", 0.25, "evolved:s1", 2).unwrap();
        assert_eq!(
            start_skill(&conn, "tidy", "1.1.0", 0.25, "evolved:s1", 3).unwrap(),
            new,
            "the same version again is the same test"
        );
        assert_eq!(get(&conn, old).unwrap().unwrap().state, "superseded");
        let testing = testing(&conn, "skill").unwrap();
        assert_eq!(testing.len(), 1);
        assert_eq!(testing[0].version, "1.1.0");
        assert!(decide(&conn, new, "promoted", "test", "better", 3).unwrap());
        assert!(!decide(&conn, new, "rolled_back", "user", "no", 4).unwrap());
        let e = get(&conn, new).unwrap().unwrap();
        assert_eq!(
            (e.state.as_str(), e.decided_by.as_deref()),
            ("promoted", Some("test"))
        );
        assert_eq!(list(&conn, 10).unwrap().len(), 2);
    }
}
