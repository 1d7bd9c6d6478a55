//! The service's answers, typed: each read once into what metaclaw uses of
//! it. A field missing where the protocol promises one is a protocol
//! error naming the call (`Reply::decode`); one the protocol leaves
//! optional has its documented default.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

/// `client/config`: how the service wants request bodies.
#[derive(Deserialize)]
pub(super) struct ClientConfig {
    /// Compress `forward_backward`'s protobuf body.
    #[serde(default)]
    pub proto_compress_fwdbwd: bool,
    /// `false`: the service reads JSON bodies only (SDKs 0.23–0.24).
    #[serde(default = "yes")]
    pub proto_write_fwdbwd: bool,
}

fn yes() -> bool {
    true
}

/// `get_server_capabilities`.
#[derive(Deserialize)]
pub(super) struct Capabilities {
    #[serde(default)]
    pub supported_models: Vec<OfferedModel>,
}

#[derive(Deserialize)]
pub(super) struct OfferedModel {
    pub model_name: Option<String>,
    /// The name some servers give instead of `model_name`.
    pub model_id: Option<String>,
    #[serde(default = "yes")]
    pub trainable: bool,
}

impl OfferedModel {
    pub fn name(&self) -> Option<&str> {
        self.model_name.as_deref().or(self.model_id.as_deref())
    }
}

/// `create_session`.
#[derive(Deserialize)]
pub(super) struct SessionCreated {
    pub session_id: String,
}

/// `create_model`'s result.
#[derive(Deserialize)]
pub(super) struct ModelCreated {
    pub model_id: String,
}

/// `create_sampling_session`, and `save_weights_for_sampler` without a
/// name.
#[derive(Deserialize)]
pub(super) struct SamplerCreated {
    pub sampling_session_id: String,
}

/// A save's result.
#[derive(Deserialize)]
pub(super) struct Saved {
    pub path: String,
}

/// `training_runs/{id}/checkpoints`.
#[derive(Deserialize)]
pub(super) struct Checkpoints {
    #[serde(default)]
    pub checkpoints: Vec<ListedCheckpoint>,
}

#[derive(Deserialize)]
pub(super) struct ListedCheckpoint {
    #[serde(default)]
    pub checkpoint_id: String,
    #[serde(default)]
    pub checkpoint_type: String,
    #[serde(default)]
    pub tinker_path: String,
}

/// `optim_step`'s result: its metrics, a number each (one that is not a
/// number is kept as NaN, so a reader sees it was there).
#[derive(Deserialize)]
pub(super) struct OptimStepped {
    #[serde(default)]
    pub metrics: BTreeMap<String, Value>,
}

impl OptimStepped {
    pub fn metrics(self) -> BTreeMap<String, f64> {
        self.metrics
            .into_iter()
            .map(|(k, v)| (k, v.as_f64().unwrap_or(f64::NAN)))
            .collect()
    }
}

/// A request accepted: its future's id (a string; some servers send a
/// number).
#[derive(Deserialize)]
pub(super) struct Accepted {
    pub request_id: RequestId,
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RequestId {
    Text(String),
    Number(serde_json::Number),
}

impl RequestId {
    pub fn into_string(self) -> String {
        match self {
            Self::Text(s) => s,
            Self::Number(n) => n.to_string(),
        }
    }
}

/// A polled future, as far as polling reads it: still running, only its
/// metadata ready, failed, or done (the rest of the body is the result).
#[derive(Deserialize)]
pub(super) struct Polled {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub status: Option<String>,
    #[serde(default)]
    pub error: Option<Value>,
}

impl Polled {
    pub fn try_again(&self) -> bool {
        self.kind.as_deref() == Some("try_again")
    }

    pub fn metadata_only(&self) -> bool {
        self.status.as_deref() == Some("complete_metadata")
    }

    pub fn failed(&self) -> bool {
        self.error.as_ref().is_some_and(|e| !e.is_null())
            || self.kind.as_deref() == Some("request_failed")
    }
}

/// The server's error body: FastAPI's `{"detail"}` (a string or validation
/// errors) or a future's `{"error", "category"}`.
#[derive(Deserialize, Default)]
pub(super) struct Failure {
    #[serde(default)]
    pub detail: Value,
    #[serde(default)]
    pub error: Value,
    pub category: Option<String>,
}
