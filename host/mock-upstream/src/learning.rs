//! The dummy upstream's judge and evolver: deterministic stand-ins for the
//! models that learning calls, reading the prompts metaclaw sends
//! (`host/core/prompts/`) the way a real model would read them.

use serde_json::json;

/// What a user says when the answer was wrong.
const CORRECTIONS: &[&str] = &[
    "wrong",
    "incorrect",
    "not what i asked",
    "that's not",
    "that is not",
    "no,",
    "mistake",
    "didn't work",
];

const STOP_WORDS: &[&str] = &[
    "what", "the", "from", "is", "are", "and", "for", "you", "your", "how", "can", "with", "this",
    "that", "please", "about", "tell", "me", "to", "of", "a", "an", "in", "on", "it", "my",
];

/// The text after a `## heading` line, up to the next `## ` heading (of
/// a judge's or an evolver's prompt).
pub fn section<'a>(prompt: &'a str, heading: &str) -> &'a str {
    let Some(start) = prompt.find(&format!("## {heading}\n")) else {
        return "";
    };
    let rest = &prompt[start + heading.len() + 4..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    rest[..end].trim()
}

fn is_correction(text: &str) -> bool {
    let lower = text.to_lowercase();
    CORRECTIONS.iter().any(|c| lower.contains(c))
}

/// The judge's verdict from the "What happened next" section: a
/// correction or a tool error is -1, nothing yet is 0, anything else 1.
/// `split` gives the `vote`-th vote of a judge that cannot agree with
/// itself (1, -1, 0, 1, …).
pub fn judge_reply(prompt: &str, split: Option<u64>) -> String {
    if let Some(vote) = split {
        let score = [1, -1, 0][(vote % 3) as usize];
        return format!("Rationale: vote {vote} of a split judge\nScore: {score}");
    }
    let next = section(prompt, "What happened next");
    let (score, why) = if is_correction(next) {
        (-1, "the user corrected the answer")
    } else if next.contains("[tool]") && next.to_lowercase().contains("error") {
        (-1, "the tool call failed")
    } else if next.is_empty() || next.starts_with("(nothing yet") {
        (0, "nothing happened after the answer")
    } else {
        (1, "the user moved on")
    };
    format!("The next state decides it.\nRationale: {why}\nScore: {score}")
}

/// Which dummy evolver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evolver {
    /// A lesson and a near-copy of an existing skill.
    Plain,
    /// The same, with an email, a home path and a token planted.
    Leaky,
    /// A lesson and a revision (`updates`) of an existing skill.
    Revise,
    /// Nothing to learn: no draft at all.
    Nothing,
}

/// Skill drafts from the transcript: a lesson named after the first user
/// message's key words that quotes the user's correction (or last message),
/// plus a near-copy of the first existing skill listed, or with
/// [`Evolver::Revise`] a revision of it that adds the lesson. [`Evolver::Leaky`]
/// plants an email address, a home path and a token in the lesson.
pub fn evolver_reply(prompt: &str, kind: Evolver) -> String {
    if kind == Evolver::Nothing {
        return json!({ "skills": [] }).to_string();
    }
    let transcript = section(prompt, "Transcript");
    let users: Vec<&str> = transcript
        .lines()
        .filter_map(|l| l.strip_prefix("[user] "))
        .collect();
    let Some(task) = users.first() else {
        return json!({ "skills": [] }).to_string();
    };
    let lesson = users
        .iter()
        .rev()
        .find(|u| is_correction(u))
        .or(users.last())
        .copied()
        .unwrap_or(task);
    let words: Vec<String> = task
        .split(|c: char| !c.is_ascii_alphanumeric())
        .map(str::to_lowercase)
        .filter(|w| w.len() > 2 && !STOP_WORDS.contains(&w.as_str()))
        .take(3)
        .collect();
    let mut body = format!(
        "## Lesson\nA user said: \"{lesson}\".\n\n## Do instead\nCheck the facts asked about ({}) before answering, and say where they come from.\n\n## Anti-pattern\nAnswering from memory without checking.",
        words.join(", ")
    );
    if kind == Evolver::Leaky {
        body.push_str("\n\nAsk alice@acme-corp.io, see /home/alice/notes/facts.txt, and use token ghp_abcdefghijklmnopqrstuvwxyz0123456789.");
    }
    let mut drafts = vec![json!({
        "name": format!("lesson-{}", words.join("-")),
        "description": format!("When asked: {}", task.chars().take(150).collect::<String>()),
        "category": "common-mistakes",
        "tags": words,
        "body": body,
        "updates": null,
    })];
    if let Some((name, description)) = section(prompt, "Existing skills")
        .lines()
        .filter_map(|l| l.strip_prefix("- ")?.split_once(": "))
        .next()
    {
        drafts.push(match kind {
            Evolver::Revise => json!({
                "name": name,
                "description": description,
                "category": "general",
                "tags": [],
                "body": format!("{description}\n\n## Learned\nA user said: \"{lesson}\". Check such facts before answering."),
                "updates": name,
            }),
            Evolver::Plain | Evolver::Leaky | Evolver::Nothing => json!({
                "name": format!("{name}-again"),
                "description": description,
                "category": "general",
                "tags": [],
                "body": description,
                "updates": null,
            }),
        });
    }
    format!(
        "Here are the skills:\n```json\n{}\n```",
        json!({ "skills": drafts })
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_judge_reads_the_next_state() {
        let p = |next: &str| {
            format!(
                "## Conversation so far\n[user] 2+2?\n\n## The answer to judge\n[assistant] 5\n\n## What happened next\n{next}"
            )
        };
        assert!(
            judge_reply(&p("[user's next message] No, that's wrong: it is 4"), None)
                .ends_with("Score: -1")
        );
        assert!(judge_reply(&p("[tool] Error: ENOENT"), None).ends_with("Score: -1"));
        assert!(
            judge_reply(
                &p("(nothing yet: this was the last turn of the session)"),
                None
            )
            .ends_with("Score: 0")
        );
        assert!(
            judge_reply(&p("[user's next message] thanks, now the weather"), None)
                .ends_with("Score: 1")
        );
        assert!(judge_reply("", Some(1)).ends_with("Score: -1"));
    }

    #[test]
    fn the_evolver_drafts_a_lesson_and_a_near_copy() {
        let prompt = "## Existing skills\n- git-rebase: Rebase a branch onto main.\n\n## Judged turns\n- turn 1: judge -1\n\n## Transcript\n[user] What is the distance from the earth to the moon?\n[assistant] 1 km\n[user] No, that's wrong.";
        let reply = evolver_reply(prompt, Evolver::Plain);
        let json = &reply[reply.find('{').unwrap()..=reply.rfind('}').unwrap()];
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(v["skills"][0]["name"], "lesson-distance-earth-moon");
        assert!(
            v["skills"][0]["body"]
                .as_str()
                .unwrap()
                .contains("No, that's wrong.")
        );
        assert_eq!(v["skills"][1]["name"], "git-rebase-again");
        assert_eq!(v["skills"][1]["description"], "Rebase a branch onto main.");
        assert!(evolver_reply(prompt, Evolver::Leaky).contains("alice@acme-corp.io"));
        let reply = evolver_reply(prompt, Evolver::Revise);
        let json = &reply[reply.find('{').unwrap()..=reply.rfind('}').unwrap()];
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(v["skills"][1]["name"], "git-rebase");
        assert_eq!(v["skills"][1]["updates"], "git-rebase");
    }
}
