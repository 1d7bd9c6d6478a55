//! Learning from sessions, never on the serving path.
//!
//! When a session's next main turn is recorded, the previous one is
//! finished and the scorer plugins score it ([`per_turn`]); when a session
//! ends, its learning job ([`runner`]) scores the last turn, has the judge
//! score every turn with its next state, and evolves skills.

pub mod evolve;
pub mod finished;
pub mod judge;
pub mod llm;
pub mod per_turn;
pub mod review;
pub mod reward;
pub mod runner;

pub use per_turn::Scoring;
pub use runner::{Blocked, LearnError, LearnHandle, Learner, evolution_unguarded, evolver_chain};

/// What `status`, `learn status`, `doctor` and a session's end say when
/// `learning.enabled` is false (and which key turns learning on).
pub const OFF: &str = "learning is off (learning.enabled: false): sessions are recorded but no learning job is queued; `metaclaw config set learning.enabled true` and a restart turn it on";

/// `"learning"` in `/admin/status` and a session end's answer.
pub fn state_json(enabled: bool) -> serde_json::Value {
    if enabled {
        serde_json::json!({ "enabled": true })
    } else {
        serde_json::json!({ "enabled": false, "note": OFF })
    }
}
