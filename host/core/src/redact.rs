//! Secret redaction: API keys, tokens, private keys and `password=`-style
//! assignments are replaced by `[REDACTED:<kind>]` before anything is stored
//! (and, later, before a transcript goes to an evolver LLM). The configured
//! keys themselves are redacted by value, whatever their shape.

use regex::Regex;
use serde_json::Value;

pub struct Redactor {
    patterns: Vec<(Regex, &'static str)>,
    /// `name = value` assignments: keep the name, hide the value.
    assignment: Option<Regex>,
    literals: Vec<String>,
}

const PATTERNS: &[(&str, &str)] = &[
    (
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY-----",
        "private_key",
    ),
    (r"\bsk-(?:ant-|or-|proj-)?[A-Za-z0-9_\-]{16,}", "api_key"),
    (r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", "aws_key"),
    (r"\bgh[pousr]_[A-Za-z0-9]{30,}\b", "github_token"),
    (r"\bgithub_pat_[A-Za-z0-9_]{30,}\b", "github_token"),
    (r"\bxox[abprs]-[A-Za-z0-9\-]{10,}", "slack_token"),
    (r"\bAIza[0-9A-Za-z_\-]{35}\b", "google_key"),
    (
        r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
        "jwt",
    ),
    (r"(?i)\bbearer\s+[A-Za-z0-9._~+/=\-]{16,}", "bearer"),
];

/// A name ending in a secret-ish word (`DB_PASSWORD`, `api-key`, `"token"`),
/// then `=` or `:`, then the value.
const ASSIGNMENT: &str = r#"(?i)([A-Za-z0-9_\-]*?(?:api[_-]?key|apikey|secret|access[_-]?token|auth[_-]?token|token|password|passwd)["']?\s*[:=]\s*["']?)([^\s"',;]{6,})"#;

impl Redactor {
    /// `literals`: secrets known by value (the configured API keys).
    pub fn new(literals: impl IntoIterator<Item = String>) -> Self {
        let patterns = PATTERNS
            .iter()
            .filter_map(|(re, kind)| Regex::new(re).ok().map(|r| (r, *kind)))
            .collect();
        let mut literals: Vec<String> = literals.into_iter().filter(|s| s.len() >= 8).collect();
        // Longest first, so a key that contains another is replaced whole.
        literals.sort_by_key(|s| std::cmp::Reverse(s.len()));
        Self {
            patterns,
            assignment: Regex::new(ASSIGNMENT).ok(),
            literals,
        }
    }

    pub fn redact_str(&self, text: &str) -> String {
        let mut out = text.to_string();
        for literal in &self.literals {
            if out.contains(literal.as_str()) {
                out = out.replace(literal.as_str(), "[REDACTED:configured_secret]");
            }
        }
        for (re, kind) in &self.patterns {
            if re.is_match(&out) {
                out = re
                    .replace_all(&out, format!("[REDACTED:{kind}]").as_str())
                    .into_owned();
            }
        }
        if let Some(re) = &self.assignment
            && re.is_match(&out)
        {
            out = re
                .replace_all(&out, |caps: &regex::Captures<'_>| {
                    let value = &caps[2];
                    if value.starts_with("[REDACTED") {
                        caps[0].to_string()
                    } else {
                        format!("{}[REDACTED:secret]", &caps[1])
                    }
                })
                .into_owned();
        }
        out
    }

    /// Redacts every string inside a JSON value, in place.
    pub fn redact_json(&self, value: &mut Value) {
        match value {
            Value::String(s) => {
                let redacted = self.redact_str(s);
                if redacted != *s {
                    *s = redacted;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_json(v)),
            Value::Object(map) => {
                for (key, v) in map.iter_mut() {
                    if is_secret_field(key) && v.is_string() {
                        *v = Value::String("[REDACTED:secret_field]".into());
                    } else {
                        self.redact_json(v);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Object keys whose string value is a credential whatever it looks like.
fn is_secret_field(key: &str) -> bool {
    matches!(
        key.to_ascii_lowercase().as_str(),
        "api_key"
            | "apikey"
            | "authorization"
            | "x-api-key"
            | "password"
            | "secret"
            | "access_token"
            | "refresh_token"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_key_shapes_are_redacted() {
        let r = Redactor::new([]);
        let text = "use sk-proj-abcdefghijklmnop1234 and AKIAABCDEFGHIJKLMNOP and ghp_abcdefghijklmnopqrstuvwxyz0123456789 \
                    with Authorization: Bearer abcdefghijklmnopqrstuv.wxyz";
        let out = r.redact_str(text);
        for secret in [
            "sk-proj-abcdefghijklmnop1234",
            "AKIAABCDEFGHIJKLMNOP",
            "ghp_abcdefghij",
            "abcdefghijklmnopqrstuv.wxyz",
        ] {
            assert!(!out.contains(secret), "{out}");
        }
        assert!(out.contains("[REDACTED:api_key]"), "{out}");
    }

    #[test]
    fn assignments_keep_the_name() {
        let r = Redactor::new([]);
        let out = r.redact_str("export DB_PASSWORD=hunter2hunter2; token: 'abcdef123456'");
        assert!(
            !out.contains("hunter2hunter2") && !out.contains("abcdef123456"),
            "{out}"
        );
        assert!(out.contains("PASSWORD=[REDACTED:secret]"), "{out}");
    }

    #[test]
    fn configured_secrets_are_redacted_by_value() {
        let r = Redactor::new(["my-odd-key-format-42".to_string(), "short".to_string()]);
        let out = r.redact_str("the key is my-odd-key-format-42, not short");
        assert_eq!(out, "the key is [REDACTED:configured_secret], not short");
    }

    #[test]
    fn json_strings_and_secret_fields_are_redacted() {
        let r = Redactor::new([]);
        let mut v = serde_json::json!({
            "messages": [{"role": "user", "content": "key sk-abcdefghijklmnopqrstuv"}],
            "api_key": "anything-at-all",
            "n": 3
        });
        r.redact_json(&mut v);
        assert_eq!(v["api_key"], "[REDACTED:secret_field]");
        assert_eq!(v["messages"][0]["content"], "key [REDACTED:api_key]");
        assert_eq!(v["n"], 3);
    }

    #[test]
    fn ordinary_text_is_untouched() {
        let r = Redactor::new([]);
        let text =
            "The token budget is 50000 and the password policy is documented in SECURITY.md.";
        assert_eq!(r.redact_str(text), text);
    }
}
