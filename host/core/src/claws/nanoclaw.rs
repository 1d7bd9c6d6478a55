//! NanoClaw: the project's `.env`, found through its systemd user unit's
//! `WorkingDirectory`, else `~/nanoclaw`, `~/code/nanoclaw`, `~/.nanoclaw`.
//!
//! Written: `ANTHROPIC_BASE_URL=<base>` — without `/v1`: the Anthropic SDK
//! appends `/v1/messages`, which the proxy serves — and `ANTHROPIC_API_KEY`.
//! Every other line is kept.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

use super::{Env, Located, Plan, PlannedFile, Service, Target, dotenv, procs};

fn unit_file(env: &Env) -> PathBuf {
    let config = env
        .var("XDG_CONFIG_HOME")
        .map(|d| env.expand(d))
        .unwrap_or_else(|| env.home_dir.join(".config"));
    config.join("systemd").join("user").join("nanoclaw.service")
}

/// `WorkingDirectory=` of the unit (`%h` is the home directory).
fn unit_working_dir(env: &Env) -> Option<PathBuf> {
    let text = std::fs::read_to_string(unit_file(env)).ok()?;
    let value = text.lines().rev().find_map(|l| {
        l.trim()
            .strip_prefix("WorkingDirectory=")
            .map(|v| v.trim().trim_start_matches('-').to_string())
    })?;
    let home = env.home_dir.to_string_lossy();
    let expanded = value.replace("%h", &home);
    Some(env.expand(&expanded)).filter(|p| p.is_absolute())
}

pub(super) fn project_dir(env: &Env) -> Option<PathBuf> {
    unit_working_dir(env)
        .into_iter()
        .chain([
            env.home_dir.join("nanoclaw"),
            env.home_dir.join("code").join("nanoclaw"),
            env.home_dir.join(".nanoclaw"),
        ])
        .find(|d| d.is_dir())
}

pub(super) fn plan(target: &Target, env: &Env) -> Result<Located> {
    let Some(dir) = project_dir(env) else {
        return Ok(Located::Skip(
            "nanoclaw: no project found (no nanoclaw.service WorkingDirectory, ~/nanoclaw, ~/code/nanoclaw or ~/.nanoclaw); set claw_type".to_string(),
        ));
    };
    let path = dir.join(".env");
    let vars = [
        ("ANTHROPIC_BASE_URL", target.base().to_string()),
        ("ANTHROPIC_API_KEY", target.api_key.clone()),
    ];
    let file = path.clone();
    let mut notes = Vec::new();
    if let Ok(text) = std::fs::read_to_string(&path)
        && dotenv::get(&text, "CLAUDE_CODE_OAUTH_TOKEN").is_some_and(|v| !v.is_empty())
    {
        notes.push(format!(
            "nanoclaw: {} also sets CLAUDE_CODE_OAUTH_TOKEN; if NanoClaw prefers it, requests bypass metaclaw",
            path.display()
        ));
    }
    Ok(Located::Plan(Plan {
        files: vec![PlannedFile {
            path,
            edit: Box::new(move |current| {
                let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
                dotenv::set(current, &pairs, &file)
            }),
            owned: false,
        }],
        commands: Vec::new(),
        service: Some(service(env)),
        notes,
    }))
}

pub(super) fn service(env: &Env) -> Service {
    // Started by hand, NanoClaw is `node dist/index.js` in its project.
    let dir = project_dir(env);
    let scan = env.clone();
    Service {
        name: "NanoClaw",
        process: Some(Box::new(move |pid: u32, argv: &[String]| {
            procs::program_at(argv, "node").is_some()
                && dir
                    .as_ref()
                    .is_some_and(|d| procs::cwd_of(&scan, pid).is_some_and(|cwd| cwd == *d))
        })),
        systemd_unit: Some("nanoclaw"),
        restart: ["systemctl", "--user", "restart", "nanoclaw"]
            .map(String::from)
            .to_vec(),
        timeout: Duration::from_secs(60),
        after: None,
    }
}
