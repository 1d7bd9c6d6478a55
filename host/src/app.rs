//! The state every request handler shares.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::learn::LearnHandle;
use crate::metrics::Metrics;
use crate::plugins::PluginHost;
use crate::proxy::upstream::Upstream;
use crate::sessions::Tracker;
use crate::skills::Skills;
use crate::store::Store;

pub struct App {
    pub upstream: Upstream,
    pub sessions: Tracker,
    /// `None` when the plugin host could not start (the proxy still serves).
    pub plugins: Option<Arc<PluginHost>>,
    /// The skill library and selection (`None` when skills are off).
    pub skills: Option<Arc<Skills>>,
    pub store: Store,
    /// The learning runner (`None` when `learning.enabled` is off).
    pub learn: Option<LearnHandle>,
    pub metrics: Arc<Metrics>,
    pub limits: Limits,
    /// `proxy.api_key`: required on /v1 routes when set.
    pub proxy_token: Option<String>,
    /// Required on /admin routes, always.
    pub admin_token: String,
    /// The `Host` and `Origin` values served (DNS rebinding, CSRF).
    pub guard: crate::server::Guard,
    pub info: RuntimeInfo,
}

pub struct Limits {
    pub max_body_bytes: usize,
    pub client_body_timeout: Duration,
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
}

pub type SharedApp = Arc<App>;
