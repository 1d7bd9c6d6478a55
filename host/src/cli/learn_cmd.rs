//! `learn now | status`. `now` asks the running daemon (it owns the job
//! queue and the models); `status` reads the database, daemon or not.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use metaclaw_wire::Obj;
use serde::Deserialize;

use super::sessions_cmd::db_path;
use super::{LearnCommand, load_config, local_time, runtime};
use metaclaw_core::admin::AdminClient;
use metaclaw_core::home::Home;
use metaclaw_core::store;
use metaclaw_core::store::jobs::{Job, JobState};

/// `learn now` waits this long for the jobs (judge and evolver calls).
const NOW_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1800);

pub fn run(home: &Home, config_path: &Path, command: LearnCommand) -> Result<ExitCode> {
    let loaded = load_config(config_path)?;
    let enabled = loaded.config.learning.enabled;
    match command {
        LearnCommand::Now {
            session,
            agent,
            json,
        } => now(home, session, agent, json),
        LearnCommand::Status { agent, json, limit } => {
            status(home, config_path, agent, json, limit, enabled)
        }
    }
}

/// `/admin/learn/now`'s answer: its jobs, printed as the daemon sent them
/// (`--json`), read where this version can.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Queued {
    jobs: serde_json::Value,
}

fn now(
    home: &Home,
    session: Option<String>,
    agent: Option<metaclaw_core::agent_id::AgentId>,
    json: bool,
) -> Result<ExitCode> {
    // The daemon runs the jobs: it owns the queue and the models.
    let admin = AdminClient::connect(home)?.timeout(NOW_TIMEOUT);
    let body = serde_json::json!({ "session": session, "agent": agent.map(|a| a.to_string()) });
    let reply = runtime()?.block_on(admin.post_json("/admin/learn/now", &body))?;
    let queued = Obj::<Queued>::read(&reply).unwrap_or_default();
    let jobs: Vec<Job> = Vec::deserialize(&queued.jobs).unwrap_or_default();
    if json {
        say!("{}", serde_json::to_string_pretty(&queued.jobs)?);
    } else if jobs.is_empty() {
        say!("no learning job was queued");
    } else {
        print_jobs(&jobs);
    }
    let failed = jobs.iter().any(|j| j.state != JobState::Done);
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn status(
    home: &Home,
    config_path: &Path,
    agent: Option<metaclaw_core::agent_id::AgentId>,
    json: bool,
    limit: usize,
    enabled: bool,
) -> Result<ExitCode> {
    if !enabled {
        // On stderr with --json, which stays a list of jobs.
        if json {
            eprintln!("note: {}", metaclaw_core::learn::OFF);
        } else {
            say!("{}", metaclaw_core::learn::OFF);
        }
    }
    let path = db_path(home, config_path);
    let (jobs, counts) = if path.exists() {
        let conn = path.read()?;
        (
            store::jobs::list_of(&conn, None, agent.as_ref().map(|a| a.as_str()), limit)?,
            store::jobs::counts(&conn, agent.as_ref().map(|a| a.as_str()))?,
        )
    } else {
        Default::default()
    };
    if json {
        say!("{}", serde_json::to_string_pretty(&jobs)?);
    } else if counts.is_empty() {
        if enabled {
            say!("no learning jobs yet (a job is queued when a session ends)");
        }
    } else {
        say!("{}", summary(&counts, jobs.len()));
        print_jobs(&jobs);
    }
    Ok(ExitCode::SUCCESS)
}

/// The store's jobs by state, all of them, and how many of them the table
/// below lists (the newest `--limit`).
fn summary(counts: &BTreeMap<JobState, u64>, listed: usize) -> String {
    let count = |s: JobState| counts.get(&s).copied().unwrap_or(0);
    let total: u64 = counts.values().sum();
    let mut line = format!(
        "{} queued, {} running, {} failed, {} done",
        count(JobState::Queued),
        count(JobState::Running),
        count(JobState::Failed),
        count(JobState::Done)
    );
    if (listed as u64) < total {
        line.push_str(&format!(
            " (of {total}; the newest {listed} below, --limit shows more)"
        ));
    }
    line
}

fn print_jobs(jobs: &[Job]) {
    let width = jobs
        .iter()
        .map(|j| j.session_id.len())
        .max()
        .unwrap_or(7)
        .clamp(7, 48);
    say!(
        "{:<width$}  {:<7}  {:>5}  {:>8}  {:<19}  STAGES / ERROR",
        "SESSION",
        "STATE",
        "ROUND",
        "ATTEMPTS",
        "WHEN"
    );
    for j in jobs {
        let when = match j.state {
            JobState::Queued => format!("due {}", local_time(j.not_before_ms)),
            JobState::Running => j.started_ms.map(local_time).unwrap_or_default(),
            JobState::Done | JobState::Failed => j.finished_ms.map(local_time).unwrap_or_default(),
        };
        say!(
            "{:<width$}  {:<7}  {:>5}  {:>8}  {:<19}  {}",
            j.session_id,
            j.state,
            j.round,
            j.attempts,
            when,
            j.detail()
        );
    }
}
