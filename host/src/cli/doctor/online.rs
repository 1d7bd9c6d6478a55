//! `--online`: one small request to the upstream with the key, and what
//! its answer says (the key refused, the model not listed).

use super::report::Report;
use crate::cli::runtime;
use anyhow::Result;
use metaclaw_core::config::{LoadedConfig, Provider};
use metaclaw_core::untrusted::log_line;
use metaclaw_wire::Obj;
use metaclaw_wire::recorded::{ErrorBody, lenient};
use serde::Deserialize;
use serde_json::Value;
use std::time::Duration;

/// How long `--online` waits for the upstream (connect and answer).
const ONLINE_TIMEOUT: Duration = Duration::from_secs(5);

/// One small request with the key: `GET /models` (OpenRouter lists its
/// models to anyone, so there it is `GET /key`, which needs a valid one).
pub(super) fn check_upstream_online(report: &mut Report, loaded: &LoadedConfig) -> Result<()> {
    let base = loaded.api_base();
    let Some(upstream) = upstream_or_report(report, loaded, &base) else {
        return Ok(());
    };
    let path = if loaded.config.llm.provider == Provider::Openrouter {
        "/key"
    } else {
        "/models"
    };
    let answer = runtime()?.block_on(async {
        tokio::time::timeout(ONLINE_TIMEOUT, async {
            let response = upstream.get_within(path, ONLINE_TIMEOUT).await?;
            let status = response.status();
            let body = response.bytes().await.unwrap_or_default();
            Ok::<_, metaclaw_core::error::ApiError>((status, body))
        })
        .await
    });
    let url = format!("{base}{path}");
    let (status, body) = match answer {
        Err(_) | Ok(Err(metaclaw_core::error::ApiError::UpstreamTimeout { .. })) => {
            report.error(
                "online",
                format!(
                    "{url} did not answer within {} s",
                    ONLINE_TIMEOUT.as_secs()
                ),
                "check llm.api_base and the network between here and the upstream (a proxy or firewall?)",
            );
            return Ok(());
        }
        Ok(Err(e)) => {
            report.error(
                "online",
                log_line(&e.to_string(), 300),
                "check llm.api_base (`metaclaw config get llm.api_base`) and that the upstream is up",
            );
            return Ok(());
        }
        Ok(Ok(answer)) => answer,
    };
    Answer {
        url: &url,
        path,
        status,
        body: &body,
    }
    .report(report, loaded);
    Ok(())
}

/// The upstream client for `base`; `None`, reported, when it cannot be
/// made (no CA certificates, say).
fn upstream_or_report(
    report: &mut Report,
    loaded: &LoadedConfig,
    base: &str,
) -> Option<metaclaw_core::proxy::upstream::Upstream> {
    match metaclaw_core::proxy::upstream::Upstream::new(loaded, base.to_string()) {
        Ok(u) => Some(u),
        Err(e) => {
            match e.downcast_ref::<metaclaw_core::http::ClientError>() {
                Some(metaclaw_core::http::ClientError::NoCaCertificates { problem, fix }) => {
                    report.error("online", problem.clone(), fix.clone());
                }
                _ => report.error(
                    "online",
                    format!("{e:#}"),
                    "correct the key (`metaclaw setup --api-key-env VAR`)",
                ),
            }
            None
        }
    }
}

/// The upstream's answer to `GET {url}`.
struct Answer<'a> {
    url: &'a str,
    /// `/models` or `/key`.
    path: &'a str,
    status: reqwest::StatusCode,
    body: &'a [u8],
}

impl Answer<'_> {
    /// What the answer says of the key and the model, in `report`.
    fn report(&self, report: &mut Report, loaded: &LoadedConfig) {
        let Self { url, status, .. } = *self;
        let key_configured = loaded.config.llm.api_key.is_some();
        let detail = error_detail(self.body);
        match status.as_u16() {
            200..=299 => self.report_success(report, loaded, key_configured),
            401 | 403 if key_configured => report.error(
                "online",
                format!("{url} refused the key: {status}{detail}"),
                match loaded.secret_sources.get("llm.api_key") {
                    Some(var) => format!("put a valid key for this upstream in ${var}"),
                    None => "put a valid key for this upstream in llm.api_key, or better an environment variable (`metaclaw setup --api-key-env VAR`)".to_string(),
                },
            ),
            401 | 403 => report.warning(
                "online",
                format!("{url} wants a key: {status}{detail}; none is configured, so only the agent's own key can work"),
                "give metaclaw the key with `metaclaw setup --api-key-env VAR`",
            ),
            404 => report.warning(
                "online",
                format!("{url} answered {status}: the upstream is reachable, but the key was not checked"),
                "check llm.api_base: it is the API's base URL, which usually ends in /v1",
            ),
            _ => report.error(
                "online",
                format!("{url} answered {status}{detail}"),
                "check llm.api_base and the provider's status page",
            ),
        }
    }

    /// A 2xx: fine, unless the model list leaves out the configured model.
    fn report_success(&self, report: &mut Report, loaded: &LoadedConfig, key_configured: bool) {
        let Self { url, status, .. } = *self;
        let listed = model_listed(self.body, loaded.config.llm.model_id.trim());
        match (self.path, listed) {
            ("/models", Some(false)) => report.warning(
                "online",
                format!(
                    "{url} answered {status} with the key, but does not list model {}",
                    loaded.config.llm.model_id.trim()
                ),
                format!(
                    "pick a model the upstream lists (GET {url}) and `metaclaw config set llm.model_id ID`"
                ),
            ),
            _ => report.ok(
                "online",
                format!(
                    "{url} answered {status}{}",
                    if key_configured { " with the key" } else { "" }
                ),
            ),
        }
    }
}

/// `: message` from an OpenAI- or Anthropic-style error body, if any.
fn error_detail(body: &[u8]) -> String {
    /// `{"error": {"message"}}`, or a bare `{"message"}`.
    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct Refusal {
        error: Obj<ErrorBody>,
        #[serde(deserialize_with = "lenient")]
        message: Option<String>,
    }
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return String::new();
    };
    let refusal = Obj::<Refusal>::read(&value).unwrap_or_default();
    match refusal.error.0.and_then(|e| e.message).or(refusal.message) {
        Some(m) => format!(" ({})", log_line(&m, 200)),
        None => String::new(),
    }
}

/// Whether a model list (`{"data": [{"id": …}]}`) names `model`; `None`
/// when the body is not such a list or no model is configured.
fn model_listed(body: &[u8], model: &str) -> Option<bool> {
    /// Each model none unless an object; its id none unless a string.
    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct ModelList {
        #[serde(deserialize_with = "lenient")]
        data: Option<Vec<Obj<Listed>>>,
    }
    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct Listed {
        #[serde(deserialize_with = "lenient")]
        id: Option<String>,
    }
    if model.is_empty() {
        return None;
    }
    let value: Value = serde_json::from_slice(body).ok()?;
    let ids: Vec<String> = Obj::<ModelList>::read(&value)?
        .data?
        .into_iter()
        .filter_map(|m| m.0?.id)
        .collect();
    if ids.is_empty() {
        return None;
    }
    Some(ids.iter().any(|id| id == model))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_lists_and_error_bodies() {
        let list = br#"{"object":"list","data":[{"id":"gpt-4o"},{"id":"echo"}]}"#;
        assert_eq!(model_listed(list, "echo"), Some(true));
        assert_eq!(model_listed(list, "gpt-5"), Some(false));
        assert_eq!(model_listed(list, ""), None);
        assert_eq!(model_listed(b"{}", "echo"), None);
        assert_eq!(
            error_detail(br#"{"error":{"message":"Incorrect API key\nprovided"}}"#),
            " (Incorrect API key\\nprovided)"
        );
        assert_eq!(error_detail(b"<html>"), "");
    }
}
