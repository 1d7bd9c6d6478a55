//! ZeroClaw: `~/.zeroclaw/config.toml`, edited with `toml_edit` so comments
//! and layout stay.
//!
//! Written (top level): `default_provider = "custom:<base>/v1"`,
//! `default_model`, `api_key`. These are the keys ZeroClaw's `Config` reads
//! (`src/config/schema.rs`; an OpenAI-compatible endpoint is the provider
//! `custom:<url>`). The original MetaClaw wrote `provider`, `model` and
//! `base_url`, which ZeroClaw ignores.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use toml_edit::{DocumentMut, Item, Value};

use super::{Env, Located, Plan, PlannedFile, Service, Target, procs, text_of};

pub(super) fn plan(target: &Target, env: &Env) -> Result<Located> {
    let dir = env.home_dir.join(".zeroclaw");
    if !dir.is_dir() {
        return Ok(Located::Skip(format!(
            "zeroclaw: not set up here ({} does not exist); run `zeroclaw onboard` first, or set claw_type",
            dir.display()
        )));
    }
    let path = dir.join("config.toml");
    let keys = [
        ("default_provider", format!("custom:{}", target.v1())),
        ("default_model", target.model.clone()),
        ("api_key", target.api_key.clone()),
    ];
    let file = path.clone();
    Ok(Located::Plan(Plan {
        files: vec![PlannedFile {
            path,
            edit: Box::new(move |current| edit(current, &keys, &file)),
            owned: false,
        }],
        commands: Vec::new(),
        service: Some(service()),
        notes: Vec::new(),
    }))
}

fn edit(current: Option<&[u8]>, keys: &[(&str, String)], path: &Path) -> Result<Option<Vec<u8>>> {
    let text = text_of(current, path)?.unwrap_or_default();
    let mut doc: DocumentMut = text
        .parse()
        .with_context(|| format!("{} is not valid TOML", path.display()))?;
    for (key, value) in keys {
        match doc.get_mut(key) {
            Some(Item::Value(existing)) => {
                if existing.as_str() == Some(value.as_str()) {
                    continue;
                }
                // Keep the comment and spacing around the old value.
                let decor = existing.decor().clone();
                let mut new = Value::from(value.as_str());
                *new.decor_mut() = decor;
                *existing = new;
            }
            Some(_) => bail!(
                "{}: `{key}` is a table, not a value; fix the file or set claw_type: none",
                path.display()
            ),
            None => {
                doc.insert(key, toml_edit::value(value.as_str()));
            }
        }
    }
    let out = doc.to_string();
    if current.is_some() && out == text {
        return Ok(None);
    }
    Ok(Some(out.into_bytes()))
}

/// `zeroclaw daemon` / `zeroclaw gateway`: the long-running modes.
fn is_running(argv: &[String]) -> bool {
    procs::runs(argv, "zeroclaw", &["daemon"]) || procs::runs(argv, "zeroclaw", &["gateway"])
}

pub(super) fn service() -> Service {
    Service {
        name: "ZeroClaw",
        process: Some(Box::new(|_, argv: &[String]| is_running(argv))),
        systemd_unit: Some("zeroclaw"),
        restart: ["zeroclaw", "service", "restart"]
            .map(String::from)
            .to_vec(),
        timeout: Duration::from_secs(60),
        after: None,
    }
}
