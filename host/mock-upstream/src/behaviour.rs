//! Which behaviour a model name picks (the table in the crate's doc).

use axum::http::StatusCode;

use crate::{Dummy, learning};

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Behaviour {
    Echo,
    EchoSystem,
    EchoRequest,
    Slow(u64),
    Stream {
        n: u32,
        ms: u64,
    },
    ToolCall(u32),
    Agent,
    Error(u16),
    Flaky,
    Hang,
    Reset,
    ResetAfter(u32),
    Judge,
    JudgeSplit,
    JudgeFlaky,
    Evolver(learning::Evolver),
    EvolverSlow(u64),
    EvolverBad,
    /// A model registered by this name ([`Dummy::with_scripted`]).
    Scripted(String),
}

pub(crate) const BEHAVIOURS: &[&str] = &[
    "echo",
    "echo-system",
    "echo-request",
    "slow-<ms>",
    "stream-<n>-<ms>",
    "tool-call",
    "tool-call-<k>",
    "agent",
    "error-<status>",
    "flaky",
    "hang",
    "reset",
    "reset-after-<n>",
    "judge",
    "judge-split",
    "judge-flaky",
    "evolver",
    "evolver-leaky",
    "evolver-revise",
    "evolver-bad",
    "evolver-nothing",
    "evolver-slow-<ms>",
];

/// The behaviour `model` picks on `dummy`: a registered model of that name
/// first, else a built-in one.
pub(crate) fn of(dummy: &Dummy, model: &str) -> Option<Behaviour> {
    let name = model.rsplit('/').next().unwrap_or(model);
    if dummy.scripted.contains_key(name) {
        return Some(Behaviour::Scripted(name.to_string()));
    }
    behaviour(model)
}

/// Every model name `dummy` answers: the built-in ones, then those
/// registered, by name.
pub(crate) fn names(dummy: &Dummy) -> Vec<&str> {
    let mut registered: Vec<&str> = dummy.scripted.keys().map(String::as_str).collect();
    registered.sort_unstable();
    BEHAVIOURS.iter().copied().chain(registered).collect()
}

pub(crate) fn behaviour(model: &str) -> Option<Behaviour> {
    let name = model.rsplit('/').next().unwrap_or(model);
    Some(match name {
        "echo" => Behaviour::Echo,
        "echo-system" => Behaviour::EchoSystem,
        "echo-request" => Behaviour::EchoRequest,
        "tool-call" => Behaviour::ToolCall(1),
        "agent" => Behaviour::Agent,
        "flaky" => Behaviour::Flaky,
        "hang" => Behaviour::Hang,
        "reset" => Behaviour::Reset,
        "judge" => Behaviour::Judge,
        "judge-split" => Behaviour::JudgeSplit,
        "judge-flaky" => Behaviour::JudgeFlaky,
        "evolver" => Behaviour::Evolver(learning::Evolver::Plain),
        "evolver-leaky" => Behaviour::Evolver(learning::Evolver::Leaky),
        "evolver-revise" => Behaviour::Evolver(learning::Evolver::Revise),
        "evolver-bad" => Behaviour::EvolverBad,
        "evolver-nothing" => Behaviour::Evolver(learning::Evolver::Nothing),
        _ => {
            if let Some(ms) = name.strip_prefix("slow-") {
                Behaviour::Slow(ms.parse().ok()?)
            } else if let Some(rest) = name.strip_prefix("stream-") {
                let (n, ms) = rest.split_once('-')?;
                Behaviour::Stream {
                    n: n.parse().ok()?,
                    ms: ms.parse().ok()?,
                }
            } else if let Some(ms) = name.strip_prefix("evolver-slow-") {
                Behaviour::EvolverSlow(ms.parse().ok()?)
            } else if let Some(n) = name.strip_prefix("reset-after-") {
                Behaviour::ResetAfter(n.parse().ok()?)
            } else if let Some(k) = name.strip_prefix("tool-call-") {
                Behaviour::ToolCall(k.parse::<u32>().ok()?.clamp(1, 16))
            } else if let Some(status) = name.strip_prefix("error-") {
                let status: u16 = status.parse().ok()?;
                StatusCode::from_u16(status).ok()?;
                Behaviour::Error(status)
            } else {
                return None;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_pick_behaviours() {
        assert_eq!(behaviour("echo"), Some(Behaviour::Echo));
        assert_eq!(behaviour("metaclaw/echo"), Some(Behaviour::Echo));
        assert_eq!(behaviour("slow-250"), Some(Behaviour::Slow(250)));
        assert_eq!(
            behaviour("stream-10-100"),
            Some(Behaviour::Stream { n: 10, ms: 100 })
        );
        assert_eq!(behaviour("tool-call-2"), Some(Behaviour::ToolCall(2)));
        assert_eq!(behaviour("error-429"), Some(Behaviour::Error(429)));
        assert_eq!(behaviour("error-99"), None);
        assert_eq!(behaviour("reset"), Some(Behaviour::Reset));
        assert_eq!(behaviour("reset-after-3"), Some(Behaviour::ResetAfter(3)));
        assert_eq!(behaviour("gpt-4o"), None);
    }

    struct Fixed;

    impl crate::Scripted for Fixed {
        fn reply(&self, _: &crate::ScriptedRequest<'_>) -> crate::ScriptedReply {
            crate::ScriptedReply::Text("fixed".into())
        }
    }

    #[test]
    fn a_registered_model_is_picked_by_its_name_before_a_built_in_one() {
        let dummy = Dummy::default()
            .with_scripted("oracle", std::sync::Arc::new(Fixed))
            .with_scripted("echo", std::sync::Arc::new(Fixed));
        assert_eq!(
            of(&dummy, "metaclaw/oracle"),
            Some(Behaviour::Scripted("oracle".into()))
        );
        assert_eq!(of(&dummy, "echo"), Some(Behaviour::Scripted("echo".into())));
        assert_eq!(of(&dummy, "judge"), Some(Behaviour::Judge));
        assert_eq!(of(&Dummy::default(), "oracle"), None);
        assert!(
            names(&dummy)
                .join(", ")
                .ends_with("evolver-slow-<ms>, echo, oracle")
        );
    }
}
