//! Learning jobs in the store: one per ended session, enqueued in the same
//! transaction that ends the session, claimed by one worker at a time,
//! retried with backoff, and made of stages that each commit exactly once.
//!
//! Exactly once: a stage writes its results and its `learning_stages` row
//! in one transaction. A job that dies half-way (a crash, a kill) is found
//! `running` at the next start — one metaclaw per home, so nobody else can
//! be running it — and goes back to the queue; it then skips the stages
//! that have rows.

use crate::store::sql::{Backend, Behavior, Conn, Optional, params};
use anyhow::Result;
use serde::{Deserialize, Serialize};

/// Text in a column of a [`text_enum!`] that is none of its values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not one of {}", .allowed.join(", "))]
pub struct UnknownText {
    pub text: String,
    pub allowed: &'static [&'static str],
}

/// A fieldless enum kept in a text column. `as_str` and `FromStr` are the
/// column's strings (those of databases written before the enum existed:
/// they must not change); serde and the store's SQL go through them, so the JSON
/// of `learn status` and `sessions show` is the same text too.
macro_rules! text_enum {
    ($(#[$meta:meta])* pub enum $name:ident {
        $($(#[$vmeta:meta])* $variant:ident = $text:literal,)+
    }) => {
        $(#[$meta])*
        // Ordered as declared.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            pub const ALL: [Self; [$($text),+].len()] = [$(Self::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text,)+
                }
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::store::jobs::UnknownText;
            fn from_str(text: &str) -> Result<Self, $crate::store::jobs::UnknownText> {
                match text {
                    $($text => Ok(Self::$variant),)+
                    other => Err($crate::store::jobs::UnknownText {
                        text: other.to_string(),
                        allowed: &[$($text),+],
                    }),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                // `pad`: column widths in tables apply.
                f.pad(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }

        impl $crate::store::sql::ToArg for $name {
            fn to_arg(&self) -> $crate::store::sql::Result<$crate::store::sql::Arg<'_>> {
                Ok($crate::store::sql::Arg::Text(std::borrow::Cow::Borrowed(self.as_str())))
            }
        }

        impl $crate::store::sql::FromCell for $name {
            fn from_cell(
                cell: &$crate::store::sql::Cell,
            ) -> Result<Self, $crate::store::sql::Mismatch> {
                String::from_cell(cell)?.parse().map_err(
                    |e: $crate::store::jobs::UnknownText| $crate::store::sql::Mismatch(e.to_string()),
                )
            }
        }
    };
}
pub(crate) use text_enum;

text_enum! {
    /// A stage of a learning job, in the order they run (`learn::stages`).
    pub enum Stage {
        /// Scorer plugins on the turns not scored yet.
        Score = "score",
        /// The judge on every main turn, then one reward per turn.
        Judge = "judge",
        /// The evolver model's drafts through the evolver plugins.
        Evolve = "evolve",
        /// Kept drafts written to the skills folder.
        Publish = "publish",
    }
}

text_enum! {
    /// Where a learning job is.
    pub enum JobState {
        /// Waiting to be claimed (`not_before_ms`: a retry's backoff).
        Queued = "queued",
        Running = "running",
        Done = "done",
        /// Out of attempts, until `learn now` retries it.
        Failed = "failed",
    }
}

/// Attempts before a job is left `failed` (until `learn now` retries it).
pub const MAX_ATTEMPTS: i64 = 5;
/// The wait after the first failure; it doubles with each attempt.
const BACKOFF_FIRST_MS: i64 = 30_000;
const BACKOFF_MAX_MS: i64 = 3_600_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub session_id: String,
    pub state: JobState,
    /// 1, then one more each time the session reopens and ends again.
    pub round: i64,
    pub attempts: i64,
    /// Queued: not to be started before this.
    pub not_before_ms: i64,
    pub enqueued_ms: i64,
    pub started_ms: Option<i64>,
    pub finished_ms: Option<i64>,
    pub error: Option<String>,
    /// The instance running it (or that last ran it).
    pub claimed_by: Option<String>,
    /// Stages done, in the order they were.
    pub stages: Vec<Stage>,
}

impl Job {
    /// Its error while it has not succeeded, else the stages it has done.
    pub fn detail(&self) -> String {
        match &self.error {
            Some(e) if self.state != JobState::Done => format!("error: {e}"),
            _ => self
                .stages
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" → "),
        }
    }
}

/// The end reason of a session held out of learning (a benchmark's
/// held-out day): it gets no job.
pub const HELD_OUT: &str = "held_out";

/// Queues the session's job (in the caller's transaction). A queued job
/// stays as it is (it reads the transcript when it runs); a finished one
/// starts its next round (the session was reopened and ended again); a
/// running one is marked to run again when it ends.
pub fn enqueue(conn: &Conn, session_id: &str, at_ms: i64) -> crate::store::sql::Result<()> {
    conn.prepare_cached(
        "INSERT INTO learning_jobs (session_id, state, not_before_ms, enqueued_ms)
         VALUES (?1, 'queued', ?2, ?2)
         ON CONFLICT(session_id) DO UPDATE SET
             again = CASE WHEN learning_jobs.state = 'running' THEN 1 ELSE learning_jobs.again END,
             round = CASE WHEN learning_jobs.state IN ('done', 'failed') THEN learning_jobs.round + 1 ELSE learning_jobs.round END,
             attempts = CASE WHEN learning_jobs.state IN ('done', 'failed') THEN 0 ELSE learning_jobs.attempts END,
             enqueued_ms = CASE WHEN learning_jobs.state IN ('done', 'failed') THEN ?2 ELSE learning_jobs.enqueued_ms END,
             not_before_ms = CASE WHEN learning_jobs.state IN ('done', 'failed') THEN ?2 ELSE learning_jobs.not_before_ms END,
             state = CASE WHEN learning_jobs.state IN ('done', 'failed') THEN 'queued' ELSE learning_jobs.state END",
    )?
    .execute(params![session_id, at_ms])?;
    Ok(())
}

/// At start on a store of its own (SQLite's file, one process at a time):
/// jobs left `running` by a process that is gone go back to the queue.
/// Returns how many.
pub fn recover(conn: &Conn, now_ms: i64) -> Result<usize> {
    Ok(conn.execute(
        "UPDATE learning_jobs SET state = 'queued', not_before_ms = ?1, claimed_by = NULL
         WHERE state = 'running'",
        [now_ms],
    )?)
}

/// On a shared store: jobs `running` on an instance that stopped beating
/// for `ttl_ms` (database time; see `store::instances`) go back to the
/// queue. The stages it committed stay done: whoever claims the job next
/// resumes after them. Returns how many.
pub fn recover_from_gone(conn: &Conn, ttl_ms: i64) -> Result<usize> {
    let now = super::instances::db_now_ms(conn)?;
    Ok(conn.execute(
        "UPDATE learning_jobs SET state = 'queued', not_before_ms = ?1, claimed_by = NULL
         WHERE state = 'running'
           AND (claimed_by IS NULL OR claimed_by NOT IN (
                SELECT id FROM instances WHERE stopped_ms IS NULL AND heartbeat_ms >= ?2))",
        params![now, now - ttl_ms],
    )?)
}

/// Instance `by` takes the next job that is due (or `only` that
/// session's, if queued or failed: `learn now`), marking it running as
/// its own. On Postgres the row is locked with `SKIP LOCKED`: instances
/// claiming at once each get another job, none waits for another's, and
/// no job is claimed twice.
pub fn claim(conn: &mut Conn, now_ms: i64, only: Option<&str>, by: &str) -> Result<Option<Job>> {
    let tx = conn.transaction_with_behavior(Behavior::Immediate)?;
    let lock = match tx.backend() {
        Backend::Postgres => " FOR UPDATE SKIP LOCKED",
        // A write transaction (IMMEDIATE) has the file to itself.
        Backend::Sqlite => "",
    };
    let id: Option<String> = match only {
        Some(id) => tx
            .query_row(
                &format!(
                    "SELECT session_id FROM learning_jobs
                     WHERE session_id = ?1 AND state IN ('queued', 'failed'){lock}"
                ),
                [id],
                |r| r.get(0),
            )
            .optional()?,
        None => tx
            .query_row(
                &format!(
                    "SELECT session_id FROM learning_jobs
                     WHERE state = 'queued' AND not_before_ms <= ?1
                     ORDER BY not_before_ms, enqueued_ms LIMIT 1{lock}"
                ),
                [now_ms],
                |r| r.get(0),
            )
            .optional()?,
    };
    let Some(id) = id else {
        return Ok(None);
    };
    tx.execute(
        "UPDATE learning_jobs SET state = 'running', attempts = attempts + 1,
                started_ms = ?2, error = NULL, claimed_by = ?3
         WHERE session_id = ?1",
        params![id, now_ms, by],
    )?;
    let job = read(&tx, &id)?;
    tx.commit()?;
    Ok(job)
}

/// `learn now SESSION`: makes the session's job due now (a new job, a
/// queued one brought forward, a failed one retried from where it
/// stopped, or a done one's next round). A running job is left alone: the
/// caller waits for it (the runner may claim it between a caller's check
/// and this call).
pub fn request_now(conn: &Conn, session_id: &str, now_ms: i64) -> Result<()> {
    let state: Option<JobState> = conn
        .query_row(
            "SELECT state FROM learning_jobs WHERE session_id = ?1",
            [session_id],
            |r| r.get(0),
        )
        .optional()?;
    match state {
        None => {
            let known: bool = conn.query_row(
                "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1)",
                [session_id],
                |r| r.get(0),
            )?;
            if !known {
                anyhow::bail!("no session {session_id:?} (see `metaclaw sessions list`)");
            }
            let held_out: bool = conn.query_row(
                "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1 AND end_reason = ?2)",
                params![session_id, HELD_OUT],
                |r| r.get(0),
            )?;
            if held_out {
                anyhow::bail!(
                    "session {session_id:?} was held out of learning (a benchmark's held-out day): it is scored, never learned from"
                );
            }
            enqueue(conn, session_id, now_ms)?;
        }
        Some(JobState::Running) => {}
        Some(JobState::Done) => enqueue(conn, session_id, now_ms)?,
        Some(_) => {
            conn.execute(
                "UPDATE learning_jobs SET state = 'queued', attempts = 0, not_before_ms = ?2
                 WHERE session_id = ?1",
                params![session_id, now_ms],
            )?;
        }
    }
    Ok(())
}

/// `learn now`: every queued or failed job (of `agent`'s sessions, with
/// one) is due now. Returns their ids.
pub fn all_due_now(conn: &Conn, now_ms: i64, agent: Option<&str>) -> Result<Vec<String>> {
    let mut stmt = conn.prepare(
        "UPDATE learning_jobs SET state = 'queued', attempts = CASE WHEN state = 'failed' THEN 0 ELSE attempts END,
                not_before_ms = ?1
         WHERE state IN ('queued', 'failed')
           AND (CAST(?2 AS TEXT) IS NULL OR session_id IN (SELECT id FROM sessions WHERE agent_id = ?2))
         RETURNING session_id",
    )?;
    let ids = stmt.query_map(params![now_ms, agent], |r| r.get(0))?;
    Ok(ids.collect::<crate::store::sql::Result<_>>()?)
}

/// Records that `stage` of the job's round is done, in the transaction that
/// wrote the stage's results.
pub fn stage_done(
    conn: &Conn,
    job: &Job,
    stage: Stage,
    summary: &str,
    at_ms: i64,
) -> crate::store::sql::Result<()> {
    still_ours(conn, job)?;
    conn.prepare_cached(
        "INSERT INTO learning_stages (session_id, round, stage, done_ms, summary)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![job.session_id, job.round, stage, at_ms, summary])?;
    Ok(())
}

/// The fence of a job's commits: in the caller's transaction, the job is
/// still running as this claim's, its row locked until the commit (on
/// Postgres: another instance taking it back waits for this commit, then
/// resumes after the stage it holds). A job taken back meanwhile (its
/// instance was silent past the heartbeat TTL) is not written to.
fn still_ours(conn: &Conn, job: &Job) -> crate::store::sql::Result<()> {
    let n = conn
        .prepare_cached(
            "UPDATE learning_jobs SET claimed_by = claimed_by
             WHERE session_id = ?1 AND round = ?2 AND state = 'running' AND claimed_by = ?3",
        )?
        .execute(params![job.session_id, job.round, job.claimed_by])?;
    match n {
        0 => Err(crate::store::sql::Error::Fenced(format!(
            "the learning job of session {} is no longer this instance's (another took it back)",
            job.session_id
        ))),
        _ => Ok(()),
    }
}

/// The job ended: done, or failed and queued again after a backoff (or left
/// `failed` after `MAX_ATTEMPTS`).
pub fn finish(conn: &Conn, job: &Job, outcome: Result<(), String>, now_ms: i64) -> Result<()> {
    let tx = conn.unchecked_transaction()?;
    let conn = &*tx;
    still_ours(conn, job)?;
    let session_id = job.session_id.as_str();
    match outcome {
        Ok(()) => {
            // Ended again while this round ran: the next round is due now.
            conn.execute(
                "UPDATE learning_jobs SET
                     state = CASE WHEN again = 1 THEN 'queued' ELSE 'done' END,
                     round = round + again, attempts = CASE WHEN again = 1 THEN 0 ELSE attempts END,
                     not_before_ms = ?2, again = 0, finished_ms = ?2, error = NULL
                 WHERE session_id = ?1",
                params![session_id, now_ms],
            )?;
        }
        Err(error) => {
            let attempts: i64 = conn.query_row(
                "SELECT attempts FROM learning_jobs WHERE session_id = ?1",
                [session_id],
                |r| r.get(0),
            )?;
            let (state, not_before) = if attempts >= MAX_ATTEMPTS {
                (JobState::Failed, now_ms)
            } else {
                (JobState::Queued, now_ms + backoff_ms(attempts))
            };
            conn.execute(
                "UPDATE learning_jobs SET state = ?2, not_before_ms = ?3, finished_ms = ?4, error = ?5
                 WHERE session_id = ?1",
                params![session_id, state, not_before, now_ms, error],
            )?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// How long a job waits before it looks again at what blocked it.
pub const BLOCKED_RECHECK_MS: i64 = 60_000;

/// The job could not go on for a reason outside it (no `guard` evolver is
/// loaded): it waits, queued, without using up an attempt, and says why.
pub fn wait_blocked(conn: &Conn, job: &Job, why: &str, now_ms: i64) -> Result<()> {
    let tx = conn.unchecked_transaction()?;
    let conn = &*tx;
    still_ours(conn, job)?;
    let session_id = job.session_id.as_str();
    conn.execute(
        "UPDATE learning_jobs SET state = 'queued', attempts = MAX(attempts - 1, 0),
             not_before_ms = ?2, finished_ms = ?3, error = ?4
         WHERE session_id = ?1",
        params![
            session_id,
            now_ms + BLOCKED_RECHECK_MS,
            now_ms,
            format!("waiting: {why}")
        ],
    )?;
    tx.commit()?;
    Ok(())
}

/// The wait before attempt `attempts + 1`.
fn backoff_ms(attempts: i64) -> i64 {
    let doublings = (attempts - 1).clamp(0, 20) as u32;
    (BACKOFF_FIRST_MS << doublings).min(BACKOFF_MAX_MS)
}

fn read(conn: &Conn, session_id: &str) -> Result<Option<Job>> {
    let job = conn
        .query_row(
            "SELECT session_id, state, round, attempts, not_before_ms, enqueued_ms, started_ms,
                    finished_ms, error, claimed_by
             FROM learning_jobs WHERE session_id = ?1",
            [session_id],
            row_to_job,
        )
        .optional()?;
    let Some(mut job) = job else { return Ok(None) };
    job.stages = stages(conn, session_id, job.round)?;
    Ok(Some(job))
}

/// The session's job, if it has one.
pub fn get(conn: &Conn, session_id: &str) -> Result<Option<Job>> {
    read(conn, session_id)
}

/// The stages a round of the session's job has done, in the order they
/// were (stages done within the same millisecond: in their order).
pub fn stages(conn: &Conn, session_id: &str, round: i64) -> Result<Vec<Stage>> {
    Ok(stages_done(conn, session_id, round)?
        .into_iter()
        .map(|s| s.stage)
        .collect())
}

/// A stage of a job's round, done.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageDone {
    pub stage: Stage,
    pub done_ms: i64,
    /// What it did, in short (`3 turns judged`).
    pub summary: Option<String>,
}

/// The stages a job's round has done, in the order they were done.
pub fn stages_done(conn: &Conn, session_id: &str, round: i64) -> Result<Vec<StageDone>> {
    let mut stmt = conn.prepare_cached(
        "SELECT done_ms, stage, summary FROM learning_stages WHERE session_id = ?1 AND round = ?2",
    )?;
    let rows = stmt.query_map(params![session_id, round], |r| {
        Ok(StageDone {
            done_ms: r.get(0)?,
            stage: r.get(1)?,
            summary: r.get(2)?,
        })
    })?;
    let mut done = rows.collect::<crate::store::sql::Result<Vec<_>>>()?;
    done.sort_by_key(|s| (s.done_ms, s.stage));
    Ok(done)
}

/// When the next queued job is due, if any.
pub fn next_due(conn: &Conn) -> Result<Option<i64>> {
    Ok(conn.query_row(
        "SELECT min(not_before_ms) FROM learning_jobs WHERE state = 'queued'",
        (),
        |r| r.get(0),
    )?)
}

fn row_to_job(r: &crate::store::sql::Row) -> crate::store::sql::Result<Job> {
    Ok(Job {
        session_id: r.get(0)?,
        state: r.get(1)?,
        round: r.get(2)?,
        attempts: r.get(3)?,
        not_before_ms: r.get(4)?,
        enqueued_ms: r.get(5)?,
        started_ms: r.get(6)?,
        finished_ms: r.get(7)?,
        error: r.get(8)?,
        claimed_by: r.get(9)?,
        stages: Vec::new(),
    })
}

/// Jobs, newest first (`learn status`).
pub fn list(conn: &Conn, limit: usize) -> Result<Vec<Job>> {
    list_of(conn, None, None, limit)
}

/// How many jobs the store holds in each state, all of them (not only a
/// listed page), or those of `agent`'s sessions: `learn status`'s summary.
pub fn counts(
    conn: &Conn,
    agent: Option<&str>,
) -> Result<std::collections::BTreeMap<JobState, u64>> {
    let mut stmt = conn.prepare(
        "SELECT state, count(*) FROM learning_jobs
         WHERE CAST(?1 AS TEXT) IS NULL OR session_id IN (SELECT id FROM sessions WHERE agent_id = ?1)
         GROUP BY state",
    )?;
    let rows = stmt.query_map(params![agent], |r| {
        Ok((r.get::<JobState>(0)?, r.get::<i64>(1)? as u64))
    })?;
    Ok(rows.collect::<crate::store::sql::Result<_>>()?)
}

/// Jobs in `state` (any, with `None`), newest first (the dashboard's
/// learning page).
pub fn list_in(conn: &Conn, state: Option<JobState>, limit: usize) -> Result<Vec<Job>> {
    list_of(conn, state, None, limit)
}

/// [`list_in`], of `agent`'s sessions alone (all, with `None`).
pub fn list_of(
    conn: &Conn,
    state: Option<JobState>,
    agent: Option<&str>,
    limit: usize,
) -> Result<Vec<Job>> {
    let mut stmt = conn.prepare(
        "SELECT session_id, state, round, attempts, not_before_ms, enqueued_ms, started_ms,
                finished_ms, error, claimed_by
         FROM learning_jobs WHERE (CAST(?1 AS TEXT) IS NULL OR state = ?1)
           AND (CAST(?3 AS TEXT) IS NULL OR session_id IN (SELECT id FROM sessions WHERE agent_id = ?3))
         ORDER BY enqueued_ms DESC LIMIT ?2",
    )?;
    let mut jobs: Vec<Job> = stmt
        .query_map(params![state, limit as i64, agent], row_to_job)?
        .collect::<crate::store::sql::Result<_>>()?;
    for job in &mut jobs {
        job.stages = stages(conn, &job.session_id, job.round)?;
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::instances;

    /// The instance claiming in these tests.
    const ME: &str = "me";

    fn db() -> (tempfile::TempDir, Conn) {
        let tmp = tempfile::tempdir().unwrap();
        let conn = crate::store::test_db(tmp.path().join("metaclaw.db"))
            .side_writer()
            .unwrap();
        (tmp, conn)
    }

    fn session(conn: &Conn, id: &str) {
        conn.execute(
            "INSERT INTO sessions (id, base_key, source, started_at_ms, last_activity_ms)
             VALUES (?1, ?1, 'header', 0, 0)",
            [id],
        )
        .unwrap();
    }

    #[test]
    fn stages_and_outcomes_keep_the_text_databases_hold() {
        use crate::store::learning::DraftOutcome;
        // Written by versions before the enums: these strings must not change.
        assert_eq!(
            Stage::ALL.map(Stage::as_str),
            ["score", "judge", "evolve", "publish"]
        );
        assert_eq!(
            JobState::ALL.map(JobState::as_str),
            ["queued", "running", "done", "failed"]
        );
        assert_eq!(
            DraftOutcome::ALL.map(DraftOutcome::as_str),
            ["created", "updated", "rejected", "pending-review"]
        );
        for stage in Stage::ALL {
            assert_eq!(stage.as_str().parse(), Ok(stage));
            assert_eq!(serde_json::to_value(stage).unwrap(), stage.as_str());
        }
        for outcome in DraftOutcome::ALL {
            assert_eq!(outcome.as_str().parse(), Ok(outcome));
            assert_eq!(
                format!("{outcome:<16}|"),
                format!("{:<16}|", outcome.as_str())
            );
        }
        let job: Job = serde_json::from_value(serde_json::json!({
            "session_id": "s", "state": "done", "round": 1, "attempts": 1,
            "not_before_ms": 0, "enqueued_ms": 0, "started_ms": null,
            "finished_ms": null, "error": null, "stages": ["score", "judge"]
        }))
        .unwrap();
        assert_eq!(job.stages, [Stage::Score, Stage::Judge]);

        // A stage this version does not know (a newer one wrote it) is an
        // error that names it, not a panic.
        let (_tmp, conn) = db();
        session(&conn, "s");
        enqueue(&conn, "s", 0).unwrap();
        conn.execute(
            "INSERT INTO learning_stages (session_id, round, stage, done_ms, summary)
             VALUES ('s', 1, 'distill', 1, '')",
            (),
        )
        .unwrap();
        let e = format!("{:#}", get(&conn, "s").unwrap_err());
        assert!(
            e.contains("\"distill\" is not one of score, judge, evolve, publish"),
            "{e}"
        );
    }

    #[test]
    fn jobs_run_in_order_and_once_per_session() {
        let (_tmp, mut conn) = db();
        for (id, at) in [("b", 20), ("a", 10)] {
            session(&conn, id);
            enqueue(&conn, id, at).unwrap();
        }
        enqueue(&conn, "a", 30).unwrap(); // ended again: still one job
        assert_eq!(list(&conn, 10).unwrap().len(), 2);
        assert_eq!(counts(&conn, None).unwrap(), [(JobState::Queued, 2)].into());
        assert!(
            claim(&mut conn, 5, None, ME).unwrap().is_none(),
            "none due yet"
        );
        let first = claim(&mut conn, 100, None, ME).unwrap().unwrap();
        assert_eq!((first.session_id.as_str(), first.attempts), ("a", 1));
        assert_eq!(first.state, JobState::Running);
        let second = claim(&mut conn, 100, None, ME).unwrap().unwrap();
        assert_eq!(second.session_id, "b");
        assert!(claim(&mut conn, 100, None, ME).unwrap().is_none());
        finish(&conn, &first, Ok(()), 120).unwrap();
        let a = read(&conn, "a").unwrap().unwrap();
        assert_eq!((a.state, a.finished_ms), (JobState::Done, Some(120)));
        // Counted over the whole store, whatever a page lists.
        assert_eq!(list(&conn, 1).unwrap().len(), 1);
        assert_eq!(
            counts(&conn, None).unwrap(),
            [(JobState::Running, 1), (JobState::Done, 1)].into()
        );
        // One agent's (`learn status --agent`): b's session is agent w's.
        conn.execute("UPDATE sessions SET agent_id = 'w' WHERE id = 'b'", ())
            .unwrap();
        let of_w = list_of(&conn, None, Some("w"), 10).unwrap();
        assert_eq!(
            of_w.iter()
                .map(|j| j.session_id.as_str())
                .collect::<Vec<_>>(),
            ["b"]
        );
        assert_eq!(
            counts(&conn, Some("w")).unwrap(),
            [(JobState::Running, 1)].into()
        );
        assert!(
            list_of(&conn, Some(JobState::Done), Some("w"), 10)
                .unwrap()
                .is_empty()
        );
        // `learn now --agent`: that agent's failed or queued jobs alone.
        session(&conn, "c");
        enqueue(&conn, "c", 200).unwrap();
        finish(&conn, &second, Err("judge down".into()), 130).unwrap();
        assert_eq!(all_due_now(&conn, 140, Some("w")).unwrap(), ["b"]);
        assert_eq!(read(&conn, "c").unwrap().unwrap().not_before_ms, 200);
    }

    #[test]
    fn failures_back_off_then_stay_failed_until_asked() {
        let (_tmp, mut conn) = db();
        session(&conn, "s");
        enqueue(&conn, "s", 0).unwrap();
        let mut now = 0;
        for attempt in 1..=MAX_ATTEMPTS {
            let job = claim(&mut conn, now, None, ME).unwrap().unwrap();
            assert_eq!(job.attempts, attempt);
            finish(&conn, &job, Err("judge: 429".into()), now).unwrap();
            let job = read(&conn, "s").unwrap().unwrap();
            assert_eq!(job.error.as_deref(), Some("judge: 429"));
            if attempt < MAX_ATTEMPTS {
                assert_eq!(job.state, JobState::Queued);
                assert_eq!(job.not_before_ms - now, backoff_ms(attempt));
                assert!(claim(&mut conn, now + 1, None, ME).unwrap().is_none());
                now = job.not_before_ms;
            } else {
                assert_eq!(job.state, JobState::Failed);
            }
        }
        assert_eq!(backoff_ms(1), 30_000);
        assert_eq!(backoff_ms(2), 60_000);
        assert_eq!(backoff_ms(30), BACKOFF_MAX_MS);
        assert!(
            claim(&mut conn, now + BACKOFF_MAX_MS, None, ME)
                .unwrap()
                .is_none()
        );
        // `learn now` takes a failed job.
        let job = claim(&mut conn, now, Some("s"), ME).unwrap().unwrap();
        assert_eq!(job.state, JobState::Running);
    }

    #[test]
    fn a_job_cut_short_resumes_after_its_last_committed_stage() {
        let (_tmp, mut conn) = db();
        session(&conn, "s");
        enqueue(&conn, "s", 0).unwrap();
        let job = claim(&mut conn, 1, None, ME).unwrap().unwrap();
        // The judge stage committed; the process died during evolution.
        {
            let tx = conn.transaction().unwrap();
            stage_done(&tx, &job, Stage::Judge, "3 turns judged", 2).unwrap();
            tx.commit().unwrap();
        }
        {
            let tx = conn.transaction().unwrap();
            stage_done(&tx, &job, Stage::Evolve, "1 skill", 3).unwrap();
            // dropped: rolled back, as a kill would
        }
        // Next start.
        assert_eq!(recover(&conn, 10).unwrap(), 1);
        let job = claim(&mut conn, 10, None, ME).unwrap().unwrap();
        assert_eq!(job.attempts, 2);
        assert_eq!(job.stages, vec![Stage::Judge]);
        // A stage cannot be recorded twice.
        assert!(stage_done(&conn, &job, Stage::Judge, "again", 11).is_err());
    }

    #[test]
    fn a_session_that_ends_again_is_learned_from_again() {
        let (_tmp, mut conn) = db();
        session(&conn, "s");
        enqueue(&conn, "s", 0).unwrap();
        let job = claim(&mut conn, 1, None, ME).unwrap().unwrap();
        stage_done(&conn, &job, Stage::Judge, "", 2).unwrap();
        // Reopened and ended while the job runs: a second round follows.
        enqueue(&conn, "s", 3).unwrap();
        finish(&conn, &job, Ok(()), 4).unwrap();
        let next = claim(&mut conn, 4, None, ME).unwrap().unwrap();
        assert_eq!((next.round, next.attempts), (2, 1));
        assert!(
            next.stages.is_empty(),
            "a new round starts with no stage done"
        );
        stage_done(&conn, &next, Stage::Judge, "", 5).unwrap();
        finish(&conn, &next, Ok(()), 6).unwrap();
        assert_eq!(read(&conn, "s").unwrap().unwrap().state, JobState::Done);
        // Ended again after it finished: round 3.
        enqueue(&conn, "s", 7).unwrap();
        let third = read(&conn, "s").unwrap().unwrap();
        assert_eq!((third.state, third.round), (JobState::Queued, 3));
        assert_eq!(next_due(&conn).unwrap(), Some(7));
    }

    use instances::test_instance as instance;

    #[test]
    fn a_job_taken_back_from_a_silent_instance_is_written_by_its_new_owner_alone() {
        let (_tmp, mut conn) = db();
        for id in ["s", "t"] {
            session(&conn, id);
            enqueue(&conn, id, 0).unwrap();
        }
        instances::register(&conn, &instance("a"), 0).unwrap();
        instances::register(&conn, &instance("b"), 0).unwrap();
        let of_a = claim(&mut conn, 1, Some("s"), "a").unwrap().unwrap();
        let of_b = claim(&mut conn, 1, Some("t"), "b").unwrap().unwrap();
        assert_eq!(of_a.claimed_by.as_deref(), Some("a"));
        stage_done(&conn, &of_a, Stage::Judge, "", 2).unwrap();
        // Both beat: nothing is taken back.
        assert_eq!(recover_from_gone(&conn, 60_000).unwrap(), 0);
        // a falls silent (b beats): a's job alone goes back to the queue.
        conn.execute("UPDATE instances SET heartbeat_ms = 0 WHERE id = 'a'", ())
            .unwrap();
        assert_eq!(recover_from_gone(&conn, 60_000).unwrap(), 1);
        assert_eq!(read(&conn, "t").unwrap().unwrap().state, JobState::Running);
        // Taken back now (database time): due at once.
        let again = claim(&mut conn, i64::MAX / 2, None, "b").unwrap().unwrap();
        assert_eq!(again.session_id, "s");
        assert_eq!(again.stages, [Stage::Judge], "resumes after a's stage");
        // a wakes up: none of its writes lands.
        let fenced = stage_done(&conn, &of_a, Stage::Evolve, "", 4);
        assert!(
            matches!(fenced, Err(crate::store::sql::Error::Fenced(_))),
            "{fenced:?}"
        );
        assert!(finish(&conn, &of_a, Ok(()), 4).is_err());
        assert_eq!(read(&conn, "s").unwrap().unwrap().state, JobState::Running);
        stage_done(&conn, &again, Stage::Evolve, "", 5).unwrap();
        finish(&conn, &again, Ok(()), 6).unwrap();
        finish(&conn, &of_b, Ok(()), 6).unwrap();
        let s = read(&conn, "s").unwrap().unwrap();
        assert_eq!(s.state, JobState::Done);
        assert_eq!(s.stages, [Stage::Judge, Stage::Evolve], "each stage once");
    }

    /// Instances claiming at once on Postgres each get a job of their own:
    /// every job is claimed exactly once.
    #[test]
    fn concurrent_claims_take_each_job_once() {
        let tmp = tempfile::tempdir().unwrap();
        let db = crate::store::test_db(tmp.path().join("metaclaw.db"));
        let conn = db.side_writer().unwrap();
        const JOBS: usize = 40;
        for i in 0..JOBS {
            let id = format!("s{i}");
            session(&conn, &id);
            enqueue(&conn, &id, i as i64).unwrap();
        }
        drop(conn);
        let claimed: Vec<String> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..4)
                .map(|w| {
                    let db = db.clone();
                    scope.spawn(move || {
                        let mut conn = db.side_writer().unwrap();
                        conn.busy_timeout(std::time::Duration::from_secs(10))
                            .unwrap();
                        let mut mine = Vec::new();
                        while let Some(job) =
                            claim(&mut conn, 1_000, None, &format!("w{w}")).unwrap()
                        {
                            mine.push(job.session_id);
                        }
                        mine
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap())
                .collect()
        });
        let unique: std::collections::BTreeSet<_> = claimed.iter().collect();
        assert_eq!(claimed.len(), JOBS, "{claimed:?}");
        assert_eq!(unique.len(), JOBS, "a job claimed twice: {claimed:?}");
    }
}
