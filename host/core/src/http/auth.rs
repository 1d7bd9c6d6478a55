//! A key sent in each API format's convention: OpenAI-compatible APIs take
//! `Authorization: Bearer <key>`, Anthropic's `x-api-key: <key>` with an
//! `anthropic-version`.

use axum::http::{HeaderMap, HeaderName, HeaderValue, header};

use metaclaw_wire::ApiFormat;

/// Sent to an Anthropic API when the client names no version.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");
const ANTHROPIC_VERSION_HEADER: HeaderName = HeaderName::from_static("anthropic-version");

/// Every header that carries a key, in either convention.
pub const CREDENTIAL_HEADERS: [HeaderName; 2] = [header::AUTHORIZATION, X_API_KEY];

/// A key that cannot be sent (the setting is named, never the key).
#[derive(Debug, thiserror::Error)]
#[error(
    "{what} contains characters not allowed in an HTTP header (a line break or a control character?): copy the key again"
)]
pub struct InvalidKey {
    what: String,
}

/// One API key as its format's header; marked sensitive, so that it never
/// reaches a log or a debug print.
#[derive(Clone)]
pub struct Credential {
    name: HeaderName,
    value: HeaderValue,
}

impl Credential {
    /// `None` for no key or an empty one. `what` names the setting the key
    /// came from, for the error.
    pub fn new(
        format: ApiFormat,
        key: Option<&str>,
        what: &str,
    ) -> Result<Option<Self>, InvalidKey> {
        let Some(key) = key.filter(|k| !k.is_empty()) else {
            return Ok(None);
        };
        let (name, text) = match format {
            ApiFormat::Openai => (header::AUTHORIZATION, format!("Bearer {key}")),
            ApiFormat::Anthropic => (X_API_KEY, key.to_string()),
        };
        let mut value = HeaderValue::from_str(&text).map_err(|_| InvalidKey {
            what: what.to_string(),
        })?;
        value.set_sensitive(true);
        Ok(Some(Self { name, value }))
    }

    /// Puts the key on `headers`, replacing any key there in either
    /// convention (only one may reach the API).
    pub fn apply(&self, headers: &mut HeaderMap) {
        for name in &CREDENTIAL_HEADERS {
            headers.remove(name);
        }
        headers.insert(self.name.clone(), self.value.clone());
    }
}

/// The headers of metaclaw's own JSON request to an API in `format`: the
/// content type, `key` in the format's convention (`what` names its
/// setting, for the error), and Anthropic's version.
pub fn json_request_headers(
    format: ApiFormat,
    key: Option<&str>,
    what: &str,
) -> Result<HeaderMap, InvalidKey> {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(credential) = Credential::new(format, key, what)? {
        credential.apply(&mut headers);
    }
    add_version(format, &mut headers);
    Ok(headers)
}

/// The headers `format` needs besides the key: Anthropic's version, unless
/// one is set already (a client's own is passed on).
pub fn add_version(format: ApiFormat, headers: &mut HeaderMap) {
    if format == ApiFormat::Anthropic && !headers.contains_key(ANTHROPIC_VERSION_HEADER) {
        headers.insert(
            ANTHROPIC_VERSION_HEADER,
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(
        format: ApiFormat,
        key: Option<&str>,
        before: &[(&'static str, &'static str)],
    ) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (k, v) in before {
            headers.insert(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        if let Some(c) = Credential::new(format, key, "llm.api_key").unwrap() {
            c.apply(&mut headers);
        }
        add_version(format, &mut headers);
        headers
    }

    #[test]
    fn openai_takes_a_bearer_token_and_no_version() {
        let h = sent(ApiFormat::Openai, Some("sk-1"), &[("x-api-key", "client")]);
        assert_eq!(h["authorization"], "Bearer sk-1");
        assert!(h["authorization"].is_sensitive());
        assert!(!h.contains_key("x-api-key"), "only one key reaches the API");
        assert!(!h.contains_key("anthropic-version"));
    }

    #[test]
    fn anthropic_takes_x_api_key_and_a_version_unless_the_client_named_one() {
        let h = sent(
            ApiFormat::Anthropic,
            Some("sk-ant"),
            &[("authorization", "Bearer client")],
        );
        assert_eq!(h["x-api-key"], "sk-ant");
        assert!(h["x-api-key"].is_sensitive());
        assert!(!h.contains_key("authorization"));
        assert_eq!(h["anthropic-version"], ANTHROPIC_VERSION);
        let h = sent(
            ApiFormat::Anthropic,
            None,
            &[("anthropic-version", "2024-01-01")],
        );
        assert_eq!(h["anthropic-version"], "2024-01-01");
        assert!(!h.contains_key("x-api-key"));
    }

    #[test]
    fn no_key_or_an_empty_one_sends_nothing_and_a_bad_one_names_its_setting() {
        assert!(
            Credential::new(ApiFormat::Openai, None, "k")
                .unwrap()
                .is_none()
        );
        assert!(
            Credential::new(ApiFormat::Openai, Some(""), "k")
                .unwrap()
                .is_none()
        );
        let e = Credential::new(
            ApiFormat::Openai,
            Some("sk-1\nx"),
            "llm.fallbacks[0].api_key",
        )
        .err()
        .unwrap()
        .to_string();
        assert!(
            e.starts_with("llm.fallbacks[0].api_key contains characters"),
            "{e}"
        );
        assert!(!e.contains("sk-1"), "the key is never shown: {e}");
    }
}
