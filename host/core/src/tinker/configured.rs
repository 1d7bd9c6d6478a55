//! The bridge as the config sets it up: the original's keys
//! (`rl.tinker_base_url`, `rl.tinker_api_key` / `$TINKER_API_KEY`,
//! `rl.model`, `rl.lora_rank`, `rl.resume_from_ckpt`) and
//! `rl.tinker_dialect`.

use super::run::RunSpec;
use super::session::{Dialect, ServiceSettings};
use super::types::LoraConfig;
use crate::config::{Config, TinkerDialect};

/// Hosted Tinker, where the SDK goes when nothing says otherwise.
pub const HOSTED: &str = "https://tinker.thinkingmachines.dev/services/tinker-prod";
/// The original's last resort for `rl.model`.
const DEFAULT_MODEL: &str = "Qwen/Qwen3-4B";

/// Where the service is: `rl.tinker_base_url`, else `$TINKER_BASE_URL`
/// (the SDK's variable), else hosted Tinker.
pub fn base_url(config: &Config, env: &dyn Fn(&str) -> Option<String>) -> String {
    let configured = config.rl.tinker_base_url.trim();
    if !configured.is_empty() {
        return configured.to_string();
    }
    env("TINKER_BASE_URL")
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| HOSTED.to_string())
}

/// The client's settings (the key comes from the config, where
/// `$TINKER_API_KEY` has already put it).
pub fn settings(config: &Config, env: &dyn Fn(&str) -> Option<String>) -> ServiceSettings {
    let mut settings =
        ServiceSettings::new(&base_url(config, env), config.rl.tinker_api_key.clone());
    settings.dialect = match config.rl.tinker_dialect {
        TinkerDialect::Auto => None,
        TinkerDialect::Protobuf => Some(Dialect::Protobuf),
        TinkerDialect::Json => Some(Dialect::Json),
    };
    settings
}

/// The model trained: `rl.model`, else `llm.model_id`, else the original's
/// default.
pub fn base_model(config: &Config) -> String {
    [config.rl.model.trim(), config.llm.model_id.trim()]
        .into_iter()
        .find(|m| !m.is_empty())
        .unwrap_or(DEFAULT_MODEL)
        .to_string()
}

/// The run the config describes: the shared run (`agent` ''), or an
/// agent's own (its config is `Config::for_agent`'s).
pub fn run_spec(config: &Config, agent: &str, save_every: u32) -> RunSpec {
    let resume = config.rl.resume_from_ckpt.trim();
    RunSpec {
        base_model: base_model(config),
        agent: agent.to_string(),
        lora: match config.rl.lora_seed {
            Some(seed) => LoraConfig::new(config.rl.lora_rank).seeded(seed),
            None => LoraConfig::new(config.rl.lora_rank),
        },
        resume_from: (!resume.is_empty()).then(|| resume.to_string()),
        save_every,
    }
}
