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
//! failed step sends its samples back to the queue.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::advantage::Baselines;
use super::batch;
use crate::policy::Policy;
use crate::store::train_queue;
use crate::tinker::types::{LossFn, TensorData};
use crate::tinker::{AdamParams, RunSpec, Service, TrainingRun};

/// How often the queue is looked at when nothing asks for a step.
const POLL: Duration = Duration::from_secs(5);

/// What the trainer is configured to do.
#[derive(Clone)]
pub struct Settings {
    pub tinker: crate::tinker::Settings,
    pub spec: RunSpec,
    pub batch_size: usize,
    pub loss: LossFn,
    pub learning_rate: f64,
    pub baseline_decay: f64,
    /// Train only when asked (`metaclaw train step`).
    pub manual: bool,
    pub db: PathBuf,
}

/// One step's outcome, as `metaclaw train step` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct Stepped {
    pub run: String,
    pub step: i64,
    pub samples: usize,
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
}

/// Asks the trainer for a step now.
#[derive(Clone)]
pub struct TrainerHandle {
    tx: mpsc::UnboundedSender<Command>,
}

impl TrainerHandle {
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
    generation: Box<dyn Fn() -> u64 + Send>,
    run: Option<TrainingRun>,
    baselines: Baselines,
}

/// Starts the trainer's thread. `generation`: the skill library's
/// generation now.
pub fn spawn(
    settings: Settings,
    policy: Arc<Policy>,
    generation: Box<dyn Fn() -> u64 + Send>,
    cancel: CancellationToken,
) -> std::io::Result<(TrainerHandle, std::thread::JoinHandle<()>)> {
    let (tx, rx) = mpsc::unbounded_channel();
    let serving = tokio::runtime::Handle::current();
    let trainer = Trainer {
        settings,
        policy,
        serving,
        generation,
        run: None,
        baselines: Baselines::default(),
    };
    let thread = crate::learn::spawn_background("metaclaw-train", "training", move || {
        trainer.run(rx, cancel)
    })?;
    Ok((TrainerHandle { tx }, thread))
}

impl Trainer {
    async fn run(
        mut self,
        mut commands: mpsc::UnboundedReceiver<Command>,
        cancel: CancellationToken,
    ) {
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                command = commands.recv() => match command {
                    None => return,
                    Some(Command::Step(reply)) => {
                        let outcome = self.step(1).await;
                        let _ = reply.send(outcome);
                    }
                },
                () = tokio::time::sleep(POLL), if !self.settings.manual => {
                    let size = self.settings.batch_size;
                    match self.step(size).await {
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

    /// A step over at least `min` ready samples (`rl.batch_size` at most).
    async fn step(&mut self, min: usize) -> Result<Outcome, String> {
        let db = &self.settings.db;
        let mut conn = crate::store::open_side_writer(db).map_err(|e| format!("{e:#}"))?;
        let generation = (self.generation)();
        let err = |e: rusqlite::Error| format!("the training queue: {e}");
        train_queue::classify(&conn, generation).map_err(err)?;
        let ready = train_queue::ready(&conn, generation).map_err(err)?;
        let size = self.settings.batch_size.max(1);
        let Some(batch) = batch::build(
            &ready,
            min.max(1),
            size,
            &mut self.baselines,
            self.settings.baseline_decay,
        ) else {
            return Ok(Outcome::Waiting {
                ready: ready.len(),
                batch_size: size,
            });
        };
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
        let policy = self.policy.clone();
        let serving = self.serving.clone();
        let run = self.open_run().await?;
        let run_id = run.record().id.clone();
        let step = run.record().step + 1;
        train_queue::assign(&mut conn, &run_id, step, &batch.samples).map_err(err)?;
        let adam = AdamParams {
            learning_rate,
            ..AdamParams::default()
        };
        let report = match run.step(&batch.data, loss, &BTreeMap::new(), adam).await {
            Ok(report) => report,
            Err(e) => {
                // The service's state is unknown: the run reloads its last
                // saved state, and these samples go back to the queue.
                let saved = run.record().state_step.unwrap_or(0);
                train_queue::rewind(&conn, &run_id, saved).map_err(err)?;
                return Err(e.to_string());
            }
        };
        if report.saved.is_some() {
            train_queue::checkpointed(&conn, &run_id, report.step).map_err(err)?;
        }
        let (kl, entropy) = learner_metrics(&batch.data, &report.outputs);
        let sampler_path = run.save_sampler().await.map_err(|e| e.to_string())?;
        let path = sampler_path.clone();
        let swap = serving.spawn(async move { policy.swap(&path, report.step).await });
        swap.await
            .map_err(|e| format!("the swap stopped: {e}"))?
            .map_err(|e| format!("trained step {} but cannot serve it: {e}", report.step))?;
        Ok(Outcome::Stepped(Stepped {
            run: run_id,
            step: report.step,
            samples: batch.samples.len(),
            datums: batch.data.len(),
            tokens: batch.tokens,
            loss: report.loss,
            mean_reward: batch.mean_reward,
            kl_sampler_learner: kl,
            entropy,
            sampler_path,
            policy_version: report.step,
            checkpoint: report.saved,
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
