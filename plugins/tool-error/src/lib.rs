//! `tool-error`: the first-party scorer for failed tool calls.
//!
//! When the assistant's answer called tools and any result came back as an
//! error (an `error` field in JSON, a non-zero exit code, a traceback,
//! "command not found", "No such file or directory", …), the turn gets a
//! negative reward in proportion to the calls that failed. Answers without
//! tool calls, or whose results are all fine, get no opinion.

use metaclaw_plugin_sdk::scorer::{FinishedTurn, Guest, Metadata, PluginGuest, Reward, metadata};

pub struct ToolError;

impl PluginGuest for ToolError {
    fn metadata() -> Metadata {
        metadata(
            "tool-error",
            env!("CARGO_PKG_VERSION"),
            "Negative reward when a tool the assistant called came back with an error",
        )
    }
}

impl Guest for ToolError {
    fn score(turn: FinishedTurn) -> Option<Reward> {
        score(&turn)
    }
}

// Exported only in the component build, so the logic also tests natively.
#[cfg(target_arch = "wasm32")]
metaclaw_plugin_sdk::scorer::export_scorer!(ToolError);

pub fn score(turn: &FinishedTurn) -> Option<Reward> {
    if turn.response.tool_calls.is_empty() || turn.tool_results.is_empty() {
        return None;
    }
    let mut failed = Vec::new();
    for result in &turn.tool_results {
        if let Some(evidence) = error_evidence(&result.content) {
            let tool = result
                .tool_call_id
                .as_deref()
                .and_then(|id| turn.response.tool_calls.iter().find(|c| c.id == id))
                .map(|c| c.name.as_str())
                .unwrap_or("a tool");
            failed.push(format!("{tool}: {evidence}"));
        }
    }
    if failed.is_empty() {
        return None;
    }
    let total = turn.tool_results.len().max(failed.len()) as f32;
    let value = -(0.5 + 0.5 * failed.len() as f32 / total);
    let shown: Vec<&str> = failed.iter().take(2).map(String::as_str).collect();
    Some(Reward {
        value,
        label: "tool-error".into(),
        rationale: format!(
            "{} of {} tool calls failed — {}",
            failed.len(),
            total as usize,
            shown.join("; ")
        ),
    })
}

/// Why this tool output looks like a failure, or `None`.
pub fn error_evidence(output: &str) -> Option<String> {
    let trimmed = output.trim();
    if trimmed.starts_with('{')
        && let Some(reason) = json_error(trimmed)
    {
        return Some(reason);
    }
    const MARKERS: &[&str] = &[
        "traceback (most recent call last)",
        "command not found",
        "no such file or directory",
        "permission denied",
        "connection refused",
        "panicked at",
        "segmentation fault",
        "enoent",
        "eacces",
    ];
    for line in trimmed.lines().take(200) {
        let lower = line.trim().to_ascii_lowercase();
        let marked = MARKERS.iter().any(|m| lower.contains(m))
            || lower.starts_with("error:")
            || lower.starts_with("error ")
            || lower.starts_with("fatal:")
            || nonzero_exit(&lower);
        if marked {
            return Some(clip(line.trim()));
        }
    }
    None
}

/// `{"error": …}`, `{"ok": false}`, `{"status": "error"}`, `{"exitCode": 2}`.
fn json_error(text: &str) -> Option<String> {
    let compact: String = text
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .to_ascii_lowercase();
    if compact.contains("\"ok\":false")
        || compact.contains("\"status\":\"error\"")
        || compact.contains("\"success\":false")
    {
        return Some(clip(text));
    }
    if let Some(at) = compact.find("\"error\":") {
        let rest = &compact[at + 8..];
        if !rest.starts_with("null") && !rest.starts_with("\"\"") && !rest.starts_with("false") {
            return Some(clip(text));
        }
    }
    for key in ["\"exitcode\":", "\"exit_code\":", "\"code\":"] {
        if let Some(at) = compact.find(key) {
            let digits: String = compact[at + key.len()..]
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '-')
                .collect();
            if key != "\"code\":" && digits.parse::<i64>().is_ok_and(|n| n != 0) {
                return Some(clip(text));
            }
        }
    }
    None
}

/// "exit code 2", "exited with code 1", "exit status: 127".
fn nonzero_exit(lower: &str) -> bool {
    for phrase in ["exit code", "exited with code", "exit status"] {
        if let Some(at) = lower.find(phrase) {
            let rest = lower[at + phrase.len()..].trim_start_matches([':', ' ', '=']);
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            if digits.parse::<u32>().is_ok_and(|n| n != 0) {
                return true;
            }
        }
    }
    false
}

fn clip(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= 120 {
        one_line
    } else {
        let cut: String = one_line.chars().take(117).collect();
        format!("{cut}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_failures() {
        for out in [
            "{\"error\": \"file not found\"}",
            "{\"ok\": false, \"message\": \"denied\"}",
            "{\"exitCode\": 2, \"stdout\": \"\"}",
            "bash: pyhton: command not found",
            "cat: x.txt: No such file or directory",
            "Traceback (most recent call last):\n  File \"a.py\"",
            "process exited with code 1",
            "Error: EACCES: permission denied, open '/etc/shadow'",
        ] {
            assert!(error_evidence(out).is_some(), "{out}");
        }
    }

    #[test]
    fn leaves_successes_alone() {
        for out in [
            "{\"error\": null, \"result\": 4}",
            "{\"exitCode\": 0, \"stdout\": \"ok\"}",
            "hello world",
            "The error budget is fine.",
            "exit code 0",
        ] {
            assert!(error_evidence(out).is_none(), "{out}");
        }
    }
}
