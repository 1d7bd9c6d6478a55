//! NemoClaw: OpenClaw inside an OpenShell sandbox.
//!
//! Written: `~/.nemoclaw/config.json` merged with `endpointType: "custom"`,
//! `endpointUrl: "<base>/v1"`, `model`, `profile: "ncp"`,
//! `credentialEnv: "OPENAI_API_KEY"` (other keys kept). With `openshell` on
//! PATH, also `openshell provider create` (or `update`) for a `metaclaw`
//! provider and `openshell inference set` to it. Those two change OpenShell's
//! own state, which metaclaw cannot read back; restore says how to undo them.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::{Env, Located, Plan, PlannedCommand, PlannedFile, Target, pretty_json, procs, text_of};

pub(super) fn plan(target: &Target, env: &Env) -> Result<Located> {
    let dir = env.home_dir.join(".nemoclaw");
    let openshell = procs::which(env, "openshell").is_some();
    if !dir.is_dir() && !openshell {
        return Ok(Located::Skip(format!(
            "nemoclaw: not set up here ({} does not exist and `openshell` is not on PATH); set claw_type",
            dir.display()
        )));
    }
    let path = dir.join("config.json");
    let fields = json!({
        "endpointType": "custom",
        "endpointUrl": target.v1(),
        "model": target.model,
        "profile": "ncp",
        "credentialEnv": "OPENAI_API_KEY",
    });
    let file = path.clone();
    let mut notes = Vec::new();
    let mut commands = Vec::new();
    if openshell {
        let provider = |verb: &str| -> Vec<String> {
            [
                "openshell",
                "provider",
                verb,
                "--name",
                "metaclaw",
                "--type",
                "openai",
                "--credential",
                &format!("OPENAI_API_KEY={}", target.api_key),
                "--config",
                &format!("OPENAI_BASE_URL={}", target.v1()),
            ]
            .map(String::from)
            .to_vec()
        };
        commands.push(PlannedCommand {
            argvs: vec![provider("create"), provider("update")],
            secret: Some(target.api_key.clone()),
            timeout: Duration::from_secs(60),
            undo_hint: "the OpenShell provider `metaclaw` stays; remove it with openshell if you no longer want it".into(),
        });
        commands.push(PlannedCommand {
            argvs: vec![
                [
                    "openshell",
                    "inference",
                    "set",
                    "--provider",
                    "metaclaw",
                    "--model",
                    &target.model,
                ]
                .map(String::from)
                .to_vec(),
            ],
            secret: None,
            timeout: Duration::from_secs(60),
            undo_hint: "OpenShell inference still routes to metaclaw; point it back with `openshell inference set --provider <yours> --model <id>`".into(),
        });
    } else {
        notes.push(
            "nemoclaw: `openshell` is not on PATH, so only ~/.nemoclaw/config.json is wired; run `openshell inference set --provider metaclaw …` in the sandbox host".to_string(),
        );
    }
    Ok(Located::Plan(Plan {
        files: vec![PlannedFile {
            path,
            edit: Box::new(move |current| edit(current, &fields, &file)),
            owned: false,
        }],
        commands,
        service: Some(super::openclaw::service()),
        notes,
    }))
}

fn edit(current: Option<&[u8]>, fields: &Value, path: &Path) -> Result<Option<Vec<u8>>> {
    let before: Value = match text_of(current, path)? {
        Some(text) => serde_json::from_str(&text)
            .with_context(|| format!("{} is not valid JSON", path.display()))?,
        None => json!({}),
    };
    let mut after = before.clone();
    let (Some(obj), Some(fields)) = (after.as_object_mut(), fields.as_object()) else {
        bail!("{}: the top level is not an object", path.display());
    };
    for (k, v) in fields {
        obj.insert(k.clone(), v.clone());
    }
    if after == before && current.is_some() {
        return Ok(None);
    }
    Ok(Some(pretty_json(&after)?))
}
