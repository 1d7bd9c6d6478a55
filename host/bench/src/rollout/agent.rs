//! The built-in agent loop: one task through the running proxy, as one
//! session, the way an agent would drive it.
//!
//! Each model call is a `POST /v1/chat/completions` with the tools and the
//! header `x-session-id: rollout-<run id>-<task id>`, so the proxy records
//! every turn under the task's session (skills injected, turns scored, as
//! for live traffic). When the answer has tool calls, they run in the
//! task's workspace and their results go back as `tool` messages; the loop
//! ends on an answer without tool calls, after `--max-steps` calls, or on
//! an error. Then `POST /v1/sessions/{id}/end` ends the session, which
//! queues its learning job: the judge and the scorers reward the turns as
//! they do live ones.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// An error body's `{message}`, read as metaclaw's recorder reads it.
pub use metaclaw_wire::recorded::ErrorBody;

use super::sandbox::Sandbox;
use super::taskdir::TaskDir;
use super::tasks::Task;
use super::tools::{self, Call};
use super::workspace::Workspace;
use crate::lenient;

/// Tool calls run from one model answer, by default (`--max-tool-calls-per-step`).
pub const MAX_CALLS_PER_STEP: u32 = tools::MAX_CALLS_PER_STEP;
/// Tool calls per task, by default (`--max-tool-calls`): twice the
/// per-step cap over the default eight steps is far beyond what a task
/// needs, and bounds what one task can make the sandbox run.
pub const MAX_CALLS_PER_TASK: u32 = 64;

/// How long one model call may take, start to end.
const CALL_TIMEOUT: Duration = Duration::from_secs(600);

/// What the model is told before the task.
const SYSTEM_PROMPT: &str = "You are an agent doing a task in a workspace folder, with tools: \
read_file(path), write_file(path, content), list_dir(path), copy_file(from, to), \
move_file(from, to) and run(command). Paths are relative to the workspace. run executes `sh -c command` in the workspace with no network, no access \
outside it but read-only system folders, and a time limit. Use the tools as needed; when the \
task is done, answer with a short summary and no tool call.";

/// How a task's loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Finished {
    /// The model answered without a tool call.
    Answered,
    /// `--max-steps` model calls, the last still calling tools.
    MaxSteps,
    /// An answer asked for tool calls past `--max-tool-calls`.
    MaxToolCalls,
    Error,
}

impl Finished {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Answered => "answered",
            Self::MaxSteps => "max_steps",
            Self::MaxToolCalls => "max_tool_calls",
            Self::Error => "error",
        }
    }
}

/// Why a call to the proxy under test got no answer to use.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProxyFailed {
    #[error("the model call failed: {0}")]
    Call(String),
    #[error("the model's answer was cut: {0}")]
    Cut(String),
    #[error("the proxy answered {status}: {message}")]
    Status {
        status: reqwest::StatusCode,
        message: String,
    },
    #[error("the answer has no choices[0].message")]
    NoMessage,
    #[error("{0}")]
    Unreached(String),
    #[error("{status}: {text}")]
    Refused {
        status: reqwest::StatusCode,
        text: String,
    },
}

/// One task's outcome: a `--json` line.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub task_id: String,
    pub session_id: String,
    /// Model calls made.
    pub steps: u32,
    pub tool_calls: u32,
    pub finished: Finished,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The workspace left in place (`--keep`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<PathBuf>,
}

/// What every task of a rollout shares.
pub struct Agent {
    pub client: reqwest::Client,
    /// The daemon, e.g. `http://127.0.0.1:30000`.
    pub url: String,
    /// `proxy.api_key`, when the proxy requires one.
    pub token: Option<String>,
    pub model: String,
    pub max_steps: u32,
    /// Tool calls run from one answer; the rest get an error result.
    pub max_calls_per_step: u32,
    /// Tool calls per task; an answer asking for more ends the task.
    pub max_calls: u32,
    pub run_id: String,
    /// Where task folders are made.
    pub run_dir: PathBuf,
    pub keep: bool,
    pub sandbox: Arc<Sandbox>,
}

impl Agent {
    /// The session id of `task` in this rollout.
    pub fn session_id(&self, task: &Task) -> String {
        format!("rollout-{}-{}", self.run_id, task.id)
    }

    /// Runs `task` to its end and ends its session.
    pub async fn run(&self, task: &Task) -> Summary {
        let mut summary = Summary {
            task_id: task.id.clone(),
            session_id: self.session_id(task),
            steps: 0,
            tool_calls: 0,
            finished: Finished::Error,
            error: None,
            workspace: None,
        };
        let dir = match TaskDir::create(&self.run_dir, &task.id) {
            Ok(dir) => dir,
            Err(e) => {
                summary.error = Some(format!("{e:#}"));
                return summary;
            }
        };
        match Workspace::open(&dir.work()) {
            Ok(workspace) => self.converse(task, &dir, workspace, &mut summary).await,
            Err(e) => summary.error = Some(format!("cannot open the workspace: {e}")),
        }
        if let Err(e) = self.end(&summary.session_id).await {
            eprintln!(
                "warning: task {}: session {} was not ended ({e}); it ends after \
                 sessions.idle_timeout",
                task.id, summary.session_id
            );
        }
        if self.keep {
            summary.workspace = Some(dir.work());
        } else {
            dir.remove();
        }
        summary
    }

    /// The loop: model call, tools, again.
    async fn converse(
        &self,
        task: &Task,
        dir: &TaskDir,
        workspace: Workspace,
        summary: &mut Summary,
    ) {
        let workspace = Arc::new(workspace);
        let mut messages = vec![
            json!({"role": "system", "content": SYSTEM_PROMPT}),
            json!({"role": "user", "content": task.instruction}),
        ];
        summary.finished = Finished::MaxSteps;
        while summary.steps < self.max_steps {
            summary.steps += 1;
            let message = match self.complete(&summary.session_id, &messages).await {
                Ok(message) => message,
                Err(e) => {
                    summary.finished = Finished::Error;
                    summary.error = Some(e.to_string());
                    return;
                }
            };
            let (message, calls) = assistant(message);
            messages.push(message);
            if calls.is_empty() {
                summary.finished = Finished::Answered;
                return;
            }
            let mut over_task = false;
            for (i, (id, name, arguments)) in calls.into_iter().enumerate() {
                let content = if i >= self.max_calls_per_step as usize {
                    tools::over_step_cap(self.max_calls_per_step)
                } else if summary.tool_calls >= self.max_calls {
                    over_task = true;
                    format!(
                        "error: not run: this task has used its {} tool calls",
                        self.max_calls
                    )
                } else {
                    summary.tool_calls += 1;
                    match Call::parse(&name, &arguments) {
                        Ok(call) => self.execute(call, &workspace, dir).await,
                        Err(e) => format!("error: {e}"),
                    }
                };
                // Every call gets its result, run or not, as the API expects.
                messages.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
            }
            if over_task {
                summary.finished = Finished::MaxToolCalls;
                summary.error = Some(format!(
                    "the model asked for more than {} tool calls (--max-tool-calls)",
                    self.max_calls
                ));
                return;
            }
        }
    }

    /// One tool call, off the async threads (a `run` waits for its command).
    async fn execute(&self, call: Call, workspace: &Arc<Workspace>, dir: &TaskDir) -> String {
        let (workspace, dir, sandbox) = (workspace.clone(), dir.clone(), self.sandbox.clone());
        tokio::task::spawn_blocking(move || tools::execute(&call, &workspace, &dir, &sandbox))
            .await
            .unwrap_or_else(|e| format!("error: the tool failed: {e}"))
    }

    /// One model call through the proxy: the answer's message.
    async fn complete(&self, session: &str, messages: &[Value]) -> Result<Value, ProxyFailed> {
        let body = json!({
            "model": self.model,
            "messages": messages,
            "tools": tools::definitions(),
            "tool_choice": "auto",
            "stream": false,
        });
        let response = self
            .post("/v1/chat/completions")
            .header("x-session-id", session)
            .body(body.to_string())
            .timeout(CALL_TIMEOUT)
            .send()
            .await
            .map_err(|e| ProxyFailed::Call(metaclaw_core::http::describe(&e)))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| ProxyFailed::Cut(metaclaw_core::http::describe(&e)))?;
        let answer: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let answer = Completion::read(&answer);
        if !status.is_success() {
            let message = answer
                .error
                .message
                .unwrap_or_else(|| String::from_utf8_lossy(&bytes).chars().take(300).collect());
            return Err(ProxyFailed::Status { status, message });
        }
        answer.message().ok_or(ProxyFailed::NoMessage)
    }

    /// Ends the session, so learning judges it now rather than after the
    /// idle timeout. A session the proxy never saw (the first call failed
    /// before it) has nothing to end.
    async fn end(&self, session: &str) -> Result<(), ProxyFailed> {
        let response = self
            .post(&format!("/v1/sessions/{session}/end"))
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .map_err(|e| ProxyFailed::Unreached(metaclaw_core::http::describe(&e)))?;
        let status = response.status();
        if status.is_success() || status == reqwest::StatusCode::NOT_FOUND {
            return Ok(());
        }
        let text = response.text().await.unwrap_or_default();
        Err(ProxyFailed::Refused {
            status,
            text: text.chars().take(300).collect(),
        })
    }

    fn post(&self, path: &str) -> reqwest::RequestBuilder {
        let request = self
            .client
            .post(format!("{}{path}", self.url))
            .header(reqwest::header::CONTENT_TYPE, "application/json");
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }
}

/// A chat completion as the agents read it: the first choice's message
/// (kept whole: it goes back into the conversation as sent), the tokens,
/// an error body's message.
#[derive(Deserialize, Default)]
#[serde(default)]
pub struct Completion {
    #[serde(deserialize_with = "lenient::each")]
    choices: Vec<Choice>,
    #[serde(deserialize_with = "lenient::obj")]
    pub usage: Usage,
    #[serde(deserialize_with = "lenient::obj")]
    pub error: ErrorBody,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Choice {
    #[serde(deserialize_with = "lenient::field")]
    message: Option<Map<String, Value>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct Usage {
    #[serde(deserialize_with = "lenient::field")]
    pub prompt_tokens: Option<u64>,
    #[serde(deserialize_with = "lenient::field")]
    pub completion_tokens: Option<u64>,
}

impl Completion {
    pub fn read(answer: &Value) -> Self {
        lenient::object(answer)
    }

    /// The first choice's message, when it is an object.
    pub fn message(self) -> Option<Value> {
        let first = self.choices.into_iter().next()?;
        first.message.map(Value::Object)
    }
}

/// What the loop reads of a tool call (`arguments` as sent: JSON text,
/// or whatever the model put there).
#[derive(Deserialize, Default)]
#[serde(default)]
struct CallSeen {
    #[serde(deserialize_with = "lenient::field")]
    id: Option<String>,
    #[serde(deserialize_with = "lenient::obj")]
    function: FunctionSeen,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct FunctionSeen {
    #[serde(deserialize_with = "lenient::field")]
    name: Option<String>,
    arguments: Value,
}

/// The answer's message as it goes back into the conversation (every tool
/// call given an id if the upstream left it out), and its calls as
/// `(id, name, arguments)`.
pub fn assistant(message: Value) -> (Value, Vec<(String, String, Value)>) {
    let mut message = match message {
        Value::Object(fields) => fields,
        _ => Map::new(),
    };
    message.insert("role".into(), json!("assistant"));
    let mut calls = Vec::new();
    if let Some(list) = message.get_mut("tool_calls").and_then(Value::as_array_mut) {
        for (i, call) in list.iter_mut().enumerate() {
            let seen: CallSeen = lenient::object(call);
            let id = match seen.id {
                Some(id) if !id.is_empty() => id,
                _ => {
                    let id = format!("call_{i}");
                    give_id(call, &id);
                    id
                }
            };
            let name = seen.function.name.unwrap_or_default();
            calls.push((id, name, seen.function.arguments));
        }
    }
    (Value::Object(message), calls)
}

/// Sets a tool call's id in place (a null call becomes an object with
/// it, as the assignment by key this replaced did).
fn give_id(call: &mut Value, id: &str) {
    match call {
        Value::Object(fields) => {
            fields.insert("id".into(), json!(id));
        }
        Value::Null => *call = json!({ "id": id }),
        _ => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn tool_calls_are_read_and_given_ids() {
        let (message, calls) = assistant(json!({
            "content": null,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "run", "arguments": "{\"command\": \"ls\"}"}},
                {"type": "function", "function": {"name": "list_dir", "arguments": "{}"}},
            ],
        }));
        assert_eq!(message["role"], "assistant");
        assert_eq!(message["tool_calls"][1]["id"], "call_1");
        let ids: Vec<&str> = calls.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(ids, ["c1", "call_1"]);
        assert_eq!(calls[0].1, "run");
        assert_eq!(calls[0].2, json!("{\"command\": \"ls\"}"));

        let (_, none) = assistant(json!({"role": "assistant", "content": "done"}));
        assert!(none.is_empty());
    }
}
