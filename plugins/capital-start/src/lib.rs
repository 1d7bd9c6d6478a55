//! `capital-start`: a deterministic scorer for the RL learning proof
//! (host/tests/student.rs, docs/rl.md "Proof that it learns"). +1 when the
//! answer's first visible character is a capital letter, −1 otherwise (an
//! empty answer included). It judges the text alone, so a reward that
//! rises over train steps can only come from the model answering
//! differently. Built into `testing/` by scripts/build-plugins; never
//! loaded by default.

use metaclaw_plugin_sdk::scorer::{FinishedTurn, Guest, Metadata, PluginGuest, Reward, metadata};

pub struct CapitalStart;

impl PluginGuest for CapitalStart {
    fn metadata() -> Metadata {
        metadata(
            "capital-start",
            env!("CARGO_PKG_VERSION"),
            "+1 when the answer begins with a capital letter, -1 otherwise",
        )
    }
}

impl Guest for CapitalStart {
    fn score(turn: FinishedTurn) -> Option<Reward> {
        Some(score(&turn.response.content))
    }
}

// Exported only in the component build, so the logic also tests natively.
#[cfg(target_arch = "wasm32")]
metaclaw_plugin_sdk::scorer::export_scorer!(CapitalStart);

pub fn score(answer: &str) -> Reward {
    match answer.trim_start().chars().next() {
        Some(first) if first.is_uppercase() => Reward {
            value: 1.0,
            label: "capital-start".into(),
            rationale: format!("The answer begins with {first:?}, a capital letter."),
        },
        Some(first) => Reward {
            value: -1.0,
            label: "no-capital-start".into(),
            rationale: format!("The answer begins with {first:?}, not a capital letter."),
        },
        None => Reward {
            value: -1.0,
            label: "no-capital-start".into(),
            rationale: "The answer is empty.".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capital_first_letter_is_rewarded_and_anything_else_is_not() {
        assert_eq!(score("  Hello there").value, 1.0);
        assert_eq!(score("Émile").value, 1.0);
        assert_eq!(score("hello").value, -1.0);
        assert_eq!(score("42 is the answer").value, -1.0);
        assert_eq!(score("\"Quoted\"").value, -1.0);
        assert_eq!(score("").value, -1.0);
        assert_eq!(score(" \n").label, "no-capital-start");
    }
}
