//! The original MetaClaw's sections that metaclaw accepts so its configs
//! load: `rl` (whose judge, evolver and Tinker keys are used; the training
//! keys are not yet), `opd`, `scheduler`, `memory`, `wechat` and `openrouter`.
//! Which of their keys do nothing in this version, and why: `inert`.

use serde::{Deserialize, Serialize};

use super::duration::Dur;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct RlConfig {
    pub enabled: bool,
    pub backend: String,
    pub model: String,
    pub tinker_api_key: Option<String>,
    pub api_key: Option<String>,
    pub base_url: String,
    pub tinker_base_url: String,
    /// How `forward_backward` is sent: `auto` (protobuf, JSON when the
    /// service refuses it), `protobuf` or `json`.
    pub tinker_dialect: TinkerDialect,
    pub prm_provider: String,
    pub prm_url: String,
    pub prm_model: String,
    pub prm_api_key: Option<String>,
    pub prm_m: u32,
    pub lora_rank: u32,
    /// The seed of a new LoRA's initialisation (unset: the service picks
    /// one at random), for runs that repeat exactly.
    pub lora_seed: Option<u64>,
    pub batch_size: u32,
    pub learning_rate: f64,
    pub loss_fn: String,
    pub resume_from_ckpt: String,
    pub manual_train_trigger: bool,
    pub evolver_provider: String,
    pub evolver_api_base: String,
    pub evolver_api_key: Option<String>,
    pub evolver_model: String,
    // metaclaw's own keys for serving from the trained model (W2-E).
    /// When the student cannot answer (sampler down, unreachable, slow),
    /// answer from `llm` instead; the turn is marked not trainable.
    pub fallback_to_llm: bool,
    /// The folder with the model's `tokenizer.json` and
    /// `tokenizer_config.json`; empty: `rl.model` when it is a folder, else
    /// the local Hugging Face cache.
    pub tokenizer_path: String,
    /// Download the tokenizer files from Hugging Face when they are not
    /// found locally (off: nothing is fetched without asking).
    pub download_tokenizer: bool,
    /// Serve side turns (the agent's background calls) from the student
    /// too; off: they go to `llm`.
    pub serve_side_turns: bool,
    /// The tool-call syntax the model writes: `auto` (from its chat
    /// template), `hermes` (Qwen's `<tool_call>`), `kimi_k2`, or `none`.
    pub tool_call_format: ToolCallFormat,
    /// Thinking in the chat template: `auto` (the template's default),
    /// `on` or `off` (`enable_thinking`).
    pub thinking: Thinking,
    /// The most tokens one answer of the student may have when the request
    /// sets no smaller `max_tokens`.
    pub max_new_tokens: u32,
    /// How long one sample may take before the turn falls back to `llm`.
    pub sample_timeout: Dur,
    // metaclaw's own keys for training from the student's turns (W2-F).
    /// The training state is saved every this many steps (a restart
    /// resumes from the last save; samples of later steps are trained
    /// again, none twice).
    pub save_every: u32,
    /// How fast the running reward baseline follows new rewards (0–1).
    pub baseline_decay: f64,
    /// `ppo` / `cispo`: the importance ratio's clip bounds (unset: the
    /// service's defaults).
    pub clip_low_threshold: Option<f64>,
    pub clip_high_threshold: Option<f64>,
    /// Answers sampled per main turn: 1 trains against a running baseline;
    /// more are judged alike as a group and trained group-centred (one is
    /// served).
    pub group_size: u32,
    /// Steps the learning-health verdict looks back over (at least 4; see
    /// `learn::rl::health`).
    pub health_window: u32,
    /// What a "collapsing" verdict does: `pause` training until `metaclaw
    /// train resume`, `rollback` to the last step before the fall (served
    /// and trained from), or only `warn`.
    pub on_collapse: OnCollapse,
}

impl RlConfig {
    /// `rl.loss_fn`: one of the policy-gradient losses (`cross_entropy` is
    /// for supervised data, not samples with advantages).
    pub fn loss(&self) -> Option<metaclaw_tinker::types::LossFn> {
        use metaclaw_tinker::types::LossFn;
        match self.loss_fn.trim() {
            "importance_sampling" => Some(LossFn::ImportanceSampling),
            "ppo" => Some(LossFn::Ppo),
            "cispo" => Some(LossFn::Cispo),
            _ => None,
        }
    }

    /// The loss's settings: the clip bounds `ppo` and `cispo` take, as set.
    pub fn loss_config(
        &self,
    ) -> std::collections::BTreeMap<String, metaclaw_tinker::types::LossConfig> {
        use metaclaw_tinker::types::LossConfig;
        let clipped = matches!(self.loss_fn.trim(), "ppo" | "cispo");
        [
            ("clip_low_threshold", self.clip_low_threshold),
            ("clip_high_threshold", self.clip_high_threshold),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k.to_string(), LossConfig::Number(v?))))
        .filter(|_| clipped)
        .collect()
    }
}

impl Default for RlConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            backend: "auto".into(),
            model: String::new(),
            tinker_api_key: None,
            api_key: None,
            base_url: String::new(),
            tinker_base_url: String::new(),
            tinker_dialect: TinkerDialect::Auto,
            prm_provider: String::new(),
            prm_url: String::new(),
            prm_model: String::new(),
            prm_api_key: None,
            prm_m: 3,
            lora_rank: 32,
            lora_seed: None,
            batch_size: 4,
            learning_rate: 1e-4,
            loss_fn: "importance_sampling".into(),
            resume_from_ckpt: String::new(),
            manual_train_trigger: false,
            evolver_provider: String::new(),
            evolver_api_base: String::new(),
            evolver_api_key: None,
            evolver_model: String::new(),
            fallback_to_llm: true,
            tokenizer_path: String::new(),
            download_tokenizer: false,
            serve_side_turns: true,
            tool_call_format: ToolCallFormat::Auto,
            thinking: Thinking::Auto,
            max_new_tokens: 2048,
            sample_timeout: Dur::secs(180),
            save_every: 1,
            baseline_decay: 0.1,
            clip_low_threshold: None,
            clip_high_threshold: None,
            group_size: 1,
            health_window: 8,
            on_collapse: OnCollapse::Pause,
        }
    }
}

/// `rl.tool_call_format`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallFormat {
    /// The syntax the model's chat template teaches.
    #[default]
    Auto,
    /// `<tool_call>{json}</tool_call>` (Qwen 2.5/3, Hermes).
    #[serde(alias = "qwen", alias = "qwen3")]
    Hermes,
    /// Kimi-K2's tool-call section.
    #[serde(alias = "kimi", alias = "kimi-k2")]
    KimiK2,
    /// Tool calls are not parsed: the text is the answer.
    None,
}

/// `rl.on_collapse`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnCollapse {
    /// Stop training (serving goes on) until `metaclaw train resume`.
    #[default]
    Pause,
    /// Serve and train from the last step before the fall.
    Rollback,
    /// Say so in `status` and the log; training goes on.
    Warn,
}

impl OnCollapse {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pause => "pause",
            Self::Rollback => "rollback",
            Self::Warn => "warn",
        }
    }
}

/// `rl.thinking`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Thinking {
    /// The chat template's default.
    #[default]
    Auto,
    On,
    Off,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum TinkerDialect {
    #[default]
    Auto,
    Protobuf,
    Json,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct OpdConfig {
    pub enabled: bool,
    pub teacher_url: String,
    pub teacher_model: String,
    pub teacher_api_key: Option<String>,
    pub kl_penalty_coef: f64,
}

impl Default for OpdConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            teacher_url: String::new(),
            teacher_model: String::new(),
            teacher_api_key: None,
            kl_penalty_coef: 1.0,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct SchedulerConfig {
    /// Gate training in `mode: rl` too (`auto` always is).
    pub enabled: bool,
    pub idle_threshold_minutes: u32,
    /// The sleep window, local `HH:MM` in `timezone`; an empty start turns
    /// the sleep signal off.
    pub sleep_start: String,
    pub sleep_end: String,
    /// An IANA zone (`Europe/Berlin`); empty: the machine's own.
    pub timezone: String,
    pub min_window_minutes: u32,
    /// `open` or `shut` overrides every signal (`""`: the signals decide).
    pub force: String,
    pub calendar: CalendarConfig,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            idle_threshold_minutes: 30,
            sleep_start: "23:00".into(),
            sleep_end: "07:00".into(),
            timezone: String::new(),
            min_window_minutes: 15,
            force: String::new(),
            calendar: CalendarConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct CalendarConfig {
    pub enabled: bool,
    /// The calendar's iCal address (https or webcal; a private address is
    /// a secret) or an .ics file path.
    pub ics_url: Option<String>,
    pub refresh_minutes: u32,
    pub credentials_path: String,
    pub token_path: String,
}

impl Default for CalendarConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            ics_url: None,
            refresh_minutes: 15,
            credentials_path: String::new(),
            token_path: String::new(),
        }
    }
}

/// The original's memory layer. Accepted so its configs load; metaclaw does
/// not implement it, and says so for each key a config sets (`inert`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct MemoryConfig {
    pub enabled: bool,
    pub dir: String,
    pub store_path: String,
    pub policy_path: String,
    pub telemetry_path: String,
    pub scope: String,
    pub retrieval_mode: String,
    pub use_embeddings: bool,
    pub embedding_mode: String,
    pub embedding_model: String,
    pub max_injected_units: u32,
    pub max_injected_tokens: u32,
    pub auto_extract: bool,
    pub auto_consolidate: bool,
    pub ignore_turn_type: bool,
    pub manual_trigger: bool,
    pub auto_upgrade_enabled: bool,
    pub auto_upgrade_interval_seconds: u64,
    pub auto_upgrade_require_review: bool,
    pub review_stale_after_hours: u32,
    pub sidecar_url: String,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            dir: String::new(),
            store_path: String::new(),
            policy_path: String::new(),
            telemetry_path: String::new(),
            scope: "default".into(),
            retrieval_mode: "keyword".into(),
            use_embeddings: false,
            embedding_mode: "hashing".into(),
            embedding_model: "all-MiniLM-L6-v2".into(),
            max_injected_units: 6,
            max_injected_tokens: 800,
            auto_extract: true,
            auto_consolidate: true,
            ignore_turn_type: false,
            manual_trigger: false,
            auto_upgrade_enabled: false,
            auto_upgrade_interval_seconds: 900,
            auto_upgrade_require_review: true,
            review_stale_after_hours: 72,
            sidecar_url: String::new(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default)]
pub struct WechatConfig {
    pub enabled: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default)]
pub struct OpenRouterConfig {
    pub app_name: String,
    pub route: String,
    pub fallback_models: String,
    pub data_policy: String,
}
