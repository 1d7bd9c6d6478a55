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

use agent::{Agent, Finished};
use metaclaw_core::admin::{AdminClient, AdminError};
use metaclaw_core::config::load_warned as load_config;
use metaclaw_core::home::Home;
use metaclaw_core::term::runtime;
use sandbox::{Limits, Sandbox};

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
    /// Processes (and threads) one `run` command may have at once.
    #[arg(long, default_value_t = Limits::default().processes, value_parser = clap::value_parser!(u32).range(8..=65536))]
    pub run_processes: u32,
    /// MiB of memory one `run` command may use, all its processes together
    /// (each, where no cgroup can be made).
    #[arg(long, default_value_t = Limits::default().memory_mb, value_parser = clap::value_parser!(u64).range(64..=1048576))]
    pub run_memory_mb: u64,
    /// CPU seconds each process of a `run` command may use.
    #[arg(long, default_value_t = Limits::default().cpu_secs, value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub run_cpu_secs: u64,
    /// MiB the workspace may hold after a `run` command (what was there included).
    #[arg(long, default_value_t = Limits::default().disk_mb, value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub run_disk_mb: u64,
    /// Tool calls run from one model answer; the rest are answered with an
    /// error and not run.
    #[arg(long, default_value_t = agent::MAX_CALLS_PER_STEP, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tool_calls_per_step: u32,
    /// Tool calls per task; the task ends (`max_tool_calls`) at the first
    /// answer asking for more.
    #[arg(long, default_value_t = agent::MAX_CALLS_PER_TASK, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tool_calls: u32,
    /// Keep each task's workspace (its path is printed) instead of removing it.
    #[arg(long)]
    pub keep: bool,
    /// One JSON object per task and line: task_id, session_id, steps,
    /// tool_calls, finished (answered, max_steps, max_tool_calls, error), error.
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
    /// Processes at once (see `rollout --run-processes`).
    #[arg(long, default_value_t = Limits::default().processes)]
    pub processes: u32,
    #[arg(long, default_value_t = Limits::default().memory_mb)]
    pub memory_mb: u64,
    #[arg(long, default_value_t = Limits::default().cpu_secs)]
    pub cpu_secs: u64,
    #[arg(long, default_value_t = Limits::default().disk_mb)]
    pub disk_mb: u64,
    /// The command's wall-clock limit, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,
    /// A cgroup folder metaclaw made for this call, to join first.
    #[arg(long, value_name = "DIR")]
    pub cgroup: Vec<PathBuf>,
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
    sandbox::exec(&sandbox::Request {
        dir: &args.dir,
        purpose,
        nonce: &args.nonce,
        command: args.command.as_deref(),
        limits: Limits {
            processes: args.processes,
            memory_mb: args.memory_mb,
            cpu_secs: args.cpu_secs,
            disk_mb: args.disk_mb,
        },
        cgroups: &args.cgroup,
        timeout: Duration::from_millis(args.timeout_ms),
    })
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
        Limits {
            processes: args.run_processes,
            memory_mb: args.run_memory_mb,
            cpu_secs: args.run_cpu_secs,
            disk_mb: args.run_disk_mb,
        },
    ));
    let agent = Agent {
        client: admin.http().clone(),
        url: admin.url().to_string(),
        token: loaded.config.proxy.api_key.clone(),
        model,
        max_steps: args.max_steps,
        max_calls_per_step: args.max_tool_calls_per_step,
        max_calls: args.max_tool_calls,
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
