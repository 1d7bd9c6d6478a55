//! Where the bench's agent sends its model calls: the model's own API
//! (`direct`, OpenAI chat completions or Anthropic Messages) or a metaclaw
//! started for the arm (always chat completions; metaclaw translates).
//! Transient failures (429, 5xx, a dropped connection) are retried with
//! backoff within the call's deadline, as learning's model calls are.

use std::time::Duration;

use anyhow::Result;
use axum::http::HeaderMap;
use serde_json::Value;

use crate::rollout::agent::Completion;
use metaclaw_core::config::ApiFormat;
use metaclaw_core::http::{Backoff, ClientSpec, Purpose, TryFailed};

/// One model call, retries included.
const DEADLINE: Duration = Duration::from_secs(600);
const BACKOFF: Backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));

/// A model call that got no usable answer: where, and why.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{url}: {why}")]
pub struct ModelFailed {
    pub url: String,
    pub why: metaclaw_core::http::GaveUp,
}

/// An API the agent can call.
#[derive(Clone)]
pub struct Endpoint {
    client: reqwest::Client,
    url: String,
    format: ApiFormat,
    headers: HeaderMap,
}

/// What one call returned.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The assistant message, in chat-completions form.
    pub message: Value,
    /// The skills metaclaw injected (`x-metaclaw-skills`), in its order.
    pub skills: Vec<String>,
    /// The reply's `usage`: (prompt, completion) tokens, 0 when not said.
    pub tokens: (u64, u64),
    /// Who answered, when metaclaw says (`x-metaclaw-served-by`: the
    /// student in rl).
    pub served_by: Option<String>,
}

impl Endpoint {
    /// `base` is the API's base URL (`…/v1`); `key` is sent in the
    /// format's convention.
    pub fn new(base: &str, format: ApiFormat, key: Option<&str>, what: &str) -> Result<Self> {
        let path = match format {
            ApiFormat::Openai => "chat/completions",
            ApiFormat::Anthropic => "messages",
        };
        let url = format!("{}/{path}", base.trim_end_matches('/'));
        let headers = metaclaw_core::http::json_request_headers(format, key, what)?;
        let client = ClientSpec::new(Purpose::Upstream)
            .only_calls([url.as_str()])
            .build()
            .map_err(|e| anyhow::anyhow!("{url}: {e}"))?;
        Ok(Self {
            client,
            url,
            format,
            headers,
        })
    }

    /// One chat-completions request (`body`), answered.
    pub async fn complete(
        &self,
        body: &Value,
        session: Option<&str>,
    ) -> Result<Reply, ModelFailed> {
        let what = format!("model call to {}", self.url);
        metaclaw_core::http::until_deadline(DEADLINE, BACKOFF, &what, |left| {
            self.attempt(body, session, left)
        })
        .await
        .map_err(|why| ModelFailed {
            url: self.url.clone(),
            why,
        })
    }

    async fn attempt(
        &self,
        body: &Value,
        session: Option<&str>,
        left: Duration,
    ) -> Result<Reply, TryFailed> {
        let body = match self.format {
            ApiFormat::Openai => body.clone(),
            ApiFormat::Anthropic => metaclaw_wire::request::anthropic::from_chat(body)
                .map_err(|e| TryFailed::Fatal(e.to_string()))?,
        };
        let mut request = self
            .client
            .post(&self.url)
            .headers(self.headers.clone())
            .body(body.to_string())
            .timeout(left);
        if let Some(session) = session {
            request = request.header("x-session-id", session);
        }
        let response = request
            .send()
            .await
            .map_err(|e| TryFailed::unanswered(&e))?;
        let (headers, text) =
            metaclaw_core::http::answer_text(response, super::command::clip).await?;
        let reply: Value = serde_json::from_str(&text).map_err(|_| {
            TryFailed::Fatal(format!(
                "the reply is not JSON: {}",
                super::command::clip(&text)
            ))
        })?;
        let reply = match self.format {
            ApiFormat::Openai => reply,
            ApiFormat::Anthropic => metaclaw_wire::response::anthropic::to_chat(&reply),
        };
        let reply = Completion::read(&reply);
        let tokens = (
            reply.usage.prompt_tokens.unwrap_or(0),
            reply.usage.completion_tokens.unwrap_or(0),
        );
        let Some(message) = reply.message() else {
            return Err(TryFailed::Fatal(format!(
                "the reply has no choices[0].message: {}",
                super::command::clip(&text)
            )));
        };
        let skills = headers
            .get("x-metaclaw-skills")
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let served_by = headers
            .get("x-metaclaw-served-by")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        Ok(Reply {
            message,
            skills,
            tokens,
            served_by,
        })
    }
}
