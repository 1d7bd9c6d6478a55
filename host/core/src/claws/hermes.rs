//! Hermes Agent: `$HERMES_HOME/config.yaml` (default `~/.hermes/config.yaml`).
//!
//! Written: `model.provider: custom`, `model.default`, `model.base_url`,
//! `model.api_key` (and `model.context_length` when `context_window` is set)
//! — the form Hermes 0.19's own "custom endpoint" setup saves, and which wins
//! over an OAuth provider in its `auth.json`. Every other key is kept. YAML
//! comments are lost while wired (no maintained Rust YAML editor keeps them);
//! restore brings the original bytes back.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{Map, Value, json};

use super::{Env, Located, Plan, PlannedFile, Service, Target, procs, text_of};

fn config_path(env: &Env) -> PathBuf {
    match env.var("HERMES_HOME") {
        Some(dir) => env.expand(dir).join("config.yaml"),
        None => env.home_dir.join(".hermes").join("config.yaml"),
    }
}

pub(super) fn plan(target: &Target, env: &Env) -> Result<Located> {
    let path = config_path(env);
    let dir = path.parent().unwrap_or(Path::new("/"));
    if !dir.is_dir() {
        return Ok(Located::Skip(format!(
            "hermes: not set up here ({} does not exist); run `hermes setup` first, or set claw_type",
            dir.display()
        )));
    }
    let target = target.clone();
    let file = path.clone();
    Ok(Located::Plan(Plan {
        files: vec![PlannedFile {
            path,
            edit: Box::new(move |current| edit(current, &target, &file)),
            owned: false,
        }],
        commands: Vec::new(),
        service: Some(service()),
        notes: Vec::new(),
    }))
}

fn edit(current: Option<&[u8]>, target: &Target, path: &Path) -> Result<Option<Vec<u8>>> {
    let before: Value = match text_of(current, path)? {
        Some(text) => serde_saphyr::from_str(&text)
            .with_context(|| format!("{} is not valid YAML", path.display()))?,
        None => json!({}),
    };
    let mut after = before.clone();
    let Some(root) = after.as_object_mut() else {
        anyhow::bail!(
            "{}: the top level is not a mapping; fix the file or set claw_type: none",
            path.display()
        );
    };
    // `model: "<id>"` is Hermes's short form; it turns it into a mapping the
    // same way when a provider is chosen.
    let model = root
        .entry("model")
        .or_insert_with(|| Value::Object(Map::new()));
    if !model.is_object() {
        let short = std::mem::take(model);
        let mut m = Map::new();
        if !short.is_null() {
            m.insert("default".into(), short);
        }
        *model = Value::Object(m);
    }
    if let Some(m) = model.as_object_mut() {
        m.insert("provider".into(), json!("custom"));
        m.insert("default".into(), json!(target.model));
        m.insert("base_url".into(), json!(target.v1()));
        m.insert("api_key".into(), json!(target.api_key));
        if target.context_window > 0 {
            m.insert("context_length".into(), json!(target.context_window));
        }
    }
    if after == before && current.is_some() {
        return Ok(None);
    }
    let yaml = serde_saphyr::to_string(&after)
        .with_context(|| format!("cannot write {} as YAML", path.display()))?;
    Ok(Some(yaml.into_bytes()))
}

/// `hermes gateway run` from any launcher (the script, or
/// `python -m hermes_cli.main`): Hermes's own scan also requires `gateway run`,
/// so `hermes gateway status` is not mistaken for a gateway.
fn is_gateway(argv: &[String]) -> bool {
    let hermes = procs::program_at(argv, "hermes").is_some()
        || argv.iter().take(4).any(|a| a == "hermes_cli.main");
    hermes && argv.windows(2).any(|w| w[0] == "gateway" && w[1] == "run")
}

pub(super) fn service() -> Service {
    Service {
        name: "the Hermes gateway",
        process: Some(Box::new(|_, argv: &[String]| is_gateway(argv))),
        systemd_unit: Some("hermes-gateway"),
        restart: ["hermes", "gateway", "restart"].map(String::from).to_vec(),
        timeout: Duration::from_secs(90),
        after: None,
    }
}
