//! The proxy: OpenAI- and Anthropic-compatible routes in front of the
//! upstream LLM API.

mod answer;
mod capture;
mod record;
mod request;
mod stream;
mod student;
pub mod turn;
pub mod upstream;

use std::sync::Arc;
use std::time::Duration;

use crate::metrics::Metrics;
use crate::policy::Policy;
use crate::sessions::Tracker;
use crate::skills::Skills;
use crate::store::Store;
use upstream::Upstream;

/// What serving a turn needs, and nothing else: the handlers of the proxy
/// routes get this, not the whole daemon.
pub struct Proxy {
    pub upstream: Upstream,
    pub sessions: Tracker,
    /// The skill library and selection (`None` when skills are off).
    pub skills: Option<Arc<Skills>>,
    pub store: Store,
    pub metrics: Arc<Metrics>,
    pub limits: Limits,
    /// The trainable model, when it serves (`mode: rl` / `auto`).
    pub policy: Option<Arc<Policy>>,
}

pub struct Limits {
    pub max_body_bytes: usize,
    pub client_body_timeout: Duration,
}
