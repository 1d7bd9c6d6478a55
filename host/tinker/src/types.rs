//! The Tinker API's JSON types (protocol reference §6): what a training
//! step is made of (with a LoRA's settings and sampling's stops), and what
//! comes back (results, and what `get_info` and `weights_info` tell). Sent strictly (defaults omitted:
//! some servers reject any extra field), read leniently (unknown fields
//! ignored, `null` metrics kept as NaN).

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

/// A model input: token chunks (images and audio are not used here).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ModelInput {
    pub chunks: Vec<Chunk>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Chunk {
    EncodedText { tokens: Vec<i32> },
}

impl ModelInput {
    /// One chunk of tokens; none for no tokens (services refuse an empty
    /// chunk with 400).
    pub fn tokens(tokens: Vec<i32>) -> Self {
        let chunks = match tokens.is_empty() {
            true => Vec::new(),
            false => vec![Chunk::EncodedText { tokens }],
        };
        Self { chunks }
    }

    /// How many tokens the input holds.
    pub fn len(&self) -> usize {
        self.chunks
            .iter()
            .map(|c| match c {
                Chunk::EncodedText { tokens } => tokens.len(),
            })
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A flat tensor: `target_tokens` are int64, the other loss inputs float32.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "dtype", rename_all = "snake_case")]
pub enum TensorData {
    Int64 {
        data: Vec<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shape: Option<Vec<i64>>,
    },
    Float32 {
        #[serde(deserialize_with = "floats_or_nan")]
        data: Vec<f32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shape: Option<Vec<i64>>,
    },
}

impl TensorData {
    pub fn int64(data: Vec<i64>) -> Self {
        Self::Int64 { data, shape: None }
    }

    pub fn float32(data: Vec<f32>) -> Self {
        Self::Float32 { data, shape: None }
    }

    pub fn len(&self) -> usize {
        match self {
            Self::Int64 { data, .. } => data.len(),
            Self::Float32 { data, .. } => data.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values as f32 (an int64 tensor converted).
    pub fn floats(&self) -> Vec<f32> {
        match self {
            Self::Int64 { data, .. } => data.iter().map(|&v| v as f32).collect(),
            Self::Float32 { data, .. } => data.clone(),
        }
    }
}

/// One training example: the model input and, per position, what the loss
/// needs (`target_tokens`, `logprobs`, `advantages`, `weights`). Position
/// *i* of the input predicts `target_tokens[i]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Datum {
    pub model_input: ModelInput,
    pub loss_fn_inputs: BTreeMap<String, TensorData>,
}

/// One turn of a trajectory: the prompt as sent and the tokens sampled,
/// with the sampler's logprob of each and the turn's advantage.
#[derive(Debug, Clone, Copy)]
pub struct TrajectoryStep<'a> {
    pub prompt: &'a [i32],
    pub tokens: &'a [i32],
    pub logprobs: &'a [f32],
    pub advantage: f32,
    /// Per sampled token, added to `advantage` (a distillation or KL term);
    /// empty: nothing added.
    pub token_advantages: &'a [f32],
}

/// Why turns do not form one trajectory example.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TrajectoryError {
    #[error("turn {turn}: {logprobs} logprobs for {sampled} sampled tokens")]
    Logprobs {
        turn: usize,
        logprobs: usize,
        sampled: usize,
    },
    #[error("turn {turn}: {advantages} per-token advantages for {sampled} sampled tokens")]
    Advantages {
        turn: usize,
        advantages: usize,
        sampled: usize,
    },
    #[error("turn {turn}'s prompt does not extend turn {}'s prompt and answer", turn - 1)]
    NotExtending { turn: usize },
    #[error("a trajectory needs at least two tokens")]
    TooShort,
}

impl Datum {
    /// A sampled answer as one policy-gradient example: the prompt and the
    /// exact tokens sampled (never re-tokenised), each answer token with
    /// the sampler's logprob and `advantage`; prompt positions get weight 0
    /// (reference §15.1: position *i* predicts token *i + 1*). Missing
    /// logprobs count as 0.
    pub fn from_sample(prompt: &[i32], sampled: &Sequence, advantage: f32) -> Self {
        let zeros;
        let logprobs = match &sampled.logprobs {
            Some(l) if l.len() == sampled.tokens.len() => l.as_slice(),
            _ => {
                zeros = vec![0.0; sampled.tokens.len()];
                &zeros
            }
        };
        Self::build(&[TrajectoryStep {
            prompt,
            tokens: &sampled.tokens,
            logprobs,
            advantage,
            token_advantages: &[],
        }])
    }

    /// A multi-turn trajectory as one example (reference §15.1): each
    /// turn's prompt must extend the previous turn's prompt and sampled
    /// tokens (the sequence-extension property). Over the whole sequence,
    /// the tokens the model sampled carry their logprob, their turn's
    /// advantage and weight 1; everything else (prompts, tool results,
    /// the user's next message) 0.
    pub fn from_trajectory(steps: &[TrajectoryStep<'_>]) -> Result<Self, TrajectoryError> {
        let mut covered = 0;
        for (turn, step) in steps.iter().enumerate() {
            let sampled = step.tokens.len();
            if step.logprobs.len() != sampled {
                return Err(TrajectoryError::Logprobs {
                    turn,
                    logprobs: step.logprobs.len(),
                    sampled,
                });
            }
            if !step.token_advantages.is_empty() && step.token_advantages.len() != sampled {
                return Err(TrajectoryError::Advantages {
                    turn,
                    advantages: step.token_advantages.len(),
                    sampled,
                });
            }
            if turn > 0 {
                let before = &steps[turn - 1];
                let extends = step.prompt.starts_with(before.prompt)
                    && step.prompt[before.prompt.len()..].starts_with(before.tokens);
                if !extends {
                    return Err(TrajectoryError::NotExtending { turn });
                }
            }
            covered = step.prompt.len() + step.tokens.len();
        }
        if covered < 2 {
            return Err(TrajectoryError::TooShort);
        }
        Ok(Self::build(steps))
    }

    /// The example of steps already checked to extend one another.
    fn build(steps: &[TrajectoryStep<'_>]) -> Self {
        let mut tokens: Vec<i32> = Vec::new();
        let (mut logprobs, mut advantages, mut weights) = (Vec::new(), Vec::new(), Vec::new());
        for step in steps {
            let new_prompt = step.prompt.get(tokens.len()..).unwrap_or_default();
            tokens.extend_from_slice(new_prompt);
            logprobs.resize(tokens.len(), 0.0);
            advantages.resize(tokens.len(), 0.0);
            weights.resize(tokens.len(), 0.0);
            tokens.extend_from_slice(step.tokens);
            logprobs.extend_from_slice(step.logprobs);
            match step.token_advantages {
                [] => advantages.resize(tokens.len(), step.advantage),
                extra => advantages.extend(extra.iter().map(|a| step.advantage + a)),
            }
            weights.resize(tokens.len(), 1.0);
        }
        // Shifted: input drops the last token, the per-target arrays the
        // first position.
        let n = tokens.len().saturating_sub(1);
        let tail = |v: Vec<f32>| v.into_iter().skip(1).collect::<Vec<f32>>();
        Datum {
            model_input: ModelInput::tokens(tokens[..n].to_vec()),
            loss_fn_inputs: BTreeMap::from([
                (
                    "target_tokens".to_string(),
                    TensorData::int64(tokens.iter().skip(1).map(|&t| i64::from(t)).collect()),
                ),
                ("logprobs".to_string(), TensorData::float32(tail(logprobs))),
                (
                    "advantages".to_string(),
                    TensorData::float32(tail(advantages)),
                ),
                ("weights".to_string(), TensorData::float32(tail(weights))),
            ]),
        }
    }
}

/// The losses every known server implements (reference §10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LossFn {
    CrossEntropy,
    ImportanceSampling,
    Ppo,
    Cispo,
}

impl LossFn {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CrossEntropy => "cross_entropy",
            Self::ImportanceSampling => "importance_sampling",
            Self::Ppo => "ppo",
            Self::Cispo => "cispo",
        }
    }
}

/// A loss setting: a number (`clip_low_threshold`…) or a text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum LossConfig {
    Number(f64),
    Text(String),
}

/// What a `forward_backward` (or `forward`) returns: per datum, the
/// output tensors (`logprobs` of each target under the current weights;
/// skyrl adds `elementwise_loss`), and the server's metrics keyed
/// `name:reduction` (skyrl sends none: the loss is then computed from the
/// outputs).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ForwardBackwardResult {
    #[serde(default)]
    pub loss_fn_output_type: String,
    #[serde(default)]
    pub loss_fn_outputs: Vec<BTreeMap<String, TensorData>>,
    #[serde(default, deserialize_with = "metrics_or_nan")]
    pub metrics: BTreeMap<String, f64>,
}

/// A new LoRA's settings (reference §6.4). skyrl honours only `rank` and
/// `seed`; the three `train_*` are sent all the same, as the SDK does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoraConfig {
    pub rank: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(default = "yes")]
    pub train_unembed: bool,
    #[serde(default = "yes")]
    pub train_mlp: bool,
    #[serde(default = "yes")]
    pub train_attn: bool,
}

fn yes() -> bool {
    true
}

impl LoraConfig {
    /// A LoRA of `rank` on every layer kind, unseeded (the reference's
    /// defaults).
    pub fn new(rank: u32) -> Self {
        Self {
            rank,
            seed: None,
            train_unembed: true,
            train_mlp: true,
            train_attn: true,
        }
    }

    /// The same, with its initialisation seeded.
    pub fn seeded(self, seed: u64) -> Self {
        Self {
            seed: Some(seed),
            ..self
        }
    }
}

/// Where sampling stops besides `max_tokens` (reference §6.5): token ids
/// or strings, never both (skyrl wants a list of one kind). No `Stop` at
/// all keeps the model's end-of-sequence; an empty list disables even it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    Tokens(Vec<i32>),
    Strings(Vec<String>),
}

/// What `get_info` says of a training model. Servers fill in different
/// parts (skyrl, tuft, hosted): every field may be missing.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(from = "RawModelInfo")]
pub struct ModelInfo {
    pub model_id: Option<String>,
    /// The base model (`model_name`, at the top or in `model_data`).
    pub base_model: Option<String>,
    pub arch: Option<String>,
    /// Which tokenizer the base model's token ids are from.
    pub tokenizer_id: Option<String>,
    pub is_lora: Option<bool>,
    pub lora_rank: Option<u32>,
    pub train_unembed: Option<bool>,
    pub train_mlp: Option<bool>,
    pub train_attn: Option<bool>,
    /// `optimizer_config.type` (`adamw`).
    pub optimizer: Option<String>,
}

/// `get_info`'s answer as it comes: the names in `model_data` or not.
#[derive(Deserialize)]
struct RawModelInfo {
    #[serde(default)]
    model_id: Option<String>,
    #[serde(default)]
    model_name: Option<String>,
    #[serde(default)]
    model_data: Option<ModelData>,
    #[serde(flatten)]
    weights: WeightsInfo,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct ModelData {
    arch: Option<String>,
    model_name: Option<String>,
    tokenizer_id: Option<String>,
}

impl From<RawModelInfo> for ModelInfo {
    fn from(raw: RawModelInfo) -> Self {
        let (w, data) = (raw.weights, raw.model_data.unwrap_or_default());
        Self {
            model_id: raw.model_id,
            base_model: raw.model_name.or(data.model_name).or(w.base_model),
            arch: data.arch,
            tokenizer_id: data.tokenizer_id,
            is_lora: w.is_lora,
            lora_rank: w.lora_rank,
            train_unembed: w.train_unembed,
            train_mlp: w.train_mlp,
            train_attn: w.train_attn,
            optimizer: w.optimizer,
        }
    }
}

/// What `weights_info` says of a checkpoint: the model it was saved from,
/// so a client can sample it or train on from it with the right base.
/// Every field may be missing.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct WeightsInfo {
    pub base_model: Option<String>,
    pub is_lora: Option<bool>,
    pub lora_rank: Option<u32>,
    pub train_unembed: Option<bool>,
    pub train_mlp: Option<bool>,
    pub train_attn: Option<bool>,
    /// `optimizer_config.type` (`adamw`).
    #[serde(rename = "optimizer_config", deserialize_with = "optimizer_type")]
    pub optimizer: Option<String>,
}

/// `optimizer_config: {type}` → its type.
fn optimizer_type<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    struct Config {
        #[serde(default, rename = "type")]
        kind: Option<String>,
    }
    let config: Option<Config> = Deserialize::deserialize(d)?;
    Ok(config.and_then(|c| c.kind))
}

/// Why a sampled sequence ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    Stop,
    Length,
}

/// One sampled sequence: the exact token ids the model produced and, per
/// token, its logprob under the sampling weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sequence {
    pub stop_reason: StopReason,
    pub tokens: Vec<i32>,
    #[serde(default, deserialize_with = "optional_floats_or_nan")]
    pub logprobs: Option<Vec<f32>>,
}

/// What `asample` returns.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Sampled {
    pub sequences: Vec<Sequence>,
    /// With `prompt_logprobs`: one per prompt token; the first is `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<Vec<Option<f32>>>,
}

/// JSON numbers, `null` read as NaN (metrics and logprobs may be null).
fn floats_or_nan<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f32>, D::Error> {
    let values: Vec<Option<f32>> = Deserialize::deserialize(d)?;
    Ok(values.into_iter().map(|v| v.unwrap_or(f32::NAN)).collect())
}

fn optional_floats_or_nan<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<f32>>, D::Error> {
    let values: Option<Vec<Option<f32>>> = Deserialize::deserialize(d)?;
    Ok(values.map(|v| v.into_iter().map(|v| v.unwrap_or(f32::NAN)).collect()))
}

fn metrics_or_nan<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, f64>, D::Error> {
    let values: Option<BTreeMap<String, Option<f64>>> = Deserialize::deserialize(d)?;
    Ok(values
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.unwrap_or(f64::NAN)))
        .collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    /// Two turns where the second extends the first: one example whose
    /// sampled spans carry their own turn's logprobs and advantage, and
    /// whose prompt and in-between tokens carry nothing.
    #[test]
    fn a_multi_turn_trajectory_is_one_example() {
        let (p1, t1, l1) = (vec![1, 2], vec![3, 4], vec![-0.1, -0.2]);
        let p2 = vec![1, 2, 3, 4, 5, 6];
        let (t2, l2) = (vec![7], vec![-0.3]);
        let steps = [
            super::TrajectoryStep {
                prompt: &p1,
                tokens: &t1,
                logprobs: &l1,
                advantage: 1.0,
                token_advantages: &[],
            },
            super::TrajectoryStep {
                prompt: &p2,
                tokens: &t2,
                logprobs: &l2,
                advantage: -0.5,
                token_advantages: &[],
            },
        ];
        let d = super::Datum::from_trajectory(&steps).unwrap();
        assert_eq!(d.model_input.len(), 6);
        let field = |k: &str| d.loss_fn_inputs[k].floats();
        assert_eq!(field("target_tokens"), vec![2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
        assert_eq!(field("logprobs"), vec![0.0, -0.1, -0.2, 0.0, 0.0, -0.3]);
        assert_eq!(field("advantages"), vec![0.0, 1.0, 1.0, 0.0, 0.0, -0.5]);
        assert_eq!(field("weights"), vec![0.0, 1.0, 1.0, 0.0, 0.0, 1.0]);
        // One turn is what from_sample makes.
        let one = super::Datum::from_trajectory(&steps[..1]).unwrap();
        let seq = super::Sequence {
            stop_reason: super::StopReason::Stop,
            tokens: t1.clone(),
            logprobs: Some(l1.clone()),
        };
        assert_eq!(one, super::Datum::from_sample(&p1, &seq, 1.0));
        // A prompt that does not extend the last answer is refused.
        let p3 = vec![1, 2, 9, 4, 5];
        let broken = [
            steps[0],
            super::TrajectoryStep {
                prompt: &p3,
                ..steps[1]
            },
        ];
        assert!(super::Datum::from_trajectory(&broken).is_err());
        let short = [super::TrajectoryStep {
            prompt: &[1],
            tokens: &[],
            logprobs: &[],
            advantage: 0.0,
            token_advantages: &[],
        }];
        assert!(super::Datum::from_trajectory(&short).is_err());
        // Per-token terms add to the turn's advantage, one per sampled token.
        let with_terms = [
            steps[0],
            super::TrajectoryStep {
                token_advantages: &[0.25],
                ..steps[1]
            },
        ];
        let d = super::Datum::from_trajectory(&with_terms).unwrap();
        assert_eq!(
            d.loss_fn_inputs["advantages"].floats(),
            vec![0.0, 1.0, 1.0, 0.0, 0.0, -0.25]
        );
        let wrong = [super::TrajectoryStep {
            token_advantages: &[0.1, 0.2, 0.3],
            ..steps[0]
        }];
        assert!(super::Datum::from_trajectory(&wrong).is_err());
    }

    #[test]
    fn no_tokens_is_no_chunk() {
        assert!(super::ModelInput::tokens(Vec::new()).chunks.is_empty());
        assert_eq!(super::ModelInput::tokens(vec![1, 2]).chunks.len(), 1);
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn a_datum_serialises_as_the_reference_shows() {
        let datum = Datum {
            model_input: ModelInput::tokens(vec![5, 6]),
            loss_fn_inputs: BTreeMap::from([
                ("target_tokens".into(), TensorData::int64(vec![6, 7])),
                ("advantages".into(), TensorData::float32(vec![0.5, 0.5])),
            ]),
        };
        assert_eq!(
            serde_json::to_value(&datum).unwrap(),
            json!({
                "model_input": {"chunks": [{"type": "encoded_text", "tokens": [5, 6]}]},
                "loss_fn_inputs": {
                    "advantages": {"dtype": "float32", "data": [0.5, 0.5]},
                    "target_tokens": {"dtype": "int64", "data": [6, 7]},
                },
            })
        );
    }

    #[test]
    fn a_sample_becomes_a_datum_aligned_on_the_next_token() {
        let sampled = Sequence {
            stop_reason: StopReason::Stop,
            tokens: vec![7, 8],
            logprobs: Some(vec![-0.5, -0.25]),
        };
        let d = Datum::from_sample(&[1, 2], &sampled, 2.0);
        assert_eq!(d.model_input, ModelInput::tokens(vec![1, 2, 7]));
        assert_eq!(
            d.loss_fn_inputs["target_tokens"],
            TensorData::int64(vec![2, 7, 8])
        );
        assert_eq!(
            d.loss_fn_inputs["logprobs"],
            TensorData::float32(vec![0.0, -0.5, -0.25])
        );
        assert_eq!(
            d.loss_fn_inputs["advantages"],
            TensorData::float32(vec![0.0, 2.0, 2.0])
        );
        assert_eq!(
            d.loss_fn_inputs["weights"],
            TensorData::float32(vec![0.0, 1.0, 1.0])
        );
    }

    #[test]
    fn lora_and_stop_settings_serialise_as_the_reference_shows() {
        assert_eq!(
            serde_json::to_value(LoraConfig::new(8)).unwrap(),
            json!({"rank": 8, "train_unembed": true, "train_mlp": true, "train_attn": true})
        );
        let lora = LoraConfig {
            train_attn: false,
            ..LoraConfig::new(4).seeded(3)
        };
        assert_eq!(
            serde_json::to_value(lora).unwrap(),
            json!({"rank": 4, "seed": 3, "train_unembed": true, "train_mlp": true, "train_attn": false})
        );
        // A server reading a bare `{rank}` gets the reference's defaults.
        let read: LoraConfig = serde_json::from_value(json!({"rank": 2})).unwrap();
        assert_eq!(read, LoraConfig::new(2));

        let tokens = serde_json::to_value(Stop::Tokens(vec![1, 2])).unwrap();
        assert_eq!(tokens, json!([1, 2]));
        let strings = serde_json::to_value(Stop::Strings(vec!["</s>".into()])).unwrap();
        assert_eq!(strings, json!(["</s>"]));
        assert_eq!(
            serde_json::from_value::<Stop>(strings).unwrap(),
            Stop::Strings(vec!["</s>".into()])
        );
        assert!(serde_json::from_value::<Stop>(json!([1, "a"])).is_err());
    }

    #[test]
    fn model_and_weights_info_are_read_from_any_servers_shape() {
        // The reference's get_info: names in model_data and at the top.
        let info: ModelInfo = serde_json::from_value(json!({
            "model_id": "m1",
            "model_data": {"arch": "qwen3", "model_name": "Qwen/Qwen3-8B", "tokenizer_id": "Qwen/Qwen3-8B"},
            "is_lora": true, "lora_rank": 16,
            "optimizer_config": {"type": "adamw"},
            "extra": 1,
        }))
        .unwrap();
        assert_eq!(info.model_id.as_deref(), Some("m1"));
        assert_eq!(info.base_model.as_deref(), Some("Qwen/Qwen3-8B"));
        assert_eq!(info.arch.as_deref(), Some("qwen3"));
        assert_eq!(info.tokenizer_id.as_deref(), Some("Qwen/Qwen3-8B"));
        assert_eq!((info.is_lora, info.lora_rank), (Some(true), Some(16)));
        assert_eq!(info.optimizer.as_deref(), Some("adamw"));
        // A server that says almost nothing.
        let bare: ModelInfo =
            serde_json::from_value(json!({"model_name": "b", "model_data": null})).unwrap();
        assert_eq!(
            bare,
            ModelInfo {
                base_model: Some("b".into()),
                ..ModelInfo::default()
            }
        );

        let weights: WeightsInfo = serde_json::from_value(json!({
            "base_model": "b", "is_lora": true, "lora_rank": 4, "train_mlp": false,
            "optimizer_config": {"type": "adamw"},
        }))
        .unwrap();
        assert_eq!(weights.base_model.as_deref(), Some("b"));
        assert_eq!(
            (weights.lora_rank, weights.train_mlp),
            (Some(4), Some(false))
        );
        assert_eq!(weights.train_attn, None);
        assert_eq!(weights.optimizer.as_deref(), Some("adamw"));
        assert_eq!(
            serde_json::from_value::<WeightsInfo>(json!({})).unwrap(),
            WeightsInfo::default()
        );
    }

    #[test]
    fn results_are_read_leniently() {
        // skyrl's forward_backward: outputs per datum, empty metrics, an
        // extra key; a null metric elsewhere.
        let result: ForwardBackwardResult = serde_json::from_value(json!({
            "loss_fn_output_type": "scalar",
            "loss_fn_outputs": [{"logprobs": {"dtype": "float32", "data": [-1.5, null]}}],
            "metrics": {"loss:sum": null},
            "extra": 1,
        }))
        .unwrap();
        let logprobs = result.loss_fn_outputs[0]["logprobs"].floats();
        assert_eq!(logprobs[0], -1.5);
        assert!(logprobs[1].is_nan());
        assert!(result.metrics["loss:sum"].is_nan());

        let sampled: Sampled = serde_json::from_value(json!({
            "sequences": [{"stop_reason": "length", "tokens": [1, 2], "logprobs": [-0.1, -0.2]}],
            "prompt_logprobs": [null, -3.0],
            "type": "sample",
        }))
        .unwrap();
        assert_eq!(sampled.sequences[0].tokens, [1, 2]);
        assert_eq!(sampled.sequences[0].stop_reason, StopReason::Length);
        assert_eq!(sampled.prompt_logprobs, Some(vec![None, Some(-3.0)]));
    }
}
