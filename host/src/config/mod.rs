//! Loading, validating and editing `config.yaml`.
//!
//! The file is read into a generic YAML tree first and then into the typed
//! [`Config`], so that (a) unknown keys can be reported by their dotted path
//! as warnings, (b) a wrong type is a fatal error naming the key path and the
//! type it needed, and (c) `config set` can edit the tree without dropping
//! keys it does not know (the original's wizard erased them).

pub mod duration;
pub mod presets;
pub mod schema;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

pub use schema::*;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not valid YAML: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("{path}: the top level must be a mapping of keys (like `llm:`), not {found}")]
    NotAMapping { path: PathBuf, found: &'static str },
    #[error("{path}: `{key}`: {message}")]
    Type {
        path: PathBuf,
        key: String,
        message: String,
    },
    #[error("`{key}`: {message}")]
    Invalid { key: String, message: String },
    #[error("unknown config key `{key}`{hint}")]
    UnknownKey { key: String, hint: String },
    #[error("cannot write {path}: {message}")]
    Write { path: PathBuf, message: String },
}

/// A loaded configuration and what was learned while loading it.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    pub path: PathBuf,
    pub file_exists: bool,
    /// Unknown keys and ignored sections, one line each.
    pub warnings: Vec<String>,
    /// Secrets that came from the environment: key path → variable name.
    pub secret_sources: BTreeMap<String, String>,
}

impl Loaded {
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

/// Loads `path` (a missing file is an empty config), overlays secrets from
/// the environment and validates.
pub fn load(path: &Path) -> Result<Loaded, ConfigError> {
    load_with_env(path, &|var: &str| std::env::var(var).ok())
}

/// [`load`] with an explicit environment (tests cannot set variables: the
/// crate forbids `unsafe`, and `set_var` is unsafe in edition 2024).
pub fn load_with_env(
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Loaded, ConfigError> {
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
    if config.memory.enabled {
        warnings.push(
            "memory.enabled: the original's memory layer is not part of metaclaw; ignored".into(),
        );
    }
    if config.wechat.enabled {
        warnings.push("wechat.enabled: the WeChat bridge is not part of metaclaw; ignored".into());
    }
    // An evolver chain configured without guard is the one way evolved
    // skills are written unchecked: said at every start, not only in status.
    if let Some(evolvers) = &config.plugins.evolvers
        && config.learning.enabled
        && config.skills.enabled
        && !evolvers
            .iter()
            .any(|spec| crate::plugins::PluginSpec::parse(spec).is_ok_and(|s| s.name == "guard"))
    {
        warnings.push(
            "plugins.evolvers does not list guard: evolved skills are written without the poisoning guard, as configured (add guard to the list to check them)".into(),
        );
    }
    Ok(Loaded {
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
        _ => return None,
    })
}

/// Checks what the types cannot: URLs, addresses, limits.
pub fn validate(config: &Config) -> Result<(), ConfigError> {
    let invalid = |key: &str, message: String| ConfigError::Invalid {
        key: key.into(),
        message,
    };
    let base = config.llm.api_base.trim();
    if !base.is_empty() {
        match reqwest::Url::parse(base) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => {}
            _ => {
                return Err(invalid(
                    "llm.api_base",
                    format!("{base:?} is not an http(s) URL (example: https://api.openai.com/v1)"),
                ));
            }
        }
    }
    for (i, fallback) in config.llm.fallbacks.iter().enumerate() {
        let base = fallback.api_base.trim();
        match reqwest::Url::parse(base) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => {}
            _ => {
                return Err(invalid(
                    &format!("llm.fallbacks[{i}].api_base"),
                    format!("{base:?} is not an http(s) URL (example: https://api.openai.com/v1)"),
                ));
            }
        }
    }
    if parse_host(&config.proxy.host).is_none() {
        return Err(invalid(
            "proxy.host",
            format!(
                "{:?} is not an IP address (use 127.0.0.1 or ::1)",
                config.proxy.host
            ),
        ));
    }
    for (i, entry) in config.proxy.allowed_hosts.iter().enumerate() {
        if !crate::server::guard::is_host_entry(entry) {
            return Err(invalid(
                &format!("proxy.allowed_hosts[{i}]"),
                format!(
                    "{entry:?} is not a host name or host:port (examples: host.docker.internal, \
                     host.docker.internal:30000, 10.0.0.2)"
                ),
            ));
        }
    }
    for (i, entry) in config.proxy.allowed_origins.iter().enumerate() {
        if crate::server::guard::parse_origin(entry).is_none() {
            return Err(invalid(
                &format!("proxy.allowed_origins[{i}]"),
                format!(
                    "{entry:?} is not an origin: scheme, host and port only (example: \
                     http://localhost:3000)"
                ),
            ));
        }
    }
    if !(1..=65536).contains(&config.log.max_mb) {
        return Err(invalid("log.max_mb", "must be between 1 and 65536".into()));
    }
    if config.log.keep > 100 {
        return Err(invalid("log.keep", "at most 100 rotated files".into()));
    }
    if config.proxy.max_body_mb == 0 || config.proxy.max_body_mb > 4096 {
        return Err(invalid(
            "proxy.max_body_mb",
            "must be between 1 and 4096".into(),
        ));
    }
    let t = &config.proxy.timeouts;
    for (key, d) in [
        ("proxy.timeouts.connect", t.connect),
        ("proxy.timeouts.first_byte", t.first_byte),
        ("proxy.timeouts.between_chunks", t.between_chunks),
        ("proxy.timeouts.client_body", t.client_body),
        ("proxy.timeouts.client_header", t.client_header),
        ("sessions.idle_timeout", config.sessions.idle_timeout),
    ] {
        if d.get().is_zero() {
            return Err(invalid(key, "must be longer than zero".into()));
        }
    }
    for (key, d) in [
        (
            "plugins.timeouts.retriever",
            config.plugins.timeouts.retriever,
        ),
        ("plugins.timeouts.scorer", config.plugins.timeouts.scorer),
        ("plugins.timeouts.evolver", config.plugins.timeouts.evolver),
        ("plugins.timeouts.skill", config.plugins.timeouts.skill),
        ("plugins.timeouts.index", config.plugins.timeouts.index),
        ("plugins.timeouts.load", config.plugins.timeouts.load),
        ("plugins.watch_interval", config.plugins.watch_interval),
    ] {
        if d.get().is_zero() || d.get() > std::time::Duration::from_secs(600) {
            return Err(invalid(key, "must be between 1ms and 10m".into()));
        }
    }
    if !(1..=4096).contains(&config.plugins.memory_mb) {
        return Err(invalid(
            "plugins.memory_mb",
            "must be between 1 and 4096".into(),
        ));
    }
    for (key, max, value) in [
        ("plugins.max_file_mb", 4096, config.plugins.max_file_mb),
        ("plugins.max_call_mb", 1024, config.plugins.max_call_mb),
    ] {
        if !(1..=max).contains(&value) {
            return Err(invalid(key, format!("must be between 1 and {max}")));
        }
    }
    if let Err(e) = crate::plugins::Trust::new(
        &config.plugins.grants,
        &config.plugins.overrides,
        config.skills.embedding_retrieval(),
    ) {
        // Its messages start with the key they are about.
        let (key, message) = e.split_once(": ").unwrap_or(("plugins", e.as_str()));
        return Err(invalid(key, message.to_string()));
    }
    let specs = config
        .plugins
        .retriever
        .iter()
        .chain(config.plugins.scorers.iter().flatten())
        .chain(config.plugins.evolvers.iter().flatten())
        .chain(config.plugins.skills.iter().flatten());
    for spec in specs {
        if let Err(e) = crate::plugins::PluginSpec::parse(spec) {
            return Err(invalid("plugins", e));
        }
    }
    if !matches!(
        config.skills.retrieval_mode.as_str(),
        "template" | "bm25" | "embedding"
    ) {
        return Err(invalid(
            "skills.retrieval_mode",
            format!(
                "{:?} is not a retrieval mode (use bm25, template or embedding)",
                config.skills.retrieval_mode
            ),
        ));
    }
    if !matches!(config.skills.embedding_backend.as_str(), "local" | "openai") {
        return Err(invalid(
            "skills.embedding_backend",
            format!(
                "{:?} is not an embedding backend (use local or openai)",
                config.skills.embedding_backend
            ),
        ));
    }
    if let Some(base) = &config.skills.embedding_api_base
        && !matches!(reqwest::Url::parse(base.trim()), Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some())
    {
        return Err(invalid(
            "skills.embedding_api_base",
            format!("{base:?} is not an http(s) URL"),
        ));
    }
    let learning = &config.learning;
    if !matches!(
        learning.reward.combine.as_str(),
        "weighted" | "min" | "judge"
    ) {
        return Err(invalid(
            "learning.reward.combine",
            format!(
                "{:?} is not a way to combine rewards (use weighted, min or judge)",
                learning.reward.combine
            ),
        ));
    }
    if !(1..=64).contains(&learning.concurrency) {
        return Err(invalid(
            "learning.concurrency",
            "must be between 1 and 64".into(),
        ));
    }
    if !(1..=20).contains(&learning.max_drafts) {
        return Err(invalid(
            "learning.max_drafts",
            "must be between 1 and 20".into(),
        ));
    }
    if !(1_000..=1_000_000).contains(&learning.transcript_chars) {
        return Err(invalid(
            "learning.transcript_chars",
            "must be between 1000 and 1000000".into(),
        ));
    }
    if !(0.0..=2.0).contains(&learning.judge_temperature) {
        return Err(invalid(
            "learning.judge_temperature",
            "must be between 0 and 2".into(),
        ));
    }
    if learning.llm_timeout.get().is_zero() {
        return Err(invalid(
            "learning.llm_timeout",
            "must be longer than zero".into(),
        ));
    }
    if config.rl.prm_m > 15 {
        return Err(invalid("rl.prm_m", "at most 15 votes per turn".into()));
    }
    for (key, base) in [
        ("rl.prm_url", &config.rl.prm_url),
        ("rl.evolver_api_base", &config.rl.evolver_api_base),
    ] {
        let base = base.trim();
        if !base.is_empty()
            && !matches!(reqwest::Url::parse(base), Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some())
        {
            return Err(invalid(key, format!("{base:?} is not an http(s) URL")));
        }
    }
    if config.store.queue_capacity < 16 {
        return Err(invalid(
            "store.queue_capacity",
            "must be at least 16".into(),
        ));
    }
    if let Some(key) = &config.proxy.api_key
        && key.len() < 8
    {
        return Err(invalid(
            "proxy.api_key",
            "must be at least 8 characters".into(),
        ));
    }
    Ok(())
}

/// `proxy.host` as an address; `localhost` means the IPv4 loopback.
pub fn parse_host(host: &str) -> Option<std::net::IpAddr> {
    if host == "localhost" {
        return Some(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
    }
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

// ---------------------------------------------------------------------------
// Keys: listing, lookup, suggestions, editing.

/// Config sections that are maps with user-chosen keys.
const OPEN_MAPS: &[&str] = &["plugins.grants"];

/// Every dotted key the schema knows, leaves only.
pub fn known_keys() -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(tree) = serde_json::to_value(Config::default()) {
        collect_leaves(&tree, String::new(), &mut out);
    }
    out
}

fn collect_leaves(v: &Value, prefix: String, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                collect_leaves(child, path, out);
            }
        }
        _ => out.push(prefix),
    }
}

fn suggestion(key: &str) -> String {
    let best = known_keys()
        .into_iter()
        .map(|k| (edit_distance(&k, key), k))
        .min_by_key(|(d, _)| *d);
    match best {
        Some((d, k)) if d <= 3.max(key.len() / 5) => format!("; did you mean `{k}`?"),
        _ => String::new(),
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

pub fn get_path<'a>(tree: &'a Value, key: &str) -> Option<&'a Value> {
    key.split('.').try_fold(tree, |node, part| node.get(part))
}

fn set_path(tree: &mut Value, key: &str, value: Value) {
    let mut node = tree;
    let parts: Vec<&str> = key.split('.').collect();
    for (i, part) in parts.iter().enumerate() {
        if !node.is_object() {
            *node = Value::Object(Map::new());
        }
        let Value::Object(map) = node else { return };
        if i + 1 == parts.len() {
            map.insert((*part).to_string(), value);
            return;
        }
        node = map
            .entry((*part).to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

/// The effective config as a tree, secrets masked (and their source named).
pub fn masked_tree(loaded: &Loaded) -> Value {
    let mut tree = serde_json::to_value(&loaded.config).unwrap_or(Value::Null);
    for key in SECRET_KEYS {
        if let Some(Value::String(_)) = get_path(&tree, key) {
            let mask = match loaded.secret_sources.get(*key) {
                Some(var) => format!("******** (from ${var})"),
                None => "********".to_string(),
            };
            set_path(&mut tree, key, Value::String(mask));
        }
    }
    if let Some(list) = tree["llm"]["fallbacks"].as_array_mut() {
        for (i, fallback) in list.iter_mut().enumerate() {
            if fallback["api_key"].is_string() {
                let mask = match loaded
                    .secret_sources
                    .get(&format!("llm.fallbacks.{i}.api_key"))
                {
                    Some(var) => format!("******** (from ${var})"),
                    None => "********".to_string(),
                };
                fallback["api_key"] = Value::String(mask);
            }
        }
    }
    tree
}

/// The effective config as a tree (secrets masked): values left empty in
/// the file show what is used instead. Also returns, for each such key,
/// where its value comes from (`preset openai`, `default: llm.api_base`).
pub fn effective_tree(loaded: &Loaded) -> (Value, Vec<(&'static str, String)>) {
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
    if config.skills.embedding_backend == "openai" {
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

pub fn to_yaml(tree: &Value) -> String {
    serde_saphyr::to_string(tree).unwrap_or_else(|e| format!("# cannot render config: {e}\n"))
}

/// `config set KEY VALUE`: validates against the schema before writing, and
/// keeps every other key of the file as it was.
pub fn set_key(path: &Path, key: &str, text: &str) -> Result<Value, ConfigError> {
    let known = known_keys();
    // Sections that are maps keyed by the user (a plugin's name).
    let open = OPEN_MAPS.iter().any(|m| {
        key.strip_prefix(m)
            .is_some_and(|rest| rest.starts_with('.') && rest.len() > 1 && !rest[1..].contains('.'))
    });
    if !open && !known.iter().any(|k| k == key) {
        let hint = if known.iter().any(|k| k.starts_with(&format!("{key}."))) {
            format!(
                " (it is a section; set one of its keys, e.g. `{key}.{}`)",
                first_child(&known, key)
            )
        } else {
            suggestion(key)
        };
        return Err(ConfigError::UnknownKey {
            key: key.into(),
            hint,
        });
    }
    let (raw, _) = read_raw(path)?;
    // The value as YAML would read it (so `30001` is a number and `true` a
    // boolean), then as plain text: a model id like `1.5` stays a string
    // where the schema wants one, instead of being coerced to a float.
    let mut candidates = Vec::new();
    if let Ok(v) = serde_saphyr::from_str::<Value>(text)
        && !matches!(v, Value::Object(_))
    {
        candidates.push(v);
    }
    candidates.push(Value::String(text.to_string()));
    let mut first_error = None;
    for candidate in candidates {
        let mut tree = raw.clone();
        set_path(&mut tree, key, candidate.clone());
        match parse_tree(&tree, path).and_then(|(cfg, _)| validate(&cfg).map(|()| cfg)) {
            Ok(_) => {
                let yaml = to_yaml(&tree);
                crate::home::write_private(path, yaml.as_bytes()).map_err(|e| {
                    ConfigError::Write {
                        path: path.to_path_buf(),
                        message: format!("{e:#}"),
                    }
                })?;
                return Ok(candidate);
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.unwrap_or(ConfigError::Invalid {
        key: key.into(),
        message: "invalid value".into(),
    }))
}

fn first_child(known: &[String], section: &str) -> String {
    known
        .iter()
        .find_map(|k| k.strip_prefix(&format!("{section}.")))
        .unwrap_or("…")
        .to_string()
}

/// Writes several keys at once (used by `setup`), with the same validation.
pub fn set_many(path: &Path, pairs: &[(&str, Value)]) -> Result<(), ConfigError> {
    let (mut tree, _) = read_raw(path)?;
    for (key, value) in pairs {
        set_path(&mut tree, key, value.clone());
    }
    let (cfg, _) = parse_tree(&tree, path)?;
    validate(&cfg)?;
    crate::home::write_private(path, to_yaml(&tree).as_bytes()).map_err(|e| ConfigError::Write {
        path: path.to_path_buf(),
        message: format!("{e:#}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &tempfile::TempDir, text: &str) -> PathBuf {
        let p = dir.path().join("config.yaml");
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn missing_and_empty_files_give_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let loaded = load(&dir.path().join("nope.yaml")).unwrap();
        assert!(!loaded.file_exists);
        assert_eq!(loaded.config.proxy.port, 30000);
        assert_eq!(loaded.config.proxy.host, "127.0.0.1");
        assert_eq!(loaded.config.max_context_tokens, 50_000);
        let p = write(&dir, "\n");
        assert_eq!(load(&p).unwrap().config, Config::default());
    }

    #[test]
    fn accepts_an_original_metaclaw_config() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            &dir,
            r#"
claw_type: openclaw
mode: madmax
llm:
  provider: qwen
  model_id: qwen-plus
  api_base: ''
  api_key: sk-test-123
  bedrock_region: ''
openrouter: {}
proxy:
  port: 30001
  host: 0.0.0.0
  api_key: local-token-1234
skills:
  enabled: true
  dir: ~/.metaclaw/skills
  retrieval_mode: template
  top_k: 6
  task_specific_top_k: 10
  auto_evolve: true
rl:
  enabled: true
  backend: auto
  model: Qwen/Qwen3-4B
  prm_url: https://api.openai.com/v1
  prm_model: gpt-5.2
  lora_rank: 32
  batch_size: 4
  resume_from_ckpt: ''
scheduler:
  enabled: false
  calendar: {enabled: false}
memory:
  enabled: false
  retrieval_mode: hybrid
max_context_tokens: 60000
"#,
        );
        let loaded = load(&p).unwrap();
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
        assert_eq!(loaded.config.mode, Mode::Auto);
        assert_eq!(loaded.config.proxy.port, 30001);
        assert_eq!(
            loaded.api_base(),
            "https://dashscope.aliyuncs.com/compatible-mode/v1"
        );
        assert_eq!(loaded.config.max_context_tokens, 60_000);
    }

    #[test]
    fn an_evolver_chain_without_guard_is_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        let warned = |text: &str| {
            std::fs::write(&path, text).unwrap();
            let loaded = load_with_env(&path, &|_| None).unwrap();
            loaded
                .warnings
                .iter()
                .any(|w| w.starts_with("plugins.evolvers does not list guard"))
        };
        assert!(warned("plugins:\n  evolvers: [redact, dedup]\n"));
        assert!(warned("plugins:\n  evolvers: []\n"));
        assert!(!warned("plugins:\n  evolvers: [\"guard@^0.1\", dedup]\n"));
        assert!(!warned("{}\n"));
        assert!(!warned(
            "plugins:\n  evolvers: [dedup]\nlearning:\n  enabled: false\n"
        ));
    }

    #[test]
    fn unknown_keys_are_warnings_that_name_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(&dir, "proxy:\n  prot: 1\nfrobnicate: true\n");
        let loaded = load(&p).unwrap();
        let text = loaded.warnings.join("\n");
        assert!(text.contains("`proxy.prot`"), "{text}");
        assert!(text.contains("did you mean `proxy.port`"), "{text}");
        assert!(text.contains("`frobnicate`"), "{text}");
    }

    #[test]
    fn wrong_types_are_fatal_and_name_the_path_and_type() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(&dir, "proxy:\n  port: lots\n");
        let err = load(&p).unwrap_err().to_string();
        assert!(err.contains("`proxy.port`"), "{err}");
        assert!(err.contains("u16"), "{err}");
        let p = write(&dir, "sessions:\n  idle_timeout: soon\n");
        let err = load(&p).unwrap_err().to_string();
        assert!(err.contains("`sessions.idle_timeout`"), "{err}");
        let p = write(&dir, "mode: turbo\n");
        let err = load(&p).unwrap_err().to_string();
        assert!(
            err.contains("`mode`") && err.contains("skills_only"),
            "{err}"
        );
    }

    #[test]
    fn bad_yaml_and_bad_values_are_clear() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(&dir, "llm: [1,\n");
        assert!(load(&p).unwrap_err().to_string().contains("not valid YAML"));
        let p = write(&dir, "- a\n- b\n");
        assert!(load(&p).unwrap_err().to_string().contains("mapping"));
        let p = write(&dir, "llm:\n  api_base: ftp://x\n");
        assert!(load(&p).unwrap_err().to_string().contains("llm.api_base"));
    }

    #[test]
    fn retrieval_settings_are_checked_and_the_originals_mode_is_accepted() {
        let dir = tempfile::tempdir().unwrap();
        for (yaml, key, hint) in [
            (
                "skills:\n  retrieval_mode: vector\n",
                "skills.retrieval_mode",
                "bm25",
            ),
            (
                "skills:\n  embedding_backend: torch\n",
                "skills.embedding_backend",
                "openai",
            ),
            (
                "skills:\n  embedding_api_base: localhost:8080\n",
                "skills.embedding_api_base",
                "http",
            ),
        ] {
            let err = format!("{:#}", load(&write(&dir, yaml)).unwrap_err());
            assert!(err.contains(key) && err.contains(hint), "{yaml}: {err}");
        }
        let ok = write(
            &dir,
            "skills:\n  retrieval_mode: template\n  embedding_backend: openai\n  embedding_api_base: http://127.0.0.1:9/v1\n  embedding_api_key: sk-embed-12345\n",
        );
        let loaded = load(&ok).unwrap();
        assert_eq!(loaded.config.skills.retrieval_mode, "template");
        // The embedding key is a secret like the others.
        let yaml = to_yaml(&masked_tree(&loaded));
        assert!(!yaml.contains("sk-embed-12345"), "{yaml}");
        let env =
            |var: &str| (var == "METACLAW_EMBEDDING_API_KEY").then(|| "sk-env-777".to_string());
        let loaded =
            load_with_env(&write(&dir, "skills:\n  embedding_backend: openai\n"), &env).unwrap();
        assert_eq!(
            loaded.config.skills.embedding_api_key.as_deref(),
            Some("sk-env-777")
        );
    }

    #[test]
    fn allowed_hosts_origins_and_log_rotation_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        for (yaml, key, hint) in [
            (
                "proxy:\n  allowed_hosts: [ok.example, 'http://x']\n",
                "proxy.allowed_hosts[1]",
                "host.docker.internal",
            ),
            (
                "proxy:\n  allowed_origins: [localhost:3000]\n",
                "proxy.allowed_origins[0]",
                "http://localhost:3000",
            ),
            ("log:\n  max_mb: 0\n", "log.max_mb", "between 1"),
            ("log:\n  keep: 1000\n", "log.keep", "at most"),
        ] {
            let err = format!("{:#}", load(&write(&dir, yaml)).unwrap_err());
            assert!(err.contains(key) && err.contains(hint), "{yaml}: {err}");
        }
        let p = write(
            &dir,
            "proxy:\n  allowed_hosts: [host.docker.internal, 'gw:8080']\n  allowed_origins: ['http://localhost:3000']\nlog:\n  max_mb: 1\n  keep: 0\n",
        );
        let config = load(&p).unwrap().config;
        assert_eq!(config.proxy.allowed_hosts.len(), 2);
        assert_eq!((config.log.max_mb, config.log.keep), (1, 0));
        let defaults = Config::default();
        assert!(
            defaults.proxy.allowed_hosts.is_empty() && defaults.proxy.allowed_origins.is_empty()
        );
        assert_eq!((defaults.log.max_mb, defaults.log.keep), (16, 3));
    }

    #[test]
    fn set_validates_keeps_other_keys_and_never_coerces_strings() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            &dir,
            "memory:\n  enabled: false\n  scope: team\ncustom_thing: 7\nllm:\n  model_id: a\n",
        );
        set_key(&p, "proxy.port", "30005").unwrap();
        set_key(&p, "llm.model_id", "1.5").unwrap();
        let (tree, _) = read_raw(&p).unwrap();
        assert_eq!(get_path(&tree, "proxy.port"), Some(&Value::from(30005)));
        assert_eq!(get_path(&tree, "llm.model_id"), Some(&Value::from("1.5")));
        assert_eq!(get_path(&tree, "memory.scope"), Some(&Value::from("team")));
        assert_eq!(get_path(&tree, "custom_thing"), Some(&Value::from(7)));

        let err = set_key(&p, "proxy.port", "seventy")
            .unwrap_err()
            .to_string();
        assert!(err.contains("proxy.port"), "{err}");
        let err = set_key(&p, "proxy.prot", "1").unwrap_err().to_string();
        assert!(err.contains("did you mean `proxy.port`"), "{err}");
        let err = set_key(&p, "proxy", "1").unwrap_err().to_string();
        assert!(err.contains("section"), "{err}");
        // The failed sets changed nothing.
        let (after, _) = read_raw(&p).unwrap();
        assert_eq!(after, tree);
    }

    #[test]
    fn presets_and_defaults_show_their_effective_values() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            &dir,
            "llm:\n  provider: openai\n  model_id: gpt-4o\nrl:\n  prm_model: judge-model\n",
        );
        let loaded = load_with_env(&p, &|_| None).unwrap();
        let (tree, origins) = effective_tree(&loaded);
        let yaml = annotate(&to_yaml(&tree), &origins);
        assert!(
            yaml.contains("  api_base: https://api.openai.com/v1  # preset openai\n"),
            "{yaml}"
        );
        assert!(
            yaml.contains("  evolver_model: gpt-4o  # default: llm.model_id\n"),
            "{yaml}"
        );
        assert!(
            yaml.contains("  prm_url: https://api.openai.com/v1  # default: llm.api_base\n"),
            "{yaml}"
        );
        // A value the file sets is shown as it is, unmarked.
        assert!(yaml.contains("  prm_model: judge-model\n"), "{yaml}");
        // Still YAML, with the effective values in it.
        let back: Value = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(back["llm"]["api_base"], "https://api.openai.com/v1");
        assert_eq!(back["memory"]["scope"], "default");
        // An explicit base wins over the preset, and is not marked.
        let p = write(
            &dir,
            "llm:\n  provider: openai\n  api_base: http://127.0.0.1:8000/v1\n",
        );
        let loaded = load_with_env(&p, &|_| None).unwrap();
        let (tree, origins) = effective_tree(&loaded);
        assert_eq!(tree["llm"]["api_base"], "http://127.0.0.1:8000/v1");
        assert!(
            origins.iter().all(|(k, _)| *k != "llm.api_base"),
            "{origins:?}"
        );
    }

    #[test]
    fn secrets_come_from_the_environment_and_are_masked() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            &dir,
            "llm:\n  api_key_env: MY_UPSTREAM_KEY\nproxy:\n  api_key: file-token-1234\n",
        );
        let env = |var: &str| match var {
            "MY_UPSTREAM_KEY" => Some("sk-from-env-999".to_string()),
            "METACLAW_RL_PRM_API_KEY" => Some("sk-prm-888".to_string()),
            _ => None,
        };
        let loaded = load_with_env(&p, &env).unwrap();
        assert_eq!(
            loaded.config.llm.api_key.as_deref(),
            Some("sk-from-env-999")
        );
        assert_eq!(loaded.config.rl.prm_api_key.as_deref(), Some("sk-prm-888"));
        assert_eq!(
            loaded.config.proxy.api_key.as_deref(),
            Some("file-token-1234")
        );
        let yaml = to_yaml(&masked_tree(&loaded));
        for secret in ["sk-from-env-999", "sk-prm-888", "file-token-1234"] {
            assert!(!yaml.contains(secret), "{yaml}");
        }
        assert!(yaml.contains("$MY_UPSTREAM_KEY"), "{yaml}");
    }
}
