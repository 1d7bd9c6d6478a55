//! The writer thread: the only code that writes the database. It takes
//! whatever is queued, turns each record into rows (the values it keeps
//! parsed and redacted, blobs deduplicated) and commits the batch. What a
//! request's parts are, the proxy said when it queued the turn.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::store::sql::{Conn, Optional, Tx, params, retry_contended};
use bytes::Bytes;
use metaclaw_wire::recorded::Completion;
use serde_json::{Map, Value};

use tokio::sync::OwnedSemaphorePermit;

use super::{Capture, Op, RecordedRequest, ServedBy, TurnRecord, TurnStatus, TurnType};
use crate::digest::sha256_hex;
use crate::metrics::Metrics;
use crate::redact::Redactor;

const MAX_BATCH: usize = 1024;
const KNOWN_BLOBS_CAP: usize = 200_000;
const SUMMARY_CHARS: usize = 200;

pub struct Writer {
    conn: Conn,
    redactor: Redactor,
    commit_interval: Duration,
    metrics: Arc<Metrics>,
    /// Blob hashes known to be stored, so a repeated 50 KB system prompt is
    /// neither redacted nor written again.
    known_blobs: HashSet<String>,
    recent: RecentBlobs,
    /// Told about each committed turn and session end (per-turn scoring
    /// listens).
    on_recorded: Option<std::sync::mpsc::Sender<super::Committed>>,
    /// An ended session gets its learning job.
    queue_learning: bool,
}

/// A record turned into rows, ready to insert.
struct Prepared {
    blobs: Vec<(String, String)>,
    message_hashes: Vec<String>,
    tools_blob: Option<String>,
    params: String,
    response: Option<String>,
    usage: Option<String>,
    user_summary: Option<String>,
    response_summary: Option<String>,
    status: TurnStatus,
    /// A main turn's scorer input: its latest messages and its answer.
    scoring: Option<(Vec<Value>, Option<Value>)>,
    /// Why a student turn's tokens are not kept (they cannot be redacted).
    withheld: Option<String>,
    /// The sibling answers kept (by index; none when the turn's tokens are
    /// withheld, and not one whose answer held a secret), redacted.
    siblings: Vec<(usize, Value)>,
}

impl Writer {
    pub fn new(
        conn: Conn,
        redactor: Redactor,
        commit_interval: Duration,
        metrics: Arc<Metrics>,
        on_recorded: Option<std::sync::mpsc::Sender<super::Committed>>,
        queue_learning: bool,
    ) -> Self {
        Self {
            conn,
            redactor,
            commit_interval,
            metrics,
            known_blobs: HashSet::new(),
            recent: RecentBlobs::default(),
            on_recorded,
            queue_learning,
        }
    }

    /// Group commit: after the first record arrives, keep collecting for
    /// up to `commit_interval` (or until someone waits on a flush), then
    /// write everything in one transaction. Under load that is one commit
    /// and one wake-up per interval instead of one per turn.
    ///
    /// The writer runs at the serving threads' priority, not niced like
    /// learning: a delivered turn must be durable within about
    /// `commit_interval` on a busy machine too. At nice 10 two busy
    /// processes left it ~5% of a core, a 666 ms backlog at a `kill -9`
    /// (`crash_e2e`); its work is small (85 µs per 60 KB turn).
    pub fn run(mut self, rx: Receiver<Op>) {
        while let Ok(first) = rx.recv() {
            let opened = Instant::now();
            let mut urgent = first.is_urgent();
            let mut batch = vec![first];
            while !urgent && batch.len() < MAX_BATCH {
                let remaining = self.commit_interval.saturating_sub(opened.elapsed());
                if remaining.is_zero() {
                    break;
                }
                match rx.recv_timeout(remaining) {
                    Ok(op) => {
                        urgent = op.is_urgent();
                        batch.push(op);
                    }
                    Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
                }
            }
            if self.write_batch(batch) {
                return;
            }
        }
    }

    /// Writes one batch (retrying a failed commit a few times) and releases
    /// its permits and waiters. Returns true on shutdown.
    fn write_batch(&mut self, batch: Vec<Op>) -> bool {
        let mut permits: Vec<OwnedSemaphorePermit> = Vec::new();
        let mut waiters = Vec::new();
        let mut shutdown = None;
        let mut turns = Vec::new();
        let mut ends = Vec::new();
        let mut rewards = Vec::new();
        for op in batch {
            match op {
                Op::Rewards {
                    turn_id,
                    rewards: r,
                    at_ms,
                } => rewards.push((turn_id, r, at_ms)),
                Op::Turn(turn, permit) => {
                    permits.extend(permit);
                    let prepared = self.prepare(&turn);
                    turns.push((turn, prepared));
                }
                Op::EndSession {
                    session,
                    reason,
                    at_ms,
                } => ends.push((session, reason, at_ms)),
                Op::Flush(done) => waiters.push(done),
                Op::Shutdown(done) => shutdown = Some(done),
            }
        }
        // Ends are applied after the turns of the same batch: a session's end
        // is always queued after its turns.
        let mut attempt = 0;
        loop {
            attempt += 1;
            // A deadlock with another instance's writer (a shared store):
            // Postgres aborted this batch to let the other on; it is tried
            // again at once (with jitter), not counted as a failure.
            let committed = retry_contended(
                |e: &crate::store::sql::Error| {
                    let contended = e.is_contention();
                    if contended {
                        tracing::warn!("store commit refused for contention (retrying): {e}");
                    }
                    contended
                },
                || self.commit(&turns, &ends, &rewards),
            );
            match committed {
                Ok((seqs, ended)) => {
                    if let Some(tx) = &self.on_recorded {
                        for ((turn, prepared), seq) in turns.iter_mut().zip(seqs) {
                            if let Some(seq) = seq {
                                let scoring =
                                    prepared.scoring.take().map(|(messages, response)| {
                                        Arc::new(super::ScoringInput {
                                            turn_id: turn.id.clone(),
                                            session_id: turn.session.id.to_string(),
                                            seq,
                                            status: prepared.status.as_str().to_string(),
                                            turn_type: turn.turn_type.as_str().to_string(),
                                            messages,
                                            response,
                                        })
                                    });
                                let _ = tx.send(super::Committed::Turn(super::Recorded {
                                    turn_id: turn.id.clone(),
                                    session_id: turn.session.id.clone(),
                                    turn_type: turn.turn_type,
                                    seq,
                                    retry: turn.retry_of.is_some(),
                                    scoring,
                                }));
                            }
                        }
                        for ((session, _, _), ended) in ends.iter().zip(ended) {
                            if ended {
                                let _ = tx.send(super::Committed::SessionEnd(session.id.clone()));
                            }
                        }
                    }
                    for (_, p) in &turns {
                        for (hash, _) in &p.blobs {
                            self.remember_blob(hash.clone());
                        }
                    }
                    self.metrics.turns_recorded.add(turns.len() as u64);
                    break;
                }
                Err(e) if attempt < 5 => {
                    self.metrics.store_errors.inc();
                    tracing::error!("store commit failed (attempt {attempt}, retrying): {e}");
                    std::thread::sleep(Duration::from_millis(200 * attempt));
                }
                Err(e) => {
                    self.metrics.store_errors.inc();
                    self.metrics.turns_unrecorded.add(turns.len() as u64);
                    // Blobs of this batch were never stored: forget them.
                    self.recent.clear();
                    tracing::error!("store commit failed, {} turns lost: {e}", turns.len());
                    break;
                }
            }
        }
        drop(permits);
        for w in waiters {
            let _ = w.send(());
        }
        if let Some(done) = shutdown {
            if let Some(sqlite) = self.conn.sqlite() {
                let _ = sqlite.pragma_update(None, "wal_checkpoint", "TRUNCATE");
            }
            let _ = done.send(());
            return true;
        }
        false
    }

    fn remember_blob(&mut self, hash: String) {
        if self.known_blobs.len() >= KNOWN_BLOBS_CAP {
            self.known_blobs.clear();
        }
        self.known_blobs.insert(hash);
    }

    fn commit(
        &mut self,
        turns: &[(Box<TurnRecord>, Prepared)],
        ends: &[(super::SessionInfo, String, i64)],
        rewards: &[(String, Vec<super::RewardRecord>, i64)],
    ) -> crate::store::sql::Result<(Vec<Option<i64>>, Vec<bool>)> {
        let tx = self.conn.transaction()?;
        // Rows other instances' writers also lock (a shared store) are
        // taken in one order, so that two batches rarely deadlock: the
        // batch's new blobs by hash first, then each session's rows in
        // session order (a session's turns, then its end, in the order
        // they came), the skills' sums last, in key order.
        let mut blobs: Vec<&(String, String)> =
            turns.iter().flat_map(|(_, p)| p.blobs.iter()).collect();
        blobs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        blobs.dedup_by(|a, b| a.0 == b.0);
        insert_blobs(&tx, blobs)?;
        let order = session_order(turns, |(t, _)| &t.session.id);
        let mut seqs = vec![None; turns.len()];
        // The skills' sums move last (outcomes::Pending): a bad record's
        // moves are dropped with its rows.
        let mut sums = super::outcomes::Pending::new();
        for i in order {
            let (turn, prepared) = &turns[i];
            // One bad record must not sink the batch: its rows are undone
            // alone (Postgres aborts the whole transaction at an error
            // unless it is rolled back to a savepoint). Contention is not a
            // bad record: the whole batch is tried again.
            tx.execute_batch("SAVEPOINT turn")?;
            let mut moved = super::outcomes::Pending::new();
            match insert_turn(&tx, turn, prepared, &mut moved) {
                Ok(seq) => {
                    tx.execute_batch("RELEASE SAVEPOINT turn")?;
                    seqs[i] = Some(seq);
                    sums.merge(moved);
                }
                Err(e) if e.is_contention() => return Err(e),
                Err(e) => {
                    tx.execute_batch("ROLLBACK TO SAVEPOINT turn; RELEASE SAVEPOINT turn")?;
                    tracing::error!(turn = %turn.id, "cannot record turn: {e}");
                }
            }
        }
        let order = session_order(ends, |(session, _, _)| &session.id);
        let mut ended = vec![false; ends.len()];
        for i in order {
            let (session, reason, at_ms) = &ends[i];
            ended[i] = insert_end(&tx, session, reason, *at_ms, self.queue_learning)?;
        }
        for (turn_id, list, at_ms) in rewards {
            insert_rewards(&tx, turn_id, list, *at_ms)?;
        }
        sums.apply(&tx)?;
        tx.commit()?;
        Ok((seqs, ended))
    }

    fn prepare(&mut self, turn: &TurnRecord) -> Prepared {
        let mut blobs = Vec::new();
        let (message_hashes, tools_blob) = self.request_blobs(&turn.request, &mut blobs);
        let params = self.request_params(&turn.request);
        let (status, response, redacted_answer) = self.read_response(turn);
        let withheld = self.withheld(turn, redacted_answer);
        let siblings = self.kept_siblings(turn, &withheld);
        let scoring = self.scoring(turn, &response);
        let usage = response
            .as_ref()
            .and_then(|r| r.get("usage"))
            .filter(|u| !u.is_null())
            .map(Value::to_string);
        let response_summary = response
            .as_ref()
            .map(summarize_response)
            .filter(|s| !s.is_empty());
        Prepared {
            blobs,
            message_hashes,
            tools_blob,
            params: params.to_string(),
            response: response.map(|v| v.to_string()),
            usage,
            user_summary: turn
                .user_text
                .as_deref()
                .filter(|s| !s.is_empty())
                .map(|s| truncate(&self.redactor.redact_str(s), SUMMARY_CHARS)),
            response_summary: response_summary.map(|s| truncate(&s, SUMMARY_CHARS)),
            status,
            scoring,
            withheld,
            siblings,
        }
    }

    /// The request's messages and tool list as blobs (new ones added to
    /// `blobs`): the messages' hashes, and the tool list's.
    fn request_blobs(
        &mut self,
        request: &RecordedRequest,
        blobs: &mut Vec<(String, String)>,
    ) -> (Vec<String>, Option<String>) {
        let body = &request.body;
        let mut message_hashes = Vec::new();
        let mut tools_blob = None;
        for message in &request.messages {
            message_hashes.push(self.blob(body, json_at(body, message), blobs));
        }
        if let Some(tools) = &request.tools {
            tools_blob = Some(self.blob(body, json_at(body, tools), blobs));
        }
        (message_hashes, tools_blob)
    }

    /// The request's other parameters, redacted.
    fn request_params(&self, request: &RecordedRequest) -> Value {
        let mut params = Map::new();
        for (name, value) in &request.params {
            params.insert(
                name.clone(),
                serde_json::from_str(json_at(&request.body, value)).unwrap_or(Value::Null),
            );
        }
        let mut params = Value::Object(params);
        self.redactor.redact_json(&mut params);
        params
    }

    /// The answer as read (redacted), the turn's status (an answer that
    /// did not finish makes an ok turn incomplete), and whether redaction
    /// changed a student's answer.
    fn read_response(&self, turn: &TurnRecord) -> (TurnStatus, Option<Value>, bool) {
        let mut status = turn.status;
        let response = match &turn.response {
            Capture::None => None,
            Capture::Answer { bytes, read } => {
                let (value, done) = read(bytes);
                let finished = Completion::read(&value).finished();
                if status == TurnStatus::Ok && !done && !finished {
                    status = TurnStatus::Incomplete;
                }
                Some(value)
            }
        };
        let mut redacted_answer = false;
        let response = response.map(|mut v| {
            let before = matches!(turn.served_by, ServedBy::Student(_)).then(|| v.clone());
            self.redactor.redact_json(&mut v);
            redacted_answer = before.is_some_and(|b| b != v);
            v
        });
        (status, response, redacted_answer)
    }

    /// Token ids cannot be redacted: a student turn whose prompt or
    /// answer held a secret keeps its sample's metadata but no tokens.
    fn withheld(&self, turn: &TurnRecord, redacted_answer: bool) -> Option<String> {
        let request = &turn.request;
        match &turn.served_by {
            ServedBy::Student(_) => {
                let secret_in_prompt = request.messages.iter().any(|m| {
                    let text = json_at(&request.body, m);
                    self.redactor.redact_str(text) != text
                });
                (secret_in_prompt || redacted_answer)
                    .then(|| "a secret was redacted from the prompt or the answer".to_string())
            }
            _ => None,
        }
    }

    /// A student turn's sibling answers that held no secret, by index
    /// (none when its tokens are withheld).
    fn kept_siblings(&self, turn: &TurnRecord, withheld: &Option<String>) -> Vec<(usize, Value)> {
        match (&turn.served_by, withheld) {
            (ServedBy::Student(sample), None) => sample
                .siblings
                .iter()
                .enumerate()
                .filter_map(|(i, sibling)| {
                    let mut message = sibling.message.clone();
                    self.redactor.redact_json(&mut message);
                    (message == sibling.message).then_some((i, message))
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Only main turns are scored, and only when someone listens.
    fn scoring(
        &self,
        turn: &TurnRecord,
        response: &Option<Value>,
    ) -> Option<(Vec<Value>, Option<Value>)> {
        let request = &turn.request;
        (self.on_recorded.is_some() && turn.turn_type == TurnType::Main).then(|| {
            let messages = request
                .scored
                .iter()
                .filter_map(|&i| request.messages.get(i))
                .map(|range| {
                    let mut value: Value =
                        serde_json::from_str(json_at(&request.body, range)).unwrap_or(Value::Null);
                    self.redactor.redact_json(&mut value);
                    value
                })
                .collect();
            (messages, response.clone())
        })
    }

    /// The blob hash of a raw JSON value (sha256 of its bytes as the agent
    /// sent them), queuing the redacted blob if it is new. A value seen
    /// recently (the same system prompt, turn after turn) is recognised by
    /// comparing bytes, without hashing it again.
    fn blob(&mut self, body: &Bytes, json: &str, blobs: &mut Vec<(String, String)>) -> String {
        let bytes = json.as_bytes();
        if let Some(hash) = self.recent.find(bytes) {
            return hash;
        }
        let hash = sha256_hex(bytes);
        if !self.known_blobs.contains(&hash) && !blobs.iter().any(|(h, _)| *h == hash) {
            let mut value: Value = serde_json::from_str(json).unwrap_or(Value::Null);
            self.redactor.redact_json(&mut value);
            blobs.push((hash.clone(), value.to_string()));
        }
        if let Some(slice) = subslice(body, bytes) {
            self.recent.insert(slice, hash.clone());
        }
        hash
    }
}

/// `part` as a zero-copy slice of `whole`, if it lies inside it.
fn subslice(whole: &Bytes, part: &[u8]) -> Option<Bytes> {
    let start = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    let end = start.checked_add(part.len())?;
    (end <= whole.len()).then(|| whole.slice(start..end))
}

/// Recently stored blobs, by their bytes: a cheap "seen it" for the values
/// an agent resends on every call.
#[derive(Default)]
struct RecentBlobs {
    entries: std::collections::VecDeque<(Bytes, String)>,
}

impl RecentBlobs {
    const CAP: usize = 64;

    fn find(&mut self, bytes: &[u8]) -> Option<String> {
        let i = self
            .entries
            .iter()
            .position(|(b, _)| b.len() == bytes.len() && b.as_ref() == bytes)?;
        let entry = self.entries.remove(i)?;
        let hash = entry.1.clone();
        self.entries.push_front(entry);
        Some(hash)
    }

    fn insert(&mut self, bytes: Bytes, hash: String) {
        if self.entries.len() >= Self::CAP {
            self.entries.pop_back();
        }
        self.entries.push_front((bytes, hash));
    }

    fn clear(&mut self) {
        self.entries.clear();
    }
}

/// The indices of `items` in the order of their sessions' ids (stable:
/// one session's items stay in the order they came).
fn session_order<T>(items: &[T], session: impl Fn(&T) -> &str) -> Vec<usize> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|&a, &b| session(&items[a]).cmp(session(&items[b])));
    order
}

/// The JSON text at `range` of a request's body (`null` where it is not
/// text).
fn json_at<'a>(body: &'a [u8], range: &Range<usize>) -> &'a str {
    body.get(range.clone())
        .and_then(|b| std::str::from_utf8(b).ok())
        .unwrap_or("null")
}

fn insert_rewards(
    tx: &Tx<'_>,
    turn_id: &str,
    rewards: &[super::RewardRecord],
    at_ms: i64,
) -> crate::store::sql::Result<()> {
    super::learning::store_rewards(tx, turn_id, rewards, at_ms).map(drop)
}

/// A turn's rows (its blobs are in already: [`insert_blobs`]).
fn insert_turn(
    tx: &Tx<'_>,
    t: &TurnRecord,
    p: &Prepared,
    sums: &mut super::outcomes::Pending,
) -> crate::store::sql::Result<i64> {
    // A retry is the same turn again: it replaces the attempts before it.
    let main = i64::from(t.turn_type == TurnType::Main && t.retry_of.is_none());
    if let Some(first) = &t.retry_of {
        replace_attempts(tx, t, first, sums)?;
    }
    let seq = upsert_session(tx, t, main)?;
    insert_turn_row(tx, t, p, seq)?;
    record_turn_parts(tx, t, p, sums)?;
    Ok(seq)
}

fn insert_blobs<'b>(
    tx: &Tx<'_>,
    blobs: impl IntoIterator<Item = &'b (String, String)>,
) -> crate::store::sql::Result<()> {
    let mut stmt = tx.prepare_cached("INSERT OR IGNORE INTO blobs (hash, json) VALUES (?1, ?2)")?;
    for (hash, json) in blobs {
        stmt.execute(params![hash, json])?;
    }
    Ok(())
}

/// The attempts before a retry (from its `first`) are no longer main turns.
fn replace_attempts(
    tx: &Tx<'_>,
    t: &TurnRecord,
    first: &str,
    sums: &mut super::outcomes::Pending,
) -> crate::store::sql::Result<()> {
    super::outcomes::turns_replaced(tx, sums, &t.session.id, first)?;
    tx.prepare_cached(
        "UPDATE turns SET turn_type = ?3
         WHERE session_id = ?1 AND turn_type = ?4 AND (id = ?2 OR retry_of = ?2)",
    )?
    .execute(params![
        &*t.session.id,
        first,
        TurnType::Retried.as_str(),
        TurnType::Main.as_str()
    ])?;
    Ok(())
}

/// The turn's session, created or updated; the turn's place in it.
/// A turn that started after its session ended reopens it (the agent came
/// back to the conversation); one still in flight at the end does not.
fn upsert_session(tx: &Tx<'_>, t: &TurnRecord, main: i64) -> crate::store::sql::Result<i64> {
    tx.prepare_cached(
        "INSERT INTO sessions (id, base_key, agent_session_id, source, window_index, status,
                               started_at_ms, last_activity_ms, turn_count, main_turns, last_message_count,
                               agent, agent_id)
         VALUES (?1, ?2, ?3, ?4, ?5, 'active', ?6, ?7, 1, ?8, ?9, ?10, ?11)
         ON CONFLICT(id) DO UPDATE SET
             agent = coalesce(sessions.agent, excluded.agent),
             last_activity_ms = max(sessions.last_activity_ms, excluded.last_activity_ms),
             turn_count = sessions.turn_count + 1,
             main_turns = sessions.main_turns + excluded.main_turns,
             last_message_count = excluded.last_message_count,
             end_reason = CASE WHEN sessions.status = 'ended' AND ?6 > sessions.ended_at_ms
                               THEN NULL ELSE sessions.end_reason END,
             status = CASE WHEN sessions.status = 'ended' AND ?6 > sessions.ended_at_ms
                           THEN 'active' ELSE sessions.status END,
             ended_at_ms = CASE WHEN sessions.ended_at_ms IS NOT NULL AND ?6 > sessions.ended_at_ms
                                THEN NULL ELSE sessions.ended_at_ms END
         RETURNING turn_count",
    )?
    .query_row(
        params![
            &*t.session.id,
            &*t.session.base_key,
            t.session.agent_session_id.as_deref(),
            t.session.source.as_str(),
            t.session.window,
            t.started_at_ms,
            t.finished_at_ms,
            main,
            t.message_count,
            t.agent.as_deref(),
            t.session.agent.as_str(),
        ],
        |r| r.get(0),
    )
}

/// The turn's row.
fn insert_turn_row(
    tx: &Tx<'_>,
    t: &TurnRecord,
    p: &Prepared,
    seq: i64,
) -> crate::store::sql::Result<()> {
    let hashes = serde_json::to_string(&p.message_hashes).unwrap_or_else(|_| "[]".into());
    tx.prepare_cached(
        "INSERT INTO turns (id, session_id, seq, turn_type, api, model, upstream_model, stream, status,
                            http_status, error, request_messages, tools_blob, request_params, response, usage,
                            user_summary, response_summary, started_at_ms, finished_at_ms, total_ms,
                            upstream_ms, ttft_ms, injected_skills, attempt, retry_of, served_by,
                            fallback_reason, arms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20,
                 ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29)",
    )?
    .execute(params![
        t.id,
        &*t.session.id,
        seq,
        t.turn_type.as_str(),
        t.api.api(),
        t.model,
        t.upstream_model,
        t.stream,
        p.status.as_str(),
        t.http_status,
        t.error,
        hashes,
        p.tools_blob,
        p.params,
        p.response,
        p.usage,
        p.user_summary,
        p.response_summary,
        t.started_at_ms,
        t.finished_at_ms,
        t.total_ms,
        t.upstream_ms,
        t.ttft_ms,
        injected_skills(&t.injected_skills),
        t.attempt,
        t.retry_of.as_deref(),
        t.served_by.as_str(),
        match &t.served_by {
            ServedBy::Fallback(why) => Some(why.as_str()),
            _ => None,
        },
        super::experiments::arms_column(&t.arms),
    ])?;
    Ok(())
}

/// What else a turn records: its arms, its injected skills and their
/// outcomes, a student's sample.
fn record_turn_parts(
    tx: &Tx<'_>,
    t: &TurnRecord,
    p: &Prepared,
    sums: &mut super::outcomes::Pending,
) -> crate::store::sql::Result<()> {
    if t.turn_type == TurnType::Main {
        super::experiments::record_arms(tx, &t.session.id, &t.arms, t.started_at_ms)?;
    }
    super::browse::turn_injected(tx, &t.id, t.started_at_ms, &t.injected_skills)?;
    // A failed turn (the upstream failed, the answer was cut) is no
    // outcome of its skills: it moves no sums, now or when rewarded.
    if t.turn_type == TurnType::Main && p.status == TurnStatus::Ok {
        let skills: Vec<super::outcomes::Key> = t
            .injected_skills
            .iter()
            .map(|s| (s.id.clone(), s.version.clone()))
            .collect();
        super::outcomes::turn_recorded(sums, &skills);
    }
    if let ServedBy::Student(sample) = &t.served_by {
        super::samples::insert(
            tx,
            &t.id,
            sample,
            p.withheld.as_deref(),
            &p.siblings,
            t.finished_at_ms,
        )?;
    }
    Ok(())
}

fn insert_end(
    tx: &Tx<'_>,
    s: &super::SessionInfo,
    reason: &str,
    at_ms: i64,
    queue_learning: bool,
) -> crate::store::sql::Result<bool> {
    // Ended once: an end of a session already ended (another instance
    // sharing the store ended it too, or saw the same reset) changes
    // nothing and queues no second job. A turn after the end reopens it.
    let ended = tx
        .prepare_cached(
            "INSERT INTO sessions (id, base_key, agent_session_id, source, window_index, status,
                                   started_at_ms, last_activity_ms, ended_at_ms, end_reason)
             VALUES (?1, ?2, ?3, ?4, ?5, 'ended', ?6, ?6, ?6, ?7)
             ON CONFLICT(id) DO UPDATE SET status = 'ended', ended_at_ms = ?6, end_reason = ?7
             WHERE sessions.status <> 'ended'
             RETURNING id",
        )?
        .query_row(
            params![
                &*s.id,
                &*s.base_key,
                s.agent_session_id.as_deref(),
                s.source.as_str(),
                s.window,
                at_ms,
                reason
            ],
            |r| r.get::<String>(0),
        )
        .optional()?;
    if ended.is_none() {
        return Ok(false);
    }
    tx.prepare_cached(
        "INSERT INTO session_events (session_id, kind, reason, at_ms) VALUES (?1, 'ended', ?2, ?3)",
    )?
    .execute(params![&*s.id, reason, at_ms])?;
    // In the same transaction: an ended session always has its job (when
    // learning is on), but one held out of learning.
    if queue_learning && reason != super::jobs::HELD_OUT {
        super::jobs::enqueue(tx, &s.id, at_ms)?;
    }
    Ok(true)
}

fn summarize_response(response: &Value) -> String {
    let completion = Completion::read(response);
    let mut out = String::new();
    if let Some(message) = completion.message() {
        if let Value::String(text) = &message.content {
            out.push_str(text);
        }
        let names: Vec<&str> = message
            .tool_calls
            .iter()
            .filter_map(|c| c.function.name.as_deref())
            .collect();
        if !names.is_empty() {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(&format!("[tool calls: {}]", names.join(", ")));
        }
    }
    if out.is_empty()
        && let Some(err) = completion.error.as_ref().and_then(|e| e.message.as_deref())
    {
        out = format!("[error: {err}]");
    }
    out
}

fn truncate(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        return flat;
    }
    let mut cut: String = flat.chars().take(max).collect();
    cut.push('…');
    cut
}

/// The injected skills' column: JSON, or NULL when none was injected.
fn injected_skills(skills: &[super::InjectedSkill]) -> Option<String> {
    (!skills.is_empty())
        .then(|| serde_json::to_string(skills).ok())
        .flatten()
}
