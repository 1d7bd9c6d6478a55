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
//! takes a train step on the judged samples.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::app::{App, AppHandle, StartOptions};
use crate::config::{Loaded, Mode};
use crate::home::Home;

/// How long a fresh metaclaw may take to have its skills indexed.
const READY_WITHIN: Duration = Duration::from_secs(300);

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
    /// Learn, and the served model trained through the Tinker bridge.
    Rl,
}

impl Arm {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Skills => "skills",
            Self::Learn => "learn",
            Self::Rl => "rl",
        }
    }

    pub fn learns(self) -> bool {
        matches!(self, Self::Learn | Self::Rl)
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
pub fn arm_config(user: &Loaded, arm: Arm, model: &str, helpers: &Helpers) -> Result<Loaded> {
    let mut loaded = Loaded {
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
    c.skills.auto_evolve = arm.learns();
    c.scheduler.enabled = false;
    c.ui.enabled = false;
    if let Some(judge) = &helpers.judge {
        c.rl.prm_model = judge.clone();
    }
    if let Some(evolver) = &helpers.evolver {
        c.rl.evolver_model = evolver.clone();
    }
    c.mode = match arm {
        Arm::Rl => {
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

/// A metaclaw serving one arm.
pub struct Instance {
    handle: AppHandle,
    /// `http://127.0.0.1:PORT/v1`.
    pub base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: tokio::task::JoinHandle<()>,
}

impl Instance {
    /// Starts metaclaw in `home` (made if missing; the built-in skills
    /// installed into a library that has none) and waits until its skills
    /// are indexed.
    pub async fn start(home: &Path, loaded: &Loaded) -> Result<Self> {
        let home = Home::at(home);
        home.ensure()?;
        let skills = home.skills_dir();
        if !skills.exists() {
            std::fs::create_dir_all(&skills)
                .with_context(|| format!("cannot create {}", skills.display()))?;
            crate::skills::builtin::install(&skills, &|_| Vec::new(), &|_| false).with_context(
                || format!("cannot install the built-in skills in {}", skills.display()),
            )?;
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
        let router = crate::server::router(app, crate::server::Guard::new(&config.proxy, port));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (grace, header) = (
            config.proxy.shutdown_grace.get(),
            config.proxy.timeouts.client_header.get(),
        );
        let server = tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            if let Err(e) = crate::server::serve(listener, router, shutdown, grace, header).await {
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
        loop {
            let mut waiting = Vec::new();
            if let Some(skills) = &app.proxy.skills {
                let snapshot = skills.library.snapshot();
                if snapshot.skills.is_empty() || skills.indexed_by(snapshot.generation).is_empty() {
                    waiting.push(format!(
                        "skills indexed ({} loaded; retrievers: {})",
                        snapshot.skills.len(),
                        skills.retriever_indexes(snapshot.generation)
                    ));
                }
            }
            if app.proxy.policy.is_some() {
                let status = crate::app::status_json(app).unwrap_or_default();
                if status["student"]["state"] != "ready" {
                    waiting.push(format!("the student serving ({})", status["student"]));
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
    pub async fn night(&self, session: &str, arm: Arm) -> Result<Value> {
        let app = self.handle.app().clone();
        let before = self.library();
        let ended = app
            .proxy
            .sessions
            .end(session, crate::sessions::EndReason::Api);
        let mut night =
            json!({ "session_ended": !matches!(ended, crate::sessions::EndOutcome::Unknown) });
        if arm.learns() {
            let Some(learn) = &app.learn else {
                bail!("learning is off in the {} arm's metaclaw", arm.as_str());
            };
            let jobs = learn
                .now(Some(session.to_string()))
                .await
                .map_err(|e| anyhow::anyhow!("the learning job of {session}: {e}"))?;
            night["jobs"] = json!(
                jobs.iter()
                    .map(|j| json!({"state": j.state.as_str(), "detail": j.detail()}))
                    .collect::<Vec<_>>()
            );
            self.skills_ready().await?;
        }
        if arm == Arm::Rl {
            night["train"] = match &app.train {
                Some(train) => match train.step().await {
                    Ok(outcome) => json!(outcome),
                    Err(e) => json!({ "error": e }),
                },
                None => json!({ "error": "the trainer did not start (see the log)" }),
            };
        }
        let after = self.library();
        let evolved: Vec<String> = after
            .iter()
            .filter(|(name, version)| before.get(*name) != Some(version))
            .map(|(name, version)| format!("{name}@{version}"))
            .collect();
        night["evolved"] = json!(evolved);
        Ok(night)
    }

    /// The arm's metaclaw store (what its turns were served with).
    pub fn store(&self) -> crate::store::Store {
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
        let _ = (&mut self.server).await;
        self.handle.shutdown().await;
    }
}
