//! Is training working? A verdict over a run's recent steps — learning,
//! flat, collapsing, or not enough data — from what each step recorded
//! (reward, KL(sampler‖learner), entropy, answer length, truncation). The
//! rule is the one docs/rl.md states; `train status`, `status`, the log
//! and the dashboard show it, and `rl.on_collapse` acts on it.
//!
//! The rule, over the last `window` steps (split into an early and a late
//! half):
//! - **not enough data** while the run has fewer than `min_steps` steps
//!   with a reward;
//! - the reward's change is judged by Welch's t over the samples' rewards
//!   of the two halves (each step's mean, spread and count);
//! - **collapsing** when the reward fell (t ≤ −`t_change`) and the policy
//!   shows a collapse signature (entropy moved by half or more, KL above
//!   `kl_high`, answers a third shorter, or a quarter more of them cut off
//!   at the length limit), or when it fell hard (t ≤ −`t_collapse`) with
//!   none;
//! - **learning** when the reward rose (t ≥ `t_change`);
//! - **flat** otherwise.

use serde::{Deserialize, Serialize};

/// What one step recorded that the verdict reads (`training_steps.metrics`,
/// its `metaclaw` part).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StepHealth {
    pub step: i64,
    /// Served samples with a reward trained (what is judged).
    pub samples: u64,
    pub mean_reward: Option<f64>,
    /// The spread of those samples' rewards (population standard deviation).
    pub reward_sd: Option<f64>,
    pub kl: Option<f64>,
    pub entropy: Option<f64>,
    /// Mean sampled tokens of a served answer.
    pub answer_tokens: Option<f64>,
    /// Share of served answers cut off at the length limit.
    pub truncated: Option<f64>,
    /// Samples the queue had skipped (never trained) when the step ran, in
    /// all: the step before's figure subtracted, those skipped between.
    pub skipped_total: Option<u64>,
}

impl StepHealth {
    /// From a stored step: its `metaclaw` metrics (`datums`, the step's
    /// own count, stands in for the rewarded samples where a step before
    /// this version did not record them).
    pub fn of(step: &crate::store::training::Step) -> Self {
        let ours = step.ours();
        let finite = |v: Option<f64>| v.filter(|v| v.is_finite());
        Self {
            step: step.step,
            samples: ours.rewarded.unwrap_or_else(|| step.samples.max(0) as u64),
            mean_reward: finite(ours.mean_reward),
            reward_sd: finite(ours.reward_sd),
            kl: finite(ours.kl_sampler_learner),
            entropy: finite(ours.entropy),
            answer_tokens: finite(ours.answer_tokens),
            truncated: finite(ours.truncated_share),
            skipped_total: ours.skipped_total,
        }
    }
}

/// The verdict's thresholds (`rl.health`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rule {
    /// Steps the verdict looks back over.
    pub window: usize,
    /// Steps with a reward needed before any verdict.
    pub min_steps: usize,
    /// |t| at which the reward counts as moved (2: about 1 in 40 one-sided
    /// for a flat run of normal rewards).
    pub t_change: f64,
    /// t at or below −this is a collapse even without a signature.
    pub t_collapse: f64,
    /// Mean KL(sampler‖learner) above this is a signature (on-policy
    /// training keeps it near 0).
    pub kl_high: f64,
}

impl Default for Rule {
    fn default() -> Self {
        Self {
            window: 8,
            min_steps: 4,
            t_change: 2.0,
            t_collapse: 3.0,
            kl_high: 0.1,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    NotEnoughData,
    Learning,
    Flat,
    Collapsing,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotEnoughData => "not enough data",
            Self::Learning => "learning",
            Self::Flat => "flat",
            Self::Collapsing => "collapsing",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub state: State,
    /// In words, with the numbers behind it.
    pub why: String,
    /// The steps judged (first and last).
    pub steps: Option<(i64, i64)>,
    /// Mean reward of the early and the late half, and Welch's t.
    pub reward_early: Option<f64>,
    pub reward_late: Option<f64>,
    pub t: Option<f64>,
    /// The collapse signatures present (empty unless the reward fell).
    pub signatures: Vec<String>,
    /// Each step's reward smoothed (exponential, ½ per step), oldest first.
    pub smoothed: Vec<(i64, f64)>,
}

/// The verdict over stored steps (oldest first).
pub fn judge(steps: &[crate::store::training::Step], rule: &Rule) -> Verdict {
    let steps: Vec<StepHealth> = steps.iter().map(StepHealth::of).collect();
    verdict(&steps, rule)
}

/// A run's verdict as the store has it: the steps since its health mark
/// (a resume, a rollback), and whether training is paused.
pub fn of_run(
    conn: &crate::store::sql::Conn,
    run_id: &str,
    rule: &Rule,
) -> anyhow::Result<(crate::store::training::HealthMark, Verdict)> {
    let mark = crate::store::training::health_mark(conn, run_id)?;
    let steps = crate::store::training::health_steps(conn, run_id, mark.since_step, rule.window)?;
    Ok((mark, judge(&steps, rule)))
}

/// Each step's mean reward, exponentially smoothed (weight ½ on the new
/// step), oldest first; steps without a reward keep the last value.
pub fn smoothed(steps: &[StepHealth]) -> Vec<(i64, f64)> {
    let mut out = Vec::with_capacity(steps.len());
    let mut level: Option<f64> = None;
    for s in steps {
        if let Some(r) = s.mean_reward {
            level = Some(level.map_or(r, |l| 0.5 * l + 0.5 * r));
        }
        if let Some(l) = level {
            out.push((s.step, l));
        }
    }
    out
}

/// Pooled mean, variance and count of the samples' rewards of `steps`.
fn pooled(steps: &[&StepHealth]) -> Option<(f64, f64, f64)> {
    let (mut n, mut sum, mut sum_sq) = (0.0, 0.0, 0.0);
    for s in steps {
        let (Some(mean), count) = (s.mean_reward, s.samples.max(1) as f64) else {
            continue;
        };
        let sd = s.reward_sd.unwrap_or(0.0);
        n += count;
        sum += mean * count;
        sum_sq += (sd * sd + mean * mean) * count;
    }
    (n > 0.0).then(|| {
        let mean = sum / n;
        // Sample variance of the pooled rewards.
        let var = ((sum_sq - n * mean * mean) / (n - 1.0).max(1.0)).max(0.0);
        (mean, var, n)
    })
}

fn mean_of(steps: &[&StepHealth], f: impl Fn(&StepHealth) -> Option<f64>) -> Option<f64> {
    let values: Vec<f64> = steps.iter().filter_map(|s| f(s)).collect();
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// The verdict over `steps` (oldest first; only the last `rule.window` are
/// read).
pub fn verdict(steps: &[StepHealth], rule: &Rule) -> Verdict {
    let smoothed = smoothed(steps);
    let window: Vec<&StepHealth> = steps
        .iter()
        .rev()
        .take(rule.window.max(2))
        .rev()
        .filter(|s| s.mean_reward.is_some())
        .collect();
    let span = window
        .first()
        .zip(window.last())
        .map(|(a, b)| (a.step, b.step));
    let mut v = Verdict {
        state: State::NotEnoughData,
        why: String::new(),
        steps: span,
        reward_early: None,
        reward_late: None,
        t: None,
        signatures: Vec::new(),
        smoothed,
    };
    if window.len() < rule.min_steps.max(2) {
        v.why = format!(
            "{} step(s) with a reward; the verdict needs {}",
            window.len(),
            rule.min_steps.max(2)
        );
        return v;
    }
    let (early, late) = window.split_at(window.len() / 2);
    let (Some((m_early, var_early, n_early)), Some((m_late, var_late, n_late))) =
        (pooled(early), pooled(late))
    else {
        v.why = "no rewards to compare".into();
        return v;
    };
    let se = (var_early / n_early + var_late / n_late).sqrt();
    let diff = m_late - m_early;
    // Identical constant rewards: no spread, no change.
    let t = if se > 0.0 {
        diff / se
    } else if diff == 0.0 {
        0.0
    } else {
        diff.signum() * f64::INFINITY
    };
    v.reward_early = Some(m_early);
    v.reward_late = Some(m_late);
    v.t = Some(t);
    let (first, last) = span.unwrap_or_default();
    let change = format!(
        "mean reward {m_early:+.3} → {m_late:+.3} over steps {first}–{last} (t {})",
        if t.is_finite() {
            format!("{t:+.1}")
        } else {
            "±∞: no spread".into()
        }
    );
    if t <= -rule.t_change {
        v.signatures = signatures(early, late, rule);
    }
    (v.state, v.why) = if t <= -rule.t_change && (!v.signatures.is_empty() || t <= -rule.t_collapse)
    {
        let signs = if v.signatures.is_empty() {
            "a fall this large".to_string()
        } else {
            v.signatures.join(", ")
        };
        (State::Collapsing, format!("{change}; {signs}"))
    } else if t >= rule.t_change {
        (State::Learning, change)
    } else if t <= -rule.t_change {
        (
            State::Flat,
            format!(
                "{change}: it fell, but with no collapse signature and not by t ≤ −{}",
                rule.t_collapse
            ),
        )
    } else {
        (
            State::Flat,
            format!("{change}: within the noise (|t| < {})", rule.t_change),
        )
    };
    v
}

/// The collapse signatures: how the late half's policy differs from the
/// early half's.
fn signatures(early: &[&StepHealth], late: &[&StepHealth], rule: &Rule) -> Vec<String> {
    let mut out = Vec::new();
    let pair = |f: fn(&StepHealth) -> Option<f64>| mean_of(early, f).zip(mean_of(late, f));
    if let Some((a, b)) = pair(|s| s.entropy)
        && a > 0.0
        && ((b - a) / a).abs() >= 0.5
    {
        out.push(format!("entropy {a:.2} → {b:.2}"));
    }
    if let Some((a, b)) = pair(|s| s.kl)
        && b > rule.kl_high
        && b > 2.0 * a.max(0.0)
    {
        out.push(format!("KL(sampler‖learner) {a:.3} → {b:.3}"));
    }
    if let Some((a, b)) = pair(|s| s.answer_tokens)
        && a > 0.0
        && b <= a * (2.0 / 3.0)
    {
        out.push(format!("answers {a:.0} → {b:.0} tokens"));
    }
    if let Some((a, b)) = pair(|s| s.truncated)
        && b - a >= 0.25
    {
        out.push(format!(
            "cut off at the length limit {:.0}% → {:.0}%",
            a * 100.0,
            b * 100.0
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(step: i64, reward: f64, entropy: f64, tokens: f64) -> StepHealth {
        StepHealth {
            step,
            samples: 16,
            mean_reward: Some(reward),
            reward_sd: Some(0.5),
            kl: Some(0.001),
            entropy: Some(entropy),
            answer_tokens: Some(tokens),
            truncated: Some(0.0),
            skipped_total: Some(0),
        }
    }

    fn run(
        rewards: &[f64],
        entropy: impl Fn(usize) -> f64,
        tokens: impl Fn(usize) -> f64,
    ) -> Vec<StepHealth> {
        rewards
            .iter()
            .enumerate()
            .map(|(i, r)| step(i as i64 + 1, *r, entropy(i), tokens(i)))
            .collect()
    }

    #[test]
    fn too_few_steps_say_so() {
        let v = verdict(&run(&[0.1, 0.2, 0.3], |_| 2.0, |_| 40.0), &Rule::default());
        assert_eq!(v.state, State::NotEnoughData);
        assert!(v.why.contains("3 step(s)"), "{}", v.why);
    }

    #[test]
    fn a_rising_reward_is_learning() {
        let v = verdict(
            &run(
                &[-0.5, -0.4, -0.2, -0.1, 0.2, 0.3, 0.5, 0.6],
                |_| 2.0,
                |_| 40.0,
            ),
            &Rule::default(),
        );
        assert_eq!(v.state, State::Learning, "{v:?}");
        assert!(v.t.unwrap() > 2.0);
    }

    #[test]
    fn noise_around_a_level_is_flat() {
        let v = verdict(
            &run(
                &[0.1, -0.05, 0.08, 0.0, 0.05, -0.1, 0.1, 0.02],
                |_| 2.0,
                |_| 40.0,
            ),
            &Rule::default(),
        );
        assert_eq!(v.state, State::Flat, "{v:?}");
        assert!(v.why.contains("within the noise"), "{}", v.why);
    }

    /// OpenClaw-RL #116: reward down, entropy up, answers shorter.
    #[test]
    fn the_collapse_signature_is_collapsing() {
        let v = verdict(
            &run(
                &[0.4, 0.5, 0.4, 0.5, 0.1, -0.1, -0.3, -0.4],
                |i| if i < 4 { 2.0 } else { 4.5 },
                |i| if i < 4 { 60.0 } else { 20.0 },
            ),
            &Rule::default(),
        );
        assert_eq!(v.state, State::Collapsing, "{v:?}");
        assert_eq!(v.signatures.len(), 2, "{:?}", v.signatures);
        assert!(v.why.contains("entropy 2.00 → 4.50"), "{}", v.why);
    }

    /// A modest fall with the policy otherwise unchanged is not yet called
    /// a collapse; a steep one is.
    #[test]
    fn a_fall_without_a_signature_needs_to_be_steep() {
        let modest = run(&[0.3, 0.3, 0.3, 0.3, 0.1, 0.1, 0.1, 0.1], |_| 2.0, |_| 40.0);
        let v = verdict(&modest, &Rule::default());
        // t = -0.2 / sqrt(2 * 0.25 / 64) ≈ -2.3: fell, but not by 3.
        assert_eq!(v.state, State::Flat, "{v:?}");
        let steep = run(
            &[0.5, 0.5, 0.5, 0.5, -0.2, -0.2, -0.2, -0.2],
            |_| 2.0,
            |_| 40.0,
        );
        assert_eq!(verdict(&steep, &Rule::default()).state, State::Collapsing);
    }

    /// Only the window counts: an old climb does not make a late fall
    /// "learning".
    #[test]
    fn only_the_last_window_is_judged() {
        let mut rewards = vec![-1.0, -0.8, -0.5, 0.0, 0.5];
        rewards.extend([0.5; 8]);
        let v = verdict(&run(&rewards, |_| 2.0, |_| 40.0), &Rule::default());
        assert_eq!(v.state, State::Flat, "{v:?}");
        assert_eq!(v.steps, Some((6, 13)));
    }

    #[test]
    fn smoothing_halves_each_step() {
        let s = smoothed(&run(&[1.0, 0.0, 0.0], |_| 2.0, |_| 40.0));
        assert_eq!(s, vec![(1, 1.0), (2, 0.5), (3, 0.25)]);
    }

    #[test]
    fn reads_what_the_trainer_stored() {
        let metrics = serde_json::json!({"metaclaw": {
            "mean_reward": 0.25, "reward_sd": 0.5, "kl_sampler_learner": 0.01,
            "entropy": 2.5, "answer_tokens": 31.5, "rewarded": 16, "truncated_share": 0.125, "skipped_total": 3
        }});
        let h = StepHealth::of(&crate::store::training::Step {
            step: 7,
            incarnation: 0,
            model_id: "m".into(),
            samples: 3,
            loss: None,
            metrics,
            at_ms: 0,
        });
        assert_eq!(
            h,
            StepHealth {
                step: 7,
                samples: 16,
                mean_reward: Some(0.25),
                reward_sd: Some(0.5),
                kl: Some(0.01),
                entropy: Some(2.5),
                answer_tokens: Some(31.5),
                truncated: Some(0.125),
                skipped_total: Some(3),
            }
        );
    }
}
