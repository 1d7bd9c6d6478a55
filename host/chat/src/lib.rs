//! The trainable model's chat format, below the host (cargo enforces it:
//! this crate depends on no host code). The serving side of RL renders the
//! agent's messages to tokens once, samples, and parses the sampled tokens
//! back into the assistant message the agent gets:
//!
//! - [`render`]: messages (+ tools) → prompt token ids, with the model's
//!   own `tokenizer.json` and Jinja chat template;
//! - [`parse`]: a sampled completion → content, reasoning and tool calls,
//!   per model family.

pub mod parse;
pub mod render;
