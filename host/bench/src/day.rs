//! One bench day: one conversation, continued round by round.
//!
//! The conversation starts with a system prompt built from the workspace's
//! identity files (as OpenClaw's "Workspace Files" section does) and the
//! day's seeded exchange. Each round is one user message (the previous
//! round's feedback, then the question); the agent loop calls the model,
//! runs its tool calls in the day's workspace (the rollout's file tools and
//! sandboxed `run`), and stops at an answer without tool calls. The
//! answer is the turn's assistant text. Right after it the round is
//! scored: its check command against the workspace, or its boxed letters.
//! After the last round the feedback is sent once more, unscored, so a
//! learning proxy sees it.
//!
//! A finished round is appended to the run's records before the next one
//! starts, with the conversation saved beside the workspace, so an
//! interrupted run resumes at the first round not recorded.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::command::{self, Checks, PartResult};
use super::data::{Bench, Day, Kind, Round};
use super::lenient;
use super::model::Endpoint;
use super::openclaw::ClawDay;
use super::score::{self, Score};
use crate::rollout::sandbox::Sandbox;
use crate::rollout::taskdir::TaskDir;
use crate::rollout::tools::{self, Call};
use crate::rollout::workspace::Workspace;
use metaclaw_core::store::{Store, TurnRow};

/// What an earlier round's tool results keep in the conversation: the
/// model saw them whole when they were new.
const OLD_TOOL_RESULT: usize = 1000;
/// How long an OpenClaw turn's calls may take to appear in metaclaw's
/// store after OpenClaw has its answer.
const RECORDED_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// How the agent calls its model.
#[derive(Clone)]
pub struct Agent {
    pub endpoint: Endpoint,
    pub model: String,
    pub temperature: f32,
    pub seed: u64,
    /// Model calls per round at most.
    pub max_steps: u32,
    pub sandbox: Arc<Sandbox>,
    /// The file checks, confined.
    pub checks: Arc<Checks>,
    /// The arm's metaclaw store: what an OpenClaw turn's calls were served
    /// with (the built-in agent reads it from the response headers).
    pub recorded: Option<Store>,
}

/// Token counts from the replies' `usage`.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
}

/// One tool call of a round, for the report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ToolUse {
    pub name: String,
    pub arguments: String,
    pub result: String,
}

/// One finished round: a line of `rounds.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RoundRecord {
    pub arm: String,
    pub repeat: u32,
    pub day: String,
    pub arc: String,
    pub round: String,
    /// Its place in the day (0-based).
    pub index: usize,
    /// `file_check` or `multi_choice`.
    pub kind: String,
    /// What the user sent.
    pub message: String,
    /// The turn's assistant text.
    pub answer: String,
    pub tools: Vec<ToolUse>,
    /// Model calls made.
    pub steps: u32,
    /// Tokens the model read and wrote in the round (as its API said).
    #[serde(default)]
    pub tokens: Tokens,
    /// Workspace files created, changed or removed in the round.
    pub files: Vec<String>,
    /// File checks: each part of the command and its verdict.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<PartResult>,
    pub score: Score,
    /// Multiple choice: the gold letters and how many options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gold: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<usize>,
    /// What the user says next about this round.
    pub feedback: String,
    /// Skills metaclaw injected into the round's model calls.
    pub skills: Vec<String>,
    /// Who answered the round's calls, when metaclaw said (rl: the
    /// student and its policy version, or the LLM as its fallback).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub served_by: Vec<String>,
    /// The conversation's length after the round.
    pub messages: usize,
    pub ms: u64,
}

/// Where a day's files are: `<arm dir>/days/dayNN/` with the rollout's
/// task layout (`work/` is the workspace) and `conversation.json`.
pub struct DayDir {
    pub task: TaskDir,
    /// `--agent openclaw`: the day's OpenClaw, which holds the
    /// conversation (`conversation.json` is then the record of what was
    /// said, not what is sent).
    pub claw: Option<ClawDay>,
}

impl DayDir {
    /// The day's folder: made fresh (its workspace written) when no round
    /// of it is recorded yet, else the one left by the interrupted run.
    pub fn prepare(bench: &Bench, day: &Day, days: &Path, fresh: bool) -> Result<Self> {
        let path = days.join(&day.id);
        if fresh {
            metaclaw_core::home::remove_dir_if_any(&path)?;
            std::fs::create_dir_all(days)
                .with_context(|| format!("cannot create {}", days.display()))?;
            let task = TaskDir::create(days, &day.id)?;
            bench.write_workspace(&day.id, &task.work())?;
            return Ok(Self { task, claw: None });
        }
        Ok(Self {
            task: TaskDir::at(path),
            claw: None,
        })
    }

    fn conversation_file(&self) -> PathBuf {
        self.task.path().join("conversation.json")
    }

    /// The saved conversation, cut to `len` messages (the last recorded
    /// round's end: anything after it belongs to a round not recorded).
    pub fn conversation(&self, len: usize) -> Result<Vec<Value>> {
        let file = self.conversation_file();
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot resume: {} is missing", file.display()))?;
        let mut messages: Vec<Value> = serde_json::from_str(&text)
            .with_context(|| format!("cannot resume: {} is not a conversation", file.display()))?;
        if messages.len() < len {
            anyhow::bail!(
                "cannot resume: {} has {} messages, the records need {len}",
                file.display(),
                messages.len()
            );
        }
        messages.truncate(len);
        Ok(messages)
    }

    fn save(&self, messages: &[Value]) -> Result<()> {
        metaclaw_core::home::write_atomic(
            &self.conversation_file(),
            &serde_json::to_vec(messages)?,
            None,
        )
    }
}

/// The day's opening: the system prompt and the seeded exchange.
pub fn opening(bench: &Bench, day: &Day) -> Vec<Value> {
    let mut system = String::from(
        "You are MetaClaw Agent, the user's personal assistant, working in their workspace \
         folder with these tools: read_file(path), write_file(path, content), list_dir(path), \
         copy_file(from, to), move_file(from, to) and run(command). Paths are relative to the \
         workspace root. run executes `sh -c command` in the workspace with no network and a \
         time limit. Use the tools to do the work asked; when it is done, answer with a short \
         summary and no tool call.\n\n# Workspace Files\n",
    );
    for (name, text) in &bench.identity {
        system.push_str(&format!("\n## {name}\n\n{}\n", text.trim()));
    }
    let mut messages = vec![json!({"role": "system", "content": system})];
    for (role, text) in &day.seed {
        messages.push(json!({"role": role, "content": text}));
    }
    messages
}

/// Runs one round: the user's message in, the agent's turn, the score.
#[allow(clippy::too_many_arguments)]
pub async fn round(
    agent: &Agent,
    dir: &DayDir,
    messages: &mut Vec<Value>,
    day: &Day,
    index: usize,
    previous_feedback: Option<&str>,
    session: Option<&str>,
    who: (&str, u32),
) -> Result<RoundRecord> {
    let round = &day.rounds[index];
    let started = Instant::now();
    let before = snapshot(&dir.task.work());
    let message = score::message(previous_feedback, &round.question);
    messages.push(json!({"role": "user", "content": message}));
    let turn = agent.turn(dir, messages, session).await?;
    let files = changed(&before, &snapshot(&dir.task.work()));
    let (score, checks, gold, options) = match &round.kind {
        Kind::FileCheck {
            command,
            expect_exit,
        } => {
            let (runner, command, work) = (agent.checks.clone(), command.clone(), dir.task.work());
            let checks = tokio::task::spawn_blocking(move || runner.check(&command, &work))
                .await
                .context("the check did not finish")?
                .map_err(|e| {
                    anyhow::anyhow!(
                        "the round's file check could not run confined, so it was not scored \
                         (an infrastructure failure, not the agent's): {e}"
                    )
                })?;
            let passed = command::passed(&checks, *expect_exit);
            (score::file_check(passed), checks, None, None)
        }
        Kind::MultiChoice { options, answer } => (
            score::multi_choice(&turn.answer, options.len(), answer),
            Vec::new(),
            Some(answer.clone()),
            Some(options.len()),
        ),
    };
    let feedback = score::feedback(round, &score);
    dir.save(messages)?;
    Ok(RoundRecord {
        arm: who.0.to_string(),
        repeat: who.1,
        day: day.id.clone(),
        arc: day.arc.clone(),
        round: round.id.clone(),
        index,
        kind: kind_name(round).to_string(),
        message,
        answer: turn.answer,
        tools: turn.tools,
        steps: turn.steps,
        tokens: turn.tokens,
        files,
        checks,
        score,
        gold,
        options,
        feedback,
        skills: turn.skills,
        served_by: turn.served_by,
        messages: messages.len(),
        ms: started.elapsed().as_millis() as u64,
    })
}

/// Sends the day's closing feedback (unscored); the skills injected.
pub async fn close(
    agent: &Agent,
    dir: &DayDir,
    messages: &mut Vec<Value>,
    feedback: &str,
    session: Option<&str>,
) -> Result<Vec<String>> {
    messages.push(json!({"role": "user", "content": score::closing(feedback)}));
    let turn = agent.turn(dir, messages, session).await?;
    dir.save(messages)?;
    Ok(turn.skills)
}

pub fn kind_name(round: &Round) -> &'static str {
    match round.kind {
        Kind::FileCheck { .. } => "file_check",
        Kind::MultiChoice { .. } => "multi_choice",
    }
}

/// What one turn of the agent produced.
#[derive(Debug)]
pub(super) struct Turn {
    pub answer: String,
    /// The tools used (through OpenClaw: names only, as it reports them).
    pub tools: Vec<ToolUse>,
    /// Model calls.
    pub steps: u32,
    pub tokens: Tokens,
    pub skills: Vec<String>,
    pub served_by: Vec<String>,
}

impl Turn {
    /// Notes what metaclaw said of one model call: who served it and the
    /// skills it injected, each kept once.
    fn served(&mut self, by: Option<String>, skills: impl IntoIterator<Item = String>) {
        if let Some(by) = by
            && !self.served_by.contains(&by)
        {
            self.served_by.push(by);
        }
        for skill in skills {
            if !self.skills.contains(&skill) {
                self.skills.push(skill);
            }
        }
    }
}

impl Agent {
    /// Model call, tools, again, until an answer without tool calls or
    /// `max_steps` calls.
    async fn turn(
        &self,
        dir: &DayDir,
        messages: &mut Vec<Value>,
        session: Option<&str>,
    ) -> Result<Turn> {
        if let Some(claw) = &dir.claw {
            return self.claw_turn(claw, messages, session).await;
        }
        let workspace =
            Arc::new(Workspace::open(&dir.task.work()).with_context(|| {
                format!("cannot open the workspace {}", dir.task.work().display())
            })?);
        let mut turn = Turn {
            answer: String::new(),
            tools: Vec::new(),
            steps: 0,
            tokens: Tokens::default(),
            skills: Vec::new(),
            served_by: Vec::new(),
        };
        let mut texts = Vec::new();
        // Earlier rounds' tool results, cut (this round's stay whole).
        let this_round = messages.len();
        while turn.steps < self.max_steps {
            turn.steps += 1;
            let body = json!({
                "model": self.model,
                "messages": compact(messages, this_round),
                "tools": tools::definitions(),
                "tool_choice": "auto",
                "temperature": self.temperature,
                "seed": self.seed,
                "stream": false,
            });
            // A model call that fails for good (retries spent, or an
            // error no retry helps: a wrong key, an unknown model) stops
            // the run: a round the model never answered is not a result.
            let reply = self
                .endpoint
                .complete(&body, session)
                .await
                .map_err(|e| anyhow::anyhow!("the model call failed: {e}"))?;
            turn.tokens.input += reply.tokens.0;
            turn.tokens.output += reply.tokens.1;
            turn.served(reply.served_by, reply.skills);
            let (message, calls) = crate::rollout::agent::assistant(reply.message);
            let said: Said = lenient::object(&message);
            if let Some(text) = said.content.as_str().filter(|t| !t.trim().is_empty()) {
                texts.push(text.to_string());
            }
            messages.push(message);
            if calls.is_empty() {
                break;
            }
            for (i, (id, name, arguments)) in calls.into_iter().enumerate() {
                // As in `rollout`: one answer runs at most so many calls.
                let result = if i >= tools::MAX_CALLS_PER_STEP as usize {
                    tools::over_step_cap(tools::MAX_CALLS_PER_STEP)
                } else {
                    match Call::parse(&name, &arguments) {
                        Ok(call) => self.execute(call, &workspace, &dir.task).await,
                        Err(e) => format!("error: {e}"),
                    }
                };
                turn.tools.push(ToolUse {
                    name: name.clone(),
                    arguments: match &arguments {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    },
                    result: command::clip(&result),
                });
                messages.push(json!({"role": "tool", "tool_call_id": id, "content": result}));
            }
        }
        turn.answer = texts.join("\n");
        Ok(turn)
    }

    /// The last user message sent through the day's OpenClaw; its answer
    /// appended to the record of the conversation.
    async fn claw_turn(
        &self,
        claw: &ClawDay,
        messages: &mut Vec<Value>,
        session: Option<&str>,
    ) -> Result<Turn> {
        let message = messages
            .last()
            .map(lenient::object::<Said>)
            .and_then(|m| m.content.as_str().map(str::to_string))
            .unwrap_or_default();
        let seen = self.recorded_turns(session).len();
        let mut turn = claw.ask(&message).await?;
        messages.push(json!({"role": "assistant", "content": turn.answer}));
        self.note_served_since(&mut turn, session, seen).await;
        Ok(turn)
    }

    fn recorded_turns(&self, session: Option<&str>) -> Vec<TurnRow> {
        match (&self.recorded, session) {
            (Some(store), Some(session)) => store.session_turns(session).unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// Notes on `turn` the skills injected into, and who served, the
    /// session's calls after the first `seen`: once the calls OpenClaw
    /// made (its steps) are recorded (metaclaw records a call as it
    /// finishes; a few seconds at most).
    async fn note_served_since(&self, turn: &mut Turn, session: Option<&str>, seen: usize) {
        let Some(store) = &self.recorded else {
            return;
        };
        let deadline = Instant::now() + RECORDED_WITHIN;
        let rows = loop {
            store.flush().await;
            let rows = self.recorded_turns(session);
            if rows.len() >= seen + turn.steps as usize || Instant::now() > deadline {
                break rows;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        for row in rows.iter().skip(seen) {
            let skills = row
                .injected_skills
                .as_ref()
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|s| lenient::object::<SkillId>(s).id);
            let by = metaclaw_core::store::served_by_label(
                row.served_by.as_deref().unwrap_or_default(),
                row.sample.as_ref().map(|s| s.policy_version),
            );
            turn.served(by, skills);
        }
    }

    async fn execute(&self, call: Call, workspace: &Arc<Workspace>, dir: &TaskDir) -> String {
        let (workspace, dir, sandbox) = (workspace.clone(), dir.clone(), self.sandbox.clone());
        tokio::task::spawn_blocking(move || tools::execute(&call, &workspace, &dir, &sandbox))
            .await
            .unwrap_or_else(|e| format!("error: the tool failed: {e}"))
    }
}

/// The messages as sent: tool results before `this_round` cut to
/// [`OLD_TOOL_RESULT`] bytes, so a long day stays within a model's window.
fn compact(messages: &[Value], this_round: usize) -> Vec<Value> {
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let said: Said = lenient::object(m);
            let text = match (i >= this_round, said.role.as_deref(), said.content) {
                (false, Some("tool"), Value::String(text)) => text,
                _ => return m.clone(),
            };
            let mut m = m.clone();
            if let Value::Object(fields) = &mut m {
                let cut = tools::truncate(text, OLD_TOOL_RESULT);
                fields.insert("content".into(), json!(cut));
            }
            m
        })
        .collect()
}

/// What the loop reads of a message in the conversation (the message
/// itself goes on as sent).
#[derive(Deserialize, Default)]
#[serde(default)]
struct Said {
    #[serde(deserialize_with = "lenient::field")]
    role: Option<String>,
    content: Value,
}

/// A skill injected into a turn, as the store recorded it.
#[derive(Deserialize, Default)]
#[serde(default)]
struct SkillId {
    #[serde(deserialize_with = "lenient::field")]
    id: Option<String>,
}

/// Each file under `root` (relative path) and a digest of its bytes.
fn snapshot(root: &Path) -> BTreeMap<String, [u8; 32]> {
    use sha2::{Digest, Sha256};
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() {
                let Ok(bytes) = std::fs::read(&path) else {
                    continue;
                };
                let rel = path
                    .strip_prefix(root)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .into_owned();
                out.insert(rel, Sha256::digest(&bytes).into());
            }
        }
    }
    out
}

/// The files created, changed or removed between two snapshots.
fn changed(before: &BTreeMap<String, [u8; 32]>, after: &BTreeMap<String, [u8; 32]>) -> Vec<String> {
    let mut files: Vec<String> = after
        .iter()
        .filter(|(path, digest)| before.get(*path) != Some(digest))
        .map(|(path, _)| path.clone())
        .collect();
    files.extend(
        before
            .keys()
            .filter(|path| !after.contains_key(*path))
            .map(|path| format!("{path} (removed)")),
    );
    files.sort();
    files
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::data::Set;

    #[test]
    fn the_opening_carries_the_identity_files_and_the_seed() {
        let bench = Bench::load(Set::Small).unwrap();
        let messages = opening(&bench, &bench.days[0]);
        let system = messages[0]["content"].as_str().unwrap();
        for name in super::super::data::IDENTITY_FILES {
            assert!(system.contains(&format!("## {name}")), "{name}");
        }
        assert_eq!(messages[1]["role"], "user");
        assert!(
            messages[1]["content"]
                .as_str()
                .unwrap()
                .contains("March 16, 2026")
        );
        assert_eq!(messages[2]["role"], "assistant");
    }

    #[test]
    fn old_tool_results_are_cut_and_this_rounds_kept() {
        let long = "x".repeat(5000);
        let messages = vec![
            json!({"role": "tool", "tool_call_id": "a", "content": long}),
            json!({"role": "user", "content": long}),
            json!({"role": "tool", "tool_call_id": "b", "content": long}),
        ];
        let sent = compact(&messages, 2);
        assert!(sent[0]["content"].as_str().unwrap().len() < 1100);
        assert_eq!(sent[1]["content"].as_str().unwrap().len(), 5000);
        assert_eq!(sent[2]["content"].as_str().unwrap().len(), 5000);
    }

    #[test]
    fn changed_files_are_listed() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("d")).unwrap();
        std::fs::write(tmp.path().join("d/a"), "1").unwrap();
        std::fs::write(tmp.path().join("b"), "1").unwrap();
        let before = snapshot(tmp.path());
        std::fs::write(tmp.path().join("d/a"), "2").unwrap();
        std::fs::remove_file(tmp.path().join("b")).unwrap();
        std::fs::write(tmp.path().join("c"), "1").unwrap();
        assert_eq!(
            changed(&before, &snapshot(tmp.path())),
            ["b (removed)", "c", "d/a"]
        );
    }
}
