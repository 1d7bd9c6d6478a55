//! The daemon's state in one document: `GET /admin/status` (and so
//! `metaclaw status`, `train status`, the demo) and the dashboard's
//! overview. One typed [`Status`]: the daemon writes it, the CLI and the
//! bench read it back, nobody looks a field up by key.

use std::collections::BTreeMap;
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::App;
use crate::learn::LearningState;
use crate::learn::rl::trainer::TrainerState;
use crate::plugins::Problem;
use crate::policy::{CandidateShown, Health};
use crate::skills::library::SkillProblem;
use crate::skills::untrusted::UntrustedStatus;
use crate::skills::workshop::DeliveryStatus;
use crate::skills::{Retrieval, RetrieverIndex};
use crate::store::train_queue::Counts;

/// The store could not be read for `status`.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the store: {0}")]
pub struct StatusUnread(String);

/// What `GET /admin/status` answers and the dashboard's overview shows:
/// health, mode, upstream, the store, skills, learning, training, the
/// student and the plugins.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    pub running: bool,
    pub healthy: bool,
    pub version: String,
    pub pid: u32,
    pub mode: String,
    pub demo: bool,
    pub host: String,
    pub port: u16,
    pub url: String,
    pub upstream: String,
    pub started_at_ms: i64,
    pub uptime_seconds: f64,
    pub sessions: u64,
    pub active_sessions: usize,
    pub turns: u64,
    pub store: StoreStatus,
    pub skills: Option<SkillsStatus>,
    pub learning: LearningState,
    /// Training from the student's turns (rl/auto): the queue and whether
    /// it runs.
    pub training: Option<TrainingStatus>,
    /// rl/auto: whether the trainable model answers, on which weights,
    /// and why not (turns then go to llm when rl.fallback_to_llm).
    pub student: Option<StudentStatus>,
    /// The agents with a mode of their own (`agents.<id>`): theirs, and
    /// their own run's model and training when it serves them.
    pub agents: BTreeMap<String, AgentStatus>,
    /// Why skills are not evolved now (the learning job's own check:
    /// without an enabled guard, nothing is).
    pub evolution_blocked: Option<String>,
    /// That they are evolved unchecked because the config's chain leaves
    /// guard out.
    pub evolution_unguarded: Option<String>,
    /// The evolver plugins every skill draft goes through, in order.
    pub evolver_chain: Option<Vec<String>>,
    pub plugins: Option<PluginsStatus>,
    /// On a shared store (Postgres): every instance and who leads what.
    #[serde(default)]
    pub deployment: Option<DeploymentStatus>,
}

/// The instances sharing the store, as the store says, or why that could
/// not be read.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DeploymentStatus {
    Read(crate::team::Deployment),
    Unread { error: String },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoreStatus {
    /// The SQLite file, or the Postgres URL without its password.
    pub path: PathBuf,
    pub queue_depth: usize,
    /// `sqlite` or `postgres`.
    #[serde(default)]
    pub backend: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SkillsStatus {
    pub loaded: usize,
    pub generation: u64,
    pub dir: PathBuf,
    pub problems: Vec<SkillProblem>,
    pub retrieval: RetrievalStatus,
    pub last_retriever: Option<String>,
    /// Retrievers that hold an index of this library (a turn never waits
    /// for one: until then it goes to the next).
    pub indexed_by: Vec<String>,
    /// Every loaded retriever: ready, indexing, failed or not_started
    /// (what a tool waits on before a first turn).
    pub retrievers: Vec<RetrieverIndex>,
    /// Skills from other tools (`skills.untrusted`): how many the guard
    /// passed, how many are held, and why checking waits.
    pub untrusted: UntrustedStatus,
    /// `skills.deliver`: evolved skills offered to OpenClaw's Skill
    /// Workshop, by the owner's verdict.
    pub delivery: DeliveryStatus,
}

/// Retrieval as configured, and what answers a turn now.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RetrievalStatus {
    #[serde(flatten)]
    pub configured: Retrieval,
    pub answering: Vec<String>,
    /// Why no retriever answers (`mode` is only what is configured).
    pub none_answers: Option<String>,
}

/// Training of one run (the shared one or an agent's own).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainingStatus {
    pub running: bool,
    pub queue: Option<Counts>,
    /// Its last error, distillation, health verdict, pause, and the last
    /// weights under test.
    #[serde(flatten)]
    pub trainer: TrainerState,
    pub scheduler: Option<SchedulerStatus>,
    pub note: Option<String>,
}

/// The training scheduler: whether steps wait for windows, the machine's
/// state and the last decision.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SchedulerStatus {
    pub gated: bool,
    /// Why no step starts on its own (the gate could not be built).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When the signals were last read (the trainer reads them before
    /// each step it may start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assessed_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_opening: Option<(DateTime<Utc>, String)>,
}

/// The student's health, its base model and weights under test.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StudentStatus {
    #[serde(flatten)]
    pub health: Health,
    pub base_model: String,
    pub fallback_to_llm: bool,
    /// New weights serving their canary's candidate arm.
    pub under_test: Option<CandidateShown>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentStatus {
    pub own_run: bool,
    pub training: Option<TrainingStatus>,
    pub student: Option<StudentStatus>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PluginsStatus {
    pub loaded: usize,
    pub problems: usize,
    pub notices: usize,
    pub locked: bool,
    pub loading: bool,
    pub pin_conflicts: Vec<String>,
    /// Each disabled plugin and why (failures in a row, its failure rate,
    /// or by hand).
    pub disabled: Vec<DisabledPlugin>,
    /// Every instance's memory and every loaded plugin's compiled code,
    /// against plugins.total_memory_mb.
    pub memory: Option<MemoryStatus>,
    /// Files refused because they do not fit in it, or whose compile ran
    /// out of time: why, in full.
    pub refused_for_resources: Vec<Problem>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DisabledPlugin {
    pub plugin: String,
    pub why: String,
}

/// Bytes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemoryStatus {
    pub used: usize,
    pub peak: usize,
    pub limit: usize,
}

/// The daemon's [`Status`]. It reads the store: call it off the async
/// workers.
pub fn status(app: &App) -> Result<Status, StatusUnread> {
    let (sessions, turns) = app
        .proxy
        .store
        .counts()
        .map_err(|e| StatusUnread(format!("{e:#}")))?;
    // The learning job's own check, once (with learning on).
    let chain = app
        .learn
        .as_ref()
        .map(|_| crate::learn::evolver_chain(app.plugins.as_deref()));
    let chain = chain.as_ref();
    let info = &app.info;
    Ok(Status {
        running: true,
        healthy: true,
        version: env!("CARGO_PKG_VERSION").to_string(),
        pid: std::process::id(),
        mode: info.mode.clone(),
        demo: info.demo,
        host: info.host.clone(),
        port: info.port,
        url: format!("http://{}:{}", crate::http::url_host(&info.host), info.port),
        upstream: info.upstream_base.clone(),
        started_at_ms: info.started_at_ms,
        uptime_seconds: info.started.elapsed().as_secs_f64(),
        sessions,
        active_sessions: app.proxy.sessions.active_count(),
        turns,
        store: StoreStatus {
            path: app.proxy.store.path().to_path_buf(),
            queue_depth: app.proxy.store.queue_depth(),
            backend: app.proxy.store.db().backend().as_str().to_string(),
        },
        skills: app
            .proxy
            .skills
            .as_ref()
            .map(|skills| skills_status(skills)),
        learning: LearningState::of(app.learn.is_some()),
        training: app
            .proxy
            .policy
            .as_ref()
            .map(|_| training_status(app, "", app.train.as_ref())),
        student: app.proxy.policy.as_ref().map(|p| student_status(p)),
        agents: app
            .proxy
            .agent_policies
            .iter()
            .map(|(agent, policy)| {
                let status = AgentStatus {
                    own_run: policy.is_some(),
                    training: policy
                        .as_ref()
                        .map(|_| training_status(app, agent.as_str(), app.agent_trains.get(agent))),
                    student: policy.as_ref().map(|p| student_status(p)),
                };
                (agent.to_string(), status)
            })
            .collect(),
        evolution_blocked: chain.and_then(|c| c.as_ref().err()).map(|e| e.to_string()),
        evolution_unguarded: chain
            .and_then(|c| c.as_ref().ok())
            .and_then(|c| crate::learn::evolution_unguarded(c)),
        evolver_chain: chain
            .and_then(|c| c.as_ref().ok())
            .map(|c| c.iter().map(|p| p.info.name.clone()).collect()),
        plugins: app
            .plugins
            .as_ref()
            .map(|host| plugins_status(&host.current())),
        deployment: app.team.deployment().map(|read| match read {
            Ok(deployment) => DeploymentStatus::Read(deployment),
            Err(e) => DeploymentStatus::Unread {
                error: format!("{e:#}"),
            },
        }),
    })
}

fn skills_status(skills: &crate::skills::Skills) -> SkillsStatus {
    let snapshot = skills.library.snapshot();
    // What answers a turn now: `mode` is only what is configured.
    let (answering, none_answers) = match skills.answering() {
        Ok(list) => (list, None),
        Err(why) => (Vec::new(), Some(why.to_string())),
    };
    SkillsStatus {
        loaded: snapshot.skills.len(),
        generation: snapshot.generation,
        dir: skills.library.dir.clone(),
        problems: snapshot.problems.clone(),
        retrieval: RetrievalStatus {
            configured: skills.retrieval.clone(),
            answering,
            none_answers,
        },
        last_retriever: skills.last_retriever(),
        indexed_by: skills.indexed_by(snapshot.generation),
        retrievers: skills.retriever_indexes(snapshot.generation),
        untrusted: skills.untrusted.status(&snapshot),
        delivery: skills.delivery.status(),
    }
}

fn plugins_status(registry: &crate::plugins::Registry) -> PluginsStatus {
    PluginsStatus {
        loaded: registry.plugins.len(),
        problems: registry.problems.len(),
        notices: registry.notices.len(),
        locked: registry.locked,
        loading: registry.loading(),
        pin_conflicts: registry.pin_conflicts.clone(),
        disabled: registry
            .plugins
            .iter()
            .filter(|p| p.is_disabled())
            .map(|p| DisabledPlugin {
                plugin: p.label().to_string(),
                why: p.status(),
            })
            .collect(),
        memory: registry.total_memory.as_ref().map(|m| MemoryStatus {
            used: m.used(),
            peak: m.peak(),
            limit: m.limit(),
        }),
        refused_for_resources: registry
            .problems
            .iter()
            .filter(|p| {
                p.error.contains("plugins.total_memory_mb")
                    || p.error.contains("plugins.timeouts.compile")
            })
            .cloned()
            .collect(),
    }
}

/// Training from the student's turns, of one run (the shared one, `''`,
/// or an agent's own): the queue and whether it runs.
fn training_status(
    app: &App,
    run_agent: &str,
    train: Option<&crate::learn::rl::trainer::TrainerHandle>,
) -> TrainingStatus {
    let queue = app
        .proxy
        .store
        .db()
        .read()
        .ok()
        .and_then(|c| crate::store::train_queue::counts(&c, Some(run_agent)).ok());
    TrainingStatus {
        running: train.is_some_and(|t| t.steps_off.is_none()),
        queue,
        trainer: train.map(|t| t.state()).unwrap_or_default(),
        scheduler: train.map(scheduler_status),
        note: app.learn.is_none().then(|| {
            "nothing trains: training needs the rewards of learning jobs (learning.enabled: false); the run's saved weights are served".to_string()
        }),
    }
}

fn student_status(policy: &crate::policy::Policy) -> StudentStatus {
    StudentStatus {
        health: policy.health(),
        base_model: policy.settings.base_model.clone(),
        fallback_to_llm: policy.settings.fallback_to_llm,
        under_test: policy.under_test(),
    }
}

fn scheduler_status(train: &crate::learn::rl::trainer::TrainerHandle) -> SchedulerStatus {
    match (&train.gate, &train.gate_error) {
        (_, Some(error)) => SchedulerStatus {
            gated: true,
            error: Some(error.to_string()),
            ..SchedulerStatus::default()
        },
        (None, None) => SchedulerStatus::default(),
        (Some(gate), None) => {
            let last = gate.last();
            SchedulerStatus {
                gated: true,
                state: Some(gate.state().as_str().to_string()),
                open: last.as_ref().map(|r| r.open),
                reason: last.as_ref().map(|r| r.reason.clone()),
                assessed_at_ms: last.as_ref().map(|r| r.now.timestamp_millis()),
                next_opening: last.and_then(|r| r.next_opening),
                ..SchedulerStatus::default()
            }
        }
    }
}
