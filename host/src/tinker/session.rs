//! The service and its sessions. A session owns its training models and
//! samplers and must hear from the client every 10 s; a 410 to a heartbeat
//! means the service ended it (skyrl does after 300 s of silence), and
//! every later call on it says so.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::Error;
use super::future::{Kind, submit_and_wait};
use super::model::{Sampler, TrainingModel};
use super::transport::{Body, Transport};
use crate::http::{ClientSpec, Purpose};

/// The protocol's heartbeat period.
const HEARTBEAT: Duration = Duration::from_secs(10);

/// Which body `forward_backward` is sent as: protobuf (current SDKs and
/// hosted Tinker) or JSON (skyrl 0.3, older servers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Protobuf,
    Json,
}

/// Where the service is and how to reach it.
#[derive(Clone)]
pub struct Settings {
    /// Without `/api/v1`; a trailing `/` is ignored.
    pub base_url: String,
    /// Sent as `X-API-Key`; never logged.
    pub api_key: Option<String>,
    /// `None`: protobuf, falling back to JSON when the server refuses it.
    pub dialect: Option<Dialect>,
    /// The first wait between retries (the protocol's 0.5 s; tests use less).
    pub first_retry_wait: Duration,
    /// How often a session says it is alive (the protocol's 10 s).
    pub heartbeat: Duration,
}

/// The key is never printed: a `{:?}` of the settings (a log, an error)
/// says only whether there is one.
impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("dialect", &self.dialect)
            .field("first_retry_wait", &self.first_retry_wait)
            .field("heartbeat", &self.heartbeat)
            .finish()
    }
}

impl Settings {
    /// The protocol's timings, for the service at `base_url`.
    pub fn new(base_url: &str, api_key: Option<String>) -> Self {
        Self {
            base_url: base_url.to_string(),
            api_key,
            dialect: None,
            first_retry_wait: Duration::from_millis(500),
            heartbeat: HEARTBEAT,
        }
    }
}

/// A training service.
pub struct Service {
    pub(super) transport: Arc<Transport>,
    /// The `forward_backward` dialect in use (`None`: not known yet).
    pub(super) dialect: Arc<std::sync::Mutex<Option<Dialect>>>,
    /// What `client/config` said (unknown flags kept).
    pub config: Value,
    heartbeat: Duration,
}

impl Service {
    /// Connects: reads the server's client config (a 404 means defaults).
    pub async fn connect(settings: &Settings) -> Result<Self, Error> {
        let base = settings.base_url.trim_end_matches('/').to_string();
        let http = ClientSpec::new(Purpose::Training)
            .only_calls([base.as_str()])
            .build()
            .map_err(|e| Error::Client(e.to_string()))?;
        let transport = Arc::new(Transport {
            http,
            base,
            api_key: settings.api_key.clone(),
            first_wait: settings.first_retry_wait,
        });
        let body =
            Body::Json(json!({"sdk_version": concat!("metaclaw-", env!("CARGO_PKG_VERSION"))}));
        let config = match transport
            .call(reqwest::Method::POST, "client/config", Some(body))
            .await
        {
            Ok(reply) => reply.json()?,
            Err(Error::Service { status: 404, .. }) => Value::Object(Default::default()),
            Err(e) => return Err(e),
        };
        Ok(Self {
            transport,
            dialect: Arc::new(std::sync::Mutex::new(settings.dialect)),
            config,
            heartbeat: settings.heartbeat,
        })
    }

    /// The models the service offers: `(name, trainable)`.
    pub async fn models(&self) -> Result<Vec<(String, bool)>, Error> {
        let reply = self
            .transport
            .call(reqwest::Method::GET, "get_server_capabilities", None)
            .await?;
        let v = reply.json()?;
        Ok(v["supported_models"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| {
                let name = m["model_name"].as_str().or(m["model_id"].as_str())?;
                Some((name.to_string(), m["trainable"].as_bool().unwrap_or(true)))
            })
            .collect())
    }

    /// A new session, kept alive by a heartbeat until it is dropped.
    pub async fn create_session(&self) -> Result<Session, Error> {
        let body = Body::Json(json!({
            "tags": [], "user_metadata": {},
            "sdk_version": concat!("metaclaw-", env!("CARGO_PKG_VERSION")),
            "type": "create_session",
        }));
        let reply = self
            .transport
            .call(reqwest::Method::POST, "create_session", Some(body))
            .await?;
        let id = reply.json()?["session_id"]
            .as_str()
            .ok_or_else(|| Error::Protocol("create_session answered without a session_id".into()))?
            .to_string();
        let state = Arc::new(SessionState {
            id: id.clone(),
            ended: AtomicBool::new(false),
            next_model: AtomicU64::new(0),
            next_sampler: AtomicU64::new(0),
        });
        let heartbeat = tokio::spawn(heartbeat(
            self.transport.clone(),
            state.clone(),
            self.heartbeat,
        ));
        Ok(Session {
            transport: self.transport.clone(),
            dialect: self.dialect.clone(),
            state,
            heartbeat,
        })
    }
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
    dialect: Arc<std::sync::Mutex<Option<Dialect>>>,
    pub(super) state: Arc<SessionState>,
    heartbeat: JoinHandle<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
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
            Err(Error::Service { status: 410, .. }) => {
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
        rank: u32,
        seed: Option<u64>,
    ) -> Result<TrainingModel, Error> {
        self.state.check()?;
        let model_seq_id = self.state.next_model.fetch_add(1, Ordering::Relaxed);
        let mut lora =
            json!({"rank": rank, "train_unembed": true, "train_mlp": true, "train_attn": true});
        if let Some(seed) = seed {
            lora["seed"] = json!(seed);
        }
        let body = Body::Json(json!({
            "session_id": self.state.id, "model_seq_id": model_seq_id, "base_model": base_model,
            "lora_config": lora, "type": "create_model",
        }));
        let reply =
            submit_and_wait(&self.transport, "create_model", body, Kind::CreateModel).await?;
        let model_id = reply.json()?["model_id"]
            .as_str()
            .ok_or_else(|| Error::Protocol("create_model's result has no model_id".into()))?
            .to_string();
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
        let mut body = json!({
            "session_id": self.state.id, "sampling_session_seq_id": seq, "type": "create_sampling_session",
        });
        if let Some(base) = base_model {
            body["base_model"] = json!(base);
        }
        if let Some(path) = model_path {
            body["model_path"] = json!(path);
        }
        let reply = self
            .transport
            .call(
                reqwest::Method::POST,
                "create_sampling_session",
                Some(Body::Json(body)),
            )
            .await?;
        let id = reply.json()?["sampling_session_id"]
            .as_str()
            .ok_or_else(|| {
                Error::Protocol("create_sampling_session answered without an id".into())
            })?
            .to_string();
        Ok(Sampler::new(self.transport.clone(), self.state.clone(), id))
    }
}
