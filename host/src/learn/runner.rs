//! The learning job runner: one job per ended session, run on its own
//! low-priority thread so the proxy never waits for it.
//!
//! A job is four stages, each committed with its results in one
//! transaction (see `store::jobs`), so a job cut short by a crash resumes
//! where it stopped and does nothing twice:
//!
//! 1. `score`: scorer plugins on the turns not scored yet (the last turn,
//!    and any a crash left);
//! 2. `judge`: the judge on every main turn with its next state, then one
//!    reward per turn (`learning.reward`);
//! 3. `evolve`: when the session had a judged failure, or always with
//!    `skills.auto_evolve`, the evolver model's drafts through the schema
//!    check and the evolver plugins, kept as SKILL.md texts in the store;
//! 4. `publish`: those texts written to the skills folder (atomically),
//!    the library re-read.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use rusqlite::Connection;
use tokio::sync::{Semaphore, broadcast, mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::evolve::{self, Rejected};
use super::finished;
use super::judge::Judge;
use super::llm::ChatModel;
use super::per_turn::score_turn;
use super::reward::{self, ScorerReward};
use crate::clock::now_ms;
use crate::config::schema::LearningConfig;
use crate::digest::sha256_hex;
use crate::plugins::types::{self, SkillDraft};
use crate::plugins::{Loaded, PluginHost};
use crate::redact::Redactor;
use crate::sessions::SessionEnded;
use crate::skills::Skills;
use crate::skills::skill::{self, Category, Provenance, Skill};
use crate::store::jobs::{self, Job, Stage};
use crate::store::learning::{self, DraftOutcome, DraftRow};
use crate::store::skills::Attribution;
use crate::store::{ScoringInput, Store};

/// The evolver plugin every chain must hold.
const GUARD: &str = "guard";

/// Everything a job needs.
pub struct Learner {
    pub store: Store,
    pub plugins: Option<Arc<PluginHost>>,
    /// The skill library (`None` when skills are off: nothing evolves).
    pub skills: Option<Arc<Skills>>,
    /// `None` when judging is off or no judge model is configured.
    pub judge: Option<Judge>,
    pub evolver: Option<ChatModel>,
    pub redactor: Arc<Redactor>,
    pub settings: LearningConfig,
    pub auto_evolve: bool,
    db: Mutex<Option<Connection>>,
}

enum Command {
    Now {
        session: Option<String>,
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
        let stopped = || LearnError::Failed("the learning runner has stopped".into());
        let (reply, wait) = oneshot::channel();
        self.tx
            .send(Command::Now { session, reply })
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
        Self {
            store,
            plugins,
            skills,
            judge,
            evolver,
            redactor,
            settings,
            auto_evolve,
            db: Mutex::new(None),
        }
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
        let thread = std::thread::Builder::new()
            .name("metaclaw-learn".into())
            .spawn(move || {
                crate::store::lower_priority();
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::error!("learning is off: cannot start its runtime: {e}");
                        return;
                    }
                };
                runtime.block_on(learner.run(rx, ended, cancel));
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
        match self.db(|c| jobs::recover(c, now_ms())).await {
            Ok(0) => {}
            Ok(n) => tracing::info!("{n} learning job(s) cut short last time: running them again"),
            Err(e) => tracing::error!("cannot recover learning jobs: {e:#}"),
        }
        let slots = Arc::new(Semaphore::new(self.settings.concurrency.max(1) as usize));
        let mut running: JoinSet<()> = JoinSet::new();
        loop {
            self.start_due(&slots, &mut running).await;
            let wait = match self.db(|c| jobs::next_due(c)).await {
                Ok(Some(due)) => Duration::from_millis((due - now_ms()).clamp(10, 60_000) as u64),
                _ => Duration::from_secs(3600),
            };
            tokio::select! {
                // Jobs cut short here are run again at the next start.
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(wait) => {}
                event = ended.recv() => match event {
                    // The end (and its job) is queued to the store writer.
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => self.store.flush().await,
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                command = commands.recv() => match command {
                    Some(Command::Now { session, reply }) => {
                        let learner = self.clone();
                        let slots = slots.clone();
                        running.spawn(async move {
                            let _ = reply.send(learner.now(session, slots).await);
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
            let job = match self.db(|c| jobs::claim(c, now_ms(), None)).await {
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
        slots: Arc<Semaphore>,
    ) -> Result<Vec<Job>, LearnError> {
        let failed = |e: anyhow::Error| LearnError::Failed(format!("{e:#}"));
        self.store.flush().await;
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
                if job.is_none_or(|j| j.state != "running") {
                    let s = id.clone();
                    self.db(move |c| jobs::request_now(c, &s, now_ms()))
                        .await
                        .map_err(failed)?;
                }
                vec![id]
            }
            None => self
                .db(|c| jobs::all_due_now(c, now_ms()))
                .await
                .map_err(failed)?,
        };
        let mut out = Vec::new();
        for id in ids {
            let Ok(_permit) = slots.clone().acquire_owned().await else {
                break;
            };
            let s = id.clone();
            // The runner may have started it meanwhile: then wait for it.
            if let Ok(Some(job)) = self.db(move |c| jobs::claim(c, now_ms(), Some(&s))).await {
                self.execute(job).await;
            } else {
                self.wait_while_running(&id).await;
            }
            let s = id.clone();
            if let Ok(Some(job)) = self.db(move |c| jobs::get(c, &s)).await {
                out.push(job);
            }
        }
        Ok(out)
    }

    async fn wait_while_running(self: &Arc<Self>, id: &str) {
        for _ in 0..6000 {
            let s = id.to_string();
            match self.db(move |c| jobs::get(c, &s)).await {
                Ok(Some(job)) if job.state == "running" => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                _ => return,
            }
        }
    }

    /// Runs one claimed job to its end and records the outcome.
    async fn execute(self: &Arc<Self>, job: Job) {
        let session = job.session_id.clone();
        tracing::info!(session = %session, round = job.round, attempt = job.attempts, "learning from session");
        let outcome = match self.stages(&job).await {
            Err(e) if e.downcast_ref::<Blocked>().is_some() => {
                tracing::warn!(session = %session, "learning job waits: {e:#}");
                let (s, why) = (session.clone(), format!("{e:#}"));
                if let Err(e) = self
                    .db(move |c| jobs::wait_blocked(c, &s, &why, now_ms()))
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
        let s = session.clone();
        if let Err(e) = self
            .db(move |c| jobs::finish(c, &s, outcome, now_ms()))
            .await
        {
            tracing::error!(session = %session, "cannot record the job's outcome: {e:#}");
        }
    }

    async fn stages(self: &Arc<Self>, job: &Job) -> Result<()> {
        let done = &job.stages;
        if !done.contains(&Stage::Score) {
            let this = self.clone();
            let job = job.clone();
            blocking(move || this.score(&job)).await?;
        }
        if !done.contains(&Stage::Judge) {
            self.judge(job).await?;
        }
        if !done.contains(&Stage::Evolve) {
            self.evolve(job).await?;
        }
        if !done.contains(&Stage::Publish) {
            let this = self.clone();
            let job = job.clone();
            blocking(move || this.publish(&job)).await?;
        }
        Ok(())
    }

    /// Stage 1: scorer plugins on every main turn not yet scored.
    fn score(&self, job: &Job) -> Result<()> {
        let turns = self.db_blocking(|c| Ok(learning::main_turns(c, &job.session_id)?))?;
        let mut scored = Vec::new();
        for (i, turn) in turns.iter().enumerate() {
            if turn.scored {
                continue;
            }
            let next = turns.get(i + 1).map(|t| t.id.as_str());
            scored.push((
                turn.id.clone(),
                score_turn(&self.store, self.plugins.as_deref(), &turn.id, next)?,
            ));
        }
        let at = now_ms();
        self.db_blocking(|c| {
            let tx = c.transaction()?;
            for (turn, rewards) in &scored {
                learning::store_rewards(&tx, turn, rewards, at)?;
            }
            jobs::stage_done(
                &tx,
                job,
                Stage::Score,
                &format!("{} turn(s) scored", scored.len()),
                at,
            )?;
            tx.commit()?;
            Ok(())
        })
    }

    /// Stage 2: the judge on every main turn not judged yet (each verdict
    /// committed as it comes), then the turns' combined rewards.
    async fn judge(self: &Arc<Self>, job: &Job) -> Result<()> {
        let session = job.session_id.clone();
        let turns = self
            .db(move |c| Ok(learning::main_turns(c, &session)?))
            .await?;
        let mut judged = 0;
        if let Some(judge) = &self.judge {
            for (i, turn) in turns.iter().enumerate() {
                if turn.judged {
                    continue;
                }
                let (input, next) = self
                    .inputs(turn.id.clone(), turns.get(i + 1).map(|t| t.id.clone()))
                    .await?;
                let Some(input) = input else { continue };
                let judgment = judge.judge(&input, next.as_ref()).await?;
                tracing::debug!(turn = %turn.id, value = judgment.value, "judged: {}", judgment.rationale);
                self.db(move |c| Ok(learning::store_judgment(c, &judgment)?))
                    .await?;
                judged += 1;
            }
        }
        let summary = match &self.judge {
            Some(judge) => format!("{judged} turn(s) judged by {}", judge.model.model),
            None => "judge off".to_string(),
        };
        let this = self.clone();
        let job = job.clone();
        blocking(move || this.combine_rewards(&job, &summary)).await
    }

    fn combine_rewards(&self, job: &Job, summary: &str) -> Result<()> {
        let session = &job.session_id;
        let config = &self.settings.reward;
        self.db_blocking(|c| {
            let turns = learning::main_turns(c, session)?;
            let judgments = learning::judgments(c, session)?;
            let rewards = crate::store::turn_rewards(c, session)?;
            let tx = c.transaction()?;
            for turn in &turns {
                let scorers: Vec<ScorerReward<'_>> = rewards
                    .get(&turn.id)
                    .into_iter()
                    .flatten()
                    .map(|r| ScorerReward {
                        name: reward::scorer_name(&r.source),
                        value: r.value,
                    })
                    .collect();
                let judge = judgments.get(&turn.id).map(|j| j.value);
                if let Some(value) = reward::combine(config, judge, &scorers) {
                    learning::set_reward(&tx, &turn.id, value)?;
                }
            }
            jobs::stage_done(&tx, job, Stage::Judge, summary, now_ms())?;
            tx.commit()?;
            Ok(())
        })
    }

    /// A turn's input and its successor's (the next state), read on a
    /// blocking thread.
    async fn inputs(
        self: &Arc<Self>,
        turn: String,
        next: Option<String>,
    ) -> Result<(Option<ScoringInput>, Option<ScoringInput>)> {
        let store = self.store.clone();
        blocking(move || {
            let input = store.scoring_input(&turn)?;
            let next = match next {
                Some(id) => store.scoring_input(&id)?,
                None => None,
            };
            Ok((input, next))
        })
        .await
    }

    /// Stage 3: evolution.
    async fn evolve(self: &Arc<Self>, job: &Job) -> Result<()> {
        let session = job.session_id.clone();
        let (turns, judgments, totals) = self
            .db(move |c| {
                Ok((
                    learning::main_turns(c, &session)?,
                    learning::judgments(c, &session)?,
                    learning::turn_reward_totals(c, &session)?,
                ))
            })
            .await?;
        let failed = judgments.values().any(|j| j.value < 0);
        let skip = match (&self.skills, &self.evolver) {
            (None, _) => Some("off: skills are disabled"),
            (_, None) => Some("off: no evolver model (set rl.evolver_model or llm.model_id)"),
            _ if turns.is_empty() => Some("skipped: the session has no main turn"),
            _ if !failed && !self.auto_evolve => {
                Some("skipped: no judged failure and skills.auto_evolve is off")
            }
            _ => None,
        };
        let (Some(skills), Some(evolver), None) = (&self.skills, &self.evolver, skip) else {
            let summary = skip.unwrap_or("skipped").to_string();
            let job = job.clone();
            return self
                .db(move |c| {
                    Ok(jobs::stage_done(
                        c,
                        &job,
                        Stage::Evolve,
                        &summary,
                        now_ms(),
                    )?)
                })
                .await;
        };

        // The transcript: the last main turn's conversation and answer.
        let last = turns.last().map(|t| t.id.clone()).unwrap_or_default();
        let (input, _) = self.inputs(last.clone(), None).await?;
        let Some(input) = input else {
            anyhow::bail!("turn {last} is not in the store");
        };
        let finished = finished::finished_turn(&input, None);
        let mut messages = finished.request;
        messages.push(finished.response);
        let transcript = evolve::transcript(
            &messages,
            self.settings.transcript_chars as usize,
            &self.redactor,
        );
        let mut judged = String::new();
        for (i, turn) in turns.iter().enumerate() {
            let verdict = match judgments.get(&turn.id) {
                Some(j) => format!("judge {:+}: {}", j.value, j.rationale),
                None => "not judged".to_string(),
            };
            let total = totals
                .get(&turn.id)
                .map(|r| format!("; reward {r:+.2}"))
                .unwrap_or_default();
            judged.push_str(
                &self
                    .redactor
                    .redact_str(&format!("- turn {}: {verdict}{total}\n", i + 1)),
            );
        }
        let snapshot = skills.library.snapshot();
        let listed = evolve::library_list(
            snapshot
                .skills
                .iter()
                .map(|s| (s.name.as_str(), s.description.as_str())),
        );
        // Before the evolver model is paid for: without guard nothing it
        // drafts could be kept.
        let chain = evolver_chain(self.plugins.as_deref())?;
        let max = self.settings.max_drafts.to_string();
        let prompt = evolve::PROMPT.messages(&[
            ("max_drafts", &max),
            ("skills", &listed),
            ("judged", &judged),
            ("transcript", &transcript),
        ]);
        let reply = evolver.complete(&prompt, 0.4, evolve::MAX_TOKENS).await?;

        let ids: HashSet<String> = snapshot.skills.iter().map(|s| s.id.clone()).collect();
        let (drafts, mut rejected) = match evolve::parse_drafts(
            &reply,
            self.settings.max_drafts as usize,
            &ids,
        ) {
            Ok(parsed) => parsed,
            Err(reason) => {
                tracing::warn!(session = %job.session_id, "the evolver's reply was rejected: {reason}");
                (
                    Vec::new(),
                    vec![Rejected {
                        name: "(reply)".into(),
                        reason,
                    }],
                )
            }
        };
        let library: Vec<types::Skill> = snapshot
            .skills
            .iter()
            .map(|s| crate::skills::to_wit(s))
            .collect();
        // On the plugin runtime, each plugin under its deadline.
        let chained = async move { run_chain(&chain, drafts, &library).await };
        let (kept, more) = match self.plugins.as_ref() {
            Some(plugins) => plugins
                .engine
                .spawn(chained)
                .await
                .ok_or_else(|| anyhow::anyhow!("the evolver chain was cancelled"))??,
            None => chained.await?,
        };
        rejected.extend(more);

        // Provenance: the turns that failed (else all), with their scores.
        let mut taught: Vec<(String, Option<i8>)> = turns
            .iter()
            .map(|t| (t.id.clone(), judgments.get(&t.id).map(|j| j.value)))
            .filter(|(id, score)| *score == Some(-1) || totals.get(id).is_some_and(|r| *r < 0.0))
            .collect();
        if taught.is_empty() {
            taught = turns
                .iter()
                .map(|t| (t.id.clone(), judgments.get(&t.id).map(|j| j.value)))
                .collect();
        }
        taught.truncate(20);
        let provenance = Provenance {
            session: job.session_id.clone(),
            turns: taught.iter().map(|(id, _)| id.clone()).collect(),
            judge_scores: taught.iter().map(|(_, s)| *s).collect(),
            model: evolver.model.clone(),
        };
        let at = now_ms();
        let mut rows = Vec::new();
        for draft in kept {
            rows.push(self.to_row(job, draft, &snapshot, &provenance, at));
        }
        for row in rows
            .iter()
            .filter(|r| r.outcome == DraftOutcome::PendingReview)
        {
            tracing::info!(session = %job.session_id, skill = ?row.skill_id, "revision of a built-in or user-written skill held for review (metaclaw skills review)");
        }
        for r in rejected {
            tracing::info!(
                session = %job.session_id,
                draft = %crate::untrusted::log_line(&r.name, 100),
                "skill draft rejected: {}",
                crate::untrusted::log_line(&r.reason, 1000)
            );
            rows.push(DraftRow {
                id: 0,
                session_id: job.session_id.clone(),
                round: job.round,
                name: r.name,
                outcome: DraftOutcome::Rejected,
                skill_id: None,
                version: None,
                reason: Some(r.reason),
                content: None,
                base_hash: None,
                base_version: None,
                written_ms: None,
                reviewed_ms: None,
                at_ms: at,
            });
        }
        let kept = rows.iter().filter(|r| r.outcome.kept()).count();
        let held = rows
            .iter()
            .filter(|r| r.outcome == DraftOutcome::PendingReview)
            .count();
        let summary = match held {
            0 => format!("{kept} skill draft(s) kept, {} rejected", rows.len() - kept),
            _ => format!(
                "{kept} skill draft(s) kept ({held} held for review), {} rejected",
                rows.len() - kept
            ),
        };
        let job = job.clone();
        self.db(move |c| {
            let tx = c.transaction()?;
            for row in &rows {
                learning::insert_draft(&tx, row)?;
            }
            jobs::stage_done(&tx, &job, Stage::Evolve, &summary, now_ms())?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// A kept draft as the SKILL.md to write: a new skill, or the next
    /// version of the one it `updates`.
    fn to_row(
        &self,
        job: &Job,
        draft: SkillDraft,
        snapshot: &crate::skills::library::Snapshot,
        provenance: &Provenance,
        at: i64,
    ) -> DraftRow {
        let mut row = DraftRow {
            id: 0,
            session_id: job.session_id.clone(),
            round: job.round,
            name: draft.name.clone(),
            outcome: DraftOutcome::Rejected,
            skill_id: None,
            version: None,
            reason: None,
            content: None,
            base_hash: None,
            base_version: None,
            written_ms: None,
            reviewed_ms: None,
            at_ms: at,
        };
        let existing = draft
            .updates
            .as_deref()
            .and_then(|id| snapshot.get(id))
            .cloned();
        if existing.is_none() && snapshot.get(&draft.name).is_some() {
            row.reason = Some(format!(
                "a skill named {:?} exists and the draft does not update it",
                draft.name
            ));
            return row;
        }
        let category = Category::ALL
            .into_iter()
            .find(|c| c.as_str() == draft.category)
            .unwrap_or(Category::General);
        // The plugins redacted; the host's own patterns run once more.
        let description = self.redactor.redact_str(&draft.description);
        let body = self.redactor.redact_str(&draft.body);
        let skill = match &existing {
            Some(old) => Skill {
                description,
                category,
                tags: draft.tags.clone(),
                version: semver::Version::new(old.version.major, old.version.minor + 1, 0),
                provenance: Some(provenance.clone()),
                body,
                ..Skill::clone(old)
            },
            None => Skill {
                id: draft.name.clone(),
                name: draft.name.clone(),
                description,
                category,
                tags: draft.tags.clone(),
                version: semver::Version::new(1, 0, 0),
                created_by: format!("evolved:{}", job.session_id),
                component: None,
                provenance: Some(provenance.clone()),
                extra: serde_json::Map::new(),
                body,
                content_hash: String::new(),
            },
        };
        let content = skill::render(&skill);
        if let Err(e) = skill::parse(&skill.id, &content) {
            row.reason = Some(format!("not a valid skill: {e}"));
            return row;
        }
        row.outcome = match &existing {
            // Held until the user accepts it (`metaclaw skills review`).
            Some(old) if old.revisions_need_review() => DraftOutcome::PendingReview,
            Some(_) => DraftOutcome::Updated,
            None => DraftOutcome::Created,
        };
        row.skill_id = Some(skill.id.clone());
        row.version = Some(skill.version.to_string());
        row.base_hash = existing.as_ref().map(|s| s.content_hash.clone());
        row.base_version = existing.map(|s| s.version.to_string());
        row.content = Some(content);
        row
    }

    /// Stage 4: the kept drafts onto disk, then the library re-read.
    fn publish(&self, job: &Job) -> Result<()> {
        let rows = self.db_blocking(|c| Ok(learning::unwritten_drafts(c, &job.session_id)?))?;
        let mut written = Vec::new();
        if let Some(skills) = &self.skills {
            for row in &rows {
                let (Some(id), Some(content)) = (&row.skill_id, &row.content) else {
                    continue;
                };
                let refused =
                    write_skill(&skills.library.dir, id, content, row.base_hash.as_deref())?;
                if let Some(reason) = &refused {
                    tracing::warn!(skill = %id, "evolved skill not written: {reason}");
                } else {
                    tracing::info!(skill = %id, version = ?row.version, "skill {} from session {}", row.outcome, job.session_id);
                    written.push(id.clone());
                }
                self.db_blocking(|c| {
                    Ok(learning::draft_written(
                        c,
                        row.id,
                        now_ms(),
                        refused.as_deref(),
                    )?)
                })?;
            }
            if !written.is_empty() {
                skills.library.rescan(Some(&Attribution {
                    who: format!("evolved:{}", job.session_id),
                    why: format!("learned from session {}", job.session_id),
                }));
                skills.warm();
            }
        }
        self.db_blocking(|c| {
            Ok(jobs::stage_done(
                c,
                job,
                Stage::Publish,
                &format!("{} skill(s) written", written.len()),
                now_ms(),
            )?)
        })
    }

    /// Waits (at most a minute) for the first plugin scan and the skill
    /// library's first read: a job that ran before would evolve without
    /// its guard and dedup plugins, or against an empty library.
    async fn wait_for_plugins(&self) {
        for _ in 0..600 {
            let plugins_ready = self
                .plugins
                .as_ref()
                .is_none_or(|p| p.current().generation > 0);
            let skills_ready = self.skills.as_ref().is_none_or(|s| s.library.loaded());
            if plugins_ready && skills_ready {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tracing::warn!("plugins or skills still loading after a minute; learning starts anyway");
    }

    /// Runs `f` on the learner's store connection, on a blocking thread.
    async fn db<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let this = self.clone();
        blocking(move || this.db_blocking(f)).await
    }

    fn db_blocking<T>(&self, f: impl FnOnce(&mut Connection) -> Result<T>) -> Result<T> {
        let mut slot = self
            .db
            .lock()
            .map_err(|_| anyhow::anyhow!("learning store connection poisoned"))?;
        if slot.is_none() {
            *slot = Some(crate::store::open_side_writer(self.store.path())?);
        }
        match slot.as_mut() {
            Some(conn) => f(conn),
            None => anyhow::bail!("no store connection"),
        }
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| anyhow::anyhow!("learning task failed: {e}"))?
}

/// Evolution cannot run now for a reason outside the job (no `guard`):
/// the job waits, queued, without using up its attempts.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Blocked(String);

/// The evolver plugins in order: those `plugins.evolvers` names (unset:
/// every loaded one), third-party ones in the order given, then always the
/// first-party ones, guard → redact → dedup — whatever the config's order,
/// nothing edits a draft after guard has checked it, and dedup compares
/// clean text.
///
/// Fails closed: without an enabled `guard` in the chain, [`Blocked`] —
/// drafts are never kept unchecked (the job waits; a guard that is still
/// loading, or gets fixed, counts; `status` and `doctor` show the reason).
/// The one exception is a deployment that lists its chain in
/// `plugins.evolvers` and leaves guard out: it said so, and `status` says it.
pub fn evolver_chain(plugins: Option<&PluginHost>) -> Result<Vec<Arc<Loaded>>> {
    let Some(plugins) = plugins else {
        return Err(Blocked(
            "no guard evolver is loaded: plugins are off (see the log at start); skills are not evolved unchecked".into(),
        )
        .into());
    };
    let mut chain = plugins.evolvers();
    if !chain.iter().any(|p| p.info.name == GUARD) {
        let listed = plugins
            .settings
            .evolvers
            .as_ref()
            .map(|specs| specs.iter().any(|s| s.name == GUARD));
        let why = match listed {
            // Configured without it: the deployment's explicit choice.
            Some(false) => return Ok(chain),
            Some(true) => {
                "plugins.evolvers lists guard, but it is not loaded or is disabled (see `metaclaw plugins list`)"
            }
            None => {
                "guard is not loaded or is disabled (see `metaclaw plugins list`; plugins.builtin: false turns the first-party plugins off)"
            }
        };
        return Err(Blocked(format!(
            "no guard evolver is loaded: {why}; skills are not evolved unchecked"
        ))
        .into());
    }
    let rank = |p: &Arc<Loaded>| match p.info.name.as_str() {
        GUARD => 1,
        "redact" => 2,
        "dedup" => 3,
        _ => 0,
    };
    chain.sort_by_key(rank);
    Ok(chain)
}

/// Why evolved skills are written without guard, if they are: `chain` (an
/// [`evolver_chain`] that was allowed to run) has none because the config's
/// `plugins.evolvers` leaves it out.
pub fn evolution_unguarded(chain: &[Arc<Loaded>]) -> Option<String> {
    (!chain.iter().any(|p| p.info.name == GUARD)).then(|| {
        "plugins.evolvers leaves out guard: evolved skills are written without the poisoning check (as configured)".to_string()
    })
}

/// The drafts through each evolver plugin in turn. A plugin that fails
/// fails the stage (the job is retried): a draft never skips a check.
async fn run_chain(
    chain: &[Arc<Loaded>],
    mut drafts: Vec<SkillDraft>,
    library: &[types::Skill],
) -> Result<(Vec<SkillDraft>, Vec<Rejected>)> {
    let mut rejected = Vec::new();
    for plugin in chain {
        if drafts.is_empty() {
            break;
        }
        let outcomes = plugin
            .process(&drafts, library)
            .await
            .map_err(|e| anyhow::anyhow!("evolver plugin {} failed: {e}", plugin.label()))?;
        if outcomes.len() != drafts.len() {
            anyhow::bail!(
                "evolver plugin {} returned {} outcomes for {} drafts",
                plugin.label(),
                outcomes.len(),
                drafts.len()
            );
        }
        let mut next = Vec::with_capacity(drafts.len());
        for (draft, outcome) in drafts.into_iter().zip(outcomes) {
            match outcome {
                types::DraftOutcome::Keep(d) => next.push(d),
                // The plugin's words, stored and shown: one line, clipped.
                types::DraftOutcome::Reject(reason) => rejected.push(Rejected {
                    name: draft.name,
                    reason: format!(
                        "{}: {}",
                        plugin.info.name,
                        crate::untrusted::log_line(&reason, 1000)
                    ),
                }),
            }
        }
        drafts = next;
    }
    Ok((drafts, rejected))
}

/// Writes `<dir>/<id>/SKILL.md` atomically (temporary file, then rename).
/// An update is refused when the file changed since the draft was made
/// from it; a new skill when another appeared under its name. Writing the
/// same text again (a job resumed after a crash) is a no-op. Returns why it
/// was refused.
pub(crate) fn write_skill(
    dir: &std::path::Path,
    id: &str,
    content: &str,
    base_hash: Option<&str>,
) -> Result<Option<String>> {
    let folder = dir.join(id);
    let path = folder.join("SKILL.md");
    let ours = sha256_hex(content.as_bytes());
    match std::fs::read(&path) {
        Ok(current) => {
            let current = sha256_hex(&current);
            if current == ours {
                return Ok(None);
            }
            match base_hash {
                Some(base) if base == current => {}
                Some(_) => {
                    return Ok(Some(
                        "the skill changed on disk since the draft was made".into(),
                    ));
                }
                None => return Ok(Some("a skill with this name appeared meanwhile".into())),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if base_hash.is_some() {
                return Ok(Some("the skill it updates was removed".into()));
            }
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
    std::fs::create_dir_all(&folder)
        .with_context(|| format!("cannot create {}", folder.display()))?;
    let tmp: PathBuf = folder.join(format!(".SKILL.md.{}.tmp", std::process::id()));
    std::fs::write(&tmp, content).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(None)
}
