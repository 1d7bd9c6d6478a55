//! The `local` backend: all-MiniLM-L6-v2 (a 6-layer BERT) run on the CPU
//! with candle, mean-pooled and L2-normalised as sentence-transformers does.
//! The weights are read from the configured folder on first use; nothing is
//! ever downloaded.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context, Result, bail};
use candle_core::{D, DType, Device, Module, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear, VarBuilder, embedding, layer_norm, linear};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokenizers::Tokenizer;

use super::{Backend, EmbedError};

/// sentence-transformers' limit for this model: longer texts are cut.
const MAX_TOKENS: usize = 256;
/// Texts per forward pass (similar lengths together: little padding).
const PASS: usize = 16;

#[derive(Debug, Deserialize)]
struct BertConfig {
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    max_position_embeddings: usize,
    #[serde(default = "default_eps")]
    layer_norm_eps: f64,
    #[serde(default = "default_act")]
    hidden_act: String,
}

fn default_eps() -> f64 {
    1e-12
}

fn default_act() -> String {
    "gelu".into()
}

pub struct MiniLm {
    dir: PathBuf,
    id: String,
    model: OnceLock<Result<Model, EmbedError>>,
}

struct Model {
    bert: Bert,
    tokenizer: Tokenizer,
}

impl MiniLm {
    /// Checks the folder; the model itself loads on first use.
    pub fn open(dir: &Path) -> Result<Self> {
        let config_text = std::fs::read_to_string(dir.join("config.json"))
            .with_context(|| format!("cannot read {}", dir.join("config.json").display()))?;
        let config: BertConfig = serde_json::from_str(&config_text).with_context(|| {
            format!("{} is not a BERT config", dir.join("config.json").display())
        })?;
        if !matches!(config.hidden_act.as_str(), "gelu" | "gelu_new") {
            bail!(
                "{}: hidden_act {:?} is not supported (a BERT model like all-MiniLM-L6-v2 uses gelu)",
                dir.display(),
                config.hidden_act
            );
        }
        // Weights that change on disk get a new id, so cached vectors of the
        // old ones are never reused.
        let weights = std::fs::metadata(dir.join("model.safetensors"))
            .with_context(|| format!("cannot read {}", dir.join("model.safetensors").display()))?;
        let mut h = Sha256::new();
        h.update(config_text.as_bytes());
        h.update(weights.len().to_le_bytes());
        if let Ok(modified) = weights.modified()
            && let Ok(since) = modified.duration_since(std::time::UNIX_EPOCH)
        {
            h.update(since.as_nanos().to_le_bytes());
        }
        let digest = crate::digest::hex(&h.finalize());
        let name = dir
            .parent()
            .filter(|_| dir.ends_with("model"))
            .and_then(|p| p.file_name())
            .or_else(|| dir.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "bert".into());
        Ok(Self {
            dir: dir.to_path_buf(),
            id: format!("local:{name}:{}", &digest[..16]),
            model: OnceLock::new(),
        })
    }

    fn loaded(&self) -> Result<&Model, EmbedError> {
        self.model
            .get_or_init(|| {
                let started = std::time::Instant::now();
                let loaded = load(&self.dir).map_err(|e| EmbedError::from(format!("{e:#}")));
                match &loaded {
                    Ok(_) => tracing::info!(
                        "loaded the embedding model from {} in {} ms",
                        self.dir.display(),
                        started.elapsed().as_millis()
                    ),
                    Err(e) => tracing::error!("cannot load the embedding model: {e}"),
                }
                loaded
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

impl Backend for MiniLm {
    fn model_id(&self) -> &str {
        &self.id
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let model = self.loaded()?;
        model
            .embed(texts)
            .map_err(|e| format!("embedding failed: {e:#}").into())
    }
}

fn load(dir: &Path) -> Result<Model> {
    let config: BertConfig =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json"))?)?;
    let mut tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))
        .map_err(|e| anyhow::anyhow!("{}: {e}", dir.join("tokenizer.json").display()))?;
    // Padding and truncation are ours to decide (the file pads to 128).
    tokenizer.with_padding(None);
    tokenizer
        .with_truncation(Some(tokenizers::TruncationParams {
            max_length: MAX_TOKENS.min(config.max_position_embeddings),
            ..Default::default()
        }))
        .map_err(|e| anyhow::anyhow!("tokenizer: {e}"))?;
    // Read, not memory-mapped: a file changed under a mapping is undefined
    // behaviour, and 90 MB is affordable.
    let weights = std::fs::read(dir.join("model.safetensors"))
        .with_context(|| format!("cannot read {}", dir.join("model.safetensors").display()))?;
    let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
        .context("model.safetensors")?;
    let bert = Bert::new(&config, vb).context("model.safetensors does not fit config.json")?;
    Ok(Model { bert, tokenizer })
}

impl Model {
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| anyhow::anyhow!("tokenizer: {e}"))?;
        let ids: Vec<&[u32]> = encodings.iter().map(|e| e.get_ids()).collect();
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by_key(|&i| ids[i].len());
        let mut out = vec![Vec::new(); ids.len()];
        for pass in order.chunks(PASS) {
            let batch: Vec<&[u32]> = pass.iter().map(|&i| ids[i]).collect();
            for (&i, v) in pass.iter().zip(self.bert.sentence_embeddings(&batch)?) {
                out[i] = v;
            }
        }
        Ok(out)
    }
}

/// BERT: embeddings, then self-attention layers; only what sentence
/// embeddings need (no pooler, no token types beyond the first).
struct Bert {
    word: Embedding,
    position: Tensor,
    token_type: Tensor,
    embeddings_norm: LayerNorm,
    layers: Vec<Layer>,
    heads: usize,
    head_dim: usize,
}

struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attention_out: Linear,
    attention_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    output_norm: LayerNorm,
}

impl Bert {
    fn new(c: &BertConfig, vb: VarBuilder) -> Result<Self> {
        if c.num_attention_heads == 0 || !c.hidden_size.is_multiple_of(c.num_attention_heads) {
            bail!("hidden_size must be a multiple of num_attention_heads");
        }
        let e = vb.pp("embeddings");
        let word = embedding(c.vocab_size, c.hidden_size, e.pp("word_embeddings"))?;
        let position = e
            .pp("position_embeddings")
            .get((c.max_position_embeddings, c.hidden_size), "weight")?;
        let token_type = e
            .pp("token_type_embeddings")
            .get_unchecked("weight")?
            .get(0)?;
        let embeddings_norm = layer_norm(c.hidden_size, c.layer_norm_eps, e.pp("LayerNorm"))?;
        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for i in 0..c.num_hidden_layers {
            let l = vb.pp(format!("encoder.layer.{i}"));
            let a = l.pp("attention");
            let h = c.hidden_size;
            layers.push(Layer {
                query: linear(h, h, a.pp("self.query"))?,
                key: linear(h, h, a.pp("self.key"))?,
                value: linear(h, h, a.pp("self.value"))?,
                attention_out: linear(h, h, a.pp("output.dense"))?,
                attention_norm: layer_norm(h, c.layer_norm_eps, a.pp("output.LayerNorm"))?,
                intermediate: linear(h, c.intermediate_size, l.pp("intermediate.dense"))?,
                output: linear(c.intermediate_size, h, l.pp("output.dense"))?,
                output_norm: layer_norm(h, c.layer_norm_eps, l.pp("output.LayerNorm"))?,
            });
        }
        Ok(Self {
            word,
            position,
            token_type,
            embeddings_norm,
            layers,
            heads: c.num_attention_heads,
            head_dim: c.hidden_size / c.num_attention_heads,
        })
    }

    /// Mean-pooled, L2-normalised embeddings of token id sequences.
    fn sentence_embeddings(&self, batch: &[&[u32]]) -> Result<Vec<Vec<f32>>> {
        let b = batch.len();
        let t = batch.iter().map(|ids| ids.len()).max().unwrap_or(0).max(1);
        let mut ids = vec![0u32; b * t];
        let mut mask = vec![0f32; b * t];
        for (row, seq) in batch.iter().enumerate() {
            ids[row * t..row * t + seq.len()].copy_from_slice(seq);
            mask[row * t..row * t + seq.len()].fill(1.0);
        }
        let device = Device::Cpu;
        let ids = Tensor::from_vec(ids, (b, t), &device)?;
        let mask = Tensor::from_vec(mask, (b, t), &device)?;

        let x = self
            .word
            .forward(&ids)?
            .broadcast_add(&self.position.narrow(0, 0, t)?)?
            .broadcast_add(&self.token_type)?;
        let mut x = self.embeddings_norm.forward(&x)?;
        // Padding gets no attention: a large negative bias before softmax.
        let bias = ((mask.clone() - 1.0)? * 10_000.0)?.reshape((b, 1, 1, t))?;
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        for layer in &self.layers {
            let split = |y: Tensor| -> candle_core::Result<Tensor> {
                y.reshape((b, t, self.heads, self.head_dim))?
                    .transpose(1, 2)?
                    .contiguous()
            };
            let q = split(layer.query.forward(&x)?)?;
            let k = split(layer.key.forward(&x)?)?;
            let v = split(layer.value.forward(&x)?)?;
            let scores = (q.matmul(&k.t()?.contiguous()?)? * scale)?.broadcast_add(&bias)?;
            let probs = candle_nn::ops::softmax_last_dim(&scores)?;
            let context =
                probs
                    .matmul(&v)?
                    .transpose(1, 2)?
                    .reshape((b, t, self.heads * self.head_dim))?;
            let attended = layer
                .attention_norm
                .forward(&(layer.attention_out.forward(&context)? + &x)?)?;
            let inner = layer.intermediate.forward(&attended)?.gelu_erf()?;
            x = layer
                .output_norm
                .forward(&(layer.output.forward(&inner)? + &attended)?)?;
        }
        let m = mask.unsqueeze(2)?;
        let summed = x.broadcast_mul(&m)?.sum(1)?;
        let counts = m.sum(1)?.clamp(1.0, f64::MAX)?;
        let mean = summed.broadcast_div(&counts)?;
        let norms = mean
            .sqr()?
            .sum_keepdim(D::Minus1)?
            .sqrt()?
            .clamp(1e-12, f64::MAX)?;
        Ok(mean.broadcast_div(&norms)?.to_vec2::<f32>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model folder tests use (scripts/test fetches it).
    fn model() -> Option<MiniLm> {
        let dir = std::env::var("METACLAW_TEST_MODEL_DIR").ok()?;
        Some(MiniLm::open(&super::super::model_dir(Path::new(&dir)).ok()?).unwrap())
    }

    fn cos(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn matches_the_reference_model() {
        let Some(m) = model() else {
            panic!(
                "set METACLAW_TEST_MODEL_DIR to the all-MiniLM-L6-v2 folder (scripts/test does)"
            );
        };
        let texts: Vec<String> = [
            "The cat sits outside",
            "The feline rests outdoors",
            "A man is playing guitar",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let v = m.embed(&texts).unwrap();
        assert_eq!(v[0].len(), 384);
        for e in &v {
            assert!((cos(e, e) - 1.0).abs() < 1e-4);
        }
        // Reference cosines from sentence-transformers and an independent
        // ONNX export of the same model (../shared/reference/anchors.md §5).
        let similar = cos(&v[0], &v[1]);
        let unrelated = cos(&v[0], &v[2]);
        assert!((similar - 0.596).abs() < 0.01, "{similar}");
        assert!((unrelated - 0.036).abs() < 0.01, "{unrelated}");
        // Batched with padding gives the same vectors as one by one.
        let alone = m.embed(&texts[2..]).unwrap();
        assert!(cos(&alone[0], &v[2]) > 0.9999);
    }
}
