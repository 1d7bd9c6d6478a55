//! The arms, and the metaclaw each one runs in.
//!
//! Every arm but `direct` gets a clean metaclaw home of its own under the
//! run's folder (its store, its skill library given the built-in bank),
//! started in this process on a free port of 127.0.0.1 from the user's
//! config with the arm's settings on top. The agent reaches it over HTTP
//! like any agent would, with the day as the session (`x-session-id`).
//! At a day's end the session is ended and, in the learning arms, its
//! learning job runs to its end before the next day starts (the judge and
//! the evolver, then the new skills published and indexed); `rl` then
//! trains on the judged samples, step after step until none is ready (as
//! an open window of the scheduler would). The home keeps the config the
//! arm ran with (secrets left out), so a command run there (`metaclaw
//! train status`) sees the arm's service and models.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use metaclaw_core::app::{App, AppHandle, StartOptions};
use metaclaw_core::config::{LoadedConfig, Mode};
use metaclaw_core::home::Home;

/// How long a fresh metaclaw may take to have its skills indexed.
const READY_WITHIN: Duration = Duration::from_secs(300);
/// How long the student may stay down (its chat format loaded, the
/// service not answering) before the arm gives up: it retries 2 s, 4 s, 8 s
/// apart, so a service that is only starting has had three tries.
const DOWN_FOR: Duration = Duration::from_secs(15);
/// The most train steps a night takes (each over `rl.batch_size`
/// samples): far more than a day's turns need.
const STEPS_A_NIGHT: usize = 64;

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, ValueEnum, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Arm {
    /// The agent talks to the model; no metaclaw.
    Direct,
    /// Through metaclaw with its built-in skill bank; no learning.
    Skills,
    /// Skills, and each day's session learned from before the next day.
    Learn,
    /// The trainable model served and trained through the Tinker bridge
    /// on each day's judged turns; the built-in skills, none evolved.
    Rl,
    /// `rl` and `learn` together: weights trained and skills evolved.
    #[value(name = "rl+learn")]
    #[serde(rename = "rl+learn")]
    RlLearn,
}

impl Arm {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Skills => "skills",
            Self::Learn => "learn",
            Self::Rl => "rl",
            Self::RlLearn => "rl+learn",
        }
    }

    /// Each day's session is judged at night (for skills, weights or both).
    pub fn learns(self) -> bool {
        matches!(self, Self::Learn | Self::Rl | Self::RlLearn)
    }

    /// Skills are evolved from the day's session.
    pub fn evolves(self) -> bool {
        matches!(self, Self::Learn | Self::RlLearn)
    }

    /// The trainable model serves the agent and trains each night.
    pub fn trains(self) -> bool {
        matches!(self, Self::Rl | Self::RlLearn)
    }
}

/// The models besides the agent's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Helpers {
    /// The judge (`rl.prm_model`); default: the config's, else the model.
    pub judge: Option<String>,
    /// The evolver (`rl.evolver_model`).
    pub evolver: Option<String>,
}

/// The config an arm's metaclaw runs with: the user's, with the arm's
/// settings on top (nothing of the user's own home is touched).
pub fn arm_config(
    user: &LoadedConfig,
    arm: Arm,
    model: &str,
    helpers: &Helpers,
) -> Result<LoadedConfig> {
    let mut loaded = LoadedConfig {
        config: user.config.clone(),
        path: user.path.clone(),
        file_exists: user.file_exists,
        warnings: Vec::new(),
        secret_sources: user.secret_sources.clone(),
    };
    let c = &mut loaded.config;
    c.proxy.host = "127.0.0.1".into();
    c.proxy.port = 0;
    // Only this process talks to it.
    c.proxy.api_key = None;
    c.store.path = None;
    c.skills.dir = None;
    c.skills.enabled = true;
    c.skills.install_builtin = true;
    c.llm.model_id = model.to_string();
    c.llm.force_model = false;
    c.learning.enabled = arm.learns();
    c.learning.judge = arm.learns();
    c.learning.evolve = arm.evolves();
    c.skills.auto_evolve = arm.evolves();
    // The arm measures what learning teaches in the days it runs: a
    // canary would withhold each new skill from most rounds, and a bench
    // day has too few sessions to decide one.
    c.canary.skills = false;
    // Nor does a night's training wait for a canary of its weights.
    c.canary.weights = false;
    c.scheduler.enabled = false;
    c.ui.enabled = false;
    if let Some(judge) = &helpers.judge {
        c.rl.prm_model = judge.clone();
    }
    if let Some(evolver) = &helpers.evolver {
        c.rl.evolver_model = evolver.clone();
    }
    c.mode = match arm {
        Arm::Rl | Arm::RlLearn => {
            if c.rl.tinker_base_url.trim().is_empty() {
                bail!(
                    "the rl arm trains through a Tinker-compatible service: set rl.tinker_base_url \
                     (and rl.model, the trainable model) in the config, see docs/rl.md"
                );
            }
            Mode::Rl
        }
        _ => Mode::SkillsOnly,
    };
    Ok(loaded)
}

/// Fails at once when the student is down for want of its chat format
/// (the tokenizer: no retry finds it), or after [`DOWN_FOR`] when the
/// service does not answer; says what is missing and which key to set.
fn student_down(
    student: &metaclaw_core::policy::Health,
    since: &mut Option<Instant>,
) -> Result<()> {
    let why = student.reason.as_deref().unwrap_or("no reason given");
    let first = *since.get_or_insert_with(Instant::now);
    if student.rendering.is_none() {
        bail!(
            "the rl arm's student cannot load its chat format: {why} (see docs/rl.md, \"Where the tokenizer comes from\")"
        );
    }
    if first.elapsed() > DOWN_FOR {
        bail!(
            "the rl arm's student cannot reach its training service: {why} (check rl.tinker_base_url, and rl.tinker_api_key or $TINKER_API_KEY)"
        );
    }
    Ok(())
}

/// What a night did, a line of `nights.jsonl` (report.json, the e2e test
/// and the report read it as before): each part absent where it did not
/// happen.
#[derive(Debug, Default, Serialize)]
pub struct Night {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_out: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_ended: Option<bool>,
    /// The learning jobs: `{state, detail}` each.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jobs: Option<Vec<Value>>,
    /// The last train step's outcome, or why none ran (`null`: none did).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub train: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trained: Option<Trained>,
    /// `name@version` of each skill new or changed that night.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evolved: Option<Vec<String>>,
    /// The student's sample queue after the night (`rl`; the run adds it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples: Option<Value>,
}

/// What a night's train steps trained in all.
#[derive(Debug, Default, Serialize)]
pub struct Trained {
    pub steps: usize,
    pub samples: usize,
    pub skipped_no_signal: usize,
}

/// A night's training: steps until none is ready (a batch without signal
/// is skipped and the next one tried). The last step's outcome (or why
/// none ran: the e2e test and the report read it as before), and what the
/// night trained in all.
async fn train_night(train: &metaclaw_core::learn::rl::trainer::TrainerHandle) -> (Value, Trained) {
    use metaclaw_core::learn::rl::trainer::Outcome;
    let mut trained = Trained::default();
    let mut last: Option<Value> = None;
    for _ in 0..STEPS_A_NIGHT {
        match train.step().await {
            Ok(Outcome::Stepped(s)) => {
                trained.steps += 1;
                trained.samples += s.samples;
                last = Some(json!(Outcome::Stepped(s)));
            }
            Ok(Outcome::NoSignal { skipped }) => {
                trained.skipped_no_signal += skipped;
                last = last.or(Some(json!(Outcome::NoSignal { skipped })));
            }
            Ok(waiting @ (Outcome::Waiting { .. } | Outcome::UnderTest { .. })) => {
                last = last.or(Some(json!(waiting)));
                break;
            }
            Err(e) => {
                last = Some(json!({ "error": e.to_string() }));
                break;
            }
        }
    }
    (last.unwrap_or(Value::Null), trained)
}

/// Writes the config an arm's metaclaw runs with into its home, so that a
/// command run there (`metaclaw train status`, `sessions`) sees the arm's
/// service and models rather than the defaults (hosted Tinker). Only what
/// differs from the defaults is written (a key left at its default reads
/// back the same, and the original's keys that do nothing here would each
/// warn). Secrets are left out: they stay where the user keeps them (the
/// environment, the user's own config).
fn keep_config(home: &Home, loaded: &LoadedConfig) -> Result<()> {
    let mut tree = serde_json::to_value(&loaded.config)?;
    let defaults = serde_json::to_value(metaclaw_core::config::Config::default())?;
    drop_defaults(&mut tree, &defaults);
    for key in metaclaw_core::config::SECRET_KEYS {
        let mut parts: Vec<&str> = key.split('.').collect();
        let Some(last) = parts.pop() else {
            continue;
        };
        let parent = parts
            .iter()
            .try_fold(&mut tree, |node, part| node.get_mut(*part));
        if let Some(Value::Object(map)) = parent {
            map.remove(last);
        }
    }
    let fallbacks = tree.get_mut("llm").and_then(|l| l.get_mut("fallbacks"));
    if let Some(list) = fallbacks.and_then(Value::as_array_mut) {
        for fallback in list.iter_mut().filter_map(Value::as_object_mut) {
            fallback.remove("api_key");
        }
    }
    let text = format!(
        "# The config this bench arm's metaclaw runs with (secrets left out: they\n# come from the environment or the user's config).\n{}",
        metaclaw_core::config::to_yaml(&tree)
    );
    let file = home.config_file();
    metaclaw_core::home::write_atomic(&file, text.as_bytes(), Some(0o600))
        .with_context(|| format!("cannot write {}", file.display()))
}

/// Removes from `tree` every key whose value is the one in `defaults`.
fn drop_defaults(tree: &mut Value, defaults: &Value) {
    let (Value::Object(map), Value::Object(base)) = (tree, defaults) else {
        return;
    };
    map.retain(|key, value| match base.get(key) {
        None => true,
        Some(default) if default == value => false,
        Some(default) => {
            drop_defaults(value, default);
            !matches!(value, Value::Object(m) if m.is_empty())
        }
    });
}

/// A metaclaw serving one arm.
pub struct Instance {
    handle: AppHandle,
    /// `http://127.0.0.1:PORT/v1`.
    pub base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// The serving task, aborted if the instance is dropped unstopped.
    server: tokio::task::JoinSet<()>,
}

impl Instance {
    /// Starts metaclaw in `home` (made if missing; the built-in skills
    /// installed into a library that has none) and waits until its skills
    /// are indexed.
    pub async fn start(home: &Path, loaded: &LoadedConfig) -> Result<Self> {
        let home = Home::at(home);
        home.ensure()?;
        keep_config(&home, loaded)?;
        let skills = home.skills_dir();
        if !skills.exists() {
            std::fs::create_dir_all(&skills)
                .with_context(|| format!("cannot create {}", skills.display()))?;
            metaclaw_core::skills::builtin::install(&skills, &|_| Vec::new(), &|_| false)
                .with_context(|| {
                    format!("cannot install the built-in skills in {}", skills.display())
                })?;
        }
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .context("cannot listen on 127.0.0.1")?;
        let port = listener.local_addr()?.port();
        let handle = App::start(StartOptions {
            home: &home,
            loaded,
            demo: false,
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port,
        })?;
        let app = handle.app().clone();
        let config = &loaded.config;
        let router = metaclaw_core::server::router(
            app,
            metaclaw_core::server::Guard::new(&config.proxy, port),
        );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (grace, header) = (
            config.proxy.shutdown_grace.get(),
            config.proxy.timeouts.client_header.get(),
        );
        let mut server = tokio::task::JoinSet::new();
        server.spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            if let Err(e) =
                metaclaw_core::server::serve(listener, router, shutdown, grace, header).await
            {
                eprintln!("warning: the bench's metaclaw stopped serving: {e}");
            }
        });
        let instance = Self {
            handle,
            base: format!("http://127.0.0.1:{port}/v1"),
            stop: Some(stop),
            server,
        };
        instance.skills_ready().await?;
        Ok(instance)
    }

    /// Waits until a retriever has indexed the library as it is now and,
    /// in `rl`, until the student serves (a turn before that would be
    /// answered by the LLM, with no sample to train on).
    async fn skills_ready(&self) -> Result<()> {
        let app = self.handle.app();
        let started = Instant::now();
        let mut down_since: Option<Instant> = None;
        loop {
            let mut waiting = Vec::new();
            if let Some(skills) = &app.proxy.skills {
                let snapshot = skills.library.snapshot();
                if snapshot.skills.is_empty() || skills.indexed_by(snapshot.generation).is_empty() {
                    waiting.push(format!(
                        "skills indexed ({} loaded; retrievers: {})",
                        snapshot.skills.len(),
                        skills
                            .retriever_indexes(snapshot.generation)
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
            }
            if let Some(policy) = &app.proxy.policy {
                let student = policy.health();
                if student.state == "down" {
                    student_down(&student, &mut down_since)?;
                } else {
                    down_since = None;
                }
                if student.state != "ready" {
                    waiting.push(format!(
                        "the student serving ({}: {})",
                        student.state,
                        student.reason.as_deref().unwrap_or("no reason given")
                    ));
                }
            }
            if waiting.is_empty() {
                return Ok(());
            }
            if started.elapsed() > READY_WITHIN {
                bail!(
                    "the bench's metaclaw was not ready within {}s: waiting for {}",
                    READY_WITHIN.as_secs(),
                    waiting.join(", ")
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The skills in the library now: name → version.
    pub fn library(&self) -> BTreeMap<String, String> {
        let Some(skills) = &self.handle.app().proxy.skills else {
            return BTreeMap::new();
        };
        skills
            .library
            .snapshot()
            .skills
            .iter()
            .map(|s| (s.name.clone(), s.version.to_string()))
            .collect()
    }

    /// The day is over: its session ended and, when the arm learns, its
    /// learning job run to its end (the new skills indexed before this
    /// returns), then in `rl` a train step. What happened, for the report.
    pub async fn night(&self, session: &str, arm: Arm) -> Result<Night> {
        let app = self.handle.app().clone();
        let before = self.library();
        let ended = app
            .proxy
            .sessions
            .end(session, metaclaw_core::sessions::EndReason::Api);
        let mut night = Night {
            session_ended: Some(!matches!(
                ended,
                metaclaw_core::sessions::EndOutcome::Unknown
            )),
            ..Night::default()
        };
        if arm.learns() {
            let Some(learn) = &app.learn else {
                bail!("learning is off in the {} arm's metaclaw", arm.as_str());
            };
            let jobs = learn
                .now(Some(session.to_string()))
                .await
                .map_err(|e| anyhow::anyhow!("the learning job of {session}: {e}"))?;
            night.jobs = Some(
                jobs.iter()
                    .map(|j| json!({"state": j.state.as_str(), "detail": j.detail()}))
                    .collect(),
            );
            self.skills_ready().await?;
        }
        if arm.trains() {
            match &app.train {
                Some(train) => {
                    let (last, trained) = train_night(train).await;
                    night.train = Some(last);
                    night.trained = Some(trained);
                }
                None => {
                    night.train =
                        Some(json!({ "error": "the trainer did not start (see the log)" }));
                }
            }
        }
        let after = self.library();
        let evolved: Vec<String> = after
            .iter()
            .filter(|(name, version)| before.get(*name) != Some(version))
            .map(|(name, version)| format!("{name}@{version}"))
            .collect();
        night.evolved = Some(evolved);
        Ok(night)
    }

    /// A held-out day's night (`--split`): its session ends held out of
    /// learning (no learning job: nothing evolves from it, none of its
    /// samples trains), and nothing else happens.
    pub fn hold_out(&self, session: &str) -> Night {
        let ended = self
            .handle
            .app()
            .proxy
            .sessions
            .end(session, metaclaw_core::sessions::EndReason::HeldOut);
        Night {
            held_out: Some(true),
            session_ended: Some(!matches!(
                ended,
                metaclaw_core::sessions::EndOutcome::Unknown
            )),
            ..Night::default()
        }
    }

    /// The arm's metaclaw store (what its turns were served with).
    pub fn store(&self) -> metaclaw_core::store::Store {
        self.handle.app().proxy.store.clone()
    }

    /// Where an arm's files go inside the run folder.
    pub fn home_of(arm_dir: &Path) -> PathBuf {
        arm_dir.join("home")
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = self.server.join_next().await;
        self.handle.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The arm's home holds the config it ran with, read back as it was
    /// (the service a `train status` there asks), without the secrets.
    #[test]
    fn an_arms_home_keeps_its_config_without_secrets() {
        let dir = tempfile::tempdir().unwrap();
        let user = dir.path().join("user.yaml");
        std::fs::write(
            &user,
            "rl:\n  model: fake-bigram\n  tinker_base_url: http://127.0.0.1:9/\n  tinker_api_key: tml-secret\n  batch_size: 3\n",
        )
        .unwrap();
        let user = metaclaw_core::config::load_with_env(&user, &|_| None).unwrap();
        let helpers = Helpers {
            judge: Some("judge".into()),
            evolver: None,
        };
        let arm = arm_config(&user, Arm::Rl, "echo", &helpers).unwrap();
        let home = Home::at(dir.path().join("home"));
        home.ensure().unwrap();
        keep_config(&home, &arm).unwrap();
        let text = std::fs::read_to_string(home.config_file()).unwrap();
        assert!(!text.contains("tml-secret"), "{text}");
        let kept = metaclaw_core::config::load_with_env(&home.config_file(), &|_| None).unwrap();
        let c = &kept.config;
        assert_eq!(c.mode, Mode::Rl);
        assert_eq!(c.rl.tinker_base_url, arm.config.rl.tinker_base_url);
        assert_eq!(
            (
                c.rl.model.as_str(),
                c.rl.batch_size,
                c.rl.prm_model.as_str()
            ),
            ("fake-bigram", 3, "judge")
        );
        assert_eq!(c.llm.model_id, "echo");
        assert_eq!(c.rl.tinker_api_key, None);
        // Only what the arm set, every key one the config knows and uses.
        assert!(kept.warnings.is_empty(), "{:?}", kept.warnings);
        assert!(
            !text.contains("memory:") && !text.contains("null"),
            "{text}"
        );
    }
}
