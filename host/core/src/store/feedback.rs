//! Explicit feedback from the user, on one turn or a whole session, and the
//! rule by which it outranks the judge (docs/learning.md "Feedback"):
//!
//! - a main turn's reward is its newest **turn** feedback, if it has any;
//! - else its session's newest **session** feedback, if that has any;
//! - else the judge's and scorers' combined reward (`learning.reward`).
//!
//! Feedback takes effect when it is recorded (the turns' rewards and their
//! skills' outcomes move at once) and again whenever the judge stage writes
//! rewards, so it wins whichever comes first. A thumbs-up is +1, a
//! thumbs-down −1, a score any value in [−1, 1].

use crate::store::sql::{Behavior, Conn, Optional, params};
use serde::Serialize;

use super::learning;

/// The longest comment kept (characters); longer ones are refused.
pub const MAX_COMMENT_CHARS: usize = 4000;

/// What the user said.
#[derive(Debug, Clone)]
pub struct NewFeedback {
    /// At least one of the two; a turn names its session.
    pub session_id: Option<String>,
    pub turn_id: Option<String>,
    pub value: f64,
    /// `up` or `down` for a thumb (`None`: a score).
    pub rating: Option<&'static str>,
    /// Redacted by the caller.
    pub comment: Option<String>,
    /// `api`, `cli` or `dashboard`.
    pub source: &'static str,
    pub at_ms: i64,
}

/// Why feedback was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum FeedbackError {
    #[error(
        "name the turn (turn_id, from the x-metaclaw-turn-id header) or the session (session_id)"
    )]
    NoTarget,
    #[error("no turn {0:?}")]
    UnknownTurn(String),
    #[error("no session {0:?}")]
    UnknownSession(String),
    #[error("turn {turn:?} belongs to session {actual:?}, not {given:?}")]
    WrongSession {
        turn: String,
        given: String,
        actual: String,
    },
    #[error(transparent)]
    Store(#[from] crate::store::sql::Error),
}

/// One stored piece of feedback.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Feedback {
    pub id: i64,
    pub session_id: String,
    pub turn_id: Option<String>,
    pub value: f64,
    pub rating: Option<String>,
    pub comment: Option<String>,
    pub source: String,
    pub at_ms: i64,
}

/// What recording did.
#[derive(Debug, Clone, Serialize)]
pub struct Recorded {
    pub feedback: Feedback,
    /// The main turns whose reward is now this feedback's value.
    pub rewarded_turns: Vec<String>,
}

/// Stores the feedback and applies the rule to its session's turns.
pub fn record(conn: &mut Conn, f: &NewFeedback) -> Result<Recorded, FeedbackError> {
    let tx = conn.transaction_with_behavior(Behavior::Immediate)?;
    let session_id = match (&f.turn_id, &f.session_id) {
        (None, None) => return Err(FeedbackError::NoTarget),
        (Some(turn), given) => {
            let actual: String = tx
                .query_row("SELECT session_id FROM turns WHERE id = ?1", [turn], |r| {
                    r.get(0)
                })
                .optional()?
                .ok_or_else(|| FeedbackError::UnknownTurn(turn.clone()))?;
            if let Some(given) = given
                && *given != actual
            {
                return Err(FeedbackError::WrongSession {
                    turn: turn.clone(),
                    given: given.clone(),
                    actual,
                });
            }
            actual
        }
        (None, Some(session)) => {
            let known: bool = tx.query_row(
                "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1)",
                [session],
                |r| r.get(0),
            )?;
            if !known {
                return Err(FeedbackError::UnknownSession(session.clone()));
            }
            session.clone()
        }
    };
    let value = f.value.clamp(-1.0, 1.0);
    let id: i64 = tx.query_row(
        "INSERT INTO feedback (session_id, turn_id, value, rating, comment, source, at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) RETURNING id",
        params![
            session_id, f.turn_id, value, f.rating, f.comment, f.source, f.at_ms
        ],
        |r| r.get(0),
    )?;
    let mut rewarded_turns = Vec::new();
    let mut sums = super::outcomes::Pending::new();
    let overrides = overrides(&tx, &session_id)?;
    for turn in learning::main_turns(&tx, &session_id)? {
        if turn.failed.is_some() {
            continue;
        }
        if let Some(v) = overrides.for_turn(&turn.id) {
            super::outcomes::set_reward(&tx, &mut sums, &turn.id, v)?;
            let this_one = match &f.turn_id {
                Some(t) => *t == turn.id,
                None => !overrides.turns.contains_key(&turn.id),
            };
            if this_one {
                rewarded_turns.push(turn.id);
            }
        }
    }
    sums.apply(&tx)?;
    tx.commit()?;
    Ok(Recorded {
        feedback: Feedback {
            id,
            session_id,
            turn_id: f.turn_id.clone(),
            value,
            rating: f.rating.map(str::to_string),
            comment: f.comment.clone(),
            source: f.source.to_string(),
            at_ms: f.at_ms,
        },
        rewarded_turns,
    })
}

/// The newest feedback of a session's turns and of the session itself.
#[derive(Debug, Default)]
pub struct Overrides {
    turns: std::collections::HashMap<String, f64>,
    session: Option<f64>,
}

impl Overrides {
    /// The value that replaces the judge's for this turn, if any.
    pub fn for_turn(&self, turn_id: &str) -> Option<f64> {
        self.turns.get(turn_id).copied().or(self.session)
    }
}

pub fn overrides(conn: &Conn, session_id: &str) -> crate::store::sql::Result<Overrides> {
    let mut out = Overrides::default();
    // Oldest first: the newest of each target is the one left.
    let mut stmt = conn
        .prepare_cached("SELECT turn_id, value FROM feedback WHERE session_id = ?1 ORDER BY id")?;
    let rows = stmt.query_map([session_id], |r| {
        Ok((r.get::<Option<String>>(0)?, r.get::<f64>(1)?))
    })?;
    for row in rows {
        match row? {
            (Some(turn), v) => {
                out.turns.insert(turn, v);
            }
            (None, v) => out.session = Some(v),
        }
    }
    Ok(out)
}

/// A session's feedback, oldest first.
pub fn list(conn: &Conn, session_id: &str) -> crate::store::sql::Result<Vec<Feedback>> {
    conn.prepare_cached(
        "SELECT id, session_id, turn_id, value, rating, comment, source, at_ms
         FROM feedback WHERE session_id = ?1 ORDER BY id",
    )?
    .query_map([session_id], |r| {
        Ok(Feedback {
            id: r.get(0)?,
            session_id: r.get(1)?,
            turn_id: r.get(2)?,
            value: r.get(3)?,
            rating: r.get(4)?,
            comment: r.get(5)?,
            source: r.get(6)?,
            at_ms: r.get(7)?,
        })
    })?
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store with one session of two main turns, the first judged +1
    /// with skill `tidy` injected, the second unjudged.
    fn store() -> (tempfile::TempDir, Conn) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metaclaw.db");
        let mut conn = crate::store::open_rw(&path).unwrap();
        crate::store::schema::migrate(&mut conn).unwrap();
        let conn = Conn::from(conn);
        conn.execute_batch(
            "INSERT INTO sessions (id, base_key, source, started_at_ms, last_activity_ms)
             VALUES ('s', 's', 'header', 0, 0), ('other', 'o', 'header', 0, 0);
             INSERT INTO turns (id, session_id, seq, turn_type, api, stream, status,
                                request_messages, request_params, started_at_ms,
                                finished_at_ms, total_ms, injected_skills)
             VALUES ('t1', 's', 1, 'main', 'chat', 0, 'ok', '[]', '{}', 0, 1, 1.0,
                     '[{\"id\":\"tidy\",\"version\":\"1.0.0\",\"score\":1.0}]'),
                    ('t2', 's', 2, 'main', 'chat', 0, 'ok', '[]', '{}', 2, 3, 1.0, NULL);",
        )
        .unwrap();
        let mut sums = crate::store::outcomes::Pending::new();
        crate::store::outcomes::turn_recorded(&mut sums, &[("tidy".into(), "1.0.0".into())]);
        crate::store::outcomes::set_reward(&conn, &mut sums, "t1", 1.0).unwrap();
        sums.apply(&conn).unwrap();
        (dir, conn)
    }

    fn thumb(turn: Option<&str>, session: Option<&str>, up: bool) -> NewFeedback {
        NewFeedback {
            session_id: session.map(str::to_string),
            turn_id: turn.map(str::to_string),
            value: if up { 1.0 } else { -1.0 },
            rating: Some(if up { "up" } else { "down" }),
            comment: Some("wrong file".into()),
            source: "api",
            at_ms: 10,
        }
    }

    fn reward(conn: &Conn, turn: &str) -> Option<f64> {
        conn.query_row("SELECT reward FROM turns WHERE id = ?1", [turn], |r| {
            r.get(0)
        })
        .unwrap()
    }

    fn tidy(conn: &Conn) -> crate::store::outcomes::Sums {
        crate::store::outcomes::all(conn).unwrap()[&("tidy".to_string(), "1.0.0".to_string())]
    }

    #[test]
    fn a_thumbs_down_overrides_the_judges_plus_one_in_the_reward_and_the_outcomes() {
        let (_dir, mut conn) = store();
        assert_eq!(tidy(&conn).reward_sum, 1.0);
        let done = record(&mut conn, &thumb(Some("t1"), None, false)).unwrap();
        assert_eq!(done.feedback.session_id, "s");
        assert_eq!(done.rewarded_turns, vec!["t1".to_string()]);
        assert_eq!(reward(&conn, "t1"), Some(-1.0));
        let sums = tidy(&conn);
        assert_eq!((sums.judged, sums.reward_sum), (1, -1.0));
        // The judge stage, run again later, keeps the user's word.
        let o = overrides(&conn, "s").unwrap();
        assert_eq!(o.for_turn("t1"), Some(-1.0));
        assert_eq!(o.for_turn("t2"), None);
    }

    #[test]
    fn session_feedback_rewards_every_turn_without_its_own() {
        let (_dir, mut conn) = store();
        record(&mut conn, &thumb(Some("t1"), None, false)).unwrap();
        let done = record(&mut conn, &thumb(None, Some("s"), true)).unwrap();
        assert_eq!(done.rewarded_turns, vec!["t2".to_string()]);
        assert_eq!(
            reward(&conn, "t1"),
            Some(-1.0),
            "the turn's own feedback wins"
        );
        assert_eq!(reward(&conn, "t2"), Some(1.0));
        assert_eq!(list(&conn, "s").unwrap().len(), 2);
    }

    #[test]
    fn the_newest_feedback_on_a_turn_is_the_one_that_counts() {
        let (_dir, mut conn) = store();
        record(&mut conn, &thumb(Some("t1"), None, false)).unwrap();
        record(&mut conn, &thumb(Some("t1"), None, true)).unwrap();
        assert_eq!(reward(&conn, "t1"), Some(1.0));
        assert_eq!(tidy(&conn).reward_sum, 1.0);
    }

    #[test]
    fn feedback_on_nothing_known_is_refused_and_nothing_is_stored() {
        let (_dir, mut conn) = store();
        for (f, want) in [
            (thumb(None, None, true), "name the turn"),
            (thumb(Some("nope"), None, true), "no turn"),
            (thumb(None, Some("nope"), true), "no session"),
            (thumb(Some("t1"), Some("other"), true), "belongs to session"),
        ] {
            let e = record(&mut conn, &f).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
        let n: i64 = conn
            .query_row("SELECT count(*) FROM feedback", (), |r| r.get(0))
            .unwrap();
        assert_eq!(n, 0);
        assert_eq!(reward(&conn, "t1"), Some(1.0));
    }
}
