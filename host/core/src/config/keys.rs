//! The keys of the schema: listing, lookup in a tree, and suggestions for
//! a key that is not one.

use serde_json::{Map, Value};

use super::Config;

/// Config sections that are maps with user-chosen keys (a plugin's name):
/// each is a key itself, as `known_keys` cannot list what is in them.
pub const OPEN_MAPS: &[&str] = &["plugins.grants", "learning.reward.scorer_weights"];

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

/// `; did you mean `KEY`?` for the known key nearest to `key`, if any is
/// near.
pub(super) fn suggestion(key: &str) -> String {
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

/// The value at `key` (dotted) in `tree`.
pub fn get_path<'a>(tree: &'a Value, key: &str) -> Option<&'a Value> {
    key.split('.').try_fold(tree, |node, part| node.get(part))
}

/// Sets `key` (dotted) in `tree`, creating the mappings on the way.
pub(super) fn set_path(tree: &mut Value, key: &str, value: Value) {
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
