//! Whole (non-streamed) answers and error bodies, translated between chat
//! completions and the other APIs.

pub mod anthropic;
pub mod error_body;
pub mod responses;
