//! The wire formats metaclaw speaks, below the rest of the host (cargo
//! enforces it: this crate depends on no host code).

pub mod anthropic;
pub mod assemble;
pub mod dialect;
pub mod error;
pub mod openclaw;
pub mod request;
pub mod responses;
pub mod sse;

pub use dialect::{ApiFormat, Front};
pub use error::{Error, Result};

/// Seconds since the Unix epoch (0 before it): the `created` of an answer.
pub(crate) fn unix_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}
