//! `destructive-command-guard`: an executable skill. It applies when the
//! user's request or the recent conversation contains a command that
//! destroys data or history (`rm -rf`, `git push --force`, `DROP TABLE`, …)
//! and renders instructions that quote those very commands, something a
//! static SKILL.md cannot do.

use metaclaw_plugin_sdk::skill::{Guest, Metadata, PluginGuest, TurnContext, metadata};

/// (pattern, what it destroys). Matched case-insensitively on whole text.
const PATTERNS: &[(&str, &str)] = &[
    (
        "rm -rf",
        "deletes files and folders recursively, with no undo",
    ),
    (
        "rm -fr",
        "deletes files and folders recursively, with no undo",
    ),
    (
        "git push --force",
        "rewrites the remote branch; others lose commits",
    ),
    (
        "git push -f",
        "rewrites the remote branch; others lose commits",
    ),
    ("git reset --hard", "throws away uncommitted work"),
    ("git clean -fd", "deletes untracked files"),
    ("drop table", "deletes a table and all its rows"),
    ("drop database", "deletes a whole database"),
    ("truncate table", "deletes every row of a table"),
    ("mkfs", "formats a file system"),
    ("dd if=", "overwrites a disk or file byte by byte"),
    ("chmod -r 777", "opens every file to everyone"),
    ("kubectl delete", "deletes cluster resources"),
    ("terraform destroy", "destroys provisioned infrastructure"),
];

pub struct Guard;

/// The destructive commands found in the turn, with what each destroys.
pub fn found(context: &TurnContext) -> Vec<(String, &'static str)> {
    let mut texts: Vec<&str> = vec![context.query.as_str()];
    texts.extend(
        context
            .messages
            .iter()
            .rev()
            .take(4)
            .map(|m| m.content.as_str()),
    );
    let mut out: Vec<(String, &'static str)> = Vec::new();
    for text in texts {
        let lower = text.to_lowercase();
        for (pattern, harm) in PATTERNS {
            if let Some(at) = lower.find(pattern) {
                // Quote the command as written, up to where it ends.
                let rest = &text[at..];
                let end = ["\n", "&&", "||", ";", "|", " and ", " then "]
                    .iter()
                    .filter_map(|sep| rest.find(sep))
                    .min()
                    .unwrap_or(rest.len());
                let quoted: String = rest[..end].chars().take(120).collect();
                if !out
                    .iter()
                    .any(|(q, _)| q.to_lowercase().starts_with(pattern))
                {
                    out.push((quoted.trim().to_string(), harm));
                }
            }
        }
    }
    out
}

impl PluginGuest for Guard {
    fn metadata() -> Metadata {
        metadata(
            "destructive-command-guard",
            env!("CARGO_PKG_VERSION"),
            "Warns before commands that destroy data or history, quoting the command",
        )
    }
}

impl Guest for Guard {
    fn applies(context: TurnContext) -> f32 {
        if found(&context).is_empty() { 0.0 } else { 0.9 }
    }

    fn render(context: TurnContext) -> String {
        let mut out = String::from("This request involves commands that cannot be undone:\n");
        for (command, harm) in found(&context) {
            out.push_str(&format!("- `{command}`: {harm}.\n"));
        }
        out.push_str(
            "\nBefore running any of them: say exactly what will be destroyed, make a backup or \
             confirm one exists (a commit, a copy, a snapshot), prefer the narrowest form (a path \
             instead of a glob, `--force-with-lease` instead of `--force`), and get the user's \
             explicit go-ahead. Never run them as a side effect of another task.",
        );
        out
    }
}

#[cfg(target_arch = "wasm32")]
metaclaw_plugin_sdk::skill::export_skill!(Guard);

#[cfg(test)]
mod tests {
    use super::*;

    fn context(query: &str) -> TurnContext {
        TurnContext {
            session_id: String::new(),
            turn_type: "main".into(),
            model: String::new(),
            system_prompt: String::new(),
            messages: Vec::new(),
            query: query.into(),
        }
    }

    #[test]
    fn quotes_the_commands_it_finds() {
        let c = context("clean up: run rm -rf ./build/* and then git push --force origin main");
        assert_eq!(<Guard as Guest>::applies(c.clone()), 0.9);
        let text = <Guard as Guest>::render(c);
        assert!(
            text.contains("- `rm -rf ./build/*`: deletes files"),
            "{text}"
        );
        assert!(
            text.contains("- `git push --force origin main`: rewrites"),
            "{text}"
        );
    }

    #[test]
    fn ordinary_requests_do_not_apply() {
        assert_eq!(
            <Guard as Guest>::applies(context("list the files in src")),
            0.0
        );
    }
}
