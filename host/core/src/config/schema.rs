//! The configuration schema. It accepts every key of the original MetaClaw's
//! `config.yaml` (so its users can switch by pointing metaclaw at their file)
//! plus metaclaw's own sections (`sessions`, `store`, `log`, proxy limits).
//! Every field has a default, so an empty or missing file is a valid config.

use serde::{Deserialize, Serialize};

use super::compat::{
    MemoryConfig, OpdConfig, OpenRouterConfig, RlConfig, SchedulerConfig, WechatConfig,
};
use super::duration::Dur;
use super::hosts::{HostEntry, Origin};
use super::plugin_refs::{FilePin, FileRef, Grants, PluginSpec};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Proxy, skills and learning from sessions; no weight updates.
    #[default]
    SkillsOnly,
    /// Reinforcement learning on the served model.
    Rl,
    /// Skills plus RL in idle windows. `madmax` is the original's name for it.
    #[serde(alias = "madmax")]
    Auto,
}

impl Mode {
    pub fn as_str(&self) -> &'static str {
        match self {
            Mode::SkillsOnly => "skills_only",
            Mode::Rl => "rl",
            Mode::Auto => "auto",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum ClawType {
    #[default]
    Openclaw,
    Hermes,
    Copaw,
    Ironclaw,
    Zeroclaw,
    Picoclaw,
    Nanoclaw,
    Nemoclaw,
    None,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Provider {
    Kimi,
    Qwen,
    Openai,
    Openrouter,
    Minimax,
    Volcengine,
    Novita,
    #[default]
    Custom,
    // The original's subscription (CLI) and Bedrock providers. Accepted so an
    // existing config loads; `start` explains they are not supported.
    Anthropic,
    OpenaiCodex,
    Gemini,
    Bedrock,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Config {
    pub mode: Mode,
    pub claw_type: ClawType,
    pub llm: LlmConfig,
    pub proxy: ProxyConfig,
    /// Token budget for the prompt after injection (the original's default).
    pub max_context_tokens: u64,
    /// The context window advertised to the agent when wiring it; 0 = auto.
    pub context_window: u64,
    /// PR #10 of the original: `false` leaves the agent's config alone.
    pub configure_openclaw: bool,
    pub skills: SkillsConfig,
    pub rl: RlConfig,
    pub opd: OpdConfig,
    pub scheduler: SchedulerConfig,
    pub memory: MemoryConfig,
    pub wechat: WechatConfig,
    pub openrouter: OpenRouterConfig,
    pub sessions: SessionsConfig,
    pub store: StoreConfig,
    pub log: LogConfig,
    pub plugins: PluginsConfig,
    pub learning: LearningConfig,
    pub canary: CanaryConfig,
    pub ui: UiConfig,
    /// What one agent gets other than the top level's (`agents.<id>`;
    /// docs/claws.md "Agents"): its own mode, and in `rl`/`auto` its own
    /// training run and LoRA. An agent not listed is served as the top
    /// level says, from the shared run.
    pub agents: std::collections::BTreeMap<String, AgentConfig>,
}

/// Why an agent's own settings (`agents.<id>`) cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentConfigError {
    #[error("`agents.{agent}.rl.{key}`: set once, at the top level (`rl.{key}`), for every agent")]
    TopLevelOnly { agent: String, key: String },
    #[error("`agents.{agent}.rl.{key}` is not an `rl` key")]
    NotAnRlKey { agent: String, key: String },
    #[error("`agents.{agent}.rl`: {error}")]
    Invalid { agent: String, error: String },
}

/// `agents.<id>`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default)]
pub struct AgentConfig {
    /// The agent's mode (unset: the top-level `mode`). Listing an agent with
    /// a mode that serves the trainable model gives it a run of its own: its
    /// turns are served from its own LoRA and train only that.
    pub mode: Option<Mode>,
    /// `rl.*` keys for the agent's own run, over the top-level `rl` (the
    /// keys of the student and the trainer; keys, endpoints' secrets and
    /// the judge's and evolver's settings stay at the top level).
    pub rl: serde_json::Map<String, serde_json::Value>,
}

/// The `rl` keys an agent's run cannot set: secrets (kept once, at the top
/// level or in the environment) and learning's judge and evolver (one per
/// daemon, for every agent).
pub const AGENT_RL_TOP_LEVEL_ONLY: &[&str] = &[
    "enabled",
    "tinker_api_key",
    "api_key",
    "prm_url",
    "prm_model",
    "prm_api_key",
    "prm_m",
    "prm_provider",
    "evolver_api_base",
    "evolver_api_key",
    "evolver_model",
    "evolver_provider",
];

impl Config {
    /// The agent is served by the trainable model (`mode: rl` or `auto`,
    /// or `rl.enabled`, as in the original).
    pub fn serves_student(&self) -> bool {
        matches!(self.mode, Mode::Rl | Mode::Auto) || self.rl.enabled
    }

    /// The config `agent`'s turns are served and trained under: the top
    /// level with the agent's own `mode` and `rl` keys over it (`None`: the
    /// agent is not listed, and shares the top level's).
    pub fn for_agent(&self, agent: &str) -> Result<Option<Config>, AgentConfigError> {
        match self.agents.get(agent) {
            Some(own) => self.with_agent(agent, own).map(Some),
            None => Ok(None),
        }
    }

    /// Each listed agent with the config its turns are served and trained
    /// under (`for_agent`).
    pub fn agent_configs(&self) -> Result<Vec<(&str, Config)>, AgentConfigError> {
        self.agents
            .iter()
            .map(|(agent, own)| Ok((agent.as_str(), self.with_agent(agent, own)?)))
            .collect()
    }

    fn with_agent(&self, agent: &str, own: &AgentConfig) -> Result<Config, AgentConfigError> {
        let mut config = self.clone();
        if let Some(mode) = &own.mode {
            config.mode = mode.clone();
        }
        if !own.rl.is_empty() {
            let invalid = |error: serde_json::Error| AgentConfigError::Invalid {
                agent: agent.to_string(),
                error: error.to_string(),
            };
            let mut rl = serde_json::to_value(&self.rl).map_err(invalid)?;
            for (key, value) in &own.rl {
                if AGENT_RL_TOP_LEVEL_ONLY.contains(&key.as_str()) {
                    return Err(AgentConfigError::TopLevelOnly {
                        agent: agent.to_string(),
                        key: key.clone(),
                    });
                }
                match rl.get_mut(key) {
                    Some(slot) => *slot = value.clone(),
                    None => {
                        return Err(AgentConfigError::NotAnRlKey {
                            agent: agent.to_string(),
                            key: key.clone(),
                        });
                    }
                }
            }
            config.rl = serde_json::from_value(rl).map_err(invalid)?;
        }
        // The agent's mode alone decides whether the trainable model serves
        // it: `rl.enabled` (the original's switch) counts as `mode: rl` for
        // an agent that sets no mode.
        if own.mode.is_none() && self.rl.enabled && self.mode == Mode::SkillsOnly {
            config.mode = Mode::Rl;
        }
        config.rl.enabled = false;
        Ok(config)
    }

    /// The secrets this config holds (keys, a calendar's private URL):
    /// redacted from everything stored or sent to a learning LLM.
    pub fn secrets(&self) -> Vec<String> {
        [
            &self.llm.api_key,
            &self.proxy.api_key,
            &self.rl.tinker_api_key,
            &self.rl.api_key,
            &self.rl.prm_api_key,
            &self.rl.evolver_api_key,
            &self.opd.teacher_api_key,
            &self.skills.embedding_api_key,
            &self.scheduler.calendar.ics_url,
            &self.store.url,
        ]
        .into_iter()
        .flatten()
        .cloned()
        .collect()
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            mode: Mode::default(),
            claw_type: ClawType::default(),
            llm: LlmConfig::default(),
            proxy: ProxyConfig::default(),
            max_context_tokens: 50_000,
            context_window: 0,
            configure_openclaw: true,
            skills: SkillsConfig::default(),
            rl: RlConfig::default(),
            opd: OpdConfig::default(),
            scheduler: SchedulerConfig::default(),
            memory: MemoryConfig::default(),
            wechat: WechatConfig::default(),
            openrouter: OpenRouterConfig::default(),
            sessions: SessionsConfig::default(),
            store: StoreConfig::default(),
            log: LogConfig::default(),
            plugins: PluginsConfig::default(),
            learning: LearningConfig::default(),
            canary: CanaryConfig::default(),
            ui: UiConfig::default(),
            agents: Default::default(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default)]
pub struct LlmConfig {
    pub provider: Provider,
    /// Used when a request names no model, and always when `force_model`.
    pub model_id: String,
    /// OpenAI-compatible base URL, e.g. `https://api.openai.com/v1`.
    pub api_base: String,
    pub api_key: Option<String>,
    /// Name of an environment variable holding the key (kept out of the file).
    pub api_key_env: Option<String>,
    pub auth_method: String,
    pub bedrock_region: String,
    /// Replace the model of every request with `model_id` (the original did
    /// this always; metaclaw forwards the agent's model unless asked).
    pub force_model: bool,
    /// The upstream's API: `openai` (chat completions, the default) or
    /// `anthropic` (Messages; `/v1/messages` is then passed through).
    pub api_format: ApiFormat,
    /// Tried in order when the upstream fails before answering (connect
    /// error, timeout, 5xx, 429); never once an answer has started.
    pub fallbacks: Vec<FallbackConfig>,
}

/// `openai` or `anthropic`: the wire crate's, so the proxy's translators
/// and the config name one type.
pub use metaclaw_wire::ApiFormat;

/// One fallback upstream, same API format as `llm`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default, deny_unknown_fields)]
pub struct FallbackConfig {
    pub api_base: String,
    /// The model to ask this upstream for; empty keeps the request's model.
    #[serde(alias = "model")]
    pub model_id: String,
    pub api_key: Option<String>,
    /// Name of an environment variable holding the key.
    pub api_key_env: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ProxyConfig {
    pub port: u16,
    /// Loopback by default. Any other address requires `api_key`.
    pub host: String,
    /// When set, every /v1 request needs `Authorization: Bearer <api_key>`.
    pub api_key: Option<String>,
    /// `Host` names served besides 127.0.0.1, localhost, [::1] and `host`
    /// (any other is refused: DNS rebinding), e.g. `host.docker.internal`
    /// for an agent in a container. `name` allows it with no port or the
    /// listening port; `name:port` that port only.
    pub allowed_hosts: Vec<HostEntry>,
    /// Browser origins (`http://name:port`) that may send POSTs besides the
    /// proxy's own; every other page's requests are refused (CSRF).
    pub allowed_origins: Vec<Origin>,
    pub max_body_mb: u64,
    pub timeouts: ProxyTimeouts,
    /// How long shutdown waits for requests in flight.
    pub shutdown_grace: Dur,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            port: 30000,
            host: "127.0.0.1".into(),
            api_key: None,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            max_body_mb: 32,
            timeouts: ProxyTimeouts::default(),
            shutdown_grace: Dur::secs(10),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ProxyTimeouts {
    /// TCP + TLS connect to the upstream.
    pub connect: Dur,
    /// From sending the request to the upstream's response headers. A
    /// non-streaming completion sends headers only when it is done, so this
    /// is generous.
    pub first_byte: Dur,
    /// Longest silence allowed between two chunks of an upstream body.
    pub between_chunks: Dur,
    /// Longest time a client may take to send its request body.
    pub client_body: Dur,
    /// Longest time a client may take to send its request headers (also how
    /// long an idle keep-alive connection is kept): slow or silent clients
    /// cannot hold connections forever.
    pub client_header: Dur,
}

impl Default for ProxyTimeouts {
    fn default() -> Self {
        Self {
            connect: Dur::secs(10),
            first_byte: Dur::secs(300),
            between_chunks: Dur::secs(120),
            client_body: Dur::secs(30),
            client_header: Dur::secs(30),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct SkillsConfig {
    pub enabled: bool,
    /// Default: `<home>/skills`.
    pub dir: Option<String>,
    /// `setup` and `start` install the built-in skill bank: all of it into
    /// a library with no skill, and later (a new version) the skills new
    /// to the bank and new versions of those the user did not edit. Off:
    /// the library is left as it is (`skills install-builtin` still works).
    pub install_builtin: bool,
    /// `bm25` (also `template`, the original's default) or `embedding`
    /// (cosine over embeddings, BM25 as the fallback).
    pub retrieval_mode: RetrievalMode,
    pub top_k: u32,
    pub task_specific_top_k: u32,
    pub auto_evolve: bool,
    pub evolution_every_n_turns: u32,
    /// Where embeddings come from: `local` (all-MiniLM-L6-v2 in-process,
    /// from `embedding_model_path`; needs the `local-embeddings` build) or
    /// `openai` (any OpenAI-compatible `/v1/embeddings` endpoint).
    pub embedding_backend: EmbeddingBackend,
    /// `local`: the folder holding `model.safetensors`, `tokenizer.json`
    /// and `config.json` of all-MiniLM-L6-v2 (or a BERT model like it).
    pub embedding_model_path: Option<String>,
    /// `openai`: the endpoint's base URL (default: `llm.api_base`).
    pub embedding_api_base: Option<String>,
    /// `openai`: its key (default: `llm.api_key`).
    pub embedding_api_key: Option<String>,
    /// `openai`: the model to ask for.
    pub embedding_model: String,
    /// Retrieved skills scoring below this are not injected (0..1): small
    /// talk matches nothing.
    pub min_relevance: f32,
    /// ...and at least this share of the best skill's score (keeps
    /// skills that merely share a word with the question out).
    pub min_relative_relevance: f32,
    /// An executable skill joins when its `applies()` reaches this.
    pub component_threshold: f32,
    /// How much a relevant skill's outcomes (the judged rewards of the
    /// turns it was injected into) weigh in its rank, 0..1; 0 ranks by
    /// relevance alone. Relevance stays the gate either way.
    pub outcome_weight: f32,
    /// Take skills the outcomes flag out of retrieval (evolved ones only;
    /// the user's own and the built-in are flagged, never retired).
    pub auto_retire: bool,
    /// Skills other tools drop into the folder, by name (`*` any run of
    /// characters; in any agent's layer): untrusted input, held out of
    /// turns, of the evolver's view and of exports until the `guard`
    /// evolver has passed their exact text (skills::untrusted). Default
    /// `["arc-*"]` (AutoResearchClaw's); `[]` trusts the whole folder.
    pub untrusted: Vec<String>,
    /// How an evolved skill reaches the agent: `inject` (into turns, as
    /// always), `workshop` (offered to OpenClaw's Skill Workshop, pending
    /// its owner's review; injected once applied) or `both` (injected, and
    /// offered; no longer injected once rejected). skills::workshop.
    pub deliver: Deliver,
    /// OpenClaw's Skill Workshop, for `deliver: workshop | both`.
    pub workshop: WorkshopConfig,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Deliver {
    #[default]
    Inject,
    Workshop,
    Both,
}

impl Deliver {
    pub fn as_str(self) -> &'static str {
        match self {
            Deliver::Inject => "inject",
            Deliver::Workshop => "workshop",
            Deliver::Both => "both",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct WorkshopConfig {
    /// The OpenClaw CLI metaclaw proposes through (a name on PATH or a
    /// path).
    pub command: String,
    /// OpenClaw's state folder (`OPENCLAW_STATE_DIR` for the command;
    /// unset: OpenClaw's own default, `~/.openclaw`).
    pub state_dir: Option<String>,
    /// The OpenClaw agent whose Workshop gets the shared skills (an
    /// agent's own layer goes to the OpenClaw agent of that id).
    pub agent: String,
    /// How often the owner's verdicts are read (each read starts
    /// OpenClaw's CLI). 1s to 1d.
    pub poll_every: Dur,
}

impl Default for WorkshopConfig {
    fn default() -> Self {
        Self {
            command: "openclaw".into(),
            state_dir: None,
            agent: "main".into(),
            poll_every: Dur::secs(300),
        }
    }
}

impl SkillsConfig {
    /// `retrieval_mode: embedding`; every other mode (`bm25`, and the
    /// original's `template`) retrieves with BM25.
    pub fn embedding_retrieval(&self) -> bool {
        self.retrieval_mode == RetrievalMode::Embedding
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum RetrievalMode {
    /// The original's name for keyword retrieval: BM25 here.
    #[default]
    Template,
    Bm25,
    Embedding,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum EmbeddingBackend {
    /// all-MiniLM-L6-v2 in-process (the `local-embeddings` build).
    #[default]
    Local,
    /// An OpenAI-compatible `/v1/embeddings` endpoint.
    Openai,
}

impl Default for SkillsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            dir: None,
            install_builtin: true,
            retrieval_mode: RetrievalMode::Template,
            top_k: 6,
            task_specific_top_k: 10,
            auto_evolve: true,
            evolution_every_n_turns: 10,
            embedding_backend: EmbeddingBackend::Local,
            embedding_model_path: None,
            embedding_api_base: None,
            embedding_api_key: None,
            embedding_model: "text-embedding-3-small".into(),
            min_relevance: 0.3,
            min_relative_relevance: 0.5,
            component_threshold: 0.5,
            outcome_weight: 0.3,
            auto_retire: false,
            untrusted: vec!["arc-*".into()],
            deliver: Deliver::Inject,
            workshop: WorkshopConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct SessionsConfig {
    /// A session with no request for this long ends (OpenClaw never says).
    pub idle_timeout: Dur,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        Self {
            idle_timeout: Dur::secs(30 * 60),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct StoreConfig {
    /// Default: `<home>/metaclaw.db`.
    pub path: Option<String>,
    /// A Postgres database instead of the SQLite file
    /// (`postgres://user:password@host:port/db`): several instances sharing
    /// one store (docs/team.md). A secret, like the API keys: best given
    /// as `METACLAW_STORE_URL` in the environment.
    pub url: Option<String>,
    /// Longest a finished turn waits in the write queue before its commit.
    pub commit_interval: Dur,
    /// Turns in flight plus turns waiting to be written, at most.
    pub queue_capacity: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            path: None,
            url: None,
            commit_interval: Dur::millis(100),
            queue_capacity: 8192,
        }
    }
}

/// The dashboard at `/ui` (docs/dashboard.md).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct UiConfig {
    /// Serve it (behind the admin token: a login page sets a session
    /// cookie).
    pub enabled: bool,
    /// Offer its actions (learn from a session now, disable a plugin until
    /// the next reload, retire a skill, roll the student back); off, it is
    /// read-only.
    pub actions: bool,
    /// How long a login lasts.
    pub session_hours: u32,
}

impl Default for UiConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            actions: false,
            session_hours: 12,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct LogConfig {
    /// A tracing filter, e.g. `info` or `metaclaw=debug`. `RUST_LOG` wins.
    pub level: String,
    /// The daemon's log file (`<home>/logs/metaclaw.log`) is rotated when
    /// it passes this size, while running and at start.
    pub max_mb: u64,
    /// Rotated files kept (`metaclaw.log.1` is the newest); 0 keeps none.
    pub keep: u32,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            level: "info".into(),
            max_mb: 16,
            keep: 3,
        }
    }
}

/// WebAssembly plugins: where they come from, which run in each role, and
/// what they may touch.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct PluginsConfig {
    /// The drop-in folder (default `<home>/plugins`); watched for changes.
    pub dir: Option<String>,
    /// Load the first-party plugins from this folder instead of the copies
    /// compiled into metaclaw (unset, the default: the embedded ones). For
    /// developing them; these are files, so a lock file checks them.
    pub builtin_dir: Option<String>,
    /// `false` turns the first-party plugins off (their names stay reserved).
    pub builtin: bool,
    /// The retriever, tried in order: `name` or `name@<semver requirement>`.
    pub retriever: Vec<PluginSpec>,
    /// Scorers that run on every finished turn; unset: every loaded scorer.
    pub scorers: Option<Vec<PluginSpec>>,
    /// Evolver post-processors, in order; unset: every loaded evolver.
    pub evolvers: Option<Vec<PluginSpec>>,
    /// Executable skills; unset: every loaded skill component.
    pub skills: Option<Vec<PluginSpec>>,
    /// Capabilities: `embed`, `clock`, `kv`, `outcomes`, `network`,
    /// `env:NAME`, `fs:/dir`, keyed by `NAME` (the first-party plugin NAME, or a drop-in
    /// NAME whose sha256 metaclaw.lock pins) or `NAME@sha256:<hex>` (that
    /// file only). Nothing is granted by default.
    pub grants: std::collections::BTreeMap<FileRef, Grants>,
    /// Drop-ins allowed to replace the first-party plugin of their name,
    /// each named by its file: `NAME@sha256:<hex>`.
    pub overrides: Vec<FilePin>,
    /// Per-call deadlines by role, and for indexing and loading.
    pub timeouts: PluginTimeouts,
    /// What a turn's retriever and executable-skill calls may add to it
    /// together, whatever their number (each call also has its own
    /// deadline): what has not answered by then is left out of the turn,
    /// counted as cut, not as failed. 250 ms by default: the first-party
    /// plugins put one retriever call on a turn (BM25, well under a
    /// millisecond), and the budget leaves room for it and its fallback at
    /// their full 50 ms deadlines with time to spare for executable skills.
    /// Time the host spends embedding a retriever's query is not counted.
    pub turn_budget: Dur,
    /// Memory cap per plugin: all its instances' memories and tables
    /// together.
    pub memory_mb: u64,
    /// Memory cap of all plugins together: every instance's memories and
    /// tables, and every loaded plugin's compiled code. A growth past it
    /// fails the call as `memory_mb` does; a plugin whose compiled code and
    /// one instance do not fit in what is left is refused at load. Default
    /// 1024 MiB, sized for a small machine (2 GiB of RAM: a small VPS or a
    /// Raspberry Pi): metaclaw (about 100 MiB), the agent and the system
    /// keep the other half; it is 8 plugins at their full `memory_mb` at
    /// once, while the first-party plugins together take a small part of it.
    pub total_memory_mb: u64,
    /// Plugin compiles running at once (each holds its component's
    /// compiled code and Cranelift's working memory, and wasmtime already
    /// compiles one component on every core). Default 2: two heavy
    /// components at a time at most, and one slow compile does not hold up
    /// every other file.
    pub max_compiles: usize,
    /// Consecutive failures before a plugin is disabled until reloaded.
    pub max_failures: u32,
    /// The failure-rate window: a plugin whose last `failure_window` calls
    /// (default 50) failed more than `max_failure_rate` of the time
    /// (default 0.25) is disabled until reloaded, like one that fails
    /// `max_failures` times in a row: failing every other call never comes
    /// in a row. 50 calls at 25% is 13 failures: a plugin that fails one
    /// call in twenty by bad luck gets there in fewer than one window in a
    /// million, one that fails one call in three within a few dozen calls.
    pub failure_window: u32,
    pub max_failure_rate: f64,
    /// Requests each plugin file may send to the embedding backend per
    /// rolling hour (texts no cache holds, in batches of 32), over all its
    /// instances, re-indexes and reloads. Default 4,000, more than one a
    /// second sustained: a retriever's turn costs one request (its query),
    /// so a busy agent or a benchmark run stays under it with the first
    /// index of a 10,000-skill library (about 320 requests) besides; a
    /// re-index of unchanged texts is served from the cache and costs
    /// nothing.
    pub embed_requests_per_hour: u64,
    /// Text (MiB) each plugin file may send to the embedding backend per
    /// rolling hour. Default 32: that library's first index (about 20 MiB
    /// of skills) fits; a plugin embedding fresh text over and over is held
    /// to about 8 million tokens an hour.
    pub embed_mb_per_hour: u64,
    /// Ready instances kept per plugin, and calls it runs at once.
    pub pool_size: usize,
    /// How often the plugin folders are checked for changes.
    pub watch_interval: Dur,
    /// Plugin files larger than this are refused without being read.
    pub max_file_mb: u64,
    /// What one call may copy from a plugin into metaclaw (the arguments of
    /// a host call, the result it returns).
    pub max_call_mb: u64,
    /// Threads that run plugin calls (0: one per core, at least 2).
    pub threads: usize,
}

impl Default for PluginsConfig {
    fn default() -> Self {
        Self {
            dir: None,
            builtin_dir: None,
            builtin: true,
            retriever: Vec::new(),
            scorers: None,
            evolvers: None,
            skills: None,
            grants: std::collections::BTreeMap::new(),
            overrides: Vec::new(),
            timeouts: PluginTimeouts::default(),
            turn_budget: Dur::millis(250),
            memory_mb: 128,
            total_memory_mb: 1024,
            max_compiles: 2,
            max_failures: 3,
            failure_window: 50,
            max_failure_rate: 0.25,
            embed_requests_per_hour: 4_000,
            embed_mb_per_hour: 32,
            pool_size: 4,
            watch_interval: Dur::secs(1),
            max_file_mb: 64,
            max_call_mb: 4,
            threads: 0,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct PluginTimeouts {
    pub retriever: Dur,
    pub scorer: Dur,
    pub evolver: Dur,
    pub skill: Dur,
    /// A retriever's `index()` of the skill library (in the background;
    /// time waiting on the embedding backend is not counted).
    pub index: Dur,
    /// Instantiating a new file and reading its `metadata()`.
    pub load: Dur,
    /// Compiling one new file (a cached compile is not compiled again).
    /// Past it the plugin is refused; Cranelift cannot be stopped, so the
    /// compile runs to its end in the background, holding its slot of
    /// `plugins.max_compiles`, and its code is discarded. Default 60 s: the
    /// first-party plugins compile in a few seconds on a small machine.
    pub compile: Dur,
}

impl Default for PluginTimeouts {
    fn default() -> Self {
        Self {
            retriever: Dur::millis(50),
            scorer: Dur::millis(50),
            evolver: Dur::millis(500),
            skill: Dur::millis(50),
            index: Dur::secs(30),
            load: Dur::secs(2),
            compile: Dur::secs(60),
        }
    }
}

/// Learning from ended sessions: the job queue, the judge, skill evolution,
/// and how a turn's rewards combine into one. The judge and the evolver
/// models are the `rl.prm_*` and `rl.evolver_*` keys (each defaults to its
/// `llm.*` counterpart).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct LearningConfig {
    /// `false`: sessions are recorded but no job runs.
    pub enabled: bool,
    /// Jobs running at once.
    pub concurrency: u32,
    /// Judge every main turn (`rl.prm_m` votes each).
    pub judge: bool,
    /// Evolve skills from ended sessions (`false`: judged for rewards and
    /// training only; nothing is written to the skill library).
    pub evolve: bool,
    /// Sampling temperature of the judge's votes (they must be able to differ).
    pub judge_temperature: f32,
    /// One judge or evolver call, including retries after 429 and 5xx.
    pub llm_timeout: Dur,
    /// Skill drafts the evolver may propose per session.
    pub max_drafts: u32,
    /// The transcript sent to the evolver is cut to this many characters.
    pub transcript_chars: u32,
    pub reward: RewardConfig,
}

impl Default for LearningConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            concurrency: 2,
            judge: true,
            evolve: true,
            judge_temperature: 0.6,
            llm_timeout: Dur::secs(120),
            max_drafts: 3,
            transcript_chars: 24_000,
            reward: RewardConfig::default(),
        }
    }
}

/// Live canaries (docs/learning.md "Canaries"): a skill the evolver
/// writes serves `share` of the sessions it is relevant to, and as many go
/// without it, until a sequential test on their judged rewards decides.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct CanaryConfig {
    /// Test evolved skills (new and revised) before everyone gets them.
    /// Off: they serve every session at once, as before.
    pub skills: bool,
    /// Test new weights (`mode: rl`/`auto`) before everyone gets them: after
    /// a train step the new policy version serves the candidate arm and the
    /// incumbent every other session; no step trains until it is decided.
    /// Off: a step's weights serve every session at once, as before.
    pub weights: bool,
    /// Test the skills the user writes too (added or changed by hand, by
    /// `metaclaw skills add|import` or in the folder) before everyone gets
    /// them. Off: they serve every session at once, and only
    /// `metaclaw experiments start SKILL` puts one under test.
    pub user_skills: bool,
    /// The share of sessions in each arm (candidate, control), 0 < s ≤ 0.5;
    /// the rest go without the candidate and are not counted.
    pub share: f64,
    /// The bound on promoting a candidate that is no better (and on rolling
    /// back one that is better), 0 < δ < 0.5.
    pub delta: f64,
    /// Judged sessions each arm needs before any decision.
    pub min_sessions: u32,
    /// An undecided candidate is decided by `on_timeout` after this long.
    pub max_duration: Dur,
    pub on_timeout: CanaryTimeout,
}

impl Default for CanaryConfig {
    fn default() -> Self {
        Self {
            skills: true,
            weights: true,
            user_skills: false,
            share: 0.25,
            delta: 0.05,
            min_sessions: 10,
            max_duration: Dur::secs(30 * 86_400),
            on_timeout: CanaryTimeout::RollBack,
        }
    }
}

/// What becomes of a candidate still undecided at `canary.max_duration`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum CanaryTimeout {
    /// Taken out (as a candidate shown to hurt): nothing unproven stays.
    #[default]
    #[serde(alias = "rollback")]
    RollBack,
    /// Kept for everyone: the test found no harm either.
    Keep,
}

/// How the judge's score and the scorers' rewards make one turn reward.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct RewardConfig {
    /// `weighted` (default): judge_weight × judge + Σ weight × scorer reward,
    /// clamped to [-1, 1]. `min`: the most negative signal (else the most
    /// positive). `judge`: the judge alone (scorers only when it is off).
    pub combine: RewardCombine,
    pub judge_weight: f32,
    /// Per scorer plugin name; a scorer not listed weighs 1.
    pub scorer_weights: std::collections::BTreeMap<String, f32>,
}

impl Default for RewardConfig {
    fn default() -> Self {
        Self {
            combine: RewardCombine::Weighted,
            judge_weight: 1.0,
            scorer_weights: std::collections::BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum RewardCombine {
    #[default]
    Weighted,
    Min,
    Judge,
}

/// The keys whose values are secrets: masked when shown, never logged.
pub const SECRET_KEYS: &[&str] = &[
    "llm.api_key",
    "proxy.api_key",
    "rl.tinker_api_key",
    "rl.api_key",
    "rl.prm_api_key",
    "rl.evolver_api_key",
    "opd.teacher_api_key",
    "skills.embedding_api_key",
    "scheduler.calendar.ics_url",
    "store.url",
];

/// Environment variables that supply a secret instead of the file. They win
/// over the file so a key never has to be written to disk.
pub const SECRET_ENV: &[(&str, &str)] = &[
    ("METACLAW_LLM_API_KEY", "llm.api_key"),
    ("METACLAW_PROXY_API_KEY", "proxy.api_key"),
    ("METACLAW_RL_TINKER_API_KEY", "rl.tinker_api_key"),
    ("TINKER_API_KEY", "rl.tinker_api_key"),
    ("METACLAW_RL_PRM_API_KEY", "rl.prm_api_key"),
    ("METACLAW_RL_EVOLVER_API_KEY", "rl.evolver_api_key"),
    ("METACLAW_OPD_TEACHER_API_KEY", "opd.teacher_api_key"),
    ("METACLAW_EMBEDDING_API_KEY", "skills.embedding_api_key"),
    ("METACLAW_CALENDAR_ICS_URL", "scheduler.calendar.ics_url"),
    ("METACLAW_STORE_URL", "store.url"),
];
