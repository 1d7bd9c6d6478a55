//! IronClaw: `~/.ironclaw/.env`.
//!
//! Written: `LLM_BACKEND=openai_compatible`, `LLM_BASE_URL`, `LLM_MODEL`,
//! `LLM_API_KEY`, each changed in place (or appended); every other line and
//! comment is kept.

use std::time::Duration;

use anyhow::Result;

use super::{Env, Located, Plan, PlannedFile, Service, Target, dotenv, procs};

pub(super) fn plan(target: &Target, env: &Env) -> Result<Located> {
    let dir = env.home_dir.join(".ironclaw");
    if !dir.is_dir() {
        return Ok(Located::Skip(format!(
            "ironclaw: not set up here ({} does not exist); run `ironclaw onboard` first, or set claw_type",
            dir.display()
        )));
    }
    let path = dir.join(".env");
    let vars = [
        ("LLM_BACKEND", "openai_compatible".to_string()),
        ("LLM_BASE_URL", target.v1()),
        ("LLM_MODEL", target.model.clone()),
        ("LLM_API_KEY", target.api_key.clone()),
    ];
    let file = path.clone();
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
        service: Some(service()),
        notes: Vec::new(),
    }))
}

/// Any long-running `ironclaw` (not its `service`/`config` subcommands).
fn is_running(argv: &[String]) -> bool {
    procs::program_at(argv, "ironclaw").is_some_and(|i| {
        !argv.get(i).is_some_and(|a| {
            matches!(
                a.as_str(),
                "service" | "config" | "onboard" | "--version" | "--help"
            )
        })
    }) && !argv.iter().any(|a| a.ends_with(".env"))
}

pub(super) fn service() -> Service {
    Service {
        name: "IronClaw",
        process: Some(Box::new(|_, argv: &[String]| is_running(argv))),
        systemd_unit: Some("ironclaw"),
        restart: ["ironclaw", "service", "restart"]
            .map(String::from)
            .to_vec(),
        timeout: Duration::from_secs(60),
        after: None,
    }
}
