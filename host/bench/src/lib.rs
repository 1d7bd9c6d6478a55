//! metaclaw-bench: MetaClaw-Bench reproduced with any model, in arms that
//! differ only in what metaclaw does, scored strictly, with a report
//! (docs/bench.md) — `metaclaw bench`; and the rollout agent with its
//! sandbox ([`rollout`]) — `metaclaw rollout`.
//!
//! | file | job |
//! |---|---|
//! | [`data`] | the sets, embedded: days, rounds, seeds, workspaces |
//! | [`checks`] | the five rule checkers, native (never in the workspace) |
//! | [`command`] | a file check's command: its parts, run in the workspace |
//! | [`score`] | strict and lenient scores, the feedback after a round |
//! | [`lenient`] | JSON read into types, an odd field as its default |
//! | [`model`] | the agent's model calls: the model's API or the arm's metaclaw |
//! | [`day`] | one day's conversation: rounds through the agent loop |
//! | [`openclaw`] | `--agent openclaw`: a day through a real OpenClaw |
//! | [`arms`] | the arms, and the metaclaw each one runs in |
//! | [`provenance`] | what measured a run: binary, skill banks, models |
//! | [`run`] | the arms in order, records, resuming, progress |
//! | [`report`] | Markdown, SVG and JSON from the records |
//! | [`rollout`] | the rollout agent: tasks run in a sandbox against a running metaclaw |
//! | `oracle` | the bench's scripted models for the dummy upstream (feature `test-servers`) |
//! | [`test_servers`] | what only tests run: the fake training service, the dummy upstream's bench models |

// Tests start threads and servers of their own and join them (or end with
// the test); product code starts its work through `metaclaw_core::work`.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

// `say!` and `say_raw!`: lines to a stdout that may be a closed pipe.
#[macro_use]
extern crate metaclaw_core;

mod arms;

pub mod checks;
mod command;
mod data;
mod day;
mod lenient;
mod model;
mod openclaw;
#[cfg(feature = "test-servers")]
pub mod oracle;
mod provenance;
mod report;
pub mod rollout;
mod run;
mod score;
pub mod test_servers;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::{Args, Subcommand};

pub use arms::Arm;
pub use data::Set;
use metaclaw_core::config::{ApiFormat, LoadedConfig, load_warned as load_config};
use metaclaw_core::term::runtime;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Run the bench's days through the built-in agent (or OpenClaw), in
    /// each arm, and write the report (an interrupted run resumes where it
    /// stopped).
    Run(Box<RunArgs>),
    /// Write the report of a run again from its records.
    Report(ReportArgs),
    /// Run one of the bench's rule checkers, as the file checks do:
    /// iso8601, filename, metadata, backup or done_log.
    Check {
        name: String,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Check a day's file-check rounds (or one, or a --command) as `bench
    /// run` does: confined, on a scratch copy of the workspace; prints each
    /// part's verdict (exit 0: every round passed, 1: one failed).
    CheckRound(CheckRoundArgs),
}

#[derive(Args, Debug, Clone)]
pub struct CheckRoundArgs {
    #[arg(long, value_enum, default_value_t = Set::Small)]
    pub set: Set,
    /// The day (`day05`).
    #[arg(long)]
    pub day: Option<String>,
    /// Only this round (`r3`).
    #[arg(long)]
    pub round: Option<String>,
    /// The workspace checked (default: the day's starting workspace),
    /// e.g. a run's `<arm>-<n>/days/dayNN/work`. It is not changed.
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Check this command instead of the rounds'.
    #[arg(long)]
    pub command: Option<String>,
    /// One JSON array: day, round, passed, parts.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// small: 12 days, 61 rounds; full: 30 days, 346 rounds.
    #[arg(long, value_enum, default_value_t = Set::Small)]
    pub set: Set,
    /// The model the agent uses (default: llm.model_id).
    #[arg(long)]
    pub model: Option<String>,
    /// The arms, in order (comma-separated). rl needs rl.tinker_base_url.
    #[arg(long = "arm", value_enum, value_delimiter = ',', default_values_t = [Arm::Direct, Arm::Skills, Arm::Learn])]
    pub arms: Vec<Arm>,
    /// Runs of each arm, each in a fresh metaclaw home.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: u32,
    /// The run folder (default: bench-runs/<set>-<model>).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// The model's API base URL (default: llm.api_base, or the provider's).
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// The API's format (default: llm.api_format).
    #[arg(long, value_enum)]
    pub api_format: Option<ApiFormatArg>,
    /// The environment variable holding the model's key (default: llm.api_key).
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// The judge of the learning arms (default: rl.prm_model, else the model).
    #[arg(long)]
    pub judge_model: Option<String>,
    /// The skill evolver of the learning arms (default: rl.evolver_model, else the model).
    #[arg(long)]
    pub evolver_model: Option<String>,
    /// The built-in agent's temperature [default: 0; in the rl arm 1, the
    /// temperature whose answers the student trains on].
    #[arg(long)]
    pub temperature: Option<f32>,
    /// Sent as the request's `seed` (models that honour it repeat
    /// themselves) [default: 0].
    #[arg(long)]
    pub seed: Option<u64>,
    /// The built-in agent's model calls per round at most [default: 16].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=200))]
    pub max_steps: Option<u32>,
    /// Seconds the built-in agent's `run` command may take [default: 30].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub run_timeout: Option<u64>,
    /// Who answers: metaclaw's built-in agent loop, or a real OpenClaw
    /// (`openclaw agent --local`, the reference harness's layout).
    #[arg(long, value_enum, default_value_t = run::AgentKind::Builtin)]
    pub agent: run::AgentKind,
    /// The `openclaw` program for --agent openclaw (default: on PATH).
    #[arg(long, value_name = "PATH")]
    pub openclaw: Option<PathBuf>,
    /// Only the set's first N days (a quick, cheaper run).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=30))]
    pub days: Option<u64>,
    /// Hold every second day (day02, day04, …) out of learning: the
    /// learning arms learn from the other days only, and the report's
    /// held-out scores are of days no arm learned from.
    #[arg(long)]
    pub split: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ApiFormatArg {
    Openai,
    Anthropic,
}

#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    /// The run folder.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

pub fn run(config_path: &Path, cmd: BenchCommand) -> Result<ExitCode> {
    match cmd {
        BenchCommand::Run(args) => run_bench(config_path, *args),
        BenchCommand::Report(args) => {
            let settings = read_settings(&args.out)?;
            let records = run::Records::read(&args.out)?;
            let md = report::write(&args.out, &settings, &records)?;
            say_raw!("{md}");
            say!("wrote {}/report.{{md,svg,json}}", args.out.display());
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::CheckRound(args) => {
            let bench = data::Bench::load(args.set)?;
            let checked = command::check_rounds(
                &bench,
                args.day.as_deref(),
                args.round.as_deref(),
                args.command.as_deref(),
                args.workspace.as_deref(),
            )?;
            if args.json {
                say!("{}", serde_json::to_string(&checked)?);
            } else {
                for round in &checked {
                    let verdict = if round.passed { "pass" } else { "FAIL" };
                    say!("{} {} {verdict}", round.day, round.round);
                    for part in &round.parts {
                        let what = part.checker.map_or("inline", checks::Checker::name);
                        say!(
                            "  [{}] {what}: {}",
                            part.code,
                            part.output.replace('\n', " | ")
                        );
                    }
                }
            }
            let all = checked.iter().all(|r| r.passed);
            Ok(if all {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        BenchCommand::Check { name, args } => {
            let Some(checker) = checks::Checker::from_name(&name) else {
                bail!("no checker {name:?}: iso8601, filename, metadata, backup or done_log");
            };
            let cwd = std::env::current_dir()?;
            let outcome = checks::run(checker, &args, &cwd);
            say!("{}", outcome.message);
            Ok(ExitCode::from(outcome.code.clamp(0, 255) as u8))
        }
    }
}

fn read_settings(dir: &Path) -> Result<run::RunSettings> {
    let file = dir.join("run.json");
    let text = std::fs::read_to_string(&file).map_err(|e| {
        anyhow::anyhow!(
            "{} is not a bench run ({}: {e})",
            dir.display(),
            file.display()
        )
    })?;
    serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{} is not a bench run's settings: {e}", file.display()))
}

fn run_bench(config_path: &Path, args: RunArgs) -> Result<ExitCode> {
    let mut user = load_config(config_path)?;
    let model = bench_model(&args, &user)?;
    let api = ModelApi::resolve(&args, &user)?;
    // The arms' metaclaw calls the same model at the same API.
    {
        let llm = &mut user.config.llm;
        llm.api_base = api.base.clone();
        llm.api_format = api.format;
        llm.api_key = api.key.clone();
        llm.provider = metaclaw_core::config::Provider::Custom;
        llm.fallbacks.clear();
    }
    let arms = distinct(&args.arms);
    note_unused_flags(&args);
    let days = days_limit(args.days, args.set)?;
    let settings = run::RunSettings {
        set: args.set,
        model: model.clone(),
        arms,
        repeat: args.repeat,
        temperature: args.temperature.unwrap_or(0.0),
        rl_temperature: args.temperature.unwrap_or(1.0),
        seed: args.seed.unwrap_or(0),
        max_steps: args.max_steps.unwrap_or(16),
        api_base: api.base,
        api_format: api.format,
        helpers: arms::Helpers {
            judge: args.judge_model,
            evolver: args.evolver_model,
        },
        agent: args.agent,
        days,
        split: args.split,
    };
    // The rl arm's requirements are checked before anything runs.
    if let Some(&arm) = settings.arms.iter().find(|a| a.trains()) {
        arms::arm_config(&user, arm, &model, &settings.helpers)?;
    }
    let dir = args
        .out
        .unwrap_or_else(|| default_out(settings.set, &model));
    run::open(&dir, &settings, &provenance::Measured::this())?;
    let ctx = run::RunContext {
        dir: dir.clone(),
        user,
        api_key: api.key,
        run_timeout: Duration::from_secs(args.run_timeout.unwrap_or(30)),
        openclaw: args.openclaw,
    };
    let rt = runtime()?;
    let outcome = rt.block_on(run::run(&settings, &ctx));
    // The report covers what is recorded, finished or not.
    let records = run::Records::read(&dir)?;
    let md = report::write(&dir, &settings, &records)?;
    outcome?;
    say_raw!("{md}");
    say!("wrote {}/report.{{md,svg,json}}", dir.display());
    Ok(ExitCode::SUCCESS)
}

/// `--model`, else `llm.model_id`; one there must be.
fn bench_model(args: &RunArgs, user: &LoadedConfig) -> Result<String> {
    let model = args
        .model
        .clone()
        .filter(|m| !m.trim().is_empty())
        .unwrap_or_else(|| user.config.llm.model_id.trim().to_string());
    if model.is_empty() {
        bail!("no model to bench: pass --model, or set llm.model_id");
    }
    Ok(model)
}

/// The model's API the run calls: the flags, else the config's.
struct ModelApi {
    base: String,
    format: ApiFormat,
    key: Option<String>,
}

impl ModelApi {
    fn resolve(args: &RunArgs, user: &LoadedConfig) -> Result<Self> {
        let base = match &args.base_url {
            Some(url) => url.trim().trim_end_matches('/').to_string(),
            None => user.api_base(),
        };
        if base.is_empty() {
            bail!(
                "no model API: pass --base-url (e.g. https://api.openai.com/v1), or set \
                 llm.api_base or llm.provider"
            );
        }
        let format = match args.api_format {
            Some(ApiFormatArg::Openai) => ApiFormat::Openai,
            Some(ApiFormatArg::Anthropic) => ApiFormat::Anthropic,
            None => user.config.llm.api_format,
        };
        let key = match &args.api_key_env {
            Some(var) => Some(std::env::var(var).map_err(|_| {
                anyhow::anyhow!("--api-key-env {var}: the environment has no {var}")
            })?),
            None => user.config.llm.api_key.clone(),
        };
        Ok(Self { base, format, key })
    }
}

/// The arms in their first order, each once.
fn distinct(given: &[Arm]) -> Vec<Arm> {
    let mut arms = Vec::new();
    for &arm in given {
        if !arms.contains(&arm) {
            arms.push(arm);
        }
    }
    arms
}

/// Says which flags do nothing with the chosen agent.
fn note_unused_flags(args: &RunArgs) {
    if args.agent == run::AgentKind::Openclaw {
        let ignored: Vec<&str> = [
            ("--temperature", args.temperature.is_some()),
            ("--seed", args.seed.is_some()),
            ("--max-steps", args.max_steps.is_some()),
            ("--run-timeout", args.run_timeout.is_some()),
        ]
        .iter()
        .filter(|(_, given)| *given)
        .map(|(flag, _)| *flag)
        .collect();
        if !ignored.is_empty() {
            say!(
                "note: {} set the built-in agent; OpenClaw runs with the reference harness's \
                 config and its own sampling, tool and step settings, so they do nothing here",
                ignored.join(", ")
            );
        }
    } else if args.openclaw.is_some() {
        say!("note: --openclaw does nothing without --agent openclaw");
    }
}

/// `--days N`, checked against the set.
fn days_limit(days: Option<u64>, set: Set) -> Result<Option<usize>> {
    match days {
        Some(n) => {
            let all = data::Bench::load(set)?.days.len();
            if n as usize > all {
                bail!("--days {n}: the {} set has {all} days", set.as_str());
            }
            Ok(Some(n as usize))
        }
        None => Ok(None),
    }
}

/// `bench-runs/<set>-<model>`, the model's name made safe for a path.
fn default_out(set: Set, model: &str) -> PathBuf {
    let safe: String = model
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    PathBuf::from("bench-runs").join(format!("{}-{safe}", set.as_str()))
}
