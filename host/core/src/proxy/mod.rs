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

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::agent_id::AgentId;
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
    /// The shared run's trainable model, when it serves (`mode: rl` /
    /// `auto`): every agent's turns but those of the agents below.
    pub policy: Option<Arc<Policy>>,
    /// The agents with a mode of their own (`agents.<id>`): their own run's
    /// model, or none (their mode does not serve one).
    pub agent_policies: BTreeMap<AgentId, Option<Arc<Policy>>>,
}

impl Proxy {
    /// The trainable model that answers `agent`'s turns, if one does.
    pub fn policy_for(&self, agent: &AgentId) -> Option<&Arc<Policy>> {
        match self.agent_policies.get(agent) {
            Some(own) => own.as_ref(),
            None => self.policy.as_ref(),
        }
    }
}

pub struct Limits {
    pub max_body_bytes: usize,
    pub client_body_timeout: Duration,
}
