//! The proxy: OpenAI- and Anthropic-compatible routes in front of the
//! upstream LLM API.

pub mod anthropic;
pub mod assemble;
pub mod dialect;
pub mod request;
pub mod responses;
pub mod sse;
pub mod turn;
pub mod upstream;
