//! Task files: every `*.jsonl` in a folder, one task a line
//! (`{"task_id": "...", "instruction": "..."}`). Every bad line is reported
//! as `file:line: what is wrong` before anything runs, so a typo in task 90
//! does not surface after 89 rollouts.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// The most bad lines listed in one error.
const MAX_REPORTED: usize = 20;
/// A task id becomes part of a session id, an HTTP header and a URL path.
const MAX_ID_LEN: usize = 64;

/// One task to roll out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    pub id: String,
    pub instruction: String,
    /// `file:line`, for messages.
    pub origin: String,
}

/// The tasks of every `*.jsonl` file in `dir`, files in name order.
pub fn read_dir(dir: &Path) -> Result<Vec<Task>> {
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read the tasks folder {}", dir.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry
            .with_context(|| format!("cannot read the tasks folder {}", dir.display()))?
            .path();
        if path.extension().is_some_and(|e| e == "jsonl") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    if files.is_empty() {
        bail!(
            "no task files in {}: put *.jsonl files there, one task a line: \
             {{\"task_id\": \"...\", \"instruction\": \"...\"}}",
            dir.display()
        );
    }
    let mut tasks = Vec::new();
    let mut errors = Vec::new();
    let mut seen: HashMap<String, String> = HashMap::new();
    for file in &files {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        for (index, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let origin = format!("{}:{}", file.display(), index + 1);
            match parse_line(line) {
                Ok((id, instruction)) => {
                    if let Some(first) = seen.get(&id) {
                        errors.push(format!("{origin}: task_id {id:?} is taken (by {first})"));
                        continue;
                    }
                    seen.insert(id.clone(), origin.clone());
                    tasks.push(Task {
                        id,
                        instruction,
                        origin,
                    });
                }
                Err(e) => errors.push(format!("{origin}: {e}")),
            }
        }
    }
    if !errors.is_empty() {
        let more = errors.len().saturating_sub(MAX_REPORTED);
        errors.truncate(MAX_REPORTED);
        let mut message = format!("bad task lines:\n  {}", errors.join("\n  "));
        if more > 0 {
            message.push_str(&format!("\n  … and {more} more"));
        }
        bail!("{message}");
    }
    if tasks.is_empty() {
        bail!("the task files in {} hold no task", dir.display());
    }
    Ok(tasks)
}

/// What is wrong with a line of a tasks file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadLine {
    #[error("not a JSON object: {0}")]
    NotJson(String),
    #[error("not a JSON object: {{\"task_id\": \"...\", \"instruction\": \"...\"}}")]
    NotAnObject,
    #[error("\"{0}\" must be a string")]
    NotAString(&'static str),
    #[error("no \"{0}\"")]
    Missing(&'static str),
    #[error("\"instruction\" is empty")]
    EmptyInstruction,
    #[error(
        "task_id {0:?} must be 1 to {MAX_ID_LEN} letters, digits, '.', '_' or '-', starting with a letter or digit (it becomes part of the session id)"
    )]
    BadId(String),
}

/// `(task_id, instruction)` of one line, or what is wrong with it.
fn parse_line(line: &str) -> Result<(String, String), BadLine> {
    let value: Value = serde_json::from_str(line).map_err(|e| BadLine::NotJson(e.to_string()))?;
    let Value::Object(object) = value else {
        return Err(BadLine::NotAnObject);
    };
    let id = match object.get("task_id") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(_) => return Err(BadLine::NotAString("task_id")),
        None => return Err(BadLine::Missing("task_id")),
    };
    check_id(&id)?;
    let instruction = match object.get("instruction") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        Some(Value::String(_)) => return Err(BadLine::EmptyInstruction),
        Some(_) => return Err(BadLine::NotAString("instruction")),
        None => return Err(BadLine::Missing("instruction")),
    };
    Ok((id, instruction))
}

/// Letters, digits, `.`, `_` and `-`, starting with a letter or digit.
fn check_id(id: &str) -> Result<(), BadLine> {
    let valid_chars = id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    let starts_well = id.chars().next().is_some_and(|c| c.is_ascii_alphanumeric());
    if id.is_empty() || id.len() > MAX_ID_LEN || !valid_chars || !starts_well {
        return Err(BadLine::BadId(id.to_string()));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_read_in_file_order_and_blank_lines_skipped() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(
            tmp.path().join("b.jsonl"),
            "{\"task_id\": \"b1\", \"instruction\": \"do b\", \"extra\": 1}\n",
        )
        .unwrap();
        std::fs::write(
            tmp.path().join("a.jsonl"),
            "\n{\"task_id\": \"a1\", \"instruction\": \"do a\"}\n  \n{\"task_id\": 7, \"instruction\": \"x\"}\n",
        )
        .unwrap();
        std::fs::write(tmp.path().join("notes.txt"), "not a task").unwrap();
        let tasks = read_dir(tmp.path()).unwrap();
        let ids: Vec<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["a1", "7", "b1"]);
        assert!(
            tasks[0].origin.ends_with("a.jsonl:2"),
            "{}",
            tasks[0].origin
        );
        assert_eq!(tasks[2].instruction, "do b");
    }

    #[test]
    fn every_bad_line_is_named_by_file_and_line() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(
            tmp.path().join("t.jsonl"),
            [
                "{\"task_id\": \"ok\", \"instruction\": \"fine\"}",
                "{\"task_id\": \"x\"",
                "[1, 2]",
                "{\"instruction\": \"no id\"}",
                "{\"task_id\": \"a b\", \"instruction\": \"space\"}",
                "{\"task_id\": \"y\", \"instruction\": \"  \"}",
                "{\"task_id\": \"ok\", \"instruction\": \"again\"}",
            ]
            .join("\n"),
        )
        .unwrap();
        let e = read_dir(tmp.path()).unwrap_err().to_string();
        for (line, what) in [
            (2, "not a JSON object"),
            (3, "not a JSON object"),
            (4, "no \"task_id\""),
            (5, "task_id \"a b\" must be 1 to 64 letters"),
            (6, "\"instruction\" is empty"),
            (7, "task_id \"ok\" is taken (by "),
        ] {
            let needle = format!("t.jsonl:{line}: {what}");
            assert!(e.contains(&needle), "{needle} in\n{e}");
        }
        assert!(!e.contains("t.jsonl:1:"), "{e}");
    }

    #[test]
    fn a_folder_without_tasks_says_what_to_put_there() {
        let tmp = tempfile::tempdir().unwrap();
        let e = read_dir(tmp.path()).unwrap_err().to_string();
        assert!(e.contains("no task files") && e.contains("task_id"), "{e}");
        let e = read_dir(&tmp.path().join("missing")).unwrap_err();
        assert!(
            format!("{e:#}").contains("cannot read the tasks folder"),
            "{e:#}"
        );
    }
}
