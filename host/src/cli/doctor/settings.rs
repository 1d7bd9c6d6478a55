//! The config file and the upstream settings in it, checked without
//! contacting anyone.

use super::report::Report;
use metaclaw_core::config::{self, LoadedConfig, presets};
use std::path::Path;

pub(super) fn check_config(report: &mut Report, path: &Path) -> Option<LoadedConfig> {
    match config::load(path) {
        Err(e) => {
            let shown = path.display().to_string();
            let message = e.to_string();
            let message = if message.contains(&shown) {
                message
            } else {
                format!("{shown}: {message}")
            };
            report.error(
                "config",
                message,
                format!(
                    "edit {shown}, or set the value with `metaclaw config set KEY VALUE` (it checks values before writing)"
                ),
            );
            None
        }
        Ok(loaded) => {
            if !loaded.file_exists {
                report.warning(
                    "config",
                    format!(
                        "{} does not exist: every value is a default",
                        path.display()
                    ),
                    "run `metaclaw setup` to choose the upstream, key and agent",
                );
            } else if loaded.warnings.is_empty() {
                report.ok("config", format!("{} is valid", path.display()));
            } else {
                report.warning(
                    "config",
                    format!("{}: {}", path.display(), loaded.warnings.join("; ")),
                    "correct or remove the keys named (`metaclaw config show` prints what is in effect)",
                );
            }
            Some(loaded)
        }
    }
}

/// The upstream's base URL, model and key source, without contacting it.
/// `false` when there is nothing to contact.
pub(super) fn check_upstream_settings(report: &mut Report, loaded: &LoadedConfig) -> bool {
    let config = &loaded.config;
    let llm = &config.llm;
    let provider = crate::cli::setup::config_name(&llm.provider);
    if let Some(reason) = presets::unsupported_reason(&llm.provider) {
        report.error(
            "upstream",
            format!("llm.provider {provider}: {reason}"),
            "choose an API provider with `metaclaw setup --provider …`",
        );
        return false;
    }
    let base = loaded.api_base();
    if base.is_empty() {
        report.error(
            "upstream",
            "no upstream: llm.api_base is empty and llm.provider has no preset",
            "run `metaclaw setup --provider openai --api-key-env OPENAI_API_KEY`, or `metaclaw config set llm.api_base https://…/v1`",
        );
        return false;
    }
    let origin = if llm.api_base.trim().is_empty() {
        format!(" (preset {provider})")
    } else {
        String::new()
    };
    let key_var = llm.api_key_env.as_deref().filter(|v| !v.is_empty());
    let key = match (
        &llm.api_key,
        loaded.secret_sources.get("llm.api_key"),
        key_var,
    ) {
        (Some(_), Some(var), _) => format!("key from ${var}"),
        (Some(_), None, _) => "key stored in the config file".to_string(),
        (None, _, Some(var)) => {
            report.error(
                "upstream",
                format!("llm.api_key_env names {var}, which is not set (or is empty) here"),
                format!("export {var}=<your key> in the shell that runs `metaclaw start`"),
            );
            return false;
        }
        (None, _, None) if config.proxy.api_key.is_some() => {
            report.warning(
                "upstream",
                format!("{base}{origin}: no key configured, and proxy.api_key stops the agent's own key from being passed on"),
                "set the upstream's key with `metaclaw setup --api-key-env VAR`",
            );
            return true;
        }
        (None, _, None) => "no key: the agent's own key is passed on".to_string(),
    };
    if llm.model_id.trim().is_empty() {
        report.warning(
            "upstream",
            format!("{base}{origin}, {key}; llm.model_id is empty: requests must name their model, and no agent can be wired"),
            "`metaclaw config set llm.model_id <model id>`",
        );
    } else {
        report.ok(
            "upstream",
            format!("{base}{origin}, model {}, {key}", llm.model_id.trim()),
        );
    }
    true
}
