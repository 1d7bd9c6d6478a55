//! The judge's and the evolver's model: any OpenAI-compatible
//! `/chat/completions`, called off the serving path, with retries that
//! respect rate limits (429 and its `Retry-After`), 5xx and timeouts, all
//! within one deadline per call.

use std::time::Duration;

use axum::http::HeaderMap;
use serde_json::{Value, json};

use crate::config::{ApiFormat, Config};
use crate::http::{Backoff, ClientSpec, Purpose, TryFailed};

/// A versioned prompt from `host/core/prompts/`: a system part and a user part,
/// split by a `<!-- user -->` line, with `{{name}}` placeholders.
pub struct Prompt {
    /// The file's name without `.md`, stored with every result.
    pub version: &'static str,
    text: &'static str,
}

impl Prompt {
    pub const fn new(version: &'static str, text: &'static str) -> Self {
        Self { version, text }
    }

    /// The chat messages, placeholders filled in.
    pub fn messages(&self, values: &[(&str, &str)]) -> Vec<Value> {
        let (system, user) = self
            .text
            .split_once("<!-- user -->")
            .unwrap_or(("", self.text));
        let mut messages = Vec::with_capacity(2);
        if !system.trim().is_empty() {
            messages.push(json!({ "role": "system", "content": fill(system.trim(), values) }));
        }
        messages.push(json!({ "role": "user", "content": fill(user.trim(), values) }));
        messages
    }
}

/// `{{key}}` → its value, in one pass (so a value that contains `{{…}}` is
/// never expanded again); unknown keys stay as they are.
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + 1024);
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            break;
        };
        match values.iter().find(|(k, _)| *k == &after[..end]) {
            Some((_, v)) => out.push_str(v),
            None => out.push_str(&rest[start..start + end + 4]),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

/// Where a learning model is and how to reach it.
#[derive(Clone)]
pub struct ChatModel {
    client: reqwest::Client,
    url: String,
    pub model: String,
    /// Its key in its API's convention, and the content type.
    headers: HeaderMap,
    /// One call, retries included.
    pub deadline: Duration,
    /// Anthropic Messages when the model is the main `llm` and that speaks
    /// it (`llm.api_format: anthropic`); else chat completions.
    anthropic: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("{model} at {url}: {reason}")]
    Failed {
        model: String,
        url: String,
        reason: crate::http::GaveUp,
    },
}

/// Retries wait 0.5 s, doubled each time up to 30 s (or the server's
/// `Retry-After`).
const BACKOFF: Backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));

impl ChatModel {
    /// The judge (`rl.prm_*`) or the evolver (`rl.evolver_*`), each key
    /// falling back to the main `llm` (whose base is `upstream_base`).
    /// `None` when no model name can be found.
    pub fn from_config(
        config: &Config,
        upstream_base: &str,
        role: Role,
    ) -> anyhow::Result<Option<Self>> {
        let rl = &config.rl;
        let (base, model, key) = match role {
            Role::Judge => (&rl.prm_url, &rl.prm_model, &rl.prm_api_key),
            Role::Evolver => (&rl.evolver_api_base, &rl.evolver_model, &rl.evolver_api_key),
        };
        let own_base = Some(base.trim()).filter(|b| !b.is_empty());
        let anthropic =
            own_base.is_none() && config.llm.api_format == crate::config::ApiFormat::Anthropic;
        let base = own_base.unwrap_or(upstream_base);
        let model = Some(model.trim())
            .filter(|m| !m.is_empty())
            .unwrap_or(config.llm.model_id.trim());
        if model.is_empty() || base.is_empty() {
            return Ok(None);
        }
        let (key, what) = match key.as_deref().filter(|k| !k.is_empty()) {
            Some(own) => (Some(own), role.key_setting()),
            None => (config.llm.api_key.as_deref(), "llm.api_key"),
        };
        let format = if anthropic {
            ApiFormat::Anthropic
        } else {
            ApiFormat::Openai
        };
        let headers = crate::http::json_request_headers(format, key, what)?;
        let url = format!(
            "{}/{}",
            base.trim_end_matches('/'),
            if anthropic {
                "messages"
            } else {
                "chat/completions"
            }
        );
        let client = ClientSpec::new(Purpose::Learning)
            .connect_timeout(config.proxy.timeouts.connect.get())
            .only_calls([url.as_str()])
            .build()?;
        Ok(Some(Self {
            client,
            url,
            model: model.to_string(),
            headers,
            deadline: config.learning.llm_timeout.get(),
            anthropic,
        }))
    }

    /// The reply's text. Retries 429, 5xx, timeouts and connection errors
    /// with backoff until the deadline; other errors fail at once.
    pub async fn complete(
        &self,
        messages: &[Value],
        temperature: f32,
        max_tokens: u32,
    ) -> Result<String, LlmError> {
        let body = json!({
            "model": self.model,
            "messages": messages,
            "temperature": temperature,
            "max_tokens": max_tokens,
            "stream": false,
        });
        let what = format!("learning model {}", self.model);
        crate::http::until_deadline(self.deadline, BACKOFF, &what, |left| {
            self.attempt(&body, left)
        })
        .await
        .map_err(|reason| self.error(reason))
    }

    fn error(&self, reason: crate::http::GaveUp) -> LlmError {
        LlmError::Failed {
            model: self.model.clone(),
            url: self.url.clone(),
            reason,
        }
    }

    async fn attempt(&self, body: &Value, left: Duration) -> Result<String, TryFailed> {
        let body = if self.anthropic {
            metaclaw_wire::request::anthropic::from_chat(body)
                .map_err(|e| TryFailed::Fatal(e.to_string()))?
        } else {
            body.clone()
        };
        let response = self
            .client
            .post(&self.url)
            .headers(self.headers.clone())
            .body(body.to_string())
            .timeout(left)
            .send()
            .await
            .map_err(|e| TryFailed::unanswered(&e))?;
        let (_, text) = crate::http::answer_text(response, |t| clip(t, 300)).await?;
        let reply: Value = serde_json::from_str(&text).map_err(|_| {
            TryFailed::Fatal(format!("the reply is not JSON: {}", clip(&text, 200)))
        })?;
        let reply = if self.anthropic {
            metaclaw_wire::response::anthropic::to_chat(&reply)
        } else {
            reply
        };
        metaclaw_wire::recorded::Completion::read(&reply)
            .message()
            .and_then(|m| m.content.as_str())
            .map(str::to_string)
            .ok_or_else(|| {
                TryFailed::Fatal(format!(
                    "the reply has no choices[0].message.content: {}",
                    clip(&text, 200)
                ))
            })
    }
}

#[derive(Debug, Clone, Copy)]
pub enum Role {
    Judge,
    Evolver,
}

impl Role {
    /// The setting that holds this role's own key.
    fn key_setting(self) -> &'static str {
        match self {
            Self::Judge => "rl.prm_api_key",
            Self::Evolver => "rl.evolver_api_key",
        }
    }
}

/// At most `max` characters, on one line when `max` is small.
pub fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(max).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_fill_placeholders_once() {
        let p = Prompt::new(
            "t-v1",
            "Be {{how}}.\n<!-- user -->\nA: {{a}}\nB: {{b}} {{missing}}",
        );
        let m = p.messages(&[("a", "{{b}}"), ("b", "two"), ("how", "brief")]);
        assert_eq!(m[0]["content"], "Be brief.");
        assert_eq!(m[1]["content"], "A: {{b}}\nB: two {{missing}}");
    }

    #[test]
    fn the_shipped_prompts_have_their_placeholders() {
        let judge = super::super::judge::PROMPT.messages(&[]);
        let text = judge[1]["content"].as_str().unwrap();
        for key in ["{{conversation}}", "{{answer}}", "{{next_state}}"] {
            assert!(text.contains(key), "{key}");
        }
        assert!(judge[0]["content"].as_str().unwrap().contains("Score:"));
        let evolver = super::super::evolve::PROMPT.messages(&[]);
        let text = format!("{}{}", evolver[0]["content"], evolver[1]["content"]);
        for key in [
            "{{skills}}",
            "{{judged}}",
            "{{transcript}}",
            "{{max_drafts}}",
        ] {
            assert!(text.contains(key), "{key}");
        }
    }
}
