//! Rewards to advantages. A sample's advantage is its reward minus what was
//! expected, so that the update pushes up answers better than usual and
//! down worse ones, not every answer with a positive reward.
//!
//! - **Group** (`rl.advantage: group`; several samples of one prompt):
//!   A = R − mean(R of the group), not divided by the spread (reference
//!   §15.2). A group whose rewards are all equal carries no signal and is
//!   dropped.
//! - **Running baseline** (default, one sample per turn): per skill
//!   generation and policy version (what the reward depends on besides the
//!   answer), b ← b + decay · (R − b); A = R − b with b taken before the
//!   update. A new policy version starts from the baseline of the version
//!   before it in the same generation (a train step moves the policy a
//!   little, not to a stranger); a key with nothing before it starts at its
//!   first reward, whose advantage is then 0 (nothing to compare it with).
//!
//! A batch whose advantages are all zero is skipped, never trained as
//! zeros. The trainer keeps the baselines in the store (`rl_baselines`)
//! across restarts.

use std::collections::HashMap;

/// The running baselines, by (skill generation, policy version): the value
/// and how many rewards it has seen.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Baselines {
    pub values: HashMap<(u64, i64), (f64, u64)>,
}

impl Baselines {
    /// The advantage of `reward` under `key`, updating its baseline.
    pub fn advantage(&mut self, key: (u64, i64), reward: f64, decay: f64) -> f64 {
        if !self.values.contains_key(&key) {
            let before = self
                .values
                .iter()
                .filter(|((generation, version), _)| *generation == key.0 && *version < key.1)
                .max_by_key(|((_, version), _)| *version)
                .map(|(_, (value, _))| *value);
            self.values.insert(key, (before.unwrap_or(reward), 0));
        }
        match self.values.get_mut(&key) {
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
    fn the_baseline_follows_the_rewards_of_its_key() {
        let mut b = Baselines::default();
        let key = (3, 0);
        // The first reward of a key is the baseline: no advantage.
        assert_eq!(b.advantage(key, 1.0, 0.5), 0.0);
        // Better than expected: positive; worse: negative.
        assert_eq!(b.advantage(key, 1.0, 0.5), 0.0);
        assert_eq!(b.advantage(key, -1.0, 0.5), -2.0);
        // b = 1 + 0.5·(−1 − 1) = 0: a +1 is now +1.
        assert_eq!(b.advantage(key, 1.0, 0.5), 1.0);
        // The next policy version starts from this one's baseline (0.5).
        assert_eq!(b.advantage((3, 1), -1.0, 0.5), -1.5);
        // Another generation starts at its first reward.
        assert_eq!(b.advantage((4, 1), -1.0, 0.5), 0.0);
        assert_eq!(b.values[&key].1, 4);
        assert!(has_signal(&[0.0, 0.2]) && !has_signal(&[0.0, 0.0]));
    }
}
