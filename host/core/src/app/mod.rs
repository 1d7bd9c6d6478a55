//! The composition root: [`App::start`] builds the running product from a
//! config and a home (store, sessions, upstream, plugins, skills, learning)
//! and returns an [`AppHandle`] that owns every background task, stops them
//! with one cancellation and drains what they hold on [`AppHandle::shutdown`].
//!
//! Everything below `app` is wired here and nowhere else; the server and
//! the daemon above it only see [`App`] (the admin routes' state) and
//! [`Proxy`] (the turn handlers' state).

pub mod actions;
pub mod feedback;
mod start;
pub mod status;

use std::sync::Arc;
use std::time::Instant;

use crate::learn::LearnHandle;
use crate::plugins::PluginHost;
use crate::proxy::Proxy;

pub use start::StartOptions;
pub use status::{Status, status};

/// What the routes share: the turn pipeline's state and what the admin
/// routes report on.
pub struct App {
    /// The background work: what a route starts beside its answer (the
    /// dashboard's "learn now") is started here, so shutdown stops it.
    pub work: crate::work::Work,
    /// What a turn needs (the proxy routes get only this).
    pub proxy: Arc<Proxy>,
    /// `None` when the plugin host could not start (the proxy still serves).
    pub plugins: Option<Arc<PluginHost>>,
    /// The learning runner (`None` when `learning.enabled` is off).
    pub learn: Option<LearnHandle>,
    /// The trainer (rl/auto with learning on: rewards come from learning).
    pub train: Option<crate::learn::rl::trainer::TrainerHandle>,
    /// The trainers of the agents' own runs (`agents.<id>`, rl/auto).
    pub agent_trains: std::collections::BTreeMap<
        crate::agent_id::AgentId,
        crate::learn::rl::trainer::TrainerHandle,
    >,
    /// `proxy.api_key`: required on /v1 routes when set.
    pub proxy_token: Option<String>,
    /// Required on /admin routes, always.
    pub admin_token: String,
    /// Hides secrets in what the user sends outside a turn (feedback).
    pub redactor: Arc<crate::redact::Redactor>,
    /// This instance among those sharing the store (alone on SQLite).
    pub team: crate::team::Team,
    pub info: RuntimeInfo,
}

/// Facts about this daemon for `status`.
pub struct RuntimeInfo {
    pub started: Instant,
    pub started_at_ms: i64,
    pub mode: String,
    pub demo: bool,
    pub upstream_base: String,
    pub host: String,
    pub port: u16,
    /// The dashboard's settings (`ui`).
    pub ui: crate::config::UiConfig,
    /// The canaries' settings (`canary`), for what the pages say of them.
    pub canary: crate::config::CanaryConfig,
}

pub type SharedApp = Arc<App>;

/// How long shutdown waits for the background work before it leaves what
/// still runs (a training step, a compile) to end with the process.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// The running product: the shared state and everything running beside the
/// routes.
pub struct AppHandle {
    app: SharedApp,
    /// Every background task and thread but the three below: stopped first.
    work: crate::work::Work,
    /// The store's writer thread: joined after its queue is drained.
    writer: std::thread::JoinHandle<()>,
    /// Per-turn scoring's thread: it ends after the writer (which feeds it).
    scoring: Option<std::thread::JoinHandle<()>>,
    /// The learning runner's thread: it stops when the last handle to it
    /// (in [`App`]) is dropped; a job cut short is run again next start.
    learner: Option<std::thread::JoinHandle<()>>,
}

impl AppHandle {
    pub fn app(&self) -> &SharedApp {
        &self.app
    }

    /// After the server stopped serving: stops the background tasks, writes
    /// every queued record, and waits for the writer and the learning
    /// runner to end.
    pub async fn shutdown(self) {
        let Self {
            app,
            work,
            writer,
            scoring,
            learner,
        } = self;
        work.stop(SHUTDOWN_GRACE).await;
        tracing::info!("draining the store queue");
        app.proxy.store.shutdown().await;
        // The last handles to the store and the learning runner.
        drop(app);
        let _ = tokio::task::spawn_blocking(move || {
            let _ = writer.join();
            if let Some(scoring) = scoring {
                let _ = scoring.join();
            }
            if let Some(learner) = learner {
                let _ = learner.join();
            }
        })
        .await;
    }
}
