//! The stages of a learning job, in the order the runner calls them:
//!
//! 1. [`score`]: scorer plugins on the main turns not scored yet (the last
//!    turn, and any a crash left);
//! 2. [`judge`]: the judge on every main turn with its next state, then one
//!    reward per turn (`learning.reward`); and [`group`]: with
//!    `rl.group_size` > 1, each turn's served and unserved answers judged
//!    alike, for training;
//! 3. [`evolve`]: when the session had a judged failure, or always with
//!    `skills.auto_evolve`, the evolver model's drafts through the schema
//!    check and the evolver plugins, kept as SKILL.md texts in the store;
//! 4. [`publish`]: those texts written to the skills folder (atomically),
//!    the library re-read.
//!
//! Each is one function from the job (and the learner's [`Parts`]) to its
//! [`Output`], which the runner commits together with the stage's row in
//! one transaction (`store::jobs::stage_done`): a job cut short resumes
//! after its last committed stage and does nothing twice.

pub mod evolve;
pub mod group;
pub mod judge;
pub mod publish;
pub mod score;

use std::sync::{Arc, Mutex};

use crate::store::sql::Conn;
use anyhow::Result;

use super::judge::Judge;
use super::llm::ChatModel;
use crate::config::schema::LearningConfig;
use crate::plugins::PluginHost;
use crate::redact::Redactor;
use crate::skills::Skills;
use crate::store::{ScoringInput, Store};

pub use crate::store::jobs::Stage;

/// What a job's stages work with.
pub struct Parts {
    pub store: Store,
    /// The learner's own store connection.
    pub db: LearnerConn,
    pub plugins: Option<Arc<PluginHost>>,
    /// The skill library (`None` when skills are off: nothing evolves).
    pub skills: Option<Arc<Skills>>,
    /// `None` when judging is off or no judge model is configured.
    pub judge: Option<Judge>,
    pub evolver: Option<ChatModel>,
    pub redactor: Arc<Redactor>,
    pub settings: LearningConfig,
    pub auto_evolve: bool,
}

/// What a stage hands the runner: its results, written in the transaction
/// that records the stage as done.
pub trait Output: Send + 'static {
    const STAGE: Stage;
    /// One line, kept with the stage's row.
    fn summary(&self) -> String;
    fn write(&self, tx: &Conn) -> Result<()>;
}

/// A stage cannot run now for a reason outside the job (no `guard` for
/// evolution, a scorer the machine gives no time): the job waits, queued,
/// without using up its attempts.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Blocked(String);

impl From<crate::learn::per_turn::ScorerUnavailable> for Blocked {
    fn from(e: crate::learn::per_turn::ScorerUnavailable) -> Self {
        Blocked(e.to_string())
    }
}

/// How long a learner's store call waits for another writer's lock. Far
/// longer than the store's 5 s: nothing waits on the learner but its own
/// jobs, and on a loaded machine a starved writer can hold the lock past
/// 5 s; a busy error there once left a job queued while `learn now`
/// answered it as run.
const LEARNER_BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The learner's store connection (a side writer beside the store's writer
/// thread), opened on first use and shared by the runner and the stages.
#[derive(Clone)]
pub struct LearnerConn {
    db: crate::store::Db,
    conn: Arc<Mutex<Option<Conn>>>,
}

impl LearnerConn {
    pub fn new(db: crate::store::Db) -> Self {
        Self {
            db,
            conn: Arc::new(Mutex::new(None)),
        }
    }

    /// Runs `f` on the connection, on a blocking thread.
    pub async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Conn) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let this = self.clone();
        blocking(move || this.call_blocking(f)).await
    }

    /// Runs `f` on the connection, on this thread.
    pub fn call_blocking<T>(&self, f: impl FnOnce(&mut Conn) -> Result<T>) -> Result<T> {
        let mut slot = self
            .conn
            .lock()
            .map_err(|_| anyhow::anyhow!("learning store connection poisoned"))?;
        if slot.is_none() {
            let conn = self.db.side_writer()?;
            conn.busy_timeout(LEARNER_BUSY_TIMEOUT)?;
            *slot = Some(conn);
        }
        match slot.as_mut() {
            Some(conn) => f(conn),
            None => anyhow::bail!("no store connection"),
        }
    }
}

/// Runs `f` on a blocking thread.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| anyhow::anyhow!("learning task failed: {e}"))?
}

/// A turn's input and its successor's (the next state), read on a
/// blocking thread.
async fn inputs(
    store: &Store,
    turn: String,
    next: Option<String>,
) -> Result<(Option<ScoringInput>, Option<ScoringInput>)> {
    let store = store.clone();
    blocking(move || {
        let input = store.scoring_input(&turn)?;
        let next = match next {
            Some(id) => store.scoring_input(&id)?,
            None => None,
        };
        Ok((input, next))
    })
    .await
}
