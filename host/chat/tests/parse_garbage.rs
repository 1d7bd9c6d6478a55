//! Whatever a model samples, parsing answers: no panic on garbled markers,
//! partial markers or multibyte text, and what it returns is well-formed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;

use metaclaw_chat::parse::{Family, Parsed, ToolCall, parse};
use serde_json::{Value, json};

/// xorshift64*: reproducible randomness without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const PIECES: &[&str] = &[
    // Both families' markers, whole and in part.
    "<tool_call>",
    "</tool_call>",
    "<tool_",
    "</tool_c",
    "<|tool_calls_section_begin|>",
    "<|tool_calls_section_end|>",
    "<|tool_call_section_begin|>",
    "<|tool_call_section_end|>",
    "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>",
    "<|tool_call_end|>",
    "<|tool_call",
    "_begin|>",
    "functions.",
    "functions.read:0",
    ":1",
    "<think>",
    "</think>",
    "<thi",
    "</thin",
    // JSON, whole and in part.
    "{",
    "}",
    "[",
    "]",
    "\"",
    "\\",
    ":",
    ",",
    "\"name\"",
    "\"arguments\"",
    "\"parameters\"",
    "{\"name\": \"f\", \"arguments\": {}}",
    "{\"a\": 1}",
    "\"{\\\"x\\\": 1}\"",
    "null",
    "12",
    // Text.
    "é",
    "日本語",
    "🦀",
    "\u{200b}",
    "\u{10ffff}",
    " ",
    "\n",
    "\t",
    "word",
];

fn check(parsed: &Parsed, family: Option<Family>, text: &str) {
    let ids: HashSet<&str> = parsed.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids.len(), parsed.tool_calls.len(), "ids unique: {text:?}");
    for call in &parsed.tool_calls {
        assert!(
            !call.id.is_empty() && !call.name.trim().is_empty(),
            "{text:?}: {call:?}"
        );
        let arguments: Value = serde_json::from_str(&call.arguments)
            .unwrap_or_else(|e| panic!("{text:?}: arguments {:?}: {e}", call.arguments));
        assert!(arguments.is_object(), "{text:?}: {call:?}");
        assert_eq!(arguments.to_string(), call.arguments, "compact: {text:?}");
    }
    if family.is_none() {
        assert!(parsed.tool_calls.is_empty() && parsed.error.is_none());
    }
    // Every Hermes block is either a call or an error.
    if family == Some(Family::Hermes) && parsed.error.is_none() {
        assert!(
            !parsed.content.contains("<tool_call>"),
            "{text:?}: {parsed:?}"
        );
    }
    if let Some(reasoning) = &parsed.reasoning {
        assert!(!reasoning.is_empty());
    }
}

#[test]
fn random_garbage_never_panics() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..100_000 {
        let mut text = String::new();
        for _ in 0..rng.below(24) {
            text.push_str(PIECES[rng.below(PIECES.len())]);
        }
        let thinking_open = round % 3 == 0;
        for family in [None, Some(Family::Hermes), Some(Family::KimiK2)] {
            let parsed = parse(&text, family, thinking_open);
            check(&parsed, family, &text);
        }
    }
}

/// Well-formed samples garbled by a few edits: the paths that random text
/// rarely reaches (a call almost right) are exercised too.
#[test]
fn garbled_samples_never_panic() {
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    let mut seen = [(0, 0); 2];
    for round in 0..20_000 {
        let family = Family::ALL[round % 2];
        let calls: Vec<ToolCall> = (0..rng.below(4))
            .map(|i| ToolCall {
                id: format!("functions.f{i}:{i}"),
                name: format!("f{i}"),
                arguments: json!({"s": PIECES[rng.below(PIECES.len())], "n": [i, {"k": null}]})
                    .to_string(),
            })
            .collect();
        let mut text = format!(
            "<think>é</think>{}{}",
            PIECES[rng.below(PIECES.len())],
            family.parser().format(&calls)
        );
        for _ in 0..rng.below(4) {
            let boundaries: Vec<usize> = text
                .char_indices()
                .map(|(at, _)| at)
                .chain([text.len()])
                .collect();
            let at = boundaries[rng.below(boundaries.len())];
            match rng.below(3) {
                0 => text.insert_str(at, PIECES[rng.below(PIECES.len())]),
                1 => {
                    let to = boundaries[rng.below(boundaries.len())];
                    let (from, to) = (at.min(to), at.max(to));
                    if to - from < 12 {
                        text.replace_range(from..to, "");
                    }
                }
                _ => text.truncate(at),
            }
        }
        let parsed = parse(&text, Some(family), round % 5 == 0);
        check(&parsed, Some(family), &text);
        let seen = &mut seen[round % 2];
        seen.0 += parsed.tool_calls.len();
        seen.1 += usize::from(parsed.error.is_some());
    }
    for (family, (calls, errors)) in Family::ALL.iter().zip(seen) {
        assert!(
            calls > 1_000 && errors > 1_000,
            "{family:?}: {calls} calls, {errors} errors"
        );
    }
}

/// A sample cut off anywhere (max_tokens) gives back the calls it finished,
/// in order, and nothing else.
#[test]
fn a_sample_cut_anywhere_returns_only_finished_calls() {
    let calls = vec![
        ToolCall {
            id: "functions.write:0".to_owned(),
            name: "write".to_owned(),
            arguments: json!({"path": "ü/日本.txt", "text": "a \"b\" \\ 🦀\n"}).to_string(),
        },
        ToolCall {
            id: "functions.ls:1".to_owned(),
            name: "ls".to_owned(),
            arguments: "{}".to_owned(),
        },
        ToolCall {
            id: "functions.grep:2".to_owned(),
            name: "grep".to_owned(),
            arguments: json!({"pattern": "é+", "paths": ["a", "b"]}).to_string(),
        },
    ];
    for family in Family::ALL {
        let text = format!(
            "<think>\nPlan: 🦀\n</think>\n\nDoing it — ✓.\n{}",
            family.parser().format(&calls)
        );
        for (cut, _) in text.char_indices().chain([(text.len(), ' ')]) {
            let sample = &text[..cut];
            let parsed = parse(sample, Some(family), false);
            check(&parsed, Some(family), sample);
            let got: Vec<(&str, &str)> = parsed
                .tool_calls
                .iter()
                .map(|c| (c.name.as_str(), c.arguments.as_str()))
                .collect();
            let want: Vec<(&str, &str)> = calls[..got.len()]
                .iter()
                .map(|c| (c.name.as_str(), c.arguments.as_str()))
                .collect();
            assert_eq!(got, want, "{family:?} cut at {cut}: {sample:?}");
        }
        let whole = parse(&text, Some(family), false);
        assert_eq!(whole.tool_calls.len(), 3);
    }
}

/// A model stuck repeating the start of a call (it happens in RL) until
/// max_tokens: parsed in time linear in the sample, not once per repeat.
#[test]
fn a_degenerate_repetition_parses_quickly() {
    let units = [
        "<tool_call>",
        "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n",
        "<|tool_calls_section_begin|>",
        "<|tool_call_begin|>",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.a:0<|tool_call_argument_begin|>{}",
        "<|tool_call_begin|>functions.a:0<|tool_call_argument_begin|>{\"k\": ",
        "</think>",
    ];
    for unit in units {
        let text = unit.repeat(50_000);
        let started = std::time::Instant::now();
        for family in Family::ALL {
            let parsed = parse(&text, Some(family), false);
            check(&parsed, Some(family), unit);
        }
        let took = started.elapsed();
        assert!(took.as_secs() < 5, "{unit:?} × 50000 took {took:?}");
    }
}
