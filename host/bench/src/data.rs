//! MetaClaw-Bench's data, embedded in the binary (`host/bench/data/`, see
//! its README for the origin and what was re-created): the sets, their
//! days and rounds typed once, and a day's workspace written to disk.
//!
//! What the harness reads and where: `all_tests.json` (each day's arc,
//! rule tags and seeded session), `eval/dayNN/questions.json` (the rounds),
//! the seeded OpenClaw transcript (`openclaw_state/…/dayNN_<uuid>.jsonl`:
//! the exchange the day's conversation continues), and
//! `workspaces/shared/` (the identity files of the system prompt and each
//! day's input folder). The checker scripts are not in the data: the
//! harness checks natively ([`super::checks`]), outside the workspace.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use clap::ValueEnum;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::lenient;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/bench_data.rs"));
}

/// Which set of days.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Set {
    /// 12 days, 61 rounds (2 days per arc).
    Small,
    /// 30 days, 346 rounds.
    Full,
}

impl Set {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Small => "small",
            Self::Full => "full",
        }
    }

    fn dir(self) -> &'static str {
        match self {
            Self::Small => "metaclaw-bench-small",
            Self::Full => "metaclaw-bench",
        }
    }
}

/// The identity files the system prompt is built from, in OpenClaw's order.
pub const IDENTITY_FILES: [&str; 5] =
    ["AGENTS.md", "SOUL.md", "TOOLS.md", "IDENTITY.md", "USER.md"];

/// One set, read.
#[derive(Debug, Clone)]
pub struct Bench {
    pub set: Set,
    pub days: Vec<Day>,
    /// (file name, text) of [`IDENTITY_FILES`].
    pub identity: Vec<(String, String)>,
}

/// One day: one conversation.
#[derive(Debug, Clone)]
pub struct Day {
    /// `day01`.
    pub id: String,
    /// `A`..`F`.
    pub arc: String,
    /// The rules the day is about (`output_format` …).
    pub tags: Vec<String>,
    /// The pre-seeded exchange: (role, text), user first.
    pub seed: Vec<(String, String)>,
    /// The seeded OpenClaw session's id (`day01_<uuid>`).
    pub session: String,
    pub rounds: Vec<Round>,
}

/// One round: one user message, scored.
#[derive(Debug, Clone)]
pub struct Round {
    /// `r1`.
    pub id: String,
    pub question: String,
    pub kind: Kind,
    /// What the user says next when the round passed.
    pub correct: String,
    /// What the user says next when a file check failed.
    pub incorrect: String,
    /// Per option, why it is right or wrong (multiple choice).
    pub explanations: BTreeMap<String, String>,
}

#[derive(Debug, Clone)]
pub enum Kind {
    /// A shell command run in the workspace after the answer.
    FileCheck { command: String, expect_exit: i32 },
    /// Letters out of `options`; `answer` is the gold set.
    MultiChoice {
        options: BTreeMap<String, String>,
        answer: Vec<String>,
    },
}

impl Round {
    #[cfg(test)]
    pub fn is_file_check(&self) -> bool {
        matches!(self.kind, Kind::FileCheck { .. })
    }
}

fn file(set: Set, rel: &str) -> Option<&'static [u8]> {
    let path = format!("{}/{rel}", set.dir());
    embedded::FILES
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(_, bytes)| *bytes)
}

fn text(set: Set, rel: &str) -> Result<&'static str> {
    let bytes = file(set, rel).ok_or_else(|| anyhow!("the bench data has no {rel}"))?;
    std::str::from_utf8(bytes).with_context(|| format!("{rel} is not UTF-8"))
}

fn json(set: Set, rel: &str) -> Result<Value> {
    serde_json::from_str(text(set, rel)?).with_context(|| format!("{rel} is not valid JSON"))
}

/// `all_tests.json`: the days.
#[derive(Deserialize, Default)]
#[serde(default)]
struct AllTests {
    #[serde(deserialize_with = "lenient::field")]
    test: Option<Vec<Value>>,
}

/// A day of `all_tests.json`.
#[derive(Deserialize, Default)]
#[serde(default)]
struct TestEntry {
    #[serde(deserialize_with = "lenient::field")]
    id: Option<String>,
    #[serde(deserialize_with = "lenient::field")]
    session: Option<String>,
    #[serde(deserialize_with = "lenient::field")]
    arc: Option<String>,
    #[serde(deserialize_with = "lenient::strings")]
    preference_tags: Option<Vec<String>>,
}

/// `eval/dayNN/questions.json`: the day's rounds.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct Questions {
    #[serde(deserialize_with = "lenient::field")]
    pub rounds: Option<Vec<Value>>,
}

/// A round of `questions.json` as written (the oracle reads it too).
#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct RoundEntry {
    #[serde(deserialize_with = "lenient::field")]
    pub id: Option<String>,
    #[serde(rename = "type", deserialize_with = "lenient::field")]
    pub kind: Option<String>,
    #[serde(deserialize_with = "lenient::field")]
    pub question: Option<String>,
    #[serde(deserialize_with = "lenient::obj")]
    pub eval: Eval,
    #[serde(deserialize_with = "lenient::obj")]
    pub feedback: Feedback,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct Eval {
    #[serde(deserialize_with = "lenient::field")]
    pub command: Option<String>,
    #[serde(deserialize_with = "lenient::field")]
    pub expect_exit: Option<i64>,
    #[serde(deserialize_with = "lenient::field")]
    pub options: serde_json::Map<String, Value>,
    #[serde(deserialize_with = "lenient::strings")]
    pub answer: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct Feedback {
    #[serde(deserialize_with = "lenient::field")]
    pub correct: Option<String>,
    #[serde(deserialize_with = "lenient::field")]
    pub incorrect: Option<String>,
    #[serde(deserialize_with = "lenient::field")]
    pub options: serde_json::Map<String, Value>,
}

/// A string field that must be there: `{what}: no "{key}" string`.
fn need(value: Option<String>, key: &str, what: &str) -> Result<String> {
    value.ok_or_else(|| anyhow!("{what}: no \"{key}\" string"))
}

impl Bench {
    /// Reads `set` from the embedded data.
    pub fn load(set: Set) -> Result<Self> {
        let tests: AllTests = lenient::object(&json(set, "all_tests.json")?);
        let Some(list) = tests.test else {
            bail!("all_tests.json has no \"test\" list");
        };
        let mut days = Vec::with_capacity(list.len());
        for test in list.iter().map(lenient::object::<TestEntry>) {
            let id = need(test.id, "id", "all_tests.json")?;
            let session = need(test.session, "session", &id)?;
            let questions: Questions =
                lenient::object(&json(set, &format!("eval/{id}/questions.json"))?);
            let rounds = questions
                .rounds
                .ok_or_else(|| anyhow!("{id}: questions.json has no rounds"))?
                .iter()
                .map(|r| read_round(lenient::object(r), &id))
                .collect::<Result<Vec<_>>>()?;
            days.push(Day {
                arc: need(test.arc, "arc", &id)?,
                tags: test.preference_tags.unwrap_or_default(),
                seed: read_seed(set, &session)?,
                session,
                rounds,
                id,
            });
        }
        let identity = IDENTITY_FILES
            .iter()
            .map(|name| {
                Ok((
                    name.to_string(),
                    text(set, &format!("workspaces/shared/{name}"))?.to_string(),
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            set,
            days,
            identity,
        })
    }

    /// The first `n` days only (a shorter run).
    pub fn first_days(mut self, n: Option<usize>) -> Self {
        if let Some(n) = n {
            self.days.truncate(n);
        }
        self
    }

    /// The seeded OpenClaw transcript of `day` (JSONL, version 3).
    pub fn seed_transcript(&self, day: &Day) -> Result<&'static str> {
        text(self.set, &session_file(&day.session))
    }

    /// The reference harness's OpenClaw config: `openclaw.json` (straight
    /// to the model) or `metaclaw.json` (through metaclaw), placeholders
    /// unfilled.
    pub fn openclaw_config(&self, through_metaclaw: bool) -> Result<Value> {
        let name = if through_metaclaw {
            "metaclaw.json"
        } else {
            "openclaw.json"
        };
        json(self.set, &format!("openclaw_cfg/{name}"))
    }

    pub fn rounds(&self) -> usize {
        self.days.iter().map(|d| d.rounds.len()).sum()
    }

    /// Writes `day`'s starting workspace into `dir` (which must be empty or
    /// missing): the identity files, and that day's input folder only.
    pub fn write_workspace(&self, day: &str, dir: &Path) -> Result<()> {
        let prefix = format!("{}/workspaces/shared/", self.set.dir());
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        for (path, bytes) in embedded::FILES {
            let Some(rel) = path.strip_prefix(&prefix) else {
                continue;
            };
            let wanted = IDENTITY_FILES.contains(&rel) || rel.starts_with(&format!("{day}/"));
            if !wanted {
                continue;
            }
            let to = dir.join(rel);
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("cannot create {}", parent.display()))?;
            }
            std::fs::write(&to, bytes).with_context(|| format!("cannot write {}", to.display()))?;
        }
        // The day's folder exists even when it has no input files.
        std::fs::create_dir_all(dir.join(day))
            .with_context(|| format!("cannot create {}", dir.join(day).display()))?;
        Ok(())
    }
}

fn read_round(r: RoundEntry, day: &str) -> Result<Round> {
    let id = need(r.id, "id", day)?;
    let what = format!("{day} {id}");
    let kind = match r.kind.as_deref() {
        Some("file_check") => Kind::FileCheck {
            command: need(r.eval.command, "command", &what)?,
            expect_exit: r.eval.expect_exit.unwrap_or(0) as i32,
        },
        Some("multi_choice") => Kind::MultiChoice {
            options: letters_map(&r.eval.options),
            answer: r
                .eval
                .answer
                .ok_or_else(|| anyhow!("{what}: no answer list"))?,
        },
        other => bail!("{what}: unknown round type {other:?}"),
    };
    Ok(Round {
        question: need(r.question, "question", &what)?,
        correct: r.feedback.correct.unwrap_or_default(),
        incorrect: r.feedback.incorrect.unwrap_or_default(),
        explanations: letters_map(&r.feedback.options),
        kind,
        id,
    })
}

fn letters_map(o: &serde_json::Map<String, Value>) -> BTreeMap<String, String> {
    o.iter()
        .map(|(k, v)| {
            let text = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), text)
        })
        .collect()
}

/// Where a seeded session's transcript is in a set.
fn session_file(session: &str) -> String {
    format!("openclaw_state/agents/metaclaw_agent/sessions/{session}.jsonl")
}

/// A line of a seeded OpenClaw transcript.
#[derive(Deserialize, Default)]
#[serde(default)]
struct SeedEntry {
    #[serde(rename = "type", deserialize_with = "lenient::field")]
    kind: Option<String>,
    #[serde(deserialize_with = "lenient::obj")]
    message: SeedMessage,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SeedMessage {
    #[serde(deserialize_with = "lenient::field")]
    role: Option<String>,
    content: Value,
}

/// A content block of a transcript message.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Block {
    #[serde(rename = "type", deserialize_with = "lenient::field")]
    kind: Option<String>,
    #[serde(deserialize_with = "lenient::field")]
    text: Option<String>,
}

/// The user and assistant texts of a seeded OpenClaw transcript.
fn read_seed(set: Set, session: &str) -> Result<Vec<(String, String)>> {
    let rel = session_file(session);
    let mut seed = Vec::new();
    for line in text(set, &rel)?.lines().filter(|l| !l.trim().is_empty()) {
        let entry: Value =
            serde_json::from_str(line).with_context(|| format!("{rel}: a line is not JSON"))?;
        let entry: SeedEntry = lenient::object(&entry);
        if entry.kind.as_deref() != Some("message") {
            continue;
        }
        let Some(role @ ("user" | "assistant")) = entry.message.role.as_deref() else {
            continue;
        };
        let text: String = match &entry.message.content {
            Value::String(s) => s.clone(),
            Value::Array(blocks) => blocks
                .iter()
                .map(lenient::object::<Block>)
                .filter(|b| b.kind.as_deref() == Some("text"))
                .filter_map(|b| b.text)
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        };
        seed.push((role.to_string(), text));
    }
    if seed.is_empty() {
        bail!("{rel} has no user or assistant message");
    }
    Ok(seed)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    /// The sizes the reference gives (§6): days, rounds, file checks.
    #[test]
    fn both_sets_load_with_the_reference_sizes() {
        for (set, days, rounds, fc) in [(Set::Small, 12, 61, 36), (Set::Full, 30, 346, 224)] {
            let bench = Bench::load(set).unwrap();
            assert_eq!(bench.days.len(), days, "{set:?}");
            assert_eq!(bench.rounds(), rounds, "{set:?}");
            let fcs = bench
                .days
                .iter()
                .flat_map(|d| &d.rounds)
                .filter(|r| r.is_file_check())
                .count();
            assert_eq!(fcs, fc, "{set:?}");
            for day in &bench.days {
                assert_eq!(day.seed[0].0, "user", "{}", day.id);
                assert!(day.seed.iter().any(|(r, _)| r == "assistant"), "{}", day.id);
            }
        }
    }

    /// A day's workspace holds the identity files and that day's folder
    /// only: no other day's material, and no checker scripts.
    #[test]
    fn a_workspace_holds_only_its_day() {
        let bench = Bench::load(Set::Small).unwrap();
        let dir = tempfile::tempdir().unwrap();
        bench.write_workspace("day08", dir.path()).unwrap();
        assert!(dir.path().join("USER.md").is_file());
        // Re-created input files (not in the upstream copy) are there.
        assert!(dir.path().join("day08/prod_config.py").is_file());
        assert!(!dir.path().join("day07").exists());
        assert!(!dir.path().join("scripts").exists());
    }
}
