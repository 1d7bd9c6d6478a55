//! The agent's six tools: what the model is offered (OpenAI function
//! tools) and what a call does. Every result is text for a `tool` message:
//! the answer, or `error: …` saying what was refused and why, cut at
//! [`MAX_RESULT`] bytes.

use serde_json::{Value, json};

use super::sandbox::{self, Sandbox};
use super::taskdir::TaskDir;
use super::workspace::Workspace;

/// The most one tool result carries back to the model.
pub const MAX_RESULT: usize = 16 * 1024;

/// Tool calls run from one model answer, by default: far more than a
/// step needs, few enough that one answer cannot queue unbounded work.
pub const MAX_CALLS_PER_STEP: u32 = 16;

/// The result of a call past the per-answer cap `max`: not run.
pub fn over_step_cap(max: u32) -> String {
    format!(
        "error: not run: at most {max} tool calls are run from one answer; ask for the rest in \
         the next one"
    )
}

/// The tools, as a chat request's `tools`.
pub fn definitions() -> Value {
    let function = |name: &str, description: &str, properties: Value, required: &[&str]| {
        json!({
            "type": "function",
            "function": {
                "name": name,
                "description": description,
                "parameters": {
                    "type": "object",
                    "properties": properties,
                    "required": required,
                },
            },
        })
    };
    let path = json!({"type": "string", "description": "a path relative to the workspace"});
    json!([
        function(
            "read_file",
            "Read a text file of the workspace.",
            json!({ "path": path }),
            &["path"],
        ),
        function(
            "write_file",
            "Create or replace a file of the workspace (missing folders are created).",
            json!({ "path": path, "content": {"type": "string"} }),
            &["path", "content"],
        ),
        function(
            "list_dir",
            "List a folder of the workspace (\".\" is the workspace).",
            json!({ "path": path }),
            &["path"],
        ),
        function(
            "copy_file",
            "Copy a file of the workspace to another path (e.g. a backup before an edit).",
            json!({ "from": path, "to": path }),
            &["from", "to"],
        ),
        function(
            "move_file",
            "Move or rename a file or folder of the workspace.",
            json!({ "from": path, "to": path }),
            &["from", "to"],
        ),
        function(
            "run",
            "Run a shell command (sh -c) in the workspace: no network, nothing outside the \
             workspace but read-only system folders, a time limit.",
            json!({ "command": {"type": "string"} }),
            &["command"],
        ),
    ])
}

/// One tool call, its arguments read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    ReadFile { path: String },
    WriteFile { path: String, content: String },
    ListDir { path: String },
    CopyFile { from: String, to: String },
    MoveFile { from: String, to: String },
    Run { command: String },
}

/// What is wrong with a tool call the model made (it is told so).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadCall {
    #[error("the arguments are not JSON: {0}")]
    NotJson(String),
    #[error("the arguments must be a JSON object")]
    NotAnObject,
    #[error("{tool} needs \"{key}\"")]
    Missing { tool: String, key: &'static str },
    #[error("\"{0}\" must be a string")]
    NotAString(&'static str),
    #[error(
        "no tool {0:?}: the tools are read_file, write_file, list_dir, copy_file, move_file and run"
    )]
    NoTool(String),
}

impl Call {
    /// The call `name(arguments)`; `arguments` is the JSON text the model
    /// wrote (or an object, from an upstream that sends one). Unknown
    /// argument names are ignored.
    pub fn parse(name: &str, arguments: &Value) -> Result<Self, BadCall> {
        let parsed;
        let args = match arguments {
            Value::String(text) if text.trim().is_empty() => {
                parsed = json!({});
                &parsed
            }
            Value::String(text) => {
                parsed = serde_json::from_str::<Value>(text)
                    .map_err(|e| BadCall::NotJson(e.to_string()))?;
                &parsed
            }
            other => other,
        };
        if !args.is_object() {
            return Err(BadCall::NotAnObject);
        }
        let text = |key: &'static str| -> Result<String, BadCall> {
            match &args[key] {
                Value::String(s) => Ok(s.clone()),
                Value::Null => Err(BadCall::Missing {
                    tool: name.to_string(),
                    key,
                }),
                _ => Err(BadCall::NotAString(key)),
            }
        };
        Ok(match name {
            "read_file" => Self::ReadFile {
                path: text("path")?,
            },
            "write_file" => Self::WriteFile {
                path: text("path")?,
                content: text("content")?,
            },
            "list_dir" => Self::ListDir {
                path: text("path").unwrap_or_else(|_| ".".into()),
            },
            "copy_file" => Self::CopyFile {
                from: text("from")?,
                to: text("to")?,
            },
            "move_file" => Self::MoveFile {
                from: text("from")?,
                to: text("to")?,
            },
            "run" => Self::Run {
                command: text("command")?,
            },
            other => {
                return Err(BadCall::NoTool(other.to_string()));
            }
        })
    }
}

/// Does `call` in the task's workspace; the text for its `tool` message.
/// Blocking (files, and `run` waits for its command).
pub fn execute(call: &Call, workspace: &Workspace, dir: &TaskDir, sandbox: &Sandbox) -> String {
    let result = match call {
        Call::ReadFile { path } => workspace.read_file(path).map_err(|e| e.to_string()),
        Call::WriteFile { path, content } => workspace
            .write_file(path, content)
            .map_err(|e| e.to_string()),
        Call::ListDir { path } => workspace.list_dir(path).map_err(|e| e.to_string()),
        Call::CopyFile { from, to } => workspace.copy_file(from, to).map_err(|e| e.to_string()),
        Call::MoveFile { from, to } => workspace.move_file(from, to).map_err(|e| e.to_string()),
        Call::Run { command } => sandbox
            .run(dir, command)
            .map(|out| sandbox::result_text(&out, sandbox.timeout()))
            .map_err(|e| e.to_string()),
    };
    let text = match result {
        Ok(text) => text,
        Err(e) => format!("error: {e}"),
    };
    truncate(text, MAX_RESULT)
}

/// `text` cut to at most `max` bytes (at a character boundary), saying so.
pub fn truncate(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let total = text.len();
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(&format!("\n[result cut: {end} of {total} bytes shown]"));
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_read_from_text_or_objects() {
        assert_eq!(
            Call::parse("read_file", &json!("{\"path\": \"a\"}")).unwrap(),
            Call::ReadFile { path: "a".into() }
        );
        assert_eq!(
            Call::parse("run", &json!({"command": "ls", "path": "ignored"})).unwrap(),
            Call::Run {
                command: "ls".into()
            }
        );
        assert_eq!(
            Call::parse("list_dir", &json!("")).unwrap(),
            Call::ListDir { path: ".".into() }
        );
        assert_eq!(
            Call::parse("write_file", &json!("{\"path\": \"a\"}"))
                .unwrap_err()
                .to_string(),
            "write_file needs \"content\""
        );
        assert!(
            Call::parse("run", &json!("{not json"))
                .unwrap_err()
                .to_string()
                .starts_with("the arguments are not JSON")
        );
        assert!(
            Call::parse("exec", &json!("{}"))
                .unwrap_err()
                .to_string()
                .contains("the tools are read_file")
        );
        assert_eq!(
            Call::parse("run", &json!("[1]")).unwrap_err(),
            BadCall::NotAnObject
        );
    }

    #[test]
    fn results_are_cut_at_a_character_boundary() {
        assert_eq!(truncate("abc".into(), 3), "abc");
        let cut = truncate("aé".repeat(4), 4);
        assert!(
            cut.starts_with("aéa\n[result cut: 4 of 12 bytes shown]"),
            "{cut}"
        );
    }

    #[test]
    fn the_six_tools_are_offered() {
        let names: Vec<String> = definitions()
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(
            names,
            [
                "read_file",
                "write_file",
                "list_dir",
                "copy_file",
                "move_file",
                "run"
            ]
        );
    }
}
