//! The Tinker API's JSON types (protocol reference §6): what a training
//! step is made of, and what comes back. Sent strictly (defaults omitted:
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
    /// One chunk of tokens.
    pub fn tokens(tokens: Vec<i32>) -> Self {
        Self {
            chunks: vec![Chunk::EncodedText { tokens }],
        }
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

impl Datum {
    /// A sampled answer as one policy-gradient example: the prompt and the
    /// exact tokens sampled (never re-tokenised), each answer token with
    /// the sampler's logprob and `advantage`; prompt positions get weight 0
    /// (reference §15.1: position *i* predicts token *i + 1*).
    pub fn from_sample(prompt: &[i32], sampled: &Sequence, advantage: f32) -> Self {
        let tokens: Vec<i32> = prompt.iter().chain(&sampled.tokens).copied().collect();
        let n = tokens.len().saturating_sub(1);
        let prompt_targets = prompt.len().saturating_sub(1);
        let mut logprobs = vec![0.0; prompt_targets];
        logprobs.extend(
            sampled
                .logprobs
                .clone()
                .unwrap_or_else(|| vec![0.0; sampled.tokens.len()]),
        );
        let mut advantages = vec![0.0; prompt_targets];
        advantages.resize(n, advantage);
        let mut weights = vec![0.0; prompt_targets];
        weights.resize(n, 1.0);
        Datum {
            model_input: ModelInput::tokens(tokens[..n].to_vec()),
            loss_fn_inputs: BTreeMap::from([
                (
                    "target_tokens".to_string(),
                    TensorData::int64(tokens[1..].iter().map(|&t| i64::from(t)).collect()),
                ),
                ("logprobs".to_string(), TensorData::float32(logprobs)),
                ("advantages".to_string(), TensorData::float32(advantages)),
                ("weights".to_string(), TensorData::float32(weights)),
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
