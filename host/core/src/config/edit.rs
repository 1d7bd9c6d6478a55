//! Editing the file: `config set` and `setup` change keys in the file's
//! tree, check the result against the schema, and write it back with every
//! other key (known or not) kept as it was.

use std::path::Path;

use serde_json::Value;

use super::keys::{OPEN_MAPS, set_path, suggestion};
use super::{ConfigError, known_keys, parse_tree, read_raw, validate};

/// The tree as YAML.
pub fn to_yaml(tree: &Value) -> String {
    serde_saphyr::to_string(tree).unwrap_or_else(|e| format!("# cannot render config: {e}\n"))
}

/// `agents.<id>.mode` and `agents.<id>.rl.<key>` (the agent's id and the
/// `rl` key are checked with the whole config, once set).
fn agent_key(key: &str) -> bool {
    let parts: Vec<&str> = key.split('.').collect();
    matches!(parts.as_slice(), ["agents", id, "mode"] if !id.is_empty())
        || matches!(parts.as_slice(), ["agents", id, "rl", rl] if !id.is_empty() && !rl.is_empty())
}

/// `config set KEY VALUE`: validates against the schema before writing, and
/// keeps every other key of the file as it was.
pub fn set_key(path: &Path, key: &str, text: &str) -> Result<Value, ConfigError> {
    let known = known_keys();
    // Sections that are maps keyed by the user (a plugin's name).
    let open = OPEN_MAPS.iter().any(|m| {
        key.strip_prefix(m)
            .is_some_and(|rest| rest.starts_with('.') && rest.len() > 1 && !rest[1..].contains('.'))
    }) || agent_key(key);
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
