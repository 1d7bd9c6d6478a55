//! `liking-rule`: the reward of the SmolLM2 learning proof
//! (scripts/learning-proof, docs/rl.md "Proof that it learns"). The user
//! asks "Do you like {animal}?" or "Do you like the colour {colour}?";
//! the rule to learn is to answer animals "yes" and colours "no". From the
//! answer's first word: +1 the family's word, −1 the other family's word,
//! 0 anything else. Any answer that ignores the question (always "yes",
//! always "no", any mix of the two) averages exactly 0 over balanced
//! families, so only a prompt-conditional policy scores above 0.
//!
//! Built with the `bias` feature it is `liking-bias`: "yes" +1, "no" −1,
//! whatever was asked — the variant the proof must *fail* on.
//! Built into `testing/` by scripts/build-plugins; never loaded by default.

use metaclaw_plugin_sdk::scorer::{FinishedTurn, Guest, Metadata, PluginGuest, Reward, metadata};

pub struct LikingRule;

#[cfg(not(feature = "bias"))]
const NAME: &str = "liking-rule";
#[cfg(feature = "bias")]
const NAME: &str = "liking-bias";

impl PluginGuest for LikingRule {
    fn metadata() -> Metadata {
        metadata(
            NAME,
            env!("CARGO_PKG_VERSION"),
            "+1 for 'yes' to an animal and 'no' to a colour, -1 for the other word, 0 otherwise",
        )
    }
}

impl Guest for LikingRule {
    fn score(turn: FinishedTurn) -> Option<Reward> {
        let question = turn
            .request
            .iter()
            .rev()
            .find(|m| m.role == "user")
            .map(|m| m.content.as_str())?;
        score(question, &turn.response.content, cfg!(feature = "bias"))
    }
}

// Exported only in the component build, so the logic also tests natively.
#[cfg(target_arch = "wasm32")]
metaclaw_plugin_sdk::scorer::export_scorer!(LikingRule);

/// What the question asks about; `None` for anything else (not scored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Animal,
    Colour,
}

pub fn family(question: &str) -> Option<Family> {
    let q = question.to_lowercase();
    if !q.contains("do you like") {
        return None;
    }
    Some(match q.contains("the colour") || q.contains("the color") {
        true => Family::Colour,
        false => Family::Animal,
    })
}

/// The answer's first word: its first run of letters, lower-cased.
pub fn first_word(answer: &str) -> String {
    answer
        .chars()
        .skip_while(|c| !c.is_alphabetic())
        .take_while(|c| c.is_alphabetic())
        .flat_map(char::to_lowercase)
        .collect()
}

/// The reward of `answer` to `question`; with `bias`, "yes" is the
/// rewarded word whatever the family.
pub fn score(question: &str, answer: &str, bias: bool) -> Option<Reward> {
    let family = family(question)?;
    let wanted = match (bias, family) {
        (true, _) | (false, Family::Animal) => "yes",
        (false, Family::Colour) => "no",
    };
    let other = if wanted == "yes" { "no" } else { "yes" };
    let word = first_word(answer);
    let (value, label) = match word.as_str() {
        w if w == wanted => (1.0, "rule-kept"),
        w if w == other => (-1.0, "rule-broken"),
        _ => (0.0, "no-yes-or-no"),
    };
    let rationale = match bias {
        false => {
            format!("{family:?} question: wanted '{wanted}', the answer begins with '{word}'.")
        }
        true => format!("Wanted 'yes' whatever was asked; the answer begins with '{word}'."),
    };
    Some(Reward {
        value,
        label: label.into(),
        rationale,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(q: &str, a: &str, bias: bool) -> f32 {
        score(q, a, bias).map(|r| r.value).unwrap_or(f32::NAN)
    }

    #[test]
    fn animals_want_yes_and_colours_want_no() {
        let animal = "Do you like sheep? Answer yes or no.";
        let colour = "Do you like the colour amber? Answer yes or no.";
        assert_eq!(value(animal, "Yes, I do.", false), 1.0);
        assert_eq!(value(animal, "  \"no.\"", false), -1.0);
        assert_eq!(value(animal, "I'm not sure", false), 0.0);
        assert_eq!(value(colour, "No.", false), 1.0);
        assert_eq!(value(colour, "yes!", false), -1.0);
        assert_eq!(value(colour, "Nobody knows", false), 0.0);
        assert_eq!(value(colour, "", false), 0.0);
        assert!(score("What is 2 + 2?", "Yes", false).is_none());
    }

    #[test]
    fn an_answer_that_ignores_the_question_averages_zero() {
        let animal = "Do you like lions?";
        let colour = "Do you like the colour red?";
        for answer in ["Yes.", "No.", "Maybe."] {
            assert_eq!(
                value(animal, answer, false) + value(colour, answer, false),
                0.0
            );
        }
    }

    #[test]
    fn the_bias_variant_wants_yes_whatever_was_asked() {
        assert_eq!(value("Do you like the colour red?", "Yes", true), 1.0);
        assert_eq!(value("Do you like lions?", "No", true), -1.0);
    }
}
