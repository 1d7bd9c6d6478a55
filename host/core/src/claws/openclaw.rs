//! OpenClaw: `openclaw.json` (JSON5), two keys.
//!
//! Written: `models.providers.metaclaw` (the whole provider object) and
//! `agents.defaults.model.primary`. Nothing else — in particular never
//! `agents.defaults.sandbox.*` (the original MetaClaw turned the sandbox off)
//! or `tools.*`, and `agents.defaults.model.fallbacks` stays as it is.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{Value, json};

use super::{
    Env, Located, Plan, PlannedFile, Service, Target, json_set, pretty_json, procs, text_of,
};

/// Without a configured context window: what OpenClaw's own onboarding uses
/// (below 64k it shrinks its prompt and compacts early).
const DEFAULT_CONTEXT_WINDOW: u64 = 128_000;

/// `$OPENCLAW_CONFIG_PATH`, else `$OPENCLAW_STATE_DIR/openclaw.json`, else
/// `~/.openclaw/openclaw.json`.
pub(super) fn config_path(env: &Env) -> PathBuf {
    if let Some(path) = env.var("OPENCLAW_CONFIG_PATH") {
        return env.expand(path);
    }
    if let Some(dir) = env.var("OPENCLAW_STATE_DIR") {
        return env.expand(dir).join("openclaw.json");
    }
    env.home_dir.join(".openclaw").join("openclaw.json")
}

/// The provider object OpenClaw gets. `supportsPromptCacheKey` makes it send
/// `prompt_cache_key = "<sessionId>:<N>"`, which is how the proxy tells
/// sessions apart without a plugin.
pub(super) fn provider(target: &Target) -> Value {
    let window = match target.context_window {
        0 => DEFAULT_CONTEXT_WINDOW,
        n => n,
    };
    json!({
        "baseUrl": target.v1(),
        "apiKey": target.api_key,
        "api": "openai-completions",
        "models": [{
            "id": target.model,
            "name": format!("MetaClaw ({})", target.model),
            "reasoning": false,
            "input": ["text"],
            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
            "contextWindow": window,
            "maxTokens": 8192,
            "compat": {"supportsPromptCacheKey": true},
        }],
    })
}

pub(super) fn plan(target: &Target, env: &Env) -> Result<Located> {
    let path = config_path(env);
    let dir = path.parent().unwrap_or(Path::new("/"));
    if !dir.is_dir() {
        return Ok(Located::Skip(format!(
            "openclaw: not set up here ({} does not exist); run `openclaw onboard` first, or set claw_type",
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
        Some(text) => json5::from_str(&text).with_context(|| {
            format!(
                "{} is not valid JSON5; fix it (`openclaw config validate`)",
                path.display()
            )
        })?,
        None => json!({}),
    };
    let mut after = before.clone();
    json_set(
        &mut after,
        &["models", "providers", "metaclaw"],
        provider(target),
        path,
    )?;
    let primary = Value::String(format!("metaclaw/{}", target.model));
    // `model` may be the short string form ("provider/model"): the object
    // form with only `primary` means the same.
    match after.pointer_mut("/agents/defaults/model") {
        Some(model @ Value::String(_)) => *model = json!({ "primary": primary }),
        _ => json_set(
            &mut after,
            &["agents", "defaults", "model", "primary"],
            primary,
            path,
        )?,
    }
    if after == before && current.is_some() {
        return Ok(None);
    }
    Ok(Some(pretty_json(&after)?))
}

fn is_gateway(argv: &[String]) -> bool {
    let title = argv
        .first()
        .and_then(|a| Path::new(a).file_name())
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("openclaw-gateway"));
    title
        || procs::runs(argv, "openclaw", &["gateway", "run"])
        || procs::program_at(argv, "openclaw")
            .and_then(|i| argv.get(i..))
            .is_some_and(|rest| {
                rest.first().is_some_and(|a| a == "gateway")
                    && rest.get(1).is_none_or(|a| a.starts_with('-'))
            })
}

pub(super) fn service() -> Service {
    Service {
        name: "the OpenClaw gateway",
        process: Some(Box::new(|_, argv: &[String]| is_gateway(argv))),
        systemd_unit: None,
        restart: ["openclaw", "gateway", "restart"]
            .map(String::from)
            .to_vec(),
        timeout: Duration::from_secs(90),
        after: None,
    }
}
