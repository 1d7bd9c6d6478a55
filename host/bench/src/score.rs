//! Scoring a round, and the feedback the user gives after it.
//!
//! Multiple choice is scored two ways. **Strict**: the letters boxed must
//! be exactly the gold set (the reference harness's own pass/fail, which
//! also picks the feedback). **Lenient**: the reference report's partial
//! credit, `1 − (FP + FN) / options`, which can go negative and gives an
//! agent that ticks every option about a quarter of the points; reported,
//! always labelled, never the headline. A file check scores 1 when its
//! command passed.

use std::collections::BTreeSet;

use super::data::{Kind, Round};

/// The reminder after a failed round (reference harness, §4.6).
const REMINDER: &str = "\nKeep this in mind as you continue with the next task.";
/// What the user says when no `\bbox{…}` could be read.
const FORMAT_ERROR: &str = "I could not find your answer: answer multiple-choice questions with \
\\bbox{X} or \\bbox{X,Y} (the letters of every option you choose).";

/// The letters of the first `\bbox{…}` or `\boxed{…}` in `answer`, as the
/// reference reads them: every letter inside, upper-cased (so a word in the
/// box counts letter by letter). `None` without a box.
pub fn boxed_letters(answer: &str) -> Option<BTreeSet<String>> {
    let start = ["\\bbox{", "\\boxed{"]
        .iter()
        .filter_map(|marker| answer.find(marker).map(|at| at + marker.len()))
        .min()?;
    let rest = &answer[start..];
    let inside = &rest[..rest.find('}')?];
    Some(
        inside
            .chars()
            .filter(char::is_ascii_alphabetic)
            .map(|c| c.to_ascii_uppercase().to_string())
            .collect(),
    )
}

/// One round's score.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Score {
    /// Strict: exact set (MC), the check passed (FC).
    pub passed: bool,
    /// The reference's partial credit (MC); equals `passed` for FC.
    pub lenient: f64,
    /// MC: the letters read (`None`: no box).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chosen: Option<Vec<String>>,
}

/// Scores a multiple-choice answer against the gold letters.
pub fn multi_choice(answer: &str, options: usize, gold: &[String]) -> Score {
    let Some(chosen) = boxed_letters(answer) else {
        return Score {
            passed: false,
            lenient: 0.0,
            chosen: None,
        };
    };
    let gold: BTreeSet<String> = gold.iter().cloned().collect();
    let wrong = chosen.symmetric_difference(&gold).count();
    Score {
        passed: chosen == gold,
        lenient: 1.0 - wrong as f64 / options.max(1) as f64,
        chosen: Some(chosen.into_iter().collect()),
    }
}

/// A file check's score.
pub fn file_check(passed: bool) -> Score {
    Score {
        passed,
        lenient: if passed { 1.0 } else { 0.0 },
        chosen: None,
    }
}

/// What the user says after `round` was answered and scored, as the
/// reference harness says it.
pub fn feedback(round: &Round, score: &Score) -> String {
    match &round.kind {
        Kind::FileCheck { .. } if score.passed => round.correct.clone(),
        Kind::FileCheck { .. } => format!("{}{REMINDER}", round.incorrect),
        Kind::MultiChoice { .. } if score.passed => round.correct.clone(),
        Kind::MultiChoice { answer, .. } => {
            let Some(chosen) = &score.chosen else {
                return format!("{FORMAT_ERROR}{REMINDER}");
            };
            let explain =
                |letter: &str| round.explanations.get(letter).cloned().unwrap_or_default();
            let mut lines = Vec::new();
            for letter in answer.iter().filter(|l| !chosen.contains(l)) {
                lines.push(format!("You missed option {letter}: {}", explain(letter)));
            }
            for letter in chosen.iter().filter(|l| !answer.contains(l)) {
                lines.push(format!(
                    "You incorrectly selected option {letter}: {}",
                    explain(letter)
                ));
            }
            format!("{}{REMINDER}", lines.join("\n"))
        }
    }
}

/// The user's message for a round: the question, after the previous
/// round's feedback when there was one.
pub fn message(previous_feedback: Option<&str>, question: &str) -> String {
    match previous_feedback {
        Some(fb) => format!("[Previous Feedback] {fb}\n\n{question}"),
        None => question.to_string(),
    }
}

/// The standalone message after a day's last round: not scored, but a
/// learning proxy sees it.
pub fn closing(feedback: &str) -> String {
    format!("[Previous Feedback] {feedback}")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::data::{Bench, Set};

    fn letters(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_first_box_is_read_letter_by_letter() {
        let set = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>());
        assert_eq!(boxed_letters("I pick \\bbox{A, c}."), set(&["A", "C"]));
        assert_eq!(boxed_letters("\\boxed{B} then \\bbox{A}"), set(&["B"]));
        assert_eq!(boxed_letters("\\bbox{A} then \\boxed{B}"), set(&["A"]));
        assert_eq!(boxed_letters("\\bbox{None}"), set(&["N", "O", "E"]));
        assert_eq!(boxed_letters("\\bbox{}"), set(&[]));
        assert_eq!(boxed_letters("A and C"), None);
        assert_eq!(boxed_letters("\\bbox{A"), None);
    }

    #[test]
    fn strict_is_the_exact_set_and_lenient_the_partial_credit() {
        let gold = letters(&["A", "E"]);
        let exact = multi_choice("\\bbox{E,A}", 6, &gold);
        assert!(exact.passed);
        assert_eq!(exact.lenient, 1.0);
        let one_off = multi_choice("\\bbox{A}", 6, &gold);
        assert!(!one_off.passed);
        assert!((one_off.lenient - 5.0 / 6.0).abs() < 1e-9);
        // Every option: strict 0, lenient 1 − 4/6.
        let all = multi_choice("\\bbox{A,B,C,D,E,F}", 6, &gold);
        assert!(!all.passed);
        assert!((all.lenient - 2.0 / 6.0).abs() < 1e-9);
        // Letters that are not options count against it: below zero.
        let junk = multi_choice("\\bbox{None}", 4, &letters(&["A", "B", "C", "D"]));
        assert!(junk.lenient < 0.0);
        let none = multi_choice("A", 6, &gold);
        assert_eq!((none.passed, none.lenient, none.chosen), (false, 0.0, None));
    }

    /// The reference's offline validation (§8): a null agent answering
    /// every MC round with all its options scores 0.2417 on the small set
    /// and 0.2139 on the full one (`Accuracy`, over all rounds), the gold
    /// answers 0.4098 / 0.3526; and strictly the all-options answer is
    /// credited only where every option is gold.
    #[test]
    fn the_reference_accuracies_of_scripted_answers() {
        for (set, all_options, gold_only, all_gold_rounds) in [
            (Set::Small, 0.2417, 0.4098, 2),
            (Set::Full, 0.2139, 0.3526, 9),
        ] {
            let bench = Bench::load(set).unwrap();
            let n = bench.rounds() as f64;
            let (mut lenient, mut strict, mut gold_sum) = (0.0, 0, 0.0);
            for round in bench.days.iter().flat_map(|d| &d.rounds) {
                let Kind::MultiChoice { options, answer } = &round.kind else {
                    continue;
                };
                let every = options.keys().cloned().collect::<Vec<_>>().join(",");
                let s = multi_choice(&format!("\\bbox{{{every}}}"), options.len(), answer);
                lenient += s.lenient;
                strict += usize::from(s.passed);
                let g = multi_choice(
                    &format!("\\bbox{{{}}}", answer.join(",")),
                    options.len(),
                    answer,
                );
                gold_sum += g.lenient;
            }
            assert!(
                ((lenient / n) - all_options).abs() < 5e-5,
                "{set:?} {}",
                lenient / n
            );
            assert!(((gold_sum / n) - gold_only).abs() < 5e-5, "{set:?}");
            assert_eq!(strict, all_gold_rounds, "{set:?}");
        }
    }

    #[test]
    fn feedback_is_given_as_the_reference_harness_gives_it() {
        let bench = Bench::load(Set::Small).unwrap();
        let day = &bench.days[0];
        let (fc, mc) = (&day.rounds[0], &day.rounds[1]);
        assert_eq!(feedback(fc, &file_check(true)), fc.correct);
        assert_eq!(
            feedback(fc, &file_check(false)),
            format!(
                "{}\nKeep this in mind as you continue with the next task.",
                fc.incorrect
            )
        );
        let Kind::MultiChoice { options, answer } = &mc.kind else {
            panic!("r2 is multiple choice");
        };
        assert_eq!(answer, &letters(&["A", "E"]));
        let wrong = multi_choice("\\bbox{A,B}", options.len(), answer);
        let text = feedback(mc, &wrong);
        assert!(
            text.starts_with(&format!(
                "You missed option E: {}\nYou incorrectly selected option B: {}",
                mc.explanations["E"], mc.explanations["B"]
            )),
            "{text}"
        );
        assert!(text.ends_with("Keep this in mind as you continue with the next task."));
        let unread = feedback(mc, &multi_choice("A", options.len(), answer));
        assert!(
            unread.starts_with("I could not find your answer"),
            "{unread}"
        );
        assert_eq!(message(None, "Q"), "Q");
        assert_eq!(message(Some("F"), "Q"), "[Previous Feedback] F\n\nQ");
        assert_eq!(closing("F"), "[Previous Feedback] F");
    }
}
