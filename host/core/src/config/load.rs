//! From a file (and the environment) to a validated [`Config`]: the file is
//! read into a generic tree first and then into the typed config, so that
//! unknown keys are reported by their dotted path and a wrong type names
//! the key and the type it needed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::keys::suggestion;
use super::{Config, ConfigError, LlmConfig, SECRET_ENV, inert, presets, validate};

/// A loaded configuration and what was learned while loading it.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub config: Config,
    pub path: PathBuf,
    pub file_exists: bool,
    /// Unknown keys, keys that do nothing in this version, and settings
    /// worth a word, one line each.
    pub warnings: Vec<String>,
    /// Secrets that came from the environment: key path → variable name.
    pub secret_sources: BTreeMap<String, String>,
}

impl LoadedConfig {
    /// The upstream base URL: `llm.api_base`, else the provider's preset.
    pub fn api_base(&self) -> String {
        effective_api_base(&self.config.llm)
    }
}

pub fn effective_api_base(llm: &LlmConfig) -> String {
    let base = llm.api_base.trim();
    if !base.is_empty() {
        return base.trim_end_matches('/').to_string();
    }
    presets::preset(&llm.provider)
        .map(|p| p.api_base.to_string())
        .unwrap_or_default()
}

/// [`load`] for a command: each warning printed to stderr as `warning: …`.
pub fn load_warned(path: &Path) -> Result<LoadedConfig, ConfigError> {
    let loaded = load(path)?;
    for warning in &loaded.warnings {
        eprintln!("warning: {warning}");
    }
    Ok(loaded)
}

/// Loads `path` (a missing file is an empty config), overlays secrets from
/// the environment and validates.
pub fn load(path: &Path) -> Result<LoadedConfig, ConfigError> {
    load_with_env(path, &|var: &str| std::env::var(var).ok())
}

/// [`load`] with an explicit environment (tests cannot set variables: the
/// crate forbids `unsafe`, and `set_var` is unsafe in edition 2024).
pub fn load_with_env(
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<LoadedConfig, ConfigError> {
    let (raw, file_exists) = read_raw(path)?;
    let (mut config, unknown) = parse_tree(&raw, path)?;
    let mut warnings: Vec<String> = unknown
        .iter()
        .map(|key| {
            format!(
                "unknown config key `{key}` in {} (ignored){}",
                path.display(),
                suggestion(key)
            )
        })
        .collect();
    let secret_sources = overlay_env(&mut config, env);
    validate(&config)?;
    // Keys accepted for compatibility that do nothing yet: said once each,
    // only where the user set them.
    warnings.extend(inert::warnings(&raw, &config, &secret_sources, path));
    // An evolver chain configured without guard is the one way evolved
    // skills are written unchecked: said at every start, not only in status.
    if let Some(evolvers) = &config.plugins.evolvers
        && config.learning.enabled
        && config.skills.enabled
        && !evolvers.iter().any(|spec| spec.name == "guard")
    {
        warnings.push(
            "plugins.evolvers does not list guard: evolved skills are written without the poisoning guard, as configured (add guard to the list to check them)".into(),
        );
    }
    // The Postgres store is being built (W3-G): said at every start until
    // every part of metaclaw runs on it.
    if config.store.url.is_some() {
        warnings.push(
            "store.url: the team deployment on Postgres is new: its cost is not yet measured, and the connection to Postgres is not encrypted (no TLS): keep the database on a private network (docs/team.md)".into(),
        );
    }
    Ok(LoadedConfig {
        config,
        path: path.to_path_buf(),
        file_exists,
        warnings,
        secret_sources,
    })
}

/// The file as a generic tree; a missing file is an empty mapping.
pub fn read_raw(path: &Path) -> Result<(Value, bool), ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok((Value::Object(Map::new()), false));
        }
        Err(source) => {
            return Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    Ok((parse_raw(&text, path)?, true))
}

/// The text of a config file as a generic tree (`path` only names it in
/// errors); empty text is an empty mapping.
pub fn parse_raw(text: &str, path: &Path) -> Result<Value, ConfigError> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    let value: Value = serde_saphyr::from_str(text).map_err(|e| ConfigError::Syntax {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    match value {
        Value::Object(_) => Ok(value),
        Value::Null => Ok(Value::Object(Map::new())),
        other => Err(ConfigError::NotAMapping {
            path: path.to_path_buf(),
            found: kind_name(&other),
        }),
    }
}

fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// Typed config from a tree, plus the dotted paths of keys it did not know.
pub fn parse_tree(raw: &Value, path: &Path) -> Result<(Config, Vec<String>), ConfigError> {
    // `key:` with no value means "the default", as users expect from YAML.
    let cleaned = drop_nulls(raw.clone());
    let mut unknown = Vec::new();
    let mut on_unknown = |p: serde_ignored::Path<'_>| unknown.push(p.to_string());
    let de = serde_ignored::Deserializer::new(cleaned, &mut on_unknown);
    let config: Config = serde_path_to_error::deserialize(de).map_err(|e| ConfigError::Type {
        path: path.to_path_buf(),
        key: e.path().to_string(),
        message: e.into_inner().to_string(),
    })?;
    Ok((config, unknown))
}

fn drop_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, drop_nulls(v)))
                .collect(),
        ),
        other => other,
    }
}

fn overlay_env(
    config: &mut Config,
    env: &dyn Fn(&str) -> Option<String>,
) -> BTreeMap<String, String> {
    let mut sources = BTreeMap::new();
    let mut set = |key: &str, var: &str, value: String, config: &mut Config| {
        if let Some(slot) = secret_slot(config, key) {
            *slot = Some(value);
            sources.insert(key.to_string(), var.to_string());
        }
    };
    // A variable named by the file comes first; the fixed names win over it.
    if let Some(var) = config.llm.api_key_env.clone().filter(|v| !v.is_empty()) {
        match env(&var) {
            Some(value) if !value.is_empty() => set("llm.api_key", &var, value, config),
            _ => {
                if config.llm.api_key.is_none() {
                    tracing::warn!("llm.api_key_env names {var}, which is not set");
                }
            }
        }
    }
    for (var, key) in SECRET_ENV {
        if let Some(value) = env(var).filter(|v| !v.is_empty()) {
            set(key, var, value, config);
        }
    }
    for (i, fallback) in config.llm.fallbacks.iter_mut().enumerate() {
        if let Some(var) = fallback.api_key_env.clone().filter(|v| !v.is_empty()) {
            match env(&var) {
                Some(value) if !value.is_empty() => {
                    fallback.api_key = Some(value);
                    sources.insert(format!("llm.fallbacks.{i}.api_key"), var);
                }
                _ => tracing::warn!("llm.fallbacks[{i}].api_key_env names {var}, which is not set"),
            }
        }
    }
    sources
}

fn secret_slot<'a>(config: &'a mut Config, key: &str) -> Option<&'a mut Option<String>> {
    Some(match key {
        "llm.api_key" => &mut config.llm.api_key,
        "proxy.api_key" => &mut config.proxy.api_key,
        "rl.tinker_api_key" => &mut config.rl.tinker_api_key,
        "rl.api_key" => &mut config.rl.api_key,
        "rl.prm_api_key" => &mut config.rl.prm_api_key,
        "rl.evolver_api_key" => &mut config.rl.evolver_api_key,
        "opd.teacher_api_key" => &mut config.opd.teacher_api_key,
        "skills.embedding_api_key" => &mut config.skills.embedding_api_key,
        "scheduler.calendar.ics_url" => &mut config.scheduler.calendar.ics_url,
        "store.url" => &mut config.store.url,
        _ => return None,
    })
}
