//! The training scheduler's transitions (`scheduler::machine`), kept so
//! that `metaclaw scheduler status` can say what happened while it was not
//! looking: each transition with its reason, and for each window that
//! closed, how many steps ran in it.

use crate::store::sql::{Conn, Optional, params};
use anyhow::Result;
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Transition {
    pub at_ms: i64,
    pub from: String,
    pub to: String,
    pub reason: String,
    /// On the transition that ends a window: the steps run in it.
    pub window_steps: Option<i64>,
}

pub fn record(conn: &Conn, t: &Transition) -> Result<()> {
    conn.execute(
        "INSERT INTO scheduler_transitions (at_ms, from_state, to_state, reason, window_steps)
         VALUES (?1, ?2, ?3, ?4, ?5)",
        params![t.at_ms, t.from, t.to, t.reason, t.window_steps],
    )?;
    Ok(())
}

fn row(r: &crate::store::sql::Row) -> crate::store::sql::Result<Transition> {
    Ok(Transition {
        at_ms: r.get(0)?,
        from: r.get(1)?,
        to: r.get(2)?,
        reason: r.get(3)?,
        window_steps: r.get(4)?,
    })
}

/// The newest transitions, newest first.
pub fn recent(conn: &Conn, limit: usize) -> Result<Vec<Transition>> {
    let mut stmt = conn.prepare(
        "SELECT at_ms, from_state, to_state, reason, window_steps FROM scheduler_transitions
         ORDER BY id DESC LIMIT ?1",
    )?;
    let rows = stmt.query_map([limit as i64], row)?;
    Ok(rows.collect::<crate::store::sql::Result<_>>()?)
}

/// The last transition (the state the scheduler was last in).
pub fn last(conn: &Conn) -> Result<Option<Transition>> {
    Ok(conn
        .query_row(
            "SELECT at_ms, from_state, to_state, reason, window_steps FROM scheduler_transitions
             ORDER BY id DESC LIMIT 1",
            (),
            row,
        )
        .optional()?)
}

/// Windows that closed, and the steps run in them, over all time.
pub fn window_totals(conn: &Conn) -> Result<(i64, i64)> {
    Ok(conn.query_row(
        "SELECT COUNT(*), COALESCE(SUM(window_steps), 0) FROM scheduler_transitions
         WHERE window_steps IS NOT NULL",
        (),
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?)
}

/// When the agent's last main turn started (side turns and heartbeats are
/// not the user's activity).
pub fn last_main_turn_ms(conn: &Conn) -> Result<Option<i64>> {
    Ok(conn.query_row(
        "SELECT MAX(started_at_ms) FROM turns WHERE turn_type = 'main'",
        (),
        |r| r.get(0),
    )?)
}
