//! The proxy: OpenAI-compatible routes in front of the upstream LLM API.

pub mod assemble;
pub mod request;
pub mod sse;
pub mod turn;
pub mod upstream;
