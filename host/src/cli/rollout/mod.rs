//! `metaclaw rollout --tasks DIR`: task files run through the running
//! proxy by a built-in agent, so learning gets sessions to judge without a
//! human (the original MetaClaw's `openclaw_env_data_dir`).
//!
//! | file | job |
//! |---|---|
//! | [`tasks`] | reading the task files, every bad line named |
//! | [`agent`] | one task's loop through the proxy, as one session |
//! | [`tools`] | the six tools offered, and what a call does |
//! | [`workspace`] | the file tools, resolved inside the workspace only |
//! | [`sandbox`] | the `run` tool's confinement (namespaces, Landlock), fail closed |
//! | [`taskdir`] | a task's throwaway folder |
//! | [`output`] | the table and the `--json` lines |

// The loop's parts that `bench` reuses are visible to the rest of the CLI.
pub(super) mod agent;
mod output;
pub(super) mod sandbox;
pub(super) mod taskdir;
mod tasks;
pub(super) mod tools;
pub(super) mod workspace;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::Args;
use futures_util::StreamExt;

use super::admin::{AdminClient, AdminError};
use super::{load_config, runtime};
use crate::home::Home;
use agent::{Agent, Finished};
use sandbox::Sandbox;

#[derive(Args, Debug, Clone)]
pub struct RolloutArgs {
    /// The folder of task files: every *.jsonl in it, one task a line,
    /// {"task_id": "...", "instruction": "..."}.
    #[arg(long, value_name = "DIR")]
    pub tasks: PathBuf,
    /// The model to ask (default: llm.model_id).
    #[arg(long)]
    pub model: Option<String>,
    /// Model calls per task at most.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_steps: u32,
    /// Tasks run at once.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub concurrency: u32,
    /// Seconds a `run` command may take before it is killed.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub run_timeout: u64,
    /// Keep each task's workspace (its path is printed) instead of removing it.
    #[arg(long)]
    pub keep: bool,
    /// One JSON object per task and line: task_id, session_id, steps,
    /// tool_calls, finished (answered, max_steps, error), error.
    #[arg(long)]
    pub json: bool,
}

/// `sandbox-exec`: metaclaw's own sandbox helper (see [`sandbox`]).
#[derive(Args, Debug, Clone)]
pub struct SandboxExecArgs {
    /// The task folder (its `work/` is the workspace).
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// Set the sandbox up, run `true` (with --check: verify `python`),
    /// say what is enforced.
    #[arg(long, conflicts_with = "command")]
    pub probe: bool,
    /// A bench check: `python` is Python 3 in isolated mode.
    #[arg(long)]
    pub check: bool,
    /// Marks the helper's own setup-failure line (the command never sees it).
    #[arg(long, default_value = "")]
    pub nonce: String,
    /// The shell command.
    #[arg(last = true, required_unless_present = "probe")]
    pub command: Option<String>,
}

/// The sandbox helper's entry: confines itself, runs the command.
pub fn sandbox_exec(args: SandboxExecArgs) -> ExitCode {
    let purpose = if args.check {
        sandbox::Purpose::Check
    } else {
        sandbox::Purpose::Run
    };
    sandbox::exec(&args.dir, purpose, &args.nonce, args.command.as_deref())
}

pub fn run(home: &Home, config_path: &Path, args: RolloutArgs) -> Result<ExitCode> {
    let loaded = load_config(config_path)?;
    // The task files first: a bad line is reported before anything runs.
    let tasks = tasks::read_dir(&args.tasks)?;
    let info = home.running()?.ok_or_else(|| AdminError::NotRunning {
        home: home.root.clone(),
    })?;
    let model = args
        .model
        .clone()
        .filter(|m| !m.trim().is_empty())
        .unwrap_or_else(|| loaded.config.llm.model_id.trim().to_string());
    if model.is_empty() {
        bail!("no model to ask: pass --model, or set llm.model_id");
    }
    let admin = AdminClient::at(&info.url)?;

    let rt = runtime()?;
    if !rt.block_on(admin.healthy()) {
        bail!(
            "metaclaw (pid {}) is not answering at {}: see `metaclaw status`, or restart it \
             (`metaclaw stop`, then `metaclaw start`)",
            info.pid,
            info.url
        );
    }
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let run_dir = taskdir::run_dir(&run_id)?;
    let sandbox = Arc::new(Sandbox::probe(
        &run_dir,
        Duration::from_secs(args.run_timeout),
    ));
    let agent = Agent {
        client: admin.http().clone(),
        url: admin.url().to_string(),
        token: loaded.config.proxy.api_key.clone(),
        model,
        max_steps: args.max_steps,
        run_id,
        run_dir: run_dir.clone(),
        keep: args.keep,
        sandbox: sandbox.clone(),
    };

    let printer = output::Printer::new(args.json, &tasks);
    printer.header(&agent, tasks.len(), args.concurrency, &sandbox);
    let summaries = rt.block_on(async {
        let agent = &agent;
        let printer = &printer;
        futures_util::stream::iter(tasks.iter())
            .map(|task| async move {
                let summary = agent.run(task).await;
                printer.task(&summary);
                summary
            })
            .buffer_unordered(args.concurrency as usize)
            .collect::<Vec<_>>()
            .await
    });
    printer.footer(&summaries, &sandbox);
    if !args.keep {
        let _ = std::fs::remove_dir_all(&run_dir);
    }
    let all_failed = summaries.iter().all(|s| s.finished == Finished::Error);
    Ok(if all_failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
