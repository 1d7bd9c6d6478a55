//! One reward per turn from the judge's score and the scorers' rewards
//! (`learning.reward`).
//!
//! Default, `weighted`: judge_weight × judge + Σ weight(scorer) × reward,
//! clamped to [-1, 1]. A turn the judge calls good (+1) whose tool call
//! failed (tool-error −0.75) ends at +0.25; a corrected turn (judge −1,
//! correction −1) at −1. `min` takes the most negative signal (else the
//! most positive); `judge` takes the judge alone, the scorers only when it
//! did not judge.

use crate::config::schema::{RewardCombine, RewardConfig};

/// A scorer's reward, by its plugin name.
pub struct ScorerReward<'a> {
    pub name: &'a str,
    pub value: f64,
}

/// The turn's reward, or `None` when nobody had an opinion.
pub fn combine(
    config: &RewardConfig,
    judge: Option<i8>,
    scorers: &[ScorerReward<'_>],
) -> Option<f64> {
    let judge = judge.map(f64::from);
    let weight = |name: &str| f64::from(*config.scorer_weights.get(name).unwrap_or(&1.0));
    let weighted = || -> Option<f64> {
        if judge.is_none() && scorers.is_empty() {
            return None;
        }
        let sum = judge.unwrap_or(0.0) * f64::from(config.judge_weight)
            + scorers
                .iter()
                .map(|s| weight(s.name) * s.value)
                .sum::<f64>();
        Some(sum.clamp(-1.0, 1.0))
    };
    match config.combine {
        RewardCombine::Min => {
            let signals = judge.into_iter().chain(
                scorers
                    .iter()
                    .filter(|s| weight(s.name) != 0.0)
                    .map(|s| s.value),
            );
            signals.fold(None, |acc: Option<f64>, v| {
                Some(match acc {
                    None => v,
                    Some(a) if a < 0.0 || v < 0.0 => a.min(v),
                    Some(a) => a.max(v),
                })
            })
        }
        RewardCombine::Judge => judge.or_else(weighted),
        RewardCombine::Weighted => weighted(),
    }
}

/// `plugin:tool-error@0.1.0` → `tool-error`.
pub fn scorer_name(source: &str) -> &str {
    let name = source.strip_prefix("plugin:").unwrap_or(source);
    name.split('@').next().unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(combine: RewardCombine) -> RewardConfig {
        RewardConfig {
            combine,
            ..RewardConfig::default()
        }
    }

    fn r(name: &str, value: f64) -> ScorerReward<'_> {
        ScorerReward { name, value }
    }

    #[test]
    fn rewards_combine_as_documented() {
        let w = config(RewardCombine::Weighted);
        assert_eq!(combine(&w, Some(1), &[r("tool-error", -0.75)]), Some(0.25));
        assert_eq!(
            combine(&w, Some(-1), &[r("correction", -1.0)]),
            Some(-1.0),
            "clamped"
        );
        assert_eq!(combine(&w, None, &[]), None);
        assert_eq!(combine(&w, Some(0), &[]), Some(0.0));
        let mut heavy = config(RewardCombine::Weighted);
        heavy.judge_weight = 0.5;
        heavy.scorer_weights.insert("tool-error".into(), 0.0);
        assert_eq!(
            combine(&heavy, Some(1), &[r("tool-error", -1.0)]),
            Some(0.5)
        );

        let m = config(RewardCombine::Min);
        assert_eq!(combine(&m, Some(1), &[r("tool-error", -0.75)]), Some(-0.75));
        assert_eq!(combine(&m, Some(0), &[r("x", 0.5)]), Some(0.5));
        assert_eq!(combine(&m, Some(-1), &[r("x", 0.5)]), Some(-1.0));
        assert_eq!(combine(&m, None, &[]), None);

        let j = config(RewardCombine::Judge);
        assert_eq!(combine(&j, Some(1), &[r("tool-error", -1.0)]), Some(1.0));
        assert_eq!(combine(&j, None, &[r("tool-error", -0.5)]), Some(-0.5));
        assert_eq!(scorer_name("plugin:tool-error@0.1.0"), "tool-error");
    }
}
