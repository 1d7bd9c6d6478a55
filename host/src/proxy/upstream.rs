//! The upstream LLM API: one pooled HTTP client, and the rules for which
//! headers cross the proxy in each direction.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use bytes::Bytes;

use crate::config::{Loaded, Provider};
use crate::error::ApiError;

#[derive(Clone)]
pub struct Upstream {
    client: reqwest::Client,
    /// e.g. `https://api.openai.com/v1`, no trailing slash.
    pub base: String,
    auth: Option<HeaderValue>,
    /// Forward the client's own `Authorization` (no key configured here and
    /// the proxy has no token of its own, so it must be the upstream's).
    pass_client_auth: bool,
    extra_headers: Vec<(HeaderName, HeaderValue)>,
    pub default_model: Option<String>,
    pub force_model: bool,
    pub first_byte_timeout: Duration,
    pub between_chunks_timeout: Duration,
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
    pub fn new(loaded: &Loaded, base: String) -> anyhow::Result<Self> {
        let config = &loaded.config;
        let timeouts = &config.proxy.timeouts;
        let client = reqwest::Client::builder()
            .connect_timeout(timeouts.connect.get())
            .tcp_nodelay(true)
            .pool_max_idle_per_host(256)
            .pool_idle_timeout(Duration::from_secs(90))
            .tcp_keepalive(Duration::from_secs(30))
            .user_agent(concat!("metaclaw/", env!("CARGO_PKG_VERSION")))
            .build()?;
        let auth = match &config.llm.api_key {
            Some(key) if !key.is_empty() => {
                let mut v = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                    anyhow::anyhow!("llm.api_key contains characters not allowed in a header")
                })?;
                v.set_sensitive(true);
                Some(v)
            }
            _ => None,
        };
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
            pass_client_auth: auth.is_none() && config.proxy.api_key.is_none(),
            auth,
            extra_headers,
            force_model: config.llm.force_model && default_model.is_some(),
            default_model,
            first_byte_timeout: timeouts.first_byte.get(),
            between_chunks_timeout: timeouts.between_chunks.get(),
        })
    }

    /// Sends `body` to `{base}{path}`, waiting at most the first-byte
    /// timeout for the response head.
    pub async fn post(
        &self,
        path: &str,
        client_headers: &HeaderMap,
        body: Bytes,
    ) -> Result<reqwest::Response, ApiError> {
        let mut headers = forward_request_headers(client_headers);
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(auth) = &self.auth {
            headers.insert(header::AUTHORIZATION, auth.clone());
        } else if self.pass_client_auth
            && let Some(v) = client_headers.get(header::AUTHORIZATION)
        {
            headers.insert(header::AUTHORIZATION, v.clone());
        }
        for (name, value) in &self.extra_headers {
            headers.insert(name.clone(), value.clone());
        }
        let send = self
            .client
            .post(format!("{}{path}", self.base))
            .headers(headers)
            .body(body)
            .send();
        match tokio::time::timeout(self.first_byte_timeout, send).await {
            Err(_) => Err(ApiError::UpstreamTimeout {
                phase: "waiting for the response to start",
                secs: self.first_byte_timeout.as_secs(),
            }),
            Ok(Err(e)) => Err(self.transport_error(&e)),
            Ok(Ok(response)) => Ok(response),
        }
    }

    pub async fn get(&self, path: &str) -> Result<reqwest::Response, ApiError> {
        let mut req = self.client.get(format!("{}{path}", self.base));
        if let Some(auth) = &self.auth {
            req = req.header(header::AUTHORIZATION, auth.clone());
        }
        match tokio::time::timeout(Duration::from_secs(10), req.send()).await {
            Err(_) => Err(ApiError::UpstreamTimeout {
                phase: "GET",
                secs: 10,
            }),
            Ok(Err(e)) => Err(self.transport_error(&e)),
            Ok(Ok(r)) => Ok(r),
        }
    }

    pub fn transport_error(&self, e: &reqwest::Error) -> ApiError {
        let reason = if e.is_connect() {
            "connection failed".to_string()
        } else if e.is_timeout() {
            "timed out".to_string()
        } else {
            "transport error".to_string()
        };
        let detail = std::error::Error::source(e)
            .map(|s| s.to_string())
            .unwrap_or_else(|| e.to_string());
        ApiError::UpstreamUnreachable {
            base: self.base.clone(),
            reason: format!("{reason}: {detail}"),
        }
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
