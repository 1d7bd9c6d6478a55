//! The user's feedback on a turn or a session, for every front that takes
//! it: `POST /v1/feedback` (agents and scripts, the proxy's auth), the
//! `metaclaw feedback` command (through that route) and the dashboard. How
//! it counts: [`crate::store::feedback`].

use serde::Deserialize;
use serde_json::{Value, json};

use super::App;
use crate::error::ApiError;
use crate::store::feedback::{self, FeedbackError, MAX_COMMENT_CHARS, NewFeedback, Recorded};

/// The body of `POST /v1/feedback`: a turn or a session, a thumb or a
/// score, an optional comment.
#[derive(Debug, Default, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct FeedbackRequest {
    /// From a response's `x-metaclaw-turn-id` header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    /// From a response's `x-metaclaw-session-id` header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rating: Option<Rating>,
    /// In [−1, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Rating {
    Up,
    Down,
}

impl FeedbackRequest {
    /// Parses a request body, saying what to fix.
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        serde_json::from_slice(body).map_err(|e| {
            ApiError::BadRequest(format!(
                "{e}: send {{\"turn_id\" or \"session_id\", \"rating\": \"up\"|\"down\" or \"score\": -1..1, \"comment\"?}}"
            ))
        })
    }
}

/// The feedback to store, checked (one rating or score in range, a comment
/// within bounds, redacted), or what to fix.
pub fn checked(
    request: FeedbackRequest,
    redactor: &crate::redact::Redactor,
    source: &'static str,
) -> Result<NewFeedback, ApiError> {
    let (value, rating) = match (request.rating, request.score) {
        (Some(Rating::Up), None) => (1.0, Some("up")),
        (Some(Rating::Down), None) => (-1.0, Some("down")),
        (None, Some(score)) if score.is_finite() && (-1.0..=1.0).contains(&score) => (score, None),
        (None, Some(score)) => {
            return Err(ApiError::BadRequest(format!(
                "score {score} is outside [-1, 1]"
            )));
        }
        (Some(_), Some(_)) => {
            return Err(ApiError::BadRequest(
                "send a rating or a score, not both".into(),
            ));
        }
        (None, None) => {
            return Err(ApiError::BadRequest(
                "send \"rating\": \"up\" or \"down\", or \"score\": a number in [-1, 1]".into(),
            ));
        }
    };
    let comment = match request.comment.as_deref().map(str::trim) {
        Some(c) if c.chars().count() > MAX_COMMENT_CHARS => {
            return Err(ApiError::BadRequest(format!(
                "the comment is longer than {MAX_COMMENT_CHARS} characters"
            )));
        }
        Some("") | None => None,
        // Secrets never reach the store.
        Some(c) => Some(redactor.redact_str(c)),
    };
    let blank = |s: Option<String>| s.map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
    Ok(NewFeedback {
        session_id: blank(request.session_id),
        turn_id: blank(request.turn_id),
        value,
        rating,
        comment,
        source,
        at_ms: crate::clock::now_ms(),
    })
}

/// Stores checked feedback in the store (blocking).
pub fn store(db: &crate::store::Db, new: &NewFeedback) -> Result<Recorded, ApiError> {
    let mut conn = db
        .side_writer()
        .map_err(|e| ApiError::Internal(format!("cannot open the store: {e:#}")))?;
    feedback::record(&mut conn, new).map_err(|e| match e {
        FeedbackError::NoTarget | FeedbackError::WrongSession { .. } => {
            ApiError::BadRequest(e.to_string())
        }
        FeedbackError::UnknownTurn(_) | FeedbackError::UnknownSession(_) => {
            ApiError::NotFound(e.to_string())
        }
        FeedbackError::Store(e) => ApiError::Internal(format!("cannot store feedback: {e}")),
    })
}

/// Records the feedback and applies it to the session's rewards.
pub async fn record(
    app: &App,
    request: FeedbackRequest,
    source: &'static str,
) -> Result<Value, ApiError> {
    let new = checked(request, &app.redactor, source)?;
    // A turn just answered may still be in the writer's queue.
    app.proxy.store.flush().await;
    let db = app.proxy.store.db().clone();
    let recorded = tokio::task::spawn_blocking(move || store(&db, &new))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))??;
    tracing::info!(
        session = %recorded.feedback.session_id,
        turn = ?recorded.feedback.turn_id,
        value = recorded.feedback.value,
        "feedback from the user ({source})"
    );
    Ok(json!(recorded))
}
