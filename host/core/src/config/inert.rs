//! Keys accepted that do nothing in this version, and why.
//!
//! metaclaw reads the original MetaClaw's `config.yaml` unchanged, so it
//! accepts keys for features it does not have (yet). A user who sets one
//! must not believe it works: [`warnings`] says so once per key the config
//! sets, naming the key, and `config set` says it when the key is written.
//! A key "is set" when the file gives it a value that asks for something
//! (not null, `""`, `[]`, `{}` or `false`: those ask for what happens
//! anyway), or an environment variable supplies it.
//!
//! Every key of the schema is in exactly one of [`INERT`] and
//! [`IMPLEMENTED`] (a test checks it). When a key starts doing something,
//! move it from `INERT` to `IMPLEMENTED` (and out of the README's table of
//! inert keys).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::{Config, LoadedConfig, Mode, get_path};

const GOOGLE_CALENDAR: &str = "the original's Google Calendar sign-in files; metaclaw reads a calendar from its iCalendar address (scheduler.calendar.ics_url) instead";
const MEMORY: &str =
    "the original's memory layer is not part of metaclaw, and no planned work adds it";
const PROVIDER: &str = "the judge and the evolver speak the upstream's API at rl.prm_url / rl.evolver_api_base (default: llm.*); there are no presets for them";
const OPENROUTER: &str = "not sent to OpenRouter by this version (only openrouter.app_name is)";

/// Accepted keys that do nothing in this version: key → why.
pub const INERT: &[(&str, &str)] = &[
    (
        "llm.auth_method",
        "the original's sign-in for subscription (CLI) providers; metaclaw authenticates with llm.api_key or llm.api_key_env, and no planned work adds it",
    ),
    (
        "llm.bedrock_region",
        "AWS Bedrock is not supported (llm.provider: bedrock is refused at start), and no planned work adds it",
    ),
    (
        "skills.evolution_every_n_turns",
        "metaclaw evolves skills when a session ends (skills.auto_evolve), not every N turns",
    ),
    (
        "rl.backend",
        "the training service is the Tinker-compatible one at rl.tinker_base_url",
    ),
    (
        "rl.api_key",
        "the original's key for other training backends; the Tinker bridge uses rl.tinker_api_key",
    ),
    (
        "rl.base_url",
        "the original's URL for other training backends; the Tinker bridge uses rl.tinker_base_url",
    ),
    ("rl.prm_provider", PROVIDER),
    ("rl.evolver_provider", PROVIDER),
    (
        "scheduler.calendar.enabled",
        "the calendar is read whenever scheduler.calendar.ics_url is set (its iCalendar address or an .ics file)",
    ),
    ("scheduler.calendar.credentials_path", GOOGLE_CALENDAR),
    ("scheduler.calendar.token_path", GOOGLE_CALENDAR),
    ("memory.enabled", MEMORY),
    ("memory.dir", MEMORY),
    ("memory.store_path", MEMORY),
    ("memory.policy_path", MEMORY),
    ("memory.telemetry_path", MEMORY),
    ("memory.scope", MEMORY),
    ("memory.retrieval_mode", MEMORY),
    ("memory.use_embeddings", MEMORY),
    ("memory.embedding_mode", MEMORY),
    ("memory.embedding_model", MEMORY),
    ("memory.max_injected_units", MEMORY),
    ("memory.max_injected_tokens", MEMORY),
    ("memory.auto_extract", MEMORY),
    ("memory.auto_consolidate", MEMORY),
    ("memory.ignore_turn_type", MEMORY),
    ("memory.manual_trigger", MEMORY),
    ("memory.auto_upgrade_enabled", MEMORY),
    ("memory.auto_upgrade_interval_seconds", MEMORY),
    ("memory.auto_upgrade_require_review", MEMORY),
    ("memory.review_stale_after_hours", MEMORY),
    ("memory.sidecar_url", MEMORY),
    (
        "wechat.enabled",
        "the WeChat bridge is not part of metaclaw, and no planned work adds it",
    ),
    ("openrouter.route", OPENROUTER),
    (
        "openrouter.fallback_models",
        "not sent to OpenRouter by this version; llm.fallbacks tries other upstreams",
    ),
    ("openrouter.data_policy", OPENROUTER),
];

/// The keys the running product reads (grep the field to see where), and
/// `mode`.
pub const IMPLEMENTED: &[&str] = &[
    "mode",
    "claw_type",
    "max_context_tokens",
    "context_window",
    "configure_openclaw",
    // The upstream (proxy::upstream; the judge and evolver default to it).
    "llm.provider",
    "llm.model_id",
    "llm.api_base",
    "llm.api_key",
    "llm.api_key_env",
    "llm.force_model",
    "llm.api_format",
    "llm.fallbacks",
    // The listener and its limits (daemon, server, proxy).
    "proxy.port",
    "proxy.host",
    "proxy.api_key",
    "proxy.allowed_hosts",
    "proxy.allowed_origins",
    "proxy.max_body_mb",
    "proxy.timeouts.connect",
    "proxy.timeouts.first_byte",
    "proxy.timeouts.between_chunks",
    "proxy.timeouts.client_body",
    "proxy.timeouts.client_header",
    "proxy.shutdown_grace",
    // Skills and retrieval (skills, embeddings).
    "skills.enabled",
    "skills.dir",
    "skills.install_builtin",
    "skills.retrieval_mode",
    "skills.top_k",
    "skills.task_specific_top_k",
    "skills.auto_evolve",
    "skills.embedding_backend",
    "skills.embedding_model_path",
    "skills.embedding_api_base",
    "skills.embedding_api_key",
    "skills.embedding_model",
    "skills.min_relevance",
    "skills.min_relative_relevance",
    "skills.component_threshold",
    "skills.outcome_weight",
    "skills.auto_retire",
    "skills.untrusted",
    "skills.deliver",
    "skills.workshop.command",
    "skills.workshop.state_dir",
    "skills.workshop.agent",
    "skills.workshop.poll_every",
    // The dashboard (ui/).
    "ui.actions",
    "ui.enabled",
    "ui.session_hours",
    // The judge and the evolver (learn::llm).
    "rl.prm_url",
    "rl.prm_model",
    "rl.prm_api_key",
    "rl.prm_m",
    "rl.evolver_api_base",
    "rl.evolver_api_key",
    "rl.evolver_model",
    // The Tinker bridge (tinker; `metaclaw tinker check | train | status`).
    "rl.model",
    "rl.tinker_base_url",
    "rl.tinker_api_key",
    "rl.tinker_dialect",
    "rl.lora_rank",
    "rl.lora_seed",
    "rl.resume_from_ckpt",
    // Serving from the trained model (policy, proxy::student) in rl/auto.
    "rl.enabled",
    "rl.fallback_to_llm",
    "rl.tokenizer_path",
    "rl.download_tokenizer",
    "rl.serve_side_turns",
    "rl.tool_call_format",
    "rl.thinking",
    "rl.max_new_tokens",
    "rl.sample_timeout",
    // Training from the student's turns (learn::rl).
    "rl.batch_size",
    "rl.learning_rate",
    "rl.loss_fn",
    "rl.manual_train_trigger",
    "rl.save_every",
    "rl.baseline_decay",
    "rl.clip_low_threshold",
    "rl.clip_high_threshold",
    "rl.group_size",
    "rl.health_window",
    "rl.on_collapse",
    "openrouter.app_name",
    "sessions.idle_timeout",
    "store.path",
    "store.url",
    "store.commit_interval",
    "store.queue_capacity",
    "log.level",
    "log.max_mb",
    "log.keep",
    // The plugin host (plugins::registry).
    "plugins.dir",
    "plugins.builtin_dir",
    "plugins.builtin",
    "plugins.retriever",
    "plugins.scorers",
    "plugins.evolvers",
    "plugins.skills",
    "plugins.grants",
    "plugins.overrides",
    "plugins.timeouts.retriever",
    "plugins.timeouts.scorer",
    "plugins.timeouts.evolver",
    "plugins.timeouts.skill",
    "plugins.timeouts.index",
    "plugins.timeouts.load",
    "plugins.timeouts.compile",
    "plugins.memory_mb",
    "plugins.total_memory_mb",
    "plugins.max_compiles",
    "plugins.max_failures",
    "plugins.failure_window",
    "plugins.max_failure_rate",
    "plugins.embed_requests_per_hour",
    "plugins.embed_mb_per_hour",
    "plugins.pool_size",
    "plugins.watch_interval",
    "plugins.turn_budget",
    "plugins.max_file_mb",
    "plugins.max_call_mb",
    "plugins.threads",
    // Distillation from a teacher in train steps (learn::rl::opd).
    "opd.enabled",
    "opd.teacher_url",
    "opd.teacher_model",
    "opd.teacher_api_key",
    "opd.kl_penalty_coef",
    // Learning from ended sessions (learn).
    "learning.enabled",
    "learning.concurrency",
    "learning.judge",
    "learning.evolve",
    "learning.judge_temperature",
    "learning.llm_timeout",
    "learning.max_drafts",
    "learning.transcript_chars",
    "learning.reward.combine",
    "learning.reward.judge_weight",
    "learning.reward.scorer_weights",
    // Canaries of evolved skills (canary, learn/canary.rs).
    "canary.skills",
    "canary.weights",
    "canary.user_skills",
    "canary.share",
    "canary.delta",
    "canary.min_sessions",
    "canary.max_duration",
    "canary.on_timeout",
    // The training scheduler (scheduler::gate; auto, or scheduler.enabled).
    "scheduler.enabled",
    "scheduler.idle_threshold_minutes",
    "scheduler.sleep_start",
    "scheduler.sleep_end",
    "scheduler.timezone",
    "scheduler.min_window_minutes",
    "scheduler.force",
    "scheduler.calendar.ics_url",
    "scheduler.calendar.refresh_minutes",
];

/// Why `key` does nothing in this version; `None` for a key that works.
pub fn why_inert(key: &str) -> Option<&'static str> {
    INERT.iter().find(|(k, _)| *k == key).map(|(_, why)| *why)
}

/// Sets the mode for this run (`start --mode`).
pub fn override_mode(loaded: &mut LoadedConfig, mode: Mode) {
    loaded.config.mode = mode;
}

/// What `config set KEY VALUE` says after writing a key that does nothing.
pub fn note_on_set(key: &str, _value: &Value) -> Option<String> {
    why_inert(key).map(|why| {
        format!("{key} is not implemented in this version, so it does nothing yet: {why}")
    })
}

/// One warning per inert key the file (`raw`) or the environment
/// (`secret_sources`: key → variable) sets, and one for an unimplemented
/// mode.
pub(super) fn warnings(
    raw: &Value,
    config: &Config,
    secret_sources: &BTreeMap<String, String>,
    path: &Path,
) -> Vec<String> {
    let mut out = Vec::new();
    let trains = config.serves_student();
    if config.scheduler.enabled && !trains {
        out.push(
            "`scheduler.enabled` is set but does nothing in `mode: skills_only`: nothing trains there".to_string(),
        );
    }
    if trains
        && config.rl.manual_train_trigger
        && (config.mode == Mode::Auto || config.scheduler.enabled)
    {
        out.push(
            "`rl.manual_train_trigger` is on, so steps run only when asked (`metaclaw train step`) and the scheduler's windows are not consulted".to_string(),
        );
    }
    let clips = config.rl.clip_low_threshold.is_some() || config.rl.clip_high_threshold.is_some();
    if clips && config.rl.loss_config().is_empty() {
        out.push(format!(
            "`rl.clip_low_threshold` / `rl.clip_high_threshold` are set but do nothing with `rl.loss_fn: {}`: only ppo and cispo clip the importance ratio",
            config.rl.loss_fn.trim()
        ));
    }
    if config.opd.enabled && config.mode == Mode::SkillsOnly {
        out.push(
            "`opd.enabled` is set but does nothing in `mode: skills_only`: distillation is part of training (mode rl or auto)".to_string(),
        );
    }
    if config.canary.user_skills && !config.canary.skills {
        out.push(
            "`canary.user_skills` is set but does nothing with `canary.skills: false`: no skill is tested before everyone gets it".to_string(),
        );
    }
    for (key, why) in INERT {
        let by = match secret_sources.get(*key) {
            Some(var) => format!("by ${var}"),
            None if get_path(raw, key).is_some_and(asks) => format!("in {}", path.display()),
            None => continue,
        };
        out.push(format!(
            "`{key}` is set {by} but is not implemented in this version, so it does nothing: {why}"
        ));
    }
    out
}

/// Whether a value asks for something: `null`, `""`, `[]`, `{}` and `false`
/// ask for what happens anyway.
fn asks(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => false,
        Value::String(s) => !s.trim().is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::config::keys::OPEN_MAPS;
    use crate::config::{known_keys, load_with_env};

    /// A key added to the schema must be declared: read by the product, or
    /// accepted and inert (and then warned about).
    #[test]
    fn every_key_is_implemented_or_listed_as_inert() {
        let mut schema: BTreeSet<String> = known_keys().into_iter().collect();
        schema.extend(OPEN_MAPS.iter().map(|k| k.to_string()));
        let inert: BTreeSet<String> = INERT.iter().map(|(k, _)| k.to_string()).collect();
        let implemented: BTreeSet<String> = IMPLEMENTED.iter().map(|k| k.to_string()).collect();
        assert_eq!(inert.len(), INERT.len(), "a key is listed twice in INERT");
        assert_eq!(
            implemented.len(),
            IMPLEMENTED.len(),
            "a key is listed twice in IMPLEMENTED"
        );
        let undeclared: Vec<_> = schema
            .iter()
            .filter(|k| !inert.contains(*k) && !implemented.contains(*k))
            .collect();
        assert!(
            undeclared.is_empty(),
            "config keys neither in IMPLEMENTED nor in INERT (host/core/src/config/inert.rs): {undeclared:?}. \
             Add each to IMPLEMENTED if the product reads it, or to INERT with why it does nothing \
             and which work implements it (and to the README's list of inert keys)"
        );
        let both: Vec<_> = inert.intersection(&implemented).collect();
        assert!(
            both.is_empty(),
            "config keys both in IMPLEMENTED and in INERT (host/core/src/config/inert.rs): {both:?}; keep each in one"
        );
        let stale: Vec<_> = inert
            .union(&implemented)
            .filter(|k| !schema.contains(*k))
            .collect();
        assert!(
            stale.is_empty(),
            "INERT or IMPLEMENTED (host/core/src/config/inert.rs) names keys the schema does not have: {stale:?}; remove them"
        );
    }

    #[test]
    fn keys_set_in_the_file_or_the_environment_are_warned_about_once_each() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(
            &path,
            "mode: madmax\nrl:\n  batch_size: 16\n  lora_rank: 16\n  enabled: false\n  resume_from_ckpt: ''\n  prm_model: judge\nscheduler:\n  calendar:\n    enabled: true\n  sleep_start: '23:00'\nmemory:\n  scope: team\nopd:\n  teacher_model: big\n",
        )
        .unwrap();
        let env = |var: &str| (var == "TINKER_API_KEY").then(|| "tk-secret-1".to_string());
        let loaded = load_with_env(&path, &env).unwrap();
        let text = loaded.warnings.join("\n");
        let about = |key: &str| {
            loaded
                .warnings
                .iter()
                .filter(|w| w.starts_with(&format!("`{key}` is set")))
                .count()
        };
        for key in ["scheduler.calendar.enabled", "memory.scope"] {
            assert_eq!(about(key), 1, "{key}: {text}");
        }
        assert!(
            text.contains("`scheduler.calendar.enabled` is set in ")
                && text.contains("not implemented in this version")
                && text.contains("ics_url"),
            "{text}"
        );
        // Unset, empty, false, defaulted, or implemented (the Tinker
        // bridge's keys, from the file or the environment): nothing.
        for key in [
            "scheduler.sleep_start",
            "rl.enabled",
            "rl.batch_size",
            "rl.resume_from_ckpt",
            "rl.prm_model",
            "rl.lora_rank",
            "rl.tinker_api_key",
            "opd.enabled",
            "opd.teacher_model",
        ] {
            assert_eq!(about(key), 0, "{key}: {text}");
        }
        assert!(!text.contains("tk-secret-1"), "{text}");
        assert_eq!(loaded.warnings.len(), 2, "{text}");

        // Nothing set: nothing said.
        std::fs::write(&path, "llm:\n  model_id: m\n").unwrap();
        assert!(load_with_env(&path, &|_| None).unwrap().warnings.is_empty());
    }

    #[test]
    fn clip_bounds_without_a_clipping_loss_are_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, "rl:\n  clip_low_threshold: 0.8\n").unwrap();
        let loaded = load_with_env(&path, &|_| None).unwrap();
        assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
        assert!(loaded.warnings[0].contains("importance_sampling"));
        std::fs::write(&path, "rl:\n  loss_fn: cispo\n  clip_low_threshold: 0.8\n").unwrap();
        assert!(load_with_env(&path, &|_| None).unwrap().warnings.is_empty());
    }

    #[test]
    fn a_scheduler_that_cannot_act_is_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(
            &path,
            "mode: auto
",
        )
        .unwrap();
        assert!(load_with_env(&path, &|_| None).unwrap().warnings.is_empty());
        std::fs::write(
            &path,
            "scheduler:
  enabled: true
",
        )
        .unwrap();
        let loaded = load_with_env(&path, &|_| None).unwrap();
        assert!(
            loaded.warnings[0].contains("skills_only"),
            "{:?}",
            loaded.warnings
        );
        std::fs::write(
            &path,
            "mode: auto
rl:
  manual_train_trigger: true
",
        )
        .unwrap();
        let loaded = load_with_env(&path, &|_| None).unwrap();
        assert!(
            loaded.warnings[0].contains("windows are not consulted"),
            "{:?}",
            loaded.warnings
        );
    }

    #[test]
    fn setting_an_inert_key_says_so() {
        let note = note_on_set("scheduler.calendar.token_path", &Value::from("t.json")).unwrap();
        assert!(
            note.contains("scheduler.calendar.token_path") && note.contains("ics_url"),
            "{note}"
        );
        assert!(note_on_set("opd.teacher_url", &Value::from("http://t/v1")).is_none());
        assert!(note_on_set("proxy.port", &Value::from(1)).is_none());
        assert!(note_on_set("scheduler.sleep_start", &Value::from("23:00")).is_none());
        assert!(note_on_set("mode", &Value::from("auto")).is_none());
    }
}
