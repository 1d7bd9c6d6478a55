//! The service and its sessions. The service's client config chooses how
//! `forward_backward` bodies go (`proto_compress_fwdbwd`: zstd; the legacy
//! `proto_write_fwdbwd: false`: JSON). A session owns its training models
//! and samplers and must hear from the client every 10 s; a 410 to a
//! heartbeat means the service ended it (skyrl does after 300 s of
//! silence), and every later call on it says so.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::work::OwnedTask;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use metaclaw_tinker::types::{LoraConfig, WeightsInfo};

use super::Error;
use super::future::{Kind, submit_and_wait};
use super::model::{Sampler, TrainingModel};
use super::replies::{Capabilities, ClientConfig, ModelCreated, SamplerCreated, SessionCreated};
use super::transport::{Body, Transport};
use crate::http::{ClientSpec, Purpose};

/// What metaclaw calls itself where the protocol asks for an SDK version.
const SDK_VERSION: &str = concat!("metaclaw-", env!("CARGO_PKG_VERSION"));
/// The protocol's heartbeat period.
const HEARTBEAT: Duration = Duration::from_secs(10);
/// The protocol's billing pause (402): tried again every 5 s for an hour.
const BILLING: (Duration, Duration) = (Duration::from_secs(5), Duration::from_secs(3600));

/// Which body `forward_backward` is sent as: protobuf (current SDKs and
/// hosted Tinker) or JSON (skyrl 0.3, older servers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    Protobuf,
    Json,
}

impl Dialect {
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Protobuf => "protobuf",
            Dialect::Json => "json",
        }
    }
}

/// The dialect a service's clients use, shared by its sessions and models:
/// set at connect, or learnt from the first `forward_backward`.
#[derive(Clone)]
pub(super) struct KnownDialect(Arc<std::sync::Mutex<Option<Dialect>>>);

impl KnownDialect {
    fn new(dialect: Option<Dialect>) -> Self {
        Self(Arc::new(std::sync::Mutex::new(dialect)))
    }

    pub(super) fn get(&self) -> Option<Dialect> {
        self.0.lock().map(|d| *d).unwrap_or(None)
    }

    pub(super) fn set(&self, dialect: Dialect) {
        if let Ok(mut d) = self.0.lock() {
            *d = Some(dialect);
        }
    }
}

/// Where the service is and how to reach it.
#[derive(Clone)]
pub struct ServiceSettings {
    /// Without `/api/v1`; a trailing `/` is ignored.
    pub base_url: String,
    /// Sent as `X-API-Key`; never logged.
    pub api_key: Option<String>,
    /// `None`: as the service's client config says (JSON if it sets the
    /// legacy `proto_write_fwdbwd: false`), else protobuf, falling back to
    /// JSON when the server refuses it.
    pub dialect: Option<Dialect>,
    /// The first wait between retries (the protocol's 0.5 s; tests use less).
    pub first_retry_wait: Duration,
    /// Sends of one request before its failure is final (the protocol's
    /// 10; `tinker check` wants a quick answer).
    pub tries: u32,
    /// How often a session says it is alive (the protocol's 10 s).
    pub heartbeat: Duration,
    /// The pause between tries while the service wants payment (HTTP 402;
    /// the protocol's 5 s).
    pub billing_wait: Duration,
    /// How long a call waits for payment before failing (the protocol's
    /// hour).
    pub billing_limit: Duration,
}

/// The key is never printed: a `{:?}` of the settings (a log, an error)
/// says only whether there is one.
impl std::fmt::Debug for ServiceSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceSettings")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("dialect", &self.dialect)
            .field("first_retry_wait", &self.first_retry_wait)
            .field("tries", &self.tries)
            .field("heartbeat", &self.heartbeat)
            .field("billing_wait", &self.billing_wait)
            .field("billing_limit", &self.billing_limit)
            .finish()
    }
}

impl ServiceSettings {
    /// The service's URL as a connected [`Service`] names it (and training
    /// runs are recorded under it).
    pub fn service_url(&self) -> &str {
        self.base_url.trim_end_matches('/')
    }

    /// The protocol's timings, for the service at `base_url`.
    pub fn new(base_url: &str, api_key: Option<String>) -> Self {
        Self {
            base_url: base_url.to_string(),
            api_key,
            dialect: None,
            first_retry_wait: Duration::from_millis(500),
            tries: super::transport::TRIES,
            heartbeat: HEARTBEAT,
            billing_wait: BILLING.0,
            billing_limit: BILLING.1,
        }
    }
}

/// A training service.
pub struct Service {
    pub(super) transport: Arc<Transport>,
    /// The `forward_backward` dialect in use (`None`: not known yet).
    pub(super) dialect: KnownDialect,
    /// What `client/config` said (unknown flags kept).
    pub config: Value,
    /// Why the dialect is what it is (for `metaclaw tinker check`).
    pub dialect_evidence: String,
    heartbeat: Duration,
}

impl Service {
    /// Connects: reads the server's client config (a 404 means defaults),
    /// which says how `forward_backward` bodies are sent.
    pub async fn connect(settings: &ServiceSettings) -> Result<Self, Error> {
        let base = settings.service_url().to_string();
        let http = ClientSpec::new(Purpose::Training)
            .only_calls([base.as_str()])
            .build()
            .map_err(|e| Error::Client(e.to_string()))?;
        let mut transport = Transport {
            http,
            base,
            api_key: settings.api_key.clone(),
            first_wait: settings.first_retry_wait,
            tries: settings.tries,
            billing_wait: settings.billing_wait,
            billing_limit: settings.billing_limit,
            compress: false,
        };
        let body = Body::Json(json!({"sdk_version": SDK_VERSION}));
        let config = match transport
            .call(reqwest::Method::POST, "client/config", Some(body))
            .await
        {
            Ok(reply) => reply.json()?,
            Err(Error::Service { status: 404, .. }) => Value::Object(Default::default()),
            Err(e) => return Err(e),
        };
        // Kept whole for `tinker check`; read through its type.
        let wants = ClientConfig::deserialize(&config)
            .map_err(|e| Error::Protocol(format!("client/config: {e}")))?;
        transport.compress = wants.proto_compress_fwdbwd;
        // SDKs 0.23–0.24 sent JSON bodies to a server that said so.
        let legacy_json = !wants.proto_write_fwdbwd;
        let (dialect, dialect_evidence) = match (settings.dialect, legacy_json) {
            (Some(d), _) => (Some(d), "as configured".to_string()),
            (None, true) => (
                Some(Dialect::Json),
                "its client config sets proto_write_fwdbwd: false".to_string(),
            ),
            (None, false) if transport.compress => (
                Some(Dialect::Protobuf),
                "its client config asks for zstd protobuf bodies".to_string(),
            ),
            (None, false) => probe_dialect(&transport).await,
        };
        Ok(Self {
            transport: Arc::new(transport),
            dialect: KnownDialect::new(dialect),
            dialect_evidence,
            config,
            heartbeat: settings.heartbeat,
        })
    }

    /// The `forward_backward` dialect in use: as set, as the client
    /// config said, or as the first `forward_backward` found (`None`
    /// before that).
    pub fn dialect(&self) -> Option<Dialect> {
        self.dialect.get()
    }

    /// What the service knows of saved weights (`tinker://…`): the base
    /// model and LoRA they belong to.
    pub async fn weights_info(&self, tinker_path: &str) -> Result<WeightsInfo, Error> {
        let body = Body::Json(json!({ "tinker_path": tinker_path }));
        let reply = self
            .transport
            .call(reqwest::Method::POST, "weights_info", Some(body))
            .await?;
        reply.decode("weights_info")
    }

    /// The service's base URL (without `/api/v1`).
    pub fn url(&self) -> &str {
        &self.transport.base
    }

    /// The models the service offers: `(name, trainable)`.
    pub async fn models(&self) -> Result<Vec<(String, bool)>, Error> {
        let reply = self
            .transport
            .call(reqwest::Method::GET, "get_server_capabilities", None)
            .await?;
        let offered: Capabilities = reply.decode("get_server_capabilities")?;
        Ok(offered
            .supported_models
            .iter()
            .filter_map(|m| Some((m.name()?.to_string(), m.trainable)))
            .collect())
    }

    /// A new session, kept alive by a heartbeat until it is dropped.
    pub async fn create_session(&self) -> Result<Session, Error> {
        let body = Body::Json(json!({
            "tags": [], "user_metadata": {},
            "sdk_version": SDK_VERSION,
            "type": "create_session",
        }));
        let reply = self
            .transport
            .call(reqwest::Method::POST, "create_session", Some(body))
            .await?;
        let id = reply.decode::<SessionCreated>("create_session")?.session_id;
        let state = Arc::new(SessionState {
            id: id.clone(),
            ended: AtomicBool::new(false),
            next_model: AtomicU64::new(0),
            next_sampler: AtomicU64::new(0),
        });
        let heartbeat = OwnedTask::start(heartbeat(
            self.transport.clone(),
            state.clone(),
            self.heartbeat,
        ));
        Ok(Session {
            transport: self.transport.clone(),
            dialect: self.dialect.clone(),
            state,
            _heartbeat: heartbeat,
        })
    }
}

/// Which dialect the service reads, asked without training anything: a
/// protobuf `forward_backward` for a model that does not exist. A service
/// that reads protobuf looks for the model and refuses it (404 or 400); one
/// that reads only JSON cannot parse the body (422, or 415). The probe's
/// bytes are valid UTF-8, so a JSON server says 422 rather than failing
/// with a 500 the way it does on a real protobuf body (skyrl 0.3). No
/// clear answer: `None`, and the first real call finds out (on 415/422).
async fn probe_dialect(transport: &Transport) -> (Option<Dialect>, String) {
    let body = probe_body();
    let answer = transport
        .send_once(
            reqwest::Method::POST,
            "forward_backward",
            Some(&Body::Protobuf(bytes::Bytes::from(body))),
            &[],
            Duration::from_secs(30),
        )
        .await;
    match answer.map(|reply| reply.status.as_u16()) {
        Ok(status @ (415 | 422)) => (
            Some(Dialect::Json),
            format!("it refused a protobuf forward_backward with HTTP {status}"),
        ),
        Ok(status @ (400 | 404)) => (
            Some(Dialect::Protobuf),
            format!(
                "it read a protobuf forward_backward (HTTP {status} for a model that does not exist)"
            ),
        ),
        Ok(status) => (
            None,
            format!(
                "unknown: a protobuf forward_backward probe got HTTP {status}; the first call will tell"
            ),
        ),
        Err(e) => (
            None,
            format!(
                "unknown: the probe got no answer ({}); the first call will tell",
                crate::http::describe(&e)
            ),
        ),
    }
}

/// The dialect probe's body: a protobuf `forward_backward` with no data.
fn probe_body() -> Vec<u8> {
    metaclaw_tinker::convert::forward_backward_body(
        "metaclaw-dialect-probe",
        1,
        &[],
        metaclaw_tinker::types::LossFn::CrossEntropy,
        &Default::default(),
        false,
    )
}

pub(super) struct SessionState {
    pub(super) id: String,
    pub(super) ended: AtomicBool,
    next_model: AtomicU64,
    pub(super) next_sampler: AtomicU64,
}

impl SessionState {
    pub(super) fn check(&self) -> Result<(), Error> {
        if self.ended.load(Ordering::Relaxed) {
            return Err(Error::SessionEnded(self.id.clone()));
        }
        Ok(())
    }
}

/// A session: its heartbeat runs while it lives.
pub struct Session {
    transport: Arc<Transport>,
    dialect: KnownDialect,
    pub(super) state: Arc<SessionState>,
    /// Aborted when the session is dropped.
    _heartbeat: OwnedTask,
}

async fn heartbeat(transport: Arc<Transport>, state: Arc<SessionState>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let body = Body::Json(json!({"session_id": state.id, "type": "session_heartbeat"}));
        match transport
            .call(reqwest::Method::POST, "session_heartbeat", Some(body))
            .await
        {
            Ok(_) => {}
            // 410 is the protocol's "finished"; skyrl answers 404 for a
            // session it has expired.
            Err(Error::Service {
                status: 410 | 404, ..
            }) => {
                tracing::warn!(session = %state.id, "the training service ended the session");
                state.ended.store(true, Ordering::Relaxed);
                return;
            }
            Err(e) => tracing::warn!(session = %state.id, "heartbeat failed: {e}"),
        }
    }
}

impl Session {
    pub fn id(&self) -> &str {
        &self.state.id
    }

    /// Whether the service ended the session.
    pub fn ended(&self) -> bool {
        self.state.ended.load(Ordering::Relaxed)
    }

    /// A new LoRA training model on `base_model`.
    pub async fn create_model(
        &self,
        base_model: &str,
        lora: &LoraConfig,
    ) -> Result<TrainingModel, Error> {
        self.state.check()?;
        let model_seq_id = self.state.next_model.fetch_add(1, Ordering::Relaxed);
        let body = Body::Json(json!({
            "session_id": self.state.id, "model_seq_id": model_seq_id, "base_model": base_model,
            "lora_config": lora, "type": "create_model",
        }));
        let reply =
            submit_and_wait(&self.transport, "create_model", body, Kind::CreateModel).await?;
        let model_id = reply.decode::<ModelCreated>("create_model")?.model_id;
        Ok(TrainingModel::new(
            self.transport.clone(),
            self.dialect.clone(),
            self.state.clone(),
            model_id,
            0,
        ))
    }

    /// A model trained before (this run or another): its id, and the next
    /// `seq_id` to use (one past the last the service ran).
    pub fn attach(&self, model_id: &str, last_seq: i64) -> TrainingModel {
        TrainingModel::new(
            self.transport.clone(),
            self.dialect.clone(),
            self.state.clone(),
            model_id.to_string(),
            last_seq,
        )
    }

    /// A sampler on the base model, or on saved sampler weights.
    pub async fn sampler(
        &self,
        base_model: Option<&str>,
        model_path: Option<&str>,
    ) -> Result<Sampler, Error> {
        self.state.check()?;
        let seq = self.state.next_sampler.fetch_add(1, Ordering::Relaxed);
        let body = json!(CreateSampler {
            session_id: &self.state.id,
            sampling_session_seq_id: seq,
            kind: "create_sampling_session",
            base_model,
            model_path,
        });
        let reply = self
            .transport
            .call(
                reqwest::Method::POST,
                "create_sampling_session",
                Some(Body::Json(body)),
            )
            .await?;
        let id = reply
            .decode::<SamplerCreated>("create_sampling_session")?
            .sampling_session_id;
        Ok(Sampler::new(self.transport.clone(), self.state.clone(), id))
    }
}

/// `create_sampling_session`: on the base model, or on saved weights.
#[derive(Serialize)]
struct CreateSampler<'a> {
    session_id: &'a str,
    sampling_session_seq_id: u64,
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    base_model: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model_path: Option<&'a str>,
}

#[cfg(test)]
mod tests {
    /// A JSON server must read the probe as text and refuse it as JSON
    /// (422), not fail to decode it (skyrl 0.3's bare 500).
    #[test]
    fn the_dialect_probe_is_utf8_but_not_json() {
        let body = super::probe_body();
        let text = std::str::from_utf8(&body).unwrap();
        assert!(serde_json::from_str::<serde_json::Value>(text).is_err());
        assert!(!body.is_empty());
    }
}
