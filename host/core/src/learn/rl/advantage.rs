//! Rewards to advantages. A sample's advantage is its reward minus what was
//! expected, so that the update pushes up answers better than usual and
//! down worse ones, not every answer with a positive reward.
//!
//! - **Group** (`rl.advantage: group`; several samples of one prompt):
//!   A = R − mean(R of the group), not divided by the spread (reference
//!   §15.2). A group whose rewards are all equal carries no signal and is
//!   dropped.
//! - **Running baseline** (default, one sample per turn): per policy
//!   version, b ← b + decay · (R − b); A = R − b with b taken before the
//!   update. A new policy version starts from the baseline of the version
//!   before it (a train step moves the policy a little, not to a
//!   stranger); the first version of all starts at its first reward, whose
//!   advantage is then 0 (nothing to compare it with).
//!
//! **Why per policy version, and not per skill generation too.** The
//! baseline is REINFORCE's b: any value that does not depend on the answer
//! keeps the gradient unbiased, and the one that lowers its variance most
//! is the reward the sampling policy is expected to get, which is what a
//! running mean over one version's rewards estimates. The skill library is
//! part of a turn's prompt (the state), and a baseline may depend on the
//! state, but the generation is a library-wide counter, not the turn's
//! state: since a batch now mixes generations (a sample stays trainable
//! while the skills in its own prompt are unchanged,
//! `store::train_queue`), keying on it would judge two answers with the
//! same skills in their prompts against different expectations only
//! because an unrelated skill was added between them, and every change
//! would restart a baseline from its first reward (advantage 0: a sample
//! thrown away). Keying on the injected skills themselves would be a
//! state baseline in earnest, but split a personal agent's few samples a
//! day into many keys, most of them seen once. So: one baseline per
//! version of the weights that sampled.
//!
//! A batch whose advantages are all zero is skipped, never trained as
//! zeros. The trainer keeps the baselines in the store
//! (`rl_policy_baselines`) across restarts.

use std::collections::HashMap;

/// The running baselines, by policy version: the value and how many
/// rewards it has seen.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Baselines {
    pub values: HashMap<i64, (f64, u64)>,
}

impl Baselines {
    /// The advantage of `reward` of an answer sampled by policy `version`,
    /// updating its baseline.
    pub fn advantage(&mut self, version: i64, reward: f64, decay: f64) -> f64 {
        if !self.values.contains_key(&version) {
            let before = self
                .values
                .iter()
                .filter(|(v, _)| **v < version)
                .max_by_key(|(v, _)| **v)
                .map(|(_, (value, _))| *value);
            self.values.insert(version, (before.unwrap_or(reward), 0));
        }
        match self.values.get_mut(&version) {
            None => 0.0,
            Some((value, count)) => {
                let advantage = reward - *value;
                *value += decay * (reward - *value);
                *count += 1;
                advantage
            }
        }
    }
}

/// Group-centred advantages; `None` when the group carries no signal.
pub fn group(rewards: &[f64]) -> Option<Vec<f64>> {
    let first = *rewards.first()?;
    if rewards.iter().all(|r| (r - first).abs() < 1e-9) {
        return None;
    }
    let mean = rewards.iter().sum::<f64>() / rewards.len() as f64;
    Some(rewards.iter().map(|r| r - mean).collect())
}

/// Whether any advantage is not zero.
pub fn has_signal(advantages: &[f32]) -> bool {
    advantages.iter().any(|a| a.abs() > 1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_is_centred_and_a_flat_group_dropped() {
        assert_eq!(group(&[1.0, -1.0, 0.0]), Some(vec![1.0, -1.0, 0.0]));
        assert_eq!(group(&[1.0, 0.0]), Some(vec![0.5, -0.5]));
        assert_eq!(group(&[0.5, 0.5, 0.5]), None);
        assert_eq!(group(&[]), None);
    }

    #[test]
    fn the_baseline_follows_the_rewards_of_its_policy_version() {
        let mut b = Baselines::default();
        // The first reward of all is the baseline: no advantage.
        assert_eq!(b.advantage(0, 1.0, 0.5), 0.0);
        // Better than expected: positive; worse: negative.
        assert_eq!(b.advantage(0, 1.0, 0.5), 0.0);
        assert_eq!(b.advantage(0, -1.0, 0.5), -2.0);
        // b = 1 + 0.5·(−1 − 1) = 0: a +1 is now +1.
        assert_eq!(b.advantage(0, 1.0, 0.5), 1.0);
        // The next policy version starts from this one's baseline (0.5),
        // as does one a few steps on.
        assert_eq!(b.advantage(1, -1.0, 0.5), -1.5);
        assert_eq!(b.advantage(4, 1.0, 0.5), 1.25);
        assert_eq!(b.values[&0].1, 4);
        assert!(has_signal(&[0.0, 0.2]) && !has_signal(&[0.0, 0.0]));
    }
}
