//! `metaclaw tinker check`: can metaclaw train on this service? It
//! connects (the key is checked by the service's first answer), reads its
//! flags and models, tells which `forward_backward` dialect it reads, and
//! whether the model to train is offered and trainable. Each failure is
//! said with what to change.

use serde::Serialize;
use serde_json::Value;

use super::Error;
use super::session::{Dialect, Service, ServiceSettings};

/// What the check found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub url: String,
    pub key_set: bool,
    /// The service's client flags (`client/config`).
    pub flags: Value,
    /// The dialect the service reads (`None`: it did not say).
    pub dialect: Option<Dialect>,
    /// Why: what the service answered to the probe.
    pub dialect_evidence: String,
    /// Configured explicitly (`rl.tinker_dialect`), if so.
    pub configured_dialect: Option<Dialect>,
    /// `(name, trainable)` per model offered.
    pub models: Vec<(String, bool)>,
    pub model: String,
    /// `None`: the service does not offer `model`.
    pub trainable: Option<bool>,
}

impl Report {
    /// What is wrong, with what to change; `None` when training can start.
    pub fn problem(&self) -> Option<String> {
        let offered = || {
            self.models
                .iter()
                .filter(|(_, t)| *t)
                .map(|(m, _)| m.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self.trainable {
            None => Some(format!(
                "the service does not offer `{}` (rl.model, else llm.model_id); it trains: {}. Set rl.model to one of them",
                self.model,
                offered()
            )),
            Some(false) => Some(format!(
                "the service offers `{}` for sampling only, not training; it trains: {}. Set rl.model to one of them",
                self.model,
                offered()
            )),
            Some(true) => match self.configured_dialect {
                Some(d) if self.dialect.is_some_and(|p| p != d) => Some(format!(
                    "rl.tinker_dialect is {} but the service reads {} ({}): set rl.tinker_dialect to auto",
                    d.as_str(),
                    self.dialect.map(Dialect::as_str).unwrap_or_default(),
                    self.dialect_evidence
                )),
                _ => None,
            },
        }
    }
}

/// An error of the check, turned into what the user should change.
pub fn advice(settings: &ServiceSettings, error: &Error) -> String {
    let url = &settings.base_url;
    match error {
        Error::Service {
            status: 401 | 403,
            message,
            ..
        } => {
            if settings.api_key.is_none() {
                format!(
                    "the training service at {url} wants a key ({message}): set rl.tinker_api_key or $TINKER_API_KEY"
                )
            } else {
                format!(
                    "the training service at {url} refused the key ({message}): check rl.tinker_api_key / $TINKER_API_KEY"
                )
            }
        }
        Error::Unavailable(why) => format!(
            "cannot reach a training service at {url} ({why}): check rl.tinker_base_url (or $TINKER_BASE_URL) and that the server is running"
        ),
        Error::Service {
            status: 404, call, ..
        } => format!(
            "{url} answered 404 to `{call}`: it is not a Tinker-compatible service, or the URL has a path too many (give the address without /api/v1)"
        ),
        other => format!("{other}"),
    }
}

/// Connects to the service and checks it can train `model`.
pub async fn check(settings: &ServiceSettings, model: &str) -> Result<Report, Error> {
    // Connected as `auto` would be, so the report says what the service
    // reads even where rl.tinker_dialect fixes it.
    let mut auto = settings.clone();
    auto.dialect = None;
    // A person waits for the answer: two tries, not the protocol's ten.
    auto.tries = auto.tries.min(2);
    let service = Service::connect(&auto).await?;
    let models = service.models().await?;
    let trainable = models
        .iter()
        .find(|(name, _)| name == model)
        .map(|(_, trainable)| *trainable);
    Ok(Report {
        url: service.url().to_string(),
        key_set: settings.api_key.is_some(),
        flags: service.config.clone(),
        dialect: service.dialect(),
        dialect_evidence: service.dialect_evidence.clone(),
        configured_dialect: settings.dialect,
        models,
        model: model.to_string(),
        trainable,
    })
}
