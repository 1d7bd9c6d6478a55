//! [`App::start`]: the one place where the parts are put together.
//!
//! The path of a turn: `server` routes it to `proxy::turn`, which resolves
//! its session (`sessions`), picks skills (`skills` → retriever plugins),
//! calls the upstream and queues the record for the store's writer thread.
//! The path of learning starts where a turn is recorded: the writer reports
//! each recorded turn and session end, in commit order, to per-turn scoring
//! (`learn::per_turn`, scorer plugins, on its own thread); the session
//! tracker reports ended sessions to the learning runner (`learn::runner`),
//! whose jobs run the stages (`learn::stages`: score, judge, evolve,
//! publish) on their own thread.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::work::Work;
use anyhow::Result;

use super::{App, AppHandle, RuntimeInfo};
use crate::agent_id::AgentId;
use crate::clock::now_ms;
use crate::config::{Config, LoadedConfig};
use crate::home::Home;
use crate::learn::judge::Judge;
use crate::learn::llm::{ChatModel, Role};
use crate::learn::{Learner, Scoring};
use crate::metrics::Metrics;
use crate::plugins::{HostSettings, PluginHost};
use crate::policy::{self, Policy, StudentSettings};
use crate::proxy::upstream::Upstream;
use crate::proxy::{Limits, Proxy};
use crate::redact::Redactor;
use crate::sessions::Tracker;
use crate::skills::library::Library;
use crate::skills::{Retrieval, SelectionSettings, Skills};
use crate::store::{Store, StoreOptions};
use crate::team::Team;

pub struct StartOptions<'a> {
    pub home: &'a Home,
    pub loaded: &'a LoadedConfig,
    /// Serving the demo (a dummy upstream; said in `status`).
    pub demo: bool,
    /// Where the server listens (for `status`).
    pub host: IpAddr,
    pub port: u16,
}

impl App {
    /// Builds the product from its config and starts its background work.
    /// Plugins and the skill library load in the background, so this
    /// returns in milliseconds; until they are in, turns are served without
    /// skills and scorers. Needs a tokio runtime.
    pub fn start(options: StartOptions<'_>) -> Result<AppHandle> {
        let StartOptions {
            home,
            loaded,
            demo,
            host,
            port,
        } = options;
        let config = &loaded.config;
        // Every thread and task started here is owned by this: shutdown
        // stops them.
        let work = Work::new();
        let metrics = Arc::new(Metrics::new());

        // Secrets never reach the store or a learning LLM.
        let secrets = config.secrets();

        let (store, writer, recorded) = open_store(config, home, &secrets, &metrics)?;
        // On a shared store (`store.url`) this instance joins the others:
        // it beats, claims jobs as its own and leads what it holds a lease
        // for. On SQLite's file it is alone.
        let team = match store.db().backend() {
            crate::store::sql::Backend::Postgres => {
                let skills_dir = config.skills.enabled.then(|| {
                    crate::skills::library_dir(home, config)
                        .display()
                        .to_string()
                });
                Team::join(store.db(), format!("{host}:{port}"), skills_dir, &work)?
            }
            crate::store::sql::Backend::Sqlite => Team::solo(),
        };

        let sessions = Tracker::new(
            store.clone(),
            metrics.clone(),
            config.sessions.idle_timeout.get(),
        );
        sessions.restore();
        let upstream_base = loaded.api_base();
        let upstream = Upstream::new(loaded, upstream_base.clone())?;

        let (plugins, skills) = plugins_and_skills(config, home, &store);

        // Learning, per session: one job per ended session, on its own
        // low-priority thread.
        let redactor = Arc::new(Redactor::new(secrets));
        let learner = match config.learning.enabled {
            true => Some(
                learner(config, &upstream_base, &store, &plugins, &skills, &redactor)?
                    .in_team(team.clone())
                    .spawn(sessions.subscribe(), work.token())?,
            ),
            false => None,
        };
        // Learning, per turn: each recorded main turn is scored by the
        // scorer plugins once its successor (or its session's end) is known.
        let scoring = match Scoring::spawn(store.clone(), plugins.clone(), recorded) {
            Ok(thread) => Some(thread),
            Err(e) => {
                tracing::error!("turns will not be scored: cannot start the scoring thread: {e}");
                None
            }
        };

        let (policy, agents) = students(config, home, store.db(), &work)?;
        let agent_policies = agents
            .iter()
            .map(|(id, _, policy)| (id.clone(), policy.clone()))
            .collect();

        let proxy = Arc::new(Proxy {
            upstream,
            sessions,
            skills: skills.clone(),
            store,
            metrics,
            policy,
            agent_policies,
            limits: Limits {
                max_body_bytes: (config.proxy.max_body_mb as usize) << 20,
                client_body_timeout: config.proxy.timeouts.client_body.get(),
            },
        });
        let (learn, learner) = learner.unzip();
        let (train, agent_trains) = trainers(config, home, &proxy, &agents, &team, &work);
        let app = Arc::new(App {
            work: work.clone(),
            proxy: proxy.clone(),
            plugins: plugins.clone(),
            learn,
            train,
            agent_trains,
            proxy_token: config.proxy.api_key.clone(),
            admin_token: home.admin_token()?,
            redactor,
            team,
            info: RuntimeInfo {
                started: Instant::now(),
                started_at_ms: now_ms(),
                mode: config.mode.as_str().to_string(),
                demo,
                upstream_base,
                host: host.to_string(),
                port,
                ui: config.ui.clone(),
                canary: config.canary.clone(),
            },
        });

        start_background(&work, proxy, skills, plugins);
        Ok(AppHandle {
            app,
            work,
            writer,
            scoring,
            learner,
        })
    }
}

/// The store: turns are recorded off the hot path by its writer thread
/// (returned, to be joined), which reports each recorded turn and session
/// end on the returned channel (to per-turn scoring).
fn open_store(
    config: &Config,
    home: &Home,
    secrets: &[String],
    metrics: &Arc<Metrics>,
) -> Result<(
    Store,
    std::thread::JoinHandle<()>,
    std::sync::mpsc::Receiver<crate::store::Committed>,
)> {
    let db = crate::skills::paths(home, config).1;
    let (recorded_tx, recorded) = std::sync::mpsc::channel();
    let (store, writer) = Store::open(
        StoreOptions {
            db,
            commit_interval: config.store.commit_interval.get(),
            queue_capacity: config.store.queue_capacity,
            redactor: Redactor::new(secrets.to_vec()),
            on_recorded: Some(recorded_tx),
            queue_learning: config.learning.enabled,
        },
        metrics.clone(),
    )?;
    Ok((store, writer, recorded))
}

/// Who an agent is, its own config, and the student serving it (if its
/// mode serves one).
type Agents = Vec<(AgentId, Config, Option<Arc<Policy>>)>;

/// The students (rl/auto): the shared run's and each listed agent's, each
/// with its connection to the training service kept up by `work`.
fn students(
    config: &Config,
    home: &Home,
    db: &crate::store::Db,
    work: &Work,
) -> Result<(Option<Arc<Policy>>, Agents)> {
    // Serving from the trainable model (rl/auto): its sampler is kept
    // up in the background; until it is, turns go to llm.
    // The shared run's, for every agent without a mode of its own; and
    // each listed agent's own (`agents.<id>`), when its mode serves it.
    let serve = |config: &Config, run_agent: &str| {
        let env = |k: &str| std::env::var(k).ok();
        let settings = StudentSettings::from_config(config, run_agent, home, db.clone(), &env);
        let policy = Policy::new(settings);
        work.task(
            "the student's connection",
            policy::connect::run(policy.clone(), work.token()),
        );
        policy
    };
    let policy = config.serves_student().then(|| serve(config, ""));
    let mut agents = Vec::new();
    for (agent, own) in config.agent_configs().map_err(anyhow::Error::msg)? {
        let id = AgentId::parse(agent).map_err(anyhow::Error::msg)?;
        let policy = own.serves_student().then(|| serve(&own, agent));
        agents.push((id, own, policy));
    }
    Ok((policy, agents))
}

/// The trainers of the shared run and of each agent's own run, one thread
/// each; without learning they only keep the saved weights loaded.
fn trainers(
    config: &Config,
    home: &Home,
    proxy: &Proxy,
    agents: &Agents,
    team: &Team,
    work: &Work,
) -> (
    Option<crate::learn::rl::trainer::TrainerHandle>,
    std::collections::BTreeMap<AgentId, crate::learn::rl::trainer::TrainerHandle>,
) {
    // Training from the student's judged turns: its own thread; it
    // needs the rewards learning gives.
    // Without learning nothing trains, but the trainer still keeps the
    // run's saved weights loaded in this process (the service drops a
    // dead process's models): the student serves them after a restart.
    let steps_off = (!config.learning.enabled).then(|| {
        "training needs the rewards of learning jobs (learning.enabled: false)".to_string()
    });
    if steps_off.is_some() && (proxy.policy.is_some() || agents.iter().any(|a| a.2.is_some())) {
        tracing::warn!(
            "nothing trains: training needs the rewards of learning jobs (learning.enabled: false); the saved weights are served"
        );
    }
    // One scheduler for every trainer whose steps wait for windows.
    let mut gate = GateSlot::default();
    let mut trainer = |config: &Config, run_agent: &str, policy: &Arc<Policy>| {
        start_trainer(
            config,
            run_agent,
            home,
            proxy.store.db().clone(),
            policy.clone(),
            proxy.sessions.activity(),
            steps_off.clone(),
            &mut gate,
            team,
            work,
        )
    };
    let train = proxy
        .policy
        .as_ref()
        .and_then(|policy| trainer(config, "", policy));
    let agent_trains = agents
        .iter()
        .filter_map(|(id, own, policy)| {
            let policy = policy.as_ref()?;
            Some((id.clone(), trainer(own, id.as_str(), policy)?))
        })
        .collect();
    (train, agent_trains)
}

/// The plugin host and the skill library, both loading in the background
/// once started ([`load_plugins`], [`load_skills`]).
fn plugins_and_skills(
    config: &Config,
    home: &Home,
    store: &Store,
) -> (Option<Arc<PluginHost>>, Option<Arc<Skills>>) {
    // Plugins load in the background once the proxy is up: compiling a
    // large component takes seconds and must not delay start-up. Until
    // then each role falls back to its built-in behaviour.
    let (retrieval, embedder) = Retrieval::from_config(config, store.db());
    let mut plugin_settings = HostSettings::from_config(config, home);
    // The daemon sees every plugin in use: it may clean the compile cache.
    plugin_settings.evict_after = Some(Duration::from_secs(7 * 24 * 3600));
    let plugins = match PluginHost::new(plugin_settings, embedder) {
        Ok(host) => Some(host),
        Err(e) => {
            tracing::error!("plugins are off: {e:#}");
            None
        }
    };

    // The skill library also loads in the background (a large one takes
    // a while to read); until then no skill is injected.
    let skills = config.skills.enabled.then(|| {
        let dir = crate::skills::library_dir(home, config);
        let library = Library::new(dir, store.db().clone());
        Skills::new(
            library,
            plugins.clone(),
            SelectionSettings::from_config(config),
            retrieval,
        )
    });
    (plugins, skills)
}

/// The learning runner (judge, evolver and the stages between), not yet
/// started.
fn learner(
    config: &Config,
    upstream_base: &str,
    store: &Store,
    plugins: &Option<Arc<PluginHost>>,
    skills: &Option<Arc<Skills>>,
    redactor: &Arc<Redactor>,
) -> Result<Learner> {
    let judge = match config.learning.judge {
        true => ChatModel::from_config(config, upstream_base, Role::Judge)?.map(|model| Judge {
            model,
            votes: config.rl.prm_m.max(1),
            temperature: config.learning.judge_temperature,
            redactor: redactor.clone(),
        }),
        false => None,
    };
    let evolver = ChatModel::from_config(config, upstream_base, Role::Evolver)?;
    Ok(Learner::new(
        store.clone(),
        plugins.clone(),
        skills.clone(),
        judge,
        evolver,
        redactor.clone(),
        config.learning.clone(),
        config.skills.auto_evolve,
    ))
}

/// The background work beside the routes: the idle-session sweeper, the
/// guard of skills from other tools, the Skill Workshop's delivery, and the
/// plugin and skill loaders.
fn start_background(
    work: &Work,
    proxy: Arc<Proxy>,
    skills: Option<Arc<Skills>>,
    plugins: Option<Arc<PluginHost>>,
) {
    // Idle sessions end (and are learned from) without a client's word.
    let every = (proxy.sessions.idle_timeout() / 4)
        .clamp(Duration::from_millis(50), Duration::from_secs(15));
    work.task("the idle-session sweeper", async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            proxy.sessions.sweep_idle();
        }
    });
    if let Some(skills) = skills {
        // Skills from other tools wait for the guard's verdict.
        work.task(
            "the guard of skills from other tools",
            skills
                .untrusted
                .clone()
                .run(skills.library.clone(), plugins.clone()),
        );
        // Evolved skills offered to OpenClaw's Skill Workshop, and
        // the owner's verdicts read back (`skills.deliver`).
        work.task(
            "the Skill Workshop's delivery",
            skills.delivery.clone().run(),
        );
        load_skills(work, skills, plugins.as_deref());
    }
    if let Some(host) = plugins {
        load_plugins(work, host);
    }
}

/// The scheduler's gate, made once for every trainer that waits for its
/// windows (one machine, one set of windows, one record of them).
#[derive(Default)]
struct GateSlot(
    Option<(
        Option<Arc<crate::scheduler::gate::Gate>>,
        Option<crate::scheduler::gate::ConfigError>,
    )>,
);

/// The trainer's thread (`learn::rl::trainer`); `None`, logged, if it
/// cannot start. Shutdown waits for it only briefly: a step cut short is
/// redone from the last saved state next time.
#[allow(clippy::too_many_arguments)]
fn start_trainer(
    config: &Config,
    run_agent: &str,
    home: &crate::home::Home,
    db: crate::store::Db,
    policy: Arc<Policy>,
    activity: crate::clock::LastActivity,
    steps_off: Option<String>,
    gates: &mut GateSlot,
    team: &Team,
    work: &Work,
) -> Option<crate::learn::rl::trainer::TrainerHandle> {
    use crate::learn::rl::trainer;
    use crate::scheduler::gate;
    let env = |k: &str| std::env::var(k).ok();
    // Steps wait for the scheduler's windows (auto, or scheduler.enabled);
    // a scheduler config that cannot be read keeps them from starting.
    let (gate, gate_error) = match gate::gates(config) && steps_off.is_none() {
        false => (None, None),
        true => gates
            .0
            .get_or_insert_with(|| match gate::Parts::from_config(config, home) {
                Ok(parts) => {
                    let inputs = gate::Inputs {
                        clock: Arc::new(crate::clock::SystemClock),
                        idle: Arc::new(crate::scheduler::idle::PlatformIdle),
                        activity,
                    };
                    (Some(gate::Gate::new(parts, inputs, db.clone())), None)
                }
                Err(e) => {
                    tracing::error!("no training step starts on its own: {e}");
                    (None, Some(e))
                }
            })
            .clone(),
    };
    if config.canary.weights && config.rl.save_every != 1 {
        tracing::warn!(
            "rl.save_every: {} is not used: with canary.weights on, the training state is saved every step (a rollback goes back to the state before the candidate's step)",
            config.rl.save_every
        );
    }
    let settings = trainer::TrainerSettings {
        tinker: crate::tinker::configured::settings(config, &env),
        // Under a weights canary every step saves its training state: a
        // rollback trains on from the state before the candidate's step.
        spec: crate::tinker::configured::run_spec(
            config,
            run_agent,
            match config.canary.weights {
                true => 1,
                false => config.rl.save_every,
            },
        ),
        batch_size: config.rl.batch_size.max(1) as usize,
        loss: config.rl.loss()?,
        loss_config: config.rl.loss_config(),
        learning_rate: config.rl.learning_rate,
        baseline_decay: config.rl.baseline_decay,
        manual: config.rl.manual_train_trigger,
        db,
        opd: (config.opd.enabled && steps_off.is_none()).then(|| config.opd.clone()),
        gate,
        gate_error,
        health: crate::learn::rl::health::Rule {
            window: config.rl.health_window as usize,
            ..Default::default()
        },
        on_collapse: config.rl.on_collapse,
        canary: config.canary.weights.then(|| config.canary.clone()),
        steps_off,
        team: team.clone(),
    };
    match trainer::spawn(settings, policy, work.token()) {
        Ok((handle, thread)) => {
            work.adopt(thread);
            Some(handle)
        }
        Err(e) => {
            tracing::error!("nothing trains: cannot start the trainer's thread: {e}");
            None
        }
    }
}

/// Watches the library and reads it, on its own thread; every change (and
/// every plugin reload) re-indexes it for the retrievers.
fn load_skills(work: &Work, skills: Arc<Skills>, plugins: Option<&PluginHost>) {
    if let Some(host) = plugins {
        let s = skills.clone();
        host.on_reload(move || s.warm());
    }
    let watcher = work.clone();
    let spawned = work.thread("metaclaw-skills-load", move || {
        // Watching first, then reading: a skill written between the two
        // is either read or reported, never missed.
        let s = skills.clone();
        skills
            .library
            .watch(&watcher, Duration::from_millis(200), move |_| s.warm());
        if skills.library.db().backend() == crate::store::sql::Backend::Postgres {
            let s = skills.clone();
            skills
                .library
                .follow_store(&watcher, crate::team::HEARTBEAT, move |_| s.warm());
        }
        let snapshot = skills.library.rescan(None);
        tracing::info!(
            "{} skill(s) loaded, {} problem(s), generation {}",
            snapshot.skills.len(),
            snapshot.problems.len(),
            snapshot.generation
        );
        skills.warm();
    });
    if let Err(e) = spawned {
        tracing::error!("cannot load the skill library: {e}");
    }
}

/// Loads (compiling if needed) the configured plugins on their own thread,
/// then watches their folders.
fn load_plugins(work: &Work, host: Arc<PluginHost>) {
    let watcher = work.clone();
    let spawned = work.thread("metaclaw-plugin-load", move || {
        let registry = host.reload();
        tracing::info!(
            "{} plugin(s) loaded, {} problem(s)",
            registry.plugins.len(),
            registry.problems.len()
        );
        host.watch(&watcher);
    });
    if let Err(e) = spawned {
        tracing::error!("cannot load plugins: {e}");
    }
}
