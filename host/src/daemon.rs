//! The daemon in the foreground: takes the home's lock, opens the store,
//! serves the proxy, and on SIGTERM/SIGINT drains in-flight requests and the
//! write queue before it exits.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tokio::net::TcpListener;

use crate::app::{App, Limits, RuntimeInfo};
use crate::config::{self, Loaded};
use crate::dev;
use crate::home::{Home, PidInfo};
use crate::learn::judge::Judge;
use crate::learn::llm::{ChatModel, Role};
use crate::learn::{Learner, Scoring};
use crate::metrics::Metrics;
use crate::plugins::{PluginHost, Settings as PluginSettings};
use crate::proxy::upstream::Upstream;
use crate::redact::Redactor;
use crate::server;
use crate::sessions::{Tracker, now_ms};
use crate::skills::library::Library;
use crate::skills::{Retrieval, Settings as SkillSettings, Skills};
use crate::store::{Store, StoreOptions};

pub struct DaemonOptions {
    pub home: Home,
    pub loaded: Loaded,
    /// Serve against a built-in dummy upstream (no API key needed).
    pub demo: bool,
}

/// Checks that the config can serve, before anything is started.
pub fn check_servable(loaded: &Loaded, demo: bool) -> Result<()> {
    let config = &loaded.config;
    let host = config::parse_host(&config.proxy.host)
        .with_context(|| format!("proxy.host {:?} is not an IP address", config.proxy.host))?;
    if !host.is_loopback() && config.proxy.api_key.is_none() {
        bail!(
            "proxy.host {} is reachable from other machines, and proxy.api_key is not set: anyone on the \
             network could use your upstream key. Set proxy.api_key (or METACLAW_PROXY_API_KEY), or bind 127.0.0.1",
            config.proxy.host
        );
    }
    if demo {
        return Ok(());
    }
    if let Some(reason) = config::presets::unsupported_reason(&config.llm.provider) {
        bail!("llm.provider: {reason}");
    }
    if loaded.api_base().is_empty() {
        bail!(
            "no upstream configured: set llm.api_base (or a provider preset) with `metaclaw setup` or \
             `metaclaw config set llm.api_base https://…/v1` — or try `metaclaw start --demo`"
        );
    }
    Ok(())
}

pub async fn run(options: DaemonOptions) -> Result<()> {
    let DaemonOptions {
        home,
        mut loaded,
        demo,
    } = options;
    home.ensure()?;
    let Some(_lock) = home.try_lock()? else {
        let at = home
            .read_pid_file()
            .map(|p| format!(" (pid {}, {})", p.pid, p.url))
            .unwrap_or_default();
        bail!("metaclaw is already running in {}{at}", home.root.display());
    };
    if let Some(stale) = home.read_pid_file() {
        tracing::info!("removing the stale pid file of pid {}", stale.pid);
        home.remove_pid_file();
    }
    check_servable(&loaded, demo)?;
    // Unknown keys, keys that do nothing in this version (and a mode that
    // is not implemented): said in the log at every start.
    for warning in &loaded.warnings {
        tracing::warn!("{warning}");
    }

    // The demo answers from a dummy upstream inside this process.
    if demo {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("cannot start the demo upstream")?;
        let addr = listener.local_addr()?;
        let dummy = Arc::new(dev::upstream::Dummy::default());
        tokio::spawn(async move {
            if let Err(e) = dev::upstream::serve(listener, dummy).await {
                tracing::error!("demo upstream stopped: {e}");
            }
        });
        let llm = &mut loaded.config.llm;
        llm.api_base = format!("http://{addr}/v1");
        llm.api_key = None;
        llm.force_model = false;
        llm.model_id = "echo".into();
        llm.provider = config::Provider::Custom;
        llm.api_format = config::ApiFormat::Openai;
        llm.fallbacks.clear();
        // The dummy plays the judge and the evolver too, so the demo learns.
        let rl = &mut loaded.config.rl;
        rl.prm_url.clear();
        rl.prm_model = "judge".into();
        rl.evolver_api_base.clear();
        rl.evolver_model = "evolver".into();
        use_demo_data(&home, &mut loaded.config)?;
    }

    let config = &loaded.config;
    let metrics = Arc::new(Metrics::new());
    let db_path = config
        .store
        .path
        .as_deref()
        .map(expand_home)
        .unwrap_or_else(|| home.db_file());
    let secrets = [
        &config.llm.api_key,
        &config.proxy.api_key,
        &config.rl.tinker_api_key,
        &config.rl.api_key,
        &config.rl.prm_api_key,
        &config.rl.evolver_api_key,
        &config.opd.teacher_api_key,
        &config.skills.embedding_api_key,
    ]
    .into_iter()
    .flatten()
    .cloned()
    .collect::<Vec<String>>();
    let (recorded_tx, recorded_rx) = tokio::sync::mpsc::unbounded_channel();
    let (store, writer) = Store::open(
        StoreOptions {
            path: db_path,
            commit_interval: config.store.commit_interval.get(),
            queue_capacity: config.store.queue_capacity,
            redactor: Redactor::new(secrets.clone()),
            on_recorded: Some(recorded_tx),
            queue_learning: config.learning.enabled,
        },
        metrics.clone(),
    )?;
    let sessions = Tracker::new(
        store.clone(),
        metrics.clone(),
        config.sessions.idle_timeout.get(),
    );
    sessions.restore();
    let upstream_base = loaded.api_base();
    let upstream = Upstream::new(&loaded, upstream_base.clone())?;

    let host = config::parse_host(&config.proxy.host).context("proxy.host")?;
    let listener = TcpListener::bind((host, config.proxy.port))
        .await
        .with_context(|| {
            format!(
                "cannot listen on {}:{}",
                config.proxy.host, config.proxy.port
            )
        })?;
    let port = listener.local_addr()?.port();
    let host_text = host.to_string();
    let url = format!("http://{}:{port}", server::url_host(&host_text));

    // Plugins load in the background once the proxy is up: compiling a large
    // component takes seconds and must not delay start-up. Until then each
    // role falls back to its built-in behaviour.
    let (retrieval, embedder) = Retrieval::from_config(config, store.path());
    let mut plugin_settings = PluginSettings::from_config(config, &home);
    // The daemon sees every plugin in use: it may clean the compile cache.
    plugin_settings.evict_after = Some(Duration::from_secs(7 * 24 * 3600));
    let plugins = match PluginHost::new(plugin_settings, embedder) {
        Ok(host) => Some(host),
        Err(e) => {
            tracing::error!("plugins are off: {e:#}");
            None
        }
    };

    // The skill library also loads in the background (a large one takes a
    // while to read); until then no skill is injected.
    let skills = config.skills.enabled.then(|| {
        let (dir, _) = crate::skills::paths(&home, config);
        let library = Library::new(dir, store.path().to_path_buf());
        Skills::new(
            library,
            plugins.clone(),
            SkillSettings::from_config(config),
            retrieval,
        )
    });

    // Learning: one job per ended session, on its own low-priority thread.
    let learn = if config.learning.enabled {
        let redactor = Arc::new(Redactor::new(secrets));
        let judge = match config.learning.judge {
            true => {
                ChatModel::from_config(config, &upstream_base, Role::Judge)?.map(|model| Judge {
                    model,
                    votes: config.rl.prm_m.max(1),
                    temperature: config.learning.judge_temperature,
                    redactor: redactor.clone(),
                })
            }
            false => None,
        };
        let evolver = ChatModel::from_config(config, &upstream_base, Role::Evolver)?;
        let learner = Learner::new(
            store.clone(),
            plugins.clone(),
            skills.clone(),
            judge,
            evolver,
            redactor,
            config.learning.clone(),
            config.skills.auto_evolve,
        );
        Some(learner.spawn(sessions.subscribe())?)
    } else {
        None
    };

    let app = Arc::new(App {
        upstream,
        sessions,
        plugins: plugins.clone(),
        skills: skills.clone(),
        store: store.clone(),
        learn: learn.as_ref().map(|(handle, _)| handle.clone()),
        metrics: metrics.clone(),
        limits: Limits {
            max_body_bytes: (config.proxy.max_body_mb as usize) << 20,
            client_body_timeout: config.proxy.timeouts.client_body.get(),
        },
        proxy_token: config.proxy.api_key.clone(),
        admin_token: home.admin_token()?,
        guard: server::Guard::new(&config.proxy, port),
        info: RuntimeInfo {
            started: Instant::now(),
            started_at_ms: now_ms(),
            mode: config.mode.as_str().to_string(),
            demo,
            upstream_base: upstream_base.clone(),
            host: host_text.clone(),
            port,
        },
    });

    home.write_pid_file(&PidInfo {
        pid: std::process::id(),
        host: host_text,
        port,
        url: url.clone(),
        mode: config.mode.as_str().to_string(),
        started_at_ms: app.info.started_at_ms,
        version: env!("CARGO_PKG_VERSION").to_string(),
        demo,
    })?;
    tracing::info!(
        "metaclaw listening on {url} (upstream {upstream_base}, mode {})",
        config.mode.as_str()
    );
    // Tests and scripts read this line to learn the port.
    // (A closed stdout must not take the daemon down: ignore write errors.)
    let _ = writeln!(std::io::stdout(), "metaclaw listening on {url}");

    let sweeper = {
        let app = app.clone();
        let every = (app.sessions.idle_timeout() / 4)
            .clamp(Duration::from_millis(50), Duration::from_secs(15));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                app.sessions.sweep_idle();
            }
        })
    };
    if let Some(skills) = skills.clone() {
        if let Some(host) = &plugins {
            let s = skills.clone();
            host.on_reload(move || s.warm());
        }
        let spawned = std::thread::Builder::new()
            .name("metaclaw-skills-load".into())
            .spawn(move || {
                let snapshot = skills.library.rescan(None);
                tracing::info!(
                    "{} skill(s) loaded, {} problem(s), generation {}",
                    snapshot.skills.len(),
                    snapshot.problems.len(),
                    snapshot.generation
                );
                let s = skills.clone();
                skills
                    .library
                    .watch(Duration::from_millis(200), move |_| s.warm());
                skills.warm();
            });
        if let Err(e) = spawned {
            tracing::error!("cannot load the skill library: {e}");
        }
    }
    if let Some(host) = plugins.clone() {
        let spawned = std::thread::Builder::new()
            .name("metaclaw-plugin-load".into())
            .spawn(move || {
                let registry = host.reload();
                tracing::info!(
                    "{} plugin(s) loaded, {} problem(s)",
                    registry.plugins.len(),
                    registry.problems.len()
                );
                host.watch();
            });
        if let Err(e) = spawned {
            tracing::error!("cannot load plugins: {e}");
        }
    }
    let scoring = tokio::spawn(
        Scoring::new(store.clone(), plugins).run(recorded_rx, app.sessions.subscribe()),
    );

    let grace = config.proxy.shutdown_grace.get();
    let served = server::serve(
        listener,
        server::router(app.clone()),
        shutdown_signal(),
        grace,
        config.proxy.timeouts.client_header.get(),
    )
    .await;
    sweeper.abort();
    scoring.abort();
    tracing::info!("draining the store queue");
    store.shutdown().await;
    drop(app);
    let _ = tokio::task::spawn_blocking(move || writer.join()).await;
    home.remove_pid_file();
    tracing::info!("stopped");
    served.context("server error")
}

/// Points the demo at its own store and skill library (`<home>/demo`),
/// emptied and given the built-in bank: each demo shows the same loop from
/// the same start, and nothing it records or evolves reaches the user's
/// own data. Skills and learning are on, whatever the config says: they are
/// what the demo shows.
fn use_demo_data(home: &Home, config: &mut config::Config) -> Result<()> {
    let dir = home.demo_dir();
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot clear {}", dir.display())),
    }
    let skills = home.demo_skills_dir();
    std::fs::create_dir_all(&skills)
        .with_context(|| format!("cannot create {}", skills.display()))?;
    crate::skills::builtin::install(&skills, &|_| Vec::new(), &|_| false)
        .with_context(|| format!("cannot install the built-in skills in {}", skills.display()))?;
    // The config holds paths as text.
    let text = |path: std::path::PathBuf| {
        path.into_os_string().into_string().map_err(|p| {
            anyhow::anyhow!(
                "the demo needs a metaclaw home whose path is UTF-8, not {}",
                p.to_string_lossy()
            )
        })
    };
    config.store.path = Some(text(home.demo_db_file())?);
    config.skills.dir = Some(text(skills)?);
    config.skills.enabled = true;
    config.learning.enabled = true;
    config.learning.judge = true;
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers; stop with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
}

/// `~/x` → `$HOME/x`.
pub fn expand_home(path: &str) -> std::path::PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => std::path::PathBuf::from(home).join(rest),
        _ => std::path::PathBuf::from(path),
    }
}
