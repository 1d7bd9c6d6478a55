//! A training model and a sampler. Every training-side call takes the
//! model's next `seq_id` (from 1) when it is made, so calls may be in
//! flight together and the service still runs them in order; a retry or a
//! re-submission after 410 reuses its `seq_id` and body.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use metaclaw_tinker::convert;
use metaclaw_tinker::types::{
    Datum, ForwardBackwardResult, LossConfig, LossFn, ModelInfo, ModelInput, Sampled, Stop,
};
use serde::Serialize;
use serde_json::{Value, json};

use super::Error;
use super::future::{self, Kind, Submitted, submit_and_wait};
use super::replies::{Checkpoints, OptimStepped, SamplerCreated, Saved};
use super::session::{Dialect, KnownDialect, SessionState};
use super::transport::{Body, Reply, Transport};

/// Adam's settings (defaults as the reference gives them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamParams {
    pub learning_rate: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    pub grad_clip_norm: f64,
}

impl Default for AdamParams {
    fn default() -> Self {
        Self {
            learning_rate: 1e-4,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-12,
            weight_decay: 0.0,
            grad_clip_norm: 0.0,
        }
    }
}

/// How to sample. `None` and `false` are the service's defaults, and are
/// not sent (some servers refuse any field they do not know).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SamplingParams {
    pub max_tokens: u32,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i32>,
    pub seed: Option<u64>,
    /// Token ids or strings to stop at (`None`: the model's end of
    /// sequence).
    pub stop: Option<Stop>,
    /// Also score the prompt: [`Sampled::prompt_logprobs`], one per prompt
    /// token (the first has none). With `max_tokens` 1, this scores a
    /// fixed sequence.
    pub prompt_logprobs: bool,
}

/// A saved checkpoint, as the service lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    pub id: String,
    /// `training` (weights and optimiser state) or `sampler`.
    pub kind: String,
    pub path: String,
}

/// A LoRA being trained.
pub struct TrainingModel {
    transport: Arc<Transport>,
    dialect: KnownDialect,
    session: Arc<SessionState>,
    pub model_id: String,
    /// The last `seq_id` handed out.
    seq: AtomicI64,
}

impl TrainingModel {
    pub(super) fn new(
        transport: Arc<Transport>,
        dialect: KnownDialect,
        session: Arc<SessionState>,
        model_id: String,
        last_seq: i64,
    ) -> Self {
        Self {
            transport,
            dialect,
            session,
            model_id,
            seq: AtomicI64::new(last_seq),
        }
    }

    /// The last `seq_id` this client handed out (to persist, and give to
    /// `Session::attach` after a restart).
    pub fn last_seq(&self) -> i64 {
        self.seq.load(Ordering::SeqCst)
    }

    fn next_seq(&self) -> i64 {
        self.seq.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// A training-side call, unless the service ended the session.
    async fn run(&self, path: &str, body: Body, kind: Kind) -> Result<Reply, Error> {
        self.submit(path, body, kind)
            .await?
            .wait(&self.transport)
            .await
    }

    /// A training-side request submitted, unless the service ended the
    /// session; its result is awaited later.
    async fn submit(&self, path: &str, body: Body, kind: Kind) -> Result<Submitted, Error> {
        self.session.check()?;
        future::submit(&self.transport, path, body, kind).await
    }

    /// One forward and backward pass over `data`: per datum the outputs
    /// (`logprobs` of each target under the current weights, and what else
    /// the server returns), and its metrics. The gradients accumulate until
    /// [`Self::optim_step`].
    pub async fn forward_backward(
        &self,
        data: &[Datum],
        loss: LossFn,
        config: &BTreeMap<String, LossConfig>,
    ) -> Result<ForwardBackwardResult, Error> {
        let submitted = self.submit_forward_backward(data, loss, config).await?;
        forward_backward_result(&submitted.wait(&self.transport).await?)
    }

    /// A train step's two requests, `forward_backward` then `optim_step`,
    /// submitted back to back and only then awaited (reference §15.4: the
    /// next request is enqueued before the previous result is awaited), so
    /// a step costs one wait for results, not two.
    pub async fn train_step(
        &self,
        data: &[Datum],
        loss: LossFn,
        config: &BTreeMap<String, LossConfig>,
        adam: AdamParams,
    ) -> Result<(ForwardBackwardResult, BTreeMap<String, f64>), Error> {
        let gradients = self.submit_forward_backward(data, loss, config).await?;
        let optimiser = self.submit_optim_step(adam).await?;
        let result = forward_backward_result(&gradients.wait(&self.transport).await?)?;
        let metrics = optim_metrics(&optimiser.wait(&self.transport).await?)?;
        Ok((result, metrics))
    }

    /// Submits `forward_backward` in the service's dialect; when it is not
    /// known yet, protobuf first and JSON if the service cannot read it.
    async fn submit_forward_backward(
        &self,
        data: &[Datum],
        loss: LossFn,
        config: &BTreeMap<String, LossConfig>,
    ) -> Result<Submitted, Error> {
        let seq = self.next_seq();
        let dialect = self.dialect.get();
        match dialect {
            Some(Dialect::Json) => {
                self.submit_forward_backward_json(seq, data, loss, config)
                    .await
            }
            Some(Dialect::Protobuf) | None => {
                let body = self.transport.protobuf(convert::forward_backward_body(
                    &self.model_id,
                    seq_i32(seq)?,
                    data,
                    loss,
                    config,
                    false,
                ))?;
                match self
                    .submit("forward_backward", body, Kind::ForwardBackward)
                    .await
                {
                    Ok(submitted) => {
                        self.dialect.set(Dialect::Protobuf);
                        Ok(submitted)
                    }
                    // A server of the JSON dialect cannot read the body.
                    Err(Error::Service {
                        status: 415 | 422, ..
                    }) if dialect.is_none() => {
                        self.dialect.set(Dialect::Json);
                        self.submit_forward_backward_json(seq, data, loss, config)
                            .await
                    }
                    Err(e) => Err(e),
                }
            }
        }
    }

    async fn submit_forward_backward_json(
        &self,
        seq: i64,
        data: &[Datum],
        loss: LossFn,
        config: &BTreeMap<String, LossConfig>,
    ) -> Result<Submitted, Error> {
        let input = ForwardBackwardInput {
            data,
            loss_fn: loss.as_str(),
            loss_fn_config: config,
        };
        let body = json!({
            "model_id": self.model_id, "seq_id": seq, "forward_backward_input": input, "type": "forward_backward",
        });
        self.submit("forward_backward", Body::Json(body), Kind::ForwardBackward)
            .await
    }

    /// Applies the accumulated gradients; the service's metrics.
    pub async fn optim_step(&self, adam: AdamParams) -> Result<BTreeMap<String, f64>, Error> {
        let submitted = self.submit_optim_step(adam).await?;
        optim_metrics(&submitted.wait(&self.transport).await?)
    }

    async fn submit_optim_step(&self, adam: AdamParams) -> Result<Submitted, Error> {
        let body = json!({
            "model_id": self.model_id, "seq_id": self.next_seq(), "type": "optim_step",
            "adam_params": {
                "learning_rate": adam.learning_rate, "beta1": adam.beta1, "beta2": adam.beta2,
                "eps": adam.eps, "weight_decay": adam.weight_decay, "grad_clip_norm": adam.grad_clip_norm,
            },
        });
        self.submit("optim_step", Body::Json(body), Kind::OptimStep)
            .await
    }

    /// Saves weights and optimiser state under `name`; the `tinker://` path.
    pub async fn save_state(&self, name: &str) -> Result<String, Error> {
        let body = json!({
            "model_id": self.model_id, "path": name, "seq_id": self.next_seq(), "type": "save_weights",
        });
        let reply = self
            .run("save_weights", Body::Json(body), Kind::SaveWeights)
            .await?;
        path_of(&reply)
    }

    /// Saves the current weights for sampling under `name`; the path.
    pub async fn save_for_sampler(&self, name: &str) -> Result<String, Error> {
        path_of(&self.snapshot(json!({ "path": name })).await?)
    }

    /// `save_weights_for_sampler`, named (`path`) or not
    /// (`sampling_session_seq_id`).
    async fn snapshot(&self, how: Value) -> Result<Reply, Error> {
        let mut body = json!({
            "model_id": self.model_id, "seq_id": self.next_seq(),
            "kind": "snapshot", "type": "save_weights_for_sampler",
        });
        if let (Some(body), Value::Object(how)) = (body.as_object_mut(), how) {
            body.extend(how);
        }
        self.run(
            "save_weights_for_sampler",
            Body::Json(body),
            Kind::SaveWeightsForSampler,
        )
        .await
    }

    /// A sampler on the current weights (saved without a name).
    pub async fn sampler(&self) -> Result<Sampler, Error> {
        let sampler_seq = self.session.next_sampler.fetch_add(1, Ordering::Relaxed);
        let reply = self
            .snapshot(json!({ "sampling_session_seq_id": sampler_seq }))
            .await?;
        let id = reply
            .decode::<SamplerCreated>("save_weights_for_sampler")?
            .sampling_session_id;
        Ok(Sampler::new(
            self.transport.clone(),
            self.session.clone(),
            id,
        ))
    }

    /// Loads saved state (weights, and the optimiser's with `optimizer`).
    pub async fn load_state(&self, path: &str, optimizer: bool) -> Result<(), Error> {
        let body = json!({
            "model_id": self.model_id, "path": path, "seq_id": self.next_seq(),
            "optimizer": optimizer, "type": "load_weights",
        });
        self.run("load_weights", Body::Json(body), Kind::LoadWeights)
            .await?;
        Ok(())
    }

    /// What the service says of the model: its base model, tokenizer and
    /// LoRA settings.
    pub async fn get_info(&self) -> Result<ModelInfo, Error> {
        let body = Body::Json(json!({"model_id": self.model_id, "type": "get_info"}));
        let reply = self
            .transport
            .call(reqwest::Method::POST, "get_info", Some(body))
            .await?;
        reply.decode("get_info")
    }

    /// The model's checkpoints, as the service lists them.
    pub async fn checkpoints(&self) -> Result<Vec<Checkpoint>, Error> {
        let path = format!("training_runs/{}/checkpoints", self.model_id);
        let reply = self
            .transport
            .call(reqwest::Method::GET, &path, None)
            .await?;
        let listed: Checkpoints = reply.decode("checkpoints")?;
        Ok(listed
            .checkpoints
            .into_iter()
            .map(|c| Checkpoint {
                id: c.checkpoint_id,
                kind: c.checkpoint_type,
                path: c.tinker_path,
            })
            .collect())
    }
}

fn seq_i32(seq: i64) -> Result<i32, Error> {
    i32::try_from(seq)
        .map_err(|_| Error::Client(format!("seq_id {seq} does not fit the protocol's int32")))
}

fn path_of(reply: &Reply) -> Result<String, Error> {
    Ok(reply.decode::<Saved>("a save")?.path)
}

/// An `optim_step`'s metrics.
fn optim_metrics(reply: &Reply) -> Result<BTreeMap<String, f64>, Error> {
    Ok(reply.decode::<OptimStepped>("optim_step")?.metrics())
}

fn forward_backward_result(reply: &Reply) -> Result<ForwardBackwardResult, Error> {
    if reply.protobuf {
        return Ok(convert::forward_backward_result(&reply.bytes)?);
    }
    reply.decode("forward_backward result")
}

/// A sampling session: the weights it samples are fixed when it is made.
pub struct Sampler {
    transport: Arc<Transport>,
    session: Arc<SessionState>,
    pub id: String,
    seq: AtomicI64,
}

impl Sampler {
    pub(super) fn new(transport: Arc<Transport>, session: Arc<SessionState>, id: String) -> Self {
        Self {
            transport,
            session,
            id,
            seq: AtomicI64::new(0),
        }
    }

    /// `num_samples` continuations of `prompt`: the exact tokens sampled
    /// and their logprobs.
    pub async fn sample(
        &self,
        prompt: &[i32],
        params: &SamplingParams,
        num_samples: u32,
    ) -> Result<Sampled, Error> {
        self.session.check()?;
        let seq = self.seq.fetch_add(1, Ordering::SeqCst);
        let body = Body::Json(sample_body(&self.id, seq, prompt, params, num_samples));
        let reply = submit_and_wait(&self.transport, "asample", body, Kind::Sample).await?;
        if reply.protobuf {
            return Ok(convert::sampled(&reply.bytes)?);
        }
        reply.decode("sample result")
    }
}

/// `forward_backward_input`: `loss_fn_config` only when there is one.
#[derive(Serialize)]
struct ForwardBackwardInput<'a> {
    data: &'a [Datum],
    loss_fn: &'a str,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    loss_fn_config: &'a BTreeMap<String, LossConfig>,
}

/// An `asample` request. Defaults are left out: some servers (tuft) refuse
/// any field they do not know.
fn sample_body(
    sampler: &str,
    seq: i64,
    prompt: &[i32],
    params: &SamplingParams,
    num_samples: u32,
) -> Value {
    json!(SampleBody {
        sampling_session_id: sampler,
        seq_id: seq,
        num_samples,
        prompt: ModelInput::tokens(prompt.to_vec()),
        sampling_params: Sampling {
            max_tokens: params.max_tokens,
            temperature: params.temperature,
            top_p: params.top_p,
            top_k: params.top_k,
            seed: params.seed,
            stop: params.stop.as_ref(),
        },
        kind: "sample",
        prompt_logprobs: params.prompt_logprobs,
    })
}

#[derive(Serialize)]
struct SampleBody<'a> {
    sampling_session_id: &'a str,
    seq_id: i64,
    num_samples: u32,
    prompt: ModelInput,
    sampling_params: Sampling<'a>,
    #[serde(rename = "type")]
    kind: &'static str,
    /// Sent only when asked for.
    #[serde(skip_serializing_if = "is_false")]
    prompt_logprobs: bool,
}

/// `sampling_params`: what is not the service's default.
#[derive(Serialize)]
struct Sampling<'a> {
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_k: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop: Option<&'a Stop>,
}

fn is_false(b: &bool) -> bool {
    !b
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_sample_request_sends_only_what_is_not_a_default() {
        let plain = SamplingParams {
            max_tokens: 4,
            ..SamplingParams::default()
        };
        assert_eq!(
            sample_body("s", 2, &[5], &plain, 1),
            json!({
                "sampling_session_id": "s", "seq_id": 2, "num_samples": 1,
                "prompt": {"chunks": [{"type": "encoded_text", "tokens": [5]}]},
                "sampling_params": {"max_tokens": 4}, "type": "sample",
            })
        );
        let full = SamplingParams {
            max_tokens: 1,
            top_k: Some(5),
            seed: Some(9),
            stop: Some(Stop::Strings(vec!["\n\n".into()])),
            prompt_logprobs: true,
            ..SamplingParams::default()
        };
        let body = sample_body("s", 0, &[5, 6], &full, 2);
        assert_eq!(
            body["sampling_params"],
            json!({"max_tokens": 1, "top_k": 5, "seed": 9, "stop": ["\n\n"]})
        );
        assert_eq!(body["prompt_logprobs"], true);
        let tokens = SamplingParams {
            stop: Some(Stop::Tokens(vec![2, 7])),
            ..full
        };
        assert_eq!(
            sample_body("s", 0, &[5], &tokens, 1)["sampling_params"]["stop"],
            json!([2, 7])
        );
    }
}
