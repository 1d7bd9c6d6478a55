//! Which behaviour a model name picks (the table in the crate's doc).

use axum::http::StatusCode;

use crate::{bench, learning};

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Behaviour {
    Echo,
    EchoSystem,
    EchoRequest,
    Slow(u64),
    Stream { n: u32, ms: u64 },
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
    Bench(bench::Model),
    BenchEvolver,
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
    "bench-oracle",
    "bench-oracle-all",
    "bench-null",
    "bench-all-options",
    "bench-planter",
    "bench-evolver",
];

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
        "bench-oracle" => Behaviour::Bench(bench::Model::Oracle),
        "bench-oracle-all" => Behaviour::Bench(bench::Model::OracleAll),
        "bench-null" => Behaviour::Bench(bench::Model::Null),
        "bench-all-options" => Behaviour::Bench(bench::Model::AllOptions),
        "bench-planter" => Behaviour::Bench(bench::Model::Planter),
        "bench-evolver" => Behaviour::BenchEvolver,
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
        assert_eq!(
            behaviour("metaclaw/bench-oracle"),
            Some(Behaviour::Bench(bench::Model::Oracle))
        );
        assert_eq!(behaviour("bench-evolver"), Some(Behaviour::BenchEvolver));
        assert_eq!(behaviour("gpt-4o"), None);
    }
}
