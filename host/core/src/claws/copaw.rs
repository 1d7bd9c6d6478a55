//! CoPaw 1.0.x: provider files under its secret directory.
//!
//! Written: `providers/custom/metaclaw.json` (metaclaw's own provider, in the
//! shape CoPaw's `ProviderInfo` saves; CoPaw encrypts the plaintext key in
//! place the first time it loads it) and `providers/active_model.json` =
//! `{provider_id: "metaclaw", model}`. The `copaw models` commands are not
//! used: `config-key` and `set-llm` only work interactively in 1.0.2.
//!
//! An agent with its own `active_model` in its `agent.json` keeps using it;
//! CoPaw only falls back to the global active model.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use metaclaw_wire::Obj;
use metaclaw_wire::recorded::lenient;
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};

use super::{Env, Located, Plan, PlannedFile, Service, Target, pretty_json, procs, text_of};

/// `$COPAW_SECRET_DIR`, else `<working dir>.secret` where the working dir is
/// `$COPAW_WORKING_DIR` or `~/.copaw` (CoPaw's `constant.py`).
fn dirs(env: &Env) -> (PathBuf, PathBuf) {
    let working = env
        .var("COPAW_WORKING_DIR")
        .map(|d| env.expand(d))
        .unwrap_or_else(|| env.home_dir.join(".copaw"));
    let secret = env
        .var("COPAW_SECRET_DIR")
        .map(|d| env.expand(d))
        .unwrap_or_else(|| {
            let mut s = working.clone().into_os_string();
            s.push(".secret");
            PathBuf::from(s)
        });
    (working, secret)
}

/// The provider file metaclaw writes; `meta` carries the key's hash (see
/// [`edit_provider`]).
pub(super) fn provider(target: &Target) -> Value {
    json!({
        "id": "metaclaw",
        "name": "MetaClaw",
        "base_url": target.v1(),
        "api_key": target.api_key,
        "chat_model": "OpenAIChatModel",
        "models": [{
            "id": target.model,
            "name": format!("MetaClaw ({})", target.model),
            "supports_multimodal": null,
            "supports_image": null,
            "supports_video": null,
            "probe_source": null,
            "generate_kwargs": {},
        }],
        "extra_models": [],
        "api_key_prefix": "",
        "is_local": false,
        "freeze_url": false,
        "require_api_key": true,
        "is_custom": true,
        "support_model_discovery": false,
        "support_connection_check": false,
        "generate_kwargs": {},
        "meta": {"metaclaw_key_sha256": crate::digest::sha256_hex(target.api_key.as_bytes())},
    })
}

pub(super) fn plan(target: &Target, env: &Env) -> Result<Located> {
    let (working, secret) = dirs(env);
    if !working.is_dir() && !secret.is_dir() {
        return Ok(Located::Skip(format!(
            "copaw: not set up here (neither {} nor {} exists); run `copaw init` first, or set claw_type",
            working.display(),
            secret.display()
        )));
    }
    let providers = secret.join("providers");
    let provider_file = providers.join("custom").join("metaclaw.json");
    let active_file = providers.join("active_model.json");
    let wanted = provider(target);
    let active = json!({"provider_id": "metaclaw", "model": target.model});
    let (pf, af) = (provider_file.clone(), active_file.clone());
    Ok(Located::Plan(Plan {
        files: vec![
            PlannedFile {
                path: provider_file,
                edit: Box::new(move |current| edit_provider(current, &wanted, &pf)),
                owned: true,
            },
            PlannedFile {
                path: active_file,
                edit: Box::new(move |current| edit_active(current, &active, &af)),
                owned: false,
            },
        ],
        commands: Vec::new(),
        service: Some(service()),
        notes: Vec::new(),
    }))
}

/// The provider file is metaclaw's; it is rewritten unless it already points
/// at the same URL, model and key. CoPaw re-saves it with the key encrypted
/// (`ENC:…`) and probe results filled in, so the key is recognised by the
/// hash metaclaw leaves in `meta` (a free-form field CoPaw keeps).
fn edit_provider(current: Option<&[u8]>, wanted: &Value, path: &Path) -> Result<Option<Vec<u8>>> {
    if let Some(text) = text_of(current, path)?
        && let Ok(existing) = serde_json::from_str::<Value>(&text)
        && Obj::<Pointing>::read(&existing).is_some_and(|p| Obj::read(wanted) == Some(p))
    {
        return Ok(None);
    }
    Ok(Some(pretty_json(wanted)?))
}

/// Where a provider file points: what [`edit_provider`] compares, each
/// field none when absent or of another shape (the rest is CoPaw's).
#[derive(Deserialize, Default, PartialEq)]
#[serde(default)]
struct Pointing {
    #[serde(deserialize_with = "lenient")]
    base_url: Option<String>,
    /// `models[0].id`.
    #[serde(rename = "models", deserialize_with = "first_model_id")]
    model: Option<String>,
    /// `meta.metaclaw_key_sha256`.
    #[serde(rename = "meta", deserialize_with = "key_hash")]
    key_sha256: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ModelId {
    #[serde(deserialize_with = "lenient")]
    id: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Meta {
    #[serde(deserialize_with = "lenient")]
    metaclaw_key_sha256: Option<String>,
}

fn first_model_id<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let models: Vec<Obj<ModelId>> = lenient(d)?;
    Ok(models.into_iter().next().and_then(|m| m.0?.id))
}

fn key_hash<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let meta: Obj<Meta> = Obj::deserialize(d)?;
    Ok(meta.0.and_then(|m| m.metaclaw_key_sha256))
}

fn edit_active(current: Option<&[u8]>, wanted: &Value, path: &Path) -> Result<Option<Vec<u8>>> {
    let before: Option<Value> = match text_of(current, path)? {
        Some(text) => Some(
            serde_json::from_str(&text)
                .with_context(|| format!("{} is not valid JSON", path.display()))?,
        ),
        None => None,
    };
    // Keep any other field CoPaw may add to the slot.
    let mut after = match &before {
        Some(Value::Object(_)) => before.clone().unwrap_or_default(),
        _ => json!({}),
    };
    if let Some(obj) = after.as_object_mut()
        && let Some(w) = wanted.as_object()
    {
        for (k, v) in w {
            obj.insert(k.clone(), v.clone());
        }
    }
    if before.as_ref() == Some(&after) {
        return Ok(None);
    }
    Ok(Some(pretty_json(&after)?))
}

/// `copaw app` serves the agent; it reads providers when it starts.
fn is_app(argv: &[String]) -> bool {
    procs::runs(argv, "copaw", &["app"])
}

pub(super) fn service() -> Service {
    Service {
        name: "the CoPaw app",
        process: Some(Box::new(|_, argv: &[String]| is_app(argv))),
        systemd_unit: None,
        restart: ["copaw", "daemon", "restart"].map(String::from).to_vec(),
        timeout: Duration::from_secs(30),
        after: Some(
            "CoPaw loads providers when `copaw app` starts: restart it if the model does not change.",
        ),
    }
}
