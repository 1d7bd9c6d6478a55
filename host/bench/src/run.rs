//! `bench run`: the arms one after another, each repeat in a metaclaw home
//! of its own, the days in order; every finished round and night appended
//! to the run folder's records, so an interrupted run picks up at the first
//! round not recorded.
//!
//! The run folder:
//!
//! | path | what |
//! |---|---|
//! | `run.json` | the settings, and what measures the run (binary, built-in bank); a resume must match both |
//! | `arms.jsonl` | one arm and repeat a line, as it started: its skill bank and models ([`ArmRecord`]) |
//! | `rounds.jsonl` | one finished round a line ([`RoundRecord`]) |
//! | `nights.jsonl` | one finished day a line: what learning did that night (in `rl`, the train step and the sample queue) |
//! | `<arm>-<n>/home/` | the arm's metaclaw home (store, skills, logs) |
//! | `<arm>-<n>/days/dayNN/work/` | the day's workspace; `conversation.json` beside it |
//! | `report.md`, `report.json`, `report.svg` | [`super::report`] |

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::arms::{self, Arm, Helpers, Instance, Night};
use super::command::Checks;
use super::data::{Bench, Set};
use super::day::{self, Agent, DayDir, RoundRecord};
use super::model::Endpoint;
use super::openclaw::{self, ClawDay, OpenClaw, Provider};
use super::provenance::{ArmRecord, Bank, Measured};
use crate::rollout::sandbox::{Limits, Sandbox};
use metaclaw_core::config::{ApiFormat, LoadedConfig};
use metaclaw_core::home::Home;

/// What a run is, fixed when it starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSettings {
    pub set: Set,
    pub model: String,
    pub arms: Vec<Arm>,
    pub repeat: u32,
    pub temperature: f32,
    /// The built-in agent's temperature in the `rl` arm: 1 unless
    /// `--temperature` says otherwise. The student trains only on answers
    /// sampled at temperature 1 (the service's logprobs are the untempered
    /// model's: docs/rl.md), so a greedy agent would leave it nothing.
    pub rl_temperature: f32,
    pub seed: u64,
    pub max_steps: u32,
    /// The model's API (`direct`, and metaclaw's upstream): its base URL
    /// and format. Never its key.
    pub api_base: String,
    pub api_format: ApiFormat,
    pub helpers: Helpers,
    /// Who answers the rounds.
    #[serde(default, skip_serializing_if = "AgentKind::is_builtin")]
    pub agent: AgentKind,
    /// Only the set's first N days (a shorter run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days: Option<usize>,
    /// Held-out days (`--split`): every second day (day02, day04, …) is
    /// scored and never learned from; the learning arms learn from the
    /// others only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub split: bool,
}

impl RunSettings {
    /// The set, cut to the run's days.
    pub fn bench(&self) -> Result<Bench> {
        Ok(Bench::load(self.set)?.first_days(self.days))
    }

    /// Whether the `index`-th day (from 0) is held out of learning.
    pub fn held_out(&self, index: usize) -> bool {
        self.split && index % 2 == 1
    }
}

/// Who answers the rounds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentKind {
    /// metaclaw's own agent loop (the rollout's sandboxed workspace tools).
    #[default]
    Builtin,
    /// A real OpenClaw (`openclaw agent --local`), as the reference harness.
    Openclaw,
}

impl AgentKind {
    pub fn is_builtin(&self) -> bool {
        *self == Self::Builtin
    }
}

/// One finished day: a line of `nights.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NightRecord {
    pub arm: String,
    pub repeat: u32,
    pub day: String,
    /// Skills injected into the closing-feedback turn.
    pub closing_skills: Vec<String>,
    /// The learning job(s), the train step, the skills evolved.
    pub night: Value,
}

/// `run.json`: the settings, and what measures the run.
#[derive(Debug, Serialize, Deserialize)]
struct RunFile {
    #[serde(flatten)]
    settings: RunSettings,
    /// Absent in runs started before runs recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    measured_by: Option<Measured>,
}

/// The run folder's records.
#[derive(Debug, Default)]
pub struct Records {
    /// What measured the run (`run.json`).
    pub measured_by: Option<Measured>,
    pub arms: Vec<ArmRecord>,
    pub rounds: Vec<RoundRecord>,
    pub nights: Vec<NightRecord>,
}

impl Records {
    /// Reads `run.json`'s `measured_by`, `arms.jsonl`, `rounds.jsonl` and
    /// `nights.jsonl` (a line cut by a crash, the last one, is dropped:
    /// that round runs again).
    pub fn read(dir: &Path) -> Result<Self> {
        let measured_by = match std::fs::read(dir.join("run.json")) {
            Ok(bytes) => serde_json::from_slice::<RunFile>(&bytes)
                .ok()
                .and_then(|f| f.measured_by),
            Err(_) => None,
        };
        Ok(Self {
            measured_by,
            arms: read_lines(&dir.join("arms.jsonl"))?,
            rounds: read_lines(&dir.join("rounds.jsonl"))?,
            nights: read_lines(&dir.join("nights.jsonl"))?,
        })
    }

    fn arm_started(&self, arm: Arm, repeat: u32) -> bool {
        self.arms
            .iter()
            .any(|a| a.arm == arm.as_str() && a.repeat == repeat)
    }

    fn day_rounds(&self, arm: Arm, repeat: u32, day: &str) -> Vec<&RoundRecord> {
        let mut rounds: Vec<&RoundRecord> = self
            .rounds
            .iter()
            .filter(|r| r.arm == arm.as_str() && r.repeat == repeat && r.day == day)
            .collect();
        rounds.sort_by_key(|r| r.index);
        rounds
    }

    fn night_done(&self, arm: Arm, repeat: u32, day: &str) -> bool {
        self.nights
            .iter()
            .any(|n| n.arm == arm.as_str() && n.repeat == repeat && n.day == day)
    }
}

fn read_lines<T: serde::de::DeserializeOwned>(file: &Path) -> Result<Vec<T>> {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", file.display())),
    };
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut out = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        match serde_json::from_str(line) {
            Ok(v) => out.push(v),
            Err(_) if i + 1 == lines.len() && !text.ends_with('\n') => {}
            Err(e) => bail!("{} line {}: {e}", file.display(), i + 1),
        }
    }
    Ok(out)
}

fn append(file: &Path, value: &impl Serialize) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .with_context(|| format!("cannot open {}", file.display()))?;
    let mut line = serde_json::to_vec(value)?;
    line.push(b'\n');
    f.write_all(&line)
        .and_then(|()| f.sync_data())
        .with_context(|| format!("cannot write {}", file.display()))
}

/// Opens (or starts) the run in `dir`, measured by `measured`: a folder
/// holding another run's settings, or a run measured by another binary or
/// skill bank, is refused rather than mixed.
pub fn open(dir: &Path, settings: &RunSettings, measured: &Measured) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let file = dir.join("run.json");
    match std::fs::read_to_string(&file) {
        Ok(text) => {
            let existing: RunFile = serde_json::from_str(&text)
                .with_context(|| format!("{} is not a bench run's settings", file.display()))?;
            if &existing.settings != settings {
                bail!(
                    "{} holds a run with other settings ({}): resume it with the same flags, or \
                     pass another --out",
                    dir.display(),
                    serde_json::to_string(&existing.settings)?
                );
            }
            let differ = measured.differences(existing.measured_by.as_ref());
            if !differ.is_empty() {
                bail!(
                    "{} holds a run this binary cannot resume: {}. One run's rounds all come from \
                     one binary and one skill bank, so that their scores compare: resume it with \
                     the binary that started it, or start a fresh run with another --out (or \
                     after removing {})",
                    dir.display(),
                    differ.join("; "),
                    dir.display()
                );
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let run = RunFile {
                settings: settings.clone(),
                measured_by: Some(measured.clone()),
            };
            std::fs::write(&file, serde_json::to_vec_pretty(&run)?)
                .with_context(|| format!("cannot write {}", file.display()))
        }
        Err(e) => Err(e).with_context(|| format!("cannot read {}", file.display())),
    }
}

/// What the run needs besides its settings.
pub struct RunContext {
    pub dir: PathBuf,
    pub user: LoadedConfig,
    /// The model's key (never written down).
    pub api_key: Option<String>,
    pub run_timeout: Duration,
    /// `--openclaw PATH`.
    pub openclaw: Option<PathBuf>,
}

/// Runs every arm and repeat not finished yet.
pub async fn run(settings: &RunSettings, ctx: &RunContext) -> Result<()> {
    let bench = settings.bench()?;
    let openclaw = match settings.agent {
        AgentKind::Builtin => None,
        AgentKind::Openclaw => Some(find_openclaw(ctx).await?),
    };
    let (checks, sandbox) = probe_confinement(ctx)?;
    let records = Records::read(&ctx.dir)?;
    let total = bench.rounds() * settings.arms.len() * settings.repeat as usize;
    let mut progress = Progress::new(total, records.rounds.len());
    let shared = Shared {
        bench,
        openclaw,
        checks,
        sandbox,
        records,
    };
    for &arm in &settings.arms {
        for repeat in 1..=settings.repeat {
            run_repeat(settings, ctx, &shared, (arm, repeat), &mut progress).await?;
        }
    }
    progress.finish();
    Ok(())
}

/// What every arm and repeat of a run shares.
struct Shared {
    bench: Bench,
    openclaw: Option<OpenClaw>,
    checks: Arc<Checks>,
    sandbox: Arc<Sandbox>,
    /// What was recorded before this run started.
    records: Records,
}

/// `--agent openclaw`'s program, noting a version the bench was not
/// tested with.
async fn find_openclaw(ctx: &RunContext) -> Result<OpenClaw> {
    let found = OpenClaw::find(ctx.openclaw.as_deref()).await?;
    if found.version != openclaw::TESTED_VERSION {
        eprintln!(
            "note: OpenClaw {} (the bench is tested with {})",
            found.version,
            openclaw::TESTED_VERSION
        );
    }
    Ok(found)
}

/// The file checks' sandbox (required) and the agent's `run` tool's
/// (off, with a note, where it cannot confine), probed in the run's
/// scratch folder.
fn probe_confinement(ctx: &RunContext) -> Result<(Arc<Checks>, Arc<Sandbox>)> {
    let scratch = ctx.dir.join(".scratch");
    std::fs::create_dir_all(&scratch)
        .with_context(|| format!("cannot create {}", scratch.display()))?;
    // Checks run only confined: without the sandbox the run does not start.
    let exe = std::env::current_exe()
        .context("cannot find metaclaw's own binary (the checks' sandbox runs it)")?;
    let checks = Arc::new(Checks::probe(exe, &scratch.join("checks")).map_err(|why| {
        anyhow::anyhow!(
            "the file checks cannot run confined, so nothing was run (checks never run \
             unconfined): {why}"
        )
    })?);
    eprintln!("file checks: {}", checks.describe());
    let sandbox = Arc::new(Sandbox::probe(&scratch, ctx.run_timeout, Limits::default()));
    if let Some(why) = sandbox.disabled() {
        eprintln!("note: the agent's run tool is off (the file tools work): {why}");
    }
    Ok((checks, sandbox))
}

/// One repeat of an arm, unless all its days are done: its metaclaw
/// started (not for `direct`), its start recorded, its days run, its
/// metaclaw stopped.
async fn run_repeat(
    settings: &RunSettings,
    ctx: &RunContext,
    shared: &Shared,
    (arm, repeat): (Arm, u32),
    progress: &mut Progress,
) -> Result<()> {
    let pending = shared
        .bench
        .days
        .iter()
        .any(|d| !shared.records.night_done(arm, repeat, &d.id));
    if !pending {
        return Ok(());
    }
    let arm_dir = ctx.dir.join(format!("{}-{repeat}", arm.as_str()));
    let (instance, loaded) = match arm {
        Arm::Direct => (None, None),
        _ => {
            let loaded = arms::arm_config(&ctx.user, arm, &settings.model, &settings.helpers)?;
            progress.note(&format!("starting metaclaw for {}-{repeat}", arm.as_str()));
            let home = Instance::home_of(&arm_dir);
            let instance = Instance::start(&home, &loaded).await?;
            (Some(instance), Some(loaded))
        }
    };
    if !shared.records.arm_started(arm, repeat) {
        // Before its first round, the library is the one it starts from.
        let bank = instance
            .as_ref()
            .map(|_| Bank::library(&Home::at(Instance::home_of(&arm_dir)).skills_dir()));
        let record = ArmRecord::new(settings, (arm, repeat), loaded.as_ref(), bank);
        append(&ctx.dir.join("arms.jsonl"), &record)?;
    }
    let (agent, claw) = arm_agent(settings, ctx, shared, arm, instance.as_ref())?;
    let result = run_arm(
        settings,
        &shared.bench,
        &agent,
        instance.as_ref(),
        claw,
        (arm, repeat),
        &arm_dir,
        &ctx.dir,
        &shared.records,
        progress,
    )
    .await;
    if let Some(instance) = instance {
        instance.stop().await;
    }
    result
}

/// The arm's agent, and its OpenClaw with the provider it calls (under
/// `--agent openclaw`).
fn arm_agent<'a>(
    settings: &RunSettings,
    ctx: &RunContext,
    shared: &'a Shared,
    arm: Arm,
    instance: Option<&Instance>,
) -> Result<(Agent, Option<(&'a OpenClaw, Provider)>)> {
    // Where the agent's model calls go: the model's API, or the
    // arm's metaclaw (which holds the key itself).
    let (base, format, key) = match instance {
        None => (&settings.api_base, settings.api_format, ctx.api_key.clone()),
        Some(instance) => (&instance.base, ApiFormat::Openai, None),
    };
    let claw = shared.openclaw.as_ref().map(|openclaw| {
        let provider = Provider {
            base_url: base.clone(),
            format,
            model: settings.model.clone(),
            api_key: key.clone(),
            session: None,
        };
        (openclaw, provider)
    });
    let agent = Agent {
        endpoint: Endpoint::new(base, format, key.as_deref(), "the model's key")?,
        model: settings.model.clone(),
        temperature: match arm.trains() {
            true => settings.rl_temperature,
            false => settings.temperature,
        },
        seed: settings.seed,
        max_steps: settings.max_steps,
        sandbox: shared.sandbox.clone(),
        checks: shared.checks.clone(),
        recorded: instance.map(Instance::store),
    };
    Ok((agent, claw))
}

#[allow(clippy::too_many_arguments)]
async fn run_arm(
    settings: &RunSettings,
    bench: &Bench,
    agent: &Agent,
    instance: Option<&Instance>,
    claw: Option<(&OpenClaw, Provider)>,
    (arm, repeat): (Arm, u32),
    arm_dir: &Path,
    run_dir: &Path,
    records: &Records,
    progress: &mut Progress,
) -> Result<()> {
    let days_dir = arm_dir.join("days");
    for (index, day) in bench.days.iter().enumerate() {
        let held_out = settings.held_out(index);
        if records.night_done(arm, repeat, &day.id) {
            continue;
        }
        let done = records.day_rounds(arm, repeat, &day.id);
        let mut dir = DayDir::prepare(bench, day, &days_dir, done.is_empty())?;
        let mut messages = match done.last() {
            None => day::opening(bench, day),
            Some(last) => dir.conversation(last.messages)?,
        };
        let mut feedback = done.last().map(|r| r.feedback.clone());
        let session = instance.map(|_| format!("bench-{}-{repeat}-{}", arm.as_str(), day.id));
        if let Some((openclaw, provider)) = &claw {
            let provider = Provider {
                session: session.clone(),
                ..provider.clone()
            };
            let (path, work) = (dir.task.path().to_path_buf(), dir.task.work());
            dir.claw = Some(
                ClawDay::prepare(openclaw, bench, day, &path, &work, &provider)
                    .await
                    .with_context(|| stopped_at(arm, repeat, &day.id, "setting up OpenClaw"))?,
            );
        }
        for index in done.len()..day.rounds.len() {
            progress.start(arm, repeat, &day.id, &day.rounds[index].id);
            let record = day::round(
                agent,
                &dir,
                &mut messages,
                day,
                index,
                feedback.as_deref(),
                session.as_deref(),
                (arm.as_str(), repeat),
            )
            .await
            .with_context(|| stopped_at(arm, repeat, &day.id, &day.rounds[index].id))?;
            append(&run_dir.join("rounds.jsonl"), &record)?;
            progress.done(&record);
            feedback = Some(record.feedback);
        }
        let closing_skills = match &feedback {
            Some(fb) => day::close(agent, &dir, &mut messages, fb, session.as_deref())
                .await
                .with_context(|| stopped_at(arm, repeat, &day.id, "its closing feedback"))?,
            None => Vec::new(),
        };
        let night = match (instance, &session) {
            (Some(instance), Some(session)) if held_out => Some(instance.hold_out(session)),
            (Some(instance), Some(session)) => {
                if arm.learns() {
                    progress.note(&format!("{}: learning from the day", day.id));
                }
                Some(
                    instance
                        .night(session, arm)
                        .await
                        .with_context(|| stopped_at(arm, repeat, &day.id, "its night"))?,
                )
            }
            _ => None,
        };
        let mut night = night;
        if let (true, Some(instance)) = (arm.trains(), instance) {
            // The student's samples after the night: how many trained, how
            // many wait, how many were skipped (and why).
            let store = instance.store();
            store.flush().await;
            night.get_or_insert_with(Night::default).samples = Some(sample_queue(&store));
        }
        append(
            &run_dir.join("nights.jsonl"),
            &NightRecord {
                arm: arm.as_str().to_string(),
                repeat,
                day: day.id.clone(),
                closing_skills,
                night: serde_json::to_value(night)?,
            },
        )?;
    }
    Ok(())
}

/// The training queue of an arm's store: its counts by state, and the
/// skipped ones' reasons.
#[derive(Serialize)]
struct Queue {
    #[serde(flatten)]
    counts: metaclaw_core::store::train_queue::Counts,
    skipped_by_reason: serde_json::Map<String, Value>,
}

/// The training queue of an arm's store, by state, with the skipped ones'
/// reasons (an error is recorded as such, not as an empty queue).
fn sample_queue(store: &metaclaw_core::store::Store) -> Value {
    let read = || -> Result<Value> {
        let conn = store.db().read()?;
        let counts = metaclaw_core::store::train_queue::counts(&conn, None)?;
        let skipped = metaclaw_core::store::train_queue::skipped_by_reason(&conn, "")?;
        let skipped_by_reason = skipped
            .into_iter()
            .map(|(why, n)| (why, Value::from(n)))
            .collect();
        Ok(serde_json::to_value(Queue {
            counts,
            skipped_by_reason,
        })?)
    };
    read().unwrap_or_else(|e| serde_json::json!({ "error": format!("{e:#}") }))
}

/// Where an interrupted run stopped, and how to go on.
fn stopped_at(arm: Arm, repeat: u32, day: &str, what: &str) -> String {
    format!(
        "stopped at {}-{repeat} {day} {what} (the rounds before it are recorded; fix the cause \
         and run the same command again to resume here)",
        arm.as_str()
    )
}

/// The progress line on stderr: redrawn in place on a terminal, a line
/// per round otherwise.
struct Progress {
    total: usize,
    done: usize,
    resumed: usize,
    passed: BTreeMap<String, (usize, usize)>,
    started: Instant,
    tty: bool,
}

impl Progress {
    fn new(total: usize, resumed: usize) -> Self {
        if resumed > 0 {
            eprintln!("resuming: {resumed} of {total} rounds already done");
        }
        Self {
            total,
            done: resumed,
            resumed,
            passed: BTreeMap::new(),
            started: Instant::now(),
            tty: std::io::stderr().is_terminal(),
        }
    }

    fn bar(&self) -> String {
        let width = 24;
        let filled = (self.done * width).checked_div(self.total).unwrap_or(0);
        format!(
            "[{}{}] {}/{}",
            "#".repeat(filled),
            "-".repeat(width - filled),
            self.done,
            self.total
        )
    }

    fn eta(&self) -> String {
        let ran = self.done - self.resumed;
        if ran == 0 {
            return String::new();
        }
        let per = self.started.elapsed() / ran as u32;
        let left = per * (self.total - self.done) as u32;
        format!(" eta {}m{:02}s", left.as_secs() / 60, left.as_secs() % 60)
    }

    fn start(&self, arm: Arm, repeat: u32, day: &str, round: &str) {
        if self.tty {
            eprint!(
                "\r\x1b[2K{} {}-{repeat} {day} {round}…{}",
                self.bar(),
                arm.as_str(),
                self.eta()
            );
        }
    }

    fn done(&mut self, record: &RoundRecord) {
        self.done += 1;
        let key = format!("{}-{}", record.arm, record.repeat);
        let entry = self.passed.entry(key.clone()).or_default();
        entry.0 += usize::from(record.score.passed);
        entry.1 += 1;
        let (passed, of) = *entry;
        let line = format!(
            "{} {key} {} {} {}  ({key}: {passed}/{of} strict){}",
            self.bar(),
            record.day,
            record.round,
            if record.score.passed { "pass" } else { "fail" },
            self.eta()
        );
        if self.tty {
            eprint!("\r\x1b[2K{line}");
        } else {
            eprintln!("{line}");
        }
    }

    fn note(&self, text: &str) {
        if self.tty {
            eprint!("\r\x1b[2K");
        }
        eprintln!("{text}");
    }

    fn finish(&self) {
        if self.tty {
            eprintln!();
        }
    }
}
