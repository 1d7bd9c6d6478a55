//! The wire formats metaclaw speaks, below the rest of the host (cargo
//! enforces it: this crate depends on no host code). Split by job:
//!
//! - [`request`]: the hot-path view of a chat request, and the Anthropic
//!   and Responses requests translated to and from chat form;
//! - [`response`]: whole answers and error bodies, translated;
//! - [`stream`]: the SSE parser, stream transcoders, and the assembly of a
//!   stream into one answer;
//! - [`text`]: the text of a message;
//! - [`recorded`]: a recorded chat message and completion, read into types;
//! - [`agent`]: agents' request quirks (OpenClaw's);
//! - [`api`]: which API a client or an upstream speaks;
//! - [`error`]: what the translators and parsers refuse.

pub mod agent;
pub mod api;
pub mod error;
pub mod recorded;
pub mod request;
pub mod response;
pub mod stream;
pub mod text;

pub use api::{ApiFormat, Front};
pub use error::{Error, Result};
/// Readers of JSON that is not metaclaw's own, for the host's types too.
pub use request::{Lenient, Obj};

/// The captured OpenClaw requests (`tests/fixtures/openclaw/`), for tests.
#[cfg(test)]
pub(crate) fn openclaw_fixture(file: &str) -> serde_json::Value {
    let path = format!(
        "{}/../../tests/fixtures/openclaw/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let capture: serde_json::Value = serde_json::from_str(&text).unwrap();
    capture["body"].clone()
}

/// Seconds since the Unix epoch (0 before it): the `created` of an answer.
pub(crate) fn unix_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}
