//! The effective config as `config show` and `config get` print it:
//! secrets masked (with where they came from), and the values the file
//! leaves empty shown with what is used instead.

use serde_json::Value;

use super::keys::set_path;
use super::{EmbeddingBackend, LoadedConfig, SECRET_KEYS, get_path};

/// The effective config as a tree, secrets masked (and their source named).
pub fn masked_tree(loaded: &LoadedConfig) -> Value {
    let mut config = loaded.config.clone();
    for (i, fallback) in config.llm.fallbacks.iter_mut().enumerate() {
        if let Some(key) = &mut fallback.api_key {
            *key = mask(
                loaded
                    .secret_sources
                    .get(&format!("llm.fallbacks.{i}.api_key")),
            );
        }
    }
    let mut tree = serde_json::to_value(&config).unwrap_or(Value::Null);
    for key in SECRET_KEYS {
        if let Some(Value::String(_)) = get_path(&tree, key) {
            let mask = mask(loaded.secret_sources.get(*key));
            set_path(&mut tree, key, Value::String(mask));
        }
    }
    tree
}

/// What a secret shows instead of itself: its environment variable, if
/// it came from one.
fn mask(var: Option<&String>) -> String {
    match var {
        Some(var) => format!("******** (from ${var})"),
        None => "********".to_string(),
    }
}

/// The effective config as a tree (secrets masked): values left empty in
/// the file show what is used instead. Also returns, for each such key,
/// where its value comes from (`preset openai`, `default: llm.api_base`).
pub fn effective_tree(loaded: &LoadedConfig) -> (Value, Vec<(&'static str, String)>) {
    let mut tree = masked_tree(loaded);
    let mut origins = Vec::new();
    let config = &loaded.config;
    let base = loaded.api_base();
    if config.llm.api_base.trim().is_empty() && !base.is_empty() {
        set_path(&mut tree, "llm.api_base", Value::String(base.clone()));
        let provider = match serde_json::to_value(&config.llm.provider) {
            Ok(Value::String(name)) => name,
            _ => "?".into(),
        };
        origins.push(("llm.api_base", format!("preset {provider}")));
    }
    // The judge, the evolver and remote embeddings use the upstream's
    // endpoint and model unless given their own (learn::llm, embeddings).
    let model = config.llm.model_id.trim();
    let mut defaults = vec![
        (
            "rl.prm_url",
            config.rl.prm_url.as_str(),
            "llm.api_base",
            base.as_str(),
        ),
        (
            "rl.prm_model",
            config.rl.prm_model.as_str(),
            "llm.model_id",
            model,
        ),
        (
            "rl.evolver_api_base",
            config.rl.evolver_api_base.as_str(),
            "llm.api_base",
            base.as_str(),
        ),
        (
            "rl.evolver_model",
            config.rl.evolver_model.as_str(),
            "llm.model_id",
            model,
        ),
    ];
    if config.skills.embedding_backend == EmbeddingBackend::Openai {
        defaults.push((
            "skills.embedding_api_base",
            config.skills.embedding_api_base.as_deref().unwrap_or(""),
            "llm.api_base",
            base.as_str(),
        ));
    }
    for (key, own, from, value) in defaults {
        if own.trim().is_empty() && !value.is_empty() {
            set_path(&mut tree, key, Value::String(value.to_string()));
            origins.push((key, format!("default: {from}")));
        }
    }
    (tree, origins)
}

/// `yaml` (as [`to_yaml`] writes it) with a trailing comment on the line of
/// each dotted key in `notes`: still valid YAML.
pub fn annotate(yaml: &str, notes: &[(&str, String)]) -> String {
    let mut out = String::with_capacity(yaml.len() + notes.len() * 32);
    // (indent, key) of the mappings enclosing the current line.
    let mut stack: Vec<(usize, String)> = Vec::new();
    for line in yaml.lines() {
        let indent = line.len() - line.trim_start().len();
        let body = line.trim_start();
        let key = body
            .split_once(':')
            .map(|(k, _)| k)
            .filter(|k| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        out.push_str(line);
        if let Some(key) = key {
            while stack.last().is_some_and(|(i, _)| *i >= indent) {
                stack.pop();
            }
            stack.push((indent, key.to_string()));
            let path: Vec<&str> = stack.iter().map(|(_, k)| k.as_str()).collect();
            let path = path.join(".");
            if let Some((_, note)) = notes.iter().find(|(k, _)| *k == path) {
                out.push_str("  # ");
                out.push_str(note);
            }
        }
        out.push('\n');
    }
    out
}
