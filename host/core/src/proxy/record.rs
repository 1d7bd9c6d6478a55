//! The turn in flight, and how it is recorded: whatever way a turn ends
//! (answered, failed, the client gone at any await), it is recorded once
//! and its session is told.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use metaclaw_wire::Front;
use metaclaw_wire::request::ChatRequest;

use super::{Proxy, capture};
use crate::sessions::{EndReason, TurnAttempt, TurnType};
use crate::store::{
    Admission, Capture, InjectedSkill, RecordedRequest, ServedBy, SessionInfo, TurnRecord,
    TurnStatus,
};

/// How a turn arrived: what is known before its body is read.
pub(super) struct Arrival {
    pub(super) id: String,
    /// The turn's span, entered again wherever the turn goes on after its
    /// handler returned (the streamed answer).
    pub(super) span: tracing::Span,
    pub(super) front: Front,
    pub(super) started: Instant,
    pub(super) started_at_ms: i64,
}

/// How a turn ended: what [`TurnCtx::finish`] records.
pub(super) enum Outcome {
    /// Answered (`capture`: the answer as it went to the client).
    Answered {
        http_status: StatusCode,
        capture: Capture,
    },
    /// Failed, with metaclaw's or the upstream's error (`http_status`: the
    /// status the upstream or the student path answered with, if any).
    Failed {
        http_status: Option<StatusCode>,
        capture: Capture,
        error: String,
    },
    /// Cut off: the client left, or the answer broke off or stalled.
    Incomplete {
        http_status: Option<StatusCode>,
        capture: Capture,
        why: String,
    },
}

impl Outcome {
    /// An error before any answer: nothing captured.
    pub(super) fn failed(http_status: Option<StatusCode>, error: impl ToString) -> Self {
        Self::Failed {
            http_status,
            capture: Capture::None,
            error: error.to_string(),
        }
    }

    /// As the store records it: status, HTTP status, answer, error.
    fn parts(self) -> (TurnStatus, Option<StatusCode>, Capture, Option<String>) {
        match self {
            Self::Answered {
                http_status,
                capture,
            } => (TurnStatus::Ok, Some(http_status), capture, None),
            Self::Failed {
                http_status,
                capture,
                error,
            } => (TurnStatus::Error, http_status, capture, Some(error)),
            Self::Incomplete {
                http_status,
                capture,
                why,
            } => (TurnStatus::Incomplete, http_status, capture, Some(why)),
        }
    }
}

pub(super) struct TurnCtx {
    pub(super) proxy: Arc<Proxy>,
    pub(super) id: String,
    /// The turn's span, entered again wherever the turn goes on after its
    /// handler returned (the streamed answer).
    pub(super) span: tracing::Span,
    pub(super) attempt: TurnAttempt,
    /// What the user said last, in their own words.
    pub(super) user_text: Option<String>,
    pub(super) session: SessionInfo,
    /// The agent that sent it (`request::agent`).
    pub(super) agent: Option<String>,
    pub(super) turn_type: TurnType,
    pub(super) front: Front,
    pub(super) model: Option<String>,
    pub(super) upstream_model: Option<String>,
    pub(super) stream: bool,
    pub(super) message_count: u32,
    pub(super) request: RecordedRequest,
    pub(super) started: Instant,
    pub(super) started_at_ms: i64,
    pub(super) upstream_started: Option<Instant>,
    pub(super) upstream_done: Option<Instant>,
    pub(super) first_byte: Option<Instant>,
    pub(super) admission: Admission,
    pub(super) done_after: bool,
    /// The skills injected, best first.
    pub(super) injected: Vec<InjectedSkill>,
    /// The canaries' arms the turn met (`canary::Live`).
    pub(super) arms: Vec<crate::store::experiments::ArmRecord>,
    /// Which upstream answered: 0 the primary, `i + 1` `llm.fallbacks[i]`.
    pub(super) fallback: usize,
    /// `llm`, or the trainable model and what it sampled.
    pub(super) served_by: ServedBy,
    pub(super) finished: bool,
}

impl TurnCtx {
    /// The turn, tracked from here on: dropping it records it.
    pub(super) fn new(
        proxy: &Arc<Proxy>,
        arrival: Arrival,
        request: &ChatRequest,
        session: SessionInfo,
        turn_type: TurnType,
        attempt: TurnAttempt,
        upstream_model: String,
    ) -> Self {
        Self {
            proxy: proxy.clone(),
            id: arrival.id,
            span: arrival.span,
            attempt,
            user_text: request
                .last_user_text
                .as_deref()
                .map(metaclaw_wire::text::user_words),
            session,
            agent: None,
            turn_type,
            front: arrival.front,
            model: request.model.clone(),
            upstream_model: Some(upstream_model),
            stream: request.stream,
            message_count: request.message_count,
            request: capture::request(request),
            started: arrival.started,
            started_at_ms: arrival.started_at_ms,
            upstream_started: None,
            upstream_done: None,
            first_byte: None,
            admission: None,
            done_after: false,
            injected: Vec::new(),
            arms: Vec::new(),
            fallback: 0,
            served_by: ServedBy::Llm,
            finished: false,
        }
    }

    /// Lets the client know where its turn was recorded.
    pub(super) fn tag(&self, headers: &mut HeaderMap) {
        if let Ok(v) = HeaderValue::from_str(&self.session.id) {
            headers.insert("x-metaclaw-session-id", v);
        }
        if let Ok(v) = HeaderValue::from_str(&self.id) {
            headers.insert("x-metaclaw-turn-id", v);
        }
        if !self.injected.is_empty() {
            let ids: Vec<&str> = self.injected.iter().map(|s| s.id.as_str()).collect();
            if let Ok(v) = HeaderValue::from_str(&ids.join(",")) {
                headers.insert("x-metaclaw-skills", v);
            }
        }
        if self.fallback > 0 {
            headers.insert("x-metaclaw-fallback", HeaderValue::from(self.fallback));
        }
        let policy_version = match &self.served_by {
            ServedBy::Student(sample) => Some(sample.policy_version),
            _ => None,
        };
        let served_by = crate::store::served_by_label(self.served_by.as_str(), policy_version);
        if let Some(v) = served_by.and_then(|v| HeaderValue::from_str(&v).ok()) {
            headers.insert("x-metaclaw-served-by", v);
        }
    }

    /// Records the turn as it ended (once: a later call does nothing) and
    /// tells its session.
    pub(super) fn finish(&mut self, outcome: Outcome) {
        if self.finished {
            return;
        }
        let (status, http_status, response, error) = outcome.parts();
        self.finished = true;
        let now = Instant::now();
        let total = now.duration_since(self.started);
        let upstream = self.upstream_started.map(|s| {
            self.upstream_done
                .unwrap_or(now)
                .saturating_duration_since(s)
        });
        let metrics = &self.proxy.metrics;
        if let Some(upstream) = upstream {
            metrics.upstream_latency.observe(upstream.as_secs_f64());
            if status == TurnStatus::Ok {
                metrics
                    .overhead
                    .observe(total.saturating_sub(upstream).as_secs_f64());
            }
        }
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let id = std::mem::take(&mut self.id);
        let failed = status != TurnStatus::Ok;
        let record = TurnRecord {
            id: id.clone(),
            user_text: self.user_text.take(),
            attempt: self.attempt.number,
            retry_of: self.attempt.retry_of.take(),
            session: self.session.clone(),
            agent: self.agent.take(),
            turn_type: self.turn_type,
            api: self.front,
            model: self.model.take(),
            upstream_model: self.upstream_model.take(),
            stream: self.stream,
            request: std::mem::take(&mut self.request),
            response,
            status,
            http_status: http_status.map(|s| s.as_u16()),
            error,
            started_at_ms: self.started_at_ms,
            finished_at_ms: self.started_at_ms + total.as_millis() as i64,
            total_ms: ms(total),
            upstream_ms: upstream.map(ms),
            ttft_ms: self
                .first_byte
                .map(|f| ms(f.saturating_duration_since(self.started))),
            message_count: self.message_count,
            injected_skills: std::mem::take(&mut self.injected),
            arms: std::mem::take(&mut self.arms),
            served_by: std::mem::take(&mut self.served_by),
        };
        self.proxy.store.record(record, self.admission.take());
        self.proxy
            .sessions
            .finished(&self.session, self.turn_type, &id, failed);
        if self.done_after {
            let _ = self
                .proxy
                .sessions
                .end(&self.session.id, EndReason::ClientDone);
        }
    }
}

impl Drop for TurnCtx {
    /// The handler was dropped mid-turn: the client went away.
    fn drop(&mut self) {
        if !self.finished {
            self.proxy.metrics.errors.inc(&["client_disconnected"]);
            self.finish(Outcome::Incomplete {
                http_status: None,
                capture: Capture::None,
                why: "client disconnected".into(),
            });
        }
    }
}
