//! The Tinker training bridge: a native client for Tinker-compatible
//! training services (hosted Tinker, skyrl, tuft, hatchery). The wire
//! types and protobuf messages are the `metaclaw-tinker` crate; this module
//! is the client: a service, its sessions (heartbeat every 10 s), training
//! models whose calls carry ordered `seq_id`s, and samplers. Every call's
//! result is decoded and returned: loss outputs, logprobs, metrics.
//!
//! | file | job |
//! |---|---|
//! | `transport.rs` | one call: headers, idempotency key, retries, billing pauses, zstd bodies, error bodies |
//! | `future.rs` | waiting for a future (`complete_metadata` included), re-submitting on 410 |
//! | `session.rs` | the service (its client config, `weights_info`), a session and its heartbeat |
//! | `model.rs` | a training model (forward/backward, optimiser, checkpoints, `get_info`) and a sampler |
//! | `run.rs` | a training run kept in the store: restarts from its last saved state, unique checkpoint names |
//! | `configured.rs` | the settings the config gives (`rl.tinker_*`, `rl.model`, `rl.lora_rank`, …) |
//! | `check.rs` | `metaclaw tinker check`: dialect, flags, models, what to fix |

pub mod check;
pub mod configured;
mod future;
mod model;
mod replies;
mod run;
mod session;
mod transport;

pub use metaclaw_tinker::types;
pub use metaclaw_tinker::types::{LoraConfig, ModelInfo, Stop, WeightsInfo};
pub use model::{AdamParams, Checkpoint, Sampler, SamplingParams, TrainingModel};
pub use run::{Opened, RunSpec, StepReport, TrainingRun};
pub use session::{Dialect, Service, ServiceSettings, Session};

/// What a call to the training service can end in.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The service answered with an error status (or a failed future).
    #[error("the training service refused `{call}` (HTTP {status}): {message}")]
    Service {
        status: u16,
        call: String,
        message: String,
        /// The service says the request was at fault (`category: user`).
        users_fault: bool,
    },
    /// No answer after every retry the protocol allows.
    #[error("the training service is unreachable: {0}")]
    Unavailable(String),
    /// An answer that does not follow the protocol.
    #[error("the training service's answer does not follow the Tinker protocol: {0}")]
    Protocol(String),
    /// The session was ended by the service (HTTP 410 on a heartbeat).
    #[error("the training session {0} was ended by the service")]
    SessionEnded(String),
    #[error("{0}")]
    Client(String),
}

impl From<metaclaw_tinker::convert::Error> for Error {
    fn from(e: metaclaw_tinker::convert::Error) -> Self {
        Error::Protocol(e.to_string())
    }
}
