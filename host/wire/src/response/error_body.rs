//! Error bodies in each API's shape. Inside, an error is OpenAI's
//! `{"error": {"message", "type", "code"}}`; an Anthropic client parses
//! `{"type": "error", "error": {"type", "message"}}`.

use bytes::Bytes;
use serde_json::{Value, json};

fn error_type(status: u16) -> &'static str {
    match status {
        400 | 405 | 415 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        408 | 504 => "timeout_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    }
}

/// An OpenAI-style error body (or any upstream error body) as Anthropic's;
/// one already in Anthropic's shape passes through.
pub fn to_anthropic(status: u16, body: &Bytes) -> Bytes {
    let parsed = serde_json::from_slice::<Value>(body).unwrap_or(Value::Null);
    if parsed["type"] == "error" && parsed["error"].is_object() {
        return body.clone();
    }
    let message = parsed["error"]["message"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(2000).collect());
    Bytes::from(
        json!({"type": "error", "error": {"type": error_type(status), "message": message}})
            .to_string(),
    )
}

/// An Anthropic error body as OpenAI's, for a chat client.
pub fn to_openai(status: u16, body: &Bytes) -> Bytes {
    let parsed = serde_json::from_slice::<Value>(body).unwrap_or(Value::Null);
    match parsed["error"]["message"].as_str() {
        Some(message) if parsed["type"] == "error" => Bytes::from(
            json!({"error": {"message": message, "type": parsed["error"]["type"], "code": status}})
                .to_string(),
        ),
        _ => body.clone(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn errors_take_anthropics_shape() {
        let body = Bytes::from_static(br#"{"error":{"message":"slow down","type":"rate_limit"}}"#);
        let v: Value = serde_json::from_slice(&to_anthropic(429, &body)).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "rate_limit_error");
        assert_eq!(v["error"]["message"], "slow down");
        let back: Value =
            serde_json::from_slice(&to_openai(429, &Bytes::from(v.to_string()))).unwrap();
        assert_eq!(back["error"]["message"], "slow down");
    }
}
