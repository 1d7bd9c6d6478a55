//! PicoClaw: `~/.picoclaw/config.json`.
//!
//! Written: the `model_list` entry whose `model_name` is `metaclaw` (added or
//! replaced, the others kept in order) and `agents.defaults.model_name =
//! "metaclaw"`. PicoClaw's config loader may migrate and re-save the file on
//! its next start; restore then keeps that version beside the original.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use metaclaw_wire::Obj;
use metaclaw_wire::recorded::lenient;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    Env, Located, Plan, PlannedFile, Service, Target, json_set, pretty_json, procs, text_of,
};

pub(super) fn plan(target: &Target, env: &Env) -> Result<Located> {
    let dir = env.home_dir.join(".picoclaw");
    if !dir.is_dir() {
        return Ok(Located::Skip(format!(
            "picoclaw: not set up here ({} does not exist); run `picoclaw onboard` first, or set claw_type",
            dir.display()
        )));
    }
    let path = dir.join("config.json");
    let entry = json!({
        "model_name": "metaclaw",
        "model": format!("openai/{}", target.model),
        "api_key": target.api_key,
        "api_base": target.v1(),
    });
    let file = path.clone();
    Ok(Located::Plan(Plan {
        files: vec![PlannedFile {
            path,
            edit: Box::new(move |current| edit(current, &entry, &file)),
            owned: false,
        }],
        commands: Vec::new(),
        service: Some(service()),
        notes: Vec::new(),
    }))
}

fn edit(current: Option<&[u8]>, entry: &Value, path: &Path) -> Result<Option<Vec<u8>>> {
    let before: Value = match text_of(current, path)? {
        Some(text) => serde_json::from_str(&text)
            .with_context(|| format!("{} is not valid JSON", path.display()))?,
        None => json!({}),
    };
    let mut after = before.clone();
    let Some(root) = after.as_object_mut() else {
        bail!("{}: the top level is not an object", path.display());
    };
    let list = root
        .entry("model_list")
        .or_insert_with(|| Value::Array(Vec::new()));
    let Some(list) = list.as_array_mut() else {
        bail!(
            "{}: `model_list` is not a list; fix the file or set claw_type: none",
            path.display()
        );
    };
    match list.iter_mut().find(|m| is_metaclaws(m)) {
        Some(existing) => *existing = entry.clone(),
        None => list.push(entry.clone()),
    }
    json_set(
        &mut after,
        &["agents", "defaults", "model_name"],
        json!("metaclaw"),
        path,
    )?;
    if after == before && current.is_some() {
        return Ok(None);
    }
    Ok(Some(pretty_json(&after)?))
}

/// Whether a `model_list` entry is metaclaw's. Only read into a type: the
/// file is PicoClaw's, edited in place as a `Value` so that every key the
/// user wrote stays, in its order.
fn is_metaclaws(entry: &Value) -> bool {
    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct Entry {
        #[serde(deserialize_with = "lenient")]
        model_name: Option<String>,
    }
    Obj::<Entry>::read(entry)
        .and_then(|e| e.model_name)
        .as_deref()
        == Some("metaclaw")
}

fn is_gateway(argv: &[String]) -> bool {
    procs::runs(argv, "picoclaw", &["gateway"])
        && !argv
            .iter()
            .any(|a| matches!(a.as_str(), "restart" | "stop" | "status"))
}

pub(super) fn service() -> Service {
    Service {
        name: "the PicoClaw gateway",
        process: Some(Box::new(|_, argv: &[String]| is_gateway(argv))),
        systemd_unit: None,
        restart: ["picoclaw", "gateway", "restart"]
            .map(String::from)
            .to_vec(),
        timeout: Duration::from_secs(60),
        after: None,
    }
}
