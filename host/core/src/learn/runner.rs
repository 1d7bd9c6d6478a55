//! The learning job runner: the queue of jobs, one per ended session, run
//! on its own low-priority thread so the proxy never waits for it.
//!
//! It claims due jobs (`learning.concurrency` at a time), runs each job's
//! stages in order ([`super::stages`]: score → judge → evolve → publish),
//! skipping those an earlier attempt committed, commits each stage's output
//! with the stage's row, and finishes the job: done, or queued again after
//! a backoff (`store::jobs`). `learn now` runs a session's job at once.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::sync::{Semaphore, broadcast, mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::judge::Judge;
use super::llm::ChatModel;
use super::stages::{self, Blocked, LearnerConn, Output, Parts, Stage, blocking};
use crate::clock::now_ms;
use crate::config::schema::LearningConfig;
use crate::plugins::PluginHost;
use crate::redact::Redactor;
use crate::sessions::SessionEnded;
use crate::skills::Skills;
use crate::store::Store;
use crate::store::jobs::{self, Job, JobState};
use crate::team::{HEARTBEAT, TTL, Team};

/// Runs the learning jobs.
pub struct Learner {
    parts: Parts,
    /// This instance: the owner of the jobs it claims.
    team: Team,
}

enum Command {
    Now {
        session: Option<String>,
        /// Without a session: only this agent's due jobs.
        agent: Option<crate::agent_id::AgentId>,
        reply: oneshot::Sender<Result<Vec<Job>, LearnError>>,
    },
}

/// Why `learn now` could not run.
#[derive(Debug, thiserror::Error)]
pub enum LearnError {
    #[error("no session {0:?} (see `metaclaw sessions list`)")]
    NoSession(String),
    #[error("{0}")]
    Failed(String),
}

/// Talks to the runner thread (`learn now`).
#[derive(Clone)]
pub struct LearnHandle {
    tx: mpsc::UnboundedSender<Command>,
}

impl LearnHandle {
    /// Runs the session's job (or every queued and failed job) now and
    /// returns the job(s) as they ended.
    pub async fn now(&self, session: Option<String>) -> Result<Vec<Job>, LearnError> {
        self.now_in(session, None).await
    }

    /// [`Self::now`] without a session, of `agent`'s sessions alone.
    pub async fn now_of_agent(
        &self,
        agent: crate::agent_id::AgentId,
    ) -> Result<Vec<Job>, LearnError> {
        self.now_in(None, Some(agent)).await
    }

    async fn now_in(
        &self,
        session: Option<String>,
        agent: Option<crate::agent_id::AgentId>,
    ) -> Result<Vec<Job>, LearnError> {
        let stopped = || LearnError::Failed("the learning runner has stopped".into());
        let (reply, wait) = oneshot::channel();
        self.tx
            .send(Command::Now {
                session,
                agent,
                reply,
            })
            .map_err(|_| stopped())?;
        wait.await.map_err(|_| stopped())?
    }
}

impl Learner {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Store,
        plugins: Option<Arc<PluginHost>>,
        skills: Option<Arc<Skills>>,
        judge: Option<Judge>,
        evolver: Option<ChatModel>,
        redactor: Arc<Redactor>,
        settings: LearningConfig,
        auto_evolve: bool,
    ) -> Self {
        let db = LearnerConn::new(store.db().clone());
        Self {
            parts: Parts {
                store,
                db,
                plugins,
                skills,
                judge,
                evolver,
                redactor,
                settings,
                auto_evolve,
            },
            team: Team::solo(),
        }
    }

    /// Runs as `team`'s instance (a shared store: its claims are its own,
    /// and jobs queued by other instances are looked for every heartbeat).
    pub fn in_team(mut self, team: Team) -> Self {
        self.team = team;
        self
    }

    /// Starts the runner on its own thread (nice 10, a single-threaded
    /// runtime): jobs compete with neither the proxy's threads nor its
    /// runtime.
    pub fn spawn(
        self,
        ended: broadcast::Receiver<SessionEnded>,
        cancel: CancellationToken,
    ) -> Result<(LearnHandle, std::thread::JoinHandle<()>)> {
        let (tx, rx) = mpsc::unbounded_channel();
        let learner = Arc::new(self);
        let thread = super::spawn_background("metaclaw-learn", "learning", move || {
            learner.run(rx, ended, cancel)
        })
        .context("cannot start the learning thread")?;
        Ok((LearnHandle { tx }, thread))
    }

    async fn run(
        self: Arc<Self>,
        mut commands: mpsc::UnboundedReceiver<Command>,
        mut ended: broadcast::Receiver<SessionEnded>,
        cancel: CancellationToken,
    ) {
        tokio::select! {
            () = self.wait_for_plugins() => {}
            () = cancel.cancelled() => return,
        }
        // Alone on its store, every job left running was cut short here;
        // on a shared store only a silent instance's are (the heartbeat
        // thread hands them back, at start and every beat).
        let recovered = match self.team.is_shared() {
            false => self.db(|c| jobs::recover(c, now_ms())).await,
            true => {
                self.db(|c| jobs::recover_from_gone(c, TTL.as_millis() as i64))
                    .await
            }
        };
        match recovered {
            Ok(0) => {}
            Ok(n) => tracing::info!("{n} learning job(s) cut short last time: running them again"),
            Err(e) => tracing::error!("cannot recover learning jobs: {e:#}"),
        }
        let slots = Arc::new(Semaphore::new(
            self.parts.settings.concurrency.max(1) as usize
        ));
        let mut running: JoinSet<()> = JoinSet::new();
        loop {
            self.start_due(&slots, &mut running).await;
            let wait = match self.db(|c| jobs::next_due(c)).await {
                Ok(Some(due)) => Duration::from_millis((due - now_ms()).clamp(10, 60_000) as u64),
                _ => Duration::from_secs(3600),
            };
            // Other instances queue jobs (and hand back a dead one's)
            // without telling this one: looked for every heartbeat.
            let wait = match self.team.is_shared() {
                true => wait.min(HEARTBEAT),
                false => wait,
            };
            tokio::select! {
                // Jobs cut short here are run again at the next start.
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(wait) => {}
                event = ended.recv() => match event {
                    // The end (and its job) is queued to the store writer.
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => self.parts.store.flush().await,
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                command = commands.recv() => match command {
                    Some(Command::Now {
                        session,
                        agent,
                        reply,
                    }) => {
                        let learner = self.clone();
                        let slots = slots.clone();
                        running.spawn(async move {
                            let _ = reply.send(learner.now(session, agent, slots).await);
                        });
                    }
                    None => break,
                },
                Some(_) = running.join_next(), if !running.is_empty() => {}
            }
        }
        running.shutdown().await;
    }

    /// Starts due jobs while a slot is free.
    async fn start_due(self: &Arc<Self>, slots: &Arc<Semaphore>, running: &mut JoinSet<()>) {
        loop {
            let Ok(permit) = slots.clone().try_acquire_owned() else {
                return;
            };
            let by = self.team.id().to_string();
            let job = match self.db(move |c| jobs::claim(c, now_ms(), None, &by)).await {
                Ok(Some(job)) => job,
                Ok(None) => return,
                Err(e) => {
                    tracing::error!("cannot read the learning queue: {e:#}");
                    return;
                }
            };
            let learner = self.clone();
            running.spawn(async move {
                learner.execute(job).await;
                drop(permit);
            });
        }
    }

    /// `learn now`.
    async fn now(
        self: Arc<Self>,
        session: Option<String>,
        agent: Option<crate::agent_id::AgentId>,
        slots: Arc<Semaphore>,
    ) -> Result<Vec<Job>, LearnError> {
        let failed = |e: anyhow::Error| LearnError::Failed(format!("{e:#}"));
        self.parts.store.flush().await;
        let ids = match session {
            Some(id) => {
                let s = id.clone();
                let (known, job) = self
                    .db(move |c| {
                        Ok((
                            crate::store::learning::session_ended(c, &s)?.is_some(),
                            jobs::get(c, &s)?,
                        ))
                    })
                    .await
                    .map_err(failed)?;
                if !known {
                    return Err(LearnError::NoSession(id));
                }
                // Running already (the session's end started it): its
                // outcome is the answer.
                if job.is_none_or(|j| j.state != JobState::Running) {
                    let s = id.clone();
                    self.db(move |c| jobs::request_now(c, &s, now_ms()))
                        .await
                        .map_err(failed)?;
                }
                vec![id]
            }
            None => self
                .db(move |c| jobs::all_due_now(c, now_ms(), agent.as_ref().map(|a| a.as_str())))
                .await
                .map_err(failed)?,
        };
        let mut out = Vec::new();
        for id in ids {
            let Ok(_permit) = slots.clone().acquire_owned().await else {
                break;
            };
            let (s, by) = (id.clone(), self.team.id().to_string());
            // The runner may have started it meanwhile: then wait for it.
            let claimed = self
                .db(move |c| jobs::claim(c, now_ms(), Some(&s), &by))
                .await
                .map_err(failed)?;
            match claimed {
                Some(job) => self.execute(job).await,
                None => self.wait_while_running(&id).await,
            }
            let s = id.clone();
            if let Some(job) = self.db(move |c| jobs::get(c, &s)).await.map_err(failed)? {
                out.push(job);
            }
        }
        Ok(out)
    }

    async fn wait_while_running(self: &Arc<Self>, id: &str) {
        for _ in 0..6000 {
            let s = id.to_string();
            match self.db(move |c| jobs::get(c, &s)).await {
                Ok(Some(job)) if job.state == JobState::Running => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                _ => return,
            }
        }
    }

    /// Runs one claimed job to its end and records the outcome, in a span
    /// of its own that every log of the job (its stages, the judge, the
    /// evolver's plugins) carries.
    async fn execute(self: &Arc<Self>, job: Job) {
        let span = tracing::info_span!(
            "learning_job",
            session = %job.session_id,
            round = job.round,
            attempt = job.attempts
        );
        self.execute_job(job).instrument(span).await
    }

    async fn execute_job(self: &Arc<Self>, job: Job) {
        let session = job.session_id.clone();
        tracing::info!(session = %session, round = job.round, attempt = job.attempts, "learning from session");
        let outcome = match self.run_stages(&job).await {
            Err(e) if e.downcast_ref::<Blocked>().is_some() => {
                tracing::warn!(session = %session, "learning job waits: {e:#}");
                let (j, why) = (job.clone(), format!("{e:#}"));
                if let Err(e) = self
                    .db(move |c| jobs::wait_blocked(c, &j, &why, now_ms()))
                    .await
                {
                    tracing::error!(session = %session, "cannot record the job's outcome: {e:#}");
                }
                return;
            }
            outcome => outcome.map_err(|e| format!("{e:#}")),
        };
        match &outcome {
            Ok(()) => tracing::info!(session = %session, "learning job done"),
            Err(e) => {
                tracing::warn!(session = %session, "learning job failed (it will be retried): {e}")
            }
        }
        if let Err(e) = self
            .db(move |c| jobs::finish(c, &job, outcome, now_ms()))
            .await
        {
            tracing::error!(session = %session, "cannot record the job's outcome: {e:#}");
        }
    }

    /// The job's stages in order, each committed once; those an earlier
    /// attempt committed are skipped.
    async fn run_stages(self: &Arc<Self>, job: &Job) -> Result<()> {
        let done = |stage| job.stages.contains(&stage);
        if !done(Stage::Score) {
            let scored = self.blocking_stage(job, stages::score::run).await?;
            self.commit(job, scored).await?;
        }
        if !done(Stage::Judge) {
            let judged = stages::judge::run(&self.parts, job).await?;
            self.commit(job, judged).await?;
            self.retire_flagged().await;
            self.decide_canaries().await;
        }
        if !done(Stage::Evolve) {
            let evolved = stages::evolve::run(&self.parts, job).await?;
            self.commit(job, evolved).await?;
        }
        if !done(Stage::Publish) {
            let published = self.blocking_stage(job, stages::publish::run).await?;
            self.commit(job, published).await?;
        }
        Ok(())
    }

    /// With `skills.auto_retire`: evolved skills the new outcomes flag
    /// leave retrieval. A failure is logged; the job goes on.
    async fn retire_flagged(&self) {
        let Some(skills) = self.parts.skills.clone() else {
            return;
        };
        if !skills.settings.auto_retire {
            return;
        }
        if let Err(e) = blocking(move || super::retire::retire_flagged(&skills)).await {
            tracing::warn!("retiring flagged skills failed: {e:#}");
        }
    }

    /// The canaries' tests, on the rewards just judged (`canary.skills`).
    /// A failure is logged; the job goes on.
    async fn decide_canaries(&self) {
        let Some(skills) = self.parts.skills.clone() else {
            return;
        };
        if skills.settings.canary.is_none() {
            return;
        }
        let decided = self
            .parts
            .db
            .call(move |c| super::canary::decide_all(&skills, c))
            .await;
        if let Err(e) = decided {
            tracing::warn!("the canaries were not decided: {e:#}");
        }
    }

    /// Runs a stage that blocks (plugin calls, files) on a blocking thread.
    async fn blocking_stage<O: Send + 'static>(
        self: &Arc<Self>,
        job: &Job,
        stage: fn(&Parts, &Job) -> Result<O>,
    ) -> Result<O> {
        let (this, job) = (self.clone(), job.clone());
        blocking(move || stage(&this.parts, &job)).await
    }

    /// A stage's output and its row, in one transaction.
    async fn commit<O: Output>(&self, job: &Job, output: O) -> Result<()> {
        let job = job.clone();
        // Judged turns move their skills' outcomes: retrieval reads them
        // afresh from here on.
        let outcomes = match O::STAGE {
            Stage::Judge => self.parts.skills.as_ref().map(|s| s.outcomes.clone()),
            _ => None,
        };
        self.db(move |c| {
            // A deadlock with another instance's writer (a shared store)
            // aborts the whole transaction: it is tried again, not failed.
            crate::store::sql::retry_contended(crate::store::sql::is_contention_in, || {
                // Immediate: a stage's output reads before it writes, and a
                // deferred transaction that another writer overtook in
                // between fails (SQLITE_BUSY_SNAPSHOT) instead of waiting.
                let tx = c.transaction_with_behavior(crate::store::sql::Behavior::Immediate)?;
                output.write(&tx)?;
                jobs::stage_done(&tx, &job, O::STAGE, &output.summary(), now_ms())?;
                tx.commit()?;
                Ok(())
            })?;
            if let Some(outcomes) = outcomes
                && let Err(e) = outcomes.refresh(c)
            {
                tracing::warn!("the skills' outcomes were not read again: {e}");
            }
            Ok(())
        })
        .await
    }

    /// Runs `f` on the learner's store connection, on a blocking thread.
    async fn db<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut crate::store::sql::Conn) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.parts.db.call(f).await
    }

    /// Waits (at most a minute) for the first plugin scan and the skill
    /// library's first read: a job that ran before would evolve without
    /// its guard and dedup plugins, or against an empty library.
    async fn wait_for_plugins(&self) {
        for _ in 0..600 {
            let plugins_ready = self
                .parts
                .plugins
                .as_ref()
                .is_none_or(|p| p.current().generation > 0);
            let skills_ready = self
                .parts
                .skills
                .as_ref()
                .is_none_or(|s| s.library.loaded());
            if plugins_ready && skills_ready {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tracing::warn!("plugins or skills still loading after a minute; learning starts anyway");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::store::StoreOptions;

    /// A temporary store with session `s` ended, its job queued for an hour
    /// from now (so only `learn now` runs it).
    fn store() -> (tempfile::TempDir, Store, LearnerConn) {
        let dir = tempfile::tempdir().unwrap();
        let (store, _writer) = Store::open(
            StoreOptions {
                db: crate::store::test_db(dir.path().join("metaclaw.db")),
                commit_interval: Duration::from_millis(10),
                queue_capacity: 64,
                redactor: Redactor::new(Vec::new()),
                on_recorded: None,
                queue_learning: true,
            },
            Arc::new(Metrics::new()),
        )
        .unwrap();
        let db = LearnerConn::new(store.db().clone());
        db.call_blocking(|c| {
            c.execute(
                "INSERT INTO sessions (id, base_key, source, started_at_ms, last_activity_ms)
                 VALUES ('s', 's', 'header', 0, 0)",
                (),
            )?;
            Ok(jobs::enqueue(c, "s", now_ms() + 3_600_000)?)
        })
        .unwrap();
        (dir, store, db)
    }

    /// The runner, with nothing configured: no plugins, skills, judge or
    /// evolver.
    fn spawn(store: Store) -> (LearnHandle, CancellationToken) {
        let learner = Learner::new(
            store,
            None,
            None,
            None,
            None,
            Arc::new(Redactor::new(Vec::new())),
            LearningConfig::default(),
            false,
        );
        let (ended_tx, ended) = broadcast::channel(4);
        // The runner stops when the session tracker goes away.
        std::mem::forget(ended_tx);
        let cancel = CancellationToken::new();
        let (handle, _thread) = learner.spawn(ended, cancel.clone()).unwrap();
        (handle, cancel)
    }

    /// The stages the job's round recorded, in the order they ran, with
    /// their summaries.
    fn summaries(db: &LearnerConn) -> Vec<(Stage, String)> {
        let mut done: Vec<(i64, Stage, String)> = db
            .call_blocking(|c| {
                let mut stmt = c.prepare(
                    "SELECT done_ms, stage, summary FROM learning_stages WHERE session_id = 's'",
                )?;
                let rows = stmt.query_map((), |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
                Ok(rows.collect::<crate::store::sql::Result<_>>()?)
            })
            .unwrap();
        // Stages done within one millisecond: in their order.
        done.sort_by_key(|(at, stage, _)| (*at, *stage));
        done.into_iter()
            .map(|(_, s, summary)| (s, summary))
            .collect()
    }

    #[tokio::test]
    async fn a_job_runs_its_stages_in_order_each_committed_once() {
        let (_dir, store, db) = store();
        let (handle, cancel) = spawn(store);
        let jobs = handle.now(Some("s".into())).await.unwrap();
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].state, JobState::Done, "{:?}", jobs[0]);
        assert_eq!(jobs[0].stages, Stage::ALL);
        assert_eq!(
            summaries(&db),
            [
                (Stage::Score, "0 turn(s) scored".to_string()),
                (Stage::Judge, "judge off".to_string()),
                (Stage::Evolve, "off: skills are disabled".to_string()),
                (Stage::Publish, "0 skill(s) written".to_string()),
            ]
        );
        let unknown = handle.now(Some("nope".into())).await.unwrap_err();
        assert!(
            matches!(&unknown, LearnError::NoSession(s) if s == "nope"),
            "{unknown}"
        );
        cancel.cancel();
    }

    /// Another connection holds the store's write lock past SQLite's busy
    /// timeout (5 s), as a starved writer can on a loaded machine: `learn
    /// now` waits and runs the job, rather than answer it still queued.
    /// Held 12 s: `learn now` first flushes the turn writer (which spends
    /// up to its own 5 s), and with the store's 5 s on the learner's
    /// connection too the job's first write would then fail.
    #[tokio::test]
    async fn learn_now_runs_the_job_when_the_store_was_busy_past_its_timeout() {
        let (_dir, store, db) = store();
        let path = store.db().clone();
        let (handle, cancel) = spawn(store);
        // Past its start-up (whose recovery write would otherwise spend
        // part of the wait) once it answers: only then is the lock taken.
        assert!(matches!(
            handle.now(Some("no such session".into())).await,
            Err(LearnError::NoSession(_))
        ));
        let (locked_tx, locked) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            let mut conn = path.side_writer().unwrap();
            let tx = conn
                .transaction_with_behavior(crate::store::sql::Behavior::Immediate)
                .unwrap();
            locked_tx.send(()).unwrap();
            std::thread::sleep(Duration::from_secs(12));
            tx.commit().unwrap();
        });
        locked.recv().unwrap();
        let jobs = handle.now(Some("s".into())).await.unwrap();
        assert_eq!(jobs[0].state, JobState::Done, "{:?}", jobs[0]);
        assert_eq!(summaries(&db).len(), 4);
        holder.join().unwrap();
        cancel.cancel();
    }

    #[tokio::test]
    async fn a_retried_job_skips_the_stages_an_earlier_attempt_committed() {
        let (_dir, store, db) = store();
        // An attempt committed its score stage, then failed (and waits for
        // its backoff).
        db.call_blocking(|c| {
            let job = jobs::claim(c, now_ms(), Some("s"), "an earlier process")?.unwrap();
            jobs::stage_done(c, &job, Stage::Score, "from the first attempt", now_ms())?;
            jobs::finish(c, &job, Err("judge: 503".into()), now_ms())
        })
        .unwrap();
        let (handle, cancel) = spawn(store);
        let jobs = handle.now(Some("s".into())).await.unwrap();
        assert_eq!(jobs[0].state, JobState::Done, "{:?}", jobs[0]);
        assert_eq!(jobs[0].attempts, 1, "learn now starts the count again");
        let done = summaries(&db);
        assert_eq!(done.len(), 4, "{done:?}");
        assert_eq!(
            done[0],
            (Stage::Score, "from the first attempt".to_string())
        );
        cancel.cancel();
    }
}
