//! `learn now | status`. `now` asks the running daemon (it owns the job
//! queue and the models); `status` reads the database, daemon or not.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};

use super::sessions_cmd::db_path;
use super::{LearnCommand, load_config, local_time, runtime};
use crate::home::Home;
use crate::store;
use crate::store::jobs::{Job, JobState};

/// `learn now` waits this long for the jobs (judge and evolver calls).
const NOW_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1800);

pub fn run(home: &Home, config_path: &Path, command: LearnCommand) -> Result<ExitCode> {
    let loaded = load_config(config_path)?;
    let enabled = loaded.config.learning.enabled;
    match command {
        LearnCommand::Now { session, json } => now(home, session, json),
        LearnCommand::Status { json, limit } => status(home, config_path, json, limit, enabled),
    }
}

fn now(home: &Home, session: Option<String>, json: bool) -> Result<ExitCode> {
    let Some(info) = home.running()? else {
        bail!(
            "metaclaw is not running: start it with `metaclaw start` (it runs the learning jobs)"
        );
    };
    let token = home
        .read_admin_token()
        .context("cannot read the admin token")?;
    let body = serde_json::json!({ "session": session });
    let (status, reply) = runtime()?.block_on(async {
        let client = reqwest::Client::builder().timeout(NOW_TIMEOUT).build()?;
        let r = client
            .post(format!("{}/admin/learn/now", info.url))
            .bearer_auth(token)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await
            .with_context(|| format!("cannot reach metaclaw at {}", info.url))?;
        let status = r.status();
        let bytes: bytes::Bytes = r.bytes().await?;
        let reply: serde_json::Value =
            serde_json::from_slice(&bytes).context("metaclaw's answer is not JSON")?;
        anyhow::Ok((status, reply))
    })?;
    if !status.is_success() {
        bail!(
            "{}",
            reply["error"]["message"]
                .as_str()
                .unwrap_or("learn now failed")
        );
    }
    let jobs: Vec<Job> = serde_json::from_value(reply["jobs"].clone()).unwrap_or_default();
    if json {
        say!("{}", serde_json::to_string_pretty(&reply["jobs"])?);
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
    json: bool,
    limit: usize,
    enabled: bool,
) -> Result<ExitCode> {
    if !enabled {
        // On stderr with --json, which stays a list of jobs.
        if json {
            eprintln!("note: {}", crate::learn::OFF);
        } else {
            say!("{}", crate::learn::OFF);
        }
    }
    let path = db_path(home, config_path);
    let jobs = if path.exists() {
        let conn = store::open_read_only(&path)?;
        store::jobs::list(&conn, limit)?
    } else {
        Vec::new()
    };
    if json {
        say!("{}", serde_json::to_string_pretty(&jobs)?);
    } else if jobs.is_empty() {
        if enabled {
            say!("no learning jobs yet (a job is queued when a session ends)");
        }
    } else {
        let count = |s: JobState| jobs.iter().filter(|j| j.state == s).count();
        say!(
            "{} queued, {} running, {} failed, {} done",
            count(JobState::Queued),
            count(JobState::Running),
            count(JobState::Failed),
            count(JobState::Done)
        );
        print_jobs(&jobs);
    }
    Ok(ExitCode::SUCCESS)
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
