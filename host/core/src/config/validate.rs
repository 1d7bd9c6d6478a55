//! What the types cannot check: URLs, the bind address, limits. (Plugin
//! names, grants, hosts, origins and modes are typed: a bad one fails to
//! parse, naming its key.)

use super::{Config, ConfigError, parse_host};

/// Checks a parsed config; the error names the key to fix.
pub fn validate(config: &Config) -> Result<(), ConfigError> {
    urls_and_skills(config)?;
    agents(config)?;
    serving(config)?;
    plugins(config)?;
    learning(config)?;
    canary(config)?;
    training(config)?;
    store_and_auth(config)?;
    Ok(())
}

/// Base URLs and the skills' settings.
fn urls_and_skills(config: &Config) -> Result<(), ConfigError> {
    // Base URLs stay strings (an empty one means "the default", and the
    // code joins paths to them as text) but must be http(s) URLs.
    http_url("llm.api_base", &config.llm.api_base, true)?;
    for (i, fallback) in config.llm.fallbacks.iter().enumerate() {
        http_url(
            &format!("llm.fallbacks[{i}].api_base"),
            &fallback.api_base,
            false,
        )?;
    }
    if let Some(base) = &config.skills.embedding_api_base {
        http_url("skills.embedding_api_base", base, false)?;
    }
    for pattern in &config.skills.untrusted {
        let chars = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '*';
        if pattern.is_empty() || !pattern.chars().all(chars) {
            return Err(invalid(
                "skills.untrusted",
                format!(
                    "`{pattern}` is not a skill-name pattern: lowercase letters, digits, `-` and `*` (any run of characters), e.g. `arc-*`"
                ),
            ));
        }
    }
    let poll = config.skills.workshop.poll_every.get();
    if poll < std::time::Duration::from_secs(1) || poll > std::time::Duration::from_secs(86_400) {
        return Err(invalid(
            "skills.workshop.poll_every",
            "must be between 1s and 1d".into(),
        ));
    }
    if config.skills.workshop.command.trim().is_empty() {
        return Err(invalid(
            "skills.workshop.command",
            "name OpenClaw's CLI (`openclaw`, or its path)".into(),
        ));
    }
    if let Err(e) = crate::agent_id::AgentId::parse(&config.skills.workshop.agent) {
        return Err(invalid("skills.workshop.agent", e.to_string()));
    }
    http_url("rl.prm_url", &config.rl.prm_url, true)?;
    http_url("rl.evolver_api_base", &config.rl.evolver_api_base, true)?;
    Ok(())
}

/// Each agent's own settings (`agents.<id>`).
fn agents(config: &Config) -> Result<(), ConfigError> {
    for agent in config.agents.keys() {
        let key = format!("agents.{agent}");
        match crate::agent_id::AgentId::parse(agent) {
            Ok(id) if id.as_str() == agent => {}
            Ok(id) => {
                return Err(invalid(
                    &key,
                    format!("agent ids are lowercase: write `{id}`"),
                ));
            }
            Err(e) => return Err(invalid(&key, e.to_string())),
        }
        config
            .for_agent(agent)
            .map_err(|e| invalid(&key, e.to_string()))?;
    }
    Ok(())
}

/// Where and how the proxy serves: its address, logs, bodies, timeouts.
fn serving(config: &Config) -> Result<(), ConfigError> {
    if parse_host(&config.proxy.host).is_none() {
        return Err(invalid(
            "proxy.host",
            format!(
                "{:?} is not an IP address (use 127.0.0.1 or ::1)",
                config.proxy.host
            ),
        ));
    }
    if !(1..=65536).contains(&config.log.max_mb) {
        return Err(invalid("log.max_mb", "must be between 1 and 65536".into()));
    }
    if config.log.keep > 100 {
        return Err(invalid("log.keep", "at most 100 rotated files".into()));
    }
    if config.proxy.max_body_mb == 0 || config.proxy.max_body_mb > 4096 {
        return Err(invalid(
            "proxy.max_body_mb",
            "must be between 1 and 4096".into(),
        ));
    }
    let t = &config.proxy.timeouts;
    for (key, d) in [
        ("proxy.timeouts.connect", t.connect),
        ("proxy.timeouts.first_byte", t.first_byte),
        ("proxy.timeouts.between_chunks", t.between_chunks),
        ("proxy.timeouts.client_body", t.client_body),
        ("proxy.timeouts.client_header", t.client_header),
        ("sessions.idle_timeout", config.sessions.idle_timeout),
    ] {
        if d.get().is_zero() {
            return Err(invalid(key, "must be longer than zero".into()));
        }
    }
    Ok(())
}

/// The plugin host's timeouts, budgets and limits.
fn plugins(config: &Config) -> Result<(), ConfigError> {
    for (key, d) in [
        (
            "plugins.timeouts.retriever",
            config.plugins.timeouts.retriever,
        ),
        ("plugins.timeouts.scorer", config.plugins.timeouts.scorer),
        ("plugins.timeouts.evolver", config.plugins.timeouts.evolver),
        ("plugins.timeouts.skill", config.plugins.timeouts.skill),
        ("plugins.timeouts.index", config.plugins.timeouts.index),
        ("plugins.timeouts.load", config.plugins.timeouts.load),
        ("plugins.timeouts.compile", config.plugins.timeouts.compile),
        ("plugins.watch_interval", config.plugins.watch_interval),
    ] {
        if d.get().is_zero() || d.get() > std::time::Duration::from_secs(600) {
            return Err(invalid(key, "must be between 1ms and 10m".into()));
        }
    }
    let budget = config.plugins.turn_budget.get();
    let retriever = config.plugins.timeouts.retriever.get();
    if budget < retriever || budget > std::time::Duration::from_secs(60) {
        // Shorter than one retriever call, retrieval would be cut while
        // within its own deadline.
        return Err(invalid(
            "plugins.turn_budget",
            format!("must be between plugins.timeouts.retriever ({retriever:?}) and 60s"),
        ));
    }
    if !(1..=4096).contains(&config.plugins.memory_mb) {
        return Err(invalid(
            "plugins.memory_mb",
            "must be between 1 and 4096".into(),
        ));
    }
    if !(16..=1 << 20).contains(&config.plugins.total_memory_mb) {
        return Err(invalid(
            "plugins.total_memory_mb",
            "must be between 16 and 1048576".into(),
        ));
    }
    if !(1..=64).contains(&config.plugins.max_compiles) {
        return Err(invalid(
            "plugins.max_compiles",
            "must be between 1 and 64".into(),
        ));
    }
    for (key, max, value) in [
        ("plugins.max_file_mb", 4096, config.plugins.max_file_mb),
        ("plugins.max_call_mb", 1024, config.plugins.max_call_mb),
    ] {
        if !(1..=max).contains(&value) {
            return Err(invalid(key, format!("must be between 1 and {max}")));
        }
    }
    let p = &config.plugins;
    if !(1..=10_000).contains(&p.failure_window) {
        return Err(invalid(
            "plugins.failure_window",
            "must be between 1 and 10000 calls".into(),
        ));
    }
    if !(p.max_failure_rate > 0.0 && p.max_failure_rate <= 1.0) {
        return Err(invalid(
            "plugins.max_failure_rate",
            "must be above 0 and at most 1 (1: never disabled by its rate)".into(),
        ));
    }
    for (key, max, value) in [
        (
            "plugins.embed_requests_per_hour",
            100_000_000,
            p.embed_requests_per_hour,
        ),
        ("plugins.embed_mb_per_hour", 1 << 20, p.embed_mb_per_hour),
    ] {
        if value > max {
            return Err(invalid(
                key,
                format!("must be at most {max} (0: plugins may embed only what is cached)"),
            ));
        }
    }
    Ok(())
}

/// Learning: jobs, the judge, the evolver.
fn learning(config: &Config) -> Result<(), ConfigError> {
    let learning = &config.learning;
    if !(1..=64).contains(&learning.concurrency) {
        return Err(invalid(
            "learning.concurrency",
            "must be between 1 and 64".into(),
        ));
    }
    if !(1..=20).contains(&learning.max_drafts) {
        return Err(invalid(
            "learning.max_drafts",
            "must be between 1 and 20".into(),
        ));
    }
    if !(1_000..=1_000_000).contains(&learning.transcript_chars) {
        return Err(invalid(
            "learning.transcript_chars",
            "must be between 1000 and 1000000".into(),
        ));
    }
    if !(0.0..=2.0).contains(&learning.judge_temperature) {
        return Err(invalid(
            "learning.judge_temperature",
            "must be between 0 and 2".into(),
        ));
    }
    if learning.llm_timeout.get().is_zero() {
        return Err(invalid(
            "learning.llm_timeout",
            "must be longer than zero".into(),
        ));
    }
    Ok(())
}

/// The canaries' sequential test.
fn canary(config: &Config) -> Result<(), ConfigError> {
    let canary = &config.canary;
    if !(canary.share > 0.0 && canary.share <= 0.5) {
        return Err(invalid(
            "canary.share",
            "must be above 0 and at most 0.5 (the share of sessions in each of the two arms)"
                .into(),
        ));
    }
    if !(canary.delta > 0.0 && canary.delta < 0.5) {
        return Err(invalid(
            "canary.delta",
            "must be above 0 and below 0.5 (the bound on a wrong promotion)".into(),
        ));
    }
    if !(1..=10_000).contains(&canary.min_sessions) {
        return Err(invalid(
            "canary.min_sessions",
            "must be between 1 and 10000".into(),
        ));
    }
    if canary.max_duration.get().is_zero() {
        return Err(invalid(
            "canary.max_duration",
            "must be longer than zero".into(),
        ));
    }
    Ok(())
}

/// Training (rl) and distillation (opd).
fn training(config: &Config) -> Result<(), ConfigError> {
    if config.rl.prm_m > 15 {
        return Err(invalid("rl.prm_m", "at most 15 votes per turn".into()));
    }
    if config.rl.sample_timeout.get().is_zero() {
        return Err(invalid(
            "rl.sample_timeout",
            "must be longer than zero".into(),
        ));
    }
    if config.rl.loss().is_none() {
        return Err(invalid(
            "rl.loss_fn",
            "one of importance_sampling, ppo, cispo".into(),
        ));
    }
    if !(0.0..=1.0).contains(&config.rl.baseline_decay) || config.rl.baseline_decay == 0.0 {
        return Err(invalid(
            "rl.baseline_decay",
            "must be above 0 and at most 1".into(),
        ));
    }
    if config.rl.batch_size == 0 {
        return Err(invalid("rl.batch_size", "must be at least 1".into()));
    }
    if !(4..=1000).contains(&config.rl.health_window) {
        return Err(invalid(
            "rl.health_window",
            "the steps the learning-health verdict looks back over: from 4 to 1000".into(),
        ));
    }
    if !(1..=16).contains(&config.rl.group_size) {
        return Err(invalid(
            "rl.group_size",
            "answers sampled per turn: from 1 (no groups) to 16".into(),
        ));
    }
    if let Some(low) = config.rl.clip_low_threshold
        && !(low.is_finite() && low > 0.0 && low < 1.0)
    {
        return Err(invalid(
            "rl.clip_low_threshold",
            "the lower bound of the importance ratio: above 0 and below 1 (for example 0.8)".into(),
        ));
    }
    if let Some(high) = config.rl.clip_high_threshold
        && !(high.is_finite() && high > 1.0)
    {
        return Err(invalid(
            "rl.clip_high_threshold",
            "the upper bound of the importance ratio: above 1 (for example 1.2)".into(),
        ));
    }
    if config.opd.enabled {
        if config.opd.teacher_url.trim().is_empty() || config.opd.teacher_model.trim().is_empty() {
            return Err(invalid(
                "opd.enabled",
                "distillation needs opd.teacher_url (an OpenAI-compatible /v1 base) and opd.teacher_model".into(),
            ));
        }
        http_url("opd.teacher_url", &config.opd.teacher_url, false)?;
        if !(config.opd.kl_penalty_coef.is_finite() && config.opd.kl_penalty_coef > 0.0) {
            return Err(invalid(
                "opd.kl_penalty_coef",
                "must be a number above 0".into(),
            ));
        }
    }
    if config.rl.max_new_tokens == 0 {
        return Err(invalid("rl.max_new_tokens", "must be at least 1".into()));
    }
    Ok(())
}

/// The store's queue and the proxy's key.
fn store_and_auth(config: &Config) -> Result<(), ConfigError> {
    if config.store.queue_capacity < 16 {
        return Err(invalid(
            "store.queue_capacity",
            "must be at least 16".into(),
        ));
    }
    if let Some(key) = &config.proxy.api_key
        && key.len() < 8
    {
        return Err(invalid(
            "proxy.api_key",
            "must be at least 8 characters".into(),
        ));
    }
    Ok(())
}

/// The error for `key`.
fn invalid(key: &str, message: String) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        message,
    }
}

/// `text` is an http(s) URL with a host; empty is fine where `may_be_empty`
/// (the key then defaults to another).
fn http_url(key: &str, text: &str, may_be_empty: bool) -> Result<(), ConfigError> {
    let text = text.trim();
    if may_be_empty && text.is_empty() {
        return Ok(());
    }
    match reqwest::Url::parse(text) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => Ok(()),
        _ => Err(ConfigError::Invalid {
            key: key.into(),
            message: format!("{text:?} is not an http(s) URL (example: https://api.openai.com/v1)"),
        }),
    }
}
