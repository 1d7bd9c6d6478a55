//! The wire formats metaclaw speaks, below the rest of the host (cargo
//! enforces it: this crate depends on no host code). Split by job:
//!
//! - [`request`]: the hot-path view of a chat request, and the Anthropic
//!   and Responses requests translated to and from chat form;
//! - [`response`]: whole answers and error bodies, translated;
//! - [`stream`]: the SSE parser, stream transcoders, and the assembly of a
//!   stream into one answer;
//! - [`text`]: the text of a message;
//! - [`agent`]: agents' request quirks (OpenClaw's);
//! - [`api`]: which API a client or an upstream speaks;
//! - [`error`]: what the translators and parsers refuse.

pub mod agent;
pub mod api;
pub mod error;
pub mod request;
pub mod response;
pub mod stream;
pub mod text;

pub use api::{ApiFormat, Front};
pub use error::{Error, Result};

/// Seconds since the Unix epoch (0 before it): the `created` of an answer.
pub(crate) fn unix_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}
