//! On-policy distillation (`opd`): a teacher model's logprobs of the very
//! tokens the student sampled, turned into a per-token advantage
//! `opd.kl_penalty_coef · (log p_teacher − log p_student)` on the sampled
//! tokens (the negative of a per-token reverse-KL estimate: tokens the
//! teacher finds likelier than the student did are pushed up). It is added
//! to every trained sample whether or not the judge scored the turn.
//!
//! The teacher is any OpenAI-compatible `/v1/completions` server (vLLM,
//! SGLang, …) asked to echo the prompt with logprobs: the sequence is sent
//! as token ids, so both sides must share a tokenizer. [`Teacher::check`]
//! makes sure before anything trains: the teacher echoes a probe string
//! and its tokens must be the student tokenizer's, piece for piece.

use std::collections::HashMap;
use std::time::Duration;

use metaclaw_wire::recorded::{each, lenient};
use metaclaw_wire::{Lenient, Obj};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::OpdConfig;
use crate::http::{Backoff, TryFailed};

use super::batch::{Chains, sibling_key};

/// How long one teacher call may take, retries included.
const DEADLINE: Duration = Duration::from_secs(300);
const BACKOFF: (Duration, Duration) = (Duration::from_millis(500), Duration::from_secs(10));
/// Text whose tokenisation differs between tokenizers: words, numbers,
/// spaces, punctuation and code.
const PROBE: &str = "Distillation probe: the teacher's 12 tokens, 3.5 ways\n\tfn main() { println!(\"ok\"); } // done";

/// The teacher, as configured.
#[derive(Clone)]
pub struct Teacher {
    client: reqwest::Client,
    url: String,
    model: String,
    api_key: Option<String>,
    coef: f64,
}

/// The student's tokenizer failed (its words).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TokenizerFailed(pub String);

/// The student's tokenizer, as the check needs it.
pub trait Tokenizer {
    fn encode(&self, text: &str) -> Result<Vec<i32>, TokenizerFailed>;
    fn decode_one(&self, id: i32) -> Result<String, TokenizerFailed>;
}

impl Tokenizer for metaclaw_chat::render::Renderer {
    fn encode(&self, text: &str) -> Result<Vec<i32>, TokenizerFailed> {
        metaclaw_chat::render::Renderer::encode(self, text)
            .map_err(|e| TokenizerFailed(e.to_string()))
    }

    fn decode_one(&self, id: i32) -> Result<String, TokenizerFailed> {
        self.decode(&[id], false)
            .map_err(|e| TokenizerFailed(e.to_string()))
    }
}

/// A batch's distillation terms: per sampled token
/// `coef · (log p_teacher − log p_student)`, by turn (or sibling) key; and
/// over the tokens the teacher scored, how many and the mean of
/// log p_student − log p_teacher (a reverse-KL estimate).
#[derive(Debug, Default)]
pub struct Distilled {
    pub per_token: HashMap<String, Vec<f32>>,
    pub tokens: usize,
    pub reverse_kl: f64,
}

/// The echoed sequence: per token its text and its logprob under the
/// teacher (the first has none).
/// Why distillation's teacher cannot be used (or was not reached).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TeacherError {
    /// Its HTTP client cannot be built.
    #[error("{0}")]
    Client(String),
    /// The student's tokenizer failed on the probe.
    #[error("the student's tokenizer: {0}")]
    Tokenizer(TokenizerFailed),
    /// The teacher did not answer usefully: which teacher, and why.
    #[error("{teacher}: {why}")]
    Unanswered {
        teacher: String,
        why: crate::http::GaveUp,
    },
    #[error("{teacher}: {why}")]
    BadReply { teacher: String, why: BadEcho },
    #[error("the teacher echoed {echoed} tokens of a {sent}-token sequence")]
    ShortEcho { echoed: usize, sent: usize },
    #[error("the teacher's logprobs do not cover the answer")]
    Uncovered,
    #[error(
        "the teacher's tokenizer is not the student's: a probe string is {teacher} tokens for the teacher and {student} for the student (opd needs the same tokenizer: choose a teacher of the student's model family)"
    )]
    TokenCount { teacher: usize, student: usize },
    #[error(
        "the teacher's tokenizer is not the student's: token {at} of a probe string is {teacher:?} for the teacher and {student:?} for the student (opd needs the same tokenizer: choose a teacher of the student's model family)"
    )]
    TokenDiffers {
        at: usize,
        teacher: String,
        student: String,
    },
}

/// What is wrong with a completions reply as an echo with logprobs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BadEcho {
    #[error(
        "its reply has no choices[0].logprobs.tokens / token_logprobs (does it support echo with logprobs?)"
    )]
    NoLogprobs,
    #[error("its echoed tokens and logprobs do not match")]
    Mismatch,
}

struct Echo {
    tokens: Vec<String>,
    logprobs: Vec<Option<f64>>,
}

impl Teacher {
    pub fn new(config: &OpdConfig) -> Result<Self, TeacherError> {
        let base = config.teacher_url.trim().trim_end_matches('/');
        let url = match base.ends_with("/completions") {
            true => base.to_string(),
            false => format!("{base}/completions"),
        };
        let client = crate::http::ClientSpec::new(crate::http::Purpose::Training)
            .only_calls([url.as_str()])
            .build()
            .map_err(|e| TeacherError::Client(e.to_string()))?;
        Ok(Self {
            client,
            url,
            model: config.teacher_model.trim().to_string(),
            api_key: config.teacher_api_key.clone().filter(|k| !k.is_empty()),
            coef: config.kl_penalty_coef,
        })
    }

    /// What `status` calls the teacher.
    pub fn describe(&self) -> String {
        format!("{} at {}", self.model, self.url)
    }

    /// Whether the teacher tokenizes as the student does: the probe's
    /// tokens, echoed by the teacher, against the student's. An error
    /// says what differs (or why the teacher could not be asked within
    /// `within`, by default the teacher's usual retries).
    pub async fn check(
        &self,
        student: &dyn Tokenizer,
        within: Option<Duration>,
    ) -> Result<(), TeacherError> {
        let ids = student.encode(PROBE).map_err(TeacherError::Tokenizer)?;
        let echo = self.echo(json!(PROBE), within.unwrap_or(DEADLINE)).await?;
        compare(student, &ids, &echo.tokens)
    }

    /// Per sampled token of every sample in `chains` (by turn id; a
    /// sibling answer by [`sibling_key`]), the distillation term, with what
    /// they add up to. One teacher call per chain (the last turn's prompt
    /// holds every turn before it) and one per sibling answer.
    pub async fn terms(&self, chains: &Chains<'_>) -> Result<Distilled, TeacherError> {
        let mut out = Distilled::default();
        let mut gap = 0.0;
        let mut add = |key: String, teacher: &[Option<f64>], student: &[f32]| {
            let mut term = Vec::with_capacity(student.len());
            for (t, s) in teacher.iter().zip(student) {
                let d = t.map_or(0.0, |t| t - f64::from(*s));
                if t.is_some() {
                    gap -= d;
                    out.tokens += 1;
                }
                term.push((self.coef * d) as f32);
            }
            out.per_token.insert(key, term);
        };
        for chain in chains {
            let Some(last) = chain.last() else {
                continue;
            };
            let teacher = self.logprobs(&last.prompt_tokens, &last.tokens).await?;
            for sample in chain {
                let answer =
                    answer_span(&teacher, sample.prompt_tokens.len(), sample.tokens.len())?;
                add(sample.turn_id.clone(), answer, &sample.logprobs);
                // Group sampling: each sibling answer, on the same prompt.
                for sibling in sample.group.iter().flat_map(|g| &g.siblings) {
                    let teacher = self
                        .logprobs(&sample.prompt_tokens, &sibling.tokens)
                        .await?;
                    let answer =
                        answer_span(&teacher, sample.prompt_tokens.len(), sibling.tokens.len())?;
                    add(
                        sibling_key(&sample.turn_id, sibling.idx),
                        answer,
                        &sibling.logprobs,
                    );
                }
            }
        }
        out.reverse_kl = gap / out.tokens.max(1) as f64;
        Ok(out)
    }

    /// The teacher's logprob of each token of `prompt` followed by `answer`
    /// (the first has none). Servers that add a start token to a token-id
    /// prompt put it first: aligned on the end.
    async fn logprobs(
        &self,
        prompt: &[i32],
        answer: &[i32],
    ) -> Result<Vec<Option<f64>>, TeacherError> {
        let mut sequence = prompt.to_vec();
        sequence.extend_from_slice(answer);
        let mut echo = self.echo(json!(sequence), DEADLINE).await?;
        let extra =
            echo.logprobs
                .len()
                .checked_sub(sequence.len())
                .ok_or(TeacherError::ShortEcho {
                    echoed: echo.logprobs.len(),
                    sent: sequence.len(),
                })?;
        echo.logprobs.drain(..extra);
        Ok(echo.logprobs)
    }

    /// The teacher's echo of `prompt` (text or token ids) with logprobs,
    /// retried until `deadline`.
    async fn echo(&self, prompt: Value, deadline: Duration) -> Result<Echo, TeacherError> {
        // max_tokens 1: every server takes it (0 is not universal); the
        // generated token is not read.
        let body = json!({
            "model": self.model, "prompt": prompt, "max_tokens": 1, "temperature": 0,
            "echo": true, "logprobs": 1,
        });
        let what = format!("the OPD teacher {}", self.describe());
        let reply = crate::http::until_deadline(
            deadline,
            Backoff::new(BACKOFF.0, BACKOFF.1),
            &what,
            |left| self.attempt(&body, left),
        )
        .await
        .map_err(|why| TeacherError::Unanswered {
            teacher: what.clone(),
            why,
        })?;
        parse_echo(&reply).map_err(|why| TeacherError::BadReply { teacher: what, why })
    }

    async fn attempt(&self, body: &Value, left: Duration) -> Result<Value, TryFailed> {
        let mut request = self
            .client
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .timeout(left);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = request
            .send()
            .await
            .map_err(|e| TryFailed::unanswered(&e))?;
        let status = response.status();
        let headers = response.headers().clone();
        let text = response
            .text()
            .await
            .map_err(|e| TryFailed::unanswered(&e))?;
        if !status.is_success() {
            let start: String = text.chars().take(300).collect();
            return Err(TryFailed::status(status, &headers, &start));
        }
        serde_json::from_str(&text)
            .map_err(|e| TryFailed::Fatal(format!("not a completions reply ({e})")))
    }
}

/// The logprobs of an answer of `len` tokens after a prompt of `at`.
fn answer_span(
    teacher: &[Option<f64>],
    at: usize,
    len: usize,
) -> Result<&[Option<f64>], TeacherError> {
    teacher.get(at..at + len).ok_or(TeacherError::Uncovered)
}

/// A completions reply, as far as the echo goes (`choices[0].logprobs`):
/// a part absent or of another shape is none.
#[derive(Deserialize, Default)]
#[serde(default)]
struct EchoReply {
    #[serde(deserialize_with = "each")]
    choices: Vec<Obj<EchoChoice>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct EchoChoice {
    logprobs: Obj<EchoLogprobs>,
}

/// The lists, each item read on its own (a token that is not a string
/// reads as "", a logprob that is not a number as none).
#[derive(Deserialize, Default)]
#[serde(default)]
struct EchoLogprobs {
    #[serde(deserialize_with = "lenient")]
    tokens: Option<Vec<Lenient<String>>>,
    #[serde(deserialize_with = "lenient")]
    token_logprobs: Option<Vec<Lenient<f64>>>,
}

/// `choices[0].logprobs` of a completions reply (the prompt echoed, then
/// the one generated token, which is dropped).
fn parse_echo(reply: &Value) -> Result<Echo, BadEcho> {
    let logprobs = Obj::<EchoReply>::read(reply)
        .and_then(|r| r.choices.into_iter().next()?.0)
        .and_then(|c| c.logprobs.0)
        .unwrap_or_default();
    let (Some(tokens), Some(values)) = (logprobs.tokens, logprobs.token_logprobs) else {
        return Err(BadEcho::NoLogprobs);
    };
    if tokens.len() != values.len() || tokens.is_empty() {
        return Err(BadEcho::Mismatch);
    }
    let keep = tokens.len() - 1;
    Ok(Echo {
        tokens: tokens
            .into_iter()
            .take(keep)
            .map(|t| t.read().unwrap_or_default())
            .collect(),
        logprobs: values.into_iter().take(keep).map(Lenient::read).collect(),
    })
}

/// The teacher's echoed token texts against the student's ids for the
/// same text: the same count and the same piece at each position (a start
/// token the teacher adds in front is allowed).
fn compare(student: &dyn Tokenizer, ids: &[i32], teacher: &[String]) -> Result<(), TeacherError> {
    let mine: Vec<String> = ids
        .iter()
        .map(|&id| student.decode_one(id))
        .collect::<Result<_, _>>()
        .map_err(TeacherError::Tokenizer)?;
    let teacher = match teacher.len() == mine.len() + 1 {
        true => &teacher[1..],
        false => teacher,
    };
    if teacher.len() != mine.len() {
        return Err(TeacherError::TokenCount {
            teacher: teacher.len(),
            student: mine.len(),
        });
    }
    match mine.iter().zip(teacher).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(i) => Err(TeacherError::TokenDiffers {
            at: i,
            teacher: teacher[i].clone(),
            student: mine[i].clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// One token per character, id = the character's code.
    struct Chars;

    impl Tokenizer for Chars {
        fn encode(&self, text: &str) -> Result<Vec<i32>, TokenizerFailed> {
            Ok(text.chars().map(|c| c as i32).collect())
        }
        fn decode_one(&self, id: i32) -> Result<String, TokenizerFailed> {
            char::from_u32(id as u32)
                .map(String::from)
                .ok_or_else(|| TokenizerFailed("bad id".into()))
        }
    }

    fn pieces(text: &str) -> Vec<String> {
        text.chars().map(String::from).collect()
    }

    #[test]
    fn the_check_compares_piece_for_piece() {
        let ids = Chars.encode("ab c").unwrap();
        assert!(compare(&Chars, &ids, &pieces("ab c")).is_ok());
        // A start token in front is allowed.
        let mut with_bos = vec!["<s>".to_string()];
        with_bos.extend(pieces("ab c"));
        assert!(compare(&Chars, &ids, &with_bos).is_ok());
        let merged = vec!["ab".to_string(), " ".into(), "c".into()];
        let e = compare(&Chars, &ids, &merged).unwrap_err();
        assert_eq!(
            e,
            TeacherError::TokenCount {
                teacher: 3,
                student: 4
            }
        );
        assert!(
            e.to_string().contains("3 tokens for the teacher and 4"),
            "{e}"
        );
        let e = compare(&Chars, &ids, &pieces("ab d"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("token 3") && e.contains("\"d\""), "{e}");
    }

    #[test]
    fn an_echo_drops_the_generated_token() {
        let reply = json!({"choices": [{"logprobs": {
            "tokens": ["a", "b", "c", "x"],
            "token_logprobs": [null, -1.0, -0.5, -2.0],
        }}]});
        let echo = parse_echo(&reply).unwrap();
        assert_eq!(echo.tokens, ["a", "b", "c"]);
        assert_eq!(echo.logprobs, [None, Some(-1.0), Some(-0.5)]);
        assert!(parse_echo(&json!({"choices": [{"text": "x"}]})).is_err());
    }
}
