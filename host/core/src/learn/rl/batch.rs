//! Ready samples to a batch of datums. A session's samples that extend one
//! another (one trajectory, in turn order, each naming the one before it)
//! become one datum; a chain is cut where a turn is missing (not ready,
//! skipped), and what follows starts a datum of its own. Each turn's sampled
//! tokens carry its own advantage (`advantage.rs`): group-centred when the
//! turn was sampled with siblings (`rl.group_size`), whose answers become
//! datums of their own (the prompt and that answer), else against the
//! running baseline.

use std::collections::{BTreeMap, HashMap};

use crate::store::samples::StoredSibling;
use crate::store::train_queue::{Group, Ready};
use crate::tinker::types::{Datum, TrajectoryStep};

use super::advantage::{self, Baselines};

/// A batch to train on: the datums, and each sample with its advantage.
#[derive(Debug, Default)]
pub struct Batch {
    pub data: Vec<Datum>,
    pub samples: Vec<(String, f64)>,
    /// Over the answers that have a reward (see `rewards`).
    pub mean_reward: f64,
    /// Sampled tokens trained on (weight 1).
    pub tokens: usize,
    /// Unserved answers trained with their served one (group sampling).
    pub siblings: usize,
    /// The rewards of the answers sampled (those that have one: a group's
    /// every member, judged alike; else the served turn's), their lengths
    /// in tokens, and how many were cut off at the length limit: the
    /// step's health (`health`).
    pub rewards: Vec<f64>,
    pub answer_tokens: Vec<usize>,
    pub truncated: usize,
}

/// The key of sibling `idx` of `turn` among per-token terms.
pub fn sibling_key(turn: &str, idx: i64) -> String {
    format!("{turn}#{idx}")
}

/// The served answer's advantage and each trained sibling's (by index).
type GroupAdvantages = (f64, Vec<(i64, f64)>);

/// A group's advantages: the served answer's and each trainable sibling's
/// (by index); `None` when the group carries no signal. Members without a
/// reward, and siblings that did not parse, are left out.
fn group_advantages(group: &Group) -> Option<GroupAdvantages> {
    let served = group.served?;
    let members: Vec<&StoredSibling> = group
        .siblings
        .iter()
        .filter(|s| s.reward.is_some() && s.parse_error.is_none())
        .collect();
    let rewards: Vec<f64> = std::iter::once(served)
        .chain(members.iter().filter_map(|s| s.reward))
        .collect();
    let advantages = advantage::group(&rewards)?;
    let siblings = members
        .iter()
        .zip(advantages.iter().skip(1))
        .map(|(s, a)| (s.idx, *a))
        .collect();
    Some((advantages[0], siblings))
}

/// Whole chains of ready samples, in turn order.
pub type Chains<'a> = Vec<Vec<&'a Ready>>;

/// About `size` ready samples: whole chains in the order their first turn
/// became ready, until `size` is reached (a chain is never split across
/// batches, so the last one may take it past `size`). `None` while fewer
/// than `min` are ready.
pub fn take(ready: &[Ready], min: usize, size: usize) -> Option<Chains<'_>> {
    if ready.len() < min.max(1) {
        return None;
    }
    let size = size.max(1);
    // Chains, in the order their first turn is ready.
    let mut chains: Chains<'_> = Vec::new();
    let mut open: BTreeMap<&str, usize> = BTreeMap::new();
    for sample in ready {
        let continues = sample
            .extends
            .as_deref()
            .and_then(|before| open.get(before).copied())
            .filter(|&i| {
                chains[i]
                    .last()
                    .is_some_and(|last| Some(last.turn_id.as_str()) == sample.extends.as_deref())
            });
        match continues {
            Some(i) => chains[i].push(sample),
            None => chains.push(vec![sample]),
        }
        let index = continues.unwrap_or(chains.len() - 1);
        open.insert(sample.turn_id.as_str(), index);
    }
    let mut taken = Vec::new();
    for chain in chains {
        taken.push(chain);
        let count: usize = taken.iter().map(Vec::len).sum();
        if count >= size {
            break;
        }
    }
    Some(taken)
}

/// The chains as datums, their advantages from `baselines` (a sample
/// without a reward gets 0 and leaves the baseline alone) plus, per
/// sampled token, the terms in `per_token` (by turn id: distillation). A
/// batch with no signal comes back with no datums (its samples are to be
/// skipped).
pub fn assemble(
    chains: &Chains<'_>,
    baselines: &mut Baselines,
    decay: f64,
    per_token: &HashMap<String, Vec<f32>>,
) -> Batch {
    let mut batch = Batch::default();
    for chain in chains {
        let groups: Vec<Option<GroupAdvantages>> = chain
            .iter()
            .map(|s| s.group.as_ref().and_then(group_advantages))
            .collect();
        let advantages: Vec<f64> = chain
            .iter()
            .zip(&groups)
            .map(|(s, group)| match (&s.group, group, s.reward) {
                // Sampled with siblings: centred on its group, or no signal.
                (Some(_), Some((served, _)), _) => *served,
                (Some(_), None, _) | (None, _, None) => 0.0,
                (None, _, Some(r)) => baselines.advantage(s.policy_version, r, decay),
            })
            .collect();
        let steps: Vec<TrajectoryStep<'_>> = chain
            .iter()
            .zip(&advantages)
            .map(|(s, &a)| TrajectoryStep {
                prompt: &s.prompt_tokens,
                tokens: &s.tokens,
                logprobs: &s.logprobs,
                advantage: a as f32,
                token_advantages: per_token.get(&s.turn_id).map_or(&[], Vec::as_slice),
            })
            .collect();
        match Datum::from_trajectory(&steps) {
            Ok(datum) => batch.data.push(datum),
            // Recorded as extending but not (should not happen): each turn
            // on its own.
            Err(_) => {
                for step in &steps {
                    if let Ok(datum) = Datum::from_trajectory(std::slice::from_ref(step)) {
                        batch.data.push(datum);
                    }
                }
            }
        }
        // Each sibling with its advantage: a datum of its own.
        for (s, group) in chain.iter().zip(&groups) {
            let (Some(g), Some((_, advantages))) = (&s.group, group) else {
                continue;
            };
            for (idx, a) in advantages {
                let Some(sibling) = g.siblings.iter().find(|x| x.idx == *idx) else {
                    continue;
                };
                let key = sibling_key(&s.turn_id, *idx);
                let step = TrajectoryStep {
                    prompt: &s.prompt_tokens,
                    tokens: &sibling.tokens,
                    logprobs: &sibling.logprobs,
                    advantage: *a as f32,
                    token_advantages: per_token.get(&key).map_or(&[], Vec::as_slice),
                };
                if let Ok(datum) = Datum::from_trajectory(&[step]) {
                    batch.data.push(datum);
                    batch.tokens += sibling.tokens.len();
                    batch.siblings += 1;
                }
            }
        }
        for (s, a) in chain.iter().zip(advantages) {
            batch.samples.push((s.turn_id.clone(), a));
            batch.tokens += s.tokens.len();
            batch.answer_tokens.push(s.tokens.len());
            batch.truncated += usize::from(s.truncated);
            match &s.group {
                // Every answer of the group, judged alike: the step's
                // reward is over all it sampled, not the one it served.
                Some(g) => {
                    batch.rewards.extend(g.served);
                    for sibling in &g.siblings {
                        batch.rewards.extend(sibling.reward);
                        batch.answer_tokens.push(sibling.tokens.len());
                        batch.truncated += usize::from(sibling.finish_reason == "length");
                    }
                }
                None => batch.rewards.extend(s.reward),
            }
        }
    }
    batch.mean_reward = batch.rewards.iter().sum::<f64>() / batch.rewards.len().max(1) as f64;
    // Signal: any advantage sent that is not zero (the turns', the
    // siblings', the per-token terms on top).
    let signal = batch.data.iter().any(|d| {
        d.loss_fn_inputs
            .get("advantages")
            .is_some_and(|a| advantage::has_signal(&a.floats()))
    });
    if !signal {
        batch.data.clear();
    }
    batch
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// [`take`] and [`assemble`] with no per-token terms.
    fn build(
        ready: &[Ready],
        min: usize,
        size: usize,
        baselines: &mut Baselines,
        decay: f64,
    ) -> Option<Batch> {
        let chains = take(ready, min, size)?;
        Some(assemble(&chains, baselines, decay, &HashMap::new()))
    }

    fn ready(
        turn: &str,
        extends: Option<&str>,
        prompt: Vec<i32>,
        tokens: Vec<i32>,
        reward: f64,
    ) -> Ready {
        Ready {
            turn_id: turn.into(),
            session_id: "s".into(),
            seq: 0,
            trajectory: "t1".into(),
            extends: extends.map(str::to_string),
            reward: Some(reward),
            skill_generation: 0,
            policy_version: 0,
            logprobs: vec![-0.5; tokens.len()],
            prompt_tokens: prompt,
            tokens,
            group: None,
            truncated: false,
        }
    }

    #[test]
    fn a_chain_of_turns_is_one_datum_and_a_cut_chain_two() {
        let samples = vec![
            ready("t1", None, vec![1, 2], vec![3], 1.0),
            ready("t2", Some("t1"), vec![1, 2, 3, 4], vec![5], -1.0),
            // Extends a turn that is not here: a datum of its own.
            ready("t4", Some("t3"), vec![1, 2, 3, 4, 5, 6, 7], vec![8], 1.0),
        ];
        let mut baselines = Baselines::default();
        let batch = build(&samples, 3, 3, &mut baselines, 0.5).unwrap();
        assert_eq!(batch.data.len(), 2);
        assert_eq!(batch.samples.len(), 3);
        assert_eq!(batch.tokens, 3);
        // t1 sets the baseline (advantage 0), t2 is below it.
        assert_eq!(batch.samples[0], ("t1".into(), 0.0));
        assert_eq!(batch.samples[1], ("t2".into(), -2.0));
        let advantages = batch.data[0].loss_fn_inputs["advantages"].floats();
        assert_eq!(advantages, vec![0.0, 0.0, 0.0, -2.0]);
        // Fewer ready than the batch size: nothing yet.
        assert!(build(&samples[..2], 3, 3, &mut Baselines::default(), 0.5).is_none());
    }

    #[test]
    fn a_chain_is_never_split_across_batches() {
        // A batch of two, and the first chain has three turns: the chain
        // comes whole, and the sample after it waits for the next batch.
        let samples = vec![
            ready("t1", None, vec![1], vec![2], 1.0),
            ready("t2", Some("t1"), vec![1, 2, 3], vec![4], -1.0),
            ready("t3", Some("t2"), vec![1, 2, 3, 4, 5], vec![6], 1.0),
            ready("u1", None, vec![1], vec![7], -1.0),
        ];
        let batch = build(&samples, 2, 2, &mut Baselines::default(), 0.5).unwrap();
        assert_eq!(batch.data.len(), 1);
        let turns: Vec<&str> = batch.samples.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(turns, ["t1", "t2", "t3"]);
    }

    #[test]
    fn a_batch_with_no_signal_has_no_datums() {
        let samples = vec![
            ready("a", None, vec![1, 2], vec![3], 1.0),
            ready("b", None, vec![1, 2], vec![4], 1.0),
        ];
        let batch = build(&samples, 2, 2, &mut Baselines::default(), 0.5).unwrap();
        assert!(batch.data.is_empty());
        assert_eq!(batch.samples.len(), 2);
    }

    /// A distillation term moves a turn the judge scored 0 (and one with
    /// no reward at all): the batch trains, and the turn's sampled tokens
    /// carry the term on top of its (zero) advantage.
    #[test]
    fn per_token_terms_give_signal_to_unscored_turns() {
        let mut unscored = ready("b", None, vec![1, 2], vec![4, 5], 0.0);
        unscored.reward = None;
        let samples = vec![ready("a", None, vec![1, 2], vec![3], 0.0), unscored];
        let chains = take(&samples, 2, 2).unwrap();
        let mut baselines = Baselines::default();
        let flat = assemble(&chains, &mut baselines.clone(), 0.5, &HashMap::new());
        assert!(flat.data.is_empty(), "no reward signal and no terms");
        let terms = HashMap::from([
            ("a".to_string(), vec![0.5]),
            ("b".to_string(), vec![-0.25, 1.0]),
        ]);
        let batch = assemble(&chains, &mut baselines, 0.5, &terms);
        assert_eq!(batch.data.len(), 2);
        assert_eq!(
            batch.data[0].loss_fn_inputs["advantages"].floats(),
            vec![0.0, 0.5]
        );
        assert_eq!(
            batch.data[1].loss_fn_inputs["advantages"].floats(),
            vec![0.0, -0.25, 1.0]
        );
        // The turn without a reward neither counts in the mean nor moves
        // the baseline.
        assert_eq!(batch.mean_reward, 0.0);
        assert_eq!(baselines.values[&0].1, 1);
    }

    /// A turn sampled with siblings: its answer and theirs are centred on
    /// the group's mean, each sibling a datum of its own (the prompt and
    /// that answer); a sibling that did not parse or has no reward is left
    /// out; a flat group has no signal.
    #[test]
    fn a_group_is_centred_and_its_siblings_trained_beside_it() {
        let sibling = |idx, tokens: Vec<i32>, reward, parse_error: Option<&str>| StoredSibling {
            idx,
            logprobs: vec![-1.0; tokens.len()],
            tokens,
            message: serde_json::Value::Null,
            finish_reason: "stop".into(),
            reward,
            parse_error: parse_error.map(str::to_string),
        };
        let mut turn = ready("t", None, vec![1, 2], vec![3], 1.0);
        turn.group = Some(Group {
            served: Some(1.0),
            siblings: vec![
                sibling(1, vec![4, 5], Some(-1.0), None),
                sibling(2, vec![6], Some(1.0), Some("bad tool call")),
                sibling(3, vec![7], None, None),
            ],
        });
        let samples = vec![turn.clone()];
        let chains = take(&samples, 1, 1).unwrap();
        let mut baselines = Baselines::default();
        let batch = assemble(&chains, &mut baselines, 0.5, &HashMap::new());
        // The served answer and sibling 1: rewards 1 and -1, mean 0.
        assert_eq!(batch.samples, [("t".to_string(), 1.0)]);
        assert_eq!(batch.siblings, 1);
        assert_eq!(batch.data.len(), 2);
        assert_eq!(
            batch.data[0].loss_fn_inputs["advantages"].floats(),
            vec![0.0, 1.0]
        );
        assert_eq!(
            batch.data[1].loss_fn_inputs["advantages"].floats(),
            vec![0.0, -1.0, -1.0]
        );
        assert_eq!(
            batch.data[1].loss_fn_inputs["target_tokens"].floats(),
            vec![2.0, 4.0, 5.0]
        );
        assert!(baselines.values.is_empty(), "a group needs no baseline");
        // The step's health is over every answer sampled and judged (the
        // one without a reward left out), not only the served one.
        assert_eq!(batch.rewards, [1.0, -1.0, 1.0]);
        assert_eq!(batch.answer_tokens, [1, 2, 1, 1]);
        assert!((batch.mean_reward - 1.0 / 3.0).abs() < 1e-12);
        // Sibling-level per-token terms (distillation) reach its datum.
        let terms = HashMap::from([(sibling_key("t", 1), vec![0.5, 0.25])]);
        let batch = assemble(&chains, &mut Baselines::default(), 0.5, &terms);
        assert_eq!(
            batch.data[1].loss_fn_inputs["advantages"].floats(),
            vec![0.0, -0.5, -0.75]
        );
        // Every member scored alike: no signal, nothing to train.
        turn.group = Some(Group {
            served: Some(1.0),
            siblings: vec![sibling(1, vec![4], Some(1.0), None)],
        });
        let samples = vec![turn];
        let chains = take(&samples, 1, 1).unwrap();
        let flat = assemble(&chains, &mut Baselines::default(), 0.5, &HashMap::new());
        assert!(flat.data.is_empty());
        assert_eq!(flat.samples, [("t".to_string(), 0.0)]);
    }
}
