//! Group rewards (`rl.group_size` > 1), part of the judge stage: a main
//! turn's served answer and its siblings (the other answers sampled in the
//! same call, never served) are judged alike, so their rewards can be
//! compared: the judge sees the conversation and each answer *without*
//! what happened next (the tool results and the user's next message
//! followed the served answer only, so showing them for one member would
//! favour or penalise it), and the scorers score each answer with no next
//! message. Each member's reward is combined as a turn's is
//! (`learning.reward`). The served turn keeps its own reward (judged with
//! its next state) for everything else; training uses the group's.

use anyhow::Result;
use serde_json::json;

use super::{Parts, blocking};
use crate::learn::per_turn;
use crate::learn::reward::{self, ScorerReward};
use crate::store::ScoringInput;
use crate::store::samples;

/// Judges the session's groups not judged yet; how many.
pub async fn judge_groups(parts: &Parts, session: &str) -> Result<usize> {
    let session = session.to_string();
    let turns = parts
        .db
        .call(move |c| Ok(samples::unjudged_groups(c, &session)?))
        .await?;
    for turn in &turns {
        let (input, siblings) = {
            let store = parts.store.clone();
            let db = parts.db.clone();
            let id = turn.clone();
            blocking(move || {
                let input = store.scoring_input(&id)?;
                let siblings = db.call_blocking(|c| Ok(samples::siblings(c, &id)?))?;
                Ok((input, siblings))
            })
            .await?
        };
        let Some(input) = input else { continue };
        // The served answer first, then each sibling as if it had been.
        let mut members = vec![input.clone()];
        for sibling in &siblings {
            let mut member = input.clone();
            member.response = Some(json!({
                "choices": [{"index": 0, "message": sibling.message, "finish_reason": sibling.finish_reason}],
            }));
            members.push(member);
        }
        let mut rewards = Vec::with_capacity(members.len());
        for member in members {
            rewards.push(member_reward(parts, member).await?);
        }
        let served = rewards.first().copied().flatten();
        let by_index: Vec<(i64, Option<f64>)> = siblings
            .iter()
            .zip(rewards.iter().skip(1))
            .map(|(s, r)| (s.idx, *r))
            .collect();
        let id = turn.clone();
        parts
            .db
            .call(move |c| Ok(samples::set_group_rewards(c, &id, served, &by_index)?))
            .await?;
        tracing::debug!(turn = %turn, ?rewards, "group judged");
    }
    Ok(turns.len())
}

/// One member's reward: the judge's verdict without the next state and the
/// scorers' rewards without a next message, combined.
async fn member_reward(parts: &Parts, member: ScoringInput) -> Result<Option<f64>> {
    let judge = match &parts.judge {
        Some(judge) => Some(judge.judge(&member, None, false).await?.value),
        None => None,
    };
    let plugins = parts.plugins.clone();
    let scored = blocking(move || {
        per_turn::score(plugins.as_deref(), &member, None)
            .map_err(|e| anyhow::Error::new(super::Blocked::from(e)))
    })
    .await?;
    let scorers: Vec<ScorerReward<'_>> = scored
        .iter()
        .map(|r| ScorerReward {
            name: reward::scorer_name(&r.source),
            value: f64::from(r.value),
        })
        .collect();
    Ok(reward::combine(&parts.settings.reward, judge, &scorers))
}
