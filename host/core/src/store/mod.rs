//! The SQLite store: `<home>/metaclaw.db`.
//!
//! Writes never happen on the request path. A finished turn is handed to a
//! queue and written by one writer thread that commits in batches. The queue
//! is bounded by admission instead of by refusing sends: every turn takes a
//! permit when it starts and gives it back once committed, so a stalled disk
//! slows new turns down (and, past a short wait, lets them through
//! unrecorded, counted) rather than losing recorded ones or blocking a
//! stream's last chunk.

pub mod browse;
mod db;
pub mod experiments;
pub mod feedback;
pub mod instances;
pub mod jobs;
pub mod learning;
pub mod outcomes;
pub mod proposals;
mod read;
pub mod samples;
pub mod scheduler;
mod schema;
mod schema_pg;
pub mod skill_checks;
pub mod skills;
pub mod sql;
pub mod train_queue;
pub mod training;
mod writer;

use std::ops::Range;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::store::sql::Conn;
use anyhow::{Context, Result};
use bytes::Bytes;
use std::sync::mpsc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

pub use db::{Db, StoreLock};

use db::open_rw;
pub use read::{SampleSummary, SessionRow, StoredSession, TurnRow};

use crate::metrics::Metrics;
use crate::redact::Redactor;

/// Where a session's id came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionSource {
    Header,
    Body,
    PromptCacheKey,
    OpenclawRuntime,
    Fingerprint,
}

impl SessionSource {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Header => "header",
            Self::Body => "body",
            Self::PromptCacheKey => "prompt_cache_key",
            Self::OpenclawRuntime => "openclaw_runtime",
            Self::Fingerprint => "fingerprint",
        }
    }
}

/// The session a turn belongs to.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    pub id: Arc<str>,
    pub base_key: Arc<str>,
    /// The agent (namespace) the session belongs to: its first turn's.
    pub agent: crate::agent_id::AgentId,
    pub agent_session_id: Option<Arc<str>>,
    pub source: SessionSource,
    pub window: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnStatus {
    Ok,
    /// The answer did not reach the client whole (disconnect, stall, cut).
    Incomplete,
    /// The upstream failed or answered with an error status.
    Error,
}

impl TurnStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Incomplete => "incomplete",
            Self::Error => "error",
        }
    }
}

/// How to read a captured answer as the chat completion it amounts to, and
/// whether it ended properly. The proxy, which knows the upstream's API
/// format, picks it; the store only runs it, on its writer thread, off the
/// serving path.
pub type ReadAnswer = fn(&[u8]) -> (serde_json::Value, bool);

/// The answer of a turn, as the upstream sent it.
#[derive(Debug)]
pub enum Capture {
    None,
    Answer { bytes: Bytes, read: ReadAnswer },
}

/// Whose turn it is: the user's conversation (`main`), the agent's
/// background work (`side`: heartbeats, titles), or an attempt that a
/// resend of the same request superseded (`retried`, set by the store).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnType {
    Main,
    Side,
    Retried,
}

impl TurnType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Main => "main",
            Self::Side => "side",
            Self::Retried => "retried",
        }
    }

    /// `main`/`side` as a client sends them in `X-Turn-Type` or the body's
    /// `turn_type` (a client cannot say `retried`).
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "main" => Some(Self::Main),
            "side" => Some(Self::Side),
            _ => None,
        }
    }
}

/// One finished turn, as the proxy hands it over. Parsing, redaction and
/// deduplication happen in the writer, off the request path.
#[derive(Debug)]
pub struct TurnRecord {
    pub id: String,
    /// What the user said last, in their own words (agent metadata
    /// removed), for `sessions show`.
    pub user_text: Option<String>,
    /// Which attempt of its turn this is (1: a new turn).
    pub attempt: u32,
    /// For a retry: the first attempt's id. The earlier attempts are then
    /// recorded as `retried`, which no learning reads.
    pub retry_of: Option<Arc<str>>,
    pub session: SessionInfo,
    /// The agent that sent it (`openclaw`, or its User-Agent product);
    /// its session keeps its first turn's.
    pub agent: Option<String>,
    pub turn_type: TurnType,
    pub api: metaclaw_wire::Front,
    pub model: Option<String>,
    pub upstream_model: Option<String>,
    pub stream: bool,
    pub request: RecordedRequest,
    pub response: Capture,
    pub status: TurnStatus,
    pub http_status: Option<u16>,
    pub error: Option<String>,
    pub started_at_ms: i64,
    pub finished_at_ms: i64,
    pub total_ms: f64,
    pub upstream_ms: Option<f64>,
    pub ttft_ms: Option<f64>,
    pub message_count: u32,
    /// The skills injected into the turn's prompt, best first.
    pub injected_skills: Vec<InjectedSkill>,
    /// The canaries' arms the turn met (a withheld candidate included).
    pub arms: Vec<experiments::ArmRecord>,
    /// Who answered: `llm`, or the trainable model with what it sampled.
    pub served_by: ServedBy,
}

/// Who answered a turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum ServedBy {
    /// The upstream LLM (`llm`), as configured.
    #[default]
    Llm,
    /// The trainable model, sampled through the training service.
    Student(Box<samples::SampleRecord>),
    /// `llm`, because the student could not answer (why): not trainable.
    Fallback(String),
}

impl ServedBy {
    pub fn as_str(&self) -> &'static str {
        match self {
            ServedBy::Llm => "llm",
            ServedBy::Student(_) => "student",
            ServedBy::Fallback(_) => "llm_fallback",
        }
    }
}

/// How a response names who answered it (`x-metaclaw-served-by`) from the
/// recorded `served_by` and the sample's policy version; `None` for the
/// LLM as configured.
pub fn served_by_label(served_by: &str, policy_version: Option<i64>) -> Option<String> {
    match served_by {
        "student" => Some(format!(
            "student; policy_version={}",
            policy_version.unwrap_or_default()
        )),
        "llm_fallback" => Some("llm; student_fallback".to_string()),
        _ => None,
    }
}

/// A turn's request as the proxy read it: the agent's bytes and where the
/// parts the store keeps lie in them. The store parses only the values it
/// stores; what is a message, a tool list or metaclaw's own field is the
/// proxy's to say.
#[derive(Debug, Clone, Default)]
pub struct RecordedRequest {
    pub body: Bytes,
    /// The conversation's messages, in order (each one a JSON object).
    pub messages: Vec<Range<usize>>,
    /// The tool definitions (a JSON list), if any.
    pub tools: Option<Range<usize>>,
    /// The other parameters (`model`, `temperature`…), by name.
    pub params: Vec<(String, Range<usize>)>,
    /// Which of `messages` the scorers read, in order: the latest
    /// [`SCORER_TAIL`] that are not a system prompt.
    pub scored: Vec<usize>,
}

/// How many of a conversation's latest messages a scorer gets. Scorers
/// judge the end of a conversation (the answer, what came next, a few
/// messages before); the whole of it, system prompt included, was tens of
/// kilobytes read back and copied into each scorer on every turn.
pub const SCORER_TAIL: usize = 32;

/// A skill injected into a turn, as recorded (`[{"id", "version",
/// "score"}]` in `turns.injected_skills`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct InjectedSkill {
    pub id: String,
    pub version: String,
    pub score: f32,
}

/// A reward to store for a turn.
#[derive(Debug, Clone)]
pub struct RewardRecord {
    /// Who gave it: `plugin:<name>@<version>` (later also the judge).
    pub source: String,
    pub value: f32,
    pub label: String,
    pub rationale: String,
}

/// What the writer reports after each commit, in order, so later stages
/// (per-turn scoring) can act on it.
pub enum Committed {
    Turn(Recorded),
    /// A session's end (after every turn of it the writer had).
    SessionEnd(Arc<str>),
}

/// Sent after a turn is committed, so later stages can act on it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub turn_id: String,
    pub session_id: Arc<str>,
    pub turn_type: TurnType,
    pub seq: i64,
    /// A retry of the session's previous main turn (which it supersedes).
    pub retry: bool,
    /// What the scorers read of a main turn (its latest messages and its
    /// answer, redacted as stored), so that scoring need not read it back.
    pub scoring: Option<Arc<ScoringInput>>,
}

enum Op {
    Turn(Box<TurnRecord>, Option<OwnedSemaphorePermit>),
    Rewards {
        turn_id: String,
        rewards: Vec<RewardRecord>,
        at_ms: i64,
    },
    EndSession {
        session: SessionInfo,
        reason: String,
        at_ms: i64,
    },
    Flush(oneshot::Sender<()>),
    Shutdown(oneshot::Sender<()>),
}

impl Op {
    /// Someone is waiting on this one: commit without waiting for more.
    fn is_urgent(&self) -> bool {
        matches!(self, Op::Flush(_) | Op::Shutdown(_))
    }
}

pub struct StoreOptions {
    /// The database: a SQLite file, or Postgres (`store.url`).
    pub db: Db,
    pub commit_interval: Duration,
    pub queue_capacity: usize,
    pub redactor: Redactor,
    /// Told about each committed turn and session end, in commit order.
    pub on_recorded: Option<mpsc::Sender<Committed>>,
    /// Queue a learning job for each ended session (`learning.enabled`):
    /// with learning off, a job would wait forever for a learner.
    pub queue_learning: bool,
}

/// A permit to record one turn; see the module docs.
pub type Admission = Option<OwnedSemaphorePermit>;

#[derive(Clone)]
pub struct Store {
    tx: mpsc::Sender<Op>,
    permits: Arc<Semaphore>,
    capacity: usize,
    reader: Arc<Mutex<Conn>>,
    metrics: Arc<Metrics>,
    db: Db,
}

impl Store {
    /// Opens (creating and migrating) the database and starts the writer.
    pub fn open(
        options: StoreOptions,
        metrics: Arc<Metrics>,
    ) -> Result<(Self, std::thread::JoinHandle<()>)> {
        let db = options.db;
        let conn = db.writer()?;
        let reader = match db.backend() {
            sql::Backend::Sqlite => Conn::from(open_rw(db.path())?),
            sql::Backend::Postgres => db.side_writer()?,
        };
        let (tx, rx) = mpsc::channel();
        let permits = Arc::new(Semaphore::new(options.queue_capacity));
        let writer = writer::Writer::new(
            conn,
            options.redactor,
            options.commit_interval,
            metrics.clone(),
            options.on_recorded,
            options.queue_learning,
        );
        let handle = crate::work::thread("metaclaw-store", move || writer.run(rx))
            .context("cannot start the store writer thread")?;
        Ok((
            Self {
                tx,
                permits,
                capacity: options.queue_capacity,
                reader: Arc::new(Mutex::new(reader)),
                metrics,
                db,
            },
            handle,
        ))
    }

    pub fn path(&self) -> &Path {
        self.db.path()
    }

    /// The handle for connections beside the writer (readers, side
    /// writers): cloned into whatever needs them.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Reserves room for one turn's record. Never fails: past a short wait
    /// for room, the turn goes ahead unrecorded (and counted as such).
    pub async fn admit(&self) -> Admission {
        if let Ok(permit) = self.permits.clone().try_acquire_owned() {
            return Some(permit);
        }
        match tokio::time::timeout(Duration::from_secs(2), self.permits.clone().acquire_owned())
            .await
        {
            Ok(Ok(permit)) => Some(permit),
            _ => {
                self.metrics.turns_unrecorded.inc();
                tracing::error!(
                    "the store queue is full (is the disk stalled?): serving this turn unrecorded"
                );
                None
            }
        }
    }

    /// Queues a finished turn. Never blocks.
    pub fn record(&self, turn: TurnRecord, admission: Admission) {
        if admission.is_none() {
            return;
        }
        if self.tx.send(Op::Turn(Box::new(turn), admission)).is_err() {
            self.metrics.turns_unrecorded.inc();
        }
    }

    /// Queues a session's end (after any of its turns already queued).
    pub fn end_session(&self, session: SessionInfo, reason: &str, at_ms: i64) {
        let _ = self.tx.send(Op::EndSession {
            session,
            reason: reason.to_string(),
            at_ms,
        });
    }

    /// Queues the rewards of a turn (and marks it scored).
    pub fn rewards(&self, turn_id: String, rewards: Vec<RewardRecord>, at_ms: i64) {
        let _ = self.tx.send(Op::Rewards {
            turn_id,
            rewards,
            at_ms,
        });
    }

    /// Waits until everything queued so far is committed.
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Op::Flush(done)).is_ok() {
            let _ = wait.await;
        }
    }

    /// Drains the queue and stops the writer.
    pub async fn shutdown(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Op::Shutdown(done)).is_ok() {
            let _ = wait.await;
        }
    }

    /// Records queued or in flight (for status and metrics).
    pub fn queue_depth(&self) -> usize {
        self.capacity - self.permits.available_permits()
    }

    fn with_reader<T>(&self, f: impl FnOnce(&Conn) -> crate::store::sql::Result<T>) -> Result<T> {
        let conn = self
            .reader
            .lock()
            .map_err(|_| anyhow::anyhow!("store reader lock poisoned"))?;
        Ok(f(&conn)?)
    }

    /// A session's turns, in order.
    pub fn session_turns(&self, id: &str) -> Result<Vec<read::TurnRow>> {
        self.with_reader(|c| read::session_turns(c, id))
    }

    /// The newest window of a session key (for session continuity across
    /// restarts).
    pub fn latest_for_base(&self, base_key: &str) -> Result<Option<StoredSession>> {
        self.with_reader(|c| read::latest_for_base(c, base_key))
    }

    pub fn session_by_id(&self, id: &str) -> Result<Option<StoredSession>> {
        self.with_reader(|c| read::stored_session(c, id))
    }

    pub fn active_sessions(&self) -> Result<Vec<StoredSession>> {
        self.with_reader(read::active_sessions)
    }

    pub fn counts(&self) -> Result<(u64, u64)> {
        self.with_reader(read::counts)
    }

    /// A turn with what is needed to judge it.
    pub fn scoring_input(&self, turn_id: &str) -> Result<Option<read::ScoringInput>> {
        self.with_reader(|c| read::scoring_input(c, turn_id))
    }

    /// The latest main turn of a session not yet scored, before `before_seq`.
    pub fn unscored_main_turn(
        &self,
        session_id: &str,
        before_seq: Option<i64>,
    ) -> Result<Option<(String, i64)>> {
        self.with_reader(|c| read::unscored_main_turn(c, session_id, before_seq))
    }
}

/// Learning yields to serving: its threads run at a lower CPU priority
/// than those answering requests (Linux applies nice per thread, and
/// threads a thread starts inherit it). The store writer is not lowered
/// (see `Writer::run`).
pub fn lower_priority() {
    if let Err(e) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 10) {
        tracing::debug!("cannot lower this thread's priority: {e}");
    }
}

pub use read::{
    RewardRow, ScoringInput, list_sessions, load_messages, session_detail, session_turns,
    turn_rewards,
};

/// Whether this test run puts its stores on Postgres
/// (`METACLAW_TEST_STORE=postgres`: `scripts/test` runs the store's tests
/// once on each backend).
#[cfg(test)]
pub(crate) fn testing_postgres() -> bool {
    std::env::var("METACLAW_TEST_STORE").is_ok_and(|v| v == "postgres")
}

/// A store for a test: the SQLite file at `path`, or, on the Postgres run,
/// a fresh database on the test process's throwaway cluster.
#[cfg(test)]
pub(crate) fn test_db(path: impl Into<std::path::PathBuf>) -> Db {
    if testing_postgres() {
        match metaclaw_pg_cluster::fresh_database() {
            Ok(url) => Db::postgres(&url),
            // The connection's error says it: infrastructure, not the test.
            Err(e) => Db::postgres(&format!("infrastructure: no test cluster: {e:#}")),
        }
    } else {
        Db::at(path)
    }
}

/// A migrated store for a test: in memory, or, on the Postgres run, a
/// fresh database.
#[cfg(test)]
pub(crate) fn memory() -> Conn {
    if testing_postgres() {
        return test_db("").side_writer().unwrap();
    }
    let mut conn = rusqlite::Connection::open_in_memory().unwrap();
    schema::configure(&conn).unwrap();
    schema::migrate(&mut conn).unwrap();
    Conn::from(conn)
}
