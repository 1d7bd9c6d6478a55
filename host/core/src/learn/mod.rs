//! Learning from sessions, never on the serving path. The path of
//! learning, file by file:
//!
//! 1. a turn is recorded: the store's writer reports it (`store::writer`);
//! 2. per-turn scoring ([`per_turn`]): once a main turn's successor is
//!    recorded, the scorer plugins score it;
//! 3. the session ends (`sessions`): its learning job is queued in the same
//!    transaction (`store::jobs`), and per-turn scoring scores its last turn;
//! 4. the job runner ([`runner`]) claims the job and runs its stages in
//!    order, each committed once: [`stages::score`] → [`stages::judge`] →
//!    [`stages::evolve`] → [`stages::publish`].
//!
//! What the stages use: [`finished`] (a recorded turn with its next state,
//! as scorers and the judge see it), [`judge`] (the judge model's prompt and
//! votes), [`reward`] (one reward per turn), [`evolve`] (the evolver's
//! prompt and the drafts' schema check), [`llm`] (the models' client).
//! [`review`]: revisions of built-in and user-written skills held for the
//! user.

pub mod canary;
pub mod evolve;
pub mod finished;
pub mod judge;
pub mod llm;
pub mod per_turn;
pub mod retire;
pub mod review;
pub mod reward;
pub mod rl;
pub mod runner;
pub mod stages;

pub use per_turn::Scoring;
pub use runner::{LearnError, LearnHandle, Learner};
pub use stages::Blocked;
pub use stages::evolve::{evolution_unguarded, evolver_chain};

/// What `status`, `learn status`, `doctor` and a session's end say when
/// `learning.enabled` is false (and which key turns learning on).
pub const OFF: &str = "learning is off (learning.enabled: false): sessions are recorded but no learning job is queued; `metaclaw config set learning.enabled true` and a restart turn it on";

/// Starts `work` on a thread of its own at lower priority (nice 10), on a
/// single-threaded runtime: learning and training compete with neither
/// the proxy's threads nor its runtime. `what` names it in the error
/// logged if its runtime cannot start.
pub(crate) fn spawn_background<F, Fut>(
    name: &str,
    what: &'static str,
    work: F,
) -> std::io::Result<std::thread::JoinHandle<()>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    crate::work::thread(name, move || {
        crate::store::lower_priority();
        match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime.block_on(work()),
            Err(e) => tracing::error!("{what} is off: cannot start its runtime: {e}"),
        }
    })
}

/// `"learning"` in `/admin/status` and a session end's answer: whether
/// learning jobs run, and what to do when they do not.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LearningState {
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl LearningState {
    pub fn of(enabled: bool) -> Self {
        Self {
            enabled,
            note: (!enabled).then(|| OFF.to_string()),
        }
    }
}
