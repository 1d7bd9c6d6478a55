//! Canaries of new weights (`canary.weights`), the rule part: the
//! collapse guard over the answers each arm was served. The trainer runs
//! the test (`trainer.rs`: a step's weights serve the candidate arm, the
//! incumbent every other session; no step trains until it is decided) with
//! the same sequential decision as skills (`canary::decide`,
//! `learn::canary::verdict`).
//!
//! The collapse guard rolls the candidate back at once, whatever the test
//! says so far, when its arm's answers show the collapse signature of
//! docs/rl.md against the control arm's (answers a third shorter, a
//! quarter more of them cut off at the length limit, or the sampled
//! tokens' mean surprise −log p moved by half: the entropy of what it
//! samples collapsed or blew up) and its judged reward is not higher.

use crate::store::experiments::Answered;

/// Answers each arm needs before the guard looks.
pub const MIN_ANSWERS: usize = 8;

/// The collapse signature of the candidate arm's answers against the
/// control's, in words (`None`: none, or too few answers to say).
/// `rewards`: each arm's judged session rewards so far.
pub fn collapse(
    candidate: &[Answered],
    control: &[Answered],
    rewards: (&[f64], &[f64]),
) -> Option<String> {
    if candidate.len() < MIN_ANSWERS || control.len() < MIN_ANSWERS {
        return None;
    }
    let mean = |xs: &mut dyn Iterator<Item = f64>| {
        let (sum, n) = xs.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
        (n > 0).then(|| sum / n as f64)
    };
    // A candidate judged better is not collapsing, whatever its answers
    // look like.
    if let (Some(c), Some(k)) = (
        mean(&mut rewards.0.iter().copied()),
        mean(&mut rewards.1.iter().copied()),
    ) && c > k
    {
        return None;
    }
    let mut signs = Vec::new();
    let tokens = |a: &[Answered]| mean(&mut a.iter().map(|x| x.tokens)).unwrap_or(0.0);
    let (ct, kt) = (tokens(candidate), tokens(control));
    if kt > 0.0 && ct <= kt * 2.0 / 3.0 {
        signs.push(format!(
            "answers a third shorter ({ct:.1} tokens against {kt:.1})"
        ));
    }
    let cut = |a: &[Answered]| {
        mean(&mut a.iter().map(|x| f64::from(u8::from(x.truncated)))).unwrap_or(0.0)
    };
    let (cc, kc) = (cut(candidate), cut(control));
    if cc - kc >= 0.25 {
        signs.push(format!(
            "{:.0} % cut off at the length limit against {:.0} %",
            cc * 100.0,
            kc * 100.0
        ));
    }
    let surprise = |a: &[Answered]| mean(&mut a.iter().filter_map(|x| x.surprise));
    if let (Some(cs), Some(ks)) = (surprise(candidate), surprise(control))
        && ks > 0.0
        && (cs - ks).abs() >= ks / 2.0
    {
        signs.push(format!(
            "the sampled tokens' mean −log p moved by half ({cs:.3} against {ks:.3})"
        ));
    }
    (!signs.is_empty()).then(|| {
        format!(
            "collapse signature in the candidate's {} answers against the control's {}: {}",
            candidate.len(),
            control.len(),
            signs.join("; ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answers(n: usize, tokens: f64, truncated: usize, surprise: f64) -> Vec<Answered> {
        (0..n)
            .map(|i| Answered {
                tokens,
                truncated: i < truncated,
                surprise: Some(surprise),
            })
            .collect()
    }

    #[test]
    fn alike_answers_show_no_signature() {
        let a = answers(10, 40.0, 1, 1.0);
        assert_eq!(collapse(&a, &a, (&[], &[])), None);
    }

    #[test]
    fn each_sign_is_a_signature_unless_the_candidate_is_judged_better() {
        let control = answers(10, 40.0, 0, 1.0);
        let shorter = answers(10, 20.0, 0, 1.0);
        let cut = answers(10, 40.0, 5, 1.0);
        let narrow = answers(10, 40.0, 0, 0.3);
        for candidate in [&shorter, &cut, &narrow] {
            let why = collapse(candidate, &control, (&[0.0], &[0.5]));
            assert!(why.is_some(), "{candidate:?}");
            // Judged better: no rollback by the guard.
            assert_eq!(collapse(candidate, &control, (&[0.9], &[0.5])), None);
        }
        let why = collapse(&shorter, &control, (&[], &[])).unwrap();
        assert!(why.contains("a third shorter"), "{why}");
    }

    #[test]
    fn too_few_answers_say_nothing() {
        let control = answers(MIN_ANSWERS, 40.0, 0, 1.0);
        let shorter = answers(MIN_ANSWERS - 1, 5.0, 0, 1.0);
        assert_eq!(collapse(&shorter, &control, (&[], &[])), None);
    }
}
