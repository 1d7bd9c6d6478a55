//! The fake's state: sessions, training models with their `seq_id` order,
//! samplers, checkpoints and futures, the faults each base model asks
//! for, the server's options, and what it saw (for tests to check). One
//! mutex: the fake serves tests, not load.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use metaclaw_tinker::types::{
    Datum, ForwardBackwardResult, LoraConfig, LossFn, Sampled, Sequence, Stop, StopReason,
    TensorData,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::bigram::{VOCAB, Weights};

/// The base model the fake trains; `NAME@fault=n,…` adds faults.
pub const BASE_MODEL: &str = "fake-bigram";

/// What a 402 (the `http402` fault) says.
pub const NO_CREDIT: &str = "billing: the account has no credit left";

/// Faults of one base model, each counted down per poll of one of its
/// futures (in this order); `http402` also on the direct calls about the
/// model (`get_info`, `weights_info`); `metadata` on a poll that finds
/// the result ready and allows a metadata-only answer; `slow_ms` for every
/// future.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    pub drop: u32,
    pub http500: u32,
    pub http429: u32,
    pub http402: u32,
    pub http408: u32,
    pub http410: u32,
    pub try_again: u32,
    pub metadata: u32,
    pub slow_ms: u64,
    /// The Nth `forward_backward` of this base model (counted from 1, over
    /// all its models) runs, but its future never completes: a client
    /// waiting on it can be killed in the middle of a step.
    pub stall_fwdbwd: u32,
    /// The Nth save of this base model (`save_weights` and
    /// `save_weights_for_sampler` counted together, from 1, over all its
    /// models) is written, but its future never completes: a client can be
    /// killed in the middle of a save, the checkpoint on the service and
    /// its path never known to it.
    pub stall_save: u32,
    /// The Nth save (counted as for `stall_save`) is refused: nothing is
    /// written, and its future answers a failure.
    pub fail_save: u32,
    /// `forward_backward`s submitted so far (for `stall_fwdbwd`).
    fwdbwd_submitted: u32,
    /// Saves submitted so far (for `stall_save`, `fail_save`).
    saves_submitted: u32,
}

impl Faults {
    /// `fake-bigram@try_again=2,http410=1,slow=200`; `None` for a model
    /// the fake does not have.
    pub fn parse(base_model: &str) -> Option<Self> {
        let (name, spec) = base_model.split_once('@').unwrap_or((base_model, ""));
        if name != BASE_MODEL {
            return None;
        }
        let mut faults = Faults::default();
        for item in spec.split(',').filter(|s| !s.is_empty()) {
            let (key, n) = item.split_once('=').unwrap_or((item, "1"));
            let n: u64 = n.parse().ok()?;
            let count = u32::try_from(n).ok()?;
            match key {
                "drop" => faults.drop = count,
                "http500" => faults.http500 = count,
                "http429" => faults.http429 = count,
                "http402" => faults.http402 = count,
                "http408" => faults.http408 = count,
                "http410" => faults.http410 = count,
                "try_again" => faults.try_again = count,
                "metadata" => faults.metadata = count,
                "slow" => faults.slow_ms = n,
                "stall_fwdbwd" => faults.stall_fwdbwd = count,
                "stall_save" => faults.stall_save = count,
                "fail_save" => faults.fail_save = count,
                _ => return None,
            }
        }
        Some(faults)
    }
}

/// How the fake presents itself: what its `client/config` says (one
/// server, one config; faults are per base model).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// `proto_compress_fwdbwd: true`: clients send protobuf
    /// `forward_backward` bodies zstd-compressed.
    pub compress: bool,
    /// A server of the JSON dialect (SDK 0.23–0.24 era): its config says
    /// `proto_write_fwdbwd: false`, and a protobuf body is refused (422).
    pub json_only: bool,
    /// The only `X-API-Key` accepted (others get 401); `None`: any.
    pub api_key: Option<&'static str>,
}

/// What the fake saw, for tests to check (`GET /api/v1/fake/seen`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    /// `forward_backward` bodies, by kind (`zstd` ones are protobuf too).
    pub fwdbwd_json: u64,
    pub fwdbwd_protobuf: u64,
    pub fwdbwd_zstd: u64,
    /// Protobuf bodies refused because of `json_only`.
    pub fwdbwd_refused: u64,
    /// Polls answered `complete_metadata`.
    pub complete_metadata: u64,
    /// Futures held unanswered (`stall_fwdbwd`, `stall_save`): a test
    /// waits for this before it kills the client.
    pub stalled: u64,
}

/// A training model as the fake sees it, for tests to compare with what a
/// client says it did (`GET /api/v1/fake/models`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelReport {
    pub session: String,
    pub base_model: String,
    /// Optimiser steps in its weights, counting those of the checkpoint it
    /// loaded.
    pub steps: u64,
    /// The checkpoint its weights were loaded from.
    pub loaded_from: Option<String>,
    /// `forward_backward`s run on it.
    pub forward_backwards: u64,
    /// Gradients accumulated that no optimiser step has applied.
    pub unapplied_gradients: bool,
}

/// A finished operation's result.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Json(Value),
    ForwardBackward(ForwardBackwardResult),
    Sample(Sampled),
    /// The operation failed: skyrl's shape (HTTP 400 `{"detail"}`).
    Failed(String),
}

pub struct Future {
    /// The base model whose faults apply to its polls.
    group: String,
    /// Never answered (`stall_fwdbwd`).
    stalled: bool,
    ready_at: Instant,
    /// `None` while it waits for earlier `seq_id`s.
    reply: Option<Reply>,
}

/// What a poll of a future gets.
pub enum Poll {
    Reply(Reply),
    /// Done; the result's size, for a client to fetch it next poll.
    Metadata(usize),
    TryAgain,
    Status(u16),
    Drop,
    Unknown,
}

/// An `asample` request, read.
pub struct SampleRequest<'a> {
    pub prompt: &'a [i32],
    pub num_samples: usize,
    pub max_tokens: usize,
    pub temperature: f32,
    pub stop: &'a Stop,
    pub seed: u64,
    pub prompt_logprobs: bool,
}

/// A training-side operation, run in `seq_id` order.
#[derive(Debug, Clone)]
pub enum Op {
    ForwardBackward {
        data: Vec<Datum>,
        loss: LossFn,
        forward_only: bool,
    },
    OptimStep {
        learning_rate: f32,
    },
    SaveWeights {
        name: String,
    },
    SaveForSampler {
        name: Option<String>,
    },
    LoadWeights {
        path: String,
    },
    /// A call refused by a fault (`fail_save`): answered this failure.
    Fail(String),
}

struct Model {
    base_model: String,
    lora: LoraConfig,
    weights: Weights,
    grad: Vec<f32>,
    /// What the fake reports of it (`GET /api/v1/fake/models`).
    report: ModelReport,
    next_seq: i64,
    /// Submitted ahead of their turn: seq → (payload, request id, op).
    waiting: BTreeMap<i64, (Value, String, Op)>,
    /// Done: seq → (payload, reply), for retries.
    done: HashMap<i64, (Value, Reply)>,
}

struct Checkpoint {
    kind: &'static str,
    weights: Weights,
    /// Optimiser steps in the weights.
    steps: u64,
    base_model: String,
    lora: LoraConfig,
    at: u64,
}

#[derive(Default)]
pub struct State {
    pub options: Options,
    pub seen: Seen,
    next_id: u64,
    sessions: HashMap<String, ()>,
    models: HashMap<String, Model>,
    /// Sampling sessions: base model, weights, and the training model
    /// whose checkpoint they sample (skyrl samples a checkpoint through its
    /// model's adapter: once the model is unloaded, they fail).
    samplers: HashMap<String, (String, Weights, Option<String>)>,
    checkpoints: BTreeMap<String, Checkpoint>,
    futures: HashMap<String, Future>,
    faults: HashMap<String, Faults>,
    /// Token sequences the next samples return instead of sampling
    /// (`POST /api/v1/fake/script`), first in first out.
    script: std::collections::VecDeque<Vec<i32>>,
}

impl State {
    pub fn new(options: Options) -> Self {
        Self {
            options,
            ..Self::default()
        }
    }

    fn id(&mut self, prefix: &str) -> String {
        self.next_id += 1;
        format!("{prefix}{}", self.next_id)
    }

    fn future(&mut self, group: &str, reply: Option<Reply>) -> String {
        let slow = self.faults.get(group).map_or(0, |f| f.slow_ms);
        let id = self.id("");
        self.futures.insert(
            id.clone(),
            Future {
                group: group.to_string(),
                stalled: false,
                ready_at: Instant::now() + Duration::from_millis(slow),
                reply,
            },
        );
        id
    }

    pub fn create_session(&mut self) -> String {
        let id = self.id("session_");
        self.sessions.insert(id.clone(), ());
        id
    }

    pub fn heartbeat(&self, session: &str) -> bool {
        self.sessions.contains_key(session)
    }

    /// Ends a session as a server would after missed heartbeats: its
    /// models are unloaded (skyrl 0.3.0 does so 300 s after the last
    /// heartbeat), so samplers on their checkpoints fail from now on.
    pub fn expire(&mut self, session: &str) {
        self.sessions.remove(session);
        self.models.retain(|_, m| m.report.session != session);
    }

    pub fn create_model(
        &mut self,
        session: &str,
        base_model: &str,
        lora: LoraConfig,
    ) -> Result<String, String> {
        if !self.sessions.contains_key(session) {
            return Err(format!("unknown session {session}"));
        }
        let faults = Faults::parse(base_model).ok_or_else(|| {
            format!("unknown base model {base_model:?} (this server has {BASE_MODEL})")
        })?;
        self.faults.entry(base_model.to_string()).or_insert(faults);
        let model_id = self.id("model_");
        self.models.insert(
            model_id.clone(),
            Model {
                base_model: base_model.to_string(),
                lora,
                weights: Weights::default(),
                grad: vec![0.0; VOCAB * VOCAB],
                report: ModelReport {
                    session: session.to_string(),
                    base_model: base_model.to_string(),
                    ..ModelReport::default()
                },
                next_seq: 1,
                waiting: BTreeMap::new(),
                done: HashMap::new(),
            },
        );
        // Faults are for the model's training and sampling futures.
        let created = Reply::Json(json!({ "model_id": model_id }));
        Ok(self.future("", Some(created)))
    }

    /// `get_info`: the reference's shape, with the LoRA's settings as
    /// `weights_info` gives them.
    pub fn info(&mut self, model_id: &str) -> Result<Value, (u16, String)> {
        let m = self
            .models
            .get(model_id)
            .ok_or_else(|| (404, format!("unknown model {model_id}")))?;
        let mut info = lora_info(&m.lora);
        info["model_id"] = json!(model_id);
        info["model_name"] = json!(m.base_model);
        info["model_data"] = json!({
            "arch": "bigram", "model_name": m.base_model, "tokenizer_id": BASE_MODEL,
        });
        let group = m.base_model.clone();
        self.billing(&group)?;
        Ok(info)
    }

    /// A direct call about `group`'s model, refused while its `http402`
    /// lasts.
    fn billing(&mut self, group: &str) -> Result<(), (u16, String)> {
        match self.faults.get_mut(group) {
            Some(f) if f.http402 > 0 => {
                f.http402 -= 1;
                Err((402, NO_CREDIT.into()))
            }
            _ => Ok(()),
        }
    }

    /// A training-side request: queued in `seq_id` order, run when its
    /// turn comes. A retry (same seq, same payload) gets the same result;
    /// another payload under a used seq is a conflict (409).
    pub fn submit(
        &mut self,
        model_id: &str,
        seq: i64,
        payload: Value,
        op: Op,
    ) -> Result<String, (u16, String)> {
        let Some(model) = self.models.get(model_id) else {
            return Err((404, format!("unknown model {model_id}")));
        };
        let group = model.base_model.clone();
        if seq < model.next_seq {
            return match model.done.get(&seq) {
                Some((p, reply)) if *p == payload => {
                    let reply = reply.clone();
                    Ok(self.future(&group, Some(reply)))
                }
                _ => Err((
                    409,
                    format!("seq_id {seq} was already used with another request"),
                )),
            };
        }
        if let Some((p, id, _)) = model.waiting.get(&seq) {
            return if *p == payload {
                Ok(id.clone())
            } else {
                Err((
                    409,
                    format!("seq_id {seq} was already used with another request"),
                ))
            };
        }
        let (stall, fail) = match (self.faults.get_mut(&group), &op) {
            (Some(f), Op::ForwardBackward { .. }) => {
                f.fwdbwd_submitted += 1;
                (f.fwdbwd_submitted == f.stall_fwdbwd, false)
            }
            (Some(f), Op::SaveWeights { .. } | Op::SaveForSampler { .. }) => {
                f.saves_submitted += 1;
                let n = f.saves_submitted;
                (n == f.stall_save, n == f.fail_save)
            }
            _ => (false, false),
        };
        let id = self.future(&group, None);
        if stall && let Some(f) = self.futures.get_mut(&id) {
            f.stalled = true;
            self.seen.stalled += 1;
        }
        // Refused in its turn: later calls still wait for its seq_id.
        let op = match fail {
            true => Op::Fail("injected: the save failed".into()),
            false => op,
        };
        if let Some(model) = self.models.get_mut(model_id) {
            model.waiting.insert(seq, (payload, id.clone(), op));
        }
        self.run(model_id);
        Ok(id)
    }

    /// Runs a model's queued operations that are next in line.
    fn run(&mut self, model_id: &str) {
        loop {
            let Some(model) = self.models.get_mut(model_id) else {
                return;
            };
            let Some((payload, id, op)) = model.waiting.remove(&model.next_seq) else {
                return;
            };
            let seq = model.next_seq;
            model.next_seq += 1;
            let reply = self.execute(model_id, op);
            if let Some(model) = self.models.get_mut(model_id) {
                model.done.insert(seq, (payload, reply.clone()));
            }
            if let Some(f) = self.futures.get_mut(&id) {
                f.reply = Some(reply);
            }
        }
    }

    fn execute(&mut self, model_id: &str, op: Op) -> Reply {
        let stamp = self.next_id;
        let Some(model) = self.models.get_mut(model_id) else {
            return Reply::Failed(format!("unknown model {model_id}"));
        };
        match op {
            Op::ForwardBackward {
                data,
                loss,
                forward_only,
            } => {
                if !forward_only {
                    model.report.forward_backwards += 1;
                    model.report.unapplied_gradients = true;
                }
                let grad = (!forward_only).then_some(&mut model.grad);
                match model.weights.forward_backward(&data, loss, grad) {
                    Ok(outputs) => Reply::ForwardBackward(ForwardBackwardResult {
                        loss_fn_output_type: "scalar".into(),
                        loss_fn_outputs: outputs
                            .into_iter()
                            .map(|(logprobs, loss)| {
                                BTreeMap::from([
                                    ("logprobs".to_string(), TensorData::float32(logprobs)),
                                    ("elementwise_loss".to_string(), TensorData::float32(loss)),
                                ])
                            })
                            .collect(),
                        metrics: BTreeMap::new(),
                    }),
                    Err(e) => Reply::Failed(e),
                }
            }
            Op::OptimStep { learning_rate } => {
                let norm = model.weights.step(&mut model.grad, learning_rate);
                model.report.steps += 1;
                model.report.unapplied_gradients = false;
                Reply::Json(json!({"metrics": {
                    "fake/grad_norm": norm,
                    "fake/learning_rate": learning_rate,
                }}))
            }
            Op::Fail(message) => Reply::Failed(message),
            Op::SaveWeights { name } => self.save(model_id, "weights", &name, stamp),
            Op::SaveForSampler { name: Some(name) } => {
                self.save(model_id, "sampler_weights", &name, stamp)
            }
            Op::SaveForSampler { name: None } => {
                let sampler = (
                    model.base_model.clone(),
                    model.weights.clone(),
                    Some(model_id.to_string()),
                );
                let id = self.id("sampling_");
                self.samplers.insert(id.clone(), sampler);
                Reply::Json(json!({ "sampling_session_id": id }))
            }
            Op::LoadWeights { path } => match self.checkpoints.get(&path) {
                Some(c) => {
                    let (weights, steps) = (c.weights.clone(), c.steps);
                    if let Some(model) = self.models.get_mut(model_id) {
                        model.weights = weights;
                        model.report.steps = steps;
                        model.report.loaded_from = Some(path.clone());
                    }
                    Reply::Json(json!({ "path": path }))
                }
                None => Reply::Failed(format!("no checkpoint at {path}")),
            },
        }
    }

    /// The model's weights as a checkpoint at `tinker://model/{segment}/name`.
    fn save(&mut self, model_id: &str, segment: &str, name: &str, at: u64) -> Reply {
        let Some(model) = self.models.get(model_id) else {
            return Reply::Failed(format!("unknown model {model_id}"));
        };
        let path = format!("tinker://{model_id}/{segment}/{name}");
        let checkpoint = Checkpoint {
            kind: if segment == "weights" {
                "training"
            } else {
                "sampler"
            },
            weights: model.weights.clone(),
            steps: model.report.steps,
            base_model: model.base_model.clone(),
            lora: model.lora,
            at,
        };
        self.checkpoints.insert(path.clone(), checkpoint);
        Reply::Json(json!({ "path": path }))
    }

    /// A sampler on the base weights or on a saved checkpoint.
    pub fn create_sampler(
        &mut self,
        base_model: Option<&str>,
        model_path: Option<&str>,
    ) -> Result<String, String> {
        let sampler = match (base_model, model_path) {
            (Some(base), None) => {
                Faults::parse(base).ok_or_else(|| format!("unknown base model {base:?}"))?;
                self.faults
                    .entry(base.to_string())
                    .or_insert_with(|| Faults::parse(base).unwrap_or_default());
                (base.to_string(), Weights::default(), None)
            }
            (None, Some(path)) => {
                let c = self
                    .checkpoints
                    .get(path)
                    .ok_or_else(|| format!("no checkpoint at {path}"))?;
                let owner = path
                    .strip_prefix("tinker://")
                    .and_then(|rest| rest.split('/').next())
                    .map(str::to_string);
                (c.base_model.clone(), c.weights.clone(), owner)
            }
            _ => return Err("give exactly one of base_model and model_path".into()),
        };
        let id = self.id("sampling_");
        self.samplers.insert(id.clone(), sampler);
        Ok(id)
    }

    /// Queues token sequences for the next samples to return.
    pub fn script(&mut self, sequences: Vec<Vec<i32>>) {
        self.script.extend(sequences);
    }

    pub fn sample(&mut self, sampler: &str, request: &SampleRequest<'_>) -> Result<String, String> {
        let (group, weights, owner) = self
            .samplers
            .get(sampler)
            .cloned()
            .ok_or_else(|| format!("unknown sampling session {sampler}"))?;
        if let Some(model) = owner.filter(|m| !self.models.contains_key(m)) {
            // skyrl's words, as a failed future.
            let failed = Reply::Failed(format!("Model {model} not loaded"));
            return Ok(self.future(&group, Some(failed)));
        }
        let sequences = (0..request.num_samples)
            .map(|i| {
                if let Some(tokens) = self.script.pop_front() {
                    return Sequence {
                        stop_reason: StopReason::Stop,
                        logprobs: Some(weights.score(request.prompt, &tokens)),
                        tokens,
                    };
                }
                let seed = request.seed.wrapping_add(i as u64);
                weights.sample(
                    request.prompt,
                    request.max_tokens,
                    request.temperature,
                    request.stop,
                    seed,
                )
            })
            .collect();
        let reply = Reply::Sample(Sampled {
            sequences,
            prompt_logprobs: request
                .prompt_logprobs
                .then(|| weights.prompt_logprobs(request.prompt)),
        });
        Ok(self.future(&group, Some(reply)))
    }

    pub fn checkpoints(&self, model_id: &str) -> Value {
        let prefix = format!("tinker://{model_id}/");
        let list: Vec<Value> = self
            .checkpoints
            .iter()
            .filter(|(path, _)| path.starts_with(&prefix))
            .map(|(path, c)| {
                json!({
                    "checkpoint_id": path.rsplit('/').next().unwrap_or_default(),
                    "checkpoint_type": c.kind,
                    "time": c.at,
                    "tinker_path": path,
                    "public": false,
                })
            })
            .collect();
        json!({ "checkpoints": list })
    }

    /// `weights_info`: the checkpoint's base model and LoRA settings.
    pub fn weights_info(&mut self, path: &str) -> Result<Value, (u16, String)> {
        let c = self
            .checkpoints
            .get(path)
            .ok_or_else(|| (404, format!("no checkpoint at {path}")))?;
        let mut info = lora_info(&c.lora);
        info["base_model"] = json!(c.base_model);
        let group = c.base_model.clone();
        self.billing(&group)?;
        Ok(info)
    }

    /// Every training model, by id.
    pub fn models(&self) -> BTreeMap<String, ModelReport> {
        self.models
            .iter()
            .map(|(id, m)| (id.clone(), m.report.clone()))
            .collect()
    }

    /// A poll of a future: its base model's faults first, then the result
    /// once it is ready (first as `complete_metadata` while that fault
    /// lasts and the poll accepts it).
    pub fn poll(&mut self, request_id: &str, allow_metadata_only: bool) -> Poll {
        let Some(future) = self.futures.get(request_id) else {
            return Poll::Unknown;
        };
        if let Some(f) = self.faults.get_mut(&future.group) {
            for (count, poll) in [
                (&mut f.drop, Poll::Drop),
                (&mut f.http500, Poll::Status(500)),
                (&mut f.http429, Poll::Status(429)),
                (&mut f.http402, Poll::Status(402)),
                (&mut f.http408, Poll::Status(408)),
                (&mut f.http410, Poll::Status(410)),
                (&mut f.try_again, Poll::TryAgain),
            ] {
                if *count > 0 {
                    *count -= 1;
                    if matches!(poll, Poll::Status(410)) {
                        // The promise broke: the client re-submits.
                        self.futures.remove(request_id);
                    }
                    return poll;
                }
            }
        }
        let reply = match self.futures.get(request_id) {
            Some(f) if f.stalled => return Poll::TryAgain,
            Some(f) if Instant::now() >= f.ready_at => match &f.reply {
                Some(reply) => reply.clone(),
                None => return Poll::TryAgain,
            },
            Some(_) => return Poll::TryAgain,
            None => return Poll::Unknown,
        };
        let group = self.futures.get(request_id).map(|f| f.group.clone());
        if let Some(f) = group.and_then(|g| self.faults.get_mut(&g))
            && allow_metadata_only
            && f.metadata > 0
        {
            f.metadata -= 1;
            self.seen.complete_metadata += 1;
            return Poll::Metadata(reply.size());
        }
        Poll::Reply(reply)
    }
}

impl Reply {
    /// About how many bytes the result is (what `complete_metadata` says).
    fn size(&self) -> usize {
        let json = match self {
            Reply::Json(v) => v.clone(),
            Reply::ForwardBackward(r) => json!(r),
            Reply::Sample(s) => json!(s),
            Reply::Failed(m) => json!(m),
        };
        json.to_string().len()
    }
}

/// A LoRA's settings as `get_info` and `weights_info` report them.
fn lora_info(lora: &LoraConfig) -> Value {
    json!({
        "is_lora": true,
        "lora_rank": lora.rank,
        "train_unembed": lora.train_unembed,
        "train_mlp": lora.train_mlp,
        "train_attn": lora.train_attn,
        "optimizer_config": {"type": "adamw"},
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;

    #[test]
    fn faults_are_read_from_the_base_model_name() {
        assert_eq!(Faults::parse("fake-bigram"), Some(Faults::default()));
        let f = Faults::parse("fake-bigram@try_again=2,http410,slow=50").unwrap();
        assert_eq!((f.try_again, f.http410, f.slow_ms), (2, 1, 50));
        let f = Faults::parse("fake-bigram@http402=3,metadata").unwrap();
        assert_eq!((f.http402, f.metadata), (3, 1));
        let f = Faults::parse("fake-bigram@stall_fwdbwd=2,stall_save=3,fail_save=4").unwrap();
        assert_eq!((f.stall_fwdbwd, f.stall_save, f.fail_save), (2, 3, 4));
        assert_eq!(Faults::parse("other"), None);
        assert_eq!(Faults::parse("fake-bigram@nonsense=1"), None);
    }

    #[test]
    fn training_requests_run_in_seq_order_and_retries_are_idempotent() {
        let mut s = State::default();
        let session = s.create_session();
        let created = s
            .create_model(&session, BASE_MODEL, LoraConfig::new(4))
            .unwrap();
        let Poll::Reply(Reply::Json(v)) = s.poll(&created, true) else {
            panic!()
        };
        let model = v["model_id"].as_str().unwrap().to_string();
        // seq 2 arrives first: it waits for seq 1.
        let save = s
            .submit(
                &model,
                2,
                json!({"n": 2}),
                Op::SaveWeights { name: "a".into() },
            )
            .unwrap();
        assert!(matches!(s.poll(&save, false), Poll::TryAgain));
        let step = s
            .submit(
                &model,
                1,
                json!({"n": 1}),
                Op::OptimStep { learning_rate: 0.1 },
            )
            .unwrap();
        assert!(matches!(s.poll(&step, false), Poll::Reply(Reply::Json(_))));
        assert!(matches!(s.poll(&save, false), Poll::Reply(Reply::Json(_))));
        // A retry of seq 1 gets the same answer; another payload is refused.
        let again = s
            .submit(
                &model,
                1,
                json!({"n": 1}),
                Op::OptimStep { learning_rate: 0.1 },
            )
            .unwrap();
        assert!(matches!(s.poll(&again, false), Poll::Reply(Reply::Json(_))));
        let conflict = s.submit(
            &model,
            1,
            json!({"n": 9}),
            Op::OptimStep { learning_rate: 0.1 },
        );
        assert_eq!(conflict.unwrap_err().0, 409);
    }

    #[test]
    fn metadata_comes_first_only_to_a_poll_that_allows_it() {
        let mut s = State::default();
        let session = s.create_session();
        let base = "fake-bigram@metadata=1";
        let created = s.create_model(&session, base, LoraConfig::new(4)).unwrap();
        let Poll::Reply(Reply::Json(v)) = s.poll(&created, true) else {
            panic!()
        };
        let model = v["model_id"].as_str().unwrap().to_string();
        let step = s
            .submit(&model, 1, json!({}), Op::OptimStep { learning_rate: 0.1 })
            .unwrap();
        assert!(matches!(s.poll(&step, false), Poll::Reply(_)));
        assert!(matches!(s.poll(&step, true), Poll::Metadata(n) if n > 0));
        assert!(matches!(s.poll(&step, true), Poll::Reply(_)));
        assert_eq!(s.seen.complete_metadata, 1);
    }

    /// `stall_save=2`: the second save (of either kind) is written but its
    /// future never answers; the saves before and after it do.
    #[test]
    fn the_stalled_save_is_written_and_never_answered() {
        let mut s = State::default();
        let session = s.create_session();
        let base = "fake-bigram@stall_save=2";
        let created = s.create_model(&session, base, LoraConfig::new(4)).unwrap();
        let Poll::Reply(Reply::Json(v)) = s.poll(&created, true) else {
            panic!()
        };
        let model = v["model_id"].as_str().unwrap().to_string();
        let save = |s: &mut State, seq: i64, op: Op| {
            s.submit(&model, seq, json!({ "seq": seq }), op).unwrap()
        };
        let first = save(&mut s, 1, Op::SaveWeights { name: "a".into() });
        assert!(matches!(s.poll(&first, false), Poll::Reply(Reply::Json(_))));
        let stalled = save(
            &mut s,
            2,
            Op::SaveForSampler {
                name: Some("b".into()),
            },
        );
        for _ in 0..3 {
            assert!(matches!(s.poll(&stalled, false), Poll::TryAgain));
        }
        assert_eq!(s.seen.stalled, 1);
        // Written all the same: the service has it, the client never hears.
        let listed = s.checkpoints(&model).to_string();
        assert!(listed.contains("sampler_weights/b"), "{listed}");
        // Other calls go on, the next save included.
        let step = save(&mut s, 3, Op::OptimStep { learning_rate: 0.1 });
        assert!(matches!(s.poll(&step, false), Poll::Reply(Reply::Json(_))));
        let third = save(&mut s, 4, Op::SaveWeights { name: "c".into() });
        assert!(matches!(s.poll(&third, false), Poll::Reply(Reply::Json(_))));
        assert_eq!(s.seen.stalled, 1);
    }

    /// `fail_save=1`: the first save answers a failure and writes nothing;
    /// the model goes on.
    #[test]
    fn the_failed_save_writes_nothing() {
        let mut s = State::default();
        let session = s.create_session();
        let created = s
            .create_model(&session, "fake-bigram@fail_save=1", LoraConfig::new(4))
            .unwrap();
        let Poll::Reply(Reply::Json(v)) = s.poll(&created, true) else {
            panic!()
        };
        let model = v["model_id"].as_str().unwrap().to_string();
        let failed = s
            .submit(&model, 1, json!({}), Op::SaveWeights { name: "a".into() })
            .unwrap();
        assert!(matches!(
            s.poll(&failed, false),
            Poll::Reply(Reply::Failed(_))
        ));
        assert_eq!(s.checkpoints(&model)["checkpoints"], json!([]));
        let next = s
            .submit(&model, 2, json!({}), Op::SaveWeights { name: "b".into() })
            .unwrap();
        assert!(matches!(s.poll(&next, false), Poll::Reply(Reply::Json(_))));
    }
}
