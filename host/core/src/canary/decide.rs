//! The sequential decision of a canary: promote, roll back or keep testing,
//! from the judged rewards of its two arms, at any time without inflating
//! the error (docs/learning.md "Canaries" has the same rule in words).
//!
//! **Pairs.** The candidate arm's sessions and the control arm's, each in
//! the order they were judged, are paired k-th with k-th; a pair's
//! difference `y = (r_candidate − r_control) / 2` lies in [−1, 1] (rewards
//! in [−1, 1]). The arms are assigned at random, so a pair compares like
//! with like on average whatever the topic, user or time of day.
//!
//! **Testing by betting** (Waudby-Smith & Ramdas, 2023). Two gamblers start
//! with wealth 1. "Better" stakes a share λ⁺ of its wealth on `y > 0`,
//! "worse" a share λ⁻ on `y < 0`:
//!
//! ```text
//! W⁺ₜ = Πₖ (1 + λ⁺ₖ yₖ)        W⁻ₜ = Πₖ (1 − λ⁻ₖ yₖ)
//! ```
//!
//! with each stake chosen before its pair is seen (aGRAPA: the growth-
//! optimal share for the pairs so far, `m / (v + m²)` from their shrunk
//! mean `m` and variance `v`, clipped to [0, `MAX_STAKE`]). If the
//! candidate is no better than the control (E[y] ≤ 0), W⁺ is a
//! non-negative supermartingale, and by Ville's inequality
//! `P(W⁺ ever reaches 1/δ) ≤ δ`: promoting when it does wrongly promotes a
//! neutral or harmful candidate with probability at most δ, however long
//! the test runs and however often it looks. Rolling back when W⁻ reaches
//! 1/δ bounds wrongly rolling back a helpful one the same way.
//!
//! **Floors and limits.** No decision before each arm has `min_sessions`
//! judged sessions; a candidate undecided after `max_days` is rolled back
//! or kept (`on_timeout`).

use serde::Serialize;

/// The largest share of its wealth a gambler stakes on one pair: with
/// |y| ≤ 1 a pair can cost at most half its wealth, so one bad pair never
/// ruins it.
pub const MAX_STAKE: f64 = 0.5;

/// What the test says now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Promote,
    RollBack,
    KeepTesting,
}

/// The decision's settings (config `canary.*`).
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// The bound on a wrong promotion (and on a wrong rollback).
    pub delta: f64,
    /// Judged sessions each arm needs before any decision.
    pub min_sessions: usize,
}

/// The test's state after some pairs, with what a user is shown.
#[derive(Debug, Clone, Serialize)]
pub struct Evidence {
    pub pairs: usize,
    /// Judged sessions of each arm (the unpaired rest waits for a partner).
    pub candidate_sessions: usize,
    pub control_sessions: usize,
    /// Mean reward of each arm over all its judged sessions.
    pub candidate_mean: Option<f64>,
    pub control_mean: Option<f64>,
    /// The candidate's mean advantage over the paired control sessions
    /// (`2·mean(y)`), with a 95 % interval (normal approximation at this
    /// sample size: for reading, not the decision).
    pub effect: Option<f64>,
    pub interval: Option<(f64, f64)>,
    /// The gamblers' wealth: the evidence for "better" and for "worse"
    /// (a decision at 1/δ).
    pub wealth_better: f64,
    pub wealth_worse: f64,
    pub threshold: f64,
    pub verdict: Verdict,
    /// Why, in one sentence.
    pub reason: String,
}

/// The two gamblers' state over the pairs so far.
#[derive(Debug, Clone)]
pub struct Bets {
    pairs: usize,
    sum: f64,
    sum_sq: f64,
    better: f64,
    worse: f64,
}

impl Default for Bets {
    fn default() -> Self {
        Self {
            pairs: 0,
            sum: 0.0,
            sum_sq: 0.0,
            better: 1.0,
            worse: 1.0,
        }
    }
}

impl Bets {
    /// Settles one pair: the stakes were fixed by the pairs before it.
    pub fn add(&mut self, candidate: f64, control: f64) {
        let y = (candidate.clamp(-1.0, 1.0) - control.clamp(-1.0, 1.0)) / 2.0;
        // Shrunk towards "no difference, spread 1/2" by one pseudo-pair, so
        // the first stakes are small and never divide by zero.
        let n = self.pairs as f64 + 1.0;
        let mean = self.sum / n;
        let var = (0.25 + self.sum_sq - n * mean * mean).max(0.0) / n;
        let growth = mean / (var + mean * mean).max(1e-12);
        self.better *= 1.0 + growth.clamp(0.0, MAX_STAKE) * y;
        self.worse *= 1.0 - (-growth).clamp(0.0, MAX_STAKE) * y;
        self.pairs += 1;
        self.sum += y;
        self.sum_sq += y * y;
    }

    /// The verdict, given each arm's judged sessions (the floor).
    pub fn verdict(&self, sessions_each: usize, rule: Rule) -> (Verdict, String) {
        let threshold = threshold(rule);
        let (better, worse, n) = (self.better, self.worse, self.pairs);
        if sessions_each < rule.min_sessions {
            (
                Verdict::KeepTesting,
                format!(
                    "waiting for {} judged sessions in each arm ({sessions_each} so far)",
                    rule.min_sessions
                ),
            )
        } else if better >= threshold {
            (
                Verdict::Promote,
                format!(
                    "better than the control: evidence {better:.1} ≥ 1/δ = {threshold:.0} over {n} pairs"
                ),
            )
        } else if worse >= threshold {
            (
                Verdict::RollBack,
                format!(
                    "worse than the control: evidence {worse:.1} ≥ 1/δ = {threshold:.0} over {n} pairs"
                ),
            )
        } else {
            (
                Verdict::KeepTesting,
                format!(
                    "no decision yet: evidence better {better:.2}, worse {worse:.2}, a decision at {threshold:.0}"
                ),
            )
        }
    }

    /// The mean advantage (`2·mean(y)`) with a 95 % normal interval.
    fn effect(&self) -> (Option<f64>, Option<(f64, f64)>) {
        let n = self.pairs as f64;
        if self.pairs == 0 {
            return (None, None);
        }
        let mean = self.sum / n;
        let sd = if self.pairs > 1 {
            ((self.sum_sq - n * mean * mean).max(0.0) / (n - 1.0)).sqrt()
        } else {
            1.0
        };
        let half = 1.96 * sd / n.sqrt();
        (
            Some(2.0 * mean),
            Some((2.0 * (mean - half), 2.0 * (mean + half))),
        )
    }
}

fn threshold(rule: Rule) -> f64 {
    1.0 / rule.delta.clamp(1e-9, 1.0)
}

/// Runs the test over the two arms' rewards (each in judging order).
pub fn decide(candidate: &[f64], control: &[f64], rule: Rule) -> Evidence {
    let mut bets = Bets::default();
    for (c, b) in candidate.iter().zip(control) {
        bets.add(*c, *b);
    }
    let (verdict, reason) = bets.verdict(candidate.len().min(control.len()), rule);
    let (effect, interval) = bets.effect();
    Evidence {
        pairs: bets.pairs,
        candidate_sessions: candidate.len(),
        control_sessions: control.len(),
        candidate_mean: mean_of(candidate),
        control_mean: mean_of(control),
        effect,
        interval,
        wealth_better: bets.better,
        wealth_worse: bets.worse,
        threshold: threshold(rule),
        verdict,
        reason,
    }
}

fn mean_of(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

/// What the simulations share (here and in `learn::canary`).
#[cfg(test)]
pub(crate) mod sim {
    /// splitmix64: a seeded generator, so every simulation is reproducible.
    pub struct Rng(pub u64);
    impl Rng {
        pub fn next(&mut self) -> f64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        }
        /// A judge's verdict with mean `mean`: +1, 0 or −1 (a third of
        /// sessions undecided, as the dummy judge's spread).
        pub fn reward(&mut self, mean: f64) -> f64 {
            let u = self.next();
            let up = (2.0 / 3.0 + mean) / 2.0;
            if u < up {
                1.0
            } else if u < 2.0 / 3.0 {
                -1.0
            } else {
                0.0
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::sim::Rng;
    use super::*;

    const RULE: Rule = Rule {
        delta: 0.05,
        min_sessions: 10,
    };

    /// Feeds one judged session at a time to each arm and returns the first
    /// decision with the sessions per arm it took (or `KeepTesting` at the
    /// limit).
    fn run(seed: u64, candidate: f64, control: f64, limit: usize) -> (Verdict, usize) {
        let mut rng = Rng(seed);
        let mut bets = Bets::default();
        for n in 1..=limit {
            let a = rng.reward(candidate);
            bets.add(a, rng.reward(control));
            let (verdict, _) = bets.verdict(n, RULE);
            if verdict != Verdict::KeepTesting {
                return (verdict, n);
            }
        }
        (Verdict::KeepTesting, limit)
    }

    struct Tally {
        promoted: usize,
        rolled_back: usize,
        median_sessions: usize,
    }

    fn tally(runs: u64, candidate: f64, control: f64, limit: usize) -> Tally {
        let mut promoted = 0;
        let mut rolled_back = 0;
        let mut sessions = Vec::new();
        for seed in 0..runs {
            let (verdict, n) = run(seed, candidate, control, limit);
            match verdict {
                Verdict::Promote => promoted += 1,
                Verdict::RollBack => rolled_back += 1,
                Verdict::KeepTesting => {}
            }
            sessions.push(n);
        }
        sessions.sort_unstable();
        let t = Tally {
            promoted,
            rolled_back,
            median_sessions: sessions[sessions.len() / 2],
        };
        eprintln!(
            "candidate {candidate:+.2} vs control {control:+.2}, {runs} runs of ≤ {limit} sessions an arm: \
             promoted {}, rolled back {}, median sessions an arm to the end {}",
            t.promoted, t.rolled_back, t.median_sessions
        );
        t
    }

    /// The guarantee: a candidate no better than the control is promoted in
    /// at most δ of runs, however long each runs (here up to 1,000 sessions
    /// an arm, looking after every one).
    #[test]
    fn a_neutral_candidate_is_promoted_in_at_most_delta_of_runs() {
        let t = tally(2000, 0.1, 0.1, 1000);
        assert!(t.promoted as f64 / 2000.0 <= RULE.delta, "{}", t.promoted);
    }

    #[test]
    fn a_harmful_candidate_is_rolled_back_and_almost_never_promoted() {
        let t = tally(2000, -0.1, 0.1, 1000);
        assert!(t.promoted as f64 / 2000.0 <= RULE.delta, "{}", t.promoted);
        assert!(t.rolled_back >= 1900, "{}", t.rolled_back);
    }

    #[test]
    fn a_helpful_candidate_is_promoted() {
        let t = tally(500, 0.4, 0.1, 1000);
        assert!(t.promoted >= 475, "{}", t.promoted);
        assert!(t.median_sessions < 200, "{}", t.median_sessions);
    }

    #[test]
    fn a_clearly_worse_candidate_is_rolled_back_quickly() {
        let t = tally(500, -0.2, 0.1, 1000);
        assert!(t.rolled_back >= 475, "{}", t.rolled_back);
        assert!(t.median_sessions < 200, "{}", t.median_sessions);
    }

    #[test]
    fn nothing_is_decided_before_each_arm_has_its_minimum() {
        // Nine sessions of +1 against nine of −1: overwhelming, but short.
        let e = decide(&[1.0; 9], &[-1.0; 30], RULE);
        assert_eq!(e.verdict, Verdict::KeepTesting);
        assert!(e.reason.contains("waiting for 10"), "{}", e.reason);
        let e = decide(&[1.0; 10], &[-1.0; 10], RULE);
        assert_eq!(e.verdict, Verdict::Promote, "{}", e.reason);
        assert_eq!(e.effect, Some(2.0));
    }

    #[test]
    fn unpaired_sessions_count_for_the_means_not_the_pairs() {
        let e = decide(&[1.0, 1.0, 1.0], &[0.0], RULE);
        assert_eq!(e.pairs, 1);
        assert_eq!(e.candidate_mean, Some(1.0));
        assert_eq!(e.effect, Some(1.0));
    }
}
