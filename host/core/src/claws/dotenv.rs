//! `.env` files edited line by line: the named keys change in place, every
//! other line (comments, blank lines, other keys, their order) is kept.

use std::path::Path;

use anyhow::Result;

use super::text_of;

/// Sets `vars` in the `.env` text `current`; `None` when nothing changes.
pub fn set(current: Option<&[u8]>, vars: &[(&str, &str)], path: &Path) -> Result<Option<Vec<u8>>> {
    let text = text_of(current, path)?.unwrap_or_default();
    let out = set_text(&text, vars);
    if current.is_some() && out == text {
        return Ok(None);
    }
    Ok(Some(out.into_bytes()))
}

pub fn set_text(text: &str, vars: &[(&str, &str)]) -> String {
    let eol = if text.contains("\r\n") { "\r\n" } else { "\n" };
    let mut seen = vec![false; vars.len()];
    let mut out = String::with_capacity(text.len() + 128);
    for line in text.split_inclusive('\n') {
        let (body, ending) = match line.strip_suffix("\r\n") {
            Some(b) => (b, "\r\n"),
            None => match line.strip_suffix('\n') {
                Some(b) => (b, "\n"),
                None => (line, ""),
            },
        };
        match parse(body).and_then(|p| vars.iter().position(|(k, _)| *k == p.key).map(|i| (i, p))) {
            Some((i, p)) => {
                seen[i] = true;
                out.push_str(p.indent);
                out.push_str(p.export);
                out.push_str(vars[i].0);
                out.push('=');
                out.push_str(&quote(vars[i].1));
                out.push_str(p.comment);
                out.push_str(ending);
            }
            None => out.push_str(line),
        }
    }
    let missing: Vec<_> = vars
        .iter()
        .zip(&seen)
        .filter(|(_, s)| !**s)
        .map(|(v, _)| v)
        .collect();
    if !missing.is_empty() {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push_str(eol);
        }
        for (k, v) in missing {
            out.push_str(k);
            out.push('=');
            out.push_str(&quote(v));
            out.push_str(eol);
        }
    }
    out
}

struct Line<'a> {
    indent: &'a str,
    export: &'a str,
    key: &'a str,
    /// A ` # comment` after an unquoted value, kept.
    comment: &'a str,
}

/// `KEY=value`, `export KEY=value`; `None` for comments and other lines.
fn parse(body: &str) -> Option<Line<'_>> {
    let trimmed = body.trim_start();
    let indent = &body[..body.len() - trimmed.len()];
    if trimmed.starts_with('#') {
        return None;
    }
    let (export, rest) = match trimmed.strip_prefix("export ") {
        Some(r) => (&trimmed[..trimmed.len() - r.len()], r),
        None => ("", trimmed),
    };
    let eq = rest.find('=')?;
    let key = rest[..eq].trim();
    if key.is_empty()
        || !key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
    {
        return None;
    }
    let value = &rest[eq + 1..];
    let comment = match value.trim_start().chars().next() {
        Some('"' | '\'') => "",
        _ => value
            .find(" #")
            .map(|i| &value[value[..i].trim_end().len()..])
            .unwrap_or(""),
    };
    Some(Line {
        indent,
        export,
        key,
        comment,
    })
}

/// Bare when safe, else double-quoted with `\` and `"` escaped.
fn quote(value: &str) -> String {
    let bare = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:@+=,%~".contains(c));
    if bare {
        return value.to_string();
    }
    let escaped = value.replace('\\', "\\\\").replace('"', "\\\"");
    format!("\"{escaped}\"")
}

/// The value of `key`, unquoted, if the text sets it.
pub fn get(text: &str, key: &str) -> Option<String> {
    text.lines().rev().find_map(|line| {
        let p = parse(line.trim_end_matches('\r'))?;
        if p.key != key {
            return None;
        }
        let rest = line.split_once('=')?.1;
        let value = rest.strip_suffix(p.comment).unwrap_or(rest).trim();
        let unquoted = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .map(|v| v.replace("\\\"", "\"").replace("\\\\", "\\"))
            .or_else(|| {
                value
                    .strip_prefix('\'')
                    .and_then(|v| v.strip_suffix('\''))
                    .map(str::to_string)
            })
            .unwrap_or_else(|| value.to_string());
        Some(unquoted)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn keys_change_in_place_and_everything_else_stays() {
        let text = "# IronClaw\nLLM_BACKEND=nearai   # was the default\n\nexport LLM_MODEL='old'\nDATABASE_URL=postgres://x\n";
        let out = set_text(
            text,
            &[
                ("LLM_BACKEND", "openai_compatible"),
                ("LLM_MODEL", "m 1"),
                ("LLM_API_KEY", "k"),
            ],
        );
        assert_eq!(
            out,
            "# IronClaw\nLLM_BACKEND=openai_compatible   # was the default\n\nexport LLM_MODEL=\"m 1\"\nDATABASE_URL=postgres://x\nLLM_API_KEY=k\n"
        );
        assert_eq!(get(&out, "LLM_MODEL").as_deref(), Some("m 1"));
        assert_eq!(
            get(&out, "LLM_BACKEND").as_deref(),
            Some("openai_compatible")
        );
        // A second pass changes nothing.
        assert_eq!(
            set_text(
                &out,
                &[
                    ("LLM_BACKEND", "openai_compatible"),
                    ("LLM_MODEL", "m 1"),
                    ("LLM_API_KEY", "k")
                ]
            ),
            out
        );
    }

    #[test]
    fn a_file_without_a_final_newline_and_crlf_endings_keeps_them() {
        let out = set_text("A=1\r\nB=2", &[("B", "3"), ("C", "4")]);
        assert_eq!(out, "A=1\r\nB=3\r\nC=4\r\n");
        let out = set_text("# only a comment", &[("C", "4")]);
        assert_eq!(out, "# only a comment\nC=4\n");
        assert_eq!(set_text("", &[("C", "")]), "C=\"\"\n");
    }
}
