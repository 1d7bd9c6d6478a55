//! Provider presets: the base URL (and a suggested model) for each named
//! provider, so `llm.provider: qwen` is enough to reach DashScope.

use super::schema::Provider;

pub struct Preset {
    pub api_base: &'static str,
    pub suggested_model: &'static str,
    /// Variable conventionally holding the provider's key.
    pub key_env: &'static str,
}

pub fn preset(provider: &Provider) -> Option<Preset> {
    let (api_base, suggested_model, key_env) = match provider {
        Provider::Kimi => (
            "https://api.moonshot.cn/v1",
            "kimi-k2.5",
            "MOONSHOT_API_KEY",
        ),
        Provider::Qwen => (
            "https://dashscope.aliyuncs.com/compatible-mode/v1",
            "qwen-plus",
            "DASHSCOPE_API_KEY",
        ),
        Provider::Openai => ("https://api.openai.com/v1", "gpt-4o", "OPENAI_API_KEY"),
        Provider::Openrouter => (
            "https://openrouter.ai/api/v1",
            "google/gemini-2.5-pro",
            "OPENROUTER_API_KEY",
        ),
        Provider::Minimax => (
            "https://api.minimax.io/v1",
            "MiniMax-M2.7",
            "MINIMAX_API_KEY",
        ),
        Provider::Volcengine => (
            "https://ark.cn-beijing.volces.com/api/v3",
            "doubao-seed-1-6",
            "ARK_API_KEY",
        ),
        Provider::Novita => (
            "https://api.novita.ai/v3/openai",
            "moonshotai/kimi-k2-instruct",
            "NOVITA_API_KEY",
        ),
        Provider::Custom
        | Provider::Anthropic
        | Provider::OpenaiCodex
        | Provider::Gemini
        | Provider::Bedrock => return None,
    };
    Some(Preset {
        api_base,
        suggested_model,
        key_env,
    })
}

/// Providers `metaclaw setup` offers, in menu order.
pub const SETUP_PROVIDERS: &[(&str, Provider)] = &[
    ("openai", Provider::Openai),
    ("openrouter", Provider::Openrouter),
    ("kimi", Provider::Kimi),
    ("qwen", Provider::Qwen),
    ("minimax", Provider::Minimax),
    ("volcengine", Provider::Volcengine),
    ("novita", Provider::Novita),
    ("custom", Provider::Custom),
];

/// Providers of the original that reach the model through a vendor CLI or
/// AWS SDK rather than an HTTP API; metaclaw proxies HTTP APIs only.
pub fn unsupported_reason(provider: &Provider) -> Option<&'static str> {
    match provider {
        Provider::Anthropic | Provider::OpenaiCodex | Provider::Gemini => Some(
            "subscription (CLI) providers are not supported: use an API key with an \
             OpenAI-compatible endpoint (llm.provider: custom plus llm.api_base)",
        ),
        Provider::Bedrock => Some(
            "Bedrock is not supported directly: put an OpenAI-compatible gateway in front \
             of it and use llm.provider: custom",
        ),
        _ => None,
    }
}
