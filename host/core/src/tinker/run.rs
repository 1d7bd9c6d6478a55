//! A training run that survives restarts: a LoRA of one base model on one
//! service, its progress kept in the store (`store::training`).
//!
//! Why restarts start from the last saved state. A training model belongs
//! to the session that made it, and a session dies with the process that
//! heartbeats it (skyrl deletes its models 300 s later), so a new process
//! cannot keep training the old model for long. Worse, a process killed
//! between `forward_backward` and `optim_step` leaves gradients
//! accumulated on the service that no one will ever account for (and
//! skyrl 0.3 ignores `seq_id`s, so they cannot be deduplicated away). So a
//! new process always makes a new model and loads the last saved training
//! state (weights and optimiser) into it: the steps the run then reports
//! are the steps in those weights, whatever happened after the save. A
//! call that fails mid-step does the same before the next step. Saving
//! every step (`save_every: 1`) loses nothing.
//!
//! Names never collide: a checkpoint is named by run, incarnation (one per
//! process, or per reload after a failure) and step.

use std::collections::BTreeMap;

use crate::store::instances::{Fence, fenced};
use crate::store::sql::Conn;
use metaclaw_tinker::types::{Datum, ForwardBackwardResult, LossConfig, LossFn};
use serde::Serialize;

use super::Error;
use super::model::{AdamParams, TrainingModel};
use super::session::{Service, Session};
use super::types::LoraConfig;
use crate::store::training::{self, Run};

/// What a run trains and how often it saves.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub base_model: String,
    /// The agent whose own run this is (`agents.<id>.rl`), '' the shared
    /// run: each has its own active run (and LoRA) of a base model.
    pub agent: String,
    pub lora: LoraConfig,
    /// A saved state (`tinker://…/weights/…`) a new run starts from
    /// (`rl.resume_from_ckpt`).
    pub resume_from: Option<String>,
    /// The training state is saved every this many steps (0: only when
    /// asked).
    pub save_every: u32,
}

/// Where the weights of a run just opened came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "weights", rename_all = "snake_case")]
pub enum Opened {
    /// Fresh LoRA weights (or those of `from`, the run's starting point).
    New { from: Option<String> },
    /// The run's last saved state, at `step`; `lost` steps trained after
    /// that save are not in the weights.
    Restored { from: String, step: i64, lost: i64 },
}

/// One step, as the service reported it.
#[derive(Debug, Clone, Serialize)]
pub struct StepReport {
    pub step: i64,
    pub model_id: String,
    pub samples: usize,
    /// Summed over the batch (the protocol's losses are sums): the
    /// service's `loss:sum`, or its per-token `elementwise_loss` added up.
    pub loss: Option<f64>,
    pub metrics: BTreeMap<String, f64>,
    /// The state saved after this step, if one was.
    pub saved: Option<String>,
    /// Per datum, what `forward_backward` returned (the learner's
    /// `logprobs` of every target, …): for metrics computed here.
    #[serde(skip)]
    pub outputs: Vec<BTreeMap<String, super::types::TensorData>>,
}

/// A run being driven by this process.
pub struct TrainingRun {
    db: Conn,
    /// The lead this process drives the run under: every write of the
    /// run's record is fenced by it (`None`: alone on its store).
    fence: Option<Fence>,
    run: Run,
    session: Session,
    model: TrainingModel,
    spec: RunSpec,
}

fn now_ms() -> i64 {
    crate::clock::now_ms()
}

fn store_error(e: anyhow::Error) -> Error {
    Error::Client(format!("the training run's record: {e:#}"))
}

impl TrainingRun {
    /// The active run of `spec.base_model` on `service` (a new one if there
    /// is none, or if `fresh`), in a new session, its weights loaded; its
    /// record written under `fence`.
    pub async fn open(
        service: &Service,
        db: &crate::store::Db,
        spec: RunSpec,
        fresh: bool,
        fence: Option<Fence>,
    ) -> Result<(Self, Opened), Error> {
        let mut conn = db.side_writer().map_err(store_error)?;
        let existing = training::active(&conn, service.url(), &spec.base_model, &spec.agent)
            .map_err(store_error)?
            .filter(|_| !fresh);
        let run = match existing {
            Some(run) if run.lora_rank != spec.lora.rank => {
                return Err(Error::Client(format!(
                    "training run {} trains a rank-{} LoRA and rl.lora_rank is {}: set it back, \
                     or start a new run (`metaclaw tinker train --fresh`)",
                    run.id, run.lora_rank, spec.lora.rank
                )));
            }
            // `rl.resume_from_ckpt` names another checkpoint than the one
            // the run last started from: it overrides the run's own last
            // save, once.
            Some(mut run) if spec.resume_from.is_some() && run.started_from != spec.resume_from => {
                let path = spec.resume_from.clone().unwrap_or_default();
                fenced(&conn, fence.as_ref(), |tx| {
                    training::restart_from(tx, &run.id, &path, run.step, now_ms())
                })
                .map_err(store_error)?;
                tracing::info!(
                    run = %run.id,
                    "rl.resume_from_ckpt changed: the run goes on from {path}, its step counter at {}",
                    run.step
                );
                run.state_path = Some(path.clone());
                run.state_step = Some(run.step);
                run.started_from = Some(path);
                run.pending = None;
                run
            }
            Some(run) => run,
            None => {
                let now = now_ms();
                let run = Run {
                    id: format!("run-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]),
                    service: service.url().to_string(),
                    base_model: spec.base_model.clone(),
                    agent: spec.agent.clone(),
                    lora_rank: spec.lora.rank,
                    model_id: None,
                    last_seq: 0,
                    step: 0,
                    incarnation: 0,
                    pending: None,
                    state_path: None,
                    state_step: None,
                    sampler_path: None,
                    sampler_step: None,
                    started_from: spec.resume_from.clone(),
                    status: "active".into(),
                    created_ms: now,
                    updated_ms: now,
                };
                training::create(&mut conn, &run).map_err(store_error)?;
                run
            }
        };
        let session = service.create_session().await?;
        let mut run = run;
        let (model, opened) = load(&conn, fence.as_ref(), &mut run, &session, &spec).await?;
        let this = Self {
            db: conn,
            fence,
            run,
            session,
            model,
            spec,
        };
        Ok((this, opened))
    }

    /// The lead the run's record is written under from now on (the trainer
    /// renews it before each step: a lease granted again has a new epoch).
    pub fn lead_under(&mut self, fence: Option<Fence>) {
        self.fence = fence;
    }

    /// The run's record as it stands.
    pub fn record(&self) -> &Run {
        &self.run
    }

    /// The model holding the run's weights.
    pub fn model(&self) -> &TrainingModel {
        &self.model
    }

    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Marks a training call as in flight, durably, before it is sent
    /// (`None`: settled with no change to the weights).
    fn pending(&mut self, what: Option<String>) -> Result<(), Error> {
        training::set_pending(
            &self.db,
            self.fence.as_ref(),
            &self.run.id,
            what.as_deref(),
            self.model.last_seq(),
            now_ms(),
        )
        .map_err(store_error)?;
        self.run.pending = what;
        Ok(())
    }

    /// A call is still marked in flight: it failed or was cut short, so
    /// the model's state is unknown until the run's weights are reloaded.
    fn unsettled(&self) -> bool {
        self.run.pending.is_some()
    }

    /// One step: forward/backward over `data`, then the optimiser. The
    /// step counts once the service has applied both; a failure leaves the
    /// model's state unknown, so the next step starts from the last saved
    /// state.
    pub async fn step(
        &mut self,
        data: &[Datum],
        loss: LossFn,
        config: &BTreeMap<String, LossConfig>,
        adam: AdamParams,
    ) -> Result<StepReport, Error> {
        if self.unsettled() {
            let (model, _) = load(
                &self.db,
                self.fence.as_ref(),
                &mut self.run,
                &self.session,
                &self.spec,
            )
            .await?;
            self.model = model;
        }
        let step = self.run.step + 1;
        let first = self.model.last_seq() + 1;
        // From here until the step is recorded, a failure leaves gradients
        // (or a half-applied step) on the service.
        self.pending(Some(format!(
            "step {step}: forward_backward (seq {first}) and optim_step (seq {})",
            first + 1
        )))?;
        let (result, optimiser) = self.model.train_step(data, loss, config, adam).await?;
        let mut metrics = result.metrics.clone();
        metrics.extend(optimiser);
        let loss = summed_loss(&result);
        let record = training::Step {
            step,
            incarnation: self.run.incarnation,
            model_id: self.model.model_id.clone(),
            samples: data.len() as i64,
            loss,
            metrics: serde_json::to_value(&metrics).unwrap_or_default(),
            at_ms: now_ms(),
        };
        training::step_done(
            &self.db,
            self.fence.as_ref(),
            &self.run.id,
            &record,
            self.model.last_seq(),
        )
        .map_err(store_error)?;
        self.run.step = step;
        self.run.last_seq = self.model.last_seq();
        self.run.pending = None;
        let saved = match self.spec.save_every {
            every if every > 0 && step % i64::from(every) == 0 => Some(self.save_state().await?),
            _ => None,
        };
        Ok(StepReport {
            step,
            model_id: self.model.model_id.clone(),
            samples: data.len(),
            loss,
            metrics,
            saved,
            outputs: result.loss_fn_outputs,
        })
    }

    /// A name no other save of this run has had or will have.
    fn name(&self, what: &str) -> String {
        format!(
            "{}-i{}-step{:06}{what}",
            self.run.id, self.run.incarnation, self.run.step
        )
    }

    /// Saves the training state (weights and optimiser): what a restart
    /// starts from.
    pub async fn save_state(&mut self) -> Result<String, Error> {
        self.save(true).await
    }

    /// Saves the weights for sampling; the path to make a sampler from.
    pub async fn save_sampler(&mut self) -> Result<String, Error> {
        self.save(false).await
    }

    /// Sampler weights of the saved training state at `state` (step
    /// `step`), through a model of their own in this run's session: what
    /// was served before the service dropped it (a rollback) is served
    /// again while the run's training model keeps its own weights.
    pub async fn serving_copy(&self, state: &str, step: i64) -> Result<String, Error> {
        let model = self
            .session
            .create_model(&self.spec.base_model, &self.spec.lora)
            .await?;
        model.load_state(state, false).await?;
        let name = format!(
            "{}-i{}-serve-step{step:06}",
            self.run.id, self.run.incarnation
        );
        model.save_for_sampler(&name).await
    }

    async fn save(&mut self, state: bool) -> Result<String, Error> {
        if self.unsettled() {
            return Err(Error::Client(
                "the training model's state is unknown after a failed step; train a step first"
                    .into(),
            ));
        }
        let name = self.name(if state { "" } else { "-sampler" });
        self.pending(Some(format!("save {name}")))?;
        let path = if state {
            self.model.save_state(&name).await
        } else {
            self.model.save_for_sampler(&name).await
        };
        // A failed save changes no weights: the model stays usable.
        let path = match path {
            Ok(path) => path,
            Err(e) => {
                // If even that cannot be recorded, the call stays marked
                // in flight and the next step reloads: safe, only slower.
                if let Err(store) = self.pending(None) {
                    tracing::warn!(run = %self.run.id, "{store}");
                }
                return Err(e);
            }
        };
        training::saved(
            &self.db,
            self.fence.as_ref(),
            &self.run.id,
            state,
            &path,
            self.run.step,
            self.model.last_seq(),
            now_ms(),
        )
        .map_err(store_error)?;
        if state {
            self.run.state_path = Some(path.clone());
            self.run.state_step = Some(self.run.step);
        } else {
            self.run.sampler_path = Some(path.clone());
            self.run.sampler_step = Some(self.run.step);
        }
        self.run.pending = None;
        Ok(path)
    }
}

/// A new incarnation of `run`: a new model in `session` with the run's
/// weights (its last saved state, else its starting point, else fresh).
async fn load(
    db: &Conn,
    fence: Option<&Fence>,
    run: &mut Run,
    session: &Session,
    spec: &RunSpec,
) -> Result<(TrainingModel, Opened), Error> {
    run.incarnation = training::next_incarnation(db, &run.id, now_ms()).map_err(store_error)?;
    let model = session.create_model(&spec.base_model, &spec.lora).await?;
    let (from, step, opened) = match (&run.state_path, run.state_step) {
        (Some(path), Some(step)) => (
            Some(path.clone()),
            step,
            Opened::Restored {
                from: path.clone(),
                step,
                lost: run.step - step,
            },
        ),
        _ => {
            if run.step > 0 {
                tracing::warn!(
                    run = %run.id,
                    "{} trained steps were never saved: the run starts again from its first weights",
                    run.step
                );
            }
            let from = run.started_from.clone();
            (from.clone(), 0, Opened::New { from })
        }
    };
    if let Some(path) = &from {
        model.load_state(path, true).await?;
    }
    training::set_model(
        db,
        fence,
        &run.id,
        &model.model_id,
        step,
        model.last_seq(),
        now_ms(),
    )
    .map_err(store_error)?;
    run.model_id = Some(model.model_id.clone());
    run.step = step;
    run.last_seq = model.last_seq();
    run.pending = None;
    tracing::info!(run = %run.id, model = %model.model_id, step, "training run loaded: {opened:?}");
    Ok((model, opened))
}

/// The batch's loss: the service's `loss:sum` metric, else the sum of its
/// per-token `elementwise_loss` outputs (skyrl reports no loss metric).
fn summed_loss(result: &ForwardBackwardResult) -> Option<f64> {
    if let Some(sum) = result.metrics.get("loss:sum") {
        return Some(*sum);
    }
    let mut total = None;
    for output in &result.loss_fn_outputs {
        if let Some(losses) = output.get("elementwise_loss") {
            *total.get_or_insert(0.0) += losses.floats().iter().map(|v| f64::from(*v)).sum::<f64>();
        }
    }
    total
}
