//! The Agent Skills spec (agentskills.io), as the agents that read skill
//! folders apply it (Codex's `~/.agents/skills`, Claude Code's
//! `~/.claude/skills`, OpenClaw): what they refuse, and what they load but
//! advise against. metaclaw's own reader is more lenient (it also reads
//! the original MetaClaw's layout); this says whether a SKILL.md would be
//! taken by an agent as it is (`metaclaw skills check`, `skills import`).

use serde::Serialize;
use serde_json::Value;

/// The frontmatter keys the spec allows at the top level; anything else
/// belongs under `metadata`.
pub const TOP_LEVEL: [&str; 6] = [
    "name",
    "description",
    "license",
    "compatibility",
    "metadata",
    "allowed-tools",
];
pub const MAX_NAME: usize = 64;
pub const MAX_DESCRIPTION: usize = 1024;
pub const MAX_COMPATIBILITY: usize = 500;
/// Progressive disclosure: the body is loaded whole when the skill is used.
pub const ADVISED_BODY_LINES: usize = 500;
pub const ADVISED_BODY_TOKENS: usize = 5000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// An agent that applies the spec does not load the skill.
    Refused,
    /// Loaded, but against the spec's advice.
    Advice,
}

/// One thing the spec says about a SKILL.md.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub severity: Severity,
    /// The frontmatter key (or `frontmatter`, `body`).
    pub field: String,
    pub message: String,
}

impl Finding {
    fn refused(field: &str, message: impl Into<String>) -> Self {
        Self {
            severity: Severity::Refused,
            field: field.into(),
            message: message.into(),
        }
    }

    fn advice(field: &str, message: impl Into<String>) -> Self {
        Self {
            severity: Severity::Advice,
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Whether any finding makes an agent refuse the skill.
pub fn refused(findings: &[Finding]) -> bool {
    findings.iter().any(|f| f.severity == Severity::Refused)
}

/// The refusals among `findings`, as one line.
pub fn refusals(findings: &[Finding]) -> String {
    findings
        .iter()
        .filter(|f| f.severity == Severity::Refused)
        .map(|f| format!("{}: {}", f.field, f.message))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why an agent would refuse `text` (in a folder named `folder`), if it
/// would: its refusals, one line.
pub fn refusal(text: &str, folder: Option<&str>) -> Option<String> {
    let findings = check(text, folder);
    refused(&findings).then(|| refusals(&findings))
}

/// Checks the text of a SKILL.md against the spec; `folder` is the name of
/// the folder holding it, which `name` must equal. Empty: an agent takes it.
pub fn check(text: &str, folder: Option<&str>) -> Vec<Finding> {
    let mut out = Vec::new();
    let (map, body) = match frontmatter(text) {
        Ok(parts) => parts,
        Err(refused) => return vec![refused],
    };
    check_name(&map, folder, &mut out);
    check_description(&map, &mut out);
    check_texts(&map, &mut out);
    check_metadata(&map, &mut out);
    for key in map.keys().filter(|k| !TOP_LEVEL.contains(&k.as_str())) {
        out.push(Finding::refused(
            key,
            "not a top-level key of the spec (name, description, license, compatibility, metadata, allowed-tools): move it under `metadata`",
        ));
    }
    check_body(body, &mut out);
    out
}

/// The frontmatter as a map, and the body; why not, where it is no map.
fn frontmatter(text: &str) -> Result<(serde_json::Map<String, Value>, &str), Finding> {
    let (yaml, body) = match super::skill::split(text) {
        Ok(parts) => parts,
        Err(e) => return Err(Finding::refused("frontmatter", e.to_string())),
    };
    let map = match serde_saphyr::from_str::<Value>(yaml) {
        Ok(Value::Object(map)) => map,
        Ok(Value::Null) => serde_json::Map::new(),
        Ok(_) => {
            return Err(Finding::refused(
                "frontmatter",
                "must be a YAML map of `key: value` lines",
            ));
        }
        Err(e) => {
            let e = e.to_string();
            let first = e.lines().next().unwrap_or_default().to_string();
            return Err(Finding::refused(
                "frontmatter",
                format!("not valid YAML: {first}"),
            ));
        }
    };
    Ok((map, body))
}

/// `name`: the spec's rule, and the folder's name.
fn check_name(map: &serde_json::Map<String, Value>, folder: Option<&str>, out: &mut Vec<Finding>) {
    match map.get("name") {
        Some(Value::String(name)) => {
            if let Some(why) = bad_name(name) {
                out.push(Finding::refused("name", format!("{name:?}: {why}")));
            }
            if let Some(folder) = folder
                && folder != name
            {
                out.push(Finding::refused(
                    "name",
                    format!("{name:?} must equal the folder's name {folder:?}"),
                ));
            }
        }
        Some(_) => out.push(Finding::refused("name", "must be text")),
        None => out.push(Finding::refused("name", "required")),
    }
}

/// `description`: text, neither empty nor too long.
fn check_description(map: &serde_json::Map<String, Value>, out: &mut Vec<Finding>) {
    match map.get("description") {
        Some(Value::String(d)) if d.trim().is_empty() => {
            out.push(Finding::refused("description", "must not be empty"));
        }
        Some(Value::String(d)) if d.chars().count() > MAX_DESCRIPTION => {
            out.push(Finding::refused(
                "description",
                format!(
                    "{} characters; at most {MAX_DESCRIPTION}",
                    d.chars().count()
                ),
            ));
        }
        Some(Value::String(_)) => {}
        Some(_) => out.push(Finding::refused("description", "must be text")),
        None => out.push(Finding::refused("description", "required")),
    }
}

/// The optional text keys: `license`, `compatibility` (not too long),
/// `allowed-tools`.
fn check_texts(map: &serde_json::Map<String, Value>, out: &mut Vec<Finding>) {
    match map.get("license") {
        None | Some(Value::String(_)) => {}
        Some(_) => out.push(Finding::refused("license", "must be text")),
    }
    match map.get("compatibility") {
        Some(Value::String(c)) if c.chars().count() > MAX_COMPATIBILITY => {
            out.push(Finding::refused(
                "compatibility",
                format!(
                    "{} characters; at most {MAX_COMPATIBILITY}",
                    c.chars().count()
                ),
            ));
        }
        None | Some(Value::String(_)) => {}
        Some(_) => out.push(Finding::refused("compatibility", "must be text")),
    }
    match map.get("allowed-tools") {
        None | Some(Value::String(_)) => {}
        Some(_) => out.push(Finding::refused(
            "allowed-tools",
            "must be text (tool names separated by spaces)",
        )),
    }
}

/// `metadata`: a map of keys to strings.
fn check_metadata(map: &serde_json::Map<String, Value>, out: &mut Vec<Finding>) {
    match map.get("metadata") {
        None => {}
        Some(Value::Object(entries)) => {
            // OpenClaw's own skills nest theirs (`metadata.openclaw`), and
            // the agents load them: advice, not a refusal.
            for (key, value) in entries {
                if !value.is_string() {
                    out.push(Finding::advice(
                        "metadata",
                        format!("{key}: not text (the spec's metadata maps keys to strings; an agent may ignore it)"),
                    ));
                }
            }
        }
        Some(_) => out.push(Finding::refused(
            "metadata",
            "must be a map of keys to strings",
        )),
    }
}

/// The body: advice when it is empty, or longer than the spec advises.
fn check_body(body: &str, out: &mut Vec<Finding>) {
    if body.trim().is_empty() {
        out.push(Finding::advice("body", "empty: nothing to load when used"));
    }
    let lines = body.lines().count();
    if lines > ADVISED_BODY_LINES {
        out.push(Finding::advice(
            "body",
            format!("{lines} lines; the spec advises under {ADVISED_BODY_LINES} (move detail to references/)"),
        ));
    }
    // About four characters a token in English prose.
    let tokens = body.chars().count().div_ceil(4);
    if tokens > ADVISED_BODY_TOKENS {
        out.push(Finding::advice(
            "body",
            format!("about {tokens} tokens; the spec advises under {ADVISED_BODY_TOKENS} (move detail to references/)"),
        ));
    }
}

/// Why `name` breaks the spec's rule, if it does: 1-64 lowercase letters,
/// digits and hyphens, no hyphen first, last or twice in a row.
fn bad_name(name: &str) -> Option<String> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Some(format!("1-{MAX_NAME} characters"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Some("only lowercase letters, digits and hyphens".into());
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Some("no hyphen first or last".into());
    }
    if name.contains("--") {
        return Some("no two hyphens in a row".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(findings: &[Finding]) -> Vec<(&str, Severity)> {
        findings
            .iter()
            .map(|f| (f.field.as_str(), f.severity))
            .collect()
    }

    #[test]
    fn a_spec_skill_passes() {
        let text = "---\nname: pdf-tools\ndescription: Fill PDF forms.\nlicense: MIT\ncompatibility: needs python3\nallowed-tools: Bash Read\nmetadata:\n  author: me\n  version: \"1.0\"\n---\n# PDF\n\nUse pdftk.\n";
        assert_eq!(check(text, Some("pdf-tools")), vec![]);
    }

    #[test]
    fn what_an_agent_refuses_is_named() {
        let text = "---\nname: PDF--Tools\ndescription: Fill forms.\ncategory: general\ntags: [a, b]\nmetadata:\n  version: 1\n---\nBody.\n";
        let found = check(text, Some("pdf"));
        use Severity::Refused;
        assert_eq!(
            fields(&found),
            vec![
                ("name", Refused),
                ("name", Refused),
                ("metadata", Severity::Advice),
                ("category", Refused),
                ("tags", Refused),
            ],
            "{found:#?}"
        );
        assert!(refused(&found));
        assert!(found[3].message.contains("move it under `metadata`"));
        for name in ["-a", "a-", "a--b", "A", &"a".repeat(65)] {
            assert!(bad_name(name).is_some(), "{name}");
        }
        assert_eq!(bad_name("git-rebase-2"), None);
    }

    #[test]
    fn limits_and_missing_fields() {
        let long = "d".repeat(MAX_DESCRIPTION + 1);
        let text = format!(
            "---\nname: x\ndescription: {long}\ncompatibility: {}\n---\nB\n",
            "c".repeat(501)
        );
        let found = check(&text, None);
        assert_eq!(
            fields(&found),
            vec![
                ("description", Severity::Refused),
                ("compatibility", Severity::Refused)
            ]
        );
        let found = check("---\nlicense: MIT\n---\nB\n", None);
        assert_eq!(
            fields(&found),
            vec![
                ("name", Severity::Refused),
                ("description", Severity::Refused)
            ]
        );
        assert_eq!(
            fields(&check("no frontmatter", None)),
            vec![("frontmatter", Severity::Refused)]
        );
        // A long body is loaded, with advice.
        let body = "line\n".repeat(600);
        let found = check(&format!("---\nname: x\ndescription: D\n---\n{body}"), None);
        assert_eq!(fields(&found), vec![("body", Severity::Advice)]);
        assert!(!refused(&found));
    }
}
