//! The `metaclaw` command line.

mod claws_cmd;
mod config_cmd;
mod demo;
mod doctor;
mod experiments_cmd;
mod feedback_cmd;
mod learn_cmd;
mod lifecycle;
mod plugins_cmd;
mod scheduler_cmd;
mod sessions_cmd;
mod setup;
mod skills_cmd;
mod skills_stats;
mod status_cmd;
mod tinker_cmd;
mod train_cmd;
mod ui_cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Parser, Subcommand, ValueEnum};

use metaclaw_core::config::{self, LoadedConfig};
use metaclaw_core::home::Home;

#[derive(Parser, Debug)]
#[command(name = "metaclaw", version, long_version = metaclaw_core::plugins::embedded::LONG_VERSION, about = "A learning proxy between your AI agent and its LLM", long_about = None)]
pub struct Cli {
    /// Config file (default: <home>/config.yaml; home is $METACLAW_HOME or ~/.metaclaw).
    #[arg(short = 'c', long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Write the config: interactive on a terminal, or from flags.
    Setup(SetupArgs),
    /// Start the proxy in the background and wait until it is healthy.
    Start(StartArgs),
    /// Stop the running proxy (`--restore` also gives the agent its config back).
    Stop(StopArgs),
    /// Stop, put the agent's config back, forget the wiring (`--purge --yes`: delete the home).
    Uninstall(UninstallArgs),
    /// Is it running, and what has it recorded?
    Status(JsonFlag),
    /// Check the setup: config, upstream, plugins, skills, wiring, store,
    /// disk, port; each ok, warning or error with the fix.
    Doctor(DoctorArgs),
    /// Show, read or change the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Recorded sessions and their turns.
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// WebAssembly plugins: list, inspect, add, remove, pin.
    #[command(subcommand)]
    Plugins(PluginsCommand),
    /// The skill library: list, show, search, add, remove, history.
    #[command(subcommand)]
    Skills(SkillsCommand),
    /// Learning from ended sessions: run a job now, see the queue.
    #[command(subcommand)]
    Learn(LearnCommand),
    /// Your verdict on a turn or a session (thumbs up/down or a score): it
    /// outranks the judge in the rewards learning, the skills' outcomes and
    /// the canaries use.
    Feedback(FeedbackArgs),
    /// Canaries: each candidate skill under test, its arms' sessions and
    /// rewards, the estimate and the decision (docs/learning.md).
    #[command(subcommand)]
    Experiments(ExperimentsCommand),
    /// The Tinker training service (rl.tinker_base_url): check it, train
    /// on a file of datums, see the training runs.
    #[command(subcommand)]
    Tinker(TinkerCommand),
    /// Run task files through the running proxy with a built-in agent
    /// (tools sandboxed in a throwaway workspace): samples for learning
    /// without a human.
    Rollout(metaclaw_bench::rollout::RolloutArgs),
    /// MetaClaw-Bench with any model: the days run through a built-in
    /// agent in arms (direct, skills, learn, rl), scored strictly, with a
    /// report (docs/bench.md).
    #[command(subcommand)]
    Bench(metaclaw_bench::BenchCommand),
    /// `rollout`'s sandbox: runs one command confined (internal).
    #[command(name = "sandbox-exec", hide = true)]
    SandboxExec(metaclaw_bench::rollout::SandboxExecArgs),
    /// Training from the student's judged turns (rl/auto): a step now,
    /// the queue and the steps so far.
    Train(TrainArgs),
    /// The training scheduler (auto, or scheduler.enabled): each signal,
    /// whether a window is open and why, the next opening, past windows.
    #[command(subcommand)]
    Scheduler(SchedulerCommand),
    /// Open the dashboard of the running proxy in the browser (`--print`:
    /// only print its address).
    Ui(UiArgs),
    /// Print the version.
    Version(JsonFlag),
    /// Developer tools.
    #[command(subcommand)]
    Dev(DevCommand),
}

#[derive(Args, Debug, Clone, Default)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["turn", "session"])))]
#[command(group(clap::ArgGroup::new("verdict").required(true).args(["up", "down", "score"])))]
pub struct FeedbackArgs {
    /// The turn (a response's `x-metaclaw-turn-id`; `sessions show` lists
    /// a session's turns).
    #[arg(long)]
    pub turn: Option<String>,
    /// The whole session: every answered turn without feedback of its own.
    #[arg(long)]
    pub session: Option<String>,
    /// Thumbs up (+1).
    #[arg(long)]
    pub up: bool,
    /// Thumbs down (-1).
    #[arg(long)]
    pub down: bool,
    /// A score in [-1, 1].
    #[arg(long, allow_hyphen_values = true)]
    pub score: Option<f64>,
    /// Why (stored with it, secrets redacted).
    #[arg(long)]
    pub comment: Option<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Clone, Default)]
pub struct UiArgs {
    /// Print the dashboard's address; do not open a browser.
    #[arg(long)]
    pub print: bool,
}

#[derive(Args, Debug, Clone, Default)]
pub struct JsonFlag {
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Clone, Default)]
pub struct DoctorArgs {
    /// Also send the upstream one small request with the key (GET /models).
    #[arg(long)]
    pub online: bool,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Clone, Default)]
pub struct StartArgs {
    /// Run in this process instead of in the background.
    #[arg(long)]
    pub foreground: bool,
    /// Listen on this port (0: any free port).
    #[arg(long)]
    pub port: Option<u16>,
    /// Operating mode.
    #[arg(long, value_enum)]
    pub mode: Option<ModeArg>,
    /// Show the learning loop on built-in dummy models (no API key; the
    /// demo keeps its data in <home>/demo).
    #[arg(long)]
    pub demo: bool,
    /// Leave the agent's config alone (default: point `claw_type` at the proxy).
    #[arg(long, env = "METACLAW_NO_WIRE", value_parser = clap::builder::FalseyValueParser::new())]
    pub no_wire: bool,
    /// Leave the skill library as it is this time (default: install the
    /// built-in skills new in this version; see `skills.install_builtin`).
    #[arg(long, env = "METACLAW_NO_BUILTIN_SKILLS", value_parser = clap::builder::FalseyValueParser::new())]
    pub no_builtin_skills: bool,
    /// The log file the daemon writes and rotates past `log.max_mb` (set by
    /// `start` for the daemon it runs in the background).
    #[arg(long, hide = true)]
    pub log_file: Option<std::path::PathBuf>,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeArg {
    #[value(alias = "skills_only")]
    SkillsOnly,
    Rl,
    #[value(alias = "madmax")]
    Auto,
}

impl ModeArg {
    fn as_str(self) -> &'static str {
        match self {
            ModeArg::SkillsOnly => "skills_only",
            ModeArg::Rl => "rl",
            ModeArg::Auto => "auto",
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct StopArgs {
    /// Seconds to wait for a clean stop before killing the process.
    #[arg(long, default_value_t = 20)]
    pub timeout: u64,
    /// Also put back every agent config metaclaw wired.
    #[arg(long)]
    pub restore: bool,
}

#[derive(Args, Debug, Clone)]
pub struct UninstallArgs {
    /// Also delete the metaclaw home (recorded sessions, skills, plugins).
    #[arg(long)]
    pub purge: bool,
    /// Confirm `--purge`.
    #[arg(long)]
    pub yes: bool,
    /// Seconds to wait for a clean stop before killing the process.
    #[arg(long, default_value_t = 20)]
    pub timeout: u64,
}

#[derive(Args, Debug, Clone, Default)]
pub struct SetupArgs {
    /// Never prompt; take values from flags and keep the rest of the config.
    #[arg(long)]
    pub non_interactive: bool,
    /// kimi, qwen, openai, openrouter, minimax, volcengine, novita or custom.
    #[arg(long)]
    pub provider: Option<String>,
    /// The upstream's OpenAI-compatible base URL (e.g. https://api.openai.com/v1).
    #[arg(long, value_name = "URL")]
    pub api_base: Option<String>,
    /// Read the upstream key from this environment variable (recommended).
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// Store the upstream key in config.yaml (mode 0600).
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,
    /// The model to use when a request names none.
    #[arg(long, value_name = "ID")]
    pub model: Option<String>,
    /// The agent to wire: openclaw, hermes, copaw, ironclaw, zeroclaw, picoclaw, nanoclaw, nemoclaw or none.
    #[arg(long, value_name = "CLAW")]
    pub claw: Option<String>,
    /// skills_only, rl or auto.
    #[arg(long)]
    pub mode: Option<String>,
    /// The proxy's port.
    #[arg(long)]
    pub port: Option<u16>,
}

#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// The effective configuration, secrets masked.
    Show,
    /// One value, by dotted key (e.g. proxy.port).
    Get { key: String },
    /// Change one value; it is checked against the schema first.
    Set { key: String, value: String },
    /// Where the config file is.
    Path,
}

#[derive(Subcommand, Debug)]
pub enum SessionsCommand {
    /// Sessions, newest first.
    List {
        #[arg(long)]
        json: bool,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Only this agent's (its X-Agent-Id, or OpenClaw's agent id).
        #[arg(long, value_name = "ID", value_parser = metaclaw_core::agent_id::AgentId::parse)]
        agent: Option<metaclaw_core::agent_id::AgentId>,
    },
    /// One session and its turns (by id, or by the agent's session id).
    Show {
        id: String,
        #[arg(long)]
        json: bool,
        /// Include each turn's request messages.
        #[arg(long)]
        messages: bool,
        /// Include what the trainable model sampled (rl/auto): prompt token
        /// ids, sampled token ids and their logprobs.
        #[arg(long)]
        tokens: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum ExperimentsCommand {
    /// Every canary, newest first.
    List {
        /// Only this agent's own: its skills' (`@ID/NAME`) and its own
        /// run's weights (`agents.<id>`).
        #[arg(long, value_name = "ID", value_parser = metaclaw_core::agent_id::AgentId::parse)]
        agent: Option<metaclaw_core::agent_id::AgentId>,
        #[arg(long)]
        json: bool,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// One canary: arms, rewards, the estimate and its interval, the
    /// evidence and the decision (or why there is none yet).
    Show {
        id: i64,
        #[arg(long)]
        json: bool,
    },
    /// Serve a candidate to every session now, whatever its test says
    /// (asks the running daemon).
    Promote {
        id: i64,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Take a candidate out of retrieval now (`retired:canary`; `skills
    /// restore` puts it back), whatever its test says (asks the daemon).
    Rollback {
        id: i64,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Put a skill's current version under test (a skill you wrote
    /// included: you opt it in), as an evolved skill is: `canary.share` of
    /// the sessions it fits get it, as many go without, until the test
    /// decides (asks the running daemon).
    Start {
        /// The skill's name (`metaclaw skills list`).
        skill: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum LearnCommand {
    /// Run a session's learning job now (the session ends first if it is
    /// open), or every queued and failed job; waits until they finish.
    Now {
        session: Option<String>,
        /// Only this agent's sessions (with a session: it must be the
        /// agent's).
        #[arg(long, value_name = "ID", value_parser = metaclaw_core::agent_id::AgentId::parse)]
        agent: Option<metaclaw_core::agent_id::AgentId>,
        #[arg(long)]
        json: bool,
    },
    /// Learning jobs: queued, running, failed and done.
    Status {
        /// Only the jobs of this agent's sessions.
        #[arg(long, value_name = "ID", value_parser = metaclaw_core::agent_id::AgentId::parse)]
        agent: Option<metaclaw_core::agent_id::AgentId>,
        #[arg(long)]
        json: bool,
        /// At most this many, newest first.
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
}

#[derive(Subcommand, Debug)]
pub enum SchedulerCommand {
    /// Each signal's value and source, whether a window is open and why,
    /// the next expected opening, the daemon's state and past windows.
    Status(JsonFlag),
}

#[derive(clap::Args, Debug)]
pub struct TrainArgs {
    /// The agent's own run (`agents.<id>` in the config), not the shared one.
    #[arg(long, global = true, value_name = "ID", value_parser = metaclaw_core::agent_id::AgentId::parse)]
    pub agent: Option<metaclaw_core::agent_id::AgentId>,
    #[command(subcommand)]
    pub command: TrainCommand,
}

#[derive(Subcommand, Debug)]
pub enum TrainCommand {
    /// Run one training step now on the ready samples (at least one, at
    /// most rl.batch_size), serve its weights, and print what it did.
    Step {
        #[arg(long)]
        json: bool,
    },
    /// The training queue (samples waiting, ready, trained, skipped) and
    /// the active run's steps.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// The active run's checkpoints on the training service: training
    /// states and sampler weights, with the step each was saved at.
    Checkpoints {
        #[arg(long)]
        json: bool,
    },
    /// Serve earlier sampler weights (a path `train checkpoints` lists):
    /// the running daemon swaps to them now and after restarts; training
    /// goes on from its own state.
    Rollback {
        /// A sampler checkpoint's path (`tinker://…`).
        path: String,
    },
    /// Train again after a "collapsing" verdict paused training
    /// (`rl.on_collapse: pause`); the verdict judges the steps from now on.
    Resume,
}

#[derive(Subcommand, Debug)]
pub enum TinkerCommand {
    /// Connect to the training service: its dialect, flags and models, and
    /// whether rl.model can be trained there.
    Check {
        #[arg(long)]
        json: bool,
    },
    /// Train the LoRA of rl.model on Tinker datums (one JSON object per
    /// line: model_input, loss_fn_inputs), continuing the active run: a
    /// restart continues from the run's last saved state.
    Train(TinkerTrainArgs),
    /// Training runs and their last steps.
    Status {
        #[arg(long)]
        json: bool,
        /// Steps shown per run, newest first.
        #[arg(long, default_value_t = 5)]
        steps: usize,
    },
}

/// `metaclaw tinker train`: its flags, handed to the command whole.
#[derive(Args, Debug, Clone)]
pub struct TinkerTrainArgs {
    /// The datums (JSON lines); steps take them in order, wrapping.
    #[arg(long, value_name = "FILE")]
    data: PathBuf,
    /// Steps to train in this call.
    #[arg(long, default_value_t = 1)]
    steps: u32,
    /// Datums per step (default: rl.batch_size).
    #[arg(long)]
    batch: Option<usize>,
    /// cross_entropy, importance_sampling, ppo or cispo (default: rl.loss_fn).
    #[arg(long)]
    loss: Option<String>,
    /// Adam's learning rate (default: rl.learning_rate).
    #[arg(long)]
    learning_rate: Option<f64>,
    /// Save the training state every this many steps (0: only at the end).
    #[arg(long, default_value_t = 1)]
    save_every: u32,
    /// Start a new run instead of continuing the active one.
    #[arg(long)]
    fresh: bool,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand, Debug)]
pub enum SkillsCommand {
    /// The skills in the library.
    List {
        /// general, task-specific or common-mistakes.
        #[arg(long)]
        category: Option<String>,
        #[arg(long)]
        tag: Option<String>,
        /// Only what this agent's turns see: the shared skills and its own
        /// layer's (`@AGENT/NAME`), its own in place of a shared one of the
        /// same name.
        #[arg(long, value_name = "ID", value_parser = metaclaw_core::agent_id::AgentId::parse)]
        agent: Option<metaclaw_core::agent_id::AgentId>,
        #[arg(long)]
        json: bool,
    },
    /// One skill's SKILL.md and the files it brings.
    Show {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// How skills fared: per version, the turns it was injected into,
    /// the judged ones' rewards, the success estimate and its interval,
    /// and flags (docs/skills.md, "Outcomes").
    Stats {
        /// One skill (all its versions); default: every skill's current one.
        name: Option<String>,
        /// Only this agent's sessions' turns, of the skills it sees
        /// (retrieval ranks by every agent's).
        #[arg(long, value_name = "ID", value_parser = metaclaw_core::agent_id::AgentId::parse)]
        agent: Option<metaclaw_core::agent_id::AgentId>,
        #[arg(long)]
        json: bool,
    },
    /// What the retriever would inject for a message, with scores.
    Search {
        query: String,
        /// As a turn of this agent would get them (its own skills in place
        /// of the shared ones of the same name); default: `default`.
        #[arg(long, value_name = "ID", value_parser = metaclaw_core::agent_id::AgentId::parse)]
        agent: Option<metaclaw_core::agent_id::AgentId>,
        #[arg(long)]
        json: bool,
    },
    /// Copy a folder of skills into the library: one skill folder, or a
    /// collection (~/.claude/skills, ~/.openclaw/skills, the original
    /// MetaClaw's ~/.metaclaw/skills, a git checkout), with their bundled
    /// files. Never overwrites a different skill unless --force.
    Import {
        path: PathBuf,
        /// Replace a library skill of the same name that differs.
        #[arg(long)]
        force: bool,
        #[arg(long)]
        json: bool,
    },
    /// Check SKILL.md files against the Agent Skills spec, as Codex, Claude
    /// Code and OpenClaw apply it: a SKILL.md, a skill folder or a folder
    /// of them (default: the library). Exits 1 when an agent would refuse
    /// one.
    Check {
        path: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Write the library's live skills into an agent's own skill folder,
    /// where it loads them natively: openclaw (~/.openclaw/skills), hermes
    /// (~/.hermes/skills), codex (~/.agents/skills), claude
    /// (~/.claude/skills) or a folder. Never overwrites the agent's own
    /// skills, nor an export edited since; run it again to update.
    Export {
        /// openclaw, hermes, codex, claude, or a folder.
        #[arg(long)]
        to: String,
        /// Only these skills (default: every live skill).
        names: Vec<String>,
        /// The skills this agent's turns see (its own layer's in place of
        /// the shared ones of the same name); default: the shared ones.
        #[arg(long, value_name = "ID", value_parser = metaclaw_core::agent_id::AgentId::parse)]
        agent: Option<metaclaw_core::agent_id::AgentId>,
        /// Also remove what metaclaw exported there earlier that the
        /// library no longer has live (retired, removed), unless edited.
        #[arg(long)]
        sync: bool,
        /// Say what it would do; write nothing.
        #[arg(long)]
        dry_run: bool,
        #[arg(long)]
        json: bool,
    },
    /// Check a SKILL.md (or a folder holding one) and copy it into the library.
    Add {
        path: PathBuf,
        /// Replace a skill of the same name.
        #[arg(long)]
        force: bool,
    },
    /// Delete a skill from the library.
    Remove { name: String },
    /// Put a skill that `skills.auto_retire` took out of retrieval back.
    Restore { name: String },
    /// Make a skill of an agent's layer (`@AGENT/NAME`: learned from that
    /// agent's sessions) shared: every agent's turns see it from now on.
    Share { id: String },
    /// A skill's recorded changes: who, when, why, content hash.
    History {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Install the built-in skills (idempotent; never overwrites your edits).
    InstallBuiltin,
    /// Revisions of built-in and your own skills that learning drafted:
    /// listed with a diff until you accept or reject them.
    Review {
        #[command(subcommand)]
        action: Option<ReviewAction>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum ReviewAction {
    /// Write revision ID into the library (refused if the skill changed since).
    Accept { id: i64 },
    /// Drop revision ID.
    Reject {
        id: i64,
        /// Kept with the revision (shown by `sessions show`).
        #[arg(long)]
        reason: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub enum PluginsCommand {
    /// LoadedConfig plugins: name, version, kind, hash, status, grants.
    List {
        #[arg(long)]
        json: bool,
    },
    /// What a .wasm file is: its metadata and the world it implements.
    Inspect {
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Check a plugin and copy it into the plugins folder.
    Add {
        file: PathBuf,
        /// Replace a different build of the same name and version.
        #[arg(long)]
        force: bool,
    },
    /// Delete a plugin from the plugins folder: NAME or NAME@VERSION.
    Remove { spec: String },
    /// Pin every loadable plugin (name, version, sha256) in <home>/metaclaw.lock.
    Lock {
        /// The file to trust under its name, where the choice is yours:
        /// several files claim one name, or the name is granted by name
        /// (`plugins.grants.NAME`) and the lock does not pin this file yet.
        /// Only the named file is pinned under that name; repeatable.
        #[arg(value_name = "NAME@sha256:HEX")]
        pins: Vec<metaclaw_core::config::FilePin>,
        /// Let the drop-in called NAME replace the first-party plugin of
        /// that name (pins that exact file; NAME@sha256:HEX when several
        /// files claim it); repeatable.
        #[arg(long = "override", value_name = "NAME[@sha256:HEX]")]
        overrides: Vec<metaclaw_core::config::FileRef>,
    },
    /// Compare the plugin files with the lock; exits non-zero on any difference.
    Verify,
    /// Call a plugin with JSON input (a finished turn for a scorer).
    Call {
        /// NAME or NAME@VERSION.
        spec: String,
        /// JSON text, a file, or - for stdin.
        #[arg(long)]
        input: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum DevCommand {
    /// Run the dummy OpenAI-compatible upstream (behaviour picked by model name).
    Upstream {
        #[arg(long, default_value_t = 18080)]
        port: u16,
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// Answer 401 to API requests that do not carry this key (as
        /// `Authorization: Bearer KEY` or `x-api-key: KEY`).
        #[arg(long, value_name = "KEY")]
        require_key: Option<String>,
        /// The folder of a `tokenizer.json` the `teacher` model of
        /// `/v1/completions` reads text with (a distillation teacher that
        /// shares that model's tokenizer); without it, one token per
        /// character.
        #[arg(long, value_name = "DIR")]
        teacher_tokenizer: Option<std::path::PathBuf>,
    },
    /// Run a fake Tinker-compatible training server (a trainable bigram
    /// model `fake-bigram`; faults picked by the base model's name).
    Tinker {
        #[arg(long, default_value_t = 18011)]
        port: u16,
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
    },
}

/// Exit codes: 0 success, 1 failure, 2 usage (clap), 3 `status`: not running.
pub fn run(cli: Cli) -> ExitCode {
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn dispatch(cli: Cli) -> Result<ExitCode> {
    let command = match cli.command {
        // Before anything else: it runs with an empty environment, and
        // alone (unshare needs a single-threaded process).
        Command::SandboxExec(args) => return Ok(metaclaw_bench::rollout::sandbox_exec(args)),
        command => command,
    };
    let home = Home::resolve()?;
    let config_path = cli.config.clone().unwrap_or_else(|| home.config_file());
    match command {
        Command::Setup(args) => setup::run(&home, &config_path, args),
        Command::Start(args) => lifecycle::start(&home, &config_path, args),
        Command::Stop(args) => lifecycle::stop(&home, args),
        Command::Uninstall(args) => lifecycle::uninstall(&home, &config_path, args),
        Command::Status(args) => status_cmd::status(&home, &config_path, args),
        Command::Doctor(args) => doctor::run(&home, &config_path, args),
        Command::Ui(args) => ui_cmd::run(&home, &config_path, args),
        Command::Config(cmd) => config_cmd::run(&config_path, cmd),
        Command::Sessions(cmd) => sessions_cmd::run(&home, &config_path, cmd),
        Command::Plugins(cmd) => plugins_cmd::run(&home, &config_path, cmd),
        Command::Skills(cmd) => skills_cmd::run(&home, &config_path, cmd),
        Command::Learn(cmd) => learn_cmd::run(&home, &config_path, cmd),
        Command::Feedback(args) => feedback_cmd::run(&home, &config_path, args),
        Command::Experiments(cmd) => experiments_cmd::run(&home, &config_path, cmd),
        Command::Tinker(cmd) => tinker_cmd::run(&home, &config_path, cmd),
        Command::Rollout(args) => metaclaw_bench::rollout::run(&home, &config_path, args),
        Command::SandboxExec(args) => Ok(metaclaw_bench::rollout::sandbox_exec(args)),
        Command::Bench(cmd) => metaclaw_bench::run(&config_path, cmd),
        Command::Train(cmd) => train_cmd::run(&home, &config_path, cmd),
        Command::Scheduler(SchedulerCommand::Status(args)) => {
            scheduler_cmd::status(&home, &config_path, args.json)
        }
        Command::Version(args) => {
            if args.json {
                say!(
                    "{}",
                    serde_json::json!({
                        "name": "metaclaw",
                        "version": env!("CARGO_PKG_VERSION"),
                        "plugins": metaclaw_core::plugins::embedded::versions_json(),
                    })
                );
            } else {
                say!(
                    "metaclaw {}",
                    metaclaw_core::plugins::embedded::LONG_VERSION
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Dev(DevCommand::Upstream {
            port,
            host,
            require_key,
            teacher_tokenizer,
        }) => dev_upstream(&host, port, require_key, teacher_tokenizer),
        Command::Dev(DevCommand::Tinker { port, host }) => dev_tinker(&host, port),
    }
}

/// Loads the config and prints its warnings (unknown keys) to stderr.
fn load_config(path: &std::path::Path) -> Result<LoadedConfig> {
    Ok(config::load_warned(path)?)
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(metaclaw_core::term::runtime()?)
}

#[cfg(feature = "dev-tools")]
fn dev_upstream(
    host: &str,
    port: u16,
    require_key: Option<String>,
    teacher_tokenizer: Option<std::path::PathBuf>,
) -> Result<ExitCode> {
    use metaclaw_mock_upstream::Dummy;
    metaclaw_core::logging::init("info");
    let tokenizer = match teacher_tokenizer {
        None => None,
        Some(dir) => {
            let renderer = metaclaw_chat::render::ModelFiles::from_dir(&dir)
                .and_then(|files| metaclaw_chat::render::Renderer::new(&files))
                .map_err(|e| anyhow::anyhow!("--teacher-tokenizer {}: {e}", dir.display()))?;
            Some(std::sync::Arc::new(renderer))
        }
    };
    let rt = runtime()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind((host, port)).await?;
        let addr = listener.local_addr()?;
        say!("dummy upstream listening on http://{addr}/v1");
        let mut dummy = match require_key {
            Some(key) => Dummy::requiring_key(key),
            None => Dummy::default(),
        };
        if let Some(tokenizer) = tokenizer {
            dummy = dummy.with_tokenizer(tokenizer);
        }
        // The bench's scripted models, in a build with `test-servers`.
        let dummy = metaclaw_bench::test_servers::with_bench_models(dummy);
        metaclaw_mock_upstream::serve(listener, std::sync::Arc::new(dummy)).await?;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(not(feature = "dev-tools"))]
fn dev_upstream(
    _host: &str,
    _port: u16,
    _require_key: Option<String>,
    _teacher_tokenizer: Option<std::path::PathBuf>,
) -> Result<ExitCode> {
    anyhow::bail!("{}", metaclaw_core::daemon::NO_DUMMY_UPSTREAM)
}

/// The fake training service: only in a build with `test-servers`.
fn dev_tinker(host: &str, port: u16) -> Result<ExitCode> {
    if !metaclaw_bench::test_servers::BUILT {
        anyhow::bail!(
            "`metaclaw dev tinker`: {}",
            metaclaw_bench::test_servers::NOT_BUILT
        );
    }
    metaclaw_core::logging::init("info");
    let rt = runtime()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind((host, port)).await?;
        let addr = listener.local_addr()?;
        say!("fake tinker listening on http://{addr}");
        metaclaw_bench::test_servers::serve_fake_tinker(listener).await
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Local time, for people.
fn local_time(ms: i64) -> String {
    use chrono::TimeZone;
    chrono::Local
        .timestamp_millis_opt(ms)
        .single()
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_else(|| "-".into())
}

fn human_duration(secs: f64) -> String {
    let s = secs as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}
