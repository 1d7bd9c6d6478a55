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

use super::error::TrainError;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::advantage::Baselines;
use super::batch;
use super::health::{self, State, Verdict};
use super::opd::{Teacher, TeacherError};
use crate::config::{CanaryConfig, OnCollapse};
use crate::policy::Policy;
use crate::store::experiments::{self, Experiment, WeightsTest};
use crate::store::instances::{Fence, fenced};
use crate::store::train_queue;
use crate::store::training::TrainerMetrics;
use crate::tinker::types::{LossConfig, LossFn, TensorData};
use crate::tinker::{AdamParams, RunSpec, Service, TrainingRun};

/// How often the queue is looked at when nothing asks for a step.
const POLL: Duration = Duration::from_secs(5);
/// How often weights under test are decided again on the judged sessions.
const CANARY_POLL: Duration = Duration::from_secs(2);
/// How long the teacher's check at start may take: one look, so that
/// `status` says early what is wrong (a step checks again, with the
/// teacher's full retries, until it passes).
const START_CHECK: Duration = Duration::from_secs(20);
/// How often the check at start looks whether the student's tokenizer is
/// loaded (it loads in the background, `policy/connect.rs`).
const TOKENIZER_POLL: Duration = Duration::from_millis(100);

/// What the trainer is configured to do.
#[derive(Clone)]
pub struct TrainerSettings {
    pub tinker: crate::tinker::ServiceSettings,
    pub spec: RunSpec,
    pub batch_size: usize,
    pub loss: LossFn,
    /// The loss's settings (`rl.clip_*_threshold` for ppo and cispo).
    pub loss_config: BTreeMap<String, LossConfig>,
    pub learning_rate: f64,
    pub baseline_decay: f64,
    /// Train only when asked (`metaclaw train step`).
    pub manual: bool,
    pub db: crate::store::Db,
    /// Distillation from a teacher (`opd.enabled`).
    pub opd: Option<crate::config::OpdConfig>,
    /// The scheduler, when steps wait for windows (`auto`, or
    /// `scheduler.enabled`): a step the trainer starts on its own starts
    /// only while a window is open. Steps asked for (`train step`) run
    /// anyway.
    pub gate: Option<Arc<crate::scheduler::gate::Gate>>,
    /// Why steps never start on their own (the scheduler's config is
    /// wrong): shown in `status`.
    pub gate_error: Option<crate::scheduler::gate::ConfigError>,
    /// The learning-health verdict's thresholds (`rl.health_window`).
    pub health: health::Rule,
    /// What a "collapsing" verdict does.
    pub on_collapse: OnCollapse,
    /// `canary.*` when `canary.weights` is on: a step's weights serve the
    /// candidate arm until a test decides (the run then saves its training
    /// state every step: a rollback trains on from the incumbent's).
    pub canary: Option<CanaryConfig>,
    /// Why no step runs at all (`learning.enabled: false`: no rewards to
    /// train on). The trainer then only keeps the served weights loaded:
    /// after a restart, and whenever the service drops them, it loads the
    /// run's saved weights again into a model of this process.
    pub steps_off: Option<String>,
    /// This instance among those sharing the store: only the holder of
    /// the run's lease (`team::trainer_lease`) steps; the others serve the
    /// weights it saves.
    pub team: crate::team::Team,
}

/// What the trainer last ran into, for `status`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
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
    /// What became of the last weights under test, or why a step's
    /// weights were served without a test.
    pub canary: Option<String>,
}

/// One step's outcome, as `metaclaw train step` prints it.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    /// The canary testing these weights (`canary.weights`): they serve its
    /// candidate arm until it decides; `None`: they serve everyone.
    pub under_test: Option<i64>,
    /// Distillation's part, when on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opd: Option<OpdReport>,
}

/// What distillation added to a step.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpdReport {
    pub teacher: String,
    /// Sampled tokens the teacher scored.
    pub tokens: usize,
    /// Mean over them of log p_student − log p_teacher (a reverse-KL
    /// estimate: falls as the student comes closer to the teacher).
    pub reverse_kl: f64,
}

/// Why no step ran, or what it ran.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    Stepped(Box<Stepped>),
    /// Not enough ready samples (how many there are, how many a step takes).
    Waiting {
        ready: usize,
        batch_size: usize,
    },
    /// The batch's advantages were all zero: its samples were skipped.
    NoSignal {
        skipped: usize,
    },
    /// A step's weights are under test (`canary.weights`): no step trains
    /// until they are promoted or rolled back.
    UnderTest {
        experiment: i64,
        policy_version: i64,
    },
}

enum Command {
    Step(oneshot::Sender<Result<Outcome, TrainError>>),
    Resume(oneshot::Sender<Result<String, TrainError>>),
    Serve(String, oneshot::Sender<Result<(String, i64), TrainError>>),
    Decide(
        i64,
        bool,
        String,
        oneshot::Sender<Result<Experiment, TrainError>>,
    ),
}

/// Asks the trainer for a step now.
#[derive(Clone)]
pub struct TrainerHandle {
    tx: mpsc::UnboundedSender<Command>,
    state: Arc<Mutex<TrainerState>>,
    /// The scheduler steps wait for (none: they do not wait).
    pub gate: Option<Arc<crate::scheduler::gate::Gate>>,
    /// Why steps never start on their own (a bad `scheduler.*` value).
    pub gate_error: Option<crate::scheduler::gate::ConfigError>,
    /// The learning-health verdict's thresholds (`rl.health_window`).
    pub health_rule: health::Rule,
    /// Why no step runs ([`TrainerSettings::steps_off`]).
    pub steps_off: Option<String>,
}

impl TrainerHandle {
    /// What the trainer last ran into.
    pub fn state(&self) -> TrainerState {
        self.state.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Training paused by a "collapsing" verdict goes on; the verdict
    /// judges only the steps from now on. Answers what was paused.
    pub async fn resume(&self) -> Result<String, TrainError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Command::Resume(tx))
            .map_err(|_| TrainError::NotRunning)?;
        rx.await.map_err(|_| TrainError::NoAnswer)?
    }

    /// Serves the earlier sampler weights at `sampler` (a rollback):
    /// through a model of their own, loaded from the training state saved
    /// with them, where there is one, so the training model's weights are
    /// never touched. Answers the path served and its policy version.
    pub async fn serve(&self, sampler: &str) -> Result<(String, i64), TrainError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Command::Serve(sampler.to_string(), tx))
            .map_err(|_| TrainError::NotRunning)?;
        rx.await.map_err(|_| TrainError::NoAnswer)?
    }

    /// The user's decision on the weights under test: promoted or rolled
    /// back at once, whatever the test says so far.
    pub async fn decide(
        &self,
        id: i64,
        promote: bool,
        why: &str,
    ) -> Result<Experiment, TrainError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Command::Decide(id, promote, why.to_string(), tx))
            .map_err(|_| TrainError::NotRunning)?;
        rx.await.map_err(|_| TrainError::NoAnswer)?
    }

    /// One step now with whatever is ready (at least one sample).
    pub async fn step(&self) -> Result<Outcome, TrainError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Command::Step(tx))
            .map_err(|_| TrainError::NotRunning)?;
        rx.await.map_err(|_| TrainError::NoAnswer)?
    }
}

struct Trainer {
    settings: TrainerSettings,
    policy: Arc<Policy>,
    /// The serving runtime: the swap runs there, on the policy's session.
    serving: tokio::runtime::Handle,
    run: Option<TrainingRun>,
    baselines: Baselines,
    /// Distillation's teacher, and whether it passed its check (shared
    /// with the check made at start).
    teacher: Option<(Teacher, Arc<AtomicBool>)>,
    state: Arc<Mutex<TrainerState>>,
    /// The weights under test (`canary.weights`).
    test: Option<Test>,
    /// Whether this instance leads the run's training (alone on its
    /// store: always).
    leading: bool,
}

/// Weights under test: the experiment and what it compares.
#[derive(Clone)]
struct Test {
    id: i64,
    detail: WeightsTest,
}

/// Starts the trainer's thread.
pub fn spawn(
    settings: TrainerSettings,
    policy: Arc<Policy>,
    cancel: CancellationToken,
) -> std::io::Result<(TrainerHandle, std::thread::JoinHandle<()>)> {
    // A process killed during a step left its samples `in_step`, and the
    // run goes on from its last saved state: they are ready again now. (A
    // step counts only ready samples; left to the first step's
    // `open_run`, they would wait for others to make up a batch.) On a
    // shared store another instance may be stepping: that is done when
    // this one takes the lead.
    let leading = !settings.team.is_shared();
    match leading {
        true => {
            if let Err(e) = rewind_to_saved_state(&settings) {
                tracing::warn!("{e}");
            }
        }
        false => settings.team.want(&lease_of(&settings)),
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
    let saved = settings
        .db
        .read()
        .and_then(|c| train_queue::baselines(&c, &settings.spec.agent).map_err(Into::into));
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
    match settings.db.read().map_err(TrainError::store).and_then(|c| {
        let run = crate::store::training::active(
            &c,
            settings.tinker.service_url(),
            &settings.spec.base_model,
            &settings.spec.agent,
        )
        .map_err(TrainError::store)?;
        let Some(run) = run else { return Ok(None) };
        health::of_run(&c, &run.id, &settings.health)
            .map(Some)
            .map_err(TrainError::store)
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
    let steps_off = settings.steps_off.clone();
    let trainer = Trainer {
        settings,
        policy,
        serving,
        run: None,
        baselines,
        teacher,
        state: state.clone(),
        test: None,
        leading,
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
        steps_off,
    };
    Ok((handle, thread))
}

/// Before the run is opened: the samples of steps after the active run's
/// last saved state (or of another run) back to the queue, as opening it
/// does.
fn rewind_to_saved_state(settings: &TrainerSettings) -> Result<usize, TrainError> {
    let fence = fence_of(settings)?;
    let conn = settings.db.side_writer().map_err(TrainError::store)?;
    let run = crate::store::training::active(
        &conn,
        settings.tinker.service_url(),
        &settings.spec.base_model,
        &settings.spec.agent,
    )
    .map_err(TrainError::record("the training run's record"))?;
    // No run yet: no sample is in a saved state.
    let (id, saved) = run.map_or((String::new(), 0), |r| (r.id, r.state_step.unwrap_or(0)));
    train_queue::rewind(&conn, fence.as_ref(), &settings.spec.agent, &id, saved)
        .map_err(TrainError::record("the training queue"))
}

/// The lease of the run's training.
fn lease_of(settings: &TrainerSettings) -> String {
    crate::team::trainer_lease(&settings.spec.agent)
}

/// The fence of the trainer's writes (`None` alone on its store); another
/// instance leading is [`TrainError::NotLeader`].
fn fence_of(settings: &TrainerSettings) -> Result<Option<Fence>, TrainError> {
    settings
        .team
        .fence(&lease_of(settings))
        .map_err(|other| TrainError::NotLeader(other.0))
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
        if self.leading && self.has_saved_state() {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = self.reload_saved_weights("a new process serves them") => {}
            }
        }
        // Weights under test when the last process stopped are tested on.
        tokio::select! {
            () = cancel.cancelled() => return,
            () = self.resume_test() => {}
        }
        let policy = self.policy.clone();
        let shared = self.settings.team.is_shared();
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(crate::team::HEARTBEAT), if shared => {
                    self.follow_the_lead().await;
                }
                () = tokio::time::sleep(CANARY_POLL), if self.test.is_some() => {
                    self.check_test().await;
                }
                () = &mut at_start, if !checked_at_start => checked_at_start = true,
                lost = policy.weights_lost() => {
                    let reloaded = self
                        .run
                        .as_ref()
                        .is_some_and(|run| run.record().sampler_path.as_deref() != Some(lost.as_str()));
                    match reloaded || !self.leading {
                        // This process saved newer weights since, or
                        // another leads (the connection serves the run's
                        // record): serve them.
                        true => self.policy.reconnect_now(),
                        false => {
                            self.reload_saved_weights("the training service no longer holds the served weights").await;
                        }
                    }
                }
                command = commands.recv() => match command {
                    None => return,
                    Some(Command::Step(reply)) => {
                        let outcome = match (self.settings.steps_off.as_deref(), self.paused()) {
                            (Some(why), _) => Err(TrainError::NothingTrains(why.to_string())),
                            (None, Some(why)) => Err(TrainError::Paused(why)),
                            (None, None) if !self.leading => Err(TrainError::NotLeader(
                                self.settings.team.leader_of(&lease_of(&self.settings))
                                    .unwrap_or_else(|| "none yet".into()),
                            )),
                            (None, None) => self.step(1, None).await,
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
                    Some(Command::Decide(id, promote, why, reply)) => {
                        let _ = reply.send(self.decide_by_user(id, promote, &why).await);
                    }
                },
                () = tokio::time::sleep(wait), if !self.settings.manual && self.settings.steps_off.is_none() => {
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
    async fn step_in_window(&mut self) -> Option<Result<Outcome, TrainError>> {
        let size = self.settings.batch_size;
        if !self.leading
            || self.settings.gate_error.is_some()
            || self.paused().is_some()
            || self.test.is_some()
        {
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
            let classified = self
                .settings
                .db
                .side_writer()
                .map_err(TrainError::store)
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
            Ok(Outcome::UnderTest { experiment, .. }) => {
                format!("weights under test (experiment {experiment})")
            }
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
    async fn serve_earlier(&mut self, sampler: &str) -> Result<(String, i64), TrainError> {
        let version = super::checkpoint_step(sampler).unwrap_or(0);
        let conn = self.settings.db.side_writer().map_err(TrainError::store)?;
        let record = crate::store::training::active(
            &conn,
            self.settings.tinker.service_url(),
            &self.settings.spec.base_model,
            &self.settings.spec.agent,
        )
        .map_err(TrainError::record("the training run's record"))?;
        let state = match &record {
            Some(run) => state_of(&conn, &run.id, sampler)?,
            None => None,
        };
        let path = match state {
            Some(state) => {
                let run = self.open_run().await?;
                run.serving_copy(&state, version)
                    .await
                    .map_err(TrainError::about(format!(
                        "cannot load the training state saved with {sampler}"
                    )))?
            }
            None => sampler.to_string(),
        };
        swap(&self.serving, &self.policy, &path, version)
            .await
            .map_err(|e| TrainError::Serving {
                what: format!("cannot serve {path}"),
                error: e.to_string(),
            })?;
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

    /// On a shared store, every heartbeat: an instance that takes the lead
    /// goes on from the run's last saved state (what the last leader was
    /// stepping is ready again, its weights loaded from the saved state:
    /// no sample is in them twice); one that lost it lets its run go; one
    /// that follows serves the weights the leader last served.
    async fn follow_the_lead(&mut self) {
        let lease = lease_of(&self.settings);
        let leads = self.settings.team.leads(&lease).is_some();
        match (self.leading, leads) {
            (false, true) => {
                self.leading = true;
                tracing::info!(lease = %lease, "this instance leads the run's training now: going on from its last saved state");
                match rewind_to_saved_state(&self.settings) {
                    Ok(0) => {}
                    Ok(n) => {
                        tracing::info!("{n} sample(s) the last leader was stepping are ready again")
                    }
                    Err(e) => tracing::warn!("{e}"),
                }
                if self.has_saved_state() {
                    self.reload_saved_weights("this instance leads training now")
                        .await;
                }
            }
            (true, false) => {
                tracing::warn!(lease = %lease, "another instance leads the run's training now: this one serves its weights");
                self.leading = false;
                self.run = None;
            }
            (true, true) => {}
            (false, false) => self.serve_the_leaders_weights().await,
        }
    }

    /// A follower serves what the run's record serves (the leader's last
    /// swap), once it differs from what this instance serves.
    async fn serve_the_leaders_weights(&mut self) {
        let record = self.active_record();
        let Some((path, step)) = record.and_then(|r| Some((r.sampler_path?, r.sampler_step?)))
        else {
            return;
        };
        if self
            .policy
            .served()
            .is_some_and(|(served, _)| served == path)
        {
            return;
        }
        match swap(&self.serving, &self.policy, &path, step).await {
            Ok(()) => {
                tracing::info!(sampler = %path, "serving the leader's weights of step {step}")
            }
            Err(e) => tracing::warn!(sampler = %path, "cannot serve the leader's weights yet: {e}"),
        }
    }

    /// The active run's record, if it can be read.
    fn active_record(&self) -> Option<crate::store::training::Run> {
        let conn = self.settings.db.read().ok()?;
        crate::store::training::active(
            &conn,
            self.settings.tinker.service_url(),
            &self.settings.spec.base_model,
            &self.settings.spec.agent,
        )
        .ok()
        .flatten()
    }

    /// Whether the active run has a saved training state to load.
    fn has_saved_state(&self) -> bool {
        self.active_record()
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
                    let conn = self.settings.db.read()
                        .map_err(TrainError::store)?;
                    state_of(&conn, &record.id, sampler)?
                }
                _ => None,
            };
            let run = self.run.as_mut().ok_or(TrainError::NoRun)?;
            match (earlier, state_of_earlier) {
                (Some(step), Some(state)) => {
                    let path = run
                        .serving_copy(&state, step)
                        .await?;
                    let conn = self.settings.db.side_writer()
                        .map_err(TrainError::store)?;
                    crate::store::training::serve(
                        &conn,
                        &record.id,
                        &path,
                        step,
                        crate::clock::now_ms(),
                    )
                    .map_err(TrainError::record("the training run's record"))?;
                    Ok::<_, TrainError>((path, step))
                }
                (earlier, _) => {
                    if let Some(step) = earlier {
                        tracing::warn!(
                            "the served weights of step {step} were not saved as a training state: the run's own, of step {}, are served instead",
                            record.step
                        );
                    }
                    let path = run.save_sampler().await?;
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
    fn resume(&mut self) -> Result<String, TrainError> {
        let Some(why) = self.paused() else {
            return Err(TrainError::NotPaused);
        };
        let conn = self.settings.db.side_writer().map_err(TrainError::store)?;
        let run = crate::store::training::active(
            &conn,
            self.settings.tinker.service_url(),
            &self.settings.spec.base_model,
            &self.settings.spec.agent,
        )
        .map_err(TrainError::record("the training run's record"))?;
        if let Some(run) = run {
            let mark = crate::store::training::HealthMark {
                since_step: run.step,
                paused: None,
            };
            crate::store::training::set_health_mark(&conn, &run.id, &mark)
                .map_err(TrainError::record("the training run's record"))?;
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
    async fn judge_health(&mut self, conn: &crate::store::sql::Conn, run_id: &str) {
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
        if collapsing && self.test.is_some() {
            // The weights under test are what collapsed: the incumbent
            // serves everyone again, whatever the test said so far.
            let why = format!(
                "the learning-health verdict after the step is collapsing: {}",
                verdict.why
            );
            set(&self.state, |s| s.health = Some(verdict.clone()));
            let done = match self.end_test(false, "collapse", &why).await {
                Ok(done) => done,
                Err(e) => format!("could not roll the weights under test back: {e}"),
            };
            tracing::warn!("learning is collapsing: {done}");
            set(&self.state, |s| s.on_collapse = Some(done));
            return;
        }
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
    fn pause(&self, conn: &crate::store::sql::Conn, run_id: &str, step: i64, why: &str) -> String {
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
        conn: &crate::store::sql::Conn,
        run_id: &str,
        steps: &[crate::store::training::Step],
        before_fall: i64,
        last: i64,
    ) -> Result<String, TrainError> {
        let target = steps
            .iter()
            .rev()
            .filter(|s| s.step <= before_fall)
            .find_map(|s| {
                let ours = s.ours();
                Some((s.step, ours.checkpoint?, ours.sampler?))
            })
            .ok_or(TrainError::NothingSavedBefore(before_fall))?;
        let (step, state, sampler) = target;
        swap(&self.serving, &self.policy, &sampler, step)
            .await
            .map_err(|e| TrainError::Serving {
                what: format!("cannot serve {sampler}"),
                error: e.to_string(),
            })?;
        let now = crate::clock::now_ms();
        let fence = fence_of(&self.settings)?;
        fenced(conn, fence.as_ref(), |tx| {
            crate::store::training::serve(tx, run_id, &sampler, step, now)?;
            crate::store::training::go_back_to(tx, run_id, &state, last, now)?;
            crate::store::training::set_health_mark(
                tx,
                run_id,
                &crate::store::training::HealthMark {
                    since_step: last,
                    paused: None,
                },
            )
        })
        .map_err(TrainError::record("the training run's record"))?;
        // Opened again before the next step, from that state.
        self.run = None;
        Ok(format!(
            "rolled back (rl.on_collapse: rollback): serving step {step}'s weights ({sampler}); training goes on from its saved state ({state}); steps {}–{last} are no longer in the weights",
            step + 1
        ))
    }

    /// Keeps a step's failure for `status` (a step that runs clears it).
    fn note(&self, outcome: &Result<Outcome, TrainError>) {
        set(&self.state, |s| {
            s.last_error = outcome.as_ref().err().map(ToString::to_string);
        });
    }

    /// The teacher, once it has passed its check; checked now (with the
    /// teacher's retries) until it has (fail closed: until it passes, no
    /// step runs).
    async fn teacher(&mut self) -> Result<Option<&Teacher>, TrainError> {
        let Some((teacher, passed)) = &self.teacher else {
            return Ok(None);
        };
        if !passed.load(Ordering::Acquire) {
            let format = self.policy.format().ok_or(TrainError::TeacherUnchecked)?;
            let result = teacher.check(&format.renderer, None).await;
            checked(teacher, passed, &self.state, &result);
            result.map_err(TrainError::TeacherRefused)?;
        }
        Ok(Some(teacher))
    }

    /// The queue's waiting samples classified (ready or skipped, why).
    fn classify(&self, conn: &crate::store::sql::Conn) -> Result<(), TrainError> {
        train_queue::classify(conn, self.teacher.is_some())
            .map(drop)
            .map_err(TrainError::record("the training queue"))
    }

    /// A step over at least `min` ready samples (`rl.batch_size` at most).
    /// With a `gate`, the step counts as started in its window once there
    /// is a batch to train (before that nothing has started). Every log of
    /// it carries the run's agent (a `train_step` span).
    #[tracing::instrument(name = "train_step", skip_all, fields(agent = %self.settings.spec.agent, min))]
    async fn step(
        &mut self,
        min: usize,
        gate: Option<&crate::scheduler::gate::Gate>,
    ) -> Result<Outcome, TrainError> {
        if let Some(test) = &self.test {
            return Ok(Outcome::UnderTest {
                experiment: test.id,
                policy_version: test.detail.candidate_version,
            });
        }
        // Every write of the step is made under the lead it starts with.
        let fence = fence_of(&self.settings)?;
        let db = self.settings.db.clone();
        let mut conn = db.side_writer().map_err(TrainError::store)?;
        self.classify(&conn)?;
        let err = TrainError::record::<crate::store::sql::Error>("the training queue");
        let opd = self.teacher.is_some();
        let ready = train_queue::ready(&conn, opd, &self.settings.spec.agent).map_err(err)?;
        let size = self.settings.batch_size.max(1);
        let waiting = || Outcome::Waiting {
            ready: ready.len(),
            batch_size: size,
        };
        let Some(chains) = batch::take(&ready, min.max(1), size) else {
            return Ok(waiting());
        };
        if let Some(gate) = gate
            && !gate.step_started()
        {
            // The window closed since the trainer asked.
            return Ok(waiting());
        }
        let (terms, opd) = self.distill(&chains).await?;
        let batch = self.assemble(&mut conn, &chains, &terms)?;
        if batch.data.is_empty() {
            return skip_no_signal(&conn, fence.as_ref(), &batch);
        }
        let trained = self
            .train(&conn, fence.as_ref(), &batch, opd.as_ref())
            .await?;
        let tested = self
            .serve_or_test(
                &conn,
                &trained.run_id,
                trained.incarnation,
                &trained.report,
                trained.sampler_path.clone(),
                trained.trained_from.clone(),
            )
            .await?;
        self.judge_health(&conn, &trained.run_id).await;
        Ok(stepped(&batch, trained, tested, opd))
    }

    /// The batch of the chains taken, with their advantages (the baselines
    /// move, and are saved).
    fn assemble(
        &mut self,
        conn: &mut crate::store::sql::Conn,
        chains: &batch::Chains<'_>,
        terms: &std::collections::HashMap<String, Vec<f32>>,
    ) -> Result<batch::Batch, TrainError> {
        let batch = batch::assemble(
            chains,
            &mut self.baselines,
            self.settings.baseline_decay,
            terms,
        );
        // Kept across restarts (a redone step moves them again: they are
        // running estimates, not counts).
        let values = self.baselines.values.iter().map(|(k, v)| (*k, *v));
        train_queue::save_baselines(conn, &self.settings.spec.agent, values)
            .map_err(TrainError::record("the training queue"))?;
        Ok(batch)
    }

    /// The batch trained on the run (opened first where it is not), its
    /// metrics kept with the step, and its weights saved for sampling.
    async fn train(
        &mut self,
        conn: &crate::store::sql::Conn,
        fence: Option<&Fence>,
        batch: &batch::Batch,
        opd: Option<&OpdReport>,
    ) -> Result<Trained, TrainError> {
        let err = TrainError::record::<crate::store::sql::Error>("the training queue");
        let (loss, learning_rate) = (self.settings.loss, self.settings.learning_rate);
        let loss_config = self.settings.loss_config.clone();
        let policy = self.policy.clone();
        self.reopen_if_serving_other(&policy);
        let canary = self.settings.canary.is_some();
        let run_agent = self.settings.spec.agent.clone();
        let run = self.open_run().await?;
        run.lead_under(fence.cloned());
        // Under a canary, the state this step starts from is saved (the
        // first step's too): a rollback trains on from it.
        let trained_from = match canary {
            false => None,
            true => Some(state_before_step(run).await?),
        };
        let run_id = run.record().id.clone();
        let step = run.record().step + 1;
        train_queue::assign(conn, fence, &run_id, step, &batch.samples).map_err(err)?;
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
                train_queue::rewind(conn, fence, &run_agent, &run_id, saved).map_err(err)?;
                return Err(e.into());
            }
        };
        let incarnation = run.record().incarnation;
        let (kl, entropy) = keep_metrics(
            conn,
            fence,
            &run_agent,
            batch,
            StepOf {
                run_id: &run_id,
                incarnation,
                report: &report,
            },
            opd,
        )?;
        let sampler_path = run.save_sampler().await?;
        Ok(Trained {
            run_id,
            incarnation,
            report,
            trained_from,
            kl,
            entropy,
            sampler_path,
        })
    }

    /// The step's weights: under a weights canary, a test against the
    /// incumbent (or, if one cannot start, served untested, and said so);
    /// else served to everyone now. Which experiment tests them, if any.
    async fn serve_or_test(
        &mut self,
        conn: &crate::store::sql::Conn,
        run_id: &str,
        incarnation: i64,
        report: &crate::tinker::StepReport,
        sampler_path: String,
        trained_from: Option<String>,
    ) -> Result<Option<i64>, TrainError> {
        let tested = match trained_from {
            None => None,
            Some(from) => {
                let candidate = Candidate {
                    run: run_id.to_string(),
                    sampler: sampler_path.clone(),
                    version: report.step,
                    state: report.saved.clone(),
                    trained_from: from,
                };
                match self.start_test(conn, candidate).await {
                    Ok(id) => Some(id),
                    Err(why) => {
                        let said = format!(
                            "step {}'s weights serve every session untested: {why}",
                            report.step
                        );
                        tracing::warn!("canary: {said}");
                        set(&self.state, |s| s.canary = Some(said));
                        None
                    }
                }
            }
        };
        if tested.is_none() {
            swap(&self.serving, &self.policy, &sampler_path, report.step)
                .await
                .map_err(|e| TrainError::Serving {
                    what: format!("trained step {} but cannot serve it", report.step),
                    error: e.to_string(),
                })?;
        }
        // When the step's weights began to serve everyone (the dashboard's
        // swaps); under test, only its sampler (a promotion adds the time).
        let served = TrainerMetrics {
            sampler: Some(sampler_path.clone()),
            served_at_ms: tested.is_none().then(crate::clock::now_ms),
            canary: tested,
            ..TrainerMetrics::default()
        };
        if let Err(e) =
            crate::store::training::annotate_step(conn, run_id, report.step, incarnation, &served)
        {
            tracing::warn!(
                "step {}: when it began to serve was not stored: {e:#}",
                report.step
            );
        }
        Ok(tested)
    }

    /// Distillation's per-token terms for the batch, and its report
    /// (nothing without a teacher).
    async fn distill(
        &mut self,
        chains: &batch::Chains<'_>,
    ) -> Result<
        (
            std::collections::HashMap<String, Vec<f32>>,
            Option<OpdReport>,
        ),
        TrainError,
    > {
        Ok(match self.teacher().await? {
            None => Default::default(),
            Some(teacher) => {
                let distilled = teacher.terms(chains).await.map_err(TrainError::Teacher)?;
                let report = OpdReport {
                    teacher: teacher.describe(),
                    tokens: distilled.tokens,
                    reverse_kl: distilled.reverse_kl,
                };
                (distilled.per_token, Some(report))
            }
        })
    }

    /// Serving an earlier checkpoint of the training model (a rollback)
    /// may have changed its weights (skyrl samples a checkpoint by loading
    /// it into its model's adapter): the run is opened again from its last
    /// saved state, which is what it records training from.
    fn reopen_if_serving_other(&mut self, policy: &Policy) {
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
    }

    /// The training run, opened once (restored from its last saved state;
    /// samples of later steps go back to the queue).
    async fn open_run(&mut self) -> Result<&mut TrainingRun, TrainError> {
        if self.run.is_none() {
            let fence = fence_of(&self.settings)?;
            let service = Service::connect(&self.settings.tinker).await?;
            let (run, opened) = TrainingRun::open(
                &service,
                &self.settings.db,
                self.settings.spec.clone(),
                false,
                fence.clone(),
            )
            .await?;
            tracing::info!(run = %run.record().id, ?opened, "training run open");
            let conn = self.settings.db.side_writer().map_err(TrainError::store)?;
            let saved = run.record().state_step.unwrap_or(0);
            train_queue::rewind(
                &conn,
                fence.as_ref(),
                &self.settings.spec.agent,
                &run.record().id,
                saved,
            )
            .map_err(TrainError::record("the training queue"))?;
            self.run = Some(run);
        }
        self.run.as_mut().ok_or(TrainError::NoRun)
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
    result: &Result<(), TeacherError>,
) {
    let line = match result {
        Ok(()) => format!("{}: checked (same tokenizer)", teacher.describe()),
        Err(why) => format!("{}: refused: {why}", teacher.describe()),
    };
    set(state, |s| s.opd = Some(line));
    passed.store(result.is_ok(), Ordering::Release);
}

/// What only the trainer knows of a step, kept with it (`train status`,
/// the learning-health verdict).
fn trainer_metrics(
    batch: &batch::Batch,
    kl: Option<f64>,
    entropy: Option<f64>,
    skipped_total: Option<u64>,
    opd: Option<&OpdReport>,
    checkpoint: &Option<String>,
) -> TrainerMetrics {
    let answers = batch.answer_tokens.len().max(1) as f64;
    TrainerMetrics {
        mean_reward: Some(batch.mean_reward),
        reward_sd: spread(&batch.rewards),
        rewarded: Some(batch.rewards.len() as u64),
        kl_sampler_learner: kl,
        entropy,
        tokens: Some(batch.tokens as u64),
        siblings: Some(batch.siblings as u64),
        answer_tokens: Some(batch.answer_tokens.iter().sum::<usize>() as f64 / answers),
        truncated_share: Some(batch.truncated as f64 / answers),
        skipped_total,
        opd_reverse_kl: opd.map(|o| o.reverse_kl),
        checkpoint: checkpoint.clone(),
        ..TrainerMetrics::default()
    }
}

/// A step trained on the service, as the rest of the step serves and
/// reports it.
struct Trained {
    run_id: String,
    incarnation: i64,
    report: crate::tinker::StepReport,
    /// The state the step started from, saved under a canary (a rollback
    /// trains on from it).
    trained_from: Option<String>,
    kl: Option<f64>,
    entropy: Option<f64>,
    sampler_path: String,
}

/// Which step of which run a report is of.
struct StepOf<'a> {
    run_id: &'a str,
    incarnation: i64,
    report: &'a crate::tinker::StepReport,
}

/// The state a step starts from, under a canary: the run's last saved
/// one where it is of this step, else saved now.
async fn state_before_step(run: &mut TrainingRun) -> Result<String, TrainError> {
    match (&run.record().state_path, run.record().state_step) {
        (Some(path), Some(at)) if at == run.record().step => Ok(path.clone()),
        _ => run.save_state().await.map_err(TrainError::about(
            "cannot save the state a canary goes back to",
        )),
    }
}

/// A batch whose advantages were all zero: its samples skipped.
fn skip_no_signal(
    conn: &crate::store::sql::Conn,
    fence: Option<&Fence>,
    batch: &batch::Batch,
) -> Result<Outcome, TrainError> {
    let turns: Vec<String> = batch.samples.iter().map(|(t, _)| t.clone()).collect();
    train_queue::skip(
        conn,
        fence,
        &turns,
        "no signal: every advantage in its batch was zero",
    )
    .map_err(TrainError::record("the training queue"))?;
    Ok(Outcome::NoSignal {
        skipped: turns.len(),
    })
}

/// A trained step's metrics, kept with it (a failure to store them is
/// only logged); the learner's KL and entropy.
fn keep_metrics(
    conn: &crate::store::sql::Conn,
    fence: Option<&Fence>,
    agent: &str,
    batch: &batch::Batch,
    at: StepOf<'_>,
    opd: Option<&OpdReport>,
) -> Result<(Option<f64>, Option<f64>), TrainError> {
    let report = at.report;
    if report.saved.is_some() {
        train_queue::checkpointed(conn, fence, at.run_id, report.step)
            .map_err(TrainError::record("the training queue"))?;
    }
    let (kl, entropy) = learner_metrics(&batch.data, &report.outputs);
    let skipped_total = train_queue::counts(conn, Some(agent))
        .map(|c| c.skipped)
        .ok();
    let ours = trainer_metrics(batch, kl, entropy, skipped_total, opd, &report.saved);
    if let Err(e) =
        crate::store::training::annotate_step(conn, at.run_id, report.step, at.incarnation, &ours)
    {
        tracing::warn!("step {}: its metrics were not stored: {e:#}", report.step);
    }
    Ok((kl, entropy))
}

/// What `metaclaw train step` prints of a step that trained.
fn stepped(
    batch: &batch::Batch,
    trained: Trained,
    tested: Option<i64>,
    opd: Option<OpdReport>,
) -> Outcome {
    Outcome::Stepped(Box::new(Stepped {
        run: trained.run_id,
        step: trained.report.step,
        samples: batch.samples.len(),
        siblings: batch.siblings,
        datums: batch.data.len(),
        tokens: batch.tokens,
        loss: trained.report.loss,
        mean_reward: batch.mean_reward,
        kl_sampler_learner: trained.kl,
        entropy: trained.entropy,
        sampler_path: trained.sampler_path,
        policy_version: trained.report.step,
        checkpoint: trained.report.saved,
        under_test: tested,
        opd,
    }))
}

/// How a test ended, as recorded.
struct Decision<'a> {
    promote: bool,
    /// The experiment's state: `promoted` or `rolled_back`.
    state: &'static str,
    by: &'a str,
    reason: &'a str,
    now: i64,
}

/// The experiment's state at the end of a test, and what was done.
fn test_ending(promote: bool, d: &WeightsTest, reason: &str) -> (&'static str, String) {
    match promote {
        true => (
            "promoted",
            format!(
                "step {}'s weights promoted: they serve every session ({reason})",
                d.candidate_version
            ),
        ),
        false => (
            "rolled_back",
            format!(
                "step {}'s weights rolled back: step {}'s serve every session and training goes on from the state before ({reason})",
                d.candidate_version, d.incumbent_version
            ),
        ),
    }
}

/// A store error inside the decision's transaction.
fn in_decision(r: anyhow::Result<()>) -> crate::store::sql::Result<()> {
    r.map_err(|e| crate::store::sql::Error::Arg(e.to_string()))
}

/// The end of a test, in one transaction: what the run serves (and, when
/// rolled back, where it trains on from), and the experiment's decision.
fn record_decision(
    conn: &crate::store::sql::Conn,
    test: &Test,
    agent: &str,
    decision: &Decision<'_>,
) -> Result<(), TrainError> {
    let d = &test.detail;
    let now = decision.now;
    conn.unchecked_transaction()
        .and_then(|tx| {
            match decision.promote {
                true => in_decision(crate::store::training::serve(
                    &tx,
                    &d.run,
                    &d.candidate_sampler,
                    d.candidate_version,
                    now,
                ))?,
                false => roll_back_test(&tx, test, agent, now)?,
            }
            experiments::decide(
                &tx,
                test.id,
                decision.state,
                decision.by,
                decision.reason,
                now,
            )?;
            tx.commit()
        })
        .map_err(TrainError::record("the canary's decision was not recorded"))
}

/// A rollback's writes: the incumbent served, the run back to the state
/// the candidate's step started from, the verdict judging only later
/// steps (a pause stands), and the candidate's samples not trained.
fn roll_back_test(
    tx: &crate::store::sql::Conn,
    test: &Test,
    agent: &str,
    now: i64,
) -> crate::store::sql::Result<()> {
    let d = &test.detail;
    in_decision(crate::store::training::serve(
        tx,
        &d.run,
        &d.incumbent_sampler,
        d.incumbent_version,
        now,
    ))?;
    in_decision(crate::store::training::go_back_to(
        tx,
        &d.run,
        &d.trained_from,
        d.candidate_version,
        now,
    ))?;
    let paused = crate::store::training::health_mark(tx, &d.run)
        .map(|m| m.paused)
        .unwrap_or_default();
    in_decision(crate::store::training::set_health_mark(
        tx,
        &d.run,
        &crate::store::training::HealthMark {
            since_step: d.candidate_version,
            paused,
        },
    ))?;
    let why = format!(
        "sampled by weights a canary rolled back (experiment {})",
        test.id
    );
    train_queue::skip_version(tx, agent, d.candidate_version, &why)?;
    Ok(())
}

/// When promoted weights began to serve everyone, kept with their step
/// (a failure is only logged).
fn note_promoted_served(
    conn: &crate::store::sql::Conn,
    d: &WeightsTest,
    incarnation: i64,
    now: i64,
) {
    let served = TrainerMetrics {
        served_at_ms: Some(now),
        ..TrainerMetrics::default()
    };
    if let Err(e) = crate::store::training::annotate_step(
        conn,
        &d.run,
        d.candidate_version,
        incarnation,
        &served,
    ) {
        tracing::warn!(
            "step {}: when it began to serve was not stored: {e:#}",
            d.candidate_version
        );
    }
}

/// A step's new weights, as a canary tests them.
struct Candidate {
    run: String,
    sampler: String,
    version: i64,
    /// The training state the step saved.
    state: Option<String>,
    /// The training state the step started from.
    trained_from: String,
}

/// Canaries of new weights (`canary.weights`; docs/learning.md
/// "Canaries"): the incumbent serves every session but the candidate
/// arm's, no step trains meanwhile, and the test (or the collapse guard,
/// or the user) ends it.
impl Trainer {
    /// Starts testing a step's weights: the incumbent moves to a model of
    /// its own where it is the training model's (skyrl samples a
    /// checkpoint through its model's adapter, which now holds the
    /// candidate), the run's record goes on serving it (a restart serves
    /// it), and the candidate serves its arm. The experiment's id.
    async fn start_test(
        &mut self,
        conn: &crate::store::sql::Conn,
        candidate: Candidate,
    ) -> Result<i64, TrainError> {
        let settings = self.settings.canary.clone().ok_or(TrainError::CanaryOff)?;
        let state = candidate.state.clone().ok_or(TrainError::NoSavedState)?;
        let (served, version) = self.policy.served().ok_or(TrainError::NotServing)?;
        let run = self.run.as_mut().ok_or(TrainError::NoRun)?;
        let own = format!("tinker://{}/", run.model().model_id);
        let (incumbent, incumbent_state) = match (served.as_str(), version) {
            ("base", 0) => {
                // The base weights: the run's untrained LoRA serves them.
                let copy = run
                    .serving_copy(&candidate.trained_from, 0)
                    .await
                    .map_err(TrainError::about("cannot serve the base weights beside it"))?;
                (copy, candidate.trained_from.clone())
            }
            (path, _) if path.starts_with(&own) => {
                let state = state_of(conn, &candidate.run, path)?
                    .ok_or_else(|| TrainError::NotSavedAsState(path.to_string()))?;
                let copy = run
                    .serving_copy(&state, version)
                    .await
                    .map_err(TrainError::about("cannot serve the incumbent beside it"))?;
                (copy, state)
            }
            (path, _) => {
                let state = state_of(conn, &candidate.run, path)?.unwrap_or_default();
                (path.to_string(), state)
            }
        };
        if incumbent != served {
            // The same weights, from a model of their own.
            swap(&self.serving, &self.policy, &incumbent, version).await?;
        }
        let detail = WeightsTest {
            run: candidate.run.clone(),
            candidate_sampler: candidate.sampler.clone(),
            candidate_version: candidate.version,
            candidate_state: state,
            incumbent_sampler: incumbent.clone(),
            incumbent_version: version,
            incumbent_state,
            trained_from: candidate.trained_from.clone(),
        };
        let now = crate::clock::now_ms();
        let origin = format!("train step {} of run {}", candidate.version, candidate.run);
        let id = experiments::start_weights(conn, &detail, settings.share, &origin, now)
            .and_then(|id| {
                crate::store::training::serve(conn, &candidate.run, &incumbent, version, now)
                    .map_err(|e| crate::store::sql::Error::Arg(e.to_string()))?;
                Ok(id)
            })
            .map_err(TrainError::record("the experiment's record"))?;
        if let Err(e) =
            test_candidate(&self.serving, &self.policy, &detail, id, settings.share).await
        {
            let why = TrainError::CandidateUnsampled(e.to_string());
            let _ = experiments::decide(conn, id, "abandoned", "test", &why.to_string(), now);
            let _ = crate::store::training::serve(
                conn,
                &candidate.run,
                &candidate.sampler,
                candidate.version,
                now,
            );
            return Err(why);
        }
        let said = format!(
            "step {}'s weights under test (experiment {id}) beside step {version}'s",
            candidate.version
        );
        tracing::info!(experiment = id, "canary: {said}");
        set(&self.state, |s| s.canary = Some(said));
        self.test = Some(Test { id, detail });
        Ok(id)
    }

    /// Runs the test again on the judged sessions, after the collapse
    /// guard; ends it when either says so.
    async fn check_test(&mut self) {
        let (Some(settings), Some(test)) = (self.settings.canary.clone(), self.test.clone()) else {
            return;
        };
        self.serve_candidate(settings.share).await;
        let looked = self
            .settings
            .db
            .read()
            .map_err(TrainError::store)
            .and_then(|conn| {
                let record =
                    TrainError::record::<crate::store::sql::Error>("the experiment's record");
                let e = experiments::get(&conn, test.id)
                    .map_err(record)?
                    .ok_or(TrainError::TestRecordGone)?;
                let (candidate, control) =
                    experiments::arm_answers(&conn, test.id, &test.detail).map_err(record)?;
                let (rc, rk) = experiments::arm_rewards(&conn, test.id).map_err(record)?;
                if let Some(why) = super::canary::collapse(&candidate, &control, (&rc, &rk)) {
                    return Ok(Some(("rolled_back", "collapse", why)));
                }
                // The same rewards, read once for the guard and the test.
                let evidence = crate::learn::canary::evidence_of(&rc, &rk, &settings);
                Ok(crate::learn::canary::verdict(
                    &e,
                    evidence,
                    &settings,
                    crate::clock::now_ms(),
                ))
            });
        let (state, by, reason) = match looked {
            Ok(Some(decided)) => decided,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(
                    experiment = test.id,
                    "the weights under test were not decided: {e}"
                );
                return;
            }
        };
        if let Err(e) = self.end_test(state == "promoted", by, &reason).await {
            tracing::warn!(experiment = test.id, "{e}");
        }
    }

    /// Ends the test: promoted, the candidate serves everyone and the run
    /// trains on from it; rolled back, the incumbent serves everyone, the
    /// run trains on from the state the candidate's step started from, and
    /// the samples the candidate drew are not trained. What was done.
    async fn end_test(
        &mut self,
        promote: bool,
        by: &str,
        reason: &str,
    ) -> Result<String, TrainError> {
        let test = self.test.clone().ok_or(TrainError::NoTest)?;
        let d = &test.detail;
        let conn = self.settings.db.side_writer().map_err(TrainError::store)?;
        let now = crate::clock::now_ms();
        let (state, said) = test_ending(promote, d, reason);
        // Serving first (no turn waits on the store), then one transaction.
        self.policy.end_test(promote);
        let agent = self.settings.spec.agent.clone();
        let decision = Decision {
            promote,
            state,
            by,
            reason,
            now,
        };
        let written = record_decision(&conn, &test, &agent, &decision);
        self.test = None;
        if !promote {
            // Opened again before the next step, from the state before.
            self.run = None;
        }
        if promote && let Some(run) = &self.run {
            note_promoted_served(&conn, d, run.record().incarnation, now);
        }
        written?;
        tracing::warn!(experiment = test.id, "canary {state}: {said}");
        set(&self.state, |s| s.canary = Some(said.clone()));
        Ok(said)
    }

    /// The user's decision (`experiments promote|rollback`).
    async fn decide_by_user(
        &mut self,
        id: i64,
        promote: bool,
        why: &str,
    ) -> Result<Experiment, TrainError> {
        match &self.test {
            Some(test) if test.id == id => {}
            _ => return Err(TrainError::NotUnderTest(id)),
        }
        let reason = match promote {
            true => format!("promoted by hand: {why}"),
            false => format!("rolled back by hand: {why}"),
        };
        self.end_test(promote, "user", &reason).await?;
        let conn = self.settings.db.read().map_err(TrainError::store)?;
        experiments::get(&conn, id)
            .map_err(TrainError::record("the experiment's record"))?
            .ok_or(TrainError::ExperimentGone(id))
    }

    /// Weights under test when the last process stopped: tested on, the
    /// candidate saved anew from the run's state (its last, under a
    /// canary); rolled back where that is not so, or `canary.weights` is
    /// off now (untested weights are never promoted by a restart).
    async fn resume_test(&mut self) {
        let open = self
            .settings
            .db
            .read()
            .map_err(TrainError::store)
            .and_then(|conn| {
                let open = experiments::testing(&conn, "weights")
                    .map_err(TrainError::record("the experiment's record"))?;
                // This trainer's run's tests alone (another agent's run has
                // its own trainer).
                let agent = &self.settings.spec.agent;
                let ours = |run: &str| {
                    crate::store::training::get(&conn, run)
                        .ok()
                        .flatten()
                        .map_or(agent.is_empty(), |r| &r.agent == agent)
                };
                Ok(open
                    .into_iter()
                    .filter(|e| ours(&e.subject))
                    .map(|e| (e.id, experiments::weights_test(&conn, e.id).ok().flatten()))
                    .collect::<Vec<_>>())
            });
        let open = match open {
            Ok(open) => open,
            Err(e) => {
                tracing::warn!("the weights under test were not read: {e}");
                return;
            }
        };
        for (id, detail) in open {
            let Some(detail) = detail else {
                if let Ok(conn) = self.settings.db.side_writer() {
                    let _ = experiments::decide(
                        &conn,
                        id,
                        "abandoned",
                        "test",
                        "its record is unreadable",
                        crate::clock::now_ms(),
                    );
                }
                continue;
            };
            self.test = Some(Test {
                id,
                detail: detail.clone(),
            });
            let resumed = match &self.settings.canary {
                None => Err(TrainError::CanaryOffSince),
                Some(settings) => self.test_again(id, detail, settings.share).await,
            };
            if let Err(why) = resumed {
                let reason = format!("not tested on after a restart: {why}");
                if let Err(e) = self.end_test(false, "test", &reason).await {
                    tracing::warn!(experiment = id, "{e}");
                }
            }
        }
    }

    async fn test_again(
        &mut self,
        id: i64,
        mut detail: WeightsTest,
        share: f64,
    ) -> Result<(), TrainError> {
        let run = self.open_run().await?;
        if run.record().id != detail.run
            || run.record().state_step != Some(detail.candidate_version)
        {
            return Err(TrainError::StateMoved(detail.candidate_version));
        }
        // What the record serves: the incumbent, loaded again by this
        // process (`reload_saved_weights`).
        let incumbent = match (&run.record().sampler_path, run.record().sampler_step) {
            (Some(path), Some(version)) if version == detail.incumbent_version => path.clone(),
            _ => {
                return Err(TrainError::NoLongerServes(detail.incumbent_version));
            }
        };
        let sampler = run.save_sampler().await?;
        let conn = self.settings.db.side_writer().map_err(TrainError::store)?;
        let now = crate::clock::now_ms();
        crate::store::training::serve(
            &conn,
            &detail.run,
            &incumbent,
            detail.incumbent_version,
            now,
        )
        .map_err(TrainError::store)?;
        detail.candidate_sampler = sampler;
        detail.incumbent_sampler = incumbent;
        experiments::set_weights_test(&conn, id, &detail)
            .map_err(TrainError::record("the experiment's record"))?;
        tracing::info!(
            experiment = id,
            "canary: step {}'s weights tested on after a restart",
            detail.candidate_version
        );
        self.test = Some(Test { id, detail });
        // Served to its arm once the student is connected (`check_test`).
        self.serve_candidate(share).await;
        Ok(())
    }

    /// Serves the weights under test to their arm, if the student is
    /// connected and they are not served yet (after a restart, the
    /// connection comes in the background).
    async fn serve_candidate(&mut self, share: f64) {
        let Some(test) = &self.test else { return };
        if self.policy.served().is_none()
            || self
                .policy
                .under_test()
                .is_some_and(|c| c.experiment == test.id)
        {
            return;
        }
        if let Err(e) =
            test_candidate(&self.serving, &self.policy, &test.detail, test.id, share).await
        {
            tracing::warn!(
                experiment = test.id,
                "the weights under test are not served yet: {e}"
            );
        }
    }
}

/// Serves the candidate to its arm; on the serving runtime, as a swap.
async fn test_candidate(
    serving: &tokio::runtime::Handle,
    policy: &Arc<Policy>,
    detail: &WeightsTest,
    id: i64,
    share: f64,
) -> Result<(), TrainError> {
    let (path, version) = (detail.candidate_sampler.clone(), detail.candidate_version);
    on_serving(serving, policy, move |policy| async move {
        policy
            .test_candidate(&path, version, id, share)
            .await
            .map_err(TrainError::from)
    })
    .await
}

/// Runs `work` on the serving runtime (samplers belong to the policy's
/// session, which lives there).
async fn on_serving<F, Fut>(
    serving: &tokio::runtime::Handle,
    policy: &Arc<Policy>,
    work: F,
) -> Result<(), TrainError>
where
    F: FnOnce(Arc<Policy>) -> Fut,
    Fut: std::future::Future<Output = Result<(), TrainError>> + Send + 'static,
{
    serving
        .spawn(work(policy.clone()))
        .await
        .map_err(|e| TrainError::SwapStopped(e.to_string()))?
}

/// The training state the sampler weights at `sampler` were saved with or
/// loaded from: the step that saved them, else a weights test whose
/// incumbent they are.
fn state_of(
    conn: &crate::store::sql::Conn,
    run: &str,
    sampler: &str,
) -> Result<Option<String>, TrainError> {
    if let Some(state) = state_saved_with(conn, run, sampler)? {
        return Ok(Some(state));
    }
    let tests = experiments::testing(conn, "weights")
        .map_err(TrainError::record("the experiment's record"))?;
    Ok(tests.iter().find_map(|e| {
        experiments::weights_test(conn, e.id)
            .ok()
            .flatten()
            .filter(|t| t.incumbent_sampler == sampler && !t.incumbent_state.is_empty())
            .map(|t| t.incumbent_state)
    }))
}

/// Serves `path` (policy version `version`) from now on. The swap runs on
/// the serving runtime, on the policy's own session.
async fn swap(
    serving: &tokio::runtime::Handle,
    policy: &Arc<Policy>,
    path: &str,
    version: i64,
) -> Result<(), TrainError> {
    let path = path.to_string();
    on_serving(serving, policy, move |policy| async move {
        policy.swap(&path, version).await.map_err(TrainError::from)
    })
    .await
}

/// The training state saved by the step whose sampler weights are
/// `sampler` (`None`: that step saved none).
fn state_saved_with(
    conn: &crate::store::sql::Conn,
    run: &str,
    sampler: &str,
) -> Result<Option<String>, TrainError> {
    let steps = crate::store::training::steps(conn, run, 10_000)
        .map_err(TrainError::record("the training run's record"))?;
    Ok(steps.iter().find_map(|s| {
        let ours = s.ours();
        (ours.sampler.as_deref() == Some(sampler))
            .then_some(ours.checkpoint)
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
