//! Stage 1: scorer plugins on every main turn of the session not scored
//! yet. Per-turn scoring (`learn::per_turn`) scores a turn once its
//! successor is recorded; what is left here is the session's last turn, and
//! any turn a crash or a restart left unscored.

use crate::store::sql::Conn;
use anyhow::Result;

use super::{Output, Parts, Stage};
use crate::clock::now_ms;
use crate::learn::per_turn::score_turn;
use crate::store::RewardRecord;
use crate::store::jobs::Job;
use crate::store::learning;

/// The rewards of the turns scored now.
pub struct Scored {
    turns: Vec<(String, Vec<RewardRecord>)>,
    at_ms: i64,
}

/// Scores the job's unscored main turns, each with its successor. Blocking
/// (the scorers run on the plugin runtime).
pub fn run(parts: &Parts, job: &Job) -> Result<Scored> {
    let turns = parts
        .db
        .call_blocking(|c| Ok(learning::main_turns(c, &job.session_id)?))?;
    let mut scored = Vec::new();
    for (i, turn) in turns.iter().enumerate() {
        // A failed turn is no answer: no scorer rewards it.
        if turn.scored || turn.failed.is_some() {
            continue;
        }
        let next = turns.get(i + 1).map(|t| t.id.as_str());
        scored.push((
            turn.id.clone(),
            score_turn(&parts.store, parts.plugins.as_deref(), &turn.id, next)?
                .map_err(super::Blocked::from)?,
        ));
    }
    Ok(Scored {
        turns: scored,
        at_ms: now_ms(),
    })
}

impl Output for Scored {
    const STAGE: Stage = Stage::Score;

    fn summary(&self) -> String {
        format!("{} turn(s) scored", self.turns.len())
    }

    /// Per-turn scoring may have got to a turn meanwhile: the first rewards
    /// stored for a turn are kept.
    fn write(&self, tx: &Conn) -> Result<()> {
        for (turn, rewards) in &self.turns {
            learning::store_rewards(tx, turn, rewards, self.at_ms)?;
        }
        Ok(())
    }
}
