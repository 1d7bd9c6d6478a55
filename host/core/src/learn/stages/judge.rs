//! Stage 2: the judge (`learn::judge`) on every main turn not judged yet,
//! each with its next state, then one reward per turn from the judge's
//! score and the scorers' rewards (`learn::reward`, `learning.reward`).
//! A failed turn (`store::learning::failure`) is neither judged nor
//! rewarded; it still is the next state of the turn before it.

use crate::store::sql::Conn;
use anyhow::Result;

use super::{Output, Parts, Stage, inputs};
use crate::config::schema::RewardConfig;
use crate::learn::reward::{self, ScorerReward};
use crate::store::jobs::Job;
use crate::store::learning;

/// How many turns were judged now; the rewards are combined when the stage
/// is committed.
pub struct Judged {
    judged: usize,
    /// The judge's model (`None`: judging is off).
    model: Option<String>,
    session_id: String,
    reward: RewardConfig,
}

/// Judges the job's main turns. Each verdict is committed as it comes: a
/// job cut short does not pay for the turns it judged again.
pub async fn run(parts: &Parts, job: &Job) -> Result<Judged> {
    let session = job.session_id.clone();
    let turns = parts
        .db
        .call(move |c| Ok(learning::main_turns(c, &session)?))
        .await?;
    let mut judged = 0;
    if let Some(judge) = &parts.judge {
        for (i, turn) in turns.iter().enumerate() {
            // A failed turn is no answer to judge (`learning::failure`).
            if turn.judged || turn.failed.is_some() {
                continue;
            }
            let following = turns.get(i + 1);
            let (input, next) = inputs(
                &parts.store,
                turn.id.clone(),
                following.map(|t| t.id.clone()),
            )
            .await?;
            let Some(input) = input else { continue };
            let next_failed = following.is_some_and(|t| t.failed.is_some());
            let mut judgment = judge.judge(&input, next.as_ref(), next_failed).await?;
            judgment.answer_model = turn.model.clone();
            tracing::debug!(turn = %turn.id, value = judgment.value, "judged: {}", judgment.rationale);
            parts
                .db
                .call(move |c| Ok(learning::store_judgment(c, &judgment)?))
                .await?;
            judged += 1;
        }
    }
    // Group sampling: the answers of each turn judged alike (for training).
    super::group::judge_groups(parts, &job.session_id).await?;
    Ok(Judged {
        judged,
        model: parts.judge.as_ref().map(|j| j.model.model.clone()),
        session_id: job.session_id.clone(),
        reward: parts.settings.reward.clone(),
    })
}

impl Output for Judged {
    const STAGE: Stage = Stage::Judge;

    fn summary(&self) -> String {
        match &self.model {
            Some(model) => format!("{} turn(s) judged by {model}", self.judged),
            None => "judge off".to_string(),
        }
    }

    /// Every main turn's reward, from what is stored (verdicts of earlier
    /// attempts included): the user's feedback where there is some, else
    /// the judge's and scorers' combined.
    fn write(&self, tx: &Conn) -> Result<()> {
        let session = &self.session_id;
        let turns = learning::main_turns(tx, session)?;
        let judgments = learning::judgments(tx, session)?;
        let rewards = crate::store::turn_rewards(tx, session)?;
        // The user's own word outranks the judge (store::feedback).
        let feedback = crate::store::feedback::overrides(tx, session)?;
        let mut sums = crate::store::outcomes::Pending::new();
        for turn in turns.iter().filter(|t| t.failed.is_none()) {
            let scorers: Vec<ScorerReward<'_>> = rewards
                .get(&turn.id)
                .into_iter()
                .flatten()
                .map(|r| ScorerReward {
                    name: reward::scorer_name(&r.source),
                    value: r.value,
                })
                .collect();
            let judge = judgments.get(&turn.id).map(|j| j.value);
            let value = feedback
                .for_turn(&turn.id)
                .or_else(|| reward::combine(&self.reward, judge, &scorers));
            if let Some(value) = value {
                crate::store::outcomes::set_reward(tx, &mut sums, &turn.id, value)?;
            }
        }
        Ok(sums.apply(tx)?)
    }
}
