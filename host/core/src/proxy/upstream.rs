//! The upstream LLM API: one pooled HTTP client, and the rules for which
//! headers cross the proxy in each direction.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use bytes::Bytes;

use crate::config::{ApiFormat, LoadedConfig, Provider};
use crate::error::ApiError;
use crate::http::{Backoff, ClientSpec, Credential, Purpose};

/// Before the first fallback 200 ms, doubled for each next one, and never
/// more than 2 s (a 429's `Retry-After` included): a turn is waiting.
const FALLBACK_BACKOFF: Backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(2));

/// One upstream endpoint: the primary (`llm`) or a fallback.
#[derive(Clone)]
struct Target {
    /// e.g. `https://api.openai.com/v1`, no trailing slash.
    base: String,
    /// This endpoint's key.
    auth: Option<Credential>,
    /// The model to ask this endpoint for instead of the request's.
    model: Option<String>,
}

#[derive(Clone)]
pub struct Upstream {
    client: reqwest::Client,
    /// The primary's base URL, e.g. `https://api.openai.com/v1`.
    pub base: String,
    /// The primary first, then `llm.fallbacks` in order.
    targets: Vec<Target>,
    pub format: ApiFormat,
    /// Forward the client's own `Authorization` (no key configured here and
    /// the proxy has no token of its own, so it must be the upstream's).
    pass_client_auth: bool,
    extra_headers: Vec<(HeaderName, HeaderValue)>,
    pub default_model: Option<String>,
    pub force_model: bool,
    pub first_byte_timeout: Duration,
    pub between_chunks_timeout: Duration,
}

/// A response head, and which target gave it.
pub struct Sent {
    pub response: reqwest::Response,
    /// 0 for the primary, `i + 1` for `llm.fallbacks[i]`.
    pub target: usize,
    /// The model this target was asked for, when it replaced the request's.
    pub model: Option<String>,
}

/// Request headers that never go upstream: hop-by-hop ones, those the
/// client library sets per connection, the proxy's own credentials and
/// metaclaw's session controls.
const DROP_REQUEST_HEADERS: &[&str] = &[
    "host",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    "content-type",
    "accept-encoding",
    "authorization",
    "x-api-key",
    "cookie",
    "x-session-id",
    "x-session-done",
    "x-agent-id",
    "x-turn-type",
];

/// Response headers that never go back to the client.
const DROP_RESPONSE_HEADERS: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    "set-cookie",
];

impl Upstream {
    pub fn new(loaded: &LoadedConfig, base: String) -> anyhow::Result<Self> {
        let config = &loaded.config;
        let timeouts = &config.proxy.timeouts;
        let format = config.llm.api_format;
        let auth = Credential::new(format, config.llm.api_key.as_deref(), "llm.api_key")?;
        let mut targets = vec![Target {
            base: base.clone(),
            auth: auth.clone(),
            model: None,
        }];
        for (i, fallback) in config.llm.fallbacks.iter().enumerate() {
            targets.push(Target {
                base: fallback.api_base.trim().trim_end_matches('/').to_string(),
                auth: Credential::new(
                    format,
                    fallback.api_key.as_deref(),
                    &format!("llm.fallbacks[{i}].api_key"),
                )?,
                model: Some(fallback.model_id.trim().to_string()).filter(|m| !m.is_empty()),
            });
        }
        let client = ClientSpec::new(Purpose::Upstream)
            .connect_timeout(timeouts.connect.get())
            .only_calls(targets.iter().map(|t| t.base.as_str()))
            .build()?;
        let mut extra_headers = Vec::new();
        if config.llm.provider == Provider::Openrouter {
            // OpenRouter attributes traffic by these.
            let title = if config.openrouter.app_name.is_empty() {
                "metaclaw"
            } else {
                &config.openrouter.app_name
            };
            if let Ok(v) = HeaderValue::from_str(title) {
                extra_headers.push((HeaderName::from_static("x-title"), v));
            }
            extra_headers.push((
                HeaderName::from_static("http-referer"),
                HeaderValue::from_static("https://github.com/metaclaw/metaclaw"),
            ));
        }
        let default_model = Some(config.llm.model_id.clone()).filter(|m| !m.is_empty());
        Ok(Self {
            client,
            base,
            targets,
            format,
            pass_client_auth: auth.is_none() && config.proxy.api_key.is_none(),
            extra_headers,
            force_model: config.llm.force_model && default_model.is_some(),
            default_model,
            first_byte_timeout: timeouts.first_byte.get(),
            between_chunks_timeout: timeouts.between_chunks.get(),
        })
    }

    /// Sends `body` to `{base}{path}` of the primary, waiting at most the
    /// first-byte timeout for the response head. On a connect error, a
    /// timeout, a 5xx or a 429 the next fallback is tried after a backoff;
    /// the last one's answer (or error) is what the client gets. Nothing
    /// has reached the client yet at any of these points.
    pub async fn post(
        &self,
        path: &str,
        client_headers: &HeaderMap,
        body: Bytes,
    ) -> Result<Sent, ApiError> {
        let headers = self.request_headers(client_headers);
        let mut backoff = FALLBACK_BACKOFF;
        let last = self.targets.len().saturating_sub(1);
        for (i, target) in self.targets.iter().enumerate() {
            let is_last = i == last;
            let body = match &target.model {
                Some(model) => with_model(&body, model).unwrap_or_else(|| body.clone()),
                None => body.clone(),
            };
            let mut headers = headers.clone();
            if let Some(auth) = &target.auth {
                auth.apply(&mut headers);
            } else if i > 0 {
                // A fallback without a key of its own gets no credential:
                // the client's key is for the primary.
                for name in &crate::http::CREDENTIAL_HEADERS {
                    headers.remove(name);
                }
            }
            let wait_hint = match self.send_once(&target.base, path, headers, body).await {
                Err(e) if is_last => return Err(e),
                Err(e) => {
                    tracing::warn!(base = %target.base, "upstream failed ({e}); trying the next fallback");
                    None
                }
                Ok(response) if is_last || !crate::http::is_transient(response.status()) => {
                    if i > 0 {
                        tracing::info!(fallback = i, base = %target.base, "served by a fallback");
                    }
                    return Ok(Sent {
                        response,
                        target: i,
                        model: target.model.clone(),
                    });
                }
                Ok(response) => {
                    tracing::warn!(
                        base = %target.base,
                        status = response.status().as_u16(),
                        "upstream failed; trying the next fallback"
                    );
                    crate::http::retry_after(response.headers())
                }
            };
            tokio::time::sleep(backoff.wait(wait_hint)).await;
        }
        Err(ApiError::Internal("no upstream configured".into()))
    }

    /// What every attempt sends besides the credential.
    fn request_headers(&self, client_headers: &HeaderMap) -> HeaderMap {
        let mut headers = forward_request_headers(client_headers);
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if self.pass_client_auth {
            for name in crate::http::CREDENTIAL_HEADERS {
                if let Some(v) = client_headers.get(&name) {
                    headers.insert(name, v.clone());
                }
            }
        }
        crate::http::add_version(self.format, &mut headers);
        for (name, value) in &self.extra_headers {
            headers.insert(name.clone(), value.clone());
        }
        headers
    }

    async fn send_once(
        &self,
        base: &str,
        path: &str,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<reqwest::Response, ApiError> {
        let send = self
            .client
            .post(format!("{base}{path}"))
            .headers(headers)
            .body(body)
            .send();
        match tokio::time::timeout(self.first_byte_timeout, send).await {
            Err(_) => Err(ApiError::UpstreamTimeout {
                phase: "waiting for the response to start",
                secs: self.first_byte_timeout.as_secs_f64(),
            }),
            Ok(Err(e)) => Err(transport_error(base, &e)),
            Ok(Ok(response)) => Ok(response),
        }
    }

    pub async fn get(&self, path: &str) -> Result<reqwest::Response, ApiError> {
        self.get_within(path, Duration::from_secs(10)).await
    }

    /// `GET {base}{path}` of the primary, with its key and the headers its
    /// API needs (Anthropic's version), answered within `limit`.
    pub async fn get_within(
        &self,
        path: &str,
        limit: Duration,
    ) -> Result<reqwest::Response, ApiError> {
        let mut headers = self.request_headers(&HeaderMap::new());
        headers.remove(header::CONTENT_TYPE);
        if let Some(auth) = self.targets.first().and_then(|t| t.auth.as_ref()) {
            auth.apply(&mut headers);
        }
        let req = self
            .client
            .get(format!("{}{path}", self.base))
            .headers(headers);
        match tokio::time::timeout(limit, req.send()).await {
            Err(_) => Err(ApiError::UpstreamTimeout {
                phase: "GET",
                secs: limit.as_secs_f64(),
            }),
            Ok(Err(e)) => Err(self.transport_error(&e)),
            Ok(Ok(r)) => Ok(r),
        }
    }

    pub fn transport_error(&self, e: &reqwest::Error) -> ApiError {
        transport_error(&self.base, e)
    }
}

/// `body` with its `model` replaced (a fallback serving another model).
fn with_model(body: &Bytes, model: &str) -> Option<Bytes> {
    let mut map: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(body).ok()?;
    map.insert("model".into(), serde_json::Value::String(model.to_string()));
    serde_json::to_vec(&map).ok().map(Bytes::from)
}

fn transport_error(base: &str, e: &reqwest::Error) -> ApiError {
    ApiError::UpstreamUnreachable {
        base: base.to_string(),
        reason: crate::http::describe(e),
    }
}

pub fn forward_request_headers(client: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(client.len());
    for (name, value) in client {
        let n = name.as_str();
        if DROP_REQUEST_HEADERS.contains(&n) || n.starts_with("x-metaclaw-") {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

pub fn forward_response_headers(upstream: &reqwest::header::HeaderMap, out: &mut HeaderMap) {
    for (name, value) in upstream {
        if DROP_RESPONSE_HEADERS.contains(&name.as_str()) {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_and_hop_headers_stay_behind() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("authorization", "Bearer proxy-token"),
            ("x-api-key", "k"),
            ("host", "127.0.0.1"),
            ("content-length", "5"),
            ("x-session-id", "s"),
            ("x-metaclaw-debug", "1"),
            ("accept-encoding", "gzip"),
            ("openai-beta", "assistants=v2"),
            ("traceparent", "00-abc-def-01"),
            ("x-stainless-os", "Linux"),
        ] {
            h.insert(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        let out = forward_request_headers(&h);
        let names: Vec<&str> = out.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, vec!["openai-beta", "traceparent", "x-stainless-os"]);
    }
}
