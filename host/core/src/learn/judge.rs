//! The process reward model: an LLM judges each main turn, seeing what
//! happened next (the tool results and the user's next message), by the
//! majority of `rl.prm_m` votes.

use std::sync::Arc;

use futures_util::future::join_all;

use super::finished::finished_turn;
use super::llm::{ChatModel, LlmError, Prompt, clip};
use crate::clock::now_ms;
use crate::plugins::types::Message;
use crate::redact::Redactor;
use crate::store::ScoringInput;
use crate::store::learning::{Judgment, Vote};

pub const PROMPT: Prompt = Prompt::new("judge-v1", include_str!("../../prompts/judge-v1.md"));

/// Messages of the conversation shown to the judge (the latest ones).
const CONVERSATION_MESSAGES: usize = 12;
/// Characters of one message shown to the judge.
const MESSAGE_CHARS: usize = 2_000;
const MAX_TOKENS: u32 = 1_024;
/// Added to the next state when the call that carried it failed upstream:
/// the judge must not read an outage as the user's silence or as this
/// answer's fault.
const NEXT_FAILED: &str = "\n[note] The model call after this answer failed upstream (an outage, not the user): nothing after the messages above is known, and that failure says nothing about this answer.";

pub struct Judge {
    pub model: ChatModel,
    pub votes: u32,
    pub temperature: f32,
    pub redactor: Arc<Redactor>,
}

impl Judge {
    /// Judges `turn`, whose successor in the session is `next` (none: the
    /// session's last turn, judged with what is known). `next_failed`: the
    /// successor's own call failed upstream; what it carried (tool results,
    /// the user's next message) is still this answer's next state, and the
    /// judge is told that nothing after it is known and the failure is not
    /// this answer's. Fails only when no vote could be had at all (the job
    /// is then retried later).
    pub async fn judge(
        &self,
        turn: &ScoringInput,
        next: Option<&ScoringInput>,
        next_failed: bool,
    ) -> Result<Judgment, LlmError> {
        let finished = finished_turn(turn, next);
        let evidence = match (
            finished.next_user_message.is_some(),
            finished.tool_results.is_empty(),
        ) {
            (true, false) => "both",
            (true, true) => "next-user-message",
            (false, false) => "tool-results",
            (false, true) => "none",
        };
        let conversation = self.conversation(&finished.request);
        let answer = self.render(&finished.response);
        let mut next_state = self.next_state(&finished.tool_results, &finished.next_user_message);
        if next_failed && next.is_some() {
            next_state.push_str(NEXT_FAILED);
        }
        let messages = PROMPT.messages(&[
            ("conversation", &conversation),
            ("answer", &answer),
            ("next_state", &next_state),
        ]);
        let calls = (0..self.votes.max(1))
            .map(|_| self.model.complete(&messages, self.temperature, MAX_TOKENS));
        let mut votes = Vec::new();
        let mut last_error = None;
        for reply in join_all(calls).await {
            match reply {
                Ok(text) => votes.push(parse_vote(&text)),
                Err(e) => last_error = Some(e),
            }
        }
        if votes.is_empty()
            && let Some(e) = last_error
        {
            return Err(e);
        }
        let value = majority(&votes);
        let rationale = votes
            .iter()
            .find(|v| v.score == Some(value) && !v.rationale.is_empty())
            .map(|v| v.rationale.clone())
            .unwrap_or_else(|| {
                if votes.iter().all(|v| v.score.is_none()) {
                    "no vote had a score".to_string()
                } else {
                    "the votes were split".to_string()
                }
            });
        Ok(Judgment {
            turn_id: turn.turn_id.clone(),
            value,
            votes,
            rationale,
            evidence: evidence.into(),
            model: self.model.model.clone(),
            prompt_version: PROMPT.version.into(),
            at_ms: now_ms(),
            answer_model: None,
        })
    }

    fn conversation(&self, request: &[Message]) -> String {
        let shown: Vec<&Message> = request.iter().filter(|m| m.role != "system").collect();
        let skip = shown.len().saturating_sub(CONVERSATION_MESSAGES);
        let mut out = String::new();
        if skip > 0 {
            out.push_str(&format!("[{skip} earlier messages not shown]\n"));
        }
        for m in &shown[skip..] {
            out.push_str(&self.render(m));
            out.push('\n');
        }
        if out.is_empty() {
            out.push_str("(empty)");
        }
        out
    }

    /// One message as `[role] text`, tool calls spelled out, secrets gone.
    fn render(&self, m: &Message) -> String {
        let mut text = format!("[{}] {}", m.role, clip(m.content.trim(), MESSAGE_CHARS));
        for call in &m.tool_calls {
            text.push_str(&format!(
                "\n[calls tool {}({})]",
                call.name,
                clip(&call.arguments, 500)
            ));
        }
        self.redactor.redact_str(&text)
    }

    fn next_state(&self, tool_results: &[Message], next_user: &Option<String>) -> String {
        let mut out = String::new();
        for result in tool_results {
            out.push_str(&self.render(result));
            out.push('\n');
        }
        if let Some(user) = next_user {
            out.push_str(&self.redactor.redact_str(&format!(
                "[user's next message] {}",
                clip(user.trim(), MESSAGE_CHARS)
            )));
        }
        if out.is_empty() {
            out.push_str("(nothing yet: this was the last turn of the session)");
        }
        out
    }
}

/// A vote from the judge's reply: its last `Score: N` (or `\boxed{N}`),
/// and its `Rationale:` line.
pub fn parse_vote(reply: &str) -> Vote {
    let mut score = None;
    for line in reply.lines() {
        let line = line.trim().trim_matches('*');
        let lower = line.to_ascii_lowercase();
        if let Some(rest) = lower.strip_prefix("score") {
            let rest = rest.trim_start_matches([':', ' ', '*', '=']);
            if let Some(n) = leading_score(rest) {
                score = Some(n);
            }
        }
    }
    if score.is_none()
        && let Some(at) = reply.rfind("\\boxed{")
    {
        score = leading_score(&reply[at + 7..]);
    }
    let rationale = reply
        .lines()
        .rev()
        .find_map(|l| {
            let l = l.trim().trim_matches('*');
            l.strip_prefix("Rationale:")
                .or_else(|| l.strip_prefix("rationale:"))
        })
        .map(|r| clip(r.trim(), 300))
        .unwrap_or_else(|| {
            let body: Vec<&str> = reply
                .lines()
                .filter(|l| !l.trim().to_ascii_lowercase().starts_with("score"))
                .collect();
            clip(body.join(" ").trim(), 300)
        });
    Vote { score, rationale }
}

fn leading_score(text: &str) -> Option<i8> {
    let text = text.trim_start();
    let (sign, digits) = match text.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, text.strip_prefix('+').unwrap_or(text)),
    };
    let n = digits.chars().next()?.to_digit(10)? as i8;
    // "10" is not a score.
    if digits.chars().nth(1).is_some_and(|c| c.is_ascii_digit()) || n > 1 {
        return None;
    }
    Some(sign * n)
}

/// The score most votes gave; a tie between the top scores, or no scored
/// vote, is 0.
pub fn majority(votes: &[Vote]) -> i8 {
    let mut counts = [0usize; 3];
    for v in votes {
        if let Some(s) = v.score {
            counts[(s + 1) as usize] += 1;
        }
    }
    let top = counts.iter().copied().max().unwrap_or(0);
    if top == 0 {
        return 0;
    }
    let leaders: Vec<usize> = (0..3).filter(|&i| counts[i] == top).collect();
    if leaders.len() > 1 {
        0
    } else {
        leaders[0] as i8 - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vote(score: Option<i8>) -> Vote {
        Vote {
            score,
            rationale: String::new(),
        }
    }

    #[test]
    fn votes_are_read_from_the_last_score_line() {
        let v = parse_vote("The user corrected it.\nRationale: the sum was wrong\nScore: -1");
        assert_eq!(v.score, Some(-1));
        assert_eq!(v.rationale, "the sum was wrong");
        assert_eq!(parse_vote("Score: 1\n...\n**Score:** 0").score, Some(0));
        assert_eq!(parse_vote("so \\boxed{1}").score, Some(1));
        assert_eq!(parse_vote("Score: +1").score, Some(1));
        assert_eq!(parse_vote("Score: 10").score, None);
        assert_eq!(parse_vote("Score: 2").score, None);
        assert_eq!(parse_vote("I cannot decide.").score, None);
        assert_eq!(parse_vote("I cannot decide.").rationale, "I cannot decide.");
    }

    #[test]
    fn the_majority_wins_and_ties_are_zero() {
        let m = |s: &[Option<i8>]| majority(&s.iter().map(|&x| vote(x)).collect::<Vec<_>>());
        assert_eq!(m(&[Some(-1), Some(-1), Some(1)]), -1);
        assert_eq!(m(&[Some(1), Some(1), Some(0)]), 1);
        assert_eq!(m(&[Some(1), Some(-1), Some(0)]), 0, "three-way tie");
        assert_eq!(m(&[Some(1), Some(-1)]), 0, "two-way tie");
        assert_eq!(m(&[Some(-1), None, None]), -1, "one valid vote");
        assert_eq!(m(&[None, None, None]), 0);
        assert_eq!(m(&[]), 0);
    }
}
