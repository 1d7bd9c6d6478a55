//! The daemon in the foreground: takes the home's lock, starts the product
//! ([`App::start`]), serves it, and on SIGTERM/SIGINT drains in-flight requests and the
//! write queue before it exits.

use std::io::Write;

use anyhow::{Context, Result, bail};
use tokio::net::TcpListener;

use crate::app::{App, StartOptions};
use crate::config::{self, LoadedConfig};
use crate::home::{Home, PidInfo};
use crate::server;

/// What `start --demo` and `dev upstream` say in a build without the
/// dummy upstream, rather than a missing subcommand or flag.
pub const NO_DUMMY_UPSTREAM: &str = "this metaclaw was built without the dummy upstream (cargo feature \
     `dev-tools`, on by default); build it with default features (`cargo install --path host`) or \
     with `--features dev-tools`";

pub struct DaemonOptions {
    pub home: Home,
    pub loaded: LoadedConfig,
    /// Serve against a built-in dummy upstream (no API key needed).
    pub demo: bool,
}

/// Checks that the config can serve, before anything is started.
pub fn check_servable(loaded: &LoadedConfig, demo: bool) -> Result<()> {
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
        if !cfg!(feature = "dev-tools") {
            bail!("--demo answers from the dummy upstream, and {NO_DUMMY_UPSTREAM}");
        }
        return Ok(());
    }
    if let Some(reason) = config::presets::unsupported_reason(&config.llm.provider) {
        bail!("llm.provider: {reason}");
    }
    if loaded.api_base().is_empty() {
        let demo = if cfg!(feature = "dev-tools") {
            " — or try `metaclaw start --demo`"
        } else {
            ""
        };
        bail!(
            "no upstream configured: set llm.api_base (or a provider preset) with `metaclaw setup` or \
             `metaclaw config set llm.api_base https://…/v1`{demo}"
        );
    }
    // Without CA certificates an HTTPS upstream cannot be reached: said
    // here, before `start` puts the daemon in the background, not only in
    // its log.
    let base = loaded.api_base();
    let fallbacks = config
        .llm
        .fallbacks
        .iter()
        .map(|f| f.api_base.as_str())
        .filter(|b| !b.is_empty());
    crate::http::ClientSpec::new(crate::http::Purpose::Upstream)
        .only_calls(std::iter::once(base.as_str()).chain(fallbacks))
        .build()
        .map_err(|e| anyhow::anyhow!("llm.api_base {base}: {e}"))?;
    Ok(())
}

/// The demo's upstream: a dummy in this process, serving while the task
/// returned with its base URL is held.
#[cfg(feature = "dev-tools")]
async fn start_demo_upstream() -> Result<(String, crate::work::OwnedTask)> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("cannot start the demo upstream")?;
    let addr = listener.local_addr()?;
    let dummy = std::sync::Arc::new(metaclaw_mock_upstream::Dummy::default());
    let serving = crate::work::OwnedTask::start(async move {
        if let Err(e) = metaclaw_mock_upstream::serve(listener, dummy).await {
            tracing::error!("demo upstream stopped: {e}");
        }
    });
    Ok((format!("http://{addr}/v1"), serving))
}

#[cfg(not(feature = "dev-tools"))]
async fn start_demo_upstream() -> Result<(String, crate::work::OwnedTask)> {
    bail!("--demo answers from the dummy upstream, and {NO_DUMMY_UPSTREAM}")
}

/// Points the config at an in-process dummy upstream (and the demo's
/// data); the dummy serves while the returned task is held.
async fn start_demo(home: &Home, loaded: &mut LoadedConfig) -> Result<crate::work::OwnedTask> {
    let (api_base, serving) = start_demo_upstream().await?;
    let llm = &mut loaded.config.llm;
    llm.api_base = api_base;
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
    use_demo_data(home, &mut loaded.config)?;
    Ok(serving)
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

    // The demo answers from a dummy upstream inside this process, served
    // until this returns.
    let _demo_upstream = match demo {
        true => Some(start_demo(&home, &mut loaded).await?),
        false => None,
    };

    let config = &loaded.config;
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
    let handle = App::start(StartOptions {
        home: &home,
        loaded: &loaded,
        demo,
        host,
        port,
    })?;
    let app = handle.app().clone();
    let url = format!("http://{}:{port}", crate::http::url_host(&app.info.host));
    home.write_pid_file(&PidInfo {
        pid: std::process::id(),
        host: app.info.host.clone(),
        port,
        url: url.clone(),
        mode: config.mode.as_str().to_string(),
        started_at_ms: app.info.started_at_ms,
        version: env!("CARGO_PKG_VERSION").to_string(),
        demo,
    })?;
    tracing::info!(
        "metaclaw listening on {url} (upstream {}, mode {})",
        app.info.upstream_base,
        config.mode.as_str()
    );
    // Tests and scripts read this line to learn the port.
    // (A closed stdout must not take the daemon down: ignore write errors.)
    let _ = writeln!(std::io::stdout(), "metaclaw listening on {url}");

    let served = server::serve(
        listener,
        server::router(app, server::Guard::new(&config.proxy, port)),
        shutdown_signal(),
        config.proxy.shutdown_grace.get(),
        config.proxy.timeouts.client_header.get(),
    )
    .await;
    handle.shutdown().await;
    home.remove_pid_file();
    tracing::info!("stopped");
    served.context("server error")
}

/// Points the demo at its own store and skill library (`<home>/demo`),
/// emptied and given the built-in bank: each demo shows the same loop from
/// the same start, and nothing it records or evolves reaches the user's
/// own data. Skills and learning are on, whatever the config says: they are
/// what the demo shows; canaries are off (its one session could not decide
/// one).
fn use_demo_data(home: &Home, config: &mut config::Config) -> Result<()> {
    let dir = home.demo_dir();
    crate::home::remove_dir_if_any(&dir)?;
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
    // One learning round in a minute, its new skill served at once: a
    // canary decides after dozens of judged sessions (docs/learning.md).
    config.canary.skills = false;
    config.canary.weights = false;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `--demo` needs no upstream in a build with the dummy, and in one
    /// without it says what is missing and how to get it.
    #[test]
    fn the_demo_needs_the_dummy_upstream_built_in() {
        let loaded = LoadedConfig {
            config: config::Config::default(),
            path: "config.yaml".into(),
            file_exists: false,
            warnings: Vec::new(),
            secret_sources: Default::default(),
        };
        let demo = check_servable(&loaded, true);
        let plain = check_servable(&loaded, false).unwrap_err().to_string();
        if cfg!(feature = "dev-tools") {
            assert!(demo.is_ok(), "{demo:?}");
            assert!(plain.contains("`metaclaw start --demo`"), "{plain}");
        } else {
            let demo = demo.unwrap_err().to_string();
            assert!(demo.contains("built without the dummy upstream"), "{demo}");
            assert!(demo.contains("--features dev-tools"), "{demo}");
            assert!(!plain.contains("--demo"), "{plain}");
        }
    }
}
