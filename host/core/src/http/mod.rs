//! HTTP shared by the proxy, the admin routes and every client metaclaw
//! runs (upstream, judge and evolver LLMs, embeddings, the CLI): one way to
//! build a client, to send a key in each API's convention, to read
//! `Retry-After` and to back off.

mod auth;
mod client;
mod retry;

pub use auth::{
    ANTHROPIC_VERSION, CREDENTIAL_HEADERS, Credential, InvalidKey, add_version,
    json_request_headers,
};
pub use client::{ClientError, ClientSpec, Purpose};
pub use retry::{
    Backoff, GaveUp, TryFailed, answer_text, is_transient, parse_retry_after, retry_after,
    until_deadline,
};

/// A host as written in a URL: an IPv6 literal in brackets.
pub fn url_host(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

/// A `Content-Type`'s media type without parameters, lowercase
/// (`Text/Plain; charset=utf-8` → `text/plain`).
pub fn media_type(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// What went wrong with a request that got no response, for a log or an
/// error message: the kind, then the innermost cause ("connection closed
/// before message completed"), since the layers above it only say where.
pub fn describe(e: &reqwest::Error) -> String {
    let reason = if e.is_connect() {
        "connection failed"
    } else if e.is_timeout() {
        "timed out"
    } else {
        "transport error"
    };
    format!("{reason}: {}", innermost(e))
}

/// The innermost cause of `e`: what happened, not where.
fn innermost(e: &reqwest::Error) -> String {
    let mut detail = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        detail = cause.to_string();
        source = cause.source();
    }
    detail
}
