//! The proxy: OpenAI- and Anthropic-compatible routes in front of the
//! upstream LLM API.

pub mod turn;
pub mod upstream;
