//! Which session a turn belongs to, and when sessions end.
//!
//! The session id comes from, in order: the `X-Session-Id` header or the
//! body's `session_id`; OpenClaw's `prompt_cache_key` (`<sessionId>:<N>`, a
//! new N being a reset); OpenClaw's runtime line `sessionId=<uuid>`; else a
//! hash of (model, system prompt, first user message). One conversation key
//! can span several *windows* (a reset keeps OpenClaw's sessionId): window 0
//! is recorded as `<key>`, window N as `<key>:<N>`, so a fresh OpenClaw
//! session is recorded under exactly its sessionId.
//!
//! A session ends on `X-Session-Done`, on `POST /v1/sessions/{id}/end`, on a
//! reset, or after `sessions.idle_timeout` without a main turn. Each end is
//! persisted (in order with the session's turns) and published on a
//! broadcast channel that later stages (learning) subscribe to.
//!
//! Several instances on one shared store (Postgres) serve one session's
//! turns as they come: the id is derived from the request alone, so every
//! instance names the session alike; its turns are numbered in the store
//! (its row's turn count, under the row's lock); an end is recorded once,
//! whichever instance ends it first; and an idle end looks at the store's
//! last activity, not only at the turns this instance served.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

use crate::agent_id::AgentId;
use crate::clock::LastActivity;
use crate::clock::now_ms;
use crate::metrics::Metrics;
pub use crate::store::TurnType;
use crate::store::sql::Backend;
use crate::store::{SessionInfo, SessionSource, Store, StoredSession};

/// Why a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// The client said so (`X-Session-Done` or `session_done`).
    ClientDone,
    /// `POST /v1/sessions/{id}/end`.
    Api,
    /// The agent started over (new `prompt_cache_key` boundary, or history
    /// shrank back).
    Reset,
    /// No main turn for `sessions.idle_timeout`.
    Idle,
    /// Held out of learning (`bench run --split`): scored, never learned
    /// from: no learning job, so nothing evolves from it and none of its
    /// samples is trained.
    HeldOut,
}

impl EndReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClientDone => "client_done",
            Self::Api => "api",
            Self::Reset => "reset",
            Self::Idle => "idle",
            Self::HeldOut => crate::store::jobs::HELD_OUT,
        }
    }
}

/// What [`Tracker::end`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndOutcome {
    Ended,
    AlreadyEnded,
    Unknown,
}

/// Published when a session ends.
#[derive(Debug, Clone)]
pub struct SessionEnded {
    pub session: SessionInfo,
    pub reason: EndReason,
    pub at_ms: i64,
}

/// What a request says about its session.
#[derive(Debug, Default)]
pub struct Hints<'a> {
    pub explicit: Option<(&'a str, SessionSource)>,
    pub prompt_cache_key: Option<&'a str>,
    pub runtime_session_id: Option<&'a str>,
    pub fingerprint: Option<&'a str>,
    pub message_count: u32,
    /// The agent the turn is for (`None`: the default agent).
    pub agent: Option<&'a AgentId>,
}

/// A turn names a session of another agent: refused, never mixed in.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "session {session} belongs to agent {owner}, not {agent}: name another session for agent {agent}"
)]
pub struct OtherAgent {
    pub session: String,
    pub owner: AgentId,
    pub agent: AgentId,
}

/// The live state of one conversation key.
struct Live {
    current: SessionInfo,
    last_activity: Instant,
    last_message_count: u32,
    in_flight: u32,
    /// The session's latest main turn, to tell a retry from a new turn.
    last_main: Option<LastMain>,
    /// Whether windows are detected by history shrinking (no explicit N).
    shrink_windows: bool,
}

impl Live {
    /// A session found open in the store, silent for `idle_ms`: timed from
    /// its last activity.
    fn resumed(info: SessionInfo, idle_ms: u64, last_message_count: u32) -> Self {
        Self {
            shrink_windows: matches!(
                info.source,
                SessionSource::OpenclawRuntime | SessionSource::Fingerprint
            ),
            current: info,
            last_activity: Instant::now()
                .checked_sub(Duration::from_millis(idle_ms))
                .unwrap_or_else(Instant::now),
            last_message_count,
            in_flight: 0,
            last_main: None,
        }
    }
}

/// The latest main turn of a live session.
struct LastMain {
    /// [`TurnAttempt::key`] of its request.
    key: u64,
    /// Its id, and the id of the turn's first attempt.
    id: Arc<str>,
    first: Arc<str>,
    number: u32,
    /// It ended without an answer (an error, a cut stream).
    failed: bool,
}

/// Which attempt of a turn a main turn is: agents re-send a request whose
/// answer failed (OpenClaw up to 8 times over ~2 minutes after a 500), and
/// each resend is the same turn again, not the user speaking again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnAttempt {
    /// 1 for a new turn.
    pub number: u32,
    /// The first attempt's turn id, for a retry.
    pub retry_of: Option<Arc<str>>,
}

impl TurnAttempt {
    pub const FIRST: Self = Self {
        number: 1,
        retry_of: None,
    };

    /// What makes two requests of a session the same request: the model,
    /// how many messages the conversation has and the user's last words.
    pub fn key(model: Option<&str>, message_count: u32, last_user_text: Option<&str>) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (model, message_count, last_user_text).hash(&mut h);
        h.finish()
    }
}

pub struct Tracker {
    live: Mutex<HashMap<Arc<str>, Live>>,
    idle_timeout: Duration,
    store: Store,
    metrics: Arc<Metrics>,
    events: broadcast::Sender<SessionEnded>,
    /// The user's last main turn, for the training scheduler.
    activity: LastActivity,
}

impl Tracker {
    pub fn new(store: Store, metrics: Arc<Metrics>, idle_timeout: Duration) -> Self {
        let (events, _) = broadcast::channel(1024);
        Self {
            live: Mutex::new(HashMap::new()),
            idle_timeout,
            store,
            metrics,
            events,
            activity: LastActivity::default(),
        }
    }

    /// When the user last used the agent (main turns only).
    pub fn activity(&self) -> LastActivity {
        self.activity.clone()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<SessionEnded> {
        self.events.subscribe()
    }

    pub fn idle_timeout(&self) -> Duration {
        self.idle_timeout
    }

    /// Picks up the sessions that were open when metaclaw last stopped: ends
    /// those idle for longer than the timeout, keeps timing the others.
    pub fn restore(&self) {
        let sessions = match self.store.active_sessions() {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("cannot read open sessions: {e:#}");
                return;
            }
        };
        let now_ms = now_ms();
        let mut ended = Vec::new();
        if let Ok(mut live) = self.live.lock() {
            for s in sessions {
                let info = stored_info(&s);
                let idle_ms = (now_ms - s.last_activity_ms).max(0) as u64;
                if Duration::from_millis(idle_ms) >= self.idle_timeout {
                    ended.push(info);
                    continue;
                }
                live.insert(
                    info.base_key.clone(),
                    Live::resumed(info, idle_ms, s.last_message_count),
                );
            }
        }
        for info in ended {
            self.publish_end(info, EndReason::Idle);
        }
    }

    /// The session of a new turn. Marks it in flight until [`Self::finished`].
    pub fn resolve(
        &self,
        hints: &Hints<'_>,
        turn_type: TurnType,
    ) -> Result<SessionInfo, OtherAgent> {
        let owner = hints.agent.cloned().unwrap_or_else(AgentId::default_agent);
        let (base, source, agent_id, window) = derive(hints);
        let asked = Asked {
            base: base.into(),
            source,
            agent_id,
            window,
            owner: &owner,
        };
        let now = Instant::now();
        let mut ended = Vec::new();

        let stored = self.stored_unless_known(&asked.base);
        let other = |session: &str, theirs: &AgentId| OtherAgent {
            session: session.to_string(),
            owner: theirs.clone(),
            agent: owner.clone(),
        };
        if let Some(s) = &stored
            && s.agent_id != owner
        {
            return Err(other(&s.id, &s.agent_id));
        }

        // Without the live table (a poisoned lock): the session as asked.
        let as_asked = || asked.info(window.unwrap_or(0));
        let info = {
            let Ok(mut live) = self.live.lock() else {
                return Ok(as_asked());
            };
            if let Some(entry) = live.get(&asked.base)
                && entry.current.agent != owner
            {
                return Err(other(&entry.current.id, &entry.current.agent));
            }
            if !live.contains_key(&asked.base) {
                self.first_sight(&mut live, &asked, stored.as_ref(), now);
            }
            let Some(entry) = live.get_mut(&asked.base) else {
                return Ok(as_asked());
            };
            let next_window = match next_window(entry, window, hints.message_count) {
                // A late request from an older window: record it there.
                Window::Older(n) => return Ok(asked.info(n)),
                Window::Next(n) => Some(n),
                Window::Same => None,
            };
            if let Some(n) = next_window {
                ended.push(entry.current.clone());
                entry.current = asked.info(n);
                self.metrics.sessions_started.inc();
            }
            entry.last_message_count = hints.message_count;
            entry.in_flight += 1;
            if turn_type == TurnType::Main {
                entry.last_activity = now;
                self.activity.bump();
            }
            entry.current.clone()
        };
        for old in ended {
            self.publish_end(old, EndReason::Reset);
        }
        Ok(info)
    }

    /// First sight of this key since start: continue where the store left
    /// off (windows, message counts), outside the lock.
    fn stored_unless_known(&self, base: &str) -> Option<StoredSession> {
        let known = self
            .live
            .lock()
            .map(|l| l.contains_key(base))
            .unwrap_or(false);
        if known {
            None
        } else {
            self.store.latest_for_base(base).ok().flatten()
        }
    }

    /// A key's live state at first sight (under the live table's lock, the
    /// caller's): from the store's latest session of it, if any.
    fn first_sight(
        &self,
        live: &mut HashMap<Arc<str>, Live>,
        asked: &Asked<'_>,
        stored: Option<&StoredSession>,
        now: Instant,
    ) {
        let (start_window, count) = stored
            .map(|s| (s.window, s.last_message_count))
            .unwrap_or((asked.window.unwrap_or(0), 0));
        live.insert(
            asked.base.clone(),
            Live {
                current: asked.info(start_window),
                last_activity: now,
                last_message_count: count,
                in_flight: 0,
                last_main: None,
                shrink_windows: asked.window.is_none()
                    && matches!(
                        asked.source,
                        SessionSource::OpenclawRuntime | SessionSource::Fingerprint
                    ),
            },
        );
        if stored.is_none_or(|s| s.status != "active") {
            self.metrics.sessions_started.inc();
        }
    }

    /// Which attempt main turn `turn_id` of `session` is: a retry when the
    /// session's previous main turn was the same request (`key`, see
    /// [`TurnAttempt::key`]) and failed.
    pub fn attempt(&self, session: &SessionInfo, key: u64, turn_id: &str) -> TurnAttempt {
        let Ok(mut live) = self.live.lock() else {
            return TurnAttempt::FIRST;
        };
        let Some(entry) = live
            .get_mut(&session.base_key)
            .filter(|e| e.current.id == session.id)
        else {
            return TurnAttempt::FIRST;
        };
        let id: Arc<str> = turn_id.into();
        let attempt = match &entry.last_main {
            Some(last) if last.key == key && last.failed => TurnAttempt {
                number: last.number + 1,
                retry_of: Some(last.first.clone()),
            },
            _ => TurnAttempt::FIRST,
        };
        entry.last_main = Some(LastMain {
            key,
            first: attempt.retry_of.clone().unwrap_or_else(|| id.clone()),
            id,
            number: attempt.number,
            failed: false,
        });
        attempt
    }

    /// Turn `turn_id` of `session` is over, answered or `failed`. Main turns
    /// restart the idle clock at their end, so a long answer does not count
    /// as silence.
    pub fn finished(
        &self,
        session: &SessionInfo,
        turn_type: TurnType,
        turn_id: &str,
        failed: bool,
    ) {
        if let Ok(mut live) = self.live.lock()
            && let Some(entry) = live.get_mut(&session.base_key)
        {
            entry.in_flight = entry.in_flight.saturating_sub(1);
            if turn_type == TurnType::Main && entry.current.id == session.id {
                entry.last_activity = Instant::now();
            }
            if turn_type == TurnType::Main {
                self.activity.bump();
            }
            if let Some(last) = entry.last_main.as_mut().filter(|l| &*l.id == turn_id) {
                last.failed = failed;
            }
        }
    }

    /// Ends a session by id.
    pub fn end(&self, id: &str, reason: EndReason) -> EndOutcome {
        let live_hit = self.live.lock().ok().and_then(|mut live| {
            let base = live
                .iter()
                .find(|(_, l)| &*l.current.id == id)
                .map(|(b, _)| b.clone())?;
            live.remove(&base).map(|l| l.current)
        });
        if let Some(info) = live_hit {
            self.publish_end(info, reason);
            return EndOutcome::Ended;
        }
        match self.store.session_by_id(id) {
            Ok(Some(s)) if s.status == "active" => {
                let info = stored_info(&s);
                self.publish_end(info, reason);
                EndOutcome::Ended
            }
            Ok(Some(_)) => EndOutcome::AlreadyEnded,
            _ => EndOutcome::Unknown,
        }
    }

    /// Ends sessions silent for longer than the idle timeout.
    pub fn sweep_idle(&self) {
        let now = Instant::now();
        let expired: Vec<SessionInfo> = match self.live.lock() {
            Ok(mut live) => {
                let keys: Vec<Arc<str>> = live
                    .iter()
                    .filter(|(_, l)| {
                        l.in_flight == 0 && now.duration_since(l.last_activity) >= self.idle_timeout
                    })
                    .map(|(k, _)| k.clone())
                    .collect();
                keys.iter()
                    .filter_map(|k| live.remove(k))
                    .map(|l| l.current)
                    .collect()
            }
            Err(_) => Vec::new(),
        };
        for info in self.idle_for_the_whole_deployment(expired) {
            self.publish_end(info, EndReason::Idle);
        }
    }

    /// On a shared store, a session silent here may be busy on another
    /// instance: it ends only when the store's last activity is older than
    /// the timeout too (else it is timed again from that activity), and
    /// not again if another instance ended it. Alone on its store, every
    /// turn passed through this instance: `expired` as it is.
    fn idle_for_the_whole_deployment(&self, expired: Vec<SessionInfo>) -> Vec<SessionInfo> {
        if expired.is_empty() || self.store.db().backend() != Backend::Postgres {
            return expired;
        }
        let now = now_ms();
        let mut ended = Vec::new();
        for info in expired {
            let stored = match self.store.session_by_id(&info.id) {
                Ok(stored) => stored,
                Err(e) => {
                    // Unreadable now: ended as seen here (an end is
                    // recorded once, whoever else ends it).
                    tracing::warn!(session = %info.id, "cannot read the session's last activity: {e:#}");
                    ended.push(info);
                    continue;
                }
            };
            let Some(stored) = stored else {
                ended.push(info);
                continue;
            };
            if stored.status != "active" {
                continue;
            }
            let idle_ms = (now - stored.last_activity_ms).max(0) as u64;
            if Duration::from_millis(idle_ms) >= self.idle_timeout {
                ended.push(info);
                continue;
            }
            if let Ok(mut live) = self.live.lock() {
                live.entry(info.base_key.clone())
                    .or_insert_with(|| Live::resumed(info, idle_ms, stored.last_message_count));
            }
        }
        ended
    }

    pub fn active_count(&self) -> usize {
        self.live.lock().map(|l| l.len()).unwrap_or(0)
    }

    fn publish_end(&self, session: SessionInfo, reason: EndReason) {
        let at_ms = now_ms();
        tracing::info!(session = %session.id, reason = reason.as_str(), "session ended");
        self.metrics.sessions_ended.inc(&[reason.as_str()]);
        self.store
            .end_session(session.clone(), reason.as_str(), at_ms);
        let _ = self.events.send(SessionEnded {
            session,
            reason,
            at_ms,
        });
    }
}

/// Longest session id kept as given; longer ones are replaced by a hash.
const MAX_ID_LEN: usize = 128;

/// A client-chosen id, bounded: it becomes a primary key and a header.
fn bounded_id(id: &str) -> String {
    if id.len() <= MAX_ID_LEN && !id.chars().any(char::is_control) {
        return id.to_string();
    }
    use sha2::Digest;
    let digest = sha2::Sha256::digest(id.as_bytes());
    format!("x-{}", &crate::digest::hex(&digest)[..24])
}

/// (conversation key, source, agent's session id, explicit window).
fn derive(hints: &Hints<'_>) -> (String, SessionSource, Option<Arc<str>>, Option<u32>) {
    if let Some((id, source)) = hints.explicit {
        return (bounded_id(id), source, None, Some(0));
    }
    if let Some((sid, n)) = hints
        .prompt_cache_key
        .and_then(metaclaw_wire::agent::openclaw::split_prompt_cache_key)
    {
        let sid = bounded_id(sid);
        return (
            sid.clone(),
            SessionSource::PromptCacheKey,
            Some(sid.into()),
            Some(n),
        );
    }
    if let Some(sid) = hints.runtime_session_id {
        return (
            sid.to_string(),
            SessionSource::OpenclawRuntime,
            Some(sid.into()),
            None,
        );
    }
    (
        hints
            .fingerprint
            .unwrap_or("h-0000000000000000")
            .to_string(),
        SessionSource::Fingerprint,
        None,
        None,
    )
}

/// What a turn's hints ask for: its conversation key, where it comes
/// from, and its window when the hints say.
struct Asked<'a> {
    base: Arc<str>,
    source: SessionSource,
    agent_id: Option<Arc<str>>,
    window: Option<u32>,
    owner: &'a AgentId,
}

impl Asked<'_> {
    /// The session of window `window` of the key asked for.
    fn info(&self, window: u32) -> SessionInfo {
        session_info(
            &self.base,
            self.source,
            self.agent_id.clone(),
            window,
            self.owner,
        )
    }
}

/// Which window a turn goes to, against its key's current one.
enum Window {
    Same,
    /// A new one: the current session ends.
    Next(u32),
    /// An older one (a late request).
    Older(u32),
}

/// The window a turn with `message_count` messages goes to: the one its
/// hints say, else a new one when windows are told by the history
/// shrinking and it shrank.
fn next_window(entry: &Live, window: Option<u32>, message_count: u32) -> Window {
    let current_window = entry.current.window;
    match window {
        // prompt_cache_key: the boundary count is the window.
        Some(n) if n > current_window => Window::Next(n),
        Some(n) if n < current_window => Window::Older(n),
        Some(_) => Window::Same,
        None if entry.shrink_windows && message_count < entry.last_message_count => {
            Window::Next(current_window + 1)
        }
        None => Window::Same,
    }
}

fn session_info(
    base: &Arc<str>,
    source: SessionSource,
    agent: Option<Arc<str>>,
    window: u32,
    owner: &AgentId,
) -> SessionInfo {
    let id: Arc<str> = if window == 0 {
        base.clone()
    } else {
        format!("{base}:{window}").into()
    };
    SessionInfo {
        id,
        base_key: base.clone(),
        agent: owner.clone(),
        agent_session_id: agent,
        source,
        window,
    }
}

/// A session as the store remembers it.
fn stored_info(s: &StoredSession) -> SessionInfo {
    SessionInfo {
        id: s.id.as_str().into(),
        base_key: s.base_key.as_str().into(),
        agent: s.agent_id.clone(),
        agent_session_id: s.agent_session_id.as_deref().map(Into::into),
        source: source_from_str(&s.source),
        window: s.window,
    }
}

fn source_from_str(s: &str) -> SessionSource {
    match s {
        "header" => SessionSource::Header,
        "body" => SessionSource::Body,
        "prompt_cache_key" => SessionSource::PromptCacheKey,
        "openclaw_runtime" => SessionSource::OpenclawRuntime,
        _ => SessionSource::Fingerprint,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redact::Redactor;
    use crate::store::StoreOptions;

    fn tracker(dir: &tempfile::TempDir, idle: Duration) -> (Tracker, Store) {
        let metrics = Arc::new(Metrics::new());
        let (store, _h) = Store::open(
            StoreOptions {
                db: crate::store::test_db(dir.path().join("t.db")),
                commit_interval: Duration::from_millis(10),
                queue_capacity: 64,
                redactor: Redactor::new([]),
                on_recorded: None,
                queue_learning: true,
            },
            metrics.clone(),
        )
        .unwrap();
        (Tracker::new(store.clone(), metrics, idle), store)
    }

    fn hints<'a>(pck: Option<&'a str>, runtime: Option<&'a str>, count: u32) -> Hints<'a> {
        Hints {
            prompt_cache_key: pck,
            runtime_session_id: runtime,
            fingerprint: Some("h-abc"),
            message_count: count,
            ..Hints::default()
        }
    }

    /// The training scheduler's agent-idle signal: heartbeats and other
    /// side turns are the agent's background work, not the user.
    #[tokio::test]
    async fn side_turns_and_heartbeats_do_not_count_as_the_users_activity() {
        let dir = tempfile::tempdir().unwrap();
        let (t, _s) = tracker(&dir, Duration::from_secs(60));
        let activity = t.activity();
        for _ in 0..3 {
            let s = t
                .resolve(&hints(Some("sid-1:0"), None, 1), TurnType::Side)
                .unwrap();
            t.finished(&s, TurnType::Side, "side", false);
        }
        assert_eq!(
            activity.at_ms(),
            None,
            "side turns moved the user's activity"
        );
        let before = crate::clock::now_ms();
        let s = t
            .resolve(&hints(Some("sid-1:0"), None, 2), TurnType::Main)
            .unwrap();
        assert!(activity.at_ms().unwrap() >= before);
        t.finished(&s, TurnType::Main, "main", false);
        assert!(activity.at_ms().unwrap() >= before);
    }

    #[tokio::test]
    async fn prompt_cache_key_boundaries_are_windows_and_resets() {
        let dir = tempfile::tempdir().unwrap();
        let (t, _s) = tracker(&dir, Duration::from_secs(60));
        let mut events = t.subscribe();
        let a = t
            .resolve(&hints(Some("sid-1:0"), None, 1), TurnType::Main)
            .unwrap();
        assert_eq!(&*a.id, "sid-1");
        assert_eq!(a.agent_session_id.as_deref(), Some("sid-1"));
        let b = t
            .resolve(&hints(Some("sid-1:0"), None, 3), TurnType::Main)
            .unwrap();
        assert_eq!(b.id, a.id);
        let c = t
            .resolve(&hints(Some("sid-1:1"), None, 1), TurnType::Main)
            .unwrap();
        assert_eq!(&*c.id, "sid-1:1");
        let ended = events.recv().await.unwrap();
        assert_eq!(&*ended.session.id, "sid-1");
        assert_eq!(ended.reason, EndReason::Reset);
    }

    #[tokio::test]
    async fn a_shrinking_history_opens_a_new_window() {
        let dir = tempfile::tempdir().unwrap();
        let (t, _s) = tracker(&dir, Duration::from_secs(60));
        let id = "1a206f6b-47b6-464c-86db-730d5d7b0316";
        assert_eq!(
            &*t.resolve(&hints(None, Some(id), 1), TurnType::Main)
                .unwrap()
                .id,
            id
        );
        assert_eq!(
            &*t.resolve(&hints(None, Some(id), 3), TurnType::Main)
                .unwrap()
                .id,
            id
        );
        let reset = t
            .resolve(&hints(None, Some(id), 1), TurnType::Main)
            .unwrap();
        assert_eq!(&*reset.id, format!("{id}:1"));
    }

    #[tokio::test]
    async fn overlong_or_odd_ids_are_hashed_not_stored_as_given() {
        let dir = tempfile::tempdir().unwrap();
        let (t, _s) = tracker(&dir, Duration::from_secs(60));
        let long = "x".repeat(10_000);
        let h = Hints {
            explicit: Some((&long, SessionSource::Header)),
            ..Hints::default()
        };
        let id = t.resolve(&h, TurnType::Main).unwrap().id;
        assert!(id.starts_with("x-") && id.len() == 26, "{id}");
        let h = Hints {
            explicit: Some(("a\nb", SessionSource::Header)),
            ..Hints::default()
        };
        assert!(t.resolve(&h, TurnType::Main).unwrap().id.starts_with("x-"));
        // Stable: the same long id is the same session.
        let h = Hints {
            explicit: Some((&long, SessionSource::Header)),
            ..Hints::default()
        };
        assert_eq!(t.resolve(&h, TurnType::Main).unwrap().id, id);
    }

    #[tokio::test]
    async fn explicit_ids_win_and_never_split() {
        let dir = tempfile::tempdir().unwrap();
        let (t, _s) = tracker(&dir, Duration::from_secs(60));
        let h = Hints {
            explicit: Some(("mine", SessionSource::Header)),
            prompt_cache_key: Some("x:3"),
            message_count: 5,
            ..Hints::default()
        };
        assert_eq!(&*t.resolve(&h, TurnType::Main).unwrap().id, "mine");
        let h = Hints {
            explicit: Some(("mine", SessionSource::Header)),
            message_count: 1,
            ..Hints::default()
        };
        assert_eq!(&*t.resolve(&h, TurnType::Main).unwrap().id, "mine");
    }

    /// Two instances on one store both end a session they served (each saw
    /// the client's end, or a reset): it is ended once and learned from
    /// once.
    #[tokio::test]
    async fn a_session_ended_by_two_instances_is_ended_and_queued_once() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::store::test_db(dir.path().join("t.db"));
        let metrics = Arc::new(Metrics::new());
        let open = || {
            Store::open(
                StoreOptions {
                    db: db.clone(),
                    commit_interval: Duration::from_millis(10),
                    queue_capacity: 64,
                    redactor: Redactor::new([]),
                    on_recorded: None,
                    queue_learning: true,
                },
                metrics.clone(),
            )
            .unwrap()
            .0
        };
        let (a, b) = (open(), open());
        let idle = Duration::from_secs(60);
        let (ta, tb) = (
            Tracker::new(a.clone(), metrics.clone(), idle),
            Tracker::new(b.clone(), metrics.clone(), idle),
        );
        let h = hints(Some("shared:0"), None, 1);
        let sa = ta.resolve(&h, TurnType::Main).unwrap();
        let sb = tb.resolve(&h, TurnType::Main).unwrap();
        assert_eq!(sa.id, sb.id, "both instances name the session alike");
        assert_eq!(ta.end(&sa.id, EndReason::Api), EndOutcome::Ended);
        a.flush().await;
        assert_eq!(tb.end(&sb.id, EndReason::Api), EndOutcome::Ended);
        b.flush().await;
        let conn = db.read().unwrap();
        let ends: i64 = conn
            .query_row(
                "SELECT count(*) FROM session_events WHERE session_id = ?1 AND kind = 'ended'",
                [&*sa.id],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(ends, 1, "the end is recorded once");
        let job = crate::store::jobs::get(&conn, &sa.id).unwrap().unwrap();
        assert_eq!(
            (job.round, job.state),
            (1, crate::store::jobs::JobState::Queued),
            "one job, one round"
        );
    }

    #[tokio::test]
    async fn a_resend_of_a_failed_request_is_an_attempt_of_the_same_turn() {
        let dir = tempfile::tempdir().unwrap();
        let (t, _s) = tracker(&dir, Duration::from_secs(60));
        let s = t
            .resolve(&hints(Some("retry:0"), None, 3), TurnType::Main)
            .unwrap();
        let key = TurnAttempt::key(Some("m"), 3, Some("fix the build"));
        assert_eq!(t.attempt(&s, key, "t1"), TurnAttempt::FIRST);
        t.finished(&s, TurnType::Main, "t1", true);
        // The same request again, twice, after failures: attempts 2 and 3
        // of turn t1.
        let s = t
            .resolve(&hints(Some("retry:0"), None, 3), TurnType::Main)
            .unwrap();
        let second = t.attempt(&s, key, "t2");
        assert_eq!((second.number, second.retry_of.as_deref()), (2, Some("t1")));
        t.finished(&s, TurnType::Main, "t2", true);
        let third = t.attempt(&s, key, "t3");
        assert_eq!((third.number, third.retry_of.as_deref()), (3, Some("t1")));
        t.finished(&s, TurnType::Main, "t3", false);
        // Answered: the same words again are the user asking again.
        assert_eq!(t.attempt(&s, key, "t4"), TurnAttempt::FIRST);
        t.finished(&s, TurnType::Main, "t4", true);
        // A different request after a failure is a new turn.
        let other = TurnAttempt::key(Some("m"), 5, Some("fix the build"));
        assert_eq!(t.attempt(&s, other, "t5"), TurnAttempt::FIRST);
    }

    #[tokio::test]
    async fn idle_sessions_end_but_not_while_a_turn_is_in_flight() {
        let dir = tempfile::tempdir().unwrap();
        let (t, _s) = tracker(&dir, Duration::from_millis(50));
        let mut events = t.subscribe();
        let s = t
            .resolve(&hints(Some("busy:0"), None, 1), TurnType::Main)
            .unwrap();
        tokio::time::sleep(Duration::from_millis(80)).await;
        t.sweep_idle();
        assert_eq!(t.active_count(), 1, "in flight: not idle");
        t.finished(&s, TurnType::Main, "", false);
        tokio::time::sleep(Duration::from_millis(80)).await;
        t.sweep_idle();
        assert_eq!(t.active_count(), 0);
        assert_eq!(events.recv().await.unwrap().reason, EndReason::Idle);
    }

    #[tokio::test]
    async fn side_turns_do_not_keep_a_session_alive() {
        let dir = tempfile::tempdir().unwrap();
        let (t, _s) = tracker(&dir, Duration::from_millis(60));
        let s = t
            .resolve(&hints(Some("hb:0"), None, 1), TurnType::Main)
            .unwrap();
        t.finished(&s, TurnType::Main, "", false);
        tokio::time::sleep(Duration::from_millis(40)).await;
        let side = t
            .resolve(&hints(Some("hb:0"), None, 2), TurnType::Side)
            .unwrap();
        t.finished(&side, TurnType::Side, "", false);
        tokio::time::sleep(Duration::from_millis(40)).await;
        t.sweep_idle();
        assert_eq!(t.active_count(), 0);
    }

    #[tokio::test]
    async fn ending_by_id_reports_unknown_and_repeated_ends() {
        let dir = tempfile::tempdir().unwrap();
        let (t, store) = tracker(&dir, Duration::from_secs(60));
        let s = t
            .resolve(&hints(Some("e:0"), None, 1), TurnType::Main)
            .unwrap();
        t.finished(&s, TurnType::Main, "", false);
        assert_eq!(t.end("e", EndReason::Api), EndOutcome::Ended);
        store.flush().await;
        assert_eq!(t.end("e", EndReason::Api), EndOutcome::AlreadyEnded);
        assert_eq!(t.end("nope", EndReason::Api), EndOutcome::Unknown);
    }
}
