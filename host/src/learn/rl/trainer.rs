//! The trainer: on its own thread and runtime (nice 10, like learning), it
//! turns ready samples into train steps on the training service, and
//! serves the new weights. Serving never waits on it: the only thing it
//! asks of the serving side is the swap, which installs a new sampler
//! atomically (turns in flight finish on theirs).
//!
//! One step: the queue's waiting samples classified (`store::train_queue`);
//! a batch of `rl.batch_size` ready ones (whole trajectories) with their
//! advantages (`batch.rs`, `advantage.rs`); `forward_backward` and
//! `optim_step` on the run (`tinker::TrainingRun`, durable); the
//! learner's logprobs read back for KL(sampler‖learner) and entropy; save
//! for sampler, then the swap; every `rl.save_every` steps the training
//! state is saved, and the samples of the steps it holds are trained. A
//! failed step sends its samples back to the queue. With distillation
//! (`opd`), the teacher is checked at start, as soon as the student's
//! tokenizer is loaded (it must share it; `status` says how the check
//! went), and again before a step until it passes: nothing trains until it
//! does. Its per-token terms join every batch's advantages (`opd.rs`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::advantage::Baselines;
use super::batch;
use super::health::{self, State, Verdict};
use super::opd::Teacher;
use crate::config::OnCollapse;
use crate::policy::Policy;
use crate::store::train_queue;
use crate::tinker::types::{LossConfig, LossFn, TensorData};
use crate::tinker::{AdamParams, RunSpec, Service, TrainingRun};

/// How often the queue is looked at when nothing asks for a step.
const POLL: Duration = Duration::from_secs(5);
/// How long the teacher's check at start may take: one look, so that
/// `status` says early what is wrong (a step checks again, with the
/// teacher's full retries, until it passes).
const START_CHECK: Duration = Duration::from_secs(20);
/// How often the check at start looks whether the student's tokenizer is
/// loaded (it loads in the background, `policy/connect.rs`).
const TOKENIZER_POLL: Duration = Duration::from_millis(100);

/// What the trainer is configured to do.
#[derive(Clone)]
pub struct Settings {
    pub tinker: crate::tinker::Settings,
    pub spec: RunSpec,
    pub batch_size: usize,
    pub loss: LossFn,
    /// The loss's settings (`rl.clip_*_threshold` for ppo and cispo).
    pub loss_config: BTreeMap<String, LossConfig>,
    pub learning_rate: f64,
    pub baseline_decay: f64,
    /// Train only when asked (`metaclaw train step`).
    pub manual: bool,
    pub db: PathBuf,
    /// Distillation from a teacher (`opd.enabled`).
    pub opd: Option<crate::config::OpdConfig>,
    /// The scheduler, when steps wait for windows (`auto`, or
    /// `scheduler.enabled`): a step the trainer starts on its own starts
    /// only while a window is open. Steps asked for (`train step`) run
    /// anyway.
    pub gate: Option<Arc<crate::scheduler::gate::Gate>>,
    /// Why steps never start on their own (the scheduler's config is
    /// wrong): shown in `status`.
    pub gate_error: Option<String>,
    /// The learning-health verdict's thresholds (`rl.health_window`).
    pub health: health::Rule,
    /// What a "collapsing" verdict does.
    pub on_collapse: OnCollapse,
}

/// What the trainer last ran into, for `status`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TrainerState {
    /// The last step's failure; cleared by a step that runs.
    pub last_error: Option<String>,
    /// Distillation: the teacher, and whether it passed its check
    /// (`checked`), failed it (`refused: why`) or is not checked yet.
    pub opd: Option<String>,
    /// The learning-health verdict after the last step (`health.rs`).
    pub health: Option<Verdict>,
    /// Training is paused (`rl.on_collapse: pause`), and why: no step
    /// runs until `metaclaw train resume`.
    pub paused: Option<String>,
    /// What the last "collapsing" verdict made the trainer do.
    pub on_collapse: Option<String>,
}

/// One step's outcome, as `metaclaw train step` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct Stepped {
    pub run: String,
    pub step: i64,
    pub samples: usize,
    /// Unserved answers trained beside them (group sampling).
    pub siblings: usize,
    pub datums: usize,
    pub tokens: usize,
    pub loss: Option<f64>,
    pub mean_reward: f64,
    /// Mean over the trained tokens of log p_sampler − log p_learner.
    pub kl_sampler_learner: Option<f64>,
    /// −mean log p_learner over the trained tokens.
    pub entropy: Option<f64>,
    pub sampler_path: String,
    pub policy_version: i64,
    pub checkpoint: Option<String>,
    /// Distillation's part, when on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opd: Option<OpdReport>,
}

/// What distillation added to a step.
#[derive(Debug, Clone, Serialize)]
pub struct OpdReport {
    pub teacher: String,
    /// Sampled tokens the teacher scored.
    pub tokens: usize,
    /// Mean over them of log p_student − log p_teacher (a reverse-KL
    /// estimate: falls as the student comes closer to the teacher).
    pub reverse_kl: f64,
}

/// Why no step ran, or what it ran.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    Stepped(Stepped),
    /// Not enough ready samples (how many there are, how many a step takes).
    Waiting {
        ready: usize,
        batch_size: usize,
    },
    /// The batch's advantages were all zero: its samples were skipped.
    NoSignal {
        skipped: usize,
    },
}

enum Command {
    Step(oneshot::Sender<Result<Outcome, String>>),
    Resume(oneshot::Sender<Result<String, String>>),
    Serve(String, oneshot::Sender<Result<(String, i64), String>>),
}

/// Asks the trainer for a step now.
#[derive(Clone)]
pub struct TrainerHandle {
    tx: mpsc::UnboundedSender<Command>,
    state: Arc<Mutex<TrainerState>>,
    /// The scheduler steps wait for (none: they do not wait).
    pub gate: Option<Arc<crate::scheduler::gate::Gate>>,
    /// Why steps never start on their own (a bad `scheduler.*` value).
    pub gate_error: Option<String>,
    /// The learning-health verdict's thresholds (`rl.health_window`).
    pub health_rule: health::Rule,
}

impl TrainerHandle {
    /// What the trainer last ran into.
    pub fn state(&self) -> TrainerState {
        self.state.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Training paused by a "collapsing" verdict goes on; the verdict
    /// judges only the steps from now on. Answers what was paused.
    pub async fn resume(&self) -> Result<String, String> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Command::Resume(tx))
            .map_err(|_| "the trainer is not running".to_string())?;
        rx.await
            .map_err(|_| "the trainer stopped before answering".to_string())?
    }

    /// Serves the earlier sampler weights at `sampler` (a rollback):
    /// through a model of their own, loaded from the training state saved
    /// with them, where there is one, so the training model's weights are
    /// never touched. Answers the path served and its policy version.
    pub async fn serve(&self, sampler: &str) -> Result<(String, i64), String> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Command::Serve(sampler.to_string(), tx))
            .map_err(|_| "the trainer is not running".to_string())?;
        rx.await
            .map_err(|_| "the trainer stopped before answering".to_string())?
    }

    /// One step now with whatever is ready (at least one sample).
    pub async fn step(&self) -> Result<Outcome, String> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Command::Step(tx))
            .map_err(|_| "the trainer is not running".to_string())?;
        rx.await
            .map_err(|_| "the trainer stopped before answering".to_string())?
    }
}

struct Trainer {
    settings: Settings,
    policy: Arc<Policy>,
    /// The serving runtime: the swap runs there, on the policy's session.
    serving: tokio::runtime::Handle,
    run: Option<TrainingRun>,
    baselines: Baselines,
    /// Distillation's teacher, and whether it passed its check (shared
    /// with the check made at start).
    teacher: Option<(Teacher, Arc<AtomicBool>)>,
    state: Arc<Mutex<TrainerState>>,
}

/// Starts the trainer's thread.
pub fn spawn(
    settings: Settings,
    policy: Arc<Policy>,
    cancel: CancellationToken,
) -> std::io::Result<(TrainerHandle, std::thread::JoinHandle<()>)> {
    // A process killed during a step left its samples `in_step`, and the
    // run goes on from its last saved state: they are ready again now. (A
    // step counts only ready samples; left to the first step's
    // `open_run`, they would wait for others to make up a batch.)
    if let Err(e) = rewind_to_saved_state(&settings) {
        tracing::warn!("{e}");
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let serving = tokio::runtime::Handle::current();
    policy.set_reloader();
    let state = Arc::new(Mutex::new(TrainerState::default()));
    let teacher = match &settings.opd {
        None => None,
        Some(config) => {
            let teacher = Teacher::new(config).map_err(std::io::Error::other)?;
            set(&state, |s| {
                s.opd = Some(format!("{}: not checked yet", teacher.describe()));
            });
            Some((teacher, Arc::new(AtomicBool::new(false))))
        }
    };
    // The baselines as last saved (none yet, or unreadable: from nothing).
    let saved = crate::store::open_read_only(&settings.db)
        .and_then(|c| train_queue::baselines(&c).map_err(Into::into));
    let baselines = match saved {
        Ok(values) => Baselines {
            values: values.into_iter().collect(),
        },
        Err(e) => {
            tracing::warn!("the reward baselines start from nothing: {e:#}");
            Baselines::default()
        }
    };
    // A pause survives a restart; so does the verdict it came from.
    match crate::store::open_read_only(&settings.db)
        .map_err(|e| format!("{e:#}"))
        .and_then(|c| {
            let run = crate::store::training::active(
                &c,
                settings.tinker.service_url(),
                &settings.spec.base_model,
            )
            .map_err(|e| format!("{e:#}"))?;
            let Some(run) = run else { return Ok(None) };
            health::of_run(&c, &run.id, &settings.health)
                .map(Some)
                .map_err(|e| format!("{e:#}"))
        }) {
        Ok(Some((mark, verdict))) => set(&state, |s| {
            s.paused = mark.paused;
            s.health = Some(verdict);
        }),
        Ok(None) => {}
        Err(e) => tracing::warn!("the learning-health verdict starts from nothing: {e}"),
    }
    let (gate, gate_error) = (settings.gate.clone(), settings.gate_error.clone());
    let health_rule = settings.health.clone();
    let trainer = Trainer {
        settings,
        policy,
        serving,
        run: None,
        baselines,
        teacher,
        state: state.clone(),
    };
    let thread = crate::learn::spawn_background("metaclaw-train", "training", move || {
        trainer.run(rx, cancel)
    })?;
    let handle = TrainerHandle {
        tx,
        state,
        gate,
        gate_error,
        health_rule,
    };
    Ok((handle, thread))
}

/// Before the run is opened: the samples of steps after the active run's
/// last saved state (or of another run) back to the queue, as opening it
/// does.
fn rewind_to_saved_state(settings: &Settings) -> Result<usize, String> {
    let conn = crate::store::open_side_writer(&settings.db).map_err(|e| format!("{e:#}"))?;
    let run = crate::store::training::active(
        &conn,
        settings.tinker.service_url(),
        &settings.spec.base_model,
    )
    .map_err(|e| format!("the training run's record: {e:#}"))?;
    // No run yet: no sample is in a saved state.
    let (id, saved) = run.map_or((String::new(), 0), |r| (r.id, r.state_step.unwrap_or(0)));
    train_queue::rewind(&conn, &id, saved).map_err(|e| format!("the training queue: {e}"))
}

fn set(state: &Mutex<TrainerState>, change: impl FnOnce(&mut TrainerState)) {
    if let Ok(mut s) = state.lock() {
        change(&mut s);
    }
}

impl Trainer {
    async fn run(
        mut self,
        mut commands: mpsc::UnboundedReceiver<Command>,
        cancel: CancellationToken,
    ) {
        // After a step the next one is looked for at once: a backlog
        // trains back to back while its window stays open.
        let mut wait = POLL;
        // Distillation's teacher checked at start, beside the loop (a
        // step asked for meanwhile does not wait for it).
        let at_start = self.teacher.as_ref().map(|(teacher, passed)| {
            check_at_start(
                teacher.clone(),
                passed.clone(),
                self.policy.clone(),
                self.state.clone(),
            )
        });
        let mut checked_at_start = at_start.is_none();
        let at_start = async move {
            if let Some(check) = at_start {
                check.await;
            }
        };
        tokio::pin!(at_start);
        // The run's saved weights belong to a model of the process that
        // saved them, which the service unloads once that process is gone
        // (skyrl: 300 s after its last heartbeat): loaded again now into a
        // model of this process, and served from there.
        if self.has_saved_state() {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = self.reload_saved_weights("a new process serves them") => {}
            }
        }
        let policy = self.policy.clone();
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = &mut at_start, if !checked_at_start => checked_at_start = true,
                lost = policy.weights_lost() => {
                    let reloaded = self
                        .run
                        .as_ref()
                        .is_some_and(|run| run.record().sampler_path.as_deref() != Some(lost.as_str()));
                    match reloaded {
                        // This process saved newer weights since: serve them.
                        true => self.policy.reconnect_now(),
                        false => {
                            self.reload_saved_weights("the training service no longer holds the served weights").await;
                        }
                    }
                }
                command = commands.recv() => match command {
                    None => return,
                    Some(Command::Step(reply)) => {
                        let outcome = match self.paused() {
                            Some(why) => Err(format!(
                                "training is paused: {why}; `metaclaw train resume` goes on"
                            )),
                            None => self.step(1, None).await,
                        };
                        self.note(&outcome);
                        let _ = reply.send(outcome);
                    }
                    Some(Command::Resume(reply)) => {
                        let _ = reply.send(self.resume());
                    }
                    Some(Command::Serve(sampler, reply)) => {
                        let _ = reply.send(self.serve_earlier(&sampler).await);
                    }
                },
                () = tokio::time::sleep(wait), if !self.settings.manual => {
                    let outcome = self.step_in_window().await;
                    wait = match outcome {
                        Some(Ok(Outcome::Stepped(_))) => Duration::ZERO,
                        _ => POLL,
                    };
                    let Some(outcome) = outcome else {
                        continue;
                    };
                    self.note(&outcome);
                    match outcome {
                        Ok(Outcome::Stepped(s)) => tracing::info!(
                            step = s.step, samples = s.samples, loss = ?s.loss,
                            mean_reward = s.mean_reward, "trained; serving policy version {}", s.policy_version
                        ),
                        Ok(_) => {}
                        Err(e) => tracing::warn!("training step failed: {e}"),
                    }
                }
            }
        }
    }

    /// A step of `rl.batch_size` samples if the scheduler (when there is
    /// one) has a window open; `None`: none ran, and none was due. While
    /// the step runs the scheduler keeps looking, so a window that closes
    /// meanwhile is seen (and the step still finishes).
    async fn step_in_window(&mut self) -> Option<Result<Outcome, String>> {
        let size = self.settings.batch_size;
        if self.settings.gate_error.is_some() || self.paused().is_some() {
            return None;
        }
        let Some(gate) = self.settings.gate.clone() else {
            return Some(self.step(size, None).await);
        };
        // Between back-to-back steps the last look stands for up to
        // `POLL`, as during a step.
        gate.tick_unless_within(POLL).await;
        if !gate.may_step() {
            // Queued for the next window; classified now, so `status`
            // counts them ready.
            let classified = crate::store::open_side_writer(&self.settings.db)
                .map_err(|e| format!("{e:#}"))
                .and_then(|conn| self.classify(&conn));
            if let Err(e) = classified {
                tracing::warn!("{e}");
            }
            return None;
        }
        let step = self.step(size, Some(&gate));
        tokio::pin!(step);
        let outcome = loop {
            tokio::select! {
                outcome = &mut step => break outcome,
                () = tokio::time::sleep(POLL) => { gate.tick().await; }
            }
        };
        let said = match &outcome {
            Ok(Outcome::Stepped(s)) => format!("step {}", s.step),
            Ok(Outcome::NoSignal { skipped }) => format!("no signal, {skipped} samples skipped"),
            Ok(Outcome::Waiting { .. }) => "nothing to train".into(),
            Err(e) => format!("failed: {e}"),
        };
        gate.step_ended(&said);
        Some(outcome)
    }

    /// A rollback's weights, served. On skyrl 0.3.0 a checkpoint is
    /// sampled through the adapter of the model that saved it: sampling an
    /// earlier checkpoint of the training model overwrote its training
    /// weights, and one it had loaded before was sampled from whatever the
    /// adapter held since (the rollback served the newest weights under
    /// the old name). So the training state saved with them is loaded into
    /// a model of their own, which only serves.
    async fn serve_earlier(&mut self, sampler: &str) -> Result<(String, i64), String> {
        let version = super::checkpoint_step(sampler).unwrap_or(0);
        let conn =
            crate::store::open_side_writer(&self.settings.db).map_err(|e| format!("{e:#}"))?;
        let record = crate::store::training::active(
            &conn,
            self.settings.tinker.service_url(),
            &self.settings.spec.base_model,
        )
        .map_err(|e| format!("the training run's record: {e:#}"))?;
        let state = match &record {
            Some(run) => state_saved_with(&conn, &run.id, sampler)?,
            None => None,
        };
        let path = match state {
            Some(state) => {
                let run = self.open_run().await?;
                run.serving_copy(&state, version).await.map_err(|e| {
                    format!("cannot load the training state saved with {sampler}: {e}")
                })?
            }
            None => sampler.to_string(),
        };
        swap(&self.serving, &self.policy, &path, version)
            .await
            .map_err(|e| format!("cannot serve {path}: {e}"))?;
        if let Some(run) = record
            && let Err(e) = crate::store::training::serve(
                &conn,
                &run.id,
                &path,
                version,
                crate::clock::now_ms(),
            )
        {
            tracing::warn!("serving {path}, but a restart will not know: {e:#}");
        }
        Ok((path, version))
    }

    /// Whether the active run has a saved training state to load.
    fn has_saved_state(&self) -> bool {
        crate::store::open_read_only(&self.settings.db)
            .ok()
            .and_then(|conn| {
                crate::store::training::active(
                    &conn,
                    self.settings.tinker.service_url(),
                    &self.settings.spec.base_model,
                )
                .ok()
                .flatten()
            })
            .is_some_and(|run| run.state_path.is_some())
    }

    /// The weights the run's record serves, loaded again in this process:
    /// the run is opened again from its last saved state (a new model in
    /// this process's session) and, where the record serves an earlier
    /// step (a rollback), that step's saved state goes into a model of its
    /// own for serving; saved for sampling and served. Failures are
    /// logged: the policy stays down, says why, and asks again when it
    /// next finds the weights gone.
    async fn reload_saved_weights(&mut self, why: &str) {
        self.run = None;
        let reloaded = async {
            let run = self.open_run().await?;
            let record = run.record().clone();
            let earlier = match record.sampler_step {
                Some(served) if served < record.step => Some(served),
                _ => None,
            };
            let state_of_earlier = match (earlier, record.sampler_path.as_deref()) {
                (Some(_), Some(sampler)) => {
                    let conn = crate::store::open_read_only(&self.settings.db)
                        .map_err(|e| format!("{e:#}"))?;
                    state_saved_with(&conn, &record.id, sampler)?
                }
                _ => None,
            };
            let run = self.run.as_mut().ok_or("no training run")?;
            match (earlier, state_of_earlier) {
                (Some(step), Some(state)) => {
                    let path = run
                        .serving_copy(&state, step)
                        .await
                        .map_err(|e| e.to_string())?;
                    let conn = crate::store::open_side_writer(&self.settings.db)
                        .map_err(|e| format!("{e:#}"))?;
                    crate::store::training::serve(
                        &conn,
                        &record.id,
                        &path,
                        step,
                        crate::clock::now_ms(),
                    )
                    .map_err(|e| format!("the training run's record: {e:#}"))?;
                    Ok::<_, String>((path, step))
                }
                (earlier, _) => {
                    if let Some(step) = earlier {
                        tracing::warn!(
                            "the served weights of step {step} were not saved as a training state: the run's own, of step {}, are served instead",
                            record.step
                        );
                    }
                    let path = run.save_sampler().await.map_err(|e| e.to_string())?;
                    Ok((path, record.step))
                }
            }
        }
        .await;
        let (path, step) = match reloaded {
            Ok(done) => done,
            Err(e) => {
                tracing::warn!("the saved weights were not loaded again ({why}): {e}");
                return;
            }
        };
        match swap(&self.serving, &self.policy, &path, step).await {
            Ok(()) => tracing::info!(
                sampler = %path,
                "the run's saved weights of step {step} loaded again and served ({why})"
            ),
            // Not connected: the connection takes them from the run's
            // record.
            Err(e) => {
                tracing::info!(
                    sampler = %path,
                    "the run's saved weights of step {step} loaded again ({why}); serving them once connected ({e})"
                );
                self.policy.reconnect_now();
            }
        }
    }

    fn paused(&self) -> Option<String> {
        self.state.lock().ok().and_then(|s| s.paused.clone())
    }

    /// Clears a pause; the verdict judges only later steps.
    fn resume(&mut self) -> Result<String, String> {
        let Some(why) = self.paused() else {
            return Err("training is not paused".into());
        };
        let conn =
            crate::store::open_side_writer(&self.settings.db).map_err(|e| format!("{e:#}"))?;
        let run = crate::store::training::active(
            &conn,
            self.settings.tinker.service_url(),
            &self.settings.spec.base_model,
        )
        .map_err(|e| format!("the training run's record: {e:#}"))?;
        if let Some(run) = run {
            let mark = crate::store::training::HealthMark {
                since_step: run.step,
                paused: None,
            };
            crate::store::training::set_health_mark(&conn, &run.id, &mark)
                .map_err(|e| format!("the training run's record: {e:#}"))?;
            set(&self.state, |s| {
                s.health = Some(health::judge(&[], &self.settings.health));
            });
        }
        set(&self.state, |s| s.paused = None);
        tracing::info!(
            "training resumed (it was paused: {why}); learning health is judged afresh from the next step"
        );
        Ok(why)
    }

    /// After a step: the verdict over the run's recent steps, logged when
    /// it changes, and acted on when it says "collapsing".
    async fn judge_health(&mut self, conn: &rusqlite::Connection, run_id: &str) {
        let mark = match crate::store::training::health_mark(conn, run_id) {
            Ok(mark) => mark,
            Err(e) => {
                tracing::warn!("learning health not judged: {e:#}");
                return;
            }
        };
        let steps = match crate::store::training::health_steps(
            conn,
            run_id,
            mark.since_step,
            self.settings.health.window,
        ) {
            Ok(steps) => steps,
            Err(e) => {
                tracing::warn!("learning health not judged: {e:#}");
                return;
            }
        };
        let verdict = health::judge(&steps, &self.settings.health);
        let before = self
            .state
            .lock()
            .ok()
            .and_then(|s| s.health.as_ref().map(|v| v.state));
        if before != Some(verdict.state) {
            match verdict.state {
                State::Collapsing => {
                    tracing::warn!("learning health: collapsing: {}", verdict.why)
                }
                state => tracing::info!("learning health: {}: {}", state.as_str(), verdict.why),
            }
        }
        let collapsing = verdict.state == State::Collapsing;
        let fall = verdict
            .steps
            .map(|(first, last)| (first, first + (last - first + 1) / 2 - 1));
        set(&self.state, |s| s.health = Some(verdict.clone()));
        if !collapsing {
            return;
        }
        let last = steps.last().map_or(mark.since_step, |s| s.step);
        let done = match self.settings.on_collapse {
            OnCollapse::Warn => "warned (rl.on_collapse: warn): training goes on; `metaclaw train rollback` serves earlier weights".to_string(),
            OnCollapse::Pause => self.pause(conn, run_id, last, &verdict.why),
            OnCollapse::Rollback => match fall {
                Some((_, before_fall)) => {
                    match self
                        .roll_back(conn, run_id, &steps, before_fall, last)
                        .await
                    {
                        Ok(done) => done,
                        Err(why) => {
                            let paused = self.pause(conn, run_id, last, &verdict.why);
                            format!("could not roll back ({why}); {paused}")
                        }
                    }
                }
                None => self.pause(conn, run_id, last, &verdict.why),
            },
        };
        tracing::warn!("learning is collapsing: {done}");
        set(&self.state, |s| s.on_collapse = Some(done));
    }

    /// Pauses training (kept across restarts).
    fn pause(&self, conn: &rusqlite::Connection, run_id: &str, step: i64, why: &str) -> String {
        let reason = format!("collapsing at step {step}: {why}");
        let mark = crate::store::training::HealthMark {
            since_step: crate::store::training::health_mark(conn, run_id)
                .map(|m| m.since_step)
                .unwrap_or(0),
            paused: Some(reason.clone()),
        };
        if let Err(e) = crate::store::training::set_health_mark(conn, run_id, &mark) {
            tracing::warn!("the pause is not recorded (a restart trains again): {e:#}");
        }
        set(&self.state, |s| s.paused = Some(reason));
        "paused training (rl.on_collapse: pause): serving goes on from the current weights; `metaclaw train resume` trains again, `metaclaw train rollback` serves earlier weights".into()
    }

    /// Serves the sampler saved at the newest step up to `before_fall`
    /// that also saved its training state, and trains on from that state
    /// (the run records where it restarted from); the verdict then judges
    /// only later steps.
    async fn roll_back(
        &mut self,
        conn: &rusqlite::Connection,
        run_id: &str,
        steps: &[crate::store::training::Step],
        before_fall: i64,
        last: i64,
    ) -> Result<String, String> {
        let target = steps
            .iter()
            .rev()
            .filter(|s| s.step <= before_fall)
            .find_map(|s| {
                let ours = &s.metrics["metaclaw"];
                Some((
                    s.step,
                    ours["checkpoint"].as_str()?.to_string(),
                    ours["sampler"].as_str()?.to_string(),
                ))
            })
            .ok_or_else(|| {
                format!(
                    "no step up to {before_fall} saved both its training state and its sampler (rl.save_every)"
                )
            })?;
        let (step, state, sampler) = target;
        swap(&self.serving, &self.policy, &sampler, step)
            .await
            .map_err(|e| format!("cannot serve {sampler}: {e}"))?;
        let now = crate::clock::now_ms();
        crate::store::training::serve(conn, run_id, &sampler, step, now)
            .and_then(|()| crate::store::training::go_back_to(conn, run_id, &state, last, now))
            .and_then(|()| {
                crate::store::training::set_health_mark(
                    conn,
                    run_id,
                    &crate::store::training::HealthMark {
                        since_step: last,
                        paused: None,
                    },
                )
            })
            .map_err(|e| format!("the training run's record: {e:#}"))?;
        // Opened again before the next step, from that state.
        self.run = None;
        Ok(format!(
            "rolled back (rl.on_collapse: rollback): serving step {step}'s weights ({sampler}); training goes on from its saved state ({state}); steps {}–{last} are no longer in the weights",
            step + 1
        ))
    }

    /// Keeps a step's failure for `status` (a step that runs clears it).
    fn note(&self, outcome: &Result<Outcome, String>) {
        set(&self.state, |s| {
            s.last_error = outcome.as_ref().err().cloned();
        });
    }

    /// The teacher, once it has passed its check; checked now (with the
    /// teacher's retries) until it has (fail closed: until it passes, no
    /// step runs).
    async fn teacher(&mut self) -> Result<Option<&Teacher>, String> {
        let Some((teacher, passed)) = &self.teacher else {
            return Ok(None);
        };
        if !passed.load(Ordering::Acquire) {
            let format = self.policy.format().ok_or(
                "opd: the student's tokenizer is not loaded yet, so the teacher cannot be checked",
            )?;
            let result = teacher.check(&format.renderer, None).await;
            checked(teacher, passed, &self.state, &result);
            result.map_err(|why| format!("opd: nothing trains: {why}"))?;
        }
        Ok(Some(teacher))
    }

    /// The queue's waiting samples classified (ready or skipped, why).
    fn classify(&self, conn: &rusqlite::Connection) -> Result<(), String> {
        train_queue::classify(conn, self.teacher.is_some())
            .map(drop)
            .map_err(|e| format!("the training queue: {e}"))
    }

    /// A step over at least `min` ready samples (`rl.batch_size` at most).
    /// With a `gate`, the step counts as started in its window once there
    /// is a batch to train (before that nothing has started).
    async fn step(
        &mut self,
        min: usize,
        gate: Option<&crate::scheduler::gate::Gate>,
    ) -> Result<Outcome, String> {
        let db = self.settings.db.clone();
        let mut conn = crate::store::open_side_writer(&db).map_err(|e| format!("{e:#}"))?;
        self.classify(&conn)?;
        let err = |e: rusqlite::Error| format!("the training queue: {e}");
        let opd = self.teacher.is_some();
        let ready = train_queue::ready(&conn, opd).map_err(err)?;
        let size = self.settings.batch_size.max(1);
        let Some(chains) = batch::take(&ready, min.max(1), size) else {
            return Ok(Outcome::Waiting {
                ready: ready.len(),
                batch_size: size,
            });
        };
        if let Some(gate) = gate
            && !gate.step_started()
        {
            // The window closed since the trainer asked.
            return Ok(Outcome::Waiting {
                ready: ready.len(),
                batch_size: size,
            });
        }
        let (terms, opd) = match self.teacher().await? {
            None => Default::default(),
            Some(teacher) => {
                let distilled = teacher.terms(&chains).await?;
                let report = OpdReport {
                    teacher: teacher.describe(),
                    tokens: distilled.tokens,
                    reverse_kl: distilled.reverse_kl,
                };
                (distilled.per_token, Some(report))
            }
        };
        let batch = batch::assemble(
            &chains,
            &mut self.baselines,
            self.settings.baseline_decay,
            &terms,
        );
        // Kept across restarts (a redone step moves them again: they are
        // running estimates, not counts).
        let values = self.baselines.values.iter().map(|(k, v)| (*k, *v));
        train_queue::save_baselines(&mut conn, values).map_err(err)?;
        if batch.data.is_empty() {
            let turns: Vec<String> = batch.samples.iter().map(|(t, _)| t.clone()).collect();
            train_queue::skip(
                &conn,
                &turns,
                "no signal: every advantage in its batch was zero",
            )
            .map_err(err)?;
            return Ok(Outcome::NoSignal {
                skipped: turns.len(),
            });
        }
        let (loss, learning_rate) = (self.settings.loss, self.settings.learning_rate);
        let loss_config = self.settings.loss_config.clone();
        let policy = self.policy.clone();
        let serving = self.serving.clone();
        // Serving an earlier checkpoint of the training model (a rollback)
        // may have changed its weights (skyrl samples a checkpoint by
        // loading it into its model's adapter): the run is opened again
        // from its last saved state, which is what it records training
        // from.
        if let Some(run) = &self.run
            && let Some((served, _)) = policy.served()
            && served.starts_with(&format!("tinker://{}/", run.model().model_id))
            && run.record().sampler_path.as_deref() != Some(served.as_str())
        {
            tracing::info!(
                run = %run.record().id,
                served = %served,
                "serving other weights than the run's last: it trains on from its last saved state"
            );
            self.run = None;
        }
        let run = self.open_run().await?;
        let run_id = run.record().id.clone();
        let step = run.record().step + 1;
        train_queue::assign(&mut conn, &run_id, step, &batch.samples).map_err(err)?;
        let adam = AdamParams {
            learning_rate,
            ..AdamParams::default()
        };
        let report = match run.step(&batch.data, loss, &loss_config, adam).await {
            Ok(report) => report,
            Err(e) => {
                // The service's state is unknown: these samples go back to
                // the queue, so the weights go back too: the run is opened
                // again from its last saved state before the next step. (A
                // failed save leaves the model settled but holding this
                // step: trained on top of it, they would be in it twice.)
                let saved = run.record().state_step.unwrap_or(0);
                self.run = None;
                train_queue::rewind(&conn, &run_id, saved).map_err(err)?;
                return Err(e.to_string());
            }
        };
        if report.saved.is_some() {
            train_queue::checkpointed(&conn, &run_id, report.step).map_err(err)?;
        }
        let (kl, entropy) = learner_metrics(&batch.data, &report.outputs);
        let answers = batch.answer_tokens.len().max(1) as f64;
        let skipped_total = train_queue::counts(&conn).map(|c| c.skipped).ok();
        // What only the trainer knows, kept with the step (`train status`,
        // the learning-health verdict).
        let ours = serde_json::json!({
            "mean_reward": batch.mean_reward, "reward_sd": spread(&batch.rewards),
            "rewarded": batch.rewards.len(),
            "kl_sampler_learner": kl, "entropy": entropy,
            "tokens": batch.tokens, "siblings": batch.siblings,
            "answer_tokens": batch.answer_tokens.iter().sum::<usize>() as f64 / answers,
            "truncated_share": batch.truncated as f64 / answers,
            "skipped_total": skipped_total,
            "opd_reverse_kl": opd.as_ref().map(|o| o.reverse_kl),
            "checkpoint": report.saved,
        });
        let incarnation = run.record().incarnation;
        if let Err(e) =
            crate::store::training::annotate_step(&conn, &run_id, report.step, incarnation, &ours)
        {
            tracing::warn!("step {}: its metrics were not stored: {e:#}", report.step);
        }
        let sampler_path = run.save_sampler().await.map_err(|e| e.to_string())?;
        swap(&serving, &policy, &sampler_path, report.step)
            .await
            .map_err(|e| format!("trained step {} but cannot serve it: {e}", report.step))?;
        // When the step's weights began to serve (the dashboard's swaps).
        let served = serde_json::json!({
            "served_at_ms": crate::clock::now_ms(), "sampler": sampler_path,
        });
        if let Err(e) =
            crate::store::training::annotate_step(&conn, &run_id, report.step, incarnation, &served)
        {
            tracing::warn!(
                "step {}: when it began to serve was not stored: {e:#}",
                report.step
            );
        }
        self.judge_health(&conn, &run_id).await;
        Ok(Outcome::Stepped(Stepped {
            run: run_id,
            step: report.step,
            samples: batch.samples.len(),
            siblings: batch.siblings,
            datums: batch.data.len(),
            tokens: batch.tokens,
            loss: report.loss,
            mean_reward: batch.mean_reward,
            kl_sampler_learner: kl,
            entropy,
            sampler_path,
            policy_version: report.step,
            checkpoint: report.saved,
            opd,
        }))
    }

    /// The training run, opened once (restored from its last saved state;
    /// samples of later steps go back to the queue).
    async fn open_run(&mut self) -> Result<&mut TrainingRun, String> {
        if self.run.is_none() {
            let service = Service::connect(&self.settings.tinker)
                .await
                .map_err(|e| e.to_string())?;
            let (run, opened) = TrainingRun::open(
                &service,
                &self.settings.db,
                self.settings.spec.clone(),
                false,
            )
            .await
            .map_err(|e| e.to_string())?;
            tracing::info!(run = %run.record().id, ?opened, "training run open");
            let conn =
                crate::store::open_side_writer(&self.settings.db).map_err(|e| format!("{e:#}"))?;
            let saved = run.record().state_step.unwrap_or(0);
            train_queue::rewind(&conn, &run.record().id, saved)
                .map_err(|e| format!("the training queue: {e}"))?;
            self.run = Some(run);
        }
        self.run
            .as_mut()
            .ok_or_else(|| "no training run".to_string())
    }
}

/// The teacher checked as soon as the student's tokenizer is loaded, once
/// and briefly ([`START_CHECK`]): a teacher that cannot be used is in
/// `status` from the start, not from the first step. Until a check passes
/// nothing trains (a step checks again).
async fn check_at_start(
    teacher: Teacher,
    passed: Arc<AtomicBool>,
    policy: Arc<Policy>,
    state: Arc<Mutex<TrainerState>>,
) {
    let format = loop {
        if let Some(format) = policy.format() {
            break format;
        }
        tokio::time::sleep(TOKENIZER_POLL).await;
    };
    if passed.load(Ordering::Acquire) {
        return;
    }
    let result = teacher.check(&format.renderer, Some(START_CHECK)).await;
    if result.is_err() && passed.load(Ordering::Acquire) {
        // A step's own check passed meanwhile: it stands.
        return;
    }
    if let Err(why) = &result {
        tracing::warn!("opd: nothing trains until the teacher passes its check: {why}");
    }
    checked(&teacher, &passed, &state, &result);
}

/// Records how the teacher's check went, for `status` and the steps.
fn checked(
    teacher: &Teacher,
    passed: &AtomicBool,
    state: &Mutex<TrainerState>,
    result: &Result<(), String>,
) {
    let line = match result {
        Ok(()) => format!("{}: checked (same tokenizer)", teacher.describe()),
        Err(why) => format!("{}: refused: {why}", teacher.describe()),
    };
    set(state, |s| s.opd = Some(line));
    passed.store(result.is_ok(), Ordering::Release);
}

/// Serves `path` (policy version `version`) from now on. The swap runs on
/// the serving runtime, on the policy's own session.
async fn swap(
    serving: &tokio::runtime::Handle,
    policy: &Arc<Policy>,
    path: &str,
    version: i64,
) -> Result<(), String> {
    let (policy, path) = (policy.clone(), path.to_string());
    serving
        .spawn(async move { policy.swap(&path, version).await })
        .await
        .map_err(|e| format!("the swap stopped: {e}"))?
}

/// The training state saved by the step whose sampler weights are
/// `sampler` (`None`: that step saved none).
fn state_saved_with(
    conn: &rusqlite::Connection,
    run: &str,
    sampler: &str,
) -> Result<Option<String>, String> {
    let steps = crate::store::training::steps(conn, run, 10_000)
        .map_err(|e| format!("the training run's record: {e:#}"))?;
    Ok(steps.iter().find_map(|s| {
        let ours = &s.metrics["metaclaw"];
        (ours["sampler"].as_str() == Some(sampler))
            .then(|| ours["checkpoint"].as_str().map(str::to_string))
            .flatten()
    }))
}

/// The population standard deviation of `values` (`None`: none).
fn spread(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    Some((values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt())
}

/// KL(sampler‖learner) and the learner's entropy estimate over the trained
/// tokens (weight 1), from the learner's logprobs `forward_backward`
/// returned and the sampler's in the datums.
fn learner_metrics(
    data: &[crate::tinker::types::Datum],
    outputs: &[BTreeMap<String, TensorData>],
) -> (Option<f64>, Option<f64>) {
    let (mut kl, mut entropy, mut n) = (0.0, 0.0, 0usize);
    for (datum, out) in data.iter().zip(outputs) {
        let (Some(learner), Some(sampler), Some(weights)) = (
            out.get("logprobs").map(TensorData::floats),
            datum.loss_fn_inputs.get("logprobs").map(TensorData::floats),
            datum.loss_fn_inputs.get("weights").map(TensorData::floats),
        ) else {
            continue;
        };
        for ((l, s), w) in learner.iter().zip(&sampler).zip(&weights) {
            if *w > 0.0 {
                kl += f64::from(s - l);
                entropy -= f64::from(*l);
                n += 1;
            }
        }
    }
    match n {
        0 => (None, None),
        n => (Some(kl / n as f64), Some(entropy / n as f64)),
    }
}
